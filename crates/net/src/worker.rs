//! A worker: one event loop, its connections, one engine batch per pass.

use std::io::{ErrorKind, Read, Write};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hkv_engine::{Op, Request, Responses, Scratch};
use hkv_proto::text::{self, ArithOp, Command, Parsed, StoreOp};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::binary::{BinStep, Flow};
use crate::conn::Conn;
use crate::respond::{self, Step};
use crate::stats::TaskTimes;
use crate::Shared;
use hkv_proto::binary::BinParsed;

pub(crate) const WAKE: Token = Token(usize::MAX);
const UDP: Token = Token(usize::MAX - 1);
/// Datagrams taken per pass; more wait for the next pass.
const UDP_PER_PASS: usize = 64;
/// Most requests taken from one connection in one pass, so one pipelining client cannot
/// make a batch (and everyone's latency) arbitrarily large.
const MAX_REQUESTS_PER_CONN_PASS: usize = 1024;
/// Most engine requests (keys) for one connection in one pass. Values read are copied into
/// the pass's output, so this bounds what one client can make the server hold at once
/// (32 x the item size limit) before the output high-water mark stops it being read.
const MAX_KEYS_PER_CONN_PASS: usize = 32;
const READ_CHUNK: usize = 16 * 1024;

pub(crate) struct Worker {
    id: usize,
    poll: Poll,
    incoming: Receiver<TcpStream>,
    shared: Arc<Shared>,
    _waker: Arc<Waker>,
    conns: Slab<Conn>,
    scratch: Scratch,
    responses: Responses,
    steps: Vec<Step>,
    udp: Option<mio::net::UdpSocket>,
    udp_ready: bool,
    udp_reqs: Vec<crate::udp::UdpRequest>,
}

/// What one pass decided for one connection.
struct Plan {
    token: usize,
    steps: Range<usize>,
    new_rstart: usize,
    new_swallow: usize,
    close: bool,
    more: bool,
    binary: Option<bool>,
}

impl Worker {
    pub fn new(
        id: usize,
        poll: Poll,
        incoming: Receiver<TcpStream>,
        shared: Arc<Shared>,
        waker: Arc<Waker>,
        mut udp: Option<mio::net::UdpSocket>,
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
            udp_ready: udp.is_some(),
            udp,
            udp_reqs: Vec::new(),
        })
    }

    pub fn run(mut self) {
        // The scheduler holds batches for C (tens to hundreds of microseconds) with a sleep;
        // the kernel's default 50 us timer slack would add half of that again to every hold.
        if let Err(e) = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1000)) {
            tracing::debug!(error = %e, "could not lower the timer slack");
        }
        let mut events = Events::with_capacity(1024);
        let mut ready: Vec<usize> = Vec::new();
        let mut pending: Vec<usize> = Vec::new();
        let mut last_launch = Instant::now();
        loop {
            let timeout = (!pending.is_empty() || self.udp_ready).then_some(Duration::ZERO);
            if timeout.is_none() && self.shared.engine.has_pending_writes() {
                // About to sleep: delayed index writes have no batch left to wait for.
                self.shared.engine.apply_pending();
            }
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(worker = self.id, error = %e, "poll failed");
                break;
            }
            if self.shared.stop.load(Ordering::SeqCst) {
                break;
            }
            ready.clear();
            ready.append(&mut pending);
            self.collect(&events, &mut ready);
            if !ready.is_empty() || self.udp_ready {
                // The periodic scheduler: keep collecting until the interval C since this
                // worker's last batch has passed, so everything that arrives meanwhile joins
                // one batch. Requests stay in their connections' buffers until then.
                let wait = self.shared.engine.batch_wait(last_launch);
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                    if self.poll.poll(&mut events, Some(Duration::ZERO)).is_ok() {
                        self.collect(&events, &mut ready);
                    }
                    if self.shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                }
                last_launch = Instant::now();
            }
            ready.sort_unstable();
            ready.dedup();
            self.pass(&ready);
            for &t in &ready {
                if let Some(c) = self.conns.get(t) {
                    let backed_up = c.pending_output() >= self.shared.config.output_high_water;
                    if !backed_up && (c.want_read || c.want_parse) {
                        pending.push(t);
                    }
                }
            }
        }
        let tokens: Vec<usize> = self.conns.iter().map(|(t, _)| t).collect();
        for t in tokens {
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
            let entry = self.conns.vacant_entry();
            let token = entry.key();
            let mut conn = Conn::new(stream);
            if self
                .poll
                .registry()
                .register(&mut conn.stream, Token(token), Interest::READABLE)
                .is_err()
            {
                self.shared
                    .stats
                    .curr_connections
                    .fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            entry.insert(conn);
            // Data may already be waiting; edge-triggered readiness would not tell us.
            ready.push(token);
        }
    }

    fn close(&mut self, token: usize) {
        if self.conns.contains(token) {
            let mut c = self.conns.remove(token);
            let _ = self.poll.registry().deregister(&mut c.stream);
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
        for &t in ready {
            if let Some(c) = self.conns.get_mut(t) {
                if c.pending_output() > 0 {
                    if let Err(()) = flush(c, &self.shared) {
                        c.read_closed = true;
                        c.close_after_write = true;
                        c.wpos = c.wbuf.len();
                    }
                }
                if c.pending_output() < self.shared.config.output_high_water {
                    read_into(c, read_cap, &self.shared);
                } else {
                    c.want_read = true;
                }
            }
        }
        self.receive_udp();
        TaskTimes::add(&tasks.rv, t0);
        self.process(ready);
        self.udp_reqs.clear();
        let _sd = Timed(&tasks.sd, std::time::Instant::now());
        for &t in ready {
            let Some(c) = self.conns.get_mut(t) else {
                continue;
            };
            let failed = flush(c, &self.shared).is_err();
            c.compact();
            let done_reading = c.read_closed && (c.unparsed() == 0 || !c.want_parse);
            if failed || (c.pending_output() == 0 && (c.close_after_write || done_reading)) {
                self.close(t);
                continue;
            }
            let want_write = c.pending_output() > 0;
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

    /// RV for UDP: takes up to UDP_PER_PASS datagrams into this pass.
    fn receive_udp(&mut self) {
        let Some(sock) = self.udp.as_ref() else {
            return;
        };
        if !self.udp_ready {
            return;
        }
        let mut buf = [0u8; 65536];
        for _ in 0..UDP_PER_PASS {
            match sock.recv_from(&mut buf) {
                Ok((n, peer)) => {
                    self.shared
                        .stats
                        .bytes_read
                        .fetch_add(n as u64, Ordering::Relaxed);
                    let d = &buf[..n];
                    match crate::udp::frame(d) {
                        crate::udp::Frame::Request { id, payload_at } => {
                            // Text protocol only over UDP; binary datagrams are dropped.
                            if d.get(payload_at) != Some(&hkv_proto::binary::REQUEST_MAGIC) {
                                self.udp_reqs.push(crate::udp::UdpRequest {
                                    peer,
                                    id,
                                    payload: d[payload_at..].to_vec(),
                                });
                            }
                        }
                        crate::udp::Frame::MultiPacket { id } => {
                            for dg in crate::udp::datagrams(
                                id,
                                b"SERVER_ERROR multi-packet request not supported\r\n",
                            ) {
                                let _ = sock.send_to(&dg, peer);
                            }
                        }
                        crate::udp::Frame::Drop => {}
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.udp_ready = false;
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "udp receive failed");
                    self.udp_ready = false;
                    return;
                }
            }
        }
    }

    fn read_cap(&self) -> usize {
        let l = &self.shared.config.limits;
        l.max_item_size.max(l.max_get_line) + 64 * 1024
    }

    /// PP for every connection with input, one engine batch, then WR.
    fn process(&mut self, ready: &[usize]) {
        let t0 = std::time::Instant::now();
        let limits = self.shared.config.limits;
        let now = unix_now();
        let mut plans: Vec<Plan> = Vec::new();
        self.steps.clear();
        self.responses.clear();
        let conns = &self.conns;
        let steps = &mut self.steps;
        let mut batch: Vec<Request<'_>> = Vec::new();
        for &t in ready {
            let Some(c) = conns.get(t) else { continue };
            if c.close_after_write {
                continue;
            }
            let start = steps.len();
            let p = parse_input(
                &c.rbuf[..c.rend],
                c.rstart,
                c.swallow,
                c.binary,
                &limits,
                &mut batch,
                steps,
            );
            plans.push(Plan {
                token: t,
                steps: start..steps.len(),
                new_rstart: p.pos,
                new_swallow: p.swallow,
                close: p.close,
                more: p.more,
                binary: p.binary,
            });
        }
        let udp_reqs = &self.udp_reqs;
        let mut udp_plans: Vec<Range<usize>> = Vec::with_capacity(udp_reqs.len());
        for r in udp_reqs {
            let start = steps.len();
            parse_input(&r.payload, 0, 0, Some(false), &limits, &mut batch, steps);
            udp_plans.push(start..steps.len());
        }
        let tasks = &self.shared.stats.tasks;
        let mut t0 = TaskTimes::add(&tasks.pp, t0);
        if !batch.is_empty() {
            self.shared
                .engine
                .execute(&batch, now, &mut self.responses, &mut self.scratch);
            self.shared.stats.batches.fetch_add(1, Ordering::Relaxed);
            self.shared
                .stats
                .batched_requests
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        drop(batch);
        t0 = TaskTimes::add(&tasks.engine, t0);
        let mut stop = false;
        for plan in plans {
            let Some(c) = self.conns.get_mut(plan.token) else {
                continue;
            };
            for step in &self.steps[plan.steps.clone()] {
                stop |= respond::write(
                    step,
                    &c.rbuf,
                    &self.responses,
                    &self.shared,
                    now,
                    &mut c.wbuf,
                );
            }
            c.rstart = plan.new_rstart;
            c.swallow = plan.new_swallow;
            c.close_after_write |= plan.close;
            c.want_parse = plan.more;
            c.binary = plan.binary;
        }
        for (r, range) in self.udp_reqs.iter().zip(udp_plans) {
            let mut reply = Vec::new();
            for step in &self.steps[range] {
                stop |= respond::write(
                    step,
                    &r.payload,
                    &self.responses,
                    &self.shared,
                    now,
                    &mut reply,
                );
            }
            if let Some(sock) = self.udp.as_ref() {
                for dg in crate::udp::datagrams(r.id, &reply) {
                    // UDP is lossy by contract: a full socket buffer drops the reply.
                    if let Ok(n) = sock.send_to(&dg, r.peer) {
                        self.shared
                            .stats
                            .bytes_written
                            .fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
            }
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
    }
}

/// Adds the time from its start to `counter` when dropped (the send phase has early exits).
struct Timed<'a>(&'a std::sync::atomic::AtomicU64, std::time::Instant);

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        TaskTimes::add(self.0, self.1);
    }
}

/// Where parsing one input buffer ended, and what the connection must do next.
struct InputEnd {
    pos: usize,
    swallow: usize,
    close: bool,
    more: bool,
    binary: Option<bool>,
}

/// PP for one input (a TCP connection's buffer or one UDP datagram): parses requests from
/// `start`, appending engine requests to `batch` and reply steps to `steps`.
#[allow(clippy::too_many_arguments)]
fn parse_input<'a>(
    buf: &'a [u8],
    start: usize,
    swallow_in: usize,
    binary_in: Option<bool>,
    limits: &text::Limits,
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
) -> InputEnd {
    let limits = *limits;
    let mut pos = start;
    let mut swallow = swallow_in;
    let mut close = false;
    let mut more = false;
    let mut count = 0;
    let keys_before = batch.len();
    let mut binary_mode = binary_in;
    loop {
        if swallow > 0 {
            let k = swallow.min(buf.len() - pos);
            pos += k;
            swallow -= k;
            if swallow > 0 {
                break;
            }
        }
        if pos == buf.len() {
            break;
        }
        if count == MAX_REQUESTS_PER_CONN_PASS
            || batch.len() - keys_before >= MAX_KEYS_PER_CONN_PASS
        {
            more = true;
            break;
        }
        count += 1;
        // memcached decides the protocol from a connection's first byte.
        let binary = *binary_mode.get_or_insert(buf[pos] == hkv_proto::binary::REQUEST_MAGIC);
        if binary {
            match hkv_proto::binary::parse(&buf[pos..], limits.max_item_size) {
                BinParsed::Incomplete => break,
                BinParsed::Close => {
                    close = true;
                    break;
                }
                BinParsed::Error {
                    opcode,
                    status,
                    opaque,
                    len,
                    swallow: s,
                    close: c,
                } => {
                    pos += len;
                    swallow = s;
                    steps.push(Step::Bin(BinStep::Status {
                        opcode,
                        status,
                        opaque,
                    }));
                    if c {
                        close = true;
                        break;
                    }
                }
                BinParsed::Request { req, len } => {
                    pos += len;
                    match crate::binary::plan(req, buf, batch, steps) {
                        Flow::Continue => {}
                        Flow::Barrier => {
                            more = true;
                            break;
                        }
                        Flow::Close => {
                            close = true;
                            break;
                        }
                    }
                }
            }
            continue;
        }
        match text::parse(&buf[pos..], &limits) {
            Parsed::Incomplete => break,
            Parsed::Error {
                error,
                len,
                swallow: s,
                noreply,
                close: c,
                unlink,
            } => {
                pos += len;
                swallow = s;
                if let Some(key) = unlink {
                    // memcached drops the old value of a key whose new one it refused.
                    batch.push(Request::delete(key));
                }
                if !noreply {
                    steps.push(Step::Text(error));
                }
                if c {
                    close = true;
                    break;
                }
            }
            Parsed::Command { cmd, len } => {
                pos += len;
                let barrier = plan_command(cmd, buf, batch, steps, &mut close);
                if barrier || close {
                    more = !close;
                    break;
                }
            }
        }
    }
    InputEnd {
        pos,
        swallow,
        close,
        more,
        binary: binary_mode,
    }
}

/// Turns one command into engine requests and response steps. Returns true if parsing of
/// this connection must pause after it until the batch has run (flush_all must see every
/// earlier request executed, and none after it).
fn plan_command<'a>(
    cmd: Command<'a>,
    buf: &'a [u8],
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
    close: &mut bool,
) -> bool {
    let off = |k: &[u8]| (k.as_ptr() as usize - buf.as_ptr() as usize) as u32;
    let mut engine = |req: Request<'a>| {
        batch.push(req);
        (batch.len() - 1) as u32
    };
    match cmd {
        Command::Get { keys, cas } => {
            for key in keys {
                let op = if cas { Op::Gets } else { Op::Get };
                let idx = engine(Request::new(op, key));
                steps.push(Step::Value {
                    idx,
                    key_off: off(key),
                    key_len: key.len() as u32,
                    cas,
                });
            }
            steps.push(Step::Text("END"));
        }
        Command::Gat { exptime, keys, cas } => {
            for key in keys {
                let op = if cas { Op::Gats } else { Op::Gat };
                let idx = engine(Request {
                    exptime,
                    ..Request::new(op, key)
                });
                steps.push(Step::Value {
                    idx,
                    key_off: off(key),
                    key_len: key.len() as u32,
                    cas,
                });
            }
            steps.push(Step::Text("END"));
        }
        Command::Store {
            op,
            key,
            flags,
            exptime,
            cas,
            data,
            noreply,
        } => {
            let op = match op {
                StoreOp::Set => Op::Set,
                StoreOp::Add => Op::Add,
                StoreOp::Replace => Op::Replace,
                StoreOp::Append => Op::Append,
                StoreOp::Prepend => Op::Prepend,
                StoreOp::Cas => Op::Cas,
            };
            let idx = engine(Request {
                cas,
                ..Request::store(op, key, data, flags, exptime)
            });
            steps.push(Step::Reply { idx, noreply });
        }
        Command::Delete { key, noreply } => {
            let idx = engine(Request::delete(key));
            steps.push(Step::Reply { idx, noreply });
        }
        Command::Arith {
            op,
            key,
            delta,
            noreply,
        } => {
            let req = match op {
                ArithOp::Incr => Request::incr(key, delta),
                ArithOp::Decr => Request::decr(key, delta),
            };
            let idx = engine(req);
            steps.push(Step::Reply { idx, noreply });
        }
        Command::Touch {
            key,
            exptime,
            noreply,
        } => {
            let idx = engine(Request::touch(key, exptime));
            steps.push(Step::Reply { idx, noreply });
        }
        Command::FlushAll { delay, noreply } => {
            steps.push(Step::Flush { delay, noreply });
            return true;
        }
        Command::Version => steps.push(Step::Version),
        Command::Verbosity { noreply } => {
            if !noreply {
                steps.push(Step::Text("OK"));
            }
        }
        Command::Quit => {
            *close = true;
        }
        Command::Shutdown => {
            steps.push(Step::Shutdown);
            return true;
        }
        Command::Stats { args } => {
            steps.push(Step::Stats(args.iter().map(|a| a.to_vec()).collect()));
        }
        Command::Meta(m) => return crate::respond::plan_meta(m, buf, batch, steps),
    }
    false
}

fn read_into(c: &mut Conn, cap: usize, shared: &Shared) {
    c.want_read = false;
    loop {
        if c.read_closed {
            return;
        }
        if c.unparsed() >= cap {
            c.want_read = true;
            return;
        }
        c.reserve_read(READ_CHUNK);
        match c.stream.read(&mut c.rbuf[c.rend..]) {
            Ok(0) => {
                c.read_closed = true;
                return;
            }
            Ok(n) => {
                c.rend += n;
                shared
                    .stats
                    .bytes_read
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => {
                c.read_closed = true;
                c.close_after_write = true;
                return;
            }
        }
    }
}

/// SD: writes as much pending output as the socket takes.
fn flush(c: &mut Conn, shared: &Shared) -> Result<(), ()> {
    while c.wpos < c.wbuf.len() {
        match c.stream.write(&c.wbuf[c.wpos..]) {
            Ok(0) => return Err(()),
            Ok(n) => {
                c.wpos += n;
                shared
                    .stats
                    .bytes_written
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(()),
        }
    }
    Ok(())
}

pub(crate) fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}
