//! `RunReporter`: the observer that follows a run and produces its outputs.
//!
//! It shows progress, streams `--request-log`, samples requests for the JSON, and after
//! every benchmark rewrites every report file atomically, so an interrupted or crashed
//! run keeps each benchmark that finished. At the end it prints the console summary.

use super::console;
use super::json::{HostInfo, Metadata, REPORT_SCHEMA_VERSION, Report, TargetInfo};
use super::outputs::{Output, write_files};
use super::progress::{ProgressMode, ProgressView};
use super::requests::{RequestEntry, RequestLog, RequestSampler};
use super::slices::SliceCollector;
use super::timeline::TimelineSampler;
use llmsurge_coordinator::profiles::CapacityOutcome;
use llmsurge_coordinator::{BenchmarkResult, Progress, RunObserver, Strategy};
use llmsurge_proto::{ClockAnchor, RequestRecord};
use serde::Serialize;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// Reporting settings of a run, resolved from the output flags.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReportSettings {
    /// Facts stored in the report's metadata (`--output-extras`).
    pub extras: serde_json::Map<String, serde_json::Value>,
    /// Per-request records kept per status and benchmark in the JSON (`--sample-requests`).
    pub sample_requests: usize,
    /// Where every request's record is streamed (`--request-log`), resolved against the
    /// output directory.
    pub request_log: Option<PathBuf>,
    /// `--label`: the run's name in pictures of several runs.
    pub label: Option<String>,
    /// `--slice`: cut each benchmark's measured window into slices of this length.
    pub slice: Option<std::time::Duration>,
    /// `--disable-progress`.
    pub disable_progress: bool,
    /// `--disable-console-outputs`.
    pub disable_console_outputs: bool,
}

/// What the run was, for the report's header.
#[derive(Debug)]
pub struct RunInfo {
    /// The resolved arguments, secrets already redacted.
    pub args: serde_json::Value,
    /// The target.
    pub target: TargetInfo,
    /// Run start, Unix seconds.
    pub started: f64,
    /// Benchmarks planned (0 when unknown in advance).
    pub planned: usize,
    /// The run seed (request sampling is seeded from it).
    pub seed: u64,
    /// This host's part of a multi-host load (`--shard K/N` with N > 1).
    pub shard: Option<llmsurge_proto::Shard>,
    /// `--start-at`, Unix seconds.
    pub start_at: Option<f64>,
    /// `--insecure`: TLS certificates were not verified.
    pub tls_insecure: bool,
    /// `--lora`: the split's model names, in order (a record's `model` indexes them).
    pub models: Vec<String>,
    /// The tag of the run's request ids (`--request-id-header`); `None` when none are sent.
    pub request_id: Option<String>,
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Follows a run and writes its outputs.
#[derive(Debug)]
pub struct RunReporter {
    report: Report,
    outputs: Vec<Output>,
    output_dir: PathBuf,
    console_summary: bool,
    messages: bool,
    planned: usize,
    progress: ProgressView,
    anchor: ClockAnchor,
    current: u32,
    sampler: Option<RequestSampler>,
    /// The requests the timeline chart draws.
    timeline: TimelineSampler,
    /// `--slice`: the measured requests of the running benchmark.
    slices: Option<SliceCollector>,
    log: Option<RequestLog>,
    /// The request log met a write error and stopped.
    log_failed: bool,
    write_failed: bool,
    /// Files whose last write succeeded (the only ones "report written" may name).
    written: Vec<PathBuf>,
    /// Write failures already printed, so a file that fails after every benchmark is
    /// reported once.
    reported_failures: Vec<String>,
    /// `--lora`: the split's model names (records carry an index into them).
    models: Vec<String>,
    /// The tag of the run's request ids, when they are sent.
    request_id: Option<String>,
    /// The current benchmark's request-id prefix (the tag and its index).
    request_id_prefix: Option<String>,
    /// `--repeat`: the run under way (from 0); `None` without repeats.
    run: Option<u32>,
    /// The running benchmark's seed, which its requests' trace ids derive from.
    trace_seed: u64,
    /// `--outputs otlp`: the spans, streamed.
    otlp: Option<super::otlp::OtlpExport>,
    /// The OTLP file met a write error and stopped.
    otlp_failed: bool,
    /// `--repeat`: benchmarks of the runs before this one, so progress counts on
    /// (`[4/6]` in the second run of three benchmarks) instead of starting again.
    progress_offset: u32,
}

impl RunReporter {
    /// A reporter; `log` is the already-created `--request-log` file.
    pub fn new(
        info: RunInfo,
        outputs: Vec<Output>,
        output_dir: PathBuf,
        settings: &ReportSettings,
        log: Option<RequestLog>,
    ) -> Self {
        let messages = !settings.disable_console_outputs;
        Self {
            report: Report {
                schema_version: REPORT_SCHEMA_VERSION,
                metadata: Metadata {
                    tool: "llmsurge".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    host: HostInfo::collect(),
                    start_time: info.started,
                    end_time: info.started,
                    complete: false,
                    interrupted: false,
                    extras: settings.extras.clone(),
                    shard: info.shard,
                    start_at: info.start_at,
                    tls_insecure: info.tls_insecure,
                    merged: None,
                    label: settings.label.clone(),
                },
                args: info.args,
                target: info.target,
                benchmarks: Vec::new(),
                request_samples: Vec::new(),
                metric_definitions: super::json::metric_definitions(),
                capacity: None,
                invalid_run: Vec::new(),
                across_runs: Vec::new(),
                knees: Vec::new(),
                timeline: Vec::new(),
                slices: Vec::new(),
                server_fingerprint: None,
            },
            console_summary: messages && outputs.contains(&Output::Console),
            outputs,
            output_dir,
            messages,
            planned: info.planned,
            progress: ProgressView::new(
                ProgressMode::detect(settings.disable_progress),
                messages,
                info.planned,
            ),
            anchor: ClockAnchor::now(),
            current: 0,
            sampler: (settings.sample_requests > 0)
                .then(|| RequestSampler::new(settings.sample_requests, info.seed)),
            // The run's budget shared among the planned benchmarks (all of it to each
            // when their number is unknown: the chart samples the whole run again).
            slices: settings.slice.map(|d| SliceCollector::new(d.as_secs_f64())),
            timeline: TimelineSampler::new(
                super::timeline::MAX_DRAWN / info.planned.clamp(1, super::timeline::MAX_DRAWN),
            ),
            log,
            log_failed: false,
            write_failed: false,
            written: Vec::new(),
            reported_failures: Vec::new(),
            models: info.models,
            request_id: info.request_id,
            request_id_prefix: None,
            run: None,
            trace_seed: 0,
            otlp: None,
            otlp_failed: false,
            progress_offset: 0,
        }
    }

    /// Streams every request's span into `export` (`--outputs otlp`).
    pub fn set_otlp(&mut self, mut export: super::otlp::OtlpExport) {
        export.set_anchor(self.anchor);
        self.otlp = Some(export);
    }

    fn flush_otlp(&mut self) {
        let Some(otlp) = &mut self.otlp else { return };
        let message = match otlp.finish_benchmark() {
            Ok(()) => return,
            Err(e) => format!(
                "error: cannot write the OTLP spans {}: {e}",
                otlp.path().display()
            ),
        };
        // The file stops at its first error: say so once.
        if !self.otlp_failed {
            self.progress.println(&message);
        }
        self.otlp_failed = true;
        self.write_failed = true;
    }

    /// Whether a report file or the request log could not be written.
    pub fn write_failed(&self) -> bool {
        self.write_failed
    }

    /// The report as it stands.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Records the answer of a capacity search (written by [`RunReporter::finish`]).
    pub fn set_capacity(&mut self, capacity: Option<CapacityOutcome>) {
        self.report.capacity = capacity;
    }

    /// `--repeat`: the benchmarks that follow belong to run `run` (from 0), whose request
    /// ids carry the tag `request_id`.
    pub fn start_run(&mut self, run: u32, request_id: Option<String>) {
        self.progress_offset = self.report.benchmarks.len() as u32;
        self.run = Some(run);
        self.request_id = request_id;
    }

    /// The server's fingerprint (before the load, then with the reading after it).
    pub fn set_server_fingerprint(
        &mut self,
        fingerprint: Option<llmsurge_coordinator::server_metrics::fingerprint::ServerFingerprint>,
    ) {
        self.report.server_fingerprint = fingerprint;
    }

    /// Why the run is invalid (see `invalid_run` in the report); empty when it is not.
    pub fn set_invalid_run(&mut self, reasons: Vec<String>) {
        self.report.invalid_run = reasons;
    }

    /// The files of a record per request this run writes.
    fn record_files(&self) -> Vec<&'static str> {
        [
            self.log.as_ref().map(|_| "the request log"),
            self.otlp.as_ref().map(|_| "the OTLP file"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn flush_log(&mut self) {
        let Some(log) = &mut self.log else { return };
        let path = log.path().display().to_string();
        let message = match log.flush() {
            Ok(()) => return,
            Err(e) => format!("error: cannot write the request log {path}: {e}"),
        };
        // The log stops at its first error: say so once.
        if !self.log_failed {
            self.progress.println(&message);
        }
        self.log_failed = true;
        self.write_failed = true;
    }

    fn write(&mut self) {
        self.report.metadata.end_time = unix_now();
        self.report.across_runs = super::across_runs::compute(
            &self.report.benchmarks,
            &super::across_runs::run_seeds(&self.report.args),
        );
        self.report.knees = super::knee::knees(&self.report.benchmarks);
        let (written, failed) = write_files(&self.report, &self.outputs, &self.output_dir);
        self.written = written;
        for e in failed {
            self.write_failed = true;
            let line = format!("error: {e}");
            if !self.reported_failures.contains(&line) {
                self.progress.println(&line);
                self.reported_failures.push(line);
            }
        }
    }

    /// The run is over: final report files, the console summary, where things went.
    pub fn finish(&mut self, benchmarks: &[BenchmarkResult], interrupted: bool) {
        self.progress.close();
        self.flush_log();
        self.flush_otlp();
        self.report.benchmarks = benchmarks.to_vec();
        let files = self.record_files();
        for b in &mut self.report.benchmarks {
            if let Some(line) = unlogged(&files, b).filter(|l| !b.client.warnings.contains(l)) {
                b.client.warnings.push(line);
            }
        }
        self.report.metadata.interrupted = interrupted;
        self.report.metadata.complete =
            !interrupted && (self.planned == 0 || benchmarks.len() == self.planned);
        self.write();
        if self.console_summary && !benchmarks.is_empty() {
            crate::stdout::println(&console::summary(benchmarks, self.report.capacity.as_ref()));
            for block in super::console_blocks(&self.report) {
                crate::stdout::println(&block);
            }
        }
        if self.messages {
            for path in &self.written {
                eprintln!("{}", crate::report::written_message(path));
            }
            if let Some(o) = self.otlp.as_ref().filter(|_| !self.otlp_failed) {
                eprintln!(
                    "OTLP spans written to {} ({} spans)",
                    o.path().display(),
                    o.spans()
                );
            }
            if let Some(log) = &self.log {
                if self.log_failed {
                    // The error was said when it came; this is what the file holds.
                    eprintln!(
                        "error: the request log {} holds {} of the run's {} requests (cut short by a write error)",
                        log.path().display(),
                        log.written(),
                        log.lines()
                    );
                } else {
                    eprintln!(
                        "request log written to {} ({} requests)",
                        log.path().display(),
                        log.lines()
                    );
                }
            }
        }
    }
}

/// The requests of `result` that dead workers took with them unreported (counted, but
/// with no record: their slots and times are unknown), when the run writes `files` of
/// records (`--request-log`, `--outputs otlp`): the sentence saying how many of them
/// the files lack, and why.
fn unlogged(files: &[&str], result: &BenchmarkResult) -> Option<String> {
    let a = &result.audit;
    let n = a.unreported + a.unsent_lost;
    if n == 0 || files.is_empty() {
        return None;
    }
    Some(format!(
        "{n} {} of dead workers {} counted but not in {}: {} sent and {} held unsent that the worker never reported, so their slots and times are unknown (audit.unreported, audit.unsent_lost)",
        if n == 1 { "request" } else { "requests" },
        if n == 1 { "is" } else { "are" },
        files.join(" nor in "),
        a.unreported,
        a.unsent_lost,
    ))
}

/// One stderr line per error kind of a benchmark: its count and a sample message.
pub fn error_lines(result: &BenchmarkResult, planned: usize) -> Vec<String> {
    let position = if planned > 0 {
        format!("{}/{planned}", result.index + 1)
    } else {
        format!("{}", result.index + 1)
    };
    let label = result.strategy.to_string();
    result
        .errors
        .iter()
        .map(|e| {
            let sample = e
                .samples
                .first()
                .map(|s| format!(" (e.g. {})", one_line(s)))
                .unwrap_or_default();
            format!(
                "error: [{position}] {label}: {} requests failed with {}{sample}",
                e.count, e.kind
            )
        })
        .collect()
}

/// A server's message on one line (error bodies may hold newlines), cut to a readable length.
fn one_line(message: &str) -> String {
    const MAX_CHARS: usize = 300;
    let joined = message.split_whitespace().collect::<Vec<_>>().join(" ");
    match joined.char_indices().nth(MAX_CHARS) {
        Some((at, _)) => format!("{}…", &joined[..at]),
        None => joined,
    }
}

impl RunObserver for RunReporter {
    fn benchmark_seed(&mut self, seed: u64) {
        self.trace_seed = seed;
    }

    fn benchmark_started(&mut self, index: u32, strategy: &Strategy) {
        self.current = index;
        if let Some(o) = &mut self.otlp {
            o.start(index, self.trace_seed, self.run);
        }
        self.request_id_prefix = self
            .request_id
            .as_deref()
            .map(|tag| llmsurge_proto::request_id_prefix(tag, index));
        if let Some(s) = &mut self.sampler {
            s.start(index);
        }
        self.timeline.start();
        if let Some(s) = &mut self.slices {
            s.start();
        }
        self.progress
            .started(index + self.progress_offset, strategy);
    }

    fn progress(&mut self, p: &Progress) {
        if let Some(o) = &mut self.otlp {
            o.tick();
        }
        if self.progress_offset == 0 {
            self.progress.update(p);
        } else {
            let mut p = p.clone();
            p.index += self.progress_offset;
            self.progress.update(&p);
        }
    }

    fn record(&mut self, record: &RequestRecord) {
        let trace = llmsurge_proto::TraceIds::of_record(self.trace_seed, record);
        let model = record
            .model
            .and_then(|i| self.models.get(usize::from(i)))
            .map(String::as_str);
        self.timeline.offer(record, &self.anchor);
        if let Some(s) = &mut self.slices {
            s.offer(record, &self.anchor);
        }
        if let Some(s) = &mut self.sampler {
            s.offer(
                record,
                &self.anchor,
                model,
                self.request_id_prefix.as_deref(),
                trace,
            );
        }
        if let Some(o) = &mut self.otlp {
            o.record(record);
        }
        if let Some(log) = &mut self.log {
            log.write(
                &RequestEntry {
                    model: model.map(str::to_string),
                    request_id: self
                        .request_id_prefix
                        .as_ref()
                        .map(|prefix| format!("{prefix}{}", record.slot)),
                    run: self.run,
                    ..RequestEntry::new(self.current, record, &self.anchor)
                }
                .with_trace(trace),
            );
        }
    }

    fn benchmark_finished(&mut self, result: &BenchmarkResult) {
        // With --repeat, positions count on across the runs (`[4/6]`).
        let mut shown = result.clone();
        shown.index += self.progress_offset;
        self.progress.finished(&shown);
        // Failures reach the terminal whatever `--outputs` and the console flags say: a
        // run whose requests all failed must not print only "report written".
        for line in error_lines(&shown, self.planned) {
            self.progress.println(&line);
        }
        // So is a load lighter than asked: every figure of the benchmark flatters the
        // server.
        if let Some(w) = shown.output_lengths.as_ref().and_then(|o| o.warning()) {
            self.progress
                .println(&format!("warning: {}: {w}", shown.strategy));
        }
        self.flush_log();
        self.flush_otlp();
        if let Some(s) = &mut self.sampler {
            let mut samples = s.finish();
            samples.benchmark = result.index;
            self.report.request_samples.push(samples);
        }
        self.report
            .timeline
            .push(self.timeline.finish(result.index, result.start_time));
        if let Some(slices) = self.slices.as_mut().and_then(|s| s.finish(result.index)) {
            self.report.slices.push(slices);
        }
        let mut result = result.clone();
        result.run = self.run;
        if let Some(line) = unlogged(&self.record_files(), &result) {
            self.progress
                .println(&format!("warning: {}: {line}", shown.strategy));
            result.client.warnings.push(line);
        }
        self.report.benchmarks.push(result);
        self.write();
    }

    fn notice(&mut self, message: &str) {
        self.progress.println(message);
    }
}
