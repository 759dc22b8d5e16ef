//! `llmsurge sweep serve` at its edges, against the mock the sweep starts itself: what is
//! refused before any server starts, `/v1` targets, readiness against a server that wants
//! a key, and `--after-bench-cmd`'s `{port}`, variables and failures.

use crate::support::llmsurge;
use crate::sweep::{groups, printed, serve_cmd, sweep_command, write};
use std::path::Path;
use std::process::Output;

const EXE: &str = env!("CARGO_BIN_EXE_llmsurge");

/// One small benchmark configuration per entry of `requests`.
fn bench(dir: &Path, requests: &[u32]) -> std::path::PathBuf {
    let entries: Vec<String> = requests
        .iter()
        .map(|n| {
            format!(
                r#"{{"max_requests": {n}, "data": "prompt_tokens=8,output_tokens=2", "max_dispatch_lag": "10s"}}"#
            )
        })
        .collect();
    write(dir, "bench.json", &format!("[{}]", entries.join(",")))
}

fn show(out: &Output) -> (String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("stdout:\n{stdout}\nstderr:\n{stderr}");
    (stdout, stderr)
}

fn report(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("out/sweep.json")).expect("sweep.json"))
        .expect("JSON")
}

#[test]
fn sweep_edges_outputs_without_json_are_refused_before_any_server_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bench = bench(dir.path(), &[2]);
    let out =
        printed(sweep_command("serve", dir.path(), None, &bench).args(["--", "--outputs", "html"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--outputs") && stderr.contains("json"),
        "{stderr}"
    );
    assert!(groups(dir.path()).is_empty(), "a server started");
    assert!(!dir.path().join("out/sweep.json").exists());
}

#[test]
fn sweep_edges_a_serve_cmd_without_port_needs_target_and_is_refused_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    // vLLM's own doc form: the server's default port, no {port}.
    let cmd = format!("echo $$ >> {} && {EXE} mock-server", pids.display());
    let out = llmsurge()
        .args(["sweep", "serve", "--serve-cmd", &cmd])
        .arg("--output-dir")
        .arg(dir.path().join("out"))
        // Old behaviour: waited this long, then failed the configuration.
        .args(["--ready-timeout", "5s"])
        .output()
        .expect("runs");
    let (_, stderr) = show(&out);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("{port}") && stderr.contains("--target"),
        "{stderr}"
    );
    assert!(groups(dir.path()).is_empty(), "a server started");
}

#[test]
fn sweep_edges_a_target_ending_in_v1_is_ready_and_measured() {
    for suffix in ["/v1", "/v1/"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let bench = bench(dir.path(), &[3]);
        let out = llmsurge()
            .args(["sweep", "serve", "--serve-cmd"])
            .arg(serve_cmd(&dir.path().join("pids")))
            .arg("--target")
            .arg(format!("http://127.0.0.1:{{port}}{suffix}"))
            .arg("--bench-params")
            .arg(&bench)
            .arg("--output-dir")
            .arg(dir.path().join("out"))
            .args(["--ready-timeout", "30s"])
            .output()
            .expect("runs");
        show(&out);
        assert_eq!(out.status.code(), Some(0), "{suffix}");
        let summary = report(dir.path());
        let row = &summary["rows"][0];
        assert_eq!(row["status"], "ok", "{suffix}: {row}");
        let point = llmsurge::report::Report::load(&dir.path().join("out/s0-b0/benchmarks.json"))
            .expect("the point's report");
        assert_eq!(point.benchmarks[0].requests.completed, 3, "{suffix}");
    }
}

/// Environment variables a sweep is run with.
type Env<'a> = &'a [(&'a str, &'a str)];

/// A sweep of one point against a mock that wants `key`, with `env` and `extra` flags;
/// `bench_key`: the point's own key, as a bench param.
fn keyed_sweep(dir: &Path, key: &str, env: Env, extra: &[&str], bench_key: Option<&str>) -> Output {
    let bench = match bench_key {
        None => bench(dir, &[2]),
        Some(k) => write(
            dir,
            "bench.json",
            &format!(
                r#"[{{"max_requests": 2, "api_key": "{k}", "data": "prompt_tokens=8,output_tokens=2", "max_dispatch_lag": "10s"}}]"#
            ),
        ),
    };
    let pids = dir.join("pids");
    let cmd = format!(
        "echo $$ >> {} && {EXE} mock-server --port {{port}} --require-api-key {key}",
        pids.display()
    );
    let mut sweep = llmsurge();
    sweep
        .args(["sweep", "serve", "--serve-cmd", &cmd])
        .arg("--bench-params")
        .arg(&bench)
        .arg("--output-dir")
        .arg(dir.join("out"))
        .args(["--ready-timeout", "5s"])
        .args(extra)
        .envs(env.iter().copied());
    sweep.output().expect("runs")
}

#[test]
fn sweep_edges_readiness_carries_the_key_and_says_where_to_give_it() {
    const KEY: &str = "sk-sweep-edges-key-5521";
    // No key: the message says what was asked, what answered, and that the key goes
    // after `--` or in the environment (`sweep serve` takes no --api-key).
    let dir = tempfile::tempdir().expect("tempdir");
    let out = keyed_sweep(dir.path(), KEY, &[], &[], None);
    let (_, stderr) = show(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("GET /v1/models answered 401")
            && stderr.contains("pass --api-key after --")
            && stderr.contains("LLMSURGE_API_KEY"),
        "{stderr}"
    );
    let error = report(dir.path())["rows"][0]["error"].to_string();
    assert!(error.contains("pass --api-key after --"), "{error}");
    for g in groups(dir.path()) {
        assert!(!crate::sweep::group_alive(g));
    }
    // The key after `--`, or in either variable of the environment: ready, measured.
    let ways: [(Env, &[&str]); 3] = [
        (&[], &["--", "--api-key", KEY]),
        (&[("LLMSURGE_API_KEY", KEY)], &[]),
        (&[("OPENAI_API_KEY", KEY)], &[]),
    ];
    for (env, extra) in ways {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = keyed_sweep(dir.path(), KEY, env, extra, None);
        let (stdout, stderr) = show(&out);
        assert_eq!(out.status.code(), Some(0), "{env:?} {extra:?}");
        assert_eq!(report(dir.path())["rows"][0]["status"], "ok");
        assert!(
            !stdout.contains(KEY) && !stderr.contains(KEY),
            "the key was printed"
        );
    }
    // Break test of issue 37: the key as a bench param, the sweep itself has none. The
    // server refusing the sweep's readiness check is up, and the point's run, with its
    // own key, is measured (it waited the whole --ready-timeout, then failed the point).
    let dir = tempfile::tempdir().expect("tempdir");
    let out = keyed_sweep(dir.path(), KEY, &[], &[], Some(KEY));
    let (stdout, stderr) = show(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(report(dir.path())["rows"][0]["status"], "ok");
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "the key was printed"
    );
}

#[test]
fn sweep_edges_after_bench_cmd_gets_port_and_target_and_its_failure_is_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bench = bench(dir.path(), &[2, 2, 2]);
    let seen = dir.path().join("hook.txt");
    // `{port}` as a template, the port and target as variables; the second run fails.
    let hook = format!(
        r#"echo "{{port}} $LLMSURGE_SWEEP_PORT $LLMSURGE_SWEEP_TARGET $LLMSURGE_SWEEP_POINT" >> {f}; test "$LLMSURGE_SWEEP_POINT" != s0-b2 || exit 7"#,
        f = seen.display()
    );
    let out = llmsurge()
        .args(["sweep", "serve", "--serve-cmd"])
        .arg(serve_cmd(&dir.path().join("pids")))
        .arg("--bench-params")
        .arg(&bench)
        .arg("--output-dir")
        .arg(dir.path().join("out"))
        .args(["--ready-timeout", "30s", "--after-bench-cmd", &hook])
        .output()
        .expect("runs");
    let (_, stderr) = show(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a hook's failure fails no point"
    );
    // The server's port, as the points reached it.
    let point = llmsurge::report::Report::load(&dir.path().join("out/s0-b0/benchmarks.json"))
        .expect("the point's report");
    let url = point.args["target"]["url"]
        .as_str()
        .expect("the target URL")
        .trim_end_matches('/')
        .to_string();
    let port = url.rsplit(':').next().expect("a port");
    let lines: Vec<String> = std::fs::read_to_string(&seen)
        .expect("the hook ran")
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        lines,
        [
            format!("{port} {port} {url} s0-b1"),
            format!("{port} {port} {url} s0-b2")
        ]
    );
    // One line, with its exit code.
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("--after-bench-cmd"))
        .collect();
    assert_eq!(failed, ["s0-b2: --after-bench-cmd exited with code 7"]);
    let rows = report(dir.path())["rows"].as_array().expect("rows").clone();
    assert!(rows[0].get("after_bench_cmd").is_none(), "{}", rows[0]);
    assert_eq!(rows[1]["after_bench_cmd"]["exit_code"], 0, "{}", rows[1]);
    assert_eq!(rows[2]["after_bench_cmd"]["exit_code"], 7, "{}", rows[2]);
    assert_eq!(
        rows[2]["after_bench_cmd"]["error"], "exited with code 7",
        "{}",
        rows[2]
    );
    // The page and the Markdown name it with the point it came before.
    for page in ["sweep.md", "sweep.html"] {
        let text = std::fs::read_to_string(dir.path().join("out").join(page)).expect("a page");
        assert!(
            text.contains("the --after-bench-cmd before this point failed: exited with code 7"),
            "{page}"
        );
    }
}
