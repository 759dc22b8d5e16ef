//! Per-request records for people: the lines of `--request-log` and the samples that
//! `--sample-requests` keeps in the JSON report.
//!
//! Both take the coordinator's [`RequestRecord`] (monotonic timestamps) and turn it into
//! a [`RequestEntry`] with wall-clock times and the derived latencies. The log streams
//! every entry through a buffered writer (bounded memory, flushed at every benchmark
//! end); the sampler keeps a uniform reservoir of N entries per status (bounded memory
//! however long the run).

use llmsurge_proto::seed::derive_seed;
use llmsurge_proto::{
    ClockAnchor, Phase, RequestMedia, RequestRecord, RequestStatus, StatusClass, TokenSource,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One finished request, with wall-clock times (Unix seconds) and derived latencies (ms).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestEntry {
    /// The benchmark it belongs to (its `index`).
    pub benchmark: u32,
    /// The slot of the benchmark's schedule it filled.
    pub slot: u64,
    /// The worker that ran it.
    pub worker: u32,
    /// How it ended.
    pub status: RequestStatus,
    /// Warm-up, measured, or cool-down.
    pub phase: Phase,
    /// The error kind (`http_500`, `timeout`, …), when it failed.
    pub error_kind: Option<String>,
    /// The error message, when it failed.
    pub error: Option<String>,
    /// Held by a cap the user set (the concurrency cap, `--max-prefill-concurrency`):
    /// sent later than its intended instant, or never, for that wait.
    pub late: bool,
    /// Sent a second time, on a fresh connection, after a reused one closed unanswered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retried: bool,
    /// The intended instant: when the load asked for it (a rate profile's slot; in a
    /// closed loop the stream's previous end plus any think time).
    pub scheduled_time: f64,
    /// When it was sent, if it was.
    pub start_time: Option<f64>,
    /// The first streamed token of any kind.
    pub first_token_time: Option<f64>,
    /// The first content token.
    pub first_content_time: Option<f64>,
    /// The last byte, or when it failed or was cancelled.
    pub end_time: f64,
    /// Client queue time, ms: start − intended instant (end − intended, for a request
    /// never sent), whatever held it: the sum of `concurrency_wait_ms`,
    /// `prefill_wait_ms` and `dispatch_lag_ms` (those present). Absent from logs and
    /// samples written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<f64>,
    /// Of the queue time, ms, the wait for the user's concurrency cap; absent when it
    /// did not hold the request. For a request never sent that it held to the end, up
    /// to the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_wait_ms: Option<f64>,
    /// Of the queue time, ms, the wait for `--max-prefill-concurrency`; absent when it
    /// did not hold the request (no cap, or room at once). For a request never sent
    /// that it held to the end, up to the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_wait_ms: Option<f64>,
    /// Of the queue time, ms, what no cap explains: a busy client held it (the
    /// report's `dispatch_lag`, over the requests sent). Absent for a request never sent
    /// that a cap held to the end; the whole queue time of one never sent that no cap
    /// held.
    pub dispatch_lag_ms: Option<f64>,
    /// First content token − start, ms.
    pub ttft_ms: Option<f64>,
    /// End − start, ms.
    pub latency_ms: Option<f64>,
    /// First content token − intended instant, ms: `ttft_ms` + `queue_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_from_intent_ms: Option<f64>,
    /// End − intended instant, ms, when sent: `latency_ms` + `queue_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_from_intent_ms: Option<f64>,
    /// The last chunk that carried tokens (streamed, with two such chunks at least).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_token_time: Option<f64>,
    /// The request's mean inter-token latency, ms: (`last_token_time` −
    /// `first_token_time`) over its token gaps, as its gaps went into the `itl`
    /// distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_ms: Option<f64>,
    /// Its time per output token, ms: (end − first token) / (output tokens − 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    /// Prompt tokens.
    pub prompt_tokens: Option<u32>,
    /// Output tokens.
    pub output_tokens: u32,
    /// Where `output_tokens` came from.
    pub output_tokens_source: TokenSource,
    /// Of `output_tokens`, the reasoning tokens, when the server's usage said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u32>,
    /// Output tokens counted from the stream.
    pub streamed_tokens: u32,
    /// The output length the request asked for (its `max_tokens`); absent when it named
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_asked: Option<u32>,
    /// Why the server said the output ended (`length`, `stop`, `tool_calls`, `other`);
    /// absent when its answer named no reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<llmsurge_proto::FinishReason>,
    /// `--lora`: the model the request named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Multi-turn sessions: the session (its index in the schedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// Multi-turn sessions: the turn, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// The request's `x-request-id`, when ids were sent (`--request-id-header`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The W3C trace id of its `traceparent` (32 hex digits): its session's or agent
    /// trace's, else its own; the same in `--outputs otlp` and the server's spans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Its span id (16 hex digits), the `traceparent`'s parent id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// Multimodal requests: each image's format, pixel size and bytes, and the audio
    /// clip's seconds and WAV bytes, as sent; sizes only, never the bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<RequestMedia>,
    /// `--repeat`: the run (from 0) this request belongs to; absent without repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u32>,
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl RequestEntry {
    /// The entry with the request's trace ids.
    pub fn with_trace(mut self, ids: llmsurge_proto::TraceIds) -> Self {
        self.trace_id = Some(ids.trace_hex());
        self.span_id = Some(ids.span_hex());
        self
    }

    /// Converts a record of benchmark `benchmark`; `anchor` turns monotonic times into wall time.
    pub fn new(benchmark: u32, r: &RequestRecord, anchor: &ClockAnchor) -> Self {
        let wall = |t| anchor.unix_seconds(t);
        // Cut from one span, as the report's `client.queue` reads them.
        let parts = r.queue_parts();
        Self {
            benchmark,
            slot: r.slot,
            worker: r.worker,
            status: r.status,
            phase: r.phase,
            error_kind: r.error.as_ref().map(|e| e.kind.key()),
            error: r.error.as_ref().map(|e| e.message.clone()),
            late: r.late,
            retried: r.retried,
            scheduled_time: wall(r.scheduled),
            start_time: r.start.map(wall),
            first_token_time: r.first_token.map(wall),
            first_content_time: r.first_content.map(wall),
            end_time: wall(r.end),
            queue_ms: Some(ms(r.queue_time())),
            concurrency_wait_ms: parts.concurrency.map(ms),
            prefill_wait_ms: parts.prefill.map(ms),
            dispatch_lag_ms: parts.busy.map(ms),
            ttft_ms: r.ttft().map(ms),
            latency_ms: r.latency().map(ms),
            ttft_from_intent_ms: r.ttft_from_intent().map(ms),
            latency_from_intent_ms: r.latency_from_intent().map(ms),
            last_token_time: r.itl.map(|i| wall(i.last_token)),
            itl_ms: r.itl_mean().map(ms),
            tpot_ms: r.tpot().map(ms),
            prompt_tokens: r.prompt_tokens,
            output_tokens: r.output_tokens,
            output_tokens_source: r.output_tokens_source,
            reasoning_tokens: r.reasoning_tokens,
            streamed_tokens: r.streamed_tokens,
            output_tokens_asked: r.max_output_tokens,
            finish_reason: r.finish_reason,
            model: None,
            session: r.session.map(|s| s.id),
            turn: r.session.map(|s| s.turn),
            media: r.media.as_deref().cloned(),
            request_id: None,
            trace_id: None,
            span_id: None,
            run: None,
        }
    }
}

/// The sampled requests of one benchmark, by status, in slot order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestSamples {
    /// The benchmark (its `index`).
    pub benchmark: u32,
    /// Completed requests.
    pub successful: Vec<RequestEntry>,
    /// Errored requests.
    pub errored: Vec<RequestEntry>,
    /// Cancelled requests.
    pub incomplete: Vec<RequestEntry>,
}

/// A uniform sample of at most `n` items of a stream of unknown length (Algorithm R).
#[derive(Debug)]
struct Reservoir {
    n: usize,
    seen: u64,
    items: Vec<RequestEntry>,
}

impl Reservoir {
    fn new(n: usize) -> Self {
        Self {
            n,
            seen: 0,
            items: Vec::new(),
        }
    }

    fn offer(&mut self, entry: impl FnOnce() -> RequestEntry, rng: &mut StdRng) {
        self.seen += 1;
        if self.items.len() < self.n {
            self.items.push(entry());
            return;
        }
        let j = rng.random_range(0..self.seen);
        if let Some(slot) = usize::try_from(j).ok().and_then(|j| self.items.get_mut(j)) {
            *slot = entry();
        }
    }

    fn take(&mut self) -> Vec<RequestEntry> {
        let mut items = std::mem::take(&mut self.items);
        items.sort_by_key(|e| e.slot);
        self.seen = 0;
        items
    }
}

/// Keeps `n` requests per status of the running benchmark, chosen uniformly at random
/// (seeded from the run seed, so a rerun keeps the same slots).
#[derive(Debug)]
pub struct RequestSampler {
    seed: u64,
    benchmark: u32,
    rng: StdRng,
    by_status: [Reservoir; 3],
}

impl RequestSampler {
    /// A sampler keeping `n` requests per status.
    pub fn new(n: usize, seed: u64) -> Self {
        Self {
            seed,
            benchmark: 0,
            rng: StdRng::seed_from_u64(derive_seed(seed, "request-samples", 0)),
            by_status: [Reservoir::new(n), Reservoir::new(n), Reservoir::new(n)],
        }
    }

    /// Starts sampling benchmark `index`.
    pub fn start(&mut self, index: u32) {
        self.benchmark = index;
        self.rng =
            StdRng::seed_from_u64(derive_seed(self.seed, "request-samples", u64::from(index)));
        for r in &mut self.by_status {
            r.take();
        }
    }

    /// Offers one finished request; `model` is the name its `--lora` split gave it,
    /// `request_id` the benchmark's request-id prefix when ids are sent.
    pub fn offer(
        &mut self,
        record: &RequestRecord,
        anchor: &ClockAnchor,
        model: Option<&str>,
        request_id: Option<&str>,
        trace: llmsurge_proto::TraceIds,
    ) {
        let i = match StatusClass::of(record.status) {
            StatusClass::Successful => 0,
            StatusClass::Errored => 1,
            StatusClass::Incomplete => 2,
        };
        let benchmark = self.benchmark;
        self.by_status[i].offer(
            || {
                RequestEntry {
                    model: model.map(str::to_string),
                    request_id: request_id.map(|prefix| format!("{prefix}{}", record.slot)),
                    ..RequestEntry::new(benchmark, record, anchor)
                }
                .with_trace(trace)
            },
            &mut self.rng,
        );
    }

    /// The samples of the benchmark that just finished.
    pub fn finish(&mut self) -> RequestSamples {
        let [s, e, i] = &mut self.by_status;
        RequestSamples {
            benchmark: self.benchmark,
            successful: s.take(),
            errored: e.take(),
            incomplete: i.take(),
        }
    }
}

/// `--request-log`: every finished request as one JSON line, streamed to disk.
///
/// Lines are buffered and written out in whole-buffer writes; a write that fails (a full
/// disk) can leave part of a line in the file, so the log cuts the file back to the end
/// of its last whole line and stops. What it says afterwards is the truth: how many
/// requests the file holds whole, and how many it was given.
#[derive(Debug)]
pub struct RequestLog {
    path: PathBuf,
    /// `None` once a write failed: the log stops there.
    file: Option<File>,
    /// Whole lines not yet written.
    buf: Vec<u8>,
    /// Requests given to the log.
    lines: u64,
    /// Requests whose line is in the file whole.
    written: u64,
    /// Bytes of those lines: where the file ends once a cut line is removed.
    written_bytes: u64,
    error: Option<RequestLogError>,
}

/// Lines are written out once this much is buffered (and at every benchmark's end).
const LOG_BUFFER: usize = 64 * 1024;

/// Why the request log stopped, and what it holds.
#[derive(Debug)]
pub struct RequestLogError {
    /// The write error.
    pub source: std::io::Error,
    /// Requests whose line the file holds whole.
    pub written: u64,
    /// Whether a line cut by the failed write is still at the file's end (removing it
    /// failed too).
    pub cut_line_left: bool,
}

impl std::fmt::Display for RequestLogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}; it holds the first {} requests whole{}",
            self.source,
            self.written,
            if self.cut_line_left {
                ", then a cut line"
            } else {
                ""
            }
        )
    }
}

impl RequestLog {
    /// Creates (truncates) the log file, and its directory if needed.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = crate::safe_file::create_log(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Some(file),
            buf: Vec::with_capacity(LOG_BUFFER),
            lines: 0,
            written: 0,
            written_bytes: 0,
            error: None,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Requests given to the log so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Requests whose line is in the file whole (after the last flush).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends one line (a request's entry; for `--outputs otlp`, a document of spans).
    /// After a write error the log stops (counting what it is given);
    /// [`RequestLog::flush`] reports it.
    pub fn write(&mut self, entry: &impl Serialize) {
        self.lines += 1;
        if self.file.is_none() {
            return;
        }
        let mark = self.buf.len();
        if let Err(e) = serde_json::to_writer(&mut self.buf, entry) {
            self.buf.truncate(mark);
            self.stop(std::io::Error::other(e), false);
            return;
        }
        self.buf.push(b'\n');
        if self.buf.len() >= LOG_BUFFER {
            self.write_out();
        }
    }

    /// Writes the buffered lines to the file; on a failure, cuts the file back to its
    /// last whole line and stops.
    fn write_out(&mut self) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let mut done = 0;
        let failure = loop {
            if done == self.buf.len() {
                break None;
            }
            match file.write(&self.buf[done..]) {
                Ok(0) => break Some(std::io::Error::from(std::io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Some(e),
            }
        };
        // The lines that reached the file whole.
        let whole = self.buf[..done]
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |i| i + 1);
        self.written += self.buf[..whole].iter().filter(|&&c| c == b'\n').count() as u64;
        self.written_bytes += whole as u64;
        let Some(e) = failure else {
            self.buf.clear();
            return;
        };
        // Part of a line went out: cut it (freeing space never needs space).
        let cut_line_left = done > whole && file.set_len(self.written_bytes).is_err();
        self.stop(e, cut_line_left);
    }

    fn stop(&mut self, source: std::io::Error, cut_line_left: bool) {
        self.file = None;
        self.buf = Vec::new();
        self.error.get_or_insert(RequestLogError {
            source,
            written: self.written,
            cut_line_left,
        });
    }

    /// Writes out what is buffered; returns the error that stopped the log, if any.
    pub fn flush(&mut self) -> Result<(), &RequestLogError> {
        self.write_out();
        match &self.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::MonoNanos;

    fn record(slot: u64, status: RequestStatus) -> RequestRecord {
        let at = |ms: u64| MonoNanos(5_000_000_000 + ms * 1_000_000);
        let t = slot * 10;
        RequestRecord {
            slot,
            worker: 1,
            status,
            scheduled: at(t),
            prompt_tokens: Some(8),
            ..RequestRecord::completed(at(t + 1), Some(at(t + 21)), at(t + 101), 4)
        }
    }

    fn anchor() -> ClockAnchor {
        ClockAnchor {
            mono: MonoNanos(5_000_000_000),
            unix_nanos: 1_700_000_000_000_000_000,
        }
    }

    #[test]
    fn an_entry_carries_wall_times_and_latencies() {
        let e = RequestEntry::new(3, &record(2, RequestStatus::Completed), &anchor());
        assert_eq!(e.benchmark, 3);
        assert!((e.scheduled_time - 1_700_000_000.020).abs() < 1e-6);
        assert!((e.ttft_ms.expect("ttft") - 20.0).abs() < 1e-9);
        assert!((e.latency_ms.expect("latency") - 100.0).abs() < 1e-9);
        assert!((e.dispatch_lag_ms.expect("lag") - 1.0).abs() < 1e-9);
        assert!(e.queue_ms.is_some_and(|q| (q - 1.0).abs() < 1e-9));
        assert!((e.ttft_from_intent_ms.expect("from intent") - 21.0).abs() < 1e-9);
        assert_eq!((e.concurrency_wait_ms, e.prefill_wait_ms), (None, None));
        // Held 0.4 ms by the concurrency cap and 0.5 ms by the prefill cap: of its 1 ms
        // in the client, 0.1 ms was the client's own.
        let held = RequestRecord {
            concurrency_wait: Some(std::time::Duration::from_micros(400)),
            finish_reason: None,
            prefill_wait: Some(std::time::Duration::from_micros(500)),
            late: true,
            ..record(2, RequestStatus::Completed)
        };
        let e = RequestEntry::new(3, &held, &anchor());
        assert!((e.dispatch_lag_ms.expect("lag") - 0.1).abs() < 1e-9);
        assert!(e.queue_ms.is_some_and(|q| (q - 1.0).abs() < 1e-9) && e.late);
    }

    #[test]
    fn the_sampler_keeps_n_per_status_uniformly() {
        let mut s = RequestSampler::new(10, 42);
        s.start(0);
        for slot in 0..10_000 {
            s.offer(
                &record(slot, RequestStatus::Completed),
                &anchor(),
                None,
                None,
                llmsurge_proto::TraceIds::of(42, slot, None),
            );
        }
        for slot in 10_000..10_003 {
            s.offer(
                &record(slot, RequestStatus::Errored),
                &anchor(),
                None,
                None,
                llmsurge_proto::TraceIds::of(42, slot, None),
            );
        }
        let out = s.finish();
        assert_eq!(out.successful.len(), 10);
        assert_eq!(out.errored.len(), 3);
        assert!(out.incomplete.is_empty());
        assert!(out.successful.windows(2).all(|w| w[0].slot < w[1].slot));
        // Uniform over 10,000: a sample of ten confined to the first thousand would be
        // a broken reservoir (probability 1e-10).
        assert!(out.successful.iter().any(|e| e.slot >= 1000));
        // The next benchmark starts empty.
        s.start(1);
        assert!(s.finish().successful.is_empty());
    }

    #[test]
    fn a_log_on_a_full_device_says_it_holds_nothing_and_keeps_counting() {
        let mut log = RequestLog::create(Path::new("/dev/full")).expect("open /dev/full");
        for slot in 0..3 {
            log.write(&RequestEntry::new(
                0,
                &record(slot, RequestStatus::Completed),
                &anchor(),
            ));
        }
        let e = log.flush().expect_err("no space on /dev/full");
        assert_eq!(e.written, 0);
        assert!(
            e.to_string()
                .ends_with("(os error 28); it holds the first 0 requests whole"),
            "{e}"
        );
        log.write(&RequestEntry::new(
            0,
            &record(3, RequestStatus::Completed),
            &anchor(),
        ));
        assert!(log.flush().is_err());
        assert_eq!((log.lines(), log.written()), (4, 0));
    }

    #[test]
    fn the_log_writes_one_line_per_request() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/requests.jsonl");
        let mut log = RequestLog::create(&path).expect("create");
        for slot in 0..3 {
            log.write(&RequestEntry::new(
                0,
                &record(slot, RequestStatus::Completed),
                &anchor(),
            ));
        }
        log.flush().expect("flush");
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<RequestEntry> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(log.lines(), 3);
        assert_eq!(lines[2].slot, 2);
    }
}
