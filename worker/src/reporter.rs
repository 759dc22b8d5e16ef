//! Turns finished exchanges into records and histogram deltas, batched for the IPC.
//!
//! Metrics follow DESIGN.md: `start` is the instant the request was handed to the socket;
//! TTFT is the first content token; ITL is every gap between content tokens, a chunk of
//! `k` tokens contributing `k` gaps of `gap / k`; TPOT is `(e2e − ttft) / (tokens − 1)`.
//! Only measured-window requests feed the histograms; every request gets a record.

use crate::backend::Exchange;
use llmsurge_proto::{
    MeasureWindow, Metric, MetricSet, MonoNanos, Phase, RequestRecord, RequestStarted,
    RequestStatus, StatusClass, TokenSource, UpdateBatch, metrics::MetricsError,
};

/// What the request loop knows about a request besides its exchange.
#[derive(Clone, Copy, Debug)]
pub struct SlotInfo {
    /// The slot index.
    pub slot: u64,
    /// When it was due.
    pub scheduled: MonoNanos,
    /// It waited for the concurrency cap.
    pub late: bool,
    /// The client's prompt length, when known.
    pub prompt_tokens: Option<u32>,
}

/// Accumulates one flush interval of transitions.
#[derive(Debug)]
pub struct Reporter {
    worker: u32,
    t0: MonoNanos,
    window: MeasureWindow,
    batch: UpdateBatch,
    metrics: MetricSet,
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
        }
    }

    /// The phase a slot falls in.
    pub fn phase(&self, slot: u64, scheduled: MonoNanos) -> Phase {
        self.window.phase(slot, scheduled.since(self.t0))
    }

    /// A request was sent.
    pub fn started(&mut self, slot: u64, scheduled: MonoNanos, start: MonoNanos) {
        self.batch.started.push(RequestStarted {
            slot,
            scheduled,
            start,
        });
    }

    /// A request finished (in any way).
    pub fn finished(&mut self, info: SlotInfo, ex: &Exchange) {
        let record = build_record(self.worker, info, ex, self.phase(info.slot, info.scheduled));
        if record.phase == Phase::Measured {
            record_metrics(&mut self.metrics, &record, &ex.content_times);
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
        Ok(batch)
    }
}

fn build_record(worker: u32, info: SlotInfo, ex: &Exchange, phase: Phase) -> RequestRecord {
    let status = match &ex.error {
        None => RequestStatus::Completed,
        Some(e) if e.kind == llmsurge_proto::ErrorKind::Cancelled => RequestStatus::Cancelled,
        Some(_) => RequestStatus::Errored,
    };
    let usage_output = ex.usage.and_then(|u| u.completion_tokens);
    let (output_tokens, output_tokens_source) = match usage_output {
        Some(n) => (n, TokenSource::Usage),
        None if ex.streamed_tokens > 0 => (ex.streamed_tokens, TokenSource::Stream),
        None => (0, TokenSource::Unknown),
    };
    RequestRecord {
        slot: info.slot,
        worker,
        status,
        error: ex.error.clone(),
        scheduled: info.scheduled,
        start: ex.start,
        first_token: ex.first_token,
        first_content: ex.first_content,
        end: ex.end.unwrap_or_else(MonoNanos::now),
        prompt_tokens: ex
            .usage
            .and_then(|u| u.prompt_tokens)
            .or(info.prompt_tokens),
        output_tokens,
        output_tokens_source,
        streamed_tokens: ex.streamed_tokens,
        phase,
        late: info.late,
    }
}

fn micros(d: std::time::Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

/// Records one request's metrics into `set`.
pub fn record_metrics(set: &mut MetricSet, r: &RequestRecord, content_times: &[MonoNanos]) {
    let class = StatusClass::of(r.status);
    let Some(start) = r.start else {
        return; // never sent: nothing was measured
    };
    set.record(class, Metric::DispatchLag, micros(start.since(r.scheduled)));
    set.record(class, Metric::RequestLatency, micros(r.end.since(start)));
    if let Some(t) = r.first_token {
        set.record(class, Metric::TtftAny, micros(t.since(start)));
    }
    if let Some(t) = r.first_content {
        set.record(class, Metric::Ttft, micros(t.since(start)));
        if r.output_tokens > 1 {
            let per = r.end.since(t).as_nanos() as f64 / f64::from(r.output_tokens - 1);
            set.record(class, Metric::Tpot, (per / 1000.0).round() as u64);
        }
    }
    if let Some(n) = r.prompt_tokens {
        set.record(class, Metric::PromptTokens, u64::from(n));
    }
    if r.output_tokens_source != TokenSource::Unknown {
        set.record(class, Metric::OutputTokens, u64::from(r.output_tokens));
    }
    // Tokens per chunk: exact with one token per chunk (vLLM, SGLang); otherwise the
    // server's count spread evenly over the content chunks.
    let chunks = content_times.len() as u64;
    let per_chunk = match r.output_tokens_source {
        TokenSource::Usage if chunks > 0 => (u64::from(r.output_tokens) as f64 / chunks as f64)
            .round()
            .max(1.0) as u64,
        _ => 1,
    };
    for pair in content_times.windows(2) {
        let gap_ns = pair[1].since(pair[0]).as_nanos() as u64;
        set.record_n(class, Metric::Itl, gap_ns / per_chunk / 1000, per_chunk);
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
            content_times: content_ms.iter().map(|&t| ms(t)).collect(),
            streamed_tokens: content_ms.len() as u32,
            usage: usage.map(|n| Usage {
                prompt_tokens: Some(5),
                completion_tokens: Some(n),
            }),
            finished: true,
            error: None,
        }
    }

    fn info(slot: u64) -> SlotInfo {
        SlotInfo {
            slot,
            scheduled: ms(9),
            late: false,
            prompt_tokens: Some(4),
        }
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
