//! `benchmark run` flags: the load pattern.

use super::ProfileKind;
use crate::cli::values::parse_fraction;
use crate::cli::values::{RateList, parse_duration, parse_rates};
use clap::Args;
use std::time::Duration;

/// The load pattern.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Load")]
pub struct LoadArgs {
    /// Load profile.
    #[arg(
        long,
        env = "LLMSURGE_PROFILE",
        value_enum,
        default_value = "synchronous",
        help_heading = "Load"
    )]
    pub profile: ProfileKind,

    /// Requests per second (constant, poisson) or streams (concurrent); a comma-separated
    /// list runs one benchmark per value. For sweep: the number of benchmarks (default 10).
    /// With multi-turn sessions (--data turns=…): new sessions per second (constant,
    /// poisson) or concurrent users (concurrent). With agent traces under replay: traces
    /// started per second instead of at their recorded offsets.
    #[arg(long, env = "LLMSURGE_RATE", value_parser = parse_rates, value_name = "RATE[,RATE...]")]
    pub rate: Option<RateList>,

    /// Cap on requests in flight across all workers (throughput: the number of streams,
    /// default 512). A slot that cannot start on time is counted as late.
    #[arg(long, env = "LLMSURGE_MAX_CONCURRENCY", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_concurrency: Option<u64>,

    /// Spread of stream starts (concurrent, throughput) or length of a linear rate ramp
    /// from 0 (constant).
    #[arg(long, env = "LLMSURGE_RAMPUP", value_parser = parse_duration, value_name = "DURATION")]
    pub rampup: Option<Duration>,

    /// Gamma shape of poisson arrivals: 1 is Poisson, below 1 burstier, above 1 smoother.
    #[arg(long, env = "LLMSURGE_BURSTINESS")]
    pub burstiness: Option<f64>,

    /// Worker processes (default: one per core, fewer when the load needs fewer).
    #[arg(long, env = "LLMSURGE_WORKERS", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: Option<u32>,

    /// Seed of every random stream (arrivals, prompts, lengths); the same seed repeats a
    /// run exactly, prompts included (a server's prefix cache then hits them). Default: a
    /// fresh seed per run (with --shard: one derived from --start-at), kept in the
    /// report as args.seed.
    #[arg(long, env = "LLMSURGE_RANDOM_SEED", help_heading = "Load")]
    pub random_seed: Option<u64>,

    /// How the rate benchmarks of a sweep send requests.
    #[arg(long, env = "LLMSURGE_SWEEP_ARRIVALS", value_enum)]
    pub sweep_arrivals: Option<SweepArrivalsArg>,

    /// Replay speed of `--profile replay`: multiplies every trace offset, and every gap
    /// between an agent trace's calls (0.5 replays twice as fast, 2 half as fast;
    /// default 1).
    #[arg(long, env = "LLMSURGE_TIME_SCALE", value_name = "FACTOR")]
    pub time_scale: Option<f64>,

    /// Precision of `--profile capacity`: stop when the passing and failing rates are
    /// this close (a fraction of the rate; default 5%).
    #[arg(long, env = "LLMSURGE_CAPACITY_PRECISION", value_parser = parse_fraction)]
    pub capacity_precision: Option<f64>,
}

/// Arrivals of a sweep's rate benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SweepArrivalsArg {
    /// Evenly spaced (constant rate).
    Constant,
    /// Poisson (gamma with --burstiness).
    Poisson,
}
