//! The llm-d Benchmark Report (`--outputs llmd`) end to end: every file of a real
//! three-benchmark sweep against the mock validates against the vendored JSON Schema
//! (schemas/llm-d/), holds the run's figures in the schema's units, and `benchmark
//! from-file` writes the same files again.

use crate::scenario::Bench;
use crate::support::{Finished, llmsurge, mock, wait_run};
use llmsurge::mock::{MockConfig, MockServer};
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;

const SCHEMA: &str = include_str!("../../schemas/llm-d/br_v0_2_json_schema.json");

/// Answers of 5 ms to the first token and 1 ms per token after it: latencies in seconds
/// are then at least 0.005, which a report in milliseconds or microseconds would miss.
fn slow_enough() -> MockServer {
    mock(MockConfig {
        ttft_ms: 5.0,
        itl_ms: 1.0,
        output_tokens: 8,
        // What the server publishes of itself: the stack must carry it as read.
        engine_version: ENGINE_VERSION.into(),
        model_root: Some(MODEL_ROOT.into()),
        ..MockConfig::instant()
    })
}

const ENGINE_VERSION: &str = "0.11.2-llmd";
const MODEL_ROOT: &str = "/models/llmd-tiny";

/// A sweep of three benchmarks (synchronous, throughput, one constant rate) of 20
/// requests each, writing the JSON report and the llm-d reports.
fn sweep(server: &MockServer) -> Finished {
    let run = Bench::target(&server.base_url())
        .profile("sweep")
        .rate(3)
        .max_requests(20)
        .data("prompt_tokens=16,output_tokens=8")
        .outputs("json,llmd")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    run
}

fn llmd_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the output dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("benchmark_report_v0.2,_"))
        .collect();
    names.sort();
    names
}

/// The vendored schema, compiled as JSON Schema draft 2020-12 (what Pydantic writes; the
/// file names no draft) with `format` asserted, so a timestamp must be RFC 3339.
fn validator() -> (boon::Schemas, boon::SchemaIndex) {
    let schema: Value = serde_json::from_str(SCHEMA).expect("the vendored schema is JSON");
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V2020_12);
    compiler.enable_format_assertions();
    compiler
        .add_resource("br_v0_2_json_schema.json", schema)
        .expect("the schema loads");
    let index = compiler
        .compile("br_v0_2_json_schema.json", &mut schemas)
        .expect("the vendored schema compiles");
    (schemas, index)
}

/// Why `doc` does not validate, every error; empty when it does.
fn errors(validator: &(boon::Schemas, boon::SchemaIndex), doc: &Value) -> String {
    match validator.0.validate(doc, validator.1) {
        Ok(()) => String::new(),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn llmd_reports_of_a_sweep_validate_against_the_vendored_schema() {
    let server = slow_enough();
    let run = sweep(&server);
    let report = run.report();
    assert_eq!(report.benchmarks.len(), 3);
    let names = llmd_files(run.dir.path());
    assert_eq!(
        names,
        [
            "benchmark_report_v0.2,_0.yaml",
            "benchmark_report_v0.2,_1.yaml",
            "benchmark_report_v0.2,_2.yaml"
        ],
        "one file per benchmark"
    );

    let validator = validator();
    let mut total = 0;
    let mut uids = std::collections::BTreeSet::new();
    for (i, name) in names.iter().enumerate() {
        let text = std::fs::read_to_string(run.dir.path().join(name)).expect("read");
        let doc: Value = serde_saphyr::from_str(&text).expect("the report is YAML");
        let found = errors(&validator, &doc);
        assert!(found.is_empty(), "{name}: {found}\n{text}");

        let b = &report.benchmarks[i];
        assert_eq!(doc["version"], "0.2");
        assert_eq!(doc["scenario"]["load"]["standardized"]["stage"], b.index);
        let requests = &doc["results"]["request_performance"]["aggregate"]["requests"];
        assert_eq!(requests["failures"], 0);
        total += requests["total"].as_u64().expect("total");
        // The mock answered every request with exactly 8 tokens.
        assert_eq!(requests["output_length"]["mean"], 8.0, "{name}");
        assert_eq!(requests["output_length"]["units"], "count");
        // Seconds: the mock waits 5 ms before the first token, then 1 ms per token.
        let latency = &doc["results"]["request_performance"]["aggregate"]["latency"];
        assert_eq!(latency["time_to_first_token"]["units"], "s");
        let ttft_min = latency["time_to_first_token"]["min"].as_f64().expect("min");
        assert!((0.005..1.0).contains(&ttft_min), "{name}: TTFT {ttft_min}");
        let e2e_min = latency["request_latency"]["min"].as_f64().expect("min");
        assert!((0.010..1.0).contains(&e2e_min), "{name}: e2e {e2e_min}");
        assert_eq!(latency["inter_token_latency"]["units"], "s/token");
        // The server's own gauges (the mock publishes vLLM's) as the JSON report has them
        // over the measured window (a short benchmark may fall between two scrapes),
        // tied to the stack's server.
        let server = &doc["results"]["observability"]["components"][0];
        let kv = &server["aggregate"]["kv_cache_usage"];
        let scraped = b
            .server_metrics
            .as_ref()
            .and_then(|m| m.summary.get("kv_cache_usage_perc"))
            .and_then(|g| g.mean);
        match scraped {
            Some(mean) => {
                assert_eq!(kv["units"], "fraction", "{name}");
                assert_eq!(kv["mean"], mean, "{name}");
                assert_eq!(
                    server["component_label"],
                    doc["scenario"]["stack"][0]["metadata"]["label"]
                );
            }
            None => assert!(kv.is_null(), "{name}: {kv}"),
        }
        // The scenario's server is the fingerprint the run read: the mock's own version
        // and model root as standardized facts, every fact with its source natively.
        let stack = &doc["scenario"]["stack"][0];
        assert_eq!(
            stack["standardized"]["tool_version"], ENGINE_VERSION,
            "{name}"
        );
        assert_eq!(stack["standardized"]["model_root"], MODEL_ROOT, "{name}");
        let before = &stack["native"]["config"]["before"];
        assert_eq!(before["engine_version"]["value"], ENGINE_VERSION, "{name}");
        assert!(
            before["engine_version"]["source"]
                .as_str()
                .is_some_and(|s| s.contains("/version") || s.contains("server_info")),
            "{name}: {before}"
        );
        uids.insert(doc["run"]["uid"].as_str().expect("uid").to_string());
    }
    // Every request the mock served is in exactly one report.
    assert_eq!(total, server.stats().requests.chat_completions);
    assert_eq!(uids.len(), 3, "each report has its own uid");

    // The check can fail: a report with a unit the schema does not know is refused.
    let text = std::fs::read_to_string(run.dir.path().join(&names[0])).expect("read");
    let mut broken: Value = serde_saphyr::from_str(&text).expect("YAML");
    broken["results"]["request_performance"]["aggregate"]["requests"]["input_length"]["units"] =
        "tokens".into();
    assert!(!errors(&validator, &broken).is_empty());
}

#[test]
fn from_file_rerenders_the_llmd_reports_byte_for_byte() {
    let server = slow_enough();
    let run = sweep(&server);
    let served = server.stats().requests.chat_completions;
    let out = tempfile::tempdir().expect("tempdir");
    let mut cmd = llmsurge();
    cmd.args(["benchmark", "from-file"])
        .arg(run.report_path())
        .args(["--outputs", "llmd", "--output-dir"])
        .arg(out.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let again = wait_run(
        cmd.spawn().expect("llmsurge starts"),
        tempfile::tempdir().expect("tmp"),
    );
    assert_eq!(again.code(), 0, "{}", again.stderr);
    assert_eq!(
        server.stats().requests.chat_completions,
        served,
        "from-file sent requests"
    );
    let names = llmd_files(run.dir.path());
    assert_eq!(names.len(), 3);
    assert_eq!(llmd_files(out.path()), names);
    for name in &names {
        let first = std::fs::read(run.dir.path().join(name)).expect("read");
        let second = std::fs::read(out.path().join(name)).expect("read");
        assert!(first == second, "{name} differs after from-file");
    }
}

/// `benchmark from-file REPORT --outputs llmd --output-dir DIR`, which must pass.
/// Writes the llm-d files of `report` into `dir`; returns what llmsurge said on stderr.
fn render_llmd(report: &Path, dir: &Path) -> String {
    let mut cmd = llmsurge();
    cmd.args(["benchmark", "from-file"])
        .arg(report)
        .args(["--outputs", "llmd", "--output-dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let done = wait_run(
        cmd.spawn().expect("llmsurge starts"),
        tempfile::tempdir().expect("tmp"),
    );
    assert_eq!(done.code(), 0, "{}", done.stderr);
    done.stderr
}

/// An earlier run's numbered files are removed past a gap in the numbers, one line each,
/// and a file of the same pattern that llmsurge did not write is kept and said.
#[test]
fn every_earlier_llmd_file_goes_and_a_users_file_of_that_name_stays() {
    let server = slow_enough();
    let out = tempfile::tempdir().expect("tempdir");
    render_llmd(&sweep(&server).report_path(), out.path());
    // A gap in the numbers, and a copy under a name llm-d's glob reads too.
    std::fs::rename(
        out.path().join("benchmark_report_v0.2,_1.yaml"),
        out.path().join("benchmark_report_v0.2,_01.yaml"),
    )
    .expect("mv");
    let users = out.path().join("benchmark_report_v0.2,_5.yaml");
    std::fs::write(&users, "run:\n  description: my own notes\n").expect("write");
    let single = Bench::target(&server.base_url())
        .constant(20)
        .max_requests(5)
        .data("prompt_tokens=16,output_tokens=8")
        .outputs("json")
        .run();
    assert_eq!(single.code(), 0, "{}", single.stderr);
    let said = render_llmd(&single.report_path(), out.path());
    assert_eq!(
        llmd_files(out.path()),
        [
            "benchmark_report_v0.2,_0.yaml",
            "benchmark_report_v0.2,_5.yaml"
        ],
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(&users).expect("read"),
        "run:\n  description: my own notes\n"
    );
    let line = |start: &str, name: &str| {
        said.lines()
            .filter(|l| l.starts_with(start) && l.contains(name))
            .count()
    };
    assert_eq!(line("removed ", ",_2.yaml"), 1, "{said}");
    assert_eq!(line("removed ", ",_01.yaml"), 1, "{said}");
    assert_eq!(line("warning: kept ", ",_5.yaml"), 1, "{said}");
}

/// A directory that held a three-benchmark sweep's files, written again by a shorter
/// `--repeat 2` run, holds that run's two files alone (llm-d's glob would have mixed the
/// sweep's third in), and the repeated runs, one stage, are told apart by their run.
#[test]
fn a_shorter_repeated_run_replaces_the_llmd_files_of_a_longer_one() {
    let server = slow_enough();
    let out = tempfile::tempdir().expect("tempdir");
    render_llmd(&sweep(&server).report_path(), out.path());
    assert_eq!(llmd_files(out.path()).len(), 3);
    let repeated = Bench::target(&server.base_url())
        .constant(20)
        .max_requests(5)
        .repeat(2)
        .data("prompt_tokens=16,output_tokens=8")
        .outputs("json")
        .run();
    assert_eq!(repeated.code(), 0, "{}", repeated.stderr);
    let report: Value =
        serde_json::from_slice(&std::fs::read(repeated.report_path()).expect("read"))
            .expect("json");
    let runs: Vec<u64> = report["benchmarks"]
        .as_array()
        .expect("benchmarks")
        .iter()
        .map(|b| b["run"].as_u64().expect("a repeated benchmark has its run"))
        .collect();
    assert_eq!(runs, [0, 1]);
    render_llmd(&repeated.report_path(), out.path());
    let names = llmd_files(out.path());
    assert_eq!(
        names,
        [
            "benchmark_report_v0.2,_0.yaml",
            "benchmark_report_v0.2,_1.yaml"
        ]
    );
    for (name, run) in names.iter().zip(runs) {
        let text = std::fs::read_to_string(out.path().join(name)).expect("read");
        let doc: Value = serde_saphyr::from_str(&text).expect("the report is YAML");
        let load = &doc["scenario"]["load"];
        assert_eq!(
            load["standardized"]["stage"], 0,
            "{name}: one stage repeated"
        );
        let label = format!("constant@20 (run {})", run + 1);
        assert_eq!(load["metadata"]["description"], label.as_str(), "{name}");
        assert!(
            doc["run"]["description"]
                .as_str()
                .is_some_and(|d| d.ends_with(&format!("[{label}]"))),
            "{name}: {}",
            doc["run"]["description"]
        );
    }
}
