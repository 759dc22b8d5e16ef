//! The server's own metrics (docs/server-metrics.md) against the mock's `/metrics`, whose
//! counters equal its `/stats` (docs/mock-server.md): exact counter deltas, the waiting
//! queue in the saturation verdict, a target without metrics, metrics that break mid-run,
//! the profiler hooks, and bad flags.

use super::signals::{Live, pid};
use crate::scenario::Bench;
use crate::support::{mock, ok_report, wait_for_children, wait_in_flight, wait_run};
use llmsurge::mock::{MetricsFault, MockConfig, MockServer, MockStats};
use llmsurge_coordinator::server_metrics::ServerMetrics;
use llmsurge_coordinator::{BenchmarkResult, StopReason};
use nix::sys::signal::{Signal, kill};
use std::time::{Duration, Instant};

const DATA: &str = "prompt_tokens=16,output_tokens=16";

fn server_metrics(b: &BenchmarkResult) -> &ServerMetrics {
    b.server_metrics
        .as_ref()
        .unwrap_or_else(|| panic!("no server_metrics in benchmark {}", b.index))
}

fn delta(m: &ServerMetrics, name: &str) -> f64 {
    m.summary
        .get(name)
        .and_then(|s| s.delta)
        .unwrap_or_else(|| panic!("no delta of {name}: {:?}", m.summary))
}

fn successes(s: &MockStats) -> u64 {
    s.request_success.stop + s.request_success.length
}

#[test]
fn scraped_counter_deltas_equal_the_mocks_stats_exactly() {
    let server = mock(MockConfig {
        itl_ms: 2.0,
        ..MockConfig::instant()
    });
    let before = server.stats();
    let run = Bench::on(&server)
        .constant(40)
        .max_requests(60)
        .arg("--server-metrics-interval", "200ms")
        .data("prompt_tokens=48,output_tokens=16,prefix_tokens=32,prefix_count=1")
        .run();
    let after = server.stats();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 60);
    let m = server_metrics(b);
    assert_eq!(m.server.as_deref(), Some("vllm"));
    assert!(m.url.ends_with("/metrics"), "{}", m.url);
    assert!(m.scrape_errors.is_empty(), "{:?}", m.scrape_errors);
    // Exactly the mock's own counts over the benchmark.
    let d = |f: fn(&MockStats) -> u64| (f(&after) - f(&before)) as f64;
    assert_eq!(delta(m, "generation_tokens"), d(|s| s.tokens_sent));
    assert_eq!(delta(m, "prompt_tokens"), d(|s| s.prompt_tokens));
    assert_eq!(delta(m, "request_success"), d(successes));
    assert_eq!(delta(m, "request_success"), 60.0);
    // The mock's prefix cache: a shared 32-token prefix hits, so the rate is real.
    let (queries, hits) = (d(|s| s.prefix_cache_queries), d(|s| s.prefix_cache_hits));
    assert_eq!(delta(m, "prefix_cache_queries"), queries);
    assert_eq!(delta(m, "prefix_cache_hits"), hits);
    assert!(hits > 0.0, "{hits} of {queries}");
    assert_eq!(m.derived.prefix_cache_hit_rate, Some(hits / queries));
    // And the client's: every cross-check agrees, with nothing to warn about.
    assert_eq!(m.cross_checks.len(), 3, "{:?}", m.cross_checks);
    for c in &m.cross_checks {
        assert!(c.agrees && c.difference == 0.0, "{c:?}");
    }
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    // Series on t0: the baseline before it, one point per 200 ms, the last after the end.
    let points = &m.series["generation_tokens"];
    assert!(points[0].0 < 0.0, "{points:?}");
    assert!(
        points.last().expect("points").0 >= b.duration_s,
        "{points:?}"
    );
    assert!(points.len() >= 6, "{points:?}");
    assert!(points.windows(2).all(|w| w[0].1 <= w[1].1), "{points:?}");
    // Scrapes are not benchmark requests: the mock served exactly 60 generations.
    assert_eq!(d(|s| s.requests.chat_completions), 60.0);
    // One scrape at run start, then the benchmark's (one still out at the end may land),
    // then the server fingerprint's after the run (docs/report.md).
    let scraped = d(|s| s.requests.metrics);
    assert!(
        (m.scrapes + 2..=m.scrapes + 3).contains(&(scraped as u64)),
        "the mock saw {scraped} scrapes, the report {}",
        m.scrapes
    );
}

/// 4 slots, 95 ms per request: a capacity of about 42 requests/s (see adaptive.rs).
fn capacity_mock() -> MockServer {
    mock(MockConfig {
        max_concurrency: Some(4),
        ttft_ms: 20.0,
        itl_ms: 5.0,
        output_tokens: 16,
        ..MockConfig::instant()
    })
}

#[test]
fn the_servers_waiting_queue_rises_with_the_mocks_and_the_verdict_cites_it() {
    let server = capacity_mock();
    let run = Bench::on(&server)
        .constant(84)
        .max_seconds(60)
        .arg("--over-saturation", r#"{"min_seconds": 3}"#)
        .arg("--server-metrics-interval", "250ms")
        .data(DATA)
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let Some(StopReason::OverSaturation { detail }) = &b.stop_reason else {
        panic!("expected an over-saturation stop, got {:?}", b.stop_reason)
    };
    assert!(
        detail.contains("waiting requests (num_requests_waiting) grew"),
        "{detail}"
    );
    let m = server_metrics(b);
    let waiting = &m.series["num_requests_waiting"];
    let stop = b.stop_time_s.expect("stop time");
    let inside: Vec<f64> = waiting
        .iter()
        .filter(|&&(t, _)| t > 0.0 && t <= stop)
        .map(|&(_, v)| v)
        .collect();
    assert!(inside.len() >= 8, "{waiting:?}");
    // It rises: the last second before the stop holds far more than the first.
    let (first, last) = (
        inside[..4].iter().sum::<f64>(),
        inside[inside.len() - 4..].iter().sum::<f64>(),
    );
    assert!(last > first + 8.0, "{waiting:?}");
    let max = m.summary["num_requests_waiting"].max.expect("max");
    assert!(
        max >= 5.0 && max <= server.stats().peak_queued as f64,
        "{max}"
    );
    // The running gauge is the mock's 4 slots.
    assert_eq!(m.summary["num_requests_running"].max, Some(4.0));
}

/// A run of 40 requests at 20/s against `server` (scraping every 200 ms where the
/// options say so).
fn short_run(server: &MockServer) -> Bench {
    Bench::on(server).constant(20).max_requests(40).data(DATA)
}

#[test]
fn a_target_without_metrics_runs_on_with_one_line() {
    let server = mock(MockConfig {
        no_metrics: true,
        ..MockConfig::instant()
    });
    let run = short_run(&server).run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 40);
    assert!(b.server_metrics.is_none());
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("server metrics"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    let expected = format!(
        "no server metrics at {}/metrics (HTTP 404",
        server.base_url()
    );
    assert!(lines[0].starts_with(&expected), "{}", lines[0]);
    // Kept in the report, so a reader knows why there are none.
    assert!(
        report
            .target
            .warnings
            .iter()
            .any(|w| w.starts_with(&expected)),
        "{:?}",
        report.target.warnings
    );
    // Checked once at run start, never again.
    assert_eq!(server.stats().requests.metrics, 1);

    // Asked for by URL: a warning, and scraped anyway (every scrape an error here).
    let url = format!("{}/metrics", server.base_url());
    let run = short_run(&server).arg("--server-metrics", &url).run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 40);
    let warning = format!("warning: --server-metrics {url} did not answer at run start (HTTP 404");
    assert!(run.stderr.contains(&warning), "{}", run.stderr);
    let m = server_metrics(b);
    assert_eq!(m.scrape_errors.len(), 1, "{:?}", m.scrape_errors);
    assert_eq!(m.scrape_errors[0].kind, "status");
    assert_eq!(m.scrape_errors[0].count, m.scrapes);
    assert!(m.series.is_empty() && m.cross_checks.is_empty());
}

/// Metrics that break after the run-start check and the baseline: the run finishes with
/// the client's numbers, the failures counted under `kind`.
fn breaking_metrics(fault: MetricsFault, kind: &str) {
    let server = mock(MockConfig {
        metrics_fault: Some(fault),
        metrics_fault_after: 2,
        ..MockConfig::instant()
    });
    let run = short_run(&server)
        .arg("--server-metrics-interval", "200ms")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 40);
    assert_eq!(b.measured_requests.completed, 40);
    assert_eq!(server.stats().requests.chat_completions, 40);
    // Never delayed: the benchmark ends with its last request, a hung scrape costing it
    // at most its 1 s timeout (ScrapeConfig::timeout_for the 200 ms interval) after that,
    // however long a busy machine made the requests (plus 0.5 s for the coordinator to
    // notice on such a machine).
    let last_end = b.measured_window.end_time - b.start_time;
    assert!(
        b.duration_s < last_end + 1.5,
        "{} s, the last request ended at {last_end} s",
        b.duration_s
    );
    let m = server_metrics(b);
    let errors = m
        .scrape_errors
        .iter()
        .find(|e| e.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} errors: {:?}", m.scrape_errors));
    assert!(errors.count >= 1, "{errors:?}");
    assert!(!errors.sample.is_empty());
    assert_eq!(m.scrape_errors.len(), 1, "{:?}", m.scrape_errors);
    // The baseline scrape answered; every one after it failed.
    assert_eq!(m.series["generation_tokens"].len(), 1, "{:?}", m.series);
    assert_eq!(m.scrapes, errors.count + 1);
}

#[test]
fn metrics_answering_500_mid_run_are_counted_as_scrape_errors() {
    breaking_metrics(MetricsFault::Error, "status");
}

#[test]
fn metrics_answering_garbage_mid_run_are_counted_as_scrape_errors() {
    breaking_metrics(MetricsFault::Garbage, "parse");
}

#[test]
fn metrics_hanging_mid_run_are_counted_as_scrape_timeouts() {
    breaking_metrics(MetricsFault::Hang, "timeout");
}

#[test]
fn profile_server_brackets_every_benchmark() {
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    // Off by its variable: the profiler still runs, nothing is scraped.
    let (child, dir) = Bench::target(&url)
        .constant("20,30")
        .max_requests(10)
        .flag("--profile-server")
        .data(DATA)
        .start(|cmd| {
            cmd.env("LLMSURGE_SERVER_METRICS", "off");
        });
    let run = wait_run(child, dir);
    let report = ok_report(&run);
    assert_eq!(report.benchmarks.len(), 2);
    assert!(report.benchmarks.iter().all(|b| b.server_metrics.is_none()));
    let stats = server.stats();
    assert_eq!(
        (
            stats.requests.start_profile,
            stats.requests.stop_profile,
            stats.requests.metrics
        ),
        (2, 2, 0)
    );
    assert!(!run.stderr.contains("profile"), "{}", run.stderr);

    // A server without the profiler: warnings on stderr and in the report, the run goes on.
    let bare = mock(MockConfig {
        no_profiler: true,
        ..MockConfig::instant()
    });
    let run = short_run(&bare).flag("--profile-server").run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 40);
    for call in ["start_profile", "stop_profile"] {
        let line = format!(
            "warning: --profile-server: POST {}/{call} failed (HTTP 404",
            bare.base_url()
        );
        assert!(run.stderr.contains(&line), "{line}: {}", run.stderr);
        assert!(
            server_metrics(b)
                .warnings
                .iter()
                .any(|w| w.contains(&format!("/{call} failed"))),
            "{:?}",
            server_metrics(b).warnings
        );
    }
}

#[test]
fn bad_server_metrics_flags_are_one_line_usage_errors() {
    let cases: [(&[&str], &str); 5] = [
        (&["--server-metrics", "ftp://h/metrics"], "--server-metrics"),
        (&["--server-metrics", "not a url"], "--server-metrics"),
        (
            &["--server-metrics-interval", "10ms"],
            "--server-metrics-interval",
        ),
        (
            &["--server-metrics-include", "(unclosed"],
            "--server-metrics-include",
        ),
        (
            &["--server-metrics", "off", "--server-metrics-include", "x"],
            "--server-metrics-include has no effect",
        ),
    ];
    for (flags, needle) in cases {
        let out = Bench::target("http://127.0.0.1:9")
            .max_requests(1)
            .args_as_written(flags)
            .run();
        assert_eq!(out.code(), 2, "{flags:?}: {}", out.stderr);
        assert!(
            out.stderr.contains(needle) && out.stderr.lines().count() == 1,
            "{flags:?}: {}",
            out.stderr
        );
    }
    // Credentials in a bad URL are not echoed.
    let out = Bench::target("http://127.0.0.1:9")
        .arg("--server-metrics", "http://user:hunter2@")
        .run();
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(!out.stderr.contains("hunter2"), "{}", out.stderr);
}

#[test]
fn with_a_warmup_the_deltas_cover_the_measured_window_without_a_cross_check() {
    let server = mock(MockConfig::instant());
    let run = short_run(&server)
        .arg("--warmup", "10req")
        .arg("--server-metrics-interval", "200ms")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!(b.measured_requests.completed, 30);
    let m = server_metrics(b);
    assert!(m.cross_checks.is_empty(), "{:?}", m.cross_checks);
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("--warmup or --cooldown")),
        "{:?}",
        m.warnings
    );
    // The window opens between two scrapes: at least the measured requests, at most all.
    let ok = delta(m, "request_success");
    assert!((30.0..=40.0).contains(&ok), "{ok}");
}

#[test]
fn streams_cut_at_max_seconds_still_agree_with_the_servers_counts() {
    // Each request streams for ~1 s, so at the 2 s limit about 20 are cut mid-stream: the
    // server generated (and counted) their tokens, and the client received them.
    let server = mock(MockConfig {
        itl_ms: 5.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .constant(20)
        .max_seconds(2)
        .arg("--server-metrics-interval", "200ms")
        .data("prompt_tokens=32,output_tokens=200")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert!(
        b.measured_requests.cancelled >= 5,
        "{:?}",
        b.measured_requests
    );
    let m = server_metrics(b);
    let names: Vec<&str> = m.cross_checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["generation_tokens", "prompt_tokens", "request_success"],
        "{:?}",
        m.warnings
    );
    for c in &m.cross_checks {
        assert!(c.agrees, "{c:?}: {:?}", m.warnings);
    }
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
}

#[test]
fn tokens_a_descheduled_client_never_read_at_the_stop_are_within_its_range() {
    // A client descheduled when the time limit cuts its streams: the server generated
    // (and counted) tokens that sit unread in socket buffers and are dropped with the
    // cancel. Worker 0 is stopped while its streams are under way and let go once the
    // other worker has cancelled at the stop: the server's count exceeds what the client
    // received, by no more than the cut requests' max_tokens.
    let server = mock(MockConfig {
        itl_ms: 5.0,
        ..MockConfig::instant()
    });
    let bench = Bench::on(&server)
        .constant(20)
        .workers(2)
        .max_seconds(2)
        .arg("--server-metrics-interval", "200ms")
        .data("prompt_tokens=32,output_tokens=200");
    let live = Live::start(&bench, false);
    let workers = wait_for_children(live.pid(), 2);
    wait_in_flight(&server, 6);
    kill(pid(workers[0]), Signal::SIGSTOP).expect("SIGSTOP the worker");
    // The other worker cancels its streams at the stop: the limit has fired.
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.stats().cancelled == 0 {
        if Instant::now() > deadline {
            let _ = kill(pid(workers[0]), Signal::SIGCONT);
            panic!("the time limit never cancelled: {:?}", server.stats());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    kill(pid(workers[0]), Signal::SIGCONT).expect("SIGCONT the worker");
    let run = live.finish();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let m = server_metrics(b);
    let check = m
        .cross_checks
        .iter()
        .find(|c| c.name == "generation_tokens")
        .unwrap_or_else(|| panic!("no generation_tokens check: {:?}", m.warnings));
    // The truth: the mock's own count of tokens it handed over (read after the end
    // scrape, so perhaps a cancelled stream's last write more), beside the report's.
    let sent = server.stats().tokens_sent as f64;
    assert!(
        check.server <= sent && check.server > 0.9 * sent,
        "{check:?}, {sent}"
    );
    // The fault happened: tokens generated that the client never read, beyond the
    // tolerance an exact count allows.
    assert!(check.server > check.client * 1.02, "{check:?}");
    assert!(check.agrees, "{check:?}: {:?}", m.warnings);
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    // Each cut request asked for 200: what the client received plus their rest.
    let upper = check.client_upper.expect("a range");
    let cut = b.measured_requests.cancelled + b.measured_requests.errored;
    assert!(cut > 0, "{:?}", b.measured_requests);
    assert!(
        upper > check.client && upper <= check.client + 200.0 * cut as f64,
        "{check:?}, {cut} cut"
    );
    assert!(
        !run.stderr.contains("DISAGREES") && !run.stdout.contains("DISAGREES"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
}
