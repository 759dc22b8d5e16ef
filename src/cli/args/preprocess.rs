//! `preprocess dataset` flags.

use crate::data::columns::ColumnMapper;
use crate::data::preprocess::{ShortPromptStrategy, preprocess};
use crate::exit_codes;
use clap::Args;
use std::path::PathBuf;

/// Flags of `llmsurge preprocess dataset`.
#[derive(Clone, Debug, Args)]
pub struct PreprocessArgs {
    /// The dataset: a file (.jsonl .json .csv .txt .parquet) or a folder in Hugging Face layout.
    pub input: PathBuf,
    /// Where to write it: .jsonl, .json or .csv (columns prompt, prompt_tokens_count,
    /// output_tokens_count).
    pub output: PathBuf,
    /// Tokenizer the lengths are exact under (as `benchmark run --processor`).
    #[arg(long, env = "LLMSURGE_PROCESSOR", default_value = crate::data::tokenizer::DEFAULT_PROCESSOR)]
    pub processor: String,
    /// Target lengths as a synthetic spec: prompt_tokens and output_tokens, with optional
    /// _stdev, _min, _max and random_seed (e.g. "prompt_tokens=512,output_tokens=128").
    #[arg(long, env = "LLMSURGE_CONFIG")]
    pub config: String,
    /// What to do with a prompt shorter than its target.
    #[arg(long, env = "LLMSURGE_SHORT_PROMPT_STRATEGY", value_enum, default_value_t = ShortPromptStrategy::Ignore)]
    pub short_prompt_strategy: ShortPromptStrategy,
    /// Column names as JSON (as `benchmark run --data-column-mapper`).
    #[arg(long, env = "LLMSURGE_DATA_COLUMN_MAPPER", value_name = "JSON")]
    pub data_column_mapper: Option<String>,
    /// Seed of the drawn lengths, unless the config sets random_seed.
    #[arg(long, env = "LLMSURGE_RANDOM_SEED", default_value_t = 42)]
    pub random_seed: u64,
}

impl PreprocessArgs {
    /// Runs the subcommand; returns the exit code.
    pub fn run(&self) -> i32 {
        let config = match crate::data::synthetic::parse_spec(&self.config, self.random_seed) {
            Ok(c) => c,
            Err(e) => return crate::cli::usage_error(&format!("--config: {e}")),
        };
        let columns = match &self.data_column_mapper {
            Some(raw) => match ColumnMapper::parse(raw) {
                Ok(c) => c,
                Err(e) => {
                    return crate::cli::usage_error(&format!("--data-column-mapper: {e}"));
                }
            },
            None => ColumnMapper::default(),
        };
        match preprocess(
            &self.input,
            &self.output,
            &self.processor,
            &config,
            self.short_prompt_strategy,
            &columns,
        ) {
            Ok(stats) => {
                eprintln!(
                    "{} rows read, {} written to {}, {} skipped",
                    stats.read,
                    stats.written,
                    self.output.display(),
                    stats.skipped
                );
                exit_codes::OK
            }
            Err(e) => crate::cli::usage_error(&e),
        }
    }
}
