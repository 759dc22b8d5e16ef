//! Multi-turn sessions end to end: each turn resends the history with the replies that
//! actually streamed back (checked against the mock's `--record` and a second mock of the
//! same seed), think times on schedule, the schedule the same whatever `--workers`, a
//! failed turn ending its session with the rest counted as skipped, `--max-seconds`
//! leaving sessions reported as unfinished, and `constant` / `poisson` starting new
//! sessions on the arrival schedule.

use crate::scenario::Bench;
use crate::support::{Finished, mock, ok_report, recorded, recording};
use llmsurge::mock::MockConfig;
use llmsurge::report::requests::RequestEntry;
use llmsurge_coordinator::sessions::RateMeans;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

pub(crate) fn read_log(path: &Path) -> Vec<RequestEntry> {
    std::fs::read_to_string(path)
        .expect("the request log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each entry parses"))
        .collect()
}

/// A conversation API as the sessions tests read it: where a body keeps its messages,
/// its endpoint, and the reply text of a whole answer.
pub(crate) struct Api {
    list: &'static str,
    path: &'static str,
    text: fn(&Value) -> String,
}

/// The texts of `items`' parts of type `kind`, joined.
fn parts_text(items: &Value, kind: &str) -> String {
    items
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == kind)
        .filter_map(|p| p["text"].as_str())
        .collect()
}

pub(crate) const CHAT: Api = Api {
    list: "messages",
    path: "/v1/chat/completions",
    text: |v| {
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    },
};
const RESPONSES: Api = Api {
    list: "input",
    path: "/v1/responses",
    text: |v| {
        let output = v["output"].as_array().into_iter().flatten();
        output
            .map(|item| parts_text(&item["content"], "output_text"))
            .collect()
    },
};
const ANTHROPIC: Api = Api {
    list: "messages",
    path: "/v1/messages",
    text: |v| parts_text(&v["content"], "text"),
};

/// Sends `body` (made non-streaming) to `api`'s endpoint at `url`; the reply's text.
pub(crate) fn reply_of(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    api: &Api,
    body: &Value,
) -> String {
    let mut body = body.clone();
    body["stream"] = Value::Bool(false);
    if let Some(o) = body.as_object_mut() {
        o.remove("stream_options");
    }
    rt.block_on(async {
        let r = client
            .post(format!("{url}{}", api.path))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).expect("a JSON body"))
            .send()
            .await
            .expect("the second mock answers");
        let bytes = r.bytes().await.expect("a reply");
        let v: Value = serde_json::from_slice(&bytes).expect("a JSON reply");
        (api.text)(&v)
    })
}

/// Checks the recorded requests of one user's two sessions of three turns, in order:
/// every turn resends its session's history unchanged, then the reply actually received,
/// then a new user message. A second mock with the same seed answers request n exactly
/// as the first did: it says what the first sent back, so the carried history is
/// checked word for word.
fn assert_turns_carry_their_replies(lines: &[Value], api: &Api) {
    assert_eq!(lines.len(), 6, "two sessions of three turns");
    let messages = |i: usize| -> Vec<Value> {
        lines[i]["body"][api.list]
            .as_array()
            .expect("messages")
            .clone()
    };
    let twin = mock(MockConfig::instant());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = reqwest::Client::new();
    for (i, line) in lines.iter().enumerate() {
        let reply = reply_of(&rt, &client, &twin.base_url(), api, &line["body"]);
        assert!(!reply.is_empty());
        let turn = i % 3;
        let m = messages(i);
        assert_eq!(m.len(), 2 * turn + 1, "turn {turn}: {m:?}");
        assert_eq!(m[2 * turn]["role"], "user");
        if turn < 2 {
            let next = messages(i + 1);
            assert_eq!(next[..m.len()], m[..], "the history is resent unchanged");
            assert_eq!(next[m.len()]["role"], "assistant");
            assert_eq!(next[m.len()]["content"], reply.as_str(), "request {i}");
            assert_ne!(next[m.len() + 1]["content"], m[2 * turn]["content"]);
        }
    }
}

#[test]
fn each_turn_carries_the_replies_that_actually_streamed() {
    let (server, _dir, path) = recording(MockConfig::instant());
    let finished = Bench::on(&server)
        .synchronous()
        .data("turns=3,prompt_tokens=12,output_tokens=6,session_id=user")
        .max_requests(6)
        .outputs("json,csv,html,md,console")
        .run();
    let report = ok_report(&finished);
    let lines = recorded(&path);
    for (i, line) in lines.iter().enumerate() {
        // Sticky routing: every turn names its session in the OpenAI `user` field.
        assert_eq!(line["body"]["user"], format!("llmsurge-session-{}", i / 3));
    }
    assert_turns_carry_their_replies(&lines, &CHAT);
    let b = &report.benchmarks[0];
    let s = b.sessions.as_ref().expect("a session section");
    assert_eq!(
        (s.sessions, s.completed, s.failed, s.unfinished),
        (2, 2, 0, 0)
    );
    assert_eq!(
        (s.turns_planned, s.turns_completed, s.turns_skipped),
        (6, 6, 0)
    );
    assert_eq!(s.per_turn.len(), 3);
    assert!(
        s.per_turn
            .iter()
            .all(|t| t.requests == 2 && t.ttft_ms.is_some())
    );
    assert!(s.sessions_per_s > 0.0 && s.turns_per_s > s.sessions_per_s);
    assert!(finished.stdout.contains("Sessions"), "{}", finished.stdout);
    let dir = finished.dir.path();
    let md = std::fs::read_to_string(dir.join("benchmarks.md")).expect("md");
    assert!(md.contains("### Sessions"), "{md}");
    let html = std::fs::read_to_string(dir.join("benchmarks.html")).expect("html");
    assert!(html.contains("<h2>Sessions</h2>"), "no HTML session table");
    let csv = finished.csv_first_row();
    let cell = |name: &str| csv.cell(name);
    assert_eq!(cell("sessions.completed"), "2");
    assert_eq!(cell("sessions.turns_completed"), "6");
    assert!(!cell("sessions.turn3.ttft_ms.p50").is_empty());
}

/// The think time before each (session, turn) in a request log: its scheduled send less
/// the previous turn's end; and how late it was sent.
pub(crate) fn think_times(log: &[RequestEntry]) -> BTreeMap<(u64, u32), (f64, f64)> {
    let mut by_turn: HashMap<(u64, u32), &RequestEntry> = HashMap::new();
    for e in log {
        by_turn.insert((e.session.expect("session"), e.turn.expect("turn")), e);
    }
    let mut out = BTreeMap::new();
    for (&(s, t), e) in &by_turn {
        if t == 0 {
            continue;
        }
        let prev = by_turn[&(s, t - 1)];
        let think_ms = (e.scheduled_time - prev.end_time) * 1e3;
        let late_ms = (e.start_time.expect("sent") - e.scheduled_time) * 1e3;
        out.insert((s, t), (think_ms, late_ms));
    }
    out
}

fn logged_sessions(url: &str, workers: &str, data: &str, requests: &str) -> Vec<RequestEntry> {
    let finished = Bench::target(url)
        .concurrent(2)
        .arg("--workers", workers)
        .seed(5)
        .data(data)
        .arg("--max-requests", requests)
        .request_log("requests.jsonl")
        .outputs("json")
        .run();
    ok_report(&finished);
    read_log(&finished.dir.path().join("requests.jsonl"))
}

/// Each turn after the first is due exactly its think time after the previous turn's
/// end (an instant the client computes, not a measurement), is never sent before it,
/// and its lateness is logged and counted as dispatch lag like any slot's. How late
/// turns go out depends on the machine (a woken thread may wait for a core a few ms on a
/// shared box): scripts/bench-timing.sh prints that figure with its target (median under
/// 0.25 ms, nine in ten under 1 ms) on a quiet machine.
#[test]
fn think_times_are_kept_and_each_turns_lateness_is_logged() {
    let server = mock(MockConfig::instant());
    let finished = Bench::on(&server)
        .concurrent(2)
        .seed(5)
        .data("turns=4,prompt_tokens=8,output_tokens=2,think_time=40ms")
        .max_requests(40)
        .request_log("requests.jsonl")
        .outputs("json")
        .run();
    let report = ok_report(&finished);
    let log = read_log(&finished.dir.path().join("requests.jsonl"));
    let thinks = think_times(&log);
    // Two users share 40 slots: a user may start an 11th session, cutting another short.
    assert!(thinks.len() >= 27, "{thinks:?}");
    for (key, (think_ms, late_ms)) in &thinks {
        // The schedule is exact: due 40 ms after the previous turn's end.
        assert!(
            (think_ms - 40.0).abs() < 0.01,
            "{key:?}: scheduled {think_ms} ms after"
        );
        assert!(*late_ms >= 0.0, "{key:?}: sent {late_ms} ms early");
    }
    // The lateness of every turn is its dispatch lag, in the log and in the report.
    for e in &log {
        let lag = e.dispatch_lag_ms.expect("every turn was sent");
        let late = (e.start_time.expect("sent") - e.scheduled_time) * 1e3;
        assert!((lag - late).abs() < 0.01, "{e:?}");
    }
    let b = &report.benchmarks[0];
    assert_eq!(log.len(), 40);
    assert_eq!(b.metrics["dispatch_lag"].successful.count, 40);
}

#[test]
fn the_session_schedule_is_the_same_for_one_and_two_workers() {
    let data = "turns=3,prompt_tokens=8,output_tokens=2,think_time=uniform:5ms";
    let one = mock(MockConfig::instant());
    let log1 = logged_sessions(&one.base_url(), "1", data, "24");
    let two = mock(MockConfig::instant());
    let log2 = logged_sessions(&two.base_url(), "2", data, "24");
    // A session stays on one worker for its whole life.
    let mut owner: HashMap<u64, u32> = HashMap::new();
    for e in &log2 {
        let w = *owner.entry(e.session.expect("session")).or_insert(e.worker);
        assert_eq!(w, e.worker, "session {:?} moved", e.session);
    }
    assert!(owner.values().any(|&w| w == 1), "both workers ran sessions");
    let (t1, t2) = (think_times(&log1), think_times(&log2));
    let common: Vec<_> = t1.keys().filter(|k| t2.contains_key(k)).collect();
    assert!(common.len() >= 10, "{common:?}");
    let mut distinct = std::collections::BTreeSet::new();
    for k in common {
        let (a, b) = (t1[k].0, t2[k].0);
        assert!((a - b).abs() < 0.01, "{k:?}: {a} ms vs {b} ms");
        distinct.insert((a * 1e3).round() as i64);
    }
    assert!(
        distinct.len() > 3,
        "the drawn think times vary: {distinct:?}"
    );
    // The same turns carry the same prompts and output lengths.
    let tokens = |log: &[RequestEntry]| -> HashMap<(u64, u32), u32> {
        log.iter()
            .filter(|e| e.turn == Some(0))
            .map(|e| ((e.session.unwrap_or(0), 0), e.prompt_tokens.unwrap_or(0)))
            .collect()
    };
    let (p1, p2) = (tokens(&log1), tokens(&log2));
    for (k, v) in &p1 {
        if let Some(w) = p2.get(k) {
            assert_eq!(v, w, "{k:?}");
        }
    }
}

#[test]
fn a_failed_turn_ends_its_session_and_the_skipped_turns_are_counted() {
    let server = mock(MockConfig {
        error_rate: 0.3,
        ..MockConfig::instant()
    });
    let finished = Bench::on(&server)
        .synchronous()
        .data("turns=4,prompt_tokens=8,output_tokens=2")
        .max_requests(40)
        .request_log("requests.jsonl")
        .run();
    let report = finished.report();
    let log = read_log(&finished.dir.path().join("requests.jsonl"));
    let mut sessions: BTreeMap<u64, Vec<&RequestEntry>> = BTreeMap::new();
    for e in &log {
        sessions
            .entry(e.session.expect("session"))
            .or_default()
            .push(e);
    }
    let (mut failed, mut skipped) = (0, 0);
    for turns in sessions.values_mut() {
        turns.sort_by_key(|e| e.turn);
        if let Some(i) = turns.iter().position(|e| e.error_kind.is_some()) {
            assert_eq!(i + 1, turns.len(), "no turn is sent after a failed one");
            assert_eq!(turns[i].turn, Some(i as u32));
            failed += 1;
            skipped += 3 - i as u64;
        }
    }
    assert!(failed > 0, "the fault rate failed some turns");
    let s = report.benchmarks[0].sessions.as_ref().expect("sessions");
    assert_eq!(s.failed, failed);
    assert_eq!(s.turns_failed, failed);
    assert_eq!(s.turns_skipped, skipped);
    assert_eq!(
        s.turns_completed + s.turns_failed + s.turns_skipped + s.turns_unfinished,
        s.turns_planned,
        "{s:?}"
    );
    assert_eq!(s.completed + s.failed + s.unfinished, s.sessions);
}

#[test]
fn max_seconds_reports_the_unfinished_sessions() {
    let server = mock(MockConfig::instant());
    let finished = Bench::on(&server)
        .concurrent(2)
        .data("turns=3,prompt_tokens=8,output_tokens=2,think_time=30s")
        .max_seconds(1)
        .run();
    let report = ok_report(&finished);
    let s = report.benchmarks[0].sessions.as_ref().expect("sessions");
    assert_eq!((s.sessions, s.completed, s.unfinished), (2, 0, 2), "{s:?}");
    assert_eq!((s.turns_completed, s.turns_unfinished), (2, 4), "{s:?}");
}

#[test]
fn sessions_refuse_what_they_cannot_run_with_a_usage_error() {
    for (extra, expected) in [
        (&["--profile", "sweep"][..], "--data turns=…"),
        (&["--request-format", "completions"][..], "--data: turns"),
        (
            &["--shard", "1/2", "--profile", "concurrent", "--rate", "4"][..],
            "--shard",
        ),
    ] {
        let finished = Bench::target("http://127.0.0.1:9")
            .data("turns=2,prompt_tokens=8,output_tokens=2")
            .max_requests(4)
            .args_as_written(extra)
            .run();
        assert_eq!(finished.code(), 2, "{extra:?}: {}", finished.stderr);
        let line = finished.stderr.trim();
        assert!(line.contains(expected), "{extra:?}: {line}");
        assert_eq!(line.lines().count(), 1, "{line}");
    }
    for (data, expected) in [
        ("prompt_tokens=8,think_time=gamma:1s", "think_time"),
        (
            "prompt_tokens=8,output_tokens=2,system_tokens=20",
            "system_tokens needs turns",
        ),
        (
            "turns=2,prompt_tokens=8,output_tokens=2,system_shared=true",
            "system_shared needs system_tokens",
        ),
    ] {
        let finished = Bench::target("http://127.0.0.1:9").data(data).run();
        assert_eq!(finished.code(), 2, "{data}: {}", finished.stderr);
        let line = finished.stderr.trim();
        assert!(line.contains(expected), "{data}: {line}");
        assert!(line.contains("--data"), "{data}: {line}");
        assert_eq!(line.lines().count(), 1, "{line}");
    }
}

/// Each session's turn-1 entry of a request log, by session id.
fn first_turns(log: &[RequestEntry]) -> BTreeMap<u64, &RequestEntry> {
    log.iter()
        .filter(|e| e.turn == Some(0))
        .map(|e| (e.session.expect("session"), e))
        .collect()
}

/// A CSV report's cell of the first row.
fn csv_cell(finished: &Finished, name: &str) -> String {
    finished.csv_first_row().cell(name)
}

#[test]
fn constant_rate_starts_new_sessions_on_the_arrival_schedule() {
    let server = mock(MockConfig::instant());
    // 20 new sessions a second; 120 samples of 3 turns make 40 sessions: 2 s of starts.
    let finished = Bench::on(&server)
        .constant(20)
        .data("turns=3,prompt_tokens=8,output_tokens=2,think_time=20ms,samples=120")
        .request_log("requests.jsonl")
        .outputs("json,csv,html,md,console")
        .run();
    let report = ok_report(&finished);
    let b = &report.benchmarks[0];
    let s = b.sessions.as_ref().expect("a session section");
    assert_eq!(s.rate_means, RateMeans::SessionsPerSecond);
    assert_eq!(
        (s.sessions, s.completed, s.unfinished),
        (40, 40, 0),
        "{s:?}"
    );
    assert_eq!((s.turns_planned, s.turns_completed), (120, 120), "{s:?}");
    assert_eq!(b.requests.created, 120);
    // Sessions/s and requests/s over the same span, the benchmark's: three requests per
    // session. The span holds every start (the last at 39 × 50 ms) and two think times
    // after it, so the rate cannot beat 40 / 1.99 s; how close it comes depends on the
    // machine, and the schedule below is what pins the rate exactly.
    assert!(
        (s.sessions_per_s - 40.0 / b.duration_s).abs() < 1e-6,
        "{s:?} over {} s",
        b.duration_s
    );
    assert!(s.sessions_per_s <= 40.0 / 1.99, "{s:?}");
    assert!(
        (s.turns_per_s / s.sessions_per_s - 3.0).abs() < 1e-6,
        "{s:?}"
    );

    let log = read_log(&finished.dir.path().join("requests.jsonl"));
    let firsts = first_turns(&log);
    assert_eq!(
        firsts.keys().copied().collect::<Vec<_>>(),
        (0..40).collect::<Vec<u64>>(),
        "session i is arrival i"
    );
    // Session i starts at t0 + i / 20 s: exactly the constant schedule.
    let t0 = firsts[&0].scheduled_time;
    for (&id, e) in &firsts {
        let offset_ms = (e.scheduled_time - t0) * 1e3;
        assert!(
            (offset_ms - id as f64 * 50.0).abs() < 0.01,
            "session {id} due at {offset_ms} ms"
        );
        // Turn 1 is sent at the session's start as any slot of the schedule is (by the
        // pacer thread), never before it, and its lateness is its dispatch lag. That lag
        // is the client's fidelity on a quiet machine (tens of microseconds): a figure of
        // scripts/bench-timing.sh, not of a test on a shared box.
        let lag = e.dispatch_lag_ms.expect("sent");
        let late = (e.start_time.expect("sent") - e.scheduled_time) * 1e3;
        assert!(
            lag >= 0.0 && (lag - late).abs() < 0.01,
            "session {id}: {e:?}"
        );
    }
    // The later turns follow in the worker, each due its think time after the last.
    for ((id, turn), (think_ms, _)) in think_times(&log) {
        assert!(
            (think_ms - 20.0).abs() < 0.01,
            "session {id} turn {turn}: {think_ms} ms"
        );
    }
    // Every output says what --rate meant.
    assert!(
        finished.stdout.contains("new sessions/s"),
        "{}",
        finished.stdout
    );
    let dir = finished.dir.path();
    let md = std::fs::read_to_string(dir.join("benchmarks.md")).expect("md");
    assert!(md.contains("new sessions/s"), "{md}");
    let html = std::fs::read_to_string(dir.join("benchmarks.html")).expect("html");
    // minijinja escapes `/` in HTML text.
    assert!(
        html.contains("new sessions&#x2f;s"),
        "no rate meaning in the HTML"
    );
    assert_eq!(
        csv_cell(&finished, "sessions.rate_means"),
        "sessions_per_second"
    );
    assert_eq!(csv_cell(&finished, "sessions.started"), "40");
}

/// Per (session, turn): the new user message and `max_tokens` the mock received.
type SentTurns = BTreeMap<(String, usize), (String, Value)>;

/// What the mock received for each (session, turn): the turn's new user message and its
/// `max_tokens` (the session from the `user` field, the turn from the user messages).
fn recorded_turns(path: &Path) -> SentTurns {
    let mut out = BTreeMap::new();
    for line in recorded(path) {
        let body = &line["body"];
        let users: Vec<&Value> = body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "user")
            .collect();
        let last = users.last().expect("a user message")["content"]
            .as_str()
            .expect("text")
            .to_string();
        let session = body["user"].as_str().expect("a session id").to_string();
        out.insert(
            (session, users.len() - 1),
            (last, body["max_tokens"].clone()),
        );
    }
    out
}

#[test]
fn rate_based_session_starts_are_the_same_for_one_and_two_workers() {
    let data = "turns=3,prompt_tokens=8,output_tokens=2,output_tokens_stdev=2,think_time=uniform:10ms,samples=60,session_id=user";
    for profile in ["constant", "poisson"] {
        let runs: Vec<(Vec<RequestEntry>, SentTurns)> = ["1", "2"]
            .iter()
            .map(|workers| {
                let (server, _dir, path) = recording(MockConfig::instant());
                let finished = Bench::on(&server)
                    .profile(profile)
                    .rate(40)
                    .arg("--workers", workers)
                    .seed(11)
                    .data(data)
                    .request_log("requests.jsonl")
                    .outputs("json")
                    .run();
                let report = ok_report(&finished);
                let s = report.benchmarks[0].sessions.as_ref().expect("sessions");
                assert_eq!((s.sessions, s.completed), (20, 20), "{profile}: {s:?}");
                (
                    read_log(&finished.dir.path().join("requests.jsonl")),
                    recorded_turns(&path),
                )
            })
            .collect();
        let ((log1, sent1), (log2, sent2)) = (&runs[0], &runs[1]);
        // Which session starts when: the same offsets from session 0's start.
        let (f1, f2) = (first_turns(log1), first_turns(log2));
        assert_eq!(f1.len(), 20);
        assert_eq!(f1.keys().collect::<Vec<_>>(), f2.keys().collect::<Vec<_>>());
        let (a0, b0) = (f1[&0].scheduled_time, f2[&0].scheduled_time);
        let mut starts = Vec::new();
        for (id, e) in &f1 {
            let (a, b) = (
                (e.scheduled_time - a0) * 1e3,
                (f2[id].scheduled_time - b0) * 1e3,
            );
            assert!(
                (a - b).abs() < 0.01,
                "{profile} session {id}: {a} ms vs {b} ms"
            );
            starts.push(a);
        }
        if profile == "poisson" {
            let gaps: Vec<f64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
            assert!(
                gaps.iter().any(|g| (g - 25.0).abs() > 1.0),
                "poisson gaps are not all 1/rate: {gaps:?}"
            );
        }
        // A session stays on one worker; with two, both started sessions.
        let mut owner: HashMap<u64, u32> = HashMap::new();
        for e in log2 {
            let w = *owner.entry(e.session.expect("session")).or_insert(e.worker);
            assert_eq!(w, e.worker, "{profile}: session {:?} moved", e.session);
        }
        assert!(owner.values().any(|&w| w == 1), "{profile}: {owner:?}");
        assert!(owner.values().any(|&w| w == 0), "{profile}: {owner:?}");
        // The same think times before the same turns.
        let (t1, t2) = (think_times(log1), think_times(log2));
        assert_eq!(t1.len(), 40, "{profile}");
        assert_eq!(t1.keys().collect::<Vec<_>>(), t2.keys().collect::<Vec<_>>());
        for (k, (a, _)) in &t1 {
            let b = t2[k].0;
            assert!((a - b).abs() < 0.01, "{profile} {k:?}: {a} ms vs {b} ms");
        }
        // The same new user message (so the same length) and output length per turn.
        assert_eq!(sent1.len(), 60, "{profile}");
        assert_eq!(
            sent1, sent2,
            "{profile}: the turns' prompts and lengths differ"
        );
    }
}

#[test]
fn rate_based_sessions_cut_by_a_limit_are_reported_unfinished() {
    let server = mock(MockConfig::instant());
    // --max-seconds: starts stop at the limit; every session started waits out its 30 s
    // think time, so each is unfinished with one turn done.
    let finished = Bench::on(&server)
        .constant(20)
        .data("turns=3,prompt_tokens=8,output_tokens=2,think_time=30s")
        .max_seconds(1)
        .run();
    let report = ok_report(&finished);
    let s = report.benchmarks[0].sessions.as_ref().expect("sessions");
    // Starts at 0, 50 ms, … 1 s: 21 fall within the second; those due by the stop start.
    crate::support::assert_cut_at_the_limit(
        report.benchmarks[0].stop_time_s,
        s.sessions,
        0.05,
        1.0,
    );
    assert_eq!((s.completed, s.unfinished), (0, s.sessions), "{s:?}");
    // Every session sent its first turn; the ones still in flight when the limit
    // cancelled them (the last start is due as the limit fires; on a busy machine a
    // response can take longer than the 50 ms between starts) are unfinished with the
    // two turns after them, never lost from the books.
    assert_eq!(s.per_turn[0].requests, s.sessions, "{s:?}");
    assert!(
        s.turns_completed <= s.sessions && s.turns_completed > 0,
        "{s:?}"
    );
    assert_eq!(
        s.turns_completed + s.turns_unfinished,
        3 * s.sessions,
        "{s:?}"
    );
    // --max-requests counts turns: once the 10th is claimed no session starts and those
    // under way end unfinished, never dropped from the books.
    let finished = Bench::on(&server)
        .profile("poisson")
        .rate(20)
        .data("turns=3,prompt_tokens=8,output_tokens=2,think_time=50ms")
        .max_requests(10)
        .run();
    let report = ok_report(&finished);
    let b = &report.benchmarks[0];
    let s = b.sessions.as_ref().expect("sessions");
    assert_eq!(b.requests.created, 10);
    assert_eq!(s.turns_completed, 10, "{s:?}");
    assert_eq!(s.turns_planned, 3 * s.sessions, "{s:?}");
    assert_eq!(s.completed + s.unfinished, s.sessions, "{s:?}");
    assert!(s.sessions >= 4, "{s:?}");
}

/// Per session (the `user` field): each turn's messages, in turn order.
fn recorded_sessions(path: &Path) -> BTreeMap<String, Vec<Vec<Value>>> {
    let mut out: BTreeMap<String, Vec<Vec<Value>>> = BTreeMap::new();
    for line in recorded(path) {
        let body = &line["body"];
        let session = body["user"].as_str().expect("a session id").to_string();
        let messages = body["messages"].as_array().expect("messages").clone();
        out.entry(session).or_default().push(messages);
    }
    for turns in out.values_mut() {
        turns.sort_by_key(Vec::len);
    }
    out
}

#[test]
fn a_system_prompt_opens_every_turn_of_its_session() {
    for shared in [false, true] {
        let (server, _dir, path) = recording(MockConfig::instant());
        let data = format!(
            "turns=3,prompt_tokens=8,output_tokens=2,samples=9,session_id=user,system_tokens=50,system_shared={shared}"
        );
        let finished = Bench::on(&server)
            .constant(20)
            .data(&data)
            .request_log("requests.jsonl")
            .outputs("json")
            .run();
        let report = ok_report(&finished);
        let s = report.benchmarks[0].sessions.as_ref().expect("sessions");
        assert_eq!((s.sessions, s.completed), (3, 3), "{s:?}");
        let sessions = recorded_sessions(&path);
        assert_eq!(sessions.len(), 3);
        let mut systems = Vec::new();
        for (id, turns) in &sessions {
            assert_eq!(turns.len(), 3, "{id}");
            let system = &turns[0][0];
            assert_eq!(system["role"], "system", "{id}: {:?}", turns[0]);
            for (k, messages) in turns.iter().enumerate() {
                // The system message, then two messages per earlier turn, then its own.
                assert_eq!(messages.len(), 2 * k + 2, "{id} turn {k}");
                assert_eq!(
                    &messages[0], system,
                    "{id} turn {k}: the same system prompt"
                );
                assert!(messages[1..].iter().all(|m| m["role"] != "system"));
            }
            systems.push(system["content"].as_str().expect("text").to_string());
        }
        systems.dedup();
        assert_eq!(
            systems.len(),
            if shared { 1 } else { 3 },
            "shared: {shared}"
        );
        // Turn 1 went out from the pacer thread at the session's start, the later turns
        // from the worker: each carries the reply that actually came back before it (the
        // twin mock, of the same seed, answers request n as the first one did).
        let twin = mock(MockConfig::instant());
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = reqwest::Client::new();
        for line in recorded(&path) {
            let body = &line["body"];
            let id = body["user"].as_str().expect("a session id");
            let turn = body["messages"].as_array().expect("messages").len() / 2 - 1;
            let reply = reply_of(&rt, &client, &twin.base_url(), &CHAT, body);
            if let Some(next) = sessions[id].get(turn + 1) {
                let carried = &next[2 * turn + 2];
                assert_eq!(carried["role"], "assistant");
                assert_eq!(carried["content"], reply.as_str(), "{id} turn {turn}");
            }
        }
        // The system prompt has exactly its tokens under the run's tokenizer (cl100k):
        // turn 1 sends the system prompt's 50 and the user message's 8. (The mock's own
        // tokenizer counts about as many, but not exactly, for every seed's text.)
        let cl100k = tiktoken_rs::cl100k_base().expect("cl100k");
        for (id, turns) in &sessions {
            let count = |m: &Value| {
                cl100k
                    .encode_ordinary(m["content"].as_str().expect("text"))
                    .len()
            };
            assert_eq!((count(&turns[0][0]), count(&turns[0][1])), (50, 8), "{id}");
        }
    }
}

#[test]
fn each_turn_carries_the_whole_replies_when_not_streamed() {
    let (server, _dir, path) = recording(MockConfig::instant());
    let finished = Bench::on(&server)
        .synchronous()
        .stream(false)
        .data("turns=3,prompt_tokens=12,output_tokens=6,session_id=user")
        .max_requests(6)
        .outputs("json")
        .run();
    let report = ok_report(&finished);
    let lines = recorded(&path);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["body"]["stream"], false, "request {i} is not streamed");
        assert_eq!(line["body"]["user"], format!("llmsurge-session-{}", i / 3));
    }
    assert_turns_carry_their_replies(&lines, &CHAT);
    let s = report.benchmarks[0].sessions.as_ref().expect("sessions");
    assert_eq!((s.sessions, s.completed, s.turns_completed), (2, 2, 6));
}

#[test]
fn responses_and_anthropic_sessions_carry_the_replies_received_streamed_or_not() {
    for (format, api) in [("responses", &RESPONSES), ("anthropic", &ANTHROPIC)] {
        for stream in ["true", "false"] {
            let (server, _dir, path) = recording(MockConfig::instant());
            let finished = Bench::on(&server)
                .format(format)
                .arg("--stream", stream)
                .synchronous()
                .data("turns=3,prompt_tokens=12,output_tokens=6")
                .max_requests(6)
                .run();
            let report = ok_report(&finished);
            let lines = recorded(&path);
            for line in &lines {
                assert_eq!(line["endpoint"], api.path, "{format}");
            }
            assert_turns_carry_their_replies(&lines, api);
            let s = report.benchmarks[0].sessions.as_ref().expect("sessions");
            assert_eq!(
                (s.sessions, s.completed, s.turns_completed),
                (2, 2, 6),
                "{format} stream={stream}"
            );
        }
    }
}

/// A multi-turn run cut by `--max-seconds` leaves later turns in flight: the server read
/// their prompts (history included) and sent no usage for them. The client counts each
/// itself (the history as the server counted it, the reply and the new message), so
/// none is of unknown length: the server's prompt count lies within the client's range,
/// and no DISAGREES or warning is reported.
#[test]
fn a_multi_turn_run_cut_off_agrees_with_the_servers_prompt_count() {
    let server = mock(MockConfig {
        ttft_ms: 20.0,
        itl_ms: 5.0,
        ..MockConfig::instant()
    });
    let run = Bench::on(&server)
        .concurrent(4)
        .max_seconds(2)
        .data("turns=6,prompt_tokens=50,output_tokens=10")
        .run();
    let report = ok_report(&run);
    let b = &report.benchmarks[0];
    assert!(
        b.measured_requests.cancelled > 0,
        "{:?}",
        b.measured_requests
    );
    let m = b.server_metrics.as_ref().expect("the mock's metrics");
    let prompt = m
        .cross_checks
        .iter()
        .find(|c| c.name == "prompt_tokens")
        .unwrap_or_else(|| panic!("a prompt cross-check: {:?}", m.warnings));
    // The server counted the prompts the mock's /stats says it read.
    assert_eq!(prompt.server, server.stats().prompt_tokens as f64);
    assert_eq!(prompt.unknown_requests, 0, "{prompt:?}");
    assert!(prompt.agrees, "{prompt:?}: {:?}", m.warnings);
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    assert!(!run.stdout.contains("DISAGREES"), "{}", run.stdout);
}
