//! llmsurge: a load generator and benchmark for OpenAI-compatible LLM inference servers.
//!
//! Theory of operation: the binary is the coordinator. It parses and resolves the
//! configuration (`cli`), resolves the target, and hands a validated plan to
//! `llmsurge-coordinator`, which spawns worker processes (this same executable, through
//! a hidden subcommand that lands in `llmsurge-worker`). This crate also owns the data
//! pipeline, the reports, and the built-in mock OpenAI server (`mock`), which is both a
//! product feature and the server every end-to-end test runs against. The sweep over
//! server configurations (`sweep`) builds on the CLI: it starts servers and runs
//! `benchmark run` per point.

// Stdout goes through `stdout`, which survives a closed pipe.
#![deny(clippy::print_stdout)]

pub mod cli;
pub mod clock_sync;
pub mod compare;
pub mod data;
pub mod exit_codes;
pub mod mock;
pub mod packed;
pub mod report;
pub mod safe_file;
pub mod stdout;
pub mod sweep;
pub mod target;

/// Runs the command line; returns the process exit code. The CLI runs every command but
/// those of the sweep, which builds on the CLI: the root, the parent of both, runs them.
pub fn main() -> i32 {
    match cli::dispatch() {
        cli::Parsed::Exit(code) => code,
        cli::Parsed::Config => cli::config::print_config(sweep::secrets::command),
        cli::Parsed::ServeGuard(args) => sweep::server::guard_main(&args),
        cli::Parsed::Sweep(command) => match *command {
            cli::SweepCommand::Serve(args) => sweep::sweep_serve(&args),
            cli::SweepCommand::ServeSla(args) => sweep::sla::sweep_serve_sla(&args),
            cli::SweepCommand::Plot(args) => sweep::plot::sweep_plot(&args),
            cli::SweepCommand::PlotPareto(args) => sweep::plot::sweep_plot_pareto(&args),
        },
    }
}
