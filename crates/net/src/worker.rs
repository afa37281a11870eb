//! A worker: one event loop, its connections, one engine batch per pass.

use std::io::ErrorKind;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::stream::Stream;
use hkv_engine::{Request, Response, Responses, Scratch};
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::conn::Conn;
use crate::counters::TaskTimes;
use crate::plan::{pp_plan_input, InputEnd, PassBudget, ReadMark};
use crate::reply::unix_now;
use crate::respond;
use crate::sasl::Gate;
use crate::shared::Shared;
use crate::step::Step;

mod express;
mod io;
mod spin;
mod uring;

pub(crate) const WAKE: Token = Token(usize::MAX);
const UDP: Token = Token(usize::MAX - 1);
/// Datagrams taken per pass; more wait for the next pass.
const UDP_PER_PASS: usize = 64;
/// Longest a stopping worker spends answering what its clients already sent.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// Value bytes a pass copies for deferrable reads, all connections together (each
/// connection also stops at the output high-water mark); the rest wait for the next pass.
const PASS_VALUE_BUDGET: usize = 16 << 20;
/// Worst-case bytes of reads a pass must answer because a write of the same client follows
/// them (at least two items).
const PASS_ND_BUDGET: usize = 16 << 20;
/// Buffers a connection may hold and still be read while all connections together are over
/// `conn_buffer_limit`: ordinary clients keep being served, the largest wait.
const BUFFER_FLOOR: usize = 64 << 10;
/// How often throttled connections are looked at again.
const THROTTLE_RETRY: Duration = Duration::from_millis(5);
const READ_CHUNK: usize = 16 * 1024;

pub(crate) struct Worker {
    id: usize,
    poll: Poll,
    incoming: Receiver<Stream>,
    shared: Arc<Shared>,
    _waker: Arc<Waker>,
    conns: Slab<Conn>,
    scratch: Scratch,
    responses: Responses,
    steps: Vec<Step>,
    /// Keys decoded from base64 (meta `b`) for the pass being planned; reset after it.
    keys: bumpalo::Bump,
    marks: Vec<ReadMark>,
    /// Connections not read in the last pass because buffers were over their limit.
    throttled: Vec<usize>,
    /// Over the limit, one connection per worker part way through a request still reads, so
    /// large requests finish one after another instead of all waiting for each other.
    exempt: Option<usize>,
    udp: Option<mio::net::UdpSocket>,
    udp_ready: bool,
    udp_reqs: Vec<crate::udp::UdpRequest>,
    udp_batch: Option<Box<crate::udp::UdpBatch>>,
    /// Engine requests of the pass being run, for the latency histogram.
    pass_requests: u64,
    /// `--io`: try io_uring when the loop starts (the ring must be made on its thread).
    io: crate::IoMode,
    /// The io_uring loop's ring; None: the epoll loop.
    ring: Option<crate::ring::Ring>,
    completions: Vec<crate::ring::Completion>,
    /// Incarnation numbers for connections on the ring.
    next_gen: u32,
}

/// What one pass decided for one connection.
struct Plan {
    token: usize,
    steps: Range<usize>,
    marks: Range<usize>,
    end: InputEnd,
    authed: bool,
}

impl Drop for Worker {
    /// Uncounts every connection this worker still holds or was handed: after a panic they
    /// close as the worker unwinds, and must not keep counting against `-c`.
    fn drop(&mut self) {
        let mut gone = self.conns.len();
        while self.incoming.try_recv().is_ok() {
            gone += 1;
        }
        let bytes: usize = self.conns.iter().map(|(_, c)| c.accounted).sum();
        for (_, c) in self.conns.iter_mut() {
            if let Some((key, _)) = c.registered.take() {
                self.shared.conns.remove(key);
            }
        }
        self.shared
            .stats
            .conn_buffer_bytes
            .fetch_sub(bytes, Ordering::Relaxed);
        self.conns.clear();
        self.shared
            .stats
            .curr_connections
            .fetch_sub(gone, Ordering::Relaxed);
    }
}

impl Worker {
    pub fn new(
        id: usize,
        poll: Poll,
        incoming: Receiver<Stream>,
        shared: Arc<Shared>,
        waker: Arc<Waker>,
        mut udp: Option<mio::net::UdpSocket>,
        io: crate::IoMode,
    ) -> std::io::Result<Worker> {
        if let Some(u) = udp.as_mut() {
            poll.registry().register(u, UDP, Interest::READABLE)?;
        }
        Ok(Worker {
            id,
            poll,
            incoming,
            shared,
            _waker: waker,
            conns: Slab::new(),
            scratch: Scratch::default(),
            responses: Responses::default(),
            steps: Vec::new(),
            keys: bumpalo::Bump::new(),
            marks: Vec::new(),
            throttled: Vec::new(),
            exempt: None,
            udp_ready: udp.is_some(),
            udp_batch: udp.is_some().then(|| Box::new(crate::udp::UdpBatch::new())),
            udp,
            udp_reqs: Vec::new(),
            pass_requests: 0,
            io,
            ring: None,
            completions: Vec::new(),
            next_gen: 0,
        })
    }

    pub fn run(mut self) {
        // The scheduler holds batches for C (tens to hundreds of microseconds) with a sleep;
        // the kernel's default 50 us timer slack would add half of that again to every hold.
        if let Err(e) = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1000)) {
            tracing::debug!(error = %e, "could not lower the timer slack");
        }
        self.start_ring();
        self.shared.loops_ready.fetch_add(1, Ordering::Release);
        let mut events = Events::with_capacity(1024);
        let mut ready: Vec<usize> = Vec::new();
        let mut pending: Vec<usize> = Vec::new();
        let mut last_launch = Instant::now();
        let idle = self.shared.config.idle_timeout;
        let mut last_idle_check = Instant::now();
        let mut spin = spin::Spin::new(self.shared.config.busy_poll);
        loop {
            let mut timeout = (!pending.is_empty() || self.udp_ready).then_some(Duration::ZERO);
            if !self.throttled.is_empty() {
                timeout = Some(timeout.unwrap_or(THROTTLE_RETRY).min(THROTTLE_RETRY));
                pending.append(&mut self.throttled);
            }
            if let Some(limit) = idle {
                // Wake up at least once a second to close idle connections.
                timeout = Some(timeout.unwrap_or(Duration::MAX).min(Duration::from_secs(1)));
                if last_idle_check.elapsed() >= Duration::from_secs(1) {
                    last_idle_check = Instant::now();
                    self.close_idle(limit);
                }
            }
            if timeout.is_none() && self.shared.engine.has_pending_writes() {
                // About to sleep: delayed index writes have no batch left to wait for.
                self.shared.engine.apply_pending();
            }
            ready.clear();
            ready.append(&mut pending);
            if ready.is_empty() && timeout != Some(Duration::ZERO) {
                let window = spin.window();
                if !window.is_zero() {
                    self.spin(&mut events, window, &mut ready, &mut spin);
                }
            }
            let got = !ready.is_empty() || self.udp_ready;
            let timeout = if got { Some(Duration::ZERO) } else { timeout };
            if let Err(e) = self.wait(&mut events, timeout, &mut ready) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(worker = self.id, error = %e, "poll failed");
                break;
            }
            if self.shared.stop.load(Ordering::SeqCst) {
                break;
            }
            let woke = Instant::now();
            if !ready.is_empty() || self.udp_ready {
                // The periodic scheduler: keep collecting until the interval C since this
                // worker's last batch has passed, so everything that arrives meanwhile joins
                // one batch. Requests stay in their connections' buffers until then.
                let wait = self.shared.engine.batch_wait(last_launch);
                if !wait.is_zero() {
                    let deadline = Instant::now() + wait;
                    if self.hot_path_on() {
                        // KVCG's hot path: reads of hot keys at the head of a connection's
                        // input are answered as they arrive during the window; the rest
                        // waits for the batch.
                        self.express(&ready);
                        loop {
                            let left = deadline.saturating_duration_since(Instant::now());
                            if left.is_zero() || self.shared.stop.load(Ordering::SeqCst) {
                                break;
                            }
                            let before = ready.len();
                            if self.wait(&mut events, Some(left), &mut ready).is_ok()
                                && ready.len() > before
                            {
                                let fresh = ready[before..].to_vec();
                                self.express(&fresh);
                            }
                        }
                    } else {
                        std::thread::sleep(wait);
                        let _ = self.wait(&mut events, Some(Duration::ZERO), &mut ready);
                    }
                    if self.shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                }
                last_launch = Instant::now();
            }
            ready.sort_unstable();
            ready.dedup();
            self.pass_requests = 0;
            self.pass(&ready);
            self.shared
                .stats
                .latency
                .observe(woke.elapsed(), self.pass_requests);
            for &t in &ready {
                if let Some(c) = self.conns.get(t) {
                    let backed_up = c.pending_output() >= self.shared.config.output_high_water;
                    if !backed_up && (c.want_read || c.want_parse) {
                        pending.push(t);
                    }
                }
            }
        }
        self.drain();
        let tokens: Vec<usize> = self.conns.iter().map(|(t, _)| t).collect();
        for t in tokens {
            self.close(t);
        }
    }

    /// Polls without sleeping for up to `window`, until some connection has work.
    fn spin(
        &mut self,
        events: &mut Events,
        window: Duration,
        ready: &mut Vec<usize>,
        spin: &mut spin::Spin,
    ) {
        let until = Instant::now() + window;
        loop {
            if self.wait(events, Some(Duration::ZERO), ready).is_err() {
                return;
            }
            if !ready.is_empty() || self.udp_ready {
                spin.hit();
                return;
            }
            if Instant::now() >= until || self.shared.stop.load(Ordering::Relaxed) {
                spin.miss();
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// Graceful stop (SIGTERM, `shutdown`): no new connections are taken, but what clients
    /// have already sent is answered and the replies sent before their connections close,
    /// so a restart loses no request a client believes it made. Bounded by [`DRAIN_LIMIT`]
    /// (a client that does not read its replies cannot hold the exit up).
    fn drain(&mut self) {
        let deadline = Instant::now() + DRAIN_LIMIT;
        // The first pass reads every connection: a readiness event may have arrived with the
        // stop and never been handled.
        let mut first = true;
        // On io_uring, connections whose receives or sends completed since the last pass.
        let mut woken: Vec<usize> = Vec::new();
        let mut events = Events::with_capacity(64);
        while Instant::now() < deadline {
            let busy: Vec<usize> = self
                .conns
                .iter()
                .filter(|(t, c)| {
                    first || c.want_parse || c.want_read || c.output_waiting() || woken.contains(t)
                })
                .map(|(t, _)| t)
                .collect();
            first = false;
            woken.clear();
            if busy.is_empty() {
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
            if after == before {
                // Nothing moved (a client not reading, or half a request): look again soon.
                std::thread::sleep(Duration::from_millis(5));
                if after == 0 {
                    return;
                }
            }
        }
    }

    /// memcached's idle kick: connections that moved no bytes for `limit`.
    fn close_idle(&mut self, limit: Duration) {
        let idle: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.last_active.elapsed() > limit)
            .map(|(t, _)| t)
            .collect();
        for t in idle {
            self.shared.stats.idle_kicks.fetch_add(1, Ordering::Relaxed);
            self.close(t);
        }
    }

    fn collect(&mut self, events: &Events, ready: &mut Vec<usize>) {
        for ev in events.iter() {
            if ev.token() == WAKE {
                self.accept_new(ready);
            } else if ev.token() == UDP {
                self.udp_ready = true;
            } else {
                ready.push(ev.token().0);
            }
        }
    }

    fn accept_new(&mut self, ready: &mut Vec<usize>) {
        while let Ok(stream) = self.incoming.try_recv() {
            let token = self.conns.vacant_key();
            let (fd, addr, listen) = stream.describe();
            let mut conn = Conn::new(stream);
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
                self.shared
                    .stats
                    .curr_connections
                    .fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            let inserted = self.conns.insert(conn);
            debug_assert_eq!(inserted, token);
            // Data may already be waiting; edge-triggered readiness would not tell us (on
            // io_uring this arms the first receive).
            ready.push(token);
        }
    }

    fn close(&mut self, token: usize) {
        if self.conns.contains(token) {
            let mut c = self.conns.remove(token);
            if let Some((key, _)) = c.registered.take() {
                self.shared.conns.remove(key);
            }
            self.shared
                .stats
                .conn_buffer_bytes
                .fetch_sub(c.accounted, Ordering::Relaxed);
            if self.exempt == Some(token) {
                self.exempt = None;
            }
            if let Some(r) = c.ring.take() {
                self.ring_release(token, r);
            } else {
                let _ = self.poll.registry().deregister(&mut c.stream);
            }
            self.shared
                .stats
                .curr_connections
                .fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// RV for every ready connection, then PP, one engine batch, WR and SD.
    fn pass(&mut self, ready: &[usize]) {
        let read_cap = self.read_cap();
        let shared = Arc::clone(&self.shared);
        let tasks = &shared.stats.tasks;
        let t0 = std::time::Instant::now();
        let stats = &shared.stats;
        let limit = self.shared.config.conn_buffer_limit;
        let high_water = self.shared.config.output_high_water;
        for &t in ready {
            if self.send(t).is_err() {
                if let Some(c) = self.conns.get_mut(t) {
                    c.read_closed = true;
                    c.close_after_write = true;
                    c.wpos = c.wbuf.len();
                }
            }
            let Some(c) = self.conns.get_mut(t) else {
                continue;
            };
            {
                let over = stats.conn_buffer_bytes.load(Ordering::Relaxed) > limit;
                let mut cap = read_cap;
                let mid_request = c.mid_request();
                if self.exempt == Some(t) && !mid_request {
                    self.exempt = None;
                }
                if over {
                    if mid_request && self.exempt.is_none_or(|e| e == t) {
                        self.exempt = Some(t);
                    } else if c.buffer_bytes() < BUFFER_FLOOR {
                        stats.conn_buffer_throttled.fetch_add(1, Ordering::Relaxed);
                        cap = BUFFER_FLOOR / 2;
                    } else {
                        stats.conn_buffer_throttled.fetch_add(1, Ordering::Relaxed);
                        self.throttled.push(t);
                        self.hold(t);
                        continue;
                    }
                }
                if c.pending_output() < high_water {
                    self.receive(t, cap);
                    if let Some(c) = self.conns.get_mut(t) {
                        c.account(&stats.conn_buffer_bytes);
                        if cap < read_cap && c.want_read {
                            // Stopped at the floor: look again on the timer, not at once.
                            c.want_read = false;
                            self.throttled.push(t);
                        }
                    }
                } else {
                    c.want_read = true;
                    self.hold(t);
                }
            }
        }
        self.receive_udp();
        TaskTimes::add(&tasks.rv, t0);
        self.process(ready);
        self.udp_reqs.clear();
        let _sd = Timed(&tasks.sd, std::time::Instant::now());
        for &t in ready {
            let failed = self.send(t).is_err();
            let Some(c) = self.conns.get_mut(t) else {
                continue;
            };
            c.compact();
            c.account(&self.shared.stats.conn_buffer_bytes);
            if self.exempt == Some(t) && !c.mid_request() {
                self.exempt = None;
            }
            let done_reading = c.read_closed && (c.unparsed() == 0 || !c.want_parse);
            if failed || (!c.output_waiting() && (c.close_after_write || done_reading)) {
                self.close(t);
                continue;
            }
            // On io_uring a send's completion is the writability signal.
            let want_write = c.output_waiting() && c.ring.is_none();
            if want_write != c.writable_registered {
                let interest = if want_write {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                if self
                    .poll
                    .registry()
                    .reregister(&mut c.stream, Token(t), interest)
                    .is_err()
                {
                    self.close(t);
                    continue;
                }
                c.writable_registered = want_write;
            }
        }
    }

    /// RV for UDP: takes up to UDP_PER_PASS datagrams into this pass, many per system call.
    fn receive_udp(&mut self) {
        let (Some(sock), Some(batch)) = (self.udp.as_ref(), self.udp_batch.as_mut()) else {
            return;
        };
        if !self.udp_ready {
            return;
        }
        // UDP has no connection to authenticate: with -S or -Y nothing is served over it
        // (and nothing is answered, so no reflection).
        let refuse = self.shared.config.sasl.is_some() || self.shared.config.authfile.is_some();
        let stats = &self.shared.stats;
        let reqs = &mut self.udp_reqs;
        let mut errors: Vec<(std::net::SocketAddr, u16)> = Vec::new();
        while reqs.len() < UDP_PER_PASS {
            let got = batch.receive(sock, |peer, d| {
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
                            payload: d[payload_at..].to_vec(),
                        });
                    }
                    crate::udp::Frame::MultiPacket { id } => errors.push((peer, id)),
                    crate::udp::Frame::Drop => {}
                }
            });
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
        for (peer, id) in errors {
            let msg = format!("{}\r\n", hkv_proto::errors::MULTI_PACKET);
            for dg in crate::udp::datagrams(id, msg.as_bytes()) {
                batch.out.push((peer, dg));
            }
        }
    }

    fn read_cap(&self) -> usize {
        let l = &self.shared.config.limits;
        l.max_item_size.max(l.max_get_line) + 64 * 1024
    }

    /// The pass's budgets for value bytes (see `plan`): deferrable reads stop at
    /// `PASS_VALUE_BUDGET` in all and the output high-water per connection; reads that must be
    /// answered in this pass are charged to `PASS_ND_BUDGET`.
    fn pass_budget(&self) -> PassBudget {
        let l = &self.shared.config.limits;
        let hw = self.shared.config.output_high_water;
        PassBudget {
            nd_left: PASS_ND_BUDGET.max(2 * l.max_item_size),
            per_client: hw,
            value_bound: self.shared.engine.largest_value_bound(),
            written: 0,
            max_item: l.max_item_size,
        }
    }

    /// PP for every connection with input, one engine batch, then WR.
    fn process(&mut self, ready: &[usize]) {
        self.process_with(ready, None);
    }

    /// PP, the engine batch and WR for `ready`; with `hot`, only each connection's leading
    /// reads of hot keys (the hot path). Returns the engine requests run.
    fn process_with(&mut self, ready: &[usize], hot: Option<&crate::hot::HotSet>) -> u64 {
        let t0 = std::time::Instant::now();
        let limits = self.shared.config.limits;
        let high_water = self.shared.config.output_high_water;
        let now = unix_now();
        let mut plans: Vec<Plan> = Vec::new();
        let mut budget = self.pass_budget();
        self.steps.clear();
        self.marks.clear();
        self.responses.clear();
        self.responses.value_budget = PASS_VALUE_BUDGET.max(high_water);
        self.responses.group_budget = high_water;
        self.keys.reset();
        let keys = &self.keys;
        let sasl = self.shared.config.sasl.as_deref();
        let authfile_users = self.shared.config.authfile.as_ref().map(|a| a.current());
        let authfile = authfile_users.as_deref();
        let conns = &self.conns;
        let steps = &mut self.steps;
        let marks = &mut self.marks;
        let mut batch: Vec<Request<'_>> = Vec::new();
        let only_hot = |r: &Request<'_>| {
            matches!(r.op, hkv_engine::Op::Get | hkv_engine::Op::Gets)
                && !r.meta.previous
                && hot.is_some_and(|h| h.contains(r.key))
        };
        let only: Option<&dyn Fn(&Request<'_>) -> bool> = hot.map(|_| &only_hot as _);
        for &t in ready {
            let Some(c) = conns.get(t) else { continue };
            // A client that does not read its replies stops being served, not just read.
            if c.close_after_write || c.pending_output() >= high_water {
                continue;
            }
            // The hot path takes whole requests from the head of the input only, and only
            // from connections already past authentication (an authenticating `set` must be
            // planned by the ordinary pass).
            if hot.is_some()
                && (c.cont.is_some()
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
        let udp_reqs = &self.udp_reqs;
        let mut udp_plans: Vec<(Range<usize>, Range<usize>, bool)> =
            Vec::with_capacity(udp_reqs.len());
        for r in udp_reqs {
            let (start, mstart) = (steps.len(), marks.len());
            let end = pp_plan_input(
                &r.payload,
                keys,
                0,
                0,
                // Each datagram says for itself whether it is text or binary, as in memcached.
                None,
                None,
                0,
                &limits,
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
            );
            let unfinished = end.pos < r.payload.len() || end.cont.is_some();
            udp_plans.push((start..steps.len(), mstart..marks.len(), unfinished));
        }
        let tasks = &self.shared.stats.tasks;
        let mut t0 = TaskTimes::add(&tasks.pp, t0);
        if let Some(router) = self.shared.config.hot.as_deref() {
            // Hot-path reads are counted too: a key stays hot while it is read.
            let reads = batch
                .iter()
                .filter(|r| matches!(r.op, hkv_engine::Op::Get | hkv_engine::Op::Gets));
            for r in reads {
                router.sample(self.id, r.key);
            }
        }
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
        if self.shared.detail.enabled() {
            use crate::stats::detail::Event;
            let results = &self.responses.results;
            self.shared
                .detail
                .record(batch.iter().zip(results.iter()).filter_map(|(r, res)| {
                    let ev = match r.op {
                        hkv_engine::Op::Get | hkv_engine::Op::Gets => Event::Get {
                            hit: matches!(res, hkv_engine::Response::Value { .. }),
                        },
                        hkv_engine::Op::Set
                        | hkv_engine::Op::Add
                        | hkv_engine::Op::Replace
                        | hkv_engine::Op::Append
                        | hkv_engine::Op::Prepend
                        | hkv_engine::Op::Cas => Event::Set,
                        hkv_engine::Op::Delete => Event::Delete,
                        _ => return None,
                    };
                    Some((r.key, ev))
                }));
        }
        drop(batch);
        t0 = TaskTimes::add(&tasks.engine, t0);
        let mut stop = false;
        for plan in plans {
            let Some(c) = self.conns.get_mut(plan.token) else {
                continue;
            };
            let mut end = plan.end;
            let mut steps = plan.steps.clone();
            if let Some(m) = first_deferred(&self.marks[plan.marks], &self.responses) {
                // Answer up to the read that did not fit; the client resumes there.
                steps.end = m.step;
                end.pos = m.resume;
                end.cont = m.cont;
                end.swallow = 0;
                end.close = false;
                end.more = true;
                end.scanned = 0;
            }
            for step in &self.steps[steps] {
                stop |= respond::wr_compose(
                    step,
                    &c.rbuf,
                    &self.responses,
                    &self.shared,
                    now,
                    &mut c.wbuf,
                );
            }
            c.rstart = end.pos;
            c.cont = end.cont.map(|k| k.relative_to(end.pos));
            c.swallow = end.swallow;
            c.scanned = end.scanned;
            c.close_after_write |= end.close;
            c.want_parse = end.more;
            c.binary = end.binary;
            c.authed = plan.authed;
        }
        for (r, (range, mrange, mut unfinished)) in self.udp_reqs.iter().zip(udp_plans) {
            let mut reply = Vec::new();
            let mut range = range;
            if let Some(m) = first_deferred(&self.marks[mrange], &self.responses) {
                range.end = m.step;
                unfinished = true;
            }
            for step in &self.steps[range] {
                stop |= respond::wr_compose(
                    step,
                    &r.payload,
                    &self.responses,
                    &self.shared,
                    now,
                    &mut reply,
                );
            }
            if unfinished {
                // One datagram gets one pass: what did not fit in it is refused as memcached
                // refuses a reply it cannot make room for.
                crate::reply::line(&mut reply, hkv_proto::errors::GET_OUT_OF_MEMORY);
            }
            if let Some(batch) = self.udp_batch.as_mut() {
                for dg in crate::udp::datagrams(r.id, &reply) {
                    batch.out.push((r.peer, dg));
                }
            }
        }
        if let (Some(sock), Some(batch)) = (self.udp.as_ref(), self.udp_batch.as_mut()) {
            // SD for UDP: every reply of the pass in as few sendmmsg calls as fit.
            let n = batch.flush(sock);
            self.shared
                .stats
                .bytes_written
                .fetch_add(n, Ordering::Relaxed);
        }
        TaskTimes::add(&tasks.wr, t0);
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

/// The first read of a client that the engine deferred (the value budget was spent).
fn first_deferred<'m>(marks: &'m [ReadMark], res: &Responses) -> Option<&'m ReadMark> {
    marks
        .iter()
        .find(|m| res.results[m.req as usize] == Response::Deferred)
}

/// Adds the time from its start to `counter` when dropped (the send phase has early exits).
struct Timed<'a>(&'a std::sync::atomic::AtomicU64, std::time::Instant);

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        TaskTimes::add(self.0, self.1);
    }
}
