//! One llmsurge worker process.
//!
//! Theory of operation: the coordinator starts this executable again through a hidden
//! subcommand, with two inherited file descriptors: the IPC socket and the shared-memory
//! block. The worker says `Hello`, receives its [`WorkerConfig`](llmsurge_proto::WorkerConfig),
//! builds its HTTP client and payload source, says `Ready`, and waits for `Start`. Then a
//! single-threaded tokio runtime runs the one request loop ([`request_loop`]) for the
//! strategy, timed by the pacer thread ([`pacer`]) for rate-based schedules; the
//! [`reporter`] batches finished requests with their histogram delta, flushed to the
//! coordinator every flush interval (each batch doubles as a heartbeat).
//!
//! A worker never outlives its coordinator: it ignores SIGINT (the coordinator decides
//! what Ctrl-C means), exits when the IPC socket reaches EOF, and has a parent-death
//! signal set by the coordinator at spawn. SIGTERM (a supervisor stopping the whole
//! process group) is a clean cancel, as it is for the coordinator: the worker raises the
//! group's cancel flag, reports its requests as cancelled and says `Finished` with
//! `terminated`.
//!
//! It does not know how prompts are made: the binary passes a [`SourceFactory`].

pub mod affinity;
pub mod arrivals;
pub mod backend;
pub mod backoff;
pub mod connections;
pub mod formats;
pub mod graph;
pub mod http1;
pub mod http2;
pub mod idle_pool;
pub mod itl;
pub mod pacer;
pub mod parts;
pub mod reporter;
pub mod request_loop;
pub mod resend;
pub mod rx_time;
pub mod sched;
pub mod source;
pub mod sse;
pub mod timers;
pub mod tls_conn;

pub use formats::openai;
pub use source::{
    MediaPart, Message, PreparedRequest, Prompt, RequestSource, SessionPlan, SessionState,
    SourceFactory, ToolCall, Turn,
};

use crate::backend::Backend;
use crate::reporter::Reporter;
use crate::request_loop::{Context, ReleaseWaker};
use llmsurge_proto::shm::stop_flags;
use llmsurge_proto::{
    FrameError, FrameIoError, FrameReader, FrameWriter, FromWorker, MonoNanos, PROTOCOL_VERSION,
    Schedule, SharedRegion, ToWorker, UpdateBatch, WorkerConfig,
};
use std::cell::{Cell, RefCell};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{Notify, mpsc, watch};

/// How long a worker waits for its configuration and for the start signal.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// A batch is sent at least this often, even when empty, as a heartbeat.
const HEARTBEAT: Duration = Duration::from_millis(500);

/// Errors that end a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The IPC channel failed.
    #[error(transparent)]
    Ipc(#[from] FrameIoError),
    /// A system call failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The coordinator sent something out of order.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The worker could not prepare (shared memory, HTTP client, data).
    #[error("{0}")]
    Prepare(String),
    /// Encoding histograms failed.
    #[error(transparent)]
    Metrics(#[from] llmsurge_proto::metrics::MetricsError),
}

/// Runs a worker to completion; returns the process exit code.
pub fn run_worker(ipc: OwnedFd, shm: OwnedFd, factory: &SourceFactory) -> i32 {
    // Each stream holds a socket; the coordinator checked that the hard limit fits them.
    let _ = llmsurge_proto::fdlimit::raise_fd_limit();
    // SAFETY: installing SIG_IGN has no handler code to be unsafe in; done before any
    // other thread exists.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGINT,
            nix::sys::signal::SigHandler::SigIgn,
        )
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        // Slots handed over by the pacer arrive through the injection queue; check it
        // every other task (default: every 31) so a due slot does not wait behind a burst
        // of responses, and poll for I/O as often.
        .global_queue_interval(2)
        .event_interval(8)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("llmsurge worker: cannot start its runtime: {e}");
            return 1;
        }
    };
    // The runtime thread sends every request: it must get the core as soon as a slot is
    // handed over, not when another thread's slice ends.
    sched::request_short_slice();
    let local = tokio::task::LocalSet::new();
    match local.block_on(&runtime, session(ipc, shm, factory)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("llmsurge worker: {e}");
            1
        }
    }
}

async fn session(ipc: OwnedFd, shm: OwnedFd, factory: &SourceFactory) -> Result<(), WorkerError> {
    // Replace SIGTERM's "terminate" at once, so a group-wide SIGTERM during the handshake
    // is held for the run (which cancels at once) rather than killing the worker.
    let term = signal(SignalKind::terminate())?;
    let stream = std::os::unix::net::UnixStream::from(ipc);
    stream.set_nonblocking(true)?;
    let (rd, wr) = tokio::net::UnixStream::from_std(stream)?.into_split();
    let mut reader = FrameReader::new(rd);
    let mut writer = FrameWriter::new(wr);
    writer
        .send(&FromWorker::Hello {
            protocol_version: PROTOCOL_VERSION,
            pid: std::process::id(),
        })
        .await?;

    let cfg = match next_message(&mut reader).await? {
        Some(ToWorker::Configure(cfg)) => cfg,
        None => return Ok(()),
        Some(other) => {
            return Err(WorkerError::Protocol(format!(
                "expected configure, got {other:?}"
            )));
        }
    };
    // A server that echoes the key (a gateway's 401) must not put it in a record.
    cfg.backend
        .register_secrets(&llmsurge_proto::Redaction::default());
    let preparing = std::time::Instant::now();
    let prepared = match prepare(&cfg, shm, factory) {
        Ok(p) => p,
        Err(message) => {
            writer
                .send(&FromWorker::Failed {
                    message: message.clone(),
                })
                .await?;
            return Err(WorkerError::Prepare(message));
        }
    };
    tracing::debug!(
        worker = cfg.worker_id,
        schedule = ?cfg.schedule,
        prepare_ms = preparing.elapsed().as_secs_f64() * 1e3,
        "worker ready"
    );
    writer.send(&FromWorker::Ready).await?;
    let t0 = match next_message(&mut reader).await? {
        Some(ToWorker::Start { t0 }) => t0,
        None => return Ok(()),
        Some(other) => {
            return Err(WorkerError::Protocol(format!(
                "expected start, got {other:?}"
            )));
        }
    };
    run(*cfg, prepared, t0, term, reader, writer).await
}

async fn next_message(
    reader: &mut FrameReader<OwnedReadHalf>,
) -> Result<Option<ToWorker>, WorkerError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, reader.next::<ToWorker>())
        .await
        .map_err(|_| {
            WorkerError::Protocol("the coordinator went silent during the handshake".into())
        })?
        .map_err(WorkerError::from)
}

struct Prepared {
    shm: Arc<SharedRegion>,
    backend: Arc<Backend>,
    source: Box<dyn RequestSource>,
}

fn prepare(cfg: &WorkerConfig, shm: OwnedFd, factory: &SourceFactory) -> Result<Prepared, String> {
    let shm = SharedRegion::open(&shm).map_err(|e| e.to_string())?;
    // The per-worker counters are indexed by worker id: the block must be this group's.
    if shm.worker_count() != cfg.worker_count || cfg.worker_id >= cfg.worker_count {
        return Err(format!(
            "worker {} of {} was handed a shared-memory block for {} workers",
            cfg.worker_id,
            cfg.worker_count,
            shm.worker_count()
        ));
    }
    let backend = Backend::new(&cfg.backend)
        .map_err(|e| e.to_string())?
        .with_trace_seed(cfg.seed);
    let source = factory(cfg)?;
    Ok(Prepared {
        shm: Arc::new(shm),
        backend: Arc::new(backend),
        source,
    })
}

async fn run(
    cfg: WorkerConfig,
    prepared: Prepared,
    t0: MonoNanos,
    mut term: Signal,
    mut reader: FrameReader<OwnedReadHalf>,
    writer: FrameWriter<OwnedWriteHalf>,
) -> Result<(), WorkerError> {
    // The coordinator going away (EOF) ends the process at once: there is nobody left to
    // report to.
    tokio::task::spawn_local(async move {
        loop {
            match reader.next::<ToWorker>().await {
                Ok(None) | Err(_) => std::process::exit(0),
                Ok(Some(_)) => {}
            }
        }
    });

    let (cancel_tx, cancel_rx) = watch::channel(false);
    let (stop_tx, stop_rx) = watch::channel(false);
    let terminated = Rc::new(Cell::new(false));
    let shm = prepared.shm.clone();
    let got_term = terminated.clone();
    let watcher = tokio::task::spawn_local(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                Some(()) = term.recv() => {
                    // Cancel like the coordinator does on its SIGTERM, for the whole
                    // group at once; the coordinator gets the same signal or our word.
                    shm.request_stop(stop_flags::CANCEL_IN_FLIGHT);
                    got_term.set(true);
                }
            }
            if shm.slots_exhausted() && !*stop_tx.borrow() {
                let _ = stop_tx.send(true);
            }
            if shm.cancel_requested() {
                let _ = cancel_tx.send(true);
                return;
            }
        }
    });

    let mut reporter = Reporter::new(cfg.worker_id, t0, cfg.window);
    if !cfg.backend.stream {
        reporter = reporter.whole_bodies();
    }
    if let Some(lora) = &cfg.lora {
        reporter = reporter.with_models(lora.names());
    }
    let reporter = Rc::new(RefCell::new(reporter));
    let flush_now = Rc::new(Notify::new());
    let (control_tx, control_rx) = mpsc::unbounded_channel();
    let flusher = tokio::task::spawn_local(flush_loop(
        cfg.worker_id,
        writer,
        reporter.clone(),
        cfg.flush_interval,
        flush_now.clone(),
        control_rx,
    ));

    let released = Arc::new(Notify::new());
    let prefill_released = Arc::new(Notify::new());
    // Other workers' releases reach this worker's waiters at once.
    let _waker = ReleaseWaker::start(
        &prepared.shm,
        cfg.worker_id,
        [released.clone(), prefill_released.clone()],
    );
    let ctx = Rc::new(Context {
        id: cfg.worker_id,
        shm: prepared.shm.clone(),
        backend: prepared.backend,
        reporter,
        cancel: cancel_rx,
        stop: stop_rx,
        released,
        flush_now,
        shard: cfg.shard,
        behaviour: cfg.behaviour.clone(),
        seed: cfg.seed,
        prefill_released,
        timers: timers::Timers::new(),
    });
    match &cfg.schedule {
        Schedule::Streams { streams, rampup } => {
            ctx.run_streams(*streams, cfg.worker_count, *rampup, t0, prepared.source)
                .await;
        }
        Schedule::Arrivals(arrivals) => {
            ctx.run_arrivals(*arrivals, cfg.seed, t0, prepared.source)
                .await?;
        }
    }
    watcher.abort();
    let reason = if terminated.get() {
        "terminated (SIGTERM)"
    } else if prepared.shm.queuing_stopped() {
        "stopped"
    } else {
        "schedule exhausted"
    };
    let _ = control_tx.send(FromWorker::Finished {
        reason: reason.into(),
        terminated: terminated.get(),
    });
    flusher
        .await
        .map_err(|e| WorkerError::Protocol(format!("flush task failed: {e}")))?
}

/// Sends the reporter's batch every `interval` (or sooner when full), and control
/// messages in order after the batch before them. Returns after sending `Finished`.
///
/// Reporting that fails ends the worker at once: a worker whose requests nobody counts
/// must not go on loading the server. It says why on stderr and, when the channel still
/// works (a batch that could not be encoded), in a `Failed` message, which the
/// coordinator names as the worker's failure (its in-flight requests are counted
/// `worker_died` with that reason).
async fn flush_loop(
    worker: u32,
    mut writer: FrameWriter<OwnedWriteHalf>,
    reporter: Rc<RefCell<Reporter>>,
    interval: Duration,
    flush_now: Rc<Notify>,
    control: mpsc::UnboundedReceiver<FromWorker>,
) -> Result<(), WorkerError> {
    match report(&mut writer, reporter, interval, flush_now, control).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let message = format!("reporting to the coordinator failed: {e}; load stopped");
            eprintln!("llmsurge worker {worker}: {message}");
            let _ = writer.send(&FromWorker::Failed { message }).await;
            std::process::exit(1);
        }
    }
}

/// The loop of [`flush_loop`]; returns its first failure.
async fn report(
    writer: &mut FrameWriter<OwnedWriteHalf>,
    reporter: Rc<RefCell<Reporter>>,
    interval: Duration,
    flush_now: Rc<Notify>,
    mut control: mpsc::UnboundedReceiver<FromWorker>,
) -> Result<(), WorkerError> {
    let mut last_sent = tokio::time::Instant::now();
    loop {
        let message = tokio::select! {
            () = tokio::time::sleep(interval) => None,
            () = flush_now.notified() => None,
            m = control.recv() => Some(m),
        };
        let batch = reporter.borrow_mut().take_batch()?;
        if !batch.is_empty() || last_sent.elapsed() >= HEARTBEAT {
            send_batch(writer, batch).await?;
            last_sent = tokio::time::Instant::now();
        }
        match message {
            None => {}
            Some(None) => return Ok(()),
            Some(Some(m)) => {
                writer.send(&m).await?;
                if matches!(m, FromWorker::Finished { .. } | FromWorker::Failed { .. }) {
                    return Ok(());
                }
            }
        }
    }
}

/// Sends `batch`, in as many frames as it takes: a batch too large for one frame
/// ([`llmsurge_proto::frame::MAX_FRAME_LEN`]) is split in two, again and again, until
/// each part fits (records carry a server's text cut to a few KiB, so a part of one
/// record always fits).
async fn send_batch<W: tokio::io::AsyncWrite + Unpin>(
    writer: &mut FrameWriter<W>,
    batch: UpdateBatch,
) -> Result<(), FrameIoError> {
    // Parts still to send, the next one last.
    let mut parts = vec![batch];
    while let Some(part) = parts.pop() {
        let message = FromWorker::Update(part);
        match writer.send(&message).await {
            Err(FrameIoError::Frame(FrameError::TooLarge(size))) => {
                let FromWorker::Update(part) = message else {
                    return Err(FrameIoError::Frame(FrameError::TooLarge(size)));
                };
                match part.split() {
                    Ok((first, second)) => {
                        tracing::debug!(size, "a batch over the frame limit, sent in two");
                        parts.push(second);
                        parts.push(first);
                    }
                    Err(_) => return Err(FrameIoError::Frame(FrameError::TooLarge(size))),
                }
            }
            sent => sent?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::{
        ErrorKind, RequestError, RequestRecord, RequestStarted, RequestStatus, frame::MAX_FRAME_LEN,
    };

    /// A finished request whose record carries `message` as its error.
    fn errored(slot: u64, message: &str) -> RequestRecord {
        RequestRecord {
            slot,
            status: RequestStatus::Errored,
            error: Some(RequestError {
                kind: ErrorKind::StreamBroken,
                message: message.into(),
            }),
            ..RequestRecord::completed(MonoNanos(slot), None, MonoNanos(slot + 1), 0)
        }
    }

    /// A batch over the frame limit (many errors of a few KiB each in one flush) arrives
    /// whole, in order, in frames that each fit; a worker never loses its reporting to
    /// the size of what the server said.
    #[test]
    fn a_batch_over_the_frame_limit_arrives_whole_in_frames_that_fit() {
        let message = "e".repeat(llmsurge_proto::limits::ERROR_MESSAGE);
        let count = MAX_FRAME_LEN / message.len() + 1000;
        let batch = UpdateBatch {
            started: (0..count as u64)
                .map(|slot| RequestStarted {
                    slot,
                    scheduled: MonoNanos(slot),
                    start: MonoNanos(slot),
                    model: None,
                    session: None,
                    prompt_tokens: None,
                    max_output_tokens: None,
                })
                .collect(),
            finished: (0..count as u64).map(|s| errored(s, &message)).collect(),
            ..UpdateBatch::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let (frames, starts, slots) = rt.block_on(async {
            let (a, b) = tokio::io::duplex(1 << 20);
            let mut writer = FrameWriter::new(a);
            let mut reader = FrameReader::new(b);
            let send = async move {
                send_batch(&mut writer, batch).await.expect("sent");
            };
            let read = async move {
                let (mut frames, mut starts, mut slots) = (0, 0, Vec::new());
                while let Some(m) = reader.next::<FromWorker>().await.expect("a frame") {
                    let FromWorker::Update(part) = m else {
                        panic!("an update")
                    };
                    assert!(
                        slots.is_empty() || part.started.is_empty(),
                        "every start in the first part"
                    );
                    frames += 1;
                    starts += part.started.len();
                    slots.extend(part.finished.iter().map(|r| r.slot));
                }
                (frames, starts, slots)
            };
            let ((), got) = tokio::join!(send, read);
            got
        });
        assert!(frames >= 2, "{frames} frames");
        assert_eq!(starts, count);
        assert_eq!(slots, (0..count as u64).collect::<Vec<_>>());
    }
}
