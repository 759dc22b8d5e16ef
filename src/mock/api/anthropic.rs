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

use super::events::{Block, BlockEvents, end_event, open_event};
use super::shared::{
    Content, FinishReason, Message, ToolCall, Usage, fmt_u64, generation_request, itoa_buf,
    write_words,
};
use crate::mock::model::prefix_cache::PromptBlocks;

generation_request! {
    /// `POST /v1/messages`
    pub struct MessagesRequest {
        /// The conversation (user and assistant turns).
        pub messages: Vec<Message>,
        /// The system prompt: a text or text blocks.
        #[serde(default)]
        pub system: Option<Content>,
        /// Output cap; the API requires it.
        pub max_tokens: u64,
    }
    cap(r) = Some(r.max_tokens);
    include_usage(_r) = true;
}

impl MessagesRequest {
    /// The prompt's blocks: the system prompt, then every message text.
    pub fn blocks(&self) -> PromptBlocks {
        let mut blocks = PromptBlocks::default();
        if let Some(system) = &self.system {
            system.for_each_text(|t| blocks.push_text(t));
        }
        for m in &self.messages {
            m.for_each_text(|t| blocks.push_text(t));
        }
        blocks
    }
}

/// Writes the events and body of one message.
#[derive(Debug)]
pub struct Writer {
    /// `{"id":"msg_…","type":"message","role":"assistant","model":…` (left open).
    head: Vec<u8>,
    prompt_tokens: u64,
    unknown_events: bool,
    no_final_event: bool,
    open: Cell<Block>,
    /// Index of the open (or next) content block.
    index: Cell<u64>,
    /// The tool call the answer is, if the plan made one.
    tool: Option<ToolCall>,
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
            open: Cell::new(Block::Nothing),
            index: Cell::new(0),
            tool: None,
        }
    }

    /// Answers with `tool` (a `tool_use` block) instead of text.
    pub fn with_tool_call(mut self, tool: Option<ToolCall>) -> Self {
        self.tool = tool;
        self
    }

    fn index(&self, out: &mut BytesMut) {
        let mut num = itoa_buf();
        out.put_slice(br#","index":"#);
        out.put_slice(fmt_u64(&mut num, self.index.get()));
    }

    /// Closes the open block and the message, with its output usage.
    pub fn end_stream(&self, out: &mut BytesMut, finish: FinishReason, usage: Usage) {
        self.close_open(out);
        let mut num = itoa_buf();
        self.event(out, "message_delta");
        out.put_slice(br#","delta":{"stop_reason":""#);
        out.put_slice(stop_reason(finish).as_bytes());
        out.put_slice(br#"","stop_sequence":null},"usage":{"output_tokens":"#);
        out.put_slice(fmt_u64(&mut num, usage.content + usage.reasoning));
        out.put_u8(b'}');
        end_event(out);
        if !self.no_final_event {
            self.event(out, "message_stop");
            end_event(out);
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
        match &self.tool {
            Some(tool) => {
                out.put_slice(br#"{"type":"tool_use","id":"toolu_"#);
                out.put_slice(tool.id.as_bytes());
                out.put_slice(br#"","name":""#);
                out.put_slice(tool.name.as_bytes());
                out.put_slice(br#"","input":"#);
                ToolCall::write_object(out, content);
                out.put_u8(b'}');
            }
            None => {
                out.put_slice(br#"{"type":"text","text":""#);
                write_words(out, content);
                out.put_slice(br#""}"#);
            }
        }
        out.put_slice(br#"],"stop_reason":""#);
        out.put_slice(stop_reason(finish).as_bytes());
        out.put_slice(br#"","stop_sequence":null,"usage":{"input_tokens":"#);
        out.put_slice(fmt_u64(&mut num, usage.prompt));
        out.put_slice(br#","output_tokens":"#);
        out.put_slice(fmt_u64(&mut num, usage.content + usage.reasoning));
        out.put_slice(b"}}");
    }
}

/// An error answer's body in Anthropic's shape,
/// `{"type":"error","error":{"type":"…_error","message":"…"}}`, from the OpenAI error
/// body (or plain text) the handler wrote and its status, keeping the message.
pub fn error_body(status: u16, body: &[u8]) -> Vec<u8> {
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    // Anthropic's error types by status.
    let kind = match status {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let shaped = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
    serde_json::to_vec(&shaped).unwrap_or_default()
}

impl BlockEvents for Writer {
    const UNKNOWN_EVENT: &'static str = "llmsurge_mock_unknown";

    fn open_cell(&self) -> &Cell<Block> {
        &self.open
    }

    fn answer_block(&self) -> Block {
        if self.tool.is_some() {
            Block::Tool
        } else {
            Block::Text
        }
    }

    fn unknown_events(&self) -> bool {
        self.unknown_events
    }

    fn event(&self, out: &mut BytesMut, name: &str) {
        open_event(out, name);
    }

    /// `message_start`, with the prompt's usage.
    fn start(&self, out: &mut BytesMut) {
        let mut num = itoa_buf();
        self.event(out, "message_start");
        out.put_slice(br#","message":"#);
        out.put_slice(&self.head);
        out.put_slice(
            br#","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":"#,
        );
        out.put_slice(fmt_u64(&mut num, self.prompt_tokens));
        out.put_slice(br#","output_tokens":1}}"#);
        end_event(out);
    }

    /// `content_block_start`, and a `ping` after the response's first block opens.
    fn open_block(&self, out: &mut BytesMut, block: Block, first: bool) {
        self.event(out, "content_block_start");
        self.index(out);
        match (block, &self.tool) {
            (Block::Reasoning, _) => out
                .put_slice(br#","content_block":{"type":"thinking","thinking":"","signature":""}"#),
            (Block::Tool, Some(tool)) => {
                out.put_slice(br#","content_block":{"type":"tool_use","id":"toolu_"#);
                out.put_slice(tool.id.as_bytes());
                out.put_slice(br#"","name":""#);
                out.put_slice(tool.name.as_bytes());
                out.put_slice(br#"","input":{}}"#);
            }
            _ => out.put_slice(br#","content_block":{"type":"text","text":""}"#),
        }
        end_event(out);
        if first {
            self.event(out, "ping");
            end_event(out);
        }
    }

    fn delta(&self, out: &mut BytesMut, block: Block, words: impl Iterator<Item = &'static str>) {
        self.event(out, "content_block_delta");
        self.index(out);
        match (block, &self.tool) {
            (Block::Reasoning, _) => {
                out.put_slice(br#","delta":{"type":"thinking_delta","thinking":""#);
                write_words(out, words);
            }
            (Block::Tool, Some(tool)) => {
                out.put_slice(br#","delta":{"type":"input_json_delta","partial_json":""#);
                tool.write_pieces(out, words);
            }
            _ => {
                out.put_slice(br#","delta":{"type":"text_delta","text":""#);
                write_words(out, words);
            }
        }
        out.put_slice(b"\"}");
        end_event(out);
    }

    /// `content_block_stop`; the next block takes the next index.
    fn close_block(&self, out: &mut BytesMut, _block: Block) {
        self.event(out, "content_block_stop");
        self.index(out);
        end_event(out);
        self.index.set(self.index.get() + 1);
    }
}

fn stop_reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
    }
}
