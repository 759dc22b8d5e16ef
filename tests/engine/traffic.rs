//! Real traffic: the mock's `--record` of what a client sent, trace replay in every
//! format (Mooncake, BurstGPT, Azure, generic JSONL), and the standard datasets by name.
//! Files are generated here, in each format.

use crate::scenario::{Bench, Options};
use crate::support::{mock, ok_report, recorded, recording};
use llmsurge::mock::MockConfig;
use std::path::Path;

#[test]
fn the_mock_records_each_request_body_up_to_its_limit() {
    let (server, _dir, path) = recording(MockConfig {
        record_limit: 12,
        ..MockConfig::instant()
    });
    let finished = Bench::on(&server)
        .synchronous()
        .data("prompt_tokens=24,output_tokens=3")
        .max_requests(20)
        .run();
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

#[test]
fn the_mock_records_every_model_endpoint_with_its_own_body() {
    // (format, data, endpoint, a key only that API's body has, its expected JSON type)
    let cases = [
        (
            "completions",
            "prompt_tokens=8,output_tokens=2",
            "/v1/completions",
            "prompt",
            "string",
        ),
        (
            "responses",
            "prompt_tokens=8,output_tokens=2",
            "/v1/responses",
            "input",
            "",
        ),
        (
            "anthropic",
            "prompt_tokens=8,output_tokens=2",
            "/v1/messages",
            "messages",
            "array",
        ),
        (
            "embeddings",
            "prompt_tokens=8,batch_size=2",
            "/v1/embeddings",
            "input",
            "array",
        ),
        (
            "rerank",
            "prompt_tokens=8,documents=2",
            "/v1/rerank",
            "documents",
            "array",
        ),
        (
            "score",
            "prompt_tokens=8,documents=2",
            "/v1/score",
            "text_2",
            "array",
        ),
    ];
    for (format, data, endpoint, key, kind) in cases {
        let (server, _dir, path) = recording(MockConfig::instant());
        let finished = Bench::on(&server)
            .format(format)
            .synchronous()
            .data(data)
            .max_requests(3)
            .run();
        ok_report(&finished);
        let lines = recorded(&path);
        assert_eq!(lines.len(), 3, "{format}: one line per request");
        for l in &lines {
            assert_eq!(l["endpoint"], endpoint, "{format}: {l}");
            assert_eq!(l["model"], l["body"]["model"], "{format}");
            let value = &l["body"][key];
            let ok = match kind {
                "string" => value.is_string(),
                "array" => value.as_array().is_some_and(|a| !a.is_empty()),
                _ => !value.is_null(),
            };
            assert!(ok, "{format}: body.{key} in {l}");
        }
        let record = server.stats().record.expect("record stats");
        assert_eq!((record.lines, record.skipped), (3, 0), "{format}");
    }
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

/// A replay of `data` against `server`.
fn replay(server: &llmsurge::mock::MockServer, data: &Path) -> Bench {
    Bench::on(server)
        .profile("replay")
        .data(&data.display().to_string())
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
    // 1,000 requests over 200 s of trace time (gaps 120 to 280 ms, uneven), replayed at
    // 0.02: about 4 s, 250 requests/s on average (the mock shares the test's cores).
    // 2 to 4 blocks each, the last one partial.
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
        t += 120 + (i * 37) % 161;
    }
    write_lines(&trace, &rows);
    let server = mock(MockConfig {
        record: Some(record.clone()),
        ..MockConfig::instant()
    });
    let finished = replay(&server, &trace)
        .arg("--time-scale", "0.02")
        .arg("--trace-block-size", 32)
        .request_log("requests.jsonl")
        .run();
    let report = ok_report(&finished);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, N);
    // On time: slot i is due at row i's timestamp times 0.02, exactly (the instants the
    // client computed, not measured), and none went out before it was due; every send's
    // dispatch lag is in the report. How late they went out is the machine's business:
    // scripts/bench-timing.sh prints that figure (p99 target 1 ms) on a quiet machine.
    let schedule = schedule_of(&finished.dir.path().join("requests.jsonl"));
    assert_eq!(schedule.len() as u64, N);
    let mut trace_ms = 0u64;
    for (i, (slot, at, _, _)) in schedule.iter().enumerate() {
        assert_eq!(*slot, i as u64);
        assert!(
            (at - trace_ms as f64 * 0.02).abs() < 0.01,
            "slot {slot}: scheduled at {at} ms, trace says {}",
            trace_ms as f64 * 0.02
        );
        trace_ms += 120 + (i as u64 * 37) % 161;
    }
    for e in super::sessions::read_log(&finished.dir.path().join("requests.jsonl")) {
        let lag = e.dispatch_lag_ms.expect("every request was sent");
        assert!(lag >= 0.0, "slot {} sent {lag} ms early", e.slot);
    }
    assert_eq!(b.metrics["dispatch_lag"].successful.count, N);
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
}

/// (slot, scheduled offset from slot 0 in ms, prompt tokens as the server counted them,
/// worker) of a request log.
fn schedule_of(path: &Path) -> Vec<(u64, f64, Option<u32>, u32)> {
    let mut rows: Vec<(u64, f64, Option<u32>, u32)> = std::fs::read_to_string(path)
        .expect("the request log")
        .lines()
        .map(|l| {
            let e: llmsurge::report::RequestEntry = serde_json::from_str(l).expect("an entry");
            (e.slot, e.scheduled_time, e.prompt_tokens, e.worker)
        })
        .collect();
    rows.sort_by_key(|r| r.0);
    let first = rows.first().map_or(0.0, |r| r.1);
    for r in &mut rows {
        r.1 = (r.1 - first) * 1e3;
    }
    rows
}

/// A BurstGPT CSV: 3 models, a failed request (0 response tokens), 1 s gaps.
fn burstgpt_csv(path: &Path) {
    let mut lines =
        vec!["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type".to_string()];
    for i in 0..30u32 {
        let model = ["ChatGPT", "GPT-4", "ChatGPT"][i as usize % 3];
        let response = if i == 7 { 0 } else { 1 + i % 4 };
        lines.push(format!(
            "{},{model},{},{response},{},Conversation log",
            100 + i,
            20 + i,
            20 + i + response
        ));
    }
    write_lines(path, &lines);
}

#[test]
fn every_trace_reader_replays_its_sample_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bpe = tiktoken_rs::cl100k_base().expect("cl100k");
    // BurstGPT: the ChatGPT rows after --trace-start 3s, without the failed one.
    let burst = dir.path().join("burstgpt.csv");
    burstgpt_csv(&burst);
    // Azure: datetimes with 7 fractional digits, 0.25 s apart.
    let azure = dir.path().join("azure.csv");
    let mut lines = vec!["TIMESTAMP,ContextTokens,GeneratedTokens".to_string()];
    for i in 0..12u32 {
        let ms = 100 + 250 * i;
        lines.push(format!(
            "2023-11-16 18:15:{:02}.{:03}0000,{},{}",
            46 + ms / 1000,
            ms % 1000,
            30 + 3 * i,
            2 + i % 3
        ));
    }
    write_lines(&azure, &lines);
    // Generic: prompts and a timestamp column in seconds.
    let generic = dir.path().join("generic.jsonl");
    let lines: Vec<String> = (0..10u32)
        .map(|i| {
            serde_json::json!({
                "timestamp": 5.0 + 0.3 * f64::from(i),
                "prompt": format!("Question number {i}: what is the colour of the sky?"),
                "output_tokens_count": 3 + i % 2
            })
            .to_string()
        })
        .collect();
    write_lines(&generic, &lines);
    // Mooncake without hash ids on some rows.
    let moon = dir.path().join("mooncake.jsonl");
    let lines: Vec<String> = (0..10u64)
        .map(|i| {
            let mut v = serde_json::json!({"timestamp": 1000 + 200 * i, "input_length": 40 + i, "output_length": 2});
            if i % 2 == 0 {
                v["hash_ids"] = serde_json::json!([7]);
            }
            v.to_string()
        })
        .collect();
    write_lines(&moon, &lines);

    // (file, extra args, expected (prompt tokens or None for text, max_tokens, offset ms))
    type Expect = Vec<(Option<usize>, u64, f64)>;
    let burst_rows: Expect = (0..30u32)
        .filter(|i| i % 3 != 1 && *i != 7 && *i >= 3)
        .map(|i| {
            (
                Some(20 + i as usize),
                u64::from(1 + i % 4),
                f64::from(i - 3) * 1e3,
            )
        })
        .collect();
    let azure_rows: Expect = (0..12u32)
        .map(|i| {
            (
                Some(30 + 3 * i as usize),
                u64::from(2 + i % 3),
                f64::from(250 * i),
            )
        })
        .collect();
    let generic_rows: Expect = (0..10u32)
        .map(|i| (None, u64::from(3 + i % 2), 300.0 * f64::from(i)))
        .collect();
    let moon_rows: Expect = (0..10u64)
        .map(|i| (Some(40 + i as usize), 2, 200.0 * i as f64))
        .collect();
    let moon_cut: Expect = moon_rows[..4].to_vec();
    let cases: [(&Path, Options, Expect); 5] = [
        (
            &burst,
            |b| b.arg("--trace-model", "ChatGPT").arg("--trace-start", "3s"),
            burst_rows,
        ),
        (&azure, |b| b, azure_rows),
        (&generic, |b| b, generic_rows),
        (&moon, |b| b, moon_rows),
        // --max-requests cuts a trace.
        (&moon, |b| b.max_requests(4), moon_cut),
    ];
    for (file, extra, expect) in cases {
        let record = dir.path().join("record.jsonl");
        let server = mock(MockConfig {
            record: Some(record.clone()),
            ..MockConfig::instant()
        });
        let finished = extra(
            replay(&server, file)
                .arg("--time-scale", "0.05")
                .request_log("requests.jsonl"),
        )
        .run();
        let report = ok_report(&finished);
        let name = file.display();
        assert_eq!(
            report.benchmarks[0].requests.completed,
            expect.len() as u64,
            "{name}"
        );
        // Scheduled at the trace's offsets times 0.05, in trace order.
        let schedule = schedule_of(&finished.dir.path().join("requests.jsonl"));
        assert_eq!(schedule.len(), expect.len(), "{name}");
        for ((slot, at, _, _), (_, _, want_at)) in schedule.iter().zip(&expect) {
            assert!(
                (at - want_at * 0.05).abs() < 0.01,
                "{name} slot {slot}: scheduled at {at} ms, trace says {}",
                want_at * 0.05
            );
        }
        // What the server got: exact lengths and the trace's output lengths, in order
        // (the rows are at least 10 ms apart after scaling).
        let lines = recorded(&record);
        assert_eq!(lines.len(), expect.len(), "{name}");
        for (l, (tokens, max_tokens, _)) in lines.iter().zip(&expect) {
            assert_eq!(
                l["body"]["max_tokens"].as_u64(),
                Some(*max_tokens),
                "{name}: {l}"
            );
            if let Some(n) = tokens {
                assert_eq!(bpe.encode_ordinary(prompt_of(l)).len(), *n, "{name}: {l}");
            }
        }
    }
}

#[test]
fn bad_traces_exit_2_with_one_line_naming_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = mock(MockConfig::instant());
    let m = |t: i64| {
        format!(
            "{{\"timestamp\": {t}, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}}"
        )
    };
    let cases: Vec<(&str, String, &str)> = vec![
        ("unsorted.jsonl", [m(0), m(50), m(20)].join("\n"), "line 3"),
        ("negative.jsonl", [m(0), m(-5)].join("\n"), "line 2"),
        (
            "missing.csv",
            "Timestamp,Model,Request tokens,Response tokens\n1,A,10,2\n2,A,,3\n".into(),
            "line 3",
        ),
        (
            "nocolumn.jsonl",
            [
                m(0),
                "{\"timestamp\": 5, \"input_length\": 10, \"hash_ids\": [1]}".into(),
            ]
            .join("\n"),
            "line 2",
        ),
        (
            "prompts.csv",
            "prompt,answer\nhello,world\n".into(),
            "--profile replay needs --data a trace",
        ),
    ];
    for (name, text, mention) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        let finished = replay(&server, &path).run();
        let stderr = finished.stderr.trim();
        assert_eq!(finished.code(), 2, "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: one line: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(mention),
            "{name}: {stderr}"
        );
        if mention.starts_with("line") {
            assert!(stderr.contains(name), "{name}: names the file: {stderr}");
        }
    }
    assert_eq!(
        server.stats().requests.chat_completions,
        0,
        "nothing was sent"
    );
}

#[test]
fn the_replay_schedule_does_not_depend_on_the_worker_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace.jsonl");
    // 40 requests 1 s apart in trace time with uneven gaps, at 0.02: 20 ms apart or more.
    let mut t = 0u64;
    let lines: Vec<String> = (0..40u64)
        .map(|i| {
            t += 1_000 + (i * 389) % 1_500;
            serde_json::json!({
                "timestamp": t, "input_length": 50 + (i * 17) % 90, "output_length": 2 + i % 3,
                "hash_ids": [i % 3]
            })
            .to_string()
        })
        .collect();
    write_lines(&trace, &lines);
    let mut runs = Vec::new();
    for workers in [1, 2] {
        let record = dir.path().join(format!("record-{workers}.jsonl"));
        let server = mock(MockConfig {
            record: Some(record.clone()),
            ..MockConfig::instant()
        });
        let finished = replay(&server, &trace)
            .arg("--time-scale", "0.02")
            .workers(workers)
            .request_log("requests.jsonl")
            // One seed for both runs: the block texts, so the prompts, are the same.
            .seed(3)
            .run();
        ok_report(&finished);
        let schedule = schedule_of(&finished.dir.path().join("requests.jsonl"));
        let bodies: Vec<(String, serde_json::Value)> = recorded(&record)
            .iter()
            .map(|l| (prompt_of(l).to_string(), l["body"]["max_tokens"].clone()))
            .collect();
        runs.push((schedule, bodies));
    }
    let (one, two) = (&runs[0], &runs[1]);
    assert!(
        two.0
            .iter()
            .map(|r| r.3)
            .collect::<std::collections::HashSet<_>>()
            .len()
            == 2,
        "both workers sent"
    );
    assert_eq!(one.0.len(), 40);
    for (a, b) in one.0.iter().zip(&two.0) {
        assert_eq!((a.0, a.2), (b.0, b.2), "same slot, same prompt length");
        assert!(
            (a.1 - b.1).abs() < 0.01,
            "slot {} at {} vs {} ms",
            a.0,
            a.1,
            b.1
        );
    }
    assert_eq!(one.1, two.1, "the same bodies in the same order");
}

/// Runs the benchmark `options` build (synchronous unless they say) against a
/// recording mock; the recorded lines.
fn recorded_run(options: impl FnOnce(Bench) -> Bench) -> Vec<serde_json::Value> {
    let (server, _dir, record) = recording(MockConfig::instant());
    options(Bench::on(&server)).ok_report();
    recorded(&record)
}

/// The `vllm bench serve` datasets, each through the llmsurge spec or reader that
/// docs/data.md maps it to.
#[test]
fn the_standard_datasets_run_from_their_documented_mappings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bpe = tiktoken_rs::cl100k_base().expect("cl100k");
    let tokens = |l: &serde_json::Value| bpe.encode_ordinary(prompt_of(l));
    let max_tokens = |l: &serde_json::Value| l["body"]["max_tokens"].as_u64().expect("max_tokens");

    // random, with its range ratio: lengths uniform in [mean(1-r), mean(1+r)].
    let lines = recorded_run(|b| {
        b.data("prompt_tokens=100,output_tokens=10,range_ratio=0.5")
            .max_requests(40)
    });
    assert_eq!(lines.len(), 40);
    let lens: std::collections::HashSet<usize> = lines.iter().map(|l| tokens(l).len()).collect();
    assert!(
        lens.iter().all(|n| (50..=150).contains(n)) && lens.len() > 10,
        "{lens:?}"
    );
    assert!(lines.iter().all(|l| (5..=15).contains(&max_tokens(l))));

    // prefix_repetition: 3 prefixes of 64 tokens, 32-token suffixes.
    let lines = recorded_run(|b| {
        b.data("prefix_tokens=64,prefix_count=3,prompt_tokens=96,output_tokens=4")
            .max_requests(12)
    });
    let prefixes: std::collections::HashSet<Vec<u32>> = lines
        .iter()
        .map(|l| {
            let t = tokens(l);
            assert_eq!(t.len(), 96);
            t[..64].to_vec()
        })
        .collect();
    assert_eq!(prefixes.len(), 3);

    // sonnet-style: a user text, a fixed prefix shared by every prompt.
    let sonnet = dir.path().join("sonnet.txt");
    std::fs::write(
        &sonnet,
        "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\nRough winds do shake the darling buds of May,\nAnd summer's lease hath all too short a date;\n".repeat(20),
    )
    .expect("write");
    let spec = format!(
        "source={},prefix_tokens=40,prompt_tokens=120,output_tokens=8",
        sonnet.display()
    );
    let lines = recorded_run(|b| b.data(&spec).max_requests(6));
    let first = tokens(&lines[0]);
    for l in &lines {
        let t = tokens(l);
        assert_eq!(t.len(), 120);
        assert_eq!(t[..40], first[..40], "the fixed prefix");
        assert!(prompt_of(l).contains("summer") || prompt_of(l).contains("thee"));
    }

    // sharegpt: the first human turn; the recorded reply's length is max_tokens.
    let share = dir.path().join("sharegpt.json");
    let convs: Vec<serde_json::Value> = (0..5)
        .map(|i| {
            serde_json::json!({"id": i, "conversations": [
                {"from": "human", "value": format!("Question {i}: name a colour.")},
                {"from": "gpt", "value": "Blue ".repeat(3 + i)},
                {"from": "human", "value": "Another?"},
                {"from": "gpt", "value": "Red."}
            ]})
        })
        .collect();
    std::fs::write(&share, serde_json::to_vec(&convs).expect("json")).expect("write");
    let lines = recorded_run(|b| {
        b.data(share.to_str().expect("path"))
            .data_args(r#"{"first_turn": true}"#)
    });
    assert_eq!(lines.len(), 5);
    for (i, l) in lines.iter().enumerate() {
        let messages = l["body"]["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 1, "{l}");
        assert_eq!(
            messages[0]["content"],
            format!("Question {i}: name a colour.")
        );
        let reply = "Blue ".repeat(3 + i);
        assert_eq!(max_tokens(l), bpe.encode_ordinary(&reply).len() as u64);
    }

    // burstgpt: its lengths, at a rate of our choosing (replay uses its timestamps).
    let burst = dir.path().join("burstgpt.csv");
    burstgpt_csv(&burst);
    let lines = recorded_run(|b| {
        b.constant(100)
            .data(burst.to_str().expect("path"))
            .arg("--trace-model", "GPT-4")
    });
    let want: Vec<(usize, u64)> = (0..30u32)
        .filter(|i| i % 3 == 1 && *i != 7)
        .map(|i| (20 + i as usize, u64::from(1 + i % 4)))
        .collect();
    let mut got: Vec<(usize, u64)> = lines
        .iter()
        .map(|l| (tokens(l).len(), max_tokens(l)))
        .collect();
    got.sort_unstable();
    assert_eq!(got, want);

    // custom JSONL: a prompt and an output length per line.
    let custom = dir.path().join("custom.jsonl");
    write_lines(
        &custom,
        &(0..4)
            .map(|i| serde_json::json!({"prompt": format!("Custom prompt {i}"), "output_tokens_count": 5 + i}).to_string())
            .collect::<Vec<_>>(),
    );
    let lines = recorded_run(|b| b.data(custom.to_str().expect("path")));
    let got: Vec<(String, u64)> = lines
        .iter()
        .map(|l| (prompt_of(l).to_string(), max_tokens(l)))
        .collect();
    let want: Vec<(String, u64)> = (0..4)
        .map(|i| (format!("Custom prompt {i}"), 5 + i))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn replay_flags_out_of_place_are_one_line_usage_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("t.jsonl");
    write_lines(
        &trace,
        &["{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}".to_string()],
    );
    let t = trace.to_str().expect("path");
    let cases: [(&[&str], &str); 7] = [
        (
            &["--profile", "replay", "--data", t, "--rampup", "1s"],
            "--rampup",
        ),
        (
            &["--profile", "replay"],
            "--profile replay needs --data a trace",
        ),
        (
            &["--profile", "replay", "--data", t, "--rate", "5"],
            "--rate",
        ),
        (
            &[
                "--profile",
                "constant",
                "--rate",
                "5",
                "--time-scale",
                "0.5",
            ],
            "--time-scale",
        ),
        (
            &["--profile", "replay", "--data", t, "--time-scale", "0"],
            "--time-scale",
        ),
        (&["--trace-start", "5s"], "--trace-start"),
        (
            &["--data", t, "--data-sampler", "shuffle"],
            "--data-sampler",
        ),
    ];
    for (args, mention) in cases {
        let finished = Bench::target("http://127.0.0.1:9")
            .max_seconds("1")
            .args_as_written(args)
            .run();
        let stderr = finished.stderr.trim();
        assert_eq!(finished.code(), 2, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(mention),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn trace_prompts_are_exact_under_a_hugging_face_tokenizer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokenizer = super::data::write_test_tokenizer(dir.path());
    let trace = dir.path().join("mooncake.jsonl");
    let lens: Vec<u64> = (0..12).map(|i| 20 + 7 * i).collect();
    let lines: Vec<String> = lens
        .iter()
        .enumerate()
        .map(|(i, n)| {
            serde_json::json!({"timestamp": 10 * i, "input_length": n, "output_length": 2,
                "hash_ids": [i % 2, 100 + i]})
            .to_string()
        })
        .collect();
    write_lines(&trace, &lines);
    let record = dir.path().join("record.jsonl");
    let server = mock(MockConfig {
        record: Some(record.clone()),
        ..MockConfig::instant()
    });
    let finished = replay(&server, &trace)
        .arg("--trace-block-size", 16)
        .arg("--processor", tokenizer.to_str().expect("path"))
        .run();
    ok_report(&finished);
    let tok = tokenizers::Tokenizer::from_file(&tokenizer).expect("tokenizer");
    let got: Vec<u64> = recorded(&record)
        .iter()
        .map(|l| {
            tok.encode(prompt_of(l), false)
                .expect("encode")
                .get_ids()
                .len() as u64
        })
        .collect();
    assert_eq!(got, lens, "every prompt exactly input_length tokens");
}

#[test]
fn max_seconds_cuts_a_replay_at_its_scaled_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("t.jsonl");
    // 200 requests 100 ms apart in trace time; at 0.5, 50 ms apart: 1 s holds 21 of them
    // (at 0, 50, ..., 1000 ms), the one at exactly 1 s perhaps not; the other 179 never
    // go out.
    let lines: Vec<String> = (0..200)
        .map(|i| {
            serde_json::json!({"timestamp": 100 * i, "input_length": 12, "output_length": 2})
                .to_string()
        })
        .collect();
    write_lines(&trace, &lines);
    let server = mock(MockConfig::instant());
    let finished = replay(&server, &trace)
        .arg("--time-scale", "0.5")
        .max_seconds("1")
        .run();
    let report = ok_report(&finished);
    let b = &report.benchmarks[0];
    crate::support::assert_cut_at_the_limit(b.stop_time_s, b.requests.created, 0.05, 1.0);
}
