//! Request formats and server faults: every fault becomes an errored request with its
//! kind and a reason, never a hang or a crash.

use crate::scenario::Bench;
use crate::support::{assert_identity, mock, ok_report};
use llmsurge::mock::MockConfig;

const DATA: &str = "prompt_tokens=16,output_tokens=8";

fn error_count(b: &llmsurge_coordinator::BenchmarkResult, kind: &str) -> u64 {
    b.errors
        .iter()
        .find(|e| e.kind == kind)
        .map_or(0, |e| e.count)
}

#[test]
fn server_faults_become_errors_of_their_kind() {
    let server = mock(MockConfig {
        drop_rate: 0.2,
        garbage_rate: 0.2,
        stall_rate: 0.1,
        seed: 3,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .concurrent(8)
        .max_requests(120)
        .request_timeout("2s")
        .data(DATA)
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let faults = server.stats().faults;
    assert_eq!(
        error_count(b, "stream_broken"),
        faults.drop,
        "{:?}",
        b.errors
    );
    assert_eq!(
        error_count(b, "malformed_response"),
        faults.garbage,
        "{:?}",
        b.errors
    );
    assert_eq!(error_count(b, "timeout"), faults.stall, "{:?}", b.errors);
    assert!(
        faults.drop > 0 && faults.garbage > 0 && faults.stall > 0,
        "{faults:?}"
    );
    assert_eq!(b.requests.completed + b.requests.errored, 120);
    assert_eq!(
        b.requests.errored,
        faults.drop + faults.garbage + faults.stall
    );
    assert_identity(&report);
    for e in &b.errors {
        assert!(
            e.samples.first().is_some_and(|s| !s.is_empty()),
            "{}: no sample message",
            e.kind
        );
    }
    // Nothing waited past its bound: a stalled request ends at the 2 s request timeout
    // (at least 2 s; the bound below is the 10 s the stall would otherwise have run
    // into, the drain timeout, not a guess at how late a busy machine fires a timer).
    let errored = &b.metrics["request_latency"].errored;
    assert!(errored.max < 10_000.0, "{errored:?}");
    let timeout = b
        .errors
        .iter()
        .find(|e| e.kind == "timeout")
        .expect("timeouts");
    assert!(
        timeout.samples[0].contains("2.000s"),
        "{:?}",
        timeout.samples
    );
}

#[test]
fn a_ttft_timeout_bounds_the_wait_for_the_first_token() {
    let server = mock(MockConfig {
        ttft_ms: 5_000.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(2)
        .arg("--ttft-timeout", "200ms")
        .data(DATA)
        .run();
    // Nothing succeeded: an invalid run.
    assert_eq!(
        run.code(),
        llmsurge::exit_codes::INVALID_RUN,
        "{}",
        run.stderr
    );
    let b = &run.report().benchmarks[0];
    assert_eq!(error_count(b, "timeout"), 2);
    // The first token would have come at 5 s: a run that waited for it lasts that long.
    assert!(b.duration_s < 5.0, "{}", b.duration_s);
}

#[test]
fn completions_non_streaming_and_http2_work() {
    let server = mock(MockConfig {
        output_tokens: 8,
        ..MockConfig::instant()
    });
    let url = server.base_url();
    for extra in [
        vec!["--request-format", "completions"],
        vec!["--stream", "false"],
        vec!["--http2"],
        vec![
            "--request-format",
            "completions",
            "--stream",
            "false",
            "--http2",
        ],
    ] {
        let run = Bench::target(&url)
            .concurrent(2)
            .max_requests(10)
            .data(DATA)
            .args_as_written(&extra)
            .run();
        assert_eq!(run.code(), 0, "{extra:?}: {}", run.stderr);
        let b = &run.report().benchmarks[0];
        assert_eq!(b.requests.completed, 10, "{extra:?}: {:?}", b.errors);
        assert_eq!(
            b.metrics["output_tokens"].successful.percentiles.p50, 8.0,
            "{extra:?}"
        );
    }
    let stats = server.stats();
    assert_eq!(stats.requests.completions, 20);
    assert_eq!(stats.requests.chat_completions, 20);
}

#[test]
fn backend_kwargs_reach_the_request_body() {
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(5)
        .data(DATA)
        .arg(
            "--backend-kwargs",
            r#"{"extra_body": {"max_tokens": 3}, "headers": {"X-Trace": "t"}, "params": {"a": 1}}"#,
        )
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    // extra_body overrides the data's output length.
    assert_eq!(
        run.report().benchmarks[0].metrics["output_tokens"]
            .successful
            .percentiles
            .p50,
        3.0
    );
}

#[test]
fn a_concurrency_cap_makes_slots_late_and_says_so() {
    let server = mock(MockConfig {
        ttft_ms: 100.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .constant(40)
        .max_requests(20)
        .max_concurrency(1)
        .data(DATA)
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let b = &run.report().benchmarks[0];
    assert_eq!(server.stats().peak_active, 1);
    assert!(b.requests.late >= 15, "{:?}", b.requests);
    assert_eq!(b.client.late_requests, b.requests.late);
    assert!(
        b.client.warnings.iter().any(|w| w.contains("late")),
        "{:?}",
        b.client.warnings
    );
    assert!(!b.client.bottleneck, "a cap is not a client bottleneck");
}

#[test]
fn reasoning_tokens_separate_first_token_from_first_output_token() {
    // 10 reasoning tokens stream first, 5 ms apart, then the content.
    let server = mock(MockConfig {
        ttft_ms: 20.0,
        itl_ms: 5.0,
        reasoning_tokens: 10,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(5)
        // A cap above the 10 reasoning tokens, which it counts, leaves room for content.
        .data("prompt_tokens=16,output_tokens=20")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let b = &run.report().benchmarks[0];
    let (any, content) = (
        &b.metrics["ttft_any"].successful,
        &b.metrics["ttft"].successful,
    );
    // Lower bounds, which no busy machine can break (the mock's timers never fire
    // early): the first token of any kind at the 20 ms TTFT; the first content token
    // 10 gaps of 5 ms later, so never before 70 ms, and after the first reasoning token.
    assert!(any.min >= 19.9, "ttft_any {any:?}");
    assert!(content.min >= 69.9, "ttft {content:?}");
    assert!(
        content.percentiles.p50 > any.percentiles.p50,
        "ttft {} vs any {}",
        content.percentiles.p50,
        any.percentiles.p50
    );
}
