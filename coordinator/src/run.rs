//! Running a whole profile: one benchmark after another until the profile is done or
//! the user interrupts.

use crate::error::CoordinatorError;
use crate::group::{RunEnv, run_benchmark};
use crate::interrupts::Interrupts;
use crate::observer::RunObserver;
pub use crate::profiles::Profile;
use crate::result::BenchmarkResult;
use crate::spawn::WorkerCommand;
use llmsurge_proto::ClockAnchor;

/// What a run produced.
#[derive(Debug)]
pub struct RunOutcome {
    /// Every benchmark that ran, the interrupted one included.
    pub benchmarks: Vec<BenchmarkResult>,
    /// The user interrupted the run.
    pub interrupted: bool,
    /// The profile had more benchmarks, not run: the server was lost in the last one.
    pub stopped_by_lost_server: bool,
    /// Wall-clock anchor of the run.
    pub anchor: ClockAnchor,
}

/// Runs the profile's benchmarks one after another until it is done or interrupted, or
/// until one found the server lost: the later ones would measure only its absence (a
/// sweep's rates, a search's probes, each a run of errors), and the run is invalid
/// whatever they find.
/// `start_at` (Unix seconds, `--start-at`) is the wall-clock instant the first
/// benchmark's t0 waits for; later ones start as soon as their workers are ready.
/// `answered_before` is an earlier run's latest success (`--repeat`): a
/// server that died since then is lost in the first benchmark, as between two
/// benchmarks of this run.
pub async fn run_profile(
    command: &WorkerCommand,
    profile: &mut dyn Profile,
    observer: &mut dyn RunObserver,
    start_at: Option<f64>,
    answered_before: Option<crate::error_tail::Answered>,
) -> Result<RunOutcome, CoordinatorError> {
    let anchor = ClockAnchor::now();
    let mut start_at = start_at.map(|s| anchor.mono_at_unix_seconds(s));
    let mut interrupts = Interrupts::install()?;
    let mut benchmarks: Vec<BenchmarkResult> = Vec::new();
    let mut stopped_by_lost_server = false;
    while let Some(plan) = profile.next(&benchmarks)? {
        // Asked after `next`, so a search reads the probe that lost the server first.
        if benchmarks.last().is_some_and(|b| b.server_lost.is_some()) {
            stopped_by_lost_server = true;
            break;
        }
        let mut env = RunEnv {
            command,
            anchor: &anchor,
            interrupts: &mut interrupts,
            observer: &mut *observer,
            start_at: start_at.take(),
            answered_before: benchmarks.last().map_or(answered_before, |b| b.answered),
        };
        let result = match run_benchmark(&plan, &mut env).await {
            Ok(r) => r,
            Err(CoordinatorError::Interrupted) => break,
            Err(e) => return Err(e),
        };
        observer.benchmark_finished(&result);
        benchmarks.push(result);
        if interrupts.interrupted() {
            break;
        }
    }
    profile.annotate(&mut benchmarks);
    Ok(RunOutcome {
        benchmarks,
        interrupted: interrupts.interrupted(),
        stopped_by_lost_server,
        anchor,
    })
}
