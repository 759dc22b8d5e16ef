//! `llmsurge benchmark run`: resolve, check the target, run the profile, write reports.

use super::args::RunArgs;
use super::resolve::{Output, RunPlan, UsageError, measure_window, resolve};
use crate::exit_codes;
use crate::report::{HostInfo, Metadata, REPORT_SCHEMA_VERSION, Report, TargetInfo, console};
use crate::target::{ResolvedTarget, resolve_target};
use llmsurge_coordinator::{
    BenchmarkPlan, BenchmarkResult, CoordinatorError, Progress, RunObserver, StopReason,
    WorkerCommand, run_profile,
};
use llmsurge_proto::{BackendConfig, DataSpec, Schedule, WorkerConfig};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often workers send their batches.
const FLUSH_INTERVAL: Duration = Duration::from_millis(20);

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Runs `benchmark run`; returns the exit code.
pub fn benchmark_run(args: &RunArgs) -> i32 {
    let plan = match resolve(args) {
        Ok(p) => p,
        Err(e) => return super::usage_error(&e.0),
    };
    // Data errors (files, rows, tokenizers) are input errors: found before anything starts.
    let data = match crate::data::prepare(
        &plan.data,
        plan.limits.max_seconds,
        plan.limits.max_requests,
        !plan.dry_run,
    ) {
        Ok(d) => d,
        Err(e) => return super::usage_error(&e),
    };
    if plan.dry_run {
        return match serde_json::to_string_pretty(&plan_json(&plan, &data)) {
            Ok(s) => {
                println!("{s}");
                exit_codes::OK
            }
            Err(e) => super::usage_error(&e.to_string()),
        };
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

/// The resolved plan as JSON, with what preparing the data found (the tokenizer used,
/// rows) under `data.resolved`.
fn plan_json(plan: &RunPlan, data: &crate::data::PreparedData) -> serde_json::Value {
    let mut v = serde_json::to_value(plan).unwrap_or_default();
    if let Some(d) = v.get_mut("data").and_then(|d| d.as_object_mut()) {
        d.insert(
            "resolved".into(),
            serde_json::to_value(&data.summary).unwrap_or_default(),
        );
    }
    v
}

async fn run(plan: RunPlan, data: crate::data::PreparedData) -> i32 {
    let started = unix_now();
    let target = match resolve_target(
        &plan.target,
        plan.model.as_deref(),
        plan.backend.api_key.as_ref(),
        plan.backend.connect_timeout,
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
    let plans = match benchmark_plans(&plan, &target, &data.spec) {
        Ok(p) => p,
        Err(UsageError(message)) => return super::usage_error(&message),
    };
    let mut reporter = RunReporter::new(&plan, &target, started, plans.len());
    reporter.report.args = plan_json(&plan, &data);
    let mut profile = plans.into_iter();
    let outcome = run_profile(&command, &mut profile, &mut reporter).await;
    if let Some(mock) = target.mock {
        mock.shutdown();
    }
    let outcome = match outcome {
        Ok(o) => o,
        Err(e @ (CoordinatorError::WorkerSetup { .. } | CoordinatorError::Plan(_))) => {
            return super::usage_error(&e.to_string());
        }
        Err(e) => {
            eprintln!("error: {e}");
            return exit_codes::RUN_FAILED;
        }
    };
    reporter.finish(&outcome.benchmarks, outcome.interrupted);
    if reporter.write_failed {
        return exit_codes::RUN_FAILED;
    }
    exit_code(&outcome.benchmarks, outcome.interrupted)
}

/// The exit code of a finished run (see `exit_codes`).
pub fn exit_code(benchmarks: &[BenchmarkResult], interrupted: bool) -> i32 {
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
    let invalid = benchmarks.is_empty()
        || benchmarks
            .iter()
            .any(|b| b.requests.completed == 0 || b.client.bottleneck);
    if invalid {
        exit_codes::INVALID_RUN
    } else {
        exit_codes::OK
    }
}

fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

fn benchmark_plans(
    plan: &RunPlan,
    target: &ResolvedTarget,
    data: &DataSpec,
) -> Result<Vec<BenchmarkPlan>, UsageError> {
    let b = &plan.backend;
    let template = WorkerConfig {
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
            request_timeout: b.request_timeout,
            connect_timeout: b.connect_timeout,
            ttft_timeout: b.ttft_timeout,
            idle_timeout: b.idle_timeout,
            ignore_eos: b.ignore_eos,
        },
        schedule: Schedule::Streams {
            streams: 1,
            rampup: Duration::ZERO,
        },
        data: data.clone(),
        window: Default::default(),
        flush_interval: FLUSH_INTERVAL,
    };
    let dataset_len = data.dataset_len();
    let window = measure_window(plan.warmup, plan.cooldown, &plan.limits)?;
    Ok(plan
        .strategies
        .iter()
        .enumerate()
        .map(|(i, strategy)| BenchmarkPlan {
            index: i as u32,
            strategy: *strategy,
            settings: plan.settings,
            limits: plan.limits,
            workers: plan
                .workers
                .unwrap_or_else(|| strategy.default_workers(cores())),
            max_concurrency: plan.max_concurrency,
            dataset_len,
            window,
            worker_template: template.clone(),
            drain_timeout: plan.drain_timeout,
            on_worker_failure: plan.on_worker_failure,
            dispatch_lag_threshold: plan.max_dispatch_lag,
        })
        .collect())
}

/// Follows a run: progress lines and notices on stderr, the JSON report rewritten after
/// every benchmark, the console summary at the end.
struct RunReporter {
    report: Report,
    json_paths: Vec<PathBuf>,
    console: bool,
    planned: usize,
    write_failed: bool,
}

impl RunReporter {
    fn new(plan: &RunPlan, target: &ResolvedTarget, started: f64, planned: usize) -> Self {
        let json_paths = plan
            .outputs
            .iter()
            .filter_map(|o| match o {
                Output::Json(name) => Some(plan.output_dir.join(name)),
                Output::Console => None,
            })
            .collect();
        Self {
            report: Report {
                schema_version: REPORT_SCHEMA_VERSION,
                metadata: Metadata {
                    tool: "llmsurge".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    host: HostInfo::collect(),
                    start_time: started,
                    end_time: started,
                    complete: false,
                    interrupted: false,
                },
                args: serde_json::to_value(plan).unwrap_or_default(),
                target: TargetInfo {
                    base_url: target.base_url.clone(),
                    model: target.model.clone(),
                    mock: target.mock.is_some(),
                },
                benchmarks: Vec::new(),
            },
            json_paths,
            console: plan.outputs.contains(&Output::Console),
            planned,
            write_failed: false,
        }
    }

    fn write(&mut self) {
        self.report.metadata.end_time = unix_now();
        for path in &self.json_paths {
            if let Err(e) = self.report.write_json(path) {
                eprintln!("error: cannot write the report {}: {e}", path.display());
                self.write_failed = true;
            }
        }
    }

    fn finish(&mut self, benchmarks: &[BenchmarkResult], interrupted: bool) {
        self.report.benchmarks = benchmarks.to_vec();
        self.report.metadata.interrupted = interrupted;
        self.report.metadata.complete = !interrupted && benchmarks.len() == self.planned;
        self.write();
        if self.console && !benchmarks.is_empty() {
            println!("{}", console::render(benchmarks));
        }
        for path in &self.json_paths {
            eprintln!("report written to {}", path.display());
        }
    }
}

impl RunObserver for RunReporter {
    fn benchmark_started(&mut self, index: u32, strategy: &llmsurge_coordinator::Strategy) {
        eprintln!("[{}/{}] {strategy}: starting", index + 1, self.planned);
    }

    fn progress(&mut self, p: &Progress) {
        let limit = match (p.max_seconds, p.max_requests) {
            (Some(d), _) => format!("/{:.0}s", d.as_secs_f64()),
            _ => String::new(),
        };
        let ttft = p
            .ttft_p50_ms
            .map(|t| format!(", ttft p50 {t:.1} ms"))
            .unwrap_or_default();
        eprintln!(
            "[{}/{}] {}: {:.1}s{limit}, {} done, {} in flight, {} errored{ttft}",
            p.index + 1,
            self.planned,
            p.strategy,
            p.elapsed.as_secs_f64(),
            p.counts.completed,
            p.counts.in_flight,
            p.counts.errored,
        );
    }

    fn benchmark_finished(&mut self, result: &BenchmarkResult) {
        eprintln!(
            "[{}/{}] {}: done in {:.1}s, {} completed, {} errored, {:.1} req/s",
            result.index + 1,
            self.planned,
            result.strategy,
            result.duration_s,
            result.requests.completed,
            result.requests.errored,
            result.throughput.requests_per_s
        );
        self.report.benchmarks.push(result.clone());
        self.write();
    }

    fn notice(&mut self, message: &str) {
        eprintln!("{message}");
    }
}
