//! Starting worker processes.
//!
//! A worker is this same executable started again through a hidden subcommand. It
//! inherits two descriptors, named on its command line by number only: its end of a
//! socket pair (the IPC channel) and the shared-memory block. Its configuration comes
//! over the socket, never on the command line. It stays in the coordinator's process
//! group (so a supervisor's `kill -- -PGID` reaches it), gets SIGKILL if the coordinator
//! dies (parent-death signal), and sees EOF on the socket in the same case.

use crate::error::CoordinatorError;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;

/// How to start a worker: the program and the arguments that select the hidden
/// subcommand. `--ipc-fd N --shm-fd M` are appended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The executable (normally `std::env::current_exe()`).
    pub program: PathBuf,
    /// Arguments before the descriptor numbers.
    pub args: Vec<OsString>,
}

/// A started worker.
#[derive(Debug)]
pub struct Spawned {
    /// The child process.
    pub child: tokio::process::Child,
    /// Its process id.
    pub pid: u32,
    /// The coordinator's end of the IPC socket.
    pub socket: tokio::net::UnixStream,
}

/// Starts one worker.
pub fn spawn_worker(cmd: &WorkerCommand, shm_fd: &OwnedFd) -> Result<Spawned, CoordinatorError> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| CoordinatorError::Spawn(e.to_string()))?;
    ours.set_nonblocking(true)
        .map_err(|e| CoordinatorError::Spawn(e.to_string()))?;
    let ipc_raw = theirs.as_raw_fd();
    let shm_raw = shm_fd.as_raw_fd();
    let parent = nix::unistd::getpid();

    let mut command = tokio::process::Command::new(&cmd.program);
    command
        .args(&cmd.args)
        .arg("--ipc-fd")
        .arg(ipc_raw.to_string())
        .arg("--shm-fd")
        .arg(shm_raw.to_string())
        .stdin(Stdio::null())
        // stdout belongs to the coordinator's report; workers only log to stderr.
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
    // system calls (fcntl, prctl, getppid, _exit); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            use nix::fcntl::{FcntlArg, FdFlag, fcntl};
            use std::os::fd::BorrowedFd;
            // Both descriptors were opened close-on-exec; keep exactly these two.
            for raw in [ipc_raw, shm_raw] {
                let fd = BorrowedFd::borrow_raw(raw);
                fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).map_err(std::io::Error::from)?;
            }
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            // The coordinator may have died before the death signal was armed.
            if nix::unistd::getppid() != parent {
                nix::libc::_exit(1);
            }
            Ok(())
        });
    }
    let child = command
        .spawn()
        .map_err(|e| CoordinatorError::Spawn(format!("{}: {e}", cmd.program.display())))?;
    drop(theirs);
    let pid = child.id().unwrap_or(0);
    let socket = tokio::net::UnixStream::from_std(ours)
        .map_err(|e| CoordinatorError::Spawn(e.to_string()))?;
    Ok(Spawned { child, pid, socket })
}
