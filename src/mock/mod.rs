//! The built-in mock OpenAI-compatible server (`llmsurge mock-server`).
//!
//! Theory of operation: `MockServer::start` binds a listener and serves it from a tokio
//! runtime on its own OS thread, so tests and `--target mock` can run it in-process and
//! the CLI can run it alone. Each generation request is planned when it arrives
//! (`model`: latency, length, fault, drawn from streams seeded by (seed, request number)),
//! then answered by a body state machine (`body`) that waits for a concurrency slot,
//! emits SSE chunks formatted by `openai` at their deadlines, and frees its slot when it
//! ends or its client goes away. `stats` counts what the server saw for `GET /stats`, and
//! `metrics` publishes the same counters as `GET /metrics` in vLLM's Prometheus names.
//! The user guide, with every knob and the capacity formula, is docs/mock-server.md.

mod anthropic;
mod body;
mod config;
mod handler;
mod media;
mod metrics;
mod model;
mod openai;
mod prefix_cache;
mod record;
mod rerank;
mod responses;
mod server;
mod stats;
mod tokenizer;
mod truth;

use std::net::SocketAddr;

pub use config::{
    DEFAULT_HOST, DEFAULT_ITL_MS, DEFAULT_ITL_MS_PER_ACTIVE, DEFAULT_ITL_MS_STD,
    DEFAULT_KV_CACHE_TOKENS, DEFAULT_MAX_MODEL_LEN, DEFAULT_MODEL, DEFAULT_OUTPUT_TOKENS,
    DEFAULT_OUTPUT_TOKENS_STD, DEFAULT_PORT, DEFAULT_SEED, DEFAULT_TTFT_MS,
    DEFAULT_TTFT_MS_PER_PROMPT_TOKEN, DEFAULT_TTFT_MS_STD, DEFAULT_WORKERS, ENV_PREFIX,
    INSTANT_OUTPUT_TOKENS, MetricsFault, MockConfig, MockServerArgs, check_env, instant_env_values,
    instant_is_on, known_env_vars,
};
pub use openai::EMBEDDING_DIM;
pub use record::RecordStats;
pub use server::{MockServer, run_cli};
pub use stats::{EndpointCounts, FaultCounts, MockStats, SpecDecodeCounts, SuccessCounts};
pub use tokenizer::count as count_tokens;

/// The header of llmsurge's pre-run probe requests. The mock answers them from a twin
/// with no faults and its own counters, so a probe never shows in `/stats` nor shifts
/// the seeded draws of the benchmark's requests; real servers ignore the header.
pub const PROBE_HEADER: &str = "x-llmsurge-probe";

/// Why the mock server could not be configured or started.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// A setting is out of range; the message names the flag and the value.
    #[error("{0}")]
    InvalidConfig(String),
    /// An `LLMSURGE_MOCK_*` variable is unknown or does not parse.
    #[error("{0}")]
    Env(String),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The tokio runtime could not be built.
    #[error("cannot start the mock server runtime: {0}")]
    Runtime(std::io::Error),
    /// The `--record` file could not be created.
    #[error("--record {path}: {source}")]
    Record {
        /// The file asked for.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The `--truth` file could not be created.
    #[error("--truth {path}: {source}")]
    Truth {
        /// The file asked for.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The server thread could not be spawned.
    #[error("cannot spawn the mock server thread: {0}")]
    Thread(std::io::Error),
}
