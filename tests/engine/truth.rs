//! Ground truth: every request of a run is joined, by its `x-request-id`, with what the
//! mock did with it (`--truth`), and what the client measured is compared with what
//! happened: TTFT, `ttft_any` and e2e against the instants the mock handed those chunks
//! to the connection, token counts against what the mock sent, the error kind against the
//! fault it injected. No figure is compared with a configured latency.
//!
//! How the instants compare. The client stamps `start` just before it writes the request,
//! and a chunk when its read returns; the mock stamps a chunk when it hands the frame to
//! hyper, which writes it in the same poll. Both are `CLOCK_MONOTONIC`, written as Unix
//! seconds through anchors that agree to microseconds. So for one event the client's
//! instant is the mock's plus loopback transit and wake-ups: tens of microseconds. Two
//! rules follow:
//! - never earlier: a client instant before the mock's (beyond [`EARLY_MS`], the
//!   anchors' precision) is a measurement bug whatever the load, so it holds for every
//!   request;
//! - within 1 ms for the best request: a thread on a busy machine can be descheduled
//!   between the read and its timestamp (or the mock's between its stamp and its write)
//!   for milliseconds, and no bound on how many requests that hits holds on a shared
//!   runner (seen: 1 in 10 with a load average of 8 on 2 cores, 8 in 30 at 12). Load
//!   only ever makes the client late; it cannot make every request late by the same
//!   amount. A client that stamps the wrong instant (the head, a later chunk, after
//!   parsing) is off for every request, the least disturbed one included, so each
//!   measure's smallest lateness must be within 1 ms. How close the client is at scale
//!   is a figure for a benchmark script, not a test.
//!
//! Rates and aggregates follow from the same rule: a request's ITL or TPOT spans two
//! instants whose lateness is measured here, so each must be within 2% plus what that
//! lateness explains, and the closest within 2% outright ([`check_rates`]); the report's
//! percentiles must lie between the truth's order statistics and those plus the largest
//! lateness measured ([`check_percentiles`]).
//!
//! On HTTP/2 the mock's frame goes to the socket from hyper's connection task rather
//! than in the body's poll: still microseconds on an idle runtime.

use crate::scenario::{Bench, Options};
use crate::support::{Joined, join_truth, mock};
use llmsurge::mock::MockConfig;

/// How much earlier than the mock's a client instant may read: the two clock anchors'
/// combined error (each a tight bracket of a few microseconds).
const EARLY_MS: f64 = 0.1;
/// How far the closest request's instant may be from the mock's for the same event.
const WITHIN_MS: f64 = 1.0;
/// How far a request's ITL or TPOT may be from the truth's, relatively.
const RATE_WITHIN: f64 = 0.02;

/// A mock whose latencies make every chunk its own event (gaps of milliseconds), with
/// jitter so the requests differ, writing its truth to `path`.
fn truth_mock(path: &std::path::Path, config: MockConfig) -> llmsurge::mock::MockServer {
    mock(MockConfig {
        truth: Some(path.to_path_buf()),
        ttft_ms: 15.0,
        ttft_ms_std: 3.0,
        itl_ms: 4.0,
        itl_ms_std: 1.0,
        ..config
    })
}

/// Runs the benchmark `options` make against a truth mock configured by `config`; the
/// joined requests and the run's report.
fn run_with_truth(
    config: MockConfig,
    options: impl FnOnce(Bench) -> Bench,
) -> (Vec<Joined>, llmsurge::report::Report) {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let server = truth_mock(&truth, config);
    let finished = options(
        Bench::on(&server)
            .request_log("requests.jsonl")
            .outputs("json")
            .flag("--disable-progress"),
    )
    .run();
    // Stopping flushes the truth file, after every response ended.
    server.stop();
    // 3: an SLO the run was given failed, 5: it could not decide; the report is
    // written all the same.
    assert!(
        matches!(finished.code(), 0 | 1 | 3 | 5),
        "exit {}: {}",
        finished.code(),
        finished.stderr
    );
    let report = finished.report();
    crate::support::assert_identity(&report);
    let joined = join_truth(&finished.dir.path().join("requests.jsonl"), &truth);
    (joined, report)
}

/// The error kind the client must report for what the mock did.
fn expected_error(truth: &serde_json::Value) -> Option<String> {
    match (truth["outcome"].as_str(), truth["fault"].as_str()) {
        (Some("completed"), _) => None,
        (Some("fault"), Some("error_500" | "error_429")) => {
            Some(format!("http_{}", truth["status"]))
        }
        (Some("fault"), Some("drop")) => Some("stream_broken".into()),
        (Some("fault"), Some("garbage")) => Some("malformed_response".into()),
        (Some("fault"), Some("close")) => Some("connection_closed".into()),
        (Some("fault"), Some("stall")) => Some("timeout".into()),
        (Some("rejected"), _) => Some(format!("http_{}", truth["status"])),
        other => panic!("the mock saw an outcome no fixed case makes: {other:?} in {truth}"),
    }
}

/// The time of the first chunk of `truth` that `carries` tokens.
fn first_chunk(truth: &serde_json::Value, carries: impl Fn(u64, u64) -> bool) -> Option<f64> {
    truth["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .find(|c| {
            carries(
                c["reasoning"].as_u64().unwrap_or(0),
                c["content"].as_u64().unwrap_or(0),
            )
        })
        .and_then(|c| c["time"].as_f64())
}

/// One client instant beside the mock's for the same event, in ms (client − mock).
#[derive(Debug)]
struct Gap {
    what: &'static str,
    id: String,
    ms: f64,
}

/// Checks every joined request: outcome and error kind, token counts, and every
/// instant both sides saw (see the module's rules). Returns how many completed.
fn check(joined: &[Joined]) -> usize {
    assert!(!joined.is_empty(), "no request was logged");
    let mut gaps = Vec::new();
    let mut completed = 0;
    for Joined { log, truth } in joined {
        let id = log["request_id"].as_str().unwrap_or_default().to_string();
        let expected = expected_error(truth);
        assert_eq!(
            log["error_kind"].as_str().map(str::to_string),
            expected,
            "{id}: the client's error kind against what the mock did\nlog: {log}\ntruth: {truth}"
        );
        let tokens = truth["reasoning_tokens"].as_u64().unwrap_or(0)
            + truth["content_tokens"].as_u64().unwrap_or(0);
        // A whole transcription's usage is vLLM's `{"type": "duration"}`: no token counts,
        // and the client counts none in one body (docs/metrics.md).
        let counted =
            !(truth["endpoint"] == "/v1/audio/transcriptions" && truth["stream"] == false);
        if expected.is_none() && !counted {
            completed += 1;
            assert_eq!(log["status"], "completed", "{id}: {log}");
            assert_eq!(log["output_tokens_source"], "unknown", "{id}: {log}");
            assert!(log["prompt_tokens"].is_null(), "{id}: {log}");
        } else if expected.is_none() {
            completed += 1;
            assert_eq!(log["status"], "completed", "{id}: {log}");
            assert_eq!(
                log["output_tokens"].as_u64(),
                Some(tokens),
                "{id}: output tokens against the tokens the mock sent\nlog: {log}\ntruth: {truth}"
            );
            assert_eq!(
                log["prompt_tokens"], truth["prompt_tokens"],
                "{id}: prompt tokens against the mock's count"
            );
            // The reasoning part, where the format's usage has it (ITL's runs need it).
            let reasoning = truth["reasoning_tokens"].as_u64().unwrap_or(0);
            let reported = log["reasoning_tokens"].as_u64();
            match truth["endpoint"].as_str() {
                Some("/v1/chat/completions" | "/v1/responses") if reasoning > 0 => assert_eq!(
                    reported,
                    Some(reasoning),
                    "{id}: reasoning tokens against the mock's\nlog: {log}\ntruth: {truth}"
                ),
                Some("/v1/chat/completions" | "/v1/responses") => assert!(
                    reported.unwrap_or(0) == 0,
                    "{id}: reasoning tokens without reasoning: {log}"
                ),
                _ => assert!(
                    reported.is_none(),
                    "{id}: a reasoning count the format has no field for: {log}"
                ),
            }
        }
        let Some(start) = log["start_time"].as_f64() else {
            continue;
        };
        let arrival = truth["arrival_time"].as_f64().expect("arrival_time");
        assert!(
            arrival >= start - EARLY_MS / 1e3,
            "{id}: the mock saw the request {:.3} ms before the client sent it",
            (start - arrival) * 1e3
        );
        let mut compare = |what: &'static str, client: Option<f64>, mock: Option<f64>| {
            match (client, mock) {
                (Some(c), Some(m)) => gaps.push(Gap {
                    what,
                    id: id.clone(),
                    ms: (c - m) * 1e3,
                }),
                (None, None) => {}
                // A completed request must see exactly the chunks the mock sent.
                (c, m) if expected.is_none() => {
                    panic!("{id}: {what} is {c:?} on the client, {m:?} in the truth")
                }
                _ => {}
            }
        };
        // ttft_any: the first chunk with tokens of any kind; ttft: the first with content.
        compare(
            "ttft_any",
            log["first_token_time"].as_f64(),
            first_chunk(truth, |r, c| r + c > 0),
        );
        compare(
            "ttft",
            log["first_content_time"].as_f64(),
            first_chunk(truth, |_, c| c > 0),
        );
        // A stalled response ends when the client gives up, and one with garbage when
        // the client stops at the bad event: the mock sees both only when the client
        // has gone, after its end.
        if truth["fault"] != "stall" && truth["fault"] != "garbage" {
            compare("e2e", log["end_time"].as_f64(), truth["end_time"].as_f64());
        }
    }
    assert!(!gaps.is_empty(), "no instant to compare");
    let early: Vec<&Gap> = gaps.iter().filter(|g| g.ms < -EARLY_MS).collect();
    assert!(
        early.is_empty(),
        "client instants before the mock sent the event: {early:?}"
    );
    for what in ["ttft_any", "ttft", "e2e"] {
        let Some(best) = gaps
            .iter()
            .filter(|g| g.what == what)
            .min_by(|a, b| a.ms.total_cmp(&b.ms))
        else {
            continue;
        };
        assert!(
            best.ms <= WITHIN_MS,
            "{what}: even the closest request ({}) is {:.3} ms after the mock's",
            best.id,
            best.ms
        );
    }
    check_rates(joined);
    completed
}

/// The truth's chunks that carried tokens: (instant, tokens).
fn token_chunks(truth: &serde_json::Value) -> Vec<(f64, u64)> {
    token_chunks_apart(truth)
        .into_iter()
        .map(|(t, r, c)| (t, r + c))
        .collect()
}

/// The truth's chunks that carried tokens: (instant, reasoning, content).
fn token_chunks_apart(truth: &serde_json::Value) -> Vec<(f64, u64, u64)> {
    truth["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .map(|c| {
            (
                c["time"].as_f64().expect("a chunk's time"),
                c["reasoning"].as_u64().unwrap_or(0),
                c["content"].as_u64().unwrap_or(0),
            )
        })
        .filter(|&(_, r, c)| r + c > 0)
        .collect()
}

/// The runs of chunks a client can tell apart, as (chunks, tokens): the reasoning
/// chunks and the answer chunks each when the server's usage gave the reasoning count
/// (`reasoning_tokens` in the log; the mock packs the two apart, as the client then
/// assumes), else every chunk as one run (the Messages API counts no reasoning apart).
fn client_runs(log: &serde_json::Value, truth: &serde_json::Value) -> Vec<(u64, u64)> {
    let chunks = token_chunks_apart(truth);
    let n: u64 = chunks.iter().map(|c| c.1 + c.2).sum();
    let reasoning = chunks.iter().take_while(|c| c.2 == 0).count() as u64;
    match log["reasoning_tokens"].as_u64() {
        Some(r) if reasoning > 0 && reasoning < chunks.len() as u64 => {
            vec![(reasoning, r), (chunks.len() as u64 - reasoning, n - r)]
        }
        _ => vec![(chunks.len() as u64, n)],
    }
}

/// Whether a client that sees the chunks and the counts of [`client_runs`] can know how
/// many tokens each chunk carried: every packing with one `k` for all runs (`k` a chunk,
/// a run's last chunk the rest) that fits those counts gives the truth's tokens per
/// chunk. Otherwise (3 + 1 answer tokens that could as well be 2 + 2, with nothing else
/// to tell `k`; or the Messages API's reasoning/answer boundary splitting what the client
/// must take as one run) the client can only guess, and its mean ITL is not held to
/// the truth.
fn packing_is_knowable(log: &serde_json::Value, truth: &serde_json::Value) -> bool {
    let actual: Vec<u64> = token_chunks(truth).iter().map(|c| c.1).collect();
    let runs = client_runs(log, truth);
    let n: u64 = actual.iter().sum();
    let fills: std::collections::BTreeSet<Vec<u64>> = (1..=n)
        .filter(|&k| runs.iter().all(|&(c, t)| k * (c - 1) < t && t <= k * c))
        .map(|k| {
            runs.iter()
                .flat_map(|&(c, t)| {
                    (0..c).map(move |i| if i + 1 < c { k } else { t - k * (c - 1) })
                })
                .collect()
        })
        .collect();
    fills.len() == 1 && fills.contains(&actual)
}

/// A per-request rate (ITL or TPOT) beside the truth's, with how much of the difference
/// the client's measured lateness on the two instants it spans explains.
#[derive(Debug)]
struct RateGap {
    what: &'static str,
    id: String,
    client_ms: f64,
    truth_ms: f64,
    /// The difference the two instants' measured lateness accounts for, ms.
    explained_ms: f64,
}

impl RateGap {
    /// How far off, relatively. A span of 0 happens: a mock delayed on a busy runner
    /// writes every chunk of a short response (and its end) in one frame, and the client
    /// reads them in one read. Both sides then say 0, which is right, and 0 / 0 (a
    /// negative NaN on x86, which `total_cmp` ranks below every number) made the check
    /// pick it as the closest request and fail it.
    fn relative(&self) -> f64 {
        let off = (self.client_ms - self.truth_ms).abs();
        if self.truth_ms > 0.0 {
            off / self.truth_ms
        } else if off <= 1e-3 {
            0.0
        } else {
            f64::INFINITY
        }
    }
}

/// Per-request ITL mean and TPOT against the truth's chunk instants, with the
/// definitions of docs/metrics.md: ITL over every token gap after the first chunk, each
/// chunk counting its own tokens, (last − first chunk) / (n − first chunk's tokens);
/// TPOT = (end − first token) / (n − 1).
///
/// Why the bound has two parts. A rate spans two instants the client stamped, each at
/// the mock's instant plus a lateness `d ≥ 0` that a busy machine can make milliseconds
/// (see the module's comment); over a span `S` of `G` gaps the client's mean is then
/// `(S + d_end − d_start) / G`. Both lateness figures are measured here (the client's
/// first-token, last-token and end instants against the mock's), so every request must be
/// within 2% plus exactly what its measured lateness explains — a wrong gap count, a
/// wrong token count or a wrong instant (the first content token instead of the first
/// token, say) is not explained by lateness and fails whatever the load — and the least
/// disturbed request must be within 2% outright.
fn check_rates(joined: &[Joined]) {
    let mut rates = Vec::new();
    for Joined { log, truth } in joined {
        let id = log["request_id"].as_str().unwrap_or_default().to_string();
        if log["status"] != "completed" {
            continue;
        }
        let streamed = truth["stream"].as_bool().unwrap_or(false);
        let chunks = token_chunks(truth);
        if !streamed || chunks.len() < 2 {
            assert!(
                log.get("itl_ms").is_none() && log.get("last_token_time").is_none(),
                "{id}: an ITL without two streamed chunks with tokens\nlog: {log}\ntruth: {truth}"
            );
        }
        if !streamed {
            assert!(
                log.get("tpot_ms").is_none(),
                "{id}: a TPOT without a stream: {log}"
            );
            continue;
        }
        let n: u64 = chunks.iter().map(|c| c.1).sum();
        let (Some(&(t_first, k_first)), Some(&(t_last, _))) = (chunks.first(), chunks.last())
        else {
            continue;
        };
        let client_first = log["first_token_time"].as_f64().expect("a first token");
        let d_first = (client_first - t_first) * 1e3;
        // One chunk with every token: its TPOT spans only the frames after it
        // (microseconds on both sides), no decoding to compare.
        if n >= 2 && chunks.len() >= 2 {
            let client = log["tpot_ms"]
                .as_f64()
                .unwrap_or_else(|| panic!("{id}: no tpot_ms with {n} tokens: {log}"));
            let end = truth["end_time"].as_f64().expect("end_time");
            let d_end = (log["end_time"].as_f64().expect("end_time") - end) * 1e3;
            rates.push(RateGap {
                what: "tpot",
                id: id.clone(),
                client_ms: client,
                truth_ms: (end - t_first) * 1e3 / (n - 1) as f64,
                explained_ms: (d_end - d_first).abs() / (n - 1) as f64,
            });
        }
        if chunks.len() >= 2 && packing_is_knowable(log, truth) {
            let gaps = (n - k_first) as f64;
            let client = log["itl_ms"]
                .as_f64()
                .unwrap_or_else(|| panic!("{id}: no itl_ms with {} chunks: {log}", chunks.len()));
            let last = log["last_token_time"].as_f64().expect("last_token_time");
            let d_last = (last - t_last) * 1e3;
            rates.push(RateGap {
                what: "itl",
                id: id.clone(),
                client_ms: client,
                truth_ms: (t_last - t_first) * 1e3 / gaps,
                explained_ms: (d_last - d_first).abs() / gaps,
            });
        }
    }
    let unexplained: Vec<&RateGap> = rates
        .iter()
        .filter(|r| {
            (r.client_ms - r.truth_ms).abs() > RATE_WITHIN * r.truth_ms + r.explained_ms + 1e-3
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "rates off the truth by more than 2% plus the measured lateness: {unexplained:#?}"
    );
    for what in ["itl", "tpot"] {
        if let Some(best) = rates
            .iter()
            .filter(|r| r.what == what)
            .min_by(|a, b| a.relative().total_cmp(&b.relative()))
        {
            assert!(
                best.relative() <= RATE_WITHIN,
                "{what}: even the closest request ({}) is off the truth by more than 2%: {best:?}",
                best.id
            );
        }
    }
}

/// Checks a run whose every request must complete: all of them, and the report counts them.
fn check_all_completed(config: MockConfig, options: impl FnOnce(Bench) -> Bench, requests: u64) {
    let (joined, report) = run_with_truth(config, options);
    assert_eq!(joined.len() as u64, requests, "one line per request");
    let completed = check(&joined);
    assert_eq!(completed as u64, requests, "every request completed");
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, requests);
    check_aggregates(&joined, b);
}

/// The report's distributions of TTFT, `ttft_any` and e2e against the same requests'
/// log lines (which [`check`] held to the truth): count, min, max and mean, within the
/// histograms' 3 significant digits. Min, max and mean have one definition; a
/// percentile's rank rounding is the histogram library's, so it is left out here.
fn check_aggregates(joined: &[Joined], b: &llmsurge_coordinator::BenchmarkResult) {
    check_percentiles(joined, b);
    check_itl_distribution(joined, b);
    check_cross_checks(joined, b);
    let ms = |j: &Joined, from: &str, to: &str| {
        Some((j.log[to].as_f64()? - j.log[from].as_f64()?) * 1e3)
    };
    for (metric, to) in [
        ("ttft", "first_content_time"),
        ("ttft_any", "first_token_time"),
        ("request_latency", "end_time"),
    ] {
        let values: Vec<f64> = joined
            .iter()
            .filter_map(|j| ms(j, "start_time", to))
            .collect();
        let Some(d) = b.metrics.get(metric).map(|m| &m.successful) else {
            // A format without tokens out (pooling) has no TTFT: neither side saw one.
            assert!(
                values.is_empty(),
                "{metric} is measured but not in the report"
            );
            continue;
        };
        assert_eq!(d.count, values.len() as u64, "{metric}: count");
        let close = |report: f64, log: f64| (report - log).abs() <= log * 2e-3 + 2e-3;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(0.0, f64::max);
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert!(close(d.min, min), "{metric}: min {} against {min}", d.min);
        assert!(close(d.max, max), "{metric}: max {} against {max}", d.max);
        assert!(
            close(d.mean, mean),
            "{metric}: mean {} against {mean}",
            d.mean
        );
    }
}

#[test]
fn chat_streamed_one_token_per_chunk_matches_the_truth() {
    check_all_completed(
        MockConfig {
            tokens_per_chunk: 1,
            ..Default::default()
        },
        |b| b.max_requests(15).data("prompt_tokens=30,output_tokens=6"),
        15,
    );
}

#[test]
fn chat_streamed_three_tokens_per_chunk_matches_the_truth() {
    check_all_completed(
        MockConfig {
            tokens_per_chunk: 3,
            ..Default::default()
        },
        |b| b.max_requests(15).data("prompt_tokens=30,output_tokens=10"),
        15,
    );
}

#[test]
fn chat_not_streamed_matches_the_truth() {
    check_all_completed(
        MockConfig::default(),
        |b| {
            b.max_requests(15)
                .stream(false)
                .data("prompt_tokens=30,output_tokens=6")
        },
        15,
    );
}

#[test]
fn reasoning_ttft_and_ttft_any_match_the_truth() {
    // Reasoning first: ttft_any is the first reasoning chunk, ttft the first answer chunk.
    let (joined, _) = run_with_truth(
        MockConfig {
            tokens_per_chunk: 2,
            reasoning_tokens: 4,
            ..Default::default()
        },
        |b| b.max_requests(15).data("prompt_tokens=30,output_tokens=5"),
    );
    assert_eq!(check(&joined), 15);
    for Joined { log, truth } in &joined {
        assert_eq!(truth["reasoning_tokens"], 4, "{truth}");
        // Reasoning first, or in the same instant: a mock delayed on a busy runner writes
        // both in one frame, and a busy client reads two frames in one read. `check` held
        // each instant to the mock's chunk of its kind.
        let (any, content) = (
            first_chunk(truth, |r, c| r + c > 0),
            first_chunk(truth, |_, c| c > 0),
        );
        assert!(any <= content, "{truth}");
        assert!(
            log["first_token_time"].as_f64() <= log["first_content_time"].as_f64(),
            "reasoning comes first: {log}"
        );
    }
}

#[test]
fn completions_streamed_match_the_truth() {
    check_all_completed(
        MockConfig {
            tokens_per_chunk: 2,
            ..Default::default()
        },
        |b| {
            b.format("completions")
                .max_requests(15)
                .data("prompt_tokens=30,output_tokens=7")
        },
        15,
    );
}

#[test]
fn overlapping_requests_match_the_truth() {
    // Four streams at once: chunks of different requests interleave on the client.
    check_all_completed(
        MockConfig {
            tokens_per_chunk: 2,
            ..Default::default()
        },
        |b| {
            b.concurrent(4)
                .max_requests(24)
                .data("prompt_tokens=30,output_tokens=6")
        },
        24,
    );
}

#[test]
fn http2_requests_carry_their_ids_and_match_the_truth() {
    // The reqwest transport: the id header goes through the same per-request headers.
    check_all_completed(
        MockConfig::default(),
        |b| {
            b.flag("--http2")
                .max_requests(12)
                .data("prompt_tokens=30,output_tokens=5")
        },
        12,
    );
}

#[test]
fn injected_faults_are_the_errors_the_client_reports() {
    // Errors (500 and 429) and cut streams, drawn per request from the mock's seed.
    let (joined, report) = run_with_truth(
        MockConfig {
            error_rate: 0.25,
            drop_rate: 0.2,
            ..Default::default()
        },
        |b| b.max_requests(30).data("prompt_tokens=30,output_tokens=6"),
    );
    check_faulted(&joined, &report, "drop");
}

#[test]
fn without_the_request_id_header_no_id_is_sent_or_logged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let server = truth_mock(&truth, MockConfig::default());
    let finished = Bench::on(&server)
        .arg("--request-id-header", "false")
        .max_requests(3)
        .request_log("requests.jsonl")
        .outputs("json")
        .data("prompt_tokens=10,output_tokens=3")
        .run();
    server.stop();
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let truth = crate::support::recorded(&truth);
    assert_eq!(truth.len(), 3);
    assert!(truth.iter().all(|t| t["request_id"].is_null()), "{truth:?}");
    let log = crate::support::recorded(&finished.dir.path().join("requests.jsonl"));
    assert!(log.iter().all(|l| l.get("request_id").is_none()), "{log:?}");
}

#[test]
fn constant_rate_requests_sent_by_the_pacer_match_the_truth() {
    // A rate profile: the pacer thread writes most requests itself on idle connections,
    // the request id included in the head it writes.
    check_all_completed(
        MockConfig {
            tokens_per_chunk: 2,
            ..Default::default()
        },
        |b| {
            b.constant(20)
                .max_requests(20)
                .data("prompt_tokens=30,output_tokens=5")
        },
        20,
    );
}

#[test]
fn poisson_requests_match_the_truth() {
    check_all_completed(
        MockConfig::default(),
        |b| {
            b.profile("poisson")
                .rate(20)
                .max_requests(20)
                .data("prompt_tokens=30,output_tokens=4")
        },
        20,
    );
}

#[test]
fn responses_with_reasoning_match_the_truth() {
    // Typed events; 3 tokens a chunk over 2 reasoning and 7 answer tokens: chunks of 2,
    // then 3, 3, 1.
    let (joined, _) = run_with_truth(
        MockConfig {
            tokens_per_chunk: 3,
            reasoning_tokens: 2,
            ..Default::default()
        },
        |b| {
            b.format("responses")
                .max_requests(12)
                .data("prompt_tokens=30,output_tokens=9")
        },
    );
    assert_eq!(check(&joined), 12);
    // The usage's reasoning count tells the client the runs: every ITL was held to
    // the truth.
    assert!(joined.iter().all(|j| packing_is_knowable(&j.log, &j.truth)));
}

#[test]
fn chat_reasoning_packed_three_a_chunk_matches_the_truth() {
    // A server that decodes a token every few ms and sends 3 a chunk, reasoning and
    // answer packed apart: 2 reasoning tokens in one chunk, then 7 answer tokens in
    // chunks of 3, 3, 1. Spread over the 4 chunks as one run (3, 3, 2, 1) the ITL
    // would count 6 gaps where the server decoded 7: 17% high.
    let (joined, report) = run_with_truth(
        MockConfig {
            tokens_per_chunk: 3,
            reasoning_tokens: 2,
            ..Default::default()
        },
        |b| b.max_requests(12).data("prompt_tokens=30,output_tokens=9"),
    );
    assert_eq!(check(&joined), 12);
    for Joined { log, truth } in &joined {
        let counts: Vec<u64> = token_chunks(truth).iter().map(|c| c.1).collect();
        assert_eq!(
            counts,
            [2, 3, 3, 1],
            "the mock packed as configured: {truth}"
        );
        assert!(packing_is_knowable(log, truth), "{log}");
    }
    check_aggregates(&joined, &report.benchmarks[0]);
}

#[test]
fn anthropic_messages_with_reasoning_match_the_truth() {
    let (joined, _) = run_with_truth(
        MockConfig {
            tokens_per_chunk: 2,
            reasoning_tokens: 3,
            ..Default::default()
        },
        |b| {
            b.format("anthropic")
                .max_requests(12)
                .data("prompt_tokens=30,output_tokens=8")
        },
    );
    assert_eq!(check(&joined), 12);
}

#[test]
fn anthropic_not_streamed_matches_the_truth() {
    check_all_completed(
        MockConfig::default(),
        |b| {
            b.format("anthropic")
                .stream(false)
                .max_requests(12)
                .data("prompt_tokens=30,output_tokens=5")
        },
        12,
    );
}

#[test]
fn garbage_closes_and_stalls_are_the_errors_the_client_reports() {
    // A stall holds the response until the client's idle timeout gives up on it.
    let (joined, _) = run_with_truth(
        MockConfig {
            garbage_rate: 0.2,
            close_rate: 0.2,
            stall_rate: 0.15,
            ..Default::default()
        },
        |b| {
            b.arg("--idle-timeout", "300ms")
                .max_requests(30)
                .data("prompt_tokens=30,output_tokens=6")
        },
    );
    check(&joined);
    let faults: Vec<&str> = joined
        .iter()
        .filter_map(|j| j.truth["fault"].as_str())
        .collect();
    for fault in ["garbage", "close", "stall"] {
        assert!(
            faults.contains(&fault),
            "the seed gave a {fault}: {faults:?}"
        );
    }
}

#[test]
fn throughput_with_varying_lengths_matches_the_truth() {
    // Lengths drawn per request, 3 tokens a chunk: the last chunk's size varies.
    check_all_completed(
        MockConfig {
            tokens_per_chunk: 3,
            ..Default::default()
        },
        |b| {
            b.profile("throughput")
                .max_concurrency(4)
                .max_requests(16)
                .data("prompt_tokens=30,output_tokens=9,output_tokens_stdev=3")
        },
        16,
    );
}

#[test]
fn a_sweep_matches_the_truth_in_every_benchmark() {
    // Synchronous, throughput and one constant rate: each benchmark's requests join.
    let (joined, report) = run_with_truth(MockConfig::default(), |b| {
        b.profile("sweep")
            .rate(3)
            .max_requests(6)
            .data("prompt_tokens=30,output_tokens=5")
    });
    assert_eq!(check(&joined), joined.len());
    let completed: u64 = report.benchmarks.iter().map(|b| b.requests.completed).sum();
    assert_eq!(completed, joined.len() as u64);
}

/// A splitmix64 step: a small seeded generator for drawing combinations.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn drawn_combinations_match_the_truth() {
    // Format × streamed × tokens a chunk × reasoning × faults × profile, a few drawn per
    // run. The seed is new each run (or LLMSURGE_TEST_TRUTH_SEED) and printed on failure.
    let seed = std::env::var("LLMSURGE_TEST_TRUTH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let mut state = seed;
    for _ in 0..5 {
        let mut pick = |n: usize| (next(&mut state) % n as u64) as usize;
        let format = ["chat", "completions", "responses", "anthropic"][pick(4)];
        let stream = [true, false][pick(2)];
        let tokens_per_chunk = [1, 3][pick(2)];
        let reasoning = if format == "completions" {
            0
        } else {
            [0, 3][pick(2)]
        };
        let faulty = pick(3) == 0;
        let (profile, with_profile): (&str, Options) = [
            ("synchronous", (|b| b.synchronous()) as Options),
            ("concurrent 3", |b| b.concurrent(3)),
            ("constant 25/s", |b| b.constant(25)),
            ("poisson 25/s", |b| b.profile("poisson").rate(25)),
            ("throughput ≤3", |b| {
                b.profile("throughput").max_concurrency(3)
            }),
        ][pick(5)];
        let varying = ["", ",output_tokens_stdev=2"][pick(2)];
        let case = format!(
            "seed {seed}: {format}, stream {stream}, {tokens_per_chunk} a chunk, \
             {reasoning} reasoning, faults {faulty}, {profile:?}, varying {varying:?}"
        );
        let data = format!("prompt_tokens=30,output_tokens=7{varying}");
        let config = MockConfig {
            tokens_per_chunk,
            reasoning_tokens: reasoning,
            error_rate: if faulty { 0.2 } else { 0.0 },
            drop_rate: if faulty { 0.15 } else { 0.0 },
            ..Default::default()
        };
        let outcome = std::panic::catch_unwind(|| {
            let (joined, report) = run_with_truth(config, |b| {
                with_profile(b.format(format).stream(stream).max_requests(8).data(&data))
            });
            let completed = check(&joined) as u64;
            let counted: u64 = report.benchmarks.iter().map(|b| b.requests.completed).sum();
            assert_eq!(counted, completed, "completed in the report and the truth");
        });
        if let Err(e) = outcome {
            eprintln!("drawn case failed; rerun with LLMSURGE_TEST_TRUTH_SEED={seed}: {case}");
            std::panic::resume_unwind(e);
        }
    }
}

/// The report's percentiles of TTFT, `ttft_any`, e2e and TPOT against the same
/// percentiles of the truth's values for the completed requests (the mock's instant of
/// each event, from the client's start). Every client value is its truth value plus a
/// lateness in [−[`EARLY_MS`], `D`] (`D`: the largest measured over these requests; a
/// TPOT, which spans two client instants, as far below as measured too), so
/// every order statistic of the client's values lies within the same band of the
/// truth's; the report's, from a histogram of 3 significant digits, adds 0.1%. The rank
/// a percentile falls on is bracketed by its two neighbours (nearest rank either way).
fn check_percentiles(joined: &[Joined], b: &llmsurge_coordinator::BenchmarkResult) {
    let done: Vec<&Joined> = joined
        .iter()
        .filter(|j| j.log["status"] == "completed" && j.truth["stream"].as_bool() == Some(true))
        .collect();
    if done.len() < 2 {
        return;
    }
    let sec = |v: &serde_json::Value| v.as_f64().expect("an instant");
    // (truth value, client value) per request, ms.
    let pairs = |metric: &str| -> Vec<(f64, f64)> {
        done.iter()
            .filter_map(|j| {
                let start = sec(&j.log["start_time"]);
                let chunks = token_chunks(&j.truth);
                let first_any = chunks.first()?.0;
                Some(match metric {
                    "ttft" => (
                        (first_chunk(&j.truth, |_, c| c > 0)? - start) * 1e3,
                        (j.log["first_content_time"].as_f64()? - start) * 1e3,
                    ),
                    "ttft_any" => (
                        (first_any - start) * 1e3,
                        (j.log["first_token_time"].as_f64()? - start) * 1e3,
                    ),
                    "request_latency" => (
                        (sec(&j.truth["end_time"]) - start) * 1e3,
                        (sec(&j.log["end_time"]) - start) * 1e3,
                    ),
                    _ => {
                        let n = j.log["output_tokens"].as_u64()?;
                        (n >= 2).then_some(())?;
                        (
                            (sec(&j.truth["end_time"]) - first_any) * 1e3 / (n - 1) as f64,
                            j.log["tpot_ms"].as_f64()?,
                        )
                    }
                })
            })
            .collect()
    };
    for metric in ["ttft", "ttft_any", "request_latency", "tpot"] {
        let pairs = pairs(metric);
        let Some(d) = b.metrics.get(metric).map(|m| &m.successful) else {
            continue;
        };
        if pairs.len() as u64 != d.count || pairs.is_empty() {
            continue; // warm-up, or a metric this format does not have
        }
        let late = pairs.iter().map(|(t, c)| c - t).fold(0.0, f64::max);
        // TPOT spans two client instants: a first token read late and an end read on
        // time make it shorter than the truth's, by as much as measured here.
        let early = pairs.iter().map(|(t, c)| t - c).fold(EARLY_MS, f64::max);
        let mut truth: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        truth.sort_by(f64::total_cmp);
        let n = truth.len();
        let p = &d.percentiles;
        for (q, reported) in [(0.5, p.p50), (0.9, p.p90), (0.99, p.p99)] {
            let rank = (q * n as f64).ceil() as usize;
            let lo = truth[rank.saturating_sub(2).min(n - 1)];
            let hi = truth[rank.min(n - 1)];
            assert!(
                reported >= lo * (1.0 - 1e-3) - early - 1e-3
                    && reported <= hi * (1.0 + 1e-3) + late + 1e-3,
                "{metric} p{}: the report says {reported} ms, the truth's nearest ranks \
                 {lo}..{hi} ms, the client at most {late} ms late and {early} ms early",
                q * 100.0
            );
        }
    }
}

#[test]
fn goodput_and_slo_verdicts_match_the_truth() {
    // Goodput and an e2e objective recomputed from the truth's end instants, errors
    // included. A request whose truth lies within the client's largest measured lateness
    // of the threshold may fall either side, so the truth gives a range for the good
    // count, and the verdict is checked where the truth decides it.
    let threshold_ms = 36.0;
    let (joined, report) = run_with_truth(
        MockConfig {
            error_rate: 0.2,
            ..Default::default()
        },
        |b| {
            b.max_requests(30)
                .data("prompt_tokens=30,output_tokens=6")
                .goodput("e2e:36ms")
                .slo("e2e_p50<=36ms")
        },
    );
    let completed = check(&joined);
    let e2e: Vec<(f64, f64)> = joined
        .iter()
        .filter(|j| j.truth["outcome"] == "completed")
        .map(|j| {
            let start = j.log["start_time"].as_f64().expect("start");
            let truth = (j.truth["end_time"].as_f64().expect("end") - start) * 1e3;
            let client = (j.log["end_time"].as_f64().expect("end") - start) * 1e3;
            (truth, client - truth)
        })
        .collect();
    assert_eq!(e2e.len(), completed);
    let late = e2e.iter().map(|e| e.1).fold(0.0, f64::max);
    let good_hi = e2e
        .iter()
        .filter(|e| e.0 <= threshold_ms + EARLY_MS)
        .count() as u64;
    let good_lo = e2e.iter().filter(|e| e.0 + late <= threshold_ms).count() as u64;
    let b = &report.benchmarks[0];
    let goodput = b.goodput.as_ref().expect("a goodput");
    assert!(
        (good_lo..=good_hi).contains(&goodput.good_requests),
        "{} good requests reported, the truth says {good_lo}..={good_hi} (lateness {late} ms)",
        goodput.good_requests
    );
    // Every request that reached the mock was judged: completed or errored, none cut off.
    let judged = joined.len() as f64;
    assert!(
        (goodput.fraction - goodput.good_requests as f64 / judged).abs() < 1e-9,
        "fraction {} against {} good of {judged} judged",
        goodput.fraction,
        goodput.good_requests
    );
    // The verdict: the truth's order statistics at the p50's 95% confidence ranks
    // against the threshold (docs/metrics.md, "Percentile verdicts and confidence"):
    // the upper one within it passes, the lower one beyond it fails.
    let mut truth: Vec<f64> = e2e.iter().map(|e| e.0).collect();
    truth.sort_by(f64::total_cmp);
    let (l, u) = llmsurge_coordinator::precision::confidence_ranks(truth.len() as u64, 0.5, 0.95);
    let at = |rank: Option<u64>| rank.map(|r| truth[r as usize - 1]);
    let verdict = b.slo.as_ref().expect("an SLO verdict");
    if let Some(upper) = at(u).filter(|x| x + late + threshold_ms * 1e-3 < threshold_ms) {
        assert!(
            verdict.passed,
            "the truth's upper bound is {upper} ms: {verdict:?}"
        );
    } else if let Some(lower) = at(l).filter(|x| *x > threshold_ms * (1.0 + 1e-3) + EARLY_MS) {
        let c = &verdict.checks[0];
        assert!(
            !c.passed && !c.inconclusive,
            "the truth's lower bound is {lower} ms: {verdict:?}"
        );
    }
}

#[test]
fn pooling_requests_match_the_truth() {
    // One body each, no tokens out: e2e against the mock's end, the prompt count
    // against the mock's, every request completed.
    for (format, data) in [
        ("embeddings", "prompt_tokens=16,batch_size=4"),
        ("rerank", "prompt_tokens=8,documents=5"),
        ("score", "prompt_tokens=8,documents=3"),
    ] {
        let (joined, report) = run_with_truth(MockConfig::default(), |b| {
            b.format(format).max_requests(10).data(data)
        });
        assert_eq!(check(&joined), 10, "{format}");
        for Joined { log, truth } in &joined {
            assert_eq!(truth["stream"], false, "{format}: {truth}");
            assert_eq!(log["output_tokens"], 0, "{format}: {log}");
            assert!(log["first_token_time"].is_null(), "{format}: {log}");
        }
        let b = &report.benchmarks[0];
        assert_eq!(b.requests.completed, 10, "{format}");
        check_aggregates(&joined, b);
    }
}

#[test]
fn pooling_faults_are_the_errors_the_client_reports() {
    // 500s, 429s and closed connections on embeddings, drawn per request from the seed.
    let (joined, report) = run_with_truth(
        MockConfig {
            error_rate: 0.3,
            close_rate: 0.2,
            ..Default::default()
        },
        |b| {
            b.format("embeddings")
                .max_requests(30)
                .data("prompt_tokens=16,batch_size=2")
        },
    );
    check_faulted(&joined, &report, "close");
}

#[test]
fn transcription_streamed_matches_the_truth() {
    check_all_completed(
        MockConfig {
            tokens_per_chunk: 2,
            ..Default::default()
        },
        |b| {
            b.format("transcription")
                .concurrent(4)
                .max_requests(8)
                .data("audio_seconds=1,output_tokens=7")
        },
        8,
    );
}

#[test]
fn transcription_whole_matches_the_truth() {
    check_all_completed(
        MockConfig::default(),
        |b| {
            b.format("transcription")
                .stream(false)
                .concurrent(4)
                .max_requests(8)
                .data("audio_seconds=1,output_tokens=7")
        },
        8,
    );
}

#[test]
fn image_chat_matches_the_truth() {
    check_all_completed(
        MockConfig {
            tokens_per_chunk: 2,
            ..Default::default()
        },
        |b| {
            b.max_requests(10)
                .data("prompt_tokens=8,output_tokens=5,images=2,image_size=64x32,image_format=png")
        },
        10,
    );
}

#[test]
fn transcription_faults_are_the_errors_the_client_reports() {
    let (joined, report) = run_with_truth(
        MockConfig {
            error_rate: 0.25,
            drop_rate: 0.25,
            ..Default::default()
        },
        |b| {
            b.format("transcription")
                .concurrent(4)
                .max_requests(16)
                .data("audio_seconds=1,output_tokens=7")
        },
    );
    check_faulted(&joined, &report, "drop");
}

/// The report's `itl` distribution against the truth's token gaps: every gap between two
/// chunks with tokens, split over the later chunk's tokens as docs/metrics.md says (a
/// gap `g` before a chunk of `k` tokens is `k` gaps of `g / k`), over the completed
/// streamed requests. Only where the client can know every chunk's tokens
/// ([`packing_is_knowable`]): elsewhere its split is a guess.
///
/// The count must be exact. The mean spans each request's first and last chunk, whose
/// lateness the log measures, so it must be within what that lateness explains. A
/// percentile also depends on the chunks between, which the log does not time: each is
/// held within the truth's order statistics, widened by the largest lateness measured
/// and by a tenth of the ranks (chunks a busy runner delayed further than any measured).
fn check_itl_distribution(joined: &[Joined], b: &llmsurge_coordinator::BenchmarkResult) {
    let streamed: Vec<&Joined> = joined
        .iter()
        .filter(|j| j.log["status"] == "completed" && j.truth["stream"].as_bool() == Some(true))
        .collect();
    let Some(d) = b.metrics.get("itl").map(|m| &m.successful) else {
        assert!(
            streamed.iter().all(|j| token_chunks(&j.truth).len() < 2),
            "no itl in the report, but the truth has token gaps"
        );
        return;
    };
    if streamed.is_empty()
        || !streamed
            .iter()
            .all(|j| packing_is_knowable(&j.log, &j.truth))
    {
        return;
    }
    let mut truth = Vec::new();
    let (mut span_truth, mut explained, mut late) = (0.0, 0.0, 0.0_f64);
    for j in &streamed {
        let chunks = token_chunks(&j.truth);
        if chunks.len() < 2 {
            continue;
        }
        for pair in chunks.windows(2) {
            let (k, gap) = (pair[1].1, (pair[1].0 - pair[0].0) * 1e3);
            truth.extend(std::iter::repeat_n(gap / k as f64, k as usize));
        }
        let first = (j.log["first_token_time"].as_f64().expect("first") - chunks[0].0) * 1e3;
        let last_chunk = chunks.last().expect("two chunks").0;
        let last = (j.log["last_token_time"].as_f64().expect("last") - last_chunk) * 1e3;
        span_truth += (last_chunk - chunks[0].0) * 1e3;
        explained += (last - first).abs();
        late = late.max(first).max(last);
    }
    let n = truth.len();
    assert_eq!(
        d.count, n as u64,
        "itl: the report's gaps against the truth's tokens"
    );
    if n == 0 {
        return;
    }
    let mean = span_truth / n as f64;
    assert!(
        (d.mean - mean).abs() <= mean * 2e-3 + explained / n as f64 + 2e-3,
        "itl mean: the report says {} ms, the truth {mean} ms (lateness explains {} ms)",
        d.mean,
        explained / n as f64
    );
    truth.sort_by(f64::total_cmp);
    let slack = n.div_ceil(10);
    for (q, reported) in [(0.5, d.percentiles.p50), (0.9, d.percentiles.p90)] {
        let rank = (q * n as f64).ceil() as usize;
        let lo = truth[rank.saturating_sub(1 + slack).min(n - 1)];
        let hi = truth[(rank + slack).min(n - 1)];
        assert!(
            reported >= lo * (1.0 - 1e-3) - late - EARLY_MS - 1e-3
                && reported <= hi * (1.0 + 1e-3) + late + 1e-3,
            "itl p{}: the report says {reported} ms, the truth's ranks around it \
             {lo}..{hi} ms, the client at most {late} ms late",
            q * 100.0
        );
    }
}

/// A faulted run against the truth: every request (see [`check`]), both an injected
/// error status and `other` (`drop` or `close`) among the faults, the report's
/// completed and errored counts, and its cross-checks.
fn check_faulted(joined: &[Joined], report: &llmsurge::report::Report, other: &str) {
    let completed = check(joined);
    let faults: Vec<&str> = joined
        .iter()
        .filter_map(|j| j.truth["fault"].as_str())
        .collect();
    assert!(
        faults.iter().any(|f| f.starts_with("error_")) && faults.contains(&other),
        "the seed gave both kinds of fault: {faults:?}"
    );
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, completed as u64);
    assert_eq!(b.requests.errored, (joined.len() - completed) as u64);
    check_cross_checks(joined, b);
}

/// The report's token sources and its cross-checks with the server's counters,
/// recomputed from the truth: the mock's `/metrics` counts what the truth records.
/// A request whose usage and streamed chunk count differ is one whose chunks carried
/// other than one token each; the server's output count is every token it sent, the
/// client's every token of a completed request and what it received of the others
/// (never more than the mock sent); successes are the requests the mock completed. A
/// completed request whose output count the client cannot know (a whole transcription)
/// leaves the output check out.
fn check_cross_checks(joined: &[Joined], b: &llmsurge_coordinator::BenchmarkResult) {
    let tokens = |t: &serde_json::Value| {
        t["reasoning_tokens"].as_u64().unwrap_or(0) + t["content_tokens"].as_u64().unwrap_or(0)
    };
    let completed: Vec<&Joined> = joined
        .iter()
        .filter(|j| j.log["status"] == "completed")
        .collect();
    if let Some(ts) = &b.token_sources {
        assert_eq!(
            ts.usage + ts.stream + ts.unknown,
            completed.len() as u64,
            "token sources: one per completed request: {ts:?}"
        );
        let mismatched = completed
            .iter()
            .filter(|j| {
                j.truth["stream"].as_bool() == Some(true)
                    && j.log["output_tokens_source"] == "usage"
                    && token_chunks(&j.truth).len() as u64 != tokens(&j.truth)
            })
            .count() as u64;
        assert_eq!(ts.mismatched, mismatched, "token sources: {ts:?}");
    }
    let Some(server) = &b.server_metrics else {
        return;
    };
    let received: u64 = joined
        .iter()
        .map(|j| {
            if j.log["status"] == "completed" {
                return tokens(&j.truth);
            }
            let got = j.log["output_tokens"].as_u64().unwrap_or(0);
            assert!(
                got <= tokens(&j.truth),
                "more tokens than the mock sent: {j:?}"
            );
            got
        })
        .sum();
    // A completed request whose output count the client does not know (a whole
    // transcription) makes the client's count a lower bound: no disagreement then.
    let unknown = completed
        .iter()
        .any(|j| j.log["output_tokens_source"] == "unknown");
    if let Some(c) = server
        .cross_checks
        .iter()
        .find(|c| c.name == "generation_tokens" && unknown)
    {
        assert!(
            c.agrees,
            "a count the client could not make disagrees: {c:?}"
        );
    }
    for c in &server.cross_checks {
        let (truth_server, truth_client) = match c.name.as_str() {
            "generation_tokens" => (
                joined.iter().map(|j| tokens(&j.truth)).sum::<u64>(),
                received,
            ),
            "request_success" => (
                joined
                    .iter()
                    .filter(|j| j.truth["outcome"] == "completed")
                    .count() as u64,
                completed.len() as u64,
            ),
            "prompt_tokens" => {
                // The mock counts a prompt at every attempt (a resent request's twice);
                // an error it injects before the body has no count in the truth, so
                // there the server's count is only bounded below.
                let attempts = |j: &Joined| if j.log["retried"] == true { 2 } else { 1 };
                let server: u64 = joined
                    .iter()
                    .filter_map(|j| Some(j.truth["prompt_tokens"].as_u64()? * attempts(j)))
                    .sum();
                if joined.iter().any(|j| j.truth["prompt_tokens"].is_null()) {
                    assert!(
                        c.server >= server as f64,
                        "prompt_tokens: {c:?} below {server}"
                    );
                    continue;
                }
                // Every prompt sent, each resend too, is the most the server can count.
                assert_eq!(
                    c.client_upper.unwrap_or(c.client),
                    server as f64,
                    "prompt_tokens: the client's upper end against every prompt sent: {c:?}"
                );
                // The client counts the prompts the server began to answer.
                let answered = joined.iter().filter(|j| {
                    j.log["status"] == "completed" || !j.log["first_token_time"].is_null()
                });
                (
                    server,
                    answered
                        .filter_map(|j| j.truth["prompt_tokens"].as_u64())
                        .sum::<u64>(),
                )
            }
            _ => continue,
        };
        assert_eq!(
            c.client, truth_client as f64,
            "{}: the client's count: {c:?}",
            c.name
        );
        assert_eq!(
            c.server, truth_server as f64,
            "{}: the server's count: {c:?}",
            c.name
        );
        let upper = c.client_upper.unwrap_or(c.client);
        let agrees = if c.server < c.client {
            (c.client - c.server) <= 0.02 * c.client
        } else {
            c.server <= upper || (c.server - upper) <= 0.02 * upper
        };
        assert_eq!(c.agrees, agrees, "{}: the verdict: {c:?}", c.name);
    }
}
