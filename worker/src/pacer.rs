//! The pacer: a dedicated thread that sends each slot of a rate-based schedule on time.
//!
//! tokio's timer wheel has ~1 ms granularity, too coarse for a schedule of thousands of
//! requests per second. The pacer claims a slot, prepares its body while it waits, sleeps
//! with `clock_nanosleep` (timer slack lowered to 1 ns) until just before the slot and
//! spins the last few microseconds, then sends the request itself on an idle keep-alive
//! connection (plain HTTP/1.1) when one is pooled and the group's concurrency has room,
//! and hands the slot to the runtime, which reads the response (or, with no idle
//! connection or no room, sends it too). Sending here takes the runtime thread's wake-up
//! (on a shared core: the rest of another thread's slice) out of the dispatch lag, which
//! is measured per request. While it keeps up, the pacer runs real-time where the process
//! may ([`crate::sched::Realtime`]) from the sleep to a slot until the slot is sent and
//! handed over, so a busy core cannot hold its wake-up back; it prepares each request at
//! normal priority.

use crate::arrivals::ArrivalClock;
use crate::backend::{Backend, Presend};
use crate::sched::Realtime;
use crate::source::{PreparedRequest, RequestSource, SessionState};
use bytes::Bytes;
use llmsurge_proto::{MonoNanos, RequestMedia, Shard, SharedRegion};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// The most the pacer writes of a request, real-time: the head and a body of up to
/// 60 KiB go at once; the rest of a body of megabytes (images) is the runtime's to
/// write, at normal priority, so the pacer does not hold a shared core while the
/// server on it waits to read (issue 22: TTFT 13 ms with real time, 10 without).
pub const PACER_WRITE_MAX: usize = 64 * 1024;
/// Sleep in pieces no longer than this, so a stop flag is seen promptly.
const MAX_SLEEP: Duration = Duration::from_millis(5);
/// Spin rather than sleep when the slot is this close.
const SPIN_WINDOW: Duration = Duration::from_micros(30);
/// Real-time only for a slot at least this far ahead: slots packed closer (over 10,000
/// req/s in one worker) leave the pacer a normal thread, so its real-time spinning and
/// sending can never hold more than about a third of a core.
const REALTIME_AHEAD: Duration = Duration::from_micros(100);

/// One slot, ready to send.
#[derive(Debug)]
pub struct Dispatch {
    /// The slot index.
    pub slot: u64,
    /// When it is due.
    pub scheduled: MonoNanos,
    /// The body, or why it could not be made.
    pub body: Result<Bytes, String>,
    /// The prompt length, when the source knows it.
    pub prompt_tokens: Option<u32>,
    /// The most output tokens the request asks for, when bounded.
    pub max_output_tokens: Option<u32>,
    /// The model the request names, when the source chose one (`--lora`).
    pub model: Option<Arc<str>>,
    /// The sizes of the request's media, when it has any (for its record).
    pub media: Option<Box<RequestMedia>>,
    /// Sticky routing: the session id for the backend's session header, if any.
    pub session_key: Option<Arc<str>>,
    /// The request, when the pacer sent it (wholly or in part) itself.
    pub sent: Option<PacerSent>,
    /// Multi-turn sessions: the session this slot starts (its first turn is the slot's
    /// request, already in its history); `None` for an independent request.
    pub session: Option<SessionState>,
}

/// A request the pacer thread began sending: it holds a unit of the group's concurrency
/// (taken from shared memory) and was counted as started.
#[derive(Debug)]
pub struct PacerSent {
    /// The connection and what is left to write.
    pub presend: Box<Presend>,
    /// When its first byte went to the socket; `None` when the socket took none yet
    /// (the runtime stamps it when it writes).
    pub start: Option<MonoNanos>,
}

/// A request made before its slot is due: its body and what its record needs.
struct Ready {
    body: Result<Bytes, String>,
    prompt_tokens: Option<u32>,
    max_output_tokens: Option<u32>,
    media: Option<Box<RequestMedia>>,
    model: Option<Arc<str>>,
    session_key: Option<Arc<str>>,
}

impl Ready {
    fn new(backend: &Backend, req: PreparedRequest) -> Self {
        Self {
            body: Ok(backend.build_body(&req)),
            prompt_tokens: req.prompt_tokens,
            max_output_tokens: backend.max_output_tokens(&req),
            media: req.media_info(),
            model: req.model,
            session_key: req.session,
        }
    }

    /// A request that could not be made: one failed request says why.
    fn failed(message: String) -> Self {
        Self {
            body: Err(message),
            prompt_tokens: None,
            max_output_tokens: None,
            media: None,
            model: None,
            session_key: None,
        }
    }
}

/// Everything the pacer thread owns.
pub struct Pacer {
    /// The group's shared block.
    pub shm: Arc<SharedRegion>,
    /// The group's start instant.
    pub t0: MonoNanos,
    /// Slot offsets.
    pub clock: ArrivalClock,
    /// Payloads.
    pub source: Box<dyn RequestSource>,
    /// Builds bodies.
    pub backend: Arc<Backend>,
    /// Where due slots go.
    pub tx: UnboundedSender<Dispatch>,
    /// This host's part of the load: shared memory counts the group's local claims,
    /// each mapped here to its slot of the single-host schedule.
    pub shard: Shard,
    /// This worker's index (its concurrency and started counters in shared memory).
    pub worker_id: u32,
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacer")
            .field("t0", &self.t0)
            .finish_non_exhaustive()
    }
}

impl Pacer {
    /// Runs until the schedule is exhausted, stopped, or the runtime goes away.
    pub fn run(mut self) {
        // Lower timer slack (50 µs by default) so sleeps end when asked; per thread.
        let _ = nix::sys::prctl::set_timerslack(1);
        let mut realtime = Realtime::for_this_thread();
        tracing::debug!(
            worker = self.worker_id,
            realtime = realtime.allowed(),
            "pacer: real-time while it keeps up with the schedule"
        );
        if self.source.has_sessions() {
            return self.run_sessions(realtime);
        }
        while let Some(local) = self.shm.claim_slot() {
            // The global slot: its arrival time and its prompt are the single host's.
            let slot = self.shard.global(local);
            let due = self.clock.due_ns(slot, self.source.offset_ns(slot));
            let scheduled = self.t0 + Duration::from_nanos(due);
            let ready = match self.source.request(slot) {
                Ok(Some(req)) => Ready::new(&self.backend, req),
                Ok(None) => {
                    // A finite dataset ran out: nobody may claim past it.
                    self.shm.limit_slots(local);
                    break;
                }
                Err(message) => Ready::failed(message),
            };
            realtime.keep_up(scheduled > MonoNanos::now() + REALTIME_AHEAD);
            if !sleep_until(scheduled, &self.shm) {
                // Stopped while waiting: the slot was never due within the run. It is no
                // request, and the books must say where it went.
                self.shm.return_slot();
                break;
            }
            if !self.dispatch(slot, scheduled, ready, None, &mut realtime) {
                break;
            }
        }
    }

    /// Rate-based multi-turn sessions: arrival `i` of the schedule starts session `i`
    /// (whatever the number of workers, as slots are). While the start is not yet due
    /// the pacer makes the session's plan and its first turn's body; at the start it
    /// claims a request slot for that turn (so `--max-requests` counts requests), sends
    /// it as it sends any slot, and hands the session to the runtime, which runs the
    /// later turns after their think times. Ends when no request slot is left (a stop,
    /// or `--max-requests` reached: the sessions under way end unfinished), or a finite
    /// source has no more sessions.
    fn run_sessions(mut self, mut realtime: Realtime) {
        let exhausted = |shm: &SharedRegion| shm.slots_exhausted();
        while !exhausted(&self.shm) {
            let Some(local) = self.shm.claim_session() else {
                break;
            };
            let id = self.shard.global(local);
            // Agent traces start at their recorded offsets under replay.
            let due = self.clock.due_ns(id, self.source.offset_ns(id));
            let scheduled = self.t0 + Duration::from_nanos(due);
            let (ready, session) = match self.source.session(id) {
                Ok(Some(plan)) => {
                    let mut session = SessionState::new(id, plan);
                    // Router affinity: a sub-agent's first call names its parent.
                    for (key, parent) in session.conversations() {
                        self.backend.affinity().open(key, parent);
                    }
                    match session.next_request() {
                        Some(req) => (Ready::new(&self.backend, req), Some(session)),
                        // A session of no turns is no load (the sources never make one).
                        None => continue,
                    }
                }
                // A finite source ran out of sessions.
                Ok(None) => break,
                // The session cannot be made: one failed request says why, at its start.
                Err(message) => (Ready::failed(message), None),
            };
            realtime.keep_up(scheduled > MonoNanos::now() + REALTIME_AHEAD);
            // The slot is claimed at the start, not before: a start that never comes
            // (a stop meanwhile) holds none, and turns under way keep every slot left.
            if !sleep_until_unless(scheduled, || exhausted(&self.shm)) {
                break;
            }
            let Some(local_slot) = self.shm.claim_slot() else {
                break;
            };
            let slot = self.shard.global(local_slot);
            if !self.dispatch(slot, scheduled, ready, session, &mut realtime) {
                break;
            }
        }
    }

    /// Sends a due slot (itself, when it can) and hands it to the runtime; `false` when
    /// the runtime is gone. The thread is normal again once the slot is handed over: the
    /// next request is prepared at normal priority.
    fn dispatch(
        &self,
        slot: u64,
        scheduled: MonoNanos,
        ready: Ready,
        session: Option<SessionState>,
        realtime: &mut Realtime,
    ) -> bool {
        let sent = match &ready.body {
            // A session's first turn is turn 0 of its trace.
            Ok(body) => self.send_now(
                body,
                slot,
                (
                    ready.session_key.as_deref(),
                    session.as_ref().map(|s| (s.id, 0)),
                ),
            ),
            Err(_) => None,
        };
        self.hand_over(
            Dispatch {
                slot,
                scheduled,
                body: ready.body,
                prompt_tokens: ready.prompt_tokens,
                max_output_tokens: ready.max_output_tokens,
                model: ready.model,
                media: ready.media,
                session_key: ready.session_key,
                sent,
                session,
            },
            realtime,
        )
    }

    /// Hands a due slot to the runtime and turns the thread normal; `false` when the
    /// runtime is gone.
    fn hand_over(&self, dispatch: Dispatch, realtime: &mut Realtime) -> bool {
        let handed = self.tx.send(dispatch);
        // Real time ends with the send: the next body (images of megabytes) is built at
        // normal priority, so the runtime thread reading responses on this core is not
        // held back by it (a yield alone does not let a normal thread run).
        realtime.keep_up(false);
        if let Err(unsent) = handed {
            // The runtime is gone: nobody will send it, or read its response.
            if unsent.0.sent.is_some() {
                // Sent and counted as started: it stays on the books as a send never
                // reported; only its unit of concurrency comes back.
                self.shm.release(self.worker_id);
            } else {
                self.shm.return_slot();
            }
            return false;
        }
        // Let the runtime start the request before this thread prepares the next one: on
        // a busy core, building a body of megabytes (images) first would delay the send
        // it just handed over by that long.
        std::thread::yield_now();
        true
    }
}

impl Pacer {
    /// Writes the request on an idle connection now, if one is pooled and the group's
    /// concurrency cap has room with nobody waiting for it (otherwise the runtime waits
    /// its turn, marks the slot late, and sends it).
    fn send_now(
        &self,
        body: &Bytes,
        slot: u64,
        (session, turn): (Option<&str>, Option<(u64, u32)>),
    ) -> Option<PacerSent> {
        // Under a prefill cap the runtime sends: it waits for the cap's room.
        if self.shm.prefill_cap().is_some() {
            return None;
        }
        // A token to keep or a conversation's own connection: the runtime sends, which
        // reads the response knowing its conversation.
        if self.backend.affinity().needs_runtime() {
            return None;
        }
        let h1 = self.backend.http1()?;
        let affinity = self.backend.affinity().headers(session);
        // A session id that cannot be a header value: the runtime fails the request.
        let headers = self
            .backend
            .request_headers(Some(slot), session, turn, &affinity)
            .ok()?;
        let conn = h1.try_take_idle()?;
        if !self.shm.try_acquire(self.worker_id) {
            h1.put_back(conn);
            return None;
        }
        let out = h1.outgoing_with(self.backend.content_type(), headers, body.clone());
        // Counted before the send, as the runtime path does, so a worker that dies in
        // between still has it on the books.
        self.shm.count_started(self.worker_id);
        let start = MonoNanos::now();
        let presend = h1.try_send(conn, out, PACER_WRITE_MAX);
        let start = (presend.sent() > 0).then_some(start);
        Some(PacerSent { presend, start })
    }
}

/// Sleeps until `target`; `false` if queuing was stopped meanwhile.
pub fn sleep_until(target: MonoNanos, shm: &SharedRegion) -> bool {
    sleep_until_unless(target, || shm.queuing_stopped())
}

/// Sleeps until `target`; `false` if `stopped` became true meanwhile (checked at least
/// every [`MAX_SLEEP`]).
fn sleep_until_unless(target: MonoNanos, stopped: impl Fn() -> bool) -> bool {
    loop {
        if stopped() {
            return false;
        }
        let now = MonoNanos::now();
        if now >= target {
            return true;
        }
        let remaining = target.since(now);
        if remaining <= SPIN_WINDOW {
            while MonoNanos::now() < target {
                std::hint::spin_loop();
            }
            return true;
        }
        let wake = now + (remaining - SPIN_WINDOW).min(MAX_SLEEP);
        let ts = nix::sys::time::TimeSpec::new(
            (wake.0 / 1_000_000_000) as _,
            (wake.0 % 1_000_000_000) as _,
        );
        // An interrupted or failed sleep just loops and re-reads the clock.
        let _ = nix::time::clock_nanosleep(
            nix::time::ClockId::CLOCK_MONOTONIC,
            nix::time::ClockNanosleepFlags::TIMER_ABSTIME,
            &ts,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::shm::{UNLIMITED, stop_flags};

    fn test_backend() -> llmsurge_proto::BackendConfig {
        crate::formats::test_config(llmsurge_proto::RequestFormat::Chat, true)
    }

    /// A source whose every slot is a one-message prompt.
    struct Fixed;

    impl RequestSource for Fixed {
        fn request(&mut self, _slot: u64) -> Result<Option<PreparedRequest>, String> {
            Ok(Some(PreparedRequest {
                prompt: crate::Prompt::Text("hi".into()),
                prompt_tokens: Some(1),
                max_tokens: Some(1),
                model: None,
                user: None,
                session: None,
            }))
        }
    }

    #[test]
    fn a_session_header_goes_in_the_request_tail_only_when_configured() {
        let plain = Backend::new(&test_backend()).expect("backend");
        assert_eq!(plain.session_header(Some("llmsurge-session-3")), Ok(None));
        let backend = Backend::new(&llmsurge_proto::BackendConfig {
            session_header: Some("x-session-id".into()),
            ..test_backend()
        })
        .expect("backend");
        assert_eq!(backend.session_header(None), Ok(None));
        let header = backend
            .session_header(Some("llmsurge-session-3"))
            .expect("a valid value");
        assert_eq!(header, Some(("x-session-id", "llmsurge-session-3")));
        // A value that would end the head early is refused, never written.
        assert!(backend.session_header(Some("a\r\nx-evil: 1")).is_err());
        let h1 = backend.http1().expect("plain http: the own client");
        let headers = crate::http1::RequestHeaders {
            session: header,
            id: None,
            traceparent: None,
            affinity: &[],
        };
        let out = h1.outgoing_with("application/json", headers, Bytes::from_static(b"{}"));
        let tail = format!("{out:?}");
        assert!(
            tail.contains("x-session-id: llmsurge-session-3\\r\\ncontent-type"),
            "{tail}"
        );
        assert!(
            !format!("{:?}", h1.outgoing("application/json", Bytes::new()))
                .contains("x-session-id")
        );
        // A name that is not a header name cannot build a backend.
        assert!(
            Backend::new(&llmsurge_proto::BackendConfig {
                session_header: Some("bad name".into()),
                ..test_backend()
            })
            .is_err()
        );
    }

    #[test]
    fn the_request_id_goes_in_the_tail_unless_the_user_sends_one() {
        let backend = Backend::new(&llmsurge_proto::BackendConfig {
            request_id: Some("llmsurge-0badcafe-2-".into()),
            ..test_backend()
        })
        .expect("backend");
        let headers = backend
            .request_headers(Some(17), None, None, &[])
            .expect("headers");
        assert_eq!(headers.id, Some(("llmsurge-0badcafe-2-", 17)));
        // Outside the schedule (a probe): no id.
        assert_eq!(
            backend
                .request_headers(None, None, None, &[])
                .expect("headers")
                .id,
            None
        );
        let h1 = backend.http1().expect("plain http: the own client");
        let out = h1.outgoing_with("application/json", headers, Bytes::from_static(b"{}"));
        assert!(
            format!("{out:?}").contains("x-request-id: llmsurge-0badcafe-2-17\\r\\ncontent-type"),
            "{out:?}"
        );
        // The user's own x-request-id (any case) replaces ours: never two.
        let theirs = Backend::new(&llmsurge_proto::BackendConfig {
            request_id: Some("llmsurge-0badcafe-2-".into()),
            headers: vec![("X-Request-Id".into(), "mine".into())],
            ..test_backend()
        })
        .expect("backend");
        assert_eq!(
            theirs
                .request_headers(Some(17), None, None, &[])
                .expect("headers")
                .id,
            None
        );
    }

    #[test]
    fn the_traceparent_goes_in_the_tail_unless_turned_off_or_the_users() {
        let on = |cfg: llmsurge_proto::BackendConfig| {
            Backend::new(&cfg).expect("backend").with_trace_seed(9)
        };
        let backend = on(llmsurge_proto::BackendConfig {
            traceparent: true,
            ..test_backend()
        });
        let headers = backend
            .request_headers(Some(17), None, Some((3, 1)), &[])
            .expect("headers");
        let ids = llmsurge_proto::TraceIds::of(9, 17, Some((3, 1)));
        assert_eq!(headers.traceparent, Some(ids));
        let h1 = backend.http1().expect("plain http: the own client");
        let out = h1.outgoing_with("application/json", headers, Bytes::from_static(b"{}"));
        let want = format!(
            "traceparent: 00-{}-{}-01\\r\\ncontent-type",
            ids.trace_hex(),
            ids.span_hex()
        );
        assert!(format!("{out:?}").contains(&want), "{out:?}");
        // A probe (no slot), `--no-traceparent`, or the user's own header: none.
        assert_eq!(
            backend
                .request_headers(None, None, None, &[])
                .expect("headers")
                .traceparent,
            None
        );
        for cfg in [
            test_backend(),
            llmsurge_proto::BackendConfig {
                traceparent: true,
                headers: vec![("TraceParent".into(), "00-1-2-01".into())],
                ..test_backend()
            },
        ] {
            let backend = on(cfg);
            let headers = backend.request_headers(Some(1), None, None, &[]);
            assert_eq!(headers.expect("headers").traceparent, None);
        }
    }

    #[test]
    fn a_slot_held_when_the_stop_comes_is_handed_back() {
        let (shm, _fd) = SharedRegion::create().expect("shm");
        shm.init(1, UNLIMITED, UNLIMITED);
        let shm = Arc::new(shm);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let backend = Backend::new(&test_backend()).expect("backend");
        // One slot every 100 s: slot 0 is due at once, slot 1 long after the stop below,
        // however slowly a busy machine runs this thread (the stop cuts the wait short).
        let pacer = Pacer {
            shm: shm.clone(),
            t0: MonoNanos::now(),
            clock: ArrivalClock::new(
                llmsurge_proto::Arrivals::Constant {
                    rate: 0.01,
                    rampup: Duration::ZERO,
                },
                1,
            ),
            source: Box::new(Fixed),
            backend: Arc::new(backend),
            tx,
            shard: Shard::WHOLE,
            worker_id: 0,
        };
        let handle = std::thread::spawn(move || pacer.run());
        let first = rx.blocking_recv().expect("slot 0");
        assert_eq!(first.slot, 0);
        // Slot 1 is claimed and held while its 100 s pass; stop meanwhile.
        while shm.slots_claimed() < 2 {
            std::thread::yield_now();
        }
        shm.request_stop(stop_flags::STOP_QUEUING);
        handle.join().expect("pacer");
        assert!(rx.try_recv().is_err(), "slot 1 was never due");
        assert_eq!(shm.slots_claimed(), 2);
        assert_eq!(shm.slots_returned(), 1);
    }

    #[test]
    fn sleeps_end_on_time_and_stop_flags_cut_them_short() {
        let (shm, _fd) = SharedRegion::create().expect("shm");
        shm.init(1, UNLIMITED, UNLIMITED);
        let target = MonoNanos::now() + Duration::from_millis(3);
        assert!(sleep_until(target, &shm));
        assert!(MonoNanos::now() >= target);
        shm.request_stop(stop_flags::STOP_QUEUING);
        assert!(!sleep_until(
            MonoNanos::now() + Duration::from_secs(60),
            &shm
        ));
    }

    /// A source of two-turn sessions.
    struct Sessions;

    impl RequestSource for Sessions {
        fn request(&mut self, _slot: u64) -> Result<Option<PreparedRequest>, String> {
            Err("sessions only".into())
        }

        fn has_sessions(&self) -> bool {
            true
        }

        fn session(&mut self, id: u64) -> Result<Option<crate::SessionPlan>, String> {
            let turn = |k: u64| crate::Turn {
                request: PreparedRequest {
                    prompt: crate::Prompt::Text(format!("session {id} turn {k}")),
                    prompt_tokens: Some(4),
                    max_tokens: Some(1),
                    model: None,
                    user: None,
                    session: None,
                },
                think_ns: 0,
                recorded_reply: None,
                tool_result: None,
                tool_result_tokens: 0,
                after: None,
                parent_session: None,
            };
            Ok(Some(crate::SessionPlan {
                system: Some(format!("system {id}")),
                system_tokens: Some(2),
                turns: vec![turn(0), turn(1)],
            }))
        }
    }

    #[test]
    fn sessions_start_on_the_arrival_schedule_and_claim_their_slot_only_when_due() {
        let (shm, _fd) = SharedRegion::create().expect("shm");
        shm.init(1, UNLIMITED, UNLIMITED);
        let shm = Arc::new(shm);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let backend = Backend::new(&test_backend()).expect("backend");
        let t0 = MonoNanos::now();
        // A session every 50 s: session 0 starts at once, session 1 long after the stop
        // below, however slowly a busy machine runs this thread.
        let pacer = Pacer {
            shm: shm.clone(),
            t0,
            clock: ArrivalClock::new(
                llmsurge_proto::Arrivals::Constant {
                    rate: 0.02,
                    rampup: Duration::ZERO,
                },
                1,
            ),
            source: Box::new(Sessions),
            backend: Arc::new(backend),
            tx,
            shard: Shard::WHOLE,
            worker_id: 0,
        };
        let handle = std::thread::spawn(move || pacer.run());
        let first = rx.blocking_recv().expect("session 0");
        assert_eq!((first.slot, first.scheduled), (0, t0));
        let body = String::from_utf8(first.body.expect("a body").to_vec()).expect("utf-8");
        assert!(
            body.contains("system 0") && body.contains("session 0 turn 0"),
            "turn 1 carries the system prompt and its message: {body}"
        );
        assert!(!body.contains("turn 1"), "{body}");
        let session = first.session.expect("the session to run");
        assert_eq!((session.id, session.upcoming()), (0, Some((1, 0))));
        // Session 1 is planned and waiting for its start, but holds no slot yet: a stop
        // meanwhile leaves nothing to hand back.
        while shm.sessions_claimed() < 2 {
            std::thread::yield_now();
        }
        shm.request_stop(stop_flags::STOP_QUEUING);
        handle.join().expect("pacer");
        assert!(rx.try_recv().is_err(), "session 1 was never due");
        assert_eq!((shm.slots_claimed(), shm.slots_returned()), (1, 0));
    }
}
