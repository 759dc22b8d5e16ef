//! Agent traces as graphs (issue 24 §1), the reading half: OpenTelemetry traces in the
//! OTLP JSON export ([`otlp`]) or the flattened one-trace-per-line form ([`flat`]),
//! recognised by content, turned into one [`CallGraph`] per trace.
//!
//! The calls are the spans with GenAI semantic-convention attributes
//! (`gen_ai.operation.name` `chat` or `text_completion`); other spans (tools, retrieval,
//! agent steps) are not sent, their recorded time stays in the gaps. A call depends on
//! the calls that ended before it started within the subtrees of its ancestors' (and its
//! own) earlier siblings, where a sibling is earlier when its whole subtree ended before
//! the ancestor started: steps that ran one after another depend on each other, and
//! siblings that overlapped in the trace (a fan-out) do not. A trace whose every call
//! links (OTLP `links`) to spans of its own trace, as llmsurge's `--outputs otlp`
//! writes them, says its dependencies instead: each call depends on the calls it links
//! to (a link to a span that is no call, such as the trace's root, adds none). After
//! its last dependency ends, a call waits its recorded gap.
//!
//! [`replay`] prepares the graphs for the workers and makes each call's prompt; the
//! worker's request loop runs each graph (see `llmsurge_worker::graph`).

pub mod flat;
pub mod otlp;
pub mod replay;
pub mod weka;

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// One span as both forms give it.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// Its id.
    pub id: String,
    /// Its parent's id; `None` for a root.
    pub parent: Option<String>,
    /// Its name.
    pub name: String,
    /// Start, Unix nanoseconds.
    pub start_ns: u64,
    /// End, Unix nanoseconds.
    pub end_ns: u64,
    /// The GenAI attributes, when it is an LLM call.
    pub genai: Option<GenAi>,
    /// The spans of its own trace it links to (OTLP `links`): what it waited for.
    pub links: Vec<String>,
}

impl Span {
    /// A span read from `v` with the id, parent, times and GenAI attributes its form
    /// found; a time that could not be read is its error (the caller names the span).
    fn read(
        v: &serde_json::Value,
        id: String,
        parent: Option<&str>,
        times: (Result<u64, String>, Result<u64, String>),
        genai: Option<GenAi>,
    ) -> Result<Self, String> {
        Ok(Span {
            name: v
                .get("name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string(),
            start_ns: times.0?,
            end_ns: times.1?,
            parent: parent.filter(|p| !p.is_empty()).map(str::to_string),
            id,
            genai,
            links: Vec::new(),
        })
    }
}

/// A recorded chat message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedMessage {
    /// `system`, `user`, `assistant`, `tool`.
    pub role: String,
    /// Its text.
    pub content: String,
}

/// The GenAI semantic-convention attributes of a call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GenAi {
    /// `gen_ai.operation.name`: `chat` or `text_completion`.
    pub operation: String,
    /// `gen_ai.request.model`.
    pub model: Option<String>,
    /// `gen_ai.usage.input_tokens`.
    pub input_tokens: Option<u32>,
    /// `gen_ai.usage.output_tokens`; for a call that did not complete, the output
    /// length it asked (see [`GenAi::cut`]).
    pub output_tokens: Option<u32>,
    /// `gen_ai.request.max_tokens`: the output length the call asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// The recorded prompt: `gen_ai.input.messages` (or `gen_ai.prompt`) as JSON, or
    /// the indexed `gen_ai.prompt.N.role` / `.content` attributes.
    pub messages: Option<Vec<RecordedMessage>>,
}

impl GenAi {
    /// The call did not complete (`failed`: an error status or `error.type`), or
    /// received no output: its output is what a cut or a fault left (0 or a part), so
    /// the replay asks the length it asked (`gen_ai.request.max_tokens`) when recorded;
    /// a completed call keeps the length it received.
    pub fn cut(&mut self, failed: bool) {
        if (failed || self.output_tokens.is_none_or(|n| n == 0))
            && let Some(asked) = self.max_tokens
        {
            self.output_tokens = Some(asked);
        }
    }
}

/// The JSON documents of a trace file: the whole file when it is one, else one per
/// non-empty line (an exporter that appends a document per batch). A file is read as
/// lines only when its first line is a whole document: a pretty-printed file that does
/// not parse is reported at the line and column of the file where it broke.
fn json_documents(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let whole = match serde_json::from_str(text) {
        Ok(doc) => return Ok(vec![doc]),
        Err(e) => e,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .peekable();
    let first_is_document = lines
        .peek()
        .is_some_and(|(_, l)| serde_json::from_str::<serde_json::Value>(l).is_ok());
    if !first_is_document {
        return Err(json_error(&whole, text, 0));
    }
    lines
        .map(|(n, l)| serde_json::from_str(l).map_err(|e| json_error(&e, l, n)))
        .collect()
}

/// A JSON error at its line and column in the file: `line 7, column 3: not JSON (…)`;
/// `line_offset` is the line the parsed `text` started on (0 for the whole file). A file
/// that ends too soon is placed at its last character, not on the empty line after it.
fn json_error(e: &serde_json::Error, text: &str, line_offset: usize) -> String {
    let full = e.to_string();
    let what = full
        .strip_suffix(&format!(" at line {} column {}", e.line(), e.column()))
        .unwrap_or(&full);
    let (line, column) = if e.is_eof() {
        let kept = text.trim_end();
        let last = kept.rsplit('\n').next().unwrap_or_default();
        (kept.matches('\n').count() + 1, last.chars().count())
    } else {
        (e.line(), e.column())
    };
    format!(
        "line {}, column {column}: not JSON ({what})",
        line + line_offset
    )
}

/// Messages from a JSON attribute: `[{"role", "content"}]` or the semantic
/// conventions' `[{"role", "parts": [{"type": "text", "content"}]}]`; a plain string
/// is one user message.
fn messages_of(text: &str) -> Option<Vec<RecordedMessage>> {
    let Ok(serde_json::Value::Array(items)) = serde_json::from_str::<serde_json::Value>(text)
    else {
        return (!text.is_empty()).then(|| {
            vec![RecordedMessage {
                role: "user".into(),
                content: text.to_string(),
            }]
        });
    };
    let text_of = |m: &serde_json::Value| -> Option<String> {
        if let Some(c) = m.get("content").and_then(serde_json::Value::as_str) {
            return Some(c.to_string());
        }
        let parts = m.get("parts")?.as_array()?;
        let texts: Vec<&str> = parts
            .iter()
            .filter_map(|p| p.get("content").and_then(serde_json::Value::as_str))
            .collect();
        Some(texts.join("\n"))
    };
    let out: Vec<RecordedMessage> = items
        .iter()
        .filter_map(|m| {
            Some(RecordedMessage {
                role: m.get("role")?.as_str()?.to_string(),
                content: text_of(m)?,
            })
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

/// The GenAI operations that are LLM calls.
const CALL_OPERATIONS: [&str; 2] = ["chat", "text_completion"];

/// A span's attribute, as both forms give it.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// Anything else, as written in the file (JSON): kept out of the graph, named in
    /// the error when an attribute the graph needs has it.
    Other(String),
}

/// A token count attribute's value, or why it is not one (naming the attribute).
fn token_count(key: &str, v: &AttrValue) -> Result<u32, String> {
    let (shown, n) = match v {
        AttrValue::Int(n) => (n.to_string(), Some(*n)),
        AttrValue::Str(s) => (
            serde_json::Value::from(s.as_str()).to_string(),
            s.trim().parse().ok(),
        ),
        AttrValue::Other(raw) => (raw.clone(), None),
    };
    let out_of_range = || {
        format!(
            "{key} is {shown}, out of range (a token count is at most {})",
            u32::MAX
        )
    };
    match n {
        Some(n) if n > 0 && u32::try_from(n).is_err() => Err(out_of_range()),
        Some(n) => u32::try_from(n).map_err(|_| format!("{key} is {shown}, not a token count")),
        // Digits too many for any integer type: a number, but no token count.
        None if {
            let digits = shown.trim_matches('"').trim();
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        } =>
        {
            Err(out_of_range())
        }
        None => Err(format!("{key} is {shown}, not an integer")),
    }
}

/// An id (`trace_id`, `spanId`, …) of `v`: `None` when absent; anything but a
/// non-empty string is an error naming the field and its value (a number is not read
/// as an id, nor an empty string as a missing one).
fn id_field(v: &serde_json::Value, key: &str) -> Result<Option<String>, String> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) if s.trim().is_empty() => Err(format!(
            "{key} is empty: give every span and trace a non-empty id"
        )),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!(
            "{key} is {other}, not a string (write ids in quotes)"
        )),
    }
}

/// A parent's id under `key`: `None` when absent or empty (a root); anything but a
/// string is an error naming the field and its value.
fn parent_field<'a>(v: &'a serde_json::Value, key: &str) -> Result<Option<&'a str>, String> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(format!(
            "{key} is {other}, not a string (write ids in quotes)"
        )),
    }
}

/// How an error names a span whose id it cannot use: by its name, when it has one.
fn unnamed_span(v: &serde_json::Value) -> String {
    match v
        .get("name")
        .and_then(serde_json::Value::as_str)
        .filter(|n| !n.is_empty())
    {
        Some(name) => format!("the span named {}", serde_json::Value::from(name)),
        None => "a span".into(),
    }
}

/// The GenAI part of a span's attributes, when it is a call; a call whose token count
/// is not one is an error naming the attribute and its value.
pub fn genai_of<'a>(
    attrs: impl IntoIterator<Item = (&'a str, AttrValue)>,
) -> Result<Option<GenAi>, String> {
    let mut g = GenAi::default();
    let mut is_call = false;
    let mut failed = false;
    // `gen_ai.prompt.N.role` / `.content`, by N.
    let mut indexed: BTreeMap<u32, (Option<String>, Option<String>)> = BTreeMap::new();
    // The first bad token count: an error only when the span is a call.
    let mut bad: Option<String> = None;
    let mut tokens = |key: &str, v: &AttrValue| match token_count(key, v) {
        Ok(n) => Some(n),
        Err(e) => {
            bad.get_or_insert(e);
            None
        }
    };
    for (key, value) in attrs {
        match key {
            "gen_ai.operation.name" => match &value {
                AttrValue::Str(op) => {
                    is_call = CALL_OPERATIONS.contains(&op.as_str());
                    g.operation.clone_from(op);
                }
                // Whether the span is a call depends on it: not read as "not a call".
                AttrValue::Int(n) => return Err(format!("{key} is {n}, not a string")),
                AttrValue::Other(raw) => return Err(format!("{key} is {raw}, not a string")),
            },
            "gen_ai.request.model" => {
                if let AttrValue::Str(m) = value {
                    g.model = Some(m);
                }
            }
            "gen_ai.request.max_tokens" => g.max_tokens = tokens(key, &value),
            // Set on a call that failed or was cut (OpenTelemetry's error attribute).
            "error.type" => failed = true,
            "gen_ai.usage.input_tokens" | "gen_ai.usage.output_tokens" => {
                let n = tokens(key, &value);
                if key.ends_with("input_tokens") {
                    g.input_tokens = n;
                } else {
                    g.output_tokens = n;
                }
            }
            "gen_ai.input.messages" | "gen_ai.prompt" => {
                if let AttrValue::Str(text) = &value {
                    g.messages = messages_of(text);
                }
            }
            _ => {
                let indexed_part = key
                    .strip_prefix("gen_ai.prompt.")
                    .and_then(|rest| rest.split_once('.'))
                    .and_then(|(n, field)| Some((n.parse::<u32>().ok()?, field)));
                if let (Some((n, field)), AttrValue::Str(text)) = (indexed_part, value) {
                    let entry = indexed.entry(n).or_default();
                    match field {
                        "role" => entry.0 = Some(text),
                        "content" => entry.1 = Some(text),
                        _ => {}
                    }
                }
            }
        }
    }
    if g.messages.is_none() && !indexed.is_empty() {
        g.messages = Some(
            indexed
                .into_values()
                .filter_map(|(role, content)| {
                    Some(RecordedMessage {
                        role: role.unwrap_or_else(|| "user".into()),
                        content: content?,
                    })
                })
                .collect(),
        )
        .filter(|m: &Vec<RecordedMessage>| !m.is_empty());
    }
    if !is_call {
        return Ok(None);
    }
    g.cut(failed);
    match bad {
        Some(e) => Err(e),
        None => Ok(Some(g)),
    }
}

/// A trace as read: its id and spans, in any order.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// The trace id.
    pub id: String,
    /// Its spans.
    pub spans: Vec<Span>,
}

/// A trace that cannot be replayed: one line naming the trace and the span.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("{}{reason}", at(trace, span.as_deref()))]
pub struct GraphError {
    /// The trace id.
    pub trace: String,
    /// The span id (`None` when the trace as a whole is at fault).
    pub span: Option<String>,
    /// What is wrong.
    pub reason: String,
}

/// Where an error is: `span S of trace T: `, or `trace T: ` for the whole trace.
pub fn at(trace: &str, span: Option<&str>) -> String {
    match span {
        Some(s) => format!("span {s} of trace {trace}: "),
        None => format!("trace {trace}: "),
    }
}

/// One LLM call of a graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// Its span id.
    pub span: String,
    /// What the report calls it: the span's name (with its id when another call of
    /// the trace has the same name), or a WEKA request's place in its conversation.
    #[serde(default)]
    pub name: String,
    /// Its recorded start, ns after the trace's first call started.
    pub offset_ns: u64,
    /// Its recorded duration, ns.
    pub duration_ns: u64,
    /// The calls (indices into [`CallGraph::calls`]) that must end before it starts.
    pub deps: Vec<usize>,
    /// Recorded time from its last dependency's end (from the trace's first call's
    /// start without one) to its start: tool time and client think time, kept as a gap.
    pub gap_ns: u64,
    /// The call whose conversation it continues (its last dependency, when that
    /// prompt is not longer than its own): its prompt repeats that one as a prefix.
    pub continues: Option<usize>,
    /// The recorded GenAI attributes.
    pub genai: GenAi,
    /// The sub-agent it is a call of: the span it sits under, when that is not a root
    /// (a call under a root span is the trace's main agent's); for router affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// That sub-agent's parent agent, when it is not the main agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_agent: Option<String>,
}

/// A trace's calls in order of their recorded start, with their dependencies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallGraph {
    /// The trace id.
    pub trace: String,
    /// The trace's first call's start, Unix ns (its offset among the traces): spans
    /// before it send nothing, so the replay starts there.
    pub start_ns: u64,
    /// The calls, by recorded start.
    pub calls: Vec<Call>,
}

impl CallGraph {
    /// Checks `trace` and builds its graph: a span whose parent is missing, a parent
    /// chain that loops, a span that ends before it starts, or a trace without a GenAI
    /// span is an error naming the trace and the span.
    pub fn build(trace: &Trace) -> Result<Self, GraphError> {
        let fail = |span: &str, reason: String| GraphError {
            trace: trace.id.clone(),
            span: Some(span.to_string()),
            reason,
        };
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, s) in trace.spans.iter().enumerate() {
            if index.insert(s.id.as_str(), i).is_some() {
                return Err(fail(&s.id, "the span id appears twice".into()));
            }
            if s.end_ns < s.start_ns {
                return Err(fail(&s.id, "the span ends before it starts".into()));
            }
        }
        let mut parent = vec![None; trace.spans.len()];
        for (i, s) in trace.spans.iter().enumerate() {
            if let Some(p) = &s.parent {
                match index.get(p.as_str()) {
                    Some(&j) => parent[i] = Some(j),
                    None => {
                        return Err(fail(
                            &s.id,
                            format!("its parent span {p} is not in the trace"),
                        ));
                    }
                }
            }
        }
        // A parent chain longer than the trace loops.
        for (i, s) in trace.spans.iter().enumerate() {
            let mut at = i;
            for _ in 0..=trace.spans.len() {
                match parent[at] {
                    Some(p) => at = p,
                    None => break,
                }
            }
            if parent[at].is_some() {
                return Err(fail(&s.id, "its parent chain is a cycle".into()));
            }
        }
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); trace.spans.len()];
        for (i, p) in parent.iter().enumerate() {
            if let Some(p) = p {
                children[*p].push(i);
            }
        }
        // Each subtree's end and calls.
        let n = trace.spans.len();
        let mut subtree_end = vec![0u64; n];
        let mut subtree_calls: Vec<Vec<usize>> = vec![Vec::new(); n];
        for i in postorder(&parent, &children) {
            let s = &trace.spans[i];
            subtree_end[i] = s.end_ns;
            if s.genai.is_some() {
                subtree_calls[i].push(i);
            }
            for &c in &children[i] {
                subtree_end[i] = subtree_end[i].max(subtree_end[c]);
                let calls = subtree_calls[c].clone();
                subtree_calls[i].extend(calls);
            }
        }
        let roots: Vec<usize> = (0..n).filter(|&i| parent[i].is_none()).collect();
        let siblings = |i: usize| -> &[usize] {
            match parent[i] {
                Some(p) => &children[p],
                None => &roots,
            }
        };
        let mut order: Vec<usize> = (0..n).filter(|&i| trace.spans[i].genai.is_some()).collect();
        if order.is_empty() {
            return Err(GraphError {
                trace: trace.id.clone(),
                span: None,
                reason: "the trace has no GenAI span (no span with gen_ai.operation.name chat or text_completion): nothing to send"
                    .into(),
            });
        }
        order.sort_by_key(|&i| (trace.spans[i].start_ns, trace.spans[i].id.clone()));
        let position: HashMap<usize, usize> =
            order.iter().enumerate().map(|(k, &i)| (i, k)).collect();
        // Dependencies the trace states: every call links into the trace.
        let index = &index;
        let linked = |i: usize| {
            trace.spans[i]
                .links
                .iter()
                .filter_map(move |l| index.get(l.as_str()).copied())
        };
        let explicit = order.iter().all(|&i| linked(i).next().is_some());
        let start_ns = trace.spans[order[0]].start_ns;
        let mut calls = Vec::with_capacity(order.len());
        for &i in &order {
            let s = &trace.spans[i];
            let mut deps: HashSet<usize> = HashSet::new();
            if explicit {
                deps.extend(linked(i).filter_map(|l| position.get(&l).copied()));
            }
            let mut at = Some(i).filter(|_| !explicit);
            while let Some(a) = at {
                let a_start = trace.spans[a].start_ns;
                for &x in siblings(a) {
                    if x != a && subtree_end[x] <= a_start {
                        for &c in &subtree_calls[x] {
                            if trace.spans[c].end_ns <= s.start_ns {
                                deps.insert(position[&c]);
                            }
                        }
                    }
                }
                at = parent[a];
            }
            let mut deps: Vec<usize> = deps.into_iter().collect();
            deps.sort_unstable();
            let last = deps
                .iter()
                .copied()
                .max_by_key(|&d| (trace.spans[order[d]].end_ns, d));
            let ready_at = last.map_or(start_ns, |d| trace.spans[order[d]].end_ns);
            let genai = s.genai.clone().unwrap_or_default();
            let continues = last.filter(|&d| {
                let before = trace.spans[order[d]]
                    .genai
                    .as_ref()
                    .and_then(|g| g.input_tokens);
                matches!((before, genai.input_tokens), (Some(b), Some(me)) if b <= me)
            });
            // A sub-agent: the non-root span the call sits under; its parent agent is
            // the span above that, unless that is a root (the main agent).
            let sub = |span: Option<usize>| span.filter(|&a| parent[a].is_some());
            let agent = sub(parent[i]);
            let parent_agent = agent.and_then(|a| sub(parent[a]));
            calls.push(Call {
                agent: agent.map(|a| trace.spans[a].id.clone()),
                parent_agent: parent_agent.map(|a| trace.spans[a].id.clone()),
                span: s.id.clone(),
                name: call_name(trace, &order, s),
                offset_ns: s.start_ns - start_ns,
                duration_ns: s.end_ns - s.start_ns,
                deps,
                gap_ns: s.start_ns.saturating_sub(ready_at),
                continues,
                genai,
            });
        }
        if explicit && let Some((k, reason)) = link_cycle(&calls) {
            return Err(fail(&calls[k].span, reason.into()));
        }
        Ok(CallGraph {
            trace: trace.id.clone(),
            start_ns,
            calls,
        })
    }
}

/// A call whose links loop back to it, and why: the replay would wait for a call that
/// waits for it (the worker would send one twice and never another). Links are the
/// only dependencies that can point at a later call, so only they can loop.
fn link_cycle(calls: &[Call]) -> Option<(usize, &'static str)> {
    if let Some(k) = (0..calls.len()).find(|&k| calls[k].deps.contains(&k)) {
        return Some((
            k,
            "the span links to itself: a call cannot wait for its own end",
        ));
    }
    // Kahn's order: calls left over wait, through their links, on a cycle.
    let mut waiting: Vec<usize> = calls.iter().map(|c| c.deps.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); calls.len()];
    for (k, c) in calls.iter().enumerate() {
        for &d in &c.deps {
            dependents[d].push(k);
        }
    }
    let mut ready: Vec<usize> = (0..calls.len()).filter(|&k| waiting[k] == 0).collect();
    while let Some(d) = ready.pop() {
        for &k in &dependents[d] {
            waiting[k] -= 1;
            if waiting[k] == 0 {
                ready.push(k);
            }
        }
    }
    // Every left-over call waits on another left-over one: walking those links from
    // any of them comes back to a call on the cycle.
    let mut at = (0..calls.len()).find(|&k| waiting[k] > 0)?;
    let mut seen = vec![false; calls.len()];
    while !seen[at] {
        seen[at] = true;
        at = *calls[at].deps.iter().find(|&&d| waiting[d] > 0)?;
    }
    Some((
        at,
        "its links form a cycle (it waits, through the calls it links to, for itself): link each call only to calls that ran before it",
    ))
}

/// A call's name in the report: its span's name, with its id when another call of the
/// trace has the same name (`chat (5ub2)`); its id when it has no name.
fn call_name(trace: &Trace, calls: &[usize], s: &Span) -> String {
    if s.name.is_empty() {
        return s.id.clone();
    }
    let shared = calls
        .iter()
        .filter(|&&i| trace.spans[i].name == s.name)
        .count();
    if shared > 1 {
        format!("{} ({})", s.name, s.id)
    } else {
        s.name.clone()
    }
}

/// Every span after its children (iteratively: a deep trace cannot overflow the stack).
fn postorder(parent: &[Option<usize>], children: &[Vec<usize>]) -> Vec<usize> {
    let mut out = Vec::with_capacity(parent.len());
    let mut stack: Vec<(usize, bool)> = (0..parent.len())
        .filter(|&i| parent[i].is_none())
        .map(|i| (i, false))
        .collect();
    while let Some((i, expanded)) = stack.pop() {
        if expanded {
            out.push(i);
        } else {
            stack.push((i, true));
            stack.extend(children[i].iter().map(|&c| (c, false)));
        }
    }
    out
}

/// The forms of agent trace files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentTraceFormat {
    /// The OTLP JSON export (`resourceSpans[].scopeSpans[].spans[]`).
    Otlp,
    /// One trace per line: a trace id and its spans.
    Flat,
    /// WEKA's agentic coding traces: conversations of requests (see [`weka`]).
    Weka,
}

/// Recognises an agent trace by its content (the first line, or the document's keys).
pub fn detect(text: &str) -> Option<AgentTraceFormat> {
    let first = text.lines().find(|l| !l.trim().is_empty())?;
    if text.trim_start().starts_with('{') && text.contains("\"resourceSpans\"") {
        return Some(AgentTraceFormat::Otlp);
    }
    if text.contains("\"requests\"") {
        // A conversation per document, a list of them, or one per line.
        let doc = serde_json::from_str::<serde_json::Value>(text)
            .or_else(|_| serde_json::from_str(first))
            .ok()?;
        let conversation = match &doc {
            serde_json::Value::Array(items) => items.first()?,
            other => other,
        };
        return weka::is_conversation(conversation).then_some(AgentTraceFormat::Weka);
    }
    let v: serde_json::Value = serde_json::from_str(first).ok()?;
    let obj = v.as_object()?;
    let has_id = obj.contains_key("trace_id") || obj.contains_key("traceId");
    (has_id && obj.get("spans").is_some_and(serde_json::Value::is_array))
        .then_some(AgentTraceFormat::Flat)
}

/// Reads the traces of `text` in the form `detect` found, each checked and made a graph.
pub fn graphs(text: &str, format: AgentTraceFormat) -> Result<Vec<CallGraph>, String> {
    let traces = match format {
        // Conversations of requests, not spans: their graphs are built directly.
        AgentTraceFormat::Weka => return weka::read(text),
        _ => read(text, format)?,
    };
    traces
        .iter()
        .map(|t| CallGraph::build(t).map_err(|e| e.to_string()))
        .collect()
}

/// Reads the span traces of `text` (OTLP or flat) in the form `detect` found, a root
/// lost to a cut-off export made again ([`restore_lost_root`]).
pub fn read(text: &str, format: AgentTraceFormat) -> Result<Vec<Trace>, String> {
    let mut traces = match format {
        AgentTraceFormat::Otlp => otlp::read(text)?,
        AgentTraceFormat::Flat => flat::read(text)?,
        AgentTraceFormat::Weka => return Err("WEKA traces have no spans".into()),
    };
    traces.iter_mut().for_each(restore_lost_root);
    Ok(traces)
}

/// A trace without a root whose top spans all name one parent that is not in the file
/// lost its root: an exporter writes a root when it ends, so a run killed first (or a
/// file cut short) leaves its children without it. The root is made again, spanning
/// them, so what completed replays. A trace with a root, or with spans under two
/// missing parents, is left as it is (its missing parent is an error naming the span).
pub fn restore_lost_root(trace: &mut Trace) {
    if trace.spans.iter().any(|s| s.parent.is_none()) {
        return;
    }
    let ids: HashSet<&str> = trace.spans.iter().map(|s| s.id.as_str()).collect();
    let mut missing = trace
        .spans
        .iter()
        .filter_map(|s| s.parent.as_deref())
        .filter(|p| !ids.contains(p));
    let Some(root) = missing.next() else {
        return;
    };
    if missing.any(|p| p != root) {
        return;
    }
    let root = Span {
        id: root.to_string(),
        parent: None,
        name: String::new(),
        start_ns: trace.spans.iter().map(|s| s.start_ns).min().unwrap_or(0),
        end_ns: trace.spans.iter().map(|s| s.end_ns).max().unwrap_or(0),
        genai: None,
        links: Vec::new(),
    };
    trace.spans.push(root);
}

#[cfg(test)]
mod tests;
