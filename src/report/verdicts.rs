//! The SLO pass/fail table and the capacity answer, for the console.

use super::cell_value;
use comfy_table::{Cell, Table, presets::UTF8_FULL_CONDENSED};
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::profiles::CapacityOutcome;

/// One row per SLO check per benchmark (empty when no SLO was given), then the capacity
/// answer of a capacity search.
pub fn render(benchmarks: &[BenchmarkResult], capacity: Option<&CapacityOutcome>) -> String {
    let mut out = String::new();
    if benchmarks.iter().any(|b| b.slo.is_some()) {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(["Benchmark", "Objective", "Threshold", "Measured", "Verdict"]);
        for b in benchmarks {
            for c in b.slo.iter().flat_map(|v| &v.checks) {
                let verdict = Cell::new(c.label());
                t.add_row(vec![
                    Cell::new(super::label(b)),
                    Cell::new(&c.name),
                    Cell::new(cell_value(Some(c.threshold))),
                    Cell::new(cell_value(c.measured)),
                    verdict,
                ]);
            }
        }
        let failed = benchmarks
            .iter()
            .filter(|b| b.slo.as_ref().is_some_and(|v| !v.passed))
            .count();
        out.push_str(&format!(
            "Service-level objectives: {failed} of {} benchmarks failed\n",
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
                        .and_then(|r| r.strip_prefix(": "))
                        .unwrap_or(r);
                    out.push_str(&format!("  {} {label}: {r}\n", b.strategy));
                }
            }
        }
    }
    if let Some(c) = capacity {
        match c.rate {
            Some(rate) => out.push_str(&format!(
                "\nCapacity: {rate:.3} req/s — the highest constant rate that meets the SLO ({})\n",
                c.conclusion
            )),
            None => out.push_str(&format!("\nCapacity: none — {}\n", c.conclusion)),
        }
        for p in &c.probes {
            out.push_str(&format!(
                "  benchmark {} {:<20} {:>10.3} req/s  {}{}{}{}\n",
                p.benchmark,
                p.strategy.to_string(),
                p.rate,
                if p.passed { "pass" } else { "fail" },
                if p.retest { " (second run)" } else { "" },
                p.reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default(),
                p.server
                    .as_ref()
                    .map(|s| format!(" ({})", s.describe()))
                    .unwrap_or_default()
            ));
        }
    }
    out
}
