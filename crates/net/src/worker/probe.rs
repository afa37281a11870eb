//! Quiet connections on the io_uring loop are looked at directly now and then. A multishot
//! receive can miss the end of its connection: with a client that sends a few bytes and
//! resets at once, the kernel (seen on 6.18; liburing issue 1549 reports the same for EOF on
//! Unix sockets) posted the data and then nothing, ever, for the reset. The connection stayed
//! open, holding its buffers and a slot under `-c`. A peek answers what the receive did not:
//! once a connection has been quiet for a second, then 2, 4, ... 64 seconds after each look
//! while the quiet lasts, so an idle pool of clients costs about one system call a minute
//! each.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::Worker;

/// Quiet this long before the first look.
pub(super) const FIRST_PROBE: Duration = Duration::from_secs(1);
/// The wait between looks doubles up to this.
const MAX_PROBE_SHIFT: u32 = 6;

/// What a peek at a socket found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Peek {
    /// Nothing to read, the connection is up.
    Quiet,
    /// Bytes wait that no receive has delivered.
    Data,
    /// The peer closed its side.
    Eof,
    /// The connection is broken (reset, timed out).
    Broken,
}

/// Looks at `fd` without taking anything from it.
pub(crate) fn peek(fd: RawFd) -> Peek {
    let mut byte = 0u8;
    // SAFETY: one byte of writable memory that outlives the call; MSG_PEEK leaves the data
    // in the socket, MSG_DONTWAIT keeps this from blocking on a blocking socket.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => Peek::Eof,
        n if n > 0 => Peek::Data,
        _ => match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Peek::Quiet,
            _ => Peek::Broken,
        },
    }
}

/// The wait before the next look at a connection already looked at `probes` times in this
/// quiet.
fn backoff(probes: u32) -> Duration {
    FIRST_PROBE * (1u32 << probes.min(MAX_PROBE_SHIFT))
}

impl Worker {
    /// Peeks at every ring connection whose armed receive has been quiet long enough; a
    /// connection that turns out closed or broken goes to `ready`, marked so, and its pass
    /// closes it; one with bytes its receive never delivered has that receive cancelled, and
    /// the pass arms a fresh one.
    pub(super) fn probe_quiet(&mut self, ready: &mut Vec<usize>) {
        let now = Instant::now();
        let mut stalled = Vec::new();
        let mut found = 0u64;
        for (t, c) in self.conns.iter_mut() {
            let last = c.last_active;
            let Some(r) = c.ring.as_mut() else {
                continue;
            };
            if !r.recv_armed || r.recv_cancelling || r.sending > 0 {
                // Held on purpose, or a completion is due anyway.
                continue;
            }
            if r.quiet_since != last {
                // Activity since the last look: a new quiet.
                r.quiet_since = last;
                r.probes = 0;
                r.next_probe = last + FIRST_PROBE;
            }
            if now < r.next_probe {
                continue;
            }
            r.probes = r.probes.saturating_add(1);
            r.next_probe = now + backoff(r.probes);
            match peek(r.fd) {
                Peek::Quiet => {}
                Peek::Data => stalled.push(t),
                Peek::Eof => {
                    c.read_closed = true;
                    ready.push(t);
                    found += 1;
                }
                Peek::Broken => {
                    c.read_closed = true;
                    c.close_after_write = true;
                    ready.push(t);
                    found += 1;
                }
            }
        }
        found += stalled.len() as u64;
        if found > 0 {
            self.shared
                .stats
                .uring_missed_ends
                .fetch_add(found, std::sync::atomic::Ordering::Relaxed);
        }
        if !stalled.is_empty() {
            tracing::debug!(
                connections = stalled.len(),
                "receives silent over waiting bytes; re-armed"
            );
        }
        for t in stalled {
            self.hold(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_peek_tells_quiet_data_eof_and_broken_apart_and_takes_nothing() {
        let (mut a, b) = UnixStream::pair().unwrap();
        assert_eq!(peek(b.as_raw_fd()), Peek::Quiet);
        a.write_all(b"x").unwrap();
        assert_eq!(peek(b.as_raw_fd()), Peek::Data);
        assert_eq!(peek(b.as_raw_fd()), Peek::Data, "the byte stays");
        drop(a);
        assert_eq!(peek(b.as_raw_fd()), Peek::Data, "the byte before the end");
        let mut buf = [0u8; 4];
        assert_eq!(std::io::Read::read(&mut &b, &mut buf).unwrap(), 1);
        assert_eq!(peek(b.as_raw_fd()), Peek::Eof);

        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        assert_eq!(peek(s.as_raw_fd()), Peek::Quiet);
        // SO_LINGER 0: the close resets the connection.
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        nix::sys::socket::setsockopt(&c, nix::sys::socket::sockopt::Linger, &linger).unwrap();
        drop(c);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen = peek(s.as_raw_fd());
        while seen == Peek::Quiet && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            seen = peek(s.as_raw_fd());
        }
        // The reset is reported once; after it the socket reads as ended.
        assert_eq!(seen, Peek::Broken);
        assert_eq!(peek(s.as_raw_fd()), Peek::Eof);
    }

    #[test]
    fn looks_back_off_to_once_a_minute() {
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(3), Duration::from_secs(8));
        assert_eq!(backoff(6), Duration::from_secs(64));
        assert_eq!(backoff(40), Duration::from_secs(64));
    }
}
