//! The OpenAI HTTP backend: one keep-alive client, one request at a time per call.
//!
//! HTTP/1.1 goes through the worker's own client ([`crate::http1`]: a few hundred bytes
//! a connection; on `https://` with its TLS session, [`crate::tls_conn`]), and so does
//! HTTP/2 (`--http2`: [`crate::http2`], h2c on `http://`, h2 over TLS on `https://`):
//! token instants from the kernel's receive stamps on every transport.
//!
//! `execute` fills an [`Exchange`] as the response arrives, so a request cancelled halfway
//! still has the timings it got. Every wait is bounded: the whole request by the request
//! timeout, the first token by the TTFT timeout, and the silence between two chunks by
//! the idle timeout. A failure never escapes as a panic; it becomes the exchange's error.

use crate::affinity::Conversations;
use crate::connections::ConnectLog;
use crate::formats::{self, ChunkInfo, Format, StreamEvent, StreamState, Usage};
pub use crate::http1::Presend;
use crate::http1::{self, Http1, Outgoing, RequestHeaders};
use crate::http2::{self, Http2};
use crate::source::PreparedRequest;
use crate::sse::SseParser;
use bytes::Bytes;
use llmsurge_proto::{BackendConfig, ErrorKind, MonoNanos, Redaction, RequestError};
use llmsurge_proto::{inert, limits};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{Instant, timeout_at};

/// Errors building the backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The base URL is not a URL.
    #[error("invalid target URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// A header name or value is not valid HTTP.
    #[error("invalid header {0:?}")]
    BadHeader(String),
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Client(String),
}

/// What happened during one request, filled in as it goes.
#[derive(Clone, Debug, Default)]
pub struct Exchange {
    /// When the request was handed to the socket.
    pub start: Option<MonoNanos>,
    /// First token of any kind.
    pub first_token: Option<MonoNanos>,
    /// First content token (a tool call's included: it is the answer).
    pub first_content: Option<MonoNanos>,
    /// First token of a tool call.
    pub first_tool: Option<MonoNanos>,
    /// Last byte, failure or cancellation.
    pub end: Option<MonoNanos>,
    /// Arrival of every chunk that carried tokens, reasoning or content: every gap
    /// between them is an inter-token gap (the server decodes both alike).
    pub token_times: Vec<MonoNanos>,
    /// Chunks that carried content or reasoning.
    pub streamed_tokens: u32,
    /// Of `token_times`, the leading chunks that carried reasoning alone, when the first
    /// chunk with content carried none: a server that packs several tokens a chunk
    /// packed the reasoning apart from the answer, so ITL spreads the reasoning count
    /// over these chunks and the rest over the others. 0 when a chunk mixed the two (the
    /// packing ran across the boundary) or the answer never came.
    pub reasoning_chunks: u32,
    /// The server's usage, when sent.
    pub usage: Option<Usage>,
    /// A chunk with `finish_reason` arrived.
    pub finished: bool,
    /// Why the server said the output ended (the last reason it gave).
    pub finish_reason: Option<llmsurge_proto::FinishReason>,
    /// Why the request failed, if it did.
    pub error: Option<RequestError>,
    /// The request was sent a second time, on a fresh connection, after the reused
    /// connection it was first written on closed without a byte of response.
    pub retried: bool,
    /// The request had a connection to the server (opened or reused): one the stop cut
    /// before it had one never reached the server.
    pub connected: bool,
    /// `--session-token`: the response carried a token that was refused (see
    /// [`llmsurge_proto::affinity::TokenSeen::Refused`]).
    pub token_refused: bool,
    /// Multi-turn sessions: `Some` to collect the reply's text as it arrives (the next
    /// turn resends it); `None`, the default, keeps no text.
    pub reply: Option<String>,
    /// Multi-turn sessions offering tools: the tool call the reply was, when it was one
    /// (the next turn resends it with the tool's result).
    pub tool_call: Option<crate::source::ToolCall>,
    /// `--cancel after=ttft+…` and the prefill cap: set to `true` at the first token of
    /// any kind.
    pub first_token_signal: Option<Arc<tokio::sync::watch::Sender<bool>>>,
    /// `--max-prefill-concurrency`: how long the request waited for the cap's room.
    pub prefill_wait: Option<Duration>,
    /// How long the concurrency cap held the request; `None` when it did not.
    pub concurrency_wait: Option<Duration>,
}

impl Exchange {
    /// When it ended: its end, or now for one that recorded none.
    pub fn end_or_now(&self) -> MonoNanos {
        self.end.unwrap_or_else(MonoNanos::now)
    }

    fn fail(&mut self, kind: ErrorKind, message: impl Into<String>) {
        self.end.get_or_insert_with(MonoNanos::now);
        if self.error.is_some() {
            return; // the first failure is the one kept
        }
        // Every failure's message passes here, and reaches reports, logs and the IPC
        // batch: a URL in it (reqwest names the one it sent to) loses its credentials and
        // query values, and the run's secrets (a gateway echoing the key) are scrubbed;
        // the server's text is made one inert line, once, for every destination (its
        // escape sequences and line breaks become visible escapes); and a long text is
        // cut (after the redaction, so no part of a secret survives the cut), its length
        // noted.
        let message = message.into();
        let message = match Redaction::default().text(&message) {
            std::borrow::Cow::Borrowed(_) => message,
            std::borrow::Cow::Owned(redacted) => redacted,
        };
        let message = match inert::terminal(&message) {
            std::borrow::Cow::Borrowed(_) => message,
            std::borrow::Cow::Owned(inert) => inert,
        };
        let message = match inert::bounded(&message, limits::ERROR_MESSAGE) {
            std::borrow::Cow::Borrowed(_) => message,
            std::borrow::Cow::Owned(cut) => cut,
        };
        self.error = Some(RequestError { kind, message });
    }

    /// Fails the exchange for a response over `limit` bytes of `what`.
    fn too_large(&mut self, what: &str, limit: usize) {
        self.fail(
            ErrorKind::ResponseTooLarge,
            format!("{what} larger than {}", limits::describe(limit)),
        );
    }

    fn apply(&mut self, info: ChunkInfo, at: MonoNanos) {
        if info.tool {
            self.first_tool.get_or_insert(at);
        }
        // A tool call's tokens are the answer's output, as text would be.
        let content = info.content || info.tool;
        if content || info.reasoning {
            if self.first_token.is_none()
                && let Some(signal) = &self.first_token_signal
            {
                signal.send_replace(true);
            }
            self.first_token.get_or_insert(at);
            self.streamed_tokens += 1;
            self.token_times.push(at);
        }
        if content && self.first_content.is_none() {
            self.first_content = Some(at);
            self.reasoning_chunks = if info.reasoning {
                0
            } else {
                self.streamed_tokens - 1
            };
        }
        // Field by field: Anthropic sends the prompt count and the output count in two
        // events.
        if let Some(u) = info.usage {
            let old = self.usage.unwrap_or_default();
            self.usage = Some(Usage {
                prompt_tokens: u.prompt_tokens.or(old.prompt_tokens),
                completion_tokens: u.completion_tokens.or(old.completion_tokens),
                reasoning_tokens: u.reasoning_tokens.or(old.reasoning_tokens),
            });
        }
        self.finished |= info.finished;
        if info.finish.is_some() {
            self.finish_reason = info.finish;
        }
    }

    /// An exchange that failed before anything was sent.
    pub fn failed(kind: ErrorKind, message: impl Into<String>) -> Self {
        let mut ex = Self::default();
        ex.fail(kind, message);
        ex
    }

    /// Marks the exchange as cancelled by the client.
    pub fn cancel(&mut self, message: &str) {
        self.fail(ErrorKind::Cancelled, message);
    }

    /// Marks the exchange as given up by plan (`--cancel`).
    pub fn give_up(&mut self) {
        self.fail(ErrorKind::Planned, "the client gave up by plan (--cancel)");
    }
}

/// How requests travel.
#[derive(Debug)]
enum Transport {
    /// The worker's own HTTP/1.1 client: `http://` and `https://` without `--http2`.
    Http1(Http1),
    /// The worker's own HTTP/2 client: `--http2` (h2c, or h2 over TLS).
    Http2(Http2),
}

/// The content type of a request body unless the user's headers name another.
pub const DEFAULT_CONTENT_TYPE: &str = "application/json";

/// A configured OpenAI backend.
#[derive(Debug)]
pub struct Backend {
    transport: Transport,
    /// The connections either client opened, and how long each took.
    connects: Arc<ConnectLog>,
    /// The Content-Type of [`Self::execute`]: the user's header, or the format's.
    content_type: String,
    format: Box<dyn Format>,
    stream: bool,
    request_timeout: Duration,
    ttft_timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    /// Sticky routing: the header a request's session id goes in, when configured.
    session_header: Option<reqwest::header::HeaderName>,
    /// What each request's id starts with (its slot follows); `None` sends no id, as
    /// when the user's own headers carry one.
    request_id: Option<String>,
    /// The seed of the requests' trace ids when each carries a `traceparent` (see
    /// [`Backend::with_trace_seed`]); `None` sends none.
    trace_seed: Option<u64>,
    /// `--no-traceparent` was not given.
    traceparent: bool,
    /// The output length every request asks for when the user's `extra_body` sets it
    /// (`Some(None)`: set, but not to a number); `None` when each request names its own.
    max_tokens_override: Option<Option<u32>>,
    /// Requests offer tools (the data's `tools=N`): a session's reply may be a tool call.
    tools: bool,
    /// Router affinity: the conversations under way and what each sends again.
    affinity: Conversations,
}

impl Backend {
    /// Builds the client and the body template.
    pub fn new(cfg: &BackendConfig) -> Result<Self, BackendError> {
        let mut url = reqwest::Url::parse(cfg.base_url.trim_end_matches('/')).map_err(|e| {
            BackendError::BadUrl {
                url: Redaction::default().url(&cfg.base_url),
                reason: e.to_string(),
            }
        })?;
        // User and password in the URL travel as the Basic authorization of the target's
        // headers, the same on both transports (reqwest would send them, the HTTP/1.1
        // client would not): never in the URL too.
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let format = formats::for_config(cfg);
        let base_path = url.path().trim_end_matches('/').to_string();
        url.set_path(&format!("{base_path}{}", format.path()));
        if !cfg.params.is_empty() {
            url.query_pairs_mut().extend_pairs(cfg.params.iter());
        }

        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            reqwest::header::HeaderValue::from_str(format.content_type())
                .map_err(|_| BackendError::BadHeader("Content-Type".into()))?,
        );
        for (name, value) in format.headers() {
            headers.insert(*name, reqwest::header::HeaderValue::from_static(value));
        }
        // The target's credentials and the user's headers: the one builder every request
        // to the target goes through. What reports may not show is sensitive on the wire
        // too (never indexed by HTTP/2's header compression).
        let redaction = Redaction::default();
        for (name, value) in llmsurge_proto::credentials::for_backend(cfg) {
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| BackendError::BadHeader(name.clone()))?;
            let mut value = reqwest::header::HeaderValue::from_str(value.expose())
                .map_err(|_| BackendError::BadHeader(name.clone()))?;
            value.set_sensitive(!redaction.shows_header(&name));
            headers.insert(header, value);
        }

        let session_header = cfg
            .session_header
            .as_deref()
            .map(|name| {
                reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| BackendError::BadHeader(name.to_string()))
            })
            .transpose()?;
        // A request id the user sets in their own headers wins: never two of them.
        let request_id = match &cfg.request_id {
            Some(_) if headers.contains_key(llmsurge_proto::REQUEST_ID_HEADER) => None,
            Some(prefix) => {
                reqwest::header::HeaderValue::from_str(prefix).map_err(|_| {
                    BackendError::BadHeader(llmsurge_proto::REQUEST_ID_HEADER.into())
                })?;
                Some(prefix.clone())
            }
            None => None,
        };
        let content_type = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(DEFAULT_CONTENT_TYPE)
            .to_string();
        let user_agent = concat!("llmsurge/", env!("CARGO_PKG_VERSION"));
        let connects = Arc::new(ConnectLog::default());
        // A traceparent of the user's own headers wins: never two of them.
        let traceparent =
            cfg.traceparent && !headers.contains_key(llmsurge_proto::TRACEPARENT_HEADER);
        if !matches!(url.scheme(), "http" | "https") {
            return Err(BackendError::BadUrl {
                url: Redaction::default().url(&cfg.base_url),
                reason: "the scheme must be http or https".into(),
            });
        }
        let transport = if !cfg.http2 {
            let h1 = Http1::new(
                &url,
                headers
                    .iter()
                    .filter(|(name, _)| *name != reqwest::header::CONTENT_TYPE)
                    .map(|(name, value)| (name.as_str(), value.as_bytes())),
                user_agent,
                cfg.connect_timeout,
            )
            .log_connects(Arc::clone(&connects))
            .read_token(cfg.affinity.token.clone());
            Transport::Http1(if url.scheme() == "https" {
                let config = crate::tls_conn::client_config(&cfg.tls, false)
                    .map_err(BackendError::Client)?;
                let name = crate::tls_conn::server_name(url.host_str().unwrap_or("localhost"))
                    .map_err(BackendError::Client)?;
                h1.tls(config, name)
            } else {
                h1
            })
        } else {
            let h2 = Http2::new(
                &url,
                headers
                    .iter()
                    .filter(|(name, _)| *name != reqwest::header::CONTENT_TYPE)
                    .map(|(name, value)| (name.as_str(), value.as_bytes(), value.is_sensitive())),
                user_agent,
                cfg.connect_timeout,
            )
            .log_connects(Arc::clone(&connects))
            .read_token(cfg.affinity.token.clone())
            .streams_per_connection(cfg.http2_streams as usize);
            Transport::Http2(if url.scheme() == "https" {
                let config =
                    crate::tls_conn::client_config(&cfg.tls, true).map_err(BackendError::Client)?;
                let name = crate::tls_conn::server_name(url.host_str().unwrap_or("localhost"))
                    .map_err(BackendError::Client)?;
                h2.tls(config, name)
            } else {
                h2
            })
        };
        Ok(Self {
            transport,
            connects,
            content_type,
            format,
            stream: cfg.stream,
            request_timeout: cfg.request_timeout,
            ttft_timeout: cfg.ttft_timeout,
            idle_timeout: cfg.idle_timeout,
            session_header,
            request_id,
            trace_seed: None,
            traceparent,
            max_tokens_override: formats::wire::LENGTH_KEYS
                .iter()
                .find_map(|k| cfg.extra_body.get(*k))
                .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok())),
            tools: cfg.tools > 0,
            affinity: Conversations::new(&cfg.affinity),
        })
    }

    /// Sends each request of the schedule a `traceparent` whose ids derive from the
    /// benchmark's `seed` (see [`llmsurge_proto::TraceIds::of`]), unless the
    /// configuration turned it off.
    pub fn with_trace_seed(mut self, seed: u64) -> Self {
        self.trace_seed = self.traceparent.then_some(seed);
        self
    }

    /// Router affinity: the conversations under way (see [`crate::affinity`]).
    pub fn affinity(&self) -> &Conversations {
        &self.affinity
    }

    /// The output length `req` asks the server for: the user's `extra_body` length,
    /// else its own `max_tokens`; `None` when neither names one. A format's default
    /// (the Messages API's required `max_tokens`) is not a length asked: a short answer
    /// under it is the model's choice. Also bounds what the server can have generated
    /// for a request cut off.
    pub fn max_output_tokens(&self, req: &PreparedRequest) -> Option<u32> {
        match self.max_tokens_override {
            Some(set) => set,
            None => req.max_tokens,
        }
    }

    /// The session header of a request with session id `session`: `(name, value)` when
    /// a session header is configured and the request has an id, else `None`. An id
    /// that is not a valid header value (a control character, say) is an error: sent
    /// as it is, it could end the head early.
    pub fn session_header<'a>(
        &'a self,
        session: Option<&'a str>,
    ) -> Result<Option<(&'a str, &'a str)>, String> {
        let (Some(name), Some(value)) = (&self.session_header, session) else {
            return Ok(None);
        };
        if reqwest::header::HeaderValue::from_str(value).is_err() {
            return Err(format!(
                "session id {value:?} is not a valid value of header {name}"
            ));
        }
        Ok(Some((name.as_str(), value)))
    }

    /// The headers of the request of `slot` (its id, when ids are sent; `None` for a
    /// request outside the schedule, as the pre-run probes) and of session `session`
    /// (see [`Self::session_header`]), turn `turn` (the session's index and the turn,
    /// which pick its trace): one place for both transports.
    /// `affinity`: the request's affinity headers ([`Conversations::headers`]), whose
    /// values are checked here (a token the server sent could be anything).
    pub fn request_headers<'a>(
        &'a self,
        slot: Option<u64>,
        session: Option<&'a str>,
        turn: Option<(u64, u32)>,
        affinity: &'a [(&'a str, String)],
    ) -> Result<RequestHeaders<'a>, String> {
        for (name, value) in affinity {
            if reqwest::header::HeaderValue::from_str(value).is_err() {
                return Err(format!("{value:?} is not a valid value of header {name}"));
            }
        }
        Ok(RequestHeaders {
            session: self.session_header(session)?,
            id: self.request_id.as_deref().zip(slot),
            traceparent: self
                .trace_seed
                .zip(slot)
                .map(|(seed, slot)| llmsurge_proto::TraceIds::of(seed, slot, turn)),
            affinity,
        })
    }
    /// The body of one request.
    pub fn build_body(&self, req: &PreparedRequest) -> Bytes {
        self.format.build(req)
    }

    /// Sends one request and reads its response into `ex`. `ex.start` is set here, just
    /// before the request goes to the socket, unless the caller already set it.
    pub async fn execute(&self, body: Bytes, ex: &mut Exchange) {
        self.send(body, &self.content_type, None, (None, None), ex)
            .await;
    }

    /// [`Self::execute`] for the request of `slot` (its id, when ids are sent) and of
    /// session `session` (sent in the session header, when one is configured), turn
    /// `turn` of its session (its trace; see [`Self::request_headers`]).
    pub async fn execute_for(
        &self,
        body: Bytes,
        slot: u64,
        (session, turn): (Option<&str>, Option<(u64, u32)>),
        ex: &mut Exchange,
    ) {
        self.send(body, &self.content_type, Some(slot), (session, turn), ex)
            .await;
    }

    /// [`Self::execute`] with the body's content type given (multipart bodies name
    /// their boundary in it).
    pub async fn execute_as(&self, body: Bytes, content_type: &str, ex: &mut Exchange) {
        self.send(body, content_type, None, (None, None), ex).await;
    }

    async fn send(
        &self,
        body: Bytes,
        content_type: &str,
        slot: Option<u64>,
        (session, turn): (Option<&str>, Option<(u64, u32)>),
        ex: &mut Exchange,
    ) {
        ex.start.get_or_insert_with(MonoNanos::now);
        let affinity = self.affinity.headers(session);
        let headers = match self.request_headers(slot, session, turn, &affinity) {
            Ok(headers) => headers,
            Err(message) => return ex.fail(ErrorKind::Request, message),
        };
        match &self.transport {
            Transport::Http1(h1) => {
                let out = h1.outgoing_with(content_type, headers, body);
                self.execute_http1(h1, out, None, session, ex).await;
            }
            // Boxed: a stream's task is as large as the largest transport's future, and
            // HTTP/2's would make every HTTP/1.1 stream larger. (HTTP/1.1's own is not:
            // one more allocation per request left the open-stream peak higher, by the
            // holes thousands of simultaneous opens leave in the heap.)
            Transport::Http2(h2) => {
                let out = h2.outgoing_with(content_type, headers, body);
                Box::pin(self.execute_http2(h2, out, session, ex)).await;
            }
        }
    }

    /// The connections opened since the last call: when each began and how long opening
    /// it took (TCP connect, and the TLS handshake on `https://`).
    pub fn drain_connects(&self) -> Vec<(MonoNanos, Duration)> {
        self.connects.drain()
    }

    /// Closes the idle connections too old to be reused (see [`Http1::close_stale`]);
    /// reqwest's pool closes its own.
    pub fn close_stale_idle(&self) {
        match &self.transport {
            Transport::Http1(h1) => h1.close_stale(),
            Transport::Http2(h2) => h2.close_stale(),
        }
    }

    /// The worker's own HTTP/1.1 client, when it carries the requests (`http://` and
    /// `https://` without HTTP/2): the pacer thread sends on its idle connections.
    pub fn http1(&self) -> Option<&Http1> {
        match &self.transport {
            Transport::Http1(h1) => Some(h1),
            Transport::Http2(_) => None,
        }
    }

    /// The Content-Type of [`Self::execute`].
    pub fn content_type(&self) -> &str {
        &self.content_type
    }

    /// Finishes an exchange the pacer began with [`Http1::try_send`]: the rest of the
    /// request, then the response into `ex` (whose `start` the caller set).
    pub async fn execute_presend(&self, presend: Box<Presend>, ex: &mut Exchange) {
        ex.start.get_or_insert_with(MonoNanos::now);
        match &self.transport {
            Transport::Http1(h1) => {
                let out = presend.outgoing().clone();
                self.execute_http1(h1, out, Some(presend), None, ex).await;
            }
            Transport::Http2(_) => ex.fail(
                ErrorKind::Request,
                "internal: a pre-sent request on a transport without its own pool",
            ),
        }
    }

    async fn execute_http1(
        &self,
        h1: &Http1,
        out: Outgoing,
        presend: Option<Box<Presend>>,
        session: Option<&str>,
        ex: &mut Exchange,
    ) {
        let own = self.affinity.pool(session);
        let started = Instant::now();
        // Boxed: the send (a connect, the write, the head) is the largest state of a
        // stream's task; boxed, a stream reading its tokens does not carry its room.
        let sending = Box::pin(h1.send_in(
            out,
            presend,
            &mut ex.retried,
            &mut ex.connected,
            own.as_ref(),
        ));
        let head = timeout_at(self.head_bound(started), sending).await;
        let parts = |r: http1::Response| (r.status, r.token, r.body);
        self.read_own(head.map(|r| r.map(parts)), started, session, ex)
            .await;
    }

    async fn execute_http2(
        &self,
        h2: &Http2,
        out: http2::Outgoing,
        session: Option<&str>,
        ex: &mut Exchange,
    ) {
        let started = Instant::now();
        let head = timeout_at(
            self.head_bound(started),
            h2.send(out, &mut ex.retried, &mut ex.connected),
        )
        .await;
        let parts = |r: http2::Response| (r.status, r.token, r.body);
        self.read_own(head.map(|r| r.map(parts)), started, session, ex)
            .await;
    }

    /// The head of a response of one of the worker's own clients (HTTP/1.1 or h2c), sent
    /// at `started`, as the send gave it: its status and body, or `None` with why there
    /// is none failed into `ex`. Keeps the session token the head carried.
    fn take_head<B>(
        &self,
        head: Result<Result<OwnHead<B>, RequestError>, tokio::time::error::Elapsed>,
        started: Instant,
        session: Option<&str>,
        ex: &mut Exchange,
    ) -> Option<(u16, B)> {
        let (status, token, body) = match head {
            Err(_) => {
                ex.fail(ErrorKind::Timeout, self.head_late(started));
                return None;
            }
            Ok(Err(e)) => {
                ex.fail(e.kind, e.message);
                return None;
            }
            Ok(Ok(head)) => head,
        };
        if let (Some(key), Some(token)) = (session, token) {
            ex.token_refused |= !self.affinity.keep_token(key, token);
        }
        Some((status, body))
    }

    /// The response of one of the worker's own clients (HTTP/1.1 or h2c), sent at
    /// `started`, into `ex`: its head as the send gave it (see [`Self::take_head`]), then
    /// an error's message, or the stream or whole reply; the body is then read to its
    /// end (HTTP/1.1's final chunk, HTTP/2's END_STREAM come after `[DONE]`) so the
    /// connection is reused.
    ///
    /// Not an `async fn`: the head is taken apart before the future is made, which holds
    /// the body alone and reads it in place (an `async fn` would keep the head whole
    /// beside the body it was taken apart into, while the tokens stream).
    fn read_own<'a, B: Pieces + OwnBody + 'a>(
        &'a self,
        head: Result<Result<OwnHead<B>, RequestError>, tokio::time::error::Elapsed>,
        started: Instant,
        session: Option<&str>,
        ex: &'a mut Exchange,
    ) -> impl Future<Output = ()> + 'a {
        let mut taken = self.take_head(head, started, session, ex);
        async move {
            let Some((status, body)) = &mut taken else {
                return;
            };
            let deadline = started + self.request_timeout;
            if !(200..300).contains(status) {
                let message = self
                    .format
                    .error_message(&read_bounded(body, deadline).await);
                return ex.fail(ErrorKind::Http { status: *status }, message);
            }
            if self.stream {
                self.read_stream(body, started, deadline, ex).await;
            } else {
                self.read_full(body, deadline, ex).await;
            }
            if let (None, Some((_, body))) = (&ex.error, taken) {
                body.release();
            }
        }
    }

    /// Until when the response head is waited for: the first token comes after the
    /// head, so the TTFT bound (when set) bounds the head as well as the request timeout
    /// does.
    fn head_bound(&self, started: Instant) -> Instant {
        self.head_wait(started).0
    }

    /// The message of a request whose head came later than [`Self::head_bound`].
    fn head_late(&self, started: Instant) -> String {
        let (_, what, wait) = self.head_wait(started);
        timeout_message(what, wait)
    }

    /// The head's bound, what it bounds, and for how long (built only for the message
    /// when late: the bound itself is taken on every request).
    fn head_wait(&self, started: Instant) -> (Instant, &'static str, Duration) {
        let deadline = started + self.request_timeout;
        match self.ttft_timeout {
            Some(t) if started + t < deadline => (started + t, "first token", t),
            _ => (deadline, "response headers", self.request_timeout),
        }
    }

    async fn read_stream(
        &self,
        body: &mut impl Pieces,
        started: Instant,
        deadline: Instant,
        ex: &mut Exchange,
    ) {
        let mut parser = SseParser::new();
        let mut state = StreamState::default();
        let mut done = false;
        loop {
            let (wait_until, what) = match (ex.first_token, self.ttft_timeout, self.idle_timeout) {
                (None, Some(t), _) => ((started + t).min(deadline), ("first token", t)),
                (Some(_), _, Some(t)) => ((Instant::now() + t).min(deadline), ("next chunk", t)),
                _ => (deadline, ("complete response", self.request_timeout)),
            };
            let piece = match timeout_at(wait_until, body.next_piece()).await {
                Err(_) => {
                    let bound = if wait_until == deadline {
                        ("complete response", self.request_timeout)
                    } else {
                        what
                    };
                    return ex.fail(ErrorKind::Timeout, timeout_message(bound.0, bound.1));
                }
                Ok(Some(Err(e))) => return ex.fail(ErrorKind::StreamBroken, e),
                Ok(None) => break,
                Ok(Some(Ok(piece))) => piece,
            };
            let at = body.arrived();
            let mut failure = None;
            parser.push(&piece, |data| {
                match self.format.parse_event(data, &mut state) {
                    Ok(StreamEvent::Done) => {
                        done = true;
                        false
                    }
                    Ok(StreamEvent::Last(info)) => {
                        self.capture_reply(data, &info, ex);
                        ex.apply(info, at);
                        done = true;
                        false
                    }
                    Ok(StreamEvent::Chunk(info)) => {
                        self.capture_reply(data, &info, ex);
                        ex.apply(info, at);
                        true
                    }
                    Ok(StreamEvent::Error(message)) => {
                        failure = Some((
                            ErrorKind::StreamBroken,
                            format!("server error in stream: {message}"),
                        ));
                        false
                    }
                    Err(message) => {
                        failure = Some((ErrorKind::MalformedResponse, message));
                        false
                    }
                }
            });
            if let Some((kind, message)) = failure {
                return ex.fail(kind, message);
            }
            if done {
                ex.end = Some(at);
                return;
            }
            if let Some(limit) = parser.too_large() {
                return ex.too_large("SSE event", limit);
            }
            if ex.token_times.len() > limits::STREAM_CHUNKS {
                return ex.fail(
                    ErrorKind::ResponseTooLarge,
                    format!(
                        "stream of more than {} chunks with tokens",
                        limits::STREAM_CHUNKS
                    ),
                );
            }
        }
        let at = MonoNanos::now();
        if parser.has_partial_event() {
            ex.fail(
                ErrorKind::StreamBroken,
                "stream ended in the middle of an event",
            );
        } else if ex.finished && self.format.finished_is_complete() {
            ex.end = Some(at);
        } else {
            let last = self.format.final_event();
            ex.fail(
                ErrorKind::StreamBroken,
                format!("stream ended before {last}"),
            );
        }
    }

    /// Appends a content chunk's text to the reply a session collects, and an event's
    /// piece of a tool call when requests offer tools (a no-op outside sessions).
    fn capture_reply(&self, data: &[u8], info: &ChunkInfo, ex: &mut Exchange) {
        let Some(reply) = ex.reply.as_mut() else {
            return;
        };
        if info.content
            && let Some(text) = self.format.event_reply(data)
        {
            reply.push_str(&text);
        }
        // The events that open a call carry no tokens (its id and name come first), so
        // every event of a stream is asked.
        if self.tools {
            self.format.event_tool(data, &mut ex.tool_call);
        }
    }

    async fn read_full(&self, response: &mut impl Pieces, deadline: Instant, ex: &mut Exchange) {
        let mut body = Vec::new();
        loop {
            match timeout_at(deadline, response.next_piece()).await {
                Err(_) => {
                    return ex.fail(
                        ErrorKind::Timeout,
                        timeout_message("complete response", self.request_timeout),
                    );
                }
                Ok(Some(Err(e))) => return ex.fail(ErrorKind::StreamBroken, e),
                Ok(None) => break,
                Ok(Some(Ok(piece))) if body.len() + piece.len() > limits::BODY => {
                    return ex.too_large("response body", limits::BODY);
                }
                Ok(Some(Ok(piece))) => body.extend_from_slice(&piece),
            }
        }
        let at = response.arrived();
        match self.format.parse_full(&body) {
            Ok(info) => {
                if let Some(reply) = ex.reply.as_mut() {
                    reply.push_str(&self.format.full_reply(&body).unwrap_or_default());
                    if self.tools {
                        ex.tool_call = self.format.full_tool(&body);
                    }
                }
                ex.apply(info, at);
                ex.end = Some(at);
            }
            Err(message) => ex.fail(ErrorKind::MalformedResponse, message),
        }
    }
}

/// A response body read piece by piece, whatever the transport.
trait Pieces {
    /// The next piece; `None` at the end; an error as one line.
    async fn next_piece(&mut self) -> Option<Result<Bytes, String>>;

    /// When the last piece's bytes arrived at this host (the kernel's receive stamp).
    fn arrived(&self) -> MonoNanos;
}

impl Pieces for http1::Body {
    async fn next_piece(&mut self) -> Option<Result<Bytes, String>> {
        self.next().await
    }

    fn arrived(&self) -> MonoNanos {
        http1::Body::arrived(self)
    }
}

impl Pieces for http2::Body {
    async fn next_piece(&mut self) -> Option<Result<Bytes, String>> {
        self.next().await
    }

    fn arrived(&self) -> MonoNanos {
        http2::Body::arrived(self)
    }
}

/// A response head of the worker's own clients: status, session token, body.
type OwnHead<B> = (u16, Option<llmsurge_proto::affinity::TokenSeen>, B);

/// A body of the worker's own clients: read to its end, its connection goes back to
/// the pool.
trait OwnBody {
    /// Reads what is left of the body and gives the connection back.
    fn release(self);
}

impl OwnBody for http1::Body {
    fn release(self) {
        http1::Body::release(self)
    }
}

impl OwnBody for http2::Body {
    fn release(self) {
        http2::Body::release(self)
    }
}

/// The start of an error response's body, for its message: at most
/// [`limits::ERROR_BODY`] bytes; a longer body's rest is left unread (and its connection
/// closed).
async fn read_bounded(response: &mut impl Pieces, deadline: Instant) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limits::ERROR_BODY {
        match timeout_at(deadline, response.next_piece()).await {
            Ok(Some(Ok(piece))) => {
                let room = limits::ERROR_BODY - body.len();
                body.extend_from_slice(&piece[..piece.len().min(room)]);
            }
            _ => break,
        }
    }
    body
}

fn timeout_message(what: &str, bound: Duration) -> String {
    format!("no {what} within {:.3}s", bound.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::test_config;
    use crate::source::Prompt;
    use llmsurge_proto::RequestFormat;

    fn req(max_tokens: Option<u32>) -> PreparedRequest {
        PreparedRequest {
            prompt: Prompt::Text("hi".into()),
            prompt_tokens: None,
            max_tokens,
            model: None,
            user: None,
            session: None,
        }
    }

    fn backend(format: RequestFormat, extra: serde_json::Value) -> Backend {
        let mut cfg = test_config(format, true);
        if let serde_json::Value::Object(map) = extra {
            cfg.extra_body = map;
        }
        Backend::new(&cfg).expect("a backend")
    }

    #[test]
    fn the_output_bound_is_the_length_the_body_asks_for() {
        let chat = backend(RequestFormat::Chat, serde_json::json!({}));
        assert_eq!(chat.max_output_tokens(&req(Some(200))), Some(200));
        assert_eq!(chat.max_output_tokens(&req(None)), None);
        // The Messages API's default, sent when the request names none, was not asked.
        let anthropic = backend(RequestFormat::Anthropic, serde_json::json!({}));
        assert_eq!(anthropic.max_output_tokens(&req(None)), None);
        // The user's extra_body replaces the request's own length in the body.
        let set = backend(RequestFormat::Chat, serde_json::json!({"max_tokens": 99}));
        assert_eq!(set.max_output_tokens(&req(Some(200))), Some(99));
        let odd = backend(
            RequestFormat::Responses,
            serde_json::json!({"max_output_tokens": "lots"}),
        );
        assert_eq!(odd.max_output_tokens(&req(Some(200))), None);
    }

    /// A token's instant is when its bytes arrived, not when the client got to them: the
    /// server answers while the client's only runtime thread is busy, and the first token
    /// and the end keep the instant of the server's write.
    #[tokio::test(flavor = "current_thread")]
    async fn tokens_that_arrive_while_the_client_is_busy_keep_their_arrival_instant() {
        let events = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n"
        );
        answered_while_busy(false, true, "text/event-stream", events).await;
    }

    /// The same over h2c (`--http2`): each DATA frame's bytes carry the kernel's stamp of
    /// the read that completed the frame.
    #[tokio::test(flavor = "current_thread")]
    async fn h2c_tokens_that_arrive_while_the_client_is_busy_keep_their_arrival_instant() {
        let events = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n"
        );
        answered_while_busy(true, true, "text/event-stream", events).await;
    }

    /// The same for a whole (non-streamed) answer: its end is when its last bytes came.
    #[tokio::test(flavor = "current_thread")]
    async fn a_whole_answer_that_arrives_while_the_client_is_busy_keeps_its_arrival_instant() {
        let body = concat!(
            "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},",
            "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}"
        );
        answered_while_busy(false, false, "application/json", body).await;
    }

    /// Every open stream holds its request's future for as long as tokens come, and 50,000
    /// streams hold 50,000 of them: the future must carry neither HTTP/2's room nor that
    /// of its transient states (opening a connection, the TLS handshake, the send), each
    /// boxed for the moment it runs. Sizes on this toolchain (debug): the request 1,648
    /// bytes (3,088 with nothing boxed, 1,952 with HTTP/2's part inline), HTTP/1.1's part
    /// 1,424 (1,600 with its send unboxed, 2,864 with the connect too).
    #[test]
    fn a_request_future_does_not_carry_the_connect_and_the_send() {
        const REQUEST_MAX: usize = 1_760;
        const HTTP1_MAX: usize = 1_500;
        for http2 in [false, true] {
            let mut cfg = test_config(RequestFormat::Chat, true);
            cfg.base_url = "http://127.0.0.1:9".into();
            cfg.http2 = http2;
            let backend = Backend::new(&cfg).expect("a backend");
            let request = backend.build_body(&req(Some(1)));
            let mut ex = Exchange::default();
            let size = size_of_val(&backend.execute(request.clone(), &mut ex));
            assert!(
                size <= REQUEST_MAX,
                "a request's future is {size} bytes (http2: {http2}), over {REQUEST_MAX}"
            );
            if let Transport::Http1(h1) = &backend.transport {
                let out = h1.outgoing("application/json", request);
                let size = size_of_val(&backend.execute_http1(h1, out, None, None, &mut ex));
                assert!(
                    size <= HTTP1_MAX,
                    "HTTP/1.1's part of a request is {size} bytes, over {HTTP1_MAX}"
                );
            }
        }
    }

    /// An HTTP/2 frame as a server writes it.
    fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// Sends one chat request to a raw server that answers `body` while the client's one
    /// runtime thread is held, and checks the first token and the end fall between the
    /// server's write and the thread getting free.
    async fn answered_while_busy(
        http2: bool,
        stream: bool,
        content_type: &str,
        body: &'static str,
    ) {
        use std::io::{Read, Write};
        // Held to the end: the host's receive stamps on before the client's socket reads.
        let _stamps = crate::rx_time::tests::stamps_live().await;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("loopback");
        let mut cfg = test_config(RequestFormat::Chat, stream);
        cfg.base_url = format!("http://{}", listener.local_addr().expect("loopback"));
        cfg.http2 = http2;
        let backend = Backend::new(&cfg).expect("a backend");
        let request = backend.build_body(&req(Some(1)));
        let (received_tx, received_rx) = tokio::sync::oneshot::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (wrote_tx, wrote_rx) = std::sync::mpsc::channel();
        let answer = if http2 {
            // SETTINGS, a head of :status 200 (static entry 8) and content-type, and the
            // body in one DATA frame that ends stream 1.
            let mut head = vec![0x88, 0x0f, 0x10, content_type.len() as u8];
            head.extend_from_slice(content_type.as_bytes());
            let mut bytes = h2_frame(0x4, 0, 0, &[]);
            bytes.extend(h2_frame(0x1, 0x4, 1, &head));
            bytes.extend(h2_frame(0x0, 0x1, 1, body.as_bytes()));
            bytes
        } else {
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        };
        let server = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().expect("loopback");
            let mut request = vec![0u8; 64 << 10];
            let n = socket.read(&mut request).expect("loopback");
            assert!(n > 0, "no request came");
            received_tx.send(()).expect("the test waits");
            go_rx.recv().expect("the test says go");
            let before = MonoNanos::now();
            socket.write_all(&answer).expect("loopback");
            crate::rx_time::wait_until_taken(std::os::fd::AsRawFd::as_raw_fd(&socket));
            wrote_tx.send(before).expect("the test waits");
        });
        let exchange = tokio::spawn(async move {
            let mut ex = Exchange::default();
            backend.execute(request, &mut ex).await;
            ex
        });
        received_rx.await.expect("the server got the request");
        // The runtime's one thread is held here until the answer is in the client's
        // socket, as a thread busy with a thousand other streams is.
        go_tx.send(()).expect("the server waits");
        let before = wrote_rx.recv().expect("the server wrote");
        // Busy a while longer, so the read's own instant lies well past any slack.
        std::thread::sleep(Duration::from_millis(5));
        let free = MonoNanos::now();
        let ex = exchange.await.expect("the exchange task");
        server.join().expect("the server thread");

        assert!(ex.error.is_none(), "{:?}", ex.error);
        let first = ex.first_content.expect("a first token");
        let slack = crate::rx_time::tests::CLOCK_READS_SLACK_NS;
        assert!(
            before.0.saturating_sub(slack) <= first.0 && first.0 + slack < free.0,
            "first token at {first:?}: not between the write ({before:?}) and the client's thread getting free ({free:?})"
        );
        assert_eq!(ex.end, Some(first), "one read brought the whole answer");
    }
}
