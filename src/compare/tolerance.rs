//! `--max-regression`: how much each metric may get worse before it is a regression.

use std::collections::BTreeMap;

/// Which way is worse for a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Worse {
    /// Latencies and error rates: up is worse.
    Higher,
    /// Throughputs: down is worse.
    Lower,
}

/// The unit of a change and of its tolerance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeUnit {
    /// Relative change, in percent of the baseline.
    Percent,
    /// Absolute change of a fraction, in percentage points.
    PercentagePoints,
}

/// How much worse a metric may get: a magnitude in its unit.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Tolerance {
    /// The allowed worsening (always ≥ 0), in `unit`.
    pub allowed: f64,
    /// Percent or percentage points.
    pub unit: ChangeUnit,
}

/// Tolerances per comparison metric (`ttft_p99`, `output_tokens_per_s`, `error_rate`, …).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Tolerances(pub BTreeMap<String, Tolerance>);

/// Used when `--max-regression` is not given.
pub const DEFAULT_TOLERANCES: &str = "ttft_p50=10%,ttft_p99=10%,itl_p50=10%,itl_p99=10%,e2e_p50=10%,e2e_p99=10%,requests_per_s=-10%,output_tokens_per_s=-10%,inputs_per_s=-10%,error_rate=+1pp";

/// The comparison metrics: latency ones (per statistic) and the rest.
pub const LATENCY_METRICS: [(&str, &str); 4] = [
    ("ttft", "ttft"),
    ("itl", "itl"),
    ("tpot", "tpot"),
    ("e2e", "request_latency"),
];
/// Statistics compared for every latency metric.
pub const LATENCY_STATS: [&str; 4] = ["mean", "p50", "p90", "p99"];
/// The non-latency comparison metrics.
pub const RATE_METRICS: [&str; 6] = [
    "requests_per_s",
    "output_tokens_per_s",
    "inputs_per_s",
    "goodput_per_s",
    "goodput_fraction",
    "error_rate",
];

/// The server's figures (`server_metrics`) that `benchmark compare` judges, with the
/// direction that is worse. Gauges are compared by mean and max, counters per second, the
/// server's latency histograms by mean. Other `server_*` rows (e.g. series kept by
/// `--server-metrics-include`, or prefix-cache queries, which are neither good nor bad)
/// are reported without a tolerance.
pub const SERVER_METRICS: [(&str, Worse); 15] = [
    ("server_num_requests_waiting_mean", Worse::Higher),
    ("server_num_requests_waiting_max", Worse::Higher),
    ("server_num_requests_running_mean", Worse::Higher),
    ("server_num_requests_running_max", Worse::Higher),
    ("server_kv_cache_usage_perc_mean", Worse::Higher),
    ("server_kv_cache_usage_perc_max", Worse::Higher),
    ("server_num_preemptions_per_s", Worse::Higher),
    ("server_generation_tokens_per_s", Worse::Lower),
    ("server_prompt_tokens_per_s", Worse::Lower),
    ("server_request_success_per_s", Worse::Lower),
    ("server_time_to_first_token_seconds_mean", Worse::Higher),
    ("server_e2e_request_latency_seconds_mean", Worse::Higher),
    ("server_cache_hit_rate_mean", Worse::Lower),
    ("server_prefix_cache_hit_rate", Worse::Lower),
    ("server_spec_decode_acceptance_rate", Worse::Lower),
];

/// Comparison metrics that are fractions compared in percentage points (their
/// tolerance too); every other metric changes in percent of the baseline.
pub fn in_percentage_points(name: &str) -> bool {
    matches!(
        name,
        "error_rate"
            | "goodput_fraction"
            | "server_prefix_cache_hit_rate"
            | "server_spec_decode_acceptance_rate"
    )
}

/// Which way is worse for a comparison metric, or `None` for an unknown name.
pub fn direction(name: &str) -> Option<Worse> {
    if name == "error_rate" {
        return Some(Worse::Higher);
    }
    if let Some((_, worse)) = SERVER_METRICS.iter().find(|(m, _)| *m == name) {
        return Some(*worse);
    }
    if RATE_METRICS.contains(&name) {
        return Some(Worse::Lower);
    }
    let (metric, stat) = name.rsplit_once('_')?;
    let known = LATENCY_METRICS.iter().any(|(m, _)| *m == metric) && LATENCY_STATS.contains(&stat);
    known.then_some(Worse::Higher)
}

impl Tolerances {
    /// Parses `name=10%,name=-5%,error_rate=+0.5pp`. The sign is optional and only
    /// documents the direction: the direction that counts as worse is the metric's own.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut out = BTreeMap::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected metric=tolerance, e.g. ttft_p99=10%"))?;
            let name = name.trim();
            if direction(name).is_none() {
                return Err(format!(
                    "{name:?}: unknown metric (use ttft|itl|tpot|e2e with _mean|_p50|_p90|_p99, or requests_per_s, output_tokens_per_s, goodput_per_s, goodput_fraction, error_rate, or a server_* metric: server_num_requests_waiting_mean, server_kv_cache_usage_perc_max, server_generation_tokens_per_s, server_prefix_cache_hit_rate, …)"
                ));
            }
            let v = value.trim().trim_start_matches(['+', '-']);
            let (num, unit) = if let Some(n) = v.strip_suffix("pp") {
                (n, ChangeUnit::PercentagePoints)
            } else if let Some(n) = v.strip_suffix('%') {
                (n, ChangeUnit::Percent)
            } else {
                return Err(format!(
                    "{part:?}: give the tolerance in % (relative) or pp (percentage points)"
                ));
            };
            let allowed: f64 = num
                .trim()
                .parse()
                .map_err(|_| format!("{part:?}: {num:?} is not a number"))?;
            if !(allowed.is_finite() && allowed >= 0.0) {
                return Err(format!(
                    "{part:?}: the tolerance must be a non-negative number"
                ));
            }
            if in_percentage_points(name) != (unit == ChangeUnit::PercentagePoints) {
                return Err(format!(
                    "{part:?}: error_rate and the server's hit and acceptance rates take percentage points (e.g. +0.5pp), other metrics percent (e.g. 10%)"
                ));
            }
            out.insert(name.to_string(), Tolerance { allowed, unit });
        }
        if out.is_empty() {
            return Err(
                "no tolerances (e.g. ttft_p99=10%,output_tokens_per_s=-5%,error_rate=+0.5pp)"
                    .into(),
            );
        }
        Ok(Tolerances(out))
    }

    /// The defaults with `given` added and, metric by metric, overriding them; only
    /// `given` with `only` (and the defaults alone without `given`).
    pub fn resolve(given: Option<&str>, only: bool) -> Result<Self, String> {
        let mut all = Self::parse(DEFAULT_TOLERANCES)?;
        match given {
            Some(spec) if only => Self::parse(spec),
            Some(spec) => {
                all.0.extend(Self::parse(spec)?.0);
                Ok(all)
            }
            None => Ok(all),
        }
    }

    /// The metrics these tolerances name.
    pub fn names(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }

    /// `ttft_p99 10%, error_rate 1pp, …`: the tolerances of the metrics `judged`, in one
    /// line.
    pub fn line(&self, judged: &[&str]) -> String {
        self.0
            .iter()
            .filter(|(name, _)| judged.contains(&name.as_str()))
            .map(|(name, t)| {
                let unit = match t.unit {
                    ChangeUnit::Percent => "%",
                    ChangeUnit::PercentagePoints => "pp",
                };
                format!("{name} {}{unit}", t.allowed)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_tolerances_add_to_and_override_the_defaults_unless_only() {
        let t = Tolerances::resolve(Some("ttft_p99=20%,e2e_p90=5%"), false).expect("valid");
        assert_eq!(t.0["ttft_p99"].allowed, 20.0);
        assert_eq!(t.0["e2e_p90"].allowed, 5.0);
        // The defaults the spec did not name still gate.
        assert_eq!(t.0["error_rate"].allowed, 1.0);
        assert_eq!(t.0["ttft_p50"].allowed, 10.0);
        let only = Tolerances::resolve(Some("ttft_p99=20%"), true).expect("valid");
        assert_eq!(only.0.keys().collect::<Vec<_>>(), ["ttft_p99"]);
        assert_eq!(
            Tolerances::resolve(None, false),
            Tolerances::parse(DEFAULT_TOLERANCES)
        );
    }

    #[test]
    fn tolerances_parse_with_units_and_directions() {
        let t = Tolerances::parse("ttft_p99=10%,output_tokens_per_s=-5%,error_rate=+0.5pp")
            .expect("parses");
        assert_eq!(
            t.0["ttft_p99"],
            Tolerance {
                allowed: 10.0,
                unit: ChangeUnit::Percent
            }
        );
        assert_eq!(
            t.0["output_tokens_per_s"],
            Tolerance {
                allowed: 5.0,
                unit: ChangeUnit::Percent
            }
        );
        assert_eq!(
            t.0["error_rate"],
            Tolerance {
                allowed: 0.5,
                unit: ChangeUnit::PercentagePoints
            }
        );
        assert_eq!(direction("ttft_p99"), Some(Worse::Higher));
        assert_eq!(direction("output_tokens_per_s"), Some(Worse::Lower));
        assert!(Tolerances::parse(DEFAULT_TOLERANCES).is_ok());
        let t = Tolerances::parse(
            "server_num_requests_waiting_mean=20%,server_generation_tokens_per_s=-5%,server_prefix_cache_hit_rate=-2pp",
        )
        .expect("server metrics parse");
        assert_eq!(t.0.len(), 3);
        assert_eq!(
            direction("server_num_requests_waiting_mean"),
            Some(Worse::Higher)
        );
        assert_eq!(
            direction("server_generation_tokens_per_s"),
            Some(Worse::Lower)
        );
        assert_eq!(direction("server_prefix_cache_queries_per_s"), None);
        for bad in [
            "ttft_p99",
            "ttft_p42=1%",
            "ttft_p99=10",
            "error_rate=1%",
            "ttft_p99=0.5pp",
            "ttft_p99=x%",
            "server_prefix_cache_hit_rate=2%",
            "server_generation_tokens_per_s=1pp",
            "server_prefix_cache_queries_per_s=10%",
            "",
        ] {
            assert!(Tolerances::parse(bad).is_err(), "{bad:?}");
        }
    }
}
