//! Servers and proxies that misbehave as real ones do, each a purpose-built server on
//! loopback, against the real binary: a response head that comes late (bounded by
//! `--ttft-timeout`), a 413 answered before a large body was read, a kept-alive connection
//! closed as the next request arrives, more headers than 64, a head over 64 KiB in one
//! write. The plain-HTTP/1.1 client (plain `http://`) meets raw sockets; the reqwest
//! client (`--http2`) meets a hyper server where the fault applies to it too. Each test
//! holds the run to what the server saw.

use crate::scenario::Bench;
use crate::support::Finished;
use llmsurge::exit_codes;
use llmsurge::report::RequestEntry;
use llmsurge_coordinator::BenchmarkResult;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A stream of one content token, a finish and `[DONE]`.
const SSE: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

/// How long a server holds back what it holds back: far beyond every bound under test.
const HOLD: Duration = Duration::from_secs(30);

/// The probe's marker header (the coordinator's probe before the run).
const PROBE: &str = "x-llmsurge-probe";

/// A streamed 200 with `extra` header lines (each ending in CRLF).
fn ok_with(extra: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{extra}content-length: {}\r\n\r\n{SSE}",
        SSE.len()
    )
    .into_bytes()
}

fn ok() -> Vec<u8> {
    ok_with("")
}

/// One POST the server read the head of (the probe's left out).
#[derive(Clone, Debug, PartialEq)]
struct Post {
    /// The connection, counted from 0 in the order accepted.
    connection: usize,
    /// The request's index on its connection.
    index: usize,
    /// Its `cookie` header, if any.
    cookie: Option<String>,
}

/// What the server does with a POST.
enum Act {
    /// Reads the body, then writes the bytes; the connection stays open.
    Answer(Vec<u8>),
    /// Writes the bytes before reading any of the body, then closes (the unread body
    /// makes the close a reset).
    EarlyThenClose(Vec<u8>),
    /// Writes the bytes before reading any of the body, then reads nothing more.
    EarlyThenWait(Vec<u8>),
    /// Writes `100 Continue` before reading any of the body, then reads it and answers.
    ContinueThenAnswer,
    /// Reads the body and closes without a byte of response.
    Drop,
    /// Reads the body and writes nothing until the client goes (or [`HOLD`] passed).
    Late,
}

/// What a server does with each POST, given the POST and how many came before it.
type Acts = dyn Fn(&Post, usize) -> Act + Send + Sync;

/// A raw HTTP/1.1 server: GETs (`/health`, `/v1/models`) are answered 404, the probe
/// 200, and every other POST as `act` says, given the POST and how many came before it.
struct Server {
    url: String,
    posts: Arc<Mutex<Vec<Post>>>,
}

impl Server {
    fn start(act: impl Fn(&Post, usize) -> Act + Send + Sync + 'static) -> Self {
        let posts = Arc::new(Mutex::new(Vec::new()));
        let log = posts.clone();
        let url = crate::support::raw_server(move |stream, connection| {
            serve(stream, connection, &act, &log)
        });
        Self { url, posts }
    }

    fn posts(&self) -> Vec<Post> {
        self.posts.lock().expect("log").clone()
    }
}

fn serve(mut stream: TcpStream, connection: usize, act: &Acts, log: &Mutex<Vec<Post>>) {
    let mut buf = Vec::new();
    for index in 0.. {
        let (head_len, post, probe, length, cookie) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = req.parse(&buf) {
                let has = |name: &str| {
                    req.headers
                        .iter()
                        .any(|h| h.name.eq_ignore_ascii_case(name))
                };
                let length = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                    .unwrap_or(0usize);
                let cookie = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("cookie"))
                    .map(|h| String::from_utf8_lossy(h.value).into_owned());
                break (n, req.method == Some("POST"), has(PROBE), length, cookie);
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        buf.drain(..head_len);
        let act = if !post {
            Act::Answer(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_vec())
        } else if probe {
            Act::Answer(ok())
        } else {
            let post = Post {
                connection,
                index,
                cookie: cookie.clone(),
            };
            let mut log = log.lock().expect("log");
            let before = log.len();
            log.push(post.clone());
            drop(log);
            act(&post, before)
        };
        let mut read_body = |stream: &mut TcpStream| {
            while buf.len() < length {
                let mut chunk = vec![0u8; 1 << 16];
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            buf.drain(..length);
            true
        };
        match act {
            Act::Answer(bytes) => {
                if !read_body(&mut stream) || stream.write_all(&bytes).is_err() {
                    return;
                }
            }
            Act::EarlyThenClose(bytes) => {
                let _ = stream.write_all(&bytes);
                return;
            }
            Act::EarlyThenWait(bytes) => {
                let _ = stream.write_all(&bytes);
                std::thread::sleep(HOLD);
                return;
            }
            Act::ContinueThenAnswer => {
                let ok = stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").is_ok()
                    && read_body(&mut stream)
                    && stream.write_all(&ok()).is_ok();
                if !ok {
                    return;
                }
            }
            Act::Drop => {
                read_body(&mut stream);
                return;
            }
            Act::Late => {
                if read_body(&mut stream) {
                    // Returns when the client closes the connection (or after HOLD).
                    let _ = stream.set_read_timeout(Some(HOLD));
                    let _ = stream.read(&mut [0u8; 1]);
                    let _ = stream.write_all(&ok());
                }
                return;
            }
        }
    }
}

/// An HTTP/1.1 and HTTP/2 (prior knowledge) server of hyper's: GETs are answered 404,
/// POSTs 200 with `headers` extra headers of about 100 bytes each (the target check's
/// GETs none: its client keeps hyper's limit of 100), and, with `late`, POSTs
/// other than the probe wait [`HOLD`] before their response head.
fn hyper_server(late: bool, headers: usize) -> String {
    use http_body_util::Full;
    use hyper::body::Incoming;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let answer = move |req: hyper::Request<Incoming>| async move {
        let post = req.method() == hyper::Method::POST;
        if post && late && !req.headers().contains_key(PROBE) {
            tokio::time::sleep(HOLD).await;
        }
        let mut response = hyper::Response::builder()
            .status(if post { 200 } else { 404 })
            .header("content-type", "text/event-stream");
        for i in (0..headers).filter(|_| post) {
            response = response.header(format!("x-proxy-{i:03}"), "v".repeat(88));
        }
        response.body(Full::new(bytes::Bytes::from_static(SSE.as_bytes())))
    };
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let builder = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let service = hyper::service::service_fn(answer);
                    let _ = builder.serve_connection(io, service).await;
                });
            }
        });
    });
    url
}

/// A benchmark of `url` (model `m`, a request log), `requests` requests one at a time
/// of `data`.
fn against(url: &str, requests: u64, data: &str) -> Bench {
    Bench::target(url)
        .model("m")
        .request_log("requests.jsonl")
        .synchronous()
        .max_requests(requests)
        .data(data)
}

/// Two short requests against `url`, one at a time.
fn sync_two(url: &str) -> Bench {
    against(url, 2, "prompt_tokens=16,output_tokens=4")
}

/// Asserts a run exited 0 with `completed` requests completed and `errored` errored.
fn assert_ran(run: &Finished, b: &BenchmarkResult, completed: u64, errored: u64) {
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert_eq!(
        (b.requests.completed, b.requests.errored),
        (completed, errored),
        "{:?}",
        b.errors
    );
}

/// Runs `bench` (with a 60 s request timeout unless it sets one); what it left, its one
/// benchmark and its request log.
fn run_against(bench: Bench) -> (Finished, BenchmarkResult, Vec<RequestEntry>) {
    let bench = if bench.sets("--request-timeout") {
        bench
    } else {
        bench.request_timeout("60s")
    };
    let run = bench.run();
    let report = run.report();
    let b = report
        .benchmarks
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("one benchmark; stderr:\n{}", run.stderr));
    let log = std::fs::read_to_string(run.dir.path().join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a request entry"))
        .collect();
    (run, b, log)
}

/// The errors of a benchmark: (kind, count, first sample).
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
fn a_response_head_later_than_the_ttft_timeout_ends_the_request_on_both_clients() {
    // The head is held back 30 s; the TTFT bound is 200 ms, the request timeout 20 s.
    let raw = Server::start(|_, _| Act::Late);
    let hyper_url = hyper_server(true, 0);
    for (url, client) in [(&raw.url, None), (&hyper_url, Some("--http2"))] {
        // Below the 30 s the head is held back: without the TTFT bound on the head the
        // request timeout ends the request instead, with its own message.
        let bench = sync_two(url)
            .arg("--ttft-timeout", "200ms")
            .request_timeout("20s")
            .args_as_written(client.as_slice());
        let (run, b, _) = run_against(bench);
        assert_eq!(
            run.code(),
            exit_codes::INVALID_RUN,
            "{client:?}: {}",
            run.stderr
        );
        let errors = errors(&b);
        assert_eq!(errors.len(), 1, "{client:?}: {errors:?}");
        let (kind, count, sample) = &errors[0];
        assert_eq!(
            (kind.as_str(), *count),
            ("timeout", 2),
            "{client:?}: {errors:?}"
        );
        assert_eq!(sample, "no first token within 0.200s", "{client:?}");
    }
    assert_eq!(raw.posts().len(), 2, "each request sent once");
}

/// A dataset of one row whose request body is over 16 MB: an image as a data URL (sent
/// as it is; nginx refuses bodies over 1 MB by default).
fn large_upload(dir: &std::path::Path) -> String {
    let row = serde_json::json!({
        "prompt": "describe this image",
        "image_url": format!("data:image/jpeg;base64,{}", "A".repeat(16 << 20)),
        "output_tokens_count": 4,
    });
    let path = dir.join("large.jsonl");
    std::fs::write(&path, format!("{row}\n")).expect("write the dataset");
    path.to_string_lossy().into_owned()
}

#[test]
fn a_413_answered_before_the_body_was_read_is_reported_with_its_message() {
    const MESSAGE: &str = "request body too large: the limit is 1048576 bytes";
    let body =
        format!("{{\"error\":{{\"message\":\"{MESSAGE}\",\"type\":\"invalid_request_error\"}}}}");
    let too_large = format!(
        "HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    // A server that closes at once (our write then fails with a reset), and a proxy that
    // keeps the connection but reads no more (our write then waits for room for ever).
    let data_dir = tempfile::tempdir().expect("tempdir");
    let data = large_upload(data_dir.path());
    for close in [true, false] {
        let response = too_large.clone();
        let server = Server::start(move |_, _| {
            if close {
                Act::EarlyThenClose(response.clone())
            } else {
                Act::EarlyThenWait(response.clone())
            }
        });
        let (run, b, _) = run_against(against(&server.url, 3, &data));
        assert_eq!(
            run.code(),
            exit_codes::INVALID_RUN,
            "close={close}: {}",
            run.stderr
        );
        let errors = errors(&b);
        assert_eq!(
            errors,
            [("http_413".to_string(), 3, MESSAGE.to_string())],
            "close={close}"
        );
        // Each request reached the server once, each on its own connection (the
        // half-sent one is never reused).
        let posts = server.posts();
        assert_eq!(posts.len(), 3, "close={close}: {posts:?}");
        assert!(
            posts.iter().all(|p| p.index == 0),
            "close={close}: {posts:?}"
        );
    }
}

#[test]
fn a_100_continue_during_a_large_upload_is_no_answer() {
    let data_dir = tempfile::tempdir().expect("tempdir");
    let data = large_upload(data_dir.path());
    let server = Server::start(|_, _| Act::ContinueThenAnswer);
    let (run, b, _) = run_against(against(&server.url, 2, &data));
    assert_ran(&run, &b, 2, 0);
    assert_eq!(server.posts().len(), 2);
}

/// A prompt long enough that its body outlasts the server's first read of the head: a
/// server that closes then leaves bytes of it unread, which makes the close a reset.
const LONG: &str = "prompt_tokens=4000,output_tokens=4";

#[test]
fn a_reused_connection_reset_unread_costs_one_counted_resend_never_two() {
    // Each connection answers its first request and closes on the next one with its
    // body unread (a keep-alive timeout crossing the request on the wire): the server
    // never took it whole, so it is sent once more, on a fresh connection.
    let server = Server::start(|post, _| {
        if post.index == 0 {
            Act::Answer(ok())
        } else {
            Act::EarlyThenClose(Vec::new())
        }
    });
    let (run, b, log) = run_against(against(&server.url, 5, LONG));
    assert_ran(&run, &b, 5, 0);
    // The server saw the first request once and every later one twice: cut on the
    // reused connection, answered on a fresh one.
    let posts = server.posts();
    let shape: Vec<usize> = posts.iter().map(|p| p.index).collect();
    assert_eq!(shape, [0, 1, 0, 1, 0, 1, 0, 1, 0], "{posts:?}");
    for k in (1..posts.len()).step_by(2) {
        let (answered, cut, resent) = (&posts[k - 1], &posts[k], &posts[k + 1]);
        assert_eq!(cut.connection, answered.connection, "reused: {posts:?}");
        assert_ne!(resent.connection, cut.connection, "fresh: {posts:?}");
    }
    // Visible in the request log and counted in the report: the four resent requests,
    // and only they.
    let retried: Vec<bool> = log.iter().map(|e| e.retried).collect();
    assert_eq!(retried.iter().filter(|r| **r).count(), 4, "{retried:?}");
    assert_eq!(b.requests.resent, 4);
    assert!(
        run.stdout.contains("4 resent once on a fresh connection"),
        "{}",
        run.stdout
    );

    // A server that cuts every request but the first: the second is sent twice (reused,
    // then fresh), the later ones, on fresh connections, once; none a third time.
    let server = Server::start(|_, before| {
        if before == 0 {
            Act::Answer(ok())
        } else {
            Act::EarlyThenClose(Vec::new())
        }
    });
    let (run, b, log) = run_against(against(&server.url, 4, LONG));
    assert_ran(&run, &b, 1, 3);
    assert_eq!(errors(&b)[0].0, "connection_closed");
    assert_eq!(server.posts().len(), 1 + 2 + 1 + 1, "{:?}", server.posts());
    assert_eq!(log.iter().filter(|e| e.retried).count(), 1);
    assert_eq!(b.requests.resent, 1);
}

#[test]
fn a_request_read_whole_and_closed_unanswered_is_an_error_never_a_resend() {
    // Each connection answers its first request; the next one is read whole and the
    // connection closed without a byte of response (a server's close fault, a crash):
    // the server may have run it, so it is errored with its reason, never sent again,
    // reused connection or not.
    let server = Server::start(|post, _| {
        if post.index == 0 {
            Act::Answer(ok())
        } else {
            Act::Drop
        }
    });
    let (run, b, log) = run_against(against(&server.url, 5, "prompt_tokens=16,output_tokens=4"));
    assert_ran(&run, &b, 3, 2);
    let posts = server.posts();
    let shape: Vec<usize> = posts.iter().map(|p| p.index).collect();
    assert_eq!(shape, [0, 1, 0, 1, 0], "each request once: {posts:?}");
    let (kind, count, sample) = &errors(&b)[0];
    assert_eq!((kind.as_str(), *count), ("connection_closed", 2));
    assert!(sample.contains("not resent"), "{sample}");
    assert!(log.iter().all(|e| !e.retried));
    assert_eq!(b.requests.resent, 0);
}

#[test]
fn session_cookies_expire_the_last_of_two_wins_and_raw_bytes_are_refused_and_counted() {
    // One conversation of five turns, one at a time; the server's Set-Cookie per turn.
    let server = Server::start(|_, before| {
        Act::Answer(match before {
            // Two of the token's cookie (the last wins) and another cookie.
            0 => ok_with(
                "set-cookie: route=a0\r\nset-cookie: other=z\r\nset-cookie: route=a1; Path=/\r\n",
            ),
            // Expired: the next turn goes without it.
            1 => ok_with("set-cookie: route=a1; Max-Age=0\r\n"),
            2 => ok_with("set-cookie: route=b2; Expires=Thu, 01 Jan 1970 00:00:00 GMT\r\n"),
            3 => ok_with("set-cookie: route=c3\r\n"),
            // Non-ASCII: never sent back raw; the token before it is dropped too.
            _ => ok_with("set-cookie: route=caf\u{e9}\r\n"),
        })
    });
    let bench = against(&server.url, 6, "turns=6,prompt_tokens=16,output_tokens=4")
        .arg("--affinity", "sglang")
        .arg("--session-token", "cookie:route");
    let (run, b, _) = run_against(bench);
    assert_ran(&run, &b, 6, 0);
    let cookies: Vec<Option<String>> = server.posts().into_iter().map(|p| p.cookie).collect();
    let route = |t: &str| Some(format!("route={t}"));
    assert_eq!(
        cookies,
        [None, route("a1"), None, None, route("c3"), None],
        "what each turn sent back"
    );
    let warning = b
        .client
        .warnings
        .iter()
        .find(|w| w.contains("session tokens"))
        .unwrap_or_else(|| panic!("no refused-token warning: {:?}", b.client.warnings));
    assert!(
        warning.starts_with("2 session tokens"),
        "the last two turns: {warning}"
    );
    assert!(run.stdout.contains(warning.as_str()), "{}", run.stdout);
}

#[test]
fn heads_of_many_headers_pass_and_heads_over_64_kib_fail_even_in_one_write() {
    // 150 headers, as proxies stacked in front of a server add them.
    let many: String = (0..150)
        .map(|i| format!("x-proxy-{i}: hop {i}\r\n"))
        .collect();
    let server = Server::start(move |_, _| Act::Answer(ok_with(&many)));
    let (run, b, _) = run_against(sync_two(&server.url));
    assert_ran(&run, &b, 2, 0);

    // The same through reqwest (HTTP/2): 300 headers, 30 KB of them, within 64 KiB.
    let (run, b, _) = run_against(sync_two(&hyper_server(false, 300)).flag("--http2"));
    assert_ran(&run, &b, 2, 0);

    // A head of 100 KiB, written at once: refused, whatever reads it arrives in.
    let huge = format!("x-huge: {}\r\n", "a".repeat(100 << 10));
    let server = Server::start(move |_, _| Act::Answer(ok_with(&huge)));
    let (run, b, _) = run_against(sync_two(&server.url));
    assert_eq!(run.code(), exit_codes::INVALID_RUN, "{}", run.stderr);
    assert_eq!(
        errors(&b),
        [(
            "malformed_response".to_string(),
            2,
            "response head larger than 64 KiB".to_string()
        )]
    );
}
