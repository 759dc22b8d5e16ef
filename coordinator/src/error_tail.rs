//! The books of the server-lost verdict: the trailing run of errors a benchmark's
//! requests end with, kept as records arrive (below `state`, which keeps it, and
//! `result`, which holds its verdict; `validity` says what the verdict means for a run).
//!
//! The server-lost rule. A server that stops answering mid-run leaves a trailing run of
//! errors: ordered by send instant (the intended one for a request never sent), every
//! measured request after the last successful one errored. It says the server was lost
//! when that tail
//! - follows at least one success: of this benchmark, or of an earlier one of the run
//!   (a server that died between two benchmarks, or between two `--repeat` runs, fails
//!   the whole of the later one). A first benchmark where nothing succeeded has its own
//!   verdict (the server may never have answered these requests), and so does a later
//!   one with a timeout among its errors: the server held those requests, overloaded
//!   or hung, and a capacity search bisects down from such a probe,
//! - holds at least [`LOST_MIN_REQUESTS`] errored requests and lasts at least
//!   [`LOST_MIN_SECONDS`] from its first send to the end of the measured window (a few
//!   errors at a fast rate are a blip, not an outage),
//! - and is unlikely to be chance: at the benchmark's own error share before the tail,
//!   that many errors in a row have a probability of at most [`LOST_CHANCE`] (10 in a row
//!   at 25% errors is 1e-6; a server failing half its requests needs 20).
//!
//! A server that holds requests while it fails others is queueing, not lost: a request
//! the stop cut in flight, sent before an error of the tail, breaks it (an overloaded
//! server answering some requests with fast 429s while the rest wait). A hung server's
//! requests time out in the order they were sent, so the ones the stop cuts come after
//! its errors and leave the tail whole. A server restarted mid-run that comes back has
//! successes after its outage, so no tail; scattered errors make short tails that chance explains. A benchmark stopped by
//! `--max-errors` or `--max-error-rate` is left alone: the user's own error budget ended
//! it, its stop reason says so, and a stop on errors always ends in errors. Requests of a
//! dead worker (`worker_died`) are the client's failures, not the server's: they neither
//! make nor break a tail.

use crate::constraints::StopReason;
use llmsurge_proto::{ErrorKind, MonoNanos, RequestRecord, RequestStatus};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Fewest errored requests in a tail that says the server was lost.
pub const LOST_MIN_REQUESTS: u64 = 10;

/// Shortest tail (first send to the end of the measured window), seconds.
pub const LOST_MIN_SECONDS: f64 = 1.0;

/// Highest probability of the tail arising by chance at the error share before it.
pub const LOST_CHANCE: f64 = 1e-6;

/// Errored sends kept to find the tail again when a success sent after some of them is
/// reported after them (workers report in batches, not in send order): the latest
/// arrivals, so memory stays bounded however long the outage.
const TAIL_MEMORY: usize = 4096;

/// Longest error message kept for the verdict (the server chose its length).
const REASON_MAX: usize = 200;

/// The measured requests sent after the last successful one, all errored, kept as
/// records arrive, in any order, in bounded memory.
#[derive(Clone, Debug, Default)]
pub struct ErrorTail {
    /// Send instant of the latest-sent successful request.
    last_success: Option<MonoNanos>,
    /// Errored requests sent after it.
    count: u64,
    /// The earliest send among them.
    first: Option<MonoNanos>,
    /// The latest send among them, with its error (`kind: message`).
    last: Option<(MonoNanos, String)>,
    /// Their sends, the latest [`TAIL_MEMORY`] arrivals. A success reported late is
    /// re-judged against these: exact unless more than that many errors of the tail
    /// arrived before it, which an outage the server recovered from can do (the tail
    /// then restarts from what is kept, which is never an outage's start).
    recent: VecDeque<MonoNanos>,
    /// Sends of the requests the stop cut while the server held them (the latest
    /// [`TAIL_MEMORY`]): one sent before an error of the tail shows a server that held
    /// requests while it failed others, a queue, not an outage.
    held: VecDeque<MonoNanos>,
}

impl ErrorTail {
    /// Adds one measured request.
    pub fn add(&mut self, r: &RequestRecord) {
        let sent = r.start.unwrap_or(r.scheduled);
        match (r.status, &r.error) {
            (RequestStatus::Completed, _) => self.success(sent),
            (RequestStatus::Errored, Some(e)) if e.kind == ErrorKind::WorkerDied => {}
            (RequestStatus::Errored, e) => self.error(sent, || match e {
                Some(e) => format!(
                    "{}: {}",
                    e.kind,
                    llmsurge_proto::inert::bounded(&e.message, REASON_MAX)
                ),
                None => "errored".into(),
            }),
            // Cut by the stop while the server held it: the server was there, queueing.
            (RequestStatus::Cancelled, e)
                if r.start.is_some() && e.as_ref().is_none_or(|e| e.kind != ErrorKind::Planned) =>
            {
                if self.held.len() == TAIL_MEMORY {
                    self.held.pop_front();
                }
                self.held.push_back(sent);
            }
            (RequestStatus::Cancelled, _) => {}
        }
    }

    fn success(&mut self, sent: MonoNanos) {
        if self.last_success.is_some_and(|l| l >= sent) {
            return;
        }
        self.last_success = Some(sent);
        if self.first.is_none_or(|f| f > sent) {
            // Every error of the tail was sent after this success: still the tail.
            return;
        }
        if self.last.as_ref().is_none_or(|(t, _)| *t <= sent) {
            *self = Self {
                last_success: Some(sent),
                // Cuts are judged against the tail at the end, whatever came before.
                held: std::mem::take(&mut self.held),
                ..Self::default()
            };
            return;
        }
        self.recent.retain(|&t| t > sent);
        self.count = self.recent.len() as u64;
        self.first = self.recent.iter().min().copied();
    }

    fn error(&mut self, sent: MonoNanos, reason: impl FnOnce() -> String) {
        if self.last_success.is_some_and(|l| sent <= l) {
            return;
        }
        self.count += 1;
        self.first = Some(self.first.map_or(sent, |f| f.min(sent)));
        if self.last.as_ref().is_none_or(|(t, _)| sent >= *t) {
            self.last = Some((sent, reason()));
        }
        if self.recent.len() == TAIL_MEMORY {
            self.recent.pop_front();
        }
        self.recent.push_back(sent);
    }

    /// The error share of `completed` and `errored` requests before this tail: the
    /// server's while it answered. The errors of an outage the benchmark ended in (one
    /// too short to call) are not its error share.
    pub fn share_before(&self, completed: u64, errored: u64) -> f64 {
        let errored_before = errored.saturating_sub(self.count);
        errored_before as f64 / (completed + errored_before).max(1) as f64
    }

    /// The server-lost verdict on this tail (see the module doc): `t0` the benchmark's
    /// start, `end` the end of its measured window, `completed` and `errored` its measured
    /// requests, `stop` why it ended, `answered_before` what an earlier benchmark of the
    /// run said of the server. `None` when the server was not lost.
    pub fn server_lost(
        &self,
        t0: MonoNanos,
        end: Option<MonoNanos>,
        counts: (u64, u64),
        stop: Option<&StopReason>,
        answered_before: Option<Answered>,
    ) -> Option<ServerLost> {
        let (completed, errored) = counts;
        if matches!(
            stop,
            Some(StopReason::MaxErrors { .. } | StopReason::MaxErrorRate { .. })
        ) {
            return None;
        }
        let (last_success, share) = match (self.last_success, answered_before) {
            (Some(sent), _) => (sent, self.share_before(completed, errored)),
            // No success of its own: every error of the benchmark is the tail, as likely
            // by chance as at the error share of the benchmark that answered.
            (None, Some(a)) => (a.sent, a.error_share),
            (None, None) => return None,
        };
        let first = self.first?;
        let last_error = self.last.as_ref().map_or(first, |(t, _)| *t);
        if self.held.iter().any(|&h| h >= first && h < last_error) {
            return None;
        }
        let span_s = end?.since(first).as_secs_f64();
        let n = self.count;
        if n < LOST_MIN_REQUESTS || span_s < LOST_MIN_SECONDS {
            return None;
        }
        if share.powf(n as f64) > LOST_CHANCE {
            return None;
        }
        Some(ServerLost {
            at_s: first.since(t0).as_secs_f64(),
            last_success_s: last_success.signed_since(t0) as f64 / 1e9,
            errored: n,
            span_s,
            reason: self
                .last
                .as_ref()
                .map(|(_, r)| r.clone())
                .unwrap_or_default(),
        })
    }
}

/// What a benchmark says of the server to the next one of the run (or the next
/// `--repeat` run): the send of the latest success, of any window, and the error share
/// of the benchmark it was in. A later benchmark where nothing succeeded is judged lost
/// from its first send when its errors are that unlikely at that share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Answered {
    /// Send instant of the latest successful request.
    pub sent: MonoNanos,
    /// Errored of completed and errored requests, every window, of its benchmark,
    /// before the errors it ended with ([`ErrorTail::share_before`]).
    pub error_share: f64,
}

/// The server stopped answering mid-run: no measured request sent from `at_s` on
/// succeeded (see the module doc for the rule).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerLost {
    /// Seconds from the benchmark's start (t0) to the send of the first request after
    /// the last success: the instant from which every request errored.
    pub at_s: f64,
    /// Seconds from t0 to the send of the last successful measured request; negative
    /// when that request was of an earlier benchmark (none of this one succeeded).
    pub last_success_s: f64,
    /// Measured requests sent from `at_s` on that errored (a dead worker's aside).
    pub errored: u64,
    /// Seconds from `at_s` to the end of the measured window.
    pub span_s: f64,
    /// The error of the last request sent (`kind: message`, the message cut at 200 bytes).
    pub reason: String,
}

impl ServerLost {
    /// The verdict in one sentence: `the server was lost at 12.4 s: …`.
    pub fn sentence(&self) -> String {
        format!(
            "the server was lost at {:.1} s: no request sent from then on succeeded{} ({} errored over {:.1} s, the last with {})",
            self.at_s,
            self.since_before().unwrap_or_default(),
            self.errored,
            self.span_s,
            self.reason
        )
    }

    /// `, none of this benchmark's: the last success was sent 4.2 s before it started`,
    /// when the last success was of an earlier benchmark.
    pub fn since_before(&self) -> Option<String> {
        (self.last_success_s < 0.0).then(|| {
            format!(
                ", none of this benchmark's: the last success was sent {:.1} s before it started",
                -self.last_success_s
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::RequestError;

    const T0: MonoNanos = MonoNanos(1_000_000_000);

    fn at_ms(ms: u64) -> MonoNanos {
        MonoNanos(T0.0 + ms * 1_000_000)
    }

    fn record(sent_ms: u64, kind: Option<ErrorKind>) -> RequestRecord {
        let start = at_ms(sent_ms);
        let mut r = RequestRecord::completed(start, None, at_ms(sent_ms + 5), 1);
        r.scheduled = start;
        if let Some(kind) = kind {
            r.status = RequestStatus::Errored;
            r.error = Some(RequestError {
                kind,
                message: "connection refused".into(),
            });
        }
        r
    }

    /// The verdict over `records` (added in the order given), the measured window ending
    /// at `end_ms`.
    fn verdict(records: &[RequestRecord], end_ms: u64) -> Option<ServerLost> {
        let mut tail = ErrorTail::default();
        for r in records {
            tail.add(r);
        }
        let completed = records
            .iter()
            .filter(|r| r.status == RequestStatus::Completed)
            .count() as u64;
        let errored = records.len() as u64 - completed;
        tail.server_lost(T0, Some(at_ms(end_ms)), (completed, errored), None, None)
    }

    /// 100 successes every 20 ms, then `n` refused connections every 20 ms.
    fn outage(n: u64) -> Vec<RequestRecord> {
        (0..100 + n)
            .map(|i| record(i * 20, (i >= 100).then_some(ErrorKind::Connect)))
            .collect()
    }

    #[test]
    fn a_server_that_stops_answering_is_lost_at_the_first_send_after_the_last_success() {
        let records = outage(100);
        let lost = verdict(&records, 4000).expect("lost");
        assert_eq!(lost.errored, 100);
        assert!((lost.at_s - 2.0).abs() < 1e-9, "{lost:?}");
        assert!((lost.last_success_s - 1.98).abs() < 1e-9, "{lost:?}");
        assert!((lost.span_s - 2.0).abs() < 1e-9, "{lost:?}");
        assert_eq!(lost.reason, "connect: connection refused");
        assert!(
            lost.sentence().starts_with(
                "the server was lost at 2.0 s: no request sent from then on succeeded (100 errored"
            ),
            "{}",
            lost.sentence()
        );
        // The same records in any arrival order give the same verdict.
        let mut shuffled = records.clone();
        shuffled.reverse();
        assert_eq!(verdict(&shuffled, 4000), Some(lost.clone()));
        let (a, b) = records.split_at(150);
        let interleaved: Vec<RequestRecord> = b.iter().chain(a).cloned().collect();
        assert_eq!(verdict(&interleaved, 4000), Some(lost));
    }

    #[test]
    fn a_server_holding_requests_while_it_fails_others_is_not_lost() {
        // After the last success, fast errors interleaved with requests the server held
        // until the stop cut them: an overloaded server, not a lost one.
        let mut records = outage(100);
        for i in 0..50 {
            let mut cut = record(2010 + i * 40, None);
            cut.status = RequestStatus::Cancelled;
            cut.error = Some(RequestError {
                kind: ErrorKind::Cancelled,
                message: "cancelled: the benchmark stopped".into(),
            });
            records.push(cut);
        }
        assert_eq!(verdict(&records, 4000), None);
        // Cut after every error of the tail (a hung server's last requests): still lost.
        let mut records = outage(100);
        let mut cut = record(3990, None);
        cut.status = RequestStatus::Cancelled;
        records.push(cut);
        assert!(verdict(&records, 4000).is_some());
    }

    #[test]
    fn short_tails_recoveries_and_chance_are_not_an_outage() {
        // Nine errors, or ten within a second, are a blip.
        assert_eq!(verdict(&outage(9), 3000), None);
        let fast: Vec<RequestRecord> = (0..120)
            .map(|i| record(i * 5, (i >= 100).then_some(ErrorKind::Connect)))
            .collect();
        assert_eq!(verdict(&fast, 600), None);
        // A server that comes back: a success after the outage.
        let mut back = outage(100);
        back.push(record(4000, None));
        assert_eq!(verdict(&back, 4010), None);
        // ... also when that success is reported first.
        back.rotate_right(1);
        assert_eq!(verdict(&back, 4010), None);
        // Nothing succeeded at all: another verdict's business.
        let none: Vec<RequestRecord> = (0..50)
            .map(|i| record(i * 50, Some(ErrorKind::Connect)))
            .collect();
        assert_eq!(verdict(&none, 2500), None);
        // Half the requests failed all along: 13 in a row (1e-4) is chance.
        let mut flaky: Vec<RequestRecord> = (0..200)
            .map(|i| {
                record(
                    i * 20,
                    (i % 2 == 1).then_some(ErrorKind::Http { status: 500 }),
                )
            })
            .collect();
        flaky
            .extend((0..12).map(|i| record(4000 + i * 100, Some(ErrorKind::Http { status: 500 }))));
        assert_eq!(verdict(&flaky, 5200), None);
        // ... 26 in a row (1e-8) is not.
        flaky.extend(
            (12..25).map(|i| record(4000 + i * 100, Some(ErrorKind::Http { status: 500 }))),
        );
        assert!(verdict(&flaky, 6500).is_some());
    }

    #[test]
    fn a_server_that_died_between_benchmarks_is_lost_from_the_first_send() {
        // No success of its own; the earlier benchmark's last one was sent 0.5 s before t0.
        let none: Vec<RequestRecord> = (0..50)
            .map(|i| record(100 + i * 50, Some(ErrorKind::Connect)))
            .collect();
        let mut tail = ErrorTail::default();
        for r in &none {
            tail.add(r);
        }
        let before = Answered {
            sent: MonoNanos(T0.0 - 500_000_000),
            error_share: 0.0,
        };
        let lost = tail
            .server_lost(T0, Some(at_ms(2600)), (0, 50), None, Some(before))
            .expect("lost");
        assert_eq!(lost.errored, 50);
        assert!((lost.at_s - 0.1).abs() < 1e-9, "{lost:?}");
        assert!((lost.last_success_s + 0.5).abs() < 1e-9, "{lost:?}");
        assert!(
            lost.sentence().contains(
                "succeeded, none of this benchmark's: the last success was sent 0.5 s before it started (50 errored over 2.5 s"
            ),
            "{}",
            lost.sentence()
        );
        // The same thresholds: nine errors, or a tail under a second, are not an outage.
        let mut short = ErrorTail::default();
        for r in &none[..9] {
            short.add(r);
        }
        assert_eq!(
            short.server_lost(T0, Some(at_ms(2600)), (0, 9), None, Some(before)),
            None
        );
        assert_eq!(
            tail.server_lost(T0, Some(at_ms(1000)), (0, 50), None, Some(before)),
            None
        );
        // A success of its own comes first: the tail starts after it.
        let mut own = ErrorTail::default();
        own.add(&record(50, None));
        for r in &none {
            own.add(r);
        }
        let lost = own
            .server_lost(T0, Some(at_ms(2600)), (1, 50), None, Some(before))
            .expect("lost");
        assert!((lost.last_success_s - 0.05).abs() < 1e-9, "{lost:?}");
        assert_eq!(lost.since_before(), None);
        // A server that failed 90% of the earlier benchmark's requests: 50 errors in a
        // row are chance at that share (0.9^50 = 5e-3), 200 are not (7e-10).
        let flaky = Answered {
            error_share: 0.9,
            ..before
        };
        assert_eq!(
            tail.server_lost(T0, Some(at_ms(2600)), (0, 50), None, Some(flaky)),
            None
        );
        let mut long = ErrorTail::default();
        for i in 0..200 {
            long.add(&record(100 + i * 20, Some(ErrorKind::Connect)));
        }
        assert!(
            long.server_lost(T0, Some(at_ms(4200)), (0, 200), None, Some(flaky))
                .is_some()
        );
    }

    #[test]
    fn the_share_handed_on_leaves_out_the_errors_a_benchmark_ended_with() {
        // 20 successes, 2 scattered errors, then an outage too short to call (6 errors):
        // the server answered at 2 in 22, not 8 in 28. At 8 in 28, thirteen refusals in
        // the next benchmark would be chance (0.29^13 = 1e-7 passes, but 0.4^13 does not:
        // a verdict that hung on how long the first outage happened to run).
        let mut records: Vec<RequestRecord> = (0..22)
            .map(|i| {
                record(
                    i * 50,
                    (i % 10 == 9).then_some(ErrorKind::Http { status: 500 }),
                )
            })
            .collect();
        records.extend((22..28).map(|i| record(i * 50, Some(ErrorKind::Connect))));
        let mut tail = ErrorTail::default();
        for r in &records {
            tail.add(r);
        }
        assert_eq!(verdict(&records, 1450), None, "too short to call");
        assert!((tail.share_before(20, 8) - 2.0 / 22.0).abs() < 1e-12);
    }

    #[test]
    fn dead_workers_and_error_budgets_are_not_the_server() {
        let died: Vec<RequestRecord> = (0..200)
            .map(|i| record(i * 20, (i >= 100).then_some(ErrorKind::WorkerDied)))
            .collect();
        assert_eq!(verdict(&died, 4000), None);
        let mut tail = ErrorTail::default();
        for r in &outage(100) {
            tail.add(r);
        }
        let stop = StopReason::MaxErrors { errors: 100 };
        assert_eq!(
            tail.server_lost(T0, Some(at_ms(4000)), (100, 100), Some(&stop), None),
            None
        );
    }

    #[test]
    fn a_long_outage_is_counted_whole_in_bounded_memory() {
        let records = outage(3 * TAIL_MEMORY as u64);
        let mut tail = ErrorTail::default();
        for r in &records {
            tail.add(r);
        }
        assert_eq!(tail.recent.len(), TAIL_MEMORY);
        let end = 20 * records.len() as u64;
        let lost = tail
            .server_lost(
                T0,
                Some(at_ms(end)),
                (100, 3 * TAIL_MEMORY as u64),
                None,
                None,
            )
            .expect("lost");
        assert_eq!(lost.errored, 3 * TAIL_MEMORY as u64);
        assert!((lost.at_s - 2.0).abs() < 1e-9);
    }
}
