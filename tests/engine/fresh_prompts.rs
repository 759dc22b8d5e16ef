//! Issue 27 §1: a server's prefix cache is never flattered by accident. By default each
//! run draws a fresh seed and each benchmark its own streams, and the pre-run probe sends
//! prompts of its own; `--random-seed N` repeats a run's prompts exactly. Counted by the
//! mock's prefix-cache model (`/stats`), which the probe shares as a real server would.

use crate::scenario::Bench;
use crate::support::{llmsurge, mock, ok_report, recorded};
use llmsurge::mock::MockConfig;
use std::collections::HashSet;

/// Three rate benchmarks of a few requests each.
fn three_benchmarks(url: &str) -> Bench {
    Bench::target(url)
        .constant("10,20,40")
        .max_requests(6)
        .data("prompt_tokens=64,output_tokens=2")
        .outputs("json")
}

#[test]
fn two_default_runs_of_three_benchmarks_hit_no_prefix_the_mock_cached() {
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    let first = three_benchmarks(&url).ok_report();
    let second = three_benchmarks(&url).ok_report();
    assert_eq!(first.benchmarks.len(), 3);
    assert_ne!(
        first.args["seed"], second.args["seed"],
        "each run draws its own seed, kept in the report"
    );
    let stats = server.stats();
    let sent: u64 = [&first, &second]
        .iter()
        .flat_map(|r| &r.benchmarks)
        .map(|b| b.requests.created)
        .sum();
    assert_eq!(
        stats.requests.chat_completions, sent,
        "the probe is not counted"
    );
    assert_eq!(stats.prefix_cache_queries, stats.prompt_tokens, "{stats:?}");
    assert!(stats.prompt_tokens >= sent * 32, "{stats:?}");
    // The workload shares no prefix: any hit is a prompt sent before (by an earlier
    // benchmark, the earlier run or the probe).
    assert_eq!(stats.prefix_cache_hits, 0, "{stats:?}");
}

#[test]
fn the_probe_warms_no_row_of_a_dataset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rows.jsonl");
    // Distinct from the first word on, and several cache blocks long.
    let rows: String = (0..6)
        .map(|i| {
            let words: Vec<String> = (0..60).map(|w| format!("row{i}word{w}")).collect();
            format!("{}\n", serde_json::json!({ "prompt": words.join(" ") }))
        })
        .collect();
    std::fs::write(&path, rows).expect("write");
    let server = mock(MockConfig::instant());
    let report = ok_report(
        &Bench::on(&server)
            .constant(20)
            .data(&path.display().to_string())
            .arg("--data-args", r#"{"output_tokens": 2}"#)
            .outputs("json")
            .run(),
    );
    assert_eq!(report.benchmarks[0].requests.completed, 6);
    let stats = server.stats();
    assert_eq!(stats.prefix_cache_queries, stats.prompt_tokens, "{stats:?}");
    assert!(stats.prompt_tokens >= 6 * 60, "{stats:?}");
    assert_eq!(stats.prefix_cache_hits, 0, "{stats:?}");
}

/// The user messages the mock recorded, in arrival order.
fn recorded_prompts(path: &std::path::Path) -> Vec<String> {
    recorded(path)
        .iter()
        .map(|r| r["body"]["messages"].to_string())
        .collect()
}

#[test]
fn the_same_random_seed_sends_the_same_prompts_and_each_benchmark_its_own() {
    let record = |seed: u64| {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sent.jsonl");
        let server = mock(MockConfig {
            record: Some(path.clone()),
            ..MockConfig::instant()
        });
        let report = three_benchmarks(&server.base_url()).seed(seed).ok_report();
        assert_eq!(report.args["seed"], seed);
        drop(server);
        recorded_prompts(&path)
    };
    let (a, b, c) = (record(7), record(7), record(8));
    assert_eq!(a.len(), 18);
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    assert_eq!(sorted(&a), sorted(&b), "--random-seed 7 twice");
    assert_ne!(sorted(&a), sorted(&c), "another seed");
    let distinct: HashSet<&String> = a.iter().collect();
    assert_eq!(
        distinct.len(),
        a.len(),
        "no prompt repeats across benchmarks"
    );
}

#[test]
fn a_split_load_needs_a_shared_seed() {
    let out = llmsurge()
        .args([
            "benchmark",
            "run",
            "--dry-run",
            "--profile",
            "constant",
            "--rate",
            "5",
            "--shard",
            "2/3",
        ])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: --shard 2/3: "), "{stderr}");
    assert!(stderr.contains("--random-seed"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
