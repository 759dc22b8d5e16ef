//! Service-level objectives over a benchmark's results, and per-request goodput.
//!
//! An SLO is a list of checks like `ttft_p99<=500ms,itl_p50<=20ms,error_rate<=1%`, each
//! evaluated against one benchmark's measured window. Latency checks read successful
//! requests and, for `ttft`, `ttft_any` and `e2e`, also the `…_with_incomplete` family
//! (successful and errored requests as measured, plus the elapsed time of every request
//! cut off before it finished, a lower bound); the stricter value decides, so the
//! slowest requests cannot vanish from a verdict by being cancelled. `error_rate` is
//! errored / (completed + errored). Goodput (as `vllm bench serve` defines it) is per
//! request: a completed request is "good" when it meets every per-request threshold.

pub use crate::data::{
    CheckResult, Cmp, Goodput, GoodputSpec, SloVerdict, parse_ms, threshold_string,
};
use crate::result::BenchmarkResult;
use llmsurge_proto::Distribution;
use serde::{Deserialize, Serialize};

/// What a check measures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SloTarget {
    /// A statistic of a latency distribution of successful requests, in ms.
    Latency {
        /// Report key of the metric (`ttft`, `itl`, `tpot`, `request_latency`, …).
        metric: String,
        /// `mean`, `min`, `max`, or a percentile key (`p50`, `p99_9`).
        stat: String,
    },
    /// Errored / (completed + errored), a fraction.
    ErrorRate,
    /// Completed requests per second.
    RequestsPerS,
    /// Output tokens per second.
    OutputTokensPerS,
    /// Good requests per second (needs `--goodput`).
    GoodputPerS,
}

/// One check of an SLO.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloCheck {
    /// As written, e.g. `ttft_p99<=500ms`.
    pub name: String,
    /// What it measures.
    pub target: SloTarget,
    /// The comparison.
    pub cmp: Cmp,
    /// The threshold, in report units (ms, a fraction, per second).
    pub threshold: f64,
}

/// A list of checks, all of which must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// The checks.
    pub checks: Vec<SloCheck>,
}

/// Fewest completed requests any latency check decides on: a mean, a minimum or a
/// median of one or two requests says nothing of a server.
pub const MIN_SAMPLES: u64 = 5;

/// Completed requests a latency statistic needs to decide: for a percentile `q`,
/// ⌈1 / (1 − q)⌉ (so that at least one request lies at or beyond it: 100 for a p99,
/// 1,000 for a p99.9), and never fewer than [`MIN_SAMPLES`].
pub fn needed_samples(stat: &str) -> u64 {
    let q = stat
        .strip_prefix('p')
        .and_then(|p| p.replace('_', ".").parse::<f64>().ok())
        .map(|p| p / 100.0);
    match q {
        Some(q) if q > 0.0 && q < 1.0 => {
            // 1 / (1 − 0.99) is 100.000…01 in floating point: round before the ceiling.
            let n = (1.0 / (1.0 - q) * 1e6).round() / 1e6;
            (n.ceil() as u64).max(MIN_SAMPLES)
        }
        _ => MIN_SAMPLES,
    }
}

/// Latency metric names accepted in checks, with their report keys.
const LATENCY_METRICS: [(&str, &str); 8] = [
    ("ttft_any", "ttft_any"),
    ("ttft", "ttft"),
    ("itl", "itl"),
    ("tpot", "tpot"),
    ("e2e", "request_latency"),
    ("request_latency", "request_latency"),
    ("latency", "request_latency"),
    ("dispatch_lag", "dispatch_lag"),
];

const STATS: [&str; 14] = [
    "mean", "min", "max", "p0_1", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99",
    "p99_9",
];

fn split_cmp(check: &str) -> Option<(&str, Cmp, &str)> {
    for (sym, cmp) in [
        ("<=", Cmp::Le),
        (">=", Cmp::Ge),
        ("<", Cmp::Lt),
        (">", Cmp::Gt),
    ] {
        if let Some(i) = check.find(sym) {
            return Some((check[..i].trim(), cmp, check[i + sym.len()..].trim()));
        }
    }
    None
}

fn parse_number(value: &str, percent: bool) -> Result<f64, String> {
    let v = value.trim();
    // Divide rather than multiply by 0.01, so 3% is the same double as 3/100.
    let (num, divisor) = match v.strip_suffix('%') {
        Some(n) if percent => (n, 100.0),
        _ => (v, 1.0),
    };
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a number"))?;
    if !x.is_finite() || x < 0.0 {
        return Err(format!("{value:?} must be a non-negative number"));
    }
    Ok(x / divisor)
}

impl Slo {
    /// Parses `check,check,...`; each check is `metric_stat OP value` (`ttft_p99<=500ms`),
    /// `error_rate<=1%`, `requests_per_s>=10`, `output_tokens_per_s>=500`,
    /// `goodput_per_s>=5`.
    pub fn parse(spec: &str) -> Result<Slo, String> {
        let mut checks = Vec::new();
        for raw in spec.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let Some((lhs, cmp, value)) = split_cmp(raw) else {
                return Err(format!(
                    "{raw:?}: expected a comparison like ttft_p99<=500ms"
                ));
            };
            let (target, threshold) = match lhs {
                "error_rate" => (SloTarget::ErrorRate, parse_number(value, true)?),
                "requests_per_s" | "request_rate" => {
                    (SloTarget::RequestsPerS, parse_number(value, false)?)
                }
                "output_tokens_per_s" => (SloTarget::OutputTokensPerS, parse_number(value, false)?),
                "goodput_per_s" | "goodput" => {
                    (SloTarget::GoodputPerS, parse_number(value, false)?)
                }
                _ => {
                    let (metric, stat) = LATENCY_METRICS
                        .iter()
                        .find_map(|(name, key)| {
                            let stat = lhs.strip_prefix(name)?.strip_prefix('_')?;
                            Some((*key, stat))
                        })
                        .ok_or_else(|| {
                            format!(
                                "{raw:?}: unknown metric (use ttft, ttft_any, itl, tpot, e2e or dispatch_lag with a statistic, e.g. ttft_p99; or error_rate, requests_per_s, output_tokens_per_s, goodput_per_s)"
                            )
                        })?;
                    let stat = stat.replace('.', "_");
                    if !STATS.contains(&stat.as_str()) {
                        return Err(format!(
                            "{raw:?}: unknown statistic {stat:?} (use mean, min, max, p50, p90, p95, p99, p99_9, …)"
                        ));
                    }
                    (
                        SloTarget::Latency {
                            metric: metric.to_string(),
                            stat,
                        },
                        parse_ms(value).map_err(|e| format!("{raw:?}: {e}"))?,
                    )
                }
            };
            checks.push(SloCheck {
                name: raw.replace(' ', ""),
                target,
                cmp,
                threshold,
            });
        }
        if checks.is_empty() {
            return Err("no checks (e.g. ttft_p99<=500ms,error_rate<=1%)".into());
        }
        Ok(Slo { checks })
    }

    /// Evaluates every check against `result`.
    pub fn evaluate(&self, result: &BenchmarkResult) -> SloVerdict {
        let checks: Vec<CheckResult> = self
            .checks
            .iter()
            .map(|c| {
                let m = measure(c, result);
                let holds = m.value.is_some_and(|v| c.cmp.holds(v, c.threshold));
                // A latency statistic of too few requests decides nothing: a pass needs
                // enough completed requests; a failure read from lower bounds of
                // unfinished requests needs enough of those (the true value is worse).
                let short = m.samples.and_then(|(needed, completed, decider)| {
                    let have = if holds {
                        completed.min(decider)
                    } else {
                        decider
                    };
                    (m.value.is_some() && have < needed).then(|| {
                        format!(
                            "inconclusive: {completed} completed requests, {needed} needed for {}",
                            stat_name(c)
                        )
                    })
                });
                CheckResult {
                    name: c.name.clone(),
                    measured: m.value,
                    threshold: c.threshold,
                    cmp: c.cmp,
                    passed: holds && short.is_none(),
                    inconclusive: short.is_some(),
                    reason: short,
                    distribution: m.distribution,
                }
            })
            .collect();
        SloVerdict {
            passed: checks.iter().all(|c| c.passed),
            checks,
            not_kept_up: None,
        }
    }

    /// The verdict of a finished benchmark: [`Slo::evaluate`], and for one whose server
    /// did not keep up with the offered load ([`crate::kept_up::kept_up`]), every latency
    /// and goodput check failed with the reason. Its latencies were cut short by the time
    /// limit, not kept low by the server: run longer and they grow without bound.
    pub fn judge(&self, result: &BenchmarkResult) -> SloVerdict {
        let mut verdict = self.evaluate(result);
        if let Some(why) = crate::kept_up::kept_up(result).why_not() {
            for c in verdict.checks.iter_mut().filter(|c| {
                self.checks.iter().any(|k| {
                    k.name == c.name
                        && matches!(k.target, SloTarget::Latency { .. } | SloTarget::GoodputPerS)
                })
            }) {
                c.passed = false;
                c.inconclusive = false;
                c.reason = Some(why.clone());
            }
            verdict.passed = verdict.checks.iter().all(|c| c.passed);
            verdict.not_kept_up = Some(why);
        }
        verdict
    }
}

/// `ttft p99` for `ttft_p99<=…`: the statistic a check reads, for messages.
fn stat_name(c: &SloCheck) -> String {
    match &c.target {
        SloTarget::Latency { metric, stat } => format!("{metric} {stat}"),
        _ => c.name.clone(),
    }
}

/// A check's measurement: its value, the distribution it was read from (latency
/// checks), and for latency checks the samples it needs, the completed requests behind
/// it and the samples of the distribution that decided.
struct Measured {
    value: Option<f64>,
    distribution: Option<String>,
    samples: Option<(u64, u64, u64)>,
}

impl Measured {
    fn value(value: Option<f64>) -> Self {
        Self {
            value,
            distribution: None,
            samples: None,
        }
    }
}

fn measure(check: &SloCheck, r: &BenchmarkResult) -> Measured {
    match &check.target {
        SloTarget::Latency { metric, stat } => {
            let read = |d: &Distribution| match stat.as_str() {
                _ if d.count == 0 => None,
                "mean" => Some(d.mean),
                "min" => Some(d.min),
                "max" => Some(d.max),
                key => d.percentiles.get(key),
            };
            // The survivors and, where the report has it (not before the family existed),
            // the family with lower bounds; the stricter of the two is the verdict's, so
            // counting unfinished requests can fail a check but never pass one.
            let family = format!("{metric}_with_incomplete");
            let candidates = [
                r.metrics.get(metric).map(|d| {
                    (
                        read(&d.successful),
                        format!("{metric}.successful"),
                        d.successful.count,
                    )
                }),
                r.metrics
                    .get(&family)
                    .map(|d| (read(&d.total), format!("{family}.total"), d.total.count)),
            ];
            // Requests behind the survivors' distribution: ITL has a sample per token,
            // the others one per request.
            let completed = r
                .metrics
                .get(metric)
                .map_or(0, |d| d.successful.count)
                .min(r.measured_requests.completed);
            let needed = needed_samples(stat);
            let named = candidates
                .iter()
                .flatten()
                .last()
                .map(|(_, n, _)| n.clone());
            let stricter = candidates
                .into_iter()
                .flatten()
                .filter_map(|(v, name, n)| Some((v?, name, n)))
                .reduce(|a, b| {
                    let b_stricter = match check.cmp {
                        Cmp::Le | Cmp::Lt => b.0 > a.0,
                        Cmp::Ge | Cmp::Gt => b.0 < a.0,
                    };
                    if b_stricter { b } else { a }
                });
            match stricter {
                Some((v, name, n)) => {
                    // The survivors' count is in requests, not tokens, for ITL too.
                    let decider = if name.ends_with(".successful") {
                        completed
                    } else {
                        n
                    };
                    Measured {
                        value: Some(v),
                        distribution: Some(name),
                        samples: Some((needed, completed, decider)),
                    }
                }
                None => Measured {
                    value: None,
                    distribution: Some(named.unwrap_or_else(|| format!("{metric}.successful"))),
                    samples: None,
                },
            }
        }
        SloTarget::ErrorRate => {
            let m = &r.measured_requests;
            let finished = m.completed + m.errored;
            Measured::value((finished > 0).then(|| m.errored as f64 / finished as f64))
        }
        SloTarget::RequestsPerS => Measured::value(Some(r.throughput.requests_per_s)),
        SloTarget::OutputTokensPerS => Measured::value(r.throughput.output_tokens_per_s),
        SloTarget::GoodputPerS => Measured::value(r.goodput.as_ref().map(|g| g.requests_per_s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constraints::Limits;
    use crate::result::{BuildContext, build};
    use crate::state::WorkerGroupState;
    use crate::strategy::{Strategy, StrategySettings};
    use llmsurge_proto::{
        ClockAnchor, Metric, MetricSet, MonoNanos, RequestError, RequestRecord, RequestStatus,
        StatusClass, TokenSource, UpdateBatch,
    };
    use std::time::Duration;

    const T0: MonoNanos = MonoNanos(1_000_000_000_000);

    fn at_ms(ms: u64) -> MonoNanos {
        T0 + Duration::from_millis(ms)
    }

    /// The result of one batch of `finished` requests and their `metrics`, ending at
    /// `end_ms` after t0.
    fn built(
        mut state: WorkerGroupState,
        metrics: MetricSet,
        finished: Vec<RequestRecord>,
        strategy: Strategy,
        end_ms: u64,
    ) -> BenchmarkResult {
        let peak = finished.len() as u64;
        let batch = UpdateBatch {
            started: vec![],
            finished,
            metrics: metrics.encode().expect("encode"),
            model_metrics: vec![],
        };
        state.apply(0, &batch, &mut |_| {}).expect("apply");
        let anchor = ClockAnchor {
            mono: T0,
            unix_nanos: 1_700_000_000_000_000_000,
        };
        build(
            &state,
            BuildContext {
                index: 0,
                strategy,
                settings: StrategySettings::default(),
                limits: Limits::default(),
                anchor: &anchor,
                t0: T0,
                end: at_ms(end_ms),
                window: Default::default(),
                stop_reason: None,
                stop_time: None,
                interrupted: false,
                concurrency_peak: peak,
                worker_cpu_s: 0.0,
                dispatch_lag_threshold_ms: 10.0,
                workers: vec![],
            },
        )
    }

    /// 97 completed requests with TTFT 10, 20, … 970 ms and 3 errored ones; every request
    /// runs from t0 to t0 + 10 s with 10 output tokens, so the measured window is 10 s.
    fn result(goodput: Option<GoodputSpec>) -> BenchmarkResult {
        let mut state = WorkerGroupState::new(1, T0, Limits::default());
        state.goodput = goodput;
        let mut metrics = MetricSet::new();
        let mut finished = Vec::new();
        for i in 1..=100u64 {
            let errored = i > 97;
            let ttft = i * 10;
            if !errored {
                metrics.record(StatusClass::Successful, Metric::Ttft, ttft * 1000);
            }
            finished.push(RequestRecord {
                slot: i,
                status: if errored {
                    RequestStatus::Errored
                } else {
                    RequestStatus::Completed
                },
                error: errored.then(|| RequestError {
                    kind: llmsurge_proto::ErrorKind::Http { status: 500 },
                    message: "x".into(),
                }),
                first_content: (!errored).then(|| at_ms(ttft)),
                prompt_tokens: Some(5),
                output_tokens: if errored { 0 } else { 10 },
                streamed_tokens: 10,
                ..RequestRecord::completed(T0, Some(at_ms(ttft)), at_ms(10_000), 10)
            });
        }
        built(
            state,
            metrics,
            finished,
            Strategy::Constant { rate: 10.0 },
            10_000,
        )
    }

    fn verdicts(spec: &str, r: &BenchmarkResult) -> Vec<bool> {
        Slo::parse(spec)
            .expect("parses")
            .evaluate(r)
            .checks
            .iter()
            .map(|c| c.passed)
            .collect()
    }

    #[test]
    fn latency_checks_read_the_successful_distribution() {
        let r = result(None);
        // p99 of 10..=970 step 10 is the 97th value, 970 ms (HDR keeps 3 significant
        // digits: 970.2 at most); p50 is the 49th, 490 ms (490.24 at most); mean 490.
        // 97 completed requests are too few for a p99 (100 needed): measured, but
        // neither check decides, whichever side of the threshold it lies.
        let v = Slo::parse("ttft_p99<=971ms,ttft_p99<=969ms")
            .expect("parses")
            .evaluate(&r);
        assert!(
            v.checks.iter().all(|c| c.inconclusive && !c.passed),
            "{v:?}"
        );
        assert_eq!(v.label(), "INCONCLUSIVE");
        assert_eq!(
            v.checks[0].reason.as_deref(),
            Some("inconclusive: 97 completed requests, 100 needed for ttft p99")
        );
        let measured = v.checks[0].measured.expect("measured");
        assert!((970.0..=970.3).contains(&measured), "{measured}");
        assert_eq!(
            verdicts("ttft_p50<490.5ms,ttft_p50<489.9ms", &r),
            [true, false]
        );
        assert_eq!(
            verdicts("ttft_mean<=0.5s,ttft_mean>=0.48s,ttft_max<=1s", &r),
            [true, true, true]
        );
        let v = Slo::parse("ttft_p90<=971ms").expect("parses").evaluate(&r);
        assert!(v.passed && v.label() == "PASS", "{v:?}");
    }

    /// 20 completed requests (TTFT 100 ms, e2e 200 ms) and 5 cut off at 5 s after their
    /// start with no token, as workers report them: the bounds in the incomplete class.
    fn cut_off_result(goodput: &str) -> BenchmarkResult {
        let mut state = WorkerGroupState::new(1, T0, Limits::default());
        state.goodput = Some(GoodputSpec::parse(goodput).expect("parses"));
        let mut metrics = MetricSet::new();
        let mut finished = Vec::new();
        for i in 0..25u64 {
            let cut = i >= 20;
            let r = RequestRecord {
                slot: i,
                status: if cut {
                    RequestStatus::Cancelled
                } else {
                    RequestStatus::Completed
                },
                prompt_tokens: Some(5),
                output_tokens: if cut { 0 } else { 10 },
                streamed_tokens: 10,
                ..RequestRecord::completed(
                    T0,
                    (!cut).then(|| at_ms(100)),
                    at_ms(if cut { 5_000 } else { 200 }),
                    10,
                )
            };
            if cut {
                llmsurge_proto::metrics::record_lower_bounds(&mut metrics, &r);
            } else {
                metrics.record(StatusClass::Successful, Metric::Ttft, 100_000);
                metrics.record(StatusClass::Successful, Metric::RequestLatency, 200_000);
            }
            finished.push(r);
        }
        built(
            state,
            metrics,
            finished,
            Strategy::Concurrent { streams: 5 },
            5_000,
        )
    }

    #[test]
    fn requests_cut_off_count_as_lower_bounds_in_latency_checks() {
        let r = cut_off_result("ttft:1s");
        // Completed alone: TTFT p99 100 ms. With the 5 cut off at 5 s: p99 ≥ 5 s.
        let p99 = r.metrics["ttft"].successful.percentiles.p99;
        assert!((100.0..100.2).contains(&p99), "{p99}");
        let family = &r.metrics["ttft_with_incomplete"];
        assert_eq!((family.successful.count, family.incomplete.count), (20, 5));
        assert_eq!(family.total.count, 25);
        assert!(family.total.percentiles.p99 >= 4_999.0);
        let v = Slo::parse("ttft_p99<=500ms,e2e_p50<=300ms,e2e_p99<=1s")
            .expect("parses")
            .evaluate(&r);
        let passed: Vec<bool> = v.checks.iter().map(|c| c.passed).collect();
        assert_eq!(passed, [false, true, false], "{v:?}");
        assert_eq!(
            v.checks[0].distribution.as_deref(),
            Some("ttft_with_incomplete.total")
        );
        assert!(!v.passed);
        // A report from before the family existed reads successful requests.
        let mut old = r.clone();
        old.metrics.retain(|k, _| !k.ends_with("_with_incomplete"));
        let v = Slo::parse("ttft_p90<=500ms")
            .expect("parses")
            .evaluate(&old);
        assert!(v.passed, "{v:?}");
        assert_eq!(v.checks[0].distribution.as_deref(), Some("ttft.successful"));

        // Requests cut off a moment after they were sent have small bounds: they may
        // fail a check, never pass one the survivors fail.
        let mut early = r.clone();
        if let Some(d) = early.metrics.get_mut("ttft_with_incomplete") {
            d.total.percentiles.p50 = 1.0;
        }
        let v = Slo::parse("ttft_p50<=50ms,ttft_p50>=50ms")
            .expect("parses")
            .evaluate(&early);
        assert!(!v.checks[0].passed, "{v:?}");
        assert_eq!(v.checks[0].distribution.as_deref(), Some("ttft.successful"));
        assert!(!v.checks[1].passed, "{v:?}");
        assert_eq!(
            v.checks[1].distribution.as_deref(),
            Some("ttft_with_incomplete.total")
        );
    }

    #[test]
    fn requests_cut_off_past_a_threshold_are_not_good() {
        let g = cut_off_result("ttft:1s").goodput.expect("goodput");
        assert_eq!((g.good_requests, g.unfinished_not_good), (20, 5));
        assert!((g.fraction - 20.0 / 25.0).abs() < 1e-12);
        // A cut-off request that had not yet missed a threshold is not good either: it
        // did not finish. Only the informative count of sure misses differs.
        let g = cut_off_result("ttft:10s").goodput.expect("goodput");
        assert_eq!((g.good_requests, g.unfinished_not_good), (20, 0));
        assert!((g.fraction - 20.0 / 25.0).abs() < 1e-12);
        let spec = GoodputSpec::parse("ttft:10s").expect("parses");
        let r = RequestRecord {
            status: RequestStatus::Cancelled,
            start: None,
            output_tokens_source: TokenSource::Unknown,
            late: true,
            ..RequestRecord::completed(T0, None, at_ms(5_000), 0)
        };
        assert!(!spec.already_missed(&r));
        assert!(
            GoodputSpec::parse("e2e:4s")
                .expect("parses")
                .already_missed(&r)
        );
    }

    #[test]
    fn a_percentile_needs_enough_requests_to_decide() {
        let needed: Vec<u64> = ["p50", "p90", "p95", "p99", "p99_9", "mean", "max"]
            .iter()
            .map(|s| needed_samples(s))
            .collect();
        assert_eq!(needed, [5, 10, 20, 100, 1000, 5, 5]);
        // One survivor of a drowned probe (the capacity search's 1 of 1,276) passes
        // nothing: its ITL has 15 gaps, but they are one request's.
        let mut r = result(None);
        r.measured_requests.completed = 1;
        let v = Slo::parse("ttft_p50<=10s,error_rate<=100%")
            .expect("parses")
            .evaluate(&r);
        assert!(v.checks[0].inconclusive && !v.checks[0].passed, "{v:?}");
        assert!(v.checks[1].passed, "a rate is not a percentile");
        assert!(!v.passed);
        let line = v.checks[0].to_string();
        assert!(line.starts_with("INCONCLUSIVE ttft_p50<=10s"), "{line}");
        assert!(
            line.ends_with("1 completed requests, 5 needed for ttft p50"),
            "{line}"
        );
    }

    #[test]
    fn goodput_thresholds_are_written_as_durations_and_read_back() {
        let g = GoodputSpec::parse("ttft:500ms,tpot:0.25ms,e2e:10s").expect("parses");
        let json = serde_json::to_value(g).expect("serialises");
        assert_eq!(
            json,
            serde_json::json!({"ttft": "500ms", "tpot": "0.25ms", "e2e": "10s"})
        );
        let back: GoodputSpec = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, g);
        assert_eq!(g.to_string(), "ttft<=500ms,tpot<=0.25ms,e2e<=10s");
        // Reports written before: {secs, nanos}, nulls for the thresholds not set.
        let old: GoodputSpec = serde_json::from_value(
            serde_json::json!({"ttft": null, "tpot": null, "e2e": {"secs": 10, "nanos": 0}}),
        )
        .expect("an old report's spec");
        assert_eq!(old, GoodputSpec::parse("e2e:10s").expect("parses"));
    }

    #[test]
    fn rates_are_exact_fractions() {
        let r = result(None);
        // 3 errored of 100 finished: exactly 3%.
        assert_eq!(
            verdicts("error_rate<=3%,error_rate<3%,error_rate<=0.03", &r),
            [true, false, true]
        );
        // 97 completed in a 10 s window: 9.7 req/s; 970 output tokens: 97 tok/s.
        assert_eq!(
            verdicts("requests_per_s>=9.7,requests_per_s>9.7", &r),
            [true, false]
        );
        assert_eq!(
            verdicts("output_tokens_per_s>=97,output_tokens_per_s>97", &r),
            [true, false]
        );
    }

    #[test]
    fn a_missing_measurement_fails_the_check() {
        let r = result(None);
        let v = Slo::parse("tpot_p50<=1000ms,goodput_per_s>=1")
            .expect("parses")
            .evaluate(&r);
        assert!(!v.passed);
        assert!(v.checks.iter().all(|c| c.measured.is_none() && !c.passed));
    }

    #[test]
    fn goodput_counts_requests_meeting_every_threshold() {
        // TTFT <= 500 ms: the requests with TTFT 10..=500, 50 of the 97 completed.
        let spec = GoodputSpec::parse("ttft:500ms,e2e:10s").expect("parses");
        let r = result(Some(spec));
        let g = r.goodput.expect("goodput");
        assert_eq!(g.good_requests, 50);
        assert!((g.requests_per_s - 5.0).abs() < 1e-12);
        // Errored requests are judged too: never good.
        assert!((g.fraction - 50.0 / 100.0).abs() < 1e-12);
        assert_eq!(
            verdicts("goodput_per_s>=5,goodput_per_s>5", &r),
            [true, false]
        );
        // e2e of 10 s exceeds 9.999 s: nothing is good.
        let r = result(Some(GoodputSpec::parse("e2e:9999ms").expect("parses")));
        assert_eq!(r.goodput.expect("goodput").good_requests, 0);
    }

    #[test]
    fn goodput_thresholds_apply_per_request() {
        let g = GoodputSpec::parse("ttft:500ms,tpot:50ms").expect("parses");
        let ms = Duration::from_millis;
        assert!(g.is_good(Some(ms(500)), Some(ms(50)), ms(99_999)));
        assert!(!g.is_good(Some(ms(501)), Some(ms(10)), ms(1)));
        assert!(!g.is_good(Some(ms(10)), Some(ms(51)), ms(1)));
        assert!(
            !g.is_good(None, None, ms(1)),
            "no content token: TTFT unmet"
        );
        assert!(
            g.is_good(Some(ms(10)), None, ms(1)),
            "one output token: TPOT does not apply"
        );
    }

    #[test]
    fn specs_parse_with_units_and_refuse_nonsense() {
        let slo = Slo::parse(
            "ttft_p99<=500ms, itl_p50<=20, e2e_p95<=5s, error_rate<=1%, dispatch_lag_p99_9<1ms",
        )
        .expect("parses");
        let thresholds: Vec<f64> = slo.checks.iter().map(|c| c.threshold).collect();
        assert_eq!(thresholds, [500.0, 20.0, 5000.0, 0.01, 1.0]);
        assert_eq!(
            slo.checks[2].target,
            SloTarget::Latency {
                metric: "request_latency".into(),
                stat: "p95".into()
            }
        );
        assert_eq!(slo.checks[4].cmp, Cmp::Lt);
        for bad in [
            "ttft_p99",
            "ttft_p42<=1ms",
            "bogus_p50<=1ms",
            "ttft_p99<=fast",
            "",
            "error_rate<=-1",
        ] {
            assert!(Slo::parse(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(GoodputSpec::parse("ttft=5").is_err());
        assert!(GoodputSpec::parse("latency:5ms").is_err());
    }
}
