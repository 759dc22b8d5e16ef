//! The raw command-line flags of `llmsurge benchmark run` ("low" args: parsed, typed,
//! no I/O), grouped by concern, one file each. `resolve` turns them into a validated
//! plan; nothing downstream reads them. Every flag also reads `LLMSURGE_<FLAG>` from the
//! environment. The other commands' flags that live here: `preprocess` and `sweep`
//! (the sweep's, which `crate::sweep` runs).

mod agentic;
mod client;
mod data;
mod limits;
mod load;
mod multihost;
mod output;
mod preprocess;
mod server;
mod sweep;
mod target;

pub use agentic::AgenticArgs;
pub use client::ClientArgs;
pub use data::{DataArgs, SamplerArg};
pub use limits::{LimitArgs, parse_confidence};
pub use load::{LoadArgs, SweepArrivalsArg};
pub use multihost::MultiHostArgs;
pub use output::OutputArgs;
pub use preprocess::PreprocessArgs;
pub use server::ServerMetricsArgs;
pub use sweep::{
    GuardArgs, SlaVariable, SweepPlotArgs, SweepPlotParetoArgs, SweepServeArgs, SweepServeSlaArgs,
};
pub use target::TargetArgs;

use clap::{Args, ValueEnum};

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
    /// Synchronous, throughput, then rates evenly spaced between their measured request
    /// rates: `--rate N` benchmarks in all (default 10).
    Sweep,
    /// Synchronous, throughput, then a bisection for the highest constant rate that meets
    /// `--slo`, to `--capacity-precision`; over sessions (`turns=`), the most concurrent
    /// users, from one up; with `--slo-tier`, each tier's answer from the same probes.
    Capacity,
    /// A sweep (`--rate N` benchmarks, default 10), then 3 rates on either side of the
    /// knee of its TTFT p99 curve.
    Knee,
    /// A timestamped trace (`--data` a Mooncake, BurstGPT, Azure or generic JSONL
    /// trace) sent at its own instants, scaled by `--time-scale`.
    Replay,
}

/// OpenAI request formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestFormatArg {
    /// POST /v1/chat/completions (OpenAI chat).
    Chat,
    /// POST /v1/completions (OpenAI legacy completions).
    Completions,
    /// POST /v1/responses (OpenAI Responses API).
    Responses,
    /// POST /v1/messages (Anthropic Messages API: `system` top-level, `max_tokens` always
    /// sent, the key as `x-api-key`).
    Anthropic,
    /// POST /v1/embeddings, `batch_size` inputs per request; never streamed.
    Embeddings,
    /// POST /v1/rerank (Jina/Cohere: query, documents, top_n); never streamed.
    Rerank,
    /// POST /v1/score (vLLM: text_1 against text_2); never streamed.
    Score,
    /// POST /v1/audio/transcriptions: a multipart WAV upload of `audio_seconds` (a
    /// synthetic --data spec key), streamed with `stream=true` unless `--stream false`.
    Transcription,
}

impl RequestFormatArg {
    /// Whether the format sends a conversation and reads the reply back, as multi-turn
    /// sessions need.
    pub fn has_conversations(self) -> bool {
        matches!(self, Self::Chat | Self::Responses | Self::Anthropic)
    }
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
pub struct RunArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub multi_host: MultiHostArgs,
    #[command(flatten)]
    pub server: ServerMetricsArgs,
    #[command(flatten)]
    pub agentic: AgenticArgs,
}
