//! The worker's own HTTP/1.1 client (plain `http://`): body framings, keep-alive reuse,
//! the one retry of a pooled connection the server closed, bodies larger than the socket
//! buffers (written in part by the pacer's non-blocking send), against the real mock and,
//! for faults the mock cannot produce, a raw server over loopback; and the pacer thread
//! sending requests itself in a real run.

use crate::scenario::Bench;
use crate::support::{mock, ok_report, wait_run};
use llmsurge::mock::MockConfig;
use llmsurge_proto::{BackendConfig, ErrorKind, RequestFormat};
use llmsurge_worker::backend::{Backend, Exchange};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// A stream of one content token, a finish and `[DONE]`.
const SSE: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

fn backend_config(base_url: &str, stream: bool) -> BackendConfig {
    BackendConfig {
        base_url: base_url.into(),
        request_format: RequestFormat::Chat,
        model: "m".into(),
        stream,
        api_key: None,
        headers: vec![],
        params: vec![],
        extra_body: serde_json::Map::new(),
        http2: false,
        http2_streams: 1,
        request_timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(5),
        tls: Default::default(),
        ttft_timeout: None,
        idle_timeout: None,
        ignore_eos: false,
        traceparent: false,
        min_tokens: false,
        session_header: None,
        tools: 0,
        request_id: None,
        affinity: Default::default(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// One request as the raw server read it.
#[derive(Debug)]
struct Seen {
    connection: usize,
    content_type: String,
    body: Vec<u8>,
}

/// What the raw server does with a request: the response bytes, or `None` to close the
/// connection without answering. Given the connection's index, the request's index on
/// it, and the request.
type Answer = dyn Fn(usize, usize, &Seen) -> Option<Vec<u8>> + Send + Sync;

/// A raw HTTP/1.1 server on loopback: a thread per connection, each answering requests
/// in turn as `answer` says, counting connections and keeping every request.
struct RawServer {
    url: String,
    accepted: Arc<AtomicUsize>,
    /// Connections the server closed after a response marked by [`with_test_close`].
    closed: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// The header that makes the raw server close the connection once the response is
/// written (a keep-alive timeout firing; the client ignores the header).
const TEST_CLOSE: &str = "x-test-close: 1\r\n";

fn with_test_close(response: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8(response).expect("text");
    text.replacen("\r\n", &format!("\r\n{TEST_CLOSE}"), 1)
        .into_bytes()
}

impl RawServer {
    fn start(
        answer: impl Fn(usize, usize, &Seen) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        Self::start_gated(answer, None)
    }

    /// As `start`; with a gate, each request's body is read only after a message on it.
    fn start_gated(
        answer: impl Fn(usize, usize, &Seen) -> Option<Vec<u8>> + Send + Sync + 'static,
        gate: Option<mpsc::Receiver<()>>,
    ) -> Self {
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gate = Mutex::new(gate);
        let (count, log, closes) = (accepted.clone(), seen.clone(), closed.clone());
        let url = crate::support::raw_server(move |stream, connection| {
            count.fetch_add(1, Ordering::SeqCst);
            if serve(stream, connection, &answer, &log, &gate) {
                closes.fetch_add(1, Ordering::SeqCst);
            }
        });
        Self {
            url,
            accepted,
            closed,
            seen,
        }
    }

    /// Waits until the server closed `n` connections after a marked response.
    fn wait_closed(&self, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while self.closed.load(Ordering::SeqCst) < n {
            assert!(
                std::time::Instant::now() < deadline,
                "the server never closed"
            );
            std::thread::yield_now();
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Serves one connection; `true` when it ended after a response marked to close.
fn serve(
    mut stream: TcpStream,
    connection: usize,
    answer: &Answer,
    log: &Mutex<Vec<Seen>>,
    gate: &Mutex<Option<mpsc::Receiver<()>>>,
) -> bool {
    let mut buf = Vec::new();
    for index in 0.. {
        // The head, parsed by httparse once whole.
        let (head_len, content_type, length) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = req.parse(&buf) {
                let value = |name: &str| {
                    req.headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .map(|h| String::from_utf8_lossy(h.value).to_string())
                        .unwrap_or_default()
                };
                let length = value("content-length").parse::<usize>().unwrap_or(0);
                break (n, value("content-type"), length);
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return false,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        buf.drain(..head_len);
        if let Some(gate) = gate.lock().expect("gate").as_ref() {
            let _ = gate.recv();
        }
        while buf.len() < length {
            let mut chunk = vec![0u8; 1 << 16];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return false,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let seen = Seen {
            connection,
            content_type,
            body: buf.drain(..length).collect(),
        };
        let response = answer(connection, index, &seen);
        log.lock().expect("log").push(seen);
        let Some(response) = response else {
            return false;
        };
        if stream.write_all(&response).is_err() {
            return false;
        }
        let text = String::from_utf8_lossy(&response).to_ascii_lowercase();
        if text.contains(TEST_CLOSE) {
            drop(stream);
            return true;
        }
        if text.contains("connection: close")
            || !text.contains("\r\ncontent-length:") && !text.contains("chunked")
        {
            return false; // close-delimited, or the server said it closes
        }
    }
    false
}

fn content_length(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Chunked, in chunks of 7 bytes (so chunks split events), with a chunk extension and a
/// trailer.
fn chunked(body: &str) -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for piece in body.as_bytes().chunks(7) {
        out.extend_from_slice(format!("{:x};ext=1\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\nx-trailer: yes\r\n\r\n");
    out
}

fn close_delimited(body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{body}").into_bytes()
}

fn send(backend: &Backend, rt: &tokio::runtime::Runtime) -> Exchange {
    let mut ex = Exchange::default();
    rt.block_on(backend.execute(bytes::Bytes::from_static(b"{}"), &mut ex));
    ex
}

fn assert_streamed_ok(ex: &Exchange, what: &str) {
    assert!(ex.error.is_none(), "{what}: {:?}", ex.error);
    assert_eq!((ex.streamed_tokens, ex.finished), (1, true), "{what}");
}

#[test]
fn http1_reads_content_length_chunked_and_close_delimited_bodies_and_reuses_connections() {
    let server = RawServer::start(|_, index, _| {
        Some(match index {
            0 => content_length(SSE),
            1 => chunked(SSE),
            _ => close_delimited(SSE),
        })
    });
    let backend = Backend::new(&backend_config(&server.url, true)).expect("backend");
    let rt = runtime();
    let h1 = backend
        .http1()
        .expect("plain http:// uses the worker's own client");
    for what in ["content-length", "chunked", "close-delimited"] {
        assert_streamed_ok(&send(&backend, &rt), what);
    }
    // The first two responses left the connection open: all three went on one.
    assert_eq!(server.accepted(), 1);
    // The close-delimited one ended it: the next request needs a new connection, which a
    // content-length response then leaves in the pool.
    assert_eq!(h1.idle(), 0);
    assert_streamed_ok(&send(&backend, &rt), "content-length on a new connection");
    assert_eq!(server.accepted(), 2);
    assert_eq!(h1.idle(), 1);
}

#[test]
fn http1_against_the_mock_streams_and_reads_whole_responses_on_one_kept_connection() {
    let config = MockConfig::instant();
    let model = config.primary_model().to_string();
    let server = mock(config);
    let rt = runtime();
    for stream in [true, false] {
        let mut cfg = backend_config(&server.base_url(), stream);
        cfg.model = model.clone();
        let backend = Backend::new(&cfg).expect("backend");
        let h1 = backend.http1().expect("own client");
        let body = backend.build_body(&llmsurge_worker::PreparedRequest {
            prompt: llmsurge_worker::Prompt::Text("hello there".into()),
            prompt_tokens: None,
            max_tokens: Some(8),
            model: None,
            user: None,
            session: None,
        });
        for i in 0..5 {
            let mut ex = Exchange::default();
            rt.block_on(backend.execute(body.clone(), &mut ex));
            assert!(ex.error.is_none(), "stream={stream} #{i}: {:?}", ex.error);
            assert!(ex.finished && ex.end.is_some(), "stream={stream} #{i}");
            // Back in the pool after every response: the next request reuses it.
            assert_eq!(h1.idle(), 1, "stream={stream} #{i}");
        }
    }
    assert_eq!(server.stats().completed, 10);
}

#[test]
fn a_pooled_connection_the_server_closed_while_idle_is_replaced_before_the_write() {
    // The first connection answers once, keep-alive by every header, and is then closed
    // by the server while idle (its keep-alive timeout); later connections answer.
    let server = RawServer::start(|connection, _, _| {
        let mut response = content_length(SSE);
        if connection == 0 {
            response = with_test_close(response);
        }
        Some(response)
    });
    let backend = Backend::new(&backend_config(&server.url, true)).expect("backend");
    let rt = runtime();
    assert_streamed_ok(&send(&backend, &rt), "first");
    assert_eq!(backend.http1().expect("own client").idle(), 1);
    server.wait_closed(1);
    assert_streamed_ok(&send(&backend, &rt), "second, on a fresh connection");
    assert_eq!(server.accepted(), 2);
    // The closed connection was noticed before anything was written on it: the server
    // saw the second request once, on the new connection.
    let seen = server.seen.lock().expect("log");
    let on: Vec<usize> = seen.iter().map(|s| s.connection).collect();
    assert_eq!(on, [0, 1]);
}

#[test]
fn a_request_read_whole_and_closed_unanswered_is_never_sent_again_even_on_a_reused_connection() {
    // Only the first request is ever answered; every later one is read whole and its
    // connection closed without a byte of response: the server may have run it, so it
    // is an errored request, never a resend (a generation is not idempotent).
    let answered = AtomicUsize::new(0);
    let server = RawServer::start(move |_, _, _| {
        (answered.fetch_add(1, Ordering::SeqCst) == 0).then(|| content_length(SSE))
    });
    let backend = Backend::new(&backend_config(&server.url, true)).expect("backend");
    let rt = runtime();
    let first = send(&backend, &rt);
    assert_streamed_ok(&first, "first");
    assert!(!first.retried);
    for (which, reused) in [("second", true), ("third", false)] {
        let r = send(&backend, &rt);
        let error = r.error.as_ref().expect("the server never answered");
        assert_eq!(
            error.kind,
            ErrorKind::ConnectionClosed,
            "{which}: {}",
            error.message
        );
        assert!(
            error.message.contains("before the response head")
                && error.message.contains("not resent"),
            "{which} (reused: {reused}): {}",
            error.message
        );
        assert!(!r.retried, "{which}");
    }
    let on: Vec<usize> = server
        .seen
        .lock()
        .expect("log")
        .iter()
        .map(|s| s.connection)
        .collect();
    assert_eq!(
        on,
        [0, 0, 1],
        "each request once: the second reused, the third fresh"
    );
}

#[test]
fn garbage_heads_and_cut_bodies_keep_their_error_kinds() {
    let server = RawServer::start(|connection, _, _| {
        Some(match connection {
            0 => b"NOT HTTP AT ALL\r\n\r\n".to_vec(),
            1 => b"HTTP/1.1 200 OK\r\ncontent-length: 500\r\nconnection: close\r\n\r\ndata: {".to_vec(),
            2 => b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 44\r\nconnection: close\r\n\r\n{\"error\":{\"message\":\"overloaded right now\"}}".to_vec(),
            _ => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec(),
        })
    });
    let backend = Backend::new(&backend_config(&server.url, true)).expect("backend");
    let rt = runtime();
    let kinds: Vec<(ErrorKind, String)> = (0..4)
        .map(|_| {
            let e = send(&backend, &rt).error.expect("fails");
            (e.kind, e.message)
        })
        .collect();
    assert_eq!(kinds[0].0, ErrorKind::MalformedResponse, "{}", kinds[0].1);
    assert_eq!(kinds[1].0, ErrorKind::StreamBroken, "{}", kinds[1].1);
    assert_eq!(
        kinds[2].0,
        ErrorKind::Http { status: 503 },
        "{}",
        kinds[2].1
    );
    assert_eq!(kinds[2].1, "overloaded right now");
    assert_eq!(kinds[3].0, ErrorKind::StreamBroken, "{}", kinds[3].1);
    assert!(kinds[3].1.contains("chunk"), "{}", kinds[3].1);
    // A failed exchange never goes back to the pool.
    assert_eq!(backend.http1().expect("own client").idle(), 0);
}

#[test]
fn a_refused_connection_is_a_connect_error() {
    // A port that was just free: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let backend =
        Backend::new(&backend_config(&format!("http://127.0.0.1:{port}"), true)).expect("backend");
    let error = send(&backend, &runtime()).error.expect("refused");
    assert_eq!(error.kind, ErrorKind::Connect, "{}", error.message);
}

#[test]
fn a_body_larger_than_the_socket_buffers_goes_out_whole_also_when_the_pacer_began_it() {
    const LARGE: usize = 32 << 20; // far beyond loopback's socket buffers
    let (open_gate, gate) = mpsc::channel();
    let server = RawServer::start_gated(|_, _, _| Some(content_length(SSE)), Some(gate));
    let backend = Backend::new(&backend_config(&server.url, true)).expect("backend");
    let rt = runtime();
    let body = bytes::Bytes::from((0..LARGE).map(|i| (i % 251) as u8).collect::<Vec<u8>>());

    // The runtime path, with a per-request content type.
    let mut ex = Exchange::default();
    let writer = std::thread::spawn({
        let body = body.clone();
        move || {
            rt.block_on(backend.execute_as(body, "multipart/form-data; boundary=x", &mut ex));
            (backend, rt, ex)
        }
    });
    open_gate.send(()).expect("gate");
    let (backend, rt, ex) = writer.join().expect("writer");
    assert_streamed_ok(&ex, "large body, runtime path");

    // The pacer's path: a non-blocking write of at most what it writes real-time (and
    // what the socket takes), the rest by the runtime at normal priority.
    let h1 = backend.http1().expect("own client");
    let conn = h1
        .take_idle()
        .expect("the connection went back to the pool");
    let max = llmsurge_worker::pacer::PACER_WRITE_MAX;
    let presend = h1.try_send(conn, h1.outgoing("application/json", body.clone()), max);
    assert!(presend.sent() > 0, "the head and part of the body went out");
    assert!(
        presend.sent() <= max,
        "{} bytes written real-time",
        presend.sent()
    );
    // The server reads no body byte until the gate opens: the socket took only part.
    assert!(presend.sent() < presend.total(), "a partial write");
    open_gate.send(()).expect("gate");
    let mut ex = Exchange::default();
    rt.block_on(backend.execute_presend(presend, &mut ex));
    assert_streamed_ok(&ex, "large body begun by a non-blocking write");

    let seen = server.seen.lock().expect("log");
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].content_type, "multipart/form-data; boundary=x");
    assert_eq!(seen[1].content_type, "application/json");
    for s in seen.iter() {
        assert!(s.body == body, "the body arrived whole and in order");
    }
    assert_eq!(server.accepted(), 1, "both on one kept connection");
}

#[test]
fn the_pacer_thread_sends_on_idle_connections_and_their_dispatch_lag_is_recorded() {
    let server = mock(MockConfig::instant());
    let (child, dir) = Bench::on(&server)
        .constant(20)
        .max_requests(20)
        .workers(1)
        .data("prompt_tokens=16,output_tokens=4")
        .start(|cmd| {
            cmd.env("LLMSURGE_LOG", "llmsurge_worker=debug");
        });
    let run = wait_run(child, dir);
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 20);
    assert_eq!(b.metrics["dispatch_lag"].successful.count, 20);
    // Each request reached the server once, whoever sent it.
    assert_eq!(server.stats().completed, 20);
    // The log's field names may be styled (ANSI escapes): read it without them.
    let mut plain = String::new();
    let mut in_escape = false;
    for c in run.stderr.chars() {
        match (in_escape, c) {
            (false, '\u{1b}') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, c) => plain.push(c),
        }
    }
    let line = plain
        .lines()
        .find(|l| l.contains("requests sent by the pacer thread"))
        .unwrap_or_else(|| panic!("no pacer line in:\n{}", run.stderr));
    let field = |name: &str| -> u64 {
        line.split(&format!("{name}="))
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    assert_eq!(field("from_pacer") + field("handed_over"), 20, "{line}");
    // Requests 50 ms apart against an instant server: the connection is idle again long
    // before the next slot, so the pacer sends (the first one needs a connect).
    assert!(field("from_pacer") >= 1, "{line}");
}
