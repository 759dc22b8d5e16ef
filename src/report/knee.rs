//! The knee of a latency-vs-load curve: where latency starts to grow faster than the
//! achieved rate, found with Kneedle (Satopää, Albrecht, Irwin, Raghavan: "Finding a
//! 'Kneedle' in a Haystack", ICDCSW 2011).
//!
//! Over the benchmarks of a run, sorted by achieved request rate: (1) smoothing: the
//! latency is made non-decreasing (a running maximum), so one noisy dip does not make a
//! knee, and no curve is fitted (a sweep has 5 to 10 points; a spline would move the knee
//! between them); (2) both axes are normalised to [0, 1]; (3) the difference curve
//! `x − y` (the distance below the chord of a convex, rising curve) is computed; (4) the
//! knee is the point where it is largest. A curve whose latency grows by less than half
//! over the whole range has no knee (latency did not turn), nor one of fewer than three
//! distinct rates.

use llmsurge_coordinator::BenchmarkResult;
use serde::{Deserialize, Serialize};

/// The latency figures whose knee a run reports: report metric key, percentile, name.
pub const METRICS: [(&str, &str, &str); 3] = [
    ("ttft", "p99", "TTFT p99"),
    ("itl", "p99", "ITL p99"),
    ("request_latency", "p99", "e2e p99"),
];

/// The knee of one latency figure against the achieved request rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// The figure: `ttft_p99`, `itl_p99`, `request_latency_p99`.
    pub metric: String,
    /// The achieved rate at the knee, requests/s.
    pub rate: f64,
    /// The latency there, ms.
    pub latency: f64,
}

impl Knee {
    /// The console line: "TTFT p99 turns at ≈ 42 req/s (38.2 ms)".
    pub fn line(&self) -> String {
        let name = METRICS
            .iter()
            .find(|m| format!("{}_{}", m.0, m.1) == self.metric)
            .map_or(self.metric.as_str(), |m| m.2);
        format!(
            "{name} turns at ≈ {} req/s ({} ms)",
            super::num(self.rate),
            super::num(self.latency)
        )
    }
}

pub use llmsurge_coordinator::knee::kneedle;

/// The knee of each figure of [`METRICS`] over `benchmarks`, where there is one.
pub fn knees(benchmarks: &[BenchmarkResult]) -> Vec<Knee> {
    METRICS
        .iter()
        .filter_map(|&(key, p, _)| {
            let pts: Vec<(f64, f64)> = benchmarks
                .iter()
                .filter_map(|b| {
                    let d = &b.metrics.get(key)?.successful;
                    let v = d.percentiles.get(p)?;
                    (d.count > 0 && b.throughput.requests_per_s > 0.0)
                        .then_some((b.throughput.requests_per_s, v))
                })
                .collect();
            kneedle(&pts).map(|i| Knee {
                metric: format!("{key}_{p}"),
                rate: pts[i].0,
                latency: pts[i].1,
            })
        })
        .collect()
}
