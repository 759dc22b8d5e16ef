//! Agent traces (issue 24 §1): the books kept from the records of their calls, and the
//! report's per-trace section.
//!
//! Every call is a request with its own record (and every per-request metric as usual);
//! its [`SessionTag`] says which call of which trace it was, and its [`GraphStep`] the
//! call whose end made it due and the gap it then waited. From those the coordinator
//! knows, per trace (agent task): the time from the first call's send to the last
//! call's end, and its critical path: from the call that ended last back through each
//! call's `after` to a call that waited for none. Along that path the time splits into
//! waiting on the server (each call's send to end) and the recorded tool and think time
//! (the gaps); what is left is the client's own lateness.
//!
//! [`GraphStep`]: llmsurge_proto::GraphStep

use crate::sessions::Summary;
use llmsurge_proto::{ErrorKind, MonoNanos, RequestRecord, RequestStatus, SessionTag};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// One call as its record said.
#[derive(Clone, Copy, Debug)]
struct CallSeen {
    start: Option<MonoNanos>,
    end: MonoNanos,
    status: RequestStatus,
    /// Given up by plan (`--cancel`).
    planned: bool,
    after: Option<u32>,
    gap_ns: u64,
}

/// One trace so far.
#[derive(Clone, Debug, Default)]
struct TraceTrack {
    calls_planned: u32,
    calls: HashMap<u32, CallSeen>,
}

/// The agent-trace books of one benchmark.
#[derive(Clone, Debug, Default)]
pub struct AgentBook {
    traces: BTreeMap<u64, TraceTrack>,
    /// The traces' ids and calls' names (absent: rows by index only).
    pub names: Option<std::sync::Arc<llmsurge_proto::AgentNames>>,
}

impl AgentBook {
    /// Accounts one call's record (a record whose tag has a graph step).
    pub fn add(&mut self, tag: SessionTag, r: &RequestRecord) {
        let Some(step) = tag.graph else {
            return;
        };
        let t = self.traces.entry(tag.id).or_default();
        t.calls_planned = tag.turns;
        t.calls.insert(
            tag.turn,
            CallSeen {
                start: r.start,
                end: r.end,
                status: r.status,
                planned: r.status == RequestStatus::Cancelled
                    && r.error
                        .as_ref()
                        .is_some_and(|e| e.kind == ErrorKind::Planned),
                after: step.after,
                gap_ns: step.gap_ns,
            },
        );
    }

    /// Whether any call was seen.
    pub fn is_empty(&self) -> bool {
        self.traces.is_empty()
    }

    /// The report's agent-trace section.
    pub fn result(&self) -> AgentTraceResult {
        let mut r = AgentTraceResult::default();
        let (mut durations, mut server, mut tool, mut path_calls) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (&id, t) in &self.traces {
            r.traces += 1;
            let mut row = trace_row(id, t);
            if let Some((names, pass)) = self.names.as_ref().and_then(|n| n.trace(id)) {
                row.id.clone_from(&names.id);
                row.pass = pass;
                row.critical_path.spans = row
                    .critical_path
                    .calls
                    .iter()
                    .map(|&k| {
                        names
                            .calls
                            .get(k as usize)
                            .cloned()
                            .unwrap_or_else(|| k.to_string())
                    })
                    .collect();
            }
            match row.outcome {
                TraceOutcome::Completed => {
                    r.completed += 1;
                    durations.push(row.duration_ms);
                    server.push(row.critical_path.server_ms);
                    tool.push(row.critical_path.tool_ms);
                    path_calls.push(row.critical_path.calls.len() as f64);
                }
                TraceOutcome::Failed => r.failed += 1,
                TraceOutcome::GaveUp => r.gave_up += 1,
                TraceOutcome::Unfinished => r.unfinished += 1,
            }
            r.per_trace.push(row);
        }
        r.duration_ms = Summary::of(durations);
        r.critical_path_server_ms = Summary::of(server);
        r.critical_path_tool_ms = Summary::of(tool);
        r.critical_path_calls = Summary::of(path_calls);
        r
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn trace_row(id: u64, t: &TraceTrack) -> TraceRow {
    let done = t
        .calls
        .values()
        .filter(|c| c.status == RequestStatus::Completed)
        .count();
    let outcome = if t.calls.values().any(|c| c.status == RequestStatus::Errored) {
        TraceOutcome::Failed
    } else if t.calls.values().any(|c| c.planned) {
        TraceOutcome::GaveUp
    } else if done as u64 >= u64::from(t.calls_planned) {
        TraceOutcome::Completed
    } else {
        TraceOutcome::Unfinished
    };
    let first_send = t.calls.values().filter_map(|c| c.start).min();
    // The call that ended last (the lowest index among equal ends).
    let last = t
        .calls
        .iter()
        .max_by(|a, b| a.1.end.cmp(&b.1.end).then(b.0.cmp(a.0)));
    let duration_ms = match (first_send, last) {
        (Some(s), Some((_, c))) => ms(c.end.since(s).as_nanos() as u64),
        _ => 0.0,
    };
    let mut path = CriticalPath::default();
    let mut at = last.map(|(&k, _)| k);
    // A chain longer than the trace's calls would loop: never, the graph is acyclic.
    let mut steps = 0;
    while let (Some(k), true) = (at, steps <= t.calls.len()) {
        steps += 1;
        let Some(c) = t.calls.get(&k) else { break };
        path.calls.push(k);
        if let Some(s) = c.start {
            path.server_ms += ms(c.end.since(s).as_nanos() as u64);
        }
        path.tool_ms += ms(c.gap_ns);
        at = c.after;
    }
    path.calls.reverse();
    TraceRow {
        trace: id,
        id: id.to_string(),
        pass: 1,
        calls: t.calls_planned,
        calls_completed: u32::try_from(done).unwrap_or(u32::MAX),
        outcome,
        duration_ms,
        critical_path: path,
    }
}

/// How a trace ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceOutcome {
    /// Every call completed.
    #[default]
    Completed,
    /// A call failed: the calls after it were never sent.
    Failed,
    /// The client gave a call up by plan (`--cancel`): the calls after it were never sent.
    GaveUp,
    /// The run stopped first.
    Unfinished,
}

/// A trace's critical path: the chain of calls, each the one whose end made the next
/// due, from the call that ended last back to one that waited for none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CriticalPath {
    /// The calls (indices in the trace, by recorded start), in order.
    pub calls: Vec<u32>,
    /// The same calls by name: each span's name (with its id when another call of the
    /// trace shares the name), or a WEKA request's place (`req 1.0`).
    #[serde(default)]
    pub spans: Vec<String>,
    /// Waiting on the server: each path call's send to its end, summed.
    pub server_ms: f64,
    /// The recorded tool and think time (the gaps, as scaled) along the path.
    pub tool_ms: f64,
}

/// One trace (agent task).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceRow {
    /// The trace's index (in order of recorded start; past the file's last trace when
    /// a repeated file starts over): the request log's `session`.
    pub trace: u64,
    /// The trace's own id, from the file.
    #[serde(default)]
    pub id: String,
    /// Which pass over the file it was, from 1 (above 1 only when the file repeats).
    #[serde(default = "first_pass")]
    pub pass: u64,
    /// Its calls.
    pub calls: u32,
    /// Its calls that completed.
    pub calls_completed: u32,
    /// How it ended.
    pub outcome: TraceOutcome,
    /// First call's send to last call's end.
    pub duration_ms: f64,
    /// Its critical path.
    pub critical_path: CriticalPath,
}

fn first_pass() -> u64 {
    1
}

/// The report's agent-trace section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentTraceResult {
    /// Traces started.
    pub traces: u64,
    /// Traces whose every call completed.
    pub completed: u64,
    /// Traces a failed call ended.
    pub failed: u64,
    /// Traces the client gave up by plan (`--cancel` on one of their calls).
    #[serde(default)]
    pub gave_up: u64,
    /// Traces the run stopped before their last call.
    pub unfinished: u64,
    /// Completed traces: first call's send to last call's end.
    pub duration_ms: Option<Summary>,
    /// Completed traces: time waiting on the server along the critical path.
    pub critical_path_server_ms: Option<Summary>,
    /// Completed traces: recorded tool and think time along the critical path.
    pub critical_path_tool_ms: Option<Summary>,
    /// Completed traces: calls on the critical path.
    pub critical_path_calls: Option<Summary>,
    /// Every trace, by index.
    pub per_trace: Vec<TraceRow>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::GraphStep;
    use std::time::Duration;

    #[test]
    fn the_critical_path_runs_back_from_the_last_end_through_each_calls_wait() {
        let t0 = MonoNanos(1_000_000_000);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut book = AgentBook::default();
        // plan 0-100; a 110-300 and b 120-400 after it; join 420-500 after b.
        let calls = [
            (0, 0, 100, None, 0),
            (1, 110, 300, Some(0), 10),
            (2, 120, 400, Some(0), 20),
            (3, 420, 500, Some(2), 20),
        ];
        for (k, s, e, after, gap) in calls {
            let r = RequestRecord::completed(at(s), Some(at(s + 1)), at(e), 1);
            let tag = SessionTag {
                id: 7,
                turn: k,
                turns: 4,
                graph: Some(GraphStep {
                    after,
                    gap_ns: gap * 1_000_000,
                }),
            };
            book.add(tag, &r);
        }
        let r = book.result();
        assert_eq!((r.traces, r.completed), (1, 1));
        let row = &r.per_trace[0];
        assert_eq!(row.duration_ms, 500.0);
        assert_eq!(row.critical_path.calls, [0, 2, 3]);
        assert_eq!(row.critical_path.server_ms, 100.0 + 280.0 + 80.0);
        assert_eq!(row.critical_path.tool_ms, 40.0);
    }

    #[test]
    fn a_call_given_up_by_plan_ends_its_trace_as_gave_up() {
        let at = |ms: u64| MonoNanos(1_000_000_000 + ms * 1_000_000);
        let mut book = AgentBook::default();
        for (id, kind) in [(1, ErrorKind::Planned), (2, ErrorKind::Cancelled)] {
            let done = RequestRecord::completed(at(0), Some(at(1)), at(10), 1);
            let mut cut = RequestRecord::completed(at(20), Some(at(21)), at(30), 1);
            cut.status = RequestStatus::Cancelled;
            cut.error = Some(llmsurge_proto::RequestError {
                kind,
                message: String::new(),
            });
            for (k, r) in [(0, &done), (1, &cut)] {
                let tag = SessionTag {
                    id,
                    turn: k,
                    turns: 3,
                    graph: Some(GraphStep {
                        after: k.checked_sub(1),
                        gap_ns: 0,
                    }),
                };
                book.add(tag, r);
            }
        }
        let r = book.result();
        assert_eq!((r.traces, r.gave_up, r.unfinished), (2, 1, 1));
        assert_eq!(r.per_trace[0].outcome, TraceOutcome::GaveUp);
    }
}
