#![no_main]
//! UDP framing: any datagram is classified without panicking, and a reply split into
//! datagrams reassembles to itself with valid headers.

use hkv_proto::udp::{datagrams, frame, Frame, HEADER, MAX_DATAGRAM};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match frame(data) {
        Frame::Request { payload_at, .. } => {
            assert!(payload_at < data.len());
            assert_eq!(data[4..6], [0, 1]);
        }
        Frame::Drop => assert!(data.len() <= HEADER || data[4..6] != [0, 1]),
    }
    let id = data.first().copied().unwrap_or(0) as u16;
    let parts = datagrams(id, data);
    let mut joined = Vec::new();
    for (i, d) in parts.iter().enumerate() {
        assert!(d.len() <= MAX_DATAGRAM);
        assert_eq!(u16::from_be_bytes([d[0], d[1]]), id);
        assert_eq!(u16::from_be_bytes([d[2], d[3]]) as usize, i);
        assert_eq!(u16::from_be_bytes([d[4], d[5]]) as usize, parts.len());
        joined.extend_from_slice(&d[HEADER..]);
    }
    assert_eq!(joined, data);
});
