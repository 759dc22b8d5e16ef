//! `--gpu-metrics` over the run: the GPUs' power, utilisation and memory at each sample,
//! on the time axis of the other charts over the run (seconds since the run started),
//! one line across the benchmarks, broken between them.

use super::{Axis, Chart, Series, color, end_benchmark, run_start, trace};
use crate::report::json::Report;
use llmsurge_coordinator::gpu::GpuPoint;

/// The GPU charts; none for a report without GPU figures.
pub fn charts(report: &Report) -> Vec<Chart> {
    if !report.benchmarks.iter().any(|b| b.gpu.is_some()) {
        return Vec::new();
    }
    let run0 = run_start(report);
    let line = |pick: fn(&GpuPoint) -> Option<f64>| {
        let mut out = Vec::new();
        for b in &report.benchmarks {
            let Some(gpu) = &b.gpu else {
                continue;
            };
            let from = out.len();
            out.extend(
                gpu.series
                    .iter()
                    .filter(|p| p.time.is_finite() && run0.is_finite())
                    .map(|p| (p.time - run0, pick(p).filter(|v| v.is_finite()))),
            );
            end_benchmark(&mut out, from);
        }
        out
    };
    let x = || Axis::new("time since the run started", "s");
    let mut power = Chart::new(
        "gpu-power",
        "charts-gpu",
        "GPU power, all GPUs (W)",
        x(),
        Axis::new("power", "W"),
    );
    power.series = vec![trace("power", color(1), line(|p| Some(p.power_w)))];
    let mut load = Chart::new(
        "gpu-utilisation-memory",
        "charts-gpu",
        "GPU utilisation (%) and memory used (MiB)",
        x(),
        Axis::new("utilisation, mean over the GPUs", "%"),
    );
    load.y2 = Some(Axis::new("memory used, all GPUs", "MiB"));
    let mut memory: Series = trace("memory used", color(4), line(|p| p.memory_mib));
    memory.right = true;
    load.series = vec![trace("utilisation", color(2), line(|p| p.util_pct)), memory];
    vec![
        power.finish("No GPU sample."),
        load.finish("The GPUs reported no utilisation or memory."),
    ]
}
