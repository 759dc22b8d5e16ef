//! The sweep report: one row per point (per benchmark of a point whose profile runs
//! several), its parameters and headline figures, in JSON, CSV, Markdown and HTML. The
//! data stays plain (flat parameter and figure maps) so other tools can chart it.

use crate::report::across_runs::{FIGURES, figure};
use crate::report::json::Report;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The `--gpu-metrics` figures a row may have, after the headline ones.
pub(super) const GPU_FIGURES: [&str; 3] = [
    "gpu_power_mean_w",
    "joules_per_output_token",
    "output_tokens_per_s_per_gpu",
];

/// What became of a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Its benchmark ran and wrote its report.
    Ok,
    /// Its server did not start or died, or its benchmark failed.
    Failed,
    /// Its benchmark ran but judged its own run invalid (`benchmark run` exit code 4:
    /// no request succeeded, the client was the bottleneck, …); `error` says why. Its
    /// figures are kept but describe no valid measurement.
    Invalid,
    /// Measured by an earlier run of the sweep (`--resume`); its figures are read back.
    Resumed,
}

/// Which point a row is about: its directory and the configurations it ran (in the JSON,
/// the row's first fields).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// The point's directory name under the sweep's output directory.
    pub point: String,
    /// Index of its serve configuration (absent without `--serve-cmd`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serve_index: Option<usize>,
    /// Index of its benchmark configuration.
    pub bench_index: usize,
    /// The serve configuration's parameters.
    pub serve_params: Map<String, Value>,
    /// The benchmark configuration's parameters.
    pub bench_params: Map<String, Value>,
}

/// The parameter columns of a table of points: every serve key, then every benchmark
/// key, each in the order first seen.
pub(super) struct ParamColumns {
    serve: Vec<String>,
    bench: Vec<String>,
}

impl ParamColumns {
    /// The columns of `points`.
    pub(super) fn of<'a>(points: impl IntoIterator<Item = &'a Point>) -> Self {
        let mut cols = ParamColumns {
            serve: Vec::new(),
            bench: Vec::new(),
        };
        for p in points {
            for (keys, have) in [
                (&p.serve_params, &mut cols.serve),
                (&p.bench_params, &mut cols.bench),
            ] {
                for k in keys.keys() {
                    if !have.contains(k) {
                        have.push(k.clone());
                    }
                }
            }
        }
        cols
    }

    /// Which of [`ParamColumns::header`]'s columns hold only our own text: `point` and
    /// `status`, not the parameters (a params file's text).
    pub(super) fn ours(&self) -> Vec<bool> {
        let mut ours = vec![true, true];
        ours.resize(2 + self.serve.len() + self.bench.len(), false);
        ours
    }

    /// `point`, `status` and the parameters' names (`serve.KEY`, `bench.KEY`).
    pub(super) fn header(&self) -> Vec<String> {
        let mut header = vec!["point".to_string(), "status".to_string()];
        header.extend(self.serve.iter().map(|k| format!("serve.{k}")));
        header.extend(self.bench.iter().map(|k| format!("bench.{k}")));
        header
    }

    /// A row's cells under [`ParamColumns::header`].
    pub(super) fn cells(&self, p: &Point, status: Status) -> Vec<String> {
        let mut c = vec![
            p.point.clone(),
            serde_json::to_value(status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        ];
        c.extend(self.serve.iter().map(|k| text(p.serve_params.get(k))));
        c.extend(self.bench.iter().map(|k| text(p.bench_params.get(k))));
        c
    }
}

/// One row of the sweep report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// The point.
    #[serde(flatten)]
    pub at: Point,
    /// The benchmark's label within the point (its strategy), when the point ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub benchmark: Option<String>,
    /// What became of the point.
    pub status: Status,
    /// The `benchmark run` exit code, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it failed, one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last lines of the server's log, for a failed point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
    /// The cache reset made before this point (`--reset-cache`), and the answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_reset: Option<llmsurge_coordinator::cache_reset::CacheReset>,
    /// How `--after-bench-cmd`, run before this point, ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_bench_cmd: Option<HookRun>,
    /// Headline figures (ms for latencies; the mean over runs with `--repeat`).
    pub figures: BTreeMap<String, f64>,
}

/// How one run of `--after-bench-cmd` ended.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HookRun {
    /// Its exit code (absent when a signal ended it or it could not start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it failed, one line (absent when it exited 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The whole sweep report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepReport {
    /// The server command template, when the sweep started servers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serve_cmd: Option<String>,
    /// Whether the sweep was interrupted before every point ran.
    pub interrupted: bool,
    /// One row per point and benchmark.
    pub rows: Vec<Row>,
}

/// The rows of a point's report: one per benchmark position, figures averaged over
/// `--repeat` runs. When the template's exit code says the run was invalid, a position
/// whose benchmarks (any run's) are invalid is [`Status::Invalid`], with the reasons.
pub fn rows_of(template: &Row, report: &Report) -> Vec<Row> {
    let invalid = template.exit_code == Some(crate::exit_codes::INVALID_RUN);
    let repeated = !report.across_runs.is_empty();
    let mut rows = Vec::new();
    for b in &report.benchmarks {
        // With --repeat every run's benchmark is kept; the first run's stands for its
        // position, with the across-runs means as figures.
        if repeated && rows.len() >= report.across_runs.len() {
            break;
        }
        let mut row = template.clone();
        row.benchmark = Some(crate::report::cells::label(b));
        if invalid {
            let runs: Vec<_> = report
                .benchmarks
                .iter()
                .filter(|x| x.index == b.index)
                .cloned()
                .collect();
            let why = crate::cli::run::invalid_run(&runs);
            if !why.is_empty() {
                row.status = Status::Invalid;
                row.error = Some(format!("invalid run: {}", why.join("; ")));
            }
        }
        row.figures = FIGURES
            .iter()
            .filter_map(|f| figure(b, f).map(|v| (f.to_string(), v)))
            .collect();
        // `--gpu-metrics`: the energy figures, for a tokens-per-joule comparison.
        if let Some(g) = &b.gpu {
            let gpu = [
                ("gpu_power_mean_w", Some(g.power_mean_w)),
                ("joules_per_output_token", g.joules_per_output_token),
                ("output_tokens_per_s_per_gpu", g.output_tokens_per_s_per_gpu),
            ];
            for (name, v) in gpu {
                if let Some(v) = v {
                    row.figures.insert(name.to_string(), v);
                }
            }
        }
        if let Some(across) = report.across_runs.get(rows.len()) {
            let means = serde_json::to_value(across).unwrap_or_default();
            if let Some(figs) = means.get("figures").and_then(Value::as_object) {
                for (name, stats) in figs {
                    if let Some(mean) = stats.get("mean").and_then(Value::as_f64) {
                        row.figures.insert(name.clone(), mean);
                    }
                }
            }
        }
        rows.push(row);
    }
    rows
}

/// A parameter's value as a cell.
pub(super) fn text(v: Option<&Value>) -> String {
    match v {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// The table every tabular format shows: header, cells, and which columns hold only
/// our own text (see [`write_tables`]).
fn table(report: &SweepReport) -> (Vec<String>, Vec<Vec<String>>, Vec<bool>) {
    let params = ParamColumns::of(report.rows.iter().map(|r| &r.at));
    let figures: Vec<&str> = FIGURES
        .iter()
        .copied()
        .chain(GPU_FIGURES)
        .filter(|f| report.rows.iter().any(|r| r.figures.contains_key(*f)))
        .collect();
    let mut header = params.header();
    let mut ours = params.ours();
    header.push("benchmark".into());
    header.extend(figures.iter().map(|f| f.to_string()));
    header.push("error".into());
    ours.push(false);
    ours.extend(figures.iter().map(|_| true));
    ours.push(false);
    let cells = report
        .rows
        .iter()
        .map(|r| {
            let mut c = params.cells(&r.at, r.status);
            c.push(r.benchmark.clone().unwrap_or_default());
            c.extend(
                figures
                    .iter()
                    .map(|f| crate::report::cells::cell_value(r.figures.get(*f).copied())),
            );
            let mut error = r.error.clone().unwrap_or_default();
            if !r.log_tail.is_empty() {
                error.push_str(" | log: ");
                error.push_str(&r.log_tail.join(" / "));
            }
            c.push(error);
            c
        })
        .collect();
    (header, cells, ours)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Writes `sweep.json`, `sweep.csv`, `sweep.md` and `sweep.html` into `dir` (each
/// atomically: a temporary file renamed).
pub fn write(
    dir: &Path,
    report: &SweepReport,
    charts: &[crate::report::charts::Chart],
    images: &[crate::report::charts::draw::ImageFormat],
) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    if !images.is_empty() {
        let dir = dir.join("charts");
        std::fs::create_dir_all(&dir)?;
        for format in images {
            let (_, failed) = crate::report::charts::draw::write_images(charts, *format, &dir);
            if let Some((path, e)) = failed.first() {
                return Err(std::io::Error::other(format!("{}: {e}", path.display())));
            }
        }
    }
    let (header, cells, ours) = table(report);
    let failed: Vec<bool> = report.rows.iter().map(|r| r.status.failed()).collect();
    let intro: Vec<Intro> = report
        .serve_cmd
        .iter()
        .map(|cmd| Intro {
            text: "Server command: ".into(),
            code: Some(cmd.clone()),
        })
        .collect();
    write_tables(
        dir,
        "sweep",
        "Sweep",
        &json,
        &intro,
        &Table {
            header: &header,
            cells: &cells,
            ours: &ours,
            failed: &failed,
        },
        charts,
    )
}

impl Status {
    /// Whether the row counts as failed (shaded in the tables, left out of charts, a
    /// failed sweep): its point failed or its run was invalid.
    pub fn failed(self) -> bool {
        matches!(self, Self::Failed | Self::Invalid)
    }
}

/// One paragraph above a table: our own text, then the user's command as code.
pub(super) struct Intro {
    pub text: String,
    pub code: Option<String>,
}

/// A table to write: `ours[i]` says column `i` holds only our own text (names,
/// statuses, numbers), written as is; every other column's cells (and header) may
/// carry a server's or a params file's text and are made inert per format. `failed[r]`
/// shades row `r`.
pub(super) struct Table<'a> {
    pub header: &'a [String],
    pub cells: &'a [Vec<String>],
    pub ours: &'a [bool],
    pub failed: &'a [bool],
}

/// `text` as a Markdown code span: a fence of backquotes longer than any run inside,
/// control characters escaped (a code span shows everything else literally).
fn md_code(text: &str) -> String {
    let text = llmsurge_proto::inert::terminal(text);
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    format!("{fence} {text} {fence}")
}

/// Writes `{stem}.json` (`json`), and the table as `{stem}.csv`, `{stem}.md` and
/// `{stem}.html` under `title` and its `intro` paragraphs, rows marked failed shaded;
/// each file atomically (`write_atomic`). Outside text is made inert per format: CSV
/// cells that no spreadsheet evaluates, Markdown escaped, HTML escaped.
pub(super) fn write_tables(
    dir: &Path,
    stem: &str,
    title: &str,
    json: &[u8],
    intro: &[Intro],
    table: &Table<'_>,
    charts: &[crate::report::charts::Chart],
) -> std::io::Result<()> {
    use llmsurge_proto::inert;
    let Table {
        header,
        cells,
        ours,
        failed,
    } = *table;
    let put = |ext: &str, body: &[u8]| -> std::io::Result<()> {
        crate::report::write_atomic(&dir.join(format!("{stem}.{ext}")), body)
    };
    let ours_at = |i: usize| ours.get(i).copied().unwrap_or(false);
    put("json", json)?;
    let mut csv = csv::Writer::from_writer(Vec::new());
    let csv_row = |row: &[String]| -> Vec<String> {
        row.iter()
            .enumerate()
            .map(|(i, c)| match ours_at(i) {
                true => c.clone(),
                false => inert::csv_cell(c).into_owned(),
            })
            .collect()
    };
    csv.write_record(csv_row(header))
        .map_err(std::io::Error::other)?;
    for row in cells {
        csv.write_record(csv_row(row))
            .map_err(std::io::Error::other)?;
    }
    let csv = csv.into_inner().map_err(std::io::Error::other)?;
    put("csv", &csv)?;
    let md_row = |row: &[String]| -> String {
        let row: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| match ours_at(i) {
                true => c.clone(),
                false => inert::markdown(c).into_owned(),
            })
            .collect();
        format!("| {} |\n", row.join(" | "))
    };
    let mut md = format!("# {title}\n\n");
    for p in intro {
        md.push_str(&p.text);
        if let Some(code) = &p.code {
            md.push_str(&md_code(code));
        }
        md.push_str("\n\n");
    }
    md.push_str(&md_row(header));
    md.push_str(&format!("|{}\n", " --- |".repeat(header.len())));
    for row in cells {
        md.push_str(&md_row(row));
    }
    put("md", md.as_bytes())?;
    let mut html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>llmsurge {}</title>\
         <style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}\
         tr.failed{{background:#fdd}}</style></head><body><h1>{}</h1>",
        html_escape(&title.to_lowercase()),
        html_escape(title)
    );
    for p in intro {
        let mut out = html_escape(&p.text);
        if let Some(code) = &p.code {
            out.push_str(&format!("<code>{}</code>", html_escape(code)));
        }
        html.push_str(&format!("<p>{out}</p>"));
    }
    html.push_str("<table><thead><tr>");
    for h in header {
        html.push_str(&format!("<th>{}</th>", html_escape(h)));
    }
    html.push_str("</tr></thead><tbody>");
    for (i, row) in cells.iter().enumerate() {
        let class = if failed.get(i).copied().unwrap_or(false) {
            " class=\"failed\""
        } else {
            ""
        };
        html.push_str(&format!("<tr{class}>"));
        for c in row {
            html.push_str(&format!("<td>{}</td>", html_escape(c)));
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table></body></html>\n");
    if !charts.is_empty() {
        // The chart page of `llmsurge plot`, the table above its charts.
        let table = &html
            [html.find("<body>").map_or(0, |i| i + 6)..html.rfind("</body>").unwrap_or(html.len())];
        let page = crate::report::charts::page::render(title, &[], charts)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        html = page.replacen(
            "<section>",
            &format!("<section class=\"sweep-table\"><style>table.sweep td,table.sweep th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}tr.failed{{background:#fdd}}</style>{}</section><section>", table.replace("<table>", "<table class=\"sweep\">").replacen(&format!("<h1>{}</h1>", html_escape(title)), "", 1)),
            1,
        );
    }
    put("html", html.as_bytes())
}
