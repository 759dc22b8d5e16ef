//! `embeddings`: `POST /v1/embeddings`, a batch of texts per request, never streamed.
//!
//! The response must be a list with `data` (one embedding per input) and `usage`
//! (`prompt_tokens`); it has no output tokens, so no TTFT, ITL or TPOT.

use super::{ChunkInfo, Format, JsonPrefix, StreamEvent, StreamState, Usage, close, write_json};
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

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    total_tokens: Option<u32>,
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
            super::shown(data)
        ))
    }

    fn parse_full(&self, body: &[u8]) -> Result<ChunkInfo, String> {
        #[derive(Deserialize)]
        struct Whole<'a> {
            #[serde(default)]
            data: Option<Vec<serde::de::IgnoredAny>>,
            #[serde(default)]
            usage: Option<WireUsage>,
            #[serde(default, borrow)]
            error: Option<super::openai::WireError<'a>>,
        }
        let whole: Whole<'_> =
            serde_json::from_slice(body).map_err(|e| format!("malformed JSON response ({e})"))?;
        if let Some(err) = &whole.error {
            return Err(err.message());
        }
        match &whole.data {
            Some(d) if !d.is_empty() => {}
            _ => return Err("embeddings response without `data`".into()),
        }
        Ok(ChunkInfo {
            usage: whole.usage.map(|u| Usage {
                prompt_tokens: u.prompt_tokens.or(u.total_tokens),
                completion_tokens: None,
            }),
            finished: true,
            ..ChunkInfo::default()
        })
    }

    fn final_event(&self) -> &'static str {
        "the response body"
    }
}
