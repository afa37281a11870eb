//! UDP requests in the worker; the framing itself is `hkv_proto::udp`. Datagrams are taken
//! and answered many per system call (`recvmmsg`, `sendmmsg`).

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{
    recvmmsg, sendmmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags, MultiHeaders,
    SockaddrStorage,
};

pub(crate) use hkv_proto::udp::{frame, Frame};

/// A request datagram, ready to be parsed.
pub(crate) struct UdpRequest {
    pub peer: SocketAddr,
    pub id: u16,
    pub payload: Vec<u8>,
    /// The replies to the commands of this datagram that earlier passes ran: a datagram
    /// whose commands did not all fit in one pass (after a `flush_all`, or past the
    /// per-pass limits) goes on in the next one, and is answered once, whole.
    pub reply: Vec<u8>,
}

/// Most reply bytes a datagram carries from pass to pass; past it, what did not fit is
/// refused as a reply too large to make (`SERVER_ERROR out of memory writing get response`).
pub(crate) const CARRY_REPLY_BYTES: usize = 256 * 1024;

/// Datagrams taken per `recvmmsg`.
pub(crate) const RECV_SLOTS: usize = 16;
/// Largest request datagram taken whole (memcached reads UDP into a buffer of this size).
const SLOT_BYTES: usize = 65536;
/// Datagrams sent per `sendmmsg`.
const SEND_BATCH: usize = 64;
/// Bytes of sent datagrams' buffers kept for the next pass's replies (each at most a
/// datagram): a budget in bytes, not buffers, so that many small replies' buffers are
/// kept where a few large ones would fill it.
const KEPT_DATAGRAM_BYTES: usize = 512 * 1024;
/// Bytes of request payloads' buffers kept for the next pass, and the largest one kept.
const KEPT_PAYLOADS_BYTES: usize = 256 * 1024;
const KEPT_PAYLOAD_BYTES: usize = 4096;

/// A worker's buffers for batched UDP: 1 MiB, allocated only with `-U`, and at most
/// 768 KiB of buffers kept from pass to pass ([`KEPT_DATAGRAM_BYTES`] of sent datagrams of
/// at most 1,400 bytes each, [`KEPT_PAYLOADS_BYTES`] of request payloads of at most 4 KiB
/// each), so that a datagram costs no allocation in a steady stream (the allocator was ~7%
/// of a UDP GET's CPU).
pub(crate) struct UdpBatch {
    slots: Vec<Vec<u8>>,
    /// Replies of the pass, sent together.
    pub out: Vec<(SocketAddr, Vec<u8>)>,
    free: Vec<Vec<u8>>,
    payloads: Payloads,
    /// UDP GSO works on this socket (until a send says otherwise).
    gso: bool,
    /// GSO sends made since the last flush's caller took them (`udp_gso_sends`).
    pub gso_sends: u64,
    /// Receives that carried several coalesced datagrams (UDP GRO) since the caller last
    /// took them (`udp_gro_receives`).
    pub gro_receives: u64,
    /// Requests older than this by their kernel receive time are dropped unanswered
    /// (`--udp-max-wait-ms`); `None` keeps them all.
    max_wait: Option<Duration>,
    /// Datagrams dropped so since the caller last took them (`udp_stale_drops`), and their
    /// bytes (read all the same: `bytes_read`).
    pub stale_drops: u64,
    pub stale_bytes: u64,
}

impl UdpBatch {
    /// `max_wait`: as the field of that name (zero: none); the socket must have
    /// SO_TIMESTAMPNS on for it to apply (a datagram without its receive time is kept).
    pub fn new(max_wait: Duration) -> UdpBatch {
        UdpBatch {
            slots: (0..RECV_SLOTS).map(|_| vec![0u8; SLOT_BYTES]).collect(),
            out: Vec::new(),
            free: Vec::new(),
            payloads: Payloads {
                kept: Vec::new(),
                bytes: 0,
            },
            gso: std::env::var_os("HKV_UDP_GSO").is_none_or(|v| v != "0"),
            gso_sends: 0,
            gro_receives: 0,
            max_wait: Some(max_wait).filter(|w| !w.is_zero()),
            stale_drops: 0,
            stale_bytes: 0,
        }
    }

    /// A worker's batch, where it serves UDP.
    pub fn boxed_if(udp: bool, max_wait: Duration) -> Option<Box<UdpBatch>> {
        udp.then(|| Box::new(UdpBatch::new(max_wait)))
    }

    /// Takes back a request's buffers once its pass is done.
    pub fn recycle(&mut self, r: UdpRequest) {
        self.payloads.keep(r.payload);
        self.payloads.keep(r.reply);
    }

    /// Queues `reply` to `peer` as the datagrams of request `id`.
    pub fn push_reply(&mut self, peer: SocketAddr, id: u16, reply: &[u8]) {
        let out = &mut self.out;
        hkv_proto::udp::datagrams_into(id, reply, &mut self.free, |d| out.push((peer, d)));
    }

    /// Takes up to [`RECV_SLOTS`] datagrams with one system call and hands each to `f` with
    /// its sender and the pool its payload's copy comes from (a datagram cut short by the
    /// buffer is dropped, as an oversized request). Err(WouldBlock): none was waiting.
    pub fn receive(
        &mut self,
        sock: &impl AsRawFd,
        mut f: impl FnMut(SocketAddr, &[u8], &mut Payloads),
    ) -> io::Result<usize> {
        // The headers hold raw pointers (not Send): made per call, a few small allocations
        // beside a system call. Each has room for the UDP_GRO message (its segment size)
        // and the receive time.
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(
            RECV_SLOTS,
            Some(nix::cmsg_space!(libc::c_int, libc::timespec)),
        );
        type Got = (
            usize,
            Option<SocketAddr>,
            bool,
            Option<usize>,
            Option<Duration>,
        );
        let got: Vec<Got> = {
            let mut iovs: Vec<[IoSliceMut<'_>; 1]> = self
                .slots
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
            .map_err(io::Error::from)?;
            res.map(|m| {
                let (segment, at) = control(&m);
                (
                    m.bytes,
                    m.address.as_ref().and_then(to_std),
                    m.flags.contains(MsgFlags::MSG_TRUNC),
                    segment,
                    at,
                )
            })
            .collect()
        };
        let n = got.len();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        for (i, (bytes, peer, truncated, segment, at)) in got.into_iter().enumerate() {
            let (Some(peer), false, Some(segment)) = (peer, truncated, segment) else {
                continue;
            };
            let buf = &self.slots[i][..bytes.min(SLOT_BYTES)];
            if stale(at, now, self.max_wait) {
                // Its client has given up on it: answering now would only delay the
                // requests queued behind it (a flood left UDP unanswered for seconds).
                self.stale_drops += match segment {
                    0 => 1,
                    s => buf.len().div_ceil(s) as u64,
                };
                self.stale_bytes += buf.len() as u64;
                continue;
            }
            if segment > 0 && segment < buf.len() {
                self.gro_receives += 1;
                for d in buf.chunks(segment) {
                    f(peer, d, &mut self.payloads);
                }
            } else {
                f(peer, buf, &mut self.payloads);
            }
        }
        Ok(n)
    }

    /// Sends every reply in `out` (UDP is lossy by contract: what the socket refuses is
    /// dropped). Returns the bytes sent.
    ///
    /// Replies to one peer keep their order; across peers order means nothing, so the
    /// replies are grouped by peer, and a run of equal-sized datagrams to one peer (GET
    /// replies of one data set) goes as one UDP GSO send (`UDP_SEGMENT`, Linux 4.18): the
    /// kernel then routes and builds headers once for the run instead of once per datagram,
    /// which is most of a datagram's cost. Where the kernel refuses GSO, plain `sendmmsg`.
    pub fn flush(&mut self, sock: &impl AsRawFd) -> u64 {
        let mut out = std::mem::take(&mut self.out);
        out.sort_by_key(|(peer, _)| *peer);
        let mut sent = 0u64;
        let mut plain: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < out.len() {
            let run = if self.gso { gso_run(&out[i..]) } else { 1 };
            if run < 2 {
                plain.push(i);
                i += 1;
                continue;
            }
            sent += self.send_plain(sock, &out, &mut plain);
            let seg = out[i].1.len() as u16;
            let parts: Vec<IoSlice<'_>> = out[i..i + run]
                .iter()
                .map(|(_, d)| IoSlice::new(d))
                .collect();
            let addr = SockaddrStorage::from(out[i].0);
            let r = sendmsg(
                sock.as_raw_fd(),
                &parts,
                &[ControlMessage::UdpGsoSegments(&seg)],
                MsgFlags::MSG_DONTWAIT,
                Some(&addr),
            );
            match r {
                Ok(n) => {
                    sent += n as u64;
                    self.gso_sends += 1;
                }
                Err(nix::errno::Errno::EAGAIN) => {}
                Err(e) => {
                    // No GSO here (an old kernel, a device without checksum offload): plain
                    // sends from now on, this run included.
                    tracing::info!(error = %e, "UDP GSO refused; sending datagrams one by one");
                    self.gso = false;
                    plain.extend(i..i + run);
                }
            }
            i += run;
        }
        sent += self.send_plain(sock, &out, &mut plain);
        // What is left in `free` was not taken this pass; usually little.
        let mut kept: usize = self.free.iter().map(|d| d.capacity()).sum();
        for (_, d) in out.drain(..) {
            let c = d.capacity();
            if c <= hkv_proto::udp::MAX_DATAGRAM && kept + c <= KEPT_DATAGRAM_BYTES {
                kept += c;
                self.free.push(d);
            }
        }
        self.out = out;
        sent
    }

    /// Sends the datagrams of `out` at `which` (then empties it) with `sendmmsg`.
    fn send_plain(
        &mut self,
        sock: &impl AsRawFd,
        out: &[(SocketAddr, Vec<u8>)],
        which: &mut Vec<usize>,
    ) -> u64 {
        let mut sent = 0u64;
        if which.is_empty() {
            return 0;
        }
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(SEND_BATCH, None);
        for chunk in which.chunks(SEND_BATCH) {
            let mut at = 0;
            while at < chunk.len() {
                let part = &chunk[at..];
                let iovs: Vec<[IoSlice<'_>; 1]> =
                    part.iter().map(|&k| [IoSlice::new(&out[k].1)]).collect();
                let addrs: Vec<Option<SockaddrStorage>> = part
                    .iter()
                    .map(|&k| Some(SockaddrStorage::from(out[k].0)))
                    .collect();
                let r = sendmmsg(
                    sock.as_raw_fd(),
                    &mut headers,
                    &iovs,
                    &addrs,
                    [],
                    MsgFlags::MSG_DONTWAIT,
                );
                match r {
                    Ok(res) => {
                        let mut k = 0;
                        for m in res {
                            sent += m.bytes as u64;
                            k += 1;
                        }
                        if k == 0 {
                            break;
                        }
                        at += k;
                    }
                    Err(nix::errno::Errno::EINTR) => continue,
                    // Full socket buffer or an unreachable peer: this datagram is lost,
                    // the rest still go.
                    Err(_) => at += 1,
                }
            }
        }
        which.clear();
        sent
    }
}

/// Buffers of earlier passes' request payloads, for the next ones, and their capacity in
/// bytes.
pub(crate) struct Payloads {
    kept: Vec<Vec<u8>>,
    bytes: usize,
}

impl Payloads {
    /// A copy of `d`, in a kept buffer where there is one.
    pub fn copy(&mut self, d: &[u8]) -> Vec<u8> {
        let mut p = match self.kept.pop() {
            Some(p) => {
                self.bytes -= p.capacity();
                p
            }
            None => Vec::new(),
        };
        p.clear();
        p.extend_from_slice(d);
        p
    }

    fn keep(&mut self, b: Vec<u8>) {
        let c = b.capacity();
        if c > 0 && c <= KEPT_PAYLOAD_BYTES && self.bytes + c <= KEPT_PAYLOADS_BYTES {
            self.bytes += c;
            self.kept.push(b);
        }
    }
}

/// What a datagram's control messages say, read in one walk: the segment size of a UDP
/// GRO receive (the datagrams the kernel coalesced into one buffer are each this long but
/// the last; Some(0): one datagram; None: the control messages were cut short, so where the
/// datagrams of the buffer begin is unknown and the buffer is dropped rather than parsed as
/// one), and the kernel's receive time (SO_TIMESTAMPNS), since the Unix epoch.
fn control<S>(m: &nix::sys::socket::RecvMsg<'_, '_, S>) -> (Option<usize>, Option<Duration>) {
    let Ok(cmsgs) = m.cmsgs() else {
        return (None, None);
    };
    let (mut segment, mut at) = (Some(0), None);
    for c in cmsgs {
        match c {
            ControlMessageOwned::UdpGroSegments(size) => {
                segment = Some(usize::try_from(size).unwrap_or(0));
            }
            ControlMessageOwned::ScmTimestampns(t) => at = Some(Duration::from(t)),
            _ => {}
        }
    }
    (segment, at)
}

/// Whether a datagram received at `at` has waited past `max_wait` by `now` (wall-clock
/// times: a clock stepped back makes nothing stale).
fn stale(at: Option<Duration>, now: Duration, max_wait: Option<Duration>) -> bool {
    match (at, max_wait) {
        (Some(at), Some(max)) => now.saturating_sub(at) > max,
        _ => false,
    }
}

/// Most datagrams in one GSO send (the kernel's UDP_MAX_SEGMENTS).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes in one GSO send: one IP packet's worth, less its headers.
const GSO_MAX_BYTES: usize = 65_000;

/// How many datagrams at the head of `out` can go as one GSO send: to the same peer, all
/// of the first one's size except a last one that may be shorter.
fn gso_run(out: &[(SocketAddr, Vec<u8>)]) -> usize {
    let Some((peer, first)) = out.first() else {
        return 0;
    };
    let seg = first.len();
    if seg == 0 || seg > u16::MAX as usize {
        return 1;
    }
    let max = GSO_MAX_SEGMENTS.min(GSO_MAX_BYTES / seg);
    let mut n = 1;
    while n < out.len() && n < max && out[n].0 == *peer {
        let len = out[n].1.len();
        if len == seg {
            n += 1;
        } else {
            if len < seg && len > 0 {
                n += 1;
            }
            break;
        }
    }
    n
}

fn to_std(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::new(v4.ip(), v4.port())));
    }
    a.as_sockaddr_in6().map(|v6| {
        SocketAddr::V6(SocketAddrV6::new(
            v6.ip(),
            v6.port(),
            v6.flowinfo(),
            v6.scope_id(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_with_their_senders() {
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        let clients: Vec<std::net::UdpSocket> = (0..5)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        for (i, c) in clients.iter().enumerate() {
            c.send_to(format!("ping {i}").as_bytes(), addr).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut b = UdpBatch::new(Duration::ZERO);
        let mut seen = Vec::new();
        b.receive(&server, |peer, d, _| seen.push((peer, d.to_vec())))
            .unwrap();
        assert_eq!(seen.len(), 5);
        for (peer, d) in &seen {
            let i = clients
                .iter()
                .position(|c| c.local_addr().unwrap() == *peer)
                .expect("a known sender");
            assert_eq!(d, format!("ping {i}").as_bytes());
            b.out.push((*peer, format!("pong {i}").into_bytes()));
        }
        assert!(b.flush(&server) > 0);
        for (i, c) in clients.iter().enumerate() {
            c.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let mut buf = [0u8; 64];
            let n = c.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], format!("pong {i}").as_bytes());
        }
        assert!(matches!(
            b.receive(&server, |_, _, _| {}),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock
        ));
    }

    #[test]
    fn kept_buffers_stay_within_their_bound_whatever_was_sent() {
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = peer.local_addr().unwrap();
        let mut b = UdpBatch::new(Duration::ZERO);
        // Small replies first, then long ones reusing their buffers, several passes.
        for pass in 0..4 {
            for i in 0..300usize {
                let len = if pass % 2 == 0 {
                    1 + (i * 7) % 1390
                } else {
                    700 + i * 37 % 4000
                };
                b.push_reply(to, i as u16, &vec![b'x'; len]);
            }
            b.flush(&server);
            assert!(b.free.iter().map(|d| d.capacity()).sum::<usize>() <= KEPT_DATAGRAM_BYTES);
            assert!(b
                .free
                .iter()
                .all(|d| d.capacity() <= hkv_proto::udp::MAX_DATAGRAM));
        }
        for i in 0..3 * KEPT_PAYLOADS_BYTES / KEPT_PAYLOAD_BYTES {
            let big = UdpRequest {
                peer: to,
                id: 0,
                payload: Vec::with_capacity(KEPT_PAYLOAD_BYTES + i % 2),
                reply: Vec::with_capacity(100),
            };
            b.recycle(big);
        }
        let kept: usize = b.payloads.kept.iter().map(|p| p.capacity()).sum();
        assert_eq!(kept, b.payloads.bytes);
        assert!(kept <= KEPT_PAYLOADS_BYTES);
        assert!(b
            .payloads
            .kept
            .iter()
            .all(|p| p.capacity() <= KEPT_PAYLOAD_BYTES));
        // Taking buffers back out keeps the count of their bytes.
        for _ in 0..10 {
            let p = b.payloads.copy(b"get a\r\n");
            assert_eq!(p, b"get a\r\n");
        }
        let kept: usize = b.payloads.kept.iter().map(|p| p.capacity()).sum();
        assert_eq!(kept, b.payloads.bytes);
    }

    #[test]
    fn runs_to_one_peer_go_as_one_gso_send_and_arrive_as_datagrams_in_order() {
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b2 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let dgram = |tag: &str, i: usize, len: usize| {
            let mut d = format!("{tag}{i:03}").into_bytes();
            d.resize(len, b'.');
            d
        };
        let mut b = UdpBatch::new(Duration::ZERO);
        // a's replies interleaved with b2's, as a pass answers them; a's last is shorter.
        for i in 0..10 {
            b.out.push((a.local_addr().unwrap(), dgram("a", i, 100)));
            if i % 3 == 0 {
                b.out.push((b2.local_addr().unwrap(), dgram("b", i, 70)));
            }
        }
        b.out.push((a.local_addr().unwrap(), dgram("a", 10, 40)));
        assert!(b.flush(&server) > 0);
        for (sock, want) in [
            (
                &a,
                (0..10)
                    .map(|i| dgram("a", i, 100))
                    .chain([dgram("a", 10, 40)])
                    .collect::<Vec<_>>(),
            ),
            (&b2, (0..10).step_by(3).map(|i| dgram("b", i, 70)).collect()),
        ] {
            sock.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            for w in want {
                let mut buf = [0u8; 256];
                let n = sock.recv(&mut buf).unwrap();
                assert_eq!(&buf[..n], &w[..], "one datagram per reply, in order");
            }
        }
        if b.gso {
            assert!(b.gso_sends >= 1, "a's run went as a GSO send");
        } else {
            eprintln!("UDP GSO is refused here; plain sends were tested");
        }
    }
}
