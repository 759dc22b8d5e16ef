//! Synthetic prompts of exact token lengths.
//!
//! A spec is given as `k=v,...`, as a JSON object, or as a `.json`/`.yaml` file. Every
//! request's lengths and text come from generators seeded by (seed, stream, sample), so
//! the same seed gives the same workload whatever the number of workers. Prompts have
//! exactly the drawn number of tokens under the run's tokenizer ([`super::exact`]);
//! prompts of a prefix group share exactly `prefix_tokens` tokens, and a per-prompt
//! marker right after the prefix keeps them apart from there on, so a server's prefix
//! cache is not flattered by accident.

use super::exact::{PrefixPart, PromptBuilder};
use super::media::MediaSet;
use super::sampler::SlotSampler;
use super::tokenizer::Tokenizer;
use llmsurge_proto::seed::derive_seed;
use llmsurge_proto::{
    ImageFormat, MediaSpec, RequestFormat, Sampling, SyntheticSpec, ThinkKind, ThinkTime,
    TokenizerRef,
};
use llmsurge_worker::{PreparedRequest, Prompt, RequestSource, SessionPlan, Turn};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Spec keys, in the order the docs list them.
pub const SPEC_KEYS: &[&str] = &[
    "prompt_tokens",
    "prompt_tokens_stdev",
    "prompt_tokens_min",
    "prompt_tokens_max",
    "output_tokens",
    "output_tokens_stdev",
    "output_tokens_min",
    "output_tokens_max",
    "range_ratio",
    "prefix_tokens",
    "prefix_count",
    "samples",
    "source",
    "random_seed",
    "batch_size",
    "documents",
    "images",
    "image_size",
    "image_format",
    "image_pool",
    "audio_seconds",
    "turns",
    "think_time",
    "session_id",
    "session_header",
    "system_tokens",
    "system_shared",
    "tools",
    "tool_result_tokens",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFields {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens_stdev: u32,
    prompt_tokens_min: Option<u32>,
    prompt_tokens_max: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default)]
    output_tokens_stdev: u32,
    output_tokens_min: Option<u32>,
    output_tokens_max: Option<u32>,
    range_ratio: Option<f64>,
    #[serde(default)]
    prefix_tokens: u32,
    prefix_count: Option<u32>,
    samples: Option<u64>,
    source: Option<String>,
    random_seed: Option<u64>,
    #[serde(default)]
    batch_size: u32,
    #[serde(default)]
    documents: u32,
    #[serde(default)]
    images: u32,
    image_size: Option<String>,
    image_format: Option<ImageFormat>,
    #[serde(default)]
    image_pool: u32,
    #[serde(default)]
    audio_seconds: f64,
    #[serde(default)]
    turns: u32,
    think_time: Option<String>,
    session_id: Option<String>,
    session_header: Option<String>,
    #[serde(default)]
    system_tokens: u32,
    #[serde(default)]
    system_shared: bool,
    #[serde(default)]
    tools: u32,
    tool_result_tokens: Option<u32>,
}

/// The tokens of a tool's result when a session offering tools gives none: about a
/// search result's snippet.
pub const DEFAULT_TOOL_RESULT_TOKENS: u32 = 100;

/// Images are 512×512 unless `image_size` says otherwise.
pub const DEFAULT_IMAGE_SIZE: (u32, u32) = (512, 512);

/// Whether `raw` looks like an inline spec (`k=v,...` or a JSON object).
pub fn is_inline_spec(raw: &str) -> bool {
    let t = raw.trim();
    t.starts_with('{') || (t.contains('=') && !Path::new(t).exists())
}

/// Documents per `rerank` or `score` request when the spec gives neither `documents` nor
/// `output_tokens`: a retrieval stage's usual top-10 candidates for one query.
pub const DEFAULT_DOCUMENTS: u32 = 10;

/// Parses an inline synthetic spec given as `k=v,...` or as a JSON object, for a
/// generating request format (`output_tokens` required).
pub fn parse_spec(raw: &str, run_seed: u64) -> Result<SyntheticSpec, String> {
    parse_spec_for(raw, run_seed, RequestFormat::Chat)
}

/// [`parse_spec`] for requests of `format`: a pooling format (embeddings, rerank, score)
/// generates nothing, so a spec without `output_tokens` implies what
/// [`imply_pooling`] says.
pub fn parse_spec_for(
    raw: &str,
    run_seed: u64,
    format: RequestFormat,
) -> Result<SyntheticSpec, String> {
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
            let (k, v) = (k.trim(), v.trim());
            let value = if matches!(
                k,
                "source"
                    | "image_size"
                    | "image_format"
                    | "think_time"
                    | "session_id"
                    | "session_header"
            ) {
                v.into()
            } else if k == "system_shared" {
                match v {
                    "true" | "1" => true.into(),
                    "false" | "0" => false.into(),
                    _ => return Err(format!("{k}={v}: expected true or false")),
                }
            } else if matches!(k, "range_ratio" | "audio_seconds") {
                let r: f64 = v
                    .parse()
                    .map_err(|_| format!("{k}={v}: expected a number (e.g. 0.1)"))?;
                r.into()
            } else {
                let n: u64 = v
                    .parse()
                    .map_err(|_| format!("{k}={v}: expected a whole number"))?;
                n.into()
            };
            map.insert(k.to_string(), value);
        }
        serde_json::Value::Object(map)
    };
    spec_from_value(value, run_seed, None, format)
}

/// Parses a synthetic spec file (`.json`, `.yaml` or `.yml`) for requests of `format`
/// (as [`parse_spec_for`]); a relative `source` is relative to the file.
pub fn parse_spec_file(
    path: &Path,
    run_seed: u64,
    format: RequestFormat,
) -> Result<SyntheticSpec, String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    let value: serde_json::Value = match path.extension().and_then(|e| e.to_str()) {
        Some("yaml" | "yml") => serde_saphyr::from_str(&text)
            .map_err(|e| format!("{name}: not valid YAML ({})", first_line(&e.to_string())))?,
        _ => serde_json::from_str(&text).map_err(|e| format!("{name}: not valid JSON ({e})"))?,
    };
    spec_from_value(value, run_seed, path.parent(), format).map_err(|e| format!("{name}: {e}"))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// Whether a parsed JSON document is a synthetic spec (rather than a dataset).
pub fn is_spec_value(v: &serde_json::Value) -> bool {
    v.as_object().is_some_and(|m| {
        m.contains_key("prompt_tokens")
            || m.contains_key("images")
            || m.contains_key("audio_seconds")
    })
}

fn spec_from_value(
    value: serde_json::Value,
    run_seed: u64,
    base: Option<&Path>,
    format: RequestFormat,
) -> Result<SyntheticSpec, String> {
    let f: SpecFields = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let source = f.source.filter(|s| s != "builtin").map(|s| {
        let p = PathBuf::from(s);
        match base {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p,
        }
    });
    let (image_width, image_height) = match &f.image_size {
        Some(raw) => super::media::parse_size(raw)?,
        None => DEFAULT_IMAGE_SIZE,
    };
    if !f.audio_seconds.is_finite() || !(0.0..=3600.0).contains(&f.audio_seconds) {
        return Err(format!(
            "audio_seconds must be between 0 and 3600, got {}",
            f.audio_seconds
        ));
    }
    let media = MediaSpec {
        images: f.images,
        image_width,
        image_height,
        image_format: f.image_format.unwrap_or_default(),
        image_pool: f.image_pool,
        audio_seconds: f.audio_seconds,
    };
    if f.prompt_tokens.is_none() && !media.any() {
        return Err("missing field `prompt_tokens`".into());
    }
    let mut spec = SyntheticSpec {
        // A media-only spec (a transcription's audio, say) has no text.
        prompt_tokens: f.prompt_tokens.unwrap_or(0),
        prompt_tokens_stdev: f.prompt_tokens_stdev,
        prompt_tokens_min: f.prompt_tokens_min,
        prompt_tokens_max: f.prompt_tokens_max,
        output_tokens: f.output_tokens.unwrap_or(0),
        output_tokens_stdev: f.output_tokens_stdev,
        output_tokens_min: f.output_tokens_min,
        output_tokens_max: f.output_tokens_max,
        range_ratio: f.range_ratio,
        prefix_tokens: f.prefix_tokens,
        prefix_count: f.prefix_count.unwrap_or(1),
        samples: f.samples,
        random_seed: f.random_seed.unwrap_or(run_seed),
        source: source.map(|p| super::tokenizer::absolute(&p)),
        tokenizer: TokenizerRef::Builtin(super::tokenizer::DEFAULT_PROCESSOR.into()),
        sampling: Sampling::default(),
        batch_size: f.batch_size,
        documents: f.documents,
        media,
        turns: f.turns,
        think_time: f.think_time.as_deref().map(parse_think_time).transpose()?,
        session_user: match f.session_id.as_deref() {
            None => false,
            Some("user") => true,
            Some(other) => {
                return Err(format!(
                    "session_id={other}: expected user (the session id as the OpenAI user field)"
                ));
            }
        },
        session_header: f
            .session_header
            .as_deref()
            .map(session_header_name)
            .transpose()?,
        system_tokens: f.system_tokens,
        system_shared: f.system_shared,
        tools: f.tools,
        tool_result_tokens: match f.tool_result_tokens {
            Some(_) if f.tools == 0 || f.turns == 0 => {
                return Err(
                    "tool_result_tokens needs turns and tools (e.g. turns=3,tools=2,tool_result_tokens=50)"
                        .into(),
                );
            }
            Some(n) => n,
            None if f.tools > 0 && f.turns > 0 => DEFAULT_TOOL_RESULT_TOKENS,
            None => 0,
        },
    };
    if f.output_tokens.is_none() {
        imply_pooling(&mut spec, format);
    }
    validate(&spec)?;
    Ok(spec)
}

/// What a pooling format implies for a spec that gives no output length: embeddings a
/// batch of one text, rerank and score [`DEFAULT_DOCUMENTS`] documents. A spec that sets
/// `batch_size` or `documents` itself keeps them; generating formats are left alone.
fn imply_pooling(spec: &mut SyntheticSpec, format: RequestFormat) {
    if spec.batch_size > 0 || spec.documents > 0 {
        return;
    }
    match format {
        RequestFormat::Embeddings => spec.batch_size = 1,
        RequestFormat::Rerank | RequestFormat::Score => spec.documents = DEFAULT_DOCUMENTS,
        RequestFormat::Chat
        | RequestFormat::Completions
        | RequestFormat::Responses
        | RequestFormat::Anthropic
        | RequestFormat::Transcription => {}
    }
}

/// Parses `think_time`: `2s` (fixed), `uniform:2s` (uniform on `[0, 4s]`, mean 2 s) or
/// `exp:2s` (exponential, mean 2 s).
pub fn parse_think_time(raw: &str) -> Result<ThinkTime, String> {
    let (kind, value) = match raw.split_once(':') {
        None => (ThinkKind::Fixed, raw),
        Some(("fixed", v)) => (ThinkKind::Fixed, v),
        Some(("uniform", v)) => (ThinkKind::Uniform, v),
        Some(("exp" | "exponential", v)) => (ThinkKind::Exponential, v),
        Some((other, _)) => {
            return Err(format!(
                "think_time={raw}: unknown distribution {other:?} (fixed, uniform or exp)"
            ));
        }
    };
    let mean = crate::cli::values::parse_duration(value.trim())
        .map_err(|e| format!("think_time={raw}: {e}"))?;
    Ok(ThinkTime {
        kind,
        mean_ns: u64::try_from(mean.as_nanos()).unwrap_or(u64::MAX),
    })
}

/// Draws the think time before turn `turn` of session `session`, seeded by both.
pub fn draw_think(t: &ThinkTime, seed: u64, session: u64, turn: u32) -> u64 {
    let draw_seed = derive_seed(
        derive_seed(seed, "think-session", session),
        "think-turn",
        u64::from(turn),
    );
    let mut rng = StdRng::seed_from_u64(draw_seed);
    let mean = t.mean_ns as f64;
    let v = match t.kind {
        ThinkKind::Fixed => return t.mean_ns,
        ThinkKind::Uniform => match rand_distr::Uniform::new_inclusive(0.0, 2.0 * mean) {
            Ok(u) => u.sample(&mut rng),
            Err(_) => mean,
        },
        ThinkKind::Exponential => match rand_distr::Exp::new(1.0 / mean.max(1.0)) {
            Ok(e) => e.sample(&mut rng),
            Err(_) => mean,
        },
    };
    v.round() as u64
}

/// Headers a session id must not go in: hop-by-hop headers (a proxy drops or acts on
/// them), the request's own framing (and every `content-*` header), credentials (a
/// session id sent there would replace the API key, or leak into logs that redact only
/// those), a response's own header, and the headers llmsurge sends itself (a second
/// value would be a duplicate).
const FORBIDDEN_SESSION_HEADERS: [&str; 22] = [
    "set-cookie",
    "user-agent",
    "accept",
    llmsurge_proto::REQUEST_ID_HEADER,
    llmsurge_proto::TRACEPARENT_HEADER,
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
    "content-type",
    "expect",
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
    "anthropic-version",
];

/// Checks `session_header=NAME`: an HTTP header name (RFC 9110 token characters), not
/// one of [`FORBIDDEN_SESSION_HEADERS`]; returns it lowercased (HTTP/2 sends names so).
pub fn session_header_name(raw: &str) -> Result<String, String> {
    let name = raw.trim();
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!(
            "session_header={raw}: not a valid HTTP header name (letters, digits and - _ . etc., e.g. x-session-id)"
        ));
    }
    let lower = name.to_ascii_lowercase();
    if FORBIDDEN_SESSION_HEADERS.contains(&lower.as_str()) || lower.starts_with("content-") {
        return Err(format!(
            "session_header={raw}: {lower} is a hop-by-hop, framing, credential or response header, or one llmsurge sends itself; choose another name (e.g. x-session-id)"
        ));
    }
    Ok(lower)
}

/// The most turns a synthetic session may have. Each turn resends the whole conversation,
/// so a session's last turn carries every earlier one (1,000 turns of 100 tokens is a
/// context of 100,000); and a session's turns are built when it starts.
pub const MAX_TURNS: u32 = 1_000;

fn validate(s: &SyntheticSpec) -> Result<(), String> {
    if s.turns > MAX_TURNS {
        return Err(format!(
            "turns={} is above {MAX_TURNS} (each turn resends the whole conversation)",
            s.turns
        ));
    }
    if s.session_user && s.turns == 0 {
        return Err("session_id needs turns (e.g. turns=5,session_id=user)".into());
    }
    if s.session_header.is_some() && s.turns == 0 {
        return Err("session_header needs turns (e.g. turns=5,session_header=x-session-id)".into());
    }
    if s.think_time.is_some() && s.turns == 0 {
        return Err("think_time needs turns (e.g. turns=5,think_time=2s)".into());
    }
    if s.system_tokens > 0 && s.turns == 0 {
        return Err("system_tokens needs turns (e.g. turns=5,system_tokens=200)".into());
    }
    if s.system_shared && s.system_tokens == 0 {
        return Err(
            "system_shared needs system_tokens (e.g. system_tokens=200,system_shared=true)".into(),
        );
    }
    if s.turns > 0 && (s.batch_size > 0 || s.documents > 0) {
        return Err("turns (multi-turn chat) does not combine with batch_size / documents".into());
    }
    if s.prompt_tokens == 0 && !s.media.any() {
        return Err("prompt_tokens must be at least 1".into());
    }
    if s.media.image_pool > 0 && s.media.images == 0 {
        return Err("image_pool needs images".into());
    }
    if s.media.images > 64 {
        return Err(format!("images={} is above 64 per request", s.media.images));
    }
    // Embeddings (batch_size) and ranking (documents) have no output length; a
    // transcription (audio alone) leaves it to the server.
    let audio_only = s.media.audio_seconds > 0.0 && s.media.images == 0;
    if s.output_tokens == 0 && s.batch_size == 0 && s.documents == 0 && !audio_only {
        return Err(
            "output_tokens must be at least 1 (only embeddings, with batch_size, and rerank, with documents, take none)"
                .into(),
        );
    }
    if s.batch_size > 0 && s.documents > 0 {
        return Err("batch_size (embeddings) and documents (rerank) do not go together".into());
    }
    if s.output_tokens > 0 && (s.batch_size > 0 || s.documents > 0) {
        return Err(
            "batch_size and documents are for embeddings and rerank, which take no output_tokens"
                .into(),
        );
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
    if let Some(r) = s.range_ratio {
        if !(0.0..1.0).contains(&r) {
            return Err(format!("range_ratio must be in [0, 1), got {r}"));
        }
        if s.prompt_tokens_stdev > 0 || s.output_tokens_stdev > 0 {
            return Err(
                "range_ratio draws lengths uniformly: it does not combine with prompt_tokens_stdev / output_tokens_stdev".into(),
            );
        }
    }
    if s.prefix_count == 0 {
        return Err("prefix_count must be at least 1".into());
    }
    if s.samples == Some(0) {
        return Err("samples must be at least 1".into());
    }
    if let Some(src) = &s.source
        && !src.is_file()
    {
        return Err(format!("source {}: no such file", src.display()));
    }
    if max_prompt_tokens(s) > 1 << 20 {
        return Err("prompts above 1,048,576 tokens are not supported".into());
    }
    Ok(())
}

/// Bounds of a length: `[min, max]`, where an unset max is mean + 8 stdev.
fn bounds(mean: u32, stdev: u32, min: Option<u32>, max: Option<u32>) -> (u32, u32) {
    let hi = max.unwrap_or_else(|| mean.saturating_add(stdev.saturating_mul(8)));
    (min.unwrap_or(1).max(1), hi.max(1))
}

/// `[mean × (1 − r), mean × (1 + r)]` in whole tokens, at least 1 (vLLM's random
/// dataset rounds down both ends the same way).
fn range_bounds(mean: u32, r: f64) -> (u32, u32) {
    let lo = (f64::from(mean) * (1.0 - r)).floor().max(1.0) as u32;
    let hi = (f64::from(mean) * (1.0 + r)).floor().max(1.0) as u32;
    (lo, hi.max(lo))
}

/// A length drawn uniformly from its range-ratio bounds, from its own stream.
fn draw_uniform(seed: u64, mean: u32, r: f64) -> u32 {
    use rand::RngExt;
    let (lo, hi) = range_bounds(mean, r);
    StdRng::seed_from_u64(seed).random_range(lo..=hi)
}

/// The longest prompt a spec can draw (a session's system prompt included).
pub fn max_prompt_tokens(s: &SyntheticSpec) -> usize {
    let drawn = match s.range_ratio {
        Some(r) => range_bounds(s.prompt_tokens, r).1,
        None => {
            bounds(
                s.prompt_tokens,
                s.prompt_tokens_stdev,
                s.prompt_tokens_min,
                s.prompt_tokens_max,
            )
            .1
        }
    };
    drawn.max(s.system_tokens) as usize
}

/// Draws a length around `mean` with `stdev`, within its bounds, from its own stream.
pub(crate) fn draw_len(
    seed: u64,
    mean: u32,
    stdev: u32,
    min: Option<u32>,
    max: Option<u32>,
) -> u32 {
    let (lo, hi) = bounds(mean, stdev, min, max);
    let v = match Normal::new(f64::from(mean), f64::from(stdev)) {
        Ok(n) if stdev > 0 => {
            let mut rng = StdRng::seed_from_u64(seed);
            n.sample(&mut rng).round().max(1.0) as u32
        }
        _ => mean,
    };
    v.clamp(lo, hi.max(lo))
}

/// A source of synthetic prompts.
#[derive(Debug)]
pub struct SyntheticSource {
    spec: SyntheticSpec,
    builder: PromptBuilder,
    sampler: Option<SlotSampler>,
    /// Generated once here, never per request.
    media: MediaSet,
}

impl SyntheticSource {
    /// Prepares the prompt builder: from the precomputed material when the spec allows
    /// ([`SyntheticSource::precomputed`]), otherwise by loading the tokenizer and the
    /// source text.
    pub fn new(spec: SyntheticSpec) -> Result<Self, String> {
        if let Some(source) = Self::precomputed(&spec) {
            return source.with_media();
        }
        let tok = Tokenizer::load(&spec.tokenizer)?;
        Self::with_tokenizer(spec, tok)?.with_media()
    }

    /// The source without a tokenizer, from the precomputed material of the built-in
    /// text under the default tokenizer (see [`super::exact`]); `None` when the spec
    /// names another tokenizer or source text, or prompts longer than the material.
    pub fn precomputed(spec: &SyntheticSpec) -> Option<Self> {
        let default_tok =
            spec.tokenizer == TokenizerRef::Builtin(super::tokenizer::DEFAULT_PROCESSOR.into());
        if !default_tok || spec.source.is_some() {
            return None;
        }
        let builder = PromptBuilder::builtin_cl100k(max_prompt_tokens(spec))?;
        Some(Self {
            spec: spec.clone(),
            builder,
            sampler: spec.samples.map(|n| SlotSampler::new(n, spec.sampling)),
            media: MediaSet::default(),
        })
    }

    /// Generates the spec's media (see [`super::media`]); [`SyntheticSource::new`] does.
    pub fn with_media(mut self) -> Result<Self, String> {
        self.media = MediaSet::generate(&self.spec.media, self.spec.random_seed)?;
        Ok(self)
    }

    /// As [`SyntheticSource::new`], with a tokenizer already loaded.
    pub fn with_tokenizer(spec: SyntheticSpec, tok: Tokenizer) -> Result<Self, String> {
        let text = match &spec.source {
            Some(p) => Some(
                std::fs::read_to_string(p).map_err(|e| format!("source {}: {e}", p.display()))?,
            ),
            None => None,
        };
        let builder = PromptBuilder::new(tok, text.as_deref(), max_prompt_tokens(&spec))?;
        let sampler = spec.samples.map(|n| SlotSampler::new(n, spec.sampling));
        // Without media: they are generated where requests are made (`new`).
        Ok(Self {
            spec,
            builder,
            sampler,
            media: MediaSet::default(),
        })
    }

    /// The prompt builder (its tokenizer, its mode).
    pub fn builder(&self) -> &PromptBuilder {
        &self.builder
    }

    /// The payload of sample `sample` (not slot: see [`RequestSource::request`]).
    pub fn sample(&self, sample: u64) -> Result<PreparedRequest, String> {
        let s = &self.spec;
        let seed = s.random_seed;
        let (prompt_seed, output_seed) = (
            derive_seed(seed, "prompt-len", sample),
            derive_seed(seed, "output-len", sample),
        );
        let (prompt_len, output_len) = match s.range_ratio {
            Some(r) => (
                draw_uniform(prompt_seed, s.prompt_tokens, r),
                draw_uniform(output_seed, s.output_tokens, r),
            ),
            None => (
                draw_len(
                    prompt_seed,
                    s.prompt_tokens,
                    s.prompt_tokens_stdev,
                    s.prompt_tokens_min,
                    s.prompt_tokens_max,
                ),
                draw_len(
                    output_seed,
                    s.output_tokens,
                    s.output_tokens_stdev,
                    s.output_tokens_min,
                    s.output_tokens_max,
                ),
            ),
        };
        let (prefix, marker) = if s.prefix_tokens > 0 {
            let count = u64::from(s.prefix_count);
            let group = sample % count;
            let part = PrefixPart {
                group,
                tokens: s.prefix_tokens as usize,
                pick: derive_seed(seed, "prefix-window", group),
            };
            (Some(part), sample / count)
        } else {
            (None, sample)
        };
        let mut text = String::with_capacity(prompt_len as usize * 5 + 16);
        if s.prompt_tokens > 0 {
            self.builder.build(
                &mut text,
                prompt_len as usize,
                prefix,
                marker,
                derive_seed(seed, "prompt-window", sample),
            )?;
        }
        let texts = s.batch_size.max(s.documents);
        if !self.media.is_empty() {
            return Ok(PreparedRequest {
                prompt_tokens: (s.prompt_tokens > 0).then_some(prompt_len),
                prompt: Prompt::Media {
                    text,
                    parts: self.media.parts(sample),
                },
                max_tokens: (s.output_tokens > 0).then_some(output_len),
                model: None,
                user: None,
                session: None,
            });
        }
        if texts == 0 {
            return Ok(PreparedRequest {
                prompt: Prompt::Text(text),
                prompt_tokens: Some(prompt_len),
                max_tokens: (s.output_tokens > 0).then_some(output_len),
                model: None,
                user: None,
                session: None,
            });
        }
        // A batch (embeddings) or a query with its documents (rerank): the first text
        // drawn above, then one more per item, each its own length and window.
        let mut items = Vec::with_capacity(texts as usize);
        let mut total = 0u32;
        let first_is_item = s.batch_size > 0;
        if first_is_item {
            items.push(std::mem::take(&mut text));
            total += prompt_len;
        }
        // A ranking server reads each (query, document) pair as one sequence (a
        // cross-encoder), so the query counts once per document, as its usage does.
        let per_item = if first_is_item { 0 } else { prompt_len };
        let sub = |i: u64| sample.wrapping_mul(u64::from(texts) + 1).wrapping_add(i);
        while items.len() < texts as usize {
            let i = items.len() as u64 + 1;
            let len = draw_len(
                derive_seed(seed, "prompt-len", sub(i)),
                s.prompt_tokens,
                s.prompt_tokens_stdev,
                s.prompt_tokens_min,
                s.prompt_tokens_max,
            );
            let mut item = String::with_capacity(len as usize * 5 + 16);
            self.builder.build(
                &mut item,
                len as usize,
                None,
                sub(i),
                derive_seed(seed, "prompt-window", sub(i)),
            )?;
            items.push(item);
            total = total.saturating_add(per_item).saturating_add(len);
        }
        let prompt = if first_is_item {
            Prompt::Batch(items)
        } else {
            Prompt::Ranking {
                query: text,
                documents: items,
            }
        };
        Ok(PreparedRequest {
            prompt,
            prompt_tokens: Some(total),
            max_tokens: None,
            model: None,
            user: None,
            session: None,
        })
    }
}

impl SyntheticSource {
    /// Session `id`'s system prompt (`system_tokens`): exactly that many tokens, its text
    /// seeded per session, or one text for every session with `system_shared`.
    fn system_prompt(&self, id: u64) -> Result<Option<String>, String> {
        let s = &self.spec;
        if s.system_tokens == 0 {
            return Ok(None);
        }
        // Its own streams, apart from the turns' samples; the marker (a seeded number,
        // not a small sample index) keeps two sessions' prompts apart from the first
        // words on.
        let key = if s.system_shared { u64::MAX } else { id };
        self.seeded_text(s.system_tokens, "system", key).map(Some)
    }

    /// Text of exactly `tokens` tokens on its own seeded streams (`{what}-marker` and
    /// `{what}-window` of `key`), apart from the samples' prompts.
    fn seeded_text(&self, tokens: u32, what: &str, key: u64) -> Result<String, String> {
        let seed = self.spec.random_seed;
        let mut text = String::with_capacity(tokens as usize * 5 + 16);
        self.builder.build(
            &mut text,
            tokens as usize,
            None,
            derive_seed(seed, &format!("{what}-marker"), key),
            derive_seed(seed, &format!("{what}-window"), key),
        )?;
        Ok(text)
    }

    /// The tool's result sent after turn sample `sample` when the server answered it with
    /// a tool call: `tool_result_tokens` exactly, seeded per turn; `None` without tools.
    fn tool_result(&self, sample: u64) -> Result<Option<String>, String> {
        if self.spec.tools == 0 {
            return Ok(None);
        }
        self.seeded_text(self.spec.tool_result_tokens, "tool-result", sample)
            .map(Some)
    }
}

impl RequestSource for SyntheticSource {
    fn request(&mut self, slot: u64) -> Result<Option<PreparedRequest>, String> {
        let sample = match &mut self.sampler {
            Some(sampler) => match sampler.row(slot) {
                Some(s) => s,
                None => return Ok(None),
            },
            None => slot,
        };
        self.sample(sample).map(Some)
    }

    fn has_sessions(&self) -> bool {
        self.spec.turns > 0
    }

    fn session(&mut self, id: u64) -> Result<Option<SessionPlan>, String> {
        let turns = u64::from(self.spec.turns);
        if self
            .spec
            .samples
            .is_some_and(|n| id.saturating_mul(turns) >= n)
        {
            return Ok(None);
        }
        // Always made: router affinity (`--affinity`) keys on it even without the
        // header (which the backend sends only when configured).
        let session_key: Option<Arc<str>> = Some(Arc::from(format!("llmsurge-session-{id}")));
        // Turn k of session s is sample s × turns + k: its own exact lengths and text,
        // the same whatever the worker.
        let plan = (0..self.spec.turns)
            .map(|k| {
                let mut request = self.sample(id * turns + u64::from(k))?;
                if self.spec.session_user {
                    request.user = Some(format!("llmsurge-session-{id}"));
                }
                // The same string as the user field, made once per session.
                request.session.clone_from(&session_key);
                let think_ns = match &self.spec.think_time {
                    Some(t) if k > 0 => draw_think(t, self.spec.random_seed, id, k),
                    _ => 0,
                };
                Ok(Turn {
                    request,
                    think_ns,
                    recorded_reply: None,
                    tool_result: self.tool_result(id * turns + u64::from(k))?,
                    tool_result_tokens: if self.spec.tools == 0 {
                        0
                    } else {
                        self.spec.tool_result_tokens
                    },
                    after: None,
                    parent_session: None,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Some(SessionPlan {
            system: self.system_prompt(id)?,
            system_tokens: Some(self.spec.system_tokens),
            turns: plan,
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
        assert!(
            parse_spec("prompt_tokens=5,output_tokens=1,source=/no/such/file", 1)
                .expect_err("source")
                .contains("/no/such/file")
        );
    }

    #[test]
    fn only_the_default_workload_skips_the_tokenizer() {
        let spec = |raw: &str| parse_spec(raw, 1).expect("spec");
        let default = SyntheticSource::precomputed(&spec("prompt_tokens=256,output_tokens=8"))
            .expect("the default workload is precomputed");
        assert!(default.builder().tokenizer().is_none());
        let mut other = spec("prompt_tokens=256,output_tokens=8");
        other.tokenizer = TokenizerRef::Builtin("o200k_base".into());
        assert!(SyntheticSource::precomputed(&other).is_none());
        // Longer than the material covers: the tokenizer path, as before.
        assert!(
            SyntheticSource::precomputed(&spec("prompt_tokens=9000,output_tokens=8")).is_none()
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let text = dir.path().join("t.txt");
        std::fs::write(&text, "Some words of a source text.").expect("w");
        let with_source = spec(&format!(
            "prompt_tokens=16,output_tokens=8,source={}",
            text.display()
        ));
        assert!(SyntheticSource::precomputed(&with_source).is_none());
        let built = SyntheticSource::new(with_source).expect("tokenizer path");
        assert!(built.builder().tokenizer().is_some());
    }

    #[test]
    fn range_ratio_draws_uniformly_within_its_bounds() {
        let spec =
            parse_spec("prompt_tokens=100,output_tokens=20,range_ratio=0.5", 3).expect("spec");
        assert_eq!(max_prompt_tokens(&spec), 150);
        let source = SyntheticSource::new(spec).expect("source");
        let (mut lo, mut hi) = (u32::MAX, 0);
        for i in 0..400 {
            let r = source.sample(i).expect("sample");
            let (p, o) = (r.prompt_tokens.expect("p"), r.max_tokens.expect("o"));
            assert!((50..=150).contains(&p) && (10..=30).contains(&o), "{p} {o}");
            lo = lo.min(p);
            hi = hi.max(p);
        }
        // Uniform over 101 values: 400 draws reach near both ends.
        assert!(lo < 55 && hi > 145, "{lo}..{hi}");
        assert!(parse_spec("prompt_tokens=9,output_tokens=1,range_ratio=1", 1).is_err());
        assert!(
            parse_spec(
                "prompt_tokens=9,output_tokens=1,range_ratio=0.2,prompt_tokens_stdev=2",
                1
            )
            .is_err()
        );
    }

    #[test]
    fn spec_files_parse_as_json_and_yaml() {
        let dir = tempfile::tempdir().expect("tempdir");
        let y = dir.path().join("s.yaml");
        std::fs::write(
            &y,
            "prompt_tokens: 64\noutput_tokens: 8\nprefix_tokens: 16\n",
        )
        .expect("w");
        let j = dir.path().join("s.json");
        std::fs::write(
            &j,
            r#"{"prompt_tokens": 64, "output_tokens": 8, "prefix_tokens": 16}"#,
        )
        .expect("w");
        let a = parse_spec_file(&y, 3, RequestFormat::Chat).expect("yaml");
        assert_eq!(
            a,
            parse_spec_file(&j, 3, RequestFormat::Chat).expect("json")
        );
        assert_eq!(a.prefix_tokens, 16);
        std::fs::write(&y, "prompt_tokens: 64\ncolour: red\n").expect("w");
        let e = parse_spec_file(&y, 3, RequestFormat::Chat).expect_err("unknown key");
        assert!(e.contains("s.yaml") && e.contains("colour"), "{e}");
    }

    #[test]
    fn think_times_parse_and_draw_per_session_and_turn() {
        let spec = parse_spec(
            "turns=3,prompt_tokens=8,output_tokens=2,think_time=exp:2s",
            1,
        )
        .expect("spec");
        let t = spec.think_time.expect("think_time");
        assert_eq!((t.kind, t.mean_ns), (ThinkKind::Exponential, 2_000_000_000));
        let fixed = parse_think_time("250ms").expect("fixed");
        assert_eq!(draw_think(&fixed, 1, 7, 2), 250_000_000);
        let u = parse_think_time("uniform:1s").expect("uniform");
        let draws: Vec<u64> = (0..200).map(|s| draw_think(&u, 9, s, 1)).collect();
        assert!(draws.iter().all(|&d| d <= 2_000_000_000));
        let mean = draws.iter().sum::<u64>() as f64 / 200.0;
        assert!((0.8e9..1.2e9).contains(&mean), "{mean}");
        // Seeded by (session, turn): the same pair draws the same, another pair not.
        assert_eq!(draw_think(&u, 9, 3, 1), draw_think(&u, 9, 3, 1));
        assert_ne!(draw_think(&u, 9, 3, 1), draw_think(&u, 9, 3, 2));
        for bad in ["gamma:1s", "uniform:soon"] {
            let e = parse_think_time(bad).expect_err(bad);
            assert!(e.starts_with("think_time="), "{e}");
        }
        let e = parse_spec("prompt_tokens=8,think_time=1s", 1).expect_err("no turns");
        assert!(e.contains("needs turns"), "{e}");
    }

    #[test]
    fn session_headers_are_header_names_and_never_credentials_or_hop_by_hop() {
        let s = parse_spec(
            "turns=2,prompt_tokens=8,output_tokens=2,session_header=X-Session-Id",
            1,
        )
        .expect("a header name");
        assert_eq!(s.session_header.as_deref(), Some("x-session-id"));
        for bad in ["Authorization", "keep-alive", "cookie", "x y", "a:b", "é"] {
            let e = session_header_name(bad).expect_err(bad);
            assert!(e.starts_with("session_header="), "{e}");
        }
        // Turns of a session share one id string: a reference count per turn.
        let spec = parse_spec(
            "turns=3,prompt_tokens=8,output_tokens=2,session_header=x-s",
            1,
        )
        .expect("spec");
        let mut source = SyntheticSource::new(spec).expect("source");
        let plan = source.session(4).expect("a plan").expect("a session");
        let ids: Vec<_> = plan
            .turns
            .iter()
            .map(|t| t.request.session.clone().expect("an id"))
            .collect();
        assert_eq!(&*ids[0], "llmsurge-session-4");
        assert!(ids.iter().all(|id| Arc::ptr_eq(id, &ids[0])));
        assert!(plan.turns.iter().all(|t| t.request.user.is_none()));
    }

    #[test]
    fn system_prompts_have_their_exact_length_per_session_or_shared() {
        let spec = parse_spec(
            "turns=2,prompt_tokens=8,output_tokens=2,system_tokens=300",
            4,
        )
        .expect("spec");
        let mut source = SyntheticSource::new(spec).expect("source");
        let plan = |source: &mut SyntheticSource, id| {
            source
                .session(id)
                .expect("a plan")
                .expect("session")
                .system
                .expect("a system prompt")
        };
        let tok = Tokenizer::load(&TokenizerRef::Builtin(
            super::super::tokenizer::DEFAULT_PROCESSOR.into(),
        ))
        .expect("the default tokenizer");
        let (a, b) = (plan(&mut source, 0), plan(&mut source, 1));
        assert_ne!(a, b, "each session its own");
        assert_eq!(a, plan(&mut source, 0), "deterministic in the session");
        for text in [&a, &b] {
            assert_eq!(tok.count(text), 300);
        }
        let shared = parse_spec(
            "turns=2,prompt_tokens=8,output_tokens=2,system_tokens=40,system_shared=true",
            4,
        )
        .expect("spec");
        let mut source = SyntheticSource::new(shared).expect("source");
        let a = plan(&mut source, 0);
        assert_eq!(a, plan(&mut source, 7));
        assert_eq!(tok.count(&a), 40);
        for (bad, says) in [
            (
                "prompt_tokens=8,output_tokens=2,system_tokens=10",
                "system_tokens needs turns",
            ),
            (
                "turns=2,prompt_tokens=8,output_tokens=2,system_shared=true",
                "system_shared needs system_tokens",
            ),
            (
                "turns=2,prompt_tokens=8,output_tokens=2,system_tokens=9,system_shared=maybe",
                "expected true or false",
            ),
        ] {
            let e = parse_spec(bad, 1).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_session_offering_tools_plans_a_result_of_its_length_per_turn() {
        let tok = Tokenizer::load(&TokenizerRef::Builtin("cl100k_base".into())).expect("tokenizer");
        let results = |spec: &str| {
            let mut source =
                SyntheticSource::new(parse_spec(spec, 3).expect(spec)).expect("source");
            let plan = source.session(0).expect("plan").expect("session");
            plan.turns
                .into_iter()
                .map(|t| t.tool_result.map(|r| tok.count(&r)))
                .collect::<Vec<_>>()
        };
        let base = "turns=2,prompt_tokens=8,output_tokens=2";
        assert_eq!(
            results(&format!("{base},tools=1,tool_result_tokens=30")),
            [Some(30); 2]
        );
        let default = Some(DEFAULT_TOOL_RESULT_TOKENS as usize);
        assert_eq!(results(&format!("{base},tools=1")), [default; 2]);
        assert_eq!(results(base), [None; 2]);
        for bad in [
            format!("{base},tool_result_tokens=30"),
            "prompt_tokens=8,output_tokens=2,tools=1,tool_result_tokens=30".to_string(),
        ] {
            let e = parse_spec(&bad, 1).expect_err(&bad);
            assert!(
                e.contains("tool_result_tokens needs turns and tools"),
                "{bad}: {e}"
            );
        }
    }
}
