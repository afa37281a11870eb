//! One load-generator thread: its connections, its key stream, its histogram.
//!
//! Closed loop keeps `pipeline` requests in flight on every connection and sends the next as
//! soon as a reply comes back. Open loop sends on a fixed schedule whatever the replies do, and
//! a request's latency runs from the time it was *meant* to be sent, so a server that stalls
//! is charged for every request the stall delayed (no coordinated omission).

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use super::wire::{self, Kind, Protocol};
use crate::workload::{write_key, Dist, Workload};
use crate::zipf::{KeyChooser, Rng};

/// Open loop stops sending on a connection with this many replies outstanding and lets the
/// schedule fall behind instead; the late sends still count from their intended times.
const OPEN_LOOP_MAX_OUTSTANDING: usize = 4096;
const READ_CHUNK: usize = 64 * 1024;
/// Longest nap between looks at the sockets when the next send is under 2 ms away.
const FINE_WAIT: Duration = Duration::from_micros(20);

/// What every thread of one run shares.
#[derive(Clone, Debug)]
pub struct Shape {
    pub target: SocketAddr,
    pub protocol: Protocol,
    pub key_len: usize,
    pub value_len: usize,
    pub keys: u64,
    pub pipeline: usize,
    pub multiget: usize,
    /// GETs of ids below this are timed as hot too (0: none).
    pub hot_keys: u64,
}

/// What a thread does.
pub enum Phase {
    /// SET every key in `first..end` once, `pipeline` deep, and wait for every reply.
    Preload { first: u64, end: u64 },
    /// The mix until `end`; replies that arrive in `[from, end)` are counted.
    Measure {
        workload: Workload,
        dist: Dist,
        theta: f64,
        seed: u64,
        /// Requests per second per connection (open loop); None: closed loop.
        rate_per_conn: Option<f64>,
        from: Instant,
        end: Instant,
    },
}

/// What a thread counted.
pub struct Tally {
    /// Keys answered (a text multi-get of n keys counts n).
    pub ops: u64,
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
    pub errors: u64,
    /// Request latency in nanoseconds.
    pub hist: Histogram<u64>,
    /// GET latency of hot and cold keys (with `Shape::hot_keys`).
    pub hot_hist: Histogram<u64>,
    pub cold_hist: Histogram<u64>,
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            ops: 0,
            gets: 0,
            hits: 0,
            sets: 0,
            errors: 0,
            hist: Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("static bounds"),
            hot_hist: Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("static bounds"),
            cold_hist: Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("static bounds"),
        }
    }

    pub fn add(&mut self, o: &Tally) {
        self.ops += o.ops;
        self.gets += o.gets;
        self.hits += o.hits;
        self.sets += o.sets;
        self.errors += o.errors;
        // Both were made by Tally::new with the same bounds.
        let _ = self.hist.add(&o.hist);
        let _ = self.hot_hist.add(&o.hot_hist);
        let _ = self.cold_hist.add(&o.cold_hist);
    }
}

struct Pending {
    kind: Kind,
    keys: u32,
    t0: Instant,
    /// Latency class with `Shape::hot_keys`: Some(true) hot, Some(false) cold.
    class: Option<bool>,
}

struct Conn {
    sock: TcpStream,
    out: Vec<u8>,
    sent: usize,
    inb: Vec<u8>,
    head: usize,
    inflight: VecDeque<Pending>,
    next_due: Instant,
}

/// Where the next request's key and kind come from.
struct Gen {
    rng: Rng,
    chooser: KeyChooser,
    get_percent: u64,
    preload: Option<(u64, u64)>,
    keybuf: Vec<u8>,
    value: Vec<u8>,
}

impl Gen {
    /// Appends one request to `c`; false when a preload has no key left.
    fn issue(&mut self, s: &Shape, c: &mut Conn, t0: Instant) -> bool {
        let kl = s.key_len;
        if let Some((next, end)) = self.preload.as_mut() {
            if *next == *end {
                return false;
            }
            write_key(*next, &mut self.keybuf[..kl]);
            *next += 1;
            wire::encode_set(s.protocol, &self.keybuf[..kl], &self.value, &mut c.out);
            c.inflight.push_back(Pending {
                kind: Kind::Set,
                keys: 1,
                t0,
                class: None,
            });
            return true;
        }
        let id = self.chooser.next(&mut self.rng);
        if self.rng.below(100) >= self.get_percent {
            write_key(id, &mut self.keybuf[..kl]);
            wire::encode_set(s.protocol, &self.keybuf[..kl], &self.value, &mut c.out);
            c.inflight.push_back(Pending {
                kind: Kind::Set,
                keys: 1,
                t0,
                class: None,
            });
            return true;
        }
        write_key(id, &mut self.keybuf[..kl]);
        let class = (s.hot_keys > 0).then_some(id < s.hot_keys);
        for j in 1..s.multiget {
            let id = self.chooser.next(&mut self.rng);
            write_key(id, &mut self.keybuf[j * kl..(j + 1) * kl]);
        }
        let keys: Vec<&[u8]> = self.keybuf.chunks(kl).take(s.multiget).collect();
        wire::encode_get(s.protocol, &keys, &mut c.out);
        if s.protocol == Protocol::Text {
            c.inflight.push_back(Pending {
                kind: Kind::Get,
                keys: s.multiget as u32,
                t0,
                class,
            });
        } else {
            for _ in 0..s.multiget {
                c.inflight.push_back(Pending {
                    kind: Kind::Get,
                    keys: 1,
                    t0,
                    class,
                });
            }
        }
        true
    }
}

/// Opens `conns` connections and runs `phase` on them. `progress` counts answered keys.
pub fn drive(
    s: &Shape,
    conns: usize,
    phase: &Phase,
    progress: &AtomicU64,
) -> anyhow::Result<Tally> {
    let mut poll = Poll::new()?;
    let start = Instant::now();
    let mut cs = Vec::with_capacity(conns);
    for i in 0..conns {
        let std_sock = std::net::TcpStream::connect(s.target)
            .map_err(|e| anyhow::anyhow!("cannot connect to {}: {e}", s.target))?;
        std_sock.set_nodelay(true)?;
        std_sock.set_nonblocking(true)?;
        let mut sock = TcpStream::from_std(std_sock);
        poll.registry()
            .register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE)?;
        cs.push(Conn {
            sock,
            out: Vec::with_capacity(READ_CHUNK),
            sent: 0,
            inb: Vec::with_capacity(READ_CHUNK),
            head: 0,
            inflight: VecDeque::new(),
            next_due: start,
        });
    }
    let (mut gen, window, interval) = match *phase {
        Phase::Preload { first, end } => (
            Gen {
                rng: Rng::new(1),
                chooser: KeyChooser::uniform(1),
                get_percent: 0,
                preload: Some((first, end)),
                keybuf: vec![0; s.key_len],
                value: vec![b'v'; s.value_len],
            },
            None,
            None,
        ),
        Phase::Measure {
            workload,
            dist,
            theta,
            seed,
            rate_per_conn,
            from,
            end,
        } => (
            Gen {
                rng: Rng::new(seed),
                chooser: match dist {
                    Dist::Uniform => KeyChooser::uniform(s.keys),
                    Dist::Zipf => KeyChooser::zipf(s.keys, theta),
                },
                get_percent: workload.get_percent(),
                preload: None,
                keybuf: vec![0; s.key_len * s.multiget.max(1)],
                value: vec![b'v'; s.value_len],
            },
            Some((from, end)),
            rate_per_conn.map(|r| Duration::from_secs_f64(1.0 / r.max(1e-3))),
        ),
    };
    // Spread the open-loop schedules so connections do not send in lockstep.
    if let Some(iv) = interval {
        for (i, c) in cs.iter_mut().enumerate() {
            c.next_due = start + iv.mul_f64(i as f64 / conns.max(1) as f64);
        }
    }
    let mut tally = Tally::new();
    let mut events = Events::with_capacity(conns.max(16));
    let mut exhausted = false;
    loop {
        let now = Instant::now();
        if let Some((_, end)) = window {
            if now >= end {
                break;
            }
        } else if exhausted && cs.iter().all(|c| c.inflight.is_empty()) {
            break;
        }
        let mut wake_at: Option<Instant> = window.map(|(_, end)| end);
        for c in cs.iter_mut() {
            match interval {
                None => {
                    while !exhausted && c.inflight.len() < s.pipeline {
                        if !gen.issue(s, c, now) {
                            exhausted = true;
                        }
                    }
                }
                Some(iv) => {
                    while c.next_due <= now && c.inflight.len() < OPEN_LOOP_MAX_OUTSTANDING {
                        gen.issue(s, c, c.next_due);
                        c.next_due += iv;
                    }
                    wake_at = Some(wake_at.map_or(c.next_due, |w| w.min(c.next_due)));
                }
            }
            write_out(c)?;
        }
        let wait = wake_at
            .map(|w| w.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(100));
        // epoll counts whole milliseconds: a shorter wait would oversleep, and an open-loop
        // schedule would charge the client's lateness to the server. Below a millisecond,
        // look without blocking and nap for at most FINE_WAIT.
        let timeout = if wait >= Duration::from_millis(2) {
            wait - Duration::from_millis(1)
        } else {
            Duration::ZERO
        };
        if let Err(e) = poll.poll(&mut events, Some(timeout)) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        if events.is_empty() && timeout.is_zero() && !wait.is_zero() {
            std::thread::sleep(wait.min(FINE_WAIT));
        }
        for ev in events.iter() {
            let c = &mut cs[ev.token().0];
            if ev.is_writable() {
                write_out(c)?;
            }
            if ev.is_readable() {
                read_replies(s.protocol, c, window, &mut tally, progress)?;
            }
        }
    }
    Ok(tally)
}

fn write_out(c: &mut Conn) -> anyhow::Result<()> {
    while c.sent < c.out.len() {
        match c.sock.write(&c.out[c.sent..]) {
            Ok(0) => anyhow::bail!("the server closed the connection"),
            Ok(n) => c.sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => anyhow::bail!("send failed: {e}"),
        }
    }
    c.out.clear();
    c.sent = 0;
    Ok(())
}

fn read_replies(
    p: Protocol,
    c: &mut Conn,
    window: Option<(Instant, Instant)>,
    tally: &mut Tally,
    progress: &AtomicU64,
) -> anyhow::Result<()> {
    loop {
        let len = c.inb.len();
        c.inb.resize(len + READ_CHUNK, 0);
        match c.sock.read(&mut c.inb[len..]) {
            Ok(0) => {
                c.inb.truncate(len);
                anyhow::bail!("the server closed the connection");
            }
            Ok(n) => c.inb.truncate(len + n),
            Err(e) => {
                c.inb.truncate(len);
                match e.kind() {
                    ErrorKind::WouldBlock => break,
                    ErrorKind::Interrupted => continue,
                    _ => anyhow::bail!("receive failed: {e}"),
                }
            }
        }
    }
    let now = Instant::now();
    let counted = window.is_none_or(|(from, end)| now >= from && now < end);
    let mut answered = 0;
    while let Some(front) = c.inflight.front() {
        let Some((n, outcome)) = wire::split_reply(p, front.kind, &c.inb[c.head..])? else {
            break;
        };
        c.head += n;
        let done = c.inflight.pop_front().expect("front exists");
        answered += done.keys as u64;
        if counted {
            tally.ops += done.keys as u64;
            match done.kind {
                Kind::Get => tally.gets += done.keys as u64,
                Kind::Set => tally.sets += 1,
            }
            tally.hits += outcome.hits as u64;
            tally.errors += outcome.error as u64;
            let ns = now.saturating_duration_since(done.t0).as_nanos() as u64;
            tally.hist.saturating_record(ns.max(1_000));
            match done.class {
                Some(true) => tally.hot_hist.saturating_record(ns.max(1_000)),
                Some(false) => tally.cold_hist.saturating_record(ns.max(1_000)),
                None => {}
            }
        }
    }
    if c.head == c.inb.len() {
        c.inb.clear();
        c.head = 0;
    } else if c.head > READ_CHUNK {
        c.inb.drain(..c.head);
        c.head = 0;
    }
    progress.fetch_add(answered, Ordering::Relaxed);
    Ok(())
}
