//! `completions`: OpenAI (legacy) completions, `POST /v1/completions`.

use super::openai::{self, BodyTemplate};
use super::{ChunkInfo, Format, StreamEvent, StreamState};
use crate::source::PreparedRequest;
use bytes::Bytes;
use llmsurge_proto::BackendConfig;

/// The completions format.
#[derive(Clone, Debug)]
pub struct Completions {
    template: BodyTemplate,
}

impl Completions {
    /// Prepares the constant part of every body.
    pub fn new(cfg: &BackendConfig) -> Self {
        Self {
            template: BodyTemplate::new(cfg),
        }
    }
}

impl Format for Completions {
    fn path(&self) -> &'static str {
        "/v1/completions"
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

    fn final_event(&self) -> &'static str {
        "[DONE]"
    }

    fn finished_is_complete(&self) -> bool {
        // A server that ends the stream after finish_reason without `[DONE]` is complete
        // in every way that matters.
        true
    }
}
