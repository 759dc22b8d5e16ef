//! `benchmark merge`: one report from the reports of N shards (`--shard K/N`) of one run.
//!
//! Every merged field is a function of the inputs sorted by shard index, so any order of
//! the same files gives the same bytes. Counts add; distributions are recomputed from the
//! shards' histograms added together (`class_histograms`: every status class, so every
//! percentile is that of the union exactly); throughput is taken over the merged
//! measured window on wall-clock time; time series are aligned on wall-clock seconds.
//! The rules are documented in docs/cli.md ("Merging shards") and docs/report.md.

use super::json::{HostInfo, MergeInfo, Metadata, REPORT_SCHEMA_VERSION, Report};
use super::requests::{RequestEntry, RequestSamples};
use super::server;
use llmsurge_coordinator::result::{ErrorEntry, MeasuredCounts, ModelResult, ShardHealth, Window};
use llmsurge_coordinator::server_metrics::summary::{ClientCounts, cross_check_counts};
use llmsurge_coordinator::server_metrics::{CrossCheck, ServerMetrics};
use llmsurge_coordinator::slo::{Goodput, Slo};
use llmsurge_coordinator::state::{Audit, Counts, SAMPLES_PER_KIND, TokenSources};
use llmsurge_coordinator::timeseries::TimePoint;
use llmsurge_coordinator::{BenchmarkResult, StopReason};
use llmsurge_proto::MetricSet;

/// The `args` keys (JSON pointers) that differ between the shards of one run and are left
/// out when comparing them and from the merged report: the shard itself, and where each
/// shard wrote its files (`RunPlan::output_dir`, `ReportSettings::request_log`). Every
/// other key must be equal in every shard.
pub const PER_SHARD_ARGS: [&str; 3] = ["/shard", "/output_dir", "/reporting/request_log"];

/// Counts that add across shards. `add` sums the fields its type lists in [`summed!`],
/// the one list of what a merge adds up; any other field is merged by its own rule where
/// the type is merged (a mean is weighted, a window spans, an optional rate stays absent
/// where every shard lacks it).
trait Summed {
    /// Adds `other`'s summed fields to `self`'s.
    fn add(&mut self, other: &Self);
}

impl Summed for u64 {
    fn add(&mut self, other: &Self) {
        *self += other;
    }
}

impl Summed for f64 {
    fn add(&mut self, other: &Self) {
        *self += other;
    }
}

/// Implements [`Summed`] for each type by summing the fields listed after it.
macro_rules! summed {
    ($($ty:ty: $($field:ident),+;)+) => {
        $(impl Summed for $ty {
            fn add(&mut self, other: &Self) {
                $(Summed::add(&mut self.$field, &other.$field);)+
            }
        })+
    };
}

summed! {
    Counts: created, completed, errored, cancelled, cancelled_planned, cancelled_sent, in_flight,
        late, warmup, cooldown, resent;
    MeasuredCounts: completed, errored, cancelled;
    TokenSources: usage, stream, unknown, mismatched, itl_timed;
    Audit: sent_shm, sent_books, slots_claimed, slots_returned, unreported, unsent_lost;
    ClientCounts: completed, output_tokens, prompt_tokens, prompt_tokens_sent,
        prompts_unknown, prompts_unknown_bound, unfinished, outputs_unknown,
        outputs_unreceived_bound, outputs_unbounded, output_tokens_asked, output_tokens_short;
    // A model's own counts; its good requests, errors and histograms merge below.
    ModelResult: requests, measured_requests, output_tokens, prompt_tokens, busy_s;
    // A second of the time series; its optional rate and weighted TTFT merge below.
    TimePoint: started, completed, errored, concurrency, ttft_count;
}

/// Why the inputs cannot be merged: one line naming the file and the field.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MergeError(pub String);

fn refuse(file: &str, field: &str, what: impl std::fmt::Display) -> MergeError {
    MergeError(format!("{file}: {field}: {what}"))
}

/// `args` without the [`PER_SHARD_ARGS`].
fn shared_args(args: &serde_json::Value) -> serde_json::Value {
    let mut args = args.clone();
    for pointer in PER_SHARD_ARGS {
        let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", pointer));
        if let Some(obj) = args
            .pointer_mut(parent)
            .and_then(serde_json::Value::as_object_mut)
        {
            obj.remove(key);
        }
    }
    args
}

/// The first path (`args.limits.max_requests`) at which two JSON values differ.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, path: &str) -> Option<String> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(u), Some(v)) => first_difference(u, v, &format!("{path}.{k}")),
                _ => Some(format!("{path}.{k}")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (u, v))| first_difference(u, v, &format!("{path}[{i}]"))),
        _ => (a != b).then(|| path.to_string()),
    }
}

/// One input: its file name (for messages), shard index, report and decoded histograms
/// (one set per benchmark).
struct Input {
    file: String,
    index: u32,
    report: Report,
    sets: Vec<MetricSet>,
    /// Per benchmark, each `--lora` model's histograms (in `models` order).
    model_sets: Vec<Vec<MetricSet>>,
}

impl Input {
    /// The shard as its `--shard` flag names it (`2/3`), for prefixed messages.
    fn label(&self) -> String {
        let n = self.report.metadata.shard.map_or(1, |s| s.count);
        format!("shard {}/{n}", self.index + 1)
    }
}

/// Merges shard reports (each with the file it came from, for messages). Refuses
/// reports of different runs, configurations, a duplicate shard, a report that is not a
/// shard's, and a missing shard unless `allow_partial`.
pub fn merge(inputs: Vec<(String, Report)>, allow_partial: bool) -> Result<Report, MergeError> {
    if inputs.is_empty() {
        return Err(MergeError("no reports to merge".into()));
    }
    let mut shards = Vec::with_capacity(inputs.len());
    for (file, report) in inputs {
        let Some(shard) = report.metadata.shard else {
            return Err(refuse(
                &file,
                "metadata.shard",
                "absent: not a shard's report (written by `benchmark run --shard K/N`)",
            ));
        };
        if shard.count == 0 || shard.index >= shard.count {
            return Err(refuse(
                &file,
                "metadata.shard",
                format!("{}/{} is not a shard", shard.index, shard.count),
            ));
        }
        let mut sets = Vec::with_capacity(report.benchmarks.len());
        let mut model_sets = Vec::with_capacity(report.benchmarks.len());
        for (i, b) in report.benchmarks.iter().enumerate() {
            let measured = b.measured_requests;
            if b.class_histograms.is_empty()
                && measured.completed + measured.errored + measured.cancelled > 0
            {
                return Err(refuse(
                    &file,
                    &format!("benchmarks[{i}].class_histograms"),
                    "absent: written by an llmsurge that cannot be merged",
                ));
            }
            let set = b.metric_set().map_err(|e| {
                refuse(
                    &file,
                    &format!("benchmarks[{i}].class_histograms.{}", e.key),
                    e.message,
                )
            })?;
            sets.push(set);
            let mut per_model = Vec::with_capacity(b.models.len());
            for (j, m) in b.models.iter().enumerate() {
                per_model.push(m.metric_set().map_err(|e| {
                    refuse(
                        &file,
                        &format!("benchmarks[{i}].models[{j}].class_histograms.{}", e.key),
                        e.message,
                    )
                })?);
            }
            model_sets.push(per_model);
        }
        shards.push(Input {
            file,
            index: shard.index,
            report,
            sets,
            model_sets,
        });
    }
    // Every later step reads the shards in index order: the output cannot depend on the
    // order of the files. Ties (a duplicate) are refused below.
    shards.sort_by_key(|s| s.index);
    let count = check(&shards)?;
    let present: Vec<u32> = shards.iter().map(|s| s.index).collect();
    let missing: Vec<u32> = (0..count).filter(|i| !present.contains(i)).collect();
    if !missing.is_empty() && !allow_partial {
        return Err(MergeError(format!(
            "metadata.shard: shard(s) {} of {count} missing (merge them all, or pass --allow-partial)",
            shard_numbers(&missing)
        )));
    }
    Ok(combine(&shards, count, missing))
}

/// The shards of 0-based `indices` as the user names them (K of `--shard K/N`, from 1).
pub fn shard_numbers(indices: &[u32]) -> String {
    indices
        .iter()
        .map(|i| (i + 1).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks the sorted shards belong to one run; returns N.
fn check(shards: &[Input]) -> Result<u32, MergeError> {
    let first = &shards[0];
    let count = first.report.metadata.shard.map_or(0, |s| s.count);
    let args = shared_args(&first.report.args);
    for (pos, s) in shards.iter().enumerate() {
        let r = &s.report;
        let n = r.metadata.shard.map_or(0, |s| s.count);
        if n != count {
            return Err(refuse(
                &s.file,
                "metadata.shard.count",
                format!("{n}, but {} has {count}", first.file),
            ));
        }
        if pos > 0 && shards[pos - 1].index == s.index {
            return Err(refuse(
                &s.file,
                "metadata.shard.index",
                format!("{} is also that of {}", s.index, shards[pos - 1].file),
            ));
        }
        if r.metadata.version != first.report.metadata.version {
            return Err(refuse(
                &s.file,
                "metadata.version",
                format!(
                    "{}, but {} has {}",
                    r.metadata.version, first.file, first.report.metadata.version
                ),
            ));
        }
        if r.metadata.start_at != first.report.metadata.start_at {
            return Err(refuse(
                &s.file,
                "metadata.start_at",
                format!("differs from that of {}", first.file),
            ));
        }
        if let Some(path) = first_difference(&shared_args(&r.args), &args, "args") {
            return Err(refuse(
                &s.file,
                &path,
                format!("differs from that of {}: not the same run", first.file),
            ));
        }
        if r.benchmarks.len() != first.report.benchmarks.len() {
            return Err(refuse(
                &s.file,
                "benchmarks",
                format!(
                    "{} benchmarks, but {} has {}",
                    r.benchmarks.len(),
                    first.file,
                    first.report.benchmarks.len()
                ),
            ));
        }
        for (i, (b, f)) in r
            .benchmarks
            .iter()
            .zip(&first.report.benchmarks)
            .enumerate()
        {
            if b.strategy != f.strategy {
                return Err(refuse(
                    &s.file,
                    &format!("benchmarks[{i}].strategy"),
                    format!("{}, but {} has {}", b.strategy, first.file, f.strategy),
                ));
            }
        }
    }
    Ok(count)
}

fn combine(shards: &[Input], count: u32, missing: Vec<u32>) -> Report {
    let first = &shards[0].report;
    let reports = || shards.iter().map(|s| &s.report);
    let hosts: Vec<HostInfo> = reports().map(|r| r.metadata.host.clone()).collect();
    let mut extras = serde_json::Map::new();
    for r in reports() {
        for (k, v) in &r.metadata.extras {
            // The lowest shard's value wins a key two shards set differently.
            extras.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let mut warnings: Vec<String> = Vec::new();
    for w in reports().flat_map(|r| &r.target.warnings) {
        if !warnings.contains(w) {
            warnings.push(w.clone());
        }
    }
    let args = shared_args(&first.args);
    let run_seeds = super::across_runs::run_seeds(&args);
    // The SLO is judged on the fleet's numbers, from the spec every shard was given.
    let slo: Option<Slo> = args
        .get("slo")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let benchmarks: Vec<BenchmarkResult> = (0..first.benchmarks.len())
        .map(|i| merge_benchmark(shards, i, count, slo.as_ref()))
        .collect();
    let request_samples = (0..first.request_samples.len())
        .map(|i| merge_samples(shards, i))
        .collect();
    Report {
        schema_version: REPORT_SCHEMA_VERSION,
        metadata: Metadata {
            tool: first.metadata.tool.clone(),
            version: first.metadata.version.clone(),
            host: fleet_host(&hosts),
            start_time: reports()
                .map(|r| r.metadata.start_time)
                .fold(f64::INFINITY, f64::min),
            end_time: reports()
                .map(|r| r.metadata.end_time)
                .fold(f64::NEG_INFINITY, f64::max),
            complete: missing.is_empty() && reports().all(|r| r.metadata.complete),
            interrupted: reports().any(|r| r.metadata.interrupted),
            extras,
            shard: None,
            start_at: first.metadata.start_at,
            tls_insecure: reports().any(|r| r.metadata.tls_insecure),
            merged: Some(MergeInfo {
                count,
                shards: shards.iter().map(|s| s.index).collect(),
                missing,
                hosts,
            }),
            label: first.metadata.label.clone(),
        },
        args,
        target: super::json::TargetInfo {
            warnings,
            ..first.target.clone()
        },
        // Shards of a repeated run: each merged benchmark keeps its run, so the
        // run-to-run statistics are recomputed over the merged runs.
        across_runs: super::across_runs::compute(&benchmarks, &run_seeds),
        knees: super::knee::knees(&benchmarks),
        // Each shard's timeline is on its own host's clock: a merged report has none.
        timeline: Vec::new(),
        // A slice's percentiles cannot be merged from other hosts' percentiles.
        slices: Vec::new(),
        benchmarks,
        request_samples,
        metric_definitions: first.metric_definitions.clone(),
        capacity: None,
        invalid_run: Vec::new(),
        // Every shard loaded the same server: the first shard's reading stands for it.
        server_fingerprint: first.server_fingerprint.clone(),
    }
}

/// The fleet as one host: distinct names and descriptions joined, CPUs and memory summed,
/// the tightest open-file limits, and the clock synchronised only if every host's is.
fn fleet_host(hosts: &[HostInfo]) -> HostInfo {
    fn distinct<'a>(values: impl Iterator<Item = &'a str>) -> String {
        let mut seen: Vec<&str> = Vec::new();
        for v in values {
            if !seen.contains(&v) {
                seen.push(v);
            }
        }
        seen.join(", ")
    }
    let joined =
        |field: fn(&HostInfo) -> &String| distinct(hosts.iter().map(|h| field(h).as_str()));
    // Absent when no host knew the fact; otherwise the distinct known values.
    let joined_known = |field: fn(&HostInfo) -> &Option<String>| {
        let known: Vec<&str> = hosts.iter().filter_map(|h| field(h).as_deref()).collect();
        (!known.is_empty()).then(|| distinct(known.into_iter()))
    };
    // One host without the fact is enough to spoil the fleet's: all must be known true.
    let all_known = |field: fn(&HostInfo) -> Option<bool>| {
        let facts: Vec<Option<bool>> = hosts.iter().map(field).collect();
        if facts.contains(&Some(false)) {
            Some(false)
        } else if !facts.is_empty() && facts.iter().all(|f| *f == Some(true)) {
            Some(true)
        } else {
            None
        }
    };
    HostInfo {
        hostname: joined(|h| &h.hostname),
        os: joined(|h| &h.os),
        cpu: joined(|h| &h.cpu),
        cpus: hosts.iter().map(|h| h.cpus).sum(),
        memory_bytes: hosts.iter().map(|h| h.memory_bytes).sum(),
        kernel: joined_known(|h| &h.kernel),
        cpu_governor: joined_known(|h| &h.cpu_governor),
        open_files_soft: hosts.iter().filter_map(|h| h.open_files_soft).min(),
        open_files_hard: hosts.iter().filter_map(|h| h.open_files_hard).min(),
        clock_source: joined_known(|h| &h.clock_source),
        // One unsynchronised host is enough to misalign a shared start.
        ntp_synchronized: all_known(|h| h.ntp_synchronized),
        realtime_pacer: all_known(|h| h.realtime_pacer),
    }
}

/// How much a stop reason says about the run, for choosing one when shards disagree: a
/// failure outranks a user's interrupt, which outranks a limit, which outranks a
/// schedule that simply ran out.
fn severity(reason: &Option<StopReason>) -> u8 {
    match reason {
        Some(StopReason::WorkerFailure { .. }) => 6,
        Some(StopReason::Interrupted) => 5,
        Some(StopReason::MaxErrors { .. } | StopReason::MaxErrorRate { .. }) => 4,
        Some(StopReason::OverSaturation { .. }) => 3,
        Some(StopReason::MaxSeconds { .. }) => 2,
        Some(
            StopReason::MaxRequests { .. }
            | StopReason::DatasetExhausted { .. }
            | StopReason::PrecisionReached { .. },
        ) => 1,
        Some(StopReason::ScheduleComplete) | None => 0,
    }
}

/// The shards' parts of one optional figure added up; `None` when no shard has it.
fn merged<T: Clone>(
    parts: &[&BenchmarkResult],
    get: impl Fn(&BenchmarkResult) -> Option<&T>,
    add: impl Fn(&mut T, &T),
) -> Option<T> {
    let mut all: Option<T> = None;
    for o in parts.iter().filter_map(|b| get(b)) {
        match &mut all {
            Some(a) => add(a, o),
            None => all = Some(o.clone()),
        }
    }
    all
}

fn merge_benchmark(shards: &[Input], i: usize, count: u32, slo: Option<&Slo>) -> BenchmarkResult {
    let parts: Vec<&BenchmarkResult> = shards.iter().map(|s| &s.report.benchmarks[i]).collect();
    let mut m = parts[0].clone();
    // Session books are not merged across shards yet: one shard's would pass for all.
    m.sessions = None;
    m.agent_traces = None;
    // One shard's steady window and precision are not the whole load's.
    m.steady_state = None;
    m.precision = None;
    m.start_time = parts
        .iter()
        .map(|b| b.start_time)
        .fold(f64::INFINITY, f64::min);
    m.end_time = parts
        .iter()
        .map(|b| b.end_time)
        .fold(f64::NEG_INFINITY, f64::max);
    m.duration_s = m.end_time - m.start_time;

    // Measured window: earliest measured start to latest measured end, on wall-clock
    // time; shards that measured nothing have none.
    let windows: Vec<&Window> = parts
        .iter()
        .map(|b| &b.measured_window)
        .filter(|w| w.end_time > 0.0)
        .collect();
    m.measured_window = if windows.is_empty() {
        Window::default()
    } else {
        let start = windows
            .iter()
            .map(|w| w.start_time)
            .fold(f64::INFINITY, f64::min);
        let end = windows
            .iter()
            .map(|w| w.end_time)
            .fold(f64::NEG_INFINITY, f64::max);
        Window {
            start_time: start,
            end_time: end,
            duration_s: end - start,
        }
    };
    let d = m.measured_window.duration_s;
    let per_s = |n: f64| if d > 0.0 { n / d } else { 0.0 };

    // The most telling stop reason (the lowest shard's among equals), its instant
    // counted from the merged start.
    let (stopper, _) = parts
        .iter()
        .enumerate()
        .max_by_key(|(k, b)| (severity(&b.stop_reason), std::cmp::Reverse(*k)))
        .unwrap_or((0, &parts[0]));
    m.stop_reason = parts[stopper].stop_reason.clone();
    m.stop_time_s = parts[stopper]
        .stop_time_s
        .map(|t| parts[stopper].start_time + t - m.start_time);
    m.interrupted = parts.iter().any(|b| b.interrupted);
    m.server_lost = merge_server_lost(&parts, m.start_time, m.measured_window.end_time);

    let mut requests = Counts::default();
    let mut measured = MeasuredCounts::default();
    let mut tokens = TokenSources::default();
    for b in &parts {
        requests.add(&b.requests);
        measured.add(&b.measured_requests);
        if let Some(t) = &b.token_sources {
            tokens.add(t);
        }
    }
    m.requests = requests;
    m.measured_requests = measured;
    // Absent where no shard has them (a format without output).
    m.token_sources = parts
        .iter()
        .any(|b| b.token_sources.is_some())
        .then_some(tokens);
    // Sums over the shards' requests; the limit is the same in every shard.
    m.output_lengths = merged(&parts, |b| b.output_lengths.as_ref(), |a, o| a.add(o));
    // The kept-up rule's evidence from every shard, not the first one's alone.
    m.unanswered = merged(&parts, |b| b.unanswered.as_ref(), |a, o| a.add(o));
    m.intent_drift = merged(&parts, |b| b.intent_drift.as_ref(), |a, o| a.add(o));
    m.errors = merge_errors(&parts);
    m.audit = merge_audit(shards, i);

    // Throughput: the shards' totals (rate × their own window, rounded back to the
    // integer counts they came from) over the merged window.
    let total = |rate: fn(&BenchmarkResult) -> f64| -> f64 {
        parts
            .iter()
            .map(|b| (rate(b) * b.measured_window.duration_s).round())
            .sum()
    };
    let output_tokens = total(|b| b.throughput.output_tokens_per_s.unwrap_or(0.0));
    let all_tokens = total(|b| b.throughput.total_tokens_per_s);
    // Summed time in flight (ns precision is what each shard measured) over the window.
    let busy_s: f64 = parts
        .iter()
        .map(|b| b.throughput.concurrency_mean * b.measured_window.duration_s)
        .sum();
    m.throughput.requests_per_s = per_s(measured.completed as f64);
    m.throughput.output_tokens_per_s = parts
        .iter()
        .any(|b| b.throughput.output_tokens_per_s.is_some())
        .then(|| per_s(output_tokens));
    m.throughput.total_tokens_per_s = per_s(all_tokens);
    m.throughput.concurrency_mean = per_s(busy_s);
    // Embeddings and ranking: inputs and input tokens, summed the same way.
    if parts.iter().all(|b| b.throughput.inputs_per_s.is_some()) {
        let inputs = total(|b| b.throughput.inputs_per_s.unwrap_or(0.0));
        let input_tokens = total(|b| b.throughput.input_tokens_per_s.unwrap_or(0.0));
        m.throughput.inputs_per_s = Some(per_s(inputs));
        m.throughput.input_tokens_per_s = Some(per_s(input_tokens));
    }
    // An upper bound: the shards' peaks need not have coincided.
    m.throughput.concurrency_peak = parts.iter().map(|b| b.throughput.concurrency_peak).sum();

    m.goodput = parts[0].goodput.map(|g| {
        let good: u64 = parts
            .iter()
            .filter_map(|b| b.goodput)
            .map(|g| g.good_requests)
            .sum();
        let unfinished: u64 = parts
            .iter()
            .filter_map(|b| b.goodput)
            .map(|g| g.unfinished_not_good)
            .sum();
        let planned: u64 = parts
            .iter()
            .filter_map(|b| b.goodput)
            .map(|g| g.planned)
            .sum();
        Goodput::new(g.spec, good, &measured, unfinished, planned, d)
    });

    // Client health: each shard's kept; the fleet's is a bottleneck if any shard was.
    let mut client = parts[0].client.clone();
    client.late_requests = parts.iter().map(|b| b.client.late_requests).sum();
    client.worker_cpu_s = parts.iter().map(|b| b.client.worker_cpu_s).sum();
    let cpu_capacity: f64 = parts
        .iter()
        .map(|b| b.duration_s * b.workers.len().max(1) as f64)
        .sum();
    client.worker_cpu_utilization = if cpu_capacity > 0.0 {
        client.worker_cpu_s / cpu_capacity
    } else {
        0.0
    };
    client.bottleneck = parts.iter().any(|b| b.client.bottleneck);
    client.warnings = shards
        .iter()
        .zip(&parts)
        .flat_map(|(s, b)| {
            b.client
                .warnings
                .iter()
                .map(move |w| format!("{}: {w}", s.label()))
        })
        .collect();
    m.client = client;
    m.shards = shards
        .iter()
        .zip(&parts)
        .map(|(s, b)| ShardHealth {
            index: s.index,
            count,
            host: s.report.metadata.host.hostname.clone(),
            completed: b.measured_requests.completed,
            client: b.client.clone(),
        })
        .collect();

    let mut set = MetricSet::new();
    for s in shards {
        // Both sides auto-resize with the same precision: adding cannot fail.
        let _ = set.merge(&s.sets[i]);
    }
    let unstreamed = m.unstreamed();
    m.set_distributions(&set);
    m.models = merge_models(shards, i, d);
    if unstreamed {
        m.drop_metrics(&llmsurge_coordinator::result::STREAM_METRICS);
    }
    m.timeseries = merge_timeseries(&parts, m.start_time);
    m.workers = parts.iter().flat_map(|b| b.workers.clone()).collect();
    m.slo = slo.map(|slo| slo.judge(&m));
    m.server_metrics = merge_server_metrics(shards, &parts, count, m.start_time);
    m
}

/// The server lost, when every shard that measured requests lost it: from the latest
/// shard's instant on (counted from the merged start) none succeeded anywhere; the
/// shards' errored tails summed (each from its own instant, so a few sent before the
/// latest instant may be among them).
fn merge_server_lost(
    parts: &[&BenchmarkResult],
    start: f64,
    measured_end: f64,
) -> Option<llmsurge_coordinator::error_tail::ServerLost> {
    let measuring: Vec<&&BenchmarkResult> = parts
        .iter()
        .filter(|b| b.measured_requests.completed + b.measured_requests.errored > 0)
        .collect();
    let lost: Vec<(f64, &llmsurge_coordinator::error_tail::ServerLost)> = measuring
        .iter()
        .filter_map(|b| b.server_lost.as_ref().map(|l| (b.start_time - start, l)))
        .collect();
    if lost.is_empty() || lost.len() < measuring.len() {
        return None;
    }
    let (offset, latest) = lost
        .iter()
        .max_by(|a, b| (a.0 + a.1.at_s).total_cmp(&(b.0 + b.1.at_s)))?;
    let at_s = offset + latest.at_s;
    Some(llmsurge_coordinator::error_tail::ServerLost {
        at_s,
        last_success_s: lost
            .iter()
            .map(|(o, l)| o + l.last_success_s)
            .fold(f64::NEG_INFINITY, f64::max),
        errored: lost.iter().map(|(_, l)| l.errored).sum(),
        span_s: (measured_end - start - at_s).max(0.0),
        reason: latest.reason.clone(),
    })
}

/// The `--lora` models of a merged benchmark, matched by name (in the order the shards
/// first name them): counts, tokens and time in flight added, histograms merged, and the
/// throughput taken over the merged measured window of `duration_s`.
fn merge_models(shards: &[Input], i: usize, duration_s: f64) -> Vec<ModelResult> {
    let mut out: Vec<(ModelResult, MetricSet)> = Vec::new();
    for s in shards {
        let b = &s.report.benchmarks[i];
        for (j, m) in b.models.iter().enumerate() {
            let k = match out.iter().position(|(o, _)| o.model == m.model) {
                Some(k) => k,
                None => {
                    out.push((
                        ModelResult {
                            model: m.model.clone(),
                            weight: m.weight,
                            ..ModelResult::default()
                        },
                        MetricSet::new(),
                    ));
                    out.len() - 1
                }
            };
            let (o, set) = &mut out[k];
            o.add(m);
            if let Some(g) = m.good_requests {
                o.good_requests = Some(o.good_requests.unwrap_or(0) + g);
            }
            o.errors = add_errors(std::mem::take(&mut o.errors), &m.errors);
            if let Some(h) = s.model_sets.get(i).and_then(|v| v.get(j)) {
                // Both sides auto-resize with the same precision: adding cannot fail.
                let _ = set.merge(h);
            }
        }
    }
    out.into_iter()
        .map(|(mut o, set)| {
            o.set_throughput(duration_s);
            o.set_distributions(&set);
            o
        })
        .collect()
}

/// The server's metrics of a merged benchmark. Every shard scraped the same server, so
/// the server's figures are not added up: the lowest shard that has them gives them, its
/// series moved onto the merged start. Its cross-checks compared the whole server with
/// one shard's client; they are recomputed against the shards' clients together (the sum
/// of each shard's client count), and that shard's own disagreement warnings replaced. A
/// cross-check some shard lacks cannot be recomputed and is left out, with a warning.
fn merge_server_metrics(
    shards: &[Input],
    parts: &[&BenchmarkResult],
    count: u32,
    start: f64,
) -> Option<ServerMetrics> {
    let (k, kept) = parts
        .iter()
        .enumerate()
        .find_map(|(k, b)| b.server_metrics.as_ref().map(|sm| (k, sm)))?;
    let mut sm = kept.clone();
    let shift = parts[k].start_time - start;
    for points in sm.series.values_mut() {
        for p in points.iter_mut() {
            p.0 += shift;
        }
    }
    let source = shards[k].label();
    let stale: Vec<&str> = kept
        .cross_checks
        .iter()
        .filter(|c| !c.agrees)
        .map(|c| c.name.as_str())
        .collect();
    let mut warnings = vec![format!(
        "server metrics from {source} of {} merged: every shard scraped the same server{}",
        parts.len(),
        if kept.cross_checks.is_empty() {
            ""
        } else {
            "; cross-checks recomputed against the clients of all merged shards"
        }
    )];
    if (shards.len() as u32) < count {
        warnings.push(
            "shards are missing: the server also counted their requests if they ran, so the cross-checks may disagree".into(),
        );
    }
    warnings.extend(
        kept.warnings
            .iter()
            .filter(|w| !stale.iter().any(|name| w.contains(name)))
            .map(|w| format!("{source}: {w}")),
    );
    // Every shard kept its client's counts: the server's deltas against their sums. A
    // shard is never cross-checked alone (the server counts every shard's requests), so
    // this is where a sharded run gets its cross-checks.
    let counts: Option<Vec<ClientCounts>> = parts
        .iter()
        .map(|b| b.server_metrics.as_ref().and_then(|s| s.client_counts))
        .collect();
    if let Some(counts) = counts {
        let mut sum = ClientCounts::default();
        for c in &counts {
            sum.add(c);
        }
        let delta = |name: &str| kept.summary.get(name).and_then(|s| s.delta);
        // The shard's own words on cross-checks are replaced by the recomputed ones.
        warnings.retain(|w| !w.contains("no cross-check of the server's counts"));
        if kept.cross_checks.is_empty() {
            warnings[0] = format!(
                "{}; cross-checks recomputed against the clients of all merged shards",
                warnings[0]
            );
        }
        sm.cross_checks = cross_check_counts(&delta, &sum, &mut warnings);
        sm.client_counts = Some(sum);
        sm.warnings = warnings;
        return Some(sm);
    }
    let mut checks = Vec::new();
    for c in &kept.cross_checks {
        let found: Option<Vec<&CrossCheck>> = parts
            .iter()
            .map(|b| {
                b.server_metrics
                    .as_ref()
                    .and_then(|s| server::cross_check(s, &c.name))
            })
            .collect();
        let Some(found) = found else {
            warnings.push(format!(
                "{}: cross-check left out: not every shard has it, so the clients' count is unknown",
                c.name
            ));
            continue;
        };
        let client: f64 = found.iter().map(|x| x.client).sum();
        let upper: f64 = found
            .iter()
            .map(|x| x.client_upper.unwrap_or(x.client))
            .sum();
        let check = CrossCheck::new(&c.name, c.server, client, Some(upper));
        if !check.agrees {
            warnings.push(format!(
                "{}: the server counted {}, the merged shards' clients {}: {:+.2}%, more than 2% apart",
                c.name,
                server::figure(Some(c.server)),
                server::figure(Some(client)),
                check.difference * 100.0
            ));
        }
        checks.push(check);
    }
    sm.cross_checks = checks;
    sm.warnings = warnings;
    Some(sm)
}

/// Errors per kind, in the order kinds first appear (shard order); counts summed;
/// distinct samples in shard order, capped as a run caps them.
fn merge_errors(parts: &[&BenchmarkResult]) -> Vec<ErrorEntry> {
    parts
        .iter()
        .fold(Vec::new(), |merged, b| add_errors(merged, &b.errors))
}

/// Adds error entries into `merged`, by kind, keeping a few distinct samples.
fn add_errors(mut merged: Vec<ErrorEntry>, more: &[ErrorEntry]) -> Vec<ErrorEntry> {
    for e in more {
        let pos = match merged.iter().position(|m| m.kind == e.kind) {
            Some(p) => p,
            None => {
                merged.push(ErrorEntry {
                    kind: e.kind.clone(),
                    count: 0,
                    samples: Vec::new(),
                });
                merged.len() - 1
            }
        };
        let entry = &mut merged[pos];
        entry.count += e.count;
        for sample in &e.samples {
            if entry.samples.len() < SAMPLES_PER_KIND && !entry.samples.contains(sample) {
                entry.samples.push(sample.clone());
            }
        }
    }
    merged
}

fn merge_audit(shards: &[Input], i: usize) -> Audit {
    let mut audit = Audit::default();
    for s in shards {
        let a = &s.report.benchmarks[i].audit;
        audit.add(a);
        audit
            .mismatches
            .extend(a.mismatches.iter().map(|m| format!("{}: {m}", s.label())));
    }
    audit
}

/// The shards' per-second points on wall-clock seconds from the merged start: a shard's
/// second `t` lands in merged second ⌊start + t − merged start⌋ (shards started within
/// a second of each other share seconds). Counts and rates add; the mean TTFT is
/// weighted by the first tokens behind each (`ttft_count`; equal weights for reports
/// older than it).
fn merge_timeseries(parts: &[&BenchmarkResult], start: f64) -> Vec<TimePoint> {
    let mut out: Vec<TimePoint> = Vec::new();
    let mut ttft: Vec<(f64, f64)> = Vec::new();
    for b in parts {
        for p in &b.timeseries {
            let at = (b.start_time + p.t - start).max(0.0).floor() as usize;
            if out.len() <= at {
                out.resize_with(at + 1, || TimePoint {
                    t: 0.0,
                    started: 0,
                    completed: 0,
                    errored: 0,
                    concurrency: 0.0,
                    output_tokens_per_s: None,
                    ttft_mean_ms: None,
                    ttft_count: 0,
                });
                ttft.resize(at + 1, (0.0, 0.0));
            }
            let q = &mut out[at];
            q.add(p);
            if let Some(v) = p.output_tokens_per_s {
                *q.output_tokens_per_s.get_or_insert(0.0) += v;
            }
            if let Some(mean) = p.ttft_mean_ms {
                let w = if p.ttft_count > 0 {
                    p.ttft_count as f64
                } else {
                    1.0
                };
                ttft[at].0 += mean * w;
                ttft[at].1 += w;
            }
        }
    }
    for (k, (q, (sum, w))) in out.iter_mut().zip(ttft).enumerate() {
        q.t = k as f64;
        q.ttft_mean_ms = (w > 0.0).then(|| sum / w);
    }
    out
}

/// The `i`-th benchmark's samples of every shard, in slot order (slots are global).
fn merge_samples(shards: &[Input], i: usize) -> RequestSamples {
    let parts: Vec<&RequestSamples> = shards
        .iter()
        .filter_map(|s| s.report.request_samples.get(i))
        .collect();
    let gather = |pick: fn(&RequestSamples) -> &Vec<RequestEntry>| {
        let mut all: Vec<RequestEntry> = parts.iter().flat_map(|p| pick(p).clone()).collect();
        all.sort_by_key(|e| e.slot);
        all
    };
    RequestSamples {
        benchmark: parts.first().map_or(i as u32, |p| p.benchmark),
        successful: gather(|p| &p.successful),
        errored: gather(|p| &p.errored),
        incomplete: gather(|p| &p.incomplete),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{FileFormat, render};
    use llmsurge_coordinator::result::distributions;
    use llmsurge_proto::{Metric, Shard, StatusClass};

    const FIXTURE: &str = include_str!("../../tests/fixtures/report-v1.json");

    /// Values of one shard: deterministic, different per shard, every class.
    fn values(index: u32) -> Vec<(StatusClass, Metric, u64)> {
        let mut v = Vec::new();
        let mut x: u64 = 0x9E37_79B9 ^ (u64::from(index + 1) * 7919);
        for n in 0..(200 + 37 * u64::from(index)) {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let class = StatusClass::ALL[(n % 5).min(2) as usize];
            let metric = Metric::ALL[(x >> 33) as usize % Metric::ALL.len()];
            v.push((class, metric, 1 + (x >> 40) % 2_000_000));
        }
        v
    }

    fn set_of(vals: &[(StatusClass, Metric, u64)]) -> MetricSet {
        let mut set = MetricSet::new();
        for &(c, m, x) in vals {
            set.record(c, m, x);
        }
        set
    }

    /// The fixture as shard `index` of `count`, with its own histograms.
    fn shard(index: u32, count: u32) -> Report {
        let mut r: Report = serde_json::from_str(FIXTURE).expect("fixture parses");
        r.metadata.shard = Some(Shard { index, count });
        r.metadata.host.hostname = format!("host-{index}");
        r.metadata.start_time += f64::from(index) * 0.25;
        r.args["shard"] = serde_json::json!({ "index": index, "count": count });
        r.args["output_dir"] = serde_json::json!(format!("/results/{index}"));
        let set = set_of(&values(index));
        for b in &mut r.benchmarks {
            b.set_distributions(&set);
            b.start_time += f64::from(index) * 0.3;
            b.client.warnings = vec![format!("slow {index}")];
            b.client.bottleneck = index == 1;
        }
        r
    }

    fn named(reports: Vec<Report>) -> Vec<(String, Report)> {
        reports
            .into_iter()
            .map(|r| {
                let i = r.metadata.shard.map_or(99, |s| s.index);
                (format!("s{i}.json"), r)
            })
            .collect()
    }

    fn err(reports: Vec<Report>, allow_partial: bool) -> String {
        merge(named(reports), allow_partial).expect_err("refused").0
    }

    #[test]
    fn a_server_lost_by_every_shard_is_lost_in_the_merge_and_only_then() {
        use llmsurge_coordinator::error_tail::ServerLost;
        let lost = |at_s: f64, errored: u64| ServerLost {
            at_s,
            last_success_s: at_s - 0.1,
            errored,
            span_s: 2.0,
            reason: format!("connect: refused at {at_s}"),
        };
        let mut a = shard(0, 2);
        let mut b = shard(1, 2);
        a.benchmarks[0].server_lost = Some(lost(5.0, 40));
        b.benchmarks[0].server_lost = Some(lost(4.9, 30));
        let merged = merge(named(vec![a.clone(), b.clone()]), false).expect("merges");
        let m = merged.benchmarks[0].server_lost.clone().expect("lost");
        // Shard 1 started 0.3 s later: its 4.9 s is 5.2 s of the merged benchmark.
        assert!((m.at_s - 5.2).abs() < 1e-6, "{m:?}");
        assert!((m.last_success_s - 5.1).abs() < 1e-6, "{m:?}");
        assert_eq!(m.errored, 70);
        assert_eq!(m.reason, "connect: refused at 4.9");
        assert!(
            crate::cli::run::invalid_run(&merged.benchmarks)
                .iter()
                .any(|l| l.contains("the server was lost at 5.2 s"))
        );
        // One shard still served: not lost.
        b.benchmarks[0].server_lost = None;
        let merged = merge(named(vec![a, b]), false).expect("merges");
        assert_eq!(merged.benchmarks[0].server_lost, None);
    }

    #[test]
    fn fleet_host_combines_the_new_host_facts() {
        let host = |name: &str, soft, ntp, clock: Option<&str>| HostInfo {
            hostname: name.into(),
            kernel: Some("6.1".into()),
            open_files_soft: soft,
            open_files_hard: soft.map(|s| s * 2),
            ntp_synchronized: ntp,
            clock_source: clock.map(str::to_string),
            ..HostInfo::default()
        };
        let fleet = fleet_host(&[
            host("a", Some(4096), Some(true), Some("tsc")),
            host("b", Some(1024), Some(true), None),
            host("c", None, Some(true), Some("kvm-clock")),
        ]);
        assert_eq!(fleet.hostname, "a, b, c");
        assert_eq!(fleet.kernel.as_deref(), Some("6.1"));
        assert_eq!(
            (fleet.open_files_soft, fleet.open_files_hard),
            (Some(1024), Some(2048))
        );
        assert_eq!(fleet.clock_source.as_deref(), Some("tsc, kvm-clock"));
        assert_eq!(fleet.cpu_governor, None, "no host knew it");
        assert_eq!(fleet.ntp_synchronized, Some(true));
        let unknown = fleet_host(&[
            host("a", None, Some(true), None),
            host("b", None, None, None),
        ]);
        assert_eq!(unknown.ntp_synchronized, None, "one host unknown");
        let off = fleet_host(&[
            host("a", None, None, None),
            host("b", None, Some(false), None),
        ]);
        assert_eq!(off.ntp_synchronized, Some(false), "one host off is enough");
    }

    #[test]
    fn merged_percentiles_are_those_of_the_union_exactly() {
        let merged = merge(named((0..3).map(|i| shard(i, 3)).collect()), false).expect("merges");
        // The union recorded value by value into one set, not through any merge.
        let all: Vec<_> = (0..3).flat_map(values).collect();
        let union = set_of(&all);
        let expected = distributions(&union);
        for b in &merged.benchmarks {
            assert_eq!(b.metrics, expected);
            for key in ["ttft", "request_latency_with_incomplete", "output_tokens"] {
                let d = &b.metrics[key];
                assert!(d.errored.count > 0 && d.incomplete.count > 0, "{key}");
            }
            let lag = union.total(Metric::DispatchLag);
            let lag = llmsurge_proto::Distribution::of_metric(Metric::DispatchLag, &lag);
            assert_eq!(b.client.dispatch_lag_p99_ms, lag.percentiles.p99);
            assert_eq!(
                b.histogram("ttft").map(|h| h.len()),
                union
                    .get(StatusClass::Successful, Metric::Ttft)
                    .map(|h| h.len())
            );
        }
    }

    #[test]
    fn counts_add_and_shards_keep_their_health() {
        let inputs: Vec<Report> = (0..3).map(|i| shard(i, 3)).collect();
        let one = &inputs[0].benchmarks[0];
        let merged = merge(named(inputs.clone()), false).expect("merges");
        let b = &merged.benchmarks[0];
        assert_eq!(b.requests.created, 3 * one.requests.created);
        assert_eq!(
            b.measured_requests.completed,
            3 * one.measured_requests.completed
        );
        let errors: u64 = b.errors.iter().map(|e| e.count).sum();
        assert_eq!(errors, 3 * one.errors.iter().map(|e| e.count).sum::<u64>());
        assert_eq!(b.shards.len(), 3);
        assert_eq!(b.shards[1].host, "host-1");
        assert!(b.client.bottleneck, "shard 1 was a bottleneck");
        assert!(b.client.warnings.contains(&"shard 3/3: slow 2".to_string()));
        assert_eq!(merged.metadata.shard, None);
        let m = merged.metadata.merged.as_ref().expect("merged info");
        assert_eq!(
            (m.count, m.shards.clone(), m.hosts.len()),
            (3, vec![0, 1, 2], 3)
        );
        assert!(merged.args.get("shard").is_none());
        // Completed over the merged wall-clock window.
        let w = b.measured_window;
        assert!(
            (b.throughput.requests_per_s - b.measured_requests.completed as f64 / w.duration_s)
                .abs()
                < 1e-9
        );
        let started: u64 = b.timeseries.iter().map(|p| p.started).sum();
        let one_started: u64 = one.timeseries.iter().map(|p| p.started).sum();
        assert_eq!(started, 3 * one_started);
    }

    #[test]
    fn any_order_gives_the_same_bytes() {
        let inputs: Vec<Report> = (0..3).map(|i| shard(i, 3)).collect();
        let bytes = |order: [usize; 3]| {
            let r = merge(
                named(order.iter().map(|&i| inputs[i].clone()).collect()),
                false,
            )
            .expect("merges");
            (
                render(&r, FileFormat::Json).expect("json"),
                render(&r, FileFormat::Html).expect("html"),
                render(&r, FileFormat::Csv).expect("csv"),
            )
        };
        let reference = bytes([0, 1, 2]);
        for order in [[0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
            assert!(
                bytes(order) == reference,
                "order {order:?} changed the output"
            );
        }
    }

    #[test]
    fn a_merged_report_loads_again() {
        let merged = merge(named((0..2).map(|i| shard(i, 2)).collect()), false).expect("merges");
        let json = merged.to_json().expect("json");
        let back: Report = serde_json::from_slice(&json).expect("reloads");
        assert_eq!(back, merged);
    }

    #[test]
    fn foreign_or_mismatched_shards_are_refused_naming_file_and_field() {
        let mut foreign = shard(1, 3);
        foreign.metadata.shard = None;
        let e = err(vec![shard(0, 3), foreign], false);
        assert!(e.starts_with("s99.json: metadata.shard: absent"), "{e}");

        let e = err(vec![shard(0, 3), shard(1, 2), shard(2, 3)], false);
        assert!(e.starts_with("s1.json: metadata.shard.count: 2"), "{e}");

        let e = err(vec![shard(0, 2), shard(1, 2), shard(1, 2)], false);
        assert!(
            e.starts_with("s1.json: metadata.shard.index: 1 is also"),
            "{e}"
        );

        let mut other = shard(1, 2);
        other.args["seed"] = serde_json::json!(7);
        let e = err(vec![shard(0, 2), other], false);
        assert!(e.starts_with("s1.json: args.seed: differs"), "{e}");

        let mut other = shard(1, 2);
        other.metadata.start_at = Some(1.0);
        let e = err(vec![shard(0, 2), other], false);
        assert!(e.starts_with("s1.json: metadata.start_at"), "{e}");

        let mut other = shard(1, 2);
        other.benchmarks.pop();
        let e = err(vec![shard(0, 2), other], false);
        assert!(e.starts_with("s1.json: benchmarks: 1 benchmarks"), "{e}");

        let mut other = shard(1, 2);
        other.benchmarks[1].strategy = llmsurge_coordinator::Strategy::Constant { rate: 1.5 };
        let e = err(vec![shard(0, 2), other], false);
        assert!(e.starts_with("s1.json: benchmarks[1].strategy"), "{e}");

        assert!(!e.contains('\n'));
    }

    const SERVER_FIXTURE: &str = include_str!("../../tests/fixtures/report-server-metrics.json");

    /// Shard `index` of `count` scraping one server that served all `count` shards: the
    /// server's counts are the fleet's, each shard's client counts its own part (the
    /// fixture's), so each shard's own cross-checks disagree.
    fn server_shard(index: u32, count: u32) -> Report {
        let fixture: Report = serde_json::from_str(SERVER_FIXTURE).expect("fixture parses");
        let mut r = shard(index, count);
        for (b, f) in r.benchmarks.iter_mut().zip(fixture.benchmarks) {
            let mut sm = f.server_metrics.expect("server metrics");
            sm.warnings.clear();
            for c in &mut sm.cross_checks {
                c.server *= f64::from(count);
                c.difference = (c.server - c.client) / c.client;
                c.agrees = c.difference.abs() <= 0.02;
                sm.warnings
                    .push(format!("{}: the server and the client disagree", c.name));
            }
            sm.warnings.push(format!("scrape {index} was slow"));
            b.server_metrics = Some(sm);
        }
        r
    }

    #[test]
    fn server_metrics_come_from_one_shard_with_cross_checks_of_all_clients() {
        let inputs: Vec<Report> = (0..3).map(|i| server_shard(i, 3)).collect();
        let kept = inputs[0].benchmarks[1]
            .server_metrics
            .clone()
            .expect("server metrics");
        let merged = merge(named(inputs.clone()), false).expect("merges");
        let sm = merged.benchmarks[1]
            .server_metrics
            .as_ref()
            .expect("merged server metrics");
        // The server's figures are the lowest shard's, not a sum.
        assert_eq!(sm.summary, kept.summary);
        assert_eq!(sm.series, kept.series, "shard 0 started first: no shift");
        assert_eq!(sm.scrapes, kept.scrapes);
        // Cross-checks against the three clients together.
        let tokens = server::cross_check(sm, "generation_tokens").expect("check");
        assert_eq!(tokens.client, 3.0 * 853.0);
        assert_eq!(tokens.server, 3.0 * 853.0);
        assert!(tokens.agrees && tokens.difference == 0.0, "{tokens:?}");
        let ok = server::cross_check(sm, "request_success").expect("check");
        assert_eq!((ok.server, ok.client), (165.0, 159.0));
        assert!(!ok.agrees);
        // The shard's own disagreements are gone; its other warnings are kept, named.
        assert!(sm.warnings[0].contains("server metrics from shard 1/3 of 3 merged"));
        assert!(
            sm.warnings
                .contains(&"shard 1/3: scrape 0 was slow".to_string())
        );
        assert!(!sm.warnings.iter().any(|w| w.contains("generation_tokens")));
        assert!(
            sm.warnings.iter().any(|w| w.starts_with(
                "request_success: the server counted 165, the merged shards' clients 159"
            )),
            "{:?}",
            sm.warnings
        );
        // Any order, the same bytes (server metrics included).
        let reversed = merge(named(inputs.into_iter().rev().collect()), false).expect("merges");
        assert_eq!(
            render(&reversed, FileFormat::Json).expect("json"),
            render(&merged, FileFormat::Json).expect("json")
        );
    }

    #[test]
    fn a_later_shards_server_metrics_move_onto_the_merged_start() {
        let mut inputs: Vec<Report> = (0..2).map(|i| server_shard(i, 2)).collect();
        for b in &mut inputs[0].benchmarks {
            b.server_metrics = None;
        }
        let shift = inputs[1].benchmarks[0].start_time - inputs[0].benchmarks[0].start_time;
        assert!(shift > 0.0);
        let own = inputs[1].benchmarks[0]
            .server_metrics
            .clone()
            .expect("server metrics");
        let merged = merge(named(inputs), false).expect("merges");
        let sm = merged.benchmarks[0]
            .server_metrics
            .as_ref()
            .expect("merged server metrics");
        let (before, after) = (
            &own.series["num_requests_running"],
            &sm.series["num_requests_running"],
        );
        assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(after) {
            assert!((a.0 - (b.0 + shift)).abs() < 1e-9 && a.1 == b.1);
        }
        assert!(sm.warnings[0].contains("from shard 2/2"));
        // Shard 1 had no server metrics: its clients' counts are unknown.
        assert!(sm.cross_checks.is_empty());
        assert!(
            sm.warnings
                .iter()
                .any(|w| w.starts_with("generation_tokens: cross-check left out")),
            "{:?}",
            sm.warnings
        );
    }

    #[test]
    fn shards_without_server_metrics_merge_without_them() {
        let merged = merge(named((0..2).map(|i| shard(i, 2)).collect()), false).expect("merges");
        assert!(merged.benchmarks.iter().all(|b| b.server_metrics.is_none()));
    }

    #[test]
    fn a_missing_shard_needs_allow_partial_and_is_recorded() {
        let e = err(vec![shard(0, 3), shard(2, 3)], false);
        assert!(e.contains("shard(s) 2 of 3 missing"), "{e}");
        let merged = merge(named(vec![shard(2, 3), shard(0, 3)]), true).expect("partial");
        let m = merged.metadata.merged.as_ref().expect("merged info");
        assert_eq!((m.shards.clone(), m.missing.clone()), (vec![0, 2], vec![1]));
        assert!(!merged.metadata.complete);
        let notes = crate::report::notes(&merged.benchmarks[0]);
        assert!(
            notes
                .iter()
                .any(|n| n.contains("merged from 2 of 3 shards (missing: 1")),
            "{notes:?}"
        );
    }
}
