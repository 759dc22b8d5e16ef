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

/// The 1-based `k`-th smallest value of `h`, as the highest value its bucket holds.
fn order_statistic(h: &Histogram<u64>, k: u64) -> Option<u64> {
    order_statistic_bucket(h, k).map(|(_, high)| high)
}

/// The 1-based `k`-th smallest value of `h` as the lowest and the highest value its
/// bucket holds (the histogram keeps 3 significant digits): a bound read low on one side
/// and high on the other can only be wider than the exact one.
pub fn order_statistic_bucket(h: &Histogram<u64>, k: u64) -> Option<(u64, u64)> {
    let mut seen = 0u64;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        if seen >= k {
            let at = v.value_iterated_to();
            return Some((h.lowest_equivalent(at), h.highest_equivalent(at)));
        }
    }
    None
}

/// Confidence of a percentile verdict unless `--confidence` says otherwise.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;

/// The exact order-statistic ranks that bracket the `q` quantile ξ of `n` independent
/// values with probability at least `confidence`, 1-based: `(l, u)` with
/// P(x(l) ≤ ξ ≤ x(u)) ≥ confidence. With B ~ binomial(n, q) the count of values below ξ,
/// P(x(l) > ξ) = P(B < l) and P(x(u) < ξ) = P(B ≥ u); each tail gets half of
/// α = 1 − confidence: `l` is the largest rank with P(B < l) ≤ α/2, `u` the smallest with
/// P(B ≥ u) ≤ α/2. A side is `None` when no rank of `n` values bounds it (too few values:
/// the p99 of 100 has a lower bound, not an upper one). Unlike [`percentile_ranks`] (the
/// normal approximation `--until-precise` uses), exact at every `n` and `q`.
pub fn confidence_ranks(n: u64, q: f64, confidence: f64) -> (Option<u64>, Option<u64>) {
    if n == 0 || !(q > 0.0 && q < 1.0) {
        return (None, None);
    }
    let tail = (1.0 - confidence) / 2.0;
    let (first, pmf) = binomial_pmf(n, q);
    // P(B < l) ≤ tail < P(B < l + 1): l is the first count whose cumulative mass passes
    // the tail; none when even 0 values below ξ is likelier than the tail.
    let mut below = 0.0;
    let lower = pmf.iter().zip(first..).find_map(|(p, k)| {
        below += p;
        (below > tail).then_some(k)
    });
    // P(B ≥ u) ≤ tail < P(B ≥ u − 1): u is one past the first count from the top whose
    // mass passes the tail; none when that is n itself.
    let mut above = 0.0;
    let upper = pmf.iter().enumerate().rev().find_map(|(i, p)| {
        above += p;
        (above > tail).then_some(first + i as u64 + 1)
    });
    (lower.filter(|&l| l >= 1), upper.filter(|&u| u <= n))
}

/// The binomial(n, q) probabilities of every count that has any mass in f64, from the
/// mode outwards until they underflow: `(first count, probabilities)`. Summing them is
/// O(√n) where a continued fraction of the incomplete beta stops converging (statrs caps
/// it at 140 terms, about n = 20,000).
fn binomial_pmf(n: u64, q: f64) -> (u64, Vec<f64>) {
    use statrs::function::gamma::ln_gamma;
    let nf = n as f64;
    let mode = (((nf + 1.0) * q).floor() as u64).min(n);
    let ln_at_mode =
        ln_gamma(nf + 1.0) - ln_gamma(mode as f64 + 1.0) - ln_gamma((n - mode) as f64 + 1.0)
            + mode as f64 * q.ln()
            + (n - mode) as f64 * (1.0 - q).ln();
    let at_mode = ln_at_mode.exp();
    let ratio = q / (1.0 - q);
    let mut down = Vec::new();
    let (mut k, mut p) = (mode, at_mode);
    // pmf(k − 1) = pmf(k) · k / (n − k + 1) / ratio
    while k > 0 {
        p *= k as f64 / ((n - k + 1) as f64 * ratio);
        if p < f64::MIN_POSITIVE {
            break;
        }
        k -= 1;
        down.push(p);
    }
    let first = mode - down.len() as u64;
    down.reverse();
    down.push(at_mode);
    let (mut k, mut p) = (mode, at_mode);
    // pmf(k + 1) = pmf(k) · (n − k) / (k + 1) · ratio
    while k < n {
        p *= (n - k) as f64 / (k + 1) as f64 * ratio;
        if p < f64::MIN_POSITIVE {
            break;
        }
        k += 1;
        down.push(p);
    }
    // ln Γ of large counts loses a few digits at the mode: the masses sum to one.
    let total: f64 = down.iter().sum();
    for p in &mut down {
        *p /= total;
    }
    (first, down)
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

/// What a percentile objective concluded from its confidence bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The bound on the bad side is within the threshold.
    Pass,
    /// The bound on the good side is beyond the threshold.
    Fail,
    /// The threshold lies between the bounds, or a bound does not exist yet.
    Inconclusive,
}

/// A percentile objective: the `q` quantile (0 < q < 1) against a threshold, judged at a
/// confidence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PercentileObjective {
    /// The quantile, e.g. 0.99.
    pub q: f64,
    /// The comparison the quantile must meet.
    pub cmp: crate::data::Cmp,
    /// The threshold, in the units the reader returns (ms for latencies).
    pub threshold: f64,
    /// Probability that the bounds bracket the true quantile, e.g. 0.95.
    pub confidence: f64,
}

/// A percentile's confidence bounds and what they decide.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PercentileBounds {
    /// The lower bound, when the requests suffice for one.
    pub lower: Option<f64>,
    /// The upper bound, when the requests suffice for one.
    pub upper: Option<f64>,
    /// The verdict.
    pub decision: Decision,
    /// When inconclusive: about how many more requests would decide, if the observed
    /// distribution held (none when no number up to [`MAX_REQUESTS`] would).
    pub more_requests: Option<u64>,
}

/// The most requests "about N more" considers.
pub const MAX_REQUESTS: u64 = 1_000_000_000;

/// Reads the value at a 1-based rank of a distribution's values as `(low, high)`: the
/// least and the most it can be given what was kept.
pub type RankReader<'a> = dyn Fn(u64) -> Option<(f64, f64)> + 'a;

/// A rank reader over a histogram, each value divided by `scale` (1000: µs to ms).
pub fn histogram_reader(h: &Histogram<u64>, scale: f64) -> impl Fn(u64) -> Option<(f64, f64)> + '_ {
    move |k| order_statistic_bucket(h, k).map(|(lo, hi)| (lo as f64 / scale, hi as f64 / scale))
}

/// A rank reader over a summary that kept no histogram: the reported percentiles, min and
/// max of `count` values bracket the value at any rank (the nearest reported ranks on
/// either side; HDR's percentile `p` is the value at rank ⌈p·count⌉).
pub fn summary_reader(d: &llmsurge_proto::Distribution) -> impl Fn(u64) -> Option<(f64, f64)> + '_ {
    move |k| {
        let m = d.count;
        if m == 0 || k == 0 || k > m {
            return None;
        }
        let mut known: Vec<(u64, f64)> = vec![(1, d.min), (m, d.max)];
        for (key, p) in llmsurge_proto::metrics::PERCENTILES {
            let rank = ((p / 100.0 * m as f64).ceil() as u64).clamp(1, m);
            known.extend(d.percentiles.get(key).map(|v| (rank, v)));
        }
        let low = known
            .iter()
            .filter(|(r, _)| *r <= k)
            .map(|(_, v)| *v)
            .fold(f64::MIN, f64::max);
        let high = known
            .iter()
            .filter(|(r, _)| *r >= k)
            .map(|(_, v)| *v)
            .fold(f64::MAX, f64::min);
        Some((low, high))
    }
}

impl PercentileObjective {
    /// Judges the quantile of `samples` values (read by rank through `read`) that came
    /// from `requests` independent requests. Requests, not values, are the independent
    /// draws: one request's 15 token gaps (ITL) are one draw, so the binomial ranks are
    /// taken over `requests` and scaled onto the values. Pass: the bound on the bad side
    /// (the upper one for `<=`) meets the threshold; fail: the bound on the good side
    /// misses it; else inconclusive, with about how many more requests would decide.
    /// `None` with no values.
    pub fn judge(
        &self,
        read: &RankReader<'_>,
        samples: u64,
        requests: u64,
    ) -> Option<PercentileBounds> {
        let requests = requests.min(samples);
        if requests == 0 {
            return None;
        }
        let (lower, upper) = self.bounds_at(read, samples, requests);
        let decision = self.decide(lower, upper);
        let more_requests = (decision == Decision::Inconclusive)
            .then(|| self.more_requests(read, samples, requests))
            .flatten();
        Some(PercentileBounds {
            lower,
            upper,
            decision,
            more_requests,
        })
    }

    /// The bounds over `requests` requests whose values are the `samples` read: the
    /// binomial ranks of `requests`, scaled onto the values. With more requests than
    /// were measured, this is what the observed distribution would give at that size.
    fn bounds_at(
        &self,
        read: &RankReader<'_>,
        samples: u64,
        requests: u64,
    ) -> (Option<f64>, Option<f64>) {
        let (l, u) = confidence_ranks(requests, self.q, self.confidence);
        let at = |rank: u64| {
            let scaled = (u128::from(rank) * u128::from(samples)).div_ceil(u128::from(requests));
            (scaled as u64).clamp(1, samples)
        };
        // The lower bound read low and the upper read high: never narrower than exact.
        let lower = l.and_then(|r| read(at(r))).map(|(low, _)| low);
        let upper = u.and_then(|r| read(at(r))).map(|(_, high)| high);
        (lower, upper)
    }

    fn decide(&self, lower: Option<f64>, upper: Option<f64>) -> Decision {
        use crate::data::Cmp;
        let (bad_side, good_side) = match self.cmp {
            Cmp::Le | Cmp::Lt => (upper, lower),
            Cmp::Ge | Cmp::Gt => (lower, upper),
        };
        if bad_side.is_some_and(|b| self.cmp.holds(b, self.threshold)) {
            Decision::Pass
        } else if good_side.is_some_and(|b| !self.cmp.holds(b, self.threshold)) {
            Decision::Fail
        } else {
            Decision::Inconclusive
        }
    }

    /// The fewest requests beyond `requests` at which, if the observed distribution
    /// held, the bounds would decide (found by doubling, then bisection; the answer
    /// always decides, though a smaller count may too where the ranks' steps are
    /// uneven: "about"). None when even [`MAX_REQUESTS`] would not (the observed
    /// percentile sits at the threshold).
    fn more_requests(&self, read: &RankReader<'_>, samples: u64, requests: u64) -> Option<u64> {
        let decides = |n: u64| {
            let (lower, upper) = self.bounds_at(read, samples, n);
            self.decide(lower, upper) != Decision::Inconclusive
        };
        let mut undecided = requests;
        let mut decided = requests;
        loop {
            if decided >= MAX_REQUESTS {
                return None;
            }
            decided = decided.saturating_mul(2).min(MAX_REQUESTS);
            if decides(decided) {
                break;
            }
            undecided = decided;
        }
        while decided - undecided > 1 {
            let mid = undecided + (decided - undecided) / 2;
            if decides(mid) {
                decided = mid;
            } else {
                undecided = mid;
            }
        }
        Some(decided - requests)
    }
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

    /// The ranks by definition, from binomial probabilities built by Pascal's triangle
    /// (no logarithms, no recurrences): l the largest with P(B < l) ≤ α/2, u the smallest
    /// with P(B ≥ u) ≤ α/2.
    fn brute_force_ranks(n: u64, q: f64, confidence: f64) -> (Option<u64>, Option<u64>) {
        let n = n as usize;
        let mut row = vec![1.0f64];
        for _ in 0..n {
            let mut next = vec![1.0; row.len() + 1];
            for k in 1..row.len() {
                next[k] = row[k - 1] + row[k];
            }
            row = next;
        }
        let pmf: Vec<f64> = (0..=n)
            .map(|k| row[k] * q.powi(k as i32) * (1.0 - q).powi((n - k) as i32))
            .collect();
        let tail = (1.0 - confidence) / 2.0;
        let below = |l: usize| pmf[..l].iter().sum::<f64>();
        let at_or_above = |u: usize| pmf[u..].iter().sum::<f64>();
        let l = (1..=n).filter(|&l| below(l) <= tail).max();
        let u = (1..=n).filter(|&u| at_or_above(u) <= tail).min();
        (l.map(|l| l as u64), u.map(|u| u as u64))
    }

    #[test]
    fn confidence_ranks_are_the_binomial_ranks() {
        for n in 1..=80u64 {
            for q in [0.1, 0.25, 0.5, 0.9, 0.95, 0.99] {
                // Not 0.8 with q 0.9: a tail of exactly 0.1 against a mass of 0.1 is a
                // tie that rounding decides either way.
                for c in [0.9, 0.95, 0.99] {
                    assert_eq!(
                        confidence_ranks(n, q, c),
                        brute_force_ranks(n, q, c),
                        "n {n} q {q} confidence {c}"
                    );
                }
            }
        }
        // Large counts, against statrs' incomplete beta (it converges up to about
        // 20,000): the tail masses on either side of each rank.
        use statrs::distribution::{Binomial, DiscreteCDF};
        for (n, q) in [(5_000u64, 0.99), (10_000, 0.5), (8_000, 0.999)] {
            let b = Binomial::new(q, n).expect("binomial");
            let (l, u) = confidence_ranks(n, q, 0.95);
            let (l, u) = (l.expect("a lower rank"), u.expect("an upper rank"));
            assert!(
                b.cdf(l - 1) <= 0.025 && b.cdf(l) > 0.025,
                "n {n} q {q} l {l}"
            );
            assert!(
                b.sf(u - 1) <= 0.025 && b.sf(u - 2) > 0.025,
                "n {n} q {q} u {u}"
            );
        }
        // A p99 of 100 requests has a lower bound and no upper one: 0.99^100 = 37% of
        // samples of 100 have every value below the true p99.
        let (l, u) = confidence_ranks(100, 0.99, 0.95);
        assert!(l.is_some() && u.is_none());
        // Millions of requests: a bisection-free pass over O(√n) probabilities.
        let (l, u) = confidence_ranks(MAX_REQUESTS, 0.99, 0.95);
        let (l, u) = (l.expect("lower") as f64, u.expect("upper") as f64);
        let (mean, sd) = (
            MAX_REQUESTS as f64 * 0.99,
            (MAX_REQUESTS as f64 * 0.0099).sqrt(),
        );
        assert!((mean - Z95 * sd - l).abs() < 2.0, "{l}");
        assert!((mean + Z95 * sd - u).abs() < 3.0, "{u}");
    }

    /// A histogram of the whole milliseconds `values` (exact below 2,048).
    fn hist(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = Histogram::new(3).expect("histogram");
        h.auto(true);
        for v in values {
            h.record(v).expect("record");
        }
        h
    }

    fn judge(h: &Histogram<u64>, q: f64, cmp: Cmp, threshold: f64) -> PercentileBounds {
        PercentileObjective {
            q,
            cmp,
            threshold,
            confidence: 0.95,
        }
        .judge(&histogram_reader(h, 1.0), h.len(), h.len())
        .expect("values")
    }

    use crate::data::Cmp;

    #[test]
    fn a_percentile_passes_fails_or_cannot_decide_by_its_bounds() {
        // Values 1..=1000: the k-th smallest is k, so the bounds are the ranks.
        let h = hist(1..=1000);
        let (l, u) = confidence_ranks(1000, 0.99, 0.95);
        let (l, u) = (l.expect("l") as f64, u.expect("u") as f64);
        let within = judge(&h, 0.99, Cmp::Le, u);
        assert_eq!(within.decision, Decision::Pass, "{within:?}");
        assert_eq!((within.lower, within.upper), (Some(l), Some(u)));
        assert_eq!(within.more_requests, None, "decided");
        assert_eq!(judge(&h, 0.99, Cmp::Lt, u).decision, Decision::Inconclusive);
        assert_eq!(judge(&h, 0.99, Cmp::Le, l - 1.0).decision, Decision::Fail);
        assert_eq!(judge(&h, 0.99, Cmp::Le, l).decision, Decision::Inconclusive);
        // The observed p99 (990) is within 995, but its upper bound is not.
        let near = judge(&h, 0.99, Cmp::Le, 995.0);
        assert_eq!(near.decision, Decision::Inconclusive);
        assert!(near.more_requests.is_some_and(|n| n > 0), "{near:?}");
        // A floor on a median: the lower bound must clear it.
        let (l, u) = confidence_ranks(1000, 0.5, 0.95);
        let (l, u) = (l.expect("l") as f64, u.expect("u") as f64);
        assert_eq!(judge(&h, 0.5, Cmp::Ge, l).decision, Decision::Pass);
        assert_eq!(judge(&h, 0.5, Cmp::Gt, l).decision, Decision::Inconclusive);
        assert_eq!(judge(&h, 0.5, Cmp::Ge, u + 1.0).decision, Decision::Fail);
        // The p99 of 100 has no upper bound: it can fail, never pass.
        let few = hist(1..=100);
        let p99 = judge(&few, 0.99, Cmp::Le, 1e9);
        assert_eq!((p99.decision, p99.upper), (Decision::Inconclusive, None));
        assert_eq!(judge(&few, 0.99, Cmp::Le, 10.0).decision, Decision::Fail);
    }

    #[test]
    fn requests_not_token_gaps_are_the_draws() {
        // One request's 1,000 gaps: not 1,000 draws; no bound exists.
        let gaps = hist(1..=1000);
        let one = PercentileObjective {
            q: 0.5,
            cmp: Cmp::Le,
            threshold: 1e9,
            confidence: 0.95,
        };
        let v = one
            .judge(&histogram_reader(&gaps, 1.0), 1000, 1)
            .expect("values");
        assert_eq!(
            (v.lower, v.upper, v.decision),
            (None, None, Decision::Inconclusive)
        );
        // Ten requests' gaps: the ranks of 10, scaled onto the 1,000 values.
        let v = one
            .judge(&histogram_reader(&gaps, 1.0), 1000, 10)
            .expect("values");
        let (l, u) = confidence_ranks(10, 0.5, 0.95);
        assert_eq!(v.lower, l.map(|l| (l * 100) as f64));
        assert_eq!(v.upper, u.map(|u| (u * 100) as f64));
    }

    /// The observed distribution of `h` (values in ms) as `n` values: the k-th is the
    /// observed value at rank ⌈k·len/n⌉.
    fn at_size(h: &Histogram<u64>, n: u64) -> Histogram<u64> {
        let m = h.len();
        hist((1..=n).map(|k| order_statistic(h, (k * m).div_ceil(n)).expect("rank")))
    }

    #[test]
    fn more_requests_suffice_and_fall_as_the_margin_grows() {
        // Latencies 1..=400 ms; a p99 near its observed value, 396 ms.
        let h = hist(1..=400);
        let mut last = u64::MAX;
        for threshold in [397.0, 398.0, 399.0] {
            let v = judge(&h, 0.99, Cmp::Le, threshold);
            assert_eq!(v.decision, Decision::Inconclusive, "{threshold}: {v:?}");
            let more = v.more_requests.expect("a count would decide");
            // Monotone: a wider margin never needs more requests.
            assert!(more <= last, "{threshold}: {more} after {last}");
            last = more;
            // Sufficient: the same distribution at that size decides.
            let bigger = at_size(&h, 400 + more);
            let decided = judge(&bigger, 0.99, Cmp::Le, threshold);
            assert_eq!(
                decided.decision,
                Decision::Pass,
                "{threshold} at {more} more"
            );
        }
        // Observed beyond: the fail side's count suffices the same way.
        let v = judge(&h, 0.99, Cmp::Le, 393.0);
        let more = v.more_requests.expect("a count would decide");
        let decided = judge(&at_size(&h, 400 + more), 0.99, Cmp::Le, 393.0);
        assert_eq!(decided.decision, Decision::Fail, "{v:?}");
        // The same distribution seen longer needs fewer more.
        let longer = at_size(&h, 800);
        let after = judge(&longer, 0.99, Cmp::Le, 398.0).more_requests;
        let before = judge(&h, 0.99, Cmp::Le, 398.0).more_requests;
        assert!(after < before, "{after:?} {before:?}");
    }

    #[test]
    fn a_summary_brackets_every_order_statistic() {
        // Without a histogram, the reported percentiles, min and max bound every rank.
        let h = hist((0..997u64).map(|i| 1 + (i * 7919) % 1500));
        let d = llmsurge_proto::Distribution::from_histogram(&h, 1.0);
        let read = summary_reader(&d);
        for k in 1..=h.len() {
            let exact = order_statistic(&h, k).expect("rank") as f64;
            let (low, high) = read(k).expect("bracket");
            assert!(
                low <= exact && exact <= high,
                "rank {k}: {low} {exact} {high}"
            );
        }
        assert_eq!(read(0), None);
        assert_eq!(read(h.len() + 1), None);
    }
}
