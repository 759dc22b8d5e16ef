//! Markdown summaries for `$GITHUB_STEP_SUMMARY` or a pull-request comment.

use super::cell_value;
use crate::compare::tolerance::ChangeUnit;
use crate::compare::{Comparison, Verdict};
use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::profiles::CapacityOutcome;

/// Text for a cell or a line: inert Markdown ([`llmsurge_proto::inert::markdown`]).
fn escape(s: &str) -> String {
    llmsurge_proto::inert::markdown(s).into_owned()
}

/// Text inside a code span, where backslashes show as they are: only the cell break.
fn escape_code(s: &str) -> String {
    s.replace('|', "\\|").replace('`', "'")
}

/// A run: one row per benchmark, then the SLO verdicts when there are any.
pub fn run_summary(benchmarks: &[BenchmarkResult]) -> String {
    let mut out = String::from("## llmsurge benchmark\n\n");
    out.push_str("| Benchmark | Completed | Errored | Req/s | Output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | E2E p99 ms | SLO |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for b in benchmarks {
        let stat = |key: &str, p: &str| {
            b.metrics
                .get(key)
                .and_then(|d| d.successful.percentiles.get(p))
                .filter(|_| b.metrics[key].successful.count > 0)
        };
        let slo = match &b.slo {
            None => "–",
            Some(v) => verdict_cell(v.label()),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            escape(&super::label(b)),
            // The measured window's, as Req/s.
            b.measured_requests.completed,
            b.measured_requests.errored,
            cell_value(Some(b.throughput.requests_per_s)),
            // A format without output (embeddings, rerank) has no output throughput.
            cell_value(b.throughput.output_tokens_per_s),
            cell_value(stat("ttft", "p50")),
            cell_value(stat("ttft", "p99")),
            cell_value(stat("itl", "p50")),
            cell_value(stat("request_latency", "p99")),
            slo
        ));
    }
    // What makes the run invalid (exit 4), as stderr and the JSON's `invalid_run` say:
    // a summary whose figures do not stand says so first.
    for why in benchmarks
        .iter()
        .flat_map(llmsurge_coordinator::validity::invalid_reasons)
    {
        out.push_str(&format!("\n> **Invalid run:** {}\n", escape(&why)));
    }
    if benchmarks.iter().any(|b| b.slo.is_some()) {
        out.push_str("\n### Service-level objectives\n\n| Benchmark | Objective | Measured | Verdict |\n|---|---|---:|---|\n");
        for b in benchmarks {
            for c in b.slo.iter().flat_map(|v| &v.checks) {
                let reason = c
                    .reason
                    .as_ref()
                    .map(|r| format!(": {}", escape(r)))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "| {} | `{}` | {} | {}{reason} |\n",
                    escape(&super::label(b)),
                    escape_code(&c.name),
                    cell_value(c.measured),
                    verdict_cell(c.label())
                ));
            }
        }
    }
    if benchmarks.iter().any(|b| !b.models.is_empty()) {
        out.push_str(&models_section(benchmarks));
    }
    if benchmarks.iter().any(|b| b.sessions.is_some()) {
        out.push_str(&sessions_section(benchmarks));
    }
    out.push_str(&agent_traces_section(benchmarks));
    let connections = super::connections::rows(benchmarks);
    if !connections.is_empty() {
        out.push_str("\n### Connections\n\n| ");
        out.push_str(&super::connections::HEADERS.join(" | "));
        out.push_str(" |\n|---|---:|---:|---:|---:|---:|---:|\n");
        for r in connections {
            out.push_str(&format!(
                "| {} | {} |\n",
                escape(&r.label),
                r.cells.join(" | ")
            ));
        }
    }
    let lengths = super::output_lengths::rows(benchmarks);
    if !lengths.is_empty() {
        out.push_str("\n### Output lengths\n\n| ");
        out.push_str(&super::output_lengths::HEADERS.join(" | "));
        out.push_str(" |\n|---|---:|---:|---:|---|\n");
        for r in lengths {
            out.push_str(&format!(
                "| {} | {} |\n",
                escape(&r.label),
                r.cells.join(" | ")
            ));
        }
        out.push_str(&format!("\n{}\n", super::output_lengths::HINT));
        for w in super::output_lengths::warnings(benchmarks) {
            out.push_str(&format!("\n> **Warning:** {}\n", escape(&w)));
        }
    }
    let queue = super::queue::rows(benchmarks);
    if !queue.is_empty() {
        out.push_str("\n### Client queue time\n\n| ");
        out.push_str(&super::queue::HEADERS.join(" | "));
        out.push_str(" |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
        for r in queue {
            out.push_str(&format!(
                "| {} | {} |\n",
                escape(&r.label),
                r.cells.join(" | ")
            ));
        }
        out.push_str(&format!("\n{}\n", super::queue::HINT));
    }
    if super::server::any(benchmarks) {
        out.push_str(&server_section(benchmarks));
    }
    out
}

/// The answer of a capacity search: the value found, and with `--slo-tier` one row per
/// tier (its answer, the failing value above it, the objective that bound it).
pub fn capacity(c: Option<&CapacityOutcome>) -> String {
    let Some(c) = c else {
        return String::new();
    };
    let show = |v: Option<f64>| v.map_or_else(|| "none".to_string(), |v| c.variable.show(v));
    let mut out = String::from("\n### Capacity\n\n");
    if c.tiers.is_empty() {
        out.push_str(&format!(
            "**{}** ({})\n",
            show(c.rate),
            escape(&c.conclusion)
        ));
        return out;
    }
    out.push_str(&format!(
        "Per SLO tier, from one set of probes (within {:.1}%):\n\n| Tier | Objectives | Answer | Fails at | Binding objective | Failing runs |\n|---|---|---:|---:|---|---:|\n",
        c.precision * 100.0
    ));
    for t in &c.tiers {
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} | {} |\n",
            escape(&t.name),
            escape_code(&t.objectives.join(",")),
            t.answer(c.variable),
            show(t.bracket.1),
            t.binding
                .as_ref()
                .map_or_else(|| "–".to_string(), |b| format!("`{}`", escape_code(b))),
            t.failing_runs
        ));
    }
    out
}

/// A verdict's cell: `✅ pass`, `❌ fail` or `❔ inconclusive`.
fn verdict_cell(label: &str) -> &'static str {
    match label {
        "PASS" => "✅ pass",
        "INCONCLUSIVE" => "❔ inconclusive",
        _ => "❌ fail",
    }
}

/// Agent traces: the summary per benchmark, then the first traces of each (nothing
/// without agent traces).
fn agent_traces_section(benchmarks: &[BenchmarkResult]) -> String {
    use super::agent_traces as at;
    let rows = at::rows(benchmarks);
    if rows.is_empty() {
        return String::new();
    }
    let table = |headers: &[&str], rows: Vec<at::Row>| {
        let mut t = format!(
            "| {} |\n|---|{}\n",
            headers.join(" | "),
            "---:|".repeat(headers.len() - 1)
        );
        for r in rows {
            t.push_str(&format!(
                "| {} | {} |\n",
                escape(&r.label),
                r.cells
                    .iter()
                    .map(|c| escape(c))
                    .collect::<Vec<_>>()
                    .join(" | ")
            ));
        }
        t
    };
    let (traces, left_out) = at::trace_rows(benchmarks);
    let mut out = format!(
        "\n### Agent traces\n\n{}\n{}",
        table(&at::HEADERS, rows),
        table(&at::TRACE_HEADERS, traces)
    );
    if let Some(note) = at::left_out_note(left_out) {
        out.push_str(&format!("\n{note}\n"));
    }
    out.push_str(&format!("\n{}\n", at::HINT));
    out
}

/// Multi-turn sessions: outcomes and rates per benchmark, then latencies per turn index.
fn sessions_section(benchmarks: &[BenchmarkResult]) -> String {
    use llmsurge_coordinator::sessions::{RateMeans, Summary};
    let mut out = String::from(
        "\n### Sessions\n\n| Benchmark | --rate meant | Sessions | Completed | Failed | Gave up | Unfinished | Turns done | Skipped | Sessions/s | Requests/s | Duration p50 ms | Duration p99 ms |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let p = |s: &Option<Summary>, f: fn(&Summary) -> f64| cell_value(s.as_ref().map(f));
    let mut turns = String::from(
        "\n| Benchmark | Turn | Requests | TTFT p50 ms | TTFT p99 ms | E2E p50 ms | E2E p99 ms |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for b in benchmarks {
        let Some(s) = &b.sessions else { continue };
        let name = escape(&super::label(b));
        out.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {}/{} | {} | {} | {} | {} | {} |\n",
            match s.rate_means {
                RateMeans::Users => "concurrent users",
                RateMeans::SessionsPerSecond => "new sessions/s",
            },
            s.sessions,
            s.completed,
            s.failed,
            s.gave_up,
            s.unfinished,
            s.turns_completed,
            s.turns_planned,
            s.turns_skipped,
            cell_value(Some(s.sessions_per_s)),
            cell_value(Some(s.turns_per_s)),
            p(&s.duration_ms, |s| s.p50),
            p(&s.duration_ms, |s| s.p99),
        ));
        for t in &s.per_turn {
            turns.push_str(&format!(
                "| {name} | {} | {} | {} | {} | {} | {} |\n",
                t.turn,
                t.requests,
                p(&t.ttft_ms, |s| s.p50),
                p(&t.ttft_ms, |s| s.p99),
                p(&t.e2e_latency_ms, |s| s.p50),
                p(&t.e2e_latency_ms, |s| s.p99),
            ));
        }
    }
    out.push_str(&turns);
    out
}

/// The `--lora` split: one row per model per benchmark.
fn models_section(benchmarks: &[BenchmarkResult]) -> String {
    let mut out = String::from(
        "\n### Per model (--lora)\n\n| Benchmark | Model | Share | Completed | Errored | Req/s | Output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | E2E p99 ms |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for b in benchmarks {
        let created: u64 = b.models.iter().map(|m| m.requests.created).sum();
        for m in &b.models {
            let stat = |key: &str, p: &str| {
                m.metrics
                    .get(key)
                    .filter(|d| d.successful.count > 0)
                    .and_then(|d| d.successful.percentiles.get(p))
            };
            let share = (created > 0).then(|| 100.0 * m.requests.created as f64 / created as f64);
            out.push_str(&format!(
                "| {} | {} | {}% | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                escape(&super::label(b)),
                escape(&m.model),
                cell_value(share),
                m.measured_requests.completed,
                m.measured_requests.errored,
                cell_value(Some(m.throughput.requests_per_s)),
                cell_value(m.throughput.output_tokens_per_s),
                cell_value(stat("ttft", "p50")),
                cell_value(stat("ttft", "p99")),
                cell_value(stat("itl", "p50")),
                cell_value(stat("request_latency", "p99")),
            ));
        }
    }
    out
}

/// The server's own metrics, one row per benchmark that has them, then their warnings.
fn server_section(benchmarks: &[BenchmarkResult]) -> String {
    use super::server::{self as srv, figure, percent};
    let mut out = String::from(
        "\n### Server metrics\n\n| Benchmark | Server | Scrapes | Waiting mean / max | Running mean / max | KV-cache use mean / max | Generation tokens | Prompt tokens | Prefix-cache hits | Spec-decode acceptance | Cross-checks |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let mut warnings = Vec::new();
    for b in benchmarks {
        let Some(sm) = &b.server_metrics else {
            continue;
        };
        let label = escape(&super::label(b));
        let failed = srv::scrape_errors(sm);
        let scrapes = if failed > 0 {
            format!("{} ({failed} failed)", sm.scrapes)
        } else {
            sm.scrapes.to_string()
        };
        let disagree: Vec<String> = sm
            .cross_checks
            .iter()
            .filter(|c| !c.agrees)
            .map(|c| format!("{} {:+.2}%", c.name, c.difference * 100.0))
            .collect();
        let checks = if sm.cross_checks.is_empty() {
            "–".to_string()
        } else if disagree.is_empty() {
            format!("✅ {} agree", sm.cross_checks.len())
        } else {
            format!("❌ {}", disagree.join(", "))
        };
        out.push_str(&format!(
            "| {label} | {} | {scrapes} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            escape(sm.server.as_deref().unwrap_or("?")),
            srv::mean_max(sm, "num_requests_waiting"),
            srv::mean_max(sm, "num_requests_running"),
            srv::mean_max(sm, "kv_cache_usage_perc"),
            figure(srv::counter(sm, "generation_tokens").0),
            figure(srv::counter(sm, "prompt_tokens").0),
            percent(sm.derived.prefix_cache_hit_rate),
            percent(sm.derived.spec_decode_acceptance_rate),
            checks
        ));
        warnings.extend(
            sm.warnings
                .iter()
                .map(|w| format!("- {label}: {}\n", escape(w))),
        );
    }
    if !warnings.is_empty() {
        out.push('\n');
        out.extend(warnings);
    }
    out
}

/// A comparison: one row per metric of every matched pair.
pub fn comparison(c: &Comparison) -> String {
    let mut heading = if c.regressions == 0 {
        "no regression".to_string()
    } else {
        format!("{} regression(s)", c.regressions)
    };
    if c.missing_fails() {
        heading.push_str(&format!(
            ", {} benchmark(s) without a partner",
            c.unmatched()
        ));
    }
    let server_failures = c.server.failure_lines();
    if !server_failures.is_empty() {
        heading.push_str(", the server changed");
    }
    let mut out = format!("## llmsurge compare: {heading}\n\n");
    for line in &server_failures {
        out.push_str(&format!("> ❌ gate failed: {}\n\n", escape(line)));
    }
    for w in &c.warnings {
        out.push_str(&format!("> ⚠️ warning: {}\n\n", escape(w)));
    }
    out.push_str(&format!(
        "| Benchmark | Metric | Baseline | Current | Change | {}% interval | Allowed | Samples | Verdict |\n",
        llmsurge_coordinator::slo::confidence_percent(c.confidence)
    ));
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    for p in &c.pairs {
        for m in &p.changes {
            let unit = if m.unit == ChangeUnit::Percent {
                "%"
            } else {
                "pp"
            };
            let verdict = match m.verdict {
                Verdict::Ok => "✅ ok",
                Verdict::Regressed => "❌ regressed",
                Verdict::WithinNoise => "⚠️ within noise",
                Verdict::Info => "–",
                Verdict::Missing => "n/a",
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |\n",
                escape(&p.label),
                m.metric,
                cell_value(m.baseline),
                cell_value(m.current),
                m.change.map_or("–".into(), |x| format!("{x:+.2}{unit}")),
                m.ci.map_or("–".into(), |(lo, hi)| format!(
                    "[{lo:+.2}, {hi:+.2}]{unit}"
                )),
                m.tolerance
                    .map_or("–".into(), |t| format!("{}{unit}", t.allowed)),
                m.samples.0,
                m.samples.1,
                verdict
            ));
        }
    }
    for (side, list) in [
        ("baseline", &c.unmatched_baseline),
        ("current", &c.unmatched_current),
    ] {
        if !list.is_empty() {
            out.push_str(&format!(
                "\nUnmatched in the {side} (no partner of the same strategy, rate and label; a capacity tier of the same name): {}{}\n",
                escape(&list.join(", ")),
                if c.allow_missing {
                    " (allowed by --allow-missing)"
                } else {
                    " ❌ (fails the gate)"
                }
            ));
        }
    }
    out.push_str(&format!("\n{}\n", c.variance_note));
    out
}
