//! Resolving raw flags into a validated plan ("high" args). Pure: no network, no files
//! beyond what a flag names. Every error is one line naming the flag or variable.

use super::args::{ProfileKind, RequestFormatArg, RunArgs, SweepArrivalsArg, WorkerFailureArg};
use super::values::WindowSpec;
use crate::data::DataPlan;
use llmsurge_coordinator::profiles::{SearchVariable, SloTier};
use llmsurge_coordinator::slo::SloTarget;
use llmsurge_coordinator::{
    DEFAULT_THROUGHPUT_CONCURRENCY, GoodputSpec, Limits, OnWorkerFailure, SaturationConfig, Slo,
    Strategy, StrategySettings, SweepArrivals,
};
use llmsurge_proto::{MeasureWindow, Redaction, RequestFormat, Secret};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// The time limit used when no limit at all is given.
pub const DEFAULT_MAX_SECONDS: Duration = Duration::from_secs(30);
/// Finished requests before `--max-error-rate` is evaluated.
pub const ERROR_RATE_MIN_SAMPLE: u64 = 20;

pub use super::UsageError;

fn usage<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// Where the load goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "url")]
pub enum TargetSpec {
    /// The built-in mock server, started in-process.
    Mock,
    /// A server at this base URL (written redacted: see [`RunPlan::public_json`]).
    Url(#[serde(serialize_with = "strict_url")] String),
}

pub use crate::report::Output;

/// How requests are made (everything of the worker's backend config but the target).
#[derive(Clone, Debug, Default, Serialize)]
pub struct BackendPlan {
    /// Chat or completions.
    pub request_format: RequestFormat,
    /// Streamed or not.
    pub stream: bool,
    /// Redacted in every output.
    #[serde(serialize_with = "redact")]
    pub api_key: Option<Secret>,
    /// Extra headers (values redacted in every output unless harmless or opted in).
    #[serde(serialize_with = "strict_headers")]
    pub headers: Vec<(String, String)>,
    /// Extra query parameters (values redacted in every output unless opted in).
    #[serde(serialize_with = "strict_params")]
    pub params: Vec<(String, String)>,
    /// Extra body fields (a field named like a credential, at any depth, is redacted in
    /// every output).
    #[serde(serialize_with = "strict_body")]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// HTTP/2.
    pub http2: bool,
    /// Requests sharing one HTTP/2 connection at once (`--http2-streams`).
    pub http2_streams: u32,
    /// Timeouts.
    pub request_timeout: Duration,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// TLS settings (`--ca-cert`, `--insecure`, `--client-cert`, `--client-key`): paths
    /// only, never a key's contents.
    pub tls: llmsurge_proto::http::TlsConfig,
    /// TTFT timeout.
    pub ttft_timeout: Option<Duration>,
    /// Idle timeout.
    pub idle_timeout: Option<Duration>,
    /// Send ignore_eos.
    pub ignore_eos: bool,
    /// Send min_tokens equal to max_tokens (`--min-tokens`).
    pub min_tokens: bool,
    /// Send each request an `x-request-id` (`--request-id-header`).
    pub request_id_header: bool,
    /// Send no `traceparent` (`--no-traceparent`).
    pub no_traceparent: bool,
    /// Router affinity (`--affinity`, `--session-token`, `--sticky-connections`).
    pub affinity: llmsurge_proto::affinity::Affinity,
    /// `ignore_eos` was asked for, not defaulted (a refusal is then a usage error).
    #[serde(skip)]
    pub ignore_eos_explicit: bool,
}

fn redact<S: serde::Serializer>(secret: &Option<Secret>, s: S) -> Result<S::Ok, S::Error> {
    match secret {
        Some(_) => s.serialize_str(llmsurge_proto::REDACTED),
        None => s.serialize_none(),
    }
}

// The serializers of values that may hold a secret redact everything but the harmless,
// whatever the opt-ins: a plan serialized directly can never leak. [`RunPlan::public_json`]
// then puts back what `--show-header` and `--show-query-param` opt in.

fn strict_headers<S: serde::Serializer>(h: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    Serialize::serialize(&Redaction::default().headers(h), s)
}

fn strict_params<S: serde::Serializer>(p: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    Serialize::serialize(&Redaction::default().query_params(p), s)
}

fn strict_body<S: serde::Serializer>(
    body: &serde_json::Map<String, serde_json::Value>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut body = serde_json::Value::Object(body.clone());
    llmsurge_proto::redact::json_credentials(&mut body, &Redaction::default());
    Serialize::serialize(&body, s)
}

fn strict_url<S: serde::Serializer>(url: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&Redaction::default().url(url))
}

/// The validated plan of `benchmark run`.
#[derive(Clone, Debug, Serialize)]
pub struct RunPlan {
    /// The target.
    pub target: TargetSpec,
    /// The model, when given.
    pub model: Option<String>,
    /// The profile.
    pub profile: ProfileKind,
    /// The benchmarks the profile runs.
    pub profile_plan: ProfilePlan,
    /// Ramp-up and burstiness.
    pub settings: StrategySettings,
    /// Limits of every benchmark.
    pub limits: Limits,
    /// Objectives checked on every benchmark.
    pub slo: Option<Slo>,
    /// Per-request goodput thresholds.
    pub goodput: Option<GoodputSpec>,
    /// Over-saturation detection.
    pub saturation: Option<SaturationConfig>,
    /// Worker processes, when forced.
    pub workers: Option<u32>,
    /// Group-wide cap on requests in flight.
    pub max_concurrency: Option<u64>,
    /// Warm-up window.
    pub warmup: Option<WindowSpec>,
    /// Cool-down window.
    pub cooldown: Option<WindowSpec>,
    /// The workload.
    pub data: DataPlan,
    /// Request settings.
    pub backend: BackendPlan,
    /// Run seed.
    pub seed: u64,
    /// Drain bound after the first Ctrl-C.
    pub drain_timeout: Duration,
    /// Silence after which a worker is killed as hung.
    pub worker_timeout: Duration,
    /// Dead-worker policy.
    pub on_worker_failure: OnWorkerFailure,
    /// Client-bottleneck threshold on dispatch-lag p99.
    pub max_dispatch_lag: Duration,
    /// `--max-short-output-share`: a larger share of short outputs is an invalid run.
    pub max_short_output_share: Option<f64>,
    /// Outputs.
    pub outputs: Vec<Output>,
    /// Directory of report files.
    pub output_dir: PathBuf,
    /// Report contents and console behaviour.
    pub reporting: crate::report::ReportSettings,
    /// This host's part of a multi-host load (`--shard`, `--shards`); 0/1 for one host.
    pub shard: llmsurge_proto::Shard,
    /// The first benchmark's start instant, Unix seconds (`--start-at`).
    pub start_at: Option<f64>,
    /// How long to wait for the target to become ready (`--ready-timeout`).
    pub ready_timeout: Option<Duration>,
    /// Where the target check asks whether the server is ready (`--health-path`).
    pub health_path: super::values::HealthPath,
    /// The server's metrics and profiler.
    pub server_metrics: ServerMetricsPlan,
    /// What of headers and URLs outputs show (`--show-header`, `--show-query-param`).
    pub redaction: Redaction,
    /// Agentic client behaviours (`--cancel`, ...).
    #[serde(default)]
    pub behaviour: llmsurge_proto::ClientBehaviour,
    /// Print the plan and exit.
    #[serde(skip)]
    pub dry_run: bool,
    /// Runs of the whole plan (`--repeat`).
    pub repeat: u32,
    /// Pause between runs (`--repeat-cooldown`).
    pub repeat_cooldown: Option<Duration>,
    /// `--until-precise`.
    pub precision: Option<llmsurge_coordinator::precision::PrecisionSpec>,
}

impl RunPlan {
    /// The plan as every output writes it (`--dry-run`, the report's `args`): header,
    /// query and URL values redacted but for the harmless and those opted in.
    pub fn public_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        let r = &self.redaction;
        let mut put = |pointer: &str, value: serde_json::Value| {
            if let Some(slot) = v.pointer_mut(pointer) {
                *slot = value;
            }
        };
        put(
            "/backend/headers",
            serde_json::to_value(r.headers(&self.backend.headers)).unwrap_or_default(),
        );
        put(
            "/backend/params",
            serde_json::to_value(r.query_params(&self.backend.params)).unwrap_or_default(),
        );
        if let TargetSpec::Url(url) = &self.target {
            put("/target/url", r.url(url).into());
        }
        if let MetricsSource::Url(url) = &self.server_metrics.source {
            put("/server_metrics/source/url", r.url(url).into());
        }
        // Any other URL (a data file's, a tokenizer's) loses its credentials too.
        redact_strings(&mut v, r);
        v
    }
}

/// Every string in `v` through [`Redaction::text`].
fn redact_strings(v: &mut serde_json::Value, r: &Redaction) {
    match v {
        serde_json::Value::String(s) => {
            if let std::borrow::Cow::Owned(redacted) = r.text(s) {
                *s = redacted;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|i| redact_strings(i, r)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|i| redact_strings(i, r)),
        _ => {}
    }
}

/// Resolves and validates `benchmark run` flags.
pub fn resolve(args: &RunArgs) -> Result<RunPlan, UsageError> {
    let target = resolve_target(args.target.target.as_deref())?;
    let profile_plan = resolve_profile(args)?;
    let Objectives {
        slo,
        goodput,
        saturation,
    } = resolve_objectives(args)?;
    let settings = resolve_settings(args)?;
    if args.load.workers.is_some_and(|w| w > 1) && args.load.profile == ProfileKind::Synchronous {
        return usage("--workers: the synchronous profile runs on exactly one worker");
    }
    if args.load.max_concurrency.is_some() && args.load.profile == ProfileKind::Synchronous {
        return usage(
            "--max-concurrency has no effect with --profile synchronous (always one in flight)",
        );
    }
    // Before the shard's checks, which need the plan; a shard with no shared seed is
    // refused after them (see `seed`).
    let early_shard = super::shard::resolve_shard(
        args.multi_host.shard,
        args.multi_host.shards,
        std::env::var(super::shard::JOB_INDEX_VAR).ok().as_deref(),
    )
    .ok();
    let seed = super::seed::run_seed(args.load.random_seed, early_shard, args.multi_host.start_at);
    let data = resolve_data(args, seed)?;
    check_data_fits_format(&data, args.target.request_format)?;
    let mut profile_plan = profile_plan;
    if let ProfilePlan::Capacity { variable, .. } = &mut profile_plan
        && data.has_sessions()
    {
        // Sessions (and agent traces, each a user's task) are users: the search counts
        // them, from one up.
        *variable = SearchVariable::Users;
    }
    if let ProfilePlan::Fixed { strategies } = &profile_plan
        && strategies.iter().any(|s| {
            matches!(
                s,
                Strategy::Replay {
                    starts_per_s: Some(_),
                    ..
                }
            )
        })
        && !matches!(data.source, crate::data::DataSource::AgentTrace { .. })
    {
        return usage(
            "--rate has no effect with --profile replay of a timestamped trace (the trace sets the instants; use --time-scale); with agent traces it starts that many traces per second",
        );
    }
    let finite_data = data.is_finite();
    let mut limits = Limits {
        max_seconds: args.limits.max_seconds,
        max_requests: args.limits.max_requests,
        max_errors: args.limits.max_errors,
        max_error_rate: args.limits.max_error_rate,
        error_rate_min_sample: ERROR_RATE_MIN_SAMPLE,
    };
    if limits.max_seconds.is_none() && limits.max_requests.is_none() && !finite_data {
        limits.max_seconds = Some(DEFAULT_MAX_SECONDS);
    }
    // Workers report at least every 0.5 s; a shorter timeout would kill healthy ones.
    if args.client.worker_timeout < Duration::from_secs(1) {
        return usage(format!(
            "--worker-timeout {}s is too short: workers report every 0.5s (use 1s or more)",
            args.client.worker_timeout.as_secs_f64()
        ));
    }
    // Streams still waiting for their turn when the time is up would never start.
    if let Some(max) = limits.max_seconds
        && !settings.rampup.is_zero()
        && settings.rampup >= max
    {
        return usage(format!(
            "--rampup {}s must be shorter than --max-seconds {}s",
            settings.rampup.as_secs_f64(),
            max.as_secs_f64()
        ));
    }
    // Both windows are checked now against the limits, so a bad combination fails before
    // anything starts.
    measure_window(args.limits.warmup, args.limits.cooldown, &limits)?;
    let shard = resolve_shard(args, &profile_plan, &limits)?;
    if shard.count > 1 && data.has_sessions() {
        // Session indices are handed out per host: two shards would run the same ones.
        return usage(
            "--shard: multi-turn sessions (--data turns=…, --data-args sessions) and agent traces run on one host only",
        );
    }
    super::seed::check_shard_seed(args.load.random_seed, shard, args.multi_host.start_at)
        .map_err(UsageError)?;
    let start_at = args.multi_host.start_at;
    if let Some(at) = start_at {
        super::shard::check_start_at(at, crate::report::unix_now()).map_err(UsageError)?;
    }
    let (outputs, reporting) = super::resolve_output::resolve_output(&args.output)?;
    let backend = resolve_backend(args)?;
    // Synthetic requests that stand alone are refused before the target is contacted;
    // a file's requests once it is read (see `plan_template`).
    if let crate::data::DataSource::Synthetic { spec } = &data.source {
        super::affinity::check_data(
            &backend.affinity,
            &llmsurge_proto::DataSpec::Synthetic(spec.clone()),
        )?;
    }
    check_objectives_need_no_stream(slo.as_ref(), goodput.as_ref(), &backend)?;
    if let ProfilePlan::Capacity { tiers, .. } = &profile_plan {
        for t in tiers {
            // As --slo: goodput is counted only against --goodput's thresholds.
            if goodput.is_none()
                && t.slo
                    .checks
                    .iter()
                    .any(|c| c.target == SloTarget::GoodputPerS)
            {
                return usage(format!(
                    "--slo-tier {}: goodput_per_s needs --goodput thresholds",
                    t.name
                ));
            }
            check_objectives_need_no_stream(Some(&t.slo), None, &backend).map_err(
                |UsageError(e)| {
                    UsageError(format!(
                        "--slo-tier {}: {}",
                        t.name,
                        e.trim_start_matches("--slo: ")
                    ))
                },
            )?;
        }
    }
    let (repeat, repeat_cooldown, precision) = super::repeat::resolve_repeat(args, backend.stream)?;
    let behaviour = super::agentic::resolve_behaviour(args, backend.stream)?;
    Ok(RunPlan {
        behaviour,
        repeat,
        repeat_cooldown,
        precision,
        target,
        model: args.target.model.clone().filter(|m| !m.trim().is_empty()),
        profile: args.load.profile,
        profile_plan,
        slo,
        goodput,
        saturation,
        settings,
        limits,
        workers: args.load.workers,
        max_concurrency: args.load.max_concurrency,
        warmup: args.limits.warmup,
        cooldown: args.limits.cooldown,
        data,
        backend,
        seed,
        drain_timeout: args.client.drain_timeout,
        worker_timeout: args.client.worker_timeout,
        on_worker_failure: match args.client.on_worker_failure {
            WorkerFailureArg::Stop => OnWorkerFailure::Stop,
            WorkerFailureArg::Continue => OnWorkerFailure::Continue,
        },
        max_dispatch_lag: args.client.max_dispatch_lag,
        max_short_output_share: args.client.max_short_output_share,
        outputs,
        output_dir: args.output.output_dir.clone(),
        reporting,
        shard,
        start_at,
        ready_timeout: args.multi_host.ready_timeout,
        health_path: args.target.health_path.clone(),
        server_metrics: resolve_server_metrics(args)?,
        redaction: Redaction::new(&args.target.show_header, &args.target.show_query_param),
        dry_run: args.output.dry_run,
    })
}

/// Where the server's metrics come from (`--server-metrics`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "url")]
pub enum MetricsSource {
    /// The target's `/metrics`, if it answers at run start.
    Target,
    /// Not scraped.
    Off,
    /// This URL (user, password and query values redacted in every output).
    Url(#[serde(serialize_with = "strict_url")] String),
}

/// The server's metrics and profiler, resolved.
#[derive(Clone, Debug, Serialize)]
pub struct ServerMetricsPlan {
    /// Where to scrape.
    pub source: MetricsSource,
    /// Time between two scrapes.
    pub interval: Duration,
    /// Other series to keep (`--server-metrics-include`).
    pub include: Option<String>,
    /// `--profile-server`.
    pub profile_server: bool,
    /// `--reset-cache` as given (`auto`, `none`, a path); absent: the profile's default.
    pub reset_cache: Option<String>,
    /// `--gpu-metrics` as given: `nvidia-smi` or a DCGM exporter's URL.
    pub gpu_metrics: Option<String>,
}

/// Scrapes closer together than this would load the server for little.
pub const MIN_SCRAPE_INTERVAL: Duration = Duration::from_millis(100);

fn resolve_server_metrics(args: &RunArgs) -> Result<ServerMetricsPlan, UsageError> {
    let a = &args.server;
    let source = match a.server_metrics.as_deref().map(str::trim) {
        None | Some("") => MetricsSource::Target,
        Some(off) if off.eq_ignore_ascii_case("off") => MetricsSource::Off,
        Some(url) => {
            let parsed = reqwest::Url::parse(url).map_err(|e| {
                UsageError(format!(
                    "--server-metrics: {:?} is not a URL ({e}); expected e.g. http://localhost:8000/metrics or off",
                    Redaction::default().url(url)
                ))
            })?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                return usage(format!(
                    "--server-metrics: {:?} must be an http:// or https:// URL with a host, or off",
                    Redaction::default().url(url)
                ));
            }
            MetricsSource::Url(url.to_string())
        }
    };
    let interval = a
        .server_metrics_interval
        .unwrap_or(llmsurge_coordinator::server_metrics::DEFAULT_INTERVAL);
    if interval < MIN_SCRAPE_INTERVAL {
        return usage(format!(
            "--server-metrics-interval {}s is too short: scrape at most every {}ms",
            interval.as_secs_f64(),
            MIN_SCRAPE_INTERVAL.as_millis()
        ));
    }
    if let Some(re) = &a.server_metrics_include
        && let Err(e) = regex::Regex::new(re)
    {
        // The regex crate's message spans lines (the pattern, a caret); its last says why.
        let why = e.to_string();
        let why = why
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("invalid")
            .trim()
            .trim_start_matches("error: ")
            .to_string();
        return usage(format!(
            "--server-metrics-include: {re:?} is not a regular expression ({why})"
        ));
    }
    if source == MetricsSource::Off {
        for (given, flag) in [
            (
                a.server_metrics_interval.is_some(),
                "--server-metrics-interval",
            ),
            (
                a.server_metrics_include.is_some(),
                "--server-metrics-include",
            ),
        ] {
            if given {
                return usage(format!("{flag} has no effect with --server-metrics off"));
            }
        }
    }
    Ok(ServerMetricsPlan {
        source,
        interval,
        include: a.server_metrics_include.clone(),
        profile_server: a.profile_server,
        reset_cache: a.reset_cache.clone(),
        gpu_metrics: a.gpu_metrics.clone(),
    })
}

/// The shard this process runs, refusing what cannot be split: profiles whose next rate
/// depends on the previous result (each shard would pick its own), synchronous (one
/// request at a time cannot be spread over hosts), and splits that leave this shard no
/// stream, no slot or no concurrency.
fn resolve_shard(
    args: &RunArgs,
    profile: &ProfilePlan,
    limits: &Limits,
) -> Result<llmsurge_proto::Shard, UsageError> {
    let m = &args.multi_host;
    let job_index = std::env::var(super::shard::JOB_INDEX_VAR).ok();
    let shard =
        super::shard::resolve_shard(m.shard, m.shards, job_index.as_deref()).map_err(UsageError)?;
    if !shard.is_split() {
        return Ok(shard);
    }
    // As the user counts shards: from 1.
    let n = shard.count;
    let name = format!("--shard {}/{n}", shard.index + 1);
    let strategies = match profile {
        ProfilePlan::Sweep { .. } | ProfilePlan::Knee { .. } | ProfilePlan::Capacity { .. } => {
            let profile = format!("{:?}", args.load.profile).to_lowercase();
            return usage(format!(
                "{name}: --profile {profile} cannot be split over hosts: each benchmark's rate comes from the previous results, which no shard has whole (run it on one host)"
            ));
        }
        ProfilePlan::Fixed { strategies } => strategies,
    };
    for strategy in strategies {
        let streams = match *strategy {
            Strategy::Synchronous => {
                return usage(format!(
                    "{name}: --profile synchronous sends one request at a time, which cannot be split over hosts"
                ));
            }
            Strategy::Concurrent { streams } => Some(("concurrent", streams)),
            Strategy::Throughput { max_concurrency } => Some(("throughput", max_concurrency)),
            Strategy::Constant { .. } | Strategy::Poisson { .. } | Strategy::Replay { .. } => None,
        };
        if let Some((kind, total)) = streams
            && shard.share(u64::from(total)) == 0
        {
            return usage(format!(
                "{name}: {kind} with {total} streams leaves this shard 0 streams (each of {n} shards needs at least one)"
            ));
        }
    }
    if let Some(c) = args.load.max_concurrency
        && shard.share(c) == 0
    {
        return usage(format!(
            "{name}: --max-concurrency {c} leaves this shard no concurrency (each of {n} shards needs at least one)"
        ));
    }
    if let Some(max) = limits.max_requests
        && shard.share(max) == 0
    {
        return usage(format!(
            "{name}: --max-requests {max} leaves this shard 0 requests (each of {n} shards needs at least one)"
        ));
    }
    Ok(shard)
}

/// A synthetic spec's batch_size and documents belong to one format each.
fn check_data_fits_format(data: &DataPlan, format: RequestFormatArg) -> Result<(), UsageError> {
    // Sessions resend the reply text: formats with a conversation read it back.
    if data.dataset_args.sessions && !format.has_conversations() {
        return usage(format!(
            "--data-args: sessions (multi-turn sessions) are for --request-format chat, responses or anthropic, not {}",
            format!("{format:?}").to_lowercase()
        ));
    }
    if data.dataset_args.session_id.is_some() && format != RequestFormatArg::Chat {
        return usage(format!(
            "--data-args: session_id=user sends the OpenAI user field of --request-format chat, which {} has not; use session_header",
            format!("{format:?}").to_lowercase()
        ));
    }
    let crate::data::DataSource::Synthetic { spec } = &data.source else {
        if format == RequestFormatArg::Transcription {
            return usage(
                "--data: --request-format transcription uploads generated audio: give a synthetic spec with audio_seconds (e.g. audio_seconds=5)",
            );
        }
        return Ok(());
    };
    let name = format!("{format:?}").to_lowercase();
    if spec.batch_size > 0 && format != RequestFormatArg::Embeddings {
        return usage(format!(
            "--data: batch_size is for --request-format embeddings, not {name}"
        ));
    }
    if spec.documents > 0 && !matches!(format, RequestFormatArg::Rerank | RequestFormatArg::Score) {
        return usage(format!(
            "--data: documents is for --request-format rerank or score, not {name}"
        ));
    }
    let media = &spec.media;
    if media.images > 0 && format != RequestFormatArg::Chat {
        return usage(format!(
            "--data: images are sent as chat image_url parts: use --request-format chat, not {name}"
        ));
    }
    if format == RequestFormatArg::Transcription && media.audio_seconds <= 0.0 {
        return usage(
            "--data: --request-format transcription uploads audio: give audio_seconds (e.g. audio_seconds=5)",
        );
    }
    if media.audio_seconds > 0.0
        && !matches!(
            format,
            RequestFormatArg::Chat | RequestFormatArg::Transcription
        )
    {
        return usage(format!(
            "--data: audio_seconds is for --request-format chat (input_audio) or transcription, not {name}"
        ));
    }
    // Sessions resend the reply text: formats with a conversation read it back.
    if spec.turns > 0 && !format.has_conversations() {
        return usage(format!(
            "--data: turns (multi-turn sessions) is for --request-format chat, responses or anthropic, not {name}"
        ));
    }
    // Function definitions exist in the APIs with a conversation (chat, responses,
    // anthropic); elsewhere they would silently go nowhere.
    if spec.tools > 0 && !format.has_conversations() {
        return usage(format!(
            "--data: tools (function definitions) is for --request-format chat, responses or anthropic, not {name}"
        ));
    }
    // Only chat has the OpenAI `user` field; elsewhere the id would silently go nowhere.
    if spec.session_user && format != RequestFormatArg::Chat {
        return usage(format!(
            "--data: session_id=user sends the OpenAI user field of --request-format chat, which {name} has not; use session_header=NAME"
        ));
    }
    Ok(())
}

/// The wire format of `--request-format`.
fn request_format(arg: RequestFormatArg) -> RequestFormat {
    match arg {
        RequestFormatArg::Chat => RequestFormat::Chat,
        RequestFormatArg::Completions => RequestFormat::Completions,
        RequestFormatArg::Responses => RequestFormat::Responses,
        RequestFormatArg::Anthropic => RequestFormat::Anthropic,
        RequestFormatArg::Embeddings => RequestFormat::Embeddings,
        RequestFormatArg::Rerank => RequestFormat::Rerank,
        RequestFormatArg::Score => RequestFormat::Score,
        RequestFormatArg::Transcription => RequestFormat::Transcription,
    }
}

fn resolve_data(args: &RunArgs, seed: u64) -> Result<DataPlan, UsageError> {
    use super::args::SamplerArg;
    use crate::data::{DataSource, columns::ColumnMapper, hub::DatasetArgs};
    let d = &args.data;
    // A synthetic spec without output_tokens means a batch of one (embeddings) or
    // DEFAULT_DOCUMENTS documents (rerank, score) for a pooling format.
    let format = request_format(args.target.request_format);
    let source = DataPlan::parse_source(&d.data, seed, format)
        .map_err(|e| UsageError(format!("--data: {e}")))?;
    let dataset_args = match &d.data_args {
        Some(raw) => {
            DatasetArgs::parse(raw).map_err(|e| UsageError(format!("--data-args: {e}")))?
        }
        None => DatasetArgs::default(),
    };
    let column_mapper = match &d.data_column_mapper {
        Some(raw) => ColumnMapper::parse(raw)
            .map_err(|e| UsageError(format!("--data-column-mapper: {e}")))?,
        None => ColumnMapper::default(),
    };
    let replay = args.load.profile == ProfileKind::Replay;
    // Under replay any JSONL is a trace: rows with a `timestamp` column (seconds) and a
    // prompt the column mapper finds.
    let source = match source {
        DataSource::File { path }
            if replay
                && crate::data::files::Format::of(&path)
                    == Some(crate::data::files::Format::Jsonl) =>
        {
            DataSource::Trace {
                path,
                format: crate::data::trace::TraceFormat::Generic,
            }
        }
        other => other,
    };
    let is_agent = matches!(source, DataSource::AgentTrace { .. });
    // A capacity search runs concurrent users, each replaying one trace after another.
    if is_agent && !replay && args.load.profile != ProfileKind::Capacity {
        return usage(format!(
            "--data {}: agent traces (OpenTelemetry spans) are replayed as graphs with --profile replay, or searched for the most concurrent traces with --profile capacity",
            d.data
        ));
    }
    let is_trace = matches!(source, DataSource::Trace { .. });
    if replay && !is_trace && !is_agent {
        return usage(format!(
            "--profile replay needs --data a trace: agent traces (the OTLP JSON export, or one trace per line with trace_id and spans), a Mooncake JSONL (timestamp, input_length, output_length, hash_ids), a BurstGPT CSV (Timestamp, Request tokens, Response tokens), an Azure trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens) or a JSONL with a timestamp column; got {}",
            d.data
        ));
    }
    for (flag, given) in [
        ("--trace-block-size", d.trace_block_size.is_some()),
        ("--trace-start", d.trace_start.is_some()),
        ("--trace-model", d.trace_model.is_some()),
    ] {
        if given && !is_trace {
            return usage(format!(
                "{flag} applies to a timestamped trace (--data), not to {}",
                d.data
            ));
        }
    }
    if (is_trace || is_agent)
        && (d.data_samples.is_some()
            || d.data_sampler != SamplerArg::Sequential
            || d.data_oversample != crate::data::Oversample::Auto)
    {
        return usage(
            "--data-samples, --data-sampler and --data-oversample do not apply to a trace: it is sent once, in order (cut it with --max-requests, --max-seconds, --trace-start)",
        );
    }
    check_session_args(&source, &dataset_args)?;
    let file_sessions = dataset_args.sessions && !matches!(source, DataSource::Synthetic { .. });
    if (file_sessions || matches!(&source, DataSource::Synthetic { spec } if spec.turns > 0))
        && !matches!(
            args.load.profile,
            ProfileKind::Synchronous
                | ProfileKind::Concurrent
                | ProfileKind::Throughput
                | ProfileKind::Constant
                | ProfileKind::Poisson
                | ProfileKind::Capacity
        )
    {
        // Sweep and capacity derive their rates from a measured request rate, which is
        // not a session rate; a replayed trace has no sessions.
        return usage(format!(
            "--data turns=… / --data-args sessions: multi-turn sessions run with --profile synchronous, concurrent or throughput (N users, each running one session after another), constant / poisson (--rate new sessions per second) or capacity (the most concurrent users), not {}",
            clap::ValueEnum::to_possible_value(&args.load.profile)
                .map_or_else(String::new, |v| v.get_name().to_string())
        ));
    }
    let synthetic = matches!(source, DataSource::Synthetic { .. });
    if synthetic && d.data_args.is_some() {
        return usage("--data-args applies to data files and datasets, not to a synthetic spec");
    }
    if synthetic && d.data_column_mapper.is_some() {
        return usage(
            "--data-column-mapper applies to data files and datasets, not to a synthetic spec",
        );
    }
    Ok(DataPlan {
        source,
        processor: d.processor.trim().to_string(),
        dataset_args,
        column_mapper,
        samples: d.data_samples,
        sampler: match d.data_sampler {
            SamplerArg::Sequential => llmsurge_proto::SamplerKind::Sequential,
            SamplerArg::Shuffle => llmsurge_proto::SamplerKind::Shuffle,
        },
        oversample: d.data_oversample,
        seed,
        lora: d
            .lora
            .as_deref()
            .map(crate::data::lora::parse)
            .transpose()
            .map_err(|e| UsageError(format!("--lora: {e}")))?,
        trace: crate::data::TracePlan {
            block_size: d
                .trace_block_size
                .unwrap_or(crate::data::trace::DEFAULT_BLOCK_SIZE),
            start: d.trace_start.unwrap_or_default(),
            model: d.trace_model.clone(),
        },
    })
}

/// The session keys of `--data-args` go together, and with conversation data only.
fn check_session_args(
    source: &crate::data::DataSource,
    args: &crate::data::hub::DatasetArgs,
) -> Result<(), UsageError> {
    use crate::data::DataSource;
    if !args.sessions {
        for (key, given) in [
            ("history", args.history.is_some()),
            ("think_time", args.think_time.is_some()),
            ("session_id", args.session_id.is_some()),
            ("session_header", args.session_header.is_some()),
        ] {
            if given {
                return usage(format!(
                    "--data-args: {key} needs sessions (e.g. {{\"sessions\": true, \"{key}\": …}})"
                ));
            }
        }
        return Ok(());
    }
    if matches!(source, DataSource::Trace { .. }) {
        return usage("--data-args: sessions replays conversation files and datasets, not a trace");
    }
    if args.first_turn {
        return usage(
            "--data-args: first_turn and sessions do not combine (first_turn sends one request per conversation, sessions every turn)",
        );
    }
    if let Some(raw) = &args.think_time {
        crate::data::synthetic::parse_think_time(raw)
            .map_err(|e| UsageError(format!("--data-args: {e}")))?;
    }
    if let Some(raw) = &args.session_header {
        crate::data::synthetic::session_header_name(raw)
            .map_err(|e| UsageError(format!("--data-args: {e}")))?;
    }
    match args.session_id.as_deref() {
        None | Some("user") => Ok(()),
        Some(other) => usage(format!(
            "--data-args: session_id={other}: expected user (the session id as the OpenAI user field)"
        )),
    }
}

pub(crate) fn resolve_target(target: Option<&str>) -> Result<TargetSpec, UsageError> {
    match target.map(str::trim) {
        None | Some("" | "mock") => Ok(TargetSpec::Mock),
        Some(url) => {
            let shown = Redaction::default().url(url);
            let mut parsed = reqwest::Url::parse(url)
                .map_err(|e| UsageError(format!("--target: {shown:?} is not a URL ({e}); expected e.g. http://localhost:8000 or mock")))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                return usage(format!(
                    "--target: {shown:?} must be an http:// or https:// URL with a host"
                ));
            }
            // Accept a base URL ending in /v1: the OpenAI paths are appended per request
            // (to the path: a query, as an Azure api-version, stays at the end).
            if parsed.query().is_none() && parsed.fragment().is_none() {
                let base = url.trim_end_matches('/');
                return Ok(TargetSpec::Url(
                    base.strip_suffix("/v1").unwrap_or(base).to_string(),
                ));
            }
            parsed.set_fragment(None);
            let path = parsed.path().trim_end_matches('/');
            let path = path.strip_suffix("/v1").unwrap_or(path).to_string();
            parsed.set_path(&path);
            Ok(TargetSpec::Url(parsed.to_string()))
        }
    }
}

/// The benchmarks a profile runs.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProfilePlan {
    /// One benchmark per strategy.
    Fixed {
        /// The strategies, in order.
        strategies: Vec<Strategy>,
    },
    /// Synchronous, throughput, then evenly spaced rates.
    Sweep {
        /// Benchmarks in all.
        benchmarks: usize,
        /// Arrivals of the rate benchmarks.
        arrivals: SweepArrivals,
        /// Streams of the throughput benchmark.
        throughput_concurrency: u32,
    },
    /// A sweep, then rates on either side of the knee it found.
    Knee {
        /// Benchmarks of the sweep.
        benchmarks: usize,
        /// Arrivals of the rate benchmarks.
        arrivals: SweepArrivals,
        /// Streams of the throughput benchmark.
        throughput_concurrency: u32,
    },
    /// Synchronous, throughput, then a bisection of constant rates against the SLO;
    /// over sessions, a bisection of concurrent users from one up.
    Capacity {
        /// Stop when passing and failing rates are this close (a fraction).
        precision: f64,
        /// Streams of the throughput benchmark.
        throughput_concurrency: u32,
        /// What the search varies: users when the data are sessions.
        variable: SearchVariable,
        /// `--slo-tier`: each tier's answer from the same probes.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tiers: Vec<SloTier>,
    },
}

/// Default benchmarks of a sweep.
pub const DEFAULT_SWEEP_BENCHMARKS: usize = 10;
/// Default precision of the capacity search.
pub const DEFAULT_CAPACITY_PRECISION: f64 = 0.05;

/// `--slo-tier NAME:CHECKS`, each parsed as `--slo` (with `--confidence`); names are
/// unique. Only a capacity search answers per tier.
fn resolve_tiers(args: &RunArgs) -> Result<Vec<SloTier>, UsageError> {
    let given: Vec<&str> = args
        .limits
        .slo_tier
        .iter()
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .collect();
    if given.is_empty() {
        return Ok(Vec::new());
    }
    if args.load.profile != ProfileKind::Capacity {
        return usage(format!(
            "--slo-tier: tiers are answered by a capacity search; use --profile capacity (or --slo to judge every benchmark), not --profile {}",
            format!("{:?}", args.load.profile).to_lowercase()
        ));
    }
    if args.limits.slo.is_some() {
        return usage(
            "--slo-tier: give the capacity search tiers or --slo, not both (write --slo's checks as a tier)",
        );
    }
    let mut tiers: Vec<SloTier> = Vec::new();
    for t in given {
        let Some((name, checks)) = t.split_once(':') else {
            return usage(format!(
                "--slo-tier {t:?}: expected NAME:CHECKS, e.g. interactive:output_speed_p10>=40tok/s,ttft_p90<=500ms"
            ));
        };
        let name = name.trim();
        let named = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !named {
            return usage(format!(
                "--slo-tier {t:?}: a tier's name is letters, digits, '_', '-' or '.', before the ':'"
            ));
        }
        if tiers.iter().any(|x| x.name == name) {
            return usage(format!(
                "--slo-tier: the tier name {name:?} is given twice (each tier needs its own name)"
            ));
        }
        let mut slo =
            Slo::parse(checks).map_err(|e| UsageError(format!("--slo-tier {name}: {e}")))?;
        if let Some(c) = args.limits.confidence {
            slo.confidence = c;
        }
        tiers.push(SloTier {
            name: name.to_string(),
            slo,
        });
    }
    Ok(tiers)
}

fn resolve_profile(args: &RunArgs) -> Result<ProfilePlan, UsageError> {
    let load = &args.load;
    let name = format!("{:?}", load.profile).to_lowercase();
    let rates = load.rate.clone().map(|r| r.0);
    if load.sweep_arrivals.is_some()
        && !matches!(load.profile, ProfileKind::Sweep | ProfileKind::Knee)
    {
        return usage(format!(
            "--sweep-arrivals has no effect with --profile {name}"
        ));
    }
    if load.time_scale.is_some() && load.profile != ProfileKind::Replay {
        return usage(format!("--time-scale has no effect with --profile {name}"));
    }
    if load.capacity_precision.is_some() && load.profile != ProfileKind::Capacity {
        return usage(format!(
            "--capacity-precision has no effect with --profile {name}"
        ));
    }
    let throughput_concurrency = u32::try_from(
        load.max_concurrency
            .unwrap_or(u64::from(DEFAULT_THROUGHPUT_CONCURRENCY)),
    )
    .map_err(|_| UsageError("--max-concurrency is too large".into()))?;
    let tiers = resolve_tiers(args)?;
    let fixed = |strategies: Vec<Strategy>| Ok(ProfilePlan::Fixed { strategies });
    match (load.profile, rates) {
        (ProfileKind::Synchronous | ProfileKind::Throughput | ProfileKind::Capacity, Some(_)) => {
            usage(format!(
                "--rate has no effect with --profile {name}{}",
                if load.profile == ProfileKind::Throughput {
                    " (use --max-concurrency)"
                } else {
                    ""
                }
            ))
        }
        (ProfileKind::Replay, rates) => {
            let time_scale = load.time_scale.unwrap_or(1.0);
            if !(time_scale.is_finite() && (1e-6..=1e6).contains(&time_scale)) {
                return usage(format!(
                    "--time-scale must be a number between 0.000001 and 1000000, got {time_scale}"
                ));
            }
            // Agent traces only (checked with the data): traces started per second.
            let starts_per_s = match rates.as_deref() {
                None => None,
                Some([r]) if r.is_finite() && *r > 0.0 => Some(*r),
                Some(_) => {
                    return usage(
                        "--rate with --profile replay: one positive number, agent traces started per second",
                    );
                }
            };
            // The rate is the trace's, known once the data is read (see `run`).
            fixed(vec![Strategy::Replay {
                time_scale,
                rate: 0.0,
                starts_per_s,
            }])
        }
        (ProfileKind::Synchronous, None) => fixed(vec![Strategy::Synchronous]),
        (ProfileKind::Throughput, None) => fixed(vec![Strategy::Throughput {
            max_concurrency: throughput_concurrency,
        }]),
        (ProfileKind::Sweep | ProfileKind::Knee, rates) => {
            let benchmarks = match rates.as_deref() {
                None => DEFAULT_SWEEP_BENCHMARKS,
                Some([n]) if n.fract() == 0.0 && (3.0..=100.0).contains(n) => *n as usize,
                Some(_) => {
                    return usage(
                        "--rate: for a sweep, the number of benchmarks in all, 3 to 100 (default 10)",
                    );
                }
            };
            let arrivals = match load.sweep_arrivals {
                Some(SweepArrivalsArg::Poisson) => SweepArrivals::Poisson,
                _ => SweepArrivals::Constant,
            };
            Ok(if load.profile == ProfileKind::Knee {
                ProfilePlan::Knee {
                    benchmarks,
                    arrivals,
                    throughput_concurrency,
                }
            } else {
                ProfilePlan::Sweep {
                    benchmarks,
                    arrivals,
                    throughput_concurrency,
                }
            })
        }
        (ProfileKind::Capacity, None) => {
            if args.limits.slo.is_none() && tiers.is_empty() {
                return usage(
                    "--profile capacity needs --slo (the objective the capacity must meet) or --slo-tier",
                );
            }
            let precision = load
                .capacity_precision
                .unwrap_or(DEFAULT_CAPACITY_PRECISION);
            if !(precision > 0.0 && precision < 0.5) {
                return usage("--capacity-precision must be above 0% and below 50%");
            }
            Ok(ProfilePlan::Capacity {
                precision,
                throughput_concurrency,
                // Users once the data are known to be sessions (see `resolve`).
                variable: SearchVariable::Rate,
                tiers,
            })
        }
        (p, None) => usage(format!(
            "--profile {} needs --rate (e.g. --rate 10 or --rate 1,5,10)",
            format!("{p:?}").to_lowercase()
        )),
        (ProfileKind::Concurrent, Some(rates)) => fixed(
            rates
                .iter()
                .map(|&r| {
                    if r.fract() != 0.0 || r > 100_000.0 {
                        return usage(format!(
                            "--rate: concurrent takes whole stream counts, got {r}"
                        ));
                    }
                    Ok(Strategy::Concurrent { streams: r as u32 })
                })
                .collect::<Result<_, _>>()?,
        ),
        (ProfileKind::Constant, Some(rates)) => fixed(
            rates
                .into_iter()
                .map(|rate| Strategy::Constant { rate })
                .collect(),
        ),
        (ProfileKind::Poisson, Some(rates)) => fixed(
            rates
                .into_iter()
                .map(|rate| Strategy::Poisson { rate })
                .collect(),
        ),
    }
}

/// What each benchmark is judged and stopped by, beyond its limits.
struct Objectives {
    slo: Option<Slo>,
    goodput: Option<GoodputSpec>,
    saturation: Option<SaturationConfig>,
}

fn resolve_objectives(args: &RunArgs) -> Result<Objectives, UsageError> {
    let l = &args.limits;
    let slo = l
        .slo
        .as_deref()
        .map(Slo::parse)
        .transpose()
        .map_err(|e| UsageError(format!("--slo: {e}")))?;
    let slo = match (slo, l.confidence) {
        (Some(slo), Some(confidence)) => Some(Slo { confidence, ..slo }),
        // Tiers take the confidence (see `resolve_tiers`).
        (None, Some(_)) if !l.slo_tier.is_empty() => None,
        // The variable may be set for every run of a CI job: only the flag is refused.
        (None, Some(_)) if l.confidence_from_env => None,
        (None, Some(_)) => {
            return usage(
                "--confidence: it sets the confidence of --slo's percentile checks; give --slo too (LLMSURGE_CONFIDENCE alone is ignored without --slo)",
            );
        }
        (slo, None) => slo,
    };
    let goodput = l
        .goodput
        .as_deref()
        .map(GoodputSpec::parse)
        .transpose()
        .map_err(|e| UsageError(format!("--goodput: {e}")))?;
    if slo
        .as_ref()
        .is_some_and(|s| s.checks.iter().any(|c| c.target == SloTarget::GoodputPerS))
        && goodput.is_none()
    {
        return usage("--slo: goodput_per_s needs --goodput thresholds");
    }
    // Embeddings and ranking generate no tokens: an objective on TTFT, ITL, TPOT or
    // output tokens could only fail for want of data, so it is refused up front.
    let format = args.target.request_format;
    if matches!(
        format,
        RequestFormatArg::Embeddings | RequestFormatArg::Rerank | RequestFormatArg::Score
    ) {
        let name = format!("{format:?}").to_lowercase();
        for c in slo.iter().flat_map(|s| &s.checks) {
            let generation = match &c.target {
                SloTarget::Latency { metric, .. } => {
                    metric != "request_latency" && metric != "dispatch_lag"
                }
                SloTarget::OutputTokensPerS => true,
                _ => false,
            };
            if generation {
                return usage(format!(
                    "--slo: {} measures generated tokens, which --request-format {name} has none of",
                    c.name
                ));
            }
        }
        if goodput
            .as_ref()
            .is_some_and(|g| g.ttft.is_some() || g.tpot.is_some())
        {
            return usage(format!(
                "--goodput: ttft and tpot measure generated tokens, which --request-format {name} has none of (use e2e)"
            ));
        }
    }
    let saturation = match (&l.over_saturation, l.detect_saturation) {
        (Some(json), _) => {
            let cfg: SaturationConfig = serde_json::from_str(json)
                .map_err(|e| UsageError(format!("--over-saturation: {e}")))?;
            cfg.validate()
                .map_err(|e| UsageError(format!("--over-saturation: {e}")))?;
            Some(cfg)
        }
        (None, true) => Some(SaturationConfig::default()),
        (None, false) => None,
    };
    Ok(Objectives {
        slo,
        goodput,
        saturation,
    })
}

/// Without streaming the client sees no token arrive: ITL and TPOT are not measured, so
/// an objective on them could only pass or fail for want of data. Refused up front.
fn check_objectives_need_no_stream(
    slo: Option<&Slo>,
    goodput: Option<&GoodputSpec>,
    backend: &BackendPlan,
) -> Result<(), UsageError> {
    if backend.stream || !backend.request_format.generates() {
        return Ok(());
    }
    for c in slo.iter().flat_map(|s| &s.checks) {
        let streamed = match &c.target {
            SloTarget::Latency { metric, .. } => {
                llmsurge_coordinator::result::STREAM_METRICS.contains(&metric.as_str())
            }
            // 1000 / tpot.
            SloTarget::OutputSpeed { .. } => true,
            _ => false,
        };
        if streamed {
            return usage(format!(
                "--slo: {} needs streamed responses (--stream false: the client sees no token arrive, so ITL and TPOT are not measured)",
                c.name
            ));
        }
    }
    if goodput.is_some_and(|g| g.tpot.is_some()) {
        return usage(
            "--goodput: tpot needs streamed responses (--stream false: the client sees no token arrive, so TPOT is not measured; use ttft or e2e)",
        );
    }
    Ok(())
}

fn resolve_settings(args: &RunArgs) -> Result<StrategySettings, UsageError> {
    let mut settings = StrategySettings::default();
    if let Some(b) = args.load.burstiness {
        if args.load.profile != ProfileKind::Poisson {
            return usage("--burstiness only applies to --profile poisson");
        }
        // Gamma shapes beyond these are a typo: 0.01 is already one burst per hundred
        // requests, 100 is already a metronome.
        if !(0.01..=100.0).contains(&b) {
            return usage(format!(
                "--burstiness must be between 0.01 and 100, got {b}"
            ));
        }
        settings.burstiness = b;
    }
    if let Some(r) = args.load.rampup {
        if matches!(
            args.load.profile,
            ProfileKind::Synchronous | ProfileKind::Poisson | ProfileKind::Replay
        ) {
            return usage("--rampup applies to --profile concurrent, throughput and constant");
        }
        settings.rampup = r;
    }
    Ok(settings)
}

/// The measure window of one benchmark under `limits`.
pub fn measure_window(
    warmup: Option<WindowSpec>,
    cooldown: Option<WindowSpec>,
    limits: &Limits,
) -> Result<MeasureWindow, UsageError> {
    let mut w = MeasureWindow::default();
    let (requests, seconds) = (limits.max_requests, limits.max_seconds);
    if let Some(spec) = warmup {
        match spec {
            WindowSpec::Requests(n) => w.warmup_slots = Some(n),
            WindowSpec::Time(d) => w.warmup_time = Some(d),
            WindowSpec::Fraction(f) => match (requests, seconds) {
                (Some(n), _) => w.warmup_slots = Some((n as f64 * f).round() as u64),
                (None, Some(d)) => w.warmup_time = Some(d.mul_f64(f)),
                _ => return usage("--warmup as a fraction needs --max-requests or --max-seconds"),
            },
        }
    }
    if let Some(spec) = cooldown {
        match spec {
            WindowSpec::Requests(n) => match requests {
                Some(max) if n < max => w.cooldown_from_slot = Some(max - n),
                Some(max) => {
                    return usage(format!(
                        "--cooldown {n}req must be below --max-requests {max}"
                    ));
                }
                None => return usage("--cooldown as a request count needs --max-requests"),
            },
            WindowSpec::Time(d) => match seconds {
                Some(max) if d < max => w.cooldown_from_time = Some(max - d),
                Some(_) => return usage("--cooldown must be shorter than --max-seconds"),
                None => return usage("--cooldown as a time needs --max-seconds"),
            },
            WindowSpec::Fraction(f) => match (requests, seconds) {
                (Some(n), _) => w.cooldown_from_slot = Some(n - (n as f64 * f).round() as u64),
                (None, Some(d)) => w.cooldown_from_time = Some(d - d.mul_f64(f)),
                _ => {
                    return usage("--cooldown as a fraction needs --max-requests or --max-seconds");
                }
            },
        }
    }
    if let (Some(a), Some(b)) = (w.warmup_slots, w.cooldown_from_slot)
        && a >= b
    {
        return usage("--warmup and --cooldown leave no measured requests");
    }
    if let (Some(a), Some(b)) = (w.warmup_time, w.cooldown_from_time)
        && a >= b
    {
        return usage("--warmup and --cooldown leave no measured time");
    }
    if let (Some(n), Some(max)) = (w.warmup_slots, requests)
        && n >= max
    {
        return usage(format!(
            "--warmup {n} requests leaves none of --max-requests {max} measured"
        ));
    }
    if let (Some(d), Some(max)) = (w.warmup_time, seconds)
        && d >= max
    {
        return usage("--warmup must be shorter than --max-seconds");
    }
    Ok(w)
}

/// How requests are made, from `benchmark run`'s flags alone (also the sweep's own
/// requests to a server: readiness, cache resets).
pub fn resolve_backend(args: &RunArgs) -> Result<BackendPlan, UsageError> {
    let api_key = args
        .target
        .api_key
        .clone()
        .or_else(|| std::env::var("OPENAI_API_KEY").ok())
        .filter(|k| !k.is_empty())
        .map(Secret::new);
    // A key that cannot be a header value (a line break, a control character) would
    // fail every request as "builder error": say so before anything is sent, without
    // the key.
    if let Some(key) = &api_key
        && reqwest::header::HeaderValue::from_str(key.expose()).is_err()
    {
        let origin = super::origin::api_key(key.expose());
        return usage(format!(
            "the API key from {}: not a valid HTTP header value (it holds a line break or another control character); fix it or {}",
            origin.describe(),
            origin.how_to_drop()
        ));
    }
    if args.target.http2_streams > 1 && !args.target.http2 {
        return usage(format!(
            "--http2-streams {}: shares HTTP/2 connections among requests, and this run speaks HTTP/1.1 (one request at a time per connection); add --http2 or drop --http2-streams",
            args.target.http2_streams
        ));
    }
    let mut plan = BackendPlan {
        request_format: request_format(args.target.request_format),
        stream: args.target.stream,
        api_key,
        headers: Vec::new(),
        params: Vec::new(),
        extra_body: serde_json::Map::new(),
        http2: args.target.http2,
        http2_streams: args.target.http2_streams,
        request_timeout: args.target.request_timeout,
        connect_timeout: args.target.connect_timeout,
        tls: llmsurge_proto::http::TlsConfig {
            ca_cert: args.target.ca_cert.clone(),
            insecure: args.target.insecure,
            client_cert: args.target.client_cert.clone(),
            client_key: args.target.client_key.clone(),
        },
        ttft_timeout: args.target.ttft_timeout,
        idle_timeout: args.target.idle_timeout,
        ignore_eos: args.data.ignore_eos,
        min_tokens: args.data.min_tokens,
        request_id_header: args.target.request_id_header,
        no_traceparent: args.target.no_traceparent,
        ignore_eos_explicit: args.data.ignore_eos_explicit,
        affinity: super::affinity::resolve(&args.target)?,
    };
    // A flag that would have no effect is an error, not a shrug.
    if plan.min_tokens
        && !matches!(
            plan.request_format,
            RequestFormat::Chat | RequestFormat::Completions
        )
    {
        return usage(format!(
            "--min-tokens true: vLLM's min_tokens is a field of chat and completions requests; --request-format {} has none (drop --min-tokens)",
            plan.request_format.name()
        ));
    }
    // Embeddings and ranking generate no output: no length to fall short of.
    if args.client.max_short_output_share.is_some() && !plan.request_format.generates() {
        return usage(format!(
            "--max-short-output-share: --request-format {} generates no output, so no output length can fall short (drop --max-short-output-share)",
            plan.request_format.name()
        ));
    }
    // Embeddings and ranking answer in one body: `--stream` (on by default) does not
    // apply to them, and an explicit `--stream true` would silently measure something
    // else than asked.
    if !plan.request_format.generates() {
        if plan.stream && args.target.stream_explicit {
            return usage(format!(
                "--stream true: --request-format {} answers in one body and never streams; drop --stream or pass --stream false",
                plan.request_format.name()
            ));
        }
        plan.stream = false;
    }
    if let Some(raw) = &args.target.backend_kwargs {
        apply_backend_kwargs(&mut plan, raw)?;
    }
    super::affinity::check_headers(&plan.affinity, &plan.headers)?;
    // A missing or malformed file is a usage error now, not a failure in every worker.
    plan.tls.check().map_err(|e| UsageError(e.to_string()))?;
    Ok(plan)
}

/// `headers.NAME` of `--backend-kwargs` (`raw`) against the API key `key`: where each
/// came from (a key exported in a shell profile is easily forgotten) and how to drop it.
fn key_conflict(name: &str, key: &str, raw: &str) -> String {
    let origin = super::origin::api_key(key);
    let headers = super::origin::of("--backend-kwargs", "LLMSURGE_BACKEND_KWARGS", raw);
    let from = match headers {
        super::origin::Origin::Flag(_) => String::new(),
        other => format!(" from {}", other.describe()),
    };
    format!(
        "headers.{name}{from} conflicts with the API key from {}; give one: {}, or drop the header",
        origin.describe(),
        origin.how_to_drop()
    )
}

fn apply_backend_kwargs(plan: &mut BackendPlan, raw: &str) -> Result<(), UsageError> {
    let err = |m: String| UsageError(format!("--backend-kwargs: {m}"));
    let value: serde_json::Value =
        serde_json::from_str(raw).map_err(|e| err(format!("not valid JSON ({e})")))?;
    let serde_json::Value::Object(map) = value else {
        return Err(err("expected a JSON object".into()));
    };
    for (key, value) in map {
        match key.as_str() {
            "extra_body" => match value {
                serde_json::Value::Object(body) => plan.extra_body = body,
                _ => return Err(err("extra_body must be an object".into())),
            },
            "headers" | "params" => {
                let serde_json::Value::Object(m) = value else {
                    return Err(err(format!("{key} must be an object")));
                };
                let mut pairs = Vec::new();
                for (k, v) in m {
                    let v = match v {
                        serde_json::Value::String(s) => s,
                        serde_json::Value::Number(n) => n.to_string(),
                        serde_json::Value::Bool(b) => b.to_string(),
                        _ => {
                            return Err(err(format!(
                                "{key}.{k} must be a string, number or boolean"
                            )));
                        }
                    };
                    pairs.push((k, v));
                }
                if key == "headers" {
                    for (k, v) in &pairs {
                        // Checked now, as the --api-key is: the value is not shown (it
                        // may be a key).
                        if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                            return Err(err(format!(
                                "headers: {k:?} is not a valid HTTP header name"
                            )));
                        }
                        if reqwest::header::HeaderValue::from_str(v).is_err() {
                            return Err(err(format!(
                                "headers.{k}: not a valid HTTP header value (it holds a line break or another control character)"
                            )));
                        }
                        if let Some(key) = &plan.api_key
                            && k.eq_ignore_ascii_case("authorization")
                        {
                            return Err(err(key_conflict(k, key.expose(), raw)));
                        }
                    }
                    plan.headers = pairs;
                } else {
                    plan.params = pairs;
                }
            }
            other => {
                return Err(err(format!(
                    "unknown key {other:?} (expected extra_body, headers, params)"
                )));
            }
        }
    }
    Ok(())
}
