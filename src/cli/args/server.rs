//! `benchmark run` flags: the server's own metrics and profiler (docs/server-metrics.md).

use crate::cli::values::{parse_positive_duration, parse_reset_cache};
use clap::Args;
use std::time::Duration;

/// The server's own metrics and profiler.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Server metrics")]
pub struct ServerMetricsArgs {
    /// Scrape the server's Prometheus metrics from this URL during every benchmark, or
    /// `off`. Default: the target's /metrics, when it answers at run start. A user and
    /// password in the URL are sent as Basic auth and never reported.
    #[arg(long, env = "LLMSURGE_SERVER_METRICS", value_name = "URL|off")]
    pub server_metrics: Option<String>,

    /// Time between two scrapes (100ms or more; each scrape is bounded by this, within
    /// 1s to 5s). Default: 1s.
    #[arg(long, env = "LLMSURGE_SERVER_METRICS_INTERVAL", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub server_metrics_interval: Option<Duration>,

    /// Also keep the series whose names match this regular expression (e.g.
    /// '^vllm:(iteration|request_)'), under their own names, summed over labels.
    #[arg(long, env = "LLMSURGE_SERVER_METRICS_INCLUDE", value_name = "REGEX")]
    pub server_metrics_include: Option<String>,

    /// POST /start_profile to the target before each benchmark and /stop_profile after
    /// it (vLLM's and SGLang's profiler endpoints); a failure is a warning.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_PROFILE_SERVER")]
    pub profile_server: bool,

    /// Empty the server's caches before every benchmark but the first: `auto` (vLLM:
    /// POST /reset_prefix_cache and /reset_mm_cache; SGLang: /flush_cache; chosen from
    /// its /metrics), `none`, or a path to POST. Default: auto for the sweep and
    /// capacity profiles, none otherwise.
    #[arg(long, env = "LLMSURGE_RESET_CACHE", value_name = "auto|none|PATH", value_parser = parse_reset_cache)]
    pub reset_cache: Option<String>,

    /// Sample GPU power, utilisation and memory during every benchmark: `nvidia-smi`
    /// (run on this host) or a DCGM exporter's Prometheus URL. Every
    /// --server-metrics-interval (default 1s). Reports energy per output token.
    #[arg(long, env = "LLMSURGE_GPU_METRICS", value_name = "nvidia-smi|URL", value_parser = parse_gpu_metrics)]
    pub gpu_metrics: Option<String>,
}

/// `--gpu-metrics`: `nvidia-smi` or an http(s) URL.
fn parse_gpu_metrics(s: &str) -> Result<String, String> {
    if s == "nvidia-smi" || s.starts_with("http://") || s.starts_with("https://") {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not nvidia-smi or an http(s):// URL of a DCGM exporter"
        ))
    }
}
