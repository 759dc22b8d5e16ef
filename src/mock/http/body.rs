//! Response bodies. A generation body is a state machine polled by hyper: wait for a
//! concurrency slot, then emit chunks at their deadlines, inject the planned fault, and
//! release the slot the moment the last byte is produced. Being a body rather than a
//! task, it is dropped with the connection, so a client that goes away (even from a
//! stalled stream) frees everything it held: nothing to leak.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::{AcquireError, OwnedSemaphorePermit};
use tokio::time::{Instant, Sleep};

use super::app::App;
use crate::mock::api::formatter::Formatter;
use crate::mock::api::shared::Usage;
use crate::mock::model::plan::{Fault, FinishReason, Plan};
use crate::mock::model::stats::FaultKind;
use crate::mock::model::truth::{Trace, outcome};
use llmsurge_proto::MonoNanos;

/// Delay between the last bytes before an injected drop and the cut, so that those
/// bytes are flushed to the client first (a cut discards what hyper still buffers).
const DROP_FLUSH_DELAY: Duration = Duration::from_millis(2);

/// Due chunks are coalesced into one frame up to this size; a long zero-latency stream
/// then goes out in slices instead of holding the runtime to format all of it at once.
const MAX_FRAME_BYTES: usize = 64 * 1024;

/// `--truth`: chunks a trace's list is sized for up front; a longer stream grows it.
const MAX_RESERVED_CHUNKS: usize = 1024;

/// The error that cuts a response (an injected drop).
#[derive(Debug, thiserror::Error)]
#[error("injected connection drop")]
pub struct InjectedDrop;

/// Marks a response that must never be sent: the connection is closed before any
/// headers instead (an injected close). `server` turns it into a service error, on which
/// hyper closes an HTTP/1.1 connection without a response and resets an HTTP/2 stream.
#[derive(Clone, Copy, Debug, thiserror::Error)]
#[error("injected close before headers")]
pub struct InjectedClose;

type Acquire = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// Every response body the mock sends.
#[derive(Debug)]
pub enum MockBody {
    /// A body known in full.
    Full(Option<Bytes>),
    /// A generation (or embedding) that waits for a slot and its deadlines.
    Gen(Box<Generation>),
}

impl MockBody {
    /// A complete body.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        MockBody::Full(if bytes.is_empty() { None } else { Some(bytes) })
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = InjectedDrop;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, InjectedDrop>>> {
        match self.get_mut() {
            MockBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Gen(g) => g.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            MockBody::Full(bytes) => bytes.is_none(),
            // Asked right after a frame: hyper then ends the message with that frame (one
            // write for a zero-latency stream) instead of polling once more for the end.
            MockBody::Gen(g) => g.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            MockBody::Gen(_) => SizeHint::default(),
        }
    }
}

/// How the response is produced once the request holds a slot.
#[derive(Debug)]
pub enum Output {
    /// SSE chunks, one per `tokens_per_chunk` tokens, at their deadlines.
    Stream {
        /// Writes the chunks.
        fmt: Formatter,
        /// Send the usage chunk.
        include_usage: bool,
        /// Prompt tokens, for usage.
        prompt_tokens: u64,
    },
    /// A whole body after a latency: `Some` is fixed, `None` is what the stream would take.
    Whole {
        /// The body.
        body: Bytes,
        /// The latency.
        latency: Option<Duration>,
        /// Output tokens in the body, counted when sent.
        tokens: u64,
        /// The reasoning subset of `tokens`.
        reasoning: u64,
    },
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Queued,
    Running,
    /// Cut the response at the deadline.
    Dropping,
    Stalled,
    Done,
}

/// What kind of work a body does, for the server-side metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// A chat or completions request: counted in `request_success` and the TTFT and
    /// e2e histograms.
    Generation,
    /// An embedding or a ranking: one prefill; in `request_success` and e2e, not TTFT.
    Embedding,
}

/// The state of one generation body.
pub struct Generation {
    app: Arc<App>,
    plan: Plan,
    output: Output,
    work: Work,
    streaming: bool,
    /// When the request arrived (the TTFT and e2e clocks of `/metrics` start here, queue
    /// included, as vLLM's do).
    arrival: Instant,
    /// When the request got its slot.
    activated_at: Instant,
    /// Prompt tokens, which enter the KV-cache model with the slot.
    prompt_tokens: u64,
    /// Tokens this request added to the KV-cache model, removed with its slot.
    kv_held: u64,
    /// The TTFT was observed.
    ttft_seen: bool,
    phase: Phase,
    acquire: Option<Acquire>,
    permit: Option<OwnedSemaphorePermit>,
    active: bool,
    sleep: Option<Pin<Box<Sleep>>>,
    /// When the next chunk (or the whole body, or the cut) is due.
    deadline: Instant,
    /// Tokens produced so far (reasoning then content).
    tokens_done: u32,
    chunks_done: u32,
    /// Chunks written and not yet handed to hyper.
    buf: BytesMut,
    /// A whole body (or part of one) ready to hand over without copying.
    ready: Option<Bytes>,
    /// `--truth`: what this request's line will say; `None` without the file.
    trace: Option<Box<Trace>>,
    /// Where the request is in the mock's flow gauges.
    flow: Flow,
}

/// Where a request is in [`crate::mock::model::flow::FlowCounters`]'s gauges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Arrived, no token sent yet.
    BeforeFirst,
    /// Its first token went out.
    Decoding,
    /// Out of both gauges (ended or gone).
    Left,
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("seq", &self.plan.seq)
            .field("phase", &self.phase)
            .finish()
    }
}

impl Generation {
    /// A body for `plan`; it joins the slot queue right away.
    pub fn start(
        app: Arc<App>,
        plan: Plan,
        output: Output,
        work: Work,
        prompt_tokens: u64,
    ) -> MockBody {
        let arrival = Instant::now();
        let streaming = matches!(output, Output::Stream { .. });
        // Room for a burst of coalesced chunks (about 200 bytes each), or the whole body.
        let capacity = match &output {
            Output::Stream { .. } => 512 + 256 * plan.total_tokens().min(32) as usize,
            Output::Whole { .. } => 0,
        };
        app.counters.flow.arrived();
        let acquire: Option<Acquire> = app.semaphore.as_ref().map(|s| {
            app.counters.enqueue();
            Box::pin(Arc::clone(s).acquire_owned()) as Acquire
        });
        MockBody::Gen(Box::new(Generation {
            app,
            plan,
            output,
            work,
            streaming,
            arrival,
            activated_at: arrival,
            prompt_tokens,
            kv_held: 0,
            ttft_seen: false,
            phase: Phase::Queued,
            acquire,
            permit: None,
            active: false,
            sleep: None,
            deadline: Instant::now(),
            tokens_done: 0,
            chunks_done: 0,
            buf: BytesMut::with_capacity(capacity),
            ready: None,
            trace: None,
            flow: Flow::BeforeFirst,
        }))
    }

    /// `--truth`: follows this body into `trace`, written when the body ends.
    pub fn attach(&mut self, mut trace: Box<Trace>) {
        trace.prompt_tokens = Some(self.prompt_tokens);
        trace.tool_call = self
            .plan
            .tool_call
            .then(|| crate::mock::api::shared::ToolCall::id_of(self.plan.seq));
        trace.stream = self.streaming;
        // One chunk per `tokens_per_chunk` tokens (a usage chunk or a whole body is one
        // more): a short stream's list is allocated once instead of grown chunk by chunk.
        let per_chunk = self.app.model.tokens_per_chunk().max(1);
        let chunks = self.plan.total_tokens().div_ceil(per_chunk) as usize + 1;
        trace.chunks.reserve(chunks.min(MAX_RESERVED_CHUNKS));
        // What the plan ends with; a fault or a client gone cuts it (see `outcome`).
        trace.finish_reason =
            matches!(self.work, Work::Generation).then(|| self.plan.finish.as_str());
        self.trace = Some(trace);
    }

    /// `--truth`: notes the fault injected (counted by the caller).
    fn trace_fault(trace: &mut Option<Box<Trace>>, kind: FaultKind) {
        if let Some(t) = trace {
            t.fault = Some(kind);
        }
    }

    fn activate(&mut self) {
        let now = Instant::now();
        let active = self.app.counters.activate(self.streaming);
        self.active = true;
        self.activated_at = now;
        self.hold_kv(self.prompt_tokens);
        self.phase = Phase::Running;
        let plan_ttft = self.plan.ttft;
        self.deadline = match &self.output {
            Output::Stream { .. } => now + plan_ttft,
            Output::Whole {
                latency: Some(l), ..
            } => now + *l,
            Output::Whole { latency: None, .. } => {
                let mut total = plan_ttft;
                for _ in 1..self.plan.total_tokens() {
                    total += self.app.model.next_itl(&mut self.plan, active);
                }
                now + total
            }
        };
        if self.streaming {
            // The first chunk is due when its last token is: ttft plus k-1 gaps.
            self.advance_chunk_deadline(false);
        }
    }

    /// Moves `deadline` to the last token of the next chunk; `from_previous` adds the
    /// gap before the chunk's first token (every chunk but the first).
    fn advance_chunk_deadline(&mut self, from_previous: bool) {
        let n = self.next_chunk_len();
        let gaps = if from_previous {
            n
        } else {
            n.saturating_sub(1)
        };
        self.deadline += token_gaps(&self.app, &mut self.plan, gaps);
    }

    /// Tokens in the next chunk: at most k, never mixing reasoning and content.
    fn next_chunk_len(&self) -> u32 {
        chunk_len(
            self.app.model.tokens_per_chunk(),
            &self.plan,
            self.tokens_done,
        )
    }

    /// The first token (or the whole body) went out: the request decodes now.
    fn flow_first_token(&mut self) {
        if self.flow == Flow::BeforeFirst {
            self.flow = Flow::Decoding;
            self.app.counters.flow.first_token();
        }
    }

    /// The request leaves the flow gauges (at its end, or gone).
    fn flow_leave(&mut self) {
        match std::mem::replace(&mut self.flow, Flow::Left) {
            Flow::BeforeFirst => self.app.counters.flow.left(false),
            Flow::Decoding => self.app.counters.flow.left(true),
            Flow::Left => {}
        }
    }

    fn release(&mut self) {
        self.flow_leave();
        self.permit = None;
        if self.active {
            self.active = false;
            self.app
                .counters
                .kv_remove(std::mem::take(&mut self.kv_held));
            self.app.counters.deactivate(self.streaming);
        }
    }

    /// Adds tokens to the KV-cache model while the request holds its slot.
    fn hold_kv(&mut self, tokens: u64) {
        if self.active {
            self.kv_held += tokens;
            self.app.counters.kv_add(tokens);
        }
    }

    /// Observes the time to first token once, when the first token goes out: from
    /// arrival to the first token's deadline (a chunk of k tokens leaves with its last
    /// one), or to `now` if that comes first (a fixed non-streaming latency).
    fn observe_ttft(&mut self, now: Instant) {
        if self.work == Work::Generation && !self.ttft_seen {
            self.ttft_seen = true;
            let first_token = (self.activated_at + self.plan.ttft).min(now);
            self.app
                .counters
                .ttft
                .observe(first_token.saturating_duration_since(self.arrival));
        }
    }

    fn finish(&mut self) {
        self.phase = Phase::Done;
        self.release();
        self.app.counters.completed();
        self.app.counters.model_completed(self.plan.model);
        // vLLM counts a pooling request (embeddings, rerank, score) that finished in
        // `request_success{finished_reason="stop"}` and its e2e histogram, as it does a
        // generation; only the TTFT histogram is generation's alone.
        let reason = match self.work {
            Work::Generation => self.plan.finish,
            Work::Embedding => FinishReason::Stop,
        };
        self.app.counters.success(reason);
        self.app
            .counters
            .e2e
            .observe(Instant::now().saturating_duration_since(self.arrival));
    }

    /// Writes every chunk due by `now` into `buf`; stops at a fault or the end.
    fn write_due_chunks(&mut self, now: Instant) {
        let Output::Stream {
            fmt,
            include_usage,
            prompt_tokens,
        } = &self.output
        else {
            return;
        };
        // What these chunks send, counted once when they are all in `buf` (they leave in
        // one frame): atomics per frame, not per chunk, which other workers' requests
        // would contend for.
        let (mut tokens, mut reasoning_tokens, mut chunks) = (0u64, 0u64, 0u64);
        let mut finished = false;
        while self.phase == Phase::Running
            && self.deadline <= now
            && self.buf.len() < MAX_FRAME_BYTES
        {
            let n = chunk_len(
                self.app.model.tokens_per_chunk(),
                &self.plan,
                self.tokens_done,
            );
            let reasoning = self.tokens_done < self.plan.reasoning;
            let first = self.tokens_done == 0;
            if let Some(t) = &mut self.trace {
                let (r, c) = if reasoning { (n, 0) } else { (0, n) };
                t.chunk(r, c);
            }
            let plan = &mut self.plan;
            fmt.token_chunk(
                &mut self.buf,
                (0..n).map(|_| plan.next_word()),
                first,
                reasoning,
            );
            let before = self.tokens_done;
            self.tokens_done += n;
            self.chunks_done += 1;
            if self.app.model.spec_decoding() {
                let spec = self
                    .app
                    .model
                    .spec_decode(&mut self.plan, before, self.tokens_done);
                self.app.counters.spec_decode(spec);
            }
            let n64 = u64::from(n);
            tokens += n64;
            if reasoning {
                reasoning_tokens += n64;
            }
            chunks += 1;
            if first && self.flow == Flow::BeforeFirst {
                self.flow = Flow::Decoding;
                self.app.counters.flow.first_token();
            }
            if first && self.work == Work::Generation && !self.ttft_seen {
                self.ttft_seen = true;
                let first_token = (self.activated_at + self.plan.ttft).min(now);
                let ttft = first_token.saturating_duration_since(self.arrival);
                self.app.counters.ttft.observe(ttft);
            }

            match self.plan.fault {
                Fault::Drop(after) if after == self.chunks_done => {
                    self.app.counters.fault(FaultKind::Drop);
                    Self::trace_fault(&mut self.trace, FaultKind::Drop);
                    self.phase = Phase::Dropping;
                    self.deadline = now + DROP_FLUSH_DELAY;
                    break;
                }
                Fault::Stall(after) if after == self.chunks_done => {
                    self.app.counters.fault(FaultKind::Stall);
                    Self::trace_fault(&mut self.trace, FaultKind::Stall);
                    self.phase = Phase::Stalled;
                    break;
                }
                Fault::Garbage(after) if after == self.chunks_done => {
                    self.app.counters.fault(FaultKind::Garbage);
                    Self::trace_fault(&mut self.trace, FaultKind::Garbage);
                    fmt.garbage_chunk(&mut self.buf);
                }
                _ => {}
            }

            if self.tokens_done >= self.plan.total_tokens() {
                let usage = Usage {
                    prompt: *prompt_tokens,
                    content: u64::from(self.plan.content),
                    reasoning: u64::from(self.plan.reasoning),
                };
                fmt.end_stream(&mut self.buf, self.plan.finish, usage, *include_usage);
                finished = true;
                break;
            }
            // The next chunk is due when its last token is.
            let n = chunk_len(
                self.app.model.tokens_per_chunk(),
                &self.plan,
                self.tokens_done,
            );
            self.deadline += token_gaps(&self.app, &mut self.plan, n);
        }
        if chunks > 0 {
            // Before `finish`: a request counted complete has its tokens counted.
            self.app
                .counters
                .tokens_sent(tokens, reasoning_tokens, chunks);
            self.app.counters.model_tokens_sent(self.plan.model, tokens);
            self.hold_kv(tokens);
        }
        if finished {
            self.finish();
        }
    }

    /// Emits the whole body (or its faulty version) once its latency has passed.
    fn write_whole(&mut self) {
        let Output::Whole {
            body,
            tokens,
            reasoning,
            ..
        } = &self.output
        else {
            return;
        };
        let (body, tokens, reasoning) = (body.clone(), *tokens, *reasoning);
        match self.plan.fault {
            Fault::Drop(_) => {
                self.app.counters.fault(FaultKind::Drop);
                Self::trace_fault(&mut self.trace, FaultKind::Drop);
                self.ready = Some(body.slice(..body.len() / 2));
                self.phase = Phase::Dropping;
                self.deadline = Instant::now() + DROP_FLUSH_DELAY;
            }
            Fault::Stall(_) => {
                self.app.counters.fault(FaultKind::Stall);
                Self::trace_fault(&mut self.trace, FaultKind::Stall);
                self.phase = Phase::Stalled;
            }
            Fault::Garbage(_) => {
                self.app.counters.fault(FaultKind::Garbage);
                Self::trace_fault(&mut self.trace, FaultKind::Garbage);
                self.ready = Some(body.slice(..body.len() / 2));
                self.observe_ttft(Instant::now());
                self.finish();
            }
            // Errors and closes never get a body (see `handler`).
            Fault::None | Fault::Error(_) | Fault::Close => {
                self.app.counters.tokens_sent(tokens, reasoning, 0);
                self.app.counters.model_tokens_sent(self.plan.model, tokens);
                if self.app.model.spec_decoding() {
                    let total = self.plan.total_tokens();
                    let spec = self.app.model.spec_decode(&mut self.plan, 0, total);
                    self.app.counters.spec_decode(spec);
                }
                self.observe_ttft(Instant::now());
                self.flow_first_token();
                if let Some(t) = &mut self.trace {
                    // Output tokens fit u32 (the plan counts them in u32).
                    t.chunk(reasoning as u32, (tokens - reasoning) as u32);
                }
                self.ready = Some(body);
                self.finish();
            }
        }
    }

    /// Waits for `deadline`; `Ready` once it has passed.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.deadline() != deadline {
            sleep.as_mut().reset(deadline);
        }
        sleep.as_mut().poll(cx)
    }

    /// Whether the body has ended with nothing left to hand over.
    fn is_end_stream(&self) -> bool {
        self.phase == Phase::Done && self.ready.is_none() && self.buf.is_empty()
    }

    /// What is ready to send, if anything.
    fn take_frame(&mut self) -> Option<Frame<Bytes>> {
        let frame = match self.ready.take() {
            Some(bytes) => Frame::data(bytes),
            None if !self.buf.is_empty() => Frame::data(self.buf.split().freeze()),
            None => return None,
        };
        if let Some(t) = &mut self.trace {
            // Handed to hyper now, which writes it in this same poll of the connection.
            let now = MonoNanos::now();
            t.frame_sent(now);
            if self.phase == Phase::Done {
                t.end = Some(now);
            }
        }
        Some(frame)
    }

    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, InjectedDrop>>> {
        loop {
            match self.phase {
                Phase::Queued => {
                    if let Some(acquire) = self.acquire.as_mut() {
                        let permit = ready!(acquire.as_mut().poll(cx));
                        self.acquire = None;
                        self.app.counters.dequeue();
                        // The semaphore is never closed; a closed one just means no limit.
                        self.permit = permit.ok();
                    }
                    self.activate();
                }
                Phase::Running => {
                    let now = Instant::now();
                    if self.deadline <= now {
                        if self.streaming {
                            self.write_due_chunks(now);
                        } else {
                            self.write_whole();
                        }
                    }
                    if let Some(frame) = self.take_frame() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    if self.phase == Phase::Running {
                        ready!(self.poll_deadline(cx));
                    }
                }
                Phase::Dropping => {
                    if let Some(frame) = self.take_frame() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    ready!(self.poll_deadline(cx));
                    self.phase = Phase::Done;
                    self.release();
                    if let Some(t) = &mut self.trace {
                        t.end = Some(MonoNanos::now());
                    }
                    return Poll::Ready(Some(Err(InjectedDrop)));
                }
                Phase::Stalled => {
                    if let Some(frame) = self.take_frame() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    // Never woken: the body lives until the connection goes, holding its slot.
                    return Poll::Pending;
                }
                Phase::Done => {
                    if let Some(frame) = self.take_frame() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

/// Tokens in the chunk after `done` tokens: at most k, never mixing reasoning and content.
fn chunk_len(k: u32, plan: &Plan, done: u32) -> u32 {
    if done < plan.reasoning {
        k.min(plan.reasoning - done)
    } else {
        k.min(plan.total_tokens() - done)
    }
}

/// The time `count` more tokens take, each gap drawn with the current active count.
fn token_gaps(app: &App, plan: &mut Plan, count: u32) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..count {
        total += app.model.next_itl(plan, app.counters.active());
    }
    total
}

impl Drop for Generation {
    fn drop(&mut self) {
        if self.acquire.is_some() {
            self.app.counters.dequeue();
        }
        // Injected drops and stalls end by design; anything else unfinished was abandoned.
        if matches!(self.phase, Phase::Queued | Phase::Running) {
            self.app.counters.cancelled();
            use crate::mock::model::flow::DisconnectState;
            self.app
                .counters
                .flow
                .disconnect(match (&self.phase, self.flow) {
                    (Phase::Queued, _) => DisconnectState::Queued,
                    (_, Flow::BeforeFirst) => DisconnectState::Prefill,
                    _ => DisconnectState::Decoding,
                });
        }
        self.release();
        if let (Some(mut trace), Some(truth)) = (self.trace.take(), self.app.truth.as_ref()) {
            trace.outcome = if trace.fault.is_some() {
                outcome::FAULT
            } else if self.phase == Phase::Done {
                outcome::COMPLETED
            } else if *self.app.stopping.borrow() {
                outcome::SERVER_STOPPED
            } else {
                outcome::CLIENT_GONE
            };
            trace.end.get_or_insert_with(MonoNanos::now);
            truth.write(&trace);
        }
    }
}
