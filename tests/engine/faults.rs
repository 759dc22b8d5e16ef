//! The server fault matrix (docs/reliability.md), one test per row: each run finishes,
//! each injected fault is counted under its own error kind with a sample message, the
//! books balance (created = completed + errored + cancelled), and no request waits past
//! the timeout that bounds it. The mock's fault counters are the truth the report is
//! held to. A reset mid-stream and malformed SSE are rows of
//! `requests::server_faults_become_errors_of_their_kind`; process and signal faults are
//! in `signals.rs` and `failures.rs`.

use crate::scenario::Bench;
use crate::support::{Finished, assert_identity, ended_with, mock, wait_run};
use llmsurge::mock::{MockConfig, MockServer, MockStats};
use llmsurge::report::RequestEntry;
use llmsurge_coordinator::{BenchmarkResult, StopReason};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const DATA: &str = "prompt_tokens=16,output_tokens=8";

/// Every request bounded by this: a run that waits on it has missed the bound under test.
const LONG_TIMEOUT: &str = "30s";

/// No fault run's benchmark may last this long: a request that waited on `LONG_TIMEOUT`
/// would hold it at least that long (a timer never fires early), however busy the machine.
const FAULT_RUN_BOUND_S: f64 = 30.0;

fn error_count(b: &BenchmarkResult, kind: &str) -> u64 {
    b.errors
        .iter()
        .find(|e| e.kind == kind)
        .map_or(0, |e| e.count)
}

/// Runs `requests` requests on 4 streams against `server` with what `options` add;
/// asserts the run finished in bounded time, balanced its books, and gave every error
/// kind a sample.
fn fault_run(
    server: &MockServer,
    requests: u64,
    options: impl FnOnce(Bench) -> Bench,
) -> (Finished, BenchmarkResult, MockStats) {
    let run = options(
        Bench::on(server)
            .concurrent(4)
            .max_requests(requests)
            .request_timeout(LONG_TIMEOUT)
            .data(DATA),
    )
    .run();
    let report = run.report();
    assert_identity(&report);
    let b = report.benchmarks.into_iter().next().expect("one benchmark");
    assert!(
        b.duration_s < FAULT_RUN_BOUND_S,
        "a request waited on the {LONG_TIMEOUT} bound: the benchmark took {} s",
        b.duration_s
    );
    let by_kind: u64 = b.errors.iter().map(|e| e.count).sum();
    assert_eq!(by_kind, b.requests.errored, "{:?}", b.errors);
    for e in &b.errors {
        assert!(
            e.samples.first().is_some_and(|s| !s.is_empty()),
            "{}: no sample message",
            e.kind
        );
    }
    (run, b, server.stats())
}

/// Asserts the run succeeded overall (some requests completed, exit 0) and that the only
/// errors are `expected`, as many as the mock injected.
fn assert_only(run: &Finished, b: &BenchmarkResult, expected: &[(&str, u64)]) {
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(b.requests.completed > 0, "{:?}", b.requests);
    for (kind, injected) in expected {
        assert!(*injected > 0, "the mock injected no {kind}");
        assert_eq!(error_count(b, kind), *injected, "{kind}: {:?}", b.errors);
    }
    let expected_total: u64 = expected.iter().map(|(_, n)| n).sum();
    assert_eq!(b.requests.errored, expected_total, "{:?}", b.errors);
    assert_eq!(b.requests.cancelled, 0, "{:?}", b.requests);
}

/// A mock with a fixed seed: the same faults on every run.
fn faulty(config: MockConfig) -> MockServer {
    mock(MockConfig { seed: 11, ..config })
}

/// The message of the first sample of `kind`.
fn sample<'a>(b: &'a BenchmarkResult, kind: &str) -> &'a str {
    b.errors
        .iter()
        .find(|e| e.kind == kind)
        .and_then(|e| e.samples.first())
        .map_or("", String::as_str)
}

#[test]
fn http_500_and_429_are_counted_by_status_with_the_server_message() {
    let server = faulty(MockConfig {
        error_rate: 0.3,
        ..MockConfig::instant()
    });
    let (run, b, s) = fault_run(&server, 60, |b| b);
    assert_only(
        &run,
        &b,
        &[
            ("http_500", s.faults.error_500),
            ("http_429", s.faults.error_429),
        ],
    );
    // The sample is the server's own error message, not a generic status line.
    assert!(
        sample(&b, "http_429").contains("Rate limit reached"),
        "{b:?}"
    );
    assert!(sample(&b, "http_500").contains("server had an error"));
}

#[test]
fn a_stalled_stream_ends_at_the_idle_timeout() {
    let server = faulty(MockConfig {
        stall_rate: 0.3,
        ..MockConfig::instant()
    });
    let (run, b, s) = fault_run(&server, 60, |b| b.arg("--idle-timeout", "300ms"));
    assert_only(&run, &b, &[("timeout", s.faults.stall)]);
    // The idle bound fired, not the 30 s request timeout (`fault_run` bounds the run).
    assert!(sample(&b, "timeout").contains("0.300s"), "{:?}", b.errors);
    // Every stalled request ended at its bound (the mock sends the chunks before the
    // stall at once): not before it (a timer never fires early), and by the idle timeout,
    // as the sample says, not by the 30 s request timeout a stall would otherwise meet.
    let e2e = &b.metrics["request_latency"].errored;
    assert_eq!(e2e.count, s.faults.stall);
    assert!(e2e.min >= 300.0 && e2e.max < 30_000.0, "{e2e:?}");
}

#[test]
fn a_server_that_closes_before_headers_is_a_closed_connection() {
    let server = faulty(MockConfig {
        close_rate: 0.3,
        ..MockConfig::instant()
    });
    let (run, b, s) = fault_run(&server, 60, |b| b.request_log("requests.jsonl"));
    // The mock closes after it read the request whole: the server may have run it, so
    // it is never sent again (a generation is not idempotent), even on a reused
    // connection. Every close is an errored request, none a silent resend.
    let log = read_log(&run.dir.path().join("requests.jsonl"));
    assert_eq!(log.iter().filter(|e| e.retried).count(), 0);
    assert_eq!(b.requests.resent, 0);
    let closed = error_count(&b, "connection_closed");
    assert!(closed > 0, "{:?}", b.errors);
    assert_eq!(closed, s.faults.close, "{:?}", b.errors);
    assert_eq!(b.requests.errored, closed, "{:?}", b.errors);
    assert!(
        sample(&b, "connection_closed").contains("not resent"),
        "{:?}",
        b.errors
    );
    assert_eq!(run.code(), 0, "{}", run.stderr);
}

/// Every error the mock injected is in the books: as an HTTP error, or among the
/// cancelled when the stop came before the client had read it.
fn assert_injected_errors_booked(b: &BenchmarkResult, s: &MockStats) {
    let http = error_count(b, "http_500") + error_count(b, "http_429");
    let injected = s.faults.error_500 + s.faults.error_429;
    assert!(
        http <= injected && injected <= http + b.requests.cancelled,
        "{http} booked, {injected} injected, {:?}",
        b.requests
    );
}

#[test]
fn max_errors_stops_the_run_at_the_limit() {
    let server = faulty(MockConfig {
        error_rate: 0.5,
        ttft_ms: 20.0,
        ..MockConfig::instant()
    });
    let (run, b, s) = fault_run(&server, 100000, |b| b.arg("--max-errors", 10));
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert_eq!(b.stop_reason, Some(StopReason::MaxErrors { errors: 10 }));
    let http = error_count(&b, "http_500") + error_count(&b, "http_429");
    // The stop is checked on every batch of updates: a few more may finish meanwhile.
    assert!((10..=40).contains(&http), "{:?}", b.errors);
    assert_injected_errors_booked(&b, &s);
    // Stopped early: far from the 100,000 requests asked for.
    assert!(b.requests.created < 400, "{:?}", b.requests);
}

#[test]
fn max_error_rate_stops_the_run_once_the_sample_is_large_enough() {
    let server = faulty(MockConfig {
        error_rate: 0.5,
        ttft_ms: 20.0,
        ..MockConfig::instant()
    });
    let (run, b, s) = fault_run(&server, 100000, |b| b.arg("--max-error-rate", "0.2"));
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let Some(StopReason::MaxErrorRate { limit, observed }) = b.stop_reason else {
        panic!("stopped by {:?}", b.stop_reason);
    };
    assert!((limit - 0.2).abs() < 1e-9 && observed > 0.2, "{observed}");
    let finished = b.requests.completed + b.requests.errored;
    assert!(
        finished >= llmsurge::cli::resolve::ERROR_RATE_MIN_SAMPLE,
        "judged on {finished} requests"
    );
    assert_injected_errors_booked(&b, &s);
    // Stopped early: far from the 100,000 requests asked for.
    assert!(b.requests.created < 400, "{:?}", b.requests);
}

/// Polls `done` until it holds; fails the test after 20 s.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Reads the request log written so far (a line may be half-written: skipped).
fn read_log(path: &std::path::Path) -> Vec<RequestEntry> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Binds a new mock on `port`, retrying while the old socket is still being released.
fn restart_on(port: u16) -> MockServer {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match MockServer::start(MockConfig {
            port,
            ..MockConfig::instant()
        }) {
            Ok(server) => return server,
            Err(e) => {
                assert!(Instant::now() < deadline, "cannot rebind port {port}: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn a_server_restarted_mid_run_costs_only_the_requests_sent_while_it_was_down() {
    let first = mock(MockConfig::instant());
    let port = first.addr().port();
    let url = first.base_url();
    let (child, dir) = Bench::target(&url)
        .constant(50)
        .max_requests(400)
        .request_timeout("5s")
        .data(DATA)
        .request_log("requests.jsonl")
        .start(|_| {});
    let log = dir.path().join("requests.jsonl");
    wait_for("50 responses served", || first.stats().completed >= 50);
    let down_at = unix_now();
    let served_before = first.stop();
    // Down until the client has seen it down: a refused connection in the request log.
    wait_for("a refused connection", || {
        read_log(&log)
            .iter()
            .any(|e| e.error_kind.as_deref() == Some("connect"))
    });
    let second = restart_on(port);
    let up_at = unix_now();
    let run = wait_run(child, dir);
    let report = ended_with(&run, 0);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.created, 400);
    // The run went on after the restart.
    let served_after = second.stats().completed;
    assert!(served_after > 0, "nothing sent after the restart");
    assert_eq!(
        b.requests.completed,
        served_before.completed + served_after,
        "every success was served by one of the two servers"
    );
    // Refused connections; a request that raced the shutdown on a kept-alive
    // connection may see it closed instead. Nothing else.
    assert!(error_count(b, "connect") > 0, "{:?}", b.errors);
    assert_eq!(
        error_count(b, "connect") + error_count(b, "connection_closed"),
        b.requests.errored,
        "{:?}",
        b.errors
    );
    // Errors only while it was down (with slack for the drain of the first server and
    // the coarse clocks of the log).
    let entries = read_log(&run.dir.path().join("requests.jsonl"));
    assert_eq!(entries.len() as u64, b.requests.created);
    for e in entries.iter().filter(|e| e.error_kind.is_some()) {
        let sent = e.start_time.unwrap_or(e.scheduled_time);
        assert!(
            sent >= down_at - 0.05 && sent <= up_at + 0.05,
            "error sent at {sent}, server down in [{down_at}, {up_at}]: {e:?}"
        );
    }
}

/// `llmsurge mock-server` in a process of its own, so a test can SIGKILL it as a crash
/// would; killed on drop if the test did not.
pub(crate) struct MockProcess {
    child: std::process::Child,
    pub(crate) url: String,
    port: u16,
}

impl MockProcess {
    /// Starts `llmsurge mock-server --port 0 ARGS` and waits for its listening line.
    pub(crate) fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// Starts it as [`MockProcess::start`] does, with `env` set in its environment.
    pub(crate) fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        use std::io::BufRead;
        let mut child = crate::support::llmsurge()
            .args(["mock-server", "--port", "0"])
            .args(args)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the mock starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            let _ = tx.send(lines.next().and_then(Result::ok).unwrap_or_default());
            // Drained to its end, so the mock never writes into a full pipe.
            lines.for_each(drop);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the mock's listening line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
            .to_string();
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .unwrap_or_else(|| panic!("no port in {url}"));
        MockProcess { child, url, port }
    }

    /// An instant mock that records every request it reads, with its `x-request-id`
    /// (the truth of which requests reached it): the mock, the record's directory and
    /// its path.
    fn recording() -> (Self, tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let record = dir.path().join("record.jsonl");
        let record_arg = record.display().to_string();
        let server = MockProcess::start(&[
            "--instant",
            "--record",
            &record_arg,
            "--record-header",
            "x-request-id",
        ]);
        (server, dir, record)
    }

    /// Responses the mock sent to their end (its `/stats`); 0 when it does not answer.
    fn completed(&self) -> u64 {
        crate::sweep::http_get(self.port, "/stats")
            .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
            .and_then(|stats| stats["completed"].as_u64())
            .unwrap_or(0)
    }

    /// SIGTERMs it and waits for it to end (its `--truth` file is then complete).
    pub(crate) fn stop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            Signal::SIGTERM,
        )
        .expect("SIGTERM the mock");
        self.child.wait().expect("the mock ends");
    }

    /// SIGKILLs it and waits for it to be gone; the instant it certainly was, Unix seconds.
    fn kill(&mut self) -> f64 {
        use nix::sys::signal::{Signal, kill};
        kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            Signal::SIGKILL,
        )
        .expect("SIGKILL the mock");
        self.child.wait().expect("the mock ends");
        unix_now()
    }
}

impl Drop for MockProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `bench` against `server`, SIGKILLs the mock once it served `served` responses,
/// and waits for the run, which must end invalid: the run, its report, and the instant
/// the mock was certainly gone (Unix seconds).
fn killed_once_served(
    server: &mut MockProcess,
    bench: &Bench,
    served: u64,
) -> (Finished, llmsurge::report::Report, f64) {
    let (child, out) = bench.start(|_| {});
    wait_for(&format!("{served} responses served"), || {
        server.completed() >= served
    });
    let dead_at = server.kill();
    let run = wait_run(child, out);
    let report = ended_with(&run, llmsurge::exit_codes::INVALID_RUN);
    (run, report, dead_at)
}

/// `b`'s `server_lost`, which it must have.
fn lost_in<'a>(
    run: &Finished,
    b: &'a BenchmarkResult,
) -> &'a llmsurge_coordinator::error_tail::ServerLost {
    b.server_lost
        .as_ref()
        .unwrap_or_else(|| panic!("no server_lost: {:?}\n{}", b.requests, run.stderr))
}

/// A closed loop of many streams against a server that dies: each stream fails at its
/// connect within microseconds, again and again, so when the stop comes some are still
/// connecting. Those were never sent (the server never had them): before, they counted
/// as requests the server held while it failed others, which broke the tail and left
/// the run valid (exit 0), 3 runs in 3 here. The default mock's latencies on 4 slots
/// under 2,048 streams, so that some are connecting whenever the stop comes.
#[test]
fn a_server_killed_under_many_streams_is_lost_whatever_the_stop_cut_while_connecting() {
    let mut server = MockProcess::start(&["--max-concurrency", "4"]);
    let bench = Bench::target(&server.url)
        .profile("throughput")
        .max_concurrency(2048)
        .max_seconds(3)
        .data(DATA)
        .request_log("requests.jsonl")
        .outputs("json");
    let (run, report, dead_at) = killed_once_served(&mut server, &bench, 20);
    let b = &report.benchmarks[0];
    let lost = lost_in(&run, b);
    assert!(b.start_time + lost.at_s <= dead_at, "{lost:?}");
    // What the stop cut: in flight on a connection the server had, or while connecting,
    // never sent (no send instant in the log).
    let log = read_log(&run.dir.path().join("requests.jsonl"));
    for e in &log {
        match e.error.as_deref() {
            Some("cancelled while connecting: the benchmark stopped") => {
                assert_eq!(e.start_time, None, "{e:?}");
            }
            Some("cancelled in flight: the benchmark stopped") => {
                assert!(e.start_time.is_some_and(|t| t < dead_at), "{e:?}");
            }
            _ => {}
        }
    }
}

#[test]
fn a_server_killed_mid_run_makes_the_run_invalid_from_the_instant_it_was_lost() {
    let (mut server, _dir, record) = MockProcess::recording();
    let bench = Bench::target(&server.url)
        .constant(40)
        .max_seconds(5)
        .request_timeout("5s")
        .data(DATA)
        .request_log("requests.jsonl")
        .outputs("json,csv,html,console,markdown")
        // Objectives the requests served before the loss meet (before, it said PASS).
        .slo("ttft_p50<=10s,error_rate<=99%");
    let (run, report, dead_at) = killed_once_served(&mut server, &bench, 40);
    let b = &report.benchmarks[0];
    let lost = lost_in(&run, b);

    // The truth: which requests reached the mock (its --record, written as each
    // arrives, so a SIGKILL keeps it), joined with the client's log on the request id.
    let reached: std::collections::HashSet<String> = crate::support::recorded(&record)
        .iter()
        .filter_map(|l| l["headers"]["x-request-id"].as_str().map(str::to_string))
        .collect();
    let log = read_log(&run.dir.path().join("requests.jsonl"));
    assert_eq!(log.len() as u64, b.requests.created);
    let sent = |e: &RequestEntry| e.start_time.unwrap_or(e.scheduled_time);
    let completed = |e: &&RequestEntry| e.status == llmsurge_proto::RequestStatus::Completed;
    // Every success was served by the mock.
    for e in log.iter().filter(completed) {
        let id = e.request_id.as_deref().expect("request ids are sent");
        assert!(
            reached.contains(id),
            "{id} completed, the mock never saw it"
        );
    }
    // The last success the mock served and the first failure sent after it bound the
    // instant: it is that first failure's send.
    let last_success = log
        .iter()
        .filter(completed)
        .map(sent)
        .fold(f64::NEG_INFINITY, f64::max);
    let first_failure = log
        .iter()
        .filter(|e| e.error_kind.is_some() && sent(e) > last_success)
        .map(sent)
        .fold(f64::INFINITY, f64::min);
    let at = b.start_time + lost.at_s;
    // The report's clock anchor and the log's are read apart: microseconds.
    let slack = 1e-3;
    assert!(
        last_success < at && (at - first_failure).abs() < slack,
        "lost at {at}, last success sent at {last_success}, first failure after it at {first_failure}"
    );
    assert!((b.start_time + lost.last_success_s - last_success).abs() < slack);
    // No later than the first request sent once the mock was certainly dead.
    let after_death = log
        .iter()
        .map(sent)
        .filter(|&t| t >= dead_at)
        .fold(f64::INFINITY, f64::min);
    assert!(after_death.is_finite(), "nothing was sent after the kill");
    assert!(at <= after_death + slack, "lost at {at}, dead by {dead_at}");
    // No request sent from then on succeeded, and every one that errored is counted
    // (one in flight at the time limit may be cancelled instead).
    let tail: Vec<&RequestEntry> = log.iter().filter(|e| sent(e) > last_success).collect();
    assert!(!tail.iter().any(completed), "{tail:?}");
    let errored = tail
        .iter()
        .filter(|e| e.status == llmsurge_proto::RequestStatus::Errored)
        .count();
    assert_eq!(lost.errored, errored as u64);
    assert!(lost.errored >= 10 && lost.span_s >= 1.0, "{lost:?}");
    // Those the mock saw at all reached it while it lived (in flight at the kill).
    for e in &tail {
        if e.request_id
            .as_deref()
            .is_some_and(|id| reached.contains(id))
        {
            assert!(sent(e) <= dead_at, "{e:?} reached a dead mock");
        }
    }
    assert!(lost.reason.starts_with("connect: "), "{lost:?}");
    // Said on stderr, in the report's invalid_run, the console, the CSV and the HTML.
    let line = format!(
        "invalid run: constant@40: the server was lost at {:.1} s",
        lost.at_s
    );
    assert!(run.stderr.contains(&line), "{}", run.stderr);
    assert!(
        report
            .invalid_run
            .iter()
            .any(|l| l.contains("the server was lost at")),
        "{:?}",
        report.invalid_run
    );
    assert!(
        run.stdout.contains("invalid: the server was lost at"),
        "{}",
        run.stdout
    );
    let csv = run.csv_first_row().cell("run.server_lost_at_s");
    assert!(
        (csv.parse::<f64>().expect("a number") - lost.at_s).abs() < 1e-9,
        "{csv}"
    );
    let html = std::fs::read_to_string(run.dir.path().join("benchmarks.html")).expect("html");
    assert!(html.contains("the server was lost at"));
    let md = std::fs::read_to_string(run.dir.path().join("benchmarks.md")).expect("markdown");
    assert!(
        md.contains("> **Invalid run:** constant@40: the server was lost at"),
        "{md}"
    );
    // No objective passes on a server that was lost: each that held is undecided.
    let slo = b.slo.as_ref().expect("a verdict");
    assert_eq!(slo.label(), "INCONCLUSIVE", "{slo:?}");
    let undecided = format!("undecided: the server was lost at {:.1} s", lost.at_s);
    for c in &slo.checks {
        assert!(c.inconclusive, "{c:?}");
        assert!(
            c.reason
                .as_deref()
                .is_some_and(|r| r.starts_with(&undecided)),
            "{c:?}"
        );
    }
    assert!(!md.contains("✅"), "{md}");
}

#[test]
fn a_closed_loop_waits_after_each_refused_connect_and_still_finds_the_server_lost() {
    closed_loop_against_a_server_that_dies(DATA, Bench::synchronous);
}

#[test]
fn a_user_of_sessions_waits_after_each_refused_connect_and_still_finds_the_server_lost() {
    // No think time: a failed session's user started its next one at once.
    closed_loop_against_a_server_that_dies(
        "prompt_tokens=16,output_tokens=4,turns=2,think_time=0s",
        Bench::synchronous,
    );
}

#[test]
fn a_user_of_agent_traces_waits_after_each_refused_connect_and_still_finds_the_server_lost() {
    // Linear traces (each call after the one before), no gap before a user's next trace:
    // a failed trace's user started its next one at once. Traces run by users only in a
    // capacity search, whose first probe is one user.
    let dir = tempfile::tempdir().expect("temp dir");
    let traces = super::capacity_users::linear_traces(dir.path());
    closed_loop_against_a_server_that_dies(&traces.display().to_string(), |b| {
        b.profile("capacity")
            .arg("--slo-tier", "any:error_rate<=100%")
    });
}

/// A profile of several benchmarks ends with the one that lost the server, and so do the
/// `--repeat` runs: the later rates (and runs) would be runs of errors against a dead
/// server, each for its whole length, and the run is invalid whatever they find.
#[test]
fn a_lost_server_ends_the_profile_and_the_repeats_there() {
    let mut server = MockProcess::start(&["--instant"]);
    let (child, out) = Bench::target(&server.url)
        .constant("20,40")
        .repeat(2)
        .max_seconds(3)
        .data(DATA)
        .outputs("json")
        .start(|_| {});
    wait_for("20 responses served", || server.completed() >= 20);
    server.kill();
    let run = wait_run(child, out);
    let report = ended_with(&run, llmsurge::exit_codes::INVALID_RUN);
    assert_eq!(report.benchmarks.len(), 1, "{}", run.stderr);
    assert!(report.benchmarks[0].server_lost.is_some(), "{}", run.stderr);
    assert!(
        run.stderr.contains("after that one were not run"),
        "{}",
        run.stderr
    );
}

/// A server that stops taking connections between two `--repeat` runs (every SYN
/// unanswered: a blackholed host, an accept loop hung) is lost in the second run as a
/// refusing one is: a connect that timed out is a `connect` error, the server never had
/// the request. Before, it was a `timeout`, read as a server that held its requests
/// (overloaded or hung), and the dead server was never called lost.
#[test]
fn a_server_that_stops_taking_connections_between_two_runs_is_lost_in_the_second() {
    stops_taking_connections_between_two_runs(&[]);
}

/// The same over the worker's HTTP/2 client (h2c).
#[test]
fn a_server_that_stops_taking_h2c_connections_between_two_runs_is_lost_in_the_second() {
    stops_taking_connections_between_two_runs(&["--http2"]);
}

fn stops_taking_connections_between_two_runs(client: &[&str]) {
    let mut server = MockProcess::start(&["--instant"]);
    let live = super::signals::Live::start(
        &Bench::target(&server.url)
            .args_as_written(client)
            .constant(20)
            .max_seconds(2)
            .repeat(2)
            // Long enough for the kill and the blackhole to land in it on a busy machine.
            .repeat_cooldown("4s")
            .arg("--connect-timeout", "200ms")
            .data(DATA)
            .outputs("json"),
        false,
    );
    live.wait_for_stderr("repeat: run 1 of 2 done");
    server.kill();
    let _hole = crate::support::Blackhole::bind(server.port);
    let run = live.finish();
    let report = ended_with(&run, llmsurge::exit_codes::INVALID_RUN);
    assert_eq!(report.benchmarks.len(), 2, "{}", run.stderr);
    let (first, second) = (&report.benchmarks[0], &report.benchmarks[1]);
    assert!(
        first.server_lost.is_none() && first.requests.errored == 0,
        "{}",
        run.stderr
    );
    // The truth: the blackhole answers no SYN, so every request of run 2 failed to
    // connect, within the connect timeout (none was held, none timed out).
    assert_eq!(second.requests.completed, 0, "{}", run.stderr);
    assert_eq!(
        error_count(second, "connect"),
        second.requests.errored,
        "{:?}",
        second.errors
    );
    let samples = &second.errors[0].samples;
    assert!(
        samples
            .iter()
            .any(|s| s.contains("no connection within 0.200s")),
        "{samples:?}"
    );
    let lost = second
        .server_lost
        .as_ref()
        .unwrap_or_else(|| panic!("not lost: {:?}\n{}", second.errors, run.stderr));
    assert!(lost.last_success_s < 0.0, "{lost:?}");
    assert!(lost.errored >= 10, "{lost:?}");
}

/// A capacity search whose server stops taking connections once its synchronous probe
/// is done, under connects longer than a probe (the default `--connect-timeout` of 10 s,
/// probes of 2 s): no request after it errs or completes, each cut while still
/// connecting. The search ends at its first probe above the load answered, its answer
/// a lower bound said on stderr whatever `--outputs` writes. Before, it bisected on
/// against the blackhole and reported a capacity "confirmed by a second run" (found by
/// a break test).
#[test]
fn a_capacity_search_into_a_blackholed_server_ends_with_a_lower_bound() {
    let mut server =
        MockProcess::start(&["--ttft-ms", "20", "--itl-ms", "2", "--max-concurrency", "8"]);
    let live = super::signals::Live::start(
        &Bench::target(&server.url)
            .profile("capacity")
            .slo("ttft_p50<=60ms")
            .max_seconds(2)
            .max_concurrency(64)
            .data("prompt_tokens=64,output_tokens=32")
            .outputs("json"),
        false,
    );
    live.wait_for_stderr("synchronous: done");
    server.kill();
    let _hole = crate::support::Blackhole::bind(server.port);
    let run = live.finish();
    let report = ended_with(&run, llmsurge::exit_codes::INVALID_RUN);
    let capacity = report.capacity.as_ref().expect("a capacity outcome");
    let synchronous = &report.benchmarks[0];
    assert!(synchronous.requests.completed > 0, "{}", run.stderr);
    // The answer is the synchronous probe's rate, a lower bound, never a bracket.
    assert_eq!(
        capacity.rate,
        Some(synchronous.throughput.requests_per_s),
        "{capacity:#?}"
    );
    assert!(
        capacity.conclusion.contains("a lower bound") && !capacity.conclusion.contains("confirmed"),
        "{capacity:#?}"
    );
    // The truth: the mock died after the synchronous probe and nothing answered since,
    // so no later request completed or was held.
    for b in &report.benchmarks[1..] {
        assert_eq!(b.requests.completed, 0, "{}", run.stderr);
        assert_eq!(b.requests.cancelled_sent, 0, "{}", run.stderr);
    }
    assert!(report.benchmarks.len() <= 3, "{}", run.stderr);
    // Said whatever --outputs writes: by the lost rule if the throughput probe met the
    // refusals of the instant between the kill and the blackhole, else as below.
    let said = run
        .stderr
        .lines()
        .find(|l| {
            l.contains("so the capacity search ended there")
                || l.starts_with("note: the capacity search ended there")
        })
        .unwrap_or_else(|| panic!("no note of the ending:\n{}", run.stderr));
    if report.benchmarks.iter().all(|b| b.server_lost.is_none()) {
        assert!(said.contains("cut before they were sent"), "{said}");
    }
}

/// A server that stops taking connections mid-run, under connects longer than the rest
/// of the run (the default `--connect-timeout` of 10 s): every later arrival is still
/// connecting when the stop cuts it, none errs, so the run is not lost but did not keep
/// up, and the kept-up rule says the server never had those arrivals. Before, it said
/// "requests were held and not served" (found by a break test).
#[test]
fn arrivals_a_blackholed_server_never_took_did_not_keep_up_and_were_never_sent() {
    let (mut server, _dir, record) = MockProcess::recording();
    let live = super::signals::Live::start(
        &Bench::target(&server.url)
            .constant(20)
            .seed(1)
            .max_seconds(4)
            .slo("ttft_p50<=5s")
            .data(DATA)
            .request_log("requests.jsonl")
            .outputs("json"),
        false,
    );
    // A second of answers first: the scale the cut arrivals' waits are judged on.
    live.wait_for_stderr("1.0s/4s");
    server.kill();
    let _hole = crate::support::Blackhole::bind(server.port);
    let run = live.finish();
    let report = ended_with(&run, llmsurge::exit_codes::GATE_FAILED);
    let b = &report.benchmarks[0];
    assert!(b.server_lost.is_none(), "{}", run.stderr);
    assert_eq!(b.requests.cancelled_sent, 0, "{:?}", b.requests);
    let u = b.unanswered.as_ref().expect("the stop cut arrivals");
    assert!(u.overdue >= 5 && u.overdue_unsent == u.overdue, "{u:?}");
    let why = b
        .slo
        .as_ref()
        .and_then(|v| v.not_kept_up.clone())
        .unwrap_or_else(|| panic!("kept up: {}", run.stderr));
    assert!(
        why.contains("none of them was sent") && !why.contains("held and not served"),
        "{why}"
    );
    // The truth: no request the stop cut unsent reached the mock (its --record, joined
    // on the request id), and every one answered did.
    let reached: std::collections::HashSet<String> = crate::support::recorded(&record)
        .iter()
        .filter_map(|l| l["headers"]["x-request-id"].as_str().map(str::to_string))
        .collect();
    let log = read_log(&run.dir.path().join("requests.jsonl"));
    let id = |e: &RequestEntry| e.request_id.clone().expect("request ids are sent");
    let unsent: Vec<&RequestEntry> = log
        .iter()
        .filter(|e| e.status == llmsurge_proto::RequestStatus::Cancelled && e.start_time.is_none())
        .collect();
    assert!(unsent.len() as u64 >= u.overdue, "{u:?}");
    assert!(unsent.iter().all(|e| !reached.contains(&id(e))));
    assert!(
        log.iter()
            .filter(|e| e.status == llmsurge_proto::RequestStatus::Completed)
            .all(|e| reached.contains(&id(e)))
    );
    // The window runs to the last measured request's end, the unsent ones' included (they
    // were offered until the stop cut them), so the rate achieved is what the server
    // served over the whole benchmark. Before, it ended with the last sent request, at
    // the blackhole, and the reason said "achieved 16.3 of 20 req/s" for 22 requests
    // in 4 s (found by a break test).
    let last_end = log
        .iter()
        .filter(|e| e.phase == llmsurge_proto::Phase::Measured)
        .map(|e| e.end_time)
        .fold(f64::NEG_INFINITY, f64::max);
    assert!(
        (b.measured_window.end_time - last_end).abs() < 1e-3,
        "{:?}, the log's last end {last_end}",
        b.measured_window
    );
    let stop = b.start_time + b.stop_time_s.expect("the time limit stopped it");
    assert!(last_end >= stop - 1e-3, "{last_end} {stop}");
    let rate = b.measured_requests.completed as f64 / b.measured_window.duration_s;
    assert!(
        (b.throughput.requests_per_s - rate).abs() < 1e-9
            && why.contains(&format!("achieved {rate:.1} of 20 req/s")),
        "{why}"
    );
}

/// A server that dies between two `--repeat` runs (or two benchmarks of a sweep or a
/// search) fails the whole of the later one. Before, a benchmark with no success of its
/// own was never judged lost: a capacity search bisected on against the dead server and
/// reported a capacity "confirmed by a second run", and every later run was run. Now the
/// run's last success, in the run before, opens the tail: the second run is lost from
/// its first send, and nothing runs after it.
#[test]
fn a_server_that_dies_between_two_runs_is_lost_in_the_second_from_its_first_send() {
    let (mut server, _dir, record) = MockProcess::recording();
    let live = super::signals::Live::start(
        &Bench::target(&server.url)
            .constant(20)
            .max_seconds(2)
            // The last success is a cool-down request's: any window says the server
            // answered.
            .arg("--cooldown", "0.5s")
            .repeat(3)
            // Long enough for the kill to land in it on a busy machine.
            .repeat_cooldown("4s")
            .data(DATA)
            .request_log("requests.jsonl")
            .outputs("json"),
        false,
    );
    live.wait_for_stderr("repeat: run 1 of 3 done");
    let dead_at = server.kill();
    let run = live.finish();
    let report = ended_with(&run, llmsurge::exit_codes::INVALID_RUN);
    assert_eq!(report.benchmarks.len(), 2, "{}", run.stderr);
    let (first, second) = (&report.benchmarks[0], &report.benchmarks[1]);
    assert!(first.server_lost.is_none(), "{}", run.stderr);
    assert!(
        second.start_time > dead_at,
        "the kill came after run 2 started: {}",
        run.stderr
    );
    assert_eq!(second.requests.completed, 0, "{}", run.stderr);
    let lost = second
        .server_lost
        .as_ref()
        .unwrap_or_else(|| panic!("not lost: {:?}\n{}", second.requests, run.stderr));
    // The tail is of measured requests.
    assert_eq!(lost.errored, second.measured_requests.errored);

    // The truth: every success reached the mock (its --record, joined on the request
    // id), and no request of run 2 did.
    let reached: std::collections::HashSet<String> = crate::support::recorded(&record)
        .iter()
        .filter_map(|l| l["headers"]["x-request-id"].as_str().map(str::to_string))
        .collect();
    let log = read_log(&run.dir.path().join("requests.jsonl"));
    let sent = |e: &RequestEntry| e.start_time.unwrap_or(e.scheduled_time);
    let id = |e: &RequestEntry| e.request_id.clone().expect("request ids are sent");
    let completed: Vec<&RequestEntry> = log
        .iter()
        .filter(|e| e.status == llmsurge_proto::RequestStatus::Completed)
        .collect();
    assert_eq!(completed.len() as u64, first.requests.completed);
    assert!(completed.iter().all(|e| reached.contains(&id(e))));
    let of_run_2: Vec<&RequestEntry> = log
        .iter()
        .filter(|e| sent(e) >= second.start_time)
        .collect();
    assert_eq!(of_run_2.len() as u64, second.requests.created);
    assert!(of_run_2.iter().all(|e| !reached.contains(&id(e))));
    // The instants: the last success is run 1's, before run 2's start; the loss is run
    // 2's first send.
    let last_success = completed
        .iter()
        .map(|e| sent(e))
        .fold(f64::NEG_INFINITY, f64::max);
    let first_send = of_run_2
        .iter()
        .map(|e| sent(e))
        .fold(f64::INFINITY, f64::min);
    let slack = 1e-3;
    assert!(lost.last_success_s < 0.0, "{lost:?}");
    assert!((second.start_time + lost.last_success_s - last_success).abs() < slack);
    assert!((second.start_time + lost.at_s - first_send).abs() < slack);
    assert!(
        run.stderr
            .contains("none of this benchmark's: the last success was sent")
            && run.stderr.contains("after that one were not run"),
        "{}",
        run.stderr
    );
}

/// One closed-loop stream against a server that dies: before, it sent its next request at
/// once after each refused connect, thousands a second. Now it waits 10 ms, then twice
/// as long each time, at most 100 ms (worker/src/backoff.rs): the intended instants in
/// the log say so exactly, the waits are not read as a busy client's send gaps, and at
/// ten tries a second the server is still judged lost.
fn closed_loop_against_a_server_that_dies(data: &str, one_stream: fn(Bench) -> Bench) {
    let mut server = MockProcess::start(&["--instant"]);
    let (child, out) = one_stream(Bench::target(&server.url))
        .max_seconds(3)
        .request_timeout("5s")
        .data(data)
        .request_log("requests.jsonl")
        .outputs("json")
        .start(|_| {});
    wait_for("40 responses served", || server.completed() >= 40);
    server.kill();
    let run = wait_run(child, out);
    let report = ended_with(&run, llmsurge::exit_codes::INVALID_RUN);
    let b = &report.benchmarks[0];
    assert!(b.server_lost.is_some(), "{:?}\n{}", b.requests, run.stderr);
    assert!(!b.client.bottleneck, "{}", run.stderr);
    // One benchmark: the lost server ends a profile (a capacity search) there, and the
    // search's answer says so.
    assert_eq!(report.benchmarks.len(), 1, "{}", run.stderr);
    for tier in report.capacity.iter().flat_map(|c| &c.tiers) {
        assert!(tier.conclusion.contains("the server was lost"), "{tier:#?}");
        // Said on the terminal too, whatever --outputs writes.
        assert!(
            run.stderr.contains(&format!(
                "so the capacity search ended there: {}: {}",
                tier.name, tier.conclusion
            )) || run
                .stderr
                .contains(&format!("; {}: {}", tier.name, tier.conclusion)),
            "{}",
            run.stderr
        );
    }
    let mut log = read_log(&run.dir.path().join("requests.jsonl"));
    log.sort_by(|a, b| a.scheduled_time.total_cmp(&b.scheduled_time));
    let refused = |e: &RequestEntry| e.error_kind.as_deref() == Some("connect");
    let first = log
        .iter()
        .position(refused)
        .unwrap_or_else(|| panic!("no refused connect: {:?}", b.errors));
    let tail = &log[first..];
    assert!(tail.len() >= 10, "{} tries after the death", tail.len());
    for (k, pair) in tail.windows(2).enumerate() {
        let (before, next) = (&pair[0], &pair[1]);
        assert!(
            refused(before),
            "a request after the death connected: {before:?}"
        );
        let wait_ms = (10u64 << k.min(4)).min(100) as f64;
        let waited_ms = (next.scheduled_time - before.end_time) * 1e3;
        assert!(
            (waited_ms - wait_ms).abs() < 0.01,
            "try {}: intended {waited_ms} ms after the refused one before, not {wait_ms}",
            k + 2
        );
        // The wait is the stream's, not the client's: no queue time comes of it.
        assert!(next.start_time.is_none_or(|s| s >= next.scheduled_time));
    }
}

/// An overloaded server that answers three in ten requests with a fast 500 while it
/// queues the rest is not lost: the requests it still held when the stop cut them were
/// sent between its errors. The verdict is the queue's (exit 3), not an outage (4).
#[test]
fn an_overloaded_server_failing_some_requests_fast_is_not_lost() {
    let server = mock(MockConfig {
        max_concurrency: Some(2),
        error_rate: 0.3,
        ttft_ms: 50.0,
        itl_ms: 5.0,
        output_tokens: 20,
        seed: 7,
        ..MockConfig::instant()
    });
    // Two slots of 50 + 19 × 5 = 145 ms serve 14 req/s; 30 are offered.
    let run = Bench::on(&server)
        .profile("poisson")
        .rate(30)
        .seed(14)
        .max_seconds(3)
        .data("prompt_tokens=16,output_tokens=20")
        .slo("ttft_p50<=10s")
        .run();
    let report = ended_with(&run, 3);
    let stats = server.stats();
    assert!(stats.peak_queued >= 2, "the mock queued: {stats:?}");
    let b = &report.benchmarks[0];
    assert!(b.server_lost.is_none(), "{:?}", b.server_lost);
    assert!(
        b.requests.errored > 0 && b.requests.cancelled > 0,
        "{:?}",
        b.requests
    );
    let why = b
        .slo
        .clone()
        .and_then(|v| v.not_kept_up)
        .expect("did not keep up");
    assert!(why.contains(" of 30 req/s"), "{why}");
}
