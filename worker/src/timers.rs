//! One precise timer for all of a worker's waits on an instant: think times, agent-trace
//! gaps, planned cancellations.
//!
//! tokio's timer wheel rounds every deadline up to the next whole millisecond, and its
//! epoll timeouts are whole milliseconds too: a turn due at 40.3 ms would wake at 41 ms.
//! A timerfd armed for an absolute instant wakes the runtime's epoll when it fires, to the
//! microsecond. One timerfd per waiting session cost a descriptor, an epoll registration
//! and a reactor slot per user in think time (40,000 users: 40,000 of each). Here the
//! worker has one timerfd, armed for the earliest instant anything waits for, and a queue
//! of the instants: a waiting session holds one queue entry, nothing else. A driver task,
//! running while anything waits, wakes the waits that fell due and arms the timerfd for
//! the next.
//!
//! Two kinds of wait: [`Timers::until`], to about the instant (a few tens of microseconds
//! after it, as the thread wakes), and [`Turn`]s, precise and in order: the driver wakes
//! [`WAKE_MARGIN`] before the earliest turn's instant, yields until the instant (the one
//! task that spins) and releases the turns that fell due, earliest first, so they are
//! sent in the order of their instants even when the thread runs late.
//!
//! While the driver sleeps towards a turn the runtime thread runs real-time where the
//! process may (see [`drive`] and docs/performance.md), so a loaded core does not make
//! the turns late.
//!
//! The runtime is single-threaded (`Rc`, `RefCell`): the queue is never shared between
//! threads.

use llmsurge_proto::MonoNanos;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::unix::AsyncFd;

/// How long before a turn's instant the driver wakes, to yield until the instant: a woken
/// thread takes tens of microseconds to run again (more on a busy core), which this
/// absorbs for at most 0.2 ms of yielding per instant.
const WAKE_MARGIN: Duration = Duration::from_micros(200);

/// The driver wakes at least this often, whatever the timerfd says (a missed arm
/// recovers within it).
const DRIVER_POLL: Duration = Duration::from_secs(1);

/// A timerfd, as the raw fd tokio's reactor registers.
struct Timer(nix::sys::timerfd::TimerFd);

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

/// A turn's state in the queue.
#[derive(Default)]
struct TurnState {
    /// Its task waits in [`Turn::until_due`].
    waker: Option<Waker>,
    /// The driver released it: it ends at its next poll.
    released: bool,
}

/// The instants waited for, and who waits for each.
#[derive(Default)]
struct Queue {
    /// Plain waits: (instant, key), earliest first. A dropped wait's entry stays until it
    /// comes up.
    due: BinaryHeap<Reverse<(MonoNanos, u64)>>,
    /// The plain waits not yet woken, by key: their wakers.
    waiting: HashMap<u64, Waker>,
    /// The turns not yet ended, by (instant, key): released in this order.
    turns: BTreeMap<(MonoNanos, u64), TurnState>,
    next_key: u64,
    /// What the timerfd is armed for, if anything.
    armed: Option<MonoNanos>,
    /// Whether the driver task runs.
    driving: bool,
}

impl Queue {
    /// Releases the turns that fell due by `now`, earliest first, up to the first one
    /// whose task does not wait yet (it is making its request: it ends by itself when it
    /// gets there, being first) or was released and not yet polled. Their wakers go to
    /// `wake`.
    fn release(&mut self, now: MonoNanos, wake: &mut Vec<Waker>) {
        for (&(due, _), st) in &mut self.turns {
            if due > now || st.released {
                break;
            }
            let Some(w) = st.waker.take() else { break };
            st.released = true;
            wake.push(w);
        }
    }

    /// The instant the driver must act next: the earliest plain wait, or the margin
    /// before the earliest turn waiting to be released. Drops dead plain entries.
    fn next(&mut self) -> Option<MonoNanos> {
        while let Some(&Reverse((_, key))) = self.due.peek() {
            if self.waiting.contains_key(&key) {
                break;
            }
            self.due.pop();
        }
        let plain = self.due.peek().map(|Reverse((at, _))| *at);
        let turn = self
            .turns
            .iter()
            .find(|(_, st)| !st.released)
            .filter(|(_, st)| st.waker.is_some())
            .map(|(&(due, _), _)| early(due));
        match (plain, turn) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// [`WAKE_MARGIN`] before `due`.
fn early(due: MonoNanos) -> MonoNanos {
    MonoNanos(due.0.saturating_sub(WAKE_MARGIN.as_nanos() as u64))
}

/// A worker's timer queue (see the module doc). Make one per runtime with
/// [`Timers::new`]; waits must run inside its `LocalSet` (the driver is a local task).
pub struct Timers {
    /// `None` when no timerfd could be made: the driver sleeps on tokio's timer (to the
    /// millisecond) and yields the rest.
    fd: Option<AsyncFd<Timer>>,
    queue: RefCell<Queue>,
    /// The runtime thread's real time while it sleeps towards a turn (see [`drive`]):
    /// set up when the first turn waits, so runs without turns never probe it.
    realtime: RefCell<Option<crate::sched::Realtime>>,
}

impl std::fmt::Debug for Timers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.queue.borrow();
        f.debug_struct("Timers")
            .field("timerfd", &self.fd.is_some())
            .field("waiting", &q.waiting.len())
            .field("turns", &q.turns.len())
            .field("armed", &q.armed)
            .finish()
    }
}

impl Timers {
    /// A queue with its timerfd, registered with the current runtime's reactor; without
    /// one (the descriptor could not be made) the driver uses tokio's timer.
    pub fn new() -> Rc<Self> {
        Rc::new(Self {
            fd: make_timerfd().ok(),
            queue: RefCell::new(Queue::default()),
            realtime: RefCell::new(None),
        })
    }

    /// Waits until `due` to within microseconds, in its turn (see [`Turn`]).
    pub async fn until_precisely(self: &Rc<Self>, due: MonoNanos) {
        self.turn(due).until_due().await;
    }

    /// A place among the precise waits, for `due`: they end in the order of their
    /// instants. Take it when the instant is known (a think time begins), so a wait still
    /// on its way to the instant (making its request) holds its place.
    pub fn turn(self: &Rc<Self>, due: MonoNanos) -> Turn {
        let mut q = self.queue.borrow_mut();
        let place = (due, q.next_key);
        q.next_key += 1;
        q.turns.insert(place, TurnState::default());
        Turn {
            timers: self.clone(),
            place,
        }
    }

    /// Waits until `at` (a few tens of microseconds after it, as the thread wakes; about
    /// a millisecond after without a timerfd).
    pub fn until(self: &Rc<Self>, at: MonoNanos) -> Wait {
        Wait {
            timers: self.clone(),
            at,
            key: None,
        }
    }

    /// How many waits and turns are queued (not yet ended).
    pub fn waiting(&self) -> usize {
        let q = self.queue.borrow();
        q.waiting.len() + q.turns.len()
    }

    /// The driver must act by `at`: arms the timerfd when `at` comes before what it is
    /// armed for, and starts the driver when it is not running.
    fn wake_driver_by(self: &Rc<Self>, q: &mut Queue, at: MonoNanos) {
        if q.armed.is_none_or(|armed| at < armed) {
            self.arm(q, at);
        }
        if !q.driving {
            q.driving = true;
            tokio::task::spawn_local(drive(self.clone()));
        }
    }

    /// Arms the timerfd for `at` (absolute `CLOCK_MONOTONIC`, the clock [`MonoNanos`]
    /// reads). A failure leaves it as it was: the driver also wakes every
    /// [`DRIVER_POLL`], so a wait then runs late rather than never.
    fn arm(&self, q: &mut Queue, at: MonoNanos) {
        use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
        // Without a timerfd, the driver sleeps to `armed` on tokio's timer.
        let Some(fd) = &self.fd else {
            q.armed = Some(at);
            return;
        };
        // An instant of 0 would disarm the timer: at least a nanosecond.
        let at = MonoNanos(at.0.max(1));
        let spec =
            nix::sys::time::TimeSpec::new((at.0 / 1_000_000_000) as _, (at.0 % 1_000_000_000) as _);
        if fd
            .get_ref()
            .0
            .set(
                Expiration::OneShot(spec),
                TimerSetTimeFlags::TFD_TIMER_ABSTIME,
            )
            .is_ok()
        {
            q.armed = Some(at);
        }
    }

    /// Wakes the plain waits due by `now` and releases the turns due by then; arms the
    /// timerfd for what comes next. Returns when the driver must act next (`None`:
    /// nothing waits, the driver stops).
    fn fire(&self, now: MonoNanos) -> Option<MonoNanos> {
        let mut wake = Vec::new();
        let next = {
            let mut q = self.queue.borrow_mut();
            q.armed = None;
            while let Some(&Reverse((at, key))) = q.due.peek() {
                if at > now {
                    break;
                }
                q.due.pop();
                if let Some(w) = q.waiting.remove(&key) {
                    wake.push(w);
                }
            }
            q.release(now, &mut wake);
            let next = q.next();
            match next {
                Some(at) if at > now => self.arm(&mut q, at),
                Some(_) => {}
                None if q.waiting.is_empty() && q.turns.is_empty() => q.driving = false,
                // Turns whose tasks do not wait yet: they wake the driver when they do.
                None => {}
            }
            next.or(q.driving.then_some(now + DRIVER_POLL))
        };
        // Woken in order, outside the borrow: the runtime polls them in this order.
        for w in wake {
            w.wake();
        }
        next
    }

    /// Real time for the runtime thread (where allowed) while `towards_turn`: asleep
    /// on a turn's path, its wake-up preempts whatever holds the core, as the pacer's
    /// does; normal otherwise (see [`drive`]).
    fn realtime(&self, towards_turn: bool) {
        let mut rt = self.realtime.borrow_mut();
        if rt.is_none() && !towards_turn {
            return;
        }
        rt.get_or_insert_with(crate::sched::Realtime::for_this_thread)
            .keep_up(towards_turn);
    }

    /// Whether any turn is queued: then every instant the driver sleeps towards is on a
    /// turn's path (its own, or the plain wait that makes its request shortly before).
    fn turns_queued(&self) -> bool {
        !self.queue.borrow().turns.is_empty()
    }

    /// The earliest turn not yet released, when it falls due within the margin: the
    /// driver yields until its instant rather than sleep.
    fn turn_within_margin(&self, now: MonoNanos) -> bool {
        let q = self.queue.borrow();
        q.turns
            .iter()
            .find(|(_, st)| !st.released)
            .is_some_and(|(&(due, _), st)| st.waker.is_some() && early(due) <= now)
    }
}

/// Runs while anything waits: wakes the waits that fell due and releases the turns in
/// order, yielding through the last [`WAKE_MARGIN`] before a turn's instant.
///
/// A thread woken on a busy core waits for the running thread's slice, or for its fair
/// share: tens of milliseconds on a loaded host, all of it turn lateness. So, where the
/// process may (root, `CAP_SYS_NICE`, `ulimit -r 1`; not with `LLMSURGE_REALTIME_PACER=0`),
/// the runtime thread is `SCHED_FIFO` at the lowest priority while it sleeps with turns
/// queued (towards a turn, or the making of its request a few ms before) and until what
/// fell due is sent, like the pacer; normal when no turn waits, and for one sleep after a
/// real-time wake-up found it busy (it runs behind: that wake-up was not the one to keep).
async fn drive(timers: Rc<Timers>) {
    // What the last real-time sleep was for: a real-time thread wakes at once, so a
    // driver run more than a margin after it means the thread is behind (busy with
    // other tasks): it sleeps normal once, until on time again.
    let mut slept_to: Option<MonoNanos> = None;
    loop {
        let now = MonoNanos::now();
        let behind = slept_to.is_some_and(|at| now > at + WAKE_MARGIN);
        let Some(next) = timers.fire(now) else {
            timers.realtime(false);
            return;
        };
        if timers.turn_within_margin(MonoNanos::now()) {
            // The one task that spins: the turns themselves wait.
            slept_to = None;
            tokio::task::yield_now().await;
            continue;
        }
        // Real time only for a wake-up worth keeping: a turn's, not behind, and not so
        // close that the thread would hardly sleep (turns denser than the margin).
        let worth = next > MonoNanos::now() + WAKE_MARGIN;
        let realtime = !behind && worth && timers.turns_queued();
        timers.realtime(realtime);
        slept_to = realtime.then_some(next);
        match &timers.fd {
            Some(fd) => {
                let readable = tokio::time::timeout(DRIVER_POLL, fd.readable()).await;
                if let Ok(Ok(mut ready)) = readable {
                    ready.clear_ready();
                    // Reads the expiry count so the descriptor is not readable any more;
                    // a timer not yet expired says EAGAIN, which is fine.
                    let _ = fd.get_ref().0.wait();
                }
            }
            None => {
                // tokio's timer rounds up to the millisecond: sleep to a millisecond
                // before, and yield the rest.
                let at = next.to_instant().checked_sub(Duration::from_millis(1));
                match at {
                    Some(at) if at > std::time::Instant::now() => {
                        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                    }
                    _ => tokio::task::yield_now().await,
                }
            }
        }
    }
}

/// A place among a worker's precise waits (see [`Timers::turn`]), left when it drops.
#[derive(Debug)]
pub struct Turn {
    timers: Rc<Timers>,
    place: (MonoNanos, u64),
}

impl Turn {
    /// The instant of this turn.
    pub fn due(&self) -> MonoNanos {
        self.place.0
    }

    /// Waits until the instant, to within microseconds and in order: ends when the
    /// driver releases it (at its instant, after every turn of an earlier instant), or at
    /// once when its instant passed and no earlier turn is left.
    pub fn until_due(&self) -> UntilDue<'_> {
        UntilDue { turn: self }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut wake = Vec::new();
        {
            let mut q = self.timers.queue.borrow_mut();
            q.turns.remove(&self.place);
            // The turns it held up may go now.
            q.release(MonoNanos::now(), &mut wake);
        }
        for w in wake {
            w.wake();
        }
    }
}

/// The future of [`Turn::until_due`].
#[derive(Debug)]
pub struct UntilDue<'a> {
    turn: &'a Turn,
}

impl Future for UntilDue<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let turn = self.turn;
        let mut q = turn.timers.queue.borrow_mut();
        let first = q.turns.keys().next() == Some(&turn.place);
        let Some(st) = q.turns.get_mut(&turn.place) else {
            return Poll::Ready(());
        };
        if st.released || (first && MonoNanos::now() >= turn.place.0) {
            st.released = true;
            return Poll::Ready(());
        }
        if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            st.waker = Some(cx.waker().clone());
        }
        turn.timers.wake_driver_by(&mut q, early(turn.place.0));
        Poll::Pending
    }
}

/// A wait on a [`Timers`] queue for an instant (see [`Timers::until`]).
#[derive(Debug)]
pub struct Wait {
    timers: Rc<Timers>,
    at: MonoNanos,
    key: Option<u64>,
}

impl Future for Wait {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let timers = self.timers.clone();
        let mut q = timers.queue.borrow_mut();
        match self.key {
            None => {
                if MonoNanos::now() >= self.at {
                    return Poll::Ready(());
                }
                let key = q.next_key;
                q.next_key += 1;
                q.due.push(Reverse((self.at, key)));
                q.waiting.insert(key, cx.waker().clone());
                self.key = Some(key);
                timers.wake_driver_by(&mut q, self.at);
                Poll::Pending
            }
            Some(key) => match q.waiting.get_mut(&key) {
                // Woken by the driver: out of the queue.
                None => {
                    self.key = None;
                    self.at = MonoNanos(0);
                    Poll::Ready(())
                }
                Some(w) => {
                    if !w.will_wake(cx.waker()) {
                        *w = cx.waker().clone();
                    }
                    Poll::Pending
                }
            },
        }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            // The heap entry stays until it comes up; the driver skips it then.
            self.timers.queue.borrow_mut().waiting.remove(&key);
        }
    }
}

/// A nonblocking timerfd on `CLOCK_MONOTONIC`, registered with the runtime's reactor.
fn make_timerfd() -> std::io::Result<AsyncFd<Timer>> {
    use nix::sys::timerfd::{ClockId, TimerFd, TimerFlags};
    let fd = TimerFd::new(
        ClockId::CLOCK_MONOTONIC,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )?;
    // SAFETY: `Timer` owns the timerfd, which stays open, the same descriptor, until the
    // `AsyncFd` that owns the `Timer` drops; `as_raw_fd` always returns it.
    let fd = unsafe { AsyncFd::register_with_interest(Timer(fd), tokio::io::Interest::READABLE)? };
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn local(f: impl Future<Output = ()>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        tokio::task::LocalSet::new().block_on(&rt, f);
    }

    #[test]
    fn waits_end_at_their_instants_never_before_and_in_their_order() {
        local(async {
            let timers = Timers::new();
            let order = Rc::new(RefCell::new(Vec::new()));
            let base = MonoNanos::now() + Duration::from_millis(20);
            let mut tasks = Vec::new();
            // Queued out of order; some share an instant.
            for (i, ms) in [7u64, 3, 9, 1, 3, 5].into_iter().enumerate() {
                let (timers, order) = (timers.clone(), order.clone());
                let due = base + Duration::from_millis(ms);
                tasks.push(tokio::task::spawn_local(async move {
                    timers.until_precisely(due).await;
                    let now = MonoNanos::now();
                    assert!(now >= due, "wait {i} ended before its instant");
                    order.borrow_mut().push(ms);
                }));
            }
            for t in tasks {
                t.await.expect("task");
            }
            assert_eq!(*order.borrow(), vec![1, 3, 3, 5, 7, 9]);
            assert_eq!(timers.waiting(), 0);
        });
    }

    #[test]
    fn the_runtime_thread_is_real_time_only_while_it_sleeps_towards_a_turn() {
        // Probed on a thread of its own before this one goes real-time.
        let allowed = crate::sched::realtime_allowed();
        local(async move {
            let timers = Timers::new();
            // A turn far off, waiting: every sleep of the driver is now on its path.
            let turn = timers.turn(MonoNanos::now() + Duration::from_secs(3600));
            let mut until_due = Box::pin(turn.until_due());
            let first = std::future::poll_fn(|cx| Poll::Ready(until_due.as_mut().poll(cx))).await;
            assert!(first.is_pending());
            // A watch wakes while the driver sleeps. One wake-up that ran late (a busy
            // machine) rightly leaves the next sleep normal, so watch until one was on
            // time; the count bounds the test where real time is not allowed.
            let mut asleep_realtime = false;
            for _ in 0..if allowed { 500 } else { 3 } {
                timers
                    .until(MonoNanos::now() + Duration::from_millis(2))
                    .await;
                asleep_realtime = crate::sched::is_realtime();
                if asleep_realtime {
                    break;
                }
            }
            assert_eq!(
                asleep_realtime, allowed,
                "asleep towards a turn: real time if allowed"
            );
            // The turn leaves; once nothing waits, the driver stops and leaves the
            // thread normal (a last short wait wakes it now rather than at its poll).
            drop(until_due);
            drop(turn);
            timers
                .until(MonoNanos::now() + Duration::from_millis(1))
                .await;
            while timers.queue.borrow().driving {
                tokio::task::yield_now().await;
            }
            assert!(!crate::sched::is_realtime(), "normal once no turn waits");
        });
    }

    #[test]
    fn a_turn_on_its_way_holds_its_place_however_late() {
        local(async {
            let timers = Timers::new();
            let order = Rc::new(RefCell::new(Vec::new()));
            let base = MonoNanos::now() + Duration::from_millis(5);
            let a = timers.turn(base + Duration::from_millis(1));
            let b = timers.turn(base + Duration::from_millis(2));
            let o = order.clone();
            let later = tokio::task::spawn_local(async move {
                b.until_due().await;
                o.borrow_mut().push("b");
            });
            // A's task gets to its wait only after both instants passed.
            tokio::time::sleep(Duration::from_millis(20)).await;
            a.until_due().await;
            order.borrow_mut().push("a");
            drop(a);
            later.await.expect("task");
            assert_eq!(*order.borrow(), vec!["a", "b"]);
            assert_eq!(timers.waiting(), 0);
        });
    }

    #[test]
    fn a_dropped_wait_leaves_the_queue_and_holds_no_one_up() {
        local(async {
            let timers = Timers::new();
            let soon = MonoNanos::now() + Duration::from_millis(5);
            let never = timers.until(MonoNanos::now() + Duration::from_secs(3600));
            let mut never = Box::pin(never);
            // Queued: the hour-long wait comes first.
            let first = std::future::poll_fn(|cx| Poll::Ready(never.as_mut().poll(cx))).await;
            assert!(first.is_pending());
            assert_eq!(timers.waiting(), 1);
            drop(never);
            assert_eq!(timers.waiting(), 0);
            timers.until(soon).await;
            assert!(MonoNanos::now() >= soon);
            // An instant already past is no wait at all.
            timers.until(MonoNanos(1)).await;
        });
    }
}
