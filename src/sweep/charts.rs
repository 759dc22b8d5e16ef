//! The sweep's charts, as chart descriptions of `report::charts` (so the page draws them
//! and `--chart-images` writes the same ones as PNG/SVG): each headline figure against
//! each varied parameter (`--curve-by`), one line per combination of the other varied
//! parameters, and the Pareto front of output tokens/s per user (1 / TPOT p50) against
//! output tokens/s per GPU, its points labelled by their parameters. A point whose
//! figures measure no server at its load (an invalid run, a load the server did not
//! keep up with) is drawn apart, as a grey marker named in the chart's notes, and is
//! never on the front.

use super::filter::{Cell, Filter, SERVER, cell};
use super::report::{GPU_FIGURES, Outcome, Row, unit};
use crate::report::across_runs::FIGURES;
use crate::report::charts::pareto::{self, PerUser};
use crate::report::charts::{Axis, Chart, ErrorBar, PALETTE, Series};

/// `--gpus`: a count, or the parameter that holds it.
#[derive(Clone, Debug, PartialEq)]
pub enum Gpus {
    /// The same count for every point.
    Count(u32),
    /// A parameter holding each point's count (`tensor_parallel_size`).
    Param(String),
}

/// What the charts show.
#[derive(Clone, Debug, Default)]
pub struct ChartSpec {
    /// Parameters on the x axes (`serve.KEY`, `bench.KEY` or a bare key); empty: every
    /// varied one.
    pub curve_by: Vec<String>,
    /// The points shown.
    pub filter: Option<Filter>,
    /// GPUs per point, for the front's per-GPU axis.
    pub gpus: Option<Gpus>,
    /// The charts also as image files (`--chart-images`).
    pub images: Vec<crate::report::charts::draw::ImageFormat>,
}

/// Every parameter of the rows, as `serve.KEY` and `bench.KEY`, in first-seen order.
pub(super) fn params(rows: &[Row]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rows {
        let keys =
            r.at.serve_params
                .keys()
                .map(|k| format!("serve.{k}"))
                .chain(r.at.bench_params.keys().map(|k| format!("bench.{k}")));
        for k in keys {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    }
    out
}

/// The parameters whose value differs between rows (a missing one counts as a value),
/// led by [`SERVER`] when two servers differ only in what no output shows (a secret).
pub fn varied(rows: &[Row]) -> Vec<String> {
    let mut varied: Vec<String> = params(rows)
        .into_iter()
        .filter(|k| {
            let first = cell_text(rows.first(), k);
            rows.iter().any(|r| cell_text(Some(r), k) != first)
        })
        .collect();
    let shown = |r: &Row| -> Vec<Option<String>> {
        varied
            .iter()
            .filter(|k| k.starts_with("serve."))
            .map(|k| cell_text(Some(r), k))
            .collect()
    };
    let hidden_apart = rows.iter().any(|a| {
        rows.iter()
            .any(|b| a.at.server != b.at.server && shown(a) == shown(b))
    });
    if hidden_apart {
        varied.insert(0, SERVER.to_string());
    }
    varied
}

fn cell_text(row: Option<&Row>, key: &str) -> Option<String> {
    row.and_then(|r| cell(r, key)).map(|c| match c {
        Cell::Num(x) => x.to_string(),
        Cell::Text(t) => t,
    })
}

/// `key` as the rows name it: `serve.KEY`/`bench.KEY` as given, a bare key as the
/// serve parameter if any row has one, else the bench one.
pub fn qualify(rows: &[Row], key: &str) -> Option<String> {
    if key == SERVER && rows.iter().any(|r| r.at.server.is_some()) {
        return Some(key.to_string());
    }
    let all = params(rows);
    if all.iter().any(|k| k == key) {
        return Some(key.to_string());
    }
    ["serve.", "bench."]
        .iter()
        .map(|p| format!("{p}{key}"))
        .find(|k| all.contains(k))
}

/// A row's label: the varied parameters (but `skip`) and its benchmark when a point ran
/// several.
pub(super) fn label(row: &Row, varied: &[String], skip: Option<&str>, benchmark: bool) -> String {
    let mut parts: Vec<String> = varied
        .iter()
        .filter(|k| Some(k.as_str()) != skip)
        .filter_map(|k| {
            let short = k.split_once('.').map_or(k.as_str(), |(_, s)| s);
            cell_text(Some(row), k).map(|v| format!("{short}={v}"))
        })
        .collect();
    if benchmark && let Some(b) = &row.benchmark {
        parts.push(b.clone());
    }
    if parts.is_empty() {
        row.at.point.clone()
    } else {
        parts.join(" ")
    }
}

/// `s` as part of a file name: letters, digits and `_`, the rest `-`.
pub(super) fn id_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn chart(id: String, title: String, x: Axis, y: Axis) -> Chart {
    Chart::new(&id, "charts-throughput", &title, x, y)
}

/// The charts of `rows` (the points that ran), as `spec` says.
pub fn charts(rows: &[Row], spec: &ChartSpec) -> Vec<Chart> {
    let rows: Vec<&Row> = rows
        .iter()
        .filter(|r| r.outcome.measured() || unmeasured(r))
        .filter(|r| spec.filter.as_ref().is_none_or(|f| f.keeps(r)))
        .collect();
    let owned: Vec<Row> = rows.iter().map(|r| (*r).clone()).collect();
    if owned.is_empty() {
        return Vec::new();
    }
    let varied = varied(&owned);
    let several = several(&owned);
    // By default a few figures against the parameters that vary within a server's
    // curve (the benchmarks' load); every figure against the parameters asked for.
    let (by, shown): (Vec<String>, &[&str]) = if spec.curve_by.is_empty() {
        (default_axes(&owned, &varied), &DEFAULT_FIGURES)
    } else {
        let by = spec
            .curve_by
            .iter()
            .filter_map(|k| qualify(&owned, k))
            .collect();
        (by, &[])
    };
    let figures: Vec<&str> = FIGURES
        .iter()
        .copied()
        .chain(GPU_FIGURES)
        .filter(|f| shown.is_empty() || shown.contains(f))
        .filter(|f| owned.iter().any(|r| r.figures.contains_key(*f)))
        .collect();
    let mut out = Vec::new();
    for p in &by {
        let short = p.split_once('.').map_or(p.as_str(), |(_, s)| s);
        // Numbers on a numeric axis; otherwise each value at its own position.
        let values: Vec<Option<Cell>> = owned.iter().map(|r| cell(r, p)).collect();
        let numeric = values.iter().flatten().all(|c| matches!(c, Cell::Num(_)));
        let mut names: Vec<String> = Vec::new();
        let xs: Vec<Option<f64>> = values
            .iter()
            .map(|c| match c {
                Some(Cell::Num(x)) if numeric => Some(*x),
                Some(c) => {
                    let t = match c {
                        Cell::Num(x) => x.to_string(),
                        Cell::Text(t) => t.clone(),
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
        // one: a chart per meaning, never both on one axis.
        let parts = rate_parts(&owned, p);
        let split = parts.len() > 1;
        for (rate_unit, part) in parts {
            // One line per combination of the other varied parameters.
            let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
            for (i, r) in owned.iter().enumerate() {
                if xs[i].is_none() || !part[i] {
                    continue;
                }
                let l = label(r, &varied, Some(p), several);
                match groups.iter_mut().find(|(g, _)| *g == l) {
                    Some((_, v)) => v.push(i),
                    None => groups.push((l, vec![i])),
                }
            }
            for f in &figures {
                let (id_tail, title_tail) = match rate_unit.filter(|_| split) {
                    Some(u) => (format!("-{}", id_part(u)), format!(" ({u})")),
                    None => (String::new(), String::new()),
                };
                let mut c = chart(
                    format!("sweep-{}-vs-{}{id_tail}", id_part(f), id_part(p)),
                    format!("{f} vs {short}{title_tail}"),
                    Axis::new(short, rate_unit.unwrap_or("")),
                    Axis::new(f, unit(f)),
                );
                if !numeric {
                    c.x_labels = Some(names.clone());
                }
                let point = |i: usize| Some((xs[i]?, owned[i].figures.get(*f).copied()));
                for (g, (name, members)) in groups.iter().enumerate() {
                    let mut pts: Vec<(f64, Option<f64>)> = members
                        .iter()
                        .filter(|&&i| owned[i].outcome.measured())
                        .filter_map(|&i| point(i))
                        .collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let color = PALETTE[g % PALETTE.len()];
                    // `--repeat`: each mean ± the spread of its runs.
                    for &i in members.iter().filter(|&&i| owned[i].outcome.measured()) {
                        if let (Some((x, Some(y))), Some(sd)) = (point(i), owned[i].spread.get(*f))
                        {
                            c.error_bars.push(ErrorBar {
                                x,
                                low: y - sd,
                                high: y + sd,
                                color: color.into(),
                            });
                        }
                    }
                    c.series.push(Series::new(name.clone(), color, pts));
                }
                c.series
                    .retain(|s| s.points.iter().any(|(_, y)| y.is_some()));
                // The points that measured no server: markers apart, named in the notes.
                let apart: Vec<usize> = (0..owned.len())
                    .filter(|&i| {
                        part[i] && unmeasured(&owned[i]) && point(i).is_some_and(|p| p.1.is_some())
                    })
                    .collect();
                if !apart.is_empty() {
                    let mut pts: Vec<(f64, Option<f64>)> =
                        apart.iter().filter_map(|&i| point(i)).collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let mut s = Series::new(UNMEASURED, UNMEASURED_COLOR, pts);
                    s.line = false;
                    c.series.push(s);
                    c.notes = apart.iter().map(|&i| apart_note(&owned[i])).collect();
                }
                if c.series.is_empty() {
                    continue;
                }
                out.push(c);
            }
        }
    }
    out.extend(front(&owned, &varied, several, spec));
    out
}

/// The figures the page draws by default: first-token and per-token latency, the whole
/// request, the throughputs, and energy when measured (every figure with --curve-by).
const DEFAULT_FIGURES: [&str; 6] = [
    "ttft_p99",
    "tpot_p50",
    "e2e_p99",
    "requests_per_s",
    "output_tokens_per_s",
    "joules_per_output_token",
];

/// The x axes of the default page: the varied benchmark parameters with numbers (a
/// server's curve runs along its loads), else the varied serve parameters with numbers,
/// else every varied parameter.
fn default_axes(rows: &[Row], varied: &[String]) -> Vec<String> {
    let numeric = |k: &String| {
        rows.iter()
            .filter_map(|r| cell(r, k))
            .all(|c| matches!(c, Cell::Num(_)))
    };
    for prefix in ["bench.", "serve."] {
        let axes: Vec<String> = varied
            .iter()
            .filter(|k| k.starts_with(prefix) && numeric(k))
            .cloned()
            .collect();
        if !axes.is_empty() {
            return axes;
        }
    }
    varied.to_vec()
}

/// What `rate` counts at a row: streams for the concurrent profile, requests/s for the
/// open-loop ones; `None` where the row names no profile.
fn rate_unit(row: &Row) -> Option<&'static str> {
    match cell(row, "bench.profile") {
        Some(Cell::Text(p)) if p == "concurrent" => Some("streams"),
        Some(Cell::Text(p)) if p == "constant" || p == "poisson" => Some("requests/s"),
        _ => None,
    }
}

/// The rows of each chart of `param` against a figure: for `bench.rate`, one set per
/// meaning of the rate (its unit) when the rows mix them; otherwise every row.
fn rate_parts(rows: &[Row], param: &str) -> Vec<(Option<&'static str>, Vec<bool>)> {
    if param != "bench.rate" {
        return vec![(None, vec![true; rows.len()])];
    }
    // Rows without a rate are on no rate axis.
    let units: Vec<Option<Option<&'static str>>> = rows
        .iter()
        .map(|r| cell(r, param).map(|_| rate_unit(r)))
        .collect();
    let mut distinct: Vec<Option<&'static str>> = Vec::new();
    for u in units.iter().flatten() {
        if !distinct.contains(u) {
            distinct.push(*u);
        }
    }
    distinct
        .into_iter()
        .map(|d| (d, units.iter().map(|u| *u == Some(d)).collect()))
        .collect()
}

/// Whether a point ran several benchmarks (its profile's): then it has a row each.
fn several(rows: &[Row]) -> bool {
    rows.iter()
        .any(|r| rows.iter().filter(|o| o.at.point == r.at.point).count() > 1)
}

/// The Pareto front of `rows`, its points labelled by their varied parameters.
pub(super) fn front_of(rows: &[Row], spec: &ChartSpec) -> Option<Chart> {
    front(rows, &varied(rows), several(rows), spec)
}

/// The Pareto front, when any point measured TPOT and output throughput.
fn front(rows: &[Row], varied: &[String], several: bool, spec: &ChartSpec) -> Option<Chart> {
    let mut per_gpu = false;
    let points: Vec<pareto::Point> = rows
        .iter()
        .filter(|r| r.outcome.measured())
        .filter_map(|r| {
            let tpot = *r.figures.get("tpot_p50")?;
            let total = *r.figures.get("output_tokens_per_s")?;
            let gpus = match &spec.gpus {
                Some(Gpus::Count(n)) => Some(f64::from(*n)),
                Some(Gpus::Param(k)) => match cell(r, k) {
                    Some(Cell::Num(n)) if n >= 1.0 => Some(n),
                    _ => None,
                },
                None => None,
            };
            let x = match (gpus, r.figures.get("output_tokens_per_s_per_gpu")) {
                (Some(n), _) => total / n,
                // The GPU count --gpu-metrics saw.
                (None, Some(v)) => *v,
                (None, None) => total,
            };
            per_gpu |= gpus.is_some() || r.figures.contains_key("output_tokens_per_s_per_gpu");
            (tpot > 0.0 && x.is_finite()).then(|| pareto::Point {
                label: label(r, varied, None, several),
                total: x,
                per_user: 1000.0 / tpot,
            })
        })
        .collect();
    if points.is_empty() {
        return None;
    }
    let mut c = pareto::chart(&points, PerUser::P50, per_gpu.then_some(1));
    c.id = "sweep-pareto-front".into();
    c.section = "charts-throughput".into();
    c.notes = rows
        .iter()
        .filter(|r| unmeasured(r))
        .map(|r| format!("left off the front: {}", apart_note(r)))
        .collect();
    Some(c)
}

/// The legend entry of the points drawn apart.
pub const UNMEASURED: &str = "invalid or not kept up (not the server at this load)";
/// Their colour: grey, no curve's.
const UNMEASURED_COLOR: &str = "#999999";

/// Whether a row has figures that measure no server at its load: an invalid run, or a
/// load the server did not keep up with.
fn unmeasured(r: &Row) -> bool {
    matches!(r.outcome, Outcome::Invalid | Outcome::NotKeptUp) && !r.figures.is_empty()
}

/// A chart note naming a point drawn apart and why.
fn apart_note(r: &Row) -> String {
    format!(
        "{}{}: {}: {}",
        r.at.point,
        r.benchmark
            .as_deref()
            .map(|b| format!(" {b}"))
            .unwrap_or_default(),
        r.outcome.name(),
        r.error.as_deref().unwrap_or_default()
    )
}
