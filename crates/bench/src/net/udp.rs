//! GETs over UDP, closed loop, many datagrams in flight (`hkv-bench net --udp`).
//!
//! memcaslap's UDP mode waits for each reply before the next request, so a server that
//! batches datagrams (`recvmmsg`/`sendmmsg`) finds one in each pass. Here every socket keeps
//! `--pipeline` requests in flight, each its own datagram with memcached's 8-byte UDP frame
//! header (request id, sequence number, datagram count, reserved). A request whose reply
//! has not arrived within [`LOST_AFTER`] is counted as an error and replaced: UDP may drop.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};

use super::load::{Phase, Shape, Tally};
use crate::workload::{write_key, Dist};
use crate::zipf::{KeyChooser, Rng};

/// A reply later than this is taken as lost.
const LOST_AFTER: Duration = Duration::from_secs(1);
/// memcached's largest UDP datagram.
const DATAGRAM: usize = 1400 + 8;

struct Req {
    t0: Instant,
    /// Datagrams of the reply received, and how many it has (0: none seen yet).
    got: u16,
    total: u16,
    hit: bool,
}

struct Sock {
    sock: UdpSocket,
    next_id: u16,
    inflight: HashMap<u16, Req>,
}

/// Runs the measured GETs of `phase` over `sockets` UDP sockets to `s.target`.
pub fn drive(
    s: &Shape,
    sockets: usize,
    phase: &Phase,
    progress: &AtomicU64,
) -> anyhow::Result<Tally> {
    let Phase::Measure {
        workload,
        dist,
        theta,
        seed,
        from,
        end,
        ..
    } = *phase
    else {
        anyhow::bail!("--udp measures GETs only (the preload runs over TCP)");
    };
    anyhow::ensure!(
        workload.get_percent() == 100 && s.multiget == 1,
        "--udp runs single-key GETs only (--workload c, --multiget 1)"
    );
    let mut poll = Poll::new()?;
    let local: std::net::SocketAddr = if s.target.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let mut socks = Vec::with_capacity(sockets);
    for i in 0..sockets {
        let std_sock = std::net::UdpSocket::bind(local)?;
        std_sock.connect(s.target)?;
        std_sock.set_nonblocking(true)?;
        let mut sock = UdpSocket::from_std(std_sock);
        poll.registry()
            .register(&mut sock, Token(i), Interest::READABLE)?;
        socks.push(Sock {
            sock,
            next_id: 0,
            inflight: HashMap::new(),
        });
    }
    let mut rng = Rng::new(seed);
    let chooser = match dist {
        Dist::Uniform => KeyChooser::uniform(s.keys),
        Dist::Zipf => KeyChooser::zipf(s.keys, theta),
    };
    let mut key = vec![0u8; s.key_len];
    let mut out = Vec::with_capacity(64 + s.key_len);
    let mut buf = vec![0u8; DATAGRAM.max(64 << 10)];
    let mut tally = Tally::new();
    let mut events = Events::with_capacity(sockets.max(16));
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        for c in socks.iter_mut() {
            let before = c.inflight.len();
            c.inflight
                .retain(|_, r| now.saturating_duration_since(r.t0) < LOST_AFTER);
            if now >= from {
                tally.errors += (before - c.inflight.len()) as u64;
            }
            while c.inflight.len() < s.pipeline {
                let id = c.next_id;
                c.next_id = c.next_id.wrapping_add(1);
                if c.inflight.contains_key(&id) {
                    break;
                }
                write_key(chooser.next(&mut rng), &mut key);
                out.clear();
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
                out.extend_from_slice(b"get ");
                out.extend_from_slice(&key);
                out.extend_from_slice(b"\r\n");
                match c.sock.send(&out) {
                    Ok(_) => {
                        c.inflight.insert(
                            id,
                            Req {
                                t0: Instant::now(),
                                got: 0,
                                total: 0,
                                hit: false,
                            },
                        );
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        poll.poll(&mut events, Some(Duration::from_millis(1)))?;
        for ev in events.iter() {
            let Some(c) = socks.get_mut(ev.token().0) else {
                continue;
            };
            loop {
                let n = match c.sock.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                        anyhow::bail!("nothing listens on UDP {}", s.target)
                    }
                    Err(e) => return Err(e.into()),
                };
                if n < 8 {
                    continue;
                }
                let id = u16::from_be_bytes([buf[0], buf[1]]);
                let seq = u16::from_be_bytes([buf[2], buf[3]]);
                let total = u16::from_be_bytes([buf[4], buf[5]]);
                let Some(r) = c.inflight.get_mut(&id) else {
                    continue;
                };
                r.got += 1;
                r.total = total;
                if seq == 0 {
                    r.hit = buf[8..n].starts_with(b"VALUE ");
                    if !r.hit && !buf[8..n].starts_with(b"END\r\n") {
                        tally.errors += u64::from(Instant::now() >= from);
                    }
                }
                if r.got < r.total {
                    continue;
                }
                let done = c.inflight.remove(&id).expect("present");
                let at = Instant::now();
                progress.fetch_add(1, Ordering::Relaxed);
                if at >= from && at < end {
                    tally.ops += 1;
                    tally.gets += 1;
                    tally.hits += u64::from(done.hit);
                    let ns = at.saturating_duration_since(done.t0).as_nanos() as u64;
                    tally.hist.saturating_record(ns.max(1_000));
                }
            }
        }
    }
    Ok(tally)
}
