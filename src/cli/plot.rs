//! `llmsurge plot …`: charts drawn from saved JSON reports, without running anything.

use crate::exit_codes;
use crate::report::Report;
use crate::report::charts::draw::{ImageFormat, write_images};
use crate::report::charts::{Chart, compare, page, pareto};
use crate::report::{write_atomic, written_message};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Which chart to draw.
#[derive(Debug, clap::Subcommand)]
pub enum PlotCommand {
    /// The Pareto front of output tokens/s per user against output tokens/s in total (or
    /// per GPU), over every benchmark of the given reports: HTML, PNG, SVG and a Markdown
    /// table.
    Pareto(ParetoArgs),
    /// Several runs on the same axes: latency against load, throughput, the
    /// distributions and each run's Pareto front, one colour per run, each named by its
    /// `--label` (or its file name): HTML, PNG, SVG.
    Runs(RunsArgs),
}

/// Flags of `plot runs`.
#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    /// JSON reports written by `llmsurge benchmark run`, one run each.
    #[arg(value_name = "REPORT.json", required = true)]
    pub reports: Vec<PathBuf>,

    /// Outputs: html (runs.html), png, svg (one file per chart); comma-separated or
    /// repeated.
    #[arg(
        long,
        env = "LLMSURGE_PLOT_OUTPUTS",
        value_delimiter = ',',
        default_value = "html,png,svg"
    )]
    pub outputs: Vec<String>,

    /// Directory for the files.
    #[arg(long, env = "LLMSURGE_OUTPUT_DIR", default_value = ".")]
    pub output_dir: PathBuf,
}

/// Flags of `plot pareto`.
#[derive(Debug, clap::Args)]
pub struct ParetoArgs {
    /// JSON reports written by `llmsurge benchmark run`; every benchmark is a point.
    #[arg(value_name = "REPORT.json", required = true)]
    pub reports: Vec<PathBuf>,

    /// Outputs: html (pareto-front.html), png, svg, md (pareto-front.md, the table);
    /// comma-separated or repeated.
    #[arg(
        long,
        env = "LLMSURGE_PLOT_OUTPUTS",
        value_delimiter = ',',
        default_value = "html,png,svg,md"
    )]
    pub outputs: Vec<String>,

    /// Directory for the files.
    #[arg(long, env = "LLMSURGE_OUTPUT_DIR", default_value = ".")]
    pub output_dir: PathBuf,

    /// GPUs that served the load: the x axis becomes output tokens/s per GPU.
    #[arg(long, env = "LLMSURGE_GPUS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus: Option<u32>,

    /// Which TPOT gives tokens/s per user: 1 / its mean, or 1 / its p50.
    #[arg(long, env = "LLMSURGE_PER_USER", value_enum, default_value = "mean")]
    pub per_user: pareto::PerUser,
}

/// Runs `plot …`; returns the exit code.
pub fn plot(command: &PlotCommand) -> i32 {
    match command {
        PlotCommand::Pareto(args) => plot_pareto(args),
        PlotCommand::Runs(args) => plot_runs(args),
    }
}

/// The formats of `--outputs` for pictures of several runs (html, png, svg), or the
/// line naming the one refused.
pub(super) fn picture_formats(outputs: &[String], command: &str) -> Result<Vec<String>, String> {
    let mut formats: Vec<String> = Vec::new();
    for o in outputs.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
        match o {
            "html" | "png" | "svg" => {
                if !formats.iter().any(|f| f == o) {
                    formats.push(o.to_string());
                }
            }
            other => {
                return Err(format!(
                    "--outputs: unknown output {other:?} for {command} (expected html, png or svg)"
                ));
            }
        }
    }
    Ok(formats)
}

/// Each run's name: its `--label`, else its file name; a name two runs share gets
/// the run's position after it.
pub(super) fn run_labels(reports: &[(PathBuf, Report)]) -> Vec<String> {
    let names: Vec<String> = reports
        .iter()
        .map(|(p, r)| r.metadata.label.clone().unwrap_or_else(|| file_label(p)))
        .collect();
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if names.iter().filter(|m| *m == n).count() > 1 {
                format!("{n} ({})", i + 1)
            } else {
                n.clone()
            }
        })
        .collect()
}

/// Writes `charts` as `page` (`<page>.html`, every chart on one page) and one PNG and
/// SVG per chart, in the formats asked for; prints each file written. Returns whether
/// every file was written.
pub(super) fn write_pictures(
    charts: &[Chart],
    formats: &[String],
    dir: &Path,
    page_name: &str,
    title: &str,
    files: &[String],
) -> bool {
    let mut written = Vec::new();
    let mut failed: Vec<(PathBuf, String)> = Vec::new();
    for format in formats {
        match format.as_str() {
            "png" | "svg" => {
                let f = if format == "png" {
                    ImageFormat::Png
                } else {
                    ImageFormat::Svg
                };
                let (w, e) = write_images(charts, f, dir);
                written.extend(w);
                failed.extend(e);
            }
            _ => {
                let path = dir.join(format!("{page_name}.html"));
                let bytes = page::render(title, files, charts)
                    .map(String::into_bytes)
                    .map_err(|e| e.to_string());
                match bytes.and_then(|b| write_atomic(&path, &b).map_err(|e| e.to_string())) {
                    Ok(()) => written.push(path),
                    Err(e) => failed.push((path, e)),
                }
            }
        }
    }
    for path in &written {
        eprintln!("{}", written_message(path));
    }
    for (path, e) in &failed {
        eprintln!("error: cannot write {}: {e}", path.display());
    }
    failed.is_empty()
}

/// Loads every report, or the line naming the one that cannot be read.
pub(super) fn load_reports(paths: &[PathBuf]) -> Result<Vec<(PathBuf, Report)>, String> {
    paths
        .iter()
        .map(|p| {
            Report::load(p)
                .map(|r| (p.clone(), r))
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn plot_runs(args: &RunsArgs) -> i32 {
    let formats = match picture_formats(&args.outputs, "plot runs") {
        Ok(f) => f,
        Err(e) => return super::usage_error(&e),
    };
    let reports = match load_reports(&args.reports) {
        Ok(r) => r,
        Err(e) => return super::usage_error(&e),
    };
    let labels = run_labels(&reports);
    let runs: Vec<compare::Run<'_>> = reports
        .iter()
        .zip(&labels)
        .map(|((_, report), label)| compare::Run { label, report })
        .collect();
    let charts = compare::charts(&runs, &|_| Vec::new());
    let files: Vec<String> = args
        .reports
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    if write_pictures(
        &charts,
        &formats,
        &args.output_dir,
        "runs",
        "Runs side by side",
        &files,
    ) {
        exit_codes::OK
    } else {
        exit_codes::RUN_FAILED
    }
}

fn file_label(path: &Path) -> String {
    path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into(),
    )
}

/// Each benchmark's label: its load (rate or concurrency), and what else differs between
/// the points: the run's `--label` (else its file name) when there are several, and the
/// `--output-extras` (server settings) whose values differ.
fn labels(reports: &[(PathBuf, Report)]) -> Vec<Vec<String>> {
    let keys: BTreeSet<&String> = reports
        .iter()
        .flat_map(|(_, r)| r.metadata.extras.keys())
        .collect();
    let differing: Vec<&String> = keys
        .into_iter()
        .filter(|k| {
            let values: BTreeSet<String> = reports
                .iter()
                .map(|(_, r)| {
                    r.metadata
                        .extras
                        .get(*k)
                        .map_or(String::new(), |v| v.to_string())
                })
                .collect();
            values.len() > 1
        })
        .collect();
    reports
        .iter()
        .map(|(path, r)| {
            let mut prefix = Vec::new();
            if reports.len() > 1 {
                prefix.push(r.metadata.label.clone().unwrap_or_else(|| file_label(path)));
            }
            for k in &differing {
                let v = match r.metadata.extras.get(*k) {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                    None => "–".into(),
                };
                prefix.push(format!("{k}={v}"));
            }
            r.benchmarks
                .iter()
                .map(|b| {
                    let mut parts = prefix.clone();
                    parts.push(b.strategy.to_string());
                    parts.join(" ")
                })
                .collect()
        })
        .collect()
}

fn plot_pareto(args: &ParetoArgs) -> i32 {
    let mut formats = Vec::new();
    for o in args
        .outputs
        .iter()
        .map(|o| o.trim())
        .filter(|o| !o.is_empty())
    {
        match o {
            "html" | "png" | "svg" | "md" => {
                if !formats.contains(&o) {
                    formats.push(o);
                }
            }
            other => {
                return super::usage_error(&format!(
                    "--outputs: unknown output {other:?} for plot pareto (expected html, png, svg or md)"
                ));
            }
        }
    }
    let mut reports = Vec::new();
    for path in &args.reports {
        match Report::load(path) {
            Ok(r) => reports.push((path.clone(), r)),
            Err(e) => return super::usage_error(&e.to_string()),
        }
    }
    let labels = labels(&reports);
    let points: Vec<pareto::Point> = reports
        .iter()
        .zip(labels)
        .flat_map(|((_, r), ls)| {
            r.benchmarks
                .iter()
                .zip(ls)
                .filter_map(|(b, l)| pareto::point(b, l, args.per_user, args.gpus))
                .collect::<Vec<_>>()
        })
        .collect();
    if points.is_empty() {
        return super::usage_error(
            "plot pareto: no benchmark in these reports measured both TPOT and output throughput",
        );
    }
    let chart = pareto::chart(&points, args.per_user, args.gpus);
    let dir = &args.output_dir;
    let mut written = Vec::new();
    let mut failed: Vec<(PathBuf, String)> = Vec::new();
    for format in formats {
        match format {
            "png" | "svg" => {
                let f = if format == "png" {
                    ImageFormat::Png
                } else {
                    ImageFormat::Svg
                };
                let (w, e) = write_images(std::slice::from_ref(&chart), f, dir);
                written.extend(w);
                failed.extend(e);
            }
            _ => {
                let path = dir.join(format!("{}.{format}", chart.id));
                let files: Vec<String> = args
                    .reports
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                let bytes = if format == "md" {
                    Ok(pareto::markdown(&points, args.per_user, args.gpus).into_bytes())
                } else {
                    page::render(&chart.title, &files, std::slice::from_ref(&chart))
                        .map(String::into_bytes)
                        .map_err(|e| e.to_string())
                };
                match bytes.and_then(|b| write_atomic(&path, &b).map_err(|e| e.to_string())) {
                    Ok(()) => written.push(path),
                    Err(e) => failed.push((path, e)),
                }
            }
        }
    }
    for path in &written {
        eprintln!("{}", written_message(path));
    }
    for (path, e) in &failed {
        eprintln!("error: cannot write {}: {e}", path.display());
    }
    if failed.is_empty() {
        exit_codes::OK
    } else {
        exit_codes::RUN_FAILED
    }
}
