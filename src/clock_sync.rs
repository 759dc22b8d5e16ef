//! Whether the host's wall clock is kept in step by NTP: shards started at one
//! `--start-at` instant are only aligned as well as their clocks agree.

use nix::libc;

/// Why the clock is not known to be synchronised, or `None` when the kernel says it is.
pub fn unsynchronised() -> Option<String> {
    // SAFETY: a zeroed `timex` with `modes = 0` only reads the kernel's state;
    // adjtimex(2) writes into the struct we own and changes nothing.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: `tx` is a valid, exclusively borrowed timex for the duration of the call.
    let state = unsafe { libc::adjtimex(&raw mut tx) };
    if state == -1 {
        return Some(format!(
            "cannot read the clock's NTP state ({})",
            std::io::Error::last_os_error()
        ));
    }
    if state == libc::TIME_ERROR || tx.status & libc::STA_UNSYNC != 0 {
        return Some(
            "the kernel reports the clock as not synchronised (adjtimex: STA_UNSYNC)".into(),
        );
    }
    None
}
