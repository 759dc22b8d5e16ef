//! `llmsurge benchmark run`: resolve, check the target, run the profile, write reports.

use super::args::RunArgs;
use super::resolve::{Output, ProfilePlan, RunPlan, UsageError, measure_window, resolve};
use crate::exit_codes;
use crate::report::{
    HostInfo, Metadata, REPORT_SCHEMA_VERSION, Report, TargetInfo, console, junit, markdown,
    verdicts, write_atomic,
};
use crate::target::{ResolvedTarget, resolve_target};
use llmsurge_coordinator::profiles::CapacityOutcome;
use llmsurge_coordinator::{
    BenchmarkPlan, BenchmarkResult, CapacityProfile, CoordinatorError, FixedProfile, PlanTemplate,
    Profile, Progress, RunObserver, StopReason, Strategy, SweepProfile, WorkerCommand, run_profile,
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
    if plan.dry_run {
        return match serde_json::to_string_pretty(&plan) {
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
    runtime.block_on(run(plan))
}

async fn run(plan: RunPlan) -> i32 {
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
    let template = match plan_template(&plan, &target) {
        Ok(t) => t,
        Err(UsageError(message)) => return super::usage_error(&message),
    };
    let mut profile = ChosenProfile::new(&plan, template);
    let mut reporter = RunReporter::new(&plan, &target, started, ChosenProfile::planned(&plan));
    let outcome = run_profile(&command, profile.as_profile(), &mut reporter).await;
    if let Some(mock) = target.mock {
        mock.shutdown();
    }
    let outcome = match outcome {
        Ok(o) => o,
        Err(e @ CoordinatorError::WorkerSetup { .. }) => return super::usage_error(&e.to_string()),
        Err(e) => {
            eprintln!("error: {e}");
            return exit_codes::RUN_FAILED;
        }
    };
    let capacity = match &profile {
        ChosenProfile::Capacity(p) => Some(p.outcome()),
        _ => None,
    };
    reporter.report.capacity = capacity.clone();
    reporter.finish(&outcome.benchmarks, outcome.interrupted);
    if reporter.write_failed {
        return exit_codes::RUN_FAILED;
    }
    exit_code(&outcome.benchmarks, outcome.interrupted, capacity.as_ref())
}

/// The exit code of a finished run (see `exit_codes`). A capacity search judges the SLO
/// by its answer (failing probes are how it searches); other profiles by every benchmark.
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
    let invalid = benchmarks.is_empty()
        || benchmarks
            .iter()
            .any(|b| b.requests.completed == 0 || b.client.bottleneck);
    if invalid {
        return exit_codes::INVALID_RUN;
    }
    let slo_failed = match capacity {
        Some(c) => c.rate.is_none(),
        None => benchmarks
            .iter()
            .any(|b| b.slo.as_ref().is_some_and(|v| !v.passed)),
    };
    if slo_failed {
        exit_codes::GATE_FAILED
    } else {
        exit_codes::OK
    }
}

fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

fn plan_template(plan: &RunPlan, target: &ResolvedTarget) -> Result<PlanTemplate, UsageError> {
    let b = &plan.backend;
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
        data: plan.data.clone(),
        window: Default::default(),
        flush_interval: FLUSH_INTERVAL,
    };
    let dataset_len = match &plan.data {
        DataSpec::Synthetic(s) => s.samples,
    };
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
        on_worker_failure: plan.on_worker_failure,
        dispatch_lag_threshold: plan.max_dispatch_lag,
        slo: plan.slo.clone(),
        goodput: plan.goodput,
        saturation: plan.saturation,
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
            ProfilePlan::Capacity {
                precision,
                throughput_concurrency,
            } => Self::Capacity(CapacityProfile::new(
                template,
                plan.slo.clone().unwrap_or_default(),
                *precision,
                *throughput_concurrency,
            )),
        }
    }

    fn as_profile(&mut self) -> &mut dyn Profile {
        match self {
            Self::Fixed(p) => p,
            Self::Sweep(p) => p,
            Self::Capacity(p) => p,
        }
    }

    /// Benchmarks the profile will run, when known in advance.
    fn planned(plan: &RunPlan) -> Option<usize> {
        match &plan.profile_plan {
            ProfilePlan::Fixed { strategies } => Some(strategies.len()),
            ProfilePlan::Sweep { benchmarks, .. } => Some(*benchmarks),
            ProfilePlan::Capacity { .. } => None,
        }
    }
}

/// Follows a run: progress lines and notices on stderr, the JSON report rewritten after
/// every benchmark, the console summary at the end.
struct RunReporter {
    pub(crate) report: Report,
    json_paths: Vec<PathBuf>,
    console: bool,
    /// JUnit and Markdown files, written when the run ends.
    extra_outputs: Vec<(Output, PathBuf)>,
    planned: Option<usize>,
    write_failed: bool,
}

impl RunReporter {
    fn new(plan: &RunPlan, target: &ResolvedTarget, started: f64, planned: Option<usize>) -> Self {
        let json_paths = plan
            .outputs
            .iter()
            .filter_map(|o| match o {
                Output::Json(name) => Some(plan.output_dir.join(name)),
                _ => None,
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
                capacity: None,
            },
            json_paths,
            console: plan.outputs.contains(&Output::Console),
            extra_outputs: plan
                .outputs
                .iter()
                .filter(|o| matches!(o, Output::Junit(_) | Output::Markdown(_)))
                .map(|o| match o {
                    Output::Junit(f) | Output::Markdown(f) | Output::Json(f) => {
                        (o.clone(), plan.output_dir.join(f))
                    }
                    Output::Console => (o.clone(), plan.output_dir.clone()),
                })
                .collect(),
            planned,
            write_failed: false,
        }
    }

    /// `3/10`, or `3` when the total is not known in advance.
    fn position(&self, index: u32) -> String {
        match self.planned {
            Some(n) => format!("{}/{n}", index + 1),
            None => format!("{}", index + 1),
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
        self.report.metadata.complete =
            !interrupted && self.planned.is_none_or(|n| benchmarks.len() == n);
        self.write();
        if self.console && !benchmarks.is_empty() {
            println!("{}", console::render(benchmarks));
            let verdicts = verdicts::render(benchmarks, self.report.capacity.as_ref());
            if !verdicts.is_empty() {
                println!("{verdicts}");
            }
        }
        for (output, path) in &self.extra_outputs {
            let text = match output {
                Output::Junit(_) => junit::render(&junit::slo_suites(benchmarks)),
                _ => Ok(markdown::run_summary(benchmarks)),
            };
            if let Err(e) = text.and_then(|t| write_atomic(path, t.as_bytes())) {
                eprintln!("error: cannot write {}: {e}", path.display());
                self.write_failed = true;
            }
        }
        for path in self
            .json_paths
            .iter()
            .chain(self.extra_outputs.iter().map(|(_, p)| p))
        {
            eprintln!("report written to {}", path.display());
        }
    }
}

impl RunObserver for RunReporter {
    fn benchmark_started(&mut self, index: u32, strategy: &Strategy) {
        eprintln!("[{}] {strategy}: starting", self.position(index));
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
            "[{}] {}: {:.1}s{limit}, {} done, {} in flight, {} errored{ttft}",
            self.position(p.index),
            p.strategy,
            p.elapsed.as_secs_f64(),
            p.counts.completed,
            p.counts.in_flight,
            p.counts.errored,
        );
    }

    fn benchmark_finished(&mut self, result: &BenchmarkResult) {
        eprintln!(
            "[{}] {}: done in {:.1}s, {} completed, {} errored, {:.1} req/s",
            self.position(result.index),
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
