//! `llmsurge benchmark compare BASELINE CURRENT`: the regression gate.

use crate::cli::args::parse_confidence;
use crate::compare::tolerance::{ChangeUnit, Tolerances};
use crate::compare::{Comparison, Verdict, compare, read_report};
use crate::exit_codes;
use crate::report::{cell_value, charts, junit, markdown, write_atomic};
use clap::Args;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use std::path::{Path, PathBuf};

/// Flags of `benchmark compare`.
#[derive(Clone, Debug, Args)]
pub struct CompareArgs {
    /// The baseline JSON report.
    pub baseline: PathBuf,
    /// The current JSON report.
    pub current: PathBuf,

    /// How much each metric may get worse, e.g. "ttft_p99=10%,output_tokens_per_s=-5%,error_rate=+0.5pp".
    /// Metrics: ttft|itl|tpot|e2e with _mean|_p50|_p90|_p99, requests_per_s,
    /// output_tokens_per_s, goodput_per_s (percent), error_rate (percentage points); with
    /// server metrics, server_* figures (docs/ci.md), e.g. server_num_requests_waiting_mean=25%.
    /// Defaults: p50 and p99 of ttft, itl and e2e 10%, throughputs 10%, error_rate 1pp;
    /// the metrics given add to them and override them by name (see --max-regression-only).
    #[arg(long, env = "LLMSURGE_MAX_REGRESSION", value_name = "TOLERANCES")]
    pub max_regression: Option<String>,

    /// Judge only the metrics --max-regression names, without the defaults.
    #[arg(
        long,
        value_parser = clap::builder::BoolishValueParser::new(),
        env = "LLMSURGE_MAX_REGRESSION_ONLY",
        requires = "max_regression"
    )]
    pub max_regression_only: bool,

    /// Flag every change beyond its tolerance, even when it is within the noise of the
    /// measurements.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_STRICT")]
    pub strict: bool,

    /// Confidence of the intervals that separate real changes from noise, e.g. 0.95 or
    /// 95% (above 0.5, below 1).
    #[arg(long, env = "LLMSURGE_CONFIDENCE", default_value = "0.95", value_parser = parse_confidence)]
    pub confidence: f64,

    /// Also write the verdicts as JUnit XML to this file (`-` for stdout).
    #[arg(long, env = "LLMSURGE_JUNIT", value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Also write a Markdown table to this file (`-` for stdout), e.g. "$GITHUB_STEP_SUMMARY".
    #[arg(long, env = "LLMSURGE_MARKDOWN", value_name = "FILE")]
    pub markdown: Option<PathBuf>,

    /// Also write the whole comparison as JSON to this file (`-` for stdout): pairs,
    /// every metric's change and verdict, benchmarks without a partner, warnings.
    #[arg(long, env = "LLMSURGE_JSON", value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Compare the benchmarks that have a partner and pass the gate even when a
    /// benchmark of either report has none (by default that fails it, exit 3: a
    /// benchmark the gate could not judge is not a pass).
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_ALLOW_MISSING")]
    pub allow_missing: bool,

    /// Compare runs whose servers differ in these fields (comma-separated or repeated;
    /// `all` for every one): model, model_root, max_model_len, engine, engine_version,
    /// lora_adapters, block_size, enable_prefix_caching, cache_dtype. By default a
    /// difference in any of them fails the gate (exit 3): the runs did not measure the
    /// same server (docs/ci.md).
    #[arg(
        long,
        env = "LLMSURGE_ALLOW_SERVER_CHANGE",
        value_delimiter = ',',
        value_name = "FIELD"
    )]
    pub allow_server_change: Vec<String>,

    /// Pictures of both runs on the same axes, each figure's verdicts beside it: html
    /// (compare.html), png, svg (one file per chart); comma-separated. None by default.
    /// Its variable is not LLMSURGE_OUTPUTS: a CI job sets that one for its runs
    /// (json, csv, …) and calls compare in the same environment.
    #[arg(long, env = "LLMSURGE_COMPARE_OUTPUTS", value_delimiter = ',')]
    pub outputs: Vec<String>,

    /// Directory for the pictures.
    #[arg(long, env = "LLMSURGE_OUTPUT_DIR", default_value = ".")]
    pub output_dir: PathBuf,
}

/// The lines shown with the charts of one figure family: its regressions and changes
/// within the noise, one line each (at most five), then how many checks passed.
fn verdict_notes(c: &Comparison, family: &str) -> Vec<String> {
    let wanted = |m: &str| match family {
        "throughput" => [
            "requests_per_s",
            "output_tokens_per_s",
            "inputs_per_s",
            "goodput_per_s",
            "error_rate",
        ]
        .contains(&m),
        "pareto" => m == "output_tokens_per_s" || m.starts_with("tpot_"),
        f => m.strip_prefix(f).is_some_and(|rest| rest.starts_with('_')),
    };
    let mut flagged = Vec::new();
    let mut ok = 0;
    for p in &c.pairs {
        for m in p.changes.iter().filter(|m| wanted(&m.metric)) {
            let word = match m.verdict {
                Verdict::Regressed => "regressed",
                Verdict::WithinNoise => "worse, within the noise",
                Verdict::Ok => {
                    ok += 1;
                    continue;
                }
                Verdict::Info | Verdict::Missing => continue,
            };
            let unit = if m.unit == ChangeUnit::Percent {
                "%"
            } else {
                "pp"
            };
            let change = m.change.map_or("–".into(), |x| format!("{x:+.1}{unit}"));
            let allowed = m
                .tolerance
                .map(|t| format!(" (allowed {:.1}{unit})", t.allowed))
                .unwrap_or_default();
            flagged.push(format!(
                "{word}: {} at {}: {change}{allowed}",
                m.metric, p.label
            ));
        }
    }
    let mut out: Vec<String> = flagged.iter().take(5).cloned().collect();
    if flagged.len() > 5 {
        out.push(format!("… and {} more (see the table)", flagged.len() - 5));
    }
    if ok > 0 {
        out.push(format!("ok: {ok} checks of these figures within tolerance"));
    }
    out
}

fn render(c: &Comparison) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "Benchmark",
        "Metric",
        "Baseline",
        "Current",
        "Change",
        "Interval",
        "Allowed",
        "Samples",
        "Verdict",
    ]);
    for p in &c.pairs {
        for m in &p.changes {
            let unit = if m.unit == ChangeUnit::Percent {
                "%"
            } else {
                "pp"
            };
            t.add_row(vec![
                p.label.clone(),
                m.metric.clone(),
                cell_value(m.baseline),
                cell_value(m.current),
                m.change.map_or("–".into(), |x| format!("{x:+.2}{unit}")),
                m.ci.map_or("–".into(), |(lo, hi)| format!("[{lo:+.1}, {hi:+.1}]")),
                m.tolerance
                    .map_or("–".into(), |t| format!("{}{unit}", t.allowed)),
                format!("{}/{}", m.samples.0, m.samples.1),
                match m.verdict {
                    Verdict::Ok => "ok",
                    Verdict::Regressed => "REGRESSED",
                    Verdict::WithinNoise => "within noise",
                    Verdict::Info => "",
                    Verdict::Missing => "n/a",
                }
                .to_string(),
            ]);
        }
    }
    let mut out = t.to_string();
    for (side, list) in [
        ("baseline", &c.unmatched_baseline),
        ("current", &c.unmatched_current),
    ] {
        if !list.is_empty() {
            out.push_str(&format!(
                "\nunmatched in the {side} (no partner of the same strategy, rate and label; a capacity tier of the same name): {}",
                list.join(", ")
            ));
        }
    }
    let noisy = c
        .pairs
        .iter()
        .flat_map(|p| &p.changes)
        .filter(|m| m.verdict == Verdict::WithinNoise)
        .count();
    out.push_str(&format!("\n{}", c.variance_note));
    out.push_str(&format!(
        "\n{} regression(s){}; intervals at {}% confidence{}",
        c.regressions,
        if noisy > 0 {
            format!(", {noisy} change(s) beyond tolerance but within noise")
        } else {
            String::new()
        },
        llmsurge_coordinator::slo::confidence_percent(c.confidence),
        if c.strict {
            " (--strict: noise ignored)"
        } else {
            ""
        }
    ));
    if c.unmatched() > 0 {
        out.push_str(&format!(
            "\n{} benchmark(s) without a partner: {}",
            c.unmatched(),
            if c.allow_missing {
                "allowed (--allow-missing)"
            } else {
                "the gate fails (--allow-missing compares the rest)"
            }
        ));
    }
    out
}

fn write_to(path: &Path, text: &str) -> Result<(), String> {
    if path == Path::new("-") {
        crate::stdout::println(text);
        return Ok(());
    }
    write_atomic(path, text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Draws both runs on the same axes with each figure's verdicts; whether every file was
/// written.
fn pictures(
    args: &CompareArgs,
    formats: &[String],
    comparison: &Comparison,
    reports: &[(PathBuf, crate::report::Report)],
) -> bool {
    let labels = super::plot::run_labels(reports);
    let runs: Vec<charts::compare::Run<'_>> = reports
        .iter()
        .zip(&labels)
        .map(|((_, report), label)| charts::compare::Run { label, report })
        .collect();
    let charts = charts::compare::charts(&runs, &|family| verdict_notes(comparison, family));
    let files: Vec<String> = reports
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    super::plot::write_pictures(
        &charts,
        formats,
        &args.output_dir,
        "compare",
        &format!("{} vs {}", labels[1], labels[0]),
        &files,
    )
}

/// Runs `benchmark compare`; returns the exit code.
pub fn benchmark_compare(args: &CompareArgs) -> i32 {
    let tolerances =
        match Tolerances::resolve(args.max_regression.as_deref(), args.max_regression_only) {
            Ok(t) => t,
            Err(e) => return super::usage_error(&format!("--max-regression: {e}")),
        };
    let allowed = match crate::compare::fingerprint::check_allowed(&args.allow_server_change) {
        Ok(a) => a,
        Err(e) => return super::usage_error(&e),
    };
    let (base, cur) = match (read_report(&args.baseline), read_report(&args.current)) {
        (Ok(b), Ok(c)) => (b, c),
        (Err(e), _) | (_, Err(e)) => return super::usage_error(&e),
    };
    // One machine-readable output may take stdout; the table then goes to stderr, so a
    // `--json - | jq` reads JSON alone.
    let to_stdout: Vec<&str> = [
        ("--json", &args.json),
        ("--junit", &args.junit),
        ("--markdown", &args.markdown),
    ]
    .into_iter()
    .filter(|(_, p)| p.as_deref() == Some(Path::new("-")))
    .map(|(flag, _)| flag)
    .collect();
    if to_stdout.len() > 1 {
        return super::usage_error(&format!(
            "{} -: only one output can be written to stdout (-); give the others a file",
            to_stdout.join(" -, ")
        ));
    }
    let formats = match super::plot::picture_formats(&args.outputs, "benchmark compare") {
        Ok(f) => f,
        Err(e) => return super::usage_error(&e),
    };
    let mut comparison = match compare(&base, &cur, &tolerances, args.strict, args.confidence) {
        Ok(c) => c,
        Err(e) => return super::usage_error(&e),
    };
    comparison.allow_missing = args.allow_missing;
    comparison.allow_server_changes(allowed);
    // The tolerances that judged a row: a metric the reports lack (a pooling run's
    // TTFT) was never judged.
    let judged: Vec<&str> = comparison
        .pairs
        .iter()
        .flat_map(|p| &p.changes)
        .filter(|c| c.tolerance.is_some())
        .map(|c| c.metric.as_str())
        .collect();
    // A tolerance the user gave for a metric neither report has would pass unseen.
    let given = args.max_regression.as_deref().map(Tolerances::parse);
    let unjudged: Vec<&str> = match &given {
        Some(Ok(t)) => t
            .names()
            .into_iter()
            .filter(|n| !judged.contains(n))
            .collect(),
        _ => Vec::new(),
    };
    if args.max_regression_only && judged.is_empty() {
        return super::usage_error(&format!(
            "--max-regression-only: nothing to judge: no benchmark pair of these reports has {} (give tolerances for metrics the reports hold, or drop --max-regression-only for the defaults)",
            unjudged.join(", ")
        ));
    }
    let table = [
        render(&comparison),
        format!("tolerances: {}", tolerances.line(&judged)),
    ];
    for text in &table {
        if to_stdout.is_empty() {
            crate::stdout::println(text);
        } else {
            crate::stdout::eprintln(text);
        }
    }
    for name in &unjudged {
        crate::stdout::eprintln(&format!(
            "warning: --max-regression {name}: no benchmark pair of these reports has it, so it judged nothing"
        ));
    }
    // One line each, whatever the reports hold (a hand-edited label, a server's version
    // string): a line break in them cannot make a line of its own.
    let line = |text: &str| llmsurge_proto::inert::terminal(text).into_owned();
    for w in &comparison.warnings {
        crate::stdout::eprintln(&format!("warning: {}", line(w)));
    }
    if comparison.missing_fails() {
        for missing in comparison.missing_lines() {
            crate::stdout::eprintln(&format!(
                "gate failed: {}; --allow-missing compares the rest",
                line(&missing)
            ));
        }
    }
    for failure in comparison.server.failure_lines() {
        crate::stdout::eprintln(&format!("gate failed: {}", line(&failure)));
    }
    let mut failed = false;
    if let Some(path) = &args.json {
        let written = serde_json::to_string_pretty(&comparison)
            .map_err(|e| e.to_string())
            .and_then(|json| write_to(path, &json));
        if let Err(e) = written {
            crate::stdout::eprintln(&format!("error: {e}"));
            failed = true;
        }
    }
    if let Some(path) = &args.junit {
        let written = junit::render(&junit::comparison_suites(&comparison))
            .map_err(|e| e.to_string())
            .and_then(|xml| write_to(path, &xml));
        if let Err(e) = written {
            crate::stdout::eprintln(&format!("error: {e}"));
            failed = true;
        }
    }
    if let Some(path) = &args.markdown
        && let Err(e) = write_to(path, &markdown::comparison(&comparison))
    {
        crate::stdout::eprintln(&format!("error: {e}"));
        failed = true;
    }
    if !formats.is_empty() {
        let reports = [(args.baseline.clone(), base), (args.current.clone(), cur)];
        if !pictures(args, &formats, &comparison, &reports) {
            failed = true;
        }
    }
    if failed {
        exit_codes::RUN_FAILED
    } else if !comparison.passed() {
        exit_codes::GATE_FAILED
    } else {
        exit_codes::OK
    }
}
