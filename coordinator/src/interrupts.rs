//! Ctrl-C and SIGTERM, as the coordinator's dispatcher sees them.
//!
//! The first Ctrl-C stops queuing and lets in-flight requests finish (bounded by the
//! drain timeout); the second cancels them at once. SIGTERM (a supervisor asking us to
//! stop) cancels at once. In every case the report of what completed is still written.
//! Workers ignore SIGINT, so a terminal's Ctrl-C reaching the whole process group is
//! decided here alone. Workers treat SIGTERM as a clean cancel too and say so, so a
//! supervisor's `kill -TERM -PGID` ends the run cleanly whichever process sees it first.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// Stop queuing, drain in-flight requests.
    Drain,
    /// Cancel in-flight requests now (a second Ctrl-C).
    Cancel,
    /// SIGTERM: cancel in-flight requests now.
    Terminate,
}

/// The process's interrupt signals; one per run, kept across benchmarks.
#[derive(Debug)]
pub struct Interrupts {
    int: Signal,
    term: Signal,
    presses: u32,
}

impl Interrupts {
    /// Installs the handlers (replacing the default "terminate" disposition).
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            presses: 0,
        })
    }

    /// Whether the run was interrupted at all.
    pub fn interrupted(&self) -> bool {
        self.presses > 0
    }

    /// Counts a SIGTERM a worker reported before this process saw its own: the run ends.
    pub fn note_terminate(&mut self) {
        self.presses = self.presses.max(1);
    }

    /// Waits for the next signal.
    pub async fn next(&mut self) -> Interrupt {
        let term = tokio::select! {
            _ = self.int.recv() => false,
            _ = self.term.recv() => true,
        };
        self.presses += 1;
        if term {
            Interrupt::Terminate
        } else if self.presses > 1 {
            Interrupt::Cancel
        } else {
            Interrupt::Drain
        }
    }
}
