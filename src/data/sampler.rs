//! Which row of a finite dataset each slot uses.
//!
//! Slot `s` falls in epoch `s / rows` at position `s % rows`. Sequential order uses the
//! position as the row; shuffled order permutes each epoch with its own seed, (seed,
//! "data-shuffle", epoch), so a long run does not replay the same order and every
//! worker computes the same mapping without talking to the others. Without
//! oversampling, slots past the first epoch have no row: the dataset is exhausted.

use llmsurge_proto::seed::derive_seed;
use llmsurge_proto::{SamplerKind, Sampling};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// Maps slots to rows; holds one epoch's permutation at a time.
#[derive(Debug)]
pub struct SlotSampler {
    rows: u64,
    sampling: Sampling,
    epoch: Option<(u64, Vec<u32>)>,
}

impl SlotSampler {
    /// A sampler over `rows` rows (at most `u32::MAX`).
    pub fn new(rows: u64, sampling: Sampling) -> Self {
        Self {
            rows,
            sampling,
            epoch: None,
        }
    }

    /// The row of `slot`, or `None` when the dataset is exhausted.
    pub fn row(&mut self, slot: u64) -> Option<u64> {
        if self.rows == 0 {
            return None;
        }
        let (epoch, pos) = (slot / self.rows, slot % self.rows);
        if epoch > 0 && !self.sampling.oversample {
            return None;
        }
        match self.sampling.sampler {
            SamplerKind::Sequential => Some(pos),
            SamplerKind::Shuffle => {
                if self.epoch.as_ref().is_none_or(|(e, _)| *e != epoch) {
                    let n = u32::try_from(self.rows).unwrap_or(u32::MAX);
                    let mut perm: Vec<u32> = (0..n).collect();
                    let mut rng = StdRng::seed_from_u64(derive_seed(
                        self.sampling.seed,
                        "data-shuffle",
                        epoch,
                    ));
                    perm.shuffle(&mut rng);
                    self.epoch = Some((epoch, perm));
                }
                self.epoch
                    .as_ref()
                    .and_then(|(_, p)| p.get(pos as usize))
                    .map(|&r| u64::from(r))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(sampler: SamplerKind, oversample: bool) -> Sampling {
        Sampling {
            sampler,
            seed: 9,
            oversample,
        }
    }

    #[test]
    fn sequential_without_oversampling_ends_after_one_epoch() {
        let mut s = SlotSampler::new(3, sampling(SamplerKind::Sequential, false));
        let rows: Vec<_> = (0..4).map(|slot| s.row(slot)).collect();
        assert_eq!(rows, [Some(0), Some(1), Some(2), None]);
    }

    #[test]
    fn shuffled_epochs_are_permutations_reseeded_per_epoch() {
        let mut s = SlotSampler::new(50, sampling(SamplerKind::Shuffle, true));
        let e0: Vec<u64> = (0..50).map(|i| s.row(i).expect("row")).collect();
        let e1: Vec<u64> = (50..100).map(|i| s.row(i).expect("row")).collect();
        let mut sorted = e0.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        let mut sorted1 = e1.clone();
        sorted1.sort_unstable();
        assert_eq!(sorted1, sorted);
        assert_ne!(e0, e1, "each epoch has its own order");
        assert_ne!(e0, sorted, "shuffled");
        // Deterministic whatever the order of calls (another worker, other slots).
        let mut t = SlotSampler::new(50, sampling(SamplerKind::Shuffle, true));
        assert_eq!(t.row(73), Some(e1[23]));
        assert_eq!(t.row(3), Some(e0[3]));
    }
}
