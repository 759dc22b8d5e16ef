//! A prefix-cache model, as vLLM's automatic prefix caching counts it: a prompt is cut
//! into blocks of `BLOCK_TOKENS` tokens, each full block is named by a hash of its tokens
//! and of every block before it, and a lookup hits the leading blocks already cached.
//! Prompts that share a prefix (a system prompt, a prefix group of `--data`) therefore
//! hit, and `vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total` is a real
//! hit rate. The cache holds as many blocks as `--kv-cache-tokens` does and forgets the
//! oldest first.

use std::collections::{HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

/// Tokens per cache block (vLLM's default block size).
pub const BLOCK_TOKENS: usize = 16;

/// The cached blocks, shared by every connection.
#[derive(Debug)]
pub struct PrefixCache {
    capacity: usize,
    blocks: Mutex<Blocks>,
}

#[derive(Debug, Default)]
struct Blocks {
    cached: HashSet<u64>,
    /// Insertion order, for forgetting the oldest block first.
    order: VecDeque<u64>,
}

impl PrefixCache {
    /// A cache of `kv_cache_tokens / BLOCK_TOKENS` blocks (at least one).
    pub fn new(kv_cache_tokens: u64) -> Self {
        let blocks = usize::try_from(kv_cache_tokens / BLOCK_TOKENS as u64).unwrap_or(usize::MAX);
        PrefixCache {
            capacity: blocks.max(1),
            blocks: Mutex::new(Blocks::default()),
        }
    }

    /// Looks `tokens` up and caches its full blocks; returns the tokens found cached
    /// (those of its leading cached blocks).
    pub fn lookup(&self, tokens: &[u32]) -> u64 {
        let mut chain = DefaultHasher::new();
        let hashes: Vec<u64> = tokens
            .chunks_exact(BLOCK_TOKENS)
            .map(|block| {
                // Each block's name covers every token before it, so a block hits only
                // after the same whole prefix.
                block.hash(&mut chain);
                chain.finish()
            })
            .collect();
        // A poisoned lock only means another request panicked mid-update; the set is
        // still a valid set of hashes.
        let mut blocks = self
            .blocks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let hits = hashes
            .iter()
            .take_while(|h| blocks.cached.contains(h))
            .count();
        for &h in &hashes[hits..] {
            if blocks.cached.insert(h) {
                blocks.order.push_back(h);
            }
        }
        while blocks.order.len() > self.capacity {
            if let Some(old) = blocks.order.pop_front() {
                blocks.cached.remove(&old);
            }
        }
        (hits * BLOCK_TOKENS) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mock_prefix_cache_hits_whole_leading_blocks() {
        let cache = PrefixCache::new(1 << 16);
        let a: Vec<u32> = (0..40).collect();
        assert_eq!(cache.lookup(&a), 0, "cold");
        assert_eq!(
            cache.lookup(&a),
            32,
            "two full blocks; the 8-token tail never caches"
        );
        let mut b = a.clone();
        b[20] = 999; // the second block differs, so only the first hits
        assert_eq!(cache.lookup(&b), 16);
        let mut c = a.clone();
        c[0] = 999; // a different first block: nothing after it can hit
        assert_eq!(cache.lookup(&c), 0);
    }

    #[test]
    fn mock_prefix_cache_forgets_the_oldest_blocks() {
        let cache = PrefixCache::new(2 * BLOCK_TOKENS as u64);
        let a: Vec<u32> = (0..16).collect();
        let b: Vec<u32> = (100..116).collect();
        let c: Vec<u32> = (200..216).collect();
        for p in [&a, &b, &c] {
            assert_eq!(cache.lookup(p), 0);
        }
        assert_eq!(cache.lookup(&c), 16, "recent: kept");
        assert_eq!(cache.lookup(&a), 0, "oldest: forgotten");
    }
}
