//! The llmsurge coordinator: spawning and supervising workers, the barrier start,
//! `WorkerGroupState`, stop constraints, profiles, and aggregation into benchmarks.
//!
//! Theory of operation: [`run::run_profile`] asks the profile for the next
//! [`BenchmarkPlan`] and runs it with [`group::run_benchmark`]. A benchmark creates a
//! shared-memory block, spawns its workers ([`spawn`]), and performs the handshake
//! (hello → configure → ready); once every worker is ready it writes `t0` and sends
//! `Start`. The dispatcher loop then owns what the user sees: it applies each worker's
//! batches to [`state::WorkerGroupState`], evaluates [`constraints`], watches worker
//! health (exit status and IPC end, heartbeats), and reacts to [`interrupts`]. When every
//! worker is over, [`result::build`] aggregates the state into a [`BenchmarkResult`].
//!
//! It does not know about the CLI, data files or report formats; the binary provides the
//! plans and an [`observer::RunObserver`].

pub mod agent_traces;
pub mod cache_reset;
pub mod constraints;
pub mod data;
pub mod error;
pub mod error_tail;
pub mod gpu;
pub mod group;
pub mod intent;
pub mod intent_drift;
pub mod interrupts;
pub mod kept_up;
pub mod knee;
pub mod local_ports;
pub mod observer;
pub mod output_lengths;
pub mod precision;
pub mod prefill;
pub mod profiles;
pub mod result;
pub mod run;
pub mod saturation;
pub mod server_metrics;
pub mod sessions;
pub mod slo;
pub mod spawn;
pub mod state;
pub mod steady;
pub mod strategy;
pub mod timeseries;
pub mod validity;

pub use constraints::{Limits, StopAction, StopReason};
pub use error::CoordinatorError;
pub use group::{BenchmarkPlan, OnWorkerFailure};
pub use observer::{NoObserver, Progress, RunObserver};
pub use profiles::{
    CapacityOutcome, CapacityProfile, CapacitySearch, FixedProfile, PlanTemplate, SweepArrivals,
    SweepProfile,
};
pub use result::BenchmarkResult;
pub use run::{Profile, RunOutcome, run_profile};
pub use saturation::SaturationConfig;
pub use slo::{GoodputSpec, Slo, SloVerdict};
pub use spawn::WorkerCommand;
pub use strategy::{DEFAULT_THROUGHPUT_CONCURRENCY, Strategy, StrategySettings};

use llmsurge_proto::MonoNanos;

/// Converts a monotonic instant to a tokio instant.
pub(crate) fn tokio_instant(t: MonoNanos) -> tokio::time::Instant {
    tokio::time::Instant::from_std(t.to_instant())
}
