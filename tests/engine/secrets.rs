//! Issue 29: a secret given in any way reaches the server and no output. A marker is
//! given as `--api-key`, `LLMSURGE_API_KEY`, `OPENAI_API_KEY`, a URL's password, a URL
//! query value, a `--backend-kwargs` query parameter, headers of known and custom names
//! and a header in a scenario file; runs write every report format, the request log and
//! debug logs; `--dry-run`, `config` and `k8s job` print what they print. The marker is
//! in no file of the output directories and in no stream, while the mock's record (in a
//! directory of its own, its credentials opted in with `--show-header`) shows that every
//! request carried each secret.

use crate::scenario::Bench;
use crate::support::{Finished, llmsurge, mock, recorded, recording, wait_run};
use base64::Engine as _;
use llmsurge::mock::MockConfig;
use std::path::Path;

/// In every secret, so one search finds any of them.
const MARK: &str = "sk-llmsurge-marker";

fn secret(way: &str) -> String {
    format!("{MARK}-{way}")
}

/// Headers the mock records (lowercase), and opts in, as the test must see their values.
const RECORDED: [&str; 6] = [
    "authorization",
    "x-api-key",
    "api-key",
    "x-gateway-key",
    "ocp-apim-subscription-key",
    "x-scenario-key",
];

fn recording_mock(record: &Path) -> llmsurge::mock::MockServer {
    mock(MockConfig {
        record: Some(record.to_path_buf()),
        record_header: RECORDED.map(String::from).to_vec(),
        show_header: RECORDED.map(String::from).to_vec(),
        show_query_param: vec!["key".into(), "code".into()],
        output_tokens: 4,
        ..MockConfig::instant()
    })
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("readable dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// The marker is nowhere: not in a stream, not in a file under the output directory.
fn assert_no_marker(what: &str, stdout: &str, stderr: &str, dir: Option<&Path>) {
    assert!(
        !stdout.contains(MARK),
        "{what}: stdout holds a secret:\n{stdout}"
    );
    assert!(
        !stderr.contains(MARK),
        "{what}: stderr holds a secret:\n{stderr}"
    );
    for file in dir.map(files).unwrap_or_default() {
        let bytes = std::fs::read(&file).expect("readable file");
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(MARK),
            "{what}: {} holds a secret",
            file.display()
        );
    }
}

fn assert_clean_run(what: &str, run: &Finished) {
    assert_eq!(run.code(), 0, "{what}: {}", run.stderr);
    assert_no_marker(what, &run.stdout, &run.stderr, Some(run.dir.path()));
}

/// Whether some recorded request carried `value` in header `name`.
fn arrived_in_header(lines: &[serde_json::Value], name: &str, value: &str) -> bool {
    lines.iter().any(|l| l["headers"][name] == value)
}

/// Whether some recorded request carried `name=value` in its query.
fn arrived_in_query(lines: &[serde_json::Value], name: &str, value: &str) -> bool {
    let pair = format!("{name}={value}");
    lines.iter().any(|l| {
        l["query"]
            .as_str()
            .is_some_and(|q| q.split('&').any(|p| p == pair))
    })
}

/// The value the report's args give header `name`.
fn header(args: &serde_json::Value, name: &str) -> Option<String> {
    args["backend"]["headers"]
        .as_array()?
        .iter()
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair[1].as_str().map(str::to_string))
}

#[test]
fn a_secret_given_in_any_way_reaches_the_server_and_no_output() {
    let record_dir = tempfile::tempdir().expect("tempdir");
    let record = record_dir.path().join("record.jsonl");
    let server = recording_mock(&record);
    let port = server
        .base_url()
        .rsplit(':')
        .next()
        .expect("a port")
        .to_string();
    // The password, a query value of the URL and a `params` value; `api-version` is a
    // query name that stays.
    let target = format!(
        "http://bench:{}@127.0.0.1:{port}/v1?api-version=2024-10-21&key={}",
        secret("userinfo"),
        secret("query")
    );
    let kwargs = format!(
        r#"{{"headers": {{"api-key": "{}", "X-Gateway-Key": "{}", "Ocp-Apim-Subscription-Key": "{}"}}, "params": {{"code": "{}"}}, "extra_body": {{"api_key": "{}"}}}}"#,
        secret("known-header"),
        secret("custom-header"),
        secret("azure-header"),
        secret("param"),
        secret("body"),
    );
    let short = |target: &str| {
        Bench::target(target)
            .max_requests(6)
            .data("prompt_tokens=8,output_tokens=4")
    };

    // 1. --api-key (the anthropic format sends it in x-api-key, leaving Authorization to
    // the URL's password), every format, the request log, debug logs, the target's
    // /metrics scraped through the same URL.
    let key = secret("flag");
    let run = short(&target)
        .format("anthropic")
        .arg("--api-key", &key)
        .arg("--backend-kwargs", &kwargs)
        .outputs("json,csv,html,yaml,console,junit,md,llmd")
        .slo("ttft_p50<=60s")
        .request_log("requests.jsonl")
        .run_with_env(&[("LLMSURGE_LOG", "debug")]);
    assert_clean_run("--api-key run", &run);
    for name in [
        "benchmarks.json",
        "benchmarks.csv",
        "benchmarks.html",
        "benchmarks.yaml",
        "benchmarks.junit.xml",
        "benchmarks.md",
        "benchmark_report_v0.2,_0.yaml",
        "requests.jsonl",
    ] {
        assert!(run.dir.path().join(name).is_file(), "{name} written");
    }
    // What the report does show: where the load went, with names and no values.
    let report = run.report();
    assert!(
        report
            .target
            .base_url
            .starts_with("http://<redacted>@127.0.0.1:")
            && report
                .target
                .base_url
                .ends_with("/?api-version=<redacted>&key=<redacted>"),
        "{}",
        report.target.base_url
    );
    assert_eq!(
        header(&report.args, "X-Gateway-Key").as_deref(),
        Some("<redacted>")
    );
    assert_eq!(report.args["backend"]["api_key"], "<redacted>");
    // A body field named like a credential: sent, shown by name only.
    assert_eq!(
        report.args["backend"]["extra_body"]["api_key"],
        "<redacted>"
    );
    // Every request went to the API under the URL's path, its query kept.
    assert_eq!(report.benchmarks[0].requests.completed, 6);
    assert_eq!(
        report.args["backend"]["params"],
        serde_json::json!([["code", "<redacted>"]])
    );

    // 2. LLMSURGE_API_KEY and a header from a scenario file.
    let scenario_dir = tempfile::tempdir().expect("tempdir");
    let scenario = scenario_dir.path().join("gateway.json");
    std::fs::write(
        &scenario,
        serde_json::json!({
            "backend_kwargs": {"headers": {"X-Scenario-Key": secret("scenario-header")}},
            "outputs": "json,console",
        })
        .to_string(),
    )
    .expect("scenario written");
    let plain_target = server.base_url();
    let run = short(&plain_target)
        .arg("--scenario", scenario.to_str().expect("utf-8 path"))
        .run_with_env(&[
            ("LLMSURGE_API_KEY", &secret("env")),
            ("LLMSURGE_LOG", "debug"),
        ]);
    assert_clean_run("LLMSURGE_API_KEY run", &run);

    // 3. OPENAI_API_KEY.
    let run = short(&plain_target)
        .outputs("json")
        .run_with_env(&[("OPENAI_API_KEY", &secret("openai"))]);
    assert_clean_run("OPENAI_API_KEY run", &run);

    // The mock saw every secret: the requests carried them all.
    let lines = recorded(&record);
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("bench:{}", secret("userinfo")))
    );
    for (name, value) in [
        ("x-api-key", secret("flag")),
        ("authorization", basic),
        ("api-key", secret("known-header")),
        ("x-gateway-key", secret("custom-header")),
        ("ocp-apim-subscription-key", secret("azure-header")),
        ("x-scenario-key", secret("scenario-header")),
        ("authorization", format!("Bearer {}", secret("env"))),
        ("authorization", format!("Bearer {}", secret("openai"))),
    ] {
        assert!(
            arrived_in_header(&lines, name, &value),
            "no request carried {name}: {value}"
        );
    }
    for (name, value) in [("key", secret("query")), ("code", secret("param"))] {
        assert!(
            arrived_in_query(&lines, name, &value),
            "no request carried ?{name}={value}"
        );
    }

    // 4. --dry-run, with every secret at once.
    let run = short(&target)
        .arg("--api-key", &key)
        .arg("--backend-kwargs", &kwargs)
        .flag("--dry-run")
        .run_with_env(&[("LLMSURGE_LOG", "debug")]);
    assert_clean_run("--dry-run", &run);
    assert!(run.stdout.contains("X-Gateway-Key"), "{}", run.stdout);

    // 5. `config`, every secret in its variable.
    let out = llmsurge()
        .arg("config")
        .env("LLMSURGE_TARGET", &target)
        .env("LLMSURGE_API_KEY", secret("env"))
        .env("OPENAI_API_KEY", secret("openai"))
        .env("LLMSURGE_BACKEND_KWARGS", &kwargs)
        .env("LLMSURGE_LOG", "debug")
        .output()
        .expect("llmsurge runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_no_marker("config", &stdout, &stderr, None);
    assert!(stdout.contains("X-Gateway-Key"), "{stdout}");

    // 6. `k8s job`: headers come from a Secret; a URL carrying credentials and an inline
    // key are refused without being echoed.
    let k8s = |extra: &[&str]| {
        let out = llmsurge()
            .args([
                "k8s",
                "job",
                "--image",
                "llmsurge:test",
                "--now",
                "1800000000",
            ])
            .args(extra)
            .env("LLMSURGE_LOG", "debug")
            .output()
            .expect("llmsurge runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = k8s(&[
        "--api-key-secret",
        "llm-key",
        "--header-secret",
        "llm-headers",
        "--",
        "--target",
        "http://vllm:8000",
        "--backend-kwargs",
        &format!(
            r#"{{"headers": {{"api-key": "{}", "X-Gateway-Key": "{}"}}}}"#,
            secret("known-header"),
            secret("custom-header")
        ),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_no_marker("k8s job", &stdout, &stderr, None);
    assert!(stdout.contains("llm-headers"), "{stdout}");
    for refused in [
        vec!["--", "--target", target.as_str()],
        vec!["--", "--api-key", key.as_str()],
        vec!["--", "--backend-kwargs", kwargs.as_str()],
    ] {
        let (code, stdout, stderr) = k8s(&refused);
        assert_eq!(code, Some(2), "{refused:?}: {stderr}");
        assert_no_marker("k8s job refusal", &stdout, &stderr, None);
    }
}

/// Issue 37: a sweep given a marker secret in each way a sweep takes one (`HF_TOKEN=…`
/// and `--api-key …` in `--serve-cmd`, an `api_key` serve parameter, the key the server
/// requires, the benchmarks' `--api-key`, body fields `api_key` and `token` and a header
/// in the bench parameters, the target URL's password, a header and an environment word
/// in `--after-bench-cmd`) prints and writes none of them: not in any file of its output
/// directory, not on its console, not on `--dry-run`, not in `config`.
#[test]
fn a_secret_given_to_a_sweep_is_in_no_output() {
    const EXE: &str = env!("CARGO_BIN_EXE_llmsurge");
    const SHORT: &str = "qz7x1w";
    let dir = tempfile::tempdir().expect("tempdir");
    let key = secret("server-key");
    // `:` takes the server-side words and does nothing; the mock requires the key.
    let serve_cmd = format!(
        ": --api-key {} --server-key {{api_key}} --note {{token}}; HF_TOKEN={} exec {EXE} mock-server --port {{port}}",
        secret("serve-cmd-flag"),
        secret("serve-cmd-env")
    );
    let serve = dir.path().join("serve.json");
    std::fs::write(
        &serve,
        // A short token, filled into a placeholder of the command: hidden by its name.
        serde_json::json!([{"api_key": secret("serve-param"), "require_api_key": key, "token": SHORT}])
            .to_string(),
    )
    .expect("serve.json");
    let entry = |n: u32| {
        serde_json::json!({
            "max_requests": n,
            "data": "prompt_tokens=8,output_tokens=2",
            "max_dispatch_lag": "10s",
            "backend_kwargs": {
                "extra_body": {
                    "api_key": secret("body-key"),
                    "opts": {"token": secret("body-token"), "password": SHORT}
                },
                "headers": {"X-Gateway-Key": secret("bench-header")}
            }
        })
    };
    let bench = dir.path().join("bench.json");
    std::fs::write(&bench, serde_json::json!([entry(2), entry(3)]).to_string())
        .expect("bench.json");
    let target = format!(
        "http://bench:{}@127.0.0.1:{{port}}/v1",
        secret("url-password")
    );
    let hook = format!(
        ": -H 'Authorization: Bearer {}'; GH_TOKEN={} true",
        secret("hook-header"),
        secret("hook-env")
    );
    let out_dir = dir.path().join("out");
    let sweep = |extra: &[&str]| {
        let out = llmsurge()
            .args([
                "sweep",
                "serve",
                "--serve-cmd",
                &serve_cmd,
                "--serve-params",
            ])
            .arg(&serve)
            .arg("--bench-params")
            .arg(&bench)
            .args(["--target", &target, "--after-bench-cmd", &hook])
            .arg("--output-dir")
            .arg(&out_dir)
            .args(["--ready-timeout", "30s"])
            .args(extra)
            .args(["--", "--api-key", &key])
            .output()
            .expect("llmsurge runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = sweep(&["--dry-run"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_no_marker("sweep --dry-run", &stdout, &stderr, None);
    assert!(
        !stdout.contains(SHORT) && !stderr.contains(SHORT),
        "{stdout}{stderr}"
    );
    // What it does show: each setting's name.
    for shown in ["HF_TOKEN=", "--api-key", "Authorization:", "X-Gateway-Key"] {
        assert!(stdout.contains(shown), "{shown}: {stdout}");
    }

    let (code, stdout, stderr) = sweep(&[]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_no_marker("sweep", &stdout, &stderr, Some(&out_dir));
    // A secret too short to register (any text might hold it) is hidden by its name.
    assert!(
        !stdout.contains(SHORT) && !stderr.contains(SHORT),
        "{stdout}{stderr}"
    );
    for file in files(&out_dir) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).expect("readable")).into_owned();
        assert!(
            !text.contains(SHORT),
            "{} holds the short secret",
            file.display()
        );
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("sweep.json")).expect("sweep.json"))
            .expect("JSON");
    let rows = summary["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{summary}");
    for r in rows {
        // The key reached the server: every request completed.
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(
            r["after_bench_cmd"]["error"],
            serde_json::Value::Null,
            "{r}"
        );
    }

    let out = llmsurge()
        .arg("config")
        .env("LLMSURGE_SERVE_CMD", &serve_cmd)
        .env("LLMSURGE_AFTER_BENCH_CMD", &hook)
        .env("LLMSURGE_TARGET", &target)
        .output()
        .expect("llmsurge runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_no_marker("config", &stdout, &stderr, None);
    assert!(
        stdout.contains("LLMSURGE_SERVE_CMD=") && stdout.contains("HF_TOKEN="),
        "{stdout}"
    );
}

#[test]
fn opted_in_values_are_shown() {
    let record_dir = tempfile::tempdir().expect("tempdir");
    let server = recording_mock(&record_dir.path().join("record.jsonl"));
    let target = format!(
        "{}/?api-version=2024-10-21&key=hidden-key",
        server.base_url()
    );
    let run = Bench::target(&target)
        .max_requests(2)
        .data("prompt_tokens=8,output_tokens=4")
        .arg("--backend-kwargs", r#"{"headers": {"X-Trace": "trace-on", "X-Other": "hidden-header", "Accept": "text/event-stream"}}"#)
        .arg("--show-header", "x-trace")
        .arg("--show-query-param", "api-version")
        .outputs("json")
        .run();
    let report = crate::support::ok_report(&run);
    assert!(
        report
            .target
            .base_url
            .ends_with("/?api-version=2024-10-21&key=<redacted>"),
        "{}",
        report.target.base_url
    );
    for (name, shown) in [
        ("X-Trace", "trace-on"),
        ("X-Other", "<redacted>"),
        ("Accept", "text/event-stream"),
    ] {
        assert_eq!(header(&report.args, name).as_deref(), Some(shown), "{name}");
    }
    let text = std::fs::read_to_string(run.report_path()).expect("report");
    assert!(!text.contains("hidden-"), "{text}");
}

#[test]
fn an_error_quoting_the_url_carries_no_secret() {
    // A URL with a user, a password and a key, over HTTPS and HTTP/2 (reqwest, which
    // carried them once, named the URL it sent to in its errors); every stream is reset
    // before its head.
    let pki = crate::engine::tls::Pki::new("secrets");
    let (cert, key) = pki.leaf(crate::engine::tls::Leaf::Server, "server");
    let server = mock(MockConfig {
        close_rate: 1.0,
        tls_cert: Some(cert),
        tls_key: Some(key),
        ..MockConfig::instant()
    });
    let target = format!(
        "https://bench:{}@{}/?key={}",
        secret("userinfo"),
        server.base_url().trim_start_matches("https://"),
        secret("query")
    );
    let (child, dir) = Bench::target(&target)
        .arg("--ca-cert", pki.ca())
        .flag("--http2")
        .max_requests(3)
        .data("prompt_tokens=8,output_tokens=4")
        .outputs("json,console")
        .request_log("requests.jsonl")
        .start(|c| {
            c.env("LLMSURGE_LOG", "debug");
        });
    let run = wait_run(child, dir);
    assert_eq!(run.code(), 4, "every request failed: {}", run.stderr);
    assert_no_marker("failed run", &run.stdout, &run.stderr, Some(run.dir.path()));
    // The message is still there to diagnose.
    let report = run.report();
    let errors = serde_json::to_string(&report.benchmarks[0].errors).expect("JSON");
    assert!(errors.contains("stream reset by the server"), "{errors}");
}

#[test]
fn the_mock_records_no_credential_unless_shown() {
    let (server, _record_dir, record) = recording(MockConfig {
        record_header: vec!["authorization".into(), "user-agent".into()],
        ..MockConfig::instant()
    });
    let target = format!(
        "{}/?api-version=2024-10-21&key={}",
        server.base_url(),
        secret("query")
    );
    let key = secret("flag");
    let run = Bench::target(&target)
        .arg("--api-key", &key)
        .max_requests(2)
        .data("prompt_tokens=8,output_tokens=4")
        .outputs("json")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let text = std::fs::read_to_string(&record).expect("record");
    assert!(!text.contains(MARK), "{text}");
    let lines = recorded(&record);
    assert_eq!(lines.len(), 2, "{text}");
    for l in &lines {
        assert_eq!(l["headers"]["authorization"], "<redacted>");
        assert!(
            l["headers"]["user-agent"]
                .as_str()
                .is_some_and(|ua| ua.starts_with("llmsurge/")),
            "a harmless header is kept: {l}"
        );
        assert_eq!(l["query"], "api-version=<redacted>&key=<redacted>");
    }
}
