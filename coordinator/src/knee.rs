//! The knee of a latency-vs-load curve ([`kneedle`], the method documented in
//! docs/report.md, "The knee"), and `--profile knee` ([`KneeProfile`]): a sweep, then a
//! refinement pass of a few constant rates on either side of the knee it found.
//!
//! The pure method lives here, below the report (which marks and reports the knees of a
//! run) and the profile (which searches for one), so both use the same.

use crate::error::CoordinatorError;
use crate::group::BenchmarkPlan;
use crate::profiles::{PlanTemplate, Profile, SweepArrivals, SweepProfile};
use crate::result::BenchmarkResult;

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

/// Rates the refinement pass adds on each side of the knee.
pub const REFINE_POINTS: usize = 3;

/// The figure the profile finds the knee of: TTFT p99, else (no TTFT: a format without
/// streaming) the end-to-end p99; `(achieved rate, latency)` per benchmark that has it.
fn curve(done: &[BenchmarkResult]) -> Vec<(f64, f64)> {
    for key in ["ttft", "request_latency"] {
        let pts: Vec<(f64, f64)> = done
            .iter()
            .filter_map(|b| {
                let d = &b.metrics.get(key)?.successful;
                (d.count > 0 && b.throughput.requests_per_s > 0.0)
                    .then_some((b.throughput.requests_per_s, d.percentiles.p99))
            })
            .collect();
        if pts.len() >= 3 {
            return pts;
        }
    }
    Vec::new()
}

/// The refinement rates around the knee of `points`: [`REFINE_POINTS`] evenly spaced
/// between the knee and the nearest rate below it, and as many between it and the
/// nearest rate above; none without a knee.
pub fn refinement(points: &[(f64, f64)]) -> Vec<f64> {
    let Some(k) = kneedle(points) else {
        return Vec::new();
    };
    let at = points[k].0;
    let below = points
        .iter()
        .map(|p| p.0)
        .filter(|&r| r < at)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    let above = points
        .iter()
        .map(|p| p.0)
        .filter(|&r| r > at)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))));
    let steps = (REFINE_POINTS + 1) as f64;
    let mut rates = Vec::new();
    for (from, to) in [(below, Some(at)), (Some(at), above)] {
        if let (Some(from), Some(to)) = (from, to) {
            rates.extend((1..=REFINE_POINTS).map(|j| from + (to - from) * j as f64 / steps));
        }
    }
    rates.retain(|r| r.is_finite() && *r > 0.0);
    rates
}

/// `--profile knee`: the sweep, then constant (or Poisson, as the sweep's) rates on
/// either side of the knee of its TTFT p99 curve.
#[derive(Debug)]
pub struct KneeProfile {
    sweep: SweepProfile,
    template: PlanTemplate,
    arrivals: SweepArrivals,
    /// Once the sweep is over: how many benchmarks it ran, and the refinement rates.
    refine: Option<(usize, Vec<f64>)>,
}

impl KneeProfile {
    /// A sweep of `count` benchmarks, then the refinement.
    pub fn new(
        template: PlanTemplate,
        count: usize,
        arrivals: SweepArrivals,
        throughput_concurrency: u32,
    ) -> Self {
        Self {
            sweep: SweepProfile::new(template.clone(), count, arrivals, throughput_concurrency),
            template,
            arrivals,
            refine: None,
        }
    }

    /// The refinement rates, once the sweep is over (empty when it found no knee).
    pub fn refinement_rates(&self) -> Option<&[f64]> {
        self.refine.as_ref().map(|(_, r)| r.as_slice())
    }
}

impl Profile for KneeProfile {
    fn next(
        &mut self,
        done: &[BenchmarkResult],
    ) -> Result<Option<BenchmarkPlan>, CoordinatorError> {
        if self.refine.is_none() {
            if let Some(plan) = self.sweep.next(done)? {
                return Ok(Some(plan));
            }
            self.refine = Some((done.len(), refinement(&curve(done))));
        }
        let Some((swept, rates)) = &self.refine else {
            return Ok(None);
        };
        let i = done.len();
        let Some(&rate) = rates.get(i - swept) else {
            return Ok(None);
        };
        Ok(Some(self.template.plan(i, self.arrivals.strategy(rate))))
    }

    fn annotate(&self, done: &mut [BenchmarkResult]) {
        self.sweep.annotate(done);
    }
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

    #[test]
    fn refinement_splits_the_gaps_on_either_side_of_the_knee() {
        // The knee at 30: 22.5, 25 and 27.5 below (from 20), 33, 36 and 39 above (to 42).
        let pts = [(10.0, 100.0), (20.0, 100.0), (30.0, 104.0), (42.0, 2000.0)];
        assert_eq!(kneedle(&pts), Some(2));
        assert_eq!(refinement(&pts), [22.5, 25.0, 27.5, 33.0, 36.0, 39.0]);
        // No knee: nothing to refine.
        assert!(refinement(&[(1.0, 10.0), (2.0, 11.0), (3.0, 12.0)]).is_empty());
    }
}
