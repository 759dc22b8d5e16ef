//! The data pipeline end to end: exact prompt lengths under two tokenizers, prefix
//! sharing, spread, determinism, every file format, column mapping, chat
//! conversations, malformed rows, a Hugging Face folder offline, sampling, scenarios and
//! their precedence, and `preprocess dataset`.

mod capture;

use crate::scenario::Bench;
use crate::support::{assert_identity, dry_run, llmsurge, mock};
use capture::Capture;
use llmsurge::mock::MockConfig;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// A byte-pair tokenizer.json made here: letters and punctuation, plus merges that make
/// the first common words single tokens (other words split into several).
pub(super) fn write_test_tokenizer(dir: &Path) -> PathBuf {
    let mut vocab: BTreeMap<String, u32> = BTreeMap::new();
    let add = |t: &str, vocab: &mut BTreeMap<String, u32>| {
        let n = vocab.len() as u32;
        vocab.entry(t.to_string()).or_insert(n);
    };
    add("[UNK]", &mut vocab);
    for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"-()#@".chars()
    {
        add(&c.to_string(), &mut vocab);
    }
    let mut merges: Vec<String> = Vec::new();
    for w in llmsurge::data::corpus::WORDS.iter().take(80) {
        for i in 1..w.len() {
            let m = format!("{} {}", &w[..i], &w[i..=i]);
            if !merges.contains(&m) {
                merges.push(m);
                add(&w[..=i], &mut vocab);
            }
        }
    }
    crate::support::write_tokenizer(
        &dir.join("tokenizer.json"),
        serde_json::json!({"type": "Whitespace"}),
        serde_json::json!({
            "type": "BPE", "dropout": null, "unk_token": "[UNK]",
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": merges
        }),
    )
}

/// Counts tokens the way each tokenizer's own crate does (not through llmsurge).
enum Counter {
    Tiktoken(tiktoken_rs::CoreBPE),
    Hf(Box<tokenizers::Tokenizer>),
}

impl Counter {
    fn count(&self, text: &str) -> usize {
        match self {
            Counter::Tiktoken(b) => b.encode_ordinary(text).len(),
            Counter::Hf(t) => t.encode(text, false).expect("encode").get_ids().len(),
        }
    }
    fn ids(&self, text: &str) -> Vec<u32> {
        match self {
            Counter::Tiktoken(b) => b.encode_ordinary(text),
            Counter::Hf(t) => t.encode(text, false).expect("encode").get_ids().to_vec(),
        }
    }
}

fn capture_run(
    cap: &Capture,
    data: &str,
    processor: &str,
    extra: &[&str],
) -> crate::support::Finished {
    let done = Bench::target(&cap.url())
        .stream(false)
        .data(data)
        .arg("--processor", processor)
        .args_as_written(extra)
        .run();
    assert_eq!(done.code(), 0, "stderr: {}", done.stderr);
    done
}

#[test]
fn synthetic_prompts_are_exact_under_two_tokenizers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tj = write_test_tokenizer(dir.path());
    let tj_arg = tj.display().to_string();
    let counters = [
        (
            "cl100k_base",
            Counter::Tiktoken(tiktoken_rs::cl100k_base().expect("cl100k")),
        ),
        (
            tj_arg.as_str(),
            Counter::Hf(Box::new(
                tokenizers::Tokenizer::from_file(&tj).expect("tokenizer"),
            )),
        ),
    ];
    for (processor, counter) in &counters {
        // Exact lengths.
        let cap = Capture::start();
        let done = capture_run(
            &cap,
            "prompt_tokens=97,output_tokens=5",
            processor,
            &[
                "--profile",
                "concurrent",
                "--rate",
                "4",
                "--max-requests",
                "40",
            ],
        );
        let prompts = cap.prompts();
        assert_eq!(prompts.len(), 40);
        for p in &prompts {
            assert_eq!(counter.count(p), 97, "{processor}: {p:?}");
        }
        assert_eq!(cap.bodies()[0]["max_tokens"], 5);
        assert_eq!(cap.bodies()[0]["ignore_eos"], true);
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(done.report_path()).expect("report"))
                .expect("json");
        assert_eq!(
            report["args"]["data"]["resolved"]["tokenizer"].as_str(),
            Some(*processor),
            "the report records the tokenizer"
        );
        assert!(
            report["args"]["data"]["resolved"]
                .get("repaired_prompts")
                .is_none(),
            "{processor}: prompts are cut from token windows, not repaired one by one"
        );

        // Spread within bounds.
        let cap = Capture::start();
        capture_run(
            &cap,
            "prompt_tokens=60,prompt_tokens_stdev=30,prompt_tokens_min=25,prompt_tokens_max=90,output_tokens=20,output_tokens_stdev=10,output_tokens_min=15,output_tokens_max=24",
            processor,
            &["--max-requests", "60"],
        );
        let lens: Vec<usize> = cap.prompts().iter().map(|p| counter.count(p)).collect();
        assert!(
            lens.iter().all(|n| (25..=90).contains(n)),
            "{processor}: {lens:?}"
        );
        assert!(
            lens.contains(&25) && lens.contains(&90),
            "clamped draws reach both bounds: {lens:?}"
        );
        assert!(
            lens.iter().collect::<HashSet<_>>().len() > 20,
            "spread: {lens:?}"
        );
        for b in cap.bodies() {
            let m = b["max_tokens"].as_u64().expect("max_tokens");
            assert!((15..=24).contains(&m), "{m}");
        }
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[test]
fn prefixes_are_shared_exactly_as_configured() {
    let counter = tiktoken_rs::cl100k_base().expect("cl100k");
    let cap = Capture::start();
    capture_run(
        &cap,
        "prompt_tokens=120,prefix_tokens=50,prefix_count=3,output_tokens=4",
        "cl100k_base",
        &["--max-requests", "30"],
    );
    let ids: Vec<Vec<u32>> = cap
        .prompts()
        .iter()
        .map(|p| counter.encode_ordinary(p))
        .collect();
    assert_eq!(ids.len(), 30);
    // Synchronous: slot order, so prompt i is in group i % 3.
    for i in 0..ids.len() {
        assert_eq!(ids[i].len(), 120);
        for j in 0..i {
            let shared = common_prefix(&ids[i], &ids[j]);
            if i % 3 == j % 3 {
                assert_eq!(shared, 50, "prompts {i} and {j} share exactly the prefix");
            } else {
                assert_eq!(
                    shared, 0,
                    "prompts {i} and {j} of different groups share nothing"
                );
            }
        }
    }
    // Without a prefix nothing is shared at all.
    let cap = Capture::start();
    capture_run(
        &cap,
        "prompt_tokens=40,output_tokens=4",
        "cl100k_base",
        &["--max-requests", "16"],
    );
    let ids: Vec<Vec<u32>> = cap
        .prompts()
        .iter()
        .map(|p| counter.encode_ordinary(p))
        .collect();
    for i in 0..ids.len() {
        for j in 0..i {
            assert_eq!(common_prefix(&ids[i], &ids[j]), 0, "prompts {i} and {j}");
        }
    }
}

#[test]
fn a_fixed_seed_gives_the_same_prompts_whatever_the_workers() {
    let spec = "prompt_tokens=64,prompt_tokens_stdev=16,output_tokens=8,output_tokens_stdev=2";
    let collect = |extra: &[&str]| {
        let cap = Capture::start();
        capture_run(&cap, spec, "cl100k_base", extra);
        let mut bodies: Vec<String> = cap
            .bodies()
            .iter()
            .map(|b| format!("{}|{}", b["messages"], b["max_tokens"]))
            .collect();
        bodies.sort();
        bodies
    };
    let a = collect(&["--max-requests", "24", "--random-seed", "5"]);
    let b = collect(&[
        "--max-requests",
        "24",
        "--random-seed",
        "5",
        "--profile",
        "concurrent",
        "--rate",
        "6",
        "--workers",
        "2",
    ]);
    let c = collect(&["--max-requests", "24", "--random-seed", "6"]);
    assert_eq!(a.len(), 24);
    assert_eq!(a, b, "same seed, same prompts, whatever the workers");
    assert_ne!(a, c, "another seed, other prompts");
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&p, body).expect("write");
    p.display().to_string()
}

#[cfg(feature = "parquet")]
fn write_parquet(path: &Path, prompts: &[&str], outputs: &[i64]) {
    use parquet::basic::Compression;
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use std::sync::Arc;
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let schema = Arc::new(
        parquet::schema::parser::parse_message_type(
            "message schema { REQUIRED BYTE_ARRAY question (UTF8); REQUIRED INT64 output_tokens_count; }",
        )
        .expect("schema"),
    );
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build(),
    );
    let file = std::fs::File::create(path).expect("create");
    let mut w = SerializedFileWriter::new(file, schema, props).expect("writer");
    let mut rg = w.next_row_group().expect("row group");
    let mut col = rg.next_column().expect("col").expect("some");
    let values: Vec<ByteArray> = prompts.iter().map(|p| ByteArray::from(*p)).collect();
    col.typed::<ByteArrayType>()
        .write_batch(&values, None, None)
        .expect("write");
    col.close().expect("close");
    let mut col = rg.next_column().expect("col").expect("some");
    col.typed::<Int64Type>()
        .write_batch(outputs, None, None)
        .expect("write");
    col.close().expect("close");
    rg.close().expect("close");
    w.close().expect("close");
}

/// Runs `--data FILE` against the mock; asserts every row was sent once and the data
/// ended the benchmark.
fn assert_file_runs(data: &str, rows: u64, extra: &[&str]) {
    let server = mock(MockConfig::instant());
    let done = Bench::on(&server).data(data).args_as_written(extra).run();
    assert_eq!(done.code(), 0, "{data}: {}", done.stderr);
    let report = done.report();
    assert_identity(&report);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, rows, "{data}");
    assert!(
        matches!(b.stop_reason, Some(llmsurge_coordinator::StopReason::DatasetExhausted { samples }) if samples == rows),
        "{data}: {:?}",
        b.stop_reason
    );
}

#[test]
fn every_file_format_runs_to_the_end_of_its_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    assert_file_runs(
        &write(
            d,
            "a.jsonl",
            "{\"prompt\":\"Hello there\"}\n{\"instruction\":\"Sum 2 and 2\",\"output_tokens_count\":3}\n{\"text\":\"Third\"}\n",
        ),
        3,
        &[],
    );
    assert_file_runs(
        &write(d, "b.json", r#"[{"question":"a?"},{"question":"b?"}]"#),
        2,
        &[],
    );
    assert_file_runs(
        &write(
            d,
            "c.json",
            r#"{"version": 1, "rows": [{"input":"a"},{"input":"b"},{"input":"c"},{"input":"d"}]}"#,
        ),
        4,
        &[],
    );
    assert_file_runs(
        &write(
            d,
            "d.csv",
            "context,output_tokens_count\n\"one, two\",4\nthree,5\n",
        ),
        2,
        &[],
    );
    assert_file_runs(
        &write(d, "e.txt", "first prompt\nsecond prompt\n\nthird prompt\n"),
        3,
        &[],
    );
    assert_file_runs(
        &write(
            d,
            "f.jsonl",
            "{\"body\":\"x\",\"n\":2}\n{\"body\":\"y\",\"n\":3}\n",
        ),
        2,
        &[
            "--data-column-mapper",
            r#"{"prompt": "body", "output_tokens_count": "n"}"#,
        ],
    );
    // --data-samples takes the first rows.
    assert_file_runs(
        &write(d, "g.txt", "1\n2\n3\n4\n5\n"),
        2,
        &["--data-samples", "2"],
    );
    #[cfg(feature = "parquet")]
    {
        let p = d.join("h.parquet");
        write_parquet(&p, &["What is two plus two?", "Name a colour."], &[4, 6]);
        assert_file_runs(&p.display().to_string(), 2, &[]);
    }
}

#[test]
fn rows_become_the_requests_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(
        dir.path(),
        "chat.jsonl",
        concat!(
            "{\"conversations\":[{\"from\":\"system\",\"value\":\"Be brief.\"},{\"from\":\"human\",\"value\":\"Hi there\"},{\"from\":\"gpt\",\"value\":\"Hello! How can I help you today?\"}]}\n",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"One\"},{\"role\":\"assistant\",\"content\":\"Two\"},{\"role\":\"user\",\"content\":\"Three\"}],\"output_tokens_count\":7}\n",
            "{\"system_prompt\":\"You are terse.\",\"question\":\"Why?\"}\n",
        ),
    );
    let cap = Capture::start();
    capture_run(&cap, &f, "cl100k_base", &[]);
    let bodies = cap.bodies();
    assert_eq!(bodies.len(), 3);
    let roles = |b: &serde_json::Value| -> Vec<String> {
        b["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["role"].as_str().expect("role").to_string())
            .collect()
    };
    assert_eq!(
        roles(&bodies[0]),
        ["system", "user"],
        "ShareGPT: the final answer is not sent"
    );
    assert_eq!(
        bodies[0]["max_tokens"], 9,
        "...its length is the output length"
    );
    assert_eq!(roles(&bodies[1]), ["user", "assistant", "user"]);
    assert_eq!(bodies[1]["max_tokens"], 7);
    assert_eq!(roles(&bodies[2]), ["system", "user"]);
    assert_eq!(bodies[2]["messages"][1]["content"], "Why?");
}

fn assert_usage_error(done: &crate::support::Finished, needles: &[&str]) {
    assert_eq!(done.code(), 2, "stderr: {}", done.stderr);
    let lines: Vec<&str> = done.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {:?}", done.stderr);
    for n in needles {
        assert!(lines[0].contains(n), "{:?} should name {n:?}", lines[0]);
    }
    assert!(!done.report_path().exists(), "nothing may run");
}

#[test]
fn malformed_rows_stop_the_run_before_it_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let server = mock(MockConfig::instant());
    let bad = |data: &str, extra: &[&str], needles: &[&str]| {
        let run = Bench::on(&server).data(data).args_as_written(extra).run();
        assert_usage_error(&run, needles);
    };
    bad(
        &write(d, "a.jsonl", "{\"prompt\":\"ok\"}\n{\"prompt\": oops}\n"),
        &[],
        &["a.jsonl line 2", "JSON"],
    );
    bad(
        &write(d, "b.jsonl", "{\"prompt\":\"ok\"}\n{\"prompt\":5}\n"),
        &[],
        &["b.jsonl line 2", "\"prompt\""],
    );
    bad(
        &write(d, "c.csv", "prompt,x\na,1\nb,2,3\n"),
        &[],
        &["c.csv line 3"],
    );
    bad(
        &write(d, "d.json", r#"[{"prompt":"a"},{"nothing":"here"}]"#),
        &[],
        &["d.json item 2", "no prompt column"],
    );
    bad(
        &write(
            d,
            "e.jsonl",
            "{\"prompt\":\"a\",\"output_tokens_count\":\"lots\"}\n",
        ),
        &[],
        &["e.jsonl line 1", "output_tokens_count"],
    );
    bad(
        &write(d, "f.jsonl", "{\"messages\":[{\"role\":\"user\"}]}\n"),
        &[],
        &["f.jsonl line 1", "messages"],
    );
    bad(
        &write(d, "g.jsonl", "{\"prompt\":\"a\"}\n"),
        &["--data-column-mapper", r#"{"prompt":"body"}"#],
        &["g.jsonl line 1", "\"body\""],
    );
    bad(
        &write(d, "h.jsonl", "{\"prompt\":\"a\"}\n"),
        &["--data-column-mapper", "{nope"],
        &["--data-column-mapper"],
    );
    #[cfg(feature = "parquet")]
    bad(
        &write(d, "i.parquet", "not parquet at all"),
        &[],
        &["i.parquet"],
    );
    bad(
        "prompt_tokens=4,output_tokens=2",
        &["--processor", "no-such-encoding"],
        &["--processor", "no-such-encoding"],
    );
    bad(
        "org/no-such-dataset-here",
        &["--data-args", "{\"split\": 3}"],
        &["--data-args"],
    );
    assert_eq!(
        server.stats().requests.chat_completions,
        0,
        "no request was sent"
    );
}

#[test]
fn a_hugging_face_dataset_folder_loads_offline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = dir.path().join("org--dataset");
    write(&ds, "README.md", "---\nconfigs: []\n---\n# a dataset\n");
    write(&ds, "data/test.jsonl", "{\"prompt\":\"t1\"}\n");
    #[cfg(feature = "parquet")]
    {
        write_parquet(
            &ds.join("data/train-00000-of-00002.parquet"),
            &["a", "b", "c"],
            &[1, 2, 3],
        );
        write_parquet(
            &ds.join("data/train-00001-of-00002.parquet"),
            &["d", "e"],
            &[4, 5],
        );
    }
    #[cfg(not(feature = "parquet"))]
    write(
        &ds,
        "data/train-00000-of-00001.jsonl",
        "{\"prompt\":\"a\"}\n{\"prompt\":\"b\"}\n{\"prompt\":\"c\"}\n{\"prompt\":\"d\"}\n{\"prompt\":\"e\"}\n",
    );
    let folder = ds.display().to_string();
    assert_file_runs(&folder, 5, &[]);
    assert_file_runs(&folder, 1, &["--data-args", r#"{"split": "test"}"#]);
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    assert_usage_error(
        &Bench::target(&url)
            .data(&folder)
            .arg("--data-args", r#"{"split": "dev"}"#)
            .run(),
        &["split \"dev\"", "test, train"],
    );
}

#[test]
fn shuffled_epochs_cover_every_row_in_new_orders() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows: Vec<String> = (0..12)
        .map(|i| format!("{{\"prompt\":\"row {i}\"}}"))
        .collect();
    let f = write(dir.path(), "rows.jsonl", &rows.join("\n"));
    let cap = Capture::start();
    // --max-requests above the rows: oversampled (auto), one shuffled epoch after another.
    capture_run(
        &cap,
        &f,
        "cl100k_base",
        &["--data-sampler", "shuffle", "--max-requests", "36"],
    );
    let p = cap.prompts();
    assert_eq!(p.len(), 36);
    let epochs: Vec<&[String]> = p.chunks(12).collect();
    for e in &epochs {
        let set: HashSet<&String> = e.iter().collect();
        assert_eq!(set.len(), 12, "each epoch uses every row once");
    }
    assert_ne!(epochs[0], epochs[1], "epochs are reshuffled");
    let sequential: Vec<String> = (0..12).map(|i| format!("row {i}")).collect();
    assert_ne!(epochs[0], &sequential[..], "shuffled");
    // Never oversampling: the data ends the benchmark even under a larger limit.
    assert_file_runs(
        &f,
        12,
        &["--max-requests", "36", "--data-oversample", "never"],
    );
}

#[test]
fn scenario_precedence_is_defaults_then_scenario_then_env_then_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = write(
        dir.path(),
        "s.json",
        r#"{"max_seconds": 7, "profile": "constant", "rate": [2, 4], "data": {"prompt_tokens": 33, "output_tokens": 3}}"#,
    );
    let sc = scenario.as_str();
    // (flags, env, expected max_seconds, expected prompt_tokens, expected strategies)
    type Row<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], f64, u64, usize);
    let table: &[Row] = &[
        (&[], &[], 30.0, 256, 1),
        (&["--scenario", sc], &[], 7.0, 33, 2),
        (&[], &[("LLMSURGE_SCENARIO", sc)], 7.0, 33, 2),
        (
            &["--scenario", sc],
            &[("LLMSURGE_MAX_SECONDS", "9")],
            9.0,
            33,
            2,
        ),
        (
            &["--scenario", sc, "--max-seconds", "11"],
            &[("LLMSURGE_MAX_SECONDS", "9")],
            11.0,
            33,
            2,
        ),
        (
            &[
                "--scenario",
                sc,
                "--data",
                "prompt_tokens=44,output_tokens=4",
            ],
            &[("LLMSURGE_DATA", "prompt_tokens=55,output_tokens=5")],
            7.0,
            44,
            2,
        ),
        (
            &["--scenario", sc],
            &[
                ("LLMSURGE_DATA", "prompt_tokens=55,output_tokens=5"),
                ("LLMSURGE_RATE", "3"),
            ],
            7.0,
            55,
            1,
        ),
        (&["--scenario", sc, "--rate", "1,2,3"], &[], 7.0, 33, 3),
    ];
    for (i, (flags, env, secs, prompt, strategies)) in table.iter().enumerate() {
        let plan = dry_run(flags, env);
        let max = &plan["limits"]["max_seconds"];
        let got_secs =
            max["secs"].as_f64().expect("secs") + max["nanos"].as_f64().unwrap_or(0.0) / 1e9;
        assert_eq!(got_secs, *secs, "row {i}: max_seconds");
        assert_eq!(
            plan["data"]["source"]["spec"]["prompt_tokens"], *prompt,
            "row {i}: data"
        );
        assert_eq!(
            plan["profile_plan"]["strategies"]
                .as_array()
                .expect("strategies")
                .len(),
            *strategies,
            "row {i}"
        );
    }
    // Built-in scenarios resolve, and an unknown key is refused with the file named.
    for name in ["chat", "rag", "prefix_cache", "long_context"] {
        let plan = dry_run(&["--scenario", name], &[]);
        assert_eq!(plan["data"]["resolved"]["kind"], "synthetic", "{name}");
        assert_eq!(
            plan["data"]["resolved"]["tokenizer"], "cl100k_base",
            "{name}"
        );
    }
    let bad = write(
        dir.path(),
        "bad.json",
        r#"{"max_seconds": 5, "colour": "red"}"#,
    );
    let out = llmsurge()
        .args(["benchmark", "run", "--dry-run", "--scenario", &bad])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("colour") && err.contains("bad.json") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn preprocess_rewrites_a_dataset_to_exact_lengths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let long = "The quick brown fox jumps over the lazy dog again and again. ".repeat(8);
    let input = write(
        dir.path(),
        "in.jsonl",
        &format!(
            "{{\"prompt\":\"{long}\"}}\n{{\"prompt\":\"too short\"}}\n{{\"prompt\":\"{long}\"}}\n"
        ),
    );
    let out = dir.path().join("out.jsonl");
    let status = llmsurge()
        .args(["preprocess", "dataset", &input])
        .arg(&out)
        .args([
            "--processor",
            "cl100k_base",
            "--config",
            "prompt_tokens=50,output_tokens=9",
            "--short-prompt-strategy",
            "ignore",
        ])
        .output()
        .expect("runs");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let bpe = tiktoken_rs::cl100k_base().expect("cl100k");
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .expect("output")
        .lines()
        .map(|l| serde_json::from_str(l).expect("row"))
        .collect();
    assert_eq!(rows.len(), 2, "the short row is left out");
    for r in &rows {
        assert_eq!(
            bpe.encode_ordinary(r["prompt"].as_str().expect("prompt"))
                .len(),
            50
        );
        assert_eq!(r["prompt_tokens_count"], 50);
        assert_eq!(r["output_tokens_count"], 9);
    }
    let failed = llmsurge()
        .args(["preprocess", "dataset", &input])
        .arg(dir.path().join("x.jsonl"))
        .args([
            "--config",
            "prompt_tokens=50,output_tokens=9",
            "--short-prompt-strategy",
            "error",
        ])
        .output()
        .expect("runs");
    assert_eq!(failed.status.code(), Some(2));
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(err.contains("in.jsonl line 2"), "{err}");
    // The rewritten file is a dataset llmsurge runs as is.
    assert_file_runs(&out.display().to_string(), 2, &[]);
}

#[test]
fn counting_is_independent_of_llmsurge() {
    // Guards the helpers above: the two tokenizers really differ on the same text.
    let dir = tempfile::tempdir().expect("tempdir");
    let hf = Counter::Hf(Box::new(
        tokenizers::Tokenizer::from_file(write_test_tokenizer(dir.path())).expect("tok"),
    ));
    let tk = Counter::Tiktoken(tiktoken_rs::cl100k_base().expect("cl100k"));
    let text = "There were thousands of questions, answered slowly.";
    assert_ne!(hf.count(text), tk.count(text));
    assert!(hf.ids(text).len() > 8);
}
