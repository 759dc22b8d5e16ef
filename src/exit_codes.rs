//! Process exit codes, in one place so scripts and docs agree (see docs/cli.md).

/// The run finished and every gate passed.
pub const OK: i32 = 0;
/// The run could not be carried out (an internal error or an I/O failure). `sweep serve`:
/// a point failed (its server, or its `benchmark run` without a report).
pub const RUN_FAILED: i32 = 1;
/// Bad usage or bad input: a flag, an environment variable, a file. Nothing was run.
pub const USAGE: i32 = 2;
/// An SLO or a regression gate failed.
pub const GATE_FAILED: i32 = 3;
/// The run is not valid: no request succeeded, the client itself was the bottleneck, or
/// the server was lost mid-run (see `llmsurge_coordinator::validity`). `sweep serve`: no
/// point failed, but a point's run was invalid.
pub const INVALID_RUN: i32 = 4;
/// No gate failed, but an SLO check could not decide: a percentile's confidence bounds
/// straddle its threshold (or too few requests bound it), or a mean, min or max has too
/// few requests. A CI job may rerun longer; the report says about how many more requests
/// would decide.
pub const INCONCLUSIVE: i32 = 5;
/// The run was interrupted (Ctrl-C); the report of what completed was still written.
pub const INTERRUPTED: i32 = 130;
