//! A prefix-cache model, as vLLM's automatic prefix caching counts it: a prompt is cut
//! into blocks of `BLOCK_TOKENS` tokens, each full block is named by a hash of its tokens
//! and of every block before it, and a lookup hits the leading blocks already cached.
//! Prompts that share a prefix (a system prompt, a prefix group of `--data`) therefore
//! hit, and `vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total` is a real
//! hit rate. The cache holds as many blocks as `--kv-cache-tokens` does and forgets the
//! oldest first.
//!
//! With `--prefix-cache-by NAME` the cache is split into `--replicas` parts of an equal
//! share, as replicas behind a router: a request looks up the part its header hashes
//! to (one without the header: the next part in turn), so a conversation's turns hit
//! only when they all carry the same key.

use rustc_hash::{FxHashSet, FxHasher};
use std::collections::VecDeque;
use std::hash::{DefaultHasher, Hasher};
use std::sync::Mutex;

/// Tokens per cache block (vLLM's default block size).
pub const BLOCK_TOKENS: usize = 16;

/// The cached blocks, shared by every connection.
#[derive(Debug)]
pub struct PrefixCache {
    capacity: usize,
    /// One per replica (one without `--prefix-cache-by`).
    parts: Vec<Mutex<Blocks>>,
    /// The next replica of a request without the routing header.
    next: std::sync::atomic::AtomicUsize,
}

#[derive(Debug, Default)]
struct Blocks {
    cached: FxHashSet<u64>,
    /// Insertion order, for forgetting the oldest block first.
    order: VecDeque<u64>,
}

/// The block names of one prompt, fed token by token.
pub struct PromptBlocks {
    /// Fx, not SipHash: every prompt token goes through it on arrival (SipHash was most
    /// of the mock's cost per request for a prompt of a thousand tokens), and nothing
    /// here needs a keyed hash.
    chain: FxHasher,
    in_block: usize,
    tokens: u64,
    hashes: Vec<u64>,
}

impl std::fmt::Debug for PromptBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptBlocks")
            .field("tokens", &self.tokens)
            .field("blocks", &self.hashes.len())
            .finish()
    }
}

impl Default for PromptBlocks {
    fn default() -> Self {
        PromptBlocks {
            chain: FxHasher::default(),
            in_block: 0,
            tokens: 0,
            hashes: Vec::new(),
        }
    }
}

impl PromptBlocks {
    /// Adds one token, given by its text or its id's bytes. The chain never restarts,
    /// so each block's name covers every token before it: a block hits only after the
    /// same whole prefix.
    pub fn push(&mut self, token: &[u8]) {
        self.chain.write(token);
        // A separator, so that token boundaries are part of the name.
        self.chain.write_u8(0xff);
        self.tokens += 1;
        self.in_block += 1;
        if self.in_block == BLOCK_TOKENS {
            self.in_block = 0;
            self.hashes.push(self.chain.finish());
        }
    }

    /// Adds every token of `text` (the built-in tokenizer's tokens).
    pub fn push_text(&mut self, text: &str) {
        super::tokenizer::for_each_token_bytes(text, |t| self.push(t));
    }

    /// Tokens pushed: the prompt's length.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }
}

impl PrefixCache {
    /// A cache of `kv_cache_tokens / BLOCK_TOKENS` blocks (at least one).
    #[cfg(test)]
    pub fn new(kv_cache_tokens: u64) -> Self {
        Self::split(kv_cache_tokens, 1)
    }

    /// A cache split into `replicas` parts (at least one) of an equal share of
    /// `kv_cache_tokens`.
    pub fn split(kv_cache_tokens: u64, replicas: usize) -> Self {
        let replicas = replicas.max(1);
        let blocks = usize::try_from(kv_cache_tokens / BLOCK_TOKENS as u64).unwrap_or(usize::MAX);
        PrefixCache {
            capacity: (blocks / replicas).max(1),
            parts: (0..replicas).map(|_| Mutex::default()).collect(),
            next: Default::default(),
        }
    }

    /// The replica of a request whose routing header is `key` (`None`: it had none,
    /// and goes to a replica drawn from its arrival number).
    pub fn replica(&self, key: Option<&[u8]>) -> usize {
        let n = self.parts.len();
        match key {
            Some(k) => {
                let mut h = DefaultHasher::new();
                h.write(k);
                (h.finish() % n as u64) as usize
            }
            // Scattered, as a router without a key would: a hash of the request's
            // arrival number, not the next in turn (users that start together would
            // then keep one replica each, as if routed by key).
            None => {
                let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (llmsurge_proto::seed::derive_seed(0, "mock replica", i as u64) % n as u64) as usize
            }
        }
    }

    /// Forgets every cached block (a server's cache reset).
    pub fn clear(&self) {
        for part in &self.parts {
            let mut blocks = part
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            blocks.cached.clear();
            blocks.order.clear();
        }
    }

    /// Looks a prompt up and caches its full blocks; returns the tokens found cached
    /// (those of its leading cached blocks).
    #[cfg(test)]
    pub fn lookup(&self, prompt: &PromptBlocks) -> u64 {
        self.lookup_on(0, prompt)
    }

    /// [`Self::lookup`] in replica `replica`'s part (see [`Self::replica`]).
    pub fn lookup_on(&self, replica: usize, prompt: &PromptBlocks) -> u64 {
        let hashes = &prompt.hashes;
        let part = &self.parts[replica % self.parts.len()];
        // A poisoned lock only means another request panicked mid-update; the set is
        // still a valid set of hashes.
        let mut blocks = part
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

    fn blocks(tokens: &[u32]) -> PromptBlocks {
        let mut p = PromptBlocks::default();
        for t in tokens {
            p.push(&t.to_le_bytes());
        }
        p
    }

    #[test]
    fn mock_prefix_cache_hits_whole_leading_blocks() {
        let cache = PrefixCache::new(1 << 16);
        let a: Vec<u32> = (0..40).collect();
        assert_eq!(blocks(&a).tokens(), 40);
        assert_eq!(cache.lookup(&blocks(&a)), 0, "cold");
        assert_eq!(
            cache.lookup(&blocks(&a)),
            32,
            "two full blocks; the 8-token tail never caches"
        );
        let mut b = a.clone();
        b[20] = 999; // the second block differs, so only the first hits
        assert_eq!(cache.lookup(&blocks(&b)), 16);
        let mut c = a.clone();
        c[0] = 999; // a different first block: nothing after it can hit
        assert_eq!(cache.lookup(&blocks(&c)), 0);
    }

    #[test]
    fn mock_prefix_cache_forgets_the_oldest_blocks() {
        let cache = PrefixCache::new(2 * BLOCK_TOKENS as u64);
        let a: Vec<u32> = (0..16).collect();
        let b: Vec<u32> = (100..116).collect();
        let c: Vec<u32> = (200..216).collect();
        for p in [&a, &b, &c] {
            assert_eq!(cache.lookup(&blocks(p)), 0);
        }
        assert_eq!(cache.lookup(&blocks(&c)), 16, "recent: kept");
        assert_eq!(cache.lookup(&blocks(&a)), 0, "oldest: forgotten");
    }

    #[test]
    fn mock_prefix_cache_split_hits_only_in_the_same_replica() {
        let cache = PrefixCache::split(1 << 16, 4);
        let a: Vec<u32> = (0..32).collect();
        let r = cache.replica(Some(b"session-1"));
        assert_eq!(
            r,
            cache.replica(Some(b"session-1")),
            "a key keeps its replica"
        );
        assert_eq!(cache.lookup_on(r, &blocks(&a)), 0);
        assert_eq!(cache.lookup_on(r, &blocks(&a)), 32);
        assert_eq!(
            cache.lookup_on(r + 1, &blocks(&a)),
            0,
            "another replica: cold"
        );
        // No key: scattered over every replica, not in turn (users that start together
        // would then keep one replica each, as if routed by key).
        let drawn: Vec<usize> = (0..400).map(|_| cache.replica(None)).collect();
        for replica in 0..4 {
            let n = drawn.iter().filter(|&&r| r == replica).count();
            assert!((60..=140).contains(&n), "replica {replica}: {n} of 400");
        }
        let in_turn = drawn.windows(2).filter(|w| w[1] == (w[0] + 1) % 4).count();
        assert!(in_turn < 200, "{in_turn} of 399 steps in turn");
    }

    #[test]
    fn mock_prefix_blocks_count_text_tokens_like_the_tokenizer() {
        let text = "Hello, world! A prompt of some words; and punctuation.";
        let mut p = PromptBlocks::default();
        p.push_text(text);
        assert_eq!(p.tokens(), super::super::tokenizer::count(text));
    }
}
