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

    /// The token a response header `name: value` carries, if it is this one.
    pub fn read(&self, name: &str, value: &str) -> Option<String> {
        if !name.eq_ignore_ascii_case(self.response_header()) {
            return None;
        }
        match self {
            SessionToken::Header(_) => Some(value.trim().to_string()),
            SessionToken::Cookie(cookie) => {
                // `NAME=VALUE; Path=/; …`: the pair before the first `;`.
                let pair = value.split(';').next()?.trim();
                let (n, v) = pair.split_once('=')?;
                (n.trim() == cookie).then(|| v.trim().to_string())
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
        let h = SessionToken::Header("x-session-token".into());
        assert_eq!(h.read("X-Session-Token", " t1 "), Some("t1".into()));
        assert_eq!(h.read("set-cookie", "x-session-token=t1"), None);
        assert_eq!(h.request_header("t1"), ("x-session-token", "t1".into()));
        let c = SessionToken::Cookie("route".into());
        assert_eq!(
            c.read("Set-Cookie", "route=abc; Path=/"),
            Some("abc".into())
        );
        assert_eq!(c.read("set-cookie", "other=abc"), None);
        assert_eq!(c.request_header("abc"), ("cookie", "route=abc".into()));
    }
}
