//! A closed-loop stream's pause after a request that could not connect.
//!
//! A stream sends its next request at once after the previous one ends (a user of
//! sessions without a think time, its next session after a failed one). When the server
//! is gone (nothing listens, the host is unreachable, the client has no free descriptor)
//! every request fails at its connect within microseconds, and the stream would loop
//! without a wait: thousands of refused connects a second per stream, holding the
//! runtime from the other streams and flooding the books with errors no user would make.
//! So after such a failure the stream waits 10 ms, twice as long after each further one,
//! at most 100 ms, and none again after any request that connected. The cap keeps a
//! stream at ten tries a second or more: a lost server is still judged as before (10
//! errors over 1 s, docs/cli.md's exit code 4), and one that comes back is used again
//! within 100 ms. The wait is the stream's own choice, like a think time: its next
//! request is intended at the failure's end plus the wait, so the wait is neither client
//! queue time nor a send gap.

use std::time::Duration;

/// The first wait after a request that could not connect.
pub const FIRST: Duration = Duration::from_millis(10);
/// The longest wait (see the module's comment).
pub const MOST: Duration = Duration::from_millis(100);

/// The waits of one stream (see the module's comment).
#[derive(Debug, Default)]
pub struct ConnectBackoff {
    /// The wait after the next connect failure; zero before the first one.
    next: Duration,
}

impl ConnectBackoff {
    /// The wait before the stream's next request, given whether the request that just
    /// ended could not connect: `None` (no wait) after any other outcome, which also
    /// starts the waits over.
    pub fn after(&mut self, could_not_connect: bool) -> Option<Duration> {
        if !could_not_connect {
            self.next = Duration::ZERO;
            return None;
        }
        let wait = self.next.max(FIRST);
        self.next = (wait * 2).min(MOST);
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waits_double_up_to_100_ms_and_start_over_after_a_connect() {
        let mut b = ConnectBackoff::default();
        let waits: Vec<u64> = (0..7)
            .map(|_| b.after(true).map_or(0, |w| w.as_millis() as u64))
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 100, 100, 100]);
        assert_eq!(b.after(false), None);
        assert_eq!(b.after(true), Some(FIRST));
    }
}
