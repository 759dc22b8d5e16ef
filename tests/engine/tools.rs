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
