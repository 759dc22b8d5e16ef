//! The flags of `llmsurge sweep` (serve, serve-sla, plot, plot-pareto) and of the
//! hidden `__serve-guard`: parsed and typed only. The sweep itself, which runs them,
//! is `crate::sweep`; the CLI hands it the parsed command and never names it.

use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// `llmsurge sweep serve` flags.
#[derive(Debug, Args)]
pub struct SweepServeArgs {
    /// The server command, run by `sh -c` in its own process group once per serve
    /// configuration: `{port}` is a free port, `{key}` a serve parameter; other keys
    /// become `--key value` (true: a bare flag; false: `--no-key`). Keys must be plain
    /// flag names; each value is quoted once. E.g. 'vllm serve MODEL --port {port}'.
    /// Without it the sweep runs against --target.
    #[arg(long, env = "LLMSURGE_SERVE_CMD", value_name = "TEMPLATE")]
    pub serve_cmd: Option<String>,

    /// Server configurations: a JSON or YAML list of objects (one server each), or an
    /// object of named ones ({"NAME": {...}}: names become point and folder names).
    #[arg(long, env = "LLMSURGE_SERVE_PARAMS", value_name = "FILE")]
    pub serve_params: Option<PathBuf>,

    /// Benchmark configurations: a JSON or YAML list (or object of named ones) of
    /// objects whose keys are `benchmark run` flag names with _ (e.g. {"profile":
    /// "concurrent", "rate": 8}); a key overrides the same flag after --.
    #[arg(long, env = "LLMSURGE_BENCH_PARAMS", value_name = "FILE")]
    pub bench_params: Option<PathBuf>,

    /// Serve and bench keys that move together (vLLM's form, e.g.
    /// max_num_seqs=max_concurrency,max_model_len=max_tokens): only the points whose
    /// serve and bench configurations hold both keys with equal values run.
    #[arg(
        long,
        env = "LLMSURGE_LINK_VARS",
        value_name = "SERVE_KEY=BENCH_KEY,..."
    )]
    pub link_vars: Option<String>,

    /// The server's base URL. With --serve-cmd it may hold {port} (default
    /// http://127.0.0.1:{port}); without, it is required.
    #[arg(long, env = "LLMSURGE_TARGET", value_name = "URL")]
    pub target: Option<String>,

    /// How long a started server may take to answer /health and list a model on
    /// /v1/models.
    #[arg(long, env = "LLMSURGE_READY_TIMEOUT", value_parser = crate::cli::values::parse_duration, default_value = "600s", value_name = "DURATION")]
    pub ready_timeout: Duration,

    /// After SIGTERM to a server's process group, how long before SIGKILL.
    #[arg(long, env = "LLMSURGE_STOP_GRACE", value_parser = crate::cli::values::parse_duration, default_value = "10s", value_name = "DURATION")]
    pub stop_grace: Duration,

    /// Run each point N times (`benchmark run --repeat N`: its run-to-run statistics;
    /// the sweep report shows the means).
    #[arg(long, visible_alias = "num-runs", env = "LLMSURGE_REPEAT", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub repeat: u32,

    /// A shell command run after each benchmark of a server (e.g. a cache reset).
    #[arg(long, env = "LLMSURGE_AFTER_BENCH_CMD", value_name = "COMMAND")]
    pub after_bench_cmd: Option<String>,

    /// Between two benchmarks of one server (when --after-bench-cmd is not given), empty
    /// its caches: auto (vLLM: /reset_prefix_cache and /reset_mm_cache; SGLang:
    /// /flush_cache; from its /metrics), none, or a path to POST. Given, each point's
    /// benchmark run gets it too.
    #[arg(long, env = "LLMSURGE_RESET_CACHE", default_value = "auto", value_name = "auto|none|PATH", value_parser = crate::cli::values::parse_reset_cache)]
    pub reset_cache: String,

    /// Skip points whose reports are complete (from an earlier run into --output-dir).
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_RESUME")]
    pub resume: bool,

    /// With --resume: a complete point measured against a server that differs from the
    /// one this sweep starts (its fingerprint: model, engine version, cache
    /// configuration) runs again, unless its field is named here (or `all`).
    #[arg(
        long,
        env = "LLMSURGE_SWEEP_ALLOW_SERVER_CHANGE",
        value_delimiter = ',',
        value_name = "FIELD"
    )]
    pub allow_server_change: Vec<String>,

    /// Print every server command and every point's benchmark plan; run nothing.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_DRY_RUN")]
    pub dry_run: bool,

    /// Directory of the sweep: one directory per point and the sweep report.
    #[arg(
        short = 'o',
        long,
        env = "LLMSURGE_OUTPUT_DIR",
        default_value = ".",
        value_name = "DIR"
    )]
    pub output_dir: PathBuf,

    /// The sweep page's curves: each headline figure against these parameters
    /// (serve.KEY, bench.KEY, a bare KEY, or `server`; repeat or separate with commas).
    /// Default: a few figures against the parameters that vary within a server's curve
    /// (the load).
    #[arg(
        long,
        env = "LLMSURGE_CURVE_BY",
        value_name = "PARAM",
        value_delimiter = ','
    )]
    pub curve_by: Vec<String>,

    /// The points the sweep page's charts show: conditions KEY OP VALUE separated by
    /// commas, all of which must hold (OP: <=, >=, <, >, ==, !=; KEY a parameter or a
    /// figure), e.g. "max_num_seqs>=32,bench.profile==constant".
    #[arg(long, env = "LLMSURGE_FILTER", value_name = "CONDITIONS")]
    pub filter: Option<String>,

    /// GPUs per point for the Pareto front's tokens/s per GPU: a count, or the name of
    /// the parameter that holds it (e.g. tensor_parallel_size). Default: the GPU count
    /// --gpu-metrics saw, else the front is per server.
    #[arg(long, env = "LLMSURGE_GPUS", value_name = "N|PARAM")]
    pub gpus: Option<String>,

    /// The sweep page's charts (serve-sla: each SLA's probes) also as image files in
    /// DIR/charts/: png, svg or both.
    #[arg(
        long,
        env = "LLMSURGE_CHART_IMAGES",
        value_name = "png,svg",
        value_delimiter = ','
    )]
    pub chart_images: Vec<String>,

    /// Whether --reset-cache was given (not defaulted): then points get it too.
    #[arg(skip)]
    pub reset_cache_given: bool,

    /// `benchmark run` flags every point gets (before its own configuration's), after --.
    #[arg(last = true, value_name = "BENCHMARK RUN FLAGS")]
    pub common: Vec<String>,
}

/// `llmsurge sweep serve-sla` flags: those of `sweep serve`, and the SLAs.
#[derive(Debug, Args)]
pub struct SweepServeSlaArgs {
    /// The SLAs, each in the --slo grammar (all its checks must hold), e.g.
    /// 'e2e_p99<=2s' or 'ttft_p99<=500ms,tpot_p50<=20ms'. Repeat the flag, separate
    /// SLAs with ';', or name a JSON or YAML file holding a list of them: strings, or
    /// vLLM's objects ({"p99_e2el_ms": "<=2000"}).
    #[arg(long, env = "LLMSURGE_SLA_PARAMS", value_name = "SLA|FILE")]
    pub sla_params: Vec<String>,

    /// What the search varies: the request rate of constant-rate benchmarks, or the
    /// streams of concurrent ones (vLLM's request_rate and max_concurrency are
    /// accepted for them).
    #[arg(
        long,
        env = "LLMSURGE_SLA_VARIABLE",
        value_enum,
        default_value = "rate"
    )]
    pub sla_variable: SlaVariable,

    /// Stop when the passing and failing values are this close (a fraction; the
    /// capacity search's --capacity-precision).
    #[arg(long, env = "LLMSURGE_SLA_PRECISION", value_parser = crate::cli::values::parse_fraction, default_value = "5%", value_name = "FRACTION")]
    pub sla_precision: f64,

    /// The flags shared with `sweep serve`.
    #[command(flatten)]
    pub sweep: SweepServeArgs,
}

/// `--sla-variable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlaVariable {
    /// Requests per second (`--profile constant --rate R`).
    #[value(alias = "request_rate")]
    Rate,
    /// Concurrent streams (`--profile concurrent --rate N`).
    #[value(alias = "max_concurrency")]
    Concurrency,
}

/// `llmsurge sweep plot` flags.
#[derive(Debug, Args)]
pub struct SweepPlotArgs {
    /// The sweep's output directory (the one holding its sweep.json).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// The x axis: a figure (output_tokens_per_s, requests_per_s, ttft_p99, …) or a
    /// parameter (serve.KEY, bench.KEY or a bare KEY). vLLM: --var-x.
    #[arg(
        long,
        visible_alias = "var-x",
        env = "LLMSURGE_PLOT_X",
        default_value = "output_tokens_per_s",
        value_name = "KEY"
    )]
    pub x: String,

    /// The y axis: figures or parameters as for --x, one chart each (comma-separated).
    /// vLLM: --var-y.
    #[arg(
        long,
        visible_alias = "var-y",
        env = "LLMSURGE_PLOT_Y",
        default_value = "ttft_p99",
        value_delimiter = ',',
        value_name = "KEY"
    )]
    pub y: Vec<String>,

    /// One curve per combination of these parameters (comma-separated). Default: one
    /// per server configuration (the serve parameters that vary), its points the
    /// benchmarks run against it; without varied serve parameters, one per combination
    /// of the varied benchmark parameters but rate.
    #[arg(
        long,
        env = "LLMSURGE_PLOT_CURVE_BY",
        value_delimiter = ',',
        value_name = "PARAM"
    )]
    pub curve_by: Vec<String>,

    /// A separate chart per combination of these parameters.
    #[arg(
        long,
        env = "LLMSURGE_PLOT_FIG_BY",
        value_delimiter = ',',
        value_name = "PARAM"
    )]
    pub fig_by: Vec<String>,

    /// Panels: a chart per combination of these parameters with those of --col-by (its
    /// title names them), in the order the sweep ran them.
    #[arg(
        long,
        env = "LLMSURGE_PLOT_ROW_BY",
        value_delimiter = ',',
        value_name = "PARAM"
    )]
    pub row_by: Vec<String>,

    /// Panels: as --row-by.
    #[arg(
        long,
        env = "LLMSURGE_PLOT_COL_BY",
        value_delimiter = ',',
        value_name = "PARAM"
    )]
    pub col_by: Vec<String>,

    /// Each point labelled with these parameters' (or figures') values.
    #[arg(
        long,
        env = "LLMSURGE_PLOT_LABEL_BY",
        value_delimiter = ',',
        value_name = "KEY"
    )]
    pub label_by: Vec<String>,

    /// The points drawn and where the pictures go.
    #[command(flatten)]
    pub drawn: PlotOutputArgs,
}

/// The flags `sweep plot` and `sweep plot-pareto` share: which points, which formats,
/// where.
#[derive(Debug, Args)]
pub struct PlotOutputArgs {
    /// The points drawn: conditions KEY OP VALUE separated by commas, as the sweep's
    /// --filter (e.g. "max_num_seqs>=32,ttft_p99<2000"). vLLM: --filter-by.
    #[arg(
        long,
        visible_alias = "filter-by",
        env = "LLMSURGE_PLOT_FILTER",
        value_name = "CONDITIONS"
    )]
    pub filter: Option<String>,

    /// What to write: html (one page of every chart), png, svg (a file per chart).
    #[arg(
        long,
        env = "LLMSURGE_PLOT_OUTPUTS",
        default_value = "html,png",
        value_delimiter = ',',
        value_name = "FORMATS"
    )]
    pub outputs: Vec<String>,

    /// Where to write them (created when missing). Default: DIR/plots.
    #[arg(long, env = "LLMSURGE_OUTPUT_DIR", value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
}

/// `llmsurge sweep plot-pareto` flags.
#[derive(Debug, Args)]
pub struct SweepPlotParetoArgs {
    /// The sweep's output directory (the one holding its sweep.json).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// GPUs per point, for tokens/s per GPU: a count, or the parameter that holds it
    /// (e.g. tensor_parallel_size). Default: the GPU count --gpu-metrics saw, else the
    /// front is per server. vLLM: --gpu-count-var.
    #[arg(
        long,
        visible_alias = "gpu-count-var",
        env = "LLMSURGE_GPUS",
        value_name = "N|PARAM"
    )]
    pub gpus: Option<String>,

    /// The points drawn and where the pictures go.
    #[command(flatten)]
    pub drawn: PlotOutputArgs,
}

/// `llmsurge __serve-guard` flags.
#[derive(Debug, clap::Args)]
pub struct GuardArgs {
    /// After SIGTERM to the server's group, how long before SIGKILL, ms.
    #[arg(long)]
    pub grace_ms: u64,
    /// The server command, run by `sh -c`.
    #[arg(long, allow_hyphen_values = true)]
    pub command: String,
}
