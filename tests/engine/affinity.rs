//! Affinity as routers want it (issue 39), checked at the mock's `--record`: the session
//! key each preset sends (a sub-agent's calls with their parent's key), one connection
//! per conversation with `--sticky-connections`, a session token the server hands out
//! sent back on the conversation's later turns, and a higher prefix-cache hit rate with
//! affinity than without on a mock whose cache is split into replicas by the key.

use super::agent_traces::{Row, flat};
use super::tls::{Leaf, Pki};
use crate::scenario::Bench;
use crate::support::{mock, recorded, recording};
use llmsurge::mock::{MockConfig, MockServer};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// 2 users × sessions of 3 turns, 8 requests in all.
const SESSIONS: &str = "turns=3,prompt_tokens=8,output_tokens=4";

/// Runs `data` with `extra` flags against `server`; its requests as the mock recorded them.
fn run(server: &MockServer, path: &std::path::Path, data: &str, extra: &[&str]) -> Vec<Value> {
    let report = Bench::on(server)
        .concurrent(2)
        .data(data)
        .max_requests(8)
        .args_as_written(extra)
        .ok_report();
    assert_eq!(report.benchmarks[0].requests.completed, 8, "{extra:?}");
    recorded(path)
}

/// Header `name` of a recorded request (`None`: it had none).
fn header(line: &Value, name: &str) -> Option<String> {
    line["headers"][name].as_str().map(String::from)
}

/// The turn a recorded chat request was: turn k resends k earlier user messages.
fn turn_of(line: &Value) -> usize {
    let messages = line["body"]["messages"].as_array().expect("messages");
    messages.iter().filter(|m| m["role"] == "user").count() - 1
}

/// The recorded requests grouped by the value of header `name`, in arrival order.
fn by_key<'a>(lines: &'a [Value], name: &str) -> BTreeMap<String, Vec<&'a Value>> {
    let mut out: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for line in lines {
        let key = header(line, name).unwrap_or_else(|| panic!("no {name} in {line}"));
        out.entry(key).or_default().push(line);
    }
    out
}

#[test]
fn each_preset_sends_the_routers_session_key_on_every_turn() {
    for (flag, name) in [
        ("sglang", "x-smg-routing-key"),
        ("dynamo", "x-dynamo-session-id"),
        ("header:X-Route-Key", "x-route-key"),
    ] {
        let (server, _dir, path) = recording(MockConfig {
            record_header: vec![name.into(), "x-dynamo-parent-session-id".into()],
            // A header of the user's choice is not known harmless: shown when asked.
            show_header: vec!["x-route-key".into()],
            ..MockConfig::instant()
        });
        let lines = run(&server, &path, SESSIONS, &["--affinity", flag]);
        let sessions = by_key(&lines, name);
        assert!(sessions.len() >= 3, "{flag}: {sessions:?}");
        for (key, turns) in &sessions {
            assert!(key.starts_with("llmsurge-session-"), "{flag}: {key}");
            let seen: Vec<usize> = turns.iter().map(|l| turn_of(l)).collect();
            let want: Vec<usize> = (0..seen.len()).collect();
            assert_eq!(
                seen, want,
                "{flag}: one key per session, on each of its turns"
            );
        }
        // A session is no sub-agent: no parent key.
        assert!(
            lines
                .iter()
                .all(|l| header(l, "x-dynamo-parent-session-id").is_none())
        );
    }
    // Without --affinity no request carries a router's key.
    let (server, _dir, path) = recording(MockConfig {
        record_header: vec!["x-smg-routing-key".into(), "x-dynamo-session-id".into()],
        ..MockConfig::instant()
    });
    for line in run(&server, &path, SESSIONS, &[]) {
        assert!(header(&line, "x-smg-routing-key").is_none(), "{line}");
        assert!(header(&line, "x-dynamo-session-id").is_none(), "{line}");
    }
}

/// An agent trace: a planner, a sub-agent `s1` whose call `c1` spawns a nested
/// sub-agent `s1a` (call `c1a`), a sub-agent `s2` (call `c2`), and a joining call.
/// Output lengths tell the calls apart in the record.
const NESTED: [Row; 9] = [
    ("root", None, 0, 900, None),
    ("plan", Some("root"), 0, 100, Some((40, 11))),
    ("s1", Some("root"), 110, 500, None),
    ("c1", Some("s1"), 120, 200, Some((50, 12))),
    ("s1a", Some("s1"), 210, 400, None),
    ("c1a", Some("s1a"), 220, 300, Some((60, 13))),
    ("s2", Some("root"), 115, 500, None),
    ("c2", Some("s2"), 130, 250, Some((70, 14))),
    ("join", Some("root"), 600, 800, Some((200, 15))),
];

#[test]
fn dynamo_affinity_gives_a_sub_agents_calls_their_own_key_and_their_parents() {
    let (server, dir, path) = recording(MockConfig {
        record_header: vec![
            "x-dynamo-session-id".into(),
            "x-dynamo-parent-session-id".into(),
        ],
        ..MockConfig::instant()
    });
    let trace = dir.path().join("trace.jsonl");
    std::fs::write(&trace, flat(&NESTED)).expect("write the trace");
    let finished = Bench::on(&server)
        .profile("replay")
        .data(&trace.display().to_string())
        .arg("--time-scale", 0.1)
        .args_as_written(&["--affinity", "dynamo"])
        .run();
    assert_eq!(finished.code(), 0, "{}", finished.stderr);
    let lines = recorded(&path);
    assert_eq!(lines.len(), 5);
    // By output length: (own key, parent key).
    let seen: BTreeMap<u64, (Option<String>, Option<String>)> = lines
        .iter()
        .map(|l| {
            (
                l["body"]["max_tokens"].as_u64().expect("max_tokens"),
                (
                    header(l, "x-dynamo-session-id"),
                    header(l, "x-dynamo-parent-session-id"),
                ),
            )
        })
        .collect();
    let main = "llmsurge-session-0";
    let s = |v: &str| Some(v.to_string());
    let want: BTreeMap<u64, (Option<String>, Option<String>)> = [
        (11, (s(main), None)),
        (12, (s(&format!("{main}/s1")), s(main))),
        (13, (s(&format!("{main}/s1a")), s(&format!("{main}/s1")))),
        (14, (s(&format!("{main}/s2")), s(main))),
        (15, (s(main), None)),
    ]
    .into_iter()
    .collect();
    assert_eq!(seen, want);
}

#[test]
fn sticky_connections_keep_one_connection_per_conversation() {
    for extra in [
        &["--sticky-connections"][..],
        &["--sticky-connections", "--affinity", "sglang"][..],
    ] {
        assert_sticky(MockConfig::instant(), extra);
    }
}

/// Break test: `--sticky-connections` with an `https://` target was refused (exit 2)
/// though HTTPS goes through the same own HTTP/1.1 client and its per-conversation pools.
#[test]
fn sticky_connections_over_https_keep_one_connection_per_conversation() {
    let pki = Pki::new("sticky");
    let (cert, key) = pki.leaf(Leaf::Server, "server");
    let config = MockConfig {
        tls_cert: Some(cert),
        tls_key: Some(key),
        ..MockConfig::instant()
    };
    assert_sticky(config, &["--sticky-connections", "--ca-cert", pki.ca()]);
}

/// Runs sessions with think times and `extra` flags against a mock of `config` that
/// records and keeps its truth; asserts (by the mock's record and truth) that every turn
/// of a session came on one connection and no connection served two sessions; over TLS,
/// that every connection was an HTTP/1.1 one and no handshake failed.
fn assert_sticky(config: MockConfig, extra: &[&str]) {
    let data = format!("{SESSIONS},think_time=20ms,session_header=x-session-id");
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, truth) = (
        dir.path().join("record.jsonl"),
        dir.path().join("truth.jsonl"),
    );
    let tls = config.tls_cert.is_some();
    let server = mock(MockConfig {
        record: Some(path.clone()),
        truth: Some(truth.clone()),
        record_header: vec!["x-session-id".into()],
        ..config
    });
    let lines = run(&server, &path, &data, extra);
    let stats = server.stats();
    // The truth file names the same connections (complete once the server stopped).
    server.stop();
    let conns = |lines: &[Value]| -> Vec<u64> {
        let mut c: Vec<u64> = lines
            .iter()
            .map(|l| l["connection"].as_u64().expect("the connection id"))
            .collect();
        c.sort_unstable();
        c
    };
    assert_eq!(conns(&recorded(&truth)), conns(&lines), "{extra:?}");
    let sessions = by_key(&lines, "x-session-id");
    assert!(sessions.len() >= 3, "{extra:?}: {sessions:?}");
    // Which sessions each connection served.
    let mut served: BTreeMap<u64, BTreeSet<&String>> = BTreeMap::new();
    for (key, turns) in &sessions {
        let conns: BTreeSet<u64> = turns
            .iter()
            .map(|l| l["connection"].as_u64().expect("the connection id"))
            .collect();
        assert_eq!(conns.len(), 1, "{extra:?}: session {key} on {conns:?}");
        for c in conns {
            served.entry(c).or_default().insert(key);
        }
    }
    let shared: Vec<_> = served.values().filter(|s| s.len() > 1).collect();
    assert!(
        shared.is_empty(),
        "{extra:?}: a connection served two sessions: {served:?}"
    );
    if tls {
        let c = stats.connections;
        // At least one HTTP/1.1 handshake per connection the record names (the target
        // check adds its own), none failed.
        assert!(
            c.tls_http1 >= served.len() as u64 && c.tls_failed == 0,
            "{extra:?}: {c:?}, {} connections recorded",
            served.len()
        );
    }
}

#[test]
fn a_session_token_the_server_hands_out_comes_back_on_later_turns() {
    let data = format!("{SESSIONS},session_header=x-session-id");
    for (issue, flag, transport) in [
        ("cookie:route", "cookie:route", &[][..]),
        ("header:x-session-token", "header:x-session-token", &[][..]),
        (
            "header:x-session-token",
            "header:X-Session-Token",
            &["--http2"][..],
        ),
    ] {
        let (server, _dir, path) = recording(MockConfig {
            record_header: vec!["x-session-id".into()],
            issue_session_token: Some(issue.into()),
            ..MockConfig::instant()
        });
        let mut extra = vec!["--session-token", flag];
        extra.extend_from_slice(transport);
        let lines = run(&server, &path, &data, &extra);
        let sessions = by_key(&lines, "x-session-id");
        let mut issued_all = BTreeSet::new();
        for (key, turns) in &sessions {
            // The first turn carries none and is handed one; the later ones send it back
            // (and are handed none).
            let first = turns[0];
            assert!(first["token"].is_null(), "{issue}: {key}: {first}");
            let issued = first["issued_token"]
                .as_str()
                .unwrap_or_else(|| panic!("{issue}: no token handed out: {first}"));
            assert!(
                issued_all.insert(issued.to_string()),
                "one token per session"
            );
            for later in &turns[1..] {
                assert_eq!(later["token"], issued, "{issue} {transport:?}: {key}");
                assert!(later["issued_token"].is_null());
            }
        }
    }
}

/// The prefix-cache hit rate of 4 sessions of 4 turns on a mock whose cache is split
/// into 4 replicas by `x-smg-routing-key`, with `extra` flags; and the replicas each
/// session's turns were looked up in.
fn hit_rate(extra: &[&str]) -> (f64, BTreeMap<String, BTreeSet<u64>>) {
    let (server, _dir, path) = recording(MockConfig {
        prefix_cache_by: Some("x-smg-routing-key".into()),
        replicas: 4,
        record_header: vec!["x-session-id".into()],
        ..MockConfig::instant()
    });
    let report = Bench::on(&server)
        .concurrent(2)
        .data("turns=4,prompt_tokens=64,output_tokens=16,samples=16,session_header=x-session-id")
        .args_as_written(extra)
        .ok_report();
    assert_eq!(report.benchmarks[0].requests.completed, 16, "{extra:?}");
    let stats = server.stats();
    let mut replicas: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for line in recorded(&path) {
        let key = header(&line, "x-session-id").expect("session id");
        replicas
            .entry(key)
            .or_default()
            .insert(line["replica"].as_u64().expect("the replica"));
    }
    (
        stats.prefix_cache_hits as f64 / stats.prefix_cache_queries as f64,
        replicas,
    )
}

#[test]
fn affinity_raises_the_prefix_cache_hit_rate_of_a_cache_split_by_key() {
    let (with, placed) = hit_rate(&["--affinity", "sglang"]);
    assert!(
        placed.values().all(|r| r.len() == 1),
        "each session on one replica: {placed:?}"
    );
    let (without, spread) = hit_rate(&[]);
    assert!(
        spread.values().any(|r| r.len() > 1),
        "without the key turns go round the replicas: {spread:?}"
    );
    // With the key every later turn finds its whole history cached.
    assert!(with > 0.5, "{with}");
    assert!(with > without + 0.2, "with {with}, without {without}");
}

#[test]
fn bad_affinity_flags_are_usage_errors_naming_the_flag() {
    let server = mock(MockConfig::instant());
    for (args, flag, why) in [
        (&["--affinity", "nginx"][..], "--affinity", "not a router"),
        (
            &["--affinity", "header:bad name"][..],
            "--affinity",
            "not a header name",
        ),
        (
            &["--affinity", "header:cookie"][..],
            "--affinity",
            "not a header name",
        ),
        (
            &["--session-token", "body:x"][..],
            "--session-token",
            "header:NAME",
        ),
        (
            &["--session-token", "header:"][..],
            "--session-token",
            "not a header name",
        ),
        (
            &["--session-token", "cookie:a b"][..],
            "--session-token",
            "not a cookie name",
        ),
        (
            &["--sticky-connections", "--http2"][..],
            "--sticky-connections",
            "HTTP/2",
        ),
        // Break test: a content-* header changes how the body is read, and a header
        // llmsurge sends itself would go out twice.
        (
            &["--affinity", "header:content-encoding"][..],
            "--affinity",
            "not a header name a key may go in",
        ),
        (
            &["--affinity", "header:User-Agent"][..],
            "--affinity",
            "not a header name a key may go in",
        ),
        (
            &["--affinity", "header:x-request-id"][..],
            "--affinity",
            "not a header name a key may go in",
        ),
        (
            &["--session-token", "header:set-cookie"][..],
            "--session-token",
            "not a header name a token may go in",
        ),
        (
            &[
                "--affinity",
                "header:x-route",
                "--session-token",
                "header:x-route",
            ][..],
            "--session-token",
            "the same header as --affinity's key",
        ),
    ] {
        let finished = Bench::on(&server)
            .data(SESSIONS)
            .max_requests(2)
            .args_as_written(args)
            .run();
        assert_eq!(finished.code(), 2, "{args:?}: {}", finished.stderr);
        let line = finished.stderr.trim();
        assert_eq!(line.lines().count(), 1, "{args:?}: {line}");
        assert!(
            line.contains(flag) && line.contains(why),
            "{args:?}: {line}"
        );
    }
    // Requests that stand alone have no conversation: the flags would do nothing.
    for flag in [
        &["--affinity", "sglang"][..],
        &["--session-token", "cookie:route"][..],
        &["--sticky-connections"][..],
    ] {
        let finished = Bench::on(&server)
            .data("prompt_tokens=8,output_tokens=2")
            .max_requests(2)
            .args_as_written(flag)
            .run();
        assert_eq!(finished.code(), 2, "{flag:?}: {}", finished.stderr);
        assert!(
            finished.stderr.trim().starts_with(&format!(
                "error: {}: the data's requests stand alone",
                flag[0]
            )),
            "{flag:?}: {}",
            finished.stderr
        );
    }
    assert_eq!(server.stats().requests_total, 0);
}

/// Break test: a header affinity sends that the user's headers or the data's
/// `session_header=` send too went out twice, and the mock recorded the user's one value
/// for every conversation (a router reads the first): a usage error naming both.
#[test]
fn an_affinity_header_sent_by_the_user_or_the_data_too_is_a_usage_error() {
    let server = mock(MockConfig::instant());
    let with_session = "turns=3,prompt_tokens=8,output_tokens=4,session_header=x-route";
    for (data, args, flag, names) in [
        (
            SESSIONS,
            &[
                "--affinity",
                "dynamo",
                "--backend-kwargs",
                r#"{"headers": {"X-Dynamo-Session-Id": "fixed"}}"#,
            ][..],
            "--affinity",
            "X-Dynamo-Session-Id",
        ),
        (
            SESSIONS,
            &[
                "--affinity",
                "dynamo",
                "--backend-kwargs",
                r#"{"headers": {"x-dynamo-parent-session-id": "p"}}"#,
            ][..],
            "--affinity",
            "x-dynamo-parent-session-id",
        ),
        (
            SESSIONS,
            &[
                "--session-token",
                "cookie:route",
                "--backend-kwargs",
                r#"{"headers": {"Cookie": "a=b"}}"#,
            ][..],
            "--session-token",
            "Cookie",
        ),
        (
            with_session,
            &["--affinity", "header:X-Route"][..],
            "--affinity",
            "session_header=x-route",
        ),
    ] {
        let finished = Bench::on(&server)
            .data(data)
            .max_requests(2)
            .args_as_written(args)
            .run();
        assert_eq!(finished.code(), 2, "{args:?}: {}", finished.stderr);
        let line = finished.stderr.trim();
        assert_eq!(line.lines().count(), 1, "{args:?}: {line}");
        assert!(
            line.starts_with(&format!("error: {flag}:")) && line.contains(names),
            "{args:?}: {line}"
        );
    }
    assert_eq!(server.stats().requests_total, 0);
}
