//! Plain data the layers above share: the counts, verdicts, goodput and rate estimates a
//! benchmark's result carries. The books (`state`) fill some of them, the results
//! (`result`) hold them, the verdicts (`slo`, `saturation`) and the profiles read them;
//! this module imports none of those. Each type is re-exported where it used to live
//! (`slo::SloVerdict`, `result::MeasuredCounts`, `profiles::RateEstimate`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Counts of the measured window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasuredCounts {
    /// Completed.
    pub completed: u64,
    /// Errored.
    pub errored: u64,
    /// Cancelled.
    pub cancelled: u64,
}

/// Where a rate a profile works from came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateSource {
    /// Completed requests per second of the measured window.
    Completed,
    /// No request completed: output tokens streamed per second (finished or not) over the
    /// output tokens of one request.
    StreamedTokens,
    /// This benchmark delivered nothing; the rate of the synchronous benchmark stands in.
    Synchronous,
}

/// The request rate a sweep or capacity search took from one benchmark, and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateEstimate {
    /// The rate, requests per second.
    pub requests_per_s: f64,
    /// How it was obtained.
    pub source: RateSource,
    /// One sentence a reader can check it by.
    pub detail: String,
}

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cmp {
    /// `<=`
    #[serde(rename = "<=")]
    Le,
    /// `<`
    #[serde(rename = "<")]
    Lt,
    /// `>=`
    #[serde(rename = ">=")]
    Ge,
    /// `>`
    #[serde(rename = ">")]
    Gt,
}

impl Cmp {
    pub(crate) fn holds(self, measured: f64, threshold: f64) -> bool {
        match self {
            Cmp::Le => measured <= threshold,
            Cmp::Lt => measured < threshold,
            Cmp::Ge => measured >= threshold,
            Cmp::Gt => measured > threshold,
        }
    }

    pub(crate) fn symbol(self) -> &'static str {
        match self {
            Cmp::Le => "<=",
            Cmp::Lt => "<",
            Cmp::Ge => ">=",
            Cmp::Gt => ">",
        }
    }
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// As written.
    pub name: String,
    /// The measured value, when there was one.
    pub measured: Option<f64>,
    /// The threshold.
    pub threshold: f64,
    /// The comparison.
    pub cmp: Cmp,
    /// Whether it held (a missing measurement fails; an inconclusive check does not
    /// pass).
    pub passed: bool,
    /// Could not decide: a percentile's confidence bounds straddle the threshold (or a
    /// side has too few requests to exist), or a mean, min or max has fewer than
    /// `slo::MIN_SAMPLES` requests. Neither a pass nor a failure; the verdict does not
    /// pass.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inconclusive: bool,
    /// Why it failed or could not decide beyond its measurement: the bounds and about how
    /// many more requests would decide, or a server that did not keep up with the
    /// offered rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The distribution the measurement came from (`ttft_with_incomplete.total`,
    /// `ttft_from_intent.successful`, `itl.successful`), for latency checks: the
    /// stricter of those read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    /// A percentile check: the lower confidence bound of the percentile, in the
    /// threshold's units (ms); absent when too few requests bound that side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower: Option<f64>,
    /// A percentile check: the upper confidence bound, as `lower`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper: Option<f64>,
    /// A percentile check: the probability that `lower`..`upper` brackets the true
    /// percentile (`--confidence`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// An inconclusive check: about how many more requests would decide it, if the
    /// distribution observed held. Absent when no number would (the observed value sits
    /// at the threshold) and for checks that decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub more_requests: Option<u64>,
}

impl CheckResult {
    /// Inconclusive for want of requests: a side of a percentile's bounds does not exist
    /// yet (or a mean, min or max has too few requests), rather than bounds that straddle
    /// the threshold.
    pub fn too_few_requests(&self) -> bool {
        self.inconclusive
            && (self.confidence.is_none() || self.lower.is_none() || self.upper.is_none())
    }

    /// `PASS`, `FAIL` or `INCONCLUSIVE`.
    pub fn label(&self) -> &'static str {
        if self.passed {
            "PASS"
        } else if self.inconclusive {
            "INCONCLUSIVE"
        } else {
            "FAIL"
        }
    }
}

/// An SLO evaluated against one benchmark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloVerdict {
    /// Every check held (none failed, none was inconclusive).
    pub passed: bool,
    /// Each check.
    pub checks: Vec<CheckResult>,
    /// A rate benchmark whose queue grew: the server did not keep up with the offered
    /// rate, so every latency check fails with this reason (the time limit cut the queue
    /// short, not the server). Absent when it kept up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_kept_up: Option<String>,
}

impl SloVerdict {
    /// `PASS`, `FAIL` (a check failed) or `INCONCLUSIVE` (none failed, but some could
    /// not decide).
    pub fn label(&self) -> &'static str {
        let failed = self.checks.iter().any(|c| !c.passed && !c.inconclusive);
        if self.passed {
            "PASS"
        } else if !failed && self.checks.iter().any(|c| c.inconclusive) {
            "INCONCLUSIVE"
        } else {
            "FAIL"
        }
    }
}

impl fmt::Display for CheckResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let measured = self
            .measured
            .map_or("n/a".to_string(), |m| format!("{m:.3}"));
        write!(
            f,
            "{} {}: measured {measured} {} {}",
            self.label(),
            self.name,
            self.cmp.symbol(),
            self.threshold
        )?;
        if let Some(d) = &self.distribution {
            write!(f, " (from {d})")?;
        }
        match &self.reason {
            Some(r) => write!(f, ": {r}"),
            None => Ok(()),
        }
    }
}

/// Parses a duration into milliseconds: `500ms`, `2s`, `250us`, or bare milliseconds.
pub fn parse_ms(value: &str) -> Result<f64, String> {
    let v = value.trim();
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("us").or_else(|| v.strip_suffix("µs")) {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60_000.0)
    } else {
        (v, 1.0)
    };
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a duration (e.g. 500ms, 2s)"))?;
    if !x.is_finite() || x < 0.0 {
        return Err(format!("{value:?} must be a non-negative duration"));
    }
    Ok(x * scale)
}

/// Per-request goodput thresholds (`--goodput "ttft:500ms,tpot:50ms,e2e:10s"`). In a
/// report each is written as on the command line (`"e2e": "10s"`); reports written
/// before, with `{"secs": 10, "nanos": 0}`, still load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoodputSpec {
    /// Time to first content token.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "threshold_text"
    )]
    pub ttft: Option<Duration>,
    /// Time per output token.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "threshold_text"
    )]
    pub tpot: Option<Duration>,
    /// End-to-end latency.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "threshold_text"
    )]
    pub e2e: Option<Duration>,
}

/// A goodput threshold as text: `10s` for whole seconds, else milliseconds (`500ms`,
/// `0.25ms`).
pub fn threshold_string(d: Duration) -> String {
    if d.subsec_nanos() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_nanos() as f64 / 1e6)
    }
}

impl fmt::Display for GoodputSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = [("ttft", self.ttft), ("tpot", self.tpot), ("e2e", self.e2e)]
            .into_iter()
            .filter_map(|(name, d)| Some(format!("{name}<={}", threshold_string(d?))))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Serde of an optional threshold as text (`"10s"`), reading the older `{secs, nanos}`.
mod threshold_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&super::threshold_string(*d)),
            None => s.serialize_none(),
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Struct(Duration),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<Either>::deserialize(d)? {
            None => Ok(None),
            Some(Either::Struct(d)) => Ok(Some(d)),
            Some(Either::Text(t)) => {
                let ms = super::parse_ms(&t).map_err(serde::de::Error::custom)?;
                let nanos = (ms * 1e6).round();
                if !(0.0..=u64::MAX as f64).contains(&nanos) {
                    return Err(serde::de::Error::custom(format!("{t:?} is too long")));
                }
                Ok(Some(Duration::from_nanos(nanos as u64)))
            }
        }
    }
}

impl GoodputSpec {
    /// Parses `name:duration,...` with names `ttft`, `tpot`, `e2e`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut g = GoodputSpec::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once(':')
                .ok_or_else(|| format!("{part:?}: expected name:duration, e.g. ttft:500ms"))?;
            let ms = parse_ms(value).map_err(|e| format!("{part:?}: {e}"))?;
            // A threshold past a Duration's range (ttft:1e30s) is a typo, not a bound.
            let d = Duration::try_from_secs_f64(ms / 1000.0)
                .map_err(|_| format!("{part:?}: {value:?} is too long"))?;
            match name.trim() {
                "ttft" => g.ttft = Some(d),
                "tpot" => g.tpot = Some(d),
                "e2e" | "e2el" | "request_latency" => g.e2e = Some(d),
                other => {
                    return Err(format!(
                        "{other:?}: unknown goodput metric (use ttft, tpot, e2e)"
                    ));
                }
            }
        }
        if g == GoodputSpec::default() {
            return Err("no thresholds (e.g. ttft:500ms,tpot:50ms,e2e:10s)".into());
        }
        Ok(g)
    }

    /// Whether a request that did not finish had already missed a threshold: its time
    /// without a content token, or its elapsed time, is past it (a lower bound). TPOT
    /// cannot be judged before the end.
    pub fn already_missed(&self, r: &llmsurge_proto::RequestRecord) -> bool {
        let elapsed = r.elapsed();
        self.ttft
            .is_some_and(|max| r.ttft().unwrap_or(elapsed) > max)
            || self.e2e.is_some_and(|max| elapsed > max)
    }

    /// Whether a completed request with these timings is good. A threshold that cannot
    /// be measured (no content token, one output token for TPOT) is not met, except TPOT,
    /// which has no meaning for single-token outputs and is then skipped.
    pub fn is_good(&self, ttft: Option<Duration>, tpot: Option<Duration>, e2e: Duration) -> bool {
        self.ttft.is_none_or(|max| ttft.is_some_and(|t| t <= max))
            && self.tpot.is_none_or(|max| tpot.is_none_or(|t| t <= max))
            && self.e2e.is_none_or(|max| e2e <= max)
    }
}

/// Goodput of a benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Goodput {
    /// The thresholds.
    pub spec: GoodputSpec,
    /// Completed measured requests that met every threshold.
    pub good_requests: u64,
    /// `good_requests` over the measured window.
    pub requests_per_s: f64,
    /// `good_requests` / the judged requests ([`Goodput::judged`]): an errored or
    /// unfinished request is never good; a planned give-up is not judged.
    pub fraction: f64,
    /// Of the measured requests cut off before they finished, those whose elapsed time
    /// had already missed a threshold (they would not have been good whatever their end;
    /// the others are not good either, but only because they did not finish).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unfinished_not_good: u64,
    /// Measured requests the client gave up on by plan (`--cancel`): the user's own
    /// choice, not the server's failure, so neither good nor judged.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub planned: u64,
}

impl Goodput {
    /// The measured requests goodput judges: every completed, errored and unfinished
    /// (cancelled) one but the planned give-ups (`--cancel`). Only a completed request can
    /// be good: a server that never finished a request did not serve it within any
    /// objective; a request the client meant to abandon was never asked to finish.
    pub fn judged(&self, measured: &MeasuredCounts) -> u64 {
        (measured.completed + measured.errored + measured.cancelled).saturating_sub(self.planned)
    }

    /// The goodput of `good` requests over `measured` (see [`Goodput::judged`]), of which
    /// `planned` were given up by plan, in a measured window of `duration_s` seconds.
    pub fn new(
        spec: GoodputSpec,
        good: u64,
        measured: &MeasuredCounts,
        unfinished_not_good: u64,
        planned: u64,
        duration_s: f64,
    ) -> Self {
        let mut g = Goodput {
            spec,
            good_requests: good,
            requests_per_s: if duration_s > 0.0 {
                good as f64 / duration_s
            } else {
                0.0
            },
            fraction: 0.0,
            unfinished_not_good,
            planned,
        };
        let judged = g.judged(measured);
        if judged > 0 {
            g.fraction = good as f64 / judged as f64;
        }
        g
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
