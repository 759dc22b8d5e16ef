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

/// The prompt text of a recorded chat request.
fn prompt_of(line: &serde_json::Value) -> &str {
    line["body"]["messages"][0]["content"]
        .as_str()
        .expect("a chat prompt")
}

fn write_lines(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.join("\n") + "\n").expect("write the trace");
}

/// Runs a replay of `data` against `server` with extra `args`.
fn replay(
    server: &llmsurge::mock::MockServer,
    data: &Path,
    args: &[&str],
) -> crate::support::Finished {
    let data = data.display().to_string();
    let base = server.base_url();
    let mut all = vec!["--target", &base, "--profile", "replay", "--data", &data];
    all.extend_from_slice(args);
    run(&all)
}

/// The hash ids of Mooncake request `i` with `blocks` blocks: a prefix tree, so an id
/// always sits at the same position (as Mooncake's rolling hashes do): 4 roots, 3
/// children each, then blocks of the request's own. The last block is partial and
/// always the request's own (Mooncake hashes a partial block by its content).
fn mooncake_ids(i: u64, blocks: u64) -> Vec<u64> {
    (0..blocks)
        .map(|k| match k {
            0 => i % 4,
            1 if k + 1 < blocks => 100 + (i % 4) * 3 + (i / 4) % 3,
            _ => 1_000 + i * 16 + k,
        })
        .collect()
}

#[test]
fn a_mooncake_trace_replays_on_time_and_shares_blocks_exactly_where_hash_ids_repeat() {
    const N: u64 = 1_000;
    const BLOCK: usize = 32;
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("mooncake.jsonl");
    let record = dir.path().join("record.jsonl");
    // 1,000 requests over 100 s of trace time (gaps 60 to 140 ms), replayed at 0.02:
    // about 2 s, 500 requests/s. 2 to 4 blocks each, the last one partial.
    let mut t = 0u64;
    let mut rows = Vec::new();
    let mut expected = Vec::new();
    for i in 0..N {
        let blocks = 2 + i % 3;
        let input = blocks as usize * BLOCK - (i % 7) as usize;
        let ids = mooncake_ids(i, blocks);
        rows.push(
            serde_json::json!({
                "timestamp": t, "input_length": input, "output_length": 2 + i % 5, "hash_ids": ids
            })
            .to_string(),
        );
        expected.push((input, 2 + i % 5, ids));
        t += 60 + (i * 37) % 81;
    }
    write_lines(&trace, &rows);
    let server = mock(MockConfig {
        record: Some(record.clone()),
        ..MockConfig::instant()
    });
    let finished = replay(
        &server,
        &trace,
        &["--time-scale", "0.02", "--trace-block-size", "32"],
    );
    let report = ok_report(&finished);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, N);
    let lines = recorded(&record);
    assert_eq!(lines.len() as u64, N);
    let bpe = tiktoken_rs::cl100k_base().expect("cl100k");
    // Recorded in arrival order; match each to its row by content of its own blocks.
    let mut by_id: std::collections::HashMap<u64, Vec<u32>> = std::collections::HashMap::new();
    let mut by_block: std::collections::HashMap<Vec<u32>, u64> = std::collections::HashMap::new();
    let mut seen = vec![false; N as usize];
    for l in &lines {
        let tokens = bpe.encode_ordinary(prompt_of(l));
        let max_tokens = l["body"]["max_tokens"].as_u64().expect("max_tokens");
        // The row: the only one whose length, output and first two blocks fit.
        let i = expected
            .iter()
            .enumerate()
            .position(|(i, (input, out, ids))| {
                !seen[i]
                    && *input == tokens.len()
                    && *out == max_tokens
                    && by_id.get(&ids[0]).is_none_or(|b| b[..] == tokens[..BLOCK])
                    && by_id
                        .get(&ids[1])
                        .is_none_or(|b| b[..] == tokens[BLOCK..(2 * BLOCK).min(tokens.len())])
            })
            .expect("every request is a row of the trace, with its exact length");
        seen[i] = true;
        let (_, _, ids) = &expected[i];
        for (k, id) in ids.iter().enumerate() {
            let block = tokens[k * BLOCK..((k + 1) * BLOCK).min(tokens.len())].to_vec();
            let first = by_id.entry(*id).or_insert_with(|| block.clone());
            assert_eq!(*first, block, "hash id {id} is one token block everywhere");
            let owner = by_block.entry(block).or_insert(*id);
            assert_eq!(*owner, *id, "different hash ids never share a block");
        }
    }
    assert!(seen.iter().all(|&s| s));
    // Every id of the trace was seen, each as one block.
    let ids: std::collections::HashSet<u64> = expected
        .iter()
        .flat_map(|(_, _, ids)| ids.iter().copied())
        .collect();
    assert_eq!(by_id.len(), ids.len());
    // Last, so a loaded machine's lag does not hide a wrong block.
    assert!(
        b.client.dispatch_lag_p99_ms < 1.0,
        "dispatch lag p99 {} ms",
        b.client.dispatch_lag_p99_ms
    );
}
