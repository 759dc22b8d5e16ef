//! What the server saw, as lock-free counters, and their `/stats` snapshot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::plan::{FinishReason, SpecCounts};

/// The endpoints the mock counts requests for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `GET /health`
    Health,
    /// `GET /v1/models`
    Models,
    /// `POST /v1/chat/completions`
    ChatCompletions,
    /// `POST /v1/completions`
    Completions,
    /// `POST /v1/embeddings`
    Embeddings,
    /// `POST /tokenize`
    Tokenize,
    /// `POST /detokenize`
    Detokenize,
    /// `GET /stats`, `POST /stats/reset`
    Stats,
    /// Any other path or method.
    Other,
    /// `GET /metrics` (a scrape; never a benchmark request)
    Metrics,
    /// `POST /start_profile`
    StartProfile,
    /// `POST /stop_profile`
    StopProfile,
    /// `POST /v1/responses`
    Responses,
    /// `POST /v1/messages`
    Messages,
    /// `POST /v1/rerank`
    Rerank,
    /// `POST /v1/score`
    Score,
    /// `POST /v1/audio/transcriptions`
    Transcriptions,
}

/// How many [`Endpoint`]s there are.
const ENDPOINTS: usize = 17;

/// Upper bounds (seconds) of vLLM's `time_to_first_token_seconds` buckets.
pub const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// Upper bounds (seconds) of vLLM's `e2e_request_latency_seconds` buckets.
pub const E2E_BUCKETS: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A latency histogram of fixed buckets, lock-free; the sum is kept in whole
/// nanoseconds so that it adds up exactly whatever the order of observations.
#[derive(Debug)]
pub struct LatencyHistogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last one is `+Inf`.
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_ns: AtomicU64,
}

/// A histogram's values at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    /// (upper bound in seconds, observations in that bucket alone), `+Inf` last.
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
    /// Sum of the observations, seconds.
    pub sum_seconds: f64,
}

impl LatencyHistogram {
    fn new(bounds: &'static [f64]) -> Self {
        LatencyHistogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Counts one observation.
    pub fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        let i = self.bounds.partition_point(|&b| b < seconds);
        if let Some(bucket) = self.buckets.get(i) {
            bucket.fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        let ns = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    fn reset(&self) {
        for c in self.buckets.iter().chain([&self.count, &self.sum_ns]) {
            c.store(0, Relaxed);
        }
    }

    /// The buckets, count and sum now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets = self
            .bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(&self.buckets)
            .map(|(bound, c)| (bound, c.load(Relaxed)))
            .collect();
        HistogramSnapshot {
            buckets,
            count: self.count.load(Relaxed),
            sum_seconds: Duration::from_nanos(self.sum_ns.load(Relaxed)).as_secs_f64(),
        }
    }
}

/// The injected faults, one counter each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// HTTP 500 with an error body.
    Error500,
    /// HTTP 429 with an error body.
    Error429,
    /// The response was cut mid-body.
    Drop,
    /// A malformed SSE event (or truncated JSON) was sent.
    Garbage,
    /// The response stopped sending and held the connection.
    Stall,
    /// The connection was closed before any response headers.
    Close,
}

/// Live counters, shared by every connection.
#[derive(Debug)]
pub struct Counters {
    requests: [AtomicU64; ENDPOINTS],
    responses_2xx: AtomicU64,
    responses_4xx: AtomicU64,
    responses_5xx: AtomicU64,
    active_requests: AtomicU64,
    active_streams: AtomicU64,
    queued: AtomicU64,
    peak_active: AtomicU64,
    peak_queued: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
    prompt_tokens: AtomicU64,
    tokens_sent: AtomicU64,
    reasoning_tokens_sent: AtomicU64,
    tool_calls: AtomicU64,
    chunks_sent: AtomicU64,
    faults: [AtomicU64; 6],
    kv_cache_tokens: AtomicU64,
    success: [AtomicU64; 2],
    prefix_cache_queries: AtomicU64,
    prefix_cache_hits: AtomicU64,
    /// Cache resets by endpoint, in [`CacheResetCounts`] order.
    cache_resets: [AtomicU64; 3],
    /// Requests refused 401 for want of `--require-api-key`, per endpoint.
    unauthorized: [AtomicU64; ENDPOINTS],
    /// Cache resets refused 401, in [`CacheResetCounts`] order.
    unauthorized_resets: [AtomicU64; 3],
    spec_drafts: AtomicU64,
    spec_draft_tokens: AtomicU64,
    spec_accepted_tokens: AtomicU64,
    images: AtomicU64,
    audio_ms: AtomicU64,
    /// Time to first token of generation requests, from arrival (queueing included).
    pub ttft: LatencyHistogram,
    /// Arrival to last token of generation requests that ran to their end.
    pub e2e: LatencyHistogram,
    /// Per served model (`--model`), in the order served.
    models: Vec<(String, ModelCounters)>,
    /// Requests that named a model the mock does not serve (answered 404).
    model_not_found: AtomicU64,
    /// Connections accepted; then TLS handshakes done per ALPN protocol, and refused.
    connections: [AtomicU64; 4],
    /// Requests before their first token and decoding, and disconnects per state.
    pub flow: super::flow::FlowCounters,
}

/// What happened to an accepted connection, one counter each (`/stats` `connections`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionEvent {
    /// A TCP connection was accepted.
    Accepted,
    /// A TLS handshake ended with HTTP/2 (ALPN `h2`).
    TlsH2,
    /// A TLS handshake ended with HTTP/1.1 (ALPN `http/1.1`, or none).
    TlsHttp1,
    /// A TLS handshake failed (no client certificate where one is required, a client
    /// that does not trust the server's certificate, plain HTTP on the TLS port).
    TlsFailed,
}

/// The connections the server saw: what a client's count of connections opened and
/// the protocol it negotiated are checked against.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionCounts {
    /// TCP connections accepted.
    pub accepted: u64,
    /// TLS handshakes that ended with HTTP/2.
    pub tls_h2: u64,
    /// TLS handshakes that ended with HTTP/1.1.
    pub tls_http1: u64,
    /// TLS handshakes that failed.
    pub tls_failed: u64,
}

/// One served model's live counters.
#[derive(Debug, Default)]
struct ModelCounters {
    requests: AtomicU64,
    completed: AtomicU64,
    prompt_tokens: AtomicU64,
    tokens_sent: AtomicU64,
}

/// One served model's part of the counts (`/stats` `models`): what a LoRA traffic split
/// is checked against.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCounts {
    /// Chat, completions and embedding requests that named it (or named no model, for
    /// the first served model).
    pub requests: u64,
    /// Their responses whose body was sent to the end.
    pub completed: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Output tokens sent for it (content and reasoning).
    pub tokens_sent: u64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            requests: Default::default(),
            responses_2xx: AtomicU64::default(),
            responses_4xx: AtomicU64::default(),
            responses_5xx: AtomicU64::default(),
            active_requests: AtomicU64::default(),
            active_streams: AtomicU64::default(),
            queued: AtomicU64::default(),
            peak_active: AtomicU64::default(),
            peak_queued: AtomicU64::default(),
            completed: AtomicU64::default(),
            cancelled: AtomicU64::default(),
            prompt_tokens: AtomicU64::default(),
            tokens_sent: AtomicU64::default(),
            reasoning_tokens_sent: AtomicU64::default(),
            tool_calls: AtomicU64::default(),
            chunks_sent: AtomicU64::default(),
            faults: Default::default(),
            kv_cache_tokens: AtomicU64::default(),
            success: Default::default(),
            prefix_cache_queries: AtomicU64::default(),
            prefix_cache_hits: AtomicU64::default(),
            cache_resets: Default::default(),
            unauthorized: Default::default(),
            unauthorized_resets: Default::default(),
            spec_drafts: AtomicU64::default(),
            spec_draft_tokens: AtomicU64::default(),
            spec_accepted_tokens: AtomicU64::default(),
            images: AtomicU64::default(),
            audio_ms: AtomicU64::default(),
            ttft: LatencyHistogram::new(&TTFT_BUCKETS),
            e2e: LatencyHistogram::new(&E2E_BUCKETS),
            models: Vec::new(),
            model_not_found: AtomicU64::default(),
            connections: Default::default(),
            flow: Default::default(),
        }
    }
}

/// Requests received, per endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointCounts {
    /// `GET /health`
    pub health: u64,
    /// `GET /v1/models`
    pub models: u64,
    /// `POST /v1/chat/completions`
    pub chat_completions: u64,
    /// `POST /v1/completions`
    pub completions: u64,
    /// `POST /v1/embeddings`
    pub embeddings: u64,
    /// `POST /tokenize`
    pub tokenize: u64,
    /// `POST /detokenize`
    pub detokenize: u64,
    /// `/stats` and `/stats/reset`
    pub stats: u64,
    /// Unknown paths and wrong methods.
    pub other: u64,
    /// `GET /metrics` (scrapes, whatever the answer: 200, an injected fault, or 404
    /// with `--no-metrics`).
    #[serde(default)]
    pub metrics: u64,
    /// `POST /start_profile` (404 ones with `--no-profiler` included).
    #[serde(default)]
    pub start_profile: u64,
    /// `POST /stop_profile` (404 ones with `--no-profiler` included).
    #[serde(default)]
    pub stop_profile: u64,
    /// `POST /v1/responses`
    #[serde(default)]
    pub responses: u64,
    /// `POST /v1/messages`
    #[serde(default)]
    pub messages: u64,
    /// `POST /v1/rerank`
    #[serde(default)]
    pub rerank: u64,
    /// `POST /v1/score`
    #[serde(default)]
    pub score: u64,
    /// `POST /v1/audio/transcriptions`
    #[serde(default)]
    pub transcriptions: u64,
}

/// The counts of `counters`, one per [`Endpoint`], by name.
fn endpoint_counts(counters: &[AtomicU64; ENDPOINTS]) -> EndpointCounts {
    let r = |e: Endpoint| counters[e as usize].load(Relaxed);
    EndpointCounts {
        health: r(Endpoint::Health),
        models: r(Endpoint::Models),
        chat_completions: r(Endpoint::ChatCompletions),
        completions: r(Endpoint::Completions),
        embeddings: r(Endpoint::Embeddings),
        tokenize: r(Endpoint::Tokenize),
        detokenize: r(Endpoint::Detokenize),
        stats: r(Endpoint::Stats),
        other: r(Endpoint::Other),
        metrics: r(Endpoint::Metrics),
        start_profile: r(Endpoint::StartProfile),
        stop_profile: r(Endpoint::StopProfile),
        responses: r(Endpoint::Responses),
        messages: r(Endpoint::Messages),
        rerank: r(Endpoint::Rerank),
        score: r(Endpoint::Score),
        transcriptions: r(Endpoint::Transcriptions),
    }
}

/// Requests answered 401 for want of `--require-api-key`, per route.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnauthorizedCounts {
    /// All of them.
    pub total: u64,
    /// Per endpoint, as `requests` names them.
    pub requests: EndpointCounts,
    /// Per cache-reset endpoint.
    pub cache_resets: CacheResetCounts,
}

/// Generation requests that ran to their end, per finish reason (vLLM's
/// `request_success_total{finished_reason}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuccessCounts {
    /// Ended by the model (`finish_reason: "stop"`, or `tool_calls`: vLLM's engine
    /// counts a tool call as `stop`).
    pub stop: u64,
    /// Ended at `max_tokens` (`finish_reason: "length"`).
    pub length: u64,
}

/// Injected faults, per kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounts {
    /// Requests answered HTTP 500.
    pub error_500: u64,
    /// Requests answered HTTP 429.
    pub error_429: u64,
    /// Responses cut mid-body.
    pub drop: u64,
    /// Responses that carried a malformed event.
    pub garbage: u64,
    /// Responses that stalled.
    pub stall: u64,
    /// Requests whose connection was closed before any response headers.
    #[serde(default)]
    pub close: u64,
}

/// A snapshot of the counters: the body of `GET /stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockStats {
    /// Every request received, on any path.
    pub requests_total: u64,
    /// Requests received, per endpoint.
    pub requests: EndpointCounts,
    /// Responses by status class.
    pub responses_2xx: u64,
    /// Responses with a 4xx status.
    pub responses_4xx: u64,
    /// Responses with a 5xx status.
    pub responses_5xx: u64,
    /// Generation and embedding requests holding a concurrency slot now.
    pub active_requests: u64,
    /// The streaming subset of `active_requests`.
    pub active_streams: u64,
    /// Requests waiting for a slot now.
    pub queued: u64,
    /// Highest `active_requests` seen (queued requests not counted).
    pub peak_active: u64,
    /// Highest `queued` seen.
    pub peak_queued: u64,
    /// Responses whose body was sent to the end.
    pub completed: u64,
    /// Responses abandoned before their end because the client went away (injected
    /// drops and stalls not counted).
    pub cancelled: u64,
    /// Prompt tokens of generation and embedding requests.
    pub prompt_tokens: u64,
    /// Output tokens sent (content and reasoning).
    pub tokens_sent: u64,
    /// The reasoning subset of `tokens_sent`.
    pub reasoning_tokens_sent: u64,
    /// Generation requests answered with a tool call (`--tool-call-rate`), injected
    /// errors excluded.
    pub tool_calls: u64,
    /// SSE data chunks sent carrying tokens.
    pub chunks_sent: u64,
    /// Faults injected, per kind.
    pub faults: FaultCounts,
    /// Tokens held by the requests holding a slot now (prompt plus output so far): the
    /// mock's KV-cache model (`vllm:kv_cache_usage_perc` is this over --kv-cache-tokens).
    #[serde(default)]
    pub kv_cache_tokens: u64,
    /// Generation requests that ran to their end, per finish reason.
    #[serde(default)]
    pub request_success: SuccessCounts,
    /// Prompt tokens of chat and completions requests looked up in the prefix-cache model.
    #[serde(default)]
    pub prefix_cache_queries: u64,
    /// The part of `prefix_cache_queries` found cached.
    #[serde(default)]
    pub prefix_cache_hits: u64,
    /// Cache resets asked for (`/reset_prefix_cache`, `/reset_mm_cache`, `/flush_cache`).
    #[serde(default)]
    pub cache_resets: CacheResetCounts,
    /// Requests answered 401 for want of `--require-api-key` (not in `requests`, which
    /// counts those let in; in `requests_total`).
    #[serde(default)]
    pub unauthorized: UnauthorizedCounts,
    /// Speculative-decoding counts (all 0 unless `--spec-decode-draft-tokens` is set).
    #[serde(default)]
    pub spec_decode: SpecDecodeCounts,
    /// Counts per served model name.
    #[serde(default)]
    pub models: std::collections::BTreeMap<String, ModelCounts>,
    /// Requests that named a model not served (answered 404 `model_not_found`).
    #[serde(default)]
    pub model_not_found: u64,
    /// Images received in chat `image_url` parts.
    #[serde(default)]
    pub images: u64,
    /// Milliseconds of audio received (chat `input_audio` parts and transcription
    /// uploads), from each WAV header.
    #[serde(default)]
    pub audio_ms: u64,
    /// What `--record` wrote (absent without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<super::record::RecordStats>,
    /// Connections accepted and TLS handshakes.
    #[serde(default)]
    pub connections: ConnectionCounts,
    /// Requests before their first token and decoding (gauges, peaks), and client
    /// disconnects per request state.
    #[serde(flatten)]
    pub flow: super::flow::FlowStats,
}

/// Speculative-decoding counts of the tokens sent (vLLM's `spec_decode_*` counters).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecDecodeCounts {
    /// Decoding steps, one draft each.
    pub drafts: u64,
    /// Draft tokens proposed.
    pub draft_tokens: u64,
    /// Draft tokens accepted.
    pub accepted_tokens: u64,
}

fn bump_peak(peak: &AtomicU64, now: u64) {
    peak.fetch_max(now, Relaxed);
}

impl Counters {
    /// Counters that also count per served model, `names` in the served order.
    pub fn with_models(names: &[String]) -> Self {
        Counters {
            models: names
                .iter()
                .map(|n| (n.clone(), ModelCounters::default()))
                .collect(),
            ..Counters::default()
        }
    }

    fn model(&self, i: usize) -> Option<&ModelCounters> {
        self.models.get(i).map(|(_, c)| c)
    }

    /// A generation or embedding request for served model `i`, with its prompt tokens.
    pub fn model_request(&self, i: usize, prompt_tokens: u64) {
        if let Some(c) = self.model(i) {
            c.requests.fetch_add(1, Relaxed);
            c.prompt_tokens.fetch_add(prompt_tokens, Relaxed);
        }
    }

    /// Output tokens sent for served model `i`.
    pub fn model_tokens_sent(&self, i: usize, tokens: u64) {
        if let Some(c) = self.model(i) {
            c.tokens_sent.fetch_add(tokens, Relaxed);
        }
    }

    /// A response for served model `i` was sent to its end.
    pub fn model_completed(&self, i: usize) {
        if let Some(c) = self.model(i) {
            c.completed.fetch_add(1, Relaxed);
        }
    }

    /// A request named a model that is not served.
    pub fn model_not_found(&self) {
        self.model_not_found.fetch_add(1, Relaxed);
    }

    /// Counts a received request.
    pub fn request(&self, endpoint: Endpoint) {
        self.requests[endpoint as usize].fetch_add(1, Relaxed);
    }

    /// Counts a response status.
    pub fn response(&self, status: u16) {
        match status {
            200..=299 => &self.responses_2xx,
            400..=499 => &self.responses_4xx,
            _ => &self.responses_5xx,
        }
        .fetch_add(1, Relaxed);
    }

    /// Counts an injected fault.
    pub fn fault(&self, kind: FaultKind) {
        self.faults[kind as usize].fetch_add(1, Relaxed);
    }

    /// A request starts waiting for a slot.
    pub fn enqueue(&self) {
        let now = self.queued.fetch_add(1, Relaxed) + 1;
        bump_peak(&self.peak_queued, now);
    }

    /// A request stops waiting (it got a slot, or went away).
    pub fn dequeue(&self) {
        self.queued.fetch_sub(1, Relaxed);
    }

    /// A request got its slot; returns the active count including it.
    pub fn activate(&self, streaming: bool) -> u64 {
        let now = self.active_requests.fetch_add(1, Relaxed) + 1;
        if streaming {
            self.active_streams.fetch_add(1, Relaxed);
        }
        bump_peak(&self.peak_active, now);
        now
    }

    /// A request released its slot.
    pub fn deactivate(&self, streaming: bool) {
        self.active_requests.fetch_sub(1, Relaxed);
        if streaming {
            self.active_streams.fetch_sub(1, Relaxed);
        }
    }

    /// Tokens enter the KV-cache model (a prompt on getting a slot, output as sent).
    pub fn kv_add(&self, tokens: u64) {
        self.kv_cache_tokens.fetch_add(tokens, Relaxed);
    }

    /// Tokens leave the KV-cache model (their request released its slot).
    pub fn kv_remove(&self, tokens: u64) {
        self.kv_cache_tokens.fetch_sub(tokens, Relaxed);
    }

    /// A cache reset: `which` is 0 for `/reset_prefix_cache`, 1 for `/reset_mm_cache`,
    /// 2 for `/flush_cache`.
    pub fn cache_reset(&self, which: usize) {
        if let Some(c) = self.cache_resets.get(which) {
            c.fetch_add(1, Relaxed);
        }
    }

    /// A request refused 401 for want of the key: at `endpoint`, or at cache-reset
    /// endpoint `reset` (as [`Self::cache_reset`] numbers them) when it is one.
    pub fn unauthorized(&self, endpoint: Endpoint, reset: Option<usize>) {
        let counter = match reset {
            Some(which) => self.unauthorized_resets.get(which),
            None => self.unauthorized.get(endpoint as usize),
        };
        if let Some(c) = counter {
            c.fetch_add(1, Relaxed);
        }
    }

    /// A prompt of `queries` tokens was looked up in the prefix cache; `hits` were cached.
    pub fn prefix_cache(&self, queries: u64, hits: u64) {
        self.prefix_cache_queries.fetch_add(queries, Relaxed);
        self.prefix_cache_hits.fetch_add(hits, Relaxed);
    }

    /// Counts the speculative-decoding steps behind tokens just sent.
    pub fn spec_decode(&self, c: SpecCounts) {
        self.spec_drafts.fetch_add(c.drafts, Relaxed);
        self.spec_draft_tokens.fetch_add(c.draft_tokens, Relaxed);
        self.spec_accepted_tokens
            .fetch_add(c.accepted_tokens, Relaxed);
    }

    /// A generation request ran to its end.
    pub fn success(&self, finish: FinishReason) {
        // vLLM's engine ends a tool call like any answer the model ended itself (its
        // `finished_reason` is `stop`; only the API layer renames it `tool_calls`).
        let slot = match finish {
            FinishReason::Stop | FinishReason::ToolCalls => FinishReason::Stop,
            FinishReason::Length => FinishReason::Length,
        };
        self.success[slot as usize].fetch_add(1, Relaxed);
    }

    /// Requests holding a slot now.
    pub fn active(&self) -> u64 {
        self.active_requests.load(Relaxed)
    }

    /// A response body was sent to its end.
    pub fn completed(&self) {
        self.completed.fetch_add(1, Relaxed);
    }

    /// A response was abandoned by its client.
    pub fn cancelled(&self) {
        self.cancelled.fetch_add(1, Relaxed);
    }

    /// Counts the images and audio of a request.
    pub fn media(&self, images: u64, audio_ms: u64) {
        self.images.fetch_add(images, Relaxed);
        self.audio_ms.fetch_add(audio_ms, Relaxed);
    }

    /// Counts a request answered with a tool call.
    pub fn tool_call(&self) {
        self.tool_calls.fetch_add(1, Relaxed);
    }

    /// Counts prompt tokens.
    pub fn prompt_tokens(&self, n: u64) {
        self.prompt_tokens.fetch_add(n, Relaxed);
    }

    /// Counts a chunk of `tokens` output tokens sent, `reasoning` of them reasoning.
    pub fn tokens_sent(&self, tokens: u64, reasoning: u64, chunks: u64) {
        self.tokens_sent.fetch_add(tokens, Relaxed);
        if reasoning > 0 {
            self.reasoning_tokens_sent.fetch_add(reasoning, Relaxed);
        }
        self.chunks_sent.fetch_add(chunks, Relaxed);
    }

    /// Zeroes the counters and histograms; gauges (active, queued, KV tokens) keep their
    /// value and peaks restart from it.
    pub fn reset(&self) {
        self.ttft.reset();
        self.e2e.reset();
        let all = self
            .requests
            .iter()
            .chain(&self.faults)
            .chain(&self.success)
            .chain(&self.cache_resets)
            .chain(&self.unauthorized)
            .chain(&self.unauthorized_resets)
            .chain(&self.connections)
            .chain([
                &self.responses_2xx,
                &self.responses_4xx,
                &self.responses_5xx,
                &self.completed,
                &self.cancelled,
                &self.prompt_tokens,
                &self.tokens_sent,
                &self.reasoning_tokens_sent,
                &self.tool_calls,
                &self.chunks_sent,
                &self.prefix_cache_queries,
                &self.prefix_cache_hits,
                &self.spec_drafts,
                &self.spec_draft_tokens,
                &self.spec_accepted_tokens,
                &self.images,
                &self.audio_ms,
            ]);
        let per_model = self
            .models
            .iter()
            .flat_map(|(_, c)| [&c.requests, &c.completed, &c.prompt_tokens, &c.tokens_sent]);
        for counter in all.chain(per_model).chain([&self.model_not_found]) {
            counter.store(0, Relaxed);
        }
        self.peak_active
            .store(self.active_requests.load(Relaxed), Relaxed);
        self.peak_queued.store(self.queued.load(Relaxed), Relaxed);
        self.flow.reset();
    }

    /// A consistent-enough snapshot (each counter read once, relaxed).
    pub fn snapshot(&self) -> MockStats {
        let f = |k: FaultKind| self.faults[k as usize].load(Relaxed);
        let requests = endpoint_counts(&self.requests);
        let resets = |c: &[AtomicU64; 3]| CacheResetCounts {
            prefix_cache: c[0].load(Relaxed),
            mm_cache: c[1].load(Relaxed),
            flush_cache: c[2].load(Relaxed),
        };
        let unauthorized = UnauthorizedCounts {
            total: self
                .unauthorized
                .iter()
                .chain(&self.unauthorized_resets)
                .map(|c| c.load(Relaxed))
                .sum(),
            requests: endpoint_counts(&self.unauthorized),
            cache_resets: resets(&self.unauthorized_resets),
        };
        MockStats {
            requests_total: self.requests.iter().map(|c| c.load(Relaxed)).sum::<u64>()
                + unauthorized.total,
            requests,
            responses_2xx: self.responses_2xx.load(Relaxed),
            responses_4xx: self.responses_4xx.load(Relaxed),
            responses_5xx: self.responses_5xx.load(Relaxed),
            active_requests: self.active_requests.load(Relaxed),
            active_streams: self.active_streams.load(Relaxed),
            queued: self.queued.load(Relaxed),
            peak_active: self.peak_active.load(Relaxed),
            peak_queued: self.peak_queued.load(Relaxed),
            completed: self.completed.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            prompt_tokens: self.prompt_tokens.load(Relaxed),
            tokens_sent: self.tokens_sent.load(Relaxed),
            reasoning_tokens_sent: self.reasoning_tokens_sent.load(Relaxed),
            tool_calls: self.tool_calls.load(Relaxed),
            chunks_sent: self.chunks_sent.load(Relaxed),
            faults: FaultCounts {
                error_500: f(FaultKind::Error500),
                error_429: f(FaultKind::Error429),
                drop: f(FaultKind::Drop),
                garbage: f(FaultKind::Garbage),
                stall: f(FaultKind::Stall),
                close: f(FaultKind::Close),
            },
            kv_cache_tokens: self.kv_cache_tokens.load(Relaxed),
            request_success: SuccessCounts {
                stop: self.success[FinishReason::Stop as usize].load(Relaxed),
                length: self.success[FinishReason::Length as usize].load(Relaxed),
            },
            prefix_cache_queries: self.prefix_cache_queries.load(Relaxed),
            prefix_cache_hits: self.prefix_cache_hits.load(Relaxed),
            cache_resets: resets(&self.cache_resets),
            unauthorized,
            spec_decode: SpecDecodeCounts {
                drafts: self.spec_drafts.load(Relaxed),
                draft_tokens: self.spec_draft_tokens.load(Relaxed),
                accepted_tokens: self.spec_accepted_tokens.load(Relaxed),
            },
            models: self
                .models
                .iter()
                .map(|(name, c)| {
                    let counts = ModelCounts {
                        requests: c.requests.load(Relaxed),
                        completed: c.completed.load(Relaxed),
                        prompt_tokens: c.prompt_tokens.load(Relaxed),
                        tokens_sent: c.tokens_sent.load(Relaxed),
                    };
                    (name.clone(), counts)
                })
                .collect(),
            model_not_found: self.model_not_found.load(Relaxed),
            images: self.images.load(Relaxed),
            audio_ms: self.audio_ms.load(Relaxed),
            // Filled in by the server, which owns the recorder.
            record: None,
            connections: {
                let c = |e: ConnectionEvent| self.connections[e as usize].load(Relaxed);
                ConnectionCounts {
                    accepted: c(ConnectionEvent::Accepted),
                    tls_h2: c(ConnectionEvent::TlsH2),
                    tls_http1: c(ConnectionEvent::TlsHttp1),
                    tls_failed: c(ConnectionEvent::TlsFailed),
                }
            },
            flow: self.flow.snapshot(),
        }
    }

    /// Counts one connection event.
    pub fn connection(&self, event: ConnectionEvent) {
        self.connections[event as usize].fetch_add(1, Relaxed);
    }
}

/// Cache resets the mock was asked for, per endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheResetCounts {
    /// `POST /reset_prefix_cache` (vLLM): empties the prefix cache.
    pub prefix_cache: u64,
    /// `POST /reset_mm_cache` (vLLM): the mock keeps no multimodal cache; counted only.
    pub mm_cache: u64,
    /// `POST /flush_cache` (SGLang): empties the prefix cache.
    pub flush_cache: u64,
}
