//! Timestamped traces for `--profile replay`: Mooncake JSONL, BurstGPT CSV, the Azure
//! LLM inference trace CSV, and a generic JSONL read through the column mapper.
//!
//! The coordinator reads the trace once ([`read_trace`]), checks it (timestamps present,
//! non-negative and sorted: an error names the file and the line), applies
//! `--trace-start`, and writes one compact row per request to a table file that every
//! worker reads during its handshake, as for any dataset. Each row carries its offset
//! from the first kept request, so slot `i` is due at `t0 + offset_i × time-scale`
//! whatever `--workers` is: the schedule lives in the file, not in the worker count.
//! Offsets travel in the table rather than in each worker's IPC configuration: at a
//! million rows that is 8 MB that every worker would otherwise receive over the socket
//! during the barrier, while the table is read from the page cache and is needed anyway
//! for the lengths.
//!
//! Prompts are built in the worker, in the pacer before the slot is due. A Mooncake
//! row's `hash_ids` name its blocks of `--trace-block-size` tokens; a block's text
//! comes from (seed, hash id) alone, so two requests that share hash ids share exactly
//! those token blocks (the last block may be partial: `input_length` decides), and a
//! per-block marker right at the start of every block keeps different ids apart from
//! their first token. Rows without hash ids (BurstGPT, Azure) get ids of their own, so
//! nothing is shared by accident. Lengths are exact under the run's tokenizer, as for
//! synthetic prompts ([`super::exact`]).

use super::columns::RowMapper;
use super::exact::PromptBuilder;
use super::files::{Record, kind, read_records};
use super::table::{Row, RowPrompt};
use super::tokenizer::Tokenizer;
use llmsurge_proto::seed::derive_seed;
use llmsurge_proto::{TokenizerRef, TraceSpec};
use llmsurge_worker::{PreparedRequest, Prompt, RequestSource};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::time::Duration;

/// Bumped when [`TraceRow`] changes shape.
pub const TRACE_TABLE_VERSION: u32 = 1;
/// Default `--trace-block-size` (Mooncake's).
pub const DEFAULT_BLOCK_SIZE: u32 = 512;
/// Hash ids of rows that have none (and of blocks past a row's hash ids) have this bit
/// set, and the row number above the block number: never a trace's own id in practice.
const OWN_ID: u64 = 1 << 63;

/// The trace formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceFormat {
    /// Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.
    Mooncake,
    /// BurstGPT CSV: `Timestamp` (s), `Model`, `Request tokens`, `Response tokens`.
    Burstgpt,
    /// Azure LLM inference trace CSV: `TIMESTAMP`, `ContextTokens`, `GeneratedTokens`.
    Azure,
    /// JSONL rows with a `timestamp` column (seconds) and a prompt the column mapper
    /// finds.
    Generic,
}

impl TraceFormat {
    /// The format's name, as in the docs.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Mooncake => "mooncake",
            TraceFormat::Burstgpt => "burstgpt",
            TraceFormat::Azure => "azure",
            TraceFormat::Generic => "generic",
        }
    }
}

const MOONCAKE_KEYS: &[&str] = &["timestamp", "input_length", "output_length"];
const BURSTGPT_COLUMNS: &[&str] = &["Timestamp", "Request tokens", "Response tokens"];
const AZURE_COLUMNS: &[&str] = &["TIMESTAMP", "ContextTokens", "GeneratedTokens"];

/// The trace format of `path`, recognised by the keys of its first JSONL record or by
/// its CSV header; `None` for anything else (a dataset without timestamps).
pub fn detect(path: &Path) -> Option<TraceFormat> {
    use std::io::BufRead;
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    let file = std::fs::File::open(path).ok()?;
    let first = std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .find(|l| !l.trim().is_empty())?;
    match ext.as_str() {
        "jsonl" | "ndjson" => {
            let v: Value = serde_json::from_str(&first).ok()?;
            let m = v.as_object()?;
            // Mooncake's own keys beside a timestamp: a missing one is named by the reader.
            let mooncake = MOONCAKE_KEYS.iter().all(|k| m.contains_key(*k))
                || (m.contains_key("timestamp")
                    && (m.contains_key("input_length") || m.contains_key("hash_ids")));
            if mooncake {
                Some(TraceFormat::Mooncake)
            } else {
                None
            }
        }
        "csv" => {
            let header: Vec<&str> = first
                .split(',')
                .map(|c| c.trim().trim_matches('"'))
                .collect();
            // A header with the format's timestamp column and another of its columns is
            // that format: a missing column is then named, with the file and the line,
            // by the reader, instead of "not a trace".
            let like = |cols: &[&str]| {
                header.contains(&cols[0]) && cols[1..].iter().any(|c| header.contains(c))
            };
            if like(BURSTGPT_COLUMNS) {
                Some(TraceFormat::Burstgpt)
            } else if like(AZURE_COLUMNS) {
                Some(TraceFormat::Azure)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// One request of a trace, as the table file holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRow {
    /// Nanoseconds from the first kept request (unscaled trace time).
    pub at_ns: u64,
    /// Prompt length in tokens.
    pub input_tokens: u32,
    /// Output tokens to ask for, when the trace says.
    pub output_tokens: Option<u32>,
    /// The row's block ids (Mooncake's `hash_ids`); empty: blocks of its own.
    pub hash_ids: Vec<u64>,
    /// A prompt given as text (generic traces); blocks are built otherwise.
    pub prompt: Option<RowPrompt>,
}

#[derive(Serialize, Deserialize)]
struct TraceFile {
    version: u32,
    rows: Vec<TraceRow>,
}

/// How to read a trace.
#[derive(Clone, Debug, Default)]
pub struct TraceOptions {
    /// Skip the requests of the first this much trace time (`--trace-start`).
    pub start: Duration,
    /// Keep only rows of this model (BurstGPT's `Model` column; `--trace-model`).
    pub model: Option<String>,
    /// Read no more than this many kept rows (`--max-requests`).
    pub limit: Option<u64>,
}

/// A timestamp in seconds from a JSON number or a numeric string; Azure's datetime
/// strings (`2023-11-16 18:15:46.6805900`) as seconds since the Unix epoch.
fn seconds(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => {
            let s = s.trim();
            if let Ok(x) = s.parse::<f64>() {
                return Some(x);
            }
            // Azure writes 7 fractional digits; chrono's %.f reads up to 9.
            let s = s.trim_end_matches('Z');
            let s = s.strip_suffix("+00:00").unwrap_or(s);
            ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
                .iter()
                .find_map(|f| chrono::NaiveDateTime::parse_from_str(s, f).ok())
                .map(|t| t.and_utc().timestamp_micros() as f64 / 1e6)
        }
        _ => None,
    }
}

fn count(v: &Value) -> Option<u32> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Reads, checks and cuts the trace at `path`. `mapper` measures generic prompts.
/// Errors are one line naming the file and the line.
pub fn read_trace(
    path: &Path,
    format: TraceFormat,
    opts: &TraceOptions,
    mapper: Option<&RowMapper<'_>>,
) -> Result<Vec<TraceRow>, String> {
    let name = path.display().to_string();
    let mut rows: Vec<TraceRow> = Vec::new();
    let mut first: Option<f64> = None;
    let mut last: Option<(f64, String)> = None;
    for rec in records(path)? {
        let rec = rec?;
        let err = |m: String| format!("{name} {}: {m}", rec.at);
        let field = |col: &str| -> Result<&Value, String> {
            rec.fields
                .get(col)
                .ok_or_else(|| err(format!("no column {col:?} (a {} trace)", format.name())))
        };
        let tokens = |col: &str| -> Result<u32, String> {
            let v = field(col)?;
            count(v).ok_or_else(|| {
                err(format!(
                    "column {col:?} must be a whole number of tokens, got {v}"
                ))
            })
        };
        let (ts_col, scale) = match format {
            TraceFormat::Mooncake => ("timestamp", 1e-3),
            TraceFormat::Burstgpt => ("Timestamp", 1.0),
            TraceFormat::Azure => ("TIMESTAMP", 1.0),
            TraceFormat::Generic => ("timestamp", 1.0),
        };
        let raw = field(ts_col)?;
        let t = seconds(raw)
            .filter(|t| t.is_finite())
            .ok_or_else(|| err(format!("column {ts_col:?} is not a timestamp: {raw}")))?
            * scale;
        if t < 0.0 {
            return Err(err(format!("negative timestamp {raw}")));
        }
        if let Some((prev, at)) = &last
            && t < *prev
        {
            return Err(err(format!(
                "timestamps are not sorted: {raw} comes after a later one ({at})"
            )));
        }
        last = Some((t, rec.at.clone()));
        if format == TraceFormat::Burstgpt
            && let Some(model) = &opts.model
            && rec.fields.get("Model").and_then(Value::as_str) != Some(model.as_str())
        {
            continue;
        }
        let t0 = *first.get_or_insert(t);
        if t - t0 < opts.start.as_secs_f64() {
            continue;
        }
        let mut row = match format {
            TraceFormat::Mooncake => {
                let hash_ids = match rec.fields.get("hash_ids") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(ids)) => ids
                        .iter()
                        .map(|v| {
                            v.as_u64().filter(|&id| id & OWN_ID == 0).ok_or_else(|| {
                                err(format!("hash_ids: {v} is not a whole number below 2^63"))
                            })
                        })
                        .collect::<Result<_, _>>()?,
                    Some(v) => {
                        return Err(err(format!("hash_ids must be a list, got {}", kind(v))));
                    }
                };
                TraceRow {
                    at_ns: 0,
                    input_tokens: tokens("input_length")?,
                    output_tokens: Some(tokens("output_length")?),
                    hash_ids,
                    prompt: None,
                }
            }
            TraceFormat::Burstgpt => TraceRow {
                at_ns: 0,
                input_tokens: tokens("Request tokens")?,
                output_tokens: Some(tokens("Response tokens")?),
                hash_ids: Vec::new(),
                prompt: None,
            },
            TraceFormat::Azure => TraceRow {
                at_ns: 0,
                input_tokens: tokens("ContextTokens")?,
                output_tokens: Some(tokens("GeneratedTokens")?),
                hash_ids: Vec::new(),
                prompt: None,
            },
            TraceFormat::Generic => {
                let Some(mapper) = mapper else {
                    return Err(err("a generic trace needs a tokenizer".into()));
                };
                let r: Row = mapper.row(&name, &rec)?;
                TraceRow {
                    at_ns: 0,
                    input_tokens: r.prompt_tokens,
                    output_tokens: r.output_tokens,
                    hash_ids: Vec::new(),
                    prompt: Some(r.prompt),
                }
            }
        };
        // A request of no tokens cannot be sent (failed requests in BurstGPT log 0).
        if row.input_tokens == 0 || row.output_tokens == Some(0) {
            continue;
        }
        row.at_ns = ((t - t0 - opts.start.as_secs_f64()).max(0.0) * 1e9).round() as u64;
        rows.push(row);
        if opts.limit.is_some_and(|n| rows.len() as u64 >= n) {
            break;
        }
    }
    // Offsets from the first kept request, so a replay starts at once.
    if let Some(base) = rows.first().map(|r| r.at_ns) {
        for r in &mut rows {
            r.at_ns -= base;
        }
    }
    Ok(rows)
}

/// The records of a trace file, one at a time: a trace of millions of rows is never
/// held whole as JSON (only its compact rows are kept).
fn records(path: &Path) -> Result<Box<dyn Iterator<Item = Result<Record, String>>>, String> {
    use std::io::BufRead;
    let name = path.display().to_string();
    match super::files::Format::of(path) {
        Some(super::files::Format::Jsonl) => {
            let file = std::fs::File::open(path).map_err(|e| format!("{name}: {e}"))?;
            let lines = std::io::BufReader::new(file).lines().enumerate();
            Ok(Box::new(lines.filter_map(move |(i, line)| {
                let at = format!("line {}", i + 1);
                let line = match line {
                    Ok(l) if l.trim().is_empty() => return None,
                    Ok(l) => l,
                    Err(e) => return Some(Err(format!("{name} {at}: {e}"))),
                };
                Some(match serde_json::from_str::<Value>(&line) {
                    Ok(Value::Object(fields)) => Ok(Record { at, fields }),
                    Ok(other) => Err(format!(
                        "{name} {at}: expected a JSON object, got {}",
                        kind(&other)
                    )),
                    Err(e) => Err(format!("{name} {at}: not valid JSON ({e})")),
                })
            })))
        }
        Some(super::files::Format::Csv) => {
            let (reader, headers) = super::files::open_csv(path)?;
            Ok(Box::new(reader.into_records().enumerate().map(
                move |(i, rec)| {
                    let rec = rec.map_err(|e| {
                        let line = e.position().map_or(i as u64 + 2, |p| p.line());
                        let why = e.to_string();
                        format!(
                            "{name} line {line}: {}",
                            why.lines().next().unwrap_or("malformed CSV")
                        )
                    })?;
                    Ok(super::files::csv_record(&headers, &rec, i))
                },
            )))
        }
        _ => Ok(Box::new(read_records(path, None)?.into_iter().map(Ok))),
    }
}

/// A file of trace rows, removed when dropped.
pub type TraceTableGuard = super::table::TableFileGuard;

/// Writes `rows` to a new trace table file in the temporary directory.
pub fn write_trace_table(rows: &[TraceRow]) -> Result<TraceTableGuard, String> {
    let file = TraceFile {
        version: TRACE_TABLE_VERSION,
        rows: rows.to_vec(),
    };
    super::table::write_prepared("trace", "trace", &file)
}

/// Reads a trace table file.
pub fn read_trace_table(path: &Path) -> Result<Vec<TraceRow>, String> {
    let file: TraceFile =
        super::table::read_prepared(path, "trace", TRACE_TABLE_VERSION, |f: &TraceFile| {
            f.version
        })?;
    Ok(file.rows)
}

/// The block builder of a trace: the built-in text, exact under the run's tokenizer.
pub fn block_builder(tokenizer: &TokenizerRef, block_size: u32) -> Result<PromptBuilder, String> {
    let max = block_size as usize;
    if *tokenizer == TokenizerRef::Builtin(super::tokenizer::DEFAULT_PROCESSOR.into())
        && let Some(b) = PromptBuilder::builtin_cl100k(max)
    {
        return Ok(b);
    }
    PromptBuilder::new(Tokenizer::load(tokenizer)?, None, max)
}

/// Writes the prompt of `row` (row number `index`) into `out`, which starts empty: its
/// blocks in order, each `block` tokens but the last, which takes what `input_tokens`
/// leaves.
pub fn build_blocks(
    builder: &PromptBuilder,
    seed: u64,
    block: u32,
    index: u64,
    row: &TraceRow,
    out: &mut String,
) -> Result<(), String> {
    let n = row.input_tokens as usize;
    let block = block.max(1) as usize;
    let blocks = n.div_ceil(block);
    for k in 0..blocks {
        let len = block.min(n - k * block);
        let id = row
            .hash_ids
            .get(k)
            .copied()
            .unwrap_or(OWN_ID | (index << 24) | (k as u64 & 0xff_ffff));
        let start = out.len();
        // The same id gives the same text: the marker spells the id, the window is
        // seeded by it. Only the separating space differs for a block that opens a
        // prompt.
        builder.build(out, len, None, id, derive_seed(seed, "trace-block", id))?;
        if builder.repairs() {
            // A tokenizer whose lengths do not add up: fix this block alone, so the
            // blocks before it keep their text.
            let mut piece = out.split_off(start);
            builder.fit(&mut piece, len)?;
            out.push_str(&piece);
        }
    }
    if builder.repairs() {
        // Blocks exact alone may still merge at their joins under such a tokenizer: the
        // whole prompt is made exact too, which only touches its end.
        builder.fit(out, n)?;
    }
    Ok(())
}

/// A worker's source over a prepared trace.
#[derive(Debug)]
pub struct TraceSource {
    rows: Vec<TraceRow>,
    builder: Option<PromptBuilder>,
    spec: TraceSpec,
}

impl TraceSource {
    /// Loads the trace table of `spec` and its block builder.
    pub fn open(spec: &TraceSpec) -> Result<Self, String> {
        let rows = read_trace_table(&spec.path)?;
        // Only traces with block prompts need the builder (and maybe a tokenizer).
        let builder = if rows.iter().any(|r| r.prompt.is_none()) {
            Some(block_builder(&spec.tokenizer, spec.block_size)?)
        } else {
            None
        };
        Ok(Self {
            rows,
            builder,
            spec: spec.clone(),
        })
    }
}

impl RequestSource for TraceSource {
    fn request(&mut self, slot: u64) -> Result<Option<PreparedRequest>, String> {
        let Some(row) = self.rows.get(slot as usize) else {
            return Ok(None);
        };
        let prompt = match (&row.prompt, &self.builder) {
            (Some(p), _) => super::table::prompt_of(p),
            (None, Some(b)) => {
                let mut text = String::with_capacity(row.input_tokens as usize * 5);
                build_blocks(
                    b,
                    self.spec.seed,
                    self.spec.block_size,
                    slot,
                    row,
                    &mut text,
                )?;
                Prompt::Text(text)
            }
            (None, None) => return Err("the trace has no block builder".into()),
        };
        Ok(Some(PreparedRequest {
            prompt,
            prompt_tokens: Some(row.input_tokens),
            max_tokens: row.output_tokens,
            model: None,
            user: None,
            session: None,
        }))
    }

    fn offset_ns(&self, slot: u64) -> Option<u64> {
        self.rows.get(slot as usize).map(|r| r.at_ns)
    }
}

/// What the coordinator keeps of a prepared trace for the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceSummary {
    /// The format read.
    pub format: TraceFormat,
    /// Requests kept.
    pub rows: u64,
    /// Trace time from the first kept request to the last, seconds (unscaled).
    pub span_s: f64,
    /// Mean request rate in trace time, req/s (`None` under two requests).
    pub mean_rate: Option<f64>,
}

/// The trace's mean request rate, req/s of trace time (`None` under two requests).
pub fn mean_rate(rows: &[TraceRow]) -> Option<f64> {
    let last = rows.last()?.at_ns;
    (rows.len() > 1 && last > 0).then(|| (rows.len() - 1) as f64 / (last as f64 / 1e9))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn formats_are_recognised_by_keys_and_headers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = write(
            dir.path(),
            "m.jsonl",
            "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n",
        );
        let b = write(
            dir.path(),
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,ChatGPT,10,2,12,Conversation log\n",
        );
        let a = write(
            dir.path(),
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,2\n",
        );
        let p = write(dir.path(), "p.jsonl", "{\"prompt\": \"hi\"}\n");
        assert_eq!(detect(&m), Some(TraceFormat::Mooncake));
        assert_eq!(detect(&b), Some(TraceFormat::Burstgpt));
        assert_eq!(detect(&a), Some(TraceFormat::Azure));
        assert_eq!(detect(&p), None);
    }

    #[test]
    fn blocks_are_exact_and_shared_by_hash_id() {
        let tok_ref = TokenizerRef::Builtin(super::super::tokenizer::DEFAULT_PROCESSOR.into());
        let tok = Tokenizer::load(&tok_ref).expect("cl100k");
        let b = block_builder(&tok_ref, 32).expect("builder");
        let mut firsts: std::collections::HashMap<u64, Vec<u32>> = Default::default();
        for i in 0..40u64 {
            let blocks = 2 + i % 3;
            let row = TraceRow {
                at_ns: 0,
                input_tokens: (blocks * 32 - i % 7) as u32,
                output_tokens: Some(1),
                // A hash id names a block of one length (Mooncake hashes a partial last
                // block on its own): the shared second id only on full second blocks.
                hash_ids: if blocks > 2 {
                    vec![i % 4, 100 + i % 12]
                } else {
                    vec![i % 4]
                },
                prompt: None,
            };
            let mut text = String::new();
            build_blocks(&b, 9, 32, i, &row, &mut text).expect("build");
            let ids = tok.encode(&text);
            assert_eq!(ids.len(), row.input_tokens as usize, "row {i}: {text:?}");
            for (k, id) in row.hash_ids.iter().enumerate() {
                let block = ids[k * 32..((k + 1) * 32).min(ids.len())].to_vec();
                let first = firsts.entry(*id).or_insert_with(|| block.clone());
                assert_eq!(*first, block, "row {i} block {k}");
            }
        }
    }

    #[test]
    fn azure_datetimes_are_seconds() {
        let a = seconds(&Value::String("2023-11-16 18:15:46.6805900".into())).expect("t");
        let b = seconds(&Value::String("2023-11-16 18:15:47.1805900".into())).expect("t");
        assert!((b - a - 0.5).abs() < 1e-6, "{a} {b}");
    }

    #[test]
    fn trace_start_skips_and_offsets_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = write(
            dir.path(),
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens\n5,A,10,2\n6,B,11,2\n7.5,A,12,0\n8,A,13,3\n",
        );
        let opts = TraceOptions {
            start: Duration::from_secs(1),
            model: Some("A".into()),
            limit: None,
        };
        let rows = read_trace(&b, TraceFormat::Burstgpt, &opts, None).expect("read");
        // Row 1 (t=5) is before the start, row 2 is model B, row 3 has no output.
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].at_ns, rows[0].input_tokens), (0, 13));
    }
}
