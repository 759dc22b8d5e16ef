//! The request timeline (docs/report.md, "Requests over time"): a Gantt chart of the
//! requests the report kept ([`crate::report::timeline`]), each drawn from its send to its
//! end, the wait for the first token in one colour and decoding in another, failed and
//! cancelled requests in their own; and beside it, on the same time axis, the requests
//! in flight and the server's queue.

use super::{
    Axis, Bar, BarKind, Bars, Chart, Scrapes, client_series, finite, offset, run_start,
    server_series, trace,
};
use crate::report::json::Report;
use crate::report::timeline::{MAX_DRAWN, Span, SpanEnd, evenly};
use llmsurge_coordinator::Strategy;

/// The bar kinds, in legend order (indexes of [`Bar`]'s kind).
const WAITING: usize = 0;
const DECODING: usize = 1;
const ERRORED: usize = 2;
const CANCELLED: usize = 3;

fn kinds() -> Vec<BarKind> {
    [
        ("waiting for the first token", "#ff7f0e"),
        ("decoding (first token to end)", "#1f77b4"),
        ("errored (send to failure)", "#d62728"),
        ("cancelled (send to cancel)", "#7f7f7f"),
    ]
    .into_iter()
    .map(|(label, color)| BarKind {
        label: label.into(),
        color: color.into(),
    })
    .collect()
}

/// The timeline and the load beside it; none for a report without a timeline (one
/// written before it was added, or a merge of shards).
pub fn charts(report: &Report) -> Vec<Chart> {
    let run0 = run_start(report);
    // Each benchmark's kept requests on the run's time axis, with the benchmark.
    let mut all: Vec<(usize, f64, Span)> = Vec::new();
    let mut total = 0u64;
    for (pos, t) in report.timeline.iter().enumerate() {
        // By position (--repeat reuses indexes), else by index.
        let b = report
            .benchmarks
            .get(pos)
            .filter(|b| b.index == t.benchmark)
            .or_else(|| report.benchmarks.iter().find(|b| b.index == t.benchmark));
        let Some(b) = b else { continue };
        total += t.requests;
        let off = offset(b, run0);
        let i = report
            .benchmarks
            .iter()
            .position(|x| std::ptr::eq(x, b))
            .unwrap_or(0);
        all.extend(t.spans.iter().map(|s| (i, off, *s)));
    }
    if report.timeline.is_empty() && report.benchmarks.is_empty() {
        return Vec::new();
    }
    let drawn: Vec<(usize, f64, Span)> = evenly(&all, MAX_DRAWN).into_iter().copied().collect();
    // Stream profiles run a fixed set of streams, each request after the one before:
    // a row per stream (lanes packed from the requests drawn) shows them as they ran.
    let streams = !drawn.is_empty()
        && drawn.iter().all(|(i, _, _)| {
            matches!(
                report.benchmarks[*i].strategy,
                Strategy::Synchronous | Strategy::Concurrent { .. } | Strategy::Throughput { .. }
            )
        });
    let rows = if streams {
        lanes(&drawn)
    } else {
        by_send(&drawn)
    };
    let mut bars = Vec::with_capacity(drawn.len() * 2);
    for ((_, off, s), row) in drawn.iter().zip(&rows) {
        let (sent, end) = (off + s.sent(), off + s.end());
        match (s.how(), s.first_token()) {
            (SpanEnd::Error, _) => bars.push(Bar(*row, sent, end, ERRORED)),
            (SpanEnd::Cancelled, _) => bars.push(Bar(*row, sent, end, CANCELLED)),
            (SpanEnd::Ok, Some(f)) => {
                bars.push(Bar(*row, sent, off + f, WAITING));
                bars.push(Bar(*row, off + f, end, DECODING));
            }
            (SpanEnd::Ok, None) => bars.push(Bar(*row, sent, end, WAITING)),
        }
    }
    bars.retain(|b| b.1.is_finite() && b.2.is_finite());
    let title = if (drawn.len() as u64) < total {
        format!(
            "Requests over time ({} of {} drawn, sampled evenly)",
            thousands(drawn.len() as u64),
            thousands(total)
        )
    } else {
        "Requests over time".to_string()
    };
    let mut gantt = Chart::new(
        "requests-timeline",
        "charts-timeline",
        &title,
        Axis::new("time since the run started", "s"),
        if streams {
            Axis::new("stream (requests that followed one another)", "")
        } else {
            Axis::new("request, in send order", "")
        },
    );
    gantt.bars = Some(Bars {
        kinds: kinds(),
        items: bars,
    });
    gantt.x_group = Some("timeline".into());

    let mut load = Chart::new(
        "timeline-load",
        "charts-timeline",
        "In flight and the server's queue (requests)",
        Axis::new("time since the run started", "s"),
        Axis::new("in flight, waiting or running", "requests"),
    );
    let same = |v: Scrapes| v;
    load.series = vec![
        trace(
            "client: in flight",
            "#1f77b4",
            client_series(report, |p| finite(p.concurrency)),
        ),
        trace(
            "server: waiting",
            "#d62728",
            server_series(report, "num_requests_waiting", &same),
        ),
        trace(
            "server: running",
            "#2ca02c",
            server_series(report, "num_requests_running", &same),
        ),
    ];
    load.x_group = Some("timeline".into());

    // One time axis for both: the span of the bars and of the load's points.
    let xs = gantt
        .bars
        .iter()
        .flat_map(|b| b.items.iter().flat_map(|b| [b.1, b.2]))
        .chain(
            load.series
                .iter()
                .flat_map(|s| s.points.iter().filter(|p| p.1.is_some()).map(|p| p.0)),
        )
        .filter(|x| x.is_finite());
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
        (l.min(x), h.max(x))
    });
    if lo < hi {
        gantt.x_range = Some((lo, hi));
        load.x_range = Some((lo, hi));
    }
    let why = if report.timeline.is_empty() {
        "This report carries no request timeline (written before llmsurge kept one, or merged from shards)."
    } else {
        "No request was sent."
    };
    vec![gantt.finish(why), load.finish("No per-second data.")]
}

/// Rows in send order across the run.
fn by_send(drawn: &[(usize, f64, Span)]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..drawn.len()).collect();
    order.sort_by(|&a, &b| {
        let sent = |k: usize| drawn[k].1 + drawn[k].2.sent();
        sent(a).total_cmp(&sent(b))
    });
    let mut rows = vec![0.0; drawn.len()];
    for (row, k) in order.into_iter().enumerate() {
        rows[k] = row as f64;
    }
    rows
}

/// Rows as streams: each request, in send order, on the lowest row free at its send;
/// rows start again at 0 with every benchmark.
fn lanes(drawn: &[(usize, f64, Span)]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..drawn.len()).collect();
    let sent = |k: usize| drawn[k].1 + drawn[k].2.sent();
    order.sort_by(|&a, &b| {
        drawn[a]
            .0
            .cmp(&drawn[b].0)
            .then(sent(a).total_cmp(&sent(b)))
    });
    let mut rows = vec![0.0; drawn.len()];
    let mut ends: Vec<f64> = Vec::new();
    let mut bench = None;
    for k in order {
        if bench != Some(drawn[k].0) {
            bench = Some(drawn[k].0);
            ends.clear();
        }
        let end = drawn[k].1 + drawn[k].2.end();
        let lane = match ends.iter().position(|&e| e <= sent(k)) {
            Some(l) => l,
            None => {
                ends.push(f64::NEG_INFINITY);
                ends.len() - 1
            }
        };
        ends[lane] = end;
        rows[k] = lane as f64;
    }
    rows
}

/// `12345` → `12,345`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_put_requests_that_follow_one_another_on_one_row() {
        // Two streams: a→c on one, b→d on the other; a new benchmark starts at row 0.
        let s = |sent: f64, end: f64| Span(sent, None, end, SpanEnd::Ok);
        let drawn = [
            (0, 0.0, s(0.0, 1.0)),
            (0, 0.0, s(0.1, 1.5)),
            (0, 0.0, s(1.0, 2.0)),
            (0, 0.0, s(1.5, 2.5)),
            (1, 0.5, s(0.0, 1.0)),
        ];
        assert_eq!(lanes(&drawn), [0.0, 1.0, 0.0, 1.0, 0.0]);
        assert_eq!(by_send(&drawn), [0.0, 1.0, 3.0, 4.0, 2.0]);
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(7), "7");
        assert_eq!(thousands(2000), "2,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
