//! Whether the wait from intent grew through a benchmark: the kept-up rule's evidence
//! that holds for every open-loop profile, however short or drained the run.
//!
//! An arrival is a request the load's schedule asked for at its own instant: a plain
//! request, the first turn of a session, a call of an agent trace that waits for no
//! other call. (A later turn or a dependent call is due when an earlier one ends, so
//! its intended instant already moves with the server.) For each measured arrival that
//! was answered, its wait is the time from its intended instant to its first token (to
//! its end without one), less what the user's own caps held it (`--max-concurrency`,
//! `--max-prefill-concurrency`: bursts of random arrivals meet a cap by design, and a cap
//! the load overruns is the client-queue rule's to judge). A server that keeps up answers
//! later arrivals as fast as earlier ones; one that falls behind answers each later
//! arrival after a queue longer by the backlog the arrivals before it left. Unlike
//! per-second series this survives a replay that drained long after its schedule ended
//! and a 1.5 s capacity probe.
//!
//! Waits of neighbouring arrivals are alike (a burst waits together), so they are not
//! independent draws: the arrivals are cut, in intended order, into [`BLOCKS`] blocks of
//! about equal count (batch means), and the later half of the blocks is compared with
//! the earlier half, block mean against block mean.
//!
//! Two kinds of arrival carry no wait: an error (a fast 429 or 500 says nothing of the
//! queue; the error rate is judged on its own) and one the stop cut before its answer.
//! A cut wait is only a lower bound, smaller the later the arrival, which would hide the
//! growth; so only arrivals intended before the first cut one are compared. (A server
//! that kept up has its first cut arrival within a request's latency of the stop; one
//! that fell behind answered every arrival before it, by then with a grown queue.)
//!
//! The cut arrivals are evidence of their own ([`Unanswered`]): a server whose slots
//! hung streams hold answers the first arrivals fast and then nothing, so no answered
//! wait grows, but the arrivals it never answered had waited, when the stop cut them,
//! far longer than any answered one.

use crate::sessions::Moments;
use llmsurge_proto::{ErrorKind, MonoNanos, Phase, RequestRecord, RequestStatus};
use serde::{Deserialize, Serialize};

/// Width of a bucket of intended instants, ns.
const BUCKET_NS: u64 = 100_000_000;
/// Blocks the compared arrivals are cut into (batch means), at most.
pub const BLOCKS: usize = 10;
/// Fewest blocks for a comparison (two a half).
const MIN_BLOCKS: usize = 4;
/// Fewest arrivals a block holds.
const MIN_PER_BLOCK: u64 = 2;
/// A cut arrival is overdue past this many times the longest answered wait…
const OVERDUE_FACTOR: f64 = 2.0;
/// …and past this, ms: a short run's answered waits are no scale for its cut ones.
const OVERDUE_FLOOR_MS: f64 = 1000.0;

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

/// One bucket of intended instants: its arrivals' waits (ms) and prompt tokens.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    wait: Welford,
    prompt: Welford,
}

impl Bucket {
    fn merge(&mut self, o: &Bucket) {
        self.wait.merge(&o.wait);
        self.prompt.merge(&o.prompt);
    }
}

/// The earlier half of a benchmark's arrivals against the later half (the report's
/// `intent_drift`; see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IntentDrift {
    /// The earlier half's block means: how many blocks, their mean and variance (ms).
    pub earlier: Moments,
    /// The later half's block means.
    pub later: Moments,
    /// Mean wait of every compared arrival, ms: the scale growth is judged against.
    pub wait_mean_ms: f64,
    /// Arrivals compared (intended before the first one the stop cut).
    pub arrivals: u64,
    /// Mean prompt tokens of the earlier and the later half's arrivals, when the client
    /// knew them: a workload whose requests grow makes them wait longer by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<(f64, f64)>,
}

/// The measured arrivals the stop cut before their first token, against the longest
/// wait of an answered one (the report's `unanswered`; see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Unanswered {
    /// Measured arrivals the stop cut before their first token.
    pub cut: u64,
    /// Measured arrivals answered (a first token, or an end without one; errors are
    /// neither).
    pub answered: u64,
    /// The longest wait from intent of an answered arrival, ms (its caps' waits left out).
    pub answered_max_ms: f64,
    /// A cut arrival is overdue when it had waited longer than this, ms: twice
    /// `answered_max_ms`, and at least 1 s.
    pub overdue_after_ms: f64,
    /// Cut arrivals that had waited longer than `overdue_after_ms` when the stop cut them.
    pub overdue: u64,
    /// The longest a cut arrival had waited when the stop cut it, ms.
    pub oldest_ms: f64,
}

/// The measured arrivals' waits from intent, by the 100 ms of their intended instant.
#[derive(Clone, Debug)]
pub struct IntentDriftCollector {
    t0: MonoNanos,
    buckets: Vec<Bucket>,
    /// The bucket of the earliest-intended arrival the stop cut before its answer.
    first_cut: Option<usize>,
    /// The longest answered wait, ms.
    answered_max_ms: f64,
    /// What each cut arrival had waited when the stop cut it, ms (a lower bound).
    cut_waits: Vec<f64>,
}

impl IntentDriftCollector {
    /// A collector for a benchmark that started at `t0`.
    pub fn new(t0: MonoNanos) -> Self {
        Self {
            t0,
            buckets: Vec::new(),
            first_cut: None,
            answered_max_ms: 0.0,
            cut_waits: Vec::new(),
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
        let parts = r.queue_parts();
        let capped = parts.concurrency.unwrap_or_default() + parts.prefill.unwrap_or_default();
        let wait_until = |t: MonoNanos| t.since(r.scheduled).saturating_sub(capped);
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
                self.cut_waits.push(wait_until(r.end).as_secs_f64() * 1e3);
                return;
            }
        };
        let wait = wait_until(answered).as_secs_f64() * 1e3;
        self.answered_max_ms = self.answered_max_ms.max(wait);
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, Bucket::default());
        }
        let b = &mut self.buckets[i];
        b.wait.push(wait);
        if let Some(p) = r.prompt_tokens {
            b.prompt.push(f64::from(p));
        }
    }

    /// The cut arrivals against the answered ones; `None` when the stop cut none before
    /// its first token.
    pub fn unanswered(&self) -> Option<Unanswered> {
        if self.cut_waits.is_empty() {
            return None;
        }
        let after = (OVERDUE_FACTOR * self.answered_max_ms).max(OVERDUE_FLOOR_MS);
        Some(Unanswered {
            cut: self.cut_waits.len() as u64,
            answered: self.buckets.iter().map(|b| b.wait.n).sum(),
            answered_max_ms: self.answered_max_ms,
            overdue_after_ms: after,
            overdue: self.cut_waits.iter().filter(|&&w| w > after).count() as u64,
            oldest_ms: self.cut_waits.iter().copied().fold(0.0, f64::max),
        })
    }

    /// The drift of the answered arrivals intended before the first cut one: cut into
    /// up to [`BLOCKS`] blocks of about equal count in intended order (whole buckets);
    /// `None` with fewer than [`MIN_BLOCKS`].
    pub fn drift(&self) -> Option<IntentDrift> {
        let end = self.first_cut.unwrap_or(usize::MAX).min(self.buckets.len());
        let buckets = &self.buckets[..end];
        let total: u64 = buckets.iter().map(|b| b.wait.n).sum();
        let per_block = (total / BLOCKS as u64).max(MIN_PER_BLOCK);
        let mut blocks: Vec<Bucket> = Vec::new();
        let mut current = Bucket::default();
        for b in buckets {
            current.merge(b);
            if current.wait.n >= per_block {
                blocks.push(std::mem::take(&mut current));
            }
        }
        // A short last block joins the one before it.
        match blocks.last_mut() {
            Some(last) if current.wait.n > 0 => last.merge(&current),
            _ => {}
        }
        if blocks.len() < MIN_BLOCKS {
            return None;
        }
        let half = blocks.len() / 2;
        // With an odd count the middle block belongs to neither half.
        let (first, second) = (&blocks[..half], &blocks[blocks.len() - half..]);
        let means = |blocks: &[Bucket]| {
            let mut m = Welford::default();
            blocks.iter().for_each(|b| m.push(b.wait.mean));
            m.moments()
        };
        let pooled = |blocks: &[Bucket]| {
            let mut all = Bucket::default();
            blocks.iter().for_each(|b| all.merge(b));
            all
        };
        let (e, l) = (pooled(first), pooled(second));
        let mut all = e;
        all.merge(&l);
        Some(IntentDrift {
            earlier: means(first),
            later: means(second),
            wait_mean_ms: all.wait.mean,
            arrivals: total,
            prompt_tokens: (e.prompt.n > 0 && l.prompt.n > 0)
                .then_some((e.prompt.mean, l.prompt.mean)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::SessionTag;
    use std::time::Duration;

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

    fn growth(d: &IntentDrift) -> f64 {
        d.later.mean_ms - d.earlier.mean_ms
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
        assert!(growth(&d).abs() < 2.0, "{d:?}");
        assert_eq!((d.earlier.count, d.later.count, d.arrivals), (5, 5, 40));
        let d = queue.drift().expect("enough arrivals");
        assert!(growth(&d) > 400.0, "{d:?}");
    }

    #[test]
    fn the_caps_waits_are_not_the_servers() {
        let mut c = IntentDriftCollector::new(at(0));
        for i in 0..40 {
            // Held ever longer by the user's concurrency cap, answered at once after.
            let sent = i * 50 + i * 20;
            c.add(&RequestRecord {
                scheduled: at(i * 50),
                concurrency_wait: Some(Duration::from_millis(i * 20)),
                finish_reason: None,
                late: true,
                ..RequestRecord::completed(at(sent), Some(at(sent + 60)), at(sent + 100), 4)
            });
        }
        let d = c.drift().expect("arrivals");
        assert!(growth(&d).abs() < 1.0, "{d:?}");
        assert!((d.wait_mean_ms - 60.0).abs() < 1.0, "{d:?}");
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
        assert!(growth(&d) > 200.0, "{d:?}");
        // Every answered arrival came before the first cut one.
        assert!(d.arrivals <= 40, "{d:?}");
    }

    /// An arrival intended at `intended` ms that the stop cut at `cut` ms, unanswered.
    fn cut(intended: u64, cut: u64) -> RequestRecord {
        RequestRecord {
            status: RequestStatus::Cancelled,
            first_token: None,
            first_content: None,
            end: at(cut),
            ..arrival(intended, 0)
        }
    }

    #[test]
    fn cut_arrivals_are_overdue_past_twice_the_longest_answered_wait_and_one_second() {
        let mut c = IntentDriftCollector::new(at(0));
        for i in 0..20 {
            c.add(&arrival(i * 50, 60 + i));
        }
        assert_eq!(c.unanswered(), None, "the stop cut none");
        // Hung slots: every later arrival (1 to 3.95 s) waited until the stop at 4 s.
        for i in 20..80 {
            c.add(&cut(i * 50, 4000));
        }
        let u = c.unanswered().expect("cut arrivals");
        assert_eq!((u.cut, u.answered), (60, 20));
        assert_eq!(u.answered_max_ms, 79.0);
        // Twice 79 ms is below the 1 s floor: the arrivals intended before 3 s are overdue.
        assert_eq!(u.overdue_after_ms, 1000.0);
        assert_eq!(u.overdue, 40, "{u:?}");
        assert_eq!(u.oldest_ms, 3000.0);
        // A slow answer raises the bar to twice its wait.
        c.add(&arrival(0, 1400));
        let u = c.unanswered().expect("cut arrivals");
        assert_eq!(u.overdue_after_ms, 2800.0);
        assert_eq!(u.overdue, 4, "{u:?}");
    }

    #[test]
    fn only_measured_arrivals_count_and_their_prompts_are_kept() {
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
                prompt_tokens: Some(100),
                ..arrival(i * 100, 60)
            });
            c.add(&RequestRecord {
                session: Some(tag(1, Some(None))),
                prompt_tokens: Some(300),
                ..arrival(i * 100, 60)
            });
        }
        let d = c.drift().expect("arrivals");
        assert_eq!(d.wait_mean_ms, 60.0);
        assert_eq!(d.arrivals, 40);
        assert_eq!(d.prompt_tokens, Some((200.0, 200.0)));
    }
}
