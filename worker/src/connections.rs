//! How long opening each connection took (TCP connect, and the TLS handshake on
//! `https://`), whichever client opened it: the worker's own HTTP/1.1 client times its
//! `connect`, reqwest's connector is wrapped in a layer that times it. Both log here; the
//! request loop moves the log into the reporter's `connect` metric every probe tick.

use llmsurge_proto::MonoNanos;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
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

/// A reqwest connector layer that logs each connection it opens into a [`ConnectLog`].
#[derive(Clone, Debug)]
pub struct TimedConnectLayer(pub Arc<ConnectLog>);

impl<S> tower_layer::Layer<S> for TimedConnectLayer {
    type Service = TimedConnect<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TimedConnect {
            inner,
            log: Arc::clone(&self.0),
        }
    }
}

/// The connector service of [`TimedConnectLayer`].
#[derive(Clone, Debug)]
pub struct TimedConnect<S> {
    inner: S,
    log: Arc<ConnectLog>,
}

impl<S, R> tower_service::Service<R> for TimedConnect<S>
where
    S: tower_service::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let began = MonoNanos::now();
        let connecting = self.inner.call(request);
        let log = Arc::clone(&self.log);
        Box::pin(async move {
            let conn = connecting.await?;
            log.record(began, MonoNanos::now().since(began));
            Ok(conn)
        })
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
