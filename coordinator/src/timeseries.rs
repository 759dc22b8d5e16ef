//! Per-second time series of a benchmark, accumulated as records arrive.

use llmsurge_proto::{MonoNanos, RequestRecord, RequestStatus};
use serde::{Deserialize, Serialize};

const BUCKET_NS: u64 = 1_000_000_000;

#[derive(Clone, Debug, Default)]
struct Bucket {
    started: u64,
    completed: u64,
    errored: u64,
    output_tokens: u64,
    /// Sum over requests of their time in flight inside this bucket, in ns.
    busy_ns: u128,
    ttft_sum_us: u64,
    ttft_count: u64,
}

/// One second of a benchmark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimePoint {
    /// Seconds since the benchmark's start.
    pub t: f64,
    /// Requests sent in this second.
    pub started: u64,
    /// Requests completed in this second.
    pub completed: u64,
    /// Requests errored in this second.
    pub errored: u64,
    /// Mean requests in flight over this second.
    pub concurrency: f64,
    /// Output tokens received in completions of this second, per second; absent for a
    /// format without output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_s: Option<f64>,
    /// Mean TTFT of the first tokens that arrived in this second, in ms.
    pub ttft_mean_ms: Option<f64>,
    /// First tokens that arrived in this second (what `ttft_mean_ms` averages; weights
    /// it when shards merge). Absent from older reports and when zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ttft_count: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Accumulates per-second buckets relative to `t0`.
#[derive(Clone, Debug)]
pub struct TimeSeries {
    t0: MonoNanos,
    buckets: Vec<Bucket>,
}

impl TimeSeries {
    /// An empty series starting at `t0`.
    pub fn new(t0: MonoNanos) -> Self {
        Self {
            t0,
            buckets: Vec::new(),
        }
    }

    fn bucket(&mut self, t: MonoNanos) -> &mut Bucket {
        let i = (t.0.saturating_sub(self.t0.0) / BUCKET_NS) as usize;
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, Bucket::default());
        }
        &mut self.buckets[i]
    }

    /// Adds one finished request.
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(start) = r.start else { return };
        self.bucket(start).started += 1;
        let end = self.bucket(r.end);
        match r.status {
            RequestStatus::Completed => {
                end.completed += 1;
                end.output_tokens += u64::from(r.output_tokens);
            }
            RequestStatus::Errored => end.errored += 1,
            RequestStatus::Cancelled => {}
        }
        if let Some(first) = r.first_content {
            let b = self.bucket(first);
            b.ttft_sum_us += first.since(start).as_micros() as u64;
            b.ttft_count += 1;
        }
        // Spread the request's time in flight over the buckets it spans.
        let (mut from, to) = (start.0.max(self.t0.0), r.end.0.max(self.t0.0));
        while from < to {
            let edge = ((from - self.t0.0) / BUCKET_NS + 1) * BUCKET_NS + self.t0.0;
            let until = edge.min(to);
            self.bucket(MonoNanos(from)).busy_ns += u128::from(until - from);
            from = until;
        }
    }

    /// The points, one per second, up to `end`.
    pub fn points(&self, end: MonoNanos) -> Vec<TimePoint> {
        let total = end.0.saturating_sub(self.t0.0) as f64 / BUCKET_NS as f64;
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, b)| {
                // The last bucket may be partial.
                let width = (total - i as f64).clamp(1e-3, 1.0);
                TimePoint {
                    t: i as f64,
                    started: b.started,
                    completed: b.completed,
                    errored: b.errored,
                    concurrency: b.busy_ns as f64 / 1e9 / width,
                    output_tokens_per_s: Some(b.output_tokens as f64 / width),
                    ttft_mean_ms: (b.ttft_count > 0)
                        .then(|| b.ttft_sum_us as f64 / b.ttft_count as f64 / 1000.0),
                    ttft_count: b.ttft_count,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::{Phase, TokenSource};

    fn record(start_ms: u64, end_ms: u64) -> RequestRecord {
        let at = |ms: u64| MonoNanos(10_000_000_000 + ms * 1_000_000);
        RequestRecord {
            slot: 0,
            worker: 0,
            status: RequestStatus::Completed,
            error: None,
            scheduled: at(start_ms),
            start: Some(at(start_ms)),
            first_token: Some(at(start_ms + 100)),
            first_content: Some(at(start_ms + 100)),
            end: at(end_ms),
            itl: None,
            prompt_tokens: None,
            output_tokens: 10,
            output_tokens_source: TokenSource::Usage,
            reasoning_tokens: None,
            streamed_tokens: 10,
            streamed: true,
            phase: Phase::Measured,
            late: false,
            retried: false,
            model: None,
            session: None,
            media: None,
        }
    }

    #[test]
    fn concurrency_is_time_weighted_per_second() {
        let mut ts = TimeSeries::new(MonoNanos(10_000_000_000));
        // Two requests overlapping all of second 0, one spanning into second 1 by half.
        ts.add(&record(0, 1000));
        ts.add(&record(0, 1500));
        let p = ts.points(MonoNanos(12_000_000_000));
        assert_eq!(p.len(), 2);
        assert!((p[0].concurrency - 2.0).abs() < 1e-9);
        assert!((p[1].concurrency - 0.5).abs() < 1e-9);
        assert_eq!(p[0].started, 2);
        assert_eq!(
            p[1].completed, 2,
            "an end at exactly 1.000 s belongs to second 1"
        );
        assert_eq!(p[0].ttft_mean_ms, Some(100.0));
    }
}
