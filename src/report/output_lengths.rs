//! Output lengths asked against received, per benchmark, as rows of cells the console,
//! Markdown and HTML renderers all print, so they cannot drift apart; and the warning
//! when requests that asked for exact lengths ended short. CSV, JSON and YAML carry the
//! report's `output_lengths` themselves.

use llmsurge_coordinator::BenchmarkResult;

/// The headers of the rows' cells, in order.
pub const HEADERS: [&str; 5] = [
    "Benchmark",
    "Asked tokens (mean)",
    "Received tokens (mean)",
    "Ended short",
    "Finish reasons (requests)",
];

/// What the table counts, printed under it.
pub const HINT: &str = "Over the completed measured requests that asked for an output length (max_tokens): the mean asked and received per request, and how many received fewer tokens than asked other than by a tool call or a `length` finish (a request without usage has no length in tokens: counted as unknown, never short); finish reasons count every completed measured request by what the server said ended it.";

pub use super::cells::Row;

/// A row per benchmark that has output lengths (a format that generates output).
pub fn rows(benchmarks: &[BenchmarkResult]) -> Vec<Row> {
    benchmarks
        .iter()
        .filter_map(|b| {
            let o = b.output_lengths.as_ref()?;
            Some(Row {
                label: super::label(b),
                cells: vec![
                    super::num(o.asked_mean),
                    super::num(o.received_mean),
                    format!(
                        "{} of {} ({:.1}%){}",
                        o.short,
                        o.asked_requests,
                        o.short_share * 100.0,
                        unknown(o.unknown_lengths)
                    ),
                    o.finish_reasons.summary(),
                ],
            })
        })
        .collect()
}

/// `; 3 unknown (no usage)` for requests whose length is not known in tokens, else
/// nothing.
fn unknown(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!("; {n} unknown (no usage)")
    }
}

/// The warnings of the benchmarks whose requests asked for exact lengths and ended
/// short with a `stop`, each prefixed with the benchmark's label.
pub fn warnings(benchmarks: &[BenchmarkResult]) -> Vec<String> {
    benchmarks
        .iter()
        .filter_map(|b| {
            let w = b.output_lengths.as_ref()?.warning()?;
            Some(format!("{}: {w}", super::label(b)))
        })
        .collect()
}
