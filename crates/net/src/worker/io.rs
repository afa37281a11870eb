//! RV and SD for one connection, on either loop: epoll reads and writes the socket here;
//! io_uring has already received (worker/uring.rs) and sends by queueing a request.

use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hkv_proto::output::Output;

use crate::clock::unix_now;
use crate::conn::Conn;
use crate::shared::Shared;

use super::{Worker, READ_CHUNK};

/// Most buffers one vectored write hands the kernel (IOV_MAX is 1024).
const MAX_SLICES: usize = 64;

/// Most bytes of a staged data block one pass receives from one connection.
const STAGED_READ_PER_PASS: usize = 4 << 20;

impl Worker {
    /// RV: takes what connection `t` sent, up to `cap` bytes of unparsed input.
    pub(super) fn receive(&mut self, t: usize, cap: usize) {
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        if c.ring.is_none() {
            rv_receive(c, cap, &self.shared, self.now);
            return;
        }
        c.want_read = false;
        if c.read_closed {
            return;
        }
        if c.unparsed() >= cap {
            // As on epoll: input waits in the socket until this is parsed.
            c.want_read = true;
            self.hold(t);
            return;
        }
        // Below the floor (buffers over their limit) one buffer at a time, as epoll reads
        // one chunk past that cap.
        let once = cap < super::BUFFER_FLOOR;
        self.arm_recv(t, once);
    }

    /// Throttled connections go back to `pending` every `THROTTLE_RETRY`, not at once:
    /// handed straight back, they made every pass start again at once, and a worker spun
    /// at 100% while clients that do not read kept all buffers over their limit (a
    /// hostile probe; regression test in tests/buffer_limits.rs). While the buffers stay over
    /// their limit the wait doubles, up to `THROTTLE_RETRY_MAX`: 900 clients that never
    /// read, each holding a buffer past the floor, kept the limit passed and the workers
    /// at 5% with retries every 5 ms that could not serve them. Returns the time left.
    pub(super) fn throttled_due(&mut self, pending: &mut Vec<usize>) -> Option<Duration> {
        if self.throttled.is_empty() {
            self.throttle_due = None;
            return None;
        }
        let now = Instant::now();
        let due = *self.throttle_due.get_or_insert(now + self.throttle_wait);
        if now < due {
            return Some(due - now);
        }
        self.throttle_due = None;
        let held = self.shared.stats.conn_buffer_bytes.load(Ordering::Relaxed);
        self.throttle_wait = if held > self.shared.config.conn_buffer_limit {
            (self.throttle_wait * 2).min(super::THROTTLE_RETRY_MAX)
        } else {
            super::THROTTLE_RETRY
        };
        self.throttled.sort_unstable();
        self.throttled.dedup();
        pending.append(&mut self.throttled);
        None
    }

    /// Input from `t` is not wanted for now (buffers over their limit, replies backed up):
    /// on io_uring its receive is cancelled, so the kernel keeps the bytes, not this process.
    pub(super) fn hold(&mut self, t: usize) {
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        let (Some(r), Some(ring)) = (c.ring.as_mut(), self.ring.as_mut()) else {
            return;
        };
        if r.recv_armed && !r.recv_cancelling {
            r.recv_cancelling = true;
            ring.cancel(crate::ring::user_data(crate::ring::Op::Recv, t, r.gen));
        }
    }

    /// SD, and on a broken connection: what is left is dropped and it closes after the pass.
    pub(super) fn send_or_drop(&mut self, t: usize) {
        if self.send(t).is_err() {
            if let Some(c) = self.conns.get_mut(t) {
                c.read_closed = true;
                c.close_after_write = true;
                c.wbuf.discard();
                c.dump = None;
            }
        }
    }

    /// SD: hands `t`'s pending replies to the kernel. Err: the connection is broken.
    pub(super) fn send(&mut self, t: usize) -> Result<(), ()> {
        let Some(c) = self.conns.get_mut(t) else {
            return Ok(());
        };
        match (c.ring.as_mut(), self.ring.as_mut()) {
            (Some(r), Some(ring)) => {
                if r.sending > 0 || c.wbuf.is_sent() {
                    // One send at a time keeps the replies in order.
                    return Ok(());
                }
                let fresh = r
                    .spare
                    .take()
                    .unwrap_or_else(|| Output::with_capacity(4096));
                let out = std::mem::replace(&mut c.wbuf, fresh);
                r.sending = out.pending();
                r.sending_cap = out.capacity() + out.pinned_bytes();
                ring.send(
                    r.fd,
                    out,
                    crate::ring::user_data(crate::ring::Op::Send, t, r.gen),
                );
                Ok(())
            }
            _ => sd_send(c, &self.shared, self.now),
        }
    }
}

/// RV on the epoll loop. `now`: when the loop woke (the connection's activity time).
pub(super) fn rv_receive(c: &mut Conn, cap: usize, shared: &Shared, now: Instant) {
    c.want_read = false;
    let mut got = 0;
    loop {
        if (c.body.is_some() || c.swallow > 0) && got >= STAGED_READ_PER_PASS {
            // A data block going into item memory, or being dropped as it arrives, leaves
            // the buffer empty, so `cap` never stops it: this does, so that one large value
            // cannot hold the pass up.
            c.want_read = true;
            return;
        }
        if c.read_closed {
            return;
        }
        if c.unparsed() >= cap {
            c.want_read = true;
            return;
        }
        c.reserve_read(READ_CHUNK);
        match c.stream.read(&mut c.rbuf[c.rend..]) {
            Ok(0) => {
                c.read_closed = true;
                return;
            }
            Ok(n) => {
                c.rend += n;
                got += n;
                c.drop_swallowed();
                crate::stage::rv_drain_body(c, &shared.engine);
                c.last_active = now;
                if let Some((_, t)) = &c.registered {
                    t.store(u64::from(unix_now()), Ordering::Relaxed);
                }
                shared
                    .stats
                    .bytes_read
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => {
                c.read_closed = true;
                c.close_after_write = true;
                return;
            }
        }
    }
}

/// SD: writes as much pending output as the socket takes.
pub(super) fn sd_send(c: &mut Conn, shared: &Shared, now: Instant) -> Result<(), ()> {
    while !c.wbuf.is_sent() {
        let wrote = if c.wbuf.has_splices() {
            // Values sent from item memory: one writev over the replies and the values.
            let mut slices = Vec::with_capacity(MAX_SLICES);
            c.wbuf.slices(&mut slices, MAX_SLICES);
            c.stream.write_vectored(&slices)
        } else {
            c.stream.write(c.wbuf.first_slice())
        };
        match wrote {
            Ok(0) => return Err(()),
            Ok(n) => {
                c.wbuf.advance(n);
                c.last_active = now;
                shared
                    .stats
                    .bytes_written
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(()),
        }
    }
    if c.stream.wants_write() {
        // TLS records the socket did not take with the last write.
        match c.stream.flush() {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return Err(()),
        }
    }
    Ok(())
}
