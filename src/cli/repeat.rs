//! `--repeat`, `--repeat-cooldown` and `--until-precise`: resolved and checked once.

use super::UsageError;
use super::args::{ProfileKind, RunArgs};
use llmsurge_coordinator::precision::PrecisionSpec;
use std::time::Duration;

/// `(repeat, repeat_cooldown, until_precise)` of a run, checked against the rest of it
/// (`stream`: whether responses are streamed).
pub fn resolve_repeat(
    args: &RunArgs,
    stream: bool,
) -> Result<(u32, Option<Duration>, Option<PrecisionSpec>), UsageError> {
    let l = &args.limits;
    if l.repeat > 1 && args.load.profile == ProfileKind::Capacity {
        return Err(UsageError(
            "--repeat: the capacity profile searches its own rate; repeat it as separate runs"
                .into(),
        ));
    }
    // A variable set for a whole CI job must not refuse the runs that do not repeat.
    if l.repeat_cooldown.is_some() && l.repeat < 2 && !l.repeat_cooldown_from_env {
        return Err(UsageError(
            "--repeat-cooldown has no effect without --repeat 2 or more".into(),
        ));
    }
    let precision = l
        .until_precise
        .as_deref()
        .map(PrecisionSpec::parse)
        .transpose()
        .map_err(UsageError)?;
    if let Some(figure) = precision.as_ref().and_then(PrecisionSpec::needs_stream)
        && !stream
    {
        return Err(UsageError(format!(
            "--until-precise: {figure} needs streamed responses (a whole body has no token arrivals); drop it or use --stream true"
        )));
    }
    Ok((l.repeat, l.repeat_cooldown, precision))
}
