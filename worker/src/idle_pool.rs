//! The idle connections of the worker's own clients (HTTP/1.1 and h2c): a stack taken
//! from the top, whose connections idle past [`POOL_IDLE`] are closed, not reused.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// An idle connection older than this is closed rather than reused: servers close idle
/// connections on their own keep-alive timeout (uvicorn, so vLLM and SGLang: 5 s), and a
/// request written on one just as it closes is lost (docs/reliability.md).
pub const POOL_IDLE: Duration = Duration::from_secs(4);

/// Idle connections, each with the instant it went idle; shared by the runtime, the
/// pacer thread and draining tasks (or one conversation's own, with
/// `--sticky-connections`). Cloning shares the pool.
#[derive(Debug)]
pub struct IdlePool<C>(Arc<Mutex<Vec<(C, Instant)>>>);

impl<C> Clone for IdlePool<C> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<C> Default for IdlePool<C> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

type Guard<'a, C> = MutexGuard<'a, Vec<(C, Instant)>>;

impl<C> IdlePool<C> {
    /// Idle connections in the pool.
    pub fn idle(&self) -> usize {
        self.0.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Puts a connection back on top. The pool is taken from the top: connections left
    /// at the bottom after a burst would stay open for ever, so those past the idle
    /// bound are closed here.
    pub fn put(&self, conn: C) {
        let stale = match self.0.lock() {
            Ok(mut pool) => {
                let stale = drain_stale(&mut pool);
                pool.push((conn, Instant::now()));
                stale
            }
            Err(_) => return,
        };
        // Closed after the lock is released: each close is a syscall, and the lock is
        // held only for pushes and pops.
        drop(stale);
    }

    /// Closes the idle connections past the bound. Using the pool closes them too; this
    /// closes them while nobody uses it (every user in think time), so no socket is held
    /// that nobody will reuse.
    pub fn close_stale(&self) {
        let stale = match self.0.lock() {
            Ok(mut pool) => drain_stale(&mut pool),
            Err(_) => return,
        };
        drop(stale);
    }

    /// Pops idle connections until `usable` (given one and how long it has been idle)
    /// takes one; the ones it refuses are closed. The check (often a syscall) runs
    /// outside the lock, which is held only for a pop.
    pub fn take(&self, usable: impl FnMut(&mut C, Duration) -> bool) -> Option<C> {
        self.take_with(|pool| pool.lock().ok(), usable)
    }

    /// [`Self::take`] that gives up rather than wait for the lock (the pacer thread).
    pub fn try_take(&self, usable: impl FnMut(&mut C, Duration) -> bool) -> Option<C> {
        self.take_with(|pool| pool.try_lock().ok(), usable)
    }

    fn take_with<'a>(
        &'a self,
        lock: impl Fn(&'a Mutex<Vec<(C, Instant)>>) -> Option<Guard<'a, C>>,
        mut usable: impl FnMut(&mut C, Duration) -> bool,
    ) -> Option<C> {
        loop {
            let (mut conn, since) = lock(&self.0)?.pop()?;
            if usable(&mut conn, since.elapsed()) {
                return Some(conn);
            }
        }
    }
}

/// Takes the connections idle longer than [`POOL_IDLE`] out of the pool: the bottom of
/// the stack, which is in the order they were put back.
fn drain_stale<C>(pool: &mut Vec<(C, Instant)>) -> Vec<(C, Instant)> {
    let n = pool
        .iter()
        .take_while(|(_, since)| since.elapsed() > POOL_IDLE)
        .count();
    pool.drain(..n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most recent connection is taken first; the ones `usable` refuses are gone.
    #[test]
    fn taken_from_the_top_and_refused_ones_closed() {
        let pool = IdlePool::default();
        for n in 1..=3 {
            pool.put(n);
        }
        assert_eq!(pool.take(|c, _| *c != 3), Some(2));
        assert_eq!(pool.idle(), 1, "3 was refused and closed, 1 is left");
        assert_eq!(pool.try_take(|_, idle| idle <= POOL_IDLE), Some(1));
        assert_eq!(pool.take(|_, _| true), None);
    }
}
