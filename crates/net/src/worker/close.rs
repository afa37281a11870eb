//! Closing a connection: its state is released at once; on io_uring its descriptor is
//! closed only once the requests queued for it have been submitted.
//!
//! The kernel looks a request's descriptor up when the request is submitted, not when it
//! is queued. A connection closed in a pass, with a receive or a cancel still queued for
//! it, freed its number; another worker could accept a connection under that number before
//! this worker's next submit, and the queued receive then took the new connection's bytes
//! (a client's first request went unanswered, 3 in 100 times after a refused long line).

use std::sync::atomic::Ordering;

use super::{watch, Worker};

impl Worker {
    pub(super) fn close(&mut self, token: usize) {
        if self.conns.contains(token) {
            let mut c = self.conns.remove(token);
            if let Some(n) = self.shared.worker_conns.get(self.id) {
                n.fetch_sub(1, Ordering::Relaxed);
            }
            crate::stage::release_body(&mut c, &self.shared);
            if let Some((key, _)) = c.registered.take() {
                self.shared.conns.remove(key);
            }
            let watch = self.shared.engine.watch();
            if let Some(id) = c.watch.take() {
                watch.remove(id);
                self.watchers -= 1;
            }
            let reason = c
                .close_reason
                .unwrap_or(if c.read_closed || c.close_after_write {
                    "normal"
                } else {
                    "error"
                });
            watch::conn_event(watch, c.fd, &c.peer, Some(reason));
            tracing::debug!(fd = c.fd, peer = %c.peer, reason, "connection closed");
            self.shared
                .stats
                .conn_buffer_bytes
                .fetch_sub(c.accounted, Ordering::Relaxed);
            if self.exempt == Some(token) {
                self.exempt = None;
            }
            self.shared
                .stats
                .curr_connections
                .fetch_sub(1, Ordering::Relaxed);
            if let Some(r) = c.ring.take() {
                self.ring_release(token, r);
                self.closing.push(c);
            } else {
                let _ = self.poll.registry().deregister(&mut c.stream);
            }
        }
    }

    /// Submits what the ring holds queued, then closes the descriptors of the connections
    /// closed since: none of their requests can reach a descriptor reused by then. On a
    /// full completion queue they wait for the next pass.
    pub(super) fn close_released(&mut self) {
        if self.closing.is_empty() {
            return;
        }
        if self.ring.as_mut().is_none_or(|ring| ring.submit_queued()) {
            self.closing.clear();
        }
    }
}
