//! A hostile server gets a bounded amount of memory: the real binary against small servers
//! written here that send what no working server does, lazily (nothing of it allocated
//! here): an SSE line that never ends, on both HTTP clients; a 20 MiB error message; a
//! whole body over 64 MiB; an SSE error event over the IPC frame size (64 MiB); a 600 MiB
//! model list. Each run is held
//! to what the server sent, its report files to a small size, and the llmsurge processes
//! to a peak RSS far below what the server offered (the figure is printed).

use crate::scenario::Bench;
use crate::support::{Finished, assert_identity, llmsurge, read_request};
use llmsurge::exit_codes;
use llmsurge_coordinator::BenchmarkResult;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A stream of one content token, a finish and `[DONE]`.
const SSE: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

/// The probe's marker header (the coordinator's probe before the run).
const PROBE: &str = "x-llmsurge-probe";

const MIB: u64 = 1 << 20;

/// The peak RSS the llmsurge processes of a test may reach (the coordinator or a worker,
/// whichever is larger), against the hundreds of MiB each server offers.
const PEAK_RSS_BOUND_MIB: u64 = 300;

/// How long a server thread lives at most, whatever the client does.
const SERVER_LIFE: Duration = Duration::from_secs(180);

/// Filler written in pieces of this size (never the whole payload at once).
const PIECE: usize = 64 << 10;

/// One answer: fixed bytes, `len` bytes of `byte` written lazily, then fixed bytes.
#[derive(Clone, Debug)]
struct Answer {
    /// What the test calls it (the server's own tally of what it answered).
    name: &'static str,
    head: Vec<u8>,
    filler: (u8, u64),
    tail: Vec<u8>,
}

impl Answer {
    /// Bytes without filler.
    fn plain(name: &'static str, bytes: String) -> Self {
        Answer {
            name,
            head: bytes.into_bytes(),
            filler: (b' ', 0),
            tail: Vec::new(),
        }
    }

    /// A response whose body is `open`, `len` bytes of `byte`, then `close`; without a
    /// Content-Length unless `sized` (the body then ends when the connection closes).
    fn body(
        name: &'static str,
        status: &str,
        content_type: &str,
        sized: bool,
        (open, byte, len, close): (&str, u8, u64, &str),
    ) -> Self {
        let length = if sized {
            format!(
                "content-length: {}\r\n",
                open.len() as u64 + len + close.len() as u64
            )
        } else {
            String::new()
        };
        Answer {
            name,
            head: format!(
                "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{length}connection: close\r\n\r\n{open}"
            )
            .into_bytes(),
            filler: (byte, len),
            tail: close.as_bytes().to_vec(),
        }
    }

    /// The streamed answer of a working server.
    fn ok() -> Self {
        Answer::body(
            "ok",
            "200 OK",
            "text/event-stream",
            true,
            (SSE, b' ', 0, ""),
        )
    }

    /// Writes the answer; stops at the first failed write (the client went).
    fn write(&self, stream: &mut TcpStream, written: &AtomicU64) {
        let mut put = |bytes: &[u8]| {
            let ok = stream.write_all(bytes).is_ok();
            if ok {
                written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            ok
        };
        if !put(&self.head) {
            return;
        }
        let (byte, mut left) = self.filler;
        let piece = vec![byte; PIECE];
        while left > 0 {
            let n = left.min(PIECE as u64) as usize;
            if !put(&piece[..n]) {
                return;
            }
            left -= n as u64;
        }
        put(&self.tail);
    }
}

/// A raw HTTP/1.1 server: each POST (the probe's answered as a working server would) as
/// `post` says given how many came before it, each GET as `get` says given its path
/// (`None`: 404). One answer per connection, which it then closes. Counts the bytes it
/// wrote and what it answered. Its threads end by themselves: the accept loop when the
/// server is dropped (or after [`SERVER_LIFE`]), a connection's when its answer is
/// written or the client goes (a read or write bounded by a timeout).
struct Hostile {
    url: String,
    written: Arc<AtomicU64>,
    answered: Arc<Mutex<Vec<&'static str>>>,
    stop: Arc<AtomicBool>,
}

type Posts = dyn Fn(usize) -> Answer + Send + Sync;
type Gets = dyn Fn(&str) -> Option<Answer> + Send + Sync;

impl Hostile {
    fn start(
        post: impl Fn(usize) -> Answer + Send + Sync + 'static,
        get: impl Fn(&str) -> Option<Answer> + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let written = Arc::new(AtomicU64::new(0));
        let answered = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (post, get): (Arc<Posts>, Arc<Gets>) = (Arc::new(post), Arc::new(get));
        let (w, a, s) = (written.clone(), answered.clone(), stop.clone());
        std::thread::spawn(move || {
            let end = Instant::now() + SERVER_LIFE;
            while !s.load(Ordering::Relaxed) && Instant::now() < end {
                let stream = match listener.accept() {
                    Ok((stream, _)) => stream,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        // Polled: the loop must notice the stop flag by itself.
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    Err(_) => return,
                };
                let (post, get, w, a) = (post.clone(), get.clone(), w.clone(), a.clone());
                std::thread::spawn(move || serve(stream, &*post, &*get, &w, &a));
            }
        });
        Hostile {
            url,
            written,
            answered,
            stop,
        }
    }

    fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn answered(&self) -> Vec<&'static str> {
        self.answered.lock().expect("tally").clone()
    }

    fn count(&self, name: &str) -> u64 {
        self.answered().iter().filter(|n| **n == name).count() as u64
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads one request and writes its answer.
fn serve(
    mut stream: TcpStream,
    post: &Posts,
    get: &Gets,
    written: &AtomicU64,
    answered: &Mutex<Vec<&'static str>>,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let Some(req) = read_request(&mut stream, &mut Vec::new()) else {
        return;
    };
    let (method, path, probe) = (&req.method, &req.path, req.header(PROBE).is_some());
    let answer = if method != "POST" {
        get(path).unwrap_or_else(|| {
            Answer::plain(
                "404",
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into(),
            )
        })
    } else if probe {
        Answer::ok()
    } else {
        let mut tally = answered.lock().expect("tally");
        let answer = post(tally.len());
        tally.push(answer.name);
        answer
    };
    answer.write(&mut stream, written);
}

/// An HTTP/2 (prior knowledge) server of hyper's for the reqwest client: every POST but
/// the probe is answered 200 with an SSE line that never ends (`data: x…`, up to `len`
/// bytes, made as the client reads); GETs 404. Returns its URL and the bytes it handed
/// to hyper. Its thread ends after [`SERVER_LIFE`].
fn endless_line_h2(len: u64) -> (String, Arc<AtomicU64>) {
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::{Frame, Incoming};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let written = Arc::new(AtomicU64::new(0));
    let counter = written.clone();
    let answer = move |req: hyper::Request<Incoming>| {
        let counter = counter.clone();
        async move {
            let post = req.method() == hyper::Method::POST;
            let response = hyper::Response::builder()
                .status(if post { 200 } else { 404 })
                .header("content-type", "text/event-stream");
            let body = if !post {
                Full::new(bytes::Bytes::new()).boxed()
            } else if req.headers().contains_key(PROBE) {
                Full::new(bytes::Bytes::from_static(SSE.as_bytes())).boxed()
            } else {
                let piece = bytes::Bytes::from(vec![b'x'; PIECE]);
                let first = bytes::Bytes::from_static(b"data: ");
                let pieces = futures_util::stream::unfold(0u64, move |sent| {
                    let (piece, first, counter) = (piece.clone(), first.clone(), counter.clone());
                    async move {
                        if sent >= len {
                            return None;
                        }
                        let data = if sent == 0 { first } else { piece };
                        counter.fetch_add(data.len() as u64, Ordering::Relaxed);
                        let next = sent + data.len() as u64;
                        Some((Ok::<_, std::convert::Infallible>(Frame::data(data)), next))
                    }
                });
                StreamBody::new(pieces).boxed()
            };
            response.body(body)
        }
    };
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let _ = tokio::time::timeout(SERVER_LIFE, async {
                while let Ok((stream, _)) = listener.accept().await {
                    let answer = answer.clone();
                    tokio::spawn(async move {
                        let builder = hyper_util::server::conn::auto::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        );
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let service = hyper::service::service_fn(answer);
                        let _ = builder.serve_connection(io, service).await;
                    });
                }
            })
            .await;
        });
    });
    (url, written)
}

/// The largest peak RSS, in MiB, of this test's child processes waited for so far (and
/// of theirs: the coordinator waits for its workers). nextest runs each test in its own
/// process, so only this test's runs count.
fn children_peak_rss_mib() -> u64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    // Linux reports it in KiB.
    u64::try_from(usage.max_rss()).unwrap_or(0) / 1024
}

/// Asserts the peak RSS of the test's llmsurge processes stayed under the bound while
/// the server offered `offered` bytes, and prints both.
fn assert_memory_bounded(what: &str, offered: u64) {
    let peak = children_peak_rss_mib();
    println!(
        "{what}: peak RSS of the llmsurge processes {peak} MiB; the server offered {} MiB",
        offered / MIB
    );
    assert!(
        peak < PEAK_RSS_BOUND_MIB,
        "{what}: peak RSS {peak} MiB, over {PEAK_RSS_BOUND_MIB} MiB"
    );
}

/// `requests` requests of `url`, `concurrency` at a time, model `m`, with a request log.
fn against(url: &str, requests: u64, concurrency: u32) -> Bench {
    Bench::target(url)
        .model("m")
        .request_log("requests.jsonl")
        .concurrent(concurrency)
        .max_requests(requests)
        .data("prompt_tokens=16,output_tokens=4")
        .request_timeout("300s")
}

/// The run's one benchmark, with the accounting identity checked.
fn benchmark(run: &Finished) -> BenchmarkResult {
    let report = run.report();
    assert_identity(&report);
    report
        .benchmarks
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("one benchmark; stderr:\n{}", run.stderr))
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
fn an_sse_line_that_never_ends_costs_4_mib_on_both_clients_not_the_request_timeout() {
    // Each answer would be 256 MiB of one line, if the client read it all.
    let offered = 256 * MIB;
    let line = move || {
        Answer::body(
            "endless",
            "200 OK",
            "text/event-stream",
            false,
            ("data: ", b'x', offered, ""),
        )
    };
    let server = Hostile::start(move |_| line(), |_| None);
    let run = against(&server.url, 3, 1).run();
    assert_eq!(run.code(), exit_codes::INVALID_RUN, "{}", run.stderr);
    let b = benchmark(&run);
    assert_eq!(
        errors(&b),
        [(
            "response_too_large".to_string(),
            3,
            "SSE event larger than 4 MiB".to_string()
        )]
    );
    // The client stopped reading at the limit and closed: the server got to write a few
    // MiB a request (what the socket buffers held beside), not what it offered.
    assert_eq!(server.count("endless"), 3);
    assert!(
        server.written() < 3 * 32 * MIB,
        "the server wrote {} MiB",
        server.written() / MIB
    );

    // The reqwest client (HTTP/2) stops at the same limit.
    let (url, written) = endless_line_h2(offered);
    let run = against(&url, 2, 1).flag("--http2").run();
    assert_eq!(run.code(), exit_codes::INVALID_RUN, "{}", run.stderr);
    assert_eq!(
        errors(&benchmark(&run)),
        [(
            "response_too_large".to_string(),
            2,
            "SSE event larger than 4 MiB".to_string()
        )]
    );
    let sent = written.load(Ordering::Relaxed);
    assert!(sent < 2 * 32 * MIB, "the server wrote {} MiB", sent / MIB);
    assert_memory_bounded("an SSE line without end", 5 * offered);
}

#[test]
fn a_20_mib_error_message_is_cut_to_4_kib_a_body_over_64_mib_is_refused_and_reports_stay_small() {
    // A whole (non-streamed) answer whose error message is 20 MiB, as a 200 and as a 500.
    let len = 20 * MIB;
    let huge = move |name, status| {
        Answer::body(
            name,
            status,
            "application/json",
            true,
            ("{\"error\":{\"message\":\"", b'E', len, "\"}}"),
        )
    };
    // And a whole answer over the 64 MiB body limit, read only as far as the limit.
    let over = 65 * MIB;
    let server = Hostile::start(
        move |i| match i % 3 {
            0 => huge("200", "200 OK"),
            1 => huge("500", "500 Internal Server Error"),
            _ => Answer::body(
                "over",
                "200 OK",
                "application/json",
                true,
                ("{\"choices\":[{\"text\":\"", b't', over, "\"}]}"),
            ),
        },
        |_| None,
    );
    let run = against(&server.url, 6, 1)
        .stream(false)
        .outputs("json,csv,html,yaml,md")
        .run();
    assert_eq!(run.code(), exit_codes::INVALID_RUN, "{}", run.stderr);
    let b = benchmark(&run);
    let errors = errors(&b);
    assert_eq!(
        errors
            .iter()
            .map(|e| (e.0.as_str(), e.1))
            .collect::<Vec<_>>(),
        [
            ("http_500", 2),
            ("malformed_response", 2),
            ("response_too_large", 2)
        ],
        "{errors:?}"
    );
    assert_eq!(errors[2].2, "response body larger than 64 MiB");
    // The message of the 200: the server's own text, cut to 4 KiB with its length noted.
    let cut = &errors[1].2;
    assert!(
        cut.len() <= (4 << 10) + 64 && cut.starts_with("EEEE"),
        "{} bytes: {:?}…",
        cut.len(),
        &cut[..cut.len().min(64)]
    );
    assert!(
        cut.ends_with(&format!("[cut: {len} bytes in all]")),
        "{:?}",
        &cut[cut.len().saturating_sub(64)..]
    );
    // The 500's body is read for its message only as far as 64 KiB: its start is shown.
    assert!(errors[0].2.len() <= 4 << 10, "{}", errors[0].2.len());
    // Every output and the request log stay small (a few KiB of text per request).
    let dir = run.dir.path();
    for file in [
        "benchmarks.json",
        "benchmarks.csv",
        "benchmarks.html",
        "benchmarks.yaml",
        "benchmarks.md",
        "requests.jsonl",
    ] {
        let size = std::fs::metadata(dir.join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .len();
        println!("{file}: {size} bytes");
        assert!(size < 2 * MIB, "{file} is {size} bytes");
    }
    let log = std::fs::read_to_string(dir.join("requests.jsonl")).expect("request log");
    for line in log.lines() {
        let entry: llmsurge::report::RequestEntry = serde_json::from_str(line).expect("entry");
        let message = entry.error.expect("an errored request");
        assert!(message.len() <= (4 << 10) + 64, "{}", message.len());
    }
    assert_eq!(
        (
            server.count("200"),
            server.count("500"),
            server.count("over")
        ),
        (2, 2, 2)
    );
    assert_memory_bounded("20 MiB error messages", 4 * len + 2 * over);
}

#[test]
fn an_sse_error_event_over_the_ipc_frame_size_fails_its_request_and_no_worker_dies() {
    // One request in three gets an error event of 65 MiB (over the 64 MiB IPC frame),
    // one in three a 2 MiB error event (within the SSE event limit: its text is cut in
    // the record), the rest a working answer.
    let (over, long) = (65 * MIB, 2 * MIB);
    let server = Hostile::start(
        move |i| match i % 3 {
            0 => Answer::body(
                "over",
                "200 OK",
                "text/event-stream",
                false,
                ("data: {\"error\":{\"message\":\"", b'x', over, "\"}}\n\n"),
            ),
            1 => Answer::body(
                "long",
                "200 OK",
                "text/event-stream",
                false,
                ("data: {\"error\":{\"message\":\"", b'y', long, "\"}}\n\n"),
            ),
            // The last answers work: the run does not end on a string of errors.
            _ => Answer::ok(),
        },
        |_| None,
    );
    let run = against(&server.url, 12, 3).run();
    assert_eq!(run.code(), exit_codes::OK, "{}", run.stderr);
    let b = benchmark(&run);
    assert_eq!(server.answered().len(), 12);
    // Every answer is counted as what it was: the server's working answers completed,
    // nothing lost to a dead worker.
    assert_eq!(b.requests.created, 12);
    assert_eq!(b.requests.completed, server.count("ok"), "{:?}", b.errors);
    let errors = errors(&b);
    assert!(
        errors.iter().all(|e| e.0 != "worker_died"),
        "{errors:?}\n{}",
        run.stderr
    );
    let kind = |k: &str| errors.iter().find(|e| e.0 == k).cloned();
    let (_, n, sample) = kind("response_too_large").expect("response_too_large");
    assert_eq!(
        (n, sample.as_str()),
        (server.count("over"), "SSE event larger than 4 MiB")
    );
    let (_, n, sample) = kind("stream_broken").expect("stream_broken");
    assert_eq!(n, server.count("long"));
    let prefix = "server error in stream: ";
    assert!(
        sample.starts_with(&format!("{prefix}yyyy")) && sample.len() <= (4 << 10) + 64,
        "{} bytes",
        sample.len()
    );
    assert!(
        sample.ends_with(&format!(
            "[cut: {} bytes in all]",
            prefix.len() as u64 + long
        )),
        "{:?}",
        &sample[sample.len().saturating_sub(64)..]
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_memory_bounded("SSE error events over 64 MiB", 4 * over + 4 * long);
}

#[test]
fn a_600_mib_model_list_is_refused_in_one_line_without_being_read_whole() {
    let offered = 600 * MIB;
    let server = Hostile::start(
        |_| Answer::ok(),
        move |path| {
            (path == "/v1/models").then(|| {
                Answer::body(
                    "models",
                    "200 OK",
                    "application/json",
                    false,
                    (
                        "{\"object\":\"list\",\"data\":[{\"id\":\"",
                        b'm',
                        offered,
                        "\"}]}",
                    ),
                )
            })
        },
    );
    let usage_error = |url: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = llmsurge()
            .args(["benchmark", "run", "--target", url, "--max-requests", "1"])
            .args([
                "--data",
                "prompt_tokens=16,output_tokens=4",
                "--outputs",
                "json",
            ])
            .arg("--output-dir")
            .arg(dir.path())
            .output()
            .expect("llmsurge runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(exit_codes::USAGE), "{stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line: {stderr}");
        lines[0].to_string()
    };
    let line = usage_error(&server.url);
    assert!(
        line.contains("GET /v1/models answered more than 16 MiB"),
        "{line}"
    );
    assert!(
        server.written() < 64 * MIB,
        "the server wrote {} MiB",
        server.written() / MIB
    );
    assert_eq!(server.answered(), Vec::<&str>::new(), "no request was sent");

    // A list within the limit whose first id is 8 KiB: not sent with every request.
    let long_id = Hostile::start(
        |_| Answer::ok(),
        |path| {
            (path == "/v1/models").then(|| {
                Answer::body(
                    "models",
                    "200 OK",
                    "application/json",
                    true,
                    (
                        "{\"object\":\"list\",\"data\":[{\"id\":\"",
                        b'm',
                        8 << 10,
                        "\"}]}",
                    ),
                )
            })
        },
    );
    let line = usage_error(&long_id.url);
    assert!(
        line.contains("has an id of 8192 bytes") && line.contains("pass --model"),
        "{line}"
    );
    assert_memory_bounded("a 600 MiB model list", offered);
}
