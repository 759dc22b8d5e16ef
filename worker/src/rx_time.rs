//! When the bytes of a socket read reached this host: the kernel's receive timestamp
//! (`SO_TIMESTAMPNS`), brought onto the monotonic clock of [`MonoNanos`].
//!
//! A token's instant is taken from it rather than from the moment the client's task got
//! to the bytes. With a thousand streams on one core, the chunks a server sends at once
//! wait their turn in the runtime, and that wait is the client's, not the server's: it
//! showed as ITL spread and TTFT error the server did not have
//! (`scripts/bench-fidelity.sh`). Where the kernel gives no stamp, the read's own
//! instant stands in: so do the first reads after the host's stamps switch on (the
//! kernel does that in deferred work when the first socket asks).
//!
//! What the stamps cannot undo: the kernel merges segments that wait in the receive
//! queue and gives the merged bytes the newest one's stamp, so however small the reads,
//! chunks the client got to after a later chunk of the same connection had arrived all
//! take the instant of the last. The stamps hold the instants while the runtime is late
//! by less than the server's gap between a connection's chunks; past that,
//! `runtime_delay` says how late it ran, and its p99 above `--max-dispatch-lag` marks
//! the client the bottleneck (docs/metrics.md, client health).

use bytes::BytesMut;
use llmsurge_proto::{ClockAnchor, MonoNanos};
use nix::libc;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// A stamp further in the past than this is taken as a clock step (the wall clock set
/// while bytes waited), not as their arrival: the read's own instant is used instead.
const MAX_AGE_NS: u64 = 60_000_000_000;

/// Asks the kernel to stamp what this socket receives; `false` where it refuses (reads
/// then carry their own instant).
pub fn enable(stream: &TcpStream) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt(2) reads `size_of::<c_int>()` bytes from `on`, which lives for
    // the call; the fd is the stream's own, open for the call.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

/// Reads what the socket holds now into `buf`'s spare capacity, without waiting (an
/// error of kind `WouldBlock` when nothing is there, which clears tokio's readiness):
/// the count of bytes read (0 at EOF) and when the last of them reached this host.
pub fn try_read(stream: &TcpStream, buf: &mut BytesMut) -> io::Result<(usize, MonoNanos)> {
    stream.try_io(Interest::READABLE, || recv_stamped(stream, buf))
}

/// [`try_read`] without tokio's readiness: asks the kernel directly, from any thread
/// (tokio's readiness, which only the runtime updates, may not know of bytes yet).
pub fn recv_now(stream: &TcpStream, buf: &mut BytesMut) -> io::Result<(usize, MonoNanos)> {
    recv_stamped(stream, buf)
}

fn recv_stamped(stream: &TcpStream, buf: &mut BytesMut) -> io::Result<(usize, MonoNanos)> {
    let spare = buf.spare_capacity_mut();
    let mut iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    // Room for one SCM_TIMESTAMPNS message (a timespec), aligned for its header.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all zeroes is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: recvmsg(2) writes at most `iov_len` bytes into the spare capacity the iovec
    // points at and at most `msg_controllen` into `control`, both alive for the call.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &raw mut msg, libc::MSG_DONTWAIT) };
    let Ok(n) = usize::try_from(n) else {
        return Err(io::Error::last_os_error());
    };
    // SAFETY: recvmsg(2) initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    let now = MonoNanos::now();
    let at = stamp(&msg).and_then(|wall| monotonic(wall, now));
    Ok((n, at.unwrap_or(now)))
}

/// The receive stamp in `msg`'s control messages, as wall-clock nanoseconds.
fn stamp(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: the CMSG macros walk the control buffer recvmsg(2) filled, within the
    // length it set; a timestamp message's data is one timespec, read unaligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>());
                let secs = u64::try_from(ts.tv_sec).ok()?;
                let nanos = u64::try_from(ts.tv_nsec).ok()?;
                return Some(secs * 1_000_000_000 + nanos);
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

/// How often the offset between the clocks is read again: often enough that a slewing
/// wall clock (at most 500 ppm) moves it by no more than 50 µs meanwhile.
const REANCHOR_NS: u64 = 100_000_000;

/// The wall clock less the monotonic one, ns, shared by every read of the process, and
/// the monotonic instant it was read at (0: never).
static OFFSET_NS: AtomicI64 = AtomicI64::new(0);
static ANCHORED_AT: AtomicU64 = AtomicU64::new(0);

/// The wall clock less the monotonic one, from [`ClockAnchor::now`]'s tightest bracket
/// of monotonic, wall, monotonic reads: a thread preempted between two reads widens its
/// bracket and is not the one kept.
fn measure_offset() -> Option<i64> {
    let anchor = ClockAnchor::now();
    (anchor.unix_nanos > 0)
        .then(|| i64::try_from(i128::from(anchor.unix_nanos) - i128::from(anchor.mono.0)).ok())
        .flatten()
}

/// A wall-clock instant `wall` as a monotonic one, through the process's one offset
/// between the clocks (read again every [`REANCHOR_NS`]). One offset for every read
/// keeps the stamps in the order the kernel gave them; a fresh pair of clock reads per
/// read dated a read early by any preemption between the two, and put two reads
/// microseconds apart out of order by the difference of their brackets. `None` for a
/// stamp older than [`MAX_AGE_NS`] (a clock step); never later than `now`.
fn monotonic(wall: u64, now: MonoNanos) -> Option<MonoNanos> {
    // Acquire pairs with the Release below: an anchor seen set comes with its offset.
    let anchored = ANCHORED_AT.load(Ordering::Acquire);
    let offset = if anchored == 0 || now.0.saturating_sub(anchored) >= REANCHOR_NS {
        let offset = measure_offset()?;
        OFFSET_NS.store(offset, Ordering::Relaxed);
        ANCHORED_AT.store(now.0.max(1), Ordering::Release);
        offset
    } else {
        OFFSET_NS.load(Ordering::Relaxed)
    };
    let mono = u64::try_from(i128::from(wall) - i128::from(offset)).ok()?;
    (now.0.saturating_sub(mono) <= MAX_AGE_NS).then(|| MonoNanos(mono.min(now.0)))
}

/// Waits until the peer's kernel has taken (acknowledged) everything written on `fd`:
/// from then on the bytes are in its receive queue, stamped, whether or not it has read
/// them. Panics after 10 s.
#[cfg(test)]
pub(crate) fn wait_until_taken(fd: std::os::fd::RawFd) {
    let started = std::time::Instant::now();
    loop {
        let mut queued: libc::c_int = 0;
        // SAFETY: ioctl(2) TIOCOUTQ writes one c_int into `queued`, alive for the call.
        let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &raw mut queued) };
        assert_eq!(rc, 0, "TIOCOUTQ: {}", io::Error::last_os_error());
        if queued == 0 {
            return;
        }
        assert!(
            started.elapsed().as_secs() < 10,
            "{queued} bytes never acknowledged"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// A connected pair on loopback: (client, with stamps asked for, server).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("loopback");
        let client = TcpStream::connect(listener.local_addr().expect("loopback"))
            .await
            .expect("loopback");
        let (server, _) = listener.accept().await.expect("loopback");
        assert!(enable(&client), "SO_TIMESTAMPNS refused");
        (client, server)
    }

    /// A stamped pair on which stamps are seen to work, to hold while a test looks for
    /// an arrival instant. The kernel switches receive stamps on for the host when the
    /// first socket asks, through deferred work: bytes that arrive before it has run
    /// carry no stamp, and the read's own instant stands in (half the runs of a fresh
    /// test process read their bytes' late instant). Probes until a read carries an
    /// instant from before it ran; panics when none does within 500 tries.
    pub(crate) async fn stamps_live() -> (TcpStream, TcpStream) {
        let (client, mut server) = pair().await;
        let mut buf = BytesMut::with_capacity(64);
        for _ in 0..500 {
            server.write_all(b"x").await.expect("loopback");
            wait_until_taken(server.as_raw_fd());
            let taken = MonoNanos::now();
            std::thread::sleep(std::time::Duration::from_millis(2));
            client.readable().await.expect("loopback");
            buf.clear();
            let (_, at) = try_read(&client, &mut buf).expect("loopback");
            if at.0 < taken.0 + 1_000_000 {
                return (client, server);
            }
        }
        panic!("the kernel never stamped what loopback received (SO_TIMESTAMPNS)");
    }

    /// The instant a read reports is when its bytes arrived, not when it ran: bytes
    /// written and taken by the kernel before the reader comes carry an instant from
    /// before the reader came.
    /// How far from its bytes' arrival a stamp may read either way (the clocks' offset
    /// is exact within its bracket, microseconds unless every try was preempted); the
    /// tests' point is that it is not the later instant of the read.
    pub(crate) const CLOCK_READS_SLACK_NS: u64 = 1_000_000;

    #[tokio::test]
    async fn a_read_carries_the_instant_its_bytes_arrived_not_its_own() {
        let (client, mut server) = stamps_live().await;

        let before = MonoNanos::now();
        server
            .write_all(b"data: one token\n\n")
            .await
            .expect("loopback");
        wait_until_taken(server.as_raw_fd());
        // The reader comes now, late, as a runtime thread busy with other streams does.
        let came = MonoNanos::now();
        // Busy a while longer, so the read's own instant lies well past any slack.
        std::thread::sleep(std::time::Duration::from_millis(5));
        client.readable().await.expect("loopback");
        let mut buf = BytesMut::with_capacity(64);
        let (n, at) = try_read(&client, &mut buf).expect("loopback");

        assert_eq!(&buf[..n], b"data: one token\n\n");
        // The stamp goes from the wall clock to the monotonic one through an offset read
        // by a bracket of clock reads, exact within the bracket's microseconds. Before
        // the reader came is the point.
        assert!(
            before.0.saturating_sub(CLOCK_READS_SLACK_NS) <= at.0
                && at.0 < came.0 + CLOCK_READS_SLACK_NS,
            "stamp {at:?} not between the write ({before:?}) and the reader's coming ({came:?})"
        );
    }

    #[test]
    fn stamps_convert_by_one_offset_so_they_keep_their_order_and_distance() {
        let now = MonoNanos::now();
        let wall = ClockAnchor::now().unix_nanos;
        let first = monotonic(wall - 2_000_000, now).expect("a fresh stamp");
        let second = monotonic(wall - 1_999_000, now).expect("a fresh stamp");
        assert_eq!(second.0 - first.0, 1_000, "{first:?} {second:?}");
        // Never later than the read itself.
        assert_eq!(monotonic(wall + 10_000_000_000, now), Some(now));
        // A stamp from before a clock step is not an arrival.
        assert_eq!(monotonic(wall - MAX_AGE_NS - 1_000_000_000, now), None);
    }

    #[tokio::test]
    async fn eof_and_an_empty_socket_read_as_the_kernel_says() {
        let (client, server) = pair().await;
        let mut buf = BytesMut::with_capacity(64);
        let err = try_read(&client, &mut buf).expect_err("nothing to read yet");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(server);
        client.readable().await.expect("loopback");
        assert_eq!(try_read(&client, &mut buf).expect("loopback").0, 0);
    }
}
