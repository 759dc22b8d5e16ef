//! The LoRA traffic split (`--lora`) end to end: the split's shares, the report's
//! per-model breakdown in every format against the mock's own per-model counts, the
//! per-slot choice independent of `--workers`, merged shards, and bad values.

use crate::scenario::Bench;
use crate::support::{Finished, dry_run, llmsurge, mock, ok_report, wait_run};
use llmsurge::mock::{MockConfig, MockStats};
use llmsurge::report::{Report, RequestEntry};
use std::collections::BTreeMap;
use std::path::Path;

/// The instant mock serving a base model and three adapters.
fn lora_mock() -> MockConfig {
    MockConfig {
        model: ["base", "a", "b", "c"].map(String::from).to_vec(),
        ..MockConfig::instant()
    }
}

const SPLIT: [(&str, f64); 3] = [("a", 0.5), ("b", 0.3), ("c", 0.2)];

fn split_arg() -> String {
    SPLIT
        .iter()
        .map(|(n, w)| format!("{n}={w}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn read_log(path: &Path) -> Vec<RequestEntry> {
    std::fs::read_to_string(path)
        .expect("the request log exists")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one request"))
        .collect()
}

/// The mock's requests per model.
fn served(stats: &MockStats) -> BTreeMap<String, u64> {
    stats
        .models
        .iter()
        .map(|(name, c)| (name.clone(), c.requests))
        .collect()
}

#[test]
fn the_split_holds_within_three_points_and_every_format_breaks_it_down_as_the_server_counted() {
    let server = mock(lora_mock());
    let url = server.base_url();
    let split = split_arg();
    // A fixed seed: slot i's model comes from (seed, lora, i), so the split of slots
    // 0..2000 is the same every run. Drawn afresh each run, a share misses its weight by
    // more than 3 points about once in a hundred runs (3σ at 0.3; a CI run saw 0.2655).
    let run = Bench::target(&url)
        .model("base")
        .arg("--lora", &split)
        .seed(11)
        .concurrent(16)
        .max_requests(2000)
        .data("prompt_tokens=16,output_tokens=8")
        .outputs("json,csv,html,md,console")
        .run();
    let report = ok_report(&run);
    let stats = server.stats();
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 2000, "{:?}", b.requests);
    assert_eq!(
        b.models
            .iter()
            .map(|m| m.model.as_str())
            .collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    // The base model got nothing: every request named an adapter.
    assert_eq!(stats.models["base"].requests, 0, "{:?}", stats.models);
    assert_eq!(stats.model_not_found, 0);
    for (m, (name, weight)) in b.models.iter().zip(SPLIT) {
        let share = m.requests.created as f64 / 2000.0;
        assert!(
            (share - weight).abs() <= 0.03,
            "{name}: {share} of the requests, configured {weight}"
        );
        assert!((m.weight - weight).abs() < 1e-9, "{name}: {}", m.weight);
        // The report's count and the server's agree exactly, requests and tokens.
        let seen = &stats.models[name];
        assert_eq!(m.requests.created, seen.requests, "{name}");
        assert_eq!(m.requests.completed, seen.completed, "{name}");
        assert_eq!(m.output_tokens, seen.tokens_sent, "{name}");
        assert_eq!(m.prompt_tokens, seen.prompt_tokens, "{name}");
        // Every metric is there, with this model's requests only.
        for key in ["ttft", "itl", "tpot", "request_latency", "output_tokens"] {
            assert!(m.metrics.contains_key(key), "{name}: no {key}");
        }
        assert_eq!(m.metrics["ttft"].successful.count, m.requests.completed);
        assert_eq!(
            m.metrics["output_tokens"].successful.count,
            m.requests.completed
        );
        assert!(m.throughput.requests_per_s > 0.0, "{name}");
    }
    // The models add up to the whole.
    let sum = |f: fn(&llmsurge_coordinator::result::ModelResult) -> u64| -> u64 {
        b.models.iter().map(f).sum()
    };
    assert_eq!(sum(|m| m.requests.created), b.requests.created);
    assert_eq!(
        sum(|m| m.metrics["request_latency"].total.count),
        b.metrics["request_latency"].total.count
    );
    let rate: f64 = b.models.iter().map(|m| m.throughput.requests_per_s).sum();
    assert!(
        (rate - b.throughput.requests_per_s).abs() < 1e-6 * rate.max(1.0),
        "{rate} vs {}",
        b.throughput.requests_per_s
    );

    // CSV: the existing columns first, unchanged, then each model's group.
    let dir = run.dir.path();
    let csv = run.csv_first_row();
    let (header, cell) = (&csv.header, |name: &str| csv.cell(name));
    assert_eq!(header[0], "run.index");
    let first_model = header
        .iter()
        .position(|h| h.starts_with("model."))
        .expect("model columns");
    assert!(
        header[..first_model]
            .iter()
            .all(|h| !h.starts_with("model.")),
        "model columns come after the whole's"
    );
    for m in &b.models {
        let p = format!("model.{}.", m.model);
        assert_eq!(
            cell(&format!("{p}requests.created")),
            m.requests.created.to_string()
        );
        let p50: f64 = cell(&format!("{p}ttft_ms.successful.p50"))
            .parse()
            .expect("a number");
        assert!((p50 - m.metrics["ttft"].successful.percentiles.p50).abs() < 1e-9);
    }

    // HTML, Markdown and the console name every model in their per-model tables.
    let html = std::fs::read_to_string(dir.join("benchmarks.html")).expect("html");
    let md = std::fs::read_to_string(dir.join("benchmarks.md")).expect("md");
    assert!(
        html.contains("<h2>Per model</h2>"),
        "no per-model HTML table"
    );
    assert!(md.contains("### Per model"), "{md}");
    assert!(
        run.stdout.contains("Per model") || run.stderr.contains("Per model"),
        "console: {}",
        run.stdout
    );
    for (name, _) in SPLIT {
        assert!(
            html.contains(&format!("<td>{name}</td>")),
            "html lacks {name}"
        );
        assert!(md.contains(&format!("| {name} |")), "md lacks {name}");
    }
}

/// One run of a fixed count with a request log; the per-slot models and the report.
fn logged_run(url: &str, workers: u32, env_split: bool) -> (Finished, BTreeMap<u64, String>) {
    let split = split_arg();
    let bench = Bench::target(url)
        .model("base")
        .concurrent(8)
        .workers(workers)
        .seed(11)
        .max_requests(300)
        .data("prompt_tokens=16,output_tokens=4")
        .request_log("requests.jsonl")
        .outputs("json");
    let bench = if env_split {
        bench
    } else {
        bench.arg("--lora", &split)
    };
    let (child, dir) = bench.start(|cmd| {
        if env_split {
            // The variable sets the flag like any other.
            cmd.env("LLMSURGE_LORA", &split);
        }
    });
    let run = wait_run(child, dir);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let slots = read_log(&run.dir.path().join("requests.jsonl"))
        .into_iter()
        .map(|e| (e.slot, e.model.expect("every request names its model")))
        .collect();
    (run, slots)
}

#[test]
fn the_same_seed_gives_every_slot_the_same_model_whatever_the_workers() {
    let one = mock(lora_mock());
    let (run1, slots1) = logged_run(&one.base_url(), 1, false);
    let two = mock(lora_mock());
    let (run2, slots2) = logged_run(&two.base_url(), 2, true);
    assert_eq!(slots1.len(), 300);
    assert_eq!(
        slots1, slots2,
        "slot → model differs between 1 and 2 workers"
    );
    let workers: std::collections::BTreeSet<u32> = run2.report().benchmarks[0]
        .workers
        .iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(workers.len(), 2, "the second run had two workers");
    // The servers saw the same split, and each report says what its server saw.
    assert_eq!(served(&one.stats()), served(&two.stats()));
    for (run, server) in [(&run1, &one), (&run2, &two)] {
        let stats = server.stats();
        for m in &run.report().benchmarks[0].models {
            assert_eq!(m.requests.created, stats.models[&m.model].requests);
        }
    }
    // Another seed gives another choice (the pick is seeded, not fixed).
    let three = mock(lora_mock());
    let split = split_arg();
    let other = Bench::target(&three.base_url())
        .model("base")
        .arg("--lora", &split)
        .concurrent(8)
        .seed(12)
        .max_requests(300)
        .data("prompt_tokens=16,output_tokens=4")
        .request_log("requests.jsonl")
        .outputs("json")
        .run();
    assert_eq!(other.code(), 0, "{}", other.stderr);
    let slots3: BTreeMap<u64, String> = read_log(&other.dir.path().join("requests.jsonl"))
        .into_iter()
        .filter_map(|e| Some((e.slot, e.model?)))
        .collect();
    assert_ne!(slots1, slots3);
}

#[test]
fn merged_shards_keep_each_models_section() {
    let server = mock(lora_mock());
    let url = server.base_url();
    let split = split_arg();
    let shard = |k: &str| {
        Bench::target(&url)
            .model("base")
            .arg("--lora", &split)
            .concurrent(8)
            .max_requests(400)
            .data("prompt_tokens=16,output_tokens=4")
            .arg("--shard", k)
            .seed(3)
            .outputs("json")
            .run()
    };
    let (s1, s2) = (shard("1/2"), shard("2/2"));
    let out = tempfile::tempdir().expect("tempdir");
    let merge = llmsurge()
        .args(["benchmark", "merge", "--outputs", "json", "--output-dir"])
        .arg(out.path())
        .arg(s1.report_path())
        .arg(s2.report_path())
        .output()
        .expect("merge runs");
    assert!(
        merge.status.success(),
        "{}",
        String::from_utf8_lossy(&merge.stderr)
    );
    let merged = Report::load(&out.path().join("benchmarks.json")).expect("merged report");
    let b = &merged.benchmarks[0];
    let stats = server.stats();
    assert_eq!(b.requests.created, 400);
    for m in &b.models {
        // Matched by name across shards and added: what the one server saw.
        let seen = &stats.models[&m.model];
        assert_eq!(m.requests.created, seen.requests, "{}", m.model);
        assert_eq!(m.output_tokens, seen.tokens_sent, "{}", m.model);
        let parts: u64 = [&s1, &s2]
            .iter()
            .map(|s| {
                s.report().benchmarks[0]
                    .models
                    .iter()
                    .find(|x| x.model == m.model)
                    .map_or(0, |x| x.metrics["ttft"].successful.count)
            })
            .sum();
        assert_eq!(m.metrics["ttft"].successful.count, parts, "{}", m.model);
    }
    assert_eq!(
        b.models.iter().map(|m| m.requests.created).sum::<u64>(),
        400
    );
}

#[test]
fn bad_lora_values_are_one_line_usage_errors() {
    let server = mock(lora_mock());
    let url = server.base_url();
    for bad in [
        "a=0.5,b=0.6",
        "a=0.5,b",
        "a=0,b=1",
        "a=-1,b=2",
        "a=x",
        "a,a",
        ",",
    ] {
        let run = Bench::target(&url).max_requests(5).arg("--lora", bad).run();
        assert_eq!(run.code(), 2, "{bad:?}: {}", run.stderr);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "{bad:?}: one line expected: {:?}",
            run.stderr
        );
        assert!(
            lines[0].starts_with("error: --lora"),
            "{bad:?}: {}",
            lines[0]
        );
        assert!(!run.report_path().exists(), "nothing may run");
    }
    // Through the environment too.
    let (child, dir) = Bench::target(&url).max_requests(5).start(|cmd| {
        cmd.env("LLMSURGE_LORA", "a=2");
    });
    let run = wait_run(child, dir);
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert!(run.stderr.starts_with("error: --lora"), "{}", run.stderr);
    assert_eq!(server.stats().models["a"].requests, 0, "nothing was sent");
}

#[test]
fn a_scenario_file_sets_the_split_and_a_plain_run_has_no_models() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("lora.json");
    std::fs::write(&scenario, r#"{"lora": "a,b", "max_requests": 20}"#).expect("write");
    let plan = dry_run(&["--scenario", scenario.to_str().expect("utf-8 path")], &[]);
    let models = plan
        .pointer("/data/lora/models")
        .and_then(|m| m.as_array())
        .unwrap_or_else(|| panic!("no split in the plan: {plan}"));
    let split: Vec<(&str, f64)> = models
        .iter()
        .map(|m| {
            (
                m["name"].as_str().expect("name"),
                m["weight"].as_f64().expect("weight"),
            )
        })
        .collect();
    assert_eq!(split, [("a", 0.5), ("b", 0.5)]);

    // Without --lora: no per-model section anywhere, and the mock saw the base model only.
    let server = mock(lora_mock());
    let run = Bench::on(&server)
        .model("base")
        .max_requests(20)
        .outputs("json,csv")
        .run();
    let report = ok_report(&run);
    assert!(report.benchmarks[0].models.is_empty());
    let json = std::fs::read_to_string(run.report_path()).expect("json");
    assert!(
        !json.contains("\"models\""),
        "a plain run has no models key"
    );
    let csv = std::fs::read_to_string(run.dir.path().join("benchmarks.csv")).expect("csv");
    assert!(!csv.contains("model."), "a plain run has no model columns");
    assert_eq!(server.stats().models["base"].requests, 20);
}
