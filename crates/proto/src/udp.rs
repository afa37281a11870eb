//! memcached's UDP framing: an 8-byte header before the text protocol.
//!
//! ```text
//!  0..2 request id   2..4 sequence number   4..6 datagrams in message   6..8 reserved (0)
//! ```
//! Requests must fit one datagram; replies are split over as many as they need. As memcached
//! 1.6 does, a request datagram must carry more than its header and announce a message of one
//! datagram (its sequence number is not looked at); anything else is dropped unanswered, which
//! also keeps a spoofed source from getting a reply it did not ask for.

/// Largest datagram payload, header included (memcached's UDP_MAX_PAYLOAD_SIZE).
pub const MAX_DATAGRAM: usize = 1400;
pub const HEADER: usize = 8;

pub enum Frame {
    Request { id: u16, payload_at: usize },
    Drop,
}

pub fn frame(d: &[u8]) -> Frame {
    if d.len() <= HEADER {
        return Frame::Drop;
    }
    let id = u16::from_be_bytes([d[0], d[1]]);
    let total = u16::from_be_bytes([d[4], d[5]]);
    if total != 1 {
        return Frame::Drop;
    }
    Frame::Request {
        id,
        payload_at: HEADER,
    }
}

/// Splits a reply into datagrams, each with its header.
pub fn datagrams(id: u16, reply: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    datagrams_into(id, reply, &mut Vec::new(), |d| out.push(d));
    out
}

/// [`datagrams`] into buffers taken from `free` (a worker's datagrams of earlier passes,
/// given back after sending): a reply costs no allocation once the pool is warm.
pub fn datagrams_into(
    id: u16,
    reply: &[u8],
    free: &mut Vec<Vec<u8>>,
    mut out: impl FnMut(Vec<u8>),
) {
    let per = MAX_DATAGRAM - HEADER;
    let n = reply.len().div_ceil(per).max(1);
    for i in 0..n {
        let chunk = &reply[(i * per).min(reply.len())..((i + 1) * per).min(reply.len())];
        let mut d = free.pop().unwrap_or_default();
        d.clear();
        // Exact: a kept buffer stays a datagram's size (amortised growth would double it).
        d.reserve_exact(HEADER + chunk.len());
        d.extend_from_slice(&id.to_be_bytes());
        d.extend_from_slice(&(i as u16).to_be_bytes());
        d.extend_from_slice(&(n.min(u16::MAX as usize) as u16).to_be_bytes());
        d.extend_from_slice(&[0, 0]);
        d.extend_from_slice(chunk);
        out(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing() {
        assert!(matches!(
            frame(b"\x00\x07\x00\x00\x00\x01\x00\x00get a\r\n"),
            Frame::Request {
                id: 7,
                payload_at: 8
            }
        ));
        // memcached 1.6 reads neither the sequence number nor the reserved bytes.
        assert!(matches!(
            frame(b"\x00\x07\x00\x03\x00\x01\x00\x09get a\r\n"),
            Frame::Request {
                id: 7,
                payload_at: 8
            }
        ));
        // Parts of a longer message, a message of no datagrams, a header alone, a runt.
        assert!(matches!(
            frame(b"\x00\x07\x00\x01\x00\x02\x00\x00get a\r\n"),
            Frame::Drop
        ));
        assert!(matches!(
            frame(b"\x00\x07\x00\x00\x00\x00\x00\x00get a\r\n"),
            Frame::Drop
        ));
        assert!(matches!(
            frame(b"\x00\x07\x00\x00\x00\x01\x00\x00"),
            Frame::Drop
        ));
        assert!(matches!(frame(b"\x00\x07"), Frame::Drop));
        let reply = vec![b'x'; 3000];
        let d = datagrams(9, &reply);
        assert_eq!(d.len(), 3);
        assert!(d.iter().all(|x| x.len() <= MAX_DATAGRAM));
        assert_eq!(&d[2][..8], &[0, 9, 0, 2, 0, 3, 0, 0]);
        let joined: Vec<u8> = d.iter().flat_map(|x| x[8..].to_vec()).collect();
        assert_eq!(joined, reply);
        assert_eq!(datagrams(1, b"").len(), 1);
        // From a pool of used buffers: the same datagrams, none of the old bytes.
        let mut free = vec![vec![b'?'; 5000], vec![b'!'; 10]];
        let mut pooled = Vec::new();
        datagrams_into(9, &reply, &mut free, |x| pooled.push(x));
        assert_eq!(pooled, d);
        assert!(free.is_empty());
    }
}
