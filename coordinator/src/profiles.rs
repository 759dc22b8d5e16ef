//! Profiles: the sequence of benchmarks of a run.
//!
//! - [`FixedProfile`]: a list of strategies (`--rate 1,5,10`).
//! - [`SweepProfile`]: synchronous, then throughput, then rates evenly spaced between the
//!   two measured request rates.
//! - [`CapacityProfile`]: synchronous and throughput, then a bisection over constant rates
//!   for the highest one that meets the SLO, to the requested precision.

use crate::error::CoordinatorError;
use crate::group::BenchmarkPlan;
use crate::result::BenchmarkResult;
use crate::run::Profile;
use crate::slo::Slo;
use crate::strategy::Strategy;
use serde::{Deserialize, Serialize};

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
        plan.strategy = strategy;
        plan.workers = match (strategy, self.workers) {
            (Strategy::Synchronous, _) => 1,
            (_, Some(w)) => w,
            (s, None) => s.default_workers(self.cores),
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

fn measured_rate(r: &BenchmarkResult, what: &str) -> Result<f64, CoordinatorError> {
    let rate = r.throughput.requests_per_s;
    if rate > 0.0 && rate.is_finite() {
        Ok(rate)
    } else {
        Err(CoordinatorError::Plan(format!(
            "the {what} benchmark completed no request, so the profile has no rate to work from"
        )))
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
        }
    }

    /// The interior rates between the measured endpoints: `lo + k (hi - lo) / (count - 1)`.
    pub fn rates_between(lo: f64, hi: f64, count: usize) -> Vec<f64> {
        let steps = count.saturating_sub(1).max(1) as f64;
        (1..count.saturating_sub(1))
            .map(|k| lo + k as f64 * (hi - lo) / steps)
            .collect()
    }

    fn strategy(&self, rate: f64) -> Strategy {
        match self.arrivals {
            SweepArrivals::Constant => Strategy::Constant { rate },
            SweepArrivals::Poisson => Strategy::Poisson { rate },
        }
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
                if self.rates.is_empty() {
                    let lo = measured_rate(&done[0], "synchronous")?;
                    let hi = measured_rate(&done[1], "throughput")?;
                    self.rates = Self::rates_between(lo, hi.max(lo), self.count);
                }
                match self.rates.get(i - 2) {
                    Some(&rate) => self.strategy(rate),
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(self.template.plan(i, strategy)))
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
    /// Whether the SLO held.
    pub passed: bool,
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
}

/// Bisection for the highest constant rate meeting an SLO.
#[derive(Debug)]
pub struct CapacityProfile {
    template: PlanTemplate,
    slo: Slo,
    precision: f64,
    throughput_concurrency: u32,
    /// Highest passing and lowest failing rates so far.
    lo: f64,
    hi: Option<f64>,
    outcome: Option<CapacityOutcome>,
    probes: Vec<Probe>,
}

impl CapacityProfile {
    /// A search to `precision` (e.g. 0.05) for the highest rate meeting `slo`.
    pub fn new(
        template: PlanTemplate,
        slo: Slo,
        precision: f64,
        throughput_concurrency: u32,
    ) -> Self {
        Self {
            template,
            slo,
            precision,
            throughput_concurrency,
            lo: 0.0,
            hi: None,
            outcome: None,
            probes: Vec::new(),
        }
    }

    /// The answer, once the run is over (also after an interruption: the bracket so far).
    pub fn outcome(&self) -> CapacityOutcome {
        self.outcome.clone().unwrap_or_else(|| CapacityOutcome {
            rate: (self.lo > 0.0).then_some(self.lo),
            precision: self.precision,
            bracket: (self.lo, self.hi),
            conclusion: "the search did not finish".into(),
            probes: self.probes.clone(),
        })
    }

    fn verdict(&self, r: &BenchmarkResult) -> bool {
        r.slo
            .as_ref()
            .map_or_else(|| self.slo.evaluate(r).passed, |v| v.passed)
    }

    fn finish(
        &mut self,
        rate: Option<f64>,
        conclusion: String,
    ) -> Result<Option<BenchmarkPlan>, CoordinatorError> {
        self.outcome = Some(CapacityOutcome {
            rate,
            precision: self.precision,
            bracket: (self.lo, self.hi),
            conclusion,
            probes: self.probes.clone(),
        });
        Ok(None)
    }
}

impl Profile for CapacityProfile {
    fn next(
        &mut self,
        done: &[BenchmarkResult],
    ) -> Result<Option<BenchmarkPlan>, CoordinatorError> {
        let i = done.len();
        if let Some(last) = done.last() {
            let passed = self.verdict(last);
            let rate = match last.strategy {
                Strategy::Constant { rate } => rate,
                _ => last.throughput.requests_per_s,
            };
            self.probes.push(Probe {
                benchmark: last.index,
                strategy: last.strategy,
                rate,
                passed,
            });
        }
        match i {
            0 => return Ok(Some(self.template.plan(0, Strategy::Synchronous))),
            1 => {
                if !self.probes[0].passed {
                    return self.finish(None, "even one request at a time misses the SLO".into());
                }
                self.lo = measured_rate(&done[0], "synchronous")?;
                let strategy = Strategy::Throughput {
                    max_concurrency: self.throughput_concurrency,
                };
                return Ok(Some(self.template.plan(1, strategy)));
            }
            2 => {
                // The server's maximum rate bounds the search; probe it first.
                let max = measured_rate(&done[1], "throughput")?;
                if max <= self.lo {
                    return self.finish(
                        Some(self.lo),
                        "the server does no better than one request at a time".into(),
                    );
                }
                return Ok(Some(
                    self.template.plan(2, Strategy::Constant { rate: max }),
                ));
            }
            _ => {}
        }
        let Some(probe) = self.probes.last().cloned() else {
            return Ok(None);
        };
        if probe.passed {
            if self.hi.is_none() {
                return self.finish(
                    Some(probe.rate),
                    "the SLO holds at the server's maximum measured rate".into(),
                );
            }
            self.lo = self.lo.max(probe.rate);
        } else {
            self.hi = Some(self.hi.map_or(probe.rate, |h| h.min(probe.rate)));
        }
        let hi = self.hi.unwrap_or(probe.rate);
        if (hi - self.lo) / hi <= self.precision {
            return self.finish(
                Some(self.lo),
                format!(
                    "within {:.1}%: passes at {:.3} req/s, fails at {:.3} req/s",
                    self.precision * 100.0,
                    self.lo,
                    hi
                ),
            );
        }
        let next = (self.lo + hi) / 2.0;
        Ok(Some(
            self.template.plan(i, Strategy::Constant { rate: next }),
        ))
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
                request_timeout: Duration::from_secs(1),
                connect_timeout: Duration::from_secs(1),
                ttft_timeout: None,
                idle_timeout: None,
                ignore_eos: false,
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
                prefix_tokens: 0,
                prefix_count: 1,
                samples: None,
                random_seed: 1,
                source: None,
                tokenizer: llmsurge_proto::TokenizerRef::Builtin("cl100k_base".into()),
                sampling: Default::default(),
            }),
            window: Default::default(),
            flush_interval: Duration::from_millis(20),
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
                slo: None,
                goodput: None,
                saturation: None,
            },
            workers: None,
            cores: 2,
        }
    }

    /// Runs a capacity search against a simulated server that meets the SLO at rates up
    /// to `capacity`, does `sync_rate` one request at a time and `max_rate` at most.
    fn search(capacity: f64, sync_rate: f64, max_rate: f64) -> (CapacityOutcome, Vec<Strategy>) {
        let mut profile = CapacityProfile::new(template(), Slo::default(), 0.05, 64);
        let mut done: Vec<BenchmarkResult> = Vec::new();
        while let Some(plan) = profile.next(&done).expect("next") {
            assert!(done.len() < 20, "the search must end");
            let mut r = empty_result();
            r.index = plan.index;
            r.strategy = plan.strategy;
            let (achieved, offered) = match plan.strategy {
                Strategy::Synchronous => (sync_rate, sync_rate),
                Strategy::Throughput { .. } => (max_rate, f64::INFINITY),
                Strategy::Constant { rate } => (rate.min(max_rate), rate),
                other => panic!("unexpected {other:?}"),
            };
            r.throughput.requests_per_s = achieved;
            r.slo = Some(SloVerdict {
                passed: offered <= capacity,
                checks: vec![],
            });
            done.push(r);
        }
        (profile.outcome(), done.iter().map(|r| r.strategy).collect())
    }

    #[test]
    fn the_maximum_rate_is_the_answer_when_it_meets_the_slo() {
        let (outcome, strategies) = search(20.0, 5.0, 19.8);
        assert_eq!(outcome.rate, Some(19.8));
        assert_eq!(strategies.len(), 3, "{strategies:?}");
        assert_eq!(outcome.probes.len(), 3);
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
            strategies.len() <= 8,
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
        let (outcome, strategies) = search(1.0, 5.0, 20.0);
        assert_eq!(outcome.rate, None);
        assert_eq!(strategies, [Strategy::Synchronous]);
    }
}
