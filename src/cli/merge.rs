//! `llmsurge benchmark merge A.json B.json …`: one report from the reports of the N
//! shards of one run (see `report::merge` and docs/cli.md, "Merging shards").

use crate::exit_codes;
use crate::report::merge::merge;
use crate::report::{Output, Report, parse_outputs, write_files};
use std::path::PathBuf;

/// Flags of `benchmark merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The shards' JSON reports (written by `benchmark run --shard K/N`), in any order.
    #[arg(value_name = "SHARD.json", required = true)]
    pub reports: Vec<PathBuf>,

    /// Outputs of the merged report: aliases json, csv, html, yaml, console, junit, md,
    /// llmd (one llm-d Benchmark Report per benchmark), or file names whose extension
    /// picks the format; comma-separated or repeated.
    #[arg(
        long,
        env = "LLMSURGE_OUTPUTS",
        value_delimiter = ',',
        default_value = "console,json"
    )]
    pub outputs: Vec<String>,

    /// Directory for the merged report's files.
    #[arg(long, env = "LLMSURGE_OUTPUT_DIR", default_value = ".")]
    pub output_dir: PathBuf,

    /// Merge even when shards are missing; the report lists them (`metadata.merged.missing`).
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_ALLOW_PARTIAL")]
    pub allow_partial: bool,
}

/// Runs `benchmark merge`; returns the exit code: 2 for inputs that cannot be merged,
/// otherwise that of a run with the merged results (`run::exit_code`).
pub fn benchmark_merge(args: &MergeArgs) -> i32 {
    let outputs = match parse_outputs(&args.outputs)
        .and_then(|o| crate::report::outputs::only_from_report(&o).map(|()| o))
    {
        Ok(o) => o,
        Err(message) => return super::usage_error(&message),
    };
    // An output must not overwrite an input: the same name in the same directory.
    for (_, file) in outputs.iter().filter_map(Output::file) {
        let out = args.output_dir.join(file);
        if let Some(input) = args
            .reports
            .iter()
            .find(|r| same_file(r, &out) || *r == &out)
        {
            return super::usage_error(&format!(
                "--output-dir: {} would overwrite the input {}",
                out.display(),
                input.display()
            ));
        }
    }
    let mut inputs = Vec::with_capacity(args.reports.len());
    for path in &args.reports {
        match Report::load(path) {
            Ok(r) => inputs.push((path.display().to_string(), r)),
            Err(e) => return super::usage_error(&e.to_string()),
        }
    }
    let mut report = match merge(inputs, args.allow_partial) {
        Ok(r) => r,
        Err(e) => return super::usage_error(&e.0),
    };
    report.invalid_run = super::run::invalid_run(&report.benchmarks);
    let (written, failed) = write_files(&report, &outputs, &args.output_dir);
    if outputs.contains(&Output::Console) && !report.benchmarks.is_empty() {
        crate::stdout::println(&crate::report::console::summary(&report.benchmarks, None));
    }
    if let Some(m) = report
        .metadata
        .merged
        .as_ref()
        .filter(|m| !m.missing.is_empty())
    {
        let missing = crate::report::merge::shard_numbers(&m.missing);
        eprintln!(
            "warning: shard(s) {} of {} missing (--allow-partial): the report holds part of the load",
            missing, m.count
        );
    }
    for path in &written {
        eprintln!("{}", crate::report::written_message(path));
    }
    for e in &failed {
        crate::stdout::eprintln(&format!("error: {e}"));
    }
    if !failed.is_empty() {
        return exit_codes::RUN_FAILED;
    }
    super::run::exit_code(&report.benchmarks, report.metadata.interrupted, None)
}

fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}
