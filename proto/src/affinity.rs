//! Router affinity (issue 39): what a request tells the router in front of the servers
//! about the conversation it belongs to. `--affinity` names the header(s) a
//! conversation's key goes in (a preset per router, or any header), `--session-token`
//! where the server hands a token out that the conversation's later turns send back, and
//! `--sticky-connections` keeps one connection per conversation.

use serde::{Deserialize, Serialize};

/// One router's headers: the conversation's key, and the parent conversation's key on a
/// sub-agent's calls (when the router has such a header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AffinityPreset {
    /// The `--affinity` value.
    pub name: &'static str,
    /// The header of the conversation's key.
    pub key_header: &'static str,
    /// The header of the parent conversation's key, sent on sub-agent calls.
    pub parent_header: Option<&'static str>,
}

/// The routers `--affinity` knows by name (docs/workloads.md cites where each header
/// name comes from).
pub const AFFINITY_PRESETS: &[AffinityPreset] = &[
    // ai-dynamo/dynamo docs/agents/session-ids.md
    AffinityPreset {
        name: "dynamo",
        key_header: "x-dynamo-session-id",
        parent_header: Some("x-dynamo-parent-session-id"),
    },
    // SGLang Model Gateway (sgl-router / smg): consistent_hashing and manual policies.
    AffinityPreset {
        name: "sglang",
        key_header: "x-smg-routing-key",
        parent_header: None,
    },
];

/// Where the server hands out a session token: a response header, or a cookie it sets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionToken {
    /// `header:NAME`: the value of response header NAME, sent back in request header NAME.
    Header(String),
    /// `cookie:NAME`: the cookie NAME a `Set-Cookie` sets, sent back as `Cookie: NAME=…`.
    Cookie(String),
}

impl SessionToken {
    /// The response header that carries the token (lowercase).
    pub fn response_header(&self) -> &str {
        match self {
            SessionToken::Header(name) => name,
            SessionToken::Cookie(_) => "set-cookie",
        }
    }

    /// What a response header `name: value` says of the token, if it is about this one:
    /// a new token, the cookie's removal (`Max-Age` of 0 or less, an `Expires` date
    /// past), or a value that may not go back in a request header as it is (a byte
    /// outside visible ASCII: a control byte, non-ASCII), refused rather than sent.
    pub fn read(&self, name: &str, value: &str) -> Option<TokenSeen> {
        if !name.eq_ignore_ascii_case(self.response_header()) {
            return None;
        }
        match self {
            SessionToken::Header(_) => {
                let v = value.trim_matches([' ', '\t']);
                if v.is_empty() {
                    return Some(TokenSeen::Cleared);
                }
                // A header value: visible ASCII, spaces and tabs inside.
                let ok = v
                    .bytes()
                    .all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic());
                Some(if ok {
                    TokenSeen::Set(v.to_string())
                } else {
                    TokenSeen::Refused
                })
            }
            SessionToken::Cookie(cookie) => {
                // `NAME=VALUE; Path=/; Max-Age=…`: the pair before the first `;`.
                let mut parts = value.split(';');
                let (n, v) = parts.next()?.split_once('=')?;
                if n.trim() != cookie {
                    return None;
                }
                if expires_now(parts) {
                    return Some(TokenSeen::Cleared);
                }
                let v = v.trim();
                // RFC 6265 §4.1.1: a cookie-value may be quoted; its octets are visible
                // ASCII but for `"` `,` `;` `\`.
                let v = v
                    .strip_prefix('"')
                    .and_then(|q| q.strip_suffix('"'))
                    .unwrap_or(v);
                let octet =
                    |b: u8| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\');
                if v.is_empty() {
                    // An empty value is how some servers remove a cookie.
                    return Some(TokenSeen::Cleared);
                }
                Some(if v.bytes().all(octet) {
                    TokenSeen::Set(v.to_string())
                } else {
                    TokenSeen::Refused
                })
            }
        }
    }

    /// The request header that sends `token` back: `(name, value)`.
    pub fn request_header(&self, token: &str) -> (&str, String) {
        match self {
            SessionToken::Header(name) => (name, token.to_string()),
            SessionToken::Cookie(cookie) => ("cookie", format!("{cookie}={token}")),
        }
    }
}

/// What a response said of a conversation's session token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSeen {
    /// A new token, sent back from the conversation's next request on.
    Set(String),
    /// The cookie removed (expired): the next request goes without it.
    Cleared,
    /// A token that may not go back in a request header as it is (control bytes,
    /// non-ASCII): not kept, counted in the report's warnings.
    Refused,
}

/// Whether a `Set-Cookie`'s attributes remove the cookie: a `Max-Age` of 0 or less, or
/// without a `Max-Age` an `Expires` date not after now (RFC 6265 §5.2.1, §5.2.2, §5.3:
/// `Max-Age` wins over `Expires`, the last of each counts, one that does not parse is
/// ignored).
fn expires_now<'a>(attributes: impl Iterator<Item = &'a str>) -> bool {
    let (mut max_age, mut expires) = (None, None);
    for attribute in attributes {
        let Some((name, value)) = attribute.split_once('=') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "max-age" => max_age = value.parse::<i64>().ok().or(max_age),
            "expires" => expires = httpdate::parse_http_date(value).ok().or(expires),
            _ => {}
        }
    }
    match (max_age, expires) {
        (Some(seconds), _) => seconds <= 0,
        (None, Some(at)) => at <= std::time::SystemTime::now(),
        (None, None) => false,
    }
}

/// A run's affinity settings (all off by default).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Affinity {
    /// `--affinity`: the header of each conversation's key (lowercase).
    pub key_header: Option<String>,
    /// `--affinity dynamo`: the header of a sub-agent's parent conversation key.
    pub parent_header: Option<String>,
    /// `--session-token`: the token a server hands out, sent back by the conversation.
    pub token: Option<SessionToken>,
    /// `--sticky-connections`: one connection per conversation, kept across its think
    /// times (HTTP/1.1 only).
    pub sticky_connections: bool,
}

impl Affinity {
    /// Whether anything is on.
    pub fn is_on(&self) -> bool {
        self.key_header.is_some() || self.token.is_some() || self.sticky_connections
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_token_is_read_from_its_header_or_cookie() {
        let set = |t: &str| Some(TokenSeen::Set(t.into()));
        let h = SessionToken::Header("x-session-token".into());
        assert_eq!(h.read("X-Session-Token", " t1 "), set("t1"));
        assert_eq!(h.read("set-cookie", "x-session-token=t1"), None);
        assert_eq!(h.request_header("t1"), ("x-session-token", "t1".into()));
        let c = SessionToken::Cookie("route".into());
        assert_eq!(c.read("Set-Cookie", "route=abc; Path=/"), set("abc"));
        assert_eq!(c.read("Set-Cookie", "route=\"abc\""), set("abc"));
        assert_eq!(c.read("set-cookie", "other=abc"), None);
        assert_eq!(c.request_header("abc"), ("cookie", "route=abc".into()));
    }

    #[test]
    fn an_expired_cookie_clears_the_token_and_a_raw_byte_is_refused() {
        let c = SessionToken::Cookie("route".into());
        let cleared = Some(TokenSeen::Cleared);
        assert_eq!(c.read("set-cookie", "route=abc; Max-Age=0"), cleared);
        assert_eq!(
            c.read("set-cookie", "route=abc; max-age=-1; Path=/"),
            cleared
        );
        assert_eq!(
            c.read(
                "set-cookie",
                "route=abc; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
            ),
            cleared
        );
        assert_eq!(c.read("set-cookie", "route=; Path=/"), cleared);
        assert_eq!(
            c.read(
                "set-cookie",
                "route=abc; Expires=Fri, 01 Jan 2100 00:00:00 GMT; Max-Age=60"
            ),
            Some(TokenSeen::Set("abc".into()))
        );
        // Max-Age wins over Expires, whichever comes first.
        assert_eq!(
            c.read(
                "set-cookie",
                "route=abc; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=60"
            ),
            Some(TokenSeen::Set("abc".into()))
        );
        assert_eq!(
            c.read(
                "set-cookie",
                "route=abc; Max-Age=soon; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
            ),
            cleared
        );
        for raw in ["r\u{e9}sum\u{e9}", "a\u{1}b", "a b", "a\\b"] {
            assert_eq!(
                c.read("set-cookie", &format!("route={raw}")),
                Some(TokenSeen::Refused),
                "{raw:?}"
            );
        }
        let h = SessionToken::Header("x-t".into());
        assert_eq!(h.read("x-t", "caf\u{e9}"), Some(TokenSeen::Refused));
        assert_eq!(h.read("x-t", "a\u{7f}"), Some(TokenSeen::Refused));
        assert_eq!(h.read("x-t", " "), Some(TokenSeen::Cleared));
    }
}
