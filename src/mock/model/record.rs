//! `--record PATH`: a bounded JSONL of the generation and embedding requests the mock
//! received, one line each (endpoint, model, the body as JSON, arrival time), so a test
//! can check exactly what a client sent. Header and query values go through llmsurge's
//! one redaction ([`llmsurge_proto::Redaction`]): the file holds no credential unless
//! one is named by `--show-header` / `--show-query-param`. Each line is written with one `write` call on
//! a file opened for appending, so a reader never sees half a line of a finished request
//! and nothing is buffered when the server stops.
//!
//! [`JsonLines`] is the file machinery, shared with `--truth` (which buffers).

use llmsurge_proto::Redaction;
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// The largest line buffer a thread keeps between lines.
const KEPT_LINE_BYTES: usize = 64 * 1024;

/// A JSONL file that many tasks append to: each caller serializes its line outside the
/// lock, then appends it whole under the lock. With a buffer, lines reach the file in
/// pieces of that size (and on [`JsonLines::flush`] and drop); without one, each line is
/// one `write` as it comes.
#[derive(Debug)]
pub struct JsonLines {
    file: Mutex<BufWriter<File>>,
    /// Lines that could not be written (a full disk, say).
    failed: AtomicU64,
}

impl JsonLines {
    /// Creates (truncates) `path`, buffering up to `buffer` bytes (0: none).
    pub fn create(path: &Path, buffer: usize) -> std::io::Result<Self> {
        Ok(JsonLines {
            file: Mutex::new(BufWriter::with_capacity(buffer, File::create(path)?)),
            failed: AtomicU64::new(0),
        })
    }

    /// Appends `line` as one JSON line; `false` (and counted) if it could not be.
    pub fn write(&self, line: &impl Serialize) -> bool {
        self.write_with(|bytes| serde_json::to_writer(bytes, line))
    }

    /// Appends the JSON `fill` writes into an empty buffer as one line; `false` (and
    /// counted) if `fill` or the write failed.
    pub fn write_with(&self, fill: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>) -> bool {
        thread_local! {
            /// The line being serialized: one buffer a thread, reused (at the mock's
            /// rate, a fresh one a line is a measurable share of its core).
            static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let written = LINE.with_borrow_mut(|bytes| {
            bytes.clear();
            if fill(bytes).is_err() {
                return false;
            }
            bytes.push(b'\n');
            let written = match self.file.lock() {
                // A line as long as the buffer or longer bypasses it: one write, as unbuffered.
                Ok(mut f) => f.write_all(bytes).is_ok(),
                Err(_) => false,
            };
            // A long prompt's line is not kept for the rest of the run.
            if bytes.capacity() > KEPT_LINE_BYTES {
                *bytes = Vec::new();
            }
            written
        });
        if !written {
            self.failed.fetch_add(1, Relaxed);
        }
        written
    }

    /// Writes out what is buffered.
    pub fn flush(&self) {
        let flushed = match self.file.lock() {
            Ok(mut f) => f.flush().is_ok(),
            Err(_) => false,
        };
        if !flushed {
            self.failed.fetch_add(1, Relaxed);
        }
    }

    /// Lines (or flushes) that failed.
    pub fn failed(&self) -> u64 {
        self.failed.load(Relaxed)
    }
}

/// The open record file and its bound.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    file: JsonLines,
    limit: u64,
    /// Lines claimed so far (written, or being written).
    claimed: AtomicU64,
    /// Requests past the limit, not recorded.
    skipped: AtomicU64,
    started: Instant,
    /// `--record-header`: the headers each line keeps (lowercase).
    headers: Vec<String>,
    /// What of header and query values is written (`--show-header`, `--show-query-param`).
    redaction: Redaction,
}

/// Longest header value a line keeps: the file stays bounded whatever a client sends.
const HEADER_VALUE_LIMIT: usize = 256;

/// What `--record` did, for `GET /stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RecordStats {
    /// The file.
    pub path: PathBuf,
    /// Lines written.
    pub lines: u64,
    /// The bound (`--record-limit`).
    pub limit: u64,
    /// Requests received after the bound was reached, not recorded.
    pub skipped: u64,
    /// Whether recording stopped at the bound.
    pub stopped: bool,
    /// Lines that could not be written.
    pub failed: u64,
}

/// What the server saw of a request beside its body (router affinity, issue 39).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Seen<'a> {
    /// The accepted connection it came on (numbered from 0 in accept order).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection: Option<u64>,
    /// `--issue-session-token`: the token it carried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<&'a str>,
    /// `--issue-session-token`: the token handed out in its response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issued_token: Option<&'a str>,
    /// `--prefix-cache-by`: the replica whose cache it was looked up in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<usize>,
}

#[derive(Serialize)]
struct Line<'a> {
    /// The request's path, e.g. `/v1/chat/completions`.
    endpoint: &'a str,
    /// The body's `model`, if any.
    model: Option<&'a str>,
    /// Nanoseconds from the server's start to the body's arrival.
    arrival_ns: u64,
    /// The body as JSON (a body that is not JSON is kept as a string).
    body: serde_json::Value,
    /// `--record-header NAME`: `{NAME: value or null}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<serde_json::Map<String, serde_json::Value>>,
    /// The request's query, values redacted unless `--show-query-param` names them.
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<String>,
    #[serde(flatten)]
    seen: Seen<'a>,
}

impl Recorder {
    /// Creates (truncates) `path`; `headers` names the request headers to keep in each
    /// line, `redaction` what of their values (and the query's) is written.
    pub fn create(
        path: &Path,
        limit: u64,
        headers: &[String],
        redaction: Redaction,
    ) -> std::io::Result<Self> {
        // Unbuffered: a test may read the file while the server runs.
        let file = JsonLines::create(path, 0)?;
        Ok(Recorder {
            path: path.to_path_buf(),
            file,
            limit,
            claimed: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            started: Instant::now(),
            headers: headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
            redaction,
        })
    }

    /// `--record-header`: the headers whose values [`Recorder::record`] wants.
    pub fn headers(&self) -> &[String] {
        &self.headers
    }

    /// Records one request body that arrived at `endpoint` with `query` (the values of
    /// the `--record-header` headers, in their order, when asked), unless the bound is
    /// reached.
    pub fn record(
        &self,
        endpoint: &str,
        query: Option<&str>,
        header_values: &[Option<String>],
        seen: Seen<'_>,
        body: &[u8],
    ) {
        let arrival_ns = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Claimed before writing, so concurrent requests never write past the bound.
        if self.claimed.fetch_add(1, Relaxed) >= self.limit {
            self.claimed.fetch_sub(1, Relaxed);
            self.skipped.fetch_add(1, Relaxed);
            return;
        }
        let body: serde_json::Value = serde_json::from_slice(body)
            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(body).into()));
        let model = body
            .get("model")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned);
        let headers = (!self.headers.is_empty()).then(|| {
            let mut map = serde_json::Map::new();
            for (i, name) in self.headers.iter().enumerate() {
                let value = header_values.get(i).and_then(Option::as_deref).map(|v| {
                    let v = self.redaction.header_value(name, v);
                    // Cut on a character boundary.
                    let mut end = v.len().min(HEADER_VALUE_LIMIT);
                    while !v.is_char_boundary(end) {
                        end -= 1;
                    }
                    serde_json::Value::String(v[..end].to_string())
                });
                map.insert(name.clone(), value.unwrap_or(serde_json::Value::Null));
            }
            map
        });
        // Through the URL redaction, which keeps the names (`?` added and taken off).
        let query = query.map(|q| {
            let shown = self.redaction.url(&format!("?{q}"));
            shown.trim_start_matches('?').to_string()
        });
        let line = Line {
            endpoint,
            model: model.as_deref(),
            arrival_ns,
            body,
            headers,
            query,
            seen,
        };
        self.file.write(&line);
    }

    /// The counts for `/stats`.
    pub fn stats(&self) -> RecordStats {
        let failed = self.file.failed();
        let claimed = self.claimed.load(Relaxed);
        let skipped = self.skipped.load(Relaxed);
        RecordStats {
            path: self.path.clone(),
            lines: claimed.saturating_sub(failed),
            limit: self.limit,
            skipped,
            stopped: claimed >= self.limit,
            failed,
        }
    }
}
