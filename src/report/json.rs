//! The JSON report: `schema_version`, metadata, resolved args (secrets redacted), target,
//! and one entry per benchmark. Documented in docs/report.md.

use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::profiles::CapacityOutcome;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// Bumped on every incompatible change to the report's shape.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// The host the client ran on.
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
}

impl HostInfo {
    /// Reads the host's description (best effort: unknown fields stay empty).
    pub fn collect() -> Self {
        let mut info = HostInfo {
            hostname: sysinfo::System::host_name().unwrap_or_default(),
            os: sysinfo::System::long_os_version().unwrap_or_default(),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            ..HostInfo::default()
        };
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
    /// The answer of `--profile capacity`, with every probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityOutcome>,
}

/// Writes `bytes` to `path` atomically: a reader sees the old file or the new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report".into());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

impl Report {
    /// Writes the report as pretty JSON, atomically.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        write_atomic(path, &bytes)
    }
}
