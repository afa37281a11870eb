//! GETs over UDP, closed loop, many datagrams in flight (`hkv-bench net --udp`).
//!
//! memcaslap's UDP mode waits for each reply before the next request, so a server that
//! batches datagrams (`recvmmsg`/`sendmmsg`) finds one in each pass. Here every socket keeps
//! `--pipeline` requests in flight, each its own datagram with memcached's 8-byte UDP frame
//! header (request id, sequence number, datagram count, reserved). A request whose reply
//! has not arrived within `--udp-lost-ms` (1 s by default) is counted as an error and
//! replaced: UDP may drop. While a lost request waits out that time its slot carries
//! nothing, so a burst the server's socket buffer drops can idle much of the window: a
//! short time (loopback answers in a few ms) keeps the window full.
//! With `--udp-batch N` a socket's new requests go out N per call (one UDP GSO send, or
//! `sendmmsg`) and replies come in N per `recvmmsg`, as a client that batches its GETs
//! sends them: then the client, which shares this machine's cores with the server, costs
//! far less per GET and the server's own cost weighs more in the rate.

use std::collections::HashMap;
use std::io::{ErrorKind, IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};

use super::load::{Phase, Shape, Tally};
use crate::workload::{write_key, Dist};
use crate::zipf::{KeyChooser, Rng};

/// Send and receive buffers asked for each socket (the kernel caps them at its maximum).
const SOCKET_BUFFER: usize = 4 << 20;
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
    batch: usize,
    lost_after: Duration,
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
        // A datagram counts in its sender's buffer until the receiver takes it, so the
        // default (~200 KiB) caps the window at a few hundred requests queued at the server.
        let _ = nix::sys::socket::setsockopt(
            &std_sock,
            nix::sys::socket::sockopt::SndBuf,
            &SOCKET_BUFFER,
        );
        let _ = nix::sys::socket::setsockopt(
            &std_sock,
            nix::sys::socket::sockopt::RcvBuf,
            &SOCKET_BUFFER,
        );
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
    let (mut ids, mut outs): (Vec<u16>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
    let mut slots = vec![vec![0u8; DATAGRAM]; batch];
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
                .retain(|_, r| now.saturating_duration_since(r.t0) < lost_after);
            if now >= from {
                tally.errors += (before - c.inflight.len()) as u64;
            }
            // The requests that fill the socket's window, each its own datagram.
            ids.clear();
            outs.clear();
            while c.inflight.len() + ids.len() < s.pipeline {
                let id = c.next_id;
                c.next_id = c.next_id.wrapping_add(1);
                if c.inflight.contains_key(&id) {
                    break;
                }
                write_key(chooser.next(&mut rng), &mut key);
                let mut out = Vec::with_capacity(16 + s.key_len);
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
                out.extend_from_slice(b"get ");
                out.extend_from_slice(&key);
                out.extend_from_slice(b"\r\n");
                ids.push(id);
                outs.push(out);
            }
            let sent = send_all(&c.sock, &outs, batch)?;
            let t0 = Instant::now();
            for &id in &ids[..sent] {
                c.inflight.insert(
                    id,
                    Req {
                        t0,
                        got: 0,
                        total: 0,
                        hit: false,
                    },
                );
            }
            // Unsent ids are taken again next round (they are not in flight).
            c.next_id = c.next_id.wrapping_sub((ids.len() - sent) as u16);
        }
        poll.poll(&mut events, Some(Duration::from_millis(1)))?;
        for ev in events.iter() {
            let Some(c) = socks.get_mut(ev.token().0) else {
                continue;
            };
            loop {
                let lens = match receive(&c.sock, &mut slots) {
                    Ok(lens) => lens,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                        anyhow::bail!("nothing listens on UDP {}", s.target)
                    }
                    Err(e) => return Err(e.into()),
                };
                for (k, n) in lens.into_iter().enumerate() {
                    let buf = &slots[k][..];
                    if n >= 8 {
                        reply(c, &buf[..n], from, end, &mut tally, progress);
                    }
                }
            }
        }
    }
    Ok(tally)
}

/// One reply datagram of `c`'s: counts its request once every part has arrived.
fn reply(
    c: &mut Sock,
    buf: &[u8],
    from: Instant,
    end: Instant,
    tally: &mut Tally,
    progress: &AtomicU64,
) {
    let n = buf.len();
    let id = u16::from_be_bytes([buf[0], buf[1]]);
    let seq = u16::from_be_bytes([buf[2], buf[3]]);
    let total = u16::from_be_bytes([buf[4], buf[5]]);
    let Some(r) = c.inflight.get_mut(&id) else {
        return;
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
        return;
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

/// Sends `outs` in order on the connected `sock`, `batch` datagrams per system call
/// (`send` each when 1). Requests of one data set are all the same size, so a batch goes as
/// one UDP GSO send (`UDP_SEGMENT`): the kernel takes it through its stack once and cuts
/// it into datagrams at the end, which on loopback is most of what a datagram costs its
/// sender; where GSO is refused, `sendmmsg`. Returns how many went before the socket's
/// buffer filled.
fn send_all(sock: &UdpSocket, outs: &[Vec<u8>], batch: usize) -> std::io::Result<usize> {
    use nix::sys::socket::{
        sendmmsg, sendmsg, ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage,
    };
    /// The kernel's UDP_MAX_SEGMENTS, and one IP packet's worth of bytes.
    const GSO_MAX_SEGMENTS: usize = 64;
    const GSO_MAX_BYTES: usize = 65_000;
    let mut sent = 0;
    if batch == 1 {
        for out in outs {
            match sock.send(out) {
                Ok(_) => sent += 1,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        return Ok(sent);
    }
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(batch, None);
    let mut gso = true;
    while sent < outs.len() {
        let seg = outs[sent].len();
        let same = outs[sent..]
            .iter()
            .take(batch.min(GSO_MAX_SEGMENTS).min(GSO_MAX_BYTES / seg.max(1)))
            .take_while(|o| o.len() == seg)
            .count();
        if gso && same >= 2 {
            let iovs: Vec<IoSlice<'_>> = outs[sent..sent + same]
                .iter()
                .map(|o| IoSlice::new(o))
                .collect();
            let seg16 = seg as u16;
            match sendmsg::<SockaddrStorage>(
                sock.as_raw_fd(),
                &iovs,
                &[ControlMessage::UdpGsoSegments(&seg16)],
                MsgFlags::empty(),
                None,
            ) {
                Ok(_) => sent += same,
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => break,
                // No GSO here: sendmmsg from now on.
                Err(_) => gso = false,
            }
            continue;
        }
        let part = &outs[sent..(sent + batch).min(outs.len())];
        let iovs: Vec<[IoSlice<'_>; 1]> = part.iter().map(|o| [IoSlice::new(o)]).collect();
        // Connected: no address per datagram.
        let addrs: Vec<Option<SockaddrStorage>> = vec![None; part.len()];
        match sendmmsg(
            sock.as_raw_fd(),
            &mut headers,
            &iovs,
            &addrs,
            [],
            MsgFlags::empty(),
        ) {
            Ok(res) => {
                let k = res.count();
                if k == 0 {
                    break;
                }
                sent += k;
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(sent)
}

/// Receives up to `slots.len()` datagrams with one system call (`recv` for one slot);
/// their lengths, in order. Err(WouldBlock): none was waiting.
fn receive(sock: &UdpSocket, slots: &mut [Vec<u8>]) -> std::io::Result<Vec<usize>> {
    use nix::sys::socket::{recvmmsg, MsgFlags, MultiHeaders, SockaddrStorage};
    if slots.len() == 1 {
        return sock.recv(&mut slots[0]).map(|n| vec![n]);
    }
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(slots.len(), None);
    let mut iovs: Vec<[IoSliceMut<'_>; 1]> = slots
        .iter_mut()
        .map(|s| [IoSliceMut::new(&mut s[..])])
        .collect();
    let res = recvmmsg(
        sock.as_raw_fd(),
        &mut headers,
        iovs.iter_mut(),
        MsgFlags::MSG_DONTWAIT,
        None,
    )
    .map_err(std::io::Error::from)?;
    let lens: Vec<usize> = res.map(|m| m.bytes).collect();
    if lens.is_empty() {
        return Err(ErrorKind::WouldBlock.into());
    }
    Ok(lens)
}
