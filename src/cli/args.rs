//! The raw command-line flags of `llmsurge benchmark run` ("low" args: parsed, typed,
//! no I/O). `resolve` turns them into a validated plan; nothing downstream reads them.
//! Every flag also reads `LLMSURGE_<FLAG>` from the environment.

use super::values::{
    RateList, WindowSpec, parse_duration, parse_fraction, parse_positive_duration, parse_rates,
    parse_window,
};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// Load profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileKind {
    /// One request at a time.
    Synchronous,
    /// `--rate N` concurrent streams (a list runs one benchmark per value).
    Concurrent,
    /// As many concurrent requests as `--max-concurrency` allows (default 512).
    Throughput,
    /// `--rate R` requests per second, evenly spaced.
    Constant,
    /// `--rate R` requests per second with random (Poisson/gamma) gaps.
    Poisson,
}

/// OpenAI request formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestFormatArg {
    /// POST /v1/chat/completions.
    Chat,
    /// POST /v1/completions.
    Completions,
}

/// What to do when a worker process dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerFailureArg {
    /// Stop the benchmark, cancel in-flight requests, and report.
    Stop,
    /// Go on with the remaining workers.
    Continue,
}

/// Flags of `llmsurge benchmark run`.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Target")]
pub struct RunArgs {
    /// Server base URL (e.g. http://localhost:8000), or `mock` to start the built-in mock
    /// server in-process (configured by LLMSURGE_MOCK_* variables). Default: mock.
    #[arg(long, env = "LLMSURGE_TARGET", value_name = "URL|mock")]
    pub target: Option<String>,

    /// Model name sent with every request. Default: the first model of GET /v1/models.
    #[arg(long, env = "LLMSURGE_MODEL")]
    pub model: Option<String>,

    /// Bearer token for the target. Also read from OPENAI_API_KEY. Never logged or reported.
    #[arg(long, env = "LLMSURGE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Endpoint and body format.
    #[arg(
        long,
        env = "LLMSURGE_REQUEST_FORMAT",
        value_enum,
        default_value = "chat"
    )]
    pub request_format: RequestFormatArg,

    /// Stream responses (SSE, needed for TTFT and ITL) or not.
    #[arg(long, env = "LLMSURGE_STREAM", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub stream: bool,

    /// JSON object with `extra_body` (merged into every body), `headers` and `params`
    /// (query parameters), e.g. '{"extra_body": {"temperature": 0}, "headers": {"X-A": "b"}}'.
    #[arg(long, env = "LLMSURGE_BACKEND_KWARGS", value_name = "JSON")]
    pub backend_kwargs: Option<String>,

    /// Speak HTTP/2 (prior knowledge on http://, ALPN on https://). Default: HTTP/1.1.
    #[arg(long, env = "LLMSURGE_HTTP2")]
    pub http2: bool,

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

    /// Load profile.
    #[arg(
        long,
        env = "LLMSURGE_PROFILE",
        value_enum,
        default_value = "synchronous",
        help_heading = "Load"
    )]
    pub profile: ProfileKind,

    /// Requests per second (constant, poisson) or streams (concurrent); a comma-separated
    /// list runs one benchmark per value.
    #[arg(long, env = "LLMSURGE_RATE", value_parser = parse_rates, value_name = "RATE[,RATE...]", help_heading = "Load")]
    pub rate: Option<RateList>,

    /// Cap on requests in flight across all workers (throughput: the number of streams,
    /// default 512). A slot that cannot start on time is counted as late.
    #[arg(long, env = "LLMSURGE_MAX_CONCURRENCY", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Load")]
    pub max_concurrency: Option<u64>,

    /// Spread of stream starts (concurrent, throughput) or length of a linear rate ramp
    /// from 0 (constant).
    #[arg(long, env = "LLMSURGE_RAMPUP", value_parser = parse_duration, value_name = "DURATION", help_heading = "Load")]
    pub rampup: Option<Duration>,

    /// Gamma shape of poisson arrivals: 1 is Poisson, below 1 burstier, above 1 smoother.
    #[arg(long, env = "LLMSURGE_BURSTINESS", help_heading = "Load")]
    pub burstiness: Option<f64>,

    /// Worker processes (default: one per core, fewer when the load needs fewer).
    #[arg(long, env = "LLMSURGE_WORKERS", value_parser = clap::value_parser!(u32).range(1..=256), help_heading = "Load")]
    pub workers: Option<u32>,

    /// Seed of every random stream (arrivals, prompts, lengths).
    #[arg(
        long,
        env = "LLMSURGE_RANDOM_SEED",
        default_value_t = 42,
        help_heading = "Load"
    )]
    pub random_seed: u64,

    /// Stop each benchmark after this long, cancelling requests in flight.
    #[arg(long, env = "LLMSURGE_MAX_SECONDS", value_parser = parse_positive_duration, value_name = "DURATION", help_heading = "Limits")]
    pub max_seconds: Option<Duration>,

    /// Send exactly this many requests per benchmark, then let them finish.
    #[arg(long, env = "LLMSURGE_MAX_REQUESTS", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Limits")]
    pub max_requests: Option<u64>,

    /// Stop a benchmark once this many requests errored.
    #[arg(long, env = "LLMSURGE_MAX_ERRORS", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Limits")]
    pub max_errors: Option<u64>,

    /// Stop a benchmark once more than this fraction of finished requests errored
    /// (counted after 20 requests), e.g. 0.05 or 5%.
    #[arg(long, env = "LLMSURGE_MAX_ERROR_RATE", value_parser = parse_fraction, help_heading = "Limits")]
    pub max_error_rate: Option<f64>,

    /// Requests to exclude from the metrics at the start: a fraction of the benchmark
    /// (0.1), a time (30s) or a count (200req). They stay in the record.
    #[arg(long, env = "LLMSURGE_WARMUP", value_parser = parse_window, help_heading = "Limits")]
    pub warmup: Option<WindowSpec>,

    /// Like --warmup, at the end of the benchmark.
    #[arg(long, env = "LLMSURGE_COOLDOWN", value_parser = parse_window, help_heading = "Limits")]
    pub cooldown: Option<WindowSpec>,

    /// Workload: a synthetic spec, e.g. "prompt_tokens=256,output_tokens=128".
    #[arg(
        long,
        env = "LLMSURGE_DATA",
        default_value = "prompt_tokens=256,output_tokens=128",
        help_heading = "Data"
    )]
    pub data: String,

    /// Send `ignore_eos: true` so the server generates exactly the requested output tokens.
    #[arg(long, env = "LLMSURGE_IGNORE_EOS", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL", help_heading = "Data")]
    pub ignore_eos: bool,

    /// Outputs: aliases json, console (comma-separated or repeated).
    #[arg(
        long,
        env = "LLMSURGE_OUTPUTS",
        value_delimiter = ',',
        default_value = "json,console",
        help_heading = "Output"
    )]
    pub outputs: Vec<String>,

    /// Directory for report files.
    #[arg(
        long,
        env = "LLMSURGE_OUTPUT_DIR",
        default_value = ".",
        help_heading = "Output"
    )]
    pub output_dir: PathBuf,

    /// Print the resolved plan and exit without sending anything.
    #[arg(long, help_heading = "Output")]
    pub dry_run: bool,

    /// Dispatch-lag p99 above this marks the client as the bottleneck (exit code 4).
    #[arg(long, env = "LLMSURGE_MAX_DISPATCH_LAG", value_parser = parse_positive_duration, default_value = "10ms", value_name = "DURATION", help_heading = "Client")]
    pub max_dispatch_lag: Duration,

    /// What to do when a worker process dies.
    #[arg(
        long,
        env = "LLMSURGE_ON_WORKER_FAILURE",
        value_enum,
        default_value = "stop",
        help_heading = "Client"
    )]
    pub on_worker_failure: WorkerFailureArg,

    /// After the first Ctrl-C, how long in-flight requests may take to finish before
    /// they are cancelled (a second Ctrl-C cancels at once).
    #[arg(long, env = "LLMSURGE_DRAIN_TIMEOUT", value_parser = parse_duration, default_value = "10s", value_name = "DURATION", help_heading = "Client")]
    pub drain_timeout: Duration,
}
