//! `--repeat`: the run-to-run statistics of each benchmark's headline figures.
//!
//! The benchmarks of every run are kept in the report (each marked with its `run`); a
//! benchmark's position in its run (its `index`) matches it across runs. For each
//! position and headline figure, over the runs in which the figure has a value: mean,
//! sample standard deviation (n − 1), coefficient of variation (std / mean) and the 95%
//! interval of the mean by Student's t with n − 1 degrees of freedom. A figure without a
//! value in a run (TPOT of a non-streamed run) is left out of that run's sample, and out
//! of `figures` altogether when no run has it: absent, never 0.
//!
//! A run whose benchmark cannot stand beside the others is left out of its figures and
//! named with why in `left_out` (and on every output that shows the figures): it is
//! invalid (nothing succeeded, the client was the bottleneck, the server was lost), a
//! worker died in it (its load was cut short), or it was interrupted
//! ([`llmsurge_coordinator::validity::unsound_reasons`]). Averaging such a run in would
//! move the mean and widen the interval by a failure, not by run-to-run variance. The
//! SLO tally keeps every run: a gate never forgets a run that failed.
//!
//! Each run draws its own seed from the run seed and its index (`args.run_seeds`, the
//! first being `args.seed`); every entry repeats them (`seeds`), and every output that
//! lists the runs says which seed each had, so any run can be told apart and reproduced.

use llmsurge_coordinator::BenchmarkResult;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The headline figures, in display order.
pub const FIGURES: [&str; 15] = [
    "ttft_p50",
    "ttft_p90",
    "ttft_p99",
    "itl_p50",
    "itl_p90",
    "itl_p99",
    "tpot_p50",
    "tpot_p90",
    "tpot_p99",
    "e2e_p50",
    "e2e_p90",
    "e2e_p99",
    "requests_per_s",
    "output_tokens_per_s",
    "goodput_per_s",
];

/// One headline figure of a benchmark (ms for latencies), when it has a value.
pub fn figure(b: &BenchmarkResult, name: &str) -> Option<f64> {
    match name {
        "requests_per_s" => return Some(b.throughput.requests_per_s),
        "output_tokens_per_s" => return b.throughput.output_tokens_per_s,
        "goodput_per_s" => return b.goodput.as_ref().map(|g| g.requests_per_s),
        _ => {}
    }
    let (metric, stat) = name.rsplit_once('_')?;
    let key = match metric {
        "e2e" => "request_latency",
        other => other,
    };
    let d = &b.metrics.get(key)?.successful;
    (d.count > 0).then(|| d.percentiles.get(stat)).flatten()
}

/// Run-to-run statistics of one figure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FigureStats {
    /// Runs in which the figure had a value.
    pub n: u32,
    /// Mean over those runs.
    pub mean: f64,
    /// Sample standard deviation (n − 1); 0 for one run.
    pub std: f64,
    /// std / mean; absent when the mean is 0.
    pub cv: Option<f64>,
    /// Low end of the 95% t-interval of the mean; absent for one run.
    pub ci_low: Option<f64>,
    /// High end of the 95% t-interval of the mean.
    pub ci_high: Option<f64>,
}

/// How many runs passed a benchmark's `--slo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunsVerdict {
    /// Runs judged.
    pub runs: u32,
    /// Runs whose verdict was PASS.
    pub passed: u32,
    /// Runs whose verdict was FAIL.
    pub failed: u32,
    /// Runs whose verdict was INCONCLUSIVE.
    pub inconclusive: u32,
    /// The gate's rule: passed only when every run passed.
    pub all_passed: bool,
}

/// A run left out of a position's figures across runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    /// The run (from 0, as the benchmark's `run`).
    pub run: u32,
    /// Why, one reason each (`worker 1 died: signal 9 (pid 4242)`).
    pub reasons: Vec<String>,
}

/// One benchmark position across the runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AcrossRuns {
    /// The benchmark's position in each run (its `index`).
    pub benchmark: u32,
    /// Its strategy, as the first run had it.
    pub strategy: String,
    /// Runs that had this benchmark.
    pub runs: u32,
    /// Statistics per headline figure over the runs not left out; a figure none of them
    /// had is absent.
    pub figures: BTreeMap<String, FigureStats>,
    /// The runs left out of `figures`, and why. Empty (and left out) when none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// The SLO verdicts over the runs, when `--slo` was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<RunsVerdict>,
    /// The seed of each run, in run order (`args.run_seeds`); empty (and left out) in
    /// reports written before runs drew their own seeds, whose runs all had `args.seed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seeds: Vec<u64>,
}

/// The seed of each run of a repeated report, as its arguments record them
/// (`args.run_seeds`); empty when they do not (a single run, or a report written before
/// runs drew their own seeds).
pub fn run_seeds(args: &serde_json::Value) -> Vec<u64> {
    args.get("run_seeds")
        .and_then(serde_json::Value::as_array)
        .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default()
}

/// Mean, std, CV and 95% t-interval of `values`; `None` when empty.
pub fn stats(values: &[f64]) -> Option<FigureStats> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let nf = n as f64;
    let mean = values.iter().sum::<f64>() / nf;
    let std = if n > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (nf - 1.0)).sqrt()
    } else {
        0.0
    };
    let half = (n > 1).then(|| {
        use statrs::distribution::{ContinuousCDF, StudentsT};
        let t = StudentsT::new(0.0, 1.0, nf - 1.0).map_or(f64::NAN, |d| d.inverse_cdf(0.975));
        t * std / nf.sqrt()
    });
    Some(FigureStats {
        n: n as u32,
        mean,
        std,
        cv: (mean != 0.0).then(|| std / mean),
        ci_low: half.map(|h| mean - h),
        ci_high: half.map(|h| mean + h),
    })
}

/// The across-runs entries of a report's benchmarks; empty when none carries a `run`.
/// `seeds`: each run's seed ([`run_seeds`] of the report's arguments).
pub fn compute(benchmarks: &[BenchmarkResult], seeds: &[u64]) -> Vec<AcrossRuns> {
    if benchmarks.iter().all(|b| b.run.is_none()) {
        return Vec::new();
    }
    let mut positions: Vec<u32> = benchmarks.iter().map(|b| b.index).collect();
    positions.sort_unstable();
    positions.dedup();
    positions
        .into_iter()
        .map(|index| {
            let runs: Vec<&BenchmarkResult> =
                benchmarks.iter().filter(|b| b.index == index).collect();
            let left_out: Vec<LeftOut> = runs
                .iter()
                .filter_map(|b| {
                    let reasons = llmsurge_coordinator::validity::unsound_reasons(b);
                    (!reasons.is_empty()).then(|| LeftOut {
                        run: b.run.unwrap_or(0),
                        reasons,
                    })
                })
                .collect();
            let averaged: Vec<&BenchmarkResult> = runs
                .iter()
                .copied()
                .filter(|b| !left_out.iter().any(|l| Some(l.run) == b.run))
                .collect();
            let figures = FIGURES
                .iter()
                .filter_map(|name| {
                    let values: Vec<f64> =
                        averaged.iter().filter_map(|b| figure(b, name)).collect();
                    stats(&values).map(|s| (name.to_string(), s))
                })
                .collect();
            let verdicts: Vec<&str> = runs
                .iter()
                .filter_map(|b| b.slo.as_ref().map(|v| v.label()))
                .collect();
            let slo = (!verdicts.is_empty()).then(|| {
                let count = |l: &str| verdicts.iter().filter(|v| **v == l).count() as u32;
                RunsVerdict {
                    runs: verdicts.len() as u32,
                    passed: count("PASS"),
                    failed: count("FAIL"),
                    inconclusive: count("INCONCLUSIVE"),
                    all_passed: count("PASS") == verdicts.len() as u32,
                }
            });
            AcrossRuns {
                benchmark: index,
                strategy: runs
                    .first()
                    .map(|b| b.strategy.to_string())
                    .unwrap_or_default(),
                runs: runs.len() as u32,
                figures,
                left_out,
                slo,
                seeds: seeds.to_vec(),
            }
        })
        .collect()
}

/// A value as the tables show it.
fn cell(v: Option<f64>) -> String {
    super::cell_value(v)
}

/// The rows of the across-runs table: benchmark, figure, n, mean, std, CV %, 95% CI.
pub fn rows(across: &[AcrossRuns]) -> Vec<[String; 7]> {
    let mut out = Vec::new();
    for a in across {
        for name in FIGURES {
            let Some(s) = a.figures.get(name) else {
                continue;
            };
            out.push([
                format!("{} #{}", a.strategy, a.benchmark + 1),
                name.to_string(),
                s.n.to_string(),
                cell(Some(s.mean)),
                cell(Some(s.std)),
                s.cv.map_or("–".into(), |c| format!("{:.1}", c * 100.0)),
                match (s.ci_low, s.ci_high) {
                    (Some(lo), Some(hi)) => format!("{} – {}", cell(Some(lo)), cell(Some(hi))),
                    _ => "–".into(),
                },
            ]);
        }
    }
    out
}

/// One line per benchmark with an SLO: how many runs passed, and the gate's outcome.
pub fn slo_lines(across: &[AcrossRuns]) -> Vec<String> {
    across
        .iter()
        .filter_map(|a| {
            let s = a.slo.as_ref()?;
            Some(format!(
                // "undecided": the verdict beside it may be INCONCLUSIVE, said once.
                "SLO {} #{}: {} of {} runs passed ({} failed, {} undecided): {}",
                a.strategy,
                a.benchmark + 1,
                s.passed,
                s.runs,
                s.failed,
                s.inconclusive,
                if s.all_passed {
                    "PASS"
                } else if s.failed == 0 {
                    "INCONCLUSIVE (no run failed; every run must pass)"
                } else {
                    "FAIL (every run must pass)"
                }
            ))
        })
        .collect()
}

/// One line per position with runs left out of its figures: which runs, and why.
pub fn left_out_lines(across: &[AcrossRuns]) -> Vec<String> {
    across
        .iter()
        .filter(|a| !a.left_out.is_empty())
        .map(|a| {
            let runs: Vec<String> = a
                .left_out
                .iter()
                .map(|l| format!("run {} ({})", l.run + 1, l.reasons.join("; ")))
                .collect();
            format!(
                "{} #{}: {} of {} runs left out of the figures across runs: {}",
                a.strategy,
                a.benchmark + 1,
                a.left_out.len(),
                a.runs,
                runs.join(", ")
            )
        })
        .collect()
}

/// The line that names each run's seed (`seeds: run 1 42, run 2 …`); `None` for a report
/// that does not record them.
pub fn seeds_line(across: &[AcrossRuns]) -> Option<String> {
    let seeds = &across.first()?.seeds;
    if seeds.is_empty() {
        return None;
    }
    let runs: Vec<String> = seeds
        .iter()
        .enumerate()
        .map(|(i, s)| format!("run {} {s}", i + 1))
        .collect();
    Some(format!(
        "seeds (each run draws its own from the run seed): {}",
        runs.join(", ")
    ))
}

/// The lines below the table: each run's seed, the runs left out, then the SLO lines.
pub fn notes(across: &[AcrossRuns]) -> Vec<String> {
    let mut lines: Vec<String> = seeds_line(across).into_iter().collect();
    lines.extend(left_out_lines(across));
    lines.extend(slo_lines(across));
    lines
}

/// The block's title (`Across 3 runs`), and what its means are over.
fn heading(across: &[AcrossRuns]) -> (String, &'static str) {
    let runs = across.iter().map(|a| a.runs).max().unwrap_or(0);
    let over = if across.iter().any(|a| !a.left_out.is_empty()) {
        "mean of the runs not left out below"
    } else {
        "mean of the runs"
    };
    (format!("Across {runs} runs"), over)
}

/// The console block: a table, the runs left out and the SLO lines.
pub fn console(across: &[AcrossRuns]) -> String {
    if across.is_empty() {
        return String::new();
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_header([
        "Benchmark",
        "Figure",
        "Runs",
        "Mean",
        "Std",
        "CV %",
        "95% CI",
    ]);
    for r in rows(across) {
        t.add_row(r);
    }
    let (title, over) = heading(across);
    let mut out = format!("{title} ({over}; t-interval of the mean)\n{t}");
    for line in notes(across) {
        out.push('\n');
        out.push_str(&llmsurge_proto::inert::terminal(&line));
    }
    out
}

/// The Markdown section.
pub fn markdown(across: &[AcrossRuns]) -> String {
    if across.is_empty() {
        return String::new();
    }
    let (title, over) = heading(across);
    let mut out = format!(
        "\n## {title}\n\nThe {over}, sample std, coefficient of variation and the 95% t-interval of the mean.\n\n| Benchmark | Figure | Runs | Mean | Std | CV % | 95% CI |\n| --- | --- | --- | --- | --- | --- | --- |\n"
    );
    for r in rows(across) {
        out.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    for line in notes(across) {
        out.push_str(&format!("\n{}\n", llmsurge_proto::inert::markdown(&line)));
    }
    out
}

/// The CSV columns: the run of each row, then each figure's statistics for its position.
pub fn csv_names(across: &[AcrossRuns]) -> Vec<String> {
    if across.is_empty() {
        return Vec::new();
    }
    let mut h = vec![
        "repeat.run".to_string(),
        "repeat.seed".to_string(),
        "repeat.runs".to_string(),
    ];
    for name in FIGURES {
        for stat in ["mean", "std", "cv", "ci_low", "ci_high"] {
            h.push(format!("across_runs.{name}.{stat}"));
        }
    }
    h.push("across_runs.slo.runs_passed".into());
    h.push("across_runs.slo.runs_judged".into());
    h.push("repeat.left_out".into());
    h
}

/// The CSV cells of one benchmark row (see [`csv_names`]).
pub fn csv_values(across: &[AcrossRuns], b: &BenchmarkResult) -> Vec<String> {
    if across.is_empty() {
        return Vec::new();
    }
    let a = across.iter().find(|a| a.benchmark == b.index);
    let f = |v: Option<f64>| v.map(|v| format!("{v}")).unwrap_or_default();
    let seed = a
        .zip(b.run)
        .and_then(|(a, run)| a.seeds.get(run as usize))
        .map(u64::to_string);
    let mut row = vec![
        b.run.map(|r| r.to_string()).unwrap_or_default(),
        seed.unwrap_or_default(),
        a.map(|a| a.runs.to_string()).unwrap_or_default(),
    ];
    for name in FIGURES {
        let s = a.and_then(|a| a.figures.get(name));
        row.push(f(s.map(|s| s.mean)));
        row.push(f(s.map(|s| s.std)));
        row.push(f(s.and_then(|s| s.cv)));
        row.push(f(s.and_then(|s| s.ci_low)));
        row.push(f(s.and_then(|s| s.ci_high)));
    }
    let slo = a.and_then(|a| a.slo.as_ref());
    row.push(slo.map(|s| s.passed.to_string()).unwrap_or_default());
    row.push(slo.map(|s| s.runs.to_string()).unwrap_or_default());
    // Why this row's run is left out of the figures; empty when it is in them.
    row.push(
        a.and_then(|a| a.left_out.iter().find(|l| Some(l.run) == b.run))
            .map(|l| l.reasons.join("; "))
            .unwrap_or_default(),
    );
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_match_hand_computation() {
        // 10, 12, 14: mean 12, std 2, t(0.975, 2) = 4.303 → ±4.969.
        let s = stats(&[10.0, 12.0, 14.0]).expect("stats");
        assert!((s.mean - 12.0).abs() < 1e-12);
        assert!((s.std - 2.0).abs() < 1e-12);
        assert!((s.cv.expect("cv") - 2.0 / 12.0).abs() < 1e-12);
        assert!((s.ci_high.expect("hi") - 16.968_5).abs() < 1e-3);
        let one = stats(&[5.0]).expect("stats");
        assert_eq!((one.std, one.ci_low), (0.0, None));
        assert_eq!(stats(&[]), None);
    }
}
