//! The SLO verdicts as every output writes them (issue 36): an INCONCLUSIVE check says
//! its verdict once (Markdown, HTML), the CSV keeps failed and inconclusive checks
//! apart, a latency check over a run where no request completed fails for want of a
//! measurement, and repeated runs that were all inconclusive are inconclusive across
//! the runs. Counts are the mock's own (`/stats`).

use crate::scenario::Bench;
use crate::support::mock;
use llmsurge::mock::MockConfig;

const DATA: &str = "prompt_tokens=16,output_tokens=4";
/// Requests per run: too few for a p99 to have an upper confidence bound at 95% (368
/// are needed), enough for a p50 to have both.
const REQUESTS: u64 = 20;
/// The mock's TTFT, exact: far above the failing check's 1 ms, far below 10 s.
const TTFT_MS: f64 = 20.0;

/// A mock whose first token takes [`TTFT_MS`].
fn slow_first_token() -> llmsurge::mock::MockServer {
    mock(MockConfig {
        ttft_ms: TTFT_MS,
        itl_ms: 1.0,
        ..MockConfig::instant()
    })
}

/// 20 requests over 4 streams (a closed loop: no offered rate to keep up with) judged
/// by `slo`, written in `outputs`.
fn judged(server: &llmsurge::mock::MockServer, slo: &str, outputs: &str) -> Bench {
    Bench::on(server)
        .concurrent(4)
        .max_requests(REQUESTS)
        .data(DATA)
        .slo(slo)
        .outputs(outputs)
        .flag("--disable-progress")
}

/// A p99 of 20 requests is INCONCLUSIVE and a p50 of them far above its threshold
/// FAILS: Markdown and HTML print "inconclusive" once before the reason (they printed
/// "inconclusive: inconclusive: …"), and the CSV lists the failed check alone under
/// `slo.failed_checks` and the inconclusive one under `slo.inconclusive_checks`.
#[test]
fn an_inconclusive_check_says_so_once_and_is_not_a_failed_one() {
    let server = slow_first_token();
    let run = judged(
        &server,
        "ttft_p99<=10s,ttft_p50<=1ms",
        "json,markdown,html,csv",
    )
    .run();
    // A failed check wins over an inconclusive one.
    assert_eq!(run.code(), 3, "{}", run.stderr);
    let completed = server.stats().completed;
    assert_eq!(completed, REQUESTS);
    let read = |name: &str| {
        std::fs::read_to_string(run.dir.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let reason = format!("ttft p99 of {completed} requests lies in [");

    let md = read("benchmarks.md");
    assert!(!md.contains("inconclusive: inconclusive"), "{md}");
    let row = md
        .lines()
        .find(|l| l.contains("`ttft_p99<=10s`"))
        .unwrap_or_else(|| panic!("no row for the p99 check:\n{md}"));
    // Markdown escapes the bounds' brackets.
    assert!(
        row.contains(&format!(
            "❔ inconclusive: ttft p99 of {completed} requests lies in "
        )),
        "{row}"
    );
    let row = md
        .lines()
        .find(|l| l.contains("`ttft_p50<=1ms`"))
        .unwrap_or_else(|| panic!("no row for the p50 check:\n{md}"));
    assert!(row.contains("❌ fail"), "{row}");

    // The page prints the verdict, then ": " and the reason it embeds.
    let html = read("benchmarks.html");
    let reasons: Vec<&str> = html.split("\"reason\":\"").skip(1).collect();
    assert!(!reasons.is_empty(), "no reason in the page");
    for r in &reasons {
        assert!(
            !r.to_lowercase().starts_with("inconclusive"),
            "{}",
            &r[..80.min(r.len())]
        );
    }
    assert!(
        reasons.iter().any(|r| r.starts_with(&reason)),
        "{reasons:?}"
    );

    let row = run.csv_first_row();
    assert_eq!(row.cell("slo.verdict"), "fail");
    assert_eq!(row.cell("slo.failed_checks"), "ttft_p50<=1ms");
    assert_eq!(row.cell("slo.inconclusive_checks"), "ttft_p99<=10s");
    // Both checks' reasons: the inconclusive one's and the failed one's measurement.
    let reasons = row.cell("slo.reasons");
    assert!(reasons.starts_with(&reason), "{row:?}");
    assert!(reasons.contains(" | ttft_p50<=1ms: measured "), "{row:?}");
}

/// Every request errored (mock error rate 1): a latency check has no completed request
/// to measure, so it FAILS with that reason. The errors' own lower bounds (tiny: the mock
/// fails at once) must not pass it. The run is also invalid, and invalid (exit 4) takes
/// precedence over a failed gate (exit 3): docs/cli.md's table.
#[test]
fn a_latency_check_where_no_request_completed_fails() {
    let server = mock(MockConfig {
        error_rate: 1.0,
        ..MockConfig::instant()
    });
    let run = judged(&server, "ttft_p50<=10s,e2e_p50<=10s", "json").run();
    assert_eq!(run.code(), 4, "{}", run.stderr);
    let stats = server.stats();
    assert_eq!(
        (stats.completed, stats.responses_4xx + stats.responses_5xx),
        (0, REQUESTS)
    );
    let b = &run.report().benchmarks[0];
    assert_eq!((b.requests.completed, b.requests.errored), (0, REQUESTS));
    let verdict = b.slo.as_ref().expect("a verdict");
    assert_eq!(verdict.label(), "FAIL", "{verdict:?}");
    for (c, stat) in verdict
        .checks
        .iter()
        .zip(["ttft p50", "request_latency p50"])
    {
        assert!(!c.passed && !c.inconclusive, "{c:?}");
        // The failed requests' lower bounds are no measured value: none is shown, nor
        // bounds of one.
        assert_eq!((c.measured, c.lower, c.upper), (None, None, None), "{c:?}");
        assert_eq!(
            c.reason.as_deref(),
            Some(format!("no request completed: {stat} has nothing to measure").as_str()),
            "{c:?}"
        );
    }
}

/// Two runs (`--repeat 2`), each with a p99 of 20 requests: every run is INCONCLUSIVE,
/// none failed, so the gate across the runs is INCONCLUSIVE (not FAIL) and the run
/// exits 5.
#[test]
fn repeated_runs_all_inconclusive_are_inconclusive_across_runs() {
    let server = slow_first_token();
    let run = judged(&server, "ttft_p99<=10s", "json,console")
        .repeat(2)
        .repeat_cooldown("10ms")
        .run();
    assert_eq!(run.code(), 5, "{}", run.stderr);
    assert_eq!(server.stats().completed, 2 * REQUESTS);
    let report = run.report();
    assert_eq!(report.benchmarks.len(), 2);
    for b in &report.benchmarks {
        assert_eq!(b.requests.completed, REQUESTS);
        let v = b.slo.as_ref().expect("a verdict");
        assert_eq!(v.label(), "INCONCLUSIVE", "{v:?}");
    }
    let across = report.across_runs.first().expect("figures across the runs");
    let slo = across.slo.as_ref().expect("an SLO tally");
    assert_eq!(
        (slo.runs, slo.passed, slo.failed, slo.inconclusive),
        (2, 0, 0, 2)
    );
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains("runs passed"))
        .unwrap_or_else(|| panic!("no SLO line across the runs:\n{}", run.stdout));
    assert!(
        line.ends_with("0 of 2 runs passed (0 failed, 2 undecided): INCONCLUSIVE (no run failed; every run must pass)"),
        "{line}"
    );
    assert_eq!(
        line.to_lowercase().matches("inconclusive").count(),
        1,
        "{line}"
    );
    // Each run's notes (the reasons below the tables) name their run.
    for n in [1, 2] {
        let header = format!("concurrent@4 (run {n}):");
        assert!(
            run.stdout.lines().any(|l| l == header),
            "no notes of run {n}:\n{}",
            run.stdout
        );
    }
}
