//! A worker: one event loop, its connections, one engine batch per pass.

use std::io::ErrorKind;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::stream::Stream;
use hkv_engine::{Responses, Scratch};
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::conn::Conn;
use crate::counters::TaskTimes;
use crate::plan::ReadMark;
use crate::shared::Shared;
use crate::udp::UdpBatch;
use hkv_proto::step::Step;

mod close;
mod datagrams;
mod deferral;
mod drain;
mod dump;
mod express;
mod idle;
mod io;
mod listen;
mod probe;
mod process;
mod spin;
mod stage;
mod udp_reply;
mod uring;
mod watch;

pub(crate) const WAKE: Token = Token(usize::MAX);
const UDP: Token = Token(usize::MAX - 1);
/// Datagrams taken per pass; more wait for the next pass.
const UDP_PER_PASS: usize = 64;
/// How long the connection exempt from the buffer limit may go without input before another
/// part way through a request takes its place: long enough for a client's own pauses between
/// sends, short against a request that waits for the slot.
const EXEMPT_STALL: Duration = Duration::from_millis(50);
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
/// The longest the retries back off to while buffers stay over `--conn-buffer-mb`.
const THROTTLE_RETRY_MAX: Duration = Duration::from_millis(40);
const READ_CHUNK: usize = 16 * 1024;
/// `worker_conns` of a worker that stopped (shown as `-` in `stats hkv`).
pub(crate) const GONE: usize = usize::MAX / 2;

pub(crate) struct Worker {
    id: usize,
    poll: Poll,
    incoming: Receiver<Stream>,
    shared: Arc<Shared>,
    _waker: Arc<Waker>,
    conns: Slab<Conn>,
    /// Connections of this worker that are watchers (`watch`).
    watchers: usize,
    scratch: Scratch,
    responses: Responses,
    steps: Vec<Step>,
    /// Keys decoded from base64 (meta `b`) for the pass being planned; reset after it.
    keys: bumpalo::Bump,
    marks: Vec<ReadMark>,
    /// Connections not read in the last pass because buffers were over their limit.
    throttled: Vec<usize>,
    /// When the throttled connections are looked at again.
    throttle_due: Option<Instant>,
    /// The wait before the next retry: doubled after each retry that found the buffers
    /// still over their limit.
    throttle_wait: Duration,
    /// Over the limit, one connection per worker part way through a request still reads, so
    /// large requests finish one after another instead of all waiting for each other.
    exempt: Option<usize>,
    udp: Option<mio::net::UdpSocket>,
    udp_ready: bool,
    udp_reqs: Vec<crate::udp::UdpRequest>,
    /// Datagrams to go on with in the next pass (at most UDP_PER_PASS: they count in it).
    udp_carry: Vec<crate::udp::UdpRequest>,
    /// Datagrams received past a pass's UDP_PER_PASS (a GRO receive brings up to 128), in
    /// the order they came: taken before anything new is received, so a pass stays at
    /// UDP_PER_PASS and this holds at most one `recvmmsg`'s worth (1 MiB, 2,047 datagrams).
    udp_pending: std::collections::VecDeque<crate::udp::UdpRequest>,
    udp_batch: Option<Box<UdpBatch>>,
    /// A datagram's reply while it is composed (kept: small, shrunk after one that was not).
    udp_reply: hkv_proto::output::Output,
    /// Engine requests of the pass being run, for the latency histogram.
    pass_requests: u64,
    /// Draws the timed passes, one in [`crate::counters::TIME_EVERY`].
    sampler: hkv_engine::Sampler,
    /// Requests the last pass planned (rounded up): the next pass's starting capacity.
    batch_hint: usize,
    /// The last pass's request vector, empty, kept for its allocation
    /// ([`process::recycle`]; at most [`process::KEPT_REQUESTS`] of capacity).
    spare_batch: Vec<hkv_engine::Request<'static>>,
    /// The pass being run is timed.
    timed: bool,
    /// When the loop last woke (a wait returned): what connections' activity times read
    /// instead of a clock read each.
    now: Instant,
    /// `--io`: try io_uring when the loop starts (the ring must be made on its thread).
    io: crate::IoMode,
    /// The io_uring loop's ring; None: the epoll loop.
    ring: Option<crate::ring::Ring>,
    completions: Vec<crate::ring::Completion>,
    /// Connections closed on the ring this pass, their descriptors still open (close.rs).
    closing: Vec<Conn>,
    /// Incarnation numbers for connections on the ring.
    next_gen: u32,
    /// This worker's own listening sockets (`--accept workers`; empty: the acceptor thread
    /// hands connections over).
    listeners: Vec<listen::OwnListener>,
    /// Accepting paused for want of descriptors resumes then.
    accept_retry: Option<Instant>,
}

impl Drop for Worker {
    /// Uncounts every connection this worker still holds or was handed: after a panic they
    /// close as the worker unwinds, and must not keep counting against `-c`.
    fn drop(&mut self) {
        self.forget_listeners();
        let mut gone = self.conns.len();
        while self.incoming.try_recv().is_ok() {
            gone += 1;
        }
        let bytes: usize = self.conns.iter().map(|(_, c)| c.accounted).sum();
        for (_, c) in self.conns.iter_mut() {
            crate::stage::release_body(c, &self.shared);
            if let Some((key, _)) = c.registered.take() {
                self.shared.conns.remove(key);
            }
            if let Some(id) = c.watch.take() {
                self.shared.engine.watch().remove(id);
            }
        }
        self.shared
            .stats
            .conn_buffer_bytes
            .fetch_sub(bytes, Ordering::Relaxed);
        if let Some(n) = self.shared.worker_conns.get(self.id) {
            // Never the least loaded again: nothing is passed to a worker that is gone.
            n.store(GONE, Ordering::Relaxed);
        }
        self.conns.clear();
        self.shared
            .stats
            .curr_connections
            .fetch_sub(gone, Ordering::Relaxed);
    }
}

/// The sockets a worker serves by itself: its UDP socket, and its own listening sockets
/// (`--accept workers`).
pub(crate) struct OwnSockets {
    pub udp: Option<mio::net::UdpSocket>,
    pub listeners: Vec<crate::stream::Listener>,
}

impl Worker {
    pub fn new(
        id: usize,
        poll: Poll,
        incoming: Receiver<Stream>,
        shared: Arc<Shared>,
        waker: Arc<Waker>,
        own: OwnSockets,
        io: crate::IoMode,
    ) -> std::io::Result<Worker> {
        let OwnSockets {
            mut udp,
            mut listeners,
        } = own;
        listeners.truncate(listen::MAX_LISTENERS);
        if let Some(u) = udp.as_mut() {
            poll.registry().register(u, UDP, Interest::READABLE)?;
        }
        Ok(Worker {
            id,
            poll,
            incoming,
            udp_batch: UdpBatch::boxed_if(udp.is_some(), shared.config.udp_max_wait),
            shared,
            _waker: waker,
            conns: Slab::new(),
            scratch: Scratch::default(),
            responses: Responses::default(),
            steps: Vec::new(),
            keys: bumpalo::Bump::new(),
            marks: Vec::new(),
            throttled: Vec::new(),
            throttle_due: None,
            throttle_wait: THROTTLE_RETRY,
            exempt: None,
            udp_ready: udp.is_some(),
            udp_reply: Default::default(),
            udp,
            udp_reqs: Vec::new(),
            udp_carry: Vec::new(),
            udp_pending: std::collections::VecDeque::new(),
            pass_requests: 0,
            sampler: hkv_engine::Sampler::seeded(0x5EED_0000 ^ id as u32),
            batch_hint: 16,
            spare_batch: Vec::new(),
            timed: false,
            now: Instant::now(),
            io,
            ring: None,
            completions: Vec::new(),
            closing: Vec::new(),
            watchers: 0,
            next_gen: 0,
            listeners: listeners
                .into_iter()
                .map(listen::OwnListener::new)
                .collect(),
            accept_retry: None,
        })
    }

    pub fn run(mut self) {
        // The scheduler holds batches for C (tens to hundreds of microseconds) with a sleep;
        // the kernel's default 50 us timer slack would add half of that again to every hold.
        if let Err(e) = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1000)) {
            tracing::debug!(error = %e, "could not lower the timer slack");
        }
        self.start_ring();
        self.start_listening();
        self.shared.loops_ready.fetch_add(1, Ordering::Release);
        let mut events = Events::with_capacity(1024);
        let mut ready: Vec<usize> = Vec::new();
        let mut pending: Vec<usize> = Vec::new();
        let mut last_launch = Instant::now();
        let idle = self.shared.config.idle_timeout;
        let mut last_idle_check = Instant::now();
        let mut last_probe = Instant::now();
        let mut spin = spin::Spin::new(self.shared.config.busy_poll);
        loop {
            let mut timeout = (!pending.is_empty() || self.udp_ready).then_some(Duration::ZERO);
            if let Some(left) = self.throttled_due(&mut pending) {
                timeout = Some(timeout.unwrap_or(left).min(left));
            }
            if self.watchers > 0 {
                // Watchers' lines are written by other threads: look for them on a tick.
                timeout = Some(timeout.unwrap_or(watch::WATCH_TICK).min(watch::WATCH_TICK));
                self.watchers_with_lines(&mut pending);
            }
            if let Some(limit) = idle {
                // Wake up at least once a second to close idle connections.
                timeout = Some(timeout.unwrap_or(Duration::MAX).min(Duration::from_secs(1)));
                // The loop's last wake-up stands for now: a clock read per turn is ~30 ns.
                if self.now.saturating_duration_since(last_idle_check) >= Duration::from_secs(1) {
                    last_idle_check = self.now;
                    self.close_idle(limit);
                }
            }
            if self.ring.is_some() && !self.conns.is_empty() {
                // Receives that missed their connection's end (worker/probe.rs).
                timeout = Some(
                    timeout
                        .unwrap_or(probe::FIRST_PROBE)
                        .min(probe::FIRST_PROBE),
                );
                if self.now.saturating_duration_since(last_probe) >= probe::FIRST_PROBE {
                    last_probe = self.now;
                    self.probe_quiet(&mut pending);
                }
            }
            if let Some(left) = self.accept_backoff(&mut pending) {
                timeout = Some(timeout.unwrap_or(left).min(left));
            }
            if pending.is_empty() && timeout != Some(Duration::ZERO) {
                // About to sleep (until work comes or a timer: the probe's, idle kicks,
                // throttling): delayed index writes have no batch left to wait for, and
                // the scheduler hears of the batches this worker ran since it last told it.
                if self.shared.engine.has_pending_writes() {
                    self.shared.engine.apply_pending();
                }
                self.shared.engine.idle(&mut self.scratch);
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
            let woke = self.now;
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
                    last_launch = Instant::now();
                } else {
                    last_launch = woke;
                }
            }
            ready.sort_unstable();
            ready.dedup();
            self.pass_requests = 0;
            self.timed = self.sampler.one_in(crate::counters::TIME_EVERY);
            self.pass(&ready);
            if self.timed {
                // Counted for the untimed passes too, as the task times are.
                self.shared.stats.latency.observe(
                    woke.elapsed(),
                    self.pass_requests * crate::counters::TIME_EVERY,
                );
            }
            // Backed up as process() sees it: over the buffer limit that is a fraction of
            // the high-water mark, and a client not reading must wait for writability, not
            // be passed again at once (which spun the worker).
            let backed_up_at = self.output_allowance().0;
            for &t in &ready {
                if let Some(c) = self.conns.get(t) {
                    let backed_up = c.pending_output() >= backed_up_at;
                    // A dumping connection is passed again for its next lines only: its
                    // input waits for the END, and passing it for that spun the worker
                    // while a slow reader took the last lines (found in review).
                    let wants_input = c.dump.is_none() && (c.want_read || c.want_parse);
                    if !backed_up && (wants_input || c.dump_wants_lines()) {
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

    fn collect(&mut self, events: &Events, ready: &mut Vec<usize>) {
        for ev in events.iter() {
            if ev.token() == WAKE {
                self.accept_new(ready);
            } else if ev.token() == UDP {
                self.udp_ready = true;
            } else if let Some(i) = listen::listener_of(ev.token()) {
                self.accept_ready(i, ready);
            } else {
                ready.push(ev.token().0);
            }
        }
    }

    /// RV for every ready connection, then PP, one engine batch, WR and SD.
    fn pass(&mut self, ready: &[usize]) {
        let read_cap = self.read_cap();
        let shared = Arc::clone(&self.shared);
        let tasks = &shared.stats.tasks;
        let t0 = self.task_clock();
        let stats = &shared.stats;
        let limit = self.shared.config.conn_buffer_limit;
        let high_water = self.shared.config.output_high_water;
        for &t in ready {
            self.send_or_drop(t);
            // The exempt connection gives the slot up once nothing has come from it for
            // EXEMPT_STALL, by its own last input (a stalled or hostile client).
            let holder_stalled = self.exempt.filter(|&e| e != t).is_none_or(|e| {
                self.conns
                    .get(e)
                    .is_none_or(|x| x.last_active.elapsed() > EXEMPT_STALL)
            });
            let Some(c) = self.conns.get_mut(t) else {
                continue;
            };
            let mut stalled_out = None;
            {
                let over = stats.conn_buffer_bytes.load(Ordering::Relaxed) > limit;
                let full = stage::input_cap(c, &self.shared.config.limits, read_cap);
                let mut cap = full;
                let mid_request = c.mid_request();
                if self.exempt == Some(t) && !mid_request {
                    self.exempt = None;
                }
                // Only for a truly unfinished first request: by a stale `mid_request`, clients
                // pipelining `mn` unread took it in turn (400 MB over; tests/buffer_limits.rs).
                if over {
                    if mid_request
                        && (self.exempt.is_none_or(|e| e == t) || holder_stalled)
                        && (self.exempt == Some(t)
                            || stage::starts_unfinished(c, &self.shared.config.limits))
                    {
                        stalled_out = self.exempt.filter(|&e| e != t);
                        self.exempt = Some(t);
                    } else if c.buffer_bytes() < BUFFER_FLOOR {
                        stats.conn_buffer_throttled.fetch_add(1, Ordering::Relaxed);
                        cap = BUFFER_FLOOR / 4;
                    } else {
                        stats.conn_buffer_throttled.fetch_add(1, Ordering::Relaxed);
                        // Output the kernel has not taken brings it back when it does (its
                        // socket's writability, or its send's completion): the timer's
                        // retries were all failed writes, and 900 TLS clients that
                        // never read kept the workers at 45% (a hostile probe).
                        if !c.output_waiting() {
                            self.throttled.push(t);
                        }
                        self.hold(t);
                        continue;
                    }
                }
                if c.pending_output() < high_water {
                    self.receive(t, cap);
                    if let Some(c) = self.conns.get_mut(t) {
                        c.account(&stats.conn_buffer_bytes);
                        if cap < full && c.want_read {
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
            if let Some(old) = stalled_out {
                self.refuse_stalled(old);
            }
        }
        self.receive_udp();
        self.feed_watchers(ready);
        self.feed_dumps(ready);
        TaskTimes::add(&tasks.rv, t0);
        self.process(ready);
        match self.udp_batch.as_mut() {
            Some(batch) => self.udp_reqs.drain(..).for_each(|r| batch.recycle(r)),
            None => self.udp_reqs.clear(),
        }
        if !self.udp_carry.is_empty() || !self.udp_pending.is_empty() {
            // Another pass at once, as for a socket with datagrams waiting.
            self.udp_ready = true;
        }
        let _sd = Timed(&tasks.sd, self.task_clock());
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
            // A client that sent `lru_crawler metadump all` and shut its side (`nc -q`) is
            // still sent the whole dump.
            let done_reading =
                c.read_closed && c.dump.is_none() && (c.unparsed() == 0 || !c.want_parse);
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

    /// A clock read for the task timers, in a timed pass only.
    pub(super) fn task_clock(&self) -> Option<Instant> {
        self.timed.then(Instant::now)
    }

    fn read_cap(&self) -> usize {
        let l = &self.shared.config.limits;
        l.max_item_size.max(l.max_get_line) + 64 * 1024
    }
}

/// Adds the time from its start to `counter` when dropped (the send phase has early exits).
struct Timed<'a>(&'a std::sync::atomic::AtomicU64, Option<std::time::Instant>);

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        TaskTimes::add(self.0, self.1);
    }
}
