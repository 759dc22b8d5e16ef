//! Regression gates: `benchmark compare`, JUnit and Markdown outputs.

use crate::support::{llmsurge, mock, run};
use llmsurge::mock::MockConfig;
use quick_xml::events::Event;
use std::path::Path;

const DATA: &str = "prompt_tokens=16,output_tokens=16";

/// A run of 150 requests over 3 streams against a mock with the given TTFT.
fn report_with_ttft(ttft_ms: f64, dir: &Path, name: &str) -> std::path::PathBuf {
    let server = mock(MockConfig {
        ttft_ms,
        itl_ms: 1.0,
        ..MockConfig::instant()
    });
    let run = run(&[
        "--target",
        &server.base_url(),
        "--profile",
        "concurrent",
        "--rate",
        "3",
        "--max-requests",
        "150",
        "--data",
        DATA,
        "--outputs",
        "json",
    ]);
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
    let a = report_with_ttft(20.0, dir.path(), "a.json");
    let b = report_with_ttft(20.0, dir.path(), "b.json");
    let slow = report_with_ttft(60.0, dir.path(), "slow.json");
    // The slow mock triples TTFT (+200%). Tolerances of 50% keep two runs of the same
    // settings on a busy shared machine apart from that, whatever the machine's own noise.
    let tolerances =
        "ttft_p50=50%,ttft_p99=50%,e2e_p50=50%,output_tokens_per_s=-50%,error_rate=+0.5pp";

    let (code, stdout, stderr) = compare(&[
        a.to_str().expect("path"),
        b.to_str().expect("path"),
        "--max-regression",
        tolerances,
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
        "--junit",
        junit.to_str().expect("path"),
        "--markdown",
        md.to_str().expect("path"),
    ]);
    assert_eq!(code, 3, "{stdout}{stderr}");
    let ttft_row = stdout
        .lines()
        .find(|l| l.contains("ttft_p50"))
        .expect("a ttft_p50 row");
    assert!(ttft_row.contains("REGRESSED"), "{ttft_row}");
    let (cases, failures) =
        validate_junit(&std::fs::read_to_string(&junit).expect("junit written"));
    assert_eq!(cases, 5, "one case per metric with a tolerance");
    assert!(failures >= 2, "ttft_p50 and e2e_p50 at least: {failures}");
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
    let run = run(&[
        "--target",
        &server.base_url(),
        "--profile",
        "constant",
        "--rate",
        "20,40",
        "--max-requests",
        "30",
        "--data",
        DATA,
        "--slo",
        "ttft_p99<=20ms,error_rate<=1%",
        "--outputs",
        "json,junit,md",
    ]);
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
        3 + 5 + 3,
        "three tables: 2 benchmarks + header, 4 checks + header, the server's 2 + header"
    );
}
