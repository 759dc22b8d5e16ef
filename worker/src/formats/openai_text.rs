//! `chat` and `completions`: OpenAI's text generation endpoints, `POST
//! /v1/chat/completions` and `POST /v1/completions`. They differ only in the body
//! (`messages` or `prompt`, which the template writes) and the path.

use super::format::{Format, StreamState};
use super::openai::{self, BodyTemplate};
use super::openai::{ChunkInfo, StreamEvent};
use super::tools;
use crate::source::{PreparedRequest, ToolCall};
use bytes::Bytes;
use llmsurge_proto::BackendConfig;

/// The chat and completions formats.
#[derive(Clone, Debug)]
pub struct OpenAiText {
    template: BodyTemplate,
    path: &'static str,
}

impl OpenAiText {
    /// Prepares the constant part of every body.
    pub fn new(cfg: &BackendConfig) -> Self {
        Self {
            template: BodyTemplate::new(cfg),
            path: cfg.request_format.path(),
        }
    }
}

impl Format for OpenAiText {
    fn path(&self) -> &'static str {
        self.path
    }

    fn build(&self, req: &PreparedRequest) -> Bytes {
        self.template.build(req)
    }

    fn parse_event(&self, data: &[u8], _: &mut StreamState) -> Result<StreamEvent, String> {
        openai::parse_stream_event(data)
    }

    fn parse_full(&self, body: &[u8]) -> Result<ChunkInfo, String> {
        openai::parse_full_response(body)
    }

    fn event_reply(&self, data: &[u8]) -> Option<String> {
        openai::reply_text(data)
    }

    fn full_reply(&self, body: &[u8]) -> Option<String> {
        openai::reply_text(body)
    }

    fn event_tool(&self, data: &[u8], call: &mut Option<ToolCall>) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(data.trim_ascii()) else {
            return;
        };
        // Parallel calls stream with their own `index`: the session keeps the first.
        if let Some(piece) = v
            .pointer("/choices/0/delta/tool_calls/0")
            .filter(|p| p.get("index").and_then(serde_json::Value::as_u64) == Some(0))
        {
            tools::add_piece(call, piece, "/id", "/function/name", "/function/arguments");
        }
    }

    fn full_tool(&self, body: &[u8]) -> Option<ToolCall> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        let piece = v.pointer("/choices/0/message/tool_calls/0")?;
        tools::whole(piece, "/id", "/function/name", "/function/arguments")
    }

    fn final_event(&self) -> &'static str {
        "[DONE]"
    }

    fn finished_is_complete(&self) -> bool {
        // A server that ends the stream after finish_reason without `[DONE]` is complete
        // in every way that matters.
        true
    }
}
