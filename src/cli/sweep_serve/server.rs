//! One server of a sweep: started by `sh -c` in a process group of its own with its
//! output in a log file, waited on until `/health` and `/v1/models` answer, stopped by
//! SIGTERM to the whole group and SIGKILL after a grace period.

use crate::cli::resolve::TargetSpec;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// A running server command.
#[derive(Debug)]
pub struct Server {
    child: Child,
    /// Its process group (the id of `sh`, the group's leader).
    pgid: i32,
}

/// The pause between two readiness checks.
const READY_POLL: Duration = Duration::from_millis(200);

impl Server {
    /// Starts `command` under `sh -c`, stdout and stderr appended to `log`.
    pub fn start(command: &str, log: &Path) -> std::io::Result<Self> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let err = out.try_clone()?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| std::io::Error::other("the server exited before it had an id"))?;
        Ok(Self { child, pgid })
    }

    /// The process group id (the tests check it is empty after the sweep).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// How the server command ended, if it did.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot be waited on ({e})")),
        }
    }

    /// Waits until `base_url` answers `/health` and lists a model on `/v1/models`, at most
    /// `timeout`; an error says why (the server exited, or the last check's failure).
    pub async fn wait_ready(&mut self, base_url: &str, timeout: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        let spec = TargetSpec::Url(base_url.to_string());
        let tls = llmsurge_proto::http::TlsConfig::default();
        loop {
            if let Some(status) = self.exited() {
                return Err(format!(
                    "the server command exited ({status}) before it was ready"
                ));
            }
            let error = match crate::target::resolve_target(
                &spec,
                &[],
                None,
                None,
                Duration::from_secs(2),
                &tls,
                None,
            )
            .await
            {
                Ok(_) => return Ok(()),
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

    /// SIGTERM to the group; after `grace`, SIGKILL to whatever of it is left. Returns
    /// once the leader is reaped and the group is empty.
    pub async fn stop(mut self, grace: Duration) {
        let group = Pid::from_raw(self.pgid);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = tokio::time::Instant::now() + grace;
        // The group is gone once a signal 0 finds no member (the leader reaped, its
        // children exited).
        loop {
            let _ = self.child.try_wait();
            if killpg(group, None).is_err() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = killpg(group, Signal::SIGKILL);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = self.child.wait().await;
        // Members that outlived the leader get the kill too; then wait until none is left
        // (a killed process leaves the group once its parent, or init, reaps it).
        for _ in 0..250 {
            if killpg(group, None).is_err() {
                return;
            }
            let _ = killpg(group, Signal::SIGKILL);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
