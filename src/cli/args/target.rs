//! `benchmark run` flags: where requests go and how they are made.

use super::RequestFormatArg;
use crate::cli::values::parse_positive_duration;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// The most requests `--http2-streams` puts on one connection.
pub const MAX_HTTP2_STREAMS: u32 = 10_000;

/// Where requests go and how they are made.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Target")]
pub struct TargetArgs {
    /// Server base URL (e.g. http://localhost:8000), or `mock` to start the built-in mock
    /// server in-process (configured by LLMSURGE_MOCK_* variables: a small model by
    /// default, LLMSURGE_MOCK_INSTANT=1 for zero latency). Default: mock.
    #[arg(long, env = "LLMSURGE_TARGET", value_name = "URL|mock")]
    pub target: Option<String>,

    /// Model name sent with every request. Default: the first model of GET /v1/models.
    #[arg(long, env = "LLMSURGE_MODEL")]
    pub model: Option<String>,

    /// Bearer token for the target. Also read from OPENAI_API_KEY. Never logged or reported.
    #[arg(long, env = "LLMSURGE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// The readiness check before any load: GET this path (default /health), or `off`
    /// to skip it (a gateway whose /health calls every upstream model, say). Advisory: a
    /// 401, 403 or 5xx there, or no answer within 5 s, is a warning when /v1/models
    /// lists models or --model is given. The check carries the same credentials and
    /// headers as every request.
    #[arg(
        long,
        env = "LLMSURGE_HEALTH_PATH",
        default_value = "/health",
        value_parser = crate::cli::values::parse_health_path,
        value_name = "PATH|off"
    )]
    pub health_path: crate::cli::values::HealthPath,

    /// The API spoken: endpoint, body and response format. The generation formats
    /// (chat, completions, responses, anthropic) report TTFT, ITL, TPOT and output tokens;
    /// embeddings, rerank and score report latency, inputs/s and input tokens/s, and take
    /// `batch_size` / `documents` in a synthetic --data spec instead of output_tokens
    /// (without either: a batch of 1, or 10 documents).
    /// Chat takes images and audio (`images=4,image_size=1024x1024`, `audio_seconds=5`);
    /// transcription uploads `audio_seconds` of WAV and reports audio seconds/s.
    #[arg(
        long,
        env = "LLMSURGE_REQUEST_FORMAT",
        value_enum,
        default_value = "chat"
    )]
    pub request_format: RequestFormatArg,

    /// Stream responses (SSE, needed for TTFT and ITL) or not; embeddings, rerank and
    /// score never stream (default off for them; `--stream true` is refused), a
    /// transcription streams with the form field stream=true.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_STREAM", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub stream: bool,

    /// `--stream` (or its variable) was given, not defaulted: `--stream true` with a
    /// format that never streams is then a usage error. Set from the matches.
    #[arg(skip)]
    pub stream_explicit: bool,

    /// JSON object with `extra_body` (merged into every body), `headers` and `params`
    /// (query parameters), e.g. '{"extra_body": {"temperature": 0}, "headers": {"X-A": "b"}}'.
    #[arg(long, env = "LLMSURGE_BACKEND_KWARGS", value_name = "JSON")]
    pub backend_kwargs: Option<String>,

    /// Write this header's value in reports, logs and `--dry-run` (repeatable or a comma
    /// list). By default only content-type, accept, user-agent, anthropic-version,
    /// x-request-id and x-session-id are shown; every other
    /// header value, as any API key, is written as <redacted>.
    #[arg(
        long,
        env = "LLMSURGE_SHOW_HEADER",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub show_header: Vec<String>,

    /// Write this query parameter's value wherever a URL is written (repeatable or a
    /// comma list), e.g. api-version. By default a URL keeps its query names, and its
    /// values, user and password are written as <redacted>.
    #[arg(
        long,
        env = "LLMSURGE_SHOW_QUERY_PARAM",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub show_query_param: Vec<String>,

    /// Send every request an x-request-id header, unique in the run
    /// (llmsurge-TAG-BENCHMARK-SLOT) and written as `request_id` in --request-log, so the
    /// server's logs join the client's (vLLM and SGLang adopt it as their request id).
    /// An x-request-id in --backend-kwargs headers replaces it (and is not logged).
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_REQUEST_ID_HEADER", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub request_id_header: bool,

    /// Send no W3C traceparent header (by default every request carries one: one trace
    /// per session or agent trace, one span per request, its ids in --request-log and
    /// --outputs otlp), for a server that rejects headers it does not know.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_NO_TRACEPARENT")]
    pub no_traceparent: bool,
    /// Router affinity: send each conversation's key (a session; an agent trace, and each
    /// of its sub-agents) in the header a router places it by: dynamo
    /// (x-dynamo-session-id, and x-dynamo-parent-session-id on a sub-agent's calls),
    /// sglang (x-smg-routing-key), or header:NAME.
    #[arg(
        long,
        env = "LLMSURGE_AFFINITY",
        value_name = "dynamo|sglang|header:NAME"
    )]
    pub affinity: Option<String>,

    /// A session token the server (or a router) hands out, sent back on the same
    /// conversation's later requests: header:NAME (response header NAME, sent back in
    /// request header NAME) or cookie:NAME (a Set-Cookie NAME, sent back as Cookie).
    #[arg(
        long,
        env = "LLMSURGE_SESSION_TOKEN",
        value_name = "header:NAME|cookie:NAME"
    )]
    pub session_token: Option<String>,

    /// Keep one connection per conversation (session or agent trace) for its whole life,
    /// think times included, instead of sharing the pool. HTTP/1.1 only (http:// or
    /// https://; not with --http2).
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_STICKY_CONNECTIONS")]
    pub sticky_connections: bool,

    /// Speak HTTP/2 (prior knowledge on http://, ALPN on https://). Default: HTTP/1.1.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_HTTP2")]
    pub http2: bool,

    /// With --http2: how many requests share one connection at once (HTTP/2 streams
    /// multiplexed, as gateways and most HTTP/2 clients send them; a server's
    /// SETTINGS_MAX_CONCURRENT_STREAMS lowers it). 1: one request at a time per
    /// connection, concurrency is connections, as on HTTP/1.1.
    #[arg(long, env = "LLMSURGE_HTTP2_STREAMS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_HTTP2_STREAMS as i64), value_name = "N")]
    pub http2_streams: u32,

    /// Bound on each request, first byte to last.
    #[arg(long, env = "LLMSURGE_REQUEST_TIMEOUT", value_parser = parse_positive_duration, default_value = "300s", value_name = "DURATION")]
    pub request_timeout: Duration,

    /// Bound on the wait for the first token (default: only the request timeout).
    #[arg(long, env = "LLMSURGE_TTFT_TIMEOUT", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub ttft_timeout: Option<Duration>,

    /// Bound on the silence between two chunks of a stream (default: only the request timeout).
    #[arg(long, env = "LLMSURGE_IDLE_TIMEOUT", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub idle_timeout: Option<Duration>,

    /// Bound on connecting to the target.
    #[arg(long, env = "LLMSURGE_CONNECT_TIMEOUT", value_parser = parse_positive_duration, default_value = "10s", value_name = "DURATION")]
    pub connect_timeout: Duration,

    /// Trust the CA certificates of this PEM bundle for https:// (beside the system's
    /// roots, which also honour SSL_CERT_FILE): a server whose certificate a private CA
    /// signed. Applies to the target, the probe, the workers and every scrape.
    #[arg(long, env = "LLMSURGE_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,

    /// Do not verify the server's TLS certificate at all (a quick test against a
    /// self-signed server). Warns on stderr, and the report's metadata says so.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_INSECURE")]
    pub insecure: bool,

    /// Client certificate (PEM) for mutual TLS, offered when the server asks for one;
    /// needs --client-key.
    #[arg(long, env = "LLMSURGE_CLIENT_CERT", value_name = "FILE")]
    pub client_cert: Option<PathBuf>,

    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1) of --client-cert. Its path is shown in
    /// reports (`config` hides it as a secret), its contents never.
    #[arg(
        long,
        env = "LLMSURGE_CLIENT_KEY",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub client_key: Option<PathBuf>,
}
