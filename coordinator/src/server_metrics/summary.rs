//! From a benchmark's scrapes to the report's [`ServerMetrics`]: series on the
//! benchmark's t0, counter deltas over the measured window (resets handled), gauges'
//! mean and max, histogram count/sum deltas, derived ratios, and cross-checks of the
//! server's counts against the client's.

use super::parse::Parsed;
use super::{
    CrossCheck, Derived, ScrapeErrorEntry, SeriesKind, SeriesSummary, ServerHistogram,
    ServerMetrics,
};
use std::collections::BTreeMap;

/// `(seconds since t0, value)` of one series.
type Points = Vec<(f64, f64)>;

/// One successful scrape, timed in seconds since the benchmark's t0 (negative: before).
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// When its answer arrived, seconds since t0.
    pub at: f64,
    /// What it held.
    pub parsed: Parsed,
}

/// Everything the scraper collected during one benchmark.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScrapeLog {
    /// The URL scraped, as the report writes it (no credentials, query values redacted).
    pub url: String,
    /// Scrapes attempted.
    pub scrapes: u64,
    /// Failures per kind, in order of first occurrence.
    pub errors: Vec<ScrapeErrorEntry>,
    /// The successful scrapes, in time order.
    pub snapshots: Vec<Snapshot>,
    /// Notes for the report's warnings.
    pub notes: Vec<String>,
}

impl ScrapeLog {
    /// Counts a failed scrape of `kind`, keeping the first message of each kind.
    pub fn error(&mut self, kind: &str, message: String) {
        match self.errors.iter_mut().find(|e| e.kind == kind) {
            Some(e) => e.count += 1,
            None => self.errors.push(ScrapeErrorEntry {
                kind: kind.into(),
                count: 1,
                // Reported: a URL in it loses credentials and query values, and a
                // server's text in it is cut to a few KiB.
                sample: llmsurge_proto::inert::bounded(
                    &llmsurge_proto::Redaction::default().text(&message),
                    llmsurge_proto::limits::ERROR_MESSAGE,
                )
                .into_owned(),
            }),
        }
    }
}

/// The measured window, in seconds since t0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SummaryWindow {
    /// Where it opens (0 without a warm-up).
    pub start: f64,
    /// Where it closes (the benchmark's end without a cool-down).
    pub end: f64,
    /// The window is the whole benchmark (no warm-up, no cool-down), so the scrapes just
    /// before t0 and just after the end bound it exactly and the client's counts are
    /// comparable with the server's.
    pub whole_benchmark: bool,
}

/// The client's counts of the window, for the cross-checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClientCounts {
    /// Requests that completed.
    pub completed: u64,
    /// Output tokens received, of every request (a request cancelled mid-stream
    /// included: the server counted what it generated for it). Named apart in a report,
    /// where `output_tokens` is the generation metric a pooling format leaves out.
    #[serde(rename = "output_tokens_received")]
    pub output_tokens: u64,
    /// Prompt tokens of the requests the server began to answer (completed, or a token
    /// came back).
    pub prompt_tokens: u64,
    /// Prompt tokens of every request sent: a request cut before its first token may
    /// or may not have been read by the server.
    pub prompt_tokens_sent: u64,
    /// Requests sent whose prompt length the client does not know (see
    /// `MeasuredTotals::sent_prompts_unknown`: a later session turn cut off before the
    /// server's usage said): the server read prompt tokens of theirs the client did not
    /// count.
    #[serde(default)]
    pub prompts_unknown: u64,
    /// The most prompt tokens those can have had: each at most twice the longest known
    /// prompt. Added to the upper end of the client's range.
    #[serde(default)]
    pub prompts_unknown_bound: u64,
    /// Requests that errored or were cancelled (the server may count tokens of theirs
    /// the client never saw).
    pub unfinished: u64,
    /// Completed requests whose output count the client does not know (a whole
    /// transcription's usage gives seconds, not tokens): with any, output tokens are
    /// not cross-checked.
    #[serde(default)]
    pub outputs_unknown: u64,
    /// The most output tokens the server can have generated beyond those received: for
    /// each request sent that did not complete, its `max_tokens` less what it received
    /// (tokens still in a socket buffer when a stream was cut at a stop, or generated
    /// after the cancel), and a resent request's first try. Added to the upper end of
    /// the client's range.
    #[serde(default)]
    pub outputs_unreceived_bound: u64,
    /// Of those requests, the ones that asked for no bounded length: with any, the
    /// client's output range has no upper end.
    #[serde(default)]
    pub outputs_unbounded: u64,
    /// Output tokens the completed requests that named a length asked for (their
    /// `max_tokens`, summed): with it, a generation count short of it is explained.
    #[serde(default)]
    pub output_tokens_asked: u64,
    /// Of `output_tokens_asked`, the tokens those requests did not receive (asked less
    /// received, summed): outputs that ended short of the length asked.
    #[serde(default)]
    pub output_tokens_short: u64,
    /// `--shard K/N` with N > 1: this host sent only its part of the load, so the
    /// server's counts (every shard's) are not comparable with its own.
    #[serde(skip)]
    pub shard: Option<(u32, u32)>,
}

/// The increase of a counter over `points` (time order), Prometheus' `increase` without
/// extrapolation: a value below the previous one is a reset (the server restarted), and
/// the new value is what was counted since. Returns the delta and the times of resets.
pub fn counter_delta(points: &[(f64, f64)]) -> (f64, Vec<f64>) {
    let mut delta = 0.0;
    let mut resets = Vec::new();
    for w in points.windows(2) {
        let ((_, a), (t, b)) = (w[0], w[1]);
        if b >= a {
            delta += b - a;
        } else {
            delta += b;
            resets.push(t);
        }
    }
    (delta, resets)
}

/// The counters the client can check the server's against.
pub const CROSS_CHECKED: [&str; 3] = ["generation_tokens", "prompt_tokens", "request_success"];

/// The server's counts (`delta` of a counter over the window) beside the client's, one
/// check each; a warning for each that disagrees.
pub fn cross_check_counts(
    delta: &dyn Fn(&str) -> Option<f64>,
    client: &ClientCounts,
    warnings: &mut Vec<String>,
) -> Vec<CrossCheck> {
    let mut cross_checks = Vec::new();
    let checks = [
        // Tokens generated for a request cut at a stop may never reach the client (still
        // in a socket buffer, or generated after the cancel): the server counts them.
        (
            "generation_tokens",
            client.output_tokens,
            Some(client.output_tokens + client.outputs_unreceived_bound),
            "output tokens received",
        ),
        (
            "prompt_tokens",
            client.prompt_tokens,
            Some(client.prompt_tokens_sent + client.prompts_unknown_bound),
            "prompt tokens of the requests it answered",
        ),
        // A request the client cancelled at a stop may have ended at the server first
        // (its last token already written, or a busy client slow to read it): the server
        // counts it a success, the client does not.
        (
            "request_success",
            client.completed,
            Some(client.completed + client.unfinished),
            "completed requests",
        ),
    ];
    for (name, client_count, upper, what) in checks {
        let Some(server_count) = delta(name) else {
            continue;
        };
        // The server counted tokens the client cannot: no check, rather than a false
        // disagreement.
        if name == "generation_tokens"
            && client.outputs_unknown > 0
            && server_count > client_count as f64
        {
            continue;
        }
        // Prompts of unknown length and no known prompt to bound them by (every prompt
        // an audio clip whose usage gave seconds): no upper end to check against.
        if name == "prompt_tokens"
            && client.prompts_unknown > 0
            && client.prompts_unknown_bound == 0
        {
            continue;
        }
        let mut check = CrossCheck::new(
            name,
            server_count,
            client_count as f64,
            upper.map(|u| u as f64),
        );
        if name == "prompt_tokens" {
            check.unknown_requests = client.prompts_unknown;
        }
        if name == "generation_tokens" {
            check.explanation = shortfall_explanation(server_count, client);
        }
        // Requests cut off with no bound on their length: the range has no upper end, so
        // only a server count below the client's is checked.
        if name == "generation_tokens" && client.outputs_unbounded > 0 {
            check.unknown_requests = client.outputs_unbounded;
            if check.difference > 0.0 {
                check.difference = 0.0;
                check.agrees = true;
            }
        }
        if !check.agrees {
            let range = match check.client_upper {
                Some(u) if name == "request_success" => format!(
                    " (up to {u:.0} with the requests that did not complete, which the server may have finished)"
                ),
                Some(u) if name == "generation_tokens" => format!(
                    " (up to {u:.0} with the rest of the requests that did not complete, to their max_tokens)"
                ),
                Some(u) => format!(
                    " (up to {u:.0} with the prompts of requests sent but never answered{})",
                    if client.prompts_unknown > 0 {
                        format!(", {} of unknown length", client.prompts_unknown)
                    } else {
                        String::new()
                    }
                ),
                None => String::new(),
            };
            warnings.push(format!(
                "the server counted {server_count:.0} {name} over the benchmark, the client {client_count:.0} {what}{range} ({:+.1}%, beyond {:.0}%)",
                check.difference * 100.0,
                super::CROSS_CHECK_TOLERANCE * 100.0
            ));
        }
        if let Some(why) = &check.explanation {
            warnings.push(why.clone());
        }
        cross_checks.push(check);
    }
    cross_checks
}

/// Why the server generated fewer output tokens than the requests asked for, when the
/// completed requests' outputs fell short by more than the tolerance: the server's count
/// against what was asked says whether the server stopped early (it counted about what
/// the client received) or the tokens were generated and lost on the way.
fn shortfall_explanation(server: f64, client: &ClientCounts) -> Option<String> {
    let asked = client.output_tokens_asked as f64;
    let short = client.output_tokens_short as f64;
    if asked <= 0.0 || short / asked <= super::CROSS_CHECK_TOLERANCE {
        return None;
    }
    let received = client.output_tokens as f64;
    let stopped_early = server < asked * (1.0 - super::CROSS_CHECK_TOLERANCE);
    Some(if stopped_early {
        format!(
            "the server counted {server:.0} generation_tokens, the client received {received:.0}, while the completed requests asked for {asked:.0} ({short:.0} short, {:.1}%): the server itself generated less than asked (it stopped at its own end of sequence: ignore_eos did not reach it or was ignored), so the tokens were never generated, not lost on the way",
            short / asked * 100.0
        )
    } else {
        format!(
            "the server counted {server:.0} generation_tokens, about the {asked:.0} the completed requests asked for, but the client received {received:.0} ({short:.0} short, {:.1}%): the server generated the lengths asked and something between it and the client (a gateway, a proxy) cut the outputs",
            short / asked * 100.0
        )
    })
}

/// The report's server metrics of one benchmark.
pub fn summarise(log: ScrapeLog, window: SummaryWindow, client: ClientCounts) -> ServerMetrics {
    let mut warnings = log.notes.clone();
    let snaps = &log.snapshots;
    let server = snaps
        .iter()
        .find_map(|s| s.parsed.server)
        .map(str::to_string);

    // The scrapes that bound the window: the last at or before its start and the first at
    // or after its end (the scrape before t0 and the one after the benchmark's end when
    // the window is the whole benchmark).
    let base = snaps.iter().rev().find(|s| s.at <= window.start);
    let last = snaps.iter().find(|s| s.at >= window.end);
    // Without a bounding scrape, deltas count from the nearest one, and the report says so.
    let mut bound = |found: Option<&Snapshot>, nearest: Option<&Snapshot>, what: &str| {
        if found.is_none()
            && let Some(s) = nearest
        {
            warnings.push(format!("no scrape {what} scrape, {:.2}s after t0", s.at));
        }
        found.or(nearest).map(|s| s.at)
    };
    let base_t = bound(
        base,
        snaps.first(),
        "before the measured window opened: counter deltas count from the first",
    );
    let end_t = bound(
        last,
        snaps.last(),
        "after the measured window closed: counter deltas stop at the last",
    );
    let exact = window.whole_benchmark
        && base.is_some_and(|s| s.at < 0.0)
        && last.is_some_and(|s| s.at >= window.end);

    // Series on t0.
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut kinds: BTreeMap<String, SeriesKind> = BTreeMap::new();
    for s in snaps {
        for (name, &(kind, v)) in &s.parsed.values {
            series.entry(name.clone()).or_default().push((s.at, v));
            kinds.entry(name.clone()).or_insert(kind);
        }
    }

    let mut summary = BTreeMap::new();
    if let (Some(b), Some(e)) = (base_t, end_t) {
        let span = e - b;
        for (name, points) in &series {
            let kind = kinds.get(name).copied().unwrap_or(SeriesKind::Gauge);
            let s = match kind {
                SeriesKind::Counter => {
                    let inside: Vec<(f64, f64)> = points
                        .iter()
                        .copied()
                        .filter(|&(t, _)| t >= b && t <= e)
                        .collect();
                    if inside.is_empty() {
                        continue;
                    }
                    let (delta, resets) = counter_delta(&inside);
                    for t in resets {
                        warnings.push(format!(
                            "the server's counter {name} went backwards at {t:.2}s (did the server restart?); its delta counts from the reset"
                        ));
                    }
                    SeriesSummary {
                        kind,
                        delta: Some(delta),
                        rate_per_s: (span > 0.0).then(|| delta / span),
                        mean: None,
                        max: None,
                        samples: inside.len() as u64,
                    }
                }
                SeriesKind::Gauge => {
                    let inside: Vec<f64> = points
                        .iter()
                        .filter(|&&(t, _)| t >= window.start && t <= window.end)
                        .map(|&(_, v)| v)
                        .collect();
                    if inside.is_empty() {
                        continue;
                    }
                    SeriesSummary {
                        kind,
                        delta: None,
                        rate_per_s: None,
                        mean: Some(inside.iter().sum::<f64>() / inside.len() as f64),
                        max: Some(inside.iter().copied().fold(f64::MIN, f64::max)),
                        samples: inside.len() as u64,
                    }
                }
            };
            summary.insert(name.clone(), s);
        }
    }

    let mut histograms = BTreeMap::new();
    if let (Some(b), Some(e)) = (base_t, end_t) {
        let mut points: BTreeMap<&str, (Points, Points)> = BTreeMap::new();
        for s in snaps.iter().filter(|s| s.at >= b && s.at <= e) {
            for (name, &(count, sum)) in &s.parsed.histograms {
                let p = points.entry(name).or_default();
                p.0.push((s.at, count));
                p.1.push((s.at, sum));
            }
        }
        for (name, (counts, sums)) in points {
            let (count, _) = counter_delta(&counts);
            let (sum, _) = counter_delta(&sums);
            histograms.insert(
                name.to_string(),
                ServerHistogram {
                    count,
                    sum,
                    mean: (count > 0.0).then(|| sum / count),
                },
            );
        }
    }

    let delta = |name: &str| summary.get(name).and_then(|s: &SeriesSummary| s.delta);
    let ratio = |num: &str, den: &str| match (delta(num), delta(den)) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    };
    let derived = Derived {
        prefix_cache_hit_rate: ratio("prefix_cache_hits", "prefix_cache_queries"),
        spec_decode_acceptance_rate: ratio(
            "spec_decode_num_accepted_tokens",
            "spec_decode_num_draft_tokens",
        ),
    };

    let mut cross_checks = Vec::new();
    let comparable = CROSS_CHECKED.iter().any(|n| delta(n).is_some());
    if let Some((k, n)) = client.shard.filter(|_| comparable) {
        warnings.push(format!(
            "no cross-check of the server's counts with the client's: this host ran shard {k}/{n}, and the server counts every shard's requests"
        ));
    } else if exact {
        cross_checks = cross_check_counts(&delta, &client, &mut warnings);
    } else if comparable {
        warnings.push(if window.whole_benchmark {
            "no cross-check of the server's counts with the client's: the scrapes just before t0 and just after the end are missing, so the deltas do not cover the benchmark exactly".into()
        } else {
            "no cross-check of the server's counts with the client's: with --warmup or --cooldown the measured window's edges fall between scrapes, so its counter deltas are approximate (to one scrape interval)".into()
        });
    }
    if snaps.is_empty() && log.scrapes > 0 {
        warnings.push(format!(
            "every one of the {} scrapes of {} failed",
            log.scrapes, log.url
        ));
    }

    ServerMetrics {
        url: log.url,
        server,
        scrapes: log.scrapes,
        scrape_errors: log.errors,
        series,
        summary,
        histograms,
        derived,
        cross_checks,
        warnings,
        // Kept so `benchmark merge` can check the server against every shard's client.
        client_counts: exact.then_some(ClientCounts {
            shard: None,
            ..client
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(at: f64, values: &[(&str, SeriesKind, f64)]) -> Snapshot {
        Snapshot {
            at,
            parsed: Parsed {
                server: Some("vllm"),
                values: values
                    .iter()
                    .map(|&(n, k, v)| (n.to_string(), (k, v)))
                    .collect(),
                histograms: BTreeMap::new(),
            },
        }
    }

    const C: SeriesKind = SeriesKind::Counter;
    const G: SeriesKind = SeriesKind::Gauge;

    fn whole(end: f64) -> SummaryWindow {
        SummaryWindow {
            start: 0.0,
            end,
            whole_benchmark: true,
        }
    }

    #[test]
    fn counter_deltas_span_the_scrapes_before_t0_and_after_the_end() {
        let log = ScrapeLog {
            url: "http://h/metrics".into(),
            scrapes: 4,
            snapshots: vec![
                snap(
                    -0.01,
                    &[
                        ("generation_tokens", C, 1000.0),
                        ("num_requests_waiting", G, 0.0),
                    ],
                ),
                snap(
                    1.0,
                    &[
                        ("generation_tokens", C, 1300.0),
                        ("num_requests_waiting", G, 4.0),
                    ],
                ),
                snap(
                    2.0,
                    &[
                        ("generation_tokens", C, 1600.0),
                        ("num_requests_waiting", G, 8.0),
                    ],
                ),
                snap(
                    2.51,
                    &[
                        ("generation_tokens", C, 1640.0),
                        ("num_requests_waiting", G, 0.0),
                    ],
                ),
            ],
            ..ScrapeLog::default()
        };
        let client = ClientCounts {
            output_tokens: 640,
            ..ClientCounts::default()
        };
        let m = summarise(log, whole(2.5), client);
        let g = &m.summary["generation_tokens"];
        assert_eq!(g.delta, Some(640.0));
        assert_eq!(g.samples, 4);
        assert!((g.rate_per_s.expect("rate") - 640.0 / 2.52).abs() < 1e-9);
        // Gauges: the scrapes inside the benchmark only (idle before and after).
        let w = &m.summary["num_requests_waiting"];
        assert_eq!((w.mean, w.max, w.samples), (Some(6.0), Some(8.0), 2));
        assert_eq!(m.series["generation_tokens"].len(), 4);
        assert_eq!(m.server.as_deref(), Some("vllm"));
        assert_eq!(m.cross_checks.len(), 1);
        assert!(m.cross_checks[0].agrees, "{:?}", m.cross_checks);
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    }

    #[test]
    fn a_counter_reset_is_warned_and_counted_from_zero() {
        assert_eq!(
            counter_delta(&[(0.0, 10.0), (1.0, 15.0), (2.0, 3.0), (3.0, 5.0)]),
            (10.0, vec![2.0])
        );
        let log = ScrapeLog {
            snapshots: vec![
                snap(-0.1, &[("request_success", C, 50.0)]),
                snap(1.0, &[("request_success", C, 60.0)]),
                snap(2.0, &[("request_success", C, 4.0)]),
                snap(3.1, &[("request_success", C, 9.0)]),
            ],
            ..ScrapeLog::default()
        };
        let client = ClientCounts {
            completed: 23,
            ..ClientCounts::default()
        };
        let m = summarise(log, whole(3.0), client);
        assert_eq!(m.summary["request_success"].delta, Some(10.0 + 4.0 + 5.0));
        assert!(
            m.warnings
                .iter()
                .any(|w| w.contains("went backwards at 2.00s")),
            "{:?}",
            m.warnings
        );
        // 19 against 23: beyond 2%, warned.
        let check = &m.cross_checks[0];
        assert!(!check.agrees);
        assert!((check.difference - (19.0 - 23.0) / 23.0).abs() < 1e-12);
        assert!(
            m.warnings
                .iter()
                .any(|w| w.contains("request_success") && w.contains("-17.4%")),
            "{:?}",
            m.warnings
        );
    }

    #[test]
    fn output_tokens_the_client_could_not_count_are_not_cross_checked() {
        // Whole transcriptions: the server counted 998 tokens, the client none (the
        // usage gave seconds). Not a disagreement: no check, no warning.
        let log = ScrapeLog {
            snapshots: vec![
                snap(
                    -0.1,
                    &[("generation_tokens", C, 0.0), ("request_success", C, 0.0)],
                ),
                snap(
                    2.1,
                    &[("generation_tokens", C, 998.0), ("request_success", C, 8.0)],
                ),
            ],
            ..ScrapeLog::default()
        };
        let client = ClientCounts {
            completed: 8,
            outputs_unknown: 8,
            ..ClientCounts::default()
        };
        let m = summarise(log.clone(), whole(2.0), client);
        let names: Vec<&str> = m.cross_checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["request_success"]);
        // Their prompts are audio clips of unknown length, with no known prompt to
        // bound them: not checked either.
        let prompts = ScrapeLog {
            snapshots: vec![
                snap(-0.1, &[("prompt_tokens", C, 0.0)]),
                snap(2.1, &[("prompt_tokens", C, 200.0)]),
            ],
            ..ScrapeLog::default()
        };
        let unknown = ClientCounts {
            completed: 8,
            prompts_unknown: 8,
            ..ClientCounts::default()
        };
        let m = summarise(prompts, whole(2.0), unknown);
        assert!(m.cross_checks.is_empty(), "{:?}", m.cross_checks);
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        // Every count known: checked, and 0 against 998 disagrees.
        let m = summarise(
            log,
            whole(2.0),
            ClientCounts {
                outputs_unknown: 0,
                ..client
            },
        );
        assert!(!m.cross_checks[0].agrees, "{:?}", m.cross_checks);
    }

    #[test]
    fn successes_the_client_cancelled_at_the_stop_are_within_its_range() {
        // 21 successes at the server; the client completed 20 and cancelled 3 at the
        // stop, one of which the server had finished (issue 27: seen on a busy machine).
        let log = ScrapeLog {
            snapshots: vec![
                snap(-0.1, &[("request_success", C, 0.0)]),
                snap(2.1, &[("request_success", C, 21.0)]),
            ],
            ..ScrapeLog::default()
        };
        let client = ClientCounts {
            completed: 20,
            unfinished: 3,
            ..ClientCounts::default()
        };
        let m = summarise(log.clone(), whole(2.0), client);
        let check = &m.cross_checks[0];
        assert_eq!(check.client_upper, Some(23.0));
        assert!(check.agrees, "{check:?}");
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        // More successes than requests sent and not failed: a disagreement, said so.
        let client = ClientCounts {
            completed: 18,
            unfinished: 1,
            ..ClientCounts::default()
        };
        let m = summarise(log, whole(2.0), client);
        assert!(!m.cross_checks[0].agrees);
        assert!(
            m.warnings
                .iter()
                .any(|w| w.contains("up to 19 with the requests that did not complete")),
            "{:?}",
            m.warnings
        );
    }

    #[test]
    fn tokens_generated_for_streams_cut_at_the_stop_are_within_the_clients_range() {
        let log = |server: f64| ScrapeLog {
            snapshots: vec![
                snap(-0.1, &[("generation_tokens", C, 0.0)]),
                snap(2.1, &[("generation_tokens", C, server)]),
            ],
            ..ScrapeLog::default()
        };
        // 4,767 tokens received; the streams cut at the stop asked for 1,500 more than
        // they received. The server generated 5,868, some still in socket buffers when
        // the streams were cut (seen with the client descheduled at the stop).
        let client = ClientCounts {
            output_tokens: 4_767,
            unfinished: 10,
            outputs_unreceived_bound: 1_500,
            ..ClientCounts::default()
        };
        let m = summarise(log(5_868.0), whole(2.0), client);
        let check = &m.cross_checks[0];
        assert!(check.agrees, "{check:?}");
        assert_eq!((check.client_upper, check.difference), (Some(6_267.0), 0.0));
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        // More than every cut request's max_tokens: a disagreement, said so.
        let m = summarise(log(6_600.0), whole(2.0), client);
        assert!(!m.cross_checks[0].agrees);
        assert!(
            m.warnings[0].contains("up to 6267 with the rest of the requests"),
            "{:?}",
            m.warnings
        );
        // Fewer than received is a disagreement whatever the upper end.
        let m = summarise(log(4_000.0), whole(2.0), client);
        assert!(!m.cross_checks[0].agrees);
        // A cut request that asked for no bounded length: no upper end, so any count
        // at or above the client's agrees, and the check says how many were unbounded.
        let unbounded = ClientCounts {
            outputs_unbounded: 2,
            ..client
        };
        let m = summarise(log(60_000.0), whole(2.0), unbounded);
        let check = &m.cross_checks[0];
        assert!(check.agrees, "{check:?}");
        assert_eq!(check.unknown_requests, 2);
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        let m = summarise(log(4_000.0), whole(2.0), unbounded);
        assert!(!m.cross_checks[0].agrees);
        // Every request completed: the client's count is exact.
        let exact = ClientCounts {
            output_tokens: 4_767,
            ..ClientCounts::default()
        };
        let m = summarise(log(5_868.0), whole(2.0), exact);
        assert_eq!(m.cross_checks[0].client_upper, None);
        assert!(!m.cross_checks[0].agrees);
    }

    #[test]
    fn a_report_from_before_the_output_range_reads_as_an_exact_count() {
        let old: ClientCounts = serde_json::from_value(serde_json::json!({
            "completed": 8, "output_tokens_received": 800, "prompt_tokens": 80,
            "prompt_tokens_sent": 90, "unfinished": 2,
        }))
        .expect("an older report's counts");
        assert_eq!(
            (old.outputs_unreceived_bound, old.outputs_unbounded),
            (0, 0)
        );
    }

    #[test]
    fn prompts_of_unknown_length_widen_the_range_by_a_bound_only() {
        let log = |server: f64| ScrapeLog {
            snapshots: vec![
                snap(-0.1, &[("prompt_tokens", C, 0.0)]),
                snap(2.1, &[("prompt_tokens", C, server)]),
            ],
            ..ScrapeLog::default()
        };
        // 1,000 tokens answered; 2 turns cut off with prompts the client did not count,
        // the longest known prompt 150 tokens: up to 1,000 + 2 × 2 × 150 = 1,600.
        let client = ClientCounts {
            prompt_tokens: 1_000,
            prompt_tokens_sent: 1_000,
            prompts_unknown: 2,
            prompts_unknown_bound: 600,
            ..ClientCounts::default()
        };
        let m = summarise(log(1_340.0), whole(2.0), client);
        let check = &m.cross_checks[0];
        assert!(check.agrees, "{check:?}");
        assert_eq!(
            (check.client_upper, check.unknown_requests),
            (Some(1_600.0), 2)
        );
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        // A server that counts twice what the client sent is still a disagreement.
        let m = summarise(log(2_000.0), whole(2.0), client);
        let check = &m.cross_checks[0];
        assert!(!check.agrees, "{check:?}");
        assert!(
            m.warnings[0].contains("2 of unknown length"),
            "{:?}",
            m.warnings
        );
    }

    #[test]
    fn derived_ratios_and_histograms_come_from_deltas() {
        let mut a = snap(
            -0.1,
            &[
                ("prefix_cache_queries", C, 100.0),
                ("prefix_cache_hits", C, 10.0),
                ("spec_decode_num_draft_tokens", C, 0.0),
                ("spec_decode_num_accepted_tokens", C, 0.0),
            ],
        );
        a.parsed
            .histograms
            .insert("time_to_first_token_seconds".into(), (5.0, 1.0));
        let mut b = snap(
            2.0,
            &[
                ("prefix_cache_queries", C, 300.0),
                ("prefix_cache_hits", C, 160.0),
                ("spec_decode_num_draft_tokens", C, 400.0),
                ("spec_decode_num_accepted_tokens", C, 300.0),
            ],
        );
        b.parsed
            .histograms
            .insert("time_to_first_token_seconds".into(), (25.0, 3.0));
        let log = ScrapeLog {
            snapshots: vec![a, b],
            ..ScrapeLog::default()
        };
        let m = summarise(log, whole(1.9), ClientCounts::default());
        assert_eq!(m.derived.prefix_cache_hit_rate, Some(150.0 / 200.0));
        assert_eq!(m.derived.spec_decode_acceptance_rate, Some(0.75));
        let h = &m.histograms["time_to_first_token_seconds"];
        assert_eq!((h.count, h.sum), (20.0, 2.0));
        assert_eq!(h.mean, Some(0.1));
    }

    #[test]
    fn a_count_within_the_clients_range_agrees() {
        // 100 prompt tokens answered, 120 sent: the server read 100 to 120 of them.
        let inside = CrossCheck::new("prompt_tokens", 112.0, 100.0, Some(120.0));
        assert!(inside.agrees && inside.difference == 0.0, "{inside:?}");
        let above = CrossCheck::new("prompt_tokens", 150.0, 100.0, Some(120.0));
        assert!(!above.agrees, "{above:?}");
        assert!((above.difference - 0.25).abs() < 1e-9, "{above:?}");
        let below = CrossCheck::new("prompt_tokens", 90.0, 100.0, Some(120.0));
        assert!((below.difference + 0.10).abs() < 1e-9, "{below:?}");
        // No range: the plain relative difference, and an upper bound at the count is none.
        let plain = CrossCheck::new("request_success", 103.0, 100.0, Some(100.0));
        assert_eq!(plain.client_upper, None);
        assert!(!plain.agrees && (plain.difference - 0.03).abs() < 1e-9);
        assert_eq!(CrossCheck::new("x", 5.0, 0.0, None).difference, 1.0);
    }

    #[test]
    fn without_the_bounding_scrapes_there_is_no_cross_check() {
        // The scrape before t0 failed: deltas start at the first periodic scrape.
        let log = ScrapeLog {
            scrapes: 3,
            snapshots: vec![
                snap(1.0, &[("generation_tokens", C, 100.0)]),
                snap(2.2, &[("generation_tokens", C, 300.0)]),
            ],
            ..ScrapeLog::default()
        };
        let m = summarise(log, whole(2.0), ClientCounts::default());
        assert_eq!(m.summary["generation_tokens"].delta, Some(200.0));
        assert!(m.cross_checks.is_empty());
        assert!(
            m.warnings.iter().any(|w| w.contains("no scrape before")),
            "{:?}",
            m.warnings
        );
        assert!(
            m.warnings.iter().any(|w| w.contains("no cross-check")),
            "{:?}",
            m.warnings
        );
        // Every scrape failed: said once, nothing else made up.
        let mut log = ScrapeLog {
            url: "http://h/metrics".into(),
            scrapes: 5,
            ..ScrapeLog::default()
        };
        log.error("timeout", "no answer within 1s".into());
        log.error("timeout", "no answer within 1s".into());
        let m = summarise(log, whole(2.0), ClientCounts::default());
        assert!(m.summary.is_empty() && m.cross_checks.is_empty());
        assert_eq!(m.scrape_errors[0].count, 2);
        assert!(
            m.warnings[0].contains("every one of the 5 scrapes"),
            "{:?}",
            m.warnings
        );
    }

    #[test]
    fn a_shard_is_not_cross_checked_against_the_whole_servers_counts() {
        let log = ScrapeLog {
            snapshots: vec![
                snap(-0.1, &[("request_success", C, 0.0)]),
                snap(2.1, &[("request_success", C, 30.0)]),
            ],
            ..ScrapeLog::default()
        };
        let client = ClientCounts {
            completed: 10,
            shard: Some((1, 3)),
            ..ClientCounts::default()
        };
        let m = summarise(log, whole(2.0), client);
        assert!(m.cross_checks.is_empty());
        assert!(m.warnings[0].contains("shard 1/3"), "{:?}", m.warnings);
        assert_eq!(m.summary["request_success"].delta, Some(30.0));
    }
}
