//! The client queue time of each benchmark per cause (the concurrency cap, the prefill
//! cap, a busy client) and its TTFT from intent beside TTFT from send, as rows of cells
//! the console and Markdown renderers both print, so they cannot drift apart. CSV, JSON
//! and YAML carry the report's `client.queue` and `metrics` themselves.

use llmsurge_coordinator::BenchmarkResult;
use llmsurge_proto::Distribution;

/// The headers of the rows' cells, in order.
pub const HEADERS: [&str; 8] = [
    "Benchmark",
    "Cause",
    "Requests held",
    "Mean ms",
    "p99 ms",
    "Max ms",
    "TTFT p99 from send ms",
    "TTFT p99 from intent ms",
];

pub use super::cells::Row;

/// For each benchmark whose requests a cap the user set held, a row per cause: each
/// cap that held some, then the busy client (the dispatch lag of every request sent).
/// Empty when no cap held a request: the latency table's lag column says the rest.
pub fn rows(benchmarks: &[BenchmarkResult]) -> Vec<Row> {
    let mut out = Vec::new();
    for b in benchmarks {
        let Some(q) = b.client.queue.as_ref().filter(|q| q.held_by_caps() > 0) else {
            continue;
        };
        let p99 = |key: &str| {
            b.metrics
                .get(key)
                .filter(|d| d.successful.count > 0)
                .map_or("-".into(), |d| super::num(d.successful.percentiles.p99))
        };
        let causes = [
            ("concurrency cap", q.concurrency_cap.as_ref()),
            ("prefill cap", q.prefill_cap.as_ref()),
            ("busy client (dispatch lag)", Some(&q.busy_worker)),
        ];
        let mut first = true;
        for (cause, d) in causes {
            let Some(d) = d else {
                continue;
            };
            let mut cells = vec![cause.to_string()];
            cells.extend(figures(d));
            // The TTFTs once per benchmark, on its first row.
            if first {
                cells.extend([p99("ttft"), p99("ttft_from_intent")]);
            } else {
                cells.extend(["".into(), "".into()]);
            }
            first = false;
            out.push(Row {
                label: super::label(b),
                cells,
            });
        }
    }
    out
}

fn figures(d: &Distribution) -> [String; 4] {
    [
        d.count.to_string(),
        super::num(d.mean),
        super::num(d.percentiles.p99),
        super::num(d.max),
    ]
}

/// The line under the table.
pub const HINT: &str = "Client queue time: from the instant the load asked for a request to its send (measured window). A cap you set holding requests is your choice, never a client bottleneck; only a busy client (dispatch lag) makes a run invalid. TTFT from intent adds the queue time (what a user waited).";
