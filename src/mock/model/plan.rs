//! The latency, length and fault model: what one request will do, decided when it
//! arrives from random streams derived from (seed, stream name, request sequence number).

use std::time::Duration;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use super::tokenizer::VOCAB;
use crate::mock::config::{DEFAULT_SPEC_DECODE_ACCEPTANCE, MockConfig};

/// Names of the random streams, so that one knob never shifts another's draws.
#[derive(Clone, Copy, Debug)]
enum Stream {
    Timing = 1,
    Text = 2,
    Fault = 3,
    SpecDecode = 4,
    ToolCall = 5,
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn rng_for(seed: u64, stream: Stream, seq: u64) -> Xoshiro256PlusPlus {
    let key = splitmix64(splitmix64(seed ^ splitmix64(stream as u64)).wrapping_add(seq));
    Xoshiro256PlusPlus::seed_from_u64(key)
}

/// Why generation ended, as OpenAI names it; each API format spells it its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The model chose to stop.
    Stop,
    /// `max_tokens` was reached.
    Length,
    /// The model called a tool and stopped (`--tool-call-rate`).
    ToolCalls,
}

impl FinishReason {
    /// OpenAI's `finish_reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
        }
    }
}

/// What a request asked of the end of sequence (vLLM's extensions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Eos {
    /// `ignore_eos`: generate exactly the cap.
    pub ignore: bool,
    /// `min_tokens`: no end of sequence before this many tokens (0: none asked).
    pub min_tokens: u32,
}

impl Eos {
    /// `ignore_eos: true`.
    pub const IGNORE: Eos = Eos {
        ignore: true,
        min_tokens: 0,
    };
}

/// A fault injected into one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No fault.
    None,
    /// Answer with this HTTP status (500 or 429) and an error body.
    Error(u16),
    /// Cut the response after this many chunks.
    Drop(u32),
    /// Send a malformed event after this many chunks, then go on.
    Garbage(u32),
    /// Stop sending after this many chunks and hold the connection.
    Stall(u32),
    /// Close the connection before sending any response headers.
    Close,
}

/// The model, built once from the configuration.
#[derive(Debug)]
pub struct Model {
    seed: u64,
    ttft: Normal,
    /// Prefill ms per uncached prompt token.
    ttft_per_prompt_token: f64,
    itl: Normal,
    itl_per_active: f64,
    output: Normal,
    request_latency: Option<Duration>,
    tokens_per_chunk: u32,
    reasoning_tokens: u32,
    /// Cumulative fault thresholds: error, drop, garbage, stall, close (close last, so
    /// that adding it shifted no other fault's draws).
    fault_edges: [f64; 5],
    /// Draft tokens per speculative-decoding step (0: no speculative decoding).
    spec_draft: u32,
    /// Probability that each draft token is accepted.
    spec_acceptance: f64,
    /// Probability that a request offering tools is answered with a tool call.
    tool_call_rate: f64,
}

/// Speculative-decoding counts of some produced tokens (vLLM's counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecCounts {
    /// Steps (one draft each).
    pub drafts: u64,
    /// Tokens proposed.
    pub draft_tokens: u64,
    /// Tokens accepted.
    pub accepted_tokens: u64,
}

/// What one generation request will do.
#[derive(Debug)]
pub struct Plan {
    /// Request sequence number.
    pub seq: u64,
    /// The injected fault.
    pub fault: Fault,
    /// Time to first token.
    pub ttft: Duration,
    /// Reasoning tokens, streamed first.
    pub reasoning: u32,
    /// Content tokens.
    pub content: u32,
    /// Why generation ends.
    pub finish: FinishReason,
    /// The output is a tool call's arguments, not text.
    pub tool_call: bool,
    timing: Xoshiro256PlusPlus,
    text: Xoshiro256PlusPlus,
    /// Draws of accepted draft tokens (its own stream: turning speculative decoding on
    /// shifts no other draw).
    spec: Xoshiro256PlusPlus,
    /// Tokens left of the current speculative-decoding step.
    spec_step_left: u32,
    /// The served model's index (for the per-model counts); set by the handler.
    pub model: usize,
}

/// A normal distribution by its mean and standard deviation (validated >= 0).
#[derive(Clone, Copy, Debug)]
struct Normal {
    mean: f64,
    std: f64,
}

impl Normal {
    fn sample(self, rng: &mut Xoshiro256PlusPlus) -> f64 {
        // Always draw, so the stream's position does not depend on whether std is 0.
        let z: f64 = StandardNormal.sample(rng);
        self.mean + self.std * z
    }
}

fn normal(mean: f64, std: f64) -> Normal {
    Normal { mean, std }
}

/// A latency in ms as a Duration. Settings are capped (`MAX_LATENCY_MS`), but a sum of
/// them (itl + per-active × active) is not: saturate at a year rather than panic.
fn ms(value: f64) -> Duration {
    const CEILING: Duration = Duration::from_secs(365 * 86_400);
    Duration::try_from_secs_f64(value.max(0.0) / 1000.0).map_or(CEILING, |d| d.min(CEILING))
}

impl Model {
    /// Builds the model from a validated configuration.
    pub fn new(config: &MockConfig) -> Self {
        let e = config.error_rate;
        let d = e + config.drop_rate;
        let g = d + config.garbage_rate;
        let s = g + config.stall_rate;
        let c = s + config.close_rate;
        Model {
            seed: config.seed,
            ttft: normal(config.ttft_ms, config.ttft_ms_std),
            ttft_per_prompt_token: config.ttft_ms_per_prompt_token,
            itl: normal(config.itl_ms, config.itl_ms_std),
            itl_per_active: config.itl_ms_per_active,
            output: normal(f64::from(config.output_tokens), config.output_tokens_std),
            request_latency: config.request_latency.map(ms),
            tokens_per_chunk: config.tokens_per_chunk,
            reasoning_tokens: config.reasoning_tokens,
            fault_edges: [e, d, g, s, c],
            spec_draft: config.spec_decode_draft_tokens,
            spec_acceptance: config
                .spec_decode_acceptance
                .unwrap_or(DEFAULT_SPEC_DECODE_ACCEPTANCE),
            tool_call_rate: config.tool_call_rate,
        }
    }

    /// Tokens per SSE chunk.
    pub fn tokens_per_chunk(&self) -> u32 {
        self.tokens_per_chunk
    }

    /// The fixed non-streaming latency, when configured.
    pub fn request_latency(&self) -> Option<Duration> {
        self.request_latency
    }

    /// Decides request `seq`: `prefill_tokens` (prompt tokens the prefix cache missed)
    /// lengthen the TTFT; `max_tokens` caps the output, reasoning and content together;
    /// `eos.ignore` makes the cap the length, `eos.min_tokens` the least length the
    /// model's own end can make it; `reasoning` says whether the endpoint
    /// streams reasoning; `tools` whether the request offered tools to call.
    pub fn plan(
        &self,
        seq: u64,
        prefill_tokens: u64,
        max_tokens: Option<u32>,
        eos: Eos,
        reasoning: bool,
        tools: bool,
    ) -> Plan {
        let mut timing = rng_for(self.seed, Stream::Timing, seq);
        // The jitter is clamped before the prefill is added: a long prompt's TTFT never
        // drops below its prefill.
        let ttft = ms(self.ttft.sample(&mut timing).max(0.0)
            + self.ttft_per_prompt_token * prefill_tokens as f64);
        let sampled = self
            .output
            .sample(&mut timing)
            .round()
            .clamp(1.0, f64::from(u32::MAX)) as u32;
        // The cap counts every generated token, reasoning included (as vLLM's
        // `max_tokens` and OpenAI's `max_completion_tokens` do); the reasoning is cut to
        // leave one answer token.
        let reasoning = if reasoning { self.reasoning_tokens } else { 0 };
        let (reasoning, content_cap) = match max_tokens {
            Some(cap) => {
                let r = reasoning.min(cap.saturating_sub(1));
                (r, Some(cap - r))
            }
            None => (reasoning, None),
        };
        // `min_tokens` counts every generated token, as the cap does.
        let floor = eos.min_tokens.saturating_sub(reasoning);
        let content = match (content_cap, eos.ignore) {
            (Some(cap), true) => cap,
            (Some(cap), false) => cap.min(sampled.max(floor)),
            (None, _) => sampled.max(floor),
        };
        // Its own stream: turning tool calls on shifts no other draw.
        let tool_call =
            tools && rng_for(self.seed, Stream::ToolCall, seq).random_bool(self.tool_call_rate);
        let finish = if content_cap == Some(content) {
            FinishReason::Length
        } else if tool_call {
            FinishReason::ToolCalls
        } else {
            FinishReason::Stop
        };
        let k = self.tokens_per_chunk;
        let chunks = reasoning.div_ceil(k) + content.div_ceil(k);

        let mut faults = rng_for(self.seed, Stream::Fault, seq);
        let u: f64 = faults.random();
        let status = if faults.random_bool(0.5) { 500 } else { 429 };
        let after = faults.random_range(1..=chunks.max(1));
        let fault = match self.fault_edges.iter().position(|edge| u < *edge) {
            Some(0) => Fault::Error(status),
            Some(1) => Fault::Drop(after),
            Some(2) => Fault::Garbage(after),
            Some(3) => Fault::Stall(after),
            Some(4) => Fault::Close,
            _ => Fault::None,
        };
        Plan {
            seq,
            fault,
            ttft,
            reasoning,
            content,
            finish,
            tool_call,
            timing,
            text: rng_for(self.seed, Stream::Text, seq),
            spec: rng_for(self.seed, Stream::SpecDecode, seq),
            spec_step_left: 0,
            model: 0,
        }
    }

    /// Whether speculative decoding is modelled (`--spec-decode-draft-tokens` > 0).
    pub fn spec_decoding(&self) -> bool {
        self.spec_draft > 0
    }

    /// The speculative-decoding steps behind output tokens `from..to` of `plan`. The
    /// first token comes from the prefill; after it, each step drafts K tokens, accepts
    /// a leading run of them (each with the acceptance probability, at most the tokens
    /// the request still has to produce, minus one) and yields the accepted ones plus
    /// one token of its own. So per request, drafts + accepted = output tokens − 1.
    /// Latency is not affected: this models the counters only.
    pub fn spec_decode(&self, plan: &mut Plan, from: u32, to: u32) -> SpecCounts {
        let mut counts = SpecCounts::default();
        if self.spec_draft == 0 {
            return counts;
        }
        let total = plan.total_tokens();
        for i in from.max(1)..to.min(total) {
            if plan.spec_step_left == 0 {
                let left_after = total - i - 1;
                let mut accepted = 0;
                while accepted < self.spec_draft && plan.spec.random_bool(self.spec_acceptance) {
                    accepted += 1;
                }
                let accepted = accepted.min(left_after);
                counts.drafts += 1;
                counts.draft_tokens += u64::from(self.spec_draft);
                counts.accepted_tokens += u64::from(accepted);
                plan.spec_step_left = accepted + 1;
            }
            plan.spec_step_left -= 1;
        }
        counts
    }

    /// The gap before the next token, given the requests generating now.
    pub fn next_itl(&self, plan: &mut Plan, active: u64) -> Duration {
        ms(self.itl.sample(&mut plan.timing) + self.itl_per_active * active as f64)
    }
}

impl Plan {
    /// Total tokens (reasoning then content).
    pub fn total_tokens(&self) -> u32 {
        self.reasoning + self.content
    }

    /// The next generated word.
    pub fn next_word(&mut self) -> &'static str {
        VOCAB[self.text.random_range(0..VOCAB.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> MockConfig {
        MockConfig {
            output_tokens: 10,
            output_tokens_std: 3.0,
            ttft_ms: 50.0,
            ttft_ms_std: 10.0,
            ..MockConfig::instant()
        }
    }

    #[test]
    fn mock_plans_are_reproducible() {
        let a = Model::new(&config());
        let b = Model::new(&config());
        for seq in 0..50 {
            let (mut p, mut q) = (
                a.plan(seq, 0, None, Eos::default(), true, false),
                b.plan(seq, 0, None, Eos::default(), true, false),
            );
            assert_eq!((p.ttft, p.content, p.fault), (q.ttft, q.content, q.fault));
            assert_eq!(p.next_word(), q.next_word());
        }
    }

    #[test]
    fn mock_lengths_follow_max_tokens_and_ignore_eos() {
        let m = Model::new(&MockConfig {
            output_tokens: 10,
            ..MockConfig::instant()
        });
        let p = m.plan(0, 0, Some(4), Eos::default(), false, false);
        assert_eq!((p.content, p.finish), (4, FinishReason::Length));
        let p = m.plan(0, 0, Some(40), Eos::default(), false, false);
        assert_eq!((p.content, p.finish), (10, FinishReason::Stop));
        let p = m.plan(0, 0, Some(40), Eos::IGNORE, false, false);
        assert_eq!((p.content, p.finish), (40, FinishReason::Length));
        let p = m.plan(0, 0, None, Eos::IGNORE, false, false);
        assert_eq!((p.content, p.finish), (10, FinishReason::Stop));
        let at_least = |n| Eos {
            ignore: false,
            min_tokens: n,
        };
        let p = m.plan(0, 0, Some(40), at_least(40), false, false);
        assert_eq!((p.content, p.finish), (40, FinishReason::Length));
        let p = m.plan(0, 0, Some(40), at_least(25), false, false);
        assert_eq!((p.content, p.finish), (25, FinishReason::Stop));
        let p = m.plan(0, 0, Some(40), at_least(3), false, false);
        assert_eq!((p.content, p.finish), (10, FinishReason::Stop));
    }

    #[test]
    fn mock_ttft_grows_with_uncached_prompt_tokens() {
        let m = Model::new(&MockConfig {
            ttft_ms: 20.0,
            ttft_ms_per_prompt_token: 0.5,
            ..MockConfig::instant()
        });
        let short = m.plan(3, 10, None, Eos::default(), false, false).ttft;
        let long = m.plan(3, 1010, None, Eos::default(), false, false).ttft;
        let close = |got: Duration, want_ms: f64| (got.as_secs_f64() * 1e3 - want_ms).abs() < 1e-3;
        assert!(close(short, 25.0), "{short:?}");
        assert!(close(long - short, 500.0), "{long:?} - {short:?}");
    }

    #[test]
    fn mock_fault_rates_partition_requests() {
        let m = Model::new(&MockConfig {
            error_rate: 0.25,
            stall_rate: 0.25,
            close_rate: 0.25,
            ..MockConfig::instant()
        });
        let n = 4000;
        let (mut errors, mut stalls, mut closes) = (0, 0, 0);
        for seq in 0..n {
            match m.plan(seq, 0, None, Eos::default(), false, false).fault {
                Fault::Error(s) => {
                    assert!(s == 500 || s == 429);
                    errors += 1;
                }
                Fault::Stall(after) => {
                    assert!((1..=16).contains(&after));
                    stalls += 1;
                }
                Fault::Close => closes += 1,
                Fault::None => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        for got in [errors, stalls, closes] {
            assert!((800..1200).contains(&got), "{got} of {n}");
        }
    }
}
