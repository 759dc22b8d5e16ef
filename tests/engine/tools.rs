//! Tool calls end to end (the data's `tools=N`, the mock's `--tool-call-rate`): function
//! definitions in every request of chat, Responses and Anthropic Messages, the answer a
//! streamed or whole tool call, its tokens counted as output and the time to its first
//! token reported as `ttft_tool`, all held to what the mock recorded and counted.

use crate::scenario::Bench;
use crate::support::{assert_identity, mock, recorded};
use llmsurge::mock::MockConfig;

const FORMATS: [&str; 3] = ["chat", "responses", "anthropic"];

#[test]
fn tool_calls_run_end_to_end_in_three_formats_streamed_and_whole() {
    for format in FORMATS {
        for stream in [true, false] {
            let what = format!("{format} stream={stream}");
            let dir = tempfile::tempdir().expect("tempdir");
            let record = dir.path().join("sent.jsonl");
            let server = mock(MockConfig {
                tool_call_rate: 1.0,
                record: Some(record.clone()),
                ..MockConfig::instant()
            });
            let report = Bench::on(&server)
                .format(format)
                .stream(stream)
                .concurrent(3)
                .max_requests(9)
                .data("prompt_tokens=16,output_tokens=6,tools=3")
                .ok_report();
            assert_identity(&report);
            let stats = server.stats();
            drop(server);
            let b = &report.benchmarks[0];
            assert_eq!(b.requests.completed, 9, "{what}: {:?}", b.errors);
            assert_eq!(stats.tool_calls, 9, "{what}: the mock answered with calls");
            // Every answer was a tool call: each has its time to the first call token,
            // which is also its TTFT (the call is the answer).
            let tool = &b.metrics["ttft_tool"].successful;
            assert_eq!(tool.count, 9, "{what}");
            let ttft = &b.metrics["ttft"].successful;
            assert_eq!(ttft.count, 9, "{what}");
            assert!(
                (tool.mean - ttft.mean).abs() < 1e-6,
                "{what}: {tool:?} {ttft:?}"
            );
            // The call's arguments are output tokens: the usage's, summed, is what the
            // mock sent.
            let out = &b.metrics["output_tokens"].successful;
            assert_eq!((out.mean * 9.0).round() as u64, stats.tokens_sent, "{what}");
            if stream {
                // One token a chunk: every argument piece was seen as a token arrival.
                assert!(b.metrics["itl"].successful.count > 0, "{what}");
            }
            // Every request offered the three functions, to be chosen automatically.
            let sent = recorded(&record);
            assert_eq!(sent.len(), 9, "{what}");
            for r in &sent {
                let body = &r["body"];
                let tools = body["tools"].as_array().expect("tools");
                assert_eq!(tools.len(), 3, "{what}: {body}");
                assert!(!body["tool_choice"].is_null(), "{what}: {body}");
            }
        }
    }
}

#[test]
fn the_share_of_answers_with_a_tool_call_is_the_mocks() {
    let server = mock(MockConfig {
        tool_call_rate: 0.5,
        ..MockConfig::instant()
    });
    let report = Bench::on(&server)
        .concurrent(4)
        .max_requests(30)
        .data("prompt_tokens=16,output_tokens=4,tools=2")
        .ok_report();
    let calls = server.stats().tool_calls;
    let b = &report.benchmarks[0];
    assert!((1..30).contains(&calls), "the seed drew a mix: {calls}");
    assert_eq!(b.metrics["ttft_tool"].successful.count, calls);
    assert_eq!(b.metrics["ttft"].successful.count, 30);
}

#[test]
fn tools_on_a_format_without_them_is_a_usage_error() {
    let server = mock(MockConfig::instant());
    for format in ["completions", "embeddings"] {
        let finished = Bench::on(&server)
            .format(format)
            .max_requests(1)
            .data("prompt_tokens=8,output_tokens=2,tools=2")
            .run();
        assert_eq!(finished.code(), 2, "{format}: {}", finished.stderr);
        assert!(
            finished.stderr.contains("tools") && finished.stderr.lines().count() == 1,
            "{format}: {}",
            finished.stderr
        );
    }
    assert_eq!(server.stats().requests.chat_completions, 0);
}

/// A session's tool calls and their results as one turn's body sends them, in order:
/// `("call", id, name, arguments)` and `("result", id, "", content)`, with the other
/// messages as `("user"|"assistant"|"system", …)`.
fn conversation_of(
    format: &str,
    body: &serde_json::Value,
) -> Vec<(String, String, String, String)> {
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let mut out = Vec::new();
    let items = match format {
        "responses" => body["input"].as_array(),
        _ => body["messages"].as_array(),
    };
    for m in items.into_iter().flatten() {
        match format {
            "chat" => match m["role"].as_str() {
                Some("tool") => out.push((
                    "result".into(),
                    s(&m["tool_call_id"]),
                    String::new(),
                    s(&m["content"]),
                )),
                Some(role) => match m["tool_calls"].as_array() {
                    Some(calls) => {
                        assert_eq!(calls.len(), 1, "{m}");
                        let f = &calls[0]["function"];
                        out.push((
                            "call".into(),
                            s(&calls[0]["id"]),
                            s(&f["name"]),
                            s(&f["arguments"]),
                        ));
                    }
                    None => out.push((role.into(), String::new(), String::new(), s(&m["content"]))),
                },
                None => panic!("a message without a role: {m}"),
            },
            "responses" => match m["type"].as_str() {
                Some("function_call") => out.push((
                    "call".into(),
                    s(&m["call_id"]),
                    s(&m["name"]),
                    s(&m["arguments"]),
                )),
                Some("function_call_output") => out.push((
                    "result".into(),
                    s(&m["call_id"]),
                    String::new(),
                    s(&m["output"]),
                )),
                _ => out.push((
                    s(&m["role"]),
                    String::new(),
                    String::new(),
                    s(&m["content"]),
                )),
            },
            _ => match m["content"].as_array() {
                Some(blocks) => {
                    for b in blocks {
                        match b["type"].as_str() {
                            Some("tool_use") => out.push((
                                "call".into(),
                                s(&b["id"]),
                                s(&b["name"]),
                                b["input"].to_string(),
                            )),
                            Some("tool_result") => out.push((
                                "result".into(),
                                s(&b["tool_use_id"]),
                                String::new(),
                                s(&b["content"]),
                            )),
                            _ => out.push((
                                s(&m["role"]),
                                String::new(),
                                String::new(),
                                s(&b["text"]),
                            )),
                        }
                    }
                }
                None => out.push((
                    s(&m["role"]),
                    String::new(),
                    String::new(),
                    s(&m["content"]),
                )),
            },
        }
    }
    out
}

#[test]
fn a_session_resends_each_tool_call_the_mock_made_with_the_tools_result() {
    let tok = llmsurge::data::tokenizer::Tokenizer::load(&llmsurge_proto::TokenizerRef::Builtin(
        "cl100k_base".into(),
    ))
    .expect("tokenizer");
    for format in FORMATS {
        for stream in [true, false] {
            let what = format!("{format} stream={stream}");
            let dir = tempfile::tempdir().expect("tempdir");
            let (record, truth) = (
                dir.path().join("sent.jsonl"),
                dir.path().join("truth.jsonl"),
            );
            let server = mock(MockConfig {
                tool_call_rate: 1.0,
                record: Some(record.clone()),
                truth: Some(truth.clone()),
                ..MockConfig::instant()
            });
            let report = Bench::on(&server)
                .format(format)
                .stream(stream)
                .concurrent(1)
                .max_requests(3)
                .data("turns=3,prompt_tokens=16,output_tokens=6,tools=2,tool_result_tokens=40")
                .ok_report();
            drop(server);
            assert_eq!(report.benchmarks[0].requests.completed, 3, "{what}");
            // One user, one session: the turns arrived in order, and ended in order.
            let sent = recorded(&record);
            let mut did = recorded(&truth);
            did.sort_by(|a, b| {
                a["arrival_time"]
                    .as_f64()
                    .partial_cmp(&b["arrival_time"].as_f64())
                    .expect("times")
            });
            assert_eq!((sent.len(), did.len()), (3, 3), "{what}");
            let prefix = if format == "anthropic" {
                "toolu_"
            } else {
                "call_"
            };
            for (k, line) in sent.iter().enumerate() {
                let turn = conversation_of(format, &line["body"]);
                let shape: Vec<&str> = turn.iter().map(|t| t.0.as_str()).collect();
                // Each earlier turn: its user message, the call the mock answered it with,
                // the tool's result; then this turn's user message.
                let mut expected = ["user", "call", "result"].repeat(k);
                expected.push("user");
                assert_eq!(shape, expected, "{what} turn {k}: {turn:?}");
                for j in 0..k {
                    let (_, id, name, arguments) = &turn[3 * j + 1];
                    let (_, answered, _, result) = &turn[3 * j + 2];
                    let made = did[j]["tool_call"].as_str().expect("the mock made a call");
                    assert_eq!(
                        id,
                        &format!("{prefix}{made}"),
                        "{what} turn {k}: call {j}'s id"
                    );
                    assert_eq!(answered, id, "{what} turn {k}: the result names its call");
                    assert!(name == "tool_0" || name == "tool_1", "{what}: {name}");
                    // The arguments as they came back: `{"query": …}` of the words the
                    // mock counted as that answer's content tokens.
                    let args: serde_json::Value =
                        serde_json::from_str(arguments).expect("arguments JSON");
                    let words = args["query"]
                        .as_str()
                        .expect("query")
                        .split_whitespace()
                        .count();
                    assert_eq!(
                        words as u64,
                        did[j]["content_tokens"].as_u64().expect("tokens"),
                        "{what}"
                    );
                    assert_eq!(
                        tok.count(result),
                        40,
                        "{what} turn {k}: the result's length"
                    );
                }
            }
        }
    }
}
