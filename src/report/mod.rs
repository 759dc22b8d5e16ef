//! Reports: the JSON report (the full, re-loadable record of a run) and the console
//! summary. Report files are written atomically (temp file + rename) after every
//! benchmark, so an interrupted or crashed run keeps every benchmark that finished.

pub mod console;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod verdicts;

pub use json::{HostInfo, Metadata, REPORT_SCHEMA_VERSION, Report, TargetInfo, write_atomic};
