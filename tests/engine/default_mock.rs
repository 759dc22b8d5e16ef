//! The in-process mock (`--target mock`, the README's first command) with its default
//! settings behaves like a small model on one GPU, and `LLMSURGE_MOCK_INSTANT` gives the
//! zero-latency mock.

use crate::scenario::Bench;
use crate::support::ok_report;
use llmsurge::report::Report;

/// `requests` requests of `data` on 8 streams against the in-process mock (no
/// `--target`).
fn in_process(requests: u64, data: &str) -> Bench {
    Bench::in_process_mock()
        .concurrent(8)
        .outputs("json")
        .max_requests(requests)
        .data(data)
}

/// p50 of metric `name` over the successful requests of the only benchmark.
fn p50(report: &Report, name: &str) -> f64 {
    report.benchmarks[0].metrics[name]
        .successful
        .percentiles
        .p50
}

/// Defaults: TTFT 20 ms ± 4 plus 0.04 ms per uncached prompt token, ITL 6 ms ± 1 plus
/// 0.02 ms per active request, 128 ± 32 output tokens when the client does not force the
/// length. So with 16-token prompts TTFT is about 21 ms and with 2,000-token prompts
/// at least the 80 ms of prefill (the server's timer never fires early). TPOT is near
/// 6 ms (at least 3: a late token only shortens the next gap), and without ignore_eos
/// (max_tokens 512, far above the drawn lengths) the lengths differ. How close the
/// figures come to the model's is the machine's: scripts/bench-timing.sh prints them.
#[test]
fn the_default_mock_has_prefill_jittered_gaps_and_varied_lengths() {
    let short = in_process(16, "prompt_tokens=16,output_tokens=512")
        .arg("--ignore-eos", false)
        .ok_report();
    let long = in_process(16, "prompt_tokens=2000,output_tokens=8").ok_report();
    let ttft_short = p50(&short, "ttft");
    assert!(ttft_short >= 10.0, "ttft p50 {ttft_short} (base 20 ms ± 4)");
    let ttft_long = long.benchmarks[0].metrics["ttft"].successful.min;
    assert!(
        ttft_long >= 80.0,
        "TTFT must grow with the prompt: min {ttft_long} ms at 2,000 tokens, p50 {ttft_short} ms at 16"
    );
    let itl = &short.benchmarks[0].metrics["itl"].successful;
    assert!(
        itl.max > itl.min,
        "jittered gaps: {} .. {}",
        itl.min,
        itl.max
    );
    assert!(
        p50(&short, "tpot") >= 3.0,
        "tpot p50 {}",
        p50(&short, "tpot")
    );
    let lengths = &short.benchmarks[0].metrics["output_tokens"].successful;
    assert_eq!(lengths.count, 16);
    assert!(
        lengths.max > lengths.min && lengths.max < 512.0,
        "output lengths vary around 128: {} .. {}",
        lengths.min,
        lengths.max
    );
    // The client's forced length (ignore_eos, the default) is obeyed exactly.
    assert_eq!(
        long.benchmarks[0].metrics["output_tokens"].successful.max,
        8.0
    );
}

/// LLMSURGE_MOCK_INSTANT=1: exactly 16 tokens when the client leaves the length to the
/// server, which only the instant settings give (the default draws 128 ± 32), and those
/// have no prefill and no gaps (the mock's own unit tests hold them to zero); the explicit
/// TTFT variable still wins over it, and the rest stays instant. The latencies measured
/// against it are the client's, loopback's and the machine's: scripts/bench-timing.sh
/// prints them with their targets.
#[test]
fn the_instant_mock_is_zero_latency() {
    let instant = ok_report(
        &in_process(16, "prompt_tokens=2000,output_tokens=512")
            .arg("--ignore-eos", false)
            .run_with_env(&[("LLMSURGE_MOCK_INSTANT", "1")]),
    );
    let lengths = &instant.benchmarks[0].metrics["output_tokens"].successful;
    assert_eq!((lengths.min, lengths.max), (16.0, 16.0));
    let slow_start = ok_report(
        &in_process(4, "prompt_tokens=16,output_tokens=512")
            .arg("--ignore-eos", false)
            .run_with_env(&[
                ("LLMSURGE_MOCK_INSTANT", "1"),
                ("LLMSURGE_MOCK_TTFT_MS", "150"),
            ]),
    );
    assert!(
        p50(&slow_start, "ttft") >= 149.0,
        "the explicit TTFT wins: {}",
        p50(&slow_start, "ttft")
    );
    let lengths = &slow_start.benchmarks[0].metrics["output_tokens"].successful;
    assert_eq!(
        (lengths.min, lengths.max),
        (16.0, 16.0),
        "the rest stays instant"
    );
}
