//! `--until-precise`: a benchmark goes on until each named figure's 95% interval is
//! within a fraction of the figure, or its limits stop it first.
//!
//! The interval is computed within the run, over the completed measured requests:
//! - a percentile `pQ` (fraction p = Q/100) of n values: the distribution-free interval of
//!   order statistics `[x(l), x(u)]` with `l = ⌊np − z·√(np(1−p))⌋` and
//!   `u = ⌈np + z·√(np(1−p))⌉ + 1` (1-based ranks, z = 1.96), and the figure itself
//!   `x(⌈np⌉)`. It needs no assumption on the shape of the distribution, only that the
//!   requests are independent draws; it does not exist while `l < 1` or `u > n` (too few
//!   requests to bound that percentile).
//! - a mean: Student's t interval `mean ± t(0.975, n−1)·s/√n`.
//! - `requests_per_s` and `output_tokens_per_s`: Poisson counting noise of the completed
//!   requests, `rate · (1 ± z/√n)`.
//!
//! Precision is `max(figure − low, high − figure) / figure`: the farther side of the
//! interval, as a fraction of the figure. Values are read from the same HDR histograms as
//! the report's percentiles (3 significant digits).

use crate::constraints::StopReason;
use hdrhistogram::Histogram;
use llmsurge_proto::{Metric, MetricSet, StatusClass};
use serde::{Deserialize, Serialize};

/// z of a two-sided 95% interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// The latency metrics a target may name, and the metric each reads.
const METRICS: [(&str, Metric); 4] = [
    ("ttft", Metric::Ttft),
    ("itl", Metric::Itl),
    ("tpot", Metric::Tpot),
    ("e2e", Metric::RequestLatency),
];

/// One `figure:fraction` of `--until-precise`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrecisionTarget {
    /// `ttft_p99`, `e2e_mean`, `requests_per_s`, …
    pub figure: String,
    /// The interval's farther side must be within this fraction of the figure.
    pub fraction: f64,
}

/// The whole `--until-precise` spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PrecisionSpec {
    /// Every target, in the order given.
    pub targets: Vec<PrecisionTarget>,
}

/// What a figure's name asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Figure {
    Percentile(Metric, f64),
    Mean(Metric),
    RequestsPerS,
    OutputTokensPerS,
}

fn figure(name: &str) -> Option<Figure> {
    match name {
        "requests_per_s" => return Some(Figure::RequestsPerS),
        "output_tokens_per_s" => return Some(Figure::OutputTokensPerS),
        _ => {}
    }
    let (metric, stat) = name.rsplit_once('_')?;
    let metric = METRICS.iter().find(|(m, _)| *m == metric)?.1;
    if stat == "mean" {
        return Some(Figure::Mean(metric));
    }
    let q: f64 = stat.strip_prefix('p')?.replace('_', ".").parse().ok()?;
    (q > 0.0 && q < 100.0).then_some(Figure::Percentile(metric, q / 100.0))
}

impl PrecisionSpec {
    /// Parses `"ttft_p99:5%,e2e_p50:3%"` (a fraction as `5%` or `0.05`). The error is
    /// one sentence naming the flag.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let flag = "--until-precise";
        let mut targets: Vec<PrecisionTarget> = Vec::new();
        for item in spec.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(format!("{flag}: empty item in {spec:?}"));
            }
            let Some((name, frac)) = item.split_once(':') else {
                return Err(format!(
                    "{flag}: {item:?} is not figure:fraction (e.g. ttft_p99:5%)"
                ));
            };
            let name = name.trim();
            if figure(name).is_none() {
                return Err(format!(
                    "{flag}: unknown figure {name:?} (ttft|itl|tpot|e2e with _p50, _p90, _p99 or _mean, requests_per_s, output_tokens_per_s)"
                ));
            }
            let frac = frac.trim();
            let value = match frac.strip_suffix('%') {
                Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
                None => frac.parse::<f64>(),
            };
            let fraction = match value {
                Ok(v) if v.is_finite() && v > 0.0 && v < 1.0 => v,
                _ => {
                    return Err(format!(
                        "{flag}: {name}: {frac:?} is not a fraction between 0 and 100% (e.g. 5%)"
                    ));
                }
            };
            if targets.iter().any(|t| t.figure == name) {
                return Err(format!("{flag}: {name} is named twice"));
            }
            targets.push(PrecisionTarget {
                figure: name.to_string(),
                fraction,
            });
        }
        Ok(Self { targets })
    }

    /// Whether any target reads a figure of the token stream (ITL, TPOT).
    pub fn needs_stream(&self) -> Option<&str> {
        self.targets
            .iter()
            .map(|t| t.figure.as_str())
            .find(|f| f.starts_with("itl_") || f.starts_with("tpot_"))
    }

    /// Evaluates every target over the completed measured requests so far.
    pub fn evaluate(&self, metrics: &MetricSet, completed: u64, duration_s: f64) -> Precision {
        let figures: Vec<FigurePrecision> = self
            .targets
            .iter()
            .map(|t| {
                let ci =
                    figure(&t.figure).and_then(|f| interval(f, metrics, completed, duration_s));
                let precision =
                    ci.and_then(|(v, lo, hi)| (v > 0.0).then(|| ((v - lo).max(hi - v)) / v));
                FigurePrecision {
                    figure: t.figure.clone(),
                    target: t.fraction,
                    value: ci.map(|c| c.0),
                    ci_low: ci.map(|c| c.1),
                    ci_high: ci.map(|c| c.2),
                    precision,
                    met: precision.is_some_and(|p| p <= t.fraction),
                }
            })
            .collect();
        Precision {
            met: figures.iter().all(|f| f.met),
            figures,
            stopped_it: false,
        }
    }
}

/// One target's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FigurePrecision {
    /// The figure.
    pub figure: String,
    /// The fraction asked for.
    pub target: f64,
    /// The figure (ms for latencies), when it could be computed.
    pub value: Option<f64>,
    /// Its 95% interval's low end.
    pub ci_low: Option<f64>,
    /// Its 95% interval's high end.
    pub ci_high: Option<f64>,
    /// The precision reached: the interval's farther side as a fraction of the figure.
    /// Absent while too few requests bound the figure.
    pub precision: Option<f64>,
    /// `precision <= target`.
    pub met: bool,
}

/// Where `--until-precise` stood when a benchmark ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Precision {
    /// Every target was met.
    pub met: bool,
    /// Whether reaching the precision ended the benchmark (rather than its limits).
    pub stopped_it: bool,
    /// Each target, in the order given.
    pub figures: Vec<FigurePrecision>,
}

/// How often a running benchmark checks its precision.
const CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Watches a running benchmark for `--until-precise`.
#[derive(Debug)]
pub struct PrecisionWatch {
    spec: PrecisionSpec,
    last: std::time::Instant,
}

impl PrecisionWatch {
    /// A watch over `spec`.
    pub fn new(spec: PrecisionSpec) -> Self {
        Self {
            spec,
            last: std::time::Instant::now(),
        }
    }

    /// At most every 250 ms: the stop reason once every target is met.
    pub fn check(&mut self, state: &crate::state::WorkerGroupState) -> Option<StopReason> {
        if self.last.elapsed() < CHECK_EVERY {
            return None;
        }
        self.last = std::time::Instant::now();
        let m = &state.measured;
        let duration_s = match (m.first_start, m.last_end) {
            (Some(s), Some(e)) => e.since(s).as_secs_f64(),
            _ => return None,
        };
        let p = self.spec.evaluate(&state.metrics, m.completed, duration_s);
        p.met.then(|| StopReason::PrecisionReached {
            detail: p
                .figures
                .iter()
                .map(|f| {
                    format!(
                        "{} ±{:.2}% ≤ {:.2}%",
                        f.figure,
                        f.precision.unwrap_or(f64::NAN) * 100.0,
                        f.target * 100.0
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// The 1-based `k`-th smallest value of `h`.
fn order_statistic(h: &Histogram<u64>, k: u64) -> Option<u64> {
    let mut seen = 0u64;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        if seen >= k {
            return Some(h.highest_equivalent(v.value_iterated_to()));
        }
    }
    None
}

/// The order-statistic ranks `(l, point, u)` of the `p` quantile of `n` values, when
/// the interval exists (see the module's documentation).
pub fn percentile_ranks(n: u64, p: f64) -> Option<(u64, u64, u64)> {
    let nf = n as f64;
    let half = Z95 * (nf * p * (1.0 - p)).sqrt();
    let l = (nf * p - half).floor();
    let u = (nf * p + half).ceil() + 1.0;
    let point = (nf * p).ceil().max(1.0);
    (l >= 1.0 && u <= nf).then_some((l as u64, point as u64, u as u64))
}

/// `(figure, low, high)`.
fn interval(
    f: Figure,
    metrics: &MetricSet,
    completed: u64,
    duration_s: f64,
) -> Option<(f64, f64, f64)> {
    let ms = |us: u64| us as f64 / 1000.0;
    match f {
        Figure::Percentile(metric, p) => {
            let h = metrics.get(StatusClass::Successful, metric)?;
            let (l, k, u) = percentile_ranks(h.len(), p)?;
            Some((
                ms(order_statistic(h, k)?),
                ms(order_statistic(h, l)?),
                ms(order_statistic(h, u)?),
            ))
        }
        Figure::Mean(metric) => {
            let h = metrics.get(StatusClass::Successful, metric)?;
            let n = h.len();
            if n < 2 {
                return None;
            }
            use statrs::distribution::{ContinuousCDF, StudentsT};
            let t = StudentsT::new(0.0, 1.0, (n - 1) as f64)
                .ok()?
                .inverse_cdf(0.975);
            let half = t * h.stdev() / (n as f64).sqrt();
            let m = h.mean();
            Some((m / 1000.0, (m - half) / 1000.0, (m + half) / 1000.0))
        }
        Figure::RequestsPerS | Figure::OutputTokensPerS => {
            if completed == 0 || duration_s <= 0.0 {
                return None;
            }
            let rate = if f == Figure::RequestsPerS {
                completed as f64 / duration_s
            } else {
                let h = metrics.get(StatusClass::Successful, Metric::OutputTokens)?;
                h.mean() * h.len() as f64 / duration_s
            };
            let half = rate * Z95 / (completed as f64).sqrt();
            Some((rate, rate - half, rate + half))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_name_the_flag() {
        let s = PrecisionSpec::parse("ttft_p99:5%, e2e_p50:0.03,requests_per_s:10%").expect("ok");
        assert_eq!(s.targets.len(), 3);
        assert!((s.targets[1].fraction - 0.03).abs() < 1e-12);
        for bad in [
            "",
            "ttft_p99",
            "ttft_p99:0",
            "ttft_p99:150%",
            "foo_p50:5%",
            "ttft_p99:5%,ttft_p99:4%",
            "ttft_p100:1%",
        ] {
            let e = PrecisionSpec::parse(bad).expect_err(bad);
            assert!(e.starts_with("--until-precise: "), "{e}");
        }
    }

    #[test]
    fn ranks_bound_the_percentile_and_need_enough_values() {
        // n = 100, p = 0.5: 50 ± 1.96·5 = 40.2 .. 59.8 → ranks 40 and 61.
        assert_eq!(percentile_ranks(100, 0.5), Some((40, 50, 61)));
        // The fewest values that bound each percentile (docs/metrics.md says so).
        for (p, n) in [(0.5, 8), (0.9, 53), (0.99, 563)] {
            assert_eq!(percentile_ranks(n - 1, p), None, "p{p} of {}", n - 1);
            assert!(percentile_ranks(n, p).is_some(), "p{p} of {n}");
        }
    }

    #[test]
    fn the_interval_is_read_from_order_statistics() {
        let mut set = MetricSet::new();
        // 10..1000 µs: below 2,048 the histogram is exact.
        for v in 1..=100u64 {
            set.record(StatusClass::Successful, Metric::Ttft, v * 10);
        }
        let spec = PrecisionSpec::parse("ttft_p50:25%").expect("spec");
        let p = spec.evaluate(&set, 100, 10.0);
        let f = &p.figures[0];
        assert_eq!(f.value, Some(0.5));
        assert_eq!(f.ci_low, Some(0.4));
        assert_eq!(f.ci_high, Some(0.61));
        assert!((f.precision.expect("precision") - 0.22).abs() < 1e-9);
        assert!(p.met);
    }
}
