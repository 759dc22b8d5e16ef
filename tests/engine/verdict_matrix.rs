//! The verdict matrix (issue 36): one seeded generator draws configurations over every
//! axis a verdict depends on, runs each against the mock with `--truth`, and checks
//! invariants with the mock's truth and `/stats` as the oracle:
//! - the books balance: every created request is in exactly one outcome, every sent one
//!   reached the mock exactly once (joined on `x-request-id`) and the mock saw no other;
//! - every request's instants lie within a fixed bound of the mock's for the same events,
//!   and every aggregate (TTFT from send and from intent, ITL, request counts, output
//!   tokens) within fixed bounds of the same figure computed from the truth;
//! - from intent ≥ from send, request by request;
//! - a run whose server and client kept up (load drawn well inside every capacity, the
//!   mock never queued) never fails for saturation;
//! - a run offered a known overload (≥ 1.5× the tightest capacity on its path: the mock's
//!   slots, the user's concurrency cap, the prefill cap) never passes an SLO or a
//!   goodput objective;
//! - no prefix-cache hit across runs or repeats (synthetic prompts share no prefix, so
//!   the mock's hits stay near zero);
//! - percentile verdicts with their confidence (`--confidence` drawn: the default, 0.9,
//!   0.99): every percentile check's bounds are at the run's confidence, bracket the
//!   truth's percentile of the measured completed requests and sit at the truth's order
//!   statistics of their ranks; its label agrees with its bounds, a PASS with the truth's
//!   percentile at most the threshold and a FAIL (unless the kept-up rule decided) with
//!   it at least the threshold, within the aggregates' tolerance. Beside the generous
//!   objectives every draw but a capacity search has a tight one, `e2e_p90` drawn around
//!   the service time, so PASS, FAIL and INCONCLUSIVE all occur; the exit code follows
//!   the checks (3 only with a failed check; 5 only with one inconclusive, none failed
//!   and no overload offered), and a run that kept up never fails a generous objective;
//! - the steady window (where the report has one) lies inside the measured window; found,
//!   it lasts max(10 s, 10% of the measured window) or more and its requests/s over its
//!   span is within one request of the truth's completed requests sent inside it; not
//!   found, it is shorter than that and has no figures;
//! - hung streams (a stall axis: constant and Poisson draws whose mock hangs most streams
//!   after their first chunk, holding the slot until the client goes away): where the
//!   mock's truth shows every slot of the path hung within the first quarter of a
//!   benchmark's schedule, that benchmark did not keep up and no objective passed;
//! - output lengths (a short-outputs axis: the mock drops `ignore_eos` as a gateway does
//!   and stops at its own seeded length): each benchmark's `output_lengths` (completed,
//!   tokens received, ended short, finish reasons) equals the truth's for its measured
//!   completed requests, with and without the axis;
//! - credentials (a gateway axis: the mock requires an API key on every route): the mock
//!   refused no request llmsurge made, and the key is in no output, stdout or stderr;
//! - `benchmark compare` (one draw in four, not a capacity search): the report against
//!   itself exits 0 with no regression and warns that both share a seed (repeated runs:
//!   judged run to run); against a copy with one benchmark more it exits 3 naming that
//!   benchmark, whichever side lacks it, and 0 with `--allow-missing`; against a copy
//!   whose client reached the mock another way (`--http2`, `--http2-streams`) it warns,
//!   naming the draw's transport;
//! - the server gate (those draws; each draw's mock states a version of its seed): the
//!   report's fingerprint holds that version, and compare against a copy of an upgraded
//!   server exits 3 naming `engine_version`, 0 with `--allow-server-change`;
//! - the llm-d output (those draws write `--outputs json,llmd`): a file per benchmark
//!   whose request totals, failures and incomplete ones are the benchmark's measured
//!   requests, whose server is the stated version, and (gateway draws) without the key;
//! - traces (every draw): every request the mock saw carried the `traceparent` of its log
//!   line's ids, one trace per session or agent trace, never shared; with `--outputs
//!   otlp` (an axis) one client span per request of the log, with its ids and tokens;
//! - router affinity (draws of sessions; every check by the mock's `--record`, joined on
//!   `x-request-id`): with `--affinity dynamo` every turn carried its session's key, one
//!   key per session; with `--sticky-connections` every turn of a session came on one
//!   connection and no connection carried two sessions (without the flag, no claim);
//!   with `--session-token header:NAME` or `cookie:NAME` against the mock's
//!   `--issue-session-token`, a session's first turn carried no token and was handed
//!   one, and every later turn carried exactly the latest token the mock handed that
//!   session's earlier turns (each token is handed out once: never another session's);
//! - the most users per SLO tier (half the capacity draws: a search of concurrent users
//!   over sessions without think time, probes of 1 s, two `--slo-tier`s of
//!   `ttft_mean`/`e2e_mean`, the tight one's thresholds below the loose one's): each
//!   tier's answer is at most 1.5 times the users the path holds (mock slots, the
//!   concurrency cap, the prefill cap: there the mean wait is half a service time, beyond
//!   every drawn threshold), the tight tier's answer at most the loose one's, every probe
//!   that passed a tier at its answer meets each of its means by the truth (from the send
//!   and from the intended instant, within the aggregates' tolerance), the binding
//!   objective is one of the tier's (or `kept_up`) that failed at a probe of the failing
//!   count, and the exit code is 0 exactly when every tier found an answer.
//! - a lost server (an axis: open loops, sessions and closed loops, on every transport,
//!   with `--repeat`, caps and a gateway's key; the mock stopped once a quarter of the
//!   run's expected requests completed; half of them then have a listener that never
//!   accepts take its port, a blackholed host, under `--connect-timeout 500ms`): only a
//!   draw whose mock stopped is ever called
//!   lost, never in a benchmark that ended before the stop, and the run ends there with
//!   exit code 4; a lost benchmark's instant follows its last success and precedes its
//!   first send to the gone mock, nothing sent from it completed, and no objective of
//!   it passed; an outage the
//!   rule's size (10 errors over a second, no injected errors to be chance) after the
//!   stop is called lost, in the benchmark it began in or (`--repeat`) the next; every
//!   completion the client counts, the mock's truth completed.
//! - transports (an axis): the worker's own HTTP/1.1 client over plain TCP and over TLS
//!   (`https://`, `--ca-cert` of a CA made at run time) and its own HTTP/2 client (h2c,
//!   `--http2`): every invariant above holds on each, the router's view (`--record`'s
//!   connections) included;
//! - shared HTTP/2 connections (an axis of the HTTP/2 draws: `--http2-streams` 2 or 8):
//!   every invariant above holds, and by the mock's truth no connection carried more
//!   requests at once than the flag allows.
//!
//! A failing draw prints its seed, how to rerun it alone, and the equivalent command
//! lines. CI runs [`SAMPLE`] draws (about 4 s of load each; a tier search some eight
//! probes of 1 s); `scripts/verdict-soak.sh N` runs N more, and its first
//! [`SOAK_FIRST`] hold every combination the coverage test asks to see together. A new feature joins by adding its axis to
//! [`Draw`] and, where it changes what a request waits for, is offered or counts as
//! good, to the capacity and invariants below.

use super::truth::{
    AGGREGATE_MS, EARLY_MS, HDR_RELATIVE, REQUEST_BOUND_MS, check_percentile, percentile_range,
};
use crate::support::{Joined, llmsurge, mock, recorded, start_run, wait_run};
use llmsurge::mock::{MockConfig, MockServer};
use llmsurge_coordinator::precision::confidence_ranks;
use llmsurge_coordinator::slo::quantile;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Draws CI runs, split over the `sample_*` tests (seeds `1..=SAMPLE`).
const SAMPLE: u64 = 16;
/// The soak's first draws (`scripts/verdict-soak.sh 48`) that hold, with CI's sample,
/// every combination [`the_draws_cover_every_axis`] asks to see run together.
const SOAK_FIRST: u64 = 48;
// The bounds are the truth tests' (tests/engine/truth.rs), so the two cannot drift
// apart: a fixed bound per request, order statistics with a rank slack per aggregate.
/// Mock latencies: every request's time to first token and per-token gap.
const TTFT_MS: f64 = 60.0;
const ITL_MS: f64 = 6.0;
/// Output tokens per request (the data asks for them; `ignore_eos` holds them).
const OUTPUT_TOKENS: u32 = 12;

/// A splitmix64 generator: the draws depend on the seed only.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// The traffic shape.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Profile {
    Synchronous,
    Concurrent(u32),
    Constant,
    Poisson,
    /// Multi-turn sessions at a constant session rate.
    Sessions,
    /// A Mooncake trace at its own timestamps.
    Replay,
    /// Agent traces (a planner, two calls in parallel, a join) at a trace rate.
    AgentTraces,
    /// `--profile capacity`: the search for the highest rate that keeps up and meets
    /// the SLO.
    Capacity,
}

impl Profile {
    /// Requests each unit of the profile's rate carries.
    fn requests_per_unit(self) -> f64 {
        match self {
            Profile::Sessions => SESSION_TURNS as f64,
            Profile::AgentTraces => 4.0,
            _ => 1.0,
        }
    }
    /// Whether the load is offered at a rate (open loop) rather than by streams.
    fn open(self) -> bool {
        !matches!(
            self,
            Profile::Synchronous | Profile::Concurrent(_) | Profile::Capacity
        )
    }
}

const SESSION_TURNS: u32 = 3;

/// Whether the draw's load sits well inside every capacity, or beyond it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Load {
    /// At most 40% of the tightest capacity.
    KeepsUp,
    /// At least 1.6× the tightest capacity.
    Overload,
}

/// How the client reaches the mock: its own HTTP/1.1 client over plain TCP or TLS, or
/// its own HTTP/2 client with prior knowledge (h2c) or over TLS (h2 by ALPN).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Transport {
    Http,
    Https,
    H2c,
    H2,
}

impl Transport {
    /// Over TLS (the mock serves HTTPS).
    fn tls(self) -> bool {
        matches!(self, Transport::Https | Transport::H2)
    }
}

/// A fault the mock injects.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Error500,
    Drop,
}

/// One configuration of the matrix.
#[derive(Clone, Debug)]
struct Draw {
    seed: u64,
    profile: Profile,
    format: &'static str,
    stream: bool,
    tokens_per_chunk: u32,
    /// Reasoning tokens the mock streams before content (with `tokens_per_chunk` > 1,
    /// an odd count makes the first chunk shorter than the rest).
    reasoning: u32,
    tools: bool,
    cancel: bool,
    max_concurrency: Option<u32>,
    prefill_cap: Option<u32>,
    repeat: u32,
    workers: u32,
    fault: Option<Fault>,
    /// The mock's slots (`--max-concurrency` of the mock).
    server_slots: u32,
    load: Load,
    /// Units of the profile per second (requests, sessions, traces); `None` for streams.
    rate: Option<f64>,
    /// `--confidence` of the percentile verdicts; `None`: the default (95%).
    confidence: Option<f64>,
    /// The tight objective's threshold, `e2e_p90<=X` in ms, drawn around the service
    /// time so PASS, FAIL and INCONCLUSIVE all occur; `None` for a capacity search (its
    /// verdict is its answer, searched with the generous objectives).
    tight_ms: Option<f64>,
    /// Whether `benchmark compare` is run on the draw's report (not a capacity search).
    compare: bool,
    /// Whether the mock hangs streams ([`STALL_RATE`]): constant and Poisson draws of at
    /// least [`STALL_MIN_REQUESTS`] requests, without `--cancel` (which would free hung
    /// slots).
    stall: bool,
    /// Whether the mock drops `ignore_eos` and stops at its own length
    /// ([`SHORT_OUTPUT_STD`] around the length asked).
    short_outputs: bool,
    /// Whether the mock requires [`GATEWAY_KEY`] on every route, and the run gives it.
    gateway: bool,
    /// `--affinity dynamo` on sessions: every turn carries its session's key, as the
    /// mock's `--record-header` saw it.
    affinity: bool,
    /// `--outputs otlp`: one span per request of the log, with its ids and the tokens the
    /// mock sent.
    otlp: bool,
    /// A capacity search of concurrent users over sessions with two `--slo-tier`s (the
    /// capacity draws' other half search a rate with `--slo`).
    tiers: Option<Tiers>,
    /// `--sticky-connections` (draws of sessions): one connection per session, by the
    /// mock's record.
    sticky: bool,
    /// `--session-token` and the mock's `--issue-session-token` (draws of sessions):
    /// `header:NAME` or `cookie:NAME`.
    session_token: Option<&'static str>,
    /// How the client reaches the mock (`https://` with `--ca-cert`, or `--http2`);
    /// every invariant holds on each.
    transport: Transport,
    /// The mock is stopped once a quarter of the run's expected requests completed (see
    /// [`check_lost`]).
    lost: bool,
    /// With `lost`: the stopped mock's port then taken by a listener that never accepts
    /// (every SYN unanswered, a blackholed host), and `--connect-timeout 500ms`: the
    /// outage's errors are connects that timed out, never a `timeout`.
    blackhole: bool,
    /// `--http2-streams N` (HTTP/2 draws): requests share connections, never more than N
    /// at once on one by the mock's truth.
    http2_streams: Option<u32>,
}

/// The two tiers of a user search: each `ttft_mean<=A,e2e_mean<=E` (ms), the tight one's
/// thresholds below the loose one's, so a probe the tight tier passes the loose one
/// passes too. Means, not percentiles: a probe of a second at one user holds the
/// [`MIN_SAMPLES`] a mean needs, and a closed loop of U users on C slots makes the mean
/// latency exactly U / C service times (Little's law) where a p50 may land on either
/// side of the queue.
#[derive(Clone, Copy, Debug)]
struct Tiers {
    loose: (f64, f64),
    tight: (f64, f64),
}

impl Tiers {
    /// Thresholds drawn around the service time `s` (ms) and the first token's `ttft`
    /// (ms): loose 1.16 to 1.3 service times, tight 1.06 to 1.12, both failing once the
    /// users are 1.5 times what the path holds (a mean wait of half a service time).
    fn draw(r: &mut Rng, s: f64, ttft: f64) -> Tiers {
        let mut u = || r.below(100) as f64 / 100.0;
        let (l, t) = (0.16 + 0.14 * u(), 0.06 + 0.06 * u());
        Tiers {
            loose: ((ttft + s * l).round(), (s * (1.0 + l)).round()),
            tight: ((ttft + s * t).round(), (s * (1.0 + t)).round()),
        }
    }

    /// `(name, objectives)` of each tier, loose first.
    fn specs(&self) -> [(&'static str, Vec<(&'static str, f64)>); 2] {
        let objectives = |(ttft, e2e): (f64, f64)| vec![("ttft_mean", ttft), ("e2e_mean", e2e)];
        [
            ("loose", objectives(self.loose)),
            ("tight", objectives(self.tight)),
        ]
    }

    /// The `--slo-tier` values.
    fn args(&self) -> Vec<String> {
        self.specs()
            .iter()
            .map(|(name, checks)| {
                let checks: Vec<String> =
                    checks.iter().map(|(m, x)| format!("{m}<={x}ms")).collect();
                format!("{name}:{}", checks.join(","))
            })
            .collect()
    }
}

/// Fewest requests a mean objective is decided on (`slo::MIN_SAMPLES`).
const MIN_SAMPLES: usize = 5;
/// The header and cookie of the session-token axis.
const SESSION_TOKENS: [&str; 2] = ["header:x-matrix-route", "cookie:route"];

/// Spread of the mock's own output lengths when it drops `ignore_eos`.
const SHORT_OUTPUT_STD: f64 = 4.0;
/// The key of the gateway axis: a marker no output may carry.
const GATEWAY_KEY: &str = "sk-matrix-MARKER-5d1e7c";
/// The session-key header of `--affinity dynamo`.
const AFFINITY_HEADER: &str = "x-dynamo-session-id";

/// Share of the streams a stalling mock hangs after their first chunk.
const STALL_RATE: f64 = 0.8;
/// Fewest requests a stall draw's schedule holds (a benchmark's `--max-seconds` 3 s).
const STALL_MIN_REQUESTS: f64 = 24.0;

/// At most the time to a request's first content token, ms: the mock's first token, its
/// reasoning tokens, and the rest of a chunk of several (non-streamed: the whole answer).
fn first_token_ms(d: &Draw) -> f64 {
    if !d.stream {
        return service_s(d) * 1000.0;
    }
    let reasoning = if d.format == "completions" {
        0
    } else {
        d.reasoning
    };
    TTFT_MS + ITL_MS * (reasoning + d.tokens_per_chunk - 1) as f64
}

/// A request's time in the server: its first token, then a gap per further token.
fn service_s(d: &Draw) -> f64 {
    let tokens = OUTPUT_TOKENS
        + if d.format == "completions" {
            0
        } else {
            d.reasoning
        };
    (TTFT_MS + ITL_MS * tokens.saturating_sub(1) as f64) / 1000.0
}

impl Draw {
    fn new(seed: u64) -> Draw {
        let mut r = Rng(seed ^ SALT);
        let profile = match r.below(11) {
            0 => Profile::Synchronous,
            1 => Profile::Concurrent(1 + r.below(6) as u32),
            2 | 3 => Profile::Constant,
            4 | 5 => Profile::Poisson,
            6 | 7 => Profile::Sessions,
            8 => Profile::Replay,
            9 => Profile::AgentTraces,
            _ => Profile::Capacity,
        };
        // Sessions carry a conversation: a format with messages.
        let formats: &[&str] = if profile == Profile::Sessions {
            &["chat", "responses", "anthropic"]
        } else {
            &["chat", "completions", "responses", "anthropic"]
        };
        let format = r.pick(formats);
        let stream = r.chance(0.8);
        let tokens_per_chunk = r.pick(&[1, 1, 3]);
        let reasoning = if format != "completions" && r.chance(0.3) {
            r.pick(&[1, 4])
        } else {
            0
        };
        let tools = format != "completions" && profile != Profile::Sessions && r.chance(0.15);
        let cancel = r.chance(0.15);
        // The synchronous profile is one request at a time: no cap to set.
        let max_concurrency =
            (profile != Profile::Synchronous && r.chance(0.35)).then(|| 2 + r.below(8) as u32);
        let prefill_cap = r.chance(0.25).then(|| 1 + r.below(3) as u32);
        let repeat = if profile.open() && profile != Profile::Replay && r.chance(0.2) {
            2
        } else {
            1
        };
        // The synchronous profile is one stream: one worker.
        let workers = if profile == Profile::Synchronous {
            1
        } else {
            r.pick(&[1, 2])
        };
        let fault = match r.below(8) {
            0 => Some(Fault::Error500),
            1 => Some(Fault::Drop),
            _ => None,
        };
        let server_slots = 2 + r.below(6) as u32;
        let load = if profile.open() && r.chance(0.35) {
            Load::Overload
        } else {
            Load::KeepsUp
        };
        let mut d = Draw {
            seed,
            profile,
            format,
            stream,
            tokens_per_chunk,
            reasoning,
            tools,
            cancel,
            max_concurrency,
            prefill_cap,
            repeat,
            workers,
            fault,
            server_slots,
            load,
            rate: None,
            confidence: None,
            tight_ms: None,
            compare: false,
            stall: false,
            short_outputs: false,
            gateway: false,
            affinity: false,
            otlp: false,
            tiers: None,
            sticky: false,
            session_token: None,
            transport: Transport::Http,
            lost: false,
            blackhole: false,
            http2_streams: None,
        };
        if profile.open() {
            let capacity = d.capacity_rps() / profile.requests_per_unit();
            let share = match load {
                Load::KeepsUp => 0.25 + 0.15 * (r.below(100) as f64 / 100.0),
                Load::Overload => 1.6 + 0.6 * (r.below(100) as f64 / 100.0),
            };
            d.rate = Some((capacity * share * 100.0).round() / 100.0);
        }
        // Axes added later are drawn after all the others, so every seed keeps the
        // configuration it had before they existed.
        d.confidence = r.pick(&[None, Some(0.9), Some(0.99)]);
        // 0.85 to 1.2 times the service time: below every request's e2e (FAIL), above
        // them with enough requests for an upper bound (PASS), or too few requests or
        // the client's queue spreading them across it (INCONCLUSIVE).
        let factor = 0.85 + 0.35 * (r.below(100) as f64 / 100.0);
        d.tight_ms =
            (profile != Profile::Capacity).then(|| (service_s(&d) * 1000.0 * factor).round());
        d.compare = profile != Profile::Capacity && r.chance(0.25);
        d.stall = matches!(profile, Profile::Constant | Profile::Poisson)
            && !cancel
            && d.rate.is_some_and(|rate| rate * 3.0 >= STALL_MIN_REQUESTS)
            && r.chance(0.2);
        d.short_outputs = r.chance(0.2);
        d.gateway = r.chance(0.2);
        d.affinity = profile == Profile::Sessions && r.chance(0.5);
        d.otlp = r.chance(0.25);
        if profile == Profile::Capacity && r.chance(0.5) {
            // Users hold conversations: a format with messages, and no tool call (its
            // turn would end early, beside the tiers' service time).
            if d.format == "completions" {
                d.format = r.pick(&["chat", "responses", "anthropic"]);
            }
            d.tools = false;
            d.affinity = r.chance(0.5);
            d.tiers = Some(Tiers::draw(
                &mut r,
                service_s(&d) * 1000.0,
                first_token_ms(&d),
            ));
        }
        if d.sessions() {
            d.sticky = r.chance(0.4);
            d.session_token =
                r.pick(&[None, None, Some(SESSION_TOKENS[0]), Some(SESSION_TOKENS[1])]);
        }
        // Sticky connections are HTTP/1.1's (refused with --http2).
        d.transport = if d.sticky {
            r.pick(&[Transport::Http, Transport::Https])
        } else {
            r.pick(&[
                Transport::Http,
                Transport::Https,
                Transport::H2c,
                Transport::H2,
            ])
        };
        // A server lost mid-run: open loops, sessions and closed loops, on every
        // transport, with `--repeat`, caps and a gateway's key. Not beside injected faults
        // or hung streams (their errors and held slots have verdicts of their own), nor
        // with compare or the spans, whose checks need a whole run.
        d.lost = matches!(
            profile,
            Profile::Constant | Profile::Poisson | Profile::Sessions | Profile::Concurrent(_)
        ) && d.fault.is_none()
            && !d.stall
            && !d.compare
            && !d.otlp
            && r.chance(0.5);
        // Drawn last, and only for a lost draw: every other draw stays as it was.
        d.blackhole = d.lost && r.chance(0.5);
        // After every other axis, and only for HTTP/2 draws: the others stay as they were.
        if matches!(d.transport, Transport::H2c | Transport::H2) {
            d.http2_streams = r.pick(&[None, Some(2), Some(8)]);
        }
        d
    }

    /// The requests the mock is expected to complete in the run's first quarter: where a
    /// lost draw stops it, leaving the outage more than the rule's second.
    fn stop_after(&self) -> u64 {
        let (rps, seconds) = match self.profile {
            Profile::Concurrent(n) => (n as f64 / service_s(self), 2.0),
            _ => (
                self.rate.unwrap_or(1.0) * self.profile.requests_per_unit(),
                3.0,
            ),
        };
        ((rps.min(self.capacity_rps()) * seconds / 4.0) as u64).max(2)
    }

    /// Whether the draw runs multi-turn sessions (the sessions profile, or the users of a
    /// tiered capacity search).
    fn sessions(&self) -> bool {
        self.profile == Profile::Sessions || self.tiers.is_some()
    }

    /// Whether the mock records what a router sees (`--record`): for the affinity key,
    /// the connection, the session token.
    fn records(&self) -> bool {
        self.affinity || self.sticky || self.session_token.is_some()
    }

    /// The concurrent users the path holds without a queue (no think time): the
    /// requests per second it carries times a request's service time.
    fn users_bound(&self) -> f64 {
        self.capacity_rps() * service_s(self)
    }

    /// Slots a hung stream holds for good on the path: the mock's, or the user's
    /// concurrency cap when tighter (the prefill cap frees at the first token).
    fn hung_slots(&self) -> usize {
        let cap = self.max_concurrency.unwrap_or(u32::MAX);
        self.server_slots.min(cap) as usize
    }

    /// The requests per second the tightest stage of the path can carry: the mock's
    /// slots, the user's concurrency cap, the prefill cap (a unit held until the first
    /// token).
    fn capacity_rps(&self) -> f64 {
        let service = service_s(self);
        let mut c = self.server_slots as f64 / service;
        if let Some(m) = self.max_concurrency {
            c = c.min(m as f64 / service);
        }
        if let Some(p) = self.prefill_cap {
            c = c.min(p as f64 / (TTFT_MS / 1000.0));
        }
        c
    }

    /// The engine version the draw's mock states (its seed's own).
    fn engine_version(&self) -> String {
        format!("0.{}.{}-matrix", self.seed % 13, self.seed % 7)
    }

    fn mock_config(&self, truth: &Path) -> MockConfig {
        MockConfig {
            truth: Some(truth.to_path_buf()),
            seed: self.seed,
            // The server's version as it states it: the report's fingerprint must carry it.
            engine_version: self.engine_version(),
            ttft_ms: TTFT_MS,
            itl_ms: ITL_MS,
            output_tokens: OUTPUT_TOKENS,
            max_concurrency: Some(self.server_slots as usize),
            tokens_per_chunk: self.tokens_per_chunk,
            reasoning_tokens: self.reasoning,
            tool_call_rate: if self.tools { 0.5 } else { 0.0 },
            error_rate: if self.fault == Some(Fault::Error500) {
                0.1
            } else {
                0.0
            },
            drop_rate: if self.fault == Some(Fault::Drop) {
                0.05
            } else {
                0.0
            },
            stall_rate: if self.stall { STALL_RATE } else { 0.0 },
            drop_ignore_eos: self.short_outputs,
            output_tokens_std: if self.short_outputs {
                SHORT_OUTPUT_STD
            } else {
                0.0
            },
            require_api_key: self
                .gateway
                .then(|| llmsurge_proto::config::Secret::new(GATEWAY_KEY)),
            // Anthropic's API carries the key in its own header, as its gateways expect.
            api_key_header: if self.format == "anthropic" {
                "x-api-key".into()
            } else {
                "authorization".into()
            },
            // What a router would see: the request's id (to join with the log) and its key.
            record: self.records().then(|| truth.with_file_name("record.jsonl")),
            record_header: self.record_headers(),
            issue_session_token: self.session_token.map(str::to_string),
            // Written beside the truth file by `write_pki`.
            tls_cert: self
                .transport
                .tls()
                .then(|| truth.with_file_name(SERVER_CERT)),
            tls_key: self
                .transport
                .tls()
                .then(|| truth.with_file_name(SERVER_KEY)),
            ..MockConfig::instant()
        }
    }

    /// The CA and the server's certificate and key an HTTPS draw needs, made in `dir`.
    fn write_pki(&self, dir: &Path) {
        if !self.transport.tls() {
            return;
        }
        let pki = super::tls::Pki::new("matrix");
        let (cert, key) = pki.leaf(super::tls::Leaf::Server, "server");
        for (from, to) in [
            (Path::new(pki.ca()), CA_CERT),
            (&*cert, SERVER_CERT),
            (&*key, SERVER_KEY),
        ] {
            std::fs::copy(from, dir.join(to)).expect("copy the draw's PKI");
        }
    }

    /// The mock's flags for `llmsurge mock-server` (for the reproduction line).
    fn mock_flags(&self) -> String {
        let c = self.mock_config(Path::new("truth.jsonl"));
        format!(
            "--truth truth.jsonl --seed {} --ttft-ms {} --ttft-ms-std 0 --itl-ms {} --itl-ms-std 0 --output-tokens {} --max-concurrency {} --tokens-per-chunk {} --reasoning-tokens {} --tool-call-rate {} --error-rate {} --drop-rate {} --stall-rate {} --output-tokens-std {}{}{}",
            c.seed,
            c.ttft_ms,
            c.itl_ms,
            c.output_tokens,
            self.server_slots,
            c.tokens_per_chunk,
            c.reasoning_tokens,
            c.tool_call_rate,
            c.error_rate,
            c.drop_rate,
            c.stall_rate,
            c.output_tokens_std,
            if self.short_outputs {
                " --drop-ignore-eos"
            } else {
                ""
            },
            if self.gateway {
                format!(
                    " --require-api-key {GATEWAY_KEY} --api-key-header {}",
                    c.api_key_header
                )
            } else {
                String::new()
            }
        ) + &if self.records() {
            let headers: Vec<String> = self
                .record_headers()
                .iter()
                .map(|h| format!(" --record-header {h}"))
                .collect();
            format!(" --record record.jsonl{}", headers.concat())
        } else {
            String::new()
        } + &self
            .session_token
            .map(|t| format!(" --issue-session-token {t}"))
            .unwrap_or_default()
            + if self.transport.tls() {
                " --tls-cert server.pem --tls-key server-key.pem"
            } else {
                ""
            }
    }

    /// The headers the mock's record keeps: the request's id (to join with the log) and
    /// the affinity key.
    fn record_headers(&self) -> Vec<String> {
        let mut h = Vec::new();
        if self.records() {
            h.push(llmsurge_proto::REQUEST_ID_HEADER.to_string());
        }
        if self.affinity {
            h.push(AFFINITY_HEADER.to_string());
        }
        h
    }

    /// The generous objectives every draw is judged on: a server that kept up meets them
    /// many times over; an overloaded one only because the time limit cut its queue.
    fn slo(&self) -> String {
        let mut slo = GENEROUS.join(",");
        if let Some(x) = self.tight_ms {
            write!(slo, ",{TIGHT}<={x}ms").expect("a String takes any write");
        }
        slo
    }

    /// `benchmark run` arguments (without `--target` and `--output-dir`), and the data
    /// files they name, written into `dir`.
    fn args(&self, dir: &Path) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |k: &str, v: String| {
            a.push(k.to_string());
            a.push(v);
        };
        let data = format!(
            "prompt_tokens=40,output_tokens={OUTPUT_TOKENS}{}",
            if self.tools { ",tools=2" } else { "" }
        );
        match self.profile {
            Profile::Synchronous => {
                push("--profile", "synchronous".into());
                push("--data", data);
                push("--max-seconds", "2".into());
            }
            Profile::Concurrent(n) => {
                push("--profile", "concurrent".into());
                push("--rate", n.to_string());
                push("--data", data);
                push("--max-seconds", "2".into());
            }
            Profile::Constant | Profile::Poisson => {
                let kind = if self.profile == Profile::Constant {
                    "constant"
                } else {
                    "poisson"
                };
                push("--profile", kind.into());
                push("--rate", self.rate_arg());
                push("--data", data);
                push("--max-seconds", "3".into());
            }
            Profile::Sessions => {
                push("--profile", "constant".into());
                push("--rate", self.rate_arg());
                push(
                    "--data",
                    format!("turns={SESSION_TURNS},{data},think_time=50ms"),
                );
                push("--max-seconds", "3".into());
            }
            Profile::Replay => {
                let path = dir.join("trace.jsonl");
                write_mooncake(&path, self.rate.unwrap_or(1.0), 3.0);
                push("--profile", "replay".into());
                push("--data", path.display().to_string());
            }
            Profile::Capacity => {
                push("--profile", "capacity".into());
                match &self.tiers {
                    // Users without a think time: each holds one request in flight. A
                    // probe of a second holds the few requests a mean needs at one user,
                    // and the search of a few slots runs some eight of them.
                    Some(tiers) => {
                        push(
                            "--data",
                            format!("turns={SESSION_TURNS},{data},think_time=0s"),
                        );
                        push("--max-seconds", "1".into());
                        for tier in tiers.args() {
                            push("--slo-tier", tier);
                        }
                    }
                    None => {
                        push("--data", data);
                        push("--max-seconds", "1.5".into());
                    }
                }
            }
            Profile::AgentTraces => {
                let path = dir.join("agent.jsonl");
                write_agent_traces(&path, 40);
                push("--profile", "replay".into());
                push("--data", path.display().to_string());
                push("--rate", self.rate_arg());
                push("--max-seconds", "3".into());
            }
        }
        push("--request-format", self.format.into());
        push("--stream", self.stream.to_string());
        push("--workers", self.workers.to_string());
        push("--random-seed", self.seed.to_string());
        // The tiers are the search's objectives: `--slo` beside them is refused.
        if self.tiers.is_none() {
            push("--slo", self.slo());
        }
        push("--goodput", "ttft:20s,e2e:30s".into());
        push("--request-log", "requests.jsonl".into());
        // Compare draws also write the llm-d reports: each must hold its benchmark's
        // measured requests as the JSON report counts them.
        let mut outputs = vec!["json"];
        if self.compare {
            outputs.push("llmd");
        }
        if self.otlp {
            outputs.push("otlp");
        }
        push("--outputs", outputs.join(","));
        if self.affinity {
            push("--affinity", "dynamo".into());
        }
        if let Some(t) = self.session_token {
            push("--session-token", t.into());
        }
        if let Some(m) = self.max_concurrency {
            push("--max-concurrency", m.to_string());
        }
        if let Some(p) = self.prefill_cap {
            push("--max-prefill-concurrency", p.to_string());
        }
        if self.cancel {
            // Timed from the first token where replies stream; a reply in one body has
            // none (a usage error), so it is given up on at the same point from its send.
            let after = if self.stream {
                "ttft+10ms".to_string()
            } else {
                format!("{}ms", TTFT_MS + 10.0)
            };
            push("--cancel", format!("share=15%,after={after}"));
        }
        if self.repeat > 1 {
            push("--repeat", self.repeat.to_string());
        }
        if let Some(c) = self.confidence {
            push("--confidence", c.to_string());
        }
        if self.gateway {
            push("--api-key", GATEWAY_KEY.into());
        }
        if self.sticky {
            a.push("--sticky-connections".into());
        }
        if self.blackhole {
            a.push("--connect-timeout".into());
            a.push("500ms".into());
        }
        match self.transport {
            Transport::Http => {}
            Transport::Https => {
                a.push("--ca-cert".into());
                a.push(dir.join(CA_CERT).display().to_string());
            }
            Transport::H2c => a.push("--http2".into()),
            Transport::H2 => {
                a.push("--ca-cert".into());
                a.push(dir.join(CA_CERT).display().to_string());
                a.push("--http2".into());
            }
        }
        if let Some(n) = self.http2_streams {
            a.push("--http2-streams".into());
            a.push(n.to_string());
        }
        a
    }

    fn rate_arg(&self) -> String {
        format!("{}", self.rate.unwrap_or(1.0))
    }

    /// How to run this draw again, alone and by hand.
    /// The data files the by-hand line names are written to a folder of their own under
    /// the system's temporary folder, kept for that line.
    fn reproduce(&self) -> String {
        let dir = std::env::temp_dir().join(format!("llmsurge-verdict-matrix-{}", self.seed));
        let _ = std::fs::create_dir_all(&dir);
        let args: Vec<String> = self
            .args(&dir)
            .into_iter()
            .map(|a| {
                if a.contains([' ', ',', '"', '*', ';']) {
                    format!("'{a}'")
                } else {
                    a
                }
            })
            .collect();
        format!(
            "draw {self:?}\n  rerun: VERDICT_MATRIX_SEED={} cargo nextest run -E 'test(/verdict_matrix::one_draw$/)' --no-capture\n  by hand: llmsurge mock-server --port 8000 {} &\n           llmsurge benchmark run --target {}://127.0.0.1:8000 --max-dispatch-lag 10s {}{}",
            self.seed,
            self.mock_flags(),
            if self.transport.tls() {
                "https"
            } else {
                "http"
            },
            args.join(" "),
            if self.lost {
                format!(
                    "\n           (and stop the mock once its /stats `completed` reaches {}{})",
                    self.stop_after(),
                    if self.blackhole {
                        ", then have a listener that never accepts take its port"
                    } else {
                        ""
                    }
                )
            } else {
                String::new()
            }
        )
    }
}

/// The files of an HTTPS draw's PKI (see [`Draw::write_pki`]).
const CA_CERT: &str = "ca.pem";
const SERVER_CERT: &str = "server.pem";
const SERVER_KEY: &str = "server-key.pem";

/// The generous objectives (see [`Draw::slo`]).
const GENEROUS: [&str; 2] = ["ttft_p50<=20s", "e2e_p50<=30s"];
/// The statistic of the tight objective (see [`Draw::tight_ms`]).
const TIGHT: &str = "e2e_p90";
/// `--confidence` when the flag is not given.
const DEFAULT_CONFIDENCE: f64 = 0.95;

/// Mixed into every draw's seed, so draw 1 is not the generator's first output for 1.
const SALT: u64 = 0x5eed_0f0a_711c_5e00;

/// A Mooncake trace of `seconds` at `rate` requests a second, every request its own
/// blocks (no prefix shared).
fn write_mooncake(path: &Path, rate: f64, seconds: f64) {
    let n = (rate * seconds).ceil().max(2.0) as u64;
    let lines: Vec<String> = (0..n)
        .map(|i| {
            serde_json::json!({
                "timestamp": (i as f64 * 1000.0 / rate).round() as u64,
                "input_length": 40,
                "output_length": OUTPUT_TOKENS,
                "hash_ids": [1_000_000 + i * 4, 1_000_001 + i * 4],
            })
            .to_string()
        })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").expect("write the trace");
}

/// `n` agent traces, one per line: a planner, two chat calls after it (overlapping),
/// a join after both.
fn write_agent_traces(path: &Path, n: u64) {
    let t0: u64 = 1_700_000_000_000_000_000;
    let ms = 1_000_000u64;
    let span = |trace: u64, id: &str, start: u64, end: u64, input: u32| {
        serde_json::json!({
            "span_id": format!("{id}{trace}"), "parent_span_id": format!("root{trace}"),
            "name": "chat",
            "start_time": t0 + start * ms, "end_time": t0 + end * ms,
            "attributes": {"gen_ai.operation.name": "chat",
                "gen_ai.usage.input_tokens": input, "gen_ai.usage.output_tokens": OUTPUT_TOKENS}
        })
    };
    let lines: Vec<String> = (0..n)
        .map(|i| {
            serde_json::json!({
                "trace_id": format!("t{i}"),
                "spans": [
                    {"span_id": format!("root{i}"), "parent_span_id": "", "name": "agent",
                     "start_time": t0, "end_time": t0 + 900 * ms, "attributes": {}},
                    span(i, "plan", 0, 100, 40),
                    span(i, "a", 110, 300, 50),
                    span(i, "b", 120, 320, 60),
                    span(i, "join", 330, 500, 80),
                ]
            })
            .to_string()
        })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").expect("write the traces");
}

/// Seconds, from a JSON number.
fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Checks a report percentile against the truth's samples (unsorted), as the truth
/// tests do; a percentile missing from the report is broken too.
fn check_reported(
    out: &mut Vec<String>,
    what: &str,
    reported: Option<f64>,
    truth: &mut [f64],
    q: f64,
) {
    let Some(reported) = reported else {
        out.push(format!("{what}: not in the report"));
        return;
    };
    truth.sort_by(f64::total_cmp);
    if !truth.is_empty() {
        check_percentile(out, what, reported, truth, q, AGGREGATE_MS);
    }
}

/// A percentile of a report distribution (`metrics.KEY.successful.percentiles.pNN`).
fn pct(b: &Value, key: &str, p: &str) -> Option<f64> {
    f(&b["metrics"][key]["successful"]["percentiles"][p])
}

/// Joins the request log with the truth on `x-request-id`: every sent request with its
/// one truth line (the second of two when it was resent), every truth line with a
/// logged request. A request the stop cut off within [`crate::support::CUT_AT_SEND_S`] of its send may be
/// missing from the truth; how many were is returned. Anything else unmatched is broken.
fn join(log: &Path, truth: &Path, broken: &mut Vec<String>) -> (Vec<Joined>, u64) {
    let mut by_id: std::collections::HashMap<String, Vec<Value>> = std::collections::HashMap::new();
    for line in recorded(truth) {
        let id = line["request_id"].as_str().unwrap_or_default().to_string();
        by_id.entry(id).or_default().push(line);
    }
    let mut joined = Vec::new();
    let mut unseen = 0;
    for log in recorded(log) {
        let (Some(_), Some(id)) = (log["start_time"].as_f64(), log["request_id"].as_str()) else {
            continue;
        };
        let Some(mut attempts) = by_id.remove(id) else {
            if crate::support::cut_at_send(&log) {
                unseen += 1;
            } else {
                broken.push(format!(
                    "{id} is logged as sent but the mock never saw it: {log}"
                ));
            }
            continue;
        };
        let expected = if log["retried"] == true { 2 } else { 1 };
        if attempts.len() != expected {
            broken.push(format!("{id} reached the mock {} times", attempts.len()));
        }
        let truth = attempts.pop().unwrap_or_default();
        joined.push(Joined { log, truth });
    }
    if !by_id.is_empty() {
        broken.push(format!(
            "the mock saw requests the log does not have: {:?}",
            by_id.keys().collect::<Vec<_>>()
        ));
    }
    (joined, unseen)
}

/// The requests a benchmark cut, against the mock's truth: `cancelled_sent` counts at
/// least every request the mock saw its client leave (one it finished before the cancel
/// reached it is the client's cut alone), and the kept-up rule's overdue arrivals never
/// sent are among the cancelled requests the log has unsent, which the mock never saw
/// (`join`).
fn check_cut(
    d: &Draw,
    broken: &mut Vec<String>,
    i: usize,
    b: &Value,
    log: &Path,
    joined: &[Joined],
) {
    let index = if d.repeat > 1 { "run" } else { "benchmark" };
    let of_mine = |l: &Value| l[index].as_u64().unwrap_or(0) == i as u64;
    let left = joined
        .iter()
        .filter(|j| of_mine(&j.log) && j.truth["outcome"] == "client_gone")
        .count() as u64;
    let sent_cut = b["requests"]["cancelled_sent"].as_u64().unwrap_or(0);
    if sent_cut < left {
        broken.push(format!(
            "benchmark {i}: cancelled_sent {sent_cut}, but the mock saw {left} clients leave"
        ));
    }
    let unsent = recorded(log)
        .iter()
        .filter(|l| {
            of_mine(l)
                && l["phase"] == "measured"
                && l["status"] == "cancelled"
                && l["start_time"].is_null()
        })
        .count() as u64;
    let overdue_unsent = b["unanswered"]["overdue_unsent"].as_u64().unwrap_or(0);
    if overdue_unsent > unsent {
        broken.push(format!(
            "benchmark {i}: {overdue_unsent} overdue arrivals never sent, but the log has {unsent} measured requests cut unsent"
        ));
    }
}

/// When a lost draw's mock stopped (Unix seconds): it stopped accepting at `stopping`
/// and was gone (its in-flight responses given their grace) at `dead`.
struct Stopped {
    stopping: f64,
    dead: f64,
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Waits until the mock completed `n` responses: false when the run ended first (a
/// slow machine), so the draw is judged as one whose mock never stopped.
fn served(server: &MockServer, n: u64, child: &mut std::process::Child) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.stats().completed < n {
        if std::time::Instant::now() > deadline || !matches!(child.try_wait(), Ok(None)) {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    true
}

/// A lost draw's invariants, the mock's stop and its truth the oracle:
/// - no benchmark that ended before the mock stopped is lost, and the run ends at the
///   first lost one, with exit code 4;
/// - a lost benchmark's instant follows its last success and is no later than its
///   first request sent once the mock was gone; nothing sent from it on completed; no
///   objective of it passed;
/// - a benchmark with at least [`LOST_MIN_REQUESTS`] errored requests sent after the mock
///   stopped accepting and after its last success, the first of them
///   [`LOST_MIN_SECONDS`] or more before its measured window's end, and none cut in
///   flight among them, is lost (no draw injects errors, so none is chance);
/// - where a listener that never accepts took the mock's port, no error is a `timeout`;
/// - every request the client completed, the mock completed, and the mock saw none sent
///   after it was gone.
fn check_lost(
    d: &Draw,
    at: &Stopped,
    code: i32,
    benchmarks: &[Value],
    log_path: &Path,
    truth_path: &Path,
    broken: &mut Vec<String>,
) {
    use llmsurge_coordinator::error_tail::{LOST_MIN_REQUESTS, LOST_MIN_SECONDS};
    let logged = recorded(log_path);
    let truth: BTreeMap<String, Value> = recorded(truth_path)
        .into_iter()
        .map(|t| (t["request_id"].as_str().unwrap_or_default().to_string(), t))
        .collect();
    let sent = |e: &Value| f(&e["start_time"]).or(f(&e["scheduled_time"]));
    let index = if d.repeat > 1 { "run" } else { "benchmark" };
    let slack = 1e-3;
    /// How far two instants of the client's own log and report may differ by rounding.
    const SAME_CLOCK_SLACK_S: f64 = 2e-6;
    let first_lost = benchmarks.iter().position(|b| !b["server_lost"].is_null());
    eprintln!(
        "verdict matrix: seed {}: the mock stopped; lost in benchmark {first_lost:?} of {}",
        d.seed,
        benchmarks.len()
    );
    if let Some(i) = first_lost {
        if code != 4 {
            broken.push(format!(
                "benchmark {i} lost the server, but exit code {code}"
            ));
        }
        if i + 1 != benchmarks.len() {
            broken.push(format!(
                "the run went on for {} benchmarks after losing the server in benchmark {i}",
                benchmarks.len() - i - 1
            ));
        }
    }
    for (i, b) in benchmarks.iter().enumerate() {
        let mine: Vec<&Value> = logged
            .iter()
            .filter(|e| e[index].as_u64() == Some(i as u64) && e["phase"] == "measured")
            .collect();
        let completed = |e: &&&Value| e["status"] == "completed";
        let start = f(&b["start_time"]).unwrap_or(0.0);
        let end = f(&b["measured_window"]["end_time"]).unwrap_or(0.0);
        // No connection is a `connect` error: a `timeout` says the server held the
        // request, and keeps a later benchmark from being called lost.
        if d.blackhole
            && let Some(t) = b["errors"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["kind"] == "timeout")
        {
            broken.push(format!(
                "benchmark {i}: the blackholed port's connects are timeouts: {t}"
            ));
        }
        let lost = &b["server_lost"];
        if let Some(at_s) = f(&lost["at_s"]) {
            let lost_at = start + at_s;
            let passed: Vec<&Value> = b["slo"]["checks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["passed"] == true)
                .collect();
            if b["slo"]["passed"] == true || !passed.is_empty() {
                broken.push(format!(
                    "benchmark {i} lost the server, yet objectives passed: {passed:?}"
                ));
            }
            if end < at.stopping {
                broken.push(format!(
                    "benchmark {i} ended at {end:.3}, before the mock stopped at {:.3}, yet lost it: {lost}",
                    at.stopping
                ));
            }
            if let Some(e) = mine
                .iter()
                .filter(completed)
                // Both instants are the client's own clock, so only the floats' rounding
                // (well under a microsecond) separates them: the 1 ms slack of the
                // cross-process comparisons called a success sent 0.9 ms before the
                // tail's first error a contradiction (seed 510).
                .find(|e| sent(e).is_some_and(|s| s >= lost_at - SAME_CLOCK_SLACK_S))
            {
                broken.push(format!(
                    "benchmark {i}: lost at {lost_at:.3}, but a request sent then completed: {e}"
                ));
            }
            let first_dead = mine
                .iter()
                .filter_map(|e| sent(e))
                .filter(|&s| s >= at.dead)
                .fold(f64::INFINITY, f64::min);
            if lost_at > first_dead + slack {
                broken.push(format!(
                    "benchmark {i}: lost at {lost_at:.3}, after its first send to the gone mock at {first_dead:.3}"
                ));
            }
        } else {
            // The rule's tail, of the mock's stop: errors sent after the last success and
            // after the mock stopped accepting (a request on a connection it still held
            // may complete in its grace; then the tail starts after it).
            let last_success = mine
                .iter()
                .filter(completed)
                .filter_map(|e| sent(e))
                .fold(at.stopping, f64::max);
            let tail: Vec<f64> = mine
                .iter()
                .filter(|e| e["status"] == "errored")
                .filter_map(|e| sent(e))
                .filter(|&s| s > last_success)
                .collect();
            let first = tail.iter().copied().fold(f64::INFINITY, f64::min);
            // A little past the rule's span, for the report's and the log's clock reads.
            // Cut in flight, as the rule has it: sent (one cut while connecting never was).
            let cut = mine.iter().any(|e| {
                e["status"] == "cancelled" && f(&e["start_time"]).is_some_and(|s| s > last_success)
            });
            if tail.len() as u64 >= LOST_MIN_REQUESTS
                && end - first >= LOST_MIN_SECONDS + 0.05
                && !cut
            {
                broken.push(format!(
                    "benchmark {i}: {} requests errored after the mock stopped and the last success, the first {:.2} s before the window's end, and the server was not called lost",
                    tail.len(),
                    end - first
                ));
            }
        }
    }
    for e in &logged {
        let id = e["request_id"].as_str().unwrap_or_default();
        let seen = truth.get(id);
        if e["status"] == "completed" && seen.is_none_or(|t| t["outcome"] != "completed") {
            broken.push(format!(
                "{id}: completed for the client, the mock's truth: {seen:?}"
            ));
        }
        if seen.is_some() && sent(e).is_some_and(|s| s > at.dead + slack) {
            broken.push(format!("{id} reached the mock after it was gone: {e}"));
        }
    }
}

/// What one draw broke, one line per invariant (empty: all hold).
fn run_draw(d: &Draw) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth_path = dir.path().join("truth.jsonl");
    d.write_pki(dir.path());
    let server: MockServer = mock(d.mock_config(&truth_path));
    let args = d.args(dir.path());
    let mut all: Vec<String> = vec!["--target".into(), server.base_url()];
    all.extend(args);
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let (mut child, out_dir) = start_run(&refs, |_| {});
    let mut server = Some(server);
    let mut stopped = None;
    let mut hole = None;
    if d.lost
        && let Some(s) = server.take_if(|s| served(s, d.stop_after(), &mut child))
    {
        let stopping = unix_now();
        let port = s.addr().port();
        let stats = s.stop();
        let dead = unix_now();
        hole = d.blackhole.then(|| crate::support::Blackhole::bind(port));
        stopped = Some((Stopped { stopping, dead }, stats));
    }
    let finished = wait_run(child, out_dir);
    drop(hole);
    let (stopped, stats) = match (stopped, server) {
        (Some((at, stats)), _) => (Some(at), stats),
        (None, Some(s)) => (None, s.stop()),
        (None, None) => unreachable!("the mock is stopped only once"),
    };
    let mut broken = Vec::new();
    // The transport drawn is the one that carried the draw's requests (HTTP/1.1 over
    // TLS; the run's own side requests, the check and the scrapes, may take h2 by ALPN;
    // HTTP/2 over TLS: h2 by ALPN).
    let c = &stats.connections;
    if (d.transport == Transport::Https && c.tls_http1 == 0)
        || (d.transport == Transport::H2 && c.tls_h2 == 0)
    {
        broken.push(format!(
            "a {:?} draw, but the mock's connections say {c:?}",
            d.transport
        ));
    }
    let code = finished.code();
    if ![0, 3, 4, 5].contains(&code) {
        broken.push(format!(
            "exit code {code}: the run failed\n{}",
            finished.stderr
        ));
        return broken;
    }
    let report: Value = match std::fs::read(finished.report_path())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
    {
        Some(r) => r,
        None => {
            broken.push(format!("no readable report\n{}", finished.stderr));
            return broken;
        }
    };
    let log_path = finished.dir.path().join("requests.jsonl");
    let benchmarks = report["benchmarks"].as_array().cloned().unwrap_or_default();
    if d.profile != Profile::Capacity && benchmarks.len() != d.repeat as usize {
        broken.push(format!(
            "{} benchmarks in the report for --repeat {}",
            benchmarks.len(),
            d.repeat
        ));
    }

    // Credentials: every request llmsurge made carried the key, and no output holds it.
    if stats.unauthorized.total != 0 {
        broken.push(format!(
            "the mock refused {} requests without the key: {:?}",
            stats.unauthorized.total, stats.unauthorized
        ));
    }
    if d.gateway {
        let mut outputs = vec![
            ("stdout".to_string(), finished.stdout.clone()),
            ("stderr".to_string(), finished.stderr.clone()),
        ];
        for e in std::fs::read_dir(finished.dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(text) = std::fs::read_to_string(e.path()) {
                outputs.push((e.path().display().to_string(), text));
            }
        }
        for (name, text) in outputs {
            if text.contains(GATEWAY_KEY) {
                broken.push(format!("the API key is in {name}"));
            }
        }
    }

    // A server is lost only where the mock was stopped; one that was is judged by the
    // truth of when it stopped, and the checks below, which need whole runs, are not.
    let lost = benchmarks.iter().any(|b| !b["server_lost"].is_null());
    match &stopped {
        None if lost => broken.push(format!(
            "the server was called lost, but the mock never stopped: {:?}",
            benchmarks
                .iter()
                .map(|b| &b["server_lost"])
                .collect::<Vec<_>>()
        )),
        None => {}
        Some(at) => {
            check_lost(
                d,
                at,
                code,
                &benchmarks,
                &log_path,
                &truth_path,
                &mut broken,
            );
            return broken;
        }
    }

    // The books.
    for (i, b) in benchmarks.iter().enumerate() {
        let r = &b["requests"];
        let n = |k: &str| r[k].as_u64().unwrap_or(0);
        if n("created") != n("completed") + n("errored") + n("cancelled") || n("in_flight") != 0 {
            broken.push(format!("benchmark {i}: the books do not balance: {r}"));
        }
        // A peak below the mean says two things at once (the peak is sampled).
        let t = &b["throughput"];
        let (mean, peak) = (
            t["concurrency_mean"].as_f64().unwrap_or(0.0),
            t["concurrency_peak"].as_u64().unwrap_or(0),
        );
        if (peak as f64) < mean.ceil() {
            broken.push(format!(
                "benchmark {i}: concurrency peak {peak} below its mean {mean}"
            ));
        }
    }
    let logged = recorded(&log_path);
    let created: u64 = benchmarks
        .iter()
        .map(|b| b["requests"]["created"].as_u64().unwrap_or(0))
        .sum();
    if logged.len() as u64 != created {
        broken.push(format!(
            "{} requests in the log, {created} created in the report",
            logged.len()
        ));
    }
    let (joined, unseen) = join(&log_path, &truth_path, &mut broken);
    let generation_requests = stats.requests.chat_completions
        + stats.requests.completions
        + stats.requests.responses
        + stats.requests.messages;
    let attempts = joined
        .iter()
        .map(|j| if j.log["retried"] == true { 2 } else { 1 })
        .sum::<u64>();
    if attempts != generation_requests {
        broken.push(format!(
            "the mock counted {generation_requests} generation requests, the log joins {attempts} ({unseen} cut off by the stop before the mock read them)"
        ));
    }

    // Request by request.
    let t = |v: &Value, k: &str| f(&v[k]);
    for j in &joined {
        let (log, truth) = (&j.log, &j.truth);
        let id = log["request_id"].as_str().unwrap_or("?");
        let completed = log["status"] == "completed";
        if completed && truth["outcome"] != "completed" {
            broken.push(format!(
                "{id}: completed for the client, {} for the mock",
                truth["outcome"]
            ));
        }
        // `client` read within [`REQUEST_BOUND_MS`] after the mock's instant `mock`, and
        // never before `earliest`: the kernel stamps a read with its first segment's
        // arrival, and bytes the client had not read yet join the segment before them,
        // so an event can read as early as the frame the mock sent before it.
        let mut near = |what: &str,
                        client: Option<f64>,
                        mock: Option<f64>,
                        earliest: Option<f64>| {
            if let (Some(c), Some(m)) = (client, mock) {
                let ms = (c - m) * 1000.0;
                let early = earliest.map_or(EARLY_MS, |e| (m - e) * 1000.0 + EARLY_MS);
                if !(-early..=REQUEST_BOUND_MS).contains(&ms) {
                    broken.push(format!(
                            "{id}: {what} {ms:+.2} ms from the mock's (allowed -{early:.2} to +{REQUEST_BOUND_MS})"
                        ));
                }
            }
        };
        // The send precedes the mock's arrival.
        near(
            "arrival after the send",
            truth["arrival_time"].as_f64(),
            t(log, "start_time"),
            None,
        );
        let chunks = truth["chunks"].as_array().cloned().unwrap_or_default();
        if completed && d.stream {
            near(
                "first token",
                t(log, "first_token_time"),
                chunks.first().and_then(|c| f(&c["time"])),
                t(truth, "head_time"),
            );
            // The frame before the end's: the last chunk sent strictly before it (the
            // end often rides with the last tokens), else the head.
            let end = t(truth, "end_time");
            let before_end = chunks
                .iter()
                .filter_map(|c| f(&c["time"]))
                .rfind(|&c| end.is_some_and(|e| c < e))
                .or(t(truth, "head_time"));
            near("end", t(log, "end_time"), end, before_end);
            let sent: u64 = chunks
                .iter()
                .map(|c| c["reasoning"].as_u64().unwrap_or(0) + c["content"].as_u64().unwrap_or(0))
                .sum();
            // The client counts tokens from the server's usage; without one it counts
            // chunks, which is not a token count to compare.
            if log["output_tokens_source"] == "usage" && log["output_tokens"].as_u64() != Some(sent)
            {
                broken.push(format!(
                    "{id}: {} output tokens for the client, {sent} sent by the mock",
                    log["output_tokens"]
                ));
            }
        }
        // From intent ≥ from send: the intended instant is never after the send.
        if let (Some(intended), Some(start)) = (t(log, "scheduled_time"), t(log, "start_time"))
            && intended > start + EARLY_MS / 1000.0
        {
            broken.push(format!(
                "{id}: intended {:.3} ms after its send",
                (intended - start) * 1000.0
            ));
        }
    }

    check_traces(&joined, &mut broken);
    if let Some(n) = d.http2_streams {
        check_shared_streams(&joined, n, &mut broken);
    }
    if d.affinity {
        check_affinity(
            &truth_path.with_file_name("record.jsonl"),
            &joined,
            &mut broken,
        );
    }
    if d.otlp {
        check_otlp(finished.dir.path(), &log_path, &mut broken);
    }
    if d.sticky || d.session_token.is_some() {
        let seen = record_by_id(&truth_path.with_file_name("record.jsonl"));
        let sessions = sessions_of(&joined, &seen, &mut broken);
        if d.sticky {
            check_sticky(&sessions, &mut broken);
        }
        if d.session_token.is_some() {
            check_session_tokens(&sessions, &mut broken);
        }
    }

    // Aggregates against the truth, per benchmark (a run of --repeat is one).
    for (i, b) in benchmarks.iter().enumerate() {
        let mine: Vec<&Joined> = joined
            .iter()
            .filter(|j| {
                // A run of --repeat is one benchmark; else the log names its benchmark.
                let index = if d.repeat > 1 {
                    &j.log["run"]
                } else {
                    &j.log["benchmark"]
                };
                index.as_u64().unwrap_or(0) == i as u64
                    && j.log["phase"] == "measured"
                    && j.log["status"] == "completed"
            })
            .collect();
        let completed = b["measured_requests"]["completed"]
            .as_u64()
            .or(b["requests"]["completed"].as_u64())
            .unwrap_or(0);
        if mine.len() as u64 != completed {
            broken.push(format!(
                "benchmark {i}: {completed} completed in the report, {} completed requests joined with the truth",
                mine.len()
            ));
        }
        check_slo_against_truth(
            &mut broken,
            i,
            b,
            &mine,
            d.confidence.unwrap_or(DEFAULT_CONFIDENCE),
        );
        check_steady_state(&mut broken, i, b, &mine);
        check_output_lengths(&mut broken, i, b, &mine);
        check_cut(d, &mut broken, i, b, &log_path, &joined);
        if !d.stream || mine.len() < 20 {
            continue;
        }
        // From send: the mock's first content chunk less the client's send (checked
        // against the mock's arrival request by request above; on a busy machine the
        // mock's handler starts milliseconds after the send, and that is server time).
        let mut ttft: Vec<f64> = mine
            .iter()
            .filter(|j| j.truth["tool_call"].is_null())
            .filter_map(|j| Some((first_content(j)? - f(&j.log["start_time"])?) * 1000.0))
            .collect();
        // From intent: the mock's first content chunk less the intended instant (the
        // client's own schedule, checked deterministic elsewhere).
        let mut ttft_intent: Vec<f64> = mine
            .iter()
            .filter(|j| j.truth["tool_call"].is_null())
            .filter_map(|j| Some((first_content(j)? - f(&j.log["scheduled_time"])?) * 1000.0))
            .collect();
        // Every token gap: a chunk of k tokens carries k gaps of (its gap to the chunk
        // before) / k.
        let mut itl: Vec<f64> = Vec::new();
        for j in &mine {
            let chunks = j.truth["chunks"].as_array().cloned().unwrap_or_default();
            for w in chunks.windows(2) {
                let k =
                    w[1]["reasoning"].as_u64().unwrap_or(0) + w[1]["content"].as_u64().unwrap_or(0);
                if let (Some(a), Some(z)) = (f(&w[0]["time"]), f(&w[1]["time"]))
                    && k > 0
                {
                    itl.extend(std::iter::repeat_n((z - a) * 1000.0 / k as f64, k as usize));
                }
            }
        }
        let only_text = ttft.len() == mine.len();
        for (p, q) in [("p50", 0.5), ("p90", 0.9)] {
            if only_text {
                check_reported(
                    &mut broken,
                    &format!("benchmark {i}: ttft {p}"),
                    pct(b, "ttft", p),
                    &mut ttft,
                    q,
                );
                check_reported(
                    &mut broken,
                    &format!("benchmark {i}: ttft_from_intent {p}"),
                    pct(b, "ttft_from_intent", p),
                    &mut ttft_intent,
                    q,
                );
            }
            check_reported(
                &mut broken,
                &format!("benchmark {i}: itl {p}"),
                pct(b, "itl", p),
                &mut itl,
                q,
            );
        }
        if itl.len() >= 200 {
            check_reported(
                &mut broken,
                &format!("benchmark {i}: itl p99"),
                pct(b, "itl", "p99"),
                &mut itl,
                0.99,
            );
        }
        if let (Some(send), Some(intent)) =
            (pct(b, "ttft", "p50"), pct(b, "ttft_from_intent", "p50"))
            && intent < send * (1.0 - HDR_RELATIVE)
        {
            broken.push(format!(
                "benchmark {i}: ttft p50 from intent {intent:.2} ms below from send {send:.2} ms"
            ));
        }
    }

    if let Some(tiers) = &d.tiers {
        check_tiers(d, tiers, &report, &joined, code, &mut broken);
        return broken;
    }
    // Verdicts. A capacity search never reports a rate beyond what the path carries: a
    // probe offered 1.5× that failed to keep up, whatever its latencies.
    if d.profile == Profile::Capacity {
        let found = report["capacity"]["rate"].as_f64();
        if let Some(rate) = found
            && rate > 1.5 * d.capacity_rps()
        {
            broken.push(format!(
                "the capacity search found {rate:.1} req/s; the path carries {:.1}: {}",
                d.capacity_rps(),
                report["capacity"]
            ));
        }
        return broken;
    }
    // A hanging mock may hang a whole answer without queueing: only its clog is judged.
    let kept_up = d.load == Load::KeepsUp && !d.stall && stats.peak_queued == 0 && code != 4;
    for (i, b) in benchmarks.iter().enumerate() {
        let slo = &b["slo"];
        let not_kept_up = slo["not_kept_up"].as_str();
        if d.stall
            && code != 4
            && let Some(at) = clogged_at(d, &logged, &joined, i)
            && (not_kept_up.is_none()
                || slo["checks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["passed"] == true))
        {
            broken.push(format!(
                "benchmark {i}: hung streams held all {} slots of the path {at:.2} s into its schedule (the mock's truth), yet it kept up or an objective passed: {slo}",
                d.hung_slots()
            ));
        }
        if kept_up && let Some(why) = not_kept_up {
            broken.push(format!(
                "benchmark {i}: the server never queued (mock peak_queued 0) and the load was at most 40% of every capacity, yet: {why}"
            ));
        }
        // The generous objectives hold many times over in a run that kept up.
        for c in slo["checks"].as_array().into_iter().flatten() {
            let generous = c["name"].as_str().is_some_and(|n| GENEROUS.contains(&n));
            if kept_up && generous && c["passed"] != true && c["inconclusive"] != true {
                broken.push(format!(
                    "benchmark {i}: the run kept up, yet a generous objective failed: {c}"
                ));
            }
        }
        if d.load == Load::Overload && code != 4 && slo["passed"] == true {
            broken.push(format!(
                "benchmark {i}: offered ≥ 1.6× the path's capacity ({:.1} req/s), yet the SLO passed: {slo}",
                d.capacity_rps()
            ));
        }
        if d.load == Load::Overload
            && code != 4
            && let Some(checks) = slo["checks"].as_array()
            && checks.iter().any(|c| c["passed"] == true)
        {
            broken.push(format!(
                "benchmark {i}: overloaded, yet an objective passed: {slo}"
            ));
        }
    }
    // The exit code follows the checks: the tight objective may fail or not decide in a
    // run that kept up, so exit 3 and exit 5 are judged by the checks behind them.
    let checks: Vec<&Value> = benchmarks
        .iter()
        .flat_map(|b| b["slo"]["checks"].as_array().into_iter().flatten())
        .collect();
    let failed = checks
        .iter()
        .any(|c| c["passed"] != true && c["inconclusive"] != true);
    let undecided = checks.iter().any(|c| c["inconclusive"] == true);
    if code == 3 && !failed {
        broken.push(format!("exit 3, yet no check failed\n{}", finished.stderr));
    }
    if code == 5 && (failed || !undecided || d.load == Load::Overload) {
        broken.push(format!(
            "exit 5 (inconclusive) with a check failed: {failed}, one inconclusive: {undecided}, load {:?}\n{}",
            d.load, finished.stderr
        ));
    }
    if d.load == Load::Overload && code == 0 {
        broken.push(format!("exit 0 on an overloaded run\n{}", finished.stderr));
    }

    // No prefix-cache hit across runs or repeats: synthetic prompts share no prefix
    // (sessions resend their history by design, and trace rows their blocks).
    if !matches!(d.profile, Profile::Sessions | Profile::AgentTraces)
        && stats.prefix_cache_queries > 0
        && stats.prefix_cache_hits * 20 > stats.prefix_cache_queries
    {
        broken.push(format!(
            "the mock found {} of {} prompt tokens cached: prompts repeated across runs",
            stats.prefix_cache_hits, stats.prefix_cache_queries
        ));
    }
    if d.compare {
        check_llmd(finished.dir.path(), &report, &mut broken);
        check_compare(d, &finished.report_path(), &report, &mut broken);
    }
    // What the tight objective said, for the soak's tally of PASS, FAIL and INCONCLUSIVE.
    let said: Vec<&str> = checks
        .iter()
        .filter(|c| c["name"].as_str().is_some_and(|n| n.starts_with(TIGHT)))
        .map(|c| {
            if c["passed"] == true {
                "PASS"
            } else if c["inconclusive"] == true {
                "INCONCLUSIVE"
            } else {
                "FAIL"
            }
        })
        .collect();
    eprintln!(
        "verdict matrix: seed {}: the tight objective said {}",
        d.seed,
        said.join(" ")
    );
    broken
}

/// Every request the mock saw carried the `traceparent` of its log line's ids, one trace
/// per session (or agent trace), never shared between two.
fn check_traces(joined: &[Joined], broken: &mut Vec<String>) {
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for j in joined {
        let id = j.log["request_id"].as_str().unwrap_or("?");
        let (Some(trace), Some(span)) = (j.log["trace_id"].as_str(), j.log["span_id"].as_str())
        else {
            broken.push(format!("{id}: no trace_id/span_id in the request log"));
            continue;
        };
        let sent = format!("00-{trace}-{span}-01");
        if j.truth["traceparent"].as_str() != Some(sent.as_str()) {
            broken.push(format!(
                "{id}: the mock saw traceparent {}, the log says {sent}",
                j.truth["traceparent"]
            ));
        }
        // A session's turns share its trace; a request alone has its own.
        let unit = match j.log["session"].as_u64() {
            Some(s) => format!("run {} session {s}", j.log["run"].as_u64().unwrap_or(0)),
            None => format!("request {id}"),
        };
        let first = owner
            .entry(trace.to_string())
            .or_insert_with(|| unit.clone());
        if *first != unit {
            broken.push(format!("trace {trace} is both {first}'s and {unit}'s"));
        }
    }
}

/// `--affinity dynamo`: every turn the mock recorded carried its session's key, the same
/// on each turn of a session and different between sessions (the runs of `--repeat`
/// repeat the keys); requests outside sessions none.
fn check_affinity(record: &Path, joined: &[Joined], broken: &mut Vec<String>) {
    let lines = recorded(record);
    let key_of: BTreeMap<String, Option<String>> = lines
        .iter()
        .filter_map(|l| {
            let h = &l["headers"];
            let id = h[llmsurge_proto::REQUEST_ID_HEADER].as_str()?.to_string();
            Some((id, h[AFFINITY_HEADER].as_str().map(str::to_string)))
        })
        .collect();
    let mut session_of: BTreeMap<String, String> = BTreeMap::new();
    for j in joined {
        let id = j.log["request_id"].as_str().unwrap_or("?");
        let Some(key) = key_of.get(id) else {
            broken.push(format!("{id}: not in the mock's record"));
            continue;
        };
        match (j.log["session"].as_u64(), key) {
            // The runs of --repeat send the same keys (documented): a key is a session
            // number's.
            (Some(s), Some(key)) => {
                let unit = format!("session {s}");
                let first = session_of
                    .entry(key.clone())
                    .or_insert_with(|| unit.clone());
                if *first != unit {
                    broken.push(format!("affinity key {key} is both {first}'s and {unit}'s"));
                }
            }
            (Some(s), None) => broken.push(format!("{id}: turn of session {s} without its key")),
            (None, Some(key)) => broken.push(format!("{id}: outside sessions, yet key {key}")),
            (None, None) => {}
        }
    }
    // One key per session number: as many keys as sessions.
    let sessions: std::collections::BTreeSet<u64> = joined
        .iter()
        .filter_map(|j| j.log["session"].as_u64())
        .collect();
    if session_of.len() != sessions.len() {
        broken.push(format!(
            "{} affinity keys for {} sessions",
            session_of.len(),
            sessions.len()
        ));
    }
}

/// The mock's record (`--record`), one line per request by its `x-request-id` (of a
/// request sent twice, the second, as [`join`] takes it).
fn record_by_id(record: &Path) -> BTreeMap<String, Value> {
    recorded(record)
        .into_iter()
        .filter_map(|l| {
            let id = l["headers"][llmsurge_proto::REQUEST_ID_HEADER]
                .as_str()?
                .to_string();
            Some((id, l))
        })
        .collect()
}

/// One turn of a session as the mock recorded it: its number, when the mock began and
/// ended it (`--truth`), and its record line.
struct Turn {
    id: String,
    turn: u64,
    arrival: f64,
    end: f64,
    seen: Value,
}

/// The sessions of a draw (a benchmark's or a run's session number), each with its
/// turns in order; a turn missing from the record is broken.
fn sessions_of(
    joined: &[Joined],
    seen: &BTreeMap<String, Value>,
    broken: &mut Vec<String>,
) -> BTreeMap<String, Vec<Turn>> {
    let mut sessions: BTreeMap<String, Vec<Turn>> = BTreeMap::new();
    for j in joined {
        let id = j.log["request_id"].as_str().unwrap_or("?");
        let Some(session) = j.log["session"].as_u64() else {
            continue;
        };
        let Some(line) = seen.get(id) else {
            broken.push(format!("{id}: not in the mock's record"));
            continue;
        };
        // A session number is a benchmark's, or with --repeat a run's.
        let unit = match j.log["run"].as_u64() {
            Some(run) => format!("run {run} session {session}"),
            None => format!("benchmark {} session {session}", j.log["benchmark"]),
        };
        sessions.entry(unit).or_default().push(Turn {
            id: id.to_string(),
            turn: j.log["turn"].as_u64().unwrap_or(0),
            arrival: f(&j.truth["arrival_time"]).unwrap_or(f64::NAN),
            end: f(&j.truth["end_time"]).unwrap_or(f64::NAN),
            seen: line.clone(),
        });
    }
    for turns in sessions.values_mut() {
        turns.sort_by_key(|t| t.turn);
    }
    sessions
}

/// `--http2-streams N`: by the mock's truth, no connection carried more than N requests
/// at once (from each request's arrival to its end).
fn check_shared_streams(joined: &[Joined], n: u32, broken: &mut Vec<String>) {
    for (c, spans) in &super::truth::spans_by_connection(joined) {
        let most = super::truth::most_at_once(spans);
        if most > n as usize {
            broken.push(format!(
                "--http2-streams {n}: the mock's connection {c} carried {most} requests at once"
            ));
        }
    }
}

/// `--sticky-connections`: by the mock's record, every turn of a session came on one
/// connection, and no connection carried two sessions (each session opens its own and
/// closes it when it ends; overlapping lives would be a shared connection, later ones a
/// closed connection reused).
fn check_sticky(sessions: &BTreeMap<String, Vec<Turn>>, broken: &mut Vec<String>) {
    // Each connection's session and that session's life on it (the mock's instants).
    let mut owner: BTreeMap<u64, (&str, f64, f64)> = BTreeMap::new();
    for (unit, turns) in sessions {
        let connections: std::collections::BTreeSet<u64> = turns
            .iter()
            .filter_map(|t| t.seen["connection"].as_u64())
            .collect();
        if connections.len() != 1 || turns.iter().any(|t| t.seen["connection"].is_null()) {
            let each: Vec<String> = turns
                .iter()
                .map(|t| format!("{} turn {} on {}", t.id, t.turn, t.seen["connection"]))
                .collect();
            broken.push(format!(
                "{unit}: its turns came on connections {connections:?}, not one: {}",
                each.join(", ")
            ));
        }
        let from = turns
            .iter()
            .map(|t| t.arrival)
            .fold(f64::INFINITY, f64::min);
        let to = turns
            .iter()
            .map(|t| t.end)
            .fold(f64::NEG_INFINITY, f64::max);
        for c in connections {
            match owner.get(&c) {
                Some((other, a, b)) => {
                    let overlap = from <= *b && *a <= to;
                    broken.push(format!(
                        "connection {c} carried {other} ({a:.3}–{b:.3} s) and {unit} ({from:.3}–{to:.3} s){}",
                        if overlap { ", both live" } else { ", one after the other" }
                    ));
                }
                None => {
                    owner.insert(c, (unit.as_str(), from, to));
                }
            }
        }
    }
}

/// `--session-token` against the mock's `--issue-session-token`: by its record, a
/// session's first turn carried no token and was handed one; every later turn carried
/// exactly the latest token the mock handed the session's earlier turns (so never
/// another session's: each token is handed out once).
fn check_session_tokens(sessions: &BTreeMap<String, Vec<Turn>>, broken: &mut Vec<String>) {
    for (unit, turns) in sessions {
        let mut latest: Option<&str> = None;
        for (k, t) in turns.iter().enumerate() {
            let carried = t.seen["token"].as_str();
            if carried != latest {
                broken.push(format!(
                    "{unit}: turn {} ({}) carried token {carried:?}, the mock had handed the session {latest:?}",
                    t.turn, t.id
                ));
            }
            if k == 0 && t.seen["issued_token"].is_null() {
                broken.push(format!(
                    "{unit}: its first turn ({}) was handed no token",
                    t.id
                ));
            }
            if let Some(issued) = t.seen["issued_token"].as_str() {
                latest = Some(issued);
            }
        }
    }
}

/// A user search with two tiers (`tiers`), against the mock's truth:
/// - each tier's answer is at most 1.5 times the users the path holds ([`Draw::users_bound`]:
///   there the mean wait is half a service time, beyond every drawn threshold);
/// - the tight tier's answer is at most the loose one's;
/// - each probe at a tier's answer that passed it did by the truth: each mean objective,
///   recomputed from the mock's instants for the probe's completed measured requests
///   (from the send and from the intended instant), within its threshold and
///   [`AGGREGATE_MS`];
/// - the binding objective is one of the tier's (or `kept_up`) that failed at a probe of
///   the failing count above the answer;
/// - the exit code is 0 when every tier found an answer, and not 0 otherwise (unless 4:
///   the client was the bottleneck).
fn check_tiers(
    d: &Draw,
    tiers: &Tiers,
    report: &Value,
    joined: &[Joined],
    code: i32,
    broken: &mut Vec<String>,
) {
    let capacity = &report["capacity"];
    let found = capacity["tiers"].as_array().cloned().unwrap_or_default();
    let specs = tiers.specs();
    let names: Vec<&str> = found.iter().filter_map(|t| t["name"].as_str()).collect();
    if names != ["loose", "tight"] {
        broken.push(format!("tiers {names:?} in the report: {capacity}"));
        return;
    }
    eprintln!(
        "verdict matrix: seed {}: tiers (the path holds {:.2} users): {}",
        d.seed,
        d.users_bound(),
        capacity["conclusion"]
    );
    let bound = 1.5 * d.users_bound();
    let mut answers = Vec::new();
    for (t, (name, objectives)) in found.iter().zip(&specs) {
        let value = t["value"].as_f64();
        answers.push(value);
        if let Some(v) = value
            && v > bound
        {
            broken.push(format!(
                "tier {name}: {v} users, beyond 1.5 times the {:.2} the path holds: {t}",
                d.users_bound()
            ));
        }
        let probes: Vec<&Value> = t["probes"].as_array().into_iter().flatten().collect();
        if let Some(v) = value {
            let passing: Vec<&&Value> = probes
                .iter()
                .filter(|p| p["rate"].as_f64() == Some(v) && p["passed"] == true)
                .collect();
            if passing.is_empty() {
                broken.push(format!(
                    "tier {name}: answer {v} users, yet no probe of it passed: {t}"
                ));
            }
            for p in passing {
                let index = p["benchmark"].as_u64();
                let mine: Vec<&Joined> = joined
                    .iter()
                    .filter(|j| {
                        j.log["benchmark"].as_u64() == index
                            && j.log["phase"] == "measured"
                            && j.log["status"] == "completed"
                    })
                    .collect();
                check_tier_probe(name, objectives, p, &mine, broken);
            }
        }
        let failing = t["bracket"][1].as_f64();
        let binding = t["binding"].as_str();
        let failed_there: Vec<&str> = probes
            .iter()
            .filter(|p| failing.is_some() && p["rate"].as_f64() == failing)
            .flat_map(|p| p["failed"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        if let Some(b) = binding {
            let own = b == "kept_up" || objectives.iter().any(|(m, x)| format!("{m}<={x}ms") == b);
            if !own || !failed_there.contains(&b) {
                broken.push(format!(
                    "tier {name}: binding {b:?}, yet the checks failed at {failing:?} users are {failed_there:?}: {t}"
                ));
            }
        } else if !failed_there.is_empty() {
            broken.push(format!(
                "tier {name}: no binding objective, yet {failed_there:?} failed at {failing:?} users: {t}"
            ));
        }
    }
    if let [Some(loose), tight] = answers[..]
        && tight.is_some_and(|t| t > loose)
    {
        broken.push(format!(
            "the tight tier holds {tight:?} users, the loose one {loose}: {capacity}"
        ));
    }
    if let [None, Some(tight)] = answers[..] {
        broken.push(format!(
            "the tight tier holds {tight} users, the loose one none: {capacity}"
        ));
    }
    // Exit 4 (the client was the bottleneck) says nothing of the tiers.
    let every = answers.iter().all(Option::is_some);
    if code != 4 && every != (code == 0) {
        broken.push(format!(
            "exit {code} with the tiers' answers {answers:?}: {}",
            capacity["conclusion"]
        ));
    }
}

/// A probe tier `name` passed: each of its mean objectives by the truth of the probe's
/// completed measured requests `mine`.
fn check_tier_probe(
    name: &str,
    objectives: &[(&str, f64)],
    probe: &Value,
    mine: &[&Joined],
    broken: &mut Vec<String>,
) {
    let at = format!(
        "tier {name} at {} users (benchmark {})",
        probe["rate"], probe["benchmark"]
    );
    if mine.len() < MIN_SAMPLES {
        broken.push(format!(
            "{at}: passed on {} completed requests, fewer than a mean needs",
            mine.len()
        ));
        return;
    }
    for (metric, threshold) in objectives {
        let event = |j: &Joined| match *metric {
            "ttft_mean" => first_content(j),
            _ => f(&j.truth["end_time"]),
        };
        for from in ["start_time", "scheduled_time"] {
            let xs: Option<Vec<f64>> = mine
                .iter()
                .map(|j| Some((event(j)? - f(&j.log[from])?) * 1000.0))
                .collect();
            let Some(xs) = xs else {
                broken.push(format!(
                    "{at}: {metric} of a request the truth has no instant for"
                ));
                continue;
            };
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            if mean > threshold + AGGREGATE_MS {
                broken.push(format!(
                    "{at}: passed {metric}<={threshold}ms, yet by the truth it is {mean:.2} ms from {from} over {} requests",
                    xs.len()
                ));
            }
        }
    }
}

/// `--outputs otlp`: one client span per line of the request log, with its ids and its
/// output tokens, and no other.
fn check_otlp(dir: &Path, log: &Path, broken: &mut Vec<String>) {
    let Ok(text) = std::fs::read_to_string(dir.join("spans.otlp.json")) else {
        broken.push("no spans.otlp.json written".into());
        return;
    };
    let mut spans: BTreeMap<String, (String, Option<u64>)> = BTreeMap::new();
    for doc in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(doc) = serde_json::from_str::<Value>(doc) else {
            broken.push("a line of spans.otlp.json is not JSON".into());
            return;
        };
        let all = doc["resourceSpans"].as_array().into_iter().flatten();
        for span in all
            .flat_map(|r| r["scopeSpans"].as_array().into_iter().flatten())
            .flat_map(|s| s["spans"].as_array().into_iter().flatten())
            .filter(|s| s["kind"] == 3)
        {
            let attr = |k: &str| {
                span["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["key"] == k)
                    .and_then(|a| a["value"]["intValue"].as_str()?.parse().ok())
            };
            let id = span["spanId"].as_str().unwrap_or_default().to_string();
            let trace = span["traceId"].as_str().unwrap_or_default().to_string();
            if spans
                .insert(id.clone(), (trace, attr("gen_ai.usage.output_tokens")))
                .is_some()
            {
                broken.push(format!("span {id} twice in spans.otlp.json"));
            }
        }
    }
    for log in recorded(log) {
        let id = log["request_id"].as_str().unwrap_or("?");
        let Some(span) = log["span_id"].as_str() else {
            broken.push(format!("{id}: no span_id in the request log"));
            continue;
        };
        match spans.remove(span) {
            None => broken.push(format!("{id}: span {span} not in spans.otlp.json")),
            Some((trace, tokens)) => {
                if Some(trace.as_str()) != log["trace_id"].as_str() {
                    broken.push(format!(
                        "{id}: span {span} in trace {trace}, the log says {}",
                        log["trace_id"]
                    ));
                }
                if tokens != log["output_tokens"].as_u64() {
                    broken.push(format!(
                        "{id}: span {span} says {tokens:?} output tokens, the log {}",
                        log["output_tokens"]
                    ));
                }
            }
        }
    }
    for span in spans.keys() {
        broken.push(format!(
            "span {span} of spans.otlp.json is no request of the log"
        ));
    }
}

/// When hung streams held every slot of the path, in seconds from the benchmark's first
/// intended instant, by the mock's truth: the arrival of the stream that hung the last
/// free slot. `None` unless that came within the first quarter of the benchmark's
/// schedule (later, the unanswered arrivals may be too few to tell).
fn clogged_at(d: &Draw, logged: &[Value], joined: &[Joined], i: usize) -> Option<f64> {
    let index = if d.repeat > 1 { "run" } else { "benchmark" };
    let ours = |log: &Value| log[index].as_u64().unwrap_or(0) == i as u64;
    // Every request the schedule made, sent or not (a cap holds some).
    let intended: Vec<f64> = logged
        .iter()
        .filter(|l| ours(l))
        .filter_map(|l| f(&l["scheduled_time"]))
        .collect();
    let mine: Vec<&Joined> = joined.iter().filter(|j| ours(&j.log)).collect();
    let first = intended.iter().copied().fold(f64::INFINITY, f64::min);
    let last = intended.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut hung: Vec<f64> = mine
        .iter()
        .filter(|j| j.truth["fault"] == "stall")
        .filter_map(|j| f(&j.truth["arrival_time"]))
        .collect();
    hung.sort_by(f64::total_cmp);
    let at = *hung.get(d.hung_slots().checked_sub(1)?)? - first;
    (at <= (last - first) / 4.0).then_some(at)
}

/// A benchmark's `output_lengths` against the truth of its measured completed requests:
/// how many, the tokens the mock sent them, how many ended short of what they asked
/// (a tool call ends early by design), and the mock's finish reasons.
fn check_output_lengths(broken: &mut Vec<String>, i: usize, b: &Value, mine: &[&Joined]) {
    let o = &b["output_lengths"];
    if mine.is_empty() {
        return;
    }
    let tokens = |j: &Joined| {
        j.truth["content_tokens"].as_u64().unwrap_or(0)
            + j.truth["reasoning_tokens"].as_u64().unwrap_or(0)
    };
    let asked: Vec<(&Joined, u64)> = mine
        .iter()
        .filter_map(|j| Some((*j, j.log["output_tokens_asked"].as_u64()?)))
        .collect();
    let received: u64 = asked.iter().map(|(j, _)| tokens(j)).sum();
    let short = asked
        .iter()
        .filter(|(j, a)| tokens(j) < *a && j.truth["finish_reason"] != "tool_calls")
        .count() as u64;
    let finish = |r: &str| {
        mine.iter()
            .filter(|j| j.truth["finish_reason"] == r)
            .count() as u64
    };
    let reported = |k: &str| o[k].as_u64();
    let expected = [
        ("completed", mine.len() as u64),
        ("asked_requests", asked.len() as u64),
        ("received_tokens", received),
        ("short", short),
    ];
    for (k, truth) in expected {
        if reported(k) != Some(truth) {
            broken.push(format!(
                "benchmark {i}: output_lengths.{k} {:?}, the truth {truth}: {o}",
                reported(k)
            ));
        }
    }
    for r in ["stop", "length", "tool_calls"] {
        if o["finish_reasons"][r].as_u64() != Some(finish(r)) {
            broken.push(format!(
                "benchmark {i}: output_lengths.finish_reasons.{r} {}, the truth {}: {o}",
                o["finish_reasons"][r],
                finish(r)
            ));
        }
    }
}

/// The mock's instant of a request's first content chunk.
fn first_content(j: &Joined) -> Option<f64> {
    j.truth["chunks"]
        .as_array()?
        .iter()
        .find(|c| c["content"].as_u64().unwrap_or(0) > 0)
        .and_then(|c| f(&c["time"]))
}

/// The truth's values (ms, sorted) of the distribution a latency check read, over the
/// completed measured requests `mine`: the mock's instant of the event less the client's
/// send (`METRIC.successful`) or intended instant (`METRIC_from_intent.successful`).
/// `None` where the truth cannot say: the `…_with_incomplete` family (it holds lower
/// bounds of requests cut off, which only the client timed) and TTFT of tool calls.
fn truth_of(distribution: &str, mine: &[&Joined]) -> Option<Vec<f64>> {
    let name = distribution.strip_suffix(".successful")?;
    let (metric, from) = match name.strip_suffix("_from_intent") {
        Some(m) => (m, "scheduled_time"),
        None => (name, "start_time"),
    };
    let event = |j: &Joined| match metric {
        "request_latency" => f(&j.truth["end_time"]),
        "ttft" if j.truth["tool_call"].is_null() => first_content(j),
        _ => None,
    };
    let mut xs = mine
        .iter()
        .map(|j| Some((event(j)? - f(&j.log[from])?) * 1000.0))
        .collect::<Option<Vec<f64>>>()?;
    xs.sort_by(f64::total_cmp);
    Some(xs)
}

/// Checks benchmark `i`'s percentile verdicts (`b["slo"]`) against the truth of its
/// completed measured requests `mine`: each check's confidence is the run's
/// (`confidence`); its label agrees with its bounds (PASS: the upper one within the
/// threshold; FAIL, unless the kept-up rule decided: the lower one beyond it;
/// INCONCLUSIVE: the threshold between them); its bounds bracket the truth's percentile
/// and sit at the truth's order statistics of their ranks; and a PASS or a FAIL agrees
/// with the truth's percentile. Tolerances as for every aggregate ([`percentile_range`]):
/// the truth's order statistics [`super::truth::RANK_SLACK`] either side of the rank, plus
/// [`AGGREGATE_MS`] (a read may be stamped as early as the frame before its own, and a
/// busy machine delays a few).
fn check_slo_against_truth(
    broken: &mut Vec<String>,
    i: usize,
    b: &Value,
    mine: &[&Joined],
    confidence: f64,
) {
    let slo = &b["slo"];
    let forced = !slo["not_kept_up"].is_null();
    for c in slo["checks"].as_array().into_iter().flatten() {
        let name = c["name"].as_str().unwrap_or("?");
        // `e2e_p90<=130ms` → 0.9; a check of no percentile has no bounds.
        let Some(q) = name
            .split(['<', '>'])
            .next()
            .and_then(|lhs| lhs.rsplit_once('_'))
            .and_then(|(_, stat)| quantile(stat))
        else {
            continue;
        };
        let (Some(threshold), Some(_)) = (f(&c["threshold"]), f(&c["measured"])) else {
            continue;
        };
        let what = format!("benchmark {i}: {name}");
        let (lower, upper) = (f(&c["lower"]), f(&c["upper"]));
        let passed = c["passed"] == true;
        let inconclusive = c["inconclusive"] == true;
        let nothing_completed = c["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("no request completed"));
        let own = f(&c["confidence"]);
        if own.is_some_and(|o| (o - confidence).abs() > 1e-12) {
            broken.push(format!(
                "{what}: bounds at confidence {own:?}, the run asked for {confidence}: {c}"
            ));
        }
        let beyond = |bound: Option<f64>| bound.is_some_and(|v| v > threshold);
        let consistent = if passed {
            upper.is_some_and(|u| u <= threshold)
        } else if inconclusive {
            !beyond(lower) && (upper.is_none() || beyond(upper))
        } else {
            forced || nothing_completed || beyond(lower)
        };
        if !consistent {
            broken.push(format!("{what}: its label disagrees with its bounds: {c}"));
        }
        let Some(xs) = c["distribution"]
            .as_str()
            .and_then(|dist| truth_of(dist, mine))
            .filter(|xs| !xs.is_empty())
        else {
            continue;
        };
        let (lo, hi) = percentile_range(&xs, q, AGGREGATE_MS);
        if lower.is_some_and(|l| l > hi) || upper.is_some_and(|u| u < lo) {
            broken.push(format!(
                "{what}: bounds {lower:?}..{upper:?} ms do not bracket the truth's percentile, in [{lo:.3}, {hi:.3}] ms ({} values): {c}",
                xs.len()
            ));
        }
        let n = xs.len() as u64;
        let (l, u) = confidence_ranks(n, q, own.unwrap_or(confidence));
        for (side, bound, rank) in [("lower", lower, l), ("upper", upper, u)] {
            if let (Some(v), Some(k)) = (bound, rank) {
                let (floor, ceiling) = percentile_range(&xs, k as f64 / n as f64, AGGREGATE_MS);
                if !(floor..=ceiling).contains(&v) {
                    broken.push(format!(
                        "{what}: {side} bound {v:.3} ms, the truth's order statistic {k} of {n} puts it in [{floor:.3}, {ceiling:.3}] ms"
                    ));
                }
            }
        }
        if passed && lo > threshold {
            broken.push(format!(
                "{what}: PASS, yet the truth's percentile is at least {lo:.3} ms: {c}"
            ));
        }
        if !passed && !inconclusive && !forced && !nothing_completed && hi < threshold {
            broken.push(format!(
                "{what}: FAIL, yet the truth's percentile is at most {hi:.3} ms: {c}"
            ));
        }
    }
}

/// Checks benchmark `i`'s steady window (`b["steady_state"]`, where the report has one):
/// inside the measured window; when found, at least max(10 s, 10% of the measured
/// window) long and its requests/s, times its span, within one request of the completed
/// measured requests `mine` sent inside it (the truth's, joined); when not, shorter than
/// that and without figures.
fn check_steady_state(broken: &mut Vec<String>, i: usize, b: &Value, mine: &[&Joined]) {
    let s = &b["steady_state"];
    let (Some(start), Some(end), Some(t0)) =
        (f(&s["start_s"]), f(&s["end_s"]), f(&b["start_time"]))
    else {
        return;
    };
    let w = &b["measured_window"];
    let (Some(from), Some(to)) = (
        f(&w["start_time"]).map(|t| t - t0),
        f(&w["end_time"]).map(|t| t - t0),
    ) else {
        broken.push(format!(
            "benchmark {i}: a steady window without a measured one"
        ));
        return;
    };
    // The report's times are rounded to microseconds.
    if start < from - 1e-6 || end > to + 1e-6 || start > end {
        broken.push(format!(
            "benchmark {i}: steady window {start}–{end} s outside the measured window {from}–{to} s"
        ));
    }
    let span = end - start;
    let shortest = (0.1 * (to - from)).max(10.0);
    if s["found"] == true {
        if span < shortest - 1e-6 {
            broken.push(format!(
                "benchmark {i}: a steady state of {span} s, shorter than {shortest} s"
            ));
        }
        let sent = mine
            .iter()
            .filter(|j| j.truth["outcome"] == "completed")
            .filter_map(|j| f(&j.log["start_time"]))
            .filter(|&t| t >= t0 + start && t < t0 + end)
            .count() as f64;
        let rate = f(&s["figures"]["requests_per_s"]);
        if rate.is_none_or(|r| (r * span - sent).abs() > 1.0) {
            broken.push(format!(
                "benchmark {i}: steady requests/s {rate:?} over {span} s, {sent} completed requests sent inside it"
            ));
        }
    } else {
        if span >= shortest + 1e-6 {
            broken.push(format!(
                "benchmark {i}: no steady state, yet its window lasts {span} s of the {shortest} s needed"
            ));
        }
        if s["figures"].as_object().is_some_and(|m| !m.is_empty()) {
            broken.push(format!("benchmark {i}: no steady state, yet figures: {s}"));
        }
    }
}

/// What one `benchmark compare` said: its exit code, stderr and `--json` output.
fn compare(base: &Path, cur: &Path, args: &[&str]) -> (i32, String, Value) {
    let c = super::compare_pairs::compare(base, cur, args);
    (c.code, c.stderr, c.json)
}

/// `benchmark compare` of the draw's report (at `path`): against itself it exits 0 with
/// no regression and warns that both sides share a seed (with `--repeat`, judging run to
/// run); against a copy holding one benchmark more, a load the draw never ran, it fails
/// the gate naming that benchmark, whichever side lacks it, and passes with
/// `--allow-missing`. (The draw's report has one load, so removing its only benchmark
/// would leave nothing to pair: the copy adds one instead.)
fn check_compare(d: &Draw, path: &Path, report: &Value, broken: &mut Vec<String>) {
    let (code, stderr, json) = compare(path, path, &[]);
    if code != 0 || json["regressions"] != 0 {
        broken.push(format!(
            "compare against itself: exit {code}, regressions {}\n{stderr}",
            json["regressions"]
        ));
    }
    if !stderr
        .lines()
        .any(|l| l.starts_with("warning: ") && l.contains("share the random seed"))
    {
        broken.push(format!(
            "compare against itself: no warning that both share a seed\n{stderr}"
        ));
    }
    if d.repeat > 1 && json["variance"] != "run_to_run" {
        broken.push(format!(
            "compare of two repeated reports judged by {} variance, not run to run",
            json["variance"]
        ));
    }
    check_server_gate(d, path, report, broken);
    check_transport_warning(d, path, report, broken);
    let mut more = report.clone();
    let Some(benchmarks) = more["benchmarks"].as_array_mut() else {
        return;
    };
    let Some(mut extra) = benchmarks.first().cloned() else {
        return;
    };
    let (strategy, label) = if extra["strategy"]["type"] == "synchronous" {
        (
            serde_json::json!({"type": "concurrent", "streams": 97}),
            "concurrent@97",
        )
    } else {
        (serde_json::json!({"type": "synchronous"}), "synchronous")
    };
    extra["strategy"] = strategy;
    extra["index"] = (benchmarks.len() as u64).into();
    benchmarks.push(extra);
    let dir = tempfile::tempdir().expect("tempdir");
    let more_path = dir.path().join("more.json");
    std::fs::write(&more_path, more.to_string()).expect("write the copy");
    for (base, cur, side, key) in [
        (more_path.as_path(), path, "baseline", "unmatched_baseline"),
        (
            path,
            more_path.as_path(),
            "current report",
            "unmatched_current",
        ),
    ] {
        let (code, stderr, json) = compare(base, cur, &[]);
        let named = stderr.contains(&format!("{label} of the {side} has no partner"));
        if code != 3 || json[key] != serde_json::json!([label]) || !named {
            broken.push(format!(
                "compare with {label} in the {side} only: exit {code}, {key} {}\n{stderr}",
                json[key]
            ));
        }
        let (code, stderr, _) = compare(base, cur, &["--allow-missing"]);
        if code != 0 {
            broken.push(format!(
                "compare with {label} in the {side} only, --allow-missing: exit {code}\n{stderr}"
            ));
        }
    }
}

/// `benchmark compare` against a copy of the draw's report whose client shared HTTP/2
/// connections differently (`--http2-streams`, or HTTP/1.1 against HTTP/2) warns that the
/// transports differ, naming the draw's own.
fn check_transport_warning(d: &Draw, path: &Path, report: &Value, broken: &mut Vec<String>) {
    let mut other = report.clone();
    let backend = &mut other["args"]["backend"];
    match d.transport {
        Transport::H2c | Transport::H2 => {
            backend["http2_streams"] = (d.http2_streams.unwrap_or(1) + 1).into();
        }
        _ => backend["http2"] = true.into(),
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let other_path = dir.path().join("other-transport.json");
    std::fs::write(&other_path, other.to_string()).expect("write the copy");
    let (_, stderr, _) = compare(path, &other_path, &[]);
    let ours = match (d.transport, d.http2_streams) {
        (Transport::H2c | Transport::H2, Some(n)) => {
            format!("--http2 --http2-streams {n} in the baseline")
        }
        (Transport::H2c | Transport::H2, None) => "--http2 in the baseline".to_string(),
        _ => "HTTP/1.1 in the baseline".to_string(),
    };
    if !stderr
        .lines()
        .any(|l| l.contains("the client reached the server differently") && l.contains(&ours))
    {
        broken.push(format!(
            "compare against a copy with another transport: no warning naming `{ours}`\n{stderr}"
        ));
    }
}

/// The llm-d reports of a draw (issue 41): one per benchmark, whose request totals,
/// failures and incomplete ones are the benchmark's measured requests (which the other
/// invariants hold to the mock's truth), and whose server is the version the mock stated.
fn check_llmd(dir: &Path, report: &Value, broken: &mut Vec<String>) {
    let benchmarks = report["benchmarks"].as_array().cloned().unwrap_or_default();
    for (i, b) in benchmarks.iter().enumerate() {
        let name = format!("benchmark_report_v0.2,_{i}.yaml");
        let Ok(text) = std::fs::read_to_string(dir.join(&name)) else {
            broken.push(format!("no {name}"));
            continue;
        };
        let doc: Value = match serde_saphyr::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                broken.push(format!("{name} is no YAML: {e}"));
                continue;
            }
        };
        let m = &b["measured_requests"];
        let count = |k: &str| m[k].as_u64().unwrap_or(0);
        let want = serde_json::json!({
            "total": count("completed") + count("errored") + count("cancelled"),
            "failures": count("errored"),
            "incomplete": count("cancelled"),
        });
        let r = &doc["results"]["request_performance"]["aggregate"]["requests"];
        let got = serde_json::json!({
            "total": r["total"], "failures": r["failures"], "incomplete": r["incomplete"],
        });
        if got != want {
            broken.push(format!("{name}: requests {got}, the report's {want}"));
        }
        let version = &doc["scenario"]["stack"][0]["standardized"]["tool_version"];
        let stated = &report["server_fingerprint"]["before"]["engine_version"]["value"];
        if version != stated {
            broken.push(format!(
                "{name}: server version {version}, the report's {stated}"
            ));
        }
    }
}

/// The server gate (issue 41): the draw's report records the engine version its mock
/// stated; `benchmark compare` against a copy whose server was upgraded fails naming
/// `engine_version` with both values, and passes with `--allow-server-change
/// engine_version`.
fn check_server_gate(d: &Draw, path: &Path, report: &Value, broken: &mut Vec<String>) {
    let stated = d.engine_version();
    let recorded = &report["server_fingerprint"]["before"]["engine_version"]["value"];
    if *recorded != stated.as_str() {
        broken.push(format!(
            "the report's engine version is {recorded}, the mock stated {stated}"
        ));
        return;
    }
    let mut upgraded = report.clone();
    upgraded["server_fingerprint"]["before"]["engine_version"]["value"] = "9.9.9-upgraded".into();
    let dir = tempfile::tempdir().expect("tempdir");
    let upgraded_path = dir.path().join("upgraded.json");
    std::fs::write(&upgraded_path, upgraded.to_string()).expect("write the copy");
    let (code, stderr, _) = compare(path, &upgraded_path, &[]);
    let named = stderr.contains("engine_version") && stderr.contains(&stated);
    if code != 3 || !named {
        broken.push(format!(
            "compare against an upgraded server: exit {code}, engine_version named: {named}\n{stderr}"
        ));
    }
    let (code, stderr, _) = compare(
        path,
        &upgraded_path,
        &["--allow-server-change", "engine_version"],
    );
    if code != 0 {
        broken.push(format!(
            "compare against an upgraded server, --allow-server-change engine_version: exit {code}\n{stderr}"
        ));
    }
}

/// Runs the draws of `seeds`, and fails naming every broken one with how to rerun it.
fn run_draws(seeds: impl Iterator<Item = u64>) {
    let mut failures = String::new();
    let mut ran = 0;
    for seed in seeds {
        let d = Draw::new(seed);
        ran += 1;
        let result = std::panic::catch_unwind(|| run_draw(&d));
        let broken = match result {
            Ok(b) => b,
            Err(e) => vec![format!(
                "panicked: {}",
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )],
        };
        eprintln!(
            "verdict matrix: seed {seed}: {:?} {:?} {}: {}",
            d.profile,
            d.load,
            d.format,
            if broken.is_empty() { "ok" } else { "BROKEN" }
        );
        if !broken.is_empty() {
            let _ = writeln!(
                failures,
                "\n{}\n  broken:\n    {}",
                d.reproduce(),
                broken.join("\n    ")
            );
        }
    }
    assert!(failures.is_empty(), "{ran} draws, broken ones:{failures}");
}

/// CI's sample, in parallel halves.
#[test]
fn sample_first_half() {
    run_draws(1..=SAMPLE / 2);
}

#[test]
fn sample_second_half() {
    run_draws(SAMPLE / 2 + 1..=SAMPLE);
}

/// One draw, `VERDICT_MATRIX_SEED` (the line a failing draw prints), else seed 1.
#[test]
fn one_draw() {
    let seed = std::env::var("VERDICT_MATRIX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    run_draws(std::iter::once(seed));
}

/// `scripts/verdict-soak.sh N`: `VERDICT_MATRIX_DRAWS` draws from
/// `VERDICT_MATRIX_FROM` (default: after CI's sample); nothing without the variable.
#[test]
fn soak() {
    let Some(n) = std::env::var("VERDICT_MATRIX_DRAWS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return;
    };
    let from = std::env::var("VERDICT_MATRIX_FROM")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SAMPLE + 1);
    run_draws(from..from + n);
}

/// The draws cover every axis: over CI's sample and the first soak draws, each value
/// of each axis appears (a new axis must be drawn, not only declared).
#[test]
fn the_draws_cover_every_axis() {
    let draws: Vec<Draw> = (1..=200).map(Draw::new).collect();
    let profiles = [
        "Synchronous",
        "Concurrent",
        "Constant",
        "Poisson",
        "Sessions",
        "Replay",
        "AgentTraces",
        "Capacity",
    ];
    for p in profiles {
        let first = draws
            .iter()
            .find(|d| format!("{:?}", d.profile).starts_with(p))
            .unwrap_or_else(|| panic!("no {p} draw"));
        eprintln!("first {p} draw: seed {}", first.seed);
    }
    for f in ["chat", "completions", "responses", "anthropic"] {
        assert!(draws.iter().any(|d| d.format == f), "no {f} draw");
    }
    let has = |what: &str, pred: &dyn Fn(&Draw) -> bool| {
        assert!(draws.iter().any(pred), "no draw with {what}");
        assert!(!draws.iter().all(pred), "every draw with {what}");
    };
    has("streaming", &|d| d.stream);
    has("chunks of 3", &|d| d.tokens_per_chunk == 3);
    has("a shorter first chunk", &|d| {
        d.tokens_per_chunk == 3 && d.reasoning % 3 != 0 && d.format != "completions"
    });
    has("reasoning", &|d| d.reasoning > 0);
    has("tools", &|d| d.tools);
    has("--cancel", &|d| d.cancel);
    has("--max-concurrency", &|d| d.max_concurrency.is_some());
    has("a prefill cap", &|d| d.prefill_cap.is_some());
    // Each cap's waits are judged at that cap (kept_up::a_prefill_cap_beside_a_...).
    has("a prefill cap beside --max-concurrency", &|d| {
        d.prefill_cap.is_some() && d.max_concurrency.is_some()
    });
    has("--repeat", &|d| d.repeat > 1);
    has("two workers", &|d| d.workers == 2);
    has("a fault", &|d| d.fault.is_some());
    has("an overload", &|d| d.load == Load::Overload);
    has("--confidence 0.9", &|d| d.confidence == Some(0.9));
    has("--confidence 0.99", &|d| d.confidence == Some(0.99));
    has("the default confidence", &|d| d.confidence.is_none());
    has("a tight objective", &|d| d.tight_ms.is_some());
    has("a tight objective below the service time", &|d| {
        d.tight_ms.is_some_and(|x| x < service_s(d) * 1000.0)
    });
    has("a tight objective above the service time", &|d| {
        d.tight_ms.is_some_and(|x| x > service_s(d) * 1000.0)
    });
    has("benchmark compare", &|d| d.compare);
    has("hung streams", &|d| d.stall);
    has("hung streams behind a concurrency cap", &|d| {
        d.stall && d.max_concurrency.is_some()
    });
    has("hung streams without streaming", &|d| d.stall && !d.stream);
    has("short outputs", &|d| d.short_outputs);
    has("short outputs with reasoning", &|d| {
        d.short_outputs && d.reasoning > 0
    });
    has("a gateway's key", &|d| d.gateway);
    for (what, pred) in [
        ("--affinity", (|d: &Draw| d.affinity) as fn(&Draw) -> bool),
        ("--outputs otlp", |d: &Draw| d.otlp),
        ("--http2-streams", |d: &Draw| d.http2_streams.is_some()),
    ] {
        let seeds: Vec<u64> = draws
            .iter()
            .filter(|d| pred(d))
            .map(|d| d.seed)
            .take(8)
            .collect();
        eprintln!("draws with {what}: seeds {seeds:?}");
    }
    has("--affinity", &|d| d.affinity);
    has("--outputs otlp", &|d| d.otlp);
    has("user tiers", &|d| d.tiers.is_some());
    has("a rate capacity search", &|d| {
        d.profile == Profile::Capacity && d.tiers.is_none()
    });
    has("user tiers behind a concurrency or prefill cap", &|d| {
        d.tiers.is_some() && (d.max_concurrency.is_some() || d.prefill_cap.is_some())
    });
    has("--sticky-connections", &|d| d.sticky);
    has("HTTPS", &|d| d.transport == Transport::Https);
    has("h2c", &|d| d.transport == Transport::H2c);
    has("HTTP/2 over TLS", &|d| d.transport == Transport::H2);
    has("--http2-streams", &|d| d.http2_streams.is_some());
    has("--http2-streams over TLS", &|d| {
        d.http2_streams.is_some() && d.transport == Transport::H2
    });
    has("sticky connections over HTTPS", &|d| {
        d.sticky && d.transport == Transport::Https
    });
    has("h2c with a fault", &|d| {
        d.transport == Transport::H2c && d.fault.is_some()
    });
    has("HTTPS with hung streams", &|d| {
        d.transport == Transport::Https && d.stall
    });
    for t in [Transport::Https, Transport::H2c, Transport::H2] {
        let first = draws.iter().find(|d| d.transport == t).map(|d| d.seed);
        assert!(
            first.is_some_and(|s| s <= SAMPLE),
            "no {t:?} draw in CI's sample"
        );
    }
    for t in SESSION_TOKENS {
        has(&format!("--session-token {t}"), &|d| {
            d.session_token == Some(t)
        });
    }
    has(
        "user tiers with sticky connections and a session token",
        &|d| d.tiers.is_some() && d.sticky && d.session_token.is_some(),
    );
    // The router's view and the traces at once: every request carries a `traceparent`
    // (checked on every draw), beside a key, a connection per session and a token.
    let together =
        |d: &Draw| d.affinity && d.otlp && d.sticky && d.session_token.is_some() && !d.lost;
    has(
        "affinity, otlp, sticky connections and a session token together",
        &together,
    );
    has("user tiers with affinity and otlp", &|d| {
        d.tiers.is_some() && d.affinity && d.otlp
    });
    for (what, pred) in [
        (
            "everything of issue 39 at once",
            together as fn(&Draw) -> bool,
        ),
        ("user tiers", |d: &Draw| d.tiers.is_some()),
    ] {
        let first = draws.iter().find(|d| pred(d)).map(|d| d.seed);
        eprintln!("first draw with {what}: seed {first:?}");
        // Within CI's sample or the soak's first draws.
        assert!(
            first.is_some_and(|s| s <= SAMPLE + SOAK_FIRST),
            "no draw with {what} in seeds 1..={}",
            SAMPLE + SOAK_FIRST
        );
    }
    has("--outputs otlp with --repeat", &|d| d.otlp && d.repeat > 1);
    has("a lost server", &|d| d.lost);
    has("a lost server of sessions", &|d| {
        d.lost && d.profile == Profile::Sessions
    });
    has("a lost server of a closed loop", &|d| {
        d.lost && matches!(d.profile, Profile::Concurrent(_))
    });
    has("a lost server with --repeat", &|d| d.lost && d.repeat > 1);
    has("a lost server over HTTP/2", &|d| {
        d.lost && matches!(d.transport, Transport::H2c | Transport::H2)
    });
    has("a lost server over TLS", &|d| {
        d.lost && matches!(d.transport, Transport::Https | Transport::H2)
    });
    has("a lost server behind a gateway", &|d| d.lost && d.gateway);
    has("a lost server that stopped taking connections", &|d| {
        d.blackhole
    });
    let lost: Vec<u64> = draws.iter().filter(|d| d.lost).map(|d| d.seed).collect();
    eprintln!("lost draws: seeds {lost:?}");
    let blackholed: Vec<u64> = draws
        .iter()
        .filter(|d| d.blackhole)
        .map(|d| d.seed)
        .collect();
    eprintln!("of them blackholed: seeds {blackholed:?}");
    assert!(
        blackholed.first().is_some_and(|&s| s <= SAMPLE),
        "no blackholed server in CI's sample"
    );
    let first = lost.first().copied();
    assert!(
        first.is_some_and(|s| s <= SAMPLE),
        "no lost server in CI's sample"
    );
    has("benchmark compare of repeated runs", &|d| {
        d.compare && d.repeat > 1
    });
    // CI's sample itself runs compare.
    assert!(
        draws[..SAMPLE as usize].iter().any(|d| d.compare),
        "no compare in CI's sample"
    );
    // The reproduction line names the seed and the binary's flags.
    let line = draws[0].reproduce();
    assert!(line.contains("VERDICT_MATRIX_SEED=1 "), "{line}");
    assert!(line.contains("llmsurge benchmark run --target"), "{line}");
    // The mock's flags in it are real flags: the mock accepts them.
    let out = llmsurge()
        .args(["mock-server", "--help"])
        .output()
        .expect("llmsurge runs");
    let help = String::from_utf8_lossy(&out.stdout);
    let recording = draws
        .iter()
        .find(|d| d.affinity && d.session_token.is_some())
        .expect("a draw with a key and a token");
    for d in [&draws[0], recording] {
        for flag in d.mock_flags().split(' ').filter(|w| w.starts_with("--")) {
            assert!(help.contains(flag), "mock-server has no {flag}");
        }
    }
}
