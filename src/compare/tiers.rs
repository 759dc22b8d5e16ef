//! Capacity tiers (`--slo-tier`): each tier's answer in the baseline against the current
//! report's, one pair of the comparison per tier (`tier NAME`), a tier on one side only
//! unmatched like a benchmark without a partner.
//!
//! A tier's answer is known to lie between the count that passed and the one that failed
//! above it (its bracket). The current answer regressed when it is lower and its failing
//! count is at or below the baseline's answer: the current server failed a load the
//! baseline met, beyond the uncertainty of either boundary. Lower but inside that
//! uncertainty is worse within the noise; no answer at all where the baseline had one
//! regressed, unless the current search was cut short (Ctrl-C) before any probe passed:
//! then it has no value (`n/a`), as nothing was learnt.

use super::PairComparison;
use super::change::{MetricChange, Verdict};
use super::tolerance::ChangeUnit;
use crate::report::Report;
use llmsurge_coordinator::profiles::{CapacityOutcome, TierOutcome};

/// The tiers' pairs and the tiers of either side without a partner (`tier NAME`).
#[derive(Debug)]
pub struct TierComparison {
    /// One pair per tier on both sides.
    pub pairs: Vec<PairComparison>,
    /// Tiers of the baseline only.
    pub unmatched_baseline: Vec<String>,
    /// Tiers of the current report only.
    pub unmatched_current: Vec<String>,
}

fn label(t: &TierOutcome) -> String {
    format!("tier {}", t.name)
}

/// Pairs the tiers of two capacity searches by name (and by what they counted: a tier
/// of users has no partner among rates).
pub fn compare_tiers(base: &Report, cur: &Report) -> TierComparison {
    let tiers = |r: &Report| -> Option<CapacityOutcome> {
        r.capacity.clone().filter(|c| !c.tiers.is_empty())
    };
    let (b, c) = (tiers(base), tiers(cur));
    let mut out = TierComparison {
        pairs: Vec::new(),
        unmatched_baseline: Vec::new(),
        unmatched_current: Vec::new(),
    };
    let same_unit = match (&b, &c) {
        (Some(b), Some(c)) => b.variable == c.variable,
        _ => false,
    };
    let partner = |t: &TierOutcome, other: &Option<CapacityOutcome>| -> Option<TierOutcome> {
        other
            .as_ref()
            .filter(|_| same_unit)
            .and_then(|o| o.tiers.iter().find(|x| x.name == t.name).cloned())
    };
    if let Some(b) = &b {
        for tb in &b.tiers {
            match partner(tb, &c) {
                Some(tc) => out.pairs.push(PairComparison {
                    label: label(&tc),
                    baseline_label: label(tb),
                    changes: vec![change(b, tb, &tc)],
                }),
                None => out.unmatched_baseline.push(label(tb)),
            }
        }
    }
    if let Some(c) = &c {
        for tc in &c.tiers {
            if partner(tc, &b).is_none() {
                out.unmatched_current.push(label(tc));
            }
        }
    }
    out
}

/// One tier's answer, baseline against current (see the module documentation).
fn change(b: &CapacityOutcome, tb: &TierOutcome, tc: &TierOutcome) -> MetricChange {
    let verdict = match (tb.value, tc.value) {
        // Interrupted before any probe passed: nothing known, not a failed load.
        (Some(_), None) if tc.cut_short => Verdict::Missing,
        (Some(_), None) => Verdict::Regressed,
        (Some(vb), Some(vc)) if vc < vb => match tc.bracket.1 {
            Some(failed) if failed <= vb => Verdict::Regressed,
            _ => Verdict::WithinNoise,
        },
        _ => Verdict::Ok,
    };
    let change = match (tb.value, tc.value) {
        (Some(vb), Some(vc)) if vb > 0.0 => Some((vc - vb) / vb * 100.0),
        _ => None,
    };
    let runs = |t: &TierOutcome| t.probes.len() as u64;
    MetricChange {
        metric: format!("capacity_{}", b.variable.unit().replace("/", "_per_")),
        baseline: tb.value,
        current: tc.value,
        change,
        unit: ChangeUnit::Percent,
        ci: None,
        samples: (runs(tb), runs(tc)),
        tolerance: None,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_coordinator::profiles::SearchVariable;

    fn tier(value: Option<f64>, cut_short: bool) -> TierOutcome {
        TierOutcome {
            name: "interactive".into(),
            objectives: Vec::new(),
            value,
            bracket: (value.unwrap_or(0.0), None),
            binding: None,
            failing_runs: 0,
            conclusion: String::new(),
            probes: Vec::new(),
            cut_short,
        }
    }

    #[test]
    fn a_tier_cut_short_before_any_answer_is_missing_not_regressed() {
        let base = CapacityOutcome {
            rate: None,
            precision: 0.0,
            bracket: (0.0, None),
            conclusion: String::new(),
            probes: Vec::new(),
            server: None,
            variable: SearchVariable::Users,
            tiers: Vec::new(),
        };
        let was = tier(Some(22.0), false);
        assert_eq!(
            change(&base, &was, &tier(None, true)).verdict,
            Verdict::Missing
        );
        assert_eq!(
            change(&base, &was, &tier(None, false)).verdict,
            Verdict::Regressed
        );
    }
}
