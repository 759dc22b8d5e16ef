//! `llmsurge benchmark from-file REPORT.json`: render a saved report again in any output
//! format, without running anything.

use super::resolve_output::parse_extras;
use crate::exit_codes;
use crate::report::{Output, Report, parse_outputs, write_files};
use std::path::PathBuf;

/// Flags of `benchmark from-file`.
#[derive(Debug, clap::Args)]
pub struct FromFileArgs {
    /// A JSON report written by `llmsurge benchmark run`.
    #[arg(value_name = "REPORT.json")]
    pub report: PathBuf,

    /// Outputs: aliases json, csv, html, yaml, console, junit, md, png, svg (every chart
    /// of the HTML page as its own image), llmd (the llm-d Benchmark Report v0.2, one
    /// benchmark_report_v0.2,_N.yaml per benchmark), or file names whose extension picks
    /// the format; comma-separated or repeated.
    #[arg(
        long,
        env = "LLMSURGE_OUTPUTS",
        value_delimiter = ',',
        default_value = "console"
    )]
    pub outputs: Vec<String>,

    /// Directory for report files.
    #[arg(long, env = "LLMSURGE_OUTPUT_DIR", default_value = ".")]
    pub output_dir: PathBuf,

    /// A JSON object merged into the report's metadata extras, e.g. '{"gpu": "H100"}'.
    #[arg(long, env = "LLMSURGE_OUTPUT_EXTRAS", value_name = "JSON")]
    pub output_extras: Option<String>,
}

/// Runs `benchmark from-file`; returns the exit code.
pub fn from_file(args: &FromFileArgs) -> i32 {
    let outputs = match parse_outputs(&args.outputs)
        .and_then(|o| crate::report::outputs::only_from_report(&o).map(|()| o))
    {
        Ok(o) => o,
        Err(message) => return super::usage_error(&message),
    };
    let extras = match parse_extras(args.output_extras.as_deref()) {
        Ok(e) => e,
        Err(e) => return super::usage_error(&e.0),
    };
    let mut report = match Report::load(&args.report) {
        Ok(r) => r,
        Err(e) => return super::usage_error(&e.to_string()),
    };
    report.metadata.extras.extend(extras);
    let (written, failed) = write_files(&report, &outputs, &args.output_dir);
    if outputs.contains(&Output::Console) && !report.benchmarks.is_empty() {
        crate::stdout::println(&crate::report::console::summary(
            &report.benchmarks,
            report.capacity.as_ref(),
        ));
        for block in crate::report::console_blocks(&report) {
            crate::stdout::println(&block);
        }
    }
    for path in &written {
        eprintln!("{}", crate::report::written_message(path));
    }
    for e in &failed {
        crate::stdout::eprintln(&format!("error: {e}"));
    }
    if failed.is_empty() {
        exit_codes::OK
    } else {
        exit_codes::RUN_FAILED
    }
}
