//! The server's own metrics in every output of a real run: the real binary scrapes the
//! real mock's `/metrics` and renders what it found in the console, CSV, HTML and
//! Markdown, and `benchmark compare` compares it.

use crate::scenario::Bench;
use crate::support::{llmsurge, mock, ok_report, wait_run};
use llmsurge::mock::MockConfig;
use std::process::Stdio;

#[test]
fn a_runs_server_metrics_reach_every_format_and_compare() {
    // Two slots at ~60 ms a request serve ~33 req/s: at 40 req/s a queue builds, so the
    // waiting-requests gauge has something to show.
    let server = mock(MockConfig {
        ttft_ms: 20.0,
        itl_ms: 4.0,
        output_tokens: 10,
        max_concurrency: Some(2),
        ..MockConfig::instant()
    });
    let url = server.base_url();
    let run = Bench::target(&url)
        .constant(40)
        .max_seconds(2)
        .data("prompt_tokens=16,output_tokens=10")
        .arg("--server-metrics-interval", "200ms")
        .outputs("json,csv,html,md,console")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    let sm = b
        .server_metrics
        .as_ref()
        .unwrap_or_else(|| panic!("no server metrics; stderr:\n{}", run.stderr));
    assert_eq!(sm.server.as_deref(), Some("vllm"));
    assert!(sm.scrapes >= 5, "{} scrapes", sm.scrapes);
    assert!(sm.scrape_errors.is_empty(), "{:?}", sm.scrape_errors);
    let waiting_max = sm.summary["num_requests_waiting"].max.expect("max");
    assert!(waiting_max > 0.0, "the queue the mock built shows");
    let generation = sm.summary["generation_tokens"].delta.expect("delta");
    let check = sm
        .cross_checks
        .iter()
        .find(|c| c.name == "generation_tokens")
        .expect("a generation-token cross-check");
    assert!(check.agrees, "{check:?}");

    // Console: the block, with the cross-check.
    assert!(run.stdout.contains("Server metrics"), "{}", run.stdout);
    assert!(run.stdout.contains(&format!("vllm at {url}/metrics")));
    assert!(run.stdout.contains("cross-check generation_tokens:"));

    // CSV: the same figures.
    let dir = run.dir.path();
    let csv = run.csv_first_row();
    let cell = |name: &str| csv.cell(name);
    assert_eq!(cell("server.server"), "vllm");
    assert_eq!(
        cell("server.generation_tokens.delta").parse::<f64>(),
        Ok(generation)
    );
    assert_eq!(
        cell("server.num_requests_waiting.max").parse::<f64>(),
        Ok(waiting_max)
    );
    assert_eq!(cell("server.cross_check.generation_tokens.agrees"), "true");

    // HTML: the server section and its series, for the page to draw.
    let html = std::fs::read_to_string(dir.join("benchmarks.html")).expect("benchmarks.html");
    assert!(html.contains("id=\"charts-server\""));
    assert!(html.contains("\"num_requests_waiting\":[["));

    // Markdown: the server section.
    let md = std::fs::read_to_string(dir.join("benchmarks.md")).expect("benchmarks.md");
    assert!(md.contains("### Server metrics"), "{md}");
    assert!(md.contains("| constant@40 | vllm |"), "{md}");

    // Compare: the report against itself has server_* rows and no regression, also
    // with a tolerance on one of them.
    let path = run.report_path();
    let path = path.to_str().expect("utf-8 path");
    let mut cmd = llmsurge();
    cmd.args([
        "benchmark",
        "compare",
        path,
        path,
        "--max-regression",
        "ttft_p99=10%,server_num_requests_waiting_mean=20%",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let compared = wait_run(
        cmd.spawn().expect("llmsurge starts"),
        tempfile::tempdir().expect("tempdir"),
    );
    assert_eq!(compared.code(), 0, "{}", compared.stderr);
    assert!(
        compared.stdout.contains("server_num_requests_waiting_mean"),
        "{}",
        compared.stdout
    );
    assert!(compared.stdout.contains("server_generation_tokens_per_s"));
}
