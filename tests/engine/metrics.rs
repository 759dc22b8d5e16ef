//! Measured latencies against a mock with known delays, and report contents.

use crate::support::{mock, ok_report, run};
use llmsurge::mock::MockConfig;

/// Against a mock with TTFT 50 ms and 5 ms between tokens (no spread):
/// - TTFT cannot be below 50 ms (the server's timer never fires early and the request
///   must reach it first). Above: timer lateness (tokio's wheel ticks every ms), loopback
///   and parsing, well under 10 ms even on a loaded debug build, so p50 ∈ [50, 60].
/// - ITL: the mock schedules tokens on deadlines 5 ms apart from the first, so a late
///   token makes the next gap short; the median gap stays within a tick of 5 ms and the
///   mean within half a millisecond more: p50 ∈ [4, 7], mean ∈ [4.5, 6.5].
/// - TPOT ≈ the mean gap; e2e ≥ 50 + 15 × 5 = 125 ms for 16 tokens.
#[test]
fn ttft_and_itl_match_the_configured_delays() {
    let server = mock(MockConfig {
        ttft_ms: 50.0,
        itl_ms: 5.0,
        output_tokens: 16,
        ..MockConfig::default()
    });
    let run = run(&[
        "--target",
        &server.base_url(),
        "--profile",
        "synchronous",
        "--max-requests",
        "30",
        "--data",
        "prompt_tokens=64,output_tokens=16",
    ]);
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let ttft = &b.metrics["ttft"].successful;
    let itl = &b.metrics["itl"].successful;
    let tpot = &b.metrics["tpot"].successful;
    let e2e = &b.metrics["request_latency"].successful;
    assert_eq!(ttft.count, 30);
    assert!(
        (50.0..=60.0).contains(&ttft.percentiles.p50),
        "ttft p50 {}",
        ttft.percentiles.p50
    );
    assert!(ttft.min >= 49.9, "ttft min {}", ttft.min);
    assert_eq!(itl.count, 30 * 15, "15 gaps per 16-token request");
    assert!(
        (4.0..=7.0).contains(&itl.percentiles.p50),
        "itl p50 {}",
        itl.percentiles.p50
    );
    assert!((4.5..=6.5).contains(&itl.mean), "itl mean {}", itl.mean);
    assert!((4.5..=6.5).contains(&tpot.mean), "tpot mean {}", tpot.mean);
    assert!(e2e.min >= 124.9, "e2e min {}", e2e.min);
    assert_eq!(b.metrics["output_tokens"].successful.percentiles.p50, 16.0);
    assert_eq!(b.token_sources.usage, 30, "the mock sends usage when asked");
}

/// A chunk carrying k tokens contributes k gaps of gap/k.
#[test]
fn chunks_of_several_tokens_count_every_token_gap() {
    let server = mock(MockConfig {
        ttft_ms: 5.0,
        itl_ms: 4.0,
        output_tokens: 16,
        tokens_per_chunk: 4,
        ..MockConfig::default()
    });
    let run = run(&[
        "--target",
        &server.base_url(),
        "--profile",
        "synchronous",
        "--max-requests",
        "10",
        "--data",
        "prompt_tokens=8,output_tokens=16",
    ]);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let b = &run.report().benchmarks[0];
    let itl = &b.metrics["itl"].successful;
    // 4 chunks per request: 3 chunk gaps of ~16 ms, each counted as 4 gaps of ~4 ms.
    assert_eq!(itl.count, 10 * 3 * 4);
    assert!(
        (3.0..=6.0).contains(&itl.percentiles.p50),
        "itl p50 {}",
        itl.percentiles.p50
    );
    assert_eq!(
        b.token_sources.mismatched, 10,
        "usage says 16 tokens, the stream had 4 chunks"
    );
}

#[test]
fn the_report_has_its_schema_metadata_and_redacted_args() {
    let server = mock(MockConfig::default());
    let run = run(&[
        "--target",
        &server.base_url(),
        "--profile",
        "constant",
        "--rate",
        "20",
        "--max-requests",
        "10",
        "--api-key",
        "sk-very-secret-value",
    ]);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let raw = std::fs::read_to_string(run.report_path()).expect("report");
    assert!(
        !raw.contains("sk-very-secret-value"),
        "the API key leaked into the report"
    );
    assert!(
        !run.stderr.contains("sk-very-secret-value")
            && !run.stdout.contains("sk-very-secret-value")
    );
    let report = run.report();
    assert_eq!(
        report.schema_version,
        llmsurge::report::REPORT_SCHEMA_VERSION
    );
    assert_eq!(report.metadata.tool, "llmsurge");
    assert!(report.metadata.complete && !report.metadata.interrupted);
    assert!(report.metadata.host.cpus > 0);
    assert_eq!(report.args["backend"]["api_key"], "***");
    assert_eq!(report.target.model, server.model());
    let b = &report.benchmarks[0];
    assert!(b.end_time > b.start_time && b.start_time >= report.metadata.start_time - 1.0);
    assert!(!b.timeseries.is_empty());
    for status in ["successful", "errored", "incomplete", "total"] {
        assert!(
            raw.contains(&format!("\"{status}\"")),
            "{status} distributions"
        );
    }
    // The console summary names the benchmark.
    assert!(run.stdout.contains("constant@20"), "{}", run.stdout);
}

#[test]
fn server_errors_are_counted_per_kind_with_a_sample_message() {
    let server = mock(MockConfig {
        error_rate: 0.3,
        seed: 7,
        ..MockConfig::default()
    });
    let run = run(&[
        "--target",
        &server.base_url(),
        "--profile",
        "concurrent",
        "--rate",
        "4",
        "--max-requests",
        "200",
    ]);
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let faults = server.stats().faults;
    let injected = faults.error_500 + faults.error_429;
    assert_eq!(b.requests.errored, injected);
    assert!(injected > 20, "{injected}");
    let by_kind: u64 = b.errors.iter().map(|e| e.count).sum();
    assert_eq!(by_kind, injected);
    assert!(
        b.errors
            .iter()
            .all(|e| e.kind == "http_500" || e.kind == "http_429"),
        "{:?}",
        b.errors
    );
    assert!(b.errors.iter().all(|e| !e.samples.is_empty()));
}
