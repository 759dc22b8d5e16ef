//! Routing and the endpoints: parse a request, decide its plan, build its response.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;

use super::app::{App, ConnectionId, to_json, unix_now};
use super::body::{Generation, InjectedClose, MockBody, Output, Work};
use super::metrics;
use crate::mock::api::embeddings::{EMBEDDING_DIM, EmbeddingRequest, embed};
use crate::mock::api::formatter::Formatter;
use crate::mock::api::openai::{
    ChatRequest, CompletionRequest, DetokenizeRequest, DetokenizeResponse, TokenizeRequest,
    TokenizeResponse,
};
use crate::mock::api::shared::{Api, GenerationRequest, Prompt, ToolCall, Usage, error_json};
use crate::mock::api::{anthropic, media, openai, rerank, responses};
use crate::mock::config::PROBE_HEADER;
use crate::mock::model::plan::{Eos, Fault, Plan};
use crate::mock::model::prefix_cache::PromptBlocks;
use crate::mock::model::record::Seen;
use crate::mock::model::stats::{Endpoint, FaultKind};
use crate::mock::model::tokenizer;
use crate::mock::model::truth::{Trace, outcome as truth_outcome};
use llmsurge_proto::MonoNanos;
use llmsurge_proto::affinity::SessionToken;

/// Largest request body read (a long-context prompt fits with room to spare).
const MAX_BODY_BYTES: usize = 64 << 20;
/// Largest embedding `dimensions` accepted.
const MAX_EMBEDDING_DIM: usize = 16_384;

/// An error answer rewritten into Anthropic's shape, keeping its status; a success
/// passes through.
fn anthropic_error(mut response: Response<MockBody>) -> Response<MockBody> {
    let status = response.status();
    if status.is_success() {
        return response;
    }
    if let MockBody::Full(Some(body)) = response.body() {
        let shaped = anthropic::error_body(status.as_u16(), body);
        *response.body_mut() = MockBody::full(shaped);
    }
    response
}

/// A response with a status and a body, counted.
fn respond(
    app: &App,
    status: StatusCode,
    content_type: &'static str,
    body: MockBody,
) -> Response<MockBody> {
    app.counters.response(status.as_u16());
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json(app: &App, status: StatusCode, body: impl Into<Bytes>) -> Response<MockBody> {
    respond(app, status, "application/json", MockBody::full(body))
}

fn error(
    app: &App,
    status: StatusCode,
    message: &str,
    kind: &str,
    code: &str,
) -> Response<MockBody> {
    json(app, status, error_json(message, kind, code))
}

fn bad_request(app: &App, message: &str) -> Response<MockBody> {
    error(
        app,
        StatusCode::BAD_REQUEST,
        message,
        "invalid_request_error",
        "invalid_request",
    )
}

/// The endpoint of `path` and the method it takes.
fn route(path: &str) -> Option<(Endpoint, Method)> {
    Some(match path {
        "/health" => (Endpoint::Health, Method::GET),
        "/v1/models" => (Endpoint::Models, Method::GET),
        "/v1/chat/completions" => (Endpoint::ChatCompletions, Method::POST),
        "/v1/completions" => (Endpoint::Completions, Method::POST),
        "/v1/embeddings" => (Endpoint::Embeddings, Method::POST),
        "/v1/responses" => (Endpoint::Responses, Method::POST),
        "/v1/messages" => (Endpoint::Messages, Method::POST),
        "/v1/rerank" | "/rerank" => (Endpoint::Rerank, Method::POST),
        "/v1/score" | "/score" => (Endpoint::Score, Method::POST),
        "/v1/audio/transcriptions" => (Endpoint::Transcriptions, Method::POST),
        "/tokenize" => (Endpoint::Tokenize, Method::POST),
        "/detokenize" => (Endpoint::Detokenize, Method::POST),
        "/stats" => (Endpoint::Stats, Method::GET),
        "/stats/reset" => (Endpoint::Stats, Method::POST),
        "/metrics" => (Endpoint::Metrics, Method::GET),
        "/start_profile" => (Endpoint::StartProfile, Method::POST),
        "/stop_profile" => (Endpoint::StopProfile, Method::POST),
        _ => return None,
    })
}

/// The path of a generation or pooling endpoint, as `--truth` and `--record` name it
/// (one path for those with two).
fn endpoint_path(endpoint: Endpoint) -> Option<&'static str> {
    Some(match endpoint {
        Endpoint::ChatCompletions => "/v1/chat/completions",
        Endpoint::Completions => "/v1/completions",
        Endpoint::Embeddings => "/v1/embeddings",
        Endpoint::Responses => "/v1/responses",
        Endpoint::Messages => "/v1/messages",
        Endpoint::Rerank => "/v1/rerank",
        Endpoint::Score => "/v1/score",
        Endpoint::Transcriptions => "/v1/audio/transcriptions",
        _ => return None,
    })
}

/// The endpoints `--truth` follows (generation and pooling), by path.
fn truth_endpoint(path: &str) -> Option<&'static str> {
    endpoint_path(route(path)?.0)
}

/// Marks a response whose error the fault model injected (for `--truth`).
#[derive(Clone, Copy, Debug)]
struct InjectedError(FaultKind);

/// Serves one request; with `--truth`, follows a generation or pooling request into its
/// line: arrival now, the head when the response is handed back, then its body (or, for
/// a response without one, the line at once).
pub async fn handle(
    app: Arc<App>,
    req: Request<Incoming>,
    connection: ConnectionId,
) -> Response<MockBody> {
    let truth = match (&app.truth, truth_endpoint(req.uri().path())) {
        (Some(truth), Some(endpoint)) if !req.headers().contains_key(PROBE_HEADER) => {
            Some((Arc::clone(truth), endpoint))
        }
        _ => None,
    };
    let Some((truth, endpoint)) = truth else {
        return serve(app, req, connection).await;
    };
    let arrival = MonoNanos::now();
    let request_id = req
        .headers()
        .get(llmsurge_proto::REQUEST_ID_HEADER)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // Bounded: the client is untrusted.
    let traceparent = req
        .headers()
        .get(llmsurge_proto::TRACEPARENT_HEADER)
        .map(|v| String::from_utf8_lossy(&v.as_bytes()[..v.len().min(256)]).into_owned());
    let mut response = serve(app, req, connection).await;
    let now = MonoNanos::now();
    let close = response.extensions().get::<InjectedClose>().is_some();
    let injected = response.extensions().get::<InjectedError>().map(|e| e.0);
    let status = response.status().as_u16();
    let mut trace = Box::new(Trace {
        request_id,
        traceparent,
        connection: Some(connection.0),
        endpoint,
        stream: false,
        status: (!close).then_some(status),
        arrival,
        head: (!close).then_some(now),
        chunks: Vec::new(),
        stamped: 0,
        end: Some(now),
        outcome: truth_outcome::COMPLETED,
        fault: if close {
            Some(FaultKind::Close)
        } else {
            injected
        },
        prompt_tokens: None,
        tool_call: None,
        finish_reason: None,
    });
    match response.body_mut() {
        MockBody::Gen(generation) => {
            trace.end = None;
            generation.attach(trace);
        }
        MockBody::Full(_) => {
            trace.outcome = if trace.fault.is_some() {
                truth_outcome::FAULT
            } else if status >= 400 {
                truth_outcome::REJECTED
            } else {
                truth_outcome::COMPLETED
            };
            truth.write(&trace);
        }
    }
    response
}

/// Serves one request.
async fn serve(
    app: Arc<App>,
    req: Request<Incoming>,
    connection: ConnectionId,
) -> Response<MockBody> {
    if let Some(response) = unauthorized(&app, &req) {
        return response;
    }
    if let Some(response) = super::cache_reset::answer(&app, req.method(), req.uri().path()) {
        return response;
    }
    if let Some(response) = super::info::answer(&app, req.method(), req.uri().path()) {
        return response;
    }
    let route = route(req.uri().path());
    // The server's own metrics and profiler are the main server's, probe or not.
    let introspection = matches!(
        route,
        Some((
            Endpoint::Metrics | Endpoint::StartProfile | Endpoint::StopProfile,
            _
        ))
    );
    let app = match &app.probe_twin {
        Some(twin) if !introspection && req.headers().contains_key(PROBE_HEADER) => {
            Arc::clone(twin)
        }
        _ => app,
    };
    let Some((endpoint, method)) = route else {
        app.counters.request(Endpoint::Other);
        let message = format!("no route for {} {}", req.method(), req.uri().path());
        return error(
            &app,
            StatusCode::NOT_FOUND,
            &message,
            "invalid_request_error",
            "not_found",
        );
    };
    if req.method() != method {
        app.counters.request(Endpoint::Other);
        let message = format!("{} takes {method}, not {}", req.uri().path(), req.method());
        let mut response = error(
            &app,
            StatusCode::METHOD_NOT_ALLOWED,
            &message,
            "invalid_request_error",
            "method_not_allowed",
        );
        let allow = if method == Method::GET { "GET" } else { "POST" };
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static(allow));
        return response;
    }
    app.counters.request(endpoint);
    let reset = req.uri().path() == "/stats/reset";
    match endpoint {
        Endpoint::Health => respond(
            &app,
            // Validated as 100 to 599.
            StatusCode::from_u16(app.config.health_status)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "text/plain",
            MockBody::full(Bytes::new()),
        ),
        Endpoint::Models => json(&app, StatusCode::OK, app.models_body.clone()),
        Endpoint::Stats => {
            if reset {
                app.counters.reset();
            }
            let mut stats = app.counters.snapshot();
            stats.record = app.recorder.as_ref().map(|r| r.stats());
            json(&app, StatusCode::OK, to_json(&stats))
        }
        Endpoint::Metrics => metrics::scrape(&app).await,
        Endpoint::StartProfile | Endpoint::StopProfile => metrics::profile(&app, req.uri().path()),
        _ => {
            let content_type = req
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            // `--record-header` and the query: read before the body consumes the request.
            let (recorded_headers, query): (Vec<Option<String>>, Option<String>) =
                match &app.recorder {
                    Some(r) => (
                        r.headers()
                            .iter()
                            .map(|name| {
                                req.headers()
                                    .get(name.as_str())
                                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                            })
                            .collect(),
                        req.uri().query().map(str::to_string),
                    ),
                    None => (Vec::new(), None),
                };
            let connection = Some(connection.0);
            // `--prefix-cache-by`: the replica this request's prefix lookup goes to.
            let replica = app.config.prefix_cache_by.as_deref().map(|name| {
                app.prefix_cache
                    .replica(req.headers().get(name).map(HeaderValue::as_bytes))
            });
            // `--issue-session-token`: the token the request carried, or a fresh one.
            let token = app.config.session_token().ok().flatten();
            let carried = token.as_ref().and_then(|t| carried_token(t, req.headers()));
            let issued = match (&token, &carried) {
                (Some(_), None) => Some(format!(
                    "mock-token-{}",
                    app.next_token.fetch_add(1, Relaxed)
                )),
                _ => None,
            };
            let body = match read_body(&app, req).await {
                Ok(body) => body,
                Err(response) => return *response,
            };
            if let Some(recorder) = &app.recorder {
                // A transcription's multipart body is not recorded.
                let path = match endpoint {
                    Endpoint::Transcriptions => None,
                    _ => endpoint_path(endpoint),
                };
                if let Some(path) = path {
                    let seen = Seen {
                        connection,
                        token: carried.as_deref(),
                        issued_token: issued.as_deref(),
                        replica,
                    };
                    recorder.record(path, query.as_deref(), &recorded_headers, seen, &body);
                }
            }
            // The API calls below plan their generation synchronously, on this thread.
            REPLICA.set(replica.unwrap_or(0));
            let mut response = match endpoint {
                Endpoint::ChatCompletions => chat(app, &body),
                Endpoint::Completions => completions(app, &body),
                Endpoint::Embeddings => embeddings(app, &body),
                Endpoint::Responses => responses(app, &body),
                Endpoint::Messages => anthropic_error(messages(app, &body)),
                Endpoint::Rerank | Endpoint::Score => ranking(app, endpoint, &body),
                Endpoint::Transcriptions => transcription(app, &content_type, &body),
                Endpoint::Tokenize => tokenize(&app, &body),
                _ => detokenize(&app, &body),
            };
            if let (Some(t), Some(value)) = (&token, issued) {
                let (name, value) = match t {
                    SessionToken::Header(name) => (name.as_str(), value),
                    SessionToken::Cookie(name) => ("set-cookie", format!("{name}={value}; Path=/")),
                };
                if let (Ok(name), Ok(value)) = (
                    hyper::header::HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(&value),
                ) {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
    }
}

thread_local! {
    /// `--prefix-cache-by`: the replica of the request whose API call runs on this
    /// thread now (set just before the synchronous call that plans its generation).
    static REPLICA: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The session token a request carries (`--issue-session-token`): header NAME's value,
/// or cookie NAME's in its `Cookie` header.
fn carried_token(token: &SessionToken, headers: &hyper::HeaderMap) -> Option<String> {
    match token {
        SessionToken::Header(name) => headers
            .get(name.as_str())
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        SessionToken::Cookie(name) => headers
            .get_all(hyper::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|pair| {
                let (n, v) = pair.trim().split_once('=')?;
                (n == name).then(|| v.to_string())
            }),
    }
}

/// The 401 answer to a request without `--require-api-key`'s key (on every route but
/// `/stats`, the mock's own truth channel), counted per route; `None` lets it in. Probes
/// are checked and counted here too, by the main server: a gateway checks every request.
fn unauthorized(app: &App, req: &Request<Incoming>) -> Option<Response<MockBody>> {
    let key = app.config.require_api_key.as_ref()?;
    let path = req.uri().path();
    let endpoint = route(path).map_or(Endpoint::Other, |(e, _)| e);
    if endpoint == Endpoint::Stats {
        return None;
    }
    let given = req
        .headers()
        .get(app.config.api_key_header.as_str())
        .and_then(|v| v.to_str().ok());
    let expected = key.expose();
    let carried = match given {
        Some(v)
            if app
                .config
                .api_key_header
                .eq_ignore_ascii_case("authorization") =>
        {
            v.split_once(' ').is_some_and(|(scheme, token)| {
                scheme.eq_ignore_ascii_case("bearer") && token.trim() == expected
            })
        }
        Some(v) => v == expected,
        None => false,
    };
    if carried {
        return None;
    }
    app.counters
        .unauthorized(endpoint, super::cache_reset::which(path));
    // Neither the expected key nor the one given is echoed.
    let message = format!(
        "no valid API key in the {} header",
        app.config.api_key_header
    );
    Some(error(
        app,
        StatusCode::UNAUTHORIZED,
        &message,
        "authentication_error",
        "invalid_api_key",
    ))
}

async fn read_body(app: &App, req: Request<Incoming>) -> Result<Bytes, Box<Response<MockBody>>> {
    match Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => {
            let message = format!("request body exceeds {MAX_BODY_BYTES} bytes");
            Err(Box::new(error(
                app,
                StatusCode::PAYLOAD_TOO_LARGE,
                &message,
                "invalid_request_error",
                "body_too_large",
            )))
        }
        Err(e) => Err(Box::new(bad_request(
            app,
            &format!("cannot read the request body: {e}"),
        ))),
    }
}

/// Parses a JSON body, or the 400 that says why not.
fn parse<'a, T: serde::Deserialize<'a>>(
    app: &App,
    body: &'a [u8],
) -> Result<T, Box<Response<MockBody>>> {
    serde_json::from_slice(body).map_err(|e| {
        // A body that is not JSON is `invalid_json` wherever its fault is, as a server
        // that parses the JSON first says: serde stops at the first error in reading
        // order, a wrong type before a later syntax error (`"content":[1, oops]`).
        let e = match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Err(syntax) => syntax,
            Ok(_) => e,
        };
        let code = if e.is_syntax() || e.is_eof() {
            "invalid_json"
        } else {
            "invalid_request"
        };
        let message = format!("invalid request body: {e}");
        Box::new(error(
            app,
            StatusCode::BAD_REQUEST,
            &message,
            "invalid_request_error",
            code,
        ))
    })
}

/// Index of the requested model (the first when none is named), or the 404.
fn resolve_model(app: &App, model: Option<&str>) -> Result<usize, Box<Response<MockBody>>> {
    let Some(name) = model else { return Ok(0) };
    app.config
        .model
        .iter()
        .position(|m| m == name)
        .ok_or_else(|| {
            app.counters.model_not_found();
            let message = format!("The model `{name}` does not exist.");
            Box::new(error(
                app,
                StatusCode::NOT_FOUND,
                &message,
                "invalid_request_error",
                "model_not_found",
            ))
        })
}

/// The output cap, checked against the context window.
fn resolve_max_tokens(app: &App, cap: Option<u64>) -> Result<Option<u32>, Box<Response<MockBody>>> {
    let Some(cap) = cap else { return Ok(None) };
    let limit = app.config.max_model_len;
    if cap == 0 || cap > u64::from(limit) {
        let message = format!("max_tokens must be in [1, {limit}] (the context window), got {cap}");
        return Err(Box::new(bad_request(app, &message)));
    }
    Ok(Some(cap as u32))
}

/// What the endpoints hand to `generate`.
struct GenRequest {
    api: Api,
    model: usize,
    streaming: bool,
    include_usage: bool,
    /// The prompt's blocks for the prefix cache (its length, scaled, is its prompt
    /// tokens).
    prompt: PromptBlocks,
    max_tokens: Option<u32>,
    /// `ignore_eos` and `min_tokens`, as the model will see them (`--drop-ignore-eos`
    /// drops both, as a gateway in front of a server may).
    eos: Eos,
    /// The names of the functions the request offered to call (`tools`).
    tools: Vec<String>,
}

/// Body fields the OpenAI chat completions and completions APIs share.
const OPENAI_FIELDS: &[&str] = &[
    "model",
    "stream",
    "stream_options",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "user",
    "seed",
];
/// Body fields of the OpenAI chat completions API besides [`OPENAI_FIELDS`]: with them,
/// all a strict server takes.
const CHAT_FIELDS: &[&str] = &[
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "reasoning_effort",
    "metadata",
    "store",
    "service_tier",
    "modalities",
    "audio",
    "prediction",
    "web_search_options",
];
/// Body fields of the OpenAI completions API besides [`OPENAI_FIELDS`].
const COMPLETION_FIELDS: &[&str] = &["prompt", "echo", "best_of", "suffix"];

/// With `--reject-unknown-fields`: the 422 a strict server (transformers serve) gives a
/// body with fields outside the API, naming them in its words.
fn refuse_unknown_fields(
    app: &App,
    body: &[u8],
    known: &[&[&str]],
) -> Result<(), Box<Response<MockBody>>> {
    if !app.config.reject_unknown_fields {
        return Ok(());
    }
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice(body) else {
        return Ok(()); // not an object: the parse answers it
    };
    let unknown: Vec<String> = fields
        .keys()
        .filter(|k| !known.iter().any(|set| set.contains(&k.as_str())))
        .map(|k| format!("'{k}'"))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let message = format!(
        "Unexpected fields in the request: {{{}}}",
        unknown.join(", ")
    );
    Err(Box::new(error(
        app,
        StatusCode::UNPROCESSABLE_ENTITY,
        &message,
        "invalid_request_error",
        "unexpected_fields",
    )))
}

/// A prompt length as this server counts it (`--prompt-tokens-scale`).
fn scaled(app: &App, tokens: u64) -> u64 {
    (tokens as f64 * app.config.prompt_tokens_scale).round() as u64
}

/// A generation endpoint: refuses unknown fields when strict, parses the body as `R`,
/// reads its prompt (`prompt` may refuse it, or count its media), then the model and the
/// cap, and generates.
fn generation<'a, R: serde::Deserialize<'a> + GenerationRequest>(
    app: Arc<App>,
    body: &'a [u8],
    api: Api,
    known: &[&[&str]],
    prompt: impl FnOnce(&App, &R) -> Result<PromptBlocks, Box<Response<MockBody>>>,
) -> Response<MockBody> {
    let resolved = refuse_unknown_fields(&app, body, known)
        .and_then(|()| parse::<R>(&app, body))
        .and_then(|r| {
            let prompt = prompt(&app, &r)?;
            Ok(GenRequest {
                api,
                model: resolve_model(&app, r.model())?,
                streaming: r.streaming(),
                include_usage: r.include_usage(),
                prompt,
                max_tokens: resolve_max_tokens(&app, r.cap())?,
                eos: if app.config.drop_ignore_eos {
                    Eos::default()
                } else {
                    Eos {
                        ignore: r.ignore_eos(),
                        min_tokens: r.min_tokens().unwrap_or(0),
                    }
                },
                tools: r.tools(),
            })
        });
    match resolved {
        Ok(request) => generate(app, request),
        Err(response) => *response,
    }
}

fn chat(app: Arc<App>, body: &[u8]) -> Response<MockBody> {
    generation(
        app,
        body,
        Api::Chat,
        &[OPENAI_FIELDS, CHAT_FIELDS],
        |app, r: &ChatRequest| {
            let (prompt, media) = media::message_blocks(&r.messages);
            app.counters.media(media.images, media.audio_ms);
            Ok(prompt)
        },
    )
}

/// `/v1/audio/transcriptions`: a multipart form with a WAV `file`, `model`, and
/// `stream` / `stream_include_usage` (vLLM's form fields). The clip costs prompt tokens
/// as chat audio does; the transcript is generated like any output.
fn transcription(app: Arc<App>, content_type: &str, body: &[u8]) -> Response<MockBody> {
    let Some(boundary) = media::boundary(content_type) else {
        return bad_request(
            &app,
            "a transcription is multipart/form-data with a boundary (Content-Type)",
        );
    };
    let parts = match media::parse_form(body, boundary) {
        Ok(parts) => parts,
        Err(e) => return bad_request(&app, &format!("invalid multipart body: {e}")),
    };
    let field = |name: &str| parts.iter().find(|p| p.name == name).map(|p| p.data);
    let text = |name: &str| field(name).and_then(|d| std::str::from_utf8(d).ok());
    let Some(file) = field("file") else {
        return bad_request(&app, "the form has no `file` part");
    };
    let Some(ms) = media::wav_ms(file) else {
        return bad_request(
            &app,
            "`file` is not a PCM WAV file (RIFF/WAVE with fmt and data)",
        );
    };
    let mut media = media::MediaCount::default();
    let tokens = media.audio(ms);
    app.counters.media(0, media.audio_ms);
    if let Err(response) = within_context(&app, tokens) {
        return *response;
    }
    let mut prompt = PromptBlocks::default();
    media::push_media_tokens(&mut prompt, file, tokens);
    let is_true = |name: &str| text(name).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let model = match resolve_model(&app, text("model")) {
        Ok(m) => m,
        Err(response) => return *response,
    };
    generate(
        app,
        GenRequest {
            api: Api::Transcription(ms.div_ceil(1000)),
            model,
            streaming: is_true("stream"),
            include_usage: is_true("stream_include_usage"),
            prompt,
            max_tokens: None,
            eos: Eos::default(),
            tools: Vec::new(),
        },
    )
}

fn completions(app: Arc<App>, body: &[u8]) -> Response<MockBody> {
    generation(
        app,
        body,
        Api::Completions,
        &[OPENAI_FIELDS, COMPLETION_FIELDS],
        |app, r: &CompletionRequest| {
            if r.prompt.batch_len() != 1 {
                return Err(Box::new(bad_request(
                    app,
                    "the mock takes exactly one prompt per request",
                )));
            }
            Ok(r.prompt.blocks())
        },
    )
}

/// Body fields of OpenAI's Responses API that the mock reads or tolerates.
const RESPONSES_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "stream",
    "max_output_tokens",
    "temperature",
    "top_p",
    "reasoning",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "previous_response_id",
    "store",
    "metadata",
    "text",
    "truncation",
    "user",
    "service_tier",
    "include",
];
/// Body fields of Anthropic's Messages API.
const MESSAGES_FIELDS: &[&str] = &[
    "model",
    "messages",
    "system",
    "max_tokens",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "metadata",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
];

fn responses(app: Arc<App>, body: &[u8]) -> Response<MockBody> {
    generation(
        app,
        body,
        Api::Responses,
        &[RESPONSES_FIELDS],
        |_, r: &responses::ResponsesRequest| Ok(r.blocks()),
    )
}

fn messages(app: Arc<App>, body: &[u8]) -> Response<MockBody> {
    generation(
        app,
        body,
        Api::Anthropic,
        &[MESSAGES_FIELDS],
        |_, r: &anthropic::MessagesRequest| Ok(r.blocks()),
    )
}

/// What every ranking request must pass: a served model, documents (named by the
/// API's own field), and pairs within the context window. Returns the model's index.
fn check_ranking(
    app: &App,
    model: Option<&str>,
    ranking: &rerank::Ranking<'_>,
    documents_field: &str,
) -> Result<usize, Box<Response<MockBody>>> {
    let model = resolve_model(app, model)?;
    if ranking.documents.is_empty() {
        let message = format!("{documents_field} must not be empty");
        return Err(Box::new(bad_request(app, &message)));
    }
    within_context(app, scaled(app, ranking.longest_pair()))?;
    Ok(model)
}

/// `/v1/rerank` and `/v1/score`: one prefill of every (query, document) pair.
fn ranking(app: Arc<App>, endpoint: Endpoint, body: &[u8]) -> Response<MockBody> {
    use rerank::{RerankRequest, ScoreRequest, rerank_body, score_body};
    let seq = app.seq.fetch_add(1, Relaxed);
    let seed = app.config.seed;
    let checked = if endpoint == Endpoint::Rerank {
        parse::<RerankRequest>(&app, body).and_then(|r| {
            let ranking = r.ranking();
            let model = check_ranking(&app, r.model.as_deref(), &ranking, "documents")?;
            let out = rerank_body(&app.config.model[model], seq, &ranking, r.top_n, seed);
            Ok((model, ranking.tokens(), out))
        })
    } else {
        parse::<ScoreRequest>(&app, body).and_then(|r| {
            let ranking = r.ranking();
            let model = check_ranking(&app, r.model.as_deref(), &ranking, "text_2")?;
            let out = score_body(&app.config.model[model], seq, unix_now(), &ranking, seed);
            Ok((model, ranking.tokens(), out))
        })
    };
    let (model, tokens, out) = match checked {
        Ok(c) => c,
        Err(response) => return *response,
    };
    prefill_only(app, seq, model, tokens, out)
}

/// The 400 vLLM gives an input longer than the context window.
fn within_context(app: &App, tokens: u64) -> Result<(), Box<Response<MockBody>>> {
    let limit = u64::from(app.config.max_model_len);
    if tokens > limit {
        let message = format!(
            "This model's maximum context length is {limit} tokens. However, you requested {tokens} tokens in the input. Please reduce the length of the input."
        );
        return Err(Box::new(bad_request(app, &message)));
    }
    Ok(())
}

/// Answers a request that is one prefill (embeddings, ranking): it waits for a slot,
/// then for a time to first token, and may carry the configured faults.
fn prefill_only(
    app: Arc<App>,
    seq: u64,
    model: usize,
    prompt_tokens: u64,
    body: Vec<u8>,
) -> Response<MockBody> {
    app.counters.prompt_tokens(prompt_tokens);
    app.counters.model_request(model, prompt_tokens);
    let mut plan = app
        .model
        .plan(seq, prompt_tokens, Some(1), Eos::IGNORE, false, false);
    plan.model = model;
    if let Some(response) = injected(&app, plan.fault) {
        return response;
    }
    let ttft = plan.ttft;
    let output = Output::Whole {
        body: Bytes::from(body),
        latency: Some(ttft),
        tokens: 0,
        reasoning: 0,
    };
    answer(
        &app,
        "application/json",
        plan,
        output,
        Work::Embedding,
        prompt_tokens,
    )
}

/// Plans a generation and answers it: an injected error now, or a body that waits for
/// its slot and deadlines.
fn generate(app: Arc<App>, r: GenRequest) -> Response<MockBody> {
    let seq = app.seq.fetch_add(1, Relaxed);
    let prompt_tokens = scaled(&app, r.prompt.tokens());
    app.counters.prompt_tokens(prompt_tokens);
    app.counters.model_request(r.model, prompt_tokens);
    // Looked up on arrival, like the rest of the plan: the queries are the prompt tokens.
    // With the prefix cache off (`--no-enable-prefix-caching`) no prompt hits it.
    let hits = if app.config.prefix_caching {
        let replica = REPLICA.get();
        scaled(&app, app.prefix_cache.lookup_on(replica, &r.prompt)).min(prompt_tokens)
    } else {
        0
    };
    app.counters.prefix_cache(prompt_tokens, hits);
    // As in vLLM, cached blocks skip the prefill: only the missed tokens cost TTFT.
    let mut plan = app.model.plan(
        seq,
        prompt_tokens - hits,
        r.max_tokens,
        r.eos,
        // Neither the legacy completions API nor a transcription has a place for reasoning.
        !matches!(r.api, Api::Completions | Api::Transcription(_)),
        !r.tools.is_empty(),
    );
    plan.model = r.model;
    if let Some(response) = injected(&app, plan.fault) {
        return response;
    }
    let include_usage = r.streaming && r.include_usage;
    let model_json = &app.model_json[r.model];
    let unknown_events = app.config.unknown_events;
    let no_final_event = app.config.no_final_event;
    let fmt = match r.api {
        Api::Responses => Formatter::Responses(responses::Writer::new(
            seq,
            unix_now(),
            model_json,
            unknown_events,
            no_final_event,
        )),
        Api::Anthropic => Formatter::Anthropic(anthropic::Writer::new(
            seq,
            model_json,
            prompt_tokens,
            unknown_events,
            no_final_event,
        )),
        Api::Chat | Api::Completions | Api::Transcription(_) => Formatter::OpenAi(
            openai::Writer::new(
                r.api,
                r.streaming,
                seq,
                unix_now(),
                model_json,
                include_usage,
            )
            .without_end(matches!(r.api, Api::Transcription(_)) && no_final_event),
        ),
    };
    let fmt = if plan.tool_call {
        app.counters.tool_call();
        fmt.with_tool_call(Some(ToolCall::new(seq, &r.tools, plan.content)))
    } else {
        fmt
    };
    if r.streaming {
        let output = Output::Stream {
            fmt,
            include_usage,
            prompt_tokens,
        };
        let mut response = answer(
            &app,
            "text/event-stream",
            plan,
            output,
            Work::Generation,
            prompt_tokens,
        );
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return response;
    }
    // The text is drawn in stream order (reasoning first) so both modes say the same thing.
    let reasoning: Vec<&'static str> = (0..plan.reasoning).map(|_| plan.next_word()).collect();
    let usage = Usage {
        prompt: prompt_tokens,
        content: u64::from(plan.content),
        reasoning: u64::from(plan.reasoning),
    };
    let mut out = BytesMut::with_capacity(256 + 8 * plan.total_tokens() as usize);
    let finish = plan.finish;
    let content = plan.content;
    fmt.full_body(
        &mut out,
        (0..content).map(|_| plan.next_word()),
        reasoning.into_iter(),
        finish,
        usage,
    );
    let output = Output::Whole {
        body: out.freeze(),
        latency: app.model.request_latency(),
        tokens: usage.content + usage.reasoning,
        reasoning: usage.reasoning,
    };
    answer(
        &app,
        "application/json",
        plan,
        output,
        Work::Generation,
        prompt_tokens,
    )
}

/// The answer to a planned request: its body, which waits for its slot and deadlines.
fn answer(
    app: &Arc<App>,
    content_type: &'static str,
    plan: Plan,
    output: Output,
    work: Work,
    prompt_tokens: u64,
) -> Response<MockBody> {
    let body = Generation::start(Arc::clone(app), plan, output, work, prompt_tokens);
    respond(app, StatusCode::OK, content_type, body)
}

/// The answer to a request whose plan carries an injected error or close, if it does.
fn injected(app: &App, fault: Fault) -> Option<Response<MockBody>> {
    match fault {
        Fault::Error(status) => Some(injected_error(app, status)),
        Fault::Close => Some(injected_close(app)),
        _ => None,
    }
}

/// A response the server turns into a closed connection (see `InjectedClose`).
fn injected_close(app: &App) -> Response<MockBody> {
    app.counters.fault(FaultKind::Close);
    let mut response = Response::new(MockBody::full(Bytes::new()));
    response.extensions_mut().insert(InjectedClose);
    response
}

fn injected_error(app: &App, status: u16) -> Response<MockBody> {
    let (fault, status, message, kind, code) = if status == 429 {
        (
            FaultKind::Error429,
            StatusCode::TOO_MANY_REQUESTS,
            "Rate limit reached (injected by llmsurge mock-server).",
            "requests",
            "rate_limit_exceeded",
        )
    } else {
        (
            FaultKind::Error500,
            StatusCode::INTERNAL_SERVER_ERROR,
            "The server had an error while processing your request (injected by llmsurge mock-server).",
            "server_error",
            "internal_error",
        )
    };
    app.counters.fault(fault);
    let mut response = error(app, status, message, kind, code);
    response.extensions_mut().insert(InjectedError(fault));
    response
}

#[derive(Serialize)]
struct EmbeddingList<'a> {
    object: &'static str,
    data: Vec<EmbeddingItem>,
    model: &'a str,
    usage: EmbeddingUsage,
}

#[derive(Serialize)]
struct EmbeddingItem {
    object: &'static str,
    index: usize,
    embedding: Vec<f32>,
}

#[derive(Serialize)]
struct EmbeddingUsage {
    prompt_tokens: u64,
    total_tokens: u64,
}

fn embeddings(app: Arc<App>, body: &[u8]) -> Response<MockBody> {
    let request = match parse::<EmbeddingRequest>(&app, body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let model = match resolve_model(&app, request.model.as_deref()) {
        Ok(m) => m,
        Err(response) => return *response,
    };
    let dim = request.dimensions.unwrap_or(EMBEDDING_DIM);
    if dim == 0 || dim > MAX_EMBEDDING_DIM {
        return bad_request(
            &app,
            &format!("dimensions must be in [1, {MAX_EMBEDDING_DIM}], got {dim}"),
        );
    }
    let keys: Vec<Vec<u8>> = match &request.input {
        Prompt::Text(t) => vec![t.as_bytes().to_vec()],
        Prompt::Texts(v) => v.iter().map(|t| t.as_bytes().to_vec()).collect(),
        Prompt::Ids(ids) => vec![ids.iter().flat_map(|i| i.to_le_bytes()).collect()],
        Prompt::IdBatches(v) => v
            .iter()
            .map(|ids| ids.iter().flat_map(|i| i.to_le_bytes()).collect())
            .collect(),
    };
    if keys.is_empty() {
        return bad_request(&app, "input must not be empty");
    }
    let longest = match &request.input {
        Prompt::Text(t) => tokenizer::count(t),
        Prompt::Texts(v) => v.iter().map(|t| tokenizer::count(t)).max().unwrap_or(0),
        Prompt::Ids(ids) => ids.len() as u64,
        Prompt::IdBatches(v) => v.iter().map(|i| i.len() as u64).max().unwrap_or(0),
    };
    if let Err(response) = within_context(&app, scaled(&app, longest)) {
        return *response;
    }
    let prompt_tokens = request.input.count();
    let list = EmbeddingList {
        object: "list",
        data: keys
            .iter()
            .enumerate()
            .map(|(index, key)| EmbeddingItem {
                object: "embedding",
                index,
                embedding: embed(app.config.seed, key, dim),
            })
            .collect(),
        model: &app.config.model[model],
        usage: EmbeddingUsage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
    };
    let seq = app.seq.fetch_add(1, Relaxed);
    let body = to_json(&list);
    prefill_only(app, seq, model, prompt_tokens, body)
}

fn tokenize(app: &App, body: &[u8]) -> Response<MockBody> {
    let request = match parse::<TokenizeRequest>(app, body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    if let Err(response) = resolve_model(app, request.model.as_deref()) {
        return *response;
    }
    let mut tokens = Vec::new();
    match (&request.prompt, &request.messages) {
        (Some(prompt), None) => tokenizer::encode_into(prompt, &mut tokens),
        (None, Some(messages)) => {
            for m in messages {
                m.for_each_text(|t| tokenizer::encode_into(t, &mut tokens));
            }
        }
        _ => return bad_request(app, "give exactly one of `prompt` and `messages`"),
    }
    let response = TokenizeResponse {
        count: scaled(app, tokens.len() as u64) as usize,
        max_model_len: app.config.max_model_len,
        tokens,
    };
    json(app, StatusCode::OK, to_json(&response))
}

fn detokenize(app: &App, body: &[u8]) -> Response<MockBody> {
    let request = match parse::<DetokenizeRequest>(app, body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    if let Err(response) = resolve_model(app, request.model.as_deref()) {
        return *response;
    }
    json(
        app,
        StatusCode::OK,
        to_json(&DetokenizeResponse {
            prompt: tokenizer::decode(&request.tokens),
        }),
    )
}
