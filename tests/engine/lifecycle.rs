//! The benchmark lifecycle's own numbers: the books balanced at the end of every run, the
//! mean concurrency of the measured window, and a ramp-up that must fit in the run.

use crate::scenario::Bench;
use crate::support::{mock, ok_report};
use llmsurge::mock::MockConfig;

/// Requests of ~100 ms.
fn mock_100ms() -> llmsurge::mock::MockServer {
    mock(MockConfig {
        ttft_ms: 50.0,
        itl_ms: 5.0,
        output_tokens: 10,
        ..MockConfig::instant()
    })
}

/// A constant rate stopped by its time limit: the pacer holds the next slot, not yet
/// due, when the stop comes. It is handed back, and the audit finds every slot and every
/// send accounted for.
#[test]
fn a_rate_stopped_by_its_time_limit_leaves_balanced_books() {
    let server = mock_100ms();
    let run = Bench::on(&server)
        .constant(20)
        .workers(2)
        .max_seconds(2)
        .data("prompt_tokens=16,output_tokens=10")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let a = &b.audit;
    assert!(a.mismatches.is_empty(), "{a:?}");
    assert!(
        a.slots_returned >= 1,
        "the held slot was handed back: {a:?}"
    );
    assert_eq!(
        a.slots_claimed,
        b.requests.created + a.slots_returned,
        "{a:?}"
    );
    assert_eq!(a.sent_shm, a.sent_books, "{a:?}");
    assert_eq!(
        a.sent_shm, b.requests.created,
        "every request was sent: {a:?}"
    );
    assert!(!run.stderr.contains("do not balance"), "{}", run.stderr);
}

/// One request in flight at all times (synchronous): the measured window's mean
/// concurrency is the measured requests' time in flight over that window, never over 1,
/// however long the warm-up was (which used to count as seconds of zero concurrency).
/// How near 1 it comes is the client's turnaround between requests: the machine's.
#[test]
fn mean_concurrency_is_over_the_measured_window_only() {
    let server = mock_100ms();
    let run = Bench::on(&server)
        .synchronous()
        .max_seconds(3)
        .arg("--warmup", "1.5s")
        .data("prompt_tokens=16,output_tokens=10")
        .request_log("requests.jsonl")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert!(b.requests.warmup > 0, "{:?}", b.requests);
    let mean = b.throughput.concurrency_mean;
    // Little's law over the measured requests of the log: their time in flight over the
    // span from the first one's start to the last one's end.
    let log = super::sessions::read_log(&run.dir.path().join("requests.jsonl"));
    let measured: Vec<_> = log
        .iter()
        .filter(|e| e.phase == llmsurge_proto::Phase::Measured)
        .filter_map(|e| e.start_time.map(|s| (s, e.end_time)))
        .collect();
    assert!(measured.len() as u64 >= 5, "{log:?}");
    let busy: f64 = measured.iter().map(|(s, e)| e - s).sum();
    let first = measured.iter().map(|m| m.0).fold(f64::MAX, f64::min);
    let last = measured.iter().map(|m| m.1).fold(f64::MIN, f64::max);
    let expected = busy / (last - first);
    assert!(
        (mean - expected).abs() < 1e-3,
        "concurrency mean {mean}, the measured requests' {expected}"
    );
    assert!(mean <= 1.0001, "one request at a time: {mean}");
}

#[test]
fn a_rampup_as_long_as_the_run_is_a_usage_error() {
    let server = mock_100ms();
    let run = Bench::on(&server)
        .concurrent(4)
        .arg("--rampup", "10")
        .max_seconds(5)
        .run();
    assert_eq!(run.code(), llmsurge::exit_codes::USAGE, "{}", run.stderr);
    let lines: Vec<_> = run
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    assert!(
        lines[0].contains("--rampup") && lines[0].contains("--max-seconds"),
        "{}",
        lines[0]
    );
    assert_eq!(
        server.stats().requests.chat_completions,
        0,
        "no load was sent"
    );
}

#[test]
fn a_worker_timeout_below_the_heartbeat_is_a_usage_error() {
    let server = mock_100ms();
    let run = Bench::on(&server)
        .max_requests(1)
        .arg("--worker-timeout", "200ms")
        .run();
    assert_eq!(run.code(), llmsurge::exit_codes::USAGE, "{}", run.stderr);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("--worker-timeout"), "{}", run.stderr);
}

/// Streams due to start at 50, 100 and 150 s of a 200 s ramp-up: when the first stream
/// has already sent every request of `--max-requests`, they end at once instead of
/// sleeping through their turn, so the run ends before the second stream was due (a
/// stream that slept would hold it at least that long: a sleep never ends early).
#[test]
fn streams_waiting_for_their_ramp_up_end_when_no_slot_is_left() {
    let server = mock_100ms();
    let run = Bench::on(&server)
        .concurrent(4)
        .workers(1)
        .arg("--rampup", "200")
        .max_requests(3)
        .data("prompt_tokens=16,output_tokens=10")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert!(
        b.duration_s < 50.0,
        "ran {} s: a stream slept through its ramp-up",
        b.duration_s
    );
    assert_eq!(b.requests.completed, 3, "{:?}", b.requests);
    assert!(b.workers.iter().all(|w| !w.died), "{:?}", b.workers);
}

/// The cells of the row of `label` in the console table under `title`.
fn console_row(stdout: &str, title: &str, label: &str) -> Vec<String> {
    let table = stdout
        .split_once(title)
        .unwrap_or_else(|| panic!("no {title:?} in\n{stdout}"))
        .1;
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("│ {label} ")))
        .unwrap_or_else(|| panic!("no row {label} in\n{table}"));
    line.trim_matches('│')
        .split('┆')
        .map(|c| c.trim().to_string())
        .collect()
}

/// Break test: with `--warmup 10req` the console's "measured window" table counted all
/// 120 requests (and the whole run's length) while the JSON's measured window, and the
/// Req/s beside it, counted 110.
#[test]
fn the_console_and_markdown_count_the_measured_window_of_the_json() {
    const REQUESTS: u64 = 120;
    const WARMUP: u64 = 10;
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server)
        .concurrent(2)
        .max_requests(REQUESTS)
        .arg("--warmup", format!("{WARMUP}req"))
        .arg("--outputs", "json,md,console")
        .data("prompt_tokens=8,output_tokens=4")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    // The mock's truth: every request it answered (its twin answers the probe).
    let answered = server.stats().completed;
    assert_eq!(answered, REQUESTS);
    assert_eq!(b.requests.warmup, WARMUP, "{:?}", b.requests);
    let measured = answered - WARMUP;
    assert_eq!(b.measured_requests.completed, measured);
    let label = llmsurge::report::label(b);
    let num = llmsurge::report::num;
    let row = console_row(
        &run.stdout,
        "Requests and throughput (measured window)",
        &label,
    );
    // Benchmark, Duration s, Completed, Errored, Cancelled, Req/s, …
    assert_eq!(row[2], measured.to_string(), "{row:?}");
    assert_eq!(row[3], "0", "{row:?}");
    assert_eq!(row[4], "0", "{row:?}");
    // The length shown is the one Req/s divides: completed / duration is Req/s.
    let window = b.measured_window.duration_s;
    assert_eq!(row[1], num(window), "{row:?}");
    assert_eq!(row[5], num(measured as f64 / window), "{row:?}");
    assert!(
        run.stdout.contains(&format!(
            "Requests outside the measured window, not counted above: {label}: {WARMUP} warm-up, 0 cool-down"
        )),
        "{}",
        run.stdout
    );
    // The Markdown summary: | Benchmark | Completed | Errored | Req/s | …
    let md = std::fs::read_to_string(run.dir.path().join("benchmarks.md")).expect("benchmarks.md");
    let line = md
        .lines()
        .find(|l| l.starts_with(&format!("| {label} |")))
        .unwrap_or_else(|| panic!("no row {label} in\n{md}"));
    let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
    assert_eq!(cells[1], measured.to_string(), "{line}");
    assert_eq!(cells[2], "0", "{line}");
}
