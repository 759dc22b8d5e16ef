//! The shape both typed-event APIs stream (OpenAI's Responses and Anthropic's
//! Messages): every event an `event:` line and a JSON `data:` line with its `type`;
//! the response opens, then content blocks (reasoning first when the model reasons,
//! then text) each open, stream deltas and close, and the response closes. The two
//! APIs differ only in the events' names and fields, which each writes through
//! [`BlockEvents`]; the order of opening, switching and closing blocks lives here once.

use std::cell::Cell;

use bytes::{BufMut, BytesMut};

/// Which content block a typed stream has open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// None (before the first chunk, or after the last block closed).
    Nothing,
    /// A reasoning (Responses) or thinking (Anthropic) block.
    Reasoning,
    /// The answer's text block (a Responses `message` item).
    Text,
    /// The answer as a tool call (a Responses `function_call` item, an Anthropic
    /// `tool_use` block).
    Tool,
}

/// Writes `event: NAME` and the event's data up to its `"type":"NAME"`.
pub fn open_event(out: &mut BytesMut, name: &str) {
    out.put_slice(b"event: ");
    out.put_slice(name.as_bytes());
    out.put_slice(b"\ndata: {\"type\":\"");
    out.put_slice(name.as_bytes());
    out.put_u8(b'"');
}

/// Closes an event's data object and the event.
pub fn end_event(out: &mut BytesMut) {
    out.put_slice(b"}\n\n");
}

/// The events of one typed API around its content blocks; [`BlockEvents::stream_chunk`]
/// and [`BlockEvents::close_open`] call them in the order both APIs share.
pub trait BlockEvents {
    /// The name of the event the API does not define, sent after the first delta with
    /// `--unknown-events`.
    const UNKNOWN_EVENT: &'static str;

    /// The block now open.
    fn open_cell(&self) -> &Cell<Block>;

    /// The block the answer streams in: text, or a tool call when the plan made one.
    fn answer_block(&self) -> Block;

    /// Whether to send [`Self::UNKNOWN_EVENT`] (`--unknown-events`).
    fn unknown_events(&self) -> bool;

    /// Opens an event named `name`, with whatever every event of the API carries.
    fn event(&self, out: &mut BytesMut, name: &str);

    /// The events that open the response, before its first block.
    fn start(&self, out: &mut BytesMut);

    /// The events that open `block`; `first` when in the response's first chunk.
    fn open_block(&self, out: &mut BytesMut, block: Block, first: bool);

    /// One delta event carrying `words` in the open `block`.
    fn delta(&self, out: &mut BytesMut, block: Block, words: impl Iterator<Item = &'static str>);

    /// The events that close `block`.
    fn close_block(&self, out: &mut BytesMut, block: Block);

    /// The events of one chunk of `words`: the response's opening on the first chunk, a
    /// block switch when the chunk's kind differs from the open block, the delta, and
    /// the undefined event after the first delta when asked for.
    fn stream_chunk(
        &self,
        out: &mut BytesMut,
        words: impl Iterator<Item = &'static str>,
        first: bool,
        reasoning: bool,
    ) {
        if first {
            self.start(out);
        }
        let want = if reasoning {
            Block::Reasoning
        } else {
            self.answer_block()
        };
        if self.open_cell().get() != want {
            self.close_open(out);
            self.open_block(out, want, first);
            self.open_cell().set(want);
        }
        self.delta(out, want, words);
        if first && self.unknown_events() {
            self.event(out, Self::UNKNOWN_EVENT);
            out.put_slice(br#","note":"an event type the API does not define""#);
            end_event(out);
        }
    }

    /// Closes the open block, if any.
    fn close_open(&self, out: &mut BytesMut) {
        let open = self.open_cell().get();
        if open != Block::Nothing {
            self.close_block(out, open);
            self.open_cell().set(Block::Nothing);
        }
    }
}
