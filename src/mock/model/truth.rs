//! `--truth PATH`: what the server did with every generation and pooling request, one
//! JSON line each, keyed by the request's `x-request-id`, so a test (or a user checking a
//! client) can join it with llmsurge's `--request-log` and compare every latency and
//! count with what really happened.
//!
//! Instants are taken on `CLOCK_MONOTONIC` ([`MonoNanos`]) next to the event — arrival
//! when the handler starts, the head when the handler hands the response to hyper, a
//! chunk when its frame is handed to hyper (hyper writes it in the same poll) — and
//! written as Unix seconds through a [`ClockAnchor`], as llmsurge's request log is: on
//! one host the two files' times compare to microseconds.
//!
//! The file is a [`JsonLines`] with a 64 KiB buffer: a line costs one serialization (its
//! chunks written by hand, [`write_chunks`]) and a copy, and a `write` happens once per
//! 64 KiB. It is flushed when the server stops, after
//! every response body has ended (bodies still open then end as `server_stopped`).

use std::ops::Range;
use std::path::Path;

use llmsurge_proto::{ClockAnchor, MonoNanos};
use serde::Serialize;

use super::record::JsonLines;
use super::stats::FaultKind;

/// Bytes buffered before a write.
const BUFFER_BYTES: usize = 64 * 1024;

/// The open `--truth` file.
#[derive(Debug)]
pub struct TruthWriter {
    file: JsonLines,
    anchor: ClockAnchor,
}

impl TruthWriter {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(TruthWriter {
            file: JsonLines::create(path, BUFFER_BYTES)?,
            anchor: ClockAnchor::now(),
        })
    }

    /// Writes the line of a request that ended.
    pub fn write(&self, trace: &Trace) {
        let time = |t: MonoNanos| self.anchor.unix_seconds(t);
        // A chunk written but never handed over (the client went away) never went out.
        let chunks = &trace.chunks[..trace.stamped];
        let line = Line {
            request_id: trace.request_id.as_deref(),
            traceparent: trace.traceparent.as_deref(),
            connection: trace.connection,
            endpoint: trace.endpoint,
            stream: trace.stream,
            status: trace.status,
            arrival_time: time(trace.arrival),
            head_time: trace.head.map(time),
            end_time: time(trace.end.unwrap_or_else(MonoNanos::now)),
            outcome: trace.outcome,
            fault: trace.fault.map(fault_name),
            prompt_tokens: trace.prompt_tokens,
            reasoning_tokens: chunks.iter().map(|c| c.reasoning).sum(),
            content_tokens: chunks.iter().map(|c| c.content).sum(),
            tool_call: trace.tool_call.as_deref(),
            finish_reason: trace.finish_reason,
        };
        self.file.write_with(|bytes| {
            serde_json::to_writer(&mut *bytes, &line)?;
            // The chunks go last, into the object serde closed.
            bytes.pop();
            bytes.extend_from_slice(b",\"chunks\":[");
            write_chunks(bytes, chunks, &self.anchor)?;
            bytes.extend_from_slice(b"]}");
            Ok(())
        });
    }

    /// Writes out what is buffered (the server stopped).
    pub fn flush(&self) {
        self.file.flush();
    }
}

/// The name of an injected fault in the file.
fn fault_name(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Error500 => "error_500",
        FaultKind::Error429 => "error_429",
        FaultKind::Drop => "drop",
        FaultKind::Garbage => "garbage",
        FaultKind::Stall => "stall",
        FaultKind::Close => "close",
    }
}

/// How a request ended, as the server saw it.
pub mod outcome {
    /// The whole response was handed to the connection.
    pub const COMPLETED: &str = "completed";
    /// A fault was injected (see `fault`).
    pub const FAULT: &str = "fault";
    /// Answered with an error of the request's own making (a 4xx: bad body, unknown model).
    pub const REJECTED: &str = "rejected";
    /// The client closed the connection before the response ended.
    pub const CLIENT_GONE: &str = "client_gone";
    /// The server stopped before the response ended.
    pub const SERVER_STOPPED: &str = "server_stopped";
}

/// One request's story, filled in as it goes and written when it ends.
#[derive(Debug)]
pub struct Trace {
    /// Its `x-request-id`, when it had one.
    pub request_id: Option<String>,
    /// Its W3C `traceparent`, when it had one (what joins the client's spans).
    pub traceparent: Option<String>,
    /// The accepted connection it came on (numbered from 0 in accept order).
    pub connection: Option<u64>,
    /// The endpoint's path.
    pub endpoint: &'static str,
    /// Answered as a stream.
    pub stream: bool,
    /// The response's HTTP status; `None` when the connection was closed instead.
    pub status: Option<u16>,
    /// When the handler began (the request head was parsed).
    pub arrival: MonoNanos,
    /// When the response head was handed to hyper; `None` when none was sent.
    pub head: Option<MonoNanos>,
    /// The chunks handed over, in order (a non-streamed body is one chunk).
    pub chunks: Vec<TruthChunk>,
    /// Chunks of `chunks` handed over (the rest are written, waiting for their frame).
    pub stamped: usize,
    /// When the body ended (its last frame, a cut, or the drop).
    pub end: Option<MonoNanos>,
    /// One of [`outcome`].
    pub outcome: &'static str,
    /// The injected fault, when one was.
    pub fault: Option<FaultKind>,
    /// Prompt tokens as the server counted them, when it did.
    pub prompt_tokens: Option<u64>,
    /// The id of the tool call the answer was, before its format's prefix; `None` for
    /// an answer in text.
    pub tool_call: Option<String>,
    /// Why the generation ends as planned (`length`, `stop`, `tool_calls`); `None` for a
    /// pooling request or an answer that carried no generation.
    pub finish_reason: Option<&'static str>,
}

/// One chunk: when it went out and the tokens it carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruthChunk {
    /// When its frame was handed to hyper.
    pub time: MonoNanos,
    /// Reasoning tokens in it.
    pub reasoning: u32,
    /// Content tokens in it.
    pub content: u32,
}

impl Trace {
    /// Adds a chunk written into the body's buffer; stamped when its frame goes out.
    pub fn chunk(&mut self, reasoning: u32, content: u32) {
        self.chunks.push(TruthChunk {
            time: MonoNanos(0),
            reasoning,
            content,
        });
    }

    /// A frame went to hyper at `at`: every chunk written so far went with it.
    pub fn frame_sent(&mut self, at: MonoNanos) {
        for c in &mut self.chunks[self.stamped..] {
            c.time = at;
        }
        self.stamped = self.chunks.len();
    }
}

#[derive(Serialize)]
struct Line<'a> {
    request_id: Option<&'a str>,
    traceparent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    connection: Option<u64>,
    endpoint: &'a str,
    stream: bool,
    status: Option<u16>,
    arrival_time: f64,
    head_time: Option<f64>,
    end_time: f64,
    outcome: &'a str,
    fault: Option<&'static str>,
    prompt_tokens: Option<u64>,
    reasoning_tokens: u32,
    content_tokens: u32,
    tool_call: Option<&'a str>,
    finish_reason: Option<&'static str>,
}

/// Writes the chunks of a line as JSON array elements, by hand: at the mock's rate a line
/// of 16 chunks through serde was most of `--truth`'s cost (a float formatted and three
/// keys escaped a chunk). A chunk like the one before it (a zero-latency stream's all
/// went out in one frame) copies that one's text; one sharing its instant reuses the
/// instant's text. Numbers are still formatted by serde_json, as the rest of the line.
fn write_chunks(
    bytes: &mut Vec<u8>,
    chunks: &[TruthChunk],
    anchor: &ClockAnchor,
) -> serde_json::Result<()> {
    // The previous chunk, and where its element and its instant's text are in `bytes`.
    let mut last: Option<(TruthChunk, Range<usize>, Range<usize>)> = None;
    for (i, c) in chunks.iter().enumerate() {
        if i > 0 {
            bytes.push(b',');
        }
        let start = bytes.len();
        if let Some((prev, element, _)) = &last
            && prev == c
        {
            bytes.extend_from_within(element.clone());
            continue;
        }
        bytes.extend_from_slice(b"{\"time\":");
        let from = bytes.len();
        match &last {
            Some((prev, _, time)) if prev.time == c.time => bytes.extend_from_within(time.clone()),
            _ => serde_json::to_writer(&mut *bytes, &anchor.unix_seconds(c.time))?,
        }
        let time = from..bytes.len();
        bytes.extend_from_slice(b",\"reasoning\":");
        serde_json::to_writer(&mut *bytes, &c.reasoning)?;
        bytes.extend_from_slice(b",\"content\":");
        serde_json::to_writer(&mut *bytes, &c.content)?;
        bytes.push(b'}');
        last = Some((*c, start..bytes.len(), time));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line's chunks keep their own instants and tokens, in order, whether or not
    /// they went out in the same frame; chunks never handed over are left out.
    #[test]
    fn a_line_lists_each_chunk_at_its_frames_instant() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("truth.jsonl");
        let writer = TruthWriter::create(&path).expect("truth file");
        let mut trace = Trace {
            request_id: Some("r\"1\\\n".into()),
            traceparent: None,
            connection: Some(0),
            endpoint: "/v1/chat/completions",
            stream: true,
            status: Some(200),
            arrival: MonoNanos(1_000_000),
            head: Some(MonoNanos(2_000_000)),
            chunks: Vec::new(),
            stamped: 0,
            end: Some(MonoNanos(9_000_000)),
            outcome: outcome::COMPLETED,
            fault: None,
            prompt_tokens: Some(3),
            tool_call: None,
            finish_reason: Some("length"),
        };
        // One frame of three chunks (the third like the second), a frame of one, a
        // frame of two that differ: every way a chunk's text is made.
        trace.chunk(2, 0);
        trace.chunk(0, 1);
        trace.chunk(0, 1);
        trace.frame_sent(MonoNanos(3_000_000));
        trace.chunk(0, 1);
        trace.frame_sent(MonoNanos(5_000_000));
        trace.chunk(0, 1);
        trace.chunk(0, 12);
        trace.frame_sent(MonoNanos(7_000_123));
        trace.chunk(0, 4); // written, never handed over
        writer.write(&trace);
        writer.flush();
        let text = std::fs::read_to_string(&path).expect("read back");
        let line: serde_json::Value = serde_json::from_str(text.trim_end()).expect("one line");
        let chunks = line["chunks"].as_array().expect("chunks");
        let seen: Vec<(f64, u64, u64)> = chunks
            .iter()
            .map(|c| {
                (
                    c["time"].as_f64().expect("time"),
                    c["reasoning"].as_u64().expect("reasoning"),
                    c["content"].as_u64().expect("content"),
                )
            })
            .collect();
        let at = |ns| writer.anchor.unix_seconds(MonoNanos(ns));
        assert_eq!(
            seen,
            vec![
                (at(3_000_000), 2, 0),
                (at(3_000_000), 0, 1),
                (at(3_000_000), 0, 1),
                (at(5_000_000), 0, 1),
                (at(7_000_123), 0, 1),
                (at(7_000_123), 0, 12)
            ]
        );
        assert_eq!(line["request_id"], "r\"1\\\n");
        assert_eq!(line["reasoning_tokens"], 2);
        assert_eq!(line["content_tokens"], 16);
        assert_eq!(line["end_time"].as_f64(), Some(at(9_000_000)));
    }
}
