//! Everything llmsurge prints to stdout goes through here, so that a closed pipe
//! (`llmsurge benchmark run --dry-run | head`) ends the output quietly instead of
//! panicking with a backtrace, as `println!` does. The command still finishes and exits
//! with its own code; later output is dropped.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once stdout's reader has gone: nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout and flushes. A closed pipe is not an error (see the module);
/// any other failure is reported on stderr once per call.
pub fn print(text: &str) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    // Outside text in tables and summaries can neither drive the terminal nor carry a
    // secret (see [`eprintln`]).
    let scrubbed = llmsurge_proto::redact::scrub(text);
    let inert = llmsurge_proto::inert::terminal_lines(&scrubbed);
    let mut out = std::io::stdout().lock();
    match out.write_all(inert.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
        }
        Err(e) => eprintln!("error: cannot write to stdout: {e}"),
    }
}

/// [`print`] with a newline.
pub fn println(text: &str) {
    print(&format!("{text}\n"));
}

/// Writes `text` and a newline to stderr, inert: the run's secrets scrubbed and every
/// control character but the line breaks shown as an escape, so server text quoted in a
/// message can neither drive the terminal nor carry a key. Every message llmsurge prints
/// to stderr that may quote outside text goes through here (or the log writer).
pub fn eprintln(text: &str) {
    let scrubbed = llmsurge_proto::redact::scrub(text);
    let inert = llmsurge_proto::inert::terminal_lines(&scrubbed);
    let mut err = std::io::stderr().lock();
    // Nothing to do if stderr itself is gone.
    let _ = writeln!(err, "{inert}");
}
