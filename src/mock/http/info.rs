//! What the mock says about itself, the ways vLLM does: `GET /version`
//! (`{"version": …}`) and `GET /server_info` (vLLM's configuration as JSON: the model,
//! its length and the cache configuration). Both are answered uncounted, like `/metrics`,
//! so a client reading a server's fingerprint never looks like benchmark traffic.

use super::app::{App, to_json};
use super::body::MockBody;
use crate::mock::model::prefix_cache::BLOCK_TOKENS;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Response, StatusCode};
use serde_json::json;

/// The answer to `GET /version` or `GET /server_info`; `None` for another request.
pub fn answer(app: &App, method: &Method, path: &str) -> Option<Response<MockBody>> {
    if method != Method::GET {
        return None;
    }
    let c = &app.config;
    let body = match path {
        "/version" => json!({ "version": c.engine_version }),
        "/server_info" => json!({
            "vllm_config": {
                "model_config": {
                    "model": c.model_root.as_deref().unwrap_or(c.primary_model()),
                    "served_model_name": c.primary_model(),
                    "max_model_len": c.max_model_len,
                },
                "cache_config": {
                    "block_size": BLOCK_TOKENS,
                    "enable_prefix_caching": c.prefix_caching,
                    "cache_dtype": "auto",
                },
                "lora_config": (!c.lora_adapters.is_empty()).then(|| json!({
                    "max_loras": c.lora_adapters.len(),
                })),
            }
        }),
        _ => return None,
    };
    let mut response = Response::new(MockBody::full(to_json(&body)));
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Some(response)
}
