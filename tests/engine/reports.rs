//! Reports end to end: every output format from a real run, `benchmark from-file`
//! round trips, `--request-log` through Ctrl-C, request samples, extras, progress on a
//! terminal and off it, `config`, `completions`, and API keys in no output at all.

use crate::scenario::Bench;
use crate::support::{Finished, llmsurge, mock, wait_completed, wait_for_children, wait_run};
use llmsurge::mock::MockConfig;
use llmsurge::report::{Report, RequestEntry};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Requests of ~60 ms with errors: every status and metric has values.
fn streaming_mock(error_rate: f64) -> MockConfig {
    MockConfig {
        ttft_ms: 20.0,
        itl_ms: 4.0,
        output_tokens: 10,
        error_rate,
        ..MockConfig::instant()
    }
}

/// Runs any llmsurge command to the end, bounded in time.
fn bounded(configure: impl FnOnce(&mut Command)) -> Finished {
    let mut cmd = llmsurge();
    configure(&mut cmd);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("llmsurge starts");
    wait_run(child, tempfile::tempdir().expect("tempdir"))
}

fn read_log(path: &Path) -> Vec<RequestEntry> {
    std::fs::read_to_string(path)
        .expect("the request log exists")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one request"))
        .collect()
}

#[test]
fn every_format_is_written_after_a_run_and_agrees_with_the_json() {
    let server = mock(streaming_mock(0.15));
    let url = server.base_url();
    let run = Bench::target(&url)
        .constant("20,40")
        .max_seconds(2)
        .data("prompt_tokens=16,output_tokens=10")
        .outputs("json,csv,html,yaml,console,extra/copy.json")
        .arg("--sample-requests", "3")
        .arg("--output-extras", r#"{"gpu": "H100", "replicas": 2}"#)
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let dir = run.dir.path();
    let report = run.report();
    assert_eq!(report.benchmarks.len(), 2);
    assert_eq!(report.metadata.extras["gpu"], "H100");
    assert_eq!(report.metadata.extras["replicas"], 2);
    let copy = Report::load(&dir.join("extra/copy.json")).expect("the named JSON file");
    assert_eq!(copy.benchmarks, report.benchmarks);

    // CSV: a row per benchmark, the same numbers.
    let mut csv = csv::Reader::from_path(dir.join("benchmarks.csv")).expect("benchmarks.csv");
    let header = csv.headers().expect("header").clone();
    assert_eq!(
        header.iter().collect::<Vec<_>>(),
        llmsurge::report::csv::header(&report)
    );
    let rows: Vec<_> = csv.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), 2);
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    for (row, b) in rows.iter().zip(&report.benchmarks) {
        assert_eq!(row[col("requests.errored")], b.requests.errored.to_string());
        assert_eq!(
            row[col("throughput.requests_per_s")]
                .parse::<f64>()
                .expect("f64"),
            b.throughput.requests_per_s
        );
        assert_eq!(&row[col("extras.gpu")], "H100");
    }

    // YAML and HTML exist and carry the run.
    let yaml = std::fs::read_to_string(dir.join("benchmarks.yaml")).expect("benchmarks.yaml");
    assert!(yaml.starts_with("schema_version: 1\n"), "{}", &yaml[..80]);
    assert!(yaml.contains("constant"));
    let html = std::fs::read_to_string(dir.join("benchmarks.html")).expect("benchmarks.html");
    assert!(html.contains("constant@40") && html.contains("uPlot"));
    // The end of the run says where the page is and how to open it.
    let page = std::path::absolute(dir.join("benchmarks.html")).expect("absolute path");
    assert!(
        run.stderr
            .contains(&format!("open file://{} in a browser", page.display())),
        "{}",
        run.stderr
    );

    // Samples: at most 3 per status and benchmark, each of its own status.
    assert_eq!(report.request_samples.len(), 2);
    let mut errored = 0;
    for (s, b) in report.request_samples.iter().zip(&report.benchmarks) {
        assert_eq!(s.benchmark, b.index);
        assert_eq!(s.successful.len() as u64, b.requests.completed.min(3));
        assert_eq!(s.errored.len() as u64, b.requests.errored.min(3));
        assert!(
            s.successful
                .iter()
                .all(|e| e.ttft_ms.is_some() && e.error.is_none())
        );
        assert!(s.errored.iter().all(|e| e.error_kind.is_some()));
        errored += s.errored.len();
    }
    assert!(errored > 0, "a 15% error rate gave no errored sample");

    // Not a terminal: plain progress lines, a line per benchmark, the console tables.
    assert!(run.stderr.contains("in flight"), "{}", run.stderr);
    assert!(
        run.stderr.contains("[2/2] constant@40: done in"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("Latency of successful requests"));
}

#[test]
fn from_file_rerenders_without_running_and_keeps_every_metric() {
    let server = mock(streaming_mock(0.1));
    let url = server.base_url();
    let run = Bench::target(&url)
        .profile("concurrent")
        .rate("2,4")
        .max_requests(30)
        .data("prompt_tokens=16,output_tokens=10")
        .outputs("json")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let served = server.stats().requests.chat_completions;
    let out = tempfile::tempdir().expect("tempdir");
    let again = bounded(|cmd| {
        cmd.args(["benchmark", "from-file"])
            .arg(run.report_path())
            .args(["--outputs", "json,html,csv,yaml,console", "--output-dir"])
            .arg(out.path());
    });
    assert_eq!(again.code(), 0, "{}", again.stderr);
    assert_eq!(
        server.stats().requests.chat_completions,
        served,
        "from-file sent requests"
    );
    let before: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.report_path()).expect("read")).expect("JSON");
    let after: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("benchmarks.json")).expect("read"))
            .expect("JSON");
    assert_eq!(before, after, "json → from-file → json changed the report");
    for name in ["benchmarks.html", "benchmarks.csv", "benchmarks.yaml"] {
        assert!(out.path().join(name).is_file(), "{name}");
    }
    assert!(again.stdout.contains("concurrent@4"), "{}", again.stdout);

    // The checked-in fixture round-trips the same way.
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/report-v1.json");
    let again = bounded(|cmd| {
        cmd.args([
            "benchmark",
            "from-file",
            fixture,
            "--outputs",
            "json",
            "--output-dir",
        ])
        .arg(out.path());
    });
    assert_eq!(again.code(), 0, "{}", again.stderr);
    let before: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture).expect("read")).expect("JSON");
    let after: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("benchmarks.json")).expect("read"))
            .expect("JSON");
    assert_eq!(before, after);
}

#[test]
fn bad_report_inputs_are_one_line_usage_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbled = dir.path().join("garbled.json");
    std::fs::write(&garbled, "{\"schema_version\": 1,\n \"metadata\": [}").expect("write");
    let newer = dir.path().join("newer.json");
    std::fs::write(&newer, r#"{"schema_version": 999}"#).expect("write");
    let missing = dir.path().join("missing.json");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "benchmark".into(),
                "from-file".into(),
                missing.display().to_string(),
            ],
            "cannot read",
        ),
        (
            vec![
                "benchmark".into(),
                "from-file".into(),
                garbled.display().to_string(),
            ],
            "line 2",
        ),
        (
            vec![
                "benchmark".into(),
                "from-file".into(),
                newer.display().to_string(),
            ],
            "schema_version 999",
        ),
        (
            vec![
                "benchmark".into(),
                "from-file".into(),
                garbled.display().to_string(),
                "--outputs".into(),
                "report.pdf".into(),
            ],
            "--outputs",
        ),
        (
            vec![
                "benchmark".into(),
                "run".into(),
                "--output-extras".into(),
                "[1, 2]".into(),
            ],
            "--output-extras",
        ),
        (
            vec![
                "benchmark".into(),
                "run".into(),
                "--outputs".into(),
                "summary.txt".into(),
            ],
            "--outputs",
        ),
        (
            vec![
                "benchmark".into(),
                "run".into(),
                "--request-log".into(),
                "/proc/no/such/dir/requests.jsonl".into(),
                "--max-requests".into(),
                "1".into(),
            ],
            "--request-log",
        ),
    ];
    for (args, mention) in cases {
        let out = bounded(|cmd| {
            cmd.args(&args).current_dir(dir.path());
        });
        assert_eq!(out.code(), 2, "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.starts_with("error: ") && out.stderr.contains(mention),
            "{args:?}: {}",
            out.stderr
        );
    }
}

#[test]
fn the_request_log_keeps_every_request_through_ctrl_c() {
    let server = mock(MockConfig {
        ttft_ms: 100.0,
        itl_ms: 10.0,
        output_tokens: 20,
        ..MockConfig::instant()
    });
    let url = server.base_url();
    let (child, dir) = Bench::target(&url)
        .concurrent(6)
        .workers(2)
        .data("prompt_tokens=16,output_tokens=20")
        .max_seconds(60)
        .request_log("requests.jsonl")
        .outputs("json")
        .start(|cmd| {
            cmd.process_group(0);
        });
    let pgid = child.id();
    wait_for_children(pgid, 2);
    wait_completed(&server, 12);
    kill(Pid::from_raw(pgid as i32), Signal::SIGINT).expect("SIGINT");
    let run = wait_run(child, dir);
    assert_eq!(
        run.code(),
        llmsurge::exit_codes::INTERRUPTED,
        "{}",
        run.stderr
    );
    let report = run.report();
    let created: u64 = report.benchmarks.iter().map(|b| b.requests.created).sum();
    let log = read_log(&run.dir.path().join("requests.jsonl"));
    assert!(created > 10, "created {created}");
    assert_eq!(
        log.len() as u64,
        created,
        "one log line per created request"
    );
    let completed = log
        .iter()
        .filter(|e| e.status == llmsurge_proto::RequestStatus::Completed)
        .count() as u64;
    assert_eq!(completed, report.benchmarks[0].requests.completed);
    let mut slots: Vec<u64> = log.iter().map(|e| e.slot).collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), log.len(), "no request logged twice");
    assert!(
        log.iter()
            .all(|e| e.benchmark == 0 && e.end_time >= e.scheduled_time)
    );
}

#[test]
fn api_keys_appear_in_no_output() {
    const FLAG_KEY: &str = "sk-flag-8f2c1e9d7b";
    const ENV_KEY: &str = "sk-openai-3a7d5c1b9e";
    const HEADER_KEY: &str = "sk-header-6e4b2a8c0f";
    let server = mock(streaming_mock(0.2));
    let url = server.base_url();
    let kwargs = format!(r#"{{"headers": {{"X-Api-Key": "{HEADER_KEY}"}}}}"#);
    let (child, dir) = Bench::target(&url)
        .constant(20)
        .max_requests(20)
        .arg("--api-key", FLAG_KEY)
        .arg("--backend-kwargs", &kwargs)
        .outputs("json,csv,html,yaml,console")
        .request_log("requests.jsonl")
        .arg("--sample-requests", "50")
        .start(|cmd| {
            cmd.env("OPENAI_API_KEY", ENV_KEY);
        });
    let run = wait_run(child, dir);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let dir = run.dir.path();
    let rerender = bounded(|cmd| {
        cmd.args(["benchmark", "from-file"])
            .arg(dir.join("benchmarks.json"))
            .args([
                "--outputs",
                "again.html,again.csv,again.yaml,console",
                "--output-dir",
            ])
            .arg(dir);
    });
    assert_eq!(rerender.code(), 0, "{}", rerender.stderr);
    let config = bounded(|cmd| {
        cmd.arg("config")
            .env("LLMSURGE_API_KEY", FLAG_KEY)
            .env("OPENAI_API_KEY", ENV_KEY)
            .env("LLMSURGE_BACKEND_KWARGS", &kwargs);
    });
    assert_eq!(config.code(), 0, "{}", config.stderr);
    let dry_run = bounded(|cmd| {
        cmd.args(["benchmark", "run", "--dry-run", "--api-key", FLAG_KEY])
            .args(["--backend-kwargs", &kwargs]);
    });
    assert_eq!(dry_run.code(), 0, "{}", dry_run.stderr);

    let mut texts = vec![
        ("run stdout".to_string(), run.stdout.clone()),
        ("run stderr".to_string(), run.stderr.clone()),
        ("from-file stdout".to_string(), rerender.stdout.clone()),
        ("from-file stderr".to_string(), rerender.stderr.clone()),
        ("config".to_string(), config.stdout.clone()),
        ("dry run".to_string(), dry_run.stdout.clone()),
    ];
    let mut files = 0;
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        texts.push((
            path.display().to_string(),
            std::fs::read_to_string(&path).expect("a text file"),
        ));
        files += 1;
    }
    // json, csv, html, yaml, the request log, and the three re-rendered files.
    assert_eq!(files, 8, "{texts:?}");
    for (name, text) in &texts {
        for key in [FLAG_KEY, ENV_KEY, HEADER_KEY] {
            assert!(!text.contains(key), "{key} leaked into {name}");
        }
    }
    // The outputs were really produced, and the key reached the report as redacted.
    let report = run.report();
    assert_eq!(report.args["backend"]["api_key"], "<redacted>");
    assert_eq!(
        report.args["backend"]["headers"][0],
        serde_json::json!(["X-Api-Key", "<redacted>"])
    );
    assert!(
        config
            .stdout
            .contains("LLMSURGE_API_KEY=<set in the environment; redacted>")
    );
    assert_eq!(read_log(&dir.join("requests.jsonl")).len(), 20);
}

#[test]
fn config_prints_a_block_the_shell_and_llmsurge_accept() {
    let out = bounded(|cmd| {
        cmd.arg("config")
            .env("LLMSURGE_MAX_SECONDS", "7s")
            .env("LLMSURGE_OUTPUT_EXTRAS", r#"{"gpu": "H100 80GB"}"#);
    });
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("\nLLMSURGE_MAX_SECONDS=7s\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("# default: json,csv,html,console\n"));
    assert!(out.stdout.contains("LLMSURGE_MOCK_TTFT_MS="));
    let dir = tempfile::tempdir().expect("tempdir");
    let env_file = dir.path().join("llmsurge.env");
    std::fs::write(&env_file, &out.stdout).expect("write");
    // Sourced by a shell, the block gives the same values back…
    let shell = Command::new("bash")
        .arg("-c")
        .arg(r#"set -eu; set -a; . "$1"; set +a; printf '%s|%s' "$LLMSURGE_MAX_SECONDS" "$LLMSURGE_OUTPUT_EXTRAS""#)
        .arg("bash")
        .arg(&env_file)
        .output()
        .expect("bash runs");
    assert!(
        shell.status.success(),
        "{}",
        String::from_utf8_lossy(&shell.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&shell.stdout),
        r#"7s|{"gpu": "H100 80GB"}"#
    );
    // … and llmsurge accepts every variable it sets.
    let exported = Command::new("bash")
        .arg("-c")
        .arg(r#"set -eu; set -a; . "$1"; set +a; exec "$2" benchmark run --dry-run"#)
        .arg("bash")
        .arg(&env_file)
        .arg(env!("CARGO_BIN_EXE_llmsurge"))
        .env_remove("LLMSURGE_LOG")
        .output()
        .expect("bash runs");
    let stderr = String::from_utf8_lossy(&exported.stderr);
    assert!(exported.status.success(), "{stderr}");
    let plan: serde_json::Value = serde_json::from_slice(&exported.stdout).expect("the plan");
    assert_eq!(plan["limits"]["max_seconds"]["secs"], 7);
    assert_eq!(plan["reporting"]["extras"]["gpu"], "H100 80GB");
}

#[test]
fn completions_are_printed_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let out = bounded(|cmd| {
            cmd.args(["completions", shell]);
        });
        assert_eq!(out.code(), 0, "{shell}: {}", out.stderr);
        assert!(out.stdout.contains("max-seconds"), "{shell}");
        assert!(out.stdout.contains("from-file"), "{shell}");
        assert!(
            !out.stdout.contains("__worker"),
            "{shell}: the hidden subcommand"
        );
    }
    let bash = bounded(|cmd| {
        cmd.args(["completions", "bash"]);
    });
    let file = bash.dir.path().join("llmsurge.bash");
    std::fs::write(&file, &bash.stdout).expect("write");
    let check = Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .expect("bash runs");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let bad = bounded(|cmd| {
        cmd.args(["completions", "tcsh"]);
    });
    assert_eq!(bad.code(), 2);
}

/// Runs llmsurge with stderr on a pseudo-terminal; returns what the terminal showed.
fn run_on_a_terminal(args: &[&str]) -> (i32, String) {
    use nix::pty::openpty;
    use std::io::Read;
    // 80 columns: the live view must fit the smallest usual terminal.
    let size = nix::pty::Winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = openpty(Some(&size), None).expect("a pseudo-terminal");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = llmsurge();
    cmd.args(["benchmark", "run"])
        .args(args)
        .arg("--output-dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(pty.slave));
    let mut child = cmd.spawn().expect("llmsurge starts");
    // The parent's copy of the slave end went into `cmd`; drop it so EOF (EIO) comes
    // when the child exits.
    drop(cmd);
    let mut master = std::fs::File::from(pty.master);
    let reader = std::thread::spawn(move || {
        let mut shown = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            shown.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&shown).into_owned()
    });
    let deadline = std::time::Instant::now() + crate::support::RUN_BOUND;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("llmsurge did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code().unwrap_or(-1), reader.join().expect("reader"))
}

#[test]
fn a_terminal_gets_a_live_view_and_disable_flags_silence_it() {
    let server = mock(streaming_mock(0.0));
    let url = server.base_url();
    let common = [
        "--target",
        url.as_str(),
        "--profile",
        "constant",
        "--rate",
        "20",
        "--max-seconds",
        "3",
        "--outputs",
        "json",
        "--max-dispatch-lag",
        "10s",
    ];
    let (code, shown) = run_on_a_terminal(&common);
    assert_eq!(code, 0, "{shown}");
    // Redrawn in place (carriage returns or erase-line sequences), with the live facts.
    assert!(shown.contains('\r') || shown.contains("\x1b["), "{shown:?}");
    for fact in [
        "/3s",
        "done",
        "in flight",
        "req/s",
        "tok/s",
        "TTFT p50",
        "errors",
    ] {
        assert!(shown.contains(fact), "{fact} not shown: {shown:?}");
    }
    assert!(shown.contains("[1/1] constant@20: done in"), "{shown:?}");

    let mut quiet = common.to_vec();
    quiet.push("--disable-progress");
    let (code, shown) = run_on_a_terminal(&quiet);
    assert_eq!(code, 0, "{shown}");
    assert!(!shown.contains("in flight"), "{shown:?}");
    assert!(shown.contains("constant@20: done in"), "{shown:?}");

    // On a cold server: the runs above warmed this one, and a warm server is a warning,
    // which --disable-console-outputs keeps (the server fingerprint, docs/report.md).
    let cold = mock(streaming_mock(0.0));
    let cold_url = cold.base_url();
    let mut silent = common.to_vec();
    silent[1] = cold_url.as_str();
    silent.push("--disable-console-outputs");
    let (code, shown) = run_on_a_terminal(&silent);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(shown.trim(), "", "{shown:?}");
}
