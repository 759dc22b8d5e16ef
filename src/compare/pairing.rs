//! Which benchmark of the baseline is compared with which of the current report.
//!
//! A pair is the same load: the same strategy kind, the same rate (or stream count) and
//! the same label (`constant@20`, `replay@0.5x`), never a position alone. Only rates a
//! profile computed (a sweep's, a knee search's: they differ a little from run to run)
//! may still pair by their position among the benchmarks of the same kind, and only when
//! both reports computed their rates and neither benchmark has an exact partner on the
//! other side. A capacity search's probes pair exactly only: where two searches went
//! apart, one's n-th probe is no load of the other's. Every benchmark left without a
//! partner is named.

use crate::report::Report;
use llmsurge_coordinator::{BenchmarkResult, Strategy};

/// The pairs of two reports' benchmarks, and the benchmarks of each side left without a
/// partner (by their label).
#[derive(Debug)]
pub struct Pairing<'a> {
    /// (baseline, current), in the baseline's order.
    pub pairs: Vec<(&'a BenchmarkResult, &'a BenchmarkResult)>,
    /// Baseline benchmarks with no partner in the current report.
    pub unmatched_baseline: Vec<String>,
    /// Current benchmarks with no partner in the baseline.
    pub unmatched_current: Vec<String>,
}

/// Whether a report's rates were computed by its profile as steps that pair by position
/// (sweep, knee; not a capacity search's probes), from its recorded arguments
/// (`args.profile_plan.kind`); a report that does not say is taken as a fixed list of
/// strategies.
pub fn computes_rates(report: &Report) -> bool {
    matches!(
        report
            .args
            .pointer("/profile_plan/kind")
            .and_then(serde_json::Value::as_str),
        Some("sweep" | "knee")
    )
}

/// Whether two strategies are the same load: kind, rate (or streams) and label.
pub fn same_strategy(a: &Strategy, b: &Strategy) -> bool {
    let target = match (a.target(), b.target()) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(1.0),
        (None, None) => true,
        _ => false,
    };
    a.kind() == b.kind() && target && a.to_string() == b.to_string()
}

/// Pairs `base` with `cur` (each one run's benchmarks); `by_position`: both reports
/// computed their rates, so benchmarks with no exact partner may pair by their position
/// among those of the same kind.
pub fn pair<'a>(
    base: &'a [BenchmarkResult],
    cur: &'a [BenchmarkResult],
    by_position: bool,
) -> Pairing<'a> {
    let mut partner: Vec<Option<usize>> = vec![None; base.len()];
    let mut used = vec![false; cur.len()];
    for (i, b) in base.iter().enumerate() {
        let found =
            (0..cur.len()).find(|&j| !used[j] && same_strategy(&b.strategy, &cur[j].strategy));
        if let Some(j) = found {
            used[j] = true;
            partner[i] = Some(j);
        }
    }
    if by_position {
        // A benchmark whose load the other side ran too never pairs elsewhere, even when
        // its exact partner went to another benchmark of the same load.
        let exact_in = |list: &[BenchmarkResult], s: &Strategy| {
            list.iter().any(|o| same_strategy(s, &o.strategy))
        };
        let ordinal = |list: &[BenchmarkResult], i: usize| {
            list[..i]
                .iter()
                .filter(|o| o.strategy.kind() == list[i].strategy.kind())
                .count()
        };
        for (i, b) in base.iter().enumerate() {
            if partner[i].is_some() || exact_in(cur, &b.strategy) {
                continue;
            }
            let found = (0..cur.len()).find(|&j| {
                !used[j]
                    && cur[j].strategy.kind() == b.strategy.kind()
                    && !exact_in(base, &cur[j].strategy)
                    && ordinal(cur, j) == ordinal(base, i)
            });
            if let Some(j) = found {
                used[j] = true;
                partner[i] = Some(j);
            }
        }
    }
    let pairs = base
        .iter()
        .zip(&partner)
        .filter_map(|(b, j)| j.map(|j| (b, &cur[j])))
        .collect();
    let unmatched_baseline = base
        .iter()
        .zip(&partner)
        .filter(|(_, j)| j.is_none())
        .map(|(b, _)| b.strategy.to_string())
        .collect();
    let unmatched_current = cur
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(c, _)| c.strategy.to_string())
        .collect();
    Pairing {
        pairs,
        unmatched_baseline,
        unmatched_current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Benchmarks of the given strategies, from the server-metrics fixture's first.
    fn benchmarks(strategies: &[Strategy]) -> Vec<BenchmarkResult> {
        let report: Report = serde_json::from_str(include_str!(
            "../../tests/fixtures/report-server-metrics.json"
        ))
        .expect("fixture parses");
        strategies
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut b = report.benchmarks[0].clone();
                b.index = i as u32;
                b.strategy = *s;
                b
            })
            .collect()
    }

    fn constant(rate: f64) -> Strategy {
        Strategy::Constant { rate }
    }

    fn labels(p: &Pairing<'_>) -> Vec<(String, String)> {
        p.pairs
            .iter()
            .map(|(b, c)| (b.strategy.to_string(), c.strategy.to_string()))
            .collect()
    }

    #[test]
    fn a_fixed_list_pairs_only_the_same_rate_and_names_the_rest() {
        let base = benchmarks(&[constant(10.0), constant(20.0)]);
        let cur = benchmarks(&[constant(20.0)]);
        for by_position in [false, true] {
            let p = pair(&base, &cur, by_position);
            assert_eq!(labels(&p), [("constant@20".into(), "constant@20".into())]);
            assert_eq!(p.unmatched_baseline, ["constant@10"]);
            assert!(p.unmatched_current.is_empty());
        }
        // Different rates of a fixed list never pair by position.
        let p = pair(&base[..1], &cur, false);
        assert!(p.pairs.is_empty());
        assert_eq!(
            (p.unmatched_baseline, p.unmatched_current),
            (
                vec!["constant@10".to_string()],
                vec!["constant@20".to_string()]
            )
        );
    }

    #[test]
    fn a_capacity_searchs_probes_never_pair_by_position() {
        let mut report: Report = serde_json::from_str(include_str!(
            "../../tests/fixtures/report-server-metrics.json"
        ))
        .expect("fixture parses");
        let mut kind = |k: &str| {
            report.args["profile_plan"] = serde_json::json!({ "kind": k });
            computes_rates(&report)
        };
        assert!(kind("sweep") && kind("knee"));
        assert!(
            !kind("capacity"),
            "@5 of one search is no partner of another's @32"
        );
    }

    #[test]
    fn computed_rates_pair_by_position_only_without_an_exact_partner() {
        let sweep = |rates: &[f64]| {
            let mut s = vec![
                Strategy::Synchronous,
                Strategy::Throughput { max_concurrency: 8 },
            ];
            s.extend(rates.iter().map(|r| constant(*r)));
            benchmarks(&s)
        };
        let base = sweep(&[12.5, 25.0, 37.5]);
        let cur = sweep(&[12.1, 25.0, 36.3]);
        let p = pair(&base, &cur, true);
        assert_eq!(
            labels(&p),
            [
                ("synchronous".into(), "synchronous".into()),
                ("throughput@8".into(), "throughput@8".into()),
                ("constant@12.5".into(), "constant@12.1".into()),
                ("constant@25".into(), "constant@25".into()),
                ("constant@37.5".into(), "constant@36.3".into()),
            ]
        );
        // Two benchmarks of one rate against one: the second has an exact partner on the
        // other side (taken), so it pairs with nothing else.
        let base = benchmarks(&[constant(20.0), constant(20.0)]);
        let cur = benchmarks(&[constant(20.0), constant(30.0)]);
        let p = pair(&base, &cur, true);
        assert_eq!(labels(&p), [("constant@20".into(), "constant@20".into())]);
        assert_eq!(p.unmatched_baseline, ["constant@20"]);
        assert_eq!(p.unmatched_current, ["constant@30"]);
    }
}
