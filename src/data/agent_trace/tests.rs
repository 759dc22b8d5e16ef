//! The fixture of issue 24: a planner call, three sub-agents whose calls overlapped, a
//! tool span, and a joining call, in both forms.

use super::*;

const MS: u64 = 1_000_000;
const T0: u64 = 1_700_000_000_000_000_000;

/// (span, parent, name, start ms, end ms, GenAI input/output tokens when a call)
type Row = (
    &'static str,
    Option<&'static str>,
    &'static str,
    u64,
    u64,
    Option<(u32, u32)>,
);

const FIXTURE: [Row; 10] = [
    ("root", None, "agent", 0, 1000, None),
    ("plan", Some("root"), "planner", 0, 100, Some((100, 20))),
    ("s1", Some("root"), "sub-agent 1", 110, 500, None),
    ("c1", Some("s1"), "chat", 120, 400, Some((150, 30))),
    ("s2", Some("root"), "sub-agent 2", 112, 500, None),
    ("c2", Some("s2"), "chat", 130, 450, Some((160, 30))),
    ("s3", Some("root"), "sub-agent 3", 114, 500, None),
    ("c3", Some("s3"), "chat", 125, 420, Some((170, 30))),
    ("tool", Some("root"), "search", 510, 600, None),
    ("join", Some("root"), "join", 650, 800, Some((400, 50))),
];

fn otlp(rows: &[Row]) -> String {
    let spans: Vec<serde_json::Value> = rows
        .iter()
        .map(|(id, parent, name, start, end, genai)| {
            let mut attrs = Vec::new();
            if let Some((i, o)) = genai {
                attrs.push(serde_json::json!({"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}));
                attrs.push(serde_json::json!({"key": "gen_ai.request.model", "value": {"stringValue": "m"}}));
                attrs.push(serde_json::json!({"key": "gen_ai.usage.input_tokens", "value": {"intValue": i.to_string()}}));
                attrs.push(serde_json::json!({"key": "gen_ai.usage.output_tokens", "value": {"intValue": o}}));
            }
            serde_json::json!({
                "traceId": "t1", "spanId": id, "parentSpanId": parent.unwrap_or(""),
                "name": name,
                "startTimeUnixNano": (T0 + start * MS).to_string(),
                "endTimeUnixNano": (T0 + end * MS).to_string(),
                "attributes": attrs,
            })
        })
        .collect();
    serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).to_string()
}

fn flat(rows: &[Row]) -> String {
    let spans: Vec<serde_json::Value> = rows
        .iter()
        .map(|(id, parent, name, start, end, genai)| {
            let mut attrs = serde_json::Map::new();
            if let Some((i, o)) = genai {
                attrs.insert("gen_ai.operation.name".into(), "chat".into());
                attrs.insert("gen_ai.request.model".into(), "m".into());
                attrs.insert("gen_ai.usage.input_tokens".into(), (*i).into());
                attrs.insert("gen_ai.usage.output_tokens".into(), (*o).into());
            }
            serde_json::json!({
                "span_id": id, "parent_span_id": parent, "name": name,
                "start_time": T0 + start * MS, "end_time": T0 + end * MS,
                "attributes": attrs,
            })
        })
        .collect();
    serde_json::json!({"trace_id": "t1", "spans": spans}).to_string() + "\n"
}

fn graph(text: &str) -> Result<CallGraph, GraphError> {
    let format = detect(text).expect("recognised");
    let traces = read(text, format).expect("read");
    assert_eq!(traces.len(), 1);
    CallGraph::build(&traces[0])
}

#[test]
fn both_forms_are_recognised_and_give_the_same_graph() {
    assert_eq!(detect(&otlp(&FIXTURE)), Some(AgentTraceFormat::Otlp));
    assert_eq!(detect(&flat(&FIXTURE)), Some(AgentTraceFormat::Flat));
    assert_eq!(detect("{\"timestamp\": 1, \"input_length\": 2}"), None);
    let a = graph(&otlp(&FIXTURE)).expect("a graph");
    let b = graph(&flat(&FIXTURE)).expect("a graph");
    assert_eq!(a, b);
}

#[test]
fn the_fan_out_runs_concurrently_and_the_join_waits_for_all() {
    let g = graph(&flat(&FIXTURE)).expect("a graph");
    let spans: Vec<&str> = g.calls.iter().map(|c| c.span.as_str()).collect();
    assert_eq!(spans, ["plan", "c1", "c3", "c2", "join"]);
    let deps = |s: &str| -> Vec<&str> {
        let c = g.calls.iter().find(|c| c.span == s).expect("the call");
        c.deps.iter().map(|&d| g.calls[d].span.as_str()).collect()
    };
    assert!(deps("plan").is_empty());
    // The sub-agents overlapped: each waits for the planner only.
    for c in ["c1", "c2", "c3"] {
        assert_eq!(deps(c), ["plan"], "{c}");
    }
    assert_eq!(deps("join"), ["plan", "c1", "c3", "c2"]);
    let gap = |s: &str| {
        g.calls
            .iter()
            .find(|c| c.span == s)
            .expect("the call")
            .gap_ns
            / MS
    };
    // Their recorded gaps after the planner's end (100 ms).
    assert_eq!((gap("c1"), gap("c2"), gap("c3")), (20, 30, 25));
    // After the last sub-agent call's end (450 ms): the tool's time and the rest.
    assert_eq!(gap("join"), 200);
    assert_eq!(gap("plan"), 0);
    // Child prompts continue the planner's conversation; the join continues c2's.
    let cont = |s: &str| {
        let c = g.calls.iter().find(|c| c.span == s).expect("the call");
        c.continues.map(|d| g.calls[d].span.as_str())
    };
    assert_eq!(cont("c1"), Some("plan"));
    assert_eq!(cont("join"), Some("c2"));
    assert_eq!(g.start_ns, T0);
}

#[test]
fn steps_one_after_another_in_a_sub_agent_depend_on_each_other_only() {
    // Two sub-agents, each two calls; b1 happens to end before a2 starts, but the
    // sub-agents overlapped, so a2 does not wait for b1.
    let rows: [Row; 7] = [
        ("root", None, "agent", 0, 1000, None),
        ("a", Some("root"), "sub-agent a", 0, 900, None),
        ("a1", Some("a"), "chat", 0, 100, Some((10, 5))),
        ("a2", Some("a"), "chat", 300, 400, Some((20, 5))),
        ("b", Some("root"), "sub-agent b", 5, 900, None),
        ("b1", Some("b"), "chat", 10, 200, Some((10, 5))),
        ("b2", Some("b"), "chat", 500, 600, Some((20, 5))),
    ];
    let g = graph(&flat(&rows)).expect("a graph");
    let deps = |s: &str| -> Vec<&str> {
        let c = g.calls.iter().find(|c| c.span == s).expect("the call");
        c.deps.iter().map(|&d| g.calls[d].span.as_str()).collect()
    };
    assert_eq!(deps("a2"), ["a1"]);
    assert_eq!(deps("b2"), ["b1"]);
}

#[test]
fn malformed_traces_name_the_trace_and_the_span() {
    let mut missing = FIXTURE;
    missing[3].1 = Some("nowhere");
    let e = graph(&flat(&missing)).expect_err("a missing parent");
    assert_eq!((e.trace.as_str(), e.span.as_deref()), ("t1", Some("c1")));
    assert!(e.to_string().contains("span c1 of trace t1: "), "{e}");

    let mut cycle = FIXTURE;
    cycle[0].1 = Some("join"); // root's parent is one of its children
    let e = graph(&otlp(&cycle)).expect_err("a cycle");
    assert_eq!(e.trace, "t1");
    assert!(e.reason.contains("cycle"), "{e}");

    let no_calls: Vec<Row> = FIXTURE
        .iter()
        .map(|r| (r.0, r.1, r.2, r.3, r.4, None))
        .collect();
    let e = graph(&flat(&no_calls)).expect_err("no GenAI span");
    assert!(
        e.to_string()
            .starts_with("trace t1: the trace has no GenAI span"),
        "{e}"
    );
}

#[test]
fn a_token_count_of_the_wrong_type_names_the_attribute_and_its_value() {
    let text = otlp(&FIXTURE).replace(r#"{"intValue":"150"}"#, r#"{"intValue":"abc"}"#);
    let e = read(&text, AgentTraceFormat::Otlp).expect_err("not an integer");
    assert_eq!(
        e,
        r#"line 1: span c1 of trace t1: gen_ai.usage.input_tokens is "abc", not an integer"#
    );
    let text = flat(&FIXTURE).replace(
        r#""gen_ai.usage.output_tokens":50"#,
        r#""gen_ai.usage.output_tokens":-50"#,
    );
    let e = read(&text, AgentTraceFormat::Flat).expect_err("negative");
    assert_eq!(
        e,
        "line 1: span join of trace t1: gen_ai.usage.output_tokens is -50, not a token count"
    );
}

#[test]
fn a_pretty_printed_file_that_breaks_is_reported_where_it_breaks() {
    let pretty = serde_json::to_string_pretty(
        &serde_json::from_str::<serde_json::Value>(&otlp(&FIXTURE)).expect("json"),
    )
    .expect("pretty");
    let lines: Vec<&str> = pretty.lines().collect();
    let cut = lines[..40].join("\n") + "\n";
    let e = read(&cut, AgentTraceFormat::Otlp).expect_err("truncated");
    let at = format!("line 40, column {}: ", lines[39].chars().count());
    assert!(e.starts_with(&at), "{e}");
    assert!(e.contains("not JSON (EOF while parsing"), "{e}");
}

#[test]
fn a_call_that_did_not_complete_asks_what_it_asked_and_a_completed_one_what_it_got() {
    // (span, output received, error.type, status code)
    let span = |id: &str, got: u32, error: Option<&str>, status: Option<u8>| {
        let mut attrs = vec![
            serde_json::json!({"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}),
            serde_json::json!({"key": "gen_ai.usage.input_tokens", "value": {"intValue": "20"}}),
            serde_json::json!({"key": "gen_ai.request.max_tokens", "value": {"intValue": "64"}}),
            serde_json::json!({"key": "gen_ai.usage.output_tokens", "value": {"intValue": got.to_string()}}),
        ];
        if let Some(e) = error {
            attrs.push(serde_json::json!({"key": "error.type", "value": {"stringValue": e}}));
        }
        let mut s = serde_json::json!({
            "traceId": "t1", "spanId": id, "name": id,
            "startTimeUnixNano": T0.to_string(), "endTimeUnixNano": (T0 + MS).to_string(),
            "attributes": attrs,
        });
        if let Some(code) = status {
            s["status"] = serde_json::json!({"code": code});
        }
        s
    };
    let spans = [
        span("done", 30, None, None),
        span("cut", 7, Some("cancelled"), Some(2)),
        span("empty", 0, None, None),
        span("status_only", 5, None, Some(2)),
    ];
    let text =
        serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).to_string();
    let g = graph(&text).expect("a graph");
    let out: BTreeMap<&str, Option<u32>> = g
        .calls
        .iter()
        .map(|c| (c.span.as_str(), c.genai.output_tokens))
        .collect();
    assert_eq!(
        out,
        BTreeMap::from([
            ("cut", Some(64)),
            ("done", Some(30)),
            ("empty", Some(64)),
            ("status_only", Some(64)),
        ])
    );
}

/// A killed run's export lacks its roots (written when a benchmark ends): the one
/// missing parent of a rootless trace is made again, and the graph is the one the
/// whole file gives. Two missing parents, or one beside a root, stay an error.
#[test]
fn a_lost_root_is_made_again_and_nothing_else_is() {
    let whole = graph(&otlp(&FIXTURE)).expect("a graph");
    let rootless: Vec<Row> = FIXTURE.iter().filter(|r| r.0 != "root").copied().collect();
    let restored = graph(&otlp(&rootless)).expect("the root made again");
    assert_eq!(restored, whole);
    let mut two = rootless.clone();
    two[0].1 = Some("elsewhere");
    let e = graph(&otlp(&two)).expect_err("two missing parents");
    assert!(e.reason.contains("is not in the trace"), "{e}");
    let mut beside = FIXTURE;
    beside[1].1 = Some("nowhere");
    let e = graph(&otlp(&beside)).expect_err("a missing parent beside a root");
    assert_eq!(e.span.as_deref(), Some(beside[1].0), "{e}");
}
