//! Agent traces (issue 24 §1): per benchmark the traces' outcomes, durations and
//! critical paths, and per trace (agent task) its time from the first call's send to the
//! last call's end, its critical path, and how much of that path was waiting on the
//! server against the recorded tool time. The rows of cells are shared by the console,
//! Markdown and HTML renderers, so they cannot drift apart; CSV gets columns
//! ([`csv_names`], [`csv_values`]) and JSON and YAML the report's `agent_traces`.

use llmsurge_coordinator::BenchmarkResult;
use llmsurge_coordinator::agent_traces::{AgentTraceResult, TraceOutcome, TraceRow};
use llmsurge_coordinator::sessions::Summary;

/// The headers of the summary rows, in order.
pub const HEADERS: [&str; 11] = [
    "Benchmark",
    "Traces",
    "Completed",
    "Failed",
    "Gave up",
    "Unfinished",
    "Duration p50 ms",
    "Duration p99 ms",
    "Path calls mean",
    "Path server p50 ms",
    "Path tool p50 ms",
];

/// The headers of the per-trace rows, in order.
pub const TRACE_HEADERS: [&str; 8] = [
    "Benchmark",
    "Trace",
    "Outcome",
    "Calls done",
    "Duration ms",
    "Critical path",
    "Server ms",
    "Tool ms",
];

/// Per-trace rows shown in the console, Markdown and HTML (all are in JSON and YAML).
pub const TRACES_SHOWN: usize = 20;

/// The line under the tables.
pub const HINT: &str = "Agent traces replayed as graphs: per trace (by its id in the file), the time from its first call's send to its last call's end, and its critical path (the calls, by span name, each the one whose end made the next due, ending at the call that ended last), split into waiting on the server (each path call's send to end) and the recorded tool and think time (the gaps, as scaled); the rest is the client's lateness.";

/// Ids longer than this are shown by their start and end (the JSON has them whole).
const ID_SHOWN: usize = 20;

pub use super::cells::Row;

fn p(v: &Option<Summary>, f: fn(&Summary) -> f64) -> String {
    super::cells::cell_value(v.as_ref().map(f))
}

/// A summary row for each benchmark with agent traces.
pub fn rows(benchmarks: &[BenchmarkResult]) -> Vec<Row> {
    benchmarks
        .iter()
        .filter_map(|b| {
            let a = b.agent_traces.as_ref()?;
            Some(Row {
                label: super::label(b),
                cells: vec![
                    a.traces.to_string(),
                    a.completed.to_string(),
                    a.failed.to_string(),
                    a.gave_up.to_string(),
                    a.unfinished.to_string(),
                    p(&a.duration_ms, |s| s.p50),
                    p(&a.duration_ms, |s| s.p99),
                    p(&a.critical_path_calls, |s| s.mean),
                    p(&a.critical_path_server_ms, |s| s.p50),
                    p(&a.critical_path_tool_ms, |s| s.p50),
                ],
            })
        })
        .collect()
}

fn outcome(o: TraceOutcome) -> &'static str {
    match o {
        TraceOutcome::Completed => "completed",
        TraceOutcome::Failed => "failed",
        TraceOutcome::GaveUp => "gave up",
        TraceOutcome::Unfinished => "unfinished",
    }
}

/// A trace's id as shown in a table: a long one (an OTLP id is 32 hex digits) by its
/// first 12 and last 4 characters, `4bf92f3577b3…4736`, and its pass over a repeated
/// file after it; control characters made visible.
fn shown_id(t: &TraceRow) -> String {
    let id = if t.id.is_empty() {
        // A report from before trace ids were kept.
        t.trace.to_string()
    } else {
        let chars: Vec<char> = t.id.chars().collect();
        if chars.len() > ID_SHOWN {
            let head: String = chars[..12].iter().collect();
            let tail: String = chars[chars.len() - 4..].iter().collect();
            format!("{head}…{tail}")
        } else {
            t.id.clone()
        }
    };
    let id = llmsurge_proto::inert::terminal(&id).into_owned();
    if t.pass > 1 {
        format!("{id} (pass {})", t.pass)
    } else {
        id
    }
}

fn trace_cells(t: &TraceRow) -> Vec<String> {
    let path: Vec<String> = if t.critical_path.spans.len() == t.critical_path.calls.len() {
        t.critical_path
            .spans
            .iter()
            .map(|s| llmsurge_proto::inert::terminal(s).into_owned())
            .collect()
    } else {
        t.critical_path.calls.iter().map(u32::to_string).collect()
    };
    vec![
        shown_id(t),
        outcome(t.outcome).to_string(),
        format!("{}/{}", t.calls_completed, t.calls),
        super::num(t.duration_ms),
        path.join(" → "),
        super::num(t.critical_path.server_ms),
        super::num(t.critical_path.tool_ms),
    ]
}

/// The first [`TRACES_SHOWN`] traces of each benchmark, then how many are left out.
pub fn trace_rows(benchmarks: &[BenchmarkResult]) -> (Vec<Row>, usize) {
    let mut rows = Vec::new();
    let mut left_out = 0;
    for b in benchmarks {
        let Some(a) = &b.agent_traces else { continue };
        left_out += a.per_trace.len().saturating_sub(TRACES_SHOWN);
        rows.extend(a.per_trace.iter().take(TRACES_SHOWN).map(|t| Row {
            label: super::label(b),
            cells: trace_cells(t),
        }));
    }
    (rows, left_out)
}

/// The note under the per-trace rows when some were left out.
pub fn left_out_note(left_out: usize) -> Option<String> {
    (left_out > 0).then(|| {
        format!(
            "{left_out} more traces are in the JSON report's agent_traces.per_trace (the first {TRACES_SHOWN} per benchmark are shown)."
        )
    })
}

/// The CSV columns: none without agent traces.
pub fn csv_names(benchmarks: &[BenchmarkResult]) -> Vec<String> {
    if benchmarks.iter().all(|b| b.agent_traces.is_none()) {
        return Vec::new();
    }
    [
        "agent_traces.traces",
        "agent_traces.completed",
        "agent_traces.failed",
        "agent_traces.gave_up",
        "agent_traces.unfinished",
        "agent_traces.duration_ms.p50",
        "agent_traces.duration_ms.p99",
        "agent_traces.critical_path_calls.mean",
        "agent_traces.critical_path_server_ms.p50",
        "agent_traces.critical_path_server_ms.p99",
        "agent_traces.critical_path_tool_ms.p50",
        "agent_traces.critical_path_tool_ms.p99",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A benchmark's CSV values for [`csv_names`] (blank without agent traces).
pub fn csv_values(benchmarks: &[BenchmarkResult], b: &BenchmarkResult) -> Vec<String> {
    let width = csv_names(benchmarks).len();
    let Some(a) = &b.agent_traces else {
        return vec![String::new(); width];
    };
    let f = |v: &Option<Summary>, g: fn(&Summary) -> f64| {
        v.as_ref().map(|s| g(s).to_string()).unwrap_or_default()
    };
    let AgentTraceResult {
        traces,
        completed,
        failed,
        gave_up,
        unfinished,
        ..
    } = a;
    vec![
        traces.to_string(),
        completed.to_string(),
        failed.to_string(),
        gave_up.to_string(),
        unfinished.to_string(),
        f(&a.duration_ms, |s| s.p50),
        f(&a.duration_ms, |s| s.p99),
        f(&a.critical_path_calls, |s| s.mean),
        f(&a.critical_path_server_ms, |s| s.p50),
        f(&a.critical_path_server_ms, |s| s.p99),
        f(&a.critical_path_tool_ms, |s| s.p50),
        f(&a.critical_path_tool_ms, |s| s.p99),
    ]
}
