//! Strategies: what a benchmark's load looks like, and how it maps to a worker schedule.

use llmsurge_proto::{Arrivals, Schedule};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// One benchmark's load pattern (GuideLLM's vocabulary).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Strategy {
    /// One request at a time.
    Synchronous,
    /// A fixed number of concurrent request streams.
    Concurrent {
        /// Streams.
        streams: u32,
    },
    /// As many requests as the concurrency allows, as fast as they complete.
    Throughput {
        /// Concurrent streams.
        max_concurrency: u32,
    },
    /// Requests at a constant rate.
    Constant {
        /// Requests per second.
        rate: f64,
    },
    /// Requests with gamma-distributed gaps (Poisson when burstiness is 1).
    Poisson {
        /// Mean requests per second.
        rate: f64,
    },
    /// A trace replayed at its own instants, scaled by `time_scale`.
    Replay {
        /// Multiplies every trace offset (0.5 replays twice as fast).
        time_scale: f64,
        /// The replay's mean rate, req/s (the trace's, over the time scale; 0 when
        /// unknown): sizes the worker group.
        rate: f64,
        /// Agent traces under `--rate`: traces started per second instead of at their
        /// recorded offsets.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        starts_per_s: Option<f64>,
    },
}

/// Settings that shape every strategy of a run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StrategySettings {
    /// Spread of stream starts (concurrent) or length of the linear rate ramp (constant).
    pub rampup: Duration,
    /// Gamma shape of Poisson arrivals (1 = Poisson).
    pub burstiness: f64,
}

impl Default for StrategySettings {
    fn default() -> Self {
        Self {
            rampup: Duration::ZERO,
            burstiness: 1.0,
        }
    }
}

/// Streams a throughput benchmark uses when no cap is given (GuideLLM's default).
pub const DEFAULT_THROUGHPUT_CONCURRENCY: u32 = 512;

/// A worker can comfortably pace about this many requests per second.
const RATE_PER_WORKER: f64 = 1000.0;

impl Strategy {
    /// The worker schedule.
    pub fn schedule(&self, settings: &StrategySettings) -> Schedule {
        match *self {
            Strategy::Synchronous => Schedule::Streams {
                streams: 1,
                rampup: Duration::ZERO,
            },
            Strategy::Concurrent { streams } => Schedule::Streams {
                streams,
                rampup: settings.rampup,
            },
            Strategy::Throughput { max_concurrency } => Schedule::Streams {
                streams: max_concurrency,
                rampup: settings.rampup,
            },
            Strategy::Constant { rate } => Schedule::Arrivals(Arrivals::Constant {
                rate,
                rampup: settings.rampup,
            }),
            Strategy::Poisson { rate } => Schedule::Arrivals(Arrivals::Poisson {
                rate,
                burstiness: settings.burstiness,
            }),
            Strategy::Replay {
                time_scale,
                starts_per_s,
                ..
            } => Schedule::Arrivals(Arrivals::Trace {
                time_scale,
                starts_per_s,
            }),
        }
    }

    /// Workers this strategy needs on a host with `cores` cores: one per core, fewer
    /// when the load is small (synchronous always uses one).
    pub fn default_workers(&self, cores: u32) -> u32 {
        let cores = cores.max(1);
        let wanted = match *self {
            Strategy::Synchronous => 1,
            Strategy::Concurrent { streams } => streams,
            Strategy::Throughput { max_concurrency } => max_concurrency,
            Strategy::Constant { rate }
            | Strategy::Poisson { rate }
            | Strategy::Replay { rate, .. } => (rate / RATE_PER_WORKER).ceil() as u32,
        };
        wanted.clamp(1, cores)
    }

    /// The load one shard of `shard.count` hosts sends, for sizing its worker group: its
    /// share of the streams, or 1/N of the rate (its slots of the single host's
    /// sequence). Reports keep the single host's strategy.
    pub fn local_part(&self, shard: llmsurge_proto::Shard) -> Strategy {
        let streams = |s: u32| u32::try_from(shard.share(u64::from(s))).unwrap_or(s);
        match *self {
            Strategy::Synchronous => Strategy::Synchronous,
            Strategy::Concurrent { streams: s } => Strategy::Concurrent {
                streams: streams(s),
            },
            Strategy::Throughput { max_concurrency } => Strategy::Throughput {
                max_concurrency: streams(max_concurrency),
            },
            Strategy::Constant { rate } => Strategy::Constant {
                rate: rate / f64::from(shard.count.max(1)),
            },
            Strategy::Poisson { rate } => Strategy::Poisson {
                rate: rate / f64::from(shard.count.max(1)),
            },
            Strategy::Replay {
                time_scale,
                rate,
                starts_per_s,
            } => Strategy::Replay {
                time_scale,
                rate: rate / f64::from(shard.count.max(1)),
                starts_per_s,
            },
        }
    }

    /// Whether more than one worker is allowed.
    pub fn allows_several_workers(&self) -> bool {
        !matches!(self, Strategy::Synchronous)
    }

    /// The strategy's kind, as in `--profile`.
    pub fn kind(&self) -> &'static str {
        match self {
            Strategy::Synchronous => "synchronous",
            Strategy::Concurrent { .. } => "concurrent",
            Strategy::Throughput { .. } => "throughput",
            Strategy::Constant { .. } => "constant",
            Strategy::Poisson { .. } => "poisson",
            Strategy::Replay { .. } => "replay",
        }
    }

    /// The rate (req/s) or stream count the strategy targets, if any.
    pub fn target(&self) -> Option<f64> {
        match *self {
            Strategy::Synchronous => None,
            Strategy::Concurrent { streams } => Some(f64::from(streams)),
            Strategy::Throughput { max_concurrency } => Some(f64::from(max_concurrency)),
            Strategy::Constant { rate } | Strategy::Poisson { rate } => Some(rate),
            Strategy::Replay { rate, .. } => (rate > 0.0).then_some(rate),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Synchronous => write!(f, "synchronous"),
            Strategy::Concurrent { streams } => write!(f, "concurrent@{streams}"),
            Strategy::Throughput { max_concurrency } => write!(f, "throughput@{max_concurrency}"),
            Strategy::Constant { rate } => write!(f, "constant@{}", readable_rate(*rate)),
            Strategy::Poisson { rate } => write!(f, "poisson@{}", readable_rate(*rate)),
            Strategy::Replay { time_scale, .. } => {
                write!(f, "replay@{}x", readable_rate(*time_scale))
            }
        }
    }
}

/// A rate as people read it: `36.7` rather than `36.70167202754906` (a sweep computes its
/// rates). Three significant figures (never fewer than the integer part) tell any two
/// benchmarks of a run apart; the report's `strategy` field keeps the exact rate.
fn readable_rate(v: f64) -> String {
    let decimals = if v.is_finite() && v != 0.0 {
        (2 - v.abs().log10().floor() as i32).clamp(0, 9) as usize
    } else {
        0
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computed_rates_get_readable_names() {
        let c = |rate| Strategy::Constant { rate }.to_string();
        assert_eq!(c(36.70167202754906), "constant@36.7");
        assert_eq!(c(17.591973931051157), "constant@17.6");
        assert_eq!(c(5.0), "constant@5");
        assert_eq!(c(0.5), "constant@0.5");
        assert_eq!(c(0.004_21), "constant@0.00421");
        assert_eq!(c(1234.56), "constant@1235");
        assert_eq!(
            Strategy::Poisson { rate: 94.1126 }.to_string(),
            "poisson@94.1"
        );
        assert_eq!(
            Strategy::Concurrent { streams: 8 }.to_string(),
            "concurrent@8"
        );
    }

    #[test]
    fn worker_counts_follow_the_load() {
        assert_eq!(Strategy::Synchronous.default_workers(16), 1);
        assert_eq!(Strategy::Concurrent { streams: 8 }.default_workers(16), 8);
        assert_eq!(Strategy::Concurrent { streams: 64 }.default_workers(16), 16);
        assert_eq!(Strategy::Constant { rate: 50.0 }.default_workers(16), 1);
        assert_eq!(Strategy::Poisson { rate: 5_500.0 }.default_workers(16), 6);
        assert_eq!(
            Strategy::Throughput {
                max_concurrency: 512
            }
            .default_workers(2),
            2
        );
    }

    #[test]
    fn a_shard_sizes_its_workers_for_its_part_of_the_load() {
        let shard = |index| llmsurge_proto::Shard { index, count: 2 };
        let five = Strategy::Concurrent { streams: 5 };
        assert_eq!(
            five.local_part(shard(0)),
            Strategy::Concurrent { streams: 3 }
        );
        assert_eq!(
            five.local_part(shard(1)),
            Strategy::Concurrent { streams: 2 }
        );
        assert_eq!(
            Strategy::Constant { rate: 3000.0 }
                .local_part(shard(1))
                .default_workers(16),
            2
        );
        assert_eq!(five.local_part(llmsurge_proto::Shard::WHOLE), five);
    }

    #[test]
    fn schedules_carry_the_settings() {
        let s = StrategySettings {
            rampup: Duration::from_secs(2),
            burstiness: 0.5,
        };
        assert_eq!(
            Strategy::Poisson { rate: 3.0 }.schedule(&s),
            Schedule::Arrivals(Arrivals::Poisson {
                rate: 3.0,
                burstiness: 0.5
            })
        );
        assert_eq!(
            Strategy::Synchronous.schedule(&s),
            Schedule::Streams {
                streams: 1,
                rampup: Duration::ZERO
            }
        );
        assert_eq!(Strategy::Constant { rate: 2.5 }.to_string(), "constant@2.5");
    }
}
