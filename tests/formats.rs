//! Report formats rendered from a fixed, checked-in report (tests/fixtures/report-v1.json,
//! two benchmarks from a real run against the mock, host and URL made neutral): insta
//! snapshots of the console tables, the CSV header and the YAML report, the CSV read back
//! as a table, the HTML's escaping, and the JSON's lossless reload.

use llmsurge::report::{FileFormat, Report, console, csv as report_csv, render};
use std::path::Path;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/report-v1.json");

fn fixture() -> Report {
    Report::load(Path::new(FIXTURE)).expect("the fixture loads")
}

fn text(report: &Report, format: FileFormat) -> String {
    String::from_utf8(render(report, format).expect("renders")).expect("UTF-8")
}

#[test]
fn the_json_fixture_reloads_without_losing_a_field() {
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(FIXTURE).expect("read")).expect("JSON");
    let again: serde_json::Value =
        serde_json::from_str(&text(&fixture(), FileFormat::Json)).expect("JSON");
    assert_eq!(raw, again, "every field survives load and render");
}

#[test]
fn console_tables_snapshot() {
    let report = fixture();
    insta::assert_snapshot!(console::summary(
        &report.benchmarks,
        report.capacity.as_ref()
    ));
}

#[test]
fn csv_header_snapshot() {
    let csv = text(&fixture(), FileFormat::Csv);
    let header = csv.lines().next().expect("a header");
    // One column per line keeps the snapshot's diffs readable.
    insta::assert_snapshot!(header.replace(',', "\n"));
}

#[test]
fn yaml_report_snapshot() {
    insta::assert_snapshot!(text(&fixture(), FileFormat::Yaml));
}

/// The report's CSV read back: its header (checked to be the report's columns, each name
/// once) and its rows.
fn csv_table(report: &Report) -> (Vec<String>, Vec<csv::StringRecord>) {
    let bytes = render(report, FileFormat::Csv).expect("renders");
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let header: Vec<String> = reader
        .headers()
        .expect("header")
        .iter()
        .map(str::to_string)
        .collect();
    assert_eq!(header, report_csv::header(report));
    let mut unique = header.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), header.len(), "column names are unique");
    let rows = reader.records().map(|r| r.expect("a row")).collect();
    (header, rows)
}

/// The position of column `name`.
fn column(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name}"))
}

#[test]
fn the_csv_reads_back_as_one_typed_row_per_benchmark() {
    let report = fixture();
    let (header, rows) = csv_table(&report);
    assert_eq!(rows.len(), report.benchmarks.len());
    let col = |name: &str| column(&header, name);
    for (row, b) in rows.iter().zip(&report.benchmarks) {
        assert_eq!(row.len(), header.len());
        assert_eq!(&row[col("run.strategy")], b.strategy.to_string());
        assert_eq!(
            row[col("requests.completed")].parse::<u64>().expect("int"),
            b.requests.completed
        );
        let p99: f64 = row[col("ttft_ms.successful.p99")].parse().expect("float");
        assert_eq!(p99, b.metrics["ttft"].successful.percentiles.p99);
        let median: f64 = row[col("request_latency_ms.successful.median")]
            .parse()
            .expect("float");
        assert_eq!(
            median,
            b.metrics["request_latency"].successful.percentiles.p50
        );
        assert_eq!(&row[col("extras.gpu")], "H100");
        assert!(matches!(&row[col("client.bottleneck")], "true" | "false"));
        let slo = b.slo.as_ref().expect("the fixture has SLO verdicts");
        assert_eq!(row[col("slo.passed")], slo.passed.to_string());
        assert_eq!(&row[col("slo.failed_checks")], "ttft_p99<=35ms");
        let good = b.goodput.as_ref().expect("the fixture has goodput");
        assert_eq!(
            row[col("goodput.fraction")].parse::<f64>().expect("f64"),
            good.fraction
        );
        // Every cell is a number, a boolean, empty, or one of the few text columns: a
        // column pandas would read as mixed types is a bug.
        let text_columns = [
            "run.strategy",
            "run.strategy_type",
            "run.model",
            "run.target",
            "run.stop_reason",
            "errors.kinds",
            "client.warnings",
            "slo.failed_checks",
            "slo.inconclusive_checks",
            "slo.verdict",
            "slo.reasons",
            "extras.gpu",
        ];
        for (name, cell) in header.iter().zip(row.iter()) {
            if text_columns.contains(&name.as_str()) || cell.is_empty() {
                continue;
            }
            assert!(
                cell.parse::<f64>().is_ok() || cell == "true" || cell == "false",
                "{name} = {cell:?} is not a number or boolean"
            );
        }
    }
    // An empty distribution has a count of 0 and empty statistics (NaN in pandas).
    let b = &report.benchmarks[0];
    assert_eq!(b.metrics["ttft"].incomplete.count, 0);
    assert_eq!(&rows[0][col("ttft_ms.incomplete.count")], "0");
    assert_eq!(&rows[0][col("ttft_ms.incomplete.p50")], "");
}

#[test]
fn the_html_is_self_contained_and_escapes_what_the_server_sent() {
    let mut report = fixture();
    let evil = "</script><script>alert('x')</script><b>";
    report.benchmarks[0].errors[0].samples[0] = evil.into();
    report.target.model = "<img src=x onerror=alert(1)>".into();
    let html = text(&report, FileFormat::Html);
    assert!(
        !html.contains(evil),
        "an error message closed the script element"
    );
    assert!(
        !html.contains("<img src=x"),
        "the model name was not escaped"
    );
    assert!(
        html.contains("&lt;img src=x"),
        "the model name is shown, escaped"
    );
    // Offline: nothing is fetched from anywhere.
    for needle in ["src=\"http", "href=\"http", "src=\"//", "@import"] {
        assert!(!html.contains(needle), "the page fetches {needle}");
    }
    assert!(html.contains("uPlot"), "the chart library is embedded");
    // The embedded data is the whole report, parseable.
    let start = html.find("id=\"report-data\">").expect("data element") + 17;
    let end = start + html[start..].find("</script>").expect("end of data");
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).expect("JSON data");
    assert_eq!(
        data["report"]["benchmarks"][0]["errors"][0]["samples"][0],
        evil
    );
    assert_eq!(data["labels"][1], "constant@20");
}

#[test]
fn an_empty_report_renders_in_every_format() {
    let mut report = fixture();
    report.benchmarks.clear();
    report.request_samples.clear();
    for format in [
        FileFormat::Json,
        FileFormat::Csv,
        FileFormat::Html,
        FileFormat::Yaml,
    ] {
        assert!(!render(&report, format).expect("renders").is_empty());
    }
    assert_eq!(text(&report, FileFormat::Csv).lines().count(), 1);
}

// The server's own metrics (issue 13): the same report with `server_metrics` filled on
// both benchmarks (tests/fixtures/report-server-metrics.json: a vLLM server, a failed
// scrape, a cross-check that disagrees, a series kept by `--server-metrics-include`).

const SERVER_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/report-server-metrics.json"
);

fn server_fixture() -> Report {
    Report::load(Path::new(SERVER_FIXTURE)).expect("the server fixture loads")
}

#[test]
fn the_server_fixture_reloads_without_losing_a_field() {
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(SERVER_FIXTURE).expect("read"))
            .expect("JSON");
    let again: serde_json::Value =
        serde_json::from_str(&text(&server_fixture(), FileFormat::Json)).expect("JSON");
    assert_eq!(raw, again, "every server field survives load and render");
}

#[test]
fn without_server_metrics_every_format_renders_as_the_report_without_them() {
    // The server fixture is report-v1 plus `server_metrics`: taking them out must give
    // the very bytes of report-v1 in every format (no empty server columns or sections).
    let mut stripped = server_fixture();
    for b in &mut stripped.benchmarks {
        b.server_metrics = None;
    }
    let plain = fixture();
    for format in [
        FileFormat::Json,
        FileFormat::Csv,
        FileFormat::Html,
        FileFormat::Yaml,
        FileFormat::Markdown,
        FileFormat::Junit,
    ] {
        assert!(
            render(&stripped, format).expect("renders") == render(&plain, format).expect("renders"),
            "{format:?} differs"
        );
    }
    assert_eq!(
        console::summary(&stripped.benchmarks, None),
        console::summary(&plain.benchmarks, None)
    );
    let html = text(&plain, FileFormat::Html);
    assert!(!html.contains("id=\"server\""), "no server section");
    assert!(!text(&plain, FileFormat::Csv).contains("server."));
    assert!(!text(&plain, FileFormat::Markdown).contains("Server metrics"));
    assert!(!console::summary(&plain.benchmarks, None).contains("Server metrics"));
}

#[test]
fn server_metrics_console_snapshot() {
    let report = server_fixture();
    let out = console::summary(&report.benchmarks, None);
    let block = &out[out.find("Server metrics").expect("a server block")..];
    // Up to the SLO verdicts, which have their own snapshot.
    let block = &block[..block.find("\nService-level").unwrap_or(block.len())];
    insta::assert_snapshot!(block);
}

#[test]
fn server_metrics_markdown_snapshot() {
    let md = text(&server_fixture(), FileFormat::Markdown);
    let section = &md[md.find("### Server metrics").expect("a server section")..];
    insta::assert_snapshot!(section);
}

#[test]
fn server_metrics_csv_header_snapshot() {
    let csv = text(&server_fixture(), FileFormat::Csv);
    let header = csv.lines().next().expect("a header");
    let server: Vec<&str> = header
        .split(',')
        .filter(|c| c.starts_with("server."))
        .collect();
    insta::assert_snapshot!(server.join("\n"));
}

#[test]
fn server_metrics_csv_cells_are_the_reports_figures() {
    let report = server_fixture();
    let (header, rows) = csv_table(&report);
    // The plain columns keep their places: the server's come after the distributions.
    let plain = report_csv::header(&fixture());
    let kept: Vec<&String> = header
        .iter()
        .filter(|h| !h.starts_with("server."))
        .collect();
    assert_eq!(kept, plain.iter().collect::<Vec<_>>());
    let col = |name: &str| column(&header, name);
    for (row, b) in rows.iter().zip(&report.benchmarks) {
        let sm = b.server_metrics.as_ref().expect("server metrics");
        let f = |name: &str| -> f64 { row[col(name)].parse().expect(name) };
        assert_eq!(&row[col("server.server")], "vllm");
        assert_eq!(f("server.scrapes"), sm.scrapes as f64);
        assert_eq!(
            f("server.num_requests_waiting.mean"),
            sm.summary["num_requests_waiting"].mean.expect("mean")
        );
        assert_eq!(
            f("server.kv_cache_usage_perc.max"),
            sm.summary["kv_cache_usage_perc"].max.expect("max")
        );
        assert_eq!(
            f("server.generation_tokens.delta"),
            sm.summary["generation_tokens"].delta.expect("delta")
        );
        assert_eq!(
            f("server.prefix_cache_hit_rate"),
            sm.derived.prefix_cache_hit_rate.expect("rate")
        );
        assert_eq!(
            f("server.e2e_request_latency_seconds.mean"),
            sm.histograms["e2e_request_latency_seconds"]
                .mean
                .expect("mean")
        );
        let check = &sm.cross_checks[2];
        assert_eq!(check.name, "request_success");
        assert_eq!(
            f("server.cross_check.request_success.difference"),
            check.difference
        );
        assert_eq!(
            row[col("server.cross_check.request_success.agrees")],
            check.agrees.to_string()
        );
        // A series the server did not publish is an empty cell, not a missing column.
        assert_eq!(&row[col("server.cache_hit_rate.mean")], "");
        // The --server-metrics-include series, every statistic.
        assert_eq!(f("server.process_resident_memory_bytes.max"), 256_000_000.0);
        assert_eq!(&row[col("server.process_resident_memory_bytes.delta")], "");
        let text_columns = [
            "server.url",
            "server.server",
            "server.scrape_error_kinds",
            "server.warnings",
        ];
        for (name, cell) in header.iter().zip(row.iter()) {
            if !name.starts_with("server.") || text_columns.contains(&name.as_str()) {
                continue;
            }
            assert!(
                cell.is_empty() || cell.parse::<f64>().is_ok() || cell == "true" || cell == "false",
                "{name} = {cell:?} is not a number or boolean"
            );
        }
    }
    assert_eq!(&rows[1][col("server.scrape_error_kinds")], "timeout=1");
    assert!(rows[1][col("server.warnings")].contains("request_success"));
}

#[test]
fn the_html_has_server_charts_and_tables_and_escapes_what_the_server_sent() {
    let mut report = server_fixture();
    let evil = "<img src=x onerror=alert(1)>";
    let sm = report.benchmarks[1]
        .server_metrics
        .as_mut()
        .expect("server metrics");
    sm.warnings.push(format!("a series named {evil}"));
    sm.scrape_errors[0].sample = format!("</script>{evil}");
    let html = text(&report, FileFormat::Html);
    assert!(html.contains("id=\"server\""), "a server section");
    assert!(
        html.contains("id=\"charts-server\""),
        "a place for the charts"
    );
    assert!(!html.contains(evil), "a server's text was not escaped");
    assert!(
        html.contains("a series named &lt;img"),
        "the warning is shown"
    );
    // The table: waiting mean / max of the second benchmark (minijinja escapes `/`), its
    // cross-check verdict.
    assert!(
        html.contains("<td>0.33 &#x2f; 1</td>"),
        "waiting mean / max"
    );
    assert!(html.contains("<td>12.3% &#x2f; 22.0%</td>"), "KV-cache use");
    assert!(
        html.contains("<td>+3.77%</td>"),
        "the disagreeing cross-check"
    );
    assert!(html.contains("disagrees"));
    // The page script draws from the embedded report: the server series are in it.
    let start = html.find("id=\"report-data\">").expect("data element") + 17;
    let end = start + html[start..].find("</script>").expect("end of data");
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).expect("JSON data");
    let series = &data["report"]["benchmarks"][1]["server_metrics"]["series"];
    assert_eq!(
        series["num_requests_waiting"][2],
        serde_json::json!([1.0, 1.0])
    );
    assert!(series["kv_cache_usage_perc"].is_array());
}

#[test]
fn the_yaml_carries_the_server_metrics_as_the_json_does() {
    let report = server_fixture();
    let yaml = text(&report, FileFormat::Yaml);
    let from_yaml: Report = serde_saphyr::from_str(&yaml).expect("the YAML reads back");
    assert_eq!(
        from_yaml.benchmarks[1].server_metrics,
        report.benchmarks[1].server_metrics
    );
}
