//! The OTLP JSON export, as an OpenTelemetry collector's file exporter writes it:
//! `{"resourceSpans":[{"scopeSpans":[{"spans":[…]}]}]}`, one document or one per line.
//! Span ids and times as OTLP JSON gives them (ids hex, times Unix nanoseconds as
//! strings or numbers, attributes `{"key", "value": {"stringValue" | "intValue"}}`).

use super::{AttrValue, Span, Trace, genai_of};
use serde_json::Value;

/// Reads every trace of the export, spans grouped by `traceId` in the order first seen.
/// A span that cannot be read is an error naming it, its trace and its line in `text`.
pub fn read(text: &str) -> Result<Vec<Trace>, String> {
    // The file exporter writes one document per line.
    let docs = super::json_documents(text)?;
    let mut traces: Vec<Trace> = Vec::new();
    for doc in &docs {
        for rs in array(doc, "resourceSpans")? {
            for ss in array(rs, "scopeSpans")? {
                for span in array(ss, "spans")? {
                    // Where the span is, by its id as written (quoted or not, even empty).
                    let line = span
                        .get("spanId")
                        .and_then(|raw| line_of_span(text, &raw.to_string()))
                        .map_or_else(String::new, |n| format!("line {n}: "));
                    let trace_id = super::id_field(span, "traceId")
                        .and_then(|t| t.ok_or_else(|| "no traceId".to_string()))
                        .map_err(|e| {
                            let who = match super::id_field(span, "spanId") {
                                Ok(Some(id)) => format!("span {id}"),
                                _ => super::unnamed_span(span),
                            };
                            format!("{line}{who}: {e}")
                        })?;
                    let span = read_span(span).map_err(|(id, e)| {
                        format!("{line}{}{e}", super::at(&trace_id, id.as_deref()))
                    })?;
                    match traces.iter_mut().find(|t| t.id == trace_id) {
                        Some(t) => t.spans.push(span),
                        None => traces.push(Trace {
                            id: trace_id,
                            spans: vec![span],
                        }),
                    }
                }
            }
        }
    }
    Ok(traces)
}

/// The line of `text` where the span id `raw` (as JSON: `"p1an"`, `12`, `""`) is given
/// (`"spanId": "p1an"`), when exactly one line gives it.
fn line_of_span(text: &str, raw: &str) -> Option<usize> {
    let mut found = text.match_indices("\"spanId\"").filter(|(at, key)| {
        text[at + key.len()..]
            .trim_start()
            .strip_prefix(':')
            .and_then(|rest| rest.trim_start().strip_prefix(raw))
            .is_some_and(|after| after.trim_start().starts_with([',', '}']))
    });
    let (at, _) = found.next()?;
    found
        .next()
        .is_none()
        .then(|| text[..at].matches('\n').count() + 1)
}

fn array<'a>(v: &'a Value, key: &str) -> Result<&'a [Value], String> {
    match v.get(key) {
        Some(Value::Array(a)) => Ok(a),
        None | Some(Value::Null) => Ok(&[]),
        Some(_) => Err(format!("{key}: expected a list")),
    }
}

/// Unix nanoseconds, as a string or a number.
pub fn nanos(v: &Value, key: &str) -> Result<u64, String> {
    match v.get(key) {
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| format!("{key}: {s:?} is not nanoseconds")),
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| format!("{key}: {n} is not nanoseconds")),
        _ => Err(format!("a span without {key}")),
    }
}

/// A span, or its id (when it has one) and why it cannot be read.
fn read_span(v: &Value) -> Result<Span, (Option<String>, String)> {
    let id = super::id_field(v, "spanId")
        .and_then(|id| id.ok_or_else(|| "no spanId".to_string()))
        .map_err(|e| (None, format!("{}: {e}", super::unnamed_span(v))))?;
    let fail = |e: String| (Some(id.clone()), e);
    let attrs = array(v, "attributes").map_err(fail)?;
    let mut genai = genai_of(attrs.iter().filter_map(|a| {
        let key = a.get("key")?.as_str()?;
        let value = a.get("value")?;
        let value = if let Some(s) = value.get("stringValue").and_then(Value::as_str) {
            AttrValue::Str(s.to_string())
        } else if let Some(i) = value.get("intValue") {
            let int = match i {
                Value::String(s) => s.parse().ok(),
                Value::Number(n) => n.as_i64(),
                _ => None,
            };
            int.map_or_else(|| AttrValue::Other(i.to_string()), AttrValue::Int)
        } else {
            // `doubleValue`, `boolValue`, …: the value itself, as written.
            let inner = value
                .as_object()
                .and_then(|o| o.values().next())
                .unwrap_or(value);
            AttrValue::Other(inner.to_string())
        };
        Some((key, value))
    }))
    .map_err(fail)?;
    // An error status (`2`, or its name): the call did not complete.
    let status = v.get("status").and_then(|s| s.get("code"));
    if matches!(status, Some(c) if c == 2 || c == "STATUS_CODE_ERROR")
        && let Some(g) = genai.as_mut()
    {
        g.cut(true);
    }
    let times = (nanos(v, "startTimeUnixNano"), nanos(v, "endTimeUnixNano"));
    let parent = super::parent_field(v, "parentSpanId").map_err(fail)?;
    let trace = v.get("traceId").and_then(Value::as_str);
    let mut span = Span::read(v, id.clone(), parent, times, genai).map_err(fail)?;
    // Links into the span's own trace (a link's trace id may be left out); links to
    // other traces say nothing about this one's order.
    span.links = array(v, "links")
        .map_err(fail)?
        .iter()
        .filter(|l| {
            let to = l.get("traceId").and_then(Value::as_str);
            to.is_none() || to == trace
        })
        .filter_map(|l| l.get("spanId")?.as_str().map(str::to_string))
        .collect();
    Ok(span)
}
