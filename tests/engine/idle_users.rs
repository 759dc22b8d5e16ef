//! Idle users are cheap: users in think time hold no descriptor (no connection, no timer
//! of their own), and their next turns go out at their scheduled instants, in the order
//! they fall due. The figure at scale (40,000 users, RSS, lateness, CPU) is
//! scripts/bench-client.sh's (ONLY=idle).

use super::sessions::read_log;
use crate::scenario::Bench;
use crate::support::{join_truth, mock, ok_report, wait_completed, wait_for_children, wait_run};
use llmsurge::mock::MockConfig;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const USERS: u32 = 2000;
/// Long enough that the pool's unused connections (idle past 4 s) close while every
/// user still thinks.
const THINK_S: u64 = 10;
/// Descriptors a worker keeps whatever its users do (stdio, IPC, shared memory, the
/// runtime's epoll and eventfds, its one timer, a few connections): far below one per
/// user.
const WORKER_FDS: usize = 100;

/// Descriptors the process `pid` holds now.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// 2,000 users send turn 1 at once, then think 10 s. While they think, the worker's
/// descriptors fall to a handful: no connection is held for a user that thinks (the
/// pool closes the connections nobody will reuse), and no timer per user (one timer
/// for the worker). Every turn 2 is then due exactly its think time after turn 1
/// ended, sent no earlier, and the worker sends them in the order they fall due.
#[test]
fn users_in_think_time_hold_no_descriptor_and_their_turns_go_out_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = dir.path().join("truth.jsonl");
    let server = mock(MockConfig {
        truth: Some(truth.clone()),
        ..MockConfig::instant()
    });
    let (child, run_dir) = Bench::on(&server)
        .concurrent(USERS)
        .workers(1)
        .seed(3)
        .data(&format!(
            "samples={},turns=2,prompt_tokens=4,output_tokens=2,think_time={THINK_S}s",
            USERS * 2
        ))
        .request_log("requests.jsonl")
        .outputs("json")
        .start(|_| {});
    let worker = wait_for_children(child.id(), 1)[0];
    // Every user sent turn 1 and got its answer: all of them think now.
    wait_completed(&server, u64::from(USERS));
    let deadline = Instant::now() + Duration::from_secs(THINK_S * 3);
    let mut least = usize::MAX;
    loop {
        let fds = open_fds(worker);
        least = least.min(fds);
        if fds <= WORKER_FDS {
            break;
        }
        let sent = server.stats().requests.chat_completions;
        assert!(
            sent <= u64::from(USERS) && Instant::now() < deadline,
            "while {USERS} users thought, the worker held {least} descriptors or more \
             ({sent} requests sent when the first turn 2 went out)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let finished = wait_run(child, run_dir);
    let report = ok_report(&finished);
    let b = &report.benchmarks[0];
    assert_eq!(
        b.requests.completed,
        u64::from(USERS) * 2,
        "{:?}",
        b.requests
    );
    drop(server);
    let log_path = finished.dir.path().join("requests.jsonl");
    // The mock saw every logged turn, once.
    assert_eq!(join_truth(&log_path, &truth).len(), USERS as usize * 2);
    let log = read_log(&log_path);
    let ends: HashMap<u64, f64> = log
        .iter()
        .filter(|e| e.turn == Some(0))
        .map(|e| (e.session.expect("session"), e.end_time))
        .collect();
    let mut second: Vec<_> = log.iter().filter(|e| e.turn == Some(1)).collect();
    assert_eq!(second.len(), USERS as usize);
    for e in &second {
        let think = e.scheduled_time - ends[&e.session.expect("session")];
        assert!(
            (think - THINK_S as f64).abs() < 1e-5,
            "turn 2 of session {:?} was due {think} s after turn 1 ended",
            e.session
        );
        let start = e.start_time.expect("every turn 2 was sent");
        assert!(start >= e.scheduled_time, "sent early: {e:?}");
    }
    // One worker sends them in the order they fall due, however late its core lets it.
    second.sort_by(|a, b| a.scheduled_time.total_cmp(&b.scheduled_time));
    for pair in second.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(
            a.start_time <= b.start_time,
            "session {:?} (due {}) was sent at {:?}, after session {:?} (due {}) at {:?}",
            a.session,
            a.scheduled_time,
            a.start_time,
            b.session,
            b.scheduled_time,
            b.start_time
        );
    }
}
