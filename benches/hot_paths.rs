//! Benchmarks of the client's hot paths (divan): what every token, request, flush and
//! batch costs. Run with `cargo bench --bench hot_paths`; see docs/performance.md.
//!
//! These are measurements, not tests: nothing here asserts a time.

use bytes::BytesMut;
use llmsurge_coordinator::Limits;
use llmsurge_coordinator::state::WorkerGroupState;
use llmsurge_proto::metrics::MetricSet;
use llmsurge_proto::shm::UNLIMITED;
use llmsurge_proto::{
    BackendConfig, FromWorker, MeasureWindow, Metric, MonoNanos, RequestFormat, SharedRegion,
    StatusClass, UpdateBatch, decode_frame, encode_frame,
};
use llmsurge_worker::backend::Exchange;
use llmsurge_worker::openai::{BodyTemplate, StreamEvent, Usage, parse_stream_event};
use llmsurge_worker::reporter::{Reporter, SlotInfo};
use llmsurge_worker::sse::SseParser;
use llmsurge_worker::{PreparedRequest, Prompt};
use std::time::Duration;

fn main() {
    divan::main();
}

/// Output tokens of the streamed responses below (one token per chunk, as vLLM sends).
const TOKENS: usize = 64;
/// Records in one IPC batch (a 20 ms flush at ~3,000 req/s).
const BATCH: usize = 64;

/// A chat stream exactly as the mock (and OpenAI) sends it: `TOKENS` content chunks, a
/// finish chunk, a usage chunk and `[DONE]`.
fn chat_stream() -> Vec<u8> {
    let head = r#"{"id":"chatcmpl-000000000000c0ef","object":"chat.completion.chunk","created":1795359480,"model":"llmsurge-mock","choices":[{"index":0,"delta":{"#;
    let mut out = String::new();
    for i in 0..TOKENS {
        let role = if i == 0 { r#""role":"assistant","# } else { "" };
        out.push_str(&format!(
            "data: {head}{role}\"content\":\" word{i}\"}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null}}\n\n"
        ));
    }
    out.push_str(&format!(
        "data: {head}}},\"logprobs\":null,\"finish_reason\":\"length\"}}],\"usage\":null}}\n\n"
    ));
    out.push_str(r#"data: {"id":"chatcmpl-000000000000c0ef","object":"chat.completion.chunk","created":1795359480,"model":"llmsurge-mock","choices":[],"usage":{"prompt_tokens":16,"completion_tokens":64,"total_tokens":80}}"#);
    out.push_str("\n\ndata: [DONE]\n\n");
    out.into_bytes()
}

/// The events of `chat_stream`, one per piece (a server that flushes every token).
fn chat_events() -> Vec<Vec<u8>> {
    let stream = chat_stream();
    let mut events = Vec::new();
    let mut rest = &stream[..];
    while let Some(end) = rest.windows(2).position(|w| w == b"\n\n") {
        events.push(rest[..end + 2].to_vec());
        rest = &rest[end + 2..];
    }
    events
}

/// SSE framing alone, per token, the whole response arriving in one piece.
#[divan::bench(name = "sse_parse_per_token")]
fn sse_parse(b: divan::Bencher) {
    let stream = chat_stream();
    b.counter(divan::counter::ItemsCount::new(TOKENS))
        .bench(|| {
            let mut p = SseParser::new();
            let mut n = 0usize;
            p.push(divan::black_box(&stream), |d| {
                n += d.len();
                true
            });
            n
        });
}

/// SSE framing plus the chunk's JSON, per token: what the worker does for every token.
#[divan::bench(args = ["one_piece", "piece_per_event"])]
fn sse_and_json_per_token(b: divan::Bencher, split: &str) {
    let pieces = match split {
        "one_piece" => vec![chat_stream()],
        _ => chat_events(),
    };
    b.counter(divan::counter::ItemsCount::new(TOKENS))
        .bench(|| {
            let mut p = SseParser::new();
            let mut content = 0usize;
            for piece in &pieces {
                p.push(divan::black_box(piece), |d| match parse_stream_event(d) {
                    Ok(StreamEvent::Chunk(c)) => {
                        content += usize::from(c.content);
                        true
                    }
                    _ => false,
                });
            }
            content
        });
}

/// A Responses API stream as the mock sends it: `TOKENS` output-text deltas between the
/// opening and closing events, each with its `event:` line.
fn responses_stream() -> Vec<u8> {
    let ev = |name: &str, seq: usize, rest: &str| {
        format!("event: {name}\ndata: {{\"type\":\"{name}\",\"sequence_number\":{seq}{rest}}}\n\n")
    };
    let resp = r#","response":{"id":"resp_000000000000c0ef","object":"response","created_at":1795359480,"model":"llmsurge-mock","status":"in_progress","output":[],"usage":null}"#;
    let mut out = ev("response.created", 0, resp);
    out.push_str(&ev("response.in_progress", 1, resp));
    out.push_str(&ev("response.output_item.added", 2, r#","output_index":0,"item":{"id":"msg_000000000000c0ef","type":"message","status":"in_progress","role":"assistant","content":[]}"#));
    out.push_str(&ev("response.content_part.added", 3, r#","item_id":"msg_000000000000c0ef","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}"#));
    for i in 0..TOKENS {
        out.push_str(&ev(
            "response.output_text.delta",
            4 + i,
            &format!(r#","item_id":"msg_000000000000c0ef","output_index":0,"content_index":0,"delta":" word{i}","logprobs":[]"#),
        ));
    }
    out.push_str(&ev("response.completed", 4 + TOKENS, r#","response":{"id":"resp_000000000000c0ef","object":"response","created_at":1795359480,"model":"llmsurge-mock","status":"completed","incomplete_details":null,"output":[],"usage":{"input_tokens":16,"input_tokens_details":{"cached_tokens":0},"output_tokens":64,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":80}}"#));
    out.into_bytes()
}

/// An Anthropic Messages stream as the mock sends it: `TOKENS` text deltas.
fn anthropic_stream() -> Vec<u8> {
    let ev =
        |name: &str, rest: &str| format!("event: {name}\ndata: {{\"type\":\"{name}\"{rest}}}\n\n");
    let mut out = ev(
        "message_start",
        r#","message":{"id":"msg_000000000000c0ef","type":"message","role":"assistant","model":"llmsurge-mock","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":16,"output_tokens":1}}"#,
    );
    out.push_str(&ev(
        "content_block_start",
        r#","index":0,"content_block":{"type":"text","text":""}"#,
    ));
    out.push_str(&ev("ping", ""));
    for i in 0..TOKENS {
        out.push_str(&ev(
            "content_block_delta",
            &format!(r#","index":0,"delta":{{"type":"text_delta","text":" word{i}"}}"#),
        ));
    }
    out.push_str(&ev("content_block_stop", r#","index":0"#));
    out.push_str(&ev("message_delta", r#","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":64}"#));
    out.push_str(&ev("message_stop", ""));
    out.into_bytes()
}

/// SSE framing plus the event's JSON through the request format (what the worker calls),
/// per token, the whole response in one piece: chat against the typed-event formats.
#[divan::bench(args = ["chat", "responses", "anthropic"])]
fn format_stream_per_token(b: divan::Bencher, format: &str) {
    let (request_format, stream) = match format {
        "chat" => (RequestFormat::Chat, chat_stream()),
        "responses" => (RequestFormat::Responses, responses_stream()),
        _ => (RequestFormat::Anthropic, anthropic_stream()),
    };
    let cfg = BackendConfig {
        request_format,
        ..backend_config()
    };
    let parser = llmsurge_worker::formats::for_config(&cfg);
    b.counter(divan::counter::ItemsCount::new(TOKENS))
        .bench(|| {
            let mut p = SseParser::new();
            let mut state = llmsurge_worker::formats::StreamState::default();
            let mut content = 0usize;
            p.push(divan::black_box(&stream), |d| {
                match parser.parse_event(d, &mut state) {
                    Ok(StreamEvent::Chunk(c)) => {
                        content += usize::from(c.content);
                        true
                    }
                    Ok(StreamEvent::Last(_) | StreamEvent::Done) => false,
                    _ => panic!("the stream parses"),
                }
            });
            assert_eq!(content, TOKENS);
            content
        });
}

fn backend_config() -> BackendConfig {
    BackendConfig {
        base_url: "http://127.0.0.1:8000".into(),
        request_format: RequestFormat::Chat,
        model: "llmsurge-mock".into(),
        stream: true,
        api_key: None,
        headers: vec![],
        params: vec![],
        extra_body: serde_json::Map::new(),
        http2: false,
        http2_streams: 1,
        request_timeout: Duration::from_secs(300),
        connect_timeout: Duration::from_secs(10),
        tls: Default::default(),
        ttft_timeout: None,
        idle_timeout: None,
        ignore_eos: true,
        traceparent: false,
        min_tokens: false,
        session_header: None,
        tools: 0,
        request_id: None,
        affinity: Default::default(),
    }
}

/// One request body with a prompt of about 256 tokens.
#[divan::bench]
fn body_build(b: divan::Bencher) {
    let template = BodyTemplate::new(&backend_config());
    let req = PreparedRequest {
        prompt: Prompt::Text("the quick brown fox jumps over the lazy dog ".repeat(28)),
        prompt_tokens: Some(256),
        max_tokens: Some(128),
        model: None,
        user: None,
        session: None,
    };
    b.bench(|| template.build(divan::black_box(&req)));
}

fn exchange(start: MonoNanos) -> Exchange {
    let at = |us: u64| start + Duration::from_micros(us);
    Exchange {
        start: Some(start),
        first_token: Some(at(900)),
        first_content: Some(at(900)),
        first_tool: None,
        end: Some(at(900 + 64 * 20)),
        token_times: (0..TOKENS as u64).map(|i| at(900 + i * 20)).collect(),
        streamed_tokens: TOKENS as u32,
        reasoning_chunks: 0,
        usage: Some(Usage {
            prompt_tokens: Some(16),
            completion_tokens: Some(TOKENS as u32),
            reasoning_tokens: None,
        }),
        finished: true,
        error: None,
        reply: None,
        tool_call: None,
        retried: false,
        connected: true,
        token_refused: false,
        first_token_signal: None,
        prefill_wait: None,
        concurrency_wait: None,
        finish_reason: None,
    }
}

/// A batch as a worker sends it: `BATCH` started and finished requests with their
/// histogram delta.
fn batch() -> UpdateBatch {
    let t0 = MonoNanos(1_000_000_000);
    let mut reporter = Reporter::new(0, t0, MeasureWindow::default());
    for slot in 0..BATCH as u64 {
        let start = t0 + Duration::from_micros(slot * 300);
        let info = SlotInfo {
            slot,
            scheduled: start,
            late: false,
            prompt_tokens: Some(16),
            max_output_tokens: Some(128),
            previous_end: None,
            model: None,
            session: None,
            media: None,
            session_key: None,
        };
        reporter.started(&info, start);
        reporter.finished(info, &exchange(start));
    }
    reporter.take_batch().expect("a batch encodes")
}

/// Turning one finished request into its record and histogram values.
#[divan::bench]
fn reporter_finish_per_request(b: divan::Bencher) {
    let t0 = MonoNanos(1_000_000_000);
    let mut reporter = Reporter::new(0, t0, MeasureWindow::default());
    let ex = exchange(t0);
    let mut slot = 0u64;
    b.bench_local(|| {
        slot += 1;
        let info = SlotInfo {
            slot,
            scheduled: t0,
            late: false,
            prompt_tokens: Some(16),
            max_output_tokens: Some(128),
            previous_end: None,
            model: None,
            session: None,
            media: None,
            session_key: None,
        };
        reporter.finished(info, divan::black_box(&ex));
        if reporter.pending() >= 4096 {
            let _ = reporter.take_batch();
        }
    });
}

/// One flush: encoding the histogram delta of a batch (V2) and taking the batch.
#[divan::bench]
fn reporter_take_batch(b: divan::Bencher) {
    let t0 = MonoNanos(1_000_000_000);
    let ex = exchange(t0);
    b.with_inputs(|| {
        let mut reporter = Reporter::new(0, t0, MeasureWindow::default());
        for slot in 0..BATCH as u64 {
            let info = SlotInfo {
                slot,
                scheduled: t0,
                late: false,
                prompt_tokens: Some(16),
                max_output_tokens: Some(128),
                previous_end: None,
                model: None,
                session: None,
                media: None,
                session_key: None,
            };
            reporter.finished(info, &ex);
        }
        reporter
    })
    .bench_local_refs(|r| r.take_batch().expect("encodes"));
}

/// Encoding one IPC frame of a batch, per record.
#[divan::bench]
fn frame_encode_per_record(b: divan::Bencher) {
    let msg = FromWorker::Update(batch());
    let mut out = Vec::with_capacity(64 << 10);
    b.counter(divan::counter::ItemsCount::new(BATCH))
        .bench_local(|| {
            out.clear();
            encode_frame(divan::black_box(&msg), &mut out).expect("encodes");
        });
}

/// Decoding one IPC frame of a batch, per record.
#[divan::bench]
fn frame_decode_per_record(b: divan::Bencher) {
    let mut wire = Vec::new();
    encode_frame(&FromWorker::Update(batch()), &mut wire).expect("encodes");
    b.counter(divan::counter::ItemsCount::new(BATCH))
        .with_inputs(|| BytesMut::from(&wire[..]))
        .bench_local_refs(|buf| decode_frame::<FromWorker>(buf).expect("decodes"));
}

/// Recording one value into a histogram.
#[divan::bench]
fn histogram_record(b: divan::Bencher) {
    let mut set = MetricSet::new();
    let mut v = 1_000u64;
    b.bench_local(|| {
        v = (v * 7 + 13) % 5_000_000;
        set.record(StatusClass::Successful, Metric::Itl, divan::black_box(v));
    });
}

/// Merging one encoded batch delta into the coordinator's histograms.
#[divan::bench]
fn histogram_merge_encoded(b: divan::Bencher) {
    let encoded = batch().metrics;
    let mut total = MetricSet::new();
    b.bench_local(|| {
        total
            .merge_encoded(divan::black_box(&encoded))
            .expect("merges")
    });
}

/// The coordinator applying one batch (counts, in-flight tracking, time series,
/// histograms), per record.
#[divan::bench]
fn coordinator_apply_per_record(b: divan::Bencher) {
    let batch = batch();
    let mut state = WorkerGroupState::new(1, MonoNanos(1_000_000_000), Limits::default());
    b.counter(divan::counter::ItemsCount::new(BATCH))
        .bench_local(|| {
            state
                .apply(0, divan::black_box(&batch), &mut |_| {})
                .expect("applies")
        });
}

/// Claiming a slot of the group's schedule and taking and giving back a unit of
/// concurrency: the shared-memory work of every request.
#[divan::bench]
fn slot_claim_acquire_release(b: divan::Bencher) {
    let (shm, _fd) = SharedRegion::create().expect("memfd");
    shm.init(1, UNLIMITED, 1 << 40);
    b.bench(|| {
        let slot = shm.claim_slot();
        if shm.try_acquire(0) {
            shm.release(0);
        }
        slot
    });
}

/// Reading the monotonic clock (every timestamp of a request).
#[divan::bench]
fn clock_now() -> MonoNanos {
    MonoNanos::now()
}
