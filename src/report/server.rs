//! The server's own metrics (`BenchmarkResult::server_metrics`, scraped from its
//! Prometheus `/metrics`) as the report formats show them: which figures, in which order,
//! and how they read. One place, so the console, Markdown, HTML, CSV and `benchmark
//! compare` agree on the names.
//!
//! Series are keyed by llmsurge's names (vLLM's names without the `vllm:` prefix,
//! whichever server published them): the lists below are the fixed set every format
//! shows, in this order; series kept by `--server-metrics-include` follow under their
//! own names ([`extra_series`]).

use super::num;
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::server_metrics::{CrossCheck, SeriesKind, SeriesSummary, ServerMetrics};

/// Gauges the report shows (mean and max over the measured window).
pub const GAUGES: [&str; 4] = [
    "num_requests_waiting",
    "num_requests_running",
    "kv_cache_usage_perc",
    "cache_hit_rate",
];

/// Counters the report shows (delta and rate over the measured window).
pub const COUNTERS: [&str; 8] = [
    "generation_tokens",
    "prompt_tokens",
    "request_success",
    "num_preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
];

/// The server's own latency histograms the report shows (count and mean).
pub const HISTOGRAMS: [&str; 2] = ["time_to_first_token_seconds", "e2e_request_latency_seconds"];

/// The counts the server and the client both know (cross-checks), by series name.
pub const CROSS_CHECKS: [&str; 3] = ["generation_tokens", "prompt_tokens", "request_success"];

/// The tolerance of a cross-check: beyond it, the server and the client disagree (the
/// coordinator's, which judged each).
pub use llmsurge_coordinator::server_metrics::CROSS_CHECK_TOLERANCE;

/// Series that are neither in [`GAUGES`] nor in [`COUNTERS`]: those kept by
/// `--server-metrics-include`, in name order.
pub fn extra_series(sm: &ServerMetrics) -> impl Iterator<Item = (&String, &SeriesSummary)> {
    sm.summary
        .iter()
        .filter(|(name, _)| !GAUGES.contains(&name.as_str()) && !COUNTERS.contains(&name.as_str()))
}

/// The summary of a series, if the server published it.
pub fn summary<'a>(sm: &'a ServerMetrics, name: &str) -> Option<&'a SeriesSummary> {
    sm.summary.get(name)
}

/// A gauge's mean and max over the window.
pub fn gauge(sm: &ServerMetrics, name: &str) -> (Option<f64>, Option<f64>) {
    summary(sm, name).map_or((None, None), |s| (s.mean, s.max))
}

/// A counter's delta and rate over the window.
pub fn counter(sm: &ServerMetrics, name: &str) -> (Option<f64>, Option<f64>) {
    summary(sm, name).map_or((None, None), |s| (s.delta, s.rate_per_s))
}

/// Scrapes that failed, all kinds together.
pub fn scrape_errors(sm: &ServerMetrics) -> u64 {
    sm.scrape_errors.iter().map(|e| e.count).sum()
}

/// The cross-check of one name, if the report has it.
pub fn cross_check<'a>(sm: &'a ServerMetrics, name: &str) -> Option<&'a CrossCheck> {
    sm.cross_checks.iter().find(|c| c.name == name)
}

/// Whether any benchmark of a run carries server metrics (the formats add their server
/// parts only then, so a report without them renders as it did before they existed).
pub fn any(benchmarks: &[BenchmarkResult]) -> bool {
    benchmarks.iter().any(|b| b.server_metrics.is_some())
}

/// A fraction as a percentage for people: `0.125` → `12.5%`.
pub fn percent(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{}%", num(v * 100.0)),
        _ => "–".into(),
    }
}

/// A figure for tables, `–` when absent; whole numbers (counts, a gauge of requests) as
/// integers.
pub fn figure(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Some(v) if v.is_finite() => num(v),
        _ => "–".into(),
    }
}

/// `mean / max` of a gauge; fractions of 0..1 (`kv_cache_usage_perc`) as percentages.
pub fn mean_max(sm: &ServerMetrics, name: &str) -> String {
    let (mean, max) = gauge(sm, name);
    if mean.is_none() && max.is_none() {
        return "–".into();
    }
    let show = if is_fraction(name) { percent } else { figure };
    format!("{} / {}", show(mean), show(max))
}

/// Gauges whose values are fractions of 0..1, shown as percentages.
pub fn is_fraction(name: &str) -> bool {
    matches!(name, "kv_cache_usage_perc" | "cache_hit_rate")
}

/// `N scrapes` and, when some failed, how: `12 scrapes, 2 failed (timeout × 2)`.
pub fn scrapes_line(sm: &ServerMetrics) -> String {
    let failed = scrape_errors(sm);
    if failed == 0 {
        return format!("{} scrapes", sm.scrapes);
    }
    let kinds: Vec<String> = sm
        .scrape_errors
        .iter()
        .map(|e| format!("{} × {}", e.kind, e.count))
        .collect();
    format!(
        "{} scrapes, {failed} failed ({})",
        sm.scrapes,
        kinds.join(", ")
    )
}

/// A cross-check in one sentence: `generation_tokens: server 1200, client 1180 (+1.69%), agrees`.
pub fn cross_check_line(c: &CrossCheck) -> String {
    format!(
        "{}: server {}, client {} ({:+.2}%){}",
        c.name,
        figure(Some(c.server)),
        client_range(c),
        c.difference * 100.0,
        if c.agrees {
            ", agrees".to_string()
        } else {
            format!(
                ", DISAGREES by more than {}%",
                figure(Some((CROSS_CHECK_TOLERANCE * 100.0).round()))
            )
        }
    )
}

/// The client's count of a cross-check, or its range (`1,200 to 1,264`) when it has one.
pub fn client_range(c: &CrossCheck) -> String {
    match c.client_upper {
        Some(u) => format!("{} to {}", figure(Some(c.client)), figure(Some(u))),
        // Requests cut off that asked for no bounded length: no upper end.
        None if c.unknown_requests > 0 => format!("{} or more", figure(Some(c.client))),
        None => figure(Some(c.client)),
    }
}

/// The server recognised and the URL scraped: `vllm at http://…/metrics`.
pub fn source(sm: &ServerMetrics) -> String {
    match &sm.server {
        Some(s) => format!("{s} at {}", sm.url),
        None => format!("unrecognised server at {}", sm.url),
    }
}

/// Whether a series is a counter (it has a delta and a rate) rather than a gauge (a mean
/// and a max).
pub fn is_counter(s: &SeriesSummary) -> bool {
    s.kind == SeriesKind::Counter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_as_people_read_them() {
        assert_eq!(percent(Some(0.125)), "12.5%");
        assert_eq!(percent(None), "–");
        assert_eq!(percent(Some(f64::NAN)), "–");
        assert_eq!(figure(Some(1234.0)), "1234");
        assert_eq!(figure(Some(14.0)), "14");
        assert_eq!(figure(Some(0.5)), "0.50");
        let c: CrossCheck = serde_json::from_value(serde_json::json!({
            "name": "generation_tokens",
            "server": 1030.0,
            "client": 1000.0,
            "difference": 0.03,
            "agrees": false,
        }))
        .expect("a cross-check");
        assert_eq!(
            cross_check_line(&c),
            "generation_tokens: server 1030, client 1000 (+3.00%), DISAGREES by more than 2%"
        );
        // Requests cut off with no bounded length: the range has no upper end.
        let open = CrossCheck {
            unknown_requests: 2,
            difference: 0.0,
            agrees: true,
            ..c.clone()
        };
        assert_eq!(
            cross_check_line(&open),
            "generation_tokens: server 1030, client 1000 or more (+0.00%), agrees"
        );
        let range = CrossCheck {
            client_upper: Some(1100.0),
            ..open
        };
        assert!(cross_check_line(&range).contains("client 1000 to 1100"));
    }
}
