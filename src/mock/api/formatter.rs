//! The top of the format layer: one writer per response, whichever API format it
//! speaks. The HTTP body streams through this without knowing the format.

use bytes::BytesMut;

use super::events::BlockEvents;
use super::shared::{FinishReason, ToolCall, Usage};
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
    /// Answers with `tool` instead of text, where the API has tool calls.
    pub fn with_tool_call(self, tool: Option<ToolCall>) -> Self {
        match self {
            Formatter::OpenAi(w) => Formatter::OpenAi(w.with_tool_call(tool)),
            Formatter::Responses(w) => Formatter::Responses(w.with_tool_call(tool)),
            Formatter::Anthropic(w) => Formatter::Anthropic(w.with_tool_call(tool)),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::shared::Api;

    const WORDS: [&str; 3] = ["alpha", "beta", "gamma"];

    fn writers() -> Vec<(&'static str, Formatter)> {
        let offered: Vec<String> = (0..3).map(|k| format!("tool_{k}")).collect();
        let tool = || Some(ToolCall::new(7, &offered, WORDS.len() as u32));
        vec![
            (
                "chat",
                Formatter::OpenAi(openai::Writer::new(Api::Chat, true, 7, 1, "\"m\"", true))
                    .with_tool_call(tool()),
            ),
            (
                "responses",
                Formatter::Responses(responses::Writer::new(7, 1, "\"m\"", false, false))
                    .with_tool_call(tool()),
            ),
            (
                "anthropic",
                Formatter::Anthropic(anthropic::Writer::new(7, "\"m\"", 5, false, false))
                    .with_tool_call(tool()),
            ),
        ]
    }

    const USAGE: Usage = Usage {
        prompt: 5,
        content: 3,
        reasoning: 0,
    };

    /// The streamed argument pieces of one format's events.
    fn pieces(format: &str, event: &serde_json::Value) -> Option<String> {
        let piece = match format {
            "chat" => &event["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
            "responses" if event["type"] == "response.function_call_arguments.delta" => {
                &event["delta"]
            }
            "anthropic" if event["delta"]["type"] == "input_json_delta" => {
                &event["delta"]["partial_json"]
            }
            _ => return None,
        };
        piece.as_str().map(str::to_string)
    }

    #[test]
    fn streamed_tool_call_pieces_join_into_the_arguments_json() {
        for (format, fmt) in writers() {
            let mut out = BytesMut::new();
            fmt.token_chunk(&mut out, WORDS[..2].iter().copied(), true, false);
            fmt.token_chunk(&mut out, WORDS[2..].iter().copied(), false, false);
            fmt.end_stream(&mut out, FinishReason::ToolCalls, USAGE, true);
            let text = std::str::from_utf8(&out).expect("utf8");
            let mut joined = String::new();
            let mut name = None;
            for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
                if line == "[DONE]" {
                    continue;
                }
                let event: serde_json::Value = serde_json::from_str(line).expect(line);
                joined.extend(pieces(format, &event));
                for n in [
                    &event["choices"][0]["delta"]["tool_calls"][0]["function"]["name"],
                    &event["item"]["name"],
                    &event["content_block"]["name"],
                ] {
                    name = name.or(n.as_str().map(str::to_string));
                }
            }
            let args: serde_json::Value = serde_json::from_str(&joined).expect(&joined);
            assert_eq!(args["query"], "alpha beta gamma", "{format}: {joined}");
            assert_eq!(name.as_deref(), Some("tool_1"), "{format}: 7 % 3 offered");
            let end = ["\"tool_calls\"", "\"tool_use\"", "response.completed"];
            assert!(end.iter().any(|e| text.contains(e)), "{format}: {text}");
        }
    }

    #[test]
    fn a_whole_answer_carries_the_complete_call() {
        for (format, fmt) in writers() {
            let mut out = BytesMut::new();
            fmt.full_body(
                &mut out,
                WORDS.iter().copied(),
                std::iter::empty(),
                FinishReason::ToolCalls,
                USAGE,
            );
            let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
            let args = match format {
                "chat" => serde_json::from_str(
                    v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
                        .as_str()
                        .expect("arguments"),
                ),
                "responses" => {
                    serde_json::from_str(v["output"][0]["arguments"].as_str().expect("arguments"))
                }
                _ => Ok(v["content"][0]["input"].clone()),
            }
            .expect("arguments are JSON");
            assert_eq!(args["query"], "alpha beta gamma", "{format}: {v}");
        }
    }
}
