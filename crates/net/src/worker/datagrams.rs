//! RV for UDP: datagrams taken into a worker's pass (framing: `crate::udp`).

use std::io::ErrorKind;
use std::sync::atomic::Ordering;

use super::{Worker, UDP_PER_PASS};

impl Worker {
    /// RV for UDP: takes up to UDP_PER_PASS datagrams into this pass, many per system call
    /// (and, with UDP GRO, many per buffer).
    pub(super) fn receive_udp(&mut self) {
        // Datagrams that earlier passes did not finish go first, then those an earlier
        // receive brought past its pass's room, in the order they came.
        self.udp_reqs.append(&mut self.udp_carry);
        while self.udp_reqs.len() < UDP_PER_PASS {
            match self.udp_pending.pop_front() {
                Some(r) => self.udp_reqs.push(r),
                None => break,
            }
        }
        let (Some(sock), Some(batch)) = (self.udp.as_ref(), self.udp_batch.as_mut()) else {
            return;
        };
        if !self.udp_ready || !self.udp_pending.is_empty() {
            return;
        }
        // UDP has no connection to authenticate: with -S or -Y nothing is served over it
        // (and nothing is answered, so no reflection).
        let refuse = self.shared.config.sasl.is_some() || self.shared.config.authfile.is_some();
        let stats = &self.shared.stats;
        let reqs = &mut self.udp_reqs;
        while reqs.len() < UDP_PER_PASS {
            let got = batch.receive(sock, |peer, d, payloads| {
                stats
                    .bytes_read
                    .fetch_add(d.len() as u64, Ordering::Relaxed);
                if refuse {
                    return;
                }
                match crate::udp::frame(d) {
                    crate::udp::Frame::Request { id, payload_at } => {
                        reqs.push(crate::udp::UdpRequest {
                            peer,
                            id,
                            payload: payloads.copy(&d[payload_at..]),
                            reply: Vec::new(),
                        });
                    }
                    crate::udp::Frame::Drop => {}
                }
            });
            let stale = std::mem::take(&mut batch.stale_drops);
            if stale > 0 {
                stats.udp_stale_drops.fetch_add(stale, Ordering::Relaxed);
                let bytes = std::mem::take(&mut batch.stale_bytes);
                stats.bytes_read.fetch_add(bytes, Ordering::Relaxed);
            }
            match got {
                Ok(n) if n < crate::udp::RECV_SLOTS => {
                    // The socket was emptied; a datagram arriving after this raises a new
                    // readiness edge.
                    self.udp_ready = false;
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.udp_ready = false;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, "udp receive failed");
                    self.udp_ready = false;
                    break;
                }
            }
        }
        if reqs.len() > UDP_PER_PASS {
            self.udp_pending.extend(reqs.drain(UDP_PER_PASS..));
        }
    }
}
