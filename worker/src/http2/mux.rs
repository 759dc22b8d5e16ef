//! Many HTTP/2 streams at once on one connection (`--http2-streams N`, N above 1), as
//! browsers, gateways and most HTTP/2 clients load a server: a thousand streams on ten
//! connections rather than on a thousand.
//!
//! Why: with a connection a stream, every token is a read and an ACK of its own; at
//! 1,000 streams of 100 tokens/s on one client core the kernel's receive path took most
//! of the core (docs/performance.md). A server writes the frames of the streams it has
//! ready together (an engine step's tokens), so on a shared connection one read carries
//! many tokens, each still with the kernel's receive stamp of the read that completed it.
//!
//! Each connection has a driver task. It alone reads the socket: it hands each stream's
//! frames to that stream (waking only its reader), answers the connection's frames
//! ([`Wire`]) and writes what waits (our answers, request bodies as windows open). A
//! request opens its stream and writes its head itself, at once. The connection's state
//! sits behind a mutex nobody contends: the worker's runtime has one thread.
//!
//! A connection takes a new stream while it carries fewer than N, and fewer than the
//! server's SETTINGS_MAX_CONCURRENT_STREAMS (a stream waits for the server's SETTINGS
//! before it opens), has had no GOAWAY and has ids left; otherwise another connection
//! opens. A stream given up before its end is reset (CANCEL); one released after its
//! content (`[DONE]`) is read past to its end. A connection that carried no stream for
//! [`POOL_IDLE`] is closed, as idle ones are.

use crate::http2::{
    self, CTL_LIMIT, DRAIN_BYTES, Dial, Event, Got, Head, LAST_STREAM_ID, MAX_WINDOW, Outgoing,
    ReadFail, WINDOW, Wire,
};
use crate::idle_pool::POOL_IDLE;
use crate::resend::Fault;
use bytes::{BufMut, Bytes};
use llmsurge_proto::affinity::SessionToken;
use llmsurge_proto::{ErrorKind, MonoNanos, RequestError};
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Poll, Waker};
use tokio::time::Instant;

/// RST_STREAM's code for a stream the client gave up.
const CANCEL: u32 = 0x8;
/// The most request-body bytes queued for the socket at once: a body of megabytes goes
/// out in steps as the socket takes them, not copied whole.
const BODY_QUEUE: usize = 64 << 10;
/// How many times a request looks for a connection with room before it gives up (each
/// look that fails opens a connection, so a second look finds room).
const PICKS: usize = 8;

/// The connections one client shares among its streams.
pub struct Mux {
    /// The most streams a connection carries at once.
    per_conn: usize,
    /// The SETTINGS_MAX_CONCURRENT_STREAMS a connection of this server said last: a
    /// connection still opening takes no more reservations than that (else, a server's
    /// bound below `per_conn` sends most of them to look again). Each open connection
    /// keeps to its own.
    learned: Arc<AtomicUsize>,
    conns: Mutex<Vec<Arc<Shared>>>,
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mux")
            .field("per_conn", &self.per_conn)
            .finish_non_exhaustive()
    }
}

/// One shared connection.
struct Shared(Mutex<State>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A shared connection's state.
struct State {
    /// The connection; `None` while it opens, and once it failed or was closed.
    wire: Option<Wire>,
    /// Why it failed: every stream on it ends so.
    broken: Option<Broken>,
    /// Its open streams.
    streams: HashMap<u32, Slot>,
    /// The streams whose request body is not all out yet: what [`State::pump`] and
    /// [`State::sendable`] look at, so that a read on a connection of many streams does
    /// not go through them all.
    sending: Vec<u32>,
    /// Streams reserved (waiting for it to open) and open.
    load: usize,
    /// Streams it carried so far.
    opened: u32,
    /// Requests waiting for it to open and the server's SETTINGS.
    waiting: Vec<Waker>,
    /// Its driver: woken when something waits to be written, or the connection goes.
    driver: Option<Waker>,
    /// Since when it has carried nothing.
    idle_since: Instant,
    /// Closed by the client (idle too long, or the client dropped).
    closed: bool,
    /// The server's SETTINGS came: it speaks HTTP/2.
    settled: bool,
    /// `--session-token`: read from every response head.
    token: Option<SessionToken>,
    /// How it was opened (and where that is logged, once the server's SETTINGS came).
    dial: Arc<Dial>,
    /// When it began opening.
    began: MonoNanos,
    /// [`Mux::learned`].
    learned: Arc<AtomicUsize>,
    /// Its server's SETTINGS_MAX_CONCURRENT_STREAMS as last told to `learned`.
    told: Option<u32>,
}

/// Why a shared connection failed.
enum Broken {
    /// It never opened.
    Connect(RequestError),
    /// It failed open: a read, a write, or the server broke the protocol.
    Failed(ReadFail),
}

/// One open stream of a shared connection.
struct Slot {
    /// What the driver handed it, each with the instant its bytes arrived.
    events: VecDeque<(Event, MonoNanos)>,
    /// Its reader, woken when an event comes.
    waker: Option<Waker>,
    send_window: i64,
    /// DATA received and not yet given back with a WINDOW_UPDATE.
    recv_unacked: u32,
    /// What of the request's body waits for a window or room in the socket.
    body: Bytes,
    /// Released after its content: its frames are read past to its end.
    released: Option<usize>,
    /// Why it failed with its connection.
    failed: Option<ReadFail>,
}

/// Whether `event` is a stream's last.
fn ends(event: &Event) -> bool {
    match event {
        Event::Data { end, .. } => *end,
        Event::Headers { end, status, .. } => *end || status.is_none(),
        Event::Reset(_) | Event::Refused { .. } => true,
    }
}

/// A copy of `e` for each stream a connection's failure ends.
fn again(e: &ReadFail) -> ReadFail {
    match e {
        ReadFail::Closed => ReadFail::Closed,
        ReadFail::Io(e) => ReadFail::Io(io::Error::new(e.kind(), e.to_string())),
        ReadFail::Protocol(m) => ReadFail::Protocol(m.clone()),
        ReadFail::TooLarge => ReadFail::TooLarge,
    }
}

impl State {
    fn opening(token: Option<SessionToken>, dial: Arc<Dial>, learned: Arc<AtomicUsize>) -> Self {
        Self {
            wire: None,
            broken: None,
            streams: HashMap::new(),
            sending: Vec::new(),
            load: 1,
            opened: 0,
            waiting: Vec::new(),
            driver: None,
            idle_since: Instant::now(),
            closed: false,
            settled: false,
            token,
            dial,
            began: MonoNanos::now(),
            learned,
            told: None,
        }
    }

    /// Whether it takes one more stream, `per_conn` at most.
    fn has_room(&self, per_conn: usize) -> bool {
        if self.broken.is_some() || self.closed {
            return false;
        }
        let Some(wire) = self.wire.as_ref().filter(|_| self.settled) else {
            // Still opening: as many as the server's last word allows (one at least, to
            // hear a new word).
            let learned = self.learned.load(Ordering::Relaxed);
            return self.load < per_conn.min(learned).max(1);
        };
        let server = wire.max_streams.map_or(usize::MAX, |m| m as usize);
        wire.goaway.is_none() && wire.next_id < LAST_STREAM_ID && self.load < per_conn.min(server)
    }

    /// Whether it can be dropped from the pool: failed, closed, or unable to take
    /// another stream with none left on it.
    fn gone(&self) -> bool {
        self.broken.is_some()
            || self.closed
            || (self.load == 0
                && self
                    .wire
                    .as_ref()
                    .is_some_and(|w| w.goaway.is_some() || w.next_id >= LAST_STREAM_ID))
    }

    /// One stream fewer on it.
    fn unload(&mut self) {
        self.load = self.load.saturating_sub(1);
        if self.load == 0 {
            self.idle_since = Instant::now();
        }
    }

    /// The stream `id` ended or was given up: its slot goes.
    fn end_stream(&mut self, id: u32) {
        if self.streams.remove(&id).is_some() {
            self.unload();
        }
    }

    /// Fails the connection: every stream on it ends with `e`, every waiter is woken.
    fn fail(&mut self, e: ReadFail) {
        if self.broken.is_some() {
            return;
        }
        self.wire = None;
        for slot in self.streams.values_mut() {
            slot.failed = Some(again(&e));
            if let Some(w) = slot.waker.take() {
                w.wake();
            }
        }
        self.broken = Some(Broken::Failed(e));
        self.wake_waiting();
        if let Some(w) = self.driver.take() {
            w.wake();
        }
    }

    fn wake_waiting(&mut self) {
        for w in self.waiting.drain(..) {
            w.wake();
        }
    }

    /// Puts what it can of the request bodies that wait into DATA frames, within the
    /// windows and [`BODY_QUEUE`].
    fn pump(&mut self) {
        let Some(wire) = &mut self.wire else { return };
        for &id in &self.sending {
            let Some(slot) = self.streams.get_mut(&id) else {
                continue;
            };
            while !slot.body.is_empty() && wire.ctl.len() < BODY_QUEUE {
                let n = slot
                    .body
                    .len()
                    .min(wire.max_frame)
                    .min(wire.send_window.max(0) as usize)
                    .min(slot.send_window.max(0) as usize);
                if n == 0 {
                    break;
                }
                let flags = if n == slot.body.len() {
                    http2::END_STREAM
                } else {
                    0
                };
                http2::put_frame_head(&mut wire.ctl, n, http2::DATA, flags, id);
                wire.ctl.put_slice(&slot.body.split_to(n));
                wire.send_window -= n as i64;
                slot.send_window -= n as i64;
            }
        }
        let streams = &self.streams;
        self.sending
            .retain(|id| streams.get(id).is_some_and(|s| !s.body.is_empty()));
    }

    /// Whether bytes wait to be written: our frames, TLS records, or bodies.
    fn owes(&self) -> bool {
        self.wire
            .as_ref()
            .is_some_and(|w| !w.ctl.is_empty() || !w.sent_all())
    }

    /// Whether a request body waits that the windows let go now.
    fn sendable(&self) -> bool {
        let Some(wire) = &self.wire else {
            return false;
        };
        wire.send_window > 0
            && self.sending.iter().any(|id| {
                self.streams
                    .get(id)
                    .is_some_and(|s| !s.body.is_empty() && s.send_window > 0)
            })
    }

    /// Writes what waits as far as the socket takes it now; the driver is woken for the
    /// rest.
    fn flush(&mut self) {
        self.pump();
        if let Some(wire) = &mut self.wire {
            wire.flush_now();
        }
        if (self.owes() || self.sendable())
            && let Some(w) = self.driver.take()
        {
            w.wake();
        }
    }

    /// Takes the frames the buffer holds: the connection's own handled, each stream's
    /// handed to it.
    fn dispatch(&mut self) -> Result<(), ReadFail> {
        let token = self.token.clone();
        loop {
            let Some(wire) = &mut self.wire else {
                return Ok(());
            };
            let Some(frame) = wire.take_frame()? else {
                break;
            };
            let Some(got) = wire.on_frame(frame, token.as_ref())? else {
                continue;
            };
            let at = wire.arrived;
            match got {
                Got::Data {
                    stream,
                    data,
                    end,
                    len,
                } => {
                    let Some(slot) = self.streams.get_mut(&stream) else {
                        continue; // a stream given up and reset: read past
                    };
                    slot.recv_unacked += len;
                    if !end && slot.recv_unacked > WINDOW / 2 {
                        http2::put_window_update(&mut wire.ctl, stream, slot.recv_unacked);
                        slot.recv_unacked = 0;
                    }
                    self.hand(stream, Event::Data { data, end }, at, len as usize);
                }
                Got::Headers {
                    stream,
                    status,
                    token,
                    end,
                } => self.hand(stream, Event::Headers { status, token, end }, at, 0),
                Got::Reset { stream, code } => self.hand(stream, Event::Reset(code), at, 0),
                Got::Window { stream, inc } => {
                    if let Some(slot) = self.streams.get_mut(&stream) {
                        slot.send_window += inc;
                        if slot.send_window > MAX_WINDOW {
                            return Err(http2::window_overflow());
                        }
                    }
                }
                Got::InitialWindow(delta) => {
                    for slot in self.streams.values_mut() {
                        slot.send_window += delta;
                    }
                }
                Got::GoAway { last, code } => {
                    let refused: Vec<u32> =
                        self.streams.keys().copied().filter(|&s| s > last).collect();
                    for stream in refused {
                        self.hand(stream, Event::Refused { last, code }, at, 0);
                    }
                }
            }
        }
        if let Some(wire) = &self.wire
            && wire.ctl.len() > CTL_LIMIT
        {
            return Err(http2::ctl_overflow());
        }
        Ok(())
    }

    /// Hands `event` to stream `id`'s reader; a released stream's are read past, and
    /// one that sends more than [`DRAIN_BYTES`] after its release is reset.
    fn hand(&mut self, id: u32, event: Event, at: MonoNanos, len: usize) {
        let Some(slot) = self.streams.get_mut(&id) else {
            return;
        };
        if let Some(drained) = &mut slot.released {
            *drained += len;
            if ends(&event) {
                self.end_stream(id);
            } else if *drained > DRAIN_BYTES {
                self.cancel(id);
            }
            return;
        }
        slot.events.push_back((event, at));
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
    }

    /// Gives stream `id` up: RST_STREAM (CANCEL) unless the connection is gone.
    fn cancel(&mut self, id: u32) {
        if self.streams.contains_key(&id)
            && let Some(wire) = &mut self.wire
        {
            http2::put_frame_head(&mut wire.ctl, 4, http2::RST_STREAM, 0, id);
            wire.ctl.put_u32(CANCEL);
        }
        self.end_stream(id);
        self.flush();
    }
}

impl Mux {
    /// Shares each connection among up to `per_conn` streams.
    pub fn new(per_conn: usize) -> Self {
        Self {
            per_conn,
            learned: Arc::new(AtomicUsize::new(usize::MAX)),
            conns: Mutex::default(),
        }
    }

    fn conns(&self) -> MutexGuard<'_, Vec<Arc<Shared>>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connections open and carrying no stream.
    pub fn idle(&self) -> usize {
        self.conns()
            .iter()
            .filter(|c| {
                let st = c.lock();
                st.load == 0 && st.wire.is_some()
            })
            .count()
    }

    /// Closes the connections that carried nothing for [`POOL_IDLE`], and lets go of
    /// failed ones.
    pub fn close_stale(&self) {
        self.conns().retain(|c| {
            let mut st = c.lock();
            if st.load == 0 && st.idle_since.elapsed() > POOL_IDLE {
                close(&mut st);
            }
            !st.gone()
        });
    }

    /// A place for one stream on a connection with room (not `avoid`), or on one opened
    /// for it; `None` when none has room and the server's last word was that it takes
    /// no stream (SETTINGS_MAX_CONCURRENT_STREAMS 0) while a connection of it is open
    /// or opening: the request fails at once rather than open connection after
    /// connection, and one connection at a time asks again.
    fn reserve(
        &self,
        avoid: Option<&Arc<Shared>>,
        dial: &Arc<Dial>,
        token: &Option<SessionToken>,
    ) -> Option<Reservation> {
        let mut conns = self.conns();
        conns.retain(|c| !c.lock().gone());
        for conn in conns.iter() {
            if avoid.is_some_and(|a| Arc::ptr_eq(a, conn)) {
                continue;
            }
            let mut st = conn.lock();
            if st.has_room(self.per_conn) {
                st.load += 1;
                return Some(Reservation(Some(Arc::clone(conn))));
            }
        }
        if self.learned.load(Ordering::Relaxed) == 0 && !conns.is_empty() {
            return None;
        }
        let conn = Arc::new(Shared(Mutex::new(State::opening(
            token.clone(),
            Arc::clone(dial),
            Arc::clone(&self.learned),
        ))));
        conns.push(Arc::clone(&conn));
        tokio::spawn(open_and_drive(Arc::clone(&conn), Arc::clone(dial)));
        Some(Reservation(Some(conn)))
    }

    /// Sends a request on a shared connection and reads the response head; the resend
    /// rule of [`http2::Http2::send`], a resend going to another connection.
    pub(crate) async fn send(
        &self,
        dial: &Arc<Dial>,
        fixed: &Bytes,
        out: &Outgoing,
        token: &Option<SessionToken>,
        retried: &mut bool,
        connected: &mut bool,
    ) -> Result<(Head, Stream), RequestError> {
        let mut avoid = None;
        let mut picks = 0;
        loop {
            let Some(reservation) = self.reserve(avoid.as_ref(), dial, token) else {
                return Err(http2::failure(
                    ErrorKind::Connect,
                    format!(
                        "connecting to {}: the server takes no stream now (its last SETTINGS_MAX_CONCURRENT_STREAMS was 0, and no connection of it has room)",
                        dial.authority()
                    ),
                ));
            };
            reservation.opened().await?;
            *connected = true;
            let Some(mut stream) = reservation.open(fixed, out) else {
                // Full after the server's SETTINGS, or failed meanwhile: another look.
                picks += 1;
                if picks >= PICKS {
                    return Err(http2::failure(
                        ErrorKind::Connect,
                        format!(
                            "connecting to {}: no connection had room for the request after {PICKS} tries (the server allows {} streams a connection)",
                            dial.authority(),
                            self.learned.load(Ordering::Relaxed).min(self.per_conn)
                        ),
                    ));
                }
                continue;
            };
            match stream.head().await {
                Ok(head) => return Ok((head, stream)),
                Err(fault) => {
                    crate::resend::once_more(fault, stream.reused, retried)?;
                    avoid = Some(Arc::clone(&stream.conn));
                }
            }
        }
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        for conn in self.conns().drain(..) {
            close(&mut conn.lock());
        }
    }
}

/// Closes a connection: its socket goes, its driver ends.
fn close(st: &mut State) {
    if !st.streams.is_empty() {
        // Streams still on it (the client going away mid-request) end, not wait.
        st.fail(ReadFail::Closed);
    }
    st.closed = true;
    st.wire = None;
    if let Some(w) = st.driver.take() {
        w.wake();
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // Its driver holds it weakly and waits on the socket going with it: woken, it
        // finds it gone and ends.
        if let Some(w) = self.driver.take() {
            w.wake();
        }
    }
}

/// Opens the connection, then drives it until it fails or is closed. It is open once
/// the server's SETTINGS came, within the connect timeout: a server that answers the
/// connection and never starts HTTP/2 fails its requests as connects that did not
/// happen (never a `timeout`, which says the server held a request).
async fn open_and_drive(conn: Arc<Shared>, dial: Arc<Dial>) {
    let deadline = Instant::now() + dial.connect_timeout();
    let opened = dial.open_unlogged().await;
    {
        let mut st = conn.lock();
        match opened {
            Ok(wire) if !st.closed => st.wire = Some(wire),
            Ok(_) => return,
            Err(e) => {
                st.broken = Some(Broken::Connect(e));
                st.wake_waiting();
                return;
            }
        }
    }
    let weak = Arc::downgrade(&conn);
    drop(conn);
    let driving = drive(weak.clone());
    tokio::pin!(driving);
    tokio::select! {
        () = &mut driving => return,
        () = tokio::time::sleep_until(deadline) => {}
    }
    if let Some(conn) = weak.upgrade() {
        let mut st = conn.lock();
        if !st.settled && st.broken.is_none() && !st.closed {
            st.wire = None;
            st.broken = Some(Broken::Connect(http2::failure(
                ErrorKind::Connect,
                format!(
                    "connecting to {}: the server sent no HTTP/2 SETTINGS within {:.3}s of the connection (it does not speak HTTP/2 there, or is stuck)",
                    dial.authority(),
                    dial.connect_timeout().as_secs_f64()
                ),
            )));
            st.wake_waiting();
            return;
        }
    }
    driving.await;
}

/// The connection's driver: reads and hands out frames, writes what waits.
async fn drive(conn: Weak<Shared>) {
    poll_fn(|cx| {
        let Some(conn) = conn.upgrade() else {
            return Poll::Ready(());
        };
        let mut st = conn.lock();
        st.driver = Some(cx.waker().clone());
        // Writes: until all is out or the socket is full (its readiness then wakes us).
        loop {
            st.pump();
            let Some(wire) = &mut st.wire else {
                return Poll::Ready(());
            };
            wire.flush_now();
            if !st.owes() {
                if st.sendable() {
                    continue; // more of a body, within the windows
                }
                break;
            }
            let Some(wire) = &mut st.wire else {
                return Poll::Ready(());
            };
            match wire.stream.poll_write_ready(cx) {
                Poll::Pending => break,
                Poll::Ready(Ok(())) => {
                    // Ready: one more write, which clears a stale readiness if it was.
                    let mut none = Bytes::new();
                    match wire.write_now(&mut none) {
                        Ok(_) => {}
                        Err(e) => {
                            st.fail(sending_failed(e));
                            return Poll::Ready(());
                        }
                    }
                }
                Poll::Ready(Err(e)) => {
                    st.fail(sending_failed(e));
                    return Poll::Ready(());
                }
            }
        }
        // Reads: until the socket has nothing (its readiness then wakes us).
        loop {
            let Some(wire) = &mut st.wire else {
                return Poll::Ready(());
            };
            match wire.stream.poll_read_ready(cx) {
                Poll::Pending => break,
                Poll::Ready(Err(e)) => {
                    st.fail(ReadFail::Io(e));
                    return Poll::Ready(());
                }
                Poll::Ready(Ok(())) => {}
            }
            match wire.read_now() {
                Err(ReadFail::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    st.fail(e);
                    return Poll::Ready(());
                }
                Ok(()) => {}
            }
            if let Err(e) = st.dispatch() {
                st.fail(e);
                return Poll::Ready(());
            }
            // The server's word, when it changed on this connection.
            let bound = st.wire.as_ref().and_then(|w| w.max_streams);
            if bound.is_some() && bound != st.told {
                st.told = bound;
                st.learned
                    .store(bound.map_or(usize::MAX, |b| b as usize), Ordering::Relaxed);
            }
            if !st.settled && st.wire.as_ref().is_some_and(|w| w.settled) {
                st.settled = true;
                st.dial.log(st.began);
                st.wake_waiting();
            }
            st.flush();
        }
        Poll::Pending
    })
    .await
}

/// A write that failed: the streams whose requests were not out whole were not
/// processed ([`http2::fault_before_head`] reads a reset so).
fn sending_failed(e: io::Error) -> ReadFail {
    ReadFail::Io(io::Error::new(
        io::ErrorKind::ConnectionReset,
        format!("connection closed while sending: {e}"),
    ))
}

/// A place held for one stream on a connection (perhaps still opening); given back when
/// dropped unless a stream took it.
struct Reservation(Option<Arc<Shared>>);

impl Reservation {
    fn conn(&self) -> &Arc<Shared> {
        // Some until `open` takes it.
        self.0
            .as_ref()
            .expect("a reservation holds its connection until it is used")
    }

    /// Waits until the connection is open and the server's SETTINGS are in, or it
    /// failed to open.
    async fn opened(&self) -> Result<(), RequestError> {
        poll_fn(|cx| {
            let mut st = self.conn().lock();
            match (&st.broken, &st.wire) {
                (Some(Broken::Connect(e)), _) => Poll::Ready(Err(e.clone())),
                // Failed before the server's SETTINGS (it answered in HTTP/1.1, or closed):
                // the request fails with why, as on a connection of its own.
                (Some(Broken::Failed(e)), _) if !st.settled => {
                    let mut retried = false;
                    let fault = http2::fault_before_head(again(e));
                    Poll::Ready(crate::resend::once_more(fault, false, &mut retried))
                }
                // Failed once it worked: the stream's open looks elsewhere.
                (Some(Broken::Failed(_)), _) => Poll::Ready(Ok(())),
                (None, Some(_)) if st.settled => Poll::Ready(Ok(())),
                (None, None) if st.closed => Poll::Ready(Ok(())),
                _ => {
                    if !st.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                        st.waiting.push(cx.waker().clone());
                    }
                    Poll::Pending
                }
            }
        })
        .await
    }

    /// Opens the stream and writes the request's head (and what of its body the
    /// windows allow); `None` when the connection has no room or no longer works.
    fn open(mut self, fixed: &Bytes, out: &Outgoing) -> Option<Stream> {
        let conn = self.0.take()?;
        let id = {
            let mut st = conn.lock();
            let server = st
                .wire
                .as_ref()
                .and_then(|w| w.max_streams)
                .map_or(usize::MAX, |m| m as usize);
            let usable = st
                .wire
                .as_ref()
                .is_some_and(|w| w.goaway.is_none() && w.next_id < LAST_STREAM_ID);
            if st.broken.is_some() || !usable || st.streams.len() >= server {
                st.unload();
                return None;
            }
            let wire = st.wire.as_mut()?;
            let id = wire.put_request_head(fixed, out);
            let send_window = wire.initial_window;
            st.opened += 1;
            st.streams.insert(
                id,
                Slot {
                    events: VecDeque::new(),
                    waker: None,
                    send_window,
                    recv_unacked: 0,
                    body: out.body.clone(),
                    released: None,
                    failed: None,
                },
            );
            if !out.body.is_empty() {
                st.sending.push(id);
            }
            st.flush();
            id
        };
        let reused = conn.lock().opened > 1;
        Some(Stream {
            conn,
            id,
            ended: false,
            reused,
        })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            conn.lock().unload();
        }
    }
}

/// One request's stream on a shared connection.
pub struct Stream {
    conn: Arc<Shared>,
    id: u32,
    /// Its last event was read (or it failed): nothing to give up when dropped.
    ended: bool,
    /// Another stream went on its connection before it.
    reused: bool,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.id)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl Stream {
    /// Its id on the connection.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The next event the driver handed it, with the instant its bytes arrived.
    pub(crate) async fn event(&mut self) -> Result<(Event, MonoNanos), ReadFail> {
        poll_fn(|cx| {
            let mut st = self.conn.lock();
            let Some(slot) = st.streams.get_mut(&self.id) else {
                self.ended = true;
                return Poll::Ready(Err(ReadFail::Closed));
            };
            if let Some((event, at)) = slot.events.pop_front() {
                if ends(&event) {
                    st.end_stream(self.id);
                    self.ended = true;
                }
                return Poll::Ready(Ok((event, at)));
            }
            if let Some(e) = slot.failed.take() {
                st.end_stream(self.id);
                self.ended = true;
                return Poll::Ready(Err(e));
            }
            slot.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Reads the response head.
    async fn head(&mut self) -> Result<Head, Fault> {
        loop {
            let (event, at) = self.event().await.map_err(http2::fault_before_head)?;
            if let Some(head) = http2::head_of(event, self.id, at)? {
                return Ok(head);
            }
        }
    }

    /// Gives the stream up after its content: what it still sends is read past to its
    /// end (a stream that sends more than [`DRAIN_BYTES`] is reset).
    pub fn release(mut self) {
        let mut st = self.conn.lock();
        if let Some(slot) = st.streams.get_mut(&self.id) {
            let drained = slot.events.iter().map(|(e, _)| drained_len(e)).sum();
            if slot.events.iter().any(|(e, _)| ends(e)) || slot.failed.is_some() {
                st.end_stream(self.id);
            } else {
                slot.events.clear();
                slot.waker = None;
                slot.released = Some(drained);
            }
        }
        self.ended = true;
    }
}

/// The bytes of a DATA event, for [`DRAIN_BYTES`].
fn drained_len(event: &Event) -> usize {
    match event {
        Event::Data { data, .. } => data.len(),
        _ => 0,
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.ended {
            self.conn.lock().cancel(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dial to a listener that accepts (and never answers).
    async fn dial() -> (tokio::net::TcpListener, Arc<Dial>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let dial = Arc::new(Dial {
            authority: addr.to_string(),
            tls: None,
            connect_timeout: std::time::Duration::from_secs(1),
            connects: None,
        });
        (listener, dial)
    }

    /// A connection of `mux`, open (`open`: settled, with its own bound) or still
    /// opening.
    async fn conn(mux: &Mux, dial: &Arc<Dial>, open: Option<Option<u32>>) -> Arc<Shared> {
        let mut st = State::opening(None, Arc::clone(dial), Arc::clone(&mux.learned));
        st.load = 0;
        if let Some(bound) = open {
            let stream = tokio::net::TcpStream::connect(dial.authority())
                .await
                .expect("connect");
            let mut wire = Wire::new(stream, None);
            wire.max_streams = bound;
            wire.settled = true;
            st.wire = Some(wire);
            st.settled = true;
        }
        let conn = Arc::new(Shared(Mutex::new(st)));
        mux.conns().push(Arc::clone(&conn));
        conn
    }

    /// How many reservations [`Mux::reserve`] puts on `on` before it gives one
    /// elsewhere or none; the ones it made are held in `held`.
    fn reserved_on(
        mux: &Mux,
        dial: &Arc<Dial>,
        on: &Arc<Shared>,
        held: &mut Vec<Reservation>,
    ) -> usize {
        let mut n = 0;
        while let Some(r) = mux.reserve(None, dial, &None) {
            let here = Arc::ptr_eq(r.conn(), on);
            held.push(r);
            if !here || n > 1000 {
                break;
            }
            n += 1;
        }
        n
    }

    /// How many streams [`Mux::reserve`] puts on one connection of `per_conn` whose
    /// server said `learned` last, the connection open (`open`: settled, with its own
    /// bound) or still opening.
    async fn room(per_conn: usize, learned: usize, open: Option<Option<u32>>) -> usize {
        let (_listener, dial) = dial().await;
        let mut mux = Mux::new(per_conn);
        mux.learned = Arc::new(AtomicUsize::new(learned));
        let on = conn(&mux, &dial, open).await;
        reserved_on(&mux, &dial, &on, &mut Vec::new())
    }

    /// Break test: one connection saying 0 (a server draining it) failed every request
    /// while another had room; and once the server's last word was 0, each waiting
    /// request opened a connection of its own to ask again.
    #[tokio::test]
    async fn a_connection_that_takes_no_stream_holds_up_neither_the_others_nor_a_storm() {
        let (_listener, dial) = dial().await;
        let mux = Mux::new(8);
        mux.learned.store(0, Ordering::Relaxed);
        let _draining = conn(&mux, &dial, Some(Some(0))).await;
        let healthy = conn(&mux, &dial, Some(Some(8))).await;
        let mut held = Vec::new();
        assert_eq!(reserved_on(&mux, &dial, &healthy, &mut held), 8);
        // Both full, the last word 0: no new connection, the request fails at once.
        assert!(mux.reserve(None, &dial, &None).is_none());
        assert_eq!(mux.conns().len(), 2);
        // With none left, one connection asks again; while it opens, nothing more.
        drop(held);
        mux.conns().clear();
        let probe = mux
            .reserve(None, &dial, &None)
            .expect("a connection to ask");
        assert_eq!(mux.conns().len(), 1);
        assert!(mux.reserve(None, &dial, &None).is_none());
        assert_eq!(mux.conns().len(), 1);
        drop(probe);
    }

    /// Break test: one connection's low SETTINGS_MAX_CONCURRENT_STREAMS was applied to
    /// every connection for the rest of the run. An open connection keeps to its own
    /// bound; only one still opening goes by the server's last word.
    #[tokio::test]
    async fn each_open_connection_keeps_to_its_own_bound() {
        assert_eq!(room(8, 1, Some(Some(100))).await, 8);
        assert_eq!(room(8, 1, Some(None)).await, 8);
        assert_eq!(room(8, 100, Some(Some(2))).await, 2);
        assert_eq!(room(8, 2, None).await, 2);
        assert_eq!(room(8, usize::MAX, None).await, 8);
        // A server that said 0: one, to hear whether it says more.
        assert_eq!(room(8, 0, None).await, 1);
    }
}
