//! The state every connection shares: the configuration, the model, the counters, the
//! prefix cache, the concurrency slots and the record and truth writers. It sits below
//! the streaming body, the handler and `/metrics`, which all read it.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::mock::config::MockConfig;
use crate::mock::model::plan::Model;
use crate::mock::model::prefix_cache::PrefixCache;
use crate::mock::model::record::Recorder;
use crate::mock::model::stats::Counters;
use crate::mock::model::truth::TruthWriter;

/// The accepted connection a request came on, numbered from 0 in accept order (the
/// record's `connection`), handed to the handler with each request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionId(pub u64);

/// Everything the connections share.
#[derive(Debug)]
pub struct App {
    /// The validated configuration.
    pub config: MockConfig,
    /// The latency, length and fault model.
    pub model: Model,
    /// What the server saw.
    pub counters: Counters,
    /// The prefix-cache model of generation prompts.
    pub prefix_cache: Arc<PrefixCache>,
    /// Concurrency slots; `None` is unlimited.
    pub semaphore: Option<Arc<Semaphore>>,
    /// Sequence number of the next generation or embedding request.
    pub(super) seq: AtomicU64,
    /// `GET /metrics` requests answered so far (never reset: `--metrics-fault-after`
    /// counts from the start).
    pub scrapes: AtomicU64,
    /// When the server started: `--dcgm-gpus`' energy counters count from here.
    pub started: std::time::Instant,
    /// The same instant in Unix seconds: `process_start_time_seconds`, which changes
    /// when the server is restarted.
    pub started_unix: f64,
    /// Turns true when the server stops, to end what waits forever on purpose (a hung
    /// scrape) instead of holding the shutdown for its whole grace period.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// `--record`: the main server's only (probes are not recorded, as they are not
    /// counted).
    pub recorder: Option<Arc<Recorder>>,
    /// `--truth`: the main server's only (probes have no request id and count nowhere).
    pub truth: Option<Arc<TruthWriter>>,
    /// Served model names, JSON-quoted once.
    pub(super) model_json: Vec<String>,
    /// The `/v1/models` body.
    pub(super) models_body: Bytes,
    /// Serves requests marked with [`crate::mock::config::PROBE_HEADER`]: the same settings without
    /// faults, its own counters and sequence, the main server's prefix cache (`None` in
    /// the twin itself).
    pub(super) probe_twin: Option<Arc<App>>,
    /// The id of the next accepted connection (the record's `connection`).
    pub next_connection: AtomicU64,
    /// `--issue-session-token`: the number of the next token handed out.
    pub next_token: AtomicU64,
    /// The `server` header every answer carries, built once (a clone shares its bytes).
    pub server_header: hyper::header::HeaderValue,
}

#[derive(Serialize)]
struct ModelList<'a> {
    object: &'static str,
    data: Vec<ModelCard<'a>>,
}

#[derive(Serialize)]
struct ModelCard<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
    /// What the name serves: the model's path or hub id (`--model-root`), or a LoRA
    /// adapter's path, as vLLM lists it.
    root: &'a str,
    /// A LoRA adapter's base model (vLLM's field); null for a base model.
    parent: Option<&'a str>,
    max_model_len: u32,
}

/// Seconds since the Unix epoch, for the `created` fields.
pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `value` as JSON bytes.
pub(super) fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Our own plain structs always serialize; an empty object beats a panic.
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}

/// The probe twin's first sequence number (its ids, `chatcmpl-0001000000000000`, never
/// meet the server's own).
const PROBE_SEQ_START: u64 = 1 << 48;

impl App {
    /// Shared state for a validated configuration.
    pub fn new(config: MockConfig) -> Self {
        let twin = MockConfig {
            error_rate: 0.0,
            drop_rate: 0.0,
            garbage_rate: 0.0,
            stall_rate: 0.0,
            ..config.clone()
        };
        let mut app = Self::without_twin(config);
        // One cache, as a real server has: a probe's prompt warms it for the load.
        let mut probe_twin = Self::without_twin(twin);
        probe_twin.prefix_cache = Arc::clone(&app.prefix_cache);
        // Response ids come from the sequence: the twin's start far from the server's,
        // so a gateway that stores answers by id (Llama Stack) never sees one twice.
        probe_twin.seq = AtomicU64::new(PROBE_SEQ_START);
        app.probe_twin = Some(Arc::new(probe_twin));
        app
    }

    fn without_twin(config: MockConfig) -> Self {
        let created = unix_now();
        let list = ModelList {
            object: "list",
            data: config
                .model
                .iter()
                .map(|id| {
                    let adapter = config.lora_adapters.iter().find(|(name, _)| name == id);
                    ModelCard {
                        id,
                        object: "model",
                        created,
                        owned_by: "llmsurge",
                        root: match adapter {
                            Some((_, path)) => path,
                            None => config.model_root.as_deref().unwrap_or(id),
                        },
                        parent: adapter.map(|_| config.primary_model()),
                        max_model_len: config.max_model_len,
                    }
                })
                .collect(),
        };
        let models_body = Bytes::from(to_json(&list));
        let model_json = config
            .model
            .iter()
            .map(|m| String::from_utf8(to_json(m)).unwrap_or_default())
            .collect();
        App {
            server_header: server_header(&config),
            model: Model::new(&config),
            counters: Counters::with_models(&config.model),
            prefix_cache: Arc::new(PrefixCache::split(
                config.kv_cache_tokens,
                match config.prefix_cache_by {
                    Some(_) => config.replicas as usize,
                    None => 1,
                },
            )),
            next_connection: AtomicU64::new(0),
            next_token: AtomicU64::new(0),
            semaphore: config.max_concurrency.map(|n| Arc::new(Semaphore::new(n))),
            seq: AtomicU64::new(0),
            scrapes: AtomicU64::new(0),
            started: std::time::Instant::now(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            stopping: tokio::sync::watch::Sender::new(false),
            model_json,
            models_body,
            config,
            probe_twin: None,
            recorder: None,
            truth: None,
        }
    }
}

/// The `server` response header every answer carries, as a real server's does (built
/// once, into [`App::server_header`]).
fn server_header(config: &MockConfig) -> hyper::header::HeaderValue {
    use hyper::header::HeaderValue;
    // Validated as printable ASCII, so this cannot fail; a plain name if it ever did.
    HeaderValue::from_str(&format!("llmsurge-mock/{}", config.engine_version))
        .unwrap_or_else(|_| HeaderValue::from_static("llmsurge-mock"))
}
