//! Whether the host's wall clock is kept in step by NTP: shards started at one
//! `--start-at` instant are only aligned as well as their clocks agree.

use nix::libc;

/// The kernel's NTP state: `Ok(true)` when it reports the clock synchronised.
fn synchronised() -> std::io::Result<bool> {
    // SAFETY: a zeroed `timex` with `modes = 0` only reads the kernel's state;
    // adjtimex(2) writes into the struct we own and changes nothing.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: `tx` is a valid, exclusively borrowed timex for the duration of the call.
    let state = unsafe { libc::adjtimex(&raw mut tx) };
    if state == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0)
}

/// Why the clock is not known to be synchronised, or `None` when the kernel says it is.
pub fn unsynchronised() -> Option<String> {
    match synchronised() {
        Ok(true) => None,
        Ok(false) => {
            Some("the kernel reports the clock as not synchronised (adjtimex: STA_UNSYNC)".into())
        }
        Err(e) => Some(format!("cannot read the clock's NTP state ({e})")),
    }
}

/// Whether the kernel reports the wall clock as NTP-synchronised: `None` when its state
/// cannot be read (a host fact for the report's metadata).
pub fn ntp_synchronised() -> Option<bool> {
    synchronised().ok()
}
