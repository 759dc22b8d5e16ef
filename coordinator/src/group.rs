//! Running one benchmark: spawn the worker group, barrier start, supervise, aggregate.
//!
//! The dispatcher is a single select loop that owns everything the user sees. It waits
//! on worker events (IPC frames, IPC end, process exit), the time limit, the drain and
//! kill deadlines, a 10 ms sampling tick, and interrupts. Per worker, a reader task turns
//! frames into events and a waiter task reports the exit status; a worker is over once
//! both its socket reached EOF and its process was reaped, so no frame it sent is lost.

use crate::constraints::{Limits, StopAction, StopReason};
use crate::error::CoordinatorError;
use crate::interrupts::{Interrupt, Interrupts};
use crate::observer::{Progress, RunObserver};
use crate::result::{self, BenchmarkResult, BuildContext, WorkerOutcome};
use crate::saturation::{SaturationConfig, SaturationDetector};
use crate::server_metrics::{
    ClientCounts, ProfilerConfig, ScrapeConfig, Scraper, SummaryWindow, profiler_call, summarise,
};
use crate::slo::{GoodputSpec, Slo};
use crate::spawn::{WorkerCommand, spawn_worker};
use crate::state::{Loss, ShmCounts, WorkerGroupState};
use crate::strategy::{Strategy, StrategySettings};
use llmsurge_proto::shm::{MAX_WORKERS, UNLIMITED, stop_flags};
use llmsurge_proto::{
    ClockAnchor, FrameReader, FrameWriter, FromWorker, MeasureWindow, Metric, MonoNanos,
    PROTOCOL_VERSION, Shard, SharedRegion, StatusClass, ToWorker, WorkerConfig,
};
use serde::{Deserialize, Serialize};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

/// Bound on the whole handshake (spawn, hello, configure, ready).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Milliseconds since `at`, for the start-up log.
fn ms_since(at: Instant) -> f64 {
    at.elapsed().as_secs_f64() * 1e3
}

/// Gap between "all ready" and t0, so every worker gets `Start` before t0: sending it is
/// microseconds per worker and a blocked worker wakes within a fraction of a
/// millisecond, so 5 ms plus 0.5 ms a worker (at most 20 ms) leaves room for a busy
/// machine. It was a flat 20 ms: most of the time from launch to the first request.
fn start_delay(workers: u32) -> Duration {
    (Duration::from_millis(5) + Duration::from_micros(500) * workers).min(Duration::from_millis(20))
}
/// After cancelling, how long workers get to report before they are killed.
const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// A running worker silent for this long is hung and gets killed, unless the plan says
/// otherwise (`--worker-timeout`).
pub const DEFAULT_WORKER_TIMEOUT: Duration = Duration::from_secs(15);

/// What to do when a worker dies mid-benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnWorkerFailure {
    /// Stop the benchmark (cancel in-flight requests) and report.
    #[default]
    Stop,
    /// Go on with the remaining workers.
    Continue,
}

/// Everything needed to run one benchmark.
#[derive(Clone, Debug)]
pub struct BenchmarkPlan {
    /// Position in the run.
    pub index: u32,
    /// The load pattern.
    pub strategy: Strategy,
    /// Ramp-up and burstiness.
    pub settings: StrategySettings,
    /// Stop constraints.
    pub limits: Limits,
    /// Worker processes.
    pub workers: u32,
    /// Cap on in-flight requests across the group.
    pub max_concurrency: Option<u64>,
    /// Size of a finite dataset (slots past it are never claimed).
    pub dataset_len: Option<u64>,
    /// Warm-up and cool-down.
    pub window: MeasureWindow,
    /// What each worker gets; id, count, schedule and window are filled in per worker.
    pub worker_template: WorkerConfig,
    /// Bound on draining after the first Ctrl-C.
    pub drain_timeout: Duration,
    /// A running worker silent (no batch, no heartbeat) for this long is killed as hung.
    pub worker_timeout: Duration,
    /// Policy for dead workers.
    pub on_worker_failure: OnWorkerFailure,
    /// Dispatch-lag p99 above this marks the client as the bottleneck.
    pub dispatch_lag_threshold: Duration,
    /// `--max-short-output-share`: a larger share of outputs short of the length asked
    /// makes the run invalid.
    pub max_short_output_share: Option<f64>,
    /// Objectives evaluated on the result.
    pub slo: Option<Slo>,
    /// Per-request goodput thresholds.
    pub goodput: Option<GoodputSpec>,
    /// Over-saturation detection, when enabled.
    pub saturation: Option<SaturationConfig>,
    /// This host's part of a multi-host load (`--shard K/N`). Strategy, limits and the
    /// concurrency cap above are the single host's; the group runs the shard's share.
    pub shard: Shard,
    /// Scraping the server's metrics beside the benchmark (`--server-metrics`).
    pub server_metrics: Option<ScrapeConfig>,
    /// The server's profiler around the measured window (`--profile-server`).
    pub profile_server: Option<ProfilerConfig>,
    /// `--reset-cache`: empty the server's caches before this benchmark (all but the
    /// run's first, unless it says `before_first`).
    pub cache_reset: Option<crate::cache_reset::CacheResetConfig>,
    /// `--gpu-metrics`: GPU power, utilisation and memory sampled beside the benchmark.
    pub gpu_metrics: Option<crate::gpu::GpuConfig>,
    /// `--until-precise`: stop once every figure's interval is this tight.
    pub precision: Option<crate::precision::PrecisionSpec>,
    /// Agent traces: their ids and calls' names, for the report (the workers' data
    /// knows them by index only).
    pub agent_names: Option<std::sync::Arc<llmsurge_proto::AgentNames>>,
}

impl BenchmarkPlan {
    /// The single host's slot limit: `--max-requests` or a finite dataset's length.
    fn global_slot_limit(&self) -> u64 {
        match (self.limits.max_requests, self.dataset_len) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(UNLIMITED),
        }
    }

    /// This shard's concurrency cap: its share of `--max-concurrency`.
    fn local_concurrency_cap(&self) -> u64 {
        self.shard.share(self.max_concurrency.unwrap_or(UNLIMITED))
    }

    fn validate(&self) -> Result<(), CoordinatorError> {
        if self.workers == 0 || self.workers as usize > MAX_WORKERS {
            return Err(CoordinatorError::Plan(format!(
                "--workers must be 1..={MAX_WORKERS}, got {}",
                self.workers
            )));
        }
        if !self.strategy.allows_several_workers() && self.workers > 1 {
            return Err(CoordinatorError::Plan(
                "synchronous runs on exactly one worker".into(),
            ));
        }
        Ok(())
    }

    /// Whether the load's users pause between requests (sessions with think times,
    /// agent traces' recorded gaps): a user in its pause holds no connection, so fewer
    /// sockets than users are open at once.
    pub(crate) fn users_think(&self) -> bool {
        match &self.worker_template.data {
            llmsurge_proto::DataSpec::Synthetic(s) => {
                s.turns > 1 && s.think_time.is_some_and(|t| t.mean_ns > 0)
            }
            llmsurge_proto::DataSpec::AgentTrace(_) => true,
            _ => false,
        }
    }

    /// Refuses a plan whose connections cannot fit under the open-file limit (raising
    /// the soft limit to the hard one on the way), naming the flag that asked for them.
    /// Users who think are not refused: only the turns in flight hold sockets, so the
    /// limit is a warning (returned) that turns past it would fail to connect.
    fn check_fd_limit(&self) -> Result<Option<String>, CoordinatorError> {
        let Some((flag, total)) = self.connections_at_once() else {
            return Ok(None);
        };
        let per_worker = self.sockets_per_worker(total);
        match llmsurge_proto::fdlimit::ensure_fd_capacity(per_worker) {
            Ok(_) => Ok(None),
            // Thinking users hold no socket, unless each keeps its connection through its
            // think time (`--sticky-connections`).
            Err(e)
                if self.users_think()
                    && !self.worker_template.backend.affinity.sticky_connections =>
            {
                Ok(Some(format!(
                    "{}: {total} users in a turn at once would hold {per_worker} sockets per worker (besides its own {} files), over the hard limit of {} open files: thinking users hold none, but a turn past the limit fails to connect (errored, \"Too many open files\") and its user pauses a think time; {flag} or --max-concurrency lower, or ulimit -Hn higher, avoids it",
                    self.strategy,
                    llmsurge_proto::fdlimit::FD_RESERVE,
                    e.hard
                )))
            }
            Err(e) => Err(CoordinatorError::FdLimit(format!(
                "{flag} {total} ({}) {e}",
                self.strategy
            ))),
        }
    }

    /// The sockets a worker holds for its share of `requests` at once: one a request, or
    /// one for each `--http2-streams` of them where HTTP/2 connections are shared.
    fn sockets_per_worker(&self, requests: u64) -> u64 {
        let per_worker = requests.div_ceil(u64::from(self.workers.max(1)));
        let backend = &self.worker_template.backend;
        if backend.http2 {
            per_worker.div_ceil(u64::from(backend.http2_streams.max(1)))
        } else {
            per_worker
        }
    }

    /// The most requests this host's part of the load has in flight at once (each a
    /// connection, unless `--http2-streams` shares them), and the flag that sets it;
    /// `None` for an open-ended load (a rate with no cap).
    fn connections_at_once(&self) -> Option<(&'static str, u64)> {
        // This host's part: its share of the streams and of the cap.
        let cap = self.local_concurrency_cap();
        let local = |streams: u32| self.shard.share(u64::from(streams));
        match self.strategy {
            Strategy::Concurrent { streams } if local(streams) <= cap => {
                Some(("--rate", local(streams)))
            }
            Strategy::Throughput { max_concurrency } if local(max_concurrency) <= cap => {
                Some(("--max-concurrency", local(max_concurrency)))
            }
            _ if cap != UNLIMITED => Some(("--max-concurrency", cap)),
            _ => None,
        }
    }

    /// Warns when this host's connections at once to the one target address need more
    /// local ports than the kernel's ephemeral range holds (all workers share it).
    fn check_local_ports(&self) -> Option<String> {
        let (flag, requests) = self.connections_at_once()?;
        let backend = &self.worker_template.backend;
        let total = if backend.http2 && backend.http2_streams > 1 {
            self.sockets_per_worker(requests) * u64::from(self.workers.max(1))
        } else {
            requests
        };
        let range = crate::local_ports::PortRange::of_host()?;
        // A shard's share is not what the user typed: say whose it is.
        let what = if self.shard.is_split() {
            format!(
                "{flag} ({}), shard {}/{}: its share, {requests}",
                self.strategy,
                self.shard.index + 1,
                self.shard.count
            )
        } else {
            format!("{flag} {requests} ({})", self.strategy)
        };
        crate::local_ports::port_warning(total, range, &what)
    }

    fn worker_config(&self, id: u32) -> WorkerConfig {
        let mut cfg = self.worker_template.clone();
        cfg.worker_id = id;
        cfg.worker_count = self.workers;
        cfg.schedule = self.strategy.schedule(&self.settings);
        cfg.window = self.window;
        cfg.shard = self.shard;
        // The template carries the run's tag; each benchmark's ids add its index.
        if let Some(tag) = &cfg.backend.request_id {
            cfg.backend.request_id = Some(llmsurge_proto::request_id_prefix(tag, self.index));
        }
        cfg
    }
}

/// Run-wide context shared by every benchmark.
pub struct RunEnv<'a> {
    /// How to start workers.
    pub command: &'a WorkerCommand,
    /// Wall-clock anchor of the run.
    pub anchor: &'a ClockAnchor,
    /// Ctrl-C and SIGTERM.
    pub interrupts: &'a mut Interrupts,
    /// Progress, records, notices.
    pub observer: &'a mut dyn RunObserver,
    /// The instant this benchmark must start at (`--start-at`, first benchmark only);
    /// `None`: as soon as every worker is ready.
    pub start_at: Option<MonoNanos>,
    /// The run's latest success before this benchmark (see
    /// [`BenchmarkResult::answered`]): a benchmark where nothing succeeds after it may
    /// have lost the server.
    pub answered_before: Option<crate::error_tail::Answered>,
}

impl std::fmt::Debug for RunEnv<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunEnv")
            .field("command", self.command)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
enum Event {
    Message(u32, FromWorker),
    Closed(u32, Option<String>),
    Exited(u32, std::io::Result<ExitStatus>),
}

#[derive(Debug)]
struct Track {
    pid: u32,
    writer: Option<FrameWriter<OwnedWriteHalf>>,
    finished: bool,
    closed: bool,
    exit: Option<String>,
    /// The process was ended by a signal.
    signaled: bool,
    ended: bool,
    killed: bool,
    /// The worker's own `Failed` message, then (once it ended) its outcome.
    failure: Option<String>,
    /// Why the coordinator killed it as hung.
    hung: Option<String>,
    /// How its IPC channel failed, if it did.
    ipc_error: Option<String>,
    last_seen: Instant,
}

/// Why worker `id`, which never said `Finished`, ended. The coordinator's own verdict
/// (hung) comes first, then the worker's `Failed` message, then a signal: a signal
/// explains the socket error it caused (SIGKILL mid-frame cuts the frame off), so the IPC
/// error is named only when nothing else explains the end.
fn death_reason(id: u32, t: &Track) -> String {
    let exit = t.exit.as_deref().unwrap_or("unknown status");
    match (&t.hung, &t.failure, t.signaled, &t.ipc_error) {
        (Some(hung), ..) => format!("worker {id} failed: {hung}"),
        (None, Some(message), ..) => format!("worker {id} failed: {message}"),
        (None, None, false, Some(e)) => {
            format!("worker {id} failed: IPC channel failed: {e} ({exit})")
        }
        (None, None, ..) => format!("worker {id} died: {exit}"),
    }
}

/// Describes how a process ended.
fn describe_exit(status: &std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("signal {sig}"),
            _ => "unknown status".into(),
        },
        Err(e) => format!("wait failed: {e}"),
    }
}

fn kill(pid: u32) {
    if let Ok(pid) = i32::try_from(pid)
        && pid > 0
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn children_cpu_seconds() -> f64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map(|u| {
            let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            tv(u.user_time()) + tv(u.system_time())
        })
        .unwrap_or(0.0)
}

/// CPU time (all threads, user + system) a live process has used so far.
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).ok()?);
    let clock = nix::time::clock_getcpuclockid(pid).ok()?;
    let t = nix::time::clock_gettime(clock).ok()?;
    Some(t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

/// Runs one benchmark to completion (or interruption) and aggregates its result.
pub async fn run_benchmark(
    plan: &BenchmarkPlan,
    env: &mut RunEnv<'_>,
) -> Result<BenchmarkResult, CoordinatorError> {
    plan.validate()?;
    // Said before anything starts, and kept for the report's client warnings.
    let limit_warnings: Vec<String> = plan
        .check_fd_limit()?
        .into_iter()
        .chain(plan.check_local_ports())
        .collect();
    for w in &limit_warnings {
        env.observer.notice(&format!("warning: {w}"));
    }
    let n = plan.workers;
    // Shared memory counts this host's claims (local indices 0, 1, ...); workers map
    // local index j to the single host's slot K + j·N. So the limit is the shard's share
    // of the single host's limit, and every audit identity holds on local counts.
    let slot_limit = plan.global_slot_limit();
    let local_limit = plan.shard.share(slot_limit);
    let (shm, shm_fd) = SharedRegion::create()?;
    shm.init(n, local_limit, plan.local_concurrency_cap());
    if let Some(cap) = plan.worker_template.behaviour.max_prefill_concurrency {
        shm.set_prefill_cap(u64::from(cap));
    }
    // Before anything of this benchmark runs, so no request of it meets a warm cache.
    let cache_reset = match &plan.cache_reset {
        Some(c) if plan.index > 0 || c.before_first => Some(crate::cache_reset::reset(c).await),
        _ => None,
    };
    let cpu_before = children_cpu_seconds();
    env.observer.benchmark_seed(plan.worker_template.seed);
    env.observer.benchmark_started(plan.index, &plan.strategy);
    // Its first scrape runs while the workers start; it is the baseline if it answers
    // before t0.
    let mut scraper = plan.server_metrics.clone().map(Scraper::start);
    let gpu_sampler = plan.gpu_metrics.clone().map(crate::gpu::GpuSampler::start);

    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let mut tracks = Vec::with_capacity(n as usize);
    // Start-up phases at debug level (LLMSURGE_LOG=debug), for docs/performance.md.
    let spawn_started = Instant::now();
    for id in 0..n {
        let spawned = match spawn_worker(env.command, &shm_fd) {
            Ok(s) => s,
            Err(e) => {
                tracks.iter().for_each(|t: &Track| kill(t.pid));
                return Err(e);
            }
        };
        let (rd, wr) = spawned.socket.into_split();
        let events = tx.clone();
        tokio::spawn(async move {
            let mut reader = FrameReader::new(rd);
            loop {
                match reader.next::<FromWorker>().await {
                    Ok(Some(m)) => {
                        if events.send(Event::Message(id, m)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => return drop(events.send(Event::Closed(id, None))),
                    Err(e) => return drop(events.send(Event::Closed(id, Some(e.to_string())))),
                }
            }
        });
        let events = tx.clone();
        let mut child = spawned.child;
        tokio::spawn(async move {
            let status = child.wait().await;
            let _ = events.send(Event::Exited(id, status));
        });
        tracks.push(Track {
            pid: spawned.pid,
            writer: Some(FrameWriter::new(wr)),
            finished: false,
            closed: false,
            exit: None,
            signaled: false,
            ended: false,
            killed: false,
            failure: None,
            hung: None,
            ipc_error: None,
            last_seen: Instant::now(),
        });
    }
    drop(tx);

    tracing::debug!(workers = n, ms = ms_since(spawn_started), "workers spawned");
    if let Err(e) = handshake(plan, &mut tracks, &mut rx, env).await {
        tracks.iter().for_each(|t| kill(t.pid));
        return Err(e);
    }
    tracing::debug!(
        ms = ms_since(spawn_started),
        "every worker ready (since the first spawn)"
    );

    // The profiler runs from before t0 to after the last request: the whole window.
    let mut profiler_warnings = Vec::new();
    if let Some(p) = &plan.profile_server
        && let Err(w) = profiler_call(p, "start_profile").await
    {
        env.observer.notice(&format!("warning: {w}"));
        profiler_warnings.push(w);
    }

    let ready_t0 = MonoNanos::now() + start_delay(n);
    let t0 = match env.start_at {
        Some(at) if at > ready_t0 => {
            env.observer.notice(&format!(
                "waiting until {:.3} (Unix seconds; in {:.1}s) to start, as --start-at asks",
                env.anchor.unix_seconds(at),
                at.since(MonoNanos::now()).as_secs_f64()
            ));
            at
        }
        Some(at) => {
            env.observer.notice(&format!(
                "--start-at was {:.3}s ago when the workers were ready: starting now",
                ready_t0.since(at).as_secs_f64()
            ));
            ready_t0
        }
        None => ready_t0,
    };
    tracing::debug!(benchmark = plan.index, strategy = %plan.strategy, workers = n, "every worker ready; starting at t0");
    for t in &mut tracks {
        if let Some(w) = &mut t.writer
            && w.send(&ToWorker::Start { t0 }).await.is_err()
        {
            t.writer = None; // it died; its events will say so
        }
    }

    if let Some(s) = &mut scraper {
        s.started(t0);
    }

    // Start-up (spawn, data and tokenizer load) is not load: judge worker CPU from t0.
    let startup_cpu: f64 = tracks
        .iter()
        .filter_map(|t| process_cpu_seconds(t.pid))
        .sum();

    let mut state = WorkerGroupState::new(n, t0, plan.limits);
    state.prefill = plan
        .worker_template
        .behaviour
        .max_prefill_concurrency
        .map(crate::prefill::PrefillWaits::new);
    state.goodput = plan.goodput;
    state.window = plan.window;
    state.agent_traces.names.clone_from(&plan.agent_names);
    if let Some(lora) = &plan.worker_template.lora {
        state.set_models(lora);
    }
    let mut sup = Supervisor {
        plan,
        shm: &shm,
        state,
        tracks,
        t0,
        detector: plan.saturation.map(SaturationDetector::new),
        last_evaluation: Instant::now(),
        stop: None,
        stop_time: None,
        interrupted: false,
        terminated_by_worker: false,
        drain_deadline: None,
        kill_deadline: None,
        peak: 0,
        precision: plan
            .precision
            .clone()
            .map(crate::precision::PrecisionWatch::new),
    };
    let time_limit = plan
        .limits
        .max_seconds
        .map(|d| crate::tokio_instant(t0 + d));
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_progress = Instant::now();
    let far = Instant::now() + Duration::from_secs(86_400 * 365);

    while !sup.tracks.iter().all(|t| t.ended) {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(ev) => sup.handle(ev, env)?,
                None => break, // every reader and waiter task is done
            },
            () = sleep_until(time_limit.unwrap_or(far)), if time_limit.is_some() && sup.stop.is_none() => {
                let seconds = plan.limits.max_seconds.map_or(0.0, |d| d.as_secs_f64());
                sup.apply_stop(StopReason::MaxSeconds { seconds });
            }
            () = sleep_until(sup.drain_deadline.unwrap_or(far)), if sup.drain_deadline.is_some() && sup.kill_deadline.is_none() => {
                env.observer.notice("drain timeout reached: cancelling in-flight requests");
                sup.cancel();
            }
            () = sleep_until(sup.kill_deadline.unwrap_or(far)), if sup.kill_deadline.is_some() => {
                sup.kill_remaining(env);
            }
            _ = tick.tick() => {
                if let Some(s) = &mut scraper {
                    sup.observe_server_queue(s.queue_samples());
                }
                sup.peak = sup.peak.max(shm.in_flight());
                sup.check_saturation();
                sup.check_precision();
                sup.check_heartbeats(env);
                if last_progress.elapsed() >= Duration::from_secs(1) {
                    last_progress = Instant::now();
                    env.observer.progress(&sup.progress(t0));
                }
            }
            interrupt = env.interrupts.next() => match interrupt {
                Interrupt::Drain => {
                    env.observer.notice(&format!(
                        "interrupted: finishing in-flight requests (up to {}s); press Ctrl-C again to stop now",
                        plan.drain_timeout.as_secs_f64()
                    ));
                    sup.interrupted = true;
                    sup.apply_stop(StopReason::Interrupted);
                }
                Interrupt::Cancel => {
                    env.observer.notice("interrupted again: cancelling in-flight requests");
                    sup.interrupt_now();
                }
                Interrupt::Terminate => {
                    if !sup.interrupted {
                        env.observer.notice("terminated (SIGTERM): cancelling in-flight requests");
                    }
                    sup.interrupt_now();
                }
            },
        }
    }
    let end = MonoNanos::now();
    let unsent = sup
        .state
        .account_unsent_of_dead(shm.slots_claimed(), shm.slots_returned());
    if unsent > 0 {
        env.observer.notice(&format!(
            "{unsent} {} a dead worker held unsent (waiting for their instant or a cap) counted as failed; their slots are unknown, so the request log has no line for them",
            if unsent == 1 { "request" } else { "requests" }
        ));
    }
    // Every request has ended: the last scrape closes the window.
    let scraped = match scraper {
        Some(s) => Some(s.finish(t0).await),
        None => None,
    };
    if let Some(p) = &plan.profile_server
        && let Err(w) = profiler_call(p, "stop_profile").await
    {
        env.observer.notice(&format!("warning: {w}"));
        profiler_warnings.push(w);
    }
    let stop_reason = sup.stop.clone().or_else(|| {
        Some(match (plan.limits.max_requests, plan.dataset_len) {
            (Some(max), _) if shm.slots_claimed() >= plan.shard.share(max) && max == slot_limit => {
                StopReason::MaxRequests { requests: max }
            }
            (_, Some(len)) if shm.slots_claimed() >= plan.shard.share(len) => {
                StopReason::DatasetExhausted { samples: len }
            }
            _ => StopReason::ScheduleComplete,
        })
    });
    let stop_time = sup.stop_time;
    let workers = sup
        .tracks
        .iter()
        .enumerate()
        .map(|(id, t)| WorkerOutcome {
            id: id as u32,
            pid: t.pid,
            outcome: if t.finished {
                "finished".into()
            } else {
                t.failure.clone().unwrap_or_else(|| "died".into())
            },
            died: !t.finished,
        })
        .collect();
    let mut result = result::build(
        &sup.state,
        BuildContext {
            index: plan.index,
            strategy: plan.strategy,
            settings: plan.settings,
            limits: plan.limits,
            anchor: env.anchor,
            t0,
            end,
            interrupted: sup.interrupted,
            window: plan.window,
            stop_reason,
            stop_time,
            concurrency_peak: sup.peak,
            worker_cpu_s: (children_cpu_seconds() - cpu_before - startup_cpu).max(0.0),
            dispatch_lag_threshold_ms: plan.dispatch_lag_threshold.as_secs_f64() * 1000.0,
            workers,
            answered_before: env.answered_before,
        },
    );
    let backend = &plan.worker_template.backend;
    let inputs_per_request = match &plan.worker_template.data {
        llmsurge_proto::DataSpec::Synthetic(spec) => spec.batch_size.max(spec.documents),
        _ => 1,
    };
    result::fit_to_format(&mut result, backend.request_format, inputs_per_request);
    result::fit_to_stream(&mut result, backend.stream);
    if let llmsurge_proto::DataSpec::Synthetic(spec) = &plan.worker_template.data {
        result::add_media_rates(&mut result, &spec.media);
    }
    result.max_concurrency = plan.max_concurrency;
    if let Some(o) = &mut result.output_lengths {
        o.set_sent(crate::output_lengths::SentFields::of(backend));
        o.max_short_share = plan.max_short_output_share;
    }
    result.slo = plan.slo.as_ref().map(|slo| slo.judge(&result));
    result.precision = plan.precision.as_ref().map(|spec| {
        let m = &sup.state.measured;
        let mut p = spec.evaluate(
            &sup.state.metrics,
            m.completed,
            result.measured_window.duration_s,
        );
        p.stopped_it = matches!(
            result.stop_reason,
            Some(StopReason::PrecisionReached { .. })
        );
        p
    });
    let w = &result.measured_window;
    let measured = (
        w.start_time - result.start_time,
        w.end_time - result.start_time,
    );
    result.steady_state =
        crate::steady::steady_state(&result.timeseries, &sup.state.steady, measured);
    if let Some(log) = scraped {
        let m = &sup.state.measured;
        let whole_benchmark = plan.window == MeasureWindow::default();
        let since_t0 = |t: Option<MonoNanos>| t.map(|t| t.signed_since(t0) as f64 / 1e9);
        let duration = end.since(t0).as_secs_f64();
        let window = if whole_benchmark {
            SummaryWindow {
                start: 0.0,
                end: duration,
                whole_benchmark,
            }
        } else {
            SummaryWindow {
                start: since_t0(m.first_start).unwrap_or(0.0),
                end: since_t0(m.last_end).unwrap_or(duration),
                whole_benchmark,
            }
        };
        let lengths = &result.output_lengths;
        let client = ClientCounts {
            completed: m.completed,
            output_tokens: m.received_output_tokens,
            prompt_tokens: m.answered_prompt_tokens,
            prompt_tokens_sent: m.sent_prompt_tokens,
            prompts_unknown: m.sent_prompts_unknown,
            prompts_unknown_bound: m
                .sent_prompts_unknown
                .saturating_mul(m.max_prompt_tokens.saturating_mul(2)),
            unfinished: m.errored + m.cancelled,
            outputs_unknown: m.completed_outputs_unknown,
            outputs_unreceived_bound: m.unreceived_output_bound,
            outputs_unbounded: m.unreceived_output_unbounded,
            // Outputs whose length is not known in tokens (no usage) explain nothing:
            // the client's received count is then partly of chunks.
            output_tokens_asked: lengths
                .as_ref()
                .filter(|l| l.unknown_lengths == 0)
                .map_or(0, |l| l.asked_tokens),
            output_tokens_short: lengths
                .as_ref()
                .map_or(0, |l| l.asked_tokens.saturating_sub(l.received_tokens)),
            shard: plan
                .shard
                .is_split()
                .then_some((plan.shard.index + 1, plan.shard.count)),
        };
        let mut metrics = summarise(log, window, client);
        metrics.warnings.extend(profiler_warnings);
        result.server_metrics = Some(metrics);
    }
    result.client.warnings.extend(limit_warnings);
    result.cache_reset = cache_reset;
    if let Some(s) = gpu_sampler {
        let w = &result.measured_window;
        result.gpu = Some(
            s.finish(
                w.start_time,
                w.end_time,
                result.throughput.output_tokens_per_s,
            )
            .await,
        );
    }
    result.audit = sup.state.audit(
        &ShmCounts {
            started: (0..n).map(|id| shm.worker_started(id)).collect(),
            slots_claimed: shm.slots_claimed(),
            slots_returned: shm.slots_returned(),
            in_flight: shm.in_flight(),
        },
        sup.tracks.iter().all(|t| t.finished),
    );
    for m in &result.audit.mismatches {
        env.observer
            .notice(&format!("the request books do not balance: {m}"));
    }
    if sup.terminated_by_worker {
        // The coordinator's own SIGTERM may not have been seen yet: the run ends here.
        env.interrupts.note_terminate();
    }
    Ok(result)
}

async fn handshake(
    plan: &BenchmarkPlan,
    tracks: &mut [Track],
    rx: &mut mpsc::UnboundedReceiver<Event>,
    env: &mut RunEnv<'_>,
) -> Result<(), CoordinatorError> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let mut ready = 0;
    while ready < tracks.len() {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            () = sleep_until(deadline) => {
                return Err(CoordinatorError::Protocol { worker: 0, message: "workers were not ready within 30 s".into() });
            }
            _ = env.interrupts.next() => return Err(CoordinatorError::Interrupted),
        };
        let setup = |worker, message| CoordinatorError::WorkerSetup { worker, message };
        match ev {
            None => return Err(setup(0, "every worker went away during startup".into())),
            Some(Event::Message(
                id,
                FromWorker::Hello {
                    protocol_version, ..
                },
            )) => {
                if protocol_version != PROTOCOL_VERSION {
                    return Err(CoordinatorError::Protocol {
                        worker: id,
                        message: format!(
                            "speaks protocol {protocol_version}, the coordinator {PROTOCOL_VERSION}"
                        ),
                    });
                }
                let cfg = plan.worker_config(id);
                let Some(w) = tracks.get_mut(id as usize).and_then(|t| t.writer.as_mut()) else {
                    continue;
                };
                w.send(&ToWorker::Configure(Box::new(cfg)))
                    .await
                    .map_err(|e| setup(id, format!("sending its configuration: {e}")))?;
            }
            Some(Event::Message(_, FromWorker::Ready)) => ready += 1,
            Some(Event::Message(id, FromWorker::Failed { message })) => {
                return Err(setup(id, message));
            }
            Some(Event::Message(id, other)) => {
                return Err(CoordinatorError::Protocol {
                    worker: id,
                    message: format!("unexpected {other:?} before start"),
                });
            }
            Some(Event::Closed(id, _)) => {
                return Err(setup(id, "closed its IPC channel during startup".into()));
            }
            Some(Event::Exited(id, status)) => {
                return Err(setup(
                    id,
                    format!("exited during startup ({})", describe_exit(&status)),
                ));
            }
        }
    }
    Ok(())
}

struct Supervisor<'a> {
    plan: &'a BenchmarkPlan,
    shm: &'a SharedRegion,
    state: WorkerGroupState,
    tracks: Vec<Track>,
    t0: MonoNanos,
    detector: Option<SaturationDetector>,
    last_evaluation: Instant,
    stop: Option<StopReason>,
    stop_time: Option<MonoNanos>,
    /// Ctrl-C or SIGTERM arrived, whatever stopped the benchmark first.
    interrupted: bool,
    /// A worker reported SIGTERM (a supervisor stopping the process group).
    terminated_by_worker: bool,
    drain_deadline: Option<Instant>,
    kill_deadline: Option<Instant>,
    peak: u64,
    /// `--until-precise`, when set.
    precision: Option<crate::precision::PrecisionWatch>,
}

impl Supervisor<'_> {
    fn handle(&mut self, ev: Event, env: &mut RunEnv<'_>) -> Result<(), CoordinatorError> {
        match ev {
            Event::Message(id, msg) => {
                if let Some(t) = self.tracks.get_mut(id as usize) {
                    t.last_seen = Instant::now();
                }
                match msg {
                    FromWorker::Update(batch) => {
                        let observer = &mut *env.observer;
                        let detector = &mut self.detector;
                        let t0 = self.t0;
                        let mut on_record = |r: &llmsurge_proto::RequestRecord| {
                            if let (Some(d), Some(start), Some(first)) =
                                (detector.as_mut(), r.start, r.first_content)
                            {
                                let at = first.since(t0).as_secs_f64();
                                d.observe_ttft(at, first.since(start).as_secs_f64() * 1e3);
                            }
                            observer.record(r);
                        };
                        if let Some(reason) = self.state.apply(id, &batch, &mut on_record)? {
                            self.apply_stop(reason);
                        }
                    }
                    FromWorker::Finished { terminated, .. } => {
                        self.track(id).finished = true;
                        if terminated && !self.terminated_by_worker {
                            // The group got SIGTERM: the same clean cancel as our own.
                            self.terminated_by_worker = true;
                            if !self.interrupted {
                                env.observer
                                    .notice("terminated (SIGTERM): cancelling in-flight requests");
                            }
                            self.interrupt_now();
                        }
                    }
                    FromWorker::Failed { message } => self.track(id).failure = Some(message),
                    FromWorker::Hello { .. } | FromWorker::Ready => {}
                }
            }
            Event::Closed(id, error) => {
                let t = self.track(id);
                t.closed = true;
                if let Some(e) = error {
                    t.ipc_error.get_or_insert(e);
                }
                self.maybe_end(id, env);
            }
            Event::Exited(id, status) => {
                let t = self.track(id);
                t.signaled = matches!(&status, Ok(s) if s.signal().is_some());
                t.exit = Some(describe_exit(&status));
                self.maybe_end(id, env);
            }
        }
        Ok(())
    }

    fn track(&mut self, id: u32) -> &mut Track {
        &mut self.tracks[id as usize]
    }

    fn maybe_end(&mut self, id: u32, env: &mut RunEnv<'_>) {
        let t = &mut self.tracks[id as usize];
        if t.ended || !t.closed || t.exit.is_none() {
            return;
        }
        t.ended = true;
        t.writer = None;
        if t.finished {
            return;
        }
        let status = t.exit.clone().unwrap_or_default();
        let reason = death_reason(id, t);
        let deliberate = t.killed;
        t.failure = Some(if deliberate {
            format!("killed by the coordinator ({status})")
        } else {
            reason.clone()
        });
        let observer = &mut *env.observer;
        let loss = Loss {
            reason: &reason,
            deliberate,
            now: MonoNanos::now(),
            shm_started: self.shm.worker_started(id),
            newest_slot: self
                .plan
                .shard
                .global(self.shm.slots_claimed().saturating_sub(1)),
        };
        let lost = self
            .state
            .worker_lost(id, loss, &mut |r| observer.record(r));
        self.shm.reclaim_worker(id);
        if deliberate {
            return;
        }
        env.observer.notice(&format!(
            "{reason}; {lost} in-flight requests counted as errored"
        ));
        let all_dead = self.tracks.iter().all(|t| t.ended && !t.finished);
        match self.plan.on_worker_failure {
            OnWorkerFailure::Stop => self.apply_stop(StopReason::WorkerFailure { detail: reason }),
            OnWorkerFailure::Continue if all_dead => self.apply_stop(StopReason::WorkerFailure {
                detail: format!("no worker left ({reason})"),
            }),
            OnWorkerFailure::Continue => {}
        }
    }

    fn apply_stop(&mut self, reason: StopReason) {
        let action = reason.action();
        tracing::debug!(%reason, ?action, "stop constraint");
        if self.stop.is_none() {
            self.stop = Some(reason);
            self.stop_time = Some(MonoNanos::now());
        }
        match action {
            StopAction::StopQueuing => {
                // Ctrl-C drains what is in flight only: a request a cap still holds was
                // never sent, so it ends at once.
                let unsent = if matches!(self.stop, Some(StopReason::Interrupted)) {
                    stop_flags::DROP_UNSENT
                } else {
                    0
                };
                self.shm.request_stop(stop_flags::STOP_QUEUING | unsent);
                self.drain_deadline
                    .get_or_insert(Instant::now() + self.plan.drain_timeout);
            }
            StopAction::Cancel => self.cancel(),
        }
    }

    /// A second Ctrl-C, or SIGTERM: cancel now, and count as the stop if none came first.
    fn interrupt_now(&mut self) {
        self.interrupted = true;
        if self.stop.is_none() {
            self.stop = Some(StopReason::Interrupted);
            self.stop_time = Some(MonoNanos::now());
        }
        self.cancel();
    }

    fn cancel(&mut self) {
        self.shm.request_stop(stop_flags::CANCEL_IN_FLIGHT);
        self.kill_deadline
            .get_or_insert(Instant::now() + CANCEL_GRACE);
    }

    fn kill_remaining(&mut self, env: &mut RunEnv<'_>) {
        self.kill_deadline = Some(Instant::now() + Duration::from_secs(86_400));
        for (id, t) in self.tracks.iter_mut().enumerate() {
            if !t.ended && !t.killed {
                env.observer.notice(&format!(
                    "worker {id} did not stop within {}s of cancelling: killing it",
                    CANCEL_GRACE.as_secs()
                ));
                t.killed = true;
                kill(t.pid);
            }
        }
    }

    /// Feeds the server's waiting-requests gauge to the over-saturation detector.
    fn observe_server_queue(&mut self, samples: Vec<(MonoNanos, f64)>) {
        if let Some(d) = &mut self.detector {
            for (at, waiting) in samples {
                d.observe_server_queue(at.signed_since(self.t0) as f64 / 1e9, waiting);
            }
        }
    }

    fn check_saturation(&mut self) {
        let Some(detector) = &mut self.detector else {
            return;
        };
        let now = MonoNanos::now().since(self.t0).as_secs_f64();
        detector.observe_concurrency(now, self.shm.in_flight());
        if self.stop.is_some() || self.last_evaluation.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last_evaluation = Instant::now();
        if let Some(detail) = detector.evaluate(now) {
            self.apply_stop(StopReason::OverSaturation { detail });
        }
    }

    fn check_precision(&mut self) {
        if self.stop.is_some() {
            return;
        }
        if let Some(reason) = self.precision.as_mut().and_then(|w| w.check(&self.state)) {
            self.apply_stop(reason);
        }
    }

    fn check_heartbeats(&mut self, env: &mut RunEnv<'_>) {
        let timeout = self.plan.worker_timeout;
        for (id, t) in self.tracks.iter_mut().enumerate() {
            if !t.ended
                && !t.finished
                && !t.killed
                && t.hung.is_none()
                && t.last_seen.elapsed() > timeout
            {
                env.observer.notice(&format!(
                    "worker {id} sent nothing for {}s: killing it as hung",
                    timeout.as_secs_f64()
                ));
                t.hung = Some(format!(
                    "hung (no heartbeat for {}s)",
                    timeout.as_secs_f64()
                ));
                kill(t.pid);
            }
        }
    }

    fn progress(&self, t0: MonoNanos) -> Progress {
        let ttft = self
            .state
            .metrics
            .get(StatusClass::Successful, Metric::Ttft);
        Progress {
            index: self.plan.index,
            strategy: self.plan.strategy,
            elapsed: MonoNanos::now().since(t0),
            max_seconds: self.plan.limits.max_seconds,
            max_requests: self
                .plan
                .limits
                .max_requests
                .map(|m| self.plan.shard.share(m)),
            counts: self.state.counts,
            output_tokens: self.state.measured.output_tokens,
            ttft_p50_ms: ttft
                .filter(|h| !h.is_empty())
                .map(|h| h.value_at_quantile(0.5) as f64 / 1000.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn track(exit: &str, signaled: bool) -> Track {
        Track {
            pid: 1,
            writer: None,
            finished: false,
            closed: true,
            exit: Some(exit.into()),
            signaled,
            ended: false,
            killed: false,
            failure: None,
            hung: None,
            ipc_error: None,
            last_seen: Instant::now(),
        }
    }

    #[test]
    fn a_signal_mid_frame_is_reported_as_the_signal() {
        let cut = "frame truncated: 12 of 300 bytes".to_string();
        let killed = Track {
            ipc_error: Some(cut.clone()),
            ..track("signal 9", true)
        };
        assert_eq!(death_reason(3, &killed), "worker 3 died: signal 9");
        // Without a signal, the IPC error is what there is to say.
        let broken = Track {
            ipc_error: Some(cut),
            ..track("exit code 1", false)
        };
        assert_eq!(
            death_reason(3, &broken),
            "worker 3 failed: IPC channel failed: frame truncated: 12 of 300 bytes (exit code 1)"
        );
        assert_eq!(
            death_reason(3, &track("exit code 1", false)),
            "worker 3 died: exit code 1"
        );
    }

    #[test]
    fn the_coordinators_verdict_and_the_workers_word_come_before_the_signal() {
        let hung = Track {
            hung: Some("hung (no heartbeat for 2s)".into()),
            ..track("signal 9", true)
        };
        assert_eq!(
            death_reason(0, &hung),
            "worker 0 failed: hung (no heartbeat for 2s)"
        );
        let failed = Track {
            failure: Some("cannot open the dataset".into()),
            ..track("exit code 1", false)
        };
        assert_eq!(
            death_reason(0, &failed),
            "worker 0 failed: cannot open the dataset"
        );
    }
}
