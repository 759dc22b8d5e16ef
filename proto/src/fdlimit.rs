//! The open-file limit every process of a worker group needs for its connections.
//!
//! Each open stream holds a socket, so 10,000 streams need 10,000 descriptors in the
//! process that holds them. Linux starts processes with a soft `RLIMIT_NOFILE` of 1,024
//! and usually a much higher hard limit, which an unprivileged process may raise its soft
//! limit to. The coordinator and every worker raise theirs at startup; the coordinator
//! refuses a plan whose streams cannot fit under the hard limit, with a message that says
//! so, instead of letting connections fail one by one with "Too many open files".

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Descriptors a process keeps besides its connections: stdio, the IPC socket, the
/// shared-memory block, the runtime's epoll and eventfds, report files, the DNS resolver.
pub const FD_RESERVE: u64 = 64;

/// The kernel's default ceiling on open files per process (`fs.nr_open`).
const NR_OPEN_DEFAULT: u64 = 1 << 20;

/// The open-file limits of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdLimit {
    /// The limit in force.
    pub soft: u64,
    /// The most the soft limit may be raised to without privileges.
    pub hard: u64,
}

/// A plan needs more descriptors than the hard limit allows.
#[derive(Debug, thiserror::Error)]
#[error(
    "needs {needed} open files per worker process, but the hard limit of open files is {hard} (ulimit -Hn); raise it (ulimit -Hn as root, or LimitNOFILE= for a service) or spread the connections over more --workers"
)]
pub struct FdLimitError {
    /// Descriptors the plan needs in one process.
    pub needed: u64,
    /// The hard limit.
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the limits now in force.
/// A failure leaves the limit as it was (and says what it is).
pub fn raise_fd_limit() -> Result<FdLimit, nix::Error> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    // An unlimited hard limit still stops at the kernel's `fs.nr_open` (2^20 by default).
    for target in [hard, hard.min(NR_OPEN_DEFAULT)] {
        if soft >= target {
            break;
        }
        if setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
            return Ok(FdLimit { soft: target, hard });
        }
    }
    Ok(FdLimit { soft, hard })
}

/// Makes room for `connections` sockets in this process: raises the soft limit to the
/// hard one, and fails when even the hard limit is too low.
pub fn ensure_fd_capacity(connections: u64) -> Result<FdLimit, FdLimitError> {
    let needed = connections.saturating_add(FD_RESERVE);
    // When the limit cannot be read, let the run go on: the sockets will tell.
    let Ok(limit) = raise_fd_limit() else {
        return Ok(FdLimit {
            soft: u64::MAX,
            hard: u64::MAX,
        });
    };
    if limit.hard < needed {
        return Err(FdLimitError {
            needed,
            hard: limit.hard,
        });
    }
    Ok(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limit = raise_fd_limit().expect("getrlimit");
        assert!(limit.soft == limit.hard || limit.soft == NR_OPEN_DEFAULT);
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        assert_eq!((soft, hard), (limit.soft, limit.hard));
    }

    #[test]
    fn a_need_above_the_hard_limit_is_refused_with_both_numbers() {
        let limit = raise_fd_limit().expect("getrlimit");
        assert!(ensure_fd_capacity(10).is_ok());
        if limit.hard < u64::MAX - FD_RESERVE {
            let err = ensure_fd_capacity(limit.hard).expect_err("over the hard limit");
            let message = err.to_string();
            assert!(message.contains(&limit.hard.to_string()), "{message}");
            assert!(
                message.contains(&(limit.hard + FD_RESERVE).to_string()),
                "{message}"
            );
            assert!(!message.contains('\n'));
        }
    }
}
