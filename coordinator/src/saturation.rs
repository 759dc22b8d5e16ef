//! Over-saturation detection: stop a benchmark when the server is drowning.
//!
//! A server past its capacity queues requests: the client's in-flight count grows and so
//! does TTFT (the queueing wait is part of it). A healthy server under steady load shows
//! neither trend. The detector keeps two series over a sliding window — in-flight
//! requests sampled every 100 ms, and the TTFT of every request whose first token
//! arrived — and once a second, after `min_seconds`, fits a least-squares line to each.
//! When the server publishes its waiting-requests gauge (`--server-metrics`), the scraped
//! values are a third series. A series *grows* when its slope is positive at the given
//! confidence (one-sided Student t test on the slope) *and* large: over the window it
//! rose by at least `min_growth` of its mean (and by at least one request for the two
//! request counts). It calls over-saturation when, for `consecutive` evaluations in a
//! row, at least two of the series grow (without the server's queue: both of the
//! client's), and the verdict names the ones that did. The magnitude and persistence
//! rules keep noise on a healthy server from stopping it. See docs/saturation.md. The
//! verdict on a finished benchmark (did the server keep up) is [`crate::kept_up`]'s.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};
use std::collections::VecDeque;

/// Settings of the detector (`--over-saturation` JSON; `--detect-saturation` = defaults).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SaturationConfig {
    /// No verdict before the benchmark has run this long, seconds.
    pub min_seconds: f64,
    /// Length of the sliding window, seconds.
    pub window_seconds: f64,
    /// Confidence of the one-sided slope tests, in (0.5, 1).
    pub confidence: f64,
    /// Minimum growth over the window, as a fraction of the series' mean.
    pub min_growth: f64,
    /// Evaluations in a row that must agree.
    pub consecutive: u32,
    /// Fewest TTFT samples in the window for a verdict.
    pub min_samples: usize,
}

impl Default for SaturationConfig {
    fn default() -> Self {
        Self {
            min_seconds: 10.0,
            window_seconds: 30.0,
            confidence: 0.95,
            min_growth: 0.25,
            consecutive: 3,
            min_samples: 20,
        }
    }
}

impl SaturationConfig {
    /// Checks the ranges; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.min_seconds >= 0.0 && self.min_seconds.is_finite()) {
            return Err("min_seconds must be a non-negative number".into());
        }
        if !(self.window_seconds > 1.0 && self.window_seconds.is_finite()) {
            return Err("window_seconds must be more than 1".into());
        }
        if !(self.confidence > 0.5 && self.confidence < 1.0) {
            return Err("confidence must be between 0.5 and 1 (exclusive)".into());
        }
        if !(self.min_growth >= 0.0 && self.min_growth.is_finite()) {
            return Err("min_growth must be a non-negative number".into());
        }
        if self.consecutive == 0 {
            return Err("consecutive must be at least 1".into());
        }
        if self.min_samples < 3 {
            return Err("min_samples must be at least 3".into());
        }
        Ok(())
    }
}

/// A least-squares line through a series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trend {
    /// Slope (units per second).
    pub slope: f64,
    /// Student t statistic of the slope.
    pub t: f64,
    /// Mean of the values.
    pub mean: f64,
    /// Time span of the samples, seconds.
    pub span: f64,
    /// Samples.
    pub n: usize,
}

/// Fits `y = a + b t` by least squares; `None` with fewer than 3 points or no spread in t.
pub fn trend(points: impl Iterator<Item = (f64, f64)> + Clone) -> Option<Trend> {
    let n = points.clone().count();
    if n < 3 {
        return None;
    }
    let nf = n as f64;
    let (st, sy) = points
        .clone()
        .fold((0.0, 0.0), |(a, b), (t, y)| (a + t, b + y));
    let (mt, my) = (st / nf, sy / nf);
    let (mut sxx, mut sxy, mut tmin, mut tmax) = (0.0, 0.0, f64::MAX, f64::MIN);
    for (t, y) in points.clone() {
        sxx += (t - mt) * (t - mt);
        sxy += (t - mt) * (y - my);
        tmin = tmin.min(t);
        tmax = tmax.max(t);
    }
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = my - slope * mt;
    let sse: f64 = points
        .map(|(t, y)| (y - intercept - slope * t).powi(2))
        .sum();
    let se = (sse / (nf - 2.0) / sxx).sqrt();
    let t = if se > 0.0 {
        slope / se
    } else if slope > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    Some(Trend {
        slope,
        t,
        mean: my,
        span: tmax - tmin,
        n,
    })
}

/// The detector's state for one benchmark.
#[derive(Debug)]
pub struct SaturationDetector {
    cfg: SaturationConfig,
    /// (seconds since t0, requests in flight).
    concurrency: VecDeque<(f64, f64)>,
    /// (seconds since t0 of the first token, TTFT in ms).
    ttft: VecDeque<(f64, f64)>,
    /// (seconds since t0 of the scrape, the server's waiting requests).
    server_queue: VecDeque<(f64, f64)>,
    last_concurrency_sample: f64,
    streak: u32,
}

impl SaturationDetector {
    /// A detector with `cfg` (validated by the caller).
    pub fn new(cfg: SaturationConfig) -> Self {
        Self {
            cfg,
            concurrency: VecDeque::new(),
            ttft: VecDeque::new(),
            server_queue: VecDeque::new(),
            last_concurrency_sample: f64::MIN,
            streak: 0,
        }
    }

    /// Records the in-flight count at `t` seconds (kept at most every 100 ms).
    pub fn observe_concurrency(&mut self, t: f64, in_flight: u64) {
        if t - self.last_concurrency_sample >= 0.1 {
            self.last_concurrency_sample = t;
            self.concurrency.push_back((t, in_flight as f64));
        }
    }

    /// Records a TTFT of `ttft_ms` whose first token arrived at `t` seconds.
    pub fn observe_ttft(&mut self, t: f64, ttft_ms: f64) {
        self.ttft.push_back((t, ttft_ms));
    }

    /// Records the server's waiting requests scraped at `t` seconds.
    pub fn observe_server_queue(&mut self, t: f64, waiting: f64) {
        self.server_queue.push_back((t, waiting));
    }

    fn trim(&mut self, now: f64) {
        let from = now - self.cfg.window_seconds;
        while self.concurrency.front().is_some_and(|&(t, _)| t < from) {
            self.concurrency.pop_front();
        }
        while self.ttft.front().is_some_and(|&(t, _)| t < from) {
            self.ttft.pop_front();
        }
        while self.server_queue.front().is_some_and(|&(t, _)| t < from) {
            self.server_queue.pop_front();
        }
    }

    /// Evaluates at `now` seconds since t0; `Some(detail)` when over-saturated.
    pub fn evaluate(&mut self, now: f64) -> Option<String> {
        self.trim(now);
        if now < self.cfg.min_seconds || self.ttft.len() < self.cfg.min_samples {
            self.streak = 0;
            return None;
        }
        let verdict = (|| {
            let c = trend(self.concurrency.iter().copied())?;
            let l = trend(self.ttft.iter().copied())?;
            let q = trend(self.server_queue.iter().copied());
            let confidence = self.cfg.confidence;
            let critical = |n: usize| {
                StudentsT::new(0.0, 1.0, (n as f64 - 2.0).max(1.0))
                    .ok()
                    .map(|d| d.inverse_cdf(confidence))
            };
            let grows = |tr: &Trend, floor: f64| {
                critical(tr.n).is_some_and(|crit| tr.t > crit)
                    && tr.slope * tr.span >= (self.cfg.min_growth * tr.mean).max(floor)
            };
            let mut fired = Vec::new();
            if grows(&c, 1.0) {
                fired.push(format!(
                    "in-flight requests grew {:+.2}/s (mean {:.1})",
                    c.slope, c.mean
                ));
            }
            if let Some(q) = q.as_ref().filter(|q| grows(q, 1.0)) {
                fired.push(format!(
                    "the server's waiting requests (num_requests_waiting) grew {:+.2}/s (mean {:.1})",
                    q.slope, q.mean
                ));
            }
            if grows(&l, 0.0) {
                fired.push(format!(
                    "TTFT grew {:+.1} ms/s (mean {:.1} ms)",
                    l.slope, l.mean
                ));
            }
            let span = l.span.max(c.span);
            (fired.len() >= 2).then(|| {
                format!(
                    "at {now:.1}s {} over the last {span:.0}s, confidence {confidence}",
                    join_and(&fired)
                )
            })
        })();
        match verdict {
            Some(detail) => {
                self.streak += 1;
                (self.streak >= self.cfg.consecutive).then_some(detail)
            }
            None => {
                self.streak = 0;
                None
            }
        }
    }
}

/// "a, b and c".
fn join_and(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_matches_a_hand_computed_line() {
        // y = 1 + 2t exactly: slope 2, infinite t statistic, mean 1 + 2 * 1.5 = 4.
        let tr =
            trend([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0), (3.0, 7.0)].into_iter()).expect("trend");
        assert!((tr.slope - 2.0).abs() < 1e-12);
        assert!(tr.t.is_infinite());
        assert!((tr.mean - 4.0).abs() < 1e-12);
        assert_eq!((tr.span, tr.n), (3.0, 4));
        // y = 0, 1, 0, 1: slope 0.2, residuals ±0.4/0.3…: sse = 0.8, se = sqrt(0.8/2/5).
        let tr =
            trend([(0.0, 0.0), (1.0, 1.0), (2.0, 0.0), (3.0, 1.0)].into_iter()).expect("trend");
        assert!((tr.slope - 0.2).abs() < 1e-12);
        assert!((tr.t - 0.2 / (0.8f64 / 2.0 / 5.0).sqrt()).abs() < 1e-9);
        assert!(trend([(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)].into_iter()).is_none());
    }

    fn feed(
        d: &mut SaturationDetector,
        seconds: u32,
        concurrency: impl Fn(f64) -> f64,
        ttft: impl Fn(f64) -> f64,
    ) -> Option<(u32, String)> {
        let mut noise = 0.0f64;
        for tick in 0..seconds * 10 {
            let t = f64::from(tick) / 10.0;
            // Deterministic jitter of ±10%.
            noise = (noise * 7.0 + 3.1).rem_euclid(2.0) - 1.0;
            d.observe_concurrency(
                t,
                (concurrency(t) * (1.0 + 0.1 * noise)).round().max(0.0) as u64,
            );
            d.observe_ttft(t, ttft(t) * (1.0 + 0.1 * noise));
            if tick % 10 == 9
                && let Some(detail) = d.evaluate(t)
            {
                return Some((tick / 10 + 1, detail));
            }
        }
        None
    }

    #[test]
    fn a_growing_queue_is_detected_after_min_seconds() {
        let cfg = SaturationConfig {
            min_seconds: 5.0,
            ..SaturationConfig::default()
        };
        let mut d = SaturationDetector::new(cfg);
        let (at, detail) =
            feed(&mut d, 60, |t| 8.0 + 4.0 * t, |t| 50.0 + 40.0 * t).expect("detected");
        assert!((5..=9).contains(&at), "detected at {at}s");
        assert!(detail.contains("in-flight requests grew"), "{detail}");
    }

    #[test]
    fn a_steady_server_is_left_alone() {
        let mut d = SaturationDetector::new(SaturationConfig {
            min_seconds: 2.0,
            ..SaturationConfig::default()
        });
        assert_eq!(feed(&mut d, 120, |_| 10.0, |_| 50.0), None);
        // A small drift (5% over the window) is not saturation either.
        let mut d = SaturationDetector::new(SaturationConfig {
            min_seconds: 2.0,
            ..SaturationConfig::default()
        });
        assert_eq!(
            feed(&mut d, 120, |t| 10.0 + 0.0005 * t, |t| 50.0 + 0.08 * t),
            None
        );
    }

    #[test]
    fn rising_latency_alone_is_not_saturation() {
        let mut d = SaturationDetector::new(SaturationConfig {
            min_seconds: 2.0,
            ..SaturationConfig::default()
        });
        assert_eq!(feed(&mut d, 60, |_| 10.0, |t| 50.0 + 20.0 * t), None);
    }

    #[test]
    fn the_detector_cites_the_servers_queue() {
        let mut d = SaturationDetector::new(SaturationConfig {
            min_seconds: 3.0,
            ..SaturationConfig::default()
        });
        let mut verdict = None;
        // In flight capped (a client-side limit), the server's queue and TTFT rising.
        for tick in 0..300 {
            let t = f64::from(tick) / 10.0;
            d.observe_concurrency(t, 8);
            d.observe_ttft(t, 50.0 + 40.0 * t);
            if tick % 10 == 0 {
                d.observe_server_queue(t, 2.0 * t);
            }
            if tick % 10 == 9
                && let Some(v) = d.evaluate(t)
            {
                verdict = Some(v);
                break;
            }
        }
        let v = verdict.expect("saturated");
        assert!(
            v.contains("waiting requests (num_requests_waiting) grew"),
            "{v}"
        );
        assert!(v.contains("TTFT grew"), "{v}");
        assert!(!v.contains("in-flight"), "{v}");
    }

    #[test]
    fn config_is_validated_field_by_field() {
        assert!(SaturationConfig::default().validate().is_ok());
        let bad = SaturationConfig {
            confidence: 1.5,
            ..SaturationConfig::default()
        };
        assert!(bad.validate().expect_err("bad").contains("confidence"));
        let parsed: Result<SaturationConfig, _> =
            serde_json::from_str(r#"{"min_seconds": 3, "bogus": 1}"#);
        assert!(
            parsed
                .expect_err("unknown field")
                .to_string()
                .contains("bogus")
        );
    }
}
