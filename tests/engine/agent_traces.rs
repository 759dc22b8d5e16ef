//! Agent traces replayed as graphs (issue 24 §1), checked against what the mock saw: a
//! planner call, three sub-agents whose calls overlapped in the trace, a tool span, and
//! a joining call, in both the OTLP JSON export and the one-trace-per-line form.
//!
//! What is deterministic about the timing is asserted, as for sessions' think times:
//! each call's instant as the client computed it is exactly the end of its last
//! dependency (as the client saw it, in its request log) plus its scaled gap, and it is
//! never sent before it; at the mock, no call arrives before its dependencies' ends
//! there plus its gap (the client sees an end only after the mock sent it). Every prompt
//! is the mock's record of the body. How late calls go out depends on the machine (a
//! woken thread may wait for a core a few ms on a busy box): scripts/bench-timing.sh
//! prints that figure against the 2 ms on a quiet machine.

use crate::scenario::Bench;
use crate::support::{mock, recorded};
use llmsurge::mock::MockConfig;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A millisecond, in ns.
pub(crate) const MS: u64 = 1_000_000;
/// The traces' start, Unix ns.
pub(crate) const T0: u64 = 1_700_000_000_000_000_000;
/// `--time-scale`: every gap at half its recorded length.
const TIME_SCALE: f64 = 0.5;
/// Rounding of instants written as Unix seconds in an f64 (a quarter of a microsecond).
const ROUNDING_S: f64 = 1e-6;

/// (span, parent, start ms, end ms, GenAI input/output tokens when a call). The calls'
/// output lengths differ, so `max_tokens` names the call in the mock's record.
pub(crate) type Row = (
    &'static str,
    Option<&'static str>,
    u64,
    u64,
    Option<(u32, u32)>,
);

/// A planner, three sub-agents whose calls overlapped, a tool span and a join (shared
/// with the OTLP round trip's tests).
pub(crate) const FIXTURE: [Row; 10] = [
    ("root", None, 0, 1000, None),
    ("plan", Some("root"), 0, 100, Some((100, 20))),
    ("s1", Some("root"), 110, 500, None),
    ("c1", Some("s1"), 120, 400, Some((150, 31))),
    ("s2", Some("root"), 112, 500, None),
    ("c2", Some("s2"), 130, 450, Some((160, 32))),
    ("s3", Some("root"), 114, 500, None),
    ("c3", Some("s3"), 125, 420, Some((170, 33))),
    ("tool", Some("root"), 510, 600, None),
    ("join", Some("root"), 650, 800, Some((400, 50))),
];

/// Each call's dependencies and recorded gap (ms) after the last of them ends: the
/// children wait for the planner, the join for every child (200 ms after c2, the last).
const SCHEDULE: [(&str, &[&str], f64); 5] = [
    ("plan", &[], 0.0),
    ("c1", &["plan"], 20.0),
    ("c2", &["plan"], 30.0),
    ("c3", &["plan"], 25.0),
    ("join", &["c1", "c2", "c3"], 200.0),
];

fn attributes(genai: Option<(u32, u32)>) -> Vec<(&'static str, Value)> {
    match genai {
        Some((i, o)) => vec![
            ("gen_ai.operation.name", json!("chat")),
            ("gen_ai.request.model", json!("agent-model")),
            ("gen_ai.usage.input_tokens", json!(i)),
            ("gen_ai.usage.output_tokens", json!(o)),
        ],
        None => vec![("gen_ai.operation.name", json!("execute_tool"))],
    }
}

/// `rows` as one OTLP JSON export document (trace `t1`).
pub(crate) fn otlp(rows: &[Row]) -> String {
    let spans: Vec<Value> = rows
        .iter()
        .map(|(id, parent, start, end, genai)| {
            let attrs: Vec<Value> = attributes(*genai)
                .into_iter()
                .map(|(k, v)| match v {
                    Value::String(s) => json!({"key": k, "value": {"stringValue": s}}),
                    v => json!({"key": k, "value": {"intValue": v.to_string()}}),
                })
                .collect();
            json!({
                "traceId": "t1", "spanId": id, "parentSpanId": parent.unwrap_or(""),
                "name": id,
                "startTimeUnixNano": (T0 + start * MS).to_string(),
                "endTimeUnixNano": (T0 + end * MS).to_string(),
                "attributes": attrs,
            })
        })
        .collect();
    json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).to_string()
}

/// `rows` as one line of the flattened form (trace `t1`).
pub(crate) fn flat(rows: &[Row]) -> String {
    let spans: Vec<Value> = rows
        .iter()
        .map(|(id, parent, start, end, genai)| {
            let attrs: serde_json::Map<String, Value> = attributes(*genai)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            json!({
                "span_id": id, "parent_span_id": parent, "name": id,
                "start_time": T0 + start * MS, "end_time": T0 + end * MS,
                "attributes": attrs,
            })
        })
        .collect();
    json!({"trace_id": "t1", "spans": spans}).to_string() + "\n"
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the trace");
    path
}

/// One call as the mock saw it, and as the client's request log has it.
#[derive(Debug)]
struct Seen {
    arrival: f64,
    end: f64,
    prompt: String,
    /// The client's due instant, send and end.
    scheduled: f64,
    sent: f64,
    client_end: f64,
}

/// The calls in the order of their recorded start: their indices in the report.
const BY_START: [&str; 5] = ["plan", "c1", "c3", "c2", "join"];

/// Replays `trace` against a mock that records bodies and truth; each call by span, and
/// the run's output folder.
fn replay(trace: &Path) -> (HashMap<&'static str, Seen>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (record, truth) = (
        dir.path().join("record.jsonl"),
        dir.path().join("truth.jsonl"),
    );
    let server = mock(MockConfig {
        record: Some(record.clone()),
        record_header: vec!["x-request-id".into()],
        truth: Some(truth.clone()),
        ttft_ms: 20.0,
        itl_ms: 1.0,
        ..MockConfig::instant()
    });
    let finished = Bench::on(&server)
        .profile("replay")
        .data(&trace.display().to_string())
        .arg("--time-scale", TIME_SCALE)
        .outputs("json,csv,md,html,console")
        .request_log("requests.jsonl")
        .flag("--disable-progress")
        .run();
    // Stopping flushes the truth file, after every response ended.
    server.stop();
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    assert!(
        finished.stdout.contains("Agent traces") && finished.stdout.contains("plan → "),
        "{}",
        finished.stdout
    );
    let times: HashMap<String, (f64, f64)> = recorded(&truth)
        .into_iter()
        .map(|t| {
            let id = t["request_id"].as_str().expect("a request id").to_string();
            let at = |k: &str| t[k].as_f64().expect("a time");
            (id, (at("arrival_time"), at("end_time")))
        })
        .collect();
    let by_tokens: HashMap<u64, &'static str> = FIXTURE
        .iter()
        .filter_map(|r| r.4.map(|(_, o)| (u64::from(o), r.0)))
        .collect();
    let log: HashMap<String, Value> = recorded(&finished.dir.path().join("requests.jsonl"))
        .into_iter()
        .map(|e| (e["request_id"].as_str().expect("an id").to_string(), e))
        .collect();
    let lines = recorded(&record);
    assert_eq!(lines.len(), SCHEDULE.len(), "one request per GenAI span");
    let seen = lines
        .iter()
        .map(|l| {
            let body = &l["body"];
            let tokens = body["max_tokens"]
                .as_u64()
                .or_else(|| body["max_completion_tokens"].as_u64())
                .expect("the recorded output length");
            let span = by_tokens[&tokens];
            let id = l["headers"]["x-request-id"].as_str().expect("the id");
            let (arrival, end) = times[id];
            let entry = &log[id];
            let at = |k: &str| entry[k].as_f64().expect("an instant");
            // The log's turn is the call's index by recorded start.
            assert_eq!(
                entry["turn"],
                json!(BY_START.iter().position(|b| *b == span))
            );
            let prompt = body["messages"][0]["content"]
                .as_str()
                .expect("a prompt")
                .to_string();
            (
                span,
                Seen {
                    arrival,
                    end,
                    prompt,
                    scheduled: at("scheduled_time"),
                    sent: at("start_time"),
                    client_end: at("end_time"),
                },
            )
        })
        .collect();
    (seen, finished.dir)
}

/// The report's per-trace section against the mock's instants: the critical path runs
/// from the planner through the child that ended last (at the mock) to the join; its
/// tool time is their scaled gaps; its server time holds at least the mock's own time
/// on those calls; and every format has the section.
fn check_report(seen: &HashMap<&'static str, Seen>, out: &Path, form: &str) {
    let json: Value = serde_json::from_slice(
        &std::fs::read(out.join("benchmarks.json")).expect("the JSON report"),
    )
    .expect("json");
    let a = &json["benchmarks"][0]["agent_traces"];
    assert_eq!(
        (&a["traces"], &a["completed"]),
        (&json!(1), &json!(1)),
        "{a}"
    );
    let row = &a["per_trace"][0];
    let last_child = ["c1", "c2", "c3"]
        .into_iter()
        .max_by(|x, y| seen[x].end.total_cmp(&seen[y].end))
        .expect("a child");
    let index = |s: &str| BY_START.iter().position(|b| *b == s).expect("a call");
    let path = [0, index(last_child), index("join")];
    assert_eq!(row["critical_path"]["calls"], json!(path), "{form}: {row}");
    let gap = |s: &str| SCHEDULE.iter().find(|c| c.0 == s).expect("a call").2;
    let tool = (gap(last_child) + gap("join")) * TIME_SCALE;
    let got = row["critical_path"]["tool_ms"].as_f64().expect("tool ms");
    assert!(
        (got - tool).abs() < 1e-6,
        "{form}: tool {got} ms, recorded {tool} ms"
    );
    let at_mock: f64 = ["plan", last_child, "join"]
        .iter()
        .map(|c| (seen[c].end - seen[c].arrival) * 1e3)
        .sum();
    let server = row["critical_path"]["server_ms"]
        .as_f64()
        .expect("server ms");
    assert!(
        server >= at_mock,
        "{form}: server {server} ms < the mock's {at_mock} ms"
    );
    let whole = (seen["join"].end - seen["plan"].arrival) * 1e3;
    let duration = row["duration_ms"].as_f64().expect("duration");
    assert!(
        duration >= whole,
        "{form}: duration {duration} ms < the mock's {whole} ms"
    );
    let text = |name: &str| std::fs::read_to_string(out.join(name)).expect(name);
    assert!(text("benchmarks.csv").contains("agent_traces.critical_path_server_ms.p50"));
    assert!(text("benchmarks.md").contains("### Agent traces"));
    assert!(text("benchmarks.html").contains("id=\"agent-traces\""));
}

/// Checks the schedule against the client's log and the mock's instants, and the
/// prompts' prefixes.
fn check(seen: &HashMap<&'static str, Seen>, form: &str) {
    for (span, deps, gap_ms) in SCHEDULE {
        let call = &seen[span];
        assert!(call.sent >= call.scheduled, "{form}: {span} was sent early");
        let gap_s = gap_ms * TIME_SCALE / 1e3;
        let Some(ready) = deps.iter().map(|d| seen[d].client_end).reduce(f64::max) else {
            continue;
        };
        // Due exactly its gap after the last dependency the client saw end.
        let off_ms = (call.scheduled - (ready + gap_s)) * 1e3;
        assert!(
            off_ms.abs() < 0.01,
            "{form}: {span} was due {off_ms:.3} ms off its dependencies' end + {gap_ms} ms × {TIME_SCALE}"
        );
        // At the mock: never before its dependencies ended there, plus the gap.
        let at_mock = deps.iter().map(|d| seen[d].end).fold(f64::MIN, f64::max);
        assert!(
            call.arrival + ROUNDING_S >= at_mock + gap_s,
            "{form}: {span} reached the mock {:.3} ms before its dependencies' end there + its gap",
            (at_mock + gap_s - call.arrival) * 1e3
        );
    }
    // The sub-agents overlapped: each was due before any of them ended (the mock's
    // 20 ms TTFT alone outlasts the 5 ms between their gaps).
    let children = ["c1", "c2", "c3"];
    let first_end = children
        .iter()
        .map(|c| seen[c].client_end)
        .fold(f64::INFINITY, f64::min);
    for c in children {
        assert!(
            seen[c].scheduled < first_end,
            "{form}: {c} waited for a sibling"
        );
        // Each continues the planner's conversation: its exact prompt, then more.
        assert!(
            seen[c].prompt.starts_with(&seen["plan"].prompt)
                && seen[c].prompt.len() > seen["plan"].prompt.len(),
            "{form}: {c}'s prompt does not start with the planner's"
        );
    }
}

#[test]
fn a_fan_out_and_join_replay_on_the_traces_schedule_in_both_forms() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (form, path) in [
        ("otlp", write(dir.path(), "trace.json", &otlp(&FIXTURE))),
        ("flat", write(dir.path(), "trace.jsonl", &flat(&FIXTURE))),
    ] {
        let (seen, out) = replay(&path);
        check(&seen, form);
        check_report(&seen, out.path(), form);
    }
}

#[test]
fn malformed_agent_traces_are_one_line_naming_the_trace_and_the_span() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = mock(MockConfig::instant());
    let mut cycle = FIXTURE;
    cycle[0].1 = Some("join"); // the root's parent is one of its own children
    let mut missing = FIXTURE;
    missing[3].1 = Some("nowhere");
    let no_calls: Vec<Row> = FIXTURE.iter().map(|r| (r.0, r.1, r.2, r.3, None)).collect();
    for (name, text, names) in [
        ("cycle.json", otlp(&cycle), " of trace t1: "),
        ("missing.jsonl", flat(&missing), "span c1 of trace t1: "),
        ("none.jsonl", flat(&no_calls), "trace t1: "),
    ] {
        let path = write(dir.path(), name, &text);
        let finished = Bench::on(&server)
            .profile("replay")
            .data(&path.display().to_string())
            .run();
        assert_eq!(finished.code(), 2, "{name}: {}", finished.stderr);
        let lines: Vec<&str> = finished.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{name}: {}", finished.stderr);
        assert!(
            lines[0].contains(name) && lines[0].contains(names),
            "{name}: {}",
            lines[0]
        );
    }
    let reasons = [("cycle.json", "cycle"), ("none.jsonl", "no GenAI span")];
    for (name, reason) in reasons {
        let finished = Bench::on(&server)
            .profile("replay")
            .data(&dir.path().join(name).display().to_string())
            .run();
        assert!(finished.stderr.contains(reason), "{}", finished.stderr);
    }
    assert_eq!(server.stats().completed, 0, "nothing was sent");
}

/// Runs `trace` (written as `name`) with `extra` flags on a recording instant mock with
/// a 20 ms TTFT; the mock's record (bodies, in arrival order) and the request log by
/// (trace, call), with the bodies keyed the same way.
fn run_logged(name: &str, trace: &str, extra: &[&str]) -> HashMap<(u64, u64), (Value, Value)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), name, trace);
    let record = dir.path().join("record.jsonl");
    let server = mock(MockConfig {
        record: Some(record.clone()),
        record_header: vec!["x-request-id".into()],
        ttft_ms: 20.0,
        ..MockConfig::instant()
    });
    let finished = Bench::on(&server)
        .profile("replay")
        .data(&path.display().to_string())
        .args_as_written(extra)
        .request_log("requests.jsonl")
        .outputs("json")
        .run();
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let bodies: HashMap<String, Value> = recorded(&record)
        .into_iter()
        .map(|l| {
            let id = l["headers"]["x-request-id"]
                .as_str()
                .expect("an id")
                .to_string();
            (id, l["body"].clone())
        })
        .collect();
    recorded(&finished.dir.path().join("requests.jsonl"))
        .into_iter()
        .map(|e| {
            let key = (
                e["session"].as_u64().expect("a trace"),
                e["turn"].as_u64().expect("a call"),
            );
            let body = bodies[e["request_id"].as_str().expect("an id")].clone();
            (key, (e, body))
        })
        .collect()
}

fn prompt_of(body: &Value) -> &str {
    body["messages"][0]["content"].as_str().expect("a prompt")
}

#[test]
fn a_weka_conversation_chains_and_waits_for_its_sub_agent() {
    // Calls by recorded start: 0 (parent), 1 (sub-agent 1st), 2 (parent, during the
    // sub-agent), 3 (sub-agent 2nd), 4 (parent, after the sub-agent ended).
    let weka = json!({"id": "conv", "block_size": 64, "requests": [
        {"t": 0.0, "type": "s", "in": 128, "out": 10, "hash_ids": [1, 2], "api_time": 0.05},
        {"t": 0.06, "type": "subagent", "duration_ms": 100, "requests": [
            {"t": 0.0, "type": "s", "in": 64, "out": 5, "hash_ids": [9], "api_time": 0.03},
            {"t": 0.04, "type": "s", "in": 200, "out": 5, "hash_ids": [9, 10, 11], "api_time": 0.03}]},
        {"t": 0.07, "type": "s", "in": 192, "out": 7, "hash_ids": [1, 2, 3], "think_time": 0.01},
        {"t": 0.2, "type": "s", "in": 260, "out": 7, "hash_ids": [1, 2, 3, 4], "think_time": 0.02}
    ]})
    .to_string();
    let calls = run_logged("conv.json", &weka, &[]);
    assert_eq!(
        calls.len(),
        5,
        "one request per request of the conversation"
    );
    let at = |k: u64, f: &str| calls[&(0, k)].0[f].as_f64().expect("an instant");
    let prompt = |k: u64| prompt_of(&calls[&(0, k)].1).to_string();
    // Due exactly its gap after the last of its dependencies the client saw end.
    let due = |k: u64, deps: &[u64], gap_s: f64| {
        let ready = deps
            .iter()
            .map(|&d| at(d, "end_time"))
            .fold(f64::MIN, f64::max);
        let off_ms = (at(k, "scheduled_time") - (ready + gap_s)) * 1e3;
        assert!(off_ms.abs() < 0.01, "call {k}: due {off_ms:.3} ms off");
    };
    due(1, &[0], 0.01); // the sub-agent: 60 ms spawn − 50 ms recorded end
    due(3, &[1], 0.01);
    due(2, &[0], 0.01); // think_time, beside the sub-agent
    due(4, &[2, 3], 0.02); // after the sub-agent's answer too
    // The parent's chain continues its prompt; the sub-agent starts its own.
    assert!(prompt(2).starts_with(&prompt(0)) && prompt(4).starts_with(&prompt(2)));
    assert!(prompt(3).starts_with(&prompt(1)));
    assert!(!prompt(1).starts_with(&prompt(0)[..20]));
}

#[test]
fn with_a_rate_traces_start_that_many_a_second_and_recorded_messages_are_sent() {
    // Three traces of one call each, recorded a minute apart, with their messages.
    let trace = |k: u64| {
        let messages = json!([
            {"role": "system", "content": "you plan"},
            {"role": "user", "parts": [{"type": "text", "content": format!("task {k}")}]}
        ])
        .to_string();
        json!({"trace_id": format!("t{k}"), "spans": [{
            "span_id": "c", "name": "chat",
            "start_time": T0 + k * 60_000 * MS, "end_time": T0 + k * 60_000 * MS + MS,
            "attributes": {"gen_ai.operation.name": "chat", "gen_ai.usage.output_tokens": 4,
                           "gen_ai.input.messages": messages}}]})
        .to_string()
    };
    let text: String = (0..3).map(|k| trace(k) + "\n").collect();
    let calls = run_logged("three.jsonl", &text, &["--rate", "20", "--workers", "2"]);
    let due = |k: u64| calls[&(k, 0)].0["scheduled_time"].as_f64().expect("due");
    for k in 1..3 {
        let apart_ms = (due(k) - due(0)) * 1e3;
        assert!(
            (apart_ms - 50.0 * k as f64).abs() < 0.01,
            "trace {k} due {apart_ms} ms after trace 0"
        );
    }
    let body = &calls[&(2, 0)].1;
    assert_eq!(
        body["messages"],
        json!([{"role": "system", "content": "you plan"}, {"role": "user", "content": "task 2"}])
    );
    assert_eq!(body["max_tokens"], 4);
}
