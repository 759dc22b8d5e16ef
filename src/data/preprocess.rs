//! `llmsurge preprocess dataset`: rewrites a dataset so every prompt has a requested
//! token length (drawn per row like a synthetic spec's), with a per-row output length.
//! Long prompts are cut at the exact token; short ones are skipped, padded, joined with
//! the rows after them, or refused, as the strategy says.

use super::columns::{ColumnMapper, RowMapper};
use super::exact::fit_exact;
use super::files;
use super::hub::{self, DatasetArgs};
use super::synthetic::draw_len;
use super::table::RowPrompt;
use super::tokenizer::{self, Tokenizer};
use llmsurge_proto::SyntheticSpec;
use llmsurge_proto::seed::derive_seed;
use serde::Serialize;
use std::path::Path;

/// What to do with a prompt shorter than its target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ShortPromptStrategy {
    /// Leave the row out.
    #[default]
    Ignore,
    /// Append the prompts of the rows after it (which are then used up).
    Concatenate,
    /// Append filler words.
    Pad,
    /// Stop with an error naming the row.
    Error,
}

/// What a preprocessing run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PreprocessStats {
    /// Rows read.
    pub read: u64,
    /// Rows written.
    pub written: u64,
    /// Short rows left out (or used up by concatenation, or left over at the end).
    pub skipped: u64,
}

#[derive(Serialize)]
struct OutRow {
    prompt: String,
    prompt_tokens_count: u32,
    output_tokens_count: u32,
}

/// Rewrites `input` (a file or a dataset folder) into `output` (`.jsonl`, `.json` or
/// `.csv`); lengths come from `config` (its `prompt_tokens*` and `output_tokens*`
/// keys and its seed).
pub fn preprocess(
    input: &Path,
    output: &Path,
    processor: &str,
    config: &SyntheticSpec,
    strategy: ShortPromptStrategy,
    columns: &ColumnMapper,
) -> Result<PreprocessStats, String> {
    let out_format = files::Format::of(output)
        .filter(|f| {
            matches!(
                f,
                files::Format::Jsonl | files::Format::Json | files::Format::Csv
            )
        })
        .ok_or_else(|| format!("{}: write .jsonl, .json or .csv", output.display()))?;
    let tok = Tokenizer::load(
        &tokenizer::resolve_processor(processor).map_err(|e| format!("--processor {e}"))?,
    )
    .map_err(|e| format!("--processor {e}"))?;
    let inputs = if input.is_dir() {
        hub::local_dataset_files(input, &DatasetArgs::default())?
    } else {
        vec![input.to_path_buf()]
    };
    let mapper = RowMapper {
        columns,
        tok: &tok,
        default_output_tokens: None,
        first_turn: false,
        sessions: None,
    };
    let mut prompts = Vec::new();
    for file in &inputs {
        let name = file.display().to_string();
        for rec in files::read_records(file, None)? {
            let row = mapper.row(&name, &rec)?;
            let text = match row.prompt {
                RowPrompt::Text(t) => t,
                RowPrompt::Messages(m) => m
                    .iter()
                    .map(|m| m.content.as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
            };
            prompts.push((format!("{name} {}", rec.at), text));
        }
    }
    let words: Vec<String> = super::corpus::WORDS
        .iter()
        .filter(|w| tok.count(&format!(" {w}")) == 1)
        .map(|w| w.to_string())
        .collect();
    if words.is_empty() {
        return Err(format!("{}: no single-token filler words", tok.name()));
    }
    let c = config;
    let mut stats = PreprocessStats::default();
    let mut out = Vec::new();
    let mut next = 0;
    while next < prompts.len() {
        let (at, text) = &prompts[next];
        next += 1;
        stats.read += 1;
        let i = out.len() as u64 + stats.skipped;
        let target = draw_len(
            derive_seed(c.random_seed, "prompt-len", i),
            c.prompt_tokens,
            c.prompt_tokens_stdev,
            c.prompt_tokens_min,
            c.prompt_tokens_max,
        ) as usize;
        let output_tokens = draw_len(
            derive_seed(c.random_seed, "output-len", i),
            c.output_tokens,
            c.output_tokens_stdev,
            c.output_tokens_min,
            c.output_tokens_max,
        );
        let mut text = text.clone();
        let mut have = tok.count(&text);
        if have < target {
            match strategy {
                ShortPromptStrategy::Ignore => {
                    stats.skipped += 1;
                    continue;
                }
                ShortPromptStrategy::Error => {
                    return Err(format!(
                        "{at}: the prompt has {have} tokens, fewer than the {target} asked (--short-prompt-strategy error)"
                    ));
                }
                ShortPromptStrategy::Pad => {}
                ShortPromptStrategy::Concatenate => {
                    while have < target && next < prompts.len() {
                        text.push(' ');
                        text.push_str(&prompts[next].1);
                        next += 1;
                        stats.read += 1;
                        have = tok.count(&text);
                    }
                    if have < target {
                        stats.skipped += 1;
                        continue;
                    }
                }
            }
        }
        fit_exact(&tok, &mut text, target, &words).map_err(|e| format!("{at}: {e}"))?;
        out.push(OutRow {
            prompt: text,
            prompt_tokens_count: target as u32,
            output_tokens_count: output_tokens,
        });
    }
    stats.written = out.len() as u64;
    write_rows(output, out_format, &out)?;
    Ok(stats)
}

fn write_rows(path: &Path, format: files::Format, rows: &[OutRow]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let bytes = match format {
        files::Format::Json => serde_json::to_vec_pretty(rows).map_err(|e| err(&e))?,
        files::Format::Csv => {
            let mut w = csv::Writer::from_writer(Vec::new());
            for r in rows {
                w.serialize(r).map_err(|e| err(&e))?;
            }
            w.into_inner().map_err(|e| err(&e))?
        }
        _ => {
            let mut out = Vec::new();
            for r in rows {
                serde_json::to_writer(&mut out, r).map_err(|e| err(&e))?;
                out.push(b'\n');
            }
            out
        }
    };
    std::fs::write(path, bytes).map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(p: u32) -> SyntheticSpec {
        super::super::synthetic::parse_spec(&format!("prompt_tokens={p},output_tokens=7"), 1)
            .expect("spec")
    }

    #[test]
    fn every_strategy_rewrites_to_exact_lengths() {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = dir.path().join("in.jsonl");
        let long = "word ".repeat(40);
        std::fs::write(
            &input,
            format!("{{\"prompt\":\"{long}\"}}\n{{\"prompt\":\"short one\"}}\n{{\"prompt\":\"tiny\"}}\n{{\"prompt\":\"{long}\"}}\n"),
        )
        .expect("write");
        let tok = Tokenizer::load(&llmsurge_proto::TokenizerRef::Builtin("cl100k_base".into()))
            .expect("tok");
        let cols = ColumnMapper::default();
        for (strategy, written) in [
            (ShortPromptStrategy::Ignore, 2),
            (ShortPromptStrategy::Pad, 4),
            (ShortPromptStrategy::Concatenate, 2),
        ] {
            let out = dir.path().join("out.jsonl");
            let stats = preprocess(&input, &out, "cl100k_base", &spec(20), strategy, &cols)
                .expect("preprocess");
            assert_eq!(stats.written, written, "{strategy:?}");
            let rows = files::read_records(&out, None).expect("read back");
            assert_eq!(rows.len() as u64, written);
            for r in rows {
                let p = r.fields["prompt"].as_str().expect("prompt");
                assert_eq!(tok.count(p), 20, "{strategy:?}: {p:?}");
                assert_eq!(r.fields["output_tokens_count"], 7);
            }
        }
        let e = preprocess(
            &input,
            &dir.path().join("o.csv"),
            "cl100k_base",
            &spec(20),
            ShortPromptStrategy::Error,
            &cols,
        )
        .expect_err("short");
        assert!(e.contains("in.jsonl line 2"), "{e}");
    }
}
