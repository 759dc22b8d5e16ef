//! The group-wide caps (`--max-prefill-concurrency`, `--max-concurrency`) admit waiting
//! requests first come, first served across workers. A wait for a cap is client queue
//! time, judged from intent: a worker that takes the unit it just freed again, while
//! another worker's earlier request waits, makes that request wait longer than FIFO
//! would, and a starved worker's requests read as a backlog the load never made.
//!
//! Each run is joined with the mock's `--truth` on `x-request-id`. Under a cap of 1 the
//! mock sees requests in the order the cap let them through, so its arrival order is the
//! admission order, to be compared with the intended instants in the request log.

use super::intent::{Run, run};
use crate::scenario::Bench;
use crate::support::mock;
use llmsurge::mock::MockConfig;
use serde_json::Value;
use std::path::Path;

/// Workers of every run here: the cap is shared among them.
const WORKERS: u64 = 4;
/// Requests of each FIFO run.
const REQUESTS: u64 = 36;
/// Requests a second: about 1.5 times what a cap of 1 carries against the mocks below,
/// so a queue builds.
const RATE: f64 = 30.0;
/// Slack for a worker's own lateness in reaching the queue, ms: loopback and wake-ups
/// (a constant of these tests, never widened by what a run measured).
const SLACK_MS: f64 = 1.0;

/// A mock whose first token takes `ttft_ms` (no jitter) and whose answer is 4 quick
/// tokens, writing its truth to `truth`.
fn fixed_mock(truth: &Path, ttft_ms: f64) -> llmsurge::mock::MockServer {
    mock(MockConfig {
        truth: Some(truth.to_path_buf()),
        ttft_ms,
        itl_ms: 1.0,
        output_tokens: 4,
        ..MockConfig::instant()
    })
}

/// `bench` over [`WORKERS`] workers, with small requests (run by the intent tests'
/// [`run`]: a request log, a JSON report, the log joined with the mock's truth).
fn workers(bench: Bench) -> Bench {
    bench
        .workers(WORKERS as u32)
        .data("prompt_tokens=8,output_tokens=4")
}

fn at(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// A constant rate above what a cap of 1 (`cap_flag 1`) carries against a mock whose
/// first token takes `ttft_ms`, over 4 workers: the mock's arrival order (the cap's
/// admission order) follows the intended instants, and every worker sends.
///
/// A request admitted before one intended earlier jumped the queue, unless the earlier
/// one reached the queue only after the later one was due: its own lateness (its
/// dispatch lag, the queue time no cap explains) covers the gap.
fn admitted_in_intended_order(cap_flag: &str, ttft_ms: f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let server = fixed_mock(&truth, ttft_ms);
    let bench = Bench::on(&server)
        .constant(RATE)
        .max_requests(REQUESTS)
        .arg(cap_flag, 1);
    let Run {
        code,
        stderr,
        mut joined,
        ..
    } = run(server, &truth, workers(bench), true);
    // 3: the rate was not kept (the queue the cap made); never 4, the client's fault.
    assert!(matches!(code, 0 | 3), "exit {code}: {stderr}");
    assert_eq!(
        joined.len() as u64,
        REQUESTS,
        "every request reached the mock"
    );

    // The cap held: by the truth, the last requests arrived long after their intent.
    let worst = joined
        .iter()
        .map(|j| at(&j.truth, "arrival_time") - at(&j.log, "scheduled_time"))
        .fold(0.0, f64::max);
    assert!(worst > 0.2, "no queue built: worst {worst} s");

    // Every worker sent.
    for w in 0..WORKERS {
        let sent = joined
            .iter()
            .filter(|j| j.log["worker"].as_u64() == Some(w))
            .count();
        assert!(sent > 0, "worker {w} sent nothing of {REQUESTS}");
    }

    // Admission order (the mock's arrivals, one at a time under a cap of 1) against the
    // intended order.
    joined.sort_by(|a, b| at(&a.truth, "arrival_time").total_cmp(&at(&b.truth, "arrival_time")));
    // Instants in messages: ms from the first intended one.
    let t0 = joined
        .iter()
        .map(|j| at(&j.log, "scheduled_time"))
        .fold(f64::INFINITY, f64::min);
    let ms = |t: f64| (t - t0) * 1e3;
    let mut jumps = Vec::new();
    for (i, first) in joined.iter().enumerate() {
        let first_intended = at(&first.log, "scheduled_time");
        for later in &joined[i + 1..] {
            let intended = at(&later.log, "scheduled_time");
            if intended >= first_intended {
                continue;
            }
            // `later` was intended earlier; it reached the queue by its intended
            // instant plus its own lateness.
            let reached_by = intended + (at(&later.log, "dispatch_lag_ms") + SLACK_MS) / 1e3;
            if reached_by < first_intended {
                jumps.push(format!(
                    "slot {} (worker {}, intended {:.1} ms) went before slot {} (worker {}, \
                     intended {:.1} ms, queued by {:.1} ms)",
                    first.log["slot"],
                    first.log["worker"],
                    ms(first_intended),
                    later.log["slot"],
                    later.log["worker"],
                    ms(intended),
                    ms(reached_by),
                ));
            }
        }
    }
    assert!(
        jumps.is_empty(),
        "{} pairs admitted out of intended order, the first ones:\n{}",
        jumps.len(),
        jumps[..jumps.len().min(10)].join("\n")
    );
}

/// `--max-prefill-concurrency 1` over 4 workers, 30 requests/s against a 50 ms prefill
/// (the cap carries about 20 a second): admitted in intended order, every worker sends.
#[test]
fn the_prefill_cap_admits_in_intended_order_across_workers() {
    admitted_in_intended_order("--max-prefill-concurrency", 50.0);
}

/// `--max-concurrency 1` over 4 workers, 30 requests/s against a 40 ms first token and
/// 4 tokens (the cap carries about 22 a second): admitted in intended order, every
/// worker sends.
#[test]
fn the_concurrency_cap_admits_in_intended_order_across_workers() {
    admitted_in_intended_order("--max-concurrency", 40.0);
}

/// `--max-seconds` stops a run whose cap keeps a queue waiting (40 requests/s against a
/// cap of 1 that carries about 20): the stop cancels the waiters at once, none of them
/// holds up the others or the end, and the books balance against the mock's count.
#[test]
fn a_stop_with_requests_queued_for_a_cap_ends_promptly_and_the_books_balance() {
    const MAX_SECONDS: f64 = 1.5;
    for cap_flag in ["--max-prefill-concurrency", "--max-concurrency"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let truth = dir.path().join("truth.jsonl");
        let server = fixed_mock(&truth, 50.0);
        let bench = Bench::on(&server)
            .constant(40)
            .max_seconds(MAX_SECONDS)
            .arg(cap_flag, 1);
        let r = run(server, &truth, workers(bench), false);
        assert!(
            matches!(r.code, 0 | 3),
            "{cap_flag}: exit {}: {}",
            r.code,
            r.stderr
        );
        let b = &r.report["benchmarks"][0];
        let requests = &b["requests"];
        let count = |key: &str| {
            requests[key]
                .as_u64()
                .unwrap_or_else(|| panic!("{key}: {requests}"))
        };
        assert_eq!(
            count("created"),
            count("completed") + count("errored") + count("cancelled"),
            "{cap_flag}: {requests}"
        );
        assert_eq!(count("errored"), 0, "{cap_flag}: {requests}");
        assert_eq!(
            count("created"),
            r.log.len() as u64,
            "{cap_flag}: the log has every request"
        );
        // Requests still waiting for the cap when the stop came: cancelled unsent.
        let unsent = r
            .log
            .iter()
            .filter(|e| e["status"] == "cancelled" && e["start_time"].is_null())
            .count();
        assert!(
            unsent > 0,
            "{cap_flag}: no request was waiting at the stop: {requests}"
        );
        // The mock saw exactly the requests sent (one cut just after its send may not
        // have reached it).
        let sent = r.log.iter().filter(|e| !e["start_time"].is_null()).count() as u64;
        let completed = count("completed");
        assert!(
            (completed..=sent).contains(&r.stats.requests.chat_completions),
            "{cap_flag}: the mock saw {} requests; {sent} sent, {completed} completed",
            r.stats.requests.chat_completions
        );
        // Promptly: the benchmark ended within a second of its limit.
        let took = b["end_time"].as_f64().expect("end_time")
            - b["start_time"].as_f64().expect("start_time");
        assert!(
            took < MAX_SECONDS + 1.0,
            "{cap_flag}: the benchmark took {took} s for a {MAX_SECONDS} s limit"
        );
    }
}
