//! Open-file limits: thousands of streams need thousands of sockets. llmsurge raises its
//! soft limit to the hard one, and refuses, in one line, streams the hard limit cannot hold.
//! Local ports: streams past the kernel's ephemeral range to one address are warned of.

use crate::scenario::Bench;
use crate::support::{ended_with, mock, wait_run};
use llmsurge::mock::MockConfig;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Starts the child with `RLIMIT_NOFILE` set to `soft`/`hard`.
fn with_nofile(cmd: &mut Command, soft: u64, hard: u64) {
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits;
    // the closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            setrlimit(Resource::RLIMIT_NOFILE, soft, hard).map_err(std::io::Error::from)
        });
    }
}

#[test]
fn streams_past_the_default_soft_limit_run_when_the_hard_limit_allows() {
    // The mock lives in this process and holds the other end of every stream.
    llmsurge_proto::fdlimit::raise_fd_limit().expect("getrlimit");
    let server = mock(MockConfig {
        // Long enough that all 600 streams are open at once.
        ttft_ms: 1500.0,
        output_tokens: 4,
        ..MockConfig::instant()
    });
    let (child, dir) = Bench::on(&server)
        .concurrent(600)
        .max_requests(600)
        .workers(1)
        .data("prompt_tokens=4,output_tokens=4")
        // 256 open files would fail most of the 600 connections with EMFILE.
        .start(|cmd| with_nofile(cmd, 256, 4096));
    let run = wait_run(child, dir);
    let report = ended_with(&run, 0);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 600, "{:?}", b.errors);
    assert!(
        b.throughput.concurrency_peak >= 550,
        "peak {} in flight",
        b.throughput.concurrency_peak
    );
}

#[test]
fn streams_beyond_the_hard_limit_are_a_one_line_usage_error() {
    let server = mock(MockConfig::instant());
    let (child, dir) = Bench::on(&server)
        .concurrent(1000)
        .max_requests(5)
        .workers(1)
        .start(|cmd| with_nofile(cmd, 200, 200));
    let run = wait_run(child, dir);
    assert_eq!(run.code(), 2, "stderr: {}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {:?}", run.stderr);
    for needle in [
        "error: ",
        "--rate 1000",
        "1064 open files",
        "200",
        "--workers",
    ] {
        assert!(
            lines[0].contains(needle),
            "{:?} should say {needle:?}",
            lines[0]
        );
    }
    assert!(!run.report_path().exists(), "nothing may run");
    assert_eq!(
        server.stats().requests.chat_completions,
        0,
        "nothing was sent"
    );
}

#[test]
fn thinking_users_beyond_the_hard_limit_run_with_a_warning() {
    // Users in think time hold no socket, so 300 users fit under a limit that holds
    // 136 connections: only the turns in flight need one.
    llmsurge_proto::fdlimit::raise_fd_limit().expect("getrlimit");
    let server = mock(MockConfig::instant());
    let (child, dir) = Bench::on(&server)
        .concurrent(300)
        .rampup("1s")
        .max_requests(600)
        .workers(1)
        // Every user's second turn is due 2 s after its first: all 300 think at once.
        .data("turns=2,think_time=2s,prompt_tokens=4,output_tokens=4")
        .start(|cmd| with_nofile(cmd, 200, 200));
    let run = wait_run(child, dir);
    let report = ended_with(&run, 0);
    let b = &report.benchmarks[0];
    let stats = server.stats();
    assert_eq!(
        stats.requests.chat_completions, 600,
        "the mock saw every turn"
    );
    assert_eq!(b.requests.completed, 600, "{:?}", b.errors);
    assert_eq!(b.requests.errored, 0, "{:?}", b.errors);
    let warned = |text: &str| {
        text.contains("concurrent@300: 300 users in a turn at once would hold 300 sockets")
            && text.contains("200 open files")
    };
    assert!(
        run.stderr.lines().any(warned),
        "the limit is said before the run: {}",
        run.stderr
    );
    assert!(
        b.client.warnings.iter().any(|w| warned(w)),
        "and in the report: {:?}",
        b.client.warnings
    );
}

#[test]
fn thinking_users_past_the_limit_fail_a_turn_and_pause_never_a_flood() {
    // 300 users whose first turns are all in flight at once, under a limit that holds
    // about 140 sockets: the turns without a descriptor fail at once. Each such user
    // pauses its think time before its next session, so the others' turns complete;
    // without the pause the failures looped (100,000 errors, nothing completed).
    llmsurge_proto::fdlimit::raise_fd_limit().expect("getrlimit");
    let server = mock(MockConfig {
        ttft_ms: 300.0,
        output_tokens: 4,
        ..MockConfig::instant()
    });
    let (child, dir) = Bench::on(&server)
        .concurrent(300)
        .max_requests(600)
        .workers(1)
        .data("turns=2,think_time=1s,prompt_tokens=4,output_tokens=4")
        .start(|cmd| with_nofile(cmd, 200, 200));
    let run = wait_run(child, dir);
    assert!(matches!(run.code(), 0 | 1 | 3 | 4), "{}", run.stderr);
    let report = run.report();
    let b = &report.benchmarks[0];
    let stats = server.stats();
    assert_eq!(b.requests.created, 600, "{:?}", b.requests);
    assert_eq!(
        b.requests.completed, stats.requests.chat_completions,
        "every completed turn is one the mock answered"
    );
    assert!(
        b.requests.completed >= 300,
        "most turns complete: {:?} {:?}",
        b.requests,
        b.errors
    );
    assert_eq!(b.requests.completed + b.requests.errored, 600);
    let json = serde_json::to_string(&b.errors).expect("errors");
    assert!(
        b.requests.errored == 0 || json.contains("open files"),
        "each failure says why: {json}"
    );
}

#[test]
fn streams_past_the_ephemeral_port_range_are_warned_before_the_run() {
    // The host's own range, as the kernel gives it: one stream more than it holds.
    let Ok(text) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range") else {
        return; // no /proc: nothing to warn from
    };
    let range: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().expect("a port"))
        .collect();
    let (low, high) = (range[0], range[1]);
    let ports = high - low + 1;
    let streams = u32::try_from(ports + 1).expect("streams");
    // Enough workers that each one's share fits under this host's open-file limit.
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    let per_worker = hard
        .saturating_sub(llmsurge_proto::fdlimit::FD_RESERVE + 16)
        .max(1);
    let workers = u64::from(streams).div_ceil(per_worker);
    if workers > 8 {
        return; // an open-file limit too low to plan this many streams on a small host
    }
    let server = mock(MockConfig::instant());
    // Only 20 requests are ever sent: the warning is about the plan, before the run.
    let run = Bench::on(&server)
        .concurrent(streams)
        .max_requests(20)
        .workers(u32::try_from(workers).expect("workers"))
        .data("prompt_tokens=4,output_tokens=4")
        .run();
    let report = ended_with(&run, 0);
    let b = &report.benchmarks[0];
    assert_eq!(
        b.requests.completed,
        server.stats().requests.chat_completions
    );
    assert_eq!(b.requests.completed, 20, "{:?}", b.errors);
    let warned = |text: &str| {
        text.contains(&format!(
            "--rate {streams} (concurrent@{streams}): up to {streams} connections at once to one server address"
        )) && text.contains(&format!("ip_local_port_range {low} {high}) holds {ports}"))
            && text.contains("Cannot assign requested address")
    };
    let before_run = run
        .stderr
        .lines()
        .take_while(|l| !l.contains("done in"))
        .any(|l| l.starts_with("warning: ") && warned(l));
    assert!(before_run, "warned before the run: {}", run.stderr);
    assert!(
        b.client.warnings.iter().any(|w| warned(w)),
        "and in the report: {:?}",
        b.client.warnings
    );
}

#[test]
fn thinking_users_who_keep_their_connection_beyond_the_hard_limit_are_refused() {
    // With --sticky-connections a user keeps its socket through its think time: 300
    // users hold 300 sockets, which a limit of 200 open files cannot (exit 2, one line).
    let server = mock(MockConfig::instant());
    let (child, dir) = Bench::on(&server)
        .concurrent(300)
        .max_requests(600)
        .workers(1)
        .data("turns=2,think_time=2s,prompt_tokens=4,output_tokens=4")
        .flag("--sticky-connections")
        .start(|cmd| with_nofile(cmd, 200, 200));
    let run = wait_run(child, dir);
    assert_eq!(run.code(), 2, "stderr: {}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {:?}", run.stderr);
    assert!(
        lines[0].contains("--rate 300") && lines[0].contains("364 open files"),
        "{}",
        lines[0]
    );
    assert_eq!(
        server.stats().requests.chat_completions,
        0,
        "nothing was sent"
    );
}

/// `--http2-streams` shares connections: 1,000 streams on connections of 100 need about
/// 10 sockets, so a hard limit of 200 open files holds them (without the flag, the same
/// run is refused, above).
#[test]
fn streams_sharing_http2_connections_need_only_their_connections_files() {
    let server = mock(MockConfig::instant());
    let (child, dir) = Bench::on(&server)
        .flag("--http2")
        .arg("--http2-streams", 100)
        .concurrent(1000)
        .max_requests(1000)
        .workers(1)
        .data("prompt_tokens=4,output_tokens=4")
        .start(|cmd| with_nofile(cmd, 200, 200));
    let run = wait_run(child, dir);
    let report = ended_with(&run, 0);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, 1000, "{:?}", b.errors);
    let c = b.client.connections.clone().expect("connections");
    assert!(c.opened <= 20, "{c:?}");
}
