//! Sticky routing by header (`session_header=NAME`): every turn of a session carries the
//! session id in the header the user chose, on both transports (the worker's own
//! HTTP/1.1 client and reqwest over HTTP/2), beside or without the OpenAI `user` field;
//! a run without the key sends no such header; a bad header name is a usage error.
//! What the server received is read from the mock's `--record` with `--record-header`.

use crate::scenario::Bench;
use crate::support::{mock, recorded, recording};
use llmsurge::mock::MockConfig;
use serde_json::Value;
use std::collections::BTreeMap;

const HEADER: &str = "x-session-id";

/// Runs 2 users × sessions of 3 turns (6 requests) against a recording mock; the lines.
fn run_sessions(data: &str, extra: &[&str]) -> Vec<Value> {
    let (server, _dir, path) = recording(MockConfig {
        record_header: vec![HEADER.into()],
        ..MockConfig::instant()
    });
    let report = Bench::on(&server)
        .concurrent(2)
        .data(data)
        .max_requests(6)
        .args_as_written(extra)
        .ok_report();
    assert_eq!(
        report.benchmarks[0].requests.completed, 6,
        "{data} {extra:?}"
    );
    let lines = recorded(&path);
    assert_eq!(lines.len(), 6, "{data} {extra:?}");
    lines
}

/// The header value of each recorded line (`None`: the request had no such header).
fn header_values(lines: &[Value]) -> Vec<Option<String>> {
    lines
        .iter()
        .map(|l| {
            let headers = l["headers"].as_object().expect("the recorded headers");
            headers[HEADER].as_str().map(String::from)
        })
        .collect()
}

/// The turn a recorded chat request was: turn k resends k earlier user messages.
fn turn_of(line: &Value) -> usize {
    let messages = line["body"]["messages"].as_array().expect("messages");
    messages.iter().filter(|m| m["role"] == "user").count() - 1
}

/// Each id's requests are one session's turns 0, 1, ... in order (two users run their
/// sessions side by side, and `--max-requests` may cut the last ones short): one id per
/// session, never shared, never changing within one.
fn assert_sessions(turns: &BTreeMap<String, Vec<usize>>, transport: &[&str]) {
    assert!(turns.len() >= 2, "{transport:?}: {turns:?}");
    for (id, seen) in turns {
        let want: Vec<usize> = (0..seen.len()).collect();
        assert_eq!(seen, &want, "{transport:?}: session {id}");
        assert!(seen.len() <= 3, "{transport:?}: {id} has {seen:?}");
    }
    assert_eq!(turns.values().map(Vec::len).sum::<usize>(), 6);
}

#[test]
fn every_turn_sends_its_session_id_in_the_chosen_header_on_both_transports() {
    for transport in [&[][..], &["--http2"][..]] {
        // With the user field too: both carry the same id, on every turn.
        let lines = run_sessions(
            "turns=3,prompt_tokens=8,output_tokens=4,session_id=user,session_header=X-Session-ID",
            transport,
        );
        let mut turns: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (line, value) in lines.iter().zip(header_values(&lines)) {
            let value = value.unwrap_or_else(|| panic!("{transport:?}: no header in {line}"));
            assert!(value.starts_with("llmsurge-session-"), "{value}");
            assert_eq!(line["body"]["user"], value.as_str(), "{transport:?}");
            turns.entry(value).or_default().push(turn_of(line));
        }
        assert_sessions(&turns, transport);
        // The header alone: no user field in the body.
        let lines = run_sessions(
            "turns=3,prompt_tokens=8,output_tokens=4,session_header=x-session-id",
            transport,
        );
        let mut turns: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (line, value) in lines.iter().zip(header_values(&lines)) {
            let value = value.unwrap_or_else(|| panic!("{transport:?}: no header in {line}"));
            assert!(line["body"].get("user").is_none(), "{line}");
            turns.entry(value).or_default().push(turn_of(line));
        }
        assert_sessions(&turns, transport);
        // Without the key no request carries the header.
        let lines = run_sessions("turns=3,prompt_tokens=8,output_tokens=4", transport);
        assert!(
            header_values(&lines).iter().all(Option::is_none),
            "{transport:?}"
        );
    }
}

#[test]
fn a_bad_session_header_name_is_a_usage_error_naming_the_key() {
    let server = mock(MockConfig::instant());
    for name in [
        "authorization",
        "Connection",
        "x-api-key",
        "content-length",
        "bad name",
        "x:y",
    ] {
        let data = format!("turns=2,prompt_tokens=8,output_tokens=2,session_header={name}");
        let finished = Bench::on(&server).data(&data).max_requests(2).run();
        assert_eq!(finished.code(), 2, "{name}: {}", finished.stderr);
        let line = finished.stderr.trim();
        assert_eq!(line.lines().count(), 1, "{name}: {line}");
        assert!(line.contains("session_header"), "{name}: {line}");
    }
    // Without turns there is no session to name.
    let finished = Bench::on(&server)
        .data("prompt_tokens=8,output_tokens=2,session_header=x-session-id")
        .max_requests(2)
        .run();
    assert_eq!(finished.code(), 2, "{}", finished.stderr);
    assert!(finished.stderr.contains("session_header needs turns"));
    assert_eq!(server.stats().requests_total, 0);
}
