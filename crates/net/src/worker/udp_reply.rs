//! WR and SD for UDP: each datagram's reply composed whole from the pass's results, carried
//! to the next pass when its commands go on there, and sent with the pass's other replies.

use std::ops::Range;
use std::sync::atomic::Ordering;

use crate::respond;

use super::deferral::first_deferred;
use super::Worker;

/// Bytes of a datagram's reply buffer kept from pass to pass (16 KiB: a dozen datagrams).
const UDP_REPLY_KEPT: usize = 16 << 10;

/// How one datagram of the pass was planned.
pub(super) struct UdpPlan {
    pub(super) steps: Range<usize>,
    pub(super) marks: Range<usize>,
    /// Commands were left unplanned.
    pub(super) unfinished: bool,
    /// They run next pass, from byte `from` of the payload.
    pub(super) goes_on: bool,
    /// The last command is cut off by the datagram's end.
    pub(super) incomplete: bool,
    /// No text error may end the reply (binary, or closed after an error).
    pub(super) quiet_end: bool,
    pub(super) from: usize,
    pub(super) peer: std::net::SocketAddr,
}

impl Worker {
    /// WR for the pass's datagrams, then SD: true if one asked the server to shut down.
    pub(super) fn wr_datagrams(&mut self, udp_plans: Vec<UdpPlan>, now: u32) -> bool {
        let mut stop = false;
        for (r, p) in self.udp_reqs.iter_mut().zip(udp_plans) {
            let reply = &mut self.udp_reply;
            reply.clear();
            let (mut range, mut unfinished) = (p.steps, p.unfinished);
            let mut goes_on = p.goes_on;
            if let Some(m) = first_deferred(&self.marks[p.marks], &self.responses) {
                range.end = m.step;
                unfinished = true;
                goes_on = false;
            }
            let mut shut = false;
            for step in &self.steps[range] {
                shut |= respond::wr_compose(
                    step,
                    &r.payload,
                    &self.responses,
                    &self.shared,
                    now,
                    reply,
                    None,
                );
            }
            if shut {
                // Nothing after a `shutdown` runs, as on TCP: the datagram is answered so far.
                (goes_on, unfinished) = (false, false);
                stop = true;
            }
            // A datagram is built whole: spliced values are copied in.
            reply.flatten();
            if r.reply.is_empty() && !goes_on && !unfinished {
                // The common case: the reply of this pass is the whole reply.
                if let (Some(batch), false) = (self.udp_batch.as_mut(), reply.is_empty()) {
                    batch.push_reply(r.peer, r.id, reply);
                }
                continue;
            }
            let mut whole = std::mem::take(&mut r.reply);
            whole.extend_from_slice(reply);
            if goes_on && whole.len() <= crate::udp::CARRY_REPLY_BYTES {
                self.udp_carry.push(crate::udp::UdpRequest {
                    peer: r.peer,
                    id: r.id,
                    payload: r.payload.split_off(p.from),
                    reply: whole,
                });
                continue;
            }
            if unfinished && !p.quiet_end {
                // What did not fit is refused as memcached refuses a reply it cannot make
                // room for; a command cut off by the datagram's end as a bad data block
                // (memcached answers such a datagram with nothing at all, docs/protocol.md).
                let error = if p.incomplete {
                    hkv_proto::errors::BAD_DATA_CHUNK
                } else {
                    hkv_proto::errors::GET_OUT_OF_MEMORY
                };
                hkv_proto::reply::line(&mut whole, error);
            }
            // Nothing to say (noreply, quiet meta commands): no datagram, as memcached.
            if whole.is_empty() {
                continue;
            }
            if let Some(batch) = self.udp_batch.as_mut() {
                batch.push_reply(r.peer, r.id, &whole);
            }
        }
        if self.udp_reply.capacity() > UDP_REPLY_KEPT {
            // A large multi-get's reply (its bytes, and the list of its spliced values): not
            // kept for the small ones after it.
            self.udp_reply = hkv_proto::output::Output::with_capacity(UDP_REPLY_KEPT);
        }
        if let (Some(sock), Some(batch)) = (self.udp.as_ref(), self.udp_batch.as_mut()) {
            // SD for UDP: every reply of the pass in as few sendmmsg calls as fit.
            let n = batch.flush(sock);
            self.shared
                .stats
                .bytes_written
                .fetch_add(n, Ordering::Relaxed);
            let gso = std::mem::take(&mut batch.gso_sends);
            if gso > 0 {
                self.shared
                    .stats
                    .udp_gso_sends
                    .fetch_add(gso, Ordering::Relaxed);
            }
            let gro = std::mem::take(&mut batch.gro_receives);
            if gro > 0 {
                self.shared
                    .stats
                    .udp_gro_receives
                    .fetch_add(gro, Ordering::Relaxed);
            }
        }
        stop
    }
}
