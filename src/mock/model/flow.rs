//! Where generation requests are in their life, as the agentic checks need it: how many
//! wait for their first token and how many decode (gauges with peaks), and the client
//! disconnects per state (`/stats` `disconnects`).

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The state a request was in when its client went away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisconnectState {
    /// Waiting for a slot (`--max-concurrency`).
    Queued,
    /// Holding a slot, no token sent yet.
    Prefill,
    /// Tokens sent, the response not at its end.
    Decoding,
}

/// Live gauges and counters, shared by every connection.
#[derive(Debug, Default)]
pub struct FlowCounters {
    before_first_token: AtomicU64,
    peak_before_first_token: AtomicU64,
    decoding: AtomicU64,
    peak_decoding: AtomicU64,
    disconnects: [AtomicU64; 3],
}

/// Client disconnects per request state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisconnectCounts {
    /// While queued for a slot.
    pub queued: u64,
    /// While holding a slot, before the first token went out.
    pub prefill: u64,
    /// After the first token, before the end.
    pub decoding: u64,
}

impl DisconnectCounts {
    /// Every disconnect.
    pub fn total(&self) -> u64 {
        self.queued + self.prefill + self.decoding
    }
}

/// The snapshot of [`FlowCounters`], part of `/stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowStats {
    /// Generation requests that arrived and have not had their first token sent (queued
    /// ones included) now.
    #[serde(default)]
    pub before_first_token: u64,
    /// The highest `before_first_token` seen.
    #[serde(default)]
    pub peak_before_first_token: u64,
    /// Generation requests past their first token and not at their end, now.
    #[serde(default)]
    pub decoding: u64,
    /// The highest `decoding` seen.
    #[serde(default)]
    pub peak_decoding: u64,
    /// Requests whose client went away before their end, per state (injected drops and
    /// stalls not counted; the sum is `cancelled`).
    #[serde(default)]
    pub disconnects: DisconnectCounts,
}

impl FlowCounters {
    /// A request arrived: it waits for its first token.
    pub fn arrived(&self) {
        let now = self.before_first_token.fetch_add(1, Relaxed) + 1;
        self.peak_before_first_token.fetch_max(now, Relaxed);
    }

    /// A request's first token went out: it decodes now.
    pub fn first_token(&self) {
        self.before_first_token.fetch_sub(1, Relaxed);
        let now = self.decoding.fetch_add(1, Relaxed) + 1;
        self.peak_decoding.fetch_max(now, Relaxed);
    }

    /// A request left, before its first token (`decoding: false`) or after.
    pub fn left(&self, decoding: bool) {
        if decoding {
            self.decoding.fetch_sub(1, Relaxed);
        } else {
            self.before_first_token.fetch_sub(1, Relaxed);
        }
    }

    /// A client went away from a request in `state`.
    pub fn disconnect(&self, state: DisconnectState) {
        self.disconnects[state as usize].fetch_add(1, Relaxed);
    }

    /// Zeroes the counts; peaks restart from the gauges.
    pub fn reset(&self) {
        for c in &self.disconnects {
            c.store(0, Relaxed);
        }
        self.peak_before_first_token
            .store(self.before_first_token.load(Relaxed), Relaxed);
        self.peak_decoding
            .store(self.decoding.load(Relaxed), Relaxed);
    }

    /// The values now.
    pub fn snapshot(&self) -> FlowStats {
        let d = |s: DisconnectState| self.disconnects[s as usize].load(Relaxed);
        FlowStats {
            before_first_token: self.before_first_token.load(Relaxed),
            peak_before_first_token: self.peak_before_first_token.load(Relaxed),
            decoding: self.decoding.load(Relaxed),
            peak_decoding: self.peak_decoding.load(Relaxed),
            disconnects: DisconnectCounts {
                queued: d(DisconnectState::Queued),
                prefill: d(DisconnectState::Prefill),
                decoding: d(DisconnectState::Decoding),
            },
        }
    }
}
