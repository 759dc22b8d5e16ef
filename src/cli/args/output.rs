//! `benchmark run` flags: reports.

use clap::Args;
use std::path::PathBuf;

/// Reports.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Outputs: aliases json, csv, html, yaml, console, junit, md, png, svg (every chart
    /// of the HTML page as its own image, named after the chart), llmd (the llm-d
    /// Benchmark Report v0.2, one benchmark_report_v0.2,_N.yaml per benchmark), otlp
    /// (every request's span as OTLP JSON, spans.otlp.json, with its traceparent's ids),
    /// or file names whose extension picks the format (run.json, summary.csv, page.html,
    /// run.yaml, spans.otlp.json); comma-separated or repeated. Files go under
    /// --output-dir.
    #[arg(
        long,
        env = "LLMSURGE_OUTPUTS",
        value_delimiter = ',',
        default_value = "json,csv,html,console",
        help_heading = "Output"
    )]
    pub outputs: Vec<String>,

    /// Directory for report files.
    #[arg(
        long,
        env = "LLMSURGE_OUTPUT_DIR",
        default_value = ".",
        help_heading = "Output"
    )]
    pub output_dir: PathBuf,

    /// A JSON object stored in the report's metadata, e.g. '{"gpu": "H100", "build": "abc123"}'.
    #[arg(long, env = "LLMSURGE_OUTPUT_EXTRAS", value_name = "JSON")]
    pub output_extras: Option<String>,

    /// Per-request records kept in the JSON report, per status and benchmark (a uniform
    /// sample; 0 keeps none).
    #[arg(
        long,
        env = "LLMSURGE_SAMPLE_REQUESTS",
        default_value_t = 20,
        value_name = "N"
    )]
    pub sample_requests: u32,

    /// The run's name in pictures of several runs (`benchmark compare`, `plot runs`);
    /// without it, the report's file name.
    #[arg(long, env = "LLMSURGE_LABEL", value_name = "NAME")]
    pub label: Option<String>,

    /// Cut each benchmark's measured window into slices of this length (e.g. 10s): TTFT,
    /// ITL, TPOT and e2e p50/p90/p99 and the rates per slice, in the JSON, a CSV of its
    /// own (`<csv name>.slices.csv`) and a chart per metric.
    #[arg(long, env = "LLMSURGE_SLICE", value_parser = crate::cli::values::parse_positive_duration, value_name = "DURATION")]
    pub slice: Option<std::time::Duration>,

    /// Stream every request's record to this JSON Lines file as it completes. A relative
    /// path is relative to --output-dir, NOT the working directory (like the --outputs
    /// files: each sweep point, shard or repeat keeps its own); an absolute one is used
    /// as is.
    #[arg(long, env = "LLMSURGE_REQUEST_LOG", value_name = "FILE.jsonl")]
    pub request_log: Option<PathBuf>,

    /// No live progress view or periodic progress lines.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_DISABLE_PROGRESS")]
    pub disable_progress: bool,

    /// Nothing on the console but errors and warnings: no summary tables, no progress,
    /// no per-benchmark lines.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_DISABLE_CONSOLE_OUTPUTS")]
    pub disable_console_outputs: bool,

    /// Print the resolved plan and exit without sending anything.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_DRY_RUN")]
    pub dry_run: bool,
}
