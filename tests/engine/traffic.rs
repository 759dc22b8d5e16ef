//! Real traffic: the mock's `--record` of what a client sent, trace replay in every
//! format (Mooncake, BurstGPT, Azure, generic JSONL), and the standard datasets by name.
//! Files are generated here, in each format.

use crate::support::{mock, ok_report, run};
use llmsurge::mock::MockConfig;
use std::path::Path;

/// The lines of a `--record` file, parsed.
fn recorded(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("the record file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

#[test]
fn the_mock_records_each_request_body_up_to_its_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("record.jsonl");
    let server = mock(MockConfig {
        record: Some(path.clone()),
        record_limit: 12,
        ..MockConfig::instant()
    });
    let finished = run(&[
        "--target",
        &server.base_url(),
        "--profile",
        "synchronous",
        "--data",
        "prompt_tokens=24,output_tokens=3",
        "--max-requests",
        "20",
    ]);
    ok_report(&finished);
    let lines = recorded(&path);
    assert_eq!(lines.len(), 12, "bounded by --record-limit");
    let mut last = 0;
    for l in &lines {
        assert_eq!(l["endpoint"], "/v1/chat/completions");
        assert_eq!(l["model"], l["body"]["model"]);
        assert_eq!(l["body"]["max_tokens"], 3, "{l}");
        assert!(l["body"]["messages"][0]["content"].is_string(), "{l}");
        let at = l["arrival_ns"].as_u64().expect("arrival_ns");
        assert!(at >= last, "arrivals in order");
        last = at;
    }
    let stats = server.stats();
    let record = stats.record.expect("/stats says what --record did");
    assert_eq!(
        (record.lines, record.skipped, record.stopped, record.limit),
        (12, 8, true, 12),
        "{record:?}"
    );
}
