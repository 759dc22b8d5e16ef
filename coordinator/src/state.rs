//! `WorkerGroupState`: the coordinator's account of every request of one benchmark.
//!
//! It applies each worker's batches in order, counts every transition, keeps which
//! requests are in flight on which worker (so a dead worker's requests can be accounted
//! as errored), merges the histogram deltas, and evaluates the error constraints after
//! every batch. Nothing is silently lost: `created = completed + errored + cancelled`
//! once nothing is in flight, and [`WorkerGroupState::audit`] checks it (with shared
//! memory's own counts) at the end of every benchmark.

use crate::constraints::{Limits, StopReason};
use crate::data::GoodputSpec;
use crate::timeseries::TimeSeries;
use llmsurge_proto::metrics::MetricsError;
use llmsurge_proto::{
    ErrorKind, MeasureWindow, MetricSet, MonoNanos, Phase, RequestError, RequestRecord,
    RequestStarted, RequestStatus, TokenSource, UpdateBatch,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Sample messages kept per error kind (first seen, distinct).
pub const SAMPLES_PER_KIND: usize = 5;

/// Request counts of a benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Requests created (sent, or failed/cancelled before they could be sent).
    pub created: u64,
    /// Completed successfully.
    pub completed: u64,
    /// Errored.
    pub errored: u64,
    /// Cancelled by the client.
    pub cancelled: u64,
    /// Of `cancelled`, the requests the client gave up on by plan (`--cancel`), apart
    /// from the cancellations of a stop. Left out of reports while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cancelled_planned: u64,
    /// Of `cancelled`, the requests cut after they were sent: the server had them (cut
    /// in flight by a stop, or given up by `--cancel`). The rest were never sent (cut
    /// while a cap held them or while connecting). Left out of reports while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cancelled_sent: u64,
    /// In flight now.
    pub in_flight: u64,
    /// Held by a cap the user set (the concurrency cap, `--max-prefill-concurrency`):
    /// sent later than their intended instant, or never, for that wait.
    pub late: u64,
    /// Finished requests in the warm-up window.
    pub warmup: u64,
    /// Finished requests in the cool-down window.
    pub cooldown: u64,
    /// Requests sent a second time, on a fresh connection, because the reused
    /// connection they were first written on was closed before the server took them
    /// whole (each counted once among the outcomes). Left out of reports while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resent: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Counts {
    /// Requests that reached an outcome.
    pub fn finished(&self) -> u64 {
        self.completed + self.errored + self.cancelled
    }
}

/// One error kind's count and sample messages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorTally {
    /// Requests that failed this way.
    pub count: u64,
    /// The first few messages.
    pub samples: Vec<String>,
}

/// Where output token counts came from, over measured requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSources {
    /// Counted by the server's usage.
    pub usage: u64,
    /// Counted from streamed chunks (no usage sent).
    pub stream: u64,
    /// Not known.
    pub unknown: u64,
    /// Usage and streamed chunk counts disagreed (servers that pack tokens in chunks).
    pub mismatched: u64,
    /// Of those, the requests whose counts fitted several packings of tokens into chunks,
    /// so their ITL follows the packing the chunks' timing fits ([`ItlSpan::timed`]).
    ///
    /// [`ItlSpan::timed`]: llmsurge_proto::ItlSpan::timed
    #[serde(default, skip_serializing_if = "is_zero")]
    pub itl_timed: u64,
}

/// Measured-window totals used for throughput.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasuredTotals {
    /// Measured requests that completed.
    pub completed: u64,
    /// Measured requests that errored.
    pub errored: u64,
    /// Measured requests that were cancelled.
    pub cancelled: u64,
    /// Output tokens of completed measured requests.
    pub output_tokens: u64,
    /// Prompt tokens of completed measured requests.
    pub prompt_tokens: u64,
    /// Output tokens received for every measured request, finished or not (the usage of
    /// a completed one, what streamed of the others): what the server sent, for the
    /// cross-check with its own counters.
    #[serde(default)]
    pub received_output_tokens: u64,
    /// Completed measured requests whose output count the client does not know (a
    /// whole transcription's duration usage): `received_output_tokens` misses theirs.
    #[serde(default)]
    pub completed_outputs_unknown: u64,
    /// Prompt tokens of the measured requests the server began to answer (completed, or
    /// a token came back): prompts the server certainly processed, for the cross-check.
    #[serde(default)]
    pub answered_prompt_tokens: u64,
    /// Prompt tokens of every measured request written to the socket: the most the
    /// server can have read, for the cross-check.
    #[serde(default)]
    pub sent_prompt_tokens: u64,
    /// Measured requests written to the socket whose prompt length the client does not
    /// know (a later turn of a session, its history holding replies the client did not
    /// tokenize, cut off before the server's usage said): the server read some number of
    /// prompt tokens of theirs, so the client's count has no upper end.
    #[serde(default)]
    pub sent_prompts_unknown: u64,
    /// The longest prompt of a measured request sent whose length is known: bounds those
    /// of unknown length (a session turn's prompt is the turn before's, its reply and a
    /// new message, at most twice the longest before it in practice).
    #[serde(default)]
    pub max_prompt_tokens: u64,
    /// Output tokens the server can have generated for measured requests sent that did
    /// not complete (cancelled at a stop, or errored) beyond those received: each one's
    /// `max_tokens` less what came back (tokens generated but still in a socket buffer
    /// when the stream was cut, or after the cancel). The upper end of the client's
    /// range for the cross-check.
    #[serde(default)]
    pub unreceived_output_bound: u64,
    /// Of those, the requests that asked for no bounded output length: the server can
    /// have generated any number for them, so the client's range has no upper end.
    #[serde(default)]
    pub unreceived_output_unbounded: u64,
    /// Earliest start of a measured request.
    pub first_start: Option<MonoNanos>,
    /// Latest end of a measured request, sent or not: arrivals cut unsent at the stop
    /// (no connection took them) were offered until then, so the window, and every rate
    /// over it, runs to their end too.
    pub last_end: Option<MonoNanos>,
    /// Sum of the measured requests' times in flight (start to end), ns: over the
    /// window's duration, the mean concurrency of the measured window (Little's law).
    #[serde(default)]
    pub busy_ns: u64,
}

impl MeasuredTotals {
    /// Adds one measured request.
    fn add(&mut self, r: &RequestRecord) {
        self.received_output_tokens += u64::from(r.output_tokens);
        if r.status == RequestStatus::Completed && r.output_tokens_source == TokenSource::Unknown {
            self.completed_outputs_unknown += 1;
        }
        let prompt = u64::from(r.prompt_tokens.unwrap_or(0));
        if r.status == RequestStatus::Completed || r.first_token.is_some() {
            self.answered_prompt_tokens += prompt;
        }
        if r.start.is_some() {
            // A request resent after a reused connection closed unanswered went to the
            // server twice: it may have read the prompt both times.
            self.sent_prompt_tokens += prompt * if r.retried { 2 } else { 1 };
            match r.prompt_tokens {
                Some(n) => self.max_prompt_tokens = self.max_prompt_tokens.max(u64::from(n)),
                None => self.sent_prompts_unknown += 1,
            }
            // What the server generated and the client never read: a cut request's rest,
            // and a resent request's first try (it may have been answered unseen).
            let unfinished = r.status != RequestStatus::Completed;
            if unfinished || r.retried {
                match r.max_output_tokens {
                    Some(max) => {
                        let mut rest = 0;
                        if unfinished {
                            rest += u64::from(max.saturating_sub(r.output_tokens));
                        }
                        if r.retried {
                            rest += u64::from(max);
                        }
                        self.unreceived_output_bound += rest;
                    }
                    None => self.unreceived_output_unbounded += 1,
                }
            }
        }
        match r.status {
            RequestStatus::Completed => {
                self.completed += 1;
                self.output_tokens += u64::from(r.output_tokens);
                self.prompt_tokens += u64::from(r.prompt_tokens.unwrap_or(0));
            }
            RequestStatus::Errored => self.errored += 1,
            RequestStatus::Cancelled => self.cancelled += 1,
        }
        self.last_end = Some(self.last_end.map_or(r.end, |e| e.max(r.end)));
        if let Some(start) = r.start {
            self.first_start = Some(self.first_start.map_or(start, |f| f.min(start)));
            let busy = u64::try_from(r.end.since(start).as_nanos()).unwrap_or(u64::MAX);
            self.busy_ns = self.busy_ns.saturating_add(busy);
        }
    }
}

/// One model's part of a benchmark (`--lora`): the same books as the whole, kept only
/// for the requests that named this model.
#[derive(Clone, Debug, Default)]
pub struct ModelState {
    /// The model name.
    pub name: String,
    /// Its configured share of the requests.
    pub weight: f64,
    /// Its requests, counted as they finish (`in_flight` stays 0).
    pub counts: Counts,
    /// Measured-window totals.
    pub measured: MeasuredTotals,
    /// Histograms of its measured requests.
    pub metrics: MetricSet,
    /// Its completed measured requests that met the goodput thresholds.
    pub good_requests: u64,
    /// Its errors per kind.
    pub errors: BTreeMap<ErrorKind, ErrorTally>,
}

/// Whether `r` was given up by plan (`--cancel`), not cut off by a stop or a failure.
pub fn is_planned(r: &RequestRecord) -> bool {
    r.status == RequestStatus::Cancelled
        && r.error
            .as_ref()
            .is_some_and(|e| e.kind == ErrorKind::Planned)
}

/// Counts `n` errors in a tally, keeping the first few distinct messages.
fn tally(t: &mut ErrorTally, n: u64, message: &str) {
    t.count += n;
    if t.samples.len() < SAMPLES_PER_KIND && !t.samples.iter().any(|s| s == message) {
        t.samples.push(message.to_string());
    }
}

#[derive(Debug, Default)]
struct WorkerTrack {
    in_flight: HashMap<u64, RequestStarted>,
    /// Requests this worker sent, by its reports (plus, once it died, the ones shared
    /// memory counted that it never reported).
    started: u64,
}

/// The end-of-benchmark audit of the books: what the coordinator counted against what
/// shared memory counted, and the accounting identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Audit {
    /// Requests the workers sent, by shared memory's count (written before each send).
    pub sent_shm: u64,
    /// Requests sent, by the coordinator's books (reported, or accounted for a dead worker).
    pub sent_books: u64,
    /// Slots the strategy clock handed out.
    pub slots_claimed: u64,
    /// Slots handed back unsent because a stop came before they were due.
    pub slots_returned: u64,
    /// Requests of dead workers that shared memory counted as sent but the worker never
    /// reported (counted as errored, or cancelled when the coordinator killed it).
    pub unreported: u64,
    /// Slots dead workers had claimed but neither sent nor handed back (waiting for
    /// their instant or for a cap when the worker died): counted as created and errored
    /// (cancelled when the coordinator killed it), with no record.
    #[serde(default)]
    pub unsent_lost: u64,
    /// Each disagreement found, one sentence each; empty when the books balance.
    pub mismatches: Vec<String>,
}

impl Audit {
    /// Nothing was audited: a report older than the audit, or a benchmark that claimed
    /// no slot.
    pub fn is_unset(&self) -> bool {
        *self == Self::default()
    }
}

/// Shared memory's counts at the end of a benchmark, for [`WorkerGroupState::audit`].
#[derive(Clone, Debug, Default)]
pub struct ShmCounts {
    /// Requests sent, per worker.
    pub started: Vec<u64>,
    /// Slots handed out.
    pub slots_claimed: u64,
    /// Slots handed back unsent.
    pub slots_returned: u64,
    /// Requests in flight across the group.
    pub in_flight: u64,
}

/// How the requests of a dead worker that have no record are counted.
#[derive(Clone, Debug)]
struct LostAs {
    status: RequestStatus,
    error: RequestError,
    phase: Phase,
}

/// How a dead worker ended, for [`WorkerGroupState::worker_lost`].
#[derive(Clone, Copy, Debug)]
pub struct Loss<'a> {
    /// What happened, for the error messages.
    pub reason: &'a str,
    /// The coordinator killed it on purpose (its requests are cancelled, not errored).
    pub deliberate: bool,
    /// When it was noticed.
    pub now: MonoNanos,
    /// Requests it sent, by shared memory's count.
    pub shm_started: u64,
    /// The newest slot claimed in the group: the stand-in slot of requests it sent but
    /// never reported (their slots are unknown; they were claimed last).
    pub newest_slot: u64,
}

/// The coordinator's state of one running benchmark.
#[derive(Debug)]
pub struct WorkerGroupState {
    limits: Limits,
    workers: Vec<WorkerTrack>,
    /// Request counts.
    pub counts: Counts,
    /// Errors per kind.
    pub errors: BTreeMap<ErrorKind, ErrorTally>,
    /// Merged histograms of measured requests.
    pub metrics: MetricSet,
    /// Measured-window totals.
    pub measured: MeasuredTotals,
    /// Output token sources.
    pub token_sources: TokenSources,
    /// `--session-token`: tokens the server handed out that were refused (bytes that
    /// may not go back in a request header as they are), every window.
    pub tokens_refused: u64,
    /// Per-second series.
    pub timeseries: TimeSeries,
    /// The measured requests sent after the last success, for the server-lost verdict.
    pub error_tail: crate::error_tail::ErrorTail,
    /// Send of the latest successful request, every window: the server answered then
    /// (the next benchmark's server-lost verdict starts from it).
    pub last_success: Option<MonoNanos>,
    /// Latencies by the second requests started in, for the steady-state window.
    pub steady: crate::steady::SteadyCollector,
    /// The arrivals' waits from intent, for the kept-up rule.
    pub intent_drift: crate::intent_drift::IntentDriftCollector,
    /// Output lengths asked against received, and finish reasons.
    pub output_lengths: crate::output_lengths::OutputLengthCollector,
    /// Per-request goodput thresholds, when set.
    pub goodput: Option<GoodputSpec>,
    /// Completed measured requests that met them.
    pub good_requests: u64,
    /// Warm-up and cool-down, to tag the requests of a dead worker.
    pub window: MeasureWindow,
    t0: MonoNanos,
    /// Requests of dead workers that were sent but never reported.
    unreported: u64,
    /// Slots dead workers took with them unsent ([`Audit::unsent_lost`]).
    unsent_lost: u64,
    /// The last loss of a worker: how its requests without a record are counted.
    last_loss: Option<LostAs>,
    /// Unfinished measured requests whose elapsed time already missed a threshold.
    pub unfinished_not_good: u64,
    /// Measured requests given up by plan (`--cancel`), left out of goodput.
    pub planned_given_up: u64,
    /// `--lora`: each model's part, in the split's order (a record's `model` indexes
    /// it). Empty without a split, which then costs nothing.
    pub models: Vec<ModelState>,
    /// Multi-turn sessions: each session's outcome and the per-turn-index latencies.
    pub sessions: crate::sessions::SessionBook,
    /// Agent traces: each trace's calls, for its duration and critical path.
    pub agent_traces: crate::agent_traces::AgentBook,
    /// `--max-prefill-concurrency`: the waits for the cap; `None` without one.
    pub prefill: Option<crate::prefill::PrefillWaits>,
}

impl WorkerGroupState {
    /// State for `workers` workers starting at `t0`.
    pub fn new(workers: u32, t0: MonoNanos, limits: Limits) -> Self {
        Self {
            limits,
            workers: (0..workers).map(|_| WorkerTrack::default()).collect(),
            counts: Counts::default(),
            errors: BTreeMap::new(),
            metrics: MetricSet::new(),
            measured: MeasuredTotals::default(),
            token_sources: TokenSources::default(),
            tokens_refused: 0,
            timeseries: TimeSeries::new(t0),
            error_tail: crate::error_tail::ErrorTail::default(),
            last_success: None,
            steady: crate::steady::SteadyCollector::new(t0),
            intent_drift: crate::intent_drift::IntentDriftCollector::new(t0),
            output_lengths: Default::default(),
            goodput: None,
            good_requests: 0,
            window: MeasureWindow::default(),
            t0,
            unreported: 0,
            unsent_lost: 0,
            last_loss: None,
            unfinished_not_good: 0,
            planned_given_up: 0,
            models: Vec::new(),
            sessions: crate::sessions::SessionBook::default(),
            agent_traces: crate::agent_traces::AgentBook::default(),
            prefill: None,
        }
    }

    /// Keeps per-model books for the models of a `--lora` split.
    pub fn set_models(&mut self, lora: &llmsurge_proto::LoraSpec) {
        self.models = lora
            .models
            .iter()
            .map(|m| ModelState {
                name: m.name.clone(),
                weight: m.weight,
                ..ModelState::default()
            })
            .collect();
    }

    /// Applies one batch from `worker`; `on_record` sees every finished record. Returns
    /// the constraint that fired, if any.
    pub fn apply(
        &mut self,
        worker: u32,
        batch: &UpdateBatch,
        on_record: &mut dyn FnMut(&RequestRecord),
    ) -> Result<Option<StopReason>, MetricsError> {
        self.metrics.merge_encoded(&batch.metrics)?;
        for mm in &batch.model_metrics {
            if let Some(m) = self.models.get_mut(usize::from(mm.model)) {
                m.metrics.merge_encoded(&mm.metrics)?;
            }
        }
        for s in &batch.started {
            self.counts.created += 1;
            self.counts.in_flight += 1;
            if let Some(track) = self.workers.get_mut(worker as usize) {
                track.in_flight.insert(s.slot, *s);
                track.started += 1;
            }
        }
        for r in &batch.finished {
            let was_in_flight = self
                .workers
                .get_mut(worker as usize)
                .and_then(|t| t.in_flight.remove(&r.slot))
                .is_some();
            if was_in_flight {
                self.counts.in_flight -= 1;
            } else {
                // Failed or cancelled before it was sent.
                self.counts.created += 1;
            }
            self.account(r);
            on_record(r);
        }
        Ok(self.limits.check_errors(
            self.counts.completed + self.counts.errored,
            self.counts.errored,
        ))
    }

    fn account(&mut self, r: &RequestRecord) {
        match r.session {
            Some(tag) if tag.graph.is_some() => self.agent_traces.add(tag, r),
            Some(tag) => self.sessions.add(tag, r),
            None => {}
        }
        if let Some(i) = r.model {
            self.account_model(usize::from(i), r);
        }
        match r.status {
            RequestStatus::Completed => {
                self.counts.completed += 1;
                self.last_success = self.last_success.max(Some(r.start.unwrap_or(r.scheduled)));
            }
            RequestStatus::Errored => self.counts.errored += 1,
            RequestStatus::Cancelled => self.counts.cancelled += 1,
        }
        if is_planned(r) {
            self.counts.cancelled_planned += 1;
        }
        if r.status == RequestStatus::Cancelled && r.start.is_some() {
            self.counts.cancelled_sent += 1;
        }
        if r.late {
            self.counts.late += 1;
        }
        if r.retried {
            self.counts.resent += 1;
        }
        if r.token_refused {
            self.tokens_refused += 1;
        }
        if let Some(e) = &r.error
            && r.status == RequestStatus::Errored
        {
            let tally = self.errors.entry(e.kind).or_default();
            tally.count += 1;
            if tally.samples.len() < SAMPLES_PER_KIND && !tally.samples.contains(&e.message) {
                tally.samples.push(e.message.clone());
            }
        }
        // Every phase: a clog in the warm-up leaves the measured arrivals no answer to
        // be judged by (the collector counts only measured ones beyond that scale).
        self.intent_drift.add(r);
        match r.phase {
            Phase::Warmup => self.counts.warmup += 1,
            Phase::Cooldown => self.counts.cooldown += 1,
            Phase::Measured => self.account_measured(r),
        }
    }

    /// The counts, measured totals and goodput of one model's request (its histograms
    /// come from the worker's per-model delta).
    fn account_model(&mut self, i: usize, r: &RequestRecord) {
        let good = self.goodput.as_ref().is_some_and(|spec| {
            r.status == RequestStatus::Completed
                && r.latency()
                    .is_some_and(|e2e| spec.is_good(r.ttft(), r.tpot(), e2e))
        });
        let Some(m) = self.models.get_mut(i) else {
            return;
        };
        let c = &mut m.counts;
        c.created += 1;
        match r.status {
            RequestStatus::Completed => c.completed += 1,
            RequestStatus::Errored => c.errored += 1,
            RequestStatus::Cancelled => c.cancelled += 1,
        }
        if r.late {
            c.late += 1;
        }
        if let Some(e) = &r.error
            && r.status == RequestStatus::Errored
        {
            tally(m.errors.entry(e.kind).or_default(), 1, &e.message);
        }
        match r.phase {
            Phase::Warmup => c.warmup += 1,
            Phase::Cooldown => c.cooldown += 1,
            Phase::Measured => {
                // From intent: the coordinator has every record (the worker's histograms
                // come from the worker's delta).
                crate::intent::record(&mut m.metrics, r);
                m.measured.add(r);
                if good {
                    m.good_requests += 1;
                }
            }
        }
    }

    fn account_measured(&mut self, r: &RequestRecord) {
        if let Some(p) = &mut self.prefill {
            p.add(r);
        }
        crate::intent::record(&mut self.metrics, r);
        self.timeseries.add(r);
        self.error_tail.add(r);
        self.steady.add(r);
        self.output_lengths.add(r);
        self.measured.add(r);
        if let Some(spec) = &self.goodput {
            match (r.status, r.latency()) {
                (RequestStatus::Completed, Some(e2e)) if spec.is_good(r.ttft(), r.tpot(), e2e) => {
                    self.good_requests += 1;
                }
                // The user's own give-up: neither good nor judged.
                (RequestStatus::Cancelled, _) if is_planned(r) => {
                    self.planned_given_up += 1;
                }
                (RequestStatus::Cancelled, _) if spec.already_missed(r) => {
                    self.unfinished_not_good += 1;
                }
                _ => {}
            }
        }
        if r.status == RequestStatus::Completed {
            let ts = &mut self.token_sources;
            match r.output_tokens_source {
                TokenSource::Usage => ts.usage += 1,
                TokenSource::Stream => ts.stream += 1,
                TokenSource::Unknown => ts.unknown += 1,
            }
            if r.output_tokens_source == TokenSource::Usage
                && r.streamed
                && r.streamed_tokens > 0
                && r.streamed_tokens != r.output_tokens
            {
                ts.mismatched += 1;
            }
            if r.itl.is_some_and(|i| i.timed) {
                ts.itl_timed += 1;
            }
        }
    }

    /// Accounts every request in flight on a dead worker as errored with the loss's
    /// reason (or as cancelled when the coordinator killed it on purpose), each in the
    /// phase its slot and scheduled time fall in, and the requests shared memory says it
    /// sent but it never reported. Returns how many requests that was.
    pub fn worker_lost(
        &mut self,
        worker: u32,
        loss: Loss<'_>,
        on_record: &mut dyn FnMut(&RequestRecord),
    ) -> u64 {
        let Some(track) = self.workers.get_mut(worker as usize) else {
            return 0;
        };
        let mut lost: Vec<RequestStarted> = track.in_flight.drain().map(|(_, s)| s).collect();
        lost.sort_by_key(|s| s.slot);
        // Sent (shared memory counted them before the send) but never reported.
        let unreported = loss.shm_started.saturating_sub(track.started);
        track.started += unreported;
        let (status, kind) = if loss.deliberate {
            (RequestStatus::Cancelled, ErrorKind::Cancelled)
        } else {
            (RequestStatus::Errored, ErrorKind::WorkerDied)
        };
        let error = RequestError {
            kind,
            message: loss.reason.to_string(),
        };
        let n = lost.len() as u64;
        for s in lost {
            self.counts.in_flight -= 1;
            let record = RequestRecord {
                slot: s.slot,
                worker,
                status,
                error: Some(error.clone()),
                scheduled: s.scheduled,
                start: Some(s.start),
                first_token: None,
                first_content: None,
                first_tool: None,
                end: loss.now,
                itl: None,
                prompt_tokens: s.prompt_tokens,
                output_tokens: 0,
                output_tokens_source: TokenSource::Unknown,
                reasoning_tokens: None,
                streamed_tokens: 0,
                max_output_tokens: s.max_output_tokens,
                streamed: true,
                phase: self.window.phase(s.slot, s.scheduled.since(self.t0)),
                late: false,
                retried: false,
                token_refused: false,
                model: s.model,
                // Its trace ids (they derive from the session) are the ones it was sent with.
                session: s.session,
                media: None,
                prefill_wait: None,
                concurrency_wait: None,
                finish_reason: None,
            };
            if record.phase == Phase::Measured {
                // Made here, not in a worker: its lower bounds are recorded here too.
                llmsurge_proto::metrics::record_lower_bounds(&mut self.metrics, &record);
                if let Some(m) = record
                    .model
                    .and_then(|i| self.models.get_mut(usize::from(i)))
                {
                    llmsurge_proto::metrics::record_lower_bounds(&mut m.metrics, &record);
                }
            }
            self.account(&record);
            on_record(&record);
        }
        // No record for these: their slots and times are unknown. They count as created
        // and failed, in the phase of the newest slot at the time of death.
        let lost_as = LostAs {
            status,
            error,
            phase: self.window.phase(loss.newest_slot, loss.now.since(self.t0)),
        };
        self.unreported += unreported;
        self.count_without_record(unreported, &lost_as);
        self.last_loss = Some(lost_as);
        n + unreported
    }

    /// Once every worker has finished or died: the slots dead workers claimed but
    /// neither sent nor handed back (waiting for their instant, or held by a cap), from
    /// shared memory's slot counts, counted as created and failed like the requests
    /// they sent but never reported. Every surviving worker's slots are its requests or
    /// handed back, so what the books lack is the dead ones'. Returns how many.
    pub fn account_unsent_of_dead(&mut self, slots_claimed: u64, slots_returned: u64) -> u64 {
        let Some(lost_as) = self.last_loss.take() else {
            return 0;
        };
        let unsent = slots_claimed.saturating_sub(self.counts.created + slots_returned);
        self.unsent_lost += unsent;
        self.count_without_record(unsent, &lost_as);
        self.last_loss = Some(lost_as);
        unsent
    }

    /// Counts `n` requests of a dead worker that have no record as created and failed.
    fn count_without_record(&mut self, n: u64, lost: &LostAs) {
        if n == 0 {
            return;
        }
        let (status, error) = (lost.status, &lost.error);
        self.counts.created += n;
        match status {
            RequestStatus::Cancelled => self.counts.cancelled += n,
            _ => self.counts.errored += n,
        }
        if status == RequestStatus::Errored {
            let tally = self.errors.entry(error.kind).or_default();
            tally.count += n;
            if tally.samples.len() < SAMPLES_PER_KIND && !tally.samples.contains(&error.message) {
                tally.samples.push(error.message.clone());
            }
        }
        match lost.phase {
            Phase::Warmup => self.counts.warmup += n,
            Phase::Cooldown => self.counts.cooldown += n,
            Phase::Measured => match status {
                RequestStatus::Cancelled => self.measured.cancelled += n,
                _ => self.measured.errored += n,
            },
        }
    }

    /// Checks the books at the end of a benchmark: the identity `created = completed +
    /// errored + cancelled` with nothing in flight, the requests sent by shared memory's
    /// count against the coordinator's, and (when no worker died, since a dead worker
    /// takes the slots it held with it) every claimed slot became a request or was handed
    /// back.
    pub fn audit(&self, shm: &ShmCounts, every_worker_finished: bool) -> Audit {
        let c = &self.counts;
        let sent_books: u64 = self.workers.iter().map(|t| t.started).sum();
        let sent_shm: u64 = shm.started.iter().sum();
        let mut mismatches = Vec::new();
        if c.in_flight != 0 || c.created != c.finished() {
            mismatches.push(format!(
                "created {} but completed {} + errored {} + cancelled {} = {} ({} still counted in flight)",
                c.created,
                c.completed,
                c.errored,
                c.cancelled,
                c.finished(),
                c.in_flight
            ));
        }
        for (id, track) in self.workers.iter().enumerate() {
            let counted = shm.started.get(id).copied().unwrap_or(0);
            if counted != track.started {
                mismatches.push(format!(
                    "worker {id} sent {counted} requests by shared memory's count, {} by its reports",
                    track.started
                ));
            }
        }
        if shm.in_flight != 0 {
            mismatches.push(format!(
                "shared memory still counts {} requests in flight",
                shm.in_flight
            ));
        }
        if every_worker_finished && shm.slots_claimed != c.created + shm.slots_returned {
            mismatches.push(format!(
                "{} slots were claimed but {} became requests and {} were handed back unsent",
                shm.slots_claimed, c.created, shm.slots_returned
            ));
        }
        Audit {
            sent_shm,
            sent_books,
            slots_claimed: shm.slots_claimed,
            slots_returned: shm.slots_returned,
            unreported: self.unreported,
            unsent_lost: self.unsent_lost,
            mismatches,
        }
    }

    /// Requests in flight on `worker`.
    pub fn in_flight_on(&self, worker: u32) -> usize {
        self.workers
            .get(worker as usize)
            .map_or(0, |t| t.in_flight.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::{Metric, StatusClass};

    fn started(slot: u64) -> RequestStarted {
        RequestStarted {
            slot,
            scheduled: MonoNanos(1),
            start: MonoNanos(2),
            model: None,
            session: None,
            prompt_tokens: None,
            max_output_tokens: None,
        }
    }

    fn finished(slot: u64, status: RequestStatus, kind: Option<ErrorKind>) -> RequestRecord {
        RequestRecord {
            slot,
            status,
            error: kind.map(|kind| RequestError {
                kind,
                message: format!("{kind} on {slot}"),
            }),
            scheduled: MonoNanos(1),
            prompt_tokens: Some(3),
            ..RequestRecord::completed(MonoNanos(2), None, MonoNanos(5), 4)
        }
    }

    #[test]
    fn counts_keep_the_identity_through_a_worker_death() {
        let mut st = WorkerGroupState::new(2, MonoNanos(0), Limits::default());
        let mut seen = 0;
        let mut count = |_: &RequestRecord| seen += 1;
        let batch = UpdateBatch {
            started: (0..5).map(started).collect(),
            finished: vec![
                finished(0, RequestStatus::Completed, None),
                finished(
                    1,
                    RequestStatus::Errored,
                    Some(ErrorKind::Http { status: 500 }),
                ),
                // Never sent: counted as created when it finishes.
                RequestRecord {
                    start: None,
                    ..finished(9, RequestStatus::Cancelled, Some(ErrorKind::Cancelled))
                },
            ],
            metrics: Default::default(),
            model_metrics: Vec::new(),
        };
        assert_eq!(st.apply(0, &batch, &mut count).expect("apply"), None);
        assert_eq!(st.counts.in_flight, 3);
        assert_eq!(st.in_flight_on(0), 3);
        assert_eq!(
            st.worker_lost(0, loss("worker 0 died: signal 9", false, 5), &mut |_| {}),
            3
        );
        let c = st.counts;
        assert_eq!(c.in_flight, 0);
        assert_eq!(c.created, 6);
        assert_eq!(c.created, c.completed + c.errored + c.cancelled);
        assert_eq!((c.completed, c.errored, c.cancelled), (1, 4, 1));
        assert_eq!(st.errors[&ErrorKind::WorkerDied].count, 3);
        assert_eq!(
            st.errors[&ErrorKind::WorkerDied].samples,
            vec!["worker 0 died: signal 9"]
        );
        assert_eq!(st.errors[&ErrorKind::Http { status: 500 }].count, 1);
        assert_eq!(seen, 3);
        assert_eq!(st.measured.output_tokens, 4);
    }

    #[test]
    fn the_client_counts_for_the_cross_checks_what_the_server_can_have_seen() {
        let mut m = MeasuredTotals::default();
        // Resent after a reused connection closed unanswered: the prompt went twice.
        m.add(&RequestRecord {
            retried: true,
            token_refused: false,
            ..finished(0, RequestStatus::Completed, None)
        });
        m.add(&finished(1, RequestStatus::Completed, None));
        assert_eq!(m.sent_prompt_tokens, 3 * 2 + 3);
        assert_eq!(m.answered_prompt_tokens, 3 + 3);
        // A completed request whose output count the client does not know.
        assert_eq!(m.completed_outputs_unknown, 0);
        m.add(&RequestRecord {
            output_tokens: 0,
            output_tokens_source: TokenSource::Unknown,
            ..finished(2, RequestStatus::Completed, None)
        });
        assert_eq!(m.completed_outputs_unknown, 1);
        // Nothing the server can have generated unseen yet.
        assert_eq!(m.unreceived_output_bound, 0);
        // Cut at the stop after 30 of its 200 tokens: up to 170 more generated.
        let cut = |status, output_tokens, max_output_tokens| RequestRecord {
            output_tokens,
            max_output_tokens,
            ..finished(3, status, None)
        };
        m.add(&cut(RequestStatus::Cancelled, 30, Some(200)));
        // Errored after sending, before any token: up to all 200.
        m.add(&cut(RequestStatus::Errored, 0, Some(200)));
        // Completed: what it received is what the server generated.
        m.add(&cut(RequestStatus::Completed, 200, Some(200)));
        // Resent after its first try's connection closed unanswered: the first try may
        // have been generated whole.
        m.add(&RequestRecord {
            retried: true,
            token_refused: false,
            ..cut(RequestStatus::Completed, 10, Some(10))
        });
        assert_eq!(m.unreceived_output_bound, 170 + 200 + 10);
        // The first request above was resent and named no max_tokens: unbounded.
        assert_eq!(m.unreceived_output_unbounded, 1);
        // Never sent: the server saw nothing of it.
        m.add(&RequestRecord {
            start: None,
            ..cut(RequestStatus::Errored, 0, Some(200))
        });
        assert_eq!(m.unreceived_output_bound, 380);
        // Cut, with no max_tokens: no bound.
        m.add(&cut(RequestStatus::Cancelled, 5, None));
        assert_eq!(
            (m.unreceived_output_bound, m.unreceived_output_unbounded),
            (380, 2)
        );
    }

    #[test]
    fn a_deliberate_kill_cancels_rather_than_errors() {
        let mut st = WorkerGroupState::new(1, MonoNanos(0), Limits::default());
        let batch = UpdateBatch {
            started: vec![started(0)],
            ..Default::default()
        };
        st.apply(0, &batch, &mut |_| {}).expect("apply");
        st.worker_lost(0, loss("interrupted", true, 1), &mut |_| {});
        assert_eq!((st.counts.cancelled, st.counts.errored), (1, 0));
    }

    fn loss(reason: &str, deliberate: bool, shm_started: u64) -> Loss<'_> {
        Loss {
            reason,
            deliberate,
            now: MonoNanos(9),
            shm_started,
            newest_slot: 0,
        }
    }

    #[test]
    fn each_model_of_a_split_keeps_its_own_books() {
        let mut st = WorkerGroupState::new(1, MonoNanos(0), Limits::default());
        st.set_models(&llmsurge_proto::LoraSpec {
            models: vec![
                llmsurge_proto::LoraModel {
                    name: "a".into(),
                    weight: 0.5,
                },
                llmsurge_proto::LoraModel {
                    name: "b".into(),
                    weight: 0.5,
                },
            ],
        });
        let of = |slot, model, status, kind| RequestRecord {
            model,
            session: None,
            ..finished(slot, status, kind)
        };
        let mut delta = MetricSet::new();
        delta.record(StatusClass::Successful, Metric::Ttft, 1_000);
        let batch = UpdateBatch {
            started: (0..4)
                .map(|s| RequestStarted {
                    model: Some(if s == 3 { 1 } else { 0 }),
                    session: None,
                    prompt_tokens: None,
                    max_output_tokens: None,
                    ..started(s)
                })
                .collect(),
            finished: vec![
                of(0, Some(0), RequestStatus::Completed, None),
                of(1, Some(0), RequestStatus::Errored, Some(ErrorKind::Timeout)),
                of(2, Some(1), RequestStatus::Completed, None),
            ],
            model_metrics: vec![llmsurge_proto::ModelMetrics {
                model: 1,
                metrics: delta.encode().expect("encode"),
            }],
            ..Default::default()
        };
        st.apply(0, &batch, &mut |_| {}).expect("apply");
        // Slot 3 dies in flight on model b: still b's, as an error.
        st.worker_lost(0, loss("worker 0 died", false, 4), &mut |_| {});
        let (a, b) = (&st.models[0], &st.models[1]);
        assert_eq!((a.counts.completed, a.counts.errored), (1, 1));
        assert_eq!((b.counts.completed, b.counts.errored), (1, 1));
        assert_eq!(a.counts.created + b.counts.created, st.counts.created);
        assert_eq!(
            a.errors.keys().copied().collect::<Vec<_>>(),
            vec![ErrorKind::Timeout]
        );
        assert_eq!(b.errors[&ErrorKind::WorkerDied].count, 1);
        assert_eq!(b.measured.completed, 1);
        assert!(
            a.metrics
                .get(StatusClass::Successful, Metric::Ttft)
                .is_none()
        );
        assert_eq!(
            b.metrics
                .get(StatusClass::Successful, Metric::Ttft)
                .map(|h| h.len()),
            Some(1)
        );
        // The dead worker's request left its lower bound in b's histograms.
        assert!(
            b.metrics
                .get(StatusClass::Errored, Metric::TtftWithIncomplete)
                .is_some()
        );
    }

    #[test]
    fn a_dead_workers_requests_keep_the_phase_of_their_slot() {
        let mut st = WorkerGroupState::new(1, MonoNanos(0), Limits::default());
        st.window = MeasureWindow {
            warmup_slots: Some(2),
            ..MeasureWindow::default()
        };
        let batch = UpdateBatch {
            started: (0..3).map(started).collect(),
            ..Default::default()
        };
        st.apply(0, &batch, &mut |_| {}).expect("apply");
        let mut phases = Vec::new();
        st.worker_lost(0, loss("worker 0 died: signal 9", false, 3), &mut |r| {
            phases.push((r.slot, r.phase))
        });
        assert_eq!(
            phases,
            vec![(0, Phase::Warmup), (1, Phase::Warmup), (2, Phase::Measured)]
        );
        assert_eq!((st.counts.warmup, st.measured.errored), (2, 1));
    }

    #[test]
    fn requests_a_dead_worker_sent_but_never_reported_are_counted() {
        let mut st = WorkerGroupState::new(1, MonoNanos(0), Limits::default());
        let batch = UpdateBatch {
            started: vec![started(0)],
            ..Default::default()
        };
        st.apply(0, &batch, &mut |_| {}).expect("apply");
        // Shared memory counted 4 sends; one was reported.
        let lost = st.worker_lost(0, loss("worker 0 died: signal 9", false, 4), &mut |_| {});
        assert_eq!(lost, 4);
        let c = st.counts;
        assert_eq!((c.created, c.errored, c.in_flight), (4, 4, 0));
        assert_eq!(st.errors[&ErrorKind::WorkerDied].count, 4);
        let audit = st.audit(
            &ShmCounts {
                started: vec![4],
                slots_claimed: 5,
                ..ShmCounts::default()
            },
            false,
        );
        assert_eq!(audit.mismatches, Vec::<String>::new());
        assert_eq!(
            (audit.sent_shm, audit.sent_books, audit.unreported),
            (4, 4, 3)
        );
    }

    #[test]
    fn the_audit_names_every_disagreement() {
        let mut st = WorkerGroupState::new(1, MonoNanos(0), Limits::default());
        let batch = UpdateBatch {
            started: vec![started(0)],
            finished: vec![finished(0, RequestStatus::Completed, None)],
            ..Default::default()
        };
        st.apply(0, &batch, &mut |_| {}).expect("apply");
        let balanced = ShmCounts {
            started: vec![1],
            slots_claimed: 2,
            slots_returned: 1,
            in_flight: 0,
        };
        assert!(st.audit(&balanced, true).mismatches.is_empty());
        // A slot the pacer held and dropped, and a send nobody reported.
        let off = ShmCounts {
            started: vec![2],
            slots_claimed: 2,
            ..ShmCounts::default()
        };
        let m = st.audit(&off, true).mismatches;
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m[0].contains("worker 0 sent 2"), "{m:?}");
        assert!(m[1].contains("2 slots were claimed"), "{m:?}");
        st.counts.created += 1;
        assert!(st.audit(&balanced, true).mismatches[0].starts_with("created 2"));
    }

    #[test]
    fn error_constraints_are_evaluated_on_every_batch() {
        let limits = Limits {
            max_errors: Some(2),
            ..Limits::default()
        };
        let mut st = WorkerGroupState::new(1, MonoNanos(0), limits);
        let one_error = |slot| UpdateBatch {
            finished: vec![finished(
                slot,
                RequestStatus::Errored,
                Some(ErrorKind::Timeout),
            )],
            ..Default::default()
        };
        assert_eq!(
            st.apply(0, &one_error(0), &mut |_| {}).expect("apply"),
            None
        );
        assert_eq!(
            st.apply(0, &one_error(1), &mut |_| {}).expect("apply"),
            Some(StopReason::MaxErrors { errors: 2 })
        );
    }

    #[test]
    fn histogram_deltas_are_merged() {
        let mut st = WorkerGroupState::new(1, MonoNanos(0), Limits::default());
        let mut delta = MetricSet::new();
        delta.record(StatusClass::Successful, Metric::Ttft, 1234);
        let batch = UpdateBatch {
            metrics: delta.encode().expect("encode"),
            ..Default::default()
        };
        st.apply(0, &batch, &mut |_| {}).expect("apply");
        st.apply(0, &batch, &mut |_| {}).expect("apply");
        assert_eq!(
            st.metrics
                .get(StatusClass::Successful, Metric::Ttft)
                .map(|h| h.len()),
            Some(2)
        );
    }
}
