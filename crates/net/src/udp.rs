//! UDP requests in the worker; the framing itself is `hkv_proto::udp`.

pub(crate) use hkv_proto::udp::{datagrams, frame, Frame};

/// A request datagram, ready to be parsed.
pub(crate) struct UdpRequest {
    pub peer: std::net::SocketAddr,
    pub id: u16,
    pub payload: Vec<u8>,
}
