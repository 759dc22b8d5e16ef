//! Output lengths as asked: what the completed measured requests asked for (their
//! `max_tokens`) against what they received, and why the server said each ended.
//!
//! A benchmark's load is its prompt and output lengths. llmsurge asks for exact outputs
//! (`max_tokens` with `ignore_eos`, and `min_tokens` with `--min-tokens`); a server, or a
//! gateway in front of it that drops those fields, stops where the model would, and a
//! shorter output puts less load on the server and flatters every figure. Requests that
//! ended short with a `stop` finish while exact lengths were asked are that case; the
//! verdict (`--max-short-output-share`) lives in `validity`, beside the other reasons a
//! run is invalid.

use llmsurge_proto::{FinishReason, Phase, RequestRecord, RequestStatus, TokenSource};
use serde::{Deserialize, Serialize};

/// Completed measured requests by the finish reason the server gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishCounts {
    /// Ended at the length asked (`length`, `max_tokens`, `max_output_tokens`).
    pub length: u64,
    /// Ended by the model (`stop`, `end_turn`, a completed Responses answer).
    pub stop: u64,
    /// Ended with a tool call.
    pub tool_calls: u64,
    /// Another reason the server named (`content_filter`, …).
    pub other: u64,
    /// The answer named no reason.
    pub none: u64,
}

impl FinishCounts {
    fn add_one(&mut self, reason: Option<FinishReason>) {
        match reason {
            Some(FinishReason::Length) => self.length += 1,
            Some(FinishReason::Stop) => self.stop += 1,
            Some(FinishReason::ToolCalls) => self.tool_calls += 1,
            Some(FinishReason::Other) => self.other += 1,
            None => self.none += 1,
        }
    }

    /// Adds another benchmark part's counts (a shard's).
    pub fn add(&mut self, o: &FinishCounts) {
        self.length += o.length;
        self.stop += o.stop;
        self.tool_calls += o.tool_calls;
        self.other += o.other;
        self.none += o.none;
    }

    /// `length 12, stop 3` — the reasons that occurred, for a line of text.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = [
            ("length", self.length),
            ("stop", self.stop),
            ("tool_calls", self.tool_calls),
            ("other", self.other),
            ("none", self.none),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

/// A benchmark's output lengths: asked against received over its completed measured
/// requests, and their finish reasons.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OutputLengths {
    /// Completed measured requests.
    pub completed: u64,
    /// Of those, the ones that asked for an output length (a `max_tokens`) and whose
    /// output length is known in tokens (the server's usage); the means and the share
    /// below count these.
    pub asked_requests: u64,
    /// Completed measured requests that asked for a length but whose output length is
    /// not known in tokens (no usage: a streamed count is of chunks, which may carry
    /// several tokens each); kept out of the figures above and below, never `short`.
    #[serde(default)]
    pub unknown_lengths: u64,
    /// Output tokens they asked for, summed.
    pub asked_tokens: u64,
    /// Output tokens they received, summed.
    pub received_tokens: u64,
    /// Mean output tokens asked per request (`asked_tokens / asked_requests`).
    pub asked_mean: f64,
    /// Mean output tokens received per request (`received_tokens / asked_requests`).
    pub received_mean: f64,
    /// Requests that received fewer tokens than they asked for, other than by a tool
    /// call (an answer that calls a tool ends there by design) or a `length` finish (the
    /// server says it reached the length asked).
    pub short: u64,
    /// `short / asked_requests`.
    pub short_share: f64,
    /// Of `short`, the ones the server ended with `stop`: the model stopped where it
    /// would, so the exact length was not honoured.
    pub short_stopped: u64,
    /// Every completed measured request by the reason the server gave.
    pub finish_reasons: FinishCounts,
    /// The requests asked for exact lengths (`ignore_eos: true` or `min_tokens` in the
    /// bodies, with a length asked): only then is a short output the server's (or a
    /// gateway's) doing, worth a warning.
    #[serde(default)]
    pub exact: bool,
    /// The bodies carried `ignore_eos: true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_eos: bool,
    /// The bodies carried `min_tokens` (`--min-tokens`, or the user's `extra_body`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub min_tokens: bool,
    /// `--max-short-output-share`: a `short_share` above it makes the run invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_short_share: Option<f64>,
}

/// The books behind [`OutputLengths`], fed one measured request at a time.
#[derive(Clone, Debug, Default)]
pub struct OutputLengthCollector {
    lengths: OutputLengths,
}

impl OutputLengthCollector {
    /// Counts a request: completed measured ones only (a cut request's length says
    /// nothing of the server's choice).
    pub fn add(&mut self, r: &RequestRecord) {
        if r.status != RequestStatus::Completed || r.phase != Phase::Measured {
            return;
        }
        let l = &mut self.lengths;
        l.completed += 1;
        l.finish_reasons.add_one(r.finish_reason);
        let Some(asked) = r.max_output_tokens else {
            return;
        };
        // Only the server's usage counts tokens; a streamed count is of chunks, and a
        // chunk may carry several tokens, so it cannot say a request ended short.
        if r.output_tokens_source != TokenSource::Usage {
            l.unknown_lengths += 1;
            return;
        }
        l.asked_requests += 1;
        l.asked_tokens += u64::from(asked);
        l.received_tokens += u64::from(r.output_tokens);
        let ended_by_design = matches!(
            r.finish_reason,
            Some(FinishReason::ToolCalls | FinishReason::Length)
        );
        if r.output_tokens < asked && !ended_by_design {
            l.short += 1;
            if r.finish_reason == Some(FinishReason::Stop) {
                l.short_stopped += 1;
            }
        }
    }

    /// The figures; `None` before any completed request (a format without output
    /// leaves them out).
    pub fn result(&self) -> Option<OutputLengths> {
        let mut l = self.lengths.clone();
        if l.completed == 0 {
            return None;
        }
        l.set_ratios();
        Some(l)
    }
}

impl OutputLengths {
    /// Recomputes the means and the share from the sums.
    pub fn set_ratios(&mut self) {
        let n = self.asked_requests as f64;
        let ratio = |x: f64| if n > 0.0 { x / n } else { 0.0 };
        self.asked_mean = ratio(self.asked_tokens as f64);
        self.received_mean = ratio(self.received_tokens as f64);
        self.short_share = ratio(self.short as f64);
    }

    /// Adds another part of the same benchmark (a shard's), sums and counts.
    pub fn add(&mut self, o: &OutputLengths) {
        self.completed += o.completed;
        self.asked_requests += o.asked_requests;
        self.unknown_lengths += o.unknown_lengths;
        self.asked_tokens += o.asked_tokens;
        self.received_tokens += o.received_tokens;
        self.short += o.short;
        self.short_stopped += o.short_stopped;
        self.finish_reasons.add(&o.finish_reasons);
        self.exact |= o.exact;
        self.ignore_eos |= o.ignore_eos;
        self.min_tokens |= o.min_tokens;
        self.set_ratios();
    }

    /// The figures in one line: `asked 32.0, received 19.5 output tokens per request
    /// (mean); 12 of 35 (34.3%) ended short; finish: length 23, stop 12`.
    pub fn line(&self) -> String {
        format!(
            "output lengths: asked {:.1}, received {:.1} tokens per request (mean of {}); {} of them ({:.1}%) ended short;{} finish reasons: {}",
            self.asked_mean,
            self.received_mean,
            self.asked_requests,
            self.short,
            self.short_share * 100.0,
            self.unknown_note(),
            self.finish_reasons.summary()
        )
    }

    /// ` 3 more with lengths unknown in tokens (no usage);` when there are such
    /// requests, else empty.
    pub fn unknown_note(&self) -> String {
        if self.unknown_lengths == 0 {
            String::new()
        } else {
            format!(
                " {} more with output lengths unknown in tokens (no usage from the server), not judged;",
                self.unknown_lengths
            )
        }
    }

    /// The warning when exact lengths were asked and requests still ended short with a
    /// `stop`: the likely cause and what to try. `None` otherwise.
    pub fn warning(&self) -> Option<String> {
        (self.exact && self.short_stopped > 0).then(|| {
            format!(
                "{} of {} requests ended short of the output length asked with finish reason `stop` (received {:.1} tokens per request, asked {:.1}): the server, or a gateway in front of it, ignores {}, so the load was lighter than asked and the figures flatter the server; {}",
                self.short_stopped,
                self.asked_requests,
                self.received_mean,
                self.asked_mean,
                self.sent().fields(),
                self.sent().what_to_try()
            )
        })
    }

    /// Why the benchmark is invalid under `--max-short-output-share`, when its share of
    /// short outputs is above the limit.
    pub fn invalid_reason(&self) -> Option<String> {
        let limit = self.max_short_share?;
        (self.short_share > limit).then(|| {
            format!(
                "{} of {} requests ({:.1}%) ended short of the output length asked, more than --max-short-output-share {:.1}% (received {:.1} tokens per request, asked {:.1}; finish reasons: {})",
                self.short,
                self.asked_requests,
                self.short_share * 100.0,
                limit * 100.0,
                self.received_mean,
                self.asked_mean,
                self.finish_reasons.summary()
            )
        })
    }
}

/// The exact-length fields the request bodies carry, as the user's `extra_body` leaves
/// them (it overrides `--ignore-eos` and `--min-tokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SentFields {
    /// `ignore_eos: true`.
    pub ignore_eos: bool,
    /// `min_tokens` (above 0).
    pub min_tokens: bool,
}

impl SentFields {
    /// What a backend's bodies carry.
    pub fn of(b: &llmsurge_proto::BackendConfig) -> Self {
        let extra = |k: &str| b.extra_body.get(k);
        Self {
            ignore_eos: extra("ignore_eos").map_or(b.ignore_eos, |v| v.as_bool() == Some(true)),
            min_tokens: extra("min_tokens")
                .map_or(b.min_tokens, |v| v.as_u64().is_some_and(|n| n > 0)),
        }
    }

    /// Either field: the lengths asked are meant to be exact.
    pub fn any(self) -> bool {
        self.ignore_eos || self.min_tokens
    }

    /// The fields, as a phrase: `ignore_eos`, `min_tokens`, or both.
    pub fn fields(self) -> &'static str {
        match (self.ignore_eos, self.min_tokens) {
            (true, true) => "ignore_eos and min_tokens",
            (false, true) => "min_tokens",
            _ => "ignore_eos",
        }
    }

    /// What to try when outputs end short: `min_tokens` when it was not sent, else the
    /// gateway's own setting or the server itself.
    pub fn what_to_try(self) -> &'static str {
        match (self.ignore_eos, self.min_tokens) {
            (true, true) => {
                "both were dropped on the way: try the gateway's setting that passes extra body fields through, or benchmark the server directly"
            }
            (false, true) => {
                "it was dropped on the way: try the gateway's setting that passes extra body fields through, or benchmark the server directly"
            }
            _ => {
                "try --min-tokens true (vLLM's min_tokens, sent beside ignore_eos), or the gateway's setting that passes ignore_eos / extra body fields through"
            }
        }
    }
}

impl OutputLengths {
    /// The fields the bodies carried, as recorded.
    fn sent(&self) -> SentFields {
        SentFields {
            ignore_eos: self.ignore_eos,
            min_tokens: self.min_tokens,
        }
    }

    /// Records what the bodies carried: exact lengths need a field and a length asked
    /// (without a length neither field is sent).
    pub fn set_sent(&mut self, sent: SentFields) {
        let asked = self.asked_requests + self.unknown_lengths > 0;
        self.ignore_eos = sent.ignore_eos && asked;
        self.min_tokens = sent.min_tokens && asked;
        self.exact = self.ignore_eos || self.min_tokens;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsurge_proto::MonoNanos;

    fn rec(asked: Option<u32>, got: u32, finish: Option<FinishReason>) -> RequestRecord {
        RequestRecord {
            max_output_tokens: asked,
            finish_reason: finish,
            ..RequestRecord::completed(MonoNanos(0), None, MonoNanos(1), got)
        }
    }

    #[test]
    fn short_outputs_are_counted_apart_from_tool_calls() {
        let mut c = OutputLengthCollector::default();
        c.add(&rec(Some(32), 32, Some(FinishReason::Length)));
        c.add(&rec(Some(32), 4, Some(FinishReason::Stop)));
        c.add(&rec(Some(32), 7, Some(FinishReason::ToolCalls)));
        c.add(&rec(None, 9, None));
        let mut l = c.result().expect("completed requests");
        assert_eq!(
            (l.completed, l.asked_requests, l.short, l.short_stopped),
            (4, 3, 1, 1)
        );
        assert_eq!(l.asked_mean, 32.0);
        assert_eq!(l.received_mean, 43.0 / 3.0);
        assert_eq!(
            l.finish_reasons.summary(),
            "length 1, stop 1, tool_calls 1, none 1"
        );
        assert!(l.warning().is_none(), "no exact length asked");
        l.set_sent(SentFields {
            ignore_eos: false,
            min_tokens: true,
        });
        let w = l.warning().expect("min_tokens sent");
        assert!(
            w.contains("ignores min_tokens, so") && !w.contains("both"),
            "{w}"
        );
        l.set_sent(SentFields {
            ignore_eos: true,
            min_tokens: false,
        });
        assert!(
            l.warning()
                .is_some_and(|w| w.contains("ignores ignore_eos, so"))
        );
        l.max_short_share = Some(0.5);
        assert!(l.invalid_reason().is_none());
        l.max_short_share = Some(0.2);
        assert!(l.invalid_reason().is_some());
    }
}
