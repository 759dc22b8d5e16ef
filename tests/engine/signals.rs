//! The fault matrix's process rows: a worker stopped (SIGSTOP), SIGTERM to the
//! coordinator and to the whole process group, Ctrl-C after another stop, the drain
//! timeout, a ramp-up cut short by a stop. (A worker SIGKILLed, the coordinator
//! SIGKILLed, Ctrl-C once and twice: `failures.rs`.) Each run must finish, count the fault
//! as what it was, keep `created = completed + errored + cancelled`, and wait for nothing
//! past its timeout. Signals go out only after an observable event: requests in flight at
//! the mock, or a line on stderr.

use crate::scenario::Bench;
use crate::support::{
    Finished, RUN_BOUND, assert_identity, ended_with, mock, wait_completed, wait_for_children,
    wait_in_flight,
};
use llmsurge::mock::{MockConfig, MockServer};
use llmsurge_coordinator::StopReason;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Short prompts and 20 output tokens: with `busy_mock`, requests of ~300 ms.
const DATA: &str = "prompt_tokens=16,output_tokens=20";

/// Requests of ~300 ms, so several are always in flight.
fn busy_mock() -> MockServer {
    mock(MockConfig {
        ttft_ms: 100.0,
        itl_ms: 10.0,
        output_tokens: 20,
        ..MockConfig::instant()
    })
}

/// How long `stuck_mock`'s requests take.
const STUCK: Duration = Duration::from_secs(30);

/// Requests that take 30 s: only a cancel ends them.
fn stuck_mock() -> MockServer {
    mock(MockConfig {
        ttft_ms: STUCK.as_secs_f64() * 1e3,
        ..MockConfig::instant()
    })
}

pub(super) fn pid(p: u32) -> Pid {
    Pid::from_raw(p as i32)
}

/// Processes of group `pgid` still running (zombies do not count: a zombie runs nothing
/// and holds no socket; reaping it is up to whoever adopted it, here a slow init).
fn live_in_group(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                return false;
            };
            // After the parenthesised command name: state, ppid, pgrp, ...
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map_or(vec![], |(_, r)| r.split_whitespace().collect());
            fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
        })
        .collect()
}

/// Waits until no process of group `pgid` runs any more, for at most `bound`.
pub(super) fn assert_group_gone_within(pgid: u32, bound: Duration) {
    let deadline = Instant::now() + bound;
    loop {
        let live = live_in_group(pgid);
        if live.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes {live:?} of group {pgid} outlived the run by {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Appends everything `pipe` yields to `text`, on a thread of its own.
fn collect(mut pipe: impl Read + Send + 'static, text: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut t = text.lock().expect("text");
            t.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
}

/// A run whose stderr is read as it comes, so a test can wait for a line of it.
pub(super) struct Live {
    pub child: Child,
    dir: tempfile::TempDir,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    stdout: Arc<Mutex<String>>,
}

impl Live {
    /// Starts `bench`, in a process group of its own (as a shell
    /// job is) when `own_group`.
    pub fn start(bench: &Bench, own_group: bool) -> Self {
        let (mut child, dir) = bench.start(|cmd| {
            if own_group {
                cmd.process_group(0);
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let stdout = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stderr.take().expect("stderr"), stderr.clone()),
            collect(child.stdout.take().expect("stdout"), stdout.clone()),
        ];
        Self {
            child,
            dir,
            stderr,
            readers,
            stdout,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until stderr contains `needle`.
    pub fn wait_for_stderr(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.stderr.lock().expect("stderr").contains(needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "stderr never said {needle:?}:\n{}",
                self.stderr.lock().expect("stderr")
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the end of the run, killing it after [`RUN_BOUND`].
    pub fn finish(mut self) -> Finished {
        let deadline = Instant::now() + RUN_BOUND;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("llmsurge did not finish within {RUN_BOUND:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        for r in self.readers {
            let _ = r.join();
        }
        let take = |t: &Arc<Mutex<String>>| t.lock().expect("text").clone();
        Finished {
            status,
            stdout: take(&self.stdout),
            stderr: take(&self.stderr),
            dir: self.dir,
        }
    }
}

/// `concurrent` with `streams` streams on `workers` workers, for at most
/// `max_seconds`.
fn concurrent(url: &str, streams: u32, workers: u32, max_seconds: u32) -> Bench {
    Bench::target(url)
        .concurrent(streams)
        .workers(workers)
        .data(DATA)
        .max_seconds(max_seconds)
}

/// Asserts a run signalled at `sent` ended before its stuck requests could have, its
/// process group `pgid` with it, as a clean cancel of all its `requests`. The bounds come
/// from the stuck requests, not from the machine's speed: a run (or a process) that
/// waited for them would last at least their 30 s.
fn assert_cancelled_before_stuck(run: &Finished, sent: Instant, pgid: u32, requests: u64) {
    assert!(
        sent.elapsed() < STUCK,
        "took {:?}: it waited for the stuck requests",
        sent.elapsed()
    );
    assert_group_gone_within(pgid, STUCK);
    let b = assert_clean_cancel(run);
    assert_eq!(
        (b.requests.created, b.requests.cancelled),
        (requests, requests),
        "{:?}",
        b.requests
    );
}

/// Asserts a clean cancel: the report is written, the benchmark interrupted with a stop
/// time, no worker failed, every request accounted for and the books balanced.
fn assert_clean_cancel(run: &Finished) -> llmsurge_coordinator::BenchmarkResult {
    let report = ended_with(run, llmsurge::exit_codes::INTERRUPTED);
    let b = report.benchmarks[0].clone();
    assert!(b.interrupted, "interrupted");
    assert_eq!(b.stop_reason, Some(StopReason::Interrupted));
    assert!(b.stop_time_s.is_some(), "a stop time");
    assert!(
        b.workers.iter().all(|w| !w.died),
        "no worker failure: {:?}",
        b.workers
    );
    assert!(
        b.errors.iter().all(|e| e.kind != "worker_died"),
        "{:?}",
        b.errors
    );
    assert!(b.audit.mismatches.is_empty(), "{:?}", b.audit);
    // The cancelled requests say so, each with a message.
    let incomplete = &report.request_samples[0].incomplete;
    assert!(!incomplete.is_empty(), "sampled cancelled requests");
    for r in incomplete {
        assert_eq!(r.error_kind.as_deref(), Some("cancelled"), "{r:?}");
        assert!(
            r.error.as_deref().is_some_and(|m| m.contains("cancelled")),
            "{r:?}"
        );
    }
    b
}

#[test]
fn sigterm_to_the_coordinator_cancels_and_records_when() {
    let server = stuck_mock();
    let url = server.base_url();
    let live = Live::start(&concurrent(&url, 3, 1, 60), true);
    wait_in_flight(&server, 3);
    let sent = Instant::now();
    kill(pid(live.pid()), Signal::SIGTERM).expect("SIGTERM");
    let pgid = live.pid();
    let run = live.finish();
    assert_cancelled_before_stuck(&run, sent, pgid, 3);
    assert!(
        run.stderr.contains("terminated (SIGTERM)"),
        "{}",
        run.stderr
    );
}

#[test]
fn sigterm_to_the_process_group_is_a_clean_cancel_not_a_worker_failure() {
    let server = stuck_mock();
    let url = server.base_url();
    let live = Live::start(&concurrent(&url, 4, 2, 60), true);
    wait_for_children(live.pid(), 2);
    wait_in_flight(&server, 4);
    let pgid = live.pid();
    let sent = Instant::now();
    // What `timeout`, systemd and Kubernetes do: the whole group at once.
    killpg(pid(pgid), Signal::SIGTERM).expect("SIGTERM to the group");
    let run = live.finish();
    assert_cancelled_before_stuck(&run, sent, pgid, 4);
}

#[test]
fn a_stopped_worker_is_killed_as_hung_within_its_timeout() {
    let server = busy_mock();
    let url = server.base_url();
    let live = Live::start(
        &concurrent(&url, 4, 2, 60).arg("--worker-timeout", "2s"),
        false,
    );
    let workers = wait_for_children(live.pid(), 2);
    wait_in_flight(&server, 4);
    kill(pid(workers[0]), Signal::SIGSTOP).expect("SIGSTOP the worker");
    let sent = Instant::now();
    let run = live.finish();
    // The 2 s is read from the report's message below; the run's 60 s limit is what a
    // worker never found hung would have waited for.
    assert!(
        sent.elapsed() < Duration::from_secs(30),
        "a 2 s worker timeout took {:?}",
        sent.elapsed()
    );
    let report = ended_with(&run, llmsurge::exit_codes::RUN_FAILED);
    let b = &report.benchmarks[0];
    let dead: Vec<_> = b.workers.iter().filter(|w| w.died).collect();
    assert_eq!(dead.len(), 1, "{:?}", b.workers);
    assert_eq!(dead[0].pid, workers[0]);
    assert!(dead[0].outcome.contains("hung"), "{}", dead[0].outcome);
    let died = b
        .errors
        .iter()
        .find(|e| e.kind == "worker_died")
        .expect("worker_died errors");
    assert!(
        died.count >= 1 && died.samples[0].contains("hung (no heartbeat for 2s)"),
        "{died:?}"
    );
    assert!(
        matches!(&b.stop_reason, Some(StopReason::WorkerFailure { detail }) if detail.contains("hung"))
    );
    assert!(run.stderr.contains("killing it as hung"), "{}", run.stderr);
}

#[test]
fn ctrl_c_after_another_stop_still_marks_the_benchmark_interrupted() {
    // Stuck requests: the running worker's are still at the mock when the time limit
    // cancels them, so the mock sees them go. A short request may have been sent whole
    // into the socket buffers of a client too busy to read it, and the mock would count
    // it completed, never cancelled (as CI's loaded runner once showed).
    let server = stuck_mock();
    let url = server.base_url();
    let live = Live::start(
        &concurrent(&url, 4, 2, 3).arg("--worker-timeout", "60s"),
        true,
    );
    let workers = wait_for_children(live.pid(), 2);
    wait_in_flight(&server, 4);
    // A stopped worker cannot answer the time limit's cancel: the benchmark waits for
    // it (5 s, then kills it) after the limit fired. Ctrl-C comes in that wait.
    kill(pid(workers[0]), Signal::SIGSTOP).expect("SIGSTOP the worker");
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.stats().cancelled == 0 {
        assert!(Instant::now() < deadline, "the time limit never cancelled");
        std::thread::sleep(Duration::from_millis(10));
    }
    kill(pid(live.pid()), Signal::SIGINT).expect("SIGINT");
    let run = live.finish();
    let report = run.report();
    assert_identity(&report);
    let b = &report.benchmarks[0];
    assert!(
        matches!(b.stop_reason, Some(StopReason::MaxSeconds { .. })),
        "{:?}",
        b.stop_reason
    );
    assert!(b.interrupted, "Ctrl-C came: the results are partial");
    assert!(report.metadata.interrupted);
    // The coordinator killed the stopped worker on purpose: cancelled, not errored.
    assert!(
        b.errors.iter().all(|e| e.kind != "worker_died"),
        "{:?}",
        b.errors
    );
}

#[test]
fn the_drain_timeout_cancels_what_did_not_finish() {
    let server = stuck_mock();
    let url = server.base_url();
    let live = Live::start(
        &concurrent(&url, 3, 1, 60).arg("--drain-timeout", "1s"),
        true,
    );
    wait_in_flight(&server, 3);
    let sent = Instant::now();
    kill(pid(live.pid()), Signal::SIGINT).expect("SIGINT");
    let run = live.finish();
    let took = sent.elapsed();
    // At least the 1 s asked for (a timer never fires early), and less than the default
    // 10 s a drain that ignored the flag would have waited (the stuck requests, 30 s).
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "a 1 s drain took {took:?}"
    );
    assert!(
        run.stderr.contains("drain timeout reached"),
        "{}",
        run.stderr
    );
    let b = assert_clean_cancel(&run);
    assert_eq!(
        (b.requests.created, b.requests.cancelled),
        (3, 3),
        "{:?}",
        b.requests
    );
}

#[test]
fn a_stop_during_the_ramp_up_ends_the_waiting_streams() {
    let server = busy_mock();
    let url = server.base_url();
    // Streams start at 0, 5, 10 and 15 s.
    let live = Live::start(&concurrent(&url, 4, 1, 30).rampup("20"), true);
    wait_in_flight(&server, 1);
    let sent = Instant::now();
    kill(pid(live.pid()), Signal::SIGINT).expect("SIGINT");
    let run = live.finish();
    // The drain of one ~300 ms request; before, the worker slept through its ramp-up
    // until the drain timeout (10 s) and the cancel grace (5 s) had it killed: the
    // bound is that drain timeout, not the machine's speed.
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "took {:?}",
        sent.elapsed()
    );
    let report = ended_with(&run, llmsurge::exit_codes::INTERRUPTED);
    let b = &report.benchmarks[0];
    assert!(b.workers.iter().all(|w| !w.died), "{:?}", b.workers);
    assert_eq!(b.requests.cancelled, 0, "{:?}", b.requests);
    assert!(b.audit.mismatches.is_empty(), "{:?}", b.audit);
}

/// Ctrl-C stops queuing: requests held by `--max-concurrency` were never sent, so they
/// end at once, cancelled unsent, and only the requests in flight drain. (They were
/// admitted one by one as the in-flight ones finished, for the whole drain timeout.)
#[test]
fn ctrl_c_ends_the_requests_held_by_the_cap_unsent() {
    let server = busy_mock();
    // 40 req/s against one slot of ~300 ms: the cap holds a growing queue.
    let bench = Bench::on(&server)
        .constant(40)
        .workers(2)
        .max_concurrency(1)
        .data(DATA)
        .max_seconds(60);
    let live = Live::start(&bench, true);
    wait_completed(&server, 2);
    let sent_before = server.stats().requests.chat_completions;
    kill(pid(live.pid()), Signal::SIGINT).expect("SIGINT");
    let run = live.finish();
    let sent_after = server.stats().requests.chat_completions;
    // The one in flight finishes; one sent as the count was read and one let in as the
    // flag was set are all that may follow.
    assert!(
        sent_after <= sent_before + 2,
        "{} requests sent after Ctrl-C",
        sent_after - sent_before
    );
    let b = assert_clean_cancel(&run);
    assert!(
        b.requests.cancelled >= 10 && b.requests.late >= 10,
        "the cap's queue was cancelled: {:?}",
        b.requests
    );
}
