//! The usage error every command and resolver returns, and its one-line report: a module
//! of its own, below `cli` and each of its children, so that none of them reaches back
//! up to `cli` for it.

use crate::exit_codes;

/// A bad flag, variable or input: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Prints an error on one line and returns the usage exit code. A URL the message
/// quotes loses its user, password and query values.
pub fn usage_error(message: &str) -> i32 {
    crate::stdout::eprintln(&format!(
        "error: {}",
        llmsurge_proto::Redaction::default().text(message)
    ));
    exit_codes::USAGE
}
