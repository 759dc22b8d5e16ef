//! Profiles: the sequence of benchmarks of a run.
//!
//! - [`FixedProfile`]: a list of strategies (`--rate 1,5,10`).
//! - [`SweepProfile`]: synchronous, then throughput, then rates evenly spaced between the
//!   two measured request rates ([`estimate_rate`]: from streamed tokens when no request
//!   completed, so a server too small for the throughput benchmark still gets a sweep).
//! - [`CapacityProfile`]: synchronous and throughput, then constant rates: above the
//!   measured maximum while the SLO holds, then a bisection for the highest rate that
//!   meets the SLO with a queue that does not grow, to the requested precision, with the
//!   failing rate next to the answer confirmed by a second run.

use crate::constraints::StopReason;
pub use crate::data::{RateEstimate, RateSource};
use crate::error::CoordinatorError;
use crate::group::BenchmarkPlan;
use crate::result::BenchmarkResult;
use crate::slo::Slo;
use crate::strategy::Strategy;
use serde::{Deserialize, Serialize};

/// A sequence of benchmarks that may adapt to the results so far (a sweep picks its
/// rates from its first two results).
pub trait Profile {
    /// The next benchmark to run, or `None` when the profile is done.
    fn next(&mut self, done: &[BenchmarkResult])
    -> Result<Option<BenchmarkPlan>, CoordinatorError>;

    /// Records on the results what the profile took from them (the rates a sweep or a
    /// capacity search derived, and how), once the run is over.
    fn annotate(&self, _done: &mut [BenchmarkResult]) {}
}

/// A fixed list of benchmarks.
impl Profile for std::vec::IntoIter<BenchmarkPlan> {
    fn next(
        &mut self,
        _done: &[BenchmarkResult],
    ) -> Result<Option<BenchmarkPlan>, CoordinatorError> {
        Ok(Iterator::next(self))
    }
}

/// Makes the plan of one benchmark from a strategy; everything else is shared.
#[derive(Clone, Debug)]
pub struct PlanTemplate {
    /// Shared settings; `index`, `strategy` and `workers` are replaced per benchmark.
    pub base: BenchmarkPlan,
    /// `--workers`, when given.
    pub workers: Option<u32>,
    /// Cores of the host, for the default worker count.
    pub cores: u32,
}

impl PlanTemplate {
    /// The plan of benchmark `index` running `strategy`.
    pub fn plan(&self, index: usize, strategy: Strategy) -> BenchmarkPlan {
        let mut plan = self.base.clone();
        plan.index = index as u32;
        // Each benchmark its own streams: a later benchmark sends none of an earlier
        // one's prompts, so a server's prefix cache is not flattered.
        plan.worker_template.reseed("benchmark", index as u64);
        plan.strategy = strategy;
        plan.workers = match (strategy, self.workers) {
            (Strategy::Synchronous, _) => 1,
            (_, Some(w)) => w,
            (s, None) => s.local_part(plan.shard).default_workers(self.cores),
        };
        plan
    }
}

/// A fixed list of strategies.
#[derive(Debug)]
pub struct FixedProfile {
    template: PlanTemplate,
    strategies: Vec<Strategy>,
}

impl FixedProfile {
    /// One benchmark per strategy, in order.
    pub fn new(template: PlanTemplate, strategies: Vec<Strategy>) -> Self {
        Self {
            template,
            strategies,
        }
    }
}

impl Profile for FixedProfile {
    fn next(
        &mut self,
        done: &[BenchmarkResult],
    ) -> Result<Option<BenchmarkPlan>, CoordinatorError> {
        Ok(self
            .strategies
            .get(done.len())
            .map(|s| self.template.plan(done.len(), *s)))
    }
}

/// How a sweep's rate benchmarks send requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepArrivals {
    /// Evenly spaced.
    #[default]
    Constant,
    /// Poisson (or gamma with `--burstiness`).
    Poisson,
}

impl SweepArrivals {
    /// The rate strategy that sends `rate` requests a second this way.
    pub fn strategy(self, rate: f64) -> Strategy {
        match self {
            SweepArrivals::Constant => Strategy::Constant { rate },
            SweepArrivals::Poisson => Strategy::Poisson { rate },
        }
    }
}

/// Output tokens the measured requests of `r` delivered, finished or not (a cancelled
/// request's count is what it streamed before it was cut off).
fn delivered_tokens(r: &BenchmarkResult) -> f64 {
    r.metrics.get("output_tokens").map_or(0.0, |d| {
        [&d.successful, &d.errored, &d.incomplete]
            .iter()
            .map(|x| x.count as f64 * x.mean)
            .filter(|t| t.is_finite())
            .sum()
    })
}

/// The request rate `r` shows the server sustained: completed requests per second when
/// any completed; otherwise the output tokens it streamed per second over
/// `tokens_per_request` (a server too slow to finish one request within `--max-seconds`
/// still streams tokens). `None` when it delivered nothing at all.
pub fn estimate_rate(r: &BenchmarkResult, tokens_per_request: Option<f64>) -> Option<RateEstimate> {
    let rate = r.throughput.requests_per_s;
    if rate > 0.0 && rate.is_finite() {
        return Some(RateEstimate {
            requests_per_s: rate,
            source: RateSource::Completed,
            detail: format!(
                "{} requests completed in {:.2} s",
                r.measured_requests.completed, r.measured_window.duration_s
            ),
        });
    }
    let seconds = if r.measured_window.duration_s > 0.0 {
        r.measured_window.duration_s
    } else {
        r.duration_s
    };
    let tokens = delivered_tokens(r);
    let per_request = tokens_per_request.filter(|n| *n >= 1.0 && n.is_finite())?;
    let rate = tokens / seconds / per_request;
    (rate > 0.0 && rate.is_finite()).then(|| RateEstimate {
        requests_per_s: rate,
        source: RateSource::StreamedTokens,
        detail: format!(
            "no request completed within the benchmark, so the rate is the output tokens streamed ({tokens:.0} in {seconds:.2} s) over {per_request:.1} tokens per request"
        ),
    })
}

impl PlanTemplate {
    /// The synthetic data's requested output length, when the data is synthetic.
    fn synthetic_output_tokens(&self) -> Option<f64> {
        match &self.base.worker_template.data {
            llmsurge_proto::DataSpec::Synthetic(s) => Some(f64::from(s.output_tokens)),
            _ => None,
        }
    }

    /// The rates of the synchronous and the throughput benchmarks, as [`endpoint_rates`]
    /// says with this template's data.
    fn endpoint_rates(
        &self,
        done: &[BenchmarkResult],
    ) -> Result<(RateEstimate, RateEstimate), CoordinatorError> {
        endpoint_rates(done, self.synthetic_output_tokens())
    }
}

/// Output tokens of one request: the mean of the completed requests of `done` when there
/// are any, else `fallback` (the synthetic data's requested length).
fn tokens_per_request(done: &[BenchmarkResult], fallback: Option<f64>) -> Option<f64> {
    done.iter()
        .filter_map(|r| r.metrics.get("output_tokens"))
        .map(|d| &d.successful)
        .find(|d| d.count > 0 && d.mean >= 1.0)
        .map(|d| d.mean)
        .or(fallback)
}

/// The rates of the synchronous and the throughput benchmarks (`done[0]`, `done[1]`),
/// each estimated as [`estimate_rate`] says (`fallback_tokens`: output tokens per request
/// when none completed); when one delivered nothing the other stands in for it, so a
/// server too slow for `--max-seconds` still gets an answer.
fn endpoint_rates(
    done: &[BenchmarkResult],
    fallback_tokens: Option<f64>,
) -> Result<(RateEstimate, RateEstimate), CoordinatorError> {
    let per_request = tokens_per_request(done, fallback_tokens);
    let sync = estimate_rate(&done[0], per_request);
    let max = estimate_rate(&done[1], per_request);
    match (sync, max) {
        (Some(s), Some(m)) => Ok((s, m)),
        (Some(s), None) => {
            let stand_in = RateEstimate {
                requests_per_s: s.requests_per_s,
                source: RateSource::Synchronous,
                detail: "the throughput benchmark delivered no token within the benchmark, so the synchronous rate stands in for the maximum".into(),
            };
            Ok((s, stand_in))
        }
        (None, Some(m)) => {
            let stand_in = RateEstimate {
                requests_per_s: m.requests_per_s,
                source: m.source,
                detail: format!(
                    "the synchronous benchmark delivered no token, so the throughput benchmark's rate stands in ({})",
                    m.detail
                ),
            };
            Ok((stand_in, m))
        }
        (None, None) => Err(CoordinatorError::Plan(
            "neither the synchronous nor the throughput benchmark received a single output token, so the profile has no rate to work from (see why its requests failed; raise --max-seconds or --max-requests when the server only answers slowly)".into(),
        )),
    }
}

/// Synchronous, throughput, then `count - 2` rates evenly spaced between them.
#[derive(Debug)]
pub struct SweepProfile {
    template: PlanTemplate,
    count: usize,
    arrivals: SweepArrivals,
    throughput_concurrency: u32,
    rates: Vec<f64>,
    estimates: Option<(RateEstimate, RateEstimate)>,
}

impl SweepProfile {
    /// A sweep of `count` (≥ 3) benchmarks in total.
    pub fn new(
        template: PlanTemplate,
        count: usize,
        arrivals: SweepArrivals,
        throughput_concurrency: u32,
    ) -> Self {
        Self {
            template,
            count,
            arrivals,
            throughput_concurrency,
            rates: Vec::new(),
            estimates: None,
        }
    }

    /// The interior rates between the measured endpoints: `lo + k (hi - lo) / (count - 1)`.
    pub fn rates_between(lo: f64, hi: f64, count: usize) -> Vec<f64> {
        let steps = count.saturating_sub(1).max(1) as f64;
        (1..count.saturating_sub(1))
            .map(|k| lo + k as f64 * (hi - lo) / steps)
            .collect()
    }
}

impl Profile for SweepProfile {
    fn next(
        &mut self,
        done: &[BenchmarkResult],
    ) -> Result<Option<BenchmarkPlan>, CoordinatorError> {
        let i = done.len();
        let strategy = match i {
            0 => Strategy::Synchronous,
            1 => Strategy::Throughput {
                max_concurrency: self.throughput_concurrency,
            },
            _ => {
                if self.estimates.is_none() {
                    let (lo, hi) = self.template.endpoint_rates(done)?;
                    let (lo_rate, hi_rate) = (lo.requests_per_s, hi.requests_per_s);
                    self.rates = Self::rates_between(lo_rate, hi_rate.max(lo_rate), self.count);
                    self.estimates = Some((lo, hi));
                }
                match self.rates.get(i - 2) {
                    Some(&rate) => self.arrivals.strategy(rate),
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(self.template.plan(i, strategy)))
    }

    fn annotate(&self, done: &mut [BenchmarkResult]) {
        if let Some((lo, hi)) = &self.estimates {
            for (r, e) in done.iter_mut().zip([lo, hi]) {
                r.rate_estimate = Some(e.clone());
            }
        }
    }
}

/// One rate the capacity search tried.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// Index of its benchmark in the run.
    pub benchmark: u32,
    /// The strategy (synchronous, throughput, or a constant rate).
    pub strategy: Strategy,
    /// The rate it offered, or achieved for synchronous and throughput, req/s.
    pub rate: f64,
    /// Whether the rate was sustained within the SLO.
    pub passed: bool,
    /// Why it failed: the SLO checks that failed, or the queue that grew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A second run of a failing rate next to a passing one, to confirm the boundary.
    #[serde(default)]
    pub retest: bool,
    /// The server's queue and KV-cache use during it, when its metrics were scraped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerLoad>,
    /// Its SLO could not decide (too few requests completed for a percentile it
    /// checks): not a pass. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inconclusive: bool,
    /// The objectives that did not pass, in the SLO's order (`kept_up` first when the
    /// queue grew): the first is what bound the answer when this probe is its failing
    /// bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// The objectives that could not decide (too few requests, or bounds straddling the
    /// threshold): neither passed nor failed, so never in `failed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<String>,
}

/// How the reason of a probe whose SLO could not decide begins.
const INCONCLUSIVE_REASON: &str = "SLO inconclusive";
/// How the reason of a probe with too few requests to bound its SLO begins.
const TOO_FEW_REASON: &str = "SLO inconclusive (too few requests)";

/// How a search's reason ends when it stopped at a probe where the server answered
/// nothing and the lost rule could not speak.
const STOPPED_ANSWERING: &str = "the server stopped answering";

/// The objectives of `r`'s verdict (its own, else `slo`'s) that could not decide.
fn r_undecided(r: &BenchmarkResult, slo: &Slo) -> Vec<String> {
    let verdict = r.slo.clone().unwrap_or_else(|| slo.judge(r));
    verdict
        .checks
        .iter()
        .filter(|c| !c.passed && c.inconclusive)
        .map(|c| c.name.clone())
        .collect()
}

/// The remedy for too few requests when time was the limit.
const REMEDY_SECONDS: &str = "raise --max-seconds";

/// Whether `r` ran a load the search chose (not its synchronous or throughput probe,
/// whose rate is what they achieved).
fn chosen_load(r: &BenchmarkResult) -> bool {
    matches!(
        r.strategy,
        Strategy::Constant { .. } | Strategy::Poisson { .. } | Strategy::Concurrent { .. }
    )
}

/// What would give a load that stopped as `r` did more requests: raising the limit
/// that stopped it (raising --max-seconds changes nothing under --max-requests).
fn remedy(r: &BenchmarkResult) -> &'static str {
    match r.stop_reason {
        Some(StopReason::MaxRequests { .. }) => "raise --max-requests",
        Some(StopReason::DatasetExhausted { .. }) => "give a larger --data (it ran out)",
        _ => REMEDY_SECONDS,
    }
}

/// A check's measurement with its unit: ms for a latency, % for `error_rate`, /s for a
/// rate.
fn measured_with_unit(c: &crate::slo::CheckResult, m: f64) -> String {
    let metric = c.name.split(['<', '>']).next().unwrap_or_default();
    if metric == "error_rate" {
        format!("{:.3}%", m * 100.0)
    } else if metric.starts_with("output_speed") {
        format!("{m:.3} tok/s")
    } else if metric.starts_with("turns_completed") {
        format!("{m:.3} turns")
    } else if metric.ends_with("_per_s") || metric == "goodput" || metric == "request_rate" {
        format!("{m:.3}/s")
    } else {
        format!("{m:.3} ms")
    }
}

/// The server's own view of a load (`--server-metrics`): its waiting requests and its
/// KV-cache use over the measured window, each present when the server publishes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerLoad {
    /// Mean of the waiting-requests gauge (`num_requests_waiting`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_mean: Option<f64>,
    /// Its largest scraped value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_max: Option<f64>,
    /// Mean KV-cache use, 0 to 1 (`kv_cache_usage_perc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage_mean: Option<f64>,
    /// Its largest scraped value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage_max: Option<f64>,
}

impl ServerLoad {
    /// What `r`'s scrapes say, when they say anything of the queue or the KV cache.
    pub fn of(r: &BenchmarkResult) -> Option<Self> {
        let summary = &r.server_metrics.as_ref()?.summary;
        let waiting = summary.get("num_requests_waiting");
        let kv = summary.get("kv_cache_usage_perc");
        let load = Self {
            waiting_mean: waiting.and_then(|s| s.mean),
            waiting_max: waiting.and_then(|s| s.max),
            kv_cache_usage_mean: kv.and_then(|s| s.mean),
            kv_cache_usage_max: kv.and_then(|s| s.max),
        };
        (load != Self::default()).then_some(load)
    }

    /// One phrase for a conclusion: "the server's queue averaged 0.4 (max 3) and its KV
    /// cache 41% (max 77%)".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let (Some(mean), Some(max)) = (self.waiting_mean, self.waiting_max) {
            parts.push(format!(
                "the server's queue averaged {mean:.1} waiting requests (max {max:.0})"
            ));
        }
        if let (Some(mean), Some(max)) = (self.kv_cache_usage_mean, self.kv_cache_usage_max) {
            parts.push(format!(
                "its KV-cache use {:.0}% (max {:.0}%)",
                mean * 100.0,
                max * 100.0
            ));
        }
        parts.join(" and ")
    }
}

/// What the capacity search found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapacityOutcome {
    /// The highest constant rate that met the SLO, req/s; `None` if none did.
    pub rate: Option<f64>,
    /// The precision asked for (a fraction of the rate).
    pub precision: f64,
    /// The bracket the answer lies in: passing rate ≤ capacity < failing rate.
    pub bracket: (f64, Option<f64>),
    /// How the search ended.
    pub conclusion: String,
    /// Every benchmark of the search with its verdict.
    pub probes: Vec<Probe>,
    /// The server's queue and KV-cache use at the chosen rate (its passing probe), when
    /// its metrics were scraped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerLoad>,
    /// What the search varied: with `users`, `rate` and the bracket are user counts.
    #[serde(default)]
    pub variable: SearchVariable,
    /// `--slo-tier`: each tier's answer from the same probes (then `rate` is `None`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierOutcome>,
}

impl CapacityOutcome {
    /// Whether the search ended at a probe where the server answered nothing and the
    /// lost rule could not speak: its answer is a lower bound, said on the console.
    pub fn stopped_answering(&self) -> bool {
        self.probes.last().is_some_and(|p| {
            p.inconclusive
                && p.reason
                    .as_deref()
                    .is_some_and(|r| r.ends_with(STOPPED_ANSWERING))
        })
    }
}

/// One SLO tier (`--slo-tier NAME:OBJECTIVES`): its name and the objectives that must
/// all hold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloTier {
    /// The tier's name.
    pub name: String,
    /// Its objectives.
    pub slo: Slo,
}

/// What the capacity search found for one tier.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierOutcome {
    /// The tier's name.
    pub name: String,
    /// Its objectives as written.
    pub objectives: Vec<String>,
    /// The most users (or the highest rate) whose probe met every objective; `None` if
    /// none did.
    pub value: Option<f64>,
    /// The boundary: passing value ≤ answer < failing value (`None`: none failed).
    pub bracket: (f64, Option<f64>),
    /// The objective that failed first at the failing value (`kept_up` when the queue
    /// grew); `None` when no value failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
    /// Runs at the failing value that failed (2 when a second run confirmed it).
    pub failing_runs: u32,
    /// How the tier's search ended.
    pub conclusion: String,
    /// The tier's verdict on each probe it read (probes are shared between tiers).
    pub probes: Vec<Probe>,
    /// The run was interrupted before the tier's search ended: `value` is the most the
    /// measured probes passed, a lower bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_short: bool,
}

impl TierOutcome {
    /// The answer as people read it: `3 users`, `none`, or after an interruption `at
    /// least 2 users (cut short)`.
    pub fn answer(&self, variable: SearchVariable) -> String {
        match self.value {
            None => "none".into(),
            Some(v) if self.cut_short => format!("at least {} (cut short)", variable.show(v)),
            Some(v) => variable.show(v),
        }
    }
}

/// Each step above a rate that passed with no failure seen yet multiplies it by this.
const CAPACITY_GROWTH: f64 = 1.5;
/// Steps above the measured maximum before the search gives up looking for a failure.
const CAPACITY_MAX_GROWTH_STEPS: u32 = 8;
/// Each step of a user search above a count that passed, with no failure seen yet,
/// multiplies it by this.
const USERS_GROWTH: f64 = 2.0;
/// Doublings of a user search before it gives up looking for a failure (65,536 users).
const USERS_MAX_GROWTH_STEPS: u32 = 16;
/// Benchmarks a capacity search runs at most.
const CAPACITY_MAX_BENCHMARKS: usize = 30;

/// What a capacity search varies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchVariable {
    /// The request rate of constant-rate benchmarks, req/s.
    #[default]
    Rate,
    /// The streams of concurrent benchmarks (whole numbers).
    Concurrency,
    /// Concurrent users of multi-turn sessions (whole numbers): from one user up, no
    /// synchronous or throughput benchmark.
    Users,
}

impl SearchVariable {
    /// The unit of its values: `req/s`, `streams`, `users`.
    pub fn unit(self) -> &'static str {
        match self {
            SearchVariable::Rate => "req/s",
            SearchVariable::Concurrency => "streams",
            SearchVariable::Users => "users",
        }
    }

    /// A value with its unit, for conclusions: `41.966 req/s`, `5 streams`, `1 user`.
    pub fn show(self, value: f64) -> String {
        match self {
            SearchVariable::Rate => format!("{value:.3} req/s"),
            SearchVariable::Concurrency if value == 1.0 => "1 stream".into(),
            SearchVariable::Users if value == 1.0 => "1 user".into(),
            _ => format!("{value:.0} {}", self.unit()),
        }
    }
}

/// The search of [`CapacityProfile`], apart from the plans: it takes the results so far
/// and says which load to run next, so a driver that runs each benchmark its own way
/// (`sweep serve-sla`, one `benchmark run` per load, shared across SLAs) searches the
/// same way. The measured maximum is only where it starts: while the SLO holds it probes
/// higher until a value fails, and the failing value next to the final pass is run a
/// second time to confirm it.
#[derive(Clone, Debug)]
pub struct CapacitySearch {
    variable: SearchVariable,
    slo: Slo,
    precision: f64,
    throughput_concurrency: u32,
    /// Output tokens per request when no request completed (the synthetic length).
    fallback_tokens: Option<f64>,
    /// Highest passing and lowest failing values so far.
    lo: f64,
    hi: Option<f64>,
    /// Failing values not overturned by a retest.
    failures: Vec<f64>,
    /// Failing values whose retest failed too.
    confirmed: Vec<f64>,
    /// The value being run a second time, if the last load was a retest.
    retesting: Option<f64>,
    growth_steps: u32,
    /// What would let the last load decide its SLO: the limit that stopped it.
    remedy: &'static str,
    /// Boxed: the profile sits in an enum beside the others.
    estimates: Option<Box<(RateEstimate, RateEstimate)>>,
    /// Boxed, as the estimates.
    outcome: Option<Box<CapacityOutcome>>,
    probes: Vec<Probe>,
    /// The highest load (in the variable's unit) of a probe where a request succeeded:
    /// one that completes nothing at no more than that found the server gone.
    answered_load: f64,
    /// `--max-concurrency`: a user search offers no more users than the cap lets run.
    ceiling: Option<f64>,
}

impl CapacitySearch {
    /// A search to `precision` (e.g. 0.05) for the highest rate meeting `slo`;
    /// `fallback_tokens`: output tokens per request when no request completes.
    pub fn new(
        slo: Slo,
        precision: f64,
        throughput_concurrency: u32,
        fallback_tokens: Option<f64>,
    ) -> Self {
        Self {
            variable: SearchVariable::Rate,
            slo,
            precision,
            throughput_concurrency,
            fallback_tokens,
            lo: 0.0,
            hi: None,
            failures: Vec::new(),
            confirmed: Vec::new(),
            retesting: None,
            growth_steps: 0,
            remedy: REMEDY_SECONDS,
            estimates: None,
            outcome: None,
            probes: Vec::new(),
            answered_load: 0.0,
            ceiling: None,
        }
    }

    /// The same search under `--max-concurrency` `cap`: users beyond the cap would only
    /// wait in the client's queue, so a user search climbs no higher, and an answer at
    /// the cap says it is bounded by it.
    pub fn capped(mut self, cap: Option<u64>) -> Self {
        self.ceiling = cap.map(|c| c as f64);
        self
    }

    /// The same search over `variable` (concurrency: the synchronous benchmark is one
    /// stream, the throughput benchmark its streams, then concurrent benchmarks).
    pub fn over(mut self, variable: SearchVariable) -> Self {
        self.variable = variable;
        self
    }

    /// The answer, once the search is over (also after an interruption: the bracket so
    /// far). With concurrency, its rates are streams.
    pub fn outcome(&self) -> CapacityOutcome {
        self.outcome.as_deref().cloned().unwrap_or_else(|| {
            let rate = (self.lo > 0.0).then_some(self.lo);
            CapacityOutcome {
                rate,
                precision: self.precision,
                bracket: (self.lo, self.hi),
                conclusion: "the search did not finish".into(),
                probes: self.probes.clone(),
                server: rate.and_then(|r| self.server_at(r)),
                variable: self.variable,
                tiers: Vec::new(),
            }
        })
    }

    /// The server's load at `rate`: its last passing probe there.
    fn server_at(&self, rate: f64) -> Option<ServerLoad> {
        self.probes
            .iter()
            .rev()
            .find(|p| p.passed && p.rate == rate)
            .and_then(|p| p.server)
    }

    /// Whether `r` sustained its rate within the SLO, and if not, why. A probe whose
    /// server did not keep up ([`crate::kept_up::kept_up`]) fails whatever its latencies
    /// say: cut off by the time limit, it would have missed the SLO had it run longer.
    fn verdict(&self, r: &BenchmarkResult) -> (bool, Option<String>, Vec<String>) {
        let slo = r.slo.clone().unwrap_or_else(|| self.slo.judge(r));
        let mut failed: Vec<String> = slo
            .checks
            .iter()
            .filter(|c| !c.passed && !c.inconclusive)
            .map(|c| c.name.clone())
            .collect();
        // Not keeping up fails the probe whatever else its SLO says; a verdict read
        // from elsewhere may predate the rule, so it is asked again.
        let offered = match self.variable {
            SearchVariable::Users => crate::kept_up::Offered::Users,
            _ => crate::kept_up::Offered::Load,
        };
        if let Some(why) = crate::kept_up::probe_not_kept_up(r, offered, slo.not_kept_up.clone()) {
            failed.insert(0, "kept_up".into());
            return (false, Some(why), failed);
        }
        if !slo.passed {
            let reasons: Vec<String> = slo
                .checks
                .iter()
                .filter(|c| !c.passed)
                .map(|c| {
                    let measured = match (c.measured, &c.reason) {
                        (Some(m), _) => {
                            format!("{} (measured {})", c.name, measured_with_unit(c, m))
                        }
                        // The reason says why.
                        (None, Some(_)) => c.name.clone(),
                        (None, None) => format!("{} (nothing measured)", c.name),
                    };
                    match &c.reason {
                        Some(r) => format!("{measured}: {r}"),
                        None => measured,
                    }
                })
                .collect();
            // An inconclusive probe is not a pass: too few requests completed to say.
            let what = match slo.label() {
                "INCONCLUSIVE" if slo.checks.iter().any(|c| c.too_few_requests()) => TOO_FEW_REASON,
                "INCONCLUSIVE" => INCONCLUSIVE_REASON,
                _ => "SLO missed",
            };
            return (
                false,
                Some(format!("{what}: {}", reasons.join(", "))),
                failed,
            );
        }
        (true, None, failed)
    }

    /// A value of the variable with its unit, for conclusions: `41.966 req/s`, or whole
    /// streams (`5 streams`).
    fn show(&self, value: f64) -> String {
        self.variable.show(value)
    }

    /// The conclusion at a failing value confirmed by a second run: "fails" only for
    /// runs that failed; runs whose SLO could not decide say so, once, with what they
    /// measured and what would decide.
    fn confirmed_at(&self, hi: f64) -> String {
        let runs: Vec<&Probe> = self
            .probes
            .iter()
            .filter(|p| p.rate == hi && !p.passed)
            .collect();
        let undecided: Vec<&str> = runs
            .iter()
            .filter(|p| p.inconclusive)
            .filter_map(|p| p.reason.as_deref())
            // The reason's own opening says "SLO inconclusive": said once, below.
            .map(|r| {
                r.trim_start_matches(INCONCLUSIVE_REASON)
                    .trim_start_matches(':')
                    .trim()
            })
            .collect();
        let passes = format!(
            "within {:.1}%: passes at {}",
            self.precision * 100.0,
            self.show(self.lo)
        );
        let at = self.show(hi);
        if undecided.is_empty() {
            format!("{passes}, fails at {at} (confirmed by a second run)")
        } else if undecided.len() == runs.len() {
            format!(
                "{passes}; the SLO is inconclusive at {at} in {} runs ({}): {} for a verdict there",
                runs.len(),
                undecided.join("; then "),
                self.remedy
            )
        } else {
            format!(
                "{passes}, fails at {at} in {} of {} runs, the rest inconclusive ({})",
                runs.len() - undecided.len(),
                runs.len(),
                undecided.join("; then ")
            )
        }
    }

    fn finish(
        &mut self,
        rate: Option<f64>,
        mut conclusion: String,
    ) -> Result<Option<Strategy>, CoordinatorError> {
        let server = rate.and_then(|r| self.server_at(r));
        if let (Some(load), Some(r)) = (server, rate) {
            conclusion = format!("{conclusion}; at {} {}", self.show(r), load.describe());
        }
        self.outcome = Some(Box::new(CapacityOutcome {
            rate,
            precision: self.precision,
            bracket: (self.lo, self.hi),
            conclusion,
            probes: self.probes.clone(),
            server,
            variable: self.variable,
            tiers: Vec::new(),
        }));
        Ok(None)
    }

    /// The load that runs the variable at `value`.
    fn load(&self, value: f64) -> Result<Option<Strategy>, CoordinatorError> {
        Ok(Some(match self.variable {
            SearchVariable::Rate => Strategy::Constant { rate: value },
            SearchVariable::Concurrency | SearchVariable::Users => Strategy::Concurrent {
                // Whole numbers by construction (see `step`).
                streams: value.round().clamp(1.0, f64::from(u32::MAX)) as u32,
            },
        }))
    }

    /// A probe that judged nothing of the server ends the search, its probe neither a
    /// pass nor a failure of an objective: the server was lost during it (every later
    /// probe would measure only its absence), or, of users, nothing measured (no turn
    /// completed or errored in the measured window) or the client was the bottleneck
    /// (what it measured is the client). The answer so far is then a lower bound.
    fn unjudged(
        &mut self,
        last: &BenchmarkResult,
    ) -> Option<Result<Option<Strategy>, CoordinatorError>> {
        let m = &last.measured_requests;
        let users = self.variable == SearchVariable::Users;
        let why = if let Some(lost) = &last.server_lost {
            let probe = self.probes.last()?;
            // The synchronous and throughput probes are named as run: their rate is what
            // they achieved, not a load the search chose.
            let name = match probe.strategy {
                Strategy::Synchronous | Strategy::Throughput { .. } => probe.strategy.to_string(),
                _ => format!("the probe at {}", self.show(probe.rate)),
            };
            // Lost in the throughput probe: the synchronous one, judged already, passed
            // at one request (or stream) at a time, a lower bound.
            if !users && self.probes.len() == 2 && self.probes[0].passed {
                if self.variable == SearchVariable::Concurrency {
                    self.probes[0].rate = 1.0;
                }
                self.lo = self.probes[0].rate;
            }
            // Not its reason: that quotes the server, and this line goes to the console.
            format!(
                "the server was lost at {:.1} s of {name}: no request sent from then on succeeded{}",
                lost.at_s,
                lost.since_before().unwrap_or_default()
            )
        } else if let Some(answered) = self.answered_above(last) {
            // A dead or hung server the lost rule could not call (too few requests, a
            // timeout, --max-errors): no load lower than one the server answered fails
            // everything, so a bisection on would only halve its way down.
            format!(
                "no request succeeded at {}, no more than {answered} where requests did: {STOPPED_ANSWERING}",
                self.show(self.probes.last()?.rate),
            )
        } else if let Some(refused) = self.refused_above(last) {
            // Above every load answered, an overloaded server still completes what its
            // slots hold, or holds requests until they time out or the stop cuts them.
            // One that failed every request at once is gone (or refuses this load
            // whole): a bisection on would measure only that, and report a boundary
            // between a load it answered and one it never saw.
            format!(
                "no request succeeded at {}, above {} where requests did, and none was held ({refused}): {STOPPED_ANSWERING}",
                self.show(self.probes.last()?.rate),
                self.show(self.answered_load),
            )
        } else if !users {
            return None;
        } else if m.completed + m.errored == 0 {
            format!(
                "nothing measured at {}: no turn completed or errored in the measured window; {}",
                self.show(self.probes.last()?.rate),
                self.remedy
            )
        } else if last.client.bottleneck {
            format!(
                "the client was the bottleneck at {} ({})",
                self.show(self.probes.last()?.rate),
                last.client.warnings.join("; ")
            )
        } else {
            return None;
        };
        let probe = self.probes.last_mut()?;
        probe.passed = false;
        probe.inconclusive = true;
        probe.failed.clear();
        probe.reason = Some(format!("{INCONCLUSIVE_REASON}: {why}"));
        let answer = (self.lo > 0.0).then_some(self.lo);
        let conclusion = match answer {
            Some(lo) => format!(
                "{why}; passes at {}, a lower bound: the search did not finish",
                self.show(lo)
            ),
            None => why,
        };
        Some(self.finish(answer, conclusion))
    }

    /// The load of an earlier probe where requests succeeded, shown, when `last` (the
    /// search's own load, not the synchronous or throughput probe's) completed nothing at
    /// no more than it.
    fn answered_above(&self, last: &BenchmarkResult) -> Option<String> {
        let chosen = chosen_load(last);
        let load = self.probes.last()?.rate;
        (chosen && last.requests.completed == 0 && load <= self.answered_load)
            .then(|| self.show(self.answered_load))
    }

    /// What became of the requests of `last` (the search's own load, above every load
    /// answered), shown, when it completed nothing and the server held none of them:
    /// each failed at once (no timeout among its errors) or was cut before it was sent.
    fn refused_above(&self, last: &BenchmarkResult) -> Option<String> {
        let chosen = chosen_load(last);
        let r = &last.requests;
        // A request cut before it was sent (still connecting to a gone or blackholed
        // server when the stop came) was never held: only one the server had is.
        let held = r.cancelled_sent > 0 || last.errors.iter().any(|e| e.kind == "timeout");
        let unsent = r.cancelled.saturating_sub(r.cancelled_sent);
        let tried = r.errored + unsent > 0;
        (chosen && self.answered_load > 0.0 && r.completed == 0 && tried && !held).then(|| {
            let mut fates: Vec<String> = last
                .errors
                .iter()
                .map(|e| format!("{} ×{}", e.kind, e.count))
                .collect();
            if unsent > 0 {
                fates.push(format!("cut before they were sent ×{unsent}"));
            }
            fates.join(", ")
        })
    }

    /// The value the search tries above `lo` when no failure is known yet.
    fn climb(&self) -> f64 {
        match self.variable {
            SearchVariable::Rate => self.lo * CAPACITY_GROWTH,
            SearchVariable::Concurrency => (self.lo * CAPACITY_GROWTH).ceil().max(self.lo + 1.0),
            // From one user, doubling: tens of thousands of users in a few steps.
            SearchVariable::Users => {
                let next = (self.lo * USERS_GROWTH).max(self.lo + 1.0);
                self.ceiling.map_or(next, |cap| next.min(cap))
            }
        }
    }

    /// Whether the bracket is as narrow as the search goes, and its midpoint otherwise.
    fn narrow(&self, hi: f64) -> Option<f64> {
        match self.variable {
            SearchVariable::Rate => {
                ((hi - self.lo) / hi > self.precision).then(|| (self.lo + hi) / 2.0)
            }
            // Streams are whole: no stream count lies between neighbours.
            SearchVariable::Concurrency | SearchVariable::Users => {
                ((hi - self.lo) / hi > self.precision && hi - self.lo > 1.0)
                    .then(|| ((self.lo + hi) / 2.0).floor())
            }
        }
    }

    /// Takes in the verdict of the probe at `rate`.
    fn learn(&mut self, rate: f64, passed: bool, retest: bool) {
        if passed {
            self.lo = self.lo.max(rate);
            if retest {
                // The first failure was noise: the boundary lies above.
                self.failures.retain(|&f| f != rate);
            }
        } else {
            if retest {
                self.confirmed.push(rate);
            }
            self.failures.push(rate);
        }
        let lo = self.lo;
        self.hi = self
            .failures
            .iter()
            .copied()
            .filter(|&f| f > lo)
            .min_by(f64::total_cmp);
    }

    /// Judges `last` and adds it to the probes (`retest`: the value being run again).
    fn record(&mut self, last: &BenchmarkResult, retest: Option<f64>) {
        self.remedy = remedy(last);
        let (passed, reason, failed) = self.verdict(last);
        let inconclusive = reason
            .as_deref()
            .is_some_and(|r| r.starts_with(INCONCLUSIVE_REASON));
        let rate = match (last.strategy, self.variable) {
            (Strategy::Constant { rate } | Strategy::Poisson { rate }, _) => rate,
            (
                Strategy::Concurrent { streams },
                SearchVariable::Concurrency | SearchVariable::Users,
            ) => f64::from(streams),
            _ => last.throughput.requests_per_s,
        };
        let undecided = r_undecided(last, &self.slo);
        if last.requests.completed > 0 {
            // The synchronous and throughput probes in streams where the variable is.
            let load = match (last.strategy, self.variable) {
                (Strategy::Synchronous, SearchVariable::Concurrency | SearchVariable::Users) => 1.0,
                (Strategy::Throughput { max_concurrency }, SearchVariable::Concurrency) => {
                    f64::from(max_concurrency)
                }
                _ => rate,
            };
            self.answered_load = self.answered_load.max(load);
        }
        self.probes.push(Probe {
            undecided,
            benchmark: last.index,
            strategy: last.strategy,
            rate,
            passed,
            reason,
            retest: retest.is_some(),
            server: ServerLoad::of(last),
            inconclusive,
            failed,
        });
    }

    /// Takes in a result the search did not ask for, after the run was interrupted: its
    /// verdict moves the bracket as a probe's would, but nothing is run next. A result
    /// cut short itself, or one that judged nothing of the server, moves nothing.
    fn absorb(&mut self, r: &BenchmarkResult) {
        self.record(r, None);
        let Some(probe) = self.probes.last_mut() else {
            return;
        };
        let m = &r.measured_requests;
        let unjudged = if r.interrupted {
            Some("interrupted before its end")
        } else if m.completed + m.errored == 0 {
            Some("nothing measured")
        } else if r.client.bottleneck {
            Some("the client was the bottleneck")
        } else {
            None
        };
        if let Some(why) = unjudged {
            probe.passed = false;
            probe.inconclusive = true;
            probe.failed.clear();
            probe.reason = Some(format!("{INCONCLUSIVE_REASON}: {why}"));
            return;
        }
        let too_few = probe
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with(TOO_FEW_REASON));
        if !too_few {
            let (rate, passed) = (probe.rate, probe.passed);
            self.learn(rate, passed, false);
        }
    }

    /// The answer of a search the run's interruption cut short, from what it took in:
    /// the most that passed, a lower bound.
    fn cut_short(&self) -> CapacityOutcome {
        let rate = (self.lo > 0.0).then_some(self.lo);
        let mut conclusion = match rate {
            Some(lo) => format!(
                "cut short by the interruption: passes at {}, a lower bound",
                self.show(lo)
            ),
            None => "cut short by the interruption before any probe passed".to_string(),
        };
        if let Some(hi) = self.hi {
            conclusion.push_str(&format!("; fails at {} (not confirmed)", self.show(hi)));
        }
        CapacityOutcome {
            conclusion,
            ..self.outcome()
        }
    }

    /// The load of benchmark `done.len()`, or `None` when the search is over.
    pub fn next(&mut self, done: &[BenchmarkResult]) -> Result<Option<Strategy>, CoordinatorError> {
        let i = done.len();
        let retest = self.retesting.take();
        if let Some(last) = done.last() {
            self.record(last, retest);
        }
        let users = self.variable == SearchVariable::Users;
        if let Some(stop) = done.last().and_then(|last| self.unjudged(last)) {
            return stop;
        }
        match i {
            // Users: from one user up, as the search climbs (no throughput benchmark:
            // a session's user is a closed loop already).
            0 if users => return self.load(1.0),
            1 if users && !self.probes[0].passed && !self.probes[0].inconclusive => {
                return self.finish(None, "even one user misses the SLO".into());
            }
            _ if users => {}
            0 => return Ok(Some(Strategy::Synchronous)),
            1 => {
                // Too few requests at one at a time to judge a percentile is no verdict:
                // the search goes on, with no passing rate known yet.
                if !self.probes[0].passed && !self.probes[0].inconclusive {
                    return self.finish(None, "even one request at a time misses the SLO".into());
                }
                return Ok(Some(Strategy::Throughput {
                    max_concurrency: self.throughput_concurrency,
                }));
            }
            2 => {
                let (sync, max) = endpoint_rates(done, self.fallback_tokens)?;
                self.estimates = Some(Box::new((sync.clone(), max.clone())));
                if self.variable == SearchVariable::Concurrency {
                    // One stream, then the throughput benchmark's streams: both are
                    // probes of the variable, judged as they are.
                    self.probes[0].rate = 1.0;
                    if self.probes[0].passed {
                        self.lo = 1.0;
                    }
                    let streams = match done[1].strategy {
                        Strategy::Throughput { max_concurrency } => max_concurrency,
                        _ => self.throughput_concurrency,
                    };
                    self.probes[1].rate = f64::from(streams);
                    // Falls through to the bisection below, from the throughput probe.
                } else {
                    // The measured maximum is where the search starts, not a bound: a
                    // short throughput benchmark can understate what the server sustains.
                    if self.probes[0].passed {
                        self.lo = sync.requests_per_s;
                    }
                    self.probes[0].rate = sync.requests_per_s;
                    self.probes[1].rate = max.requests_per_s;
                    let first = if max.requests_per_s > self.lo {
                        max.requests_per_s
                    } else {
                        self.lo * CAPACITY_GROWTH
                    };
                    return self.load(first);
                }
            }
            _ => {}
        }
        let Some(probe) = self.probes.last().cloned() else {
            return Ok(None);
        };
        // A probe with too few requests to bound its SLO is neither a pass nor a failure
        // to bisect on: at this duration the search cannot judge loads that low. One whose
        // bounds straddle the threshold is bisected on as a failure below: the answer must
        // be a rate that passed with confidence.
        if probe
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with(TOO_FEW_REASON))
        {
            return self.finish(
                (self.lo > 0.0).then_some(self.lo),
                format!(
                    "inconclusive at {}: too few requests completed to judge the SLO ({}); {}",
                    self.show(probe.rate),
                    // The reason's own opening says "inconclusive (too few requests)" again.
                    probe
                        .reason
                        .as_deref()
                        .unwrap_or_default()
                        .trim_start_matches(TOO_FEW_REASON)
                        .trim_start_matches(':')
                        .trim(),
                    self.remedy
                ),
            );
        }
        self.learn(probe.rate, probe.passed, probe.retest);
        if i >= CAPACITY_MAX_BENCHMARKS {
            return self.finish(
                (self.lo > 0.0).then_some(self.lo),
                format!("stopped after {i} benchmarks, the most a search runs"),
            );
        }
        let Some(hi) = self.hi else {
            if self.variable == SearchVariable::Users
                && let Some(cap) = self.ceiling.filter(|&cap| self.lo >= cap)
            {
                return self.finish(
                    Some(self.lo),
                    format!(
                        "the SLO still holds at {}, the most --max-concurrency {cap} lets run at once: a lower bound, bounded by the cap (raise or drop --max-concurrency to search higher)",
                        self.show(self.lo)
                    ),
                );
            }
            // No failure above the best pass yet: keep climbing.
            let most = match self.variable {
                SearchVariable::Users => USERS_MAX_GROWTH_STEPS,
                _ => CAPACITY_MAX_GROWTH_STEPS,
            };
            if self.growth_steps >= most {
                return self.finish(
                    Some(self.lo),
                    format!(
                        "the SLO still holds at {}, the highest {} tried",
                        self.show(self.lo),
                        match self.variable {
                            SearchVariable::Rate => "rate",
                            SearchVariable::Concurrency => "concurrency",
                            SearchVariable::Users => "user count",
                        }
                    ),
                );
            }
            self.growth_steps += 1;
            return self.load(self.climb());
        };
        match self.narrow(hi) {
            Some(mid) => self.load(mid),
            None if self.confirmed.contains(&hi) => {
                let conclusion = self.confirmed_at(hi);
                self.finish(Some(self.lo), conclusion)
            }
            None => {
                self.retesting = Some(hi);
                self.load(hi)
            }
        }
    }

    /// Records on the synchronous and throughput results the rates the search took.
    pub fn annotate(&self, done: &mut [BenchmarkResult]) {
        if let Some((sync, max)) = self.estimates.as_deref() {
            for (r, e) in done.iter_mut().zip([sync, max]) {
                r.rate_estimate = Some(e.clone());
            }
        }
    }
}

/// One tier's search inside a [`TieredSearch`].
#[derive(Clone, Debug)]
struct TierState {
    /// `None`: the run's own `--slo`, whose verdicts the results already carry.
    name: Option<String>,
    objectives: Vec<String>,
    search: CapacitySearch,
    /// The results this tier's search has read, in order (its `done`).
    view: Vec<BenchmarkResult>,
    /// Indices into the run's results of `view`.
    read: Vec<usize>,
    /// The load the search asked for and has not read yet.
    pending: Option<Strategy>,
}

/// The capacity search of several SLO tiers over one shared set of probes: each tier
/// runs its own [`CapacitySearch`] in turn, and a load a tier asks for that the run has
/// already measured is read, not run again: the n-th time a tier asks for a load it
/// reads that load's n-th run, so a retest is a second measurement, shared like the
/// first. Every tier's boundary is bisected to the precision and confirmed.
#[derive(Debug)]
pub struct TieredSearch {
    tiers: Vec<TierState>,
    current: usize,
}

impl TieredSearch {
    /// A search of `slo` alone (the result's own verdicts judge it), or of each tier.
    pub fn new(
        slo: Slo,
        tiers: Vec<SloTier>,
        variable: SearchVariable,
        new_search: impl Fn(Slo) -> CapacitySearch,
    ) -> Self {
        let names = |slo: &Slo| slo.checks.iter().map(|c| c.name.clone()).collect();
        let tiers = if tiers.is_empty() {
            vec![(None, slo)]
        } else {
            tiers.into_iter().map(|t| (Some(t.name), t.slo)).collect()
        };
        Self {
            tiers: tiers
                .into_iter()
                .map(|(name, slo)| TierState {
                    name,
                    objectives: names(&slo),
                    search: new_search(slo).over(variable),
                    view: Vec::new(),
                    read: Vec::new(),
                    pending: None,
                })
                .collect(),
            current: 0,
        }
    }

    /// The load of benchmark `done.len()`, or `None` when every tier's search is over.
    pub fn next(&mut self, done: &[BenchmarkResult]) -> Result<Option<Strategy>, CoordinatorError> {
        loop {
            let Some(t) = self.tiers.get_mut(self.current) else {
                return Ok(None);
            };
            if let Some(load) = t.pending {
                let nth = t.read.iter().filter(|&&i| done[i].strategy == load).count();
                let Some(i) = (0..done.len())
                    .filter(|&i| done[i].strategy == load)
                    .nth(nth)
                else {
                    return Ok(Some(load));
                };
                let mut r = done[i].clone();
                if t.name.is_some() {
                    // Judged by the tier's objectives, not by the run's --slo.
                    r.slo = None;
                }
                t.view.push(r);
                t.read.push(i);
                t.pending = None;
            }
            match t.search.next(&t.view)? {
                Some(load) => t.pending = Some(load),
                None => self.current += 1,
            }
        }
    }

    /// The answer: the single search's, or with tiers each tier's (also after an
    /// interruption: the brackets so far).
    pub fn outcome(&self) -> CapacityOutcome {
        self.outcome_after(&[])
    }

    /// The answer once the run measured `done`. A tier whose search an interruption cut
    /// short takes in every result of `done` it had not read (the probes other tiers
    /// asked for, the last one measured): its answer is the most those passed, a lower
    /// bound, never "none" when a probe passed it.
    pub fn outcome_after(&self, done: &[BenchmarkResult]) -> CapacityOutcome {
        let first = self.tiers[0].search.outcome();
        if self.tiers[0].name.is_none() {
            return first;
        }
        let tiers: Vec<TierOutcome> = self
            .tiers
            .iter()
            .map(|t| match t.search.outcome {
                Some(_) => t.outcome(),
                None => t.cut_short(done),
            })
            .collect();
        let conclusion = tiers
            .iter()
            .map(|t| {
                let answer = t.answer(first.variable);
                match &t.binding {
                    Some(b) => format!("{}: {answer} (bound by {b})", t.name),
                    None => format!("{}: {answer}", t.name),
                }
            })
            .collect::<Vec<_>>()
            .join("; ");
        // Every benchmark once, with the tiers' verdicts on it.
        let mut probes: Vec<Probe> = Vec::new();
        for t in &tiers {
            for p in &t.probes {
                match probes.iter_mut().find(|q| q.benchmark == p.benchmark) {
                    Some(q) => {
                        q.passed &= p.passed;
                        q.retest |= p.retest;
                        q.failed
                            .extend(p.failed.iter().map(|f| format!("{}: {f}", t.name)));
                        q.undecided
                            .extend(p.undecided.iter().map(|f| format!("{}: {f}", t.name)));
                    }
                    None => {
                        let mut q = p.clone();
                        let named = |v: &[String]| -> Vec<String> {
                            v.iter().map(|f| format!("{}: {f}", t.name)).collect()
                        };
                        q.failed = named(&p.failed);
                        q.undecided = named(&p.undecided);
                        q.reason = None;
                        probes.push(q);
                    }
                }
            }
        }
        for q in &mut probes {
            // Not a pass, and no tier's objective failed there: no tier could decide.
            q.inconclusive = !q.passed && q.failed.is_empty();
        }
        probes.sort_by_key(|p| p.benchmark);
        CapacityOutcome {
            rate: None,
            bracket: (0.0, None),
            conclusion,
            probes,
            server: None,
            tiers,
            ..first
        }
    }

    /// Records on the results what the first search took from them.
    pub fn annotate(&self, done: &mut [BenchmarkResult]) {
        self.tiers[0].search.annotate(done);
    }
}

impl TierState {
    /// Its outcome after the interruption (see [`TieredSearch::outcome_after`]).
    fn cut_short(&self, done: &[BenchmarkResult]) -> TierOutcome {
        let mut t = self.clone();
        for (i, r) in done.iter().enumerate() {
            if t.read.contains(&i) {
                continue;
            }
            let mut r = r.clone();
            // Judged by the tier's objectives, not by the run's --slo.
            r.slo = None;
            t.search.absorb(&r);
            t.read.push(i);
        }
        TierOutcome {
            cut_short: true,
            ..t.outcome_of(t.search.cut_short())
        }
    }

    fn outcome(&self) -> TierOutcome {
        self.outcome_of(self.search.outcome())
    }

    fn outcome_of(&self, o: CapacityOutcome) -> TierOutcome {
        let (_, hi) = o.bracket;
        // Runs that could not decide are not failures: not counted, never binding.
        let failing: Vec<&Probe> = o
            .probes
            .iter()
            .filter(|p| Some(p.rate) == hi && !p.passed && !p.inconclusive)
            .collect();
        TierOutcome {
            name: self.name.clone().unwrap_or_default(),
            objectives: self.objectives.clone(),
            value: o.rate,
            bracket: o.bracket,
            binding: failing.first().and_then(|p| p.failed.first().cloned()),
            failing_runs: u32::try_from(failing.len()).unwrap_or(u32::MAX),
            conclusion: o.conclusion,
            probes: o.probes,
            cut_short: false,
        }
    }
}

/// Bisection for the highest constant rate (or, over sessions, the most concurrent
/// users) meeting an SLO or each of several tiers ([`TieredSearch`]), each load a plan
/// of the run.
#[derive(Debug)]
pub struct CapacityProfile {
    template: PlanTemplate,
    search: TieredSearch,
}

impl CapacityProfile {
    /// A search to `precision` (e.g. 0.05) for the highest rate meeting `slo`.
    pub fn new(
        template: PlanTemplate,
        slo: Slo,
        precision: f64,
        throughput_concurrency: u32,
    ) -> Self {
        Self::tiered(
            template,
            slo,
            Vec::new(),
            SearchVariable::Rate,
            precision,
            throughput_concurrency,
        )
    }

    /// A search of `variable` for `slo`, or with `tiers` for each tier's answer.
    pub fn tiered(
        template: PlanTemplate,
        slo: Slo,
        tiers: Vec<SloTier>,
        variable: SearchVariable,
        precision: f64,
        throughput_concurrency: u32,
    ) -> Self {
        let fallback = template.synthetic_output_tokens();
        // Users who think hold no request while they think: more of them than the cap
        // may all be served, so only a search of users who never pause stops at it.
        let cap = template
            .base
            .max_concurrency
            .filter(|_| !template.base.users_think());
        Self {
            template,
            search: TieredSearch::new(slo, tiers, variable, |slo| {
                CapacitySearch::new(slo, precision, throughput_concurrency, fallback).capped(cap)
            }),
        }
    }

    /// The answer, once the run is over (also after an interruption: the bracket so far).
    pub fn outcome(&self) -> CapacityOutcome {
        self.search.outcome()
    }

    /// The answer once the run measured `done` (see [`TieredSearch::outcome_after`]).
    pub fn outcome_after(&self, done: &[BenchmarkResult]) -> CapacityOutcome {
        self.search.outcome_after(done)
    }
}

impl Profile for CapacityProfile {
    fn next(
        &mut self,
        done: &[BenchmarkResult],
    ) -> Result<Option<BenchmarkPlan>, CoordinatorError> {
        Ok(self
            .search
            .next(done)?
            .map(|s| self.template.plan(done.len(), s)))
    }

    fn annotate(&self, done: &mut [BenchmarkResult]) {
        self.search.annotate(done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_rates_are_evenly_spaced_between_the_endpoints() {
        let rates = SweepProfile::rates_between(2.0, 20.0, 10);
        assert_eq!(rates.len(), 8);
        for (k, r) in rates.iter().enumerate() {
            assert!((r - (2.0 + (k + 1) as f64 * 2.0)).abs() < 1e-9, "{rates:?}");
        }
        assert!(SweepProfile::rates_between(1.0, 3.0, 2).is_empty());
    }
}

#[cfg(test)]
mod capacity_tests {
    use super::*;
    use crate::constraints::Limits;
    use crate::group::OnWorkerFailure;
    use crate::result::tests_support::empty_result;
    use crate::slo::SloVerdict;
    use crate::strategy::StrategySettings;
    use llmsurge_proto::{
        BackendConfig, DataSpec, RequestFormat, Schedule, SyntheticSpec, WorkerConfig,
    };
    use std::time::Duration;

    fn template() -> PlanTemplate {
        let worker_template = WorkerConfig {
            worker_id: 0,
            worker_count: 1,
            seed: 1,
            backend: BackendConfig {
                base_url: "http://127.0.0.1:1".into(),
                request_format: RequestFormat::Chat,
                model: "m".into(),
                stream: true,
                api_key: None,
                headers: vec![],
                params: vec![],
                extra_body: Default::default(),
                http2: false,
                http2_streams: 1,
                request_timeout: Duration::from_secs(1),
                connect_timeout: Duration::from_secs(1),
                tls: Default::default(),
                ttft_timeout: None,
                idle_timeout: None,
                ignore_eos: false,
                traceparent: false,
                min_tokens: false,
                session_header: None,
                tools: 0,
                request_id: None,
                affinity: Default::default(),
            },
            schedule: Schedule::Streams {
                streams: 1,
                rampup: Duration::ZERO,
            },
            data: DataSpec::Synthetic(SyntheticSpec {
                prompt_tokens: 1,
                prompt_tokens_stdev: 0,
                prompt_tokens_min: None,
                prompt_tokens_max: None,
                output_tokens: 1,
                output_tokens_stdev: 0,
                output_tokens_min: None,
                output_tokens_max: None,
                range_ratio: None,
                prefix_tokens: 0,
                prefix_count: 1,
                samples: None,
                random_seed: 1,
                source: None,
                tokenizer: llmsurge_proto::TokenizerRef::Builtin("cl100k_base".into()),
                sampling: Default::default(),
                batch_size: 0,
                documents: 0,
                media: Default::default(),
                turns: 0,
                think_time: None,
                session_user: false,
                session_header: None,
                system_tokens: 0,
                system_shared: false,
                tools: 0,
                tool_result_tokens: 0,
            }),
            window: Default::default(),
            flush_interval: Duration::from_millis(20),
            shard: Default::default(),
            lora: None,
            behaviour: Default::default(),
        };
        PlanTemplate {
            base: BenchmarkPlan {
                index: 0,
                strategy: Strategy::Synchronous,
                settings: StrategySettings::default(),
                limits: Limits::default(),
                workers: 1,
                max_concurrency: None,
                dataset_len: None,
                window: Default::default(),
                worker_template,
                drain_timeout: Duration::from_secs(1),
                worker_timeout: crate::group::DEFAULT_WORKER_TIMEOUT,
                on_worker_failure: OnWorkerFailure::Stop,
                dispatch_lag_threshold: Duration::from_millis(10),
                max_short_output_share: None,
                slo: None,
                goodput: None,
                saturation: None,
                shard: Default::default(),
                server_metrics: None,
                profile_server: None,
                cache_reset: None,
                gpu_metrics: None,
                precision: None,
                agent_names: None,
            },
            workers: None,
            cores: 2,
        }
    }

    /// Runs a capacity search against a simulated server that does `sync_rate` one
    /// request at a time and shows `max_rate` in the throughput benchmark; `passes(rate,
    /// n)` says whether the n-th run (from 1) of a constant `rate` meets the SLO.
    fn search_with(
        sync_rate: f64,
        max_rate: f64,
        mut passes: impl FnMut(f64, usize) -> bool,
    ) -> (CapacityOutcome, Vec<Strategy>) {
        let mut profile = CapacityProfile::new(template(), Slo::default(), 0.05, 64);
        let mut done: Vec<BenchmarkResult> = Vec::new();
        while let Some(plan) = profile.next(&done).expect("next") {
            assert!(
                done.len() < 25,
                "the search must end: {:?}",
                profile.search.tiers[0].search.probes
            );
            let mut r = empty_result();
            r.index = plan.index;
            r.strategy = plan.strategy;
            let (achieved, passed) = match plan.strategy {
                Strategy::Synchronous => (sync_rate, true),
                Strategy::Throughput { .. } => (max_rate, false),
                Strategy::Constant { rate } => {
                    let n = done
                        .iter()
                        .filter(|d| d.strategy == Strategy::Constant { rate })
                        .count();
                    (rate, passes(rate, n + 1))
                }
                other => panic!("unexpected {other:?}"),
            };
            r.throughput.requests_per_s = achieved;
            r.slo = Some(SloVerdict {
                passed,
                checks: vec![],
                not_kept_up: None,
            });
            done.push(r);
        }
        let mut annotated = done.clone();
        profile.annotate(&mut annotated);
        assert!(annotated[0].rate_estimate.is_some() || done.len() < 3);
        (profile.outcome(), done.iter().map(|r| r.strategy).collect())
    }

    /// A server that meets the SLO at constant rates up to `capacity`, every time.
    fn search(capacity: f64, sync_rate: f64, max_rate: f64) -> (CapacityOutcome, Vec<Strategy>) {
        search_with(sync_rate, max_rate, |rate, _| rate <= capacity)
    }

    fn rates(strategies: &[Strategy]) -> Vec<f64> {
        strategies
            .iter()
            .filter_map(|s| match s {
                Strategy::Constant { rate } => Some(*rate),
                _ => None,
            })
            .collect()
    }

    /// A user search of two tiers against a simulated server whose request rate is
    /// `100 − users` (a stand-in for a speed that falls with load): "fast" needs 90 (up
    /// to 10 users), "slow" 70 (up to 30). Returns the outcome and every load run.
    fn search_tiers() -> (CapacityOutcome, Vec<Strategy>) {
        let tier = |name: &str, spec: &str| SloTier {
            name: name.into(),
            slo: Slo::parse(spec).expect("parses"),
        };
        let tiers = vec![
            tier("fast", "error_rate<=1%,requests_per_s>=90"),
            tier("slow", "error_rate<=1%,requests_per_s>=70"),
        ];
        let mut search = TieredSearch::new(Slo::default(), tiers, SearchVariable::Users, |slo| {
            CapacitySearch::new(slo, 0.05, 64, None)
        });
        let mut done: Vec<BenchmarkResult> = Vec::new();
        while let Some(strategy) = search.next(&done).expect("next") {
            assert!(done.len() < 40, "the search must end: {done:?}");
            let Strategy::Concurrent { streams } = strategy else {
                panic!("a user search runs concurrent users, not {strategy:?}");
            };
            let mut r = empty_result();
            r.index = done.len() as u32;
            r.strategy = strategy;
            r.measured_requests.completed = 100;
            r.throughput.requests_per_s = 100.0 - f64::from(streams);
            // The run's own verdict (none here) never judges a tier.
            r.slo = Some(SloVerdict {
                passed: true,
                checks: vec![],
                not_kept_up: None,
            });
            done.push(r);
        }
        (search.outcome(), done.iter().map(|r| r.strategy).collect())
    }

    /// A one-tier user search ("t": `error_rate<=100%`, which every measured probe
    /// meets) over results `at(users)` gives: its outcome and the user counts run.
    fn search_users(at: impl Fn(u32) -> BenchmarkResult) -> (TierOutcome, Vec<u32>) {
        search_users_for("error_rate<=100%", at)
    }

    /// As [`search_users`], with the tier's objectives `spec`.
    fn search_users_for(
        spec: &str,
        at: impl Fn(u32) -> BenchmarkResult,
    ) -> (TierOutcome, Vec<u32>) {
        let tiers = vec![SloTier {
            name: "t".into(),
            slo: Slo::parse(spec).expect("parses"),
        }];
        let mut search = TieredSearch::new(Slo::default(), tiers, SearchVariable::Users, |slo| {
            CapacitySearch::new(slo, 0.05, 64, None)
        });
        let mut done: Vec<BenchmarkResult> = Vec::new();
        let mut users = Vec::new();
        while let Some(strategy) = search.next(&done).expect("next") {
            assert!(done.len() < 40, "the search must end: {users:?}");
            let Strategy::Concurrent { streams } = strategy else {
                panic!("a user search runs concurrent users, not {strategy:?}");
            };
            let mut r = at(streams);
            r.index = done.len() as u32;
            r.strategy = strategy;
            users.push(streams);
            done.push(r);
        }
        (search.outcome().tiers.remove(0), users)
    }

    /// A result of `users` users whose measured turns all completed (`completed` of them).
    fn served(completed: u64) -> BenchmarkResult {
        let mut r = empty_result();
        r.measured_requests.completed = completed;
        r
    }

    #[test]
    fn a_user_probe_that_measured_nothing_ends_the_search_as_inconclusive() {
        // Up to 32 users every probe completes turns; from 64 none completes or errors.
        let (t, users) = search_users(|u| served(if u < 64 { 100 } else { 0 }));
        assert_eq!(users.last(), Some(&64), "the search stops there: {users:?}");
        assert_eq!(t.value, Some(32.0), "{t:#?}");
        assert_eq!(t.binding, None, "no objective failed: {t:#?}");
        assert!(
            t.conclusion.contains("nothing measured at 64 users")
                && t.conclusion.contains("lower bound"),
            "{t:#?}"
        );
        let last = t.probes.last().expect("probes");
        assert!(
            !last.passed && last.inconclusive && last.failed.is_empty(),
            "{last:?}"
        );
    }

    #[test]
    fn an_undecided_objective_is_not_listed_as_failed_nor_confirmed() {
        // Every probe measured 3 TTFTs: too few for a p99, the check cannot decide.
        let (t, _) = search_users_for("error_rate<=100%,ttft_p99<=1s", |_| {
            let mut r = served(3);
            let d = &mut r.metrics.entry("ttft".into()).or_default().successful;
            d.count = 3;
            d.mean = 100.0;
            d.percentiles.p99 = 100.0;
            r
        });
        assert!(t.probes.iter().any(|p| !p.passed), "{t:#?}");
        for p in t.probes.iter().filter(|p| !p.passed) {
            assert!(p.failed.is_empty(), "{p:?}");
            assert_eq!(p.undecided, ["ttft_p99<=1s"], "{p:?}");
            assert!(p.inconclusive, "{p:?}");
        }
        assert_eq!((t.binding.as_deref(), t.failing_runs), (None, 0), "{t:#?}");
    }

    #[test]
    fn a_probe_that_lost_the_server_ends_a_rate_search_with_a_lower_bound() {
        // Every probe meets the SLO; the first constant rate above 100 req/s lost the
        // server. Before, the search climbed on against the dead server.
        let mut profile = CapacityProfile::new(template(), Slo::default(), 0.05, 64);
        let mut done: Vec<BenchmarkResult> = Vec::new();
        while let Some(plan) = profile.next(&done).expect("next") {
            assert!(done.len() < 25, "the search must end");
            let mut r = empty_result();
            r.index = plan.index;
            r.strategy = plan.strategy;
            r.throughput.requests_per_s = match plan.strategy {
                Strategy::Synchronous => 10.0,
                Strategy::Throughput { .. } => 100.0,
                Strategy::Constant { rate } => rate,
                other => panic!("unexpected {other:?}"),
            };
            r.slo = Some(SloVerdict {
                passed: true,
                checks: vec![],
                not_kept_up: None,
            });
            if matches!(plan.strategy, Strategy::Constant { rate } if rate > 100.0) {
                r.server_lost = Some(crate::error_tail::ServerLost {
                    at_s: 1.5,
                    last_success_s: 1.4,
                    errored: 30,
                    span_s: 2.0,
                    reason: "connect: refused".into(),
                });
            }
            done.push(r);
        }
        let lost = done.last().expect("probes");
        assert!(
            lost.server_lost.is_some(),
            "nothing runs after it: {done:?}"
        );
        let passed: Vec<f64> = rates(&done.iter().map(|r| r.strategy).collect::<Vec<_>>())
            .into_iter()
            .filter(|&r| r <= 100.0)
            .collect();
        let o = profile.outcome();
        assert_eq!(o.rate, passed.last().copied(), "{o:#?}");
        assert!(
            o.conclusion
                .contains("the server was lost at 1.5 s of the probe at")
                && o.conclusion.contains("a lower bound"),
            "{o:#?}"
        );
        let probe = o.probes.last().expect("probes");
        assert!(probe.inconclusive && !probe.passed, "{probe:?}");
    }

    #[test]
    fn a_probe_that_completes_nothing_below_a_load_the_server_answered_ends_the_search() {
        // The server died after the throughput probe (100 req/s completed), and the
        // lost rule could not call it (probes cut by --max-errors, or of too few
        // requests): the first constant probe, at 100 req/s, completed nothing. Before,
        // the search bisected down against the dead server and reported a capacity
        // "confirmed by a second run".
        let mut profile = CapacityProfile::new(template(), Slo::default(), 0.05, 64);
        let mut done: Vec<BenchmarkResult> = Vec::new();
        while let Some(plan) = profile.next(&done).expect("next") {
            assert!(done.len() < 3, "nothing after the dead probe: {done:?}");
            let mut r = empty_result();
            r.index = plan.index;
            r.strategy = plan.strategy;
            let alive = !matches!(plan.strategy, Strategy::Constant { .. });
            r.throughput.requests_per_s = match plan.strategy {
                Strategy::Synchronous => 10.0,
                Strategy::Throughput { .. } => 100.0,
                _ => 0.0,
            };
            r.requests.completed = if alive { 50 } else { 0 };
            r.requests.errored = if alive { 0 } else { 5 };
            r.slo = Some(SloVerdict {
                passed: alive,
                checks: vec![],
                not_kept_up: None,
            });
            done.push(r);
        }
        let o = profile.outcome();
        assert_eq!(o.rate, Some(10.0), "{o:#?}");
        assert!(
            o.conclusion.starts_with(
                "no request succeeded at 100.000 req/s, no more than 100.000 req/s where requests did: the server stopped answering; passes at 10.000 req/s, a lower bound"
            ),
            "{o:#?}"
        );
        let probe = o.probes.last().expect("probes");
        assert!(probe.inconclusive && !probe.passed, "{probe:?}");
    }

    /// A search where the server dies once the probes climb above 100 req/s: below, each
    /// completes 50 and passes; above, each fails its 5 requests with `errors`, and the
    /// stop cuts `cancelled` more, `sent` of them after they were sent.
    fn search_into_a_dead_server(
        errors: Vec<crate::result::ErrorEntry>,
        (cancelled, sent): (u64, u64),
    ) -> (CapacityOutcome, usize) {
        let mut profile = CapacityProfile::new(template(), Slo::default(), 0.05, 64);
        let mut done: Vec<BenchmarkResult> = Vec::new();
        while let Some(plan) = profile.next(&done).expect("next") {
            assert!(done.len() < 30, "{done:?}");
            let mut r = empty_result();
            r.index = plan.index;
            r.strategy = plan.strategy;
            let alive = match plan.strategy {
                Strategy::Constant { rate } => rate <= 100.0,
                _ => true,
            };
            r.throughput.requests_per_s = match plan.strategy {
                Strategy::Synchronous => 10.0,
                Strategy::Throughput { .. } => 100.0,
                Strategy::Constant { rate } if alive => rate,
                _ => 0.0,
            };
            r.requests.completed = if alive { 50 } else { 0 };
            r.requests.errored = if alive {
                0
            } else {
                errors.iter().map(|e| e.count).sum()
            };
            if !alive {
                r.errors = errors.clone();
                r.requests.cancelled = cancelled;
                r.requests.cancelled_sent = sent;
            }
            r.slo = Some(SloVerdict {
                passed: alive,
                checks: vec![],
                not_kept_up: None,
            });
            done.push(r);
        }
        (profile.outcome(), done.len())
    }

    #[test]
    fn a_probe_above_every_answered_load_that_failed_every_request_at_once_ends_the_search() {
        // The server died as the search climbed past 100 req/s, and the lost rule could
        // not call it (5 requests). Before, the search bisected between 100 and 150
        // against the dead server and reported a boundary "within 5%" it never measured.
        let refused = vec![crate::result::ErrorEntry {
            kind: "connect".into(),
            count: 5,
            samples: vec![],
        }];
        let (o, ran) = search_into_a_dead_server(refused.clone(), (0, 0));
        assert_eq!(ran, 4, "sync, throughput, 100, then the dead 150: {o:#?}");
        assert_eq!(o.rate, Some(100.0), "{o:#?}");
        assert!(
            o.conclusion.starts_with(
                "no request succeeded at 150.000 req/s, above 100.000 req/s where requests did, and none was held (connect ×5): the server stopped answering; passes at 100.000 req/s, a lower bound"
            ),
            "{o:#?}"
        );
        assert!(o.probes.last().is_some_and(|p| p.inconclusive));
        // A server that held them until they timed out is overloaded, not gone: the
        // search bisects on.
        let held = vec![crate::result::ErrorEntry {
            kind: "timeout".into(),
            count: 5,
            samples: vec![],
        }];
        let (o, ran) = search_into_a_dead_server(held, (0, 0));
        assert!(ran > 4, "{o:#?}");
        assert!(!o.conclusion.contains("stopped answering"), "{o:#?}");
        // Streams hammering the gone server are mostly connecting when the stop comes:
        // requests cut before they were sent were never held, and the search ends.
        let (o, ran) = search_into_a_dead_server(refused.clone(), (3, 0));
        assert_eq!(ran, 4, "{o:#?}");
        assert!(o.conclusion.contains("stopped answering"), "{o:#?}");
        assert!(o.stopped_answering(), "{o:#?}");
        // One the server had when the stop cut it was held: it bisects on.
        let (o, ran) = search_into_a_dead_server(refused, (3, 1));
        assert!(ran > 4, "{o:#?}");
        assert!(!o.conclusion.contains("stopped answering"), "{o:#?}");
        assert!(!o.stopped_answering(), "{o:#?}");
        // Connects longer than the probe: nothing errs, every request is cut before it
        // was sent, and none was held either.
        let (o, ran) = search_into_a_dead_server(vec![], (5, 0));
        assert_eq!(ran, 4, "{o:#?}");
        assert!(
            o.conclusion.contains(
                "none was held (cut before they were sent ×5): the server stopped answering"
            ),
            "{o:#?}"
        );
    }

    #[test]
    fn a_throughput_probe_that_lost_the_server_names_it_and_keeps_the_synchronous_pass() {
        // The synchronous probe met the SLO at 10 req/s; the server died in the
        // throughput probe. Before, the answer was none and the probe was named by the
        // rate it achieved against a dead server.
        let mut profile = CapacityProfile::new(template(), Slo::default(), 0.05, 64);
        let mut done: Vec<BenchmarkResult> = Vec::new();
        while let Some(plan) = profile.next(&done).expect("next") {
            assert!(done.len() < 2, "nothing after the lost probe: {done:?}");
            let mut r = empty_result();
            r.index = plan.index;
            r.strategy = plan.strategy;
            r.throughput.requests_per_s = 10.0;
            r.slo = Some(SloVerdict {
                passed: true,
                checks: vec![],
                not_kept_up: None,
            });
            if matches!(plan.strategy, Strategy::Throughput { .. }) {
                r.throughput.requests_per_s = 3.0;
                r.server_lost = Some(crate::error_tail::ServerLost {
                    at_s: 0.5,
                    last_success_s: 0.4,
                    errored: 30,
                    span_s: 2.0,
                    reason: "connect: refused".into(),
                });
            }
            done.push(r);
        }
        let o = profile.outcome();
        assert_eq!(o.rate, Some(10.0), "{o:#?}");
        assert!(
            o.conclusion
                .starts_with("the server was lost at 0.5 s of throughput@64: ")
                && o.conclusion
                    .contains("passes at 10.000 req/s, a lower bound"),
            "{o:#?}"
        );
    }

    #[test]
    fn a_client_bound_user_probe_ends_the_search_naming_the_client() {
        let (t, users) = search_users(|u| {
            let mut r = served(100);
            r.client.bottleneck = u >= 16;
            r.client.warnings = vec!["runtime delay p99 20 ms exceeds 10 ms".into()];
            r
        });
        assert_eq!(users.last(), Some(&16), "{users:?}");
        assert_eq!((t.value, t.binding.as_deref()), (Some(8.0), None), "{t:#?}");
        assert!(
            t.conclusion
                .contains("the client was the bottleneck at 16 users (runtime delay"),
            "{t:#?}"
        );
    }

    #[test]
    fn users_the_server_left_unanswered_fail_on_kept_up() {
        // Each probe answered 100 turns; the stop cut `users − 40` unanswered: from 141
        // users more were cut than answered.
        let (t, _) = search_users(|u| {
            let mut r = served(100);
            r.unanswered = Some(crate::intent_drift::Unanswered {
                cut: u64::from(u.saturating_sub(40)),
                passed: 0,
                answered: 100,
                answered_median_ms: 10.0,
                overdue_after_ms: 1000.0,
                overdue: 0,
                oldest_ms: 500.0,
                overdue_unsent: 0,
            });
            r
        });
        assert_eq!(t.binding.as_deref(), Some("kept_up"), "{t:#?}");
        let v = t.value.expect("an answer");
        assert!((133.0..=140.0).contains(&v), "within 5% of 140: {t:#?}");
    }

    #[test]
    fn each_tier_gets_its_most_users_and_binding_objective_from_shared_probes() {
        let (outcome, loads) = search_tiers();
        let users: Vec<u32> = loads
            .iter()
            .map(|s| match s {
                Strategy::Concurrent { streams } => *streams,
                _ => 0,
            })
            .collect();
        assert_eq!(users[0], 1, "from one user up: {users:?}");
        assert_eq!(outcome.variable, SearchVariable::Users);
        assert_eq!(outcome.rate, None);
        let answers: Vec<_> = outcome
            .tiers
            .iter()
            .map(|t| {
                (
                    t.name.as_str(),
                    t.value,
                    t.bracket.1,
                    t.binding.as_deref(),
                    t.failing_runs,
                )
            })
            .collect();
        assert_eq!(
            answers,
            vec![
                (
                    "fast",
                    Some(10.0),
                    Some(11.0),
                    Some("requests_per_s>=90"),
                    2
                ),
                (
                    "slow",
                    Some(30.0),
                    Some(31.0),
                    Some("requests_per_s>=70"),
                    2
                ),
            ],
            "{outcome:#?}"
        );
        // Shared: a load the first tier measured is read by the second, not run again;
        // only a confirmation is a second run.
        for u in [1, 2, 4, 8, 16] {
            assert_eq!(users.iter().filter(|&&x| x == u).count(), 1, "{users:?}");
        }
        assert!(
            users
                .iter()
                .all(|u| users.iter().filter(|&x| x == u).count() <= 2)
        );
        let fast = &outcome.tiers[0];
        let slow = &outcome.tiers[1];
        assert!(
            slow.probes
                .iter()
                .any(|p| p.benchmark == fast.probes[4].benchmark),
            "the slow tier reads the fast tier's probe at 16 users"
        );
        assert_eq!(
            outcome.conclusion,
            "fast: 10 users (bound by requests_per_s>=90); slow: 30 users (bound by requests_per_s>=70)"
        );
        assert_eq!(outcome.probes.len(), loads.len(), "one probe per benchmark");
    }

    /// A concurrency search against a server that meets the SLO up to `capacity`
    /// streams; its throughput benchmark runs `throughput` streams.
    fn search_streams(capacity: u32, throughput: u32) -> (CapacityOutcome, Vec<Strategy>) {
        let mut search = CapacitySearch::new(Slo::default(), 0.05, throughput, None)
            .over(SearchVariable::Concurrency);
        let mut done: Vec<BenchmarkResult> = Vec::new();
        while let Some(strategy) = search.next(&done).expect("next") {
            assert!(done.len() < 25, "the search must end: {:?}", search.probes);
            let mut r = empty_result();
            r.index = done.len() as u32;
            r.strategy = strategy;
            let streams = match strategy {
                Strategy::Synchronous => 1,
                Strategy::Throughput { max_concurrency } => max_concurrency,
                Strategy::Concurrent { streams } => streams,
                other => panic!("unexpected {other:?}"),
            };
            r.throughput.requests_per_s = f64::from(streams);
            r.slo = Some(SloVerdict {
                passed: streams <= capacity,
                checks: vec![],
                not_kept_up: None,
            });
            done.push(r);
        }
        (search.outcome(), done.iter().map(|r| r.strategy).collect())
    }

    #[test]
    fn a_search_stopped_by_too_few_requests_says_inconclusive_once_with_units() {
        let mut search = CapacitySearch::new(Slo::default(), 0.05, 0, None);
        let mut done: Vec<BenchmarkResult> = Vec::new();
        while let Some(strategy) = search.next(&done).expect("next") {
            assert!(done.len() < 10, "the search must end: {:?}", search.probes);
            let mut r = empty_result();
            r.index = done.len() as u32;
            r.strategy = strategy;
            r.throughput.requests_per_s = 4.0;
            // Every load: a median of 3 requests, too few to bound.
            r.slo = Some(SloVerdict {
                passed: false,
                checks: vec![crate::slo::CheckResult {
                    name: "tpot_p50<=14ms".into(),
                    measured: Some(12.5),
                    threshold: 14.0,
                    cmp: crate::slo::Cmp::Le,
                    passed: false,
                    inconclusive: true,
                    reason: Some(
                        "tpot p50 of 3 requests; about 2 more requests would decide".into(),
                    ),
                    distribution: None,
                    lower: None,
                    upper: None,
                    confidence: None,
                    more_requests: Some(2),
                }],
                not_kept_up: None,
            });
            done.push(r);
        }
        let conclusion = search.outcome().conclusion;
        assert_eq!(
            conclusion.matches("inconclusive").count(),
            1,
            "{conclusion}"
        );
        assert!(conclusion.contains("req/s"), "{conclusion}");
        assert!(conclusion.contains("(measured 12.500 ms)"), "{conclusion}");
    }

    /// A verdict whose `e2e_p50<=200ms` check could not decide: its bounds straddle the
    /// threshold (enough requests for bounds, too few to settle on a side).
    fn straddling(measured: f64) -> SloVerdict {
        SloVerdict {
            passed: false,
            checks: vec![crate::slo::CheckResult {
                name: "e2e_p50<=200ms".into(),
                measured: Some(measured),
                threshold: 200.0,
                cmp: crate::slo::Cmp::Le,
                passed: false,
                inconclusive: true,
                reason: Some(
                    "request_latency p50 of 12 requests lies in [150.000, 230.000] ms at 95% confidence; about 348 more requests would decide".into(),
                ),
                distribution: None,
                lower: Some(150.0),
                upper: Some(230.0),
                confidence: Some(0.95),
                more_requests: Some(348),
            }],
            not_kept_up: None,
        }
    }

    /// A search over `variable` against a server that meets the SLO up to `capacity`
    /// and cannot be judged above it, every load stopped by `--max-requests`.
    fn undecided_above(variable: SearchVariable, capacity: f64) -> CapacityOutcome {
        let mut search = CapacitySearch::new(Slo::default(), 0.05, 8, None).over(variable);
        let mut done: Vec<BenchmarkResult> = Vec::new();
        while let Some(strategy) = search.next(&done).expect("next") {
            assert!(done.len() < 30, "the search must end: {:?}", search.probes);
            let value = match strategy {
                Strategy::Synchronous => 1.0,
                Strategy::Throughput { max_concurrency } => f64::from(max_concurrency),
                Strategy::Constant { rate } => rate,
                Strategy::Concurrent { streams } => f64::from(streams),
                other => panic!("unexpected {other:?}"),
            };
            let mut r = empty_result();
            r.index = done.len() as u32;
            r.strategy = strategy;
            r.throughput.requests_per_s = value;
            r.stop_reason = Some(StopReason::MaxRequests { requests: 12 });
            r.slo = Some(if value <= capacity {
                SloVerdict {
                    passed: true,
                    checks: vec![],
                    not_kept_up: None,
                }
            } else {
                straddling(170.0 + done.len() as f64)
            });
            done.push(r);
        }
        search.outcome()
    }

    #[test]
    fn an_inconclusive_boundary_is_not_called_a_confirmed_failure() {
        for (variable, capacity, passes, undecided) in [
            (
                SearchVariable::Rate,
                6.5,
                "passes at 6.",
                "the SLO is inconclusive at ",
            ),
            (
                SearchVariable::Concurrency,
                5.0,
                "passes at 5 streams",
                "the SLO is inconclusive at 6 streams in 2 runs (",
            ),
        ] {
            let outcome = undecided_above(variable, capacity);
            let c = &outcome.conclusion;
            let last = outcome.probes.last().expect("probes");
            assert!(last.retest && last.inconclusive, "{last:?}");
            assert!(!c.contains("fails") && !c.contains("confirmed"), "{c}");
            assert_eq!(c.matches("inconclusive").count(), 1, "{c}");
            assert!(c.contains(passes) && c.contains(undecided), "{c}");
            assert!(c.contains("(measured 1") && c.contains(" ms)"), "{c}");
            // Every load stopped at --max-requests: raising --max-seconds would not help.
            assert!(
                c.ends_with("raise --max-requests for a verdict there"),
                "{c}"
            );
            assert!(!c.contains(".000 streams"), "{c}");
        }
    }

    #[test]
    fn a_confirmed_failure_of_streams_is_in_whole_streams() {
        let (outcome, _) = search_streams(5, 8);
        assert!(
            outcome
                .conclusion
                .ends_with("passes at 5 streams, fails at 6 streams (confirmed by a second run)"),
            "{}",
            outcome.conclusion
        );
    }

    #[test]
    fn a_concurrency_search_lands_on_the_highest_passing_stream_count() {
        for (capacity, throughput) in [(23, 64), (5, 64), (100, 64), (1, 8)] {
            let (outcome, strategies) = search_streams(capacity, throughput);
            let found = outcome.rate.expect("an answer");
            assert_eq!(found.fract(), 0.0, "{found}: {strategies:?}");
            // Whole streams: within 5%, or next to the failing count.
            assert!(
                found <= f64::from(capacity)
                    && (found >= f64::from(capacity) * 0.95 || found + 1.0 >= f64::from(capacity)),
                "capacity {capacity}: found {found}: {strategies:?}"
            );
            assert!(strategies.len() <= 16, "{strategies:?}");
            // Every probe ran a whole number of streams, never zero.
            assert!(
                strategies
                    .iter()
                    .all(|s| !matches!(s, Strategy::Concurrent { streams: 0 }))
            );
        }
    }

    #[test]
    fn the_search_climbs_above_the_measured_maximum_while_the_slo_holds() {
        // A short throughput benchmark understated the server: 19.8 req/s measured, the
        // SLO holds up to 30.
        let (outcome, strategies) = search(30.0, 5.0, 19.8);
        let rate = outcome.rate.expect("a rate");
        assert!(
            (30.0 * 0.95..=30.0).contains(&rate),
            "{rate}: {strategies:?}"
        );
        assert!(
            rates(&strategies).iter().any(|&r| r > 30.0),
            "a failing rate above the maximum was found: {strategies:?}"
        );
        assert!(strategies.len() <= 14, "{strategies:?}");
    }

    #[test]
    fn the_failure_next_to_the_answer_is_confirmed_by_a_second_run() {
        let (outcome, strategies) = search(14.0, 5.0, 20.0);
        let (lo, hi) = (outcome.bracket.0, outcome.bracket.1.expect("a failure"));
        let runs_of_hi = rates(&strategies).iter().filter(|&&r| r == hi).count();
        assert_eq!(runs_of_hi, 2, "{strategies:?}");
        let last = outcome.probes.last().expect("probes");
        assert!(last.retest && !last.passed && last.rate == hi, "{last:?}");
        assert!(
            outcome.conclusion.contains("confirmed"),
            "{}",
            outcome.conclusion
        );
        // Every other rate ran once.
        let mut seen = rates(&strategies);
        seen.retain(|&r| r != hi);
        let n = seen.len();
        seen.sort_by(f64::total_cmp);
        seen.dedup();
        assert_eq!(seen.len(), n, "{strategies:?}");
        assert!(lo <= 14.0 && hi > 14.0);
    }

    #[test]
    fn a_failure_that_does_not_repeat_moves_the_answer_up() {
        // The server sustains 14 req/s, but the first run of every rate between 12 and
        // 14 fails by chance (a noisy neighbour); a second run passes.
        let (outcome, strategies) =
            search_with(5.0, 20.0, |rate, n| rate <= 14.0 && (n > 1 || rate < 12.0));
        let rate = outcome.rate.expect("a rate");
        assert!(
            (14.0 * 0.95..=14.0).contains(&rate),
            "{rate}: {:?}",
            outcome.probes
        );
        assert!(
            outcome.probes.iter().any(|p| p.retest && p.passed),
            "{:?}",
            outcome.probes
        );
        assert!(strategies.len() <= 22, "{strategies:?}");
    }

    #[test]
    fn a_server_that_never_fails_ends_the_climb() {
        let (outcome, strategies) = search(f64::INFINITY, 5.0, 20.0);
        let rate = outcome.rate.expect("a rate");
        assert!(rate > 20.0 * 10.0, "{rate}");
        assert!(outcome.conclusion.contains("highest rate tried"));
        assert!(strategies.len() <= 3 + 1 + CAPACITY_MAX_GROWTH_STEPS as usize);
    }

    #[test]
    fn bisection_reaches_the_precision_in_few_benchmarks() {
        let (outcome, strategies) = search(14.0, 5.0, 20.0);
        let rate = outcome.rate.expect("a rate");
        assert!((14.0 * 0.95..=14.0).contains(&rate), "{rate}");
        let (lo, hi) = (
            outcome.bracket.0,
            outcome.bracket.1.expect("a failing rate"),
        );
        assert!((hi - lo) / hi <= 0.05);
        assert!(
            strategies.len() <= 10,
            "{} benchmarks: {strategies:?}",
            strategies.len()
        );
        assert!(
            outcome.probes.iter().all(|p| p.passed == (p.rate <= 14.0)),
            "{:?}",
            outcome.probes
        );
    }

    #[test]
    fn no_rate_when_even_synchronous_fails() {
        let mut profile = CapacityProfile::new(template(), Slo::default(), 0.05, 64);
        let plan = profile.next(&[]).expect("next").expect("synchronous");
        let mut r = empty_result();
        r.strategy = plan.strategy;
        r.throughput.requests_per_s = 5.0;
        r.slo = Some(SloVerdict {
            passed: false,
            checks: vec![],
            not_kept_up: None,
        });
        assert!(profile.next(&[r]).expect("next").is_none());
        let outcome = profile.outcome();
        assert_eq!(outcome.rate, None);
        assert_eq!(outcome.probes.len(), 1);
    }

    /// A constant-rate result that met its SLO while `late` of `created` requests waited
    /// for the concurrency cap.
    fn passing_probe(rate: f64, created: u64, late: u64) -> BenchmarkResult {
        let mut r = empty_result();
        r.strategy = Strategy::Constant { rate };
        r.requests.created = created;
        r.requests.late = late;
        r.slo = Some(SloVerdict {
            passed: true,
            checks: vec![],
            not_kept_up: None,
        });
        r
    }

    #[test]
    fn a_probe_that_passed_its_slo_with_a_growing_queue_fails() {
        let profile = CapacityProfile::new(template(), Slo::default(), 0.05, 64);
        let (passed, reason, _) = profile.search.tiers[0]
            .search
            .verdict(&passing_probe(10.0, 100, 0));
        assert!(passed && reason.is_none());
        let (passed, reason, _) = profile.search.tiers[0]
            .search
            .verdict(&passing_probe(10.0, 100, 30));
        assert!(!passed);
        let reason = reason.expect("a reason");
        assert!(
            reason.contains("queue was growing") && reason.contains("30 of 100"),
            "{reason}"
        );
        // The synchronous and throughput benchmarks are not rate probes.
        let mut sync = passing_probe(10.0, 100, 30);
        sync.strategy = Strategy::Synchronous;
        assert!(profile.search.tiers[0].search.verdict(&sync).0);
    }

    /// A result in which no request completed but `streamed` tokens arrived in `seconds`
    /// over `cancelled` requests.
    fn nothing_completed(strategy: Strategy, cancelled: u64, streamed: f64) -> BenchmarkResult {
        let mut r = empty_result();
        r.strategy = strategy;
        r.duration_s = 3.0;
        r.measured_window.duration_s = 3.0;
        r.measured_requests.cancelled = cancelled;
        let d = r.metrics.entry("output_tokens".into()).or_default();
        d.incomplete.count = cancelled;
        d.incomplete.mean = streamed / cancelled as f64;
        r
    }

    #[test]
    fn a_rate_is_estimated_from_streamed_tokens_when_nothing_completed() {
        // 32 requests streamed 960 tokens in 3 s: 320 tokens/s over 64 tokens a request.
        let r = nothing_completed(Strategy::Synchronous, 32, 960.0);
        let e = estimate_rate(&r, Some(64.0)).expect("an estimate");
        assert_eq!(e.source, RateSource::StreamedTokens);
        assert!((e.requests_per_s - 5.0).abs() < 1e-9, "{e:?}");
        assert!(e.detail.contains("960"), "{}", e.detail);
        assert_eq!(estimate_rate(&r, None), None);
        let silent = nothing_completed(Strategy::Synchronous, 32, 0.0);
        assert_eq!(estimate_rate(&silent, Some(64.0)), None);
    }

    #[test]
    fn a_sweep_whose_throughput_benchmark_finished_nothing_still_gets_rates() {
        // Synchronous: 2 req/s of 10-token requests. Throughput: nothing finished, 600
        // tokens streamed in 3 s, so 200 tokens/s = 20 req/s.
        let mut sweep = SweepProfile::new(template(), 5, SweepArrivals::Constant, 512);
        let mut sync = empty_result();
        sync.throughput.requests_per_s = 2.0;
        sync.measured_requests.completed = 6;
        let d = sync.metrics.entry("output_tokens".into()).or_default();
        d.successful.count = 6;
        d.successful.mean = 10.0;
        let thr = nothing_completed(
            Strategy::Throughput {
                max_concurrency: 512,
            },
            512,
            600.0,
        );
        let mut done = vec![sync, thr];
        let plan = sweep.next(&done).expect("a plan").expect("a benchmark");
        assert_eq!(plan.strategy, Strategy::Constant { rate: 6.5 });
        sweep.annotate(&mut done);
        let e = done[1].rate_estimate.as_ref().expect("explained");
        assert_eq!(e.source, RateSource::StreamedTokens);
        assert!((e.requests_per_s - 20.0).abs() < 1e-9);
        assert_eq!(
            done[0].rate_estimate.as_ref().map(|e| e.source),
            Some(RateSource::Completed)
        );
        // A throughput benchmark that got nothing at all: the synchronous rate stands in.
        let mut silent = done.clone();
        silent[1] = nothing_completed(Strategy::Synchronous, 512, 0.0);
        let mut sweep = SweepProfile::new(template(), 5, SweepArrivals::Constant, 512);
        let plan = sweep.next(&silent).expect("a plan").expect("a benchmark");
        assert_eq!(plan.strategy, Strategy::Constant { rate: 2.0 });
        sweep.annotate(&mut silent);
        assert_eq!(
            silent[1].rate_estimate.as_ref().map(|e| e.source),
            Some(RateSource::Synchronous)
        );
    }

    #[test]
    fn the_answer_states_the_servers_queue_and_kv_use_at_the_chosen_rate() {
        use crate::server_metrics::{SeriesKind, SeriesSummary, ServerMetrics};
        let gauge = |mean, max| SeriesSummary {
            kind: SeriesKind::Gauge,
            delta: None,
            rate_per_s: None,
            mean: Some(mean),
            max: Some(max),
            samples: 10,
        };
        let mut r = empty_result();
        assert_eq!(ServerLoad::of(&r), None, "nothing scraped");
        let mut m = ServerMetrics::default();
        m.summary
            .insert("num_requests_waiting".into(), gauge(0.4, 3.0));
        m.summary
            .insert("kv_cache_usage_perc".into(), gauge(0.41, 0.77));
        r.server_metrics = Some(m);
        let load = ServerLoad::of(&r).expect("a load");
        assert_eq!(load.waiting_max, Some(3.0));
        let mut profile = CapacityProfile::new(template(), Slo::default(), 0.05, 64);
        for (rate, passed, server) in [(10.0, true, Some(load)), (12.0, false, None)] {
            profile.search.tiers[0].search.probes.push(Probe {
                benchmark: 0,
                strategy: Strategy::Constant { rate },
                rate,
                passed,
                reason: None,
                retest: false,
                server,
                inconclusive: false,
                failed: Vec::new(),
                undecided: Vec::new(),
            });
        }
        profile.search.tiers[0].search.lo = 10.0;
        let _ = profile.search.tiers[0]
            .search
            .finish(Some(10.0), "within 5%".into());
        let outcome = profile.outcome();
        assert_eq!(outcome.server, Some(load));
        assert_eq!(
            outcome.conclusion,
            "within 5%; at 10.000 req/s the server's queue averaged 0.4 waiting requests (max 3) and its KV-cache use 41% (max 77%)"
        );
    }
}
