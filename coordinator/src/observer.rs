//! Hooks through which the binary follows a run: progress, records, results.

use crate::result::BenchmarkResult;
use crate::state::Counts;
use crate::strategy::Strategy;
use llmsurge_proto::RequestRecord;
use std::time::Duration;

/// A live view of the running benchmark.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Position in the run.
    pub index: u32,
    /// Its strategy.
    pub strategy: Strategy,
    /// Time since t0.
    pub elapsed: Duration,
    /// The time limit, if any.
    pub max_seconds: Option<Duration>,
    /// The request limit, if any.
    pub max_requests: Option<u64>,
    /// Counts so far.
    pub counts: Counts,
    /// Output tokens of completed requests so far (all windows).
    pub output_tokens: u64,
    /// Median TTFT of the measured requests so far, ms.
    pub ttft_p50_ms: Option<f64>,
}

/// Receives a run's events. Every method has a no-op default.
pub trait RunObserver {
    /// The seed of the benchmark about to start: its requests' trace ids derive from it
    /// (see [`llmsurge_proto::TraceIds::of`]). Called just before `benchmark_started`.
    fn benchmark_seed(&mut self, _seed: u64) {}
    /// A benchmark is about to start its workers.
    fn benchmark_started(&mut self, _index: u32, _strategy: &Strategy) {}
    /// About once a second while a benchmark runs.
    fn progress(&mut self, _progress: &Progress) {}
    /// Every finished request, as its batch arrives.
    fn record(&mut self, _record: &RequestRecord) {}
    /// A benchmark finished (also when interrupted).
    fn benchmark_finished(&mut self, _result: &BenchmarkResult) {}
    /// A line for the user (stderr): interrupts, worker deaths.
    fn notice(&mut self, _message: &str) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;

impl RunObserver for NoObserver {}
