//! The top of the format layer: one writer per response, whichever API format it
//! speaks. The HTTP body streams through this without knowing the format.

use bytes::BytesMut;

use super::events::BlockEvents;
use super::shared::{FinishReason, Usage};
use super::{anthropic, openai, responses};

/// Writes the chunks and bodies of one response in its API's format; built once per
/// request.
#[derive(Debug)]
pub enum Formatter {
    /// OpenAI chat, completions or transcription chunks (their `--no-final-event` set
    /// on the writer, as the typed APIs' is).
    OpenAi(openai::Writer),
    /// Responses API events.
    Responses(responses::Writer),
    /// Anthropic Messages events.
    Anthropic(anthropic::Writer),
}

impl Formatter {
    /// Ends a stream: the final events, with usage when asked for (always, for the typed
    /// APIs, whose final event carries usage).
    pub fn end_stream(
        &self,
        out: &mut BytesMut,
        finish: FinishReason,
        usage: Usage,
        include_usage: bool,
    ) {
        match self {
            Formatter::OpenAi(w) => w.end_stream(out, finish, usage, include_usage),
            Formatter::Responses(w) => w.end_stream(out, finish, usage),
            Formatter::Anthropic(w) => w.end_stream(out, finish, usage),
        }
    }

    /// The events of one chunk of `words`; `first` opens the response, `reasoning`
    /// streams them as reasoning.
    pub fn token_chunk(
        &self,
        out: &mut BytesMut,
        words: impl Iterator<Item = &'static str>,
        first: bool,
        reasoning: bool,
    ) {
        match self {
            Formatter::OpenAi(w) => w.token_chunk(out, words, first, reasoning),
            Formatter::Responses(w) => w.stream_chunk(out, words, first, reasoning),
            Formatter::Anthropic(w) => w.stream_chunk(out, words, first, reasoning),
        }
    }

    /// A malformed event: a chunk cut inside its JSON.
    pub fn garbage_chunk(&self, out: &mut BytesMut) {
        match self {
            Formatter::OpenAi(w) => w.garbage_chunk(out),
            Formatter::Responses(w) => w.garbage_chunk(out),
            Formatter::Anthropic(w) => w.garbage_chunk(out),
        }
    }

    /// A whole non-streaming response body.
    pub fn full_body(
        &self,
        out: &mut BytesMut,
        content: impl Iterator<Item = &'static str>,
        reasoning: impl Iterator<Item = &'static str>,
        finish: FinishReason,
        usage: Usage,
    ) {
        match self {
            Formatter::OpenAi(w) => w.full_body(out, content, reasoning, finish, usage),
            Formatter::Responses(w) => w.full_body(out, content, reasoning, finish, usage),
            Formatter::Anthropic(w) => w.full_body(out, content, reasoning, finish, usage),
        }
    }
}
