//! Sweeps, warm-up/cool-down, over-saturation, SLO verdicts and the capacity search,
//! against the mock's capacity model: C slots and a fixed service time S give a capacity
//! of C/S requests per second (docs/mock-server.md).

use crate::scenario::Bench;
use crate::support::{mock, ok_report};
use llmsurge::mock::MockConfig;
use llmsurge_coordinator::profiles::RateSource;
use llmsurge_coordinator::{StopReason, Strategy};

/// 4 slots; each request takes S = 20 ms + 15 × 5 ms = 95 ms for 16 tokens, so the
/// capacity is 4 / 0.095 ≈ 42 requests/s.
fn capacity_mock() -> MockConfig {
    MockConfig {
        max_concurrency: Some(4),
        ttft_ms: 20.0,
        itl_ms: 5.0,
        output_tokens: 16,
        ..MockConfig::instant()
    }
}
const CAPACITY: f64 = 4.0 / 0.095;
const DATA: &str = "prompt_tokens=16,output_tokens=16";

/// The rate the throughput probe of a capacity search achieved: the capacity the mock
/// had on this machine during this run, the noise of a busy machine included.
fn measured_capacity(capacity: &llmsurge_coordinator::profiles::CapacityOutcome) -> f64 {
    capacity
        .probes
        .iter()
        .find(|p| matches!(p.strategy, Strategy::Throughput { .. }))
        .expect("a throughput probe")
        .rate
}

#[test]
fn a_sweep_spans_synchronous_to_throughput_in_even_steps() {
    let server = mock(capacity_mock());
    let url = server.base_url();
    let run = Bench::target(&url)
        .profile("sweep")
        .rate(5)
        .max_seconds(3)
        .max_concurrency(32)
        .data(DATA)
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks;
    assert_eq!(b.len(), 5);
    assert_eq!(b[0].strategy, Strategy::Synchronous);
    assert_eq!(
        b[1].strategy,
        Strategy::Throughput {
            max_concurrency: 32
        }
    );
    let (lo, hi) = (
        b[0].throughput.requests_per_s,
        b[1].throughput.requests_per_s,
    );
    // Synchronous does one request per service time; throughput saturates the C slots.
    // Neither can beat the model (a request holds its slot at least S: timers never fire
    // early); how far below it a busy machine lands is noise, so throughput is held to
    // the synchronous rate of the same run: the slots work in parallel (4x when idle).
    // (1%: the measured window's ends.)
    assert!(
        lo > 0.0 && lo <= 1.0 / 0.095 * 1.01,
        "synchronous {lo} req/s"
    );
    assert!(
        hi <= CAPACITY * 1.01 && hi >= 2.0 * lo,
        "throughput {hi} req/s vs capacity {CAPACITY}, synchronous {lo}"
    );
    for (k, r) in b[2..].iter().enumerate() {
        let Strategy::Constant { rate } = r.strategy else {
            panic!("constant expected: {:?}", r.strategy)
        };
        let expected = lo + (k + 1) as f64 * (hi - lo) / 4.0;
        assert!(
            (rate - expected).abs() < 1e-9,
            "rate {rate} vs evenly spaced {expected}"
        );
        // Below the capacity this run measured, the schedule was held without the cap.
        assert_eq!(r.requests.late, 0, "offered {rate}: {:?}", r.requests);
    }
    let achieved: Vec<f64> = b[2..].iter().map(|r| r.throughput.requests_per_s).collect();
    assert!(
        achieved.windows(2).all(|w| w[1] > w[0]),
        "throughput rises with the rate: {achieved:?}"
    );
    // Past capacity requests queue: TTFT at saturation dwarfs TTFT one at a time.
    let ttft = |i: usize| b[i].metrics["ttft"].successful.percentiles.p50;
    assert!(
        ttft(1) > 5.0 * ttft(0),
        "ttft p50 synchronous {} vs throughput {}",
        ttft(0),
        ttft(1)
    );
}

#[test]
fn warmup_and_cooldown_by_request_count_are_excluded_exactly() {
    let server = mock(MockConfig {
        ttft_ms: 2.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .concurrent(3)
        .max_requests(50)
        .arg("--warmup", "10req")
        .arg("--cooldown", "15req")
        .data(DATA)
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!((b.requests.created, b.requests.completed), (50, 50));
    assert_eq!((b.requests.warmup, b.requests.cooldown), (10, 15));
    assert_eq!(b.measured_requests.completed, 25);
    for metric in ["ttft", "request_latency", "output_tokens", "dispatch_lag"] {
        assert_eq!(b.metrics[metric].successful.count, 25, "{metric}");
    }
    assert_eq!(
        (b.window.warmup_slots, b.window.cooldown_from_slot),
        (Some(10), Some(35))
    );
}

#[test]
fn over_saturation_stops_an_overloaded_benchmark_early() {
    let server = mock(capacity_mock());
    let rate = format!("{}", (2.0 * CAPACITY).round());
    let run = Bench::on(&server)
        .constant(&rate)
        .max_seconds(60)
        .arg("--over-saturation", r#"{"min_seconds": 3}"#)
        .data(DATA)
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let Some(StopReason::OverSaturation { detail }) = &b.stop_reason else {
        panic!("expected an over-saturation stop, got {:?}", b.stop_reason)
    };
    // Not before its min_seconds; before the 60 s limit, as its reason says (how soon
    // after 3 s the detector is sure depends on how the machine slows the mock).
    let at = b.stop_time_s.expect("stop time");
    assert!((3.0..60.0).contains(&at), "stopped at {at}s ({detail})");
    assert!(b.duration_s < 60.0, "{}", b.duration_s);
}

#[test]
fn over_saturation_leaves_a_healthy_benchmark_alone() {
    let server = mock(capacity_mock());
    // A quarter of its capacity: about one request in flight. At half, a shared machine
    // that slowed this debug mock for a few seconds (TTFT 20 → 35 ms mean) had it
    // queue, and both client series rightly grew: the mock itself was drowning. Here
    // its latency must double before in-flight grows by the one request the rule asks.
    let rate = format!("{}", (0.25 * CAPACITY).round());
    let run = Bench::on(&server)
        .constant(&rate)
        .max_seconds(12)
        .arg("--over-saturation", r#"{"min_seconds": 3}"#)
        .data(DATA)
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let b = &run.report().benchmarks[0];
    assert!(
        matches!(b.stop_reason, Some(StopReason::MaxSeconds { .. })),
        "{:?}",
        b.stop_reason
    );
}

#[test]
fn slo_verdicts_set_the_exit_code_and_name_the_failures() {
    let bench = |url: &str, requests: u64| {
        Bench::target(url)
            .concurrent(10)
            .max_requests(requests)
            .data(DATA)
            .slo("ttft_p99<=100ms,error_rate<=1%")
    };
    let fast = mock(MockConfig {
        ttft_ms: 5.0,
        ..MockConfig::instant()
    });
    // A p99 passes on 368 requests at least at 95% (fewer bound it only from below:
    // inconclusive); it fails on fewer, once its lower bound is beyond the threshold.
    let run_fast = bench(&fast.base_url(), 400).run();
    assert_eq!(run_fast.code(), 0, "{}", run_fast.stderr);
    let verdict = run_fast.report().benchmarks[0]
        .slo
        .clone()
        .expect("verdict");
    assert!(verdict.passed && verdict.checks.len() == 2);

    let slow = mock(MockConfig {
        ttft_ms: 200.0,
        ..MockConfig::instant()
    });
    let run_slow = bench(&slow.base_url(), 100).run();
    assert_eq!(
        run_slow.code(),
        llmsurge::exit_codes::GATE_FAILED,
        "{}",
        run_slow.stderr
    );
    let verdict = run_slow.report().benchmarks[0]
        .slo
        .clone()
        .expect("verdict");
    assert!(!verdict.passed);
    assert!(!verdict.checks[0].passed && verdict.checks[1].passed);
    assert!(verdict.checks[0].measured.is_some_and(|m| m >= 200.0));
    let row = run_slow
        .stdout
        .lines()
        .find(|l| l.contains("ttft_p99<=100ms"))
        .expect("a row for the failed check");
    assert!(
        row.contains("FAIL") && row.contains("concurrent@10") && row.contains("100"),
        "{row}"
    );
}

#[test]
fn the_capacity_search_finds_the_mock_capacity() {
    let server = mock(capacity_mock());
    let run = Bench::on(&server)
        .profile("capacity")
        // The median: a busy machine's stalls of a few ms reach a p99 at any rate, and
        // the search is about where the queue starts, which moves the median too.
        .slo("ttft_p50<=60ms")
        .max_seconds(4)
        .max_concurrency(32)
        .data(DATA)
        .run();
    let report = ok_report(&run);
    let capacity = report.capacity.expect("a capacity outcome");
    let rate = capacity.rate.expect("a rate");
    // Never above the model's capacity (a busy machine only slows the mock); below it,
    // within the noise of this run: 80% of the capacity its throughput probe measured
    // (C/S on an idle machine, less on a busy one).
    let measured = measured_capacity(&capacity);
    assert!(
        rate <= CAPACITY * 1.10 && rate >= measured.min(CAPACITY) * 0.8,
        "found {rate} req/s, measured capacity {measured}, model {CAPACITY}"
    );
    // Synchronous, throughput, bisection to 5%, the boundary's second run; and when a
    // noisy machine fails the measured maximum once and passes it on the retest, a climb
    // above it bisected to 5% with its own retest: 14 at most. Each further failure a
    // retest overturned can cost as much again (a climb of 6 at most; one CI run
    // overturned two, the second inside the bracket, and took 15).
    let overturned = capacity
        .probes
        .iter()
        .filter(|p| p.retest && p.passed)
        .count();
    assert!(
        report.benchmarks.len() <= 14 + 6 * overturned.saturating_sub(1),
        "{} benchmarks, {overturned} failures overturned on their retest: {:#?}",
        report.benchmarks.len(),
        capacity.probes
    );
    assert_eq!(capacity.probes.len(), report.benchmarks.len());
    assert!(run.stdout.contains("Capacity:"), "{}", run.stdout);
    // The mock publishes /metrics: every probe, the answer and each console line state
    // the server's queue and KV-cache use.
    assert!(
        capacity.probes.iter().all(|p| p.server.is_some()),
        "{:#?}",
        capacity.probes
    );
    assert!(
        capacity.conclusion.contains("the server's queue averaged"),
        "{}",
        capacity.conclusion
    );
    let probe_lines = run
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("benchmark ") && l.contains("KV-cache use"))
        .count();
    assert_eq!(probe_lines, capacity.probes.len(), "{}", run.stdout);
}

#[test]
fn profile_specific_flags_are_refused_elsewhere() {
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    for (args, needle) in [
        (vec!["--profile", "capacity"], "--slo"),
        (
            vec![
                "--profile",
                "constant",
                "--rate",
                "5",
                "--sweep-arrivals",
                "poisson",
            ],
            "--sweep-arrivals",
        ),
        (vec!["--profile", "sweep", "--rate", "1.5"], "--rate"),
        (
            vec![
                "--profile",
                "constant",
                "--rate",
                "5",
                "--capacity-precision",
                "5%",
            ],
            "--capacity-precision",
        ),
        (vec!["--slo", "ttft_p99<=fast"], "--slo"),
        (
            vec!["--over-saturation", "{\"confidence\": 2}"],
            "confidence",
        ),
    ] {
        let bench = Bench::target(&url).args_as_written(&args);
        let full = bench.args();
        let run = bench.run();
        assert_eq!(run.code(), 2, "{full:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(needle) && run.stderr.lines().count() == 1,
            "{full:?}: {}",
            run.stderr
        );
    }
}

/// The mock of issue 10: 32 slots, 64 output tokens, itl = 10 ms + 0.5 ms per request
/// holding a slot (continuous batching: every request slows as more decode together).
fn batching_mock() -> MockConfig {
    MockConfig {
        max_concurrency: Some(32),
        itl_ms: 10.0,
        itl_ms_per_active: 0.5,
        output_tokens: 64,
        ..MockConfig::instant()
    }
}

#[test]
fn the_capacity_search_lands_on_the_closed_form_rate() {
    // Closed form. With k requests holding a slot every gap is itl + x·k, so a request
    // (ttft 0, n tokens, n − 1 gaps) holds its slot S(k) = (n − 1)(itl + x·k) and its
    // TPOT is itl + x·k. At a constant rate λ Little's law gives k = λ·S(k), so the rate
    // that keeps k requests busy is λ(k) = k / ((n − 1)(itl + x·k)).
    // The SLO tpot_p50 ≤ T holds while k ≤ k* = (T − itl) / x, so the answer is λ(k*).
    // The most the server sustains is λ(32) = 32 / (63 × 26 ms) ≈ 19.5 req/s; the SLO
    // binds first.
    let (n, itl, x, slots, t) = (64.0, 10.0, 0.5, 32.0, 14.0);
    let lambda = |k: f64| k / ((n - 1.0) * (itl + x * k) / 1000.0);
    let k_star = (t - itl) / x;
    let expected = lambda(k_star); // 8 / (63 × 14 ms) ≈ 9.07 req/s
    assert!(expected < lambda(slots));

    // About 11 benchmarks of 3 s: some 36 s on a busy 2-core machine.
    let server = mock(batching_mock());
    let started = std::time::Instant::now();
    let run = Bench::on(&server)
        .profile("capacity")
        .slo("tpot_p50<=14ms")
        .arg("--capacity-precision", "3%")
        // Each probe runs 3 s and measures the last 2: the first second is the ramp up
        // to the steady number of active requests.
        .max_seconds(3)
        .arg("--warmup", "1s")
        .max_concurrency(32)
        .data("prompt_tokens=16,output_tokens=64")
        .run();
    let elapsed = started.elapsed();
    let report = ok_report(&run);
    let capacity = report.capacity.expect("a capacity outcome");
    let rate = capacity.rate.expect("a rate");
    // A busy machine adds its own delay d to every gap the client measures, so the SLO
    // binds at k = (T − itl − d) / x instead: d is measured in this run, by the
    // synchronous probe (k = 1, TPOT itl + x without noise). On an idle machine d ≈ 0 and
    // this is the closed form above.
    let tpot_alone = report.benchmarks[0].metrics["tpot"]
        .successful
        .percentiles
        .p50;
    let d = (tpot_alone - (itl + x)).max(0.0);
    let lambda_d = |k: f64| k / ((n - 1.0) * (itl + d + x * k) / 1000.0);
    let expected_here = lambda_d((t - itl - d) / x);
    assert!(
        (rate - expected_here).abs() <= expected_here * 0.05,
        "found {rate:.3} req/s, closed form {expected:.3}, {expected_here:.3} with the \
         {d:.3} ms this machine added per gap: {:#?}",
        capacity.probes
    );
    // The failing rate next to the answer ran twice.
    let last = capacity.probes.last().expect("probes");
    assert!(last.retest && !last.passed, "{last:?}");
    eprintln!(
        "capacity search: {} benchmarks in {:.1} s",
        report.benchmarks.len(),
        elapsed.as_secs_f64()
    );
}

#[test]
fn a_capacity_probe_whose_queue_grew_fails_even_when_its_slo_passed() {
    // The SLO is loose enough that a 3-second probe at twice the capacity still meets
    // it: only the growing queue tells the probe failed. The mock has no transient (a
    // fixed service time), so a probe below capacity keeps a flat queue.
    let server = mock(capacity_mock());
    let run = Bench::on(&server)
        .profile("capacity")
        .slo("e2e_p50<=5s")
        .max_seconds(3)
        .data(DATA)
        .run();
    let report = ok_report(&run);
    let capacity = report.capacity.expect("a capacity outcome");
    let rate = capacity.rate.expect("a rate");
    // No rate above the model's capacity passes: its queue grows, however well its SLO
    // holds (a busy machine only slows the mock). Below, within the noise of this run:
    // 80% of the capacity its throughput probe measured (C/S on an idle machine, less on
    // a busy one).
    let measured = measured_capacity(&capacity);
    assert!(
        rate <= CAPACITY * 1.05 && rate >= measured.min(CAPACITY) * 0.8,
        "found {rate} req/s, measured capacity {measured}, model {CAPACITY}: {:#?}",
        capacity.probes
    );
    let queued = capacity
        .probes
        .iter()
        .find(|p| !p.passed && p.rate > rate)
        .expect("a failing probe above capacity");
    let reason = queued.reason.as_deref().unwrap_or_default();
    assert!(reason.contains("queue was growing"), "{queued:?}");
    // Its own SLO verdict fails too, for the same reason: its e2e p50 met the
    // threshold only because the time limit cut the queue short.
    let b = &report.benchmarks[queued.benchmark as usize];
    let verdict = b.slo.as_ref().expect("a verdict");
    let why = verdict
        .not_kept_up
        .as_deref()
        .expect("the server did not keep up");
    assert!(reason.ends_with(why), "{reason}");
    let e2e = &verdict.checks[0];
    assert!(
        !e2e.passed && e2e.reason.as_deref() == Some(why),
        "{verdict:?}"
    );
    assert!(
        run.stdout.contains("fail: the queue was growing"),
        "the console gives the reason:\n{}",
        run.stdout
    );
}

#[test]
fn a_sweep_against_a_server_too_slow_to_finish_a_request_still_gets_rates() {
    // Continuous batching with a steep slowdown: one request alone takes 15 × 9 ms, but
    // 64 at once take 15 × (5 + 4 × 64) ms ≈ 3.9 s each, longer than the 2.5 s limit, so
    // the throughput benchmark completes no request; it streams about 64 / 0.261 s ≈ 245
    // tokens per second, 15 req/s of 16-token requests.
    let server = mock(MockConfig {
        itl_ms: 5.0,
        itl_ms_per_active: 4.0,
        output_tokens: 16,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .profile("sweep")
        .rate(4)
        .max_seconds("2.5")
        .max_concurrency(64)
        .data("prompt_tokens=16,output_tokens=16")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let report = run.report();
    let b = &report.benchmarks;
    assert_eq!(b.len(), 4, "{}", run.stderr);
    assert_eq!(
        b[1].requests.completed, 0,
        "no request finished at saturation"
    );
    let estimate = b[1]
        .rate_estimate
        .clone()
        .expect("the estimate is explained");
    assert_eq!(estimate.source, RateSource::StreamedTokens);
    // The model: k streams share (5 + 4k) ms gaps, so together they stream about 250
    // tokens/s at most once all are under way (16 per request); a busy machine only
    // slows the mock, so twice that is a ceiling. Below, against this run: 64 streams at
    // once still stream more than one at a time does.
    let lo = b[0].throughput.requests_per_s;
    assert!(
        estimate.requests_per_s <= 2.0 * 250.0 / 16.0 && estimate.requests_per_s > lo,
        "{estimate:?}, synchronous {lo} req/s"
    );
    assert!(estimate.detail.contains("tokens"), "{}", estimate.detail);
    let Strategy::Constant { rate } = b[3].strategy else {
        panic!("constant expected: {:?}", b[3].strategy)
    };
    let expected = lo + 2.0 * (estimate.requests_per_s - lo) / 3.0;
    assert!((rate - expected).abs() < 1e-9, "{rate} vs {expected}");
    assert!(
        run.stdout.contains("streamed"),
        "the console says where the rate came from:\n{}",
        run.stdout
    );
}

#[test]
fn a_capacity_search_limited_by_max_requests_names_max_requests_as_the_remedy() {
    // Five requests a load: a p99 of five has no upper bound, so every load is
    // inconclusive for want of requests, whatever this machine's speed.
    let server = mock(MockConfig {
        ttft_ms: 5.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .profile("capacity")
        .slo("e2e_p99<=200ms")
        .max_requests(5)
        .max_seconds(30)
        .data(DATA)
        .run();
    let report = run.report();
    let capacity = report.capacity.expect("a capacity outcome");
    let last = report.benchmarks.last().expect("benchmarks");
    assert!(
        matches!(
            last.stop_reason,
            Some(StopReason::MaxRequests { requests: 5 })
        ),
        "{:?}",
        last.stop_reason
    );
    let c = &capacity.conclusion;
    assert!(c.contains("too few requests completed"), "{c}");
    assert!(
        c.ends_with("; raise --max-requests") && !c.contains("--max-seconds"),
        "{c}"
    );
    assert_eq!(c.matches("inconclusive").count(), 1, "{c}");
    assert_eq!(server.stats().completed, 5 * report.benchmarks.len() as u64);
}
