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

#[test]
fn the_csv_reads_back_as_one_typed_row_per_benchmark() {
    let report = fixture();
    let bytes = render(&report, FileFormat::Csv).expect("renders");
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let header: Vec<String> = reader
        .headers()
        .expect("header")
        .iter()
        .map(str::to_string)
        .collect();
    assert_eq!(header, report_csv::header(&report));
    let mut unique = header.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), header.len(), "column names are unique");
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("a row")).collect();
    assert_eq!(rows.len(), report.benchmarks.len());
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
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
