//! Tokenizers (`--processor`): built-in tiktoken encodings, local Hugging Face
//! `tokenizer.json` files or model folders, and Hugging Face model ids.
//!
//! [`resolve_processor`] runs in the coordinator and turns the flag into a
//! [`TokenizerRef`] every process can load offline (a model id is downloaded once, into
//! the Hugging Face cache, before any worker starts). [`Tokenizer::load`] loads it; a
//! worker does so once, during its handshake.

use llmsurge_proto::TokenizerRef;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The tokenizer used when `--processor` is not given.
pub const DEFAULT_PROCESSOR: &str = "cl100k_base";

/// Resolves `--processor` into something every process can load offline.
pub fn resolve_processor(raw: &str) -> Result<TokenizerRef, String> {
    let raw = raw.trim();
    if super::encodings::names().any(|n| n == raw) {
        return Ok(TokenizerRef::Builtin(raw.to_string()));
    }
    let path = Path::new(raw);
    if path.is_file() {
        return Ok(TokenizerRef::File(absolute(path)));
    }
    if path.is_dir() {
        let file = path.join("tokenizer.json");
        if !file.is_file() {
            return Err(format!(
                "{raw}: the folder has no tokenizer.json (a Hugging Face model folder is expected)"
            ));
        }
        return Ok(TokenizerRef::File(absolute(&file)));
    }
    if super::hub::looks_like_repo_id(raw) {
        return super::hub::download_tokenizer(raw).map(TokenizerRef::File);
    }
    Err(format!(
        "{raw}: not a built-in encoding ({}), a tokenizer.json, a model folder, or a Hugging Face model id",
        builtin_names()
    ))
}

/// The built-in encodings' names, for messages.
fn builtin_names() -> String {
    super::encodings::names().collect::<Vec<_>>().join(", ")
}

/// `path` made absolute, so workers started elsewhere find it.
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

enum Inner {
    Tiktoken(Arc<tiktoken_rs::CoreBPE>),
    Hf(Box<tokenizers::Tokenizer>),
}

/// A loaded tokenizer. Counts never add special tokens (a prompt's own text only).
pub struct Tokenizer {
    inner: Inner,
    name: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Loads a tokenizer (tiktoken encodings take ~0.1 s: load once per process).
    pub fn load(r: &TokenizerRef) -> Result<Self, String> {
        let inner = match r {
            TokenizerRef::Builtin(name) => {
                let bpe = super::encodings::load(name).unwrap_or_else(|| {
                    Err(format!(
                        "unknown built-in encoding {name:?} (known: {})",
                        builtin_names()
                    ))
                })?;
                Inner::Tiktoken(Arc::new(bpe))
            }
            TokenizerRef::File(path) => {
                let t = tokenizers::Tokenizer::from_file(path).map_err(|e| {
                    format!("{}: not a usable tokenizer.json ({e})", path.display())
                })?;
                Inner::Hf(Box::new(t))
            }
        };
        Ok(Self {
            inner,
            name: r.to_string(),
        })
    }

    /// What was loaded: an encoding name or a file path.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Token ids of `text`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match &self.inner {
            Inner::Tiktoken(bpe) => bpe.encode_ordinary(text),
            Inner::Hf(t) => t
                .encode_fast(text, false)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_default(),
        }
    }

    /// Number of tokens in `text`.
    pub fn count(&self, text: &str) -> usize {
        self.encode(text).len()
    }

    /// Token ids of `text` with the byte range of each in `text`.
    pub fn encode_with_offsets(&self, text: &str) -> (Vec<u32>, Vec<(usize, usize)>) {
        match &self.inner {
            Inner::Tiktoken(bpe) => {
                let ids = bpe.encode_ordinary(text);
                let mut offsets = Vec::with_capacity(ids.len());
                let mut at = 0;
                for &id in &ids {
                    let len = bpe.decode_bytes(&[id]).map_or(0, |b| b.len());
                    offsets.push((at, at + len));
                    at += len;
                }
                (ids, offsets)
            }
            Inner::Hf(t) => match t.encode(text, false) {
                Ok(e) => (e.get_ids().to_vec(), e.get_offsets().to_vec()),
                Err(_) => (Vec::new(), Vec::new()),
            },
        }
    }

    /// The text of `ids` (invalid UTF-8 at a cut is replaced).
    pub fn decode(&self, ids: &[u32]) -> String {
        match &self.inner {
            Inner::Tiktoken(bpe) => bpe
                .decode_bytes(ids)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default(),
            Inner::Hf(t) => t.decode(ids, false).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processors_resolve_to_offline_references() {
        assert_eq!(
            resolve_processor("cl100k_base").expect("builtin"),
            TokenizerRef::Builtin("cl100k_base".into())
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let err = resolve_processor(&dir.path().display().to_string()).expect_err("no file");
        assert!(err.contains("tokenizer.json"), "{err}");
        let err = resolve_processor("nonsense").expect_err("unknown");
        assert!(
            err.contains("nonsense") && err.contains("cl100k_base"),
            "{err}"
        );
    }

    #[test]
    fn tiktoken_offsets_cover_the_text() {
        let t = Tokenizer::load(&TokenizerRef::Builtin("cl100k_base".into())).expect("load");
        let text = "Hello world, this is a test.";
        let (ids, offsets) = t.encode_with_offsets(text);
        assert_eq!(ids.len(), t.count(text));
        assert_eq!(offsets.last().map(|o| o.1), Some(text.len()));
        assert_eq!(t.decode(&ids), text);
    }
}
