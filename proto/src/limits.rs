//! How much llmsurge reads of what a server sends: every limit in one place.
//!
//! The target, the gateways in front of it and a metrics endpoint are untrusted (DESIGN.md,
//! "Untrusted input"): a line without an end, a body without an end or a model id of
//! 600 MiB must cost a bounded amount of memory, and fail with a message that names the
//! limit ([`describe`]). Each limit is generous: many times what a working server sends,
//! so only a broken or hostile one ever meets it. A limit is per read (per request, per
//! stream), so a worker's memory still grows with its open streams.

/// One SSE event, its lines together (comments and unknown fields included while they
/// are buffered). The largest event a working server sends is a typed API's closing event
/// that repeats the whole answer (the Responses API's `response.completed`): 128k output
/// tokens are about 512 KiB of JSON. 4 MiB is 8 times that; a stream holds one event at a
/// time, so this bounds a stream's parser whatever the server sends.
pub const SSE_EVENT: usize = 4 << 20;

/// The token-carrying chunks of one stream. A stream keeps each chunk's arrival (8 bytes)
/// for ITL; 2 Mi chunks is 16 MiB of them, far beyond any output length a server allows
/// (128k tokens, one chunk each, is 1/16 of it). An endless stream of valid tokens ends
/// here instead of at the request timeout.
pub const STREAM_CHUNKS: usize = 2 << 20;

/// A whole (non-streamed) response body. The largest legitimate ones are embeddings of a
/// batch: 256 inputs of 3,072 dimensions as JSON floats are about 16 MiB. 64 MiB is 4 times
/// that.
pub const BODY: usize = 64 << 20;

/// An error response's body, read only for its message: the rest is not read (the
/// request fails either way, with the message found in this much).
pub const ERROR_BODY: usize = 64 << 10;

/// A server's error text kept in a request's record (and so in every report, the request
/// log and the IPC batch): longer text is cut, its length noted. Real error messages are a
/// line or two; a stack trace fits.
pub const ERROR_MESSAGE: usize = 4 << 10;

/// A response head (status line and headers), on both HTTP clients. Proxies stack
/// headers, but a head of 64 KiB is already far beyond any seen.
pub const RESPONSE_HEAD: usize = 64 << 10;

/// The model list (`GET /v1/models`). An entry is ~100 bytes of JSON: 16 MiB is over
/// 100,000 models, where a large gateway lists hundreds.
pub const MODEL_LIST: usize = 16 << 20;

/// One model id taken from the model list for every request (when `--model` is not
/// given). Ids are names or paths (PATH_MAX is 4 KiB); a longer one would be sent in every
/// request body and written into every report.
pub const MODEL_ID: usize = 4 << 10;

/// A Prometheus `/metrics` page (the server metrics scrape, the cache reset's server
/// detection, DCGM's exporter). A large vLLM deployment publishes well under 1 MiB (every
/// histogram of every model); 32 MiB leaves room for exporters of many GPUs.
pub const METRICS_PAGE: usize = 32 << 20;

/// A small JSON answer read for one number or a status (`/tokenize`'s count, a cache
/// reset's reply).
pub const SMALL_ANSWER: usize = 1 << 20;

/// A limit as people read it: `4 MiB`, `64 KiB`, `100 bytes`.
pub fn describe(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_people_write_them() {
        assert_eq!(describe(SSE_EVENT), "4 MiB");
        assert_eq!(describe(BODY), "64 MiB");
        assert_eq!(describe(ERROR_MESSAGE), "4 KiB");
        assert_eq!(describe(1 << 30), "1 GiB");
        assert_eq!(describe(1500), "1500 bytes");
    }
}
