//! Three numbers held to the mock's truth where two features meet (issue 36, findings 5
//! to 7): ITL when a stream's first chunk is shorter than the rest, the steady-state
//! window of a short run, and goodput and session outcomes with planned give-ups
//! (`--cancel`). Every expected figure comes from the mock's `--truth` file joined with
//! the request log by `x-request-id`, never from the configuration.

use crate::scenario::Bench;
use crate::support::{Finished, Joined, join_truth, mock};
use llmsurge::mock::MockConfig;

/// How far the report's ITL mean and p50 may be from the truth's, relatively: a request's
/// gaps move only by the client's lateness on the chunks that bound them.
const ITL_WITHIN: f64 = 0.10;
/// How far the report's ITL p99 may be from the truth's, relatively: the top of the
/// distribution is a few gaps, and one read delayed on a busy runner moves one of them.
/// A short first chunk read as a short last one makes it 3 times the truth.
const ITL_P99_WITHIN: f64 = 0.5;

/// Runs `options` against a mock of `config` writing its truth; the joined requests, the
/// report and the finished run (its exit code, console output and files).
fn run_with_truth(
    config: MockConfig,
    options: impl FnOnce(Bench) -> Bench,
) -> (Vec<Joined>, llmsurge::report::Report, Finished) {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let server = mock(MockConfig {
        truth: Some(truth.clone()),
        ..config
    });
    let finished = options(
        Bench::on(&server)
            .request_log("requests.jsonl")
            .outputs("json,csv,console")
            .flag("--disable-progress"),
    )
    .run();
    // Stopping flushes the truth file, after every response ended.
    server.stop();
    let code = finished.code();
    assert!(matches!(code, 0 | 3), "exit {code}: {}", finished.stderr);
    let joined = join_truth(&finished.dir.path().join("requests.jsonl"), &truth);
    (joined, finished.report(), finished)
}

/// The per-token gaps of the truth's completed requests, ms: each chunk after the first
/// spreads its gap over the tokens it carried.
fn truth_token_gaps(joined: &[Joined]) -> Vec<f64> {
    let mut gaps = Vec::new();
    for Joined { truth, .. } in joined {
        if truth["outcome"] != "completed" {
            continue;
        }
        let chunks = crate::support::token_chunks(truth);
        for pair in chunks.windows(2) {
            let (t0, _) = pair[0];
            let (t1, k) = pair[1];
            let per_token = (t1 - t0) * 1e3 / k as f64;
            gaps.extend(std::iter::repeat_n(per_token, k as usize));
        }
    }
    gaps
}

/// The nearest-rank percentile `p` (0..100) of sorted `values`.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A run whose streams open with one reasoning token and then carry 3 tokens a chunk
/// (chunks of 1, 3, 3, 3): the report's ITL mean, p50 and p99 against the truth's
/// per-token gaps.
fn check_itl_with_a_short_first_chunk(format: &str) {
    let (joined, report, _) = run_with_truth(
        MockConfig {
            tokens_per_chunk: 3,
            reasoning_tokens: 1,
            ttft_ms: 10.0,
            itl_ms: 20.0,
            ..Default::default()
        },
        |b| {
            b.format(format)
                .concurrent(4)
                .max_requests(16)
                .data("prompt_tokens=20,output_tokens=10")
        },
    );
    // Every request completed with a 1-token first chunk, then 3s (9 token gaps), each
    // read as its chunks' pace allows, and the report counts the gaps its log read.
    let logged_gaps = crate::support::short_first_chunk_gaps_read(&joined);
    let mut gaps = truth_token_gaps(&joined);
    assert_eq!(
        gaps.len(),
        16 * 9,
        "every request completed with 9 token gaps"
    );
    gaps.sort_by(f64::total_cmp);
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let itl = &report.benchmarks[0].metrics["itl"].successful;
    assert_eq!(
        itl.count, logged_gaps,
        "{format}: the ITL gaps counted against those the request log read"
    );
    for (what, reported, truth, within) in [
        ("mean", itl.mean, mean, ITL_WITHIN),
        (
            "p50",
            itl.percentiles.p50,
            percentile(&gaps, 50.0),
            ITL_WITHIN,
        ),
        (
            "p99",
            itl.percentiles.p99,
            percentile(&gaps, 99.0),
            ITL_P99_WITHIN,
        ),
    ] {
        assert!(
            (reported - truth).abs() <= truth * within,
            "{format}: ITL {what} {reported:.2} ms against the truth's {truth:.2} ms"
        );
    }
}

#[test]
fn itl_with_a_short_first_chunk_matches_the_truth_anthropic() {
    // The Messages API's usage has no reasoning count: the client cannot split the runs.
    check_itl_with_a_short_first_chunk("anthropic");
}

#[test]
fn itl_with_a_short_first_chunk_matches_the_truth_chat() {
    check_itl_with_a_short_first_chunk("chat");
}

/// The completed measured requests of `joined` that started inside `[from, to)` (Unix
/// seconds) and the output tokens the mock sent them.
fn started_inside(joined: &[Joined], from: f64, to: f64) -> (u64, u64) {
    let inside: Vec<&Joined> = joined
        .iter()
        .filter(|j| j.log["status"] == "completed" && j.log["phase"] == "measured")
        .filter(|j| {
            let start = j.log["start_time"].as_f64().expect("start_time");
            start >= from && start < to
        })
        .collect();
    let tokens = inside
        .iter()
        .map(|j| {
            j.truth["reasoning_tokens"].as_u64().unwrap_or(0)
                + j.truth["content_tokens"].as_u64().unwrap_or(0)
        })
        .sum();
    (inside.len() as u64, tokens)
}

/// The steady window of benchmark `b` lies inside its measured window (seconds from t0).
fn assert_inside_the_measured_window(b: &llmsurge_coordinator::BenchmarkResult) {
    let s = b.steady_state.as_ref().expect("a steady-state section");
    let w = &b.measured_window;
    let (from, to) = (w.start_time - b.start_time, w.end_time - b.start_time);
    // The report's times are rounded to microseconds.
    assert!(
        s.start_s >= from - 1e-6 && s.end_s <= to + 1e-6 && s.start_s <= s.end_s,
        "steady window {}–{} s outside the measured window {from}–{to} s",
        s.start_s,
        s.end_s
    );
}

#[test]
fn a_short_run_has_no_steady_state_and_no_window_past_its_end() {
    // 3.5 s: a plateau of in-flight requests, but shorter than 10 s.
    let server = mock(MockConfig {
        ttft_ms: 10.0,
        itl_ms: 10.0,
        ..Default::default()
    });
    let run = Bench::on(&server)
        .concurrent(4)
        .max_seconds("3.5")
        .data("prompt_tokens=20,output_tokens=10")
        .outputs("json,console")
        .flag("--disable-progress")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let report = run.report();
    let b = &report.benchmarks[0];
    assert_inside_the_measured_window(b);
    let s = b.steady_state.as_ref().expect("a steady-state section");
    assert!(!s.found, "a 3.5 s window is a steady state: {s:?}");
    assert!(
        s.figures.is_empty(),
        "figures without a steady state: {s:?}"
    );
    assert!(
        run.stdout.contains("no steady state"),
        "the console says so: {}",
        run.stdout
    );
}

#[test]
fn the_steady_window_is_inside_the_run_and_its_rates_are_over_its_own_requests() {
    // 2 s of ramp-up, then 11 s at 4 streams: a plateau longer than 10 s.
    let (joined, report, run) = run_with_truth(
        MockConfig {
            ttft_ms: 10.0,
            itl_ms: 10.0,
            ..Default::default()
        },
        |b| {
            b.concurrent(4)
                .rampup("2s")
                .max_seconds("13")
                .data("prompt_tokens=20,output_tokens=10")
        },
    );
    assert_eq!(run.code(), 0);
    let b = &report.benchmarks[0];
    assert_inside_the_measured_window(b);
    let s = b.steady_state.as_ref().expect("a steady-state section");
    assert!(s.found, "no steady state in 13 s: {s:?}");
    // The docs' rule over the report's own series: median level, 90% of it, from the
    // first second at or above to the end of the last, clipped to the measured window.
    let c: Vec<f64> = b.timeseries.iter().map(|p| p.concurrency).collect();
    let mut sorted = c.clone();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let level = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    let first = c.iter().position(|v| *v >= 0.9 * level).expect("first");
    let last = c.iter().rposition(|v| *v >= 0.9 * level).expect("last");
    assert!(first > 0, "the ramp-up is left out: {c:?}");
    let measured_end = b.measured_window.end_time - b.start_time;
    assert_eq!(s.start_s, b.timeseries[first].t);
    assert!(
        (s.end_s - (b.timeseries[last].t + 1.0).min(measured_end)).abs() < 1e-6,
        "{s:?} against seconds {first}..={last} of {c:?}, measured until {measured_end}"
    );
    let seconds = s.end_s - s.start_s;
    assert!(seconds >= 10.0, "{s:?}");
    // The window's requests, by the client's send and the mock's tokens.
    let (from, to) = (b.start_time + s.start_s, b.start_time + s.end_s);
    let (requests, tokens) = started_inside(&joined, from, to);
    assert_eq!(s.requests, requests, "requests that started inside");
    let rate = s.figures["requests_per_s"];
    assert!(
        (rate * seconds - requests as f64).abs() < 1e-6 * requests as f64 + 1e-9,
        "requests/s {rate} × {seconds} s against {requests} requests"
    );
    let token_rate = s.figures["output_tokens_per_s"];
    assert!(
        (token_rate * seconds - tokens as f64).abs() < 1e-6 * tokens as f64 + 1e-9,
        "output tokens/s {token_rate} × {seconds} s against the mock's {tokens} tokens"
    );
    // ITL stays on the measured window, and says so; every output shows the window.
    assert!(!s.figures.contains_key("itl_p50"));
    assert!(s.measured_window_only.contains_key("itl_p50"));
    assert!(run.stdout.contains("steady state"), "{}", run.stdout);
    let csv = std::fs::read_to_string(run.dir.path().join("benchmarks.csv")).expect("csv");
    assert!(
        csv.lines()
            .next()
            .expect("header")
            .contains("steady.start_s")
    );
}

/// Requests of ~120 ms at the mock (10 ms to the first token, 10 tokens 10 ms apart): a
/// give-up 40 ms after the send always comes before the end.
fn giving_up_mock() -> MockConfig {
    MockConfig {
        ttft_ms: 10.0,
        itl_ms: 10.0,
        ..MockConfig::instant()
    }
}

#[test]
fn planned_give_ups_are_neither_good_nor_judged_in_goodput() {
    let (joined, report, _) = run_with_truth(giving_up_mock(), |b| {
        b.concurrent(4)
            .seed(3)
            .max_requests(40)
            .data("prompt_tokens=16,output_tokens=10")
            .arg("--cancel", "share=30%,after=40ms")
            // Every completed request is good: only the give-ups could lower the fraction.
            .goodput("e2e:600s")
    });
    assert_eq!(joined.len(), 40, "every request reached the mock");
    // The truth: which requests the client cut off, which completed.
    let outcome = |o: &str| joined.iter().filter(|j| j.truth["outcome"] == o).count() as u64;
    let (completed, cut) = (outcome("completed"), outcome("client_gone"));
    assert_eq!(completed + cut, 40, "no other outcome at the mock");
    assert!(
        cut > 0 && completed > 0,
        "{cut} cut off, {completed} completed"
    );
    for Joined { log, truth } in &joined {
        if truth["outcome"] == "client_gone" {
            assert_eq!(log["error_kind"], "planned", "{log}\n{truth}");
        }
    }
    let g = report.benchmarks[0].goodput.as_ref().expect("goodput");
    assert_eq!(g.good_requests, completed, "{g:?}");
    assert_eq!(g.planned, cut, "{g:?}");
    assert!(
        (g.fraction - completed as f64 / (40 - cut) as f64).abs() < 1e-12,
        "fraction {} with {completed} good of {} not given up",
        g.fraction,
        40 - cut
    );
}

#[test]
fn sessions_with_a_planned_give_up_gave_up_and_none_is_unfinished() {
    let (joined, report, _) = run_with_truth(giving_up_mock(), |b| {
        b.concurrent(3)
            .seed(5)
            .max_requests(24)
            .data("turns=3,prompt_tokens=8,output_tokens=10")
            .arg("--cancel", "share=30%,after=40ms")
    });
    // The truth, per session: a turn the client cut off ends it (gave up); every turn
    // completed is a completed session; a session whose turns all completed but fewer
    // than 3 is one the request limit cut (its next turn never sent): unfinished.
    let mut sessions: std::collections::BTreeMap<u64, Vec<&Joined>> = Default::default();
    for j in &joined {
        let id = j.log["session"].as_u64().expect("a session id");
        sessions.entry(id).or_default().push(j);
    }
    let (mut gave_up, mut completed, mut cut_by_the_limit) = (0, 0, 0);
    for turns in sessions.values_mut() {
        turns.sort_by_key(|j| j.log["turn"].as_u64());
        let outcomes: Vec<&str> = turns
            .iter()
            .map(|j| j.truth["outcome"].as_str().unwrap_or_default())
            .collect();
        match outcomes.iter().position(|o| *o == "client_gone") {
            Some(i) => {
                assert_eq!(
                    i + 1,
                    turns.len(),
                    "a turn sent after a give-up: {outcomes:?}"
                );
                assert_eq!(turns[i].log["error_kind"], "planned", "{}", turns[i].log);
                gave_up += 1;
            }
            None if turns.len() == 3 => completed += 1,
            None => cut_by_the_limit += 1,
        }
        assert!(
            outcomes
                .iter()
                .all(|o| *o == "completed" || *o == "client_gone"),
            "{outcomes:?}"
        );
    }
    assert!(gave_up > 0, "no session gave up");
    let s = report.benchmarks[0].sessions.as_ref().expect("sessions");
    assert_eq!(s.gave_up, gave_up, "{s:?}");
    assert_eq!(s.turns_given_up, gave_up, "{s:?}");
    assert_eq!(s.completed, completed, "{s:?}");
    assert_eq!(s.failed, 0, "{s:?}");
    assert_eq!(
        s.unfinished, cut_by_the_limit,
        "only the limit leaves a session unfinished: {s:?}"
    );
    assert_eq!(
        s.completed + s.failed + s.gave_up + s.unfinished,
        s.sessions,
        "{s:?}"
    );
}
