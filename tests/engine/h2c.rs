//! The worker's own HTTP/2 client (`--http2` on plain `http://`, h2c with prior
//! knowledge): connections kept and reused as the mock saw them, a body far beyond the
//! protocol's initial flow-control windows, and a raw server that breaks the protocol
//! (an HTTP/1.1 answer, a broken header block, RST_STREAM before and after the head,
//! GOAWAY, a close mid-stream, a frame on a stream never opened): errored requests with
//! the reason, never a hang; and a server that speaks only h2c, which the coordinator's
//! own requests (target check, `/metrics`, `/tokenize`) reach over h2c too.

use crate::scenario::Bench;
use crate::support::{ok_report, recording};
use llmsurge::exit_codes;
use llmsurge::mock::MockConfig;
use llmsurge_coordinator::BenchmarkResult;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[test]
fn h2c_connections_are_kept_and_reused_as_the_mock_saw_them() {
    const REQUESTS: u64 = 24;
    let server = crate::support::mock(MockConfig::instant());
    let before = server.stats().connections.accepted;
    let run = Bench::on(&server)
        .flag("--http2")
        .concurrent(2)
        .max_requests(REQUESTS)
        .data("prompt_tokens=16,output_tokens=4")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, REQUESTS, "{:?}", b.errors);
    assert_eq!(server.stats().requests.chat_completions, REQUESTS);
    // Every connection the workers opened was one the mock accepted (the coordinator's
    // target check and probe opened the others), and most requests went on one kept.
    let accepted = server.stats().connections.accepted - before;
    let c = b
        .client
        .connections
        .clone()
        .unwrap_or_else(|| panic!("no connections in {}", run.stderr));
    assert!(c.opened >= 1 && c.opened <= accepted, "{c:?} vs {accepted}");
    assert_eq!(c.opened + c.reused, REQUESTS, "{c:?}");
    // Had each request opened its own, the mock would have accepted more connections
    // than requests, before the coordinator's own.
    assert!(
        accepted < REQUESTS,
        "the mock accepted {accepted} connections for {REQUESTS} requests: not reused ({c:?})"
    );
    assert_eq!(c.connect.count, c.opened);
    assert_eq!(b.requests.resent, 0);
}

#[test]
fn an_image_body_of_megabytes_goes_through_the_flow_control_windows() {
    // Two images of 1024×1024 pixels as PNG: megabytes a request, far over the 64 KiB
    // a stream may send before the server's WINDOW_UPDATE.
    // On a connection a request, and two requests sharing one (`--http2-streams`:
    // their bodies interleaved as the windows open).
    for streams in ["1", "2"] {
        let (server, _dir, record) = recording(MockConfig::instant());
        let run = Bench::on(&server)
            .flag("--http2")
            .arg("--http2-streams", streams)
            .concurrent(2)
            .max_requests(4)
            .request_timeout("60s")
            .data("prompt_tokens=8,output_tokens=4,images=2,image_size=1024x1024,image_format=png")
            .run();
        let report = ok_report(&run);
        let b = &report.benchmarks[0];
        assert_eq!(b.requests.completed, 4, "{streams}: {:?}", b.errors);
        assert_eq!(server.stats().images, 4 * 2, "{streams}");
        check_images(&record);
    }
}

/// Every image's data URL the mock read, whole: megabytes long.
fn check_images(record: &std::path::Path) {
    let urls: Vec<usize> = crate::support::recorded(record)
        .iter()
        .flat_map(|l| {
            l["body"]["messages"][0]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|p| p["image_url"]["url"].as_str().map(str::len))
        .collect();
    assert!(urls.len() >= 8, "{urls:?}");
    assert!(urls.iter().all(|&n| n > 1 << 20), "{urls:?}");
}

/// What the raw server does with a POST that is not the probe.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// A whole streamed 200.
    Answer,
    /// An HTTP/1.1 response: a server that does not speak h2c.
    Http1,
    /// A response head whose header block does not decode (HPACK index 0).
    BadBlock,
    /// RST_STREAM (INTERNAL_ERROR) before any head.
    ResetBeforeHead,
    /// A head, one event, RST_STREAM (CANCEL).
    ResetMidStream,
    /// GOAWAY whose last stream is the one before, then a close: not processed.
    GoAway,
    /// A head, part of an event, then a close.
    CloseMidStream,
    /// DATA on the stream after the request's, which the client never opened, then
    /// the whole answer.
    DataOnIdleStream,
    /// The same with a HEADERS frame on an even stream (only a push could open one).
    HeadersOnIdleStream,
}

/// A stream of one content token, a finish and `[DONE]`.
const SSE: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A 200 head (:status 200 from the static table) on `stream`.
fn head(stream: u32) -> Vec<u8> {
    frame(0x1, 0x4, stream, &[0x88])
}

/// A raw server that speaks only h2c, as a server that knows no HTTP/1.1 does: a
/// connection that opens with anything but the HTTP/2 preface gets SETTINGS and a GOAWAY
/// (PROTOCOL_ERROR), and is counted in `http1`. Every request whose head carries the
/// probe's marker (in the bytes: sent as a literal, not Huffman-coded) is answered in
/// full (`/tokenize` too: it carries the marker); the coordinator's GETs (the target
/// check, `/metrics`) are answered 404 and counted in `side`; and every other as `act`
/// says, given its index among them and its index on its connection.
struct Raw {
    url: String,
    posts: Arc<AtomicUsize>,
    http1: Arc<AtomicUsize>,
    side: Arc<AtomicUsize>,
}

/// What [`serve`] counts, and how it starts a connection.
#[derive(Clone, Default)]
struct Counts {
    posts: Arc<AtomicUsize>,
    http1: Arc<AtomicUsize>,
    side: Arc<AtomicUsize>,
    /// A connection whose client sends no request before the server's SETTINGS (as
    /// `--http2-streams` waits for them) never gets them: the server is silent on it.
    withhold_settings: bool,
}

impl Raw {
    fn start(act: impl Fn(usize, usize) -> Act + Send + Sync + 'static) -> Self {
        Self::start_with(Counts::default(), act)
    }

    fn start_with(
        counts: Counts,
        act: impl Fn(usize, usize) -> Act + Send + Sync + 'static,
    ) -> Self {
        let shared = counts.clone();
        let url = crate::support::raw_server(move |stream, _| serve(stream, &act, &shared));
        Self {
            url,
            posts: counts.posts,
            http1: counts.http1,
            side: counts.side,
        }
    }
}

/// Reads one frame: (type, flags, stream, payload); `None` at EOF.
fn read_frame(s: &mut TcpStream) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut h = [0u8; 9];
    s.read_exact(&mut h).ok()?;
    let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).ok()?;
    let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
    Some((h[3], h[4], id, payload))
}

/// Whether a HEADERS frame comes within 500 ms after the preface (hyper's client, the
/// coordinator's, sends its request at once), seen without taking the bytes.
fn headers_come(s: &TcpStream) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(500);
    let mut buf = [0u8; 4096];
    while std::time::Instant::now() < until {
        let _ = s.set_read_timeout(Some(std::time::Duration::from_millis(20)));
        let n = s.peek(&mut buf).unwrap_or(0);
        let mut at = 0;
        while at + 9 <= n {
            if buf[at + 3] == 0x1 {
                let _ = s.set_read_timeout(None);
                return true;
            }
            at += 9
                + ((usize::from(buf[at]) << 16)
                    | (usize::from(buf[at + 1]) << 8)
                    | usize::from(buf[at + 2]));
        }
    }
    let _ = s.set_read_timeout(None);
    false
}

fn serve(mut s: TcpStream, act: &(dyn Fn(usize, usize) -> Act + Send + Sync), counts: &Counts) {
    let mut preface = [0u8; 24];
    if s.read_exact(&mut preface).is_err() {
        return;
    }
    if counts.withhold_settings && !headers_come(&s) {
        while read_frame(&mut s).is_some() {}
        return;
    }
    if s.write_all(&frame(0x4, 0, 0, &[])).is_err() {
        return;
    }
    if &preface[..] != b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" {
        counts.http1.fetch_add(1, Ordering::SeqCst);
        let mut p = 0u32.to_be_bytes().to_vec();
        p.extend_from_slice(&1u32.to_be_bytes());
        let _ = s.write_all(&frame(0x7, 0, 0, &p));
        return;
    }
    let mut probes = std::collections::HashSet::new();
    let mut side = std::collections::HashSet::new();
    let mut on_connection = 0;
    while let Some((kind, flags, id, payload)) = read_frame(&mut s) {
        if kind == 0x1 && memchr::memmem::find(&payload, b"x-llmsurge-probe").is_some() {
            probes.insert(id);
        }
        // `:method: GET` from the static table (HPACK index 2): no benchmark request.
        if kind == 0x1 && payload.first() == Some(&0x82) {
            side.insert(id);
        }
        // A request is whole at END_STREAM, on its HEADERS or its last DATA.
        if !(kind == 0x0 || kind == 0x1) || flags & 0x1 == 0 {
            continue;
        }
        let probe = probes.contains(&id);
        if side.contains(&id) && !probe {
            counts.side.fetch_add(1, Ordering::SeqCst);
            // :status 404 (static index 13), END_STREAM | END_HEADERS.
            if s.write_all(&frame(0x1, 0x5, id, &[0x8d])).is_err() {
                return;
            }
            continue;
        }
        let what = if probe {
            Act::Answer
        } else {
            let n = counts.posts.fetch_add(1, Ordering::SeqCst);
            on_connection += 1;
            act(n, on_connection - 1)
        };
        let mut out = Vec::new();
        match what {
            Act::Answer => {
                out.extend(head(id));
                out.extend(frame(0x0, 0x1, id, SSE.as_bytes()));
            }
            Act::Http1 => {
                out.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
            }
            Act::BadBlock => out.extend(frame(0x1, 0x5, id, &[0x80])),
            Act::ResetBeforeHead => out.extend(frame(0x3, 0, id, &2u32.to_be_bytes())),
            Act::ResetMidStream => {
                out.extend(head(id));
                let first = SSE.split_inclusive("\n\n").next().expect("an event");
                out.extend(frame(0x0, 0, id, first.as_bytes()));
                out.extend(frame(0x3, 0, id, &8u32.to_be_bytes()));
            }
            Act::GoAway => {
                let mut p = id.saturating_sub(2).to_be_bytes().to_vec();
                p.extend_from_slice(&0u32.to_be_bytes());
                out.extend(frame(0x7, 0, 0, &p));
            }
            Act::CloseMidStream => {
                out.extend(head(id));
                out.extend(frame(0x0, 0, id, &SSE.as_bytes()[..30]));
            }
            Act::DataOnIdleStream | Act::HeadersOnIdleStream => {
                out.extend(match what {
                    Act::DataOnIdleStream => frame(0x0, 0, id + 2, b"stray"),
                    _ => head(id + 1),
                });
                out.extend(head(id));
                out.extend(frame(0x0, 0x1, id, SSE.as_bytes()));
            }
        }
        if s.write_all(&out).is_err() {
            return;
        }
        if matches!(what, Act::GoAway | Act::CloseMidStream | Act::Http1) {
            // Closed once the client has what was written (a close with unread bytes
            // would be a reset instead).
            let _ = s.shutdown(std::net::Shutdown::Write);
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            while read_frame(&mut s).is_some() {}
            return;
        }
    }
}

/// Two streamed requests one at a time against `url` over h2c, `streams` at most on a
/// connection (`--http2-streams`); the run's one benchmark.
fn run_two(url: &str, streams: u32) -> (crate::support::Finished, BenchmarkResult) {
    let run = Bench::target(url)
        .model("m")
        .flag("--http2")
        .arg("--http2-streams", streams)
        .synchronous()
        .max_requests(2)
        .request_timeout("30s")
        .data("prompt_tokens=16,output_tokens=4")
        .run();
    let report = run.report();
    let b = report
        .benchmarks
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("one benchmark; stderr:\n{}", run.stderr));
    (run, b)
}

fn errors(b: &BenchmarkResult) -> Vec<(String, u64, String)> {
    b.errors
        .iter()
        .map(|e| {
            let sample = e.samples.first().cloned().unwrap_or_default();
            (e.kind.clone(), e.count, sample)
        })
        .collect()
}

#[test]
fn a_server_that_breaks_http2_fails_each_request_with_the_reason() {
    let cases = [
        (
            Act::Http1,
            "malformed_response",
            "malformed HTTP/2 response: the server answered in HTTP/1.1 (it does not speak h2c with prior knowledge: drop --http2)",
        ),
        (
            Act::BadBlock,
            "malformed_response",
            "malformed HTTP/2 response: header block: index 0 (COMPRESSION_ERROR)",
        ),
        (
            Act::ResetBeforeHead,
            "connection_closed",
            "stream reset by the server before the response head: INTERNAL_ERROR (0x2)",
        ),
        (
            Act::ResetMidStream,
            "stream_broken",
            "stream reset by the server: CANCEL (0x8)",
        ),
        (
            Act::GoAway,
            "connection_closed",
            "the server is closing the connection (GOAWAY, NO_ERROR (0x0), last stream 0): request on stream 1 not processed",
        ),
        (
            Act::CloseMidStream,
            "stream_broken",
            "connection closed before the end of the response body",
        ),
        // Break test: a frame on a stream never opened was dropped and the request
        // completed; RFC 9113 §5.1 makes it a connection error.
        (
            Act::DataOnIdleStream,
            "malformed_response",
            "malformed HTTP/2 response: DATA on stream 3, which was never opened (PROTOCOL_ERROR)",
        ),
        (
            Act::HeadersOnIdleStream,
            "malformed_response",
            "malformed HTTP/2 response: HEADERS on stream 2, which was never opened (PROTOCOL_ERROR)",
        ),
    ];
    // One request at a time per connection, and connections shared (`--http2-streams`,
    // whose driver reads for every stream): the same error, each request its own.
    for streams in [1, 4] {
        for (act, kind, message) in cases {
            let server = Raw::start(move |_, _| act);
            let (run, b) = run_two(&server.url, streams);
            assert_eq!(
                run.code(),
                exit_codes::INVALID_RUN,
                "{act:?}, {streams} streams: {}",
                run.stderr
            );
            assert_eq!(
                errors(&b),
                [(kind.to_string(), 2, message.to_string())],
                "{act:?}, {streams} streams"
            );
            assert_eq!(
                server.posts.load(Ordering::SeqCst),
                2,
                "{act:?}, {streams} streams: each sent once"
            );
        }
    }
}

/// Break test: with `--http2` on `http://` the target check, `/metrics` and `/tokenize`
/// went out in HTTP/1.1, and a server that speaks only h2c refused the run with "use
/// an https:// URL for this port". They speak h2c too now.
#[test]
fn a_server_that_speaks_only_h2c_is_checked_and_run_over_h2c() {
    let server = Raw::start(|_, _| Act::Answer);
    let (run, b) = run_two(&server.url, 1);
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert_eq!(b.requests.completed, 2, "{:?}", b.errors);
    assert_eq!(server.posts.load(Ordering::SeqCst), 2);
    assert_eq!(
        server.http1.load(Ordering::SeqCst),
        0,
        "an HTTP/1.1 connection: {}",
        run.stderr
    );
    // The target check's GET /v1/models at least, over h2c.
    assert!(server.side.load(Ordering::SeqCst) >= 1, "{}", run.stderr);
    assert!(!run.stderr.contains("https://"), "{}", run.stderr);
}

#[test]
fn a_goaway_on_a_reused_connection_sends_the_request_once_more_on_a_fresh_one() {
    // Each connection answers its first request and refuses the next with a GOAWAY:
    // every request but the first is refused once on its reused connection, then
    // completes on a fresh one.
    // The same on connections shared by streams (`--http2-streams`): the resend goes
    // to another connection.
    for streams in ["1", "4"] {
        let server = Raw::start(|_, on_connection| {
            if on_connection == 0 {
                Act::Answer
            } else {
                Act::GoAway
            }
        });
        let run = Bench::target(&server.url)
            .model("m")
            .flag("--http2")
            .arg("--http2-streams", streams)
            .synchronous()
            .max_requests(3)
            .request_timeout("30s")
            .data("prompt_tokens=16,output_tokens=4")
            .run();
        let report = ok_report(&run);
        let b = &report.benchmarks[0];
        assert_eq!(b.requests.completed, 3, "{streams}: {:?}", b.errors);
        let posts = server.posts.load(Ordering::SeqCst) as u64;
        assert_eq!(
            b.requests.resent,
            posts - 3,
            "{streams}: {posts} requests reached the server"
        );
        assert_eq!(b.requests.resent, 2, "{streams}");
    }
}

/// Servers that do not speak h2c stop the run at the target check with one line that
/// says what to do (exit 2): one that speaks only HTTP/1.1 (as uvicorn) answers the
/// preface with a 400, which is named, not the h2 crate's "frame with invalid size"; one
/// that closes the connection on the preface, or answers bytes that are no protocol,
/// hyper names vaguely ("connection closed", "unspecific protocol error").
#[test]
fn a_server_that_does_not_speak_h2c_stops_the_run_saying_drop_http2() {
    let answers: [(&'static [u8], Option<&str>); 3] = [
        (
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            Some("with what is not HTTP/2"),
        ),
        (b"", None),
        (b"\x00\x01garbage that is no protocol\r\n\r\n", None),
    ];
    for (answer, named) in answers {
        let url = crate::support::raw_server(move |mut s, _| {
            let mut buf = [0u8; 4096];
            if s.read(&mut buf).is_err() {
                return;
            }
            let _ = s.write_all(answer);
            // Closed once the client has read it (unread bytes would reset it).
            let _ = s.shutdown(std::net::Shutdown::Write);
            while s.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        let run = Bench::target(&url)
            .model("m")
            .flag("--http2")
            .max_requests(2)
            .data("prompt_tokens=16,output_tokens=4")
            .run();
        let error = crate::support::usage_error(&run);
        for said in ["drop --http2"].into_iter().chain(named) {
            assert!(error.contains(said), "{said:?} not in {error}");
        }
    }
}

/// `--http2-streams` above the server's SETTINGS_MAX_CONCURRENT_STREAMS: the server's
/// bound holds ([`bounded_server`] of 1). Four requests at once, eight streams allowed by
/// the flag: none over the server's bound, all answered.
#[test]
fn the_servers_bound_on_concurrent_streams_holds_over_http2_streams() {
    let (url, over, answered, _) = bounded_server(1);
    let run = Bench::target(&url)
        .model("m")
        .flag("--http2")
        .arg("--http2-streams", "8")
        .concurrent(4)
        .max_requests(8)
        .request_timeout("30s")
        .data("prompt_tokens=16,output_tokens=4")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 8, "{:?}", b.errors);
    assert_eq!(
        over.load(Ordering::SeqCst),
        0,
        "streams over the server's bound"
    );
    assert!(answered.load(Ordering::SeqCst) >= 8);
    assert_eq!(b.requests.resent, 0);
}

/// Break test: a server that allows no stream (SETTINGS_MAX_CONCURRENT_STREAMS 0) made
/// each request open connection after connection (442 in 0.3 s for 56 requests). While
/// its connection says 0, requests fail at once, saying so.
#[test]
fn a_server_that_allows_no_stream_fails_requests_without_a_connection_storm() {
    let (url, _, answered, connections) = bounded_server(0);
    let run = Bench::target(&url)
        .model("m")
        .flag("--http2")
        .arg("--http2-streams", "8")
        .workers(1)
        .concurrent(4)
        .max_requests(40)
        .request_timeout("30s")
        .data("prompt_tokens=16,output_tokens=4")
        .run();
    assert_eq!(run.code(), exit_codes::INVALID_RUN, "{}", run.stderr);
    let b = run
        .report()
        .benchmarks
        .into_iter()
        .next()
        .expect("a benchmark");
    let errors = errors(&b);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "connect");
    assert!(
        errors[0].2.contains(
            "the server takes no stream now (its last SETTINGS_MAX_CONCURRENT_STREAMS was 0"
        ),
        "{errors:?}"
    );
    assert_eq!(answered.load(Ordering::SeqCst), 0);
    // The coordinator's own (the check, the probe, scrapes) and a few of the worker's.
    let opened = connections.load(Ordering::SeqCst);
    assert!(opened <= 12, "{opened} connections for 40 requests");
}

/// A raw h2c server whose SETTINGS_MAX_CONCURRENT_STREAMS is `max`: each answer held
/// until it has waited 200 ms for another request's HEADERS; one that comes meanwhile
/// (a stream over its bound) is refused (REFUSED_STREAM) and counted; with 0, a client
/// that sends a request at once (the coordinator's) is allowed 100. Its URL, the
/// streams over the bound, the requests answered and the connections accepted.
fn bounded_server(max: u32) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let over = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let connections = Arc::new(AtomicUsize::new(0));
    let (o, a, c) = (over.clone(), answered.clone(), connections.clone());
    let url = crate::support::raw_server(move |mut s, _| {
        c.fetch_add(1, Ordering::SeqCst);
        let mut preface = [0u8; 24];
        if s.read_exact(&mut preface).is_err() {
            return;
        }
        // The coordinator's own requests (hyper's, sent at once) are let through: its
        // target check would not start the run.
        let max = if max == 0 && headers_come(&s) {
            100
        } else {
            max
        };
        // SETTINGS_MAX_CONCURRENT_STREAMS (0x3).
        let mut settings = 3u16.to_be_bytes().to_vec();
        settings.extend_from_slice(&max.to_be_bytes());
        if s.write_all(&frame(0x4, 0, 0, &settings)).is_err() {
            return;
        }
        let mut open: Option<u32> = None;
        loop {
            // While a stream waits for its answer, 200 ms for a frame; then the answer.
            let wait = open.map(|_| std::time::Duration::from_millis(200));
            let _ = s.set_read_timeout(wait);
            let next = read_frame(&mut s);
            if next.is_none()
                && let Some(id) = open.take()
            {
                let mut out = head(id);
                out.extend(frame(0x0, 0x1, id, SSE.as_bytes()));
                if s.write_all(&out).is_err() {
                    return;
                }
                a.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            let Some((kind, flags, id, payload)) = next else {
                return;
            };
            if kind == 0x1 && open.is_some_and(|o| o != id) {
                o.fetch_add(1, Ordering::SeqCst);
                if s.write_all(&frame(0x3, 0, id, &7u32.to_be_bytes()))
                    .is_err()
                {
                    return;
                }
                continue;
            }
            // The coordinator's GETs (`:method: GET`, static index 2): 404 at once.
            if kind == 0x1 && payload.first() == Some(&0x82) {
                if s.write_all(&frame(0x1, 0x5, id, &[0x8d])).is_err() {
                    return;
                }
                continue;
            }
            if (kind == 0x0 || kind == 0x1) && flags & 0x1 != 0 {
                open = Some(id);
            }
        }
    });
    (url, over, answered, connections)
}

/// Break test: a server that answers the connection and never sends its SETTINGS held
/// requests on shared connections until the request timeout, which then called them
/// `timeout` though the server never had them. They fail within `--connect-timeout`, as
/// connects that did not happen.
#[test]
fn a_server_that_never_sends_its_settings_fails_shared_streams_as_connects() {
    let server = Raw::start_with(
        Counts {
            withhold_settings: true,
            ..Counts::default()
        },
        |_, _| Act::Answer,
    );
    let run = Bench::target(&server.url)
        .model("m")
        .flag("--http2")
        .arg("--http2-streams", 4)
        .arg("--connect-timeout", "1s")
        .concurrent(2)
        .max_requests(4)
        .request_timeout("60s")
        .data("prompt_tokens=16,output_tokens=4")
        .run();
    assert_eq!(run.code(), exit_codes::INVALID_RUN, "{}", run.stderr);
    let report = run.report();
    let b = &report.benchmarks[0];
    let errors = errors(b);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let (kind, count, sample) = &errors[0];
    assert_eq!(kind, "connect", "{errors:?}");
    assert!(*count >= 2, "{errors:?}");
    assert!(
        sample.contains("the server sent no HTTP/2 SETTINGS within 1.000s"),
        "{sample}"
    );
    assert_eq!(
        server.posts.load(Ordering::SeqCst),
        0,
        "no request was sent"
    );
}
