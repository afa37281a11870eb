//! UDP requests with memcached's 8-byte frame header, for the tests of UDP.

use std::net::UdpSocket;
use std::time::Duration;

use super::Hkv;

/// A socket connected to the server's UDP port (`--udp-listen`).
pub fn udp_client(h: &Hkv) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(h.udp.expect("udp address")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// A request datagram: the frame header, then `body`.
pub fn request(id: u16, seq: u16, total: u16, body: &[u8]) -> Vec<u8> {
    let mut d = Vec::new();
    for v in [id, seq, total, 0] {
        d.extend_from_slice(&v.to_be_bytes());
    }
    d.extend_from_slice(body);
    d
}

/// Receives every datagram of reply `id` and returns (headers, reassembled payload).
pub fn reply(s: &UdpSocket, id: u16) -> (Vec<[u16; 4]>, Vec<u8>) {
    let mut parts: Vec<(u16, Vec<u8>)> = Vec::new();
    let mut headers = Vec::new();
    let mut total = u16::MAX;
    let mut buf = [0u8; 65536];
    while parts.len() < total as usize {
        let n = s.recv(&mut buf).expect("datagram");
        let h = [0, 2, 4, 6].map(|i| u16::from_be_bytes([buf[i], buf[i + 1]]));
        assert_eq!(h[0], id, "reply for another request");
        assert_eq!(h[3], 0, "reserved field");
        assert!(n <= 1400, "datagram of {n} bytes");
        total = h[2];
        headers.push(h);
        parts.push((h[1], buf[8..n].to_vec()));
    }
    parts.sort_by_key(|p| p.0);
    let seqs: Vec<u16> = parts.iter().map(|p| p.0).collect();
    assert_eq!(seqs, (0..total).collect::<Vec<_>>(), "sequence numbers");
    (headers, parts.into_iter().flat_map(|p| p.1).collect())
}
