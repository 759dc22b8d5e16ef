//! `llmsurge sweep serve-sla`: per serve × bench configuration, the highest rate (or
//! concurrency) that meets each SLA, found by the capacity search of `--profile
//! capacity` ([`CapacitySearch`]). Each load the search asks for runs as its own
//! `benchmark run` (a directory under the point's), and a load measured for one SLA is
//! judged again, not rerun, for the others: the measurements are kept by load.
//!
//! Layout: `s{S}-b{B}/` per point, holding one directory per measured load
//! (`synchronous`, `throughput`, `rate-12.5`, `concurrency-8`), and the SLA report
//! `sla.{json,csv,md,html}` beside the points.

use super::report::{Intro, Outcome, ParamColumns, Point, Provenance, Row, Status, Table};
use super::{
    Bench, Ended, Serve, Signals, Started, TAIL_LINES, between_benchmarks, charts, invalid_why,
    label_of, point_name, point_of, run_point, serve_tag, server, start_server,
};
use crate::cli::args::{SlaVariable, SweepServeSlaArgs};
use crate::cli::{UsageError, usage_error};
use crate::exit_codes;
use crate::report::across_runs::{FIGURES, figure};
use crate::report::charts::draw::ImageFormat;
use crate::report::charts::{Axis, Chart, PALETTE, Series};
use llmsurge_coordinator::profiles::{CapacitySearch, SearchVariable};
use llmsurge_coordinator::{BenchmarkResult, Slo, Strategy};
use llmsurge_proto::inert::terminal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

impl SlaVariable {
    fn search(self) -> SearchVariable {
        match self {
            Self::Rate => SearchVariable::Rate,
            Self::Concurrency => SearchVariable::Concurrency,
        }
    }
}

/// One SLA: as written, and parsed.
struct Sla {
    text: String,
    slo: Slo,
}

/// Reads `--sla-params`: SLAs, `;`-separated lists of them, or files of lists.
fn load_slas(values: &[String]) -> Result<Vec<Sla>, UsageError> {
    let mut texts = Vec::new();
    for v in values {
        let path = Path::new(v.trim());
        let file = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("json" | "yaml" | "yml")
        );
        if file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| UsageError(format!("--sla-params {v}: {e}")))?;
            let value: serde_json::Value = if path.extension().is_some_and(|e| e == "json") {
                serde_json::from_str(&text)
                    .map_err(|e| UsageError(format!("--sla-params {v}: not valid JSON ({e})")))?
            } else {
                serde_saphyr::from_str(&text).map_err(|e| {
                    UsageError(format!(
                        "--sla-params {v}: not valid YAML ({})",
                        e.to_string().lines().next().unwrap_or_default()
                    ))
                })?
            };
            texts.extend(file_slas(v, value)?);
        } else {
            texts.extend(v.split(';').map(str::to_string));
        }
    }
    let mut slas: Vec<Sla> = Vec::new();
    for t in texts {
        let text = t.trim().to_string();
        if text.is_empty() || slas.iter().any(|s| s.text == text) {
            continue;
        }
        let slo = Slo::parse(&text).map_err(|e| UsageError(format!("--sla-params: {e}")))?;
        slas.push(Sla { text, slo });
    }
    if slas.is_empty() {
        return Err(UsageError(
            "--sla-params: no SLA given (e.g. --sla-params 'e2e_p99<=2s')".into(),
        ));
    }
    Ok(slas)
}

/// The SLAs of a `--sla-params` file: a list of llmsurge's SLA strings, or of vLLM's
/// objects (each one SLA, all of whose constraints must hold; one object alone is a
/// list of one).
fn file_slas(file: &str, value: serde_json::Value) -> Result<Vec<String>, UsageError> {
    use serde_json::Value;
    let shape = || {
        UsageError(format!(
            "--sla-params {file}: expected a list of SLAs: strings (\"e2e_p99<=2s\") or vLLM's objects ({{\"p99_e2el_ms\": \"<=2000\"}})"
        ))
    };
    let items = match value {
        Value::Array(items) => items,
        one @ Value::Object(_) => vec![one],
        _ => return Err(shape()),
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::String(s) => Ok(s),
            Value::Object(constraints) => constraints
                .iter()
                .map(|(k, v)| {
                    vllm_check(k, v).map_err(|e| UsageError(format!("--sla-params {file}: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|checks| checks.join(",")),
            _ => Err(shape()),
        })
        .collect()
}

/// One of vLLM's SLA constraints (`"p99_e2el_ms": "<=2000"`) as an llmsurge check
/// (`e2e_p99<=2000ms`): `mean_`, `median_` or `pNN_` of `ttft`, `tpot`, `itl`, `e2el` in
/// ms, `request_throughput`, `output_throughput`, `request_goodput`.
fn vllm_check(key: &str, value: &serde_json::Value) -> Result<String, String> {
    let ours = "llmsurge's form is e.g. \"e2e_p99<=2s\"";
    let Some(cond) = value.as_str().map(str::trim) else {
        return Err(format!(
            "{key}: expected \"<OP><VALUE>\" (e.g. \"<=2000\"), as vLLM writes it"
        ));
    };
    if cond.starts_with("==") || cond.starts_with('=') {
        return Err(format!(
            "{key}: {cond:?}: an SLA is a bound, not a value to equal (use <=, >=, < or >)"
        ));
    }
    let Some(op) = ["<=", ">=", "<", ">"]
        .into_iter()
        .find(|o| cond.starts_with(o))
    else {
        return Err(format!(
            "{key}: {cond:?} starts with no operator (<=, >=, < or >)"
        ));
    };
    let number = cond[op.len()..].trim();
    // vLLM's values are plain numbers (milliseconds, or per second): said as written.
    if !number.parse::<f64>().is_ok_and(f64::is_finite) {
        return Err(format!(
            "{key}: {cond:?}: {number:?} is not a number (vLLM's form: \"<=2000\")"
        ));
    }
    let rates = [
        ("request_throughput", "requests_per_s"),
        ("output_throughput", "output_tokens_per_s"),
        ("request_goodput", "goodput_per_s"),
    ];
    if let Some((_, name)) = rates.iter().find(|(k, _)| *k == key) {
        return Ok(format!("{name}{op}{number}"));
    }
    let latency = key.strip_suffix("_ms").and_then(|k| {
        let (stat, metric) = k.split_once('_')?;
        let metric = match metric {
            "ttft" | "tpot" | "itl" => metric,
            "e2el" => "e2e",
            _ => return None,
        };
        let stat = match stat {
            "mean" => "mean".to_string(),
            "median" => "p50".to_string(),
            p if p.starts_with('p') => p.replace('.', "_"),
            "std" => {
                return Some(Err(format!(
                    "{key}: llmsurge judges no standard deviation; use a percentile ({ours})"
                )));
            }
            _ => return None,
        };
        Some(Ok(format!("{metric}_{stat}{op}{number}ms")))
    });
    match latency {
        Some(check) => check,
        None => Err(format!(
            "{key}: not a key llmsurge judges (vLLM's mean_, median_ or pNN_ of ttft, tpot, itl or e2el with _ms; request_throughput, output_throughput, request_goodput; {ours})"
        )),
    }
}

/// One load the search measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SlaProbe {
    /// Its directory under the point's.
    pub dir: String,
    /// The value of the variable (synchronous: its achieved rate, or 1 stream;
    /// throughput: its achieved rate, or its streams).
    pub value: f64,
    /// Whether it met the SLA (and, at a rate, kept its queue from growing).
    pub passed: bool,
    /// A second run of a failing value next to a passing one.
    pub retest: bool,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its SLO could not decide (too few requests): not a pass, and no failure either.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inconclusive: bool,
    /// Measured for an earlier SLA of this point, judged again here.
    pub shared: bool,
    /// Why its `benchmark run` judged the run invalid (exit code 4), when it did; the
    /// SLA's row is then invalid too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
}

/// One answer: a point and an SLA.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SlaRow {
    /// The point.
    #[serde(flatten)]
    pub at: Point,
    /// The SLA, as given.
    pub sla: String,
    /// Whether the search finished (`ok`), a load it judged was an invalid run
    /// (`invalid`), or its configuration failed.
    pub status: Status,
    /// The highest value that met the SLA (req/s or streams); absent when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<f64>,
    /// The bracket the answer lies in: passing ≤ answer < failing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bracket: Option<(f64, Option<f64>)>,
    /// How the search ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conclusion: Option<String>,
    /// Headline figures of the load at the answer (ms for latencies).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub figures: BTreeMap<String, f64>,
    /// Every load the search judged, in order.
    pub probes: Vec<SlaProbe>,
    /// Why it failed, one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last lines of the server's log, for a failed configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
}

/// The SLA report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SlaReport {
    /// The server command template, when the sweep started servers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serve_cmd: Option<String>,
    /// What ran.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// What the searches varied.
    pub variable: SlaVariable,
    /// The precision of each search.
    pub precision: f64,
    /// The SLAs, in order.
    pub slas: Vec<String>,
    /// Whether the sweep was interrupted before every search ended.
    pub interrupted: bool,
    /// Benchmarks run (each load once per point, whatever the number of SLAs).
    pub benchmarks_run: usize,
    /// Benchmarks read back from an earlier run (`--resume`).
    pub benchmarks_resumed: usize,
    /// One row per point and SLA.
    pub rows: Vec<SlaRow>,
}

/// The directory name of a load, which is also its key among the point's measurements.
/// A rate is written with a few significant digits (4, more for a finer `precision`):
/// every two rates a search at that precision asks for differ by more than half of it,
/// so their names differ too.
fn load_key(strategy: Strategy, precision: f64) -> String {
    match strategy {
        Strategy::Synchronous => "synchronous".into(),
        Strategy::Throughput { .. } => "throughput".into(),
        Strategy::Constant { rate } => {
            let needed = (1.0 - (precision / 2.0).log10()).ceil() + 1.0;
            let digits = if needed.is_finite() {
                needed.clamp(4.0, 15.0) as usize
            } else {
                4
            };
            format!("rate-{}", significant(rate, digits))
        }
        Strategy::Concurrent { streams } => format!("concurrency-{streams}"),
        other => format!("{other}"),
    }
}

/// `x` with `digits` significant digits, no trailing zeros (`10.77`, `0.3333`, `12`).
fn significant(x: f64, digits: usize) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i64;
    let decimals = (digits as i64 - 1 - magnitude).max(0) as usize;
    let text = format!("{x:.decimals$}");
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => text,
    }
}

/// The `benchmark run` flags that run `strategy` (the throughput benchmark's streams
/// are the run's own: `--max-concurrency`, or its default).
fn load_flags(strategy: Strategy) -> Vec<String> {
    let s = |x: &str| x.to_string();
    match strategy {
        Strategy::Synchronous => vec![s("--profile"), s("synchronous")],
        Strategy::Throughput { .. } => vec![s("--profile"), s("throughput")],
        // Display of an f64 reads back as the same number.
        Strategy::Constant { rate } => {
            vec![s("--profile"), s("constant"), s("--rate"), rate.to_string()]
        }
        Strategy::Concurrent { streams } => {
            vec![
                s("--profile"),
                s("concurrent"),
                s("--rate"),
                streams.to_string(),
            ]
        }
        // The search asks for no other load.
        _ => Vec::new(),
    }
}

/// Runs `sweep serve-sla`; returns the exit code.
pub fn sweep_serve_sla(args: &SweepServeSlaArgs) -> i32 {
    let slas = match load_slas(&args.sla_params) {
        Ok(s) => s,
        Err(UsageError(m)) => return usage_error(&m),
    };
    let (serves, benches) = match check(args).and_then(|v| check_goodput(&slas, &v.1).map(|_| v)) {
        Ok(v) => v,
        Err(UsageError(m)) => return usage_error(&m),
    };
    let runtime = match super::prepare(&args.sweep.output_dir) {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(run(args, &slas, &serves, &benches))
}

/// The sweep's checks, and those of serve-sla: the search chooses each load, so no
/// configuration may.
fn check(args: &SweepServeSlaArgs) -> Result<(Vec<Serve>, Vec<Bench>), UsageError> {
    if args.sweep.repeat > 1 {
        return Err(UsageError(
            "--repeat: sweep serve-sla runs each load once (the search retests the boundary itself)".into(),
        ));
    }
    if args.sla_precision <= 0.0 || args.sla_precision.is_nan() {
        return Err(UsageError(
            "--sla-precision: must be above 0 (the search stops when the passing and failing values are this close; e.g. 5%)".into(),
        ));
    }
    let s = &args.sweep;
    if !s.curve_by.is_empty() || s.filter.is_some() || s.gpus.is_some() {
        return Err(UsageError(
            "--curve-by, --filter and --gpus shape sweep serve's charts; sweep serve-sla draws each SLA's probes".into(),
        ));
    }
    super::image_formats(&s.chart_images)?;
    if !s.allow_server_change.is_empty() {
        return Err(UsageError(
            "--allow-server-change: sweep serve-sla does not compare servers on --resume (sweep serve does)".into(),
        ));
    }
    let owned = |f: &str| {
        ["--profile", "--rate"]
            .iter()
            .find(|o| f == **o || f.starts_with(&format!("{o}=")))
            .copied()
    };
    if let Some(flag) = args.sweep.common.iter().find_map(|f| owned(f)) {
        return Err(UsageError(format!(
            "{flag} after --: sweep serve-sla chooses each load itself (--sla-variable)"
        )));
    }
    // Each point's command line as each kind of load runs it (the search's own rate or
    // streams stand for every one).
    let search = match args.sla_variable {
        SlaVariable::Rate => Strategy::Constant { rate: 1.0 },
        SlaVariable::Concurrency => Strategy::Concurrent { streams: 1 },
    };
    let loads: [super::Load; 3] = [
        (load_flags(Strategy::Synchronous), &["--max-concurrency"]),
        (load_flags(Strategy::Throughput { max_concurrency: 1 }), &[]),
        (load_flags(search), &[]),
    ];
    // The configurations alone first: a key the search owns is named as such, before
    // the loads' command lines would find it given twice.
    let (_, benches) = super::check_loads(&args.sweep, &[])?;
    for (i, b) in benches.iter().enumerate() {
        if let Some(flag) = b.flags.iter().find_map(|f| owned(f)) {
            let label = label_of(
                "--bench-params",
                args.sweep.bench_params.as_deref(),
                Some(i),
            );
            // vLLM's request_rate sets --rate (and --profile): name the key as written.
            let key = match b.params.contains_key("request_rate") {
                true => "request_rate",
                false => flag.trim_start_matches('-'),
            };
            return Err(UsageError(format!(
                "{label}: key {key:?} is chosen by sweep serve-sla itself (--sla-variable)"
            )));
        }
    }
    let benches = super::check_loads(&args.sweep, &loads)?;
    refuse_verdict_flags(&benches.1)?;
    Ok(benches)
}

/// The verdict flags of `benchmark run` that a search's loads must not carry: the SLAs
/// judge each load (an `--slo` would be ignored) and the search retests the boundary
/// itself (`--repeat`).
fn refuse_verdict_flags(benches: &[Bench]) -> Result<(), UsageError> {
    for b in benches {
        for (flag, why) in [
            ("--slo", "each load is judged by --sla-params, not by --slo"),
            ("--repeat", "the search retests its boundary itself"),
        ] {
            let given = b
                .flags
                .iter()
                .chain(&b.common)
                .any(|w| w == flag || w.starts_with(&format!("{flag}=")));
            if given {
                return Err(UsageError(format!(
                    "{flag} (after -- or in --bench-params): sweep serve-sla refuses it: {why}"
                )));
            }
        }
    }
    Ok(())
}

/// An SLA on goodput needs the objectives that make a request good (`--goodput` after
/// `--`, a `goodput` bench param or `LLMSURGE_GOODPUT`): without, every load measures
/// none and the search would answer "misses" for a server that never failed it.
fn check_goodput(slas: &[Sla], benches: &[Bench]) -> Result<(), UsageError> {
    let Some(sla) = slas.iter().find(|s| s.text.contains("goodput")) else {
        return Ok(());
    };
    if std::env::var_os("LLMSURGE_GOODPUT").is_some() {
        return Ok(());
    }
    let has = |b: &Bench| {
        b.flags
            .iter()
            .chain(&b.common)
            .any(|w| w == "--goodput" || w.starts_with("--goodput="))
    };
    match benches.iter().all(has) {
        true => Ok(()),
        false => Err(UsageError(format!(
            "--sla-params: {:?} judges goodput, which needs the objectives of a good request: add them after -- (e.g. -- --goodput e2e:500ms) or as a goodput bench param",
            sla.text
        ))),
    }
}

/// What the measurements of one point came to.
enum Measured {
    /// The load's result, and why its run was invalid when it was.
    Ok(Box<BenchmarkResult>, Option<String>),
    /// The configuration fails: why.
    Failed(String),
    /// The server died: why (every later point of the configuration fails too).
    ServerDied(String),
    Interrupted,
}

/// The state of one configuration's server while its points are searched.
struct Ctx<'a> {
    args: &'a SweepServeSlaArgs,
    /// The configuration whose server this is: a load's recorded inputs hold it.
    serve: &'a Serve,
    exe: &'a Path,
    target: String,
    server: Option<server::Server>,
    /// Benchmarks this server ran so far (a cache reset comes before all but the first).
    ran: usize,
    /// Benchmarks run and read back (`--resume`) since the report last counted them.
    measured: usize,
    resumed: usize,
    /// The models the loads' reports named, for the report's provenance.
    models: Vec<String>,
}

impl Ctx<'_> {
    /// The result of `strategy` at the point in `dir`: read back (an earlier SLA, or an
    /// earlier run with --resume) or measured now.
    async fn measure(
        &mut self,
        bench: &Bench,
        point_dir: &Path,
        strategy: Strategy,
        nth: usize,
        signals: &mut Signals,
    ) -> Measured {
        // A second run of one load (the search's retest of the boundary) is a run of its
        // own, in a directory of its own.
        let name = match nth {
            0 => load_key(strategy, self.args.sla_precision),
            n => format!(
                "{}-run{}",
                load_key(strategy, self.args.sla_precision),
                n + 1
            ),
        };
        let dir = point_dir.join(&name);
        // What the load measures: a changed input runs it again, as `sweep serve`'s points.
        let inputs = super::inputs(&self.args.sweep, self.serve, bench);
        if self.args.sweep.resume {
            match super::resumable(&dir, &inputs) {
                Ok((report, _)) => {
                    self.models.push(report.target.model.clone());
                    if let Some(r) = report.benchmarks.into_iter().next() {
                        self.resumed += 1;
                        return Measured::Ok(Box::new(r), None);
                    }
                }
                Err(why) if dir.exists() => crate::stdout::println(&format!(
                    "{}: runs again (--resume): {}",
                    dir.display(),
                    terminal(&why)
                )),
                Err(_) => {}
            }
        }
        if self.ran > 0 {
            between_benchmarks(&self.args.sweep, &self.target, &name).await;
        }
        self.ran += 1;
        self.measured += 1;
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return Measured::Failed(format!("{}: {e}", dir.display()));
        }
        let mut flags = bench.flags.clone();
        flags.extend(load_flags(strategy));
        let load = Bench {
            name: bench.name.clone(),
            params: bench.params.clone(),
            flags,
            common: bench.common.clone(),
            // One in flight: the run refuses a cap meant for the other loads.
            skip: match strategy {
                Strategy::Synchronous => &["--max-concurrency"],
                _ => &[],
            },
        };
        crate::stdout::println(&format!("{}: running", dir.display()));
        let ended = run_point(
            self.exe,
            &self.args.sweep,
            &load,
            &self.target,
            &dir,
            self.server.as_mut(),
            signals,
        )
        .await;
        match ended {
            Ended::Interrupted => Measured::Interrupted,
            Ended::ServerDied(why) => Measured::ServerDied(format!("the server died: {why}")),
            Ended::Exited(code) => {
                let complete = matches!(code, 0 | 3 | 4 | 5);
                super::mark_point(&dir, complete, code, &inputs);
                let report = crate::report::json::Report::load(&dir.join("benchmarks.json"));
                if let Ok(r) = &report {
                    self.models.push(r.target.model.clone());
                }
                match report
                    .ok()
                    .filter(|_| complete)
                    .and_then(|r| r.benchmarks.into_iter().next())
                {
                    Some(r) => {
                        let invalid = (code == exit_codes::INVALID_RUN)
                            .then(|| invalid_why(std::slice::from_ref(&r), &dir));
                        Measured::Ok(Box::new(r), invalid)
                    }
                    None => {
                        let tail = server::log_tail(&dir.join("run.log"), 3);
                        Measured::Failed(format!(
                            "{name}: benchmark run ended with exit code {code}: {}",
                            tail.join(" / ")
                        ))
                    }
                }
            }
        }
    }
}

/// Every SLA's search at one point; the loads measured are shared between them.
/// Returns the rows and, when the configuration cannot go on, how it ended.
async fn search_point(
    ctx: &mut Ctx<'_>,
    slas: &[Sla],
    bench: &Bench,
    point_dir: &Path,
    template: &SlaRow,
    signals: &mut Signals,
) -> (Vec<SlaRow>, Option<Measured>) {
    // Every run of each load, in order: the n-th time a search asks for a load it gets
    // its n-th run, so a retest is a second measurement, shared like the first.
    let mut measured: BTreeMap<String, Vec<(BenchmarkResult, Option<String>)>> = BTreeMap::new();
    let mut rows = Vec::new();
    for (k, sla) in slas.iter().enumerate() {
        let mut row = template.clone();
        row.sla = sla.text.clone();
        let mut search = CapacitySearch::new(sla.slo.clone(), ctx.args.sla_precision, 0, None)
            .over(ctx.args.sla_variable.search());
        let mut done: Vec<BenchmarkResult> = Vec::new();
        let mut invalid: Vec<Option<String>> = Vec::new();
        let mut dirs: Vec<(String, bool)> = Vec::new();
        let stop = loop {
            let strategy = match search.next(&done) {
                Ok(Some(s)) => s,
                Ok(None) => break None,
                Err(e) => break Some(Measured::Failed(e.to_string())),
            };
            let key = load_key(strategy, ctx.args.sla_precision);
            let nth = dirs.iter().filter(|(k, _)| *k == key).count();
            let runs = measured.entry(key.clone()).or_default();
            let shared = runs.len() > nth;
            if !shared {
                match ctx.measure(bench, point_dir, strategy, nth, signals).await {
                    Measured::Ok(r, why) => runs.push((*r, why)),
                    other => break Some(other),
                }
            }
            let Some((r, why)) = runs.get(nth) else {
                break None;
            };
            // Judged by this SLA, not by any --slo the run itself had.
            let mut r = r.clone();
            r.slo = None;
            r.index = done.len() as u32;
            done.push(r);
            invalid.push(why.clone());
            dirs.push((key, shared));
        };
        let outcome = search.outcome();
        row.probes = outcome
            .probes
            .iter()
            .zip(&dirs)
            .enumerate()
            .map(|(i, (p, (key, shared)))| SlaProbe {
                // The n-th run of a load is in its n-th directory.
                dir: match dirs[..i].iter().filter(|(k, _)| k == key).count() {
                    0 => key.clone(),
                    n => format!("{key}-run{}", n + 1),
                },
                value: p.rate,
                passed: p.passed,
                retest: p.retest,
                reason: p.reason.clone(),
                inconclusive: p.inconclusive,
                shared: *shared,
                invalid: invalid.get(i).cloned().flatten(),
            })
            .collect();
        if let Some(stop) = stop {
            row.error = Some(match &stop {
                Measured::Failed(why) | Measured::ServerDied(why) => why.clone(),
                Measured::Interrupted => "interrupted".into(),
                Measured::Ok(..) => String::new(),
            });
            rows.push(row);
            // The SLAs not searched yet fail the same way.
            for later in &slas[k + 1..] {
                let mut r = template.clone();
                r.sla = later.text.clone();
                r.error = rows.last().and_then(|x| x.error.clone());
                rows.push(r);
            }
            return (rows, Some(stop));
        }
        // An answer built on a load that measured the client (or nothing) is no answer.
        let invalid: Vec<String> = row
            .probes
            .iter()
            .filter_map(|p| p.invalid.as_ref().map(|why| format!("{}: {why}", p.dir)))
            .collect();
        row.status = match invalid.is_empty() {
            true => Status::Ok,
            false => {
                row.error = Some(invalid.join("; "));
                Status::Invalid
            }
        };
        row.answer = outcome.rate;
        row.bracket = Some(outcome.bracket);
        row.conclusion = Some(outcome.conclusion.clone());
        // The figures of the passing load at the answer.
        if let Some(answer) = outcome.rate
            && let Some(i) = outcome
                .probes
                .iter()
                .rposition(|p| p.passed && p.rate == answer)
            && let Some(r) = done.get(i)
        {
            row.figures = FIGURES
                .iter()
                .filter_map(|f| figure(r, f).map(|v| (f.to_string(), v)))
                .collect();
        }
        // The answer is an offered rate; what the server achieved there beside it.
        let achieved = match row.figures.get(ACHIEVED) {
            Some(a) if ctx.args.sla_variable == SlaVariable::Rate => {
                format!(" (offered; {a:.3} req/s achieved)")
            }
            Some(a) => format!(" ({a:.3} req/s achieved)"),
            None => String::new(),
        };
        crate::stdout::println(&format!(
            "{} [{}]: {}{achieved}",
            template.at.point,
            terminal(&sla.text),
            terminal(&outcome.conclusion)
        ));
        if let Some(why) = &row.error {
            crate::stdout::eprintln(&format!(
                "{} [{}]: {}",
                template.at.point,
                terminal(&sla.text),
                terminal(why)
            ));
        }
        rows.push(row);
    }
    (rows, None)
}

async fn run(args: &SweepServeSlaArgs, slas: &[Sla], serves: &[Serve], benches: &[Bench]) -> i32 {
    let sweep = &args.sweep;
    let (mut signals, exe) = match Signals::with_exe() {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    let out = &sweep.output_dir;
    // Checked with the other inputs before anything started.
    let images = super::image_formats(&sweep.chart_images).unwrap_or_default();
    let mut report = SlaReport {
        serve_cmd: sweep.serve_cmd.as_deref().map(super::secrets::command),
        provenance: Provenance::now(sweep),
        variable: args.sla_variable,
        precision: args.sla_precision,
        slas: slas.iter().map(|s| s.text.clone()).collect(),
        interrupted: false,
        benchmarks_run: 0,
        benchmarks_resumed: 0,
        rows: Vec::new(),
    };
    let mut any_failed = false;
    'serves: for serve in serves {
        let template = |b: usize| SlaRow {
            at: point_of(serve, b, benches),
            sla: String::new(),
            status: Status::Failed,
            answer: None,
            bracket: None,
            conclusion: None,
            figures: BTreeMap::new(),
            probes: Vec::new(),
            error: None,
            log_tail: Vec::new(),
        };
        let fail_all = |report: &mut SlaReport, from: usize, error: &str, tail: &[String]| {
            for &b in serve.benches.iter().filter(|&&b| b >= from) {
                for sla in slas {
                    let mut row = template(b);
                    row.sla = sla.text.clone();
                    row.error = Some(error.to_string());
                    row.log_tail = tail.to_vec();
                    report.rows.push(row);
                }
            }
        };
        let Some((port, target)) = super::port_and_target(sweep) else {
            return exit_codes::RUN_FAILED;
        };
        let command = super::server_command(sweep, serve, port);
        let server_log = serve_tag(serve).map(|t| out.join(format!("{t}.server.log")));
        if sweep.dry_run {
            if let (Some(cmd), Some(s)) = (&command, serve_tag(serve)) {
                crate::stdout::println(&format!("server {s}: {}", terminal(&cmd.shown)));
            }
            for (b, bench) in benches
                .iter()
                .enumerate()
                .filter(|(b, _)| serve.benches.contains(b))
            {
                let dir = out.join(point_name(serve, b, benches));
                let argv = super::secrets::argv(&super::bench_argv(
                    sweep,
                    bench,
                    &target,
                    &dir.join("LOAD"),
                    false,
                ));
                crate::stdout::println(&format!(
                    "search {}: llmsurge {} {{--profile synchronous | --profile throughput | {}}} for each of: {}",
                    point_name(serve, b, benches),
                    terminal(&argv.join(" ")),
                    match args.sla_variable {
                        SlaVariable::Rate => "--profile constant --rate R",
                        SlaVariable::Concurrency => "--profile concurrent --rate N",
                    },
                    report.slas.join("; ")
                ));
            }
            continue;
        }
        let mut running = None;
        if let (Some(cmd), Some(log)) = (&command, &server_log) {
            let own_keys = super::own_keys(serve, benches);
            match start_server(sweep, &exe, cmd, log, &target, own_keys, &mut signals).await {
                Started::Ready(srv) => running = Some(srv),
                Started::Interrupted => {
                    report.interrupted = true;
                    break 'serves;
                }
                Started::Failed { error, log_tail } => {
                    fail_all(&mut report, 0, &error, &log_tail);
                    any_failed = true;
                    write_report(out, &mut report, &images);
                    continue;
                }
            }
        }
        let mut ctx = Ctx {
            args,
            serve,
            exe: &exe,
            target,
            server: running,
            ran: 0,
            measured: 0,
            resumed: 0,
            models: Vec::new(),
        };
        let server_tail = || {
            server_log
                .as_deref()
                .map(|l| server::log_tail(l, TAIL_LINES))
                .unwrap_or_default()
        };
        let mut interrupted = false;
        for (b, bench) in benches
            .iter()
            .enumerate()
            .filter(|(b, _)| serve.benches.contains(b))
        {
            let point_dir = out.join(point_name(serve, b, benches));
            if let Err(e) = std::fs::create_dir_all(&point_dir) {
                crate::stdout::eprintln(&format!("error: {}: {e}", point_dir.display()));
                return exit_codes::RUN_FAILED;
            }
            if let Some(log) = &server_log {
                let link = point_dir.join("server.log");
                let _ = std::fs::remove_file(&link);
                if std::fs::hard_link(log, &link).is_err() {
                    let _ = std::fs::copy(log, &link);
                }
            }
            let (mut rows, stop) = search_point(
                &mut ctx,
                slas,
                bench,
                &point_dir,
                &template(b),
                &mut signals,
            )
            .await;
            for m in ctx.models.drain(..) {
                report.provenance.add_model(&m);
            }
            match stop {
                None => {
                    any_failed |= rows.iter().any(|r| r.status.failed());
                    report.rows.append(&mut rows);
                }
                Some(Measured::Interrupted) => {
                    report.rows.append(&mut rows);
                    interrupted = true;
                }
                Some(Measured::ServerDied(why)) => {
                    crate::stdout::eprintln(&format!(
                        "{}: {}",
                        point_name(serve, b, benches),
                        terminal(&why)
                    ));
                    let tail = server_tail();
                    for r in &mut rows {
                        r.log_tail = tail.clone();
                    }
                    report.rows.append(&mut rows);
                    fail_all(&mut report, b + 1, &why, &tail);
                    any_failed = true;
                    report.benchmarks_run += ctx.measured;
                    report.benchmarks_resumed += ctx.resumed;
                    write_report(out, &mut report, &images);
                    break;
                }
                Some(Measured::Failed(why)) => {
                    crate::stdout::eprintln(&format!(
                        "{}: {}",
                        point_name(serve, b, benches),
                        terminal(&why)
                    ));
                    report.rows.append(&mut rows);
                    any_failed = true;
                }
                Some(Measured::Ok(..)) => {}
            }
            report.benchmarks_run += ctx.measured;
            report.benchmarks_resumed += ctx.resumed;
            ctx.measured = 0;
            ctx.resumed = 0;
            write_report(out, &mut report, &images);
            if interrupted {
                break;
            }
        }
        if let Some(srv) = ctx.server.take() {
            srv.stop().await;
            crate::stdout::println(&format!(
                "server {}: stopped",
                serve_tag(serve).unwrap_or_default()
            ));
        }
        if interrupted {
            report.interrupted = true;
            break 'serves;
        }
    }
    if sweep.dry_run {
        return exit_codes::OK;
    }
    write_report(out, &mut report, &images);
    crate::stdout::println(&format!("SLA report: {}", out.join("sla.json").display()));
    if report.interrupted {
        130
    } else if any_failed {
        exit_codes::RUN_FAILED
    } else {
        exit_codes::OK
    }
}

/// The figure that is the rate a load achieved (below the offered one when the server
/// fell behind).
const ACHIEVED: &str = "requests_per_s";

fn write_report(out: &Path, report: &mut SlaReport, images: &[ImageFormat]) {
    report.provenance.touch();
    if let Err(e) = write(out, report, images) {
        crate::stdout::eprintln(&format!(
            "error: cannot write the SLA report in {}: {e}",
            out.display()
        ));
    }
}

/// The table every tabular format shows: header, cells, and which columns hold only our
/// own text.
fn table(report: &SlaReport) -> (Vec<String>, Vec<Vec<String>>, Vec<bool>) {
    let params = ParamColumns::of(report.rows.iter().map(|r| &r.at));
    // The achieved rate stands beside the answer; the other figures follow.
    let figures: Vec<&str> = FIGURES
        .iter()
        .copied()
        .filter(|f| *f != ACHIEVED && report.rows.iter().any(|r| r.figures.contains_key(*f)))
        .collect();
    let (answer, failing) = match report.variable {
        SlaVariable::Rate => ("max offered rate (req/s)", "failing offered rate (req/s)"),
        SlaVariable::Concurrency => ("max concurrency (streams)", "failing concurrency (streams)"),
    };
    let mut header = params.header();
    let mut ours = params.ours();
    header.extend([
        "sla".into(),
        answer.into(),
        "achieved at answer (req/s)".into(),
        failing.into(),
        "benchmarks".into(),
    ]);
    ours.extend([false, true, true, true, true]);
    header.extend(figures.iter().map(|f| match f.ends_with("_per_s") {
        true => format!("{f} at answer"),
        false => format!("{f} at answer (ms)"),
    }));
    ours.extend(figures.iter().map(|_| true));
    header.extend(["conclusion".into(), "error".into()]);
    ours.extend([false, false]);
    let cells = report
        .rows
        .iter()
        .map(|r| {
            let mut c = params.cells(&r.at, r.status);
            c.push(r.sla.clone());
            c.push(crate::report::cells::cell_value(r.answer));
            c.push(crate::report::cells::cell_value(
                r.figures.get(ACHIEVED).copied(),
            ));
            c.push(crate::report::cells::cell_value(
                r.bracket.and_then(|b| b.1),
            ));
            let shared = r.probes.iter().filter(|p| p.shared).count();
            c.push(format!("{} ({shared} shared)", r.probes.len()));
            c.extend(
                figures
                    .iter()
                    .map(|f| crate::report::cells::cell_value(r.figures.get(*f).copied())),
            );
            c.push(r.conclusion.clone().unwrap_or_default());
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

/// The probes a chart marks apart: a series of markers each, in a colour no curve has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProbeMark {
    /// It missed the SLA (or, at a rate, its queue grew).
    Failed,
    /// Its SLO could not decide (too few requests).
    Inconclusive,
    /// Its `benchmark run` judged the run invalid: it measured no server.
    Invalid,
}

impl ProbeMark {
    /// Every kind, in the order of their discriminants.
    const ALL: [ProbeMark; 3] = [Self::Failed, Self::Inconclusive, Self::Invalid];

    /// How `p` is marked, if apart from the passing probes.
    fn of(p: &SlaProbe) -> Option<ProbeMark> {
        if p.invalid.is_some() {
            Some(Self::Invalid)
        } else if p.passed {
            None
        } else if p.inconclusive {
            Some(Self::Inconclusive)
        } else {
            Some(Self::Failed)
        }
    }

    fn legend(self) -> &'static str {
        match self {
            Self::Failed => "failed the SLA",
            Self::Inconclusive => "inconclusive (too few requests to judge)",
            Self::Invalid => "invalid run (measured no server)",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Self::Failed => "#000000",
            Self::Inconclusive => "#c0c0c0",
            Self::Invalid => "#ff00ff",
        }
    }
}

/// One chart per SLA: each point's search, the load of every probe in the order it ran,
/// the failing, inconclusive and invalid probes marked apart, a series each (a search
/// that closes in on its boundary zigzags between them and the passing ones). The y
/// axis is linear: the charts draw no logarithmic axis.
fn probe_charts(report: &SlaReport) -> Vec<Chart> {
    let (name, unit) = match report.variable {
        SlaVariable::Rate => ("offered request rate", "requests/s"),
        SlaVariable::Concurrency => ("concurrency", "streams"),
    };
    // Labelled as the sweep's curves: by the parameters that tell the points apart.
    let rows: Vec<Row> = report
        .rows
        .iter()
        .map(|r| Row::new(r.at.clone(), Status::Ok, Outcome::Ok))
        .collect();
    let varied = charts::varied(&rows);
    let mut out = Vec::new();
    for (k, sla) in report.slas.iter().enumerate() {
        let mut chart = Chart::new(
            &format!("sla-probes-{}", k + 1),
            "charts-sla",
            &format!("The search for {sla}"),
            Axis::new("probe, in the order run", ""),
            Axis::new(name, unit),
        );
        // The probes of each kind marked apart, by `ProbeMark as usize`.
        let mut apart: [Vec<(f64, Option<f64>)>; 3] = Default::default();
        let mut answers = Vec::new();
        for (row, shown) in report.rows.iter().zip(&rows).filter(|(r, _)| r.sla == *sla) {
            let label = charts::label(shown, &varied, None, false);
            let probes = || {
                row.probes
                    .iter()
                    .enumerate()
                    .map(|(n, p)| ((n + 1) as f64, p))
            };
            for (n, p) in probes() {
                if let Some(m) = ProbeMark::of(p) {
                    apart[m as usize].push((n, Some(p.value)));
                }
            }
            let color = PALETTE[chart.series.len() % PALETTE.len()];
            let points: Vec<(f64, Option<f64>)> =
                probes().map(|(n, p)| (n, Some(p.value))).collect();
            if points.is_empty() {
                continue;
            }
            chart
                .series
                .push(Series::new(label.as_str(), color, points));
            answers.push(format!(
                "{label}: {}",
                row.answer.map_or("no answer".into(), |a| format!(
                    "{} {unit}",
                    significant(a, 4)
                ))
            ));
        }
        if chart.series.is_empty() {
            continue;
        }
        for (mark, pts) in ProbeMark::ALL
            .into_iter()
            .zip(apart)
            .filter(|(_, pts)| !pts.is_empty())
        {
            let mut marks = Series::new(mark.legend(), mark.color(), pts);
            marks.line = false;
            chart.series.push(marks);
        }
        chart
            .notes
            .push(format!("Answers: {}.", answers.join("; ")));
        out.push(chart);
    }
    out
}

/// Writes `sla.json`, `sla.csv`, `sla.md` and `sla.html` into `dir` (each atomically),
/// and the charts of the probes as `images` under `dir/charts`.
pub fn write(dir: &Path, report: &SlaReport, images: &[ImageFormat]) -> std::io::Result<()> {
    let charts = probe_charts(report);
    super::report::write_images(dir, &charts, images)?;
    let json = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    let (header, cells, ours) = table(report);
    let failed: Vec<bool> = report.rows.iter().map(|r| r.status.failed()).collect();
    let mut intro = vec![Intro {
        text: format!(
            "The highest {} meeting each SLA, within {:.1}% (the capacity search: boundary confirmed by a second run{}). {} benchmarks run, {} read back; a load measured once serves every SLA.",
            match report.variable {
                SlaVariable::Rate =>
                    "offered request rate (req/s: the rate the load sent at; the rate the server achieved stands beside it)",
                SlaVariable::Concurrency => "concurrency (streams)",
            },
            report.precision * 100.0,
            match report.variable {
                SlaVariable::Rate => ", a growing queue fails",
                SlaVariable::Concurrency => "",
            },
            report.benchmarks_run,
            report.benchmarks_resumed,
        ),
        code: None,
    }];
    intro.extend(
        report
            .provenance
            .intro(report.serve_cmd.as_deref(), report.interrupted),
    );
    super::report::write_tables(
        dir,
        "sla",
        "Sweep: SLA",
        &json,
        &intro,
        &Table {
            header: &header,
            cells: &cells,
            ours: &ours,
            failed: &failed,
        },
        &charts,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllms_sla_constraints_become_llmsurges_checks() {
        let v = |s: &str| serde_json::Value::String(s.into());
        for (key, value, want) in [
            ("p99_e2el_ms", "<=200", "e2e_p99<=200ms"),
            ("median_tpot_ms", "< 20", "tpot_p50<20ms"),
            ("mean_ttft_ms", ">=1", "ttft_mean>=1ms"),
            ("p99.9_itl_ms", "<=50", "itl_p99_9<=50ms"),
            ("request_throughput", ">=10", "requests_per_s>=10"),
        ] {
            let check = vllm_check(key, &v(value)).expect(key);
            assert_eq!(check, want);
            Slo::parse(&check).expect(want);
        }
        for (key, value) in [
            ("std_ttft_ms", "<=1"),
            ("p99_x_ms", "<=1"),
            ("p99_e2el_ms", "200"),
        ] {
            assert!(vllm_check(key, &v(value)).is_err(), "{key}");
        }
        // Said as written, not as the check it would have become.
        let e = vllm_check("p99_e2el_ms", &v("<=abc")).expect_err("abc");
        assert!(
            e.contains("\"abc\" is not a number") && !e.contains("abcms"),
            "{e}"
        );
        let e = vllm_check("p99_e2el_ms", &v("==2000")).expect_err("==");
        assert!(e.contains("a bound, not a value to equal"), "{e}");
    }

    #[test]
    fn rates_are_named_with_a_few_significant_digits() {
        assert_eq!(significant(10.772795274800467, 4), "10.77");
        assert_eq!(significant(0.33333, 4), "0.3333");
        assert_eq!(significant(12.0, 4), "12");
        assert_eq!(significant(12345.6, 4), "12346");
        let key = |rate, precision| load_key(Strategy::Constant { rate }, precision);
        assert_eq!(key(10.772795274800467, 0.05), "rate-10.77");
        // A finer search gets more digits: its rates are closer together.
        assert_eq!(key(10.772795274800467, 0.0001), "rate-10.7728");
    }

    #[test]
    fn the_probe_chart_marks_failing_inconclusive_and_invalid_probes_apart() {
        let probe =
            |value: f64, passed: bool, reason: Option<&str>, invalid: Option<&str>| SlaProbe {
                dir: format!("concurrency-{value}"),
                value,
                passed,
                retest: false,
                reason: reason.map(str::to_string),
                inconclusive: reason.is_some_and(|r| r.starts_with("SLO inconclusive")),
                shared: false,
                invalid: invalid.map(str::to_string),
            };
        let row = SlaRow {
            at: Point {
                point: "s0-b0".into(),
                serve_index: Some(0),
                server: Some("s0".into()),
                bench_index: 0,
                serve_params: serde_json::Map::new(),
                bench_params: serde_json::Map::new(),
            },
            sla: "tpot_p50<=20ms".into(),
            status: Status::Invalid,
            answer: Some(2.0),
            bracket: None,
            conclusion: None,
            figures: BTreeMap::new(),
            probes: vec![
                probe(1.0, true, None, None),
                probe(2.0, true, None, None),
                probe(64.0, false, Some("tpot_p50 40ms > 20ms"), None),
                probe(
                    8.0,
                    false,
                    Some("SLO inconclusive (too few requests): 2 of 3"),
                    None,
                ),
                probe(
                    4.0,
                    false,
                    Some("tpot_p50 30ms > 20ms"),
                    Some("no request succeeded"),
                ),
            ],
            error: None,
            log_tail: Vec::new(),
        };
        let report = SlaReport {
            serve_cmd: None,
            provenance: Provenance::default(),
            variable: SlaVariable::Concurrency,
            precision: 0.05,
            slas: vec!["tpot_p50<=20ms".into()],
            interrupted: false,
            benchmarks_run: 5,
            benchmarks_resumed: 0,
            rows: vec![row],
        };
        let charts = probe_charts(&report);
        assert_eq!(charts.len(), 1);
        let marked = |legend: &str| -> Vec<(f64, Option<f64>)> {
            charts[0]
                .series
                .iter()
                .find(|s| s.label.starts_with(legend))
                .map(|s| s.points.clone())
                .unwrap_or_else(|| panic!("{legend}: {:?}", charts[0].series))
        };
        assert_eq!(marked("failed the SLA"), [(3.0, Some(64.0))]);
        assert_eq!(marked("inconclusive"), [(4.0, Some(8.0))]);
        assert_eq!(marked("invalid run"), [(5.0, Some(4.0))]);
        // Every series its own colour: the three kinds never read as one.
        let colors: std::collections::BTreeSet<&str> =
            charts[0].series.iter().map(|s| s.color.as_str()).collect();
        assert_eq!(
            colors.len(),
            charts[0].series.len(),
            "{:?}",
            charts[0].series
        );
    }
}
