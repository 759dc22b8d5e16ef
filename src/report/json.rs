//! The JSON report: `schema_version`, metadata, resolved args (secrets redacted), target,
//! and one entry per benchmark. Documented in docs/report.md.

use super::requests::RequestSamples;
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::profiles::CapacityOutcome;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Bumped on every incompatible change to the report's shape.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// The host the client ran on. Every fact is best effort: one that cannot be read is
/// empty (the original five) or absent (the rest, which older reports lack too).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Host name.
    pub hostname: String,
    /// Operating system and version.
    pub os: String,
    /// CPU model.
    pub cpu: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// Physical memory, bytes.
    pub memory_bytes: u64,
    /// Kernel release (`uname -r`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// CPU frequency governor of cpu0 (`performance`, `powersave`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_governor: Option<String>,
    /// Soft limit on open files (RLIMIT_NOFILE): the connections one process may hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files_soft: Option<u64>,
    /// Hard limit on open files (RLIMIT_NOFILE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files_hard: Option<u64>,
    /// The kernel's clock source (`tsc`, `kvm-clock`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_source: Option<String>,
    /// Whether the kernel reports the wall clock as NTP-synchronised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntp_synchronized: Option<bool>,
    /// Whether the pacer thread could run real-time (root, `CAP_SYS_NICE` or an
    /// `RLIMIT_RTPRIO` above 0): without it, dispatch lag on a busy core is the kernel's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime_pacer: Option<bool>,
}

/// The first line of a small sysfs file, trimmed; `None` when unreadable or empty.
fn sysfs_line(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_string())
}

impl HostInfo {
    /// Reads the host's description (best effort: unknown fields stay empty or absent).
    pub fn collect() -> Self {
        let mut info = HostInfo {
            hostname: sysinfo::System::host_name().unwrap_or_default(),
            os: sysinfo::System::long_os_version().unwrap_or_default(),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: sysinfo::System::kernel_version()
                .ok()
                .filter(|k| !k.is_empty()),
            cpu_governor: sysfs_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
            clock_source: sysfs_line(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            ),
            ntp_synchronized: crate::clock_sync::ntp_synchronised(),
            realtime_pacer: Some(llmsurge_worker::sched::realtime_allowed()),
            ..HostInfo::default()
        };
        if let Ok((soft, hard)) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        {
            info.open_files_soft = Some(soft);
            info.open_files_hard = Some(hard);
        }
        if let Ok(mut sys) = sysinfo::System::new() {
            sys.refresh_memory();
            sys.refresh_cpu_list(sysinfo::CpuRefreshKind::nothing());
            info.memory_bytes = sys.total_memory();
            info.cpu = sys
                .cpus()
                .first()
                .map(|c| c.brand().trim().to_string())
                .unwrap_or_default();
        }
        info
    }
}

/// Facts about the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// Always "llmsurge".
    pub tool: String,
    /// The tool's version.
    pub version: String,
    /// The client host.
    pub host: HostInfo,
    /// Run start, Unix seconds.
    pub start_time: f64,
    /// Last update of this report, Unix seconds.
    pub end_time: f64,
    /// All planned benchmarks finished (false while running or after an interruption).
    pub complete: bool,
    /// The user interrupted the run.
    pub interrupted: bool,
    /// Free-form facts the user attached with `--output-extras` (e.g. `{"gpu": "H100"}`).
    #[serde(default)]
    pub extras: serde_json::Map<String, serde_json::Value>,
    /// The part of a multi-host load this report holds (`--shard K/N`); absent for a
    /// single host and in a merged report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<llmsurge_proto::Shard>,
    /// The agreed wall-clock start (`--start-at`), Unix seconds, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<f64>,
    /// `--insecure`: the client did not verify the server's TLS certificate (absent when
    /// it did).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tls_insecure: bool,
    /// A merged report (`benchmark merge`): the shards it holds and those missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<MergeInfo>,
    /// `--label`: the run's name in pictures of several runs (`benchmark compare`,
    /// `plot runs`); absent without it (the file name stands in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// What `benchmark merge` combined into a report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MergeInfo {
    /// N of the shards' `--shard K/N`.
    pub count: u32,
    /// The indices merged, ascending.
    pub shards: Vec<u32>,
    /// The indices absent (only with `--allow-partial`): the report holds part of the load.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<u32>,
    /// Each merged shard's host, in the order of `shards`.
    pub hosts: Vec<HostInfo>,
}

/// The target as resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetInfo {
    /// Base URL.
    pub base_url: String,
    /// The model requested.
    pub model: String,
    /// It was the built-in mock server.
    pub mock: bool,
    /// What the target check and the probe before the run found (an unhealthy `/health`
    /// on a server whose models answer, a refused field dropped, prompt lengths the
    /// server counts differently), one sentence each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`REPORT_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// About the run.
    pub metadata: Metadata,
    /// The resolved arguments (API keys redacted).
    pub args: serde_json::Value,
    /// The target.
    pub target: TargetInfo,
    /// One entry per benchmark, in run order.
    pub benchmarks: Vec<BenchmarkResult>,
    /// Per-request records kept by `--sample-requests`, one entry per benchmark.
    #[serde(default)]
    pub request_samples: Vec<RequestSamples>,
    /// What each metric key measures, one line each (absent from reports written
    /// before it was added).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub metric_definitions: std::collections::BTreeMap<String, String>,
    /// The answer of `--profile capacity`, with every probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityOutcome>,
    /// Why the run is invalid (exit 4), one line per rule that fired with its figures;
    /// absent from a valid run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid_run: Vec<String>,
    /// `--repeat`: per benchmark position, the run-to-run statistics of its headline
    /// figures and how many runs passed its SLO; absent for a single run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub across_runs: Vec<super::across_runs::AcrossRuns>,
    /// The knee of each latency-vs-achieved-rate curve of a run of several benchmarks
    /// (docs/report.md); absent where there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knees: Vec<super::knee::Knee>,
    /// Per benchmark, the requests the timeline chart draws (an evenly spread selection
    /// of at most 2,000 over the run); absent from reports written before it was added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<super::timeline::BenchmarkTimeline>,
    /// `--slice`: per benchmark, its percentiles and rates per slice of the measured
    /// window; absent without the flag.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<super::slices::BenchmarkSlices>,
    /// The server's fingerprint, read before the load and after it (docs/report.md);
    /// absent from reports written before it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_fingerprint:
        Option<llmsurge_coordinator::server_metrics::fingerprint::ServerFingerprint>,
}

pub use crate::safe_file::write_atomic;

/// Why a saved report could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a report of a version this build reads.
    #[error("{path}: not an llmsurge JSON report: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What the parser found, with line and column.
        message: String,
    },
    /// The report was written by a newer llmsurge.
    #[error(
        "{path}: report schema_version {found} is newer than this llmsurge reads ({supported}); upgrade llmsurge"
    )]
    Version {
        /// The file.
        path: String,
        /// The file's version.
        found: u64,
        /// The version this build writes.
        supported: u32,
    },
}

/// The definitions of every metric key a report uses, for `metric_definitions`.
pub fn metric_definitions() -> std::collections::BTreeMap<String, String> {
    llmsurge_proto::Metric::ALL
        .iter()
        .map(|m| (m.key().to_string(), m.description().to_string()))
        .collect()
}

impl Report {
    /// Writes the report as pretty JSON, atomically.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        write_atomic(path, &self.to_json()?)
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> std::io::Result<Vec<u8>> {
        serde_json::to_vec_pretty(self).map_err(std::io::Error::other)
    }

    /// Reads a JSON report written by this or an earlier llmsurge.
    pub fn load(path: &Path) -> Result<Report, LoadError> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: shown.clone(),
            source,
        })?;
        let parse_error = |e: serde_json::Error| LoadError::Parse {
            path: shown.clone(),
            message: e.to_string(),
        };
        // The version first, so a newer report gets the right message rather than a
        // complaint about a field it renamed.
        let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(parse_error)?;
        match value
            .get("schema_version")
            .and_then(serde_json::Value::as_u64)
        {
            Some(found) if found > u64::from(REPORT_SCHEMA_VERSION) => {
                return Err(LoadError::Version {
                    path: shown,
                    found,
                    supported: REPORT_SCHEMA_VERSION,
                });
            }
            _ => {}
        }
        // Parse the bytes again (not the Value) so errors carry line and column.
        serde_json::from_slice(&bytes).map_err(parse_error)
    }
}
