//! The small pieces every reply writer uses: a line, memcached's error line for an engine
//! result, the version string and the clock.

use hkv_engine::Response;

pub(crate) const VERSION: &str = concat!("1.6.21-hkv", env!("CARGO_PKG_VERSION"));

pub(crate) fn line(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// memcached's error line for an engine result that is a failure (or, for a result a
/// command cannot produce, a server error rather than silence).
pub(crate) fn error_line(r: &Response) -> &'static str {
    hkv_proto::errors::for_response(r)
}

pub(crate) fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}
