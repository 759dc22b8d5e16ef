//! The cache-reset endpoints of vLLM (`POST /reset_prefix_cache`, `/reset_mm_cache`)
//! and SGLang (`POST /flush_cache`): a reset empties the mock's prefix cache (the
//! multimodal one has nothing to empty) and is counted in `/stats` (`cache_resets`).

use super::app::App;
use super::body::MockBody;
use bytes::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Response, StatusCode};

/// The answer to a cache reset, or `None` when `path` is not one (or not a POST, which
/// the router then answers as any unknown request).
pub fn answer(app: &App, method: &Method, path: &str) -> Option<Response<MockBody>> {
    let (which, body): (usize, &'static str) = match path {
        // vLLM answers 200 with an empty body.
        "/reset_prefix_cache" => (0, ""),
        "/reset_mm_cache" => (1, ""),
        // SGLang says so in words.
        "/flush_cache" => (2, "Cache flushed.\n"),
        _ => return None,
    };
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
