//! Console summary tables, one row per benchmark.

use comfy_table::{Cell, CellAlignment, ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::result::StatusDistributions;
use llmsurge_coordinator::server_metrics::ServerMetrics;

pub use super::num;

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled);
    t.set_header(header.iter().map(Cell::new));
    for i in 1..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn metric<'a>(b: &'a BenchmarkResult, key: &str) -> Option<&'a StatusDistributions> {
    b.metrics.get(key)
}

/// Everything the console shows at the end of a run: the tables, then the SLO verdicts
/// and the capacity answer when there are any.
pub fn summary(
    benchmarks: &[BenchmarkResult],
    capacity: Option<&llmsurge_coordinator::profiles::CapacityOutcome>,
) -> String {
    let mut out = render(benchmarks);
    let verdicts = super::verdicts::render(benchmarks, capacity);
    if !verdicts.is_empty() {
        out.push('\n');
        out.push_str(&verdicts);
    }
    out
}

/// Renders the summary tables of a run.
pub fn render(benchmarks: &[BenchmarkResult]) -> String {
    let mut out = String::new();
    let mut requests = table(&[
        "Benchmark",
        "Duration s",
        "Completed",
        "Errored",
        "Cancelled",
        "Req/s",
        "Output tok/s",
        "Total tok/s",
        "Concurrency",
        "Peak",
    ]);
    // The measured window's counts and length, as the report's `measured_requests` and
    // `measured_window` (what Req/s divides): warm-up and cool-down requests are not in
    // them, nor the time before the first measured request.
    let mut outside = Vec::new();
    for b in benchmarks {
        let m = &b.measured_requests;
        let (warmup, cooldown) = (b.requests.warmup, b.requests.cooldown);
        if warmup + cooldown > 0 {
            outside.push(format!(
                "{}: {warmup} warm-up, {cooldown} cool-down",
                super::label(b)
            ));
        }
        requests.add_row(vec![
            super::label(b),
            num(b.measured_window.duration_s),
            m.completed.to_string(),
            m.errored.to_string(),
            match b.requests.cancelled_planned {
                0 => m.cancelled.to_string(),
                // Counted over every window only.
                planned if warmup + cooldown > 0 => {
                    format!("{} ({planned} planned, all windows)", m.cancelled)
                }
                planned => format!("{} ({planned} planned)", m.cancelled),
            },
            num(b.throughput.requests_per_s),
            // Absent for a format without output (embeddings, rerank, score).
            b.throughput
                .output_tokens_per_s
                .map_or_else(|| "-".into(), num),
            num(b.throughput.total_tokens_per_s),
            num(b.throughput.concurrency_mean),
            b.throughput.concurrency_peak.to_string(),
        ]);
    }
    out.push_str("Requests and throughput (measured window)\n");
    out.push_str(&requests.to_string());
    out.push('\n');
    if !outside.is_empty() {
        out.push_str(&format!(
            "Requests outside the measured window, not counted above: {} (the report's `requests` counts every window).\n",
            outside.join("; ")
        ));
    }

    // Columns of metrics no benchmark has (embeddings and rerank generate no tokens:
    // no TTFT, ITL or TPOT) are left out, not shown as zeros.
    type Pick = fn(&StatusDistributions) -> f64;
    let columns: [(&str, &str, Pick); 10] = [
        ("TTFT mean", "ttft", |d| d.successful.mean),
        ("TTFT p50", "ttft", |d| d.successful.percentiles.p50),
        ("TTFT p99", "ttft", |d| d.successful.percentiles.p99),
        ("ITL mean", "itl", |d| d.successful.mean),
        ("ITL p50", "itl", |d| d.successful.percentiles.p50),
        ("ITL p99", "itl", |d| d.successful.percentiles.p99),
        ("TPOT p50", "tpot", |d| d.successful.percentiles.p50),
        ("E2E p50", "request_latency", |d| {
            d.successful.percentiles.p50
        }),
        ("E2E p99", "request_latency", |d| {
            d.successful.percentiles.p99
        }),
        ("Lag p99", "dispatch_lag", |d| d.total.percentiles.p99),
    ];
    let shown: Vec<_> = columns
        .iter()
        .filter(|(_, key, _)| benchmarks.iter().any(|b| metric(b, key).is_some()))
        .collect();
    let mut header = vec!["Benchmark"];
    header.extend(shown.iter().map(|(name, _, _)| *name));
    let mut latency = table(&header);
    for b in benchmarks {
        let mut row = vec![super::label(b)];
        row.extend(
            shown
                .iter()
                .map(|(_, key, f)| metric(b, key).map_or("-".into(), |d| num(f(d)))),
        );
        latency.add_row(row);
    }
    out.push_str("\nLatency of successful requests (ms)\n");
    out.push_str(&latency.to_string());
    out.push('\n');
    if shown.iter().any(|(_, key, _)| *key == "ttft") {
        out.push_str(
            "TTFT: first content token (ttft_any in the report: first token of any kind). ITL, TPOT: every output token, reasoning included.\n",
        );
    }
    if benchmarks.iter().any(|b| b.unstreamed()) {
        out.push_str(
            "Without streaming (--stream false) the first token comes with the whole body: TTFT is the e2e latency, and ITL and TPOT are not measured (-).\n",
        );
    }
    let connections = super::connections::rows(benchmarks);
    if !connections.is_empty() {
        let mut t = table(&super::connections::HEADERS);
        for r in connections {
            let mut row = vec![r.label];
            row.extend(r.cells);
            t.add_row(row);
        }
        out.push_str("\nConnections (measured window)\n");
        out.push_str(&t.to_string());
        out.push('\n');
    }
    let lengths = super::output_lengths::rows(benchmarks);
    if !lengths.is_empty() {
        let mut t = table(&super::output_lengths::HEADERS);
        for r in lengths {
            let mut row = vec![r.label];
            row.extend(r.cells);
            t.add_row(row);
        }
        out.push_str("\nOutput lengths (completed measured requests)\n");
        out.push_str(&t.to_string());
        out.push('\n');
    }
    let queue = super::queue::rows(benchmarks);
    if !queue.is_empty() {
        let mut t = table(&super::queue::HEADERS);
        for r in queue {
            let mut row = vec![r.label];
            row.extend(r.cells);
            t.add_row(row);
        }
        out.push_str("\nClient queue time (measured window)\n");
        out.push_str(&t.to_string());
        out.push('\n');
        out.push_str(super::queue::HINT);
        out.push('\n');
    }
    if benchmarks.iter().any(|b| b.goodput.is_some()) {
        // Planned give-ups get a column only where there were some (`--cancel`).
        let planned = benchmarks
            .iter()
            .any(|b| b.goodput.is_some_and(|g| g.planned > 0));
        let mut headers = vec!["Benchmark", "Thresholds", "Good", "Good/s", "Fraction"];
        if planned {
            headers.push("Given up (--cancel)");
        }
        let mut goodput = table(&headers);
        for b in benchmarks {
            let Some(g) = &b.goodput else {
                continue;
            };
            let mut row = vec![
                super::label(b),
                g.spec.to_string(),
                g.good_requests.to_string(),
                num(g.requests_per_s),
                format!("{:.1}%", g.fraction * 100.0),
            ];
            if planned {
                row.push(g.planned.to_string());
            }
            goodput.add_row(row);
        }
        out.push_str(
            "\nGoodput (--goodput: completed requests meeting every threshold; the fraction counts errored and unfinished requests as not good)\n",
        );
        if planned {
            out.push_str(
                "Requests given up by plan (--cancel) are the client's choice, not the server's failure: neither good nor counted in the fraction.\n",
            );
        }
        out.push_str(&goodput.to_string());
        out.push('\n');
    }
    if benchmarks
        .iter()
        .any(|b| b.throughput.inputs_per_s.is_some())
    {
        let mut inputs = table(&["Benchmark", "Inputs/s", "Input tok/s"]);
        for b in benchmarks {
            let opt = |v: Option<f64>| v.map_or("-".into(), num);
            inputs.add_row(vec![
                super::label(b),
                opt(b.throughput.inputs_per_s),
                opt(b.throughput.input_tokens_per_s),
            ]);
        }
        out.push_str("\nInputs (embeddings: texts; rerank, score: documents)\n");
        out.push_str(&inputs.to_string());
        out.push('\n');
    }

    if benchmarks.iter().any(|b| !b.models.is_empty()) {
        out.push_str(
            "\nPer model (--lora; measured window, latencies of successful requests in ms)\n",
        );
        out.push_str(&models_table(benchmarks).to_string());
        out.push('\n');
    }

    if benchmarks.iter().any(|b| b.sessions.is_some()) {
        out.push_str(&sessions_block(benchmarks));
    }
    let agent = super::agent_traces::rows(benchmarks);
    if !agent.is_empty() {
        use super::agent_traces as at;
        let mut t = table(&at::HEADERS);
        for r in agent {
            let mut row = vec![r.label];
            row.extend(r.cells);
            t.add_row(row);
        }
        out.push_str("\nAgent traces\n");
        out.push_str(&t.to_string());
        out.push('\n');
        let (traces, left_out) = at::trace_rows(benchmarks);
        let mut t = table(&at::TRACE_HEADERS);
        for r in traces {
            let mut row = vec![r.label];
            row.extend(r.cells);
            t.add_row(row);
        }
        out.push_str(&t.to_string());
        out.push('\n');
        if let Some(note) = at::left_out_note(left_out) {
            out.push_str(&note);
            out.push('\n');
        }
        out.push_str(at::HINT);
        out.push('\n');
    }

    for b in benchmarks {
        let notes = super::notes(b);
        if !notes.is_empty() {
            out.push_str(&format!("\n{}:\n", super::label(b)));
            for n in notes {
                // A note quotes server text (error samples): one inert line each.
                out.push_str(&format!("  {}\n", llmsurge_proto::inert::terminal(&n)));
            }
        }
    }
    if super::server::any(benchmarks) {
        out.push_str("\nServer metrics (the server's /metrics, measured window)\n");
        for b in benchmarks {
            if let Some(sm) = &b.server_metrics {
                out.push_str(&server_block(&super::label(b), sm));
            }
        }
    }
    out
}

/// Multi-turn sessions: outcomes and rates per benchmark, then the latencies per turn
/// index.
fn sessions_block(benchmarks: &[BenchmarkResult]) -> String {
    use llmsurge_coordinator::sessions::{RateMeans, Summary};
    let mut out = String::from("\nSessions\n");
    let mut t = table(&[
        "Benchmark",
        "--rate meant",
        "Sessions",
        "Completed",
        "Failed",
        "Gave up",
        "Unfinished",
        "Turns done",
        "Skipped",
        "Sessions/s",
        "Requests/s",
        "Duration p50 ms",
        "Duration p99 ms",
    ]);
    let p =
        |s: &Option<Summary>, f: fn(&Summary) -> f64| s.as_ref().map_or("-".into(), |s| num(f(s)));
    for b in benchmarks {
        let Some(s) = &b.sessions else { continue };
        t.add_row(vec![
            super::label(b),
            match s.rate_means {
                RateMeans::Users => "concurrent users".into(),
                RateMeans::SessionsPerSecond => "new sessions/s".to_string(),
            },
            s.sessions.to_string(),
            s.completed.to_string(),
            s.failed.to_string(),
            s.gave_up.to_string(),
            s.unfinished.to_string(),
            format!("{}/{}", s.turns_completed, s.turns_planned),
            s.turns_skipped.to_string(),
            num(s.sessions_per_s),
            num(s.turns_per_s),
            p(&s.duration_ms, |s| s.p50),
            p(&s.duration_ms, |s| s.p99),
        ]);
    }
    out.push_str(&t.to_string());
    out.push_str("\n\nPer turn (measured successful requests, ms)\n");
    let mut t = table(&[
        "Benchmark",
        "Turn",
        "Requests",
        "TTFT p50",
        "TTFT p99",
        "E2E p50",
        "E2E p99",
    ]);
    for b in benchmarks {
        let Some(s) = &b.sessions else { continue };
        for turn in &s.per_turn {
            t.add_row(vec![
                super::label(b),
                turn.turn.to_string(),
                turn.requests.to_string(),
                p(&turn.ttft_ms, |s| s.p50),
                p(&turn.ttft_ms, |s| s.p99),
                p(&turn.e2e_latency_ms, |s| s.p50),
                p(&turn.e2e_latency_ms, |s| s.p99),
            ]);
        }
    }
    out.push_str(&t.to_string());
    out.push('\n');
    out
}

/// One row per model of a `--lora` split, per benchmark: its share, counts, throughput
/// and the main latencies, as the whole benchmark's tables have them.
fn models_table(benchmarks: &[BenchmarkResult]) -> Table {
    let mut t = table(&[
        "Benchmark",
        "Model",
        "Share %",
        "Completed",
        "Errored",
        "Cancelled",
        "Req/s",
        "Output tok/s",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "TPOT p50",
        "E2E p50",
        "E2E p99",
    ]);
    if let Some(c) = t.column_mut(1) {
        c.set_cell_alignment(CellAlignment::Left);
    }
    for b in benchmarks {
        let created: u64 = b.models.iter().map(|m| m.requests.created).sum();
        for m in &b.models {
            // A model with no successful request has no latency to show (not 0).
            let s = |key: &str, f: fn(&StatusDistributions) -> f64| {
                m.metrics
                    .get(key)
                    .filter(|d| d.successful.count > 0)
                    .map_or("-".into(), |d| num(f(d)))
            };
            let share = if created > 0 {
                100.0 * m.requests.created as f64 / created as f64
            } else {
                0.0
            };
            t.add_row(vec![
                super::label(b),
                llmsurge_proto::inert::terminal(&m.model).into_owned(),
                num(share),
                m.measured_requests.completed.to_string(),
                m.measured_requests.errored.to_string(),
                m.measured_requests.cancelled.to_string(),
                num(m.throughput.requests_per_s),
                m.throughput
                    .output_tokens_per_s
                    .map_or_else(|| "-".into(), num),
                s("ttft", |d| d.successful.percentiles.p50),
                s("ttft", |d| d.successful.percentiles.p99),
                s("itl", |d| d.successful.percentiles.p50),
                s("tpot", |d| d.successful.percentiles.p50),
                s("request_latency", |d| d.successful.percentiles.p50),
                s("request_latency", |d| d.successful.percentiles.p99),
            ]);
        }
    }
    t
}

/// One benchmark's server metrics in a few lines: where they came from, the queue and
/// KV-cache gauges, the token counters, the derived rates, the server's own latencies,
/// the cross-checks against the client's counts, and the warnings.
fn server_block(label: &str, sm: &ServerMetrics) -> String {
    use super::server::{self as srv, figure, percent};
    let mut out = format!("{label}: {}, {}\n", srv::source(sm), srv::scrapes_line(sm));
    let gauges: Vec<String> = [
        ("num_requests_waiting", "waiting"),
        ("num_requests_running", "running"),
        ("kv_cache_usage_perc", "KV-cache use"),
        ("cache_hit_rate", "cache hit rate"),
    ]
    .iter()
    .filter(|(name, _)| srv::summary(sm, name).is_some())
    .map(|(name, what)| format!("{what} {}", srv::mean_max(sm, name)))
    .collect();
    if !gauges.is_empty() {
        out.push_str(&format!("  mean / max: {}\n", gauges.join(" · ")));
    }
    let counters: Vec<String> = [
        ("generation_tokens", "generation tokens"),
        ("prompt_tokens", "prompt tokens"),
        ("request_success", "requests succeeded"),
        ("num_preemptions", "preemptions"),
    ]
    .iter()
    .filter_map(|(name, what)| {
        let (delta, rate) = srv::counter(sm, name);
        let delta = delta?;
        let rate = rate.map(|r| format!(" ({}/s)", num(r))).unwrap_or_default();
        Some(format!("{what} +{}{rate}", figure(Some(delta))))
    })
    .collect();
    if !counters.is_empty() {
        out.push_str(&format!("  counted: {}\n", counters.join(" · ")));
    }
    let mut derived = Vec::new();
    if let Some(r) = sm.derived.prefix_cache_hit_rate {
        derived.push(format!("prefix-cache hit rate {}", percent(Some(r))));
    }
    if let Some(r) = sm.derived.spec_decode_acceptance_rate {
        derived.push(format!("spec-decode acceptance {}", percent(Some(r))));
    }
    for (name, what) in [
        ("time_to_first_token_seconds", "server TTFT"),
        ("e2e_request_latency_seconds", "server e2e"),
    ] {
        if let Some(h) = sm.histograms.get(name) {
            let mean = h
                .mean
                .map_or("–".into(), |m| format!("{} ms", num(m * 1000.0)));
            derived.push(format!(
                "{what} mean {mean} ({} requests)",
                figure(Some(h.count))
            ));
        }
    }
    if !derived.is_empty() {
        out.push_str(&format!("  {}\n", derived.join(" · ")));
    }
    let extra: Vec<String> = srv::extra_series(sm)
        .map(|(name, s)| {
            if srv::is_counter(s) {
                format!("{name} +{}", figure(s.delta))
            } else {
                format!("{name} {} / {}", figure(s.mean), figure(s.max))
            }
        })
        .collect();
    if !extra.is_empty() {
        out.push_str(&format!("  also kept: {}\n", extra.join(" · ")));
    }
    for c in &sm.cross_checks {
        out.push_str(&format!("  cross-check {}\n", srv::cross_check_line(c)));
    }
    for w in &sm.warnings {
        out.push_str(&format!(
            "  warning: {}\n",
            llmsurge_proto::inert::terminal(w)
        ));
    }
    out
}
