//! The llm-d Benchmark Report, version 0.2 (`--outputs llmd`): one YAML file per
//! benchmark, `benchmark_report_v0.2,_<N>.yaml` (N its position in the run, from 0; the
//! name llm-d-benchmark's own analysis looks for), valid against the published JSON Schema
//! vendored in `schemas/llm-d/` (source, commit and license in its README).
//!
//! Every figure is one the JSON report holds, in the unit the schema names (seconds for
//! latencies, `s/token` for ITL and TPOT, `fraction` for the server's KV-cache use);
//! what llmsurge does not measure (NTPOT, the server's GPUs and parallelism, a time
//! series) is left out, which the schema allows. The server and platform part of the
//! scenario comes from [`server_stack`] alone.

use super::json::Report;
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::server_metrics::fingerprint::Fact;
use llmsurge_coordinator::strategy::Strategy;
use llmsurge_proto::metrics::Distribution;
use llmsurge_proto::seed::derive_seed;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The schema version written.
pub const VERSION: &str = "0.2";

/// The stack label of the server, which the server's own figures (`observability`) name.
pub const SERVER_LABEL: &str = "server";

/// The file of the benchmark at `position` in the run (from 0): the name llm-d-benchmark's
/// analysis globs (`benchmark_report_v0.2,_*.yaml`).
pub fn file_name(position: usize) -> String {
    format!("benchmark_report_v{VERSION},_{position}.yaml")
}

/// The files in `dir` that llm-d's glob (`benchmark_report_v0.2,_*.yaml`) reads but this
/// run of `count` benchmarks does not write (an earlier, longer run's; a copy named
/// `_01`), each with whether llmsurge wrote it (its load's `tool: llmsurge`).
pub fn files_beyond(dir: &std::path::Path, count: usize) -> Vec<(std::path::PathBuf, bool)> {
    let prefix = format!("benchmark_report_v{VERSION},_");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, std::path::PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name.strip_prefix(&prefix)?.strip_suffix(".yaml")?;
            // This run's own names (llmsurge's numbering: no sign, no leading zero).
            let own = n
                .parse::<usize>()
                .is_ok_and(|p| p < count && p.to_string() == n);
            (!own).then(|| (name.clone(), e.path()))
        })
        .collect();
    found.sort();
    found
        .into_iter()
        .map(|(_, path)| {
            let ours = path.is_file()
                && std::fs::read_to_string(&path)
                    .is_ok_and(|text| text.lines().any(|l| l.trim() == "tool: llmsurge"));
            (path, ours)
        })
        .collect()
}

/// One report per benchmark, in run order, with its file name.
pub fn reports(report: &Report) -> Vec<(String, BenchmarkReport)> {
    report
        .benchmarks
        .iter()
        .enumerate()
        .map(|(i, b)| (file_name(i), benchmark_report(report, b, i)))
        .collect()
}

/// The benchmark report of benchmark `b`, at `position` in `report`.
pub fn benchmark_report(report: &Report, b: &BenchmarkResult, position: usize) -> BenchmarkReport {
    BenchmarkReport {
        version: VERSION,
        run: run(report, b, position),
        scenario: Scenario {
            stack: server_stack(report),
            load: load(report, b),
        },
        results: Results {
            request_performance: RequestPerformance {
                aggregate: aggregate(b),
            },
            observability: observability(b),
        },
    }
}

/// The server and platform the load ran against, as the scenario's `stack`: the one place
/// that says what llmsurge knows of the server. The target as resolved (URL, model) and
/// the server's fingerprint (docs/report.md): its engine and version, model root, context
/// length, LoRA adapters and published configuration as standardized facts, and the whole
/// fingerprint, each fact with its source, as the native configuration. What is not
/// known is "unknown", never guessed.
pub fn server_stack(report: &Report) -> Vec<Component> {
    let target = &report.target;
    let fingerprint = report.server_fingerprint.as_ref();
    let known = |f: &Fact| f.value.clone();
    let (tool, tool_version) = match fingerprint.map(|fp| &fp.before) {
        Some(r) => (
            known(&r.engine).unwrap_or_else(|| "unknown".into()),
            known(&r.engine_version).unwrap_or_else(|| "unknown".into()),
        ),
        None if target.mock => ("llmsurge-mock".to_string(), report.metadata.version.clone()),
        None => ("unknown".to_string(), "unknown".to_string()),
    };
    let mut extra = BTreeMap::new();
    extra.insert("model".to_string(), Value::from(target.model.clone()));
    extra.insert("base_url".to_string(), Value::from(target.base_url.clone()));
    if let Some(r) = fingerprint.map(|fp| &fp.before) {
        let facts = [
            ("model_root", &r.model_root),
            ("max_model_len", &r.max_model_len),
            ("lora_adapters", &r.lora_adapters),
        ];
        for (name, fact) in facts
            .into_iter()
            .chain(r.config.iter().map(|(k, f)| (k.as_str(), f)))
        {
            extra.insert(
                name.to_string(),
                Value::from(fact.value.clone().unwrap_or_else(|| "unknown".into())),
            );
        }
    }
    let standardized = Standardized {
        kind: "generic",
        tool,
        tool_version,
        extra,
    };
    let native = ComponentNative {
        args: None,
        config: fingerprint.and_then(|fp| serde_json::to_value(fp).ok()),
    };
    // The id of the server's configuration: its standardized facts, not where it was
    // reached (another port, one server) nor this reading's counters and times.
    let mut configured = standardized.extra.clone();
    configured.remove("base_url");
    vec![Component {
        metadata: ComponentMetadata {
            schema_version: "0.0.1",
            label: SERVER_LABEL.to_string(),
            cfg_id: config_id(&(&standardized.tool, &standardized.tool_version, &configured)),
            description: Some("the server llmsurge sent its load to".to_string()),
        },
        standardized,
        native,
    }]
}

/// A benchmark report (the fields of the schema llmsurge fills; the rest are optional).
#[derive(Clone, Debug, Serialize)]
pub struct BenchmarkReport {
    /// Always [`VERSION`].
    pub version: &'static str,
    /// The run.
    pub run: Run,
    /// The server and the load.
    pub scenario: Scenario,
    /// The measured figures.
    pub results: Results,
}

/// `run`: identity and times.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// Unique to this report: derived from the run's start, host and the position.
    pub uid: String,
    /// Common to the reports of one run.
    pub eid: String,
    /// The benchmark's start, end and duration.
    pub time: RunTime,
    /// `--label`, else the model and the benchmark's strategy.
    pub description: String,
}

/// `run.time`.
#[derive(Clone, Debug, Serialize)]
pub struct RunTime {
    /// RFC 3339, UTC.
    pub start: String,
    /// RFC 3339, UTC.
    pub end: String,
    /// ISO 8601 duration (`PT12.345S`).
    pub duration: String,
}

/// `scenario`.
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    /// The server and platform ([`server_stack`]).
    pub stack: Vec<Component>,
    /// The load.
    pub load: Load,
}

/// One component of the stack.
#[derive(Clone, Debug, Serialize)]
pub struct Component {
    /// Its name and configuration hash.
    pub metadata: ComponentMetadata,
    /// Its standardized description.
    pub standardized: Standardized,
    /// Its native configuration.
    pub native: ComponentNative,
}

/// `metadata` of a component.
#[derive(Clone, Debug, Serialize)]
pub struct ComponentMetadata {
    /// The component schema's version.
    pub schema_version: &'static str,
    /// Unique name in the stack.
    pub label: String,
    /// Hash of the component's configuration.
    pub cfg_id: String,
    /// One line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `standardized` of a component: the schema's `generic` kind, which takes any extra field.
#[derive(Clone, Debug, Serialize)]
pub struct Standardized {
    /// `generic` (the `inference_engine` kind requires accelerators and parallelism, which
    /// llmsurge cannot see).
    pub kind: &'static str,
    /// The server software, or "unknown".
    pub tool: String,
    /// Its version, or "unknown".
    pub tool_version: String,
    /// Further facts, each as named.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `native` of a component or of the load.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ComponentNative {
    /// Arguments, as the component takes them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Map<String, Value>>,
    /// Any configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
}

/// `scenario.load`.
#[derive(Clone, Debug, Serialize)]
pub struct Load {
    /// Schema version, configuration hash, the strategy.
    pub metadata: LoadMetadata,
    /// The load in the schema's terms.
    pub standardized: LoadStandardized,
    /// The run's resolved arguments (secrets redacted), as in the JSON report.
    pub native: ComponentNative,
}

/// `scenario.load.metadata`.
#[derive(Clone, Debug, Serialize)]
pub struct LoadMetadata {
    /// The load schema's version.
    pub schema_version: &'static str,
    /// Hash of the resolved arguments.
    pub cfg_id: String,
    /// The strategy (`constant@20`).
    pub description: String,
}

/// `scenario.load.standardized`.
#[derive(Clone, Debug, Serialize)]
pub struct LoadStandardized {
    /// `llmsurge`.
    pub tool: &'static str,
    /// llmsurge's version.
    pub tool_version: String,
    /// Load generators: the shards of a merged report, else 1.
    pub parallelism: u32,
    /// `random` (synthetic prompts), `sampled` (a dataset, file or trace) or `unknown`.
    pub source: &'static str,
    /// The benchmark's position in the run.
    pub stage: u32,
    /// Prompt length: the synthetic spec's, else the measured mean (`other`).
    pub input_seq_len: SequenceLength,
    /// Output length, when the synthetic spec sets it and `ignore_eos` enforces it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_seq_len: Option<SequenceLength>,
    /// The synthetic spec's shared prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<LoadPrefix>,
    /// Multi-turn sessions of the synthetic spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_turn: Option<MultiTurn>,
    /// The rate asked for (constant, Poisson, a replay's mean).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_qps: Option<f64>,
    /// The concurrency asked for (streams, the throughput cap, 1 for synchronous, else
    /// `--max-concurrency`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
}

/// A length and how it is distributed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SequenceLength {
    /// `fixed`, `gaussian`, `uniform` or `other`.
    pub distribution: &'static str,
    /// The mean: a whole number of tokens as configured, a fraction when measured.
    pub value: serde_json::Number,
    /// Standard deviation (gaussian).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub std_dev: Option<f64>,
    /// Lower bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<u64>,
    /// Upper bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
}

/// `scenario.load.standardized.prefix`.
#[derive(Clone, Debug, Serialize)]
pub struct LoadPrefix {
    /// Tokens of the shared prefix.
    pub prefix_len: SequenceLength,
    /// 1: llmsurge has no groups of users.
    pub num_groups: u64,
    /// 1: as llm-d-benchmark writes for GuideLLM's identical spec.
    pub num_users_per_group: u64,
    /// Distinct prefixes (`prefix_count`).
    pub num_prefixes: u64,
}

/// `scenario.load.standardized.multi_turn`.
#[derive(Clone, Debug, Serialize)]
pub struct MultiTurn {
    /// Always true when present.
    pub enabled: bool,
    /// Turns per session.
    pub max_turns: SequenceLength,
}

/// `results`.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    /// What the client measured.
    pub request_performance: RequestPerformance,
    /// What the server published of itself (`--server-metrics`), when it was scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observability: Option<Observability>,
}

/// `results.observability`.
#[derive(Clone, Debug, Serialize)]
pub struct Observability {
    /// One entry: the server of [`server_stack`].
    pub components: Vec<ComponentObservability>,
}

/// `results.observability.components[]`.
#[derive(Clone, Debug, Serialize)]
pub struct ComponentObservability {
    /// The stack component these figures are of.
    pub component_label: String,
    /// Over the measured window.
    pub aggregate: ResourceMetrics,
}

/// The schema's `ResourceMetrics`: the server's gauges over the measured window (mean and
/// largest of the scrapes), and its prefix-cache hit rate (hits over queries).
#[derive(Clone, Debug, Serialize)]
pub struct ResourceMetrics {
    /// KV-cache use, `fraction` (vLLM's `kv_cache_usage_perc`, SGLang's token usage: 1 is full).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage: Option<Statistics>,
    /// Prefix-cache hits over queries, `fraction`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_hit_rate: Option<Statistics>,
    /// Requests running, `count`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_requests: Option<Statistics>,
    /// Requests waiting, `count`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_requests: Option<Statistics>,
}

/// `results.request_performance`.
#[derive(Clone, Debug, Serialize)]
pub struct RequestPerformance {
    /// Over the measured window.
    pub aggregate: Aggregate,
}

/// `results.request_performance.aggregate`.
#[derive(Clone, Debug, Serialize)]
pub struct Aggregate {
    /// Counts and lengths.
    pub requests: Requests,
    /// Latencies of successful requests.
    pub latency: Latency,
    /// Rates.
    pub throughput: ThroughputStats,
}

/// `...aggregate.requests`.
#[derive(Clone, Debug, Serialize)]
pub struct Requests {
    /// Measured requests that finished: completed, errored or cancelled.
    pub total: u64,
    /// Errored.
    pub failures: u64,
    /// Cancelled (cut by a stop, or given up on by plan).
    pub incomplete: u64,
    /// Prompt tokens of successful requests (`count`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_length: Option<Statistics>,
    /// Output tokens of successful requests (`count`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_length: Option<Statistics>,
}

/// `...aggregate.latency`.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// `ttft`, s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_token: Option<Statistics>,
    /// `tpot`, s/token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_per_output_token: Option<Statistics>,
    /// `itl`, s/token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inter_token_latency: Option<Statistics>,
    /// `request_latency` (end to end), s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_latency: Option<Statistics>,
}

/// `...aggregate.throughput`: one figure per rate over the measured window (its mean).
#[derive(Clone, Debug, Serialize)]
pub struct ThroughputStats {
    /// Prompt tokens of completed requests per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_token_rate: Option<Statistics>,
    /// Output tokens of completed requests per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_token_rate: Option<Statistics>,
    /// Prompt plus output tokens per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_token_rate: Option<Statistics>,
    /// Completed requests per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_rate: Option<Statistics>,
}

/// The schema's `Statistics`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Statistics {
    /// One of the schema's units.
    pub units: &'static str,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stddev: Option<f64>,
    /// Smallest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Percentile 0.1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p0p1: Option<f64>,
    /// Percentile 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p1: Option<f64>,
    /// Percentile 5.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p5: Option<f64>,
    /// Percentile 10.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p10: Option<f64>,
    /// Percentile 25.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p25: Option<f64>,
    /// Median.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    /// Percentile 75.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p75: Option<f64>,
    /// Percentile 90.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p90: Option<f64>,
    /// Percentile 95.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p95: Option<f64>,
    /// Percentile 99.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    /// Percentile 99.9.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99p9: Option<f64>,
    /// Largest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

/// Milliseconds as seconds, rounded to the nanosecond: far below the microsecond the
/// histograms resolve, and 21.839 ms reads 0.021839, not 0.021838999999999997.
fn seconds(ms: f64) -> f64 {
    (ms * 1e6).round() / 1e9
}

/// A count as it is.
fn same(n: f64) -> f64 {
    n
}

/// The distribution of successful requests of `metric`, each figure through `convert`;
/// none without a value.
fn distribution(
    b: &BenchmarkResult,
    metric: &str,
    units: &'static str,
    convert: fn(f64) -> f64,
) -> Option<Statistics> {
    let d: &Distribution = &b.metrics.get(metric)?.successful;
    if d.count == 0 || !d.mean.is_finite() {
        return None;
    }
    let v = |x: f64| Some(convert(x)).filter(|x| x.is_finite());
    let p = &d.percentiles;
    Some(Statistics {
        units,
        mean: convert(d.mean),
        stddev: v(d.std).filter(|s| *s >= 0.0),
        min: v(d.min),
        p0p1: v(p.p0_1),
        p1: v(p.p1),
        p5: v(p.p5),
        p10: v(p.p10),
        p25: v(p.p25),
        p50: v(p.p50),
        p75: v(p.p75),
        p90: v(p.p90),
        p95: v(p.p95),
        p99: v(p.p99),
        p99p9: v(p.p99_9),
        max: v(d.max),
    })
}

/// A gauge the server published, over the measured window: the mean and the largest of
/// the scrapes in it.
fn gauge(
    summary: &BTreeMap<String, llmsurge_coordinator::server_metrics::SeriesSummary>,
    name: &str,
    units: &'static str,
) -> Option<Statistics> {
    let s = summary.get(name)?;
    let mean = s.mean.filter(|m| m.is_finite())?;
    Some(Statistics {
        units,
        mean,
        max: s.max.filter(|m| m.is_finite()),
        ..Statistics::default()
    })
}

/// The server's own figures, when its metrics were scraped; none without one.
fn observability(b: &BenchmarkResult) -> Option<Observability> {
    let sm = b.server_metrics.as_ref()?;
    let aggregate = ResourceMetrics {
        kv_cache_usage: gauge(&sm.summary, "kv_cache_usage_perc", "fraction"),
        cache_hit_rate: rate(sm.derived.prefix_cache_hit_rate, "fraction"),
        running_requests: gauge(&sm.summary, "num_requests_running", "count"),
        waiting_requests: gauge(&sm.summary, "num_requests_waiting", "count"),
    };
    let any = aggregate.kv_cache_usage.is_some()
        || aggregate.cache_hit_rate.is_some()
        || aggregate.running_requests.is_some()
        || aggregate.waiting_requests.is_some();
    any.then(|| Observability {
        components: vec![ComponentObservability {
            component_label: SERVER_LABEL.to_string(),
            aggregate,
        }],
    })
}

/// A rate over the measured window: one figure, its mean.
fn rate(value: Option<f64>, units: &'static str) -> Option<Statistics> {
    let mean = value.filter(|v| v.is_finite() && *v >= 0.0)?;
    Some(Statistics {
        units,
        mean,
        ..Statistics::default()
    })
}

fn aggregate(b: &BenchmarkResult) -> Aggregate {
    let m = &b.measured_requests;
    let t = &b.throughput;
    // Prompt tokens per second: the pooling formats report it; for generation it is the
    // total less the output, both over the same completed requests and window.
    let input = t
        .input_tokens_per_s
        .or_else(|| t.output_tokens_per_s.map(|o| t.total_tokens_per_s - o));
    Aggregate {
        requests: Requests {
            total: m.completed + m.errored + m.cancelled,
            failures: m.errored,
            incomplete: m.cancelled,
            input_length: distribution(b, "prompt_tokens", "count", same),
            output_length: distribution(b, "output_tokens", "count", same),
        },
        latency: Latency {
            time_to_first_token: distribution(b, "ttft", "s", seconds),
            time_per_output_token: distribution(b, "tpot", "s/token", seconds),
            inter_token_latency: distribution(b, "itl", "s/token", seconds),
            request_latency: distribution(b, "request_latency", "s", seconds),
        },
        throughput: ThroughputStats {
            input_token_rate: rate(input, "tokens/s"),
            output_token_rate: rate(t.output_tokens_per_s, "tokens/s"),
            total_token_rate: rate(Some(t.total_tokens_per_s), "tokens/s"),
            request_rate: rate(Some(t.requests_per_s), "queries/s"),
        },
    }
}

/// 32 hex digits from a stable hash of `text` under `name` (not std's hasher, whose
/// output may change between Rust releases: a report re-rendered later keeps its ids).
fn hex_id(name: &str, text: &str) -> String {
    let base = derive_seed(0, text, 0);
    format!(
        "{:016x}{:016x}",
        derive_seed(base, name, 0),
        derive_seed(base, name, 1)
    )
}

/// A configuration's hash: of its JSON (keys sorted, so field order does not matter).
fn config_id(config: &impl Serialize) -> String {
    let canonical = serde_json::to_value(config)
        .map(|v| v.to_string())
        .unwrap_or_default();
    hex_id("cfg_id", &canonical)
}

/// Unix seconds as RFC 3339 UTC with milliseconds.
fn rfc3339(unix: f64) -> String {
    let ms = (unix * 1e3).round() as i64;
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_string())
}

fn run(report: &Report, b: &BenchmarkResult, position: usize) -> Run {
    let md = &report.metadata;
    let run_key = format!(
        "{}|{}|{}",
        md.start_time.to_bits(),
        md.host.hostname,
        md.tool
    );
    let description = match &md.label {
        Some(label) => format!("{label} [{}]", super::cells::label(b)),
        None => format!("{} [{}]", report.target.model, super::cells::label(b)),
    };
    Run {
        uid: hex_id("uid", &format!("{run_key}|{position}")),
        eid: hex_id("eid", &run_key),
        time: RunTime {
            start: rfc3339(b.start_time),
            end: rfc3339(b.end_time),
            duration: format!("PT{:.3}S", b.duration_s.max(0.0)),
        },
        description,
    }
}

/// The synthetic spec of the resolved arguments, if the data was synthetic (current
/// reports hold it under `data.source`, older ones under `data.synthetic`).
fn synthetic_spec(args: &Value) -> Option<&Value> {
    if let Some(source) = args.pointer("/data/source") {
        return (source.get("kind")?.as_str()? == "synthetic").then(|| source.get("spec"))?;
    }
    args.pointer("/data/synthetic")
}

fn u64_at(v: &Value, key: &str) -> Option<u64> {
    v.get(key)?.as_u64()
}

/// A length of the synthetic spec: `prompt_tokens` with its `_stdev`, `_min`, `_max`, and
/// the spec's `range_ratio` (a uniform draw around the mean).
fn spec_length(spec: &Value, key: &str) -> Option<SequenceLength> {
    let value = u64_at(spec, key).filter(|v| *v > 0)?;
    let stdev = u64_at(spec, &format!("{key}_stdev")).filter(|s| *s > 0);
    let uniform = spec
        .get("range_ratio")
        .and_then(Value::as_f64)
        .is_some_and(|r| r > 0.0);
    let distribution = if uniform {
        "uniform"
    } else if stdev.is_some() {
        "gaussian"
    } else {
        "fixed"
    };
    Some(SequenceLength {
        distribution,
        value: value.into(),
        std_dev: stdev.filter(|_| !uniform).map(|s| s as f64),
        min: u64_at(spec, &format!("{key}_min")),
        max: u64_at(spec, &format!("{key}_max")).filter(|m| *m >= 1),
    })
}

fn fixed(value: u64) -> SequenceLength {
    SequenceLength {
        distribution: "fixed",
        value: value.into(),
        std_dev: None,
        min: None,
        max: None,
    }
}

fn load(report: &Report, b: &BenchmarkResult) -> Load {
    let args = &report.args;
    let spec = synthetic_spec(args);
    // As llm-d-benchmark classes GuideLLM's synthetic text: generated prompts are
    // `random`, prompts read from a dataset, file or trace `sampled`.
    let source = match args.pointer("/data/source/kind").and_then(Value::as_str) {
        _ if spec.is_some() => "random",
        Some(_) => "sampled",
        None => "unknown",
    };
    // A dataset's prompts have no configured length: the measured mean stands in, as
    // llm-d-benchmark does for vLLM's datasets.
    let measured_input = || SequenceLength {
        distribution: "other",
        value: b
            .metrics
            .get("prompt_tokens")
            .and_then(|d| serde_json::Number::from_f64(d.successful.mean))
            .unwrap_or_else(|| 0.into()),
        std_dev: None,
        min: None,
        max: None,
    };
    let ignore_eos = args
        .pointer("/backend/ignore_eos")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (rate_qps, concurrency) = match b.strategy {
        Strategy::Synchronous => (None, Some(1)),
        Strategy::Concurrent { streams } => (None, Some(u64::from(streams))),
        Strategy::Throughput { max_concurrency } => (None, Some(u64::from(max_concurrency))),
        Strategy::Constant { rate } | Strategy::Poisson { rate } => (Some(rate), b.max_concurrency),
        Strategy::Replay { rate, .. } => (Some(rate), b.max_concurrency),
    };
    let native = ComponentNative {
        args: args.as_object().cloned(),
        config: None,
    };
    Load {
        metadata: LoadMetadata {
            schema_version: "0.0.1",
            cfg_id: config_id(args),
            // Repeated runs of one strategy are one stage: the run tells their files apart.
            description: super::cells::label(b),
        },
        standardized: LoadStandardized {
            tool: "llmsurge",
            tool_version: report.metadata.version.clone(),
            parallelism: report
                .metadata
                .merged
                .as_ref()
                .map_or(1, |m| (m.shards.len() as u32).max(1)),
            source,
            stage: b.index,
            input_seq_len: spec
                .and_then(|s| spec_length(s, "prompt_tokens"))
                .unwrap_or_else(measured_input),
            output_seq_len: spec
                .filter(|_| ignore_eos)
                .and_then(|s| spec_length(s, "output_tokens")),
            prefix: spec.and_then(|s| {
                let tokens = u64_at(s, "prefix_tokens").filter(|t| *t > 0)?;
                Some(LoadPrefix {
                    prefix_len: fixed(tokens),
                    num_groups: 1,
                    num_users_per_group: 1,
                    num_prefixes: u64_at(s, "prefix_count").unwrap_or(1).max(1),
                })
            }),
            multi_turn: spec.and_then(|s| {
                let turns = u64_at(s, "turns").filter(|t| *t > 1)?;
                Some(MultiTurn {
                    enabled: true,
                    max_turns: fixed(turns),
                })
            }),
            rate_qps: rate_qps.filter(|r| r.is_finite() && *r > 0.0),
            concurrency: concurrency.filter(|c| *c >= 1),
        },
        native,
    }
}

/// One benchmark report as YAML, as written to its file.
pub fn to_yaml(br: &BenchmarkReport) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(br)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixture() -> Report {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/report-v1.json");
        Report::load(Path::new(path)).expect("the fixture loads")
    }

    /// The Pydantic models' unit rules, which the JSON Schema does not carry
    /// (schemas/llm-d/README.md): each metric's units are of its kind.
    #[test]
    fn llmd_units_follow_the_pydantic_rules() {
        let report = fixture();
        for (_, br) in reports(&report) {
            let a = &br.results.request_performance.aggregate;
            let check = |s: &Option<Statistics>, allowed: &[&str], what: &str| {
                let s = s.as_ref().unwrap_or_else(|| panic!("{what} is measured"));
                assert!(allowed.contains(&s.units), "{what}: {}", s.units);
            };
            check(&a.requests.input_length, &["count"], "input_length");
            check(&a.requests.output_length, &["count"], "output_length");
            check(&a.latency.time_to_first_token, &["ms", "s"], "ttft");
            check(&a.latency.request_latency, &["ms", "s"], "e2e");
            check(
                &a.latency.inter_token_latency,
                &["ms/token", "s/token"],
                "itl",
            );
            check(
                &a.latency.time_per_output_token,
                &["ms/token", "s/token"],
                "tpot",
            );
            check(&a.throughput.input_token_rate, &["tokens/s"], "input rate");
            check(
                &a.throughput.output_token_rate,
                &["tokens/s"],
                "output rate",
            );
            check(&a.throughput.total_token_rate, &["tokens/s"], "total rate");
            check(&a.throughput.request_rate, &["queries/s"], "request rate");
        }
    }

    /// Seconds from the report's milliseconds, and the counts of the measured window.
    #[test]
    fn llmd_figures_are_the_reports_in_the_schemas_units() {
        let report = fixture();
        let b = &report.benchmarks[1];
        let br = benchmark_report(&report, b, 1);
        let a = &br.results.request_performance.aggregate;
        let ttft = &b.metrics["ttft"].successful;
        let got = a.latency.time_to_first_token.as_ref().expect("ttft");
        assert!((got.mean - ttft.mean / 1e3).abs() < 1e-9);
        assert!((got.p99.expect("p99") - ttft.percentiles.p99 / 1e3).abs() < 1e-9);
        assert_eq!(seconds(21.839), 0.021839);
        let m = &b.measured_requests;
        assert_eq!(a.requests.total, m.completed + m.errored + m.cancelled);
        assert_eq!(a.requests.failures, m.errored);
        let input = a.throughput.input_token_rate.as_ref().expect("input rate");
        let output = b.throughput.output_tokens_per_s.expect("output rate");
        assert!((input.mean + output - b.throughput.total_tokens_per_s).abs() < 1e-9);
        let load = &br.scenario.load.standardized;
        assert_eq!(load.stage, 1);
        assert_eq!(load.rate_qps, Some(20.0));
        assert_eq!(load.input_seq_len, fixed(32));
        assert_eq!(br.run.time.start, rfc3339(b.start_time));
    }

    #[test]
    fn llmd_ids_are_stable_and_distinct() {
        let report = fixture();
        let all = reports(&report);
        assert_eq!(
            all.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(),
            [
                "benchmark_report_v0.2,_0.yaml",
                "benchmark_report_v0.2,_1.yaml"
            ]
        );
        assert_ne!(all[0].1.run.uid, all[1].1.run.uid);
        assert_eq!(all[0].1.run.eid, all[1].1.run.eid);
        let again = reports(&report);
        assert_eq!(all[0].1.run.uid, again[0].1.run.uid);
        assert_eq!(all[0].1.run.uid.len(), 32);
        // The server's configuration id: one server reached at another URL is the same
        // configuration.
        let mut moved = report.clone();
        moved.target.base_url = "http://10.0.0.9:9999".into();
        assert_eq!(
            server_stack(&report)[0].metadata.cfg_id,
            server_stack(&moved)[0].metadata.cfg_id
        );
    }

    /// The server's gauges land under `observability`, tied to the stack's server, and
    /// the whole report (a short run may never scrape inside a window, so the end-to-end
    /// test cannot count on them) validates against the vendored schema.
    #[test]
    fn llmd_server_gauges_validate_under_observability() {
        let mut report = fixture();
        report.benchmarks[0].server_metrics = Some(
            serde_json::from_value(serde_json::json!({
                "url": "http://127.0.0.1:8000/metrics",
                "server": "vllm",
                "scrapes": 3,
                "summary": {
                    "kv_cache_usage_perc": {"kind": "gauge", "mean": 0.25, "max": 0.5, "samples": 3},
                    "num_requests_running": {"kind": "gauge", "mean": 2.5, "max": 4.0, "samples": 3},
                    "num_requests_waiting": {"kind": "gauge", "mean": 0.0, "max": 0.0, "samples": 3}
                },
                "derived": {"prefix_cache_hit_rate": 0.75}
            }))
            .expect("server metrics"),
        );
        let br = benchmark_report(&report, &report.benchmarks[0], 0);
        let obs = br.results.observability.as_ref().expect("observability");
        assert_eq!(
            obs.components[0].component_label,
            br.scenario.stack[0].metadata.label
        );
        let a = &obs.components[0].aggregate;
        let kv = a.kv_cache_usage.as_ref().expect("kv");
        assert_eq!((kv.units, kv.mean, kv.max), ("fraction", 0.25, Some(0.5)));
        let hit = a.cache_hit_rate.as_ref().expect("hit rate");
        assert_eq!((hit.units, hit.mean), ("fraction", 0.75));
        assert_eq!(a.running_requests.as_ref().map(|s| s.units), Some("count"));
        // The second benchmark was not scraped: no observability at all.
        let none = benchmark_report(&report, &report.benchmarks[1], 1);
        assert!(none.results.observability.is_none());

        let schema: Value =
            serde_json::from_str(include_str!("../../schemas/llm-d/br_v0_2_json_schema.json"))
                .expect("JSON");
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V2020_12);
        compiler.enable_format_assertions();
        compiler.add_resource("br.json", schema).expect("loads");
        let index = compiler.compile("br.json", &mut schemas).expect("compiles");
        let yaml = to_yaml(&br).expect("YAML");
        let doc: Value = serde_saphyr::from_str(&yaml).expect("reads back");
        if let Err(e) = schemas.validate(&doc, index) {
            panic!("{e:#}\n{yaml}");
        }
    }

    /// Prompts read from a file have no configured length: the source says `sampled`, the
    /// input length is the measured mean (`other`), and no output length is claimed.
    #[test]
    fn llmd_a_dataset_is_sampled_with_its_measured_length() {
        let mut report = fixture();
        report.args["data"] = serde_json::json!({
            "source": {"kind": "file", "path": "prompts.jsonl"}
        });
        let b = &report.benchmarks[0];
        let load = benchmark_report(&report, b, 0).scenario.load.standardized;
        assert_eq!(load.source, "sampled");
        assert_eq!(load.input_seq_len.distribution, "other");
        assert_eq!(
            load.input_seq_len.value.as_f64(),
            Some(b.metrics["prompt_tokens"].successful.mean)
        );
        assert!(load.output_seq_len.is_none() && load.prefix.is_none());
        // The fixture's own synthetic spec, for contrast: generated prompts of 32 tokens.
        let load = benchmark_report(&fixture(), b, 0)
            .scenario
            .load
            .standardized;
        assert_eq!((load.source, load.input_seq_len), ("random", fixed(32)));
    }
}
