//! PP, the engine batch and WR for the connections of one pass (and the UDP requests it
//! took): each connection's input planned into engine requests, one batch run, the replies
//! composed in request order.

use std::ops::Range;
use std::sync::atomic::Ordering;

use hkv_engine::Request;

use crate::clock::unix_now;
use crate::counters::TaskTimes;
use crate::plan::{pp_plan_input, InputEnd, PassBudget};
use crate::respond;
use crate::sasl::Gate;

use super::deferral::{first_deferred, key_cap_after};
use super::udp_reply::UdpPlan;
use super::{Worker, PASS_ND_BUDGET, PASS_VALUE_BUDGET};

/// Keys of UDP datagrams a pass plans before it leaves the rest of its datagrams for the
/// next (each datagram's keys are planned whole: its reply cannot go on in a later pass).
const UDP_PASS_KEYS: usize = 4096;

/// The `watch` streams written from a batch's requests and results.
const STREAMS_OF_A_BATCH: u8 =
    hkv_engine::watch::stream::FETCHERS | hkv_engine::watch::stream::MUTATIONS;

/// What one pass decided for one connection.
struct Plan {
    token: usize,
    steps: Range<usize>,
    marks: Range<usize>,
    end: InputEnd,
    authed: bool,
}

/// Requests' worth of capacity a worker keeps between passes (232 KiB of 232-byte ones).
pub(super) const KEPT_REQUESTS: usize = 1024;

/// `v`'s allocation, emptied, for requests of another lifetime: a pass's requests borrow
/// its connections' buffers, so the vector cannot outlive the pass, but its memory can (an
/// allocation and a free per pass saved). std collects a vector's own iterator into its
/// allocation where the element layouts agree, as here (nothing is mapped: it is empty), but
/// does not promise to: without it this returns a new, empty vector (the test below notices).
pub(super) fn recycle<'a, 'b>(mut v: Vec<Request<'a>>) -> Vec<Request<'b>> {
    v.clear();
    v.into_iter()
        .map(|_| -> Request<'b> { unreachable!("the vector was emptied") })
        .collect()
}

impl Worker {
    /// The pass's budgets for value bytes (see `plan`): deferrable reads stop at
    /// `PASS_VALUE_BUDGET` in all and the output high-water per connection; reads that must be
    /// answered in this pass are charged to `PASS_ND_BUDGET`.
    pub(super) fn pass_budget(&self) -> PassBudget {
        let l = &self.shared.config.limits;
        PassBudget {
            nd_left: PASS_ND_BUDGET.max(2 * l.max_item_size),
            // Over the buffer limit, what a client may get beyond its first read shrinks as
            // its deferrable reads' does: gat (answered in its pass, never deferred) of a
            // 10 KB value 1000 times on each of 1000 connections held 1.3 GB (a hostile
            // probe) while GETs stayed near the limit.
            per_client: self.output_allowance().1,
            value_bound: self.shared.engine.largest_value_bound(),
            written: 0,
            max_item: l.max_item_size,
            reqs_per_conn: self.shared.config.reqs_per_event.max(1),
            keys_per_conn: crate::plan::MAX_KEYS_PER_CONN_PASS,
            // Over the limit nothing but each client's first command: with even 64 KiB a
            // pass, 1,000 clients' unread GETKQ runs held 0.9 GB (0.14 GB with none).
            out_left: (self.shared.config.conn_buffer_limit)
                .saturating_sub(self.shared.stats.conn_buffer_bytes.load(Ordering::Relaxed)),
            conn_out_left: usize::MAX,
            conns_reply: crate::plan::conns_reply_estimate(
                self.shared.stats.curr_connections.load(Ordering::Relaxed),
            ),
            over_limit: self.over_buffer_limit(),
        }
    }

    /// The unsent output from which a connection is not served in this pass, and what its
    /// deferrable reads may add: the high-water mark for both; while all connections'
    /// buffers together are over `--conn-buffer-mb`, a quarter and half of the floor, so a
    /// client that does not read its replies gets no more of them (as memcached stops a
    /// connection at a full socket) and every connection holds a fraction of the floor.
    /// Each connection's own mark bounded only that connection: 1000 clients pipelining
    /// GETs without reading held 2 GB (regression test in tests/buffer_limits.rs).
    pub(super) fn output_allowance(&self) -> (usize, usize) {
        let high_water = self.shared.config.output_high_water;
        if self.over_buffer_limit() {
            (
                high_water.min(super::BUFFER_FLOOR / 4),
                high_water.min(super::BUFFER_FLOOR / 2),
            )
        } else {
            (high_water, high_water)
        }
    }

    /// Whether all connections' buffers together are over `--conn-buffer-mb`.
    fn over_buffer_limit(&self) -> bool {
        let held = self.shared.stats.conn_buffer_bytes.load(Ordering::Relaxed);
        held > self.shared.config.conn_buffer_limit
    }

    /// PP for every connection with input, one engine batch, then WR.
    pub(super) fn process(&mut self, ready: &[usize]) {
        self.process_with(ready, None);
    }

    /// PP, the engine batch and WR for `ready`; with `hot`, only each connection's leading
    /// reads of hot keys (the hot path). Returns the engine requests run.
    pub(super) fn process_with(
        &mut self,
        ready: &[usize],
        hot: Option<&crate::hot::HotSet>,
    ) -> u64 {
        let t0 = self.task_clock();
        for &t in ready {
            if let Some(c) = self.conns.get_mut(t) {
                crate::stage::rv_drain_body(c, &self.shared.engine);
            }
        }
        let limits = self.shared.config.limits;
        let (high_water, group_budget) = self.output_allowance();
        let now = unix_now();
        let mut plans: Vec<Plan> = Vec::with_capacity(ready.len());
        let mut budget = self.pass_budget();
        let spare = std::mem::take(&mut self.spare_batch);
        self.steps.clear();
        self.marks.clear();
        self.responses.clear();
        self.responses.value_budget = PASS_VALUE_BUDGET.max(high_water);
        self.responses.group_budget = group_budget;
        // Over the limit, values past a quarter of the floor go from item memory (pinned,
        // inside -m) even with --zero-copy-min 0: every client's first read is answered
        // whole, and copied, 1,000 clients' unread 500 KB values held 1.3 GB (buffer_limits.rs).
        // Within the limit too once the pass's copies reach its value budget: the first
        // value of each client is answered whole, and 300 such clients' first values were
        // copied in one pass (HWM 381 MB) before the limit was seen.
        self.responses.pin_from = if self.over_buffer_limit() {
            super::BUFFER_FLOOR / 4
        } else {
            usize::MAX
        };
        self.responses.pin_past_budget = super::BUFFER_FLOOR / 4;
        self.keys.reset();
        let keys = &self.keys;
        let sasl = self.shared.config.sasl.as_deref();
        let authfile_users = self.shared.config.authfile.as_ref().map(|a| a.current());
        let authfile = authfile_users.as_deref();
        let conns = &self.conns;
        let steps = &mut self.steps;
        let marks = &mut self.marks;
        // The last pass's allocation, or one sized from the last pass: growing 232-byte
        // requests from empty took several reallocations and copies per pass.
        let mut batch: Vec<Request<'_>> = recycle(spare);
        batch.reserve(self.batch_hint);
        let only_hot = |r: &Request<'_>| {
            matches!(r.op, hkv_engine::Op::Get | hkv_engine::Op::Gets)
                && !r.meta.previous
                && hot.is_some_and(|h| h.contains(r.key))
        };
        let only: Option<&dyn Fn(&Request<'_>) -> bool> = hot.map(|_| &only_hot as _);
        for &t in ready {
            let Some(c) = conns.get(t) else { continue };
            // A client that does not read its replies stops being served, not just read; one
            // being sent a metadump is served once its END is out.
            if c.close_after_write || c.pending_output() >= high_water || c.dump.is_some() {
                continue;
            }
            // The hot path takes whole requests from the head of the input only, and only
            // from connections already past authentication (an authenticating `set` must be
            // planned by the ordinary pass).
            // A data block still arriving into item memory: its command waits for it.
            if c.body.is_some_and(|b| !b.complete()) {
                continue;
            }
            if hot.is_some()
                && (c.body.is_some()
                    || c.cont.is_some()
                    || c.swallow > 0
                    || c.unparsed() == 0
                    || ((sasl.is_some() || authfile.is_some()) && !c.authed))
            {
                continue;
            }
            let (start, mstart) = (steps.len(), marks.len());
            let mut gate = Gate {
                users: sasl,
                authfile,
                authed: c.authed,
                cmds: 0,
                errors: 0,
            };
            budget.conn_out_left = high_water.saturating_sub(c.pending_output());
            budget.keys_per_conn = c.key_cap;
            let mut limits = limits;
            if c.refuse_body {
                limits.refuse_unstaged = true;
            } else if c.stage_refused {
                limits.stage_min = usize::MAX;
            }
            let p = pp_plan_input(
                &c.rbuf[..c.rend],
                keys,
                c.rstart,
                c.swallow,
                c.binary,
                c.cont.map(|k| k.absolute_from(c.rstart)),
                c.scanned,
                &limits,
                &mut gate,
                plans.len() as u32,
                &mut budget,
                &mut batch,
                steps,
                marks,
                only,
                c.body.map(|b| b.staged),
            );
            if gate.cmds > 0 {
                let s = &self.shared.stats;
                s.auth_cmds.fetch_add(gate.cmds, Ordering::Relaxed);
                s.auth_errors.fetch_add(gate.errors, Ordering::Relaxed);
            }
            plans.push(Plan {
                token: t,
                steps: start..steps.len(),
                marks: mstart..marks.len(),
                end: p,
                authed: gate.authed,
            });
        }
        // A datagram is whole: nothing in it is staged.
        let udp_limits = hkv_proto::text::Limits {
            stage_min: usize::MAX,
            max_line: usize::MAX,
            ..limits
        };
        let udp_reqs = &self.udp_reqs;
        let mut udp_plans: Vec<UdpPlan> = Vec::with_capacity(udp_reqs.len());
        // A multi-key line cut at the per-pass key limit could not go on in a later pass
        // (a datagram's reply is sent whole): 257 keys got `SERVER_ERROR out of memory
        // writing get response` after the first 256 (a hostile probe).
        budget.keys_per_conn = usize::MAX;
        (budget.conn_out_left, budget.out_left) = (usize::MAX, usize::MAX);
        // Nor can a `gat` key refused by a client's share of the pass: its reply is sent this
        // pass, not buffered under the output high-water that share stands for. Only the
        // pass's own bound holds: once one value of a megabyte was stored, every `gat` key
        // after a datagram's first read was refused (a differential probe).
        budget.per_client = budget.nd_left;
        // A datagram's reply is sent in its pass, never held in a connection's buffers.
        budget.over_limit = false;
        // Then a pass's datagrams together are bounded instead: 64 datagrams of 32,000 keys
        // each would make one batch of two million.
        let udp_keys_from = batch.len();
        for r in udp_reqs {
            let (start, mstart) = (steps.len(), marks.len());
            let full = batch.len() - udp_keys_from >= UDP_PASS_KEYS;
            if full || udp_plans.iter().any(|p| p.goes_on && p.peer == r.peer) {
                // The pass has its keys, or a datagram of this client goes on next pass (its
                // later ones wait for it): this one waits for the next pass whole.
                udp_plans.push(UdpPlan {
                    steps: start..start,
                    marks: mstart..mstart,
                    unfinished: true,
                    goes_on: true,
                    incomplete: false,
                    quiet_end: false,
                    from: 0,
                    peer: r.peer,
                });
                continue;
            }
            let end = pp_plan_input(
                &r.payload,
                keys,
                0,
                0,
                // Each datagram says for itself whether it is text or binary, as in memcached.
                None,
                None,
                0,
                &udp_limits,
                // UDP datagrams never reach here with -S (receive_udp drops them).
                &mut Gate {
                    users: None,
                    authfile: None,
                    authed: true,
                    cmds: 0,
                    errors: 0,
                },
                (plans.len() + udp_plans.len()) as u32,
                &mut budget,
                &mut batch,
                steps,
                marks,
                None,
                None,
            );
            let unfinished = end.pos < r.payload.len() || end.cont.is_some();
            udp_plans.push(UdpPlan {
                steps: start..steps.len(),
                marks: mstart..marks.len(),
                unfinished,
                // Stopped by a barrier or a per-pass limit between two commands, after
                // running at least one: the rest can run next pass. (Not inside a multi-key
                // line, whose reply stays bounded by one pass.)
                goes_on: unfinished
                    && end.more
                    && end.cont.is_none()
                    && end.swallow == 0
                    && end.pos > 0,
                // Its last command's line or data block is cut off.
                incomplete: unfinished && !end.more && !end.close && end.cont.is_none(),
                // A binary datagram gets no text error; after an error that closes (as on
                // TCP), nothing is added either: memcached answers that error alone.
                quiet_end: end.binary == Some(true) || end.close,
                from: end.pos,
                peer: r.peer,
            });
        }
        // Its own handle: the pass's WR for datagrams borrows the worker.
        let shared = std::sync::Arc::clone(&self.shared);
        let tasks = &shared.stats.tasks;
        let mut t0 = TaskTimes::add(&tasks.pp, t0);
        let ran = batch.len() as u64;
        if !batch.is_empty() && hot.is_some() {
            self.shared
                .engine
                .execute_express(&batch, now, &mut self.responses, &mut self.scratch);
        } else if !batch.is_empty() {
            self.shared
                .engine
                .execute(&batch, now, &mut self.responses, &mut self.scratch);
            self.shared.stats.batches.fetch_add(1, Ordering::Relaxed);
            self.pass_requests += batch.len() as u64;
            self.shared
                .stats
                .batched_requests
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        if let Some(router) = self.shared.config.hot.as_deref().filter(|_| ran > 0) {
            // Hot-path reads are counted too: a key stays hot while it is read. The engine
            // hashed every key of the batch already.
            let hashes = self.scratch.key_hashes();
            for (r, h) in batch.iter().zip(hashes) {
                if matches!(r.op, hkv_engine::Op::Get | hkv_engine::Op::Gets) {
                    router.sample_hash(self.id, h);
                }
            }
        }
        if self.shared.detail.enabled() {
            use crate::stats::detail::Event;
            let results = &self.responses.results;
            self.shared
                .detail
                .record(batch.iter().zip(results.iter()).filter_map(|(r, res)| {
                    let ev = match r.op {
                        // memcached counts gat and gats (and binary TOUCH) as gets here.
                        hkv_engine::Op::Get
                        | hkv_engine::Op::Gets
                        | hkv_engine::Op::Gat
                        | hkv_engine::Op::Gats => Event::Get {
                            hit: matches!(res, hkv_engine::Response::Value { .. }),
                        },
                        hkv_engine::Op::Set
                        | hkv_engine::Op::Add
                        | hkv_engine::Op::Replace
                        | hkv_engine::Op::Append
                        | hkv_engine::Op::Prepend
                        | hkv_engine::Op::Cas => Event::Set,
                        // memcached counts a refused set as a set, and the unlink of
                        // its old value as nothing.
                        hkv_engine::Op::Delete if r.meta.refused_store => Event::Set,
                        hkv_engine::Op::Delete => Event::Delete,
                        _ => return None,
                    };
                    Some((r.key, ev))
                }));
        }
        let watch = self.shared.engine.watch();
        if watch.wants(STREAMS_OF_A_BATCH) {
            let cfd = |group: u32| match plans.get(group as usize) {
                Some(p) => conns.get(p.token).map_or(-1, |c| c.fd),
                None => self.udp.as_ref().map_or(-1, |u| {
                    use std::os::fd::AsRawFd;
                    u.as_raw_fd()
                }),
            };
            let engine = &self.shared.engine;
            let class = |key_len: usize, value_len: usize| engine.item_class(key_len, value_len);
            super::watch::batch_events(watch, &batch, &self.responses, now, cfd, class);
        }
        self.batch_hint = batch.len().next_power_of_two().clamp(16, 4096);
        if batch.capacity() <= KEPT_REQUESTS {
            self.spare_batch = recycle(batch);
        }
        t0 = TaskTimes::add(&tasks.engine, t0);
        let mut stop = false;
        let mut to_stage = Vec::new();
        let mut blocked = Vec::new();
        for plan in plans {
            let Some(c) = self.conns.get_mut(plan.token) else {
                continue;
            };
            let mut end = plan.end;
            let mut steps = plan.steps.clone();
            let marks = &self.marks[plan.marks.clone()];
            let deferred = first_deferred(marks, &self.responses);
            c.key_cap = key_cap_after(c.key_cap, marks, deferred);
            if let Some(m) = deferred {
                // Answer up to the read that did not fit; the client resumes there.
                steps.end = m.step;
                end.pos = m.resume;
                end.cont = m.cont;
                end.swallow = 0;
                end.close = false;
                end.more = true;
                end.scanned = 0;
            }
            let was_watcher = c.watch.is_some();
            let mut shut = false;
            for step in &self.steps[steps] {
                shut |= respond::wr_compose(
                    step,
                    &c.rbuf,
                    &self.responses,
                    &self.shared,
                    now,
                    &mut c.wbuf,
                    Some(respond::Streams {
                        watch: &mut c.watch,
                        dump: &mut c.dump,
                    }),
                );
            }
            if shut {
                // As memcached: nothing this client sent after its `shutdown` runs (writes
                // sent behind it were stored, and kept across a warm restart).
                end.close = true;
                end.more = false;
                stop = true;
            }
            if !was_watcher && c.watch.is_some() {
                self.watchers += 1;
            }
            // Counted at once, so a dump composed for a later connection of this pass sees
            // what this one's replies hold (respond::dump_refused).
            c.account(&self.shared.stats.conn_buffer_bytes);
            if end.pos != c.rstart {
                // The command at the start of the input ran (or was refused): a data block
                // staged for it is stored now, or its memory goes back.
                crate::stage::release_body(c, &self.shared);
                c.last_cmd = now;
                (c.stage_refused, c.stage_waits) = (false, false);
                c.refuse_body = false;
            }
            if let Some((header, vlen)) = end.body {
                to_stage.push((plan.token, header, vlen));
            }
            c.rstart = end.pos;
            c.cont = end.cont.map(|k| k.relative_to(end.pos));
            c.swallow = end.swallow;
            c.scanned = end.scanned;
            c.close_after_write |= end.close;
            c.want_parse = end.more;
            if end.blocked {
                // Tried again on the throttle timer (worker/io.rs), with its input held.
                (c.want_parse, c.want_read) = (false, false);
                blocked.push(plan.token);
            }
            c.binary = end.binary;
            if end.too_large > 0 {
                let refused = &self.shared.stats.too_large_refused;
                refused.fetch_add(end.too_large, Ordering::Relaxed);
            }
            if end.yielded {
                self.shared
                    .stats
                    .conn_yields
                    .fetch_add(1, Ordering::Relaxed);
            }
            c.authed = plan.authed;
        }
        stop |= self.wr_datagrams(udp_plans, now);
        // The connections' outputs hold what they send; the pass's own handles would keep
        // those chunks pinned for as long as this worker stays idle.
        self.responses.pinned.clear();
        TaskTimes::add(&tasks.wr, t0);
        for (t, header, vlen) in to_stage {
            self.stage_body(t, header, vlen, now);
        }
        for t in blocked {
            self.shared
                .stats
                .conn_buffer_throttled
                .fetch_add(1, Ordering::Relaxed);
            self.throttled.push(t);
        }
        if self.responses.data.capacity() > 4 << 20 {
            // A pass of large values: do not keep their memory for the next one.
            self.responses.data = Vec::new();
        }
        if stop {
            tracing::info!("shutdown command received");
            self.shared.stop_all();
        }
        ran
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_request_vector_keeps_its_allocation_and_holds_nothing() {
        let buf = b"key".to_vec();
        let mut v: Vec<Request<'_>> = Vec::with_capacity(300);
        v.push(Request::new(hkv_engine::Op::Get, &buf));
        let (ptr, cap) = (v.as_ptr() as usize, v.capacity());
        let kept: Vec<Request<'static>> = recycle(v);
        drop(buf);
        assert!(kept.is_empty());
        assert_eq!((kept.as_ptr() as usize, kept.capacity()), (ptr, cap));
        let again: Vec<Request<'_>> = recycle(kept);
        assert_eq!(again.capacity(), cap);
    }
}
