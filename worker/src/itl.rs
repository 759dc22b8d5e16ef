//! How many tokens each streamed chunk carried, for ITL (docs/metrics.md, "ITL").
//!
//! A chunk that carries `k` tokens contributes `k` gaps of `gap / k`. A stream says when
//! each chunk came, and the server's usage says how many tokens they carried in all (and
//! sometimes how many were reasoning), not how many each one did. A server that packs
//! several tokens a chunk (a stream interval, speculative decoding) packs `k` a chunk and
//! the rest of a run in its last one, and packs the reasoning apart from the answer. With
//! the reasoning count (chat, responses) that fixes every chunk's tokens. Without it (the
//! Messages API) the reasoning chunks' share is open: one reasoning token then answer
//! chunks of 3 (chunks of 1, 3, 3, 3) fit the counts as well as 3, 3, 3, 1 does, and
//! reading them so makes the last 30 ms gap one token's. There [`packing`] weighs every
//! split the counts allow and keeps the one the chunks' timing fits best: the one whose
//! per-token gaps are the most alike, since a server decodes at one pace within a request
//! far more than it jumps threefold from one chunk to the next.

use crate::backend::Exchange;
use llmsurge_proto::{MonoNanos, RequestRecord, TokenSource};

/// At most this many splits are weighed per request: the count is small for real
/// streams (one or two `k` fit many chunks), and the bound keeps a pathological one
/// (thousands of tokens in three chunks) cheap.
const MAX_CANDIDATES: usize = 256;

/// A request's chunks that carried tokens, as ITL needs them.
#[derive(Clone, Copy, Debug)]
pub struct Chunks<'a> {
    /// The arrival of each.
    pub times: &'a [MonoNanos],
    /// How many of the first carried reasoning packed apart from the answer (see
    /// [`Exchange::reasoning_chunks`]).
    pub reasoning: u32,
}

impl<'a> Chunks<'a> {
    /// The chunks of `ex`.
    pub fn of(ex: &'a Exchange) -> Self {
        Chunks {
            times: &ex.token_times,
            reasoning: ex.reasoning_chunks,
        }
    }
}

/// The tokens each chunk after the first carried, and how that was known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packing {
    /// Tokens of each chunk after the first (the first chunk's fall inside TTFT).
    pub later: Vec<u64>,
    /// The counts fitted more than one packing and the chunks' timing chose this one.
    pub timed: bool,
}

/// The tokens each chunk after the first carried (see the module's comment). Exact with
/// one token per chunk (vLLM, SGLang by default) and without usage (every chunk counts
/// one token); from the counts alone ([`count_packing`]) where they fix the packing; by
/// the timing among the splits the counts allow where the reasoning chunks came apart
/// from the answer without a reasoning count.
pub fn packing(r: &RequestRecord, chunks: Chunks<'_>) -> Packing {
    let c = chunks.times.len() as u64;
    let n = u64::from(r.output_tokens);
    if r.output_tokens_source != TokenSource::Usage || c < 2 || n <= c {
        let later = vec![1; chunks.times.len().saturating_sub(1)];
        return Packing {
            later,
            timed: false,
        };
    }
    let rc = u64::from(chunks.reasoning);
    let split_unknown = r.reasoning_tokens.is_none() && rc > 0 && rc < c;
    // With one later gap the timing says nothing about how its tokens split.
    if !split_unknown || c < 3 {
        let later = count_packing(r, chunks)[1..].to_vec();
        return Packing {
            later,
            timed: false,
        };
    }
    let gaps: Vec<f64> = chunks
        .times
        .windows(2)
        .map(|w| w[1].since(w[0]).as_nanos() as f64)
        .collect();
    let mut best: Option<(f64, Vec<u64>)> = None;
    let mut distinct = 0;
    for candidate in splits(n, c, rc) {
        let later = &candidate[1..];
        if best.as_ref().is_some_and(|(_, b)| b.as_slice() == later) {
            continue;
        }
        distinct += 1;
        let score = spread(&gaps, later);
        if best.as_ref().is_none_or(|(s, _)| score < *s) {
            best = Some((score, later.to_vec()));
        }
    }
    match best {
        Some((_, later)) => Packing {
            later,
            timed: distinct > 1,
        },
        // No split fits one `k` (a server that packs unevenly): the counts' guess.
        None => Packing {
            later: count_packing(r, chunks)[1..].to_vec(),
            timed: false,
        },
    }
}

/// How unlike a packing's per-token gaps are: their variance over the square of their
/// mean, each chunk weighted by its tokens. 0 when every gap is 0 (one frame).
fn spread(gaps: &[f64], later: &[u64]) -> f64 {
    let tokens: u64 = later.iter().sum();
    let mean = gaps.iter().sum::<f64>() / tokens.max(1) as f64;
    if mean <= 0.0 {
        return 0.0;
    }
    gaps.iter()
        .zip(later)
        .map(|(&g, &k)| {
            let k = k as f64;
            k * (g / k - mean).powi(2)
        })
        .sum::<f64>()
        / (mean * mean)
}

/// Every packing of `n` tokens in `c` chunks whose first `rc` carried reasoning alone and
/// the others the answer, with one `k` for both runs, each run's rest in its last chunk,
/// over every reasoning count both runs can hold; as whole-request vectors (the first
/// chunk included), at most [`MAX_CANDIDATES`].
fn splits(n: u64, c: u64, rc: u64) -> Vec<Vec<u64>> {
    let mut out = Vec::new();
    // Every chunk but the two runs' last full: k ≤ (n − 2) / (c − 2). Callers have c ≥ 3.
    for k in n.div_ceil(c)..=(n - 2) / (c - 2) {
        // A run of `c` chunks holds `t` tokens when k·(c − 1) < t ≤ k·c.
        let lo = (k * (rc - 1) + 1).max(n.saturating_sub(k * (c - rc)));
        let hi = (k * rc).min(n.saturating_sub(k * (c - rc - 1) + 1));
        for reasoning in lo..=hi {
            if out.len() >= MAX_CANDIDATES {
                return out;
            }
            let v: Vec<u64> = [(rc, reasoning), (c - rc, n - reasoning)]
                .into_iter()
                .flat_map(|(c, t)| (1..c).map(move |_| k).chain([t - k * (c - 1)]))
                .collect();
            out.push(v);
        }
    }
    out
}

/// The packing from the counts alone, every chunk's (the first included): each run's
/// chunks carry the smallest `k` that packs every run (`⌈n / c⌉` for one run), the rest
/// in the run's last one; a run it cannot pack takes its own `⌈n / c⌉`. The runs are
/// every chunk, or, when the usage counts the reasoning and its reasoning chunks carried
/// no answer, the reasoning chunks and the answer chunks each (2 reasoning and 7 answer
/// tokens, 3 a chunk, are chunks of 2, 3, 3, 1).
fn count_packing(r: &RequestRecord, chunks: Chunks<'_>) -> Vec<u64> {
    let c = chunks.times.len() as u64;
    let n = u64::from(r.output_tokens);
    // (chunks, tokens) of each run.
    let runs = match (
        r.reasoning_tokens.map(u64::from),
        u64::from(chunks.reasoning),
    ) {
        (Some(reasoning), rc) if rc > 0 && rc < c && reasoning >= rc && n - reasoning >= c - rc => {
            [(rc, reasoning), (c - rc, n - reasoning)]
        }
        _ => [(c, n), (0, 0)],
    };
    let k = runs
        .iter()
        .filter(|run| run.0 > 0)
        .map(|&(c, n)| n.div_ceil(c))
        .max()
        .unwrap_or(1);
    runs.into_iter()
        .flat_map(move |(c, n)| {
            // A common k fits a run when its chunks but the last hold fewer than its count.
            let k = if k * c.saturating_sub(1) < n {
                k
            } else {
                n.div_ceil(c.max(1))
            };
            let mut left = n;
            (0..c).map(move |i| {
                let after = c - 1 - i; // chunks still to come, one token each at least
                let take = k.min(left.saturating_sub(after)).max(1);
                left = left.saturating_sub(take);
                take
            })
        })
        .collect()
}
