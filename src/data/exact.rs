//! Prompt text of an exact token length, fast.
//!
//! Re-encoding a whole prompt per request costs ~0.2 µs per token; this builder encodes
//! its source text once (per process) and then cuts prompts out of it as windows of
//! token ids. A window starts where a word starts (a pre-token boundary, so the tokens
//! inside it are the ones the whole text had) and only its last, possibly cut, word is
//! re-encoded: when that edge re-encodes to the same count it stays, otherwise it is
//! replaced by single-token filler words. Pieces are joined at a space before a word,
//! where tokenizers split, so lengths add up.
//!
//! A self-check at construction re-encodes a set of prompts; if the tokenizer does not
//! split where expected (lengths do not add up), the builder re-encodes and repairs
//! every prompt instead: slower, still exact.
//!
//! The default workload (the built-in text under `cl100k_base`) needs no tokenizer at
//! all: its token material (each token's byte length, whether each window's cut edge
//! re-encodes alike, which filler words are single tokens) is computed once, ahead of
//! time, into `assets/cl100k_builtin.bin`, and [`PromptBuilder::builtin_cl100k`] reads
//! it. Loading cl100k takes ~0.1 s per process, which was most of the time from launch
//! to the first request; a test checks the file against the tokenizer.
//!
//! A prompt is `[prefix][marker][body]`: the prefix (shared by every prompt of a prefix
//! group) opens with a group word and continues with a fixed window; the marker is up
//! to [`MARKER_TOKENS`] words spelling the prompt's number within its group (least
//! significant first, so consecutive prompts differ right after the prefix); the body
//! is a window chosen per prompt.

use super::tokenizer::Tokenizer;

/// Tokens of the per-prompt marker that follows the prefix.
pub const MARKER_TOKENS: usize = 4;
/// A tokenizer must have at least this many single-token common words.
const MIN_WORDS: usize = 16;
/// Spare tokens of source text beyond the longest prompt (room for distinct windows).
const SPARE_TOKENS: usize = 16_384;

/// Builds exact-length prompts from a pre-tokenized source text.
#[derive(Debug)]
pub struct PromptBuilder {
    /// `None` for precomputed material ([`PromptBuilder::builtin_cl100k`]), which never
    /// repairs and knows every window edge in advance.
    tok: Option<Tokenizer>,
    /// The tokenizer's name, for errors.
    name: String,
    text: String,
    /// Byte range of each token of `text`.
    starts: Vec<u32>,
    ends: Vec<u32>,
    /// (token index, byte where its word and the space before it begin), sorted.
    word_starts: Vec<(u32, u32)>,
    /// Words that are one token alone and after a space.
    words: Vec<String>,
    /// Lengths did not add up in the self-check: re-encode and repair every prompt.
    repair: bool,
    /// Precomputed [`PromptBuilder::edge_stable`] of every window end (bit `end - 1`).
    stable: Option<Vec<u64>>,
}

/// Where a prompt's prefix comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixPart {
    /// The prefix group.
    pub group: u64,
    /// Its length in tokens.
    pub tokens: usize,
    /// Where its window starts (any number; the same for the whole group).
    pub pick: u64,
}

impl PromptBuilder {
    /// Encodes `source` (the built-in text when `None`), repeated as needed so prompts of
    /// up to `max_tokens` have room, and checks that lengths add up.
    pub fn new(tok: Tokenizer, source: Option<&str>, max_tokens: usize) -> Result<Self, String> {
        let need = max_tokens + SPARE_TOKENS;
        let text = match source {
            None => super::corpus::builtin_text(need),
            Some(s) => {
                let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
                if s.is_empty() {
                    return Err("the source text is empty".into());
                }
                // Repeat until there are about enough words (a word is at least a token).
                let words = s.split(' ').count().max(1);
                let copies = need.div_ceil(words).max(1);
                vec![s.as_str(); copies].join(" ")
            }
        };
        let (ids, offsets) = tok.encode_with_offsets(&text);
        if ids.is_empty() || offsets.len() != ids.len() {
            return Err(format!(
                "{}: the source text encodes to nothing",
                tok.name()
            ));
        }
        let mut starts = Vec::with_capacity(ids.len());
        let mut ends = Vec::with_capacity(ids.len());
        for &(s, e) in &offsets {
            starts.push(u32::try_from(s).map_err(|_| "the source text is too large")?);
            ends.push(u32::try_from(e).map_err(|_| "the source text is too large")?);
        }
        let word_starts = find_word_starts(&text, &offsets);
        let mut words: Vec<String> = Vec::new();
        for w in super::corpus::WORDS {
            if tok.count(w) == 1 && tok.count(&format!(" {w}")) == 1 {
                words.push((*w).to_string());
            }
        }
        if words.len() < MIN_WORDS {
            return Err(format!(
                "{}: cannot build exact prompts: only {} common English words are single tokens (need {MIN_WORDS})",
                tok.name(),
                words.len()
            ));
        }
        if word_starts.is_empty() {
            return Err(format!(
                "{}: the source text has no word boundaries to cut prompts at",
                tok.name()
            ));
        }
        let mut builder = Self {
            name: tok.name().to_string(),
            tok: Some(tok),
            text,
            starts,
            ends,
            word_starts,
            words,
            repair: false,
            stable: None,
        };
        builder.repair = !builder.self_check(max_tokens);
        if builder.repair && !builder.self_check(max_tokens) {
            return Err(format!(
                "{}: cannot build prompts of exact lengths with this tokenizer",
                builder.name
            ));
        }
        Ok(builder)
    }

    /// The builder of the built-in text under `cl100k_base` for prompts of up to
    /// `max_tokens`, from the precomputed material: no tokenizer is loaded. `None` when
    /// the prompts are longer than the material covers (load the tokenizer instead).
    pub fn builtin_cl100k(max_tokens: usize) -> Option<Self> {
        let m = Material::parse(CL100K_BUILTIN)?;
        let need = max_tokens.checked_add(SPARE_TOKENS)?;
        if need > m.words as usize {
            return None;
        }
        // The text of `need` words is a prefix of the material's text ending at a
        // sentence, where cl100k's pre-tokenizer splits: its tokens are the material's
        // first tokens, and each edge (a substring) re-encodes as it did there.
        let text = super::corpus::builtin_text(need);
        let (mut starts, mut ends) = (Vec::new(), Vec::new());
        let mut at = 0u32;
        for &len in m.lens {
            if at as usize >= text.len() {
                break;
            }
            starts.push(at);
            at += u32::from(len);
            ends.push(at);
        }
        if at as usize != text.len() || starts.is_empty() {
            return None;
        }
        let offsets: Vec<(usize, usize)> = starts
            .iter()
            .zip(&ends)
            .map(|(&s, &e)| (s as usize, e as usize))
            .collect();
        let word_starts = find_word_starts(&text, &offsets);
        let words = super::corpus::WORDS
            .iter()
            .enumerate()
            .filter(|&(i, _)| bit(m.words_single, i))
            .map(|(_, w)| (*w).to_string())
            .collect::<Vec<_>>();
        if words.len() < MIN_WORDS || word_starts.is_empty() {
            return None;
        }
        let ntok = starts.len();
        let stable = (0..ntok.div_ceil(64))
            .map(|w| {
                (0..64)
                    .filter(|b| bit(m.stable, w * 64 + b) && w * 64 + b < ntok)
                    .fold(0u64, |acc, b| acc | 1 << b)
            })
            .collect();
        Some(Self {
            tok: None,
            name: "cl100k_base".into(),
            text,
            starts,
            ends,
            word_starts,
            words,
            repair: false,
            stable: Some(stable),
        })
    }

    /// The tokenizer, unless the builder works from precomputed material.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tok.as_ref()
    }

    /// The material file of this builder (see [`PromptBuilder::builtin_cl100k`]);
    /// `words` is the word count of the built-in text it was built from.
    pub fn material_bytes(&self, words: u32) -> Result<Vec<u8>, String> {
        let ntok = self.starts.len();
        let mut out = Vec::new();
        out.extend_from_slice(MATERIAL_MAGIC);
        out.extend_from_slice(&words.to_le_bytes());
        out.extend_from_slice(
            &u32::try_from(ntok)
                .map_err(|e| e.to_string())?
                .to_le_bytes(),
        );
        let mut at = 0;
        for (&s, &e) in self.starts.iter().zip(&self.ends) {
            if s != at {
                return Err("the tokens do not cover the text contiguously".into());
            }
            out.push(u8::try_from(e - s).map_err(|_| "a token is over 255 bytes")?);
            at = e;
        }
        let mut bits = vec![0u8; ntok.div_ceil(8)];
        for end in 1..=ntok {
            if self.edge_stable(end) {
                bits[(end - 1) / 8] |= 1 << ((end - 1) % 8);
            }
        }
        out.extend_from_slice(&bits);
        let mut single = vec![0u8; super::corpus::WORDS.len().div_ceil(8)];
        for (i, w) in super::corpus::WORDS.iter().enumerate() {
            if self.words.iter().any(|x| x == w) {
                single[i / 8] |= 1 << (i % 8);
            }
        }
        out.extend_from_slice(&single);
        Ok(out)
    }

    fn count(&self, text: &str) -> usize {
        // Only precomputed material has no tokenizer, and it never needs a count.
        self.tok.as_ref().map_or(0, |t| t.count(text))
    }

    /// Whether every prompt is re-encoded (the tokenizer failed the fast-path check).
    pub fn repairs(&self) -> bool {
        self.repair
    }

    fn self_check(&self, max_tokens: usize) -> bool {
        let mut lens = vec![1, 2, 3, 4, 5, 6, 9, 17, 64, 100, 255, 1000];
        lens.push(max_tokens.max(1));
        lens.retain(|&n| n <= max_tokens.max(1));
        for (i, &n) in lens.iter().enumerate() {
            for prefix in [None, Some(n / 3), Some(n)] {
                let prefix = prefix.map(|tokens| PrefixPart {
                    group: i as u64,
                    tokens,
                    pick: 7919 * i as u64,
                });
                let mut out = String::new();
                let pick = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                if self
                    .build(&mut out, n, prefix, i as u64 * 31, pick)
                    .is_err()
                    || self.count(&out) != n
                {
                    return false;
                }
            }
        }
        true
    }

    /// Appends a prompt of exactly `n` tokens to `out`.
    pub fn build(
        &self,
        out: &mut String,
        n: usize,
        prefix: Option<PrefixPart>,
        marker: u64,
        pick: u64,
    ) -> Result<(), String> {
        let mut used = 0;
        if let Some(p) = prefix.filter(|p| p.tokens > 0 && n > 0) {
            let tokens = p.tokens.min(n);
            out.push_str(self.word(p.group));
            self.push_window(out, tokens - 1, p.pick);
            used = tokens;
        }
        let marker_len = MARKER_TOKENS.min(n - used);
        let mut m = marker;
        for _ in 0..marker_len {
            let k = self.words.len() as u64;
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(self.word(m % k));
            m /= k;
        }
        used += marker_len;
        self.push_window(out, n - used, pick);
        if self.repair {
            self.fit(out, n)?;
        }
        Ok(())
    }

    fn word(&self, i: u64) -> &str {
        &self.words[(i % self.words.len() as u64) as usize]
    }

    fn push_filler(&self, out: &mut String, n: usize, seed: u64) {
        for j in 0..n as u64 {
            out.push(' ');
            out.push_str(self.word(seed.wrapping_add(j.wrapping_mul(7))));
        }
    }

    /// Appends ` ...` of exactly `n` tokens (fast path), from a window chosen by `pick`.
    fn push_window(&self, out: &mut String, n: usize, pick: u64) {
        if n == 0 {
            return;
        }
        let ntok = self.starts.len();
        let fits = self
            .word_starts
            .partition_point(|&(t, _)| t as usize + n <= ntok);
        if fits == 0 {
            self.push_filler(out, n, pick);
            return;
        }
        let (i, from) = self.word_starts[(pick % fits as u64) as usize];
        let (i, from) = (i as usize, from as usize);
        let end = i + n; // exclusive
        let to = self.ends[end - 1] as usize;
        let (e, _) = self.last_word_start(end);
        if self.edge_stable(end) {
            out.push_str(&self.text[from..to]);
        } else {
            if e > i {
                out.push_str(&self.text[from..self.ends[e - 1] as usize]);
            }
            self.push_filler(out, end - e, pick >> 17);
        }
    }

    /// The last word start before token `end` (exclusive): (its token, its byte).
    fn last_word_start(&self, end: usize) -> (usize, usize) {
        let k = self
            .word_starts
            .partition_point(|&(t, _)| (t as usize) < end)
            .saturating_sub(1);
        let (e, from) = self.word_starts[k];
        (e as usize, from as usize)
    }

    /// Whether a window ending before token `end` may end there as it is: its last,
    /// possibly cut, word re-encodes to the tokens it has in the whole text (the tokens
    /// before that word are stable by construction).
    fn edge_stable(&self, end: usize) -> bool {
        if let Some(bits) = &self.stable {
            let i = end - 1;
            return bits.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1);
        }
        let (e, tail_from) = self.last_word_start(end);
        if e >= end {
            return false; // before the first word start: no window ends here
        }
        let to = self.ends[end - 1] as usize;
        match self.text.get(tail_from..to) {
            Some(tail) => !tail.ends_with(char::is_whitespace) && self.count(tail) == end - e,
            None => false,
        }
    }

    /// Re-encodes `text` and repairs it to exactly `n` tokens (the slow path).
    pub fn fit(&self, text: &mut String, n: usize) -> Result<(), String> {
        match &self.tok {
            Some(tok) => fit_exact(tok, text, n, &self.words),
            None => Err(format!(
                "{}: no tokenizer to repair prompts with",
                self.name
            )),
        }
    }

    /// Single-token filler words.
    pub fn words(&self) -> &[String] {
        &self.words
    }
}

/// The precomputed material of the built-in text under cl100k_base (see the module
/// docs; written by the test `builtin_cl100k_material_is_current`).
const CL100K_BUILTIN: &[u8] = include_bytes!("../../assets/cl100k_builtin.bin");
/// Words of built-in text the material covers: prompts up to this less
/// [`SPARE_TOKENS`] tokens.
pub const CL100K_BUILTIN_WORDS: u32 = SPARE_TOKENS as u32 + 8192;
const MATERIAL_MAGIC: &[u8; 8] = b"LLMSPTM1";

/// A material file, borrowed: `words`, then per token its byte length, then a bit per
/// window end (edge stable), then a bit per [`super::corpus::WORDS`] entry (one token).
struct Material<'a> {
    words: u32,
    lens: &'a [u8],
    stable: &'a [u8],
    words_single: &'a [u8],
}

impl<'a> Material<'a> {
    fn parse(b: &'a [u8]) -> Option<Self> {
        let rest = b.strip_prefix(MATERIAL_MAGIC.as_slice())?;
        let words = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
        let ntok = u32::from_le_bytes(rest.get(4..8)?.try_into().ok()?) as usize;
        let rest = &rest[8..];
        let (lens, rest) = rest.split_at_checked(ntok)?;
        let (stable, rest) = rest.split_at_checked(ntok.div_ceil(8))?;
        let words_single = rest.get(..super::corpus::WORDS.len().div_ceil(8))?;
        Some(Self {
            words,
            lens,
            stable,
            words_single,
        })
    }
}

fn bit(bytes: &[u8], i: usize) -> bool {
    bytes.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1)
}

/// Word starts of `text`: tokens that begin with a space and a letter (tiktoken style),
/// or begin with a letter right after a space (tokenizers that drop whitespace).
fn find_word_starts(text: &str, offsets: &[(usize, usize)]) -> Vec<(u32, u32)> {
    let bytes = text.as_bytes();
    let letter = |at: usize| bytes.get(at).is_some_and(|b| b.is_ascii_alphabetic());
    let space = |at: usize| bytes.get(at) == Some(&b' ');
    let ws_before = |at: usize| at > 0 && bytes[at - 1].is_ascii_whitespace();
    let mut out = Vec::new();
    for (t, &(s, e)) in offsets.iter().enumerate() {
        if e <= s || t == 0 {
            continue;
        }
        let at = if space(s) && letter(s + 1) && !ws_before(s) {
            s
        } else if letter(s) && space(s.wrapping_sub(1)) && !ws_before(s - 1) && offsets[t - 1].1 < s
        {
            s - 1
        } else {
            continue;
        };
        if let (Ok(t), Ok(at)) = (u32::try_from(t), u32::try_from(at)) {
            out.push((t, at));
        }
    }
    out
}

/// Makes `text` exactly `n` tokens: cuts surplus tokens off the end, pads with filler
/// words, and re-encodes until the count holds.
pub fn fit_exact(
    tok: &Tokenizer,
    text: &mut String,
    n: usize,
    words: &[String],
) -> Result<(), String> {
    for round in 0..12 {
        let ids = tok.encode(text);
        let c = ids.len();
        if c == n {
            return Ok(());
        }
        if c > n {
            let keep = if round < 6 {
                n
            } else {
                n.saturating_sub(round - 5)
            };
            *text = tok.decode(&ids[..keep]);
        } else {
            for j in 0..n - c {
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(&words[(round + j) % words.len()]);
            }
        }
    }
    Err(format!(
        "cannot make a text of exactly {n} tokens under {}",
        tok.name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::TokenizerRef;

    fn cl100k() -> Tokenizer {
        Tokenizer::load(&TokenizerRef::Builtin("cl100k_base".into())).expect("load")
    }

    #[test]
    fn windows_are_exact_on_the_fast_path() {
        let b = PromptBuilder::new(cl100k(), None, 2048).expect("builder");
        assert!(!b.repairs(), "cl100k must take the fast path");
        for (i, n) in [1usize, 2, 7, 33, 512, 1024, 2048].into_iter().enumerate() {
            for s in 0..20u64 {
                let mut out = String::new();
                b.build(&mut out, n, None, s, s * 1_000_003 + i as u64)
                    .expect("build");
                assert_eq!(b.count(&out), n, "{out:?}");
            }
        }
    }

    #[test]
    fn a_user_source_text_is_repeated_and_cut_exactly() {
        let src = "Zebras graze quietly; meanwhile, antidisestablishmentarianism flourishes \
                   in unexpected places. Numbers like 12345 and symbols #@! appear too.";
        let b = PromptBuilder::new(cl100k(), Some(src), 300).expect("builder");
        for s in 0..50u64 {
            let mut out = String::new();
            b.build(&mut out, 1 + (s as usize * 7) % 300, None, s, s * 7919)
                .expect("build");
            assert_eq!(b.count(&out), 1 + (s as usize * 7) % 300, "{out:?}");
        }
    }

    /// Rewrites the material file when `LLMSURGE_WRITE_MATERIAL=1`
    /// (`LLMSURGE_WRITE_MATERIAL=1 cargo nextest run -E 'test(builtin_cl100k_material)'`):
    /// needed when the built-in text, its words or the bound change.
    #[test]
    fn builtin_cl100k_material_is_current() {
        let words = CL100K_BUILTIN_WORDS;
        let b = PromptBuilder::new(cl100k(), None, words as usize - SPARE_TOKENS).expect("builder");
        assert!(!b.repairs());
        let bytes = b.material_bytes(words).expect("material");
        if std::env::var_os("LLMSURGE_WRITE_MATERIAL").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/cl100k_builtin.bin");
            std::fs::write(path, &bytes).expect("write the material");
        }
        assert!(
            bytes == CL100K_BUILTIN,
            "assets/cl100k_builtin.bin is out of date: rerun this test with LLMSURGE_WRITE_MATERIAL=1"
        );
    }

    #[test]
    fn precomputed_material_builds_the_same_prompts_as_the_tokenizer() {
        let tok = cl100k();
        for max in [1usize, 16, 300, 2048, 8192] {
            let fresh = PromptBuilder::new(cl100k(), None, max).expect("builder");
            let pre = PromptBuilder::builtin_cl100k(max).expect("covered");
            assert!(pre.tokenizer().is_none() && !fresh.repairs());
            assert_eq!(pre.text, fresh.text, "{max}");
            assert_eq!((&pre.starts, &pre.ends), (&fresh.starts, &fresh.ends));
            assert_eq!(pre.word_starts, fresh.word_starts);
            assert_eq!(pre.words, fresh.words);
            // Every edge a window can end at (after the first word start).
            let first = fresh.word_starts[0].0 as usize;
            for end in first + 1..=fresh.starts.len() {
                assert_eq!(pre.edge_stable(end), fresh.edge_stable(end), "{max}: {end}");
            }
            for s in 0..40u64 {
                let n = 1 + (s as usize * 37) % max;
                let prefix = (s % 3 == 0).then_some(PrefixPart {
                    group: s % 5,
                    tokens: n / 2,
                    pick: s * 7919,
                });
                let (mut a, mut b) = (String::new(), String::new());
                pre.build(&mut a, n, prefix, s, s * 1_000_003)
                    .expect("build");
                fresh
                    .build(&mut b, n, prefix, s, s * 1_000_003)
                    .expect("build");
                assert_eq!(a, b);
                assert_eq!(tok.count(&a), n, "{a:?}");
            }
        }
        assert!(PromptBuilder::builtin_cl100k(CL100K_BUILTIN_WORDS as usize).is_none());
    }

    #[test]
    fn fit_exact_cuts_and_pads() {
        let t = cl100k();
        let words: Vec<String> = ["the", "of", "and"].iter().map(|s| s.to_string()).collect();
        let mut text = "one two three four five six seven".to_string();
        fit_exact(&t, &mut text, 3, &words).expect("cut");
        assert_eq!(t.count(&text), 3);
        fit_exact(&t, &mut text, 10, &words).expect("pad");
        assert_eq!(t.count(&text), 10);
    }
}
