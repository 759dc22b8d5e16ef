//! Traces that join the server's (issue 39): every request carries a W3C `traceparent`
//! whose ids the request log and `--outputs otlp` repeat, checked at the mock's truth
//! (which keeps each request's `traceparent`): one trace per session or agent trace,
//! one span per request, token counts as the mock sent them, no prompt text and no key
//! in the file; and a run's OTLP file replays (`--profile replay --data FILE`) into the
//! graph that ran, compared at the mock's record of both runs.

use super::agent_traces::{FIXTURE, MS, T0, otlp};
use crate::scenario::Bench;
use crate::support::{Finished, Joined, join_truth, mock, recorded};
use llmsurge::mock::{MockConfig, MockServer};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// A mock that writes its truth (with each request's `traceparent`) and records bodies
/// with their `x-request-id`, in `dir`, otherwise as `config`.
fn truth_mock(dir: &Path, config: MockConfig) -> MockServer {
    mock(MockConfig {
        truth: Some(dir.join("truth.jsonl")),
        record: Some(dir.join("record.jsonl")),
        record_header: vec!["x-request-id".into()],
        ..config
    })
}

/// A run against a [`truth_mock`], with its request log and `--outputs json,otlp`.
struct Ran {
    finished: Finished,
    /// The mock's truth and record.
    dir: tempfile::TempDir,
}

impl Ran {
    /// Runs `bench` (given the mock's benchmark and the folder of its files) against a
    /// [`truth_mock`] of `config` with `env`, the mock stopped when it ends.
    fn new(
        config: MockConfig,
        env: &[(&str, &str)],
        bench: impl FnOnce(Bench, &Path) -> Bench,
    ) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = truth_mock(dir.path(), config);
        let b = bench(Bench::on(&server), dir.path())
            .request_log("requests.jsonl")
            .outputs("json,otlp");
        let finished = b.run_with_env(env);
        server.stop();
        Ran { finished, dir }
    }

    /// The run exited 0.
    fn ok(self) -> Self {
        assert_eq!(self.finished.code(), 0, "{}", self.finished.stderr);
        self
    }

    /// The request log joined with the mock's truth.
    fn joined(&self) -> Vec<Joined> {
        join_truth(
            &self.finished.dir.path().join("requests.jsonl"),
            &self.dir.path().join("truth.jsonl"),
        )
    }

    /// The OTLP file.
    fn otlp(&self) -> PathBuf {
        self.finished.dir.path().join("spans.otlp.json")
    }

    /// The OTLP file's spans, by id.
    fn spans(&self) -> HashMap<String, Value> {
        spans(&self.otlp())
    }

    /// A file the mock wrote.
    fn mock_file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// `00-TRACE-SPAN-01` → (trace, span), checked to be W3C's form.
fn traceparent(value: &Value) -> (String, String) {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent: {value}"));
    let parts: Vec<&str> = text.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            && s.bytes().any(|b| b != b'0')
    };
    assert!(
        parts.len() == 4
            && parts[0] == "00"
            && hex(parts[1], 32)
            && hex(parts[2], 16)
            && parts[3] == "01",
        "not a W3C traceparent: {text}"
    );
    (parts[1].to_string(), parts[2].to_string())
}

/// The spans of an OTLP JSON file (one document per line), by span id.
fn spans(path: &Path) -> HashMap<String, Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let doc: Value = serde_json::from_str(line).expect("each line is a document");
        for rs in doc["resourceSpans"].as_array().expect("resourceSpans") {
            for ss in rs["scopeSpans"].as_array().expect("scopeSpans") {
                for span in ss["spans"].as_array().expect("spans") {
                    let id = span["spanId"].as_str().expect("a span id").to_string();
                    assert!(
                        out.insert(id.clone(), span.clone()).is_none(),
                        "span {id} twice"
                    );
                }
            }
        }
    }
    out
}

/// A span's attribute, as a string or an integer.
fn attr(span: &Value, key: &str) -> Option<Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| {
            let v = &a["value"];
            match v["intValue"].as_str() {
                Some(n) => json!(n.parse::<u64>().expect("an integer")),
                None => v["stringValue"].clone(),
            }
        })
}

/// Every request of a multi-turn run carries a traceparent whose ids are the request
/// log's and the OTLP file's; a session is one trace (its turns' spans children of its
/// root span), other sessions other traces; the file's token counts are the mock's.
#[test]
fn every_request_carries_the_trace_ids_of_its_session_and_the_otlp_file() {
    let ran = Ran::new(MockConfig::instant(), &[], |b, _| {
        b.concurrent(2)
            .seed(11)
            .data("turns=3,prompt_tokens=12,output_tokens=4")
            .max_requests(12)
    })
    .ok();
    assert!(
        ran.finished.stderr.contains("OTLP spans written to"),
        "{}",
        ran.finished.stderr
    );
    let joined = ran.joined();
    assert_eq!(joined.len(), 12);
    let spans = ran.spans();
    let mut trace_of_session: HashMap<u64, String> = HashMap::new();
    for j in &joined {
        let (trace, span) = traceparent(&j.truth["traceparent"]);
        assert_eq!(j.log["trace_id"], json!(trace), "{}", j.log);
        assert_eq!(j.log["span_id"], json!(span), "{}", j.log);
        let session = j.log["session"].as_u64().expect("a session");
        let known = trace_of_session.entry(session).or_insert(trace.clone());
        assert_eq!(*known, trace, "session {session} is one trace");
        // Its span in the file: the same ids, under the session's root span.
        let s = &spans[&span];
        assert_eq!(s["traceId"], json!(trace));
        let root = &spans[s["parentSpanId"].as_str().expect("a parent")];
        assert_eq!(root["traceId"], json!(trace));
        assert_eq!(attr(s, "gen_ai.operation.name"), Some(json!("chat")));
        assert_eq!(
            attr(s, "gen_ai.usage.input_tokens"),
            Some(j.truth["prompt_tokens"].clone())
        );
        let sent = j.truth["content_tokens"].as_u64().expect("count")
            + j.truth["reasoning_tokens"].as_u64().expect("count");
        assert_eq!(attr(s, "gen_ai.usage.output_tokens"), Some(json!(sent)));
        assert_eq!(attr(s, "gen_ai.request.max_tokens"), Some(json!(4)));
        let events = s["events"].as_array().expect("the first token's event");
        assert_eq!(events[0]["name"], "gen_ai.first_token");
    }
    // Other sessions, other traces; one span per request plus a root per session.
    let traces: HashSet<&String> = trace_of_session.values().collect();
    assert_eq!(traces.len(), trace_of_session.len());
    assert!(trace_of_session.len() >= 4, "{trace_of_session:?}");
    assert_eq!(spans.len(), joined.len() + trace_of_session.len());
}

/// Requests outside sessions: one trace each, on either transport (the worker's own
/// HTTP/1.1 client and HTTP/2). The OTLP file holds the ids, and neither the prompts'
/// text nor the API key (both carry a marker word).
#[test]
fn the_otlp_file_holds_ids_and_counts_never_prompts_or_keys() {
    for http2 in [false, true] {
        ids_and_counts_never_prompts_or_keys(http2);
    }
}

fn ids_and_counts_never_prompts_or_keys(http2: bool) {
    let ran = Ran::new(MockConfig::instant(), &[], |b, dir| {
        let data = dir.join("prompts.jsonl");
        let prompts: String = (0..4)
            .map(|i| format!("{{\"prompt\":\"question {i} about ZEBRAQUOKKA stripes\"}}\n"))
            .collect();
        std::fs::write(&data, prompts).expect("data");
        let b = b
            .synchronous()
            .data(&data.display().to_string())
            .arg("--api-key", "sk-KEYMARKERWALRUS")
            .max_requests(4);
        if http2 { b.flag("--http2") } else { b }
    })
    .ok();
    // The mock saw the marker: the test would catch it if the file had it.
    let record = std::fs::read_to_string(ran.mock_file("record.jsonl")).expect("record");
    assert!(record.contains("ZEBRAQUOKKA"));
    let file = std::fs::read_to_string(ran.otlp()).expect("the OTLP file");
    assert!(
        !file.contains("ZEBRAQUOKKA"),
        "prompt text in the OTLP file"
    );
    assert!(
        !file.contains("KEYMARKERWALRUS"),
        "the key in the OTLP file"
    );
    let spans = ran.spans();
    let joined = ran.joined();
    assert_eq!((joined.len(), spans.len()), (4, 4));
    let mut traces = HashSet::new();
    for j in &joined {
        let (trace, span) = traceparent(&j.truth["traceparent"]);
        let s = &spans[&span];
        assert_eq!(s["traceId"], json!(trace));
        assert!(s.get("parentSpanId").is_none(), "a request alone is a root");
        assert_eq!(
            attr(s, "gen_ai.usage.input_tokens"),
            Some(j.truth["prompt_tokens"].clone())
        );
        traces.insert(trace);
    }
    assert_eq!(traces.len(), 4, "one trace per request");
}

/// `--no-traceparent` (and its variable) sends none; the log still names the ids the
/// OTLP file uses.
#[test]
fn no_traceparent_sends_none() {
    for (flag, env) in [
        (true, None),
        (false, Some(("LLMSURGE_NO_TRACEPARENT", "true"))),
    ] {
        let env: Vec<_> = env.into_iter().collect();
        let ran = Ran::new(MockConfig::instant(), &env, |b, _| {
            let b = b
                .synchronous()
                .data("prompt_tokens=8,output_tokens=2")
                .max_requests(3);
            if flag { b.flag("--no-traceparent") } else { b }
        })
        .ok();
        let joined = ran.joined();
        assert_eq!(joined.len(), 3);
        for j in &joined {
            assert!(j.truth["traceparent"].is_null(), "{}", j.truth);
            assert!(j.log["trace_id"].is_string());
        }
    }
}

/// Each call's dependencies in the trace above (the join's include the planner, which
/// ended before it, as the sub-agents did).
const DEPS: [(&str, &[&str]); 5] = [
    ("plan", &[]),
    ("c1", &["plan"]),
    ("c2", &["plan"]),
    ("c3", &["plan"]),
    ("join", &["plan", "c1", "c2", "c3"]),
];

/// One call as the mock saw it: its output length asked, prompt length, arrival and
/// end (Unix seconds) and its traceparent.
#[derive(Debug)]
struct Call {
    arrival: f64,
    end: f64,
    prompt_tokens: u64,
    trace: String,
    span: String,
}

/// Replays the agent trace `trace` (`--profile replay`) with its gaps times
/// `time_scale`; it exits 0.
fn replayed(trace: &Path, time_scale: f64) -> Ran {
    Ran::new(MockConfig::instant(), &[], |b, _| {
        b.profile("replay")
            .data(&trace.display().to_string())
            .arg("--time-scale", time_scale)
            .flag("--disable-progress")
    })
    .ok()
}

/// Replays `trace` at a fifth of its recorded time, writing `--outputs otlp`: the calls
/// the mock saw, by their output length, and the run.
fn replay(trace: &Path) -> (HashMap<u64, Call>, Ran) {
    let ran = replayed(trace, 0.2);
    let truth: HashMap<String, Value> = recorded(&ran.mock_file("truth.jsonl"))
        .into_iter()
        .map(|t| (t["request_id"].as_str().expect("an id").to_string(), t))
        .collect();
    let calls = recorded(&ran.mock_file("record.jsonl"))
        .into_iter()
        .map(|l| {
            let asked = asked_of(&l["body"]);
            let id = l["headers"]["x-request-id"].as_str().expect("an id");
            let t = &truth[id];
            let (trace, span) = traceparent(&t["traceparent"]);
            let at = |k: &str| t[k].as_f64().expect("an instant");
            let call = Call {
                arrival: at("arrival_time"),
                end: at("end_time"),
                prompt_tokens: t["prompt_tokens"].as_u64().expect("prompt tokens"),
                trace,
                span,
            };
            (asked, call)
        })
        .collect();
    (calls, ran)
}

/// The output length a recorded body asked (`max_tokens`).
fn asked_of(body: &Value) -> u64 {
    body["max_tokens"]
        .as_u64()
        .or_else(|| body["max_completion_tokens"].as_u64())
        .unwrap_or_else(|| panic!("no output length asked: {body}"))
}

/// Each call's dependencies by output length, as the OTLP file links them, and the
/// check that every call's span is a child of the trace's root.
fn linked_deps(path: &Path) -> HashMap<u64, Vec<u64>> {
    let spans = spans(path);
    let asked = |s: &Value| match attr(s, "gen_ai.usage.output_tokens") {
        Some(Value::Number(n)) => n.as_u64(),
        _ => None,
    };
    let mut out = HashMap::new();
    for s in spans.values() {
        if attr(s, "gen_ai.operation.name") != Some(json!("chat")) {
            continue;
        }
        let root = &spans[s["parentSpanId"].as_str().expect("a parent")];
        assert_eq!(root["traceId"], s["traceId"]);
        assert_eq!(
            attr(root, "gen_ai.operation.name"),
            Some(json!("invoke_agent"))
        );
        let mut deps: Vec<u64> = s["links"]
            .as_array()
            .expect("links")
            .iter()
            .filter_map(|l| asked(&spans[l["spanId"].as_str().expect("a span")]))
            .collect();
        deps.sort_unstable();
        out.insert(asked(s).expect("a call's output tokens"), deps);
    }
    out
}

/// A run's OTLP file replays into the graph that ran: the same calls (output lengths
/// asked and prompt lengths, at the mock), the same dependencies (each call reached the
/// mock only after its dependencies ended there), one trace whose ids the file names.
#[test]
fn a_runs_otlp_file_replays_into_the_same_graph() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace.json");
    std::fs::write(&trace, otlp(&FIXTURE)).expect("write the trace");
    let (first, first_run) = replay(&trace);
    let (second, second_run) = replay(&first_run.otlp());
    let (first_otlp, second_otlp) = (first_run.otlp(), second_run.otlp());
    let tokens_of = |span: &str| -> u64 {
        let (_, _, _, _, genai) = FIXTURE.iter().find(|r| r.0 == span).expect("a call");
        u64::from(genai.expect("a call").1)
    };
    let want: HashMap<u64, Vec<u64>> = DEPS
        .iter()
        .map(|(c, deps)| {
            let mut d: Vec<u64> = deps.iter().map(|d| tokens_of(d)).collect();
            d.sort_unstable();
            (tokens_of(c), d)
        })
        .collect();
    for (run, calls, otlp) in [(1, &first, &first_otlp), (2, &second, &second_otlp)] {
        assert_eq!(calls.len(), DEPS.len(), "run {run}: one request per call");
        // One trace per agent trace, a span per call, as the file has them.
        let traces: HashSet<&String> = calls.values().map(|c| &c.trace).collect();
        assert_eq!(traces.len(), 1, "run {run}: {traces:?}");
        let spans = spans(otlp);
        for c in calls.values() {
            assert_eq!(spans[&c.span]["traceId"], json!(c.trace));
        }
        assert_eq!(linked_deps(otlp), want, "run {run}: the file's links");
        // At the mock: no call before its dependencies ended there.
        for (call, deps) in &want {
            for d in deps {
                assert!(
                    calls[call].arrival >= calls[d].end - 1e-6,
                    "run {run}: call {call} reached the mock before its dependency {d} ended"
                );
            }
        }
    }
    // The same calls: the output lengths asked, and the prompts' lengths as the first
    // run's mock counted them (what its file recorded). Give or take a few tokens: a
    // synthetic prompt is exact under the client's tokenizer, the mock counts its own
    // way, and a call's text is drawn by its index among calls sent at once (the file
    // orders the sub-agents by their send in the first run).
    let asked = |calls: &HashMap<u64, Call>| {
        let mut k: Vec<u64> = calls.keys().copied().collect();
        k.sort_unstable();
        k
    };
    assert_eq!(asked(&first), asked(&second));
    for (asked, call) in &first {
        let (a, b) = (second[asked].prompt_tokens, call.prompt_tokens);
        assert!(
            a.abs_diff(b) <= 2 + b / 20,
            "call {asked}: prompt of {a} tokens, first {b}"
        );
    }
}

/// A saved report has no requests: `from-file` and `merge` refuse `--outputs otlp` with
/// one line saying where it is written.
#[test]
fn only_a_run_writes_the_otlp_file() {
    for args in [
        &[
            "benchmark",
            "from-file",
            "benchmarks.json",
            "--outputs",
            "otlp",
        ][..],
        &[
            "benchmark",
            "merge",
            "a.json",
            "b.json",
            "--outputs",
            "json,otlp",
        ],
    ] {
        let out = crate::support::llmsurge()
            .args(args)
            .output()
            .expect("llmsurge runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--outputs otlp") && stderr.contains("benchmark run"),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}

/// An OTLP trace of calls `(span, links)` under one root, 100 ms apart, each asking 5
/// tokens of a 50-token prompt.
fn linked_trace(calls: &[(&str, &[&str])]) -> String {
    let mut spans: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(k, (id, links))| {
            let start = T0 + k as u64 * 100 * MS;
            json!({
                "traceId": "t1", "spanId": id, "parentSpanId": "root", "name": id,
                "startTimeUnixNano": start.to_string(),
                "endTimeUnixNano": (start + 50 * MS).to_string(),
                "links": links.iter().map(|l| json!({"traceId": "t1", "spanId": l})).collect::<Vec<_>>(),
                "attributes": [
                    {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                    {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "50"}},
                    {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "5"}},
                ],
            })
        })
        .collect();
    spans.push(json!({
        "traceId": "t1", "spanId": "root", "name": "invoke_agent",
        "startTimeUnixNano": T0.to_string(),
        "endTimeUnixNano": (T0 + 10_000 * MS).to_string(), "attributes": [],
    }));
    json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).to_string()
}

/// Links that loop (a call linking to itself, or through others back to itself) would
/// make the replay send a call twice and never another: the file is refused before
/// anything is sent, with one line naming the span.
/// A trace's calls and their links, what the refusal says, and the span it names.
type LoopCase<'a> = (&'a [(&'a str, &'a [&'a str])], &'a str, &'a str);

#[test]
fn links_that_loop_are_refused_naming_the_span() {
    let cases: [LoopCase; 2] = [
        (
            &[("a", &["c"]), ("b", &["a"]), ("c", &["b"]), ("d", &["c"])],
            "links form a cycle",
            "span a ",
        ),
        (
            &[("a", &["root"]), ("b", &["b"])],
            "links to itself",
            "span b ",
        ),
    ];
    for (calls, why, span) in cases {
        let (stderr, _, _) = refused_replay(&linked_trace(calls));
        assert!(
            stderr.contains(why) && stderr.contains(span) && stderr.contains("of trace t1"),
            "{stderr}"
        );
    }
}

/// Replays the trace `text` (a file of its own): the run is refused with one `error:`
/// line (exit 2) before anything is sent. That line, and the file.
fn refused_replay(text: &str) -> (String, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = truth_mock(dir.path(), MockConfig::instant());
    let file = dir.path().join("trace.otlp.json");
    std::fs::write(&file, text).expect("write the trace");
    let finished = Bench::on(&server)
        .profile("replay")
        .data(&file.display().to_string())
        // A replay that went ahead ends soon all the same.
        .max_seconds(5)
        .flag("--disable-progress")
        .run();
    let stats = server.stats();
    server.stop();
    let stderr = finished.stderr.trim().to_string();
    assert_eq!(finished.code(), 2, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error:"), "{stderr}");
    assert_eq!(stats.requests_total, 0, "nothing is sent: {stderr}");
    (stderr, dir, file)
}

/// The output lengths the mock saw asked (`max_tokens`), in the order it recorded them.
fn asked_at_mock(record: &Path) -> Vec<u64> {
    recorded(record)
        .iter()
        .map(|l| asked_of(&l["body"]))
        .collect()
}

/// A call that failed received no output (0 tokens, or a part): its replay asks the
/// output length the original asked (`gen_ai.request.max_tokens`), not 0, which a
/// server refuses, making the replay a run of errors. Checked at both mocks' records.
#[test]
fn a_failed_calls_replay_asks_the_output_length_it_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let faulty = mock(MockConfig {
        error_rate: 1.0,
        record: Some(dir.path().join("first.jsonl")),
        ..MockConfig::instant()
    });
    let first = Bench::on(&faulty)
        .data("prompt_tokens=12,output_tokens=4")
        .max_requests(3)
        .outputs("json,otlp")
        .flag("--disable-progress")
        .run();
    faulty.stop();
    let otlp = first.dir.path().join("spans.otlp.json");
    let spans = spans(&otlp);
    assert_eq!(spans.len(), 3, "{}", first.stderr);
    for s in spans.values() {
        assert_eq!(attr(s, "gen_ai.usage.output_tokens"), Some(json!(0)), "{s}");
        assert!(attr(s, "error.type").is_some(), "{s}");
    }
    let asked_first = asked_at_mock(&dir.path().join("first.jsonl"));
    assert_eq!(asked_first, [4, 4, 4]);

    let server = truth_mock(dir.path(), MockConfig::instant());
    let replayed = Bench::on(&server)
        .profile("replay")
        .data(&otlp.display().to_string())
        .flag("--disable-progress")
        .run();
    let stats = server.stats();
    server.stop();
    assert_eq!(replayed.code(), 0, "{}", replayed.stderr);
    assert_eq!(
        (stats.responses_4xx, stats.completed),
        (0, 3),
        "{}",
        replayed.stderr
    );
    assert_eq!(asked_at_mock(&dir.path().join("record.jsonl")), asked_first);
}

/// A run writes its spans to one file: a second OTLP output (which was left unwritten)
/// is refused with one line naming both, before any request.
#[test]
fn a_second_otlp_output_is_refused() {
    let server = mock(MockConfig::instant());
    let finished = Bench::on(&server)
        .max_requests(2)
        .outputs("json,a.otlp.json,b.otlp.json")
        .run();
    let stats = server.stats();
    server.stop();
    let stderr = finished.stderr.trim();
    assert_eq!(finished.code(), 2, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error:")
            && stderr.contains("--outputs")
            && stderr.contains("a.otlp.json")
            && stderr.contains("b.otlp.json"),
        "{stderr}"
    );
    assert_eq!(stats.requests_total, 0);
    assert!(!finished.dir.path().join("a.otlp.json").exists());
}

/// With `--repeat`, each span says its run (`llmsurge.run`), as the request log's
/// `run` for the same request, so the runs' spans can be told apart.
#[test]
fn each_span_names_its_run_with_repeat() {
    let ran = Ran::new(MockConfig::instant(), &[], |b, _| {
        b.data("prompt_tokens=12,output_tokens=4")
            .max_requests(3)
            .repeat(2)
            .flag("--disable-progress")
    })
    .ok();
    let joined = ran.joined();
    assert_eq!(joined.len(), 6, "the mock saw both runs");
    let spans = ran.spans();
    assert_eq!(spans.len(), 6);
    let mut per_run: HashMap<u64, usize> = HashMap::new();
    for j in &joined {
        let (_, span) = traceparent(&j.truth["traceparent"]);
        let run = j.log["run"].as_u64().expect("a run");
        assert_eq!(
            attr(&spans[&span], "llmsurge.run"),
            Some(json!(run)),
            "{}",
            j.log
        );
        *per_run.entry(run).or_default() += 1;
    }
    assert_eq!(per_run, HashMap::from([(0, 3), (1, 3)]));
}

/// Each session's calls in the order they were sent: (prompt tokens at the mock, status
/// in the log), sessions by their first send, or by their index with `by_index` (a
/// replay's: its traces by their recorded start).
fn sessions_at_mock(joined: &[Joined], by_index: bool) -> Vec<Vec<(u64, String)>> {
    let mut by_session: BTreeMap<u64, Vec<(f64, u64, String)>> = BTreeMap::new();
    for j in joined {
        let session = j.log["session"].as_u64().expect("a session");
        by_session.entry(session).or_default().push((
            j.log["start_time"].as_f64().expect("sent"),
            j.truth["prompt_tokens"].as_u64().expect("prompt tokens"),
            j.log["status"].as_str().expect("a status").to_string(),
        ));
    }
    let mut sessions: Vec<Vec<(f64, u64, String)>> = by_session.into_values().collect();
    for s in &mut sessions {
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    if !by_index {
        sessions.sort_by(|a, b| a[0].0.total_cmp(&b[0].0));
    }
    sessions
        .into_iter()
        .map(|s| s.into_iter().map(|(_, p, st)| (p, st)).collect())
        .collect()
}

/// Replays the OTLP file `file` against a clean mock: every call completes there, and
/// each trace's calls are those of `sessions` (as [`sessions_at_mock`] gives them), with
/// their prompt lengths give or take a few tokens (a synthetic prompt is exact under the
/// client's tokenizer; the mock counts its own way).
fn replays_into(file: &Path, sessions: &[Vec<(u64, String)>]) {
    let again = sessions_at_mock(&replayed(file, 0.1).joined(), true);
    let calls = |s: &[Vec<(u64, String)>]| s.iter().map(Vec::len).collect::<Vec<_>>();
    assert_eq!(calls(&again), calls(sessions), "calls per trace");
    for (k, (a, b)) in again.iter().zip(sessions).enumerate() {
        for (turn, ((got, status), (want, _))) in a.iter().zip(b).enumerate() {
            assert_eq!(status, "completed", "trace {k} call {turn}");
            assert!(
                got.abs_diff(*want) <= 2 + want / 20,
                "trace {k} call {turn}: a prompt of {got} tokens, recorded {want}"
            );
        }
    }
}

/// A later turn that fails has no usage from the server, yet its span and log line say
/// the prompt it sent (its history and new message), as the mock counted it; so a file
/// with such spans replays, into the same sessions.
#[test]
fn an_errored_later_turn_says_its_prompt_and_the_file_replays() {
    let ran = Ran::new(
        // A drop breaks the answer after some of its tokens, before the usage: the
        // mock counted the prompt (an HTTP error fault answers before reading it).
        MockConfig {
            drop_rate: 0.3,
            ..MockConfig::instant()
        },
        &[],
        |b, _| {
            b.synchronous()
                .seed(3)
                .data("turns=3,prompt_tokens=12,output_tokens=4")
                .max_requests(24)
                .flag("--disable-progress")
        },
    );
    let joined = ran.joined();
    let spans = ran.spans();
    let errored_later = joined
        .iter()
        .filter(|j| j.log["status"] == "errored" && j.log["turn"].as_u64() > Some(0))
        .count();
    assert!(
        errored_later > 0,
        "no later turn failed: {}",
        ran.finished.stderr
    );
    for j in &joined {
        let asked = &j.truth["prompt_tokens"];
        assert!(asked.as_u64().is_some(), "{}", j.truth);
        assert_eq!(j.log["prompt_tokens"], *asked, "{}", j.log);
        let (_, span) = traceparent(&j.truth["traceparent"]);
        assert_eq!(
            attr(&spans[&span], "gen_ai.usage.input_tokens").as_ref(),
            Some(asked),
            "{}",
            j.log
        );
    }
    replays_into(&ran.otlp(), &sessions_at_mock(&joined, false));
}

/// The spans of the complete lines of `path` (a run may be writing it).
fn spans_so_far(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|doc| {
            doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .sum()
}

/// Starts `bench` (given the mock's benchmark) against a [`truth_mock`] of `config` in
/// `dir`, with its request log and `--outputs json,otlp`, in a process group of its own:
/// the mock, the run and its output folder.
fn start_logged(
    dir: &Path,
    config: MockConfig,
    bench: impl FnOnce(Bench) -> Bench,
) -> (MockServer, std::process::Child, tempfile::TempDir) {
    use std::os::unix::process::CommandExt;
    let server = truth_mock(dir, config);
    let (child, out) = bench(Bench::on(&server))
        .request_log("requests.jsonl")
        .outputs("json,otlp")
        .flag("--disable-progress")
        .start(|cmd| {
            cmd.process_group(0);
        });
    (server, child, out)
}

/// What an OTLP file says of each session: its calls' input tokens, in order of start,
/// sessions by their first call's start (as [`sessions_at_mock`] gives them).
fn sessions_in_file(spans: &HashMap<String, Value>) -> Vec<Vec<(u64, String)>> {
    let mut by_trace: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    for s in spans.values() {
        if attr(s, "gen_ai.operation.name") != Some(json!("chat")) {
            continue;
        }
        let start: u64 = s["startTimeUnixNano"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .expect("a start");
        let Some(Value::Number(n)) = attr(s, "gen_ai.usage.input_tokens") else {
            panic!("a span without its input tokens: {s}");
        };
        let n = n.as_u64().expect("a count");
        by_trace
            .entry(s["traceId"].as_str().expect("a trace").to_string())
            .or_default()
            .push((start, n));
    }
    let mut sessions: Vec<Vec<(u64, u64)>> = by_trace.into_values().collect();
    for s in &mut sessions {
        s.sort_unstable();
    }
    sessions.sort_by_key(|s| s[0].0);
    sessions
        .into_iter()
        .map(|s| s.into_iter().map(|(_, n)| (n, String::new())).collect())
        .collect()
}

/// A coordinator killed mid-run (SIGKILL: nothing more is written) leaves an OTLP file
/// that replays what completed: spans reach the file within a second of their request's
/// end, and the replay makes again the roots the run never wrote.
#[test]
fn a_killed_runs_otlp_file_replays_what_completed() {
    use nix::sys::signal::{Signal, kill};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = MockConfig {
        ttft_ms: 20.0,
        itl_ms: 5.0,
        ..MockConfig::instant()
    };
    let (server, mut child, out) = start_logged(dir.path(), config, |b| {
        b.concurrent(3)
            .data("turns=4,prompt_tokens=12,output_tokens=6")
            .max_seconds(120)
    });
    let file = out.path().join("spans.otlp.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while spans_so_far(&file) < 8 {
        assert!(
            std::time::Instant::now() < deadline,
            "no spans in {} within 30 s",
            file.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pgid = child.id();
    kill(super::signals::pid(pgid), Signal::SIGKILL).expect("SIGKILL the coordinator");
    let _ = child.wait();
    super::signals::assert_group_gone_within(pgid, std::time::Duration::from_secs(30));
    server.stop();
    let spans = spans(&file);
    assert!(spans.len() >= 8, "{}", spans.len());
    replays_into(&file, &sessions_in_file(&spans));
}

/// A worker killed mid-run (kill -9): the requests it had in flight are in the request
/// log and the OTLP file with the trace ids, session and prompt they were sent with (as
/// the mock's truth has them); the ones it sent or held but never reported (their slots
/// unknown) cannot be, and the report says how many, with the log, the file and the
/// counts agreeing on the rest.
#[test]
fn a_killed_workers_requests_are_logged_with_their_trace_or_said_missing() {
    use crate::support::{ended_with, wait_completed, wait_for_children, wait_in_flight, wait_run};
    use nix::sys::signal::{Signal, kill};
    let dir = tempfile::tempdir().expect("tempdir");
    // Requests of ~300 ms: each worker holds two when one is killed.
    let config = MockConfig {
        ttft_ms: 100.0,
        itl_ms: 10.0,
        output_tokens: 20,
        ..MockConfig::instant()
    };
    // A dead worker's request has no usage: its log line says the prompt length the
    // client planned, which matches the mock's count only under the mock's tokenizer.
    let tokenizer = crate::support::mock_counting_tokenizer(dir.path());
    let (server, child, out) = start_logged(dir.path(), config, |b| {
        b.concurrent(4)
            .workers(2)
            .data("turns=3,prompt_tokens=16,output_tokens=20")
            .arg("--processor", tokenizer.display())
            .max_seconds(30)
    });
    let workers = wait_for_children(child.id(), 2);
    wait_completed(&server, 4);
    wait_in_flight(&server, 4);
    kill(super::signals::pid(workers[0]), Signal::SIGKILL).expect("kill the worker");
    let run = wait_run(child, out);
    server.stop();
    let report = ended_with(&run, llmsurge::exit_codes::RUN_FAILED);
    let b = &report.benchmarks[0];
    let a = &b.audit;
    let log = recorded(&run.dir.path().join("requests.jsonl"));
    let spans = spans(&run.dir.path().join("spans.otlp.json"));
    let calls = spans
        .values()
        .filter(|s| attr(s, "gen_ai.operation.name") == Some(json!("chat")))
        .count();
    // The counts, the log and the file agree, but for what the report says they lack.
    assert_eq!(calls, log.len(), "a span per logged request");
    assert_eq!(
        log.len() as u64 + a.unreported + a.unsent_lost,
        b.requests.created,
        "{a:?}"
    );
    let missing = a.unreported + a.unsent_lost;
    let said = b
        .client
        .warnings
        .iter()
        .find(|w| w.contains("not in the request log nor in the OTLP file"));
    match said {
        Some(w) => assert!(w.starts_with(&format!("{missing} request")), "{w}"),
        None => assert_eq!(missing, 0, "{:?}", b.client.warnings),
    }
    if missing > 0 {
        assert!(
            run.stderr.contains("nor in the OTLP file"),
            "{}",
            run.stderr
        );
    }
    // Each logged request, the dead worker's included, with the ids it was sent with.
    let truth: HashMap<String, Value> = recorded(&dir.path().join("truth.jsonl"))
        .into_iter()
        .map(|t| (t["request_id"].as_str().expect("an id").to_string(), t))
        .collect();
    let mut died = 0;
    for l in &log {
        let t = &truth[l["request_id"].as_str().expect("an id")];
        let (trace, span) = traceparent(&t["traceparent"]);
        assert_eq!(
            (&l["trace_id"], &l["span_id"]),
            (&json!(trace), &json!(span)),
            "{l}"
        );
        assert_eq!(spans[&span]["traceId"], json!(trace));
        if l["error_kind"] == "worker_died" {
            died += 1;
            assert!(l["session"].is_u64() && l["turn"].is_u64(), "{l}");
            assert_eq!(l["prompt_tokens"], t["prompt_tokens"], "{l}");
            assert_eq!(
                attr(&spans[&span], "gen_ai.usage.input_tokens").as_ref(),
                Some(&t["prompt_tokens"])
            );
        }
    }
    // The dead worker held some: logged, or said missing.
    assert!(died + a.unreported >= 1, "{a:?}: {died} logged");
    // And the file replays, the dead worker's requests included.
    replays_into(
        &run.dir.path().join("spans.otlp.json"),
        &sessions_in_file(&spans),
    );
}

/// A recorded token count or gap a replay cannot honour (a prompt of 20 million
/// tokens, a call 100 days after its dependencies) is refused at load, in one line
/// naming the file, the span and the field, before anything is sent.
#[test]
fn a_huge_count_or_gap_is_refused_at_load_naming_the_span_and_field() {
    const DAY_MS: u64 = 86_400_000;
    let mut huge_prompt = FIXTURE;
    huge_prompt[1].4 = Some((20_000_000, 20));
    let mut huge_gap = FIXTURE;
    huge_gap[9].2 = 100 * DAY_MS;
    huge_gap[9].3 = 100 * DAY_MS + 150;
    for (rows, span, field) in [
        (
            huge_prompt,
            "span plan of trace t1",
            "gen_ai.usage.input_tokens",
        ),
        (huge_gap, "span join of trace t1", "startTimeUnixNano"),
    ] {
        let (stderr, _dir, file) = refused_replay(&otlp(&rows));
        assert!(
            stderr.contains(&file.display().to_string())
                && stderr.contains(span)
                && stderr.contains(field),
            "{stderr}"
        );
    }
}
