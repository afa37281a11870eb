//! Graceful stop: what clients sent before the stop is answered before the worker exits.

use std::time::{Duration, Instant};

use mio::Events;

use super::{Worker, DRAIN_LIMIT};

impl Worker {
    /// Graceful stop (SIGTERM, `shutdown`): no new connections are taken, but what clients
    /// have already sent is answered and the replies sent before their connections close,
    /// so a restart loses no request a client believes it made. Bounded by [`DRAIN_LIMIT`]
    /// (a client that does not read its replies cannot hold the exit up).
    pub(super) fn drain(&mut self) {
        self.stop_listening();
        let deadline = Instant::now() + DRAIN_LIMIT;
        // The first pass reads every connection: a readiness event may have arrived with the
        // stop and never been handled.
        let mut first = true;
        // On io_uring, connections whose receives or sends completed since the last pass.
        let mut woken: Vec<usize> = Vec::new();
        let mut events = Events::with_capacity(64);
        // Datagrams are answered too: those already in the socket (its readiness may have
        // come with the stop), and those taken but not yet answered.
        self.udp_ready = self.udp.is_some();
        while Instant::now() < deadline {
            let busy: Vec<usize> = self
                .conns
                .iter()
                .filter(|(t, c)| {
                    first
                        || c.want_parse
                        || c.want_read
                        || c.output_waiting()
                        || c.dump.is_some()
                        || woken.contains(t)
                        || awaits_rest(c)
                })
                .map(|(t, _)| t)
                .collect();
            first = false;
            woken.clear();
            if busy.is_empty() && !self.udp_waiting() {
                return;
            }
            let before: usize = busy
                .iter()
                .filter_map(|&t| self.conns.get(t))
                .map(|c| c.unparsed() + c.pending_output())
                .sum();
            self.pass(&busy);
            if self.ring.is_some() {
                // Hand the queued sends to the kernel and take the completions: input that
                // arrived before the stop is delivered here too.
                let _ = self.wait(&mut events, Some(Duration::from_millis(5)), &mut woken);
            }
            let after: usize = busy
                .iter()
                .filter_map(|&t| self.conns.get(t))
                .map(|c| c.unparsed() + c.pending_output())
                .sum();
            // A pass that answered datagrams made progress whatever the connections did.
            if after == before && !self.udp_waiting() {
                // A dump's lines may be written and sent within one pass: nothing shows
                // as waiting while it runs, yet it is not through, and a pass every 5 ms
                // (64 KiB of lines each) would not let a large one end within the limit.
                let dumping = busy
                    .iter()
                    .any(|&t| self.conns.get(t).is_some_and(|c| c.dump.is_some()));
                // Nothing moved (a client not reading, or half a request): look again soon.
                std::thread::sleep(if dumping {
                    Duration::from_micros(200)
                } else {
                    Duration::from_millis(5)
                });
                // A request half in when the stop came is waited for (memcached finishes
                // one whose rest comes 0.3 s later), within the limit.
                let awaiting = busy
                    .iter()
                    .any(|&t| self.conns.get(t).is_some_and(awaits_rest));
                if after == 0 && !dumping && !awaiting {
                    return;
                }
            }
        }
    }

    /// Whether datagrams wait: in the socket, or taken and not yet answered.
    fn udp_waiting(&self) -> bool {
        self.udp_ready || !self.udp_carry.is_empty() || !self.udp_pending.is_empty()
    }
}

/// Whether a connection holds part of a request whose rest its client can still send: a
/// line or data block cut short, or a data block still arriving into item memory.
fn awaits_rest(c: &crate::conn::Conn) -> bool {
    !c.read_closed && (c.mid_request() || c.body.is_some_and(|b| !b.complete()))
}
