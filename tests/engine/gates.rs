//! Regression gates: `benchmark compare`, JUnit and Markdown outputs.

use crate::scenario::Bench;
use crate::support::{llmsurge, mock};
use llmsurge::mock::MockConfig;
use quick_xml::events::Event;
use std::path::Path;

const DATA: &str = "prompt_tokens=16,output_tokens=16";

/// TTFT of the fast mock: long beside the few milliseconds a busy machine's scheduler
/// adds to a request, so a run's median or mean TTFT moves by a small fraction of it.
const FAST_TTFT_MS: f64 = 200.0;
/// TTFT of the slow mock: five times the fast one.
const SLOW_TTFT_MS: f64 = 1000.0;

/// A run of 150 requests over 25 streams against a mock whose TTFT is exactly `ttft_ms`
/// (no spread). The mock waits that long from the request's arrival, so load can only
/// lengthen what the client measures, never shorten it.
fn report_with_ttft(ttft_ms: f64, dir: &Path, name: &str) -> std::path::PathBuf {
    let server = mock(MockConfig {
        ttft_ms,
        itl_ms: 2.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .concurrent(25)
        .max_requests(150)
        .data(DATA)
        .outputs("json")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let path = dir.join(name);
    std::fs::copy(run.report_path(), &path).expect("copy the report");
    path
}

fn compare(args: &[&str]) -> (i32, String, String) {
    let out = llmsurge()
        .args(["benchmark", "compare"])
        .args(args)
        .output()
        .expect("compare runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Checks the common JUnit shape: testsuites > testsuite > testcase > failure, with
/// consistent counts. Returns (testcases, failures).
fn validate_junit(xml: &str) -> (usize, usize) {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<String> = Vec::new();
    let (mut cases, mut failures, mut declared) = (0, 0, None);
    loop {
        let event = reader.read_event().expect("well-formed XML");
        let (name, attrs, empty) = match &event {
            Event::Start(e) => (e.name().as_ref().to_string(), e.attributes(), false),
            Event::Empty(e) => (e.name().as_ref().to_string(), e.attributes(), true),
            Event::End(_) => {
                stack.pop();
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        let parent = stack.last().map(String::as_str);
        match name.as_str() {
            "testsuites" => {
                assert_eq!(parent, None);
                let attrs: Vec<_> = attrs.flatten().collect();
                let get = |k: &str| {
                    attrs
                        .iter()
                        .find(|a| a.key.as_ref() == k)
                        .map(|a| a.value.to_string())
                };
                declared = Some((
                    get("tests").expect("tests").parse::<usize>().expect("n"),
                    get("failures")
                        .expect("failures")
                        .parse::<usize>()
                        .expect("n"),
                ));
            }
            "testsuite" => assert_eq!(parent, Some("testsuites")),
            "testcase" => {
                assert_eq!(parent, Some("testsuite"));
                let names: Vec<String> = attrs
                    .flatten()
                    .map(|a| a.key.as_ref().to_string())
                    .collect();
                assert!(
                    names.iter().any(|n| n == "name") && names.iter().any(|n| n == "classname")
                );
                cases += 1;
            }
            "failure" => {
                assert_eq!(parent, Some("testcase"));
                failures += 1;
            }
            "skipped" | "system-out" => assert_eq!(parent, Some("testcase")),
            other => panic!("unexpected element {other}"),
        }
        if !empty {
            stack.push(name);
        }
    }
    assert_eq!(
        declared,
        Some((cases, failures)),
        "the declared counts match the document"
    );
    (cases, failures)
}

fn markdown_table_rows(md: &str) -> usize {
    let parser = pulldown_cmark::Parser::new_ext(md, pulldown_cmark::Options::ENABLE_TABLES);
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, parser);
    assert!(
        html.contains("<table>"),
        "the Markdown renders as a table:\n{md}"
    );
    html.matches("<tr>").count()
}

#[test]
fn compare_finds_no_regression_between_equal_runs_and_one_between_fast_and_slow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = report_with_ttft(FAST_TTFT_MS, dir.path(), "a.json");
    let b = report_with_ttft(FAST_TTFT_MS, dir.path(), "b.json");
    let slow = report_with_ttft(SLOW_TTFT_MS, dir.path(), "slow.json");
    // Judged are figures of the whole run (medians, means, the token rate), never a tail
    // figure such as a p99: the tail of 150 requests is two requests, and one stall of
    // the client on a busy machine moves it by any ratio. For the equal pair to differ by
    // 50%, one run's median (or mean) TTFT must be held 100 ms longer than the other's.
    // For the slow run (at least 1000 ms) not to be 50% worse than the fast one, the fast
    // run's median TTFT must more than triple. Load moves neither verdict.
    let tolerances =
        "ttft_p50=50%,ttft_mean=50%,e2e_p50=50%,output_tokens_per_s=-50%,error_rate=+0.5pp";

    let (code, stdout, stderr) = compare(&[
        a.to_str().expect("path"),
        b.to_str().expect("path"),
        "--max-regression",
        tolerances,
        "--max-regression-only",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("0 regression(s)"), "{stdout}");
    assert!(
        stdout.contains("150/150"),
        "sample sizes are reported: {stdout}"
    );

    let junit = dir.path().join("compare.xml");
    let md = dir.path().join("compare.md");
    let (code, stdout, stderr) = compare(&[
        a.to_str().expect("path"),
        slow.to_str().expect("path"),
        "--max-regression",
        tolerances,
        // These five alone (the defaults would gate ttft_p99 too).
        "--max-regression-only",
        "--junit",
        junit.to_str().expect("path"),
        "--markdown",
        md.to_str().expect("path"),
    ]);
    assert_eq!(code, 3, "{stdout}{stderr}");
    let row = |metric: &str| {
        stdout
            .lines()
            .find(|l| l.split(['│', '┆']).any(|cell| cell.trim() == metric))
            .unwrap_or_else(|| panic!("a {metric} row: {stdout}"))
    };
    // Every figure the slower TTFT worsens regressed; the error rate (none on either
    // side) did not.
    for metric in ["ttft_p50", "ttft_mean", "e2e_p50", "output_tokens_per_s"] {
        assert!(row(metric).contains("REGRESSED"), "{stdout}");
    }
    assert!(!row("error_rate").contains("REGRESSED"), "{stdout}");
    let (cases, failures) =
        validate_junit(&std::fs::read_to_string(&junit).expect("junit written"));
    assert_eq!(cases, 5, "one case per metric with a tolerance");
    assert_eq!(failures, 4, "every regressed metric is a failure");
    let rows = markdown_table_rows(&std::fs::read_to_string(&md).expect("markdown written"));
    assert!(rows > 10, "{rows} rows");
}

#[test]
fn compare_refuses_bad_input_with_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"not\": \"a report\"}").expect("write");
    let p = junk.to_str().expect("path");
    for (args, needle) in [
        (vec!["/no/such/file.json", p], "/no/such/file.json"),
        (vec![p, p], "junk.json"),
    ] {
        let (code, _, stderr) = compare(&args);
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains(needle) && stderr.lines().count() == 1,
            "{stderr}"
        );
    }
    let (code, _, stderr) = compare(&[p, p, "--max-regression", "ttft_p99=ten"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--max-regression"), "{stderr}");
}

#[test]
fn runs_write_slo_verdicts_as_junit_and_markdown() {
    let server = mock(MockConfig {
        ttft_ms: 50.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .constant("20,40")
        .max_requests(30)
        .data(DATA)
        .slo("ttft_p99<=20ms,error_rate<=1%")
        .outputs("json,junit,md")
        .run();
    assert_eq!(run.code(), 3, "{}", run.stderr);
    let xml = std::fs::read_to_string(run.dir.path().join("benchmarks.junit.xml")).expect("junit");
    assert_eq!(
        validate_junit(&xml),
        (4, 2),
        "2 checks × 2 benchmarks, the TTFT one failing in both"
    );
    assert!(xml.contains("llmsurge.slo.constant@20"));
    let md = std::fs::read_to_string(run.dir.path().join("benchmarks.md")).expect("markdown");
    // The mock publishes /metrics, so the run scraped it and the summary has its table.
    assert!(md.contains("Server metrics"), "{md}");
    assert_eq!(
        markdown_table_rows(&md),
        3 + 3 + 3 + 5 + 3,
        "five tables: 2 benchmarks + header, their connections + header, their output lengths + header, 4 checks + header, the server's 2 + header"
    );
}

/// An errored request is not good: against a mock failing 60% of requests, goodput's
/// fraction is good / (completed + errored), with the errors the mock says it injected.
/// `benchmark compare` judges the same fraction.
#[test]
fn goodput_fraction_counts_errored_requests_as_not_good() {
    let server = mock(MockConfig {
        error_rate: 0.6,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(50)
        .data(DATA)
        .arg("--goodput", "e2e:10s")
        .outputs("json,console")
        .run();
    assert_eq!(run.code(), 0, "{}", run.stderr);
    let report = run.report();
    let b = &report.benchmarks[0];
    let faults = server.stats().faults;
    let injected = faults.error_500 + faults.error_429;
    assert!(injected > 0, "the mock injected errors");
    assert_eq!(b.measured_requests.errored, injected);
    assert_eq!(b.measured_requests.completed, 50 - injected);
    let g = b.goodput.expect("goodput");
    // Every completed request is well within 10 s: good.
    assert_eq!(g.good_requests, 50 - injected);
    let want = (50 - injected) as f64 / 50.0;
    assert!(
        (g.fraction - want).abs() < 1e-12,
        "{} vs {want}",
        g.fraction
    );
    // JSON: the thresholds as durations people write, not {secs, nanos}.
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.report_path()).expect("report")).expect("json");
    assert_eq!(
        raw["benchmarks"][0]["goodput"]["spec"],
        serde_json::json!({"e2e": "10s"})
    );
    // Console: the goodput has its table.
    let line = run
        .stdout
        .lines()
        .find(|l| {
            l.contains("synchronous")
                && l.contains(&format!("{}", g.good_requests))
                && l.contains("e2e<=10s")
        })
        .unwrap_or_else(|| panic!("a goodput row:\n{}", run.stdout));
    assert!(line.contains(&format!("{:.1}%", want * 100.0)), "{line}");

    let tolerances = llmsurge::compare::tolerance::Tolerances::parse("goodput_fraction=1pp")
        .expect("tolerances");
    let cmp =
        llmsurge::compare::compare(&report, &report, &tolerances, false, 0.95).expect("compare");
    let row = cmp.pairs[0]
        .changes
        .iter()
        .find(|m| m.metric == "goodput_fraction")
        .expect("a goodput_fraction row");
    assert_eq!(row.baseline, Some(want));
    assert_eq!(row.samples, (50, 50));
}

/// A mock of 2 slots at 0.25 s a request serves 8 req/s at most. Offered 20 req/s for
/// 3 s, its queue grows all along; the first requests finished fast and the rest were
/// cut off with small lower bounds, so `e2e_p50<=2s` holds on the numbers. The server
/// did not keep up: the check fails with that reason, in every output.
#[test]
fn a_latency_objective_fails_when_the_server_did_not_keep_up() {
    let server = mock(MockConfig {
        max_concurrency: Some(2),
        ttft_ms: 100.0,
        itl_ms: 10.0,
        output_tokens: 16,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .constant(20)
        .max_seconds(3)
        .data(DATA)
        .slo("e2e_p50<=2s,error_rate<=1%")
        .outputs("json,junit,md,csv,html,console")
        .run();
    assert_eq!(run.code(), 3, "{}", run.stderr);
    let report = run.report();
    let b = &report.benchmarks[0];
    // The mock's own queue: it held requests waiting for a slot.
    assert!(server.stats().peak_queued >= 4, "{:?}", server.stats());
    let verdict = b.slo.clone().expect("a verdict");
    let why = verdict
        .not_kept_up
        .clone()
        .expect("the server did not keep up");
    let achieved = format!("achieved {:.1} of 20 req/s", b.throughput.requests_per_s);
    assert!(
        why.starts_with("the server did not keep up: ") && why.contains(&achieved),
        "{why}"
    );
    let e2e = &verdict.checks[0];
    assert!(!e2e.passed && !e2e.inconclusive, "{e2e:?}");
    assert_eq!(e2e.reason.as_deref(), Some(why.as_str()));
    assert!(
        verdict.checks[1].passed,
        "the error rate is not a latency: {verdict:?}"
    );
    let dir = run.dir.path();
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).expect(name);
    assert!(run.stdout.contains(&why), "console:\n{}", run.stdout);
    let xml = read("benchmarks.junit.xml");
    assert_eq!(validate_junit(&xml), (2, 1));
    assert!(
        xml.contains("the server did not keep up: achieved"),
        "{xml}"
    );
    assert!(read("benchmarks.md").contains("the server did not keep up: achieved"));
    assert!(read("benchmarks.csv").contains("the server did not keep up: achieved"));
    // The page draws its verdicts from the embedded report.
    assert!(read("benchmarks.html").contains("the server did not keep up: achieved"));
}

/// A percentile of a few requests decides nothing: 20 completed requests bound no p99
/// from above (0.99^20 = 82% of such samples lie wholly below the true p99), so a p99
/// check far above every value is inconclusive, the verdict does not pass and the run
/// exits 5 (not 3: nothing failed) saying about how many more requests would decide; a
/// p50 of the same 20 decides.
#[test]
fn a_percentile_of_too_few_requests_is_inconclusive() {
    let server = mock(MockConfig::instant());
    let run = Bench::on(&server)
        .constant(50)
        .max_requests(20)
        .data(DATA)
        .slo("ttft_p99<=10s,ttft_p50<=10s")
        .outputs("json,junit,console")
        .run();
    assert_eq!(run.code(), 5, "{}", run.stderr);
    let completed = server.stats().completed;
    assert_eq!(completed, 20);
    let verdict = run.report().benchmarks[0].slo.clone().expect("a verdict");
    assert_eq!(verdict.label(), "INCONCLUSIVE");
    let p99 = &verdict.checks[0];
    assert!(p99.inconclusive && !p99.passed, "{p99:?}");
    assert_eq!(p99.upper, None, "{p99:?}");
    // Every value is far below 10 s: the first count whose p99 has an upper bound at
    // all decides, the smallest N with 0.99^N <= 2.5%.
    let first = (0.025f64.ln() / 0.99f64.ln()).ceil() as u64;
    assert_eq!(p99.more_requests, Some(first - completed), "{p99:?}");
    let said = format!("about {} more requests would decide", first - completed);
    assert!(
        p99.reason.as_deref().is_some_and(|r| r
            .starts_with(&format!("ttft p99 of {completed} requests lies in ["))
            && r.ends_with(&said)),
        "{p99:?}"
    );
    assert!(verdict.checks[1].passed, "{verdict:?}");
    let row = run
        .stdout
        .lines()
        .find(|l| l.contains("ttft_p99<=10s"))
        .expect("a row for the check");
    assert!(row.contains("INCONCLUSIVE"), "{row}");
    let xml = std::fs::read_to_string(run.dir.path().join("benchmarks.junit.xml")).expect("junit");
    assert_eq!(validate_junit(&xml), (2, 1));
    assert!(xml.contains(&said), "{xml}");
}

/// Exit 4 names each rule that fired, with its figures, on stderr and in the report.
#[test]
fn an_invalid_run_says_which_rule_made_it_invalid() {
    // No request succeeded: the mock failed every one.
    let server = mock(MockConfig {
        error_rate: 1.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .synchronous()
        .max_requests(12)
        .data(DATA)
        .run();
    assert_eq!(run.code(), 4, "{}", run.stderr);
    let faults = server.stats().faults;
    let mut kinds = Vec::new();
    if faults.error_429 > 0 {
        kinds.push(format!("http_429 ×{}", faults.error_429));
    }
    if faults.error_500 > 0 {
        kinds.push(format!("http_500 ×{}", faults.error_500));
    }
    let want = format!(
        "synchronous: no request succeeded: 0 of 12 completed, 12 errored ({}), 0 cancelled",
        kinds.join(", ")
    );
    assert!(
        run.stderr
            .lines()
            .any(|l| l == format!("invalid run: {want}")),
        "{}",
        run.stderr
    );
    assert_eq!(run.report().invalid_run, vec![want]);

    // The client was the bottleneck: held to 1 µs, its dispatch lag (a rate strategy)
    // and its runtime probe (any strategy) are over.
    let ok = mock(MockConfig::instant());
    let run = Bench::target(&ok.base_url())
        .constant(20)
        .max_requests(10)
        .data(DATA)
        .arg("--max-dispatch-lag", "1us")
        .run();
    assert_eq!(run.code(), 4, "{}", run.stderr);
    let report = run.report();
    let c = &report.benchmarks[0].client;
    let lag = format!(
        "constant@20: client dispatch lag p99 {:.1} ms > 0.001 ms (--max-dispatch-lag): the client, not the server, set the pace",
        c.dispatch_lag_p99_ms
    );
    assert!(
        report.invalid_run.contains(&lag),
        "{:?}",
        report.invalid_run
    );
    assert!(
        run.stderr.contains(&format!("invalid run: {lag}")),
        "{}",
        run.stderr
    );

    let run = Bench::target(&ok.base_url())
        .concurrent(2)
        .max_requests(10)
        .data(DATA)
        .arg("--max-dispatch-lag", "1us")
        .run();
    assert_eq!(run.code(), 4, "{}", run.stderr);
    let report = run.report();
    let reasons = &report.invalid_run;
    assert!(!reasons.is_empty());
    for r in reasons {
        assert!(r.starts_with("concurrent@2: "), "{r}");
        assert!(
            run.stderr.contains(&format!("invalid run: {r}")),
            "{}",
            run.stderr
        );
    }
}
