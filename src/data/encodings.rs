//! The built-in tiktoken encodings (`--processor cl100k_base`, …), from vocabularies packed
//! into the binary.
//!
//! `tiktoken-rs` embeds each vocabulary as base64 text, 7 MB for the four of them; packed
//! here as every rank's length, then every rank's bytes, LZMA-compressed, they take 1.37 MB
//! (`r50k_base` is the first 50,256 ranks of `p50k_base`, so that one is stored once). Only
//! the tables are ours: the encoder is `tiktoken-rs`'s `CoreBPE`, and the test
//! `packed_encodings_are_current` checks that every rank, special token and split pattern
//! gives the same encoder as `tiktoken-rs`'s own loaders (and rewrites the packed files from
//! them with `LLMSURGE_WRITE_MATERIAL=1`, when `tiktoken-rs` is upgraded).

use rustc_hash::FxHashMap;
use tiktoken_rs::{CoreBPE, Rank};

/// Ranks 0..50,255 of r50k_base and p50k_base.
const R50K: &[u8] = include_bytes!("../../assets/encodings/r50k_base.lzma");
/// Ranks 50,256.. of p50k_base (50,256 itself is the special `<|endoftext|>`).
const P50K_EXTRA: &[u8] = include_bytes!("../../assets/encodings/p50k_extra.lzma");
const CL100K: &[u8] = include_bytes!("../../assets/encodings/cl100k_base.lzma");
const O200K: &[u8] = include_bytes!("../../assets/encodings/o200k_base.lzma");

/// The split pattern of r50k_base and p50k_base (GPT-2's).
const GPT2_PATTERN: &str =
    "'(?:[sdmt]|ll|ve|re)| ?\\p{L}++| ?\\p{N}++| ?[^\\s\\p{L}\\p{N}]++|\\s++$|\\s+(?!\\S)|\\s";
const CL100K_PATTERN: &str = "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s";

/// One built-in encoding: its packed parts (ranks continue from one part to the next),
/// special tokens and split pattern.
struct Builtin {
    name: &'static str,
    parts: &'static [&'static [u8]],
    specials: fn() -> Vec<(String, Rank)>,
    pattern: &'static str,
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "cl100k_base",
        parts: &[CL100K],
        specials: || {
            specials(&[
                ("<|endoftext|>", 100257),
                ("<|fim_prefix|>", 100258),
                ("<|fim_middle|>", 100259),
                ("<|fim_suffix|>", 100260),
                ("<|endofprompt|>", 100276),
            ])
        },
        pattern: CL100K_PATTERN,
    },
    Builtin {
        name: "o200k_base",
        parts: &[O200K],
        specials: || specials(&[("<|endoftext|>", 199999), ("<|endofprompt|>", 200018)]),
        pattern: tiktoken_rs::O200K_BASE_PAT_STR,
    },
    Builtin {
        name: "o200k_harmony",
        parts: &[O200K],
        specials: harmony_specials,
        pattern: tiktoken_rs::O200K_BASE_PAT_STR,
    },
    Builtin {
        name: "p50k_base",
        parts: &[R50K, P50K_EXTRA],
        specials: || specials(&[("<|endoftext|>", 50256)]),
        pattern: GPT2_PATTERN,
    },
    Builtin {
        name: "r50k_base",
        parts: &[R50K],
        specials: || specials(&[("<|endoftext|>", 50256)]),
        pattern: GPT2_PATTERN,
    },
];

/// The names of the built-in encodings.
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|b| b.name)
}

/// Loads a built-in encoding by name; `None` when there is none of that name.
pub fn load(name: &str) -> Option<Result<CoreBPE, String>> {
    let b = BUILTINS.iter().find(|b| b.name == name)?;
    Some(build(b).map_err(|e| format!("cannot load the {name} encoding: {e}")))
}

fn build(b: &Builtin) -> Result<CoreBPE, String> {
    let mut encoder = FxHashMap::default();
    let mut rank: Rank = 0;
    for part in b.parts {
        let raw = crate::packed::unpack(part).map_err(|e| format!("packed vocabulary: {e}"))?;
        let (lens, mut tokens) = split_ranks(&raw).ok_or("packed vocabulary: truncated")?;
        for &len in lens {
            let (token, tail) = tokens
                .split_at_checked(usize::from(len))
                .ok_or("packed vocabulary: truncated")?;
            // A zero length marks a rank that is not a mergeable token (a special one).
            if len > 0 {
                encoder.insert(token.to_vec(), rank);
            }
            rank += 1;
            tokens = tail;
        }
    }
    let specials = (b.specials)().into_iter().collect();
    CoreBPE::new(encoder, specials, b.pattern).map_err(|e| e.to_string())
}

/// A part's layout: the count of ranks (u32, little-endian), each rank's length in bytes,
/// then the ranks' bytes one after the other (lengths apart from bytes compress better).
fn split_ranks(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    let (count, rest) = raw.split_first_chunk::<4>()?;
    rest.split_at_checked(usize::try_from(u32::from_le_bytes(*count)).ok()?)
}

fn specials(list: &[(&str, Rank)]) -> Vec<(String, Rank)> {
    list.iter().map(|&(s, r)| (s.to_string(), r)).collect()
}

/// gpt-oss's tokens: named ones and the reserved range 200,013..=201,087.
fn harmony_specials() -> Vec<(String, Rank)> {
    let mut out = specials(&[
        ("<|startoftext|>", 199998),
        ("<|endoftext|>", 199999),
        ("<|reserved_200000|>", 200000),
        ("<|reserved_200001|>", 200001),
        ("<|return|>", 200002),
        ("<|constrain|>", 200003),
        ("<|reserved_200004|>", 200004),
        ("<|channel|>", 200005),
        ("<|start|>", 200006),
        ("<|end|>", 200007),
        ("<|message|>", 200008),
        ("<|reserved_200009|>", 200009),
        ("<|reserved_200010|>", 200010),
        ("<|reserved_200011|>", 200011),
        ("<|call|>", 200012),
    ]);
    out.extend((200013..=201087).map(|i| (format!("<|reserved_{i}|>"), i)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each rank's bytes, `None` where the rank is special or unused.
    fn ranks(bpe: &CoreBPE) -> Vec<Option<Vec<u8>>> {
        let special: std::collections::HashSet<Rank> = bpe
            .special_tokens()
            .into_iter()
            .flat_map(|s| bpe.encode_with_special_tokens(s))
            .collect();
        let mut out = Vec::new();
        let mut misses = 0;
        let mut rank: Rank = 0;
        // Past the last mergeable rank, stop after a run of gaps (the reserved specials).
        while misses < 2_000 {
            match bpe.decode_bytes(&[rank]) {
                Ok(b) if !special.contains(&rank) => {
                    misses = 0;
                    out.push(Some(b));
                }
                _ => {
                    misses += 1;
                    out.push(None);
                }
            }
            rank += 1;
        }
        while out.last() == Some(&None) {
            out.pop();
        }
        out
    }

    /// A part's bytes before compression (the layout of `split_ranks`).
    fn layout(ranks: &[Option<Vec<u8>>]) -> Vec<u8> {
        let count = u32::try_from(ranks.len()).expect("ranks fit a u32");
        let mut raw = count.to_le_bytes().to_vec();
        let tokens = ranks.iter().map(|t| t.as_deref().unwrap_or_default());
        raw.extend(
            tokens
                .clone()
                .map(|t| u8::try_from(t.len()).expect("tokens are under 256 bytes")),
        );
        raw.extend(tokens.flatten());
        raw
    }

    /// Rewrites assets/encodings/ with `LLMSURGE_WRITE_MATERIAL=1` (after a tiktoken-rs
    /// upgrade); otherwise checks that every packed encoding is tiktoken-rs's own.
    #[test]
    fn packed_encodings_are_current() {
        let r50k = ranks(&tiktoken_rs::r50k_base().expect("r50k"));
        let p50k = ranks(&tiktoken_rs::p50k_base().expect("p50k"));
        assert_eq!(
            p50k[..r50k.len()],
            r50k[..],
            "r50k_base is p50k_base's prefix"
        );
        let files = [
            ("r50k_base", layout(&r50k), R50K),
            ("p50k_extra", layout(&p50k[r50k.len()..]), P50K_EXTRA),
            (
                "cl100k_base",
                layout(&ranks(&tiktoken_rs::cl100k_base().expect("cl100k"))),
                CL100K,
            ),
            (
                "o200k_base",
                layout(&ranks(&tiktoken_rs::o200k_base().expect("o200k"))),
                O200K,
            ),
        ];
        if std::env::var_os("LLMSURGE_WRITE_MATERIAL").is_some() {
            for (name, raw, _) in &files {
                let path = format!(
                    "{}/assets/encodings/{name}.lzma",
                    env!("CARGO_MANIFEST_DIR")
                );
                std::fs::write(path, crate::packed::pack(raw)).expect("write");
            }
        }
        for (name, raw, shipped) in &files {
            assert!(
                crate::packed::unpack(shipped).ok().as_ref() == Some(raw),
                "assets/encodings/{name}.lzma is out of date: rerun this test with LLMSURGE_WRITE_MATERIAL=1"
            );
        }
    }

    #[test]
    fn every_builtin_encodes_as_tiktoken_rs_does() {
        let text =
            "Hello, world! It's 2026: naïve café 東京 🚀\n\n  fn main() { x += 1; }\t<|endoftext|>";
        for b in BUILTINS {
            let ours = load(b.name).expect("known").expect("loads");
            let theirs = match b.name {
                "cl100k_base" => tiktoken_rs::cl100k_base(),
                "o200k_base" => tiktoken_rs::o200k_base(),
                "o200k_harmony" => tiktoken_rs::o200k_harmony(),
                "p50k_base" => tiktoken_rs::p50k_base(),
                "r50k_base" => tiktoken_rs::r50k_base(),
                other => panic!("no tiktoken-rs loader named for {other}"),
            }
            .expect("tiktoken-rs loads");
            assert_eq!(ranks(&ours), ranks(&theirs), "{}: ranks", b.name);
            assert_eq!(ours.special_tokens(), theirs.special_tokens(), "{}", b.name);
            assert_eq!(
                ours.encode_ordinary(text),
                theirs.encode_ordinary(text),
                "{}: pattern",
                b.name
            );
            assert_eq!(
                ours.encode_with_special_tokens(text),
                theirs.encode_with_special_tokens(text),
                "{}: specials",
                b.name
            );
        }
        assert!(load("gpt2").is_none());
    }
}
