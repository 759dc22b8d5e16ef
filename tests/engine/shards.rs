//! One load split over several client processes (`--shard`, `--shards`), a shared start
//! instant (`--start-at`), and waiting for a target that is still starting
//! (`--ready-timeout`).

use crate::scenario::Bench;
use crate::support::{Finished, assert_identity, ended_with, llmsurge, mock, wait_run};
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

/// 41 requests at 40/s against `url`, logged, of one seed (the single host and the
/// shards send the same prompts).
fn constant(url: &str) -> Bench {
    Bench::target(url)
        .constant(40)
        .max_requests(41)
        .data(DATA)
        .request_log("requests.jsonl")
        .seed(11)
}

#[test]
fn two_shards_started_at_one_instant_send_exactly_the_single_host_schedule() {
    let single_server = mock(MockConfig::instant());
    let single_url = single_server.base_url();
    let single = constant(&single_url).run();
    assert_eq!(single.code(), 0, "{}", single.stderr);
    let single_report = single.report();
    assert_identity(&single_report);
    assert_eq!(single_report.metadata.shard, None);
    let expected = schedule(&single, single_report.benchmarks[0].start_time);
    assert_eq!(
        expected.keys().copied().collect::<Vec<_>>(),
        (0..41).collect::<Vec<_>>()
    );

    let server = mock(MockConfig::instant());
    let url = server.base_url();
    // Far enough ahead that both processes are ready by then on a busy test machine
    // (each starts its workers and probes the target first).
    let start_at = format!("{:.3}", unix_now() + 6.0);
    let started: Vec<_> = (0..2)
        .map(|k| {
            let shard = format!("{}/2", k + 1);
            constant(&url)
                .arg("--shard", &shard)
                .arg("--start-at", &start_at)
                .start(|_| {})
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
        ..MockConfig::instant()
    });
    let url = server.base_url();
    let mut total = 0;
    for (k, streams) in [(0, 3), (1, 2)] {
        let shard = format!("{}/2", k + 1);
        let run = Bench::target(&url)
            .concurrent(5)
            .max_requests(12)
            .data(DATA)
            .arg("--shard", &shard)
            .seed(2)
            .run();
        let report = ended_with(&run, 0);
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
        .args(["--data", DATA, "--ready-timeout", "60s"])
        // As support::start_run does: on a busy machine the client-bottleneck verdict
        // (dispatch lag p99 over 1 ms) would make this exit 4, which is not what is tested.
        .args(["--max-dispatch-lag", "10s", "--output-dir"])
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
    assert!(waiting.contains("connection refused"), "{waiting}");
    let server = MockServer::start(MockConfig {
        port,
        ..MockConfig::instant()
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
    let out = Bench::target(&url)
        .max_requests(1)
        .arg("--ready-timeout", "1s")
        .run();
    assert_eq!(out.code(), 2, "{}", out.stderr);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: --target") && last.contains("connection refused"),
        "{}",
        out.stderr
    );
}

/// Issue 14's acceptance: three shards as separate processes against one mock with one
/// `--start-at`, merged by the real `benchmark merge`. The mock's count is the merged
/// report's; the merged rate is a single process's within 2%; the merged percentiles are
/// those of the union of the shards' histograms, exactly; the order of the files changes
/// no byte; a missing or a foreign report is refused; `--shard 1/1` is the single host.
#[test]
fn three_shards_merge_into_the_single_host_run() {
    let config = MockConfig {
        ttft_ms: 10.0,
        itl_ms: 2.0,
        output_tokens: 4,
        ..MockConfig::instant()
    };
    let load = |url: &str| {
        Bench::target(url)
            .constant(60)
            .max_requests(300)
            .data(DATA)
            .request_log("requests.jsonl")
            // The single host and the shards: one seed, so the same prompts.
            .seed(11)
            .outputs("json")
    };

    // The single host, and the same load with --shard 1/1: the same requests exactly.
    let single_server = mock(config.clone());
    let single = load(&single_server.base_url()).run();
    let single_report = single.report();
    assert_eq!(single.code(), 0, "{}", single.stderr);
    let whole_server = mock(config.clone());
    let whole = load(&whole_server.base_url()).arg("--shard", "1/1").run();
    assert_eq!(whole.code(), 0, "{}", whole.stderr);
    let whole_report = whole.report();
    assert_eq!(whole_report.metadata.shard, None);
    let (a, b) = (&single_report.benchmarks[0], &whole_report.benchmarks[0]);
    assert_eq!(a.strategy, b.strategy);
    assert_eq!(a.requests.created, b.requests.created);
    let (sa, sb) = (
        schedule(&single, a.start_time),
        schedule(&whole, b.start_time),
    );
    assert_eq!(sa.len(), sb.len());
    for ((slot_a, (t_a, p_a)), (slot_b, (t_b, p_b))) in sa.iter().zip(&sb) {
        assert_eq!(
            (slot_a, p_a),
            (slot_b, p_b),
            "--shard 1/1 sends the same requests"
        );
        assert!((t_a - t_b).abs() < 0.001, "slot {slot_a}: {t_a} vs {t_b}");
    }

    // Three shards at one instant.
    let server = mock(config);
    let url = server.base_url();
    let start_at = format!("{:.3}", unix_now() + 6.0);
    let started: Vec<_> = (1..=3)
        .map(|k| {
            load(&url)
                .arg("--shard", format!("{k}/3"))
                .arg("--start-at", &start_at)
                .start(|_| {})
        })
        .collect();
    let shards: Vec<Finished> = started.into_iter().map(|(c, d)| wait_run(c, d)).collect();
    for (k, s) in shards.iter().enumerate() {
        assert_eq!(s.code(), 0, "shard {}: {}", k + 1, s.stderr);
    }
    let files: Vec<String> = shards
        .iter()
        .map(|s| s.report_path().display().to_string())
        .collect();
    let out = tempfile::tempdir().expect("tempdir");
    let merge = |inputs: &[&str], dir: &str| {
        let mut cmd = llmsurge();
        cmd.args(["benchmark", "merge"])
            .args(inputs)
            .args(["--outputs", "json", "--output-dir", dir])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        wait_run(
            cmd.spawn().expect("llmsurge starts"),
            tempfile::tempdir().expect("tempdir"),
        )
    };
    let dir_a = out.path().join("a").display().to_string();
    let dir_b = out.path().join("b").display().to_string();
    let merged_run = merge(&[&files[0], &files[1], &files[2]], &dir_a);
    assert_eq!(merged_run.code(), 0, "{}", merged_run.stderr);
    let bytes_a = std::fs::read(format!("{dir_a}/benchmarks.json")).expect("merged report");
    let merged: llmsurge::report::Report = serde_json::from_slice(&bytes_a).expect("parses");
    let m = &merged.benchmarks[0];
    assert_identity(&merged);

    // The server saw exactly the merged report's requests.
    assert_eq!(server.stats().requests.chat_completions, m.requests.created);
    assert_eq!(m.requests.created, 300);
    // Every shard scraped the mock's /metrics; the merged report keeps one shard's, and
    // recomputes the cross-checks its shards could not make alone (the server counts
    // every shard's requests): the server's deltas against the sums of the shards'
    // client counts.
    let sm = m.server_metrics.as_ref().expect("server metrics");
    let names: Vec<&str> = sm.cross_checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["generation_tokens", "prompt_tokens", "request_success"],
        "{:?}",
        sm.warnings
    );
    for c in &sm.cross_checks {
        assert!(c.agrees, "{c:?}: {:?}", sm.warnings);
    }
    // The clients' side is every shard's (the server's deltas span the kept shard's
    // scrapes, which the other shards' last requests may end just outside).
    let success = &sm.cross_checks[2];
    assert_eq!(success.client, m.requests.completed as f64);
    assert_eq!(m.requests.completed, 300);
    assert!(
        sm.warnings[0].starts_with("server metrics from shard 1/3 of 3 merged")
            && sm.warnings[0].contains("recomputed"),
        "{:?}",
        sm.warnings
    );
    assert!(
        !sm.warnings
            .iter()
            .any(|w| w.contains("the server counts every shard's requests")),
        "{:?}",
        sm.warnings
    );
    // The fleet's rate is one process's: its 300 requests over the union of the shards'
    // windows, which hold the same schedule (slot 0 to 299, 1/60 s apart) as the single
    // host's. How close a busy machine's service times keep the two rates (within 2% on
    // an idle one) is not the merge's doing.
    let shard_windows: Vec<_> = shards
        .iter()
        .map(|s| s.report().benchmarks[0].measured_window)
        .collect();
    let start = shard_windows
        .iter()
        .map(|w| w.start_time)
        .fold(f64::MAX, f64::min);
    let end = shard_windows
        .iter()
        .map(|w| w.end_time)
        .fold(f64::MIN, f64::max);
    let w = m.measured_window;
    assert!(
        (w.start_time - start).abs() < 1e-6 && (w.end_time - end).abs() < 1e-6,
        "{w:?} vs the shards' {shard_windows:?}"
    );
    let rate = m.throughput.requests_per_s;
    assert!(
        (rate - 300.0 / w.duration_s).abs() < 1e-6 * rate,
        "merged {rate} req/s over {w:?}"
    );
    // Exact: the merged distribution is that of the union of the shards' histograms.
    for key in ["ttft", "itl", "request_latency"] {
        let mut union: Option<hdrhistogram::Histogram<u64>> = None;
        for s in &shards {
            let h = s.report().benchmarks[0]
                .histogram(key)
                .expect("a histogram");
            match &mut union {
                Some(u) => u.add(&h).expect("same precision"),
                None => union = Some(h),
            }
        }
        let union = union.expect("three shards");
        let metric = llmsurge_proto::Metric::ALL
            .into_iter()
            .find(|m| m.key() == key)
            .expect("a metric");
        assert_eq!(
            m.metrics[key].successful,
            llmsurge_proto::Distribution::of_metric(metric, &union),
            "{key}"
        );
    }

    // Any order: the same bytes.
    let again = merge(&[&files[2], &files[0], &files[1]], &dir_b);
    assert_eq!(again.code(), 0, "{}", again.stderr);
    let bytes_b = std::fs::read(format!("{dir_b}/benchmarks.json")).expect("merged report");
    assert!(
        bytes_a == bytes_b,
        "the order of the files changed the report"
    );

    // A missing shard, or a report of another run, is refused in one line.
    let dir_c = out.path().join("c").display().to_string();
    let missing = merge(&[&files[0], &files[2]], &dir_c);
    assert_eq!(missing.code(), 2, "{}", missing.stderr);
    assert_eq!(
        missing.stderr.trim().lines().count(),
        1,
        "{}",
        missing.stderr
    );
    let foreign_file = single.report_path().display().to_string();
    let foreign = merge(&[&files[0], &files[1], &foreign_file], &dir_c);
    assert_eq!(foreign.code(), 2, "{}", foreign.stderr);
    assert!(foreign.stderr.contains(&foreign_file), "{}", foreign.stderr);
}
