//! Console summary tables, one row per benchmark.

use comfy_table::{Cell, CellAlignment, ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use llmsurge_coordinator::result::StatusDistributions;
use llmsurge_coordinator::{BenchmarkResult, Strategy};

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled);
    t.set_header(header.iter().map(Cell::new));
    for i in 1..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// A strategy as people read it: `constant@36.7` rather than `constant@36.70167202754906`
/// (a sweep computes its rates). Three significant figures tell any two benchmarks of a
/// run apart; the JSON and CSV keep the exact rate.
pub fn strategy_label(s: &Strategy) -> String {
    match *s {
        Strategy::Constant { rate } => format!("constant@{}", short(rate)),
        Strategy::Poisson { rate } => format!("poisson@{}", short(rate)),
        other => other.to_string(),
    }
}

fn short(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A number with 2–3 significant figures, for tables.
pub fn num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn metric<'a>(b: &'a BenchmarkResult, key: &str) -> Option<&'a StatusDistributions> {
    b.metrics.get(key)
}

/// Everything the console shows at the end of a run: the tables, then the SLO verdicts
/// and the capacity answer when there are any.
pub fn summary(
    benchmarks: &[BenchmarkResult],
    capacity: Option<&llmsurge_coordinator::profiles::CapacityOutcome>,
) -> String {
    let mut out = render(benchmarks);
    let verdicts = super::verdicts::render(benchmarks, capacity);
    if !verdicts.is_empty() {
        out.push('\n');
        out.push_str(&verdicts);
    }
    out
}

/// Renders the summary tables of a run.
pub fn render(benchmarks: &[BenchmarkResult]) -> String {
    let mut out = String::new();
    let mut requests = table(&[
        "Benchmark",
        "Duration s",
        "Completed",
        "Errored",
        "Cancelled",
        "Req/s",
        "Output tok/s",
        "Total tok/s",
        "Concurrency",
        "Peak",
    ]);
    for b in benchmarks {
        requests.add_row(vec![
            strategy_label(&b.strategy),
            num(b.duration_s),
            b.requests.completed.to_string(),
            b.requests.errored.to_string(),
            b.requests.cancelled.to_string(),
            num(b.throughput.requests_per_s),
            num(b.throughput.output_tokens_per_s),
            num(b.throughput.total_tokens_per_s),
            num(b.throughput.concurrency_mean),
            b.throughput.concurrency_peak.to_string(),
        ]);
    }
    out.push_str("Requests and throughput (measured window)\n");
    out.push_str(&requests.to_string());
    out.push('\n');

    let mut latency = table(&[
        "Benchmark",
        "TTFT mean",
        "TTFT p50",
        "TTFT p99",
        "ITL mean",
        "ITL p50",
        "ITL p99",
        "TPOT p50",
        "E2E p50",
        "E2E p99",
        "Lag p99",
    ]);
    for b in benchmarks {
        let s = |key: &str, f: fn(&StatusDistributions) -> f64| {
            metric(b, key).map_or("-".into(), |d| num(f(d)))
        };
        latency.add_row(vec![
            strategy_label(&b.strategy),
            s("ttft", |d| d.successful.mean),
            s("ttft", |d| d.successful.percentiles.p50),
            s("ttft", |d| d.successful.percentiles.p99),
            s("itl", |d| d.successful.mean),
            s("itl", |d| d.successful.percentiles.p50),
            s("itl", |d| d.successful.percentiles.p99),
            s("tpot", |d| d.successful.percentiles.p50),
            s("request_latency", |d| d.successful.percentiles.p50),
            s("request_latency", |d| d.successful.percentiles.p99),
            s("dispatch_lag", |d| d.total.percentiles.p99),
        ]);
    }
    out.push_str("\nLatency of successful requests (ms)\n");
    out.push_str(&latency.to_string());
    out.push('\n');
    out.push_str(
        "TTFT: first content token (ttft_any in the report: first token of any kind). ITL, TPOT: every output token, reasoning included.\n",
    );

    for b in benchmarks {
        let notes = super::notes(b);
        if !notes.is_empty() {
            out.push_str(&format!("\n{}:\n", strategy_label(&b.strategy)));
            for n in notes {
                out.push_str(&format!("  {n}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computed_rates_get_short_labels() {
        let c = |rate| strategy_label(&Strategy::Constant { rate });
        assert_eq!(c(36.70167202754906), "constant@36.7");
        assert_eq!(c(5.0), "constant@5");
        assert_eq!(c(0.5), "constant@0.5");
        assert_eq!(c(1234.56), "constant@1235");
        assert_eq!(
            strategy_label(&Strategy::Poisson { rate: 94.1126 }),
            "poisson@94.1"
        );
        assert_eq!(
            strategy_label(&Strategy::Concurrent { streams: 8 }),
            "concurrent@8"
        );
    }
}
