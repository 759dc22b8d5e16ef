//! Bad input: one line naming the input, exit code 2, nothing started.

use crate::scenario::Bench;
use crate::support::{llmsurge, mock};
use llmsurge::mock::MockConfig;

fn assert_usage_error(run: &crate::support::Finished, needle: &str) {
    assert_eq!(run.code(), 2, "stderr: {}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {:?}", run.stderr);
    assert!(lines[0].starts_with("error: "), "{}", lines[0]);
    assert!(
        lines[0].contains(needle),
        "{:?} should name {needle:?}",
        lines[0]
    );
    assert!(!run.report_path().exists(), "nothing may run");
}

#[test]
fn an_unreachable_target_is_a_usage_error() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let run = Bench::target(&url).max_requests(5).run();
    assert_usage_error(&run, &url);
    // The root cause and what to do, not only reqwest's "client error (Connect)".
    assert!(
        run.stderr
            .contains("connection refused: nothing listens on that port; start the server"),
        "{}",
        run.stderr
    );
}

#[test]
fn bad_data_rate_and_profile_are_usage_errors() {
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    assert_usage_error(
        &Bench::target(&url)
            .data("prompt_tokens=abc,output_tokens=2")
            .run(),
        "--data",
    );
    assert_usage_error(
        &Bench::target(&url)
            .data("prompt_tokens=5,output_tokens=2,colour=red")
            .run(),
        "colour",
    );
    assert_usage_error(&Bench::target(&url).constant("fast").run(), "--rate");
    assert_usage_error(
        &Bench::target(&url)
            .profile("constant")
            .flag("--rate=-3")
            .run(),
        "--rate",
    );
    assert_usage_error(&Bench::target(&url).profile("constant").run(), "--rate");
    assert_usage_error(&Bench::target(&url).profile("warp").run(), "--profile");
    assert_usage_error(&Bench::target(&url).synchronous().rate(3).run(), "--rate");
    assert_usage_error(
        &Bench::target(&url).model("no-such-model").run(),
        "no-such-model",
    );
    assert_usage_error(&Bench::target("ftp://x").max_requests(1).run(), "--target");
    assert_eq!(
        server.stats().requests.chat_completions,
        0,
        "no request was sent"
    );
}

#[test]
fn an_unknown_llmsurge_variable_is_refused() {
    let out = llmsurge()
        .args(["benchmark", "run", "--dry-run"])
        .env("LLMSURGE_MAX_SECOND", "5")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("LLMSURGE_MAX_SECOND") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

#[test]
fn environment_variables_set_flags_and_flags_win() {
    let out = llmsurge()
        .args(["benchmark", "run", "--dry-run", "--rate", "7"])
        .env("LLMSURGE_PROFILE", "constant")
        .env("LLMSURGE_RATE", "3")
        .env("LLMSURGE_MAX_SECONDS", "5")
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan is JSON");
    assert_eq!(plan["profile_plan"]["strategies"][0]["type"], "constant");
    assert_eq!(plan["profile_plan"]["strategies"][0]["rate"], 7.0);
    assert_eq!(plan["limits"]["max_seconds"]["secs"], 5);
}

/// Issue 22 §1.9: a session's turns are built when it starts, so an absurd count is
/// refused before anything runs instead of filling the memory.
#[test]
fn an_absurd_turn_count_is_refused_naming_turns() {
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    assert_usage_error(
        &Bench::target(&url)
            .concurrent(1)
            .data("turns=100000000,prompt_tokens=8,output_tokens=2")
            .run(),
        "turns=100000000",
    );
    assert_eq!(server.stats().requests.chat_completions, 0);
}

/// `session_id=user` fills the OpenAI `user` field, which only chat bodies carry.
#[test]
fn session_id_user_outside_chat_is_refused() {
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    assert_usage_error(
        &Bench::target(&url)
            .format("anthropic")
            .data("turns=2,prompt_tokens=8,output_tokens=2,session_id=user")
            .run(),
        "session_id=user",
    );
    // The same for recorded conversations.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("chats.jsonl");
    let row = r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}"#;
    std::fs::write(&path, format!("{row}\n")).expect("write");
    assert_usage_error(
        &Bench::target(&url)
            .format("responses")
            .data(&path.display().to_string())
            .arg("--data-args", r#"{"sessions": true, "session_id": "user"}"#)
            .run(),
        "session_id=user",
    );
}

/// A trace missing one of its format's columns is named with the file, the line and the
/// column, not refused as "not a trace" (docs/workloads.md promises it).
#[test]
fn a_trace_missing_a_column_names_the_file_line_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    // The first record: line 2 of a CSV (after its header), line 1 of a JSONL.
    for (name, body, column, line) in [
        (
            "burst.csv",
            "Timestamp,Model,Request tokens,Total tokens,Log Type\n5,ChatGPT,472,490,Conversation log\n",
            "Response tokens",
            2,
        ),
        (
            "azure.csv",
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,374\n",
            "GeneratedTokens",
            2,
        ),
        (
            "mooncake.jsonl",
            "{\"timestamp\": 0, \"input_length\": 100, \"hash_ids\": [0]}\n",
            "output_length",
            1,
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, body).expect("write");
        let shown = path.display().to_string();
        let run = Bench::target(&url).profile("replay").data(&shown).run();
        assert_usage_error(&run, &format!("{shown} line {line}"));
        assert!(
            run.stderr.contains(&format!("{column:?}")),
            "{}",
            run.stderr
        );
    }
}

/// A negative number reaches the flag's own check: one line naming the flag, not
/// clap's "unexpected argument".
#[test]
fn negative_numbers_are_refused_by_their_flag() {
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    for (flag, value) in [
        ("--max-seconds", "-5"),
        ("--rate", "-1"),
        ("--max-requests", "-3"),
    ] {
        let run = Bench::target(&url)
            .profile("constant")
            .arg(flag, value)
            .run();
        assert_usage_error(&run, flag);
        assert!(
            !run.stderr.contains("unexpected argument"),
            "{}",
            run.stderr
        );
    }
}

/// `--http2-streams` shares HTTP/2 connections: above 1 without `--http2`, 0, or past its
/// bound (flag or environment) is refused before anything runs.
#[test]
fn http2_streams_without_http2_or_out_of_range_is_a_usage_error() {
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    let run = Bench::target(&url).arg("--http2-streams", 8).run();
    assert_usage_error(&run, "--http2-streams 8");
    assert!(run.stderr.contains("add --http2"), "{}", run.stderr);
    for bad in ["0", "10001", "many"] {
        let run = Bench::target(&url)
            .flag("--http2")
            .arg("--http2-streams", bad)
            .run();
        assert_eq!(run.code(), 2, "{bad}: {}", run.stderr);
        assert!(
            run.stderr.contains("--http2-streams"),
            "{bad}: {}",
            run.stderr
        );
        let run = Bench::target(&url)
            .flag("--http2")
            .run_with_env(&[("LLMSURGE_HTTP2_STREAMS", bad)]);
        assert_eq!(run.code(), 2, "{bad} from the environment: {}", run.stderr);
        assert!(
            run.stderr.contains("--http2-streams"),
            "{bad}: {}",
            run.stderr
        );
    }
}
