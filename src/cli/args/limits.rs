//! `benchmark run` flags: when each benchmark stops, and which requests are measured.

use crate::cli::values::{
    WindowSpec, parse_duration, parse_fraction, parse_positive_duration, parse_window,
};

use clap::Args;
use std::time::Duration;

/// A confidence as `0.95` or `95%`, strictly between 0.5 and 1: the one parser of
/// `--confidence` for `benchmark run` and `benchmark compare`. At 50% or less a
/// percentile's lower bound can lie above its upper one, so the bounds mean nothing;
/// 1 needs infinitely many requests.
pub fn parse_confidence(s: &str) -> Result<f64, String> {
    let c =
        parse_fraction(s).map_err(|_| format!("{s:?} is not a confidence (try 0.95 or 95%)"))?;
    if c <= 0.5 || c >= 1.0 {
        return Err(format!(
            "{s:?} must be above 0.5 and below 1 (e.g. 0.95 or 99%): a bound at 50% confidence or less bounds nothing"
        ));
    }
    Ok(c)
}

/// When each benchmark stops, and which requests are measured.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Limits")]
pub struct LimitArgs {
    /// Stop each benchmark after this long, cancelling requests in flight.
    #[arg(long, env = "LLMSURGE_MAX_SECONDS", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub max_seconds: Option<Duration>,

    /// Send exactly this many requests per benchmark, then let them finish.
    #[arg(long, env = "LLMSURGE_MAX_REQUESTS", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_requests: Option<u64>,

    /// Stop a benchmark once this many requests errored.
    #[arg(long, env = "LLMSURGE_MAX_ERRORS", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_errors: Option<u64>,

    /// Stop a benchmark once more than this fraction of finished requests errored
    /// (counted after 20 requests), e.g. 0.05 or 5%.
    #[arg(long, env = "LLMSURGE_MAX_ERROR_RATE", value_parser = parse_fraction)]
    pub max_error_rate: Option<f64>,

    /// Requests to exclude from the metrics at the start: a fraction of the benchmark
    /// (0.1), a time (30s) or a count (200req). They stay in the record.
    #[arg(long, env = "LLMSURGE_WARMUP", value_parser = parse_window)]
    pub warmup: Option<WindowSpec>,

    /// Like --warmup, at the end of the benchmark.
    #[arg(long, env = "LLMSURGE_COOLDOWN", value_parser = parse_window)]
    pub cooldown: Option<WindowSpec>,

    /// Stop a benchmark early when the server is over-saturated (in-flight requests and
    /// TTFT both keep rising), with the default settings (see docs/saturation.md).
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_DETECT_SATURATION")]
    pub detect_saturation: bool,

    /// Over-saturation detection with settings, e.g. '{"min_seconds": 30, "confidence": 0.95}'
    /// (keys: min_seconds, window_seconds, confidence, min_growth, consecutive, min_samples).
    #[arg(long, env = "LLMSURGE_OVER_SATURATION", value_name = "JSON")]
    pub over_saturation: Option<String>,

    /// Objectives checked on every benchmark, e.g. "ttft_p99<=500ms,itl_p50<=20ms,e2e_p95<=5s,error_rate<=1%".
    /// A failed objective makes the exit code 3.
    #[arg(long, env = "LLMSURGE_SLO", value_name = "CHECKS")]
    pub slo: Option<String>,

    /// A tier of `--profile capacity`, NAME:CHECKS in the --slo grammar, e.g.
    /// "interactive:output_speed_p10>=40tok/s,ttft_p90<=500ms"; repeatable (or
    /// ';'-separated). One search answers every tier from the same probes: each tier's
    /// highest rate, or over sessions its most concurrent users, and the objective that
    /// bound it.
    #[arg(
        long,
        env = "LLMSURGE_SLO_TIER",
        value_name = "NAME:CHECKS",
        value_delimiter = ';'
    )]
    pub slo_tier: Vec<String>,

    /// Confidence of every percentile objective of --slo, e.g. 0.95 or 99%: a check passes
    /// only when the order-statistic bound at this confidence is within its threshold,
    /// fails when the opposite bound is beyond it, and is otherwise INCONCLUSIVE (exit
    /// code 5). Default 0.95. Its variable is ignored by a run without --slo (a CI job
    /// may set it for every run); the flag without --slo is refused.
    #[arg(long, env = "LLMSURGE_CONFIDENCE", value_parser = parse_confidence, value_name = "FRACTION")]
    pub confidence: Option<f64>,

    /// `--confidence` came from `LLMSURGE_CONFIDENCE`, not the command line. Set from the
    /// matches.
    #[arg(skip)]
    pub confidence_from_env: bool,

    /// Per-request goodput thresholds, e.g. "ttft:500ms,tpot:50ms,e2e:10s": goodput is the
    /// rate of completed requests meeting all of them.
    #[arg(long, env = "LLMSURGE_GOODPUT", value_name = "THRESHOLDS")]
    pub goodput: Option<String>,

    /// Run the whole plan this many times. The report keeps every run and adds, per
    /// benchmark, `across_runs`: mean, std, coefficient of variation and 95% t-interval
    /// of each headline figure; an SLO gate passes only when every run passed.
    #[arg(long, env = "LLMSURGE_REPEAT", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000), value_name = "N")]
    pub repeat: u32,

    /// Pause between repeated runs (--repeat), so the server settles, e.g. 30s; 0s for
    /// none (as without the flag).
    #[arg(long, env = "LLMSURGE_REPEAT_COOLDOWN", value_parser = parse_duration, value_name = "DURATION")]
    pub repeat_cooldown: Option<Duration>,

    /// `--repeat-cooldown` came from `LLMSURGE_REPEAT_COOLDOWN`, not the command line. Set
    /// from the matches.
    #[arg(skip)]
    pub repeat_cooldown_from_env: bool,

    /// Run each benchmark until each named figure's 95% interval is within a fraction of
    /// it, e.g. "ttft_p99:5%,e2e_p50:3%" (figures: ttft|itl|tpot|e2e _p50|_p90|_p99|_mean,
    /// requests_per_s, output_tokens_per_s). The benchmark's limits still stop it first;
    /// the report says the precision reached (see docs/metrics.md).
    #[arg(
        long,
        env = "LLMSURGE_UNTIL_PRECISE",
        value_name = "FIGURE:FRACTION,..."
    )]
    pub until_precise: Option<String>,
}
