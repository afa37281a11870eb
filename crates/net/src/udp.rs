//! UDP requests in the worker; the framing itself is `hkv_proto::udp`. Datagrams are taken
//! and answered many per system call (`recvmmsg`, `sendmmsg`).

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};

pub(crate) use hkv_proto::udp::{datagrams, frame, Frame};

/// A request datagram, ready to be parsed.
pub(crate) struct UdpRequest {
    pub peer: SocketAddr,
    pub id: u16,
    pub payload: Vec<u8>,
}

/// Datagrams taken per `recvmmsg`.
pub(crate) const RECV_SLOTS: usize = 16;
/// Largest request datagram taken whole (memcached reads UDP into a buffer of this size).
const SLOT_BYTES: usize = 65536;
/// Datagrams sent per `sendmmsg`.
const SEND_BATCH: usize = 64;

/// A worker's buffers for batched UDP: 1 MiB, allocated only with `-U`.
pub(crate) struct UdpBatch {
    slots: Vec<Vec<u8>>,
    /// Replies of the pass, sent together.
    pub out: Vec<(SocketAddr, Vec<u8>)>,
}

impl UdpBatch {
    pub fn new() -> UdpBatch {
        UdpBatch {
            slots: (0..RECV_SLOTS).map(|_| vec![0u8; SLOT_BYTES]).collect(),
            out: Vec::new(),
        }
    }

    /// Takes up to [`RECV_SLOTS`] datagrams with one system call and hands each to `f` with
    /// its sender (a datagram cut short by the buffer is dropped, as an oversized request).
    /// Err(WouldBlock): none was waiting.
    pub fn receive(
        &mut self,
        sock: &impl AsRawFd,
        mut f: impl FnMut(SocketAddr, &[u8]),
    ) -> io::Result<usize> {
        // The headers hold raw pointers (not Send): made per call, a few small allocations
        // beside a system call.
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(RECV_SLOTS, None);
        let got: Vec<(usize, Option<SocketAddr>, bool)> = {
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
                (
                    m.bytes,
                    m.address.as_ref().and_then(to_std),
                    m.flags.contains(MsgFlags::MSG_TRUNC),
                )
            })
            .collect()
        };
        let n = got.len();
        for (i, (bytes, peer, truncated)) in got.into_iter().enumerate() {
            if let (Some(peer), false) = (peer, truncated) {
                f(peer, &self.slots[i][..bytes.min(SLOT_BYTES)]);
            }
        }
        Ok(n)
    }

    /// Sends every reply in `out` (UDP is lossy by contract: what the socket refuses is
    /// dropped). Returns the bytes sent.
    pub fn flush(&mut self, sock: &impl AsRawFd) -> u64 {
        let mut sent = 0u64;
        let out = std::mem::take(&mut self.out);
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(SEND_BATCH, None);
        for chunk in out.chunks(SEND_BATCH) {
            let mut at = 0;
            while at < chunk.len() {
                let part = &chunk[at..];
                let iovs: Vec<[IoSlice<'_>; 1]> =
                    part.iter().map(|(_, d)| [IoSlice::new(d)]).collect();
                let addrs: Vec<Option<SockaddrStorage>> = part
                    .iter()
                    .map(|(a, _)| Some(SockaddrStorage::from(*a)))
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
        let mut out = out;
        out.clear();
        self.out = out;
        sent
    }
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
        let mut b = UdpBatch::new();
        let mut seen = Vec::new();
        b.receive(&server, |peer, d| seen.push((peer, d.to_vec())))
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
            b.receive(&server, |_, _| {}),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock
        ));
    }
}
