//! Reading a server's fingerprint: a few GETs at once (the model list, the JSON sources
//! of [`super::sources`], `/metrics`), each bounded in time and size. A source that does
//! not answer, answers an error or answers garbage leaves its facts unknown with the
//! reason; nothing here can hang a run or fail it. Only the `server` response header is
//! kept, never a request's own headers (which carry the credentials).

use super::sources::{INFO_SERIES, JSON_ROWS, Read, json_paths, server_of_path};
use super::{CONFIG_KEYS, Fact, Reading};
use crate::server_metrics::ScrapeConfig;
use crate::server_metrics::parse::labels_and_gauges;
use crate::server_metrics::servers::recognise;
use llmsurge_proto::{Secret, http, limits};
use std::collections::BTreeMap;
use std::time::Duration;

/// The longest value kept of a fact (a server's text is untrusted).
const MAX_VALUE_CHARS: usize = 200;

/// The bound on each request of a reading.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// What a reading needs.
pub struct ReadConfig {
    /// The URL of a path of the target (the run's query parameters added, no user and
    /// password in it).
    pub url_of: Box<dyn Fn(&str) -> String + Send + Sync>,
    /// The target's credentials (sent, never kept).
    pub headers: Vec<(String, Secret)>,
    /// The model the run asks for.
    pub model: String,
    /// Where `/metrics` is scraped, when the run scrapes it.
    pub metrics: Option<ScrapeConfig>,
    /// The run's TLS settings.
    pub tls: http::TlsConfig,
    /// `--http2`: h2c with prior knowledge on `http://`.
    pub http2: bool,
    /// Bound on each request.
    pub timeout: Duration,
}

impl std::fmt::Debug for ReadConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadConfig")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// Where a reading gets a source's answer.
#[derive(Clone, Debug)]
pub enum Source<T> {
    /// Asked now.
    Fetch,
    /// Already asked by the run (the target check's model list, the metrics probe's
    /// page): the answer, or why there is none.
    Given(Result<T, String>),
    /// Not read, and why.
    Skip(String),
}

/// The answers a reading starts from: what the run asked already is not asked twice.
#[derive(Clone, Debug)]
pub struct Prefetched {
    /// `GET /v1/models`, parsed, with its `server` header.
    pub models: Source<(serde_json::Value, Option<String>)>,
    /// `GET /metrics`, as text.
    pub metrics: Source<String>,
}

/// A value cut to [`MAX_VALUE_CHARS`], on one line; `True`/`False` (Python's spelling,
/// vLLM's labels) as `true`/`false`.
fn clean(value: &str) -> String {
    let one: String = value
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_VALUE_CHARS)
        .collect();
    let scrubbed = llmsurge_proto::redact::scrub(one.trim()).into_owned();
    match scrubbed.as_str() {
        "True" => "true".into(),
        "False" => "false".into(),
        _ => scrubbed,
    }
}

/// A JSON value as a fact's value: strings as they are, numbers and booleans written.
fn json_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(clean(s)),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        other => Some(clean(&other.to_string())),
    }
}

/// One GET's answer: the body and the `server` header, or why there is none.
async fn get(
    client: &reqwest::Client,
    cfg: &ReadConfig,
    path: &str,
    limit: usize,
) -> Result<(Vec<u8>, Option<String>), String> {
    let url = (cfg.url_of)(path);
    let fetch = async {
        let mut request = client.get(&url);
        for (name, value) in &cfg.headers {
            request = request.header(name.as_str(), value.expose());
        }
        let response = request.send().await.map_err(|e| {
            http::connect_problem(&e).map_or_else(|| http::root_cause(&e), |p| p.line())
        })?;
        let server = response
            .headers()
            .get(reqwest::header::SERVER)
            .map(|v| clean(&String::from_utf8_lossy(v.as_bytes())));
        let status = response.status();
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        let body = http::read_limited(response, limit)
            .await
            .map_err(|e| format!("the answer is unreadable ({e})"))?;
        Ok((body, server))
    };
    tokio::time::timeout(cfg.timeout, fetch)
        .await
        .map_err(|_| format!("no answer within {}s", cfg.timeout.as_secs_f64()))?
}

/// A JSON object's answer, or why not.
async fn get_json(
    client: &reqwest::Client,
    cfg: &ReadConfig,
    path: &str,
) -> (Result<serde_json::Value, String>, Option<String>) {
    match get(client, cfg, path, limits::SMALL_ANSWER).await {
        Ok((body, server)) => {
            let parsed = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .filter(serde_json::Value::is_object)
                .ok_or_else(|| "the answer is not a JSON object".to_string());
            (parsed, server)
        }
        Err(e) => (Err(e), None),
    }
}

/// The facts of the model list: the asked model's root and length, its adapters.
fn models_facts(r: &mut Reading, list: &Result<serde_json::Value, String>, model: &str) {
    const SOURCE: &str = "GET /v1/models";
    let cards = match list {
        Ok(v) => v.get("data").and_then(|d| d.as_array()),
        Err(_) => None,
    };
    let Some(cards) = cards else {
        let why = match list {
            Err(e) => format!("{SOURCE}: {e}"),
            Ok(_) => format!("{SOURCE}: no `data` list in the answer"),
        };
        r.model = Fact::unknown(why.clone());
        r.model_root = Fact::unknown(why.clone());
        r.max_model_len = Fact::unknown(why.clone());
        r.lora_adapters = Fact::unknown(why);
        return;
    };
    let Some(card) = cards
        .iter()
        .find(|c| c.get("id").and_then(|i| i.as_str()) == Some(model))
    else {
        let why = format!("{SOURCE}: the list does not have the model {model:?}");
        r.model = Fact::unknown(why.clone());
        r.model_root = Fact::unknown(why.clone());
        r.max_model_len = Fact::unknown(why.clone());
        r.lora_adapters = Fact::unknown(why);
        return;
    };
    let field = |key: &str| match card.get(key).and_then(json_text) {
        Some(v) => Fact::known(v, SOURCE),
        None => Fact::unknown(format!("{SOURCE}: no `{key}` for the model")),
    };
    r.model = Fact::known(clean(model), SOURCE);
    r.model_root = field("root");
    r.max_model_len = field("max_model_len");
    // vLLM lists each adapter with its base model as `parent` (null for a base model).
    r.lora_adapters = if cards.iter().any(|c| c.get("parent").is_some()) {
        let mut adapters: Vec<String> = cards
            .iter()
            .filter(|c| c.get("parent").and_then(|p| p.as_str()) == Some(model))
            .filter_map(|c| c.get("id").and_then(|i| i.as_str()).map(clean))
            .collect();
        adapters.sort();
        let list = if adapters.is_empty() {
            "none".to_string()
        } else {
            adapters.join(",")
        };
        Fact::known(list, SOURCE)
    } else {
        Fact::unknown(format!("{SOURCE}: the list names no model's `parent`"))
    };
}

/// Reads the server now, from `pre` where the run already asked. Never fails: what
/// cannot be read is unknown, with why.
pub async fn read(cfg: &ReadConfig, pre: Prefetched) -> Reading {
    let mut r = Reading {
        read_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        ..Reading::default()
    };
    let base = (cfg.url_of)("/");
    let client = match http::client_builder(&base, &cfg.tls)
        .map_err(|e| e.to_string())
        .and_then(|b| {
            http::http2_when(b, cfg.http2)
                .connect_timeout(cfg.timeout)
                .build()
                .map_err(|e| e.to_string())
        }) {
        Ok(c) => c,
        Err(e) => {
            let why = format!("no HTTP client ({e})");
            return unknown_all(r, &why);
        }
    };
    let metrics = async {
        match (pre.metrics, &cfg.metrics) {
            (Source::Given(page), _) => Ok(page),
            (Source::Fetch, Some(m)) => {
                Ok(crate::server_metrics::probe(m).await.map_err(|e| e.message))
            }
            (Source::Fetch, None) => Err("not scraped by this run".to_string()),
            (Source::Skip(why), _) => Err(why),
        }
    };
    let models = async {
        match pre.models {
            Source::Fetch => get_json(&client, cfg, "/v1/models").await,
            Source::Given(Ok((list, server))) => (Ok(list), server.as_deref().map(clean)),
            Source::Given(Err(e)) => (Err(e), None),
            Source::Skip(why) => (Err(why), None),
        }
    };
    let (models, metrics) = tokio::join!(models, metrics);
    // Only the engine's own endpoints when its metrics name it (another engine's path
    // would be a 404 in its logs); every engine's when they do not.
    let known = match &metrics {
        Ok(Ok(body)) => crate::server_metrics::parse::parse(body, None)
            .ok()
            .and_then(|p| p.server),
        _ => None,
    };
    let paths: Vec<&'static str> = json_paths()
        .into_iter()
        .filter(|p| known.is_none_or(|k| server_of_path(p) == Some(k)))
        .collect();
    let answers =
        futures_util::future::join_all(paths.iter().map(|p| get_json(&client, cfg, p))).await;
    r.server_header = models
        .1
        .clone()
        .or_else(|| answers.iter().find_map(|(_, s)| s.clone()))
        .map_or_else(
            || Fact::unknown("no answer carried a `server` header"),
            |s| Fact::known(s, "response header server"),
        );
    models_facts(&mut r, &models.0, &cfg.model);
    let answers: BTreeMap<&str, &Result<serde_json::Value, String>> = paths
        .iter()
        .copied()
        .zip(answers.iter().map(|(a, _)| a))
        .collect();
    // Configuration published as metrics first: it is what the engine runs with.
    let mut engine: Option<(String, String)> = None;
    let mut config: BTreeMap<String, Fact> = BTreeMap::new();
    let metrics_why = match &metrics {
        Err(why) => why.clone(),
        Ok(Err(e)) => format!("GET /metrics: {e}"),
        Ok(Ok(body)) => {
            metrics_facts(&mut r, body, &mut config, &mut engine);
            "not in /metrics".to_string()
        }
    };
    // Then the JSON sources, each field from the first row that answers it.
    for row in JSON_ROWS {
        let Some(Ok(answer)) = answers.get(row.path) else {
            continue;
        };
        let Some(mut value) = answer.pointer(row.pointer).and_then(json_text) else {
            continue;
        };
        if row.read == Read::Negated {
            value = match value.as_str() {
                "true" => "false".into(),
                "false" => "true".into(),
                _ => continue,
            };
        }
        let source = format!("GET {}", row.path.split('?').next().unwrap_or(row.path));
        if row.path != "/version" && engine.is_none() {
            engine = server_of_path(row.path).map(|s| (s.to_string(), source.clone()));
        }
        let fact = Fact::known(value, source);
        let slot = match row.field {
            "engine_version" => &mut r.engine_version,
            "model_root" => &mut r.model_root,
            "max_model_len" => &mut r.max_model_len,
            key => config.entry(key.to_string()).or_default(),
        };
        if slot.value.is_none() {
            *slot = fact;
        }
    }
    let json_why = {
        let tried: Vec<String> = paths
            .iter()
            .map(|p| {
                let shown = p.split('?').next().unwrap_or(p);
                match answers.get(p) {
                    Some(Err(e)) => format!("{shown}: {e}"),
                    _ => format!("{shown}: not in the answer"),
                }
            })
            .collect();
        tried.join("; ")
    };
    if r.engine_version.value.is_none() {
        r.engine_version = Fact::unknown(json_why.clone());
    }
    for key in CONFIG_KEYS {
        let fact = config.entry(key.to_string()).or_default();
        if fact.value.is_none() {
            *fact = Fact::unknown(format!("metrics: {metrics_why}; {json_why}"));
        }
    }
    config.retain(|_, f| f.value.is_some() || f.reason.as_deref() != Some("not read"));
    r.config = config;
    r.engine = match engine {
        Some((name, source)) => Fact::known(name, source),
        None => Fact::unknown(format!(
            "no engine's metrics or server-info answer ({metrics_why})"
        )),
    };
    for fact in [
        &mut r.process_start_time,
        &mut r.requests_served,
        &mut r.prefix_cache_hits,
        &mut r.prefix_cache_queries,
    ] {
        if fact.value.is_none() {
            *fact = Fact::unknown(format!("metrics: {metrics_why}"));
        }
    }
    unknown_unless_numbers(&mut r);
    r
}

/// A count or an instant the server wrote as something else (`-5`, `=1+1`, `NaN`) is no
/// value of it: unknown, with what was written.
fn unknown_unless_numbers(r: &mut Reading) {
    for fact in [
        &mut r.max_model_len,
        &mut r.process_start_time,
        &mut r.requests_served,
        &mut r.prefix_cache_hits,
        &mut r.prefix_cache_queries,
    ] {
        if let Some(v) = &fact.value
            && !v.parse::<f64>().is_ok_and(|x| x.is_finite() && x >= 0.0)
        {
            *fact = Fact::unknown(format!(
                "{}: {:?} is not a non-negative number",
                fact.source, v
            ));
        }
    }
}

/// The most configuration labels kept of one metric (a server chooses how many it
/// publishes; the report must not grow with them).
const MAX_CONFIG_LABELS: usize = 32;

/// The facts `/metrics` holds: configuration labels, the start time, the counters.
fn metrics_facts(
    r: &mut Reading,
    body: &str,
    config: &mut BTreeMap<String, Fact>,
    engine: &mut Option<(String, String)>,
) {
    let series: Vec<&str> = INFO_SERIES.iter().map(|s| s.series).collect();
    let (labels, gauges) = labels_and_gauges(body, &series, &["process_start_time_seconds"]);
    for info in INFO_SERIES {
        let Some(set) = labels.get(info.series) else {
            continue;
        };
        let source = format!("metric {}", info.series);
        let kept: Vec<(&str, &str)> = match info.labels {
            Some(list) => list.to_vec(),
            None => set
                .keys()
                .filter(|k| !matches!(k.as_str(), "model_name" | "engine"))
                .filter(|k| k.len() <= MAX_VALUE_CHARS)
                .take(MAX_CONFIG_LABELS)
                .map(|k| (k.as_str(), k.as_str()))
                .collect(),
        };
        for (label, key) in kept {
            if let Some(v) = set.get(label) {
                config
                    .entry(key.to_string())
                    .or_insert_with(|| Fact::known(clean(v), source.clone()));
            }
        }
    }
    if let Some(v) = gauges.get("process_start_time_seconds") {
        r.process_start_time = Fact::known(v.to_string(), "metric process_start_time_seconds");
    }
    // The counters under llmsurge's names, through the one server table.
    if let Ok(parsed) = crate::server_metrics::parse::parse(body, None) {
        if let Some(server) = parsed.server {
            *engine = Some((server.to_string(), format!("metric names {server}:*")));
        }
        let series_of = |name: &str| {
            crate::server_metrics::servers::ROWS
                .iter()
                .find(|row| Some(row.server) == parsed.server && row.name == name)
                .map_or_else(|| name.to_string(), |row| row.series.to_string())
        };
        for (name, fact) in [
            ("request_success", &mut r.requests_served),
            ("prefix_cache_hits", &mut r.prefix_cache_hits),
            ("prefix_cache_queries", &mut r.prefix_cache_queries),
        ] {
            if let Some(&(_, v)) = parsed.values.get(name) {
                *fact = Fact::known(v.to_string(), format!("metric {}", series_of(name)));
            }
        }
    } else if let Some(server) = recognise(labels.keys().map(String::as_str)) {
        *engine = Some((server.to_string(), format!("metric names {server}:*")));
    }
}

/// Every fact unknown for one reason.
fn unknown_all(mut r: Reading, why: &str) -> Reading {
    for fact in [
        &mut r.engine,
        &mut r.engine_version,
        &mut r.server_header,
        &mut r.model,
        &mut r.model_root,
        &mut r.max_model_len,
        &mut r.lora_adapters,
        &mut r.process_start_time,
        &mut r.requests_served,
        &mut r.prefix_cache_hits,
        &mut r.prefix_cache_queries,
    ] {
        *fact = Fact::unknown(why);
    }
    for key in CONFIG_KEYS {
        r.config.insert(key.into(), Fact::unknown(why));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_values_are_cut_to_one_short_line() {
        let long = format!("0.9\u{1b}[31m\n{}", "x".repeat(5000));
        let v = clean(&long);
        assert!(v.chars().count() <= MAX_VALUE_CHARS, "{}", v.len());
        assert!(!v.chars().any(char::is_control), "{v:?}");
        assert_eq!(clean("True"), "true");
        assert_eq!(json_text(&serde_json::json!(16)).as_deref(), Some("16"));
        assert_eq!(json_text(&serde_json::Value::Null), None);
    }

    #[test]
    fn a_model_list_that_is_not_one_leaves_its_facts_unknown_with_the_reason() {
        let mut r = Reading::default();
        models_facts(&mut r, &Ok(serde_json::json!({"data": "nope"})), "m");
        assert_eq!(r.model.source, "unknown");
        assert!(
            r.model_root
                .reason
                .as_deref()
                .is_some_and(|w| w.contains("no `data` list"))
        );
        let list = serde_json::json!({"data": [{"id": "other"}]});
        models_facts(&mut r, &Ok(list), "m");
        assert!(
            r.max_model_len
                .reason
                .as_deref()
                .is_some_and(|w| w.contains("does not have the model"))
        );
        // No `parent` field anywhere: adapters unknown, not "none".
        let list = serde_json::json!({"data": [{"id": "m", "root": "/w", "max_model_len": 8}]});
        models_facts(&mut r, &Ok(list), "m");
        assert_eq!(r.model_root.shown(), "/w");
        assert_eq!(r.lora_adapters.source, "unknown");
    }

    #[test]
    fn configuration_labels_and_the_start_time_are_read_from_metrics() {
        let body = "# TYPE vllm:cache_config_info gauge\n\
            vllm:cache_config_info{block_size=\"32\",enable_prefix_caching=\"False\",model_name=\"m\"} 1\n\
            process_start_time_seconds 1700000000.5\n\
            vllm:request_success_total{finished_reason=\"stop\"} 3\n";
        let (mut r, mut config, mut engine) = (Reading::default(), BTreeMap::new(), None);
        metrics_facts(&mut r, body, &mut config, &mut engine);
        assert_eq!(config["block_size"].shown(), "32");
        assert_eq!(config["enable_prefix_caching"].shown(), "false");
        assert!(!config.contains_key("model_name"), "{config:?}");
        assert_eq!(r.process_start_time.number(), Some(1_700_000_000.5));
        assert_eq!(r.requests_served.number(), Some(3.0));
        assert_eq!(engine.map(|e| e.0).as_deref(), Some("vllm"));
    }

    #[test]
    fn a_flood_of_labels_keeps_a_bounded_few() {
        let labels: Vec<String> = (0..500).map(|i| format!("k{i:03}=\"{i}\"")).collect();
        let body = format!("vllm:cache_config_info{{{}}} 1\n", labels.join(","));
        let (mut r, mut config, mut engine) = (Reading::default(), BTreeMap::new(), None);
        metrics_facts(&mut r, &body, &mut config, &mut engine);
        assert_eq!(config.len(), MAX_CONFIG_LABELS, "{}", config.len());
    }

    #[test]
    fn counts_that_are_no_numbers_are_unknown_with_what_was_written() {
        let mut r = Reading {
            max_model_len: Fact::known("=1+1", "GET /v1/models"),
            requests_served: Fact::known("-5", "metric vllm:request_success_total"),
            prefix_cache_hits: Fact::known("NaN", "metric vllm:prefix_cache_hits_total"),
            prefix_cache_queries: Fact::known("12", "metric vllm:prefix_cache_queries_total"),
            ..Reading::default()
        };
        unknown_unless_numbers(&mut r);
        for f in [&r.max_model_len, &r.requests_served, &r.prefix_cache_hits] {
            assert!(
                f.value.is_none()
                    && f.reason
                        .as_deref()
                        .is_some_and(|w| w.contains("not a non-negative number")),
                "{f:?}"
            );
        }
        assert_eq!(r.prefix_cache_queries.number(), Some(12.0));
    }
}
