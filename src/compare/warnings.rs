//! What can make a comparison flatter one side without the build being faster: the same
//! prompts sent twice (a shared seed), a server prefix cache that answered one side
//! more than the other, a side whose server did not keep up (its latencies were cut by
//! its time limit), a side whose outputs ended shorter than asked (lighter work),
//! goodput counted against different thresholds on the two sides, router affinity
//! (`--affinity`, `--session-token`, `--sticky-connections`) and client behaviours
//! (`--cancel`, `--max-prefill-concurrency`) that differ between them, and the transport
//! (`https://`, `--http2`, `--http2-streams`).
//! Each is a warning in every output of the comparison, never a verdict: the reports
//! cannot tell how much of a change each made.

use super::noise;
use crate::report::Report;
use crate::report::across_runs::run_seeds;
use llmsurge_coordinator::BenchmarkResult;

/// A hit-rate difference smaller than this many percentage points is never warned
/// about, however sure: it moves a prompt's prefill by a few tokens in a hundred.
pub const MIN_HIT_RATE_DIFFERENCE_PP: f64 = 5.0;

/// The seeds a report's runs sent their prompts from: each run's (`args.run_seeds`), else
/// the run seed alone (a single run, or repeated runs written before each drew its own).
pub fn seeds(report: &Report) -> Vec<u64> {
    let per_run = run_seeds(&report.args);
    if !per_run.is_empty() {
        return per_run;
    }
    report
        .args
        .get("seed")
        .and_then(serde_json::Value::as_u64)
        .into_iter()
        .collect()
}

/// Runs of a repeated report, counted from its benchmarks' `run`.
fn runs(report: &Report) -> usize {
    let mut runs: Vec<u32> = report.benchmarks.iter().filter_map(|b| b.run).collect();
    runs.sort_unstable();
    runs.dedup();
    runs.len()
}

/// The seed warnings: the two reports share a seed, or one report's repeated runs
/// re-used a seed (all of them written before each run drew its own, or per-run seeds
/// that repeat, as an old or hand-made report may have).
pub fn seed_warnings(base: &Report, cur: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for (side, r) in [("baseline", base), ("current", cur)] {
        let n = runs(r);
        let per_run = run_seeds(&r.args);
        if n > 1
            && per_run.is_empty()
            && let Some(seed) = seeds(r).first()
        {
            out.push(format!(
                "the {side}'s {n} runs all used seed {seed} (a report written before each run drew its own seed): every run after the first re-sent the first's prompts, so a server's prefix cache answered them from the first; rerun it"
            ));
        } else if let Some(warning) = repeated_run_seed(side, &per_run) {
            out.push(warning);
        }
    }
    let (sb, sc) = (seeds(base), seeds(cur));
    let mut shared: Vec<u64> = sb.iter().filter(|s| sc.contains(s)).copied().collect();
    shared.sort_unstable();
    shared.dedup();
    if !shared.is_empty() {
        let list: Vec<String> = shared.iter().map(u64::to_string).collect();
        out.push(format!(
            "baseline and current share the random seed{} {}: both sent the same prompts, so a server's prefix cache can answer the current run from the baseline's and flatter it; leave --random-seed unset in a gate (each run then draws a fresh seed)",
            if shared.len() > 1 { "s" } else { "" },
            list.join(", ")
        ));
    }
    out
}

/// The warning for per-run seeds (`args.run_seeds`) that repeat: a later run with an
/// earlier one's seed re-sent its prompts, which a server's prefix cache then answered.
fn repeated_run_seed(side: &str, per_run: &[u64]) -> Option<String> {
    let first = *per_run.first()?;
    if per_run.len() > 1 && per_run.iter().all(|&s| s == first) {
        return Some(format!(
            "the {side}'s {} runs all used seed {first} (its args.run_seeds): every run after the first re-sent the first's prompts, so a server's prefix cache answered them from the first; rerun it",
            per_run.len()
        ));
    }
    // Runs counted from 1, as every output lists them.
    let (i, j) = per_run
        .iter()
        .enumerate()
        .find_map(|(j, s)| per_run[..j].iter().position(|t| t == s).map(|i| (i, j)))?;
    Some(format!(
        "the {side}'s runs {} and {} used the same seed {} (its args.run_seeds): the later re-sent the earlier's prompts, so a server's prefix cache answered them; rerun it",
        i + 1,
        j + 1,
        per_run[j]
    ))
}

/// A side's prefix-cache counts at one benchmark position, summed over its runs: hits
/// and queries (prompt tokens, from `--server-metrics`) and the completed requests
/// behind them. `None` when no run has both counters.
fn hit_counts(report: &Report, index: u32) -> Option<(f64, f64, u64)> {
    let mut found = None;
    for b in report.benchmarks.iter().filter(|b| b.index == index) {
        let Some(sm) = &b.server_metrics else {
            continue;
        };
        let delta = |name: &str| sm.summary.get(name).and_then(|s| s.delta);
        if let (Some(h), Some(q)) = (delta("prefix_cache_hits"), delta("prefix_cache_queries")) {
            let (hits, queries, n) = found.unwrap_or((0.0, 0.0, 0));
            found = Some((hits + h, queries + q, n + b.measured_requests.completed));
        }
    }
    found.filter(|(_, q, n)| *q > 0.0 && *n > 0)
}

/// The hit-rate warning of one pair, when the server's prefix-cache hit rate (hits /
/// queries over every run of the benchmark) differs between the sides by at least
/// [`MIN_HIT_RATE_DIFFERENCE_PP`] and beyond noise. Noise: the two-proportion interval
/// with the completed requests as the samples, wider than the truth (a request's hit
/// fraction varies at most as a coin would), so a warning is never noise.
pub fn hit_rate_warning(
    base: &Report,
    b: &BenchmarkResult,
    cur: &Report,
    c: &BenchmarkResult,
    confidence: f64,
) -> Option<String> {
    let (hb, qb, nb) = hit_counts(base, b.index)?;
    let (hc, qc, nc) = hit_counts(cur, c.index)?;
    let (rb, rc) = (hb / qb, hc / qc);
    let successes = |rate: f64, n: u64| (rate * n as f64).round() as u64;
    let (lo, hi) =
        noise::proportion_change_ci((successes(rb, nb), nb), (successes(rc, nc), nc), confidence)?;
    let beyond_noise = lo > 0.0 || hi < 0.0;
    if !beyond_noise || ((rc - rb) * 100.0).abs() < MIN_HIT_RATE_DIFFERENCE_PP {
        return None;
    }
    Some(format!(
        "{}: the server's prefix-cache hit rate differs: baseline {:.1}% ({hb:.0} of {qb:.0} prompt tokens, {nb} requests), current {:.1}% ({hc:.0} of {qc:.0} prompt tokens, {nc} requests), beyond noise at {}% confidence: one side's prompts were answered from the cache more, so its latencies may owe the cache, not the build",
        c.strategy,
        rb * 100.0,
        rc * 100.0,
        llmsurge_coordinator::slo::confidence_percent(confidence)
    ))
}

/// A side whose run was invalid (exit 4, the rules of `invalid_run`): its figures are
/// not the server's under the load asked, each reason saying why (the client set the
/// pace, the server was lost, nothing succeeded, outputs ended short).
pub fn invalid_run_warnings(base: &Report, cur: &Report) -> Vec<String> {
    [("baseline", base), ("current", cur)]
        .into_iter()
        .filter(|(_, r)| !r.invalid_run.is_empty())
        .map(|(side, r)| {
            format!(
                "the {side} report is an invalid run ({}): its figures are not the server's under the load asked; rerun it before trusting this comparison",
                r.invalid_run.join("; ")
            )
        })
        .collect()
}

/// A side of a pair whose server did not keep up with its load ([`kept_up`], the one
/// rule): its latencies are not the server's at that load (those of the arrivals it did
/// not serve are missing, the others as long as its time limit let them grow).
///
/// [`kept_up`]: llmsurge_coordinator::kept_up::kept_up
pub fn kept_up_warnings(b: &BenchmarkResult, c: &BenchmarkResult) -> Vec<String> {
    [("baseline", b), ("current", c)]
        .into_iter()
        .filter_map(|(side, r)| {
            let why = llmsurge_coordinator::kept_up::kept_up(r).why_not()?;
            Some(format!(
                "the {side}'s {}: {why}; its latencies are not the server's at the load asked (what it did not serve is missing from them), so they compare nothing",
                crate::report::label(r)
            ))
        })
        .collect()
}

/// Received output lengths that differ by more than this fraction make per-request
/// latencies compare different work.
pub const OUTPUT_LENGTH_DIFFERENCE: f64 = 0.1;

/// A pair whose requests received different output lengths, or a side whose requests
/// ended short of what they asked with a `stop` (see `output_lengths`).
pub fn output_length_warnings(b: &BenchmarkResult, c: &BenchmarkResult) -> Vec<String> {
    let mut out = Vec::new();
    for (side, r) in [("baseline", b), ("current", c)] {
        if let Some(o) = &r.output_lengths
            && o.exact
            && o.short_stopped > 0
        {
            out.push(format!(
                "the {side}'s {}: {} of {} requests ended short of the output length asked (received {:.1} tokens per request, asked {:.1}): its load was lighter than asked",
                crate::report::label(r),
                o.short_stopped,
                o.asked_requests,
                o.received_mean,
                o.asked_mean
            ));
        }
    }
    if let (Some(ob), Some(oc)) = (&b.output_lengths, &c.output_lengths)
        && ob.received_mean > 0.0
        && ((oc.received_mean - ob.received_mean) / ob.received_mean).abs()
            > OUTPUT_LENGTH_DIFFERENCE
    {
        out.push(format!(
            "{}: the requests received {:.1} output tokens each in the baseline and {:.1} in the current run: their latencies and throughput measure different work",
            crate::report::label(c),
            ob.received_mean,
            oc.received_mean
        ));
    }
    out
}

/// A pair whose goodput counted requests against different thresholds (`--goodput`):
/// its `goodput_per_s` and `goodput_fraction` rows compare two definitions of "good".
pub fn goodput_warning(b: &BenchmarkResult, c: &BenchmarkResult) -> Option<String> {
    let (gb, gc) = (b.goodput.as_ref()?, c.goodput.as_ref()?);
    (gb.spec != gc.spec).then(|| {
        format!(
            "{}: goodput counted requests within {} in the baseline and within {} in the current run: its goodput rows compare two definitions of a good request; rerun one side with the other's --goodput",
            crate::report::label(c),
            gb.spec,
            gc.spec
        )
    })
}

/// A report's router affinity settings (`args.backend.affinity`), as its flags read;
/// "none" without any.
fn affinity_flags(report: &Report) -> String {
    use llmsurge_proto::affinity::{AFFINITY_PRESETS, Affinity, SessionToken};
    let a: Affinity = report
        .args
        .pointer("/backend/affinity")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let mut flags = Vec::new();
    if let Some(key) = &a.key_header {
        let preset = AFFINITY_PRESETS
            .iter()
            .find(|p| p.key_header == key && p.parent_header == a.parent_header.as_deref());
        flags.push(match preset {
            Some(p) => format!("--affinity {}", p.name),
            None => format!("--affinity header:{key}"),
        });
    }
    match &a.token {
        Some(SessionToken::Header(n)) => flags.push(format!("--session-token header:{n}")),
        Some(SessionToken::Cookie(n)) => flags.push(format!("--session-token cookie:{n}")),
        None => {}
    }
    if a.sticky_connections {
        flags.push("--sticky-connections".into());
    }
    flags_or_none(&flags)
}

/// Flags as a command line would read them; "none" without any.
fn flags_or_none(flags: &[String]) -> String {
    if flags.is_empty() {
        "none".into()
    } else {
        flags.join(" ")
    }
}

/// Two reports whose router affinity differs: a router placed the conversations
/// differently on the two sides, so prefix-cache hits, and the latencies they shorten,
/// differ for that as much as for the build.
pub fn affinity_warning(base: &Report, cur: &Report) -> Option<String> {
    let (fb, fc) = (affinity_flags(base), affinity_flags(cur));
    (fb != fc).then(|| {
        format!(
            "router affinity differs: {fb} in the baseline, {fc} in the current run: a router placed the conversations differently (prefix-cache hits, and the latencies they shorten, differ for that); rerun one side with the other's flags"
        )
    })
}

/// How a report's client reached its server: the scheme and the HTTP version, as the
/// flags read (`--http2`, `--http2-streams N` where requests shared connections).
fn transport(report: &Report) -> String {
    let backend = |key: &str| report.args.pointer(&format!("/backend/{key}")).cloned();
    let http2 = backend("http2").and_then(|v| v.as_bool()).unwrap_or(false);
    let streams = backend("http2_streams")
        .and_then(|v| v.as_u64())
        .unwrap_or(1);
    // A scheme as URLs spell one (a hand-edited report may hold anything there).
    let scheme = match report.target.base_url.split_once("://") {
        Some((scheme, _))
            if (1..=16).contains(&scheme.len())
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            format!("{}://", scheme.to_ascii_lowercase())
        }
        _ => "a URL without a scheme".into(),
    };
    let version = match (http2, streams) {
        (false, _) => "HTTP/1.1".to_string(),
        (true, 0 | 1) => "--http2".to_string(),
        (true, n) => format!("--http2 --http2-streams {n}"),
    };
    format!("{scheme} {version}")
}

/// Two reports whose clients reached the server differently (TLS or not, HTTP/1.1 or
/// HTTP/2, requests sharing connections or not): handshakes, connections a request and
/// how a server schedules the streams of one connection change its latencies as a
/// build can.
pub fn transport_warning(base: &Report, cur: &Report) -> Option<String> {
    let (tb, tc) = (transport(base), transport(cur));
    (tb != tc).then(|| {
        format!(
            "the client reached the server differently: {tb} in the baseline, {tc} in the current run: TLS handshakes, a connection per request or streams sharing one change the latencies a server shows; rerun one side with the other's target and flags"
        )
    })
}

/// A report's client behaviours that change the workload (`args.behaviour`), as their
/// flags read; "none" without any.
fn behaviour_flags(report: &Report) -> String {
    use llmsurge_proto::agentic::CancelAfter;
    let b: llmsurge_proto::ClientBehaviour = report
        .args
        .get("behaviour")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    // As a flag would say it: `1.5s`, `500ms` (not `1500ms`, `0.5s`).
    let ms = |d: std::time::Duration| match d.as_secs_f64() {
        s if s >= 1.0 => format!("{s}s"),
        s => format!("{}ms", s * 1e3),
    };
    let mut flags = Vec::new();
    if let Some(c) = b.cancel {
        let after = match c.after {
            CancelAfter::Fixed(d) => ms(d),
            CancelAfter::Uniform { lo, hi } => format!("{}..{}", ms(lo), ms(hi)),
            CancelAfter::AfterFirstToken(d) => format!("ttft+{}", ms(d)),
        };
        // Rounded to what a flag would say: 0.07 × 100 is 7.000000000000001.
        let share = (c.share * 1e4).round() / 100.0;
        flags.push(format!("--cancel share={share}%,after={after}"));
    }
    if let Some(n) = b.max_prefill_concurrency {
        flags.push(format!("--max-prefill-concurrency {n}"));
    }
    flags_or_none(&flags)
}

/// Two reports whose clients behaved differently (`--cancel`, `--max-prefill-concurrency`):
/// requests given up on early, or prefills held back on one side only, change the work
/// the server did and the latencies it showed as much as a build can.
pub fn behaviour_warning(base: &Report, cur: &Report) -> Option<String> {
    let (fb, fc) = (behaviour_flags(base), behaviour_flags(cur));
    (fb != fc).then(|| {
        format!(
            "the clients behaved differently: {fb} in the baseline, {fc} in the current run: requests given up on early or prefills held back change the server's work and the latencies it shows; rerun one side with the other's flags"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Report {
        serde_json::from_str(include_str!(
            "../../tests/fixtures/report-server-metrics.json"
        ))
        .expect("fixture parses")
    }

    /// The flags a report's client behaviour reads as are what a user types: seconds
    /// from one second up, milliseconds below.
    #[test]
    fn client_behaviour_reads_as_the_flags_that_set_it() {
        use llmsurge_proto::agentic::{CancelAfter, CancelSpec};
        use std::time::Duration;
        let flags = |after| {
            let mut r = fixture();
            let b = llmsurge_proto::ClientBehaviour {
                cancel: Some(CancelSpec { share: 0.07, after }),
                ..Default::default()
            };
            r.args["behaviour"] = serde_json::to_value(b).expect("behaviour serialises");
            behaviour_flags(&r)
        };
        let uniform = CancelAfter::Uniform {
            lo: Duration::from_millis(500),
            hi: Duration::from_secs(2),
        };
        assert_eq!(flags(uniform), "--cancel share=7%,after=500ms..2s");
        let fixed = CancelAfter::Fixed(Duration::from_millis(1500));
        assert_eq!(flags(fixed), "--cancel share=7%,after=1.5s");
        let ttft = CancelAfter::AfterFirstToken(Duration::from_millis(70));
        assert_eq!(flags(ttft), "--cancel share=7%,after=ttft+70ms");
    }

    #[test]
    fn the_transport_reads_as_its_scheme_and_flags() {
        let plain = fixture();
        assert_eq!(transport(&plain), "http:// HTTP/1.1");
        let mut tls = fixture();
        tls.target.base_url = "HTTPS://gateway.example:443".into();
        tls.args["backend"]["http2"] = true.into();
        assert_eq!(transport(&tls), "https:// --http2");
        let mut shared = tls.clone();
        shared.args["backend"]["http2_streams"] = 100.into();
        assert_eq!(transport(&shared), "https:// --http2 --http2-streams 100");
        assert!(transport_warning(&plain, &plain.clone()).is_none());
        let mut odd = fixture();
        odd.target.base_url = "http\n> injected\n://x".into();
        assert_eq!(transport(&odd), "a URL without a scheme HTTP/1.1");
        let warning = transport_warning(&tls, &shared).expect("a warning");
        assert!(
            warning.contains("https:// --http2 in the baseline, https:// --http2 --http2-streams 100 in the current run"),
            "{warning}"
        );
    }

    /// Sets benchmark `i`'s prefix-cache counters to `hits` of `queries`.
    fn with_hits(mut r: Report, i: usize, hits: f64, queries: f64) -> Report {
        let sm = r.benchmarks[i]
            .server_metrics
            .as_mut()
            .expect("server metrics");
        for (name, v) in [
            ("prefix_cache_hits", hits),
            ("prefix_cache_queries", queries),
        ] {
            sm.summary.get_mut(name).expect(name).delta = Some(v);
        }
        r
    }

    #[test]
    fn a_hit_rate_warns_only_beyond_noise_and_the_floor() {
        let warn = |base: &Report, cur: &Report| {
            hit_rate_warning(base, &base.benchmarks[1], cur, &cur.benchmarks[1], 0.95)
        };
        let base = fixture();
        // 75% of 53 requests against itself: nothing.
        assert_eq!(warn(&base, &base), None);
        // 75% against 2%: far beyond noise, and both rates said.
        let low = with_hits(fixture(), 1, 39.0, 1952.0);
        let w = warn(&base, &low).expect("a warning");
        assert!(
            w.contains("baseline 75.0%") && w.contains("current 2.0%"),
            "{w}"
        );
        // 75% against 72%: under the floor, however many requests.
        let close = with_hits(fixture(), 1, 1405.0, 1952.0);
        assert_eq!(warn(&base, &close), None);
        // 50% against 65% of 14 requests: within the noise of so few.
        let few = with_hits(fixture(), 0, 333.0, 512.0);
        let w0 = hit_rate_warning(
            &fixture(),
            &base.benchmarks[0],
            &few,
            &few.benchmarks[0],
            0.95,
        );
        assert_eq!(w0, None);
    }

    #[test]
    fn seeds_shared_between_reports_or_by_old_repeated_runs_warn() {
        let a = fixture();
        let shared = seed_warnings(&a, &a);
        assert_eq!(shared.len(), 1, "{shared:?}");
        assert!(shared[0].contains("share the random seed 42"), "{shared:?}");
        let mut b = fixture();
        b.args["seed"] = 43.into();
        assert!(seed_warnings(&a, &b).is_empty());
        // Per-run seeds: any run's seed in common warns.
        b.args["run_seeds"] = serde_json::json!([43, 44, 42]);
        assert_eq!(seed_warnings(&a, &b).len(), 1);
        // Each shared seed named once, and more than one in the plural.
        let mut c = fixture();
        c.args["run_seeds"] = serde_json::json!([43, 44, 44]);
        let w = seed_warnings(&b, &c);
        let shared = w
            .iter()
            .find(|w| w.contains("share"))
            .expect("shared seeds");
        assert!(shared.contains("share the random seeds 43, 44:"), "{w:?}");
        // Repeated runs without per-run seeds all re-sent the first one's prompts.
        let mut old = fixture();
        old.args["seed"] = 9.into();
        for (i, r) in old.benchmarks.iter_mut().enumerate() {
            r.index = 0;
            r.run = Some(i as u32);
        }
        let w = seed_warnings(&old, &b);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("the baseline's 2 runs all used seed 9"),
            "{w:?}"
        );
    }

    #[test]
    fn per_run_seeds_that_repeat_warn() {
        let mut base = fixture();
        base.args["seed"] = 5.into();
        let mut cur = fixture();
        cur.args["seed"] = 7.into();
        // Each run its own seed: nothing to say.
        cur.args["run_seeds"] = serde_json::json!([7, 8, 9]);
        assert!(seed_warnings(&base, &cur).is_empty());
        // Every run the same seed (an old or hand-made report).
        cur.args["run_seeds"] = serde_json::json!([7, 7, 7]);
        let w = seed_warnings(&base, &cur);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("the current's 3 runs all used seed 7 (its args.run_seeds)"),
            "{w:?}"
        );
        // Two runs of several.
        cur.args["run_seeds"] = serde_json::json!([7, 8, 8]);
        let w = seed_warnings(&base, &cur);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("the current's runs 2 and 3 used the same seed 8"),
            "{w:?}"
        );
    }
}
