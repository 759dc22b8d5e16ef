//! The data pipeline: workload specs, tokenizers, files and datasets, and the request
//! sources workers draw from.
//!
//! Three steps. [`DataPlan::parse`] reads the flags (no I/O beyond telling a path from
//! a spec). [`prepare`] runs in the coordinator before any worker starts: it resolves
//! the tokenizer (downloading a Hugging Face one if asked), checks that synthetic
//! prompts can be built, or loads, validates and measures every row of a file or
//! dataset and writes them to a read-only table file; every input error stops the run
//! here, with exit code 2. Each worker then builds its own source with
//! [`source_factory`] during its handshake: synthetic prompts are generated from (seed,
//! slot), table rows are read once from the file; no request waits on the coordinator.
//! A tokenizer is loaded only where the data needs one: the default synthetic prompts
//! (the built-in text under `cl100k_base`) are cut from precomputed material.

pub mod agent_trace;
pub mod columns;
pub mod corpus;
pub mod encodings;
pub mod exact;
pub mod files;
pub mod hub;
pub mod lora;
pub mod media;
pub mod preprocess;
pub mod sampler;
pub mod synthetic;
pub mod table;
pub mod token_ids;
pub mod tokenizer;
pub mod trace;

use columns::{ColumnMapper, RowMapper};
use hub::DatasetArgs;
use llmsurge_proto::{
    DataSpec, RequestFormat, SamplerKind, Sampling, SyntheticSpec, TableSpec, WorkerConfig,
};
use llmsurge_worker::RequestSource;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use table::TableFileGuard;

/// When a finite dataset repeats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Oversample {
    /// Repeat when the run asks for more: a `--max-seconds` limit, or `--max-requests`
    /// above the number of rows. Otherwise one pass, and the data ends the benchmark.
    #[default]
    Auto,
    /// Always repeat (new epoch, reshuffled with `--data-sampler shuffle`).
    Always,
    /// Never repeat: the benchmark ends when the rows run out.
    Never,
}

/// Where the workload comes from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[expect(
    clippy::large_enum_variant,
    reason = "one per run: boxing the spec would only add noise to every match"
)]
pub enum DataSource {
    /// Synthetic prompts.
    Synthetic {
        /// The spec (its tokenizer and sampling are shown under `processor` and
        /// `resolved`, once prepared).
        #[serde(serialize_with = "spec_keys")]
        spec: SyntheticSpec,
    },
    /// A file of prompts.
    File {
        /// The file.
        path: PathBuf,
    },
    /// A local dataset folder in the Hugging Face layout.
    Folder {
        /// The folder.
        path: PathBuf,
    },
    /// A Hugging Face Hub dataset id.
    Hub {
        /// `org/name`.
        id: String,
    },
    /// A timestamped trace (recognised by its keys or header, or any JSONL under
    /// `--profile replay`).
    Trace {
        /// The file.
        path: PathBuf,
        /// Its format.
        format: trace::TraceFormat,
    },
    /// Agent traces (OpenTelemetry, the OTLP JSON export or one trace per line),
    /// recognised by their content: replayed as graphs of calls.
    AgentTrace {
        /// The file.
        path: PathBuf,
    },
}

/// The trace flags.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TracePlan {
    /// `--trace-block-size`.
    pub block_size: u32,
    /// `--trace-start`.
    pub start: Duration,
    /// `--trace-model`.
    pub model: Option<String>,
}

/// A spec as the user wrote it: its keys only.
fn spec_keys<S: serde::Serializer>(spec: &SyntheticSpec, s: S) -> Result<S::Ok, S::Error> {
    let mut v = serde_json::to_value(spec).map_err(serde::ser::Error::custom)?;
    if let Some(m) = v.as_object_mut() {
        m.retain(|k, _| synthetic::SPEC_KEYS.contains(&k.as_str()));
        // The media keys as written (`image_size=WxH`), only when used.
        let media = &spec.media;
        if media.images > 0 {
            m.insert("images".into(), media.images.into());
            m.insert(
                "image_size".into(),
                format!("{}x{}", media.image_width, media.image_height).into(),
            );
            m.insert(
                "image_format".into(),
                serde_json::to_value(media.image_format).unwrap_or_default(),
            );
            m.insert(
                "image_pool".into(),
                media.image_pool.max(media.images).into(),
            );
        }
        if media.audio_seconds > 0.0 {
            m.insert("audio_seconds".into(), media.audio_seconds.into());
        }
    }
    v.serialize(s)
}

/// The data flags, parsed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DataPlan {
    /// The workload.
    pub source: DataSource,
    /// `--processor` as given.
    pub processor: String,
    /// `--data-args`.
    pub dataset_args: DatasetArgs,
    /// `--data-column-mapper`.
    pub column_mapper: ColumnMapper,
    /// `--data-samples`.
    pub samples: Option<u64>,
    /// `--data-sampler`.
    pub sampler: SamplerKind,
    /// `--data-oversample`.
    pub oversample: Oversample,
    /// Seed of sampling and generation.
    pub seed: u64,
    /// `--lora`: the model names requests are split over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<llmsurge_proto::LoraSpec>,
    /// How a trace is read (ignored by other data).
    pub trace: TracePlan,
}

impl DataPlan {
    /// Whether the data makes multi-turn sessions (a synthetic spec with `turns=`, or
    /// conversation rows with `--data-args '{"sessions": true}'`).
    pub fn has_sessions(&self) -> bool {
        match &self.source {
            DataSource::Synthetic { spec } => spec.turns > 0,
            DataSource::File { .. } | DataSource::Folder { .. } | DataSource::Hub { .. } => {
                self.dataset_args.sessions
            }
            DataSource::Trace { .. } => false,
            // Each trace is a graph of calls, run like a session by one worker.
            DataSource::AgentTrace { .. } => true,
        }
    }

    /// Whether the data alone ends a benchmark (a finite dataset that cannot repeat
    /// without a limit asking for more).
    pub fn is_finite(&self) -> bool {
        if self.oversample == Oversample::Always {
            return false;
        }
        match &self.source {
            DataSource::Synthetic { spec } => self.samples.or(spec.samples).is_some(),
            _ => true,
        }
    }

    /// Parses `--data`; `what` is a synthetic spec, a spec file, a data file, a dataset
    /// folder, or a Hub dataset id. A synthetic spec is read for requests of `format`.
    pub fn parse_source(raw: &str, seed: u64, format: RequestFormat) -> Result<DataSource, String> {
        let t = raw.trim();
        if synthetic::is_inline_spec(t) {
            return Ok(DataSource::Synthetic {
                spec: synthetic::parse_spec_for(t, seed, format)?,
            });
        }
        let path = Path::new(t);
        if path.is_dir() {
            return Ok(DataSource::Folder {
                path: tokenizer::absolute(path),
            });
        }
        if path.is_file() {
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            let is_spec = match ext {
                "yaml" | "yml" => true,
                "json" => std::fs::read_to_string(path)
                    .ok()
                    .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                    .is_some_and(|v| synthetic::is_spec_value(&v)),
                _ => false,
            };
            if is_spec {
                return Ok(DataSource::Synthetic {
                    spec: synthetic::parse_spec_file(path, seed, format)?,
                });
            }
            if agent_trace::replay::is_agent_trace(path) {
                return Ok(DataSource::AgentTrace {
                    path: tokenizer::absolute(path),
                });
            }
            if let Some(format) = trace::detect(path) {
                return Ok(DataSource::Trace {
                    path: tokenizer::absolute(path),
                    format,
                });
            }
            if files::Format::of(path).is_none() {
                return Err(format!(
                    "{t}: unknown file type (expected .jsonl, .json, .csv, .txt, .parquet, or a .json/.yaml synthetic spec)"
                ));
            }
            return Ok(DataSource::File {
                path: tokenizer::absolute(path),
            });
        }
        if hub::looks_like_repo_id(t) {
            return Ok(DataSource::Hub { id: t.to_string() });
        }
        Err(format!(
            "{t:?} is not a synthetic spec (e.g. prompt_tokens=256,output_tokens=128), an existing file or folder, or a Hugging Face dataset id (org/name)"
        ))
    }
}

/// What preparing the data found, recorded in the report's args.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DataSummary {
    /// `synthetic`, `file`, `folder` or `hub`.
    pub kind: &'static str,
    /// The tokenizer prompt lengths are measured with.
    pub tokenizer: String,
    /// Rows (or distinct synthetic samples), when finite.
    pub rows: Option<u64>,
    /// Conversation rows run as sessions: their turns (requests) in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<u64>,
    /// Whether the rows repeat when they run out.
    pub oversample: bool,
    /// The files read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<PathBuf>,
    /// Synthetic prompts are re-encoded one by one (the tokenizer needs it; slower).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub repaired_prompts: bool,
    /// What the trace held, for a trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<trace::TraceSummary>,
    /// What the agent traces held, for agent traces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_traces: Option<agent_trace::replay::AgentTraceSummary>,
    /// The sizes of a synthetic spec's images and audio (never their bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<media::MediaSummary>,
}

/// Data ready for the workers; keeps the table file alive while it lives.
#[derive(Debug)]
pub struct PreparedData {
    /// What workers get.
    pub spec: DataSpec,
    /// For the report.
    pub summary: DataSummary,
    /// The table file, removed on drop.
    pub table: Option<TableFileGuard>,
}

/// Whether a dataset of `rows` repeats under these limits.
pub fn decide_oversample(
    oversample: Oversample,
    rows: u64,
    max_seconds: Option<Duration>,
    max_requests: Option<u64>,
) -> bool {
    match oversample {
        Oversample::Always => true,
        Oversample::Never => false,
        Oversample::Auto => max_seconds.is_some() || max_requests.is_some_and(|n| n > rows),
    }
}

/// Resolves the tokenizer and loads, validates and prepares the data (see the module
/// docs). `write` is false for `--dry-run`: nothing is written.
pub fn prepare(
    plan: &DataPlan,
    max_seconds: Option<Duration>,
    max_requests: Option<u64>,
    write: bool,
) -> Result<PreparedData, String> {
    let tok_ref =
        tokenizer::resolve_processor(&plan.processor).map_err(|e| format!("--processor {e}"))?;
    // Loaded only when the data needs it: the default synthetic prompts come from
    // precomputed material (~0.1 s saved per process, see `exact`).
    let load_tok = || tokenizer::Tokenizer::load(&tok_ref).map_err(|e| format!("--processor {e}"));
    let sampling = |rows: u64| Sampling {
        sampler: plan.sampler,
        seed: plan.seed,
        oversample: decide_oversample(plan.oversample, rows, max_seconds, max_requests),
    };
    let (kind, files) = match &plan.source {
        DataSource::Synthetic { spec } => {
            let mut spec = spec.clone();
            spec.tokenizer = tok_ref.clone();
            if plan.samples.is_some() {
                spec.samples = plan.samples;
            }
            if let Some(n) = spec.samples {
                spec.sampling = sampling(n);
            }
            // Build the generator once here: a tokenizer or source text that cannot give
            // exact prompts fails now, before any worker starts.
            let source = match synthetic::SyntheticSource::precomputed(&spec) {
                Some(s) => s,
                None => synthetic::SyntheticSource::with_tokenizer(spec.clone(), load_tok()?)
                    .map_err(|e| format!("--data: {e}"))?,
            };
            let summary = DataSummary {
                kind: "synthetic",
                tokenizer: tok_ref.to_string(),
                rows: spec.samples,
                turns: None,
                oversample: spec.samples.is_some() && spec.sampling.oversample,
                files: spec.source.iter().cloned().collect(),
                repaired_prompts: source.builder().repairs(),
                trace: None,
                agent_traces: None,
                media: media::MediaSummary::of(&spec.media, spec.random_seed)
                    .map_err(|e| format!("--data: {e}"))?,
            };
            return Ok(PreparedData {
                spec: DataSpec::Synthetic(spec),
                summary,
                table: None,
            });
        }
        DataSource::Trace { path, format } => {
            return prepare_trace(plan, path, *format, &tok_ref, max_requests, write);
        }
        DataSource::AgentTrace { path } => {
            return prepare_agent_traces(plan, path, &tok_ref, write);
        }
        DataSource::File { path } => ("file", vec![path.clone()]),
        DataSource::Folder { path } => (
            "folder",
            hub::local_dataset_files(path, &plan.dataset_args)
                .map_err(|e| format!("--data {e}"))?,
        ),
        DataSource::Hub { id } => (
            "hub",
            hub::remote_dataset_files(id, &plan.dataset_args).map_err(|e| format!("--data {e}"))?,
        ),
    };
    let tok = load_tok()?;
    let args = &plan.dataset_args;
    let history = args.history.unwrap_or_default();
    let mapper = RowMapper {
        columns: &plan.column_mapper,
        tok: &tok,
        default_output_tokens: args.output_tokens,
        first_turn: args.first_turn,
        sessions: args.sessions.then_some(history),
    };
    let mut rows = Vec::new();
    for file in &files {
        let left = plan.samples.map(|n| n.saturating_sub(rows.len() as u64));
        if left == Some(0) {
            break;
        }
        let records = files::read_records(file, left).map_err(|e| format!("--data {e}"))?;
        let name = file.display().to_string();
        for rec in &records {
            rows.push(mapper.row(&name, rec).map_err(|e| format!("--data {e}"))?);
        }
    }
    if rows.is_empty() {
        return Err(format!(
            "--data {}: no rows",
            files
                .first()
                .map_or_else(String::new, |f| f.display().to_string())
        ));
    }
    let n = rows.len() as u64;
    let sessions = if args.sessions {
        if history == hub::History::Recorded
            && !rows.iter().any(|r| {
                r.session
                    .as_ref()
                    .is_some_and(|s| s.turns.iter().any(|t| t.reply.is_some()))
            })
        {
            return Err(format!(
                "--data-args history=recorded: {} has no recorded assistant replies to resend",
                files
                    .first()
                    .map_or_else(String::new, |f| f.display().to_string())
            ));
        }
        Some(table::TableSessions {
            history,
            think_time: args
                .think_time
                .as_deref()
                .map(synthetic::parse_think_time)
                .transpose()
                .map_err(|e| format!("--data-args {e}"))?,
            seed: plan.seed,
            session_user: args.session_id.is_some(),
            session_header: args.session_header.is_some(),
        })
    } else {
        None
    };
    let table = if write {
        Some(table::write_table(&rows, sessions.as_ref())?)
    } else {
        None
    };
    // A session is a row but sends one request per turn: `--max-requests` asks for more
    // than one pass only beyond every turn of every row.
    let requests_per_pass = match &sessions {
        Some(_) => rows
            .iter()
            .map(|r| r.session.as_ref().map_or(1, |s| s.turns.len() as u64))
            .sum(),
        None => n,
    };
    let sampling = Sampling {
        oversample: decide_oversample(
            plan.oversample,
            requests_per_pass,
            max_seconds,
            max_requests,
        ),
        ..sampling(n)
    };
    Ok(PreparedData {
        spec: DataSpec::Table(TableSpec {
            path: table
                .as_ref()
                .map_or_else(PathBuf::new, |t| t.path().to_path_buf()),
            rows: n,
            sampling,
            requests: sessions.is_some().then_some(requests_per_pass),
            // Checked by the command line (a header name, lowercased as sent).
            session_header: args
                .session_header
                .as_deref()
                .filter(|_| sessions.is_some())
                .and_then(|h| synthetic::session_header_name(h).ok()),
        }),
        summary: DataSummary {
            kind,
            tokenizer: tok_ref.to_string(),
            rows: Some(n),
            turns: sessions.is_some().then_some(requests_per_pass),
            oversample: sampling.oversample,
            files,
            repaired_prompts: false,
            trace: None,
            agent_traces: None,
            media: None,
        },
        table,
    })
}

/// Reads, checks and writes a trace for the workers.
fn prepare_trace(
    plan: &DataPlan,
    path: &Path,
    format: trace::TraceFormat,
    tok_ref: &llmsurge_proto::TokenizerRef,
    max_requests: Option<u64>,
    write: bool,
) -> Result<PreparedData, String> {
    let opts = trace::TraceOptions {
        start: plan.trace.start,
        model: plan.trace.model.clone(),
        limit: max_requests,
    };
    let rows = if format == trace::TraceFormat::Generic {
        let tok = tokenizer::Tokenizer::load(tok_ref).map_err(|e| format!("--processor {e}"))?;
        let mapper = RowMapper {
            columns: &plan.column_mapper,
            tok: &tok,
            default_output_tokens: plan.dataset_args.output_tokens,
            first_turn: plan.dataset_args.first_turn,
            sessions: None,
        };
        trace::read_trace(path, format, &opts, Some(&mapper))
    } else {
        trace::read_trace(path, format, &opts, None)
    }
    .map_err(|e| format!("--data {e}"))?;
    if rows.is_empty() {
        return Err(format!(
            "--data {}: no requests in the trace{}",
            path.display(),
            if plan.trace.start.is_zero() && plan.trace.model.is_none() {
                ""
            } else {
                " after --trace-start / --trace-model"
            }
        ));
    }
    // The block builder is made now, so a tokenizer that cannot give exact blocks fails
    // before any worker starts.
    let repaired_prompts = if rows.iter().any(|r| r.prompt.is_none()) {
        trace::block_builder(tok_ref, plan.trace.block_size)
            .map_err(|e| format!("--data {e}"))?
            .repairs()
    } else {
        false
    };
    let n = rows.len() as u64;
    let table = if write {
        Some(trace::write_trace_table(&rows)?)
    } else {
        None
    };
    let summary = trace::TraceSummary {
        format,
        rows: n,
        span_s: rows.last().map_or(0.0, |r| r.at_ns as f64 / 1e9),
        mean_rate: trace::mean_rate(&rows),
    };
    Ok(PreparedData {
        spec: DataSpec::Trace(llmsurge_proto::TraceSpec {
            path: table
                .as_ref()
                .map_or_else(PathBuf::new, |t| t.path().to_path_buf()),
            rows: n,
            block_size: plan.trace.block_size,
            seed: plan.seed,
            tokenizer: tok_ref.clone(),
        }),
        summary: DataSummary {
            kind: "trace",
            tokenizer: tok_ref.to_string(),
            rows: Some(n),
            turns: None,
            oversample: false,
            files: vec![path.to_path_buf()],
            repaired_prompts,
            trace: Some(summary),
            agent_traces: None,
            media: None,
        },
        table,
    })
}

/// Reads, checks and writes agent traces for the workers.
fn prepare_agent_traces(
    plan: &DataPlan,
    path: &Path,
    tok_ref: &llmsurge_proto::TokenizerRef,
    write: bool,
) -> Result<PreparedData, String> {
    let (summary, graphs) = agent_trace::replay::read_graphs(path)
        .unwrap_or_else(|| Err(format!("{}: not an agent trace", path.display())))
        .map_err(|e| format!("--data {e}"))?;
    // The text builder is made now, so a tokenizer that cannot give exact prompts fails
    // before any worker starts.
    let repaired_prompts = agent_trace::replay::builder(tok_ref)
        .map_err(|e| format!("--data {e}"))?
        .repairs();
    let table = if write {
        Some(agent_trace::replay::write_table(&graphs)?)
    } else {
        None
    };
    Ok(PreparedData {
        spec: DataSpec::AgentTrace(llmsurge_proto::AgentTraceSpec {
            path: table
                .as_ref()
                .map_or_else(PathBuf::new, |t| t.path().to_path_buf()),
            traces: summary.traces,
            calls: summary.calls,
            seed: plan.seed,
            tokenizer: tok_ref.clone(),
            // Decided with the schedule (`replay::plan_passes`).
            repeat: false,
        }),
        summary: DataSummary {
            kind: "agent_trace",
            tokenizer: tok_ref.to_string(),
            rows: Some(summary.traces),
            turns: Some(summary.calls),
            oversample: false,
            files: vec![path.to_path_buf()],
            repaired_prompts,
            trace: None,
            agent_traces: Some(summary),
            media: None,
        },
        table,
    })
}

/// Builds a worker's source from its configuration (the worker's [`SourceFactory`]).
///
/// [`SourceFactory`]: llmsurge_worker::SourceFactory
pub fn source_factory(cfg: &WorkerConfig) -> Result<Box<dyn RequestSource>, String> {
    let source: Box<dyn RequestSource> = match &cfg.data {
        DataSpec::Synthetic(spec) => Box::new(synthetic::SyntheticSource::new(spec.clone())?),
        DataSpec::Table(spec) => Box::new(table::TableSource::open(spec)?),
        DataSpec::Trace(spec) => Box::new(trace::TraceSource::open(spec)?),
        DataSpec::AgentTrace(spec) => Box::new(agent_trace::replay::AgentTraceSource::open(
            spec,
            &cfg.schedule,
        )?),
    };
    let source: Box<dyn RequestSource> = match &cfg.lora {
        Some(lora) => Box::new(lora::LoraSource::new(source, lora, cfg.seed)),
        None => source,
    };
    Ok(match &cfg.behaviour.prompt_token_ids {
        Some(tok) => Box::new(token_ids::TokenIdsSource::new(
            source,
            tokenizer::Tokenizer::load(tok).map_err(|e| format!("--prompt-token-ids: {e}"))?,
        )),
        None => source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversampling_follows_the_limits() {
        let s = Some(Duration::from_secs(5));
        assert!(decide_oversample(Oversample::Auto, 10, s, None));
        assert!(decide_oversample(Oversample::Auto, 10, None, Some(11)));
        assert!(!decide_oversample(Oversample::Auto, 10, None, Some(10)));
        assert!(!decide_oversample(Oversample::Auto, 10, None, None));
        assert!(decide_oversample(Oversample::Always, 10, None, None));
        assert!(!decide_oversample(Oversample::Never, 10, s, Some(99)));
    }

    #[test]
    fn data_sources_are_told_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("p.jsonl");
        std::fs::write(&f, "{\"prompt\":\"x\"}\n").expect("w");
        let spec = dir.path().join("s.json");
        std::fs::write(&spec, r#"{"prompt_tokens": 4, "output_tokens": 2}"#).expect("w");
        let list = dir.path().join("l.json");
        std::fs::write(&list, r#"[{"prompt": "x"}]"#).expect("w");
        let p = |s: &Path| {
            DataPlan::parse_source(&s.display().to_string(), 1, RequestFormat::Chat).expect("parse")
        };
        assert!(matches!(p(&f), DataSource::File { .. }));
        assert!(matches!(p(&spec), DataSource::Synthetic { .. }));
        assert!(matches!(p(&list), DataSource::File { .. }));
        assert!(matches!(p(dir.path()), DataSource::Folder { .. }));
        assert!(matches!(
            DataPlan::parse_source("org/name", 1, RequestFormat::Chat).expect("hub"),
            DataSource::Hub { .. }
        ));
        assert!(DataPlan::parse_source("nothing-here.jsonl", 1, RequestFormat::Chat).is_err());
    }
}
