//! `responses`: OpenAI's Responses API, `POST /v1/responses`.
//!
//! A stream is a sequence of typed events, each with its name in the `event:` line and
//! in the data's `type`: `response.created` opens it, `response.output_text.delta` carries
//! output text, `response.reasoning_text.delta` and `response.reasoning_summary_text.delta`
//! carry reasoning, and `response.completed` (or `response.incomplete`, when
//! `max_output_tokens` cut it) closes it with `usage.input_tokens` / `output_tokens`.
//! `error` and `response.failed` are server errors. OpenAI adds event types over time
//! (annotations, tool calls, …), so an unknown type after `response.created` is skipped;
//! any event before `response.created` other than `error` breaks the sequence.

use super::format::{Format, StreamState};
use super::openai::{ChunkInfo, StreamEvent, Usage};
use super::openai::{StrField, WireError};
use super::tools;
use super::wire::{
    JsonPrefix, Kind, close, event_text, shown, write_field, write_json, write_u32_field,
};
use crate::source::{Message, PreparedRequest, Prompt, ToolCall};
use bytes::Bytes;
use llmsurge_proto::{BackendConfig, FinishReason};
use serde::Deserialize;
use std::borrow::Cow;

/// The Responses format.
#[derive(Clone, Debug)]
pub struct Responses {
    prefix: JsonPrefix,
}

impl Responses {
    /// Prepares the constant part of every body.
    pub fn new(cfg: &BackendConfig) -> Self {
        Self {
            prefix: JsonPrefix::generating(
                cfg,
                serde_json::Map::new(),
                &["input", "max_output_tokens"],
            ),
        }
    }
}

/// Token counts as the Responses API names them.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default, deserialize_with = "super::openai::reasoning_detail")]
    output_tokens_details: Option<u32>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            prompt_tokens: u.input_tokens,
            completion_tokens: u.output_tokens,
            reasoning_tokens: u.output_tokens_details,
        }
    }
}

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Kind<'a>>,
    #[serde(default)]
    delta: StrField,
    #[serde(default, borrow)]
    response: Option<WireResponse<'a>>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
}

/// A response object: the `response` of `response.completed`, or a whole body.
#[derive(Deserialize)]
struct WireResponse<'a> {
    #[serde(default, borrow)]
    status: Option<Kind<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    error: Option<WireError<'a>>,
    #[serde(default)]
    output: Vec<WireItem>,
    /// Why an `incomplete` response stopped (`max_output_tokens`, `content_filter`).
    #[serde(default, borrow)]
    incomplete_details: Option<WireIncomplete<'a>>,
}

#[derive(Deserialize)]
struct WireIncomplete<'a> {
    #[serde(default, borrow)]
    reason: Option<Kind<'a>>,
}

impl WireResponse<'_> {
    /// Why the output ended: `incomplete` for the reason it names, `completed` a stop
    /// (a tool call's when the answer was one).
    fn finish(&self) -> Option<FinishReason> {
        match self.status.as_deref()? {
            "completed"
                if self
                    .output
                    .iter()
                    .any(|i| i.kind.as_deref() == Some("function_call")) =>
            {
                Some(FinishReason::ToolCalls)
            }
            "completed" => Some(FinishReason::Stop),
            "incomplete" => Some(
                self.incomplete_details
                    .as_ref()
                    .and_then(|d| d.reason.as_deref())
                    .map_or(FinishReason::Other, FinishReason::from_wire),
            ),
            _ => None,
        }
    }
}

/// An output item: a message (content parts), reasoning (summary and content parts) or
/// a function call (its arguments).
#[derive(Deserialize)]
struct WireItem {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    arguments: StrField,
    #[serde(default)]
    content: Vec<WirePart>,
    #[serde(default)]
    summary: Vec<WirePart>,
}

#[derive(Deserialize)]
struct WirePart {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: StrField,
}

/// One input item: a message, or a tool call (`function_call`, after the assistant's
/// text if it had any) or its result (`function_call_output`).
fn write_input_item(out: &mut Vec<u8>, m: &Message) {
    let message = |out: &mut Vec<u8>| {
        out.push(b'{');
        write_field(out, "role", &m.role);
        out.extend_from_slice(b"\"content\":");
        write_json(out, &m.content);
        out.push(b'}');
    };
    let Some(call) = &m.tool_call else {
        return message(out);
    };
    out.push(b'{');
    if m.role == "assistant" {
        if !m.content.is_empty() {
            out.pop();
            message(out);
            out.extend_from_slice(b",{");
        }
        out.extend_from_slice(b"\"type\":\"function_call\",");
        write_field(out, "call_id", &call.id);
        write_field(out, "name", &call.name);
        out.extend_from_slice(b"\"arguments\":");
        write_json(out, &call.arguments);
    } else {
        out.extend_from_slice(b"\"type\":\"function_call_output\",");
        write_field(out, "call_id", &call.id);
        out.extend_from_slice(b"\"output\":");
        write_json(out, &m.content);
    }
    out.push(b'}');
}

impl Format for Responses {
    fn path(&self) -> &'static str {
        "/v1/responses"
    }

    fn build(&self, req: &PreparedRequest) -> Bytes {
        let mut out = self.prefix.open(req, req.prompt.text_len() + 64);
        if !self.prefix.overrides("input") {
            out.extend_from_slice(b"\"input\":");
            match &req.prompt {
                Prompt::Text(t) => write_json(&mut out, t),
                Prompt::Messages(msgs) => {
                    out.push(b'[');
                    for (i, m) in msgs.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        write_input_item(&mut out, m);
                    }
                    out.push(b']');
                }
                other => write_json(&mut out, &other.joined()),
            }
            out.push(b',');
        }
        if let (Some(n), false) = (req.max_tokens, self.prefix.overrides("max_output_tokens")) {
            write_u32_field(&mut out, "max_output_tokens", n);
            self.prefix.write_ignore_eos(&mut out);
        }
        close(out)
    }

    fn parse_event(&self, data: &[u8], state: &mut StreamState) -> Result<StreamEvent, String> {
        let data = data.trim_ascii();
        let text = event_text(data)?;
        let event: WireEvent<'_> = serde_json::from_str(text)
            .map_err(|e| format!("malformed SSE event ({e}): {}", shown(data)))?;
        let Some(kind) = event.kind.as_deref() else {
            return Err(format!("event without a type: {}", shown(data)));
        };
        let mut info = ChunkInfo::default();
        match kind {
            "error" => {
                let message = event.message.as_deref().unwrap_or("unspecified error");
                return Ok(StreamEvent::Error(message.to_string()));
            }
            "response.created" => state.started = true,
            _ if !state.started => {
                return Err(format!("`{kind}` before response.created"));
            }
            "response.output_text.delta" => info.content = event.delta.non_empty,
            "response.function_call_arguments.delta" => info.tool = event.delta.non_empty,
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                info.reasoning = event.delta.non_empty;
            }
            "response.failed" => {
                let message = event
                    .response
                    .and_then(|r| r.error.map(|e| e.message()))
                    .unwrap_or_else(|| "response.failed".to_string());
                return Ok(StreamEvent::Error(message));
            }
            "response.completed" | "response.incomplete" => {
                info.finish = event.response.as_ref().and_then(WireResponse::finish);
                info.usage = event.response.and_then(|r| r.usage).map(Usage::from);
                info.finished = true;
                return Ok(StreamEvent::Last(info));
            }
            // Other events (output items, content parts, `.done` events, and types the
            // API adds later) say nothing the metrics use.
            _ => {}
        }
        Ok(StreamEvent::Chunk(info))
    }

    fn parse_full(&self, body: &[u8]) -> Result<ChunkInfo, String> {
        let r: WireResponse<'_> =
            serde_json::from_slice(body).map_err(|e| format!("malformed JSON response ({e})"))?;
        if let Some(err) = &r.error {
            return Err(err.message());
        }
        match r.status.as_deref() {
            Some("completed" | "incomplete") => {}
            Some(other) => return Err(format!("response status `{other}`")),
            None => return Err("response without a status".into()),
        }
        let mut info = ChunkInfo {
            usage: r.usage.map(Usage::from),
            finished: true,
            finish: r.finish(),
            ..ChunkInfo::default()
        };
        for item in &r.output {
            info.tool |= item.kind.as_deref() == Some("function_call") && item.arguments.non_empty;
            for part in item.content.iter().chain(&item.summary) {
                match part.kind.as_deref() {
                    Some("output_text") => info.content |= part.text.non_empty,
                    Some("reasoning_text" | "summary_text") => {
                        info.reasoning |= part.text.non_empty;
                    }
                    _ => {}
                }
            }
        }
        Ok(info)
    }

    fn final_event(&self) -> &'static str {
        "response.completed"
    }

    fn event_reply(&self, data: &[u8]) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(data.trim_ascii()).ok()?;
        if v.get("type")?.as_str()? != "response.output_text.delta" {
            return None;
        }
        v.get("delta")?.as_str().map(str::to_string)
    }

    fn full_reply(&self, body: &[u8]) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        let parts = v.get("output")?.as_array()?.iter().flat_map(|item| {
            item.get("content")
                .and_then(serde_json::Value::as_array)
                .into_iter()
                .flatten()
        });
        Some(
            parts
                .filter(|p| {
                    p.get("type").and_then(serde_json::Value::as_str) == Some("output_text")
                })
                .filter_map(|p| p.get("text").and_then(serde_json::Value::as_str))
                .collect(),
        )
    }

    fn event_tool(&self, data: &[u8], call: &mut Option<ToolCall>) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(data.trim_ascii()) else {
            return;
        };
        // Each output item has its index; a call's deltas name it.
        let part = tools::part_of(&v, "output_index");
        match v.get("type").and_then(serde_json::Value::as_str) {
            // The item opens with the call's id and name; its arguments follow as deltas.
            Some("response.output_item.added") => {
                if let Some(item) = v.get("item").filter(|i| is_function_call(i)) {
                    tools::add_piece(call, part, item, &CALL);
                }
            }
            Some("response.function_call_arguments.delta") if call.is_some() => {
                let delta = tools::Fields {
                    arguments: "/delta",
                    ..CALL
                };
                tools::add_piece(call, part, &v, &delta);
            }
            _ => {}
        }
    }

    fn full_tool(&self, body: &[u8]) -> Option<ToolCall> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        let item = v
            .get("output")?
            .as_array()?
            .iter()
            .find(|i| is_function_call(i))?;
        tools::whole(item, &CALL)
    }
}

/// Where a `function_call` item has its fields.
const CALL: tools::Fields<'static> = tools::Fields {
    id: "/call_id",
    name: "/name",
    arguments: "/arguments",
};

/// Whether an output item is a `function_call`.
fn is_function_call(item: &serde_json::Value) -> bool {
    item.get("type").and_then(serde_json::Value::as_str) == Some("function_call")
}
