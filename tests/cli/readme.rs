//! The README's first commands are what a newcomer runs; CI must run the same test command,
//! so a README that drifts from CI (or loses its test command) fails here.

use std::path::Path;

/// The lines of the README's first fenced code block.
fn first_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md is readable");
    readme
        .split("```")
        .nth(1)
        .expect("README has a fenced code block")
        .lines()
        .skip(1) // the fence's language tag
        .map(|l| l.split(" # ").next().unwrap_or(l).trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn ci_runs_the_readmes_test_command_verbatim() {
    let commands = first_commands();
    assert_eq!(commands.len(), 2, "a benchmark and the tests: {commands:?}");
    assert!(commands[0].contains("benchmark run"), "{commands:?}");
    let test = &commands[1];
    assert!(test.contains("cargo nextest run --workspace"), "{test}");
    // A fresh machine may lack the runner: the command itself installs it.
    assert!(test.contains("cargo install cargo-nextest"), "{test}");
    let ci = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run"))
        .expect(".ci/run is readable");
    assert!(
        ci.lines().any(|l| l.trim() == test),
        ".ci/run must run the README's test command verbatim: {test}"
    );
}
