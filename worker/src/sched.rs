//! How the kernel schedules the worker's timing-critical threads (the pacer, the runtime).
//!
//! On a core shared with other work, a thread that wakes up (the pacer at its slot, the
//! runtime when a slot is handed over) may wait for the running thread's slice to end or
//! for its own turn to come round: up to a few milliseconds, all of it dispatch lag.
//! Two remedies, both best effort:
//! - a short slice for normal threads ([`request_short_slice`]): no privilege needed,
//!   the thread's CPU share unchanged; it removes most of the wait on Linux 6.12+;
//! - real time for the pacer while it keeps up with its schedule ([`Realtime`]): a woken
//!   `SCHED_FIFO` thread preempts every normal thread at once. It needs root,
//!   `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` above 0; without them the pacer stays normal.

use nix::libc;
use std::time::Duration;

/// The slice asked for normal threads.
const SHORT_SLICE: Duration = Duration::from_micros(100);
/// The real-time priority of the pacer: the lowest, below any real-time work of the host.
const PACER_PRIORITY: u32 = 1;
/// Set to `0`, `off`, `false` or `no`, the pacer (and the runtime thread waiting for a
/// turn) never goes real-time even where the
/// process may (an A/B in scripts/bench-client.sh; docs/performance.md). Workers inherit
/// it.
pub const REALTIME_ENV: &str = "LLMSURGE_REALTIME_PACER";

/// Whether [`REALTIME_ENV`] turns real time off.
fn realtime_switched_off() -> bool {
    std::env::var(REALTIME_ENV).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "off" | "false" | "no"
        )
    })
}

fn empty_attr() -> libc::sched_attr {
    libc::sched_attr {
        size: size_of::<libc::sched_attr>() as u32,
        sched_policy: 0,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: 0,
        sched_deadline: 0,
        sched_period: 0,
    }
}

/// The calling thread's scheduling attributes.
fn get_attr() -> Option<libc::sched_attr> {
    let mut attr = empty_attr();
    // SAFETY: sched_getattr(2) writes at most `size` bytes into `attr`, which is that
    // large; pid 0 is the calling thread.
    let got = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &raw mut attr,
            attr.size,
            0 as libc::c_uint,
        )
    };
    (got == 0).then_some(attr)
}

/// Sets the calling thread's policy: normal with a short slice, or `SCHED_FIFO`.
fn set_attr(realtime: bool) -> bool {
    let mut attr = empty_attr();
    if realtime {
        attr.sched_policy = libc::SCHED_FIFO as u32;
        attr.sched_priority = PACER_PRIORITY;
        // A thread it spawns meanwhile (tokio's blocking pool) starts normal.
        attr.sched_flags = libc::SCHED_FLAG_RESET_ON_FORK as u64;
    } else {
        attr.sched_policy = libc::SCHED_OTHER as u32;
        attr.sched_runtime = SHORT_SLICE.as_nanos() as u64;
    }
    // SAFETY: sched_setattr(2) only reads `attr`, a valid, initialised sched_attr.
    let set = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0,
            &raw const attr,
            0 as libc::c_uint,
        )
    };
    set == 0
}

/// Whether the calling thread runs `SCHED_FIFO` (tests: a thread left real-time).
#[cfg(test)]
pub(crate) fn is_realtime() -> bool {
    get_attr().is_some_and(|a| a.sched_policy == libc::SCHED_FIFO as u32)
}

/// Whether the calling thread runs with the normal policy (one the user chose with
/// `chrt` stays as it is).
fn is_normal() -> bool {
    get_attr().is_some_and(|a| a.sched_policy == libc::SCHED_OTHER as u32)
}

/// Asks the kernel for short scheduler slices for the calling thread.
///
/// Since Linux 6.12 a normal thread may ask for a shorter slice (`sched_attr.sched_runtime`,
/// 100 µs to 100 ms), and a woken thread with a shorter slice preempts sooner. Older
/// kernels ignore the field; a failure changes nothing.
pub fn request_short_slice() {
    if is_normal() {
        let _ = set_attr(false);
    }
}

/// The pacer's real-time scheduling: real-time while it waits for a slot it is ahead of
/// and sends it, so its wake-up at the slot preempts whatever holds the core; normal while
/// it prepares the next request (a body of megabytes of images must not hold the core
/// from the runtime thread reading responses), while it runs behind
/// (its next slot already due: no wake-up to keep) or its slots come too close together
/// (the pacer decides), so it can never starve the core.
/// Only the changes cost a syscall.
#[derive(Debug)]
pub struct Realtime {
    allowed: bool,
    raised: bool,
}

impl Realtime {
    /// Sets the calling thread up: a short slice, and whether it may go real-time (tried
    /// once; a thread the user already made real-time is left alone).
    pub fn for_this_thread() -> Self {
        if !is_normal() {
            return Self {
                allowed: false,
                raised: false,
            };
        }
        let allowed = !realtime_switched_off() && set_attr(true);
        let _ = set_attr(false);
        Self {
            allowed,
            raised: false,
        }
    }

    /// Whether the thread may go real-time.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// Makes the thread real-time (if allowed) while `ahead`, normal otherwise.
    pub fn keep_up(&mut self, ahead: bool) {
        if self.allowed && ahead != self.raised && set_attr(ahead) {
            self.raised = ahead;
        }
    }
}

/// Whether this process's pacer threads may run real-time (probed on a throwaway thread;
/// workers inherit the process's privileges, limits and [`REALTIME_ENV`]).
pub fn realtime_allowed() -> bool {
    std::thread::Builder::new()
        .name("llmsurge-rt-probe".into())
        .spawn(|| Realtime::for_this_thread().allowed())
        .ok()
        .and_then(|t| t.join().ok())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pacer_behind_its_schedule_is_a_normal_thread() {
        std::thread::spawn(|| {
            let mut rt = Realtime::for_this_thread();
            assert!(is_normal(), "normal until it is ahead of a slot");
            rt.keep_up(true);
            if rt.allowed() {
                assert_eq!(
                    get_attr().map(|a| a.sched_policy),
                    Some(libc::SCHED_FIFO as u32)
                );
            }
            rt.keep_up(false);
            assert!(is_normal(), "behind: normal again");
        })
        .join()
        .expect("thread");
    }
}
