//! The steady-state window: the plateau of in-flight requests, ramp-up and drain left out.
//!
//! Found from the benchmark's per-second concurrency series (`timeseries[].concurrency`,
//! the mean of requests in flight over each second from t0): its level is the median of
//! every second's value, and the window runs from the start of the first second at or
//! above 90% of that level to the end of the last such second. Seconds inside the window
//! that dip below stay in it (a plateau has noise); only the ramp at the start and the
//! drain at the end are cut. A series of fewer than [`MIN_SECONDS`] seconds, or one with
//! nothing in flight, has no window.
//!
//! Over the window: TTFT, TPOT and e2e percentiles (to 2 significant digits) of the
//! completed measured requests that *started* inside it, and the request and output-token rates of the completions
//! inside it (the sums of `timeseries[].completed` and `output_tokens_per_s` over its
//! seconds, over its length). ITL is left out: its gaps are per chunk and only the
//! workers see them, so they cannot be split by window here; goodput too (it is judged
//! per request over the measured window). Those stay on the measured window.

use crate::timeseries::TimePoint;
use hdrhistogram::Histogram;
use llmsurge_proto::{MonoNanos, RequestRecord, RequestStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Shortest series with a steady window, seconds.
pub const MIN_SECONDS: usize = 3;
/// A second belongs to the plateau at this fraction of its level or above.
pub const PLATEAU_FRACTION: f64 = 0.9;
/// Buckets kept before two neighbours merge (bounds memory on long runs: the window's
/// latencies are then resolved to 2, 4, … seconds).
const MAX_BUCKETS: usize = 256;
/// Significant digits of the window's histograms: 2 (within 1%) keeps each at a few KB,
/// so 3 metrics × 256 buckets stay within ~15 MB even at latencies of minutes.
const SIGNIFICANT_DIGITS: u8 = 2;

/// An empty auto-resizing histogram of the window's precision.
fn new_histogram() -> Option<Histogram<u64>> {
    let mut h = Histogram::new(SIGNIFICANT_DIGITS).ok()?;
    h.auto(true);
    Some(h)
}

/// The latency metrics split by window, and their report names.
const LATENCIES: [&str; 3] = ["ttft", "tpot", "e2e"];
/// Percentiles given per latency.
const PERCENTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

#[derive(Clone, Debug, Default)]
struct Bucket {
    /// TTFT, TPOT, e2e in µs, of completed measured requests that started here.
    hists: [Option<Histogram<u64>>; 3],
}

/// Latencies of measured requests by the second they started in.
#[derive(Clone, Debug)]
pub struct SteadyCollector {
    t0: MonoNanos,
    /// Seconds per bucket: 1, doubled whenever [`MAX_BUCKETS`] would be passed.
    width_s: u64,
    buckets: Vec<Bucket>,
}

impl SteadyCollector {
    /// An empty collector for a benchmark that started at `t0`.
    pub fn new(t0: MonoNanos) -> Self {
        Self {
            t0,
            width_s: 1,
            buckets: Vec::new(),
        }
    }

    /// Adds a measured request (only completed ones count).
    pub fn add(&mut self, r: &RequestRecord) {
        if r.status != RequestStatus::Completed {
            return;
        }
        let (Some(start), Some(e2e)) = (r.start, r.latency()) else {
            return;
        };
        let second = start.0.saturating_sub(self.t0.0) / 1_000_000_000;
        while second / self.width_s >= MAX_BUCKETS as u64 {
            self.coarsen();
        }
        let i = (second / self.width_s) as usize;
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, Bucket::default());
        }
        let values = [r.ttft(), r.tpot(), Some(e2e)];
        for (h, v) in self.buckets[i].hists.iter_mut().zip(values) {
            if let Some(v) = v {
                if h.is_none() {
                    *h = new_histogram();
                }
                let Some(h) = h.as_mut() else { continue };
                let us = v.as_micros() as u64;
                if h.record(us).is_err() {
                    h.saturating_record(us);
                }
            }
        }
    }

    /// Merges neighbouring buckets two by two.
    fn coarsen(&mut self) {
        let old = std::mem::take(&mut self.buckets);
        for pair in old.chunks(2) {
            let mut b = pair[0].clone();
            if let Some(next) = pair.get(1) {
                for (h, n) in b.hists.iter_mut().zip(&next.hists) {
                    merge(h, n.as_ref());
                }
            }
            self.buckets.push(b);
        }
        self.width_s *= 2;
    }
}

fn merge(into: &mut Option<Histogram<u64>>, from: Option<&Histogram<u64>>) {
    if let Some(from) = from {
        if into.is_none() {
            *into = new_histogram();
        }
        if let Some(h) = into.as_mut() {
            // Both auto-resize with the same precision: adding cannot fail.
            let _ = h.add(from);
        }
    }
}

/// The steady-state window of a benchmark and its headline figures over it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SteadyState {
    /// Window start, seconds from t0 (the start of a second of `timeseries`).
    pub start_s: f64,
    /// Window end, seconds from t0.
    pub end_s: f64,
    /// The plateau's level: the median of the per-second concurrency.
    pub concurrency_level: f64,
    /// Seconds at or above this concurrency are on the plateau (90% of the level).
    pub threshold: f64,
    /// Completed measured requests that started inside the window (what its latency
    /// percentiles are over).
    pub requests: u64,
    /// Seconds per bucket the latencies were resolved to (1 unless the run was long).
    pub resolution_s: u64,
    /// The headline figures over the window (`ttft_p99` in ms, `requests_per_s`, …). A
    /// figure without a value (TPOT of a non-streamed run) is absent.
    pub figures: BTreeMap<String, f64>,
    /// The figures that stay on the measured window, and why.
    pub measured_window_only: BTreeMap<String, String>,
}

/// The window `(first, last)` second indices (inclusive) of a concurrency series, with
/// its level and threshold; `None` when the series has no plateau (see the module docs).
pub fn plateau(concurrency: &[f64]) -> Option<(usize, usize, f64, f64)> {
    if concurrency.len() < MIN_SECONDS {
        return None;
    }
    let mut sorted: Vec<f64> = concurrency.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let level = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    if level <= 0.0 {
        return None;
    }
    let threshold = level * PLATEAU_FRACTION;
    let first = concurrency.iter().position(|c| *c >= threshold)?;
    let last = concurrency.iter().rposition(|c| *c >= threshold)?;
    Some((first, last, level, threshold))
}

/// The steady state of a finished benchmark, from its series and collector.
pub fn steady_state(points: &[TimePoint], c: &SteadyCollector) -> Option<SteadyState> {
    let series: Vec<f64> = points.iter().map(|p| p.concurrency).collect();
    let (first, last, level, threshold) = plateau(&series)?;
    let start_s = points[first].t;
    let end_s = points[last].t + 1.0;
    let inside = &points[first..=last];
    let seconds = end_s - start_s;
    let mut figures = BTreeMap::new();
    let completed: u64 = inside.iter().map(|p| p.completed).sum();
    figures.insert("requests_per_s".to_string(), completed as f64 / seconds);
    if inside.iter().all(|p| p.output_tokens_per_s.is_some()) {
        let tokens: f64 = inside.iter().filter_map(|p| p.output_tokens_per_s).sum();
        figures.insert("output_tokens_per_s".to_string(), tokens / seconds);
    }
    // Latencies: the buckets wholly inside the window.
    let w = c.width_s;
    let mut hists: [Option<Histogram<u64>>; 3] = Default::default();
    for (i, b) in c.buckets.iter().enumerate() {
        let (from, to) = (i as u64 * w, (i as u64 + 1) * w);
        if from as f64 >= start_s && to as f64 <= end_s {
            for (h, bh) in hists.iter_mut().zip(&b.hists) {
                merge(h, bh.as_ref());
            }
        }
    }
    for (name, h) in LATENCIES.iter().zip(&hists) {
        let Some(h) = h.as_ref().filter(|h| !h.is_empty()) else {
            continue;
        };
        for (stat, q) in PERCENTILES {
            figures.insert(
                format!("{name}_{stat}"),
                h.value_at_quantile(q) as f64 / 1000.0,
            );
        }
    }
    let requests = hists[2].as_ref().map_or(0, |h| h.len());
    let mut measured_window_only = BTreeMap::new();
    for stat in ["p50", "p90", "p99"] {
        measured_window_only.insert(
            format!("itl_{stat}"),
            "inter-token gaps are recorded per chunk by the workers, not per request".into(),
        );
    }
    measured_window_only.insert(
        "goodput_per_s".into(),
        "goodput is judged per request over the measured window".into(),
    );
    Some(SteadyState {
        start_s,
        end_s,
        concurrency_level: level,
        threshold,
        requests,
        resolution_s: w,
        figures,
        measured_window_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::{Phase, TokenSource};

    fn record(start_s: u64, e2e_ms: u64) -> RequestRecord {
        let at = |ms: u64| MonoNanos(10_000_000_000 + ms * 1_000_000);
        RequestRecord {
            slot: 0,
            worker: 0,
            status: RequestStatus::Completed,
            error: None,
            scheduled: at(start_s * 1000),
            start: Some(at(start_s * 1000)),
            first_token: Some(at(start_s * 1000 + 10)),
            first_content: Some(at(start_s * 1000 + 10)),
            end: at(start_s * 1000 + e2e_ms),
            prompt_tokens: None,
            output_tokens: 10,
            output_tokens_source: TokenSource::Usage,
            reasoning_tokens: None,
            streamed_tokens: 10,
            streamed: true,
            phase: Phase::Measured,
            late: false,
            retried: false,
            itl: None,
            model: None,
            session: None,
            media: None,
        }
    }

    fn point(t: f64, concurrency: f64) -> TimePoint {
        TimePoint {
            t,
            started: 1,
            completed: 2,
            errored: 0,
            concurrency,
            output_tokens_per_s: Some(20.0),
            ttft_mean_ms: None,
            ttft_count: 0,
        }
    }

    #[test]
    fn window_latencies_are_those_of_requests_started_inside_and_long_runs_coarsen() {
        let mut c = SteadyCollector::new(MonoNanos(10_000_000_000));
        // Second 0 is the ramp (slow requests), 1..=3 the plateau, 4 the drain.
        c.add(&record(0, 900));
        for s in 1..=3 {
            c.add(&record(s, 100));
        }
        c.add(&record(4, 900));
        let points: Vec<TimePoint> = [1.0, 4.0, 4.0, 4.0, 1.0]
            .iter()
            .enumerate()
            .map(|(i, c)| point(i as f64, *c))
            .collect();
        let s = steady_state(&points, &c).expect("steady");
        assert_eq!((s.start_s, s.end_s, s.requests), (1.0, 4.0, 3));
        // The plateau's 100 ms, to 2 significant digits; the ramp's and drain's 900 ms
        // are out.
        assert!(
            (s.figures["e2e_p99"] - 100.0).abs() <= 1.0,
            "{:?}",
            s.figures
        );
        assert_eq!(s.figures["requests_per_s"], 2.0);
        assert!(!s.figures.contains_key("itl_p50"));
        // A request 300 s in: buckets of 2 s from then on.
        c.add(&record(300, 100));
        assert_eq!(c.width_s, 2);
        assert!(c.buckets.len() <= MAX_BUCKETS);
    }

    #[test]
    fn the_plateau_leaves_out_ramp_and_drain() {
        let c = [0.5, 3.0, 9.5, 10.0, 9.0, 10.0, 10.0, 4.0, 0.2];
        let (first, last, level, threshold) = plateau(&c).expect("plateau");
        assert_eq!(level, 9.0);
        assert!((threshold - 8.1).abs() < 1e-9);
        assert_eq!((first, last), (2, 6));
        assert_eq!(plateau(&[1.0, 1.0]), None, "too short");
        assert_eq!(plateau(&[0.0, 0.0, 0.0]), None, "nothing in flight");
    }
}
