//! The result of one benchmark, aggregated from `WorkerGroupState`.

use crate::constraints::{Limits, StopReason};
pub use crate::data::MeasuredCounts;
use crate::data::{Goodput, SloVerdict};
use crate::state::{Audit, Counts, TokenSources, WorkerGroupState};
use crate::strategy::{Strategy, StrategySettings};
use crate::timeseries::TimePoint;
use llmsurge_proto::RequestFormat;
use llmsurge_proto::{
    ClockAnchor, Distribution, MeasureWindow, Metric, MetricSet, MonoNanos, StatusClass,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How one worker ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerOutcome {
    /// The worker's index.
    pub id: u32,
    /// Its process id.
    pub pid: u32,
    /// `finished`, or why it did not (`died: signal 9`, …).
    pub outcome: String,
    /// Whether it died before finishing.
    pub died: bool,
}

/// The measured window (warm-up and cool-down excluded), in Unix seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// First measured request's start.
    pub start_time: f64,
    /// Last measured request's end.
    pub end_time: f64,
    /// Their difference, in seconds.
    pub duration_s: f64,
}

/// One error kind in the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorEntry {
    /// Stable key (`http_500`, `timeout`, `worker_died`, …).
    pub kind: String,
    /// Requests that failed this way.
    pub count: u64,
    /// A few of their messages.
    pub samples: Vec<String>,
}

/// A metric's distributions split by status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusDistributions {
    /// Completed requests.
    pub successful: Distribution,
    /// Errored requests.
    pub errored: Distribution,
    /// Cancelled requests.
    pub incomplete: Distribution,
    /// All of them.
    pub total: Distribution,
}

/// Throughput over the measured window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Output tokens of completed requests per second. Absent (not zero) for a format
    /// without output (embeddings, rerank, score).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_s: Option<f64>,
    /// Prompt plus output tokens of completed requests per second.
    pub total_tokens_per_s: f64,
    /// Mean requests in flight over the measured window (their summed time in flight
    /// over its duration).
    pub concurrency_mean: f64,
    /// Most requests in flight at once (sampled every 10 ms; at least
    /// `concurrency_mean` rounded up, which short requests between samples make exact).
    pub concurrency_peak: u64,
    /// Inputs of completed requests per second: texts embedded (embeddings) or documents
    /// ranked (rerank, score). Absent for the generation formats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_per_s: Option<f64>,
    /// Input (prompt) tokens of completed requests per second, for embeddings, rerank
    /// and score. Absent for the generation formats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_per_s: Option<f64>,
    /// Images sent per second by completed requests (multimodal chat); absent without
    /// images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images_per_s: Option<f64>,
    /// Seconds of audio sent per wall-clock second by completed requests (chat
    /// `input_audio`, transcription); absent without audio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_seconds_per_s: Option<f64>,
}

/// Evidence that the client was not the bottleneck (or that it was).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientHealth {
    /// Median dispatch lag, ms.
    pub dispatch_lag_p50_ms: f64,
    /// 99th percentile dispatch lag, ms.
    pub dispatch_lag_p99_ms: f64,
    /// The threshold the p99 is held to, ms.
    pub dispatch_lag_threshold_ms: f64,
    /// Requests held by a cap the user set (the concurrency cap, the prefill cap): sent
    /// later than their intended instant, or never, for that wait. Every request, all
    /// windows (as `requests`).
    pub late_requests: u64,
    /// CPU time of the worker processes (user + system) from t0 to their exit, seconds;
    /// start-up (spawn, data and tokenizer load) is left out.
    pub worker_cpu_s: f64,
    /// Worker CPU time over (duration × workers): near 1 means the workers were saturated.
    pub worker_cpu_utilization: f64,
    /// Stream strategies: a stream's previous request end → its next send, ms (requests
    /// that waited for the concurrency cap left out). What dispatch lag cannot show there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_gap: Option<Distribution>,
    /// How late the workers' runtimes ran a probe timer due every 10 ms, ms: how long a
    /// response chunk can wait before it is timestamped. Includes up to 1 ms of timer
    /// granularity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_delay: Option<Distribution>,
    /// The connections the workers opened in the measured window and how long each took
    /// (TCP connect, TLS handshake): what a TLS handshake costs, apart from TTFT. Absent
    /// when none was opened in it (and from reports older than it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<Connections>,
    /// `--max-prefill-concurrency`: how long requests waited for the cap, apart from
    /// the dispatch lag (which leaves these waits out). Absent without the cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_wait: Option<crate::prefill::PrefillWaits>,
    /// Client queue time of the measured requests per cause: each cap the user set, and
    /// a busy client (the dispatch lag). Absent from reports older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<crate::intent::ClientQueue>,
    /// The client was the bottleneck: these numbers describe the client, not the server.
    pub bottleneck: bool,
    /// What the checks found, one sentence each.
    pub warnings: Vec<String>,
}

/// The connections of a benchmark's measured window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Connections {
    /// Connections opened (TCP connected and, on `https://`, TLS handshake done).
    pub opened: u64,
    /// Measured requests that opened none, sent on a connection already open: requests
    /// (completed, errored, cancelled) − opened, at least 0. On HTTP/2 every request
    /// but the first of a connection counts.
    pub reused: u64,
    /// Time to open each connection, ms: TCP connect, plus the TLS handshake on
    /// `https://`.
    pub connect: Distribution,
}

impl Connections {
    /// The connections of `set`'s [`Metric::Connect`] histogram, for `requests` measured
    /// requests; `None` when none was opened.
    pub fn of(set: &MetricSet, requests: u64) -> Option<Connections> {
        let h = set
            .get(StatusClass::Successful, Metric::Connect)
            .filter(|h| !h.is_empty())?;
        let opened = h.len();
        Some(Connections {
            opened,
            reused: requests.saturating_sub(opened),
            connect: Distribution::of_metric(Metric::Connect, h),
        })
    }
}

/// One shard's part of a merged benchmark.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardHealth {
    /// The shard's index (`K` of `--shard K/N`).
    pub index: u32,
    /// N of `--shard K/N`.
    pub count: u32,
    /// The host it ran on.
    pub host: String,
    /// Its measured requests that completed.
    pub completed: u64,
    /// Its client health, as its own report had it.
    pub client: ClientHealth,
}

/// Throughput of one model's requests, over the benchmark's measured window (so the
/// models' rates add up to the whole).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelThroughput {
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Output tokens of completed requests per second; absent for a format without
    /// output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_s: Option<f64>,
    /// Prompt plus output tokens of completed requests per second.
    pub total_tokens_per_s: f64,
    /// Mean of this model's requests in flight over the measured window.
    pub concurrency_mean: f64,
}

/// One model's part of a benchmark under a `--lora` split: the same breakdown as the
/// whole, for the requests that named this model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelResult {
    /// The model name.
    pub model: String,
    /// Its configured share of the requests.
    pub weight: f64,
    /// Its requests, every window (`in_flight` is always 0).
    pub requests: Counts,
    /// Its requests of the measured window.
    pub measured_requests: MeasuredCounts,
    /// Output tokens of its completed measured requests.
    pub output_tokens: u64,
    /// Prompt tokens of its completed measured requests.
    pub prompt_tokens: u64,
    /// Its requests' summed time in flight, seconds (for merging `concurrency_mean`).
    pub busy_s: f64,
    /// Throughput over the benchmark's measured window.
    pub throughput: ModelThroughput,
    /// Its completed measured requests that met `--goodput`, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub good_requests: Option<u64>,
    /// Its errors per kind, as the benchmark's `errors`.
    #[serde(default)]
    pub errors: Vec<ErrorEntry>,
    /// Distributions of its measured requests, per metric, as the benchmark's `metrics`.
    pub metrics: BTreeMap<String, StatusDistributions>,
    /// Its histograms, as the benchmark's `class_histograms` (for `benchmark merge`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub class_histograms: BTreeMap<String, String>,
}

impl ModelResult {
    /// Sets `throughput` from the totals over a measured window of `duration_s`.
    pub fn set_throughput(&mut self, duration_s: f64) {
        let per_s = |n: f64| {
            if duration_s > 0.0 {
                n / duration_s
            } else {
                0.0
            }
        };
        self.throughput = ModelThroughput {
            requests_per_s: per_s(self.measured_requests.completed as f64),
            output_tokens_per_s: Some(per_s(self.output_tokens as f64)),
            total_tokens_per_s: per_s((self.output_tokens + self.prompt_tokens) as f64),
            concurrency_mean: per_s(self.busy_s),
        };
    }

    /// Replaces `metrics` and `class_histograms` by those of `set`.
    pub fn set_distributions(&mut self, set: &MetricSet) {
        self.metrics = distributions(set);
        self.class_histograms = encode_class_histograms(set);
    }

    /// Its `class_histograms`, decoded into one set.
    pub fn metric_set(&self) -> Result<MetricSet, HistogramError> {
        decode_class_histograms(&self.class_histograms)
    }
}

fn model_results(state: &WorkerGroupState, duration_s: f64) -> Vec<ModelResult> {
    state
        .models
        .iter()
        .map(|m| {
            let t = &m.measured;
            let mut r = ModelResult {
                model: m.name.clone(),
                weight: m.weight,
                requests: m.counts,
                measured_requests: MeasuredCounts {
                    completed: t.completed,
                    errored: t.errored,
                    cancelled: t.cancelled,
                },
                output_tokens: t.output_tokens,
                prompt_tokens: t.prompt_tokens,
                busy_s: t.busy_ns as f64 / 1e9,
                throughput: ModelThroughput::default(),
                good_requests: state.goodput.map(|_| m.good_requests),
                errors: m
                    .errors
                    .iter()
                    .map(|(kind, t)| ErrorEntry {
                        kind: kind.key(),
                        count: t.count,
                        samples: t.samples.clone(),
                    })
                    .collect(),
                metrics: BTreeMap::new(),
                class_histograms: BTreeMap::new(),
            };
            r.set_throughput(duration_s);
            r.set_distributions(&m.metrics);
            r
        })
        .collect()
}

/// One benchmark of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkResult {
    /// Position in the run, from 0.
    pub index: u32,
    /// The load pattern.
    pub strategy: Strategy,
    /// Ramp-up and burstiness.
    pub settings: StrategySettings,
    /// The limits it ran under.
    pub limits: Limits,
    /// Group start (t0), Unix seconds.
    pub start_time: f64,
    /// Last event, Unix seconds.
    pub end_time: f64,
    /// `end_time - start_time`.
    pub duration_s: f64,
    /// The measured window.
    pub measured_window: Window,
    /// The configured warm-up and cool-down, as slots and seconds from t0.
    pub window: MeasureWindow,
    /// Why it ended.
    pub stop_reason: Option<StopReason>,
    /// Seconds from t0 at which a stop constraint fired, if one did.
    pub stop_time_s: Option<f64>,
    /// Ended by Ctrl-C or SIGTERM: the results are partial.
    pub interrupted: bool,
    /// All requests, every window.
    pub requests: Counts,
    /// Requests of the measured window.
    pub measured_requests: MeasuredCounts,
    /// Errors per kind.
    pub errors: Vec<ErrorEntry>,
    /// Distributions of the measured window, per metric (durations in ms).
    pub metrics: BTreeMap<String, StatusDistributions>,
    /// Throughput of the measured window.
    pub throughput: Throughput,
    /// Requests meeting the `--goodput` thresholds, when set.
    pub goodput: Option<Goodput>,
    /// The `--slo` verdict, when set.
    pub slo: Option<SloVerdict>,
    /// Where output token counts came from; absent for a format without output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sources: Option<TokenSources>,
    /// Client fidelity.
    pub client: ClientHealth,
    /// Per-second series.
    pub timeseries: Vec<TimePoint>,
    /// Latency histograms of successful measured requests, in µs: HdrHistogram V2 with
    /// deflate, base64. They let reports merge losslessly and comparisons bootstrap.
    #[serde(default)]
    pub histograms: BTreeMap<String, String>,
    /// Every histogram of the measured window, of every status class and metric (client
    /// probes included), keyed `<class>.<metric>` (`errored.ttft`), encoded as
    /// `histograms`: what `benchmark merge` needs to recompute every distribution exactly.
    /// Absent from reports older than it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub class_histograms: BTreeMap<String, String>,
    /// A merged report only: each shard's index, host and client health, so one slow
    /// shard shows. Empty (and left out) elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardHealth>,
    /// The workers.
    pub workers: Vec<WorkerOutcome>,
    /// The server stopped answering mid-run: every measured request sent from an instant
    /// on errored ([`crate::error_tail`] holds the rule); the run is invalid. Absent otherwise (and from
    /// reports older than the rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_lost: Option<crate::error_tail::ServerLost>,
    /// The run's latest success, of this benchmark or an earlier one: the next
    /// benchmark's server-lost rule starts from it. The run's own books, not in reports.
    #[serde(skip)]
    pub answered: Option<crate::error_tail::Answered>,
    /// The end-of-benchmark check of the request books. Absent from reports older than
    /// it (read as unset) and left out when unset, so those reports round-trip as they were.
    #[serde(default, skip_serializing_if = "Audit::is_unset")]
    pub audit: Audit,
    /// The request rate a sweep or capacity search took from this benchmark, and how it
    /// was estimated (set by the profile; absent elsewhere and in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_estimate: Option<crate::data::RateEstimate>,
    /// The server's own metrics scraped during the benchmark (`--server-metrics`); absent
    /// when scraping was off and in reports older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<crate::server_metrics::ServerMetrics>,
    /// `--reset-cache`: the reset made before this benchmark and the server's answers;
    /// absent when none was asked for (and for a run's first benchmark).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_reset: Option<crate::cache_reset::CacheReset>,
    /// `--gpu-metrics`: power, energy per output token, utilisation and memory over the
    /// measured window, per GPU and summed; absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<crate::gpu::GpuMetrics>,
    /// `--lora`: the breakdown per model of the split, in its order. Empty (and left
    /// out) without a split.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelResult>,
    /// Multi-turn sessions: outcomes, sessions/s and per-turn-index latencies. Absent
    /// without sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<crate::sessions::SessionResult>,
    /// Agent traces: per trace, its duration and critical path (server wait against
    /// recorded tool time). Absent without agent traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_traces: Option<crate::agent_traces::AgentTraceResult>,
    /// `--repeat`: the run (from 0) of the repeated plan this benchmark belongs to; absent
    /// without repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u32>,
    /// `--until-precise`: each figure's 95% interval and the precision reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<crate::precision::Precision>,
    /// The headline figures over the steady-state window (the plateau of in-flight
    /// requests); absent when the series has no plateau and in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_state: Option<crate::steady::SteadyState>,
    /// The client's `--max-concurrency` cap (requests in flight, every shard together),
    /// when set: the kept-up rule predicts how many requests wait for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u64>,
    /// The wait from intent to the first token of the earlier half of the arrivals
    /// against the later half's (see `intent_drift`); absent with too few arrivals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_drift: Option<crate::intent_drift::IntentDrift>,
    /// The measured arrivals the stop cut before their first token, against the longest
    /// answered wait (see `intent_drift`); absent when the stop cut none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unanswered: Option<crate::intent_drift::Unanswered>,
    /// Output lengths asked against received over the completed measured requests, and
    /// their finish reasons; absent without a completed request (and in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_lengths: Option<crate::output_lengths::OutputLengths>,
}

/// Inputs of [`build`] besides the state.
#[derive(Debug)]
pub struct BuildContext<'a> {
    /// Position in the run.
    pub index: u32,
    /// The strategy.
    pub strategy: Strategy,
    /// Its settings.
    pub settings: StrategySettings,
    /// Its limits.
    pub limits: Limits,
    /// Converts monotonic times to wall time.
    pub anchor: &'a ClockAnchor,
    /// Group start.
    pub t0: MonoNanos,
    /// Last event.
    pub end: MonoNanos,
    /// The configured window.
    pub window: MeasureWindow,
    /// Why it stopped.
    pub stop_reason: Option<StopReason>,
    /// When a stop constraint fired.
    pub stop_time: Option<MonoNanos>,
    /// Interrupted by the user.
    pub interrupted: bool,
    /// Peak sampled concurrency.
    pub concurrency_peak: u64,
    /// Worker CPU seconds.
    pub worker_cpu_s: f64,
    /// Dispatch-lag p99 threshold, ms.
    pub dispatch_lag_threshold_ms: f64,
    /// The workers.
    pub workers: Vec<WorkerOutcome>,
    /// The latest success of an earlier benchmark of the run (or of an earlier
    /// `--repeat` run), with that benchmark's error share, for the server-lost rule.
    pub answered_before: Option<crate::error_tail::Answered>,
}

/// Aggregates the state into a result.
pub fn build(state: &WorkerGroupState, ctx: BuildContext<'_>) -> BenchmarkResult {
    let m = &state.measured;
    let window = match (m.first_start, m.last_end) {
        (Some(s), Some(e)) => Window {
            start_time: ctx.anchor.unix_seconds(s),
            end_time: ctx.anchor.unix_seconds(e),
            duration_s: e.since(s).as_secs_f64(),
        },
        _ => Window::default(),
    };
    let per_s = |n: u64| {
        if window.duration_s > 0.0 {
            n as f64 / window.duration_s
        } else {
            0.0
        }
    };
    let timeseries = state.timeseries.points(ctx.end);
    // Over the measured window only: warm-up and cool-down seconds would dilute it.
    let concurrency_mean = if window.duration_s > 0.0 {
        m.busy_ns as f64 / 1e9 / window.duration_s
    } else {
        0.0
    };

    let metrics = distributions(&state.metrics);

    let duration_s = ctx.end.since(ctx.t0).as_secs_f64();
    let client = client_health(state, &ctx, &metrics, duration_s);
    // A benchmark with timeouts held requests: a server overloaded or hung, not one
    // known gone. With no success of its own, an earlier benchmark's does not open its
    // tail, so a search bisects on rather than call an overloaded probe lost.
    let timed_out = state
        .errors
        .contains_key(&llmsurge_proto::ErrorKind::Timeout);
    let server_lost = state.error_tail.server_lost(
        ctx.t0,
        m.last_end,
        (m.completed, m.errored),
        ctx.stop_reason.as_ref(),
        ctx.answered_before.filter(|_| !timed_out),
    );
    let c = &state.counts;
    let answered = state
        .last_success
        .map(|sent| crate::error_tail::Answered {
            sent,
            error_share: state.error_tail.share_before(c.completed, c.errored),
        })
        .or(ctx.answered_before);
    BenchmarkResult {
        index: ctx.index,
        strategy: ctx.strategy,
        settings: ctx.settings,
        limits: ctx.limits,
        start_time: ctx.anchor.unix_seconds(ctx.t0),
        end_time: ctx.anchor.unix_seconds(ctx.end),
        duration_s,
        measured_window: window,
        window: ctx.window,
        stop_reason: ctx.stop_reason,
        stop_time_s: ctx.stop_time.map(|t| t.since(ctx.t0).as_secs_f64()),
        interrupted: ctx.interrupted,
        requests: state.counts,
        measured_requests: MeasuredCounts {
            completed: m.completed,
            errored: m.errored,
            cancelled: m.cancelled,
        },
        errors: state
            .errors
            .iter()
            .map(|(kind, t)| ErrorEntry {
                kind: kind.key(),
                count: t.count,
                samples: t.samples.clone(),
            })
            .collect(),
        metrics,
        throughput: Throughput {
            requests_per_s: per_s(m.completed),
            output_tokens_per_s: Some(per_s(m.output_tokens)),
            total_tokens_per_s: per_s(m.output_tokens + m.prompt_tokens),
            concurrency_mean,
            // Sampled every 10 ms, the peak can miss requests shorter than that (an
            // instant server's): it is at least the mean, rounded up.
            concurrency_peak: ctx.concurrency_peak.max(concurrency_mean.ceil() as u64),
            inputs_per_s: None,
            images_per_s: None,
            audio_seconds_per_s: None,
            input_tokens_per_s: None,
        },
        goodput: state.goodput.map(|spec| {
            let measured = MeasuredCounts {
                completed: m.completed,
                errored: m.errored,
                cancelled: m.cancelled,
            };
            Goodput::new(
                spec,
                state.good_requests,
                &measured,
                state.unfinished_not_good,
                state.planned_given_up,
                window.duration_s,
            )
        }),
        slo: None,
        token_sources: Some(state.token_sources),
        client,
        timeseries,
        histograms: encode_histograms(&state.metrics),
        class_histograms: encode_class_histograms(&state.metrics),
        shards: Vec::new(),
        workers: ctx.workers,
        server_lost,
        answered,
        audit: Audit::default(),
        rate_estimate: None,
        server_metrics: None,
        cache_reset: None,
        gpu: None,
        models: model_results(state, window.duration_s),
        sessions: (!state.sessions.is_empty()).then(|| {
            let rate_means = match ctx.strategy {
                Strategy::Constant { .. } | Strategy::Poisson { .. } => {
                    crate::sessions::RateMeans::SessionsPerSecond
                }
                _ => crate::sessions::RateMeans::Users,
            };
            // Sessions span the whole run (think times included), not only the
            // requests' measured window.
            state.sessions.result(rate_means, duration_s)
        }),
        agent_traces: (!state.agent_traces.is_empty()).then(|| state.agent_traces.result()),
        run: None,
        precision: None,
        steady_state: None,
        max_concurrency: None,
        intent_drift: state.intent_drift.drift(),
        unanswered: state.intent_drift.unanswered(),
        output_lengths: state.output_lengths.result(),
    }
}

/// Metrics of generated output: absent from the report of a format that generates none.
pub const GENERATION_METRICS: [&str; 7] = [
    "ttft",
    "ttft_any",
    "ttft_with_incomplete",
    "ttft_any_with_incomplete",
    "itl",
    "tpot",
    "output_tokens",
];

/// Fits a result to its request format: a format without output (embeddings, rerank,
/// score) has no TTFT, ITL, TPOT or output tokens, so those are removed (absent, not
/// zero), and gets its inputs per second (`inputs_per_request` texts or documents per
/// request) and input tokens per second instead.
pub fn fit_to_format(r: &mut BenchmarkResult, format: RequestFormat, inputs_per_request: u32) {
    if format.generates() {
        return;
    }
    let t = &mut r.throughput;
    t.inputs_per_s = Some(t.requests_per_s * f64::from(inputs_per_request.max(1)));
    t.input_tokens_per_s = Some(t.total_tokens_per_s - t.output_tokens_per_s.unwrap_or(0.0));
    r.drop_generation_metrics();
}

/// Metrics only a streamed response has: a whole body (`--stream false`) shows the
/// client no token arrive, so it has no inter-token gaps and no time per output token.
pub const STREAM_METRICS: [&str; 2] = ["itl", "tpot"];

/// Fits a result to how responses came: without streaming, ITL and TPOT are removed
/// (absent, not zero: the client could not see them).
pub fn fit_to_stream(r: &mut BenchmarkResult, stream: bool) {
    if !stream {
        r.drop_metrics(&STREAM_METRICS);
    }
}

/// Adds the media rates of a multimodal or transcription run: `images` and
/// `audio_seconds` per request times the completed request rate.
pub fn add_media_rates(r: &mut BenchmarkResult, media: &llmsurge_proto::MediaSpec) {
    let t = &mut r.throughput;
    if media.images > 0 {
        t.images_per_s = Some(t.requests_per_s * f64::from(media.images));
    }
    if media.audio_seconds > 0.0 {
        t.audio_seconds_per_s = Some(t.requests_per_s * media.audio_seconds);
    }
}

/// The distributions of every reported metric, per status (the report's `metrics`).
pub fn distributions(set: &MetricSet) -> BTreeMap<String, StatusDistributions> {
    Metric::REPORTED
        .iter()
        .chain(&Metric::FROM_INTENT)
        .map(|&metric| (metric.key().to_string(), status_distributions(set, metric)))
        .collect()
}

/// A metric's distributions per status. A `…_with_incomplete` metric holds what the
/// metric it extends lacks: every value of unfinished requests (exact or a lower bound)
/// and the lower bounds of errored ones without a first token. Its successful and
/// errored parts add the extended metric's values; its total is all three parts.
fn status_distributions(set: &MetricSet, metric: Metric) -> StatusDistributions {
    let base = metric.completed_part().unwrap_or(metric);
    let part = |class| {
        let mut h = set.get(class, metric).cloned();
        if base != metric
            && class != StatusClass::Incomplete
            && let Some(b) = set.get(class, base)
        {
            match &mut h {
                // Both auto-resize with the same precision: adding cannot fail.
                Some(h) => drop(h.add(b)),
                None => h = Some(b.clone()),
            }
        }
        h
    };
    let parts = StatusClass::ALL.map(part);
    let of = |h: &Option<hdrhistogram::Histogram<u64>>| {
        h.as_ref()
            .map(|h| Distribution::of_metric(metric, h))
            .unwrap_or_default()
    };
    let total = if base == metric {
        set.total(metric)
    } else {
        let mut total = set.total(metric);
        total.reset();
        for h in parts.iter().flatten() {
            // Both auto-resize with the same precision: adding cannot fail.
            let _ = total.add(h);
        }
        total
    };
    StatusDistributions {
        successful: of(&parts[0]),
        errored: of(&parts[1]),
        incomplete: of(&parts[2]),
        total: Distribution::of_metric(metric, &total),
    }
}

/// The metrics whose histograms travel in the report.
pub const REPORTED_HISTOGRAMS: [Metric; 6] = [
    Metric::Ttft,
    Metric::TtftAny,
    Metric::Itl,
    Metric::Tpot,
    Metric::RequestLatency,
    Metric::DispatchLag,
];

/// The report's `histograms`: successful requests of [`REPORTED_HISTOGRAMS`].
pub fn encode_histograms(set: &MetricSet) -> BTreeMap<String, String> {
    REPORTED_HISTOGRAMS
        .iter()
        .filter_map(|&metric| {
            let h = set
                .get(StatusClass::Successful, metric)
                .filter(|h| !h.is_empty())?;
            Some((metric.key().to_string(), encode_base64(h)?))
        })
        .collect()
}

/// The report's `class_histograms`: every non-empty histogram of the set.
pub fn encode_class_histograms(set: &MetricSet) -> BTreeMap<String, String> {
    StatusClass::ALL
        .iter()
        .flat_map(|&class| Metric::ALL.iter().map(move |&metric| (class, metric)))
        .filter_map(|(class, metric)| {
            let h = set.get(class, metric).filter(|h| !h.is_empty())?;
            Some((class_key(class, metric), encode_base64(h)?))
        })
        .collect()
}

/// The key of a histogram in `class_histograms`: `<class>.<metric>`.
pub fn class_key(class: StatusClass, metric: Metric) -> String {
    let class = match class {
        StatusClass::Successful => "successful",
        StatusClass::Errored => "errored",
        StatusClass::Incomplete => "incomplete",
    };
    format!("{class}.{}", metric.key())
}

fn encode_base64(h: &hdrhistogram::Histogram<u64>) -> Option<String> {
    use base64::Engine;
    let bytes = llmsurge_proto::encode_compressed(h).ok()?;
    Some(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Why a report's histograms could not be read back.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub struct HistogramError {
    /// The histogram's key.
    pub key: String,
    /// What was wrong with it.
    pub message: String,
}

impl BenchmarkResult {
    /// Decodes the stored histogram of a metric (µs), if the report carries it.
    pub fn histogram(&self, metric_key: &str) -> Option<hdrhistogram::Histogram<u64>> {
        use base64::Engine;
        let b64 = self.histograms.get(metric_key)?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        llmsurge_proto::decode_histogram(&bytes).ok()
    }

    /// Every histogram of `class_histograms`, decoded into one set; an unknown key or an
    /// undecodable histogram is an error naming it.
    pub fn metric_set(&self) -> Result<MetricSet, HistogramError> {
        decode_class_histograms(&self.class_histograms)
    }
}

/// Decodes histograms keyed `<class>.<metric>` into one set; an unknown key or an
/// undecodable histogram is an error naming it.
pub fn decode_class_histograms(
    hists: &BTreeMap<String, String>,
) -> Result<MetricSet, HistogramError> {
    use base64::Engine;
    let mut set = MetricSet::new();
    for (key, b64) in hists {
        let fail = |message: String| HistogramError {
            key: key.clone(),
            message,
        };
        let (class, metric) = StatusClass::ALL
            .iter()
            .flat_map(|&c| Metric::ALL.iter().map(move |&m| (c, m)))
            .find(|&(c, m)| class_key(c, m) == *key)
            .ok_or_else(|| fail("not a <class>.<metric> key".into()))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| fail(e.to_string()))?;
        let h = llmsurge_proto::decode_histogram(&bytes).map_err(|e| fail(e.to_string()))?;
        set.add(class, metric, &h)
            .map_err(|e| fail(e.to_string()))?;
    }
    Ok(set)
}

impl BenchmarkResult {
    /// Removes the metrics of generated output (see [`GENERATION_METRICS`]), and the
    /// other numbers only output has (output tokens/s, overall, per model and per
    /// second; the output token sources): absent, not zero.
    pub fn drop_generation_metrics(&mut self) {
        self.throughput.output_tokens_per_s = None;
        self.token_sources = None;
        self.output_lengths = None;
        for p in &mut self.timeseries {
            p.output_tokens_per_s = None;
        }
        for m in &mut self.models {
            m.throughput.output_tokens_per_s = None;
        }
        self.drop_metrics(&GENERATION_METRICS);
    }

    /// Removes the distributions and histograms of `keys` (metric keys), here and in
    /// every `--lora` model's section: absent, not zero.
    pub fn drop_metrics(&mut self, keys: &[&str]) {
        let dropped = |key: &str| {
            let metric = key.rsplit('.').next().unwrap_or(key);
            keys.contains(&metric)
        };
        self.metrics.retain(|k, _| !dropped(k));
        self.histograms.retain(|k, _| !dropped(k));
        self.class_histograms.retain(|k, _| !dropped(k));
        // A `--lora` split's per-model sections follow the whole.
        for m in &mut self.models {
            m.metrics.retain(|k, _| !dropped(k));
            m.class_histograms.retain(|k, _| !dropped(k));
        }
    }

    /// Whether this benchmark's responses came as whole bodies: it generates output
    /// (it has TTFT) but has no ITL (see [`fit_to_stream`]).
    pub fn unstreamed(&self) -> bool {
        self.metrics.contains_key("ttft") && !self.metrics.contains_key("itl")
    }

    /// Replaces every distribution (`metrics`, `histograms`, `class_histograms`, the
    /// client's dispatch lag, send gap and runtime delay) by those of `set`.
    pub fn set_distributions(&mut self, set: &MetricSet) {
        let unstreamed = self.unstreamed();
        self.metrics = distributions(set);
        self.histograms = encode_histograms(set);
        self.class_histograms = encode_class_histograms(set);
        // A format without output (its inputs throughput says so) stays without them.
        if self.throughput.inputs_per_s.is_some() {
            self.drop_generation_metrics();
        }
        // Nor does a run without streaming get ITL and TPOT back.
        if unstreamed {
            self.drop_metrics(&STREAM_METRICS);
        }
        let lag = self
            .metrics
            .get(Metric::DispatchLag.key())
            .map(|d| d.total.clone())
            .unwrap_or_default();
        self.client.dispatch_lag_p50_ms = lag.percentiles.p50;
        self.client.dispatch_lag_p99_ms = lag.percentiles.p99;
        let probe = |metric| {
            set.get(StatusClass::Successful, metric)
                .filter(|h| !h.is_empty())
                .map(|h| Distribution::of_metric(metric, h))
        };
        self.client.send_gap = probe(Metric::SendGap);
        self.client.runtime_delay = probe(Metric::RuntimeDelay);
        self.client.queue = Some(crate::intent::ClientQueue::of(set));
        let m = &self.measured_requests;
        self.client.connections = Connections::of(set, m.completed + m.errored + m.cancelled);
    }
}

fn client_health(
    state: &WorkerGroupState,
    ctx: &BuildContext<'_>,
    metrics: &BTreeMap<String, StatusDistributions>,
    duration_s: f64,
) -> ClientHealth {
    let lag = metrics
        .get(Metric::DispatchLag.key())
        .map(|d| d.total.clone())
        .unwrap_or_default();
    let workers = ctx.workers.len().max(1) as f64;
    let utilization = if duration_s > 0.0 {
        ctx.worker_cpu_s / (duration_s * workers)
    } else {
        0.0
    };
    let probe = |metric| {
        state
            .metrics
            .get(StatusClass::Successful, metric)
            .filter(|h| !h.is_empty())
            .map(|h| Distribution::of_metric(metric, h))
    };
    let mut health = ClientHealth {
        dispatch_lag_p50_ms: lag.percentiles.p50,
        dispatch_lag_p99_ms: lag.percentiles.p99,
        dispatch_lag_threshold_ms: ctx.dispatch_lag_threshold_ms,
        late_requests: state.counts.late,
        worker_cpu_s: ctx.worker_cpu_s,
        worker_cpu_utilization: utilization,
        send_gap: probe(Metric::SendGap),
        runtime_delay: probe(Metric::RuntimeDelay),
        connections: Connections::of(
            &state.metrics,
            state.measured.completed + state.measured.errored + state.measured.cancelled,
        ),
        prefill_wait: state.prefill,
        queue: Some(crate::intent::ClientQueue::of(&state.metrics)),
        bottleneck: false,
        warnings: Vec::new(),
    };
    if state.counts.late > 0 {
        // The user's caps: a backlog the verdicts judge (from intent), never the
        // client's fault.
        health.warnings.push(format!(
            "{} requests were held by a cap you set (--max-concurrency, --max-prefill-concurrency), so they went out later than the load asked; their wait is client queue time, in the figures from intent",
            state.counts.late
        ));
    }
    let streams = matches!(
        ctx.strategy.schedule(&ctx.settings),
        llmsurge_proto::Schedule::Streams { .. }
    );
    // A stream's dispatch lag is its turnaround, judged below with its share of the
    // stream's time; a schedule of instants is judged on the lag alone.
    if !streams
        && let Some(w) = lagging_schedule(
            lag.count,
            lag.percentiles.p99,
            ctx.dispatch_lag_threshold_ms,
        )
    {
        health.bottleneck = true;
        health.warnings.push(w);
    }
    if streams {
        let e2e_mean = metrics
            .get(Metric::RequestLatency.key())
            .map(|d| &d.successful)
            .filter(|d| d.count > 0)
            .map(|d| d.mean);
        for warning in slow_stream_client(&health, e2e_mean) {
            health.bottleneck = true;
            health.warnings.push(warning);
        }
    }
    if utilization > 0.9 && duration_s >= CPU_JUDGED_FROM_S {
        health.warnings.push(format!(
            "workers used {:.0}% of their CPU time: the client was near saturation (add --workers or cores)",
            utilization * 100.0
        ));
    }
    if state.tokens_refused > 0 {
        health.warnings.push(format!(
            "{} session tokens (--session-token) the server handed out were refused: non-ASCII (or a byte a cookie may not hold) may not go back in a request header as it is, so those conversations' next turns went without a token",
            state.tokens_refused
        ));
    }
    let ts = state.token_sources;
    if ts.mismatched > 0 {
        health.warnings.push(format!(
            "for {} requests the server's usage count differs from the streamed chunk count (several tokens per chunk?); usage was used",
            ts.mismatched
        ));
    }
    if ts.itl_timed > 0 {
        health.warnings.push(format!(
            "ITL: for {} requests the token counts fit several packings into chunks (reasoning chunks without the reasoning count); each gap was spread over the tokens the chunks' timing says it carried",
            ts.itl_timed
        ));
    }
    health
}

/// The verdict on a rate schedule's dispatch lag (the queue time no cap the user set
/// explains: a busy client): its p99 over the threshold, ms. `None` when within it.
pub fn lagging_schedule(count: u64, p99_ms: f64, threshold_ms: f64) -> Option<String> {
    (count > 0 && p99_ms > threshold_ms).then(|| {
        format!(
            "dispatch lag p99 {p99_ms:.2} ms exceeds {threshold_ms:.2} ms: the client could not keep the schedule (a busy client, not a cap you set, held requests past their intended instant), so these numbers describe the client, not the server"
        )
    })
}

/// Benchmarks shorter than this get no CPU-saturation warning: over a few milliseconds
/// a worker's fixed costs (its first connection, its exit) outweigh the load.
pub const CPU_JUDGED_FROM_S: f64 = 1.0;

/// Streams that spend more than this share of their time between requests offer
/// materially less load than asked.
pub const SEND_GAP_SHARE: f64 = 0.05;

/// The slow-client verdict of a stream strategy (synchronous, concurrent, throughput),
/// a closed loop whose intended instants follow its own ends. The runtime delay is held
/// to the dispatch-lag threshold: it is added to every timestamp. The stream turnaround
/// (send gap) too, but only when it is also a material share of a stream's time (mean
/// over [`SEND_GAP_SHARE`] of the mean e2e of successful requests, when known): 12 ms
/// between 2 s requests changes nothing; failing that, the busy client's dispatch lag
/// (after a think time's end) by the same rule. The waits for the user's caps are in
/// neither. One warning per figure over it.
pub fn slow_stream_client(health: &ClientHealth, e2e_mean_ms: Option<f64>) -> Vec<String> {
    let threshold = health.dispatch_lag_threshold_ms;
    let over = |d: &Option<Distribution>| {
        d.as_ref()
            .filter(|d| d.count > 0 && d.percentiles.p99 > threshold)
            .map(|d| d.percentiles.p99)
    };
    let material = health.send_gap.as_ref().is_some_and(|gap| {
        e2e_mean_ms.is_none_or(|e2e| gap.mean > SEND_GAP_SHARE * (gap.mean + e2e))
    });
    let mut warnings = Vec::new();
    if let Some(p99) = over(&health.send_gap).filter(|_| material) {
        warnings.push(format!(
            "send gap p99 {p99:.2} ms exceeds {threshold:.2} ms: streams waited on the client between requests, so the load offered was the client's, not the one asked for"
        ));
    } else {
        // The rest of a closed loop's busy-client time: the lag after a think time's
        // end (and each stream's first request), held to the same share.
        let lag = health.queue.as_ref().map(|q| q.busy_worker.clone());
        let material = lag.as_ref().is_some_and(|lag| {
            e2e_mean_ms.is_none_or(|e2e| lag.mean > SEND_GAP_SHARE * (lag.mean + e2e))
        });
        if let Some(p99) = over(&lag).filter(|_| material) {
            warnings.push(format!(
                "dispatch lag p99 {p99:.2} ms exceeds {threshold:.2} ms: a busy client held requests past their intended instant (a think time's end), so the load offered was the client's, not the one asked for"
            ));
        }
    }
    if let Some(p99) = over(&health.runtime_delay) {
        warnings.push(format!(
            "runtime delay p99 {p99:.2} ms exceeds {threshold:.2} ms: the workers' runtimes were too busy to timestamp responses on time, so these numbers describe the client, not the server"
        ));
    }
    warnings
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::state::WorkerGroupState;

    /// A result with nothing in it, to be filled in by tests.
    pub(crate) fn empty_result() -> BenchmarkResult {
        let t0 = MonoNanos(1_000_000_000);
        let anchor = ClockAnchor {
            mono: t0,
            unix_nanos: 1_700_000_000_000_000_000,
        };
        build(
            &WorkerGroupState::new(1, t0, Limits::default()),
            BuildContext {
                index: 0,
                strategy: Strategy::Synchronous,
                settings: StrategySettings::default(),
                limits: Limits::default(),
                anchor: &anchor,
                t0,
                end: t0,
                window: MeasureWindow::default(),
                stop_reason: None,
                stop_time: None,
                interrupted: false,
                concurrency_peak: 0,
                worker_cpu_s: 0.0,
                dispatch_lag_threshold_ms: 10.0,
                workers: vec![],
                answered_before: None,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::WorkerGroupState;
    use llmsurge_proto::{MetricSet, UpdateBatch};

    fn dist(p99: f64) -> Option<Distribution> {
        Some(Distribution {
            count: 100,
            mean: p99 / 2.0,
            percentiles: llmsurge_proto::metrics::Percentiles {
                p50: p99 / 2.0,
                p99,
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn a_slow_stream_client_is_named_by_the_figure_that_shows_it() {
        let health = |send_gap, runtime_delay| ClientHealth {
            dispatch_lag_threshold_ms: 10.0,
            send_gap,
            runtime_delay,
            ..ClientHealth::default()
        };
        let verdict = |gap, delay, e2e| slow_stream_client(&health(gap, delay), e2e);
        assert!(verdict(dist(9.9), dist(10.0), None).is_empty());
        assert!(verdict(None, None, None).is_empty());
        let w = verdict(dist(25.0), dist(1.0), Some(100.0));
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("send gap p99 25.00 ms"), "{}", w[0]);
        // The same gaps (mean 12.5 ms) between 2 s requests are under 5% of the time.
        assert!(verdict(dist(25.0), dist(1.0), Some(2000.0)).is_empty());
        // The runtime delay is added to every timestamp, however long the requests.
        let w = verdict(dist(1.0), dist(12.5), Some(2000.0));
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("runtime delay p99 12.50 ms"), "{}", w[0]);
        assert_eq!(verdict(dist(11.0), dist(11.0), None).len(), 2);
    }

    /// A result whose workers reported a 40 ms send gap and runtime delay.
    fn slow(strategy: Strategy) -> BenchmarkResult {
        let t0 = MonoNanos(1_000_000_000);
        let mut state = WorkerGroupState::new(1, t0, Limits::default());
        let mut m = MetricSet::new();
        for _ in 0..100 {
            m.record(StatusClass::Successful, Metric::SendGap, 40_000);
            m.record(StatusClass::Successful, Metric::RuntimeDelay, 40_000);
        }
        let batch = UpdateBatch {
            metrics: m.encode().expect("encode"),
            ..Default::default()
        };
        state.apply(0, &batch, &mut |_| {}).expect("apply");
        let anchor = ClockAnchor {
            mono: t0,
            unix_nanos: 1_700_000_000_000_000_000,
        };
        build(
            &state,
            BuildContext {
                index: 0,
                strategy,
                settings: StrategySettings::default(),
                limits: Limits::default(),
                anchor: &anchor,
                t0,
                end: t0 + std::time::Duration::from_secs(1),
                window: MeasureWindow::default(),
                stop_reason: None,
                stop_time: None,
                interrupted: false,
                concurrency_peak: 1,
                worker_cpu_s: 0.1,
                dispatch_lag_threshold_ms: 10.0,
                workers: vec![],
                answered_before: None,
            },
        )
    }

    #[test]
    fn the_stream_verdict_uses_the_client_probes() {
        for strategy in [
            Strategy::Synchronous,
            Strategy::Concurrent { streams: 4 },
            Strategy::Throughput {
                max_concurrency: 64,
            },
        ] {
            let c = slow(strategy).client;
            assert!(c.bottleneck, "{strategy}");
            assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
            let gap = c.send_gap.expect("send gap");
            assert_eq!(gap.count, 100);
            assert!((gap.percentiles.p99 - 40.0).abs() < 0.1);
        }
        // Rate strategies have dispatch lag for that; the probes are reported only.
        let c = slow(Strategy::Constant { rate: 5.0 }).client;
        assert!(!c.bottleneck, "{:?}", c.warnings);
        assert!(c.runtime_delay.is_some());
    }
}
