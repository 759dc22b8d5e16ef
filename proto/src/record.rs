//! Per-request timing records and error kinds, as workers report them.

use crate::clock::MonoNanos;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    /// The server answered in full.
    Completed,
    /// The request failed; see its [`ErrorKind`].
    Errored,
    /// The request was stopped by the client (the benchmark ended or was interrupted).
    Cancelled,
}

/// Why a request failed or did not finish. Counted per kind in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The server answered with a non-success HTTP status.
    Http {
        /// The HTTP status code.
        status: u16,
    },
    /// The connection could not be made: refused, reset, a failed TLS handshake, or none
    /// within `--connect-timeout`. The server never had the request.
    Connect,
    /// A timeout fired on a request sent: total, time to first token, or idle between
    /// tokens.
    Timeout,
    /// The response stream broke off before it was complete.
    StreamBroken,
    /// The server closed the connection after the request was sent but before any
    /// response headers.
    ConnectionClosed,
    /// The server sent an SSE event or JSON body the client could not parse.
    MalformedResponse,
    /// The server sent more than the client reads of one answer (an SSE event, a whole
    /// body, a stream's chunks: see [`crate::limits`]); the message names the limit.
    ResponseTooLarge,
    /// The client cancelled the request.
    Cancelled,
    /// The worker that owned the request died.
    WorkerDied,
    /// The request could not be built or sent for another reason.
    Request,
    /// The client closed the request early by plan (`--cancel`), apart from the
    /// cancellations of a stop.
    Planned,
}

impl ErrorKind {
    /// A stable key for reports, e.g. `http_500`, `timeout`.
    pub fn key(&self) -> String {
        match self {
            ErrorKind::Http { status } => format!("http_{status}"),
            other => other.name().to_string(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            ErrorKind::Http { .. } => "http",
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::StreamBroken => "stream_broken",
            ErrorKind::ConnectionClosed => "connection_closed",
            ErrorKind::MalformedResponse => "malformed_response",
            ErrorKind::ResponseTooLarge => "response_too_large",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::WorkerDied => "worker_died",
            ErrorKind::Request => "request",
            ErrorKind::Planned => "planned",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// An error kind with a message for diagnosis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestError {
    /// What went wrong, as a countable kind.
    pub kind: ErrorKind,
    /// A human-readable detail (e.g. the server's error message).
    pub message: String,
}

/// Where an output token count came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage` object.
    Usage,
    /// Counted from the streamed chunks.
    Stream,
    /// Not known (no usage and nothing streamed).
    #[default]
    Unknown,
}

/// Why the server ended a request's output, as it said (`finish_reason` of chat and
/// completions, `stop_reason` of the Messages API, a Responses answer's `status` and
/// `incomplete_details`); a request whose answer said none has `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The output reached the length asked (`length`, `max_tokens`, `max_output_tokens`).
    Length,
    /// The model chose to stop (`stop`, `end_turn`, `stop_sequence`, `completed`).
    Stop,
    /// The model called a tool (`tool_calls`, `tool_use`, a Responses `function_call`).
    ToolCalls,
    /// Anything else the server named (`content_filter`, `refusal`, …).
    Other,
}

impl FinishReason {
    /// Reads an OpenAI `finish_reason` or a Messages API `stop_reason`.
    pub fn from_wire(reason: &str) -> Self {
        match reason {
            "length" | "max_tokens" | "max_output_tokens" => FinishReason::Length,
            "stop" | "end_turn" | "stop_sequence" | "eos" => FinishReason::Stop,
            "tool_calls" | "tool_use" | "function_call" => FinishReason::ToolCalls,
            _ => FinishReason::Other,
        }
    }

    /// The name reports use (`length`, `stop`, `tool_calls`, `other`).
    pub fn key(self) -> &'static str {
        match self {
            FinishReason::Length => "length",
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Other => "other",
        }
    }
}

/// Which part of the benchmark a request belongs to. Only `Measured` requests feed the
/// metrics; the others are kept in the record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Inside the warm-up window.
    Warmup,
    /// In the measured window.
    #[default]
    Measured,
    /// Inside the cool-down window.
    Cooldown,
}

/// A request was sent: the coordinator now counts it as in flight on that worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestStarted {
    /// The slot of the group's schedule this request filled.
    pub slot: u64,
    /// When it should have been sent.
    pub scheduled: MonoNanos,
    /// When it was sent.
    pub start: MonoNanos,
    /// `--lora`: the index of its model in the split (so a dead worker's requests are
    /// still counted under their model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<u16>,
    /// Its session and turn: a dead worker's request keeps the trace it was sent in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionTag>,
    /// Its prompt length, when known (as its record would have it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u32>,
    /// The output length it asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
}

/// Everything the coordinator keeps about one finished request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The slot of the group's schedule this request filled.
    pub slot: u64,
    /// The worker that ran it.
    pub worker: u32,
    /// How it ended.
    pub status: RequestStatus,
    /// Why it failed, when it did.
    pub error: Option<RequestError>,
    /// The intended instant: when the load asked for it (a rate profile's slot; in a
    /// closed loop the stream's previous end plus any think time; an agent call's
    /// dependencies' end plus its gap). Everything from here to `start` is client queue
    /// time (see [`RequestRecord::queue_time`]).
    pub scheduled: MonoNanos,
    /// When it was written to the socket; `None` if it never was.
    pub start: Option<MonoNanos>,
    /// The first streamed token of any kind (reasoning included).
    pub first_token: Option<MonoNanos>,
    /// The first content (output) token.
    pub first_content: Option<MonoNanos>,
    /// The first token of a tool call (a tool call is answer output, so this is also
    /// `first_content` when the answer opened with it); `None` without a tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_tool: Option<MonoNanos>,
    /// The last byte received, or the instant it failed or was cancelled.
    pub end: MonoNanos,
    /// What the request's inter-token latency was measured over: its last chunk with
    /// tokens and the token gaps from its first such chunk to it. `None` without two
    /// such chunks, or for a non-streamed response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl: Option<ItlSpan>,
    /// Prompt tokens, from the server's usage when it sent one, else the client's count.
    pub prompt_tokens: Option<u32>,
    /// Output tokens, from `output_tokens_source`.
    pub output_tokens: u32,
    /// Where `output_tokens` came from.
    pub output_tokens_source: TokenSource,
    /// Of `output_tokens`, the reasoning tokens, when the server's usage said
    /// (`completion_tokens_details.reasoning_tokens`, `output_tokens_details.reasoning_tokens`).
    /// With it, ITL packs the reasoning chunks and the answer chunks each on its own
    /// (docs/metrics.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u32>,
    /// Output tokens counted from the stream (for the usage-vs-stream check).
    pub streamed_tokens: u32,
    /// The most output tokens the request asked for (its `max_tokens`); `None` when it
    /// named none, or the user's `extra_body` set it. Bounds what the server can have
    /// generated for a request that did not complete (the cross-check's upper end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Why the server said the output ended; `None` when its answer said nothing (or
    /// none came).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// The response was streamed, so token arrivals were seen. `false` for a whole
    /// (non-streamed) body: the client cannot see tokens arrive, so such a request has no
    /// TPOT or ITL (absent, not zero) and no stream count to check usage against.
    #[serde(default = "streamed_by_default")]
    pub streamed: bool,
    /// Warm-up, measured, or cool-down.
    pub phase: Phase,
    /// Held by a cap the user set (the concurrency cap, `--max-prefill-concurrency`) on
    /// its way out: sent later than its intended instant, or never, for that wait.
    pub late: bool,
    /// Sent a second time, on a fresh connection, after the reused connection it was
    /// first written on closed without a byte of response (a server's keep-alive timeout
    /// crossing the request).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retried: bool,
    /// `--session-token`: its response carried a token that may not go back in a
    /// request header as it is (control bytes, non-ASCII), so it was not kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub token_refused: bool,
    /// `--lora`: the index of the model it named in the split's list; `None` without a
    /// split (the configured model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<u16>,
    /// Multi-turn sessions: the session and turn this request was; `None` outside
    /// sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionTag>,
    /// Multimodal requests: the sizes of the media it carried (never the bytes); `None`
    /// for a request without media. Boxed: most requests have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<Box<RequestMedia>>,
    /// `--max-prefill-concurrency`: how long it waited for the cap's room before its
    /// send (not counted in its dispatch lag), zero when it was not held (or until a
    /// stop cancelled it, when never sent); `None` without a cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_wait: Option<std::time::Duration>,
    /// How long the user's concurrency cap held it before it had room (not counted in
    /// its dispatch lag); `None` when the cap did not hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_wait: Option<std::time::Duration>,
}

/// A request's client queue time by cause ([`RequestRecord::queue_parts`]); the parts
/// present sum to its queue time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueParts {
    /// The wait for the user's concurrency cap; `None` when it did not hold the request.
    pub concurrency: Option<std::time::Duration>,
    /// The wait for `--max-prefill-concurrency`; `None` when it did not hold the request
    /// (no cap, or room at once).
    pub prefill: Option<std::time::Duration>,
    /// What no cap explains, the time a busy client held it (dispatch lag); `None` for a
    /// request never sent that a cap held to its end.
    pub busy: Option<std::time::Duration>,
}

/// The span of a request's inter-token gaps: from its first chunk with tokens
/// ([`RequestRecord::first_token`]) to its last, over `gaps` token gaps (each later
/// chunk's tokens, see docs/metrics.md). Its mean ITL is the span over the gaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItlSpan {
    /// The arrival of the last chunk that carried tokens.
    pub last_token: MonoNanos,
    /// Token gaps between the first and the last chunk with tokens (at least one).
    pub gaps: u32,
    /// The server's counts fitted more than one way of packing the tokens into the chunks
    /// (how many the reasoning chunks carried, without the usage's reasoning count), and
    /// the chunks' timing chose the packing `gaps` follows (docs/metrics.md, "ITL").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed: bool,
}

/// What media one request carried: sizes, never the bytes. Rows of a dataset can carry
/// different numbers of images, so this is per request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestMedia {
    /// Each image, in the order sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageInfo>,
    /// The audio clip (chat `input_audio`, or a transcription's upload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioInfo>,
}

impl RequestMedia {
    /// Encoded bytes of all the images (before base64).
    pub fn image_bytes(&self) -> u64 {
        self.images.iter().map(|i| i.bytes).sum()
    }
}

/// How an image was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageKind {
    /// A JPEG data URL.
    Jpeg,
    /// A PNG data URL.
    Png,
    /// A WebP data URL.
    Webp,
    /// A GIF data URL.
    Gif,
    /// A data URL of another type.
    Other,
    /// A URL the server fetches itself (its size is not known to the client).
    Url,
}

impl ImageKind {
    /// The kind of an image URL: a data URL by its MIME type, else [`ImageKind::Url`].
    pub fn of_url(url: &str) -> Self {
        let Some(rest) = url.strip_prefix("data:") else {
            return ImageKind::Url;
        };
        let mime = rest.split([';', ',']).next().unwrap_or_default();
        match mime {
            "image/jpeg" | "image/jpg" => ImageKind::Jpeg,
            "image/png" => ImageKind::Png,
            "image/webp" => ImageKind::Webp,
            "image/gif" => ImageKind::Gif,
            _ => ImageKind::Other,
        }
    }
}

/// One image of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    /// How it was sent.
    pub format: ImageKind,
    /// Width in pixels, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// Height in pixels, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    /// Encoded bytes before base64 (0 for a URL the server fetches).
    pub bytes: u64,
}

/// The audio clip of a request.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AudioInfo {
    /// Its duration.
    pub seconds: f64,
    /// Bytes of the WAV file (before base64).
    pub bytes: u64,
}

/// Records from before [`RequestRecord::streamed`] existed were streamed.
fn streamed_by_default() -> bool {
    true
}

/// Which turn of which session a request was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTag {
    /// The session's index in the schedule (the same whatever `--workers`).
    pub id: u64,
    /// The turn, from 0.
    pub turn: u32,
    /// The turns the session has in all.
    pub turns: u32,
    /// Agent traces: what this call waited for before it was sent; `None` for a turn of
    /// a linear session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphStep>,
}

/// How a call of an agent trace became due: the critical path runs back through
/// `after`, and `gap_ns` is the recorded tool or think time it waited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphStep {
    /// The call (its turn index) whose end made it ready: its last dependency to end;
    /// `None` for a call that depends on none.
    pub after: Option<u32>,
    /// The gap it waited after that end (or after the trace's start), as scaled.
    pub gap_ns: u64,
}

impl RequestRecord {
    /// A completed, streamed, measured request (slot 0, worker 0) scheduled and sent at
    /// `start`, whose first token, content, came at `first_token`, ended at `end` with
    /// `output_tokens` from the server's usage, all of them streamed; nothing else set.
    /// The one base the tests build their records on, changing what they test with
    /// `RequestRecord { field, ..RequestRecord::completed(…) }`.
    pub fn completed(
        start: MonoNanos,
        first_token: Option<MonoNanos>,
        end: MonoNanos,
        output_tokens: u32,
    ) -> Self {
        RequestRecord {
            slot: 0,
            worker: 0,
            status: RequestStatus::Completed,
            error: None,
            scheduled: start,
            start: Some(start),
            first_token,
            first_content: first_token,
            first_tool: None,
            end,
            itl: None,
            prompt_tokens: None,
            output_tokens,
            output_tokens_source: TokenSource::Usage,
            reasoning_tokens: None,
            streamed_tokens: output_tokens,
            max_output_tokens: None,
            finish_reason: None,
            streamed: true,
            phase: Phase::Measured,
            late: false,
            retried: false,
            token_refused: false,
            model: None,
            session: None,
            media: None,
            prefill_wait: None,
            concurrency_wait: None,
        }
    }

    /// Time to first content token, when there was one.
    pub fn ttft(&self) -> Option<std::time::Duration> {
        Some(self.first_content?.since(self.start?))
    }

    /// Time to the first token of any kind (reasoning included), when there was one.
    pub fn ttft_any(&self) -> Option<std::time::Duration> {
        Some(self.first_token?.since(self.start?))
    }

    /// Time to the first token of a tool call, when the answer had one.
    pub fn ttft_tool(&self) -> Option<std::time::Duration> {
        Some(self.first_tool?.since(self.start?))
    }

    /// End-to-end latency, when the request was sent.
    pub fn latency(&self) -> Option<std::time::Duration> {
        Some(self.end.since(self.start?))
    }

    /// Time per output token: (e2e − ttft_any) / (output tokens − 1). Reasoning tokens
    /// are output tokens the server decoded like any other, so the clock starts at the
    /// first token of any kind. `None` below two output tokens, with no token at all, or
    /// for a non-streamed response.
    pub fn tpot(&self) -> Option<std::time::Duration> {
        if !self.streamed {
            return None; // one body: the tokens' arrivals were not seen
        }
        let first = self.first_token?;
        (self.output_tokens > 1).then(|| self.end.since(first) / (self.output_tokens - 1))
    }

    /// The mean inter-token latency of this request, as its gaps were recorded into the
    /// `itl` distribution: the time from its first to its last chunk with tokens over the
    /// token gaps between them. `None` without two chunks with tokens, or not streamed.
    pub fn itl_mean(&self) -> Option<std::time::Duration> {
        let span = self.itl?;
        Some(span.last_token.since(self.first_token?) / span.gaps.max(1))
    }

    /// Client queue time: from the intended instant to the send (to the end, for a
    /// request never sent), whatever held it.
    pub fn queue_time(&self) -> std::time::Duration {
        self.start.unwrap_or(self.end).since(self.scheduled)
    }

    /// How long a prefill cap held it (zero without one, or when it had room at once).
    pub fn prefill_held(&self) -> std::time::Duration {
        self.prefill_wait.unwrap_or_default()
    }

    /// How long the concurrency cap held it (zero when it did not).
    pub fn concurrency_held(&self) -> std::time::Duration {
        self.concurrency_wait.unwrap_or_default()
    }

    /// Dispatch lag: the client queue time that no cap the user set explains, the time a
    /// busy client (worker, runtime, pacer) held the request. `None` when never sent.
    pub fn dispatch_lag(&self) -> Option<std::time::Duration> {
        self.start?;
        self.queue_parts().busy
    }

    /// [`RequestRecord::queue_time`] by cause, every part cut from that one span so the
    /// parts sum to it exactly (the request log and the report's `client.queue` both read
    /// them). A request never sent was still waiting when it ended: the cap holding it
    /// then held it until the end (the wait it carries was read a moment before), and one
    /// no cap held spent its whole queue time in a busy client.
    pub fn queue_parts(&self) -> QueueParts {
        let queue = self.queue_time();
        let concurrency = self.concurrency_wait.map(|w| w.min(queue));
        let left = queue - concurrency.unwrap_or_default();
        // Zero: it had room at once, so the cap did not hold it (as the concurrency
        // cap's `None`).
        let prefill = self
            .prefill_wait
            .filter(|w| !w.is_zero())
            .map(|w| w.min(left));
        let rest = left - prefill.unwrap_or_default();
        let mut parts = QueueParts {
            concurrency,
            prefill,
            busy: Some(rest),
        };
        if self.start.is_none() {
            // The prefill cap is asked after the concurrency cap: when both held it, the
            // prefill cap is the one still holding it.
            if let Some(p) = parts.prefill.as_mut().or(parts.concurrency.as_mut()) {
                *p += rest;
                parts.busy = None;
            }
        }
        parts
    }

    /// Time to first content token from the intended instant: TTFT plus the client
    /// queue time.
    pub fn ttft_from_intent(&self) -> Option<std::time::Duration> {
        Some(self.first_content?.since(self.scheduled))
    }

    /// Time to the first token of any kind from the intended instant.
    pub fn ttft_any_from_intent(&self) -> Option<std::time::Duration> {
        Some(self.first_token?.since(self.scheduled))
    }

    /// End-to-end latency from the intended instant, when the request was sent.
    pub fn latency_from_intent(&self) -> Option<std::time::Duration> {
        self.start?;
        Some(self.end.since(self.scheduled))
    }

    /// Time elapsed from the instant this request's latency counts from — its start, or
    /// its scheduled time when it was never sent — to its end. For a request that did not
    /// finish this is a lower bound on every latency it would have had.
    pub fn elapsed(&self) -> std::time::Duration {
        self.end.since(self.start.unwrap_or(self.scheduled))
    }
}
