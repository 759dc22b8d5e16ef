//! The configuration a worker receives over IPC (never on its command line).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Which API requests speak: the endpoint, the body and the response format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestFormat {
    /// `POST /v1/chat/completions`.
    #[default]
    Chat,
    /// `POST /v1/completions`.
    Completions,
    /// OpenAI's Responses API, `POST /v1/responses`.
    Responses,
    /// Anthropic's Messages API, `POST /v1/messages`.
    Anthropic,
    /// `POST /v1/embeddings`, a batch of inputs per request.
    Embeddings,
    /// `POST /v1/rerank` (Jina/Cohere shape: query, documents, top_n).
    Rerank,
    /// vLLM's `POST /v1/score` (one query scored against a list of documents).
    Score,
    /// `POST /v1/audio/transcriptions`: a multipart WAV upload, text out.
    Transcription,
}

impl RequestFormat {
    /// The endpoint path.
    pub fn path(self) -> &'static str {
        match self {
            RequestFormat::Chat => "/v1/chat/completions",
            RequestFormat::Completions => "/v1/completions",
            RequestFormat::Responses => "/v1/responses",
            RequestFormat::Anthropic => "/v1/messages",
            RequestFormat::Embeddings => "/v1/embeddings",
            RequestFormat::Rerank => "/v1/rerank",
            RequestFormat::Score => "/v1/score",
            RequestFormat::Transcription => "/v1/audio/transcriptions",
        }
    }

    /// Whether the format generates output tokens (and so can stream and has TTFT, ITL,
    /// TPOT and output tokens); embeddings and rerank/score do not.
    pub fn generates(self) -> bool {
        matches!(
            self,
            RequestFormat::Chat
                | RequestFormat::Completions
                | RequestFormat::Responses
                | RequestFormat::Anthropic
                | RequestFormat::Transcription
        )
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            RequestFormat::Chat => "chat",
            RequestFormat::Completions => "completions",
            RequestFormat::Responses => "responses",
            RequestFormat::Anthropic => "anthropic",
            RequestFormat::Embeddings => "embeddings",
            RequestFormat::Rerank => "rerank",
            RequestFormat::Score => "score",
            RequestFormat::Transcription => "transcription",
        }
    }
}

/// A secret (an API key). Its `Debug` and `Display` never show the value; it is
/// serialized as is because it must reach the workers, so never put it in a report.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// One request per HTTP/2 connection at a time: `--http2-streams`' default.
fn one_stream() -> u32 {
    1
}

/// How to talk to the target server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendConfig {
    /// Base URL without the `/v1/...` path, e.g. `http://127.0.0.1:8000`.
    pub base_url: String,
    /// The API requests speak.
    pub request_format: RequestFormat,
    /// The model name sent in every request.
    pub model: String,
    /// Stream responses (SSE) or not.
    pub stream: bool,
    /// Sent as `Authorization: Bearer ...`.
    pub api_key: Option<Secret>,
    /// Extra headers on every request.
    pub headers: Vec<(String, String)>,
    /// Extra query parameters on every request.
    pub params: Vec<(String, String)>,
    /// Extra fields merged into every request body (a JSON object).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Speak HTTP/2 (prior knowledge on `http://`, ALPN on `https://`).
    pub http2: bool,
    /// `--http2-streams`: how many requests share one HTTP/2 connection at once (1: a
    /// connection per request in flight).
    #[serde(default = "one_stream")]
    pub http2_streams: u32,
    /// Bound on a whole request, first byte to last.
    pub request_timeout: Duration,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// TLS settings of `https://` targets (`--ca-cert`, `--insecure`, `--client-cert`).
    #[serde(default)]
    pub tls: crate::http::TlsConfig,
    /// Bound on the wait for the first token, if set.
    pub ttft_timeout: Option<Duration>,
    /// Bound on the silence between two chunks of a stream, if set.
    pub idle_timeout: Option<Duration>,
    /// Send `ignore_eos: true` so the server generates exactly `max_tokens`.
    pub ignore_eos: bool,
    /// `--min-tokens`: send vLLM's `min_tokens` equal to each request's `max_tokens`
    /// (chat and completions), so a server that drops `ignore_eos` still cannot stop early.
    #[serde(default)]
    pub min_tokens: bool,
    /// Function definitions sent with every request (the data's `tools=N`), with an
    /// automatic `tool_choice`; 0 sends none.
    #[serde(default)]
    pub tools: u32,
    /// Sticky routing: the header that carries a request's session id (the data's
    /// `session_header=NAME`), on requests whose source gave one; `None` sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_header: Option<String>,
    /// Send a W3C `traceparent` on every request of the schedule (off with
    /// `--no-traceparent`, for a server that rejects unknown headers).
    #[serde(default)]
    pub traceparent: bool,
    /// `--request-id-header`: what every request's [`REQUEST_ID_HEADER`] starts with; the
    /// request's slot follows. The CLI sets the run's tag and each benchmark appends its
    /// index (see [`request_id_prefix`]); `None` sends no id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Router affinity: `--affinity`, `--session-token`, `--sticky-connections`.
    #[serde(default)]
    pub affinity: crate::affinity::Affinity,
}

impl BackendConfig {
    /// Registers this backend's secrets: [`register_secrets`] of its fields.
    pub fn register_secrets(&self, redaction: &crate::Redaction) {
        register_secrets(
            self.api_key.as_ref(),
            &self.headers,
            &self.params,
            &self.base_url,
            redaction,
        );
    }
}

/// Registers a target's secrets ([`crate::redact::register_secret`]) so that no text
/// this process writes carries them, server text included: the API key, every header
/// and query value `redaction` hides (and a header's last word: the token of
/// `Bearer <token>`), and in the base URL its hidden query values and its password,
/// alone and as the Basic header carries it (`base64(user:password)`; a user name alone
/// is no secret, and the URL's redaction hides it where the URL is written).
pub fn register_secrets(
    api_key: Option<&Secret>,
    headers: &[(String, String)],
    params: &[(String, String)],
    base_url: &str,
    redaction: &crate::Redaction,
) {
    use crate::redact::register_secret;
    if let Some(key) = api_key {
        register_secret(key.expose());
    }
    for (name, value) in headers {
        if !redaction.shows_header(name) {
            register_secret(value);
            if let Some(last) = value.split_whitespace().last() {
                register_secret(last);
            }
        }
    }
    for (name, value) in params {
        if !redaction.shows_query_param(name) {
            register_secret(value);
        }
    }
    if let Some((_, rest)) = base_url.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if let Some((userinfo, _)) = authority.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
        {
            use crate::redact::percent_decode;
            use base64::Engine as _;
            // As typed, and as sent: decoded, and in the Basic header of the decoded pair.
            register_secret(password);
            register_secret(&percent_decode(password, false));
            let pair = percent_decode(userinfo, false);
            register_secret(&base64::engine::general_purpose::STANDARD.encode(pair.as_bytes()));
        }
        let query = rest
            .split_once('?')
            .map(|(_, q)| q.split('#').next().unwrap_or_default())
            .unwrap_or_default();
        for (name, value) in query.split('&').filter_map(|p| p.split_once('=')) {
            if !redaction.shows_query_param(name) {
                register_secret(value);
                register_secret(&crate::redact::percent_decode(value, true));
            }
        }
    }
}

/// The header that carries each request's id (vLLM and SGLang adopt it as their own
/// request id, so the server's logs join the client's).
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// What the ids of benchmark `benchmark` of the run tagged `tag` start with; a request's
/// id is this followed by its slot, e.g. `llmsurge-3f9a1c2b-0-17`: unique within the run,
/// and built per request by appending digits, with no allocation of its own.
pub fn request_id_prefix(tag: &str, benchmark: u32) -> String {
    format!("{tag}-{benchmark}-")
}

/// A tag for a new run's request ids, `llmsurge-` and 8 hex digits drawn from the
/// clock and the process id: two runs (or two shards of one) rarely share one, so the
/// ids stay apart in a server's logs.
pub fn new_run_tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = crate::seed::derive_seed(nanos, "run-tag", u64::from(std::process::id()));
    format!("llmsurge-{:08x}", mixed as u32)
}

/// When requests are sent: the strategy, as the worker sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// `streams` request streams across the group, each sending its next request as soon
    /// as the last one finished; stream `s` starts at `t0 + rampup * s / streams`.
    /// (`synchronous` is one stream; `concurrent` is N; `throughput` is the cap.)
    Streams {
        /// Streams across the whole group.
        streams: u32,
        /// Spread of the stream starts.
        rampup: Duration,
    },
    /// Requests at scheduled instants: one sequence of slots for the whole group.
    Arrivals(Arrivals),
}

/// Arrival processes of rate-based strategies.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Slot `i` at `t0 + i / rate`, after an optional linear ramp from 0 to `rate`.
    Constant {
        /// Requests per second.
        rate: f64,
        /// Length of the linear ramp-up.
        rampup: Duration,
    },
    /// Gamma-distributed gaps with mean `1 / rate`; `burstiness` is the shape
    /// (1 = Poisson, lower = burstier), as `vllm bench serve` has it.
    Poisson {
        /// Requests per second.
        rate: f64,
        /// Gamma shape.
        burstiness: f64,
    },
    /// A trace's own instants: slot `i` at `t0 + offset_i × time_scale`, where the
    /// offsets come with the data ([`DataSpec::Trace`]).
    Trace {
        /// Multiplies every trace offset (0.5 replays twice as fast).
        time_scale: f64,
        /// Agent traces under `--rate`: trace `i` starts at `t0 + i / rate` instead of at
        /// its recorded offset (its calls' gaps still follow `time_scale`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        starts_per_s: Option<f64>,
    },
}

/// A tokenizer every process can load without the network (the coordinator downloads
/// Hugging Face tokenizers before workers start and hands them the local file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerRef {
    /// A built-in encoding compiled into the binary, e.g. `cl100k_base`.
    Builtin(String),
    /// A local Hugging Face `tokenizer.json`.
    File(PathBuf),
}

impl fmt::Display for TokenizerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizerRef::Builtin(name) => f.write_str(name),
            TokenizerRef::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Order in which a finite dataset's rows are used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SamplerKind {
    /// Row 0, 1, 2, ... (every epoch the same order).
    #[default]
    Sequential,
    /// A seeded permutation per epoch, reseeded every epoch.
    Shuffle,
}

/// How slots map onto the rows of a finite dataset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sampling {
    /// Row order.
    pub sampler: SamplerKind,
    /// Seed of the shuffles (epoch `e` uses (seed, "data-shuffle", e)).
    pub seed: u64,
    /// Start a new epoch when the rows run out; otherwise the dataset ends the benchmark.
    pub oversample: bool,
}

/// A synthetic workload: prompts and output lengths drawn from these settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyntheticSpec {
    /// Mean prompt length in tokens.
    pub prompt_tokens: u32,
    /// Standard deviation of the prompt length.
    pub prompt_tokens_stdev: u32,
    /// Lower bound of the prompt length.
    pub prompt_tokens_min: Option<u32>,
    /// Upper bound of the prompt length.
    pub prompt_tokens_max: Option<u32>,
    /// Mean output length in tokens (sent as `max_tokens`); 0 when the spec gives none
    /// (embeddings and ranking have no output).
    pub output_tokens: u32,
    /// Standard deviation of the output length.
    pub output_tokens_stdev: u32,
    /// Lower bound of the output length.
    pub output_tokens_min: Option<u32>,
    /// Upper bound of the output length.
    pub output_tokens_max: Option<u32>,
    /// `vllm bench serve`'s `--random-range-ratio`: when set, prompt and output lengths
    /// are drawn uniformly from `[mean × (1 − r), mean × (1 + r)]` instead of around
    /// their mean with a standard deviation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_ratio: Option<f64>,
    /// Tokens of shared prefix at the start of every prompt.
    pub prefix_tokens: u32,
    /// How many distinct prefixes the prompts cycle through.
    pub prefix_count: u32,
    /// Number of distinct samples (the dataset is finite when set).
    pub samples: Option<u64>,
    /// Seed of the prompt and length streams.
    pub random_seed: u64,
    /// A text file to take prompt text from; the built-in text when absent.
    pub source: Option<PathBuf>,
    /// The tokenizer prompt lengths are exact under.
    pub tokenizer: TokenizerRef,
    /// How slots map onto `samples`, when set.
    pub sampling: Sampling,
    /// Texts per embeddings request, each `prompt_tokens` long (0: one plain prompt).
    #[serde(default)]
    pub batch_size: u32,
    /// Documents per rerank/score request, each `prompt_tokens` long, ranked against a
    /// query of `prompt_tokens` (0: one plain prompt).
    #[serde(default)]
    pub documents: u32,
    /// Generated images and audio each request carries (none by default).
    #[serde(default)]
    pub media: MediaSpec,
    /// Multi-turn sessions: turns per session (0: independent requests). Each turn's
    /// new user message has the drawn prompt length; the history comes on top.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub turns: u32,
    /// Multi-turn sessions: the pause between a turn's end and the next turn's send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time: Option<ThinkTime>,
    /// Multi-turn sessions, sticky routing: send the session id as the OpenAI `user`
    /// field of every turn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session_user: bool,
    /// Multi-turn sessions, sticky routing: send the session id in this header on
    /// every turn (validated: a header name, not hop-by-hop or a credential).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_header: Option<String>,
    /// Multi-turn sessions: a system message of exactly this many tokens opens every
    /// turn of a session (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub system_tokens: u32,
    /// Multi-turn sessions: one system message for every session (a shared app prompt)
    /// instead of one per session.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub system_shared: bool,
    /// Function definitions sent with every request (chat, responses, anthropic), so
    /// the server may answer with a tool call; 0: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tools: u32,
    /// Multi-turn sessions offering tools: the tokens of the tool's result, sent as a
    /// `tool` message after a turn the server answered with a tool call.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_result_tokens: u32,
}

/// Encoding of generated images.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageFormat {
    /// Baseline JPEG (quality 85): the default, as photos and `vllm bench serve`'s
    /// random multimodal dataset are JPEG, so a server decodes what it usually gets.
    #[default]
    Jpeg,
    /// Lossless PNG.
    Png,
}

impl ImageFormat {
    /// The MIME type of a data URL.
    pub fn mime(self) -> &'static str {
        match self {
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::Png => "image/png",
        }
    }
}

/// Synthetic media per request: `images` pictures of `width`×`height` and a WAV clip of
/// `audio_seconds` (the `input_audio` of chat, the upload of a transcription).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MediaSpec {
    /// Images per request (0: none).
    #[serde(default)]
    pub images: u32,
    /// Image width in pixels.
    #[serde(default)]
    pub image_width: u32,
    /// Image height in pixels.
    #[serde(default)]
    pub image_height: u32,
    /// How images are encoded.
    #[serde(default)]
    pub image_format: ImageFormat,
    /// Distinct images generated and cycled through (0: `images`, so every request
    /// carries the same ones, which a server's multimodal cache may recognise).
    #[serde(default)]
    pub image_pool: u32,
    /// Seconds of generated audio per request (0: none).
    #[serde(default)]
    pub audio_seconds: f64,
}

impl MediaSpec {
    /// Whether the spec asks for any media.
    pub fn any(&self) -> bool {
        self.images > 0 || self.audio_seconds > 0.0
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The pause between two turns of a session, drawn per (session, turn).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThinkTime {
    /// How it is drawn.
    pub kind: ThinkKind,
    /// The fixed value, or the distribution's mean, in nanoseconds.
    pub mean_ns: u64,
}

/// How a think time is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkKind {
    /// Always the mean.
    Fixed,
    /// Uniform on `[0, 2 × mean]`.
    Uniform,
    /// Exponential with the mean.
    Exponential,
}

/// Rows prepared by the coordinator (files and datasets), written once to a read-only
/// table file that every worker reads during its handshake.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSpec {
    /// The table file (msgpack rows, written by the coordinator).
    pub path: PathBuf,
    /// Rows in the table.
    pub rows: u64,
    /// How slots map onto rows.
    pub sampling: Sampling,
    /// Requests one pass over the rows sends, when not one per row (a session row sends
    /// one per turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// Sessions, sticky routing: the header (lowercase) that carries each session's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_header: Option<String>,
}

/// A timestamped trace prepared by the coordinator: one row per request (its offset
/// from the first, its lengths and block ids) in a table file every worker reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceSpec {
    /// The trace table file (msgpack rows, written by the coordinator).
    pub path: PathBuf,
    /// Requests in the trace: slot `i` is row `i`, and the trace never repeats.
    pub rows: u64,
    /// Tokens per hash-id block.
    pub block_size: u32,
    /// Seed of the block texts.
    pub seed: u64,
    /// The tokenizer block lengths are exact under.
    pub tokenizer: TokenizerRef,
}

/// Agent traces prepared by the coordinator (issue 24 §1): each trace a graph of LLM
/// calls, in a table file every worker reads. Trace `i` is session `i`, owned by the
/// worker that claims it, so the schedule does not depend on `--workers`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentTraceSpec {
    /// The graph table file (msgpack, written by the coordinator).
    pub path: PathBuf,
    /// Traces in the file.
    pub traces: u64,
    /// LLM calls of every trace: the requests one replay sends.
    pub calls: u64,
    /// Seed of the synthetic prompt texts.
    pub seed: u64,
    /// The tokenizer synthetic prompt lengths are exact under.
    pub tokenizer: TokenizerRef,
    /// Whether the traces start over after the last one (a timed run at `--rate`
    /// that needs more traces than the file holds): session `i` is trace `i % traces`.
    #[serde(default)]
    pub repeat: bool,
}

/// Where request payloads come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataSpec {
    /// Generated in the worker from (seed, slot): no round trip per request.
    Synthetic(SyntheticSpec),
    /// Read from a prepared table: no round trip per request.
    Table(TableSpec),
    /// A timestamped trace: slot `i` is row `i`, at the row's offset under replay.
    Trace(TraceSpec),
    /// Agent traces: graphs of calls, each call due when its dependencies ended plus its
    /// recorded gap.
    AgentTrace(AgentTraceSpec),
}

impl DataSpec {
    /// Moves every seeded stream of the data (prompt text and lengths, the order of a
    /// shuffled dataset, a trace's block texts) to the streams of (its seed, `stream`,
    /// `index`): a benchmark's own prompts, or the probe's, which no benchmark sends.
    pub fn reseed(&mut self, stream: &str, index: u64) {
        let next = |seed: &mut u64| *seed = crate::seed::derive_seed(*seed, stream, index);
        match self {
            DataSpec::Synthetic(s) => {
                next(&mut s.random_seed);
                next(&mut s.sampling.seed);
            }
            DataSpec::Table(t) => next(&mut t.sampling.seed),
            DataSpec::Trace(t) => next(&mut t.seed),
            DataSpec::AgentTrace(t) => next(&mut t.seed),
        }
    }

    /// Function definitions to send with every request (`tools=N` of a synthetic spec).
    pub fn tools(&self) -> u32 {
        match self {
            DataSpec::Synthetic(s) => s.tools,
            DataSpec::Table(_) | DataSpec::Trace(_) | DataSpec::AgentTrace(_) => 0,
        }
    }

    /// Sticky routing: the header the data's sessions send their id in, if any.
    pub fn session_header(&self) -> Option<&str> {
        match self {
            DataSpec::Synthetic(s) => s.session_header.as_deref(),
            DataSpec::Table(t) => t.session_header.as_deref(),
            DataSpec::Trace(_) | DataSpec::AgentTrace(_) => None,
        }
    }

    /// Requests the data can serve before it ends the benchmark (`None`: unbounded).
    pub fn dataset_len(&self) -> Option<u64> {
        let (len, sampling) = match self {
            DataSpec::Synthetic(s) => (s.samples?, s.sampling),
            DataSpec::Table(t) => (t.requests.unwrap_or(t.rows), t.sampling),
            DataSpec::Trace(t) => return Some(t.rows),
            DataSpec::AgentTrace(t) => return (!t.repeat).then_some(t.calls),
        };
        (!sampling.oversample).then_some(len)
    }
}

/// Which requests are warm-up or cool-down, so the worker can tag each as it finishes.
/// A request is in a window if its slot or its scheduled instant falls in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasureWindow {
    /// Slots below this are warm-up.
    pub warmup_slots: Option<u64>,
    /// Requests scheduled before `t0 + this` are warm-up.
    pub warmup_time: Option<Duration>,
    /// Slots at or above this are cool-down.
    pub cooldown_from_slot: Option<u64>,
    /// Requests scheduled at or after `t0 + this` are cool-down.
    pub cooldown_from_time: Option<Duration>,
}

impl MeasureWindow {
    /// The phase of the request of `slot`, scheduled `since_t0` after the group's start.
    /// Workers tag their records with it; the coordinator tags the requests of a dead
    /// worker with it.
    pub fn phase(&self, slot: u64, since_t0: Duration) -> crate::record::Phase {
        use crate::record::Phase;
        if self.warmup_slots.is_some_and(|n| slot < n)
            || self.warmup_time.is_some_and(|d| since_t0 < d)
        {
            Phase::Warmup
        } else if self.cooldown_from_slot.is_some_and(|n| slot >= n)
            || self.cooldown_from_time.is_some_and(|d| since_t0 >= d)
        {
            Phase::Cooldown
        } else {
            Phase::Measured
        }
    }
}

/// This process's part of a load split over several client hosts (`--shard K/N`): slot
/// `i` of the single-host schedule belongs to shard `i mod count`, so the shards' slots
/// together are exactly that schedule. `Shard::WHOLE` (0/1) is a single host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shard {
    /// K, from 0.
    pub index: u32,
    /// N, at least 1.
    pub count: u32,
}

impl Shard {
    /// The whole load on one host.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };
}

impl Default for Shard {
    fn default() -> Self {
        Shard::WHOLE
    }
}

impl Shard {
    /// Whether the load is split over more than one host.
    pub fn is_split(self) -> bool {
        self.count > 1
    }

    /// How many of the single host's slots (or streams, or concurrency units) `0..total`
    /// belong to this shard: those `i` with `i mod N = K`, i.e. `total / N`, plus one for
    /// the first `total mod N` shards. `UNLIMITED` (`u64::MAX`) stays unlimited. The
    /// shares of all N shards add up to `total`.
    pub fn share(self, total: u64) -> u64 {
        if total == u64::MAX {
            return total;
        }
        let (n, k) = (u64::from(self.count.max(1)), u64::from(self.index));
        total / n + u64::from(k < total % n)
    }

    /// The single host's index of this shard's `local`-th slot (or stream): `K + local × N`.
    /// Shard 0/1 maps every index to itself.
    pub fn global(self, local: u64) -> u64 {
        let n = u64::from(self.count.max(1));
        local
            .saturating_mul(n)
            .saturating_add(u64::from(self.index))
    }
}

/// Everything one worker needs to run its part of one benchmark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// This worker's index in the group, `0..worker_count`.
    pub worker_id: u32,
    /// Workers in the group.
    pub worker_count: u32,
    /// The run seed; every random stream derives from (seed, stream name, slot).
    pub seed: u64,
    /// The target.
    pub backend: BackendConfig,
    /// The strategy.
    pub schedule: Schedule,
    /// The payloads.
    pub data: DataSpec,
    /// Warm-up and cool-down.
    pub window: MeasureWindow,
    /// How often to send a batch of updates to the coordinator.
    pub flush_interval: Duration,
    /// This host's part of a multi-host load: the worker maps the group's local slot
    /// claims (and its streams) to the single host's indices through it.
    #[serde(default)]
    pub shard: Shard,
    /// `--lora`: the model names requests are split over, by weight. Absent: every
    /// request names the configured model and no per-model metrics are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraSpec>,
    /// Agentic client behaviours (`--cancel`, `--max-prefill-concurrency`).
    #[serde(default, skip_serializing_if = "crate::config::is_default")]
    pub behaviour: ClientBehaviour,
}

/// The agentic client behaviours of a benchmark (absent: none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientBehaviour {
    /// `--cancel`: clients that give up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<crate::agentic::CancelSpec>,
    /// `--max-prefill-concurrency`: the most requests in flight before their first
    /// token, group-wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_prefill_concurrency: Option<u32>,
    /// `--prompt-token-ids`: completions prompts go out as token ids under this
    /// tokenizer (the run's `--processor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<TokenizerRef>,
}

/// Whether a value is its type's default (to leave it out of a message).
pub fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl WorkerConfig {
    /// Benchmark `index`'s own random streams (arrivals, LoRA picks, data: see
    /// [`DataSpec::reseed`]), derived from the run seed: no two benchmarks of a run send
    /// the same prompts unless the workload repeats them, and the same run seed still
    /// gives every benchmark the same ones.
    pub fn reseed(&mut self, stream: &str, index: u64) {
        self.seed = crate::seed::derive_seed(self.seed, stream, index);
        self.data.reseed(stream, index);
    }
}

/// One model of a LoRA traffic split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoraModel {
    /// The model name sent in the request body (an adapter, or the base model).
    pub name: String,
    /// Its share of the requests, in (0, 1]; the weights of a split add up to 1.
    pub weight: f64,
}

/// A LoRA traffic split (`--lora`): each request names one of `models`, picked by weight
/// from a stream seeded by (run seed, `lora`, slot), so the choice is the slot's whatever
/// `--workers` is. A model's position in `models` is its index in records and batches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoraSpec {
    /// The models, in the order given; at most [`LoraSpec::MAX_MODELS`].
    pub models: Vec<LoraModel>,
}

impl LoraSpec {
    /// Most models in one split (indices travel as `u16`; reports stay readable).
    pub const MAX_MODELS: usize = 256;

    /// The models' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.models.iter().map(|m| m.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Shard;

    #[test]
    fn shares_follow_the_residue_classes() {
        let shares: Vec<u64> = (0..3)
            .map(|k| Shard { index: k, count: 3 }.share(10))
            .collect();
        assert_eq!(shares, vec![4, 3, 3]);
        assert_eq!(Shard { index: 1, count: 2 }.share(5), 2);
        assert_eq!(Shard { index: 3, count: 4 }.share(2), 0);
        assert_eq!(Shard::WHOLE.share(7), 7);
        assert_eq!(Shard { index: 1, count: 4 }.share(u64::MAX), u64::MAX);
        assert_eq!(Shard { index: 2, count: 3 }.global(0), 2);
        assert_eq!(Shard { index: 2, count: 3 }.global(4), 14);
        assert_eq!(Shard::WHOLE.global(9), 9);
    }

    mod properties {
        use super::Shard;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// For every N up to 64 and any total M (max-requests, a dataset's length, a
            /// concurrency cap C, a stream count S): the shards' index sets are disjoint,
            /// their union is exactly `0..M`, and their shares add up to M.
            #[test]
            fn shards_partition_the_single_host_schedule(
                count in 1u32..=64,
                total in prop_oneof![0u64..2_000, Just(1u64), any::<u32>().prop_map(u64::from)],
            ) {
                let shards: Vec<Shard> = (0..count).map(|index| Shard { index, count }).collect();
                let shares: Vec<u64> = shards.iter().map(|s| s.share(total)).collect();
                prop_assert_eq!(shares.iter().sum::<u64>(), total);
                // Shares differ by at most one, larger ones first.
                prop_assert!(shares.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
                if total <= 2_000 {
                    let mut seen = vec![false; total as usize];
                    for s in &shards {
                        for local in 0..s.share(total) {
                            let g = s.global(local);
                            prop_assert!(g < total, "{:?} local {} -> {} past {}", s, local, g, total);
                            prop_assert!(!seen[g as usize], "slot {} twice", g);
                            prop_assert_eq!(g % u64::from(count), u64::from(s.index));
                            seen[g as usize] = true;
                        }
                        // The next local index is past the total: a shard never claims beyond.
                        prop_assert!(s.global(s.share(total)) >= total);
                    }
                    prop_assert!(seen.iter().all(|&b| b), "union is 0..{}", total);
                }
            }
        }
    }
}
