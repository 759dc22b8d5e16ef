//! OpenAI's Responses API, `POST /v1/responses`: the request the mock reads and the
//! events and bodies it writes.
//!
//! A stream is `response.created`, `response.in_progress`, then per output item
//! `response.output_item.added` (a `reasoning` item first when the model reasons, then
//! the `message`, whose `response.content_part.added` opens its `output_text` part), the
//! deltas (`response.reasoning_text.delta`, `response.output_text.delta`), the item's
//! `.done` events, and `response.completed` (`response.incomplete` with
//! `incomplete_details.reason = "max_output_tokens"` when the cap cut it) carrying
//! `usage.input_tokens` / `output_tokens` (reasoning included, as
//! `output_tokens_details.reasoning_tokens`). Every event has an `event:` line and a
//! `sequence_number`. The `.done` events and the final response repeat the whole text.

use std::cell::{Cell, RefCell};

use bytes::{BufMut, BytesMut};
use serde::Deserialize;

use super::events::{Block, BlockEvents, end_event, open_event};
use super::shared::{
    FinishReason, Message, ToolCall, Usage, fmt_u64, generation_request, itoa_buf, write_words,
};
use crate::mock::model::prefix_cache::PromptBlocks;

generation_request! {
    /// `POST /v1/responses`
    pub struct ResponsesRequest {
        /// A text, or a list of input items (messages).
        pub input: Input,
        /// System instructions.
        #[serde(default)]
        pub instructions: Option<String>,
        /// Output cap.
        #[serde(default)]
        pub max_output_tokens: Option<u64>,
    }
    cap(r) = r.max_output_tokens;
    include_usage(_r) = true;
}

/// The `input` of a request.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Input {
    /// One user text.
    Text(String),
    /// Input items: the content of message items counts, and a resent `function_call`'s
    /// arguments and a `function_call_output`'s result; parts are `input_text` with
    /// `text`, as chat's text parts.
    Items(Vec<Message>),
}

impl ResponsesRequest {
    /// The prompt's blocks: instructions, then every input text.
    pub fn blocks(&self) -> PromptBlocks {
        let mut blocks = PromptBlocks::default();
        if let Some(i) = &self.instructions {
            blocks.push_text(i);
        }
        match &self.input {
            Input::Text(t) => blocks.push_text(t),
            Input::Items(items) => {
                for item in items {
                    item.for_each_text(|t| blocks.push_text(t));
                }
            }
        }
        blocks
    }
}

/// Writes the events and body of one response.
#[derive(Debug)]
pub struct Writer {
    /// `{"id":"resp_…","object":"response","created_at":…,"model":…` (left open).
    head: Vec<u8>,
    /// The hex suffix item ids share.
    id: String,
    unknown_events: bool,
    no_final_event: bool,
    sequence: Cell<u64>,
    open: Cell<Block>,
    output_index: Cell<u64>,
    /// The reasoning and answer text so far (JSON-safe: the mock's words need no
    /// escaping), repeated in the `.done` events and the final response as OpenAI does.
    reasoning_text: RefCell<Vec<u8>>,
    message_text: RefCell<Vec<u8>>,
    /// The tool call the answer is (a `function_call` item, its arguments in
    /// `message_text`), if the plan made one.
    tool: Option<ToolCall>,
}

impl Writer {
    /// `model_json` is the model name already JSON-quoted.
    pub fn new(
        seq: u64,
        created: u64,
        model_json: &str,
        unknown_events: bool,
        no_final_event: bool,
    ) -> Self {
        let id = format!("{seq:016x}");
        let head = format!(
            r#"{{"id":"resp_{id}","object":"response","created_at":{created},"model":{model_json}"#
        );
        Writer {
            head: head.into_bytes(),
            id,
            unknown_events,
            no_final_event,
            sequence: Cell::new(0),
            open: Cell::new(Block::Nothing),
            output_index: Cell::new(0),
            reasoning_text: RefCell::new(Vec::new()),
            message_text: RefCell::new(Vec::new()),
            tool: None,
        }
    }

    /// Answers with `tool` (a `function_call` item) instead of a message.
    pub fn with_tool_call(mut self, tool: Option<ToolCall>) -> Self {
        self.tool = tool;
        self
    }

    fn index(&self, out: &mut BytesMut) {
        let mut num = itoa_buf();
        out.put_slice(br#","output_index":"#);
        out.put_slice(fmt_u64(&mut num, self.output_index.get()));
    }

    fn item_id(&self, out: &mut BytesMut, open: Block) {
        out.put_slice(match open {
            Block::Reasoning => b"\"rs_".as_slice(),
            Block::Tool => b"\"fc_",
            _ => b"\"msg_",
        });
        out.put_slice(self.id.as_bytes());
        out.put_u8(b'"');
    }

    /// The item as `.added` (`text` None: no content yet) and `.done` events show it.
    fn item(&self, out: &mut BytesMut, open: Block, status: &str, text: Option<&[u8]>) {
        out.put_slice(br#","item":"#);
        self.item_object(out, open, status, text);
    }

    /// An output item object; with `text`, its one content part.
    fn item_object(&self, out: &mut BytesMut, open: Block, status: &str, text: Option<&[u8]>) {
        out.put_slice(br#"{"id":"#);
        self.item_id(out, open);
        if let (Block::Tool, Some(tool)) = (open, &self.tool) {
            out.put_slice(br#","type":"function_call","status":""#);
            out.put_slice(status.as_bytes());
            out.put_slice(br#"","call_id":"call_"#);
            out.put_slice(tool.id.as_bytes());
            out.put_slice(br#"","name":""#);
            out.put_slice(tool.name.as_bytes());
            out.put_slice(br#"","arguments":""#);
            out.put_slice(text.unwrap_or_default());
            out.put_slice(br#""}"#);
        } else if open == Block::Reasoning {
            out.put_slice(br#","type":"reasoning","summary":[]"#);
            if let Some(t) = text {
                out.put_slice(br#","content":[{"type":"reasoning_text","text":""#);
                out.put_slice(t);
                out.put_slice(br#""}]"#);
            }
            out.put_u8(b'}');
        } else {
            out.put_slice(br#","type":"message","status":""#);
            out.put_slice(status.as_bytes());
            out.put_slice(br#"","role":"assistant","content":["#);
            if let Some(t) = text {
                Self::output_text_part(out, t);
            }
            out.put_slice(b"]}");
        }
    }

    fn output_text_part(out: &mut BytesMut, text: &[u8]) {
        out.put_slice(br#"{"type":"output_text","text":""#);
        out.put_slice(text);
        out.put_slice(br#"","annotations":[]}"#);
    }

    fn text(&self, open: Block) -> &RefCell<Vec<u8>> {
        if open == Block::Reasoning {
            &self.reasoning_text
        } else {
            &self.message_text
        }
    }

    fn response(&self, out: &mut BytesMut, status: &str) {
        out.put_slice(br#","response":"#);
        out.put_slice(&self.head);
        out.put_slice(br#","status":""#);
        out.put_slice(status.as_bytes());
        out.put_slice(br#"","output":[],"usage":null}"#);
    }

    fn part_position(&self, out: &mut BytesMut, open: Block) {
        out.put_slice(br#","item_id":"#);
        self.item_id(out, open);
        self.index(out);
        out.put_slice(br#","content_index":0"#);
    }

    /// Closes the open item and the response, with its usage.
    pub fn end_stream(&self, out: &mut BytesMut, finish: FinishReason, usage: Usage) {
        self.close_open(out);
        if self.no_final_event {
            return;
        }
        let (name, status) = status(finish);
        self.event(out, name);
        out.put_slice(br#","response":"#);
        let reasoning = self.reasoning_text.borrow();
        let message = self.message_text.borrow();
        self.whole(
            out,
            status,
            (usage.content > 0).then_some(&message[..]),
            (usage.reasoning > 0).then_some(&reasoning[..]),
            usage,
        );
        end_event(out);
    }

    /// A malformed event: a delta cut inside its JSON.
    pub fn garbage_chunk(&self, out: &mut BytesMut) {
        out.put_slice(
            b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"\n\n",
        );
    }

    /// A whole non-streaming response.
    pub fn full_body(
        &self,
        out: &mut BytesMut,
        content: impl Iterator<Item = &'static str>,
        reasoning: impl Iterator<Item = &'static str>,
        finish: FinishReason,
        usage: Usage,
    ) {
        let mut content_text = BytesMut::new();
        match &self.tool {
            Some(tool) => tool.write_pieces(&mut content_text, content),
            None => write_words(&mut content_text, content),
        }
        let mut reasoning_text = BytesMut::new();
        write_words(&mut reasoning_text, reasoning);
        self.whole(
            out,
            status(finish).1,
            (usage.content > 0).then_some(&content_text[..]),
            (usage.reasoning > 0).then_some(&reasoning_text[..]),
            usage,
        );
    }

    /// The response object, with an output item per text given (reasoning first).
    fn whole(
        &self,
        out: &mut BytesMut,
        status: &str,
        content: Option<&[u8]>,
        reasoning: Option<&[u8]>,
        usage: Usage,
    ) {
        out.put_slice(&self.head);
        out.put_slice(br#","status":""#);
        out.put_slice(status.as_bytes());
        out.put_slice(br#"","incomplete_details":"#);
        out.put_slice(if status == "incomplete" {
            br#"{"reason":"max_output_tokens"}"#.as_slice()
        } else {
            b"null"
        });
        out.put_slice(br#","output":["#);
        if let Some(t) = reasoning {
            self.item_object(out, Block::Reasoning, "completed", Some(t));
        }
        if let Some(t) = content {
            if reasoning.is_some() {
                out.put_u8(b',');
            }
            self.item_object(out, self.answer_block(), "completed", Some(t));
        }
        out.put_slice(br#"],"usage":"#);
        let output = usage.content + usage.reasoning;
        let mut num = itoa_buf();
        out.put_slice(br#"{"input_tokens":"#);
        out.put_slice(fmt_u64(&mut num, usage.prompt));
        out.put_slice(br#","input_tokens_details":{"cached_tokens":0},"output_tokens":"#);
        out.put_slice(fmt_u64(&mut num, output));
        out.put_slice(br#","output_tokens_details":{"reasoning_tokens":"#);
        out.put_slice(fmt_u64(&mut num, usage.reasoning));
        out.put_slice(br#"},"total_tokens":"#);
        out.put_slice(fmt_u64(&mut num, usage.prompt + output));
        out.put_slice(b"}}");
    }
}

impl BlockEvents for Writer {
    const UNKNOWN_EVENT: &'static str = "response.llmsurge_mock.unknown";

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

    /// Every event carries its `sequence_number`.
    fn event(&self, out: &mut BytesMut, name: &str) {
        let n = self.sequence.get();
        self.sequence.set(n + 1);
        let mut num = itoa_buf();
        open_event(out, name);
        out.put_slice(b",\"sequence_number\":");
        out.put_slice(fmt_u64(&mut num, n));
    }

    fn start(&self, out: &mut BytesMut) {
        self.event(out, "response.created");
        self.response(out, "in_progress");
        end_event(out);
        self.event(out, "response.in_progress");
        self.response(out, "in_progress");
        end_event(out);
    }

    /// An output item, and the `output_text` part of a message.
    fn open_block(&self, out: &mut BytesMut, block: Block, _first: bool) {
        self.event(out, "response.output_item.added");
        self.index(out);
        self.item(out, block, "in_progress", None);
        end_event(out);
        if block == Block::Text {
            self.event(out, "response.content_part.added");
            self.part_position(out, block);
            out.put_slice(br#","part":{"type":"output_text","text":"","annotations":[]}"#);
            end_event(out);
        }
    }

    /// The delta, whose text is kept for the `.done` events and the final response.
    fn delta(&self, out: &mut BytesMut, block: Block, words: impl Iterator<Item = &'static str>) {
        if let (Block::Tool, Some(tool)) = (block, &self.tool) {
            self.event(out, "response.function_call_arguments.delta");
            out.put_slice(br#","item_id":"#);
            self.item_id(out, block);
            self.index(out);
            out.put_slice(br#","delta":""#);
            let start = out.len();
            tool.write_pieces(out, words);
            self.message_text
                .borrow_mut()
                .extend_from_slice(&out[start..]);
            out.put_u8(b'"');
            end_event(out);
            return;
        }
        let reasoning = block == Block::Reasoning;
        self.event(
            out,
            if reasoning {
                "response.reasoning_text.delta"
            } else {
                "response.output_text.delta"
            },
        );
        self.part_position(out, block);
        out.put_slice(br#","delta":""#);
        let start = out.len();
        write_words(out, words);
        self.text(block)
            .borrow_mut()
            .extend_from_slice(&out[start..]);
        out.put_u8(b'"');
        if !reasoning {
            out.put_slice(br#","logprobs":[]"#);
        }
        end_event(out);
    }

    /// The part's `.done` events with the whole text, then the item's.
    fn close_block(&self, out: &mut BytesMut, block: Block) {
        let text = self.text(block).borrow();
        if block == Block::Tool {
            self.event(out, "response.function_call_arguments.done");
            out.put_slice(br#","item_id":"#);
            self.item_id(out, block);
            self.index(out);
            out.put_slice(br#","arguments":""#);
            out.put_slice(&text);
            out.put_u8(b'"');
            end_event(out);
        } else if block == Block::Reasoning {
            self.event(out, "response.reasoning_text.done");
            self.part_position(out, block);
            out.put_slice(br#","text":""#);
            out.put_slice(&text);
            out.put_u8(b'"');
            end_event(out);
        } else {
            self.event(out, "response.output_text.done");
            self.part_position(out, block);
            out.put_slice(br#","text":""#);
            out.put_slice(&text);
            out.put_slice(br#"","logprobs":[]"#);
            end_event(out);
            self.event(out, "response.content_part.done");
            self.part_position(out, block);
            out.put_slice(br#","part":"#);
            Self::output_text_part(out, &text);
            end_event(out);
        }
        self.event(out, "response.output_item.done");
        self.index(out);
        self.item(out, block, "completed", Some(&text));
        end_event(out);
        self.output_index.set(self.output_index.get() + 1);
    }
}

/// The final event and status of a finish reason.
fn status(finish: FinishReason) -> (&'static str, &'static str) {
    match finish {
        FinishReason::Stop | FinishReason::ToolCalls => ("response.completed", "completed"),
        FinishReason::Length => ("response.incomplete", "incomplete"),
    }
}
