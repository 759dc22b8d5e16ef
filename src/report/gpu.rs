//! `--gpu-metrics` in the CSV: the `gpu.*` columns (summed, how the energy was found,
//! then per GPU), present only when a benchmark of the report has GPU figures.

use super::json::Report;
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::gpu::GpuMetrics;

/// The summed figures, by column name.
const TOTAL: [&str; 8] = [
    "gpus",
    "power_mean_w",
    "power_max_w",
    "energy_j",
    "joules_per_output_token",
    "output_tokens_per_s_per_gpu",
    "util_mean_pct",
    "memory_max_mib",
];
/// The per-GPU figures.
const PER_GPU: [&str; 5] = [
    "power_mean_w",
    "power_max_w",
    "energy_j",
    "util_mean_pct",
    "memory_max_mib",
];

fn cell(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite())
        .map(|v| format!("{v}"))
        .unwrap_or_default()
}

fn total(g: &GpuMetrics, name: &str) -> Option<f64> {
    match name {
        "gpus" => Some(f64::from(g.gpus)),
        "power_mean_w" => Some(g.power_mean_w),
        "power_max_w" => Some(g.power_max_w),
        "energy_j" => Some(g.energy_j),
        "joules_per_output_token" => g.joules_per_output_token,
        "output_tokens_per_s_per_gpu" => g.output_tokens_per_s_per_gpu,
        "util_mean_pct" => g.util_mean_pct,
        "memory_max_mib" => g.memory_max_mib,
        _ => None,
    }
}

/// GPU indices seen by any benchmark of the report.
fn indices(report: &Report) -> Vec<u32> {
    let mut v: Vec<u32> = report
        .benchmarks
        .iter()
        .filter_map(|b| b.gpu.as_ref())
        .flat_map(|g| g.per_gpu.iter().map(|p| p.index))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The `gpu.*` column names (none when no benchmark has GPU figures).
pub fn csv_names(report: &Report) -> Vec<String> {
    if report.benchmarks.iter().all(|b| b.gpu.is_none()) {
        return Vec::new();
    }
    let mut names: Vec<String> = TOTAL.iter().map(|n| format!("gpu.{n}")).collect();
    names.push("gpu.energy_source".into());
    for i in indices(report) {
        names.extend(PER_GPU.iter().map(|n| format!("gpu.{i}.{n}")));
    }
    names
}

/// A benchmark's `gpu.*` cells, in [`csv_names`] order.
pub fn csv_values(report: &Report, b: &BenchmarkResult) -> Vec<String> {
    if report.benchmarks.iter().all(|b| b.gpu.is_none()) {
        return Vec::new();
    }
    let g = b.gpu.as_ref();
    let mut cells: Vec<String> = TOTAL
        .iter()
        .map(|n| cell(g.and_then(|g| total(g, n))))
        .collect();
    // counter, integrated_power or mixed: how energy_j was found.
    cells.push(
        g.and_then(|g| g.energy_source)
            .and_then(|s| serde_json::to_value(s).ok())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
    );
    for i in indices(report) {
        let p = g.and_then(|g| g.per_gpu.iter().find(|p| p.index == i));
        cells.extend(PER_GPU.iter().map(|n| {
            cell(p.and_then(|p| match *n {
                "power_mean_w" => Some(p.power_mean_w),
                "power_max_w" => Some(p.power_max_w),
                "energy_j" => Some(p.energy_j),
                "util_mean_pct" => p.util_mean_pct,
                "memory_max_mib" => p.memory_max_mib,
                _ => None,
            }))
        }));
    }
    cells
}
