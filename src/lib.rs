//! llmsurge: a load generator and benchmark for OpenAI-compatible LLM inference servers.
//!
//! Theory of operation: the binary is the coordinator. It parses and resolves the
//! configuration (`cli`), resolves the target, and hands a validated plan to
//! `llmsurge-coordinator`, which spawns worker processes (this same executable, through
//! a hidden subcommand that lands in `llmsurge-worker`). This crate also owns the data
//! pipeline, the reports, and the built-in mock OpenAI server (`mock`), which is both a
//! product feature and the server every end-to-end test runs against.

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
pub mod target;
