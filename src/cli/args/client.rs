//! `benchmark run` flags: the client itself: fidelity checks and failure handling.

use super::WorkerFailureArg;
use crate::cli::values::{parse_duration, parse_fraction, parse_positive_duration};
use clap::Args;
use std::time::Duration;

/// The client itself: fidelity checks and failure handling.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Client")]
pub struct ClientArgs {
    /// Dispatch-lag p99 above this marks the client as the bottleneck (exit code 4).
    #[arg(long, env = "LLMSURGE_MAX_DISPATCH_LAG", value_parser = parse_positive_duration, default_value = "10ms", value_name = "DURATION")]
    pub max_dispatch_lag: Duration,

    /// A share of completed requests ending short of the output length they asked for
    /// (fewer tokens than max_tokens, other than by a tool call) above which the run is
    /// invalid (exit code 4), e.g. 0.05 or 5%: a CI gate that must not pass on a lighter
    /// load than asked. Unset, short outputs only warn.
    #[arg(long, env = "LLMSURGE_MAX_SHORT_OUTPUT_SHARE", value_parser = parse_fraction, value_name = "SHARE")]
    pub max_short_output_share: Option<f64>,

    /// What to do when a worker process dies.
    #[arg(
        long,
        env = "LLMSURGE_ON_WORKER_FAILURE",
        value_enum,
        default_value = "stop",
        help_heading = "Client"
    )]
    pub on_worker_failure: WorkerFailureArg,

    /// After the first Ctrl-C, how long in-flight requests may take to finish before
    /// they are cancelled (a second Ctrl-C cancels at once).
    #[arg(long, env = "LLMSURGE_DRAIN_TIMEOUT", value_parser = parse_duration, default_value = "10s", value_name = "DURATION")]
    pub drain_timeout: Duration,

    /// A worker process silent this long (no report, no heartbeat) is killed as hung (1s or more).
    #[arg(long, env = "LLMSURGE_WORKER_TIMEOUT", value_parser = parse_positive_duration, default_value = "15s", value_name = "DURATION")]
    pub worker_timeout: Duration,
}
