//! The acceptor thread: takes new connections and hands each to a worker in turn
//! (memcached's dispatcher). With the io_uring loop it keeps one *multishot accept* armed per
//! listening socket, so one submission accepts every connection until the kernel ends it;
//! otherwise, or where the kernel refuses that, it drains the listeners on epoll readiness.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use io_uring::{cqueue, opcode, types, IoUring};
use mio::{Events, Interest, Poll, Token};

use crate::shared::{Shared, Workers};
use crate::stream::{Listener, Stream};

/// How long accepting pauses after the process ran out of descriptors (EMFILE and friends),
/// when some may have been closed again.
const BACKOFF: Duration = Duration::from_millis(10);

/// Runs until the server stops. `poll` holds the acceptor's waker; the listeners are
/// registered with it only when accepting runs on epoll.
pub(crate) fn run(
    poll: Poll,
    listeners: Vec<Listener>,
    workers: Workers,
    shared: Arc<Shared>,
    uring: bool,
) {
    let d = Dispatch {
        workers,
        shared,
        next: AtomicUsize::new(0),
    };
    let (poll, listeners) = if uring {
        match accept_uring(poll, listeners, &d) {
            Ok(()) => return,
            Err((poll, listeners, why)) => {
                tracing::info!(error = %why, "multishot accept unavailable; accepting on epoll");
                (poll, listeners)
            }
        }
    } else {
        (poll, listeners)
    };
    accept_epoll(poll, listeners, &d);
}

struct Dispatch {
    workers: Workers,
    shared: Arc<Shared>,
    next: AtomicUsize,
}

impl Dispatch {
    /// Counts the connection and gives it to the next live worker, or refuses it at `-c`.
    fn hand_over(&self, mut stream: Stream, peer: &str) {
        let shared = &self.shared;
        if !admit(shared, &mut stream) {
            return;
        }
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let mut stream = Some(stream);
        // A worker that died (a panic) has dropped its receiver: its turn goes to the next
        // live one.
        for k in 0..self.workers.len() {
            let i = (first + k) % self.workers.len();
            // Counted for the worker before it sees the connection (it does not count
            // handed-over ones itself).
            let count = shared.worker_conns.get(i);
            if let Some(n) = count {
                n.fetch_add(1, Ordering::Relaxed);
            }
            match self.workers[i].0.send(stream.take().expect("held")) {
                Ok(()) => {
                    tracing::debug!(%peer, worker = i, "accepted");
                    let _ = self.workers[i].1.wake();
                    return;
                }
                Err(mpsc::SendError(s)) => {
                    if let Some(n) = count {
                        n.fetch_sub(1, Ordering::Relaxed);
                    }
                    stream = Some(s);
                }
            }
        }
        tracing::error!("no worker is left to take connections; stopping");
        shared
            .stats
            .curr_connections
            .fetch_sub(1, Ordering::Relaxed);
        shared.stop_all();
    }

    fn note_starved(&self, e: &std::io::Error, pause: Duration) {
        note_starved(&self.shared, e, pause);
    }
}

/// Counts a new connection, or refuses it at `-c` with memcached's answer there. Workers
/// accepting on their own sockets call this at once, so the count is taken atomically.
pub(crate) fn admit(shared: &Shared, stream: &mut Stream) -> bool {
    let max = shared.config.max_connections;
    let counted = shared
        .stats
        .curr_connections
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
            (c < max).then_some(c + 1)
        })
        .is_ok();
    if !counted {
        use std::io::Write;
        // Counted before the refusal is written: a client that reads it and then asks for
        // `rejected_connections` must find itself counted (CI caught the other order).
        shared
            .stats
            .rejected_connections
            .fetch_add(1, Ordering::Relaxed);
        let _ = stream.write(b"ERROR Too many open connections\r\n");
        return false;
    }
    shared
        .stats
        .total_connections
        .fetch_add(1, Ordering::Relaxed);
    true
}

/// An accept that failed for want of descriptors or memory (`listen_disabled_num`), and
/// how long accepting then pauses (`time_in_listen_disabled_us`; zero where a multishot
/// accept goes on by itself).
pub(crate) fn note_starved(shared: &Shared, e: &std::io::Error, pause: Duration) {
    tracing::warn!(error = %e, "accept failed; retrying in 10 ms");
    // The time first: whoever sees the count move sees its pause counted too.
    shared
        .stats
        .time_in_listen_disabled_us
        .fetch_add(pause.as_micros() as u64, Ordering::Relaxed);
    shared
        .stats
        .listen_disabled_num
        .fetch_add(1, Ordering::Relaxed);
}

fn accept_epoll(mut poll: Poll, mut listeners: Vec<Listener>, d: &Dispatch) {
    for (i, l) in listeners.iter_mut().enumerate() {
        if let Err(e) = poll
            .registry()
            .register(l, Token(LISTENER_TOKENS + i), Interest::READABLE)
        {
            tracing::error!(error = %e, "cannot watch a listening socket");
            return;
        }
    }
    let shared = &d.shared;
    let mut events = Events::with_capacity(64);
    // After EMFILE the pending connection stays queued and no new readiness event comes for
    // it: retry on a timer instead of waiting for the next client.
    let mut backoff: Option<Duration> = None;
    while !shared.stop.load(Ordering::SeqCst) {
        if let Err(e) = poll.poll(&mut events, backoff.take()) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "accept poll failed");
            break;
        }
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        // Readiness says little here (edge-triggered, several listeners): every listener is
        // drained on every wake-up.
        for listener in &listeners {
            loop {
                match listener.accept() {
                    Ok((stream, peer)) => d.hand_over(stream, &peer),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        d.note_starved(&e, BACKOFF);
                        backoff = Some(BACKOFF);
                        break;
                    }
                }
            }
        }
    }
}

/// Tokens of listening sockets on epoll start here (below them: the acceptor's waker).
pub(crate) const LISTENER_TOKENS: usize = 2;

/// `user_data` of the readiness poll on the acceptor's epoll (its waker); a listener's
/// accepts carry the listener's index, a backoff timer `TIMER_BASE` plus it.
const WAKE_UD: u64 = u64::MAX;
const TIMER_BASE: u64 = 1 << 32;

type Refused = (Poll, Vec<Listener>, std::io::Error);

/// The io_uring acceptor. Gives the poll and listeners back (to run on epoll instead) if the
/// kernel refuses a multishot accept before any connection was taken.
fn accept_uring(mut poll: Poll, listeners: Vec<Listener>, d: &Dispatch) -> Result<(), Refused> {
    // One turn queues at most an accept and a backoff timer per listener and the wake poll.
    let entries = (2 * listeners.len() as u32 + 2).next_power_of_two();
    let mut ring = match IoUring::new(entries) {
        Ok(r) => r,
        Err(e) => return Err((poll, listeners, e)),
    };
    let shared = &d.shared;
    let timespec = types::Timespec::from(BACKOFF);
    let mut pending: Vec<_> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| arm_accept(l, i))
        .collect();
    pending.push(arm_wake(&poll));
    tracing::info!(
        listeners = listeners.len(),
        "accepting with multishot io_uring accepts"
    );
    shared
        .stats
        .uring_listeners
        .store(listeners.len(), Ordering::Relaxed);
    let mut accepted_any = false;
    let mut completions = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        for e in pending.drain(..) {
            // SAFETY: accepts and polls point at no memory of ours; a timeout points at
            // `timespec`, which lives on this frame until the ring is dropped.
            if unsafe { ring.submission().push(&e) }.is_err() {
                // Sized above for everything one turn can queue.
                tracing::error!("acceptor ring full");
            }
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::error!(error = %e, "accept ring failed");
                break;
            }
        }
        completions.clear();
        completions.extend(
            ring.completion()
                .map(|c| (c.user_data(), c.result(), cqueue::more(c.flags()))),
        );
        for &(ud, res, more) in &completions {
            if ud == WAKE_UD {
                // Consume the waker's event so its next wake makes the epoll readable again.
                let mut events = Events::with_capacity(4);
                let _ = poll.poll(&mut events, Some(Duration::ZERO));
                pending.push(arm_wake(&poll));
                continue;
            }
            if ud >= TIMER_BASE {
                let i = (ud - TIMER_BASE) as usize;
                pending.push(arm_accept(&listeners[i], i));
                continue;
            }
            let i = ud as usize;
            if res >= 0 {
                accepted_any = true;
                // SAFETY: a successful accept's result is a new descriptor that nothing
                // else owns.
                let fd = unsafe { OwnedFd::from_raw_fd(res) };
                match listeners[i].adopt(fd) {
                    Ok((stream, peer)) => d.hand_over(stream, &peer),
                    Err(e) => tracing::debug!(error = %e, "accepted connection lost"),
                }
                if !more {
                    pending.push(arm_accept(&listeners[i], i));
                }
                continue;
            }
            let e = std::io::Error::from_raw_os_error(-res);
            match -res {
                libc::EINVAL | libc::EOPNOTSUPP if !accepted_any => {
                    // Multishot accept needs 5.19: use epoll (closing the ring cancels
                    // what it still holds).
                    shared.stats.uring_listeners.store(0, Ordering::Relaxed);
                    drop(ring);
                    return Err((poll, listeners, e));
                }
                libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM => {
                    d.note_starved(&e, if more { Duration::ZERO } else { BACKOFF });
                    if !more {
                        let t = opcode::Timeout::new(&timespec)
                            .build()
                            .user_data(TIMER_BASE + i as u64);
                        pending.push(t);
                    }
                }
                _ => {
                    // A connection reset before it was taken, and the like.
                    tracing::debug!(error = %e, "accept failed");
                    if !more {
                        pending.push(arm_accept(&listeners[i], i));
                    }
                }
            }
        }
    }
    Ok(())
}

fn arm_accept(l: &Listener, i: usize) -> io_uring::squeue::Entry {
    opcode::AcceptMulti::new(types::Fd(l.raw_fd()))
        .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
        .build()
        .user_data(i as u64)
}

fn arm_wake(poll: &Poll) -> io_uring::squeue::Entry {
    opcode::PollAdd::new(types::Fd(poll.as_raw_fd()), libc::POLLIN as u32)
        .build()
        .user_data(WAKE_UD)
}
