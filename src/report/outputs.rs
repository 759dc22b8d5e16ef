//! Which outputs a run (or `benchmark from-file`) writes, and writing them.
//!
//! `--outputs` takes aliases (`json`, `csv`, `html`, `yaml`, `console`, `llmd`, …) and
//! file names whose extension picks the format; files go under `--output-dir`. Every file is
//! written atomically, so a reader never sees half a report.

use super::json::{Report, write_atomic};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Report formats, each with its file (relative to the output directory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "format", content = "file")]
pub enum Output {
    /// The full JSON report (re-loadable).
    Json(PathBuf),
    /// One CSV row per benchmark.
    Csv(PathBuf),
    /// One self-contained HTML page with charts.
    Html(PathBuf),
    /// The full report as YAML.
    Yaml(PathBuf),
    /// Summary tables on stdout.
    Console,
    /// SLO verdicts as JUnit XML.
    Junit(PathBuf),
    /// A Markdown summary.
    Markdown(PathBuf),
    /// Every chart of the HTML page as a PNG file, `<chart id>.png`.
    Png,
    /// Every chart of the HTML page as an SVG file, `<chart id>.svg`.
    Svg,
    /// The llm-d Benchmark Report v0.2, one YAML file per benchmark
    /// (`benchmark_report_v0.2,_<N>.yaml`).
    Llmd,
    /// Every request's span as OTLP JSON, written during a run (see
    /// [`super::otlp`]); a report alone has no requests to write.
    Otlp(PathBuf),
}

/// The file formats, for rendering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// JSON.
    Json,
    /// CSV.
    Csv,
    /// HTML.
    Html,
    /// YAML.
    Yaml,
    /// JUnit XML (SLO verdicts).
    Junit,
    /// Markdown.
    Markdown,
}

impl Output {
    /// The file and its format, unless this is the console.
    pub fn file(&self) -> Option<(FileFormat, &Path)> {
        match self {
            Output::Json(p) => Some((FileFormat::Json, p)),
            Output::Csv(p) => Some((FileFormat::Csv, p)),
            Output::Html(p) => Some((FileFormat::Html, p)),
            Output::Yaml(p) => Some((FileFormat::Yaml, p)),
            Output::Junit(p) => Some((FileFormat::Junit, p)),
            Output::Markdown(p) => Some((FileFormat::Markdown, p)),
            Output::Console | Output::Png | Output::Svg | Output::Llmd | Output::Otlp(_) => None,
        }
    }

    /// The file this output writes, rendered from the report or streamed; `None` for
    /// the console and the outputs of several files.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Output::Otlp(p) => Some(p),
            other => other.file().map(|(_, p)| p),
        }
    }
}

/// Parses `--outputs` values (already split on commas); the error names the bad value.
pub fn parse_outputs(values: &[String]) -> Result<Vec<Output>, String> {
    let mut out = Vec::new();
    for raw in values.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
        let output = match raw {
            "json" => Output::Json("benchmarks.json".into()),
            "csv" => Output::Csv("benchmarks.csv".into()),
            "html" => Output::Html("benchmarks.html".into()),
            "yaml" => Output::Yaml("benchmarks.yaml".into()),
            "console" => Output::Console,
            "junit" => Output::Junit("benchmarks.junit.xml".into()),
            "md" | "markdown" => Output::Markdown("benchmarks.md".into()),
            "png" => Output::Png,
            "svg" => Output::Svg,
            "llmd" => Output::Llmd,
            "otlp" => Output::Otlp("spans.otlp.json".into()),
            file if file.to_ascii_lowercase().ends_with(".otlp.json") => Output::Otlp(file.into()),
            file => {
                let ext = Path::new(file)
                    .extension()
                    .and_then(|e| e.to_str())
                    .map(str::to_ascii_lowercase);
                let path = PathBuf::from(file);
                match ext.as_deref() {
                    Some("json") => Output::Json(path),
                    Some("csv") => Output::Csv(path),
                    Some("html" | "htm") => Output::Html(path),
                    Some("yaml" | "yml") => Output::Yaml(path),
                    Some("xml") => Output::Junit(path),
                    Some("md") => Output::Markdown(path),
                    _ => {
                        return Err(format!(
                            "--outputs: unknown output {file:?} (expected json, csv, html, yaml, console, junit, md, png, svg, llmd, otlp, or a file name ending in .json, .csv, .html, .yaml, .xml, .md or .otlp.json)"
                        ));
                    }
                }
            }
        };
        // One span file per run: a second would be left empty.
        if let Output::Otlp(second) = &output
            && let Some(Output::Otlp(first)) = out.iter().find(|o| matches!(o, Output::Otlp(_)))
            && first != second
        {
            return Err(format!(
                "--outputs: two OTLP files ({} and {}): a run writes its spans to one; give one otlp output",
                first.display(),
                second.display()
            ));
        }
        if !out.contains(&output) {
            out.push(output);
        }
    }
    Ok(out)
}

/// Checks the outputs of a command that renders a saved report (`from-file`,
/// `merge`): one that is written as requests run (`otlp`) is an error saying so.
pub fn only_from_report(outputs: &[Output]) -> Result<(), String> {
    match outputs.iter().find(|o| matches!(o, Output::Otlp(_))) {
        Some(_) => Err("--outputs otlp: the spans are written as the requests of a run finish; a report holds no requests to write them from (give --outputs otlp to benchmark run)".into()),
        None => Ok(()),
    }
}

/// A report that could not be rendered in a format.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// JSON.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// CSV.
    #[error("CSV: {0}")]
    Csv(#[from] csv::Error),
    /// HTML.
    #[error("HTML: {0}")]
    Html(#[from] minijinja::Error),
    /// YAML.
    #[error("YAML: {0}")]
    Yaml(#[from] serde_saphyr::SerializeError),
    /// JUnit XML.
    #[error("JUnit: {0}")]
    Junit(#[from] std::io::Error),
}

/// Renders the report in one file format.
pub fn render(report: &Report, format: FileFormat) -> Result<Vec<u8>, RenderError> {
    Ok(match format {
        FileFormat::Json => serde_json::to_vec_pretty(report)?,
        FileFormat::Csv => super::csv::render(report)?,
        FileFormat::Html => super::html::render(report)?.into_bytes(),
        FileFormat::Yaml => serde_saphyr::to_string(report)?.into_bytes(),
        FileFormat::Junit => {
            let mut suites = super::junit::slo_suites(&report.benchmarks);
            suites.extend(super::junit::tier_suites(report.capacity.as_ref()));
            super::junit::render(&suites)?.into_bytes()
        }
        FileFormat::Markdown => {
            let mut md = super::markdown::run_summary(&report.benchmarks);
            md.push_str(&super::markdown::capacity(report.capacity.as_ref()));
            md.push_str(&super::steady::markdown(&report.benchmarks));
            md.push_str(&super::across_runs::markdown(&report.across_runs));
            md.push_str(&super::fingerprint::markdown(report));
            md.into_bytes()
        }
    })
}

/// A report file that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the report {path}: {message}")]
pub struct WriteError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub message: String,
}

/// Writes every file output under `dir`, atomically. Returns the files written and the
/// failures; one failure does not stop the other formats.
pub fn write_files(
    report: &Report,
    outputs: &[Output],
    dir: &Path,
) -> (Vec<PathBuf>, Vec<WriteError>) {
    let mut written = Vec::new();
    let mut failed = Vec::new();
    for (format, file) in outputs.iter().filter_map(Output::file) {
        let path = dir.join(file);
        let result = render(report, format)
            .map_err(|e| e.to_string())
            .and_then(|bytes| write_atomic(&path, &bytes).map_err(|e| e.to_string()));
        match result {
            Ok(()) => written.push(path),
            Err(message) => failed.push(WriteError { path, message }),
        }
    }
    // `--slice`: the slices in a CSV of their own beside each CSV report.
    for file in outputs.iter().filter_map(|o| match o {
        Output::Csv(p) if !report.slices.is_empty() => Some(p),
        _ => None,
    }) {
        let path = dir.join(slices_csv_path(file));
        let label = |i: u32| {
            report
                .benchmarks
                .iter()
                .find(|b| b.index == i)
                .map(|b| b.strategy.to_string())
                .unwrap_or_default()
        };
        let result = super::slices::csv(&report.slices, &label)
            .map_err(|e| e.to_string())
            .and_then(|bytes| write_atomic(&path, &bytes).map_err(|e| e.to_string()));
        match result {
            Ok(()) => written.push(path),
            Err(message) => failed.push(WriteError { path, message }),
        }
    }
    // `llmd`: one llm-d Benchmark Report per benchmark.
    if outputs.contains(&Output::Llmd) {
        let reports = super::llmd::reports(report);
        // An earlier, longer run's files in this directory would join this run's in
        // llm-d's glob (`benchmark_report_v0.2,_*.yaml`), as the JSON report is replaced;
        // a file of that name llmsurge did not write is the user's: kept, and said.
        for (stale, ours) in super::llmd::files_beyond(dir, reports.len()) {
            let path = stale.display().to_string();
            let shown = llmsurge_proto::inert::terminal(&path);
            let line = if !ours {
                format!(
                    "warning: kept {shown}: not an llmsurge report, but llm-d's glob reads it beside this run's {}",
                    reports.len()
                )
            } else if let Err(e) = std::fs::remove_file(&stale) {
                format!("warning: could not remove {shown}, an earlier run's llm-d report: {e}")
            } else {
                format!(
                    "removed {shown}: an earlier run's llm-d report beyond this run's {}",
                    reports.len()
                )
            };
            crate::stdout::eprintln(&line);
        }
        for (name, br) in reports {
            let path = dir.join(name);
            let result = super::llmd::to_yaml(&br)
                .map_err(|e| e.to_string())
                .and_then(|text| write_atomic(&path, text.as_bytes()).map_err(|e| e.to_string()));
            match result {
                Ok(()) => written.push(path),
                Err(message) => failed.push(WriteError { path, message }),
            }
        }
    }
    for (output, format) in [
        (Output::Png, super::charts::draw::ImageFormat::Png),
        (Output::Svg, super::charts::draw::ImageFormat::Svg),
    ] {
        if outputs.contains(&output) {
            let (files, errors) =
                super::charts::draw::write_images(&super::charts::charts(report), format, dir);
            written.extend(files);
            failed.extend(
                errors
                    .into_iter()
                    .map(|(path, message)| WriteError { path, message }),
            );
        }
    }
    (written, failed)
}

/// Where the slices' CSV of the CSV report `csv` goes: `benchmarks.csv` →
/// `benchmarks.slices.csv`, beside it.
pub fn slices_csv_path(csv: &Path) -> PathBuf {
    let stem = csv.file_stem().map_or_else(
        || "benchmarks".to_string(),
        |s| s.to_string_lossy().to_string(),
    );
    csv.with_file_name(format!("{stem}.slices.csv"))
}

/// The line announcing a written report file. For the HTML page it also says how to open
/// it: a newcomer's first run ends with a file they may not know is a web page.
pub fn written_message(path: &Path) -> String {
    let is_html = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm"));
    if !is_html {
        return format!("report written to {}", path.display());
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    format!(
        "report written to {} (open file://{} in a browser; it works offline)",
        path.display(),
        absolute.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Vec<Output>, String> {
        parse_outputs(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn aliases_and_file_names_pick_formats() {
        assert_eq!(parse(&["llmd"]).expect("valid"), vec![Output::Llmd]);
        assert_eq!(
            parse(&["json", "csv", "html", "yaml", "console", "junit", "md"]).expect("valid"),
            vec![
                Output::Json("benchmarks.json".into()),
                Output::Csv("benchmarks.csv".into()),
                Output::Html("benchmarks.html".into()),
                Output::Yaml("benchmarks.yaml".into()),
                Output::Console,
                Output::Junit("benchmarks.junit.xml".into()),
                Output::Markdown("benchmarks.md".into()),
            ]
        );
        assert_eq!(
            parse(&[
                "run.json",
                "sub/summary.CSV",
                "page.htm",
                "r.yml",
                "json",
                "slo.xml",
                "summary.md"
            ])
            .expect("valid"),
            vec![
                Output::Json("run.json".into()),
                Output::Csv("sub/summary.CSV".into()),
                Output::Html("page.htm".into()),
                Output::Yaml("r.yml".into()),
                Output::Json("benchmarks.json".into()),
                Output::Junit("slo.xml".into()),
                Output::Markdown("summary.md".into()),
            ]
        );
    }

    #[test]
    fn duplicates_collapse_and_unknown_outputs_are_refused() {
        assert_eq!(parse(&["json", "json", " "]).expect("valid").len(), 1);
        let err = parse(&["report.txt"]).expect_err("unknown extension");
        assert!(
            err.starts_with("--outputs: unknown output \"report.txt\""),
            "{err}"
        );
        assert!(parse(&["pdf"]).is_err());
        assert!(err.contains("llmd"), "{err}");
    }
}
