//! OpenAI's embeddings format, `POST /v1/embeddings`: the request the mock reads and
//! the vectors it answers with. A pooling request has a prompt and no output tokens.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde::Deserialize;

use super::shared::Prompt;

/// `POST /v1/embeddings`
#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    /// Served model name; the first one when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// What to embed: same shapes as a completions prompt, one vector per entry.
    pub input: Prompt,
    /// Vector length (default `EMBEDDING_DIM`).
    #[serde(default)]
    pub dimensions: Option<usize>,
}

/// Length of the mock's embedding vectors unless the request asks for `dimensions`.
pub const EMBEDDING_DIM: usize = 256;

/// A unit vector that depends only on the input and the seed: the same text always
/// embeds the same way.
pub fn embed(seed: u64, key: &[u8], dim: usize) -> Vec<f32> {
    let hash = key.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(hash ^ seed);
    let mut v: Vec<f32> = (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}
