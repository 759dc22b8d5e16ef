//! `benchmark run` flags: one load split over several client hosts.

use crate::cli::shard::{parse_count, parse_shard, parse_start_at};
use crate::cli::values::parse_duration;
use clap::Args;
use llmsurge_proto::Shard;
use std::time::Duration;

/// One load split over several client hosts (see docs/multi-host.md).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Multi-host")]
pub struct MultiHostArgs {
    /// Run shard K of N client hosts, K from 1 (1/3, 2/3, 3/3; 1/1 is the whole load):
    /// slot i of the single-host schedule belongs to shard (i mod N) + 1, so the N shards together send exactly the single host's requests
    /// (same prompts, same arrival times). Streams, --max-requests and --max-concurrency
    /// are split so the shares add up (N ≤ 1024). Not for synchronous, sweep or capacity.
    #[arg(long, env = "LLMSURGE_SHARD", value_parser = parse_shard, value_name = "K/N", conflicts_with = "shards")]
    pub shard: Option<Shard>,

    /// Split the load over N hosts and take K from JOB_COMPLETION_INDEX (set by a
    /// Kubernetes Indexed Job), so every pod runs the same command.
    #[arg(long, env = "LLMSURGE_SHARDS", value_parser = parse_count, value_name = "N")]
    pub shards: Option<u32>,

    /// Start the first benchmark at this wall-clock instant (RFC 3339, e.g.
    /// 2026-11-25T10:00:00Z, or Unix seconds), so every shard starts together. At most
    /// 1s in the past and 24h ahead; later benchmarks start when ready.
    #[arg(long, env = "LLMSURGE_START_AT", value_parser = parse_start_at, value_name = "INSTANT")]
    pub start_at: Option<f64>,

    /// Before the first benchmark, retry the target check (/health, /v1/models) with
    /// backoff for up to this long while the server starts (default: check once).
    #[arg(long, env = "LLMSURGE_READY_TIMEOUT", value_parser = parse_duration, value_name = "DURATION")]
    pub ready_timeout: Option<Duration>,
}
