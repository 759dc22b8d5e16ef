//! How much of a change could be noise: confidence intervals of differences.
//!
//! Percentiles: resampling n values from a histogram and taking the p-quantile is the
//! same as reading the histogram's quantile at a probability drawn from Beta(k, n − k + 1),
//! k = ⌈p·n⌉ (the k-th order statistic of n uniforms). So each bootstrap replicate costs
//! two quantile lookups, not n draws. Means use the normal approximation (std/√n),
//! request rates Poisson counting noise (√N / T), token rates compound Poisson
//! (each request its own amount of tokens), error rates the two-proportion normal
//! approximation.

use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Beta, Distribution};

/// Bootstrap replicates per interval.
pub const REPLICATES: usize = 2000;
/// A fixed seed: the same two reports always give the same interval.
const BOOTSTRAP_SEED: u64 = 0x5EED;

/// z for a two-sided interval of `confidence` (0.95 → 1.96).
fn z(confidence: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, Normal};
    Normal::new(0.0, 1.0).map_or(1.96, |n| n.inverse_cdf(1.0 - (1.0 - confidence) / 2.0))
}

/// Interval of (b − a) / a × 100 for the `p`-th percentile (0–100) of two histograms.
pub fn percentile_change_ci(
    a: &Histogram<u64>,
    b: &Histogram<u64>,
    p: f64,
    confidence: f64,
) -> Option<(f64, f64)> {
    let base = a.value_at_quantile(p / 100.0) as f64;
    if a.is_empty() || b.is_empty() || base <= 0.0 {
        return None;
    }
    let beta = |n: u64| {
        let k = ((p / 100.0) * n as f64).ceil().clamp(1.0, n as f64);
        Beta::new(k, n as f64 - k + 1.0).ok()
    };
    let (ba, bb) = (beta(a.len())?, beta(b.len())?);
    let mut rng = StdRng::seed_from_u64(BOOTSTRAP_SEED);
    let mut diffs: Vec<f64> = (0..REPLICATES)
        .map(|_| {
            let qa = a.value_at_quantile(ba.sample(&mut rng)) as f64;
            let qb = b.value_at_quantile(bb.sample(&mut rng)) as f64;
            (qb - qa) / base * 100.0
        })
        .collect();
    diffs.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    let at = |q: f64| diffs[((q * (REPLICATES - 1) as f64).round() as usize).min(REPLICATES - 1)];
    Some((at(tail), at(1.0 - tail)))
}

/// Interval of the relative change of two means, in percent of `mean_a`.
pub fn mean_change_ci(
    (mean_a, std_a, n_a): (f64, f64, u64),
    (mean_b, std_b, n_b): (f64, f64, u64),
    confidence: f64,
) -> Option<(f64, f64)> {
    if n_a < 2 || n_b < 2 || mean_a <= 0.0 {
        return None;
    }
    let se = (std_a * std_a / n_a as f64 + std_b * std_b / n_b as f64).sqrt();
    let d = mean_b - mean_a;
    let h = z(confidence) * se;
    Some(((d - h) / mean_a * 100.0, (d + h) / mean_a * 100.0))
}

/// Interval of the relative change of two rates measured as `count` events in
/// `seconds` (Poisson counting noise), in percent.
pub fn rate_change_ci(
    (n_a, t_a): (u64, f64),
    (n_b, t_b): (u64, f64),
    confidence: f64,
) -> Option<(f64, f64)> {
    total_change_ci(
        Total::of_events(n_a, t_a),
        Total::of_events(n_b, t_b),
        confidence,
    )
}

/// A total over requests in a window: `requests` requests in `seconds`, each adding an
/// amount of mean `mean` and standard deviation `std` (output tokens of a request).
#[derive(Clone, Copy, Debug)]
pub struct Total {
    /// Requests counted.
    pub requests: u64,
    /// Mean amount per request.
    pub mean: f64,
    /// Standard deviation of the amount per request.
    pub std: f64,
    /// The window's length.
    pub seconds: f64,
}

impl Total {
    /// Events counted one each (the request rate itself).
    pub fn of_events(requests: u64, seconds: f64) -> Self {
        Self {
            requests,
            mean: 1.0,
            std: 0.0,
            seconds,
        }
    }
}

/// Interval of the relative change of two rates of a total over requests, in percent.
///
/// The requests arrive as Poisson counts and each brings its own amount, so the total is a
/// compound Poisson sum: Var = N·(mean² + std²). Output tokens are not independent counts:
/// 128-token requests bring their tokens in blocks of 128, and the token rate is exactly as
/// noisy as the request rate (counting each token alone made two runs of the same server
/// a token-rate regression while their request rates were within noise).
pub fn total_change_ci(a: Total, b: Total, confidence: f64) -> Option<(f64, f64)> {
    if a.requests == 0 || a.seconds <= 0.0 || b.seconds <= 0.0 || a.mean <= 0.0 {
        return None;
    }
    let rate = |t: &Total| t.requests as f64 * t.mean / t.seconds;
    let var =
        |t: &Total| t.requests as f64 * (t.mean * t.mean + t.std * t.std) / (t.seconds * t.seconds);
    let (ra, rb) = (rate(&a), rate(&b));
    let h = z(confidence) * (var(&a) + var(&b)).sqrt();
    Some(((rb - ra - h) / ra * 100.0, (rb - ra + h) / ra * 100.0))
}

/// Interval of the change of two proportions, in percentage points.
pub fn proportion_change_ci(
    (x_a, n_a): (u64, u64),
    (x_b, n_b): (u64, u64),
    confidence: f64,
) -> Option<(f64, f64)> {
    if n_a == 0 || n_b == 0 {
        return None;
    }
    let (pa, pb) = (x_a as f64 / n_a as f64, x_b as f64 / n_b as f64);
    let se = (pa * (1.0 - pa) / n_a as f64 + pb * (1.0 - pb) / n_b as f64).sqrt();
    let h = z(confidence) * se;
    Some(((pb - pa - h) * 100.0, (pb - pa + h) * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: impl Iterator<Item = u64>) -> Histogram<u64> {
        let mut h = Histogram::new(3).expect("histogram");
        h.auto(true);
        for v in values {
            h.record(v).expect("record");
        }
        h
    }

    #[test]
    fn identical_distributions_give_an_interval_around_zero() {
        let a = hist((0..2000).map(|i| 1000 + (i * 7919) % 1000));
        let (lo, hi) = percentile_change_ci(&a, &a.clone(), 99.0, 0.95).expect("ci");
        assert!(lo < 0.0 && hi > 0.0, "({lo}, {hi})");
        assert!(
            hi - lo < 5.0,
            "a tight interval for 2,000 samples: ({lo}, {hi})"
        );
    }

    #[test]
    fn a_real_shift_is_outside_the_interval_of_zero() {
        let a = hist((0..2000).map(|i| 1000 + (i * 7919) % 1000));
        let b = hist((0..2000).map(|i| 1500 + (i * 7919) % 1000));
        let (lo, hi) = percentile_change_ci(&a, &b, 50.0, 0.95).expect("ci");
        // p50 moves from ~1500 to ~2000: +33%.
        assert!(lo > 25.0 && hi < 40.0, "({lo}, {hi})");
    }

    #[test]
    fn small_samples_give_wide_intervals() {
        let a = hist((0..10).map(|i| 1000 + i * 100));
        let (lo, hi) = percentile_change_ci(&a, &a.clone(), 90.0, 0.95).expect("ci");
        assert!(hi - lo > 20.0, "({lo}, {hi})");
    }

    #[test]
    fn closed_form_intervals_match_hand_computation() {
        // Means 100 and 110, std 10, n 100: se = sqrt(1 + 1) = 1.414; 10 ± 2.772 → 7.23..12.77%.
        let (lo, hi) = mean_change_ci((100.0, 10.0, 100), (110.0, 10.0, 100), 0.95).expect("ci");
        assert!(
            (lo - 7.228).abs() < 0.01 && (hi - 12.772).abs() < 0.01,
            "({lo}, {hi})"
        );
        // 1% of 1000 vs 3% of 1000: 2pp ± 1.96 × sqrt(.0099/1000 + .0291/1000) = 2 ± 1.224.
        let (lo, hi) = proportion_change_ci((10, 1000), (30, 1000), 0.95).expect("ci");
        assert!(
            (lo - 0.776).abs() < 0.01 && (hi - 3.224).abs() < 0.01,
            "({lo}, {hi})"
        );
        // 1000 vs 1000 events in 10 s: 0 ± 1.96 × sqrt(20) / 100 = ±8.77%.
        let (lo, hi) = rate_change_ci((1000, 10.0), (1000, 10.0), 0.95).expect("ci");
        assert!(
            (hi - 8.765).abs() < 0.01 && (lo + 8.765).abs() < 0.01,
            "({lo}, {hi})"
        );
    }

    #[test]
    fn tokens_in_equal_blocks_are_as_noisy_as_their_requests() {
        let tokens = |requests, seconds| Total {
            requests,
            mean: 128.0,
            std: 0.0,
            seconds,
        };
        let requests = rate_change_ci((10, 0.2), (10, 0.3), 0.95).expect("ci");
        let blocks = total_change_ci(tokens(10, 0.2), tokens(10, 0.3), 0.95).expect("ci");
        assert!(
            (requests.0 - blocks.0).abs() < 1e-9 && (requests.1 - blocks.1).abs() < 1e-9,
            "{requests:?} {blocks:?}"
        );
        // Lengths that vary add their own noise: 1000 requests of 100 ± 100 tokens in
        // 10 s each: se = sqrt(2 × 1000 × (100² + 100²)) / 10 = 632 tok/s of 10,000:
        // ±1.96 × 6.32% = ±12.4%.
        let varied = |requests| Total {
            requests,
            mean: 100.0,
            std: 100.0,
            seconds: 10.0,
        };
        let (lo, hi) = total_change_ci(varied(1000), varied(1000), 0.95).expect("ci");
        assert!(
            (hi - 12.396).abs() < 0.01 && (lo + 12.396).abs() < 0.01,
            "({lo}, {hi})"
        );
    }
}
