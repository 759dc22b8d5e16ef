//! `embeddings`: `POST /v1/embeddings`, a batch of texts per request, never streamed.
//!
//! The response must be a list with `data` (one embedding per input) and `usage`
//! (`prompt_tokens`); it has no output tokens, so no TTFT, ITL or TPOT.

use super::format::{Format, PoolingUsage, StreamState, WholeAnswer, parse_whole};
use super::openai::WireError;
use super::openai::{ChunkInfo, StreamEvent};
use super::wire::{JsonPrefix, close, write_json};
use crate::source::{PreparedRequest, Prompt};
use bytes::Bytes;
use llmsurge_proto::BackendConfig;
use serde::Deserialize;

/// The embeddings format.
#[derive(Clone, Debug)]
pub struct Embeddings {
    prefix: JsonPrefix,
}

impl Embeddings {
    /// Prepares the constant part of every body.
    pub fn new(cfg: &BackendConfig) -> Self {
        let mut fields = serde_json::Map::new();
        fields.insert("encoding_format".into(), "float".into());
        Self {
            prefix: JsonPrefix::new(cfg, fields, &["input"]),
        }
    }
}

/// A whole embeddings answer.
#[derive(Deserialize)]
struct EmbeddingsAnswer<'a> {
    #[serde(default)]
    data: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default)]
    usage: Option<PoolingUsage>,
    #[serde(default, borrow)]
    error: Option<WireError<'a>>,
}

impl<'a> WholeAnswer<'a> for EmbeddingsAnswer<'a> {
    fn error(&self) -> Option<&WireError<'a>> {
        self.error.as_ref()
    }

    fn info(self, _: &[u8]) -> Result<ChunkInfo, String> {
        match &self.data {
            Some(d) if !d.is_empty() => Ok(PoolingUsage::finished(self.usage)),
            _ => Err("embeddings response without `data`".into()),
        }
    }
}

impl Format for Embeddings {
    fn path(&self) -> &'static str {
        "/v1/embeddings"
    }

    fn build(&self, req: &PreparedRequest) -> Bytes {
        let mut out = self.prefix.open(req, req.prompt.text_len() + 16);
        if !self.prefix.overrides("input") {
            out.extend_from_slice(b"\"input\":");
            match &req.prompt {
                Prompt::Text(t) => write_json(&mut out, &[t]),
                other => write_json(&mut out, &other.texts()),
            }
            out.push(b',');
        }
        close(out)
    }

    fn parse_event(&self, data: &[u8], _: &mut StreamState) -> Result<StreamEvent, String> {
        Err(format!(
            "embeddings do not stream, yet the server sent an event: {}",
            super::wire::shown(data)
        ))
    }

    fn parse_full(&self, body: &[u8]) -> Result<ChunkInfo, String> {
        parse_whole::<EmbeddingsAnswer<'_>>(body)
    }

    fn final_event(&self) -> &'static str {
        "the response body"
    }
}
