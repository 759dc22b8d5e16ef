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

/// One trace in the one-trace-per-line form: a planner call and a joining call under an
/// agent span, with `trace_id` and the planner's `span_id` as given (raw JSON).
fn flat_trace(trace_id: &str, planner_id: &str) -> String {
    format!(
        r#"{{"trace_id": {trace_id}, "spans": [{{"span_id": "r00t", "name": "agent", "start_time": 0, "end_time": 900}}, {{"span_id": {planner_id}, "parent_span_id": "r00t", "name": "planner", "start_time": 0, "end_time": 100, "attributes": {{"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 20}}}}, {{"span_id": "j01n", "parent_span_id": "r00t", "name": "join", "start_time": 200, "end_time": 800, "attributes": {{"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 400, "gen_ai.usage.output_tokens": 50}}}}]}}"#
    ) + "\n"
}

#[test]
fn an_id_of_the_wrong_type_is_named_with_its_value_not_reported_missing() {
    // The flat form is read as written: a valid trace replays.
    let (_, json) = replayed("trace.jsonl", &flat_trace(r#""t1""#, r#""p1an""#), &[]);
    assert_eq!(json["benchmarks"][0]["agent_traces"]["traces"], 1);

    let line = refused("trace.jsonl", &flat_trace("12345", r#""p1an""#));
    assert!(
        line.ends_with("line 1: trace_id is 12345, not a string (write ids in quotes)"),
        "{line}"
    );
    let line = refused("trace.jsonl", &flat_trace(r#""t1""#, "7"));
    assert!(
        line.ends_with(
            r#"line 1: trace t1: the span named "planner": span_id is 7, not a string (write ids in quotes)"#
        ),
        "{line}"
    );

    // OTLP: a span without traceId is named by its id and line.
    let example = doc_file("agent-trace.json");
    let text = example.replacen(
        r#"{"traceId": "a1", "spanId": "p1an""#,
        r#"{"spanId": "p1an""#,
        1,
    );
    assert_ne!(text, example);
    let line = refused("agent-trace.json", &text);
    let span_line = line_of(&text, r#""spanId": "p1an""#);
    assert!(
        line.ends_with(&format!("line {span_line}: span p1an: no traceId")),
        "{line}"
    );
}

#[test]
fn an_attribute_of_the_wrong_type_or_range_names_itself_and_its_value() {
    let example = doc_file("agent-trace.json");
    let span_line = line_of(&example, r#""spanId": "p1an""#);
    // The planner's operation as a number: not silently "not a call".
    let planner_op = r#"[{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
           {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "100"}}"#;
    assert!(example.contains(planner_op));
    let text = example.replacen(
        planner_op,
        &planner_op.replacen(r#"{"stringValue": "chat"}"#, r#"{"intValue": "5"}"#, 1),
        1,
    );
    let line = refused("agent-trace.json", &text);
    assert!(
        line.ends_with(&format!(
            "line {span_line}: span p1an of trace a1: gen_ai.operation.name is 5, not a string"
        )),
        "{line}"
    );
    // An integer too large for a token count is out of range, not "not an integer".
    let text = example.replacen(
        r#"{"intValue": "100"}"#,
        r#"{"intValue": "99999999999999999999999"}"#,
        1,
    );
    let line = refused("agent-trace.json", &text);
    assert!(
        line.ends_with(&format!(
            r#"line {span_line}: span p1an of trace a1: gen_ai.usage.input_tokens is "99999999999999999999999", out of range (a token count is at most 4294967295)"#
        )),
        "{line}"
    );
}

#[test]
fn an_empty_id_is_refused_naming_the_span_and_its_line() {
    let example = doc_file("agent-trace.json");
    // Every span's traceId empty: refused at the first span, not a trace named "".
    let text = example.replace(r#""traceId": "a1""#, r#""traceId": """#);
    let line = refused("agent-trace.json", &text);
    let root_line = line_of(&text, r#""spanId": "r00t""#);
    assert!(
        line.ends_with(&format!(
            "line {root_line}: span r00t: traceId is empty: give every span and trace a non-empty id"
        )),
        "{line}"
    );
    // One sub-agent call's spanId empty: refused, not a call named "chat ()".
    let text = example.replacen(r#""spanId": "5ub1""#, r#""spanId": """#, 1);
    let line = refused("agent-trace.json", &text);
    let span_line = line_of(&text, r#""spanId": """#);
    assert!(
        line.ends_with(&format!(
            r#"line {span_line}: trace a1: the span named "chat": spanId is empty: give every span and trace a non-empty id"#
        )),
        "{line}"
    );
    // The flat form: an empty trace_id.
    let line = refused("trace.jsonl", &flat_trace(r#""""#, r#""p1an""#));
    assert!(
        line.ends_with("line 1: trace_id is empty: give every span and trace a non-empty id"),
        "{line}"
    );
}
