//! Behind a gateway (issue 42): a mock that requires an API key on every route, as an
//! authenticating gateway does, answers 401 to any request without it and counts those
//! per route in `/stats` `unauthorized` (the truth). Every request llmsurge makes to the
//! target (readiness, model list, probe, /tokenize, /metrics, profiler calls, cache
//! resets, a sweep's readiness) must carry the key; `/health` is advisory when the
//! models answer; `--health-path` chooses or skips it.

use crate::scenario::Bench;
use crate::support::{llmsurge, mock, ok_report};
use llmsurge::mock::{MockConfig, MockServer};
use llmsurge_proto::Secret;

const KEY: &str = "sk-gateway-0123456789abcdef";

/// An instant mock that requires `KEY` in `header` (bearer in `authorization`).
fn gateway(header: &str, health_status: u16) -> MockServer {
    mock(MockConfig {
        require_api_key: Some(Secret::new(KEY)),
        api_key_header: header.into(),
        health_status,
        // The server counts prompts differently, so the probe's length check also asks
        // its /tokenize.
        prompt_tokens_scale: 1.7,
        ..MockConfig::instant()
    })
}

/// Two short benchmarks with every feature that calls the target besides the load:
/// server metrics (the target's /metrics, by default), the profiler, cache resets.
fn everything(server: &MockServer) -> Bench {
    Bench::target(&server.base_url())
        .constant("20,40")
        .max_requests(4)
        .data("prompt_tokens=64,output_tokens=2")
        .outputs("json")
        .arg("--server-metrics-interval", "100ms")
        .flag("--profile-server")
        .arg("--reset-cache", "auto")
}

#[test]
fn every_request_llmsurge_makes_carries_the_key_bearer_or_custom_header() {
    let custom = format!(r#"{{"headers": {{"Ocp-Apim-Subscription-Key": "{KEY}"}}}}"#);
    let cases: [(&str, Vec<(&str, String)>); 3] = [
        ("authorization", vec![("--api-key", KEY.to_string())]),
        (
            "x-api-key",
            vec![(
                "--backend-kwargs",
                format!(r#"{{"headers": {{"x-api-key": "{KEY}"}}}}"#),
            )],
        ),
        (
            "ocp-apim-subscription-key",
            vec![("--backend-kwargs", custom)],
        ),
    ];
    for (header, flags) in cases {
        let server = gateway(header, 200);
        let mut bench = everything(&server);
        for (flag, value) in &flags {
            bench = bench.arg(flag, value);
        }
        let run = bench.run();
        let report = ok_report(&run);
        let stats = server.stats();
        assert_eq!(
            stats.unauthorized.total, 0,
            "{header}: requests without the key: {:?}\n{}",
            stats.unauthorized, run.stderr
        );
        // Each kind of request did reach the mock (so each was checked).
        let r = &stats.requests;
        assert!(r.health >= 1 && r.models >= 1, "{header}: {r:?}");
        assert!(r.metrics >= 3, "{header}: scrapes: {r:?}");
        assert_eq!(r.start_profile, 2, "{header}: one per benchmark: {r:?}");
        assert_eq!(r.stop_profile, 2, "{header}: {r:?}");
        assert_eq!(stats.cache_resets.prefix_cache, 1, "{header}: {stats:?}");
        let sent: u64 = report.benchmarks.iter().map(|b| b.requests.created).sum();
        assert_eq!(r.chat_completions, sent, "{header}: the load");
        // The probe and its /tokenize went through with the key (the mock serves probes
        // from a twin its `requests` leave out): the length check warned with the
        // server's own count, which a 401 would not have given.
        assert!(
            report.target.warnings.iter().any(|w| {
                w.starts_with("prompt lengths differ") && w.contains("/tokenize counts")
            }),
            "{header}: {:?}",
            report.target.warnings
        );
        assert!(!run.stderr.contains(KEY), "{header}: the key leaked");
    }
}

#[test]
fn without_the_key_the_mock_refuses_every_route_and_counts_it() {
    // The control of the test above: the mock's count of refusals is what it says.
    let server = gateway("authorization", 200);
    let run = everything(&server).arg("--model", server.model()).run();
    let stats = server.stats();
    assert_ne!(run.code(), 0, "{}", run.stderr);
    let u = &stats.unauthorized.requests;
    assert_eq!(u.health, 1, "{:?}", stats.unauthorized);
    assert_eq!(u.models, 1, "{:?}", stats.unauthorized);
    assert_eq!(stats.requests.health + stats.requests.models, 0);
    assert!(!run.stderr.contains(KEY), "{}", run.stderr);
}

#[test]
fn an_unhealthy_health_route_with_models_listed_is_a_warning() {
    for (status, line) in [
        (500, "500 Internal Server Error"),
        (401, "401 Unauthorized"),
    ] {
        let server = mock(MockConfig {
            health_status: status,
            ..MockConfig::instant()
        });
        let run = Bench::on(&server)
            .max_requests(3)
            .outputs("json")
            .data("prompt_tokens=16,output_tokens=2")
            .run();
        let report = ok_report(&run);
        let warning = format!("GET /health answered {line}; going on");
        assert!(
            run.stderr
                .lines()
                .any(|l| l.starts_with("warning: --target") && l.contains(&warning)),
            "{status}:\n{}",
            run.stderr
        );
        assert!(
            report.target.warnings.iter().any(|w| w.contains(&warning)),
            "{status}: {:?}",
            report.target.warnings
        );
        let stats = server.stats();
        assert_eq!(stats.requests.health, 1, "{status}: checked once");
        let sent: u64 = report.benchmarks.iter().map(|b| b.requests.created).sum();
        assert_eq!(stats.requests.chat_completions, sent, "{status}");
    }
}

#[test]
fn an_unhealthy_health_route_without_a_usable_model_list_still_stops_the_run() {
    // /v1/models refuses too (no key given) and no --model: nothing says the server is
    // usable, so the unhealthy /health is the error.
    let server = gateway("authorization", 500);
    let run = Bench::target(&server.base_url())
        .max_requests(2)
        .outputs("json")
        .run();
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("GET /health answered 401 Unauthorized; the server is not ready")
            && run.stderr.contains("--health-path off"),
        "{}",
        run.stderr
    );
    assert_eq!(server.stats().requests.chat_completions, 0);
}

#[test]
fn health_path_off_skips_the_check_and_a_path_chooses_it() {
    let server = mock(MockConfig::instant());
    let short = || {
        Bench::on(&server)
            .max_requests(2)
            .outputs("json")
            .data("prompt_tokens=16,output_tokens=2")
    };
    ok_report(&short().arg("--health-path", "off").run());
    let s = server.stats();
    assert_eq!(s.requests.health, 0, "--health-path off: {:?}", s.requests);
    assert_eq!(s.requests.models, 1, "{:?}", s.requests);
    ok_report(&short().run_with_env(&[("LLMSURGE_HEALTH_PATH", "off")]));
    assert_eq!(
        server.stats().requests.health,
        0,
        "LLMSURGE_HEALTH_PATH=off"
    );
    // Another route instead (here the mock's /metrics, as a gateway's cheap one).
    let before = server.stats().requests.metrics;
    ok_report(
        &short()
            .arg("--health-path", "/metrics")
            .arg("--server-metrics", "off")
            .run(),
    );
    let s = server.stats();
    assert_eq!(s.requests.health, 0, "{:?}", s.requests);
    assert_eq!(s.requests.metrics, before + 1, "{:?}", s.requests);
    // The default checks /health once (the counts above are the mock's).
    ok_report(&short().run());
    assert_eq!(server.stats().requests.health, 1);
}

#[test]
fn bad_gateway_flags_are_one_line_naming_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: [(&[&str], &str); 5] = [
        (
            &["benchmark", "run", "--health-path", "health"],
            "--health-path",
        ),
        (
            &[
                "benchmark",
                "run",
                "--output-dir",
                "o",
                "--request-log",
                "o/log.jsonl",
            ],
            "--request-log o/log.jsonl is relative to --output-dir o",
        ),
        (&["mock-server", "--health-status", "42"], "--health-status"),
        (
            &["mock-server", "--api-key-header", "a b"],
            "--api-key-header",
        ),
        (
            &["mock-server", "--require-api-key", ""],
            "--require-api-key",
        ),
    ];
    for (args, mention) in cases {
        let out = llmsurge()
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("llmsurge runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(mention), "{args:?}: {stderr}");
    }
}

#[test]
fn a_sweep_checks_readiness_and_resets_caches_with_the_points_key() {
    use std::path::Path;
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = env!("CARGO_BIN_EXE_llmsurge");
    let bench = dir.path().join("bench.json");
    std::fs::write(&bench, r#"[{"max_requests": 2}, {"max_requests": 3}]"#).expect("write");
    let out = llmsurge()
        .args(["sweep", "serve", "--serve-cmd"])
        .arg(format!(
            "{exe} mock-server --port {{port}} --instant --require-api-key {KEY}"
        ))
        .arg("--bench-params")
        .arg(&bench)
        .arg("--output-dir")
        .arg(dir.path().join("out"))
        .args(["--ready-timeout", "60s", "--reset-cache", "/flush_cache"])
        .args([
            "--",
            "--api-key",
            KEY,
            "--profile",
            "synchronous",
            "--data",
            "prompt_tokens=16,output_tokens=2",
            "--max-dispatch-lag",
            "10s",
        ])
        .output()
        .expect("llmsurge runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let sweep: serde_json::Value = serde_json::from_slice(
        &std::fs::read(Path::new(&dir.path().join("out/sweep.json"))).expect("sweep.json"),
    )
    .expect("JSON");
    let rows = sweep["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{sweep}");
    // The reset before the second point: the server's own answer, 200 with the key.
    let reset = &rows[1]["cache_reset"];
    assert_eq!(reset["reset"], true, "{reset}");
    assert_eq!(reset["calls"][0]["status"], 200, "{reset}");
    assert_eq!(reset["calls"][0]["answer"], "Cache flushed.", "{reset}");
}
