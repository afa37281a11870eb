//! A worker accepting on its own listening sockets (`--accept workers`, docs/network.md):
//! one socket per address in an SO_REUSEPORT group, so the kernel spreads new connections
//! over the workers and none is handed from one thread to another. Each socket is drained on
//! readiness of the worker's epoll, on either loop (the io_uring loop watches that epoll
//! through its ring): an io_uring accept would hold the socket open after a SIGKILL, until
//! the kernel tears the ring down, and a client connecting then would be reset instead of
//! refused (docs/network.md).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::{Interest, Token};

use crate::clock::unix_now;
use crate::conn::Conn;
use crate::stream::{Listener, Stream};

use super::{watch, Worker};

/// Tokens of a worker's listening sockets on epoll: `LISTEN_BASE - i` for the `i`th
/// (below them: UDP and the waker; connections' slab keys never come near).
pub(super) const LISTEN_BASE: usize = usize::MAX - 2;
/// The most listening sockets a worker has (one per `-l` address).
pub(super) const MAX_LISTENERS: usize = 64;
/// How long accepting pauses after the process ran out of descriptors (EMFILE and
/// friends), when some may have been closed again.
const BACKOFF: Duration = Duration::from_millis(10);

/// The listener a token names, if it names one.
pub(super) fn listener_of(token: Token) -> Option<usize> {
    let i = LISTEN_BASE.checked_sub(token.0)?;
    (i < MAX_LISTENERS).then_some(i)
}

/// One of a worker's own listening sockets.
pub(crate) struct OwnListener {
    listener: Listener,
}

impl OwnListener {
    pub(super) fn new(listener: Listener) -> OwnListener {
        OwnListener { listener }
    }
}

impl Worker {
    /// Starts accepting: each listening socket on the worker's epoll.
    pub(super) fn start_listening(&mut self) {
        for (i, l) in self.listeners.iter_mut().enumerate() {
            if let Err(e) = self.poll.registry().register(
                &mut l.listener,
                Token(LISTEN_BASE - i),
                Interest::READABLE,
            ) {
                tracing::error!(worker = self.id, error = %e, "cannot watch a listening socket");
            }
        }
    }

    /// Takes every connection waiting on listener `i`.
    pub(super) fn accept_ready(&mut self, i: usize, ready: &mut Vec<usize>) {
        loop {
            let Some(l) = self.listeners.get(i) else {
                return;
            };
            match l.listener.accept() {
                Ok((stream, _peer)) => self.admit(stream, ready),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Edge-triggered: the connection still queued brings no new event.
                    self.starved(&e);
                    return;
                }
            }
        }
    }

    /// Counts a new connection against `-c` and takes it on, or refuses it there. The
    /// kernel picked this worker by a hash of the connection's addresses: where that left
    /// this worker with more than one connection over the least loaded one, the connection
    /// goes to that one instead (through its queue, as the acceptor would hand it), so the
    /// workers stay as even as memcached's turns keep them and most connections stay put.
    fn admit(&mut self, mut stream: Stream, ready: &mut Vec<usize>) {
        if !crate::accept::admit(&self.shared, &mut stream) {
            return;
        }
        let counts = &self.shared.worker_conns;
        let mine = counts.get(self.id).map_or(0, |n| n.load(Ordering::Relaxed));
        let least = counts
            .iter()
            .enumerate()
            .min_by_key(|(_, n)| n.load(Ordering::Relaxed))
            .filter(|(j, n)| *j != self.id && n.load(Ordering::Relaxed) + 1 < mine)
            .map(|(j, _)| j);
        if let (Some(j), Some(workers)) = (least, self.shared.handoff.get()) {
            // Counted there now, so a burst spreads instead of all going to one worker.
            counts[j].fetch_add(1, Ordering::Relaxed);
            match workers[j].0.send(stream) {
                Ok(()) => {
                    let _ = workers[j].1.wake();
                    self.shared
                        .stats
                        .accept_handoffs
                        .fetch_add(1, Ordering::Relaxed);
                    return;
                }
                // That worker is gone (a panic): keep the connection here.
                Err(std::sync::mpsc::SendError(s)) => {
                    counts[j].fetch_sub(1, Ordering::Relaxed);
                    stream = s;
                }
            }
        }
        if let Some(n) = counts.get(self.id) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        self.adopt(stream, ready);
    }

    /// Out of descriptors or memory (`listen_disabled_num`): accepting resumes after
    /// [`BACKOFF`], when some may have been closed.
    fn starved(&mut self, e: &std::io::Error) {
        crate::accept::note_starved(&self.shared, e, BACKOFF);
        self.accept_retry = Some(Instant::now() + BACKOFF);
    }

    /// The longest the loop may sleep before accepting resumes after [`BACKOFF`]; resumes
    /// it when that time has come (and if that fails again, the new pause bounds the
    /// sleep: nothing else would wake an idle worker for a connection already queued).
    pub(super) fn accept_backoff(&mut self, ready: &mut Vec<usize>) -> Option<Duration> {
        let at = self.accept_retry?;
        if Instant::now() >= at {
            self.accept_retry = None;
            for i in 0..self.listeners.len() {
                self.accept_ready(i, ready);
            }
        }
        self.accept_retry
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// Stopping: no new connections. The sockets close (the kernel sends what they still
    /// queue to the other workers' sockets, or resets it when none is left).
    pub(super) fn stop_listening(&mut self) {
        self.forget_listeners();
        self.accept_retry = None;
    }

    /// Closes the listening sockets.
    pub(super) fn forget_listeners(&mut self) {
        self.listeners.clear();
    }

    /// Connections the acceptor thread handed over.
    pub(super) fn accept_new(&mut self, ready: &mut Vec<usize>) {
        while let Ok(stream) = self.incoming.try_recv() {
            self.adopt(stream, ready);
        }
    }

    /// Takes on a connection counted against `-c` and in this worker's `worker_conns`:
    /// registered for `stats conns` and watchers, and put on the loop (its first read comes
    /// with the next pass).
    fn adopt(&mut self, stream: Stream, ready: &mut Vec<usize>) {
        let token = self.conns.vacant_key();
        let (fd, addr, listen) = stream.describe();
        watch::conn_event(self.shared.engine.watch(), fd, &addr, None);
        tracing::debug!(fd, peer = %addr, worker = self.id, "new client connection");
        let mut conn = Conn::new(stream);
        // -B: the protocol is fixed, not read from the first byte.
        conn.binary = self
            .shared
            .config
            .binding
            .map(|b| b == crate::config::Binding::Binary);
        conn.peer.clone_from(&addr);
        conn.fd = fd;
        conn.registered = Some(
            self.shared
                .conns
                .add(fd, addr, listen, u64::from(unix_now())),
        );
        let registered = if self.ring.is_some() && conn.stream.completion_fd().is_some() {
            self.ring_adopt(&mut conn)
        } else {
            self.poll
                .registry()
                .register(&mut conn.stream, Token(token), Interest::READABLE)
        };
        if registered.is_err() {
            if let Some((key, _)) = conn.registered.take() {
                self.shared.conns.remove(key);
            }
            if let Some(n) = self.shared.worker_conns.get(self.id) {
                n.fetch_sub(1, Ordering::Relaxed);
            }
            self.shared
                .stats
                .curr_connections
                .fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let inserted = self.conns.insert(conn);
        debug_assert_eq!(inserted, token);
        // Data may already be waiting; edge-triggered readiness would not tell us (on
        // io_uring this arms the first receive).
        ready.push(token);
    }
}
