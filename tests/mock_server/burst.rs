//! A burst: many streamed requests at once from the real client against a zero-latency
//! mock on several worker threads, the rate the mock's counters must stay exact at. What
//! the clients received (the request log), what the mock counted (`/stats`) and what it
//! wrote per request (`--truth`) must agree to the request and the token.

use llmsurge::mock::MockConfig;

use crate::scenario::Bench;
use crate::support::{join_truth, mock, recorded};

/// Requests in the burst: enough that worker threads, connections and chunks interleave
/// for thousands of requests, few enough for a debug build on a busy 2-core runner.
const REQUESTS: u64 = 4000;
/// Streams in flight at once (the client's concurrency).
const CONCURRENCY: u32 = 64;

#[test]
fn a_burst_of_streams_is_counted_exactly_in_stats_and_truth() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let server = mock(MockConfig {
        workers: 2,
        truth: Some(truth.clone()),
        ..MockConfig::instant()
    });
    let finished = Bench::on(&server)
        .concurrent(CONCURRENCY)
        .max_requests(REQUESTS)
        .data("prompt_tokens=8,output_tokens=16")
        .request_log("requests.jsonl")
        .outputs("json")
        .flag("--disable-progress")
        .run();
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let report = finished.report();
    let log_path = finished.dir.path().join("requests.jsonl");
    let log = recorded(&log_path);
    // Stopping flushes the truth file, after every response ended.
    let stats = server.stop();

    // The clients: every request completed, and the tokens each received.
    assert_eq!(log.len() as u64, REQUESTS, "one log line per request");
    let received: u64 = log
        .iter()
        .map(|l| {
            assert_eq!(l["status"], "completed", "{l}");
            l["output_tokens"].as_u64().expect("output_tokens")
        })
        .sum();
    assert!(received >= REQUESTS, "every stream carried tokens");
    assert_eq!(report.benchmarks[0].requests.completed, REQUESTS);

    // /stats: every request counted once, to its end, with the tokens the clients got,
    // and every gauge back at zero.
    assert_eq!(stats.requests.chat_completions, REQUESTS, "{stats:?}");
    // (The client's own look at the server, /health and /v1/models, answered 200 too.)
    assert_eq!(
        stats.responses_2xx,
        REQUESTS + stats.requests.health + stats.requests.models,
        "{stats:?}"
    );
    assert_eq!(stats.completed, REQUESTS, "{stats:?}");
    assert_eq!(stats.cancelled, 0, "{stats:?}");
    assert_eq!(
        stats.request_success.stop + stats.request_success.length,
        REQUESTS,
        "{stats:?}"
    );
    assert_eq!(stats.tokens_sent, received, "{stats:?}");
    assert_eq!(
        (
            stats.active_requests,
            stats.active_streams,
            stats.flow.before_first_token,
            stats.flow.decoding,
            stats.kv_cache_tokens
        ),
        (0, 0, 0, 0, 0),
        "gauges back at zero: {stats:?}"
    );
    let model = &stats.models["llmsurge-mock"];
    assert_eq!(
        (model.requests, model.completed, model.tokens_sent),
        (REQUESTS, REQUESTS, received)
    );

    // --truth: one completed line per request, joined by id, each with the tokens its
    // client received; the chunks add up to /stats'.
    let joined = join_truth(&log_path, &truth);
    assert_eq!(joined.len() as u64, REQUESTS, "one truth line per request");
    let (mut chunks, mut prompt_tokens) = (0, 0);
    for j in &joined {
        assert_eq!(j.truth["outcome"], "completed", "{}", j.truth);
        assert_eq!(
            j.truth["content_tokens"], j.log["output_tokens"],
            "{}",
            j.truth
        );
        chunks += j.truth["chunks"].as_array().expect("chunks").len() as u64;
        prompt_tokens += j.truth["prompt_tokens"].as_u64().expect("prompt_tokens");
    }
    assert_eq!(stats.chunks_sent, chunks, "{stats:?}");
    assert_eq!(stats.prompt_tokens, prompt_tokens, "{stats:?}");
}
