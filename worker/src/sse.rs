//! An incremental Server-Sent Events parser.
//!
//! Bytes arrive in arbitrary pieces; events end at a blank line. The parser keeps only the
//! unfinished tail between pushes and hands each complete event's `data` to a callback,
//! so the caller can timestamp every event with the arrival of the piece that completed
//! it. Lines may end in `\n`, `\r\n` or `\r` (the SSE grammar allows all three).
//!
//! This runs for every token of every stream, so the common shape (`data: X\n\n`, whole
//! inside one piece, as every OpenAI-compatible server sends it) is handed over straight
//! from the piece without copying; anything else takes the general line-by-line path.
//!
//! What it buffers is bounded: an event (its unfinished line and its data together) over
//! the limit ([`llmsurge_proto::limits::SSE_EVENT`]) stops the parser, which then says so
//! ([`SseParser::too_large`]); a line without an end never grows it past the limit.

use llmsurge_proto::limits;

/// Buffers above this are given back after their event, so one large event does not
/// hold its memory for the rest of the stream.
const KEEP_CAPACITY: usize = 64 << 10;

/// Incremental SSE parser state.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of an unfinished line.
    line: Vec<u8>,
    /// The `data` of the event being assembled.
    data: Vec<u8>,
    /// Whether the current event has any `data` field (an empty one counts).
    has_data: bool,
    /// The previous piece ended in `\r`: a following `\n` belongs to it.
    pending_cr: bool,
    /// The most bytes an event may buffer.
    limit: usize,
    /// An event grew over the limit: the parser stopped there.
    too_large: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_limit(limits::SSE_EVENT)
    }
}

impl SseParser {
    /// A fresh parser with the SSE event limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh parser whose events may buffer at most `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            pending_cr: false,
            limit,
            too_large: false,
        }
    }

    /// The limit an event grew over, once one did (the parser took nothing more since).
    pub fn too_large(&self) -> Option<usize> {
        self.too_large.then_some(self.limit)
    }

    /// Whether `more` bytes still fit the event being buffered; marks the parser stopped
    /// when not.
    fn fits(&mut self, more: usize) -> bool {
        if self.line.len() + self.data.len() + more > self.limit {
            self.too_large = true;
        }
        !self.too_large
    }

    /// Feeds a piece of the stream; calls `on_data` with the data of every event it
    /// completes. Stops early (returning `false`) when the callback returns `false`, or
    /// when an event grows over the limit ([`Self::too_large`]; every later push returns
    /// `false` at once).
    pub fn push(&mut self, mut piece: &[u8], mut on_data: impl FnMut(&[u8]) -> bool) -> bool {
        if self.too_large {
            return false;
        }
        // An empty piece (a zero-length HTTP/2 DATA frame) says nothing of what follows
        // the `\r`: only a non-empty one settles whether its first byte is the `\n`.
        if self.pending_cr && !piece.is_empty() {
            self.pending_cr = false;
            if let Some(rest) = piece.strip_prefix(b"\n") {
                piece = rest;
            }
        }
        while !piece.is_empty() {
            if self.line.is_empty()
                && !self.has_data
                && let Some((data, used)) = whole_data_event(piece)
            {
                if !on_data(data) {
                    return false;
                }
                piece = &piece[used..];
                continue;
            }
            let Some(end) = memchr::memchr2(b'\n', b'\r', piece) else {
                if !self.fits(piece.len()) {
                    return false;
                }
                self.line.extend_from_slice(piece);
                break;
            };
            let terminator = piece[end];
            let mut next = end + 1;
            if terminator == b'\r' {
                match piece.get(next) {
                    Some(b'\n') => next += 1,
                    None => self.pending_cr = true,
                    Some(_) => {}
                }
            }
            let keep_going = if self.line.is_empty() {
                self.process_line(&piece[..end], &mut on_data)
            } else {
                if !self.fits(end) {
                    return false;
                }
                self.line.extend_from_slice(&piece[..end]);
                let line = std::mem::take(&mut self.line);
                let go = self.process_line(&line, &mut on_data);
                if line.capacity() <= KEEP_CAPACITY {
                    self.line = line;
                    self.line.clear();
                }
                go
            };
            if !keep_going {
                return false;
            }
            piece = &piece[next..];
        }
        true
    }

    /// Whether bytes of an unfinished event are buffered (the stream ended mid-event).
    pub fn has_partial_event(&self) -> bool {
        !self.line.is_empty() || self.has_data
    }

    fn process_line(&mut self, line: &[u8], on_data: &mut impl FnMut(&[u8]) -> bool) -> bool {
        if line.is_empty() {
            if !self.has_data {
                return true;
            }
            self.has_data = false;
            let go = on_data(&self.data);
            self.data.clear();
            if self.data.capacity() > KEEP_CAPACITY {
                self.data = Vec::new();
            }
            return go;
        }
        if line[0] == b':' {
            return true; // comment
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        if field == b"data" {
            // Data lines add up: the event's data may not outgrow the limit either.
            if self.data.len() + value.len() + 1 > self.limit {
                self.too_large = true;
                return false;
            }
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        // `event`, `id` and `retry` carry nothing an OpenAI client needs.
        true
    }
}

/// A complete single-line event at the start of `piece`, `data:[ ]X\n\n`: its data and
/// the bytes it spans. `None` for any other shape (the general path parses those).
fn whole_data_event(piece: &[u8]) -> Option<(&[u8], usize)> {
    // Typed APIs (Responses, Anthropic) name each event on an `event:` line before its
    // data; the name is in the data's `type` too, so the line is skipped here.
    if piece.starts_with(b"event:") {
        let end = memchr::memchr2(b'\n', b'\r', piece)?;
        if piece[end] != b'\n' || piece.get(end + 1) == Some(&b'\n') {
            return None;
        }
        let (data, used) = data_line(&piece[end + 1..])?;
        return Some((data, end + 1 + used));
    }
    data_line(piece)
}

/// `data: X\n\n` at the start of `piece`.
fn data_line(piece: &[u8]) -> Option<(&[u8], usize)> {
    let rest = piece.strip_prefix(b"data:")?;
    let start = 5 + usize::from(rest.first() == Some(&b' '));
    let end = start + memchr::memchr2(b'\n', b'\r', piece.get(start..)?)?;
    (piece[end] == b'\n' && piece.get(end + 1) == Some(&b'\n'))
        .then(|| (&piece[start..end], end + 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(input: &[u8], size: usize) -> Vec<String> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for piece in input.chunks(size) {
            p.push(piece, |d| {
                out.push(String::from_utf8_lossy(d).into_owned());
                true
            });
        }
        out
    }

    #[test]
    fn events_survive_any_split() {
        let input = b": keep-alive\n\ndata: {\"a\":1}\n\nevent: x\ndata: two\ndata: lines\n\r\ndata:[DONE]\r\n\r\n";
        for size in 1..input.len() {
            assert_eq!(
                parse_in_pieces(input, size),
                vec!["{\"a\":1}", "two\nlines", "[DONE]"],
                "piece size {size}"
            );
        }
    }

    #[test]
    fn the_fast_path_agrees_with_the_general_one() {
        // Shapes near the fast path's edges: empty data, no space, two spaces, a field
        // after data, CRLF, a comment first, and an event cut right after its data line.
        let input = b"data:\n\ndata:x\n\ndata:  two\n\ndata: a\nid: 1\n\ndata: b\r\n\r\n: c\ndata: d\n\ndata: e\n";
        let expected = vec!["", "x", " two", "a", "b", "d"];
        for size in 1..=input.len() {
            assert_eq!(parse_in_pieces(input, size), expected, "piece size {size}");
        }
        let mut p = SseParser::new();
        p.push(input, |_| true);
        assert!(p.has_partial_event(), "`data: e` awaits its blank line");
    }

    #[test]
    fn named_events_take_the_fast_path_and_agree_with_the_general_one() {
        // Typed APIs put `event:` first; edges: an event line alone, CR endings, an event
        // line then two data lines, and one cut after its data.
        let input = b"event: a\ndata: 1\n\nevent: b\n\nevent: c\r\ndata: 2\r\n\r\nevent: d\ndata: 3\ndata: 4\n\nevent: e\ndata: 5\n";
        let expected = vec!["1", "2", "3\n4"];
        for size in 1..=input.len() {
            assert_eq!(parse_in_pieces(input, size), expected, "piece size {size}");
        }
        assert_eq!(
            whole_data_event(b"event: x\ndata: y\n\n"),
            Some((&b"y"[..], 18))
        );
    }

    #[test]
    fn bare_carriage_returns_end_lines() {
        assert_eq!(
            parse_in_pieces(b"data: a\r\rdata: b\r\r", 1),
            vec!["a", "b"]
        );
        assert_eq!(
            parse_in_pieces(b"data: a\r\rdata: b\r\r", 100),
            vec!["a", "b"]
        );
    }

    #[test]
    fn an_unfinished_event_is_reported() {
        let mut p = SseParser::new();
        p.push(b"data: {\"cut", |_| true);
        assert!(p.has_partial_event());
        let mut q = SseParser::new();
        q.push(b"data: x\n\n", |_| true);
        assert!(!q.has_partial_event());
    }

    #[test]
    fn the_callback_can_stop_parsing() {
        let mut p = SseParser::new();
        let mut n = 0;
        let finished = p.push(b"data: 1\n\ndata: 2\n\n", |_| {
            n += 1;
            false
        });
        assert!(!finished);
        assert_eq!(n, 1);
    }

    #[test]
    fn an_empty_piece_between_cr_and_lf_does_not_end_the_event() {
        let mut p = SseParser::new();
        let mut events = Vec::new();
        for piece in [&b"data: a\r"[..], b"", b"\ndata: b\r\n\r\n"] {
            p.push(piece, |d| {
                events.push(d.to_vec());
                true
            });
        }
        assert_eq!(events, [b"a\nb".to_vec()]);
    }

    #[test]
    fn an_event_over_the_limit_stops_the_parser_however_it_grows() {
        // A line without an end, in small pieces: buffered up to the limit, no further.
        let mut p = SseParser::with_limit(100);
        let mut events = 0;
        let mut pushed = 0;
        while p.push(b"data: xxxxxxxxxxxxxxxx", |_| {
            events += 1;
            true
        }) {
            pushed += 1;
            assert!(pushed < 100, "the parser never stopped");
        }
        assert_eq!(p.too_large(), Some(100));
        assert!(p.line.len() <= 100, "{} bytes buffered", p.line.len());
        assert!(!p.push(b"\n\n", |_| true), "a stopped parser stays stopped");
        assert_eq!(events, 0);
        // Many short data lines of one event add up the same way.
        let mut p = SseParser::with_limit(100);
        let lines = b"data: 0123456789\n".repeat(20);
        assert!(!p.push(&lines, |_| true));
        assert_eq!(p.too_large(), Some(100));
        // Events under the limit pass, however many come.
        let mut p = SseParser::with_limit(100);
        let mut n = 0;
        let event = b"data: 0123456789\ndata: 0123456789\n\n".repeat(50);
        for piece in event.chunks(7) {
            assert!(p.push(piece, |_| {
                n += 1;
                true
            }));
        }
        assert_eq!((n, p.too_large()), (50, None));
    }

    mod properties {
        use super::super::SseParser;
        use proptest::prelude::*;

        /// One event as a server might write it: data lines (no line breaks inside),
        /// optional comment and `id` lines, one line ending for the whole event.
        #[derive(Clone, Debug)]
        struct Event {
            data: Vec<String>,
            comment: bool,
            id: bool,
            space: bool,
            eol: &'static str,
        }

        impl Event {
            fn write(&self, out: &mut Vec<u8>) {
                let eol = self.eol.as_bytes();
                if self.comment {
                    out.extend_from_slice(b": keep-alive");
                    out.extend_from_slice(eol);
                }
                for line in &self.data {
                    out.extend_from_slice(if self.space { b"data: " } else { b"data:" });
                    out.extend_from_slice(line.as_bytes());
                    out.extend_from_slice(eol);
                }
                if self.id {
                    out.extend_from_slice(b"id: 7");
                    out.extend_from_slice(eol);
                }
                out.extend_from_slice(eol);
            }

            fn expected(&self) -> String {
                self.data.join("\n")
            }
        }

        fn event() -> impl Strategy<Value = Event> {
            // Data values avoid a leading space (the one after `data:` is stripped) and
            // line breaks (which end the line).
            let line = "[a-zA-Z0-9{}\":,\\[\\]]{0,24}";
            (
                prop::collection::vec(line, 1..4),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                prop::sample::select(vec!["\n", "\r\n", "\r"]),
            )
                .prop_map(|(data, comment, id, space, eol)| Event {
                    data,
                    comment,
                    id,
                    space,
                    eol,
                })
        }

        fn parse(pieces: &[&[u8]]) -> Vec<String> {
            let mut p = SseParser::new();
            let mut out = Vec::new();
            for piece in pieces {
                p.push(piece, |d| {
                    out.push(String::from_utf8_lossy(d).into_owned());
                    true
                });
            }
            assert!(!p.has_partial_event(), "every event was complete");
            out
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// The events found never depend on where the byte stream was cut.
            #[test]
            fn sse_events_do_not_depend_on_chunking(
                events in prop::collection::vec(event(), 0..8),
                cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
            ) {
                let mut wire = Vec::new();
                for e in &events {
                    e.write(&mut wire);
                }
                let expected: Vec<String> = events.iter().map(Event::expected).collect();
                let mut at: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
                at.sort_unstable();
                let mut pieces = Vec::new();
                let mut from = 0;
                for cut in at {
                    pieces.push(&wire[from..cut]);
                    from = cut;
                }
                pieces.push(&wire[from..]);
                prop_assert_eq!(parse(&[&wire]), expected.clone());
                prop_assert_eq!(parse(&pieces), expected);
            }
        }
    }
}
