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

/// The unit of a figure.
pub(super) fn unit(figure: &str) -> &'static str {
    match figure {
        "requests_per_s" | "goodput_per_s" => "requests/s",
        "output_tokens_per_s" | "output_tokens_per_s_per_gpu" => "tokens/s",
        "gpu_power_mean_w" => "W",
        "joules_per_output_token" => "J",
        _ => "ms",
    }
}

/// A column's name as the Markdown and HTML tables show it: a figure (its spread, its
/// lower bound) with its unit. The CSV keeps the bare names, for scripts.
fn with_unit(name: &str) -> String {
    let base = name
        .strip_suffix("_std")
        .or_else(|| name.strip_suffix("_lower_bound"))
        .unwrap_or(name);
    if FIGURES.contains(&base) || GPU_FIGURES.contains(&base) {
        format!("{name} ({})", unit(base))
    } else {
        name.to_string()
    }
}

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

/// What a point's run says about its figures: whether they measure the server at the
/// load offered, and why not. `status` says whether it ran; `outcome` whether to trust it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A valid run; no SLO (after `--`) failed.
    #[default]
    Ok,
    /// A valid run whose `--slo` failed (`benchmark run` exit code 3).
    SloFail,
    /// A valid run whose `--slo` could not decide (exit code 5).
    Inconclusive,
    /// An open-loop load the server did not keep up with (its queue grew, arrivals went
    /// unanswered): its latencies are cut short by the time limit, so they measure the
    /// limit, not the server. `error` says why. Off the Pareto front.
    NotKeptUp,
    /// `benchmark run` judged the run invalid (exit code 4); `error` says why.
    Invalid,
    /// Its server did not start, was not ready, or died.
    ServerFailed,
    /// Its `benchmark run` failed without a report (exit code 1 or 2).
    Failed,
    /// The sweep was interrupted while it ran.
    Interrupted,
}

impl Outcome {
    /// The name used in every table (`not_kept_up`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::SloFail => "slo_fail",
            Self::Inconclusive => "inconclusive",
            Self::NotKeptUp => "not_kept_up",
            Self::Invalid => "invalid",
            Self::ServerFailed => "server_failed",
            Self::Failed => "failed",
            Self::Interrupted => "interrupted",
        }
    }

    /// Whether its figures measure the server at the load offered: only those are drawn
    /// as curves and may sit on the Pareto front.
    pub fn measured(self) -> bool {
        matches!(self, Self::Ok | Self::SloFail | Self::Inconclusive)
    }

    /// Whether the point failed the sweep (a non-zero exit code).
    pub fn failed(self) -> bool {
        matches!(self, Self::Invalid | Self::ServerFailed | Self::Failed)
    }
}

/// A point's measured requests (summed over `--repeat` runs): how many completed, how
/// many errored, how many the stop cut before they finished, and the shares.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Requests {
    /// Completed.
    pub completed: u64,
    /// Errored.
    pub errored: u64,
    /// Cut off before they finished (cancelled by the stop).
    pub unfinished: u64,
    /// completed / (completed + errored + unfinished).
    pub completed_share: f64,
    /// unfinished / (completed + errored + unfinished).
    pub unfinished_share: f64,
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
    /// Its serve configuration's name, else `s{S}` (absent without `--serve-cmd`): what
    /// tells two servers apart when only a hidden (secret) parameter differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
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
    /// Whether the figures measure the server (see [`Outcome`]).
    #[serde(default)]
    pub outcome: Outcome,
    /// The measured requests and their shares, when the point ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<Requests>,
    /// Lower bounds (ms) counting the unfinished requests' elapsed time (`ttft_p99`,
    /// `e2e_p99`: the report's `*_with_incomplete` distributions); only when some
    /// requests did not finish.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lower_bounds: BTreeMap<String, f64>,
    /// `--repeat`: how many runs the figures are the mean of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u32>,
    /// `--repeat`: the spread of each figure across the runs (sample standard deviation).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub spread: BTreeMap<String, f64>,
    /// The point's warnings and invalid-run lines (its report's and its `run.log`'s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The benchmark's own load (its streams or offered requests/s): where a `rate` list
    /// puts each benchmark of the point. Absent for a load without one (synchronous,
    /// replay), before the point ran, and in a sweep.json an earlier llmsurge wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Load>,
}

/// A benchmark's load: the value its `rate` meant for it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// Streams, or requests/s.
    pub value: f64,
    /// Which of the two.
    pub unit: LoadUnit,
}

/// What a load counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoadUnit {
    /// Concurrent request streams (concurrent, throughput).
    #[serde(rename = "streams")]
    Streams,
    /// Requests offered per second (constant, poisson).
    #[serde(rename = "requests/s")]
    RequestsPerS,
}

impl LoadUnit {
    /// Its name on an axis.
    pub fn name(self) -> &'static str {
        match self {
            Self::Streams => "streams",
            Self::RequestsPerS => "requests/s",
        }
    }
}

impl Load {
    /// The load of a benchmark run with `strategy`, when it has one.
    pub fn of(strategy: &llmsurge_coordinator::strategy::Strategy) -> Option<Load> {
        use llmsurge_coordinator::strategy::Strategy;
        let (value, unit) = match *strategy {
            Strategy::Concurrent { streams } => (f64::from(streams), LoadUnit::Streams),
            Strategy::Throughput { max_concurrency } => {
                (f64::from(max_concurrency), LoadUnit::Streams)
            }
            Strategy::Constant { rate } | Strategy::Poisson { rate } => {
                (rate, LoadUnit::RequestsPerS)
            }
            Strategy::Synchronous | Strategy::Replay { .. } => return None,
        };
        Some(Load { value, unit })
    }
}

impl Row {
    /// A row of `at` with nothing measured yet.
    pub fn new(at: Point, status: Status, outcome: Outcome) -> Self {
        Row {
            at,
            benchmark: None,
            status,
            exit_code: None,
            error: None,
            log_tail: Vec::new(),
            cache_reset: None,
            after_bench_cmd: None,
            figures: BTreeMap::new(),
            outcome,
            requests: None,
            lower_bounds: BTreeMap::new(),
            runs: None,
            spread: BTreeMap::new(),
            warnings: Vec::new(),
            load: None,
        }
    }
}

/// What ran: enough to tell two sweeps apart and to run one again. Read back with
/// defaults, so `sweep plot` draws a sweep an earlier llmsurge wrote.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Provenance {
    /// The llmsurge version that ran the sweep.
    pub llmsurge_version: String,
    /// The `benchmark run` flags every point got (after `--`), secrets redacted.
    pub shared_flags: Vec<String>,
    /// The models the points' reports name, in first-seen order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// The host the sweep ran on (its name).
    pub host: String,
    /// When the sweep started (RFC 3339, UTC).
    pub started_at: String,
    /// When the report was last written (RFC 3339, UTC): the sweep's end once it ended.
    pub ended_at: String,
}

impl Provenance {
    /// The provenance of a sweep starting now with `args`.
    pub fn now(args: &crate::cli::args::SweepServeArgs) -> Self {
        Provenance {
            llmsurge_version: env!("CARGO_PKG_VERSION").into(),
            // As one command line: a flag's value is hidden by the flag before it.
            shared_flags: super::secrets::argv(&args.common),
            models: Vec::new(),
            host: sysinfo::System::host_name().unwrap_or_default(),
            started_at: now_rfc3339(),
            ended_at: now_rfc3339(),
        }
    }

    /// Adds the model a point's report names.
    pub fn add_model(&mut self, model: &str) {
        if !model.is_empty() && !self.models.iter().any(|m| m == model) {
            self.models.push(model.to_string());
        }
    }

    /// Marks the report written now (the sweep's end once it ended).
    pub fn touch(&mut self) {
        self.ended_at = now_rfc3339();
    }

    /// The paragraphs above a sweep's table: what ran, where and when.
    pub(super) fn intro(&self, serve_cmd: Option<&str>, interrupted: bool) -> Vec<Intro> {
        let mut intro = vec![Intro {
            text: format!(
                "llmsurge {} on {}, from {} to {}{}.",
                self.llmsurge_version,
                self.host,
                self.started_at,
                self.ended_at,
                if interrupted { " (interrupted)" } else { "" }
            ),
            code: None,
        }];
        if !self.models.is_empty() {
            intro.push(Intro {
                text: format!("Model: {}", self.models.join(", ")),
                code: None,
            });
        }
        if let Some(cmd) = serve_cmd {
            intro.push(Intro {
                text: "Server command: ".into(),
                code: Some(cmd.to_string()),
            });
        }
        intro.push(Intro {
            text: "Flags every point got (after --): ".into(),
            code: Some(if self.shared_flags.is_empty() {
                "(none)".into()
            } else {
                self.shared_flags.join(" ")
            }),
        });
        intro
    }
}

/// Now, as RFC 3339 UTC to the second.
fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
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
    /// The server command template, when the sweep started servers (secrets redacted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serve_cmd: Option<String>,
    /// What ran.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// Whether the sweep was interrupted before every point ran.
    pub interrupted: bool,
    /// One row per point and benchmark.
    pub rows: Vec<Row>,
}

/// Most of an open-loop load's measured requests unfinished at the stop: the arrivals
/// outran the server, and the figures describe the few that finished (a short run the
/// kept-up rules cannot judge yet, e.g. 12 of 201 done in 2 s). A closed loop's
/// unfinished are its streams in flight, no sign of drowning.
fn drowned(
    b: &llmsurge_coordinator::BenchmarkResult,
    unfinished: u64,
    measured: u64,
) -> Option<String> {
    use llmsurge_coordinator::strategy::Strategy;
    let open_loop = matches!(
        b.strategy,
        Strategy::Constant { .. } | Strategy::Poisson { .. }
    );
    (open_loop && measured > 0 && unfinished * 2 > measured).then(|| {
        format!(
            "{unfinished} of {measured} measured requests were unfinished at the stop: the arrivals outran the server, and its latencies describe the few that finished"
        )
    })
}

/// The rows of a point's report (the point's directory `dir`, for its `run.log`): one
/// per benchmark position, figures averaged over `--repeat` runs with their spread. Each
/// row's outcome is its runs' verdicts: invalid (the reasons `benchmark run` gives), the
/// server did not keep up, an SLO failed or could not decide, else ok.
pub fn rows_of(template: &Row, report: &Report, dir: &Path) -> Vec<Row> {
    let repeated = !report.across_runs.is_empty();
    let warnings = point_warnings(report, dir);
    let mut rows = Vec::new();
    for b in &report.benchmarks {
        // With --repeat every run's benchmark is kept; the first run's stands for its
        // position, with the across-runs means as figures.
        if repeated && rows.len() >= report.across_runs.len() {
            break;
        }
        let runs: Vec<_> = report
            .benchmarks
            .iter()
            .filter(|x| x.index == b.index)
            .cloned()
            .collect();
        let mut row = template.clone();
        // A failed --after-bench-cmd before the point: its cache was not reset as asked.
        let hook = template
            .after_bench_cmd
            .as_ref()
            .and_then(|h| h.error.as_ref())
            .map(|e| format!("the --after-bench-cmd before this point failed: {e}"));
        row.warnings = hook.into_iter().chain(warnings.iter().cloned()).collect();
        let across = report.across_runs.get(rows.len());
        row.benchmark = Some(match across {
            Some(a) => format!("{} (mean of {})", b.strategy, a.runs),
            None => crate::report::cells::label(b),
        });
        row.runs = across.map(|a| a.runs);
        row.load = Load::of(&b.strategy);
        // `--repeat`: runs invalid for the same reason say it once.
        let mut invalid: Vec<String> = Vec::new();
        for why in crate::cli::run::invalid_run(&runs) {
            if !invalid.contains(&why) {
                invalid.push(why);
            }
        }
        let (completed, errored, unfinished) = runs.iter().fold((0, 0, 0), |(c, e, u), r| {
            let m = &r.measured_requests;
            (c + m.completed, e + m.errored, u + m.cancelled)
        });
        let all = (completed + errored + unfinished).max(1) as f64;
        let not_kept_up = runs
            .iter()
            .find_map(|r| llmsurge_coordinator::kept_up::kept_up(r).why_not())
            .or_else(|| drowned(b, unfinished, completed + errored + unfinished));
        let slo = |label: &str| {
            runs.iter()
                .any(|r| r.slo.as_ref().is_some_and(|v| v.label() == label))
        };
        if !invalid.is_empty() {
            row.status = Status::Invalid;
            row.outcome = Outcome::Invalid;
            row.error = Some(format!("invalid run: {}", invalid.join("; ")));
        } else if let Some(why) = not_kept_up {
            row.outcome = Outcome::NotKeptUp;
            row.error = Some(why);
        } else if slo("FAIL") {
            row.outcome = Outcome::SloFail;
        } else if slo("INCONCLUSIVE") {
            row.outcome = Outcome::Inconclusive;
        } else {
            row.outcome = Outcome::Ok;
        }
        row.requests = Some(Requests {
            completed,
            errored,
            unfinished,
            completed_share: completed as f64 / all,
            unfinished_share: unfinished as f64 / all,
        });
        for (key, name) in [
            ("ttft_with_incomplete", "ttft_p99"),
            ("request_latency_with_incomplete", "e2e_p99"),
        ] {
            let bounds: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.metrics.get(key))
                .filter(|d| d.incomplete.count > 0)
                .map(|d| d.total.percentiles.p99)
                .collect();
            if !bounds.is_empty() {
                let mean = bounds.iter().sum::<f64>() / bounds.len() as f64;
                row.lower_bounds.insert(name.to_string(), mean);
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
        if let Some(across) = across {
            for (name, stats) in &across.figures {
                row.figures.insert(name.clone(), stats.mean);
                if stats.n > 1 {
                    row.spread.insert(name.clone(), stats.std);
                }
            }
        }
        rows.push(row);
    }
    rows
}

/// A point's warnings, each once: those its report keeps (the target's, the client's,
/// short outputs, why the run is invalid) and the `warning:` and `invalid run:` lines of
/// its console output (`run.log`), which may say more.
pub fn point_warnings(report: &Report, dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |w: String| {
        let w = w.trim().to_string();
        if !w.is_empty() && !out.contains(&w) {
            out.push(w);
        }
    };
    for w in &report.target.warnings {
        add(format!("warning: {w}"));
    }
    for b in &report.benchmarks {
        for w in &b.client.warnings {
            add(format!("warning: {w}"));
        }
        if let Some(w) = b.output_lengths.as_ref().and_then(|o| o.warning()) {
            add(format!("warning: {w}"));
        }
    }
    for w in &report.invalid_run {
        add(format!("invalid run: {w}"));
    }
    let log = std::fs::read(dir.join("run.log")).unwrap_or_default();
    for line in String::from_utf8_lossy(&log).lines() {
        if line.starts_with("warning: ") || line.starts_with("invalid run: ") {
            add(line.to_string());
        }
    }
    out
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
/// our own text (see [`write_tables`]). `csv`: a figure's spread across `--repeat` runs
/// is a column of its own (`FIGURE_std`) and shares are fractions, numbers a program
/// reads; otherwise a figure reads `mean ± spread` and a share is a percentage.
fn table(report: &SweepReport, csv: bool) -> (Vec<String>, Vec<Vec<String>>, Vec<bool>) {
    let params = ParamColumns::of(report.rows.iter().map(|r| &r.at));
    let figures: Vec<&str> = FIGURES
        .iter()
        .copied()
        .chain(GPU_FIGURES)
        .filter(|f| report.rows.iter().any(|r| r.figures.contains_key(*f)))
        .collect();
    let spread = |f: &str| report.rows.iter().any(|r| r.spread.contains_key(f));
    let bounds: Vec<&str> = LOWER_BOUNDS
        .iter()
        .copied()
        .filter(|b| report.rows.iter().any(|r| r.lower_bounds.contains_key(*b)))
        .collect();
    let mut header = params.header();
    let mut ours = params.ours();
    header.push("benchmark".into());
    ours.push(false);
    for h in [
        "outcome",
        "exit_code",
        "completed_share",
        "unfinished_share",
    ] {
        header.push(h.into());
        ours.push(true);
    }
    for f in &figures {
        header.push(f.to_string());
        ours.push(true);
        if csv && spread(f) {
            header.push(format!("{f}_std"));
            ours.push(true);
        }
    }
    for b in &bounds {
        header.push(format!("{b}_lower_bound"));
        ours.push(true);
    }
    header.push("error".into());
    ours.push(false);
    let share = |v: Option<f64>| match (v, csv) {
        (None, _) => String::new(),
        (Some(v), true) => format!("{v:.4}"),
        (Some(v), false) => format!("{:.1}%", v * 100.0),
    };
    let value = crate::report::cells::cell_value;
    let cells = report
        .rows
        .iter()
        .map(|r| {
            let mut c = params.cells(&r.at, r.status);
            c.push(r.benchmark.clone().unwrap_or_default());
            c.push(r.outcome.name().into());
            c.push(r.exit_code.map(|e| e.to_string()).unwrap_or_default());
            c.push(share(r.requests.map(|q| q.completed_share)));
            c.push(share(r.requests.map(|q| q.unfinished_share)));
            for f in &figures {
                let mean = r.figures.get(*f).copied();
                let sd = r.spread.get(*f).copied();
                match (csv, sd) {
                    (false, Some(sd)) if mean.is_some() => {
                        c.push(format!("{} ± {}", value(mean), value(Some(sd))));
                    }
                    _ => c.push(value(mean)),
                }
                if csv && spread(f) {
                    c.push(sd.map(|v| value(Some(v))).unwrap_or_default());
                }
            }
            for b in &bounds {
                c.push(
                    r.lower_bounds
                        .get(*b)
                        .map(|v| format!("≥ {}", value(Some(*v))))
                        .unwrap_or_default(),
                );
            }
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

/// The lower bounds a row may have ([`Row::lower_bounds`]), in table order.
const LOWER_BOUNDS: [&str; 2] = ["ttft_p99", "e2e_p99"];

/// The paragraphs above the sweep's table: what ran, where and when, and how `--repeat`
/// rows read.
fn provenance(report: &SweepReport) -> Vec<Intro> {
    let mut intro = report
        .provenance
        .intro(report.serve_cmd.as_deref(), report.interrupted);
    if report.rows.iter().any(|r| r.runs.is_some()) {
        intro.push(Intro {
            text: "With --repeat a row's figures are the mean of its runs, ± their sample standard deviation.".into(),
            code: None,
        });
    }
    intro
}

/// The lines under the sweep's table: each warning and invalid-run line once, with the
/// points that gave it (a server-wide one, such as a /metrics the server does not serve,
/// is one line for every point of that server), and why a point is off the curves and
/// the front.
fn notes(report: &SweepReport) -> Vec<Intro> {
    let mut out = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    let mut warnings: Vec<(&str, Vec<&str>)> = Vec::new();
    for r in &report.rows {
        if seen.contains(&r.at.point.as_str()) {
            continue;
        }
        seen.push(&r.at.point);
        for w in &r.warnings {
            match warnings.iter_mut().find(|(text, _)| text == w) {
                Some((_, points)) => points.push(&r.at.point),
                None => warnings.push((w, vec![&r.at.point])),
            }
        }
    }
    for (w, points) in warnings {
        out.push(Intro {
            text: format!("{}: {w}", points.join(", ")),
            code: None,
        });
    }
    for r in report
        .rows
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::NotKeptUp | Outcome::Invalid))
    {
        out.push(Intro {
            text: format!(
                "{}{}: {} (its figures measure no server at this load: not drawn as curves, off the Pareto front){}",
                r.at.point,
                r.benchmark
                    .as_deref()
                    .map(|b| format!(" {b}"))
                    .unwrap_or_default(),
                r.outcome.name(),
                // An invalid run's reasons are among the point's lines above.
                match (r.outcome, &r.error) {
                    (Outcome::NotKeptUp, Some(why)) => format!(": {why}"),
                    _ => String::new(),
                }
            ),
            code: None,
        });
    }
    out
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
    write_images(dir, charts, images)?;
    let (header, cells, ours) = table(report, false);
    let (csv_header, csv_cells, csv_ours) = table(report, true);
    let failed: Vec<bool> = report.rows.iter().map(|r| !r.outcome.measured()).collect();
    write_tables_with(
        dir,
        "sweep",
        "Sweep",
        &json,
        &provenance(report),
        &Table {
            header: &header,
            cells: &cells,
            ours: &ours,
            failed: &failed,
        },
        Some(&Table {
            header: &csv_header,
            cells: &csv_cells,
            ours: &csv_ours,
            failed: &failed,
        }),
        &notes(report),
        charts,
    )
}

/// Writes `charts` as each of `images` under `dir/charts` (`--chart-images`).
pub(super) fn write_images(
    dir: &Path,
    charts: &[crate::report::charts::Chart],
    images: &[crate::report::charts::draw::ImageFormat],
) -> std::io::Result<()> {
    if images.is_empty() {
        return Ok(());
    }
    let dir = dir.join("charts");
    std::fs::create_dir_all(&dir)?;
    for format in images {
        let (_, failed) = crate::report::charts::draw::write_images(charts, *format, &dir);
        if let Some((path, e)) = failed.first() {
            return Err(std::io::Error::other(format!("{}: {e}", path.display())));
        }
    }
    Ok(())
}

/// The sweep's table for the console: the point, its outcome, its benchmark and a few
/// headline figures, one line each (our own text but the label, made inert by the
/// caller's printer).
pub fn console_table(report: &SweepReport) -> String {
    let figures = [
        "requests_per_s",
        "output_tokens_per_s",
        "ttft_p99",
        "tpot_p50",
    ];
    let mut lines = vec![format!(
        "{:<12} {:<14} {:>6} {:>10} {:>12} {:>12} {:>10}  benchmark",
        "point", "outcome", "done", "req/s", "out tok/s", "ttft_p99 ms", "tpot_p50"
    )];
    for r in &report.rows {
        let f = |k: &str| {
            let v = crate::report::cells::cell_value(r.figures.get(k).copied());
            match r.spread.get(k) {
                Some(sd) => format!("{v}±{}", crate::report::cells::cell_value(Some(*sd))),
                None => v,
            }
        };
        lines.push(format!(
            "{:<12} {:<14} {:>6} {:>10} {:>12} {:>12} {:>10}  {}",
            r.at.point,
            r.outcome.name(),
            r.requests
                .map(|q| format!("{:.0}%", q.completed_share * 100.0))
                .unwrap_or_default(),
            f(figures[0]),
            f(figures[1]),
            f(figures[2]),
            f(figures[3]),
            r.benchmark.as_deref().unwrap_or_default()
        ));
    }
    lines.join("\n")
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
    write_tables_with(dir, stem, title, json, intro, table, None, &[], charts)
}

/// [`write_tables`], the CSV from `csv` when given (its own columns), and `notes`
/// (outside text, made inert) as a list under the Markdown and HTML tables.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_tables_with(
    dir: &Path,
    stem: &str,
    title: &str,
    json: &[u8],
    intro: &[Intro],
    table: &Table<'_>,
    csv: Option<&Table<'_>>,
    notes: &[Intro],
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
    let csv_table = csv.unwrap_or(table);
    let mut csv = csv::Writer::from_writer(Vec::new());
    let csv_row = |row: &[String]| -> Vec<String> {
        row.iter()
            .enumerate()
            .map(
                |(i, c)| match csv_table.ours.get(i).copied().unwrap_or(false) {
                    true => c.clone(),
                    false => inert::csv_cell(c).into_owned(),
                },
            )
            .collect()
    };
    csv.write_record(csv_row(csv_table.header))
        .map_err(std::io::Error::other)?;
    for row in csv_table.cells {
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
    let shown: Vec<String> = header.iter().map(|h| with_unit(h)).collect();
    md.push_str(&md_row(&shown));
    md.push_str(&format!("|{}\n", " --- |".repeat(header.len())));
    for row in cells {
        md.push_str(&md_row(row));
    }
    if !notes.is_empty() {
        md.push_str("\n## Warnings and invalid points\n\n");
        for n in notes {
            md.push_str(&format!("- {}\n", inert::markdown(&n.text)));
        }
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
    for h in &shown {
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
    html.push_str("</tbody></table>");
    if !notes.is_empty() {
        html.push_str("<h2>Warnings and invalid points</h2><ul class=\"sweep-notes\">");
        for n in notes {
            html.push_str(&format!("<li>{}</li>", html_escape(&n.text)));
        }
        html.push_str("</ul>");
    }
    html.push_str("</body></html>\n");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(point: &str, warnings: &[&str]) -> Row {
        let at = Point {
            point: point.into(),
            serve_index: Some(0),
            server: Some("s0".into()),
            bench_index: 0,
            serve_params: Map::new(),
            bench_params: Map::new(),
        };
        let mut r = Row::new(at, Status::Ok, Outcome::Ok);
        r.warnings = warnings.iter().map(|w| w.to_string()).collect();
        r
    }

    #[test]
    fn a_warning_several_points_gave_is_one_line_naming_them() {
        let report = SweepReport {
            serve_cmd: None,
            provenance: Provenance::default(),
            interrupted: false,
            rows: vec![
                row(
                    "a",
                    &["warning: /metrics answered 404", "warning: only a's"],
                ),
                row("b", &["warning: /metrics answered 404"]),
            ],
        };
        let lines: Vec<String> = notes(&report).into_iter().map(|n| n.text).collect();
        assert_eq!(
            lines,
            [
                "a, b: warning: /metrics answered 404",
                "a: warning: only a's"
            ]
        );
    }
}
