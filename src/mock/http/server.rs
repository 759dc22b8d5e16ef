//! The listener: a tokio runtime on its own OS thread, an accept loop, one hyper
//! connection (HTTP/1.1 or h2c, detected; over TLS when `--tls-cert` is set, h2 or
//! HTTP/1.1 by ALPN) per socket, and a graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio_rustls::TlsAcceptor;

use super::app::{App, ConnectionId};
use super::body::InjectedClose;
use super::handler::handle;
use crate::mock::config::MockConfig;
use crate::mock::error::MockError;
use crate::mock::model::record::Recorder;
use crate::mock::model::stats::{ConnectionEvent, MockStats};
use crate::mock::model::truth::TruthWriter;

/// Pending connections the kernel keeps for us; a load test opens many at once.
const LISTEN_BACKLOG: u32 = 4096;
/// How long in-flight responses get to finish when an in-process server stops.
const IN_PROCESS_GRACE: Duration = Duration::from_secs(1);
/// How long in-flight responses get to finish after SIGINT/SIGTERM.
const CLI_GRACE: Duration = Duration::from_secs(5);
/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// A running mock server: its own OS thread and tokio runtime. Stops on `shutdown` or drop.
pub struct MockServer {
    addr: SocketAddr,
    /// Serving HTTPS.
    tls: bool,
    app: Arc<App>,
    stop: Option<oneshot::Sender<Duration>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockServer {
    /// Validates `config`, binds (port 0 = ephemeral) and returns once listening.
    pub fn start(config: MockConfig) -> Result<MockServer, MockError> {
        config.validate()?;
        let acceptor = super::tls::acceptor(&config)?;
        let tls = acceptor.is_some();
        let runtime = build_runtime(config.workers)?;
        let bind_addr = SocketAddr::new(config.host, config.port);
        let listener = {
            // Registering the socket with the reactor needs the runtime's context.
            let _guard = runtime.enter();
            bind(bind_addr).map_err(|source| MockError::Bind {
                addr: bind_addr,
                source,
            })?
        };
        let addr = listener.local_addr().map_err(|source| MockError::Bind {
            addr: bind_addr,
            source,
        })?;
        let recorder = match &config.record {
            Some(path) => Some(Arc::new(
                Recorder::create(
                    path,
                    config.record_limit,
                    &config.record_header,
                    llmsurge_proto::Redaction::new(&config.show_header, &config.show_query_param),
                )
                .map_err(|source| MockError::Record {
                    path: path.display().to_string(),
                    source,
                })?,
            )),
            None => None,
        };
        let truth = match &config.truth {
            Some(path) => Some(Arc::new(TruthWriter::create(path).map_err(|source| {
                MockError::Truth {
                    path: path.display().to_string(),
                    source,
                }
            })?)),
            None => None,
        };
        let mut app = App::new(config);
        app.recorder = recorder;
        app.truth = truth;
        let app = Arc::new(app);
        let (stop_tx, stop_rx) = oneshot::channel();
        let serve_app = Arc::clone(&app);
        let thread = std::thread::Builder::new()
            .name("llmsurge-mock".into())
            .spawn(move || {
                runtime.block_on(serve(listener, acceptor, serve_app, stop_rx));
                // Dropping the runtime here cancels whatever outlived the grace period.
            })
            .map_err(MockError::Thread)?;
        Ok(MockServer {
            addr,
            tls,
            app,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://HOST:PORT` (`https://` with `--tls-cert`), ready to prefix `/v1/...`.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The first served model name.
    pub fn model(&self) -> &str {
        self.app.config.primary_model()
    }

    /// When the server started, Unix seconds: its `process_start_time_seconds`.
    pub fn started_unix(&self) -> f64 {
        self.app.started_unix
    }

    /// What the server saw so far (the body of `GET /stats`).
    pub fn stats(&self) -> MockStats {
        let mut stats = self.app.counters.snapshot();
        stats.record = self.app.recorder.as_ref().map(|r| r.stats());
        stats
    }

    /// Stops accepting, gives in-flight responses up to a second, and joins the thread.
    pub fn shutdown(mut self) {
        self.stop_with(IN_PROCESS_GRACE);
    }

    /// Stops like [`MockServer::shutdown`] and returns what the server saw in all, the
    /// responses that finished during the grace period included.
    pub fn stop(mut self) -> MockStats {
        self.stop_with(IN_PROCESS_GRACE);
        self.app.counters.snapshot()
    }

    fn stop_with(&mut self, grace: Duration) {
        if let Some(stop) = self.stop.take() {
            // The loop may already be gone (its thread panicked); nothing left to stop then.
            let _ = stop.send(grace);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // The runtime is gone with its thread, and every body with it: every line is in.
        if let Some(truth) = &self.app.truth {
            truth.flush();
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stop_with(IN_PROCESS_GRACE);
    }
}

fn build_runtime(workers: usize) -> Result<tokio::runtime::Runtime, MockError> {
    // One worker: a current-thread runtime, the cheapest way to serve from one core.
    let mut builder = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers)
            .thread_name("llmsurge-mock-worker");
        b
    };
    builder.enable_all().build().map_err(MockError::Runtime)
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // Restarting on the same port right after a run must not fail on TIME_WAIT sockets.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Accepts until told to stop, then drains connections for the grace period.
async fn serve(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    app: Arc<App>,
    mut stop: oneshot::Receiver<Duration>,
) {
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    // Every connection holds a receiver; `closed()` resolves once they are all gone.
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let grace = loop {
        tokio::select! {
            grace = &mut stop => break grace.unwrap_or(Duration::ZERO),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    spawn_connection(stream, acceptor.clone(), Arc::clone(&app), Arc::clone(&builder), shutdown_rx.clone());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "mock server: accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    };
    drop(listener);
    app.stopping.send_replace(true);
    drop(shutdown_rx);
    let _ = shutdown_tx.send(true);
    let _ = tokio::time::timeout(grace, shutdown_tx.closed()).await;
}

fn spawn_connection(
    stream: TcpStream,
    acceptor: Option<TlsAcceptor>,
    app: Arc<App>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    shutdown: watch::Receiver<bool>,
) {
    // Per-token SSE writes are tiny: without TCP_NODELAY they wait on delayed ACKs.
    if let Err(e) = stream.set_nodelay(true) {
        tracing::warn!(error = %e, "mock server: cannot set TCP_NODELAY");
    }
    app.counters.connection(ConnectionEvent::Accepted);
    let id = ConnectionId(
        app.next_connection
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    );
    tokio::spawn(async move {
        match acceptor {
            None => serve_connection(stream, app, id, &builder, shutdown).await,
            // The handshake runs in the connection's task, so a slow or refused client
            // never holds up the accept loop.
            Some(acceptor) => match acceptor.accept(stream).await {
                Ok(tls) => {
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    app.counters.connection(if h2 {
                        ConnectionEvent::TlsH2
                    } else {
                        ConnectionEvent::TlsHttp1
                    });
                    serve_connection(tls, app, id, &builder, shutdown).await;
                }
                // A client without the certificate --tls-client-ca asks for, or one
                // that does not trust ours: its handshake ends here, with an alert.
                Err(e) => {
                    app.counters.connection(ConnectionEvent::TlsFailed);
                    tracing::debug!(error = %e, "mock server: TLS handshake failed");
                }
            },
        }
    });
}

/// Serves one connection (plain or TLS) until it ends or the server stops.
async fn serve_connection<S>(
    stream: S,
    app: Arc<App>,
    id: ConnectionId,
    builder: &auto::Builder<TokioExecutor>,
    mut shutdown: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // The connection's id goes to the handler as an argument: a request extension would
    // cost an allocation per request.
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let app = Arc::clone(&app);
        async move {
            let server = app.server_header.clone();
            let mut response = handle(app, req, id).await;
            response.headers_mut().insert(hyper::header::SERVER, server);
            // An injected close: fail the service, so hyper sends no headers at all.
            match response.extensions().get::<InjectedClose>() {
                Some(close) => Err(*close),
                None => Ok(response),
            }
        }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        // Connection errors (a client that went away, an injected drop) end just it.
        _ = conn.as_mut() => {}
        // (The guard `wait_for` returns is not Send: drop it inside.)
        _ = async { shutdown.wait_for(|stop| *stop).await.is_ok() } => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Runs the server for the CLI: prints `listening on http://ADDR` as the first stdout
/// line, serves until SIGINT or SIGTERM, then drains in-flight responses briefly.
pub fn run_cli(config: MockConfig) -> anyhow::Result<()> {
    let mut server = MockServer::start(config)?;
    crate::stdout::println(&format!("listening on {}", server.base_url()));
    wait_for_signal()?;
    server.stop_with(CLI_GRACE);
    Ok(())
}

fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        Ok(())
    })
}
