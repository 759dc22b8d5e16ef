//! The servers of the two runs: `benchmark compare` refuses to judge runs whose servers
//! differ in a gated field ([`fingerprint::GATED`]: the model, the engine and its version,
//! the cache configuration) unless `--allow-server-change` names it; a field known on one
//! side only, a difference in another field, and a warm candidate against a cold
//! baseline are warnings.

use crate::report::Report;
use llmsurge_coordinator::server_metrics::fingerprint::{self, Change, ChangeKind};
use serde::Serialize;

/// What the gate found about the two servers.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerCheck {
    /// Every field that differs, gated or not.
    pub changes: Vec<Change>,
    /// The gated fields `--allow-server-change` allows to differ (`all` for every one).
    pub allowed: Vec<String>,
}

impl ServerCheck {
    /// The gated changes not allowed: each fails the gate.
    pub fn failing(&self) -> Vec<&Change> {
        self.changes
            .iter()
            .filter(|c| c.kind == ChangeKind::Changed && c.gated && !self.allows(&c.field))
            .collect()
    }

    fn allows(&self, field: &str) -> bool {
        self.allowed.iter().any(|a| a == "all" || a == field)
    }

    /// One line per failing change, naming the field, both values and the flag.
    pub fn failure_lines(&self) -> Vec<String> {
        self.failing()
            .into_iter()
            .map(|c| {
                let (was, is) = (
                    c.baseline.as_deref().unwrap_or("unknown"),
                    c.candidate.as_deref().unwrap_or("unknown"),
                );
                match &c.during {
                    Some(run) => format!(
                        "the server changed during the {run} run: {was} before its load, {is} after, in {}; --allow-server-change {} compares it anyway",
                        c.field, c.field
                    ),
                    None => format!(
                        "the server changed: {was} (baseline) vs {is} (current) in {}; --allow-server-change {} compares them anyway",
                        c.field, c.field
                    ),
                }
            })
            .collect()
    }

    /// Warnings: fields known on one side only, ungated differences, and (`allowed`)
    /// the gated changes `--allow-server-change` allowed.
    pub fn warnings(&self, allowed: bool) -> Vec<String> {
        self.changes
            .iter()
            .filter(|c| {
                let gated = c.kind == ChangeKind::Changed && c.gated;
                if allowed {
                    gated && self.allows(&c.field)
                } else {
                    !gated
                }
            })
            .map(|c| match c.kind {
                ChangeKind::Unknown => format!(
                    "server {} is unknown on one side ({}), so the gate could not check it",
                    c.field,
                    c.describe()
                ),
                ChangeKind::Changed if c.gated => match &c.during {
                    Some(run) => format!(
                        "the server changed during the {run} run, allowed by --allow-server-change: {} (before its load → after it)",
                        c.describe()
                    ),
                    None => format!(
                        "the server changed, allowed by --allow-server-change: {}",
                        c.describe()
                    ),
                },
                ChangeKind::Changed => format!("the server differs in {}", c.describe()),
            })
            .collect()
    }
}

/// Checks `--allow-server-change` values: gated field names or `all`.
pub fn check_allowed(values: &[String]) -> Result<Vec<String>, String> {
    values
        .iter()
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .map(|v| {
            if v == "all" || fingerprint::GATED.contains(&v) {
                Ok(v.to_string())
            } else {
                Err(format!(
                    "--allow-server-change: unknown field {v:?} (fields: {}, or all)",
                    fingerprint::GATED.join(", ")
                ))
            }
        })
        .collect()
}

/// The two reports' servers compared, and the warnings that go with them (a report
/// without a fingerprint, a warm candidate against a cold baseline).
pub fn check(base: &Report, cur: &Report) -> (ServerCheck, Vec<String>) {
    match (&base.server_fingerprint, &cur.server_fingerprint) {
        (Some(b), Some(c)) => {
            let mut changes = fingerprint::changes(b, c);
            // A run that measured two servers (one changed or restarted under its load)
            // is no side of a comparison either.
            let mut warnings = Vec::new();
            for (run, fp) in [("baseline", b), ("current", c)] {
                changes.extend(fp.changed_during().into_iter().map(|mut ch| {
                    ch.during = Some(run.to_string());
                    ch
                }));
                warnings.extend(
                    fp.warnings
                        .iter()
                        .filter(|w| w.contains("restarted"))
                        .map(|w| format!("the {run} run: {w}")),
                );
            }
            let check = ServerCheck {
                changes,
                allowed: Vec::new(),
            };
            warnings.splice(0..0, check.warnings(false));
            warnings.extend(fingerprint::warm_warning(b, c));
            (check, warnings)
        }
        (None, None) => (
            ServerCheck::default(),
            vec!["neither report has a server fingerprint (both written before llmsurge recorded one), so the gate could not check that both runs measured the same server".into()],
        ),
        (b, _) => {
            let side = if b.is_none() {
                "baseline"
            } else {
                "current report"
            };
            (
                ServerCheck::default(),
                vec![format!(
                    "the {side} has no server fingerprint (written before llmsurge recorded one), so the gate could not check that both runs measured the same server"
                )],
            )
        }
    }
}
