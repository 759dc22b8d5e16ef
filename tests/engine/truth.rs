//! Ground truth: every request of a run is joined, by its `x-request-id`, with what the
//! mock did with it (`--truth`), and what the client measured is compared with what
//! happened: TTFT, `ttft_any` and e2e against the instants the mock handed those chunks
//! to the connection, token counts against what the mock sent, the error kind against the
//! fault it injected. No figure is compared with a configured latency, and no tolerance
//! is measured in the run it judges: every bound is a constant of this file (the same as
//! tests/engine/verdict_matrix.rs uses).
//!
//! How the instants compare. The client stamps `start` just before it writes the request,
//! and a chunk when its read returns; the mock stamps its arrival when the handler starts
//! and a chunk when it hands the frame to hyper, which writes it in the same poll. Both
//! are `CLOCK_MONOTONIC`, written as Unix seconds through anchors that agree to
//! microseconds. So for one event the later side's instant is the earlier side's plus
//! loopback transit and wake-ups: tens of microseconds, or milliseconds when a busy
//! machine deschedules a thread. Two rules follow:
//! - every request, each instant: never earlier than the clocks' error ([`EARLY_MS`]),
//!   never later than [`REQUEST_BOUND_MS`]. Where a test is about which event the client
//!   stamps, its mock puts those events further apart than that bound, so a wrong event
//!   fails the request that shows it;
//! - every aggregate (counts, means, percentiles of TTFT, `ttft_any`, e2e, TPOT, ITL;
//!   goodput counts; steady-state rates) is computed from the truth — the mock's
//!   instants and token counts, the log telling only which requests a benchmark measured
//!   and, for a latency, the send it counts from (see [`truth_series`]) — and compared
//!   with the report's: a percentile between the truth's order statistics [`RANK_SLACK`]
//!   either side of its rank, give or take [`AGGREGATE_MS`] and the histograms'
//!   precision. A busy machine may disturb a few requests by up to the request bound; a
//!   client that measures the wrong thing is off for all of them.
//!
//! On HTTP/2 the mock's frame goes to the socket from hyper's connection task rather
//! than in the body's poll: still microseconds on an idle runtime.

use crate::scenario::{Bench, Options};
use crate::support::{Joined, join_truth, mock};
use llmsurge::mock::{MockConfig, MockServer};
use llmsurge::report::Report;
use llmsurge_coordinator::BenchmarkResult;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How much earlier than the mock's a client instant may read (or the mock's arrival
/// than the client's send): the two clock anchors' combined error.
pub(super) const EARLY_MS: f64 = 0.5;
/// How much later any one instant may read than the other side's for the same event:
/// loopback, wake-ups and a busy 2-core runner descheduling a thread.
pub(super) const REQUEST_BOUND_MS: f64 = 300.0;
/// How far an aggregate may sit from the truth's, beyond the rank slack: what a busy
/// runner adds to most requests of a run at once (bursts of load delay several reads by
/// a few ms together: seen 4 of 13 requests at a load average of 11 on 2 cores).
pub(super) const AGGREGATE_MS: f64 = 10.0;
/// The share of requests a busy machine may disturb beyond [`AGGREGATE_MS`] in one run:
/// a percentile is compared with the truth's order statistics this far either side of
/// its rank, and a mean may move by this share of [`REQUEST_BOUND_MS`]. Seen at a load
/// average of 14 on 2 cores: the client read a first token more than 10 ms after the
/// mock sent it for 3 requests of 42 (up to 39 ms), the rest mostly within 0.4 ms.
pub(super) const RANK_SLACK: f64 = 0.15;
/// Fewest values a p90 is compared on: with fewer, the rank slack reaches the largest
/// value and one disturbed request decides it.
const P90_VALUES: usize = 20;
/// HDR histograms keep 3 significant digits.
pub(super) const HDR_RELATIVE: f64 = 0.002;

/// The latencies of most tests here: every chunk its own event (gaps of milliseconds),
/// with jitter so the requests differ and the truth's order statistics spread.
fn jittered() -> MockConfig {
    MockConfig {
        ttft_ms: 15.0,
        ttft_ms_std: 3.0,
        itl_ms: 4.0,
        itl_ms_std: 1.0,
        ..MockConfig::default()
    }
}

/// A mock configured by `config` writing its truth to `path`.
fn truth_mock(path: &std::path::Path, config: MockConfig) -> MockServer {
    mock(MockConfig {
        truth: Some(path.to_path_buf()),
        ..config
    })
}

/// Runs the benchmark `options` make against a truth mock configured by `config`; the
/// joined requests and the run's report.
fn run_with_truth(
    config: MockConfig,
    options: impl FnOnce(Bench) -> Bench,
) -> (Vec<Joined>, Report) {
    run_settled(config, options, |_, _| {})
}

/// [`run_with_truth`], with `settle` called with the request log's lines after the run
/// and before the mock stops (to wait for what the mock notices late, such as a client
/// that went away).
fn run_settled(
    config: MockConfig,
    options: impl FnOnce(Bench) -> Bench,
    settle: impl FnOnce(&MockServer, &[serde_json::Value]),
) -> (Vec<Joined>, Report) {
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
    // 3: an SLO the run was given failed, 5: it could not decide; the report is
    // written all the same.
    assert!(
        matches!(finished.code(), 0 | 1 | 3 | 5),
        "exit {}: {}",
        finished.code(),
        finished.stderr
    );
    let report = finished.report();
    let log = finished.dir.path().join("requests.jsonl");
    settle(&server, &crate::support::recorded(&log));
    // Stopping flushes the truth file, after every response ended.
    server.stop();
    crate::support::assert_identity(&report);
    let joined = join_truth(&log, &truth);
    (joined, report)
}

/// Waits (bounded) until the mock has counted a client gone for every request the
/// log says was sent and cancelled (given up by plan, or cut by the benchmark's stop):
/// the mock notices a closed connection at its next write, after the run ended.
fn wait_cancelled(server: &MockServer, log: &[serde_json::Value]) {
    let n = log
        .iter()
        .filter(|l| l["status"] == "cancelled" && !l["start_time"].is_null())
        .count() as u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.stats().cancelled < n {
        assert!(
            Instant::now() < deadline,
            "the mock noticed fewer than {n} clients leave: {:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The error kind the client must report (`log` its line) for what the mock did.
fn expected_error(log: &serde_json::Value, truth: &serde_json::Value) -> Option<String> {
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
        // The client went away mid-response: a planned give-up (`--cancel`), or a
        // request in flight when the benchmark stopped.
        (Some("client_gone"), _) => Some(
            match log["error_kind"].as_str() {
                Some("cancelled") => "cancelled",
                _ => "planned",
            }
            .into(),
        ),
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

/// Notes in `off` when `later` is not within [−[`EARLY_MS`], [`REQUEST_BOUND_MS`]] after
/// `earlier` (both Unix seconds): `later` is the side that sees the event second.
fn near(off: &mut Vec<String>, id: &str, what: &str, later: f64, earlier: f64) {
    let ms = (later - earlier) * 1e3;
    if !(-EARLY_MS..=REQUEST_BOUND_MS).contains(&ms) {
        off.push(format!("{id}: {what}: {ms:+.3} ms"));
    }
}

/// Checks every joined request: outcome and error kind, token counts, and every
/// instant both sides saw within the fixed bounds (see the module's rules). Returns how
/// many completed.
fn check(joined: &[Joined]) -> usize {
    assert!(!joined.is_empty(), "no request was logged");
    let mut off = Vec::new();
    let mut compared = 0;
    let mut completed = 0;
    for Joined { log, truth } in joined {
        let id = log["request_id"].as_str().unwrap_or_default().to_string();
        let expected = expected_error(log, truth);
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
        } else {
            // What the client received of a failed or abandoned response, the mock sent.
            let got = log["output_tokens"].as_u64().unwrap_or(0);
            assert!(got <= tokens, "{id}: {got} tokens of {tokens} sent: {log}");
        }
        let Some(start) = log["start_time"].as_f64() else {
            continue;
        };
        let arrival = truth["arrival_time"].as_f64().expect("arrival_time");
        near(
            &mut off,
            &id,
            "the mock's arrival after the send",
            arrival,
            start,
        );
        compared += 1;
        let mut pair = |what: &str, client: Option<f64>, mock: Option<f64>| match (client, mock) {
            (Some(c), Some(m)) => {
                compared += 1;
                near(&mut off, &id, what, c, m);
            }
            (None, None) => {}
            // A completed request must see exactly the chunks the mock sent.
            (c, m) if expected.is_none() => {
                panic!("{id}: {what} is {c:?} on the client, {m:?} in the truth")
            }
            _ => {}
        };
        // ttft_any: the first chunk with tokens of any kind; ttft: the first with content.
        pair(
            "ttft_any",
            log["first_token_time"].as_f64(),
            first_chunk(truth, |r, c| r + c > 0),
        );
        pair(
            "ttft",
            log["first_content_time"].as_f64(),
            first_chunk(truth, |_, c| c > 0),
        );
        if expected.is_none() && log.get("last_token_time").is_some() {
            pair(
                "last token",
                log["last_token_time"].as_f64(),
                token_chunks(truth).last().map(|c| c.0),
            );
        }
        match (truth["outcome"].as_str(), truth["fault"].as_str()) {
            // A stalled response ends when the client gives up, and one with garbage when
            // the client stops at the bad event: the mock sees both only when the client
            // has gone, after its end.
            (_, Some("stall" | "garbage")) => {}
            // A give-up: the client closes the connection and stamps its end; the mock
            // notices the close on its side, or at its next write. Neither instant
            // follows the other: each within a request's bound of the other.
            (Some("client_gone"), _) => {
                let end = log["end_time"].as_f64().expect("end_time");
                let gone = truth["end_time"].as_f64().expect("end_time");
                compared += 1;
                let ms = (gone - end) * 1e3;
                if ms.abs() > REQUEST_BOUND_MS {
                    off.push(format!(
                        "{id}: the mock noticed the give-up {ms:+.3} ms after it"
                    ));
                }
            }
            _ => pair("e2e", log["end_time"].as_f64(), truth["end_time"].as_f64()),
        }
    }
    assert!(compared > 0, "no instant to compare");
    assert!(
        off.is_empty(),
        "instants off the mock's for the same event by more than \
         -{EARLY_MS}..{REQUEST_BOUND_MS} ms (client − mock):\n{}",
        off.join("\n")
    );
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

/// Per-request ITL mean and TPOT against the truth's chunk instants, with the
/// definitions of docs/metrics.md: ITL over every token gap after the first chunk, each
/// chunk counting its own tokens, (last − first chunk) / (n − first chunk's tokens);
/// TPOT = (end − first token) / (n − 1). Each spans two instants the client stamped,
/// each within the fixed bounds of [`check`], so over `G` gaps it is within
/// ([`REQUEST_BOUND_MS`] + [`EARLY_MS`]) / `G` of the truth's. That catches a wrong gap
/// count or a wrong instant only when it is gross; the report's distributions are held
/// much closer in [`check_aggregates`].
fn check_rates(joined: &[Joined]) {
    let mut off = Vec::new();
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
        let mut compare = |what: &str, client: f64, truth_ms: f64, gaps: u64| {
            let bound = (REQUEST_BOUND_MS + EARLY_MS) / gaps as f64 + 1e-3;
            if (client - truth_ms).abs() > bound {
                off.push(format!(
                    "{id}: {what} {client:.3} ms, the truth's {truth_ms:.3} ms over {gaps} gaps"
                ));
            }
        };
        if n >= 2 {
            let client = log["tpot_ms"]
                .as_f64()
                .unwrap_or_else(|| panic!("{id}: no tpot_ms with {n} tokens: {log}"));
            let end = truth["end_time"].as_f64().expect("end_time");
            compare(
                "tpot",
                client,
                (end - t_first) * 1e3 / (n - 1) as f64,
                n - 1,
            );
        }
        if chunks.len() >= 2 && packing_is_knowable(log, truth) {
            let gaps = n - k_first;
            let client = log["itl_ms"]
                .as_f64()
                .unwrap_or_else(|| panic!("{id}: no itl_ms with {} chunks: {log}", chunks.len()));
            compare("itl", client, (t_last - t_first) * 1e3 / gaps as f64, gaps);
        }
    }
    assert!(
        off.is_empty(),
        "per-request rates off the truth's beyond the fixed bound:\n{}",
        off.join("\n")
    );
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

/// The value at quantile `q` of sorted `xs` (nearest rank, clamped).
pub(super) fn at_rank(xs: &[f64], q: f64) -> f64 {
    let q = q.clamp(0.0, 1.0);
    let i = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len()) - 1;
    xs[i]
}

/// Where a report's percentile `q` may lie, given the truth's `sorted` values: between
/// the truth's order statistics [`RANK_SLACK`] either side of its rank, widened by
/// `slack_ms`, the clocks' error (once at each end of the span) and HDR's precision.
pub(super) fn percentile_range(sorted: &[f64], q: f64, slack_ms: f64) -> (f64, f64) {
    (
        at_rank(sorted, q - RANK_SLACK) * (1.0 - HDR_RELATIVE) - 2.0 * EARLY_MS - slack_ms,
        at_rank(sorted, q + RANK_SLACK) * (1.0 + HDR_RELATIVE) + slack_ms,
    )
}

/// Notes in `off` when the report's percentile `q` (`reported`) lies outside
/// [`percentile_range`] of the truth's `sorted` values.
pub(super) fn check_percentile(
    off: &mut Vec<String>,
    what: &str,
    reported: f64,
    sorted: &[f64],
    q: f64,
    slack_ms: f64,
) {
    let (lo, hi) = percentile_range(sorted, q, slack_ms);
    if !(lo..=hi).contains(&reported) {
        off.push(format!(
            "{what}: the report says {reported:.3} ms, the truth's order statistics put it \
             in [{lo:.3}, {hi:.3}] ms ({} values)",
            sorted.len()
        ));
    }
}

/// The percentiles of `d` compared with a truth of `n` values, as (quantile, reported):
/// p50, and p90 with [`P90_VALUES`] values or more.
fn quantiles(d: &llmsurge_proto::Distribution, n: usize) -> Vec<(f64, f64)> {
    let mut q = vec![(0.5, d.percentiles.p50)];
    if n >= P90_VALUES {
        q.push((0.9, d.percentiles.p90));
    }
    q
}

/// The requests of benchmark `b` (its index and, with `--repeat`, its run in the log),
/// every phase and outcome.
fn of_benchmark<'a>(joined: &'a [Joined], b: &BenchmarkResult) -> Vec<&'a Joined> {
    joined
        .iter()
        .filter(|j| {
            j.log["benchmark"].as_u64() == Some(u64::from(b.index))
                && j.log["run"].as_u64() == b.run.map(u64::from)
        })
        .collect()
}

/// One metric's values as the truth has them, one per completed measured request (ITL:
/// one per token gap), ms.
struct TruthSeries {
    /// The report's metric.
    metric: &'static str,
    values: Vec<f64>,
    /// How far an undisturbed request's value may be off the truth's: [`AGGREGATE_MS`]
    /// for a latency; over the gaps a rate spans for TPOT.
    slack_ms: f64,
    /// Whether the mean is held too: a latency's mean moves by at most a share
    /// [`RANK_SLACK`] of requests disturbed by up to [`REQUEST_BOUND_MS`]; a rate's
    /// mean spans instants the report cannot bound that tightly.
    mean: bool,
}

/// The truth's figures for the completed measured requests `mine`: each span from the
/// client's send to the mock's instant of the event — TTFT and `ttft_any` to its first
/// chunk with content (with tokens), e2e to its end — TPOT from its first token chunk to
/// its end over its tokens − 1, and ITL as docs/metrics.md splits it (a gap `g` before a
/// chunk of `k` tokens is `k` gaps of `g / k`) where the client can know every chunk's
/// tokens ([`packing_is_knowable`]; elsewhere its split is a guess and `itl` is left
/// out). A span starts at the send, which only the client sees ([`check`] holds it to
/// the mock's arrival for every request): the mock's arrival is when its handler began,
/// which a busy runner delays by milliseconds for half the requests (seen: 3.7 ms at the
/// median, 9 ms at worst, load average 11 on 2 cores), and that time is the server's,
/// part of what a client rightly measures.
fn truth_series(mine: &[&Joined]) -> Vec<TruthSeries> {
    let sec = |v: &serde_json::Value| v.as_f64().expect("an instant");
    let since_send = |j: &Joined, t: Option<f64>| Some((t? - sec(&j.log["start_time"])) * 1e3);
    let latency = |metric, at: &dyn Fn(&Joined) -> Option<f64>| TruthSeries {
        metric,
        values: mine.iter().filter_map(|j| since_send(j, at(j))).collect(),
        slack_ms: AGGREGATE_MS,
        mean: true,
    };
    let mut series = vec![
        latency("ttft", &|j| first_chunk(&j.truth, |_, c| c > 0)),
        latency("ttft_any", &|j| first_chunk(&j.truth, |r, c| r + c > 0)),
        latency("request_latency", &|j| j.truth["end_time"].as_f64()),
    ];
    let streamed: Vec<&Joined> = mine
        .iter()
        .copied()
        .filter(|j| j.truth["stream"].as_bool() == Some(true))
        .collect();
    let tpot: Vec<(f64, u64)> = streamed
        .iter()
        .filter_map(|j| {
            let chunks = token_chunks(&j.truth);
            let n: u64 = chunks.iter().map(|c| c.1).sum();
            let first = chunks.first()?.0;
            (n > 1).then(|| {
                (
                    (sec(&j.truth["end_time"]) - first) * 1e3 / (n - 1) as f64,
                    n - 1,
                )
            })
        })
        .collect();
    let fewest_gaps = tpot.iter().map(|t| t.1).min().unwrap_or(1);
    series.push(TruthSeries {
        metric: "tpot",
        values: tpot.iter().map(|t| t.0).collect(),
        // Two instants, each off by up to the aggregate slack, over its gaps.
        slack_ms: (AGGREGATE_MS + EARLY_MS) / fewest_gaps as f64,
        mean: false,
    });
    if streamed
        .iter()
        .all(|j| packing_is_knowable(&j.log, &j.truth))
    {
        // A gap spans two chunk reads, each off by up to the aggregate slack.
        series.push(TruthSeries {
            metric: "itl",
            values: truth_itl(&streamed),
            slack_ms: AGGREGATE_MS,
            mean: false,
        });
    }
    series
}

/// Every token gap of the streamed requests `streamed` as the truth has them: a gap `g`
/// between two chunks with tokens, before a chunk of `k` tokens, is `k` gaps of `g / k`
/// (docs/metrics.md), ms.
fn truth_itl(streamed: &[&Joined]) -> Vec<f64> {
    let mut itl = Vec::new();
    for j in streamed {
        for pair in token_chunks(&j.truth).windows(2) {
            let (k, gap) = (pair[1].1, (pair[1].0 - pair[0].0) * 1e3);
            itl.extend(std::iter::repeat_n(gap / k as f64, k as usize));
        }
    }
    itl
}

/// The report's distributions of benchmark `b` against the truth's values of its
/// completed measured requests ([`truth_series`]): each count exactly, each latency's
/// mean, and p50 and p90 (with [`P90_VALUES`] values or more) within the fixed bounds of
/// the module's rules; then the report's cross-checks with the server's counters.
fn check_aggregates(joined: &[Joined], b: &BenchmarkResult) {
    let all = of_benchmark(joined, b);
    let mine: Vec<&Joined> = all
        .iter()
        .copied()
        .filter(|j| j.log["phase"] == "measured" && j.log["status"] == "completed")
        .collect();
    let mut off = Vec::new();
    for TruthSeries {
        metric,
        mut values,
        slack_ms,
        mean,
    } in truth_series(&mine)
    {
        let d = b.metrics.get(metric).map(|m| &m.successful);
        let Some(d) = d.filter(|_| !values.is_empty()) else {
            // A format without tokens out (pooling) has no TTFT: neither side saw one.
            assert_eq!(
                d.map_or(0, |d| d.count),
                values.len() as u64,
                "{metric}: the report's count against the truth's ({} benchmark {})",
                b.strategy,
                b.index
            );
            continue;
        };
        assert_eq!(
            d.count,
            values.len() as u64,
            "{metric}: the report's count against the truth's ({} benchmark {})",
            b.strategy,
            b.index
        );
        values.sort_by(f64::total_cmp);
        if mean {
            let truth = values.iter().sum::<f64>() / values.len() as f64;
            let lo = truth * (1.0 - HDR_RELATIVE) - 2.0 * EARLY_MS;
            let hi = truth * (1.0 + HDR_RELATIVE) + AGGREGATE_MS + RANK_SLACK * REQUEST_BOUND_MS;
            if !(lo..=hi).contains(&d.mean) {
                off.push(format!(
                    "{metric} mean: the report says {:.3} ms, the truth {truth:.3} ms \
                     (allowed [{lo:.3}, {hi:.3}])",
                    d.mean
                ));
            }
        }
        for (q, reported) in quantiles(d, values.len()) {
            let what = format!("{metric} p{}", q * 100.0);
            check_percentile(&mut off, &what, reported, &values, q, slack_ms);
        }
    }
    assert!(
        off.is_empty(),
        "{} benchmark {}: aggregates off the truth's:\n{}",
        b.strategy,
        b.index,
        off.join("\n")
    );
    check_cross_checks(&all, b);
}

#[test]
fn chat_streamed_one_token_per_chunk_matches_the_truth() {
    check_all_completed(
        MockConfig {
            tokens_per_chunk: 1,
            ..jittered()
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
            ..jittered()
        },
        |b| b.max_requests(15).data("prompt_tokens=30,output_tokens=10"),
        15,
    );
}

#[test]
fn chat_not_streamed_matches_the_truth() {
    check_all_completed(
        jittered(),
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
            ..jittered()
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
            ..jittered()
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
            ..jittered()
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
        jittered(),
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
            ..jittered()
        },
        |b| b.max_requests(30).data("prompt_tokens=30,output_tokens=6"),
    );
    check_faulted(&joined, &report, "drop");
}

#[test]
fn without_the_request_id_header_no_id_is_sent_or_logged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let server = truth_mock(&truth, jittered());
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
            ..jittered()
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
        jittered(),
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
            ..jittered()
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
            ..jittered()
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
            ..jittered()
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
        jittered(),
        |b| {
            b.format("anthropic")
                .stream(false)
                .max_requests(12)
                .data("prompt_tokens=30,output_tokens=5")
        },
        12,
    );
}

/// Asserts that the mock's seed gave each of `kinds` of fault to some request.
fn assert_faults_drawn(joined: &[Joined], kinds: &[&str]) {
    let faults: Vec<&str> = joined
        .iter()
        .filter_map(|j| j.truth["fault"].as_str())
        .collect();
    for fault in kinds {
        assert!(
            faults.contains(fault),
            "the seed gave a {fault}: {faults:?}"
        );
    }
}

#[test]
fn garbage_closes_and_stalls_are_the_errors_the_client_reports() {
    // A stall holds the response until the client's idle timeout gives up on it.
    let (joined, _) = run_with_truth(
        MockConfig {
            garbage_rate: 0.2,
            close_rate: 0.2,
            stall_rate: 0.15,
            ..jittered()
        },
        |b| {
            b.arg("--idle-timeout", "300ms")
                .max_requests(30)
                .data("prompt_tokens=30,output_tokens=6")
        },
    );
    check(&joined);
    assert_faults_drawn(&joined, &["garbage", "close", "stall"]);
}

#[test]
fn throughput_with_varying_lengths_matches_the_truth() {
    // Lengths drawn per request, 3 tokens a chunk: the last chunk's size varies.
    check_all_completed(
        MockConfig {
            tokens_per_chunk: 3,
            ..jittered()
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
    let (joined, report) = run_with_truth(jittered(), |b| {
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
            ..jittered()
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

#[test]
fn goodput_and_slo_verdicts_match_the_truth() {
    // Goodput and e2e objectives recomputed from the truth (the client's send to the
    // mock's end), errors included. Times to first token spread over tens of ms, so the
    // threshold splits the requests well beyond the aggregate slack. A request whose
    // truth lies within that slack of the threshold may fall either side, and a share of
    // the requests may be disturbed further: the truth gives a range for the good count.
    // Each objective is set where the truth decides it (one fails, one passes), and its
    // verdict must agree.
    let threshold_ms = 50.0;
    let (joined, report) = run_with_truth(
        MockConfig {
            error_rate: 0.2,
            ttft_ms: 30.0,
            ttft_ms_std: 15.0,
            ..jittered()
        },
        |b| {
            b.max_requests(30)
                .data("prompt_tokens=30,output_tokens=6")
                .goodput("e2e:50ms")
                .slo("e2e_p50<=20ms,e2e_p90<=200ms")
        },
    );
    let completed = check(&joined);
    // From the client's send to the mock's end (see `truth_series`).
    let e2e = |j: &Joined| {
        (j.truth["end_time"].as_f64().expect("end") - j.log["start_time"].as_f64().expect("sent"))
            * 1e3
    };
    let mut done: Vec<f64> = joined
        .iter()
        .filter(|j| j.truth["outcome"] == "completed")
        .map(e2e)
        .collect();
    assert_eq!(done.len(), completed);
    done.sort_by(f64::total_cmp);
    let disturbed = (RANK_SLACK * done.len() as f64).ceil() as u64;
    let good_hi = done
        .iter()
        .filter(|&&t| t <= threshold_ms + 2.0 * EARLY_MS)
        .count() as u64;
    let good_lo = (done
        .iter()
        .filter(|&&t| t + AGGREGATE_MS <= threshold_ms)
        .count() as u64)
        .saturating_sub(disturbed);
    let b = &report.benchmarks[0];
    let goodput = b.goodput.as_ref().expect("a goodput");
    assert!(
        (good_lo..=good_hi).contains(&goodput.good_requests),
        "{} good requests reported, the truth says {good_lo}..={good_hi}",
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
    // The objectives: an e2e percentile read over the completed requests, or over every
    // request with the errored ones' latencies too; the truth's range covers both.
    let mut sent: Vec<f64> = joined.iter().map(e2e).collect();
    sent.sort_by(f64::total_cmp);
    let verdict = b.slo.as_ref().expect("an SLO verdict");
    for (check, q, decided) in [
        (&verdict.checks[0], 0.5, "FAIL"),
        (&verdict.checks[1], 0.9, "PASS"),
    ] {
        let (a, z) = percentile_range(&done, q, AGGREGATE_MS);
        let (c, d) = percentile_range(&sent, q, AGGREGATE_MS);
        let (lo, hi) = (a.min(c), z.max(d));
        // The truth decides it; a verdict may stay short of deciding (too few requests
        // for its confidence), never decide the other way.
        let truth = if lo > check.threshold { "FAIL" } else { "PASS" };
        assert!(
            truth == decided && (hi < check.threshold || lo > check.threshold),
            "{}: the truth's range [{lo}, {hi}] ms does not decide it as the test meant",
            check.name
        );
        let opposite = if decided == "FAIL" { "PASS" } else { "FAIL" };
        assert_ne!(check.label(), opposite, "{}: {check:?}", check.name);
        if let Some(m) = check.measured {
            assert!(
                (lo..=hi).contains(&m),
                "{}: measured {m} ms, the truth's order statistics put it in [{lo}, {hi}] ms",
                check.name
            );
        }
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
        let (joined, report) =
            run_with_truth(jittered(), |b| b.format(format).max_requests(10).data(data));
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
            ..jittered()
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
            ..jittered()
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
        jittered(),
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
            ..jittered()
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
            ..jittered()
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

/// A faulted run against the truth: every request (see [`check`]), both an injected
/// error status and `other` (`drop` or `close`) among the faults, the report's
/// completed and errored counts, and its cross-checks.
fn check_faulted(joined: &[Joined], report: &Report, other: &str) {
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
    check_cross_checks(&joined.iter().collect::<Vec<_>>(), b);
}

/// The report's token sources and its cross-checks with the server's counters,
/// recomputed from the truth: the mock's `/metrics` counts what the truth records.
/// A request whose usage and streamed chunk count differ is one whose chunks carried
/// other than one token each; the server's output count is every token it sent, the
/// client's every token of a completed request and what it received of the others
/// (never more than the mock sent); successes are the requests the mock completed. A
/// completed request whose output count the client cannot know (a whole transcription)
/// leaves the output check out.
fn check_cross_checks(joined: &[&Joined], b: &BenchmarkResult) {
    let tokens = |t: &serde_json::Value| {
        t["reasoning_tokens"].as_u64().unwrap_or(0) + t["content_tokens"].as_u64().unwrap_or(0)
    };
    let completed: Vec<&Joined> = joined
        .iter()
        .copied()
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
                let attempts = |j: &&Joined| if j.log["retried"] == true { 2 } else { 1 };
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

#[test]
fn every_request_stamps_each_event_where_the_mock_sent_it() {
    // Every event of a response further from its neighbours than a request's bound:
    // the arrival, the reasoning token (ttft_any), the first answer token (ttft), the
    // last token and the end, 400 ms apart. A client that stamped one at a neighbour's
    // instant would be off by 400 ms on every request, which no busy machine excuses.
    let gap_ms = 400.0;
    let (joined, report) = run_with_truth(
        MockConfig {
            ttft_ms: gap_ms,
            itl_ms: gap_ms,
            reasoning_tokens: 1,
            ..MockConfig::instant()
        },
        |b| {
            b.concurrent(10)
                .max_requests(10)
                .data("prompt_tokens=30,output_tokens=3")
        },
    );
    // The premise, from the truth: the mock put its events that far apart.
    for Joined { truth, .. } in &joined {
        let chunks = token_chunks_apart(truth);
        assert_eq!(
            chunks.len(),
            3,
            "one reasoning and two answer chunks: {truth}"
        );
        let arrival = truth["arrival_time"].as_f64().expect("arrival");
        let instants = [arrival, chunks[0].0, chunks[1].0, chunks[2].0];
        for pair in instants.windows(2) {
            assert!(
                (pair[1] - pair[0]) * 1e3 > REQUEST_BOUND_MS + EARLY_MS,
                "events closer than a request's bound: {truth}"
            );
        }
    }
    assert_eq!(check(&joined), 10);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 10);
    check_aggregates(&joined, b);
}

/// A run whose clients give up on a planned share of requests 10 ms after their first
/// token, mid-stream (20 ms to the first token, then a token every 10 ms for 200 ms),
/// with a goodput every completed request meets; the mock stops once it has noticed
/// every client that left.
fn give_up_run() -> (Vec<Joined>, Report) {
    run_settled(
        MockConfig {
            ttft_ms: 20.0,
            itl_ms: 10.0,
            ..MockConfig::instant()
        },
        |b| {
            b.concurrent(6)
                .seed(5)
                .max_requests(30)
                .data("prompt_tokens=16,output_tokens=20")
                .arg("--cancel", "share=40%,after=ttft+10ms")
                .goodput("e2e:10s")
        },
        wait_cancelled,
    )
}

/// The requests a run gave up on by plan, as the truth has them: the client went away.
fn given_up(joined: &[Joined]) -> Vec<&Joined> {
    joined
        .iter()
        .filter(|j| j.truth["outcome"] == "client_gone")
        .collect()
}

#[test]
fn planned_give_ups_are_the_clients_the_mock_saw_leave() {
    let (joined, report) = give_up_run();
    // Each give-up is a client the mock saw leave mid-response, the others completed,
    // and every instant both saw is within the bounds (check).
    let completed = check(&joined);
    let gone = given_up(&joined);
    assert!(
        !gone.is_empty() && completed > 0,
        "seed 5 gives up on some requests, not all: {} of {}",
        gone.len(),
        joined.len()
    );
    assert_eq!(gone.len() + completed, joined.len());
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.cancelled_planned, gone.len() as u64);
    assert_eq!(b.requests.cancelled, gone.len() as u64);
    // Every give-up was sent: the mock had each one when its client left.
    assert_eq!(b.requests.cancelled_sent, gone.len() as u64);
    assert_eq!(b.requests.completed, completed as u64);
    // The plan: each left 10 ms after the first token the mock sent it, and before the
    // mock was done with it.
    let mut lower_bounds = Vec::new();
    for Joined { log, truth } in &gone {
        let first = first_chunk(truth, |r, c| r + c > 0).expect("a first token went out");
        let end = log["end_time"].as_f64().expect("end");
        assert!(
            (end - first) * 1e3 >= 10.0 - EARLY_MS,
            "gave up {:.3} ms after the mock's first token, not 10: {log}",
            (end - first) * 1e3
        );
        lower_bounds.push(
            (truth["end_time"].as_f64().expect("end") - log["start_time"].as_f64().expect("sent"))
                * 1e3,
        );
    }
    // The lower bounds the report keeps of their latencies (elapsed from the send until
    // the give-up) against the truth's elapsed until the mock noticed, which is at its
    // next token write: up to one token gap (10 ms) later.
    lower_bounds.sort_by(f64::total_cmp);
    let d = &b.metrics["request_latency"].incomplete;
    assert_eq!(d.count, gone.len() as u64, "one lower bound per give-up");
    let mut off = Vec::new();
    for (q, reported) in quantiles(d, lower_bounds.len()) {
        let what = format!("request_latency lower bound p{}", q * 100.0);
        check_percentile(
            &mut off,
            &what,
            reported,
            &lower_bounds,
            q,
            10.0 + AGGREGATE_MS,
        );
    }
    assert!(off.is_empty(), "{}", off.join("\n"));
    check_aggregates(&joined, b);
}

#[test]
fn planned_give_ups_are_neither_good_nor_judged_by_goodput() {
    let (joined, report) = give_up_run();
    let gone = given_up(&joined).len() as u64;
    let completed = joined.len() as u64 - gone;
    let goodput = report.benchmarks[0].goodput.as_ref().expect("a goodput");
    // Every completed request took well under 10 s at the mock: all good.
    assert_eq!(goodput.good_requests, completed, "{goodput:?}");
    // A planned give-up is the user's choice, not the server's failure: the judged
    // requests are the completed ones only, so the fraction is whole.
    assert!(
        (goodput.fraction - 1.0).abs() < 1e-9,
        "fraction {} with {completed} completed (all good) and {gone} planned give-ups",
        goodput.fraction
    );
}

/// A run of 4 streams held to one request in prefill (`--max-prefill-concurrency 1`)
/// against ~30 ms to the first token and 35 ms of decoding; the joined requests and
/// report.
fn prefill_capped_run(options: impl FnOnce(Bench) -> Bench) -> (Vec<Joined>, Report) {
    run_with_truth(
        MockConfig {
            ttft_ms: 30.0,
            ttft_ms_std: 5.0,
            itl_ms: 5.0,
            ..MockConfig::instant()
        },
        |b| {
            options(
                b.arg("--max-prefill-concurrency", 1)
                    .max_requests(16)
                    .data("prompt_tokens=16,output_tokens=8"),
            )
        },
    )
}

#[test]
fn the_prefill_cap_holds_at_the_mock() {
    let (joined, report) = prefill_capped_run(|b| b.concurrent(4));
    assert_eq!(check(&joined), 16);
    // By the mock's own instants: no request arrived before the one ahead of it had its
    // first token out, so no two were ever before their first token at once.
    let mut spans: Vec<(f64, f64, f64)> = joined
        .iter()
        .map(|j| {
            (
                j.truth["arrival_time"].as_f64().expect("arrival"),
                first_chunk(&j.truth, |r, c| r + c > 0).expect("a first token"),
                j.truth["end_time"].as_f64().expect("end"),
            )
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let overlaps: Vec<String> = spans
        .windows(2)
        .filter(|w| w[1].0 < w[0].1 - EARLY_MS / 1e3)
        .map(|w| format!("{:?} then {:?}", w[0], w[1]))
        .collect();
    assert!(
        overlaps.is_empty(),
        "two requests in prefill at once: {overlaps:?}"
    );
    // Decoding ran wider: some request arrived while the one ahead still streamed.
    assert!(
        spans.windows(2).any(|w| w[1].0 < w[0].2),
        "the cap serialised whole requests, not prefills: {spans:?}"
    );
    check_aggregates(&joined, &report.benchmarks[0]);
}

#[test]
fn ttft_from_intent_under_the_prefill_cap_matches_the_truth() {
    // A rate the cap can carry only with a queue: the wait for the cap is the client's,
    // part of TTFT from intent (the mock's first answer token from the instant the
    // load asked for the request), never hidden.
    let (joined, report) = prefill_capped_run(|b| b.constant(30));
    assert_eq!(check(&joined), 16);
    let mut from_intent: Vec<f64> = joined
        .iter()
        .map(|j| {
            let first = first_chunk(&j.truth, |_, c| c > 0).expect("an answer token");
            (first - j.log["scheduled_time"].as_f64().expect("intended")) * 1e3
        })
        .collect();
    from_intent.sort_by(f64::total_cmp);
    let d = &report.benchmarks[0]
        .metrics
        .get("ttft_from_intent")
        .expect("a ttft_from_intent distribution")
        .successful;
    assert_eq!(d.count, 16);
    let mut off = Vec::new();
    for (q, reported) in quantiles(d, from_intent.len()) {
        let what = format!("ttft_from_intent p{}", q * 100.0);
        check_percentile(&mut off, &what, reported, &from_intent, q, AGGREGATE_MS);
    }
    assert!(off.is_empty(), "{}", off.join("\n"));
}

#[test]
fn each_repeated_run_joins_the_truth_with_ids_of_its_own() {
    let (joined, report) = run_with_truth(
        MockConfig {
            tokens_per_chunk: 2,
            ..jittered()
        },
        |b| {
            b.constant(20)
                .max_requests(12)
                .repeat(2)
                .data("prompt_tokens=30,output_tokens=6")
        },
    );
    assert_eq!(check(&joined), 24, "every request of both runs completed");
    assert_eq!(report.benchmarks.len(), 2, "a benchmark per run");
    // A request id names its run: the runs share none, and each run one prefix.
    let prefix = |j: &Joined| {
        let id = j.log["request_id"].as_str().expect("an id");
        id[..id.rfind('-').expect("a slot suffix")].to_string()
    };
    let mut prefixes = BTreeMap::new();
    for j in &joined {
        let run = j.log["run"].as_u64().expect("a run");
        prefixes
            .entry(run)
            .or_insert_with(std::collections::BTreeSet::new)
            .insert(prefix(j));
    }
    assert_eq!(prefixes.len(), 2, "{prefixes:?}");
    assert!(prefixes.values().all(|p| p.len() == 1), "{prefixes:?}");
    assert_ne!(prefixes[&0], prefixes[&1], "both runs' ids alike");
    for b in &report.benchmarks {
        assert_eq!(b.requests.completed, 12, "run {:?}", b.run);
        check_aggregates(&joined, b);
    }
}

#[test]
fn until_precise_stops_on_an_interval_the_truth_agrees_with() {
    let (joined, report) = run_with_truth(jittered(), |b| {
        b.constant(50)
            .max_requests(2000)
            .until_precise("e2e_p50:20%")
            .data("prompt_tokens=30,output_tokens=6")
    });
    let completed = check(&joined);
    assert!(completed < 2000, "it stopped before its limit");
    let b = &report.benchmarks[0];
    let json = serde_json::to_value(b).expect("a benchmark is JSON");
    assert_eq!(
        json["stop_reason"]["kind"], "precision_reached",
        "{}",
        json["stop_reason"]
    );
    let f = &json["precision"]["figures"][0];
    assert_eq!(f["figure"], "e2e_p50");
    let mut e2e: Vec<f64> = joined
        .iter()
        .map(|j| {
            (j.truth["end_time"].as_f64().expect("end")
                - j.log["start_time"].as_f64().expect("sent"))
                * 1e3
        })
        .collect();
    e2e.sort_by(f64::total_cmp);
    let ms = |key: &str| f[key].as_f64().unwrap_or_else(|| panic!("{key} in {f}"));
    let mut off = Vec::new();
    check_percentile(&mut off, "e2e_p50", ms("value"), &e2e, 0.5, AGGREGATE_MS);
    assert!(off.is_empty(), "{}", off.join("\n"));
    // The interval it stopped on brackets the truth's median.
    let (lo, hi) = percentile_range(&e2e, 0.5, AGGREGATE_MS);
    assert!(
        ms("ci_low") <= hi && ms("ci_high") >= lo,
        "the interval [{}, {}] ms misses the truth's median [{lo}, {hi}] ms",
        ms("ci_low"),
        ms("ci_high")
    );
    check_aggregates(&joined, b);
}

#[test]
fn every_turn_of_every_session_matches_the_truth_in_order() {
    // Sessions of 3 turns at 5 sessions a second, 50 ms of thought between turns.
    let think_ms = 50.0;
    let (joined, report) = run_with_truth(jittered(), |b| {
        b.constant(5)
            .max_requests(15)
            .data("turns=3,prompt_tokens=20,output_tokens=5,think_time=50ms")
    });
    assert_eq!(check(&joined), joined.len(), "every turn completed");
    let mut sessions: BTreeMap<u64, Vec<&Joined>> = Default::default();
    for j in &joined {
        let session = j.log["session"].as_u64().expect("a session");
        sessions.entry(session).or_default().push(j);
    }
    assert!(
        sessions.values().filter(|s| s.len() == 3).count() >= 3,
        "whole sessions ran: {:?}",
        sessions.keys()
    );
    let sec = |v: &serde_json::Value| v.as_f64().expect("an instant");
    for turns in sessions.values_mut() {
        turns.sort_by_key(|j| j.log["turn"].as_u64());
        for pair in turns.windows(2) {
            let (before, after) = (&pair[0].truth, &pair[1].truth);
            // The next turn reached the mock its think time after the mock's last byte of
            // the one before (the client read it, then waited), within a request's bound.
            let idle = (sec(&after["arrival_time"]) - sec(&before["end_time"])) * 1e3 - think_ms;
            assert!(
                (-EARLY_MS..=REQUEST_BOUND_MS).contains(&idle),
                "turn {} reached the mock {idle:+.3} ms off its think time after the turn before",
                pair[1].log["turn"]
            );
            // It carried the conversation so far: a longer prompt.
            assert!(
                after["prompt_tokens"].as_u64() > before["prompt_tokens"].as_u64(),
                "a later turn's prompt no longer than the one before: {before} then {after}"
            );
        }
    }
    check_aggregates(&joined, &report.benchmarks[0]);
}

#[test]
fn https_requests_match_the_truth() {
    // The mock serves TLS with a throwaway CA's certificate; the client trusts the CA.
    let pki = super::tls::Pki::new("truth");
    let (cert, key) = pki.leaf(super::tls::Leaf::Server, "server");
    let (joined, report) = run_with_truth(
        MockConfig {
            tls_cert: Some(cert),
            tls_key: Some(key),
            tokens_per_chunk: 2,
            ..jittered()
        },
        |b| {
            b.arg("--ca-cert", pki.ca())
                .concurrent(2)
                .max_requests(12)
                .data("prompt_tokens=30,output_tokens=6")
        },
    );
    assert_eq!(check(&joined), 12);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 12);
    check_aggregates(&joined, b);
}

/// HTTPS through the worker's own HTTP/1.1 client: a rate profile, so the pacer thread
/// encrypts and writes most requests itself on kept-alive TLS connections (the session
/// tickets a TLS 1.3 server sends after the handshake wait on each idle one). Every
/// request matches the truth, and the connections the report says were opened and
/// reused are those the mock's truth names for the requests.
#[test]
fn https_requests_sent_by_the_pacer_on_kept_alive_connections_match_the_truth() {
    let pki = super::tls::Pki::new("truth-pacer");
    let (cert, key) = pki.leaf(super::tls::Leaf::Server, "server");
    let requests = 20;
    let (joined, report) = run_with_truth(
        MockConfig {
            tls_cert: Some(cert),
            tls_key: Some(key),
            tokens_per_chunk: 2,
            ..jittered()
        },
        |b| {
            b.arg("--ca-cert", pki.ca())
                .arg("--server-metrics", "off")
                .constant(20)
                .max_requests(requests)
                .data("prompt_tokens=30,output_tokens=5")
        },
    );
    assert_eq!(check(&joined) as u64, requests);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, requests);
    check_aggregates(&joined, b);
    let mut connections: Vec<u64> = joined
        .iter()
        .map(|j| {
            j.truth["connection"]
                .as_u64()
                .expect("the truth's connection")
        })
        .collect();
    connections.sort_unstable();
    connections.dedup();
    let c = b.client.connections.clone().expect("connections");
    assert_eq!(c.opened, connections.len() as u64, "{c:?}");
    assert_eq!(c.reused, requests - connections.len() as u64, "{c:?}");
    // 20 requests 50 ms apart, each answered within ~40 ms: kept-alive connections
    // carried some of them (all but the first, on an idle machine).
    assert!(c.reused >= 1, "{c:?}");
}

#[test]
fn the_steady_window_and_its_rates_match_the_truth() {
    // 12 s at a constant 20 requests a second against 200 ms responses (16 tokens): about
    // 4 in flight from the first second to the last, a plateau of 10 s or more.
    let tokens = 16.0;
    let (joined, report) = run_with_truth(
        MockConfig {
            ttft_ms: 50.0,
            itl_ms: 10.0,
            ..MockConfig::instant()
        },
        // A count, not a time limit: the stop cuts no request short.
        |b| {
            b.constant(20)
                .max_requests(240)
                .data("prompt_tokens=16,output_tokens=16")
        },
    );
    assert_eq!(check(&joined), 240);
    check(&joined);
    let b = &report.benchmarks[0];
    let json = serde_json::to_value(b).expect("a benchmark is JSON");
    let s = &json["steady_state"];
    // A run without a steady state says so; only a found window has figures to check.
    if s.is_null() || s["found"] == false {
        return;
    }
    let secs = |v: &serde_json::Value| v.as_f64().expect("seconds");
    let (from, to) = (
        b.start_time + secs(&s["start_s"]),
        b.start_time + secs(&s["end_s"]),
    );
    assert!(
        to <= b.end_time + EARLY_MS / 1e3 && from >= b.start_time,
        "the window {}–{} s lies outside the benchmark's 0–{} s",
        s["start_s"],
        s["end_s"],
        b.duration_s
    );
    // Its requests: the completed ones sent inside it. Sends fall on a 50 ms grid from
    // t0 and the window's edges on whole seconds, so only a request sent at an edge
    // itself can reach the mock on the other side of it, within the aggregate slack:
    // the truth's arrivals bracket the count, and those requests' tokens the tokens.
    let slack = AGGREGATE_MS / 1e3;
    let completed: Vec<f64> = joined
        .iter()
        .filter(|j| j.truth["outcome"] == "completed")
        .map(|j| j.truth["arrival_time"].as_f64().expect("arrival"))
        .collect();
    let between = |a: f64, z: f64| completed.iter().filter(|&&t| t >= a && t <= z).count() as f64;
    let seconds = to - from;
    let (lo, hi) = (
        between(from + slack, to) / seconds,
        between(from - EARLY_MS / 1e3, to + slack) / seconds,
    );
    let figure = |k: &str| {
        s["figures"][k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} in {s}"))
    };
    let rps = figure("requests_per_s");
    assert!(
        (lo..=hi).contains(&rps),
        "steady requests/s {rps}, the truth's requests inside the window say {lo}..={hi}"
    );
    // Its tokens/s are those requests' tokens (16 each) over the same window.
    let tps = figure("output_tokens_per_s");
    assert!(
        (lo * tokens..=hi * tokens).contains(&tps),
        "steady output tokens/s {tps}, the truth's say {}..={}",
        lo * tokens,
        hi * tokens
    );
}

#[test]
fn itl_with_a_short_first_chunk_matches_the_truth() {
    // Anthropic Messages with one reasoning token, 3 tokens a chunk: chunks of 1, 3, 3, 3
    // (the shape of vLLM's --stream-interval), 10 ms a token. The format's usage does not
    // count the reasoning apart, so the counts alone cannot tell the packing; the gaps
    // can, and every one is 10 ms a token.
    let (joined, report) = run_with_truth(
        MockConfig {
            ttft_ms: 20.0,
            itl_ms: 10.0,
            tokens_per_chunk: 3,
            reasoning_tokens: 1,
            ..MockConfig::instant()
        },
        |b| {
            b.format("anthropic")
                .max_requests(12)
                .data("prompt_tokens=30,output_tokens=10")
        },
    );
    assert_eq!(check(&joined), 12);
    let logged_gaps = crate::support::short_first_chunk_gaps_read(&joined);
    let streamed: Vec<&Joined> = joined.iter().collect();
    let mut itl = truth_itl(&streamed);
    itl.sort_by(f64::total_cmp);
    let d = &report.benchmarks[0].metrics["itl"].successful;
    assert_eq!(
        d.count, logged_gaps,
        "itl: a gap per token after the first, as each request's log line read them"
    );
    let mut off = Vec::new();
    for (q, reported) in quantiles(d, itl.len()) {
        let what = format!("itl p{}", q * 100.0);
        check_percentile(&mut off, &what, reported, &itl, q, AGGREGATE_MS);
    }
    assert!(off.is_empty(), "{}", off.join("\n"));
}

/// Each connection of the mock's truth with its requests' spans, arrival to end (Unix
/// seconds).
pub(super) fn spans_by_connection(joined: &[Joined]) -> BTreeMap<u64, Vec<(f64, f64)>> {
    let mut on: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    for j in joined {
        let t = &j.truth;
        if let (Some(c), Some(a), Some(e)) = (
            t["connection"].as_u64(),
            t["arrival_time"].as_f64(),
            t["end_time"].as_f64(),
        ) {
            on.entry(c).or_default().push((a, e));
        }
    }
    on
}

/// The most of `spans` under way at once.
pub(super) fn most_at_once(spans: &[(f64, f64)]) -> usize {
    spans
        .iter()
        .map(|&(from, _)| {
            spans
                .iter()
                .filter(|&&(a, e)| a <= from && from < e)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// `--http2-streams N`: by the mock's truth, several requests at once on one connection,
/// never more than N, the connections the truth names the ones the report says were
/// opened; every request and aggregate matches the truth.
fn check_shared_streams(tls: bool) {
    let per_connection = 4;
    let pki = super::tls::Pki::new("truth-streams");
    let (cert, key) = pki.leaf(super::tls::Leaf::Server, "server");
    let (config, ca) = if tls {
        (
            MockConfig {
                tls_cert: Some(cert),
                tls_key: Some(key),
                ..jittered()
            },
            Some(pki.ca()),
        )
    } else {
        (jittered(), None)
    };
    let requests = 48;
    let (joined, report) = run_with_truth(config, |b| {
        let b = b
            .flag("--http2")
            .arg("--http2-streams", per_connection)
            // One worker: its eight requests at once on its connections.
            .workers(1)
            .concurrent(8)
            .max_requests(requests)
            .data("prompt_tokens=30,output_tokens=8");
        match &ca {
            Some(ca) => b.arg("--ca-cert", ca),
            None => b,
        }
    });
    assert_eq!(check(&joined) as u64, requests);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, requests);
    check_aggregates(&joined, b);
    let on = spans_by_connection(&joined);
    let c = b.client.connections.clone().expect("connections");
    assert_eq!(
        c.opened,
        on.len() as u64,
        "{c:?} vs the truth's {:?}",
        on.keys()
    );
    // The most requests the mock had under way at once on one connection.
    let most = on.values().map(|s| most_at_once(s)).max().unwrap_or(0);
    assert!(
        (2..=per_connection).contains(&most),
        "at most {most} requests at once on one connection, by the truth ({per_connection} allowed)"
    );
    // Eight at once, four a connection: far fewer connections than requests.
    assert!(
        on.len() < 12,
        "{} connections for {requests} requests",
        on.len()
    );
}

#[test]
fn http2_streams_sharing_connections_match_the_truth() {
    check_shared_streams(false);
}

#[test]
fn http2_streams_sharing_connections_over_tls_match_the_truth() {
    check_shared_streams(true);
}

/// Faults on connections shared by streams: a 500, a cut stream, garbage or a stall is
/// the error of its own request only (a stall given up resets its stream alone); the
/// others on the connection complete.
#[test]
fn faults_on_shared_http2_connections_are_each_their_own_requests_errors() {
    let (joined, report) = run_with_truth(
        MockConfig {
            error_rate: 0.15,
            drop_rate: 0.15,
            garbage_rate: 0.15,
            stall_rate: 0.15,
            ..jittered()
        },
        |b| {
            b.flag("--http2")
                .arg("--http2-streams", "8")
                .arg("--idle-timeout", "300ms")
                .concurrent(8)
                .max_requests(40)
                .data("prompt_tokens=30,output_tokens=6")
        },
    );
    check(&joined);
    assert_faults_drawn(&joined, &["drop", "garbage", "stall"]);
    let completed = joined
        .iter()
        .filter(|j| j.truth["outcome"] == "completed")
        .count() as u64;
    assert_eq!(report.benchmarks[0].requests.completed, completed);
    assert!(completed >= 10, "{completed}");
}
