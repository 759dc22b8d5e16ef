//! Multi-turn sessions: the books kept from the records of their turns, and the report's
//! session section.
//!
//! Every turn is a request with its own record (and every per-request metric as usual);
//! the record's [`SessionTag`] says which turn of how many sessions it was. From those
//! the coordinator knows each session's outcome without any message of its own: all its
//! turns completed (completed), a turn failed (failed: the turns after it were skipped,
//! never sent), the client gave a turn up by plan (gave up, `--cancel`: the turns after
//! it were skipped too), or the run stopped before its last turn (unfinished: a turn
//! cancelled in flight, or the session left waiting).

use llmsurge_proto::{ErrorKind, MonoNanos, Phase, RequestRecord, RequestStatus, SessionTag};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What the coordinator knows about one session so far.
#[derive(Clone, Copy, Debug)]
struct Track {
    turns: u32,
    /// Turns that completed.
    completed: u32,
    /// A turn failed (errored): the session ended there.
    failed_at: Option<u32>,
    /// A turn was given up by plan (`--cancel`): the session ended there.
    gave_up_at: Option<u32>,
    first_start: Option<MonoNanos>,
    last_end: MonoNanos,
}

/// The session books of one benchmark.
#[derive(Clone, Debug, Default)]
pub struct SessionBook {
    sessions: HashMap<u64, Track>,
    /// Measured completed turns' (session id, TTFT in ms), per turn index.
    ttft_by_turn: Vec<Vec<(u64, f64)>>,
    /// Measured completed turns' end-to-end latency (ms), per turn index.
    e2e_by_turn: Vec<Vec<f64>>,
    /// Requests per turn index (every status).
    requests_by_turn: Vec<u64>,
}

impl SessionBook {
    /// Accounts one turn's record.
    pub fn add(&mut self, tag: SessionTag, r: &RequestRecord) {
        let t = self.sessions.entry(tag.id).or_insert(Track {
            turns: tag.turns,
            completed: 0,
            failed_at: None,
            gave_up_at: None,
            first_start: None,
            last_end: r.end,
        });
        match r.status {
            RequestStatus::Completed => t.completed += 1,
            RequestStatus::Errored => t.failed_at = Some(tag.turn),
            // A stop's cancel leaves the session unfinished: its turns are not all done.
            RequestStatus::Cancelled => {
                if r.error
                    .as_ref()
                    .is_some_and(|e| e.kind == ErrorKind::Planned)
                {
                    t.gave_up_at = Some(tag.turn);
                }
            }
        }
        if tag.turn == 0 {
            t.first_start = r.start.or(Some(r.scheduled));
        }
        t.last_end = t.last_end.max(r.end);
        let i = tag.turn as usize;
        if self.requests_by_turn.len() <= i {
            self.requests_by_turn.resize(i + 1, 0);
            self.ttft_by_turn.resize(i + 1, Vec::new());
            self.e2e_by_turn.resize(i + 1, Vec::new());
        }
        self.requests_by_turn[i] += 1;
        if r.status == RequestStatus::Completed && r.phase == Phase::Measured {
            if let Some(ttft) = r.ttft() {
                self.ttft_by_turn[i].push((tag.id, ttft.as_secs_f64() * 1e3));
            }
            if let Some(e2e) = r.latency() {
                self.e2e_by_turn[i].push(e2e.as_secs_f64() * 1e3);
            }
        }
    }

    /// Whether any session turn was seen.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// The report's session section; `rate_means` says what `--rate` counted, and
    /// `duration_s` is the span the per-second rates divide by.
    pub fn result(&self, rate_means: RateMeans, duration_s: f64) -> SessionResult {
        let mut r = SessionResult {
            rate_means,
            ..SessionResult::default()
        };
        let mut durations = Vec::new();
        let mut turns_done = Vec::new();
        for t in self.sessions.values() {
            r.sessions += 1;
            r.turns_planned += u64::from(t.turns);
            r.turns_completed += u64::from(t.completed);
            turns_done.push(f64::from(t.completed));
            if let Some(at) = t.failed_at {
                r.failed += 1;
                r.turns_failed += 1;
                r.turns_skipped += u64::from(t.turns.saturating_sub(at + 1));
            } else if let Some(at) = t.gave_up_at {
                r.gave_up += 1;
                r.turns_given_up += 1;
                r.turns_skipped += u64::from(t.turns.saturating_sub(at + 1));
            } else if t.completed >= t.turns {
                r.completed += 1;
                if let Some(s) = t.first_start {
                    durations.push(t.last_end.since(s).as_secs_f64() * 1e3);
                }
            } else {
                r.unfinished += 1;
                r.turns_unfinished += u64::from(t.turns.saturating_sub(t.completed));
            }
        }
        if duration_s > 0.0 {
            r.sessions_per_s = r.completed as f64 / duration_s;
            r.turns_per_s = r.turns_completed as f64 / duration_s;
        }
        r.duration_ms = Summary::of(durations);
        r.turns_completed_per_session = Summary::of(turns_done);
        r.ttft_at_equal_turn = TurnDrift::of(&self.ttft_by_turn);
        r.per_turn = (0..self.requests_by_turn.len())
            .map(|i| TurnResult {
                turn: u32::try_from(i + 1).unwrap_or(u32::MAX),
                requests: self.requests_by_turn[i],
                ttft_ms: Summary::of(self.ttft_by_turn[i].iter().map(|&(_, v)| v).collect()),
                e2e_latency_ms: Summary::of(self.e2e_by_turn[i].clone()),
            })
            .collect();
        r
    }
}

/// TTFT at equal turn index, earlier sessions against later ones: every measured
/// completed turn's TTFT less the mean TTFT of its turn index, split at the median
/// session id of that turn (sessions are numbered in the order they started). A later
/// turn carries a longer history, so TTFT grows with the turn index by design; within
/// one turn index it does not, unless requests waited in a queue that grew.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnDrift {
    /// Turns of the earlier-started half of each turn index's sessions.
    pub earlier: Moments,
    /// Turns of the later-started half.
    pub later: Moments,
    /// Mean TTFT (ms) of every turn in either half: the scale growth is judged against.
    pub ttft_mean_ms: f64,
}

/// Count, mean and variance of a set of values (ms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Moments {
    /// How many values.
    pub count: u64,
    /// Their mean, ms.
    pub mean_ms: f64,
    /// Their sample variance, ms².
    pub variance_ms2: f64,
}

impl Moments {
    fn of(values: &[f64]) -> Self {
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n.max(1) as f64;
        let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
        Self {
            count: n as u64,
            mean_ms: mean,
            variance_ms2: if n > 1 { ss / (n - 1) as f64 } else { 0.0 },
        }
    }
}

/// Fewest TTFTs of one turn index that join the comparison: two in each half.
const DRIFT_MIN_PER_TURN: usize = 4;

impl TurnDrift {
    /// The drift of `by_turn` ((session id, TTFT ms) per turn index); `None` while no
    /// turn index has [`DRIFT_MIN_PER_TURN`] TTFTs.
    fn of(by_turn: &[Vec<(u64, f64)>]) -> Option<Self> {
        let (mut earlier, mut later, mut all) = (Vec::new(), Vec::new(), Vec::new());
        for turn in by_turn.iter().filter(|t| t.len() >= DRIFT_MIN_PER_TURN) {
            let mut turn = turn.clone();
            turn.sort_by_key(|&(id, _)| id);
            let mean = turn.iter().map(|&(_, v)| v).sum::<f64>() / turn.len() as f64;
            let half = turn.len() / 2;
            // With an odd count the middle session belongs to neither half.
            earlier.extend(turn[..half].iter().map(|&(_, v)| v - mean));
            later.extend(turn[turn.len() - half..].iter().map(|&(_, v)| v - mean));
            all.extend(
                turn[..half]
                    .iter()
                    .chain(&turn[turn.len() - half..])
                    .map(|&(_, v)| v),
            );
        }
        (!earlier.is_empty()).then(|| Self {
            earlier: Moments::of(&earlier),
            later: Moments::of(&later),
            ttft_mean_ms: Moments::of(&all).mean_ms,
        })
    }
}

/// Which count `--rate` meant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateMeans {
    /// `concurrent` / `throughput`: the rate is the number of concurrent users, each
    /// running one session after another.
    #[default]
    Users,
    /// `constant` / `poisson`: new sessions per second.
    SessionsPerSecond,
}

/// A distribution's summary (exact, from every value).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// How many values.
    pub count: u64,
    /// Their mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Summary {
    /// The summary of `values` (nearest rank); `None` when there are none.
    pub fn of(mut values: Vec<f64>) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let at = |q: f64| values[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(Self {
            count: n as u64,
            mean: values.iter().sum::<f64>() / n as f64,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: values[n - 1],
        })
    }
}

/// One turn index across sessions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnResult {
    /// The turn, from 1.
    pub turn: u32,
    /// Requests sent for it (every status).
    pub requests: u64,
    /// TTFT of its measured completed requests.
    pub ttft_ms: Option<Summary>,
    /// End-to-end latency of its measured completed requests.
    pub e2e_latency_ms: Option<Summary>,
}

/// The report's session section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionResult {
    /// What `--rate` counted.
    pub rate_means: RateMeans,
    /// Sessions started.
    pub sessions: u64,
    /// Sessions whose every turn completed.
    pub completed: u64,
    /// Sessions a failed turn ended.
    pub failed: u64,
    /// Sessions the client gave up by plan (`--cancel` on one of their turns): the
    /// user's own choice, apart from a failure and from a stop.
    #[serde(default)]
    pub gave_up: u64,
    /// Sessions the run stopped before their last turn.
    pub unfinished: u64,
    /// Turns of every started session.
    pub turns_planned: u64,
    /// Turns that completed.
    pub turns_completed: u64,
    /// Turns that failed (one per failed session).
    pub turns_failed: u64,
    /// Turns given up by plan (one per session that gave up).
    #[serde(default)]
    pub turns_given_up: u64,
    /// Turns never sent because an earlier turn of their session failed or was given up.
    pub turns_skipped: u64,
    /// Turns of unfinished sessions not completed (cancelled in flight or never sent).
    pub turns_unfinished: u64,
    /// Completed sessions per second.
    pub sessions_per_s: f64,
    /// Completed turns (requests) per second.
    pub turns_per_s: f64,
    /// Completed sessions: first turn's send to last turn's end (think times included).
    pub duration_ms: Option<Summary>,
    /// Turns completed per started session.
    pub turns_completed_per_session: Option<Summary>,
    /// Per turn index: turn 1's TTFT against turn 5's shows the prefix cache at work.
    pub per_turn: Vec<TurnResult>,
    /// TTFT at equal turn index, earlier-started sessions against later ones (what the
    /// kept-up rule reads for sessions); absent while no turn index has 4 TTFTs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_at_equal_turn: Option<TurnDrift>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::RequestError;

    /// Eight sessions of two turns; turn 2 carries a longer history (100 ms more), and
    /// session `i`'s turns take `extra(i)` ms more.
    fn drift(extra: impl Fn(u64) -> f64) -> TurnDrift {
        let by_turn: Vec<Vec<(u64, f64)>> = [50.0, 150.0]
            .iter()
            .map(|base| (0..8).rev().map(|i| (i, base + extra(i))).collect())
            .collect();
        TurnDrift::of(&by_turn).expect("enough turns")
    }

    #[test]
    fn the_history_cancels_out_and_a_queue_does_not() {
        // Flat at equal turn: the history's 100 ms is in neither half's residuals.
        let d = drift(|_| 0.0);
        assert_eq!((d.earlier.count, d.later.count), (8, 8));
        assert_eq!((d.earlier.mean_ms, d.later.mean_ms), (0.0, 0.0));
        assert_eq!(d.ttft_mean_ms, 100.0);
        // Sessions 4..8 (started later) waited 40 ms more at every turn.
        let d = drift(|i| if i >= 4 { 40.0 } else { 0.0 });
        assert_eq!((d.earlier.mean_ms, d.later.mean_ms), (-20.0, 20.0));
        // Too few TTFTs of any turn index: nothing to compare.
        assert_eq!(TurnDrift::of(&[vec![(0, 1.0), (1, 2.0), (2, 3.0)]]), None);
    }

    fn turn(
        book: &mut SessionBook,
        id: u64,
        turn: u32,
        status: RequestStatus,
        kind: Option<ErrorKind>,
    ) {
        let at = MonoNanos(1_000_000_000 + u64::from(turn) * 1_000_000);
        let mut r = RequestRecord::completed(at, Some(at), at, 1);
        r.status = status;
        r.error = kind.map(|kind| RequestError {
            kind,
            message: String::new(),
        });
        let tag = SessionTag {
            id,
            turn,
            turns: 3,
            graph: None,
        };
        book.add(tag, &r);
    }

    #[test]
    fn a_planned_give_up_ends_its_session_as_gave_up_and_a_stop_leaves_it_unfinished() {
        let mut book = SessionBook::default();
        // Session 0 gives turn 1 up by plan; session 1 is cut by a stop in turn 1.
        turn(&mut book, 0, 0, RequestStatus::Completed, None);
        turn(
            &mut book,
            0,
            1,
            RequestStatus::Cancelled,
            Some(ErrorKind::Planned),
        );
        turn(&mut book, 1, 0, RequestStatus::Completed, None);
        turn(
            &mut book,
            1,
            1,
            RequestStatus::Cancelled,
            Some(ErrorKind::Cancelled),
        );
        let r = book.result(RateMeans::Users, 1.0);
        assert_eq!(
            (r.sessions, r.gave_up, r.unfinished, r.completed),
            (2, 1, 1, 0)
        );
        assert_eq!((r.turns_given_up, r.turns_skipped), (1, 1));
        assert_eq!(
            r.turns_completed
                + r.turns_failed
                + r.turns_given_up
                + r.turns_skipped
                + r.turns_unfinished,
            r.turns_planned,
            "{r:?}"
        );
    }
}
