//! The io_uring loop (docs/network.md): plain TCP and Unix connections receive through
//! multishot receives into the ring's provided buffers and send through queued requests, all
//! of a pass submitted with the wait for the next one (one system call per loop turn). The
//! worker's epoll stays for what is readiness-driven (the accept waker, UDP, TLS
//! connections) and is itself watched through the ring.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::Events;

use crate::clock::unix_now;
use crate::conn::{Conn, RingConn};
use crate::ring::{user_data, Completion, Op, Ring};
use crate::IoMode;

use super::Worker;

/// A sent buffer larger than this is freed rather than kept for the next replies (an idle
/// connection keeps at most this much).
const SPARE_MAX: usize = 64 << 10;
const ENOBUFS: i32 = 105;
const ECANCELED: i32 = 125;

impl Worker {
    /// Makes this worker's ring (on its own thread: the ring accepts requests from the thread
    /// that made it only). A failure here, after the start-up probe succeeded, leaves this
    /// worker on epoll.
    pub(super) fn start_ring(&mut self) {
        if self.io != IoMode::Uring {
            return;
        }
        match Ring::new() {
            Ok(r) => {
                self.shared
                    .stats
                    .ring_buffer_bytes
                    .fetch_add(Ring::fixed_bytes(), Ordering::Relaxed);
                self.shared
                    .stats
                    .uring_workers
                    .fetch_add(1, Ordering::Relaxed);
                self.ring = Some(r);
            }
            Err(e) => {
                tracing::warn!(worker = self.id, error = %e, "io_uring failed; this worker uses epoll");
            }
        }
    }

    /// Waits for work, at most `timeout` (None: until some comes), and adds the connections
    /// that have some to `ready`. On io_uring this also submits everything the last pass
    /// queued.
    pub(super) fn wait(
        &mut self,
        events: &mut Events,
        timeout: Option<Duration>,
        ready: &mut Vec<usize>,
    ) -> io::Result<()> {
        self.close_released();
        let Some(ring) = self.ring.as_mut() else {
            self.poll.poll(events, timeout)?;
            self.now = Instant::now();
            self.collect(events, ready);
            return Ok(());
        };
        if !ring.poll_armed {
            ring.arm_poll(self.poll.as_raw_fd());
        }
        ring.wait(timeout)?;
        self.now = Instant::now();
        let mut done = std::mem::take(&mut self.completions);
        done.clear();
        ring.reap(&mut done);
        for c in &done {
            match c.op {
                Op::Poll => {
                    if let Some(r) = self.ring.as_mut() {
                        r.poll_armed = false;
                    }
                    self.poll_epoll(events, ready)?;
                }
                Op::Recv => self.on_recv(c, ready),
                Op::Send => self.on_send(c, ready),
                Op::Cancel => {}
            }
        }
        self.completions = done;
        Ok(())
    }

    /// Takes every readiness event the epoll holds.
    fn poll_epoll(&mut self, events: &mut Events, ready: &mut Vec<usize>) -> io::Result<()> {
        loop {
            match self.poll.poll(events, Some(Duration::ZERO)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            self.collect(events, ready);
            if events.iter().count() < events.capacity() {
                return Ok(());
            }
        }
    }

    /// Puts an accepted connection on the ring; its first receive is armed by the first pass.
    pub(super) fn ring_adopt(&mut self, conn: &mut Conn) -> io::Result<()> {
        let fd = conn
            .stream
            .completion_fd()
            .ok_or_else(|| io::Error::other("not a plain socket"))?;
        conn.stream.set_blocking()?;
        self.next_gen = self.next_gen.wrapping_add(1);
        conn.ring = Some(RingConn {
            gen: self.next_gen,
            fd,
            recv_armed: false,
            recv_cancelling: false,
            sending: 0,
            sending_cap: 0,
            spare: None,
            quiet_since: conn.last_active,
            probes: 0,
            next_probe: conn.last_active + super::probe::FIRST_PROBE,
        });
        Ok(())
    }

    /// A connection is closing: ends its requests. Their completions still come and are
    /// recognised as stale by the incarnation number; a send's buffer stays the ring's
    /// until then, so the kernel never reads freed memory.
    pub(super) fn ring_release(&mut self, token: usize, r: RingConn) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        if r.recv_armed {
            ring.cancel(user_data(Op::Recv, token, r.gen));
        }
        if r.sending > 0 {
            ring.cancel(user_data(Op::Send, token, r.gen));
        }
    }

    /// Arms `t`'s receive unless one is armed: multishot, or with `once` a single buffer's
    /// worth.
    pub(super) fn arm_recv(&mut self, t: usize, once: bool) {
        let (Some(c), Some(ring)) = (self.conns.get_mut(t), self.ring.as_mut()) else {
            return;
        };
        let Some(r) = c.ring.as_mut() else {
            return;
        };
        if r.recv_armed {
            // Armed, or being cancelled: the cancel's completion brings this connection
            // back to a pass, which arms again.
            return;
        }
        r.recv_armed = true;
        r.recv_cancelling = false;
        let ud = user_data(Op::Recv, t, r.gen);
        if once {
            ring.recv_once(r.fd, ud);
        } else {
            ring.arm_recv(r.fd, ud);
        }
    }

    /// RV on io_uring: the bytes a receive brought are appended to the connection's input.
    fn on_recv(&mut self, c: &Completion, ready: &mut Vec<usize>) {
        let now = self.now;
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        let conn = incarnation(&mut self.conns, c);
        let Some(conn) = conn else {
            // A closed connection's: only the buffer matters.
            if let Some(bid) = c.buffer {
                ring.recycle(bid);
            }
            return;
        };
        if let Some(r) = conn.ring.as_mut() {
            if !c.more {
                r.recv_armed = false;
                r.recv_cancelling = false;
            }
        }
        match c.result {
            n if n > 0 => {
                if let Some(bid) = c.buffer {
                    let n = n as usize;
                    conn.reserve_read(n);
                    let end = conn.rend + n;
                    conn.rbuf[conn.rend..end].copy_from_slice(ring.buffer(bid, n));
                    conn.rend = end;
                    ring.recycle(bid);
                    conn.drop_swallowed();
                    crate::stage::rv_drain_body(conn, &self.shared.engine);
                    conn.last_active = now;
                    if let Some((_, t)) = &conn.registered {
                        t.store(u64::from(unix_now()), Ordering::Relaxed);
                    }
                    self.shared
                        .stats
                        .bytes_read
                        .fetch_add(n as u64, Ordering::Relaxed);
                    conn.account(&self.shared.stats.conn_buffer_bytes);
                    if self.over_allowance(c.token) {
                        // Stop the flow now, not at the next pass: what the kernel already
                        // received beyond this is bounded by the ring's buffers.
                        self.hold(c.token);
                    }
                }
            }
            0 => conn.read_closed = true,
            // Out of provided buffers, or cancelled: armed again by the pass if wanted.
            e if e == -ENOBUFS || e == -ECANCELED => {}
            _ => {
                conn.read_closed = true;
                conn.close_after_write = true;
            }
        }
        ready.push(c.token);
    }

    /// The connection holds as much input as a pass would let it read.
    fn over_allowance(&self, t: usize) -> bool {
        let Some(c) = self.conns.get(t) else {
            return false;
        };
        let total = self.shared.stats.conn_buffer_bytes.load(Ordering::Relaxed);
        c.unparsed() >= super::stage::input_cap(c, &self.shared.config.limits, self.read_cap())
            || (total > self.shared.config.conn_buffer_limit
                && c.buffer_bytes() >= super::BUFFER_FLOOR
                && self.exempt != Some(t))
    }

    /// SD on io_uring: a send finished; the rest of a short one goes out at once.
    fn on_send(&mut self, c: &Completion, ready: &mut Vec<usize>) {
        let now = self.now;
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        let Some(mut out) = ring.take_send(c.user_data) else {
            return;
        };
        let conn = incarnation(&mut self.conns, c);
        let Some(conn) = conn else {
            return;
        };
        let Some(r) = conn.ring.as_mut() else {
            return;
        };
        r.sending = 0;
        r.sending_cap = 0;
        ready.push(c.token);
        if c.result <= 0 {
            // The peer is gone (or the send was cancelled): drop what is left, then close.
            conn.read_closed = true;
            conn.close_after_write = true;
            conn.wbuf.discard();
            return;
        }
        let n = c.result as usize;
        conn.last_active = now;
        self.shared
            .stats
            .bytes_written
            .fetch_add(n as u64, Ordering::Relaxed);
        out.advance(n);
        if !out.is_sent() {
            r.sending = out.pending();
            r.sending_cap = out.capacity() + out.pinned_bytes();
            ring.send(r.fd, out, c.user_data);
        } else if out.capacity() <= SPARE_MAX {
            out.clear();
            r.spare = Some(out);
        }
    }
}

/// The connection a completion belongs to, unless it closed (its slot may hold a newer one).
fn incarnation<'c>(conns: &'c mut slab::Slab<Conn>, c: &Completion) -> Option<&'c mut Conn> {
    conns
        .get_mut(c.token)
        .filter(|x| x.ring.as_ref().is_some_and(|r| r.gen == c.gen))
}
