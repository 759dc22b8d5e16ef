//! The mock OpenAI server over real loopback sockets: wire format, model, faults,
//! capacity, stats and the CLI. Timing assertions are lower bounds derived from the
//! configured delays (a timer never fires early); an upper bound only where the broken
//! behaviour would take at least that long (a stop that waited out its grace period).
//! What waited, and for how many, is the mock's own count.

use std::future::Future;
use std::sync::Once;
use std::time::{Duration, Instant};

use llmsurge::mock::{MockConfig, MockServer, MockStats};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

mod burst;
mod capacity;
mod cli;
mod faults;
mod host;
mod metrics;
mod models;
mod typed;
mod wire;

/// No test may run longer than this, whatever goes wrong.
const TEST_BOUND: Duration = Duration::from_secs(60);

fn server(config: MockConfig) -> MockServer {
    MockServer::start(MockConfig { port: 0, ..config }).expect("mock server starts")
}

fn client_builder() -> reqwest::ClientBuilder {
    static PROVIDER: Once = Once::new();
    PROVIDER.call_once(|| {
        // Another test may have installed it first; either way one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    Client::builder().timeout(Duration::from_secs(30))
}

fn client() -> Client {
    client_builder().build().expect("client builds")
}

async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_BOUND, fut)
        .await
        .expect("test finished in time")
}

async fn post(client: &Client, url: String, body: Value) -> reqwest::Response {
    client
        .post(url)
        .body(body.to_string())
        .send()
        .await
        .expect("request sent")
}

async fn json_of(response: reqwest::Response) -> Value {
    let bytes = response.bytes().await.expect("body read");
    serde_json::from_slice(&bytes).expect("body is JSON")
}

async fn stats(client: &Client, base: &str) -> MockStats {
    let bytes = client
        .get(format!("{base}/stats"))
        .send()
        .await
        .expect("stats")
        .bytes()
        .await
        .expect("stats body");
    serde_json::from_slice(&bytes).expect("stats parse")
}

/// Splits an SSE body into its `data:` payloads, asserting the exact framing.
fn sse_payloads(body: &str) -> Vec<&str> {
    assert!(
        body.ends_with("data: [DONE]\n\n"),
        "stream ends with [DONE]: {body:?}"
    );
    body.split_terminator("\n\n")
        .map(|event| {
            assert!(!event.contains('\n'), "one line per event: {event:?}");
            event
                .strip_prefix("data: ")
                .expect("every event is a data line")
        })
        .collect()
}

fn chat_body(max_tokens: u64, stream: bool, usage: bool) -> Value {
    json!({
        "model": "llmsurge-mock",
        "messages": [{"role": "user", "content": "Hello, world!"}],
        "max_tokens": max_tokens,
        "stream": stream,
        "stream_options": {"include_usage": usage},
    })
}

/// Content words of a chat stream and the chunk JSONs.
fn chat_chunks(body: &str) -> (Vec<Value>, Vec<String>) {
    let payloads = sse_payloads(body);
    let chunks: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).expect("chunk is JSON"))
        .collect();
    let words = chunks
        .iter()
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    (chunks, words)
}
