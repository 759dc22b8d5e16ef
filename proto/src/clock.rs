//! Monotonic-clock timestamps shared by every process of the host.
//!
//! `CLOCK_MONOTONIC` is one clock for the whole machine, so a timestamp taken in a worker
//! can be compared with one taken in the coordinator without any translation. Wall time
//! is derived once, for the report, from a [`ClockAnchor`].

use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds on `CLOCK_MONOTONIC`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct MonoNanos(pub u64);

impl MonoNanos {
    /// The current instant.
    pub fn now() -> Self {
        // CLOCK_MONOTONIC cannot fail on Linux; fall back to zero rather than panic.
        let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|ts| (ts.tv_sec() as u64) * 1_000_000_000 + ts.tv_nsec() as u64)
            .unwrap_or(0);
        Self(ts)
    }

    /// The span from `earlier` to `self`, or zero when `earlier` is later.
    pub fn since(self, earlier: MonoNanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The same instant as a `std::time::Instant` (for timers that take one).
    pub fn to_instant(self) -> std::time::Instant {
        let (now, base) = (MonoNanos::now(), std::time::Instant::now());
        if self >= now {
            base + self.since(now)
        } else {
            base.checked_sub(now.since(self)).unwrap_or(base)
        }
    }

    /// Signed nanoseconds from `earlier` to `self`.
    pub fn signed_since(self, earlier: MonoNanos) -> i64 {
        (self.0 as i128 - earlier.0 as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

impl std::ops::Add<Duration> for MonoNanos {
    type Output = MonoNanos;

    /// `self + d`, saturating.
    fn add(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}

/// One instant read on both clocks, to convert monotonic timestamps to wall time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockAnchor {
    /// The instant on the monotonic clock.
    pub mono: MonoNanos,
    /// The same instant as nanoseconds since the Unix epoch.
    pub unix_nanos: u64,
}

impl ClockAnchor {
    /// Reads both clocks now: the wall clock between two monotonic reads, keeping the
    /// tightest of a few tries and the middle of its monotonic pair. A thread preempted
    /// between the reads would otherwise shift every converted time by the preemption
    /// (milliseconds on a busy core); the mock's `--truth` file and `requests.jsonl`
    /// come from two such anchors and must agree to microseconds.
    pub fn now() -> Self {
        const TRIES: usize = 8;
        /// A pair this tight is as good as any: stop trying.
        const TIGHT_NANOS: u64 = 2_000;
        let mut best: Option<(u64, Self)> = None;
        for _ in 0..TRIES {
            let before = MonoNanos::now();
            let unix_nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            let after = MonoNanos::now();
            let width = after.0.saturating_sub(before.0);
            let anchor = Self {
                mono: MonoNanos(before.0 + width / 2),
                unix_nanos,
            };
            if best.is_none_or(|(w, _)| width < w) {
                best = Some((width, anchor));
            }
            if width <= TIGHT_NANOS {
                break;
            }
        }
        best.map_or(
            Self {
                mono: MonoNanos::now(),
                unix_nanos: 0,
            },
            |(_, anchor)| anchor,
        )
    }

    /// Converts a monotonic timestamp to seconds since the Unix epoch.
    pub fn unix_seconds(&self, t: MonoNanos) -> f64 {
        let delta = t.signed_since(self.mono);
        (self.unix_nanos as i128 + delta as i128) as f64 / 1e9
    }

    /// The monotonic instant of a wall-clock time in seconds since the Unix epoch
    /// (the inverse of [`unix_seconds`](Self::unix_seconds)), saturating at zero.
    pub fn mono_at_unix_seconds(&self, unix_seconds: f64) -> MonoNanos {
        let target = (unix_seconds * 1e9) as i128;
        let mono = self.mono.0 as i128 + (target - self.unix_nanos as i128);
        MonoNanos(mono.clamp(0, u64::MAX as i128) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_never_goes_back() {
        let a = MonoNanos::now();
        let b = MonoNanos::now();
        assert!(b >= a);
        assert!(a.0 > 0);
    }

    #[test]
    fn arithmetic_saturates() {
        let t = MonoNanos(100);
        assert_eq!(t.since(MonoNanos(150)), Duration::ZERO);
        assert_eq!(t.signed_since(MonoNanos(150)), -50);
        assert_eq!(
            MonoNanos(u64::MAX - 1) + Duration::from_secs(1),
            MonoNanos(u64::MAX)
        );
    }

    #[test]
    fn anchor_converts_to_wall_time() {
        let anchor = ClockAnchor {
            mono: MonoNanos(1_000_000_000),
            unix_nanos: 1_700_000_000_000_000_000,
        };
        let later = MonoNanos(1_500_000_000);
        assert!((anchor.unix_seconds(later) - 1_700_000_000.5).abs() < 1e-6);
        let back = anchor.mono_at_unix_seconds(1_700_000_000.5);
        assert!(back.0.abs_diff(later.0) < 1_000, "{back:?}");
    }
}
