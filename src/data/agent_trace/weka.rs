//! WEKA's agentic coding traces (GuideLLM's data kind `weka`; the layout is
//! `docs/TRACE_FORMAT.md` of callanjfox/agentic-coding-analysis): one conversation per
//! JSON document (a file, a line of a JSONL file, or an element of a JSON list),
//! `{"id", "block_size", "requests": [{"t", "type", "in", "out", "hash_ids",
//! "api_time"?, "think_time"?}, …]}`, where a request of `"type": "subagent"` holds the
//! sub-agent's own `requests` (its `t` from the sub-agent's spawn) and its
//! `duration_ms`.
//!
//! Each conversation is a graph ([`CallGraph`]) built directly, without spans:
//! - the requests of one agent (the conversation, or a sub-agent) run one after another:
//!   each depends on the one before it;
//! - a sub-agent's first request depends on its parent's last request sent before the
//!   spawn; the parent's next request after the sub-agent ended (spawn + `duration_ms`)
//!   also waits for the sub-agent's last request (it read its answer), while a parent
//!   request sent before that runs beside it;
//! - the gap after the last dependency is `think_time` when recorded, else the time
//!   from that request's recorded end (`t` + `api_time`) to this one's send, else 0
//!   (the file has no end for it: the request follows at once);
//! - a request continues the previous one's conversation (its prompt repeats it) when
//!   its `hash_ids` start with the previous ones (all but the last block, which the
//!   format lets differ); a sub-agent starts a conversation of its own.
//!
//! A conversation has no absolute start: every one starts at offset 0, so under
//! `--profile replay` they all start at once unless `--rate` spaces them.

use super::{Call, CallGraph, GenAi};
use serde_json::Value;

/// Whether `v` is a WEKA conversation: a `requests` list whose first request has the
/// format's `in` and `out` (or is a sub-agent).
pub fn is_conversation(v: &Value) -> bool {
    let Some(first) = v
        .get("requests")
        .and_then(Value::as_array)
        .and_then(|r| r.first())
    else {
        return false;
    };
    v.get("id").is_some()
        && ((first.get("in").is_some() && first.get("out").is_some())
            || first.get("type").and_then(Value::as_str) == Some("subagent"))
}

/// Reads every conversation of `text` (one document, a list of them, or one per line).
pub fn read(text: &str) -> Result<Vec<CallGraph>, String> {
    let mut docs = super::json_documents(text)?;
    if let [Value::Array(items)] = docs.as_mut_slice() {
        docs = std::mem::take(items);
    }
    docs.iter()
        .enumerate()
        .map(|(n, doc)| {
            let id = match doc.get("id") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => format!("#{}", n + 1),
            };
            conversation(&id, doc).map_err(|(request, e)| match request {
                Some(r) => format!("{r} of trace {id}: {e}"),
                None => format!("trace {id}: {e}"),
            })
        })
        .collect()
}

/// Seconds to nanoseconds (negative or missing: 0).
fn ns(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * 1e9).round() as u64
    } else {
        0
    }
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// The builder of one conversation's graph.
struct Builder {
    calls: Vec<Call>,
    /// Each call's recorded start (ns from the conversation's start) and end, when known.
    times: Vec<(u64, Option<u64>)>,
    hash_ids: Vec<Vec<i64>>,
}

impl Builder {
    /// Adds the requests of one agent, its `t` measured from `base_ns`; `after` is the
    /// call the first of them waits for. Returns the agent's last call.
    fn agent(
        &mut self,
        requests: &[Value],
        prefix: &str,
        base_ns: u64,
        mut after: Option<usize>,
    ) -> Result<Option<usize>, (Option<String>, String)> {
        // A sub-agent whose end the next request of this agent must wait for.
        let mut pending: Vec<(u64, usize)> = Vec::new();
        let mut continues_from = None;
        for (k, v) in requests.iter().enumerate() {
            // Its span name: its index path (`3`, `5.2` for a sub-agent's third request).
            let span = if prefix.is_empty() {
                k.to_string()
            } else {
                format!("{prefix}.{k}")
            };
            let t = base_ns + ns(num(v, "t").unwrap_or(0.0));
            if v.get("type").and_then(Value::as_str) == Some("subagent") {
                let subs = v
                    .get("requests")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice);
                if let Some(last) = self.agent(subs, &span, t, after)? {
                    let ends = t + ns(num(v, "duration_ms").unwrap_or(0.0) / 1e3);
                    pending.push((ends, last));
                }
                continue;
            }
            let request = || Some(format!("request {span}"));
            let input = match v.get("in") {
                None => return Err((request(), "no input token count (in)".into())),
                Some(n) => count("in", n).map_err(|e| (request(), e))?,
            };
            let output = match v.get("out") {
                None | Some(Value::Null) => None,
                Some(n) => Some(count("out", n).map_err(|e| (request(), e))?),
            };
            let mut deps: Vec<usize> = after.into_iter().collect();
            // Sub-agents that ended before this request was sent: it read their answers.
            pending.retain(|&(ends, last)| {
                let done = ends <= t;
                if done {
                    deps.push(last);
                }
                !done
            });
            deps.sort_unstable();
            deps.dedup();
            // The last dependency by recorded end (start where no end was recorded).
            let last_dep = deps
                .iter()
                .copied()
                .max_by_key(|&d| (self.times[d].1.unwrap_or(self.times[d].0), d));
            let gap_ns = match (num(v, "think_time"), last_dep) {
                (Some(think), _) => ns(think),
                (None, Some(d)) => self.times[d].1.map_or(0, |end| t.saturating_sub(end)),
                (None, None) => t.saturating_sub(base_ns),
            };
            let ids: Vec<i64> = v
                .get("hash_ids")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default();
            let continues = continues_from.filter(|&p: &usize| {
                let before: &Vec<i64> = &self.hash_ids[p];
                let shared = before.iter().zip(&ids).take_while(|(a, b)| a == b).count();
                shared + 1 >= before.len() && self.calls[p].genai.input_tokens <= Some(input)
            });
            let end = num(v, "api_time").map(|s| t + ns(s));
            let index = self.calls.len();
            self.calls.push(Call {
                name: format!("req {span}"),
                span,
                offset_ns: t,
                duration_ns: end.map_or(0, |e| e - t),
                deps,
                gap_ns,
                continues,
                genai: GenAi {
                    operation: "chat".into(),
                    model: v.get("model").and_then(Value::as_str).map(str::to_string),
                    input_tokens: Some(input),
                    output_tokens: output,
                    max_tokens: None,
                    messages: None,
                },
                agent: None,
                parent_agent: None,
            });
            self.times.push((t, end));
            self.hash_ids.push(ids);
            after = Some(index);
            continues_from = Some(index);
        }
        Ok(after)
    }
}

/// A token count (`in`, `out`), or why the value is not one.
fn count(key: &str, v: &Value) -> Result<u32, String> {
    match v.as_u64().map(u32::try_from) {
        Some(Ok(n)) => Ok(n),
        _ => Err(format!("{key} is {v}, not a token count")),
    }
}

/// A conversation's graph, or the request at fault (`None`: the whole conversation) and
/// why.
fn conversation(id: &str, doc: &Value) -> Result<CallGraph, (Option<String>, String)> {
    let requests = doc
        .get("requests")
        .and_then(Value::as_array)
        .ok_or((None, "no requests list".to_string()))?;
    let mut b = Builder {
        calls: Vec::new(),
        times: Vec::new(),
        hash_ids: Vec::new(),
    };
    b.agent(requests, "", 0, None)?;
    if b.calls.is_empty() {
        return Err((None, "no requests: nothing to send".into()));
    }
    // The graph's calls go by recorded start (a sub-agent's may come between its
    // parent's): renumber the dependencies accordingly.
    let mut order: Vec<usize> = (0..b.calls.len()).collect();
    order.sort_by_key(|&i| (b.calls[i].offset_ns, i));
    let mut position = vec![0; order.len()];
    for (k, &i) in order.iter().enumerate() {
        position[i] = k;
    }
    let first = b.calls[order[0]].offset_ns;
    let mut calls: Vec<Call> = order
        .iter()
        .map(|&i| {
            let mut c = b.calls[i].clone();
            c.deps = c.deps.iter().map(|&d| position[d]).collect();
            c.deps.sort_unstable();
            c.continues = c.continues.map(|p| position[p]);
            c.offset_ns -= first;
            c
        })
        .collect();
    // A call with no dependency waits from the first call's start.
    for c in &mut calls {
        if c.deps.is_empty() {
            c.gap_ns = c.offset_ns;
        }
    }
    Ok(CallGraph {
        trace: id.to_string(),
        start_ns: 0,
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_is_a_chain_and_a_sub_agent_a_branch_the_parent_waits_for() {
        let text = serde_json::json!({
            "id": "8712b46f-04e", "block_size": 64,
            "requests": [
                {"t": 0.0, "type": "s", "in": 128, "out": 10, "hash_ids": [1, 2], "api_time": 2.0},
                {"t": 3.0, "type": "subagent", "duration_ms": 5000, "requests": [
                    {"t": 0.0, "type": "s", "in": 64, "out": 5, "hash_ids": [9], "api_time": 1.0},
                    {"t": 2.0, "type": "s", "in": 200, "out": 5, "hash_ids": [9, 10, 11], "api_time": 1.5}
                ]},
                {"t": 4.0, "type": "s", "in": 192, "out": 7, "hash_ids": [1, 2, 3], "think_time": 0.5},
                {"t": 9.0, "type": "s", "in": 260, "out": 7, "hash_ids": [1, 2, 3, 4]}
            ]
        })
        .to_string();
        let graphs = read(&text).expect("a conversation");
        let g = &graphs[0];
        let spans: Vec<&str> = g.calls.iter().map(|c| c.span.as_str()).collect();
        assert_eq!(spans, ["0", "1.0", "2", "1.1", "3"]);
        let deps = |s: &str| -> Vec<&str> {
            let c = g.calls.iter().find(|c| c.span == s).expect("a call");
            c.deps.iter().map(|&d| g.calls[d].span.as_str()).collect()
        };
        let call = |s: &str| g.calls.iter().find(|c| c.span == s).expect("a call");
        assert!(deps("0").is_empty());
        // The sub-agent starts after the parent's request before its spawn, 1 s after
        // its recorded end; its second request follows its first.
        assert_eq!(deps("1.0"), ["0"]);
        assert_eq!(call("1.0").gap_ns, 1_000_000_000);
        assert_eq!(deps("1.1"), ["1.0"]);
        // The parent's request during the sub-agent runs beside it, after its think time.
        assert_eq!(deps("2"), ["0"]);
        assert_eq!(call("2").gap_ns, 500_000_000);
        // The one after the sub-agent ended (8 s) waits for its answer too.
        assert_eq!(deps("3"), ["2", "1.1"]);
        // Prompts: the parent's chain continues; the sub-agent starts its own.
        let cont = |s: &str| call(s).continues.map(|p| g.calls[p].span.as_str());
        assert_eq!(cont("2"), Some("0"));
        assert_eq!(cont("3"), Some("2"));
        assert_eq!(cont("1.0"), None);
        assert_eq!(cont("1.1"), Some("1.0"));
        assert_eq!(call("3").genai.input_tokens, Some(260));
    }
}
