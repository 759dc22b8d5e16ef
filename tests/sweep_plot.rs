//! `llmsurge sweep plot` and `sweep plot-pareto`: a finished sweep (the real mock started
//! by the sweep itself) drawn again from its sweep.json with a chosen x and y, without
//! its servers; every point drawn is the sweep report's own figure.

use crate::support::llmsurge;
use crate::sweep::{page_charts, printed, sweep_command, sweep_command_with, write};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

/// A 2×2 sweep: two mock capacities, two concurrencies.
fn finished_sweep(dir: &Path) -> Value {
    let serve = write(
        dir,
        "serve.json",
        r#"[{"max_concurrency": 2}, {"max_concurrency": 8}]"#,
    );
    let bench = write(
        dir,
        "bench.json",
        r#"[{"profile": "concurrent", "rate": 1}, {"profile": "concurrent", "rate": 4}]"#,
    );
    let out = printed(
        sweep_command("serve", dir, Some(&serve), &bench)
            .args(["--chart-images", "png", "--"])
            .args([
                "--max-requests",
                "8",
                "--data",
                "prompt_tokens=16,output_tokens=4",
            ])
            .args(["--max-dispatch-lag", "10s"]),
    );
    assert_eq!(out.status.code(), Some(0));
    serde_json::from_slice(&std::fs::read(dir.join("out/sweep.json")).expect("sweep.json"))
        .expect("JSON")
}

fn plot(dir: &Path, args: &[&str]) -> Output {
    llmsurge()
        .args(["sweep", "plot"])
        .arg(dir.join("out"))
        .args(args)
        .output()
        .expect("llmsurge runs")
}

fn files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("the plots")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

/// The sweep report's figure `figure` of the point with `max_concurrency` and `rate`.
fn truth(sweep: &Value, max_concurrency: u64, rate: u64, figure: &str) -> f64 {
    sweep["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| {
            r["serve_params"]["max_concurrency"] == max_concurrency
                && r["bench_params"]["rate"] == rate
        })
        .and_then(|r| r["figures"][figure].as_f64())
        .unwrap_or_else(|| panic!("{figure} of {max_concurrency}/{rate}"))
}

fn points(series: &Value) -> Vec<(f64, f64)> {
    series["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| (p[0].as_f64().expect("x"), p[1].as_f64().expect("y")))
        .collect()
}

#[test]
fn sweep_plot_redraws_a_finished_sweep_with_the_chosen_axes_curves_and_panels() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sweep = finished_sweep(dir.path());

    // The sweep's own page: a few figures against the load, a curve per server, and
    // the front; not every figure against every parameter.
    let page_files = files(&dir.path().join("out/charts"));
    let want: BTreeSet<String> = [
        "ttft_p99",
        "tpot_p50",
        "e2e_p99",
        "requests_per_s",
        "output_tokens_per_s",
    ]
    .iter()
    .map(|f| format!("sweep-{f}-vs-bench-rate.png"))
    .chain(["sweep-pareto-front.png".to_string()])
    .collect();
    assert_eq!(page_files, want);
    let html = std::fs::read_to_string(dir.path().join("out/sweep.html")).expect("the page");
    for c in page_charts(&html)
        .iter()
        .filter(|c| c["id"] != "sweep-pareto-front")
    {
        // `rate` of a concurrent profile counts streams, and says so.
        assert_eq!(c["x"]["unit"], "streams", "{}", c["id"]);
        let colours: BTreeSet<&str> = c["series"]
            .as_array()
            .expect("series")
            .iter()
            .map(|s| s["color"].as_str().expect("color"))
            .collect();
        assert_eq!(colours.len(), 2, "a colour per server: {}", c["id"]);
    }
    let plots = dir.path().join("out/plots");

    // The default: TTFT p99 against output tokens/s, a curve per server configuration.
    let out = plot(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        files(&plots),
        BTreeSet::from([
            "plot-ttft_p99-vs-output_tokens_per_s.png".to_string(),
            "plot.html".to_string()
        ])
    );
    let html = std::fs::read_to_string(plots.join("plot.html")).expect("the page");
    let charts = page_charts(&html);
    assert_eq!(charts.len(), 1);
    let labels: Vec<&str> = charts[0]["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|s| s["label"].as_str().expect("label"))
        .collect();
    assert_eq!(labels, ["max_concurrency=2", "max_concurrency=8"]);
    for s in charts[0]["series"].as_array().expect("series") {
        let mc: u64 = s["label"].as_str().expect("label")[16..]
            .parse()
            .expect("a count");
        let mut want: Vec<(f64, f64)> = [1, 4]
            .iter()
            .map(|&rate| {
                (
                    truth(&sweep, mc, rate, "output_tokens_per_s"),
                    truth(&sweep, mc, rate, "ttft_p99"),
                )
            })
            .collect();
        want.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(points(s), want, "{mc}");
    }

    // A chosen x (a parameter) and two y figures, a panel per server configuration,
    // points labelled: each chart one curve, its points the sweep's own figures.
    let elsewhere = dir.path().join("mine");
    let out = plot(
        dir.path(),
        &[
            "--var-x",
            "rate",
            "--y",
            "ttft_p99,requests_per_s",
            "--fig-by",
            "max_concurrency",
            "--label-by",
            "rate",
            "--outputs",
            "svg,html",
            "--output-dir",
            elsewhere.to_str().expect("path"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let written = files(&elsewhere);
    assert_eq!(written.len(), 5, "{written:?}");
    assert!(
        written
            .iter()
            .all(|f| f.ends_with(".svg") || f == "plot.html")
    );
    let charts = page_charts(&std::fs::read_to_string(elsewhere.join("plot.html")).expect("page"));
    assert_eq!(charts.len(), 4);
    for c in &charts {
        let title = c["title"].as_str().expect("title");
        let figure = if title.starts_with("ttft_p99") {
            "ttft_p99"
        } else {
            "requests_per_s"
        };
        let mc = if title.contains("max_concurrency=2") {
            2
        } else {
            8
        };
        assert_eq!(c["x"]["name"], "rate", "{title}");
        let series = c["series"].as_array().expect("series");
        assert_eq!(series.len(), 1, "{title}");
        assert_eq!(
            points(&series[0]),
            vec![
                (1.0, truth(&sweep, mc, 1, figure)),
                (4.0, truth(&sweep, mc, 4, figure))
            ],
            "{title}"
        );
        let marks: Vec<&str> = c["marks"]
            .as_array()
            .expect("marks")
            .iter()
            .map(|m| m["label"].as_str().expect("label"))
            .collect();
        assert_eq!(marks, ["rate=1", "rate=4"], "{title}");
    }

    // What the sweep does not have: one line naming the flag, exit 2.
    for (args, flag) in [
        (&["--x", "nope"][..], "--x"),
        (&["--y", "ttft_p99,nope"][..], "--y"),
        (&["--curve-by", "nope"][..], "--curve-by"),
        // A figure is no curve; one no point measured is no axis.
        (&["--curve-by", "ttft_p99"][..], "is a figure"),
        (&["--y", "goodput_per_s"][..], "goodput_per_s"),
        (&["--outputs", "pdf"][..], "--outputs"),
        (&["--filter", "nope<3"][..], "nope"),
    ] {
        let out = plot(dir.path(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
    let out = llmsurge()
        .args(["sweep", "plot"])
        .arg(dir.path())
        .output()
        .expect("llmsurge runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sweep.json"));

    // The front of every point, as an image.
    let out = llmsurge()
        .args(["sweep", "plot-pareto"])
        .arg(dir.path().join("out"))
        .args(["--outputs", "png", "--output-dir"])
        .arg(dir.path().join("front"))
        .output()
        .expect("llmsurge runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        files(&dir.path().join("front")),
        BTreeSet::from(["sweep-pareto-front.png".to_string()])
    );
}

/// The chart of `charts` with this id.
fn chart<'a>(charts: &'a [Value], id: &str) -> &'a Value {
    let ids: Vec<&str> = charts.iter().filter_map(|c| c["id"].as_str()).collect();
    charts
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("{id} in {ids:?}"))
}

fn series_labels(c: &Value) -> Vec<String> {
    c["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|s| s["label"].as_str().expect("label").to_string())
        .collect()
}

fn notes(c: &Value) -> Vec<String> {
    c["notes"]
        .as_array()
        .map(|n| {
            n.iter()
                .map(|x| x.as_str().expect("note").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Every point of every series of `c`.
fn all_points(c: &Value) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = c["series"]
        .as_array()
        .expect("series")
        .iter()
        .flat_map(points)
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

#[test]
fn sweep_rate_lists_put_each_benchmark_at_its_own_rate_streams_apart_from_requests() {
    // vLLM's workload levels: a configuration with a list of rates, each a benchmark of
    // the point; and one of streams beside it.
    let dir = tempfile::tempdir().expect("tempdir");
    let bench = write(
        dir.path(),
        "bench.json",
        r#"[{"profile": "constant", "rate": [6, 10, 14, 20]}, {"profile": "concurrent", "rate": [1, 2]}]"#,
    );
    let out = printed(
        sweep_command("serve", dir.path(), None, &bench)
            .args(["--chart-images", "svg", "--"])
            .args([
                "--max-requests",
                "6",
                "--data",
                "prompt_tokens=16,output_tokens=4",
            ])
            .args(["--max-dispatch-lag", "10s"]),
    );
    assert_eq!(out.status.code(), Some(0));
    let sweep: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/sweep.json")).expect("json"))
            .expect("JSON");
    // The truth: each row's own load and figure, by the unit of its load.
    let rows = sweep["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 6, "{sweep:#}");
    let truth = |unit: &str, figure: &str| -> Vec<(f64, f64)> {
        let mut t: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r["load"]["unit"] == unit)
            .map(|r| {
                (
                    r["load"]["value"].as_f64().expect("load"),
                    r["figures"][figure].as_f64().expect("figure"),
                )
            })
            .collect();
        t.sort_by(|a, b| a.0.total_cmp(&b.0));
        t
    };
    assert_eq!(
        truth("requests/s", "ttft_p99")
            .iter()
            .map(|p| p.0)
            .collect::<Vec<_>>(),
        [6.0, 10.0, 14.0, 20.0]
    );
    assert_eq!(
        truth("streams", "ttft_p99")
            .iter()
            .map(|p| p.0)
            .collect::<Vec<_>>(),
        [1.0, 2.0]
    );

    // The page: a chart per meaning of the rate, each benchmark at its own rate.
    let html = std::fs::read_to_string(dir.path().join("out/sweep.html")).expect("page");
    let charts = page_charts(&html);
    for (tail, unit, label) in [
        ("requests-s", "requests/s", "profile=constant"),
        ("streams", "streams", "profile=concurrent"),
    ] {
        let id = format!("sweep-ttft_p99-vs-bench-rate-{tail}");
        let c = chart(&charts, &id);
        assert_eq!(c["x"]["unit"], unit, "{id}");
        assert_eq!(
            series_labels(c),
            [label],
            "{id}: one curve through its rates"
        );
        assert_eq!(all_points(c), truth(unit, "ttft_p99"), "{id}");
        assert!(
            dir.path().join(format!("out/charts/{id}.svg")).is_file(),
            "{id}.svg"
        );
    }

    // `sweep plot --x rate`: the same split, the same points, with units.
    let out = plot(
        dir.path(),
        &["--x", "rate", "--y", "ttft_p99", "--outputs", "html"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let charts = page_charts(
        &std::fs::read_to_string(dir.path().join("out/plots/plot.html")).expect("page"),
    );
    assert_eq!(charts.len(), 2, "{charts:#?}");
    for (tail, unit) in [("requests-s", "requests/s"), ("streams", "streams")] {
        let id = format!("plot-ttft_p99-vs-bench-rate-{tail}");
        let c = chart(&charts, &id);
        assert_eq!(c["x"]["unit"], unit, "{id}");
        assert_eq!(all_points(c), truth(unit, "ttft_p99"), "{id}");
    }
}

#[test]
fn sweep_points_without_the_x_parameter_are_named_and_gpus_must_be_counts() {
    // Mixed keys: the third server has no ttft_ms, the first two no itl_ms; its GPU
    // count is text.
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = write(
        dir.path(),
        "serve.json",
        r#"[{"gpus": 1, "ttft_ms": 2}, {"gpus": 1, "ttft_ms": 4}, {"gpus": "two", "itl_ms": 3}]"#,
    );
    let bench = write(
        dir.path(),
        "bench.json",
        r#"[{"profile": "concurrent", "rate": 2}]"#,
    );
    let server = format!(
        "echo $$ >> {} && GPUS={{gpus}} {} mock-server --port {{port}}",
        dir.path().join("pids").display(),
        env!("CARGO_BIN_EXE_llmsurge")
    );
    let out = printed(
        sweep_command_with("serve", dir.path(), &server, Some(&serve), &bench)
            .arg("--")
            .args([
                "--max-requests",
                "4",
                "--data",
                "prompt_tokens=16,output_tokens=4",
            ])
            .args(["--max-dispatch-lag", "10s"]),
    );
    assert_eq!(out.status.code(), Some(0));

    // The page: the point without ttft_ms is on no ttft_ms curve, and the chart says so;
    // the two with it are one curve, not labelled by a key they lack.
    let html = std::fs::read_to_string(dir.path().join("out/sweep.html")).expect("page");
    let charts = page_charts(&html);
    let c = chart(&charts, "sweep-ttft_p99-vs-serve-ttft_ms");
    assert_eq!(series_labels(c), ["gpus=1"], "{c:#}");
    assert!(
        notes(c).contains(&"left out (no value of ttft_ms): s2-b0".to_string()),
        "{c:#}"
    );
    let c = chart(&charts, "sweep-ttft_p99-vs-serve-itl_ms");
    assert!(
        notes(c).contains(&"left out (no value of itl_ms): s0-b0, s1-b0".to_string()),
        "{c:#}"
    );

    // `sweep plot`: the same note; a curve of points lacking a key says so in words.
    for (args, label) in [
        (&["--x", "ttft_ms"][..], "gpus=1"),
        (
            &["--x", "ttft_ms", "--curve-by", "itl_ms"][..],
            "itl_ms unset",
        ),
    ] {
        let out = plot(dir.path(), &[args, &["--outputs", "html"][..]].concat());
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let charts = page_charts(
            &std::fs::read_to_string(dir.path().join("out/plots/plot.html")).expect("page"),
        );
        let c = chart(&charts, "plot-ttft_p99-vs-serve-ttft_ms");
        assert_eq!(series_labels(c), [label], "{args:?}: {c:#}");
        assert!(
            notes(c).contains(&"left out (no value of ttft_ms): s2-b0".to_string()),
            "{args:?}: {c:#}"
        );
    }

    // A GPU count that is no positive whole number is refused, naming the flag, the
    // parameter and the point: never a point at its total on the per-GPU axis.
    let out = llmsurge()
        .args(["sweep", "plot-pareto"])
        .arg(dir.path().join("out"))
        .args(["--gpus", "gpus", "--outputs", "html"])
        .output()
        .expect("llmsurge runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    for needle in ["--gpus gpus", "s2-b0", "\"two\""] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
}
