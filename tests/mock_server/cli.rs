//! The real binary: env configuration, listening line, signals, exit codes.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use super::*;

/// The real binary with `args`, `LLMSURGE_MOCK_*` variables replaced by `env`.
pub(super) fn spawn_binary(args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_llmsurge"));
    command
        .arg("mock-server")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars() {
        if name.starts_with("LLMSURGE_") || name == "SSLKEYLOGFILE" {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().copied());
    command.spawn().expect("binary spawns")
}

/// The first stdout line of `child`, waited for at most ten seconds.
fn first_line(child: &mut Child) -> String {
    let stdout = child.stdout.take().expect("stdout piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the listening line came")
}

/// Waits for `child` to exit, for at most ten seconds (then kills it).
pub(super) fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the mock did not exit in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
    }
    text
}

#[tokio::test]
async fn mock_binary_reads_env_and_stops_on_sigterm() {
    let env = [
        ("LLMSURGE_MOCK_OUTPUT_TOKENS", "5"),
        ("LLMSURGE_MOCK_MODEL", "m1,m2"),
        ("LLMSURGE_MOCK_SEED", "9"),
        // Zero latency and a fixed length; the explicit OUTPUT_TOKENS still wins.
        ("LLMSURGE_MOCK_INSTANT", "1"),
    ];
    let mut child = spawn_binary(&["--port", "0"], &env);
    let line = first_line(&mut child);
    let base = line
        .trim_end()
        .strip_prefix("listening on ")
        .expect("listening line")
        .to_string();
    assert!(base.starts_with("http://127.0.0.1:"), "{line}");
    let outcome = bounded(async {
        let c = client();
        let value = json_of(
            post(
                &c,
                format!("{base}/v1/chat/completions"),
                json!({"model": "m2", "messages": []}),
            )
            .await,
        )
        .await;
        assert_eq!(value["usage"]["completion_tokens"], 5);
        let models = json_of(
            c.get(format!("{base}/v1/models"))
                .send()
                .await
                .expect("models"),
        )
        .await;
        assert_eq!(models["data"].as_array().expect("data").len(), 2);
    });
    tokio::time::timeout(TEST_BOUND, outcome)
        .await
        .expect("in time");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal sent");
    let status = wait_exit(&mut child);
    assert_eq!(
        status.code(),
        Some(0),
        "graceful exit: {}",
        stderr_of(&mut child)
    );
}

/// The binary's base URL, read from its listening line.
pub(super) fn base_of(child: &mut Child) -> String {
    let line = first_line(child);
    line.trim_end()
        .strip_prefix("listening on ")
        .expect("listening line")
        .to_string()
}

/// Completion tokens and latency of `n` sequential non-streaming chat requests.
async fn lengths_and_latencies(base: &str, n: usize) -> Vec<(u64, Duration)> {
    let c = client();
    let mut out = Vec::new();
    for _ in 0..n {
        let started = Instant::now();
        let value = json_of(
            post(
                &c,
                format!("{base}/v1/chat/completions"),
                json!({"messages": [{"role": "user", "content": "hello"}]}),
            )
            .await,
        )
        .await;
        let tokens = value["usage"]["completion_tokens"]
            .as_u64()
            .expect("completion_tokens");
        out.push((tokens, started.elapsed()));
    }
    out
}

/// Without flags the binary answers like a small model: lengths drawn around 128 tokens
/// (so they differ) and at least the 20 ms TTFT minus jitter plus 6 ms gaps, i.e. well
/// over 100 ms for ~128 tokens. `--instant` gives exactly 16 tokens at once, and an
/// explicit `--ttft-ms` on top of it still holds.
#[tokio::test]
async fn mock_binary_defaults_are_a_small_model_and_instant_is_zero_latency() {
    let mut realistic = spawn_binary(&["--port", "0"], &[]);
    let mut instant = spawn_binary(&["--port", "0", "--instant", "--ttft-ms", "80"], &[]);
    let (realistic_base, instant_base) = (base_of(&mut realistic), base_of(&mut instant));
    let (slow, fast) = tokio::time::timeout(TEST_BOUND, async {
        (
            lengths_and_latencies(&realistic_base, 4).await,
            lengths_and_latencies(&instant_base, 4).await,
        )
    })
    .await
    .expect("in time");
    for child in [&mut realistic, &mut instant] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut lengths: Vec<u64> = slow.iter().map(|(n, _)| *n).collect();
    lengths.dedup();
    assert!(lengths.len() > 1, "lengths vary: {slow:?}");
    for (n, took) in &slow {
        assert!((16..=512).contains(n), "{slow:?}");
        assert!(*took >= Duration::from_millis(100), "{slow:?}");
    }
    for (n, took) in &fast {
        assert_eq!(*n, 16, "{fast:?}");
        assert!(
            *took >= Duration::from_millis(80),
            "the explicit TTFT holds: {fast:?}"
        );
    }
}

#[test]
fn mock_binary_rejects_bad_settings_with_exit_2() {
    // (arguments, environment, what the one-line error must mention)
    type Case = (
        &'static [&'static str],
        &'static [(&'static str, &'static str)],
        &'static str,
    );
    let cases: [Case; 17] = [
        // Each replica's cache is made at start: 10^8 of them took gigabytes, not exit 2.
        (
            &[
                "--port",
                "0",
                "--prefix-cache-by",
                "x-k",
                "--replicas",
                "100000000",
            ],
            &[],
            "--replicas",
        ),
        (
            &["--port", "0", "--record", "/no/such/dir/r.jsonl"],
            &[],
            "--record",
        ),
        (
            &["--port", "0", "--record", "r.jsonl"],
            &[("LLMSURGE_MOCK_RECORD_LIMIT", "0")],
            "--record-limit",
        ),
        (
            &["--port", "0", "--spec-decode-acceptance", "0.5"],
            &[],
            "--spec-decode-acceptance",
        ),
        (&["--port", "0", "--error-rate", "2"], &[], "--error-rate"),
        (
            &["--port", "0", "--kv-cache-tokens", "0"],
            &[],
            "--kv-cache-tokens",
        ),
        (
            &["--port", "0", "--metrics-fault", "bogus"],
            &[],
            "--metrics-fault",
        ),
        (
            &["--port", "0"],
            &[("LLMSURGE_MOCK_METRICS_FAULT", "boom")],
            "--metrics-fault",
        ),
        (
            &["--port", "0", "--metrics-fault-after", "2"],
            &[],
            "--metrics-fault-after",
        ),
        (
            &["--port", "0", "--no-metrics", "--metrics-fault", "hang"],
            &[],
            "--metrics-fault",
        ),
        (&["--port", "0", "--ttft-ms", "-5"], &[], "--ttft-ms"),
        (
            &["--port", "0"],
            &[("LLMSURGE_MOCK_INSTANT", "maybe")],
            "--instant",
        ),
        (
            &["--port", "0"],
            &[("LLMSURGE_MOCK_STALL_RATE", "-1")],
            "--stall-rate",
        ),
        (
            &["--port", "0"],
            &[("LLMSURGE_MOCK_TTFT", "10")],
            "LLMSURGE_MOCK_TTFT",
        ),
        (&["--port", "0", "--tls-cert", "c.pem"], &[], "--tls-key"),
        (
            &[
                "--port",
                "0",
                "--tls-cert",
                "/no/such/c.pem",
                "--tls-key",
                "/no/such/k.pem",
            ],
            &[],
            "--tls-cert /no/such/c.pem",
        ),
        (
            &["--port", "0"],
            &[("LLMSURGE_MOCK_TLS_CLIENT_CA", "ca.pem")],
            "--tls-cert",
        ),
    ];
    for (args, env, mention) in cases {
        let mut child = spawn_binary(args, env);
        let status = wait_exit(&mut child);
        let stderr = stderr_of(&mut child);
        assert_eq!(status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(mention),
            "{stderr}"
        );
    }
    // A value clap cannot parse is a usage error too.
    let mut child = spawn_binary(&["--port", "0"], &[("LLMSURGE_MOCK_TTFT_MS", "soon")]);
    assert_eq!(wait_exit(&mut child).code(), Some(2));
}

/// An `SSLKEYLOGFILE` the mock cannot append to stops it at start, with one line naming
/// it and exit 2 (rustls alone drops the secrets silently, so a capture met an empty key
/// log after the run): a missing directory, a directory, a FIFO (whose open would wait
/// for a reader for ever), a device. A start that fails on its certificate leaves no key
/// log.
#[test]
fn mock_binary_refuses_an_sslkeylogfile_it_cannot_append_to() {
    use crate::engine::tls::{Leaf, Pki};
    let pki = Pki::new("keylog-refused");
    let (cert, key) = pki.leaf(Leaf::Server, "server");
    let (cert, key) = (cert.to_str().expect("utf-8"), key.to_str().expect("utf-8"));
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let missing = dir.path().join("no/such/keys.log");
    let cases = [
        (missing.as_path(), "No such file"),
        (dir.path(), "Is a directory"),
        // No reader: the open is refused at once (ENXIO), not waited on.
        (fifo.as_path(), "No such device or address"),
        // Opens for writing, but every write would fail.
        (std::path::Path::new("/dev/full"), "not a regular file"),
    ];
    for (keys, why) in cases {
        let keys = keys.to_str().expect("utf-8");
        let mut child = spawn_binary(
            &["--port", "0", "--tls-cert", cert, "--tls-key", key],
            &[("SSLKEYLOGFILE", keys)],
        );
        let status = wait_exit(&mut child);
        let stderr = stderr_of(&mut child);
        assert_eq!(status.code(), Some(2), "{keys}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.starts_with(&format!("error: SSLKEYLOGFILE {keys}: cannot append"))
                && stderr.contains(why),
            "{stderr}"
        );
    }
    let unborn = dir.path().join("keys.log");
    let mut child = spawn_binary(
        &["--port", "0", "--tls-cert", key, "--tls-key", key],
        &[("SSLKEYLOGFILE", unborn.to_str().expect("utf-8"))],
    );
    assert_eq!(
        wait_exit(&mut child).code(),
        Some(2),
        "{}",
        stderr_of(&mut child)
    );
    assert!(!unborn.exists(), "a failed start left a key log");
}

#[test]
fn mock_binary_exits_1_when_the_port_is_taken() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let mut child = spawn_binary(&["--port", &port], &[]);
    let status = wait_exit(&mut child);
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: cannot listen on"), "{stderr}");
}

#[tokio::test]
async fn the_truth_file_is_complete_once_the_binary_stops_on_sigterm() {
    // Buffered while serving; SIGTERM drains the responses and flushes every line.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("truth.jsonl");
    let path_arg = path.to_str().expect("utf-8 path");
    let env = [
        ("LLMSURGE_MOCK_INSTANT", "1"),
        ("LLMSURGE_MOCK_TRUTH", path_arg),
    ];
    let mut child = spawn_binary(&["--port", "0", "--error-rate", "0"], &env);
    let base = base_of(&mut child);
    let outcome = bounded(async {
        let c = client();
        for i in 0..3 {
            let response = c
                .post(format!("{base}/v1/chat/completions"))
                .header("x-request-id", format!("id-{i}"))
                .header("content-type", "application/json")
                .body(json!({"messages": [], "max_tokens": 4, "stream": i == 1}).to_string())
                .send()
                .await
                .expect("sent");
            assert!(response.status().is_success());
            response.bytes().await.expect("body");
        }
    });
    tokio::time::timeout(TEST_BOUND, outcome)
        .await
        .expect("in time");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal sent");
    assert_eq!(
        wait_exit(&mut child).code(),
        Some(0),
        "{}",
        stderr_of(&mut child)
    );
    let lines = crate::support::recorded(&path);
    let ids: Vec<&str> = lines
        .iter()
        .map(|l| l["request_id"].as_str().expect("an id"))
        .collect();
    assert_eq!(ids, ["id-0", "id-1", "id-2"]);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["outcome"], "completed", "{line}");
        assert_eq!(line["stream"], i == 1, "{line}");
        assert_eq!(line["content_tokens"], 4, "{line}");
        let arrival = line["arrival_time"].as_f64().expect("arrival");
        let end = line["end_time"].as_f64().expect("end");
        assert!(arrival <= end, "{line}");
    }
}
