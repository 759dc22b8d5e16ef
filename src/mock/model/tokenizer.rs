//! The mock's built-in tokenizer. Rule: a token is a maximal run of alphanumeric
//! characters (a word), or any single other non-whitespace character (punctuation);
//! whitespace separates tokens and is not one. "Hello, world!" is 4 tokens.
//!
//! Ids: the generation vocabulary (`VOCAB`) has ids 0..VOCAB.len(), ASCII punctuation
//! follows, and any other token gets a stable hashed id at or above `HASHED_BASE`, which
//! detokenizes to `<unk>`. Generated text is only vocabulary words, each with a leading
//! space (" the"), so re-tokenizing an output gives back its token count.

/// Words the mock generates; lowercase ASCII so they need no JSON escaping.
pub const VOCAB: [&str; 64] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "model", "token", "server",
    "load", "latency", "stream", "request", "queue", "slot", "mock", "batch", "cache", "prompt",
    "answer", "reason", "time",
];

/// ASCII punctuation with ids VOCAB.len() + index.
const PUNCT: &[u8] = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// Tokens outside the vocabulary and punctuation get ids from here up.
pub const HASHED_BASE: u32 = 1_000_000;
const HASHED_SPAN: u32 = 1 << 20;

/// Splits `text` into token slices following the module's rule.
pub fn for_each_token<'a>(text: &'a str, mut f: impl FnMut(&'a str)) {
    let mut word_start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric() {
            word_start.get_or_insert(i);
            continue;
        }
        if let Some(start) = word_start.take() {
            f(&text[start..i]);
        }
        if !c.is_whitespace() {
            f(&text[i..i + c.len_utf8()]);
        }
    }
    if let Some(start) = word_start {
        f(&text[start..]);
    }
}

/// [`for_each_token`] as bytes, what the prefix cache hashes: an ASCII text (every
/// prompt token of every request goes through here) is split without char decoding or
/// boundary checks.
pub fn for_each_token_bytes<'a>(text: &'a str, mut f: impl FnMut(&'a [u8])) {
    if !text.is_ascii() {
        return for_each_token(text, |t| f(t.as_bytes()));
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b.is_ascii_alphanumeric() {
            let start = i;
            i += 1;
            while bytes.get(i).is_some_and(u8::is_ascii_alphanumeric) {
                i += 1;
            }
            f(&bytes[start..i]);
            continue;
        }
        if !is_ascii_space(b) {
            f(&bytes[i..=i]);
        }
        i += 1;
    }
}

/// `char::is_whitespace` for an ASCII byte (`u8::is_ascii_whitespace` leaves out the
/// vertical tab), so both paths of the tokenizer agree.
fn is_ascii_space(b: u8) -> bool {
    b.is_ascii_whitespace() || b == 0x0b
}

/// Number of tokens in `text`.
pub fn count(text: &str) -> u64 {
    let mut n = 0;
    for_each_token_bytes(text, |_| n += 1);
    n
}

/// Token ids of `text`, appended to `out`.
pub fn encode_into(text: &str, out: &mut Vec<u32>) {
    for_each_token(text, |tok| out.push(token_id(tok)));
}

fn token_id(tok: &str) -> u32 {
    if let Some(i) = VOCAB.iter().position(|w| *w == tok) {
        return i as u32;
    }
    if let [b] = tok.as_bytes()
        && let Some(p) = PUNCT.iter().position(|c| c == b)
    {
        return (VOCAB.len() + p) as u32;
    }
    HASHED_BASE + fnv1a(tok.as_bytes()) % HASHED_SPAN
}

/// Text of token ids: words get a leading space except at the start, punctuation none.
pub fn decode(ids: &[u32]) -> String {
    let mut out = String::new();
    for &id in ids {
        let i = id as usize;
        if let Some(word) = VOCAB.get(i) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(word);
        } else if let Some(&p) = i.checked_sub(VOCAB.len()).and_then(|p| PUNCT.get(p)) {
            out.push(char::from(p));
        } else {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str("<unk>");
        }
    }
    out
}

fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mock_tokenizer_counts_words_and_punctuation() {
        assert_eq!(count("Hello, world!"), 4);
        assert_eq!(count("  "), 0);
        assert_eq!(count("a  b\tc\n"), 3);
        assert_eq!(count("don't"), 3);
        assert_eq!(count("héllo wörld ✓"), 3);
        let mut ids = Vec::new();
        encode_into("héllo wörld ✓", &mut ids);
        assert_eq!(ids.len(), 3);
    }

    #[test]
    fn the_byte_splitter_and_the_count_follow_the_char_rule() {
        // The rule spelled out over chars, as the non-ASCII path applies it.
        fn by_chars(text: &str) -> Vec<String> {
            let mut out: Vec<String> = Vec::new();
            let mut word = String::new();
            for c in text.chars() {
                if c.is_alphanumeric() {
                    word.push(c);
                    continue;
                }
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                if !c.is_whitespace() {
                    out.push(c.to_string());
                }
            }
            if !word.is_empty() {
                out.push(word);
            }
            out
        }
        for text in [
            "Hello, world!",
            "a\x0bb\x0cc\rd",
            "  x1 -- 2y\t(z)",
            "don't stop.",
            "",
            "end",
        ] {
            let mut got = Vec::new();
            for_each_token(text, |t| got.push(t.to_string()));
            assert_eq!(got, by_chars(text), "{text:?}");
            let mut bytes = Vec::new();
            for_each_token_bytes(text, |t| {
                bytes.push(String::from_utf8_lossy(t).into_owned())
            });
            assert_eq!(bytes, got, "{text:?}");
            assert_eq!(count(text), got.len() as u64, "{text:?}");
        }
    }

    #[test]
    fn mock_tokenizer_round_trips_vocabulary() {
        let mut ids = Vec::new();
        encode_into("the model, the server.", &mut ids);
        assert_eq!(decode(&ids), "the model, the server.");
        let mut other = Vec::new();
        encode_into("Zebra", &mut other);
        assert!(other[0] >= HASHED_BASE);
        assert_eq!(decode(&other), "<unk>");
    }
}
