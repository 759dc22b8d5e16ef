//! The built-in mock OpenAI-compatible server (`llmsurge mock-server`).
//!
//! Theory of operation: `MockServer::start` binds a listener and serves it from a tokio
//! runtime on its own OS thread, so tests and `--target mock` can run it in-process and
//! the CLI can run it alone. Each generation request is planned when it arrives
//! (`model::plan`: latency, length, fault, drawn from streams seeded by (seed, request
//! number)), then answered by a body state machine (`http::body`) that waits for a
//! concurrency slot, emits SSE chunks written by its API format's writer (`api`) at their
//! deadlines, and frees its slot when it ends or its client goes away. `model::stats`
//! counts what the server saw for `GET /stats`, and `http::metrics` publishes the same
//! counters as `GET /metrics` in vLLM's Prometheus names.
//!
//! Three layers, each importing only those below it (drawn in docs/architecture.md):
//! `http` (server, handler, metrics, body, app) over `api` (one module per format over a
//! shared generation core) over `model` (plan, prefix cache, stats, record, truth,
//! tokenizer); `config` (flags and variables) is the ground all three stand on.
//! The user guide, with every knob and the capacity formula, is docs/mock-server.md.

mod api;
mod config;
mod error;
mod http;
mod model;

pub use api::embeddings::EMBEDDING_DIM;
pub use config::{
    DEFAULT_HOST, DEFAULT_ITL_MS, DEFAULT_ITL_MS_PER_ACTIVE, DEFAULT_ITL_MS_STD,
    DEFAULT_KV_CACHE_TOKENS, DEFAULT_MAX_MODEL_LEN, DEFAULT_MODEL, DEFAULT_OUTPUT_TOKENS,
    DEFAULT_OUTPUT_TOKENS_STD, DEFAULT_PORT, DEFAULT_SEED, DEFAULT_TTFT_MS,
    DEFAULT_TTFT_MS_PER_PROMPT_TOKEN, DEFAULT_TTFT_MS_STD, DEFAULT_WORKERS, ENV_PREFIX,
    INSTANT_OUTPUT_TOKENS, MetricsFault, MockConfig, MockServerArgs, PROBE_HEADER, check_env,
    instant_env_values, instant_is_on, known_env_vars,
};
pub use error::MockError;
pub use http::server::{MockServer, run_cli};
pub use model::record::RecordStats;
pub use model::stats::{EndpointCounts, FaultCounts, MockStats, SpecDecodeCounts, SuccessCounts};
pub use model::tokenizer::count as count_tokens;
