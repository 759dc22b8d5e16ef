//! The IPC messages between the coordinator and its workers.
//!
//! Lifecycle: the worker connects and says `Hello` (with the protocol version); the
//! coordinator answers `Configure`; the worker prepares (HTTP client, data) and says
//! `Ready`; once every worker is ready the coordinator writes `t0` into shared memory and
//! sends `Start`. The worker then streams `Update` batches (which double as heartbeats)
//! and ends with `Finished`, or `Failed` if it cannot go on, then exits. There is no
//! shutdown message: a worker whose socket reaches EOF exits (the coordinator went away
//! or has everything it needs).

use crate::clock::MonoNanos;
use crate::config::WorkerConfig;
use crate::metrics::EncodedMetrics;
use crate::record::{RequestRecord, RequestStarted};
use serde::{Deserialize, Serialize};

/// Bumped on every incompatible change to the messages below.
pub const PROTOCOL_VERSION: u32 = 3;

/// Coordinator → worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToWorker {
    /// The worker's configuration.
    Configure(Box<WorkerConfig>),
    /// Begin at `t0`.
    Start {
        /// The group's start instant.
        t0: MonoNanos,
    },
}

/// Worker → coordinator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FromWorker {
    /// First message after connecting.
    Hello {
        /// [`PROTOCOL_VERSION`] of the worker's build.
        protocol_version: u32,
        /// The worker's process id.
        pid: u32,
    },
    /// Prepared and waiting for `Start`.
    Ready,
    /// Transitions since the last batch, with the histogram delta of exactly the requests
    /// finished in it, so a batch is all-or-nothing if the worker dies.
    Update(UpdateBatch),
    /// No more requests will come from this worker.
    Finished {
        /// Why it stopped.
        reason: String,
        /// It got SIGTERM and cancelled its requests (a supervisor stopping the whole
        /// process group): the coordinator treats it as its own SIGTERM.
        #[serde(default)]
        terminated: bool,
    },
    /// The worker cannot go on.
    Failed {
        /// One line saying why.
        message: String,
    },
}

/// A batch of request transitions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateBatch {
    /// Requests sent since the last batch.
    pub started: Vec<RequestStarted>,
    /// Requests finished since the last batch.
    pub finished: Vec<RequestRecord>,
    /// Histograms of the measured requests in `finished`.
    pub metrics: EncodedMetrics,
    /// `--lora`: the same requests' histograms again, per model of the split (each
    /// request is in `metrics` and in its model's entry). Empty without a split.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_metrics: Vec<ModelMetrics>,
}

/// One model's histogram delta in a batch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelMetrics {
    /// The model's index in the split.
    pub model: u16,
    /// Its histograms.
    pub metrics: EncodedMetrics,
}

impl UpdateBatch {
    /// Whether the batch carries nothing: no transition and no histogram values (the
    /// client probes record values between transitions).
    pub fn is_empty(&self) -> bool {
        self.started.is_empty()
            && self.finished.is_empty()
            && self.metrics.entries.is_empty()
            && self.model_metrics.is_empty()
    }

    /// The batch as two that say the same, in order, for a batch too large for one
    /// frame: the finished records halved (every `started` in the first part, so no
    /// record arrives before its start), or, with fewer than two finished, the starts
    /// halved. The histograms travel in the second part, so the coordinator never merges
    /// a histogram value before the record it belongs to. `Err` gives back a batch of one
    /// record or start, which cannot be split.
    pub fn split(mut self) -> Result<(UpdateBatch, UpdateBatch), UpdateBatch> {
        let first = if self.finished.len() >= 2 {
            let rest = self.finished.split_off(self.finished.len() / 2);
            UpdateBatch {
                started: std::mem::take(&mut self.started),
                finished: std::mem::replace(&mut self.finished, rest),
                ..UpdateBatch::default()
            }
        } else if self.started.len() >= 2 {
            let rest = self.started.split_off(self.started.len() / 2);
            UpdateBatch {
                started: std::mem::replace(&mut self.started, rest),
                ..UpdateBatch::default()
            }
        } else {
            return Err(self);
        };
        Ok((first, self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_of_histogram_values_alone_is_not_empty() {
        // The client probes record between transitions; dropping such a batch as empty
        // lost their values.
        let mut set = crate::MetricSet::new();
        set.record(
            crate::StatusClass::Successful,
            crate::Metric::RuntimeDelay,
            1_000,
        );
        let batch = UpdateBatch {
            metrics: set.encode().expect("encode"),
            ..UpdateBatch::default()
        };
        assert!(!batch.is_empty());
        assert!(UpdateBatch::default().is_empty());
    }

    #[test]
    fn a_split_batch_says_the_same_in_order_with_starts_first_and_histograms_last() {
        let started = |slot| RequestStarted {
            slot,
            scheduled: MonoNanos(slot),
            start: MonoNanos(slot),
            model: None,
            session: None,
            prompt_tokens: None,
            max_output_tokens: None,
        };
        let mut set = crate::MetricSet::new();
        set.record(crate::StatusClass::Successful, crate::Metric::Ttft, 1_000);
        let metrics = set.encode().expect("encode");
        let finished = |slot| RequestRecord {
            slot,
            ..RequestRecord::completed(MonoNanos(slot), None, MonoNanos(slot + 1), 0)
        };
        let batch = UpdateBatch {
            started: (0..3).map(started).collect(),
            finished: (0..5).map(finished).collect(),
            metrics: metrics.clone(),
            model_metrics: Vec::new(),
        };
        let (a, b) = batch.clone().split().expect("splits");
        assert_eq!(a.started, batch.started, "every start in the first part");
        assert_eq!((a.finished.len(), b.finished.len()), (2, 3));
        assert!(a.metrics.entries.is_empty() && b.metrics == metrics);
        assert!(b.started.is_empty());
        let slots: Vec<u64> = a
            .finished
            .iter()
            .chain(&b.finished)
            .map(|r| r.slot)
            .collect();
        assert_eq!(slots, [0, 1, 2, 3, 4]);
        // Starts alone split too; one record cannot.
        let starts = UpdateBatch {
            started: (0..3).map(started).collect(),
            finished: vec![finished(9)],
            ..UpdateBatch::default()
        };
        let (a, b) = starts.split().expect("splits");
        assert_eq!(
            (a.started.len(), b.started.len(), b.finished.len()),
            (1, 2, 1)
        );
        let one = UpdateBatch {
            finished: vec![finished(9)],
            ..UpdateBatch::default()
        };
        assert_eq!(one.clone().split().err(), Some(one));
    }
}
