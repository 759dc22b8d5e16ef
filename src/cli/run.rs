//! `llmsurge benchmark run`: resolve, check the target, run the profile, write reports.

use super::args::RunArgs;
use super::resolve::{ProfilePlan, RunPlan, UsageError, measure_window, resolve};
use crate::exit_codes;
use crate::report::{RequestLog, RunInfo, RunReporter, TargetInfo, unix_now};
use crate::target::{ResolvedTarget, resolve_target};
use llmsurge_coordinator::knee::KneeProfile;
use llmsurge_coordinator::profiles::CapacityOutcome;
use llmsurge_coordinator::server_metrics::fingerprint::{self, ServerFingerprint};
use llmsurge_coordinator::{
    BenchmarkPlan, BenchmarkResult, CapacityProfile, CoordinatorError, FixedProfile, PlanTemplate,
    Profile, StopReason, Strategy, SweepProfile, WorkerCommand, run_profile,
};
use llmsurge_proto::{BackendConfig, DataSpec, Schedule, WorkerConfig};
use std::time::Duration;

/// How often workers send their batches.
const FLUSH_INTERVAL: Duration = Duration::from_millis(20);

/// Runs `benchmark run`; returns the exit code.
pub fn benchmark_run(args: &RunArgs) -> i32 {
    let plan = match resolve(args) {
        Ok(p) => p,
        Err(e) => return super::usage_error(&e.0),
    };
    // From here on no text this process writes carries the run's secrets, whatever a
    // server echoes back.
    let base_url = match &plan.target {
        super::resolve::TargetSpec::Url(url) => url.as_str(),
        super::resolve::TargetSpec::Mock => "",
    };
    llmsurge_proto::config::register_secrets(
        plan.backend.api_key.as_ref(),
        &plan.backend.headers,
        &plan.backend.params,
        base_url,
        &plan.redaction,
    );
    // Body fields named like credentials (`extra_body.api_key`) are secrets too.
    let mut body = serde_json::Value::Object(plan.backend.extra_body.clone());
    for value in llmsurge_proto::redact::json_credentials(&mut body, &plan.redaction) {
        llmsurge_proto::redact::register_secret(&value);
    }
    // Data errors (files, rows, tokenizers) are input errors: found before anything starts.
    let data_started = std::time::Instant::now();
    let mut data = match crate::data::prepare(
        &plan.data,
        plan.limits.max_seconds,
        plan.limits.max_requests,
        !plan.dry_run,
    ) {
        Ok(d) => d,
        Err(e) => return super::usage_error(&e),
    };
    // Start-up phases at debug level (LLMSURGE_LOG=debug), for docs/performance.md.
    tracing::debug!(
        ms = data_started.elapsed().as_secs_f64() * 1e3,
        tokenizer = %data.summary.tokenizer,
        "data prepared"
    );
    // Agent traces at a rate repeat when a timed run needs more than the file holds.
    if let (
        DataSpec::AgentTrace(spec),
        Some(summary),
        crate::data::DataSource::AgentTrace { path },
    ) = (
        &mut data.spec,
        &mut data.summary.agent_traces,
        &plan.data.source,
    ) {
        let starts = match &plan.profile_plan {
            ProfilePlan::Fixed { strategies } => strategies.iter().find_map(|s| match s {
                Strategy::Replay {
                    starts_per_s,
                    time_scale,
                    ..
                } => Some((*starts_per_s, *time_scale)),
                _ => None,
            }),
            _ => None,
        };
        let line = if matches!(plan.profile_plan, ProfilePlan::Capacity { .. }) {
            Some(crate::data::agent_trace::replay::plan_users(
                spec, summary, path,
            ))
        } else {
            crate::data::agent_trace::replay::plan_passes(
                spec,
                summary,
                path,
                starts.unwrap_or((None, 1.0)),
                plan.limits.max_seconds,
                plan.limits.max_requests,
            )
        };
        if let Some(line) = line {
            crate::stdout::eprintln(&line);
        }
        data.summary.oversample = summary.repeated;
    }
    // A finite dataset is split like --max-requests: every shard needs a row.
    if let Some(len) = data.spec.dataset_len()
        && plan.shard.is_split()
        && plan.shard.share(len) == 0
    {
        return super::usage_error(&format!(
            "--shard {}/{}: the dataset's {len} rows leave this shard 0 requests (each of {} shards needs at least one)",
            plan.shard.index + 1,
            plan.shard.count,
            plan.shard.count
        ));
    }
    if plan.dry_run {
        return match serde_json::to_string_pretty(&plan_json(&plan, &data)) {
            Ok(s) => {
                crate::stdout::println(&s);
                exit_codes::OK
            }
            Err(e) => super::usage_error(&e.to_string()),
        };
    }
    // Found before any load, not after an hour of it: every directory a report file goes
    // to can take files.
    if let Err(e) = check_output_dirs(&plan) {
        return super::usage_error(&e);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return exit_codes::RUN_FAILED;
        }
    };
    runtime.block_on(run(plan, data))
}

/// Checks that each directory the plan's report files go to (`--output-dir`, and any
/// folder an output's own path names) exists or can be made, and takes a new file.
fn check_output_dirs(plan: &RunPlan) -> Result<(), String> {
    let mut dirs: Vec<std::path::PathBuf> = Vec::new();
    for output in &plan.outputs {
        let dir = match output.path() {
            Some(file) => plan
                .output_dir
                .join(file)
                .parent()
                .map_or_else(|| plan.output_dir.clone(), |p| p.to_path_buf()),
            // Charts and llm-d reports are written into --output-dir itself.
            None if matches!(
                output,
                crate::report::Output::Png
                    | crate::report::Output::Svg
                    | crate::report::Output::Llmd
            ) =>
            {
                plan.output_dir.clone()
            }
            None => continue,
        };
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    for dir in dirs {
        crate::safe_file::check_writable_dir(&dir).map_err(|e| format!("--output-dir: {e}"))?;
    }
    Ok(())
}

/// `--outputs otlp`: its file, created now so a bad path fails before any load.
fn otlp_export(
    plan: &RunPlan,
    model: &str,
    data: &crate::data::PreparedData,
) -> Result<Option<crate::report::otlp::OtlpExport>, String> {
    let Some(file) = plan.outputs.iter().find_map(|o| match o {
        crate::report::Output::Otlp(p) => Some(plan.output_dir.join(p)),
        _ => None,
    }) else {
        return Ok(None);
    };
    let context = crate::report::otlp::OtlpContext {
        format: plan.backend.request_format,
        model: model.to_string(),
        models: plan
            .data
            .lora
            .iter()
            .flat_map(|l| l.names())
            .map(str::to_string)
            .collect(),
        agent: data.summary.agent_traces.as_ref().map(|a| a.names.clone()),
    };
    crate::report::otlp::OtlpExport::create(&file, context, llmsurge_proto::ClockAnchor::now())
        .map(Some)
        .map_err(|e| format!("--outputs otlp: cannot create {}: {e}", file.display()))
}

/// The resolved plan as JSON, with what preparing the data found (the tokenizer used,
/// rows) under `data.resolved`, and with `--repeat`, each run's seed (`run_seeds`).
fn plan_json(plan: &RunPlan, data: &crate::data::PreparedData) -> serde_json::Value {
    let mut v = plan.public_json();
    if plan.repeat > 1
        && let Some(o) = v.as_object_mut()
    {
        o.insert(
            "run_seeds".into(),
            super::seed::repeat_seeds(plan.seed, plan.repeat).into(),
        );
    }
    if let Some(d) = v.get_mut("data").and_then(|d| d.as_object_mut()) {
        d.insert(
            "resolved".into(),
            serde_json::to_value(&data.summary).unwrap_or_default(),
        );
    }
    v
}

async fn run(mut plan: RunPlan, data: crate::data::PreparedData) -> i32 {
    // A replay's rate is the trace's, known only now: it sizes the worker group.
    if let (ProfilePlan::Fixed { strategies }, Some(trace)) =
        (&mut plan.profile_plan, &data.summary.trace)
    {
        for s in strategies.iter_mut() {
            if let Strategy::Replay {
                time_scale, rate, ..
            } = s
            {
                *rate = trace.mean_rate.map_or(0.0, |r| r / *time_scale);
            }
        }
    }
    // Agent traces: calls per second, from the traces' starts.
    if let (ProfilePlan::Fixed { strategies }, Some(agent)) =
        (&mut plan.profile_plan, &data.summary.agent_traces)
    {
        let calls_per_trace = agent.calls as f64 / agent.traces.max(1) as f64;
        for s in strategies.iter_mut() {
            if let Strategy::Replay {
                time_scale,
                rate,
                starts_per_s,
            } = s
            {
                let starts = match *starts_per_s {
                    Some(r) => r,
                    None if agent.span_s > 0.0 => {
                        (agent.traces.saturating_sub(1)) as f64 / agent.span_s / *time_scale
                    }
                    None => 0.0,
                };
                *rate = starts * calls_per_trace;
            }
        }
    }
    let started = unix_now();
    if plan.backend.tls.insecure {
        // Never silent: the report's metadata says so too (`tls_insecure`).
        eprintln!(
            "warning: --insecure: the server's TLS certificate is not verified; anyone on the path can read and change the traffic"
        );
    }
    let phase = std::time::Instant::now();
    let lora_names: Vec<&str> = plan.data.lora.iter().flat_map(|l| l.names()).collect();
    let check = crate::target::TargetCheck {
        request_format: plan.backend.request_format,
        api_key: plan.backend.api_key.as_ref(),
        headers: &plan.backend.headers,
        params: &plan.backend.params,
        health: &plan.health_path,
        connect_timeout: plan.backend.connect_timeout,
        tls: &plan.backend.tls,
        http2: plan.backend.http2,
        flags_where: None,
    };
    let target = match resolve_target(
        &plan.target,
        &lora_names,
        plan.model.as_deref(),
        &check,
        plan.ready_timeout,
    )
    .await
    {
        Ok(t) => t,
        Err(UsageError(message)) => return super::usage_error(&message),
    };
    let program = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot find the llmsurge executable to start workers: {e}");
            return exit_codes::RUN_FAILED;
        }
    };
    let command = WorkerCommand {
        program,
        args: vec!["__worker".into()],
    };
    tracing::debug!(ms = phase.elapsed().as_secs_f64() * 1e3, "target checked");
    let phase = std::time::Instant::now();
    let mut template = match plan_template(&plan, &target, &data.spec) {
        Ok(t) => t,
        Err(UsageError(message)) => return super::usage_error(&message),
    };
    template.base.agent_names = data.summary.agent_traces.as_ref().map(|a| a.names.clone());
    // Whether the target publishes metrics, asked once: the fingerprint reads the page.
    let metrics = match server_metrics(&plan, &target).await {
        Ok(m) => m,
        Err(UsageError(message)) => {
            if let Some(mock) = target.mock {
                mock.shutdown();
            }
            return super::usage_error(&message);
        }
    };
    // The server as it is before our first request (the probe is one): its counters
    // say whether it was warm.
    let fingerprint_cfg = fingerprint_config(&plan, &target, metrics.0.clone());
    let before = fingerprint::Prefetched {
        models: fingerprint::Source::Given(target.model_list.clone()),
        metrics: match &metrics.3 {
            Some(page) => fingerprint::Source::Given(page.clone()),
            None => fingerprint::Source::Skip("not read (--server-metrics off)".into()),
        },
    };
    let fingerprint = ServerFingerprint::new(fingerprint::read(&fingerprint_cfg, before).await);
    for w in &fingerprint.warnings {
        crate::stdout::eprintln(&format!("warning: {w}"));
    }
    // Before any load: the run's own body shape once, so a strict server's refusal is
    // found now; the probe is marked and counts in no benchmark.
    let probed = match crate::target::probe(
        &mut template.base.worker_template,
        plan.backend.ignore_eos_explicit,
        &plan.data.processor,
    )
    .await
    {
        Ok(p) => p,
        Err(UsageError(message)) => {
            if let Some(mock) = target.mock {
                mock.shutdown();
            }
            return super::usage_error(&message);
        }
    };
    tracing::debug!(
        ms = phase.elapsed().as_secs_f64() * 1e3,
        "probe request answered"
    );
    let mut warnings = target.warnings.clone();
    warnings.extend(probed.warnings);
    // vLLM lists its LoRA adapters in /v1/models; a name it does not list will most
    // likely be answered 404. A gateway may route names it does not list: warn only.
    let unlisted: Vec<&str> = lora_names
        .iter()
        .copied()
        .filter(|n| !target.models.iter().any(|m| m == n))
        .collect();
    if !unlisted.is_empty() && !target.models.is_empty() {
        warnings.push(format!(
            "--lora: the target does not list {} in /v1/models (it lists {}); requests naming them may fail",
            unlisted.join(", "),
            target.models.join(", ")
        ));
    }
    // Shards meet at one wall-clock instant: a clock NTP does not steer can be far off.
    if (plan.start_at.is_some() || plan.shard.is_split())
        && let Some(why) = crate::clock_sync::unsynchronised()
    {
        warnings.push(format!(
            "host clock not NTP-synchronised: {why}; --start-at and the alignment of shards are only as good as the clocks"
        ));
    }
    // Written to the terminal and the report: URLs in them redacted.
    for w in &mut warnings {
        *w = plan.redaction.text(w).into_owned();
        crate::stdout::eprintln(&format!("warning: {w}"));
    }
    plan.backend.ignore_eos = template.base.worker_template.backend.ignore_eos;
    // Created before anything runs, so a bad path fails at once and not after an hour.
    let log = match &plan.reporting.request_log {
        Some(path) => match RequestLog::create(path) {
            Ok(log) => Some(log),
            Err(e) => {
                return super::usage_error(&format!(
                    "--request-log: cannot create {}: {e}",
                    path.display()
                ));
            }
        },
        None => None,
    };
    let otlp = match otlp_export(&plan, &target.model, &data) {
        Ok(o) => o,
        Err(message) => return super::usage_error(&message),
    };
    // Noted after the probe and every usage check, so a usage error stays one line.
    let (scrape, profiler, note, _) = metrics;
    template.base.server_metrics = scrape;
    template.base.profile_server = profiler;
    template.base.cache_reset = cache_reset(&plan, &target);
    template.base.gpu_metrics = plan.server_metrics.gpu_metrics.as_deref().map(|g| {
        use llmsurge_coordinator::gpu::{GpuConfig, GpuSource};
        GpuConfig {
            source: match g {
                "nvidia-smi" => GpuSource::NvidiaSmi,
                url => GpuSource::Dcgm(url.to_string()),
            },
            interval: plan.server_metrics.interval,
        }
    });
    // Kept in the report's target warnings, so a reader knows why there are none.
    if let Some(note) = note {
        let note = plan.redaction.text(&note).into_owned();
        crate::stdout::eprintln(&note);
        warnings.push(note.trim_start_matches("warning: ").to_string());
    }
    tracing::debug!(
        ms = phase.elapsed().as_secs_f64() * 1e3,
        "probe and server metrics checked"
    );
    let info = RunInfo {
        args: plan_json(&plan, &data),
        target: TargetInfo {
            base_url: plan.redaction.url(&target.base_url),
            model: target.model.clone(),
            mock: target.mock.is_some(),
            warnings,
        },
        started,
        shard: plan.shard.is_split().then_some(plan.shard),
        start_at: plan.start_at,
        tls_insecure: plan.backend.tls.insecure,
        planned: ChosenProfile::planned(&plan).unwrap_or(0) * plan.repeat as usize,
        seed: plan.seed,
        models: lora_names.iter().map(|n| n.to_string()).collect(),
        request_id: template.base.worker_template.backend.request_id.clone(),
    };
    let mut profile = ChosenProfile::new(&plan, template.clone());
    let mut reporter = RunReporter::new(
        info,
        plan.outputs.clone(),
        plan.output_dir.clone(),
        &plan.reporting,
        log,
    );
    if let Some(o) = otlp {
        reporter.set_otlp(o);
    }
    reporter.set_server_fingerprint(Some(fingerprint.clone()));
    let outcome = run_repeats(&plan, &template, &command, &mut reporter, &mut profile).await;
    // The server again after the load: a restart or a change during the run is said.
    let mut fingerprint = fingerprint;
    let known = fingerprint.warnings.len();
    // The model list was read before; the rest again, `/metrics` where the run scraped it.
    let after = fingerprint::Prefetched {
        models: fingerprint::Source::Skip("read once, before the load".into()),
        metrics: match &fingerprint_cfg.metrics {
            Some(_) => fingerprint::Source::Fetch,
            None => fingerprint::Source::Skip("not scraped by this run".into()),
        },
    };
    fingerprint.finish(fingerprint::read(&fingerprint_cfg, after).await);
    for w in &fingerprint.warnings[known..] {
        crate::stdout::eprintln(&format!("warning: {w}"));
    }
    reporter.set_server_fingerprint(Some(fingerprint));
    if let Some(mock) = target.mock {
        mock.shutdown();
    }
    let outcome = match outcome {
        Ok(o) => o,
        Err(e @ (CoordinatorError::WorkerSetup { .. } | CoordinatorError::FdLimit(_))) => {
            return super::usage_error(&e.to_string());
        }
        Err(e) => {
            crate::stdout::eprintln(&format!("error: {e}"));
            return exit_codes::RUN_FAILED;
        }
    };
    if outcome.stopped_by_lost_server {
        crate::stdout::eprintln(
            "note: the server was lost (see `invalid run` below), so the benchmarks and --repeat runs after that one were not run: they would measure only its absence",
        );
    }
    let capacity = match &profile {
        ChosenProfile::Capacity(p) => Some(p.outcome_after(&outcome.benchmarks)),
        _ => None,
    };
    // A search ends itself at a lost server, so the note above is not said; its answer
    // is said here, whatever --outputs writes, and so is one that ended where the server
    // stopped answering short of the lost rule.
    let lost = outcome
        .benchmarks
        .last()
        .is_some_and(|b| b.server_lost.is_some());
    if let Some(c) = &capacity
        && (lost || c.stopped_answering())
    {
        let answers = if c.tiers.is_empty() {
            c.conclusion.clone()
        } else {
            let tiers: Vec<String> = c
                .tiers
                .iter()
                .map(|t| format!("{}: {}", t.name, t.conclusion))
                .collect();
            tiers.join("; ")
        };
        crate::stdout::eprintln(&if lost {
            format!(
                "note: the server was lost (see `invalid run` below), so the capacity search ended there: {answers}"
            )
        } else {
            format!("note: the capacity search ended there: {answers}")
        });
    }
    reporter.set_capacity(capacity.clone());
    reporter.set_invalid_run(invalid_run(&outcome.benchmarks));
    reporter.finish(&outcome.benchmarks, outcome.interrupted);
    if reporter.write_failed() {
        return exit_codes::RUN_FAILED;
    }
    exit_code(&outcome.benchmarks, outcome.interrupted, capacity.as_ref())
}

/// Runs the plan `--repeat` times (once by default), pausing `--repeat-cooldown` between
/// runs; each run gets a fresh profile (a sweep derives its rates anew), its own seed
/// ([`super::seed::repeat_seed`]: its prompts, arrivals, `--cancel` and LoRA picks are
/// its own, so no run answers another's from a prefix cache) and its own request-id
/// tag, and its benchmarks are marked with their run. A Ctrl-C ends the repeats.
/// `profile` is the first run's (and, for a capacity search, the only one).
async fn run_repeats(
    plan: &RunPlan,
    template: &PlanTemplate,
    command: &WorkerCommand,
    reporter: &mut RunReporter,
    profile: &mut ChosenProfile,
) -> Result<llmsurge_coordinator::RunOutcome, CoordinatorError> {
    if plan.repeat > 1 {
        let tag = template.base.worker_template.backend.request_id.clone();
        reporter.start_run(0, tag);
    }
    let mut outcome =
        run_profile(command, profile.as_profile(), reporter, plan.start_at, None).await?;
    if plan.repeat < 2 {
        return Ok(outcome);
    }
    for b in &mut outcome.benchmarks {
        b.run = Some(0);
    }
    for run in 1..plan.repeat {
        if outcome.interrupted {
            break;
        }
        // A run that lost the server ends the repeats too: the later runs would measure
        // only its absence.
        if outcome
            .benchmarks
            .last()
            .is_some_and(|b| b.server_lost.is_some())
        {
            outcome.stopped_by_lost_server = true;
            break;
        }
        if let Some(pause) = plan.repeat_cooldown.filter(|p| !p.is_zero()) {
            let mut interrupts = llmsurge_coordinator::interrupts::Interrupts::install()?;
            // Said once the handler is in place, so a Ctrl-C after it is never lost.
            llmsurge_coordinator::RunObserver::notice(
                reporter,
                &format!(
                    "repeat: run {run} of {} done; run {} starts in {}s (Ctrl-C stops the repeats)",
                    plan.repeat,
                    run + 1,
                    pause.as_secs_f64()
                ),
            );
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = interrupts.next() => {
                    outcome.interrupted = true;
                    break;
                }
            }
        }
        let mut template = template.clone();
        // A later run's first benchmark follows the previous run's last one.
        if let Some(reset) = &mut template.base.cache_reset {
            reset.before_first = true;
        }
        // Every random stream of the worker config (and so of every benchmark, which
        // reseeds from it) follows this run's seed, the one `args.run_seeds` records.
        template
            .base
            .worker_template
            .reseed(super::seed::REPEAT_STREAM, u64::from(run));
        let backend = &mut template.base.worker_template.backend;
        if backend.request_id.is_some() {
            backend.request_id = Some(llmsurge_proto::new_run_tag());
        }
        reporter.start_run(run, backend.request_id.clone());
        let mut next = ChosenProfile::new(plan, template);
        let answered = outcome.benchmarks.last().and_then(|b| b.answered);
        let more = run_profile(command, next.as_profile(), reporter, None, answered).await?;
        outcome.interrupted |= more.interrupted;
        outcome.stopped_by_lost_server |= more.stopped_by_lost_server;
        outcome
            .benchmarks
            .extend(more.benchmarks.into_iter().map(|mut b| {
                b.run = Some(run);
                b
            }));
    }
    Ok(outcome)
}

/// How the server's fingerprint is read: the target's own paths with the run's
/// credentials and query parameters, and its metrics where the run scrapes them
/// (`metrics`: the run's own scrape configuration).
fn fingerprint_config(
    plan: &RunPlan,
    target: &ResolvedTarget,
    metrics: Option<llmsurge_coordinator::server_metrics::ScrapeConfig>,
) -> fingerprint::ReadConfig {
    let headers = target_headers(plan, target);
    let base = target.base_url.clone();
    let params = plan.backend.params.clone();
    fingerprint::ReadConfig {
        url_of: Box::new(move |path| crate::target::check_url(&base, path, &params)),
        headers,
        model: target.model.clone(),
        metrics,
        tls: plan.backend.tls.clone(),
        http2: plan.backend.http2,
        timeout: fingerprint::read::TIMEOUT,
    }
}

/// Bound on each `--profile-server` call: stopping a profiler writes its trace.
const PROFILER_TIMEOUT: Duration = Duration::from_secs(60);

/// The target's credentials and headers, for requests to its own origin: the same
/// builder as the benchmark's requests ([`llmsurge_proto::credentials`]).
fn target_headers(
    plan: &RunPlan,
    target: &ResolvedTarget,
) -> Vec<(String, llmsurge_proto::Secret)> {
    llmsurge_proto::credentials::target_headers(
        plan.backend.request_format,
        plan.backend.api_key.as_ref(),
        &plan.backend.headers,
        &target.base_url,
    )
}

/// What every benchmark scrapes and profiles, and the line to print about it. The
/// target's own `/metrics` is scraped when it answers now; when it does not, one line
/// says so and the run goes on without. An explicit URL that does not answer yet is a
/// warning, and is scraped anyway.
async fn server_metrics(
    plan: &RunPlan,
    target: &ResolvedTarget,
) -> Result<
    (
        Option<llmsurge_coordinator::server_metrics::ScrapeConfig>,
        Option<llmsurge_coordinator::server_metrics::ProfilerConfig>,
        Option<String>,
        Option<Result<String, String>>,
    ),
    UsageError,
> {
    use super::resolve::MetricsSource;
    use llmsurge_coordinator::server_metrics::{ProfilerConfig, ScrapeConfig, probe};
    let m = &plan.server_metrics;
    let headers = target_headers(plan, target);
    let profiler = m.profile_server.then(|| ProfilerConfig {
        // The origin only: no path, user, password or query to repeat in messages.
        origin: reqwest::Url::parse(&target.base_url).map_or_else(
            |_| target.base_url.clone(),
            |u| u.origin().ascii_serialization(),
        ),
        headers: headers.clone(),
        timeout: PROFILER_TIMEOUT,
        tls: plan.backend.tls.clone(),
        http2: plan.backend.http2,
    });
    let (url, explicit) = match &m.source {
        MetricsSource::Off => return Ok((None, profiler, None, None)),
        // As the target check asks it: the run's query parameters, and no user and
        // password in the URL (they would become a Basic header replacing the API key).
        MetricsSource::Target => (
            crate::target::check_url(&target.base_url, "/metrics", &plan.backend.params),
            false,
        ),
        MetricsSource::Url(url) => (url.clone(), true),
    };
    // Validated when resolved: the regex compiles.
    let include = m
        .include
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .map_err(|e| UsageError(format!("--server-metrics-include: {e}")))?;
    let mut cfg = ScrapeConfig::new(&url, m.interval, include, &target.base_url, &headers)
        .map_err(|e| UsageError(format!("--server-metrics: {e}")))?;
    cfg.redaction = plan.redaction.clone();
    cfg.tls = plan.backend.tls.clone();
    // The target itself speaks what the run speaks; another host's exporter, HTTP/1.1.
    cfg.http2 = plan.backend.http2
        && reqwest::Url::parse(&cfg.url)
            .ok()
            .zip(reqwest::Url::parse(&target.base_url).ok())
            .is_some_and(|(a, b)| a.origin() == b.origin());
    let shown = plan.redaction.url(&cfg.url);
    let (note, page) = match probe(&cfg).await {
        Ok(page) => (None, Ok(page)),
        Err(why) if !explicit => {
            let note = format!("no server metrics at {shown} ({why})");
            return Ok((None, profiler, Some(note), Some(Err(why.message))));
        }
        Err(why) => (
            Some(format!(
                "warning: --server-metrics {shown} did not answer at run start ({why}); scraping it anyway"
            )),
            Err(why.message.clone()),
        ),
    };
    Ok((Some(cfg), profiler, note, Some(page)))
}

/// The exit code of a finished run (see `exit_codes`), by precedence: interrupted, run
/// failed, invalid, a failed gate, an inconclusive one, ok. A capacity search judges the
/// SLO by its answer (failing probes are how it searches): none found is a failed gate,
/// or an inconclusive one when the search ended on a probe that could not decide; other
/// profiles by every benchmark: any failed check fails the gate, else any inconclusive
/// one makes the run inconclusive.
pub fn exit_code(
    benchmarks: &[BenchmarkResult],
    interrupted: bool,
    capacity: Option<&CapacityOutcome>,
) -> i32 {
    if interrupted {
        return exit_codes::INTERRUPTED;
    }
    // A worker death that stopped the run (`--on-worker-failure stop`) is a failed run.
    if benchmarks
        .iter()
        .any(|b| matches!(b.stop_reason, Some(StopReason::WorkerFailure { .. })))
    {
        return exit_codes::RUN_FAILED;
    }
    let invalid = invalid_run(benchmarks);
    if !invalid.is_empty() {
        for why in &invalid {
            // A reason may quote the server (the error that lost it): one inert line.
            crate::stdout::eprintln(&format!(
                "invalid run: {}",
                llmsurge_proto::inert::terminal(why)
            ));
        }
        return exit_codes::INVALID_RUN;
    }
    let labels: Vec<&str> = match capacity {
        // Each tier is a gate: one with no answer fails the run, one whose search ended
        // undecided makes it inconclusive.
        Some(c) if !c.tiers.is_empty() => c
            .tiers
            .iter()
            .filter(|t| t.value.is_none())
            .map(|t| match t.probes.last().is_some_and(|p| p.inconclusive) {
                true => "INCONCLUSIVE",
                false => "FAIL",
            })
            .collect(),
        Some(c) if c.rate.is_some() => vec![],
        Some(c) if c.probes.last().is_some_and(|p| p.inconclusive) => vec!["INCONCLUSIVE"],
        Some(_) => vec!["FAIL"],
        None => benchmarks
            .iter()
            .filter_map(|b| b.slo.as_ref().map(|v| v.label()))
            .collect(),
    };
    if labels.contains(&"FAIL") {
        exit_codes::GATE_FAILED
    } else if labels.contains(&"INCONCLUSIVE") {
        exit_codes::INCONCLUSIVE
    } else {
        exit_codes::OK
    }
}

/// Why a finished run is invalid (exit 4), one line per rule that fired with its
/// figures: no benchmark ran, or a benchmark's own verdicts
/// ([`llmsurge_coordinator::validity::invalid_reasons`]: no request succeeded, the
/// client was the bottleneck, the server was lost mid-run). Empty for a valid run.
pub fn invalid_run(benchmarks: &[BenchmarkResult]) -> Vec<String> {
    if benchmarks.is_empty() {
        return vec!["no benchmark ran".into()];
    }
    benchmarks
        .iter()
        .flat_map(llmsurge_coordinator::validity::invalid_reasons)
        .collect()
}

fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

fn plan_template(
    plan: &RunPlan,
    target: &ResolvedTarget,
    data: &DataSpec,
) -> Result<PlanTemplate, UsageError> {
    let b = &plan.backend;
    super::affinity::check_data(&b.affinity, data)?;
    let worker_template = WorkerConfig {
        worker_id: 0,
        worker_count: 1,
        seed: plan.seed,
        backend: BackendConfig {
            base_url: target.base_url.clone(),
            request_format: b.request_format,
            model: target.model.clone(),
            stream: b.stream,
            api_key: b.api_key.clone(),
            headers: b.headers.clone(),
            params: b.params.clone(),
            extra_body: b.extra_body.clone(),
            http2: b.http2,
            http2_streams: b.http2_streams,
            request_timeout: b.request_timeout,
            connect_timeout: b.connect_timeout,
            tls: b.tls.clone(),
            ttft_timeout: b.ttft_timeout,
            idle_timeout: b.idle_timeout,
            ignore_eos: b.ignore_eos,
            traceparent: !b.no_traceparent,
            min_tokens: b.min_tokens,
            session_header: data.session_header().map(str::to_string),
            tools: data.tools(),
            // The user's own x-request-id replaces ours: none to log then.
            request_id: (b.request_id_header
                && !b
                    .headers
                    .iter()
                    .any(|(name, _)| name.eq_ignore_ascii_case(llmsurge_proto::REQUEST_ID_HEADER)))
            .then(llmsurge_proto::new_run_tag),
            affinity: b.affinity.clone(),
        },
        schedule: Schedule::Streams {
            streams: 1,
            rampup: Duration::ZERO,
        },
        data: data.clone(),
        window: Default::default(),
        flush_interval: FLUSH_INTERVAL,
        shard: plan.shard,
        lora: plan.data.lora.clone(),
        behaviour: plan.behaviour.clone(),
    };
    let dataset_len = data.dataset_len();
    let base = BenchmarkPlan {
        index: 0,
        strategy: Strategy::Synchronous,
        settings: plan.settings,
        limits: plan.limits,
        workers: 1,
        max_concurrency: plan.max_concurrency,
        dataset_len,
        window: measure_window(plan.warmup, plan.cooldown, &plan.limits)?,
        worker_template,
        drain_timeout: plan.drain_timeout,
        worker_timeout: plan.worker_timeout,
        on_worker_failure: plan.on_worker_failure,
        dispatch_lag_threshold: plan.max_dispatch_lag,
        max_short_output_share: plan.max_short_output_share,
        slo: plan.slo.clone(),
        goodput: plan.goodput,
        saturation: plan.saturation,
        shard: plan.shard,
        server_metrics: None,
        profile_server: None,
        cache_reset: None,
        gpu_metrics: None,
        precision: plan.precision.clone(),
        agent_names: None,
    };
    Ok(PlanTemplate {
        base,
        workers: plan.workers,
        cores: cores(),
    })
}

/// The profile of a run, kept concrete so its summary can be read afterwards.
enum ChosenProfile {
    Fixed(FixedProfile),
    Sweep(SweepProfile),
    /// Boxed: it holds a sweep and a template of its own.
    Knee(Box<KneeProfile>),
    Capacity(CapacityProfile),
}

impl ChosenProfile {
    fn new(plan: &RunPlan, template: PlanTemplate) -> Self {
        match &plan.profile_plan {
            ProfilePlan::Fixed { strategies } => {
                Self::Fixed(FixedProfile::new(template, strategies.clone()))
            }
            ProfilePlan::Sweep {
                benchmarks,
                arrivals,
                throughput_concurrency,
            } => Self::Sweep(SweepProfile::new(
                template,
                *benchmarks,
                *arrivals,
                *throughput_concurrency,
            )),
            ProfilePlan::Knee {
                benchmarks,
                arrivals,
                throughput_concurrency,
            } => Self::Knee(Box::new(KneeProfile::new(
                template,
                *benchmarks,
                *arrivals,
                *throughput_concurrency,
            ))),
            ProfilePlan::Capacity {
                precision,
                throughput_concurrency,
                variable,
                tiers,
            } => Self::Capacity(CapacityProfile::tiered(
                template,
                plan.slo.clone().unwrap_or_default(),
                tiers.clone(),
                *variable,
                *precision,
                *throughput_concurrency,
            )),
        }
    }

    fn as_profile(&mut self) -> &mut dyn Profile {
        match self {
            Self::Fixed(p) => p,
            Self::Sweep(p) => p,
            Self::Knee(p) => p.as_mut(),
            Self::Capacity(p) => p,
        }
    }

    /// Benchmarks the profile will run, when known in advance.
    fn planned(plan: &RunPlan) -> Option<usize> {
        match &plan.profile_plan {
            ProfilePlan::Fixed { strategies } => Some(strategies.len()),
            ProfilePlan::Sweep { benchmarks, .. } => Some(*benchmarks),
            ProfilePlan::Knee { .. } | ProfilePlan::Capacity { .. } => None,
        }
    }
}

/// `--reset-cache` as the coordinator takes it: `auto` by default for the sweep and
/// capacity profiles (their benchmarks measure one server at rising loads, and a cache
/// warmed by the previous one would flatter the next), none by default elsewhere.
fn cache_reset(
    plan: &RunPlan,
    target: &ResolvedTarget,
) -> Option<llmsurge_coordinator::cache_reset::CacheResetConfig> {
    use llmsurge_coordinator::cache_reset::{CacheResetConfig, ResetMode};
    let adaptive = matches!(
        plan.profile_plan,
        ProfilePlan::Sweep { .. } | ProfilePlan::Knee { .. } | ProfilePlan::Capacity { .. }
    );
    let mode = match plan.server_metrics.reset_cache.as_deref() {
        Some("none") => return None,
        Some("auto") => ResetMode::Auto,
        Some(path) => ResetMode::Path(path.to_string()),
        None if adaptive => ResetMode::Auto,
        None => return None,
    };
    Some(CacheResetConfig {
        mode,
        // The origin only: the reset endpoints are at the server's root.
        origin: reqwest::Url::parse(&target.base_url).map_or_else(
            |_| target.base_url.clone(),
            |u| u.origin().ascii_serialization(),
        ),
        headers: target_headers(plan, target),
        timeout: PROFILER_TIMEOUT,
        tls: plan.backend.tls.clone(),
        http2: plan.backend.http2,
        before_first: false,
    })
}
