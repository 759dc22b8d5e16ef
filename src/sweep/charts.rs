//! The sweep's charts, as chart descriptions of `report::charts` (so the page draws them
//! and `--chart-images` writes the same ones as PNG/SVG): each headline figure against
//! each varied parameter (`--curve-by`), one line per combination of the other varied
//! parameters, and the Pareto front of output tokens/s per user (1 / TPOT p50) against
//! output tokens/s per GPU, its points labelled by their parameters. A point whose
//! figures measure no server at its load (an invalid run, a load the server did not
//! keep up with) is drawn apart, as a grey marker named in the chart's notes, and is
//! never on the front.

use super::filter::{Cell, Filter, SERVER, cell, rate_is_load};
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

/// `x` as a label shows it: whole numbers bare, others to 4 decimals.
pub(super) fn format_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// A row's values of `keys` as `k=v` words (the short parameter names). A key the row
/// lacks is left out; when it lacks every one, the words say so (`k unset`), never a
/// placeholder that reads as a value. Empty only without keys.
pub(super) fn words(row: &Row, keys: &[&str]) -> String {
    let short = |k: &str| k.split_once('.').map_or(k, |(_, s)| s).to_string();
    let set: Vec<String> = keys
        .iter()
        .filter_map(|k| {
            let v = match cell(row, k)? {
                Cell::Num(x) => format_num(x),
                Cell::Text(t) => t,
            };
            Some(format!("{}={v}", short(k)))
        })
        .collect();
    if set.is_empty() && !keys.is_empty() {
        let unset: Vec<String> = keys.iter().map(|k| short(k)).collect();
        return format!("{} unset", unset.join(", "));
    }
    set.join(" ")
}

/// A row's curve name: the varied parameters (but `skip`) and its benchmark when a point
/// ran several (unless the label shows its load already); empty when nothing tells it
/// apart.
fn curve_name(row: &Row, varied: &[String], skip: Option<&str>, benchmark: bool) -> String {
    let keys: Vec<&str> = varied
        .iter()
        .map(String::as_str)
        .filter(|k| Some(*k) != skip)
        .collect();
    let mut parts = vec![words(row, &keys)];
    // A `rate` list's benchmark is its rate, shown on the x axis or in the words.
    let load_shown = rate_is_load(row)
        && (skip == Some("bench.rate") || varied.iter().any(|k| k == "bench.rate"));
    if benchmark
        && !load_shown
        && let Some(b) = &row.benchmark
    {
        parts.push(b.clone());
    }
    parts.retain(|p| !p.is_empty());
    parts.join(" ")
}

/// A row's label: [`curve_name`], else its point.
pub(super) fn label(row: &Row, varied: &[String], skip: Option<&str>, benchmark: bool) -> String {
    let name = curve_name(row, varied, skip, benchmark);
    if name.is_empty() {
        row.at.point.clone()
    } else {
        name
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
                // Rows told apart by nothing but the x axis are one curve.
                let mut l = curve_name(r, &varied, Some(p), several);
                if l.is_empty() {
                    l = ALL_POINTS.into();
                }
                match groups.iter_mut().find(|(g, _)| *g == l) {
                    Some((_, v)) => v.push(i),
                    None => groups.push((l, vec![i])),
                }
            }
            for f in &figures {
                let (id_tail, title_tail) = part_names(rate_unit, split);
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
                    c.notes.extend(apart.iter().map(|&i| apart_note(&owned[i])));
                }
                if c.series.is_empty() {
                    continue;
                }
                // The points with this figure but no value of the x parameter: on no
                // curve, and said so.
                let without: Vec<&Row> = (0..owned.len())
                    .filter(|&i| xs[i].is_none() && owned[i].figures.contains_key(*f))
                    .map(|i| &owned[i])
                    .collect();
                if let Some(note) = left_out(&without, short, several) {
                    c.notes.push(note);
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

/// The name of a curve of rows told apart by nothing but the x axis.
pub(super) const ALL_POINTS: &str = "all points";

/// The note naming the rows a chart leaves out for want of a value of `x` (its short
/// name), if any; each by its point, and its benchmark when points ran `several`.
pub(super) fn left_out(rows: &[&Row], x: &str, several: bool) -> Option<String> {
    if rows.is_empty() {
        return None;
    }
    let names: Vec<String> = rows.iter().map(|r| named(r, several)).collect();
    Some(format!("left out (no value of {x}): {}", names.join(", ")))
}

/// A row as notes name it: its point, and its benchmark when points ran `several`.
fn named(r: &Row, several: bool) -> String {
    match &r.benchmark {
        Some(b) if several => format!("{} {b}", r.at.point),
        _ => r.at.point.clone(),
    }
}

/// The id and title endings of a chart of one meaning of `rate` (`unit`), when `split`
/// (the rows mix them).
pub(super) fn part_names(unit: Option<&str>, split: bool) -> (String, String) {
    match unit.filter(|_| split) {
        Some(u) => (format!("-{}", id_part(u)), format!(" ({u})")),
        None => (String::new(), String::new()),
    }
}

/// What `rate` counts at a row: its benchmark's load's unit, else streams for the
/// concurrent profile and requests/s for the open-loop ones; `None` where the row names
/// no profile.
fn rate_unit(row: &Row) -> Option<&'static str> {
    if rate_is_load(row) {
        return row.load.map(|l| l.unit.name());
    }
    match cell(row, "bench.profile") {
        Some(Cell::Text(p)) if p == "concurrent" => Some("streams"),
        Some(Cell::Text(p)) if p == "constant" || p == "poisson" => Some("requests/s"),
        _ => None,
    }
}

/// The rows of each chart of `param` against a figure: for `bench.rate`, one set per
/// meaning of the rate (its unit) when the rows mix them; otherwise every row.
pub(super) fn rate_parts(rows: &[Row], param: &str) -> Vec<(Option<&'static str>, Vec<bool>)> {
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
pub(super) fn several<'a>(rows: impl IntoIterator<Item = &'a Row>) -> bool {
    let points: Vec<&str> = rows.into_iter().map(|r| r.at.point.as_str()).collect();
    points
        .iter()
        .enumerate()
        .any(|(i, p)| points[..i].contains(p))
}

/// The Pareto front of `rows`, its points labelled by their varied parameters.
pub(super) fn front_of(rows: &[Row], spec: &ChartSpec) -> Option<Chart> {
    front(rows, &varied(rows), several(rows), spec)
}

/// A row's GPU count under `--gpus PARAM`: its value of `param` when that is a positive
/// whole number; otherwise why not, as a note's words.
fn gpu_count(row: &Row, param: &str) -> Result<f64, String> {
    let short = param.split_once('.').map_or(param, |(_, s)| s);
    match cell(row, param) {
        Some(Cell::Num(n)) if n >= 1.0 && n.fract() == 0.0 && n.is_finite() => Ok(n),
        Some(Cell::Num(n)) => Err(format!("{short}={}", format_num(n))),
        Some(Cell::Text(t)) => Err(format!("{short}={t:?}")),
        None => Err(format!("no {short}")),
    }
}

/// `--gpus VALUE` against the points `rows` (every point the sweep will run, or ran):
/// a count of 1 or more, or a parameter whose value at every point is a positive whole
/// number. `params` names where the parameters come from, for the error.
pub fn gpus(rows: &[Row], value: &str, params: &str) -> Result<Gpus, String> {
    let value = value.trim();
    match value.parse::<u32>() {
        Ok(0) => return Err("--gpus: 0 GPUs (give 1 or more)".into()),
        Ok(n) => return Ok(Gpus::Count(n)),
        Err(_) => {}
    }
    let Some(param) = qualify(rows, value) else {
        return Err(format!(
            "--gpus: {value:?} is neither a count nor a parameter of {params}"
        ));
    };
    for r in rows {
        if let Err(why) = gpu_count(r, &param) {
            let at = match (&r.at.server, r.at.point.as_str()) {
                (_, p) if !p.is_empty() => format!("point {p}"),
                (Some(s), _) => format!("serve configuration {s}"),
                (None, _) => format!("benchmark configuration b{}", r.at.bench_index),
            };
            return Err(format!(
                "--gpus {value}: {at} has {why}, not a GPU count (give every point {value} as a whole number, 1 or more)"
            ));
        }
    }
    Ok(Gpus::Param(param))
}

/// The Pareto front, when any point measured TPOT and output throughput.
fn front(rows: &[Row], varied: &[String], several: bool, spec: &ChartSpec) -> Option<Chart> {
    let mut per_gpu = false;
    // Points with no GPU count under `--gpus PARAM`: off the per-GPU axis, and said so.
    let mut no_count: Vec<String> = Vec::new();
    let points: Vec<pareto::Point> = rows
        .iter()
        .filter(|r| r.outcome.measured())
        .filter_map(|r| {
            let tpot = *r.figures.get("tpot_p50")?;
            let total = *r.figures.get("output_tokens_per_s")?;
            let gpus = match &spec.gpus {
                Some(Gpus::Count(n)) => Some(f64::from(*n)),
                Some(Gpus::Param(k)) => match gpu_count(r, k) {
                    Ok(n) => Some(n),
                    Err(why) => {
                        no_count.push(format!(
                            "left off the front: {}: {why}, no GPU count for --gpus",
                            named(r, several)
                        ));
                        return None;
                    }
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
    // The points left off first, then the front's own notes (a narrow range).
    let own = std::mem::take(&mut c.notes);
    c.notes = rows
        .iter()
        .filter(|r| unmeasured(r))
        .map(|r| format!("left off the front: {}", apart_note(r)))
        .chain(no_count)
        .collect();
    c.notes.extend(own);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::report::{Load, LoadUnit, Point, Status};

    /// A measured row of point `point` with these params and figures.
    fn row(point: &str, serve: &str, bench: &str, figures: &[(&str, f64)]) -> Row {
        let at = Point {
            point: point.into(),
            serve_index: Some(0),
            server: Some(point.split('-').next().unwrap_or(point).into()),
            bench_index: 0,
            serve_params: serde_json::from_str(serve).expect("json"),
            bench_params: serde_json::from_str(bench).expect("json"),
        };
        let mut r = Row::new(at, Status::Ok, Outcome::Ok);
        r.exit_code = Some(0);
        r.figures = figures.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        r
    }

    #[test]
    fn a_rate_list_puts_each_benchmark_of_its_point_at_its_own_rate() {
        // One configuration, four rates: one point, a benchmark (row) per rate.
        let rows: Vec<Row> = [6.0, 10.0, 14.0, 20.0]
            .iter()
            .map(|&rate| {
                let mut r = row(
                    "s0-b0",
                    "{}",
                    r#"{"profile": "constant", "rate": [6, 10, 14, 20]}"#,
                    &[("ttft_p99", rate * 2.0)],
                );
                r.benchmark = Some(format!("constant@{rate}"));
                r.load = Some(Load {
                    value: rate,
                    unit: LoadUnit::RequestsPerS,
                });
                r
            })
            .collect();
        let all = charts(&rows, &ChartSpec::default());
        let c = all
            .iter()
            .find(|c| c.id == "sweep-ttft_p99-vs-bench-rate")
            .expect("a curve against the rate");
        assert_eq!(c.x.unit, "requests/s");
        assert_eq!(c.series.len(), 1, "{:?}", c.series);
        assert_eq!(
            c.series[0].points,
            [
                (6.0, Some(12.0)),
                (10.0, Some(20.0)),
                (14.0, Some(28.0)),
                (20.0, Some(40.0))
            ]
        );
    }

    #[test]
    fn the_front_keeps_its_narrow_range_note_and_leaves_off_points_without_a_gpu_count() {
        // 1000 / TPOT within 0.5%: a sliver of the y axis, marked as such.
        let rows = vec![
            row(
                "s0-b0",
                r#"{"tp": 1}"#,
                "{}",
                &[("tpot_p50", 10.0), ("output_tokens_per_s", 100.0)],
            ),
            row(
                "s1-b0",
                r#"{"tp": 2}"#,
                "{}",
                &[("tpot_p50", 10.05), ("output_tokens_per_s", 300.0)],
            ),
            row(
                "s2-b0",
                r#"{"tp": "two"}"#,
                "{}",
                &[("tpot_p50", 10.02), ("output_tokens_per_s", 900.0)],
            ),
            row(
                "s3-b0",
                r#"{"tp": 0}"#,
                "{}",
                &[("tpot_p50", 10.01), ("output_tokens_per_s", 900.0)],
            ),
        ];
        let spec = ChartSpec {
            gpus: Some(Gpus::Param("serve.tp".into())),
            ..ChartSpec::default()
        };
        let c = front_of(&rows, &spec).expect("a front");
        assert!(
            c.notes.iter().any(|n| n.starts_with("narrow range")),
            "{:?}",
            c.notes
        );
        for p in ["s2-b0", "s3-b0"] {
            assert!(
                c.notes
                    .iter()
                    .any(|n| n.starts_with(&format!("left off the front: {p}"))),
                "{p}: {:?}",
                c.notes
            );
        }
        // Only the two with a count, each over its own.
        let xs: Vec<f64> = c.series[0].points.iter().map(|p| p.0).collect();
        assert_eq!(xs, [100.0, 150.0]);

        // Known up front, the same counts are refused, naming the flag and the point.
        let e = gpus(&rows, "tp", "--serve-params").expect_err("two is no count");
        assert!(e.starts_with("--gpus tp: point s2-b0"), "{e}");
        assert!(gpus(&rows[..2], "tp", "--serve-params").is_ok());
        assert!(gpus(&rows, "0", "--serve-params").is_err());
        assert_eq!(gpus(&rows, "4", "x"), Ok(Gpus::Count(4)));
    }

    #[test]
    fn a_point_without_the_x_parameter_is_named_in_the_notes_and_labels_say_unset() {
        let f = |y| [("ttft_p99", y)];
        let rows = vec![
            row("s0-b0", r#"{"error_rate": 0}"#, "{}", &f(1.0)),
            row("s1-b0", r#"{"error_rate": 0.5}"#, "{}", &f(2.0)),
            row("s2-b0", r#"{"drop_ignore_eos": true}"#, "{}", &f(3.0)),
        ];
        let all = charts(&rows, &ChartSpec::default());
        let c = all
            .iter()
            .find(|c| c.id == "sweep-ttft_p99-vs-serve-error_rate")
            .expect("the curve");
        let labels: Vec<&str> = c.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["drop_ignore_eos unset"]);
        assert_eq!(c.series[0].points.len(), 2);
        assert!(
            c.notes
                .contains(&"left out (no value of error_rate): s2-b0".to_string()),
            "{:?}",
            c.notes
        );
    }
}
