//! The flattened form public agent-trace datasets use: one trace per line,
//! `{"trace_id", "spans": [{"span_id", "parent_span_id", "name", "start_time",
//! "end_time", "attributes": {"gen_ai.operation.name": "chat", …}}]}`, times in Unix
//! nanoseconds (`start_time_unix_nano` and `end_time_unix_nano` also read).

use super::{AttrValue, Span, Trace, genai_of};
use serde_json::Value;

/// Reads one trace per non-empty line.
pub fn read(text: &str) -> Result<Vec<Trace>, String> {
    let mut traces = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", n + 1);
        let v: Value = serde_json::from_str(line).map_err(|e| super::json_error(&e, line, n))?;
        let id = v
            .get("trace_id")
            .or_else(|| v.get("traceId"))
            .and_then(Value::as_str)
            .ok_or_else(|| at("no trace_id".into()))?
            .to_string();
        let spans = v
            .get("spans")
            .and_then(Value::as_array)
            .ok_or_else(|| at("no spans list".into()))?
            .iter()
            .map(read_span)
            .collect::<Result<_, _>>()
            .map_err(|(span, e): (Option<String>, String)| {
                at(format!("{}{e}", super::at(&id, span.as_deref())))
            })?;
        traces.push(Trace { id, spans });
    }
    Ok(traces)
}

fn time(v: &Value, keys: [&str; 2]) -> Result<u64, String> {
    for key in keys {
        if v.get(key).is_some() {
            return super::otlp::nanos(v, key);
        }
    }
    Err(format!("a span without {}", keys[0]))
}

/// A span, or its id (when it has one) and why it cannot be read.
fn read_span(v: &Value) -> Result<Span, (Option<String>, String)> {
    let id = v
        .get("span_id")
        .and_then(Value::as_str)
        .ok_or((None, "a span without span_id".to_string()))?
        .to_string();
    let fail = |e: String| (Some(id.clone()), e);
    let genai = match v.get("attributes") {
        Some(Value::Object(map)) => genai_of(map.iter().map(|(k, v)| {
            let value = match v {
                Value::String(s) => AttrValue::Str(s.clone()),
                Value::Number(n) => n
                    .as_i64()
                    .map_or_else(|| AttrValue::Other(n.to_string()), AttrValue::Int),
                other => AttrValue::Other(other.to_string()),
            };
            (k.as_str(), value)
        }))
        .map_err(fail)?,
        _ => None,
    };
    let times = (
        time(v, ["start_time", "start_time_unix_nano"]),
        time(v, ["end_time", "end_time_unix_nano"]),
    );
    let parent = v.get("parent_span_id").and_then(Value::as_str);
    Span::read(v, id.clone(), parent, times, genai).map_err(fail)
}
