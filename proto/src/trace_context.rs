//! W3C trace context of the requests (issue 39): every request carries a `traceparent`
//! whose ids the request log and the `--outputs otlp` export repeat, so the client's
//! spans join the server's (vLLM and gateways emit OpenTelemetry spans).
//!
//! The ids are derived, never drawn: from the benchmark's seed and what the request is
//! (a session's turn, or a request on its own), so the worker that sends a request and
//! the report that writes it compute the same ids without either telling the other, and
//! the same `--random-seed` gives the same ids whatever `--workers` is. One trace per
//! session or agent trace (its turns or calls are its spans, under a root span the
//! export writes for the session itself); one trace per request outside sessions.

use crate::seed::derive_seed;

/// The header's name.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// Length of a `traceparent` value: `00-<32 hex>-<16 hex>-01`.
pub const TRACEPARENT_LEN: usize = 55;

/// A request's trace id and its own span id (never zero, as W3C asks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceIds {
    /// The trace: the session's, or the request's own.
    pub trace: u128,
    /// The request's span.
    pub span: u64,
}

impl TraceIds {
    /// The ids of the request of `slot` under the benchmark seed `seed`; `session` is
    /// its session's index and its turn (an agent trace's call) when it has one.
    pub fn of(seed: u64, slot: u64, session: Option<(u64, u32)>) -> Self {
        match session {
            Some((id, turn)) => {
                let trace = session_trace(seed, id);
                TraceIds {
                    trace,
                    span: turn_span(trace, turn),
                }
            }
            None => TraceIds {
                trace: trace_id(seed, "trace-request", slot),
                span: nonzero(derive_seed(seed, "span-request", slot)),
            },
        }
    }

    /// The ids of the request `r` recorded (see [`TraceIds::of`]).
    pub fn of_record(seed: u64, r: &crate::RequestRecord) -> Self {
        Self::of(seed, r.slot, r.session.map(|s| (s.id, s.turn)))
    }

    /// The `traceparent` value (sampled), written into `buf` without allocating.
    pub fn traceparent<'a>(&self, buf: &'a mut [u8; TRACEPARENT_LEN]) -> &'a str {
        buf[..3].copy_from_slice(b"00-");
        hex(&mut buf[3..35], self.trace);
        buf[35] = b'-';
        hex(&mut buf[36..52], u128::from(self.span));
        buf[52..].copy_from_slice(b"-01");
        // Only ASCII was written.
        std::str::from_utf8(buf).unwrap_or_default()
    }

    /// The trace id as OTLP JSON and W3C write it: 32 lowercase hex digits.
    pub fn trace_hex(&self) -> String {
        format!("{:032x}", self.trace)
    }

    /// The span id as OTLP JSON and W3C write it: 16 lowercase hex digits.
    pub fn span_hex(&self) -> String {
        span_hex(self.span)
    }
}

/// A span id as 16 lowercase hex digits.
pub fn span_hex(span: u64) -> String {
    format!("{span:016x}")
}

/// The trace of session `id` (its index in the schedule).
pub fn session_trace(seed: u64, id: u64) -> u128 {
    trace_id(seed, "trace-session", id)
}

/// The span of turn `turn` of the session whose trace is `trace`.
pub fn turn_span(trace: u128, turn: u32) -> u64 {
    nonzero(derive_seed(fold(trace), "span-turn", u64::from(turn)))
}

/// The root span of a session's trace: the session itself, parent of its turns' spans
/// (the export writes it; no request carries it).
pub fn root_span(trace: u128) -> u64 {
    nonzero(derive_seed(fold(trace), "span-root", 0))
}

fn trace_id(seed: u64, stream: &str, index: u64) -> u128 {
    let hi = derive_seed(seed, stream, index);
    let lo = derive_seed(hi, stream, index);
    ((u128::from(hi) << 64) | u128::from(lo)).max(1)
}

fn fold(trace: u128) -> u64 {
    (trace >> 64) as u64 ^ trace as u64
}

fn nonzero(span: u64) -> u64 {
    span.max(1)
}

/// Writes `v`'s low `out.len()` hex digits, most significant first.
fn hex(out: &mut [u8], v: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let n = out.len();
    for (i, b) in out.iter_mut().enumerate() {
        let shift = 4 * (n - 1 - i);
        *b = DIGITS[((v >> shift) & 0xf) as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_w3c_and_says_the_ids_the_report_writes() {
        let ids = TraceIds::of(42, 7, Some((3, 1)));
        let mut buf = [0u8; TRACEPARENT_LEN];
        let header = ids.traceparent(&mut buf).to_string();
        let parts: Vec<&str> = header.split('-').collect();
        assert_eq!(parts.len(), 4, "{header}");
        assert_eq!(parts[0], "00");
        assert_eq!(parts[1], ids.trace_hex());
        assert_eq!(parts[2], ids.span_hex());
        assert_eq!(parts[3], "01");
        assert!(
            header
                .bytes()
                .all(|b| b == b'-' || b.is_ascii_digit() || b.is_ascii_lowercase())
        );
    }

    #[test]
    fn a_session_is_one_trace_and_a_request_alone_its_own() {
        let turn = |slot, turn| TraceIds::of(9, slot, Some((5, turn)));
        // The turns of a session share its trace whatever their slots; spans differ.
        assert_eq!(turn(1, 0).trace, turn(40, 1).trace);
        assert_ne!(turn(1, 0).span, turn(40, 1).span);
        // The slot does not matter within a session (the worker count moves slots).
        assert_eq!(turn(1, 0), turn(2, 0));
        assert_ne!(TraceIds::of(9, 1, Some((6, 0))).trace, turn(1, 0).trace);
        let alone = |slot| TraceIds::of(9, slot, None);
        assert_ne!(alone(1).trace, alone(2).trace);
        assert_ne!(alone(1).span, alone(2).span);
        // Another seed (another benchmark), other ids.
        assert_ne!(TraceIds::of(10, 1, None), alone(1));
        let trace = turn(1, 0).trace;
        assert_ne!(root_span(trace), turn(1, 0).span);
    }
}
