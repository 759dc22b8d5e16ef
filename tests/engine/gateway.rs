//! Behind a gateway (issue 42): a mock that requires an API key on every route, as an
//! authenticating gateway does, answers 401 to any request without it and counts those
//! per route in `/stats` `unauthorized` (the truth). Every request llmsurge makes to the
//! target (readiness, model list, probe, /tokenize, /metrics, profiler calls, cache
//! resets, a sweep's readiness) must carry the key; `/health` is advisory when the
//! models answer; `--health-path` chooses or skips it.

use crate::scenario::Bench;
use crate::support::{RawRequest, llmsurge, mock, ok_report, read_request};
use llmsurge::mock::{MockConfig, MockServer};
use llmsurge::report::Report;
use llmsurge_proto::Secret;
use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    // /v1/models is not served and no --model: nothing says the server is usable, so
    // the unhealthy /health is the error.
    let (url, seen) = raw_server(|req| match req.path.as_str() {
        "/health" => Act::Answer("503 Service Unavailable", String::new(), String::new()),
        _ => Act::Answer("404 Not Found", String::new(), String::new()),
    });
    let run = Bench::target(&url).max_requests(2).outputs("json").run();
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("GET /health answered 503 Service Unavailable; the server is not ready")
            && run.stderr.contains("--health-path off"),
        "{}",
        run.stderr
    );
    let seen = seen.lock().expect("log");
    assert!(seen.iter().all(|r| r.method == "GET"), "{seen:?}");
}

#[test]
fn both_routes_failing_otherwise_name_both_answers_and_the_key() {
    // As LiteLLM's proxy answers a missing key (500) or a wrong one (400) on every
    // route: the line names both answers and --api-key beside --health-path.
    let (url, seen) = raw_server(|_| Act::Answer("400 Bad Request", String::new(), String::new()));
    let run = Bench::target(&url).max_requests(2).outputs("json").run();
    assert_eq!(run.code(), 2, "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "GET /health answered 400 Bad Request and GET /v1/models answered 400 Bad Request"
        ) && run.stderr.contains("--api-key")
            && run.stderr.contains("--health-path off"),
        "{}",
        run.stderr
    );
    let seen = seen.lock().expect("log");
    assert!(seen.iter().all(|r| r.method == "GET"), "{seen:?}");
}

#[test]
fn both_routes_refusing_the_key_point_at_the_key_not_the_health_path() {
    // No key, then a wrong one: /health and /v1/models both answer 401 (the mock's
    // unauthorized counts say so); the one line names --api-key.
    let server = gateway("authorization", 200);
    for key in [None, Some("sk-wrong-key-4411")] {
        let mut bench = Bench::target(&server.base_url())
            .max_requests(2)
            .outputs("json");
        if let Some(k) = key {
            bench = bench.arg("--api-key", k);
        }
        let run = bench.run_with_env(&[("OPENAI_API_KEY", "")]);
        assert_eq!(run.code(), 2, "{}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        let line = &run.stderr;
        assert!(
            line.contains(
                "GET /health answered 401 Unauthorized and GET /v1/models answered 401 Unauthorized"
            ) && (line.contains("pass --api-key")
                || line.contains("pass the right key with --api-key"))
                && !line.contains("--health-path"),
            "{line}"
        );
        let given = if key.is_some() {
            "refused"
        } else {
            "no API key was given"
        };
        assert!(line.contains(given), "{line}");
        assert!(!line.contains("sk-wrong"), "{line}");
    }
    let u = server.stats().unauthorized.requests;
    assert_eq!((u.health, u.models), (2, 2), "{u:?}");
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
    // The working directory as the process sees it (no symbolic link on the way).
    let cwd = dir.path().canonicalize().expect("canonical");
    let absolute = cwd.join("o").display().to_string();
    let cases: [(&[&str], &str); 7] = [
        (
            &[
                "benchmark",
                "run",
                "--output-dir",
                &absolute,
                "--request-log",
                "o/log.jsonl",
            ],
            "--request-log o/log.jsonl is relative to --output-dir",
        ),
        (
            &[
                "benchmark",
                "run",
                "--output-dir",
                "o",
                "--request-log",
                "o",
            ],
            "give a file name (written inside --output-dir)",
        ),
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
            .current_dir(&cwd)
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

/// A streamed answer of one token, for a raw server's POSTs.
const SSE: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

/// The model a raw server lists.
const RAW_MODEL: &str = "raw-model";

/// What a raw server does with a request: answer it (the status line's rest, extra
/// header lines each ending in CRLF, the body) or hold the connection without a word.
enum Act {
    Answer(&'static str, String, String),
    Hang,
}

/// A raw HTTP/1.1 server on loopback (for what the mock cannot do: redirect elsewhere,
/// hang): `act` decides each request; every request it read is logged. Its threads
/// end with the test's process.
fn raw_server(
    act: impl Fn(&RawRequest) -> Act + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<RawRequest>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    let url = crate::support::raw_server(move |stream, _| serve_raw(stream, &act, &seen));
    (url, log)
}

fn serve_raw(
    mut stream: TcpStream,
    act: &dyn Fn(&RawRequest) -> Act,
    log: &Mutex<Vec<RawRequest>>,
) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut stream, &mut buf) {
        let action = act(&req);
        log.lock().expect("log").push(req);
        let (status, extra, body) = match action {
            Act::Answer(status, extra, body) => (status, extra, body),
            Act::Hang => {
                // Far beyond every bound under test; the connection stays open.
                std::thread::sleep(Duration::from_secs(120));
                return;
            }
        };
        let head = format!(
            "HTTP/1.1 {status}\r\n{extra}content-length: {}\r\n\r\n",
            body.len()
        );
        if stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body.as_bytes()))
            .is_err()
        {
            return;
        }
    }
}

/// The answers of an OpenAI-like server: the model list, streamed completions, 200
/// elsewhere.
fn served(req: &RawRequest) -> Act {
    if req.method == "POST" {
        return Act::Answer(
            "200 OK",
            "content-type: text/event-stream\r\n".into(),
            SSE.into(),
        );
    }
    if req.path.starts_with("/v1/models") {
        let list =
            serde_json::json!({"object": "list", "data": [{"id": RAW_MODEL, "object": "model"}]});
        return Act::Answer(
            "200 OK",
            "content-type: application/json\r\n".into(),
            list.to_string(),
        );
    }
    Act::Answer(
        "200 OK",
        "content-type: text/plain\r\n".into(),
        String::new(),
    )
}

#[test]
fn no_redirect_takes_the_key_to_another_origin() {
    // A target whose model list and /metrics redirect to another server (a thief, on
    // another port): every request carries the key in headers reqwest keeps across
    // hosts (x-api-key), so none may follow there. Its /health redirects within its
    // own origin, which is followed.
    let (thief, stolen) = raw_server(served);
    let (url, seen) = raw_server(move |req| {
        let to = |location: String| {
            Act::Answer(
                "307 Temporary Redirect",
                format!("location: {location}\r\n"),
                String::new(),
            )
        };
        match req.path.split('?').next().unwrap_or_default() {
            "/health" => to("/ready".into()),
            "/v1/models" | "/metrics" => to(format!("{thief}{}", req.path)),
            _ => served(req),
        }
    });
    let run = Bench::target(&url)
        .model(RAW_MODEL)
        .max_requests(2)
        .outputs("json")
        .data("prompt_tokens=16,output_tokens=2")
        .arg("--api-key", KEY)
        .arg(
            "--backend-kwargs",
            format!(
                r#"{{"headers": {{"x-api-key": "{KEY}"}}, "params": {{"api-version": "v9"}}}}"#
            ),
        )
        .run();
    let stolen = stolen.lock().expect("log");
    assert!(
        stolen.is_empty(),
        "the other origin was sent: {:?}",
        stolen.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    let seen = seen.lock().expect("log");
    let got = |path: &str| {
        seen.iter()
            .any(|r| r.method == "GET" && r.path.starts_with(path))
    };
    // Each check was made (and the same-origin redirect followed, with the key).
    assert!(
        got("/health") && got("/v1/models") && got("/metrics"),
        "{seen:?}"
    );
    let ready = seen
        .iter()
        .find(|r| r.path.starts_with("/ready"))
        .expect("/ready followed");
    assert_eq!(ready.header("x-api-key"), Some(KEY));
    // /metrics is asked as the other checks are: with the run's query parameters.
    let metrics = seen
        .iter()
        .find(|r| r.path.starts_with("/metrics"))
        .expect("/metrics");
    assert!(metrics.path.contains("api-version=v9"), "{}", metrics.path);
    assert_eq!(
        metrics.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(!run.stderr.contains(KEY), "{}", run.stderr);
}

#[test]
fn a_health_route_that_hangs_is_a_warning_when_the_models_answer() {
    let (url, seen) = raw_server(|req| {
        if req.path.starts_with("/health") {
            Act::Hang
        } else {
            served(req)
        }
    });
    let run = Bench::target(&url)
        .max_requests(2)
        .outputs("json")
        .data("prompt_tokens=16,output_tokens=2")
        .run();
    let report = ok_report(&run);
    assert!(
        run.stderr
            .lines()
            .any(|l| l.starts_with("warning: --target")
                && l.contains("GET /health did not answer within")
                && l.contains("going on")),
        "{}",
        run.stderr
    );
    let posts = seen
        .lock()
        .expect("log")
        .iter()
        .filter(|r| r.method == "POST")
        .count() as u64;
    let sent: u64 = report.benchmarks.iter().map(|b| b.requests.created).sum();
    assert!(
        sent >= 1 && posts > sent,
        "the probe and the load reached it: {posts}, {sent}"
    );
}

#[test]
fn metrics_of_a_target_with_user_and_password_carry_the_api_key() {
    // --target http://u:pw@host with --api-key: the key replaces the URL's Basic
    // authorization on every route, /metrics included.
    let server = gateway("authorization", 200);
    let target = server.base_url().replacen("http://", "http://user:pw@", 1);
    let run = Bench::target(&target)
        .max_requests(2)
        .outputs("json")
        .data("prompt_tokens=16,output_tokens=2")
        .arg("--server-metrics-interval", "100ms")
        .arg("--api-key", KEY)
        .run();
    ok_report(&run);
    let stats = server.stats();
    assert_eq!(
        stats.unauthorized.total, 0,
        "{:?}\n{}",
        stats.unauthorized, run.stderr
    );
    assert!(stats.requests.metrics >= 2, "{:?}", stats.requests);
}

#[test]
fn a_key_or_header_that_cannot_be_sent_is_a_usage_error_before_any_request() {
    let server = mock(MockConfig::instant());
    let cases = [
        ("--api-key", "sk-line\nbreak".to_string(), "--api-key"),
        (
            "--backend-kwargs",
            r#"{"headers": {"x-api-key": "sk-line\r\nbreak"}}"#.to_string(),
            "--backend-kwargs: headers.x-api-key",
        ),
    ];
    for (flag, value, mention) in cases {
        let run = Bench::on(&server).max_requests(1).arg(flag, &value).run();
        assert_eq!(run.code(), 2, "{flag}: {}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{flag}: {}", run.stderr);
        assert!(
            run.stderr.contains(mention) && run.stderr.contains("header value"),
            "{}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("sk-line"),
            "{flag}: the key shown: {}",
            run.stderr
        );
    }
    let r = server.stats().requests;
    assert_eq!(r.health + r.models + r.chat_completions, 0, "{r:?}");
}

/// A sweep of three constant rates of 10 requests each through a gateway whose backend
/// dies after the first benchmark: it answers those 10 completions, and `then` every
/// later one. See [`sweep_through_a_gateway`].
fn sweep_through_a_gateway_whose_backend_dies(
    then: fn() -> Act,
    bench: fn(Bench) -> Bench,
) -> (crate::support::Finished, Report, u64) {
    sweep_through_a_gateway(10, |i| i < 10, then, bench)
}

/// A sweep of three constant rates of `requests` requests each through a gateway that
/// answers the benchmarks' completion `i` (from 0, in arrival order) when `serves(i)`,
/// and `then` otherwise. The run is invalid (a benchmark had no success, at least):
/// returns it, its report, and the completions the gateway read (the truth).
fn sweep_through_a_gateway(
    requests: u64,
    serves: fn(u64) -> bool,
    then: fn() -> Act,
    bench: fn(Bench) -> Bench,
) -> (crate::support::Finished, Report, u64) {
    // The probe's requests before the run are marked: not the benchmarks'.
    let benchmark_request =
        |r: &RawRequest| r.method == "POST" && r.header(llmsurge::mock::PROBE_HEADER).is_none();
    let posts = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = posts.clone();
    let (url, seen) = raw_server(move |req| {
        use std::sync::atomic::Ordering;
        if benchmark_request(req) && !serves(counted.fetch_add(1, Ordering::SeqCst)) {
            return then();
        }
        served(req)
    });
    let run = bench(Bench::target(&url))
        .constant("5,6,7")
        .max_requests(requests)
        .data("prompt_tokens=16,output_tokens=1")
        .outputs("json")
        .run();
    let posted = seen
        .lock()
        .expect("log")
        .iter()
        .filter(|r| benchmark_request(r))
        .count() as u64;
    let report = crate::support::ended_with(&run, llmsurge::exit_codes::INVALID_RUN);
    (run, report, posted)
}

#[test]
fn a_gateway_whose_backend_died_between_two_benchmarks_loses_the_server_in_the_second() {
    // 503 to every completion after the first benchmark's. Before, the second benchmark,
    // with no success of its own, was never judged lost: the third ran too, and a
    // capacity search bisected on against the dead backend. Now the run's last success,
    // in the first, opens the tail: the second is lost from its first send and ends the
    // sweep.
    let (run, report, posted) = sweep_through_a_gateway_whose_backend_dies(
        || {
            Act::Answer(
                "503 Service Unavailable",
                String::new(),
                "no healthy upstream".into(),
            )
        },
        |b| b,
    );
    assert_eq!(report.benchmarks.len(), 2, "{}", run.stderr);
    let (first, second) = (&report.benchmarks[0], &report.benchmarks[1]);
    // 10 answered, then 10 refused, nothing after.
    assert_eq!(posted, 20, "{}", run.stderr);
    assert_eq!(first.requests.completed, 10, "{}", run.stderr);
    assert!(first.server_lost.is_none(), "{}", run.stderr);
    assert_eq!(
        (second.requests.completed, second.requests.errored),
        (0, 10)
    );
    let lost = second.server_lost.as_ref().expect("lost");
    assert_eq!(lost.errored, 10);
    assert!(lost.last_success_s < 0.0 && lost.at_s < 0.1, "{lost:?}");
    assert!(lost.reason.starts_with("http_503"), "{lost:?}");
    assert!(
        run.stderr.contains("none of this benchmark's")
            && run.stderr.contains("after that one were not run"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_backend_that_holds_every_request_after_the_first_benchmark_is_not_called_lost() {
    // Every later completion is held until the request timeout: the server is there,
    // overloaded or hung, so no earlier success opens a tail (a capacity search must
    // bisect down from such a probe); each later benchmark is invalid on its own
    // verdict, no request succeeded, and the sweep runs to its end.
    let (run, report, posted) =
        sweep_through_a_gateway_whose_backend_dies(|| Act::Hang, |b| b.request_timeout("1s"));
    assert_eq!(posted, 30, "{}", run.stderr);
    assert_eq!(report.benchmarks.len(), 3, "{}", run.stderr);
    for b in &report.benchmarks[1..] {
        assert_eq!((b.requests.completed, b.requests.errored), (0, 10));
        assert_eq!(b.errors[0].kind, "timeout", "{:?}", b.errors);
        assert!(b.server_lost.is_none(), "{:?}", b.server_lost);
    }
    assert!(
        run.stderr.contains("no request succeeded") && !run.stderr.contains("server was lost"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_flaky_server_failing_everything_in_a_later_benchmark_is_lost_only_beyond_chance() {
    // The first benchmark: 11 of 12 completions answered 503, the last one served (its
    // own tail is empty). The later ones: every completion 503. At the first's error
    // share (11/12), 12 errors in a row are chance (0.35): not lost, and the sweep runs
    // to its end. Before, a benchmark with no success of its own was judged at an error
    // share of 0, and this live server was called lost.
    let (run, report, posted) = sweep_through_a_gateway(
        12,
        |i| i == 11,
        || Act::Answer("503 Service Unavailable", String::new(), "busy".into()),
        |b| b,
    );
    assert_eq!(posted, 36, "{}", run.stderr);
    assert_eq!(report.benchmarks.len(), 3, "{}", run.stderr);
    assert_eq!(report.benchmarks[0].requests.completed, 1);
    for b in &report.benchmarks {
        assert!(b.server_lost.is_none(), "{:?}", b.server_lost);
    }
    assert!(!run.stderr.contains("server was lost"), "{}", run.stderr);
}
