//! The most concurrent users per SLO tier (`--profile capacity` over sessions with
//! `--slo-tier`), against the mock's capacity model: C slots, each request's TTFT from
//! the moment it gets one, and an inter-token latency of `itl + X × active` (the
//! requests holding a slot). With U users and no think time, U requests are in flight:
//! - up to C users none queues, and each decodes at `1000 / (itl + X × U)` tokens/s, so
//!   an output-speed floor V holds up to U = ⌊(1000 / V − itl) / X⌋ users;
//! - above C one request in U waits for a whole request's service time, so a ceiling on
//!   the mean TTFT a little above the mock's own holds up to U = C.
//!
//! One run answers both tiers from shared probes, each with its binding objective.

use crate::scenario::Bench;
use crate::support::{mock, ok_report};
use llmsurge::mock::MockConfig;
use llmsurge_coordinator::Strategy;

/// Slots of the mock.
const SLOTS: usize = 5;
const TTFT_MS: f64 = 10.0;
const ITL_MS: f64 = 10.0;
const ITL_MS_PER_ACTIVE: f64 = 10.0;
/// The interactive tier's floor on the median output speed, tokens/s.
const SPEED_FLOOR: f64 = 22.0;
/// Each probe's length. A busy CI machine completed only 5 requests for one user in
/// 0.8 s, the fewest a mean is judged on, and one slow request among them left the
/// median output speed undecided (exit 5); 1.5 s gives one user about 15.
const PROBE_SECONDS: &str = "1.5";

fn users_mock() -> MockConfig {
    MockConfig {
        max_concurrency: Some(SLOTS),
        ttft_ms: TTFT_MS,
        itl_ms: ITL_MS,
        itl_ms_per_active: ITL_MS_PER_ACTIVE,
        output_tokens: 4,
        ..MockConfig::instant()
    }
}

/// What the model gives per tier: (name, most users, binding objective).
fn model_answers() -> [(&'static str, f64, &'static str); 2] {
    let by_speed = ((1000.0 / SPEED_FLOOR - ITL_MS) / ITL_MS_PER_ACTIVE).floor();
    [
        (
            "interactive",
            by_speed.min(SLOTS as f64),
            "output_speed_p50>=22tok/s",
        ),
        ("batch", SLOTS as f64, "ttft_mean<=25ms"),
    ]
}

#[test]
fn each_tier_gets_the_most_users_the_mock_model_gives_with_its_binding_objective() {
    let server = mock(users_mock());
    let run = Bench::on(&server)
        .profile("capacity")
        .data("prompt_tokens=16,output_tokens=4,turns=2,think_time=0s")
        .arg(
            "--slo-tier",
            "interactive:output_speed_p50>=22tok/s,error_rate<=1%",
        )
        .arg(
            "--slo-tier",
            "batch:ttft_mean<=25ms,session_duration_p90<=5s",
        )
        .max_seconds(PROBE_SECONDS)
        .outputs("json,console,html,markdown")
        .run();
    let report = ok_report(&run);
    let capacity = report.capacity.expect("a capacity outcome");
    let found: Vec<(String, Option<f64>, Option<String>)> = capacity
        .tiers
        .iter()
        .map(|t| (t.name.clone(), t.value, t.binding.clone()))
        .collect();
    let model = model_answers();
    assert_eq!(found.len(), model.len(), "{capacity:#?}");
    for ((name, value, binding), (m_name, m_users, m_binding)) in found.iter().zip(model) {
        assert_eq!(name, m_name);
        let users = value.unwrap_or_else(|| panic!("{name}: no answer: {capacity:#?}"));
        assert!(
            (users - m_users).abs() <= 0.1 * m_users,
            "{name}: {users} users, the model gives {m_users}: {capacity:#?}"
        );
        assert_eq!(binding.as_deref(), Some(m_binding), "{capacity:#?}");
    }
    // Every probe ran concurrent users, from one up; a load two tiers both asked for ran
    // once (a second run is a confirmation of a failing bound only).
    let users: Vec<u32> = report
        .benchmarks
        .iter()
        .map(|b| match b.strategy {
            Strategy::Concurrent { streams } => streams,
            other => panic!("a user search runs concurrent users, not {other:?}"),
        })
        .collect();
    assert_eq!(users[0], 1, "{users:?}");
    for u in &users {
        assert!(users.iter().filter(|x| *x == u).count() <= 2, "{users:?}");
    }
    assert_eq!(capacity.probes.len(), report.benchmarks.len());
    // Each tier's boundary: its answer passed and the next count failed, confirmed.
    for t in &capacity.tiers {
        let (lo, hi) = t.bracket;
        assert_eq!(Some(lo), t.value);
        assert_eq!(hi, t.value.map(|v| v + 1.0), "{t:#?}");
        assert_eq!(t.failing_runs, 2, "{t:#?}");
    }
    // The mock's own record: its slots were all taken, and requests queued for them.
    let stats = server.stats();
    assert_eq!(stats.peak_active, SLOTS as u64, "{stats:?}");
    assert!(stats.peak_queued >= 1, "{stats:?}");
    // Every format states each tier.
    for needle in ["interactive: ", "batch: "] {
        assert!(run.stdout.contains(needle), "{}", run.stdout);
    }
    assert!(
        run.stdout.contains("on output_speed_p50>=22tok/s"),
        "{}",
        run.stdout
    );
    let dir = run.report_path();
    let dir = dir.parent().expect("the output folder");
    let html = std::fs::read_to_string(dir.join("benchmarks.html")).expect("html");
    assert!(
        html.contains("users-per-tier"),
        "the chart of users per tier"
    );
    let md = std::fs::read_to_string(dir.join("benchmarks.md")).expect("markdown");
    assert!(md.contains("| interactive |"), "{md}");
}

/// Agent traces of two calls, the second sent as the first ends (no recorded gap), each
/// asking 4 tokens: one call in flight per running trace, as one turn per user above.
pub(crate) fn linear_traces(dir: &std::path::Path) -> std::path::PathBuf {
    const T0: u64 = 1_700_000_000_000_000_000;
    const MS: u64 = 1_000_000;
    let call = |id: &str, start: u64, input: u32| {
        serde_json::json!({
            "span_id": id, "parent_span_id": "root", "name": id,
            "start_time": start, "end_time": start + 100 * MS,
            "attributes": {
                "gen_ai.operation.name": "chat",
                "gen_ai.usage.input_tokens": input,
                "gen_ai.usage.output_tokens": 4,
            },
        })
    };
    let text: String = (0..3u64)
        .map(|t| {
            let at = T0 + t * 1000 * MS;
            let root = serde_json::json!({
                "span_id": "root", "name": "agent", "start_time": at,
                "end_time": at + 200 * MS,
                "attributes": {"gen_ai.operation.name": "invoke_agent"},
            });
            let spans = [root, call("a", at, 16), call("b", at + 100 * MS, 40)];
            serde_json::json!({"trace_id": format!("t{t}"), "spans": spans}).to_string() + "\n"
        })
        .collect();
    let path = dir.join("traces.jsonl");
    std::fs::write(&path, text).expect("write the traces");
    path
}

/// `--profile capacity` over agent traces searches the concurrent traces (users), each
/// user replaying one trace after another, with the same tiers as sessions: a running
/// trace holds one call in flight, so the mock's model gives the same answers.
#[test]
fn agent_traces_are_searched_by_concurrent_users_per_tier() {
    let server = mock(users_mock());
    let dir = tempfile::tempdir().expect("temp dir");
    let traces = linear_traces(dir.path());
    let run = Bench::on(&server)
        .profile("capacity")
        .data(&traces.display().to_string())
        .arg(
            "--slo-tier",
            "interactive:output_speed_p50>=22tok/s,error_rate<=1%",
        )
        .arg(
            "--slo-tier",
            "batch:ttft_mean<=25ms,session_duration_p90<=5s",
        )
        .max_seconds(PROBE_SECONDS)
        .run();
    let report = ok_report(&run);
    let capacity = report.capacity.expect("a capacity outcome");
    assert_eq!(capacity.variable.unit(), "users", "{capacity:#?}");
    for (tier, (m_name, m_users, m_binding)) in capacity.tiers.iter().zip(model_answers()) {
        assert_eq!(tier.name, m_name);
        let users = tier
            .value
            .unwrap_or_else(|| panic!("{m_name}: no answer: {capacity:#?}"));
        assert!(
            (users - m_users).abs() <= 0.1 * m_users,
            "{m_name}: {users} traces, the model gives {m_users}: {capacity:#?}"
        );
        assert_eq!(tier.binding.as_deref(), Some(m_binding), "{tier:#?}");
    }
    // The session objective is the traces' duration: measured, never undecided.
    assert!(
        capacity
            .probes
            .iter()
            .all(|p| p.undecided.iter().all(|u| !u.contains("session_duration"))),
        "{capacity:#?}"
    );
    // Every probe ran concurrent users replaying traces (repeated from the first, so a
    // probe of more users than the file's 3 traces still ran one trace per user).
    for b in &report.benchmarks {
        let Strategy::Concurrent { streams } = b.strategy else {
            panic!("a user search runs concurrent users, not {:?}", b.strategy);
        };
        let traces = b.agent_traces.as_ref().expect("the probe ran agent traces");
        assert!(traces.traces >= u64::from(streams), "{streams}: {traces:?}");
    }
    // The mock's own record: its slots were all taken, and calls queued for them.
    let stats = server.stats();
    assert_eq!(stats.peak_active, SLOTS as u64, "{stats:?}");
    assert!(stats.peak_queued >= 1, "{stats:?}");
}

/// Ctrl-C while the first tier is still searching: the second tier has read nothing
/// yet, but the probes measured so far passed counts for it. Each tier is answered from
/// those probes, a lower bound marked cut short, never "none".
#[test]
fn ctrl_c_answers_every_tier_from_the_probes_measured_so_far() {
    use super::signals::Live;
    use nix::sys::signal::{Signal, kill};
    let server = mock(users_mock());
    let live = Live::start(
        &Bench::on(&server)
            .profile("capacity")
            .data("prompt_tokens=16,output_tokens=4,turns=2,think_time=0s")
            .arg(
                "--slo-tier",
                "interactive:output_speed_p50>=22tok/s,error_rate<=1%",
            )
            // Far above the mock's 10 ms TTFT: a busy machine cannot fail 1 or 2 users.
            .arg("--slo-tier", "batch:ttft_mean<=100ms")
            .max_seconds(PROBE_SECONDS)
            .outputs("json,console,markdown"),
        false,
    );
    // Benchmarks 1 and 2 (1 and 2 users, both within both tiers in the mock's model)
    // are measured once the third starts.
    live.wait_for_stderr("[3] ");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(live.pid()).expect("pid"));
    kill(pid, Signal::SIGINT).expect("SIGINT");
    let run = live.finish();
    let report = crate::support::ended_with(&run, 130);
    let capacity = report.capacity.expect("a capacity outcome");
    // The counts every finished probe ran, from the report's own benchmarks.
    let finished: Vec<u32> = report
        .benchmarks
        .iter()
        .filter(|b| !b.interrupted)
        .map(|b| match b.strategy {
            Strategy::Concurrent { streams } => streams,
            other => panic!("a user search runs concurrent users, not {other:?}"),
        })
        .collect();
    assert!(finished.starts_with(&[1, 2]), "{finished:?}");
    for tier in &capacity.tiers {
        let users = tier.value.unwrap_or_else(|| {
            panic!(
                "{}: none, though 1 and 2 users passed: {tier:#?}",
                tier.name
            )
        });
        assert!(users >= 2.0, "{tier:#?}");
    }
    for tier in &capacity.tiers {
        assert!(tier.cut_short, "{tier:#?}");
        assert!(tier.conclusion.contains("a lower bound"), "{tier:#?}");
    }
    // The mock's record: the users it answered ran at once (two requests in flight).
    assert!(server.stats().peak_active >= 2, "{:?}", server.stats());
    assert!(
        run.stdout.contains("batch: at least 2 users (cut short)"),
        "{}",
        run.stdout
    );
}

/// Under `--max-concurrency` a user search offers no more users than the cap lets run:
/// users beyond it would only wait in the client's queue, never at the server. The
/// answer at the cap says it is bounded by it, naming the flag.
#[test]
fn max_concurrency_bounds_the_users_searched_and_the_answer_says_so() {
    let server = mock(users_mock());
    let run = Bench::on(&server)
        .profile("capacity")
        .data("prompt_tokens=16,output_tokens=4,turns=2,think_time=0s")
        // Far above the mock's 10 ms TTFT: the cap, not the tier, must end the search.
        .arg("--slo-tier", "batch:ttft_mean<=100ms")
        .max_concurrency(2)
        .max_seconds(PROBE_SECONDS)
        .run();
    let report = ok_report(&run);
    let capacity = report.capacity.expect("a capacity outcome");
    let tier = &capacity.tiers[0];
    assert_eq!(tier.value, Some(2.0), "{tier:#?}");
    assert!(
        tier.conclusion.contains("--max-concurrency 2")
            && tier.conclusion.contains("bounded by the cap"),
        "{tier:#?}"
    );
    assert!(run.stdout.contains("--max-concurrency 2"), "{}", run.stdout);
    for b in &report.benchmarks {
        assert!(
            matches!(b.strategy, Strategy::Concurrent { streams } if streams <= 2),
            "a probe above the cap: {:?}",
            b.strategy
        );
    }
    // The mock's record: never more than the cap at once.
    assert!(server.stats().peak_active <= 2, "{:?}", server.stats());
}

#[test]
fn users_who_think_are_searched_past_the_cap_on_turns_in_flight() {
    let server = mock(users_mock());
    let run = Bench::on(&server)
        .profile("capacity")
        // A user thinks 50 ms between turns: it holds no request while it thinks.
        .data("prompt_tokens=16,output_tokens=4,turns=3,think_time=0.05s")
        // Far above the mock's 10 ms TTFT, so a busy machine cannot end the search at
        // one or two users.
        .arg("--slo-tier", "batch:ttft_mean<=100ms")
        .max_concurrency(2)
        .max_seconds(PROBE_SECONDS)
        .run();
    let report = ok_report(&run);
    assert!(
        report
            .benchmarks
            .iter()
            .any(|b| matches!(b.strategy, Strategy::Concurrent { streams } if streams > 2)),
        "the search stopped at the cap: {:?}",
        report
            .benchmarks
            .iter()
            .map(|b| b.strategy)
            .collect::<Vec<_>>()
    );
    // The cap still bounds the turns in flight: the mock's record.
    assert!(server.stats().peak_active <= 2, "{:?}", server.stats());
}

#[test]
fn bad_slo_tiers_are_refused_naming_the_flag() {
    for (args, needle) in [
        (
            vec!["--profile", "capacity", "--slo-tier", "fast ttft_p50<=1s"],
            "NAME:CHECKS",
        ),
        (
            vec![
                "--profile",
                "capacity",
                "--slo-tier",
                "a:ttft_p50<=1s",
                "--slo-tier",
                "a:ttft_p50<=2s",
            ],
            "given twice",
        ),
        (
            vec![
                "--profile",
                "concurrent",
                "--rate",
                "2",
                "--slo-tier",
                "a:ttft_p50<=1s",
            ],
            "--profile capacity",
        ),
        (
            vec![
                "--profile",
                "capacity",
                "--slo-tier",
                "a:output_speed_mean>=4",
            ],
            "output_speed",
        ),
        (
            vec![
                "--profile",
                "capacity",
                "--stream",
                "false",
                "--slo-tier",
                "a:output_speed_p10>=5",
            ],
            "needs streamed responses",
        ),
        (
            vec!["--profile", "capacity", "--slo-tier", "a:goodput_per_s>=1"],
            "needs --goodput",
        ),
    ] {
        let run = Bench::target("http://127.0.0.1:9")
            .args_as_written(&args)
            .run();
        assert_eq!(run.code(), 2, "{args:?}: {}", run.stderr);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {:?}", run.stderr);
        assert!(
            lines[0].contains("--slo-tier") && lines[0].contains(needle),
            "{args:?}: {}",
            lines[0]
        );
    }
}

/// A server that cannot keep up with its users fails on `kept_up`: judged on the turns
/// it completed alone, the old search passed 4,096 users on a mock of 5 slots that had
/// completed under a thousand turns in the whole run.
#[test]
fn users_the_server_leaves_unanswered_bind_the_answer_on_kept_up() {
    let server = mock(users_mock());
    let run = Bench::on(&server)
        .profile("capacity")
        .data("prompt_tokens=16,output_tokens=4,turns=2,think_time=0s")
        .arg("--slo-tier", "loose:error_rate<=1%,ttft_mean<=10s")
        .max_seconds("1")
        .run();
    let report = ok_report(&run);
    let capacity = report.capacity.expect("a capacity outcome");
    let tier = &capacity.tiers[0];
    assert_eq!(tier.binding.as_deref(), Some("kept_up"), "{tier:#?}");
    let users = tier.value.expect("an answer");
    // The mock's own record: no user count above the turns it completed in the whole
    // run can have been served (each user waits for its turn's answer).
    let stats = server.stats();
    assert!(
        users < stats.completed as f64,
        "{users} users, the mock completed {} turns: {tier:#?}",
        stats.completed
    );
    assert!(
        stats.peak_queued as f64 >= users - SLOTS as f64,
        "{stats:?}"
    );
}

/// A CI job reads the JUnit file: each tier is a test case, a failure when the tier found
/// no user count (the run's exit 3), with the answer and binding objective otherwise.
#[test]
fn junit_has_one_case_per_tier_failing_when_the_tier_has_no_answer() {
    let server = mock(users_mock());
    let run = Bench::on(&server)
        .profile("capacity")
        .data("prompt_tokens=16,output_tokens=4,turns=2,think_time=0s")
        // Ten times the mock's 10 ms TTFT, so a busy machine cannot fail it at one user
        // (a 25 ms bound did, once in CI); the queue of 5 slots fails it at about 8.
        .arg("--slo-tier", "batch:ttft_mean<=100ms")
        // The mock's TTFT is 10 ms even for one user: no count meets 1 ms.
        .arg("--slo-tier", "never:ttft_mean<=1ms")
        .max_seconds(PROBE_SECONDS)
        .outputs("json,junit")
        .run();
    assert_eq!(run.code(), 3, "{}", run.stderr);
    let report = run.report();
    let capacity = report.capacity.expect("a capacity outcome");
    let batch = capacity.tiers[0]
        .value
        .unwrap_or_else(|| panic!("batch has an answer: {:#?}", capacity.tiers[0]));
    let dir = run.report_path();
    let xml = std::fs::read_to_string(dir.parent().expect("folder").join("benchmarks.junit.xml"))
        .expect("junit");
    assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
    let case = |name: &str| {
        let at = xml
            .find(&format!("name=\"{name}\""))
            .unwrap_or_else(|| panic!("a case for {name}: {xml}"));
        let rest = &xml[at..];
        rest[..rest.find("</testcase>").unwrap_or(rest.len())].to_string()
    };
    let never = case("never");
    assert!(never.contains("<failure"), "{never}");
    let batch_case = case("batch");
    assert!(!batch_case.contains("<failure"), "{batch_case}");
    // The case says what the report says: the answer and its binding objective.
    let binding = capacity.tiers[0]
        .binding
        .as_deref()
        .unwrap_or_else(|| panic!("batch is bound by an objective: {:#?}", capacity.tiers[0]));
    assert!(
        batch_case.contains(&format!("{batch:.0} users"))
            && batch_case.contains(&format!("bound by {}", binding.replace('<', "&lt;"))),
        "{binding}: {batch_case}"
    );
}

/// `benchmark compare` judges each tier's answer: a tier whose users fell below the
/// baseline's answer, failing (confirmed) at a count the baseline met, is a regression
/// naming the tier; a tier on one side only is missing like a benchmark without a
/// partner (`--allow-missing` compares the rest).
#[test]
fn compare_judges_each_tiers_users_and_names_a_missing_tier() {
    use super::compare_pairs::compare;
    let tier = "batch:ttft_mean<=25ms";
    let dir = tempfile::tempdir().expect("temp dir");
    // Each report keeps its first probe (one user on both sides) beside its tiers: the
    // comparison of every probe's metrics takes minutes on a busy machine, and the probes
    // of two searches seldom pair anyway.
    let keep = |report: &std::path::Path, name: &str, tier_name: &str| {
        let mut r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(report).expect("read")).expect("json");
        let first = r["benchmarks"][0].clone();
        r["benchmarks"] = serde_json::json!([first]);
        r["capacity"]["tiers"][0]["name"] = tier_name.into();
        let path = dir.path().join(name);
        std::fs::write(&path, r.to_string()).expect("write");
        path
    };
    // The same model on 5 slots (baseline) and on 3 (current): batch holds up to the
    // slots.
    let mut answers = Vec::new();
    let mut paths = Vec::new();
    for (name, slots) in [("base.json", SLOTS), ("cur.json", 3)] {
        let server = mock(MockConfig {
            max_concurrency: Some(slots),
            ..users_mock()
        });
        let run = Bench::on(&server)
            .profile("capacity")
            .data("prompt_tokens=16,output_tokens=4,turns=2,think_time=0s")
            .arg("--slo-tier", tier)
            .max_seconds("0.8")
            .run();
        let report = ok_report(&run);
        let t = report.capacity.expect("capacity").tiers[0].clone();
        // The mock's model: batch holds up to its slots, all of which it used.
        assert_eq!(t.value, Some(slots as f64), "{t:#?}");
        assert_eq!(server.stats().peak_active, slots as u64);
        answers.push(t);
        paths.push(keep(&run.report_path(), name, "batch"));
    }
    let c = compare(&paths[0], &paths[1], &[]);
    assert_eq!(c.code, 3, "{}\n{}", c.stdout, c.stderr);
    let pair = c.json["pairs"]
        .as_array()
        .expect("pairs")
        .iter()
        .find(|p| p["label"] == "tier batch")
        .cloned()
        .unwrap_or_else(|| panic!("a tier pair: {}", c.json));
    let m = &pair["changes"][0];
    assert_eq!(m["metric"], "capacity_users", "{m}");
    assert_eq!(m["verdict"], "regressed", "{m}");
    assert_eq!(
        (m["baseline"].as_f64(), m["current"].as_f64()),
        (answers[0].value, answers[1].value)
    );
    assert!(
        c.stdout
            .lines()
            .any(|l| l.contains("tier batch") && l.contains("REGRESSED")),
        "{}",
        c.stdout
    );
    // A tier renamed on one side has no partner: the gate fails naming it, and
    // --allow-missing compares the rest.
    let gold = keep(&dir.path().join("base.json"), "gold.json", "gold");
    let c = compare(&paths[0], &gold, &[]);
    assert_eq!(c.code, 3, "{}", c.stderr);
    assert!(
        c.stderr
            .contains("gate failed: tier batch of the baseline has no partner"),
        "{}",
        c.stderr
    );
    assert_eq!(
        c.json["unmatched_current"],
        serde_json::json!(["tier gold"])
    );
    let c = compare(&paths[0], &gold, &["--allow-missing"]);
    assert_eq!(c.code, 0, "{}\n{}", c.stdout, c.stderr);
}
