//! Hugging Face datasets and tokenizers.
//!
//! A dataset is a folder of data files in the Hub's layout (`data/train-00000-of-00001.parquet`,
//! `train.jsonl`, `default/train/0000.parquet`, ...). [`split_files`] picks the files of a
//! split from a list of relative paths, so a local folder (tests, air-gapped hosts) and
//! a remote repository (listed and downloaded through `hf-hub`, with the `hub` feature)
//! resolve the same way.

use super::files::Format;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `--data-args`: which part of a dataset to use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetArgs {
    /// The split (default: `train` when there is one, else the only split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
    /// The configuration (subset) folder, for datasets that have several.
    #[serde(default, alias = "config", skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A revision (branch, tag or commit) of a Hub dataset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Output length of rows that give none (sent as `max_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    /// Conversations keep only their first user turn, and the recorded reply to it sets
    /// the output length (`vllm bench serve`'s ShareGPT sampling).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first_turn: bool,
    /// Each conversation row is a multi-turn session: turn k sends its k-th user message
    /// with the history before it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sessions: bool,
    /// Sessions: which assistant replies the history carries (default: the live ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<History>,
    /// Sessions: the pause between a turn's end and the next turn's send, as a synthetic
    /// spec's `think_time` (`2s`, `uniform:2s`, `exp:2s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time: Option<String>,
    /// Sessions, sticky routing: `user` sends the session id as the OpenAI `user` field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Sessions, sticky routing: the header that carries the session id on every turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_header: Option<String>,
}

/// Which assistant replies a session's history carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum History {
    /// The replies that actually streamed back.
    #[default]
    Live,
    /// The dataset's recorded replies.
    Recorded,
}

impl DatasetArgs {
    /// Parses the `--data-args` JSON object.
    pub fn parse(raw: &str) -> Result<Self, String> {
        serde_json::from_str(raw).map_err(|e| {
            format!(
                "not a JSON object with keys split, name, revision, output_tokens, first_turn, sessions, history, think_time, session_id, session_header: {e}"
            )
        })
    }
}

/// `org/name`: a Hub repository id (checked only when no such local path exists).
pub fn looks_like_repo_id(s: &str) -> bool {
    let mut parts = s.split('/');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
    };
    ok(parts.next())
        && ok(parts.next())
        && parts.next().is_none()
        && Format::of(Path::new(s)).is_none()
}

fn is_data_file(rel: &str) -> bool {
    let p = Path::new(rel);
    let hidden = p
        .components()
        .any(|c| c.as_os_str().to_string_lossy().starts_with('.'));
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    !hidden
        && name != "dataset_info.json"
        && name != "dataset_infos.json"
        && name != "readme.md"
        && Format::of(p).is_some_and(|f| f != Format::Txt)
}

/// The split a relative path belongs to: a folder named after it, or a file name
/// starting with it (`train-00000-of-00001.parquet`, `test.jsonl`).
fn split_of(rel: &str) -> Option<String> {
    const KNOWN: &[&str] = &["train", "test", "validation", "valid", "dev", "eval"];
    let p = Path::new(rel);
    let stem = p.file_name()?.to_string_lossy().to_string();
    let first = stem
        .split(['-', '.', '_'])
        .next()
        .unwrap_or_default()
        .to_string();
    if KNOWN.contains(&first.as_str()) {
        return Some(first);
    }
    p.parent()?
        .components()
        .rev()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .find(|c| KNOWN.contains(&c.as_str()))
}

/// The data files of the requested split and configuration among `files` (relative
/// paths), sorted. `what` names the dataset in errors.
pub fn split_files(
    what: &str,
    files: &[String],
    args: &DatasetArgs,
) -> Result<Vec<String>, String> {
    let mut data: Vec<&String> = files.iter().filter(|f| is_data_file(f)).collect();
    if let Some(config) = &args.name {
        data.retain(|f| {
            Path::new(f)
                .components()
                .any(|c| c.as_os_str() == config.as_str())
        });
        if data.is_empty() {
            return Err(format!(
                "{what}: no data files for configuration {config:?}"
            ));
        }
    }
    if data.is_empty() {
        return Err(format!(
            "{what}: no data files (.parquet, .jsonl, .json or .csv)"
        ));
    }
    let mut splits: Vec<String> = data.iter().filter_map(|f| split_of(f)).collect();
    splits.sort();
    splits.dedup();
    let wanted = match &args.split {
        Some(s) => Some(s.clone()),
        None if splits.iter().any(|s| s == "train") => Some("train".into()),
        None if splits.len() == 1 => splits.first().cloned(),
        None if splits.is_empty() => None,
        None => {
            return Err(format!(
                "{what}: several splits ({}); pick one with --data-args '{{\"split\": \"...\"}}'",
                splits.join(", ")
            ));
        }
    };
    let mut out: Vec<String> = match &wanted {
        None => data.into_iter().cloned().collect(),
        Some(split) => data
            .into_iter()
            .filter(|f| split_of(f).as_deref() == Some(split.as_str()))
            .cloned()
            .collect(),
    };
    if out.is_empty() {
        return Err(format!(
            "{what}: no data files for split {:?} (splits: {})",
            wanted.unwrap_or_default(),
            if splits.is_empty() {
                "none".into()
            } else {
                splits.join(", ")
            }
        ));
    }
    out.sort();
    Ok(out)
}

/// The data files of a local dataset folder in the Hub's layout.
pub fn local_dataset_files(dir: &Path, args: &DatasetArgs) -> Result<Vec<PathBuf>, String> {
    fn walk(root: &Path, dir: &Path, depth: u32, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && depth < 4 {
                walk(root, &path, depth + 1, out);
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, dir, 0, &mut files);
    let picked = split_files(&dir.display().to_string(), &files, args)?;
    Ok(picked.into_iter().map(|f| dir.join(f)).collect())
}

/// Downloads (or finds in the Hugging Face cache) the data files of Hub dataset `id`.
#[cfg(feature = "hub")]
pub fn remote_dataset_files(id: &str, args: &DatasetArgs) -> Result<Vec<PathBuf>, String> {
    use hf_hub::{Repo, RepoType};
    let offline = |e: &dyn std::fmt::Display| {
        format!(
            "{id}: cannot fetch this dataset from Hugging Face ({e}); offline? download it and pass its folder"
        )
    };
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_progress(false)
        .build()
        .map_err(|e| offline(&e))?;
    let repo = api.repo(Repo::with_revision(
        id.to_string(),
        RepoType::Dataset,
        args.revision.clone().unwrap_or_else(|| "main".into()),
    ));
    let info = repo.info().map_err(|e| offline(&e))?;
    let files: Vec<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
    let picked = split_files(id, &files, args)?;
    picked
        .iter()
        .map(|f| repo.get(f).map_err(|e| offline(&e)))
        .collect()
}

/// Without the `hub` feature, Hub datasets cannot be fetched.
#[cfg(not(feature = "hub"))]
pub fn remote_dataset_files(id: &str, _args: &DatasetArgs) -> Result<Vec<PathBuf>, String> {
    Err(format!(
        "{id}: no such file or folder (this llmsurge was built without the `hub` feature, so it cannot fetch Hugging Face datasets)"
    ))
}

/// Downloads (or finds in the Hugging Face cache) the `tokenizer.json` of model `id`.
#[cfg(feature = "hub")]
pub fn download_tokenizer(id: &str) -> Result<PathBuf, String> {
    let fail = |e: &dyn std::fmt::Display| {
        format!(
            "{id}: cannot fetch its tokenizer from Hugging Face ({e}); offline? pass a local tokenizer.json or model folder"
        )
    };
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_progress(false)
        .build()
        .map_err(|e| fail(&e))?;
    api.model(id.to_string())
        .get("tokenizer.json")
        .map_err(|e| fail(&e))
}

/// Without the `hub` feature, Hub tokenizers cannot be fetched.
#[cfg(not(feature = "hub"))]
pub fn download_tokenizer(id: &str) -> Result<PathBuf, String> {
    Err(format!(
        "{id}: not a local tokenizer (this llmsurge was built without the `hub` feature, so it cannot fetch Hugging Face tokenizers)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn splits_are_found_in_hub_layouts() {
        let layout = files(&[
            "README.md",
            ".gitattributes",
            "data/train-00000-of-00002.parquet",
            "data/train-00001-of-00002.parquet",
            "data/test-00000-of-00001.parquet",
        ]);
        let a = DatasetArgs::default();
        assert_eq!(
            split_files("d", &layout, &a).expect("train"),
            files(&[
                "data/train-00000-of-00002.parquet",
                "data/train-00001-of-00002.parquet"
            ])
        );
        let test = DatasetArgs {
            split: Some("test".into()),
            ..a.clone()
        };
        assert_eq!(split_files("d", &layout, &test).expect("test").len(), 1);
        let nope = DatasetArgs {
            split: Some("dev".into()),
            ..a.clone()
        };
        let e = split_files("d", &layout, &nope).expect_err("none");
        assert!(e.contains("test, train"), "{e}");
        let configs = files(&["en/train/0000.parquet", "fr/train/0000.parquet"]);
        let fr = DatasetArgs {
            name: Some("fr".into()),
            ..a.clone()
        };
        assert_eq!(
            split_files("d", &configs, &fr).expect("fr"),
            files(&["fr/train/0000.parquet"])
        );
        let two = files(&["test.jsonl", "validation.jsonl"]);
        assert!(
            split_files("d", &two, &a)
                .expect_err("ambiguous")
                .contains("several splits")
        );
        assert_eq!(
            split_files("d", &files(&["rows.jsonl"]), &a)
                .expect("unsplit")
                .len(),
            1
        );
    }

    #[test]
    fn repo_ids_are_recognised() {
        assert!(looks_like_repo_id("org/name"));
        assert!(looks_like_repo_id("meta-llama/Llama-3.1-8B"));
        assert!(!looks_like_repo_id("data.jsonl"));
        assert!(!looks_like_repo_id("dir/data.jsonl"));
        assert!(!looks_like_repo_id("a/b/c"));
        assert!(!looks_like_repo_id("prompt_tokens=5"));
    }
}
