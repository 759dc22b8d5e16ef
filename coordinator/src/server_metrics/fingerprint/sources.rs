//! Where each server kind publishes each fact of its fingerprint: one row per server
//! kind and source. docs/report.md lists the same table for users. Adding a server (or a
//! renamed key) is adding rows here.

/// How a published value becomes a fact's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// As published.
    Plain,
    /// A boolean that states the opposite (SGLang's `disable_radix_cache` is prefix
    /// caching off).
    Negated,
}

/// A fact read from a JSON endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JsonRow {
    /// The server that answers it this way (`vllm`, `sglang`, `tgi`).
    pub server: &'static str,
    /// The path asked (`GET`), relative to the target's base URL.
    pub path: &'static str,
    /// The value's JSON pointer in the answer.
    pub pointer: &'static str,
    /// The fingerprint field (`engine_version`, `model_root`, `max_model_len`, or a
    /// configuration key).
    pub field: &'static str,
    /// How it is read.
    pub read: Read,
}

const fn row(
    server: &'static str,
    path: &'static str,
    pointer: &'static str,
    field: &'static str,
    read: Read,
) -> JsonRow {
    JsonRow {
        server,
        path,
        pointer,
        field,
        read,
    }
}

/// vLLM's server-info endpoint, asked for its configuration as JSON.
pub const VLLM_SERVER_INFO: &str = "/server_info?config_format=json";

/// Every JSON source, in the order a field is looked for (the first answer wins).
pub const JSON_ROWS: &[JsonRow] = &[
    // vLLM: `GET /version`, and `GET /server_info` where it is served.
    row(
        "vllm",
        "/version",
        "/version",
        "engine_version",
        Read::Plain,
    ),
    row(
        "vllm",
        VLLM_SERVER_INFO,
        "/vllm_config/model_config/model",
        "model_root",
        Read::Plain,
    ),
    row(
        "vllm",
        VLLM_SERVER_INFO,
        "/vllm_config/model_config/max_model_len",
        "max_model_len",
        Read::Plain,
    ),
    row(
        "vllm",
        VLLM_SERVER_INFO,
        "/vllm_config/cache_config/block_size",
        "block_size",
        Read::Plain,
    ),
    row(
        "vllm",
        VLLM_SERVER_INFO,
        "/vllm_config/cache_config/enable_prefix_caching",
        "enable_prefix_caching",
        Read::Plain,
    ),
    row(
        "vllm",
        VLLM_SERVER_INFO,
        "/vllm_config/cache_config/cache_dtype",
        "cache_dtype",
        Read::Plain,
    ),
    row(
        "vllm",
        VLLM_SERVER_INFO,
        "/vllm_config/scheduler_config/enable_chunked_prefill",
        "enable_chunked_prefill",
        Read::Plain,
    ),
    // SGLang: `GET /get_server_info` (its server arguments, and its version).
    row(
        "sglang",
        "/get_server_info",
        "/version",
        "engine_version",
        Read::Plain,
    ),
    row(
        "sglang",
        "/get_server_info",
        "/model_path",
        "model_root",
        Read::Plain,
    ),
    row(
        "sglang",
        "/get_server_info",
        "/context_length",
        "max_model_len",
        Read::Plain,
    ),
    row(
        "sglang",
        "/get_server_info",
        "/page_size",
        "block_size",
        Read::Plain,
    ),
    row(
        "sglang",
        "/get_server_info",
        "/disable_radix_cache",
        "enable_prefix_caching",
        Read::Negated,
    ),
    row(
        "sglang",
        "/get_server_info",
        "/kv_cache_dtype",
        "cache_dtype",
        Read::Plain,
    ),
    row(
        "sglang",
        "/get_server_info",
        "/chunked_prefill_size",
        "chunked_prefill_size",
        Read::Plain,
    ),
    // Text Generation Inference: `GET /info`.
    row("tgi", "/info", "/version", "engine_version", Read::Plain),
    row("tgi", "/info", "/model_id", "model_root", Read::Plain),
    row("tgi", "/info", "/model_sha", "model_sha", Read::Plain),
    row(
        "tgi",
        "/info",
        "/max_total_tokens",
        "max_model_len",
        Read::Plain,
    ),
];

/// A series whose labels carry configuration (an "info" gauge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InfoSeries {
    /// The server that publishes it.
    pub server: &'static str,
    /// Its name.
    pub series: &'static str,
    /// The labels kept, each under its fingerprint key; `None` keeps every label
    /// (but the model's name, which is not configuration).
    pub labels: Option<&'static [(&'static str, &'static str)]>,
}

/// Configuration published as metrics.
pub const INFO_SERIES: &[InfoSeries] = &[
    InfoSeries {
        server: "vllm",
        series: "vllm:cache_config_info",
        labels: None,
    },
    InfoSeries {
        server: "vllm",
        series: "vllm:lora_requests_info",
        labels: Some(&[("max_lora", "max_lora")]),
    },
];

/// The paths of the JSON sources, each once, in table order.
pub fn json_paths() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in JSON_ROWS {
        if !out.contains(&r.path) {
            out.push(r.path);
        }
    }
    out
}

/// The server a JSON source's path belongs to, when only one kind answers it.
pub fn server_of_path(path: &str) -> Option<&'static str> {
    JSON_ROWS.iter().find(|r| r.path == path).map(|r| r.server)
}
