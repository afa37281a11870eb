//! Starting to receive a data block into item memory (net/src/stage.rs): the command line is
//! planned as if its value were stored already, and a command that stores a value of its
//! own (SET, ADD, REPLACE, CAS) gets that value's memory from the engine.

use hkv_engine::{Op, Request};
use hkv_proto::step::Step;

use crate::conn::BodyStream;
use crate::plan::{pp_plan_input, ReadMark};
use crate::sasl::Gate;
use crate::stage::rv_drain_body;

use super::Worker;

impl Worker {
    /// Connection `t`'s input starts with a storage command whose line is `header` bytes
    /// long and whose data block of `vlen` bytes has not all arrived; everything before it
    /// has run. Stages the block, or marks the command to be buffered as before.
    pub(super) fn stage_body(&mut self, t: usize, header: usize, vlen: usize, now: u32) {
        let sasl = self.shared.config.sasl.as_deref();
        let authfile_users = self.shared.config.authfile.as_ref().map(|a| a.current());
        let mut budget = self.pass_budget();
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        if c.body.is_some() || c.close_after_write {
            return;
        }
        let binary = c.binary == Some(true);
        // The line alone, followed by what would follow a staged block: the text data
        // block's terminator (binary has none).
        let mut line = c.rbuf[c.rstart..c.rstart + header].to_vec();
        if !binary {
            line.extend_from_slice(b"\r\n");
        }
        let mut gate = Gate {
            users: sasl,
            authfile: authfile_users.as_deref(),
            authed: c.authed,
            cmds: 0,
            errors: 0,
        };
        let mut batch: Vec<Request<'_>> = Vec::new();
        let (mut steps, mut marks): (Vec<Step>, Vec<ReadMark>) = (Vec::new(), Vec::new());
        let mut limits = self.shared.config.limits;
        limits.stage_min = usize::MAX;
        let placeholder = hkv_engine::Staged {
            partition: u32::MAX,
            loc: 0,
            token: 0,
            key_len: 0,
            value_len: vlen as u64,
        };
        let end = pp_plan_input(
            &line,
            &self.keys,
            0,
            0,
            c.binary,
            None,
            0,
            &limits,
            &mut gate,
            0,
            &mut budget,
            &mut batch,
            &mut steps,
            &mut marks,
            None,
            Some(placeholder),
        );
        let stores_its_value = match batch[..] {
            [r] => {
                matches!(r.op, Op::Set | Op::Add | Op::Replace | Op::Cas)
                    && r.staged.is_some()
                    && end.pos == line.len()
                    && !end.close
            }
            _ => false,
        };
        let admitted = stores_its_value && crate::stage::admit(&self.shared, vlen);
        let staged = match admitted {
            true => self.shared.engine.stage_value(batch[0].key, vlen, now),
            false => None,
        };
        if admitted && staged.is_none() {
            self.shared
                .stats
                .staged_bytes
                .fetch_sub(vlen, std::sync::atomic::Ordering::Relaxed);
        }
        match staged {
            Some(staged) => {
                c.body = Some(BodyStream {
                    staged,
                    header,
                    filled: 0,
                });
                c.scanned = 0;
                rv_drain_body(c, &self.shared.engine);
                self.shared
                    .stats
                    .staged_values
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            None => {
                // Buffered whole, as any other command; its own pass answers it. Unless
                // that would put connection buffers past their limit: then it is refused as
                // memcached refuses a value it cannot allocate, and its bytes are dropped as
                // they arrive. Clients stopping part way through such values once grew the
                // process by every byte they sent (a hostile probe: 1,000 of them, 1 GB).
                use std::sync::atomic::Ordering;
                let buffered = self.shared.stats.conn_buffer_bytes.load(Ordering::Relaxed);
                c.refuse_body = buffered + vlen > self.shared.config.conn_buffer_limit;
                c.stage_refused = true;
                c.want_parse = true;
            }
        }
    }
}
