//! Ranking endpoints: `POST /v1/rerank` (Jina/Cohere shape) and vLLM's `POST /v1/score`.
//!
//! Rerank takes `query`, `documents` (texts, or objects with `text`) and `top_n`, and
//! answers `results` (`index`, `relevance_score`, best first, `top_n` of them) with
//! `usage.total_tokens`. Score takes `text_1` (the query) and `text_2` (a text or a list)
//! and answers `data` (`index`, `object: "score"`, `score`, in input order) with
//! `usage.prompt_tokens`. A pair costs the query's tokens plus the document's, as a
//! cross-encoder reads them together; scores depend only on the pair and the seed.

use serde::{Deserialize, Serialize};

use crate::mock::model::tokenizer;

/// A document: a text, or an object with one.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Document {
    /// A plain text.
    Text(String),
    /// `{"text": "..."}`.
    Object {
        /// The text.
        text: String,
    },
}

impl Document {
    fn text(&self) -> &str {
        match self {
            Document::Text(t) | Document::Object { text: t } => t,
        }
    }
}

/// One text or a list of them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Texts {
    /// One text.
    One(String),
    /// A list.
    Many(Vec<String>),
}

/// `POST /v1/rerank`
#[derive(Debug, Deserialize)]
pub struct RerankRequest {
    /// Served model name; the first one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// The query.
    pub query: String,
    /// The documents to rank.
    pub documents: Vec<Document>,
    /// How many results to return (all when absent).
    #[serde(default)]
    pub top_n: Option<usize>,
}

/// `POST /v1/score`
#[derive(Debug, Deserialize)]
pub struct ScoreRequest {
    /// Served model name; the first one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// The query.
    pub text_1: String,
    /// The documents.
    pub text_2: Texts,
}

/// A ranking request, whatever its shape: the query and the documents.
pub struct Ranking<'a> {
    /// The query.
    pub query: &'a str,
    /// The documents.
    pub documents: Vec<&'a str>,
}

impl RerankRequest {
    /// The query and documents.
    pub fn ranking(&self) -> Ranking<'_> {
        Ranking {
            query: &self.query,
            documents: self.documents.iter().map(Document::text).collect(),
        }
    }
}

impl ScoreRequest {
    /// The query and documents.
    pub fn ranking(&self) -> Ranking<'_> {
        Ranking {
            query: &self.text_1,
            documents: match &self.text_2 {
                Texts::One(t) => vec![t.as_str()],
                Texts::Many(v) => v.iter().map(String::as_str).collect(),
            },
        }
    }
}

impl Ranking<'_> {
    /// Tokens of every (query, document) pair.
    pub fn tokens(&self) -> u64 {
        let query = tokenizer::count(self.query);
        self.documents
            .iter()
            .map(|d| query + tokenizer::count(d))
            .sum()
    }

    /// Tokens of the longest (query, document) pair: what must fit the context window.
    pub fn longest_pair(&self) -> u64 {
        let query = tokenizer::count(self.query);
        self.documents
            .iter()
            .map(|d| query + tokenizer::count(d))
            .max()
            .unwrap_or(query)
    }

    /// A score in [0, 1) per document, from the pair and the seed.
    pub fn scores(&self, seed: u64) -> Vec<f64> {
        self.documents
            .iter()
            .map(|d| {
                let hash = self
                    .query
                    .bytes()
                    .chain([0])
                    .chain(d.bytes())
                    .fold(0xcbf2_9ce4_8422_2325_u64 ^ seed, |h, b| {
                        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                    });
                (hash >> 11) as f64 / (1u64 << 53) as f64
            })
            .collect()
    }
}

/// The rerank answer.
#[derive(Serialize)]
pub struct RerankResponse<'a> {
    /// `rerank-…`.
    pub id: String,
    /// The model.
    pub model: &'a str,
    /// Token counts.
    pub usage: RerankUsage,
    /// Best first.
    pub results: Vec<RerankResult>,
}

/// Rerank usage.
#[derive(Serialize)]
pub struct RerankUsage {
    /// Tokens of every pair.
    pub total_tokens: u64,
}

/// One ranked document.
#[derive(Serialize)]
pub struct RerankResult {
    /// Position in the request's documents.
    pub index: usize,
    /// The score.
    pub relevance_score: f64,
}

/// The score answer.
#[derive(Serialize)]
pub struct ScoreResponse<'a> {
    /// `score-…`.
    pub id: String,
    /// Always `list`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model.
    pub model: &'a str,
    /// One per document, in order.
    pub data: Vec<ScoreItem>,
    /// Token counts.
    pub usage: ScoreUsage,
}

/// One scored document.
#[derive(Serialize)]
pub struct ScoreItem {
    /// Position in the request's documents.
    pub index: usize,
    /// Always `score`.
    pub object: &'static str,
    /// The score.
    pub score: f64,
}

/// Score usage.
#[derive(Serialize)]
pub struct ScoreUsage {
    /// Tokens of every pair.
    pub prompt_tokens: u64,
    /// Same as `prompt_tokens`.
    pub total_tokens: u64,
    /// Always 0.
    pub completion_tokens: u64,
}

/// The body of a rerank answer.
pub fn rerank_body(
    model: &str,
    seq: u64,
    r: &Ranking<'_>,
    top_n: Option<usize>,
    seed: u64,
) -> Vec<u8> {
    let mut results: Vec<RerankResult> = r
        .scores(seed)
        .into_iter()
        .enumerate()
        .map(|(index, relevance_score)| RerankResult {
            index,
            relevance_score,
        })
        .collect();
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score));
    results.truncate(top_n.unwrap_or(usize::MAX));
    let body = RerankResponse {
        id: format!("rerank-{seq:016x}"),
        model,
        usage: RerankUsage {
            total_tokens: r.tokens(),
        },
        results,
    };
    serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec())
}

/// The body of a score answer.
pub fn score_body(model: &str, seq: u64, created: u64, r: &Ranking<'_>, seed: u64) -> Vec<u8> {
    let tokens = r.tokens();
    let body = ScoreResponse {
        id: format!("score-{seq:016x}"),
        object: "list",
        created,
        model,
        data: r
            .scores(seed)
            .into_iter()
            .enumerate()
            .map(|(index, score)| ScoreItem {
                index,
                object: "score",
                score,
            })
            .collect(),
        usage: ScoreUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
            completion_tokens: 0,
        },
    };
    serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec())
}
