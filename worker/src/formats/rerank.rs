//! `rerank` and `score`: a query ranked against documents, never streamed.
//!
//! `rerank` is `POST /v1/rerank` in the Jina/Cohere shape (`query`, `documents`, `top_n`;
//! the answer's `results` hold an index and `relevance_score` each); `score` is vLLM's
//! `POST /v1/score` (`text_1` the query, `text_2` the documents; the answer's `data` holds
//! one score each). Neither has output tokens, so no TTFT, ITL or TPOT.

use super::format::{Format, PoolingUsage, StreamState, WholeAnswer, parse_whole};
use super::openai::WireError;
use super::openai::{ChunkInfo, StreamEvent};
use super::wire::{JsonPrefix, close, write_field, write_json, write_u32_field};
use crate::source::{PreparedRequest, Prompt};
use bytes::Bytes;
use llmsurge_proto::BackendConfig;
use serde::Deserialize;

/// Which API shape a ranking request takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Jina/Cohere `/v1/rerank`.
    Rerank,
    /// vLLM `/v1/score`.
    Score,
}

/// The rerank and score formats.
#[derive(Clone, Debug)]
pub struct Rerank {
    prefix: JsonPrefix,
    shape: Shape,
}

impl Rerank {
    /// Prepares the constant part of every body.
    pub fn new(cfg: &BackendConfig, shape: Shape) -> Self {
        let keys: &[&str] = match shape {
            Shape::Rerank => &["query", "documents", "top_n"],
            Shape::Score => &["text_1", "text_2"],
        };
        Self {
            prefix: JsonPrefix::new(cfg, serde_json::Map::new(), keys),
            shape,
        }
    }
}

/// A whole rerank answer: its `results`.
#[derive(Deserialize)]
struct RerankAnswer<'a> {
    #[serde(default)]
    results: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default)]
    usage: Option<PoolingUsage>,
    #[serde(default, borrow)]
    error: Option<WireError<'a>>,
}

impl<'a> WholeAnswer<'a> for RerankAnswer<'a> {
    fn error(&self) -> Option<&WireError<'a>> {
        self.error.as_ref()
    }

    fn info(self, _: &[u8]) -> Result<ChunkInfo, String> {
        match self.results {
            Some(_) => Ok(PoolingUsage::finished(self.usage)),
            None => Err("/v1/rerank response without `results`".into()),
        }
    }
}

/// A whole score answer: its `data`.
#[derive(Deserialize)]
struct ScoreAnswer<'a> {
    #[serde(default)]
    data: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default)]
    usage: Option<PoolingUsage>,
    #[serde(default, borrow)]
    error: Option<WireError<'a>>,
}

impl<'a> WholeAnswer<'a> for ScoreAnswer<'a> {
    fn error(&self) -> Option<&WireError<'a>> {
        self.error.as_ref()
    }

    fn info(self, _: &[u8]) -> Result<ChunkInfo, String> {
        match self.data {
            Some(_) => Ok(PoolingUsage::finished(self.usage)),
            None => Err("/v1/score response without `data`".into()),
        }
    }
}

impl Format for Rerank {
    fn path(&self) -> &'static str {
        match self.shape {
            Shape::Rerank => "/v1/rerank",
            Shape::Score => "/v1/score",
        }
    }

    fn build(&self, req: &PreparedRequest) -> Bytes {
        let mut out = self.prefix.open(req, req.prompt.text_len() + 32);
        let (query, documents): (String, Vec<&str>) = match &req.prompt {
            Prompt::Ranking { query, documents } => (
                query.clone(),
                documents.iter().map(String::as_str).collect(),
            ),
            // A prompt that is not a ranking ranks its only text against itself.
            other => (other.joined(), other.texts()),
        };
        let (query_key, documents_key) = match self.shape {
            Shape::Rerank => ("query", "documents"),
            Shape::Score => ("text_1", "text_2"),
        };
        if !self.prefix.overrides(query_key) {
            write_field(&mut out, query_key, &query);
        }
        if !self.prefix.overrides(documents_key) {
            write_json(&mut out, documents_key);
            out.push(b':');
            write_json(&mut out, &documents);
            out.push(b',');
        }
        if self.shape == Shape::Rerank && !self.prefix.overrides("top_n") {
            write_u32_field(&mut out, "top_n", documents.len() as u32);
        }
        close(out)
    }

    fn parse_event(&self, data: &[u8], _: &mut StreamState) -> Result<StreamEvent, String> {
        Err(format!(
            "{} does not stream, yet the server sent an event: {}",
            self.path(),
            super::wire::shown(data)
        ))
    }

    fn parse_full(&self, body: &[u8]) -> Result<ChunkInfo, String> {
        match self.shape {
            Shape::Rerank => parse_whole::<RerankAnswer<'_>>(body),
            Shape::Score => parse_whole::<ScoreAnswer<'_>>(body),
        }
    }

    fn final_event(&self) -> &'static str {
        "the response body"
    }
}
