//! Reports: what a run leaves for people and tools.
//!
//! Theory of operation: [`reporter::RunReporter`] observes a run (progress on stderr,
//! every request's record to `--request-log`, a sample into the JSON) and, after every
//! benchmark, renders the [`Report`] in every requested format ([`outputs`]) and writes
//! each file atomically, so an interrupted or crashed run keeps every benchmark that
//! finished. The [`Report`] is the one source: JSON is its full, re-loadable form
//! ([`json`]); YAML is the same tree; CSV ([`csv`]) is one row per benchmark; HTML
//! ([`html`]) is a self-contained page with charts; the console ([`console`]) prints
//! summary tables. `benchmark from-file` loads a JSON report and renders it again.
//! Formats and fields are documented in docs/report.md.

pub mod across_runs;
pub mod agent_traces;
pub mod cells;
pub mod charts;
pub mod connections;
pub mod console;
pub mod csv;
pub mod fingerprint;
pub mod gpu;
pub mod html;
pub mod json;
pub mod junit;
pub mod knee;
pub mod llmd;
pub mod markdown;
pub mod merge;
pub mod otlp;
pub mod output_lengths;
pub mod outputs;
pub mod progress;
pub mod queue;
pub mod reporter;
pub mod requests;
pub mod server;
pub mod slices;
pub mod steady;
pub mod timeline;
pub mod verdicts;

pub use cells::{cell_value, label, notes, num};
pub use json::{
    HostInfo, LoadError, MergeInfo, Metadata, REPORT_SCHEMA_VERSION, Report, TargetInfo,
    write_atomic,
};
pub use outputs::{FileFormat, Output, parse_outputs, render, write_files, written_message};
pub use reporter::{ReportSettings, RunInfo, RunReporter, unix_now};
pub use requests::{RequestEntry, RequestLog, RequestSamples};

/// The console blocks after the summary tables: each benchmark's steady state and
/// precision, then the statistics across runs (empty strings left out).
pub fn console_blocks(report: &Report) -> Vec<String> {
    [
        fingerprint::console(report),
        steady::console(&report.benchmarks),
        across_runs::console(&report.across_runs),
        report
            .knees
            .iter()
            .map(knee::Knee::line)
            .collect::<Vec<_>>()
            .join("\n"),
    ]
    .into_iter()
    .filter(|b| !b.is_empty())
    .collect()
}
