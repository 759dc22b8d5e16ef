//! One load split over several client processes (`--shard`, `--shards`), a shared start
//! instant (`--start-at`), and waiting for a target that is still starting
//! (`--ready-timeout`).

use crate::support::{Finished, assert_identity, llmsurge, mock, run, start_run, wait_run};
use llmsurge::mock::{MockConfig, MockServer};
use llmsurge::report::{RequestEntry, unix_now};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Prompt lengths vary by slot, so equal lengths per slot mean equal prompts.
const DATA: &str = "prompt_tokens=48,prompt_tokens_stdev=16,output_tokens=4";

fn read_log(run: &Finished) -> Vec<RequestEntry> {
    std::fs::read_to_string(run.dir.path().join("requests.jsonl"))
        .unwrap_or_else(|e| panic!("no request log ({e}): {}", run.stderr))
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one request"))
        .collect()
}

/// Slot → (scheduled time − the benchmark's start, prompt tokens).
fn schedule(run: &Finished, start: f64) -> BTreeMap<u64, (f64, Option<u32>)> {
    read_log(run)
        .into_iter()
        .map(|e| (e.slot, (e.scheduled_time - start, e.prompt_tokens)))
        .collect()
}

fn constant_args<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--target",
        url,
        "--profile",
        "constant",
        "--rate",
        "40",
        "--max-requests",
        "41",
        "--data",
        DATA,
        "--request-log",
        "requests.jsonl",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn two_shards_started_at_one_instant_send_exactly_the_single_host_schedule() {
    let single_server = mock(MockConfig::default());
    let single_url = single_server.base_url();
    let single = run(&constant_args(&single_url, &[]));
    assert_eq!(single.code(), 0, "{}", single.stderr);
    let single_report = single.report();
    assert_identity(&single_report);
    assert_eq!(single_report.metadata.shard, None);
    let expected = schedule(&single, single_report.benchmarks[0].start_time);
    assert_eq!(
        expected.keys().copied().collect::<Vec<_>>(),
        (0..41).collect::<Vec<_>>()
    );

    let server = mock(MockConfig::default());
    let url = server.base_url();
    // Far enough ahead that both processes are ready by then on a busy test machine
    // (each starts its workers and probes the target first).
    let start_at = format!("{:.3}", unix_now() + 6.0);
    let started: Vec<_> = (0..2)
        .map(|k| {
            let shard = format!("{}/2", k + 1);
            start_run(
                &constant_args(&url, &["--shard", &shard, "--start-at", &start_at]),
                |_| {},
            )
        })
        .collect();
    let shards: Vec<Finished> = started.into_iter().map(|(c, d)| wait_run(c, d)).collect();

    let at: f64 = start_at.parse().expect("a number");
    let mut union = BTreeMap::new();
    let mut created = 0;
    for (k, run) in shards.iter().enumerate() {
        assert_eq!(run.code(), 0, "shard {k}: {}", run.stderr);
        assert!(
            run.stderr.contains("waiting until"),
            "shard {k} says it waits: {}",
            run.stderr
        );
        let report = run.report();
        assert_identity(&report);
        let b = &report.benchmarks[0];
        assert_eq!(
            report.metadata.shard,
            Some(llmsurge_proto::Shard {
                index: k as u32,
                count: 2
            })
        );
        assert_eq!(report.metadata.start_at, Some(at));
        assert_eq!(report.args["shard"]["count"], 2);
        // t0 is the agreed instant, not when this process happened to be ready.
        assert!(
            (b.start_time - at).abs() < 0.001,
            "{} vs {at}",
            b.start_time
        );
        // The shard's share of --max-requests 41: 21 for shard 0, 20 for shard 1.
        assert_eq!(b.requests.created, 21 - k as u64, "shard {k}");
        assert!(b.audit.mismatches.is_empty(), "{:?}", b.audit.mismatches);
        created += b.requests.created;
        for (slot, entry) in schedule(run, at) {
            assert_eq!(slot % 2, k as u64, "shard {k} ran slot {slot}");
            assert!(union.insert(slot, entry).is_none(), "slot {slot} twice");
        }
    }
    assert_eq!(
        union.keys().copied().collect::<Vec<_>>(),
        (0..41).collect::<Vec<_>>(),
        "the shards' slots are the single host's"
    );
    assert_eq!(server.stats().requests.chat_completions, created);
    for (slot, (offset, prompt)) in &union {
        let (single_offset, single_prompt) = expected[slot];
        // Each is scheduled relative to its own benchmark's start: slot i at i / rate.
        assert!(
            (offset - single_offset).abs() < 0.001,
            "slot {slot}: {offset} vs {single_offset} on one host"
        );
        assert_eq!(*prompt, single_prompt, "slot {slot}: the same prompt");
    }
}

#[test]
fn stream_counts_are_split_larger_shares_first() {
    let server = mock(MockConfig {
        ttft_ms: 200.0,
        ..MockConfig::default()
    });
    let url = server.base_url();
    let mut total = 0;
    for (k, streams) in [(0, 3), (1, 2)] {
        let shard = format!("{}/2", k + 1);
        let run = run(&[
            "--target",
            &url,
            "--profile",
            "concurrent",
            "--rate",
            "5",
            "--max-requests",
            "12",
            "--data",
            DATA,
            "--shard",
            &shard,
        ]);
        assert_eq!(run.code(), 0, "{}", run.stderr);
        let report = run.report();
        assert_identity(&report);
        let b = &report.benchmarks[0];
        // The report keeps the single host's strategy; this host ran its share of it.
        assert_eq!(b.strategy.to_string(), "concurrent@5");
        assert_eq!(b.throughput.concurrency_peak, streams, "shard {k}");
        assert_eq!(b.requests.created, 6);
        total += b.requests.created;
    }
    assert_eq!(server.stats().requests.chat_completions, total);
}

#[test]
fn what_cannot_be_split_is_refused_in_one_line() {
    let past = format!("{:.0}", unix_now() - 60.0);
    let cases: [(&[&str], Option<&str>, &str); 7] = [
        (
            &["--profile", "sweep", "--shards", "2"],
            Some("0"),
            "--profile sweep",
        ),
        (
            &["--profile", "synchronous", "--shard", "1/2"],
            None,
            "synchronous",
        ),
        (
            &["--profile", "constant", "--rate", "5", "--shard", "3/2"],
            None,
            "--shard",
        ),
        (
            &["--profile", "constant", "--rate", "5", "--shards", "2"],
            None,
            "JOB_COMPLETION_INDEX",
        ),
        (
            &["--profile", "constant", "--rate", "5", "--shards", "2"],
            Some("2"),
            "JOB_COMPLETION_INDEX",
        ),
        (
            &["--profile", "concurrent", "--rate", "2", "--shard", "3/3"],
            None,
            "0 streams",
        ),
        (
            &["--profile", "constant", "--rate", "5", "--start-at", &past],
            None,
            "--start-at",
        ),
    ];
    for (args, job_index, mention) in cases {
        let mut cmd = llmsurge();
        cmd.args(["benchmark", "run", "--max-requests", "4"])
            .args(args);
        cmd.env_remove("JOB_COMPLETION_INDEX");
        if let Some(k) = job_index {
            cmd.env("JOB_COMPLETION_INDEX", k);
        }
        let out = cmd.output().expect("llmsurge runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(mention),
            "{args:?} should name {mention}: {stderr}"
        );
    }
}

#[test]
fn a_run_waits_for_a_target_that_starts_late() {
    // A free port: bound, noted, released; the mock takes it once the run is waiting.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = llmsurge()
        .args(["benchmark", "run", "--target"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args([
            "--profile",
            "constant",
            "--rate",
            "20",
            "--max-requests",
            "5",
        ])
        .args(["--data", DATA, "--ready-timeout", "60s", "--output-dir"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("llmsurge starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(stderr);
        let mut all = String::new();
        let mut line = String::new();
        while lines.read_line(&mut line).unwrap_or(0) > 0 {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            line.clear();
        }
        let mut rest = String::new();
        let _ = lines.read_to_string(&mut rest);
        all + &rest
    });
    let waiting = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a line on stderr while the target is down");
        if line.contains("waiting for the target") {
            break line;
        }
    };
    assert!(waiting.contains("cannot reach"), "{waiting}");
    let server = MockServer::start(MockConfig {
        port,
        ..MockConfig::default()
    })
    .expect("the mock takes the port");
    let deadline = Instant::now() + crate::support::RUN_BOUND;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "the run never ended");
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = reader.join().expect("reader");
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(server.stats().requests.chat_completions, 5);
}

#[test]
fn a_target_still_down_when_the_ready_timeout_ends_is_a_usage_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = run(&[
        "--target",
        &url,
        "--max-requests",
        "1",
        "--ready-timeout",
        "1s",
    ]);
    assert_eq!(out.code(), 2, "{}", out.stderr);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: --target") && last.contains("cannot reach"),
        "{}",
        out.stderr
    );
}
