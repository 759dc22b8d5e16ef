//! HDR histograms of the per-request metrics, recorded in workers and merged losslessly.
//!
//! Every process uses the same precision (3 significant digits) and auto-resizing
//! histograms, so any two can be added. Histograms cross process boundaries in the
//! HdrHistogram V2 encoding, which is compact (a histogram of 1,000 values is ~160 bytes).

use crate::record::{RequestRecord, RequestStatus};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer, V2Serializer};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Significant digits of every histogram.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A per-request metric (DESIGN.md, "Metrics").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// End-to-end latency: last byte − start, in µs.
    RequestLatency,
    /// Time to first content token − start, in µs.
    Ttft,
    /// Time to first token of any kind (reasoning included) − start, in µs.
    TtftAny,
    /// Time to the first token of a tool call (its function's name or arguments) −
    /// start, in µs; only requests the server answered with a tool call.
    TtftTool,
    /// Every gap between consecutive output tokens, reasoning or content, in µs.
    Itl,
    /// (e2e − ttft_any) / (output tokens − 1) per request, in µs.
    Tpot,
    /// Start − scheduled slot time, in µs: the client's own fidelity.
    DispatchLag,
    /// Prompt tokens per request.
    PromptTokens,
    /// Output tokens per request (reasoning included when the server counts it).
    OutputTokens,
    /// TTFT values `ttft` lacks, in µs: of a request that did not finish, its TTFT when
    /// its first content token came, else the time it had waited; of one that errored
    /// with no content token, the time it waited (lower bounds; see
    /// [`record_lower_bounds`]). The `ttft_with_incomplete` family adds them to `ttft`.
    TtftWithIncomplete,
    /// As [`Metric::TtftWithIncomplete`] for the first token of any kind, in µs.
    TtftAnyWithIncomplete,
    /// The time a request that did not finish had run (or waited, when never sent), in
    /// µs: a lower bound on its end-to-end latency. Incomplete class only.
    RequestLatencyWithIncomplete,
    /// Stream strategies: the gap between a stream's previous request end and its next
    /// send, in µs (the client's turnaround). Client-side; not split by status.
    SendGap,
    /// How late a worker's runtime ran a periodic probe timer, in µs: the scheduling
    /// delay every response chunk waits before it is timestamped. Client-side.
    RuntimeDelay,
    /// How long opening a connection took, in µs: TCP connect, and the TLS handshake on
    /// `https://`; one value per connection opened. Client-side.
    Connect,
    /// First content token − intended instant, in µs: [`Metric::Ttft`] plus the time
    /// the request was held in the client (what a user waited; coordinated omission
    /// corrected).
    TtftFromIntent,
    /// First token of any kind − intended instant, in µs.
    TtftAnyFromIntent,
    /// Last byte − intended instant, in µs.
    RequestLatencyFromIntent,
    /// As [`Metric::TtftWithIncomplete`], from the intended instant, in µs.
    TtftFromIntentWithIncomplete,
    /// As [`Metric::TtftAnyWithIncomplete`], from the intended instant, in µs.
    TtftAnyFromIntentWithIncomplete,
    /// As [`Metric::RequestLatencyWithIncomplete`], from the intended instant, in µs.
    RequestLatencyFromIntentWithIncomplete,
    /// How long a request held by the user's concurrency cap waited for its room, in µs;
    /// one value per request held. Client-side.
    ConcurrencyWait,
    /// How long a request held by `--max-prefill-concurrency` waited for its room, in
    /// µs; one value per request held. Client-side.
    PrefillWait,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 23] = [
        Metric::RequestLatency,
        Metric::Ttft,
        Metric::TtftAny,
        Metric::TtftTool,
        Metric::Itl,
        Metric::Tpot,
        Metric::DispatchLag,
        Metric::PromptTokens,
        Metric::OutputTokens,
        Metric::TtftWithIncomplete,
        Metric::TtftAnyWithIncomplete,
        Metric::RequestLatencyWithIncomplete,
        Metric::SendGap,
        Metric::RuntimeDelay,
        Metric::Connect,
        Metric::TtftFromIntent,
        Metric::TtftAnyFromIntent,
        Metric::RequestLatencyFromIntent,
        Metric::TtftFromIntentWithIncomplete,
        Metric::TtftAnyFromIntentWithIncomplete,
        Metric::RequestLatencyFromIntentWithIncomplete,
        Metric::ConcurrencyWait,
        Metric::PrefillWait,
    ];

    /// The latencies from the intended instant, reported as distributions per status
    /// beside [`Metric::REPORTED`] (`metrics` in the report); the CSV has TTFT and e2e
    /// from intent, each beside its from-send twin.
    pub const FROM_INTENT: [Metric; 6] = [
        Metric::TtftFromIntent,
        Metric::TtftAnyFromIntent,
        Metric::RequestLatencyFromIntent,
        Metric::TtftFromIntentWithIncomplete,
        Metric::TtftAnyFromIntentWithIncomplete,
        Metric::RequestLatencyFromIntentWithIncomplete,
    ];

    /// The metrics reported as distributions per status (`metrics` in the report), in
    /// report order. The client-side probes are summarised in the report's `client`.
    pub const REPORTED: [Metric; 12] = [
        Metric::RequestLatency,
        Metric::Ttft,
        Metric::TtftAny,
        Metric::TtftTool,
        Metric::Itl,
        Metric::Tpot,
        Metric::DispatchLag,
        Metric::PromptTokens,
        Metric::OutputTokens,
        Metric::TtftWithIncomplete,
        Metric::TtftAnyWithIncomplete,
        Metric::RequestLatencyWithIncomplete,
    ];

    /// Whether the metric is a duration recorded in microseconds.
    pub fn is_duration(self) -> bool {
        !matches!(self, Metric::PromptTokens | Metric::OutputTokens)
    }

    /// For a `…_with_incomplete` metric, the metric whose successful and errored values
    /// it adds to its own lower bounds.
    pub fn completed_part(self) -> Option<Metric> {
        match self {
            Metric::TtftWithIncomplete => Some(Metric::Ttft),
            Metric::TtftAnyWithIncomplete => Some(Metric::TtftAny),
            Metric::RequestLatencyWithIncomplete => Some(Metric::RequestLatency),
            Metric::TtftFromIntentWithIncomplete => Some(Metric::TtftFromIntent),
            Metric::TtftAnyFromIntentWithIncomplete => Some(Metric::TtftAnyFromIntent),
            Metric::RequestLatencyFromIntentWithIncomplete => {
                Some(Metric::RequestLatencyFromIntent)
            }
            _ => None,
        }
    }

    /// The key used in reports.
    pub fn key(self) -> &'static str {
        match self {
            Metric::RequestLatency => "request_latency",
            Metric::Ttft => "ttft",
            Metric::TtftAny => "ttft_any",
            Metric::TtftTool => "ttft_tool",
            Metric::Itl => "itl",
            Metric::Tpot => "tpot",
            Metric::DispatchLag => "dispatch_lag",
            Metric::PromptTokens => "prompt_tokens",
            Metric::OutputTokens => "output_tokens",
            Metric::TtftWithIncomplete => "ttft_with_incomplete",
            Metric::TtftAnyWithIncomplete => "ttft_any_with_incomplete",
            Metric::RequestLatencyWithIncomplete => "request_latency_with_incomplete",
            Metric::SendGap => "send_gap",
            Metric::RuntimeDelay => "runtime_delay",
            Metric::Connect => "connect",
            Metric::TtftFromIntent => "ttft_from_intent",
            Metric::TtftAnyFromIntent => "ttft_any_from_intent",
            Metric::RequestLatencyFromIntent => "request_latency_from_intent",
            Metric::TtftFromIntentWithIncomplete => "ttft_from_intent_with_incomplete",
            Metric::TtftAnyFromIntentWithIncomplete => "ttft_any_from_intent_with_incomplete",
            Metric::RequestLatencyFromIntentWithIncomplete => {
                "request_latency_from_intent_with_incomplete"
            }
            Metric::ConcurrencyWait => "concurrency_wait",
            Metric::PrefillWait => "prefill_wait",
        }
    }

    /// What the metric measures, in one line, for reports.
    pub fn description(self) -> &'static str {
        match self {
            Metric::RequestLatency => "end-to-end latency: last byte − start",
            Metric::Ttft => "time to the first content token (reasoning excluded) − start",
            Metric::TtftAny => "time to the first token of any kind (reasoning included) − start",
            Metric::TtftTool => {
                "time to the first token of a tool call − start, of requests answered with one"
            }
            Metric::Itl => {
                "every gap between consecutive output tokens, reasoning or content; a chunk of k tokens gives k gaps of gap/k"
            }
            Metric::Tpot => {
                "(e2e − ttft_any) / (output tokens − 1) per request; reasoning tokens are output tokens"
            }
            Metric::DispatchLag => {
                "start − intended instant, less the waits for the user's caps: the time a busy client held the request"
            }
            Metric::PromptTokens => "prompt tokens: the server's usage, else the client's count",
            Metric::OutputTokens => {
                "output tokens (reasoning included): the server's usage, else streamed chunks"
            }
            Metric::TtftWithIncomplete => {
                "ttft of every request that got a content token, plus for each request cut off or failed without one the time it had waited (a lower bound)"
            }
            Metric::TtftAnyWithIncomplete => {
                "ttft_any of every request that got a token, plus lower bounds for those cut off or failed without one"
            }
            Metric::RequestLatencyWithIncomplete => {
                "e2e of successful and errored requests, plus for each unfinished request the time it had run, or waited when never sent (a lower bound)"
            }
            Metric::SendGap => "stream strategies: previous request's end → the stream's next send",
            Metric::RuntimeDelay => "how late a worker's runtime ran a periodic probe timer",
            Metric::Connect => {
                "time to open a connection: TCP connect, plus the TLS handshake on https://"
            }
            Metric::TtftFromIntent => {
                "time to the first content token from the intended instant: ttft plus the client queue time"
            }
            Metric::TtftAnyFromIntent => {
                "time to the first token of any kind from the intended instant: ttft_any plus the client queue time"
            }
            Metric::RequestLatencyFromIntent => {
                "last byte − intended instant: e2e plus the client queue time"
            }
            Metric::TtftFromIntentWithIncomplete => {
                "ttft_from_intent, plus for each request cut off or failed without a content token the time since its intended instant (a lower bound)"
            }
            Metric::TtftAnyFromIntentWithIncomplete => {
                "ttft_any_from_intent, plus lower bounds from the intended instant for those cut off or failed without a token"
            }
            Metric::RequestLatencyFromIntentWithIncomplete => {
                "request_latency_from_intent of successful and errored requests, plus for each unfinished request the time since its intended instant (a lower bound)"
            }
            Metric::ConcurrencyWait => {
                "client queue time for the user's concurrency cap, of each request it held"
            }
            Metric::PrefillWait => {
                "client queue time for --max-prefill-concurrency, of each request it held"
            }
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Microseconds of a duration, saturating.
pub fn micros(d: std::time::Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

/// Records the lower bounds of a request's latencies that it never got to measure into
/// the `…_with_incomplete` metrics, so the slowest requests cannot vanish from a
/// percentile by being cut off or by failing first:
/// - cancelled (queued or in flight when the benchmark stopped): its TTFTs when they
///   came, else the time it had waited; its elapsed time as e2e. Never sent: counted
///   from its scheduled time.
/// - errored after it was sent with no (content) token: the time it waited, as TTFT (a
///   request that timed out after 30 s had TTFT ≥ 30 s). Its e2e is measured as is.
///
/// Does nothing for a completed request.
pub fn record_lower_bounds(set: &mut MetricSet, r: &RequestRecord) {
    let class = StatusClass::of(r.status);
    let elapsed = micros(r.elapsed());
    match r.status {
        RequestStatus::Completed => {}
        RequestStatus::Cancelled => {
            set.record(
                class,
                Metric::TtftWithIncomplete,
                r.ttft().map_or(elapsed, micros),
            );
            set.record(
                class,
                Metric::TtftAnyWithIncomplete,
                r.ttft_any().map_or(elapsed, micros),
            );
            set.record(class, Metric::RequestLatencyWithIncomplete, elapsed);
        }
        RequestStatus::Errored if r.start.is_some() => {
            if r.first_content.is_none() {
                set.record(class, Metric::TtftWithIncomplete, elapsed);
            }
            if r.first_token.is_none() {
                set.record(class, Metric::TtftAnyWithIncomplete, elapsed);
            }
        }
        RequestStatus::Errored => {} // never sent: the client failed, not the server
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// The status groups distributions are split by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusClass {
    /// Completed requests.
    Successful,
    /// Errored requests.
    Errored,
    /// Requests cancelled before they finished.
    Incomplete,
}

impl StatusClass {
    /// Every class, in report order.
    pub const ALL: [StatusClass; 3] = [
        StatusClass::Successful,
        StatusClass::Errored,
        StatusClass::Incomplete,
    ];

    /// The class a request status falls in.
    pub fn of(status: RequestStatus) -> Self {
        match status {
            RequestStatus::Completed => StatusClass::Successful,
            RequestStatus::Errored => StatusClass::Errored,
            RequestStatus::Cancelled => StatusClass::Incomplete,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Errors of histogram operations.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Two histograms could not be added.
    #[error("merging histograms: {0:?}")]
    Merge(hdrhistogram::AdditionError),
    /// A histogram could not be encoded.
    #[error("encoding a histogram: {0:?}")]
    Encode(hdrhistogram::serialization::V2SerializeError),
    /// A histogram could not be decoded.
    #[error("decoding a histogram: {0:?}")]
    Decode(hdrhistogram::serialization::DeserializeError),
    /// A histogram could not be compressed.
    #[error("compressing a histogram: {0}")]
    Compress(String),
    /// A histogram could not be created.
    #[error("creating a histogram: {0:?}")]
    Create(hdrhistogram::CreationError),
}

fn new_histogram() -> Histogram<u64> {
    // Auto-resizing from the smallest bounds; creation with these constants cannot fail.
    let mut h = Histogram::new(SIGNIFICANT_DIGITS).unwrap_or_else(|_| unreachable_histogram());
    h.auto(true);
    h
}

#[cold]
fn unreachable_histogram() -> Histogram<u64> {
    // 3 significant digits is always a valid precision; keep a fallback anyway so no
    // panic path exists.
    Histogram::new_with_max(u64::MAX / 2, 2).unwrap_or_else(|_| std::process::abort())
}

/// Histograms per status class and metric. Only histograms that were recorded into exist.
#[derive(Clone, Debug, Default)]
pub struct MetricSet {
    hists: [[Option<Histogram<u64>>; Metric::ALL.len()]; StatusClass::ALL.len()],
}

impl MetricSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    fn slot(&mut self, class: StatusClass, metric: Metric) -> &mut Histogram<u64> {
        self.hists[class.index()][metric.index()].get_or_insert_with(new_histogram)
    }

    /// Records one value (µs for durations, a count for tokens).
    pub fn record(&mut self, class: StatusClass, metric: Metric, value: u64) {
        let h = self.slot(class, metric);
        // `record` grows an auto-resizing histogram; `saturating_record` would clamp.
        if h.record(value).is_err() {
            h.saturating_record(value);
        }
    }

    /// Records `value` `count` times.
    pub fn record_n(&mut self, class: StatusClass, metric: Metric, value: u64, count: u64) {
        // Auto-resize means a record can only fail on count overflow; saturate instead.
        let h = self.slot(class, metric);
        if h.record_n(value, count).is_err() {
            h.saturating_record(value);
        }
    }

    /// The histogram of one metric for one class, if anything was recorded.
    pub fn get(&self, class: StatusClass, metric: Metric) -> Option<&Histogram<u64>> {
        self.hists[class.index()][metric.index()].as_ref()
    }

    /// Adds a whole histogram (e.g. one decoded from a report) into one class and metric.
    pub fn add(
        &mut self,
        class: StatusClass,
        metric: Metric,
        h: &Histogram<u64>,
    ) -> Result<(), MetricsError> {
        self.slot(class, metric).add(h).map_err(MetricsError::Merge)
    }

    /// The histogram of one metric over every class.
    pub fn total(&self, metric: Metric) -> Histogram<u64> {
        let mut total = new_histogram();
        for class in StatusClass::ALL {
            if let Some(h) = self.get(class, metric) {
                // Both auto-resize with the same precision: adding cannot fail.
                let _ = total.add(h);
            }
        }
        total
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.hists
            .iter()
            .flatten()
            .all(|h| h.as_ref().is_none_or(|h| h.is_empty()))
    }

    /// Adds every histogram of `other` into `self`.
    pub fn merge(&mut self, other: &MetricSet) -> Result<(), MetricsError> {
        for class in StatusClass::ALL {
            for metric in Metric::ALL {
                if let Some(h) = other.get(class, metric) {
                    self.slot(class, metric)
                        .add(h)
                        .map_err(MetricsError::Merge)?;
                }
            }
        }
        Ok(())
    }

    /// Empties every histogram, keeping their memory.
    pub fn reset(&mut self) {
        for h in self.hists.iter_mut().flatten().flatten() {
            h.reset();
        }
    }

    /// Encodes the non-empty histograms for another process.
    pub fn encode(&self) -> Result<EncodedMetrics, MetricsError> {
        let mut serializer = V2Serializer::new();
        let mut entries = Vec::new();
        for class in StatusClass::ALL {
            for metric in Metric::ALL {
                if let Some(h) = self.get(class, metric).filter(|h| !h.is_empty()) {
                    let mut v2 = Vec::new();
                    serializer
                        .serialize(h, &mut v2)
                        .map_err(MetricsError::Encode)?;
                    entries.push(EncodedHistogram { class, metric, v2 });
                }
            }
        }
        Ok(EncodedMetrics { entries })
    }

    /// Adds encoded histograms into `self`.
    pub fn merge_encoded(&mut self, encoded: &EncodedMetrics) -> Result<(), MetricsError> {
        let mut deserializer = Deserializer::new();
        for entry in &encoded.entries {
            let h: Histogram<u64> = deserializer
                .deserialize(&mut entry.v2.as_slice())
                .map_err(MetricsError::Decode)?;
            self.slot(entry.class, entry.metric)
                .add(&h)
                .map_err(MetricsError::Merge)?;
        }
        Ok(())
    }
}

/// Encodes one histogram compactly for storage (V2 with deflate), e.g. in a report.
pub fn encode_compressed(h: &Histogram<u64>) -> Result<Vec<u8>, MetricsError> {
    let mut out = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut out)
        .map_err(|e| MetricsError::Compress(format!("{e:?}")))?;
    Ok(out)
}

/// Decodes a histogram written by [`encode_compressed`] (or plain V2).
pub fn decode_histogram(bytes: &[u8]) -> Result<Histogram<u64>, MetricsError> {
    let mut h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(MetricsError::Decode)?;
    h.auto(true);
    Ok(h)
}

/// One histogram in the V2 encoding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncodedHistogram {
    /// Its status class.
    pub class: StatusClass,
    /// Its metric.
    pub metric: Metric,
    /// HdrHistogram V2 bytes.
    #[serde(with = "serde_bytes")]
    pub v2: Vec<u8>,
}

/// The non-empty histograms of a [`MetricSet`], ready to cross a process boundary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncodedMetrics {
    /// One entry per non-empty histogram.
    pub entries: Vec<EncodedHistogram>,
}

/// Percentiles reported for every distribution.
pub const PERCENTILES: [(&str, f64); 11] = [
    ("p0_1", 0.1),
    ("p1", 1.0),
    ("p5", 5.0),
    ("p10", 10.0),
    ("p25", 25.0),
    ("p50", 50.0),
    ("p75", 75.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p99_9", 99.9),
];

/// Summary statistics of one distribution, in report units (ms for durations).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Number of values.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub std: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Percentiles keyed `p0_1` … `p99_9`.
    pub percentiles: Percentiles,
}

/// The percentile set of a [`Distribution`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Percentiles {
    pub p0_1: f64,
    pub p1: f64,
    pub p5: f64,
    pub p10: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p99_9: f64,
}

impl Percentiles {
    /// The value for a key of [`PERCENTILES`].
    pub fn get(&self, key: &str) -> Option<f64> {
        Some(match key {
            "p0_1" => self.p0_1,
            "p1" => self.p1,
            "p5" => self.p5,
            "p10" => self.p10,
            "p25" => self.p25,
            "p50" => self.p50,
            "p75" => self.p75,
            "p90" => self.p90,
            "p95" => self.p95,
            "p99" => self.p99,
            "p99_9" => self.p99_9,
            _ => return None,
        })
    }
}

impl Distribution {
    /// Summarises a histogram; `scale` divides every value (1000 turns µs into ms).
    pub fn from_histogram(h: &Histogram<u64>, scale: f64) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let q = |p: f64| h.value_at_quantile(p / 100.0) as f64 / scale;
        Self {
            count: h.len(),
            mean: h.mean() / scale,
            std: h.stdev() / scale,
            min: h.min() as f64 / scale,
            max: h.max() as f64 / scale,
            percentiles: Percentiles {
                p0_1: q(0.1),
                p1: q(1.0),
                p5: q(5.0),
                p10: q(10.0),
                p25: q(25.0),
                p50: q(50.0),
                p75: q(75.0),
                p90: q(90.0),
                p95: q(95.0),
                p99: q(99.0),
                p99_9: q(99.9),
            },
        }
    }

    /// Summarises one metric's histogram in report units.
    pub fn of_metric(metric: Metric, h: &Histogram<u64>) -> Self {
        Self::from_histogram(h, if metric.is_duration() { 1000.0 } else { 1.0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_histograms_merge_losslessly() {
        let mut a = MetricSet::new();
        let mut b = MetricSet::new();
        for v in 1..=1000u64 {
            a.record(StatusClass::Successful, Metric::Ttft, v * 100);
            b.record(StatusClass::Successful, Metric::Ttft, v * 100 + 50_000);
        }
        b.record(StatusClass::Errored, Metric::RequestLatency, 7);

        let mut direct = a.clone();
        direct.merge(&b).expect("merge");
        let mut via_wire = a.clone();
        let wire = b.encode().expect("encode");
        assert_eq!(wire.entries.len(), 2, "only non-empty histograms travel");
        via_wire.merge_encoded(&wire).expect("merge encoded");

        for class in StatusClass::ALL {
            for metric in Metric::ALL {
                assert_eq!(
                    direct.get(class, metric),
                    via_wire.get(class, metric),
                    "{class:?} {metric:?}"
                );
            }
        }
        let ttft = via_wire
            .get(StatusClass::Successful, Metric::Ttft)
            .expect("ttft");
        assert_eq!(ttft.len(), 2000);
    }

    #[test]
    fn compressed_histograms_round_trip() {
        let mut set = MetricSet::new();
        for v in 0..5000u64 {
            set.record(
                StatusClass::Successful,
                Metric::Itl,
                3_000 + (v * 7919) % 4_000,
            );
        }
        let h = set.get(StatusClass::Successful, Metric::Itl).expect("itl");
        let bytes = encode_compressed(h).expect("encode");
        assert!(bytes.len() < 8192, "{}", bytes.len());
        let back = decode_histogram(&bytes).expect("decode");
        assert_eq!(&back, h);
    }

    #[test]
    fn a_thousand_values_encode_small() {
        let mut set = MetricSet::new();
        for v in 0..1000u64 {
            set.record(StatusClass::Successful, Metric::Itl, 4_000 + v * 7);
        }
        let bytes: usize = set
            .encode()
            .expect("encode")
            .entries
            .iter()
            .map(|e| e.v2.len())
            .sum();
        assert!(bytes < 4096, "{bytes} bytes");
    }

    #[test]
    fn distribution_is_in_report_units() {
        let mut set = MetricSet::new();
        for ms in 1..=100u64 {
            set.record(StatusClass::Successful, Metric::Ttft, ms * 1000);
        }
        let h = set
            .get(StatusClass::Successful, Metric::Ttft)
            .expect("ttft");
        let d = Distribution::of_metric(Metric::Ttft, h);
        assert_eq!(d.count, 100);
        assert!((d.mean - 50.5).abs() < 0.1, "{}", d.mean);
        assert!((d.percentiles.p50 - 50.0).abs() < 0.1);
        assert!((d.max - 100.0).abs() < 0.1);
        assert_eq!(d.percentiles.get("p99"), Some(d.percentiles.p99));
    }

    #[test]
    fn total_sums_the_classes_and_reset_empties() {
        let mut set = MetricSet::new();
        set.record(StatusClass::Successful, Metric::OutputTokens, 10);
        set.record_n(StatusClass::Errored, Metric::OutputTokens, 3, 4);
        assert_eq!(set.total(Metric::OutputTokens).len(), 5);
        assert!(!set.is_empty());
        set.reset();
        assert!(set.is_empty());
    }
}

/// Property tests, apart from the unit tests above.
#[cfg(test)]
mod proptests {
    use super::{Metric, MetricSet, StatusClass};
    use proptest::prelude::*;

    /// Values recorded into a set: (class, metric, value, count).
    type Recording = Vec<(usize, usize, u64, u64)>;

    fn recording() -> impl Strategy<Value = Recording> {
        // Values over many magnitudes (µs to hours) so merging histograms of different
        // auto-resized ranges is exercised.
        let value = prop_oneof![0u64..1_000, 0u64..1_000_000, 0u64..10_000_000_000];
        prop::collection::vec(
            (
                0..StatusClass::ALL.len(),
                0..Metric::ALL.len(),
                value,
                1u64..5,
            ),
            0..40,
        )
    }

    fn set(rec: &Recording) -> MetricSet {
        let mut s = MetricSet::new();
        for &(class, metric, value, count) in rec {
            s.record_n(StatusClass::ALL[class], Metric::ALL[metric], value, count);
        }
        s
    }

    /// One histogram's contents: class, metric, (bucket, count) pairs, min, max.
    type Contents = (usize, usize, Vec<(u64, u64)>, u64, u64);

    /// What a set holds, independent of how its histograms were sized: per class and
    /// metric, every recorded bucket with its count, the min and the max.
    fn contents(s: &MetricSet) -> Vec<Contents> {
        let mut out = Vec::new();
        for (c, class) in StatusClass::ALL.into_iter().enumerate() {
            for (m, metric) in Metric::ALL.into_iter().enumerate() {
                let Some(h) = s.get(class, metric).filter(|h| !h.is_empty()) else {
                    continue;
                };
                let buckets = h
                    .iter_recorded()
                    .map(|v| (v.value_iterated_to(), v.count_at_value()))
                    .collect();
                out.push((c, m, buckets, h.min(), h.max()));
            }
        }
        out
    }

    fn merged(a: &MetricSet, b: &MetricSet) -> MetricSet {
        let mut out = a.clone();
        out.merge(b).expect("merge");
        out
    }

    proptest! {
        // Each case builds and compares a dozen sets of 39 histograms: slow in debug.
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// a + b = b + a, and (a + b) + c = a + (b + c), through the wire encoding too.
        #[test]
        fn histogram_merge_is_commutative_and_associative(
            ra in recording(),
            rb in recording(),
            rc in recording(),
        ) {
            let (a, b, c) = (set(&ra), set(&rb), set(&rc));
            prop_assert_eq!(contents(&merged(&a, &b)), contents(&merged(&b, &a)));
            let left = merged(&merged(&a, &b), &c);
            let right = merged(&a, &merged(&b, &c));
            prop_assert_eq!(contents(&left), contents(&right));
            // Merging what another process sent gives the same as merging in place.
            let mut via_wire = a.clone();
            via_wire.merge_encoded(&b.encode().expect("encode")).expect("merge");
            prop_assert_eq!(contents(&via_wire), contents(&merged(&a, &b)));
            // And the union of all recordings, recorded into one set.
            let all: Recording = ra.iter().chain(&rb).chain(&rc).copied().collect();
            prop_assert_eq!(contents(&left), contents(&set(&all)));
        }
    }
}
