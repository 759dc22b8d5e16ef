//! `--repeat` and `--until-precise`, with the real binary and
//! the built-in mock: every figure the report states is recomputed here from what the
//! report (or `requests.jsonl`) keeps, independently of the code that wrote it.

use crate::scenario::Bench;
use crate::support::{llmsurge, mock};
use llmsurge::mock::MockConfig;
use serde_json::Value;
use statrs::distribution::{ContinuousCDF, StudentsT};

const DATA: &str = "prompt_tokens=16,output_tokens=16";

fn server() -> llmsurge::mock::MockServer {
    mock(MockConfig {
        ttft_ms: 20.0,
        itl_ms: 1.0,
        ..MockConfig::instant()
    })
}

fn json(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json")
}

/// A headline figure as the report's benchmark states it; `None` when it has none.
fn figure(b: &Value, name: &str) -> Option<f64> {
    match name {
        "requests_per_s" => return b["throughput"]["requests_per_s"].as_f64(),
        "output_tokens_per_s" => return b["throughput"]["output_tokens_per_s"].as_f64(),
        "goodput_per_s" => return b["goodput"]["requests_per_s"].as_f64(),
        _ => {}
    }
    let (metric, stat) = name.rsplit_once('_').expect("metric_stat");
    let key = if metric == "e2e" {
        "request_latency"
    } else {
        metric
    };
    let d = &b["metrics"][key]["successful"];
    if d["count"].as_u64().unwrap_or(0) == 0 {
        return None;
    }
    d["percentiles"][stat].as_f64()
}

const FIGURES: [&str; 15] = [
    "ttft_p50",
    "ttft_p90",
    "ttft_p99",
    "itl_p50",
    "itl_p90",
    "itl_p99",
    "tpot_p50",
    "tpot_p90",
    "tpot_p99",
    "e2e_p50",
    "e2e_p90",
    "e2e_p99",
    "requests_per_s",
    "output_tokens_per_s",
    "goodput_per_s",
];

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Every `across_runs` figure is the mean, sample std, CV and 95% t-interval of the
/// figure over the runs the report keeps; figures no run has are absent.
fn assert_across_runs_recompute(report: &Value, runs: usize) {
    let benchmarks = report["benchmarks"].as_array().expect("benchmarks");
    let across = report["across_runs"].as_array().expect("across_runs");
    assert_eq!(across.len(), 1, "one benchmark position");
    let a = &across[0];
    assert_eq!(a["runs"].as_u64(), Some(runs as u64));
    for name in FIGURES {
        let values: Vec<f64> = benchmarks.iter().filter_map(|b| figure(b, name)).collect();
        let stated = &a["figures"][name];
        if values.is_empty() {
            assert!(
                stated.is_null(),
                "{name}: absent in every run, so absent: {stated}"
            );
            continue;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let t = StudentsT::new(0.0, 1.0, n - 1.0)
            .expect("t")
            .inverse_cdf(0.975);
        let half = t * std / n.sqrt();
        assert_eq!(stated["n"].as_u64(), Some(values.len() as u64), "{name}");
        for (key, want) in [
            ("mean", mean),
            ("std", std),
            ("ci_low", mean - half),
            ("ci_high", mean + half),
        ] {
            let got = stated[key].as_f64().expect(key);
            assert!(close(got, want), "{name}.{key}: {got} vs {want}");
        }
        if mean != 0.0 {
            let cv = stated["cv"].as_f64().expect("cv");
            assert!(close(cv, std / mean), "{name}.cv");
        }
    }
}

#[test]
fn repeat_three_keeps_every_run_and_its_across_runs_figures_recompute_from_them() {
    let server = server();
    let run = Bench::on(&server)
        .constant(40)
        .max_requests(20)
        .data(DATA)
        .repeat(3)
        .repeat_cooldown("10ms")
        .slo("e2e_p50<=60s")
        .goodput("e2e:60s")
        .request_log("requests.jsonl")
        .outputs("json,csv,markdown,html,console")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let report = json(&run.report_path());
    let benchmarks = report["benchmarks"].as_array().expect("benchmarks");
    let runs: Vec<u64> = benchmarks
        .iter()
        .map(|b| b["run"].as_u64().expect("run"))
        .collect();
    assert_eq!(runs, [0, 1, 2], "every run kept, in order");
    assert_across_runs_recompute(&report, 3);
    // The SLO's runs-passed count is the per-run verdicts'.
    let passed = benchmarks
        .iter()
        .filter(|b| b["slo"]["passed"].as_bool() == Some(true))
        .count() as u64;
    let slo = &report["across_runs"][0]["slo"];
    assert_eq!(slo["runs"].as_u64(), Some(3));
    assert_eq!(slo["passed"].as_u64(), Some(passed));
    assert_eq!(slo["all_passed"].as_bool(), Some(passed == 3));
    assert!(
        run.stdout.contains(&format!("{passed} of 3 runs passed")),
        "{}",
        run.stdout
    );
    // Every output shows them.
    let dir = run.dir.path();
    let csv = std::fs::read_to_string(dir.join("benchmarks.csv")).expect("csv");
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header = reader.headers().expect("header").clone();
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), 3);
    let mean = report["across_runs"][0]["figures"]["ttft_p99"]["mean"]
        .as_f64()
        .expect("mean");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(&r[col("repeat.run")], i.to_string().as_str());
        let cell: f64 = r[col("across_runs.ttft_p99.mean")].parse().expect("number");
        assert!(close(cell, mean));
    }
    let md = std::fs::read_to_string(dir.join("benchmarks.md")).expect("md");
    assert!(md.contains("## Across 3 runs"), "{md}");
    assert!(md.contains(&format!("{passed} of 3 runs passed")));
    let html = std::fs::read_to_string(dir.join("benchmarks.html")).expect("html");
    assert!(html.contains("<h2>Across runs</h2>"));
    assert!(run.stdout.contains("Across 3 runs"), "{}", run.stdout);
    // A saved report shows them again.
    let again = llmsurge()
        .args(["benchmark", "from-file"])
        .arg(run.report_path())
        .args(["--outputs", "console", "--output-dir"])
        .arg(dir)
        .output()
        .expect("from-file runs");
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(stdout.contains("Across 3 runs"), "{stdout}");
    assert!(
        stdout.contains(&format!("{passed} of 3 runs passed")),
        "{stdout}"
    );
    // The request log marks each request's run; request ids never repeat across runs.
    let log = std::fs::read_to_string(dir.join("requests.jsonl")).expect("log");
    let entries: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("line"))
        .collect();
    for r in 0..3u64 {
        assert_eq!(
            entries
                .iter()
                .filter(|e| e["run"].as_u64() == Some(r))
                .count(),
            20,
            "run {r}"
        );
    }
    let mut ids: Vec<&str> = entries
        .iter()
        .filter_map(|e| e["request_id"].as_str())
        .collect();
    assert_eq!(ids.len(), 60);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 60, "request ids are unique across runs");
}

#[test]
fn repeated_failing_slo_counts_no_passing_run_and_gates_with_exit_3() {
    let server = server();
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(6)
        .data(DATA)
        .stream(false)
        .repeat(2)
        .slo("e2e_p50<=1ms")
        .outputs("json,console")
        .run();
    assert_eq!(run.code(), 3, "{}", run.stderr);
    let report = json(&run.report_path());
    let slo = &report["across_runs"][0]["slo"];
    assert_eq!(
        (slo["runs"].as_u64(), slo["passed"].as_u64()),
        (Some(2), Some(0))
    );
    assert!(run.stdout.contains("0 of 2 runs passed"), "{}", run.stdout);
    // Not streamed: no TPOT or ITL in any run, so none across runs (absent, not 0).
    let figures = report["across_runs"][0]["figures"]
        .as_object()
        .expect("figures");
    assert!(
        figures
            .keys()
            .all(|k| !k.starts_with("tpot") && !k.starts_with("itl"))
    );
    assert!(figures.contains_key("e2e_p50"));
    assert_across_runs_recompute(&report, 2);
}

fn compare_markdown(base: &std::path::Path, cur: &std::path::Path) -> (String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let md = dir.path().join("c.md");
    let out = llmsurge()
        .args(["benchmark", "compare"])
        .arg(base)
        .arg(cur)
        .arg("--markdown")
        .arg(&md)
        .output()
        .expect("compare runs");
    assert!(matches!(out.status.code(), Some(0 | 3)), "{out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        std::fs::read_to_string(&md).expect("markdown"),
    )
}

#[test]
fn compare_uses_run_to_run_variance_with_repeats_and_the_bootstrap_without() {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    let report = |repeat: u32, name: &str| {
        let run = Bench::on(&server)
            .concurrent(2)
            .max_requests(20)
            .data(DATA)
            .repeat(repeat)
            .outputs("json")
            .run();
        assert_eq!(run.code(), 0, "{}", run.stderr);
        let path = dir.path().join(name);
        std::fs::copy(run.report_path(), &path).expect("copy");
        path
    };
    let (a, b) = (report(3, "a.json"), report(3, "b.json"));
    let (stdout, md) = compare_markdown(&a, &b);
    assert!(
        stdout.contains("variance: run-to-run (3 baseline runs, 3 current runs"),
        "{stdout}"
    );
    assert!(md.contains("variance: run-to-run"), "{md}");
    // The row's values are the means over the runs, and its samples the run counts.
    let mean = json(&a)["across_runs"][0]["figures"]["ttft_p50"]["mean"]
        .as_f64()
        .expect("mean");
    let row = md
        .lines()
        .find(|l| l.contains("| ttft_p50 |"))
        .expect("ttft_p50 row");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[3], llmsurge::report::cell_value(Some(mean)), "{row}");
    assert_eq!(cells[8], "3 / 3", "{row}");

    let (c, d) = (report(1, "c.json"), report(1, "d.json"));
    let (stdout, md) = compare_markdown(&c, &d);
    assert!(
        stdout.contains("variance: within one run (bootstrap"),
        "{stdout}"
    );
    assert!(md.contains("variance: within one run (bootstrap"), "{md}");
}

/// The 1-based order-statistic ranks of the docs (docs/metrics.md, `--until-precise`).
fn ranks(n: usize, p: f64) -> Option<(usize, usize, usize)> {
    let nf = n as f64;
    let half = 1.959_963_984_540_054 * (nf * p * (1.0 - p)).sqrt();
    let (l, u) = ((nf * p - half).floor(), (nf * p + half).ceil() + 1.0);
    let k = (nf * p).ceil().max(1.0);
    (l >= 1.0 && u <= nf).then_some((l as usize, k as usize, u as usize))
}

/// Within the histograms' 3 significant digits (and the µs they record in).
fn hdr_close(reported: f64, exact: f64) -> bool {
    (reported - exact).abs() <= exact * 2e-3 + 0.002
}

#[test]
fn until_precise_stops_when_the_interval_recomputed_from_the_requests_is_tight() {
    let server = server();
    let run = Bench::on(&server)
        .constant(50)
        .max_requests(5000)
        .data(DATA)
        .until_precise("e2e_p50:20%")
        .request_log("requests.jsonl")
        .outputs("json")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let report = json(&run.report_path());
    let b = &report["benchmarks"][0];
    assert_eq!(
        b["stop_reason"]["kind"], "precision_reached",
        "{}",
        b["stop_reason"]
    );
    let p = &b["precision"];
    assert_eq!(p["stopped_it"], true);
    let f = &p["figures"][0];
    assert_eq!(f["figure"], "e2e_p50");
    // Recompute from every measured completed request the log kept.
    let log = std::fs::read_to_string(run.dir.path().join("requests.jsonl")).expect("log");
    let mut e2e: Vec<f64> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("line"))
        .filter(|e| e["status"] == "completed" && e["phase"] == "measured")
        .map(|e| e["latency_ms"].as_f64().expect("latency"))
        .collect();
    e2e.sort_by(f64::total_cmp);
    assert_eq!(
        b["measured_requests"]["completed"].as_u64(),
        Some(e2e.len() as u64)
    );
    assert!(e2e.len() < 5000, "it stopped before its limit");
    let (l, k, u) = ranks(e2e.len(), 0.5).expect("bounded");
    let (lo, v, hi) = (e2e[l - 1], e2e[k - 1], e2e[u - 1]);
    for (key, exact) in [("ci_low", lo), ("value", v), ("ci_high", hi)] {
        let got = f[key].as_f64().expect(key);
        assert!(hdr_close(got, exact), "{key}: {got} vs {exact}");
    }
    let precision = f["precision"].as_f64().expect("precision");
    let exact = (v - lo).max(hi - v) / v;
    assert!((precision - exact).abs() <= 5e-3, "{precision} vs {exact}");
    assert_eq!(f["met"], true);
    assert!(precision <= 0.20);
}

#[test]
fn until_precise_cut_by_its_limit_reports_the_precision_reached() {
    let server = server();
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(30)
        .data(DATA)
        .until_precise("ttft_p99:1%,e2e_p50:50%")
        .outputs("json,console")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let report = json(&run.report_path());
    let b = &report["benchmarks"][0];
    assert_eq!(b["stop_reason"]["kind"], "max_requests");
    let p = &b["precision"];
    assert_eq!(
        (p["met"].as_bool(), p["stopped_it"].as_bool()),
        (Some(false), Some(false))
    );
    // 30 requests cannot bound a p99: no interval, no precision, not met.
    let ttft = &p["figures"][0];
    assert!(ranks(30, 0.99).is_none());
    assert!(ttft["precision"].is_null() && ttft["ci_high"].is_null());
    assert_eq!(ttft["met"], false);
    // The median is bounded: its precision is stated.
    assert!(p["figures"][1]["precision"].as_f64().is_some());
    assert!(
        run.stdout
            .contains("precision not reached (the limits ended the benchmark first)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("ttft_p99 – [– – –] unbounded (too few requests)"),
        "{}",
        run.stdout
    );
}

#[test]
fn bad_repeat_and_precision_specs_exit_2_naming_the_flag() {
    for (args, flag) in [
        (vec!["--until-precise", "ttft_p99"], "--until-precise"),
        (vec!["--until-precise", "ttft_p99:0%"], "--until-precise"),
        (vec!["--until-precise", "bogus_p50:5%"], "--until-precise"),
        (
            vec!["--until-precise", "e2e_p50:5%,e2e_p50:3%"],
            "--until-precise",
        ),
        (
            vec!["--until-precise", "tpot_p50:5%", "--stream", "false"],
            "--until-precise",
        ),
        (vec!["--repeat", "0"], "--repeat"),
        (vec!["--repeat-cooldown", "1s"], "--repeat-cooldown"),
        (
            vec![
                "--repeat",
                "2",
                "--profile",
                "capacity",
                "--slo",
                "e2e_p50<=1s",
            ],
            "--repeat",
        ),
    ] {
        let out = llmsurge()
            .args([
                "benchmark",
                "run",
                "--target",
                "http://127.0.0.1:9",
                "--max-requests",
                "1",
            ])
            .args(&args)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn ctrl_c_during_the_repeat_cooldown_ends_the_repeats_and_keeps_the_runs_done() {
    use nix::sys::signal::{Signal, kill};
    let server = server();
    let url = server.base_url();
    let live = super::signals::Live::start(
        &Bench::target(&url)
            .synchronous()
            .max_requests(5)
            .data(DATA)
            .repeat(3)
            .repeat_cooldown("10m")
            .outputs("json"),
        false,
    );
    live.wait_for_stderr("repeat: run 1 of 3 done; run 2 starts in 600s");
    kill(super::signals::pid(live.pid()), Signal::SIGINT).expect("SIGINT");
    let run = live.finish();
    assert_eq!(run.code(), 130, "{}", run.stderr);
    let report = json(&run.report_path());
    assert_eq!(report["metadata"]["interrupted"], true);
    let runs: Vec<u64> = report["benchmarks"]
        .as_array()
        .expect("benchmarks")
        .iter()
        .map(|b| b["run"].as_u64().expect("run"))
        .collect();
    assert_eq!(runs, [0], "the first run is kept, no other started");
    assert_eq!(report["across_runs"][0]["runs"].as_u64(), Some(1));
}

#[test]
fn merged_shards_of_repeated_runs_keep_their_runs_and_recompute_across_runs() {
    let server = server();
    let url = server.base_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let shards: Vec<std::path::PathBuf> = (0..2u32)
        .map(|i| {
            let run = Bench::target(&url)
                .constant(40)
                .max_requests(10)
                .seed(7)
                .data(DATA)
                .repeat(2)
                .outputs("json")
                .run();
            assert_eq!(run.code(), 0, "{}", run.stderr);
            // The report as shard i of 2 (as `benchmark merge`'s own tests do).
            let mut v = json(&run.report_path());
            v["metadata"]["shard"] = serde_json::json!({ "index": i, "count": 2 });
            v["args"]["shard"] = serde_json::json!({ "index": i, "count": 2 });
            let path = dir.path().join(format!("shard-{i}.json"));
            std::fs::write(&path, serde_json::to_vec(&v).expect("json")).expect("write");
            path
        })
        .collect();
    let out = dir.path().join("merged");
    let merged = llmsurge()
        .args(["benchmark", "merge"])
        .args(&shards)
        .args(["--outputs", "json", "--output-dir"])
        .arg(&out)
        .output()
        .expect("merge runs");
    assert_eq!(
        merged.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let report = json(&out.join("benchmarks.json"));
    let runs: Vec<u64> = report["benchmarks"]
        .as_array()
        .expect("benchmarks")
        .iter()
        .map(|b| b["run"].as_u64().expect("run"))
        .collect();
    assert_eq!(runs, [0, 1]);
    assert_across_runs_recompute(&report, 2);
}

#[test]
fn a_run_a_dead_worker_cut_short_is_left_out_of_across_runs_and_named() {
    use nix::sys::signal::{Signal, kill};
    // Requests of ~300 ms on 4 streams over 2 workers: several always in flight.
    let server = mock(MockConfig {
        ttft_ms: 100.0,
        itl_ms: 10.0,
        output_tokens: 20,
        ..MockConfig::instant()
    });
    let (child, dir) = Bench::on(&server)
        .concurrent(4)
        .workers(2)
        .data("prompt_tokens=16,output_tokens=20")
        .max_seconds(3)
        .repeat(3)
        // The others carry on: a run that exits 0 and would be averaged in unnoticed.
        .arg("--on-worker-failure", "continue")
        .outputs("json,csv,markdown,html,console")
        .start(|_| {});
    // The first run's workers; one of them killed once requests are in flight.
    let workers = crate::support::wait_for_children(child.id(), 2);
    crate::support::wait_in_flight(&server, 4);
    kill(super::signals::pid(workers[0]), Signal::SIGKILL).expect("kill the worker");
    let run = crate::support::wait_run(child, dir);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let report = json(&run.report_path());
    let benchmarks = report["benchmarks"].as_array().expect("benchmarks");
    let died = |b: &Value| {
        b["workers"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["died"] == true))
    };
    let runs: Vec<(u64, bool)> = benchmarks
        .iter()
        .map(|b| (b["run"].as_u64().expect("run"), died(b)))
        .collect();
    assert_eq!(
        runs,
        [(0, true), (1, false), (2, false)],
        "the first run's worker died"
    );
    // The first run is named, with why, and left out of the figures.
    let a = &report["across_runs"][0];
    assert_eq!(a["runs"].as_u64(), Some(3));
    let left_out = a["left_out"].as_array().expect("left_out");
    assert_eq!(left_out.len(), 1, "{left_out:?}");
    assert_eq!(left_out[0]["run"].as_u64(), Some(0));
    let pid = workers[0];
    let reasons = left_out[0]["reasons"].to_string();
    assert!(
        reasons.contains(&format!("died: signal 9 (pid {pid})")),
        "{reasons}"
    );
    // Each figure is over the two sound runs, as recomputed from them.
    let sound: Vec<&Value> = benchmarks.iter().filter(|b| !died(b)).collect();
    for name in FIGURES {
        let values: Vec<f64> = sound.iter().filter_map(|b| figure(b, name)).collect();
        let stated = &a["figures"][name];
        if values.is_empty() {
            assert!(stated.is_null(), "{name}: {stated}");
            continue;
        }
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert_eq!(stated["n"].as_u64(), Some(values.len() as u64), "{name}");
        let got = stated["mean"].as_f64().expect("mean");
        assert!(close(got, mean), "{name}: {got} vs {mean}");
    }
    // Said wherever the figures show.
    let line = "1 of 3 runs left out of the figures across runs: run 1 (worker";
    assert!(run.stdout.contains(line), "{}", run.stdout);
    assert!(
        run.stdout.contains("mean of the runs not left out below"),
        "{}",
        run.stdout
    );
    let md = std::fs::read_to_string(run.dir.path().join("benchmarks.md")).expect("md");
    assert!(
        md.contains("runs left out of the figures across runs"),
        "{md}"
    );
    let html = std::fs::read_to_string(run.dir.path().join("benchmarks.html")).expect("html");
    assert!(html.contains("runs left out of the figures across runs"));
    let csv = run.csv_first_row();
    assert_eq!(csv.cell("repeat.run"), "0");
    assert!(
        csv.cell("repeat.left_out").contains("died: signal 9"),
        "{:?}",
        csv.cell("repeat.left_out")
    );
}

/// What a `--repeat` run with `--random-seed` sent, as a fresh prefix-caching mock saw it.
struct Sent {
    report: Value,
    stats: llmsurge::mock::MockStats,
    /// Per run, in run order: each request's user messages as the mock recorded them,
    /// sorted (the mock's `x-request-id` joined with the request log's `run`).
    prompts: Vec<Vec<String>>,
    /// Per run: each slot's scheduled instant from its benchmark's start, in slot order.
    arrivals: Vec<Vec<f64>>,
}

/// Poisson arrivals at 40/s, 8 requests of 64-token prompts (four cache blocks) a run.
fn send_repeated(seed: u64, repeat: u32) -> Sent {
    let (server, _dir, record) = crate::support::recording(MockConfig {
        record_header: vec![llmsurge_proto::REQUEST_ID_HEADER.into()],
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .profile("poisson")
        .rate(40)
        .max_requests(8)
        .data("prompt_tokens=64,output_tokens=2")
        .seed(seed)
        .repeat(repeat)
        .request_log("requests.jsonl")
        .outputs("json")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let stats = server.stats();
    // The record is complete once the mock has stopped.
    drop(server);
    let report = json(&run.report_path());
    let log = crate::support::recorded(&run.dir.path().join("requests.jsonl"));
    // A single run's records carry no run: it is run 0.
    let run_of = |e: &Value| e["run"].as_u64().unwrap_or(0) as usize;
    let runs = repeat as usize;
    let mut prompts = vec![Vec::new(); runs];
    for line in crate::support::recorded(&record) {
        let id = line["headers"][llmsurge_proto::REQUEST_ID_HEADER]
            .as_str()
            .unwrap_or_else(|| panic!("a recorded request without an id: {line}"));
        let entry = log
            .iter()
            .find(|e| e["request_id"] == id)
            .unwrap_or_else(|| panic!("request {id} is not in the request log"));
        prompts[run_of(entry)].push(line["body"]["messages"].to_string());
    }
    prompts.iter_mut().for_each(|p| p.sort());
    let starts: Vec<f64> = report["benchmarks"]
        .as_array()
        .expect("benchmarks")
        .iter()
        .map(|b| b["start_time"].as_f64().expect("start_time"))
        .collect();
    assert_eq!(starts.len(), runs, "one benchmark a run");
    let mut arrivals = vec![Vec::new(); runs];
    let mut by_slot: Vec<&Value> = log.iter().collect();
    by_slot.sort_by_key(|e| e["slot"].as_u64());
    for e in by_slot {
        let at = e["scheduled_time"].as_f64().expect("scheduled_time");
        arrivals[run_of(e)].push(at - starts[run_of(e)]);
    }
    Sent {
        report,
        stats,
        prompts,
        arrivals,
    }
}

/// Issue 36 finding 2: `--repeat` re-sent run 1's prompts and arrivals in every later run,
/// and a prefix-caching server answered runs 2..N from its cache (99.5% hits). The mock's
/// prefix cache is the oracle: three runs hit no more than three single runs would.
#[test]
fn repeated_runs_each_draw_their_own_seed_and_hit_no_prefix_an_earlier_run_cached() {
    let seed = 7;
    let single = send_repeated(seed, 1);
    let three = send_repeated(seed, 3);
    let s = &three.stats;
    assert_eq!(
        s.prefix_cache_queries, s.prompt_tokens,
        "every prompt looked up: {s:?}"
    );
    assert!(s.prompt_tokens >= 3 * 8 * 32, "{s:?}");
    assert!(
        s.prefix_cache_hits <= 3 * single.stats.prefix_cache_hits,
        "three runs hit {} prompt tokens, one run {}: a run answered from another's",
        s.prefix_cache_hits,
        single.stats.prefix_cache_hits
    );
    // No prompt of one run in another; the first run is the single run of its seed.
    let all: Vec<&String> = three.prompts.iter().flatten().collect();
    assert_eq!(all.len(), 24);
    let distinct: std::collections::HashSet<&&String> = all.iter().collect();
    assert_eq!(distinct.len(), 24, "a prompt repeated across runs");
    assert_eq!(three.prompts[0], single.prompts[0]);
    // Offsets from t0, each through its run's clock anchor (Unix seconds, a few tenths
    // of a µs apart): the same schedule is equal within 10 µs.
    let same = |a: &[f64], b: &[f64]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
    };
    assert!(
        same(&three.arrivals[0], &single.arrivals[0]),
        "{:?}",
        three.arrivals
    );
    assert!(
        !same(&three.arrivals[1], &three.arrivals[0]),
        "run 2 re-used run 1's arrivals: {:?}",
        three.arrivals
    );
    assert!(!same(&three.arrivals[2], &three.arrivals[1]));
    // Every run's seed is recorded, distinct, the first the run seed.
    let seeds: Vec<u64> = three.report["args"]["run_seeds"]
        .as_array()
        .expect("args.run_seeds")
        .iter()
        .map(|v| v.as_u64().expect("a seed"))
        .collect();
    assert_eq!(seeds.len(), 3);
    assert_eq!(seeds[0], seed);
    assert!(seeds[1] != seeds[0] && seeds[2] != seeds[0] && seeds[2] != seeds[1]);
    assert_eq!(
        three.report["across_runs"][0]["seeds"],
        three.report["args"]["run_seeds"]
    );
    // The same --random-seed reproduces the whole set: seeds, prompts and arrivals.
    let again = send_repeated(seed, 3);
    assert_eq!(
        again.report["args"]["run_seeds"],
        three.report["args"]["run_seeds"]
    );
    assert_eq!(again.prompts, three.prompts);
    for (a, b) in again.arrivals.iter().zip(&three.arrivals) {
        assert!(same(a, b), "{a:?} vs {b:?}");
    }
}

/// Issue 36 finding 2, the gate: against a prefix-caching server whose prefill costs
/// 0.4 ms a prompt token not cached, runs 2..N of a repeat that re-sent run 1's prompts
/// skipped the prefill, and the run-to-run spread that made hid a real TTFT regression
/// ("within noise", exit 0). Each run drawing its own prompts, the regression (the
/// mock's TTFT 20 → 80 ms before a prefill of about 100 ms) is judged as one.
#[test]
fn a_repeated_gate_finds_the_ttft_regression_a_prefix_cache_would_have_hidden() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = |ttft_ms: f64, name: &str| {
        let server = mock(MockConfig {
            ttft_ms,
            ttft_ms_per_prompt_token: 0.4,
            itl_ms: 1.0,
            ..MockConfig::instant()
        });
        let run = Bench::on(&server)
            .constant(20)
            .max_requests(10)
            .data("prompt_tokens=256,output_tokens=4")
            .repeat(3)
            .outputs("json")
            .run();
        assert_eq!(run.code(), 0, "{}", run.stderr);
        // The oracle: the mock's cache answered no prompt of any run from another.
        let stats = server.stats();
        assert_eq!(stats.prefix_cache_hits, 0, "{stats:?}");
        let path = dir.path().join(name);
        std::fs::copy(run.report_path(), &path).expect("copy");
        path
    };
    let (base, cur) = (report(20.0, "base.json"), report(80.0, "cur.json"));
    let out = llmsurge()
        .args(["benchmark", "compare"])
        .arg(&base)
        .arg(&cur)
        .args(["--max-regression", "ttft_p50=10%"])
        .output()
        .expect("compare runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains("variance: run-to-run (3 baseline runs, 3 current runs"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.split(['│', '┆']).any(|cell| cell.trim() == "ttft_p50"))
        .unwrap_or_else(|| panic!("a ttft_p50 row: {stdout}"));
    assert!(row.contains("REGRESSED"), "{stdout}");
}

/// Issue 38: a cooldown of zero (a script's computed pause, a CI job's variable) is no
/// pause, not a usage error.
#[test]
fn a_zero_repeat_cooldown_is_no_pause() {
    let server = server();
    let run = Bench::on(&server)
        .constant(40)
        .max_requests(5)
        .data(DATA)
        .repeat(2)
        .run_with_env(&[("LLMSURGE_REPEAT_COOLDOWN", "0s")]);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert_eq!(run.report().benchmarks.len(), 2);
    assert!(!run.stderr.contains("starts in"), "{}", run.stderr);
}

#[test]
fn compare_judges_a_side_with_one_valid_run_left_by_its_within_run_noise_and_warns_of_an_invalid_report()
 {
    let server = server();
    let dir = tempfile::tempdir().expect("tempdir");
    let run = Bench::on(&server)
        .concurrent(2)
        .max_requests(20)
        .data(DATA)
        .repeat(2)
        .outputs("json")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let base = dir.path().join("base.json");
    std::fs::copy(run.report_path(), &base).expect("copy");
    // The same report as the current side, but its second run left out as invalid (a
    // run whose dispatch lag was too high): its figures hold one run, whose run-to-run
    // mean is set 50% worse; the report says it is invalid.
    let mut cur = json(&base);
    let across = &mut cur["across_runs"][0];
    across["left_out"] =
        serde_json::json!([{"run": 1, "reasons": ["client dispatch lag p99 29 ms > 10 ms"]}]);
    for (_, f) in across["figures"].as_object_mut().expect("figures") {
        let mean = f["mean"].as_f64().expect("mean");
        f["n"] = 1.into();
        f["mean"] = (mean * 1.5).into();
        f["std"] = 0.0.into();
        f["cv"] = Value::Null;
        f["ci_low"] = Value::Null;
        f["ci_high"] = Value::Null;
    }
    cur["invalid_run"] = serde_json::json!([
        "concurrent@2: client dispatch lag p99 29 ms > 10 ms (--max-dispatch-lag)"
    ]);
    let cur_path = dir.path().join("cur.json");
    std::fs::write(&cur_path, serde_json::to_vec(&cur).expect("json")).expect("write");
    let (stdout, md) = compare_markdown(&base, &cur_path);
    // One run has no run-to-run variance: never a verdict without an interval.
    let row = md
        .lines()
        .find(|l| l.contains("| ttft_p50 |"))
        .expect("ttft_p50 row");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_ne!(cells[6], "–", "an interval: {row}");
    assert_ne!(
        cells[8], "2 / 1",
        "within-run samples, not run counts: {row}"
    );
    assert!(!row.contains("REGRESSED"), "{row}");
    assert!(
        stdout.contains("(2 baseline runs, 1 current runs used"),
        "the runs the figures were taken over: {stdout}"
    );
    assert!(
        md.contains(
            "the current report is an invalid run (concurrent@2: client dispatch lag p99 29 ms"
        ),
        "the warning is in the Markdown (and on stderr): {md}"
    );
}
