//! A small HTTP/1.1 client for `http://` and `https://` targets.
//!
//! Why not hyper's pooled client (through reqwest): each open connection there holds an
//! 8 KiB read buffer, an 8 KiB write buffer, a dispatch channel block of ~9 KB and a
//! connection task, ~20 KB a stream before a byte of the response arrives
//! (docs/performance.md). Here a connection is its socket: the request goes out from a
//! head prefix built once per backend (request line, Host, User-Agent, Authorization,
//! the user's headers) plus a few bytes per request (Content-Type, Content-Length) and
//! the body, in one vectored write; a read buffer exists only while bytes are being
//! read, sized for SSE (1 KiB, doubled while reads fill it, back down when they do not).
//! Response heads and chunk sizes are parsed by `httparse`.
//!
//! Idle connections sit in a pool shared by the runtime and the pacer thread (which may
//! write a request on one itself: tokio's `try_write` works from any thread). A
//! connection goes back to the pool only after a whole response was read and the server
//! did not say `Connection: close`, and is not reused after [`POOL_IDLE`] idle. A pooled
//! connection the server closed meanwhile is noticed before a request is written on it
//! (a peek at the socket) and closed. A close that crosses the request on the wire, so
//! that the server never took the request whole (the write failed, or the server reset
//! the connection, as a kernel does for bytes that reach a closed socket), fails it on
//! the reused connection before any byte of a response: the request is then sent once
//! more on a fresh connection, within the same exchange (marked `retried` in its record,
//! counted as `requests.resent` in the report). Never on a fresh connection, never after
//! a response byte, never a third time, and never when the request was written whole
//! and the server closed cleanly before answering: the server may have read and run it
//! (a generation is not idempotent, RFC 9110 §9.2.2), so that is an errored request.
//!
//! A server may answer before it read the whole request (a proxy's 413 for a body over
//! its limit): the answer is read when the write fails or while it waits for room.
//!
//! On `https://` a connection is its socket and its TLS session ([`crate::tls_conn`]:
//! rustls driven sans-IO, boxed, so a plain connection stays its socket): requests are
//! encrypted as they are written (by the pacer thread too), responses decrypted as they
//! are read, with the kernel's receive stamps, and all of the above holds alike. The
//! handshake is part of the connect (inside the connect timeout, timed in its log).

use crate::connections::ConnectLog;
use crate::idle_pool::{IdlePool, POOL_IDLE};
use crate::parts::slices;
use crate::resend::{self, Fault};
use crate::rx_time;
use crate::tls_conn::Tls;
use bytes::{Buf, Bytes, BytesMut};
use futures_util::FutureExt;
use llmsurge_proto::{ErrorKind, MonoNanos, RequestError};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// The first read of a response: an SSE event of a few tokens fits many times over.
const READ_MIN: usize = 1 << 10;
/// Reads grow (doubling while each fills the buffer) up to this, for large bodies.
const READ_MAX: usize = 32 << 10;
/// A response head larger than this is refused as malformed.
pub const HEAD_LIMIT: usize = llmsurge_proto::limits::RESPONSE_HEAD;
/// A chunk-size or trailer line longer than this is refused as malformed.
const LINE_LIMIT: usize = 4 << 10;
/// Headers a response head is parsed for at first (on the stack); a head with more is
/// parsed again with room for as many as [`HEAD_LIMIT`] bytes can hold, so only the byte
/// limit bounds the count (proxies add many headers; hyper accepts 100).
const MAX_HEADERS: usize = 128;
/// The shortest header line (`a:` CRLF): a head of `n` bytes has at most `n / 4` headers.
const MIN_HEADER_BYTES: usize = 4;

/// How long the rest of a body whose content is done with (what follows `[DONE]`: the
/// final chunk, as a rule in the same packet) is read for, in the background, so that its
/// connection can be reused; a server still sending after this loses the connection.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);
/// The most bytes read while draining such a rest.
const DRAIN_BYTES: usize = 64 << 10;

/// Idle connections (or one conversation's own, with `--sticky-connections`).
pub type Pool = IdlePool<Link>;

/// An open connection: its socket, and its TLS session on `https://`.
#[derive(Debug)]
pub struct Link {
    stream: TcpStream,
    tls: Option<Box<Tls>>,
}

impl Link {
    /// Writes the bytes `from..upto` of `parts` as far as the socket takes them now: how
    /// many more are on the wire (`WouldBlock`: none, for now).
    fn try_write(&mut self, parts: &[&[u8]; 3], from: usize, upto: usize) -> io::Result<usize> {
        match &mut self.tls {
            None => self.stream.try_write_vectored(&slices(parts, from, upto)),
            Some(tls) => tls.try_write(&self.stream, parts, from, upto),
        }
    }

    /// Reads what the socket holds now into `buf` (room for `want` more bytes made when
    /// needed): how many bytes (0 at the end) and when they arrived; `WouldBlock` when
    /// none came (which clears tokio's readiness).
    fn try_read(&mut self, buf: &mut BytesMut, want: usize) -> io::Result<(usize, MonoNanos)> {
        match &mut self.tls {
            None => {
                if buf.capacity() - buf.len() < want {
                    buf.reserve(want);
                }
                rx_time::try_read(&self.stream, buf)
            }
            Some(tls) => tls.read_with(&self.stream, buf, want, rx_time::try_read),
        }
    }

    /// Whether an idle connection, idle for `idle`, may carry a request: within the
    /// idle bound and still open.
    fn reusable(&mut self, idle: Duration) -> bool {
        idle <= POOL_IDLE && self.still_open()
    }

    /// Whether an idle connection is still open (see [`still_open`]).
    fn still_open(&mut self) -> bool {
        match &mut self.tls {
            None => still_open(&self.stream),
            // Session tickets may be waiting: readable is not closed.
            Some(tls) => still_open(&self.stream) || tls.still_open(&self.stream),
        }
    }

    /// Reads into `buf` whatever the socket holds now (see [`drain_ready`]).
    fn drain_ready(&mut self, buf: &mut BytesMut) {
        match &mut self.tls {
            None => drain_ready(&self.stream, buf),
            Some(tls) => {
                while buf.len() <= HEAD_LIMIT {
                    match tls.read_with(&self.stream, buf, READ_MIN, rx_time::recv_now) {
                        Ok((n, _)) if n > 0 => {}
                        _ => return,
                    }
                }
            }
        }
    }
}

/// A request's failure: the kind the report counts and a one-line message.
fn failure(kind: ErrorKind, message: impl Into<String>) -> RequestError {
    RequestError {
        kind,
        message: message.into(),
    }
}

/// An HTTP/1.1 client for one target URL.
pub struct Http1 {
    /// `host:port` to connect to.
    authority: String,
    /// The request line and every fixed header, each ending in CRLF (holds the
    /// Authorization header: never printed).
    head_prefix: Bytes,
    connect_timeout: Duration,
    pool: Pool,
    /// Where each connection's connect time goes (none: not timed).
    connects: Option<Arc<ConnectLog>>,
    /// `--session-token`: the token a response head may carry.
    token: Option<llmsurge_proto::affinity::SessionToken>,
    /// `https://`: the TLS settings and the name the server's certificate must have.
    tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls::pki_types::ServerName<'static>,
    )>,
}

impl std::fmt::Debug for Http1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The head prefix is left out: it carries the API key.
        f.debug_struct("Http1")
            .field("authority", &self.authority)
            .finish_non_exhaustive()
    }
}

/// One request's bytes: the per-request head tail and the body.
#[derive(Clone, Debug)]
pub struct Outgoing {
    tail: Bytes,
    body: Bytes,
}

impl Outgoing {
    fn len(&self, prefix: &Bytes) -> usize {
        prefix.len() + self.tail.len() + self.body.len()
    }
}

/// The headers of one request alone, beside the client's fixed ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestHeaders<'a> {
    /// Sticky routing: the session header's name and the request's session id.
    pub session: Option<(&'a str, &'a str)>,
    /// The request id: the run's and benchmark's prefix and the request's slot, sent in
    /// [`llmsurge_proto::REQUEST_ID_HEADER`] as their concatenation.
    pub id: Option<(&'a str, u64)>,
    /// Its W3C trace context, sent as `traceparent`.
    pub traceparent: Option<llmsurge_proto::TraceIds>,
    /// Router affinity: the conversation's key, its parent's, its session token.
    pub affinity: &'a [(&'a str, String)],
}

/// A connection of the pool.
#[derive(Debug)]
pub struct Conn {
    link: Link,
    /// It served a request before: a failure before any response byte may be the
    /// server having closed it while idle.
    reused: bool,
}

/// A request written, wholly or in part, outside the runtime (by the pacer thread).
#[derive(Debug)]
pub struct Presend {
    conn: Conn,
    out: Outgoing,
    sent: usize,
    total: usize,
}

impl Presend {
    /// Bytes of the request already on the socket.
    pub fn sent(&self) -> usize {
        self.sent
    }

    /// The request's length in bytes, head included.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The request.
    pub fn outgoing(&self) -> &Outgoing {
        &self.out
    }
}

impl Http1 {
    /// A client for `url` (path and query included) sending `headers` (already
    /// validated; Content-Type is left out: it is per request) on every request.
    pub fn new<'a>(
        url: &reqwest::Url,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        user_agent: &str,
        connect_timeout: Duration,
    ) -> Self {
        let host = url.host_str().unwrap_or("localhost");
        let port = url.port_or_known_default().unwrap_or(80);
        let authority = format!("{host}:{port}");
        let host_header = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        let mut target = url.path().to_string();
        if let Some(q) = url.query() {
            target.push('?');
            target.push_str(q);
        }
        let mut head = Vec::with_capacity(256);
        head.extend_from_slice(format!("POST {target} HTTP/1.1\r\n").as_bytes());
        let mut user_host = false;
        let mut extra = Vec::new();
        for (name, value) in headers {
            user_host |= name.eq_ignore_ascii_case("host");
            extra.extend_from_slice(name.as_bytes());
            extra.extend_from_slice(b": ");
            extra.extend_from_slice(value);
            extra.extend_from_slice(b"\r\n");
        }
        if !user_host {
            head.extend_from_slice(format!("host: {host_header}\r\n").as_bytes());
        }
        head.extend_from_slice(format!("user-agent: {user_agent}\r\naccept: */*\r\n").as_bytes());
        head.extend_from_slice(&extra);
        Self {
            authority,
            head_prefix: Bytes::from(head),
            connect_timeout,
            pool: Pool::default(),
            connects: None,
            token: None,
            tls: None,
        }
    }

    /// Speaks TLS with `config` on every connection, to a server named `name`.
    pub fn tls(
        mut self,
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    ) -> Self {
        self.tls = Some((config, name));
        self
    }

    /// Reads the session token `token` names from each response head.
    pub fn read_token(mut self, token: Option<llmsurge_proto::affinity::SessionToken>) -> Self {
        self.token = token;
        self
    }

    /// Logs the time each connection takes to open into `log`.
    pub fn log_connects(mut self, log: Arc<ConnectLog>) -> Self {
        self.connects = Some(log);
        self
    }

    /// The bytes of one request: `body` sent as `content_type`.
    pub fn outgoing(&self, content_type: &str, body: Bytes) -> Outgoing {
        self.outgoing_with(content_type, RequestHeaders::default(), body)
    }

    /// [`Self::outgoing`] with the headers of this request alone (its id, a session id
    /// for sticky routing), written in the same per-request tail: no extra allocation.
    /// The caller validated them (see [`crate::backend::Backend::request_headers`]).
    pub fn outgoing_with(
        &self,
        content_type: &str,
        headers: RequestHeaders<'_>,
        body: Bytes,
    ) -> Outgoing {
        use std::fmt::Write as _;
        let len = body.len();
        let mut tail = String::with_capacity(160);
        // Writing to a String cannot fail.
        if let Some((name, value)) = headers.session {
            let _ = write!(tail, "{name}: {value}\r\n");
        }
        for (name, value) in headers.affinity {
            let _ = write!(tail, "{name}: {value}\r\n");
        }
        if let Some((prefix, slot)) = headers.id {
            let _ = write!(
                tail,
                "{}: {prefix}{slot}\r\n",
                llmsurge_proto::REQUEST_ID_HEADER
            );
        }
        if let Some(ids) = headers.traceparent {
            // Hex digits into a stack buffer, then into the tail: no allocation.
            let mut buf = [0u8; llmsurge_proto::trace_context::TRACEPARENT_LEN];
            tail.push_str(llmsurge_proto::TRACEPARENT_HEADER);
            tail.push_str(": ");
            tail.push_str(ids.traceparent(&mut buf));
            tail.push_str("\r\n");
        }
        let _ = write!(
            tail,
            "content-type: {content_type}\r\ncontent-length: {len}\r\n\r\n"
        );
        Outgoing {
            tail: Bytes::from(tail),
            body,
        }
    }

    /// Idle connections in the pool.
    pub fn idle(&self) -> usize {
        self.pool.idle()
    }

    /// Closes the idle connections that can no longer be reused (see
    /// [`IdlePool::close_stale`]).
    pub fn close_stale(&self) {
        self.pool.close_stale();
    }

    /// Takes the most recently used idle connection that is fresh and still open.
    pub fn take_idle(&self) -> Option<Conn> {
        let link = self.pool.take(Link::reusable)?;
        Some(Conn { link, reused: true })
    }

    /// [`Self::take_idle`] that gives up rather than wait for the pool's lock.
    pub fn try_take_idle(&self) -> Option<Conn> {
        let link = self.pool.try_take(Link::reusable)?;
        Some(Conn { link, reused: true })
    }

    /// A conversation's own idle connection that is still open, whatever its age.
    fn open_own(&self, pool: &Pool) -> Option<Conn> {
        let link = pool.take(|link, _| link.still_open())?;
        Some(Conn { link, reused: true })
    }

    /// Puts a connection taken with [`Self::take_idle`] and not used back.
    pub fn put_back(&self, conn: Conn) {
        self.pool.put(conn.link);
    }

    /// Writes as much of `out` on `conn` as the socket takes now, up to `max` bytes,
    /// without waiting; callable from any thread. The runtime finishes the exchange with
    /// [`Self::send`].
    pub fn try_send(&self, mut conn: Conn, out: Outgoing, max: usize) -> Box<Presend> {
        let parts = [&self.head_prefix[..], &out.tail[..], &out.body[..]];
        let total = out.len(&self.head_prefix);
        let upto = total.min(max);
        let mut sent = 0;
        while sent < upto {
            match conn.link.try_write(&parts, sent, upto) {
                Ok(0) | Err(_) => break, // the runtime writes the rest, or finds the error
                Ok(n) => sent += n,
            }
        }
        // Boxed: a stream's future holds it (or room for it) until the response ends.
        Box::new(Presend {
            conn,
            out,
            sent,
            total,
        })
    }

    /// Sends a request (or finishes sending one the pacer began) and reads the response
    /// head. Not bounded in time here but by the caller, except the connect.
    ///
    /// A request on a reused connection that the server did not take whole and got no
    /// byte of a response (the server closed the connection while idle, its close
    /// crossing the request on the wire) is sent once more, on a fresh connection, and
    /// `retried` set (before the resend, so a caller whose timeout ends the exchange
    /// still sees it). Never on a fresh connection, never after a response byte, never
    /// a third time, never for a request written whole that the server closed on.
    /// `connected` is set once the request has a connection (opened or reused).
    pub async fn send(
        &self,
        out: Outgoing,
        presend: Option<Box<Presend>>,
        retried: &mut bool,
        connected: &mut bool,
    ) -> Result<Response, RequestError> {
        self.send_in(out, presend, retried, connected, None).await
    }

    /// [`Self::send`] on a conversation's own pool (`--sticky-connections`) when given:
    /// its idle connection is taken whatever its age (kept across think times; one the
    /// server closed is found closed and replaced), and the connection goes back to it.
    pub async fn send_in(
        &self,
        out: Outgoing,
        presend: Option<Box<Presend>>,
        retried: &mut bool,
        connected: &mut bool,
        own: Option<&Pool>,
    ) -> Result<Response, RequestError> {
        let idle = match own {
            Some(pool) => self.open_own(pool),
            None => None,
        };
        let (mut conn, mut sent, out) = match (presend, idle) {
            (Some(p), _) => {
                let p = *p;
                (p.conn, p.sent, p.out)
            }
            (None, Some(conn)) => (conn, 0, out),
            (None, None) if own.is_some() => (self.connect().await?, 0, out),
            (None, None) => match self.take_idle() {
                Some(conn) => (conn, 0, out),
                None => (self.connect().await?, 0, out),
            },
        };
        *connected = true;
        loop {
            match self.exchange(&mut conn, &out, sent).await {
                Ok((status, framing, keep_alive, buf, arrived, token)) => {
                    return Ok(Response {
                        status,
                        token,
                        body: Body {
                            pool: own.unwrap_or(&self.pool).clone(),
                            conn: Some(conn.link),
                            buf,
                            framing,
                            keep_alive,
                            read_size: READ_MIN,
                            arrived,
                        },
                    });
                }
                Err(fault) => {
                    // A reused connection the server closed (its keep-alive timeout)
                    // before the request arrived whole: once more, on a fresh one.
                    resend::once_more(fault, conn.reused, retried)?;
                    conn = self.connect().await?;
                    sent = 0;
                }
            }
        }
    }

    async fn connect(&self) -> Result<Conn, RequestError> {
        let began = MonoNanos::now();
        let connecting = async {
            let stream = TcpStream::connect(self.authority.as_str()).await?;
            // Per-token writes by the server need Nagle off on its side; on ours the
            // request goes out in one write, which must not wait for an ACK either.
            let _ = stream.set_nodelay(true);
            rx_time::enable(&stream);
            Ok::<_, io::Error>(stream)
        };
        let opening = async {
            let stream = connecting.await.map_err(|e| {
                failure(
                    ErrorKind::Connect,
                    format!("connecting to {}: {e}", self.authority),
                )
            })?;
            let tls = match &self.tls {
                None => None,
                Some((config, name)) => {
                    let mut tls = Tls::new(config, name.clone()).map_err(|e| {
                        failure(
                            ErrorKind::Connect,
                            format!("connecting to {}: TLS: {e}", self.authority),
                        )
                    })?;
                    tls.handshake(&stream).await.map_err(|e| {
                        failure(
                            ErrorKind::Connect,
                            format!("connecting to {}: {}", self.authority, e.message()),
                        )
                    })?;
                    Some(Box::new(tls))
                }
            };
            Ok::<_, RequestError>(Link { stream, tls })
        };
        // Boxed: opening (a TCP connect and a TLS handshake) is a large future, and every
        // stream's task is as large as its largest state; boxed, it costs memory only
        // while a connection opens, not while a stream waits for its tokens.
        let link = match tokio::time::timeout(self.connect_timeout, Box::pin(opening)).await {
            // No connection: a `connect` error like a refused one, never a `timeout`,
            // which says the server held the request (the verdicts read it so).
            Err(_) => {
                return Err(failure(
                    ErrorKind::Connect,
                    format!(
                        "connecting to {}: no connection within {:.3}s",
                        self.authority,
                        self.connect_timeout.as_secs_f64()
                    ),
                ));
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(link)) => link,
        };
        if let Some(log) = &self.connects {
            log.record(began, MonoNanos::now().since(began));
        }
        Ok(Conn {
            link,
            reused: false,
        })
    }

    /// Writes what is left of the request and reads the response head: its status, how
    /// its body ends, whether the connection may be reused, the body's bytes read with
    /// it, and when the last bytes read arrived.
    ///
    /// A server may answer before it read the whole request (a 413 for a body over its
    /// limit, then a close, which resets our write): the response is read from the
    /// socket, whether the write failed or is still waiting for room, and the
    /// connection is not reused.
    async fn exchange(
        &self,
        conn: &mut Conn,
        out: &Outgoing,
        mut sent: usize,
    ) -> Result<
        (
            u16,
            Framing,
            bool,
            BytesMut,
            MonoNanos,
            Option<llmsurge_proto::affinity::TokenSeen>,
        ),
        Fault,
    > {
        let parts = [&self.head_prefix[..], &out.tail[..], &out.body[..]];
        let total = out.len(&self.head_prefix);
        let mut buf = BytesMut::new();
        // The server answered before the request was written whole.
        let mut early = false;
        // When the bytes in `buf` arrived (an early answer's: when it was read).
        let mut arrived = None;
        while sent < total {
            let failed = match conn.link.try_write(&parts, sent, total) {
                Ok(0) => io::Error::from(io::ErrorKind::WriteZero),
                Ok(n) => {
                    sent += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    tokio::select! {
                        biased;
                        ready = conn.link.stream.writable() => match ready {
                            Ok(()) => continue,
                            Err(e) => e,
                        },
                        // Readiness may be left over from the connection's last response:
                        // only bytes (or an EOF, a reset) read now are an answer.
                        Ok(()) = conn.link.stream.readable() => match conn.link.try_read(&mut buf, READ_MIN) {
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                if buf.is_empty() {
                                    buf = BytesMut::new();
                                }
                                continue;
                            }
                            Ok((n, _)) if n > 0 => {
                                // A 100 Continue (sent unasked by some servers) is no
                                // answer: the body goes on.
                                if skip_informational(&mut buf).map_err(Fault::Failed)? {
                                    continue;
                                }
                                early = true;
                                arrived = Some(MonoNanos::now());
                                break;
                            }
                            Ok(_) => io::Error::from(io::ErrorKind::UnexpectedEof),
                            Err(e) => e,
                        },
                    }
                }
                Err(e) => e,
            };
            // What the server sent before it closed is still in the socket: its answer.
            conn.link.drain_ready(&mut buf);
            if buf.is_empty() {
                return Err(Fault::Undelivered(format!(
                    "connection closed while sending the request: {failed}"
                )));
            }
            early = true;
            arrived = Some(MonoNanos::now());
            break;
        }
        loop {
            // Informational heads (100 Continue, 103 Early Hints) precede the real one.
            while !buf.is_empty()
                && let Some(head) = parse_head(&buf).map_err(Fault::Failed)?
            {
                let token = match &self.token {
                    Some(t) if !(100..200).contains(&head.status) => {
                        head_token(&buf[..head.len], t)
                    }
                    _ => None,
                };
                buf.advance(head.len);
                if (100..200).contains(&head.status) && head.status != 101 {
                    continue;
                }
                if buf.is_empty() {
                    buf = BytesMut::new(); // an open stream waiting holds no buffer
                }
                // Part of the request may still be unsent: the connection is done.
                let keep_alive = head.keep_alive && !early;
                let arrived = arrived.unwrap_or_else(MonoNanos::now);
                return Ok((head.status, head.framing, keep_alive, buf, arrived, token));
            }
            if buf.len() > HEAD_LIMIT {
                return Err(Fault::Failed(head_too_large()));
            }
            let want = if buf.is_empty() { READ_MIN } else { buf.len() };
            match read_more(&mut conn.link, &mut buf, want).await {
                Ok((0, _)) if buf.is_empty() => {
                    // The request went out whole and the server closed cleanly: it may
                    // have read and run it, so it is not sent again (see `send`).
                    return Err(Fault::Failed(failure(
                        ErrorKind::ConnectionClosed,
                        "connection closed after the request was sent, before the response head (no byte of it arrived; not resent: the server may have run it)",
                    )));
                }
                Ok((0, _)) => {
                    return Err(Fault::Failed(failure(
                        ErrorKind::ConnectionClosed,
                        format!(
                            "connection closed in the middle of the response head ({} bytes of it)",
                            buf.len()
                        ),
                    )));
                }
                // A reset: the server's kernel refused the request's bytes (they reached
                // a closed socket, or the server closed with them unread), so the server
                // did not take the request whole: sent once more on a reused connection.
                Err(e) if buf.is_empty() && e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(Fault::Undelivered(format!(
                        "connection reset before the response head: {e}"
                    )));
                }
                Err(e) if buf.is_empty() => {
                    return Err(Fault::Failed(failure(
                        ErrorKind::ConnectionClosed,
                        format!("connection failed before the response head: {e}"),
                    )));
                }
                Err(e) => {
                    return Err(Fault::Failed(failure(
                        ErrorKind::ConnectionClosed,
                        format!("connection failed in the middle of the response head: {e}"),
                    )));
                }
                Ok((_, at)) => arrived = Some(at),
            }
        }
    }
}

/// Drops the whole informational heads (1xx but 101) at the start of `buf`; `true`
/// when nothing else is in it.
fn skip_informational(buf: &mut BytesMut) -> Result<bool, RequestError> {
    while let Some(head) = parse_head(buf)? {
        if !(100..200).contains(&head.status) || head.status == 101 {
            return Ok(false);
        }
        buf.advance(head.len);
    }
    Ok(buf.is_empty())
}

fn head_too_large() -> RequestError {
    failure(
        ErrorKind::MalformedResponse,
        format!("response head larger than {} KiB", HEAD_LIMIT >> 10),
    )
}

/// Reads into `buf` whatever the socket holds now, without waiting, up to EOF, an error
/// or the head limit. Asks the kernel directly: tokio's readiness, which only the runtime
/// updates, may not know yet of bytes that came with the reset that failed a write.
fn drain_ready(stream: &TcpStream, buf: &mut BytesMut) {
    use nix::libc;
    use std::os::fd::AsRawFd;
    while buf.len() <= HEAD_LIMIT {
        buf.reserve(READ_MIN);
        let spare = buf.spare_capacity_mut();
        // SAFETY: recv(2) writes at most `spare.len()` bytes into the buffer's spare
        // capacity, which is that long; the fd is the stream's own, open for the call.
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                spare.len(),
                libc::MSG_DONTWAIT,
            )
        };
        let Ok(n) = usize::try_from(n) else { return };
        if n == 0 {
            return;
        }
        // SAFETY: recv(2) initialised the first `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n) };
    }
}

/// Whether an idle connection is still open: no EOF, reset or unsolicited bytes queued.
///
/// A server closes idle connections on its own keep-alive timeout; a request written on
/// one after that fails, and once written it cannot be sent again safely (the server may
/// have taken it). So the kernel is asked directly (a non-blocking peek at the socket,
/// not tokio's readiness, which only the runtime thread updates): a close that reached
/// us is seen before the write. One that crosses the request on the wire still fails it
/// (`connection_closed`), as with hyper.
fn still_open(stream: &TcpStream) -> bool {
    use nix::libc;
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    // SAFETY: recv(2) writes at most 1 byte into `byte`, which is 1 byte long; the fd is
    // the stream's own, open for the duration of the call.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&raw mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
}

/// Reads once (waiting for readiness first, with no buffer held meanwhile) into `buf`,
/// making room for at least `want` more bytes: how many bytes came (0 at EOF) and when
/// they arrived ([`rx_time`]).
async fn read_more(
    link: &mut Link,
    buf: &mut BytesMut,
    want: usize,
) -> io::Result<(usize, MonoNanos)> {
    // Polled, not `readable().await`: that future (a waiter of its own, ~150 bytes) would
    // be part of every open stream while it waits for its next token. One task reads a
    // connection at a time, so the stream's one reader waker is enough.
    std::future::poll_fn(|cx| {
        loop {
            if let Err(e) = std::task::ready!(link.stream.poll_read_ready(cx)) {
                return std::task::Poll::Ready(Err(e));
            }
            match link.try_read(buf, want) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Readiness left over from the last read (tokio clears it only on
                    // WouldBlock): wait without the buffer, or every waiting stream
                    // holds one.
                    if buf.is_empty() {
                        *buf = BytesMut::new();
                    }
                }
                other => return std::task::Poll::Ready(other),
            }
        }
    })
    .await
}

/// How the body's end is known.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Framing {
    /// This many bytes left.
    Length(u64),
    /// Chunked transfer coding.
    Chunked(Chunk),
    /// Until the server closes the connection.
    Close,
    /// Read in full.
    Done,
}

/// Where a chunked body is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// This many bytes of chunk data left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines up to an empty one.
    Trailers,
}

struct Head {
    len: usize,
    status: u16,
    framing: Framing,
    keep_alive: bool,
}

/// Parses a response head at the start of `buf`: `None` until it is whole.
/// A head larger than [`HEAD_LIMIT`] is refused, also when it arrived whole in one read.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, RequestError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match parse_head_with(buf, &mut headers) {
        Err(httparse::Error::TooManyHeaders) => {
            // Rare: room for as many headers as the head limit allows, on the heap.
            let most = buf.len().min(HEAD_LIMIT + 1) / MIN_HEADER_BYTES + 1;
            let mut headers = vec![httparse::EMPTY_HEADER; most];
            match parse_head_with(buf, &mut headers) {
                Err(httparse::Error::TooManyHeaders) => Err(head_too_large()),
                Err(e) => Err(malformed_head(buf, e)),
                Ok(head) => head,
            }
        }
        Err(e) => Err(malformed_head(buf, e)),
        Ok(Err(e)) => Err(e),
        Ok(Ok(head)) => Ok(head),
    }
}

fn malformed_head(buf: &[u8], e: httparse::Error) -> RequestError {
    // A TLS record (an alert or a handshake, version 3.x) where a status line belongs:
    // an http:// URL to an HTTPS port. Said as the target check says it.
    let message = if matches!(buf, [0x15 | 0x16, 0x03, ..]) {
        llmsurge_proto::http::ConnectProblem::TlsOnPlainHttp.line()
    } else {
        format!("malformed response head: {e}")
    };
    failure(ErrorKind::MalformedResponse, message)
}

/// [`parse_head`] with room for `headers.len()` headers: the parser's own error apart,
/// so that too many headers can be parsed again with more room.
fn parse_head_with<'a>(
    buf: &'a [u8],
    headers: &mut [httparse::Header<'a>],
) -> Result<Result<Option<Head>, RequestError>, httparse::Error> {
    let mut response = httparse::Response::new(headers);
    let len = match response.parse(buf)? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => return Ok(Ok(None)),
    };
    if len > HEAD_LIMIT {
        return Ok(Err(head_too_large()));
    }
    Ok(head_fields(&response, len))
}

/// What a parsed head says: status, framing, keep-alive.
fn head_fields(
    response: &httparse::Response<'_, '_>,
    len: usize,
) -> Result<Option<Head>, RequestError> {
    let status = response.code.unwrap_or(0);
    // HTTP/1.0 closes after each response unless it says otherwise.
    let mut keep_alive = response.version == Some(1);
    let mut chunked = false;
    let mut length: Option<u64> = None;
    for h in response.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("");
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = value.trim().parse::<u64>().map_err(|_| {
                failure(
                    ErrorKind::MalformedResponse,
                    format!("malformed response head: content-length {value:?}"),
                )
            })?;
            if length.is_some_and(|m| m != n) {
                return Err(failure(
                    ErrorKind::MalformedResponse,
                    "malformed response head: two different content-lengths",
                ));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',') {
                let token = token.trim();
                if token.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = if status == 204 || status == 304 || (100..200).contains(&status) {
        Framing::Done
    } else if chunked {
        // Chunked wins over a content-length (RFC 9112 6.3).
        Framing::Chunked(Chunk::Size)
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        keep_alive = false;
        Framing::Close
    };
    Ok(Some(Head {
        len,
        status,
        framing,
        keep_alive,
    }))
}

/// The session token a whole response head carries (`--session-token`).
fn head_token(
    head: &[u8],
    token: &llmsurge_proto::affinity::SessionToken,
) -> Option<llmsurge_proto::affinity::TokenSeen> {
    let mut headers = vec![httparse::EMPTY_HEADER; head.len() / MIN_HEADER_BYTES + 1];
    let mut response = httparse::Response::new(&mut headers);
    response.parse(head).ok()?;
    // The last one, as a browser keeps the last of two cookies of one name.
    response
        .headers
        .iter()
        .rev()
        // Bytes that are not UTF-8 become U+FFFD, which `read` refuses if it is the token.
        .find_map(|h| token.read(h.name, &String::from_utf8_lossy(h.value)))
}

/// A response whose head was read.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// What its head said of the session token (`--session-token`).
    pub token: Option<llmsurge_proto::affinity::TokenSeen>,
    /// The body, read piece by piece.
    pub body: Body,
}

/// A response body being read; its connection goes back to the pool once the body was
/// read to its end (and the server keeps the connection).
pub struct Body {
    pool: Pool,
    conn: Option<Link>,
    /// Bytes read and not handed out yet.
    buf: BytesMut,
    framing: Framing,
    keep_alive: bool,
    read_size: usize,
    /// When the bytes last read arrived.
    arrived: MonoNanos,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("framing", &self.framing)
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl Body {
    /// When the bytes of the last piece handed out arrived at this host (the kernel's
    /// receive stamp of the read that brought its last byte).
    pub fn arrived(&self) -> MonoNanos {
        self.arrived
    }

    /// The next piece of the body; `None` at its end. Errors are one-line messages (the
    /// connection reset or closed early, a malformed chunk).
    pub async fn next(&mut self) -> Option<Result<Bytes, String>> {
        loop {
            match self.framing {
                Framing::Done => {
                    self.finish();
                    return None;
                }
                Framing::Length(0) => self.framing = Framing::Done,
                Framing::Length(n) => {
                    if let Some(piece) = self.take(n) {
                        self.framing = Framing::Length(n - piece.len() as u64);
                        return Some(Ok(piece));
                    }
                    if let Err(e) = self.fill(true).await {
                        return Some(Err(format!("{e} ({n} bytes of the body missing)")));
                    }
                }
                Framing::Close => {
                    if let Some(piece) = self.take(u64::MAX) {
                        return Some(Ok(piece));
                    }
                    match self.fill(false).await {
                        Ok(true) => {}
                        Ok(false) => self.framing = Framing::Done,
                        Err(e) => return Some(Err(e)),
                    }
                }
                Framing::Chunked(Chunk::Data(n)) => {
                    if let Some(piece) = self.take(n) {
                        let left = n - piece.len() as u64;
                        self.framing = Framing::Chunked(if left == 0 {
                            Chunk::DataEnd
                        } else {
                            Chunk::Data(left)
                        });
                        return Some(Ok(piece));
                    }
                    if let Err(e) = self.fill(true).await {
                        return Some(Err(format!("{e} (in a chunk)")));
                    }
                }
                Framing::Chunked(state) => match self.chunk_framing(state) {
                    Err(e) => return Some(Err(e)),
                    Ok(true) => {}
                    Ok(false) => {
                        if let Err(e) = self.fill(true).await {
                            return Some(Err(format!("{e} (between chunks)")));
                        }
                    }
                },
            }
        }
    }

    /// Advances over a chunk-size line, a chunk's end or a trailer line in the buffer;
    /// `false` when more bytes are needed first.
    fn chunk_framing(&mut self, state: Chunk) -> Result<bool, String> {
        match state {
            Chunk::Size => match httparse::parse_chunk_size(&self.buf) {
                Ok(httparse::Status::Complete((used, size))) => {
                    self.buf.advance(used);
                    self.framing = Framing::Chunked(if size == 0 {
                        Chunk::Trailers
                    } else {
                        Chunk::Data(size)
                    });
                    Ok(true)
                }
                Ok(httparse::Status::Partial) if self.buf.len() > LINE_LIMIT => {
                    Err("malformed chunked body: chunk-size line too long".into())
                }
                Ok(httparse::Status::Partial) => Ok(false),
                Err(_) => Err("malformed chunked body: invalid chunk size".into()),
            },
            Chunk::DataEnd if self.buf.len() < 2 => Ok(false),
            Chunk::DataEnd => {
                if &self.buf[..2] != b"\r\n" {
                    return Err("malformed chunked body: no CRLF after a chunk".into());
                }
                self.buf.advance(2);
                self.framing = Framing::Chunked(Chunk::Size);
                Ok(true)
            }
            Chunk::Trailers => {
                if let Some(end) = memchr::memmem::find(&self.buf, b"\r\n") {
                    self.buf.advance(end + 2);
                    if end == 0 {
                        self.framing = Framing::Done;
                    }
                    Ok(true)
                } else if self.buf.len() > LINE_LIMIT {
                    Err("malformed chunked body: trailer line too long".into())
                } else {
                    Ok(false)
                }
            }
            // Chunk data is handed out by `next` itself.
            Chunk::Data(_) => Ok(true),
        }
    }

    /// Up to `max` buffered bytes as a piece, if any are buffered.
    fn take(&mut self, max: u64) -> Option<Bytes> {
        if self.buf.is_empty() {
            return None;
        }
        let n = usize::try_from(max)
            .unwrap_or(usize::MAX)
            .min(self.buf.len());
        let piece = self.buf.split_to(n).freeze();
        if self.buf.is_empty() {
            // The piece keeps the allocation alive until it is parsed; a stream waiting
            // for its next chunk holds none.
            self.buf = BytesMut::new();
        }
        Some(piece)
    }

    /// Reads more into the buffer. `Ok(false)` at EOF when `eof_is_error` is false.
    async fn fill(&mut self, eof_is_error: bool) -> Result<bool, String> {
        let Some(link) = &mut self.conn else {
            return Err("connection already closed".into());
        };
        let want = self.read_size.max(self.buf.len());
        let before = self.buf.capacity() - self.buf.len();
        match read_more(link, &mut self.buf, want).await {
            Ok((0, _)) => {
                self.keep_alive = false;
                self.conn = None;
                if eof_is_error {
                    Err("connection closed before the end of the response body".into())
                } else {
                    Ok(false)
                }
            }
            Ok((n, at)) => {
                self.arrived = at;
                // Reads that fill the room given grow it, for large bodies; short ones
                // bring it back, so a token stream keeps 1 KiB reads.
                let room = before.max(want);
                if n >= room {
                    self.read_size = (self.read_size * 2).min(READ_MAX);
                } else if n < self.read_size / 4 {
                    self.read_size = (self.read_size / 2).max(READ_MIN);
                }
                Ok(true)
            }
            Err(e) => {
                self.keep_alive = false;
                self.conn = None;
                Err(format!(
                    "connection failed in the middle of the response body: {e}"
                ))
            }
        }
    }

    /// At the body's end: the connection goes back to the pool if it may be reused.
    fn finish(&mut self) {
        if let Some(link) = self.conn.take()
            && self.keep_alive
            && self.buf.is_empty()
        {
            self.pool.put(link);
        }
    }

    /// Reads what is left of a body whose content is no longer needed (what follows
    /// `[DONE]`), so that its connection can be reused: at once when it is already
    /// here (as a rule: the final chunk comes with the last event), else in a task of its
    /// own, bounded, so the exchange ends now. Needs a tokio runtime.
    pub fn release(mut self) {
        let mut drained = 0;
        loop {
            match self.next().now_or_never() {
                Some(Some(Ok(piece))) => {
                    drained += piece.len();
                    if drained > DRAIN_BYTES {
                        return;
                    }
                }
                Some(None) | Some(Some(Err(_))) => return, // pooled by `finish`, or lost
                None => break,
            }
        }
        if self.conn.is_none() || !self.keep_alive {
            return;
        }
        tokio::spawn(async move {
            let _ = tokio::time::timeout(DRAIN_LIMIT, async {
                while let Some(Ok(piece)) = self.next().await {
                    drained += piece.len();
                    if drained > DRAIN_BYTES {
                        return;
                    }
                }
            })
            .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two cookies of one name in a response: the last is kept, as a browser keeps it
    /// (the first was, found by the break test); another cookie is no token.
    #[test]
    fn the_last_token_of_a_response_head_wins() {
        use llmsurge_proto::affinity::{SessionToken, TokenSeen};
        let set = |t: &str| Some(TokenSeen::Set(t.into()));
        let head = b"HTTP/1.1 200 OK\r\nset-cookie: other=x\r\nSet-Cookie: route=one; Path=/\r\nSet-Cookie: route=two\r\ncontent-length: 0\r\n\r\n";
        let cookie = SessionToken::Cookie("route".into());
        assert_eq!(head_token(head, &cookie), set("two"));
        let head = b"HTTP/1.1 200 OK\r\nx-tok: a\r\nx-tok: b\r\n\r\n";
        let header = SessionToken::Header("x-tok".into());
        assert_eq!(head_token(head, &header), set("b"));
        let none = b"HTTP/1.1 200 OK\r\nset-cookie: other=x\r\n\r\n";
        assert_eq!(head_token(none, &cookie), None);
        // Bytes that are not UTF-8 in the token's header: refused, never kept.
        let raw = b"HTTP/1.1 200 OK\r\nx-tok: a\xff\xfeb\r\n\r\n";
        assert_eq!(head_token(raw, &header), Some(TokenSeen::Refused));
    }

    #[test]
    fn heads_say_how_the_body_ends() {
        let head = |text: &str| parse_head(text.as_bytes()).expect("parses").expect("whole");
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello");
        assert_eq!(
            (h.status, h.framing, h.keep_alive),
            (200, Framing::Length(5), true)
        );
        assert_eq!(h.len, 38);
        let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n");
        assert_eq!(h.framing, Framing::Chunked(Chunk::Size));
        let h = head("HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 0\r\n\r\n");
        assert!(!h.keep_alive);
        let h = head("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let h = head("HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n");
        assert!(!h.keep_alive);
        let h = head("HTTP/1.1 204 No Content\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Done, true));
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-le")
                .expect("ok")
                .is_none()
        );
        let bad = parse_head(b"garbage garbage\r\n\r\n")
            .err()
            .expect("refused");
        assert_eq!(bad.kind, ErrorKind::MalformedResponse);
        let bad = parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n")
            .err()
            .expect("refused");
        assert_eq!(bad.kind, ErrorKind::MalformedResponse);
    }

    #[test]
    fn a_tls_alert_for_a_head_says_use_https() {
        // What rustls answers a plain request with: an alert record, TLS 1.2's version.
        let bad = parse_head(b"\x15\x03\x03\x00\x02\x02\x32")
            .err()
            .expect("refused");
        assert_eq!(bad.kind, ErrorKind::MalformedResponse);
        assert!(
            bad.message.contains("use an https:// URL"),
            "{}",
            bad.message
        );
        let bad = parse_head(b"garbage garbage\r\n\r\n")
            .err()
            .expect("refused");
        assert!(
            bad.message.starts_with("malformed response head"),
            "{}",
            bad.message
        );
    }
}
