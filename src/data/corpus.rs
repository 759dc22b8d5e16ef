//! The built-in source text of synthetic prompts: English-like sentences of common
//! words, generated from a fixed seed (the same text in every process and every run).

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Common English words, single tokens in the usual BPE vocabularies.
pub const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are",
    "as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by",
    "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there",
    "use", "an", "each", "which", "she", "do", "how", "their", "if", "will", "up", "other",
    "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make",
    "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number",
    "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who",
    "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may", "part",
    "over", "new", "sound", "take", "only", "little", "work", "know", "place", "year", "live",
    "me", "back", "give", "most", "very", "after", "thing", "our", "just", "name", "good",
    "sentence", "man", "think", "say", "great", "where", "help", "through", "much", "before",
    "line", "right", "too", "mean", "old", "any", "same", "tell", "boy", "follow", "came",
    "want", "show", "also", "around", "form", "three", "small", "set", "put", "end", "does",
    "another", "well", "large", "must", "big", "even", "such", "because", "turn", "here",
    "why", "ask", "went", "men", "read", "need", "land", "different", "home", "us", "move",
    "try", "kind", "hand", "picture", "again", "change", "off", "play", "spell", "air",
    "away", "animal", "house", "point", "page", "letter", "mother", "answer", "found",
    "study", "still", "learn", "should", "world", "high", "every", "near", "add", "food",
    "between", "own", "below", "country", "plant", "last", "school", "father", "keep", "tree",
    "never", "start", "city", "earth", "eye", "light", "thought", "head", "under", "story",
    "saw", "left", "few", "while", "along", "might", "close", "something", "seem", "next",
    "hard", "open", "example", "begin", "life", "always", "those", "both", "paper",
    "together", "got", "group", "often", "run", "important", "until", "children", "side",
    "feet", "car", "mile", "night", "walk", "white", "sea", "began", "grow", "took", "river",
    "four", "carry", "state", "once", "book", "hear", "stop", "without", "second", "later",
    "miss", "idea", "enough", "eat", "face", "watch", "far", "really", "almost", "let",
    "above", "girl", "sometimes", "mountain", "cut", "young", "talk", "soon", "list", "song",
    "being", "leave", "family", "body", "music", "color", "stand", "sun", "question", "fish",
    "area", "mark", "dog", "horse", "birds", "problem", "complete", "room", "knew", "since",
    "ever", "piece", "told", "usually", "friends", "easy", "heard", "order", "red", "door",
    "sure", "become", "top", "ship", "across", "today", "during", "short", "better", "best",
    "however", "low", "hours", "black", "products", "happened", "whole", "measure",
    "remember", "early", "waves", "reached", "listen", "wind", "rock", "space", "covered",
    "fast", "several", "hold", "himself", "toward", "five", "step", "morning", "passed",
    "true", "hundred", "against", "pattern", "table", "north", "slowly", "money", "map",
    "farm", "pulled", "draw", "voice", "seen", "cold", "cried", "plan", "notice", "south",
    "sing", "war", "ground", "fall", "king", "town", "unit", "figure", "certain", "field",
    "travel", "wood", "fire", "upon", "done", "road", "half", "ten", "fly", "gave", "box",
    "finally", "wait", "correct", "quickly", "person", "became", "shown", "minutes",
    "strong", "verb", "stars", "front", "feel", "fact", "inches", "street", "decided",
    "contain", "course", "surface", "produce", "building", "ocean", "class", "note",
    "nothing", "rest", "carefully", "scientists", "inside", "wheels", "stay", "green",
    "known", "island", "week", "less", "machine", "base", "ago", "stood", "plane", "system",
    "behind", "ran", "round", "boat", "game", "force", "brought", "understand", "warm",
    "common", "bring", "explain", "dry", "though", "language", "shape", "deep", "thousands",
    "yes", "clear", "equation", "yet", "government", "filled", "heat", "full", "hot", "check",
    "object", "am", "rule", "among", "noun", "power", "cannot", "able", "six", "size", "dark",
    "ball", "material", "special", "heavy", "fine", "pair", "circle", "include", "built",
];

/// About `min_words` words of built-in text.
pub fn builtin_text(min_words: usize) -> String {
    let mut rng = StdRng::seed_from_u64(0x6c6c_6d73_7572_6765);
    let mut out = String::with_capacity(min_words * 6);
    let mut words = 0;
    while words < min_words {
        let len = rng.random_range(6..20);
        for i in 0..len {
            let w = WORDS[rng.random_range(0..WORDS.len())];
            if words > 0 {
                out.push(' ');
            }
            if i == 0 {
                let mut chars = w.chars();
                if let Some(c) = chars.next() {
                    out.extend(c.to_uppercase());
                    out.push_str(chars.as_str());
                }
            } else {
                out.push_str(w);
            }
            if i + 1 < len && rng.random_range(0..10) == 0 {
                out.push(',');
            }
            words += 1;
        }
        out.push('.');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_text_is_fixed_and_sized() {
        let a = builtin_text(1000);
        assert_eq!(a, builtin_text(1000));
        let n = a.split_whitespace().count();
        assert!((1000..1020).contains(&n), "{n}");
        assert!(a.ends_with('.'));
    }
}
