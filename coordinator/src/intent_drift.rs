//! Whether the wait from intent grew through a benchmark: the kept-up rule's evidence
//! that holds for every open-loop profile, however short or drained the run.
//!
//! An arrival is a request the load's schedule asked for at its own instant: a plain
//! request, the first turn of a session, a call of an agent trace that waits for no
//! other call. (A later turn or a dependent call is due when an earlier one ends, so
//! its intended instant already moves with the server.) For each measured arrival that
//! was answered, the wait from its intended instant to its first token (to its end
//! without one) is kept by the 100 ms of its intended instant. A server that keeps up
//! answers later arrivals as fast as earlier ones; one that falls behind answers each
//! later arrival after a queue longer by the backlog the arrivals before it left, so the
//! later half of the arrivals waits more than the earlier half. Unlike per-second series
//! this survives a replay that drained long after its schedule ended and a 1.5 s
//! capacity probe.
//!
//! Two kinds of arrival carry no wait: an error (a fast 429 or 500 says nothing of the
//! queue; the error rate is judged on its own) and one the stop cut before its answer.
//! A cut wait is only a lower bound, smaller the later the arrival, which would hide the
//! growth; so only arrivals intended before the first cut one are compared. (A server
//! that kept up has its first cut arrival within a request's latency of the stop; one
//! that fell behind answered every arrival before it, by then with a grown queue.)

use crate::sessions::{Moments, TurnDrift};
use llmsurge_proto::{ErrorKind, MonoNanos, Phase, RequestRecord, RequestStatus};

/// Width of a bucket of intended instants, ns.
const BUCKET_NS: u64 = 100_000_000;

/// Count, mean and sum of squared deviations, mergeable (Welford, Chan et al.).
#[derive(Clone, Copy, Debug, Default)]
struct Welford {
    n: u64,
    mean: f64,
    m2: f64,
}

impl Welford {
    fn push(&mut self, x: f64) {
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }

    fn merge(&mut self, o: &Welford) {
        if o.n == 0 {
            return;
        }
        let n = self.n + o.n;
        let d = o.mean - self.mean;
        self.mean += d * o.n as f64 / n as f64;
        self.m2 += o.m2 + d * d * self.n as f64 * o.n as f64 / n as f64;
        self.n = n;
    }

    fn moments(&self) -> Moments {
        Moments {
            count: self.n,
            mean_ms: self.mean,
            variance_ms2: if self.n > 1 {
                self.m2 / (self.n - 1) as f64
            } else {
                0.0
            },
        }
    }
}

/// The measured arrivals' waits from intent, by the 100 ms of their intended instant.
#[derive(Clone, Debug)]
pub struct IntentDriftCollector {
    t0: MonoNanos,
    buckets: Vec<Welford>,
    /// The bucket of the earliest-intended arrival the stop cut before its answer.
    first_cut: Option<usize>,
}

impl IntentDriftCollector {
    /// A collector for a benchmark that started at `t0`.
    pub fn new(t0: MonoNanos) -> Self {
        Self {
            t0,
            buckets: Vec::new(),
            first_cut: None,
        }
    }

    /// Adds one finished record, when it is a measured arrival.
    pub fn add(&mut self, r: &RequestRecord) {
        let arrival = match r.session {
            None => true,
            Some(tag) => match tag.graph {
                Some(step) => step.after.is_none(),
                None => tag.turn == 0,
            },
        };
        if !arrival || r.phase != Phase::Measured {
            return;
        }
        let i = (r.scheduled.since(self.t0).as_nanos() / u128::from(BUCKET_NS)) as usize;
        let answered = match (r.status, r.first_token) {
            (RequestStatus::Errored, _) => return,
            (_, Some(t)) => t,
            (RequestStatus::Completed, None) => r.end,
            // The user's own give-up before an answer: not the stop's cut.
            (RequestStatus::Cancelled, None)
                if r.error
                    .as_ref()
                    .is_some_and(|e| e.kind == ErrorKind::Planned) =>
            {
                return;
            }
            (RequestStatus::Cancelled, None) => {
                self.first_cut = Some(self.first_cut.map_or(i, |c| c.min(i)));
                return;
            }
        };
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, Welford::default());
        }
        self.buckets[i].push(answered.since(r.scheduled).as_secs_f64() * 1e3);
    }

    /// The earlier half of the answered arrivals intended before the first cut one
    /// against the later half, split at the bucket where half of them were intended
    /// (that bucket belongs to neither); `None` with fewer than [`MIN_PER_HALF`] in
    /// either half.
    pub fn drift(&self) -> Option<TurnDrift> {
        let buckets = &self.buckets[..self.first_cut.unwrap_or(usize::MAX).min(self.buckets.len())];
        let total: u64 = buckets.iter().map(|b| b.n).sum();
        let mut seen = 0;
        let split = buckets.iter().position(|b| {
            seen += b.n;
            2 * seen >= total
        })?;
        let (mut earlier, mut later) = (Welford::default(), Welford::default());
        buckets[..split].iter().for_each(|b| earlier.merge(b));
        buckets[split + 1..].iter().for_each(|b| later.merge(b));
        if earlier.n < MIN_PER_HALF || later.n < MIN_PER_HALF {
            return None;
        }
        let mut all = earlier;
        all.merge(&later);
        Some(TurnDrift {
            earlier: earlier.moments(),
            later: later.moments(),
            ttft_mean_ms: all.mean,
        })
    }
}

/// Fewest arrivals in each half for a comparison.
pub const MIN_PER_HALF: u64 = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::SessionTag;

    fn at(ms: u64) -> MonoNanos {
        MonoNanos(1_000_000_000 + ms * 1_000_000)
    }

    /// An arrival intended at `intended` ms whose first token came `wait` ms later.
    fn arrival(intended: u64, wait: u64) -> RequestRecord {
        RequestRecord {
            scheduled: at(intended),
            ..RequestRecord::completed(
                at(intended),
                Some(at(intended + wait)),
                at(intended + wait + 50),
                4,
            )
        }
    }

    #[test]
    fn a_flat_wait_has_no_drift_and_a_growing_queue_has() {
        let mut flat = IntentDriftCollector::new(at(0));
        let mut queue = IntentDriftCollector::new(at(0));
        for i in 0..40 {
            flat.add(&arrival(i * 50, 60 + i % 3));
            // Served at half the offered pace: each arrival waits 25 ms more.
            queue.add(&arrival(i * 50, 60 + i * 25));
        }
        let d = flat.drift().expect("enough arrivals");
        assert!((d.later.mean_ms - d.earlier.mean_ms).abs() < 2.0, "{d:?}");
        let d = queue.drift().expect("enough arrivals");
        assert!(d.later.mean_ms - d.earlier.mean_ms > 400.0, "{d:?}");
        assert_eq!(
            d.earlier.count + d.later.count,
            38,
            "the split bucket's two are in neither"
        );
    }

    #[test]
    fn errors_carry_no_wait_and_the_first_cut_arrival_ends_the_comparison() {
        let mut c = IntentDriftCollector::new(at(0));
        for i in 0..60 {
            // A queue that grows until the stop at 3 s cuts what it had not answered:
            // each cut wait is a lower bound, smaller the later the arrival.
            let wait = 60 + i * 25;
            if i * 50 + wait < 3000 {
                c.add(&arrival(i * 50, wait));
            } else {
                c.add(&RequestRecord {
                    status: RequestStatus::Cancelled,
                    first_token: None,
                    first_content: None,
                    ..arrival(i * 50, 3000 - i * 50)
                });
            }
            // Fast errors all through.
            c.add(&RequestRecord {
                status: RequestStatus::Errored,
                ..arrival(i * 50 + 1, 1)
            });
        }
        let d = c.drift().expect("the answered arrivals");
        assert!(d.earlier.mean_ms >= 60.0, "errors carry no wait: {d:?}");
        assert!(d.later.mean_ms - d.earlier.mean_ms > 200.0, "{d:?}");
        // Every answered arrival came before the first cut one.
        assert!(d.earlier.count + d.later.count <= 40, "{d:?}");
    }

    #[test]
    fn only_measured_arrivals_count() {
        let mut c = IntentDriftCollector::new(at(0));
        let tag = |turn, after: Option<Option<u32>>| SessionTag {
            id: 1,
            turn,
            turns: 3,
            graph: after.map(|after| llmsurge_proto::GraphStep { after, gap_ns: 0 }),
        };
        for i in 0..20 {
            // A later turn and a dependent call are due when another request ended.
            c.add(&RequestRecord {
                session: Some(tag(1, None)),
                ..arrival(i * 100, 5000)
            });
            c.add(&RequestRecord {
                session: Some(tag(2, Some(Some(0)))),
                ..arrival(i * 100, 5000)
            });
            c.add(&RequestRecord {
                phase: Phase::Warmup,
                ..arrival(i * 100, 5000)
            });
            // A first turn and a call that waits for none are arrivals.
            c.add(&RequestRecord {
                session: Some(tag(0, None)),
                ..arrival(i * 100, 60)
            });
            c.add(&RequestRecord {
                session: Some(tag(1, Some(None))),
                ..arrival(i * 100, 60)
            });
        }
        let d = c.drift().expect("arrivals");
        assert_eq!(d.ttft_mean_ms, 60.0);
        assert_eq!(d.earlier.count + d.later.count, 38);
    }
}
