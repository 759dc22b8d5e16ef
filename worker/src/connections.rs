//! How long opening each connection took (TCP connect, and the TLS handshake on
//! `https://`): the worker's own clients (HTTP/1.1 and HTTP/2) time their `connect` and
//! log here; the request loop moves the log into the reporter's `connect` metric every
//! probe tick.

use llmsurge_proto::MonoNanos;
use std::sync::Mutex;
use std::time::Duration;

/// Connections opened since the last drain: when each began and how long it took.
#[derive(Debug, Default)]
pub struct ConnectLog {
    opened: Mutex<Vec<(MonoNanos, Duration)>>,
}

impl ConnectLog {
    /// A connection begun at `began` was open (and its TLS session up) `took` later.
    pub fn record(&self, began: MonoNanos, took: Duration) {
        // A poisoned lock only means another thread panicked mid-push: the log is a Vec.
        let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
        opened.push((began, took));
    }

    /// Takes what was logged, leaving the log empty.
    pub fn drain(&self) -> Vec<(MonoNanos, Duration)> {
        let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *opened)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_drains_what_was_recorded() {
        let log = ConnectLog::default();
        log.record(MonoNanos(5), Duration::from_micros(300));
        log.record(MonoNanos(9), Duration::from_micros(40));
        assert_eq!(
            log.drain(),
            vec![
                (MonoNanos(5), Duration::from_micros(300)),
                (MonoNanos(9), Duration::from_micros(40))
            ]
        );
        assert!(log.drain().is_empty());
    }
}
