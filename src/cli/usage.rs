//! The usage error every command and resolver returns, and its one-line report: a module
//! of its own, below `cli` and each of its children, so that none of them reaches back
//! up to `cli` for it.

use crate::exit_codes;

/// A bad flag, variable or input: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Prints an error on one line, with where a flag it names got its value when not from
/// the command line, and returns the usage exit code. A URL the message quotes loses
/// its user, password and query values.
pub fn usage_error(message: &str) -> i32 {
    // A flag the message names may have its value from a variable or a scenario the
    // user does not know is set: say which, and how to drop it.
    let sources = super::origin::sources_named_in(message);
    crate::stdout::eprintln(&format!(
        "error: {}",
        llmsurge_proto::Redaction::default().text(&format!("{message}{sources}"))
    ));
    exit_codes::USAGE
}
