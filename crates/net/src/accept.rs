//! The acceptor thread: takes new connections and hands each to a worker in turn
//! (memcached's dispatcher), draining the listeners on epoll readiness whichever loop the
//! workers run. No io_uring request may hold a listening socket: a ring outlives a killed
//! process for a while, and so would the sockets its accepts hold (docs/network.md).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use mio::{Events, Interest, Poll, Token};

use crate::shared::{Shared, Workers};
use crate::stream::{Listener, Stream};

/// How long accepting pauses after the process ran out of descriptors (EMFILE and friends),
/// when some may have been closed again.
const BACKOFF: Duration = Duration::from_millis(10);

/// Runs until the server stops. `poll` holds the acceptor's waker.
pub(crate) fn run(poll: Poll, listeners: Vec<Listener>, workers: Workers, shared: Arc<Shared>) {
    let d = Dispatch {
        workers,
        shared,
        next: AtomicUsize::new(0),
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
/// how long accepting then pauses (`time_in_listen_disabled_us`).
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
