//! Time from intent (DESIGN.md, "Intent and send"): every request carries the instant
//! the load asked for it; the time it then spent held in the client is client queue
//! time, kept per cause (the user's concurrency cap, the user's prefill cap, a busy
//! client), and its latencies exist from that instant too, beside the ones from its send.
//!
//! [`record`] adds one measured request to the from-intent histograms and the waits per
//! cap; [`ClientQueue`] summarises the causes for the report's `client` section. The
//! busy-client part is the dispatch lag, which the worker records.

use llmsurge_proto::metrics::micros;
use llmsurge_proto::{Distribution, Metric, MetricSet, RequestRecord, RequestStatus, StatusClass};
use serde::{Deserialize, Serialize};

/// Records one measured request's latencies from its intended instant into `set`, by
/// status as their from-send twins are (and the lower bounds of one that did not
/// finish, as [`llmsurge_proto::metrics::record_lower_bounds`] does from its send), and
/// how long each of the user's caps held it (client-side, in the successful class as the
/// other client probes).
pub fn record(set: &mut MetricSet, r: &RequestRecord) {
    // The request log's parts: the report and the log agree.
    let parts = r.queue_parts();
    if let Some(wait) = parts.concurrency {
        set.record(
            StatusClass::Successful,
            Metric::ConcurrencyWait,
            micros(wait),
        );
    }
    if let Some(wait) = parts.prefill {
        set.record(StatusClass::Successful, Metric::PrefillWait, micros(wait));
    }
    let class = StatusClass::of(r.status);
    let waited = micros(r.end.since(r.scheduled));
    match r.status {
        RequestStatus::Completed => {}
        RequestStatus::Cancelled => {
            let ttft = r.ttft_from_intent().map_or(waited, micros);
            set.record(class, Metric::TtftFromIntentWithIncomplete, ttft);
            let any = r.ttft_any_from_intent().map_or(waited, micros);
            set.record(class, Metric::TtftAnyFromIntentWithIncomplete, any);
            set.record(
                class,
                Metric::RequestLatencyFromIntentWithIncomplete,
                waited,
            );
        }
        RequestStatus::Errored if r.start.is_some() => {
            if r.first_content.is_none() {
                set.record(class, Metric::TtftFromIntentWithIncomplete, waited);
            }
            if r.first_token.is_none() {
                set.record(class, Metric::TtftAnyFromIntentWithIncomplete, waited);
            }
        }
        RequestStatus::Errored => {} // never sent: the client failed, not the server
    }
    if let Some(e2e) = r.latency_from_intent() {
        set.record(class, Metric::RequestLatencyFromIntent, micros(e2e));
    }
    if let Some(t) = r.ttft_from_intent() {
        set.record(class, Metric::TtftFromIntent, micros(t));
    }
    if let Some(t) = r.ttft_any_from_intent() {
        set.record(class, Metric::TtftAnyFromIntent, micros(t));
    }
}

/// Client queue time per cause over a benchmark's measured requests, ms: how long
/// requests waited in the client between their intended instant and their send. Each
/// cause is a distribution over the requests it held (`count`, `mean`, `p99`, `max`, …).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientQueue {
    /// The user's concurrency cap (`--max-concurrency`, a profile's own cap): the
    /// requests it held and how long each waited for room. Absent when it held none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_cap: Option<Distribution>,
    /// `--max-prefill-concurrency`: the requests it held and how long each waited for
    /// room. Absent when it held none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_cap: Option<Distribution>,
    /// A busy client (worker runtime, pacer): the dispatch lag of every measured request
    /// sent, the queue time no cap explains. Only this cause can make a run invalid.
    pub busy_worker: Distribution,
}

impl ClientQueue {
    /// The causes of `set`'s histograms: the caps' waits, and the dispatch lag of every
    /// status class.
    pub fn of(set: &MetricSet) -> ClientQueue {
        let held = |metric| {
            set.get(StatusClass::Successful, metric)
                .filter(|h| !h.is_empty())
                .map(|h| Distribution::of_metric(metric, h))
        };
        let lag = set.total(Metric::DispatchLag);
        ClientQueue {
            concurrency_cap: held(Metric::ConcurrencyWait),
            prefill_cap: held(Metric::PrefillWait),
            busy_worker: Distribution::of_metric(Metric::DispatchLag, &lag),
        }
    }

    /// Requests held by a cap the user set: the concurrency cap's and the prefill cap's
    /// (a request both held counts in each).
    pub fn held_by_caps(&self) -> u64 {
        let n = |d: &Option<Distribution>| d.as_ref().map_or(0, |d| d.count);
        n(&self.concurrency_cap) + n(&self.prefill_cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::MonoNanos;
    use std::time::Duration;

    fn at(ms: u64) -> MonoNanos {
        MonoNanos(1_000_000_000 + ms * 1_000_000)
    }

    #[test]
    fn from_intent_adds_the_queue_time_and_lag_leaves_the_caps_out() {
        // Intended at 0, held 30 ms by the concurrency cap and 50 ms by the prefill cap,
        // sent at 82: 2 ms of the queue time were the client's own.
        let r = RequestRecord {
            scheduled: at(0),
            concurrency_wait: Some(Duration::from_millis(30)),
            finish_reason: None,
            prefill_wait: Some(Duration::from_millis(50)),
            late: true,
            ..RequestRecord::completed(at(82), Some(at(182)), at(282), 4)
        };
        assert_eq!(r.queue_time(), Duration::from_millis(82));
        assert_eq!(r.dispatch_lag(), Some(Duration::from_millis(2)));
        assert_eq!(r.ttft(), Some(Duration::from_millis(100)));
        assert_eq!(r.ttft_from_intent(), Some(Duration::from_millis(182)));
        let mut set = MetricSet::new();
        record(&mut set, &r);
        let one = |class, metric| {
            let h = set.get(class, metric).expect("recorded");
            assert_eq!(h.len(), 1, "{metric}");
            h.max()
        };
        let s = StatusClass::Successful;
        assert!(one(s, Metric::TtftFromIntent).abs_diff(182_000) < 200);
        assert!(one(s, Metric::RequestLatencyFromIntent).abs_diff(282_000) < 300);
        assert!(one(s, Metric::ConcurrencyWait).abs_diff(30_000) < 50);
        assert!(one(s, Metric::PrefillWait).abs_diff(50_000) < 50);
        assert!(set.get(s, Metric::TtftFromIntentWithIncomplete).is_none());
    }

    #[test]
    fn a_request_never_sent_is_a_lower_bound_from_its_intent() {
        // Held by the prefill cap from 0 until a stop cancelled it at 900 ms.
        let r = RequestRecord {
            status: RequestStatus::Cancelled,
            scheduled: at(0),
            start: None,
            first_token: None,
            first_content: None,
            prefill_wait: Some(Duration::from_millis(900)),
            late: true,
            ..RequestRecord::completed(at(0), None, at(900), 0)
        };
        assert_eq!(r.dispatch_lag(), None);
        let mut set = MetricSet::new();
        record(&mut set, &r);
        let i = StatusClass::Incomplete;
        for metric in [
            Metric::TtftFromIntentWithIncomplete,
            Metric::TtftAnyFromIntentWithIncomplete,
            Metric::RequestLatencyFromIntentWithIncomplete,
        ] {
            let h = set.get(i, metric).expect("a lower bound");
            assert!(h.max().abs_diff(900_000) < 1000, "{metric}: {}", h.max());
        }
        assert!(set.get(i, Metric::RequestLatencyFromIntent).is_none());
        let q = ClientQueue::of(&set);
        assert_eq!(q.prefill_cap.map(|d| d.count), Some(1));
        assert_eq!(q.concurrency_cap, None);
        assert_eq!(q.busy_worker.count, 0);
    }
}
