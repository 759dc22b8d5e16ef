//! Agentic traffic (issue 24): clients that give up (`--cancel`), checked against what
//! the mock saw.

use crate::scenario::Bench;
use crate::support::{mock, usage_error};
use llmsurge::mock::{MockConfig, MockServer};
use llmsurge::report::Report;
use std::time::{Duration, Instant};

/// Waits (bounded) until the mock has counted `n` client disconnects: it notices a
/// closed connection at its next write, shortly after the client's run ended.
fn wait_disconnects(server: &MockServer, n: u64) -> llmsurge::mock::MockStats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = server.stats();
        if stats.flow.disconnects.total() >= n || Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn planned(report: &Report) -> u64 {
    report.benchmarks[0].requests.cancelled_planned
}

#[test]
fn a_planned_share_of_clients_give_up_and_the_mock_counts_each_disconnect() {
    // Requests of ~220 ms (20 ms to the first token, 20 tokens 10 ms apart): a cancel
    // 50 ms after the send always comes before the end.
    let server = mock(MockConfig {
        ttft_ms: 20.0,
        itl_ms: 10.0,
        output_tokens: 20,
        ..MockConfig::instant()
    });
    let report = Bench::on(&server)
        .concurrent(20)
        .workers(2)
        .seed(7)
        .data("prompt_tokens=16,output_tokens=20")
        .max_requests(200)
        .arg("--cancel", "share=30%,after=50ms")
        .ok_report();
    let b = &report.benchmarks[0];
    let cancelled = planned(&report);
    assert!(
        (48..=72).contains(&cancelled),
        "{cancelled} of 200 requests given up at share=30%"
    );
    // Nothing else cancelled them: the run ran to its limit.
    assert_eq!(b.requests.cancelled, cancelled);
    assert_eq!(b.requests.completed + cancelled, 200);
    let stats = wait_disconnects(&server, cancelled);
    assert_eq!(
        stats.flow.disconnects.total(),
        cancelled,
        "the mock's disconnects against the report's planned cancellations: {:?}",
        stats.flow.disconnects
    );
    assert_eq!(stats.cancelled, cancelled);
    assert_eq!(stats.completed, 200 - cancelled);
    // A cancel 50 ms after the send comes after the first token (20 ms) at the mock.
    assert!(stats.flow.disconnects.decoding > 0, "{:?}", stats.flow);
}

#[test]
fn the_same_seed_gives_up_on_the_same_requests_whatever_the_workers() {
    let server = mock(MockConfig {
        ttft_ms: 20.0,
        itl_ms: 10.0,
        output_tokens: 10,
        ..MockConfig::instant()
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let cancelled_slots = |workers: u32| {
        let log = dir.path().join(format!("log-{workers}.jsonl"));
        Bench::on(&server)
            .concurrent(4)
            .workers(workers)
            .seed(11)
            .data("prompt_tokens=16,output_tokens=10")
            .max_requests(40)
            .arg("--cancel", "share=50%,after=40ms")
            .request_log(log.to_str().expect("utf-8 path"))
            .ok_report();
        let mut slots: Vec<u64> = crate::support::recorded(&log)
            .into_iter()
            .filter(|r| r["status"] == "cancelled")
            .map(|r| {
                assert_eq!(r["error_kind"], "planned", "{r}");
                // Its latency up to the cancel: a lower bound of what it would have had.
                let latency = r["latency_ms"].as_f64().expect("sent, so a latency");
                assert!(latency >= 40.0, "{r}");
                r["slot"].as_u64().expect("a slot")
            })
            .collect();
        slots.sort_unstable();
        slots
    };
    let one = cancelled_slots(1);
    assert!(!one.is_empty() && one.len() < 40, "{one:?}");
    assert_eq!(one, cancelled_slots(2));
}

#[test]
fn a_cancel_after_the_first_token_leaves_while_decoding() {
    // 50 ms to the first token, then 20 tokens 20 ms apart: a cancel 30 ms after the
    // first token finds every request decoding.
    let server = mock(MockConfig {
        ttft_ms: 50.0,
        itl_ms: 20.0,
        output_tokens: 20,
        ..MockConfig::instant()
    });
    let report = Bench::on(&server)
        .concurrent(4)
        .seed(3)
        .data("prompt_tokens=16,output_tokens=20")
        .max_requests(12)
        .arg("--cancel", "share=50%,after=ttft+30ms")
        .ok_report();
    let cancelled = planned(&report);
    assert!((1..12).contains(&cancelled), "{cancelled} of 12 given up");
    let stats = wait_disconnects(&server, cancelled);
    assert_eq!(
        stats.flow.disconnects.decoding, cancelled,
        "{:?}",
        stats.flow
    );
    assert_eq!(stats.flow.disconnects.total(), cancelled);
}

#[test]
fn a_bad_cancel_spec_is_a_usage_error_naming_the_flag() {
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server)
        .max_requests(1)
        .arg("--cancel", "share=30%")
        .run();
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(run.stderr.contains("--cancel"), "{}", run.stderr);
}

/// A cancel timed from the first token, on replies that come in one body, would never
/// fire: the run refuses it up front rather than report no planned cancel.
#[test]
fn a_cancel_from_the_first_token_without_streaming_is_a_usage_error() {
    let server = mock(MockConfig::instant());
    let spec = "share=50%,after=ttft+10ms";
    for extra in [
        &["--stream", "false"][..],
        &["--request-format", "embeddings"][..],
    ] {
        let mut bench = Bench::on(&server).max_requests(1).arg("--cancel", spec);
        for pair in extra.chunks(2) {
            bench = bench.arg(pair[0], pair[1]);
        }
        let line = usage_error(&bench.run()).to_string();
        assert!(
            line.contains("--cancel") && line.contains("not streamed"),
            "{extra:?}: {line}"
        );
    }
    assert_eq!(server.stats().requests_total, 0, "nothing was sent");
    // Streamed, the same plan runs.
    let report = Bench::on(&server)
        .max_requests(2)
        .arg("--cancel", spec)
        .ok_report();
    assert_eq!(report.benchmarks[0].requests.created, 2);
}

#[test]
fn the_prefill_cap_holds_at_the_mock_while_decoding_runs_wider() {
    // 200 ms to the first token, then 40 tokens 10 ms apart: 8 streams would put 8
    // requests in prefill at once; the cap lets 2 in, and each decodes for 400 ms after.
    let server = mock(MockConfig {
        ttft_ms: 200.0,
        itl_ms: 10.0,
        output_tokens: 40,
        ..MockConfig::instant()
    });
    let report = Bench::on(&server)
        .concurrent(8)
        .workers(2)
        .data("prompt_tokens=16,output_tokens=40")
        .max_requests(16)
        .arg("--max-prefill-concurrency", 2)
        .ok_report();
    let stats = server.stats();
    assert_eq!(stats.completed, 16);
    assert!(
        stats.flow.peak_before_first_token <= 2,
        "the mock saw {} requests before their first token at once",
        stats.flow.peak_before_first_token
    );
    assert!(
        stats.flow.peak_decoding > 2,
        "decoding was capped too: peak {}",
        stats.flow.peak_decoding
    );
    let waits = report.benchmarks[0]
        .client
        .prefill_wait
        .expect("the report has the waits for the cap");
    assert_eq!((waits.cap, waits.requests), (2, 16));
    // 8 streams through 2 places of 200 ms: most of them waited.
    assert!(waits.waited >= 6, "{waits:?}");
    assert!(waits.max_ms >= 150.0, "{waits:?}");
}

#[test]
fn prompts_as_token_ids_reach_the_mock_as_exactly_those_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (truth, record) = (
        dir.path().join("truth.jsonl"),
        dir.path().join("record.jsonl"),
    );
    let server = mock(MockConfig {
        truth: Some(truth.clone()),
        record: Some(record.clone()),
        record_header: vec!["x-request-id".into()],
        ..MockConfig::instant()
    });
    let log = dir.path().join("requests.jsonl");
    Bench::on(&server)
        .format("completions")
        .concurrent(2)
        .data("prompt_tokens=60,prompt_tokens_stdev=20,output_tokens=4")
        .max_requests(12)
        .request_log(log.to_str().expect("utf-8 path"))
        .flag("--prompt-token-ids")
        .ok_report();
    // Stopping flushes both files.
    server.stop();
    let counted: std::collections::HashMap<String, u64> = crate::support::recorded(&truth)
        .into_iter()
        .map(|t| {
            let id = t["request_id"].as_str().expect("an id").to_string();
            (id, t["prompt_tokens"].as_u64().expect("a prompt count"))
        })
        .collect();
    let sent: std::collections::HashMap<String, u64> = crate::support::recorded(&log)
        .into_iter()
        .map(|r| {
            let id = r["request_id"].as_str().expect("an id").to_string();
            (id, r["prompt_tokens"].as_u64().expect("a prompt count"))
        })
        .collect();
    let bodies = crate::support::recorded(&record);
    assert_eq!(bodies.len(), 12);
    let mut lengths = std::collections::BTreeSet::new();
    for line in bodies {
        let id = line["headers"]["x-request-id"]
            .as_str()
            .expect("the recorded id");
        let ids = line["body"]["prompt"]
            .as_array()
            .unwrap_or_else(|| panic!("the prompt is not a list of ids: {line}"));
        assert!(ids.iter().all(|v| v.is_u64()), "{line}");
        let n = ids.len() as u64;
        lengths.insert(n);
        assert_eq!(counted[id], n, "the mock counted the ids it got");
        assert_eq!(sent[id], n, "the client logged the count it sent");
    }
    assert!(lengths.len() > 1, "the lengths vary: {lengths:?}");
}

#[test]
fn prompt_token_ids_need_the_completions_format() {
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server)
        .max_requests(1)
        .flag("--prompt-token-ids")
        .run();
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(run.stderr.contains("--prompt-token-ids"), "{}", run.stderr);
}
