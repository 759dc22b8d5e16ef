//! `llmsurge benchmark compare`: is CURRENT worse than BASELINE, beyond noise?
//!
//! Benchmarks pair by strategy, rate and label ([`pairing`]; a sweep's computed rates by
//! their position among the same kind, only where neither side has an exact partner),
//! and every benchmark without a partner is named: by default the gate fails on one. For
//! every pair, every comparison metric gets its change, the sample sizes behind it, and
//! — where the reports carry what is needed (histograms, counts) — a confidence interval
//! of the change. A metric regresses when it got worse by more than its tolerance and the
//! interval excludes "no change" (or, with `--strict`, on the point change alone). What
//! could flatter a side (a shared seed, a prefix cache that answered one side more) is a
//! warning ([`warnings`]).

pub mod change;
pub mod fingerprint;
pub mod noise;
pub mod pairing;
pub mod runs;
pub mod tiers;
pub mod tolerance;
pub mod warnings;

use crate::report::{Report, server};
use change::judge;
pub use change::{MetricChange, Verdict};
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::server_metrics::{SeriesKind, SeriesSummary, ServerMetrics};
use serde::Serialize;
use tolerance::{ChangeUnit, LATENCY_METRICS, LATENCY_STATS, Tolerances};

/// A matched pair of benchmarks.
#[derive(Clone, Debug, Serialize)]
pub struct PairComparison {
    /// The current benchmark's strategy, e.g. `constant@50`.
    pub label: String,
    /// The baseline benchmark's strategy.
    pub baseline_label: String,
    /// Every metric.
    pub changes: Vec<MetricChange>,
}

/// The whole comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// Matched pairs.
    pub pairs: Vec<PairComparison>,
    /// Baseline benchmarks with no counterpart.
    pub unmatched_baseline: Vec<String>,
    /// Current benchmarks with no counterpart.
    pub unmatched_current: Vec<String>,
    /// Regressions found.
    pub regressions: usize,
    /// Confidence of the intervals.
    pub confidence: f64,
    /// Whether noise was ignored.
    pub strict: bool,
    /// Which variance the intervals used: run-to-run when both reports hold repeated
    /// runs (`--repeat`), else within one run.
    pub variance: runs::Variance,
    /// That choice in one sentence.
    pub variance_note: String,
    /// What could flatter a side (a shared seed, a different prefix-cache hit rate), one
    /// sentence each; they never fail the gate.
    pub warnings: Vec<String>,
    /// `--allow-missing`: a benchmark without a partner does not fail the gate. Set by
    /// the caller; false from [`compare`].
    pub allow_missing: bool,
    /// The two runs' servers: a gated field that differs fails the gate unless allowed
    /// ([`Comparison::allow_server_changes`]).
    pub server: fingerprint::ServerCheck,
}

impl Comparison {
    /// Benchmarks of either side without a partner.
    pub fn unmatched(&self) -> usize {
        self.unmatched_baseline.len() + self.unmatched_current.len()
    }

    /// Whether benchmarks without a partner fail the gate (some, and not allowed).
    pub fn missing_fails(&self) -> bool {
        self.unmatched() > 0 && !self.allow_missing
    }

    /// Whether the gate passed: no regression, no benchmark missing unless allowed, and
    /// no server change unless allowed.
    pub fn passed(&self) -> bool {
        self.regressions == 0 && !self.missing_fails() && self.server.failing().is_empty()
    }

    /// `--allow-server-change`: these gated fields (or `all`) may differ; each allowed
    /// change is still said as a warning.
    pub fn allow_server_changes(&mut self, allowed: Vec<String>) {
        self.server.allowed = allowed;
        self.warnings.extend(self.server.warnings(true));
    }

    /// One line per benchmark without a partner, naming it and its side.
    pub fn missing_lines(&self) -> Vec<String> {
        let line = |name: &String, side: &str, other: &str| {
            format!(
                "{name} of the {side} has no partner in the {other} (benchmarks pair by strategy, rate and label, capacity tiers by name)"
            )
        };
        self.unmatched_baseline
            .iter()
            .map(|n| line(n, "baseline", "current report"))
            .chain(
                self.unmatched_current
                    .iter()
                    .map(|n| line(n, "current report", "baseline")),
            )
            .collect()
    }
}

/// Compares two reports.
pub fn compare(
    base: &Report,
    cur: &Report,
    tolerances: &Tolerances,
    strict: bool,
    confidence: f64,
) -> Result<Comparison, String> {
    // Repeated runs: benchmarks are matched on the first run; every run then feeds the
    // run-to-run statistics of `across_runs`.
    let first = |r: &Report| -> Vec<BenchmarkResult> {
        r.benchmarks
            .iter()
            .filter(|b| b.run.unwrap_or(0) == 0)
            .cloned()
            .collect()
    };
    let (base_first, cur_first) = (first(base), first(cur));
    let repeated = !base.across_runs.is_empty() && !cur.across_runs.is_empty();
    let variance = if repeated {
        runs::Variance::RunToRun
    } else {
        runs::Variance::WithinRun
    };
    // The runs the figures were taken over (an invalid run is left out of them).
    let run_count = |r: &Report| r.across_runs.iter().map(runs::runs_used).min().unwrap_or(1);
    let variance_note = variance.describe((run_count(base), run_count(cur)));
    let by_position = pairing::computes_rates(base) && pairing::computes_rates(cur);
    let pairing::Pairing {
        pairs,
        unmatched_baseline,
        unmatched_current,
    } = pairing::pair(&base_first, &cur_first, by_position);
    if pairs.is_empty() {
        return Err(format!(
            "no benchmark of the current report ({}) has a partner in the baseline ({}): benchmarks pair by strategy, rate and label",
            unmatched_current.join(", "),
            unmatched_baseline.join(", ")
        ));
    }
    let (server, mut warnings) = fingerprint::check(base, cur);
    warnings.extend(warnings::invalid_run_warnings(base, cur));
    warnings.extend(warnings::seed_warnings(base, cur));
    warnings.extend(warnings::affinity_warning(base, cur));
    warnings.extend(warnings::behaviour_warning(base, cur));
    warnings.extend(warnings::transport_warning(base, cur));
    warnings.extend(
        pairs
            .iter()
            .filter_map(|(b, c)| warnings::hit_rate_warning(base, b, cur, c, confidence)),
    );
    for (b, c) in &pairs {
        warnings.extend(warnings::kept_up_warnings(b, c));
        warnings.extend(warnings::output_length_warnings(b, c));
        warnings.extend(warnings::goodput_warning(b, c));
    }
    let mut pairs: Vec<PairComparison> = pairs
        .into_iter()
        .map(|(b, c)| {
            let mut changes = changes(b, c, tolerances, strict, confidence);
            if repeated
                && let (Some(ab), Some(ac)) = (
                    base.across_runs.iter().find(|a| a.benchmark == b.index),
                    cur.across_runs.iter().find(|a| a.benchmark == c.index),
                )
            {
                runs::apply(&mut changes, ab, ac, tolerances, strict, confidence);
            }
            PairComparison {
                label: c.strategy.to_string(),
                baseline_label: b.strategy.to_string(),
                changes,
            }
        })
        .collect();
    // Capacity tiers pair by name, their answers judged against the boundaries'
    // uncertainty; a tier on one side only is missing like a benchmark.
    let tiers = tiers::compare_tiers(base, cur);
    pairs.extend(tiers.pairs);
    let (mut unmatched_baseline, mut unmatched_current) = (unmatched_baseline, unmatched_current);
    unmatched_baseline.extend(tiers.unmatched_baseline);
    unmatched_current.extend(tiers.unmatched_current);
    let regressions = pairs
        .iter()
        .flat_map(|p| &p.changes)
        .filter(|c| c.verdict == Verdict::Regressed)
        .count();
    Ok(Comparison {
        pairs,
        unmatched_baseline,
        unmatched_current,
        regressions,
        confidence,
        strict,
        variance,
        variance_note,
        warnings,
        allow_missing: false,
        server,
    })
}

fn changes(
    b: &BenchmarkResult,
    c: &BenchmarkResult,
    tolerances: &Tolerances,
    strict: bool,
    confidence: f64,
) -> Vec<MetricChange> {
    let mut out = Vec::new();
    for (name, key) in LATENCY_METRICS {
        let (db, dc) = match (b.metrics.get(key), c.metrics.get(key)) {
            (Some(x), Some(y)) => (&x.successful, &y.successful),
            _ => continue,
        };
        if db.count == 0 && dc.count == 0 {
            continue;
        }
        let (hb, hc) = (b.histogram(key), c.histogram(key));
        for stat in LATENCY_STATS {
            let metric = format!("{name}_{stat}");
            let value = |d: &llmsurge_proto::Distribution| match stat {
                "mean" => Some(d.mean),
                p => d.percentiles.get(p),
            };
            let ci = if db.count == 0 || dc.count == 0 {
                None
            } else if stat == "mean" {
                noise::mean_change_ci(
                    (db.mean, db.std, db.count),
                    (dc.mean, dc.std, dc.count),
                    confidence,
                )
            } else {
                let p: f64 = stat.trim_start_matches('p').parse().unwrap_or(50.0);
                match (&hb, &hc) {
                    (Some(x), Some(y)) => noise::percentile_change_ci(x, y, p, confidence),
                    _ => None,
                }
            };
            let (vb, vc) = (
                (db.count > 0).then(|| value(db)).flatten(),
                (dc.count > 0).then(|| value(dc)).flatten(),
            );
            out.push(judge(
                metric,
                vb,
                vc,
                ChangeUnit::Percent,
                ci,
                (db.count, dc.count),
                tolerances,
                strict,
            ));
        }
    }
    let (wb, wc) = (b.measured_window.duration_s, c.measured_window.duration_s);
    let (mb, mc) = (&b.measured_requests, &c.measured_requests);
    let rate_ci = |nb: u64, nc: u64| noise::rate_change_ci((nb, wb), (nc, wc), confidence);
    // Each completed request brings its own block of tokens (or inputs): the total's noise
    // is the requests' counting noise times the block, not a count of independent tokens.
    // Per-request output lengths give the blocks' spread; without them (an old report)
    // the blocks are taken as equal.
    let per_request = |r: &BenchmarkResult, per_s: f64, lengths: Option<&str>| {
        let n = r.measured_requests.completed;
        let mean = per_s * r.measured_window.duration_s / n.max(1) as f64;
        let std = lengths
            .and_then(|key| r.metrics.get(key))
            .map(|d| &d.successful)
            .filter(|d| d.count > 1)
            .map_or(0.0, |d| d.std);
        noise::Total {
            requests: n,
            mean,
            std,
            seconds: r.measured_window.duration_s,
        }
    };
    let total_ci = |b_per_s: f64, c_per_s: f64, lengths: Option<&str>| {
        noise::total_change_ci(
            per_request(b, b_per_s, lengths),
            per_request(c, c_per_s, lengths),
            confidence,
        )
    };
    out.push(judge(
        "requests_per_s".into(),
        Some(b.throughput.requests_per_s),
        Some(c.throughput.requests_per_s),
        ChangeUnit::Percent,
        rate_ci(mb.completed, mc.completed),
        (mb.completed, mc.completed),
        tolerances,
        strict,
    ));
    // Embeddings and ranking generate nothing: their rate is inputs, not output tokens.
    if let (Some(ib), Some(ic)) = (b.throughput.inputs_per_s, c.throughput.inputs_per_s) {
        out.push(judge(
            "inputs_per_s".into(),
            Some(ib),
            Some(ic),
            ChangeUnit::Percent,
            // A fixed number of inputs per request: equal blocks.
            total_ci(ib, ic, None),
            (mb.completed, mc.completed),
            tolerances,
            strict,
        ));
    } else {
        out.push(judge(
            "output_tokens_per_s".into(),
            b.throughput.output_tokens_per_s,
            c.throughput.output_tokens_per_s,
            ChangeUnit::Percent,
            match (
                b.throughput.output_tokens_per_s,
                c.throughput.output_tokens_per_s,
            ) {
                (Some(ob), Some(oc)) => total_ci(ob, oc, Some("output_tokens")),
                _ => None,
            },
            (mb.completed, mc.completed),
            tolerances,
            strict,
        ));
    }
    if let (Some(gb), Some(gc)) = (&b.goodput, &c.goodput) {
        out.push(judge(
            "goodput_per_s".into(),
            Some(gb.requests_per_s),
            Some(gc.requests_per_s),
            ChangeUnit::Percent,
            rate_ci(gb.good_requests, gc.good_requests),
            (gb.good_requests, gc.good_requests),
            tolerances,
            strict,
        ));
        // Recomputed from the counts (so a report written before errored requests
        // counted against it compares alike): good over every judged request.
        let (jb, jc) = (gb.judged(mb), gc.judged(mc));
        let fraction = |good: u64, judged: u64| (judged > 0).then(|| good as f64 / judged as f64);
        out.push(judge(
            "goodput_fraction".into(),
            fraction(gb.good_requests, jb),
            fraction(gc.good_requests, jc),
            ChangeUnit::PercentagePoints,
            noise::proportion_change_ci((gb.good_requests, jb), (gc.good_requests, jc), confidence),
            (jb, jc),
            tolerances,
            strict,
        ));
    }
    let finished = |m: &llmsurge_coordinator::result::MeasuredCounts| m.completed + m.errored;
    let rate = |m: &llmsurge_coordinator::result::MeasuredCounts| {
        (finished(m) > 0).then(|| m.errored as f64 / finished(m) as f64)
    };
    out.push(judge(
        "error_rate".into(),
        rate(mb),
        rate(mc),
        ChangeUnit::PercentagePoints,
        noise::proportion_change_ci(
            (mb.errored, finished(mb)),
            (mc.errored, finished(mc)),
            confidence,
        ),
        (finished(mb), finished(mc)),
        tolerances,
        strict,
    ));
    out.extend(server_changes(b, c, tolerances, strict));
    out
}

/// One comparable figure of the server's metrics: its row name, value and the scrapes
/// (or, for the server's histograms, the observations) behind it.
type ServerFigure = (String, f64, u64);

/// The comparable figures of one benchmark's server metrics, in the report's order:
/// gauges by mean and max, counters per second, the server's histograms by mean, the
/// derived rates.
fn server_figures(sm: &ServerMetrics) -> Vec<ServerFigure> {
    let mut out = Vec::new();
    let mut series = |name: &str, s: &SeriesSummary| {
        let n = s.samples;
        let mut push = |stat: &str, v: Option<f64>| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                out.push((format!("server_{name}_{stat}"), v, n));
            }
        };
        match s.kind {
            SeriesKind::Gauge => {
                push("mean", s.mean);
                push("max", s.max);
            }
            SeriesKind::Counter => push("per_s", s.rate_per_s),
        }
    };
    for name in server::GAUGES.iter().chain(&server::COUNTERS) {
        if let Some(s) = sm.summary.get(*name) {
            series(name, s);
        }
    }
    for (name, s) in server::extra_series(sm) {
        series(name, s);
    }
    for name in server::HISTOGRAMS {
        if let Some(mean) = sm
            .histograms
            .get(name)
            .and_then(|h| h.mean.map(|m| (m, h.count)))
        {
            out.push((format!("server_{name}_mean"), mean.0, mean.1 as u64));
        }
    }
    let samples = |name: &str| sm.summary.get(name).map_or(0, |s| s.samples);
    if let Some(r) = sm.derived.prefix_cache_hit_rate {
        out.push((
            "server_prefix_cache_hit_rate".into(),
            r,
            samples("prefix_cache_hits"),
        ));
    }
    if let Some(r) = sm.derived.spec_decode_acceptance_rate {
        out.push((
            "server_spec_decode_acceptance_rate".into(),
            r,
            samples("spec_decode_num_accepted_tokens"),
        ));
    }
    out
}

/// The `server_*` rows of a pair: every figure either side has, in the baseline's order
/// then the current's new ones. Scrapes give no distribution to estimate noise from, so
/// these rows have no interval: a tolerance alone flags them.
fn server_changes(
    b: &BenchmarkResult,
    c: &BenchmarkResult,
    tolerances: &Tolerances,
    strict: bool,
) -> Vec<MetricChange> {
    if b.server_metrics.is_none() && c.server_metrics.is_none() {
        return Vec::new();
    }
    let figures = |r: &BenchmarkResult| {
        r.server_metrics
            .as_ref()
            .map(server_figures)
            .unwrap_or_default()
    };
    let (fb, fc) = (figures(b), figures(c));
    let mut names: Vec<&String> = fb.iter().map(|f| &f.0).collect();
    for f in &fc {
        if !names.contains(&&f.0) {
            names.push(&f.0);
        }
    }
    let find =
        |list: &[ServerFigure], name: &str| list.iter().find(|f| f.0 == name).map(|f| (f.1, f.2));
    names
        .into_iter()
        .map(|name| {
            let (vb, vc) = (find(&fb, name), find(&fc, name));
            let unit = if tolerance::in_percentage_points(name) {
                ChangeUnit::PercentagePoints
            } else {
                ChangeUnit::Percent
            };
            judge(
                name.clone(),
                vb.map(|v| v.0),
                vc.map(|v| v.0),
                unit,
                None,
                (vb.map_or(0, |v| v.1), vc.map_or(0, |v| v.1)),
                tolerances,
                strict,
            )
        })
        .collect()
}

/// Reads a JSON report; the error names the file.
pub fn read_report(path: &std::path::Path) -> Result<Report, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: not an llmsurge JSON report ({e})", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER_FIXTURE: &str = include_str!("../../tests/fixtures/report-server-metrics.json");

    /// The fixture without its latency histograms: the bootstrap of the client's
    /// percentiles is not what these tests are about, and is slow in a debug build.
    fn server_report() -> Report {
        let mut r: Report = serde_json::from_str(SERVER_FIXTURE).expect("fixture parses");
        for b in &mut r.benchmarks {
            b.histograms.clear();
        }
        r
    }

    fn server_rows(c: &Comparison) -> Vec<&MetricChange> {
        c.pairs[1]
            .changes
            .iter()
            .filter(|m| m.metric.starts_with("server_"))
            .collect()
    }

    #[test]
    fn server_figures_are_compared_by_tolerance_alone() {
        let base = server_report();
        let mut cur = server_report();
        let sm = cur.benchmarks[1]
            .server_metrics
            .as_mut()
            .expect("server metrics");
        // The queue doubled; generation got 5% slower; the hit rate fell 10 points.
        if let Some(w) = sm.summary.get_mut("num_requests_waiting") {
            w.mean = w.mean.map(|m| m * 2.0);
        }
        if let Some(g) = sm.summary.get_mut("generation_tokens") {
            g.rate_per_s = g.rate_per_s.map(|r| r * 0.95);
        }
        sm.derived.prefix_cache_hit_rate = Some(0.65);
        let tol = Tolerances::parse(
            "server_num_requests_waiting_mean=50%,server_generation_tokens_per_s=-10%,server_prefix_cache_hit_rate=-5pp",
        )
        .expect("tolerances");
        let c = compare(&base, &cur, &tol, false, 0.95).expect("compares");
        let rows = server_rows(&c);
        let row = |name: &str| {
            *rows
                .iter()
                .find(|m| m.metric == name)
                .unwrap_or_else(|| panic!("no row {name}"))
        };
        let waiting = row("server_num_requests_waiting_mean");
        assert_eq!(waiting.verdict, Verdict::Regressed, "{waiting:?}");
        assert_eq!(waiting.ci, None, "no interval for scraped figures");
        assert_eq!(waiting.samples, (6, 6));
        assert!((waiting.change.expect("change") - 100.0).abs() < 1e-9);
        assert_eq!(row("server_generation_tokens_per_s").verdict, Verdict::Ok);
        let hit = row("server_prefix_cache_hit_rate");
        assert_eq!(hit.unit, ChangeUnit::PercentagePoints);
        assert!((hit.change.expect("change") + 10.0).abs() < 1e-9);
        assert_eq!(hit.verdict, Verdict::Regressed);
        // No tolerance: reported only. The --server-metrics-include series too.
        assert_eq!(row("server_kv_cache_usage_perc_max").verdict, Verdict::Info);
        assert_eq!(
            row("server_process_resident_memory_bytes_mean").verdict,
            Verdict::Info
        );
        assert_eq!(
            row("server_e2e_request_latency_seconds_mean").samples,
            (55, 55)
        );
        assert_eq!(c.regressions, 2);
        // --strict changes nothing: there is no noise estimate to ignore.
        let strict = compare(&base, &cur, &tol, true, 0.95).expect("compares");
        assert_eq!(strict.regressions, 2);
    }

    #[test]
    fn server_rows_appear_only_when_a_side_has_server_metrics() {
        let tol = Tolerances::parse(tolerance::DEFAULT_TOLERANCES).expect("defaults");
        let mut plain = server_report();
        for b in &mut plain.benchmarks {
            b.server_metrics = None;
        }
        let c = compare(&plain, &plain, &tol, false, 0.95).expect("compares");
        assert!(
            c.pairs
                .iter()
                .flat_map(|p| &p.changes)
                .all(|m| !m.metric.starts_with("server_"))
        );
        // One side without them: every figure of the other is a row, missing a side.
        let c = compare(&plain, &server_report(), &tol, false, 0.95).expect("compares");
        let rows = server_rows(&c);
        assert!(!rows.is_empty());
        assert!(rows.iter().all(|m| m.verdict == Verdict::Missing));
        assert_eq!(c.regressions, 0);
    }

    fn t(spec: &str) -> Tolerances {
        Tolerances::parse(spec).expect("tolerances")
    }

    #[test]
    fn verdicts_follow_tolerance_direction_and_noise() {
        let tol = t("ttft_p99=10%,requests_per_s=-5%,error_rate=+0.5pp");
        let v = |m: &str, b, c, ci, strict| {
            judge(
                m.into(),
                Some(b),
                Some(c),
                ChangeUnit::Percent,
                ci,
                (100, 100),
                &tol,
                strict,
            )
            .verdict
        };
        assert_eq!(v("ttft_p99", 100.0, 109.0, None, false), Verdict::Ok);
        assert_eq!(
            v("ttft_p99", 100.0, 80.0, None, false),
            Verdict::Ok,
            "faster is not a regression"
        );
        assert_eq!(
            v("ttft_p99", 100.0, 120.0, Some((12.0, 28.0)), false),
            Verdict::Regressed
        );
        assert_eq!(
            v("ttft_p99", 100.0, 120.0, Some((-3.0, 45.0)), false),
            Verdict::WithinNoise
        );
        assert_eq!(
            v("ttft_p99", 100.0, 120.0, Some((-3.0, 45.0)), true),
            Verdict::Regressed,
            "--strict ignores noise"
        );
        assert_eq!(
            v("requests_per_s", 100.0, 94.0, Some((-9.0, -3.0)), false),
            Verdict::Regressed
        );
        assert_eq!(v("requests_per_s", 100.0, 120.0, None, false), Verdict::Ok);
        assert_eq!(
            v("itl_p50", 1.0, 9.0, None, false),
            Verdict::Info,
            "no tolerance: reported only"
        );
        let e = judge(
            "error_rate".into(),
            Some(0.01),
            Some(0.02),
            ChangeUnit::PercentagePoints,
            None,
            (1, 1),
            &tol,
            false,
        );
        assert!((e.change.expect("change") - 1.0).abs() < 1e-9);
        assert_eq!(e.verdict, Verdict::Regressed);
    }
}
