//! The request log's client queue time by cause (issue 36): for every request,
//! `queue_ms` is the sum of its parts (`concurrency_wait_ms`, `prefill_wait_ms`,
//! `dispatch_lag_ms`), a request never sent included (the cap still holding it at the
//! stop held it to the end); a request no cap held has no wait for it (absent, not 0);
//! and the report's `client.queue` counts the same waits. Which requests were never
//! sent is checked against the mock's `--truth`: none of them reached it.

use crate::scenario::Bench;
use crate::support::{mock, recorded};
use llmsurge::mock::MockConfig;
use serde_json::Value;
use std::collections::HashSet;

/// 1 µs, in ms: the parts are cut from one span, so only float rounding separates them.
const SUM_MS: f64 = 1e-3;

fn ms(v: &Value, key: &str) -> Option<f64> {
    v[key].as_f64()
}

/// HDR histograms keep 3 significant digits; values are recorded in whole µs.
fn hdr_close(report: f64, exact: f64) -> bool {
    (report - exact).abs() <= exact.abs() * 1e-3 + 0.002
}

/// 40 requests/s against a 50 ms prefill under `--max-prefill-concurrency 1` (about
/// 20/s get through) and `--max-concurrency 3`, stopped after 1.5 s: at the stop one
/// request is in its prefill, two hold a concurrency slot waiting for the prefill cap,
/// and the rest wait for the concurrency cap. Those never sent are cancelled.
#[test]
fn queue_time_is_the_sum_of_its_causes_for_every_request_sent_or_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let server = mock(MockConfig {
        truth: Some(truth.clone()),
        ttft_ms: 50.0,
        itl_ms: 1.0,
        output_tokens: 4,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .constant(40)
        .max_seconds("1.5s")
        .max_concurrency(3)
        .arg("--max-prefill-concurrency", 1)
        .data("prompt_tokens=8,output_tokens=4")
        .request_log("requests.jsonl")
        .outputs("json,csv,html")
        .flag("--disable-progress")
        .run();
    server.stop();
    // 3: the cap built a backlog the kept-up rule sees; never 4 (a cap is no fault).
    assert!(matches!(run.code(), 0 | 3), "{}", run.stderr);
    let log = recorded(&run.dir.path().join("requests.jsonl"));
    let sent = |e: &&Value| !e["start_time"].is_null();

    // The truth: every request the mock saw is logged as sent; none logged as never
    // sent reached it.
    let reached: HashSet<String> = recorded(&truth)
        .iter()
        .filter_map(|t| t["request_id"].as_str().map(String::from))
        .collect();
    let id = |e: &Value| e["request_id"].as_str().expect("a request id").to_string();
    let logged_sent: HashSet<String> = log.iter().filter(sent).map(id).collect();
    assert!(
        reached.is_subset(&logged_sent),
        "the mock saw requests not logged as sent"
    );
    let never_sent: Vec<&Value> = log.iter().filter(|e| !sent(e)).collect();
    for e in &never_sent {
        assert!(
            !reached.contains(&id(e)),
            "never sent, yet the mock saw it: {e}"
        );
        assert_eq!(e["status"], "cancelled", "{e}");
    }
    let held = |key: &str| never_sent.iter().filter(|e| ms(e, key).is_some()).count();
    assert!(
        held("prefill_wait_ms") >= 1 && held("concurrency_wait_ms") >= 1,
        "the stop found no request waiting for each cap: {} never sent",
        never_sent.len()
    );

    for e in &log {
        let queue = ms(e, "queue_ms").unwrap_or_else(|| panic!("no queue_ms: {e}"));
        let parts: f64 = ["concurrency_wait_ms", "prefill_wait_ms", "dispatch_lag_ms"]
            .iter()
            .filter_map(|k| ms(e, k))
            .sum();
        assert!(
            (parts - queue).abs() < SUM_MS,
            "queue_ms {queue} vs its parts {parts} ({} ms apart): {e}",
            queue - parts
        );
        // Present only where the cap held it, as the concurrency cap's.
        for key in ["concurrency_wait_ms", "prefill_wait_ms"] {
            assert!(ms(e, key).is_none_or(|w| w > 0.0), "{key}: {e}");
        }
    }
    // The first request found the prefill cap free.
    assert!(
        log.iter()
            .any(|e| sent(&e) && e.get("prefill_wait_ms").is_none()),
        "every request sent waited for the prefill cap"
    );

    // The report's waits per cause are the log's.
    let report: Value =
        serde_json::from_slice(&std::fs::read(run.report_path()).expect("the report"))
            .expect("JSON");
    let queue = &report["benchmarks"][0]["client"]["queue"];
    let measured: Vec<&Value> = log.iter().filter(|e| e["phase"] == "measured").collect();
    for (key, cause, sent_only) in [
        ("concurrency_wait_ms", "concurrency_cap", false),
        ("prefill_wait_ms", "prefill_cap", false),
        // The report's busy client is over the requests sent.
        ("dispatch_lag_ms", "busy_worker", true),
    ] {
        let values: Vec<f64> = measured
            .iter()
            .filter(|e| !sent_only || sent(e))
            .filter_map(|e| ms(e, key))
            .collect();
        let d = &queue[cause];
        assert_eq!(
            d["count"].as_u64(),
            Some(values.len() as u64),
            "{cause}: {d}"
        );
        let max = values.iter().copied().fold(0.0, f64::max);
        let reported = d["max"].as_f64().unwrap_or(0.0);
        assert!(
            hdr_close(reported, max),
            "{cause} max {reported} vs the log's {max}"
        );
    }

    // The CSV has TTFT and e2e from intent beside their from-send twins, as the JSON.
    let csv = run.csv_first_row();
    let b = &report["benchmarks"][0]["metrics"];
    for (twin, metric) in [
        ("ttft", "ttft_from_intent"),
        ("request_latency", "request_latency_from_intent"),
    ] {
        let group = |m: &str| {
            let prefix = format!("{m}_ms.");
            let at = csv.header.iter().position(|h| h.starts_with(&prefix));
            let len = csv.header.iter().filter(|h| h.starts_with(&prefix)).count();
            (at.unwrap_or_else(|| panic!("no {m} columns")), len)
        };
        let ((twin_at, twin_len), (at, _)) = (group(twin), group(metric));
        assert_eq!(at, twin_at + twin_len, "{metric} right after {twin}");
        for p in ["p50", "p99"] {
            let cell = |m: &str| -> f64 {
                let name = format!("{m}_ms.successful.{p}");
                csv.cell(&name).parse().unwrap_or_else(|_| panic!("{name}"))
            };
            let (from_intent, from_send) = (cell(metric), cell(twin));
            let json = b[metric]["successful"]["percentiles"][p].as_f64();
            assert_eq!(Some(from_intent), json, "{metric} {p}");
            assert!(
                from_intent >= from_send,
                "{metric} {p} {from_intent} below from send {from_send}"
            );
        }
    }

    // The page's client queue table: a row per cause, with the log's counts.
    let html = std::fs::read_to_string(run.dir.path().join("benchmarks.html")).expect("html");
    let section = html
        .split("<section id=\"client-queue\">")
        .nth(1)
        .and_then(|s| s.split("</section>").next())
        .expect("a client queue section");
    for (cause, key) in [
        ("concurrency cap", "concurrency_wait_ms"),
        ("prefill cap", "prefill_wait_ms"),
    ] {
        let count = measured.iter().filter(|e| ms(e, key).is_some()).count();
        assert!(
            section.contains(&format!("<td>{cause}</td><td>{count}</td>")),
            "{cause}: {count} held; {section}"
        );
    }
}
