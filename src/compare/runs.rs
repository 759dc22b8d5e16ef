//! Comparing repeated runs: when both reports hold `--repeat` runs, a headline figure's
//! noise is its run-to-run variation, not the sampling noise within one run.
//!
//! For each headline figure of `across_runs` that both sides have in at least two runs:
//! the values compared are the means over the runs, and the interval of the relative
//! change is Welch's t-interval of the difference of the two means (Welch–Satterthwaite
//! degrees of freedom), in percent of the baseline's mean. `samples` are run counts then.

use super::change::{MetricChange, judge};
use super::tolerance::{ChangeUnit, Tolerances};
use crate::report::across_runs::{AcrossRuns, FigureStats};

/// Which variance the comparison's intervals used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variance {
    /// Both reports hold repeated runs: run-to-run variance of the headline figures.
    RunToRun,
    /// One run on a side: the sampling noise within the run (bootstrap of the
    /// histograms for percentiles, normal for means, Poisson for rates).
    WithinRun,
}

impl Variance {
    /// One sentence for the outputs.
    pub fn describe(self, runs: (u32, u32)) -> String {
        match self {
            Variance::RunToRun => format!(
                "variance: run-to-run ({} baseline runs, {} current runs used; Welch t-interval of the mean of the runs) for the headline figures of sides with two runs or more; within-run noise of each side's first run for the others",
                runs.0, runs.1
            ),
            Variance::WithinRun => "variance: within one run (bootstrap of the latency histograms, Poisson for rates); repeat both runs with --repeat to use run-to-run variance".into(),
        }
    }
}

/// Welch's interval of (b − a) / a × 100.
pub fn welch_change_ci(a: &FigureStats, b: &FigureStats, confidence: f64) -> Option<(f64, f64)> {
    if a.n < 2 || b.n < 2 || a.mean <= 0.0 {
        return None;
    }
    let (va, vb) = (a.std.powi(2) / a.n as f64, b.std.powi(2) / b.n as f64);
    let se = (va + vb).sqrt();
    let d = b.mean - a.mean;
    if se == 0.0 {
        return Some((d / a.mean * 100.0, d / a.mean * 100.0));
    }
    let df =
        (va + vb).powi(2) / (va.powi(2) / (a.n as f64 - 1.0) + vb.powi(2) / (b.n as f64 - 1.0));
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let t = StudentsT::new(0.0, 1.0, df)
        .ok()?
        .inverse_cdf(1.0 - (1.0 - confidence) / 2.0);
    Some(((d - t * se) / a.mean * 100.0, (d + t * se) / a.mean * 100.0))
}

/// Runs a side's figures were taken over: those not left out (an invalid run is).
pub fn runs_used(a: &AcrossRuns) -> u32 {
    a.runs.saturating_sub(a.left_out.len() as u32)
}

/// Replaces, in `changes`, every headline figure both sides have over at least two runs
/// by its run-to-run comparison. A side with one run left (the others left out as
/// invalid) has no run-to-run variance: the figure keeps its within-run comparison and
/// its interval, never a verdict without one.
pub fn apply(
    changes: &mut Vec<MetricChange>,
    base: &AcrossRuns,
    cur: &AcrossRuns,
    tolerances: &Tolerances,
    strict: bool,
    confidence: f64,
) {
    for name in crate::report::across_runs::FIGURES {
        let (Some(a), Some(b)) = (base.figures.get(name), cur.figures.get(name)) else {
            continue;
        };
        if a.n < 2 || b.n < 2 {
            continue;
        }
        let row = judge(
            name.to_string(),
            Some(a.mean),
            Some(b.mean),
            ChangeUnit::Percent,
            welch_change_ci(a, b, confidence),
            (u64::from(a.n), u64::from(b.n)),
            tolerances,
            strict,
        );
        match changes.iter_mut().find(|c| c.metric == name) {
            Some(c) => *c = row,
            None => changes.push(row),
        }
    }
}
