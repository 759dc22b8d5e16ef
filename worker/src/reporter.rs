//! Turns finished exchanges into records and histogram deltas, batched for the IPC.
//!
//! Metrics follow DESIGN.md: `start` is the instant the request was handed to the socket;
//! TTFT is the first content token (`ttft_any` the first of any kind); ITL is every gap
//! between output tokens, reasoning or content, a chunk of `k` tokens contributing `k`
//! gaps of `gap / k`; TPOT is `(e2e − ttft_any) / (tokens − 1)`. A request that did not
//! finish also records lower bounds of its latencies (`…_with_incomplete`). Only
//! measured-window requests feed the histograms; every request gets a record.

use crate::backend::Exchange;
pub use crate::itl::Chunks;
use crate::itl::packing;
use llmsurge_proto::{
    ItlSpan, MeasureWindow, Metric, MetricSet, ModelMetrics, MonoNanos, Phase, RequestMedia,
    RequestRecord, RequestStarted, RequestStatus, SessionTag, StatusClass, TokenSource,
    UpdateBatch,
    metrics::{MetricsError, micros, record_lower_bounds},
};
use std::sync::Arc;

/// What the request loop knows about a request besides its exchange.
#[derive(Clone, Debug)]
pub struct SlotInfo {
    /// The slot index.
    pub slot: u64,
    /// When it was due.
    pub scheduled: MonoNanos,
    /// It waited for the concurrency cap.
    pub late: bool,
    /// The client's prompt length, when known.
    pub prompt_tokens: Option<u32>,
    /// The most output tokens the request asked for (see [`Backend::max_output_tokens`]).
    ///
    /// [`Backend::max_output_tokens`]: crate::backend::Backend::max_output_tokens
    pub max_output_tokens: Option<u32>,
    /// Stream strategies: when the stream's previous request ended.
    pub previous_end: Option<MonoNanos>,
    /// `--lora`: the index of the request's model in the split (see
    /// [`Reporter::model_index`]).
    pub model: Option<u16>,
    /// Multi-turn sessions: the session and turn.
    pub session: Option<SessionTag>,
    /// The sizes of the request's media, when it has any (moved into its record).
    pub media: Option<Box<RequestMedia>>,
    /// Sticky routing: the session id the backend sends in its session header (see
    /// [`crate::PreparedRequest::session`]).
    pub session_key: Option<Arc<str>>,
}

impl SlotInfo {
    /// Slot `slot`, due at `scheduled`, with nothing else known yet.
    pub fn due(slot: u64, scheduled: MonoNanos) -> Self {
        SlotInfo {
            slot,
            scheduled,
            late: false,
            prompt_tokens: None,
            max_output_tokens: None,
            previous_end: None,
            model: None,
            session: None,
            media: None,
            session_key: None,
        }
    }
}

/// Accumulates one flush interval of transitions.
#[derive(Debug)]
pub struct Reporter {
    worker: u32,
    t0: MonoNanos,
    window: MeasureWindow,
    batch: UpdateBatch,
    metrics: MetricSet,
    /// `--lora`: the split's model names, in order; empty without a split.
    models: Vec<Arc<str>>,
    /// `--lora`: the histograms per model (same order), beside `metrics`.
    model_metrics: Vec<MetricSet>,
    /// Responses are streamed (`--stream`); a whole body has no TPOT or ITL.
    streamed: bool,
}

impl Reporter {
    /// A reporter for `worker`, with the group's start instant and measure window.
    pub fn new(worker: u32, t0: MonoNanos, window: MeasureWindow) -> Self {
        Self {
            worker,
            t0,
            window,
            batch: UpdateBatch::default(),
            metrics: MetricSet::new(),
            models: Vec::new(),
            model_metrics: Vec::new(),
            streamed: true,
        }
    }

    /// Responses come as one body (`--stream false`): their records say so, and carry
    /// no TPOT, ITL or stream count (the client cannot see tokens arrive).
    pub fn whole_bodies(mut self) -> Self {
        self.streamed = false;
        self
    }

    /// Keeps histograms per model of a `--lora` split as well (`names` in the split's
    /// order). Without it no per-model work is done.
    pub fn with_models(mut self, names: impl IntoIterator<Item = impl Into<Arc<str>>>) -> Self {
        self.models = names.into_iter().map(Into::into).collect();
        self.model_metrics = vec![MetricSet::new(); self.models.len()];
        self
    }

    /// The split's index of the model a request named; `None` without a split or for a
    /// name outside it (a source that set its own model).
    pub fn model_index(&self, model: Option<&Arc<str>>) -> Option<u16> {
        let model = model?;
        // A handful of short names: a scan beats hashing.
        let i = self.models.iter().position(|n| **n == **model)?;
        u16::try_from(i).ok()
    }

    /// The phase a slot falls in.
    pub fn phase(&self, slot: u64, scheduled: MonoNanos) -> Phase {
        self.window.phase(slot, scheduled.since(self.t0))
    }

    /// A request was sent.
    pub fn started(&mut self, info: &SlotInfo, start: MonoNanos) {
        self.batch.started.push(RequestStarted {
            slot: info.slot,
            scheduled: info.scheduled,
            start,
            model: info.model,
            session: info.session,
            prompt_tokens: info.prompt_tokens,
            max_output_tokens: info.max_output_tokens,
        });
    }

    /// A stream sent its next request `gap` after its previous one ended. Requests that
    /// waited for the concurrency cap are left out: that wait is the cap's, and they are
    /// counted as late.
    pub fn send_gap(&mut self, info: &SlotInfo, start: MonoNanos) {
        if let (Some(previous), false) = (info.previous_end, info.late)
            && self.phase(info.slot, info.scheduled) == Phase::Measured
        {
            // Client-side: no status applies; kept in the successful class.
            self.metrics.record(
                StatusClass::Successful,
                Metric::SendGap,
                micros(start.since(previous)),
            );
        }
    }

    /// The runtime ran a probe timer due at `due` only at `at`.
    pub fn runtime_delay(&mut self, due: MonoNanos, at: MonoNanos) {
        if due < self.t0 || self.time_phase(due) != Phase::Measured {
            return;
        }
        self.metrics.record(
            StatusClass::Successful,
            Metric::RuntimeDelay,
            micros(at.since(due)),
        );
    }

    /// A connection begun at `began` took `took` to open (TCP connect, TLS handshake).
    pub fn connected(&mut self, began: MonoNanos, took: std::time::Duration) {
        if began < self.t0 || self.time_phase(began) != Phase::Measured {
            return;
        }
        self.metrics
            .record(StatusClass::Successful, Metric::Connect, micros(took));
    }

    /// The phase of an instant by the time-based window alone.
    fn time_phase(&self, at: MonoNanos) -> Phase {
        let since = at.since(self.t0);
        let w = &self.window;
        if w.warmup_time.is_some_and(|d| since < d) {
            Phase::Warmup
        } else if w.cooldown_from_time.is_some_and(|d| since >= d) {
            Phase::Cooldown
        } else {
            Phase::Measured
        }
    }

    /// A request finished (in any way).
    pub fn finished(&mut self, info: SlotInfo, ex: &Exchange) {
        let phase = self.phase(info.slot, info.scheduled);
        let record = build_record(self.worker, info, ex, phase, self.streamed);
        if record.phase == Phase::Measured {
            let chunks = Chunks::of(ex);
            record_metrics(&mut self.metrics, &record, chunks);
            if let Some(set) = record
                .model
                .and_then(|m| self.model_metrics.get_mut(usize::from(m)))
            {
                record_metrics(set, &record, chunks);
            }
        }
        self.batch.finished.push(record);
    }

    /// Finished records waiting to be sent.
    pub fn pending(&self) -> usize {
        self.batch.finished.len() + self.batch.started.len()
    }

    /// Takes the batch with its histogram delta, leaving an empty one.
    pub fn take_batch(&mut self) -> Result<UpdateBatch, MetricsError> {
        let mut batch = std::mem::take(&mut self.batch);
        if !self.metrics.is_empty() {
            batch.metrics = self.metrics.encode()?;
            self.metrics.reset();
        }
        for (i, set) in self.model_metrics.iter_mut().enumerate() {
            if set.is_empty() {
                continue;
            }
            batch.model_metrics.push(ModelMetrics {
                // At most `LoraSpec::MAX_MODELS` models: the index fits.
                model: u16::try_from(i).unwrap_or(u16::MAX),
                metrics: set.encode()?,
            });
            set.reset();
        }
        Ok(batch)
    }
}

fn build_record(
    worker: u32,
    info: SlotInfo,
    ex: &Exchange,
    phase: Phase,
    streamed: bool,
) -> RequestRecord {
    let status = match &ex.error {
        None => RequestStatus::Completed,
        Some(e)
            if matches!(
                e.kind,
                llmsurge_proto::ErrorKind::Cancelled | llmsurge_proto::ErrorKind::Planned
            ) =>
        {
            RequestStatus::Cancelled
        }
        Some(_) => RequestStatus::Errored,
    };
    let usage_output = ex.usage.and_then(|u| u.completion_tokens);
    let (output_tokens, output_tokens_source) = match usage_output {
        Some(n) => (n, TokenSource::Usage),
        // A whole body is one "chunk", not a count of tokens.
        None if streamed && ex.streamed_tokens > 0 => (ex.streamed_tokens, TokenSource::Stream),
        None => (0, TokenSource::Unknown),
    };
    let mut record = RequestRecord {
        slot: info.slot,
        worker,
        status,
        error: ex.error.clone(),
        scheduled: info.scheduled,
        start: ex.start,
        first_token: ex.first_token,
        first_content: ex.first_content,
        first_tool: ex.first_tool,
        end: ex.end_or_now(),
        itl: None,
        prompt_tokens: ex
            .usage
            .and_then(|u| u.prompt_tokens)
            .or(info.prompt_tokens),
        output_tokens,
        output_tokens_source,
        // Only beside the count it is part of.
        reasoning_tokens: ex
            .usage
            .and_then(|u| u.reasoning_tokens)
            .filter(|_| output_tokens_source == TokenSource::Usage),
        streamed_tokens: if streamed { ex.streamed_tokens } else { 0 },
        max_output_tokens: info.max_output_tokens,
        streamed,
        phase,
        late: info.late,
        retried: ex.retried,
        token_refused: ex.token_refused,
        model: info.model,
        session: info.session,
        media: info.media,
        prefill_wait: ex.prefill_wait,
        concurrency_wait: ex.concurrency_wait,
        finish_reason: ex.finish_reason,
    };
    record.itl = itl_span(&record, Chunks::of(ex));
    record
}

/// The span the request's ITL gaps cover (see [`record_metrics`]): its last chunk with
/// tokens and the tokens the chunks after the first carried. `None` for a whole body or
/// fewer than two chunks with tokens.
fn itl_span(r: &RequestRecord, chunks: Chunks<'_>) -> Option<ItlSpan> {
    if !r.streamed || chunks.times.len() < 2 {
        return None;
    }
    let packing = packing(r, chunks);
    let gaps: u64 = packing.later.iter().sum();
    Some(ItlSpan {
        last_token: *chunks.times.last()?,
        gaps: u32::try_from(gaps).unwrap_or(u32::MAX),
        timed: packing.timed,
    })
}

/// Records one request's metrics into `set`.
///
/// `chunks` are the arrivals of every chunk that carried tokens, reasoning or content:
/// reasoning is decoded like any other output, and the server's usage count includes
/// it, so the count is spread over every such chunk.
pub fn record_metrics(set: &mut MetricSet, r: &RequestRecord, chunks: Chunks<'_>) {
    let class = StatusClass::of(r.status);
    record_lower_bounds(set, r);
    let Some(start) = r.start else {
        return; // never sent: nothing else was measured
    };
    // The waits for the user's caps are reported apart: not the client's lag.
    let lag = r.dispatch_lag().unwrap_or_default();
    set.record(class, Metric::DispatchLag, micros(lag));
    set.record(class, Metric::RequestLatency, micros(r.end.since(start)));
    if let Some(t) = r.ttft_any() {
        set.record(class, Metric::TtftAny, micros(t));
    }
    if let Some(t) = r.ttft() {
        set.record(class, Metric::Ttft, micros(t));
    }
    if let Some(t) = r.ttft_tool() {
        set.record(class, Metric::TtftTool, micros(t));
    }
    if let Some(t) = r.tpot() {
        set.record(class, Metric::Tpot, micros(t));
    }
    if let Some(n) = r.prompt_tokens {
        set.record(class, Metric::PromptTokens, u64::from(n));
    }
    if r.output_tokens_source != TokenSource::Unknown {
        set.record(class, Metric::OutputTokens, u64::from(r.output_tokens));
    }
    if !r.streamed {
        return; // one body: no token arrivals, so no inter-token gaps
    }
    // Each gap between chunks spreads over the tokens of the chunk that ended it.
    let counts = packing(r, chunks).later;
    for (pair, k) in chunks.times.windows(2).zip(counts) {
        let gap_ns = pair[1].since(pair[0]).as_nanos() as u64;
        set.record_n(class, Metric::Itl, gap_ns / k / 1000, k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::Usage;
    use std::time::Duration;

    fn ms(n: u64) -> MonoNanos {
        MonoNanos(1_000_000_000 + n * 1_000_000)
    }

    fn exchange(content_ms: &[u64], usage: Option<u32>) -> Exchange {
        Exchange {
            start: Some(ms(10)),
            first_token: content_ms.first().map(|&t| ms(t)),
            first_content: content_ms.first().map(|&t| ms(t)),
            end: Some(ms(*content_ms.last().unwrap_or(&10) + 1)),
            token_times: content_ms.iter().map(|&t| ms(t)).collect(),
            streamed_tokens: content_ms.len() as u32,
            usage: usage.map(|n| Usage {
                prompt_tokens: Some(5),
                completion_tokens: Some(n),
                reasoning_tokens: None,
            }),
            finished: true,
            error: None,
            reply: None,
            ..Exchange::default()
        }
    }

    fn info(slot: u64) -> SlotInfo {
        SlotInfo {
            prompt_tokens: Some(4),
            ..SlotInfo::due(slot, ms(9))
        }
    }

    #[test]
    fn a_lora_split_gets_a_histogram_delta_per_model_beside_the_whole() {
        let names: Vec<Arc<str>> = vec!["a".into(), "b".into()];
        let mut r = Reporter::new(0, ms(0), MeasureWindow::default()).with_models(["a", "b"]);
        assert_eq!(r.model_index(Some(&names[1])), Some(1));
        assert_eq!(
            r.model_index(Some(&Arc::from("z"))),
            None,
            "not in the split"
        );
        assert_eq!(r.model_index(None), None);
        for (slot, model) in [(0, Some(0)), (1, Some(0)), (2, Some(1)), (3, None)] {
            let info = SlotInfo {
                model,
                ..info(slot)
            };
            r.started(&info, ms(10));
            r.finished(info, &exchange(&[20, 30], None));
        }
        let batch = r.take_batch().expect("encodes");
        assert_eq!(
            batch.started.iter().filter(|s| s.model == Some(0)).count(),
            2
        );
        assert_eq!(batch.finished[2].model, Some(1));
        let count = |encoded: &llmsurge_proto::EncodedMetrics| {
            let mut set = MetricSet::new();
            set.merge_encoded(encoded).expect("decodes");
            set.get(StatusClass::Successful, Metric::RequestLatency)
                .map_or(0, |h| h.len())
        };
        assert_eq!(count(&batch.metrics), 4, "the whole has every request");
        let per_model: Vec<(u16, u64)> = batch
            .model_metrics
            .iter()
            .map(|m| (m.model, count(&m.metrics)))
            .collect();
        assert_eq!(per_model, vec![(0, 2), (1, 1)]);
        // The deltas were taken: the next batch carries none.
        assert!(r.take_batch().expect("encodes").model_metrics.is_empty());
        // Without a split nothing per model is kept.
        let mut plain = Reporter::new(0, ms(0), MeasureWindow::default());
        plain.finished(
            SlotInfo {
                model: Some(0),
                ..info(0)
            },
            &exchange(&[20], None),
        );
        assert!(
            plain
                .take_batch()
                .expect("encodes")
                .model_metrics
                .is_empty()
        );
    }

    #[test]
    fn metrics_follow_the_definitions() {
        let mut r = Reporter::new(0, ms(0), MeasureWindow::default());
        // Content at 60, 65, 70, 75 ms; end at 76; start at 10; scheduled at 9.
        r.finished(info(0), &exchange(&[60, 65, 70, 75], None));
        let m = &r.metrics;
        let get = |metric| m.get(StatusClass::Successful, metric).expect("recorded");
        // HDR values are exact to 3 significant digits: compare as equivalent values.
        let is = |metric, micros: u64| {
            let h = get(metric);
            assert!(
                h.equivalent(h.max(), micros),
                "{metric:?}: {} vs {micros}",
                h.max()
            );
        };
        is(Metric::Ttft, 50_000);
        is(Metric::DispatchLag, 1_000);
        is(Metric::Itl, 5_000);
        assert_eq!(get(Metric::Itl).len(), 3);
        // (76 - 60) / (4 - 1) = 5.333 ms
        is(Metric::Tpot, 5_333);
        is(Metric::RequestLatency, 66_000);
        let rec = &r.batch.finished[0];
        assert_eq!(rec.output_tokens_source, TokenSource::Stream);
        assert_eq!(
            rec.prompt_tokens,
            Some(4),
            "client count when the server sent no usage"
        );
    }

    #[test]
    fn chunks_of_several_tokens_split_their_gap() {
        let mut r = Reporter::new(0, ms(0), MeasureWindow::default());
        // 3 chunks, 6 tokens by usage: each 10 ms gap is 2 gaps of 5 ms.
        r.finished(info(0), &exchange(&[20, 30, 40], Some(6)));
        let itl = r
            .metrics
            .get(StatusClass::Successful, Metric::Itl)
            .expect("itl");
        assert_eq!(itl.len(), 4);
        assert!(itl.equivalent(itl.value_at_quantile(0.5), 5_000));
        assert_eq!(r.batch.finished[0].output_tokens_source, TokenSource::Usage);
        assert_eq!(
            r.batch.finished[0].prompt_tokens,
            Some(5),
            "the server's count wins"
        );
    }

    #[test]
    fn the_record_carries_the_mean_of_the_itl_gaps_it_recorded() {
        let mut r = Reporter::new(0, ms(0), MeasureWindow::default());
        // 10 tokens by usage in chunks at 20, 50, 80, 90 ms: 3, 3, 3, 1 tokens; the 7
        // gaps after the first chunk span 70 ms.
        r.finished(info(0), &exchange(&[20, 50, 80, 90], Some(10)));
        let itl = r
            .metrics
            .get(StatusClass::Successful, Metric::Itl)
            .expect("itl");
        let rec = &r.batch.finished[0];
        let span = rec.itl.expect("a span");
        assert_eq!((span.last_token, span.gaps), (ms(90), itl.len() as u32));
        let mean = rec.itl_mean().expect("a mean").as_secs_f64() * 1e6;
        // The histogram keeps 3 significant digits.
        assert!(
            (mean - itl.mean()).abs() <= itl.mean() * 1e-3,
            "{mean} vs {}",
            itl.mean()
        );
        assert!((mean - 10_000.0).abs() < 1.0, "{mean}");
        // One chunk, or a whole body: no gaps, no span.
        r.finished(info(1), &exchange(&[20], Some(3)));
        assert_eq!(r.batch.finished[1].itl, None);
    }

    #[test]
    fn reasoning_tokens_are_inter_token_gaps_and_start_the_tpot_clock() {
        let mut r = Reporter::new(0, ms(0), MeasureWindow::default());
        // Reasoning at 20, 25, 30; content at 35, 40; [DONE] at 41; usage counts all 5.
        let mut ex = exchange(&[20, 25, 30, 35, 40], Some(5));
        ex.first_content = Some(ms(35));
        r.finished(info(0), &ex);
        let get = |metric| {
            r.metrics
                .get(StatusClass::Successful, metric)
                .expect("recorded")
        };
        let itl = get(Metric::Itl);
        assert_eq!(itl.len(), 4, "every token gap counts, reasoning included");
        assert!(itl.equivalent(itl.min(), 5_000) && itl.equivalent(itl.max(), 5_000));
        // (41 - 20) / (5 - 1) = 5.25 ms, from the first token of any kind.
        let tpot = get(Metric::Tpot);
        assert!(tpot.equivalent(tpot.max(), 5_250), "{}", tpot.max());
        let ttft = get(Metric::Ttft);
        assert!(ttft.equivalent(ttft.max(), 25_000), "first content token");
        let any = get(Metric::TtftAny);
        assert!(any.equivalent(any.max(), 10_000), "first token of any kind");
    }

    #[test]
    fn reasoning_and_answer_packed_apart_are_split_by_the_reasoning_count() {
        // 3 tokens a chunk, each part packed on its own: 2 reasoning tokens in one chunk
        // at 20 ms, then 7 answer tokens in chunks of 3, 3, 1 at 50, 80, 90 ms; a token
        // every 10 ms. Usage: 9 tokens, 2 of them reasoning.
        let mut ex = exchange(&[20, 50, 80, 90], Some(9));
        ex.first_content = Some(ms(50));
        ex.reasoning_chunks = 1;
        if let Some(u) = &mut ex.usage {
            u.reasoning_tokens = Some(2);
        }
        let chunks = Chunks::of(&ex);
        let mut rec = build_record(0, info(0), &ex, Phase::Measured, true);
        assert_eq!(rec.reasoning_tokens, Some(2));
        assert_eq!(
            packing(&rec, chunks).later,
            [3, 3, 1],
            "the answer's chunks carry 3, 3 and 1"
        );
        // 70 ms over 7 gaps: 10 ms, as the server decoded them.
        let mean = rec.itl_mean().expect("a mean").as_secs_f64() * 1e3;
        assert!((mean - 10.0).abs() < 1e-6, "{mean}");
        // Without the reasoning count (the Messages API has none) the counts fit 1, 2
        // or 3 reasoning tokens: the gaps (30, 30, 10 ms) say 2 (3, 3, 1 after it).
        rec.reasoning_tokens = None;
        let p = packing(&rec, chunks);
        assert_eq!((p.later.as_slice(), p.timed), ([3, 3, 1].as_slice(), true));
        // One run over all four chunks, when a chunk mixed reasoning and answer (the
        // packing ran across the boundary): only ⌈9 / 4⌉ = 3 fits (3, 3, 2, 1), 6 gaps.
        ex.reasoning_chunks = 0;
        let rec = build_record(0, info(0), &ex, Phase::Measured, true);
        assert_eq!(packing(&rec, Chunks::of(&ex)).later, [3, 2, 1]);
        // 3 reasoning tokens in one chunk and 4 answer tokens in two: alone, 4 in two
        // chunks is 2 + 2 or 3 + 1; the reasoning chunk's 3 says the server packs 3.
        let mut ex = exchange(&[30, 60, 70], Some(7));
        ex.reasoning_chunks = 1;
        if let Some(u) = &mut ex.usage {
            u.reasoning_tokens = Some(3);
        }
        let rec = build_record(0, info(0), &ex, Phase::Measured, true);
        assert_eq!(packing(&rec, Chunks::of(&ex)).later, [3, 1]);
        // Through the histogram: 4 gaps, the span says the same.
        let mut r = Reporter::new(0, ms(0), MeasureWindow::default());
        r.finished(info(0), &ex);
        let itl = r
            .metrics
            .get(StatusClass::Successful, Metric::Itl)
            .expect("itl");
        assert_eq!(itl.len(), 4);
        assert_eq!(r.batch.finished[0].itl.map(|s| s.gaps), Some(4));
        // A reasoning count the chunks cannot hold (more answer chunks than answer
        // tokens) is not used.
        let mut ex = exchange(&[20, 30, 40, 50], Some(6));
        ex.reasoning_chunks = 1;
        if let Some(u) = &mut ex.usage {
            u.reasoning_tokens = Some(4);
        }
        let rec = build_record(0, info(0), &ex, Phase::Measured, true);
        assert_eq!(packing(&rec, Chunks::of(&ex)).later, [2, 1, 1]);
    }

    #[test]
    fn a_short_first_chunk_is_not_a_long_last_gap() {
        // The Messages API: 10 tokens by usage, no reasoning count, one reasoning chunk
        // then the answer, a token every 10 ms. One reasoning token and answer chunks of
        // 3, 3, 3 fit the counts, and so do 2 + (3, 3, 2) and 3 + (3, 3, 1); the timing
        // tells them apart.
        let mut first_short = exchange(&[20, 50, 80, 110], Some(10));
        first_short.first_content = Some(ms(50));
        first_short.reasoning_chunks = 1;
        let rec = build_record(0, info(0), &first_short, Phase::Measured, true);
        let p = packing(&rec, Chunks::of(&first_short));
        assert_eq!((p.later.as_slice(), p.timed), ([3, 3, 3].as_slice(), true));
        let mean = rec.itl_mean().expect("a mean").as_secs_f64() * 1e3;
        assert!((mean - 10.0).abs() < 1e-6, "{mean}");
        assert_eq!(rec.itl.map(|i| i.timed), Some(true));
        // Three reasoning tokens: the answer's last chunk is the short one.
        let mut last_short = exchange(&[40, 70, 100, 110], Some(10));
        last_short.first_content = Some(ms(70));
        last_short.reasoning_chunks = 1;
        let rec = build_record(0, info(0), &last_short, Phase::Measured, true);
        assert_eq!(packing(&rec, Chunks::of(&last_short)).later, [3, 3, 1]);
        // Through the histogram: every gap 10 ms, none of 30.
        let mut r = Reporter::new(0, ms(0), MeasureWindow::default());
        r.finished(info(0), &first_short);
        let itl = r
            .metrics
            .get(StatusClass::Successful, Metric::Itl)
            .expect("itl");
        assert_eq!(itl.len(), 9);
        assert!(itl.equivalent(itl.max(), 10_000), "{}", itl.max());
        // Without reasoning chunks, or with the reasoning count, the counts decide.
        let plain = exchange(&[20, 50, 80, 110], Some(10));
        let rec = build_record(0, info(0), &plain, Phase::Measured, true);
        let p = packing(&rec, Chunks::of(&plain));
        assert_eq!((p.later.as_slice(), p.timed), ([3, 3, 1].as_slice(), false));
    }

    #[test]
    fn unfinished_requests_record_lower_bounds() {
        let mut r = Reporter::new(0, ms(0), MeasureWindow::default());
        // In flight, no token yet, cancelled at 910 ms: 900 ms since its start at 10.
        let mut ex = exchange(&[], None);
        ex.cancel("stopped");
        ex.end = Some(ms(910));
        r.finished(info(0), &ex);
        // Never sent: queued from its slot time (9 ms) to 509 ms.
        let mut queued = Exchange::failed(llmsurge_proto::ErrorKind::Cancelled, "queued");
        queued.end = Some(ms(509));
        r.finished(info(1), &queued);
        // Cut off after its first content token at 60: its TTFT is known exactly.
        let mut streaming = exchange(&[60, 65], None);
        streaming.cancel("stopped");
        streaming.end = Some(ms(300));
        r.finished(info(2), &streaming);
        let bounds = |metric| {
            let h = r
                .metrics
                .get(StatusClass::Incomplete, metric)
                .expect("recorded");
            let mut v: Vec<u64> = h.iter_recorded().map(|x| x.value_iterated_to()).collect();
            v.sort_unstable();
            v
        };
        let close = |got: Vec<u64>, want: [u64; 3]| {
            assert!(
                got.iter().zip(want).all(|(g, w)| g.abs_diff(w) <= w / 500),
                "{got:?} vs {want:?}"
            );
        };
        close(
            bounds(Metric::TtftWithIncomplete),
            [50_000, 500_000, 900_000],
        );
        close(
            bounds(Metric::RequestLatencyWithIncomplete),
            [290_000, 500_000, 900_000],
        );
        assert!(
            r.metrics
                .get(StatusClass::Successful, Metric::TtftWithIncomplete)
                .is_none(),
            "finished requests are in the metric they extend"
        );
        // Timed out with no token after 2 s: TTFT ≥ 2 s, though it failed.
        let mut timed_out = exchange(&[], None);
        timed_out.error = Some(llmsurge_proto::RequestError {
            kind: llmsurge_proto::ErrorKind::Timeout,
            message: "no first token".into(),
        });
        timed_out.end = Some(ms(2_010));
        r.finished(info(3), &timed_out);
        let h = r
            .metrics
            .get(StatusClass::Errored, Metric::TtftWithIncomplete)
            .expect("a bound");
        assert_eq!(h.len(), 1);
        assert!(h.equivalent(h.max(), 2_000_000), "{}", h.max());
        assert!(
            r.metrics
                .get(StatusClass::Errored, Metric::RequestLatencyWithIncomplete)
                .is_none(),
            "its e2e is measured as it is"
        );
    }

    #[test]
    fn client_probes_respect_the_window() {
        let window = MeasureWindow {
            warmup_time: Some(Duration::from_millis(100)),
            ..MeasureWindow::default()
        };
        let mut r = Reporter::new(0, ms(0), window);
        r.runtime_delay(ms(50), ms(60)); // warm-up
        r.runtime_delay(ms(200), ms(203));
        let mut slot = info(7);
        slot.scheduled = ms(300);
        slot.previous_end = Some(ms(295));
        r.send_gap(&slot, ms(300));
        slot.late = true; // its wait was the concurrency cap's
        r.send_gap(&slot, ms(400));
        let h = |m| {
            r.metrics
                .get(StatusClass::Successful, m)
                .expect("recorded")
                .clone()
        };
        let delay = h(Metric::RuntimeDelay);
        assert_eq!(delay.len(), 1);
        assert!(delay.equivalent(delay.max(), 3_000));
        let gap = h(Metric::SendGap);
        assert_eq!(gap.len(), 1);
        assert!(gap.equivalent(gap.max(), 5_000));
    }

    #[test]
    fn windows_tag_phases_and_only_measured_requests_are_histogrammed() {
        let window = MeasureWindow {
            warmup_slots: Some(2),
            cooldown_from_time: Some(Duration::from_millis(500)),
            ..MeasureWindow::default()
        };
        let mut r = Reporter::new(0, ms(0), window);
        assert_eq!(r.phase(1, ms(1)), Phase::Warmup);
        assert_eq!(r.phase(2, ms(499)), Phase::Measured);
        assert_eq!(r.phase(3, ms(500)), Phase::Cooldown);
        r.finished(info(0), &exchange(&[20], None));
        assert!(r.metrics.is_empty());
        r.finished(info(5), &exchange(&[20], None));
        assert!(!r.metrics.is_empty());
        let batch = r.take_batch().expect("batch");
        assert_eq!(batch.finished.len(), 2);
        assert_eq!(
            batch
                .metrics
                .entries
                .iter()
                .filter(|e| e.metric == Metric::Ttft)
                .count(),
            1
        );
        assert!(r.metrics.is_empty() && r.pending() == 0);
    }

    #[test]
    fn errors_and_cancellations_get_their_status() {
        let mut r = Reporter::new(0, ms(0), MeasureWindow::default());
        let mut ex = exchange(&[], None);
        ex.cancel("stopped");
        r.finished(info(0), &ex);
        let mut ex = exchange(&[20], None);
        ex.error = Some(llmsurge_proto::RequestError {
            kind: llmsurge_proto::ErrorKind::Timeout,
            message: "t".into(),
        });
        r.finished(info(1), &ex);
        let statuses: Vec<_> = r.batch.finished.iter().map(|f| f.status).collect();
        assert_eq!(statuses, [RequestStatus::Cancelled, RequestStatus::Errored]);
        assert!(r.metrics.get(StatusClass::Errored, Metric::Ttft).is_some());
    }
}
