//! One server of a sweep: started by `sh -c` in a process group of its own with its
//! output in a log file, waited on until `/health` and `/v1/models` answer, stopped by
//! SIGTERM to the whole group and SIGKILL after a grace period.
//!
//! The server dies with the sweep, even a SIGKILLed one: it is started through a guard
//! (this executable's hidden `__serve-guard`, [`guard_main`]) that reads a pipe whose
//! only writer is the sweep. When the sweep closes it (a stop) or dies (the kernel
//! closes it), the guard stops the server's whole process group, reaps it, and exits.
//! A pipe rather than a parent-death signal for the server: that signal fires when the
//! forking *thread* ends and reaches one process, not the group.

use crate::cli::args::GuardArgs;
use crate::cli::resolve::TargetSpec;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// The guard's subcommand name (hidden).
pub const GUARD: &str = "__serve-guard";

/// A running server command (its guard, which the server's fate is read from).
#[derive(Debug)]
pub struct Server {
    guard: Child,
    /// The pipe's write end: dropped, the guard stops the server.
    lifeline: Option<std::io::PipeWriter>,
    /// The grace the guard gives the group after SIGTERM.
    grace: Duration,
}

/// The pause between two readiness checks.
const READY_POLL: Duration = Duration::from_millis(200);

/// How long a stop may take beyond its grace (the SIGKILLed group reaped) before the
/// guard itself is killed.
const STOP_MARGIN: Duration = Duration::from_secs(10);

impl Server {
    /// Starts `command` under `sh -c` through a guard, stdout and stderr appended to
    /// `log`; `grace` is the stop's pause between SIGTERM and SIGKILL.
    pub fn start(exe: &Path, command: &str, log: &Path, grace: Duration) -> std::io::Result<Self> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let err = out.try_clone()?;
        // Both ends close-on-exec: no other child of the sweep holds the write end, so
        // the guard sees end-of-file exactly when the sweep lets go of it or dies.
        let (reader, writer) = std::io::pipe()?;
        let guard = Command::new(exe)
            .arg(GUARD)
            .arg("--grace-ms")
            .arg(grace.as_millis().to_string())
            .arg("--command")
            .arg(command)
            // Out of the sweep's group: a Ctrl-C or a kill of the sweep's group reaches
            // the sweep, which stops the server through the guard.
            .process_group(0)
            .stdin(reader)
            .stdout(out)
            .stderr(err)
            .spawn()?;
        Ok(Self {
            guard,
            lifeline: Some(writer),
            grace,
        })
    }

    /// How the server command ended, if it did.
    pub fn exited(&mut self) -> Option<String> {
        match self.guard.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot be waited on ({e})")),
        }
    }

    /// Waits until `base_url` (without `/v1`) passes the target check (`check`: its
    /// readiness path, then a model listed on `/v1/models`, or `model` there), at most
    /// `timeout`; an error says why (the server exited, or the last check's failure:
    /// what was asked and what answered). A server that refuses the sweep's credentials is
    /// up: ready when the points carry their own keys (`own_keys`), else an error at once.
    pub async fn wait_ready(
        &mut self,
        base_url: &str,
        model: Option<&str>,
        check: &crate::target::TargetCheck<'_>,
        timeout: Duration,
        own_keys: bool,
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        let spec = TargetSpec::Url(base_url.to_string());
        loop {
            if let Some(status) = self.exited() {
                return Err(format!(
                    "the server command exited ({status}) before it was ready"
                ));
            }
            let error = match crate::target::resolve_target(&spec, &[], model, check, None).await {
                Ok(_) => return Ok(()),
                // Up, but not for the sweep's own key: ready when every point's run
                // carries its own (a bench param); else no wait mends it.
                Err(e) if crate::target::refused_credentials(&e) => {
                    return if own_keys { Ok(()) } else { Err(e.0) };
                }
                Err(e) => e.0,
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "not ready within --ready-timeout {}s: {error}",
                    timeout.as_secs_f64()
                ));
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// Stops the server: SIGTERM to its group; after the grace, SIGKILL to whatever of
    /// it is left. Returns once the group is empty (the guard has reaped it and exited).
    pub async fn stop(mut self) {
        drop(self.lifeline.take());
        let bound = self.grace + STOP_MARGIN;
        if tokio::time::timeout(bound, self.guard.wait())
            .await
            .is_err()
        {
            let _ = self.guard.kill().await;
        }
    }
}

/// Arms `command` to get `signal` when the sweep dies, so a `benchmark run` child does
/// not outlive a SIGKILLed sweep. The death signal follows the forking thread: the sweep
/// forks from its one runtime thread, the process's main thread.
pub fn die_with_sweep(command: &mut Command, signal: Signal) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
    // system calls (prctl, getppid, _exit); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(signal).map_err(std::io::Error::from)?;
            // The sweep may have died before the signal was armed.
            if nix::unistd::getppid() != parent {
                nix::libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// How often the guard looks at its server and its pipe.
const GUARD_POLL: Duration = Duration::from_millis(50);

/// The guard: runs `sh -c COMMAND` as the leader of a new process group and stops that
/// group (SIGTERM, the grace, SIGKILL) when its stdin, the sweep's pipe, reaches its end
/// or when `sh` exits; exits once the group is empty, with `sh`'s status when `sh` ended
/// first (the sweep reads the server's fate from it). Returns the exit code.
pub fn guard_main(args: &GuardArgs) -> i32 {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    use std::os::unix::process::CommandExt;
    // The group's orphans (a server `sh` forked, once `sh` is gone) become the guard's
    // children, so the guard reaps them and the group really empties.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c")
        .arg(&args.command)
        .process_group(0)
        .stdin(Stdio::null());
    let guard = nix::unistd::getpid();
    // SAFETY: between fork and exec, async-signal-safe calls only (prctl, getppid, _exit).
    unsafe {
        sh.pre_exec(move || {
            // A guard killed outright takes `sh` with it, at least.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            if nix::unistd::getppid() != guard {
                nix::libc::_exit(1);
            }
            Ok(())
        });
    }
    let child = match sh.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("llmsurge: the server command cannot start: {e}");
            return crate::exit_codes::RUN_FAILED;
        }
    };
    let Ok(pgid) = i32::try_from(child.id()) else {
        return crate::exit_codes::RUN_FAILED;
    };
    let group = Pid::from_raw(pgid);
    // The pipe is read on a thread of its own; its end is a message (or a closed channel).
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        let _ = tx.send(());
    });
    // `sh`'s status once reaped; every other child (an orphan of the group) is reaped too.
    let mut ended: Option<WaitStatus> = None;
    let reap = |ended: &mut Option<WaitStatus>| {
        while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            match status {
                WaitStatus::StillAlive => break,
                s if s.pid() == Some(group) => *ended = Some(s),
                _ => {}
            }
        }
    };
    loop {
        reap(&mut ended);
        if ended.is_some() {
            break;
        }
        match rx.recv_timeout(GUARD_POLL) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            _ => break,
        }
    }
    // The group is gone once a signal 0 finds no member.
    let empty = || killpg(group, None).is_err();
    let _ = killpg(group, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_millis(args.grace_ms);
    while !empty() && Instant::now() < deadline {
        reap(&mut ended);
        std::thread::sleep(Duration::from_millis(20));
    }
    // Members that outlived the grace get the kill; then wait until none is left.
    let deadline = Instant::now() + STOP_MARGIN;
    while !empty() && Instant::now() < deadline {
        let _ = killpg(group, Signal::SIGKILL);
        reap(&mut ended);
        std::thread::sleep(Duration::from_millis(20));
    }
    match ended {
        Some(WaitStatus::Exited(_, code)) => code,
        Some(WaitStatus::Signaled(_, signal, _)) => {
            // Ended the way `sh` did, so the sweep reads "signal: 9 (SIGKILL)"; no core
            // file of the guard for a SIGSEGV or SIGABRT of the server's.
            use nix::sys::resource::{Resource, setrlimit};
            let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
            // SAFETY: restoring the default action of a signal is always sound.
            let _ =
                unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl) };
            let _ = nix::sys::signal::raise(signal);
            128 + signal as i32
        }
        // Stopped by the sweep.
        _ => crate::exit_codes::OK,
    }
}

/// A free TCP port on 127.0.0.1 for a server's `{port}` (bound, then let go).
pub fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// The last `n` lines of a log file (for a failed configuration's row).
pub fn log_tail(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| llmsurge_proto::Redaction::default().text(l).into_owned())
        .collect()
}
