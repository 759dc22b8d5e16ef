//! Anthropic's Messages API, `POST /v1/messages`: the request the mock reads and the
//! events and bodies it writes.
//!
//! A stream is `message_start` (`usage.input_tokens`, and `output_tokens: 1` as
//! Anthropic sends it), then per content block (a `thinking` block first when the model
//! reasons, then a `text` block) `content_block_start`, `content_block_delta`s
//! (`thinking_delta` / `text_delta`) and `content_block_stop`, a `ping` after the first
//! block opens, then `message_delta` (`stop_reason` `end_turn` or `max_tokens`,
//! `usage.output_tokens` counting thinking too) and `message_stop`. Every event has an
//! `event:` line. Thinking blocks carry an empty `signature` and no `signature_delta`.

use std::cell::Cell;

use bytes::{BufMut, BytesMut};
use serde::Deserialize;

use super::openai::{Content, FinishReason, Usage, fmt_u64, itoa_buf, write_words};
use super::prefix_cache::PromptBlocks;

/// `POST /v1/messages`
#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    /// Served model name; the first one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation (user and assistant turns).
    pub messages: Vec<super::openai::Message>,
    /// The system prompt: a text or text blocks.
    #[serde(default)]
    pub system: Option<Content>,
    /// Output cap; the API requires it.
    pub max_tokens: u64,
    /// Stream as SSE.
    #[serde(default)]
    pub stream: Option<bool>,
    /// vLLM extension: generate exactly the cap.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
}

impl MessagesRequest {
    /// The prompt's blocks: the system prompt, then every message text.
    pub fn blocks(&self) -> PromptBlocks {
        let mut blocks = PromptBlocks::default();
        if let Some(system) = &self.system {
            system.for_each_text(|t| blocks.push_text(t));
        }
        for content in self.messages.iter().filter_map(|m| m.content.as_ref()) {
            content.for_each_text(|t| blocks.push_text(t));
        }
        blocks
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    Nothing,
    Thinking,
    Text,
}

/// Writes the events and body of one message.
#[derive(Debug)]
pub struct Writer {
    /// `{"id":"msg_…","type":"message","role":"assistant","model":…` (left open).
    head: Vec<u8>,
    prompt_tokens: u64,
    unknown_events: bool,
    no_final_event: bool,
    open: Cell<Open>,
    /// Index of the open (or next) content block.
    index: Cell<u64>,
}

impl Writer {
    /// `model_json` is the model name already JSON-quoted.
    pub fn new(
        seq: u64,
        model_json: &str,
        prompt_tokens: u64,
        unknown_events: bool,
        no_final_event: bool,
    ) -> Self {
        let head = format!(
            r#"{{"id":"msg_{seq:016x}","type":"message","role":"assistant","model":{model_json}"#
        );
        Writer {
            head: head.into_bytes(),
            prompt_tokens,
            unknown_events,
            no_final_event,
            open: Cell::new(Open::Nothing),
            index: Cell::new(0),
        }
    }

    /// Opens an event: the `event:` line and the data's `type`.
    fn event(out: &mut BytesMut, name: &str) {
        out.put_slice(b"event: ");
        out.put_slice(name.as_bytes());
        out.put_slice(b"\ndata: {\"type\":\"");
        out.put_slice(name.as_bytes());
        out.put_u8(b'"');
    }

    fn end_event(out: &mut BytesMut) {
        out.put_slice(b"}\n\n");
    }

    fn index(&self, out: &mut BytesMut) {
        let mut num = itoa_buf();
        out.put_slice(br#","index":"#);
        out.put_slice(fmt_u64(&mut num, self.index.get()));
    }

    fn close_block(&self, out: &mut BytesMut) {
        if self.open.get() == Open::Nothing {
            return;
        }
        Self::event(out, "content_block_stop");
        self.index(out);
        Self::end_event(out);
        self.index.set(self.index.get() + 1);
        self.open.set(Open::Nothing);
    }

    /// The events of one chunk of `words`; the first chunk opens the message.
    pub fn token_chunk(
        &self,
        out: &mut BytesMut,
        words: impl Iterator<Item = &'static str>,
        first: bool,
        reasoning: bool,
    ) {
        if first {
            let mut num = itoa_buf();
            Self::event(out, "message_start");
            out.put_slice(br#","message":"#);
            out.put_slice(&self.head);
            out.put_slice(br#","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":"#);
            out.put_slice(fmt_u64(&mut num, self.prompt_tokens));
            out.put_slice(br#","output_tokens":1}}"#);
            Self::end_event(out);
        }
        let want = if reasoning {
            Open::Thinking
        } else {
            Open::Text
        };
        if self.open.get() != want {
            self.close_block(out);
            Self::event(out, "content_block_start");
            self.index(out);
            out.put_slice(if reasoning {
                br#","content_block":{"type":"thinking","thinking":"","signature":""}"#.as_slice()
            } else {
                br#","content_block":{"type":"text","text":""}"#
            });
            Self::end_event(out);
            self.open.set(want);
            if first {
                Self::event(out, "ping");
                Self::end_event(out);
            }
        }
        Self::event(out, "content_block_delta");
        self.index(out);
        out.put_slice(if reasoning {
            br#","delta":{"type":"thinking_delta","thinking":""#.as_slice()
        } else {
            br#","delta":{"type":"text_delta","text":""#
        });
        write_words(out, words);
        out.put_slice(b"\"}");
        Self::end_event(out);
        if first && self.unknown_events {
            Self::event(out, "llmsurge_mock_unknown");
            out.put_slice(br#","note":"an event type the API does not define""#);
            Self::end_event(out);
        }
    }

    /// Closes the open block and the message, with its output usage.
    pub fn end_stream(&self, out: &mut BytesMut, finish: FinishReason, usage: Usage) {
        self.close_block(out);
        let mut num = itoa_buf();
        Self::event(out, "message_delta");
        out.put_slice(br#","delta":{"stop_reason":""#);
        out.put_slice(stop_reason(finish).as_bytes());
        out.put_slice(br#"","stop_sequence":null},"usage":{"output_tokens":"#);
        out.put_slice(fmt_u64(&mut num, usage.content + usage.reasoning));
        out.put_u8(b'}');
        Self::end_event(out);
        if !self.no_final_event {
            Self::event(out, "message_stop");
            Self::end_event(out);
        }
    }

    /// A malformed event: a delta cut inside its JSON.
    pub fn garbage_chunk(&self, out: &mut BytesMut) {
        out.put_slice(
            b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\"\n\n",
        );
    }

    /// A whole non-streaming message.
    pub fn full_body(
        &self,
        out: &mut BytesMut,
        content: impl Iterator<Item = &'static str>,
        reasoning: impl Iterator<Item = &'static str>,
        finish: FinishReason,
        usage: Usage,
    ) {
        let mut num = itoa_buf();
        out.put_slice(&self.head);
        out.put_slice(br#","content":["#);
        if usage.reasoning > 0 {
            out.put_slice(br#"{"type":"thinking","thinking":""#);
            write_words(out, reasoning);
            out.put_slice(br#"","signature":""},"#);
        }
        out.put_slice(br#"{"type":"text","text":""#);
        write_words(out, content);
        out.put_slice(br#""}],"stop_reason":""#);
        out.put_slice(stop_reason(finish).as_bytes());
        out.put_slice(br#"","stop_sequence":null,"usage":{"input_tokens":"#);
        out.put_slice(fmt_u64(&mut num, usage.prompt));
        out.put_slice(br#","output_tokens":"#);
        out.put_slice(fmt_u64(&mut num, usage.content + usage.reasoning));
        out.put_slice(b"}}");
    }
}

/// Rewrites an error answer into Anthropic's shape,
/// `{"type":"error","error":{"type":"…_error","message":"…"}}`, keeping the status and
/// message; a success passes through.
pub fn error_shape(
    mut response: hyper::Response<super::body::MockBody>,
) -> hyper::Response<super::body::MockBody> {
    use super::body::MockBody;
    let status = response.status();
    if status.is_success() {
        return response;
    }
    let MockBody::Full(Some(body)) = response.body() else {
        return response;
    };
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    // Anthropic's error types by status.
    let kind = match status.as_u16() {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let shaped = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
    *response.body_mut() = MockBody::full(serde_json::to_vec(&shaped).unwrap_or_default());
    response
}

fn stop_reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
    }
}
