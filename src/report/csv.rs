//! The CSV report: one row per benchmark, one column per number, grouped by a dotted
//! prefix (`run.`, `timing.`, `requests.`, `ttft_ms.successful.p99`, `throughput.`,
//! `client.`, …). Loadable by pandas or a spreadsheet with no cleanup: a fixed header,
//! numbers in plain decimal, booleans as `true`/`false`, and an empty cell where a value
//! does not exist (a distribution with no values, no stop reason).

use super::json::Report;
use super::server;
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::result::{ModelResult, StatusDistributions};
use llmsurge_coordinator::server_metrics::{SeriesSummary, ServerMetrics};
use llmsurge_proto::metrics::PERCENTILES;
use llmsurge_proto::{Distribution, Metric};
use std::collections::BTreeMap;

/// The status groups of every distribution, in column order.
const STATUSES: [&str; 4] = ["successful", "errored", "incomplete", "total"];

/// The column group of a metric: durations carry their unit.
fn metric_group(metric: Metric) -> String {
    if metric.is_duration() {
        format!("{}_ms", metric.key())
    } else {
        metric.key().to_string()
    }
}

/// The statistics of one distribution, in column order.
fn stat_names() -> Vec<String> {
    let mut names: Vec<String> = ["count", "mean", "median", "std", "min", "max"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    names.extend(PERCENTILES.iter().map(|(k, _)| k.to_string()));
    names
}

fn stat_values(d: Option<&Distribution>) -> Vec<String> {
    let n = 6 + PERCENTILES.len();
    let Some(d) = d else {
        return vec![String::new(); n];
    };
    if d.count == 0 {
        // No values: only the count exists.
        let mut v = vec![String::new(); n];
        v[0] = "0".into();
        return v;
    }
    let mut v = vec![
        d.count.to_string(),
        float(d.mean),
        float(d.percentiles.p50),
        float(d.std),
        float(d.min),
        float(d.max),
    ];
    v.extend(
        PERCENTILES
            .iter()
            .map(|(k, _)| d.percentiles.get(k).map(float).unwrap_or_default()),
    );
    v
}

/// A number as pandas reads it; non-finite values become empty cells.
fn float(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}

fn opt_float(v: Option<f64>) -> String {
    v.map(float).unwrap_or_default()
}

/// A count, or an empty cell where it does not apply (a format without output).
fn opt_count(v: Option<u64>) -> String {
    v.map(|n| n.to_string()).unwrap_or_default()
}

/// A cell and its column name.
type Column<'a> = (&'static str, Box<dyn Fn(&BenchmarkResult) -> String + 'a>);

/// Every column that does not come from a distribution, in order.
fn fixed_columns<'a>(report: &'a Report) -> Vec<Column<'a>> {
    let b = |v: bool| v.to_string();
    let mut cols: Vec<Column<'a>> = vec![
        ("run.index", Box::new(|r| r.index.to_string())),
        ("run.strategy", Box::new(|r| r.strategy.to_string())),
        ("run.strategy_type", Box::new(|r| r.strategy.kind().into())),
        (
            "run.target_rate",
            Box::new(|r| opt_float(r.strategy.target())),
        ),
        ("run.model", Box::new(move |_| report.target.model.clone())),
        (
            "run.target",
            Box::new(move |_| report.target.base_url.clone()),
        ),
        (
            "run.stop_reason",
            Box::new(|r| {
                r.stop_reason
                    .as_ref()
                    .map(|s| s.to_string())
                    .unwrap_or_default()
            }),
        ),
        ("run.interrupted", Box::new(move |r| b(r.interrupted))),
        (
            "run.server_lost_at_s",
            Box::new(|r| opt_float(r.server_lost.as_ref().map(|l| l.at_s))),
        ),
        ("run.workers", Box::new(|r| r.workers.len().to_string())),
        (
            "run.workers_died",
            Box::new(|r| r.workers.iter().filter(|w| w.died).count().to_string()),
        ),
        ("timing.start_time", Box::new(|r| float(r.start_time))),
        ("timing.end_time", Box::new(|r| float(r.end_time))),
        ("timing.duration_s", Box::new(|r| float(r.duration_s))),
        (
            "timing.measured_start_time",
            Box::new(|r| float(r.measured_window.start_time)),
        ),
        (
            "timing.measured_end_time",
            Box::new(|r| float(r.measured_window.end_time)),
        ),
        (
            "timing.measured_duration_s",
            Box::new(|r| float(r.measured_window.duration_s)),
        ),
        ("timing.stop_time_s", Box::new(|r| opt_float(r.stop_time_s))),
        (
            "requests.created",
            Box::new(|r| r.requests.created.to_string()),
        ),
        (
            "requests.completed",
            Box::new(|r| r.requests.completed.to_string()),
        ),
        (
            "requests.errored",
            Box::new(|r| r.requests.errored.to_string()),
        ),
        (
            "requests.cancelled",
            Box::new(|r| r.requests.cancelled.to_string()),
        ),
        ("requests.late", Box::new(|r| r.requests.late.to_string())),
        (
            "requests.warmup",
            Box::new(|r| r.requests.warmup.to_string()),
        ),
        (
            "requests.cooldown",
            Box::new(|r| r.requests.cooldown.to_string()),
        ),
        (
            "requests.measured_completed",
            Box::new(|r| r.measured_requests.completed.to_string()),
        ),
        (
            "requests.measured_errored",
            Box::new(|r| r.measured_requests.errored.to_string()),
        ),
        (
            "requests.measured_cancelled",
            Box::new(|r| r.measured_requests.cancelled.to_string()),
        ),
        (
            "errors.kinds",
            Box::new(|r| {
                r.errors
                    .iter()
                    .map(|e| format!("{}={}", e.kind, e.count))
                    .collect::<Vec<_>>()
                    .join(";")
            }),
        ),
        (
            "throughput.requests_per_s",
            Box::new(|r| float(r.throughput.requests_per_s)),
        ),
        (
            "throughput.output_tokens_per_s",
            // Blank for a format without output (embeddings, rerank): absent, not zero.
            Box::new(|r| opt_float(r.throughput.output_tokens_per_s)),
        ),
        (
            "throughput.total_tokens_per_s",
            Box::new(|r| float(r.throughput.total_tokens_per_s)),
        ),
        (
            "throughput.concurrency_mean",
            Box::new(|r| float(r.throughput.concurrency_mean)),
        ),
        (
            "throughput.concurrency_peak",
            Box::new(|r| r.throughput.concurrency_peak.to_string()),
        ),
        (
            "tokens.source_usage",
            Box::new(|r| opt_count(r.token_sources.map(|t| t.usage))),
        ),
        (
            "tokens.source_stream",
            Box::new(|r| opt_count(r.token_sources.map(|t| t.stream))),
        ),
        (
            "tokens.source_unknown",
            Box::new(|r| opt_count(r.token_sources.map(|t| t.unknown))),
        ),
        (
            "tokens.usage_stream_mismatched",
            Box::new(|r| opt_count(r.token_sources.map(|t| t.mismatched))),
        ),
        (
            "output_lengths.asked_mean",
            Box::new(|r| opt_float(r.output_lengths.as_ref().map(|o| o.asked_mean))),
        ),
        (
            "output_lengths.received_mean",
            Box::new(|r| opt_float(r.output_lengths.as_ref().map(|o| o.received_mean))),
        ),
        (
            "output_lengths.short",
            Box::new(|r| opt_count(r.output_lengths.as_ref().map(|o| o.short))),
        ),
        (
            "output_lengths.short_share",
            Box::new(|r| opt_float(r.output_lengths.as_ref().map(|o| o.short_share))),
        ),
        (
            "output_lengths.unknown_lengths",
            Box::new(|r| opt_count(r.output_lengths.as_ref().map(|o| o.unknown_lengths))),
        ),
        (
            "output_lengths.finish_length",
            Box::new(|r| opt_count(r.output_lengths.as_ref().map(|o| o.finish_reasons.length))),
        ),
        (
            "output_lengths.finish_stop",
            Box::new(|r| opt_count(r.output_lengths.as_ref().map(|o| o.finish_reasons.stop))),
        ),
        (
            "output_lengths.finish_tool_calls",
            Box::new(|r| {
                opt_count(
                    r.output_lengths
                        .as_ref()
                        .map(|o| o.finish_reasons.tool_calls),
                )
            }),
        ),
        (
            "output_lengths.finish_other",
            Box::new(|r| opt_count(r.output_lengths.as_ref().map(|o| o.finish_reasons.other))),
        ),
        (
            "output_lengths.finish_none",
            Box::new(|r| opt_count(r.output_lengths.as_ref().map(|o| o.finish_reasons.none))),
        ),
        (
            "client.dispatch_lag_p50_ms",
            Box::new(|r| float(r.client.dispatch_lag_p50_ms)),
        ),
        (
            "client.dispatch_lag_p99_ms",
            Box::new(|r| float(r.client.dispatch_lag_p99_ms)),
        ),
        (
            "client.dispatch_lag_threshold_ms",
            Box::new(|r| float(r.client.dispatch_lag_threshold_ms)),
        ),
        (
            "client.late_requests",
            Box::new(|r| r.client.late_requests.to_string()),
        ),
        (
            "client.worker_cpu_s",
            Box::new(|r| float(r.client.worker_cpu_s)),
        ),
        (
            "client.worker_cpu_utilization",
            Box::new(|r| float(r.client.worker_cpu_utilization)),
        ),
        (
            "client.send_gap_p50_ms",
            Box::new(|r| opt_float(r.client.send_gap.as_ref().map(|d| d.percentiles.p50))),
        ),
        (
            "client.send_gap_p99_ms",
            Box::new(|r| opt_float(r.client.send_gap.as_ref().map(|d| d.percentiles.p99))),
        ),
        (
            "client.runtime_delay_p50_ms",
            Box::new(|r| opt_float(r.client.runtime_delay.as_ref().map(|d| d.percentiles.p50))),
        ),
        (
            "client.runtime_delay_p99_ms",
            Box::new(|r| opt_float(r.client.runtime_delay.as_ref().map(|d| d.percentiles.p99))),
        ),
        (
            "client.connections_opened",
            Box::new(|r| {
                r.client
                    .connections
                    .as_ref()
                    .map_or_else(String::new, |c| c.opened.to_string())
            }),
        ),
        (
            "client.connections_reused",
            Box::new(|r| {
                r.client
                    .connections
                    .as_ref()
                    .map_or_else(String::new, |c| c.reused.to_string())
            }),
        ),
        (
            "client.connect_mean_ms",
            Box::new(|r| opt_float(r.client.connections.as_ref().map(|c| c.connect.mean))),
        ),
        (
            "client.connect_p50_ms",
            Box::new(|r| {
                opt_float(
                    r.client
                        .connections
                        .as_ref()
                        .map(|c| c.connect.percentiles.p50),
                )
            }),
        ),
        (
            "client.connect_p99_ms",
            Box::new(|r| {
                opt_float(
                    r.client
                        .connections
                        .as_ref()
                        .map(|c| c.connect.percentiles.p99),
                )
            }),
        ),
        (
            "client.bottleneck",
            Box::new(move |r| b(r.client.bottleneck)),
        ),
        (
            "client.warnings",
            Box::new(|r| r.client.warnings.join(" | ")),
        ),
        (
            "slo.passed",
            Box::new(move |r| r.slo.as_ref().map(|v| b(v.passed)).unwrap_or_default()),
        ),
        (
            "slo.failed_checks",
            Box::new(|r| {
                r.slo
                    .iter()
                    .flat_map(|v| &v.checks)
                    .filter(|c| !c.passed && !c.inconclusive)
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(";")
            }),
        ),
        (
            // Could not decide: neither passed nor failed (exit 5, not 3).
            "slo.inconclusive_checks",
            Box::new(|r| {
                r.slo
                    .iter()
                    .flat_map(|v| &v.checks)
                    .filter(|c| c.inconclusive && !c.passed)
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(";")
            }),
        ),
        (
            "slo.verdict",
            Box::new(|r| {
                r.slo
                    .as_ref()
                    .map(|v| v.label().to_lowercase())
                    .unwrap_or_default()
            }),
        ),
        (
            "slo.reasons",
            Box::new(|r| {
                let mut reasons: Vec<String> = Vec::new();
                for c in r.slo.iter().flat_map(|v| &v.checks).filter(|c| !c.passed) {
                    // A check that failed on its measurement alone says so, beside the
                    // reasons of the others (an inconclusive one's, the kept-up rule's).
                    let x = c.reason.clone().unwrap_or_else(|| match c.measured {
                        Some(m) => format!("{}: measured {m:.3}", c.name),
                        None => format!("{}: failed", c.name),
                    });
                    if !reasons.contains(&x) {
                        reasons.push(x);
                    }
                }
                reasons.join(" | ")
            }),
        ),
        (
            "goodput.good_requests",
            Box::new(|r| {
                r.goodput
                    .as_ref()
                    .map(|g| g.good_requests.to_string())
                    .unwrap_or_default()
            }),
        ),
        (
            "goodput.requests_per_s",
            Box::new(|r| opt_float(r.goodput.as_ref().map(|g| g.requests_per_s))),
        ),
        (
            "goodput.fraction",
            Box::new(|r| opt_float(r.goodput.as_ref().map(|g| g.fraction))),
        ),
    ];
    // Only a report with an embeddings or rerank benchmark has these columns.
    if report
        .benchmarks
        .iter()
        .any(|r| r.throughput.inputs_per_s.is_some())
    {
        cols.push((
            "throughput.inputs_per_s",
            Box::new(|r| opt_float(r.throughput.inputs_per_s)),
        ));
        cols.push((
            "throughput.input_tokens_per_s",
            Box::new(|r| opt_float(r.throughput.input_tokens_per_s)),
        ));
    }
    cols
}

/// A server-metrics cell and its column name; a benchmark without server metrics has an
/// empty cell.
type ServerColumn = (String, Box<dyn Fn(&ServerMetrics) -> String>);

/// The `server.*` columns: present only when a benchmark of the report has server metrics
/// (a report without them keeps the header it always had), and then the same set whichever
/// server was scraped and whatever it published (a series it lacks is an empty cell), so
/// CSVs of vLLM and SGLang runs line up. Series kept by `--server-metrics-include` follow,
/// the union over the report's benchmarks in name order.
fn server_columns(report: &Report) -> Vec<ServerColumn> {
    if !server::any(&report.benchmarks) {
        return Vec::new();
    }
    let mut cols: Vec<ServerColumn> = vec![
        ("server.url".into(), Box::new(|s| s.url.clone())),
        (
            "server.server".into(),
            Box::new(|s| s.server.clone().unwrap_or_default()),
        ),
        ("server.scrapes".into(), Box::new(|s| s.scrapes.to_string())),
        (
            "server.scrape_errors".into(),
            Box::new(|s| server::scrape_errors(s).to_string()),
        ),
        (
            "server.scrape_error_kinds".into(),
            Box::new(|s| {
                s.scrape_errors
                    .iter()
                    .map(|e| format!("{}={}", e.kind, e.count))
                    .collect::<Vec<_>>()
                    .join(";")
            }),
        ),
    ];
    for g in server::GAUGES {
        cols.push((
            format!("server.{g}.mean"),
            Box::new(move |s| opt_float(server::gauge(s, g).0)),
        ));
        cols.push((
            format!("server.{g}.max"),
            Box::new(move |s| opt_float(server::gauge(s, g).1)),
        ));
    }
    for c in server::COUNTERS {
        cols.push((
            format!("server.{c}.delta"),
            Box::new(move |s| opt_float(server::counter(s, c).0)),
        ));
        cols.push((
            format!("server.{c}.rate_per_s"),
            Box::new(move |s| opt_float(server::counter(s, c).1)),
        ));
    }
    for h in server::HISTOGRAMS {
        cols.push((
            format!("server.{h}.count"),
            Box::new(move |s| opt_float(s.histograms.get(h).map(|h| h.count))),
        ));
        cols.push((
            format!("server.{h}.mean"),
            Box::new(move |s| opt_float(s.histograms.get(h).and_then(|h| h.mean))),
        ));
    }
    cols.push((
        "server.prefix_cache_hit_rate".into(),
        Box::new(|s| opt_float(s.derived.prefix_cache_hit_rate)),
    ));
    cols.push((
        "server.spec_decode_acceptance_rate".into(),
        Box::new(|s| opt_float(s.derived.spec_decode_acceptance_rate)),
    ));
    for x in server::CROSS_CHECKS {
        cols.push((
            format!("server.cross_check.{x}.server"),
            Box::new(move |s| opt_float(server::cross_check(s, x).map(|c| c.server))),
        ));
        cols.push((
            format!("server.cross_check.{x}.client"),
            Box::new(move |s| opt_float(server::cross_check(s, x).map(|c| c.client))),
        ));
        cols.push((
            format!("server.cross_check.{x}.client_upper"),
            Box::new(move |s| opt_float(server::cross_check(s, x).and_then(|c| c.client_upper))),
        ));
        cols.push((
            format!("server.cross_check.{x}.difference"),
            Box::new(move |s| opt_float(server::cross_check(s, x).map(|c| c.difference))),
        ));
        cols.push((
            format!("server.cross_check.{x}.agrees"),
            Box::new(move |s| {
                server::cross_check(s, x)
                    .map(|c| c.agrees.to_string())
                    .unwrap_or_default()
            }),
        ));
    }
    cols.push((
        "server.warnings".into(),
        Box::new(|s| s.warnings.join(" | ")),
    ));
    let extra: std::collections::BTreeSet<String> = report
        .benchmarks
        .iter()
        .filter_map(|b| b.server_metrics.as_ref())
        .flat_map(|s| server::extra_series(s).map(|(name, _)| name.clone()))
        .collect();
    for name in extra {
        // Every statistic, whatever its kind: a column's meaning may not depend on
        // which benchmark published the series.
        type Pick = fn(&SeriesSummary) -> Option<f64>;
        let stats: [(&str, Pick); 4] = [
            ("delta", |s| s.delta),
            ("rate_per_s", |s| s.rate_per_s),
            ("mean", |s| s.mean),
            ("max", |s| s.max),
        ];
        for (stat, pick) in stats {
            let key = name.clone();
            cols.push((
                format!("server.{name}.{stat}"),
                Box::new(move |s| opt_float(server::summary(s, &key).and_then(pick))),
            ));
        }
    }
    cols
}

/// The `--lora` models of a report, in the order they first appear: one column group
/// each (a report without a split keeps the header it always had).
fn model_names(report: &Report) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for m in report.benchmarks.iter().flat_map(|b| &b.models) {
        if !names.contains(&m.model.as_str()) {
            names.push(&m.model);
        }
    }
    names
}

/// The counts and throughput columns of one model, after `model.<name>.`.
const MODEL_FIXED: [&str; 14] = [
    "weight",
    "share",
    "requests.created",
    "requests.completed",
    "requests.errored",
    "requests.cancelled",
    "measured.completed",
    "measured.errored",
    "measured.cancelled",
    "errors.kinds",
    "throughput.requests_per_s",
    "throughput.output_tokens_per_s",
    "throughput.total_tokens_per_s",
    "throughput.concurrency_mean",
];

fn model_fixed_values(b: &BenchmarkResult, m: &ModelResult) -> Vec<String> {
    let created: u64 = b.models.iter().map(|m| m.requests.created).sum();
    let share = if created > 0 {
        m.requests.created as f64 / created as f64
    } else {
        0.0
    };
    vec![
        float(m.weight),
        float(share),
        m.requests.created.to_string(),
        m.requests.completed.to_string(),
        m.requests.errored.to_string(),
        m.requests.cancelled.to_string(),
        m.measured_requests.completed.to_string(),
        m.measured_requests.errored.to_string(),
        m.measured_requests.cancelled.to_string(),
        m.errors
            .iter()
            .map(|e| format!("{}={}", e.kind, e.count))
            .collect::<Vec<_>>()
            .join(";"),
        float(m.throughput.requests_per_s),
        opt_float(m.throughput.output_tokens_per_s),
        float(m.throughput.total_tokens_per_s),
        float(m.throughput.concurrency_mean),
    ]
}

/// Every distribution's statistics, per metric and status, as the header names them.
fn distribution_values(metrics: &BTreeMap<String, StatusDistributions>) -> Vec<String> {
    let mut row = Vec::new();
    for metric in csv_metrics() {
        let m = metrics.get(metric.key());
        for status in STATUSES {
            let d = m.map(|m| match status {
                "successful" => &m.successful,
                "errored" => &m.errored,
                "incomplete" => &m.incomplete,
                _ => &m.total,
            });
            row.extend(stat_values(d));
        }
    }
    row
}

/// The distributions of the CSV, in column order: the report's own
/// ([`Metric::REPORTED`]), TTFT and e2e from intent each right after its from-send twin.
fn csv_metrics() -> Vec<Metric> {
    let mut out = Vec::new();
    for metric in Metric::REPORTED {
        out.push(metric);
        match metric {
            Metric::Ttft => out.push(Metric::TtftFromIntent),
            Metric::RequestLatency => out.push(Metric::RequestLatencyFromIntent),
            _ => {}
        }
    }
    out
}

fn distribution_names(prefix: &str) -> Vec<String> {
    let stats = stat_names();
    let mut h = Vec::new();
    for metric in csv_metrics() {
        for status in STATUSES {
            for stat in &stats {
                h.push(format!("{prefix}{}.{status}.{stat}", metric_group(metric)));
            }
        }
    }
    h
}

/// The header of a report's CSV.
pub fn header(report: &Report) -> Vec<String> {
    let mut h: Vec<String> = fixed_columns(report)
        .iter()
        .map(|(name, _)| name.to_string())
        .collect();
    h.extend(distribution_names(""));
    h.extend(server_columns(report).into_iter().map(|(name, _)| name));
    // `--lora`: each model's columns, `model.<name>.` then what the whole has.
    for name in model_names(report) {
        let prefix = format!("model.{name}.");
        h.extend(MODEL_FIXED.iter().map(|c| format!("{prefix}{c}")));
        h.extend(distribution_names(&prefix));
    }
    h.extend(session_names(report));
    h.extend(super::agent_traces::csv_names(&report.benchmarks));
    h.extend(super::steady::csv_names(report));
    h.extend(super::gpu::csv_names(report));
    h.extend(super::across_runs::csv_names(&report.across_runs));
    h.extend(super::fingerprint::csv_names(report));
    h.extend(report.metadata.extras.keys().map(|k| format!("extras.{k}")));
    h
}

/// Multi-turn sessions' counts and rates, after `sessions.`; `rate_means` says what
/// `--rate` counted (`users` or `sessions_per_second`), as in the JSON report.
const SESSION_FIXED: [&str; 16] = [
    "sessions.rate_means",
    "sessions.started",
    "sessions.completed",
    "sessions.failed",
    "sessions.gave_up",
    "sessions.unfinished",
    "sessions.turns_planned",
    "sessions.turns_completed",
    "sessions.turns_failed",
    "sessions.turns_given_up",
    "sessions.turns_skipped",
    "sessions.turns_unfinished",
    "sessions.sessions_per_s",
    "sessions.turns_per_s",
    "sessions.duration_ms.p50",
    "sessions.duration_ms.p99",
];

/// The most turns any benchmark's sessions had (0 without sessions).
fn session_turns(report: &Report) -> usize {
    report
        .benchmarks
        .iter()
        .filter_map(|b| b.sessions.as_ref())
        .map(|s| s.per_turn.len())
        .max()
        .unwrap_or(0)
}

/// The session columns: none without sessions, else the counts then TTFT per turn.
fn session_names(report: &Report) -> Vec<String> {
    if report.benchmarks.iter().all(|b| b.sessions.is_none()) {
        return Vec::new();
    }
    let mut h: Vec<String> = SESSION_FIXED.iter().map(|c| c.to_string()).collect();
    for t in 1..=session_turns(report) {
        h.push(format!("sessions.turn{t}.ttft_ms.p50"));
        h.push(format!("sessions.turn{t}.ttft_ms.p99"));
    }
    h
}

fn session_values(report: &Report, r: &BenchmarkResult) -> Vec<String> {
    let width = session_names(report).len();
    let Some(s) = &r.sessions else {
        return vec![String::new(); width];
    };
    let summary = |v: &Option<llmsurge_coordinator::sessions::Summary>, p99: bool| {
        v.as_ref()
            .map(|v| float(if p99 { v.p99 } else { v.p50 }))
            .unwrap_or_default()
    };
    let rate_means = match s.rate_means {
        llmsurge_coordinator::sessions::RateMeans::Users => "users",
        llmsurge_coordinator::sessions::RateMeans::SessionsPerSecond => "sessions_per_second",
    };
    let mut row = vec![
        rate_means.to_string(),
        s.sessions.to_string(),
        s.completed.to_string(),
        s.failed.to_string(),
        s.gave_up.to_string(),
        s.unfinished.to_string(),
        s.turns_planned.to_string(),
        s.turns_completed.to_string(),
        s.turns_failed.to_string(),
        s.turns_given_up.to_string(),
        s.turns_skipped.to_string(),
        s.turns_unfinished.to_string(),
        float(s.sessions_per_s),
        float(s.turns_per_s),
        summary(&s.duration_ms, false),
        summary(&s.duration_ms, true),
    ];
    for i in 0..session_turns(report) {
        let t = s.per_turn.get(i);
        row.push(t.map(|t| summary(&t.ttft_ms, false)).unwrap_or_default());
        row.push(t.map(|t| summary(&t.ttft_ms, true)).unwrap_or_default());
    }
    row
}

fn row(report: &Report, r: &BenchmarkResult) -> Vec<String> {
    let mut row: Vec<String> = fixed_columns(report).iter().map(|(_, f)| f(r)).collect();
    row.extend(distribution_values(&r.metrics));
    row.extend(
        server_columns(report)
            .iter()
            .map(|(_, f)| r.server_metrics.as_ref().map(f).unwrap_or_default()),
    );
    for name in model_names(report) {
        match r.models.iter().find(|m| m.model == name) {
            Some(m) => {
                row.extend(model_fixed_values(r, m));
                row.extend(distribution_values(&m.metrics));
            }
            // A benchmark without this model (a merged report of other splits): empty.
            None => row.extend(std::iter::repeat_n(
                String::new(),
                MODEL_FIXED.len() + distribution_names("").len(),
            )),
        }
    }
    row.extend(session_values(report, r));
    row.extend(super::agent_traces::csv_values(&report.benchmarks, r));
    row.extend(super::steady::csv_values(report, r));
    row.extend(super::gpu::csv_values(report, r));
    row.extend(super::across_runs::csv_values(&report.across_runs, r));
    row.extend(super::fingerprint::csv_values(report));
    row.extend(report.metadata.extras.values().map(|v| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }));
    row
}

/// Renders the CSV: a header and one row per benchmark.
pub fn render(report: &Report) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(super::cells::inert_record(header(report)))?;
    for b in &report.benchmarks {
        w.write_record(super::cells::inert_record(row(report, b)))?;
    }
    w.into_inner()
        .map_err(|e| csv::Error::from(std::io::Error::other(e.to_string())))
}
