//! How the outputs show the steady-state window and `--until-precise`.

use super::json::Report;
use llmsurge_coordinator::BenchmarkResult;

/// The steady-state figures shown, in order (see `llmsurge_coordinator::steady`).
pub const FIGURES: [&str; 11] = [
    "ttft_p50",
    "ttft_p90",
    "ttft_p99",
    "tpot_p50",
    "tpot_p90",
    "tpot_p99",
    "e2e_p50",
    "e2e_p90",
    "e2e_p99",
    "requests_per_s",
    "output_tokens_per_s",
];

use super::label;

/// One line per benchmark: its steady window and figures, then its precision.
pub fn lines(b: &BenchmarkResult) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(s) = b.steady_state.as_ref().filter(|s| !s.found) {
        out.push(format!(
            "{}: no steady state (in flight ≥ {:.2} of level {:.2} for {:.1}–{:.1} s: {:.1} s, shorter than {:.1} s, the longer of 10 s and 10% of the measured window)",
            label(b),
            s.threshold,
            s.concurrency_level,
            s.start_s,
            s.end_s,
            s.seconds(),
            s.min_window_s,
        ));
    }
    if let Some(s) = b.steady_state.as_ref().filter(|s| s.found) {
        let figures: Vec<String> = FIGURES
            .iter()
            .filter_map(|f| {
                s.figures
                    .get(*f)
                    .map(|v| format!("{f} {}", super::cell_value(Some(*v))))
            })
            .collect();
        out.push(format!(
            "{}: steady state {:.1}–{:.1} s (in flight ≥ {:.2} of level {:.2}; {} completed requests started inside, every figure over them): {}; ITL and goodput: measured window",
            label(b),
            s.start_s,
            s.end_s,
            s.threshold,
            s.concurrency_level,
            s.requests,
            figures.join(", ")
        ));
    }
    if let Some(p) = &b.precision {
        let figures: Vec<String> = p
            .figures
            .iter()
            .map(|f| {
                let reached = f
                    .precision
                    .map_or("unbounded (too few requests)".to_string(), |r| {
                        format!("±{:.2}%", r * 100.0)
                    });
                format!(
                    "{} {} [{} – {}] {} of ±{:.2}% {}",
                    f.figure,
                    super::cell_value(f.value),
                    super::cell_value(f.ci_low),
                    super::cell_value(f.ci_high),
                    reached,
                    f.target * 100.0,
                    if f.met { "met" } else { "NOT met" }
                )
            })
            .collect();
        out.push(format!(
            "{}: precision {} ({}): {}",
            label(b),
            if p.met { "reached" } else { "not reached" },
            if p.stopped_it {
                "it ended the benchmark"
            } else {
                "the limits ended the benchmark first"
            },
            figures.join("; ")
        ));
    }
    out
}

/// The console block; empty when no benchmark has a steady window or a precision.
pub fn console(benchmarks: &[BenchmarkResult]) -> String {
    benchmarks
        .iter()
        .flat_map(lines)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The Markdown section.
pub fn markdown(benchmarks: &[BenchmarkResult]) -> String {
    let lines: Vec<String> = benchmarks.iter().flat_map(lines).collect();
    if lines.is_empty() {
        return String::new();
    }
    let mut out = "\n## Steady state and precision\n\n".to_string();
    for l in lines {
        out.push_str(&format!("- {l}\n"));
    }
    out
}

/// The CSV columns: the steady window's bounds and figures, when any benchmark has one.
pub fn csv_names(report: &Report) -> Vec<String> {
    if report.benchmarks.iter().all(|b| b.steady_state.is_none()) {
        return Vec::new();
    }
    let mut h = vec!["steady.start_s".to_string(), "steady.end_s".to_string()];
    h.extend(FIGURES.iter().map(|f| format!("steady.{f}")));
    h
}

/// The CSV cells of one benchmark (see [`csv_names`]).
pub fn csv_values(report: &Report, b: &BenchmarkResult) -> Vec<String> {
    let width = csv_names(report).len();
    let Some(s) = &b.steady_state else {
        return vec![String::new(); width];
    };
    let mut row = vec![format!("{}", s.start_s), format!("{}", s.end_s)];
    row.extend(FIGURES.iter().map(|f| {
        s.figures
            .get(*f)
            .map(|v| format!("{v}"))
            .unwrap_or_default()
    }));
    row
}
