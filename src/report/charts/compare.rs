//! Several runs on the same axes (`benchmark compare … --outputs html,png`, `plot runs`):
//! latency against load, throughput against offered load, the distributions and the
//! Pareto front, one colour per run and a legend naming each run (docs/report.md,
//! "Runs side by side").

use super::{
    Axis, Chart, LOAD_METRICS, Series, by_rate, color, finite, pareto, pct, shade, target,
};
use crate::report::json::Report;

/// The section of the page the charts go in (`templates/plot.html`).
const SECTION: &str = "charts-plot";

/// One run: its name in the legends and its report.
#[derive(Clone, Copy, Debug)]
pub struct Run<'a> {
    /// `--label`, or the file name.
    pub label: &'a str,
    /// Its report.
    pub report: &'a Report,
}

/// The figure a chart shows, for the notes beside it: `ttft`, `itl`, `tpot`, `e2e`
/// (latency charts of that metric), `throughput`, `pareto`.
pub type Family = &'static str;

/// Every chart of `runs` side by side; `notes` gives the lines shown with the charts of
/// a family (a comparison's verdicts), nothing for none.
pub fn charts(runs: &[Run<'_>], notes: &dyn Fn(Family) -> Vec<String>) -> Vec<Chart> {
    let reported = |key: &str| {
        runs.iter().any(|r| {
            r.report
                .benchmarks
                .iter()
                .any(|b| b.metrics.contains_key(key))
        })
    };
    let mut out = Vec::new();
    for &(key, name, file) in LOAD_METRICS.iter().filter(|m| reported(m.0)) {
        let mut c = Chart::new(
            &format!("compare-{file}-vs-achieved-rate"),
            SECTION,
            &format!("{name} vs achieved request rate (ms), p50 solid, p99 dashed"),
            Axis::new("achieved request rate", "requests/s"),
            Axis::new(name, "ms"),
        );
        for (i, run) in runs.iter().enumerate() {
            let b = &run.report.benchmarks;
            for p in ["p50", "p99"] {
                let pts = by_rate(run.report)
                    .iter()
                    .map(|&k| (b[k].throughput.requests_per_s, pct(&b[k], key, p)))
                    .collect();
                let mut s = Series::new(format!("{} {p}", run.label), color(i), pts);
                s.dashed = p == "p99";
                c.series.push(s);
            }
        }
        c.notes = notes(file);
        out.push(c.finish("No successful request measured this metric."));
    }

    let mut t = Chart::new(
        "compare-throughput-vs-offered-load",
        SECTION,
        "Throughput vs offered load",
        Axis::new(
            "offered load (target rate, or achieved without one)",
            "requests/s",
        ),
        Axis::new("achieved request rate", "requests/s"),
    );
    for (i, run) in runs.iter().enumerate() {
        let mut pts: Vec<(f64, Option<f64>)> = run
            .report
            .benchmarks
            .iter()
            .filter_map(|b| {
                let achieved = finite(b.throughput.requests_per_s);
                Some((target(b).or(achieved)?, achieved))
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        t.series.push(Series::new(run.label, color(i), pts));
    }
    t.notes = notes("throughput");
    out.push(t.finish("No benchmark measured a request rate."));

    for (key, name, file) in [
        ("ttft", "TTFT", "ttft"),
        ("itl", "Inter-token latency", "itl"),
        ("tpot", "Time per output token", "tpot"),
        ("request_latency", "End-to-end latency", "e2e"),
    ] {
        if !reported(key) {
            continue;
        }
        let mut c = Chart::new(
            &format!("compare-{file}-by-percentile"),
            SECTION,
            &format!("{name} by percentile (ms)"),
            Axis::new("percentile", ""),
            Axis::new(name, "ms"),
        );
        c.x_labels = Some(super::PCTS.iter().map(|p| p.1.to_string()).collect());
        for (i, run) in runs.iter().enumerate() {
            // A shade and, every other one, a dash per benchmark, within the run's colour.
            let n = run.report.benchmarks.len();
            for (k, b) in run.report.benchmarks.iter().enumerate() {
                let pts = super::PCTS
                    .iter()
                    .enumerate()
                    .map(|(k, p)| (k as f64, pct(b, key, p.0)))
                    .collect();
                let mut s = Series::new(
                    format!("{} {}", run.label, b.strategy),
                    &shade(color(i), k, n),
                    pts,
                );
                s.dashed = k % 2 == 1;
                c.series.push(s);
            }
        }
        c.notes = notes(file);
        out.push(c.finish("No successful request measured this metric."));
    }

    // The Pareto front of each run: every point, its front joined.
    let per_run: Vec<Vec<pareto::Point>> = runs
        .iter()
        .map(|r| {
            r.report
                .benchmarks
                .iter()
                .filter_map(|b| {
                    pareto::point(b, b.strategy.to_string(), pareto::PerUser::Mean, None)
                })
                .collect()
        })
        .collect();
    if per_run.iter().any(|p| !p.is_empty()) {
        let mut c = pareto::chart(&[], pareto::PerUser::Mean, None);
        c.id = "compare-pareto-front".into();
        c.section = SECTION.into();
        c.series.clear();
        c.marks.clear();
        c.no_data = None;
        for (i, (run, points)) in runs.iter().zip(&per_run).enumerate() {
            let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.total, p.per_user)).collect();
            let mut all = Series::new(
                run.label,
                color(i),
                xy.iter().map(|&(x, y)| (x, Some(y))).collect(),
            );
            all.line = false;
            c.series.push(all);
            let mut front = Series::new(
                format!("{} front", run.label),
                color(i),
                pareto::front(&xy)
                    .into_iter()
                    .map(|k| (xy[k].0, Some(xy[k].1)))
                    .collect(),
            );
            front.markers = false;
            c.series.push(front);
        }
        c.notes = notes("pareto");
        out.push(c.finish("No benchmark measured TPOT and output throughput."));
    }
    out
}
