//! Agent traces say what they are by their own names (issue 38): a bad attribute names
//! itself and its value, a broken JSON file its line and column, a trace without a
//! call its id; the report names traces by id and critical paths by span; a timed run
//! at a rate repeats a file too short for it, and says so. The traces are the examples
//! of docs/workloads.md, read from the page, so the page's examples are what is run.

use crate::scenario::Bench;
use crate::support::mock;
use llmsurge::mock::MockConfig;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The content of the block docs/workloads.md writes as the file `name`.
fn doc_file(name: &str) -> String {
    let page = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/workloads.md"),
    )
    .expect("docs/workloads.md");
    let marker = format!("<!-- doc-commands: file {name} -->");
    let after = &page[page.find(&marker).expect("the example's marker") + marker.len()..];
    let body = &after[after.find('\n').expect("a fence") + 1..];
    let body = &body[body.find('\n').expect("the fence's line") + 1..];
    body[..body.find("```").expect("the fence's end")].to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the trace");
    path
}

/// Runs a replay of `text` (written as `name`) that must stop before any load: its one
/// stderr line.
fn refused(name: &str, text: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), name, text);
    let server = mock(MockConfig::instant());
    let finished = Bench::on(&server)
        .profile("replay")
        .data(&path.display().to_string())
        .run();
    assert_eq!(finished.code(), 2, "{name}: {}", finished.stderr);
    let lines: Vec<&str> = finished.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{name}: {}", finished.stderr);
    assert!(
        lines[0].contains(&path.display().to_string()),
        "{}",
        lines[0]
    );
    assert_eq!(server.stats().completed, 0, "nothing was sent");
    lines[0].to_string()
}

/// The 1-based line of `text` that holds `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text[..text.find(needle).expect("the needle")]
        .matches('\n')
        .count()
        + 1
}

#[test]
fn a_token_count_of_the_wrong_type_names_the_span_the_attribute_and_its_value() {
    let example = doc_file("agent-trace.json");
    let planner_in = r#"{"key": "gen_ai.usage.input_tokens", "value": {"intValue": "100"}}"#;
    let text = example.replacen(
        planner_in,
        r#"{"key": "gen_ai.usage.input_tokens", "value": {"intValue": "abc"}}"#,
        1,
    );
    assert_ne!(text, example, "the example has the planner's input tokens");
    let line = refused("agent-trace.json", &text);
    let span_line = line_of(&text, r#""spanId": "p1an""#);
    let want = format!(
        r#"line {span_line}: span p1an of trace a1: gen_ai.usage.input_tokens is "abc", not an integer"#
    );
    assert!(line.ends_with(&want), "{line}");
}

#[test]
fn a_truncated_pretty_printed_file_is_placed_at_its_real_line_and_column() {
    let example = doc_file("agent-trace.json");
    let lines: Vec<&str> = example.lines().collect();
    let kept = 12;
    let text = lines[..kept].join("\n") + "\n";
    let line = refused("agent-trace.json", &text);
    let at = format!(
        "line {kept}, column {}: not JSON (EOF while parsing",
        lines[kept - 1].chars().count()
    );
    assert!(line.contains(&at), "{line}");
    // A break inside the file: the comma missing after the planner's name.
    let text = example.replacen(r#""name": "planner","#, r#""name": "planner""#, 1);
    let line = refused("agent-trace.json", &text);
    let next = line_of(&text, r#""name": "planner""#) + 1;
    assert!(line.contains(&format!("line {next}, column ")), "{line}");
}

#[test]
fn a_trace_without_a_genai_span_is_named_by_its_id() {
    let example = doc_file("agent-trace.json");
    let text = example.replace(
        r#"{"stringValue": "chat"}"#,
        r#"{"stringValue": "execute_tool"}"#,
    );
    let line = refused("agent-trace.json", &text);
    assert!(
        line.contains("trace a1: the trace has no GenAI span") && !line.contains("span -"),
        "{line}"
    );
}

/// Replays `text` (written as `name`) with `extra` flags into every report format.
fn replayed(name: &str, text: &str, extra: &[&str]) -> (crate::support::Finished, Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), name, text);
    let server = mock(MockConfig {
        ttft_ms: 5.0,
        ..MockConfig::instant()
    });
    let finished = Bench::on(&server)
        .profile("replay")
        .data(&path.display().to_string())
        .args_as_written(extra)
        .outputs("json,csv,md,html,console")
        .flag("--disable-progress")
        .run();
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let json: Value = serde_json::from_slice(
        &std::fs::read(finished.dir.path().join("benchmarks.json")).expect("the JSON report"),
    )
    .expect("json");
    (finished, json)
}

#[test]
fn the_report_names_traces_by_id_and_critical_paths_by_span_name() {
    // An OTLP trace id is 32 hex digits: the tables shorten it, the JSON keeps it.
    let long = "4bf92f3577b34da6a3ce929d0e0e4736";
    let text = doc_file("agent-trace.json").replace(r#""a1""#, &format!("\"{long}\""));
    let (finished, json) = replayed("agent-trace.json", &text, &[]);
    let row = &json["benchmarks"][0]["agent_traces"]["per_trace"][0];
    assert_eq!(row["id"], long, "{row}");
    let spans: Vec<&str> = row["critical_path"]["spans"]
        .as_array()
        .expect("the path by name")
        .iter()
        .map(|s| s.as_str().expect("a name"))
        .collect();
    // The planner, the sub-agent call that ended last (both are spans named `chat`, so
    // each is told by its id), the join.
    assert_eq!(spans.len(), 3, "{spans:?}");
    assert_eq!((spans[0], spans[2]), ("planner", "join"), "{spans:?}");
    assert!(
        ["chat (5ub1)", "chat (5ub2)"].contains(&spans[1]),
        "{spans:?}"
    );
    let path = spans.join(" → ");
    let shown = "4bf92f3577b3…4736";
    let text = |name: &str| std::fs::read_to_string(finished.dir.path().join(name)).expect(name);
    for (form, out) in [
        ("console", finished.stdout.clone()),
        ("markdown", text("benchmarks.md")),
        ("html", text("benchmarks.html")),
    ] {
        assert!(out.contains(shown), "{form}: no trace id\n{out}");
        assert!(
            out.contains(&path),
            "{form}: no critical path {path}\n{out}"
        );
        assert!(!out.contains("0 → "), "{form}: a path by index\n{out}");
    }

    // WEKA: the conversation's id, and each request by its place in it.
    let (finished, json) = replayed("weka.json", &doc_file("weka.json"), &[]);
    let row = &json["benchmarks"][0]["agent_traces"]["per_trace"][0];
    assert_eq!(row["id"], "8712b46f-04e", "{row}");
    let spans = row["critical_path"]["spans"].as_array().expect("names");
    assert_eq!(spans.last(), Some(&Value::from("req 3")), "{row}");
    assert!(
        finished.stdout.contains("8712b46f-04e"),
        "{}",
        finished.stdout
    );
    assert!(finished.stdout.contains("→ req 3"), "{}", finished.stdout);
}

#[test]
fn a_timed_run_at_a_rate_repeats_a_short_file_and_says_so() {
    // docs/workloads.md's second command, shortened: four traces a second from a file
    // of one trace.
    let example = doc_file("agent-trace.json");
    let (finished, json) = replayed(
        "agent-trace.json",
        &example,
        &["--rate", "4", "--time-scale", "0.5", "--max-seconds", "2"],
    );
    let note: Vec<&str> = finished
        .stderr
        .lines()
        .filter(|l| l.contains("holds 1 trace (4 calls): repeated"))
        .collect();
    assert_eq!(note.len(), 1, "{}", finished.stderr);
    let b = &json["benchmarks"][0];
    assert_eq!(
        b["stop_reason"]["kind"], "max_seconds",
        "{}",
        b["stop_reason"]
    );
    let rows = b["agent_traces"]["per_trace"].as_array().expect("traces");
    assert!(rows.len() >= 2, "one pass only: {rows:?}");
    for (k, row) in rows.iter().enumerate() {
        assert_eq!(row["id"], "a1");
        assert_eq!(row["pass"], k as u64 + 1, "{row}");
    }
    assert_eq!(json["args"]["data"]["resolved"]["oversample"], true);

    // At the recorded starts the file is sent once: a line says how many traces it
    // held, and that --rate repeats it.
    let (finished, json) = replayed("agent-trace.json", &example, &["--max-seconds", "30"]);
    assert!(
        finished
            .stderr
            .contains("holds 1 trace (4 calls), each sent once")
            && finished.stderr.contains("--rate R"),
        "{}",
        finished.stderr
    );
    assert_eq!(json["benchmarks"][0]["agent_traces"]["traces"], 1);
}
