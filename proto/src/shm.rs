//! The shared-memory block every process of a worker group maps.
//!
//! The coordinator creates it (an anonymous `memfd`), initialises the header, and hands
//! the file descriptor to each worker it spawns. Everything in it is an atomic, so the
//! block is safe to share between processes without locks: the stop flags, the strategy
//! clock (the next slot to claim, the slot limit, and the slots handed back unsent), the
//! group-wide concurrency cap, and per-worker counters of requests in flight and sent.
//! The group's requests in flight are the sum of the per-worker counters: taking or
//! giving back a unit of the cap changes one counter in one atomic step, so a worker
//! killed at any instant holds exactly what its counter says, and the coordinator gives
//! that back ([`ShmLayout::reclaim_worker`]).
//!
//! Both group-wide caps (concurrency, `--max-prefill-concurrency`) admit their waiters
//! first come, first served across the group, by a ticket queue per cap (two counters:
//! tickets handed out, tickets that left). A request that finds the cap full, or others
//! already waiting, takes a ticket ([`ShmLayout::join_queue`]); it may take a unit once
//! fewer tickets are ahead of it than the cap has room. Without the queue every waiter
//! polled, and the worker that freed a unit woke its own waiter first: it took the unit
//! again while other workers' earlier requests kept waiting. Each worker also counts the
//! tickets it holds, so a dead worker's places in the queues are given up with its units.
//! A unit given back while someone waits bumps a futex word and wakes every worker
//! sleeping on it ([`ShmLayout::wait_for_release`]), so the next in turn hears of it at
//! once, whichever worker it is in.
//! The per-worker counters are what the coordinator trusts when a worker dies before
//! reporting: they are written before the request goes out, the report only after.
//!
//! The layout is `#[repr(C)]` with fixed offsets and carries a magic number and a layout
//! version; a golden test pins the offsets so a change is visible in review.

use nix::sys::mman::{MapFlags, ProtFlags};
use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// `b"LLMSURGE"` read as a little-endian integer.
pub const SHM_MAGIC: u64 = u64::from_le_bytes(*b"LLMSURGE");
/// Bumped on every change to [`ShmLayout`].
pub const SHM_LAYOUT_VERSION: u32 = 4;
/// The most workers one group can have (the per-worker arrays are this long).
pub const MAX_WORKERS: usize = 256;
/// A slot limit or concurrency cap that means "none".
pub const UNLIMITED: u64 = u64::MAX;

/// A group-wide cap a request may wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// The cap on requests in flight (`--max-concurrency`, a concurrent profile).
    Concurrency,
    /// The cap on requests before their first token (`--max-prefill-concurrency`).
    Prefill,
}

/// One cap's queue. Ticket `t` has `t - left` tickets ahead of it (those that left did
/// so roughly in order, as the cap admits them).
#[repr(C)]
#[derive(Debug)]
struct CapQueue {
    /// The next ticket to hand out.
    tickets: AtomicU64,
    /// Tickets that left the queue: admitted, given up, or a dead worker's.
    left: AtomicU64,
}

/// Stop-flag bits in [`ShmLayout::stop`].
pub mod stop_flags {
    /// Claim no new slots; requests already sent run to completion.
    pub const STOP_QUEUING: u32 = 1;
    /// Cancel requests in flight as well.
    pub const CANCEL_IN_FLIGHT: u32 = 2;
    /// Cancel the requests not yet sent (held by a cap) but let those in flight finish:
    /// Ctrl-C's drain. A stop that ends a schedule (`--max-requests`, a trace's end)
    /// still sends what it claimed.
    pub const DROP_UNSENT: u32 = 4;
}

/// Errors mapping or validating the shared block.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A system call failed.
    #[error("shared memory: {op} failed: {source}")]
    Sys {
        /// The call that failed.
        op: &'static str,
        /// The error it returned.
        source: nix::Error,
    },
    /// The block is smaller than the layout.
    #[error("shared memory block is {actual} bytes, the layout needs {expected}")]
    TooSmall {
        /// The block's size.
        actual: usize,
        /// The layout's size.
        expected: usize,
    },
    /// The magic number does not match: not an llmsurge block.
    #[error("shared memory block has magic {0:#x}, not an llmsurge block")]
    BadMagic(u64),
    /// Written by a different version of llmsurge.
    #[error("shared memory layout version {found}, this build expects {expected}")]
    VersionMismatch {
        /// The version in the block.
        found: u32,
        /// The version this build writes.
        expected: u32,
    },
}

/// The block's contents. Offsets are part of the cross-process contract.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ShmLayout {
    magic: AtomicU64,
    layout_version: AtomicU32,
    worker_count: AtomicU32,
    /// [`stop_flags`] bits.
    stop: AtomicU32,
    reserved: AtomicU32,
    /// The strategy clock: the next slot index to hand out.
    next_slot: AtomicU64,
    /// Slots at or past this index are never handed out.
    slot_limit: AtomicU64,
    /// Unused since layout 3 (it held the group's requests in flight, now the sum of
    /// `worker_in_flight`: two counters to change were two steps, and a worker killed
    /// between them leaked a unit of the cap).
    unused_in_flight: AtomicU64,
    /// The group-wide cap on `in_flight`.
    concurrency_cap: AtomicU64,
    /// Slots claimed but handed back unsent: a stop came before they were due.
    slots_returned: AtomicU64,
    /// Multi-turn sessions: the next session index to hand out (taken from the
    /// padding, so the layout's size is unchanged).
    next_session: AtomicU64,
    /// `--max-prefill-concurrency`: the group-wide cap on requests sent and waiting for
    /// their first token ([`UNLIMITED`] or 0 when none; taken from the padding).
    prefill_cap: AtomicU64,
    /// Requests sent and waiting for their first token, group-wide, under `prefill_cap`.
    /// One counter: a worker that dies holding units keeps them until the benchmark
    /// ends (each benchmark has a fresh block).
    prefill_in_flight: AtomicU64,
    /// The concurrency cap's queue (taken from the padding).
    concurrency_queue: CapQueue,
    /// The prefill cap's queue (taken from the padding).
    prefill_queue: CapQueue,
    /// Bumped on every unit given back while a request waits in a queue: the futex
    /// word other workers' wakers sleep on ([`ShmLayout::wait_for_release`]).
    release_epoch: AtomicU32,
    reserved_2: AtomicU32,
    /// Requests in flight per worker, so a dead worker's share can be given back.
    worker_in_flight: [AtomicU64; MAX_WORKERS],
    /// Requests sent per worker (counted just before the send), so the requests a dead
    /// worker sent but never reported are still accounted for.
    worker_started: [AtomicU64; MAX_WORKERS],
    /// Tickets of the concurrency cap's queue each worker holds, counted before the
    /// ticket is taken (so a dead worker's are all given up, perhaps one more).
    worker_queued: [AtomicU64; MAX_WORKERS],
    /// The same for the prefill cap's queue.
    worker_prefill_queued: [AtomicU64; MAX_WORKERS],
}

/// The size of the block.
pub const SHM_SIZE: usize = size_of::<ShmLayout>();

impl ShmLayout {
    /// Writes the header. Called once by the coordinator before any worker maps it.
    pub fn init(&self, worker_count: u32, slot_limit: u64, concurrency_cap: u64) {
        self.layout_version
            .store(SHM_LAYOUT_VERSION, Ordering::Relaxed);
        self.worker_count.store(worker_count, Ordering::Relaxed);
        self.slot_limit.store(slot_limit, Ordering::Relaxed);
        self.concurrency_cap
            .store(concurrency_cap, Ordering::Relaxed);
        // Magic last, with Release: a reader that sees it sees the rest.
        self.magic.store(SHM_MAGIC, Ordering::Release);
    }

    /// Checks magic and layout version.
    pub fn validate(&self) -> Result<(), ShmError> {
        let magic = self.magic.load(Ordering::Acquire);
        if magic != SHM_MAGIC {
            return Err(ShmError::BadMagic(magic));
        }
        let found = self.layout_version.load(Ordering::Relaxed);
        if found != SHM_LAYOUT_VERSION {
            return Err(ShmError::VersionMismatch {
                found,
                expected: SHM_LAYOUT_VERSION,
            });
        }
        Ok(())
    }

    /// Number of workers in the group.
    pub fn worker_count(&self) -> u32 {
        self.worker_count.load(Ordering::Relaxed)
    }

    /// The current stop flags.
    pub fn stop_flags(&self) -> u32 {
        self.stop.load(Ordering::Acquire)
    }

    /// Raises stop flags (they are never lowered).
    pub fn request_stop(&self, flags: u32) {
        self.stop.fetch_or(flags, Ordering::AcqRel);
    }

    /// Whether new slots may still be claimed.
    pub fn queuing_stopped(&self) -> bool {
        self.stop_flags() & (stop_flags::STOP_QUEUING | stop_flags::CANCEL_IN_FLIGHT) != 0
    }

    /// Whether in-flight requests must be cancelled.
    pub fn cancel_requested(&self) -> bool {
        self.stop_flags() & stop_flags::CANCEL_IN_FLIGHT != 0
    }

    /// Claims the next slot of the group's schedule, or `None` when the schedule is
    /// exhausted or stopped. Every index below the limit is handed out exactly once.
    pub fn claim_slot(&self) -> Option<u64> {
        if self.queuing_stopped() {
            return None;
        }
        let limit = self.slot_limit.load(Ordering::Acquire);
        // Cheap check first so an exhausted schedule does not keep bumping the counter.
        if self.next_slot.load(Ordering::Relaxed) >= limit {
            return None;
        }
        let slot = self.next_slot.fetch_add(1, Ordering::AcqRel);
        (slot < limit).then_some(slot)
    }

    /// Claims the next session index of the group's schedule (multi-turn sessions);
    /// `None` once queuing stopped.
    pub fn claim_session(&self) -> Option<u64> {
        if self.queuing_stopped() {
            return None;
        }
        Some(self.next_session.fetch_add(1, Ordering::AcqRel))
    }

    /// Session indices handed out so far.
    pub fn sessions_claimed(&self) -> u64 {
        self.next_session.load(Ordering::Acquire)
    }

    /// Slots handed out so far (never more than the limit).
    pub fn slots_claimed(&self) -> u64 {
        self.next_slot
            .load(Ordering::Acquire)
            .min(self.slot_limit.load(Ordering::Acquire))
    }

    /// Whether no slot is left to claim: stopped, or every slot below the limit handed out.
    pub fn slots_exhausted(&self) -> bool {
        self.queuing_stopped()
            || self.next_slot.load(Ordering::Acquire) >= self.slot_limit.load(Ordering::Acquire)
    }

    /// Lowers the slot limit (e.g. a finite dataset ran out); never raises it.
    pub fn limit_slots(&self, limit: u64) {
        self.slot_limit.fetch_min(limit, Ordering::AcqRel);
    }

    /// Takes one unit of the group-wide concurrency for `worker` now, if nobody waits
    /// for it in the queue; `false` when the cap is reached, a request waits (take a
    /// ticket with [`join_queue`](Self::join_queue)), or `worker` is out of range.
    pub fn try_acquire(&self, worker: u32) -> bool {
        if self.concurrency_cap.load(Ordering::Relaxed) != UNLIMITED
            && self.someone_waits(Cap::Concurrency)
        {
            return false;
        }
        self.take_unit(worker)
    }

    /// Takes one unit of the group-wide concurrency for `worker`; `false` when the cap
    /// is reached (or `worker` is out of range). Queue or not.
    ///
    /// The unit is added to the worker's own counter first, in one step, then the
    /// group's total is checked against the cap and the unit given back if over it. No
    /// unit exists anywhere else, so a worker killed at any instant holds exactly its
    /// counter. The cap is never exceeded (sequentially consistent: of the units held,
    /// the last one added saw all the others); two workers racing for the last unit may
    /// both give it back, and each tries again (callers poll).
    fn take_unit(&self, worker: u32) -> bool {
        let Some(mine) = self.worker_in_flight.get(worker as usize) else {
            return false;
        };
        mine.fetch_add(1, Ordering::SeqCst);
        let cap = self.concurrency_cap.load(Ordering::Relaxed);
        if cap == UNLIMITED || self.in_flight() <= cap {
            return true;
        }
        mine.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// The group-wide cap on requests in flight, when one is set.
    pub fn concurrency_cap(&self) -> Option<u64> {
        match self.concurrency_cap.load(Ordering::Relaxed) {
            UNLIMITED => None,
            cap => Some(cap),
        }
    }

    /// Sets the group-wide cap on requests before their first token
    /// (`--max-prefill-concurrency`). Called by the coordinator before any worker runs.
    pub fn set_prefill_cap(&self, cap: u64) {
        self.prefill_cap.store(cap, Ordering::Relaxed);
    }

    /// The cap on requests before their first token, when one is set.
    pub fn prefill_cap(&self) -> Option<u64> {
        match self.prefill_cap.load(Ordering::Relaxed) {
            0 | UNLIMITED => None,
            cap => Some(cap),
        }
    }

    /// Takes one unit of the prefill cap now, if nobody waits for it in the queue;
    /// `false` when the cap is reached or a request waits (take a ticket with
    /// [`join_queue`](Self::join_queue)). Always `true` without a cap.
    pub fn try_acquire_prefill(&self) -> bool {
        if self.prefill_cap().is_none() {
            return true;
        }
        !self.someone_waits(Cap::Prefill) && self.take_prefill_unit()
    }

    /// Takes one unit of the prefill cap, queue or not; `false` when the cap is reached.
    fn take_prefill_unit(&self) -> bool {
        let Some(cap) = self.prefill_cap() else {
            return true;
        };
        self.prefill_in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < cap).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back one unit taken by [`try_acquire_prefill`](Self::try_acquire_prefill)
    /// (or admitted from the queue), and wakes the waiters if any.
    pub fn release_prefill(&self) {
        if self.prefill_cap().is_some() {
            let _ = self
                .prefill_in_flight
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            self.wake_if_waiting(Cap::Prefill);
        }
    }

    /// Gives back one unit taken by [`try_acquire`](Self::try_acquire) (or admitted from
    /// the queue): one step; then wakes the waiters if any.
    pub fn release(&self, worker: u32) {
        if let Some(c) = self.worker_in_flight.get(worker as usize) {
            c.fetch_sub(1, Ordering::SeqCst);
            if self.concurrency_cap.load(Ordering::Relaxed) != UNLIMITED {
                self.wake_if_waiting(Cap::Concurrency);
            }
        }
    }

    /// Wakes every worker sleeping in [`wait_for_release`](Self::wait_for_release) when
    /// a request waits in `cap`'s queue: a system call only then.
    fn wake_if_waiting(&self, cap: Cap) {
        if self.someone_waits(cap) {
            self.release_epoch.fetch_add(1, Ordering::SeqCst);
            // SAFETY: FUTEX_WAKE on an aligned u32 of this live shared mapping; it reads
            // nothing else. Not FUTEX_PRIVATE: the waiters are other processes.
            unsafe {
                nix::libc::syscall(
                    nix::libc::SYS_futex,
                    self.release_epoch.as_ptr(),
                    nix::libc::FUTEX_WAKE,
                    i32::MAX,
                );
            }
        }
    }

    /// The count [`wait_for_release`](Self::wait_for_release) compares with.
    pub fn release_epoch(&self) -> u32 {
        self.release_epoch.load(Ordering::SeqCst)
    }

    /// Sleeps until a unit of either cap is given back while someone waits (the epoch
    /// moves past `seen`), or `timeout` passes; returns at once if it already moved. A
    /// blocking call, for a thread of its own.
    pub fn wait_for_release(&self, seen: u32, timeout: std::time::Duration) {
        let ts = nix::libc::timespec {
            tv_sec: timeout.as_secs() as nix::libc::time_t,
            tv_nsec: timeout.subsec_nanos() as nix::libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on an aligned u32 of this live shared mapping, with a
        // relative timeout that lives across the call. The kernel compares the word with
        // `seen` atomically, so a wake between the caller's read and this call is not lost.
        unsafe {
            nix::libc::syscall(
                nix::libc::SYS_futex,
                self.release_epoch.as_ptr(),
                nix::libc::FUTEX_WAIT,
                seen,
                &ts as *const nix::libc::timespec,
            );
        }
    }

    /// Gives back everything a dead worker held (its units of concurrency, and its
    /// places in the caps' queues, so nobody waits behind them); returns how many
    /// requests it had in flight.
    pub fn reclaim_worker(&self, worker: u32) -> u64 {
        for cap in [Cap::Concurrency, Cap::Prefill] {
            if let Some(queued) = self.queued_by(cap, worker) {
                let tickets = queued.swap(0, Ordering::SeqCst);
                self.queue(cap).left.fetch_add(tickets, Ordering::SeqCst);
            }
        }
        let units = self
            .worker_in_flight
            .get(worker as usize)
            .map(|c| c.swap(0, Ordering::SeqCst))
            .unwrap_or(0);
        self.wake_if_waiting(Cap::Concurrency);
        self.wake_if_waiting(Cap::Prefill);
        units
    }

    fn queue(&self, cap: Cap) -> &CapQueue {
        match cap {
            Cap::Concurrency => &self.concurrency_queue,
            Cap::Prefill => &self.prefill_queue,
        }
    }

    fn queued_by(&self, cap: Cap, worker: u32) -> Option<&AtomicU64> {
        match cap {
            Cap::Concurrency => self.worker_queued.get(worker as usize),
            Cap::Prefill => self.worker_prefill_queued.get(worker as usize),
        }
    }

    /// Whether a ticket of `cap`'s queue has not left it yet.
    fn someone_waits(&self, cap: Cap) -> bool {
        let q = self.queue(cap);
        q.tickets.load(Ordering::SeqCst) > q.left.load(Ordering::SeqCst)
    }

    /// Units of `cap` free now.
    fn room(&self, cap: Cap) -> u64 {
        match cap {
            Cap::Concurrency => match self.concurrency_cap.load(Ordering::Relaxed) {
                UNLIMITED => u64::MAX,
                cap => cap.saturating_sub(self.in_flight()),
            },
            Cap::Prefill => self.prefill_cap().map_or(u64::MAX, |cap| {
                cap.saturating_sub(self.prefill_in_flight.load(Ordering::SeqCst))
            }),
        }
    }

    /// Tickets of `cap`'s queue `worker` holds now (0 for a worker out of range).
    pub fn queued(&self, cap: Cap, worker: u32) -> u64 {
        self.queued_by(cap, worker)
            .map_or(0, |q| q.load(Ordering::Relaxed))
    }

    /// Takes a ticket of `cap`'s queue for a request of `worker`: it is admitted in
    /// ticket order ([`CapWaiter::try_admit`]); dropping the waiter gives its place up.
    pub fn join_queue(&self, cap: Cap, worker: u32) -> CapWaiter<'_> {
        // Counted first: a worker killed right after holds the ticket on the books.
        if let Some(queued) = self.queued_by(cap, worker) {
            queued.fetch_add(1, Ordering::SeqCst);
        }
        let ticket = self.queue(cap).tickets.fetch_add(1, Ordering::SeqCst);
        CapWaiter {
            shm: self,
            cap,
            worker,
            ticket,
            waiting: true,
        }
    }

    /// Requests in flight across the group now: the sum of the workers' counters.
    pub fn in_flight(&self) -> u64 {
        let workers = (self.worker_count() as usize).min(MAX_WORKERS);
        self.worker_in_flight[..workers]
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum()
    }

    /// Counts one request `worker` is about to send. Called before the send, so a
    /// worker that dies right after still has it counted.
    pub fn count_started(&self, worker: u32) {
        if let Some(c) = self.worker_started.get(worker as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Requests `worker` sent so far.
    pub fn worker_started(&self, worker: u32) -> u64 {
        self.worker_started
            .get(worker as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Requests sent so far across the group.
    pub fn started(&self) -> u64 {
        self.worker_started
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Hands back a claimed slot that was never sent because a stop came before it was
    /// due: it is no request, and the books say so.
    pub fn return_slot(&self) {
        self.slots_returned.fetch_add(1, Ordering::Relaxed);
    }

    /// Slots handed back unsent.
    pub fn slots_returned(&self) -> u64 {
        self.slots_returned.load(Ordering::Relaxed)
    }
}

/// A request's place in a cap's queue. Dropped before it was admitted, it gives its
/// place up (a stop cancelled the request), so nobody waits behind it.
#[derive(Debug)]
#[must_use = "a place in the queue is given up when dropped"]
pub struct CapWaiter<'a> {
    shm: &'a ShmLayout,
    cap: Cap,
    worker: u32,
    ticket: u64,
    /// Still in the queue: neither admitted nor given up.
    waiting: bool,
}

impl CapWaiter<'_> {
    /// Takes a unit of the cap if this ticket's turn has come: fewer tickets ahead of it
    /// than the cap has room. `true` once admitted (it then holds the unit and has left
    /// the queue); `false` to try again after a release.
    pub fn try_admit(&mut self) -> bool {
        if !self.waiting {
            return true;
        }
        let shm = self.shm;
        let ahead = self
            .ticket
            .saturating_sub(shm.queue(self.cap).left.load(Ordering::SeqCst));
        if ahead >= shm.room(self.cap) {
            return false;
        }
        let taken = match self.cap {
            Cap::Concurrency => shm.take_unit(self.worker),
            Cap::Prefill => shm.take_prefill_unit(),
        };
        if taken {
            self.leave();
        }
        taken
    }

    /// Leaves the queue: the ticket counts as gone, then no longer as this worker's
    /// (a kill in between gives up one place too many, which only lets one waiter in
    /// a turn early; the cap itself is never exceeded).
    fn leave(&mut self) {
        self.waiting = false;
        self.shm.queue(self.cap).left.fetch_add(1, Ordering::SeqCst);
        if let Some(queued) = self.shm.queued_by(self.cap, self.worker) {
            queued.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for CapWaiter<'_> {
    fn drop(&mut self) {
        if self.waiting {
            self.leave();
            // Those behind it moved up a place: one may be in turn now.
            self.shm.wake_if_waiting(self.cap);
        }
    }
}

/// A mapping of the shared block, owned by one process.
#[derive(Debug)]
pub struct SharedRegion {
    ptr: NonNull<ShmLayout>,
}

// SAFETY: the mapping is only accessed through `&ShmLayout`, whose fields are all atomics.
unsafe impl Send for SharedRegion {}
// SAFETY: as above; atomics make shared access from several threads sound.
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    /// Creates a new zeroed block; returns the mapping and the fd to hand to workers.
    pub fn create() -> Result<(Self, OwnedFd), ShmError> {
        let fd =
            nix::sys::memfd::memfd_create(c"llmsurge-shm", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .map_err(|source| ShmError::Sys {
                    op: "memfd_create",
                    source,
                })?;
        nix::unistd::ftruncate(&fd, SHM_SIZE as i64).map_err(|source| ShmError::Sys {
            op: "ftruncate",
            source,
        })?;
        let region = Self::map(&fd)?;
        Ok((region, fd))
    }

    /// Maps a block created by the coordinator and validates its header.
    pub fn open(fd: &OwnedFd) -> Result<Self, ShmError> {
        let stat = nix::sys::stat::fstat(fd).map_err(|source| ShmError::Sys {
            op: "fstat",
            source,
        })?;
        let actual = usize::try_from(stat.st_size).unwrap_or(0);
        if actual < SHM_SIZE {
            return Err(ShmError::TooSmall {
                actual,
                expected: SHM_SIZE,
            });
        }
        let region = Self::map(fd)?;
        region.validate()?;
        Ok(region)
    }

    fn map(fd: impl AsFd) -> Result<Self, ShmError> {
        let len = NonZeroUsize::new(SHM_SIZE).ok_or(ShmError::TooSmall {
            actual: 0,
            expected: 1,
        })?;
        // SAFETY: a fresh shared mapping of a file we sized to at least SHM_SIZE; no
        // existing memory is aliased. The kernel zero-fills it, and zero is a valid value
        // for every atomic in the layout. mmap returns page-aligned memory, which satisfies
        // the layout's 64-byte alignment.
        let ptr = unsafe {
            nix::sys::mman::mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                0,
            )
        }
        .map_err(|source| ShmError::Sys { op: "mmap", source })?;
        Ok(Self { ptr: ptr.cast() })
    }
}

impl std::ops::Deref for SharedRegion {
    type Target = ShmLayout;

    fn deref(&self) -> &ShmLayout {
        // SAFETY: `ptr` is a live mapping of SHM_SIZE bytes, aligned, valid for the
        // lifetime of `self`, and only ever accessed through atomics.
        unsafe { self.ptr.as_ref() }
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `map`; no reference outlives
        // `self` because they all borrow from it.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast::<c_void>(), SHM_SIZE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// Golden layout: changing any of these is a wire change and needs a version bump.
    #[test]
    fn layout_is_pinned() {
        assert_eq!(SHM_MAGIC, 0x4547_5255_534d_4c4c);
        assert_eq!(SHM_LAYOUT_VERSION, 4);
        assert_eq!(offset_of!(ShmLayout, magic), 0);
        assert_eq!(offset_of!(ShmLayout, layout_version), 8);
        assert_eq!(offset_of!(ShmLayout, worker_count), 12);
        assert_eq!(offset_of!(ShmLayout, stop), 16);
        assert_eq!(offset_of!(ShmLayout, next_slot), 24);
        assert_eq!(offset_of!(ShmLayout, slot_limit), 32);
        assert_eq!(offset_of!(ShmLayout, unused_in_flight), 40);
        assert_eq!(offset_of!(ShmLayout, concurrency_cap), 48);
        assert_eq!(offset_of!(ShmLayout, slots_returned), 56);
        assert_eq!(offset_of!(ShmLayout, next_session), 64);
        assert_eq!(offset_of!(ShmLayout, prefill_cap), 72);
        assert_eq!(offset_of!(ShmLayout, prefill_in_flight), 80);
        assert_eq!(offset_of!(ShmLayout, concurrency_queue), 88);
        assert_eq!(offset_of!(ShmLayout, prefill_queue), 104);
        assert_eq!(offset_of!(ShmLayout, release_epoch), 120);
        assert_eq!(offset_of!(ShmLayout, worker_in_flight), 128);
        assert_eq!(offset_of!(ShmLayout, worker_started), 128 + 8 * MAX_WORKERS);
        assert_eq!(offset_of!(ShmLayout, worker_queued), 128 + 16 * MAX_WORKERS);
        assert_eq!(
            offset_of!(ShmLayout, worker_prefill_queued),
            128 + 24 * MAX_WORKERS
        );
        assert_eq!(SHM_SIZE, 128 + 32 * MAX_WORKERS);
    }

    fn region(workers: u32, limit: u64, cap: u64) -> SharedRegion {
        let (region, _fd) = SharedRegion::create().expect("memfd");
        region.init(workers, limit, cap);
        region
    }

    #[test]
    fn the_prefill_cap_holds_and_gives_back() {
        let r = region(2, 10, UNLIMITED);
        assert!(
            (0..100).all(|_| r.try_acquire_prefill()),
            "no cap: always room"
        );
        r.set_prefill_cap(2);
        assert!(r.try_acquire_prefill() && r.try_acquire_prefill());
        assert!(!r.try_acquire_prefill());
        r.release_prefill();
        assert!(r.try_acquire_prefill());
        assert!(!r.try_acquire_prefill());
    }

    /// Cap 1: a request that comes while another waits queues behind it, even when
    /// the unit is free; the queue admits by ticket; a place given up (a waiter
    /// dropped, a dead worker's) holds nobody up.
    #[test]
    fn the_queue_admits_by_ticket_and_a_place_given_up_holds_nobody_up() {
        for cap in [Cap::Concurrency, Cap::Prefill] {
            let r = region(3, UNLIMITED, 1);
            r.set_prefill_cap(1);
            let take = |w: u32| match cap {
                Cap::Concurrency => r.try_acquire(w),
                Cap::Prefill => r.try_acquire_prefill(),
            };
            let give = |w: u32| match cap {
                Cap::Concurrency => r.release(w),
                Cap::Prefill => r.release_prefill(),
            };
            assert!(take(0), "{cap:?}: room and nobody waiting");
            assert!(!take(1), "{cap:?}: full");
            let mut first = r.join_queue(cap, 1);
            let mut second = r.join_queue(cap, 2);
            assert!(!first.try_admit() && !second.try_admit(), "{cap:?}: full");
            give(0);
            assert!(!second.try_admit(), "{cap:?}: the first ticket goes first");
            assert!(!take(0), "{cap:?}: a newcomer does not pass the queue");
            assert!(first.try_admit(), "{cap:?}: its turn");
            assert!(!second.try_admit(), "{cap:?}: full again");
            give(1);
            // A third waits behind the second; the second gives its place up.
            let mut third = r.join_queue(cap, 0);
            assert!(!third.try_admit(), "{cap:?}: the second is ahead");
            drop(second);
            assert!(
                third.try_admit(),
                "{cap:?}: a dropped place holds nobody up"
            );
            give(0);
            // A worker that dies waiting: its place goes with it.
            std::mem::forget(r.join_queue(cap, 2));
            let mut fourth = r.join_queue(cap, 0);
            assert!(!fourth.try_admit(), "{cap:?}: worker 2 is ahead");
            r.reclaim_worker(2);
            assert!(
                fourth.try_admit(),
                "{cap:?}: a dead worker's place is given up"
            );
            give(0);
            assert!(take(1), "{cap:?}: the queue is empty again");
        }
    }

    /// A unit given back while a request waits wakes a thread asleep on the release
    /// futex (long before its timeout); one given back with nobody waiting costs no
    /// wake-up (the epoch stays).
    #[test]
    fn a_release_wakes_the_sleepers_only_while_someone_waits() {
        for cap in [Cap::Concurrency, Cap::Prefill] {
            let r = region(2, UNLIMITED, 1);
            r.set_prefill_cap(1);
            let (take, give): (&dyn Fn() -> bool, &dyn Fn()) = match cap {
                Cap::Concurrency => (&|| r.try_acquire(0), &|| r.release(0)),
                Cap::Prefill => (&|| r.try_acquire_prefill(), &|| r.release_prefill()),
            };
            assert!(take());
            let quiet = r.release_epoch();
            give();
            assert_eq!(r.release_epoch(), quiet, "{cap:?}: nobody waited");
            assert!(take());
            let place = r.join_queue(cap, 1);
            let seen = r.release_epoch();
            std::thread::scope(|s| {
                let (tx, rx) = std::sync::mpsc::channel();
                let r = &r;
                let sleeper = s.spawn(move || {
                    tx.send(nix::unistd::gettid()).expect("send");
                    let began = std::time::Instant::now();
                    r.wait_for_release(seen, std::time::Duration::from_secs(20));
                    began.elapsed()
                });
                // Asleep (in the futex: nothing else blocks it) before the release, so
                // only the wake-up can end its sleep early.
                let tid = rx.recv().expect("the sleeper's id");
                let stat = format!("/proc/self/task/{tid}/stat");
                while !std::fs::read_to_string(&stat)
                    .is_ok_and(|st| st.rsplit(')').next().is_some_and(|t| t.starts_with(" S")))
                {
                    std::thread::yield_now();
                }
                give();
                let slept = sleeper.join().expect("sleeper");
                assert!(
                    slept < std::time::Duration::from_secs(10),
                    "{cap:?}: the sleeper slept {slept:?}: never woken"
                );
            });
            assert_ne!(r.release_epoch(), seen, "{cap:?}");
            drop(place);
        }
    }

    /// `threads` threads each take `rounds` tickets of `cap`'s queue (capped at `k`),
    /// spin until admitted, then give the unit back: never more than `k` inside, and
    /// every ticket admitted (none wedged). Returns the tickets in the order they were
    /// admitted.
    fn contend(cap: Cap, k: u64, threads: u32, rounds: usize) -> Vec<u64> {
        use std::sync::Mutex;
        use std::sync::atomic::AtomicU64;
        let r = region(threads, UNLIMITED, k);
        r.set_prefill_cap(k);
        let inside = AtomicU64::new(0);
        let admitted = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for w in 0..threads {
                let (r, inside, admitted) = (&r, &inside, &admitted);
                s.spawn(move || {
                    for _ in 0..rounds {
                        let mut place = r.join_queue(cap, w);
                        let ticket = place.ticket;
                        while !place.try_admit() {
                            std::thread::yield_now();
                        }
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now <= k, "{now} inside a cap of {k}");
                        admitted.lock().expect("lock").push(ticket);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        match cap {
                            Cap::Concurrency => r.release(w),
                            Cap::Prefill => r.release_prefill(),
                        }
                    }
                });
            }
        });
        let order = admitted.into_inner().expect("lock");
        assert_eq!(order.len(), threads as usize * rounds);
        order
    }

    /// A cap of 1 admits in ticket order exactly. Under a cap of k a ticket may pass
    /// one ahead of it that is slow to try (a thread descheduled, a worker between two
    /// polls) only while a unit stays free for it: never more than k inside.
    #[test]
    fn the_queue_is_first_come_first_served_across_threads() {
        for cap in [Cap::Concurrency, Cap::Prefill] {
            let order = contend(cap, 1, 4, 500);
            assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "{cap:?} cap 1: admitted out of ticket order"
            );
            contend(cap, 3, 4, 500);
        }
    }

    #[test]
    fn a_second_mapping_sees_the_same_memory() {
        let (a, fd) = SharedRegion::create().expect("memfd");
        a.init(2, 10, UNLIMITED);
        let b = SharedRegion::open(&fd).expect("open");
        b.count_started(1);
        assert_eq!(a.worker_started(1), 1);
        assert_eq!(a.started(), 1);
        assert_eq!(b.claim_slot(), Some(0));
        assert_eq!(a.claim_slot(), Some(1));
        b.request_stop(stop_flags::STOP_QUEUING);
        assert!(a.queuing_stopped());
        assert!(!a.cancel_requested());
    }

    #[test]
    fn open_rejects_a_foreign_block() {
        let fd =
            nix::sys::memfd::memfd_create(c"x", nix::sys::memfd::MFdFlags::empty()).expect("memfd");
        nix::unistd::ftruncate(&fd, SHM_SIZE as i64).expect("ftruncate");
        assert!(matches!(
            SharedRegion::open(&fd),
            Err(ShmError::BadMagic(0))
        ));
        let small =
            nix::sys::memfd::memfd_create(c"y", nix::sys::memfd::MFdFlags::empty()).expect("memfd");
        assert!(matches!(
            SharedRegion::open(&small),
            Err(ShmError::TooSmall { .. })
        ));
    }

    #[test]
    fn slots_are_handed_out_once_up_to_the_limit() {
        let r = region(1, 5, UNLIMITED);
        let slots: Vec<u64> = std::iter::from_fn(|| r.claim_slot()).collect();
        assert_eq!(slots, vec![0, 1, 2, 3, 4]);
        assert_eq!(r.slots_claimed(), 5);
        assert!(r.slots_exhausted());
        r.limit_slots(100);
        assert_eq!(r.claim_slot(), None, "the limit is never raised");
    }

    #[test]
    fn slots_are_unique_across_threads() {
        let r = std::sync::Arc::new(region(4, 40_000, UNLIMITED));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    std::iter::from_fn(|| r.claim_slot()).collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..40_000).collect::<Vec<_>>());
    }

    #[test]
    fn the_cap_bounds_in_flight_and_a_dead_worker_gives_back() {
        let r = region(2, UNLIMITED, 3);
        assert!(r.try_acquire(0));
        assert!(r.try_acquire(1));
        assert!(r.try_acquire(1));
        assert!(!r.try_acquire(0), "cap of 3 reached");
        assert_eq!(r.reclaim_worker(1), 2);
        assert_eq!(r.in_flight(), 1);
        assert!(r.try_acquire(0));
        r.release(0);
        r.release(0);
        assert_eq!(r.in_flight(), 0);
    }

    /// A worker SIGKILLed at a random instant of a tight acquire/release loop (a forked
    /// child on the same mapping), 100 times per cap: each time, reclaiming its units leaves the
    /// group's count exactly at what the live worker holds, and nobody waiting in the
    /// queue. With two counters changed in two steps, a kill between them leaked a unit.
    #[test]
    fn a_worker_killed_in_the_middle_of_acquire_or_release_leaks_no_unit() {
        use nix::sys::signal::{Signal, kill};
        use nix::sys::wait::waitpid;
        use nix::unistd::{ForkResult, fork};
        for cap in [4, UNLIMITED] {
            let r = region(2, UNLIMITED, cap);
            assert!(r.try_acquire(0), "the live worker holds one unit");
            for round in 0..100u64 {
                let before = r.worker_started(1);
                // SAFETY: the child only loops over atomics of the shared mapping until
                // it is killed: no allocation, no lock, no return into the test harness.
                match unsafe { fork() }.expect("fork") {
                    ForkResult::Child => loop {
                        r.count_started(1);
                        if r.try_acquire(1) {
                            r.release(1);
                        }
                        // And through the queue, to die holding a place in it.
                        let mut place = r.join_queue(Cap::Concurrency, 1);
                        if place.try_admit() {
                            r.release(1);
                        }
                    },
                    ForkResult::Parent { child } => {
                        // Running: then killed a varying while later.
                        while r.worker_started(1) < before + 100 {
                            std::hint::spin_loop();
                        }
                        let spins = (round * 7919) % 20_000;
                        for _ in 0..spins {
                            std::hint::spin_loop();
                        }
                        kill(child, Signal::SIGKILL).expect("kill");
                        waitpid(child, None).expect("wait");
                    }
                }
                r.reclaim_worker(1);
                assert_eq!(r.in_flight(), 1, "cap {cap}, round {round}: a unit leaked");
                assert!(
                    !r.someone_waits(Cap::Concurrency),
                    "cap {cap}, round {round}: a dead worker's place wedged the queue"
                );
            }
        }
    }

    #[test]
    fn cancel_implies_stop_queuing() {
        let r = region(1, UNLIMITED, UNLIMITED);
        assert!(!r.slots_exhausted());
        r.request_stop(stop_flags::CANCEL_IN_FLIGHT);
        assert!(r.queuing_stopped());
        assert!(r.slots_exhausted());
        assert_eq!(r.claim_slot(), None);
    }
}
