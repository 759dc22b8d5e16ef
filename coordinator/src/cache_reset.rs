//! `--reset-cache`: empty the server's caches before a benchmark, so one benchmark's
//! prompts do not warm the next one's prefix cache.
//!
//! `auto` reads the server's `/metrics` to tell what it is (the same recognition as
//! `--server-metrics`) and POSTs vLLM's `/reset_prefix_cache` and `/reset_mm_cache`, or
//! SGLang's `/flush_cache`; a server it does not recognise gets nothing. A path POSTs
//! that path only. Every answer is kept for the report; a failure is never fatal.

use crate::server_metrics::parse::parse;
use llmsurge_proto::http::TlsConfig;
use llmsurge_proto::{Secret, limits};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What to reset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResetMode {
    /// The endpoints of the server `/metrics` names.
    Auto,
    /// POST this path (e.g. `/reset_prefix_cache`).
    Path(String),
}

/// How to reach the server and what to reset.
#[derive(Clone, Debug)]
pub struct CacheResetConfig {
    /// Auto or a path.
    pub mode: ResetMode,
    /// The target's origin (scheme, host, port).
    pub origin: String,
    /// The target's credentials.
    pub headers: Vec<(String, Secret)>,
    /// Bound on each call.
    pub timeout: Duration,
    /// The run's TLS settings.
    pub tls: TlsConfig,
    /// `--http2`: h2c with prior knowledge on `http://`.
    pub http2: bool,
    /// Reset before the run's first benchmark too (the later runs of `--repeat`).
    pub before_first: bool,
}

/// One POST of a reset and what the server answered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResetCall {
    /// The path posted.
    pub path: String,
    /// The HTTP status, when the server answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The answer's body (at most 200 characters), or why there was none.
    pub answer: String,
}

/// A benchmark's cache reset: which server it took the target for, and each call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheReset {
    /// `vllm`, `sglang`, … as `/metrics` showed (auto), absent when unrecognised or
    /// for a path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Whether every call answered 2xx (false when none was made).
    pub reset: bool,
    /// The calls made, in order (none for a server that has no reset endpoint).
    pub calls: Vec<ResetCall>,
    /// Why `auto` posted nothing: how reading `/metrics` failed, or what it showed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The reset endpoints of a server `/metrics` recognised.
pub fn endpoints_for(server: Option<&str>) -> &'static [&'static str] {
    match server {
        Some("vllm") => &["/reset_prefix_cache", "/reset_mm_cache"],
        Some("sglang") => &["/flush_cache"],
        _ => &[],
    }
}

/// The longest answer kept.
const ANSWER_CHARS: usize = 200;

/// Bound on `auto`'s read of `/metrics`: a server that does not show what it is within
/// it is not held up for the reset calls' longer bound before every benchmark.
const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Resets the caches as `cfg` says; never fails (the report says what happened).
pub async fn reset(cfg: &CacheResetConfig) -> CacheReset {
    let origin = cfg.origin.trim_end_matches('/');
    let client = match llmsurge_proto::http::client_builder(origin, &cfg.tls)
        .map_err(|e| e.to_string())
        .and_then(|b| {
            llmsurge_proto::http::http2_when(b, cfg.http2)
                .connect_timeout(cfg.timeout)
                .timeout(cfg.timeout)
                .build()
                .map_err(|e| e.to_string())
        }) {
        Ok(c) => c,
        Err(e) => {
            return CacheReset {
                server: None,
                reset: false,
                calls: vec![ResetCall {
                    path: String::new(),
                    status: None,
                    answer: format!("no HTTP client: {e}"),
                }],
                note: None,
            };
        }
    };
    let with_headers = |mut r: reqwest::RequestBuilder| {
        for (name, value) in &cfg.headers {
            r = r.header(name.as_str(), value.expose());
        }
        r
    };
    let (server, paths, note) = match &cfg.mode {
        ResetMode::Path(p) => (None, vec![p.clone()], None),
        ResetMode::Auto => match identify(
            with_headers(client.get(format!("{origin}/metrics"))),
            IDENTIFY_TIMEOUT.min(cfg.timeout),
        )
        .await
        {
            Ok(server) => {
                let paths: Vec<String> = endpoints_for(server.as_deref())
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                let note = paths.is_empty().then(|| match &server {
                    Some(s) => format!("{s} has no cache-reset endpoint llmsurge knows"),
                    None => "/metrics shows neither vLLM nor SGLang, the servers whose \
                             cache-reset endpoints llmsurge knows"
                        .to_string(),
                });
                (server, paths, note)
            }
            Err(why) => (None, Vec::new(), Some(why)),
        },
    };
    let mut calls = Vec::new();
    for path in paths {
        let call = match with_headers(client.post(format!("{origin}{path}")))
            .send()
            .await
        {
            Ok(r) => {
                let status = r.status().as_u16();
                // Only its start is kept; a reply without end is not waited for whole.
                let body = llmsurge_proto::http::read_limited(r, limits::SMALL_ANSWER)
                    .await
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_else(|e| e.to_string());
                ResetCall {
                    path,
                    status: Some(status),
                    answer: body.trim().chars().take(ANSWER_CHARS).collect(),
                }
            }
            Err(e) => ResetCall {
                path,
                status: None,
                answer: llmsurge_proto::http::root_cause(&e),
            },
        };
        calls.push(call);
    }
    CacheReset {
        server,
        note,
        reset: !calls.is_empty()
            && calls
                .iter()
                .all(|c| c.status.is_some_and(|s| (200..300).contains(&s))),
        calls,
    }
}

/// The server `GET /metrics` (`get`, with the target's credentials) names (`None`: a
/// page that names none), or why reading it failed within `bound`.
async fn identify(get: reqwest::RequestBuilder, bound: Duration) -> Result<Option<String>, String> {
    // reqwest's bound covers the body too: a server that sends headers and then stalls.
    let r = get.timeout(bound).send().await.map_err(|e| {
        if e.is_timeout() {
            format!("GET /metrics did not answer within {} s", bound.as_secs())
        } else {
            format!(
                "GET /metrics failed: {}",
                llmsurge_proto::http::root_cause(&e)
            )
        }
    })?;
    if !r.status().is_success() {
        return Err(format!("GET /metrics answered {}", r.status()));
    }
    let page = llmsurge_proto::http::read_limited(r, limits::METRICS_PAGE)
        .await
        .map_err(|e| format!("GET /metrics: {e}"))?;
    let body = String::from_utf8_lossy(&page);
    Ok(parse(&body, None)
        .ok()
        .and_then(|p| p.server.map(str::to_string)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_server_gets_its_own_endpoints() {
        assert_eq!(
            endpoints_for(Some("vllm")),
            ["/reset_prefix_cache", "/reset_mm_cache"]
        );
        assert_eq!(endpoints_for(Some("sglang")), ["/flush_cache"]);
        assert!(endpoints_for(Some("tgi")).is_empty());
        assert!(endpoints_for(None).is_empty());
    }
}
