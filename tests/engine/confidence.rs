//! Percentile verdicts with their uncertainty, end to end: a p99 objective passes only
//! when its order-statistic confidence bound is within the threshold, fails when the
//! opposite bound is beyond it, and is otherwise INCONCLUSIVE (exit 5) with about how
//! many more requests would decide. The bounds are checked against the mock's truth:
//! the order statistics of the TTFTs it gave the very requests measured.

use crate::scenario::Bench;
use crate::support::{Finished, dry_run, join_truth, llmsurge, mock};
use llmsurge::mock::MockConfig;
use llmsurge_coordinator::precision::confidence_ranks;

const DATA: &str = "prompt_tokens=16,output_tokens=4";
/// Requests per run: enough for a p99 to have both bounds at 95% (368 or more).
const REQUESTS: u64 = 400;
/// How much earlier than the mock's a client instant may read: the two clock anchors'
/// combined error (as in the truth tests).
const EARLY_MS: f64 = 0.1;
/// The histogram keeps 3 significant digits: a bound read at its bucket's edge may be
/// this fraction off the exact value.
const BUCKET: f64 = 0.001;

/// A mock whose TTFTs spread widely (mean 60 ms, sd 30 ms; seeded, so the 400 values a
/// run draws are the same set whatever the order the requests arrive in), writing its
/// truth to `truth` when given.
fn spread_mock(truth: Option<&std::path::Path>) -> llmsurge::mock::MockServer {
    mock(MockConfig {
        ttft_ms: 60.0,
        ttft_ms_std: 30.0,
        itl_ms: 1.0,
        truth: truth.map(std::path::Path::to_path_buf),
        ..MockConfig::instant()
    })
}

/// A run of `requests` requests over 20 streams, judged by `slo`.
fn judged(server: &llmsurge::mock::MockServer, requests: u64, slo: &str) -> Finished {
    Bench::on(server)
        .concurrent(20)
        .max_requests(requests)
        .data(DATA)
        .slo(slo)
        .request_log("requests.jsonl")
        .outputs("json,junit,console")
        .flag("--disable-progress")
        .run()
}

/// The TTFT the mock gave each completed request, from the instant the client sent it
/// to the instant the mock handed over the first content chunk, in ms, sorted.
fn truth_ttfts(run: &Finished, truth: &std::path::Path) -> Vec<f64> {
    let joined = join_truth(&run.dir.path().join("requests.jsonl"), truth);
    let mut ttfts: Vec<f64> = joined
        .iter()
        .filter(|j| j.log["status"] == "completed")
        .map(|j| {
            let start = j.log["start_time"].as_f64().expect("sent");
            let first = j.truth["chunks"]
                .as_array()
                .expect("chunks")
                .iter()
                .find(|c| c["content"].as_u64().unwrap_or(0) > 0)
                .and_then(|c| c["time"].as_f64())
                .expect("a content chunk");
            (first - start) * 1e3
        })
        .collect();
    ttfts.sort_by(f64::total_cmp);
    ttfts
}

#[test]
fn a_p99_near_its_threshold_is_inconclusive_and_says_how_many_more_would_decide() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let server = spread_mock(Some(&truth));
    // The seeded TTFTs of 400 requests have a p99 of about 155 ms; the 95% bounds of
    // their p99 are the 392nd and the 400th values, about 137 and 184 ms: 160 ms lies
    // between them, well away from either (checked on the truth below).
    let threshold = 160.0;
    let run = judged(&server, REQUESTS, "ttft_p99<=160ms");
    server.stop();
    let b = &run.report().benchmarks[0];
    let verdict = b.slo.clone().expect("a verdict");
    let check = &verdict.checks[0];

    // The truth: the measured requests are every request, and the ranks are those of
    // the binomial of their count.
    let ttfts = truth_ttfts(&run, &truth);
    let n = ttfts.len() as u64;
    assert_eq!(
        n, b.measured_requests.completed,
        "every request is measured"
    );
    let (l, u) = confidence_ranks(n, 0.99, 0.95);
    let (l, u) = (l.expect("a lower rank"), u.expect("an upper rank"));
    let at = |rank: u64| ttfts[rank as usize - 1];
    // The verdict is the truth's: the mock's seeded draws put the threshold between
    // its order statistics at the two ranks, unless a busy machine delayed the mock's
    // first tokens past it (a CI runner once read a p99 of 194 ms): then the truth's
    // lower bound is beyond the threshold, and the verdict must be FAIL.
    let (label, code) = if at(l) > threshold {
        ("FAIL", 3)
    } else if at(u) <= threshold {
        ("PASS", 0)
    } else {
        ("INCONCLUSIVE", 5)
    };
    assert_eq!(
        (run.code(), verdict.label()),
        (code, label),
        "the truth's bounds are {} and {}\n{}\n{}",
        at(l),
        at(u),
        run.stdout,
        run.stderr
    );
    let lower = check.lower.expect("a lower bound");
    let upper = check.upper.expect("an upper bound");
    // The client never reads an instant earlier than the mock's: each bound is at least
    // the truth's order statistic at its rank.
    let floor = |x: f64| x * (1.0 - BUCKET) - EARLY_MS;
    assert!(lower >= floor(at(l)), "lower {lower} < truth {}", at(l));
    assert!(upper >= floor(at(u)), "upper {upper} < truth {}", at(u));
    // And the bounds bracket the truth's own p99 of these requests: the lower one is
    // not read from a rank above it (that would take five of the slowest requests
    // delayed past it).
    let p99 = at((n as f64 * 0.99).ceil() as u64);
    assert!(
        lower <= p99 && p99 <= upper * (1.0 + BUCKET) + EARLY_MS,
        "{lower} {p99} {upper}"
    );
    if label != "INCONCLUSIVE" {
        eprintln!(
            "a busy machine: the truth's bounds do not straddle {threshold}, so the verdict is {label}"
        );
        return;
    }
    assert!(check.inconclusive && !check.passed, "{check:?}");

    // About N more requests would decide, in the report and on the console.
    let more = check.more_requests.expect("a count that would decide");
    assert!(more > 0, "{check:?}");
    let said = format!("about {more} more requests would decide");
    assert!(
        check.reason.as_deref().is_some_and(|r| r.contains(&said)),
        "{check:?}"
    );
    assert!(run.stdout.contains(&said), "{}", run.stdout);
    assert!(run.stdout.contains("INCONCLUSIVE"), "{}", run.stdout);
    // JUnit: a failure (skipped would read green), saying why.
    let xml = std::fs::read_to_string(run.dir.path().join("benchmarks.junit.xml")).expect("junit");
    assert!(xml.contains("failures=\"1\""), "{xml}");
    assert!(xml.contains("INCONCLUSIVE") && xml.contains(&said), "{xml}");
}

#[test]
fn a_p99_far_inside_passes_and_one_far_beyond_fails() {
    // Every TTFT of N(60, 30) over 400 requests is far below 2 s: the upper bound is too.
    let server = spread_mock(None);
    let run = judged(&server, REQUESTS, "ttft_p99<=2s");
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    let check = &run.report().benchmarks[0]
        .slo
        .clone()
        .expect("a verdict")
        .checks[0];
    assert!(check.passed, "{check:?}");
    assert!(check.upper.is_some_and(|u| u <= 2000.0), "{check:?}");
    assert_eq!(check.more_requests, None);
    // Far beyond: the lower bound of 100 requests' p99 is far above 20 ms, though 100
    // requests bound no p99 from above.
    let server = spread_mock(None);
    let run = judged(&server, 100, "ttft_p99<=20ms");
    assert_eq!(run.code(), 3, "{}\n{}", run.stdout, run.stderr);
    let check = &run.report().benchmarks[0]
        .slo
        .clone()
        .expect("a verdict")
        .checks[0];
    assert!(!check.passed && !check.inconclusive, "{check:?}");
    assert!(
        check.lower.is_some_and(|l| l > 20.0) && check.upper.is_none(),
        "{check:?}"
    );
}

/// `--confidence` is a fraction strictly between 0 and 1, only with `--slo`, and
/// `LLMSURGE_CONFIDENCE` sets it.
#[test]
fn the_confidence_flag_is_checked_and_read_from_the_environment() {
    let usage = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = llmsurge();
        cmd.args([
            "benchmark",
            "run",
            "--dry-run",
            "--target",
            "http://127.0.0.1:9",
        ])
        .args(args);
        cmd.envs(env.iter().copied());
        let out = cmd.output().expect("llmsurge runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for bad in ["1", "0", "150%", "high"] {
        let (code, stderr) = usage(&["--slo", "ttft_p99<=1s", "--confidence", bad], &[]);
        assert_eq!(code, Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--confidence"), "{bad}: {stderr}");
    }
    let (code, stderr) = usage(&["--confidence", "0.99"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--confidence") && stderr.contains("--slo"),
        "{stderr}"
    );
    let plan = dry_run(
        &["--target", "http://127.0.0.1:9", "--slo", "ttft_p99<=1s"],
        &[("LLMSURGE_CONFIDENCE", "99%")],
    );
    assert_eq!(plan["slo"]["confidence"], 0.99, "{plan}");
    let plan = dry_run(
        &["--target", "http://127.0.0.1:9", "--slo", "ttft_p99<=1s"],
        &[],
    );
    assert_eq!(plan["slo"]["confidence"], 0.95, "the default: {plan}");
}

/// An output speed's bounds are tokens per second wherever they are written: the
/// reason of an undecided `output_speed_p50` (3 requests cannot bound a median at 95%)
/// says `tok/s`, never `ms`, in the console, Markdown, JUnit and HTML alike.
#[test]
fn an_output_speed_interval_is_in_tokens_per_second_in_every_format() {
    let server = mock(MockConfig {
        itl_ms: 10.0,
        output_tokens: 8,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .concurrent(1)
        .data("prompt_tokens=16,output_tokens=8")
        .max_requests(3)
        .slo("output_speed_p50>=20tok/s")
        .outputs("json,console,markdown,junit,html")
        .run();
    assert_eq!(run.code(), 5, "{}", run.stderr);
    // The mock's record: the 3 requests the statement is about.
    assert_eq!(server.stats().completed, 3);
    let dir = run.report_path();
    let dir = dir.parent().expect("the output folder").to_path_buf();
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).expect(name);
    for (format, text) in [
        ("console", run.stdout.clone()),
        ("markdown", read("benchmarks.md")),
        ("junit", read("benchmarks.junit.xml")),
        ("html", read("benchmarks.html")),
    ] {
        assert!(
            // Markdown escapes the underscore of `output_speed`.
            text.contains("p50 of 3 requests lies in") && text.contains("tok/s at 95% confidence"),
            "{format}: {text}"
        );
        assert!(!text.contains("] ms at 95%"), "{format}: {text}");
    }
}
