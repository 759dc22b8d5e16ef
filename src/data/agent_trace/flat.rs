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
        let key = if v.get("trace_id").is_some() {
            "trace_id"
        } else {
            "traceId"
        };
        let id = super::id_field(&v, key)
            .map_err(at)?
            .ok_or_else(|| at("no trace_id".into()))?;
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
    let id = super::id_field(v, "span_id")
        .and_then(|id| id.ok_or_else(|| "no span_id".to_string()))
        .map_err(|e| (None, format!("{}: {e}", super::unnamed_span(v))))?;
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
    let parent = super::parent_field(v, "parent_span_id").map_err(fail)?;
    Span::read(v, id.clone(), parent, times, genai).map_err(fail)
}
