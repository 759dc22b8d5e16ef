//! Agent traces under `--profile replay`: the coordinator reads and checks every trace
//! once ([`read_graphs`]) and writes their graphs to a table file ([`write_table`]);
//! each worker's [`AgentTraceSource`] turns trace `i` into session `i`, whose turns are
//! the calls with their dependencies and scaled gaps (see `llmsurge_worker::graph`).
//!
//! Prompts: a call's recorded messages when the trace has them. Otherwise synthetic
//! text of its recorded input length, exact under the run's tokenizer, where a call that
//! continues its parent's conversation ([`super::Call::continues`]) is the parent's
//! prompt, exactly, followed by text of its own for the tokens it adds: the prefix
//! cache hits follow the trace's structure.

use super::{AgentTraceFormat, CallGraph, detect};
use crate::data::exact::PromptBuilder;
use crate::data::table::TableFileGuard;
use llmsurge_proto::seed::derive_seed;
use llmsurge_proto::{AgentNames, AgentTraceSpec, Arrivals, Schedule, TokenizerRef, TraceNames};
use llmsurge_worker::{Message, PreparedRequest, Prompt, RequestSource, SessionPlan, Turn};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// Bumped when the table's shape changes.
const TABLE_VERSION: u32 = 1;
/// Tokens per built piece of synthetic text (as a trace's blocks).
const PIECE_TOKENS: u32 = 512;
/// The longest prompt or output a call may record, in tokens: above any model's context,
/// and a prompt made of it is memory the replay would hold (docs/workloads.md).
pub const MAX_CALL_TOKENS: u32 = 10_000_000;
/// The longest gap a call may record after its dependencies: a replay waits it out.
pub const MAX_GAP: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

#[derive(Serialize, Deserialize)]
struct GraphFile {
    version: u32,
    graphs: Vec<CallGraph>,
}

/// What the report's args say about the traces read.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentTraceSummary {
    /// `otlp`, `flat` or `weka`.
    pub format: &'static str,
    /// Traces (agent tasks).
    pub traces: u64,
    /// LLM calls in all (the requests of one replay).
    pub calls: u64,
    /// Recorded time from the first trace's first call to the last trace's, seconds.
    pub span_s: f64,
    /// Whether the traces start over after the last one (see [`plan_passes`]).
    pub repeated: bool,
    /// The traces' ids and their calls' names, for the report.
    #[serde(skip)]
    pub names: Arc<AgentNames>,
}

/// Decides whether the traces of a replay at `--rate starts_per_s` repeat, as a dataset
/// repeats when a run asks for more than one pass (`--data-oversample auto`): a
/// `--max-seconds` run that would start more traces than the file holds, or a
/// `--max-requests` beyond its calls. Returns the line that says so, or, for a timed
/// replay at the recorded starts (× `time_scale`) whose last trace starts before the
/// time is up, the line saying how many traces it held and how to keep the load up.
pub fn plan_passes(
    spec: &mut AgentTraceSpec,
    summary: &mut AgentTraceSummary,
    path: &Path,
    (starts_per_s, time_scale): (Option<f64>, f64),
    max_seconds: Option<std::time::Duration>,
    max_requests: Option<u64>,
) -> Option<String> {
    let traces = plural(summary.traces, "trace");
    let calls = plural(summary.calls, "call");
    let file = path.display();
    match starts_per_s {
        Some(rate) => {
            let timed = max_seconds.is_some_and(|s| rate * s.as_secs_f64() > summary.traces as f64);
            let counted = max_requests.is_some_and(|n| n > summary.calls);
            if !(timed || counted) {
                return None;
            }
            spec.repeat = true;
            summary.repeated = true;
            let limit = match max_seconds {
                Some(s) if timed => format!("--max-seconds {}", s.as_secs_f64()),
                _ => format!("--max-requests {}", max_requests.unwrap_or_default()),
            };
            Some(format!(
                "note: --data {file} holds {traces} ({calls}): repeated from the first for {limit} at --rate {rate} (the report names each trace's pass)"
            ))
        }
        None => max_seconds
            .filter(|s| summary.span_s * time_scale < s.as_secs_f64())
            .map(|s| {
                format!(
                    "note: --data {file} holds {traces} ({calls}), each sent once at its recorded start: the run ends after the last one (or at --max-seconds {}, if sooner); --rate R starts R traces a second and repeats the file for the whole time",
                    s.as_secs_f64()
                )
            }),
    }
}

/// The traces of a capacity search over users repeat: each user runs one trace after
/// another for the whole of each probe, so no probe runs out of traces before its time.
/// Returns the line that says so.
pub fn plan_users(
    spec: &mut AgentTraceSpec,
    summary: &mut AgentTraceSummary,
    path: &Path,
) -> String {
    spec.repeat = true;
    summary.repeated = true;
    format!(
        "note: --data {} holds {} ({}): each concurrent user of the capacity search runs one trace after another, repeated from the first",
        path.display(),
        plural(summary.traces, "trace"),
        plural(summary.calls, "call")
    )
}

fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Whether `path` is an agent trace, by its content (a JSON or JSONL file).
pub fn is_agent_trace(path: &Path) -> bool {
    let json = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "json" | "jsonl" | "ndjson"));
    json && std::fs::read_to_string(path).is_ok_and(|t| detect(&t).is_some())
}

/// Reads `path` (an agent trace by its content, else `None`): every trace checked and
/// made a graph, ordered by start. A malformed trace is one line naming the file, the
/// trace and the span.
pub fn read_graphs(path: &Path) -> Option<Result<(AgentTraceSummary, Vec<CallGraph>), String>> {
    let text = std::fs::read_to_string(path).ok()?;
    let format = detect(&text)?;
    Some(graphs_of(&text, format).map_err(|e| format!("{}: {e}", path.display())))
}

fn graphs_of(
    text: &str,
    format: AgentTraceFormat,
) -> Result<(AgentTraceSummary, Vec<CallGraph>), String> {
    let mut graphs = super::graphs(text, format)?;
    for g in &graphs {
        for c in &g.calls {
            if let Some(e) = out_of_bounds(c) {
                return Err(format!("{}{e}", super::at(&g.trace, Some(&c.span))));
            }
        }
        if let Some(c) = g
            .calls
            .iter()
            .find(|c| c.genai.messages.is_none() && c.genai.input_tokens.is_none())
        {
            return Err(format!(
                "{}neither gen_ai.usage.input_tokens nor recorded messages: its prompt cannot be made",
                super::at(&g.trace, Some(&c.span))
            ));
        }
    }
    if graphs.is_empty() {
        return Err("no traces".into());
    }
    graphs.sort_by_key(|g| g.start_ns);
    let first = graphs.first().map_or(0, |g| g.start_ns);
    let last = graphs.last().map_or(0, |g| g.start_ns);
    let summary = AgentTraceSummary {
        format: match format {
            AgentTraceFormat::Otlp => "otlp",
            AgentTraceFormat::Flat => "flat",
            AgentTraceFormat::Weka => "weka",
        },
        traces: graphs.len() as u64,
        calls: graphs.iter().map(|g| g.calls.len() as u64).sum(),
        span_s: (last - first) as f64 / 1e9,
        repeated: false,
        names: Arc::new(AgentNames {
            traces: graphs
                .iter()
                .map(|g| TraceNames {
                    id: g.trace.clone(),
                    calls: g.calls.iter().map(|c| c.name.clone()).collect(),
                    deps: g
                        .calls
                        .iter()
                        .map(|c| c.deps.iter().map(|&d| d as u32).collect())
                        .collect(),
                })
                .collect(),
        }),
    };
    Ok((summary, graphs))
}

/// Why a call cannot be replayed as recorded: a token count over [`MAX_CALL_TOKENS`]
/// (the attribute named), or a gap over [`MAX_GAP`].
fn out_of_bounds(c: &super::Call) -> Option<String> {
    let counts = [
        ("gen_ai.usage.input_tokens", c.genai.input_tokens),
        ("gen_ai.usage.output_tokens", c.genai.output_tokens),
    ];
    if let Some((key, n)) = counts
        .into_iter()
        .find_map(|(k, n)| n.filter(|&n| n > MAX_CALL_TOKENS).map(|n| (k, n)))
    {
        return Some(format!(
            "{key} is {n}, over the {MAX_CALL_TOKENS} tokens a call may have: fix the count (a replay would build and send a prompt or answer that long)"
        ));
    }
    (c.gap_ns > MAX_GAP.as_nanos() as u64).then(|| {
        format!(
            "startTimeUnixNano is {:.1} h after the end of what the call waited for, over the {} h a gap may be: fix the span's times (a replay would wait that long)",
            c.gap_ns as f64 / 3.6e12,
            MAX_GAP.as_secs() / 3600
        )
    })
}

/// Writes the graphs to a new table file in the temporary directory.
pub fn write_table(graphs: &[CallGraph]) -> Result<TableFileGuard, String> {
    let file = GraphFile {
        version: TABLE_VERSION,
        graphs: graphs.to_vec(),
    };
    crate::data::table::write_prepared("agent", "agent traces", &file)
}

fn read_table(path: &Path) -> Result<Vec<CallGraph>, String> {
    let file: GraphFile =
        crate::data::table::read_prepared(path, "agent traces", TABLE_VERSION, |f: &GraphFile| {
            f.version
        })?;
    Ok(file.graphs)
}

/// The synthetic text builder, exact under the run's tokenizer.
pub fn builder(tokenizer: &TokenizerRef) -> Result<PromptBuilder, String> {
    crate::data::trace::block_builder(tokenizer, PIECE_TOKENS)
}

/// A worker's source over prepared agent traces: trace `i` is session `i`.
#[derive(Debug)]
pub struct AgentTraceSource {
    graphs: Vec<CallGraph>,
    /// Session `i` is graph `i % graphs` rather than none past the last.
    repeat: bool,
    builder: Option<PromptBuilder>,
    seed: u64,
    /// `--time-scale`: multiplies every gap.
    time_scale: f64,
}

impl AgentTraceSource {
    /// Loads the graphs of `spec`; `schedule` gives the time scale of the gaps.
    pub fn open(spec: &AgentTraceSpec, schedule: &Schedule) -> Result<Self, String> {
        let graphs = read_table(&spec.path)?;
        let mut source = Self::new(graphs, &spec.tokenizer, spec.seed, schedule)?;
        source.repeat = spec.repeat;
        Ok(source)
    }

    fn new(
        graphs: Vec<CallGraph>,
        tokenizer: &TokenizerRef,
        seed: u64,
        schedule: &Schedule,
    ) -> Result<Self, String> {
        let synthetic = graphs
            .iter()
            .any(|g| g.calls.iter().any(|c| c.genai.messages.is_none()));
        let builder = if synthetic {
            Some(builder(tokenizer)?)
        } else {
            None
        };
        let time_scale = match schedule {
            Schedule::Arrivals(Arrivals::Trace { time_scale, .. }) => *time_scale,
            _ => 1.0,
        };
        Ok(Self {
            graphs,
            repeat: false,
            builder,
            seed,
            time_scale,
        })
    }

    /// The prompts of graph `index`'s calls, in call order.
    fn prompts(&self, index: u64, g: &CallGraph) -> Result<Vec<Prompt>, String> {
        let mut prompts: Vec<Prompt> = Vec::with_capacity(g.calls.len());
        for (i, call) in g.calls.iter().enumerate() {
            if let Some(messages) = &call.genai.messages {
                prompts.push(Prompt::Messages(
                    messages
                        .iter()
                        .map(|m| Message::text(&m.role, m.content.clone()))
                        .collect(),
                ));
                continue;
            }
            let Some(b) = &self.builder else {
                return Err("the agent traces have no text builder".into());
            };
            let want = call.genai.input_tokens.unwrap_or(0);
            // The parent's synthetic prompt, exactly, then the tokens this call adds.
            let parent = call.continues.and_then(|p| {
                let Some(Prompt::Text(t)) = prompts.get(p) else {
                    return None;
                };
                Some((t.clone(), g.calls[p].genai.input_tokens.unwrap_or(0)))
            });
            let (mut text, had) = parent.unwrap_or_default();
            let mut left = want.saturating_sub(had);
            let mut piece_index = 0u64;
            while left > 0 {
                let len = left.min(PIECE_TOKENS);
                let id = (index << 32) ^ ((i as u64) << 16) ^ piece_index;
                let mut piece = String::new();
                b.build(
                    &mut piece,
                    len as usize,
                    None,
                    derive_seed(self.seed, "agent-marker", id),
                    derive_seed(self.seed, "agent-piece", id),
                )?;
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(&piece);
                left -= len;
                piece_index += 1;
            }
            prompts.push(Prompt::Text(text));
        }
        Ok(prompts)
    }
}

/// The conversation keys of a call of trace `id` (router affinity): the trace's own,
/// `llmsurge-session-ID`, for the main agent's calls; `llmsurge-session-ID/AGENT` for a
/// sub-agent's, with its parent's key (the main agent's, or its parent sub-agent's).
fn conversation_keys(id: u64, call: &super::Call) -> (Arc<str>, Option<Arc<str>>) {
    let key = |agent: Option<&String>| -> Arc<str> {
        match agent {
            // Span ids are hex in OTLP, but any text in the flat form: kept to header
            // value characters.
            Some(a) => format!(
                "llmsurge-session-{id}/{}",
                a.chars()
                    .map(|c| if c.is_ascii_graphic() { c } else { '_' })
                    .collect::<String>()
            )
            .into(),
            None => format!("llmsurge-session-{id}").into(),
        }
    };
    let own = key(call.agent.as_ref());
    let parent = call.agent.as_ref().map(|_| key(call.parent_agent.as_ref()));
    (own, parent)
}

impl RequestSource for AgentTraceSource {
    fn request(&mut self, _slot: u64) -> Result<Option<PreparedRequest>, String> {
        // Every request is a call of a graph (see `session`): none stands alone.
        Ok(None)
    }

    fn offset_ns(&self, id: u64) -> Option<u64> {
        let first = self.graphs.first()?.start_ns;
        self.graphs
            .get(usize::try_from(id).ok()?)
            .map(|g| g.start_ns - first)
    }

    fn has_sessions(&self) -> bool {
        true
    }

    fn session(&mut self, id: u64) -> Result<Option<SessionPlan>, String> {
        let n = self.graphs.len() as u64;
        let index = if self.repeat && n > 0 { id % n } else { id };
        let Some(g) = usize::try_from(index).ok().and_then(|i| self.graphs.get(i)) else {
            return Ok(None);
        };
        let prompts = self
            .prompts(id, g)
            .map_err(|e| format!("trace {}: {e}", g.trace))?;
        let turns = g
            .calls
            .iter()
            .zip(prompts)
            .map(|(call, prompt)| {
                let (session, parent_session) = conversation_keys(id, call);
                Turn {
                    request: PreparedRequest {
                        prompt_tokens: match prompt {
                            Prompt::Text(_) => call.genai.input_tokens,
                            // Recorded messages: the server's usage says their length.
                            _ => None,
                        },
                        prompt,
                        max_tokens: call.genai.output_tokens,
                        model: None,
                        user: None,
                        session: Some(session),
                    },
                    think_ns: (call.gap_ns as f64 * self.time_scale).round() as u64,
                    recorded_reply: None,
                    tool_result: None,
                    tool_result_tokens: 0,
                    after: Some(
                        call.deps
                            .iter()
                            .map(|&d| u32::try_from(d).unwrap_or(u32::MAX))
                            .collect(),
                    ),
                    parent_session,
                }
            })
            .collect();
        Ok(Some(SessionPlan {
            system: None,
            system_tokens: None,
            turns,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAT: &str = r#"{"trace_id":"t","spans":[
{"span_id":"r","name":"agent","start_time":500,"end_time":5000},
{"span_id":"p","parent_span_id":"r","name":"plan","start_time":1000,"end_time":2000,"attributes":{"gen_ai.operation.name":"chat","gen_ai.usage.input_tokens":40,"gen_ai.usage.output_tokens":3}},
{"span_id":"c","parent_span_id":"r","name":"child","start_time":3000,"end_time":4000,"attributes":{"gen_ai.operation.name":"chat","gen_ai.usage.input_tokens":700,"gen_ai.usage.output_tokens":5}}]}"#;

    #[test]
    fn a_child_repeats_its_parents_prompt_exactly_and_has_its_own_length() {
        let text = FLAT.replace('\n', "");
        let (summary, graphs) = graphs_of(&text, AgentTraceFormat::Flat).expect("graphs");
        assert_eq!((summary.traces, summary.calls), (1, 2));
        let schedule = Schedule::Arrivals(Arrivals::Trace {
            time_scale: 0.5,
            starts_per_s: None,
        });
        let tok = TokenizerRef::Builtin(crate::data::tokenizer::DEFAULT_PROCESSOR.into());
        let mut source = AgentTraceSource::new(graphs, &tok, 7, &schedule).expect("source");
        let plan = source.session(0).expect("a plan").expect("trace 0");
        assert!(source.session(1).expect("no error").is_none());
        let text = |k: usize| match &plan.turns[k].request.prompt {
            Prompt::Text(t) => t.clone(),
            other => panic!("{other:?}"),
        };
        assert!(
            text(1).starts_with(&text(0)),
            "the child continues the plan"
        );
        assert!(text(1).len() > text(0).len());
        let t = crate::data::tokenizer::Tokenizer::load(&tok).expect("tokenizer");
        assert_eq!((t.count(&text(0)), t.count(&text(1))), (40, 700));
        // The gap (1 µs recorded) at half the time.
        assert_eq!(plan.turns[1].think_ns, 500);
        assert_eq!(plan.turns[1].after, Some(vec![0]));
        assert_eq!(plan.turns[1].request.max_tokens, Some(5));
    }

    #[test]
    fn a_file_repeats_only_when_a_run_at_a_rate_needs_more_than_it_holds() {
        let text = FLAT.replace('\n', "");
        let (summary, _) = graphs_of(&text, AgentTraceFormat::Flat).expect("graphs");
        let tok = TokenizerRef::Builtin(crate::data::tokenizer::DEFAULT_PROCESSOR.into());
        let decide = |starts: (Option<f64>, f64), secs: Option<u64>, requests: Option<u64>| {
            let mut spec = AgentTraceSpec {
                path: "t".into(),
                traces: 1,
                calls: 2,
                seed: 1,
                tokenizer: tok.clone(),
                repeat: false,
            };
            let mut summary = summary.clone();
            let line = plan_passes(
                &mut spec,
                &mut summary,
                Path::new("t.jsonl"),
                starts,
                secs.map(std::time::Duration::from_secs),
                requests,
            );
            assert_eq!(spec.repeat, summary.repeated);
            (spec.repeat, line)
        };
        // One trace at 4 a second for 30 s: repeated, and said.
        let (repeat, line) = decide((Some(4.0), 1.0), Some(30), None);
        assert!(repeat);
        assert!(
            line.expect("a note")
                .contains("holds 1 trace (2 calls): repeated")
        );
        // A rate slow enough for one trace, or no limit asking for more: once, silently.
        assert_eq!(decide((Some(0.01), 1.0), Some(30), None), (false, None));
        assert_eq!(decide((Some(4.0), 1.0), None, Some(2)), (false, None));
        assert!(decide((Some(4.0), 1.0), None, Some(3)).0);
        // At the recorded starts: never repeated; a timed run the file cannot fill says
        // how many traces it held.
        let (repeat, line) = decide((None, 1.0), Some(30), None);
        assert!(!repeat);
        assert!(line.expect("a note").contains("each sent once"));
    }
}
