//! One metric of one matched pair: its change and the verdict on it, below `compare` and
//! `runs`, which both judge changes.

use serde::Serialize;

use super::tolerance::{ChangeUnit, Tolerance, Tolerances, Worse, direction};

/// The verdict on one metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Within tolerance, or not worse.
    Ok,
    /// Worse beyond tolerance, and not explainable by noise.
    Regressed,
    /// Worse beyond tolerance, but within the noise of the measurements.
    WithinNoise,
    /// No tolerance set for this metric: reported only.
    Info,
    /// One side has no value.
    Missing,
}

/// One metric of one matched pair.
#[derive(Clone, Debug, Serialize)]
pub struct MetricChange {
    /// `ttft_p99`, `output_tokens_per_s`, `error_rate`, …
    pub metric: String,
    /// Baseline value (ms, per second, or a fraction).
    pub baseline: Option<f64>,
    /// Current value.
    pub current: Option<f64>,
    /// The change: percent of the baseline, or percentage points for error_rate.
    pub change: Option<f64>,
    /// Percent or percentage points.
    pub unit: ChangeUnit,
    /// Confidence interval of the change, same unit, when it could be estimated.
    pub ci: Option<(f64, f64)>,
    /// Samples behind the baseline and current values.
    pub samples: (u64, u64),
    /// The tolerance applied.
    pub tolerance: Option<Tolerance>,
    /// The verdict.
    pub verdict: Verdict,
}

/// Judges one metric's change against its tolerance: worse beyond it is a regression
/// unless the interval `ci` cannot tell it from no change (and not `strict`).
#[allow(clippy::too_many_arguments)]
pub(super) fn judge(
    metric: String,
    baseline: Option<f64>,
    current: Option<f64>,
    unit: ChangeUnit,
    ci: Option<(f64, f64)>,
    samples: (u64, u64),
    tolerances: &Tolerances,
    strict: bool,
) -> MetricChange {
    let change = match (baseline, current, unit) {
        (Some(b), Some(c), ChangeUnit::PercentagePoints) => Some((c - b) * 100.0),
        (Some(b), Some(c), ChangeUnit::Percent) if b > 0.0 => Some((c - b) / b * 100.0),
        (Some(b), Some(c), ChangeUnit::Percent) if b == 0.0 && c == 0.0 => Some(0.0),
        _ => None,
    };
    let tolerance = tolerances.0.get(&metric).copied();
    let worse = direction(&metric).unwrap_or(Worse::Higher);
    let verdict = match (change, tolerance) {
        (None, _) => Verdict::Missing,
        (Some(_), None) => Verdict::Info,
        (Some(ch), Some(t)) => {
            // Signed so that positive means worse.
            let sign = if worse == Worse::Higher { 1.0 } else { -1.0 };
            if sign * ch <= t.allowed {
                Verdict::Ok
            } else {
                // Not noise when the interval excludes "no change" on the worse side.
                let real = ci.is_none_or(|(lo, hi)| if sign > 0.0 { lo > 0.0 } else { hi < 0.0 });
                if strict || real {
                    Verdict::Regressed
                } else {
                    Verdict::WithinNoise
                }
            }
        }
    };
    MetricChange {
        metric,
        baseline,
        current,
        change,
        unit,
        ci,
        samples,
        tolerance,
        verdict,
    }
}
