//! What of a credential may leave the process: the one redaction every writer of llmsurge
//! uses (reports in every format, the request log, `--dry-run`, `config`, `k8s job`,
//! error messages, logs, the mock's `--record` file).
//!
//! Redaction is by default, not by a list of dangerous names: a header's value is shown
//! only when its name is one of the [`HARMLESS_HEADERS`] or was opted back in
//! (`--show-header`); a URL keeps its scheme, host, port, path and query names, while its
//! user and password, its query values (unless opted back in with `--show-query-param`)
//! and its fragment become [`REDACTED`]. Free text (an error message) has every URL in it
//! redacted so.
//!
//! Here because workers, the coordinator and the binary all write text that may hold a
//! target URL; the crate is the lowest all three share.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// What a hidden value is written as.
pub const REDACTED: &str = "<redacted>";

/// Headers whose values are shown in every output (lowercase): content negotiation,
/// the client's name, the API version of the Anthropic format, and the request-id and
/// session headers llmsurge sets (the routers' session keys of `--affinity` included).
pub const HARMLESS_HEADERS: &[&str] = &[
    "content-type",
    "accept",
    "user-agent",
    "anthropic-version",
    "x-request-id",
    "x-session-id",
    "x-dynamo-session-id",
    "x-dynamo-parent-session-id",
    "x-smg-routing-key",
];

/// Which values are opted back into outputs; everything else non-harmless is redacted.
/// The default shows no header beyond [`HARMLESS_HEADERS`] and no query value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redaction {
    /// Header names whose values are shown too (lowercase): `--show-header`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub show_headers: Vec<String>,
    /// Query parameter names whose values are shown (as typed): `--show-query-param`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub show_query_params: Vec<String>,
}

impl Redaction {
    /// A policy showing these headers (any case) and these query parameters too.
    pub fn new<H, Q>(show_headers: H, show_query_params: Q) -> Self
    where
        H: IntoIterator,
        H::Item: AsRef<str>,
        Q: IntoIterator,
        Q::Item: AsRef<str>,
    {
        let headers = show_headers
            .into_iter()
            .map(|h| h.as_ref().trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        let params = show_query_params
            .into_iter()
            .map(|q| q.as_ref().trim().to_string())
            .filter(|q| !q.is_empty())
            .collect();
        Self {
            show_headers: headers,
            show_query_params: params,
        }
    }

    /// Whether the value of header `name` may be written.
    pub fn shows_header(&self, name: &str) -> bool {
        let name = name.trim();
        HARMLESS_HEADERS
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h))
            || self
                .show_headers
                .iter()
                .any(|h| name.eq_ignore_ascii_case(h))
    }

    /// Header `name`'s value as it may be written: itself, or [`REDACTED`].
    pub fn header_value<'a>(&self, name: &str, value: &'a str) -> &'a str {
        if self.shows_header(name) {
            value
        } else {
            REDACTED
        }
    }

    /// Headers as they may be written: names kept, values through [`Self::header_value`].
    pub fn headers(&self, headers: &[(String, String)]) -> Vec<(String, String)> {
        headers
            .iter()
            .map(|(n, v)| (n.clone(), self.header_value(n, v).to_string()))
            .collect()
    }

    /// Whether the value of query parameter `name` may be written.
    pub fn shows_query_param(&self, name: &str) -> bool {
        self.show_query_params.iter().any(|q| q == name)
    }

    /// Query parameters as they may be written: names kept, values redacted unless shown.
    pub fn query_params(&self, params: &[(String, String)]) -> Vec<(String, String)> {
        params
            .iter()
            .map(|(n, v)| {
                let v = if self.shows_query_param(n) {
                    v.clone()
                } else {
                    REDACTED.to_string()
                };
                (n.clone(), v)
            })
            .collect()
    }

    /// A URL as it may be written: user and password, query values not opted in, and
    /// the fragment become [`REDACTED`]; scheme, host, port, path and query names stay.
    /// Text that is not a whole URL is redacted as far as it looks like one (a usage
    /// error quotes what was typed).
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = match url.find("://") {
            Some(i) => url.split_at(i + 3),
            None => ("", url),
        };
        let mut authority_end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
        // `user:pass` before that end, then an `@` after it: a password holding a `/`,
        // `?`, `#` or `\\` as typed (a valid URL would encode it), which the authority
        // runs on to hold; a port is digits, so `host:8000/a@b` is not read so.
        let typed_password = |authority: &str| {
            authority.split_once(':').is_some_and(|(_, after)| {
                !authority.starts_with('[') && !after.chars().all(|c| c.is_ascii_digit())
            })
        };
        if !rest[..authority_end].contains('@')
            && typed_password(&rest[..authority_end])
            && let Some(at) = rest[authority_end..].rfind('@')
        {
            let host_end = rest[authority_end + at..]
                .find(['/', '?', '#'])
                .map_or(rest.len(), |e| authority_end + at + e);
            authority_end = host_end;
        }
        let (authority, tail) = rest.split_at(authority_end);
        let mut out = String::with_capacity(url.len() + 16);
        out.push_str(scheme);
        match authority.rfind('@') {
            // Without a scheme only `user:pass@host`, as typed where a URL was asked for.
            Some(at) if !scheme.is_empty() || typed_password(&authority[..at]) => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        let (before_fragment, fragment) = match tail.find('#') {
            Some(i) => (&tail[..i], Some(&tail[i + 1..])),
            None => (tail, None),
        };
        let (path, query) = match before_fragment.find('?') {
            Some(i) => (&before_fragment[..i], Some(&before_fragment[i + 1..])),
            None => (before_fragment, None),
        };
        out.push_str(path);
        if let Some(query) = query {
            out.push('?');
            out.push_str(&self.query(query));
        }
        if let Some(fragment) = fragment {
            out.push('#');
            if !fragment.is_empty() {
                out.push_str(REDACTED);
            }
        }
        out
    }

    /// A query string (without `?`) with the values not opted in redacted.
    fn query(&self, query: &str) -> String {
        query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, value))
                    if !value.is_empty() && !self.shows_query_param(&decode(name)) =>
                {
                    Cow::Owned(format!("{name}={REDACTED}"))
                }
                _ => Cow::Borrowed(pair),
            })
            .collect::<Vec<_>>()
            .join("&")
    }

    /// Free text (an error message, a log line) with every `scheme://…` URL in it
    /// redacted by [`Self::url`]. A URL ends at white space, a quote, a bracket or `<`
    /// (how messages delimit them: `for url (…)`, `"…"`).
    /// The run's registered secrets ([`register_secret`]) are scrubbed too.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.urls(text) {
            Cow::Borrowed(t) => scrub(t),
            Cow::Owned(t) => Cow::Owned(scrub(&t).into_owned()),
        }
    }

    /// `text` with its URLs redacted (the part of [`Self::text`] that needs a policy).
    fn urls<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !text.contains("://") {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len() + 16);
        let mut rest = text;
        while let Some(i) = rest.find("://") {
            // The scheme: the letters, digits, `+`, `-` and `.` just before `://`.
            let start = rest[..i]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
                .map_or(0, |p| p + 1);
            let end = rest[i..]
                .find(|c: char| c.is_whitespace() || "\"'`<>()[]{}".contains(c) || c.is_control())
                .map_or(rest.len(), |p| i + p);
            out.push_str(&rest[..start]);
            if start == i {
                // No scheme: not a URL, only a `://`.
                out.push_str(&rest[i..end]);
            } else {
                out.push_str(&self.url(&rest[start..end]));
            }
            rest = &rest[end..];
        }
        out.push_str(rest);
        Cow::Owned(out)
    }
}

/// The run's own secrets (API key, hidden header values, URL credentials), registered
/// once by each process that holds them and scrubbed from any text a writer writes,
/// server text included: a gateway that echoes the key in its 401 gets `<redacted>`.
static SECRETS: std::sync::RwLock<Vec<String>> = std::sync::RwLock::new(Vec::new());

/// Secrets shorter than this are not scrubbed from free text: a short value (a URL's
/// user `bench`) would take words out of messages and field names out of a report
/// (`benchmark`). Header and URL redaction still hides them where they are written.
pub const MIN_SCRUBBED_SECRET: usize = 8;

/// A secret without a letter is scrubbed only from this length on: a shorter one (a
/// date, a number) could cut numbers in a JSON report; a random token of digits this
/// long is no number a report holds.
pub const MIN_SCRUBBED_DIGITS: usize = 16;

/// Adds `value` to the secrets scrubbed from every text this process writes. A value
/// shorter than [`MIN_SCRUBBED_SECRET`], or without a letter and shorter than
/// [`MIN_SCRUBBED_DIGITS`], is left to header and URL redaction.
pub fn register_secret(value: &str) {
    let value = value.trim();
    let letter = value.chars().any(|c| c.is_ascii_alphabetic());
    if value.len() < MIN_SCRUBBED_SECRET || (!letter && value.len() < MIN_SCRUBBED_DIGITS) {
        return;
    }
    let mut secrets = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    if !secrets.iter().any(|s| s == value) {
        secrets.push(value.to_string());
        // Longest first: a secret that contains another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `text` with every registered secret replaced by [`REDACTED`].
pub fn scrub(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    if secrets.is_empty() || !secrets.iter().any(|s| text.contains(s.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for s in secrets.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), REDACTED);
        }
    }
    Cow::Owned(out)
}

/// Bytes a writer is about to write with every registered secret replaced: text files
/// (reports, logs) are scrubbed; bytes that are not UTF-8 (a PNG) pass as they are.
pub fn scrub_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    match std::str::from_utf8(bytes) {
        Ok(text) => match scrub(text) {
            Cow::Borrowed(_) => Cow::Borrowed(bytes),
            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
        },
        Err(_) => Cow::Borrowed(bytes),
    }
}

/// Whether `name` (a flag, a parameter, an environment variable or a body field, any
/// case) names a credential: its last word (split at `-`, `_`, `.`) is key, token, secret,
/// password or passwd, or ends in apikey, token, secret or password (`apiKey`,
/// `accessToken`). `--api-key`, `hf_token`, `AWS_SECRET_ACCESS_KEY` do; `--tokenizer`,
/// `max_tokens`, `--ssl-keyfile`, `--api-key-header` do not.
pub fn is_credential_name(name: &str) -> bool {
    let last = name
        .trim_start_matches('-')
        .rsplit(['-', '_', '.'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    matches!(
        last.as_str(),
        "key" | "token" | "secret" | "password" | "passwd"
    ) || ["apikey", "token", "secret", "password"]
        .iter()
        .any(|end| last.ends_with(end))
}

/// Redacts, in place, what a JSON document (a request body's extra fields, a parameter
/// file's entry, `--backend-kwargs`) may carry of a credential: the value of every field
/// named like one ([`is_credential_name`]), at any depth, and the values of a `headers`
/// object that `redaction` does not show. Returns the text of each value hidden (to
/// [`register_secret`]).
pub fn json_credentials(value: &mut serde_json::Value, redaction: &Redaction) -> Vec<String> {
    use serde_json::Value;
    let mut hidden = Vec::new();
    let hide = |v: &mut Value, hidden: &mut Vec<String>| {
        match &mut *v {
            Value::String(s) => hidden.push(std::mem::take(s)),
            Value::Null => return,
            other => hidden.push(other.to_string()),
        }
        *v = Value::String(REDACTED.to_string());
    };
    match value {
        Value::Object(map) => {
            for (name, v) in map.iter_mut() {
                if is_credential_name(name) && !v.is_object() {
                    hide(v, &mut hidden);
                } else if name.eq_ignore_ascii_case("headers")
                    && let Value::Object(headers) = v
                {
                    for (header, hv) in headers.iter_mut() {
                        if !redaction.shows_header(header) {
                            hide(hv, &mut hidden);
                        }
                    }
                } else {
                    hidden.extend(json_credentials(v, redaction));
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                hidden.extend(json_credentials(item, redaction));
            }
        }
        _ => {}
    }
    hidden
}

/// A query name with its `%XX` escapes and `+` decoded (names are compared decoded).
fn decode(name: &str) -> Cow<'_, str> {
    percent_decode(name, true)
}

/// `text` with its `%XX` escapes decoded, and `+` as a space when `plus_is_space` (a
/// query's form encoding; not in a URL's user or password).
pub fn percent_decode(text: &str, plus_is_space: bool) -> Cow<'_, str> {
    if !(text.contains('%') || (plus_is_space && text.contains('+'))) {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
                continue;
            }
            (b'+', _) if plus_is_space => out.push(b' '),
            (b, _) => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_secrets_leave_any_text() {
        register_secret("k");
        register_secret("12345678");
        register_secret("98765432109876543210");
        register_secret("sk-marker-1234");
        let echoed = "401: Incorrect API key provided: sk-marker-1234 (Bearer sk-marker-1234)";
        assert_eq!(
            scrub(echoed),
            "401: Incorrect API key provided: <redacted> (Bearer <redacted>)"
        );
        assert_eq!(
            Redaction::default().text("key sk-marker-1234 at http://u:p@h/x"),
            "key <redacted> at http://<redacted>@h/x"
        );
        // Too short, or a number: scrubbing it would mangle text and numbers.
        assert_eq!(scrub("keep 1234567890"), "keep 1234567890");
        assert_eq!(scrub("key 98765432109876543210"), "key <redacted>");
        assert_eq!(
            scrub_bytes(b"\xff sk-marker-1234").as_ref(),
            b"\xff sk-marker-1234"
        );
        assert_eq!(
            scrub_bytes("x sk-marker-1234".as_bytes()).as_ref(),
            b"x <redacted>"
        );
    }

    #[test]
    fn credential_names_are_known_by_their_last_word() {
        for yes in [
            "--api-key",
            "api_key",
            "hf_token",
            "HF_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "--db-password",
            "clientSecret",
            "accessToken",
            "apiKey",
            "token",
        ] {
            assert!(is_credential_name(yes), "{yes}");
        }
        for no in [
            "--tokenizer",
            "max_tokens",
            "--ssl-keyfile",
            "--api-key-header",
            "max_num_batched_tokens",
            "monkey_patch",
            "temperature",
        ] {
            assert!(!is_credential_name(no), "{no}");
        }
    }

    #[test]
    fn json_credentials_are_hidden_at_any_depth() {
        let mut v = serde_json::json!({
            "extra_body": {"api_key": "k1", "nested": [{"Token": "k2"}], "temperature": 0},
            "headers": {"X-Gw": "k3", "Content-Type": "text/plain"},
            "max_tokens": 5
        });
        let hidden = json_credentials(&mut v, &Redaction::default());
        assert_eq!(hidden, ["k1", "k2", "k3"]);
        assert_eq!(
            v,
            serde_json::json!({
                "extra_body": {"api_key": REDACTED, "nested": [{"Token": REDACTED}], "temperature": 0},
                "headers": {"X-Gw": REDACTED, "Content-Type": "text/plain"},
                "max_tokens": 5
            })
        );
    }

    #[test]
    fn headers_are_shown_only_when_harmless_or_opted_in() {
        let r = Redaction::default();
        assert_eq!(r.header_value("Content-Type", "text/plain"), "text/plain");
        assert_eq!(r.header_value("x-session-id", "s-1"), "s-1");
        for secret in [
            "Authorization",
            "X-Gateway-Key",
            "Ocp-Apim-Subscription-Key",
            "x-trace",
        ] {
            assert_eq!(r.header_value(secret, "v"), REDACTED, "{secret}");
        }
        let r = Redaction::new(["X-Trace"], Vec::<String>::new());
        assert_eq!(r.header_value("x-trace", "on"), "on");
        assert_eq!(r.header_value("x-gateway-key", "k"), REDACTED);
    }

    #[test]
    fn urls_keep_where_they_point_and_lose_what_they_carry() {
        let r = Redaction::default();
        assert_eq!(
            r.url(
                "https://user:sk-1@gw.example:8443/openai/v1?api-version=2024-02-01&key=sk-2#frag"
            ),
            "https://<redacted>@gw.example:8443/openai/v1?api-version=<redacted>&key=<redacted>#<redacted>"
        );
        assert_eq!(r.url("http://127.0.0.1:8000"), "http://127.0.0.1:8000");
        assert_eq!(r.url("http://h/p?flag&x="), "http://h/p?flag&x=");
        let r = Redaction::new(Vec::<String>::new(), ["api-version"]);
        assert_eq!(
            r.url("http://h/?api-version=2024&key=s"),
            "http://h/?api-version=2024&key=<redacted>"
        );
        // Names compare decoded.
        assert_eq!(
            r.url("http://h/?api%2Dversion=1"),
            "http://h/?api%2Dversion=1"
        );
        // What a usage error quotes: not a valid URL, still no password.
        assert_eq!(r.url("http://u:p@ss@h:x"), "http://<redacted>@h:x");
        assert_eq!(r.url("no url at all"), "no url at all");
        // A password as typed, holding what ends an authority, or with no scheme before.
        for typed in [
            "http://u:pw/SECRET@host/metrics",
            "http://u:pw?SECRET@host/metrics",
            "http://u:pw#SECRET@host/metrics",
            "http://u:pw\\SECRET@host/metrics",
            "http://u:pw SECRET@host/metrics",
            "http://u:pw\"SECRET@host/metrics",
        ] {
            assert_eq!(r.url(typed), "http://<redacted>@host/metrics", "{typed}");
        }
        assert_eq!(r.url("u:pw-SECRET@host:8000"), "<redacted>@host:8000");
        // Where a URL points stays: an `@` in a path after a port or a bare host.
        assert_eq!(r.url("http://h:8000/users/a@b"), "http://h:8000/users/a@b");
        assert_eq!(r.url("http://h/users/a@b"), "http://h/users/a@b");
        assert_eq!(r.url("http://[::1]:8000/a@b"), "http://[::1]:8000/a@b");
        assert_eq!(r.url("org/model@rev"), "org/model@rev");
    }

    #[test]
    fn text_redacts_every_url_in_it_and_is_idempotent() {
        let r = Redaction::default();
        let msg = "error sending request for url (http://u:pw@127.0.0.1:9/v1/chat/completions?key=sk-9): connection refused; see \"https://x.example/?t=abc\"";
        let once = r.text(msg).into_owned();
        assert_eq!(
            once,
            "error sending request for url (http://<redacted>@127.0.0.1:9/v1/chat/completions?key=<redacted>): connection refused; see \"https://x.example/?t=<redacted>\""
        );
        assert_eq!(r.text(&once), once);
        assert!(matches!(r.text("no urls here"), Cow::Borrowed(_)));
        assert_eq!(r.text("a :// b"), "a :// b");
    }

    #[test]
    fn params_keep_their_names() {
        let r = Redaction::new(Vec::<String>::new(), ["api-version"]);
        let params = [
            ("api-version".to_string(), "2024".to_string()),
            ("code".to_string(), "sk".to_string()),
        ];
        assert_eq!(
            r.query_params(&params),
            [
                ("api-version".to_string(), "2024".to_string()),
                ("code".to_string(), REDACTED.to_string())
            ]
        );
    }
}
