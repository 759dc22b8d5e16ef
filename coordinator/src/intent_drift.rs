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
//! A whole body (`--stream false`) has no first token: its wait runs to its end and
//! holds its decode too, which slows as a server fills without any queue, so a server
//! whose decode slows under load can read as a queue there. Streaming tells the two
//! apart.
//!
//! A cut arrival that a later-intended arrival was answered past is a long request, not
//! a queue: it is left out, and the comparison ends at the first cut arrival nothing
//! passed.
//!
//! The cut arrivals are evidence of their own ([`Unanswered`]): a server (or a cap)
//! whose slots hung streams hold answers the first arrivals fast and then nothing, so no
//! answered wait grows, but the arrivals it never answered had waited, when the stop cut
//! them, far longer than the answered ones (their waits from intent with the caps'
//! waits in, every phase: a clog in the warm-up leaves nothing answered after it), and
//! no arrival intended after them was answered.

use crate::sessions::Moments;
use llmsurge_proto::{ErrorKind, MonoNanos, Phase, RequestRecord, RequestStatus};
use serde::{Deserialize, Serialize};

/// Width of a bucket of intended instants, ns.
const BUCKET_NS: u64 = 100_000_000;
/// Blocks the compared arrivals are cut into (batch means), about (each holds at least
/// this share of them, in whole buckets, so up to a dozen).
pub const BLOCKS: usize = 10;
/// Fewest blocks for a comparison (two a half).
const MIN_BLOCKS: usize = 4;
/// Fewest arrivals a block holds.
const MIN_PER_BLOCK: u64 = 2;
/// A cut arrival is overdue past this many times the median answered wait…
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

/// The measured arrivals the stop cut before their first token, against the waits of
/// the answered ones (the report's `unanswered`; see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Unanswered {
    /// Measured arrivals the stop cut before their first token.
    pub cut: u64,
    /// Of those, the ones an arrival intended after them was answered past: a long
    /// request, not a queue (never overdue).
    #[serde(default)]
    pub passed: u64,
    /// Measured arrivals answered (a first token, or an end without one; errors are
    /// neither).
    pub answered: u64,
    /// The median of the answered arrivals' waits from intent, ms, warm-up and cool-down
    /// included (caps' waits included, as the cut ones'): a queue that grew before the
    /// clog lengthens the last answered ones' waits, not the median's.
    #[serde(default)]
    pub answered_median_ms: f64,
    /// A cut arrival is overdue when it had waited longer than this, ms: twice
    /// `answered_median_ms`, and at least 1 s.
    pub overdue_after_ms: f64,
    /// Cut arrivals not passed that had waited longer than `overdue_after_ms` when the
    /// stop cut them.
    pub overdue: u64,
    /// The longest a cut arrival had waited when the stop cut it, ms.
    pub oldest_ms: f64,
    /// Of the overdue, those never sent that no cap held: no connection took them (still
    /// connecting, as to a server that stopped accepting, or a client too late to send
    /// them), so the server never had them. Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub overdue_unsent: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Unanswered {
    /// Adds another shard's part of the same benchmark: counts add up, each judged on
    /// its own shard's scale; the scale and the oldest wait are the larger.
    pub fn add(&mut self, o: &Unanswered) {
        self.cut += o.cut;
        self.passed += o.passed;
        self.answered += o.answered;
        self.overdue += o.overdue;
        self.overdue_unsent += o.overdue_unsent;
        self.answered_median_ms = self.answered_median_ms.max(o.answered_median_ms);
        self.overdue_after_ms = self.overdue_after_ms.max(o.overdue_after_ms);
        self.oldest_ms = self.oldest_ms.max(o.oldest_ms);
    }
}

impl IntentDrift {
    /// Adds another shard's part of the same benchmark: its blocks join each half.
    pub fn add(&mut self, o: &IntentDrift) {
        let pool = |a: &Moments, b: &Moments| {
            let w = |m: &Moments| Welford {
                n: m.count,
                mean: m.mean_ms,
                m2: m.variance_ms2 * m.count.saturating_sub(1) as f64,
            };
            let mut p = w(a);
            p.merge(&w(b));
            p.moments()
        };
        let n = (self.arrivals + o.arrivals).max(1) as f64;
        let weigh = |a: f64, b: f64| (a * self.arrivals as f64 + b * o.arrivals as f64) / n;
        self.earlier = pool(&self.earlier, &o.earlier);
        self.later = pool(&self.later, &o.later);
        self.wait_mean_ms = weigh(self.wait_mean_ms, o.wait_mean_ms);
        self.prompt_tokens = match (self.prompt_tokens, o.prompt_tokens) {
            (Some(a), Some(b)) => Some((weigh(a.0, b.0), weigh(a.1, b.1))),
            (a, b) => a.or(b),
        };
        self.arrivals += o.arrivals;
    }
}

/// Waits in ms by buckets 5% wide, for a percentile in fixed memory.
#[derive(Clone, Debug, Default)]
struct WaitQuantiles {
    counts: Vec<u64>,
    n: u64,
}

/// The ratio of one bucket's upper edge to its lower edge.
const QUANTILE_GROWTH: f64 = 1.05;

impl WaitQuantiles {
    fn push(&mut self, ms: f64) {
        let i = (ms.max(1.0).ln() / QUANTILE_GROWTH.ln()) as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        self.n += 1;
    }

    /// The `q` quantile, by its bucket's upper edge; 0 with no wait.
    fn quantile(&self, q: f64) -> f64 {
        let rank = (q * self.n as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return QUANTILE_GROWTH.powi(i as i32 + 1);
            }
        }
        0.0
    }
}

/// A measured arrival the stop cut before its first token.
#[derive(Clone, Copy, Debug)]
struct Cut {
    scheduled: MonoNanos,
    /// Intended instant to the cut, ms, caps' waits included.
    waited_ms: f64,
    /// A whole body sent before the cut may be in its decode: the output tokens it
    /// asked for, which its wait is judged against ([`IntentDriftCollector::per_token`]);
    /// `None` for a stream or a request not sent.
    decoding: Option<Option<u32>>,
    /// Never sent, and no cap held it: the server never had it.
    unsent: bool,
}

/// The measured arrivals' waits from intent, by the 100 ms of their intended instant.
#[derive(Clone, Debug)]
pub struct IntentDriftCollector {
    t0: MonoNanos,
    buckets: Vec<Bucket>,
    /// Every answered arrival's wait from intent (caps included): the measured ones…
    answered: WaitQuantiles,
    /// …and those of the warm-up and cool-down, the scale when no measured one was
    /// answered.
    answered_unmeasured: WaitQuantiles,
    /// Whole bodies answered (every phase): their wait per output token asked, µs, the
    /// scale of a whole body cut while it may be decoding.
    per_token: WaitQuantiles,
    /// Measured arrivals answered.
    answered_measured: u64,
    /// The latest intended instant of an answered arrival, all phases.
    last_answered: Option<MonoNanos>,
    /// The measured arrivals the stop cut before their answer.
    cuts: Vec<Cut>,
}

impl IntentDriftCollector {
    /// A collector for a benchmark that started at `t0`.
    pub fn new(t0: MonoNanos) -> Self {
        Self {
            t0,
            buckets: Vec::new(),
            answered: WaitQuantiles::default(),
            answered_unmeasured: WaitQuantiles::default(),
            per_token: WaitQuantiles::default(),
            answered_measured: 0,
            last_answered: None,
            cuts: Vec::new(),
        }
    }

    /// Adds one finished record, when it is an arrival.
    pub fn add(&mut self, r: &RequestRecord) {
        let arrival = match r.session {
            None => true,
            Some(tag) => match tag.graph {
                Some(step) => step.after.is_none(),
                None => tag.turn == 0,
            },
        };
        if !arrival {
            return;
        }
        let measured = r.phase == Phase::Measured;
        let parts = r.queue_parts();
        let capped = parts.concurrency.unwrap_or_default() + parts.prefill.unwrap_or_default();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
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
                if measured {
                    self.cuts.push(Cut {
                        scheduled: r.scheduled,
                        waited_ms: ms(r.end.since(r.scheduled)),
                        decoding: (!r.streamed && r.start.is_some()).then_some(r.max_output_tokens),
                        unsent: r.start.is_none()
                            && parts.concurrency.is_none()
                            && parts.prefill.is_none(),
                    });
                }
                return;
            }
        };
        // The scale of rule 4 (the caps' waits in, as the cut arrivals' are): the
        // measured answers', else the warm-up's (a server that clogged in the warm-up
        // answered nothing after it).
        self.last_answered = Some(
            self.last_answered
                .map_or(r.scheduled, |t| t.max(r.scheduled)),
        );
        let waited = ms(answered.since(r.scheduled));
        if let (false, Some(asked)) = (r.streamed, r.max_output_tokens.filter(|&a| a > 0)) {
            self.per_token.push(waited * 1e3 / f64::from(asked));
        }
        if !measured {
            self.answered_unmeasured.push(waited);
            return;
        }
        self.answered.push(waited);
        self.answered_measured += 1;
        let i = (r.scheduled.since(self.t0).as_nanos() / u128::from(BUCKET_NS)) as usize;
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, Bucket::default());
        }
        let b = &mut self.buckets[i];
        b.wait
            .push(ms(answered.since(r.scheduled).saturating_sub(capped)));
        if let Some(p) = r.prompt_tokens {
            b.prompt.push(f64::from(p));
        }
    }

    /// How long the cut arrival `c` may have waited before it is overdue: `after`, and
    /// for a whole body that may be decoding, twice what the answered whole bodies took
    /// per token asked times its own tokens asked (a long answer is not a queue); one
    /// whose length is unknown, or with no whole body answered, is never overdue.
    fn due(&self, c: &Cut, after: f64) -> f64 {
        match c.decoding {
            None => after,
            Some(Some(asked)) if self.per_token.n > 0 => {
                let per_token_ms = self.per_token.quantile(0.5) / 1e3;
                after.max(OVERDUE_FACTOR * per_token_ms * f64::from(asked))
            }
            Some(_) => f64::INFINITY,
        }
    }

    /// Whether an arrival intended later than the cut one `c` was answered: `c` was
    /// passed (a long request), not left in a queue.
    fn passed(&self, c: &Cut) -> bool {
        self.last_answered.is_some_and(|t| t > c.scheduled)
    }

    /// The cut arrivals against the answered ones; `None` without a measured arrival
    /// (present with none cut, so that shards add up).
    pub fn unanswered(&self) -> Option<Unanswered> {
        if self.cuts.is_empty() && self.answered_measured == 0 {
            return None;
        }
        let scale = if self.answered.n > 0 {
            &self.answered
        } else {
            &self.answered_unmeasured
        };
        let median = scale.quantile(0.5);
        let after = (OVERDUE_FACTOR * median).max(OVERDUE_FLOOR_MS);
        let passed = self.cuts.iter().filter(|c| self.passed(c)).count() as u64;
        let overdue = || {
            self.cuts
                .iter()
                .filter(move |c| !self.passed(c) && c.waited_ms > self.due(c, after))
        };
        Some(Unanswered {
            cut: self.cuts.len() as u64,
            passed,
            answered: self.answered_measured,
            answered_median_ms: median,
            overdue_after_ms: after,
            overdue: overdue().count() as u64,
            oldest_ms: self.cuts.iter().map(|c| c.waited_ms).fold(0.0, f64::max),
            overdue_unsent: overdue().filter(|c| c.unsent).count() as u64,
        })
    }

    /// The drift of the answered arrivals intended before the first cut one: cut into
    /// about [`BLOCKS`] blocks of at least a [`BLOCKS`]th of them in intended order (whole buckets);
    /// `None` with fewer than [`MIN_BLOCKS`].
    pub fn drift(&self) -> Option<IntentDrift> {
        // The first cut arrival nothing later passed: a long request cut early leaves
        // the arrivals after it as they were.
        let first_cut = self
            .cuts
            .iter()
            .filter(|c| !self.passed(c))
            .map(|c| (c.scheduled.since(self.t0).as_nanos() / u128::from(BUCKET_NS)) as usize)
            .min();
        let end = first_cut.unwrap_or(usize::MAX).min(self.buckets.len());
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
    fn cut_arrivals_nothing_passed_are_overdue_past_twice_the_median_answered_wait_and_one_second()
    {
        let mut c = IntentDriftCollector::new(at(0));
        for i in 0..20 {
            c.add(&arrival(i * 50, 60 + i));
        }
        assert_eq!(
            c.unanswered().map(|u| (u.cut, u.overdue)),
            Some((0, 0)),
            "none cut"
        );
        // Hung slots: every later arrival (1 to 3.95 s) waited until the stop at 4 s.
        for i in 20..80 {
            c.add(&cut(i * 50, 4000));
        }
        let u = c.unanswered().expect("cut arrivals");
        assert_eq!((u.cut, u.passed, u.answered), (60, 0, 20));
        assert!((69.0..74.0).contains(&u.answered_median_ms), "{u:?}");
        // Twice that is below the 1 s floor: the arrivals intended before 3 s are overdue.
        assert_eq!(u.overdue_after_ms, 1000.0);
        assert_eq!(u.overdue, 40, "{u:?}");
        assert_eq!(u.oldest_ms, 3000.0);
        // One slow answer does not move the scale (the median, not the longest).
        c.add(&arrival(0, 1400));
        assert_eq!(c.unanswered().expect("cut").overdue, 40);
        // An arrival intended after the cut ones answered past them: long requests, not
        // a queue.
        c.add(&arrival(3960, 20));
        let u = c.unanswered().expect("cut arrivals");
        assert_eq!((u.passed, u.overdue), (60, 0), "{u:?}");
    }

    #[test]
    fn the_measured_answers_set_the_scale_and_a_sent_whole_body_may_be_decoding() {
        let mut c = IntentDriftCollector::new(at(0));
        // A slow warm-up (2 s waits), then fast measured answers: theirs is the scale.
        for i in 0..20 {
            c.add(&RequestRecord {
                phase: Phase::Warmup,
                ..arrival(i * 50, 2000)
            });
            c.add(&arrival(1000 + i * 50, 30));
        }
        for i in 0..10 {
            c.add(&cut(2000 + i * 50, 6000));
        }
        let u = c.unanswered().expect("cut");
        assert!(u.answered_median_ms < 40.0 && u.overdue == 10, "{u:?}");
        // Whole bodies the stop cut after their send may be decoding: judged against
        // what the answered ones took per token asked (30 ms for 12 tokens).
        let whole = |asked: u32| {
            let mut c = IntentDriftCollector::new(at(0));
            for i in 0..20 {
                c.add(&RequestRecord {
                    streamed: false,
                    max_output_tokens: Some(12),
                    ..arrival(i * 50, 30)
                });
            }
            for i in 0..10 {
                c.add(&RequestRecord {
                    streamed: false,
                    max_output_tokens: Some(asked),
                    start: Some(at(2000 + i * 50)),
                    ..cut(2000 + i * 50, 6000)
                });
            }
            c.unanswered().expect("cut").overdue
        };
        // 12 tokens for 4 s: held. 4000 tokens (20 s at that pace): decoding.
        assert_eq!(whole(12), 10);
        assert_eq!(whole(4000), 0);
    }

    #[test]
    fn shards_add_up() {
        // Two shards of the same clog: each judged on its own, the whole holds both.
        let mut shards = [
            IntentDriftCollector::new(at(0)),
            IntentDriftCollector::new(at(0)),
        ];
        for (k, c) in shards.iter_mut().enumerate() {
            for i in 0..20 {
                c.add(&arrival(i * 50 + k as u64, 60 + i * 25));
            }
            for i in 20..30 {
                c.add(&cut(i * 50 + k as u64, 4000));
            }
        }
        let (a, b) = (&shards[0], &shards[1]);
        let mut u = a.unanswered().expect("cut");
        u.add(&b.unanswered().expect("cut"));
        assert_eq!((u.cut, u.answered, u.overdue), (20, 40, 20), "{u:?}");
        let mut d = a.drift().expect("drift");
        let one = d.clone();
        d.add(&b.drift().expect("drift"));
        assert_eq!(d.arrivals, 40);
        assert_eq!(d.earlier.count, 2 * one.earlier.count);
        assert!((d.later.mean_ms - one.later.mean_ms).abs() < 1.0, "{d:?}");
    }

    #[test]
    fn a_long_request_cut_early_leaves_the_comparison_to_the_arrivals_after_it() {
        let mut c = IntentDriftCollector::new(at(0));
        // The first arrival never answers; every later one waits 25 ms more than the one
        // before (a queue).
        c.add(&cut(0, 4000));
        for i in 1..60 {
            c.add(&arrival(i * 50, 60 + i * 25));
        }
        let d = c.drift().expect("the arrivals after the long one");
        assert_eq!(d.arrivals, 59);
        assert!(growth(&d) > 400.0, "{d:?}");
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
