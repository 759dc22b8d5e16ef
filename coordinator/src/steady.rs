//! The steady-state window: the plateau of in-flight requests, ramp-up and drain left out.
//!
//! Found from the benchmark's per-second concurrency series (`timeseries[].concurrency`,
//! the mean of requests in flight over each second from t0): its level is the median of
//! every second's value, and the plateau runs from the start of the first second at or
//! above 90% of that level to the end of the last such second. Seconds inside it that dip
//! below stay in it (a plateau has noise); only the ramp at the start and the drain at
//! the end are cut. The window is the plateau clipped to the measured window (a run of
//! 3.5 s has no fourth second to end in), in fractional seconds. It is a steady state
//! only when it lasts [`MIN_WINDOW_S`] or [`MIN_WINDOW_FRACTION`] of the measured window,
//! whichever is longer: a shorter plateau is reported as "no steady state", without
//! figures. A series of fewer than [`MIN_SECONDS`] seconds, or one with nothing in
//! flight, has no plateau.
//!
//! Over the window, one set of requests: the completed measured requests that *started*
//! inside it. Their TTFT, TPOT and e2e percentiles (to 2 significant digits), their count
//! over the window's length (`requests_per_s`) and their output tokens over the same
//! length (`output_tokens_per_s`), so the figures agree with each other. ITL is left
//! out: its gaps are per chunk and only the workers see them, so they cannot be split by
//! window here; goodput too (it is judged per request over the measured window). Those
//! stay on the measured window.

use crate::timeseries::TimePoint;
use hdrhistogram::Histogram;
use llmsurge_proto::{MonoNanos, RequestRecord, RequestStatus, TokenSource};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Shortest series with a plateau, seconds.
pub const MIN_SECONDS: usize = 3;
/// Shortest steady state, seconds (or [`MIN_WINDOW_FRACTION`] of the run, if longer).
pub const MIN_WINDOW_S: f64 = 10.0;
/// Shortest steady state as a fraction of the measured window (or [`MIN_WINDOW_S`]).
pub const MIN_WINDOW_FRACTION: f64 = 0.1;
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
    /// Those requests.
    requests: u64,
    /// Their output tokens, of those with a count.
    output_tokens: u64,
    /// Those of them without a token count (no usage, not streamed).
    uncounted: u64,
}

impl Bucket {
    /// Adds `other`'s requests to this one's.
    fn absorb(&mut self, other: &Bucket) {
        for (h, n) in self.hists.iter_mut().zip(&other.hists) {
            merge(h, n.as_ref());
        }
        self.requests += other.requests;
        self.output_tokens += other.output_tokens;
        self.uncounted += other.uncounted;
    }
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
        let bucket = &mut self.buckets[i];
        bucket.requests += 1;
        if r.output_tokens_source == TokenSource::Unknown {
            bucket.uncounted += 1;
        } else {
            bucket.output_tokens += u64::from(r.output_tokens);
        }
        let values = [r.ttft(), r.tpot(), Some(e2e)];
        for (h, v) in bucket.hists.iter_mut().zip(values) {
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
                b.absorb(next);
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SteadyState {
    /// Window start, seconds from t0: the plateau's first second, or the measured
    /// window's start if later.
    pub start_s: f64,
    /// Window end, seconds from t0: the end of the plateau's last second, or the measured
    /// window's end if earlier.
    pub end_s: f64,
    /// The plateau's level: the median of the per-second concurrency.
    pub concurrency_level: f64,
    /// Seconds at or above this concurrency are on the plateau (90% of the level).
    pub threshold: f64,
    /// The window is long enough to be a steady state (at least `min_window_s`); when
    /// false, "no steady state": no figures.
    #[serde(default = "yes")]
    pub found: bool,
    /// The shortest steady state for this run, seconds: max(10 s, 10% of the measured
    /// window).
    #[serde(default)]
    pub min_window_s: f64,
    /// Completed measured requests that started inside the window (what every figure is
    /// over).
    pub requests: u64,
    /// Seconds per bucket the window was resolved to (1 unless the run was long).
    pub resolution_s: u64,
    /// The headline figures over the window (`ttft_p99` in ms, `requests_per_s`, …). A
    /// figure without a value (TPOT of a non-streamed run) is absent.
    pub figures: BTreeMap<String, f64>,
    /// The figures that stay on the measured window, and why.
    pub measured_window_only: BTreeMap<String, String>,
}

/// Reports written before `found` existed had a window only when it was found.
fn yes() -> bool {
    true
}

impl SteadyState {
    /// The window's length, seconds.
    pub fn seconds(&self) -> f64 {
        self.end_s - self.start_s
    }
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

/// The steady state of a finished benchmark, from its series and collector, within its
/// measured window `measured` (seconds from t0); `None` without a plateau.
pub fn steady_state(
    points: &[TimePoint],
    c: &SteadyCollector,
    measured: (f64, f64),
) -> Option<SteadyState> {
    let series: Vec<f64> = points.iter().map(|p| p.concurrency).collect();
    let (first, last, level, threshold) = plateau(&series)?;
    // The plateau's seconds on the collector's grid (buckets of `w` seconds), so the
    // requests counted and the span they are counted over are the same.
    let w = c.width_s;
    let from_bucket = (points[first].t.max(0.0) as u64).div_ceil(w);
    let to_bucket = (points[last].t.max(0.0) as u64 + 1) / w; // exclusive
    let (from_s, to_s) = (from_bucket * w, to_bucket * w);
    let start_s = (from_s as f64).max(measured.0);
    let end_s = (to_s as f64).min(measured.1).max(start_s);
    let min_window_s = MIN_WINDOW_S.max(MIN_WINDOW_FRACTION * (measured.1 - measured.0));
    let mut s = SteadyState {
        start_s,
        end_s,
        concurrency_level: level,
        threshold,
        found: false,
        min_window_s,
        requests: 0,
        resolution_s: w,
        figures: BTreeMap::new(),
        measured_window_only: BTreeMap::new(),
    };
    if s.seconds() < min_window_s {
        return Some(s);
    }
    s.found = true;
    // Measured requests only ever start inside the measured window, so the buckets of the
    // plateau's seconds hold exactly those that started inside the clipped window.
    let mut inside = Bucket::default();
    for b in c
        .buckets
        .iter()
        .take(to_bucket as usize)
        .skip(from_bucket as usize)
    {
        inside.absorb(b);
    }
    let seconds = s.seconds();
    s.requests = inside.requests;
    s.figures
        .insert("requests_per_s".into(), inside.requests as f64 / seconds);
    if inside.uncounted == 0 {
        s.figures.insert(
            "output_tokens_per_s".into(),
            inside.output_tokens as f64 / seconds,
        );
    }
    for (name, h) in LATENCIES.iter().zip(&inside.hists) {
        let Some(h) = h.as_ref().filter(|h| !h.is_empty()) else {
            continue;
        };
        for (stat, q) in PERCENTILES {
            s.figures.insert(
                format!("{name}_{stat}"),
                h.value_at_quantile(q) as f64 / 1000.0,
            );
        }
    }
    for stat in ["p50", "p90", "p99"] {
        s.measured_window_only.insert(
            format!("itl_{stat}"),
            "inter-token gaps are recorded per chunk by the workers, not per request".into(),
        );
    }
    s.measured_window_only.insert(
        "goodput_per_s".into(),
        "goodput is judged per request over the measured window".into(),
    );
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(start_s: u64, e2e_ms: u64) -> RequestRecord {
        let at = |ms: u64| MonoNanos(10_000_000_000 + ms * 1_000_000);
        let start = start_s * 1000;
        RequestRecord::completed(at(start), Some(at(start + 10)), at(start + e2e_ms), 10)
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
        // Second 0 is the ramp (slow requests), 1..=12 the plateau, 13 the drain.
        c.add(&record(0, 900));
        for s in 1..=12 {
            c.add(&record(s, 100));
            c.add(&record(s, 100));
        }
        c.add(&record(13, 900));
        let mut series = vec![1.0];
        series.extend([4.0; 12]);
        series.push(1.0);
        let points: Vec<TimePoint> = series
            .iter()
            .enumerate()
            .map(|(i, c)| point(i as f64, *c))
            .collect();
        let s = steady_state(&points, &c, (0.0, 14.0)).expect("steady");
        assert_eq!((s.start_s, s.end_s, s.requests), (1.0, 13.0, 24));
        assert!(s.found);
        // The plateau's 100 ms, to 2 significant digits; the ramp's and drain's 900 ms
        // are out.
        assert!(
            (s.figures["e2e_p99"] - 100.0).abs() <= 1.0,
            "{:?}",
            s.figures
        );
        // The same 24 requests over the same 12 s: 2 a second, 10 tokens each.
        assert_eq!(s.figures["requests_per_s"], 2.0);
        assert_eq!(s.figures["output_tokens_per_s"], 20.0);
        assert!(!s.figures.contains_key("itl_p50"));
        // A request 300 s in: buckets of 2 s from then on.
        c.add(&record(300, 100));
        assert_eq!(c.width_s, 2);
        assert!(c.buckets.len() <= MAX_BUCKETS);
    }

    #[test]
    fn the_window_ends_inside_the_measured_window_and_a_short_one_is_no_steady_state() {
        let mut c = SteadyCollector::new(MonoNanos(10_000_000_000));
        for s in 0..=11 {
            c.add(&record(s, 100));
        }
        let points: Vec<TimePoint> = (0..12).map(|i| point(f64::from(i), 4.0)).collect();
        // The run's last second is half of one: the window ends at 11.5 s, not 12.
        let s = steady_state(&points, &c, (0.0, 11.5)).expect("steady");
        assert_eq!((s.start_s, s.end_s, s.found), (0.0, 11.5, true));
        assert_eq!(s.requests, 12);
        assert_eq!(s.figures["requests_per_s"], 12.0 / 11.5);
        // 3.5 s: a plateau, but shorter than 10 s.
        let s = steady_state(&points[..4], &c, (0.0, 3.5)).expect("a plateau");
        assert_eq!((s.start_s, s.end_s, s.found), (0.0, 3.5, false));
        assert!(s.figures.is_empty() && s.requests == 0, "{s:?}");
        // 12 s of a 200 s run is shorter than its 10% (20 s).
        let s = steady_state(&points, &c, (0.0, 200.0)).expect("a plateau");
        assert_eq!((s.min_window_s, s.found), (20.0, false));
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
