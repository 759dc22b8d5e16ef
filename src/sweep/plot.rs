//! `llmsurge sweep plot` and `sweep plot-pareto`: a finished sweep drawn again from its
//! `sweep.json`, without its servers, with the axes, curves and panels chosen (vLLM's
//! `vllm bench sweep plot` and `plot_pareto`).

use super::charts::{self, ChartSpec, id_part};
use super::filter::{Cell, Filter, cell};
use super::report::{GPU_FIGURES, Row, SweepReport, unit};
use crate::cli::UsageError;
use crate::cli::args::{SweepPlotArgs, SweepPlotParetoArgs};
use crate::exit_codes;
use crate::report::across_runs::FIGURES;
use crate::report::charts::draw::{ImageFormat, write_images};
use crate::report::charts::{Axis, Chart, Mark, PALETTE, Series};
use std::path::Path;

/// What to write.
struct Outputs {
    html: bool,
    images: Vec<ImageFormat>,
}

fn outputs(values: &[String]) -> Result<Outputs, UsageError> {
    let mut out = Outputs {
        html: false,
        images: Vec::new(),
    };
    for v in values.iter().map(|v| v.trim()).filter(|v| !v.is_empty()) {
        match v {
            "html" => out.html = true,
            "png" => out.images.push(ImageFormat::Png),
            "svg" => out.images.push(ImageFormat::Svg),
            other => {
                return Err(UsageError(format!(
                    "--outputs: unknown format {other:?} (expected html, png or svg)"
                )));
            }
        }
    }
    if !out.html && out.images.is_empty() {
        return Err(UsageError(
            "--outputs: nothing to write (give html, png or svg)".into(),
        ));
    }
    Ok(out)
}

/// The sweep report in `dir`.
fn load(dir: &Path) -> Result<SweepReport, UsageError> {
    let path = dir.join("sweep.json");
    let text = std::fs::read(&path).map_err(|e| {
        UsageError(format!(
            "{}: {e} (give the --output-dir of a finished `sweep serve`)",
            path.display()
        ))
    })?;
    serde_json::from_slice(&text).map_err(|e| {
        UsageError(format!(
            "{}: not a sweep report: {e} (serve-sla writes sla.json, which this does not draw)",
            path.display()
        ))
    })
}

/// The rows drawn: those whose figures measure the server at the load offered (the
/// sweep page's curves: ok, SLO fail, inconclusive) and pass `filter`; a note names the
/// others with their outcome.
fn drawn(report: &SweepReport, filter: Option<&Filter>) -> Vec<Row> {
    let (kept, apart): (Vec<&Row>, Vec<&Row>) = report
        .rows
        .iter()
        .partition(|r| !r.status.failed() && r.outcome.measured());
    if !apart.is_empty() {
        let names: Vec<String> = apart
            .iter()
            .map(|r| match &r.benchmark {
                Some(b) => format!("{} {b} ({})", r.at.point, r.outcome.name()),
                None => format!("{} ({})", r.at.point, r.outcome.name()),
            })
            .collect();
        crate::stdout::eprintln(&format!(
            "note: {} row(s) not drawn, their figures do not measure the server at the load offered: {}",
            apart.len(),
            llmsurge_proto::inert::terminal(&names.join(", "))
        ));
    }
    kept.into_iter()
        .filter(|r| filter.is_none_or(|f| f.keeps(r)))
        .cloned()
        .collect()
}

/// Whether `key` names a headline figure.
fn is_figure(key: &str) -> bool {
    FIGURES.contains(&key) || GPU_FIGURES.contains(&key)
}

/// `key` as the rows name it (`serve.K`, `bench.K`, or, where `figures` allows, a figure
/// some drawn point has), or a usage error naming `flag` and what the sweep has.
fn resolve(rows: &[Row], flag: &str, key: &str, figures: bool) -> Result<String, UsageError> {
    let key = key.trim();
    let measured: Vec<&str> = FIGURES
        .iter()
        .chain(&GPU_FIGURES)
        .copied()
        .filter(|f| rows.iter().any(|r| r.figures.contains_key(*f)))
        .collect();
    if figures && measured.contains(&key) {
        return Ok(key.to_string());
    }
    if let Some(q) = charts::qualify(rows, key) {
        return Ok(q);
    }
    let params = charts::params(rows).join(", ");
    let params = if params.is_empty() { "none" } else { &params };
    Err(UsageError(if !figures && is_figure(key) {
        format!("{flag}: {key} is a figure; give a parameter (the sweep's: {params})")
    } else if figures {
        format!(
            "{flag}: no figure or parameter {key:?} among the points drawn (parameters: {params}; figures: {})",
            measured.join(", ")
        )
    } else {
        format!("{flag}: no parameter {key:?} in the sweep (parameters: {params})")
    }))
}

fn resolve_all(
    rows: &[Row],
    flag: &str,
    keys: &[String],
    figures: bool,
) -> Result<Vec<String>, UsageError> {
    keys.iter()
        .map(|k| k.trim())
        .filter(|k| !k.is_empty())
        .map(|k| resolve(rows, flag, k, figures))
        .collect()
}

/// A row's values of `keys`, as `k=v` words (see [`charts::words`]).
fn words(row: &Row, keys: &[String]) -> String {
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    charts::words(row, &keys)
}

/// The indices `of` rows grouped by their values of `keys`, in first-seen order.
fn group(rows: &[Row], of: &[usize], keys: &[String]) -> Vec<(String, Vec<usize>)> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for &i in of {
        let name = words(&rows[i], keys);
        match groups.iter_mut().find(|(g, _)| *g == name) {
            Some((_, members)) => members.push(i),
            None => groups.push((name, vec![i])),
        }
    }
    groups
}

/// The style of the `i`th curve: a colour each, then the colours again dashed, so no two
/// of the first 20 curves look alike.
fn style(i: usize) -> (&'static str, bool) {
    (PALETTE[i % PALETTE.len()], (i / PALETTE.len()) % 2 == 1)
}

/// An axis for `key`: its name and unit (parameters have none).
fn axis(key: &str) -> Axis {
    let short = key.split_once('.').map_or(key, |(_, s)| s);
    Axis::new(short, if is_figure(key) { unit(key) } else { "" })
}

/// The curves when --curve-by is not given: one per server configuration (the varied
/// serve parameters), its points the benchmarks run against it, as vLLM draws a
/// latency–throughput curve per server; without varied serve parameters, one per
/// combination of the varied benchmark parameters but the load (`rate`).
fn default_curves(rows: &[Row], x: &str, panels: &[String]) -> Vec<String> {
    let free: Vec<String> = charts::varied(rows)
        .into_iter()
        .filter(|k| k != x && !panels.contains(k))
        .collect();
    let serve: Vec<String> = free
        .iter()
        .filter(|k| k.starts_with("serve."))
        .cloned()
        .collect();
    if !serve.is_empty() {
        return serve;
    }
    free.into_iter().filter(|k| k != "bench.rate").collect()
}

/// The charts of `sweep plot`.
fn plot_charts(rows: &[Row], args: &SweepPlotArgs) -> Result<Vec<Chart>, UsageError> {
    let x = resolve(rows, "--x", &args.x, true)?;
    let ys = resolve_all(rows, "--y", &args.y, true)?;
    if ys.is_empty() {
        return Err(UsageError("--y: no figure given".into()));
    }
    let fig_by = resolve_all(rows, "--fig-by", &args.fig_by, false)?;
    let row_by = resolve_all(rows, "--row-by", &args.row_by, false)?;
    let col_by = resolve_all(rows, "--col-by", &args.col_by, false)?;
    let label_by = resolve_all(rows, "--label-by", &args.label_by, true)?;
    let panels: Vec<String> = fig_by
        .iter()
        .chain(&row_by)
        .chain(&col_by)
        .cloned()
        .collect();
    let curve_by = if args.curve_by.iter().any(|k| !k.trim().is_empty()) {
        resolve_all(rows, "--curve-by", &args.curve_by, false)?
    } else {
        default_curves(rows, &x, &panels)
    };
    // Numbers on a numeric x axis; otherwise each value at its own position.
    let values: Vec<Option<Cell>> = rows.iter().map(|r| cell(r, &x)).collect();
    let numeric = values.iter().flatten().all(|c| matches!(c, Cell::Num(_)));
    let mut names: Vec<String> = Vec::new();
    let xs: Vec<Option<f64>> = values
        .into_iter()
        .map(|c| match c {
            Some(Cell::Num(v)) if numeric => Some(v),
            Some(c) => {
                let t = match c {
                    Cell::Num(v) => charts::format_num(v),
                    Cell::Text(t) => t,
                };
                let i = names.iter().position(|n| *n == t).unwrap_or_else(|| {
                    names.push(t);
                    names.len() - 1
                });
                Some(i as f64)
            }
            None => None,
        })
        .collect();
    // `rate` counts streams for a concurrent profile and requests/s for an open-loop
    // one: a chart per meaning, never both on one axis (as the sweep page splits it).
    let parts = charts::rate_parts(rows, &x);
    let split = parts.len() > 1;
    let several = charts::several(rows);
    let mut out = Vec::new();
    for y in &ys {
        let all: Vec<usize> = (0..rows.len()).collect();
        for (panel, members) in group(rows, &all, &panels) {
            for (rate_unit, part) in &parts {
                let (id_tail, title_tail) = charts::part_names(*rate_unit, split);
                let title = if panel.is_empty() {
                    format!("{} vs {}{title_tail}", axis(y).name, axis(&x).name)
                } else {
                    format!(
                        "{} vs {}{title_tail} ({panel})",
                        axis(y).name,
                        axis(&x).name
                    )
                };
                let mut id = format!("plot-{}-vs-{}{id_tail}", id_part(y), id_part(&x));
                if !panel.is_empty() {
                    id.push('-');
                    id.push_str(&id_part(&panel));
                }
                let mut x_axis = axis(&x);
                if let Some(u) = rate_unit {
                    x_axis.unit = (*u).into();
                }
                let mut c = Chart::new(&id, "charts-throughput", &title, x_axis, axis(y));
                if !numeric {
                    c.x_labels = Some(names.clone());
                }
                let on: Vec<usize> = members.iter().copied().filter(|&k| part[k]).collect();
                for (i, (name, curve)) in group(rows, &on, &curve_by).iter().enumerate() {
                    let mut pts: Vec<(f64, Option<f64>, &Row)> = curve
                        .iter()
                        .filter_map(|&k| {
                            let yv = match cell(&rows[k], y) {
                                Some(Cell::Num(v)) => Some(v),
                                _ => None,
                            };
                            Some((xs[k]?, yv, &rows[k]))
                        })
                        .collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    if !label_by.is_empty() {
                        for (px, py, r) in &pts {
                            if let Some(py) = py {
                                c.marks.push(Mark {
                                    x: *px,
                                    y: *py,
                                    label: words(r, &label_by),
                                });
                            }
                        }
                    }
                    let (color, dashed) = style(i);
                    let mut series = Series::new(
                        if name.is_empty() {
                            charts::ALL_POINTS
                        } else {
                            name.as_str()
                        },
                        color,
                        pts.iter().map(|(a, b, _)| (*a, *b)).collect(),
                    );
                    series.dashed = dashed;
                    c.series.push(series);
                }
                c.series
                    .retain(|s| s.points.iter().any(|(_, y)| y.is_some()));
                if c.series.is_empty() {
                    c.no_data = Some(format!("no point has both {x} and {y}"));
                }
                // The panel's points this chart cannot place, and why: on no curve, said
                // so rather than silently gone.
                let short = |k: &str| k.split_once('.').map_or(k, |(_, s)| s).to_string();
                let without = |key: &str| -> Vec<&Row> {
                    members
                        .iter()
                        .filter(|&&k| cell(&rows[k], key).is_none())
                        .map(|&k| &rows[k])
                        .collect()
                };
                for key in [x.as_str(), y.as_str()] {
                    if let Some(note) = charts::left_out(&without(key), &short(key), several) {
                        c.notes.push(note);
                    }
                    if x == *y {
                        break;
                    }
                }
                out.push(c);
            }
        }
    }
    Ok(out)
}

/// Writes `charts` as `outputs` says into `dir`; prints each file. Returns the exit code.
fn write(charts: &[Chart], outputs: &Outputs, dir: &Path, title: &str) -> i32 {
    if let Err(e) = std::fs::create_dir_all(dir) {
        crate::stdout::eprintln(&format!("error: --output-dir {}: {e}", dir.display()));
        return exit_codes::USAGE;
    }
    let mut code = exit_codes::OK;
    for format in &outputs.images {
        let (written, failed) = write_images(charts, *format, dir);
        for p in written {
            crate::stdout::println(&format!("wrote {}", p.display()));
        }
        for (p, e) in failed {
            crate::stdout::eprintln(&format!("error: cannot write {}: {e}", p.display()));
            code = exit_codes::RUN_FAILED;
        }
    }
    if outputs.html {
        let path = dir.join("plot.html");
        let page = crate::report::charts::page::render(title, &[], charts)
            .map_err(|e| e.to_string())
            .and_then(|html| {
                crate::report::write_atomic(&path, html.as_bytes()).map_err(|e| e.to_string())
            });
        match page {
            Ok(()) => crate::stdout::println(&format!("wrote {}", path.display())),
            Err(e) => {
                crate::stdout::eprintln(&format!("error: cannot write {}: {e}", path.display()));
                code = exit_codes::RUN_FAILED;
            }
        }
    }
    code
}

fn filter_of(rows: &[Row], spec: Option<&str>) -> Result<Option<Filter>, UsageError> {
    spec.map(|s| {
        Filter::parse(s, |k| is_figure(k) || charts::qualify(rows, k).is_some()).map_err(UsageError)
    })
    .transpose()
}

/// Runs `sweep plot`; returns the exit code.
pub fn sweep_plot(args: &SweepPlotArgs) -> i32 {
    let run = || -> Result<i32, UsageError> {
        let outputs = outputs(&args.drawn.outputs)?;
        let report = load(&args.dir)?;
        let filter = filter_of(&report.rows, args.drawn.filter.as_deref())?;
        let rows = drawn(&report, filter.as_ref());
        if rows.is_empty() {
            return Err(UsageError(format!(
                "{}: no point to draw (every row failed, was invalid or was filtered out)",
                args.dir.join("sweep.json").display()
            )));
        }
        let charts = plot_charts(&rows, args)?;
        let dir = args
            .drawn
            .output_dir
            .clone()
            .unwrap_or_else(|| args.dir.join("plots"));
        Ok(write(&charts, &outputs, &dir, "Sweep plot"))
    };
    run().unwrap_or_else(|UsageError(m)| crate::cli::usage_error(&m))
}

/// Runs `sweep plot-pareto`; returns the exit code.
pub fn sweep_plot_pareto(args: &SweepPlotParetoArgs) -> i32 {
    let run = || -> Result<i32, UsageError> {
        let outputs = outputs(&args.drawn.outputs)?;
        let report = load(&args.dir)?;
        let filter = filter_of(&report.rows, args.drawn.filter.as_deref())?;
        let rows = drawn(&report, filter.as_ref());
        let gpus = match args.gpus.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(g) => Some(charts::gpus(&rows, g, "the sweep").map_err(UsageError)?),
        };
        let spec = ChartSpec {
            gpus,
            ..ChartSpec::default()
        };
        let Some(front) = charts::front_of(&rows, &spec) else {
            return Err(UsageError(format!(
                "{}: no point measured both TPOT and output tokens/s: no front to draw",
                args.dir.join("sweep.json").display()
            )));
        };
        let dir = args
            .drawn
            .output_dir
            .clone()
            .unwrap_or_else(|| args.dir.join("plots"));
        Ok(write(&[front], &outputs, &dir, "Sweep Pareto front"))
    };
    run().unwrap_or_else(|UsageError(m)| crate::cli::usage_error(&m))
}
