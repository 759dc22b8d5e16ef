//! The HTML report: one self-contained page that works offline.
//!
//! Tables are rendered here, through a minijinja template (auto-escaped: error messages
//! come from the server and may contain markup). Charts are drawn in the browser by
//! uPlot, which is embedded in the binary (`assets/uplot`, MIT; LZMA-packed, see
//! `crate::packed`), from the chart descriptions of [`super::charts`] embedded in the
//! page (the same ones the PNG and SVG images are drawn from); the page script
//! (`templates/report.js`) reads optional fields defensively, so reports of any number of
//! benchmarks, with metrics missing, or with fields added later (SLO verdicts) all render.

use super::json::Report;
use super::num;
use llmsurge_coordinator::BenchmarkResult;
use minijinja::value::Serde;
use minijinja::{Environment, context};
use serde::Serialize;

const TEMPLATE: &str = include_str!("templates/report.html");
pub(super) const PAGE_JS: &str = include_str!("templates/report.js");
pub(super) const PAGE_CSS: &str = include_str!("templates/report.css");
pub(super) const UPLOT_CSS: &str = include_str!("../../assets/uplot/uPlot.min.css");

/// One row of the summary table, formatted.
#[derive(Debug, Serialize)]
struct Row {
    label: String,
    duration: String,
    completed: u64,
    errored: u64,
    cancelled: u64,
    req_s: String,
    out_tok_s: String,
    concurrency: String,
    ttft_p50: String,
    ttft_p99: String,
    itl_p50: String,
    itl_p99: String,
    e2e_p50: String,
    e2e_p99: String,
    notes: Vec<String>,
}

fn successful(
    b: &BenchmarkResult,
    key: &str,
    pick: fn(&llmsurge_proto::Distribution) -> f64,
) -> String {
    match b.metrics.get(key) {
        Some(d) if d.successful.count > 0 => num(pick(&d.successful)),
        _ => "–".into(),
    }
}

fn row(b: &BenchmarkResult) -> Row {
    let p50 = |d: &llmsurge_proto::Distribution| d.percentiles.p50;
    let p99 = |d: &llmsurge_proto::Distribution| d.percentiles.p99;
    let notes = super::notes(b);
    Row {
        label: b.strategy.to_string(),
        // The measured window's, as Req/s: warm-up and cool-down are not in it.
        duration: num(b.measured_window.duration_s),
        completed: b.measured_requests.completed,
        errored: b.measured_requests.errored,
        cancelled: b.measured_requests.cancelled,
        req_s: num(b.throughput.requests_per_s),
        // A format without output (embeddings, rerank) has no output throughput.
        out_tok_s: b
            .throughput
            .output_tokens_per_s
            .map_or_else(|| "–".into(), num),
        concurrency: num(b.throughput.concurrency_mean),
        ttft_p50: successful(b, "ttft", p50),
        ttft_p99: successful(b, "ttft", p99),
        itl_p50: successful(b, "itl", p50),
        itl_p99: successful(b, "itl", p99),
        e2e_p50: successful(b, "request_latency", p50),
        e2e_p99: successful(b, "request_latency", p99),
        notes,
    }
}

/// One model of a `--lora` split in the per-model table, formatted.
#[derive(Debug, Serialize)]
struct ModelRow {
    label: String,
    model: String,
    weight: String,
    share: String,
    completed: u64,
    errored: u64,
    cancelled: u64,
    req_s: String,
    out_tok_s: String,
    ttft_p50: String,
    ttft_p99: String,
    itl_p50: String,
    itl_p99: String,
    tpot_p50: String,
    e2e_p50: String,
    e2e_p99: String,
}

fn model_rows(b: &BenchmarkResult) -> Vec<ModelRow> {
    let created: u64 = b.models.iter().map(|m| m.requests.created).sum();
    b.models
        .iter()
        .map(|m| {
            let s = |key: &str, pick: fn(&llmsurge_proto::Distribution) -> f64| match m
                .metrics
                .get(key)
            {
                Some(d) if d.successful.count > 0 => num(pick(&d.successful)),
                _ => "–".into(),
            };
            let p50 = |d: &llmsurge_proto::Distribution| d.percentiles.p50;
            let p99 = |d: &llmsurge_proto::Distribution| d.percentiles.p99;
            let share = if created > 0 {
                100.0 * m.requests.created as f64 / created as f64
            } else {
                0.0
            };
            ModelRow {
                label: b.strategy.to_string(),
                model: m.model.clone(),
                weight: format!("{}%", num(100.0 * m.weight)),
                share: format!("{}%", num(share)),
                completed: m.measured_requests.completed,
                errored: m.measured_requests.errored,
                cancelled: m.measured_requests.cancelled,
                req_s: num(m.throughput.requests_per_s),
                out_tok_s: m
                    .throughput
                    .output_tokens_per_s
                    .map_or_else(|| "–".into(), num),
                ttft_p50: s("ttft", p50),
                ttft_p99: s("ttft", p99),
                itl_p50: s("itl", p50),
                itl_p99: s("itl", p99),
                tpot_p50: s("tpot", p50),
                e2e_p50: s("request_latency", p50),
                e2e_p99: s("request_latency", p99),
            }
        })
        .collect()
}

/// One benchmark's server metrics in the server table, formatted.
#[derive(Debug, Serialize)]
struct ServerRow {
    label: String,
    source: String,
    scrapes: u64,
    failed: u64,
    failures: String,
    waiting: String,
    running: String,
    kv: String,
    generation: String,
    prompt: String,
    succeeded: String,
    preemptions: String,
    prefix_hit: String,
    spec_accept: String,
    ttft: String,
    e2e: String,
    checks: Vec<CheckRow>,
    warnings: Vec<String>,
}

/// A cross-check, formatted.
#[derive(Debug, Serialize)]
struct CheckRow {
    name: String,
    server: String,
    client: String,
    difference: String,
    agrees: bool,
}

/// Multi-turn sessions: one row per benchmark with sessions, then one per turn index.
fn session_rows(b: &BenchmarkResult) -> Option<serde_json::Value> {
    use llmsurge_coordinator::sessions::Summary;
    let s = b.sessions.as_ref()?;
    let p = |v: &Option<Summary>, f: fn(&Summary) -> f64| {
        v.as_ref().map_or("–".into(), |v| num(f(v)))
    };
    let turns: Vec<_> = s
        .per_turn
        .iter()
        .map(|t| {
            serde_json::json!({
                "turn": t.turn,
                "requests": t.requests,
                "ttft_p50": p(&t.ttft_ms, |v| v.p50),
                "ttft_p99": p(&t.ttft_ms, |v| v.p99),
                "e2e_p50": p(&t.e2e_latency_ms, |v| v.p50),
                "e2e_p99": p(&t.e2e_latency_ms, |v| v.p99),
            })
        })
        .collect();
    Some(serde_json::json!({
        "label": b.strategy.to_string(),
        "rate_means": match s.rate_means {
            llmsurge_coordinator::sessions::RateMeans::Users => "concurrent users",
            llmsurge_coordinator::sessions::RateMeans::SessionsPerSecond => "new sessions/s",
        },
        "sessions": s.sessions,
        "completed": s.completed,
        "failed": s.failed,
        "gave_up": s.gave_up,
        "unfinished": s.unfinished,
        "turns": format!("{}/{}", s.turns_completed, s.turns_planned),
        "skipped": s.turns_skipped,
        "sessions_s": num(s.sessions_per_s),
        "req_s": num(s.turns_per_s),
        "duration_p50": p(&s.duration_ms, |v| v.p50),
        "duration_p99": p(&s.duration_ms, |v| v.p99),
        "per_turn": turns,
    }))
}

fn server_row(b: &BenchmarkResult) -> Option<ServerRow> {
    use super::server::{self as srv, figure, percent};
    let sm = b.server_metrics.as_ref()?;
    let delta = |name: &str| match srv::counter(sm, name) {
        (Some(d), Some(r)) => format!("{} ({}/s)", figure(Some(d)), num(r)),
        (d, _) => figure(d),
    };
    let ms = |name: &str| {
        sm.histograms
            .get(name)
            .and_then(|h| h.mean)
            .map_or("–".into(), |m| num(m * 1000.0))
    };
    Some(ServerRow {
        label: b.strategy.to_string(),
        source: srv::source(sm),
        scrapes: sm.scrapes,
        failed: srv::scrape_errors(sm),
        failures: sm
            .scrape_errors
            .iter()
            .map(|e| format!("{} × {} (e.g. {})", e.count, e.kind, e.sample))
            .collect::<Vec<_>>()
            .join("; "),
        waiting: srv::mean_max(sm, "num_requests_waiting"),
        running: srv::mean_max(sm, "num_requests_running"),
        kv: srv::mean_max(sm, "kv_cache_usage_perc"),
        generation: delta("generation_tokens"),
        prompt: delta("prompt_tokens"),
        succeeded: figure(srv::counter(sm, "request_success").0),
        preemptions: figure(srv::counter(sm, "num_preemptions").0),
        prefix_hit: percent(sm.derived.prefix_cache_hit_rate),
        spec_accept: percent(sm.derived.spec_decode_acceptance_rate),
        ttft: ms("time_to_first_token_seconds"),
        e2e: ms("e2e_request_latency_seconds"),
        checks: sm
            .cross_checks
            .iter()
            .map(|c| CheckRow {
                name: c.name.clone(),
                server: figure(Some(c.server)),
                client: srv::client_range(c),
                difference: format!("{:+.2}%", c.difference * 100.0),
                agrees: c.agrees,
            })
            .collect(),
        warnings: sm.warnings.clone(),
    })
}

/// The report and the labels the page script needs, as JSON safe to put inside a
/// `<script>` element: `<`, `>` and `&` are escaped (`\u003c` …), so no string in the
/// report can close the element.
fn page_data(report: &Report) -> Result<String, serde_json::Error> {
    #[derive(Serialize)]
    struct PageData<'a> {
        labels: Vec<String>,
        /// What each chart shows: the page script draws these, as `--outputs png,svg` do.
        charts: Vec<super::charts::Chart>,
        report: &'a Report,
    }
    let mut value = serde_json::to_value(PageData {
        labels: report
            .benchmarks
            .iter()
            .map(|b| b.strategy.to_string())
            .collect(),
        charts: super::charts::charts(report),
        report,
    })?;
    // The timeline's requests are drawn from `charts` (its bars): not twice in the page.
    if let Some(r) = value
        .pointer_mut("/report")
        .and_then(serde_json::Value::as_object_mut)
    {
        r.remove("timeline");
    }
    // The encoded histograms serve merging and comparisons, not the page: leave them out.
    if let Some(benchmarks) = value
        .pointer_mut("/report/benchmarks")
        .and_then(serde_json::Value::as_array_mut)
    {
        for b in benchmarks
            .iter_mut()
            .filter_map(serde_json::Value::as_object_mut)
        {
            b.remove("histograms");
            b.remove("class_histograms");
            for m in b
                .get_mut("models")
                .and_then(serde_json::Value::as_array_mut)
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_object_mut)
            {
                m.remove("class_histograms");
            }
        }
    }
    Ok(script_safe(&value.to_string()))
}

/// JSON safe inside a `<script>` element: `<`, `>` and `&` escaped (`\u003c` …), and the
/// characters the page's file writer would make visible (bidirectional, zero-width,
/// C1) as JSON's own `\u` escapes first: its `\u{202e}` is no JSON, and one such
/// character in a server's text left every chart of the page dead.
pub(super) fn script_safe(json: &str) -> String {
    llmsurge_proto::inert::json_chars(json)
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

pub use super::cells::utc;

/// Renders the page.
pub fn render(report: &Report) -> Result<String, minijinja::Error> {
    let mut env = Environment::new();
    // The name ends in .html: minijinja escapes every value unless marked safe.
    env.add_template("report.html", TEMPLATE)?;
    let data = page_data(report).map_err(|e| {
        minijinja::Error::new(minijinja::ErrorKind::BadSerialization, e.to_string())
    })?;
    let extras: Vec<(String, String)> = report
        .metadata
        .extras
        .iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), v)
        })
        .collect();
    let m = &report.metadata;
    let status = if m.interrupted {
        "interrupted"
    } else if m.complete {
        "complete"
    } else {
        "incomplete"
    };
    let capacity = report.capacity.as_ref().map(|c| {
        let probes: Vec<_> = c
            .probes
            .iter()
            .map(|p| {
                serde_json::json!({
                    "label": p.strategy.to_string(),
                    "rate": num(p.rate),
                    "passed": p.passed,
                })
            })
            .collect();
        let show = |v: Option<f64>| v.map(|v| c.variable.show(v));
        let tiers: Vec<_> = c
            .tiers
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name,
                    "objectives": t.objectives.join(","),
                    "value": show(t.value),
                    "fails_at": show(t.bracket.1),
                    "binding": t.binding,
                    "failing_runs": t.failing_runs,
                    "conclusion": t.conclusion,
                })
            })
            .collect();
        serde_json::json!({
            "rate": c.rate.map(num),
            "answer": show(c.rate),
            "unit": c.variable.unit(),
            "conclusion": c.conclusion,
            "probes": probes,
            "tiers": tiers,
        })
    });
    env.get_template("report.html")?.render(context! {
        title => format!("llmsurge report: {} on {}", report.target.model, report.target.base_url),
        model => &report.target.model,
        target => &report.target.base_url,
        mock => report.target.mock,
        version => &m.version,
        host => Serde(m.host.clone()),
        start => utc(m.start_time),
        end => utc(m.end_time),
        status => status,
        extras => Serde(extras),
        server_facts => Serde(report.server_fingerprint.as_ref().map(super::fingerprint::rows)),
        capacity => Serde(capacity),
        rows => Serde(report.benchmarks.iter().map(row).collect::<Vec<_>>()),
        model_rows => Serde(report.benchmarks.iter().flat_map(model_rows).collect::<Vec<_>>()),
        server_rows => Serde(report.benchmarks.iter().filter_map(server_row).collect::<Vec<_>>()),
        gpu => report.benchmarks.iter().any(|b| b.gpu.is_some()),
        has_slices => !report.slices.is_empty(),
        session_rows => Serde(report.benchmarks.iter().filter_map(session_rows).collect::<Vec<_>>()),
        connection_headers => Serde(super::connections::HEADERS),
        connection_rows => Serde(super::connections::rows(&report.benchmarks)),
        connection_hint => super::connections::HINT,
        output_length_headers => Serde(super::output_lengths::HEADERS),
        output_length_rows => Serde(super::output_lengths::rows(&report.benchmarks)),
        output_length_hint => super::output_lengths::HINT,
        output_length_warnings => Serde(super::output_lengths::warnings(&report.benchmarks)),
        queue_headers => Serde(super::queue::HEADERS),
        queue_rows => Serde(super::queue::rows(&report.benchmarks).into_iter().map(|r| serde_json::json!({"label": r.label, "cells": r.cells})).collect::<Vec<_>>()),
        queue_hint => super::queue::HINT,
        agent_headers => Serde(super::agent_traces::HEADERS),
        agent_rows => Serde(super::agent_traces::rows(&report.benchmarks)),
        agent_trace_headers => Serde(super::agent_traces::TRACE_HEADERS),
        agent_trace_rows => Serde(super::agent_traces::trace_rows(&report.benchmarks).0),
        agent_left_out => super::agent_traces::left_out_note(super::agent_traces::trace_rows(&report.benchmarks).1),
        agent_hint => super::agent_traces::HINT,
        steady_lines => Serde(report.benchmarks.iter().flat_map(super::steady::lines).collect::<Vec<_>>()),
        across_rows => Serde(super::across_runs::rows(&report.across_runs)),
        across_slo => Serde(super::across_runs::notes(&report.across_runs)),
        data => data,
        uplot_js => crate::packed::uplot_js(),
        uplot_css => UPLOT_CSS,
        page_js => PAGE_JS,
        page_css => PAGE_CSS,
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn page_json_survives_the_file_writer_with_a_servers_invisible_characters() {
        // A server header, a model root, a label: text with a right-to-left override,
        // a zero-width space and a line separator, as the page embeds and the file
        // writer then makes inert.
        let text = "a\u{202e}b\u{200b}c\u{2028}d</script>";
        let embedded = script_safe(&serde_json::to_string(text).expect("json"));
        let written = llmsurge_proto::inert::xml_chars(&embedded);
        let back: String = serde_json::from_str(&written).expect("still JSON");
        assert_eq!(back, text);
        assert!(!written.contains("</script>"), "{written}");
    }

    use super::*;

    #[test]
    fn utc_formats_civil_time() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000.9), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(f64::NAN), "");
    }
}
