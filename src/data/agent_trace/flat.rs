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
        let v: Value = serde_json::from_str(line).map_err(|e| at(format!("not JSON ({e})")))?;
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
            .map_err(|e| at(format!("trace {id}: {e}")))?;
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

fn read_span(v: &Value) -> Result<Span, String> {
    let id = v
        .get("span_id")
        .and_then(Value::as_str)
        .ok_or("a span without span_id")?
        .to_string();
    let genai = match v.get("attributes") {
        Some(Value::Object(map)) => genai_of(map.iter().map(|(k, v)| {
            let value = match v {
                Value::String(s) => AttrValue::Str(s.clone()),
                Value::Number(n) => n.as_i64().map_or(AttrValue::Other, AttrValue::Int),
                _ => AttrValue::Other,
            };
            (k.as_str(), value)
        })),
        _ => None,
    };
    let times = (
        time(v, ["start_time", "start_time_unix_nano"]),
        time(v, ["end_time", "end_time_unix_nano"]),
    );
    let parent = v.get("parent_span_id").and_then(Value::as_str);
    Span::read(v, id, parent, times, genai)
}
