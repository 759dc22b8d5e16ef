//! `llmsurge sweep serve`'s runs: `--resume` by parameters, each point's validity
//! (outcome, shares, lower bounds; invalid and not-kept-up points marked and off the
//! front; the exit code), and the report's provenance and `--repeat` spreads. Every
//! sweep starts the real mock as its server command.

use crate::sweep::{
    groups, md_line, page_charts, printed, sweep_command, sweep_command_with, write,
};
use serde_json::Value;
use std::path::Path;
use std::process::Output;

/// Runs `sweep serve` into `dir/out` with these serve and bench configurations, extra
/// sweep flags, and the shared flags after `--`.
fn sweep(dir: &Path, serve: &str, bench: &str, extra: &[&str], shared: &[&str]) -> Output {
    sweep_env(dir, serve, bench, extra, shared, &[])
}

/// [`sweep`] with `env` set, as a CI job's variables.
fn sweep_env(
    dir: &Path,
    serve: &str,
    bench: &str,
    extra: &[&str],
    shared: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let serve = write(dir, "serve.json", serve);
    let bench = write(dir, "bench.json", bench);
    printed(
        sweep_command("serve", dir, Some(&serve), &bench)
            .args(extra)
            .arg("--")
            .args(shared)
            .envs(env.iter().copied()),
    )
}

fn sweep_json(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("out/sweep.json")).expect("sweep.json"))
        .expect("JSON")
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join("out").join(name)).expect(name)
}

fn row<'a>(report: &'a Value, point: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["point"] == point)
        .unwrap_or_else(|| panic!("{point} in {report}"))
}

/// When each point's report was written: a point run again has a new one.
fn started(dir: &Path, points: &[&str]) -> Vec<f64> {
    points
        .iter()
        .map(|p| {
            llmsurge::report::Report::load(&dir.join("out").join(p).join("benchmarks.json"))
                .expect("the point's report")
                .metadata
                .start_time
        })
        .collect()
}

const POINTS: [&str; 4] = ["s0-b0", "s0-b1", "s1-b0", "s1-b1"];
const SHARED: [&str; 4] = [
    "--data",
    "prompt_tokens=16,output_tokens=4",
    "--max-dispatch-lag",
    "10s",
];

/// Issue 41: a resumed point is kept only when it measured the server this sweep runs. The
/// server command stays the same while the engine behind it is upgraded (the mock's
/// version comes from a file): once a point that had to run anyway has read the new
/// server, every resumed point of the old one runs again, named with the field; with
/// `--allow-server-change engine_version` it stays. Each point's report holds the version
/// the mock published when it ran.
#[test]
fn sweep_resume_runs_again_the_points_measured_against_another_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let version = d.join("version");
    let server = format!(
        "{} --engine-version \"$(cat {})\"",
        crate::sweep::serve_cmd(&d.join("pids")),
        version.display()
    );
    let bench = write(
        d,
        "bench.json",
        r#"[{"profile": "synchronous", "max_requests": 3}, {"profile": "concurrent", "rate": 2, "max_requests": 4}]"#,
    );
    let run = |v: &str, extra: &[&str]| {
        std::fs::write(&version, v).expect("version");
        printed(
            sweep_command_with("serve", d, &server, None, &bench)
                .args(extra)
                .arg("--")
                .args(SHARED),
        )
    };
    let engine = |p: &str| {
        llmsurge::report::Report::load(&d.join("out").join(p).join("benchmarks.json"))
            .expect("the point's report")
            .server_fingerprint
            .expect("a fingerprint")
            .before
            .engine_version
            .value
    };
    assert_eq!(run("1.0", &[]).status.code(), Some(0));
    assert_eq!(engine("s0-b0").as_deref(), Some("1.0"));
    // s0-b1 lost its record, so it runs; it reads 2.0, and s0-b0 (1.0) runs again.
    std::fs::remove_file(d.join("out/s0-b1/point.json")).expect("point.json");
    let out = run("2.0", &["--resume"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l
            == "s0-b0: runs again (--resume): measured against another server: engine_version 1.0 -> 2.0 (--allow-server-change FIELD keeps it)"),
        "{stdout}"
    );
    for p in ["s0-b0", "s0-b1"] {
        assert_eq!(engine(p).as_deref(), Some("2.0"), "{p}");
        assert_eq!(row(&sweep_json(d), p)["status"], "ok", "{p}");
    }
    // Allowed: s0-b0 stays as measured.
    std::fs::remove_file(d.join("out/s0-b1/point.json")).expect("point.json");
    let out = run(
        "3.0",
        &["--resume", "--allow-server-change", "engine_version"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(engine("s0-b0").as_deref(), Some("2.0"));
    assert_eq!(engine("s0-b1").as_deref(), Some("3.0"));
    let kept = row(&sweep_json(d), "s0-b0").clone();
    assert_eq!(kept["status"], "resumed");
    // Kept, and said: on the console and among the point's warnings.
    let said = "kept (--resume): the server changed, allowed by --allow-server-change: engine_version 2.0 -> 3.0";
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("s0-b0: {said}")), "{stdout}");
    assert!(
        kept["warnings"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w == said)),
        "{kept}"
    );
    // Every point complete: no server starts, and the sweep says nothing was checked.
    let out = run("4.0", &["--resume"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "server s0: not started (every point complete, --resume), so its points were not checked"
        ),
        "{stdout}"
    );
    // A CI job's gate variable is compare's, not the sweep's: it breaks no sweep.
    let out = printed(
        sweep_command_with("serve", d, &server, None, &bench)
            .env("LLMSURGE_ALLOW_SERVER_CHANGE", "engine_version")
            .arg("--")
            .args(SHARED),
    );
    assert_eq!(out.status.code(), Some(0));
    // The flag compares nothing without --resume: refused, one line.
    let out = run("4.0", &["--allow-server-change", "engine_version"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("only --resume compares servers"),
        "{stderr}"
    );
    // A field the gate does not know is one line, exit 2.
    let out = run("3.0", &["--resume", "--allow-server-change", "nope"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.trim().lines().count() == 1 && stderr.contains("--allow-server-change"),
        "{stderr}"
    );
}

/// Break test of issue 37: `--resume` kept every point whose folder was complete,
/// whatever had changed. Changing one serve configuration, then one bench
/// configuration, then the shared flags runs again exactly the points they reach, each
/// named with what changed; unchanged inputs run nothing.
#[test]
fn sweep_resume_runs_again_exactly_the_points_whose_inputs_changed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let bench = |rate: u32| {
        format!(
            r#"[{{"profile": "synchronous", "max_requests": 3}},
               {{"profile": "concurrent", "rate": {rate}, "max_requests": 4}}]"#
        )
    };
    let serve = |ttft: u32| format!(r#"[{{"ttft_ms": 2}}, {{"ttft_ms": {ttft}}}]"#);
    let first = sweep(d, &serve(3), &bench(2), &[], &SHARED);
    assert_eq!(first.status.code(), Some(0));
    let mut before = started(d, &POINTS);

    // Which points ran again, from their reports' start times; and the lines that say so.
    let mut resume = |serve: &str, bench: &str, shared: &[&str], want: &[&str], why: &str| {
        let out = sweep(d, serve, bench, &["--resume"], shared);
        assert_eq!(out.status.code(), Some(0));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let now = started(d, &POINTS);
        for (i, p) in POINTS.iter().enumerate() {
            let again = want.contains(p);
            assert_eq!(now[i] != before[i], again, "{p} ran again: {stdout}");
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("{p}: runs again (--resume): ")));
            assert_eq!(line.is_some(), again, "{p}: {stdout}");
            if let Some(line) = line {
                assert!(line.contains(why), "{line}");
            }
            assert_eq!(
                stdout.contains(&format!("{p}: complete, skipped (--resume)")),
                !again,
                "{stdout}"
            );
            let r = sweep_json(d);
            let status = &row(&r, p)["status"];
            assert_eq!(*status, if again { "ok" } else { "resumed" }, "{p}");
        }
        before = now;
    };
    resume(
        &serve(5),
        &bench(2),
        &SHARED,
        &["s1-b0", "s1-b1"],
        "serve params changed: ttft_ms 3 → 5",
    );
    resume(
        &serve(5),
        &bench(3),
        &SHARED,
        &["s0-b1", "s1-b1"],
        "bench params changed: rate 2 → 3",
    );
    let mut shared = SHARED.to_vec();
    shared.extend(["--random-seed", "7"]);
    resume(
        &serve(5),
        &bench(3),
        &shared,
        &POINTS,
        "shared flags (after --) changed: --data prompt_tokens=16,output_tokens=4 --max-dispatch-lag 10s → --data prompt_tokens=16,output_tokens=4 --max-dispatch-lag 10s --random-seed 7",
    );
    // Nothing changed: nothing runs, no server starts.
    let servers = groups(d).len();
    resume(&serve(5), &bench(3), &shared, &[], "");
    // The same flags in another order, one written `--flag=value`: the same runs.
    let reordered = [
        "--random-seed",
        "7",
        "--max-dispatch-lag=10s",
        "--data",
        "prompt_tokens=16,output_tokens=4",
    ];
    assert_eq!(shared.len(), reordered.len() + 1, "{shared:?}");
    resume(&serve(5), &bench(3), &reordered, &[], "");
    assert_eq!(groups(d).len(), servers, "a server started");
    // A variable every point's run reads (a CI job's) changed: every point runs again.
    let out = sweep_env(
        d,
        &serve(5),
        &bench(3),
        &["--resume"],
        &shared,
        &[("LLMSURGE_SAMPLE_REQUESTS", "5")],
    );
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for p in POINTS {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!(
                "{p}: runs again (--resume): LLMSURGE_* variables changed: (none) → LLMSURGE_SAMPLE_REQUESTS=5"
            ))),
            "{p}: {stdout}"
        );
    }
    // The inputs are recorded beside each point's report.
    let done: Value =
        serde_json::from_slice(&std::fs::read(d.join("out/s1-b1/point.json")).expect("point.json"))
            .expect("JSON");
    assert_eq!(done["inputs"]["serve_params"]["ttft_ms"], 5, "{done}");
    assert_eq!(done["inputs"]["bench_params"]["rate"], 3, "{done}");
    assert_eq!(done["inputs"]["shared_flags"][5], "7", "{done}");
    assert_eq!(
        done["inputs"]["llmsurge_version"],
        env!("CARGO_PKG_VERSION"),
        "{done}"
    );
}

/// Break test of issue 37: a point whose `benchmark run` exits 4 (no request
/// succeeded: the mock errors every request) fails the sweep with exit code 4 and a
/// summary line, and is marked invalid in every table, in the charts (drawn apart, named
/// in the notes) and left off the front.
#[test]
fn sweep_a_point_whose_run_exits_4_fails_the_sweep_and_is_marked_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let out = sweep(
        d,
        r#"[{"ttft_ms": 2, "itl_ms": 2, "error_rate": 0}, {"ttft_ms": 2, "itl_ms": 2, "error_rate": 1}]"#,
        r#"[{"profile": "concurrent", "rate": 2, "max_requests": 4}]"#,
        &[],
        &SHARED,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    let report = sweep_json(d);
    let ok = row(&report, "s0-b0");
    assert_eq!(ok["outcome"], "ok", "{ok}");
    assert_eq!(ok["exit_code"], 0, "{ok}");
    assert_eq!(ok["requests"]["completed"], 4, "{ok}");
    assert_eq!(ok["requests"]["completed_share"], 1.0, "{ok}");
    let bad = row(&report, "s1-b0");
    assert_eq!(bad["outcome"], "invalid", "{bad}");
    assert_eq!(bad["exit_code"], 4, "{bad}");
    assert_eq!(bad["requests"]["completed"], 0, "{bad}");
    assert_eq!(bad["requests"]["completed_share"], 0.0, "{bad}");
    let why = bad["error"].as_str().expect("why");
    assert!(
        why.contains("no request succeeded: 0 of 4 completed"),
        "{why}"
    );
    // One summary line per failed point, after the whole sweep.
    assert!(stderr.contains("sweep: 1 of 2 points failed:"), "{stderr}");
    assert!(
        stderr.contains(&format!("  s1-b0: invalid: {why}")),
        "{stderr}"
    );
    // The tables: the outcome column.
    let md = read(d, "sweep.md");
    let header = md
        .lines()
        .find(|l| l.starts_with("| point |"))
        .expect("header");
    assert!(
        header.contains("| outcome | exit_code | completed_share | unfinished_share |"),
        "{header}"
    );
    // Figures carry their units in the tables a person reads; the CSV keeps bare names.
    assert!(
        header.contains("| ttft_p99 (ms) |") && header.contains("| requests_per_s (requests/s) |"),
        "{header}"
    );
    let csv = read(d, "sweep.csv");
    assert!(
        csv.lines().next().is_some_and(|h| h.contains(",ttft_p99,")),
        "{csv}"
    );
    assert!(
        md_line(&md, "s1-b0").contains("| invalid | 4 | 0.0% |"),
        "{md}"
    );
    assert!(
        md_line(&md, "s0-b0").contains("| ok | 0 | 100.0% |"),
        "{md}"
    );
    let csv = read(d, "sweep.csv");
    assert!(
        csv.lines()
            .any(|l| l.starts_with("s1-b0,invalid,") && l.contains(",invalid,4,0.0000,")),
        "{csv}"
    );
    // The charts: the invalid point is apart from every curve, named in the notes.
    let html = read(d, "sweep.html");
    let charts = page_charts(&html);
    let rate = charts
        .iter()
        .find(|c| {
            c["id"]
                .as_str()
                .is_some_and(|i| i.starts_with("sweep-requests_per_s-vs-"))
        })
        .expect("a requests/s chart");
    let apart = rate["series"]
        .as_array()
        .expect("series")
        .iter()
        .find(|s| s["label"] == "invalid or not kept up (not the server at this load)")
        .unwrap_or_else(|| panic!("the invalid point apart: {rate}"));
    assert_eq!(apart["line"], false, "{apart}");
    assert_eq!(
        apart["points"].as_array().expect("points").len(),
        1,
        "{apart}"
    );
    // The valid point is on a curve of its own; the invalid one is on none.
    let curves: Vec<&Value> = rate["series"]
        .as_array()
        .expect("series")
        .iter()
        .filter(|s| *s != apart)
        .collect();
    assert_eq!(curves.len(), 1, "{rate}");
    assert_eq!(
        curves[0]["points"].as_array().expect("points").len(),
        1,
        "{rate}"
    );
    assert_eq!(
        curves[0]["points"][0][0], 0.0,
        "the valid point at error_rate 0: {rate}"
    );
    assert!(
        rate["notes"][0]
            .as_str()
            .is_some_and(|n| n.starts_with("s1-b0") && n.contains("invalid")),
        "{rate}"
    );
    let front = charts
        .iter()
        .find(|c| c["id"] == "sweep-pareto-front")
        .expect("the front");
    assert!(
        front["notes"].as_array().expect("notes").iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.starts_with("left off the front: s1-b0"))),
        "{front}"
    );
    assert!(html.contains("Warnings and invalid points"), "{html}");
}

/// Break test of issue 37: a constant rate far above what the server serves (2 slots,
/// about 8 req/s, offered 20 req/s) leaves most requests unfinished; its latencies
/// measure the time limit, not the server. The row says not kept up, with its shares and
/// the lower bounds its unfinished requests give, and it is off the front, while the
/// sweep (which offered that load on purpose) exits 0.
#[test]
fn sweep_a_load_the_server_did_not_keep_up_with_is_marked_and_off_the_front() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let out = sweep(
        d,
        r#"[{"max_concurrency": 2, "ttft_ms": 100, "itl_ms": 10, "output_tokens": 16}]"#,
        r#"[{"profile": "concurrent", "rate": 2, "max_requests": 6},
           {"profile": "constant", "rate": 20, "max_seconds": 3}]"#,
        &[],
        &[
            "--data",
            "prompt_tokens=16,output_tokens=16",
            "--max-dispatch-lag",
            "10s",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let report = sweep_json(d);
    let kept = row(&report, "s0-b0");
    assert_eq!(kept["outcome"], "ok", "{kept}");
    let drowned = row(&report, "s0-b1");
    assert_eq!(drowned["outcome"], "not_kept_up", "{drowned}");
    assert!(
        drowned["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("the server did not keep up: ")),
        "{drowned}"
    );
    // Its shares and lower bounds are its own report's.
    let point = llmsurge::report::Report::load(&d.join("out/s0-b1/benchmarks.json"))
        .expect("the point's report");
    let b = &point.benchmarks[0];
    let m = &b.measured_requests;
    assert!(m.cancelled > 0, "{m:?}");
    assert_eq!(drowned["requests"]["unfinished"], m.cancelled, "{drowned}");
    assert_eq!(drowned["requests"]["completed"], m.completed, "{drowned}");
    let e2e = &b.metrics["request_latency_with_incomplete"].total;
    assert_eq!(
        drowned["lower_bounds"]["e2e_p99"], e2e.percentiles.p99,
        "{drowned}"
    );
    let md = read(d, "sweep.md");
    let line = md_line(&md, "s0-b1");
    assert!(line.contains("| not_kept_up |"), "{line}");
    assert!(line.contains("≥ "), "the lower bounds: {line}");
    // Off the front: its label is on no mark; the notes say why.
    let charts = page_charts(&read(d, "sweep.html"));
    let front = charts
        .iter()
        .find(|c| c["id"] == "sweep-pareto-front")
        .expect("the front");
    let marks = front["marks"].as_array().expect("marks");
    assert_eq!(marks.len(), 1, "{front}");
    assert!(
        marks
            .iter()
            .all(|m| !m["label"].as_str().unwrap_or_default().contains("rate=20")),
        "{front}"
    );
    assert!(
        front["notes"][0].as_str().is_some_and(
            |n| n.starts_with("left off the front: s0-b1") && n.contains("not_kept_up")
        ),
        "{front}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("s0-b1: done (exit code 0): not_kept_up"),
        "{stdout}"
    );
}

/// Break test of issue 37: a two-second flood (constant@100 against 2 slots: a dozen of
/// two hundred requests done) read `ok` and topped the Pareto front, too short for the
/// kept-up rules to judge. Most of an open-loop load unfinished is not kept up; a
/// closed loop's streams in flight at the stop are not.
#[test]
fn sweep_a_short_flood_mostly_unfinished_is_not_kept_up_and_off_the_front() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let out = sweep(
        d,
        r#"[{"max_concurrency": 2, "ttft_ms": 100, "itl_ms": 10, "output_tokens": 16}]"#,
        r#"[{"profile": "concurrent", "rate": 2},
           {"profile": "constant", "rate": 100}]"#,
        &[],
        &[
            "--max-seconds",
            "2",
            "--data",
            "prompt_tokens=16,output_tokens=16",
            "--max-dispatch-lag",
            "10s",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let report = sweep_json(d);
    let closed = row(&report, "s0-b0");
    assert_eq!(closed["outcome"], "ok", "{closed}");
    let flood = row(&report, "s0-b1");
    assert_eq!(flood["outcome"], "not_kept_up", "{flood}");
    // The point's own report: most of its measured requests never finished.
    let point = llmsurge::report::Report::load(&d.join("out/s0-b1/benchmarks.json"))
        .expect("the point's report");
    let m = &point.benchmarks[0].measured_requests;
    assert!(
        2 * m.cancelled > m.completed + m.errored + m.cancelled,
        "{m:?}"
    );
    let charts = page_charts(&read(d, "sweep.html"));
    let front = charts
        .iter()
        .find(|c| c["id"] == "sweep-pareto-front")
        .expect("the front");
    assert!(
        front["marks"]
            .as_array()
            .expect("marks")
            .iter()
            .all(|m| !m["label"].as_str().unwrap_or_default().contains("rate=100")),
        "{front}"
    );
}

/// Break test of issue 37: the sweep report did not say what ran (shared flags,
/// version, model, host, times), a point's warnings stayed in its run.log, and
/// `--repeat` rows read "(run 1)" while holding the mean, with no spread.
#[test]
fn sweep_report_records_what_ran_its_warnings_and_repeat_means_with_spread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // The mock counts prompts 1.7 times longer than the client: a warning of the run.
    let out = sweep(
        d,
        r#"[{"ttft_ms": 2, "prompt_tokens_scale": 1.7}]"#,
        r#"[{"profile": "synchronous", "max_requests": 3},
           {"profile": "concurrent", "rate": 2, "max_requests": 4}]"#,
        &["--repeat", "2"],
        &[
            "--data",
            "prompt_tokens=64,output_tokens=4",
            "--max-dispatch-lag",
            "10s",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let report = sweep_json(d);
    assert_eq!(report["llmsurge_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        report["shared_flags"],
        serde_json::json!([
            "--data",
            "prompt_tokens=64,output_tokens=4",
            "--max-dispatch-lag",
            "10s"
        ])
    );
    let point = llmsurge::report::Report::load(&d.join("out/s0-b0/benchmarks.json"))
        .expect("the point's report");
    assert_eq!(report["models"][0], point.target.model.as_str(), "{report}");
    assert!(!report["host"].as_str().unwrap_or_default().is_empty());
    for t in ["started_at", "ended_at"] {
        let s = report[t].as_str().expect(t);
        chrono::DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{t} {s}: {e}"));
    }
    assert!(report["started_at"].as_str() <= report["ended_at"].as_str());
    let r = row(&report, "s0-b0");
    assert_eq!(r["runs"], 2, "{r}");
    assert_eq!(r["benchmark"], "synchronous (mean of 2)", "{r}");
    // The mean and spread are the point's own across-runs statistics.
    let stats = &point.across_runs[0].figures["requests_per_s"];
    assert_eq!(r["figures"]["requests_per_s"], stats.mean, "{r}");
    assert_eq!(r["spread"]["requests_per_s"], stats.std, "{r}");
    let warning = r["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter_map(Value::as_str)
        .find(|w| w.starts_with("warning: prompt lengths differ"))
        .unwrap_or_else(|| panic!("the run's warning: {r}"))
        .to_string();
    // On the console too, named by its point.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("s0-b0: {warning}")), "{stderr}");
    let md = read(d, "sweep.md");
    assert!(md.contains("--max-dispatch-lag 10s"), "{md}");
    assert!(md.contains(env!("CARGO_PKG_VERSION")), "{md}");
    assert!(md_line(&md, "s0-b0").contains(" ± "), "{md}");
    assert!(md.contains("warning: prompt lengths differ"), "{md}");
    let html = read(d, "sweep.html");
    assert!(html.contains("Flags every point got"), "{html}");
    assert!(
        html.contains(
            &warning
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&quot;")
        ),
        "{html}"
    );
    let csv = read(d, "sweep.csv");
    let header = csv.lines().next().expect("header");
    assert!(
        header.contains("requests_per_s,requests_per_s_std"),
        "{header}"
    );
    // The charts: each mean with an error bar of ± its spread.
    let charts = page_charts(&html);
    let rate = charts
        .iter()
        .find(|c| {
            c["id"]
                .as_str()
                .is_some_and(|i| i.starts_with("sweep-requests_per_s-vs-"))
        })
        .expect("a requests/s chart");
    let bars = rate["error_bars"].as_array().expect("error bars");
    assert_eq!(bars.len(), 2, "{rate}");
    assert!(
        bars.iter()
            .any(|b| b["low"] == stats.mean - stats.std && b["high"] == stats.mean + stats.std),
        "{rate}"
    );
}

/// Break test of issue 37: a credential in a variable every point's run reads
/// (`LLMSURGE_BACKEND_KWARGS` with a header and a body key) was recorded verbatim in each
/// point.json, and `--resume` after changing it printed the old and the new value. It is
/// hidden as the flag's value is, in every file and line.
#[test]
fn sweep_a_credential_in_a_run_variable_is_in_no_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let serve = r#"[{"ttft_ms": 1}]"#;
    let bench = r#"[{"profile": "concurrent", "rate": 1, "max_requests": 2}]"#;
    let kwargs = |n: u32| {
        format!(
            r#"{{"headers": {{"X-Api-Key": "sk-MARKER-head-{n}"}}, "extra_body": {{"api_key": "sk-MARKER-body-{n}"}}}}"#
        )
    };
    let mut printed = String::new();
    for (n, extra) in [(1, &[][..]), (2, &["--resume"][..])] {
        let out = sweep_env(
            d,
            serve,
            bench,
            extra,
            &SHARED,
            &[("LLMSURGE_BACKEND_KWARGS", kwargs(n).as_str())],
        );
        assert_eq!(out.status.code(), Some(0));
        printed.push_str(&String::from_utf8_lossy(&out.stdout));
        printed.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    // Recorded hidden, as the sweep's other inputs: a changed secret alone runs nothing
    // again (so no old value is ever printed beside a new one).
    assert!(
        printed.contains("s0-b0: complete, skipped (--resume)"),
        "{printed}"
    );
    let mut texts = vec![printed];
    let mut dirs = vec![d.join("out")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).expect("dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if let Ok(t) = std::fs::read_to_string(&p) {
                texts.push(format!("{}: {t}", p.display()));
            }
        }
    }
    for t in &texts {
        assert!(!t.contains("sk-MARKER"), "a credential leaked: {t}");
    }
}
