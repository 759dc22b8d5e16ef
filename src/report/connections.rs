//! The connections of each benchmark (opened, reused, time to open one: TCP connect and
//! TLS handshake) as one row of cells, which the console, Markdown and HTML renderers
//! all print, so they cannot drift apart. CSV, JSON and YAML carry the report's
//! `client.connections` fields themselves.

use llmsurge_coordinator::BenchmarkResult;

/// The headers of the rows' cells, in order.
pub const HEADERS: [&str; 7] = [
    "Benchmark",
    "Opened",
    "Reused",
    "Connect mean ms",
    "Connect p50 ms",
    "Connect p99 ms",
    "Connect max ms",
];

pub use super::cells::Row;

/// A row for each benchmark that opened a connection in its measured window.
pub fn rows(benchmarks: &[BenchmarkResult]) -> Vec<Row> {
    benchmarks
        .iter()
        .filter_map(|b| {
            let c = b.client.connections.as_ref()?;
            let d = &c.connect;
            Some(Row {
                label: super::label(b),
                cells: vec![
                    c.opened.to_string(),
                    c.reused.to_string(),
                    super::num(d.mean),
                    super::num(d.percentiles.p50),
                    super::num(d.percentiles.p99),
                    super::num(d.max),
                ],
            })
        })
        .collect()
}

/// The line under the table.
pub const HINT: &str = "Connections opened in the measured window and the time each took to open (TCP connect, plus the TLS handshake on https://); reused: requests sent on a connection already open.";
