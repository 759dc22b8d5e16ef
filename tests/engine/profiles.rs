//! Every profile runs end to end and starts the number of requests it should.

use crate::scenario::Bench;
use crate::support::{ended_with, mock, ok_report};
use llmsurge::mock::MockConfig;

fn slow_mock() -> MockConfig {
    MockConfig {
        ttft_ms: 50.0,
        itl_ms: 5.0,
        output_tokens: 16,
        ..MockConfig::instant()
    }
}

#[test]
fn constant_rate_starts_rate_times_duration_requests() {
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server).constant(50).max_seconds(4).run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    // Slots at 0, 20 ms, … 4.0 s: 201 fall within [0, 4 s]; those due by the stop are
    // created, how many of the last few a busy machine sent in time aside.
    crate::support::assert_cut_at_the_limit(b.stop_time_s, b.requests.created, 0.02, 4.0);
    // A request cancelled at the time limit may or may not have reached the server.
    let seen = server.stats().requests.chat_completions;
    assert!(
        seen <= b.requests.created && seen >= b.requests.created - b.requests.cancelled,
        "server saw {seen}"
    );
}

#[test]
fn concurrent_holds_exactly_its_stream_count_in_flight() {
    let server = mock(slow_mock());
    let run = Bench::on(&server).concurrent(8).max_seconds(2).run();
    ok_report(&run);
    assert_eq!(server.stats().peak_active, 8);
}

#[test]
fn synchronous_never_has_two_in_flight() {
    let server = mock(MockConfig {
        ttft_ms: 10.0,
        itl_ms: 1.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server).synchronous().max_seconds(2).run();
    let report = ok_report(&run);
    assert_eq!(server.stats().peak_active, 1);
    assert_eq!(
        report.benchmarks[0].workers.len(),
        1,
        "synchronous runs on one worker"
    );
    assert!(report.benchmarks[0].requests.completed > 10);
}

#[test]
fn poisson_count_lands_in_a_statistically_sound_band() {
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server)
        .profile("poisson")
        .rate(100)
        .max_seconds(20)
        .run();
    let report = ok_report(&run);
    // Arrivals in 20 s at 100/s are Poisson(2000): sd = sqrt(2000) ≈ 44.7. Five sd either
    // side fails a correct implementation with probability < 1e-6.
    let n = report.benchmarks[0].requests.created as f64;
    assert!(
        (2000.0 - 5.0 * 44.7..=2000.0 + 5.0 * 44.7).contains(&n),
        "created {n}"
    );
}

#[test]
fn max_requests_yields_exactly_that_many() {
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server).concurrent(7).max_requests(100).run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!((b.requests.created, b.requests.completed), (100, 100));
    assert_eq!(server.stats().requests.chat_completions, 100);
    assert!(matches!(
        b.stop_reason,
        Some(llmsurge_coordinator::StopReason::MaxRequests { requests: 100 })
    ));
}

#[test]
fn throughput_fills_its_concurrency() {
    let server = mock(slow_mock());
    let run = Bench::on(&server)
        .profile("throughput")
        .max_concurrency(16)
        .max_seconds(2)
        .run();
    ok_report(&run);
    assert_eq!(server.stats().peak_active, 16);
}

#[test]
fn a_rate_list_runs_one_benchmark_per_rate() {
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server).constant("20,40").max_seconds(1).run();
    let report = ok_report(&run);
    let rates: Vec<String> = report
        .benchmarks
        .iter()
        .map(|b| b.strategy.to_string())
        .collect();
    assert_eq!(rates, ["constant@20", "constant@40"]);
    assert!(report.metadata.complete);
    assert!(report.benchmarks[1].requests.created > report.benchmarks[0].requests.created);
}

#[test]
fn one_or_four_workers_give_the_same_totals() {
    let totals = |workers: &str| {
        let server = mock(MockConfig::instant());
        let run = Bench::on(&server)
            .constant(200)
            .max_requests(300)
            .arg("--workers", workers)
            // The mock counts prompt tokens with its own tokenizer: the same text needed.
            .seed(4)
            .run();
        let report = ended_with(&run, 0);
        let b = &report.benchmarks[0];
        assert_eq!(b.workers.len().to_string(), workers);
        let prompt_tokens = b.metrics["prompt_tokens"].successful.mean
            * b.metrics["prompt_tokens"].successful.count as f64;
        (
            b.requests.created,
            b.requests.completed,
            b.metrics["output_tokens"].successful.count,
            prompt_tokens.round(),
            server.stats().prompt_tokens,
        )
    };
    assert_eq!(totals("1"), totals("4"));
}
