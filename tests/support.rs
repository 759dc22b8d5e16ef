//! Helpers shared by the end-to-end tests: run the real `llmsurge` binary against the
//! real mock server over loopback, bounded in time, and read its report.

use llmsurge::mock::{MockConfig, MockServer};
use llmsurge::report::Report;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// No run may take longer than this, whatever goes wrong.
pub const RUN_BOUND: Duration = Duration::from_secs(90);

/// The lines of a mock's `--record` (or `--truth`) file, each a JSON object.
pub fn recorded(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("the record file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

/// One request as both sides saw it, joined on its `x-request-id`: the client's
/// `--request-log` line and the mock's `--truth` line.
#[derive(Debug)]
pub struct Joined {
    pub log: serde_json::Value,
    pub truth: serde_json::Value,
}

/// A request the stop cancelled this soon after its send may never have reached the
/// mock's handler (the connection closed before the server read it).
pub const CUT_AT_SEND_S: f64 = 0.05;

/// Whether logged request `log`, which the mock never saw, is one the stop cut off
/// within [`CUT_AT_SEND_S`] of its send.
pub fn cut_at_send(log: &serde_json::Value) -> bool {
    log["error_kind"] == "cancelled"
        && match (log["start_time"].as_f64(), log["end_time"].as_f64()) {
            (Some(start), Some(end)) => end - start < CUT_AT_SEND_S,
            _ => false,
        }
}

/// Joins a run's request log with a mock's `--truth` file (read after the mock stopped)
/// on `request_id`: every logged request must have exactly one truth line (two when the
/// log says it was resent after a reused connection lost it unanswered: the lost attempt
/// did not complete, and the resend is the one joined) and every truth line one logged
/// request, or the join says which is missing. A request the stop cut off as it was
/// sent ([`cut_at_send`]) may be missing from the truth: it is left out.
pub fn join_truth(log: &std::path::Path, truth: &std::path::Path) -> Vec<Joined> {
    let mut by_id: std::collections::HashMap<String, Vec<serde_json::Value>> =
        std::collections::HashMap::new();
    for line in recorded(truth) {
        let id = line["request_id"]
            .as_str()
            .unwrap_or_else(|| panic!("a truth line without a request id: {line}"))
            .to_string();
        by_id.entry(id).or_default().push(line);
    }
    let logged = recorded(log);
    let joined: Vec<Joined> = logged
        .into_iter()
        // A request never sent (cancelled before its turn) never reached the mock.
        .filter(|log| !log["start_time"].is_null())
        .filter_map(|log| {
            let id = log["request_id"]
                .as_str()
                .unwrap_or_else(|| panic!("a logged request without request_id: {log}"));
            let Some(mut attempts) = by_id.remove(id) else {
                assert!(
                    cut_at_send(&log),
                    "request {id} is logged but the mock never saw it: {log}"
                );
                return None;
            };
            let retried = log["retried"].as_bool().unwrap_or(false);
            assert_eq!(
                attempts.len(),
                if retried { 2 } else { 1 },
                "request {id} (retried: {retried}) reached the mock {} times",
                attempts.len()
            );
            let truth = attempts.pop().expect("one attempt at least");
            if let Some(lost) = attempts.first() {
                assert_ne!(
                    lost["outcome"], "completed",
                    "request {id} was resent although its first attempt completed"
                );
            }
            Some(Joined { log, truth })
        })
        .collect();
    assert!(
        by_id.is_empty(),
        "the mock saw requests the log does not have: {:?}",
        by_id.keys().collect::<Vec<_>>()
    );
    joined
}

/// A truth line's chunks that carried tokens: (instant, reasoning and content tokens).
pub fn token_chunks(truth: &serde_json::Value) -> Vec<(f64, u64)> {
    truth["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .map(|c| {
            let tokens = c["reasoning"].as_u64().unwrap_or(0) + c["content"].as_u64().unwrap_or(0);
            (c["time"].as_f64().expect("a chunk's time"), tokens)
        })
        .filter(|&(_, k)| k > 0)
        .collect()
}

/// The token gaps each request was read with, summed, for a run whose mock sent chunks
/// of 1, 3, 3 and 3 tokens (one reasoning token, then 3 a chunk). Without the
/// usage's reasoning count (the Messages API) the counts fit several packings and the
/// client picks by the chunks' timing (docs/metrics.md, "ITL"), so each request is
/// judged by the pace the mock kept, from the truth's chunk instants: where every chunk
/// gap is within 5% of their mean it must be read as sent, 9 gaps; elsewhere (a late
/// send on a busy machine shifts one gap against the next, and about 13% makes 3, 3, 2
/// the better fit: the client then rightly reads what was sent) as a packing the counts
/// allow, 3, 3, 3 (or 4, 4, 1), 3, 3, 2 or 3, 3, 1: 7 to 9 gaps. A request's gaps come
/// from its log line: its token span over its mean ITL.
pub fn short_first_chunk_gaps_read(joined: &[Joined]) -> u64 {
    let mut clean = 0;
    let mut logged_gaps = 0;
    for Joined { truth, log } in joined {
        let chunks = token_chunks(truth);
        let counts: Vec<u64> = chunks.iter().map(|c| c.1).collect();
        assert_eq!(
            counts,
            [1, 3, 3, 3],
            "the mock packed as configured: {truth}"
        );
        let span_ms = (log["last_token_time"].as_f64().expect("last_token_time")
            - log["first_token_time"].as_f64().expect("first_token_time"))
            * 1e3;
        let gaps = (span_ms / log["itl_ms"].as_f64().expect("itl_ms")).round() as u64;
        logged_gaps += gaps;
        let sent: Vec<f64> = chunks.windows(2).map(|w| w[1].0 - w[0].0).collect();
        let mean = sent.iter().sum::<f64>() / sent.len() as f64;
        if sent.iter().all(|g| (g - mean).abs() <= 0.05 * mean) {
            clean += 1;
            assert_eq!(
                gaps, 9,
                "a request the mock sent at an even pace is read as 3 tokens a chunk: \
                 chunk gaps {sent:?} s, {log}"
            );
        } else {
            assert!(
                (7..=9).contains(&gaps),
                "{gaps} token gaps is no packing of 1, 3, 3, 3: {log}"
            );
        }
    }
    assert!(
        clean > 0,
        "the mock kept no request's pace; nothing to judge the packing by"
    );
    logged_gaps
}

/// A mock server on an ephemeral port.
pub fn mock(config: MockConfig) -> MockServer {
    MockServer::start(MockConfig { port: 0, ..config }).expect("mock server starts")
}

/// A mock of `config` that records every request body (`--record`) in a file of a
/// fresh folder: the mock, the folder (kept while the test runs) and the file.
pub fn recording(config: MockConfig) -> (MockServer, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("record.jsonl");
    let server = mock(MockConfig {
        record: Some(path.clone()),
        ..config
    });
    (server, dir, path)
}

/// A tokenizer.json, made in `dir`, that counts as the mock's built-in tokenizer does (a
/// word or a single punctuation mark is a token, whitespace none): a test comparing a
/// prompt length the client planned with the mock's count gives it as `--processor`.
/// Under the default cl100k_base the two differ on ~3% of built-in prompts (a capital
/// "Told" is two cl100k tokens, one word to the mock).
pub fn mock_counting_tokenizer(dir: &std::path::Path) -> PathBuf {
    let vocab: serde_json::Map<String, serde_json::Value> = ["[UNK]"]
        .into_iter()
        .chain(llmsurge::data::corpus::WORDS.iter().copied())
        .enumerate()
        .map(|(i, w)| (w.to_string(), serde_json::json!(i)))
        .collect();
    // Splits at whitespace and before and after each punctuation mark, as the mock.
    write_tokenizer(
        &dir.join("mock-counting-tokenizer.json"),
        serde_json::json!({"type": "BertPreTokenizer"}),
        serde_json::json!({"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}),
    )
}

/// Writes a Hugging Face tokenizer.json of a pre-tokenizer and a model (nothing else:
/// no normalizer, template or decoder) at `path`.
pub fn write_tokenizer(
    path: &std::path::Path,
    pre_tokenizer: serde_json::Value,
    model: serde_json::Value,
) -> PathBuf {
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": null,
        "model": model
    });
    std::fs::write(path, serde_json::to_vec(&json).expect("json")).expect("write tokenizer");
    path.to_path_buf()
}

/// The binary, with every inherited `LLMSURGE_*` variable removed.
pub fn llmsurge() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_llmsurge"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LLMSURGE_") || name == "OPENAI_API_KEY" {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("RUST_BACKTRACE");
    cmd
}

/// The plan `benchmark run --dry-run ARGS` prints with `env` set, which must succeed.
pub fn dry_run(args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let mut cmd = llmsurge();
    cmd.args(["benchmark", "run", "--dry-run"]).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("llmsurge runs");
    assert!(
        out.status.success(),
        "{args:?} {env:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the plan is JSON")
}

/// What a finished run left behind.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub dir: tempfile::TempDir,
}

impl Finished {
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    pub fn report_path(&self) -> PathBuf {
        self.dir.path().join("benchmarks.json")
    }

    /// The header and the first row of the CSV report.
    pub fn csv_first_row(&self) -> CsvRow {
        let path = self.dir.path().join("benchmarks.csv");
        let mut csv = csv::Reader::from_path(path).expect("benchmarks.csv");
        let header = csv
            .headers()
            .expect("header")
            .iter()
            .map(String::from)
            .collect();
        let row = csv
            .records()
            .next()
            .expect("a row")
            .expect("the row parses");
        CsvRow {
            header,
            row: row.iter().map(String::from).collect(),
        }
    }

    /// The JSON report, parsed into the typed report.
    pub fn report(&self) -> Report {
        let bytes = std::fs::read(self.report_path())
            .unwrap_or_else(|e| panic!("no report ({e}); stderr:\n{}", self.stderr));
        serde_json::from_slice(&bytes).expect("the report parses")
    }
}

/// A CSV report's header and one row of it.
#[derive(Debug)]
pub struct CsvRow {
    pub header: Vec<String>,
    pub row: Vec<String>,
}

impl CsvRow {
    /// The row's cell in column `name`.
    pub fn cell(&self, name: &str) -> String {
        let i = self
            .header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {:?}", self.header));
        self.row[i].clone()
    }
}

/// Starts `llmsurge benchmark run ARGS --output-dir TMP` with piped output.
pub fn start_run(
    args: &[&str],
    configure: impl FnOnce(&mut Command),
) -> (Child, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = llmsurge();
    cmd.args(["benchmark", "run"])
        .args(args)
        .arg("--output-dir")
        .arg(dir.path());
    // Tests share a small, busy machine and run debug builds: only tests about the
    // client-bottleneck verdict hold dispatch lag to the default threshold.
    if !args.contains(&"--max-dispatch-lag") {
        cmd.args(["--max-dispatch-lag", "10s"]);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    configure(&mut cmd);
    let child = cmd.spawn().expect("llmsurge starts");
    (child, dir)
}

/// Waits for a started run, killing it after [`RUN_BOUND`].
pub fn wait_run(mut child: Child, dir: tempfile::TempDir) -> Finished {
    let deadline = Instant::now() + RUN_BOUND;
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("llmsurge did not finish within {RUN_BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Finished {
        status,
        stdout: out_reader.join().expect("stdout reader"),
        stderr: err_reader.join().expect("stderr reader"),
        dir,
    }
}

/// Runs `llmsurge benchmark run ARGS` to the end.
pub fn run(args: &[&str]) -> Finished {
    let (child, dir) = start_run(args, |_| {});
    wait_run(child, dir)
}

/// Asserts a run succeeded (exit code 0) and accounted for every request; its report.
pub fn ok_report(run: &Finished) -> Report {
    ended_with(run, 0)
}

/// Asserts a run ended with exit code `code` and accounted for every request; its
/// report.
pub fn ended_with(run: &Finished, code: i32) -> Report {
    assert_eq!(run.code(), code, "{}", run.stderr);
    let report = run.report();
    assert_identity(&report);
    report
}

/// Asserts the accounting identity on every benchmark of a report.
pub fn assert_identity(report: &Report) {
    for b in &report.benchmarks {
        let r = &b.requests;
        assert_eq!(
            r.in_flight, 0,
            "{}: nothing may be left in flight",
            b.strategy
        );
        assert_eq!(
            r.created,
            r.completed + r.errored + r.cancelled,
            "{}: created = completed + errored + cancelled ({r:?})",
            b.strategy
        );
    }
}

/// Process ids of the direct children of `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // The fields after the parenthesised command name: state, ppid, ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Waits until `pid` has at least `n` children; returns them.
pub fn wait_for_children(pid: u32, n: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = children_of(pid);
        if c.len() >= n {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "llmsurge never started {n} workers"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A listener that never accepts, its queue of one place filled by a connection of its
/// own: every later connect's SYN goes unanswered, as to a blackholed host or a server
/// whose accept loop hung, and the connect times out.
pub struct Blackhole {
    _listener: tokio::net::TcpListener,
    /// Holds the queue's place; `None` when a client's connect took it first.
    _filler: Option<std::net::TcpStream>,
    _runtime: tokio::runtime::Runtime,
}

impl Blackhole {
    /// Listens on 127.0.0.1:`port` (a dead server's: its old connections may linger).
    pub fn bind(port: u16) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("a runtime");
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let listener = {
            let _in = runtime.enter();
            let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
            socket.set_reuseaddr(true).expect("SO_REUSEADDR");
            socket.bind(addr).expect("the dead server's port");
            socket.listen(0).expect("listen")
        };
        let filler = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok();
        Blackhole {
            _listener: listener,
            _filler: filler,
            _runtime: runtime,
        }
    }
}

/// Waits until the mock holds at least `n` requests (its `/stats` counters).
pub fn wait_in_flight(server: &MockServer, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.stats().active_requests < n {
        assert!(
            Instant::now() < deadline,
            "the mock never had {n} requests in flight: {:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until the mock completed at least `n` responses.
pub fn wait_completed(server: &MockServer, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.stats().completed < n {
        assert!(
            Instant::now() < deadline,
            "the mock never completed {n} responses: {:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asserts what is deterministic about a schedule of one start every `interval_s` from t0
/// cut by `--max-seconds limit_s`, given the `created` starts and the report's
/// `stop_time_s`: the stop fired no earlier than the limit (a timer never fires early),
/// and no start due after it was created (one at most: the stop instant is read just
/// before the flag is raised). How many of the last starts due before the stop a busy
/// machine left unsent is noise: at least nine in ten of those due by the limit went
/// out (the tenth would mean a worker a tenth of the run behind).
pub fn assert_cut_at_the_limit(
    stop_time_s: Option<f64>,
    created: u64,
    interval_s: f64,
    limit_s: f64,
) {
    let stop = stop_time_s.expect("the time limit fired");
    assert!(
        stop >= limit_s,
        "stopped at {stop} s, before the {limit_s} s limit"
    );
    let due = |t: f64| (t / interval_s + 1e-9).floor() as u64 + 1;
    assert!(
        created <= due(stop) + 1,
        "{created} created, {} due by the stop at {stop} s",
        due(stop)
    );
    assert!(
        created * 10 >= due(limit_s) * 9,
        "{created} created, {} due by the {limit_s} s limit",
        due(limit_s)
    );
}

/// One HTTP/1.1 request a raw test server read whole.
#[derive(Debug)]
pub struct RawRequest {
    pub method: String,
    pub path: String,
    /// Names as sent, values as text.
    pub headers: Vec<(String, String)>,
}

impl RawRequest {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one request, head and `content-length` body, from `stream`; what follows it
/// stays in `buf` for the next. `None` at end of stream or on a read error.
pub fn read_request(stream: &mut impl Read, buf: &mut Vec<u8>) -> Option<RawRequest> {
    let mut chunk = vec![0u8; 1 << 16];
    let (head_len, request) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(n)) = req.parse(buf) {
            let request = RawRequest {
                method: req.method.unwrap_or_default().to_string(),
                path: req.path.unwrap_or_default().to_string(),
                headers: req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect(),
            };
            break (n, request);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let length: usize = request
        .header("content-length")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_len + length {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    buf.drain(..head_len + length);
    Some(request)
}

/// A raw server on loopback, for what the mock must not do (a protocol of its own, a
/// hostile answer): each accepted connection is handed to `serve` on a thread of its
/// own, with its index in accept order. Returns `http://ADDR`; its threads end with the
/// test's process.
pub fn raw_server(serve: impl Fn(std::net::TcpStream, usize) + Send + Sync + 'static) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let serve = std::sync::Arc::new(serve);
    std::thread::spawn(move || {
        for (connection, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            let serve = serve.clone();
            std::thread::spawn(move || serve(stream, connection));
        }
    });
    url
}

/// A usage error's one line: the run exited 2 and said exactly one `error:` line.
pub fn usage_error(run: &Finished) -> &str {
    assert_eq!(run.code(), 2, "{}", run.stderr);
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", run.stderr);
    errors[0]
}
