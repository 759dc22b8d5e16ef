//! The group's strategy clock: when slot `i` of a rate-based schedule is due.
//!
//! Every worker computes the same offsets from the same seed, so the schedule is one
//! sequence for the whole group and does not depend on how many workers share it. A
//! worker only claims slots in increasing order, so a cursor makes the cumulative sums of
//! random gaps cheap: each gap is drawn once per worker, from a generator seeded by
//! (run seed, "arrivals", slot).

use llmsurge_proto::Arrivals;
use llmsurge_proto::seed::derive_seed;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Gamma};

/// Offsets of the slots of one arrival process from `t0`.
#[derive(Debug)]
pub struct ArrivalClock {
    arrivals: Arrivals,
    seed: u64,
    gamma: Option<Gamma<f64>>,
    /// The last slot whose offset was computed, and that offset in ns.
    cursor: (u64, u64),
}

impl ArrivalClock {
    /// A clock for `arrivals`, seeded with the run seed. Rates must be positive and
    /// finite, burstiness positive (the coordinator validates both).
    pub fn new(arrivals: Arrivals, seed: u64) -> Self {
        let gamma = match arrivals {
            Arrivals::Poisson { rate, burstiness } => {
                Gamma::new(burstiness, 1.0 / (rate * burstiness)).ok()
            }
            Arrivals::Constant { .. } | Arrivals::Trace { .. } => None,
        };
        Self {
            arrivals,
            seed,
            gamma,
            cursor: (0, 0),
        }
    }

    /// Nanoseconds from `t0` at which `slot` is due. Calls must not go back in slot order
    /// by more than the cursor allows; an earlier slot is recomputed from zero.
    pub fn offset_ns(&mut self, slot: u64) -> u64 {
        match self.arrivals {
            Arrivals::Constant { rate, rampup } => {
                constant_offset(rate, rampup.as_secs_f64(), slot)
            }
            Arrivals::Poisson { rate, .. } => {
                if slot < self.cursor.0 {
                    self.cursor = (0, 0);
                }
                while self.cursor.0 < slot {
                    let next = self.cursor.0 + 1;
                    let gap = self.gap_seconds(next, rate);
                    self.cursor = (next, self.cursor.1.saturating_add((gap * 1e9) as u64));
                }
                self.cursor.1
            }
            // A trace's offsets come with its data (see `scale`); a slot the data does
            // not schedule is due at once.
            Arrivals::Trace { .. } => 0,
        }
    }

    /// When `slot` is due: the data's own offset (a trace's), scaled by the replay's
    /// time scale, or else the arrival process's.
    pub fn due_ns(&mut self, slot: u64, data_offset: Option<u64>) -> u64 {
        match (self.arrivals, data_offset) {
            (
                Arrivals::Trace {
                    starts_per_s: Some(rate),
                    ..
                },
                _,
            ) => constant_offset(rate, 0.0, slot),
            (Arrivals::Trace { time_scale, .. }, Some(at)) => {
                (at as f64 * time_scale).round() as u64
            }
            _ => self.offset_ns(slot),
        }
    }

    fn gap_seconds(&self, slot: u64, rate: f64) -> f64 {
        let mut rng = StdRng::seed_from_u64(derive_seed(self.seed, "arrivals", slot));
        match &self.gamma {
            Some(g) => g.sample(&mut rng),
            None => 1.0 / rate,
        }
    }
}

/// Slot `i` of a constant rate `r` with a linear ramp from 0 to `r` over `R` seconds:
/// during the ramp `i = r t² / (2R)`, so `t = sqrt(2 R i / r)`; after it, `i / r` shifted
/// by the `R / 2` seconds the ramp lost.
fn constant_offset(rate: f64, rampup: f64, slot: u64) -> u64 {
    let i = slot as f64;
    let ramp_slots = rate * rampup / 2.0;
    let t = if rampup > 0.0 && i < ramp_slots {
        (2.0 * rampup * i / rate).sqrt()
    } else if rampup > 0.0 {
        rampup + (i - ramp_slots) / rate
    } else {
        i / rate
    };
    (t * 1e9).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn constant_rate_is_evenly_spaced() {
        let mut c = ArrivalClock::new(
            Arrivals::Constant {
                rate: 50.0,
                rampup: Duration::ZERO,
            },
            1,
        );
        assert_eq!(c.offset_ns(0), 0);
        assert_eq!(c.offset_ns(1), 20_000_000);
        assert_eq!(c.offset_ns(200), 4_000_000_000);
    }

    #[test]
    fn ramp_up_is_continuous_and_ends_at_the_full_rate() {
        let mut c = ArrivalClock::new(
            Arrivals::Constant {
                rate: 10.0,
                rampup: Duration::from_secs(2),
            },
            1,
        );
        // 10 slots fit in the 2 s ramp (area 10 * 2 / 2); slot 10 is due at exactly 2 s.
        assert_eq!(c.offset_ns(10), 2_000_000_000);
        assert_eq!(c.offset_ns(11), 2_100_000_000);
        let gaps: Vec<u64> = (1..10)
            .map(|i| c.offset_ns(i) - c.offset_ns(i - 1))
            .collect();
        assert!(
            gaps.windows(2).all(|w| w[1] <= w[0]),
            "gaps shrink during the ramp: {gaps:?}"
        );
    }

    #[test]
    fn poisson_is_deterministic_and_worker_independent() {
        let arrivals = Arrivals::Poisson {
            rate: 100.0,
            burstiness: 1.0,
        };
        let mut a = ArrivalClock::new(arrivals, 7);
        let all: Vec<u64> = (0..1000).map(|i| a.offset_ns(i)).collect();
        // A worker that only sees every third slot computes the same instants.
        let mut b = ArrivalClock::new(arrivals, 7);
        for i in (0..1000).step_by(3) {
            assert_eq!(b.offset_ns(i), all[i as usize]);
        }
        // About 10 s for 1000 arrivals at 100/s (mean gap 10 ms; 5 sigma ≈ 1.6 s).
        let total = all[999] as f64 / 1e9;
        assert!((8.4..11.6).contains(&total), "{total}");
        let mut other_seed = ArrivalClock::new(arrivals, 8);
        assert_ne!(other_seed.offset_ns(10), all[10]);
    }

    #[test]
    fn lower_burstiness_means_more_variable_gaps() {
        let cv = |burstiness: f64| {
            let mut c = ArrivalClock::new(
                Arrivals::Poisson {
                    rate: 100.0,
                    burstiness,
                },
                3,
            );
            let t: Vec<f64> = (0..5001).map(|i| c.offset_ns(i) as f64).collect();
            let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
            var.sqrt() / mean
        };
        // The coefficient of variation of gamma gaps is 1/sqrt(shape).
        assert!((cv(1.0) - 1.0).abs() < 0.1);
        assert!((cv(0.25) - 2.0).abs() < 0.25);
    }

    mod properties {
        use super::super::ArrivalClock;
        use llmsurge_proto::Arrivals;
        use proptest::prelude::*;
        use std::time::Duration;

        const SLOTS: u64 = 2_000;

        fn offsets(arrivals: Arrivals, seed: u64) -> Vec<u64> {
            let mut c = ArrivalClock::new(arrivals, seed);
            (0..=SLOTS).map(|i| c.offset_ns(i)).collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Constant arrivals never go back in time, and after the ramp (which loses
            /// half its length) slot n is due at n / rate + rampup / 2.
            #[test]
            fn constant_schedules_are_monotonic_at_their_rate(
                rate in 0.5f64..50_000.0,
                rampup_ms in prop_oneof![Just(0u64), 1u64..20_000],
                seed in any::<u64>(),
            ) {
                let rampup = Duration::from_millis(rampup_ms);
                let t = offsets(Arrivals::Constant { rate, rampup }, seed);
                prop_assert!(t.windows(2).all(|w| w[0] <= w[1]));
                let ramp_slots = rate * rampup.as_secs_f64() / 2.0;
                if (SLOTS as f64) > ramp_slots {
                    let expected = SLOTS as f64 / rate + rampup.as_secs_f64() / 2.0;
                    let got = t[SLOTS as usize] as f64 / 1e9;
                    prop_assert!((got - expected).abs() <= 1e-6 * expected.max(1.0), "{got} vs {expected}");
                }
            }

            /// Poisson and gamma arrivals never go back in time, and their mean rate over
            /// 2,000 slots is the configured one within 6 standard deviations (the sum of
            /// n gamma gaps of shape k has a relative deviation of 1 / sqrt(n k)).
            #[test]
            fn poisson_schedules_are_monotonic_at_their_mean_rate(
                rate in 0.5f64..50_000.0,
                burstiness in 0.25f64..8.0,
                seed in any::<u64>(),
            ) {
                let t = offsets(Arrivals::Poisson { rate, burstiness }, seed);
                prop_assert!(t.windows(2).all(|w| w[0] <= w[1]));
                let mean_rate = SLOTS as f64 / (t[SLOTS as usize] as f64 / 1e9);
                let tolerance = 6.0 / (SLOTS as f64 * burstiness).sqrt();
                prop_assert!(
                    (mean_rate / rate - 1.0).abs() < tolerance,
                    "rate {rate}, burstiness {burstiness}: mean {mean_rate}"
                );
            }
        }
    }
}
