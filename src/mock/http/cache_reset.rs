//! The cache-reset endpoints of vLLM (`POST /reset_prefix_cache`, `/reset_mm_cache`)
//! and SGLang (`POST /flush_cache`): a reset empties the mock's prefix cache (the
//! multimodal one has nothing to empty) and is counted in `/stats` (`cache_resets`).

use super::app::App;
use super::body::MockBody;
use bytes::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Response, StatusCode};

/// The cache-reset endpoint `path` is, as `/stats` `cache_resets` orders them (0
/// `/reset_prefix_cache`, 1 `/reset_mm_cache`, 2 `/flush_cache`); `None` for another path.
pub fn which(path: &str) -> Option<usize> {
    match path {
        "/reset_prefix_cache" => Some(0),
        "/reset_mm_cache" => Some(1),
        "/flush_cache" => Some(2),
        _ => None,
    }
}

/// The answer to a cache reset, or `None` when `path` is not one (or not a POST, which
/// the router then answers as any unknown request).
pub fn answer(app: &App, method: &Method, path: &str) -> Option<Response<MockBody>> {
    let which = which(path)?;
    // vLLM answers 200 with an empty body; SGLang says so in words.
    let body = if which == 2 { "Cache flushed.\n" } else { "" };
    if method != Method::POST {
        return None;
    }
    if which != 1 {
        app.prefix_cache.clear();
    }
    app.counters.cache_reset(which);
    let mut response = Response::new(MockBody::full(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Some(response)
}
