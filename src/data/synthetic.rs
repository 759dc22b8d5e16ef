//! Synthetic prompts: deterministic text of about the requested length.
//!
//! Every request's lengths and text come from generators seeded by (seed, stream,
//! sample), so the same seed gives the same workload whatever the number of workers.
//! Each prompt opens with its sample number, so no two prompts share more than their
//! configured prefix and a server's prefix cache is not flattered by accident.

use llmsurge_proto::SyntheticSpec;
use llmsurge_proto::seed::derive_seed;
use llmsurge_worker::{PreparedRequest, Prompt, RequestSource};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};
use serde::Deserialize;

/// Common English words that are one token each in the usual BPE vocabularies when
/// preceded by a space.
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "you",
    "that",
    "it",
    "he",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
    "this",
    "have",
    "from",
    "or",
    "one",
    "had",
    "by",
    "word",
    "but",
    "not",
    "what",
    "all",
    "were",
    "we",
    "when",
    "your",
    "can",
    "said",
    "there",
    "use",
    "an",
    "each",
    "which",
    "she",
    "do",
    "how",
    "their",
    "if",
    "will",
    "up",
    "other",
    "about",
    "out",
    "many",
    "then",
    "them",
    "these",
    "so",
    "some",
    "her",
    "would",
    "make",
    "like",
    "him",
    "into",
    "time",
    "has",
    "look",
    "two",
    "more",
    "write",
    "go",
    "see",
    "number",
    "no",
    "way",
    "could",
    "people",
    "my",
    "than",
    "first",
    "water",
    "been",
    "call",
    "who",
    "its",
    "now",
    "find",
    "long",
    "down",
    "day",
    "did",
    "get",
    "come",
    "made",
    "may",
    "part",
    "over",
    "new",
    "sound",
    "take",
    "only",
    "little",
    "work",
    "know",
    "place",
    "year",
    "live",
    "me",
    "back",
    "give",
    "most",
    "very",
    "after",
    "thing",
    "our",
    "just",
    "name",
    "good",
    "sentence",
    "man",
    "think",
    "say",
    "great",
    "where",
    "help",
    "through",
    "much",
    "before",
    "line",
    "right",
    "too",
    "mean",
    "old",
    "any",
    "same",
    "tell",
    "boy",
    "follow",
    "came",
    "want",
    "show",
    "also",
    "around",
    "form",
    "three",
    "small",
    "set",
    "put",
    "end",
    "does",
    "another",
    "well",
    "large",
    "must",
    "big",
    "even",
    "such",
    "because",
    "turn",
    "here",
    "why",
    "ask",
    "went",
    "men",
    "read",
    "need",
    "land",
    "different",
    "home",
    "us",
    "move",
    "try",
    "kind",
    "hand",
    "picture",
    "again",
    "change",
    "off",
    "play",
    "spell",
    "air",
    "away",
    "animal",
    "house",
    "point",
    "page",
    "letter",
    "mother",
    "answer",
    "found",
    "study",
    "still",
    "learn",
    "should",
    "world",
    "high",
    "every",
    "near",
    "add",
    "food",
    "between",
    "own",
    "below",
    "country",
    "plant",
    "last",
    "school",
    "father",
    "keep",
    "tree",
    "never",
    "start",
    "city",
    "earth",
    "eye",
    "light",
    "thought",
    "head",
    "under",
    "story",
    "saw",
    "left",
    "few",
    "while",
    "along",
    "might",
    "close",
    "something",
    "seem",
    "next",
    "hard",
    "open",
    "example",
    "begin",
    "life",
    "always",
    "those",
    "both",
    "paper",
    "together",
    "got",
    "group",
    "often",
    "run",
    "important",
    "until",
    "children",
    "side",
    "feet",
    "car",
    "mile",
    "night",
    "walk",
    "white",
    "sea",
    "began",
    "grow",
    "took",
    "river",
    "four",
    "carry",
    "state",
    "once",
    "book",
    "hear",
    "stop",
    "without",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFields {
    prompt_tokens: u32,
    #[serde(default)]
    prompt_tokens_stdev: u32,
    prompt_tokens_min: Option<u32>,
    prompt_tokens_max: Option<u32>,
    output_tokens: u32,
    #[serde(default)]
    output_tokens_stdev: u32,
    output_tokens_min: Option<u32>,
    output_tokens_max: Option<u32>,
    #[serde(default)]
    prefix_tokens: u32,
    prefix_count: Option<u32>,
    samples: Option<u64>,
    random_seed: Option<u64>,
}

/// Parses a synthetic spec given as `k=v,...` or as a JSON object.
pub fn parse_spec(raw: &str, run_seed: u64) -> Result<SyntheticSpec, String> {
    let t = raw.trim();
    let value: serde_json::Value = if t.starts_with('{') {
        serde_json::from_str(t).map_err(|e| format!("not valid JSON ({e})"))?
    } else {
        let mut map = serde_json::Map::new();
        for part in t.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                return Err(format!(
                    "{part:?} is not key=value (e.g. prompt_tokens=256,output_tokens=128)"
                ));
            };
            let number: u64 = v
                .trim()
                .parse()
                .map_err(|_| format!("{}={v}: expected a whole number", k.trim()))?;
            map.insert(k.trim().to_string(), number.into());
        }
        serde_json::Value::Object(map)
    };
    let f: SpecFields = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let spec = SyntheticSpec {
        prompt_tokens: f.prompt_tokens,
        prompt_tokens_stdev: f.prompt_tokens_stdev,
        prompt_tokens_min: f.prompt_tokens_min,
        prompt_tokens_max: f.prompt_tokens_max,
        output_tokens: f.output_tokens,
        output_tokens_stdev: f.output_tokens_stdev,
        output_tokens_min: f.output_tokens_min,
        output_tokens_max: f.output_tokens_max,
        prefix_tokens: f.prefix_tokens,
        prefix_count: f.prefix_count.unwrap_or(1),
        samples: f.samples,
        random_seed: f.random_seed.unwrap_or(run_seed),
    };
    validate(&spec)?;
    Ok(spec)
}

fn validate(s: &SyntheticSpec) -> Result<(), String> {
    if s.prompt_tokens == 0 {
        return Err("prompt_tokens must be at least 1".into());
    }
    if s.output_tokens == 0 {
        return Err("output_tokens must be at least 1".into());
    }
    for (name, min, max) in [
        ("prompt_tokens", s.prompt_tokens_min, s.prompt_tokens_max),
        ("output_tokens", s.output_tokens_min, s.output_tokens_max),
    ] {
        if let (Some(lo), Some(hi)) = (min, max)
            && lo > hi
        {
            return Err(format!("{name}_min {lo} is above {name}_max {hi}"));
        }
    }
    if s.prefix_count == 0 {
        return Err("prefix_count must be at least 1".into());
    }
    if s.samples == Some(0) {
        return Err("samples must be at least 1".into());
    }
    Ok(())
}

/// Draws a length around `mean` with `stdev`, within `[min, max]` (and at least 1).
fn draw_len(rng: &mut StdRng, mean: u32, stdev: u32, min: Option<u32>, max: Option<u32>) -> u32 {
    let v = match Normal::new(f64::from(mean), f64::from(stdev)) {
        Ok(n) if stdev > 0 => n.sample(rng).round().max(1.0) as u32,
        _ => mean,
    };
    v.clamp(min.unwrap_or(1).max(1), max.unwrap_or(u32::MAX).max(1))
}

/// A source of synthetic prompts.
#[derive(Debug)]
pub struct SyntheticSource {
    spec: SyntheticSpec,
}

impl SyntheticSource {
    /// A source for `spec`.
    pub fn new(spec: SyntheticSpec) -> Self {
        Self { spec }
    }

    fn words(rng: &mut StdRng, n: u32, out: &mut String) {
        for _ in 0..n {
            out.push(' ');
            out.push_str(WORDS[rng.random_range(0..WORDS.len())]);
        }
    }
}

impl RequestSource for SyntheticSource {
    fn request(&mut self, slot: u64) -> Result<Option<PreparedRequest>, String> {
        let s = &self.spec;
        if s.samples.is_some_and(|n| slot >= n) {
            return Ok(None);
        }
        let seed = s.random_seed;
        let mut rng = StdRng::seed_from_u64(derive_seed(seed, "synthetic", slot));
        let prompt_len = draw_len(
            &mut rng,
            s.prompt_tokens,
            s.prompt_tokens_stdev,
            s.prompt_tokens_min,
            s.prompt_tokens_max,
        );
        let output_len = draw_len(
            &mut rng,
            s.output_tokens,
            s.output_tokens_stdev,
            s.output_tokens_min,
            s.output_tokens_max,
        );
        let mut text = String::with_capacity(prompt_len as usize * 6 + 16);
        let prefix = s.prefix_tokens.min(prompt_len);
        if prefix > 0 {
            let which = slot % u64::from(s.prefix_count);
            let mut prefix_rng =
                StdRng::seed_from_u64(derive_seed(seed, "synthetic-prefix", which));
            Self::words(&mut prefix_rng, prefix, &mut text);
        }
        // The sample number right after the prefix keeps prompts distinct from there on.
        let rest = prompt_len - prefix;
        if rest > 0 {
            text.push_str(&format!(" {slot}"));
            Self::words(&mut rng, rest.saturating_sub(1), &mut text);
        }
        Ok(Some(PreparedRequest {
            prompt: Prompt::Text(text.trim_start().to_string()),
            prompt_tokens: Some(prompt_len),
            max_tokens: Some(output_len),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_from_pairs_and_json() {
        let a = parse_spec("prompt_tokens=256,output_tokens=128", 7).expect("pairs");
        let b = parse_spec(r#"{"prompt_tokens": 256, "output_tokens": 128}"#, 7).expect("json");
        assert_eq!(a, b);
        assert_eq!(a.random_seed, 7);
        assert!(
            parse_spec("prompt_tokens=256", 1)
                .expect_err("missing")
                .contains("output_tokens")
        );
        assert!(
            parse_spec("prompt_tokens=256,output_tokens=1,bogus=3", 1)
                .expect_err("unknown")
                .contains("bogus")
        );
        assert!(parse_spec("prompt_tokens=x,output_tokens=1", 1).is_err());
        assert!(parse_spec("prompt_tokens", 1).is_err());
        assert!(
            parse_spec(
                "prompt_tokens=5,output_tokens=1,prompt_tokens_min=9,prompt_tokens_max=3",
                1
            )
            .is_err()
        );
    }

    #[test]
    fn prompts_are_deterministic_distinct_and_bounded() {
        let spec = parse_spec("prompt_tokens=50,prompt_tokens_stdev=20,prompt_tokens_min=10,prompt_tokens_max=60,output_tokens=8,samples=100", 3)
            .expect("spec");
        let mut a = SyntheticSource::new(spec.clone());
        let mut b = SyntheticSource::new(spec);
        let mut seen = std::collections::HashSet::new();
        for slot in 0..100 {
            let ra = a.request(slot).expect("ok").expect("some");
            assert_eq!(Some(ra.clone()), b.request(slot).expect("ok"));
            let n = ra.prompt_tokens.expect("len");
            assert!((10..=60).contains(&n), "{n}");
            let Prompt::Text(t) = &ra.prompt else {
                panic!("text")
            };
            assert_eq!(t.split_whitespace().count() as u32, n);
            assert!(seen.insert(t.clone()));
        }
        assert_eq!(a.request(100).expect("ok"), None, "finite dataset ends");
    }

    #[test]
    fn prefixes_are_shared_as_configured() {
        let spec = parse_spec(
            "prompt_tokens=20,output_tokens=4,prefix_tokens=5,prefix_count=2",
            1,
        )
        .expect("spec");
        let mut src = SyntheticSource::new(spec);
        let mut first5 = |slot| {
            let r = src.request(slot).expect("ok").expect("some");
            let Prompt::Text(t) = r.prompt else {
                panic!("text")
            };
            t.split_whitespace()
                .take(6)
                .map(String::from)
                .collect::<Vec<_>>()
        };
        let (p0, p1, p2) = (first5(0), first5(1), first5(2));
        assert_eq!(p0[..5], p2[..5], "slots 0 and 2 share prefix 0");
        assert_ne!(p0[..5], p1[..5]);
        assert_ne!(p0[5], p2[5], "the sample number follows the prefix");
    }
}
