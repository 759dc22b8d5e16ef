//! Measured latencies against a mock with known delays, and report contents.

use crate::scenario::Bench;
use crate::support::{mock, ok_report};
use llmsurge::mock::MockConfig;

/// Against a mock with TTFT 50 ms and 5 ms between tokens (no spread):
/// - TTFT cannot be below 50 ms (the server's timer never fires early and the request
///   must reach it first), and it runs from the send: each request's TTFT in the log is
///   its first content token less its start.
/// - e2e ≥ 50 + 15 × 5 = 125 ms for 16 tokens; 15 gaps per request, which add up to no
///   more than e2e − ttft_any (the last token comes before the last byte), so the mean
///   gap is at most the mean TPOT.
///
/// How far above the configured delays a run lands is timer lateness, loopback and the
/// machine's load: scripts/bench-timing.sh prints p50s with their targets (TTFT within
/// 10 ms of 50, ITL p50 4 to 7 ms), which a test on a shared box cannot hold.
#[test]
fn ttft_and_itl_match_the_configured_delays() {
    let server = mock(MockConfig {
        ttft_ms: 50.0,
        itl_ms: 5.0,
        output_tokens: 16,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(30)
        .data("prompt_tokens=64,output_tokens=16")
        .request_log("requests.jsonl")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let ttft = &b.metrics["ttft"].successful;
    let itl = &b.metrics["itl"].successful;
    let tpot = &b.metrics["tpot"].successful;
    let e2e = &b.metrics["request_latency"].successful;
    assert_eq!(ttft.count, 30);
    assert!(ttft.min >= 49.9, "ttft min {}", ttft.min);
    let log = super::sessions::read_log(&run.dir.path().join("requests.jsonl"));
    assert_eq!(log.len(), 30);
    for e in &log {
        let from_start =
            (e.first_content_time.expect("a token") - e.start_time.expect("sent")) * 1e3;
        let logged = e.ttft_ms.expect("a ttft");
        assert!((logged - from_start).abs() < 0.01, "{e:?}");
        assert!(logged >= 49.9, "{e:?}");
    }
    assert_eq!(itl.count, 30 * 15, "15 gaps per 16-token request");
    // The histograms keep 3 significant digits: 1% covers their rounding.
    assert!(
        itl.mean <= tpot.mean * 1.01,
        "itl mean {} over tpot mean {}",
        itl.mean,
        tpot.mean
    );
    assert!(itl.min >= 0.0 && itl.max > 0.0, "{itl:?}");
    assert!(e2e.min >= 124.9, "e2e min {}", e2e.min);
    assert_eq!(b.metrics["output_tokens"].successful.percentiles.p50, 16.0);
    assert_eq!(
        b.token_sources.expect("token sources").usage,
        30,
        "the mock sends usage when asked"
    );
}

/// A chunk carrying k tokens contributes k gaps of gap/k.
#[test]
fn chunks_of_several_tokens_count_every_token_gap() {
    let server = mock(MockConfig {
        ttft_ms: 5.0,
        itl_ms: 4.0,
        output_tokens: 16,
        tokens_per_chunk: 4,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(10)
        .data("prompt_tokens=8,output_tokens=16")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let b = &run.report().benchmarks[0];
    let itl = &b.metrics["itl"].successful;
    let tpot = &b.metrics["tpot"].successful;
    // 4 chunks per request: 3 chunk gaps of ~16 ms, each counted as 4 gaps of ~4 ms.
    assert_eq!(itl.count, 10 * 3 * 4);
    // Divided, not repeated: a request's 12 gaps add up to its last chunk less its first,
    // at most e2e − ttft_any = 15 × its TPOT (16 tokens by usage). Repeating each chunk
    // gap 4 times would make them 4 × that. (1%: the histograms' rounding.)
    assert!(
        itl.mean <= tpot.mean * 15.0 / 12.0 * 1.01,
        "itl mean {}, tpot mean {}",
        itl.mean,
        tpot.mean
    );
    assert_eq!(
        b.token_sources.expect("token sources").mismatched,
        10,
        "usage says 16 tokens, the stream had 4 chunks"
    );
}

#[test]
fn the_report_has_its_schema_metadata_and_redacted_args() {
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server)
        .constant(20)
        .max_requests(10)
        .arg("--api-key", "sk-very-secret-value")
        .run();
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
    assert_eq!(report.args["backend"]["api_key"], "<redacted>");
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
        ..MockConfig::instant()
    });
    let run = Bench::on(&server).concurrent(4).max_requests(200).run();
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

/// A reasoning model: 10 reasoning tokens then 20 content tokens, 5 ms apart, 20 ms to
/// the first. Usage counts all 30, so each request has 29 inter-token gaps of 5 ms and a
/// TPOT of (e2e − ttft_any) / 29 = 5 ms. Spreading the 30 over the 20 content chunks alone
/// (the defect) gave 380 gaps of ~2.6 ms and a TPOT of ~3.3 ms. TTFT is the first content
/// token (20 + 10 × 5 = 70 ms), `ttft_any` the first reasoning token (20 ms).
#[test]
fn reasoning_tokens_are_inter_token_gaps() {
    let server = mock(MockConfig {
        ttft_ms: 20.0,
        itl_ms: 5.0,
        reasoning_tokens: 10,
        output_tokens: 20,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(10)
        // max_tokens counts the reasoning too: 10 of it, then the 20 content tokens.
        .data("prompt_tokens=8,output_tokens=30")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let itl = &b.metrics["itl"].successful;
    let tpot = &b.metrics["tpot"].successful;
    assert_eq!(itl.count, 10 * 29, "29 gaps per 30-token request");
    // A request's 29 gaps run from its first reasoning token to its last token, so they
    // add up to at most e2e − ttft_any = 29 × its TPOT; a TPOT over the content alone
    // (the defect: ~3.3 ms) falls below the mean gap. (1%: the histograms' rounding.)
    assert!(
        itl.mean <= tpot.mean * 1.01,
        "itl mean {}, tpot mean {}",
        itl.mean,
        tpot.mean
    );
    assert_eq!(
        b.token_sources.expect("token sources").mismatched,
        0,
        "30 chunks, usage 30"
    );
    let ttft = &b.metrics["ttft"].successful;
    let ttft_any = &b.metrics["ttft_any"].successful;
    assert!(ttft.min >= 69.9, "ttft waits for content: {}", ttft.min);
    // The first reasoning token: at least the 20 ms TTFT, and before the first content
    // token of the same request (how long before is the machine's timing).
    assert!(ttft_any.min >= 19.9, "ttft_any min {}", ttft_any.min);
    assert!(
        ttft_any.max <= ttft.max && ttft_any.percentiles.p50 <= ttft.percentiles.p50,
        "ttft_any {ttft_any:?}, ttft {ttft:?}"
    );
    // The report says which is which.
    assert!(report.metric_definitions["ttft"].contains("content"));
    assert!(report.metric_definitions["itl"].contains("reasoning or content"));
    assert!(run.stdout.contains("reasoning included"), "{}", run.stdout);
}

/// A server that serves one request at a time, 500 ms each, under 16 streams, cut off at
/// 2.2 s: 4 requests complete (TTFT 0.5, 1.0, 1.5, 2.0 s) while 12 sent at t0 are still
/// queued at the cut-off, having waited ~2.2 s, and 4 sent as others ended waited 0.2 to
/// 1.7 s. Completed requests alone give a TTFT p50 of 1 s; counting the cut-off ones as
/// lower bounds, the p50 is ≥ 2 s, and its 95% lower bound (the 6th of 20) 1.5 s. An
/// SLO of `ttft_p50<=1.2s` passed before on the survivors; it must fail now (exit 3).
#[test]
fn requests_cut_off_count_as_lower_bounds() {
    let server = mock(MockConfig {
        ttft_ms: 500.0,
        max_concurrency: Some(1),
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .concurrent(16)
        .max_seconds("2.2")
        .data("prompt_tokens=8,output_tokens=1")
        .slo("ttft_p50<=1.2s")
        .arg("--goodput", "ttft:1.6s")
        .run();
    assert_eq!(
        run.code(),
        3,
        "the SLO must fail: {} {:?}",
        run.stderr,
        run.report().benchmarks[0].slo
    );
    let report = run.report();
    crate::support::assert_identity(&report);
    let b = &report.benchmarks[0];
    let completed = &b.metrics["ttft"].successful;
    assert!(
        (1..=5).contains(&completed.count),
        "{} completed",
        completed.count
    );
    assert!(
        completed.percentiles.p50 <= 1200.0,
        "the survivors alone pass: {}",
        completed.percentiles.p50
    );
    let cut_off = 2000.0; // 2.2 s less the slack of a loaded machine
    for key in [
        "ttft_with_incomplete",
        "ttft_any_with_incomplete",
        "request_latency_with_incomplete",
    ] {
        let d = &b.metrics[key];
        assert!(d.incomplete.count >= 10, "{key}: {:?}", d.incomplete);
        assert_eq!(
            d.total.count,
            d.successful.count + d.errored.count + d.incomplete.count
        );
        assert!(
            d.incomplete.max >= cut_off,
            "{key} max {}",
            d.incomplete.max
        );
        assert!(
            d.total.percentiles.p50 >= cut_off,
            "{key} p50 {}",
            d.total.percentiles.p50
        );
        assert!(
            d.total.percentiles.p99 >= cut_off,
            "{key} p99 {}",
            d.total.percentiles.p99
        );
    }
    let check = &b.slo.as_ref().expect("slo").checks[0];
    assert!(!check.passed);
    assert!(check.measured.expect("measured") >= cut_off);
    assert_eq!(
        check.distribution.as_deref(),
        Some("ttft_with_incomplete.total")
    );
    let goodput = b.goodput.as_ref().expect("goodput");
    assert!(goodput.unfinished_not_good >= 10, "{goodput:?}");
    assert!(goodput.fraction < 0.5, "{goodput:?}");
    assert!(run.stdout.contains("did not finish"), "{}", run.stdout);
}

/// Stream strategies report the client's turnaround and runtime delay: for a normal run
/// against a quick mock both exist, a gap for every request that followed another and a
/// probe for each wake of the runtime's 10 ms timer. How small they are is the machine's
/// (scripts/bench-timing.sh prints both p50s against 10 ms).
#[test]
fn stream_strategies_report_the_client_probes() {
    let server = mock(MockConfig {
        ttft_ms: 5.0,
        itl_ms: 1.0,
        output_tokens: 8,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .concurrent(4)
        .max_seconds(1)
        .data("prompt_tokens=8,output_tokens=8")
        .run();
    let report = ok_report(&run);
    let c = &report.benchmarks[0].client;
    let gap = c.send_gap.as_ref().expect("send gap");
    let delay = c.runtime_delay.as_ref().expect("runtime delay");
    // Every request but each stream's first follows a previous one.
    let completed = report.benchmarks[0].requests.completed;
    assert!(
        gap.count + 4 >= completed && gap.count > 10,
        "{} gaps",
        gap.count
    );
    // A probe every 10 ms plus however late it woke, for the second the run lasted, per
    // worker: with the lateness this run measured, 1 s / (10 ms + mean delay) each; half
    // of that at least, whatever the load. (Batches of probe values alone were once
    // dropped as empty.)
    let workers = report.benchmarks[0].workers.len() as f64;
    let per_worker = 1000.0 / (10.0 + delay.mean);
    assert!(
        delay.count as f64 >= 0.5 * per_worker * workers,
        "{} probes from {workers} workers, mean delay {} ms",
        delay.count,
        delay.mean
    );
    assert!(!c.bottleneck, "{:?}", c.warnings);

    // Held to a threshold below the timer's own granularity, the same run is judged
    // client-bound by the runtime probe: the verdict reads these figures.
    let strict = Bench::on(&server)
        .concurrent(4)
        .max_seconds(1)
        .data("prompt_tokens=8,output_tokens=8")
        .arg("--max-dispatch-lag", "1us")
        .run();
    assert_eq!(strict.code(), 4, "{}", strict.stderr);
    let c = &strict.report().benchmarks[0].client;
    assert!(c.bottleneck);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.starts_with("runtime delay p99")),
        "{:?}",
        c.warnings
    );
}

/// The client-bottleneck verdict of a rate strategy, forced rather than hoped for: held
/// to 1 µs, the dispatch lag of any run exceeds it (the first request alone waits for its
/// connection before it is written, and p99 of 50 is the largest), so the run is invalid (exit 4) and says why, however
/// idle or busy the machine. Without a threshold of its own the same run passes on an
/// idle machine only, which is why the tests run with `--max-dispatch-lag 10s`.
#[test]
fn an_impossible_dispatch_lag_threshold_forces_the_client_bottleneck_verdict() {
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server)
        .constant(100)
        .max_requests(50)
        .arg("--max-dispatch-lag", "1us")
        .run();
    assert_eq!(
        run.code(),
        llmsurge::exit_codes::INVALID_RUN,
        "{}",
        run.stderr
    );
    let b = &run.report().benchmarks[0];
    assert_eq!(b.requests.completed, 50, "{:?}", b.requests);
    assert!(b.client.bottleneck, "{:?}", b.client);
    assert!(
        b.client
            .warnings
            .iter()
            .any(|w| w.starts_with("dispatch lag p99")
                && w.contains("the client could not keep the schedule")),
        "{:?}",
        b.client.warnings
    );
}

/// Start-up (process spawn, tokenizer load) is not load: a run of one request, or of
/// 50 ms, must not warn that the client was near saturation. Counting start-up, a 0.05 s
/// run reported 275% CPU; and over a few milliseconds even a worker's exit is a large
/// share, so such runs are not judged at all.
#[test]
fn a_very_short_run_has_no_cpu_saturation_warning() {
    let server = mock(MockConfig {
        ttft_ms: 5.0,
        ..MockConfig::instant()
    });
    for limit in [["--max-requests", "1"], ["--max-seconds", "0.05"]] {
        let run = Bench::on(&server)
            .synchronous()
            .arg(limit[0], limit[1])
            .run();
        let report = ok_report(&run);
        let c = &report.benchmarks[0].client;
        assert!(
            c.warnings.iter().all(|w| !w.contains("CPU time")),
            "{limit:?}: {:?}",
            c.warnings
        );
    }
}

/// Slots queued for `--max-concurrency` and never sent still count: a constant 20/s
/// against one slot and a 500 ms server sends 4 requests in 2 s; the ~36 others wait for
/// the cap until the cut-off and count from their scheduled time, the earliest ~1.9 s.
#[test]
fn queued_requests_count_from_their_scheduled_time() {
    let server = mock(MockConfig {
        ttft_ms: 500.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .constant(20)
        .max_concurrency(1)
        .max_seconds(2)
        .data("prompt_tokens=8,output_tokens=1")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert!(b.requests.cancelled >= 20, "{:?}", b.requests);
    let e2e = &b.metrics["request_latency_with_incomplete"];
    // Sent or not, every cancelled measured request has its bound.
    assert_eq!(e2e.incomplete.count, b.measured_requests.cancelled);
    assert!(e2e.incomplete.max >= 1500.0, "{:?}", e2e.incomplete);
    assert!(
        e2e.incomplete.max > b.metrics["request_latency"].incomplete.max,
        "the longest wait was never sent, so only the bound sees it"
    );
    // The stop frees the slot of the one request in flight; a queued request must not
    // take it and be sent only to be cancelled (it was, by a race, and its bound was 0).
    let sent_and_cancelled = b.metrics["request_latency"].incomplete.count;
    assert!(
        sent_and_cancelled <= 1,
        "{sent_and_cancelled} sent at the stop"
    );
}

/// The mock packs `tokens_per_chunk` tokens a chunk (the last one the rest) and sends a
/// chunk when its last token is due: every token `itl` after the one before. So the
/// per-token gap is the configured `itl` whatever the packing, and the gaps the client
/// can see are those of the tokens after the first chunk (the first chunk's fall before
/// its arrival, inside TTFT). 10 tokens, 3 a chunk: chunks of 3, 3, 3 and 1, gaps of 30,
/// 30 and 10 ms after the first, 7 token gaps of 10 ms each. The count is exact; the
/// gaps' lengths are compared with the instants the mock sent each chunk (not the
/// configured 10 ms, which a busy runner stretches) by
/// `truth::chat_streamed_three_tokens_per_chunk_matches_the_truth`, request by request.
#[test]
fn itl_spreads_each_chunks_gap_over_its_own_tokens() {
    let config = MockConfig {
        ttft_ms: 5.0,
        itl_ms: 10.0,
        output_tokens: 10,
        tokens_per_chunk: 3,
        ..MockConfig::instant()
    };
    let server = mock(config.clone());
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(10)
        .data("prompt_tokens=8,output_tokens=10")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let itl = &b.metrics["itl"].successful;
    let (n, k) = (config.output_tokens, config.tokens_per_chunk);
    assert_eq!(b.metrics["output_tokens"].successful.max, f64::from(n));
    // Every token after the first chunk is one gap.
    assert_eq!(itl.count, 10 * u64::from(n - k), "{itl:?}");
}

/// Without streaming the client sees no token arrive: TPOT and ITL are absent (not 0)
/// from every output, an objective on them is refused, and the server's usage is not
/// "mismatched" with a stream that does not exist.
#[test]
fn a_run_without_streaming_has_no_tpot_or_itl_and_refuses_objectives_on_them() {
    let server = mock(MockConfig {
        itl_ms: 1.0,
        ..MockConfig::instant()
    });
    let url = server.base_url();
    for (flag, value) in [
        ("--slo", "tpot_p99<=1ms"),
        ("--slo", "e2e_p50<=1s,itl_p50<=1ms"),
        ("--goodput", "tpot:10ms"),
    ] {
        let run = Bench::on(&server)
            .stream(false)
            .max_requests(1)
            .arg(flag, value)
            .run();
        assert_eq!(run.code(), 2, "{flag} {value}: {}", run.stderr);
        let line = run.stderr.trim();
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.contains(flag) && line.contains("--stream false"),
            "{line}"
        );
    }
    assert_eq!(
        server.stats().requests.chat_completions,
        0,
        "nothing was sent"
    );

    let run = Bench::target(&url)
        .stream(false)
        .synchronous()
        .max_requests(12)
        .data("prompt_tokens=8,output_tokens=16")
        .arg("--goodput", "e2e:10s")
        .outputs("json,csv,console")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    for key in ["itl", "tpot"] {
        assert!(
            !b.metrics.contains_key(key),
            "{key}: {:?}",
            b.metrics.get(key)
        );
        assert!(!b.histograms.contains_key(key), "{key}");
        assert!(
            b.class_histograms
                .keys()
                .all(|k| !k.ends_with(&format!(".{key}"))),
            "{key}"
        );
    }
    // The mock's usage gives the tokens; a whole body is no count to check it against.
    let sources = b.token_sources.expect("token sources");
    assert_eq!((sources.usage, sources.mismatched), (12, 0), "{sources:?}");
    assert!(
        !run.stdout.contains("usage count differs") && !run.stderr.contains("usage count differs"),
        "{}",
        run.stdout
    );
    assert_eq!(b.goodput.expect("goodput").good_requests, 12);
    // JSON: absent, not null or 0.
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.report_path()).expect("report")).expect("json");
    let metrics = &raw["benchmarks"][0]["metrics"];
    assert!(
        metrics.get("ttft").is_some()
            && metrics.get("tpot").is_none()
            && metrics.get("itl").is_none()
    );
    // CSV: the cells are blank.
    let csv = run.csv_first_row();
    let header = &csv.header;
    let mut blank = 0;
    for (name, cell) in header.iter().zip(&csv.row) {
        if name.starts_with("itl_ms.") || name.starts_with("tpot_ms.") {
            assert_eq!(cell, "", "{name}");
            blank += 1;
        }
    }
    assert!(blank > 0, "the CSV has ITL and TPOT columns: {header:?}");
    // Console: the ITL and TPOT columns (shown for no benchmark) are left out.
    let table = run
        .stdout
        .split("Latency of successful requests")
        .nth(1)
        .and_then(|t| t.split("TTFT:").next())
        .expect("the latency table");
    assert!(
        table.contains("TTFT p50") && !table.contains("ITL") && !table.contains("TPOT"),
        "{table}"
    );
    assert!(
        run.stdout.contains("ITL and TPOT are not measured"),
        "{}",
        run.stdout
    );
}

/// An unfinished request is not good even when it had not yet missed a threshold: one
/// server slot, 300 ms a request, 4 streams cut off at 1.5 s leave requests queued that
/// a 10-minute e2e objective cannot have failed yet. Goodput's fraction is good over every
/// measured request the run judged (completed, errored and cut off), recomputed here from
/// the report's counts; a cut-off request that was left out made it 1.0 before.
#[test]
fn unfinished_requests_are_not_good() {
    let server = mock(MockConfig {
        ttft_ms: 300.0,
        max_concurrency: Some(1),
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .concurrent(4)
        .max_seconds("1.5")
        .data("prompt_tokens=8,output_tokens=1")
        .arg("--goodput", "e2e:600s")
        .run();
    let report = run.report();
    let b = &report.benchmarks[0];
    let m = &b.measured_requests;
    assert!(m.completed >= 1 && m.cancelled >= 1, "{m:?}");
    let goodput = b.goodput.as_ref().expect("goodput");
    assert_eq!(goodput.good_requests, m.completed, "{goodput:?}");
    assert_eq!(goodput.unfinished_not_good, 0, "{goodput:?}");
    let judged = m.completed + m.errored + m.cancelled;
    assert!(
        (goodput.fraction - goodput.good_requests as f64 / judged as f64).abs() < 1e-12,
        "{goodput:?} of {m:?}"
    );
    assert!(goodput.fraction < 1.0, "{goodput:?}");
}
