//! `benchmark run` flags: the workload.

use crate::data::Oversample;
use clap::{Args, ValueEnum};

/// Row order of a finite dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SamplerArg {
    /// In file order.
    Sequential,
    /// A seeded shuffle, reshuffled every epoch.
    Shuffle,
}

/// The workload.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Data")]
pub struct DataArgs {
    /// A ready workload: a built-in scenario (chat, rag, prefix_cache, long_context) or a
    /// scenario file (.json/.yaml) whose keys are flag names with `_`. Flags and
    /// environment variables override it.
    #[arg(long, env = "LLMSURGE_SCENARIO", value_name = "NAME|PATH")]
    pub scenario: Option<String>,

    /// Workload: a synthetic spec ("prompt_tokens=256,output_tokens=128", JSON, or a
    /// .json/.yaml file; media keys: images, image_size, image_format, image_pool,
    /// audio_seconds; session keys: turns, think_time, session_id, system_tokens,
    /// system_shared), a data file (.jsonl .json .csv .txt .parquet; an `images` column of
    /// URLs or image files), a dataset folder in Hugging Face layout, or a Hugging Face
    /// dataset id (org/name).
    #[arg(
        long,
        env = "LLMSURGE_DATA",
        default_value = "prompt_tokens=256,output_tokens=128",
        help_heading = "Data"
    )]
    pub data: String,

    /// Dataset options as JSON: split, name (configuration), revision, output_tokens
    /// (max_tokens of rows that give none), first_turn; sessions (each conversation row
    /// a multi-turn session) with history (live or recorded), think_time, session_id,
    /// session_header.
    #[arg(long, env = "LLMSURGE_DATA_ARGS", value_name = "JSON")]
    pub data_args: Option<String>,

    /// Column names as JSON: prompt, system, messages, prompt_tokens_count,
    /// output_tokens_count (defaults: prompt/instruction/question/input/context/text,
    /// system/system_prompt/prefix, messages/conversations).
    #[arg(long, env = "LLMSURGE_DATA_COLUMN_MAPPER", value_name = "JSON")]
    pub data_column_mapper: Option<String>,

    /// Use the first N rows of the data (synthetic: N distinct prompts).
    #[arg(long, env = "LLMSURGE_DATA_SAMPLES", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub data_samples: Option<u64>,

    /// Row order of a finite dataset.
    #[arg(long, env = "LLMSURGE_DATA_SAMPLER", value_enum, default_value_t = SamplerArg::Sequential)]
    pub data_sampler: SamplerArg,

    /// Repeat a finite dataset when it runs out: auto (when --max-seconds is set or
    /// --max-requests exceeds the rows), always, never (the data ends the benchmark).
    #[arg(long, env = "LLMSURGE_DATA_OVERSAMPLE", value_enum, default_value_t = Oversample::Auto)]
    pub data_oversample: Oversample,

    /// Tokens per `hash_ids` block of a Mooncake trace (requests that share an id share
    /// exactly that block of text; the last block may be partial). Default 512.
    #[arg(long, env = "LLMSURGE_TRACE_BLOCK_SIZE", value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub trace_block_size: Option<u32>,

    /// Skip the first DURATION of a trace (trace time, before --time-scale): replay
    /// starts with the first request at or after it.
    #[arg(long, env = "LLMSURGE_TRACE_START", value_parser = crate::cli::values::parse_duration, value_name = "DURATION")]
    pub trace_start: Option<std::time::Duration>,

    /// Replay only the rows of this model (BurstGPT's `Model` column, e.g. ChatGPT).
    #[arg(long, env = "LLMSURGE_TRACE_MODEL", value_name = "NAME")]
    pub trace_model: Option<String>,

    /// Tokenizer prompt lengths are exact under: a built-in encoding (cl100k_base,
    /// o200k_base, ...), a tokenizer.json, a model folder, or a Hugging Face model id.
    #[arg(long, env = "LLMSURGE_PROCESSOR", default_value = crate::data::tokenizer::DEFAULT_PROCESSOR)]
    pub processor: String,

    /// Send `ignore_eos: true` so the server generates exactly the requested output tokens.
    /// When left at its default and the server refuses the field, it is dropped with a
    /// warning; when given, a refusal stops the run before any load.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_IGNORE_EOS", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub ignore_eos: bool,

    /// Also send vLLM's `min_tokens`, equal to each request's `max_tokens` (chat and
    /// completions), so the output cannot end early even where a gateway in front of
    /// the server drops `ignore_eos` but passes this field on. Off by default: a strict
    /// server refuses the field.
    #[arg(value_parser = clap::builder::BoolishValueParser::new(), long, env = "LLMSURGE_MIN_TOKENS", default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub min_tokens: bool,

    /// LoRA traffic split: "name=weight,..." (positive weights adding up to 1; within
    /// 0.01 of 1 they are normalised) or "name,name,..." for an even split. Each request
    /// names one of these models, picked per slot from --random-seed (the same whatever
    /// --workers is); reports break every metric down per model.
    #[arg(long, env = "LLMSURGE_LORA", value_name = "NAME[=WEIGHT],...")]
    pub lora: Option<String>,

    /// `--ignore-eos` (or its variable) was given, not defaulted: a server that refuses
    /// the field is then a usage error rather than a warning. Set from the matches.
    #[arg(skip)]
    pub ignore_eos_explicit: bool,
}
