//! `--slice DURATION`: each benchmark's headline percentiles and rates per slice of its
//! measured window (docs/report.md, "Time slices").
//!
//! A request belongs to the slice it was sent in, counted from the first measured
//! request's send. Each slice's percentiles come from its own histograms (the report's
//! HDR histograms, filled with its requests' values), never from averages of other
//! figures. The reporter keeps a few dozen bytes per measured request until its
//! benchmark ends: the slices are cut once the window is known.

use llmsurge_coordinator::saturation;
use llmsurge_proto::metrics::micros;
use llmsurge_proto::{
    ClockAnchor, Distribution, Metric, MetricSet, Phase, RequestRecord, RequestStatus, StatusClass,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The metrics sliced: report key, [`Metric`].
pub const METRICS: [(&str, Metric); 4] = [
    ("ttft", Metric::Ttft),
    ("itl", Metric::Itl),
    ("tpot", Metric::Tpot),
    ("request_latency", Metric::RequestLatency),
];

/// Percentiles of one metric over a slice's successful requests, ms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlicePercentiles {
    /// Values (for ITL, token gaps).
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// One slice of a benchmark's measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    /// Its position, from 0.
    pub index: u32,
    /// Its start, seconds since the measured window started.
    pub start_s: f64,
    /// Its length, seconds (the last one ends with the measured window).
    pub duration_s: f64,
    /// Measured requests sent in it that completed.
    pub completed: u64,
    /// Measured requests sent in it that failed.
    pub errored: u64,
    /// `completed` per second of the slice.
    pub requests_per_s: f64,
    /// Output tokens of `completed` per second of the slice.
    pub output_tokens_per_s: f64,
    /// Per metric key (`ttft`, `itl`, `tpot`, `request_latency`), its percentiles;
    /// a metric without values in the slice is absent.
    pub metrics: BTreeMap<String, SlicePercentiles>,
}

/// The over-saturation detector's least-squares line ([`saturation::trend`]) through one
/// metric's per-request values over the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SliceTrend {
    /// Slope, ms per second.
    pub slope_ms_per_s: f64,
    /// Student t statistic of the slope.
    pub t: f64,
    /// The line's value at the window's start, ms.
    pub start_ms: f64,
    /// Where the line ends: the last slice's end, seconds since the window started.
    pub end_s: f64,
    /// The line's value there, ms.
    pub end_ms: f64,
    /// Requests fitted.
    pub n: usize,
}

/// One benchmark's slices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkSlices {
    /// The benchmark (its `index`).
    pub benchmark: u32,
    /// `--slice`, seconds.
    pub slice_s: f64,
    /// When the measured window started (the first measured request's send), Unix
    /// seconds.
    pub window_start: f64,
    /// Its length, seconds (to the last measured request's end).
    pub window_s: f64,
    /// The slices, in order.
    pub slices: Vec<Slice>,
    /// Per metric key, the detector's trend over the window.
    pub trends: BTreeMap<String, SliceTrend>,
}

/// What a slice needs of one measured request.
#[derive(Clone, Copy, Debug)]
struct Kept {
    /// Sent, Unix seconds (the request log's `start_time`).
    start: f64,
    /// Ended, Unix seconds.
    end: f64,
    completed: bool,
    ttft_us: Option<u64>,
    /// Mean gap, µs, and gaps.
    itl: Option<(u64, u32)>,
    tpot_us: Option<u64>,
    e2e_us: u64,
    output_tokens: u32,
}

impl Kept {
    /// Its value of `metric`, µs, and how many times it counts.
    fn value(&self, metric: Metric) -> Option<(u64, u64)> {
        match metric {
            Metric::Ttft => self.ttft_us.map(|v| (v, 1)),
            Metric::Itl => self.itl.map(|(v, n)| (v, u64::from(n))),
            Metric::Tpot => self.tpot_us.map(|v| (v, 1)),
            Metric::RequestLatency => Some((self.e2e_us, 1)),
            _ => None,
        }
    }
}

/// Keeps the measured requests of the running benchmark and cuts them into slices.
#[derive(Debug)]
pub struct SliceCollector {
    slice_s: f64,
    kept: Vec<Kept>,
}

impl SliceCollector {
    /// A collector of `slice_s`-second slices (more than 0).
    pub fn new(slice_s: f64) -> Self {
        Self {
            slice_s,
            kept: Vec::new(),
        }
    }

    /// Starts a benchmark.
    pub fn start(&mut self) {
        self.kept.clear();
    }

    /// Offers one finished request: measured ones that were sent and completed or
    /// failed are kept.
    pub fn offer(&mut self, r: &RequestRecord, anchor: &ClockAnchor) {
        let Some(start) = r.start else { return };
        if r.phase != Phase::Measured || r.status == RequestStatus::Cancelled {
            return;
        }
        self.kept.push(Kept {
            start: anchor.unix_seconds(start),
            end: anchor.unix_seconds(r.end),
            completed: r.status == RequestStatus::Completed,
            ttft_us: r.ttft().map(micros),
            itl: r
                .itl_mean()
                .zip(r.itl)
                .map(|(m, span)| (micros(m), span.gaps.max(1))),
            tpot_us: r.tpot().map(micros),
            e2e_us: micros(r.end.since(start)),
            output_tokens: r.output_tokens,
        });
    }

    /// The benchmark's slices; `None` when it measured no request.
    pub fn finish(&mut self, benchmark: u32) -> Option<BenchmarkSlices> {
        let kept = std::mem::take(&mut self.kept);
        cut(benchmark, self.slice_s, &kept)
    }
}

fn cut(benchmark: u32, d: f64, kept: &[Kept]) -> Option<BenchmarkSlices> {
    let w0 = kept.iter().map(|k| k.start).fold(f64::INFINITY, f64::min);
    let w1 = kept.iter().map(|k| k.end).fold(f64::NEG_INFINITY, f64::max);
    if !(w0.is_finite() && w1.is_finite()) || d <= 0.0 {
        return None;
    }
    let index = |k: &Kept| ((k.start - w0) / d).floor().max(0.0) as usize;
    let n = kept.iter().map(index).max().unwrap_or(0) + 1;
    let mut sets = vec![MetricSet::new(); n];
    let mut counts = vec![(0u64, 0u64, 0u64); n];
    for k in kept {
        let i = index(k);
        if !k.completed {
            counts[i].1 += 1;
            continue;
        }
        counts[i].0 += 1;
        counts[i].2 += u64::from(k.output_tokens);
        for (_, metric) in METRICS {
            if let Some((v, times)) = k.value(metric) {
                sets[i].record_n(StatusClass::Successful, metric, v, times);
            }
        }
    }
    let slices = sets
        .iter()
        .zip(&counts)
        .enumerate()
        .map(|(i, (set, &(completed, errored, tokens)))| {
            let start_s = i as f64 * d;
            // The last slice ends with the window.
            let duration_s = d.min(w1 - w0 - start_s).max(1e-9);
            let metrics = METRICS
                .iter()
                .filter_map(|&(key, metric)| {
                    let h = set.get(StatusClass::Successful, metric)?;
                    let dist = Distribution::of_metric(metric, h);
                    (dist.count > 0).then(|| {
                        (
                            key.to_string(),
                            SlicePercentiles {
                                count: dist.count,
                                p50: dist.percentiles.p50,
                                p90: dist.percentiles.p90,
                                p99: dist.percentiles.p99,
                            },
                        )
                    })
                })
                .collect();
            Slice {
                index: i as u32,
                start_s,
                duration_s,
                completed,
                errored,
                requests_per_s: completed as f64 / duration_s,
                output_tokens_per_s: tokens as f64 / duration_s,
                metrics,
            }
        })
        .collect();
    // The requests were placed by their sends: the line spans the slices.
    let last_end = (n - 1) as f64 * d + d.min(w1 - w0 - (n - 1) as f64 * d).max(0.0);
    let trends = METRICS
        .iter()
        .filter_map(|&(key, metric)| {
            let points: Vec<(f64, f64)> = kept
                .iter()
                .filter(|k| k.completed)
                .filter_map(|k| {
                    k.value(metric)
                        .map(|(v, _)| (k.start - w0, v as f64 / 1000.0))
                })
                .collect();
            let t = saturation::trend(points.iter().copied())?;
            let mean_t = points.iter().map(|p| p.0).sum::<f64>() / points.len() as f64;
            let at = |x: f64| t.mean + t.slope * (x - mean_t);
            Some((
                key.to_string(),
                SliceTrend {
                    slope_ms_per_s: t.slope,
                    t: t.t,
                    start_ms: at(0.0),
                    end_s: last_end,
                    end_ms: at(last_end),
                    n: t.n,
                },
            ))
        })
        .collect();
    Some(BenchmarkSlices {
        benchmark,
        slice_s: d,
        window_start: w0,
        window_s: w1 - w0,
        slices,
        trends,
    })
}

/// The CSV of every benchmark's slices: one row per slice (docs/report.md).
pub fn csv(
    slices: &[BenchmarkSlices],
    label: &dyn Fn(u32) -> String,
) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = [
        "benchmark",
        "strategy",
        "slice",
        "start_s",
        "duration_s",
        "completed",
        "errored",
        "requests_per_s",
        "output_tokens_per_s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let short = |key: &str| if key == "request_latency" { "e2e" } else { key }.to_string();
    for (key, _) in METRICS {
        for p in ["p50", "p90", "p99"] {
            header.push(format!("{}_{p}_ms", short(key)));
        }
    }
    w.write_record(super::cells::inert_record(&header))?;
    let num = |v: f64| format!("{}", (v * 1e4).round() / 1e4);
    for b in slices {
        for s in &b.slices {
            let mut row = vec![
                b.benchmark.to_string(),
                label(b.benchmark),
                s.index.to_string(),
                num(s.start_s),
                num(s.duration_s),
                s.completed.to_string(),
                s.errored.to_string(),
                num(s.requests_per_s),
                num(s.output_tokens_per_s),
            ];
            for (key, _) in METRICS {
                let m = s.metrics.get(key);
                for pick in [
                    |p: &SlicePercentiles| p.p50,
                    |p: &SlicePercentiles| p.p90,
                    |p: &SlicePercentiles| p.p99,
                ] {
                    row.push(m.map(|p| num(pick(p))).unwrap_or_default());
                }
            }
            w.write_record(super::cells::inert_record(&row))?;
        }
    }
    w.into_inner()
        .map_err(|e| csv::Error::from(std::io::Error::other(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(start: f64, ttft_ms: u64, completed: bool) -> Kept {
        Kept {
            start,
            end: start + 0.5,
            completed,
            ttft_us: Some(ttft_ms * 1000),
            itl: None,
            tpot_us: None,
            e2e_us: 500_000,
            output_tokens: 10,
        }
    }

    #[test]
    fn slices_count_each_request_once_and_take_percentiles_of_their_own_values() {
        // Second 0: TTFT 1..=100 ms; second 1: 1000 ms each, and one failure; second 3
        // (after an empty one): one request.
        let mut v: Vec<Kept> = (1..=100)
            .map(|ms| kept(100.0 + ms as f64 / 1000.0, ms, true))
            .collect();
        v.extend((0..10).map(|_| kept(101.2, 1000, true)));
        v.push(kept(101.3, 5, false));
        v.push(kept(103.5, 7, true));
        let b = cut(4, 1.0, &v).expect("slices");
        assert_eq!(b.benchmark, 4);
        assert!((b.window_start - 100.001).abs() < 1e-9);
        assert_eq!(b.slices.len(), 4);
        let c: Vec<(u64, u64)> = b.slices.iter().map(|s| (s.completed, s.errored)).collect();
        assert_eq!(c, [(100, 0), (10, 1), (0, 0), (1, 0)]);
        let ttft = |i: usize| b.slices[i].metrics.get("ttft").cloned();
        let first = ttft(0).expect("ttft");
        // Nearest rank of 1..=100 ms (HDR keeps three significant digits).
        assert!(
            (first.p50 - 50.0).abs() < 0.05 && (first.p99 - 99.0).abs() < 0.1,
            "{first:?}"
        );
        assert!((ttft(1).expect("ttft").p50 - 1000.0).abs() < 1.0);
        assert!(ttft(2).is_none());
        // The last slice ends with the window: 103.5 + 0.5 - 100.001.
        assert!((b.slices[3].duration_s - 0.999).abs() < 1e-6);
        assert!((b.slices[1].requests_per_s - 10.0).abs() < 1e-9);
        assert!((b.slices[1].output_tokens_per_s - 100.0).abs() < 1e-9);
        // TTFT grows over the window: the detector's line rises.
        let trend = &b.trends["ttft"];
        assert!(
            trend.slope_ms_per_s > 0.0 && trend.end_ms > trend.start_ms,
            "{trend:?}"
        );
        let text = String::from_utf8(csv(&[b], &|i| format!("b{i}")).expect("csv")).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[0].starts_with("benchmark,strategy,slice,start_s,duration_s,completed,errored,requests_per_s,output_tokens_per_s,ttft_p50_ms"));
        assert!(lines[0].ends_with("e2e_p99_ms"));
        assert!(lines[3].starts_with("4,b4,2,2,1,0,0,0,0,,"), "{}", lines[3]);
    }

    #[test]
    fn nothing_measured_is_no_slices() {
        assert!(cut(0, 1.0, &[]).is_none());
    }
}
