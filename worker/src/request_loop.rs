//! The one request loop, parameterised by the schedule.
//!
//! Two shapes feed it. `Streams`: each local stream claims a slot, sends it, waits for the
//! answer, and claims the next. `Arrivals`: the pacer thread hands over slots as they
//! fall due, and each becomes a task. Both end in [`Context::run_request`], which takes
//! a unit of the group-wide concurrency (waiting its turn in the group's queue, first
//! come first served across workers, and marking the request late when the cap is
//! reached), runs the exchange against the cancel flag, and reports it. Beside
//! them, a probe task measures how late the runtime runs a due timer, and streams
//! measure their turnaround (previous end → next send): the client's own slowness,
//! which stream strategies' dispatch lag cannot show.

use crate::arrivals::ArrivalClock;
use crate::backend::{Backend, Exchange};
use crate::backoff::ConnectBackoff;
use crate::graph::{DueCall, GraphRun};
use crate::pacer::{Dispatch, Pacer, PacerSent};
use crate::reporter::{Reporter, SlotInfo};
use crate::source::{PreparedRequest, RequestSource, SessionState};
use crate::timers::Timers;
use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::Either;
use futures_util::stream::{FuturesUnordered, StreamExt};
use llmsurge_proto::shm::{Cap, stop_flags};
use llmsurge_proto::{
    Arrivals, CancelAt, ClientBehaviour, ErrorKind, MonoNanos, RequestMedia, SessionTag, Shard,
    SharedRegion,
};
use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch::error::RecvError;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

/// A batch this large is flushed without waiting for the interval.
pub const BATCH_LIMIT: usize = 2048;

/// Shared by every task of the worker's request loop.
#[derive(Debug)]
pub struct Context {
    /// This worker's index.
    pub id: u32,
    /// The group's shared block.
    pub shm: Arc<SharedRegion>,
    /// The HTTP backend.
    pub backend: Arc<Backend>,
    /// Collects records for the next flush.
    pub reporter: Rc<RefCell<Reporter>>,
    /// Becomes `true` when in-flight requests must be cancelled.
    pub cancel: watch::Receiver<bool>,
    /// Becomes `true` when no slot is left to claim (a stop flag, or the slot limit
    /// reached): ends ramp waits.
    pub stop: watch::Receiver<bool>,
    /// A request gave its concurrency back (a local one, or any of the group's while
    /// someone waits: [`ReleaseWaker`]).
    pub released: Arc<Notify>,
    /// The reporter holds a full batch.
    pub flush_now: Rc<Notify>,
    /// This host's part of a multi-host load: local claims and streams map to the
    /// single host's slots and streams through it.
    pub shard: Shard,
    /// Agentic client behaviours: planned cancellations.
    pub behaviour: ClientBehaviour,
    /// The benchmark's seed (which requests `--cancel` picks).
    pub seed: u64,
    /// A request gave a unit of the prefill cap back (as `released`).
    pub prefill_released: Arc<Notify>,
    /// The one precise timer of the worker's waits on an instant (think times, gaps).
    pub timers: Rc<Timers>,
}

/// A thread that sleeps on the group's release futex and passes each release, by any
/// worker, to this worker's waiters. Without it a waiter heard of another worker's
/// release only at its next poll, a millisecond or two during which the unit stood idle.
/// Stops when dropped (within [`WAKER_TIMEOUT`]) or when the run is cancelled.
#[derive(Debug)]
pub struct ReleaseWaker {
    stop: Arc<std::sync::atomic::AtomicBool>,
}

/// How long the waker sleeps at most before it looks at its stop flag.
const WAKER_TIMEOUT: Duration = Duration::from_millis(50);

/// Up to this many local waiters of a cap, the waker wakes them all on a release: the
/// one in turn is among them. Beyond, it wakes the longest waiter only (a woken waiter
/// not in turn goes to the back of the local order), and the poll finds the rest: the
/// cost per release stays bounded however long the queue.
const WAKE_ALL_UP_TO: u64 = 64;

impl ReleaseWaker {
    /// Starts the thread when a cap is set and other workers share it; `None` otherwise
    /// (local releases notify directly), or when the thread cannot be started (the
    /// poll still finds every release). `wake`: the notifies of the concurrency cap's
    /// waiters and of the prefill cap's.
    pub fn start(shm: &Arc<SharedRegion>, worker: u32, wake: [Arc<Notify>; 2]) -> Option<Self> {
        let capped = shm.concurrency_cap().is_some() || shm.prefill_cap().is_some();
        if !capped || shm.worker_count() < 2 {
            return None;
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (shm, flag) = (shm.clone(), stop.clone());
        std::thread::Builder::new()
            .name("release-waker".into())
            .spawn(move || {
                let mut seen = shm.release_epoch();
                while !flag.load(std::sync::atomic::Ordering::Relaxed) && !shm.cancel_requested() {
                    shm.wait_for_release(seen, WAKER_TIMEOUT);
                    let now = shm.release_epoch();
                    if now != seen {
                        seen = now;
                        for (cap, n) in [Cap::Concurrency, Cap::Prefill].iter().zip(&wake) {
                            if shm.queued(*cap, worker) <= WAKE_ALL_UP_TO {
                                n.notify_waiters();
                            } else {
                                n.notify_one();
                            }
                        }
                    }
                }
            })
            .ok()?;
        Some(ReleaseWaker { stop })
    }
}

impl Drop for ReleaseWaker {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How a request goes out.
enum Send {
    /// The runtime sends the body.
    Fresh(Bytes),
    /// The pacer thread began sending it.
    Pacer(PacerSent),
}

/// How an exchange's wait ended.
enum Ended {
    /// The exchange ran to its end (or failed on its own).
    Done,
    /// A stop cancelled it.
    Stopped,
    /// The client gave up by plan (`--cancel`).
    GaveUp,
}

/// Resolves when the client gives up on a request sent at `start`, by its plan; never
/// without one. `first` (made where the plan counts from the first token) turns `true`
/// at the request's first token.
async fn planned_cancel(
    timers: &Rc<Timers>,
    plan: CancelAt,
    start: MonoNanos,
    mut first: Option<watch::Receiver<bool>>,
) {
    match plan {
        CancelAt::FromSend(after) => timers.until_precisely(start + after).await,
        CancelAt::FromFirstToken(after) => {
            if first_token(first.as_mut()).await.is_err() {
                // The exchange ended without a first token: never by plan.
                std::future::pending::<()>().await;
            }
            timers.until_precisely(MonoNanos::now() + after).await;
        }
    }
}

/// Until a boxed wait (a planned cancellation, the prefill cap's first token) ends;
/// never without one.
async fn until<T>(wait: Option<&mut Pin<Box<impl Future<Output = T>>>>) -> T {
    match wait {
        Some(wait) => wait.await,
        None => std::future::pending().await,
    }
}

/// Until the exchange's first token (`Err`: it ended without one); never without a
/// channel.
async fn first_token(first: Option<&mut watch::Receiver<bool>>) -> Result<(), RecvError> {
    match first {
        Some(rx) => rx.wait_for(|f| *f).await.map(|_| ()),
        None => std::future::pending().await,
    }
}

/// How a call of an agent trace goes out.
enum CallSend {
    /// The pacer prepared (and perhaps sent) it at the trace's start.
    First(FirstTurn),
    /// The runtime sends it when due.
    Due(DueCall, PreparedRequest, Bytes),
}

/// How a call of an agent trace ended.
struct CallEnd {
    turn: usize,
    end: MonoNanos,
    /// It failed: the trace sends nothing more.
    failed: bool,
    /// It failed at its connect (`crate::backoff`).
    refused: bool,
    /// A stop came first (or no slot was left): the trace is unfinished.
    stopped: bool,
}

/// How an agent trace's graph ended ([`Context::run_graph`]).
struct GraphEnd {
    /// `false` when a stop, or the last slot gone, left it unfinished.
    go_on: bool,
    /// A call failed.
    failed: bool,
    /// A call failed at its connect (`crate::backoff`).
    refused: bool,
    /// When its last call ended.
    end: MonoNanos,
}

/// A session's first turn as the pacer prepared it at the session's scheduled start.
#[derive(Debug)]
pub struct FirstTurn {
    /// The slot it claimed.
    pub slot: u64,
    /// The session's start: when the arrival schedule had it due.
    pub scheduled: MonoNanos,
    /// Its body, or why it could not be made.
    pub body: Result<Bytes, String>,
    /// Its prompt length, when the source knows it.
    pub prompt_tokens: Option<u32>,
    /// The most output tokens it asks for, when bounded.
    pub max_output_tokens: Option<u32>,
    /// `--lora`: its model's index in the split.
    pub model: Option<u16>,
    /// The sizes of its media, when it has any (for its record).
    pub media: Option<Box<RequestMedia>>,
    /// Sticky routing: the session id for the backend's session header, if any.
    pub session_key: Option<Arc<str>>,
    /// The request, when the pacer sent it (wholly or in part) itself.
    pub sent: Option<PacerSent>,
}

/// How often the runtime probe wakes.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(10);

/// Measures how late the runtime runs a task whose timer fired: every response chunk
/// waits as long before it is timestamped, so a slow client shows here whatever the
/// strategy. Includes up to 1 ms of tokio's timer granularity.
/// It also moves the connections the backend opened into the reporter, and closes the
/// idle ones too old to be reused (users in think time hold no connection).
async fn probe_runtime(reporter: Rc<RefCell<Reporter>>, backend: Arc<Backend>) {
    loop {
        let due = MonoNanos::now() + PROBE_INTERVAL;
        tokio::time::sleep_until(tokio_instant(due)).await;
        let mut reporter = reporter.borrow_mut();
        reporter.runtime_delay(due, MonoNanos::now());
        for (began, took) in backend.drain_connects() {
            reporter.connected(began, took);
        }
        drop(reporter);
        backend.close_stale_idle();
    }
}

/// How long before a turn is due its request is made (the whole history as one body):
/// long enough for a long conversation's body, short enough that a thinking user holds
/// none.
const BODY_LEAD: Duration = Duration::from_millis(5);

/// Converts a monotonic instant to a tokio instant.
pub fn tokio_instant(t: MonoNanos) -> tokio::time::Instant {
    tokio::time::Instant::from_std(t.to_instant())
}

impl Context {
    /// Sends one request and reports its outcome. Never fails: every outcome is a record.
    /// Returns when it ended.
    pub fn run_request(
        &self,
        info: SlotInfo,
        body: Result<Bytes, String>,
    ) -> impl Future<Output = MonoNanos> {
        // A map, not an `async` body: that would keep its arguments' room (or the
        // exchange's twice) beside the exchange while the request streams.
        self.run_exchange(info, body, None)
            .map(|ex| ex.end_or_now())
    }

    /// As [`Context::run_request`], returning the exchange; `reply: Some` collects the
    /// reply's text into `ex.reply` (multi-turn sessions). A request held by either of
    /// the user's caps (concurrency, prefill) is late, and its exchange carries how long
    /// each held it: client queue time the user asked for, apart from dispatch lag.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn keeps a copy of each argument for the whole request"
    )]
    fn run_exchange(
        &self,
        mut info: SlotInfo,
        body: Result<Bytes, String>,
        reply: Option<String>,
    ) -> impl Future<Output = Exchange> {
        // Not an `async fn`, whose arguments move into locals beside their own room: the
        // block uses them in place (`info` alone is 112 bytes).
        async move {
            // The stop first: the requests it cancels give their concurrency back, and a
            // request waiting for it must not take it and be sent only to be cancelled.
            let concurrency_wait = if self.cancelled() {
                Err(None)
            } else if self.shm.try_acquire(self.id) {
                Ok(None)
            } else {
                // Held by the cap: it waits its turn in the group's queue.
                info.late = true;
                self.wait_for_room(Cap::Concurrency, &self.released)
                    .await
                    .map(Some)
                    .map_err(Some)
            };
            let concurrency_wait = match concurrency_wait {
                Ok(waited) => waited,
                Err(waited) => {
                    let mut ex = Exchange::failed(
                        ErrorKind::Cancelled,
                        if info.late {
                            "cancelled before it could be sent (concurrency cap)"
                        } else {
                            "cancelled before it could be sent: the benchmark stopped"
                        },
                    );
                    ex.concurrency_wait = waited;
                    self.report(info, &ex);
                    return ex;
                }
            };
            // Taken apart in a block of its own: the prefill cap's answer (an `Exchange`'s
            // room) would otherwise stay in the future while the request streams.
            let (body, waited) = {
                let ready = match body {
                    Err(message) => Err(Exchange::failed(ErrorKind::Request, message)),
                    Ok(body) => match self.wait_for_prefill_room().await {
                        Err(ex) => Err(ex),
                        Ok(waited) => Ok((body, waited)),
                    },
                };
                match ready {
                    Ok(ready) => ready,
                    Err(ex) => return self.close(info, ex, concurrency_wait),
                }
            };
            // Held by the prefill cap: late, and its wait is not a send gap.
            info.late |= waited.is_some_and(|w| !w.is_zero());
            // Counted in shared memory before the send and before the report, so a worker
            // that dies in between still has it on the books.
            self.shm.count_started(self.id);
            let mut ex = self
                .exchange(&info, MonoNanos::now(), Send::Fresh(body), reply, waited)
                .await;
            ex.prefill_wait = waited;
            self.close(info, ex, concurrency_wait)
        }
    }

    /// Books how long the concurrency cap held `ex` and reports it.
    fn close(
        &self,
        mut info: SlotInfo,
        mut ex: Exchange,
        concurrency_wait: Option<Duration>,
    ) -> Exchange {
        ex.concurrency_wait = concurrency_wait;
        if ex.prefill_wait.is_some_and(|w| !w.is_zero()) {
            // Cancelled while the prefill cap held it.
            info.late = true;
        }
        self.finish(info, &ex);
        ex
    }

    /// `--max-prefill-concurrency`: waits until the group has room for one more request
    /// before its first token and takes it; returns how long the cap held it (zero when
    /// it had room at once; `None` without a cap), or the cancelled exchange, with how
    /// long it was held, when a stop came first.
    async fn wait_for_prefill_room(&self) -> Result<Option<Duration>, Exchange> {
        if self.shm.prefill_cap().is_none() {
            return Ok(None);
        }
        if self.shm.try_acquire_prefill() {
            return Ok(Some(Duration::ZERO));
        }
        match self
            .wait_for_room(Cap::Prefill, &self.prefill_released)
            .await
        {
            // At least a nanosecond: held, however briefly.
            Ok(waited) => Ok(Some(waited.max(Duration::from_nanos(1)))),
            Err(waited) => {
                let mut ex = Exchange::failed(
                    ErrorKind::Cancelled,
                    "cancelled before it could be sent (prefill cap)",
                );
                ex.prefill_wait = Some(waited);
                Err(ex)
            }
        }
    }

    /// Waits its turn in `cap`'s queue, first come first served across the group, and
    /// takes a unit; returns how long it waited, or (`Err`) how long until a stop
    /// cancelled it, which gives its place up.
    ///
    /// `released` wakes it when a request of this worker gave a unit back; releases by
    /// other workers reach it through the [`ReleaseWaker`], and a poll every
    /// millisecond backs both. The registration for `released` is kept across polls, so
    /// a local release wakes this worker's longest waiter (the one most likely next in
    /// the queue), not whichever polled last.
    async fn wait_for_room(&self, cap: Cap, released: &Notify) -> Result<Duration, Duration> {
        let began = MonoNanos::now();
        let mut cancel = self.cancel.clone();
        let mut place = self.shm.join_queue(cap, self.id);
        let notified = released.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        loop {
            let dropped = self.shm.stop_flags() & stop_flags::DROP_UNSENT != 0;
            if self.cancelled() || dropped {
                // `place` drops: the ticket leaves the queue, nobody waits behind it.
                return Err(MonoNanos::now().since(began));
            }
            if place.try_admit() {
                return Ok(MonoNanos::now().since(began));
            }
            tokio::select! {
                () = &mut notified => {
                    notified.set(released.notified());
                    notified.as_mut().enable();
                }
                _ = tokio::time::sleep(Duration::from_millis(1)) => {}
                Ok(_) = cancel.wait_for(|c| *c) => {}
            }
        }
    }

    /// Whether the group was told to cancel: shared memory's flag, not only the cancel
    /// watch, which follows it up to a millisecond late (a request admitted in between
    /// would go out after another worker had stopped).
    fn cancelled(&self) -> bool {
        *self.cancel.borrow() || self.shm.cancel_requested()
    }

    /// Gives a unit of the prefill cap back.
    fn release_prefill(&self) {
        self.shm.release_prefill();
        self.prefill_released.notify_one();
    }

    /// Finishes a request the pacer thread began sending: it already holds a unit of
    /// the group's concurrency and was counted as started.
    pub fn run_sent(&self, info: SlotInfo, sent: PacerSent) -> impl Future<Output = MonoNanos> {
        // A map, as in `run_request`.
        self.run_sent_exchange(info, sent, None)
            .map(|ex| ex.end_or_now())
    }

    /// As [`Context::run_sent`], returning the exchange; `reply: Some` collects the
    /// reply's text (a session's first turn).
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn keeps a copy of each argument for the whole request"
    )]
    fn run_sent_exchange(
        &self,
        info: SlotInfo,
        sent: PacerSent,
        reply: Option<String>,
    ) -> impl Future<Output = Exchange> {
        // Not an `async fn`, as `run_exchange`.
        async move {
            let start = sent.start.unwrap_or_else(MonoNanos::now);
            // The pacer never sends under a prefill cap: this holds no unit of it.
            let ex = self
                .exchange(&info, start, Send::Pacer(sent), reply, None)
                .await;
            self.finish(info, &ex);
            ex
        }
    }

    /// Runs one exchange that holds a unit of concurrency, against the cancel flag;
    /// `reply: Some` collects the reply's text (multi-turn sessions). `prefill: Some`
    /// when it holds a unit of the prefill cap, given back at its first token or end.
    async fn exchange(
        &self,
        info: &SlotInfo,
        start: MonoNanos,
        send: Send,
        reply: Option<String>,
        prefill: Option<Duration>,
    ) -> Exchange {
        {
            let mut reporter = self.reporter.borrow_mut();
            reporter.started(info, start);
            reporter.send_gap(info, start);
        }
        let mut ex = Exchange {
            start: Some(start),
            reply,
            ..Exchange::default()
        };
        let mut cancel = self.cancel.clone();
        let planned = self
            .behaviour
            .cancel
            .and_then(|spec| spec.plan(self.seed, info.slot));
        let mut holding_prefill = prefill.is_some();
        // A channel only where something waits for the first token: an allocation per
        // request otherwise, held while it streams.
        let mut first = None;
        if holding_prefill || matches!(planned, Some(CancelAt::FromFirstToken(_))) {
            let (tx, rx) = watch::channel(false);
            ex.first_token_signal = Some(Arc::new(tx));
            first = Some(rx);
        }
        let ended = {
            // Boxed, and only where a cancellation is planned: its wait would make every
            // exchange larger while it streams.
            let mut give_up = planned
                .map(|plan| Box::pin(planned_cancel(&self.timers, plan, start, first.clone())));
            // The prefill cap's wait for the first token: boxed, and only under the cap.
            let mut prefill_over = first
                .clone()
                .filter(|_| holding_prefill)
                .map(|mut rx| Box::pin(async move { first_token(Some(&mut rx)).await }));
            // Either future, not an async block matching on `send`: the block would hold
            // a copy of `send` while the response streams.
            let run = match send {
                Send::Fresh(body) => Either::Left(self.backend.execute_for(
                    body,
                    info.slot,
                    (
                        info.session_key.as_deref(),
                        info.session.map(|s| (s.id, s.turn)),
                    ),
                    &mut ex,
                )),
                Send::Pacer(PacerSent { presend, .. }) => {
                    Either::Right(self.backend.execute_presend(presend, &mut ex))
                }
            };
            tokio::pin!(run);
            loop {
                tokio::select! {
                    () = &mut run => break Ended::Done,
                    Ok(_) = cancel.wait_for(|c| *c) => break Ended::Stopped,
                    () = until(give_up.as_mut()) => break Ended::GaveUp,
                    // Any answer (an error only once the signal is gone) ends the wait,
                    // which is never polled again.
                    _ = until(prefill_over.as_mut()), if holding_prefill => {
                        // Its prefill is over: the next request may start its own.
                        holding_prefill = false;
                        self.release_prefill();
                    }
                }
            }
        };
        if holding_prefill {
            self.release_prefill();
        }
        ex.first_token_signal = None;
        match ended {
            Ended::Done => {}
            Ended::Stopped if ex.connected => {
                ex.cancel("cancelled in flight: the benchmark stopped");
            }
            // Still connecting: the server never had it, so it was never sent (a stream
            // hammering a gone server is mostly in its connects when the stop comes,
            // and is not a server holding requests: `error_tail`).
            Ended::Stopped => {
                ex.start = None;
                ex.cancel("cancelled while connecting: the benchmark stopped");
            }
            Ended::GaveUp => ex.give_up(),
        }
        ex
    }

    /// Gives the unit of concurrency back and reports the request; returns when it ended.
    fn finish(&self, info: SlotInfo, ex: &Exchange) -> MonoNanos {
        self.shm.release(self.id);
        self.released.notify_one();
        self.report(info, ex);
        ex.end_or_now()
    }

    fn report(&self, info: SlotInfo, ex: &Exchange) {
        let mut reporter = self.reporter.borrow_mut();
        reporter.finished(info, ex);
        if reporter.pending() >= BATCH_LIMIT {
            self.flush_now.notify_one();
        }
    }

    /// Runs the streams of the single host's `streams` that belong to this worker: the
    /// shard's streams (`K`, `K + N`, ...) dealt round-robin over the group's workers.
    /// Each keeps the single host's ramp-up turn.
    pub async fn run_streams(
        self: &Rc<Self>,
        streams: u32,
        worker_count: u32,
        rampup: Duration,
        t0: MonoNanos,
        source: Box<dyn RequestSource>,
    ) {
        let source = Rc::new(RefCell::new(source));
        let probe =
            tokio::task::spawn_local(probe_runtime(self.reporter.clone(), self.backend.clone()));
        let mut tasks = JoinSet::new();
        let local_streams = self.shard.share(u64::from(streams));
        for local in (u64::from(self.id)..local_streams).step_by(worker_count.max(1) as usize) {
            let ctx = self.clone();
            let source = source.clone();
            let stream = self.shard.global(local);
            let offset = rampup.mul_f64(stream as f64 / f64::from(streams));
            // A task of each kind its own: one future with both loops in it would be as
            // large as both (a stream paid a waiting user's state, and the other way).
            if source.borrow().has_sessions() {
                tasks.spawn_local(async move { ctx.user_loop(t0 + offset, source).await });
            } else {
                tasks.spawn_local(async move { ctx.stream_loop(t0 + offset, source).await });
            }
        }
        while tasks.join_next().await.is_some() {}
        probe.abort();
        self.drain_connects();
    }

    /// Moves the connections opened since the probe's last tick into the reporter.
    fn drain_connects(&self) {
        let mut reporter = self.reporter.borrow_mut();
        for (began, took) in self.backend.drain_connects() {
            reporter.connected(began, took);
        }
    }

    async fn stream_loop(&self, start_at: MonoNanos, source: Rc<RefCell<Box<dyn RequestSource>>>) {
        // A stream still waiting for its ramp-up turn when a stop comes, or when the other
        // streams already claimed every slot, never starts.
        let mut stop = self.stop.clone();
        tokio::select! {
            () = tokio::time::sleep_until(tokio_instant(start_at)) => {}
            Ok(_) = stop.wait_for(|s| *s) => return,
        }
        let mut previous_end = None;
        // The stream's own intended instant for its next request, after a connect
        // failure's wait (see `crate::backoff`).
        let mut due = None;
        let mut backoff = ConnectBackoff::default();
        while let Some(local) = self.shm.claim_slot() {
            let slot = self.shard.global(local);
            // A closed loop intends each request at once after the stream's previous
            // one (its first at its ramp-up turn): the turnaround is client queue time.
            let scheduled = due.take().or(previous_end).unwrap_or(start_at);
            let prepared = source.borrow_mut().request(slot);
            let (body, prompt_tokens, max_output_tokens, model, media, session_key) = match prepared
            {
                Ok(Some(req)) => (
                    Ok(self.backend.build_body(&req)),
                    req.prompt_tokens,
                    self.backend.max_output_tokens(&req),
                    self.reporter.borrow().model_index(req.model.as_ref()),
                    req.media_info(),
                    req.session,
                ),
                Ok(None) => {
                    self.shm.limit_slots(local);
                    break;
                }
                Err(message) => (Err(message), None, None, None, None, None),
            };
            let info = SlotInfo {
                slot,
                scheduled,
                late: false,
                prompt_tokens,
                max_output_tokens,
                previous_end,
                model,
                session: None,
                media,
                session_key,
            };
            let (end, could_not_connect) = self
                .run_exchange(info, body, None)
                .map(|ex| {
                    let refused = ex.error.as_ref().map(|e| e.kind) == Some(ErrorKind::Connect);
                    (ex.end_or_now(), refused)
                })
                .await;
            previous_end = Some(end);
            if let Some(wait) = backoff.after(could_not_connect) {
                let until = end + wait;
                if !self.pause_after_failure(Some(until)).await {
                    return;
                }
                // Intended after the wait, which is the stream's and no turnaround.
                due = Some(until);
                previous_end = None;
            }
        }
    }

    /// A user of a multi-turn load: runs one session after another (see
    /// [`Context::run_session`]), the next one's first turn at once after the previous
    /// session's last. A stop leaves the session under way unfinished.
    async fn user_loop(&self, start_at: MonoNanos, source: Rc<RefCell<Box<dyn RequestSource>>>) {
        let mut stop = self.stop.clone();
        tokio::select! {
            () = tokio::time::sleep_until(tokio_instant(start_at)) => {}
            Ok(_) = stop.wait_for(|s| *s) => return,
        }
        let mut previous_end: Option<MonoNanos> = None;
        let mut backoff = ConnectBackoff::default();
        while let Some(id) = self.shm.claim_session() {
            let plan = source.borrow_mut().session(id);
            let plan = match plan {
                Ok(Some(plan)) => plan,
                Ok(None) => break,
                Err(message) => {
                    // The session cannot be made: one failed request says why.
                    let Some(local) = self.shm.claim_slot() else {
                        break;
                    };
                    let info = SlotInfo::due(self.shard.global(local), MonoNanos::now());
                    // Boxed: a waiting user keeps no exchange state (see `run_session`).
                    previous_end = Some(Box::pin(self.run_request(info, Err(message))).await);
                    continue;
                }
            };
            let session = SessionState::new(id, plan);
            if !self
                .run_session(session, None, &mut previous_end, &mut backoff)
                .await
            {
                break;
            }
        }
    }

    /// Runs the first turn of a session (or a trace's first call) the pacer prepared,
    /// and perhaps sent, at the session's scheduled start.
    async fn run_first(
        &self,
        f: FirstTurn,
        session: Option<SessionTag>,
        reply: Option<String>,
    ) -> Exchange {
        let info = SlotInfo {
            slot: f.slot,
            scheduled: f.scheduled,
            late: false,
            prompt_tokens: f.prompt_tokens,
            max_output_tokens: f.max_output_tokens,
            previous_end: None,
            model: f.model,
            session,
            media: f.media,
            session_key: f.session_key,
        };
        match f.sent {
            Some(sent) => self.run_sent_exchange(info, sent, reply).await,
            None => self.run_exchange(info, f.body, reply).await,
        }
    }

    /// Runs a session's turns in order, every turn a claimed slot (so `--max-requests`
    /// counts requests), for the users of a stream strategy and the rate-based starts
    /// alike. Turn `k` sends the session's system prompt, every earlier user message and
    /// the reply actually received (or the recorded one), then its own user message; it
    /// is due its think time after the previous turn ended. `first` is turn 1 when the
    /// pacer already prepared (and perhaps sent) it at the session's scheduled start.
    /// A failed turn ends its session (the records say which turn of how many, so the
    /// skipped ones are counted). Returns `false` when a stop (or the last slot gone)
    /// left the session unfinished: nothing more may be claimed.
    pub async fn run_session(
        &self,
        session: SessionState,
        first: Option<FirstTurn>,
        previous_end: &mut Option<MonoNanos>,
        backoff: &mut ConnectBackoff,
    ) -> bool {
        // Router affinity: the session's conversations are open while it runs (their
        // tokens and sticky connections live as long), and closed after.
        let affinity = self.backend.affinity();
        let mut keys: Vec<Arc<str>> = if affinity.is_on() {
            session
                .conversations()
                .map(|(key, parent)| {
                    affinity.open(key, parent);
                    Arc::clone(key)
                })
                .collect()
        } else {
            Vec::new()
        };
        // Every turn names its conversation: each closed once.
        keys.sort_unstable();
        keys.dedup();
        let ok = self
            .run_session_turns(session, first, previous_end, backoff)
            .await;
        for key in &keys {
            affinity.close(key);
        }
        ok
    }

    /// [`Self::run_session`]'s turns.
    async fn run_session_turns(
        &self,
        mut session: SessionState,
        mut first: Option<FirstTurn>,
        previous_end: &mut Option<MonoNanos>,
        backoff: &mut ConnectBackoff,
    ) -> bool {
        // The user's pause after a failed session (see `pause_after_failure`).
        let pause = session.think_ns();
        if session.is_graph() {
            // A trace starts at once: after the previous one's pause when it failed.
            let start = previous_end.take();
            let end = Box::pin(self.run_graph(session, first, start)).await;
            let wait = backoff.after(end.refused).unwrap_or_default();
            if !end.go_on {
                return false;
            }
            if !end.failed {
                return true;
            }
            // As a failed session's user below: its think time, or a refused connect's
            // wait when that is the longer, from the trace's end.
            let pause = Duration::from_nanos(pause).max(wait);
            let until = (!pause.is_zero()).then(|| end.end + pause);
            if !self.pause_after_failure(until).await {
                return false;
            }
            // The next trace is intended when the pause ends, not when the runtime
            // woke up from it.
            *previous_end = until;
            return true;
        }
        let mut stop = self.stop.clone();
        let (session_id, turns) = (session.id, session.turns());
        let tag = |turn: u32| {
            Some(SessionTag {
                id: session_id,
                turn,
                turns,
                graph: None,
            })
        };
        loop {
            // Each exchange is boxed: a user waiting out a think time keeps only this
            // loop's few words (its session, a timer entry), not the largest exchange
            // state it ever passed through.
            let ex = if let Some(f) = first.take() {
                // The pacer added turn 1 to the history when it built the body.
                Box::pin(self.run_first(f, tag(0), Some(String::new()))).await
            } else {
                let Some((k, think)) = session.upcoming() else {
                    return true;
                };
                let due = match *previous_end {
                    Some(end) if think > 0 => Some(end + Duration::from_nanos(think)),
                    _ => None,
                };
                // Its place among the worker's turns from the think's start: turns go
                // out in the order they fall due.
                let turn = due.map(|due| self.timers.turn(due));
                if let Some(due) = due {
                    // The think: the request is made only BODY_LEAD before it is due, so a
                    // thinking user holds no body, and making it adds nothing to how late
                    // the turn is sent.
                    let make_at = MonoNanos(due.0.saturating_sub(BODY_LEAD.as_nanos() as u64));
                    tokio::select! {
                        () = self.timers.until(make_at) => {}
                        Ok(_) = stop.wait_for(|s| *s) => return false,
                    }
                }
                let Some(req) = session.next_request() else {
                    return true;
                };
                let body = Ok(self.backend.build_body(&req));
                let scheduled = match (turn, *previous_end) {
                    (Some(turn), _) => {
                        tokio::select! {
                            () = turn.until_due() => {}
                            Ok(_) = stop.wait_for(|s| *s) => return false,
                        }
                        turn.due()
                    }
                    // No think time: due at once after the previous turn (or, for the
                    // first turn of a user's session, the previous session) ended.
                    (None, Some(end)) => end,
                    (None, None) => MonoNanos::now(),
                };
                let Some(local) = self.shm.claim_slot() else {
                    return false;
                };
                let info = SlotInfo {
                    slot: self.shard.global(local),
                    scheduled,
                    late: false,
                    prompt_tokens: req.prompt_tokens,
                    max_output_tokens: self.backend.max_output_tokens(&req),
                    // Turnaround is the client's own gap: a think time is not one.
                    previous_end: if think == 0 { *previous_end } else { None },
                    model: self.reporter.borrow().model_index(req.model.as_ref()),
                    session: tag(k),
                    media: req.media_info(),
                    session_key: req.session.clone(),
                };
                drop(req);
                Box::pin(self.run_exchange(info, body, Some(String::new()))).await
            };
            let end = ex.end_or_now();
            *previous_end = Some(end);
            let refused = ex.error.as_ref().map(|e| e.kind) == Some(ErrorKind::Connect);
            let wait = backoff.after(refused).unwrap_or_default();
            if ex.error.is_some() {
                // A refused connect's wait (`crate::backoff`) when it is the longer.
                let pause = Duration::from_nanos(pause).max(wait);
                let until = (!pause.is_zero()).then(|| end + pause);
                if !self.pause_after_failure(until).await {
                    return false;
                }
                if until.is_some() {
                    // The next session's first turn is due after the pause, not at the
                    // failure: the pause is the user's, no lateness of the client.
                    *previous_end = until;
                }
                return true;
            }
            // What the server counted of the turn, for the next turn's prompt length.
            let usage = ex.usage.as_ref();
            let tokens = (
                usage.and_then(|u| u.prompt_tokens),
                usage
                    .and_then(|u| u.completion_tokens)
                    .unwrap_or(ex.streamed_tokens),
            );
            session.push_reply(ex.reply, ex.tool_call, tokens);
        }
    }

    /// A user whose session failed pauses until `until` before its next session (one
    /// think time, or a refused connect's wait), a stream whose request could not
    /// connect before its next request (`crate::backoff`); without a wait it at least
    /// yields. A failure that comes back at once (no free descriptor, a refused
    /// connect) would otherwise loop without a wait, holding the runtime from every other
    /// user and flooding the books with errors no user would make. `false` on a stop.
    async fn pause_after_failure(&self, until: Option<MonoNanos>) -> bool {
        let Some(until) = until else {
            tokio::task::yield_now().await;
            return true;
        };
        let mut stop = self.stop.clone();
        tokio::select! {
            () = self.timers.until(until) => true,
            Ok(_) = stop.wait_for(|s| *s) => false,
        }
    }

    /// Runs an agent trace's graph (see [`crate::graph`]): each call is sent when every
    /// call it depends on ended, plus its recorded gap, so overlapping siblings run
    /// concurrently. `first` is call 1 when the pacer prepared it at the trace's start
    /// (rate-based starts); the trace starts at `start` (else now) otherwise. Each call
    /// claims a slot when due. A failed call ends the trace (nothing more is sent; calls
    /// in flight finish).
    async fn run_graph(
        &self,
        session: SessionState,
        first: Option<FirstTurn>,
        start: Option<MonoNanos>,
    ) -> GraphEnd {
        let start = match &first {
            Some(f) => f.scheduled,
            None => start.unwrap_or_else(MonoNanos::now),
        };
        let (id, turns) = (session.id, session.turns());
        let mut books = GraphRun::new(session.graph_turns(), start);
        let mut running = FuturesUnordered::new();
        let mut roots = books.roots();
        if let Some(f) = first {
            // The pacer sent the first call by its recorded start (it depends on none).
            roots.retain(|c| c.turn != 0);
            running.push(self.graph_call(id, turns, CallSend::First(f), 0));
        }
        let launch = |calls: Vec<DueCall>, running: &mut FuturesUnordered<_>| {
            for call in calls {
                let Some(turn) = session.graph_turns().get(call.turn) else {
                    continue;
                };
                let req = turn.request.clone();
                // Made now, before the call is due, so making it adds nothing to how
                // late it is sent.
                let body = self.backend.build_body(&req);
                running.push(self.graph_call(id, turns, CallSend::Due(call, req, body), call.turn));
            }
        };
        launch(roots, &mut running);
        let mut end = GraphEnd {
            go_on: true,
            failed: false,
            refused: false,
            end: start,
        };
        while let Some(done) = running.next().await {
            end.failed |= done.failed;
            end.refused |= done.refused;
            end.go_on &= !done.stopped;
            end.end = end.end.max(done.end);
            let ready = books.ended(done.turn, done.end);
            if !end.failed && end.go_on {
                launch(ready, &mut running);
            }
        }
        end
    }

    /// Sends one call of an agent trace when it is due and reports it.
    async fn graph_call(&self, id: u64, turns: u32, send: CallSend, turn: usize) -> CallEnd {
        let tag = |k: usize, step| {
            Some(SessionTag {
                id,
                turn: u32::try_from(k).unwrap_or(u32::MAX),
                turns,
                graph: Some(step),
            })
        };
        let ex = match send {
            CallSend::First(f) => {
                self.run_first(f, tag(0, llmsurge_proto::GraphStep::default()), None)
                    .await
            }
            CallSend::Due(call, req, body) => {
                let mut stop = self.stop.clone();
                let stopped = CallEnd {
                    turn,
                    end: MonoNanos::now(),
                    failed: false,
                    refused: false,
                    stopped: true,
                };
                tokio::select! {
                    () = self.timers.until_precisely(call.due) => {}
                    Ok(_) = stop.wait_for(|s| *s) => return stopped,
                }
                let Some(local) = self.shm.claim_slot() else {
                    return stopped;
                };
                let info = SlotInfo {
                    slot: self.shard.global(local),
                    scheduled: call.due,
                    late: false,
                    prompt_tokens: req.prompt_tokens,
                    max_output_tokens: self.backend.max_output_tokens(&req),
                    // A gap is the trace's, not the client's turnaround.
                    previous_end: None,
                    model: self.reporter.borrow().model_index(req.model.as_ref()),
                    session: tag(call.turn, call.step),
                    media: req.media_info(),
                    session_key: req.session.clone(),
                };
                self.run_exchange(info, Ok(body), None).await
            }
        };
        CallEnd {
            turn,
            end: ex.end_or_now(),
            failed: ex.error.is_some(),
            refused: ex.error.as_ref().map(|e| e.kind) == Some(ErrorKind::Connect),
            stopped: false,
        }
    }

    /// Runs the group's arrival schedule: the pacer thread hands over due slots.
    pub async fn run_arrivals(
        self: &Rc<Self>,
        arrivals: Arrivals,
        seed: u64,
        t0: MonoNanos,
        source: Box<dyn RequestSource>,
    ) -> Result<(), std::io::Error> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Dispatch>();
        let pacer = Pacer {
            shm: self.shm.clone(),
            t0,
            clock: ArrivalClock::new(arrivals, seed),
            source,
            backend: self.backend.clone(),
            tx,
            shard: self.shard,
            worker_id: self.id,
        };
        let handle = std::thread::Builder::new()
            .name("llmsurge-pacer".into())
            .spawn(move || pacer.run())?;
        let probe =
            tokio::task::spawn_local(probe_runtime(self.reporter.clone(), self.backend.clone()));
        let mut tasks = JoinSet::new();
        // How many requests the pacer sent itself, for the debug log: the share of a run
        // whose dispatch lag has no runtime wake-up in it.
        let (mut from_pacer, mut handed_over) = (0u64, 0u64);
        while let Some(d) = rx.recv().await {
            if d.sent.is_some() {
                from_pacer += 1;
            } else {
                handed_over += 1;
            }
            let ctx = self.clone();
            let model = self.reporter.borrow().model_index(d.model.as_ref());
            if let Some(session) = d.session {
                // A new session: turn 1 at the arrival instant, the rest after their
                // think times, here in the runtime.
                let first = FirstTurn {
                    slot: d.slot,
                    scheduled: d.scheduled,
                    body: d.body,
                    prompt_tokens: d.prompt_tokens,
                    max_output_tokens: d.max_output_tokens,
                    model,
                    media: d.media,
                    session_key: d.session_key,
                    sent: d.sent,
                };
                tasks.spawn_local(async move {
                    // A session started by the rate: its user has no next one to hold back.
                    let mut backoff = ConnectBackoff::default();
                    ctx.run_session(session, Some(first), &mut None, &mut backoff)
                        .await;
                });
            } else {
                let info = SlotInfo {
                    slot: d.slot,
                    scheduled: d.scheduled,
                    late: false,
                    prompt_tokens: d.prompt_tokens,
                    max_output_tokens: d.max_output_tokens,
                    previous_end: None,
                    model,
                    session: None,
                    media: d.media,
                    session_key: d.session_key,
                };
                tasks.spawn_local(async move {
                    match d.sent {
                        Some(sent) => ctx.run_sent(info, sent).await,
                        None => ctx.run_request(info, d.body).await,
                    };
                });
            }
            // Reap finished tasks so a long run keeps flat memory.
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
        probe.abort();
        self.drain_connects();
        tracing::debug!(
            worker = self.id,
            from_pacer,
            handed_over,
            "arrivals: requests sent by the pacer thread, and handed over to the runtime to send"
        );
        // The channel closed because the pacer dropped its sender on return.
        let _ = handle.join();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{PreparedRequest, RequestSource};
    use llmsurge_proto::shm::UNLIMITED;

    /// A source with no requests: only the loop's size is looked at.
    struct Fixed;

    impl RequestSource for Fixed {
        fn request(&mut self, _slot: u64) -> Result<Option<PreparedRequest>, String> {
            Ok(None)
        }
    }

    /// What a test context keeps alive beside it: the senders of its watches, the
    /// shared block's descriptor.
    type Keep = (
        watch::Sender<bool>,
        watch::Sender<bool>,
        std::os::fd::OwnedFd,
    );

    /// A worker's context on one worker's shared block without caps, on a runtime of
    /// its own (the timers' descriptor registers with one).
    fn test_context() -> (tokio::runtime::Runtime, Context, Keep) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let _runtime = rt.enter();
        let (shm, fd) = SharedRegion::create().expect("shm");
        shm.init(1, UNLIMITED, UNLIMITED);
        let cfg = crate::formats::test_config(llmsurge_proto::RequestFormat::Chat, true);
        let (cancel_tx, cancel) = watch::channel(false);
        let (stop_tx, stop) = watch::channel(false);
        let ctx = Context {
            id: 0,
            shm: Arc::new(shm),
            backend: Arc::new(Backend::new(&cfg).expect("backend")),
            reporter: Rc::new(RefCell::new(Reporter::new(
                0,
                MonoNanos::now(),
                llmsurge_proto::MeasureWindow::default(),
            ))),
            cancel,
            stop,
            released: Arc::new(Notify::new()),
            flush_now: Rc::new(Notify::new()),
            shard: Shard::WHOLE,
            behaviour: ClientBehaviour::default(),
            seed: 0,
            prefill_released: Arc::new(Notify::new()),
            timers: Timers::new(),
        };
        drop(_runtime);
        (rt, ctx, (cancel_tx, stop_tx, fd))
    }

    /// A stop another worker (or the coordinator) set in shared memory holds back a
    /// request waiting for a cap's room, or about to be sent, at once, before this
    /// worker's cancel watch follows it (up to a millisecond later): no request goes out
    /// after the stop.
    #[test]
    fn a_stop_in_shared_memory_holds_back_a_waiting_request_before_the_watch_sees_it() {
        let (rt, ctx, _keep) = test_context();
        let released = Notify::new();
        assert!(
            rt.block_on(ctx.wait_for_room(Cap::Concurrency, &released))
                .is_ok(),
            "room before the stop"
        );
        ctx.shm.release(ctx.id);
        ctx.shm
            .request_stop(stop_flags::STOP_QUEUING | stop_flags::CANCEL_IN_FLIGHT);
        assert!(!*ctx.cancel.borrow(), "the watch has not seen the stop");
        assert!(
            rt.block_on(ctx.wait_for_room(Cap::Concurrency, &released))
                .is_err(),
            "admitted after the stop"
        );
        // Nor is one the cap would not hold: it is cancelled unsent (the target is a
        // closed port, so a send would fail as a connection error instead).
        let info = SlotInfo::due(0, MonoNanos::now());
        let ex = rt.block_on(ctx.run_exchange(info, Ok(Bytes::from_static(b"{}")), None));
        assert!(ex.start.is_none(), "sent after the stop: {ex:?}");
        let error = ex.error.expect("cancelled");
        assert_eq!(error.kind, ErrorKind::Cancelled, "{error:?}");
    }

    /// Every open stream's task holds its stream loop for as long as tokens come, 50,000
    /// at a time: the loop must not keep, beside the request, what it held for nothing
    /// while streaming (the planned cancel's and the prefill cap's waits, the prefill
    /// cap's answer, copies of the request's arguments, of the pacer's send and of the
    /// response head, a readiness waiter). Debug sizes on this toolchain: 2,296 bytes
    /// (4,304 before those went, 3,272 with the head, the pacer's send and the waits).
    #[test]
    fn a_stream_loop_holds_only_what_a_streaming_request_needs() {
        const STREAM_LOOP_MAX: usize = 2_500;
        let (rt, ctx, _keep) = test_context();
        let _runtime = rt.enter();
        let source: Rc<RefCell<Box<dyn RequestSource>>> = Rc::new(RefCell::new(Box::new(Fixed)));
        let size = size_of_val(&ctx.stream_loop(MonoNanos::now(), source));
        assert!(
            size <= STREAM_LOOP_MAX,
            "a stream loop's future is {size} bytes, over {STREAM_LOOP_MAX}"
        );
    }
}
