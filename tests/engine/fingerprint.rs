//! The server's fingerprint (docs/report.md) against what the mock was told and publishes
//! (`/version`, `/server_info`, `/v1/models`, the `server` header, `/metrics`), a restart
//! of the mock on the same port during a run, and `benchmark compare`'s gate on the
//! servers of two runs (docs/ci.md): a changed model, engine version or prefix-caching
//! flag fails it, each named, unless `--allow-server-change`; a warm server is a warning.

use crate::scenario::Bench;
use crate::support::{llmsurge, mock, start_run, wait_completed, wait_run};
use llmsurge::mock::{MetricsFault, MockConfig, MockServer, MockStats};
use llmsurge_coordinator::server_metrics::fingerprint::{Fact, Reading, ServerFingerprint};
use std::path::{Path, PathBuf};

const DATA: &str = "prompt_tokens=16,output_tokens=4";

fn fingerprint(report: &llmsurge::report::Report) -> &ServerFingerprint {
    report
        .server_fingerprint
        .as_ref()
        .expect("the report has the server's fingerprint")
}

/// A fact's value and source.
fn fact(f: &Fact) -> (&str, &str) {
    (f.value.as_deref().unwrap_or("<unknown>"), f.source.as_str())
}

fn config<'a>(r: &'a Reading, key: &str) -> &'a Fact {
    r.config
        .get(key)
        .unwrap_or_else(|| panic!("no config {key}: {:?}", r.config))
}

fn successes(s: &MockStats) -> u64 {
    s.request_success.stop + s.request_success.length
}

/// A mock told its version, model root and length, one LoRA adapter, prefix caching off.
fn told() -> MockConfig {
    MockConfig {
        engine_version: "0.9.1".into(),
        model_root: Some("/models/llama-3-8b".into()),
        max_model_len: 4096,
        model: vec!["m".into(), "adapter-a".into()],
        lora_adapters: vec![("adapter-a".into(), "/lora/a".into())],
        prefix_caching: false,
        ..MockConfig::instant()
    }
}

#[test]
fn the_fingerprint_is_read_from_every_source_the_mock_publishes() {
    let server = mock(told());
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(4)
        .data(DATA)
        .outputs("json,csv,console")
        .run();
    let after = server.stats();
    let report = crate::support::ok_report(&run);
    let fp = fingerprint(&report);
    let b = &fp.before;
    assert_eq!(fact(&b.engine), ("vllm", "metric names vllm:*"));
    assert_eq!(fact(&b.engine_version), ("0.9.1", "GET /version"));
    assert_eq!(
        fact(&b.server_header),
        ("llmsurge-mock/0.9.1", "response header server")
    );
    assert_eq!(fact(&b.model), ("m", "GET /v1/models"));
    assert_eq!(
        fact(&b.model_root),
        ("/models/llama-3-8b", "GET /v1/models")
    );
    assert_eq!(fact(&b.max_model_len), ("4096", "GET /v1/models"));
    assert_eq!(fact(&b.lora_adapters), ("adapter-a", "GET /v1/models"));
    let metric = "metric vllm:cache_config_info";
    assert_eq!(fact(config(b, "enable_prefix_caching")), ("false", metric));
    assert_eq!(fact(config(b, "block_size")), ("16", metric));
    assert_eq!(fact(config(b, "cache_dtype")), ("auto", metric));
    assert_eq!(
        fact(config(b, "max_lora")),
        ("1", "metric vllm:lora_requests_info")
    );
    // What no source gives is unknown with the reason, not absent.
    let chunked = config(b, "enable_chunked_prefill");
    assert!(
        chunked.value.is_none()
            && chunked.source == "unknown"
            && chunked
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("/server_info: not in the answer")),
        "{chunked:?}"
    );
    // The start time the mock publishes, and its counters: cold before, the run's after.
    assert_eq!(b.process_start_time.number(), Some(server.started_unix()));
    assert_eq!(b.requests_served.number(), Some(0.0));
    let a = fp.after.as_ref().expect("read after the load");
    assert_eq!(a.requests_served.number(), Some(successes(&after) as f64));
    assert_eq!(successes(&after), 4);
    assert_eq!(
        a.prefix_cache_hits.number(),
        Some(after.prefix_cache_hits as f64)
    );
    assert_eq!(after.prefix_cache_hits, 0, "prefix caching is off");
    assert!(fp.warnings.is_empty(), "{:?}", fp.warnings);
    // The console's Server block and the CSV's key columns.
    assert!(
        run.stdout
            .contains("Server\n  Engine: vllm 0.9.1 (server header: llmsurge-mock/0.9.1)"),
        "{}",
        run.stdout
    );
    let csv = run.csv_first_row();
    assert_eq!(csv.cell("server_engine_version"), "0.9.1");
    assert_eq!(csv.cell("server_enable_prefix_caching"), "false");
    assert_eq!(csv.cell("server_model_root"), "/models/llama-3-8b");
    // `benchmark from-file` keeps it.
    let again = run.dir.path().join("again");
    let out = llmsurge()
        .args(["benchmark", "from-file"])
        .arg(run.report_path())
        .args(["--outputs", "json", "--output-dir"])
        .arg(&again)
        .output()
        .expect("from-file runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reloaded: llmsurge::report::Report =
        serde_json::from_slice(&std::fs::read(again.join("benchmarks.json")).expect("json"))
            .expect("parses");
    assert_eq!(reloaded.server_fingerprint.as_ref(), Some(fp));
}

#[test]
fn without_metrics_the_configuration_comes_from_server_info_and_a_hung_page_is_bounded() {
    // No /metrics: the cache configuration from vLLM's /server_info instead.
    let server = mock(MockConfig {
        no_metrics: true,
        ..told()
    });
    let report = Bench::on(&server)
        .synchronous()
        .max_requests(2)
        .data(DATA)
        .ok_report();
    let b = &fingerprint(&report).before;
    assert_eq!(
        fact(config(b, "enable_prefix_caching")),
        ("false", "GET /server_info")
    );
    assert_eq!(fact(config(b, "block_size")), ("16", "GET /server_info"));
    assert_eq!(fact(&b.engine), ("vllm", "GET /server_info"));
    assert_eq!(fact(&b.engine_version), ("0.9.1", "GET /version"));
    assert!(
        b.process_start_time.value.is_none()
            && b.process_start_time
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("GET /metrics: HTTP 404")),
        "{:?}",
        b.process_start_time
    );
    // A metrics page that never answers: unknown with the reason, and the run goes on.
    let hung = mock(MockConfig {
        metrics_fault: Some(MetricsFault::Hang),
        ..told()
    });
    let report = Bench::on(&hung)
        .synchronous()
        .max_requests(2)
        .data(DATA)
        .ok_report();
    let b = &fingerprint(&report).before;
    assert!(
        b.requests_served
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("no answer within")),
        "{:?}",
        b.requests_served
    );
    assert_eq!(fact(&b.engine_version), ("0.9.1", "GET /version"));
    hung.shutdown();
}

#[test]
fn a_restart_of_the_server_during_the_run_is_said() {
    let first = mock(MockConfig::instant());
    let port = first.addr().port();
    let started_first = first.started_unix();
    let (child, dir) = start_run(
        &[
            "--target",
            &first.base_url(),
            "--profile",
            "constant",
            // Four seconds of load: the restart lands well inside it on a busy machine.
            "--rate",
            "25",
            "--max-requests",
            "100",
            "--data",
            DATA,
            "--outputs",
            "json",
        ],
        |_| {},
    );
    // Restarted once the run has visibly started, on the same port.
    wait_completed(&first, 5);
    first.shutdown();
    // Upgraded while it was down: the run measured two servers.
    let second = MockServer::start(MockConfig {
        port,
        engine_version: "2.0.0-restarted".into(),
        ..MockConfig::instant()
    })
    .expect("the mock starts again on the same port");
    let run = wait_run(child, dir);
    let report = run.report();
    crate::support::assert_identity(&report);
    let fp = fingerprint(&report);
    assert_eq!(fp.before.process_start_time.number(), Some(started_first));
    let after = fp.after.as_ref().expect("read after the load");
    assert_eq!(
        after.process_start_time.number(),
        Some(second.started_unix())
    );
    assert_ne!(started_first, second.started_unix());
    let restart = fp
        .warnings
        .iter()
        .find(|w| w.contains("restarted during the run"))
        .unwrap_or_else(|| panic!("no restart warning: {:?}", fp.warnings));
    assert!(
        restart.contains(&format!("process_start_time_seconds was {started_first}")),
        "{restart}"
    );
    assert!(
        run.stderr
            .contains("warning: the server restarted during the run"),
        "{}",
        run.stderr
    );
    // Break test of issue 41: compare judged such a run as one server's. Its change
    // under the load fails the gate (named, with both readings) and the restart is said;
    // allowed, only the warning stays.
    let before_version = fp.before.engine_version.value.clone().expect("a version");
    let (code, stderr) = compare(&run.report_path(), &run.report_path(), &[], &[]);
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the server changed during the current run: {before_version} before its load, 2.0.0-restarted after, in engine_version"
        )) && stderr.contains("the baseline run: the server restarted during the run"),
        "{stderr}"
    );
    let (code, stderr) = compare(
        &run.report_path(),
        &run.report_path(),
        &["--allow-server-change", "engine_version"],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    // The allowed change still names the run it happened in.
    assert!(
        stderr.contains(&format!(
            "warning: the server changed during the current run, allowed by --allow-server-change: engine_version {before_version} -> 2.0.0-restarted"
        )),
        "{stderr}"
    );
    // Two reports without fingerprints (written before llmsurge recorded one): the gate
    // could check nothing of the servers, and says so.
    let old = |name: &str| {
        let mut report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.report_path()).expect("read")).expect("json");
        report
            .as_object_mut()
            .expect("an object")
            .remove("server_fingerprint");
        let path = run.dir.path().join(name);
        std::fs::write(&path, report.to_string()).expect("write");
        path
    };
    let (code, stderr) = compare(&old("a.json"), &old("b.json"), &[], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("warning: neither report has a server fingerprint"),
        "{stderr}"
    );
}

/// A short run's report against `server`, copied to `dir/name`.
fn report_of(server: &MockServer, dir: &Path, name: &str, data: &str) -> PathBuf {
    let run = Bench::on(server)
        .synchronous()
        .max_requests(6)
        .data(data)
        .outputs("json")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let path = dir.join(name);
    std::fs::copy(run.report_path(), &path).expect("copy the report");
    path
}

/// `benchmark compare BASE CUR ARGS`, judging only the error rate with room to spare, so
/// that only the servers can fail the gate: (exit code, stderr).
fn compare(base: &Path, cur: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = llmsurge();
    cmd.args(["benchmark", "compare"])
        .arg(base)
        .arg(cur)
        .args([
            "--max-regression",
            "error_rate=+100pp",
            "--max-regression-only",
        ])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("compare runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn compare_fails_on_a_changed_model_engine_version_or_prefix_caching_unless_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // One root for every name: a renamed model is the `model` field alone.
    let base_cfg = || MockConfig {
        engine_version: "0.9.0".into(),
        model: vec!["m".into()],
        model_root: Some("/models/shared".into()),
        ..MockConfig::instant()
    };
    let base = report_of(&mock(base_cfg()), d, "base.json", DATA);
    let same = report_of(&mock(base_cfg()), d, "same.json", DATA);
    let model = report_of(
        &mock(MockConfig {
            model: vec!["m2".into()],
            ..base_cfg()
        }),
        d,
        "model.json",
        DATA,
    );
    let version = report_of(
        &mock(MockConfig {
            engine_version: "0.9.1".into(),
            ..base_cfg()
        }),
        d,
        "version.json",
        DATA,
    );
    let caching = report_of(
        &mock(MockConfig {
            prefix_caching: false,
            ..base_cfg()
        }),
        d,
        "caching.json",
        DATA,
    );
    // The same server passes.
    let (code, err) = compare(&base, &same, &[], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("the server changed"), "{err}");
    // Each change fails the gate (exit 3), named with both values.
    for (path, field, from, to) in [
        (&model, "model", "m", "m2"),
        (&version, "engine_version", "0.9.0", "0.9.1"),
        (&caching, "enable_prefix_caching", "true", "false"),
    ] {
        let (code, err) = compare(&base, path, &[], &[]);
        assert_eq!(code, 3, "{field}: {err}");
        let line = format!(
            "gate failed: the server changed: {from} (baseline) vs {to} (current) in {field}; --allow-server-change {field} compares them anyway"
        );
        assert!(err.contains(&line), "{field}: {err}");
        // Allowed by name (flag or variable), or all: the gate passes and says what changed.
        for (args, env) in [
            (vec!["--allow-server-change", field], vec![]),
            (vec![], vec![("LLMSURGE_ALLOW_SERVER_CHANGE", field)]),
            (vec!["--allow-server-change", "cache_dtype,all"], vec![]),
        ] {
            let (code, err) = compare(&base, path, &args, &env);
            assert_eq!(code, 0, "{field} {args:?} {env:?}: {err}");
            assert!(
                err.contains(&format!(
                    "warning: the server changed, allowed by --allow-server-change: {field} {from} -> {to}"
                )),
                "{field}: {err}"
            );
        }
        // Another field allowed does not allow this one.
        let (code, _) = compare(&base, path, &["--allow-server-change", "block_size"], &[]);
        assert_eq!(code, 3, "{field}");
    }
    // The JUnit and JSON outputs carry the failure too.
    let (junit, json) = (d.join("gate.xml"), d.join("gate.json"));
    let (code, err) = compare(
        &base,
        &version,
        &[
            "--junit",
            junit.to_str().expect("utf-8"),
            "--json",
            json.to_str().expect("utf-8"),
        ],
        &[],
    );
    assert_eq!(code, 3, "{err}");
    let xml = std::fs::read_to_string(&junit).expect("junit");
    assert!(
        xml.contains("<failure")
            && xml.contains("0.9.0 (baseline) vs 0.9.1 (current) in engine_version"),
        "{xml}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("JSON");
    let changes = json["server"]["changes"]
        .as_array()
        .expect("server.changes");
    assert!(
        changes.iter().any(|c| c["field"] == "engine_version"
            && c["baseline"] == "0.9.0"
            && c["candidate"] == "0.9.1"
            && c["gated"] == true),
        "{json}"
    );
    // A field name the gate does not know is a usage error.
    let (code, err) = compare(&base, &version, &["--allow-server-change", "version"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--allow-server-change: unknown field \"version\""),
        "{err}"
    );
}

#[test]
fn a_warm_server_is_said_with_the_counts_the_mock_had() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // Prompts that share a prefix, so the cache has hits to count.
    let data = "prompt_tokens=48,output_tokens=4,prefix_tokens=32,prefix_count=1";
    let base = report_of(&mock(MockConfig::instant()), d, "base.json", data);
    // Requests before the run warm the candidate's server.
    let warm = mock(MockConfig::instant());
    Bench::on(&warm)
        .synchronous()
        .max_requests(5)
        .data(data)
        .seed(7)
        .outputs("json")
        .ok_report();
    let before = warm.stats();
    assert!(before.prefix_cache_hits > 0, "{before:?}");
    let run = Bench::on(&warm)
        .synchronous()
        .max_requests(6)
        .data(data)
        .outputs("json")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let report = run.report();
    let b = &fingerprint(&report).before;
    assert_eq!(b.requests_served.number(), Some(successes(&before) as f64));
    assert_eq!(
        b.prefix_cache_hits.number(),
        Some(before.prefix_cache_hits as f64)
    );
    let said = format!(
        "warning: the server was warm before the first request: it had served {} requests and answered {} prompt tokens from its prefix cache (of {} looked up)",
        successes(&before),
        before.prefix_cache_hits,
        before.prefix_cache_queries
    );
    assert!(run.stderr.contains(&said), "{said}\n{}", run.stderr);
    let cur = d.join("warm.json");
    std::fs::copy(run.report_path(), &cur).expect("copy");
    // Compare: a warning with both sides' counts; it does not fail the gate.
    let (code, err) = compare(&base, &cur, &[], &[]);
    assert_eq!(code, 0, "{err}");
    let warning = format!(
        "warning: the current run's server was warm before its first request ({} requests served, {} prompt tokens answered from its prefix cache) while the baseline's was cold (0 requests, 0 hits)",
        successes(&before),
        before.prefix_cache_hits
    );
    assert!(err.contains(&warning), "{warning}\n{err}");
}

#[test]
fn a_server_behind_a_key_is_read_with_the_runs_key_which_no_output_records() {
    const KEY: &str = "sk-fingerprint-secret-0123456789";
    let server = mock(MockConfig {
        require_api_key: Some(llmsurge_proto::Secret::new(KEY)),
        ..told()
    });
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(2)
        .data(DATA)
        .arg("--api-key", KEY)
        .outputs("json,csv,html,md,console")
        .run();
    let report = crate::support::ok_report(&run);
    // Every source answered the key: the facts are known.
    let b = &fingerprint(&report).before;
    assert_eq!(fact(&b.engine_version), ("0.9.1", "GET /version"));
    assert_eq!(
        fact(config(b, "enable_prefix_caching")),
        ("false", "metric vllm:cache_config_info")
    );
    assert_eq!(b.process_start_time.number(), Some(server.started_unix()));
    assert_eq!(server.stats().unauthorized.total, 0);
    // And the key is in no file and no line of output.
    for entry in std::fs::read_dir(run.dir.path()).expect("the output dir") {
        let path = entry.expect("an entry").path();
        let text = String::from_utf8_lossy(&std::fs::read(&path).expect("a file")).into_owned();
        assert!(!text.contains(KEY), "{} has the key", path.display());
    }
    assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY));
}
