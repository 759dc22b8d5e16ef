//! Router affinity in the worker (issue 39): each conversation (a session, an agent
//! trace's main agent, each of its sub-agents) is known by its key, the session id its
//! requests carry. Per conversation this keeps what the router needs to see again on
//! its later requests: the parent conversation's key (a sub-agent's), the session token
//! the server handed out, and with `--sticky-connections` its own connection pool.
//! A session's conversations are opened when it starts and closed when it ends, so
//! the books hold the conversations under way only.

use crate::http1::Pool;
use llmsurge_proto::affinity::{Affinity, SessionToken, TokenSeen};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What is kept of one conversation.
#[derive(Debug, Default)]
struct Conversation {
    parent: Option<Arc<str>>,
    token: Option<String>,
    /// `--sticky-connections`: the conversation's own idle connection(s).
    pool: Option<Pool>,
}

/// The conversations under way in one worker, and the run's affinity settings.
#[derive(Debug, Default)]
pub struct Conversations {
    cfg: Affinity,
    open: Mutex<HashMap<Arc<str>, Conversation>>,
}

impl Conversations {
    /// The books of a run with `cfg` (header names already validated and lowercase).
    pub fn new(cfg: &Affinity) -> Self {
        Self {
            cfg: cfg.clone(),
            open: Mutex::default(),
        }
    }

    fn books(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Conversation>> {
        // A poisoned lock only means another thread panicked mid-update: the map holds.
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether any affinity setting is on.
    pub fn is_on(&self) -> bool {
        self.cfg.is_on()
    }

    /// Whether a response must be read knowing its conversation (a token to keep, a
    /// connection to keep): the pacer thread then leaves the send to the runtime.
    pub fn needs_runtime(&self) -> bool {
        self.cfg.token.is_some() || self.cfg.sticky_connections
    }

    /// `--sticky-connections`.
    pub fn sticky(&self) -> bool {
        self.cfg.sticky_connections
    }

    /// `--session-token`.
    pub fn token(&self) -> Option<&SessionToken> {
        self.cfg.token.as_ref()
    }

    /// Opens conversation `key`, a sub-agent of `parent` when given.
    pub fn open(&self, key: &Arc<str>, parent: Option<&Arc<str>>) {
        if !self.cfg.is_on() {
            return;
        }
        let mut books = self.books();
        let c = books.entry(Arc::clone(key)).or_default();
        if let Some(p) = parent {
            c.parent = Some(Arc::clone(p));
        }
    }

    /// Closes conversation `key`: its token is forgotten, its connection closed.
    pub fn close(&self, key: &str) {
        if !self.cfg.is_on() {
            return;
        }
        let gone = self.books().remove(key);
        // Closed outside the lock: each close is a syscall.
        drop(gone);
    }

    /// The affinity headers of a request of conversation `key`: its key, its parent's
    /// (a sub-agent's, when the router has such a header) and the token the server
    /// handed the conversation. Values are checked by the caller.
    pub fn headers(&self, key: Option<&str>) -> Vec<(&str, String)> {
        let Some(key) = key else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(name) = &self.cfg.key_header {
            out.push((name.as_str(), key.to_string()));
        }
        if self.cfg.parent_header.is_none() && self.cfg.token.is_none() {
            return out;
        }
        let books = self.books();
        let Some(c) = books.get(key) else {
            return out;
        };
        if let (Some(name), Some(parent)) = (&self.cfg.parent_header, &c.parent) {
            out.push((name.as_str(), parent.to_string()));
        }
        if let (Some(t), Some(token)) = (&self.cfg.token, &c.token) {
            out.push(t.request_header(token));
        }
        out
    }

    /// Keeps what a response of conversation `key` said of its token (the latest
    /// wins: a new one, or none once the cookie expired); `false` when the token was
    /// refused (it is then not kept, and the last good one is forgotten too: the
    /// server meant to replace it).
    pub fn keep_token(&self, key: &str, seen: TokenSeen) -> bool {
        let (token, kept) = match seen {
            TokenSeen::Set(t) => (Some(t), true),
            TokenSeen::Cleared => (None, true),
            TokenSeen::Refused => (None, false),
        };
        if let Some(c) = self.books().get_mut(key) {
            c.token = token;
        }
        kept
    }

    /// `--sticky-connections`: conversation `key`'s own pool (made on its first
    /// request); `None` without the flag or for a conversation not open.
    pub fn pool(&self, key: Option<&str>) -> Option<Pool> {
        if !self.cfg.sticky_connections {
            return None;
        }
        let mut books = self.books();
        let c = books.get_mut(key?)?;
        Some(c.pool.get_or_insert_with(Pool::default).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sub_agent_sends_its_parent_and_a_conversation_its_token() {
        let books = Conversations::new(&Affinity {
            key_header: Some("x-dynamo-session-id".into()),
            parent_header: Some("x-dynamo-parent-session-id".into()),
            token: Some(SessionToken::Cookie("route".into())),
            sticky_connections: false,
        });
        let (main, sub): (Arc<str>, Arc<str>) = ("s-1".into(), "s-1-c".into());
        books.open(&main, None);
        books.open(&sub, Some(&main));
        assert_eq!(
            books.headers(Some("s-1")),
            [("x-dynamo-session-id", "s-1".into())]
        );
        assert!(books.keep_token("s-1-c", TokenSeen::Set("t9".into())));
        assert_eq!(
            books.headers(Some("s-1-c")),
            [
                ("x-dynamo-session-id", "s-1-c".into()),
                ("x-dynamo-parent-session-id", "s-1".into()),
                ("cookie", "route=t9".into())
            ]
        );
        assert!(!books.keep_token("s-1-c", TokenSeen::Refused));
        assert_eq!(books.headers(Some("s-1-c")).len(), 2, "refused: no token");
        books.close("s-1-c");
        assert_eq!(books.headers(Some("s-1-c")).len(), 1, "closed: key only");
        assert!(books.headers(None).is_empty());
        assert!(books.pool(Some("s-1")).is_none(), "not sticky");
    }
}
