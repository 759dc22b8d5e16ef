//! What every chart of the report shows, as plain data: its title, axes (names and
//! units), series and points. One description feeds both renderers, so the HTML page and
//! the static images cannot drift: the page embeds [`charts`] as JSON and its script
//! (`templates/report.js`) hands each to uPlot; [`draw`] draws the same descriptions into
//! SVG and PNG files (`--outputs png,svg`).

pub mod compare;
pub mod draw;
pub mod gpu;
pub mod page;
pub mod pareto;
pub mod slices;
pub mod tiers;
pub mod timeline;

use super::json::Report;
use llmsurge_coordinator::{BenchmarkResult, Strategy};
use serde::Serialize;

/// The colours of the series, by index (the page's palette).
pub const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// The percentiles of the distribution charts, as keys of the report and as axis labels.
const PCTS: [(&str, &str); 11] = [
    ("p0_1", "0.1"),
    ("p1", "1"),
    ("p5", "5"),
    ("p10", "10"),
    ("p25", "25"),
    ("p50", "50"),
    ("p75", "75"),
    ("p90", "90"),
    ("p95", "95"),
    ("p99", "99"),
    ("p99_9", "99.9"),
];

/// One axis: what it measures and in what unit. Both renderers label it `name (unit)`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Axis {
    /// What the axis measures ("achieved request rate").
    pub name: String,
    /// Its unit ("requests/s"); empty for none.
    pub unit: String,
}

impl Axis {
    /// An axis named `name` in `unit`.
    pub fn new(name: &str, unit: &str) -> Self {
        Axis {
            name: name.into(),
            unit: unit.into(),
        }
    }

    /// The label drawn beside the axis.
    pub fn label(&self) -> String {
        if self.unit.is_empty() {
            self.name.clone()
        } else {
            format!("{} ({})", self.name, self.unit)
        }
    }
}

/// One line of a chart.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Series {
    /// Its legend entry.
    pub label: String,
    /// Its colour, `#rrggbb`.
    pub color: String,
    /// Measured on the right-hand axis (`y2`) rather than the left.
    pub right: bool,
    /// Drawn dashed (a target, or the client's figure beside the server's).
    pub dashed: bool,
    /// Each point marked (sparse points, one per benchmark), or a plain line.
    pub markers: bool,
    /// The points joined by a line; without, markers only (a scatter).
    pub line: bool,
    /// `[x, y]`; a `y` of `None` breaks the line there.
    pub points: Vec<(f64, Option<f64>)>,
    /// A sampled gauge: each value holds until the next sample (drawn as steps), not a
    /// ramp between samples that were never measured.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub step: bool,
}

impl Series {
    /// A line of `points` in `color`, with a marker at each point.
    pub fn new(label: impl Into<String>, color: &str, points: Vec<(f64, Option<f64>)>) -> Self {
        Series {
            label: label.into(),
            color: color.into(),
            right: false,
            dashed: false,
            markers: true,
            line: true,
            points,
            step: false,
        }
    }

    fn has_value(&self) -> bool {
        self.points
            .iter()
            .any(|(_, y)| y.is_some_and(f64::is_finite))
    }
}

/// A point marked on a chart with a note (the knee of a curve).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mark {
    /// Where, in the chart's coordinates.
    pub x: f64,
    /// Where, in the chart's coordinates.
    pub y: f64,
    /// The note beside it.
    pub label: String,
}

/// A vertical error bar: at `x`, from `low` to `high` on the left-hand axis (the spread
/// of `--repeat` runs about their mean), in its series' colour.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorBar {
    /// Where, in the chart's coordinates.
    pub x: f64,
    /// Its low end.
    pub low: f64,
    /// Its high end.
    pub high: f64,
    /// Its colour, `#rrggbb`.
    pub color: String,
}

/// What a bar of a bar chart stands for: its legend entry and colour.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BarKind {
    /// Its legend entry.
    pub label: String,
    /// Its colour, `#rrggbb`.
    pub color: String,
}

/// One horizontal bar: `[row, from x, to x, kind]` (an index into [`Bars::kinds`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Bar(pub f64, pub f64, pub f64, pub usize);

/// Horizontal bars, one row each (the request timeline): drawn rather than lines.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bars {
    /// What the bars stand for, in legend order.
    pub kinds: Vec<BarKind>,
    /// The bars.
    pub items: Vec<Bar>,
}

/// One chart.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Chart {
    /// The file name of its images (`ttft-vs-achieved-rate` → `.png`, `.svg`), unique in
    /// a report.
    pub id: String,
    /// The page section it belongs to (`charts-load`, `charts-server`, …).
    pub section: String,
    /// Its title.
    pub title: String,
    /// The horizontal axis.
    pub x: Axis,
    /// The left-hand axis.
    pub y: Axis,
    /// The right-hand axis, when a series uses it.
    pub y2: Option<Axis>,
    /// A categorical x axis: the label of each integer x (the percentile charts).
    pub x_labels: Option<Vec<String>>,
    /// A label per x value shown beside it in the legend (the benchmark at an offered load).
    pub x_names: Option<Vec<(f64, String)>>,
    /// The lines.
    pub series: Vec<Series>,
    /// Points marked with a note.
    pub marks: Vec<Mark>,
    /// Why nothing is drawn, when no series has a value.
    pub no_data: Option<String>,
    /// The y axes span the data only, rather than start at zero (a front whose points
    /// differ by a few percent).
    pub y_data_only: bool,
    /// The legend in the lower left corner, where the data leaves room (a front falls
    /// from the upper left), rather than the upper left.
    pub legend_lower: bool,
    /// Bars drawn beside (or instead of) the lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bars: Option<Bars>,
    /// The x axis spans this range rather than the data's (charts that share a time
    /// axis, such as the timeline and the load beside it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_range: Option<(f64, f64)>,
    /// Charts with the same group zoom and pan together in the HTML page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_group: Option<String>,
    /// Lines of text shown with the chart (the regression verdicts of a comparison):
    /// under the plot in the page, at the foot of the image.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Error bars drawn over the lines (a sweep's `--repeat` spreads).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub error_bars: Vec<ErrorBar>,
}

impl Chart {
    /// A chart with no series yet, in the page section `section`.
    pub fn new(id: &str, section: &str, title: &str, x: Axis, y: Axis) -> Self {
        Chart {
            id: id.into(),
            section: section.into(),
            title: title.into(),
            x,
            y,
            y2: None,
            x_labels: None,
            x_names: None,
            series: Vec::new(),
            marks: Vec::new(),
            no_data: None,
            y_data_only: false,
            legend_lower: false,
            bars: None,
            x_range: None,
            x_group: None,
            notes: Vec::new(),
            error_bars: Vec::new(),
        }
    }

    /// Leaves out series without a value; with none left the chart says `why`.
    fn finish(mut self, why: &str) -> Self {
        self.series.retain(Series::has_value);
        if self.series.is_empty() && self.bars.as_ref().is_none_or(|b| b.items.is_empty()) {
            self.no_data = Some(why.into());
        }
        self
    }

    /// Whether it has something to draw.
    /// For a chart whose y axis spans its data only: a note when that span is a sliver
    /// of the values (under 5%), so a few tenths of a percent do not read as a wide
    /// spread. Call once its series are in.
    pub fn note_narrow_range(&mut self) {
        if !self.y_data_only {
            return;
        }
        let ys: Vec<f64> = self
            .series
            .iter()
            .filter(|s| !s.right)
            .flat_map(|s| s.points.iter().filter_map(|p| p.1))
            .filter(|y| y.is_finite())
            .collect();
        let lo = ys.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let scale = lo.abs().max(hi.abs());
        // One value (a lone point, drawn as itself and as its front) spans nothing: no
        // range to call narrow.
        if hi <= lo || scale == 0.0 || hi - lo >= 0.05 * scale {
            return;
        }
        self.notes.push(format!(
            "narrow range: the {} axis spans only {:.3} to {:.3} ({:.2}% of its values)",
            self.y.name,
            lo,
            hi,
            100.0 * (hi - lo) / scale
        ));
    }

    pub fn drawable(&self) -> bool {
        self.no_data.is_none()
    }
}

fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// The `k`th of `n` shades of `hex`: the colour itself, then lighter ones towards white
/// (at most 60% of the way), so benchmarks of one run share its hue and differ.
fn shade(hex: &str, k: usize, n: usize) -> String {
    if k == 0 || n < 2 {
        return hex.to_string();
    }
    let t = 0.6 * k as f64 / (n - 1) as f64;
    let c = |i: usize| {
        let v = hex
            .get(i..i + 2)
            .and_then(|s| u8::from_str_radix(s, 16).ok())
            .unwrap_or(0);
        (f64::from(v) + (255.0 - f64::from(v)) * t).round() as u8
    };
    format!("#{:02x}{:02x}{:02x}", c(1), c(3), c(5))
}

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// The successful distribution's percentile `p` of `key`, when it has values.
pub fn pct(b: &BenchmarkResult, key: &str, p: &str) -> Option<f64> {
    let d = &b.metrics.get(key)?.successful;
    if d.count == 0 {
        return None;
    }
    d.percentiles.get(p).and_then(finite)
}

/// Whether any benchmark reports `key` at all: embeddings and rerank have no TTFT, ITL or
/// TPOT (absent, not empty), so their charts are left out rather than shown empty.
fn reported(report: &Report, key: &str) -> bool {
    report
        .benchmarks
        .iter()
        .any(|b| b.metrics.contains_key(key))
}

/// The latency metrics of the load and distribution charts: key, title word, file word.
const LOAD_METRICS: [(&str, &str, &str); 3] = [
    ("ttft", "TTFT", "ttft"),
    ("itl", "Inter-token latency", "itl"),
    ("request_latency", "End-to-end latency", "e2e"),
];

/// Every chart of the report, in page order.
pub fn charts(report: &Report) -> Vec<Chart> {
    let mut out = tiers::charts(report);
    out.extend(load_curves(report));
    out.push(throughput(report));
    out.extend(run_pareto(report));
    out.extend(distributions(report));
    out.extend(timeseries(report));
    out.extend(timeline::charts(report));
    out.extend(slices::charts(report));
    out.extend(server(report));
    out.extend(gpu::charts(report));
    out
}

/// Benchmark indexes with an achieved request rate, by that rate.
fn by_rate(report: &Report) -> Vec<usize> {
    let mut order: Vec<usize> = (0..report.benchmarks.len())
        .filter(|&i| report.benchmarks[i].throughput.requests_per_s.is_finite())
        .collect();
    order.sort_by(|&a, &c| {
        let r = |i: usize| report.benchmarks[i].throughput.requests_per_s;
        r(a).total_cmp(&r(c))
    });
    order
}

/// Latency against the achieved request rate, one point per benchmark.
fn load_curves(report: &Report) -> Vec<Chart> {
    let order = by_rate(report);
    let b = &report.benchmarks;
    let knees = super::knee::knees(b);
    LOAD_METRICS
        .iter()
        .filter(|m| reported(report, m.0))
        .map(|&(key, name, file)| {
            let mut c = Chart::new(
                &format!("{file}-vs-achieved-rate"),
                "charts-load",
                &format!("{name} vs achieved request rate (ms)"),
                Axis::new("achieved request rate", "requests/s"),
                Axis::new(name, "ms"),
            );
            for (p, col) in [("p50", 0), ("p90", 3), ("p99", 1)] {
                let pts = order
                    .iter()
                    .map(|&i| (b[i].throughput.requests_per_s, pct(&b[i], key, p)))
                    .collect();
                c.series.push(Series::new(p, color(col), pts));
            }
            c.marks = knees
                .iter()
                .filter(|k| k.metric.strip_suffix("_p99") == Some(key))
                .map(|k| Mark {
                    x: k.rate,
                    y: k.latency,
                    label: format!("p99 knee ≈ {} req/s", super::num(k.rate)),
                })
                .collect();
            c.finish("No successful request measured this metric.")
        })
        .collect()
}

/// The target rate a benchmark offered (constant, poisson, and a replay's mean trace
/// rate), if it had one.
fn target(b: &BenchmarkResult) -> Option<f64> {
    match b.strategy {
        Strategy::Constant { rate } | Strategy::Poisson { rate } => finite(rate),
        Strategy::Replay { rate, .. } if rate > 0.0 => finite(rate),
        _ => None,
    }
}

/// Achieved throughput against the offered load of each benchmark: its target rate, or
/// what it achieved when it has no rate target (synchronous, throughput and concurrent
/// benchmarks offer whatever they can).
fn throughput(report: &Report) -> Chart {
    let b = &report.benchmarks;
    let offered = |i: usize| target(&b[i]).or_else(|| finite(b[i].throughput.requests_per_s));
    let mut order: Vec<usize> = (0..b.len()).filter(|&i| offered(i).is_some()).collect();
    order.sort_by(|&a, &c| {
        offered(a)
            .unwrap_or(0.0)
            .total_cmp(&offered(c).unwrap_or(0.0))
    });
    let mut c = Chart::new(
        "throughput-vs-offered-load",
        "charts-throughput",
        "Throughput vs offered load",
        Axis::new(
            "offered load (target rate, or achieved without one)",
            "requests/s",
        ),
        Axis::new("achieved request rate", "requests/s"),
    );
    c.y2 = Some(Axis::new("output throughput", "tokens/s"));
    let xs: Vec<f64> = order.iter().map(|&i| offered(i).unwrap_or(0.0)).collect();
    let column = |f: &dyn Fn(usize) -> Option<f64>| -> Vec<(f64, Option<f64>)> {
        order.iter().zip(&xs).map(|(&i, &x)| (x, f(i))).collect()
    };
    c.x_names = Some(
        order
            .iter()
            .zip(&xs)
            .map(|(&i, &x)| (x, b[i].strategy.to_string()))
            .collect(),
    );
    c.series.push(Series::new(
        "achieved req/s",
        color(0),
        column(&|i| finite(b[i].throughput.requests_per_s)),
    ));
    let mut tok = Series::new(
        "output tok/s",
        color(2),
        column(&|i| b[i].throughput.output_tokens_per_s.and_then(finite)),
    );
    tok.right = true;
    c.series.push(tok);
    let mut t = Series::new("target req/s", color(7), column(&|i| target(&b[i])));
    t.dashed = true;
    c.series.push(t);
    c.finish("No benchmark measured a request rate.")
}

/// The Pareto front of a run's benchmarks (two at least, with TPOT and output tokens/s).
fn run_pareto(report: &Report) -> Option<Chart> {
    let points: Vec<pareto::Point> = report
        .benchmarks
        .iter()
        .filter_map(|b| pareto::point(b, b.strategy.to_string(), pareto::PerUser::Mean, None))
        .collect();
    (points.len() >= 2).then(|| pareto::chart(&points, pareto::PerUser::Mean, None))
}

/// Each benchmark's percentile curve of one metric.
fn distributions(report: &Report) -> Vec<Chart> {
    let metrics = [
        ("ttft", "TTFT", "ttft"),
        ("itl", "Inter-token latency", "itl"),
        ("tpot", "Time per output token", "tpot"),
        ("request_latency", "End-to-end latency", "e2e"),
    ];
    metrics
        .iter()
        .filter(|m| reported(report, m.0))
        .map(|&(key, name, file)| {
            let mut c = Chart::new(
                &format!("{file}-by-percentile"),
                "charts-distributions",
                &format!("{name} by percentile (ms)"),
                Axis::new("percentile", ""),
                Axis::new(name, "ms"),
            );
            c.x_labels = Some(PCTS.iter().map(|p| p.1.to_string()).collect());
            for (i, b) in report.benchmarks.iter().enumerate() {
                let pts = PCTS
                    .iter()
                    .enumerate()
                    .map(|(k, p)| (k as f64, pct(b, key, p.0)))
                    .collect();
                c.series
                    .push(Series::new(b.strategy.to_string(), color(i), pts));
            }
            c.finish("No successful request measured this metric.")
        })
        .collect()
}

/// The earliest benchmark start of the run: the time axis starts there.
fn run_start(report: &Report) -> f64 {
    report
        .benchmarks
        .iter()
        .map(|b| b.start_time)
        .filter(|t| t.is_finite())
        .fold(f64::INFINITY, f64::min)
}

fn offset(b: &BenchmarkResult, run0: f64) -> f64 {
    if b.start_time.is_finite() && run0.is_finite() {
        b.start_time - run0
    } else {
        0.0
    }
}

/// A plain line (no markers) of many points.
fn trace(label: impl Into<String>, col: &str, points: Vec<(f64, Option<f64>)>) -> Series {
    let mut s = Series::new(label, col, points);
    s.markers = false;
    s
}

/// Per-second series over the whole run, one colour per benchmark.
fn timeseries(report: &Report) -> Vec<Chart> {
    let mut metrics: Vec<(&str, &str, Axis, Pick)> = vec![
        (
            "concurrency-over-time",
            "Concurrency (requests in flight)",
            Axis::new("in flight", "requests"),
            |p| finite(p.concurrency),
        ),
        (
            "request-rate-over-time",
            "Request rate (completed per second)",
            Axis::new("completed", "requests/s"),
            |p| Some(p.completed as f64),
        ),
    ];
    if reported(report, "ttft") {
        metrics.push((
            "ttft-over-time",
            "TTFT, mean per second (ms)",
            Axis::new("TTFT mean", "ms"),
            |p| p.ttft_mean_ms.and_then(finite),
        ));
    }
    let run0 = run_start(report);
    metrics
        .into_iter()
        .map(|(id, title, y, pick)| {
            let mut c = Chart::new(
                id,
                "charts-timeseries",
                title,
                Axis::new("time since the run started", "s"),
                y,
            );
            for (i, b) in report.benchmarks.iter().enumerate() {
                let off = offset(b, run0);
                let pts = b
                    .timeseries
                    .iter()
                    .filter(|p| p.t.is_finite())
                    .map(|p| (off + p.t, pick(p)))
                    .collect();
                c.series.push(trace(b.strategy.to_string(), color(i), pts));
            }
            c.finish("No per-second data.")
        })
        .collect()
}

/// The server's own metrics (scraped from its /metrics) on the run's time axis: a scrape
/// at `t` seconds since its benchmark's start lands at that benchmark's offset plus `t`.
/// Each quantity is one line across the benchmarks, broken between them. Nothing for a
/// report without server metrics.
fn server(report: &Report) -> Vec<Chart> {
    if !report.benchmarks.iter().any(|b| b.server_metrics.is_some()) {
        return Vec::new();
    }
    let server_points =
        |name: &str, map: &dyn Fn(Scrapes) -> Scrapes| server_series(report, name, map);
    let client_points = |pick: Pick| client_series(report, pick);
    let same = |v: Scrapes| v;
    // A counter as a rate between consecutive scrapes; one that went down (the server
    // restarted) gives no point.
    let per_second = |pts: Scrapes| {
        pts.windows(2)
            .filter_map(|w| {
                let (dt, dv) = (w[1].0 - w[0].0, w[1].1 - w[0].1);
                (dt > 0.0 && dv >= 0.0).then_some((w[1].0, dv / dt))
            })
            .collect()
    };
    let x = || Axis::new("time since the run started", "s");
    // The server's figures are gauges sampled at each scrape (a counter's rate too:
    // constant between two scrapes), so they are drawn as steps.
    let server_line = |label: &str, col: usize, pts| {
        let mut s = trace(label, color(col), pts);
        s.step = true;
        s
    };
    let client_line = |label: &str, pts| {
        let mut s = trace(label, color(7), pts);
        s.dashed = true;
        s
    };
    let finish = |mut c: Chart, why: &str| {
        // The client's line alone is not enough: the chart is about the server.
        if !c.series.iter().any(|s| !s.dashed && s.has_value()) {
            c.series.clear();
        }
        c.finish(why)
    };
    let mut queue = Chart::new(
        "server-queue",
        "charts-server",
        "Server queue beside client concurrency (requests)",
        x(),
        Axis::new("waiting, running or in flight", "requests"),
    );
    queue.series = vec![
        server_line(
            "server: waiting",
            1,
            server_points("num_requests_waiting", &same),
        ),
        server_line(
            "server: running",
            0,
            server_points("num_requests_running", &same),
        ),
        client_line(
            "client: in flight",
            client_points(|p| finite(p.concurrency)),
        ),
    ];
    let mut kv = Chart::new(
        "server-kv-cache",
        "charts-server",
        "Server KV-cache use (%)",
        x(),
        Axis::new("KV-cache use", "%"),
    );
    kv.series = vec![server_line(
        "server: KV-cache use",
        4,
        server_points("kv_cache_usage_perc", &|pts: Scrapes| {
            pts.into_iter().map(|(t, v)| (t, v * 100.0)).collect()
        }),
    )];
    let mut tokens = Chart::new(
        "server-generation-tokens",
        "charts-server",
        "Server generation tokens/s beside the client's output tokens/s",
        x(),
        Axis::new("output throughput", "tokens/s"),
    );
    tokens.series = vec![
        server_line(
            "server: generation tokens/s",
            2,
            server_points("generation_tokens", &per_second),
        ),
        client_line(
            "client: output tokens/s",
            client_points(|p| p.output_tokens_per_s.and_then(finite)),
        ),
    ];
    vec![
        finish(
            queue,
            "The server published no waiting or running requests.",
        ),
        finish(kv, "The server published no KV-cache use."),
        finish(tokens, "The server published no generation-token counter."),
    ]
}

/// A server series: `(seconds since its benchmark started, value)`.
type Scrapes = Vec<(f64, f64)>;

/// Picks a value of a client's per-second point.
type Pick = fn(&llmsurge_coordinator::timeseries::TimePoint) -> Option<f64>;

/// One line over every benchmark of the server's series `name` on the run's time axis
/// (broken between benchmarks); `map` turns one benchmark's scrapes into values.
fn server_series(
    report: &Report,
    name: &str,
    map: &dyn Fn(Scrapes) -> Scrapes,
) -> Vec<(f64, Option<f64>)> {
    let run0 = run_start(report);
    let mut out = Vec::new();
    for b in &report.benchmarks {
        let Some(sm) = &b.server_metrics else {
            continue;
        };
        let clean: Vec<(f64, f64)> = sm
            .series
            .get(name)
            .into_iter()
            .flatten()
            .copied()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .collect();
        let off = offset(b, run0);
        let from = out.len();
        out.extend(map(clean).into_iter().map(|(t, v)| (off + t, Some(v))));
        end_benchmark(&mut out, from);
    }
    out
}

/// One line over every benchmark of a client per-second figure on the run's time axis
/// (broken between benchmarks).
fn client_series(report: &Report, pick: Pick) -> Vec<(f64, Option<f64>)> {
    let run0 = run_start(report);
    let mut out = Vec::new();
    for b in &report.benchmarks {
        let off = offset(b, run0);
        let from = out.len();
        out.extend(
            b.timeseries
                .iter()
                .filter(|p| p.t.is_finite())
                .filter_map(|p| pick(p).map(|v| (off + p.t, Some(v)))),
        );
        end_benchmark(&mut out, from);
    }
    out
}

/// After a benchmark's points, a break just past its last one: the line does not join
/// one benchmark's load to the next one's.
fn end_benchmark(out: &mut Vec<(f64, Option<f64>)>, from: usize) {
    if out.len() > from
        && let Some(&(x, _)) = out.last()
    {
        out.push((x + 1e-6, None));
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_lone_value_is_no_narrow_range_and_a_sliver_is() {
        let chart = |ys: &[f64]| {
            let mut c = Chart::new("c", "s", "t", Axis::new("x", ""), Axis::new("y", ""));
            c.y_data_only = true;
            // A lone point drawn twice (as itself and as its front).
            for _ in 0..2 {
                let points = ys
                    .iter()
                    .enumerate()
                    .map(|(i, y)| (i as f64, Some(*y)))
                    .collect();
                c.series.push(Series::new("s", "#000000", points));
            }
            c.note_narrow_range();
            c.notes
        };
        assert!(chart(&[49.7]).is_empty(), "{:?}", chart(&[49.7]));
        assert!(chart(&[49.65, 49.92])[0].starts_with("narrow range"));
        assert!(chart(&[10.0, 20.0]).is_empty());
    }

    use super::*;

    fn data_only(ys: &[f64]) -> Chart {
        let mut c = Chart::new("t", "s", "t", Axis::new("x", ""), Axis::new("per user", ""));
        c.y_data_only = true;
        let pts = ys
            .iter()
            .enumerate()
            .map(|(i, y)| (i as f64, Some(*y)))
            .collect();
        c.series.push(Series::new("a", "#000000", pts));
        c
    }

    #[test]
    fn a_data_only_axis_over_a_sliver_of_its_values_says_so() {
        let mut narrow = data_only(&[100.0, 100.4, 100.2]);
        narrow.note_narrow_range();
        assert_eq!(
            narrow.notes,
            ["narrow range: the per user axis spans only 100.000 to 100.400 (0.40% of its values)"]
        );
        let mut wide = data_only(&[10.0, 20.0]);
        wide.note_narrow_range();
        assert!(wide.notes.is_empty());
        // An axis from zero shows the spread for what it is.
        let mut from_zero = data_only(&[100.0, 100.4]);
        from_zero.y_data_only = false;
        from_zero.note_narrow_range();
        assert!(from_zero.notes.is_empty());
    }
}
