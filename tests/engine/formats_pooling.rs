//! The formats without output, `embeddings`, `rerank` and `score`, end to end against the
//! mock: one body per request, the report's counts held to the mock's `/stats`, the
//! generation metrics absent (not zero) from every output format, and every bad
//! response an error of its kind with a sample message.

use crate::scenario::Bench;
use crate::support::{Finished, assert_identity, mock, ok_report, recording};
use llmsurge::mock::{MockConfig, MockServer, MockStats};
use llmsurge_coordinator::BenchmarkResult;

/// (format, data spec, inputs per request)
const CASES: [(&str, &str, f64); 3] = [
    ("embeddings", "prompt_tokens=16,batch_size=4", 4.0),
    ("rerank", "prompt_tokens=8,documents=5", 5.0),
    ("score", "prompt_tokens=8,documents=3", 3.0),
];

/// Keys of metrics that only a generated output has.
const GENERATION_KEYS: [&str; 7] = [
    "ttft",
    "ttft_any",
    "ttft_with_incomplete",
    "ttft_any_with_incomplete",
    "itl",
    "tpot",
    "output_tokens",
];

fn endpoint_count(stats: &MockStats, format: &str) -> u64 {
    match format {
        "embeddings" => stats.requests.embeddings,
        "rerank" => stats.requests.rerank,
        "score" => stats.requests.score,
        other => panic!("no endpoint for {other}"),
    }
}

/// `n` requests of `format` with `data`, 4 at a time.
fn bench_format(server: &MockServer, format: &str, data: &str, n: u64) -> Bench {
    Bench::on(server)
        .format(format)
        .concurrent(4)
        .max_requests(n)
        .request_timeout("10s")
        .data(data)
}

fn error_count(b: &BenchmarkResult, kind: &str) -> u64 {
    b.errors
        .iter()
        .find(|e| e.kind == kind)
        .map_or(0, |e| e.count)
}

#[test]
fn embeddings_rerank_and_score_agree_with_the_mock_and_leave_out_generation_metrics() {
    for (format, data, inputs) in CASES {
        let server = mock(MockConfig::instant());
        let run = bench_format(&server, format, data, 20)
            .outputs("json,csv,html,md,console")
            .run();
        let report = ok_report(&run);
        assert_identity(&report);
        let b = &report.benchmarks[0];
        let stats = server.stats();
        assert_eq!(b.requests.completed, 20, "{format}: {:?}", b.errors);
        assert_eq!(endpoint_count(&stats, format), 20, "{format}");
        assert_eq!(stats.requests.chat_completions, 0, "{format}");
        // The server's own prompt count is the usage the report holds.
        let prompt = &b.metrics["prompt_tokens"].successful;
        assert_eq!(
            (prompt.mean * 20.0).round() as u64,
            stats.prompt_tokens,
            "{format}"
        );
        assert_eq!(
            b.token_sources, None,
            "{format}: no output tokens to source"
        );
        assert_eq!(b.metrics["request_latency"].successful.count, 20);
        let t = &b.throughput;
        let per_s = t.inputs_per_s.expect("inputs/s");
        assert!(
            (per_s - inputs * t.requests_per_s).abs() < 1e-6 * per_s,
            "{format}: {per_s} inputs/s at {} req/s",
            t.requests_per_s
        );
        assert!(t.input_tokens_per_s.is_some_and(|v| v > 0.0), "{format}");
        // Absent, not zero, in every output format.
        for key in GENERATION_KEYS {
            assert!(
                !b.metrics.contains_key(key),
                "{format}: {key} in the report"
            );
            assert!(!b.histograms.contains_key(key), "{format}: {key} histogram");
        }
        // The benchmark as written (the report's glossary, `metric_definitions`, names
        // every metric whatever ran).
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.report_path()).expect("json")).expect("JSON");
        let json = raw["benchmarks"][0].to_string();
        for key in ["\"ttft\"", "\"itl\"", "\"tpot\"", "\"output_tokens\""] {
            assert!(!json.contains(key), "{format}: {key} in the JSON");
        }
        assert!(json.contains("\"inputs_per_s\""), "{format}");
        // Nor the other numbers only output has: output tokens/s overall and per second,
        // where output token counts came from.
        let bench = &raw["benchmarks"][0];
        assert!(
            bench["throughput"].get("output_tokens_per_s").is_none(),
            "{format}: {}",
            bench["throughput"]
        );
        assert!(bench.get("token_sources").is_none(), "{format}");
        let points = bench["timeseries"].as_array().expect("timeseries");
        assert!(!points.is_empty(), "{format}");
        assert!(
            points
                .iter()
                .all(|p| p.get("output_tokens_per_s").is_none()),
            "{format}: {points:?}"
        );
        let csv = run.csv_first_row();
        let header = &csv.header;
        for (name, cell) in header.iter().zip(&csv.row) {
            let generation = GENERATION_KEYS
                .iter()
                .any(|k| name.starts_with(&format!("{k}.")))
                || name == "throughput.output_tokens_per_s"
                || name.starts_with("tokens.");
            if generation {
                assert!(cell.is_empty(), "{format}: CSV {name} = {cell:?}");
            }
        }
        assert!(
            header.iter().any(|h| h == "throughput.inputs_per_s"),
            "{format}"
        );
        // The client's tables (the server block below them quotes the server's metrics).
        let client = run
            .stdout
            .split("Server metrics")
            .next()
            .unwrap_or_default();
        for name in ["TTFT", "ITL", "TPOT"] {
            assert!(!client.contains(name), "{format}: console\n{client}");
        }
        assert!(run.stdout.contains("Inputs/s"), "{}", run.stdout);
        let both = format!("{}{}", run.stdout, run.stderr);
        assert!(
            both.contains("inputs/s") && !both.contains(" tok/s,"),
            "{format}: the progress line gives inputs/s\n{both}"
        );
        // The HTML's table cells say "–" and its page leaves the charts of absent
        // metrics out (the page script checks `metrics[key]`, which is not there).
        let html = std::fs::read_to_string(run.dir.path().join("benchmarks.html")).expect("html");
        assert!(
            !html.contains("\"ttft\":{"),
            "{format}: TTFT in the HTML's data"
        );
        let md = std::fs::read_to_string(run.dir.path().join("benchmarks.md")).expect("md");
        let row = md
            .lines()
            .find(|l| l.starts_with("| concurrent"))
            .expect("a benchmark row");
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // Output tok/s, TTFT p50/p99 and ITL p50 are the 5th to 8th cells.
        assert_eq!(cells[5..9], ["–", "–", "–", "–"], "{format}: {row}");
    }
}

#[test]
fn pooling_bad_responses_are_errors_of_their_kind() {
    for (format, data, _) in CASES {
        let server = mock(MockConfig {
            garbage_rate: 0.3,
            error_rate: 0.3,
            seed: 5,
            ..MockConfig::instant()
        });
        let run = bench_format(&server, format, data, 40).run();
        let report = run.report();
        assert_identity(&report);
        let b = &report.benchmarks[0];
        let faults = server.stats().faults;
        assert!(faults.garbage > 0, "{format}: {faults:?}");
        // A body cut in half is not JSON.
        assert_eq!(
            error_count(b, "malformed_response"),
            faults.garbage,
            "{format}: {:?}",
            b.errors
        );
        assert_eq!(
            error_count(b, "http_500") + error_count(b, "http_429"),
            faults.error_500 + faults.error_429,
            "{format}: {:?}",
            b.errors
        );
        assert_eq!(
            b.requests.errored,
            faults.garbage + faults.error_500 + faults.error_429
        );
        assert_eq!(b.requests.completed + b.requests.errored, 40);
        for e in &b.errors {
            assert!(
                e.samples.first().is_some_and(|s| !s.is_empty()),
                "{format} {}: no sample",
                e.kind
            );
        }
    }
}

#[test]
fn a_pooling_400_is_an_http_error_with_the_servers_message() {
    // Inputs longer than the mock's 8-token context window: vLLM's 400 with its message.
    for (format, data) in [
        ("embeddings", "batch_size=2"),
        ("rerank", "documents=2"),
        ("score", "documents=2"),
    ] {
        // Lengths around the window: the start-up probe's request fits, some others
        // do not.
        let data = format!(
            "prompt_tokens=4,prompt_tokens_stdev=8,prompt_tokens_min=1,prompt_tokens_max=20,{data}"
        );
        let server = mock(MockConfig {
            max_model_len: 8,
            ..MockConfig::instant()
        });
        let run = bench_format(&server, format, &data, 30).run();
        let report = run.report();
        let b = &report.benchmarks[0];
        let refused = error_count(b, "http_400");
        assert!(refused > 0, "{format}: {:?}", b.errors);
        assert_eq!(refused, server.stats().responses_4xx, "{format}");
        assert_eq!(b.requests.errored, refused, "{format}: {:?}", b.errors);
        assert_eq!(b.requests.completed + refused, 30, "{format}");
        assert!(
            b.errors[0].samples[0].contains("maximum context length is 8"),
            "{format}: {:?}",
            b.errors
        );
    }
}

#[test]
fn a_spec_key_or_objective_of_another_format_is_a_usage_error() {
    let server = mock(MockConfig::instant());
    for (format, data, needle) in [
        ("chat", "prompt_tokens=8,batch_size=2", "batch_size"),
        ("embeddings", "prompt_tokens=8,documents=2", "documents"),
        ("chat", "prompt_tokens=8", "output_tokens"),
    ] {
        let run = bench_format(&server, format, data, 1).run();
        assert_eq!(run.code(), 2, "{format} {data}: {}", run.stderr);
        assert!(run.stderr.contains("--data"), "{}", run.stderr);
        assert!(run.stderr.contains(needle), "{}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    }
    // Objectives on what only generation has.
    for (flag, value) in [
        ("--slo", "ttft_p99<=100ms"),
        ("--slo", "output_tokens_per_s>=5"),
        ("--goodput", "tpot:10ms"),
    ] {
        let run = bench_format(&server, "rerank", "prompt_tokens=8,documents=2", 1)
            .arg(flag, value)
            .run();
        assert_eq!(run.code(), 2, "{flag} {value}: {}", run.stderr);
        assert!(run.stderr.contains(flag), "{}", run.stderr);
        assert!(run.stderr.contains("rerank"), "{}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    }
    assert_eq!(server.stats().requests.embeddings, 0);
    assert_eq!(server.stats().requests.rerank, 0);
}

#[test]
fn an_explicit_stream_true_with_a_pooling_format_is_a_usage_error() {
    let server = mock(MockConfig::instant());
    for (format, data, _) in CASES {
        // On the command line.
        let run = bench_format(&server, format, data, 1).stream(true).run();
        assert_eq!(run.code(), 2, "{format}: {}", run.stderr);
        let line = run.stderr.trim();
        assert_eq!(line.lines().count(), 1, "{format}: {line}");
        assert!(
            line.contains("--stream") && line.contains(format),
            "{format}: {line}"
        );
        // From the environment.
        let run = Bench::on(&server)
            .format(format)
            .max_requests(1)
            .data(data)
            .run_with_env(&[("LLMSURGE_STREAM", "true")]);
        assert_eq!(run.code(), 2, "{format} LLMSURGE_STREAM: {}", run.stderr);
        assert!(run.stderr.contains("--stream"), "{}", run.stderr);
    }
    assert_eq!(server.stats().requests_total, 0, "nothing was sent");
    // `--stream false` and the default both run, unstreamed.
    let rerank = bench_format(&server, "rerank", "prompt_tokens=8,documents=2", 2);
    for (what, bench) in [
        ("--stream false", rerank.clone().stream(false)),
        ("default", rerank),
    ] {
        let report = bench.ok_report();
        assert_eq!(report.benchmarks[0].requests.completed, 2, "{what}");
    }
    assert_eq!(server.stats().requests.rerank, 4);
}

#[test]
fn merged_shards_of_embeddings_stay_without_generation_metrics() {
    let server = mock(MockConfig::instant());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut shards = Vec::new();
    let mut inputs_per_s = Vec::new();
    for index in 0..2u32 {
        let run = bench_format(&server, "embeddings", "prompt_tokens=8,batch_size=3", 12)
            .outputs("json")
            // Shards of one run share its seed.
            .seed(3)
            .run();
        let report = ok_report(&run);
        inputs_per_s.push(report.benchmarks[0].throughput.inputs_per_s);
        // The report as a shard of two (what `--shard k/2` writes).
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.report_path()).expect("report"))
                .expect("JSON");
        let shard = serde_json::json!({ "index": index, "count": 2 });
        v["metadata"]["shard"] = shard.clone();
        v["args"]["shard"] = shard;
        let path = dir.path().join(format!("shard-{index}.json"));
        std::fs::write(&path, serde_json::to_vec(&v).expect("JSON")).expect("write");
        shards.push(path);
    }
    assert!(inputs_per_s.iter().all(Option::is_some), "{inputs_per_s:?}");
    let out = dir.path().join("merged");
    let mut cmd = crate::support::llmsurge();
    cmd.args(["benchmark", "merge"])
        .args(&shards)
        .args(["--outputs", "json", "--output-dir"])
        .arg(&out);
    let merged = cmd.output().expect("merge runs");
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let report = llmsurge::report::Report::load(&out.join("benchmarks.json")).expect("loads");
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 24);
    for key in GENERATION_KEYS {
        assert!(!b.metrics.contains_key(key), "merged: {key}");
    }
    assert_eq!(b.throughput.output_tokens_per_s, None, "merged");
    assert_eq!(b.token_sources, None, "merged");
    assert!(
        b.timeseries.iter().all(|p| p.output_tokens_per_s.is_none()),
        "merged"
    );
    let t = &b.throughput;
    let inputs = t.inputs_per_s.expect("merged inputs/s") * b.measured_window.duration_s;
    assert!(
        (inputs - 72.0).abs() < 0.5,
        "3 inputs x 24 requests: {inputs}"
    );
}

#[test]
fn comparing_rerank_reports_judges_inputs_per_s_not_generation() {
    let server = mock(MockConfig::instant());
    let runs: Vec<Finished> = (0..2)
        .map(|_| {
            bench_format(&server, "rerank", "prompt_tokens=8,documents=4", 20)
                .outputs("json")
                .run()
        })
        .collect();
    for r in &runs {
        ok_report(r);
    }
    let compared = crate::support::llmsurge()
        .args(["benchmark", "compare"])
        .arg(runs[0].report_path())
        .arg(runs[1].report_path())
        .output()
        .expect("compare runs");
    let out = String::from_utf8_lossy(&compared.stdout);
    assert!(
        compared.status.code().is_some_and(|c| c == 0 || c == 3),
        "{}",
        String::from_utf8_lossy(&compared.stderr)
    );
    assert!(out.contains("inputs_per_s"), "{out}");
    for absent in ["output_tokens_per_s", "ttft", "itl", "tpot"] {
        assert!(!out.contains(absent), "{absent} compared:\n{out}");
    }
}

/// A LoRA split of a format without output: each model's section is the whole's shape,
/// its generation metrics absent too, and its count the server's.
#[test]
fn a_split_of_rerank_requests_leaves_generation_metrics_out_of_every_model() {
    let server = mock(MockConfig {
        model: vec!["base".into(), "a".into(), "b".into()],
        ..MockConfig::instant()
    });
    let run = bench_format(&server, "rerank", "prompt_tokens=8,documents=2", 40)
        .model("base")
        .arg("--lora", "a,b")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let stats = server.stats();
    assert_eq!(b.models.len(), 2, "{:?}", b.models);
    for m in &b.models {
        assert_eq!(
            m.requests.created, stats.models[&m.model].requests,
            "{}",
            m.model
        );
        assert!(m.metrics.contains_key("request_latency"), "{}", m.model);
        assert_eq!(m.throughput.output_tokens_per_s, None, "{}", m.model);
        for key in GENERATION_KEYS {
            assert!(!m.metrics.contains_key(key), "{}: {key}", m.model);
            assert!(
                !m.class_histograms
                    .keys()
                    .any(|k| k.ends_with(&format!(".{key}"))),
                "{}: {key}",
                m.model
            );
        }
    }
}

/// Issue 27 §3: a ranking server reads each (query, document) pair as one sequence, so it
/// counts the query once per document; the client's count of a rerank request must too,
/// or the prompt-token cross-check of requests sent but never answered disagrees (the
/// README's rerank example said DISAGREES). Every request here is cut off unanswered, so
/// the client's side of the check is its own count, compared with what the mock counted
/// on arrival.
#[test]
fn the_clients_rerank_prompt_count_is_the_mocks() {
    let server = mock(MockConfig {
        // A ranking is answered after its time to first token: never, within the run.
        ttft_ms: 60_000.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .format("rerank")
        .concurrent(3)
        .max_seconds(1)
        .data("prompt_tokens=64,documents=6")
        .outputs("json")
        .run();
    let report = run.report();
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 0, "{}", run.stderr);
    let counted = server.stats().prompt_tokens;
    assert!(counted > 0, "the mock read the prompts");
    let check = b
        .server_metrics
        .as_ref()
        .and_then(|m| m.cross_checks.iter().find(|c| c.name == "prompt_tokens"))
        .unwrap_or_else(|| panic!("a prompt_tokens cross-check: {}", run.stderr));
    assert_eq!(
        check.server, counted as f64,
        "the check reads the mock's counter"
    );
    let client = check.client_upper.unwrap_or(check.client);
    assert!(
        (client - check.server).abs() <= 0.02 * check.server,
        "client {client} vs mock {}",
        check.server
    );
    assert!(check.agrees, "{check:?}");
}

/// A pooling format generates nothing: a spec of prompt lengths alone is complete. An
/// embeddings request then carries one text, a rerank or score request a query and 10
/// documents (as the mock received them, and as the report's inputs/s counts them).
#[test]
fn a_pooling_format_needs_no_output_tokens() {
    for (format, documents_key, inputs) in [
        ("embeddings", "input", 1),
        ("rerank", "documents", 10),
        ("score", "text_2", 10),
    ] {
        let (server, _dir, record) = recording(MockConfig::instant());
        let run = bench_format(&server, format, "prompt_tokens=32", 6).run();
        let report = ok_report(&run);
        let b = &report.benchmarks[0];
        assert_eq!(b.requests.completed, 6, "{format}: {}", run.stderr);
        assert_eq!(endpoint_count(&server.stats(), format), 6, "{format}");
        server.shutdown();
        let lines = crate::support::recorded(&record);
        assert_eq!(lines.len(), 6, "{format}");
        for line in &lines {
            let body = &line["body"];
            let items = body[documents_key]
                .as_array()
                .unwrap_or_else(|| panic!("{format}: {documents_key} is a list: {body}"));
            assert_eq!(items.len(), inputs, "{format}: {body}");
            for key in ["max_tokens", "max_completion_tokens"] {
                assert!(body.get(key).is_none(), "{format}: {key} in {body}");
            }
        }
        let t = &b.throughput;
        let per_s = t.inputs_per_s.expect("inputs/s");
        assert!(
            (per_s - inputs as f64 * t.requests_per_s).abs() < 1e-6 * per_s,
            "{format}: {per_s} inputs/s at {} req/s",
            t.requests_per_s
        );
    }
}
