//! What each request did, kept for the timeline chart (docs/report.md, "Requests over
//! time"): per benchmark, an evenly spaced selection of its requests, each as its send,
//! first token and end times and how it ended.
//!
//! The reporter sees every record; [`TimelineSampler`] keeps every k-th one in the
//! order they finish, doubling k (and dropping every other one kept) whenever it holds
//! twice its budget, so memory stays bounded however long the run and what is kept is
//! spread evenly over the benchmark. The selection is stored in the JSON report
//! (`timeline`), so `benchmark from-file` draws the same chart.

use llmsurge_proto::{ClockAnchor, RequestRecord, RequestStatus};
use serde::{Deserialize, Serialize};

/// The most requests the timeline draws over a whole run.
pub const MAX_DRAWN: usize = 2000;

/// How a request ended, as the timeline colours it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanEnd {
    /// It completed.
    Ok,
    /// It failed.
    Error,
    /// The client stopped it (the benchmark ended, or `--cancel`).
    Cancelled,
}

/// One request: `[sent, first_token, end, how]`, times in seconds since its benchmark's
/// start (`start_time`), to 0.1 ms. `sent` is when it should have been sent for a
/// request that never was; `first_token` is its first streamed token of any kind, absent
/// without one.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Span(pub f64, pub Option<f64>, pub f64, pub SpanEnd);

impl Span {
    /// When it was sent.
    pub fn sent(&self) -> f64 {
        self.0
    }
    /// Its first token, if one came.
    pub fn first_token(&self) -> Option<f64> {
        self.1
    }
    /// When it ended.
    pub fn end(&self) -> f64 {
        self.2
    }
    /// How it ended.
    pub fn how(&self) -> SpanEnd {
        self.3
    }
}

/// The requests of one benchmark kept for the timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkTimeline {
    /// The benchmark (its `index`).
    pub benchmark: u32,
    /// Every request the benchmark had (each phase).
    pub requests: u64,
    /// The ones kept, in send order.
    pub spans: Vec<Span>,
}

/// Keeps an evenly spread selection of a benchmark's requests (see the module's doc).
#[derive(Debug)]
pub struct TimelineSampler {
    budget: usize,
    stride: u64,
    seen: u64,
    /// Unix seconds, converted at [`TimelineSampler::finish`].
    kept: Vec<(f64, Option<f64>, f64, SpanEnd)>,
}

impl TimelineSampler {
    /// A sampler keeping at most `budget` requests per benchmark (at least one).
    pub fn new(budget: usize) -> Self {
        Self {
            budget: budget.max(1),
            stride: 1,
            seen: 0,
            kept: Vec::new(),
        }
    }

    /// Starts a benchmark.
    pub fn start(&mut self) {
        self.stride = 1;
        self.seen = 0;
        self.kept.clear();
    }

    /// Offers one finished request.
    pub fn offer(&mut self, r: &RequestRecord, anchor: &ClockAnchor) {
        let take = self.seen.is_multiple_of(self.stride);
        self.seen += 1;
        if !take {
            return;
        }
        let how = match r.status {
            RequestStatus::Completed => SpanEnd::Ok,
            RequestStatus::Errored => SpanEnd::Error,
            RequestStatus::Cancelled => SpanEnd::Cancelled,
        };
        let wall = |t| anchor.unix_seconds(t);
        self.kept.push((
            wall(r.start.unwrap_or(r.scheduled)),
            r.first_token.map(wall),
            wall(r.end),
            how,
        ));
        if self.kept.len() >= 2 * self.budget {
            let mut i = 0;
            self.kept.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
        }
    }

    /// The benchmark's timeline: times made relative to `start_time` (its Unix start),
    /// at most the budget, evenly spaced, in send order.
    pub fn finish(&mut self, benchmark: u32, start_time: f64) -> BenchmarkTimeline {
        let rel = |t: f64| ((t - start_time) * 1e4).round() / 1e4;
        let kept = std::mem::take(&mut self.kept);
        let mut spans: Vec<Span> = evenly(&kept, self.budget)
            .into_iter()
            .map(|&(s, f, e, how)| Span(rel(s), f.map(rel), rel(e), how))
            .collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        let requests = self.seen;
        self.start();
        BenchmarkTimeline {
            benchmark,
            requests,
            spans,
        }
    }
}

/// At most `n` items of `items`, evenly spaced (the first one always among them).
pub fn evenly<T>(items: &[T], n: usize) -> Vec<&T> {
    if items.len() <= n {
        return items.iter().collect();
    }
    (0..n).map(|k| &items[k * items.len() / n]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::MonoNanos;

    fn anchor() -> ClockAnchor {
        ClockAnchor {
            mono: MonoNanos(0),
            unix_nanos: 1_700_000_000_000_000_000,
        }
    }

    fn record(ms: u64, status: RequestStatus) -> RequestRecord {
        let at = |ms: u64| MonoNanos(ms * 1_000_000);
        RequestRecord {
            status,
            scheduled: at(ms),
            ..RequestRecord::completed(at(ms), Some(at(ms + 20)), at(ms + 100), 4)
        }
    }

    #[test]
    fn keeps_at_most_the_budget_evenly_spread() {
        let mut s = TimelineSampler::new(100);
        s.start();
        for k in 0..10_000 {
            s.offer(&record(k, RequestStatus::Completed), &anchor());
        }
        let t = s.finish(2, 1_700_000_000.0);
        assert_eq!((t.benchmark, t.requests), (2, 10_000));
        assert_eq!(t.spans.len(), 100);
        // Evenly spread (requests sent 1 ms apart): no gap between consecutive kept
        // ones is more than twice another, and they reach the end, never bunched at
        // one end.
        let gaps: Vec<f64> = t
            .spans
            .windows(2)
            .map(|w| w[1].sent() - w[0].sent())
            .collect();
        let (lo, hi) = gaps
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), g| (l.min(*g), h.max(*g)));
        assert!(lo > 0.0 && hi <= 2.0 * lo + 1e-9, "gaps {lo}..{hi}");
        assert!(t.spans[99].sent() > 9.0, "{:?}", t.spans[99]);
        assert!((t.spans[0].first_token().expect("first token") - 0.02).abs() < 1e-9);
        assert!((t.spans[0].end() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn keeps_every_request_under_the_budget_and_how_it_ended() {
        let mut s = TimelineSampler::new(100);
        s.offer(&record(5, RequestStatus::Errored), &anchor());
        s.offer(&record(1, RequestStatus::Cancelled), &anchor());
        let t = s.finish(0, 1_700_000_000.0);
        assert_eq!(t.requests, 2);
        let how: Vec<SpanEnd> = t.spans.iter().map(Span::how).collect();
        // In send order.
        assert_eq!(how, [SpanEnd::Cancelled, SpanEnd::Error]);
        // The next benchmark starts empty.
        assert!(s.finish(1, 0.0).spans.is_empty());
    }

    #[test]
    fn evenly_takes_spread_items() {
        let v: Vec<u32> = (0..10).collect();
        assert_eq!(evenly(&v, 5), [&0, &2, &4, &6, &8]);
        assert_eq!(evenly(&v, 20).len(), 10);
    }
}
