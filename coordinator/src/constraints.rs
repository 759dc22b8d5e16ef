//! Stop constraints and the actions they take.
//!
//! A constraint either stops queuing (requests already sent finish: `max_requests`, the
//! end of a finite dataset, the first Ctrl-C) or stops processing and cancels what is in
//! flight (`max_seconds`, `max_errors`, `max_error_rate`, over-saturation, a second
//! Ctrl-C). Both are stop flags in shared memory, so they take effect in microseconds.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// The limits of one benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Stop and cancel after this long.
    pub max_seconds: Option<Duration>,
    /// Send exactly this many requests, then drain.
    pub max_requests: Option<u64>,
    /// Stop and cancel once this many requests errored.
    pub max_errors: Option<u64>,
    /// Stop and cancel once this fraction of finished requests errored …
    pub max_error_rate: Option<f64>,
    /// … counted once at least this many requests finished.
    pub error_rate_min_sample: u64,
}

/// What a constraint does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopAction {
    /// Claim no new slots; let in-flight requests finish (bounded by the drain timeout).
    StopQueuing,
    /// Claim no new slots and cancel in-flight requests.
    Cancel,
}

/// Why a benchmark ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StopReason {
    /// Every slot of a finite schedule ran.
    ScheduleComplete,
    /// `max_seconds` elapsed.
    MaxSeconds {
        /// The limit.
        seconds: f64,
    },
    /// `max_requests` were sent.
    MaxRequests {
        /// The limit.
        requests: u64,
    },
    /// A finite dataset ran out.
    DatasetExhausted {
        /// Its size.
        samples: u64,
    },
    /// `max_errors` was reached.
    MaxErrors {
        /// The limit.
        errors: u64,
    },
    /// `max_error_rate` was exceeded.
    MaxErrorRate {
        /// The limit.
        limit: f64,
        /// The rate seen.
        observed: f64,
    },
    /// The user pressed Ctrl-C (or sent SIGTERM).
    Interrupted,
    /// A worker died and `--on-worker-failure stop` was set, or none was left.
    WorkerFailure {
        /// What happened.
        detail: String,
    },
    /// The server kept getting slower under growing concurrency.
    OverSaturation {
        /// What the detector saw.
        detail: String,
    },
    /// Every `--until-precise` figure's 95% interval was within its fraction.
    PrecisionReached {
        /// Each figure's precision and target.
        detail: String,
    },
}

impl StopReason {
    /// The action the reason triggers.
    pub fn action(&self) -> StopAction {
        match self {
            StopReason::ScheduleComplete
            | StopReason::MaxRequests { .. }
            | StopReason::DatasetExhausted { .. }
            | StopReason::Interrupted
            | StopReason::PrecisionReached { .. } => StopAction::StopQueuing,
            StopReason::MaxSeconds { .. }
            | StopReason::MaxErrors { .. }
            | StopReason::MaxErrorRate { .. }
            | StopReason::WorkerFailure { .. }
            | StopReason::OverSaturation { .. } => StopAction::Cancel,
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::ScheduleComplete => write!(f, "schedule complete"),
            StopReason::MaxSeconds { seconds } => write!(f, "max seconds ({seconds}s) reached"),
            StopReason::MaxRequests { requests } => write!(f, "max requests ({requests}) reached"),
            StopReason::DatasetExhausted { samples } => {
                write!(f, "dataset exhausted ({samples} samples)")
            }
            StopReason::MaxErrors { errors } => write!(f, "max errors ({errors}) reached"),
            StopReason::MaxErrorRate { limit, observed } => {
                write!(
                    f,
                    "error rate {:.1}% over the {:.1}% limit",
                    observed * 100.0,
                    limit * 100.0
                )
            }
            StopReason::Interrupted => write!(f, "interrupted"),
            StopReason::WorkerFailure { detail } => write!(f, "worker failure: {detail}"),
            StopReason::OverSaturation { detail } => write!(f, "over-saturation: {detail}"),
            StopReason::PrecisionReached { detail } => write!(f, "precision reached: {detail}"),
        }
    }
}

impl Limits {
    /// The error constraints, checked after every batch of updates.
    pub fn check_errors(&self, finished: u64, errored: u64) -> Option<StopReason> {
        if let Some(max) = self.max_errors
            && errored >= max
        {
            return Some(StopReason::MaxErrors { errors: max });
        }
        if let Some(limit) = self.max_error_rate
            && finished >= self.error_rate_min_sample.max(1)
        {
            let observed = errored as f64 / finished as f64;
            if observed > limit {
                return Some(StopReason::MaxErrorRate { limit, observed });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_constraints_fire_at_their_thresholds() {
        let limits = Limits {
            max_errors: Some(5),
            ..Limits::default()
        };
        assert_eq!(limits.check_errors(100, 4), None);
        assert_eq!(
            limits.check_errors(100, 5),
            Some(StopReason::MaxErrors { errors: 5 })
        );

        let rate = Limits {
            max_error_rate: Some(0.1),
            error_rate_min_sample: 20,
            ..Limits::default()
        };
        assert_eq!(rate.check_errors(10, 10), None, "below the minimum sample");
        assert_eq!(
            rate.check_errors(20, 2),
            None,
            "exactly at the limit is allowed"
        );
        let Some(StopReason::MaxErrorRate { observed, .. }) = rate.check_errors(20, 3) else {
            panic!("rate over the limit must fire")
        };
        assert!((observed - 0.15).abs() < 1e-9);
    }

    #[test]
    fn actions_distinguish_draining_from_cancelling() {
        assert_eq!(
            StopReason::MaxRequests { requests: 1 }.action(),
            StopAction::StopQueuing
        );
        assert_eq!(StopReason::Interrupted.action(), StopAction::StopQueuing);
        assert_eq!(
            StopReason::MaxSeconds { seconds: 1.0 }.action(),
            StopAction::Cancel
        );
        assert_eq!(
            StopReason::MaxErrors { errors: 1 }.action(),
            StopAction::Cancel
        );
    }
}
