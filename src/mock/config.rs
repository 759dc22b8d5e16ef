//! The mock server's settings: flags, `LLMSURGE_MOCK_*` environment variables, defaults
//! and validation. Every knob is documented in docs/mock-server.md.

use std::net::{IpAddr, Ipv4Addr};

use clap::{Args, CommandFactory, FromArgMatches, Parser};
use serde::Serialize;

use super::error::MockError;
use llmsurge_proto::Secret;

/// The header of llmsurge's pre-run probe requests. The mock answers them from a twin
/// with no faults and its own counters, so a probe never shows in `/stats` nor shifts
/// the seeded draws of the benchmark's requests; real servers ignore the header.
pub const PROBE_HEADER: &str = "x-llmsurge-probe";

/// `--replicas` at most: each replica's prefix cache is made at start.
pub const MAX_REPLICAS: u32 = 1024;

/// Default bind address: loopback only, a mock has no business on a public interface.
pub const DEFAULT_HOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Default port of the CLI (vLLM's); `MockConfig::from_env` uses 0 (ephemeral) instead.
pub const DEFAULT_PORT: u16 = 8000;
/// Default served model name.
pub const DEFAULT_MODEL: &str = "llmsurge-mock";
/// Default seed of every random stream.
pub const DEFAULT_SEED: u64 = 0;
/// Default time to first token in ms (mean), before the prefill: a small model on one
/// GPU (see docs/mock-server.md, "The defaults").
pub const DEFAULT_TTFT_MS: f64 = 20.0;
/// Default standard deviation of the time to first token, ms.
pub const DEFAULT_TTFT_MS_STD: f64 = 4.0;
/// Default prefill cost in ms per prompt token not found in the prefix cache (25,000
/// prompt tokens/s).
pub const DEFAULT_TTFT_MS_PER_PROMPT_TOKEN: f64 = 0.04;
/// Default inter-token latency in ms (mean) with no other active request.
pub const DEFAULT_ITL_MS: f64 = 6.0;
/// Default standard deviation of the inter-token latency, ms.
pub const DEFAULT_ITL_MS_STD: f64 = 1.0;
/// Default extra inter-token latency in ms per active request (batching slow-down).
pub const DEFAULT_ITL_MS_PER_ACTIVE: f64 = 0.02;
/// Default output length in tokens (the mean of the distribution).
pub const DEFAULT_OUTPUT_TOKENS: u32 = 128;
/// Default standard deviation of the output length, tokens.
pub const DEFAULT_OUTPUT_TOKENS_STD: f64 = 32.0;
/// Output length of the zero-latency mock ([`MockConfig::instant`], `--instant`): short
/// and fixed, so tests and client benchmarks measure the client, not the model.
pub const INSTANT_OUTPUT_TOKENS: u32 = 16;
/// Default context window reported by `/tokenize` and `/v1/models`.
pub const DEFAULT_MAX_MODEL_LEN: u32 = 32_768;
/// Default number of tokio worker threads.
pub const DEFAULT_WORKERS: usize = 1;
/// The longest latency any setting takes, in ms (a day): longer is a typo, and it would
/// overflow the clock arithmetic of a response's deadlines.
pub const MAX_LATENCY_MS: f64 = 86_400_000.0;
/// The most tokens one response may carry (output or reasoning): keeps every count and
/// their sums inside `u32`.
pub const MAX_TOKENS: u32 = 10_000_000;
/// Bounds of `--prompt-tokens-scale`.
pub const PROMPT_TOKENS_SCALE_RANGE: std::ops::RangeInclusive<f64> = 0.01..=100.0;
/// Default bound of `--record` (lines).
pub const DEFAULT_RECORD_LIMIT: u64 = 10_000;
/// Prefix shared by every environment variable of the mock.
pub const ENV_PREFIX: &str = "LLMSURGE_MOCK_";
/// Default probability that a draft token is accepted (`--spec-decode-acceptance`).
pub const DEFAULT_SPEC_DECODE_ACCEPTANCE: f64 = 0.7;
/// The most draft tokens per speculative-decoding step.
pub const MAX_SPEC_DECODE_DRAFT_TOKENS: u32 = 64;
/// Default KV-cache capacity in tokens, the denominator of `vllm:kv_cache_usage_perc`.
pub const DEFAULT_KV_CACHE_TOKENS: u64 = 65_536;
/// The engine version the mock states unless `--engine-version` says another.
pub const DEFAULT_ENGINE_VERSION: &str = "0.0.0+llmsurge.mock";

/// How `GET /metrics` misbehaves on purpose (`--metrics-fault`), to test scrapers.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MetricsFault {
    /// HTTP 500 with a short text body.
    Error,
    /// HTTP 200 with a body that is not the Prometheus text format.
    Garbage,
    /// No answer at all: the request is read and never answered.
    Hang,
}

/// Every setting of the mock server. Times are milliseconds, rates are probabilities.
#[derive(Args, Clone, Debug, Serialize, PartialEq)]
pub struct MockConfig {
    /// Address to bind.
    #[arg(long, env = "LLMSURGE_MOCK_HOST", default_value_t = DEFAULT_HOST)]
    pub host: IpAddr,

    /// TCP port to bind; 0 picks a free ephemeral port (the bound address is printed as
    /// the first line on stdout: `listening on http://HOST:PORT`).
    #[arg(long, env = "LLMSURGE_MOCK_PORT", default_value_t = DEFAULT_PORT)]
    pub port: u16,

    /// Served model name; repeat the flag (or comma-separate in the env var) to serve
    /// several. Requests naming another model get 404; a request with no model gets the
    /// first one.
    #[arg(
        long = "model",
        env = "LLMSURGE_MOCK_MODEL",
        value_delimiter = ',',
        default_values_t = [DEFAULT_MODEL.to_string()]
    )]
    pub model: Vec<String>,

    /// Seed of every random draw (latencies, lengths, text, faults). Each request draws
    /// from streams derived from (seed, request sequence number), so a sequential client
    /// sees the same responses on every run.
    #[arg(long, env = "LLMSURGE_MOCK_SEED", default_value_t = DEFAULT_SEED)]
    pub seed: u64,

    /// Time to first token in ms (mean), counted from the moment the request gets a
    /// concurrency slot; the prefill (`--ttft-ms-per-prompt-token`) comes on top.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_TTFT_MS",
        default_value_t = DEFAULT_TTFT_MS,
        allow_negative_numbers = true
    )]
    pub ttft_ms: f64,

    /// Standard deviation of the time to first token in ms (normal, clamped at 0).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_TTFT_MS_STD",
        default_value_t = DEFAULT_TTFT_MS_STD,
        allow_negative_numbers = true
    )]
    pub ttft_ms_std: f64,

    /// Prefill time in ms per prompt token not found in the prefix cache, added to the
    /// time to first token (so TTFT grows with prompt length).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_TTFT_MS_PER_PROMPT_TOKEN",
        default_value_t = DEFAULT_TTFT_MS_PER_PROMPT_TOKEN,
        allow_negative_numbers = true
    )]
    pub ttft_ms_per_prompt_token: f64,

    /// Inter-token latency in ms (mean) with no other active request.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_ITL_MS",
        default_value_t = DEFAULT_ITL_MS,
        allow_negative_numbers = true
    )]
    pub itl_ms: f64,

    /// Standard deviation of the inter-token latency in ms (normal, clamped at 0).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_ITL_MS_STD",
        default_value_t = DEFAULT_ITL_MS_STD,
        allow_negative_numbers = true
    )]
    pub itl_ms_std: f64,

    /// Extra inter-token latency in ms per active request: itl = itl-ms + X * active,
    /// where active counts the requests holding a slot when the token is produced.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_ITL_MS_PER_ACTIVE",
        default_value_t = DEFAULT_ITL_MS_PER_ACTIVE,
        allow_negative_numbers = true
    )]
    pub itl_ms_per_active: f64,

    /// Output length in tokens (mean). Without `ignore_eos` a request gets
    /// min(max_tokens, max(sampled length, min_tokens)); with `ignore_eos` exactly
    /// max_tokens.
    #[arg(long, env = "LLMSURGE_MOCK_OUTPUT_TOKENS", default_value_t = DEFAULT_OUTPUT_TOKENS)]
    pub output_tokens: u32,

    /// Standard deviation of the output length in tokens (normal, rounded, at least 1).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_OUTPUT_TOKENS_STD",
        default_value_t = DEFAULT_OUTPUT_TOKENS_STD,
        allow_negative_numbers = true
    )]
    pub output_tokens_std: f64,

    /// Latency of a non-streaming response in ms, from getting a slot to the response.
    /// Default: what the stream would take, ttft + (tokens - 1) * itl.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_REQUEST_LATENCY",
        allow_negative_numbers = true
    )]
    pub request_latency: Option<f64>,

    /// Concurrency slots (unlimited when unset). Requests beyond N wait in a FIFO queue
    /// before their TTFT clock starts; a request holds its slot until its response ends.
    /// `--max-num-seqs` (vLLM's name for the same limit) is an alias. Given more than
    /// once (a sweep's template and its serve parameter), the last wins, as in vLLM.
    #[arg(
        long,
        visible_alias = "max-num-seqs",
        env = "LLMSURGE_MOCK_MAX_CONCURRENCY",
        overrides_with = "max_concurrency"
    )]
    pub max_concurrency: Option<usize>,

    /// Tokens carried by each SSE chunk; a chunk is sent when its last token is ready.
    #[arg(long, env = "LLMSURGE_MOCK_TOKENS_PER_CHUNK", default_value_t = 1)]
    pub tokens_per_chunk: u32,

    /// Reasoning tokens streamed as `delta.reasoning_content` before the content (chat,
    /// responses and messages); they count in usage.completion_tokens and against
    /// max_tokens, as vLLM counts them (a cap of R or less leaves one answer token).
    #[arg(long, env = "LLMSURGE_MOCK_REASONING_TOKENS", default_value_t = 0)]
    pub reasoning_tokens: u32,

    /// Context window in tokens, reported by `/tokenize` and `/v1/models`; a max_tokens
    /// above it is rejected with 400 (prompt lengths are not checked).
    #[arg(long, env = "LLMSURGE_MOCK_MAX_MODEL_LEN", default_value_t = DEFAULT_MAX_MODEL_LEN)]
    pub max_model_len: u32,

    /// Probability that a generation request is answered HTTP 500 or 429 (half each)
    /// with an OpenAI-style error body.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_ERROR_RATE",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub error_rate: f64,

    /// Probability that a generation response is cut mid-body (HTTP/1.1: the connection
    /// is closed with the chunked body unterminated; HTTP/2: the stream is reset).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_DROP_RATE",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub drop_rate: f64,

    /// Probability that a stream carries one malformed SSE event (truncated JSON); the
    /// stream then goes on normally. A non-streaming response gets truncated JSON.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_GARBAGE_RATE",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub garbage_rate: f64,

    /// Probability that a response stops sending after some tokens while keeping the
    /// connection (and its slot) until the client goes away.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_STALL_RATE",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub stall_rate: f64,

    /// Probability that a generation request's connection is closed after the request
    /// was read but before any response headers (HTTP/2: the stream is reset).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_CLOSE_RATE",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub close_rate: f64,

    /// Probability that a chat, Responses or Messages request that offers tools is
    /// answered with a call of one of them (its arguments are the output tokens) instead
    /// of text.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_TOOL_CALL_RATE",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub tool_call_rate: f64,

    /// Tokio worker threads serving requests (1: a single-threaded runtime).
    #[arg(long, env = "LLMSURGE_MOCK_WORKERS", default_value_t = DEFAULT_WORKERS)]
    pub workers: usize,

    /// Ignore the request fields `ignore_eos` and `min_tokens`, as a gateway that drops
    /// them does: each request then stops where the model would, at a length drawn from
    /// --output-tokens / --output-tokens-std (seeded per request), when that is shorter
    /// than its max_tokens (finish reason `stop`), else at max_tokens (`length`).
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_MOCK_DROP_IGNORE_EOS")]
    pub drop_ignore_eos: bool,

    /// Answer a generation request that carries a body field outside the OpenAI API
    /// (e.g. vLLM's `ignore_eos`) with HTTP 422 naming the field, like a strict server
    /// (transformers serve, OpenAI's own API).
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_MOCK_REJECT_UNKNOWN_FIELDS")]
    pub reject_unknown_fields: bool,

    /// Put one event of a type the API does not define (yet) into every `/v1/responses`
    /// and `/v1/messages` stream, after the first token, as a newer server might: a client
    /// must skip it where the API says unknown events are to be ignored.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_MOCK_UNKNOWN_EVENTS")]
    pub unknown_events: bool,

    /// End every `/v1/responses` and `/v1/messages` stream cleanly but without its final
    /// event (`response.completed` / `message_stop`), and every transcription stream
    /// without its finishing chunk and `[DONE]`: a stream the client must not count as
    /// complete.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_MOCK_NO_FINAL_EVENT")]
    pub no_final_event: bool,

    /// Multiplies every prompt length the mock counts (usage.prompt_tokens and the
    /// `/tokenize` count), to imitate a server whose tokenizer splits text differently
    /// from the client's (2: twice as many tokens per word).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_PROMPT_TOKENS_SCALE",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub prompt_tokens_scale: f64,

    /// KV-cache capacity in tokens: `vllm:kv_cache_usage_perc` on `GET /metrics` is the
    /// tokens held by running requests (prompt plus output so far) over this, capped at 1.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_KV_CACHE_TOKENS",
        default_value_t = DEFAULT_KV_CACHE_TOKENS,
        value_name = "N"
    )]
    pub kv_cache_tokens: u64,

    /// Answer `GET /metrics` with 404, like a server that publishes no metrics.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_MOCK_NO_METRICS")]
    pub no_metrics: bool,

    /// Make `GET /metrics` fail after `--metrics-fault-after` good scrapes: `error` (HTTP
    /// 500), `garbage` (200 with text that is not Prometheus') or `hang` (never answers).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_METRICS_FAULT",
        value_enum,
        value_name = "KIND"
    )]
    pub metrics_fault: Option<MetricsFault>,

    /// Scrapes of `GET /metrics` answered normally before `--metrics-fault` starts (0:
    /// from the first one).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_METRICS_FAULT_AFTER",
        default_value_t = 0,
        value_name = "N"
    )]
    pub metrics_fault_after: u64,

    /// Answer `POST /start_profile` and `POST /stop_profile` with 404, like a server
    /// started without a profiler.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_MOCK_NO_PROFILER")]
    pub no_profiler: bool,

    /// Also publish a DCGM exporter's series on `GET /metrics` for N GPUs
    /// (`DCGM_FI_DEV_POWER_USAGE`, `DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_FB_USED`, and the
    /// energy counter `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` in mJ, consistent with the
    /// power; labelled `gpu`), for `--gpu-metrics URL` (0: none).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_DCGM_GPUS",
        default_value_t = 0,
        value_name = "N"
    )]
    pub dcgm_gpus: u32,

    /// The power each DCGM GPU reports, W.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_DCGM_POWER_W",
        default_value_t = 300.0,
        value_name = "W"
    )]
    pub dcgm_power_w: f64,

    /// Model speculative decoding with K draft tokens per step (0: off): `GET /metrics`
    /// then publishes vLLM's spec-decode counters. Latencies are not affected.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_SPEC_DECODE_DRAFT_TOKENS",
        default_value_t = 0,
        value_name = "K"
    )]
    pub spec_decode_draft_tokens: u32,

    /// Probability that each draft token is accepted (default 0.7; needs
    /// `--spec-decode-draft-tokens`).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_SPEC_DECODE_ACCEPTANCE",
        value_name = "P",
        allow_negative_numbers = true
    )]
    pub spec_decode_acceptance: Option<f64>,

    /// Append every chat, completions and embeddings request received to this JSONL
    /// file (endpoint, model, body, arrival time), up to `--record-limit` lines: what
    /// tests read to check what a client sent.
    #[arg(long, env = "LLMSURGE_MOCK_RECORD", value_name = "PATH")]
    pub record: Option<std::path::PathBuf>,

    /// Write what the server did with every generation and pooling request to this JSONL
    /// file, one line each, keyed by its x-request-id: arrival, head sent, each chunk's
    /// send instant and tokens (reasoning and content apart), end, and outcome (completed,
    /// fault injected, client gone). Times are Unix seconds on the same clock as
    /// llmsurge's --request-log; buffered, complete once the server stopped.
    #[arg(long, env = "LLMSURGE_MOCK_TRUTH", value_name = "PATH")]
    pub truth: Option<std::path::PathBuf>,

    /// Lines `--record` writes at most; later requests are counted in `/stats` as
    /// not recorded (the file stays bounded).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_RECORD_LIMIT",
        value_name = "N",
        default_value_t = DEFAULT_RECORD_LIMIT
    )]
    pub record_limit: u64,

    /// With `--record`: also record these request headers in each line (repeatable or a
    /// comma list; `"headers": {"NAME": "value"}`, null when the request had none; values
    /// cut at 256 bytes), e.g. the session header of sticky routing. Like every output
    /// of llmsurge, a value is written only for a harmless header (content-type, accept,
    /// user-agent, anthropic-version, x-request-id, x-session-id, the routers' session keys) or one named by
    /// --show-header; any other, as an API key, is written as <redacted>.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_RECORD_HEADER",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub record_header: Vec<String>,

    /// With `--record`: write this header's value in the record file although it may be
    /// a credential (repeatable or a comma list), e.g. to check that a client sent it.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_SHOW_HEADER",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub show_header: Vec<String>,

    /// With `--record`: write this query parameter's value in the record file (repeatable
    /// or a comma list). Each line's `query` keeps every name; other values are written
    /// as <redacted>.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_SHOW_QUERY_PARAM",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub show_query_param: Vec<String>,

    /// Serve HTTPS with this certificate chain (PEM, the leaf first); needs --tls-key.
    /// HTTP/1.1 and HTTP/2 are chosen by ALPN.
    #[arg(long, env = "LLMSURGE_MOCK_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The private key (PEM) of --tls-cert (its path is shown by `config` as a secret's
    /// would be; its contents never).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_TLS_KEY",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub tls_key: Option<std::path::PathBuf>,

    /// Mutual TLS: require every client to present a certificate signed by a CA of this
    /// PEM bundle, and refuse the handshake of one that presents none or another
    /// (needs --tls-cert).
    #[arg(long, env = "LLMSURGE_MOCK_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<std::path::PathBuf>,

    /// Require this API key on every route, as a gateway does (/stats and /stats/reset,
    /// the mock's own truth channel, excepted): a request without it is answered 401 and
    /// counted in /stats `unauthorized`. Never logged, recorded or shown by `config`.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_REQUIRE_API_KEY",
        value_name = "KEY",
        hide_env_values = true,
        value_parser = |s: &str| Ok::<_, std::convert::Infallible>(Secret::new(s))
    )]
    #[serde(skip)]
    pub require_api_key: Option<Secret>,

    /// The header that carries --require-api-key: `authorization` takes `Bearer KEY`,
    /// any other (x-api-key, api-key, Ocp-Apim-Subscription-Key) the key alone.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_API_KEY_HEADER",
        value_name = "NAME",
        default_value = "authorization"
    )]
    pub api_key_header: String,

    /// The status `GET /health` answers (e.g. 500 or 401, as a gateway's health route
    /// can while the models answer), to test clients that check it.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_HEALTH_STATUS",
        value_name = "CODE",
        default_value_t = 200
    )]
    pub health_status: u16,

    /// The engine version the server states (`GET /version`, `/server_info`, the `server`
    /// header), as vLLM states its own: what a report's server fingerprint reads.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_ENGINE_VERSION",
        value_name = "VERSION",
        default_value = DEFAULT_ENGINE_VERSION
    )]
    pub engine_version: String,

    /// Hand out a session token, as a router or gateway that pins a session does: a
    /// request that carries none gets a fresh one (`mock-token-N`) in response header
    /// NAME (`header:NAME`) or a `Set-Cookie: NAME=…` (`cookie:NAME`). With `--record`,
    /// each line says the token the request carried (`token`) and the one handed out
    /// (`issued_token`).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_ISSUE_SESSION_TOKEN",
        value_name = "header:NAME|cookie:NAME"
    )]
    pub issue_session_token: Option<String>,

    /// Split the prefix cache into `--replicas` caches of an equal share of
    /// --kv-cache-tokens, as replicas behind a router: a request goes to the replica its
    /// header NAME hashes to, one without the header to the next replica in turn. Prefix
    /// hits then need the client's affinity key.
    #[arg(long, env = "LLMSURGE_MOCK_PREFIX_CACHE_BY", value_name = "NAME")]
    pub prefix_cache_by: Option<String>,

    /// With --prefix-cache-by: how many replicas' caches (at most 1024).
    #[arg(
        long,
        env = "LLMSURGE_MOCK_REPLICAS",
        default_value_t = 4,
        value_name = "N"
    )]
    pub replicas: u32,

    /// The `root` of the --model names in `/v1/models` and `/server_info` (vLLM lists the
    /// model's path or hub id there, the name being `--served-model-name`); each name's
    /// own by default.
    #[arg(long, env = "LLMSURGE_MOCK_MODEL_ROOT", value_name = "PATH")]
    pub model_root: Option<String>,

    /// Whether the prefix cache is on (`--enable-prefix-caching`, the default, or
    /// `--no-enable-prefix-caching`): off, no prompt hits it.
    #[arg(skip = true)]
    pub prefix_caching: bool,

    /// The LoRA adapters among the --model names (`--lora-modules`), each with the path it
    /// was given (its name when none): `/v1/models` lists them with the first --model
    /// name as their parent, as vLLM does.
    #[arg(skip)]
    pub lora_adapters: Vec<(String, String)>,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            host: DEFAULT_HOST,
            port: DEFAULT_PORT,
            model: vec![DEFAULT_MODEL.to_string()],
            seed: DEFAULT_SEED,
            ttft_ms: DEFAULT_TTFT_MS,
            ttft_ms_std: DEFAULT_TTFT_MS_STD,
            ttft_ms_per_prompt_token: DEFAULT_TTFT_MS_PER_PROMPT_TOKEN,
            itl_ms: DEFAULT_ITL_MS,
            itl_ms_std: DEFAULT_ITL_MS_STD,
            itl_ms_per_active: DEFAULT_ITL_MS_PER_ACTIVE,
            output_tokens: DEFAULT_OUTPUT_TOKENS,
            output_tokens_std: DEFAULT_OUTPUT_TOKENS_STD,
            request_latency: None,
            max_concurrency: None,
            tokens_per_chunk: 1,
            reasoning_tokens: 0,
            max_model_len: DEFAULT_MAX_MODEL_LEN,
            error_rate: 0.0,
            drop_rate: 0.0,
            garbage_rate: 0.0,
            stall_rate: 0.0,
            close_rate: 0.0,
            tool_call_rate: 0.0,
            workers: DEFAULT_WORKERS,
            reject_unknown_fields: false,
            drop_ignore_eos: false,
            unknown_events: false,
            no_final_event: false,
            prompt_tokens_scale: 1.0,
            kv_cache_tokens: DEFAULT_KV_CACHE_TOKENS,
            no_metrics: false,
            metrics_fault: None,
            metrics_fault_after: 0,
            no_profiler: false,
            dcgm_gpus: 0,
            dcgm_power_w: 300.0,
            spec_decode_draft_tokens: 0,
            spec_decode_acceptance: None,
            record: None,
            truth: None,
            record_limit: DEFAULT_RECORD_LIMIT,
            record_header: Vec::new(),
            show_header: Vec::new(),
            show_query_param: Vec::new(),
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            require_api_key: None,
            api_key_header: "authorization".into(),
            health_status: 200,
            engine_version: DEFAULT_ENGINE_VERSION.into(),
            model_root: None,
            issue_session_token: None,
            prefix_cache_by: None,
            replicas: 4,
            prefix_caching: true,
            lora_adapters: Vec::new(),
        }
    }
}

/// The mock server's command line: every setting, plus `--instant`, which changes the
/// defaults of the latency and length settings (see [`MockServerArgs::resolve`]).
#[derive(Args, Clone, Debug)]
pub struct MockServerArgs {
    /// Every setting.
    #[command(flatten)]
    pub config: MockConfig,

    /// A zero-latency mock: TTFT, prefill, ITL, their deviations and the per-active
    /// slow-down 0, output length exactly 16 tokens. A latency or length setting given
    /// explicitly (flag or environment variable) still wins.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_INSTANT",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub instant: bool,

    /// LoRA adapters served besides the --model names, as vLLM's `--lora-modules` takes
    /// them: `name` or `name=path` (the path is ignored: the mock has no weights). Each
    /// is one more served name, listed in /v1/models and counted in /stats `models`.
    #[arg(
        long = "lora-modules",
        env = "LLMSURGE_MOCK_LORA_MODULES",
        value_delimiter = ',',
        num_args = 1..,
        value_name = "NAME[=PATH]"
    )]
    pub lora_modules: Vec<String>,

    /// vLLM's `--enable-prefix-caching` (the default): prompts that share a prefix hit
    /// the prefix cache; `/metrics` states it in `vllm:cache_config_info`.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_ENABLE_PREFIX_CACHING",
        overrides_with = "no_enable_prefix_caching"
    )]
    pub enable_prefix_caching: bool,

    /// vLLM's `--no-enable-prefix-caching`: the prefix cache is off (no prompt hits it;
    /// its queries are still counted), and `/metrics` and `/server_info` say so.
    #[arg(
        long,
        env = "LLMSURGE_MOCK_NO_ENABLE_PREFIX_CACHING",
        overrides_with = "enable_prefix_caching"
    )]
    pub no_enable_prefix_caching: bool,
}

impl MockServerArgs {
    /// The configuration these arguments give: with `--instant`, every latency and length
    /// setting that `matches` (the arguments' own matches) does not show as given on the
    /// command line or in the environment takes its [`MockConfig::instant`] value.
    pub fn resolve(self, matches: &clap::ArgMatches) -> MockConfig {
        let mut config = self.config;
        config.prefix_caching = !self.no_enable_prefix_caching;
        // Served after the base names; an empty or repeated name fails validation.
        config.lora_adapters = self
            .lora_modules
            .iter()
            .map(|m| match m.split_once('=') {
                Some((name, path)) => (name.trim().to_string(), path.trim().to_string()),
                None => (m.trim().to_string(), m.trim().to_string()),
            })
            .collect();
        config
            .model
            .extend(config.lora_adapters.iter().map(|(name, _)| name.clone()));
        if !self.instant {
            return config;
        }
        let instant = MockConfig::instant();
        let explicit = |id: &str| {
            matches
                .value_source(id)
                .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue)
        };
        macro_rules! unless_explicit {
            ($($field:ident),*) => {
                $(if !explicit(stringify!($field)) {
                    config.$field = instant.$field;
                })*
            };
        }
        unless_explicit!(
            ttft_ms,
            ttft_ms_std,
            ttft_ms_per_prompt_token,
            itl_ms,
            itl_ms_std,
            itl_ms_per_active,
            output_tokens,
            output_tokens_std
        );
        config
    }
}

/// Whether a value of `LLMSURGE_MOCK_INSTANT` turns `--instant` on (the values clap's
/// `BoolishValueParser` reads as true).
pub fn instant_is_on(value: &str) -> bool {
    ["y", "yes", "t", "true", "on", "1"].contains(&value.trim().to_ascii_lowercase().as_str())
}

/// The environment variables of the settings `--instant` changes, each with the value it
/// gives them: `llmsurge config` prints these as the effective values, so that a dumped
/// `.env` (where every setting is explicit) gives the same mock when loaded back.
pub fn instant_env_values() -> Vec<(&'static str, String)> {
    let i = MockConfig::instant();
    vec![
        ("LLMSURGE_MOCK_TTFT_MS", i.ttft_ms.to_string()),
        ("LLMSURGE_MOCK_TTFT_MS_STD", i.ttft_ms_std.to_string()),
        (
            "LLMSURGE_MOCK_TTFT_MS_PER_PROMPT_TOKEN",
            i.ttft_ms_per_prompt_token.to_string(),
        ),
        ("LLMSURGE_MOCK_ITL_MS", i.itl_ms.to_string()),
        ("LLMSURGE_MOCK_ITL_MS_STD", i.itl_ms_std.to_string()),
        (
            "LLMSURGE_MOCK_ITL_MS_PER_ACTIVE",
            i.itl_ms_per_active.to_string(),
        ),
        ("LLMSURGE_MOCK_OUTPUT_TOKENS", i.output_tokens.to_string()),
        (
            "LLMSURGE_MOCK_OUTPUT_TOKENS_STD",
            i.output_tokens_std.to_string(),
        ),
    ]
}

/// Parses `MockConfig` from the environment alone (no command-line arguments).
#[derive(Parser, Debug)]
#[command(name = "mock-server", no_binary_name = true)]
struct EnvOnly {
    #[command(flatten)]
    args: MockServerArgs,
}

impl MockConfig {
    /// `--issue-session-token`: where the token goes; `Ok(None)` when not asked.
    pub fn session_token(&self) -> Result<Option<llmsurge_proto::affinity::SessionToken>, String> {
        use llmsurge_proto::affinity::SessionToken;
        let Some(raw) = &self.issue_session_token else {
            return Ok(None);
        };
        let valid = |name: &str| hyper::header::HeaderName::from_bytes(name.as_bytes()).is_ok();
        match raw.split_once(':') {
            Some(("header", name)) if valid(name) => {
                Ok(Some(SessionToken::Header(name.to_ascii_lowercase())))
            }
            Some(("cookie", name)) if valid(name) => Ok(Some(SessionToken::Cookie(name.into()))),
            _ => Err(format!(
                "{raw:?}: give header:NAME or cookie:NAME with a valid name"
            )),
        }
    }

    /// The zero-latency mock (`--instant`): no TTFT, prefill, inter-token gap, jitter or
    /// batching slow-down, and exactly [`INSTANT_OUTPUT_TOKENS`] output tokens unless the
    /// request sets the length. What tests and client benchmarks start from.
    pub fn instant() -> Self {
        MockConfig {
            ttft_ms: 0.0,
            ttft_ms_std: 0.0,
            ttft_ms_per_prompt_token: 0.0,
            itl_ms: 0.0,
            itl_ms_std: 0.0,
            itl_ms_per_active: 0.0,
            output_tokens: INSTANT_OUTPUT_TOKENS,
            output_tokens_std: 0.0,
            ..MockConfig::default()
        }
    }

    /// Checks ranges and consistency; the message names the flag and the bad value.
    pub fn validate(&self) -> Result<(), MockError> {
        let non_negative = [
            ("--ttft-ms", self.ttft_ms),
            ("--ttft-ms-std", self.ttft_ms_std),
            ("--ttft-ms-per-prompt-token", self.ttft_ms_per_prompt_token),
            ("--itl-ms", self.itl_ms),
            ("--itl-ms-std", self.itl_ms_std),
            ("--itl-ms-per-active", self.itl_ms_per_active),
            ("--output-tokens-std", self.output_tokens_std),
        ];
        for (flag, value) in non_negative
            .into_iter()
            .chain(self.request_latency.map(|v| ("--request-latency", v)))
        {
            if !value.is_finite() || value < 0.0 {
                return Err(invalid(
                    flag,
                    format!("must be a finite number >= 0, got {value}"),
                ));
            }
            if flag != "--output-tokens-std" && value > MAX_LATENCY_MS {
                return Err(invalid(
                    flag,
                    format!("must be at most {MAX_LATENCY_MS} ms (a day), got {value:e}"),
                ));
            }
        }
        if !PROMPT_TOKENS_SCALE_RANGE.contains(&self.prompt_tokens_scale) {
            return Err(invalid(
                "--prompt-tokens-scale",
                format!(
                    "must be in [{}, {}], got {}",
                    PROMPT_TOKENS_SCALE_RANGE.start(),
                    PROMPT_TOKENS_SCALE_RANGE.end(),
                    self.prompt_tokens_scale
                ),
            ));
        }
        for (flag, value) in [
            ("--output-tokens", self.output_tokens),
            ("--reasoning-tokens", self.reasoning_tokens),
        ] {
            if value > MAX_TOKENS {
                return Err(invalid(
                    flag,
                    format!("must be at most {MAX_TOKENS}, got {value}"),
                ));
            }
        }
        let rates = [
            ("--error-rate", self.error_rate),
            ("--drop-rate", self.drop_rate),
            ("--garbage-rate", self.garbage_rate),
            ("--stall-rate", self.stall_rate),
            ("--close-rate", self.close_rate),
        ];
        for (flag, value) in rates
            .into_iter()
            .chain([("--tool-call-rate", self.tool_call_rate)])
        {
            if !(0.0..=1.0).contains(&value) {
                return Err(invalid(flag, format!("must be in [0, 1], got {value}")));
            }
        }
        // One fault at most per request: the rates partition [0, 1), so they must fit in it.
        let total: f64 = rates.iter().map(|(_, v)| v).sum();
        if total > 1.0 + 1e-9 {
            return Err(invalid(
                "--error-rate + --drop-rate + --garbage-rate + --stall-rate + --close-rate",
                format!("must not exceed 1, got {total}"),
            ));
        }
        if self.output_tokens == 0 {
            return Err(invalid(
                "--output-tokens",
                "must be at least 1, got 0".into(),
            ));
        }
        if self.tokens_per_chunk == 0 {
            return Err(invalid(
                "--tokens-per-chunk",
                "must be at least 1, got 0".into(),
            ));
        }
        if self.max_concurrency == Some(0) {
            return Err(invalid(
                "--max-concurrency",
                "must be at least 1, got 0".into(),
            ));
        }
        // tokio's semaphore holds at most usize::MAX >> 3 permits.
        if self
            .max_concurrency
            .is_some_and(|n| n > tokio::sync::Semaphore::MAX_PERMITS)
        {
            return Err(invalid("--max-concurrency", "is too large".into()));
        }
        if let Some(path) = &self.record {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            if path.is_dir() || dir.is_some_and(|d| !d.is_dir()) {
                return Err(invalid(
                    "--record",
                    format!("{}: not a file in an existing directory", path.display()),
                ));
            }
        }
        if let Some(path) = &self.truth {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            if path.is_dir() || dir.is_some_and(|d| !d.is_dir()) {
                return Err(invalid(
                    "--truth",
                    format!("{}: not a file in an existing directory", path.display()),
                ));
            }
        }
        match (&self.tls_cert, &self.tls_key, &self.tls_client_ca) {
            (Some(_), None, _) => return Err(invalid("--tls-cert", "needs --tls-key".into())),
            (None, Some(_), _) => return Err(invalid("--tls-key", "needs --tls-cert".into())),
            (None, None, Some(_)) => {
                return Err(invalid(
                    "--tls-client-ca",
                    "needs --tls-cert and --tls-key (mutual TLS is TLS)".into(),
                ));
            }
            _ => {}
        }
        for (given, flag) in [
            (!self.record_header.is_empty(), "--record-header"),
            (!self.show_header.is_empty(), "--show-header"),
            (!self.show_query_param.is_empty(), "--show-query-param"),
        ] {
            if given && self.record.is_none() {
                return Err(invalid(
                    flag,
                    "needs --record (the file it records into)".into(),
                ));
            }
        }
        if hyper::header::HeaderName::from_bytes(self.api_key_header.as_bytes()).is_err() {
            return Err(invalid(
                "--api-key-header",
                format!("{:?} is not a valid HTTP header name", self.api_key_header),
            ));
        }
        if let Some(key) = &self.require_api_key
            && (key.expose().is_empty()
                || hyper::header::HeaderValue::from_str(key.expose()).is_err())
        {
            // The key itself is not repeated: it is a secret.
            return Err(invalid(
                "--require-api-key",
                "must be a non-empty header value (printable, no line break)".into(),
            ));
        }
        if !(100..=599).contains(&self.health_status) {
            return Err(invalid(
                "--health-status",
                format!("{} is not an HTTP status (100 to 599)", self.health_status),
            ));
        }
        for name in &self.record_header {
            if hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(invalid(
                    "--record-header",
                    format!("{name:?} is not a valid HTTP header name"),
                ));
            }
        }
        self.session_token()
            .map_err(|e| invalid("--issue-session-token", e))?;
        if let Some(name) = &self.prefix_cache_by
            && hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err()
        {
            return Err(invalid(
                "--prefix-cache-by",
                format!("{name:?} is not a valid HTTP header name"),
            ));
        }
        if self.replicas == 0 {
            return Err(invalid("--replicas", "must be at least 1, got 0".into()));
        }
        // Each replica's cache is made at start: a count past any router's would only
        // take the host's memory.
        if self.replicas > MAX_REPLICAS {
            return Err(invalid(
                "--replicas",
                format!("must be at most {MAX_REPLICAS}, got {}", self.replicas),
            ));
        }
        if self.record_limit == 0 {
            return Err(invalid(
                "--record-limit",
                "must be at least 1, got 0 (leave --record out to record nothing)".into(),
            ));
        }
        if self.kv_cache_tokens == 0 {
            return Err(invalid(
                "--kv-cache-tokens",
                "must be at least 1, got 0".into(),
            ));
        }
        if self.no_metrics && self.metrics_fault.is_some() {
            return Err(invalid(
                "--metrics-fault",
                "cannot be combined with --no-metrics (there is no /metrics to break)".into(),
            ));
        }
        if self.metrics_fault_after > 0 && self.metrics_fault.is_none() {
            return Err(invalid(
                "--metrics-fault-after",
                format!(
                    "needs --metrics-fault (got {} without a fault kind)",
                    self.metrics_fault_after
                ),
            ));
        }
        if self.spec_decode_draft_tokens > MAX_SPEC_DECODE_DRAFT_TOKENS {
            return Err(invalid(
                "--spec-decode-draft-tokens",
                format!(
                    "must be at most {MAX_SPEC_DECODE_DRAFT_TOKENS}, got {}",
                    self.spec_decode_draft_tokens
                ),
            ));
        }
        if let Some(p) = self.spec_decode_acceptance {
            if !(0.0..=1.0).contains(&p) {
                return Err(invalid(
                    "--spec-decode-acceptance",
                    format!("must be in [0, 1], got {p}"),
                ));
            }
            if self.spec_decode_draft_tokens == 0 {
                return Err(invalid(
                    "--spec-decode-acceptance",
                    "needs --spec-decode-draft-tokens (speculative decoding is off)".into(),
                ));
            }
        }
        if self.workers == 0 || self.workers > 1024 {
            return Err(invalid(
                "--workers",
                format!("must be in [1, 1024], got {}", self.workers),
            ));
        }
        if self.model.is_empty() {
            return Err(invalid("--model", "needs at least one name".into()));
        }
        for (i, name) in self.model.iter().enumerate() {
            if name.trim().is_empty() {
                return Err(invalid("--model", "names must not be empty".into()));
            }
            if self.model[..i].contains(name) {
                return Err(invalid("--model", format!("`{name}` is given twice")));
            }
        }
        // Sent in the `server` header: printable ASCII only, and short.
        let v = &self.engine_version;
        if v.is_empty() || v.len() > 128 || !v.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                "--engine-version",
                "must be 1 to 128 printable ASCII characters without spaces (e.g. 0.9.1)".into(),
            ));
        }
        Ok(())
    }

    /// The defaults overridden by `LLMSURGE_MOCK_*` variables, validated; the port
    /// defaults to 0 (ephemeral) here, since this is the in-process mock of `--target mock`.
    pub fn from_env() -> Result<MockConfig, MockError> {
        check_env()?;
        let matches = EnvOnly::command()
            .try_get_matches_from(std::iter::empty::<String>())
            .map_err(|e| MockError::Env(first_line(&e.to_string())))?;
        let mut config = EnvOnly::from_arg_matches(&matches)
            .map_err(|e| MockError::Env(first_line(&e.to_string())))?
            .args
            .resolve(&matches);
        if std::env::var_os("LLMSURGE_MOCK_PORT").is_none() {
            config.port = 0;
        }
        config.validate()?;
        Ok(config)
    }

    /// The first served model name.
    pub fn primary_model(&self) -> &str {
        self.model.first().map_or(DEFAULT_MODEL, String::as_str)
    }
}

/// Rejects `LLMSURGE_MOCK_*` variables that name no setting (a typo must not be ignored).
pub fn check_env() -> Result<(), MockError> {
    let known = known_env_vars();
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(ENV_PREFIX) && !known.iter().any(|k| k == name) {
            return Err(MockError::Env(format!(
                "unknown environment variable {name} (known: {})",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

/// Names of every environment variable the mock reads, from the clap definitions.
pub fn known_env_vars() -> Vec<String> {
    EnvOnly::command()
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect()
}

fn invalid(flag: &str, message: String) -> MockError {
    MockError::InvalidConfig(format!("{flag} {message}"))
}

fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mock_defaults_match_clap_defaults() {
        let matches = EnvOnly::command().try_get_matches_from(std::iter::empty::<String>());
        // Environment variables of the test process would change the answer; skip then.
        if std::env::vars().any(|(k, _)| k.starts_with(ENV_PREFIX)) {
            return;
        }
        let matches = matches.expect("defaults parse");
        let parsed = EnvOnly::from_arg_matches(&matches).expect("defaults parse");
        assert!(!parsed.args.instant);
        assert_eq!(parsed.args.resolve(&matches), MockConfig::default());
    }

    #[test]
    fn mock_validate_rejects_bad_values() {
        let ok = MockConfig::default();
        assert!(ok.validate().is_ok());
        let cases = [
            MockConfig {
                error_rate: 1.5,
                ..ok.clone()
            },
            MockConfig {
                drop_rate: -0.1,
                ..ok.clone()
            },
            MockConfig {
                error_rate: 0.6,
                stall_rate: 0.6,
                ..ok.clone()
            },
            MockConfig {
                ttft_ms: -1.0,
                ..ok.clone()
            },
            MockConfig {
                ttft_ms_per_prompt_token: -0.5,
                ..ok.clone()
            },
            MockConfig {
                itl_ms: f64::NAN,
                ..ok.clone()
            },
            MockConfig {
                ttft_ms: 1e300,
                ..ok.clone()
            },
            MockConfig {
                itl_ms_per_active: 1e12,
                ..ok.clone()
            },
            MockConfig {
                reasoning_tokens: u32::MAX,
                ..ok.clone()
            },
            MockConfig {
                prompt_tokens_scale: 0.0,
                ..ok.clone()
            },
            MockConfig {
                request_latency: Some(-3.0),
                ..ok.clone()
            },
            MockConfig {
                tokens_per_chunk: 0,
                ..ok.clone()
            },
            MockConfig {
                max_concurrency: Some(0),
                ..ok.clone()
            },
            MockConfig {
                workers: 0,
                ..ok.clone()
            },
            MockConfig {
                model: vec![],
                ..ok.clone()
            },
            MockConfig {
                model: vec!["a".into(), "a".into()],
                ..ok.clone()
            },
            MockConfig {
                kv_cache_tokens: 0,
                ..ok.clone()
            },
            MockConfig {
                no_metrics: true,
                metrics_fault: Some(MetricsFault::Error),
                ..ok.clone()
            },
            MockConfig {
                metrics_fault_after: 3,
                ..ok.clone()
            },
            MockConfig {
                spec_decode_draft_tokens: 65,
                ..ok.clone()
            },
            MockConfig {
                spec_decode_draft_tokens: 4,
                spec_decode_acceptance: Some(1.5),
                ..ok.clone()
            },
            MockConfig {
                spec_decode_acceptance: Some(0.5),
                ..ok.clone()
            },
        ];
        for case in cases {
            let err = case.validate().expect_err("must be rejected");
            assert!(!err.to_string().contains('\n'), "one line: {err}");
        }
    }

    /// Parses `args` as the mock's flags (the environment of the test process aside).
    fn parse(args: &[&str]) -> Option<MockConfig> {
        if std::env::vars().any(|(k, _)| k.starts_with(ENV_PREFIX)) {
            return None;
        }
        let matches = EnvOnly::command()
            .try_get_matches_from(args)
            .expect("the flags parse");
        let parsed = EnvOnly::from_arg_matches(&matches).expect("the flags parse");
        Some(parsed.args.resolve(&matches))
    }

    #[test]
    fn mock_takes_vllms_max_num_seqs_last_one_winning_and_its_prefix_caching_flags() {
        // A sweep appends a serve parameter after its template's own flag.
        let Some(c) = parse(&[
            "--max-concurrency",
            "32",
            "--enable-prefix-caching",
            "--max-num-seqs",
            "8",
            "--no-enable-prefix-caching",
        ]) else {
            return;
        };
        assert_eq!(c.max_concurrency, Some(8));
    }

    #[test]
    fn mock_instant_flag_gives_the_instant_config_and_explicit_flags_win() {
        let Some(instant) = parse(&["--instant"]) else {
            return;
        };
        assert_eq!(instant, MockConfig::instant());
        let Some(mixed) = parse(&["--instant", "--ttft-ms", "50", "--output-tokens", "7"]) else {
            return;
        };
        assert_eq!(
            mixed,
            MockConfig {
                ttft_ms: 50.0,
                output_tokens: 7,
                ..MockConfig::instant()
            }
        );
        // Without --instant the explicit flags sit on the realistic defaults.
        let Some(plain) = parse(&["--ttft-ms", "50"]) else {
            return;
        };
        assert_eq!(
            plain,
            MockConfig {
                ttft_ms: 50.0,
                ..MockConfig::default()
            }
        );
    }

    #[test]
    fn mock_default_is_a_small_model_and_instant_is_zero_latency() {
        let d = MockConfig::default();
        assert!(d.ttft_ms > 0.0 && d.ttft_ms_std > 0.0 && d.ttft_ms_per_prompt_token > 0.0);
        assert!(d.itl_ms > 0.0 && d.itl_ms_std > 0.0 && d.itl_ms_per_active > 0.0);
        assert!(d.output_tokens_std > 0.0);
        assert!(d.validate().is_ok());
        let i = MockConfig::instant();
        for v in [
            i.ttft_ms,
            i.ttft_ms_std,
            i.ttft_ms_per_prompt_token,
            i.itl_ms,
            i.itl_ms_std,
            i.itl_ms_per_active,
            i.output_tokens_std,
        ] {
            assert_eq!(v, 0.0);
        }
        assert_eq!(i.output_tokens, INSTANT_OUTPUT_TOKENS);
        // Everything else is the default's.
        assert_eq!(
            MockConfig {
                ttft_ms: d.ttft_ms,
                ttft_ms_std: d.ttft_ms_std,
                ttft_ms_per_prompt_token: d.ttft_ms_per_prompt_token,
                itl_ms: d.itl_ms,
                itl_ms_std: d.itl_ms_std,
                itl_ms_per_active: d.itl_ms_per_active,
                output_tokens: d.output_tokens,
                output_tokens_std: d.output_tokens_std,
                ..i
            },
            d
        );
    }

    #[test]
    fn mock_instant_env_values_are_what_instant_resolves_to() {
        // Every variable --instant changes, set to its listed value, gives instant().
        let Some(_) = parse(&[]) else { return };
        let mut args = vec!["--instant".to_string()];
        for (env, value) in instant_env_values() {
            let flag = EnvOnly::command()
                .get_arguments()
                .find(|a| a.get_env().is_some_and(|e| e == env))
                .and_then(|a| a.get_long())
                .map(|l| format!("--{l}"))
                .expect("a flag reads the variable");
            args.push(flag);
            args.push(value);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(parse(&args), Some(MockConfig::instant()));
        assert_eq!(instant_env_values().len(), 8);
        assert!(instant_is_on("1") && instant_is_on("TRUE") && !instant_is_on("0"));
        assert!(!instant_is_on("false") && !instant_is_on(""));
    }

    #[test]
    fn mock_every_setting_has_an_env_var() {
        let vars = known_env_vars();
        for name in [
            "HOST",
            "PORT",
            "MODEL",
            "SEED",
            "TTFT_MS",
            "ITL_MS_PER_ACTIVE",
            "TTFT_MS_PER_PROMPT_TOKEN",
            "INSTANT",
            "WORKERS",
        ] {
            assert!(vars.contains(&format!("{ENV_PREFIX}{name}")), "{name}");
        }
        let args = EnvOnly::command().get_arguments().count();
        assert_eq!(vars.len(), args, "every flag reads an env var");
    }
}
