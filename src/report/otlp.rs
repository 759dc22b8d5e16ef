//! `--outputs otlp`: the client's spans as OTLP JSON (issue 39), one span per request
//! with the ids its `traceparent` carried, so they join the server's spans, in the
//! OpenTelemetry collector file exporter's form (one `{"resourceSpans": …}` document
//! per line), buffered: a line per 512 spans or per second, whichever comes first,
//! written out at once, so a run killed mid-way leaves the spans of what completed up
//! to its last second; the roots and the rest when each benchmark ends.
//!
//! GenAI semantic conventions: `gen_ai.operation.name`, `gen_ai.request.model`,
//! `gen_ai.request.max_tokens`, `gen_ai.usage.input_tokens` and `output_tokens`, the
//! first token as an event, `error.type` and an error status for a failed request. No
//! prompt or response text, no header and no key ever go in.
//!
//! A session or agent trace is one trace: a root span for it (written when its
//! benchmark ends; the replay reader makes one again for a trace that lacks it, as a
//! killed run's file does), each request a child of it, linked to the requests it waited for
//! (a session's previous turn, an agent call's dependencies; the root for none). The
//! agent-trace reader takes those links as the calls' dependencies, so the file replays
//! (`--profile replay --data FILE`) into the graph that ran.

use super::requests::RequestLog;
use llmsurge_proto::trace_context::{root_span, span_hex, turn_span};
use llmsurge_proto::{
    AgentNames, ClockAnchor, MonoNanos, RequestFormat, RequestRecord, RequestStatus, TraceIds,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Spans per document (line): a collector reads each line as one export request.
const SPANS_PER_LINE: usize = 512;
/// The longest a finished request's span waits in memory before it is in the file.
const WRITE_EVERY: Duration = Duration::from_secs(1);

/// OTLP span kinds.
const KIND_INTERNAL: u8 = 1;
const KIND_CLIENT: u8 = 3;
/// OTLP status: an error.
const STATUS_ERROR: u8 = 2;

/// What every span of the run shares.
#[derive(Clone, Debug)]
pub struct OtlpContext {
    /// The API the requests spoke (its GenAI operation).
    pub format: RequestFormat,
    /// The model every request named (unless a `--lora` split named another).
    pub model: String,
    /// `--lora`: the split's model names, by a record's index.
    pub models: Vec<String>,
    /// Agent traces: each trace's calls' names and dependencies.
    pub agent: Option<Arc<AgentNames>>,
}

/// A session or agent trace seen in the running benchmark: its root span's extent.
#[derive(Debug)]
struct Root {
    trace: u128,
    start: MonoNanos,
    end: MonoNanos,
    agent: bool,
}

/// The open `--outputs otlp` file.
#[derive(Debug)]
pub struct OtlpExport {
    /// The lines' machinery (buffered whole lines; stops at a write error).
    file: RequestLog,
    context: OtlpContext,
    anchor: ClockAnchor,
    /// The running benchmark's seed and index.
    seed: u64,
    benchmark: u32,
    /// `--repeat`: the run under way (from 0), as the request log's `run`.
    run: Option<u32>,
    batch: Vec<Value>,
    /// When the spans were last written out.
    written_at: Instant,
    roots: BTreeMap<u64, Root>,
    spans: u64,
}

/// The GenAI operation of a request format.
fn operation(format: RequestFormat) -> &'static str {
    match format {
        RequestFormat::Chat | RequestFormat::Responses | RequestFormat::Anthropic => "chat",
        RequestFormat::Completions => "text_completion",
        RequestFormat::Embeddings => "embeddings",
        RequestFormat::Rerank | RequestFormat::Score => "rerank",
        RequestFormat::Transcription => "transcription",
    }
}

fn attr_str(key: &str, v: &str) -> Value {
    json!({"key": key, "value": {"stringValue": v}})
}

fn attr_int(key: &str, v: impl Into<i64>) -> Value {
    // OTLP JSON writes 64-bit integers as strings.
    json!({"key": key, "value": {"intValue": v.into().to_string()}})
}

impl OtlpExport {
    /// Creates (truncates) the file at `path`; times convert to wall time by `anchor`.
    pub fn create(path: &Path, context: OtlpContext, anchor: ClockAnchor) -> std::io::Result<Self> {
        Ok(Self {
            file: RequestLog::create(path)?,
            context,
            anchor,
            seed: 0,
            benchmark: 0,
            run: None,
            batch: Vec::new(),
            written_at: Instant::now(),
            roots: BTreeMap::new(),
            spans: 0,
        })
    }

    /// Times convert to wall time by `anchor` (the report's own).
    pub fn set_anchor(&mut self, anchor: ClockAnchor) {
        self.anchor = anchor;
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Spans given so far.
    pub fn spans(&self) -> u64 {
        self.spans
    }

    /// Benchmark `index`, whose ids derive from `seed`, starts (of `--repeat`'s `run`).
    pub fn start(&mut self, index: u32, seed: u64, run: Option<u32>) {
        self.benchmark = index;
        self.seed = seed;
        self.run = run;
    }

    /// What every span of the benchmark carries: its index, and its run with `--repeat`.
    fn benchmark_attrs(&self, attributes: &mut Vec<Value>) {
        attributes.push(attr_int("llmsurge.benchmark", self.benchmark));
        if let Some(run) = self.run {
            attributes.push(attr_int("llmsurge.run", run));
        }
    }

    fn nanos(&self, t: MonoNanos) -> String {
        let ns = i128::from(self.anchor.unix_nanos) + i128::from(t.signed_since(self.anchor.mono));
        ns.max(0).to_string()
    }

    /// The span of one finished request.
    pub fn record(&mut self, r: &RequestRecord) {
        let ids = TraceIds::of_record(self.seed, r);
        let start = r.start.unwrap_or(r.scheduled);
        let model = r
            .model
            .and_then(|i| self.context.models.get(usize::from(i)))
            .unwrap_or(&self.context.model);
        let op = operation(self.context.format);
        let mut attributes = vec![
            attr_str("gen_ai.operation.name", op),
            attr_str("gen_ai.request.model", model),
        ];
        if let Some(n) = r.max_output_tokens {
            attributes.push(attr_int("gen_ai.request.max_tokens", n));
        }
        if let Some(n) = r.prompt_tokens {
            attributes.push(attr_int("gen_ai.usage.input_tokens", n));
        }
        attributes.push(attr_int("gen_ai.usage.output_tokens", r.output_tokens));
        self.benchmark_attrs(&mut attributes);
        attributes.push(attr_int("llmsurge.slot", r.slot as i64));
        let mut name = format!("{op} {model}");
        let mut span = json!({
            "traceId": ids.trace_hex(),
            "spanId": ids.span_hex(),
            "kind": KIND_CLIENT,
            "startTimeUnixNano": self.nanos(start),
            "endTimeUnixNano": self.nanos(r.end.max(start)),
        });
        if let Some(s) = r.session {
            attributes.push(attr_int("llmsurge.session", s.id as i64));
            attributes.push(attr_int("llmsurge.turn", s.turn));
            let agent = s.graph.is_some();
            let root = root_span(ids.trace);
            // What it waited for: an agent call's dependencies, a turn's previous turn;
            // the root (the session's start) for none.
            let trace_names = agent
                .then(|| self.context.agent.as_ref()?.trace(s.id))
                .flatten()
                .map(|(t, _)| t);
            let deps: Vec<u32> = match trace_names {
                Some(t) => {
                    if let Some(call) = t.calls.get(s.turn as usize) {
                        call.clone_into(&mut name);
                    }
                    t.deps.get(s.turn as usize).cloned().unwrap_or_default()
                }
                None if agent => s.graph.and_then(|g| g.after).into_iter().collect(),
                None => s.turn.checked_sub(1).into_iter().collect(),
            };
            let trace_hex = ids.trace_hex();
            let links: Vec<Value> = if deps.is_empty() {
                vec![json!({"traceId": trace_hex, "spanId": span_hex(root)})]
            } else {
                deps.iter()
                    .map(|&d| json!({"traceId": trace_hex, "spanId": span_hex(turn_span(ids.trace, d))}))
                    .collect()
            };
            span["parentSpanId"] = span_hex(root).into();
            span["links"] = links.into();
            let entry = self.roots.entry(s.id).or_insert(Root {
                trace: ids.trace,
                start,
                end: r.end,
                agent,
            });
            entry.start = entry.start.min(start);
            entry.end = entry.end.max(r.end);
        }
        let first = r
            .first_token
            .map(|t| json!({"name": "gen_ai.first_token", "timeUnixNano": self.nanos(t)}));
        let content = r
            .first_content
            .filter(|c| Some(*c) != r.first_token)
            .map(|t| json!({"name": "gen_ai.first_content_token", "timeUnixNano": self.nanos(t)}));
        let events: Vec<Value> = first.into_iter().chain(content).collect();
        if !events.is_empty() {
            span["events"] = events.into();
        }
        match (r.status, &r.error) {
            (RequestStatus::Completed, _) => {}
            (_, Some(e)) => {
                // The kind only: a server's message may repeat the prompt.
                let kind = e.kind.key();
                attributes.push(attr_str("error.type", &kind));
                span["status"] = json!({"code": STATUS_ERROR, "message": kind});
            }
            (_, None) => {
                attributes.push(attr_str("error.type", "cancelled"));
                span["status"] = json!({"code": STATUS_ERROR, "message": "cancelled"});
            }
        }
        span["name"] = name.into();
        span["attributes"] = attributes.into();
        self.push(span);
    }

    fn push(&mut self, span: Value) {
        self.spans += 1;
        self.batch.push(span);
        if self.batch.len() >= SPANS_PER_LINE {
            self.write_batch();
        }
        self.tick();
    }

    /// Writes the spans out to the file when they waited [`WRITE_EVERY`] (called with
    /// each span and each progress tick): what a killed run leaves is at most that old.
    pub fn tick(&mut self) {
        if self.written_at.elapsed() < WRITE_EVERY {
            return;
        }
        self.written_at = Instant::now();
        self.write_batch();
        // A write error stops the file; the benchmark's end reports it
        // (`finish_benchmark`).
        let _ = self.file.flush();
    }

    fn write_batch(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let spans = std::mem::take(&mut self.batch);
        let doc = json!({"resourceSpans": [{
            "resource": {"attributes": [
                attr_str("service.name", "llmsurge"),
                attr_str("service.version", env!("CARGO_PKG_VERSION")),
            ]},
            "scopeSpans": [{
                "scope": {"name": "llmsurge", "version": env!("CARGO_PKG_VERSION")},
                "spans": spans,
            }],
        }]});
        self.file.write(&doc);
    }

    /// The benchmark ended: its sessions' root spans, and everything out to the file.
    pub fn finish_benchmark(&mut self) -> Result<(), String> {
        for (id, root) in std::mem::take(&mut self.roots) {
            let (name, attributes) = if root.agent {
                let trace = self
                    .context
                    .agent
                    .as_ref()
                    .and_then(|a| a.trace(id))
                    .map(|(t, _)| t.id.clone())
                    .unwrap_or_default();
                (
                    format!("invoke_agent {trace}"),
                    vec![
                        attr_str("gen_ai.operation.name", "invoke_agent"),
                        attr_str("gen_ai.agent.name", &trace),
                    ],
                )
            } else {
                ("session".to_string(), Vec::new())
            };
            let mut attributes = attributes;
            self.benchmark_attrs(&mut attributes);
            attributes.push(attr_int("llmsurge.session", id as i64));
            let span = json!({
                "traceId": format!("{:032x}", root.trace),
                "spanId": span_hex(root_span(root.trace)),
                "name": name,
                "kind": KIND_INTERNAL,
                "startTimeUnixNano": self.nanos(root.start),
                "endTimeUnixNano": self.nanos(root.end),
                "attributes": attributes,
            });
            self.push(span);
        }
        self.write_batch();
        self.file.flush().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::{GraphStep, Phase, SessionTag, TokenSource};

    fn record(slot: u64, turn: u32, after: Option<u32>, start_ms: u64) -> RequestRecord {
        let ms = |n: u64| MonoNanos(1_000_000_000 + n * 1_000_000);
        RequestRecord {
            slot,
            worker: 0,
            status: RequestStatus::Completed,
            error: None,
            scheduled: ms(start_ms),
            start: Some(ms(start_ms)),
            first_token: Some(ms(start_ms + 5)),
            first_content: Some(ms(start_ms + 5)),
            first_tool: None,
            end: ms(start_ms + 10),
            itl: None,
            prompt_tokens: Some(30 + turn),
            output_tokens: 4,
            output_tokens_source: TokenSource::Usage,
            reasoning_tokens: None,
            streamed_tokens: 4,
            max_output_tokens: Some(4),
            finish_reason: None,
            streamed: true,
            phase: Phase::Measured,
            late: false,
            retried: false,
            token_refused: false,
            model: None,
            session: Some(SessionTag {
                id: 0,
                turn,
                turns: 3,
                graph: Some(GraphStep { after, gap_ns: 0 }),
            }),
            media: None,
            prefill_wait: None,
            concurrency_wait: None,
        }
    }

    #[test]
    fn the_export_replays_into_the_graph_that_ran() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("spans.otlp.json");
        // Call 2 waits for calls 0 and 1, which ran side by side.
        let names = AgentNames {
            traces: vec![llmsurge_proto::TraceNames {
                id: "t".into(),
                calls: vec!["plan".into(), "search".into(), "answer".into()],
                deps: vec![vec![], vec![], vec![0, 1]],
            }],
        };
        let context = OtlpContext {
            format: RequestFormat::Chat,
            model: "m".into(),
            models: Vec::new(),
            agent: Some(Arc::new(names)),
        };
        let anchor = ClockAnchor {
            mono: MonoNanos(0),
            unix_nanos: 1_700_000_000_000_000_000,
        };
        let mut out = OtlpExport::create(&path, context, anchor).expect("create");
        out.start(0, 7, None);
        out.record(&record(0, 0, None, 0));
        out.record(&record(1, 1, None, 12));
        out.record(&record(2, 2, Some(1), 30));
        out.finish_benchmark().expect("written");
        let text = std::fs::read_to_string(&path).expect("read");
        let format = crate::data::agent_trace::detect(&text).expect("an agent trace");
        let graphs = crate::data::agent_trace::graphs(&text, format).expect("graphs");
        assert_eq!(graphs.len(), 1);
        let g = &graphs[0];
        let names: Vec<&str> = g.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["plan", "search", "answer"]);
        // "search" started after "plan" ended: the time rule would make it wait for
        // "plan", the links say it did not.
        let deps: Vec<&[usize]> = g.calls.iter().map(|c| c.deps.as_slice()).collect();
        assert_eq!(deps, [&[][..], &[], &[0, 1]]);
        assert_eq!(g.calls[2].genai.output_tokens, Some(4));
        assert_eq!(g.calls[2].genai.input_tokens, Some(32));
        // 8 ms from the end of "search" (22 ms) to the start of "answer" (30 ms).
        assert_eq!(g.calls[2].gap_ns, 8_000_000);
        assert_eq!(g.trace, TraceIds::of(7, 0, Some((0, 0))).trace_hex());
    }
}
