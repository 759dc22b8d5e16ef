//! `llmsurge sweep serve`: the real binary starts the real mock as its server command,
//! once per serve configuration, and runs every benchmark configuration against it.

use crate::support::llmsurge;
use std::path::Path;
use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_llmsurge");

/// The server command: the shell writes its own pid (the process group's id) to
/// `pids`, then runs the mock.
pub(crate) fn serve_cmd(pids: &Path) -> String {
    format!(
        "echo $$ >> {} && {EXE} mock-server --port {{port}}",
        pids.display()
    )
}

pub(crate) fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

/// Two benchmark configurations, small enough for a busy machine.
const BENCH: &str = r#"[
  {"profile": "synchronous", "max_requests": 4, "data": "prompt_tokens=16,output_tokens=4", "max_dispatch_lag": "10s"},
  {"profile": "concurrent", "rate": 2, "max_requests": 6, "data": "prompt_tokens=16,output_tokens=4", "max_dispatch_lag": "10s"}
]"#;

fn sweep(dir: &Path, serve_params: &Path, extra: &[&str]) -> Output {
    let bench = write(dir, "bench.json", BENCH);
    printed(sweep_command("serve", dir, Some(serve_params), &bench).args(extra))
}

/// `llmsurge sweep SUB` with the mock as its server command (each server's process group
/// in DIR/pids), these params files, up to 60 s for a server to be ready, and the
/// results in DIR/out.
pub(crate) fn sweep_command(sub: &str, dir: &Path, serve: Option<&Path>, bench: &Path) -> Command {
    sweep_command_with(sub, dir, &serve_cmd(&dir.join("pids")), serve, bench)
}

/// [`sweep_command`] with another server command.
pub(crate) fn sweep_command_with(
    sub: &str,
    dir: &Path,
    server: &str,
    serve: Option<&Path>,
    bench: &Path,
) -> Command {
    let mut cmd = llmsurge();
    cmd.args(["sweep", sub, "--serve-cmd", server]);
    if let Some(serve) = serve {
        cmd.arg("--serve-params").arg(serve);
    }
    cmd.arg("--bench-params")
        .arg(bench)
        .arg("--output-dir")
        .arg(dir.join("out"))
        .args(["--ready-timeout", "60s"]);
    cmd
}

/// Runs `cmd` and prints what it printed, for a failing test's log.
pub(crate) fn printed(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("llmsurge runs");
    eprintln!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The process groups the server commands ran in.
pub(crate) fn groups(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().expect("a pid"))
        .collect()
}

/// Whether any process is left in group `pgid` (signal 0 to the group).
pub(crate) fn group_alive(pgid: i32) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok()
}

fn report(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("out/sweep.json")).expect("sweep.json"))
        .expect("JSON")
}

#[test]
fn sweep_serve_runs_the_product_stops_every_server_and_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = write(
        dir.path(),
        "serve.json",
        r#"[{"ttft_ms": 2}, {"ttft_ms": 4}]"#,
    );
    let out = sweep(dir.path(), &serve, &[]);
    assert_eq!(out.status.code(), Some(0));
    let pgids = groups(dir.path());
    assert_eq!(pgids.len(), 2, "one server per serve configuration");
    for g in &pgids {
        assert!(!group_alive(*g), "process group {g} still has a process");
    }
    let summary = report(dir.path());
    let rows = summary["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "{summary}");
    for s in 0..2 {
        for b in 0..2 {
            let point = format!("s{s}-b{b}");
            let row = rows
                .iter()
                .find(|r| r["point"] == point.as_str())
                .unwrap_or_else(|| panic!("{point} in {summary}"));
            assert_eq!(row["status"], "ok", "{row}");
            // The row's figures are its point's own report's.
            let point_report = llmsurge::report::Report::load(
                &dir.path().join("out").join(&point).join("benchmarks.json"),
            )
            .expect("the point's report");
            let b0 = &point_report.benchmarks[0];
            assert_eq!(
                row["figures"]["requests_per_s"],
                b0.throughput.requests_per_s
            );
            let want = if b == 0 { 4 } else { 6 };
            assert_eq!(b0.requests.completed, want);
            assert_eq!(row["serve_params"]["ttft_ms"], if s == 0 { 2 } else { 4 });
            // Between two benchmarks of one server its caches are reset (auto: the mock
            // publishes vLLM's series), and the answers are in the row.
            if b == 0 {
                assert!(row.get("cache_reset").is_none(), "{row}");
            } else {
                let reset = &row["cache_reset"];
                assert_eq!(reset["server"], "vllm", "{row}");
                assert_eq!(reset["reset"], true, "{row}");
                assert_eq!(reset["calls"][0]["status"], 200, "{row}");
            }
            // The server's log is beside the report.
            assert!(
                dir.path()
                    .join("out")
                    .join(&point)
                    .join("server.log")
                    .is_file()
            );
        }
    }
    for f in ["sweep.csv", "sweep.md", "sweep.html"] {
        let text = std::fs::read_to_string(dir.path().join("out").join(f)).expect(f);
        assert!(text.contains("s1-b1"), "{f}: {text}");
    }

    // --resume: every point is complete, nothing runs and no server starts.
    let again = sweep(dir.path(), &serve, &["--resume"]);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(groups(dir.path()).len(), 2, "no server started on --resume");
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert_eq!(stdout.matches("skipped (--resume)").count(), 4, "{stdout}");
    let rows = report(dir.path())["rows"].as_array().expect("rows").clone();
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r["status"] == "resumed"));
}

#[test]
fn sweep_serve_dry_run_prints_servers_and_plans_and_runs_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = write(
        dir.path(),
        "serve.json",
        r#"[{"ttft_ms": 2}, {"ttft_ms": 4}]"#,
    );
    let out = sweep(dir.path(), &serve, &["--dry-run"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let servers: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("server s"))
        .collect();
    assert_eq!(servers.len(), 2, "{stdout}");
    assert!(servers[1].contains("mock-server --port") && servers[1].contains("--ttft-ms 4"));
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("plan s")).count(),
        4
    );
    // Each plan is the resolved plan of `benchmark run --dry-run`.
    assert_eq!(stdout.matches("\"max_requests\": 6").count(), 2, "{stdout}");
    assert!(
        groups(dir.path()).is_empty(),
        "a server started on --dry-run"
    );
    assert!(!dir.path().join("out/sweep.json").exists());
}

#[test]
fn sweep_serve_a_server_that_fails_to_start_fails_only_its_configuration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = write(
        dir.path(),
        "serve.json",
        r#"[{"no_such_mock_flag": 1}, {"ttft_ms": 2}]"#,
    );
    let out = sweep(dir.path(), &serve, &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed configuration fails the sweep"
    );
    for g in groups(dir.path()) {
        assert!(!group_alive(g), "process group {g} still has a process");
    }
    let summary = report(dir.path());
    let rows = summary["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "{summary}");
    for r in rows {
        if r["serve_index"] == 0 {
            assert_eq!(r["status"], "failed", "{r}");
            let tail = r["log_tail"].to_string();
            assert!(tail.contains("no-such-mock-flag"), "{r}");
        } else {
            assert_eq!(r["status"], "ok", "{r}");
        }
    }
}

#[test]
fn sweep_serve_a_typo_in_bench_params_fails_before_any_server_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = write(dir.path(), "serve.json", r#"[{"ttft_ms": 2}]"#);
    let bench = write(
        dir.path(),
        "typo.json",
        r#"[{"max_requests": 2}, {"rate": "fast"}]"#,
    );
    let out = llmsurge()
        .args(["sweep", "serve", "--serve-cmd"])
        .arg(serve_cmd(&dir.path().join("pids")))
        .arg("--serve-params")
        .arg(&serve)
        .arg("--bench-params")
        .arg(&bench)
        .arg("--output-dir")
        .arg(dir.path().join("out"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("typo.json: entry 1") && stderr.contains("fast"),
        "{stderr}"
    );
    assert!(groups(dir.path()).is_empty());
}

#[test]
fn sweep_serve_interrupted_stops_its_server_and_benchmark() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = write(dir.path(), "serve.json", r#"[{"ttft_ms": 2}]"#);
    let bench = write(
        dir.path(),
        "long.json",
        r#"[{"profile": "concurrent", "rate": 2, "max_seconds": 60, "max_dispatch_lag": "10s"}]"#,
    );
    let mut child = llmsurge()
        .args(["sweep", "serve", "--serve-cmd"])
        .arg(serve_cmd(&dir.path().join("pids")))
        .arg("--serve-params")
        .arg(&serve)
        .arg("--bench-params")
        .arg(&bench)
        .arg("--output-dir")
        .arg(dir.path().join("out"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    // The benchmark has started once the sweep says so.
    for line in lines.by_ref() {
        if line.expect("a line").contains("s0-b0: running") {
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("signal");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(130), "{rest:?}");
    let pgids = groups(dir.path());
    assert_eq!(pgids.len(), 1);
    assert!(
        !group_alive(pgids[0]),
        "the server's group outlived the sweep"
    );
    let summary = report(dir.path());
    assert_eq!(summary["interrupted"], true, "{summary}");
}

#[test]
fn sweep_serve_without_serve_cmd_runs_bench_params_against_target_with_gpu_figures() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Tokens 1 ms apart: the front's tokens/s per user is 1 / TPOT, which needs a TPOT
    // (the instant mock sends a response's tokens at once: one read, TPOT 0).
    let server = crate::support::mock(llmsurge::mock::MockConfig {
        ttft_ms: 20.0,
        itl_ms: 1.0,
        dcgm_gpus: 2,
        ..llmsurge::mock::MockConfig::instant()
    });
    let bench = write(dir.path(), "bench.json", BENCH);
    let out = llmsurge()
        .args(["sweep", "serve", "--target"])
        .arg(server.base_url())
        .arg("--bench-params")
        .arg(&bench)
        .arg("--output-dir")
        .arg(dir.path().join("out"))
        .args(["--", "--server-metrics-interval", "100ms", "--gpu-metrics"])
        .arg(format!("{}/metrics", server.base_url()))
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = report(dir.path());
    let rows = summary["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{summary}");
    assert_eq!(rows[0]["point"], "b0");
    // Two benchmarks against one running server: one reset, before the second.
    let stats = server.stats();
    assert_eq!(stats.cache_resets.prefix_cache, 1, "{stats:?}");
    for r in rows {
        let point = r["point"].as_str().expect("point");
        let point_report = llmsurge::report::Report::load(
            &dir.path().join("out").join(point).join("benchmarks.json"),
        )
        .expect("report");
        let gpu = point_report.benchmarks[0].gpu.as_ref().expect("gpu");
        assert_eq!(
            r["figures"]["joules_per_output_token"].as_f64(),
            gpu.joules_per_output_token
        );
        assert_eq!(r["figures"]["gpu_power_mean_w"], 600.0);
    }
    // Without --gpus the page's front is per GPU by the count --gpu-metrics saw: each
    // front point's x is its row's output tokens/s per GPU.
    let html = std::fs::read_to_string(dir.path().join("out/sweep.html")).expect("html");
    let charts = page_charts(&html);
    let front = charts
        .iter()
        .find(|c| c["id"] == "sweep-pareto-front")
        .expect("the front");
    assert!(
        front["x"]["name"]
            .as_str()
            .is_some_and(|n| n.contains("per GPU")),
        "{front:#}"
    );
    let marks = front["marks"].as_array().expect("marks");
    assert!(!marks.is_empty(), "{front:#}");
    for m in marks {
        assert!(
            rows.iter()
                .any(|r| r["figures"]["output_tokens_per_s_per_gpu"] == m["x"]),
            "{m} is no row's output tokens/s per GPU"
        );
    }
}

/// The chart descriptions the page embeds (the JSON its script draws).
pub(crate) fn page_charts(html: &str) -> Vec<serde_json::Value> {
    let start = html
        .find(r#"id="report-data">"#)
        .map(|i| i + r#"id="report-data">"#.len())
        .expect("the page's data");
    let end = start + html[start..].find("</script>").expect("its end");
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).expect("JSON");
    data["charts"].as_array().expect("charts").clone()
}

#[test]
fn sweep_serve_page_draws_each_figure_against_each_varied_parameter_and_the_front() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = write(
        dir.path(),
        "serve.json",
        r#"[{"ttft_ms": 2}, {"ttft_ms": 4}]"#,
    );
    // A filter that is not KEY OP VALUE, or names no parameter, is one line, exit 2,
    // before any server starts.
    for (bad, needle) in [("ttft_ms>>", "--filter"), ("nope>=2", "--filter")] {
        let out = sweep(dir.path(), &serve, &["--filter", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains(needle) && stderr.trim().lines().count() == 1,
            "{bad}: {stderr}"
        );
    }
    assert!(groups(dir.path()).is_empty(), "no server started");
    // Every figure against the parameters named (the default page draws a few against
    // the load: sweep_plot's test).
    let out = sweep(
        dir.path(),
        &serve,
        &[
            "--gpus",
            "2",
            "--chart-images",
            "svg",
            "--curve-by",
            "ttft_ms,profile",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let summary = report(dir.path());
    let rows = summary["rows"].as_array().expect("rows").clone();
    let html = std::fs::read_to_string(dir.path().join("out/sweep.html")).expect("html");
    let charts = page_charts(&html);
    // Asked for: serve.ttft_ms and bench.profile (rate and max_requests vary too).
    let ids: Vec<&str> = charts.iter().filter_map(|c| c["id"].as_str()).collect();
    for id in [
        "sweep-tpot_p50-vs-serve-ttft_ms",
        "sweep-ttft_p50-vs-bench-profile",
        "sweep-pareto-front",
    ] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
        // The same chart as an image.
        assert!(
            dir.path()
                .join("out/charts")
                .join(format!("{id}.svg"))
                .is_file(),
            "{id}.svg"
        );
    }
    // Each curve's points are the rows' figures: one line per benchmark configuration,
    // x the serve parameter.
    let curve = charts
        .iter()
        .find(|c| c["id"] == "sweep-ttft_p50-vs-serve-ttft_ms")
        .expect("the curve");
    let series = curve["series"].as_array().expect("series");
    assert_eq!(series.len(), 2, "{curve:#}");
    let mut n = 0;
    for s in series {
        for p in s["points"].as_array().expect("points") {
            let (x, y) = (p[0].as_f64().expect("x"), p[1].as_f64().expect("y"));
            assert!(
                rows.iter()
                    .any(|r| r["serve_params"]["ttft_ms"].as_f64() == Some(x)
                        && r["figures"]["ttft_p50"].as_f64() == Some(y)),
                "({x}, {y}) is no row's: {rows:#?}"
            );
            n += 1;
        }
    }
    assert_eq!(n, 4);
    // The front: per GPU (the total over --gpus 2), each point labelled by its
    // parameters, the front's points from the rows.
    let front = charts
        .iter()
        .find(|c| c["id"] == "sweep-pareto-front")
        .expect("front");
    assert!(
        front["x"]["name"]
            .as_str()
            .is_some_and(|n| n.contains("per GPU")),
        "{front:#}"
    );
    let marks = front["marks"].as_array().expect("marks");
    assert!(!marks.is_empty(), "{front:#}");
    for m in marks {
        let label = m["label"].as_str().expect("label");
        assert!(
            label.contains("ttft_ms=") && label.contains("profile="),
            "{label}"
        );
        let x = m["x"].as_f64().expect("x");
        assert!(
            rows.iter().any(|r| r["figures"]["output_tokens_per_s"]
                .as_f64()
                .is_some_and(|t| (t / 2.0 - x).abs() < 1e-9)),
            "{x} is no row's output tokens/s over 2 GPUs"
        );
    }

    // --filter: the charts show only the points that meet it; the table keeps all.
    let out = sweep(
        dir.path(),
        &serve,
        &["--filter", "ttft_ms<=2", "--curve-by", "profile"],
    );
    assert_eq!(out.status.code(), Some(0));
    let html = std::fs::read_to_string(dir.path().join("out/sweep.html")).expect("html");
    let charts = page_charts(&html);
    assert!(
        charts
            .iter()
            .filter(|c| c["id"] != "sweep-pareto-front")
            .all(|c| c["id"]
                .as_str()
                .is_some_and(|i| i.ends_with("-vs-bench-profile"))),
        "--curve-by profile only"
    );
    let rows = report(dir.path())["rows"].as_array().expect("rows").clone();
    let curve = charts
        .iter()
        .find(|c| c["id"] == "sweep-ttft_p50-vs-bench-profile")
        .expect("the curve");
    let ys: Vec<f64> = curve["series"]
        .as_array()
        .expect("series")
        .iter()
        .flat_map(|s| s["points"].as_array().cloned().unwrap_or_default())
        .map(|p| p[1].as_f64().expect("y"))
        .collect();
    // The two points of the server with ttft_ms 2, each its row's figure.
    assert_eq!(ys.len(), 2, "{curve:#}");
    for y in ys {
        assert!(
            rows.iter().any(|r| r["serve_params"]["ttft_ms"] == 2
                && r["figures"]["ttft_p50"].as_f64() == Some(y)),
            "{y} is no point of ttft_ms=2: {rows:#?}"
        );
    }
    assert_eq!(
        report(dir.path())["rows"].as_array().expect("rows").len(),
        4
    );
}

/// `GET path` on 127.0.0.1:`port`; the body, when the server answers.
pub(crate) fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// Processes whose command line mentions `needle` (the sweep's own folder).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                out.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
            }
        }
    }
    out
}

/// Starts `sweep serve` (the mock as its server, `serve` and `bench` its params, its
/// stdout piped) and returns once its first server has completed `completed` requests of
/// the first benchmark: the sweep, its stdout's remaining lines and that server's port.
fn sweep_under_way(
    dir: &Path,
    serve: &Path,
    bench: &Path,
    out_dir: &Path,
    completed: u64,
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    u16,
) {
    use std::io::BufRead;
    let mut child = llmsurge()
        .args(["sweep", "serve", "--serve-cmd"])
        .arg(serve_cmd(&dir.join("pids")))
        .arg("--serve-params")
        .arg(serve)
        .arg("--bench-params")
        .arg(bench)
        .arg("--output-dir")
        .arg(out_dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        if line.expect("a line").contains("s0-b0: running") {
            break;
        }
    }
    // The first server's port is in its log (the mock's first line).
    let log = std::fs::read_to_string(out_dir.join("s0.server.log")).expect("the log");
    let port: u16 = log
        .lines()
        .find_map(|l| l.strip_prefix("listening on http://127.0.0.1:"))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("a port in {log:?}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while http_get(port, "/stats")
        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|s| s["completed"].as_u64())
        .unwrap_or(0)
        < completed
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the benchmark never reached the server"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (child, lines, port)
}

#[test]
fn sweep_serve_a_server_that_dies_mid_run_fails_only_its_configuration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = write(
        dir.path(),
        "serve.json",
        r#"[{"ttft_ms": 20}, {"ttft_ms": 2}]"#,
    );
    let bench = write(
        dir.path(),
        "bench.json",
        r#"[{"profile": "concurrent", "rate": 2, "max_seconds": 4, "max_dispatch_lag": "10s", "data": "prompt_tokens=16,output_tokens=8"}]"#,
    );
    let out_dir = dir.path().join("out");
    // Kill the server once it has answered requests of the benchmark: mid-run.
    let (mut child, lines, _port) = sweep_under_way(dir.path(), &serve, &bench, &out_dir, 2);
    let pgids = groups(dir.path());
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgids[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the first server");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(1), "a failed configuration: {rest:?}");
    // The sweep went on to the second server, and left no process behind.
    let pgids = groups(dir.path());
    assert_eq!(pgids.len(), 2, "{rest:?}");
    for g in &pgids {
        assert!(!group_alive(*g), "process group {g} still has a process");
    }
    let left = processes_mentioning(&dir.path().display().to_string());
    assert!(left.is_empty(), "left behind: {left:?}");
    let summary = report(dir.path());
    let rows = summary["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{summary}");
    let dead = rows.iter().find(|r| r["point"] == "s0-b0").expect("s0-b0");
    assert_eq!(dead["status"], "failed", "{dead}");
    assert!(
        dead["error"]
            .as_str()
            .is_some_and(|e| e.contains("the server died")),
        "{dead}"
    );
    // The last lines of its log: the mock's own.
    assert!(
        dead["log_tail"].to_string().contains("listening on"),
        "{dead}"
    );
    let alive = rows.iter().find(|r| r["point"] == "s1-b0").expect("s1-b0");
    assert_eq!(alive["status"], "ok", "{alive}");
    for f in ["sweep.md", "sweep.html", "sweep.csv"] {
        let text = std::fs::read_to_string(out_dir.join(f)).expect(f);
        assert!(
            text.contains("the server died") && text.contains("listening on"),
            "{f}: {text}"
        );
    }
}

/// The cells of a Markdown table line: split at each `|` no backslash escapes.
fn md_cells(line: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut chars = line.trim().trim_start_matches('|').chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let cell = cells.last_mut().expect("a cell");
                cell.push(c);
                cell.extend(chars.next());
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().expect("a cell").push(c),
        }
    }
    // The line's closing `|` leaves an empty last cell.
    cells.pop();
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The Markdown table line of `point`.
pub(crate) fn md_line<'a>(md: &'a str, point: &str) -> &'a str {
    md.lines()
        .find(|l| l.starts_with(&format!("| {point} |")))
        .unwrap_or_else(|| panic!("{point} in {md}"))
}

#[test]
fn sweep_serve_params_are_data_never_shell_and_inert_in_every_output() {
    use llmsurge_proto::inert::markdown;
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    let argv = dir.path().join("argv");
    let bench = write(
        dir.path(),
        "bench.json",
        r#"[{"profile": "synchronous", "max_requests": 2, "data": "prompt_tokens=16,output_tokens=4", "max_dispatch_lag": "10s"}]"#,
    );
    // The server writes the words it got for {model} and {note}, one a line, then serves.
    let template = format!(
        "echo $$ >> {} && printf '%s\\n' {{model}} {{note}} >> {} && exec {EXE} mock-server --port {{port}}",
        pids.display(),
        argv.display()
    );
    let run = |serve: &Path| {
        let out = llmsurge()
            // A relative `touch` would land here.
            .current_dir(dir.path())
            .args(["sweep", "serve", "--serve-cmd"])
            .arg(&template)
            .arg("--serve-params")
            .arg(serve)
            .arg("--bench-params")
            .arg(&bench)
            .arg("--output-dir")
            .arg(dir.path().join("out"))
            .args(["--ready-timeout", "60s"])
            .output()
            .expect("llmsurge runs");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        eprintln!("stdout:\n{stdout}\nstderr:\n{stderr}");
        (out.status.code(), stdout, stderr)
    };
    let pwned = || {
        ["PWNED", "PWNED2", "PWNED3"]
            .iter()
            .any(|f| dir.path().join(f).exists() || dir.path().join("out").join(f).exists())
    };

    // Keys that are not plain flag names are refused before anything runs.
    let keys = write(
        dir.path(),
        "keys.json",
        r#"[{"model": "m", "note": "n"}, {"model": "m", "note": "n", "a;touch PWNED;b": 1, "c$(touch PWNED2)": true}]"#,
    );
    let (code, _, stderr) = run(&keys);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("keys.json: entry 1")
            && stderr.contains("a;touch PWNED;b")
            && stderr.contains("plain flag name"),
        "{stderr}"
    );
    assert!(groups(dir.path()).is_empty(), "a server started");
    assert!(!pwned(), "a key ran as shell code");

    // Values reach the server as one literal word each; a placeholder inside a value
    // is text. The second server fails on a hostile value, which its error repeats.
    let model = "x'; touch PWNED; echo '$(touch PWNED2)`touch PWNED3`";
    let note = "{model} {port} ![x](http://e/i.png) [a](b) <img src=x> | \u{1b}[2J";
    let bad = "[a](b) <img src=y> | \u{1b}]0;title\u{7}";
    let serve = serde_json::json!([
        {"model": model, "note": note},
        {"model": "m", "note": "n", "ttft_ms": bad},
    ]);
    let serve = write(dir.path(), "serve.json", &serve.to_string());
    let (code, stdout, stderr) = run(&serve);
    assert_eq!(code, Some(1), "the second configuration fails");
    assert!(!pwned(), "a value ran as shell code");
    let seen = std::fs::read_to_string(&argv).expect("the words the servers got");
    assert_eq!(seen, format!("{model}\n{note}\nm\nn\n"));
    // The console shows the commands with their control characters escaped.
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text}"
        );
    }

    let summary = report(dir.path());
    let rows = summary["rows"].as_array().expect("rows");
    let ok = rows.iter().find(|r| r["point"] == "s0-b0").expect("s0-b0");
    assert_eq!(ok["status"], "ok", "{ok}");
    assert_eq!(ok["serve_params"]["note"], note);
    let failed = rows.iter().find(|r| r["point"] == "s1-b0").expect("s1-b0");
    assert_eq!(failed["status"], "failed", "{failed}");
    let tail: Vec<&str> = failed["log_tail"]
        .as_array()
        .expect("log_tail")
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    assert!(
        tail.iter().any(|l| l.contains("<img src=y>")),
        "the server's error repeats the value: {failed}"
    );

    // sweep.md: no link, image, HTML or control character of theirs; every row has the
    // header's cells; the cells are the texts, escaped.
    let md = std::fs::read_to_string(dir.path().join("out/sweep.md")).expect("sweep.md");
    for raw in ["<img", "![x](", "\u{1b}", "\u{7}"] {
        assert!(!md.contains(raw), "{raw:?} in {md}");
    }
    // A link needs `](` with its `]` unescaped.
    let live = md
        .match_indices("](")
        .any(|(i, _)| !md[..i].ends_with('\\'));
    assert!(!live, "a live link in {md}");
    let header = md
        .lines()
        .find(|l| l.starts_with("| point |"))
        .expect("the header");
    let width = md_cells(header).len();
    for point in ["s0-b0", "s1-b0"] {
        assert_eq!(md_cells(md_line(&md, point)).len(), width, "{point}: {md}");
    }
    assert!(
        md_line(&md, "s0-b0").contains(&format!("| {} |", markdown(note))),
        "{md}"
    );
    let error = format!(
        "{} | log: {}",
        failed["error"].as_str().expect("error"),
        tail.join(" / ")
    );
    assert!(
        md_line(&md, "s1-b0").contains(&format!("| {} |", markdown(&error))),
        "{md}"
    );
    // sweep.csv: the note, a text cell, as written.
    let csv = std::fs::read_to_string(dir.path().join("out/sweep.csv")).expect("sweep.csv");
    assert!(csv.contains("<img src=x>"), "{csv}");
}

#[test]
fn sweep_serve_killed_outright_takes_its_server_and_benchmark_with_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = write(dir.path(), "serve.json", r#"[{"ttft_ms": 2}]"#);
    let bench = write(
        dir.path(),
        "long.json",
        r#"[{"profile": "concurrent", "rate": 2, "max_seconds": 120, "max_dispatch_lag": "10s"}]"#,
    );
    let out_dir = dir.path().join("out");
    let (mut child, _lines, port) = sweep_under_way(dir.path(), &serve, &bench, &out_dir, 1);
    let pgid = groups(dir.path())[0];
    assert!(group_alive(pgid));
    let running = processes_mentioning(&dir.path().display().to_string());
    assert!(
        running.iter().any(|p| p.contains(" benchmark run ")),
        "{running:?}"
    );
    // No chance to clean up: the kernel closes the sweep's files, nothing more.
    child.kill().expect("SIGKILL the sweep");
    child.wait().expect("wait");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = processes_mentioning(&dir.path().display().to_string());
        if !group_alive(pgid) && left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left behind the sweep: server group alive {}, {left:?}",
            group_alive(pgid)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        http_get(port, "/health").is_none(),
        "the server's port still answers"
    );
}

#[test]
fn sweep_serve_a_point_whose_run_was_invalid_reads_invalid_and_fails_the_sweep() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The second server answers every request 500 or 429: no request succeeds.
    let serve = write(
        dir.path(),
        "serve.json",
        r#"[{"ttft_ms": 2}, {"error_rate": 1}]"#,
    );
    let bench = write(
        dir.path(),
        "bench.json",
        r#"[{"profile": "synchronous", "max_requests": 3, "data": "prompt_tokens=16,output_tokens=4", "max_dispatch_lag": "10s"}]"#,
    );
    let run = |extra: &[&str]| {
        llmsurge()
            .args(["sweep", "serve", "--serve-cmd"])
            .arg(serve_cmd(&dir.path().join("pids")))
            .arg("--serve-params")
            .arg(&serve)
            .arg("--bench-params")
            .arg(&bench)
            .arg("--output-dir")
            .arg(dir.path().join("out"))
            .args(["--ready-timeout", "60s"])
            .args(extra)
            .output()
            .expect("runs")
    };
    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Exit code 4: no point failed, one measured nothing (an invalid run).
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    let summary = report(dir.path());
    let rows = summary["rows"].as_array().expect("rows");
    let ok = rows.iter().find(|r| r["point"] == "s0-b0").expect("s0-b0");
    assert_eq!(ok["status"], "ok", "{ok}");
    let invalid = rows.iter().find(|r| r["point"] == "s1-b0").expect("s1-b0");
    assert_eq!(invalid["status"], "invalid", "{invalid}");
    assert_eq!(invalid["exit_code"], 4, "{invalid}");
    // The reason is the point's own report's: none of what it sent completed.
    let point = llmsurge::report::Report::load(&dir.path().join("out/s1-b0/benchmarks.json"))
        .expect("the point's report");
    let r = &point.benchmarks[0].requests;
    assert_eq!((r.completed, r.created), (0, 3));
    let why = invalid["error"].as_str().expect("error");
    assert!(
        why.starts_with("invalid run: ")
            && why.contains(&format!(
                "no request succeeded: 0 of {} completed, {} errored",
                r.created, r.errored
            )),
        "{why}"
    );
    assert!(stderr.contains(&format!("s1-b0: {why}")), "{stderr}");
    let md = std::fs::read_to_string(dir.path().join("out/sweep.md")).expect("sweep.md");
    assert!(
        md_line(&md, "s1-b0").starts_with("| s1-b0 | invalid |"),
        "{md}"
    );
    let html = std::fs::read_to_string(dir.path().join("out/sweep.html")).expect("html");
    assert_eq!(html.matches("<tr class=\"failed\">").count(), 1, "{html}");

    // --resume: the valid point is read back, the invalid one runs again.
    let again = run(&["--resume"]);
    assert_eq!(again.status.code(), Some(4));
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(
        stdout.contains("s0-b0: complete, skipped") && !stdout.contains("s1-b0: complete"),
        "{stdout}"
    );
    assert!(stdout.contains("s1-b0: running"), "{stdout}");
}

/// A server's key among its parameters (vLLM's `--api-key`) is a secret: the sweep
/// prints and saves every configuration's parameters, never that value.
#[test]
fn sweep_serve_a_key_among_the_serve_params_is_in_no_output() {
    const KEY: &str = "sk-sweep-MARKER-77aa31";
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = write(
        dir.path(),
        "serve.json",
        // Two servers whose outputs show the same parameters (the key hidden): the
        // charts must still tell them apart.
        &format!(
            r#"[{{"require_api_key": "{KEY}", "ttft_ms": 2}}, {{"require_api_key": "{KEY}", "ttft_ms": 2}}]"#
        ),
    );
    // A key of the server's own (vLLM's `api_key`), not the benchmark's: only its
    // parameter's name says it is one.
    const SERVER_KEY: &str = "sk-server-MARKER-19cc02";
    let vllm = write(
        dir.path(),
        "vllm.json",
        &format!(r#"[{{"api_key": "{SERVER_KEY}", "hf_token": "hf_MARKERtoken99"}}]"#),
    );
    let dry = sweep(dir.path(), &vllm, &["--dry-run"]);
    assert_eq!(dry.status.code(), Some(0));
    let printed = String::from_utf8_lossy(&dry.stdout);
    assert!(
        printed.contains("--api-key")
            && !printed.contains(SERVER_KEY)
            && !printed.contains("hf_MARKERtoken99"),
        "{printed}"
    );
    let out = sweep(dir.path(), &serve, &["--", "--api-key", KEY]);
    assert_eq!(out.status.code(), Some(0));
    let mut texts = vec![
        String::from_utf8_lossy(&dry.stdout).into_owned(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ];
    for name in ["sweep.json", "sweep.csv", "sweep.md", "sweep.html"] {
        texts.push(std::fs::read_to_string(dir.path().join("out").join(name)).expect(name));
    }
    for t in &texts {
        assert!(!t.contains(KEY), "the key leaked: {t}");
    }
    // The parameter is shown, its value redacted; the key reached the server (the
    // point ran, exit 0 above) and the server's log names it redacted too.
    assert!(
        texts[3].contains(r#""require_api_key": "<redacted>""#),
        "{}",
        texts[3]
    );
    // Each server's points are its own lines, named by the server: never one line
    // through both servers' points because their shown parameters are equal.
    let labels: Vec<String> = page_charts(&texts[6])
        .iter()
        .flat_map(|c| c["series"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s["label"].as_str().map(str::to_string))
        .collect();
    for server in ["server=s0", "server=s1"] {
        assert!(
            labels.iter().any(|l| l.contains(server)),
            "{server}: {labels:?}"
        );
    }
}
