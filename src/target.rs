//! Target resolution, before any worker is spawned: start the in-process mock when asked,
//! check `GET /health`, list `GET /v1/models`, and pick the model.

use crate::cli::resolve::{TargetSpec, UsageError};
use crate::mock::{MockConfig, MockServer};
use llmsurge_proto::Secret;
use std::time::Duration;

/// A reachable target and the model to use.
#[derive(Debug)]
pub struct ResolvedTarget {
    /// Base URL, without `/v1`.
    pub base_url: String,
    /// The model every request names.
    pub model: String,
    /// Models the server lists (empty when it does not list them).
    pub models: Vec<String>,
    /// The in-process mock server, kept alive for the run.
    pub mock: Option<MockServer>,
}

#[derive(serde::Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

#[derive(serde::Deserialize)]
struct ModelEntry {
    id: String,
}

/// Resolves the target; every failure is a one-line usage error naming the target.
pub async fn resolve_target(
    spec: &TargetSpec,
    model: Option<&str>,
    api_key: Option<&Secret>,
    connect_timeout: Duration,
) -> Result<ResolvedTarget, UsageError> {
    let (base_url, mock) = match spec {
        TargetSpec::Mock => {
            let config =
                MockConfig::from_env().map_err(|e| UsageError(format!("--target mock: {e}")))?;
            let server =
                MockServer::start(config).map_err(|e| UsageError(format!("--target mock: {e}")))?;
            (server.base_url(), Some(server))
        }
        TargetSpec::Url(url) => (url.clone(), None),
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .timeout(connect_timeout + Duration::from_secs(10))
        .build()
        .map_err(|e| UsageError(format!("cannot build an HTTP client: {e}")))?;
    let unreachable = |e: reqwest::Error| {
        let cause = std::error::Error::source(&e)
            .map(|s| s.to_string())
            .unwrap_or_else(|| e.to_string());
        UsageError(format!(
            "--target {base_url}: cannot reach the server ({cause})"
        ))
    };

    let health = client
        .get(format!("{base_url}/health"))
        .send()
        .await
        .map_err(unreachable)?;
    let status = health.status();
    // Servers without /health (404, 405) are fine; a server that says it is unhealthy is not.
    if !status.is_success() && !matches!(status.as_u16(), 404 | 405) {
        return Err(UsageError(format!(
            "--target {base_url}: GET /health answered {status}; the server is not ready"
        )));
    }

    let mut request = client.get(format!("{base_url}/v1/models"));
    if let Some(key) = api_key {
        request = request.bearer_auth(key.expose());
    }
    let listing = request.send().await.map_err(unreachable)?;
    let status = listing.status();
    let models = if status.is_success() {
        let body = listing.bytes().await.map_err(unreachable)?;
        serde_json::from_slice::<ModelList>(&body)
            .map(|l| l.data.into_iter().map(|m| m.id).collect())
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let model = match (model, models.first()) {
        (Some(m), _) => {
            if !models.is_empty() && !models.iter().any(|x| x == m) {
                return Err(UsageError(format!(
                    "--model {m:?} is not served by {base_url} (it serves: {})",
                    models.join(", ")
                )));
            }
            m.to_string()
        }
        (None, Some(first)) => first.clone(),
        (None, None) if status.is_success() => {
            return Err(UsageError(format!(
                "--target {base_url} lists no models; pass --model"
            )));
        }
        (None, None) => {
            return Err(UsageError(format!(
                "--target {base_url}: GET /v1/models answered {status}; pass --model (or --api-key if it needs one)"
            )));
        }
    };
    Ok(ResolvedTarget {
        base_url,
        model,
        models,
        mock,
    })
}
