//! Clients that give up (`--cancel`): which requests, and when. The behaviours travel
//! to the workers in [`crate::config::ClientBehaviour`].

use crate::seed::derive_seed;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// When a planned cancellation fires, as the user gave it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelAfter {
    /// A fixed time after the send (`after=500ms`).
    Fixed(Duration),
    /// A time drawn uniformly from `[lo, hi]` after the send, per request by seed
    /// (`after=0.5..2s`).
    Uniform {
        /// The shortest.
        lo: Duration,
        /// The longest.
        hi: Duration,
    },
    /// A fixed time after the first token of any kind (`after=ttft+200ms`); a request
    /// that never gets one is not cancelled by plan.
    AfterFirstToken(Duration),
}

/// `--cancel "share=10%,after=500ms"`: a share of the requests, chosen per slot from
/// (run seed, `cancel`, slot), is closed early by the client.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelSpec {
    /// The share of requests cancelled, in `[0, 1]`.
    pub share: f64,
    /// When each of them is cancelled.
    pub after: CancelAfter,
}

/// When one request is cancelled by plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelAt {
    /// This long after it was sent.
    FromSend(Duration),
    /// This long after its first token.
    FromFirstToken(Duration),
}

impl CancelSpec {
    /// Whether slot `slot` is cancelled by plan, and when: the same for a given seed
    /// whatever `--workers` is.
    pub fn plan(&self, seed: u64, slot: u64) -> Option<CancelAt> {
        let z = derive_seed(seed, "cancel", slot);
        // Two independent uniforms from the 64 bits: the pick, then the delay.
        let pick = (z >> 32) as f64 / (1u64 << 32) as f64;
        if pick >= self.share {
            return None;
        }
        Some(match self.after {
            CancelAfter::Fixed(d) => CancelAt::FromSend(d),
            CancelAfter::AfterFirstToken(d) => CancelAt::FromFirstToken(d),
            CancelAfter::Uniform { lo, hi } => {
                let u = (z & 0xffff_ffff) as f64 / (1u64 << 32) as f64;
                CancelAt::FromSend(lo + (hi.saturating_sub(lo)).mul_f64(u))
            }
        })
    }
}

/// What agent traces call themselves, for the report: each trace's own id and its
/// calls' names, by the trace's index (by recorded start) and the call's index in it.
/// The coordinator keeps it beside the benchmark's plan; the workers never see it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentNames {
    /// Per trace, by index.
    pub traces: Vec<TraceNames>,
}

/// One trace's names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceNames {
    /// The trace's own id (the file's `traceId`, `trace_id` or WEKA `id`).
    pub id: String,
    /// Its calls' names, by call index.
    pub calls: Vec<String>,
    /// Each call's dependencies (call indices), by call index: the links of the
    /// `--outputs otlp` export, so a replay of it runs the same graph.
    pub deps: Vec<Vec<u32>>,
}

impl AgentNames {
    /// The trace of session `session` (a repeated file's sessions go round it again),
    /// and which pass over the file it is, from 1.
    pub fn trace(&self, session: u64) -> Option<(&TraceNames, u64)> {
        let n = self.traces.len() as u64;
        let t = self.traces.get(usize::try_from(session % n.max(1)).ok()?)?;
        Some((t, session / n.max(1) + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_is_kept_and_repeats_by_seed() {
        let spec = CancelSpec {
            share: 0.3,
            after: CancelAfter::Uniform {
                lo: Duration::from_millis(500),
                hi: Duration::from_secs(2),
            },
        };
        let picks: Vec<_> = (0..10_000).map(|s| spec.plan(7, s)).collect();
        let n = picks.iter().flatten().count();
        assert!((2_800..3_200).contains(&n), "{n} of 10000 picked at 30%");
        assert_eq!(
            picks,
            (0..10_000).map(|s| spec.plan(7, s)).collect::<Vec<_>>()
        );
        assert_ne!(
            picks,
            (0..10_000).map(|s| spec.plan(8, s)).collect::<Vec<_>>()
        );
        for p in picks.into_iter().flatten() {
            let CancelAt::FromSend(d) = p else {
                panic!("a uniform delay counts from the send")
            };
            assert!(d >= Duration::from_millis(500) && d <= Duration::from_secs(2));
        }
    }

    #[test]
    fn shares_of_none_and_all() {
        let none = CancelSpec {
            share: 0.0,
            after: CancelAfter::Fixed(Duration::ZERO),
        };
        let all = CancelSpec { share: 1.0, ..none };
        assert!((0..1000).all(|s| none.plan(1, s).is_none()));
        assert!((0..1000).all(|s| all.plan(1, s).is_some()));
    }
}
