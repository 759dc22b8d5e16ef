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

/// The index (into `points`) of the knee of a rising latency curve `(rate, latency)`.
pub fn kneedle(points: &[(f64, f64)]) -> Option<usize> {
    let mut order: Vec<usize> = (0..points.len())
        .filter(|&i| points[i].0.is_finite() && points[i].1.is_finite())
        .collect();
    order.sort_by(|&a, &b| {
        points[a]
            .0
            .total_cmp(&points[b].0)
            .then(points[a].1.total_cmp(&points[b].1))
    });
    let mut distinct: Vec<f64> = order.iter().map(|&i| points[i].0).collect();
    distinct.dedup();
    if distinct.len() < 3 {
        return None;
    }
    // (1) Smoothing: the running maximum of latency.
    let mut smooth = Vec::with_capacity(order.len());
    let mut top = f64::NEG_INFINITY;
    for &i in &order {
        top = top.max(points[i].1);
        smooth.push(top);
    }
    let (x0, x1) = (points[order[0]].0, points[order[order.len() - 1]].0);
    let (y0, y1) = (smooth[0], smooth[smooth.len() - 1]);
    if x1 <= x0 || y1 <= y0 || y1 < 1.5 * y0.max(0.0) {
        return None;
    }
    // (2)–(4) Normalise, the difference curve, its maximum.
    let mut best: Option<(usize, f64)> = None;
    for (k, &i) in order.iter().enumerate() {
        let d = (points[i].0 - x0) / (x1 - x0) - (smooth[k] - y0) / (y1 - y0);
        if d > 0.0 && best.is_none_or(|(_, b)| d > b) {
            best = Some((i, d));
        }
    }
    best.map(|(i, _)| i)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kneedle_finds_where_a_flat_curve_turns_up() {
        // Flat at 100 ms to 40 req/s, then a wall.
        let pts = [
            (10.0, 100.0),
            (20.0, 101.0),
            (30.0, 99.0),
            (40.0, 103.0),
            (42.0, 900.0),
            (42.5, 2000.0),
        ];
        assert_eq!(kneedle(&pts), Some(3));
        // Any order.
        let mut rev = pts;
        rev.reverse();
        assert_eq!(kneedle(&rev), Some(2));
        // Latency that never turns, too few rates: no knee.
        assert_eq!(kneedle(&[(1.0, 10.0), (2.0, 11.0), (3.0, 12.0)]), None);
        assert_eq!(kneedle(&[(1.0, 10.0), (2.0, 500.0)]), None);
        // A textbook convex curve y = x²: the knee is past the middle.
        let sq: Vec<(f64, f64)> = (1..=10).map(|x| (x as f64, (x * x) as f64)).collect();
        let k = kneedle(&sq).expect("a knee");
        assert!((4..=5).contains(&k), "{k}");
    }
}
