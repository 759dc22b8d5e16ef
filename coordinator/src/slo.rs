//! Service-level objectives over a benchmark's results, and per-request goodput.
//!
//! An SLO is a list of checks like `ttft_p99<=500ms,itl_p50<=20ms,error_rate<=1%`, each
//! evaluated against one benchmark's measured window. Latency checks read successful
//! requests and, for `ttft`, `ttft_any` and `e2e`, also the `…_with_incomplete` family
//! (successful and errored requests as measured, plus the elapsed time of every request
//! cut off before it finished, a lower bound) and, where the result has it, the
//! `…_from_intent` distribution (timed from the instant the load asked for the request);
//! the stricter decides, so the slowest requests cannot vanish from a verdict by being
//! cancelled or held in the client. A percentile check is a statement with a confidence
//! ([`crate::precision::PercentileObjective`]): PASS when the order-statistic bound on
//! its bad side meets the threshold, FAIL when the bound on its good side misses it,
//! else INCONCLUSIVE with about how many more requests would decide. `error_rate` is
//! errored / (completed + errored). Goodput (as `vllm bench serve` defines it) is per
//! request: a completed request is "good" when it meets every per-request threshold.

pub use crate::data::{
    CheckResult, Cmp, Goodput, GoodputSpec, SloVerdict, parse_ms, threshold_string,
};
use crate::precision::{
    DEFAULT_CONFIDENCE, Decision, PercentileBounds, PercentileObjective, histogram_reader,
    summary_reader,
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
    /// Per-request output speed in tokens per second, `1000 / tpot` (a user's decode
    /// speed): a percentile, `min` or `max`, judged as the mirrored statistic of `tpot`
    /// (its p10 is 1000 / tpot's p90), so its confidence bounds are tpot's, inverted.
    OutputSpeed {
        /// A percentile key (`p10`), `min` or `max`.
        stat: String,
    },
    /// A statistic of the report's session section: `session_duration` (ms, completed
    /// sessions, think times included) or `turns_completed` (per started session).
    Session {
        /// `session_duration` or `turns_completed`.
        metric: String,
        /// `mean`, `p50`, `p90`, `p99` or `max`.
        stat: String,
    },
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// The checks.
    pub checks: Vec<SloCheck>,
    /// Probability that a percentile check's bounds bracket the true percentile
    /// (`--confidence`, default 0.95).
    #[serde(default = "default_confidence")]
    pub confidence: f64,
}

impl Default for Slo {
    fn default() -> Self {
        Slo {
            checks: Vec::new(),
            confidence: DEFAULT_CONFIDENCE,
        }
    }
}

fn default_confidence() -> f64 {
    DEFAULT_CONFIDENCE
}

/// Fewest requests a mean, minimum or maximum decides on: one of one or two requests
/// says nothing of a server. Percentiles need no such floor: their confidence bounds
/// say when there are enough.
pub const MIN_SAMPLES: u64 = 5;

/// The quantile of a percentile statistic (`p99_9` → 0.999); `None` for `mean`, `min`,
/// `max`.
pub fn quantile(stat: &str) -> Option<f64> {
    let p: f64 = stat.strip_prefix('p')?.replace('_', ".").parse().ok()?;
    (p > 0.0 && p < 100.0).then_some(p / 100.0)
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

/// Statistics of the session section's summaries.
const SESSION_STATS: [&str; 5] = ["mean", "p50", "p90", "p99", "max"];

/// The statistic of `tpot` that an output-speed statistic mirrors (speed = 1000 / tpot
/// reverses the order: p10 ↔ p90, min ↔ max).
fn mirrored_stat(stat: &str) -> Option<String> {
    match stat {
        "min" => Some("max".into()),
        "max" => Some("min".into()),
        _ => {
            let q = quantile(stat)?;
            let p = ((1.0 - q) * 1000.0).round() / 10.0;
            let key = format!("p{p}").replace('.', "_");
            STATS.contains(&key.as_str()).then_some(key)
        }
    }
}

/// Parses an `output_speed_…` or session check; `None` when `lhs` is neither.
fn parse_user_check(raw: &str, lhs: &str, value: &str) -> Option<Result<(SloTarget, f64), String>> {
    if let Some(stat) = lhs.strip_prefix("output_speed_") {
        let stat = stat.replace('.', "_");
        if mirrored_stat(&stat).is_none() {
            return Some(Err(format!(
                "{raw:?}: output_speed takes a percentile, min or max (e.g. output_speed_p10>=40tok/s); a mean of speeds is not 1000 / mean tpot"
            )));
        }
        let number = value.trim().trim_end_matches("tok/s").trim();
        return Some(match parse_number(number, false) {
            Ok(v) if v > 0.0 => Ok((SloTarget::OutputSpeed { stat }, v)),
            Ok(_) => Err(format!("{raw:?}: an output speed must be above 0 tok/s")),
            Err(e) => Err(format!("{raw:?}: {e}")),
        });
    }
    for metric in ["session_duration", "turns_completed"] {
        let Some(stat) = lhs.strip_prefix(metric).and_then(|s| s.strip_prefix('_')) else {
            continue;
        };
        if !SESSION_STATS.contains(&stat) {
            return Some(Err(format!(
                "{raw:?}: {metric} takes mean, p50, p90, p99 or max"
            )));
        }
        let threshold = if metric == "session_duration" {
            parse_ms(value)
        } else {
            parse_number(value, false)
        };
        return Some(
            threshold
                .map(|t| {
                    let target = SloTarget::Session {
                        metric: metric.into(),
                        stat: stat.into(),
                    };
                    (target, t)
                })
                .map_err(|e| format!("{raw:?}: {e}")),
        );
    }
    None
}

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
            let user = parse_user_check(raw, lhs, value).transpose()?;
            let (target, threshold) = if let Some(parsed) = user {
                parsed
            } else {
                match lhs {
                    "error_rate" => (SloTarget::ErrorRate, parse_number(value, true)?),
                    "requests_per_s" | "request_rate" => {
                        (SloTarget::RequestsPerS, parse_number(value, false)?)
                    }
                    "output_tokens_per_s" => {
                        (SloTarget::OutputTokensPerS, parse_number(value, false)?)
                    }
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
                                "{raw:?}: unknown metric (use ttft, ttft_any, itl, tpot, e2e or dispatch_lag with a statistic, e.g. ttft_p99; or error_rate, requests_per_s, output_tokens_per_s, goodput_per_s, output_speed_p10, session_duration_p90, turns_completed_mean)"
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
        Ok(Slo {
            checks,
            confidence: DEFAULT_CONFIDENCE,
        })
    }

    /// Evaluates every check against `result`. A latency check decides by its rule
    /// (percentile bounds, or [`MIN_SAMPLES`] for a mean, min or max) and is otherwise
    /// INCONCLUSIVE, its reason saying about how many more requests would decide; a rate
    /// holds or not as measured; a missing measurement fails.
    pub fn evaluate(&self, result: &BenchmarkResult) -> SloVerdict {
        let checks: Vec<CheckResult> = self
            .checks
            .iter()
            .map(|c| {
                let m = measure(c, result, self.confidence);
                let holds = m.value.is_some_and(|v| c.cmp.holds(v, c.threshold));
                // Lower bounds of requests that did not complete can fail a latency check,
                // never pass one: without a completed request there is nothing to measure.
                let nothing_completed = match &c.target {
                    SloTarget::Latency { metric, .. } => result
                        .metrics
                        .get(metric)
                        .is_none_or(|d| d.successful.count == 0),
                    SloTarget::OutputSpeed { .. } => result
                        .metrics
                        .get("tpot")
                        .is_none_or(|d| d.successful.count == 0),
                    _ => false,
                };
                let decision = match (&m.value, &m.judged) {
                    _ if nothing_completed => Decision::Fail,
                    (Some(_), Some(j)) => j.decision,
                    _ if holds => Decision::Pass,
                    _ => Decision::Fail,
                };
                let inconclusive = decision == Decision::Inconclusive;
                // What failed requests' lower bounds give is no measurement of it: no
                // value, no bounds.
                let judged = m.judged.as_ref().filter(|_| !nothing_completed);
                let percentile = judged.filter(|j| j.percentile);
                CheckResult {
                    name: c.name.clone(),
                    measured: m.value.filter(|_| !nothing_completed),
                    threshold: c.threshold,
                    cmp: c.cmp,
                    passed: decision == Decision::Pass,
                    inconclusive,
                    reason: if nothing_completed {
                        Some(format!(
                            "no request completed: {} has nothing to measure",
                            stat_name(c)
                        ))
                    } else {
                        judged
                            .filter(|_| inconclusive)
                            .map(|j| j.why_inconclusive(&stat_name(c), unit(c), self.confidence))
                    },
                    distribution: m.distribution,
                    lower: percentile.and_then(|j| j.lower),
                    upper: percentile.and_then(|j| j.upper),
                    confidence: percentile.map(|_| self.confidence),
                    more_requests: judged
                        .filter(|_| inconclusive)
                        .and_then(|j| j.more_requests),
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
    /// check of the server (not the client's `dispatch_lag`) and goodput check failed
    /// with the reason. Its latencies were cut short by the time
    /// limit, not kept low by the server: run longer and they grow without bound. In a
    /// benchmark that lost the server, no check passes: each that held is inconclusive.
    pub fn judge(&self, result: &BenchmarkResult) -> SloVerdict {
        let mut verdict = self.evaluate(result);
        if let Some(why) = crate::kept_up::kept_up(result).why_not() {
            for c in verdict.checks.iter_mut().filter(|c| {
                self.checks.iter().any(|k| {
                    k.name == c.name
                        && match &k.target {
                            // The client's own lag is no wait of the server's queue.
                            SloTarget::Latency { metric, .. } => metric != "dispatch_lag",
                            SloTarget::GoodputPerS
                            | SloTarget::OutputSpeed { .. }
                            | SloTarget::Session { .. } => true,
                            _ => false,
                        }
                })
            }) {
                c.passed = false;
                c.inconclusive = false;
                // Decided by the queue: more requests would only lengthen it.
                c.more_requests = None;
                c.reason = Some(why.clone());
            }
            verdict.passed = verdict.checks.iter().all(|c| c.passed);
            verdict.not_kept_up = Some(why);
        }
        // A benchmark that lost the server measured it only while it lived: what
        // completed before cannot pass the run, and what would have come after is
        // unknown. A check that failed on it still failed.
        if let Some(lost) = &result.server_lost {
            // Not the sentence with its reason: that quotes the server.
            let why = format!(
                "undecided: the server was lost at {:.1} s{}: what completed before cannot pass the benchmark",
                lost.at_s,
                lost.since_before().unwrap_or_default()
            );
            for c in verdict.checks.iter_mut().filter(|c| c.passed) {
                c.passed = false;
                c.inconclusive = true;
                c.more_requests = None;
                c.reason = Some(why.clone());
            }
            verdict.passed = false;
        }
        verdict
    }
}

/// `ttft p99` for `ttft_p99<=…`: the statistic a check reads, for messages.
/// The unit of a check's bounds: output speeds are tokens per second, the rest of the
/// checks with bounds (latencies) milliseconds.
fn unit(c: &SloCheck) -> &'static str {
    match c.target {
        SloTarget::OutputSpeed { .. } => "tok/s",
        _ => "ms",
    }
}

fn stat_name(c: &SloCheck) -> String {
    match &c.target {
        SloTarget::Latency { metric, stat } => format!("{metric} {stat}"),
        SloTarget::OutputSpeed { stat } => format!("output_speed {stat}"),
        _ => c.name.clone(),
    }
}

/// A check's measurement: its value and the distribution it was read from (latency
/// checks), and for latency checks what their rule decided.
struct Measured {
    value: Option<f64>,
    distribution: Option<String>,
    judged: Option<Judged>,
}

impl Measured {
    fn value(value: Option<f64>) -> Self {
        Self {
            value,
            distribution: None,
            judged: None,
        }
    }
}

/// What a latency check's rule decided from one distribution.
#[derive(Clone, Debug)]
struct Judged {
    decision: Decision,
    /// A percentile's bounds (the rule of [`PercentileObjective`]); else a mean, min or
    /// max judged by [`MIN_SAMPLES`].
    percentile: bool,
    lower: Option<f64>,
    upper: Option<f64>,
    more_requests: Option<u64>,
    /// The requests behind the distribution.
    requests: u64,
}

impl Judged {
    /// The reason of an inconclusive check: the bounds, and what would decide. It does
    /// not repeat the verdict: every output prints the label beside it.
    fn why_inconclusive(&self, stat: &str, unit: &str, confidence: f64) -> String {
        let more = match self.more_requests {
            Some(1) => "about 1 more request would decide".into(),
            Some(n) => format!("about {n} more requests would decide"),
            None => "no number of requests would decide: the observed value sits at the threshold"
                .into(),
        };
        if !self.percentile {
            return format!(
                "{stat} of {} requests, {MIN_SAMPLES} needed; {more}",
                self.requests
            );
        }
        let bound = |b: Option<f64>| b.map_or("?".to_string(), |v| format!("{v:.3}"));
        format!(
            "{stat} of {} requests lies in [{}, {}] {unit} at {}% confidence; {more}",
            self.requests,
            bound(self.lower),
            bound(self.upper),
            confidence_percent(confidence),
        )
    }
}

/// `95` for 0.95, `99.9` for 0.999: a confidence as a percentage, as the user wrote it.
pub fn confidence_percent(c: f64) -> String {
    let p = (c * 1e6).round() / 1e4;
    format!("{p}")
}

/// Reads a stored histogram of the result by its `class_histograms` key
/// (`successful.ttft`), else, for successful requests, by its `histograms` key (reports
/// from before `class_histograms`).
fn stored_histogram(
    r: &BenchmarkResult,
    class: &str,
    metric: &str,
) -> Option<hdrhistogram::Histogram<u64>> {
    use base64::Engine;
    match r.class_histograms.get(&format!("{class}.{metric}")) {
        Some(b64) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
            llmsurge_proto::decode_histogram(&bytes).ok()
        }
        None if class == "successful" => r.histogram(metric),
        None => None,
    }
}

/// The histogram behind a candidate distribution of a latency check, when the result
/// keeps what it takes: `{metric}.successful`, or `{metric}_with_incomplete.total` (its
/// own values of every class plus the successful and errored values of `metric`, as
/// [`crate::result::distributions`] builds it). Keys are read as text, so a metric this
/// build does not know (a newer report's) still reads.
fn candidate_histogram(
    r: &BenchmarkResult,
    metric: &str,
    family: Option<&str>,
) -> Option<hdrhistogram::Histogram<u64>> {
    let Some(family) = family else {
        return stored_histogram(r, "successful", metric);
    };
    let parts = [
        ("successful", family),
        ("errored", family),
        ("incomplete", family),
        ("successful", metric),
        ("errored", metric),
    ];
    let mut total: Option<hdrhistogram::Histogram<u64>> = None;
    for (class, key) in parts {
        let key_present = r.class_histograms.contains_key(&format!("{class}.{key}"));
        if !key_present {
            continue;
        }
        let h = stored_histogram(r, class, key)?;
        match &mut total {
            Some(t) => t.add(&h).ok()?,
            None => total = Some(h),
        }
    }
    total
}

/// One distribution a latency check may read: its summary, its name for the verdict,
/// the requests behind it, and its histogram when the result keeps one.
struct Candidate<'a> {
    summary: &'a Distribution,
    name: String,
    requests: u64,
    histogram: Option<hdrhistogram::Histogram<u64>>,
}

impl Candidate<'_> {
    /// The value of `stat`, and what the check's rule decides from this distribution.
    fn judge(&self, check: &SloCheck, stat: &str, confidence: f64) -> Option<(f64, Judged)> {
        let d = self.summary;
        if d.count == 0 {
            return None;
        }
        let value = match stat {
            "mean" => d.mean,
            "min" => d.min,
            "max" => d.max,
            key => d.percentiles.get(key)?,
        };
        let judged = match quantile(stat) {
            Some(q) => {
                let objective = PercentileObjective {
                    q,
                    cmp: check.cmp,
                    threshold: check.threshold,
                    confidence,
                };
                let bounds: Option<PercentileBounds> = match &self.histogram {
                    Some(h) => {
                        objective.judge(&histogram_reader(h, 1000.0), h.len(), self.requests)
                    }
                    None => objective.judge(&summary_reader(d), d.count, self.requests),
                };
                // No request behind the values (none completed): nothing to bound.
                let bounds = bounds.unwrap_or(PercentileBounds {
                    lower: None,
                    upper: None,
                    decision: Decision::Inconclusive,
                    more_requests: None,
                });
                Judged {
                    decision: bounds.decision,
                    percentile: true,
                    lower: bounds.lower,
                    upper: bounds.upper,
                    more_requests: bounds.more_requests,
                    requests: self.requests.min(d.count),
                }
            }
            None => {
                let decision = if self.requests < MIN_SAMPLES {
                    Decision::Inconclusive
                } else if check.cmp.holds(value, check.threshold) {
                    Decision::Pass
                } else {
                    Decision::Fail
                };
                Judged {
                    decision,
                    percentile: false,
                    lower: None,
                    upper: None,
                    more_requests: Some(MIN_SAMPLES.saturating_sub(self.requests)),
                    requests: self.requests,
                }
            }
        };
        Some((value, judged))
    }
}

fn measure(check: &SloCheck, r: &BenchmarkResult, confidence: f64) -> Measured {
    match &check.target {
        SloTarget::Latency { metric, stat } => {
            // Requests behind the survivors' distribution: ITL has a sample per token,
            // the others one per request.
            let completed = r
                .metrics
                .get(metric)
                .map_or(0, |d| d.successful.count)
                .min(r.measured_requests.completed);
            // The survivors; where the report has them (not before the families existed)
            // the family with lower bounds and the figures from intent.
            let family = format!("{metric}_with_incomplete");
            let intent = format!("{metric}_from_intent");
            let candidates: Vec<Candidate> = [
                r.metrics.get(metric).map(|d| Candidate {
                    summary: &d.successful,
                    name: format!("{metric}.successful"),
                    requests: completed,
                    histogram: candidate_histogram(r, metric, None),
                }),
                r.metrics.get(&family).map(|d| Candidate {
                    summary: &d.total,
                    name: format!("{family}.total"),
                    requests: d.total.count,
                    histogram: candidate_histogram(r, metric, Some(&family)),
                }),
                r.metrics.get(&intent).map(|d| Candidate {
                    summary: &d.successful,
                    name: format!("{intent}.successful"),
                    requests: d.successful.count.min(r.measured_requests.completed),
                    histogram: candidate_histogram(r, &intent, None),
                }),
            ]
            .into_iter()
            .flatten()
            .collect();
            let named = candidates.last().map(|c| c.name.clone());
            // The stricter decides: a failure over an inconclusive over a pass, and
            // between equals the stricter value, so counting unfinished requests or the
            // client's queue can fail a check but never pass one.
            let rank = |d: Decision| match d {
                Decision::Fail => 2,
                Decision::Inconclusive => 1,
                Decision::Pass => 0,
            };
            let stricter = candidates
                .iter()
                .filter_map(|c| {
                    let (v, j) = c.judge(check, stat, confidence)?;
                    Some((v, c.name.clone(), j))
                })
                .reduce(|a, b| {
                    let b_stricter = match rank(b.2.decision).cmp(&rank(a.2.decision)) {
                        std::cmp::Ordering::Greater => true,
                        std::cmp::Ordering::Less => false,
                        std::cmp::Ordering::Equal => match check.cmp {
                            Cmp::Le | Cmp::Lt => b.0 > a.0,
                            Cmp::Ge | Cmp::Gt => b.0 < a.0,
                        },
                    };
                    if b_stricter { b } else { a }
                });
            match stricter {
                Some((v, name, judged)) => Measured {
                    value: Some(v),
                    distribution: Some(name),
                    judged: Some(judged),
                },
                None => Measured {
                    value: None,
                    distribution: Some(named.unwrap_or_else(|| format!("{metric}.successful"))),
                    judged: None,
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
        SloTarget::OutputSpeed { stat } => measure_speed(check, stat, r, confidence),
        SloTarget::Session { metric, stat } => {
            let s = r.sessions.as_ref();
            let summary = match metric.as_str() {
                // An agent trace is its user's session: its duration is the trace's.
                "session_duration" => s
                    .and_then(|s| s.duration_ms.as_ref())
                    .or_else(|| r.agent_traces.as_ref().and_then(|t| t.duration_ms.as_ref())),
                _ => s.and_then(|s| s.turns_completed_per_session.as_ref()),
            };
            Measured::value(summary.map(|x| match stat.as_str() {
                "mean" => x.mean,
                "p50" => x.p50,
                "p90" => x.p90,
                "p99" => x.p99,
                _ => x.max,
            }))
        }
    }
}

/// An output-speed check, measured as its mirror on `tpot` (`output_speed_p10>=40` is
/// `tpot_p90<=25ms`): the decision is the same statement, and the value and bounds are
/// turned back into tokens per second.
fn measure_speed(check: &SloCheck, stat: &str, r: &BenchmarkResult, confidence: f64) -> Measured {
    let speed = |ms: f64| if ms > 0.0 { 1000.0 / ms } else { f64::INFINITY };
    let mirror = SloCheck {
        name: check.name.clone(),
        target: SloTarget::Latency {
            metric: "tpot".into(),
            stat: mirrored_stat(stat).unwrap_or_else(|| "p50".into()),
        },
        cmp: match check.cmp {
            Cmp::Ge => Cmp::Le,
            Cmp::Gt => Cmp::Lt,
            Cmp::Le => Cmp::Ge,
            Cmp::Lt => Cmp::Gt,
        },
        threshold: speed(check.threshold),
    };
    let mut m = measure(&mirror, r, confidence);
    m.value = m.value.map(speed);
    if let Some(j) = &mut m.judged {
        (j.lower, j.upper) = (j.upper.map(speed), j.lower.map(speed));
    }
    m
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
                answered_before: None,
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
        // digits: 970.2 at most). 97 requests bound no p99 from above (0.99^97 = 38% of
        // such samples lie wholly below the true p99): it cannot pass, and its lower
        // bound (940 ms or so) is within both thresholds, so it cannot fail either.
        let v = Slo::parse("ttft_p99<=971ms,ttft_p99<=969ms")
            .expect("parses")
            .evaluate(&r);
        assert!(
            v.checks.iter().all(|c| c.inconclusive && !c.passed),
            "{v:?}"
        );
        assert_eq!(v.label(), "INCONCLUSIVE");
        let c = &v.checks[0];
        assert_eq!(c.upper, None, "{c:?}");
        let lower = c.lower.expect("a lower bound");
        assert!((900.0..970.0).contains(&lower), "{lower}");
        // Every value is within 971 ms: the first size whose p99 has an upper bound at
        // all decides, the smallest N with 0.99^N <= 2.5%.
        let first = (0.025f64.ln() / 0.99f64.ln()).ceil() as u64;
        assert_eq!(c.more_requests, Some(first - 97), "{c:?}");
        let reason = c.reason.as_deref().expect("a reason");
        assert!(
            reason.starts_with("ttft p99 of 97 requests lies in [")
                && reason.contains(" ms at 95% confidence; about ")
                && reason.ends_with(" more requests would decide"),
            "{reason}"
        );
        let measured = c.measured.expect("measured");
        assert!((970.0..=970.3).contains(&measured), "{measured}");
        // A median of 97 is bounded on both sides: the ranks' values are rank × 10 ms.
        let (l, u) = crate::precision::confidence_ranks(97, 0.5, 0.95);
        let (l, u) = (l.expect("l") * 10, u.expect("u") * 10);
        assert_eq!(
            verdicts(&format!("ttft_p50<{}ms,ttft_p50<{}ms", u + 1, l - 1), &r),
            [true, false]
        );
        let v = Slo::parse("ttft_p50<=495ms").expect("parses").evaluate(&r);
        assert!(v.checks[0].inconclusive, "{v:?}");
        assert_eq!(v.checks[0].confidence, Some(0.95));
        assert_eq!(
            verdicts("ttft_mean<=0.5s,ttft_mean>=0.48s,ttft_max<=1s", &r),
            [true, true, true]
        );
        let v = Slo::parse("ttft_p90<=971ms").expect("parses").evaluate(&r);
        assert!(v.passed && v.label() == "PASS", "{v:?}");
    }

    #[test]
    fn the_confidence_widens_the_bounds() {
        let r = result(None);
        let mut slo = Slo::parse("ttft_p90<=950ms").expect("parses");
        let at_95 = slo.evaluate(&r).checks[0].clone();
        slo.confidence = 0.999;
        let at_999 = slo.evaluate(&r).checks[0].clone();
        let (l95, u95) = (at_95.lower.expect("l"), at_95.upper.expect("u"));
        let (l999, u999) = (at_999.lower.expect("l"), at_999.upper.expect("u"));
        assert!(l999 < l95 && u999 > u95, "{at_95:?} {at_999:?}");
        assert_eq!(at_999.confidence, Some(0.999));
    }

    /// `result(None)` with a `ttft_from_intent` distribution (TTFT plus `wait_ms` each),
    /// as the run's from-intent figures add, with its histogram when `histogram`.
    fn with_intent(wait_ms: u64, histogram: bool) -> BenchmarkResult {
        let mut r = result(None);
        let mut set = MetricSet::new();
        for i in 1..=97u64 {
            set.record(
                StatusClass::Successful,
                Metric::Ttft,
                (i * 10 + wait_ms) * 1000,
            );
        }
        let d = crate::result::distributions(&set)
            .remove("ttft")
            .expect("ttft");
        r.metrics.insert("ttft_from_intent".into(), d);
        // The built result has its own from-intent histogram (no wait): this one replaces
        // it, or none stands.
        r.class_histograms.remove("successful.ttft_from_intent");
        if histogram {
            let h = crate::result::encode_class_histograms(&set)
                .remove("successful.ttft")
                .expect("encoded");
            r.class_histograms
                .insert("successful.ttft_from_intent".into(), h);
        }
        r
    }

    #[test]
    fn the_figures_from_intent_can_fail_a_check_never_pass_one() {
        // From send, the median is 490 ms; from intent 2 s later.
        for histogram in [true, false] {
            let r = with_intent(2000, histogram);
            let v = Slo::parse("ttft_p50<=1s,ttft_p50<=5s")
                .expect("parses")
                .evaluate(&r);
            let (late, fine) = (&v.checks[0], &v.checks[1]);
            assert!(!late.passed && !late.inconclusive, "{late:?}");
            assert_eq!(
                late.distribution.as_deref(),
                Some("ttft_from_intent.successful")
            );
            assert!(late.measured.is_some_and(|m| m > 2000.0), "{late:?}");
            // Both pass: the stricter value is reported, and its distribution named.
            assert!(fine.passed, "{fine:?}");
            assert_eq!(
                fine.distribution.as_deref(),
                Some("ttft_from_intent.successful")
            );
        }
        // Without the key (reports before it), the figures from send decide.
        let r = result(None);
        let v = Slo::parse("ttft_p50<=1s").expect("parses").evaluate(&r);
        assert!(v.passed, "{v:?}");
        assert_eq!(v.checks[0].distribution.as_deref(), Some("ttft.successful"));
        // No wait: the same values, and the check passes either way.
        let v = Slo::parse("ttft_p50<=1s")
            .expect("parses")
            .evaluate(&with_intent(0, true));
        assert!(v.passed, "{v:?}");
    }

    /// 20 completed requests (TTFT 100 ms, e2e 200 ms) and 5 cut off at 5 s after their
    /// start with no token, as workers report them: the bounds in the incomplete class.
    fn cut_off_result(goodput: &str) -> BenchmarkResult {
        cut_off_after(goodput, 5, 5_000)
    }

    /// 20 completed requests as [`cut_off_result`]'s and `cut` cut off `cut_ms` after
    /// their start.
    fn cut_off_after(goodput: &str, cut: u64, cut_ms: u64) -> BenchmarkResult {
        let mut state = WorkerGroupState::new(1, T0, Limits::default());
        state.goodput = Some(GoodputSpec::parse(goodput).expect("parses"));
        let mut metrics = MetricSet::new();
        let mut finished = Vec::new();
        for i in 0..20 + cut {
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
                    at_ms(if cut { cut_ms } else { 200 }),
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
            cut_ms.max(200),
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
        let v = Slo::parse("ttft_p50<=500ms")
            .expect("parses")
            .evaluate(&old);
        assert!(v.passed, "{v:?}");
        assert_eq!(v.checks[0].distribution.as_deref(), Some("ttft.successful"));

        // 15 requests cut off a millisecond after they were sent have small bounds: they
        // may fail a check or leave it undecided, never pass one the survivors fail.
        let early = cut_off_after("ttft:1s", 15, 1);
        let v = Slo::parse("ttft_p50<=50ms,ttft_p50>=50ms")
            .expect("parses")
            .evaluate(&early);
        assert!(!v.checks[0].passed && !v.checks[0].inconclusive, "{v:?}");
        assert_eq!(v.checks[0].distribution.as_deref(), Some("ttft.successful"));
        assert!(v.checks[1].inconclusive, "{v:?}");
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
    fn a_statistic_of_too_few_requests_is_inconclusive() {
        // One survivor of a drowned probe (the capacity search's 1 of 1,276) passes
        // nothing: its ITL has 15 gaps, but they are one request's; a median of one
        // request has no bounds.
        let mut r = result(None);
        r.measured_requests.completed = 1;
        let v = Slo::parse("ttft_p50<=10s,error_rate<=100%,ttft_mean<=10s")
            .expect("parses")
            .evaluate(&r);
        assert!(v.checks[0].inconclusive && !v.checks[0].passed, "{v:?}");
        assert!(v.checks[1].passed, "a rate is not a percentile");
        assert!(!v.passed);
        let line = v.checks[0].to_string();
        assert!(line.starts_with("INCONCLUSIVE ttft_p50<=10s"), "{line}");
        // Every value is within 10 s: a median decides at the first size with both
        // bounds, the smallest N with 0.5^N <= 2.5%.
        let first = (0.025f64.ln() / 0.5f64.ln()).ceil() as u64;
        assert!(
            line.ends_with(&format!("about {} more requests would decide", first - 1)),
            "{line}"
        );
        // A mean decides on MIN_SAMPLES requests.
        let mean = &v.checks[2];
        assert!(mean.inconclusive, "{mean:?}");
        assert_eq!(mean.more_requests, Some(MIN_SAMPLES - 1));
        assert_eq!(
            (mean.lower, mean.upper, mean.confidence),
            (None, None, None)
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
    fn user_objectives_parse_and_output_speed_mirrors_tpot() {
        let slo = Slo::parse(
            "output_speed_p10>=40tok/s,output_speed_min>20,session_duration_p90<=30s,turns_completed_mean>=4",
        )
        .expect("parses");
        let targets: Vec<(&SloTarget, f64)> = slo
            .checks
            .iter()
            .map(|c| (&c.target, c.threshold))
            .collect();
        assert_eq!(
            targets,
            vec![
                (&SloTarget::OutputSpeed { stat: "p10".into() }, 40.0),
                (&SloTarget::OutputSpeed { stat: "min".into() }, 20.0),
                (
                    &SloTarget::Session {
                        metric: "session_duration".into(),
                        stat: "p90".into()
                    },
                    30_000.0
                ),
                (
                    &SloTarget::Session {
                        metric: "turns_completed".into(),
                        stat: "mean".into()
                    },
                    4.0
                ),
            ]
        );
        // Speed = 1000 / tpot reverses the order of the requests.
        for (speed, tpot) in [
            ("p10", "p90"),
            ("p0_1", "p99_9"),
            ("p50", "p50"),
            ("min", "max"),
        ] {
            assert_eq!(mirrored_stat(speed).as_deref(), Some(tpot));
        }
        for bad in [
            "output_speed_mean>=40",
            "output_speed_p10>=0tok/s",
            "session_duration_p95<=1s",
        ] {
            assert!(Slo::parse(bad).is_err(), "{bad}");
        }
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
