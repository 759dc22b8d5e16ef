//! The [`Format`] trait every request format implements, and the reading of a whole
//! (unstreamed) JSON answer the pooling and transcription formats share. Above `openai`,
//! whose chunk record and error body it speaks in; below each format.

use super::openai::{self, ChunkInfo, StreamEvent, Usage};
use crate::source::{PreparedRequest, ToolCall};
use bytes::Bytes;

/// Per-stream state a format may keep between events (where the API defines an event
/// sequence, whether it has started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamState {
    /// The stream's opening event arrived.
    pub started: bool,
}

/// One request format: the body it sends and how its responses are read.
pub trait Format: std::fmt::Debug + Send + Sync {
    /// The endpoint path, appended to the base URL.
    fn path(&self) -> &'static str;

    /// The `Content-Type` of the request body (a multipart format returns its
    /// `multipart/form-data; boundary=…`, which it owns).
    fn content_type(&self) -> &str {
        "application/json"
    }

    /// Extra headers every request of this format carries (an API version, say).
    fn headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The body of one request.
    fn build(&self, req: &PreparedRequest) -> Bytes;

    /// Reads the data of one streamed event.
    fn parse_event(&self, data: &[u8], state: &mut StreamState) -> Result<StreamEvent, String>;

    /// Reads a whole non-streaming response.
    fn parse_full(&self, body: &[u8]) -> Result<ChunkInfo, String>;

    /// The event that ends a complete stream, for the error of a stream cut before it.
    fn final_event(&self) -> &'static str;

    /// Whether a stream that ends without its final event, after a chunk marked
    /// `finished`, is complete (OpenAI chat/completions: yes; event-typed APIs: no).
    fn finished_is_complete(&self) -> bool {
        false
    }

    /// The message of an error response body, or the start of the body.
    fn error_message(&self, body: &[u8]) -> String {
        openai::error_message(body)
    }

    /// The output text one streamed event carries, for multi-turn sessions (a turn
    /// resends the reply that actually streamed back). The event is parsed again, and
    /// only when a session asks, so a run without sessions keeps no text. `None`: this
    /// format does not carry a reply sessions can resend.
    fn event_reply(&self, _data: &[u8]) -> Option<String> {
        None
    }

    /// The output text of a whole (non-streamed) response, as [`Format::event_reply`].
    fn full_reply(&self, _body: &[u8]) -> Option<String> {
        None
    }

    /// Adds a streamed event's piece of a tool call (its id, name or arguments) to
    /// `call`, for sessions that resend the call with its result. Asked only of runs
    /// that offer tools in sessions; a format without tool calls ignores it.
    fn event_tool(&self, _data: &[u8], _call: &mut Option<ToolCall>) {}

    /// The tool call of a whole (non-streamed) response, as [`Format::event_tool`].
    fn full_tool(&self, _body: &[u8]) -> Option<ToolCall> {
        None
    }
}

/// The wire struct of a whole (unstreamed) JSON answer of embeddings, rerank and score,
/// or transcription: the format's own fields beside the server's `error`.
pub(crate) trait WholeAnswer<'a>: serde::Deserialize<'a> {
    /// The server's `error`, sent in place of an answer.
    fn error(&self) -> Option<&openai::WireError<'a>>;
    /// What the answer says, or why it is none (`body` for the message).
    fn info(self, body: &[u8]) -> Result<ChunkInfo, String>;
}

/// Reads a whole answer as `W`: JSON that does not parse and an `error` object fail
/// alike in every format; then `W` says what the answer holds.
pub(crate) fn parse_whole<'a, W: WholeAnswer<'a>>(body: &'a [u8]) -> Result<ChunkInfo, String> {
    let whole: W =
        serde_json::from_slice(body).map_err(|e| format!("malformed JSON response ({e})"))?;
    if let Some(err) = whole.error() {
        return Err(err.message());
    }
    whole.info(body)
}

/// The `usage` of a pooling answer (embeddings, rerank, score): no output tokens.
#[derive(serde::Deserialize)]
pub(crate) struct PoolingUsage {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    /// Jina/Cohere and vLLM's rerank give only this.
    #[serde(default)]
    total_tokens: Option<u32>,
}

impl PoolingUsage {
    /// A pooling answer's information: whole, with its prompt count when it has one.
    pub(crate) fn finished(usage: Option<Self>) -> ChunkInfo {
        ChunkInfo {
            usage: usage.map(|u| Usage {
                prompt_tokens: u.prompt_tokens.or(u.total_tokens),
                completion_tokens: None,
                reasoning_tokens: None,
            }),
            finished: true,
            ..ChunkInfo::default()
        }
    }
}
