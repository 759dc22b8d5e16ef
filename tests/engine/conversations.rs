//! Conversation files replayed as multi-turn sessions (`--data-args '{"sessions": true}'`):
//! one session per row, one turn per user message, the system message first on every
//! turn, each turn asking for its recorded reply's length, and the history carrying the
//! replies that actually streamed (`history=live`) or the file's (`history=recorded`).
//! Checked against the mock's `--record`, in ShareGPT's and OpenAI's layouts and under a
//! column named with `--data-column-mapper`; malformed files stop with exit 2 and the
//! file and line.

use super::sessions::{CHAT, read_log, reply_of, think_times};
use crate::scenario::Bench;
use crate::support::{mock, ok_report, recorded, recording, run};
use llmsurge::data::tokenizer::Tokenizer;
use llmsurge::mock::MockConfig;
use llmsurge_proto::TokenizerRef;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A conversation as a test writes it: an optional system message, then each user
/// message with the reply recorded after it (if any).
struct Conversation {
    system: Option<&'static str>,
    turns: Vec<(&'static str, Option<&'static str>)>,
}

/// The test conversations: a system message and three answered turns; two answered
/// turns and a last question without a reply.
fn conversations() -> Vec<Conversation> {
    vec![
        Conversation {
            system: Some("You are a terse assistant."),
            turns: vec![
                ("What is the capital of France?", Some("Paris.")),
                (
                    "And of Italy?",
                    Some("Rome, which has been the capital since 1871."),
                ),
                ("Which one is older?", Some("Rome is older by far.")),
            ],
        },
        Conversation {
            system: None,
            turns: vec![
                ("Name a prime number.", Some("Seven.")),
                ("A larger one?", Some("Ninety-seven is prime, too.")),
                ("Thanks, bye.", None),
            ],
        },
    ]
}

#[derive(Clone, Copy)]
enum Layout {
    /// `conversations` of `{from, value}` (`human` / `gpt`).
    ShareGpt,
    /// `messages` of `{role, content}`.
    OpenAi,
}

/// One conversation's messages in `layout`.
fn messages(c: &Conversation, layout: Layout) -> Vec<Value> {
    let msg = |role: &str, text: &str| match layout {
        Layout::ShareGpt => {
            let from = match role {
                "user" => "human",
                "assistant" => "gpt",
                other => other,
            };
            json!({"from": from, "value": text})
        }
        Layout::OpenAi => json!({"role": role, "content": text}),
    };
    let mut out: Vec<Value> = c.system.iter().map(|s| msg("system", s)).collect();
    for (user, reply) in &c.turns {
        out.push(msg("user", user));
        if let Some(reply) = reply {
            out.push(msg("assistant", reply));
        }
    }
    out
}

/// Writes the conversations, each under `column`: a `.json` list (as ShareGPT's own
/// file is), else JSONL.
fn write_conversations(dir: &Path, name: &str, column: &str, layout: Layout) -> PathBuf {
    let rows: Vec<Value> = conversations()
        .iter()
        .enumerate()
        .map(|(i, c)| json!({ "id": format!("c{i}"), column: messages(c, layout) }))
        .collect();
    let body = if name.ends_with(".json") {
        Value::Array(rows).to_string()
    } else {
        rows.iter().map(|r| format!("{r}\n")).collect()
    };
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write the conversations");
    path
}

const DEFAULT_OUTPUT: u32 = 9;
/// The header the mock records (sticky routing by `session_header`).
const SESSION_HEADER: &str = "x-session-id";

/// Runs the file as sessions on a recording instant mock; the recorded request bodies.
fn replay(data: &Path, data_args: &str, extra: &[&str]) -> (Vec<Value>, llmsurge::report::Report) {
    let (server, _dir, record) = recording(MockConfig {
        record_header: vec![SESSION_HEADER.into()],
        ..MockConfig::instant()
    });
    let bench = Bench::on(&server)
        .data(&data.display().to_string())
        .data_args(data_args)
        .outputs("json");
    // One user, one session after another, unless the test names a profile.
    let bench = if extra.contains(&"--profile") {
        bench
    } else {
        bench.synchronous()
    };
    let finished = bench.args_as_written(extra).run();
    let report = ok_report(&finished);
    // The report says what the file held: sessions (rows) and their turns.
    let json: Value =
        serde_json::from_slice(&std::fs::read(finished.report_path()).expect("report"))
            .expect("json");
    let resolved = &json["args"]["data"]["resolved"];
    assert_eq!(
        (&resolved["rows"], &resolved["turns"]),
        (&json!(2), &json!(6))
    );
    (recorded(&record), report)
}

/// Checks every recorded turn: the system message first, then the earlier user messages
/// each followed by `replies[i]` (what the history carries for request `i`), then the
/// turn's own user message; and `max_tokens` the recorded reply's length (or the
/// default for a turn without one). Also the report's session section.
fn check_turns(lines: &[Value], replies: &[String], report: &llmsurge::report::Report) {
    let tok = Tokenizer::load(&TokenizerRef::Builtin("cl100k_base".into())).expect("tokenizer");
    let convs = conversations();
    let planned: usize = convs.iter().map(|c| c.turns.len()).sum();
    assert_eq!(lines.len(), planned, "one request per user message");
    let mut i = 0;
    for c in &convs {
        let first = i;
        for (k, (user, reply)) in c.turns.iter().enumerate() {
            let body = &lines[i]["body"];
            let got = body["messages"].as_array().expect("chat messages");
            let mut want: Vec<Value> = c
                .system
                .iter()
                .map(|s| json!({"role": "system", "content": s}))
                .collect();
            for (j, (u, _)) in c.turns[..k].iter().enumerate() {
                want.push(json!({"role": "user", "content": u}));
                want.push(json!({"role": "assistant", "content": replies[first + j]}));
            }
            want.push(json!({"role": "user", "content": user}));
            let roles = |m: &[Value]| -> Vec<Value> {
                m.iter()
                    .map(|m| json!({"role": m["role"], "content": m["content"]}))
                    .collect()
            };
            assert_eq!(roles(got), want, "request {i}: turn {k}");
            let max_tokens = reply.map_or(DEFAULT_OUTPUT, |r| tok.count(r) as u32);
            assert_eq!(body["max_tokens"], max_tokens, "request {i}: turn {k}");
            i += 1;
        }
    }
    let s = report.benchmarks[0]
        .sessions
        .as_ref()
        .expect("a session section");
    assert_eq!((s.sessions, s.completed), (convs.len() as u64, 2), "{s:?}");
    assert_eq!(
        (s.turns_planned, s.turns_completed),
        (planned as u64, planned as u64),
        "{s:?}"
    );
}

#[test]
fn sharegpt_conversations_replay_with_the_replies_that_actually_streamed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write_conversations(dir.path(), "share.json", "conversations", Layout::ShareGpt);
    let (lines, report) = replay(
        &file,
        &format!(r#"{{"sessions": true, "output_tokens": {DEFAULT_OUTPUT}}}"#),
        &[],
    );
    // A second mock of the same seed answers request n as the first did: it says what
    // streamed back, so the carried history is checked word for word.
    let twin = mock(MockConfig::instant());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = reqwest::Client::new();
    let replies: Vec<String> = lines
        .iter()
        .map(|l| reply_of(&rt, &client, &twin.base_url(), &CHAT, &l["body"]))
        .collect();
    // The live replies are the mock's, not the file's: the check below tells them apart.
    let file_replies: Vec<&str> = conversations()
        .iter()
        .flat_map(|c| c.turns.iter().filter_map(|t| t.1).collect::<Vec<_>>())
        .collect();
    assert!(replies.iter().all(|r| !file_replies.contains(&r.as_str())));
    check_turns(&lines, &replies, &report);
}

#[test]
fn recorded_history_resends_the_files_replies_in_both_layouts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let recorded_replies: Vec<String> = conversations()
        .iter()
        .flat_map(|c| {
            c.turns
                .iter()
                .map(|t| t.1.unwrap_or_default().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let openai = write_conversations(dir.path(), "openai.jsonl", "messages", Layout::OpenAi);
    let custom = write_conversations(dir.path(), "custom.jsonl", "dialog", Layout::ShareGpt);
    let args = format!(
        r#"{{"sessions": true, "history": "recorded", "output_tokens": {DEFAULT_OUTPUT}}}"#
    );
    for (file, extra) in [
        (&openai, &[][..]),
        (
            &custom,
            &["--data-column-mapper", r#"{"messages": "dialog"}"#][..],
        ),
    ] {
        let (lines, report) = replay(file, &args, extra);
        check_turns(&lines, &recorded_replies, &report);
    }
}

#[test]
fn malformed_conversations_stop_with_the_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ok = r#"{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}"#;
    let cases = [
        (
            r#"{"messages": [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Hi"}]}"#,
            r#"{"sessions": true}"#,
            "line 2: column \"messages\": message 1: an assistant message before the first user message",
        ),
        (
            r#"{"messages": [{"role": "user", "content": "Hi"}, {"role": "system", "content": "Be kind."}]}"#,
            r#"{"sessions": true}"#,
            "line 2: column \"messages\": message 2: a system message after the conversation started",
        ),
        (
            r#"{"messages": [{"role": "system", "content": "Be kind."}]}"#,
            r#"{"sessions": true}"#,
            "line 2: column \"messages\": no user message",
        ),
        (
            r#"{"prompt": "Hi"}"#,
            r#"{"sessions": true}"#,
            "line 2: sessions need a conversation column",
        ),
    ];
    for (i, (bad, args, expected)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.jsonl"));
        std::fs::write(&path, format!("{ok}\n{bad}\n")).expect("write");
        let data = path.display().to_string();
        let finished = Bench::target("http://127.0.0.1:9")
            .data(&data)
            .arg("--data-args", args)
            .run();
        assert_eq!(finished.code(), 2, "{expected}: {}", finished.stderr);
        let line = finished.stderr.trim();
        assert!(
            line.contains(&format!("{data} {expected}")),
            "{expected}: {line}"
        );
        assert_eq!(line.lines().count(), 1, "{line}");
    }
    // history=recorded needs recorded replies.
    let unanswered = dir.path().join("unanswered.jsonl");
    std::fs::write(
        &unanswered,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n",
    )
    .expect("write");
    let data = unanswered.display().to_string();
    let good = dir.path().join("good.jsonl");
    std::fs::write(&good, format!("{ok}\n")).expect("write");
    let good = good.display().to_string();
    for (data, args, extra, expected) in [
        (
            &data,
            r#"{"sessions": true, "history": "recorded"}"#,
            &[][..],
            "no recorded assistant replies",
        ),
        (
            &good,
            r#"{"history": "recorded"}"#,
            &[][..],
            "--data-args: history needs sessions",
        ),
        (
            &good,
            r#"{"sessions": true, "first_turn": true}"#,
            &[][..],
            "first_turn and sessions do not combine",
        ),
        (
            &good,
            r#"{"sessions": true, "think_time": "gamma:1s"}"#,
            &[][..],
            "--data-args: think_time=gamma:1s",
        ),
        (
            &good,
            r#"{"session_header": "x-session-id"}"#,
            &[][..],
            "--data-args: session_header needs sessions",
        ),
        (
            &good,
            r#"{"sessions": true, "session_header": "Authorization"}"#,
            &[][..],
            "--data-args: session_header=Authorization",
        ),
        (
            &good,
            r#"{"sessions": true}"#,
            &["--request-format", "completions"][..],
            "--data-args: sessions (multi-turn sessions) are for --request-format chat",
        ),
        (
            &good,
            r#"{"sessions": true}"#,
            &["--profile", "sweep"][..],
            "--data turns=… / --data-args sessions: multi-turn sessions run with",
        ),
        (
            &good,
            r#"{"sessions": true}"#,
            &["--shard", "1/2", "--profile", "concurrent", "--rate", "4"][..],
            "--shard: multi-turn sessions",
        ),
    ] {
        let mut a = vec![
            "--target",
            "http://127.0.0.1:9",
            "--data",
            data,
            "--data-args",
            args,
        ];
        a.extend_from_slice(extra);
        let finished = run(&a);
        assert_eq!(finished.code(), 2, "{expected}: {}", finished.stderr);
        let line = finished.stderr.trim();
        assert!(line.contains(expected), "{expected}: {line}");
        assert_eq!(line.lines().count(), 1, "{line}");
    }
}

/// Think time and lateness (ms) per (session, turn), as `think_times` gives them.
type ThinkTimes = BTreeMap<(u64, u32), (f64, f64)>;

/// Runs the conversations of `data` as shuffled sessions under `concurrent 2` with
/// `workers`: (session → the row its turns came from, think times per (session, turn)).
fn shuffled_sessions(data: &Path, workers: &str) -> (BTreeMap<u64, String>, ThinkTimes) {
    let (server, _dir, record) = recording(MockConfig::instant());
    let data = data.display().to_string();
    let finished = Bench::on(&server)
        .concurrent(2)
        .arg("--workers", workers)
        .seed(11)
        .data(&data)
        .arg("--data-sampler", "shuffle")
        .arg(
            "--data-args",
            r#"{"sessions": true, "think_time": "uniform:5ms", "session_id": "user"}"#,
        )
        .request_log("requests.jsonl")
        .outputs("json")
        .run();
    let report = ok_report(&finished);
    let s = report.benchmarks[0].sessions.as_ref().expect("sessions");
    assert_eq!((s.sessions, s.completed, s.turns_completed), (6, 6, 18));
    let mut rows = BTreeMap::new();
    for line in recorded(&record) {
        let body = &line["body"];
        let session = body["user"]
            .as_str()
            .and_then(|u| u.strip_prefix("llmsurge-session-"))
            .and_then(|n| n.parse::<u64>().ok())
            .expect("every turn names its session");
        let m = body["messages"].as_array().expect("messages");
        let first = m[0]["content"].as_str().expect("a user message");
        let row = first.split(',').next().unwrap_or_default().to_string();
        // Every turn of a session comes from the one row.
        let last = m[m.len() - 1]["content"].as_str().unwrap_or_default();
        assert!(last.starts_with(&format!("{row},")), "{last} in {row}");
        assert_eq!(rows.entry(session).or_insert(row.clone()), &row);
    }
    let log = read_log(&finished.dir.path().join("requests.jsonl"));
    (rows, think_times(&log))
}

#[test]
fn conversation_sessions_keep_their_schedule_whatever_the_workers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("six.jsonl");
    let body: String = (0..6)
        .map(|r| {
            let turns: Vec<Value> = (0..3)
                .flat_map(|k| {
                    [
                        json!({"from": "human", "value": format!("row {r}, turn {k}: go on")}),
                        json!({"from": "gpt", "value": "Going on."}),
                    ]
                })
                .collect();
            format!("{}\n", json!({ "conversations": turns }))
        })
        .collect();
    std::fs::write(&path, body).expect("write");
    let (rows1, think1) = shuffled_sessions(&path, "1");
    let (rows2, think2) = shuffled_sessions(&path, "2");
    // Session i is row i of the shuffled order, whichever worker ran it.
    assert_eq!(rows1, rows2);
    assert_eq!(rows1.len(), 6);
    assert_ne!(
        rows1.values().cloned().collect::<Vec<_>>(),
        (0..6).map(|r| format!("row {r}")).collect::<Vec<_>>(),
        "shuffled"
    );
    // Think times are drawn per (session, turn): the same schedule for both.
    assert_eq!(think1.len(), 12, "two think times per session");
    let mut distinct = std::collections::BTreeSet::new();
    for (key, (a, _)) in &think1 {
        let (b, _) = think2[key];
        assert!((a - b).abs() < 0.01, "{key:?}: {a} ms vs {b} ms");
        assert!((0.0..=10.01).contains(a), "{key:?}: {a} ms");
        distinct.insert((a * 1e3).round() as i64);
    }
    assert!(distinct.len() > 3, "{distinct:?}");
}

#[test]
fn a_session_header_carries_each_conversations_id_on_every_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write_conversations(dir.path(), "c.jsonl", "messages", Layout::OpenAi);
    let header = |lines: &[Value]| -> Vec<Option<String>> {
        lines
            .iter()
            .map(|l| l["headers"][SESSION_HEADER].as_str().map(String::from))
            .collect()
    };
    let (lines, _) = replay(
        &file,
        r#"{"sessions": true, "session_header": "X-Session-Id"}"#,
        &[],
    );
    // One user runs session 0 (row 0), then session 1: three turns each.
    let want: Vec<Option<String>> = [0, 0, 0, 1, 1, 1]
        .iter()
        .map(|s| Some(format!("llmsurge-session-{s}")))
        .collect();
    assert_eq!(header(&lines), want);
    let (lines, _) = replay(&file, r#"{"sessions": true}"#, &[]);
    assert!(
        header(&lines).iter().all(Option::is_none),
        "no key, no header"
    );
}

#[test]
fn conversation_sessions_start_at_a_session_rate_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write_conversations(dir.path(), "c.jsonl", "messages", Layout::OpenAi);
    let (lines, report) = replay(
        &file,
        r#"{"sessions": true, "session_header": "x-session-id"}"#,
        &["--profile", "constant", "--rate", "20"],
    );
    // Both rows ran as whole sessions, every turn with its session's id.
    assert_eq!(lines.len(), 6);
    let mut turns: BTreeMap<String, usize> = BTreeMap::new();
    for line in &lines {
        let id = line["headers"][SESSION_HEADER]
            .as_str()
            .expect("the session header");
        *turns.entry(id.to_string()).or_default() += 1;
    }
    assert_eq!(turns.into_values().collect::<Vec<_>>(), [3, 3]);
    let sessions = report.benchmarks[0].sessions.as_ref().expect("sessions");
    assert_eq!((sessions.sessions, sessions.completed), (2, 2));
    assert_eq!(
        sessions.rate_means,
        llmsurge_coordinator::sessions::RateMeans::SessionsPerSecond
    );
}
