//! The SLO pass/fail table and the capacity answer, for the console.

use super::cell_value;
use comfy_table::{Cell, Table, presets::UTF8_FULL_CONDENSED};
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::profiles::{CapacityOutcome, SearchVariable};
use llmsurge_coordinator::slo::CheckResult;
use llmsurge_proto::inert::terminal;

/// A percentile check's bounds and their confidence (`940.0 to ? at 95%`: `?` where too
/// few requests bound that side); `–` for other checks.
fn bounds(c: &CheckResult) -> String {
    let Some(confidence) = c.confidence else {
        return "–".into();
    };
    let side = |b: Option<f64>| b.map_or("?".into(), |v| cell_value(Some(v)));
    format!(
        "{} to {} at {}%",
        side(c.lower),
        side(c.upper),
        (confidence * 1e4).round() / 1e2
    )
}

/// One row per SLO check per benchmark (empty when no SLO was given), then the capacity
/// answer of a capacity search.
pub fn render(benchmarks: &[BenchmarkResult], capacity: Option<&CapacityOutcome>) -> String {
    let mut out = String::new();
    if benchmarks.iter().any(|b| b.slo.is_some()) {
        let checks = || {
            benchmarks
                .iter()
                .flat_map(|b| b.slo.iter().flat_map(|v| &v.checks))
        };
        // Percentile checks carry their confidence bounds; reports from before them do not,
        // and their table stays as it was.
        let bounded = checks().any(|c| c.confidence.is_some());
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec!["Benchmark", "Objective", "Threshold", "Measured"];
        if bounded {
            header.push("Confidence bounds");
        }
        header.push("Verdict");
        t.set_header(header);
        for b in benchmarks {
            for c in b.slo.iter().flat_map(|v| &v.checks) {
                let mut row = vec![
                    Cell::new(super::label(b)),
                    Cell::new(&c.name),
                    Cell::new(cell_value(Some(c.threshold))),
                    Cell::new(cell_value(c.measured)),
                ];
                if bounded {
                    row.push(Cell::new(bounds(c)));
                }
                row.push(Cell::new(c.label()));
                t.add_row(row);
            }
        }
        let count = |label: &str| {
            benchmarks
                .iter()
                .filter(|b| b.slo.as_ref().is_some_and(|v| v.label() == label))
                .count()
        };
        let (failed, inconclusive) = (count("FAIL"), count("INCONCLUSIVE"));
        let undecided = if inconclusive > 0 {
            format!(", {inconclusive} inconclusive")
        } else {
            String::new()
        };
        out.push_str(&format!(
            "Service-level objectives: {failed} of {} benchmarks failed{undecided}\n",
            benchmarks.len()
        ));
        out.push_str(&t.to_string());
        out.push('\n');
        // Why a check failed or could not decide beyond its number, once per benchmark
        // and reason.
        for b in benchmarks {
            let mut seen: Vec<&str> = Vec::new();
            for c in b.slo.iter().flat_map(|v| &v.checks) {
                if let Some(r) = c.reason.as_deref().filter(|r| !seen.contains(r)) {
                    seen.push(r);
                    // A reason may start with the verdict it explains: said once.
                    let label = c.label();
                    let r = r
                        .strip_prefix(label)
                        .or_else(|| r.strip_prefix(label.to_lowercase().as_str()))
                        .and_then(|r| r.strip_prefix(": "))
                        .unwrap_or(r);
                    out.push_str(&format!("  {} {label}: {r}\n", b.strategy));
                }
            }
        }
    }
    if let Some(c) = capacity {
        match c.rate {
            _ if !c.tiers.is_empty() => out.push_str(&tiers(c)),
            Some(rate) if c.variable == SearchVariable::Users => out.push_str(&format!(
                "\nCapacity: {} — the most concurrent users that meet the SLO ({})\n",
                c.variable.show(rate),
                c.conclusion
            )),
            Some(rate) => out.push_str(&format!(
                "\nCapacity: {rate:.3} req/s — the highest constant rate that meets the SLO ({})\n",
                c.conclusion
            )),
            // An inconclusive search found no capacity, which is not a capacity of none.
            None if c.conclusion.starts_with("inconclusive") => {
                out.push_str(&format!("\nCapacity: unknown — {}\n", c.conclusion))
            }
            None => out.push_str(&format!("\nCapacity: none — {}\n", c.conclusion)),
        }
        for p in &c.probes {
            out.push_str(&format!(
                "  benchmark {} {:<20} {:>14}  {}{}{}{}\n",
                p.benchmark,
                p.strategy.to_string(),
                c.variable.show(p.rate),
                match (p.passed, p.inconclusive) {
                    (true, _) => "pass",
                    (false, true) => "inconclusive",
                    (false, false) => "fail",
                },
                if p.retest { " (second run)" } else { "" },
                match &p.reason {
                    Some(r) => format!(": {r}"),
                    // A tiered probe: the objectives each tier missed there, apart
                    // from those that could not decide.
                    None => [("missed", &p.failed), ("undecided", &p.undecided)]
                        .iter()
                        .filter(|(_, v)| !v.is_empty())
                        .map(|(what, v)| format!("{what} {}", v.join(", ")))
                        .collect::<Vec<_>>()
                        .iter()
                        .fold(String::new(), |acc, s| if acc.is_empty() {
                            format!(": {s}")
                        } else {
                            format!("{acc}; {s}")
                        }),
                },
                p.server
                    .as_ref()
                    .map(|s| format!(" ({})", s.describe()))
                    .unwrap_or_default()
            ));
        }
    }
    out
}

/// Each tier's answer: the most users (or highest rate) meeting its objectives, the
/// objective that bound it and the boundary's bracket.
fn tiers(c: &CapacityOutcome) -> String {
    let what = match c.variable {
        SearchVariable::Users => "the most concurrent users",
        SearchVariable::Concurrency => "the most concurrent streams",
        SearchVariable::Rate => "the highest constant rate",
    };
    let mut out = format!(
        "\nCapacity per SLO tier — {what} that meet each tier (within {:.1}%, one set of probes):\n",
        c.precision * 100.0
    );
    for t in &c.tiers {
        let answer = t.answer(c.variable);
        let bound = match (t.bracket.1, &t.binding) {
            (Some(hi), Some(b)) => format!(
                "; fails at {} on {b}{}",
                c.variable.show(hi),
                if t.failing_runs > 1 {
                    " (confirmed by a second run)"
                } else {
                    ""
                }
            ),
            _ => String::new(),
        };
        out.push_str(&format!(
            "  {}: {answer}{bound} [{}] — {}\n",
            terminal(&t.name),
            terminal(&t.objectives.join(",")),
            terminal(&t.conclusion)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capacity(rate: Option<f64>, conclusion: &str) -> CapacityOutcome {
        CapacityOutcome {
            rate,
            precision: 0.05,
            bracket: (0.0, None),
            conclusion: conclusion.into(),
            probes: Vec::new(),
            server: None,
            variable: Default::default(),
            tiers: Vec::new(),
        }
    }

    #[test]
    fn an_inconclusive_search_is_an_unknown_capacity_not_none() {
        let text = render(
            &[],
            Some(&capacity(None, "inconclusive at 4 req/s: too few")),
        );
        assert!(
            text.contains("Capacity: unknown — inconclusive at 4"),
            "{text}"
        );
        let text = render(
            &[],
            Some(&capacity(None, "even one request at a time misses it")),
        );
        assert!(text.contains("Capacity: none — even one"), "{text}");
    }
}
