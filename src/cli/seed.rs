//! The run seed (`--random-seed`): the one given, or a fresh one per run, so that no two
//! runs send the same prompts unless asked to (a server's prefix cache would otherwise
//! answer the second run from what the first left behind). Each benchmark of a run then
//! derives its own streams from (run seed, benchmark index): see
//! [`llmsurge_proto::WorkerConfig::reseed`]. With `--repeat N`, each run draws its own
//! seed from (run seed, run index) ([`repeat_seed`]), so a later run sends none of an
//! earlier run's prompts, arrivals or picks, and the same run seed still gives the same
//! set of runs.

use llmsurge_proto::Shard;
use llmsurge_proto::seed::derive_seed;

/// The run seed: `given`; else, for a split load, one derived from `--start-at`, which
/// every shard shares (so the shards draw the single host's prompts and arrivals); else
/// a fresh one. A split load with neither is refused by [`check_shard_seed`].
pub fn run_seed(given: Option<u64>, shard: Option<Shard>, start_at: Option<f64>) -> u64 {
    match (given, start_at) {
        (Some(seed), _) => seed,
        (None, Some(at)) if shard.is_some_and(|s| s.is_split()) => {
            derive_seed(at.to_bits(), "start-at", 0)
        }
        _ => fresh_seed(),
    }
}

/// The stream name the runs of `--repeat` derive their seeds under.
pub const REPEAT_STREAM: &str = "repeat";

/// The seed of run `run` (from 0) of `--repeat`: the run seed for the first, so that a
/// single run is unchanged; else one derived from (run seed, run index). A run's
/// [`llmsurge_proto::WorkerConfig`] gets it by `reseed(REPEAT_STREAM, run)`.
pub fn repeat_seed(run_seed: u64, run: u32) -> u64 {
    if run == 0 {
        run_seed
    } else {
        derive_seed(run_seed, REPEAT_STREAM, u64::from(run))
    }
}

/// The seeds of the `repeat` runs of a run seed, in run order.
pub fn repeat_seeds(run_seed: u64, repeat: u32) -> Vec<u64> {
    (0..repeat.max(1))
        .map(|run| repeat_seed(run_seed, run))
        .collect()
}

/// Refuses a split load (`--shard K/N`, N > 1) with no shared seed: each shard would draw
/// its own, and their union would not be the single host's load.
pub fn check_shard_seed(
    given: Option<u64>,
    shard: Shard,
    start_at: Option<f64>,
) -> Result<(), String> {
    if shard.is_split() && given.is_none() && start_at.is_none() {
        return Err(format!(
            "--shard {}/{}: the shards must draw the same prompts and arrivals: pass the same --random-seed to every shard (or a shared --start-at, which seeds them all)",
            shard.index + 1,
            shard.count
        ));
    }
    Ok(())
}

/// A seed no other run is likely to draw: std's per-process random hash keys (from the
/// OS), the time and the process id.
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_seed_wins_and_fresh_seeds_differ() {
        assert_eq!(run_seed(Some(7), None, None), 7);
        assert_ne!(run_seed(None, None, None), run_seed(None, None, None));
    }

    #[test]
    fn each_repeated_run_draws_its_own_seed_and_the_first_keeps_the_run_seed() {
        let seeds = repeat_seeds(42, 4);
        assert_eq!(seeds.len(), 4);
        assert_eq!(seeds[0], 42, "a single run is unchanged");
        let mut distinct = seeds.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "{seeds:?}");
        assert_eq!(
            repeat_seeds(42, 4),
            seeds,
            "the same run seed, the same runs"
        );
        assert_ne!(repeat_seeds(43, 4)[1], seeds[1]);
        assert_eq!(repeat_seeds(42, 1), [42]);
    }

    #[test]
    fn shards_share_the_seed_of_their_start_instant() {
        let shard = |index| Some(Shard { index, count: 3 });
        let at = Some(1_795_600_000.0);
        assert_eq!(run_seed(None, shard(0), at), run_seed(None, shard(2), at));
        assert!(check_shard_seed(None, Shard { index: 1, count: 3 }, at).is_ok());
        let e = check_shard_seed(None, Shard { index: 1, count: 3 }, None).expect_err("no seed");
        assert!(e.starts_with("--shard 2/3: "), "{e}");
        assert!(check_shard_seed(Some(1), Shard { index: 1, count: 3 }, None).is_ok());
        assert!(check_shard_seed(None, Shard::WHOLE, None).is_ok());
    }
}
