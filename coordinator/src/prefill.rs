//! `--max-prefill-concurrency`: the time requests waited for the cap's room, kept apart
//! from dispatch lag (a wait the user asked for is not the client's lateness).

use llmsurge_proto::RequestRecord;
use serde::{Deserialize, Serialize};

/// The waits for the prefill cap over a benchmark's measured requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PrefillWaits {
    /// The cap: requests in flight before their first token, at most.
    pub cap: u32,
    /// Measured requests that went through the cap: sent under it, or held by it unsent
    /// when the run stopped.
    pub requests: u64,
    /// Of them, those that waited for room at all.
    pub waited: u64,
    /// Their mean wait, ms (over `requests`).
    pub mean_ms: f64,
    /// The longest wait, ms.
    pub max_ms: f64,
    /// The sum of the waits, s.
    pub total_s: f64,
}

impl PrefillWaits {
    /// Empty waits under `cap`.
    pub fn new(cap: u32) -> Self {
        PrefillWaits {
            cap,
            ..Self::default()
        }
    }

    /// Counts one measured request's wait, if it went through the cap.
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(wait) = r.prefill_wait else {
            return;
        };
        let ms = wait.as_secs_f64() * 1e3;
        self.requests += 1;
        // Below 50 µs is the cost of taking the unit, not a wait.
        if ms > 0.05 {
            self.waited += 1;
        }
        self.total_s += wait.as_secs_f64();
        self.max_ms = self.max_ms.max(ms);
        self.mean_ms = self.total_s * 1e3 / self.requests as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::MonoNanos;
    use std::time::Duration;

    #[test]
    fn waits_add_up() {
        let mut w = PrefillWaits::new(2);
        let r = |ms: u64| RequestRecord {
            prefill_wait: Some(Duration::from_millis(ms)),
            ..RequestRecord::completed(MonoNanos(0), None, MonoNanos(1), 1)
        };
        w.add(&r(0));
        w.add(&r(30));
        w.add(&r(90));
        w.add(&RequestRecord::completed(
            MonoNanos(0),
            None,
            MonoNanos(1),
            1,
        ));
        assert_eq!((w.requests, w.waited), (3, 2));
        assert!((w.mean_ms - 40.0).abs() < 1e-9 && (w.max_ms - 90.0).abs() < 1e-9);
    }
}
