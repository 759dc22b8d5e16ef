//! `anthropic`: Anthropic's Messages API, `POST /v1/messages`.
//!
//! The stream is `message_start` (with `usage.input_tokens`), then per content block
//! `content_block_start`, `content_block_delta`s (`text_delta` carries output text,
//! `thinking_delta` reasoning) and `content_block_stop`, then `message_delta` (with
//! `usage.output_tokens`, cumulative) and `message_stop`. `ping` may come anywhere and
//! `error` is a server error. Anthropic's versioning policy says new event types may be
//! added and clients should ignore unknown ones, so an unknown type after
//! `message_start` is skipped; any event before it other than `ping` and `error` breaks
//! the sequence. System messages become the top-level `system`, and `max_tokens`, which
//! the API requires, is sent on every request.

use super::format::{Format, StreamState};
use super::openai::{ChunkInfo, StreamEvent, Usage};
use super::openai::{FinishField, StrField, WireError};
use super::tools;
use super::wire::{
    JsonPrefix, Kind, close, event_text, shown, write_field, write_json, write_u32_field,
};
use crate::source::{Message, PreparedRequest, Prompt, ToolCall};
use bytes::Bytes;
use llmsurge_proto::{BackendConfig, FinishReason};
use serde::Deserialize;

/// `max_tokens` of a request that names no output length (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The API version sent in `anthropic-version`.
pub const API_VERSION: &str = "2023-06-01";

/// The Messages format.
#[derive(Clone, Debug)]
pub struct Anthropic {
    prefix: JsonPrefix,
}

impl Anthropic {
    /// Prepares the constant part of every body.
    pub fn new(cfg: &BackendConfig) -> Self {
        Self {
            prefix: JsonPrefix::generating(
                cfg,
                serde_json::Map::new(),
                &["messages", "system", "max_tokens"],
            ),
        }
    }
}

/// Token counts as the Messages API names them.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Kind<'a>>,
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default, borrow)]
    error: Option<WireError<'a>>,
}

#[derive(Deserialize)]
struct WireDelta {
    #[serde(default)]
    text: StrField,
    #[serde(default)]
    thinking: StrField,
    /// A streamed tool call's arguments (`input_json_delta`).
    #[serde(default)]
    partial_json: StrField,
    /// A whole body's `tool_use` block's arguments.
    #[serde(default)]
    input: Option<serde::de::IgnoredAny>,
    /// `message_delta`'s reason the output ended.
    #[serde(default)]
    stop_reason: FinishField,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireBody<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Kind<'a>>,
    #[serde(default)]
    content: Vec<WireDelta>,
    #[serde(default, borrow)]
    stop_reason: Option<Kind<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    error: Option<WireError<'a>>,
}

/// Where a `tool_use` block (or a streamed piece of its input) has its fields.
const CALL: tools::Fields<'static> = tools::Fields {
    id: "/id",
    name: "/name",
    arguments: "/partial_json",
};

/// A tool call (the assistant's `tool_use` block, after its text if it had any) or its
/// result (a user message's `tool_result` block), in the Messages API's shape; with the
/// comma that follows every message.
fn write_tool_message(out: &mut Vec<u8>, m: &Message, call: &ToolCall) {
    if m.role == "assistant" {
        out.extend_from_slice(b"{\"role\":\"assistant\",\"content\":[");
        if !m.content.is_empty() {
            out.extend_from_slice(b"{\"type\":\"text\",");
            write_field(out, "text", &m.content);
            out.pop();
            out.extend_from_slice(b"},");
        }
        out.extend_from_slice(b"{\"type\":\"tool_use\",");
        write_field(out, "id", &call.id);
        write_field(out, "name", &call.name);
        // `input` is an object: the arguments as they came when they are one.
        out.extend_from_slice(b"\"input\":");
        match serde_json::from_str::<serde_json::Value>(&call.arguments) {
            Ok(v) if v.is_object() => out.extend_from_slice(call.arguments.as_bytes()),
            _ => out.extend_from_slice(b"{}"),
        }
        out.extend_from_slice(b"}]},");
    } else {
        out.extend_from_slice(b"{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",");
        write_field(out, "tool_use_id", &call.id);
        out.extend_from_slice(b"\"content\":");
        write_json(out, &m.content);
        out.extend_from_slice(b"}]},");
    }
}

impl Format for Anthropic {
    fn path(&self) -> &'static str {
        "/v1/messages"
    }

    fn headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("anthropic-version", API_VERSION)]
    }

    fn build(&self, req: &PreparedRequest) -> Bytes {
        let mut out = self.prefix.open(req, req.prompt.text_len() + 64);
        if !self.prefix.overrides("messages") {
            let mut system: Vec<&str> = Vec::new();
            out.extend_from_slice(b"\"messages\":[");
            let message = |out: &mut Vec<u8>, role: &str, content: &str| {
                out.push(b'{');
                write_field(out, "role", role);
                out.extend_from_slice(b"\"content\":");
                write_json(out, content);
                out.extend_from_slice(b"},");
            };
            match &req.prompt {
                Prompt::Text(t) => message(&mut out, "user", t),
                Prompt::Messages(msgs) => {
                    for m in msgs {
                        match &m.tool_call {
                            _ if m.role == "system" => system.push(&m.content),
                            None => message(&mut out, &m.role, &m.content),
                            Some(call) => write_tool_message(&mut out, m, call),
                        }
                    }
                }
                other => message(&mut out, "user", &other.joined()),
            }
            if out.last() == Some(&b',') {
                out.pop();
            }
            out.extend_from_slice(b"],");
            if !system.is_empty() && !self.prefix.overrides("system") {
                write_field(&mut out, "system", &system.join("\n"));
            }
        }
        if !self.prefix.overrides("max_tokens") {
            write_u32_field(
                &mut out,
                "max_tokens",
                req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            );
            // Only with a length asked: the default is a cap, not a length to force.
            if req.max_tokens.is_some() {
                self.prefix.write_ignore_eos(&mut out);
            }
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
            "ping" => {}
            "error" => {
                let message = event
                    .error
                    .map_or_else(|| "unspecified error".to_string(), |e| e.message());
                return Ok(StreamEvent::Error(message));
            }
            "message_start" => {
                state.started = true;
                // Its output_tokens is the count so far (1, say), not the answer's:
                // message_delta has that.
                let input = event
                    .message
                    .and_then(|m| m.usage)
                    .and_then(|u| u.input_tokens);
                info.usage = input.map(|n| Usage {
                    prompt_tokens: Some(n),
                    completion_tokens: None,
                    // The Messages API counts no thinking tokens apart.
                    reasoning_tokens: None,
                });
            }
            _ if !state.started => return Err(format!("`{kind}` before message_start")),
            "content_block_delta" => {
                if let Some(d) = &event.delta {
                    info.content = d.text.non_empty;
                    info.reasoning = d.thinking.non_empty;
                    info.tool = d.partial_json.non_empty;
                }
            }
            "message_delta" => {
                info.usage = event.usage.map(|u| Usage {
                    prompt_tokens: u.input_tokens,
                    completion_tokens: u.output_tokens,
                    reasoning_tokens: None,
                });
                info.finished = true;
                info.finish = event.delta.as_ref().and_then(|d| d.stop_reason.0);
            }
            "message_stop" => return Ok(StreamEvent::Last(info)),
            // content_block_start/stop, and types the API adds later.
            _ => {}
        }
        Ok(StreamEvent::Chunk(info))
    }

    fn parse_full(&self, body: &[u8]) -> Result<ChunkInfo, String> {
        let whole: WireBody<'_> =
            serde_json::from_slice(body).map_err(|e| format!("malformed JSON response ({e})"))?;
        if let Some(err) = &whole.error {
            return Err(err.message());
        }
        match whole.kind.as_deref() {
            Some("message") => {}
            Some(other) => return Err(format!("response of type `{other}`, not a message")),
            None => return Err("response without a type".into()),
        }
        let mut info = ChunkInfo {
            usage: whole.usage.map(|u| Usage {
                prompt_tokens: u.input_tokens,
                completion_tokens: u.output_tokens,
                reasoning_tokens: None,
            }),
            finished: whole.stop_reason.is_some(),
            finish: whole.stop_reason.as_deref().map(FinishReason::from_wire),
            ..ChunkInfo::default()
        };
        for block in &whole.content {
            info.content |= block.text.non_empty;
            info.reasoning |= block.thinking.non_empty;
            info.tool |= block.input.is_some();
        }
        Ok(info)
    }

    fn final_event(&self) -> &'static str {
        "message_stop"
    }

    fn event_reply(&self, data: &[u8]) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(data.trim_ascii()).ok()?;
        if v.get("type")?.as_str()? != "content_block_delta" {
            return None;
        }
        v.get("delta")?.get("text")?.as_str().map(str::to_string)
    }

    fn full_reply(&self, body: &[u8]) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        Some(
            v.get("content")?
                .as_array()?
                .iter()
                .filter(|b| b.get("type").and_then(serde_json::Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(serde_json::Value::as_str))
                .collect(),
        )
    }

    fn event_tool(&self, data: &[u8], call: &mut Option<ToolCall>) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(data.trim_ascii()) else {
            return;
        };
        let kind = |p: &str| v.pointer(p).and_then(serde_json::Value::as_str);
        // Each content block has its index; a block's deltas name it.
        let part = tools::part_of(&v, "index");
        match kind("/type") {
            // The block opens with the call's id and name (its `input` is an empty object,
            // not text); the input follows as pieces of JSON text.
            Some("content_block_start") if kind("/content_block/type") == Some("tool_use") => {
                tools::add_piece(call, part, &v["content_block"], &CALL);
            }
            Some("content_block_delta")
                if call.is_some() && kind("/delta/type") == Some("input_json_delta") =>
            {
                tools::add_piece(call, part, &v["delta"], &CALL);
            }
            _ => {}
        }
    }

    fn full_tool(&self, body: &[u8]) -> Option<ToolCall> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        let block = v
            .get("content")?
            .as_array()?
            .iter()
            .find(|b| b.get("type").and_then(serde_json::Value::as_str) == Some("tool_use"))?;
        let mut call = tools::whole(block, &CALL)?;
        call.arguments = block
            .get("input")
            .map(ToString::to_string)
            .unwrap_or_default();
        Some(call)
    }
}
