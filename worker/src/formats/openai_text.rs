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

/// Where a chat tool call (or a streamed piece of one) has its fields.
const CALL: tools::Fields<'static> = tools::Fields {
    id: "/id",
    name: "/function/name",
    arguments: "/function/arguments",
};

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
        // Parallel calls stream with their own `index`.
        if let Some(piece) = v.pointer("/choices/0/delta/tool_calls/0") {
            tools::add_piece(call, tools::part_of(piece, "index"), piece, &CALL);
        }
    }

    fn full_tool(&self, body: &[u8]) -> Option<ToolCall> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        tools::whole(v.pointer("/choices/0/message/tool_calls/0")?, &CALL)
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
