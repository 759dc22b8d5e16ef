//! `--slice`: a chart per metric of its p50, p90 and p99 per slice of each benchmark's
//! measured window, with the over-saturation detector's trend on the same axis, and one
//! of the rates per slice (docs/report.md, "Time slices").

use super::{Axis, Chart, Series, color, end_benchmark, offset, run_start};
use crate::report::json::Report;
use crate::report::slices::{BenchmarkSlices, Slice};

/// The charts; none without `--slice`.
pub fn charts(report: &Report) -> Vec<Chart> {
    if report.slices.is_empty() {
        return Vec::new();
    }
    let run0 = run_start(report);
    // Each benchmark's slices with where its measured window starts on the run's axis.
    let placed: Vec<(f64, &BenchmarkSlices)> = report
        .slices
        .iter()
        .filter_map(|s| {
            let b = report.benchmarks.iter().find(|b| b.index == s.benchmark)?;
            Some((offset(b, run0) + (s.window_start - b.start_time), s))
        })
        .collect();
    let slice_s = report.slices[0].slice_s;
    // `10`, `0.5`: the length as written, without trailing zeros.
    let every = format!("{slice_s}");
    let x = || Axis::new("time since the run started (each slice at its middle)", "s");
    // One line across the benchmarks, broken between them.
    let line = |pick: &dyn Fn(&Slice) -> Option<f64>| {
        let mut out = Vec::new();
        for (w0, b) in &placed {
            let from = out.len();
            out.extend(
                b.slices
                    .iter()
                    .map(|s| (w0 + s.start_s + s.duration_s / 2.0, pick(s))),
            );
            end_benchmark(&mut out, from);
        }
        out
    };
    let mut out = Vec::new();
    for (key, name, file) in [
        ("ttft", "TTFT", "ttft"),
        ("itl", "Inter-token latency", "itl"),
        ("tpot", "Time per output token", "tpot"),
        ("request_latency", "End-to-end latency", "e2e"),
    ] {
        if !report
            .slices
            .iter()
            .any(|b| b.slices.iter().any(|s| s.metrics.contains_key(key)))
        {
            continue;
        }
        let mut c = Chart::new(
            &format!("slices-{file}"),
            "charts-slices",
            &format!("{name} per {every} s slice (ms)"),
            x(),
            Axis::new(name, "ms"),
        );
        for (p, col) in [("p50", 0), ("p90", 3), ("p99", 1)] {
            let pts = line(&|s: &Slice| {
                let m = s.metrics.get(key)?;
                Some(match p {
                    "p50" => m.p50,
                    "p90" => m.p90,
                    _ => m.p99,
                })
            });
            c.series.push(Series::new(p, color(col), pts));
        }
        // The detector's line over each benchmark's window.
        let mut trend = Vec::new();
        for (w0, b) in &placed {
            if let Some(t) = b.trends.get(key) {
                let from = trend.len();
                trend.push((*w0, Some(t.start_ms)));
                trend.push((w0 + t.end_s, Some(t.end_ms)));
                end_benchmark(&mut trend, from);
            }
        }
        let mut t = Series::new(
            "trend (the over-saturation detector's least-squares line)",
            color(7),
            trend,
        );
        t.dashed = true;
        t.markers = false;
        c.series.push(t);
        out.push(c.finish("No slice measured this metric."));
    }
    let mut rates = Chart::new(
        "slices-rates",
        "charts-slices",
        &format!("Rates per {every} s slice"),
        x(),
        Axis::new("completed", "requests/s"),
    );
    rates.y2 = Some(Axis::new("output throughput", "tokens/s"));
    rates.series.push(Series::new(
        "completed req/s",
        color(0),
        line(&|s: &Slice| Some(s.requests_per_s)),
    ));
    let mut tok = Series::new(
        "output tok/s",
        color(2),
        line(&|s: &Slice| Some(s.output_tokens_per_s)),
    );
    tok.right = true;
    rates.series.push(tok);
    out.push(rates.finish("No slice."));
    out
}
