//! Errors of the coordinator.

/// Errors that stop a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// A worker process could not be started.
    #[error("cannot start a worker: {0}")]
    Spawn(String),
    /// The shared-memory block could not be created.
    #[error(transparent)]
    Shm(#[from] llmsurge_proto::shm::ShmError),
    /// A worker could not prepare (bad data, bad target URL, …); names the worker.
    #[error("worker {worker} could not start: {message}")]
    WorkerSetup {
        /// The worker's index.
        worker: u32,
        /// What it said.
        message: String,
    },
    /// A worker broke the protocol or went silent during the handshake.
    #[error("worker {worker}: {message}")]
    Protocol {
        /// The worker's index.
        worker: u32,
        /// What went wrong.
        message: String,
    },
    /// Histograms could not be merged.
    #[error(transparent)]
    Metrics(#[from] llmsurge_proto::metrics::MetricsError),
    /// The plan is not runnable.
    #[error("invalid plan: {0}")]
    Plan(String),
    /// The plan asks for more connections than the open-file limit allows.
    #[error("{0}")]
    FdLimit(String),
    /// The user interrupted the run before the benchmark started.
    #[error("interrupted")]
    Interrupted,
    /// The coordinator's own runtime failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
