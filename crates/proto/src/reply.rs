//! The small pieces every composer uses: a line, memcached's error line for an engine
//! result, and the version string.

use hkv_types::Response;

/// What `version` answers: memcached's version the protocol follows, then hkv's own.
pub const VERSION: &str = concat!("1.6.21-hkv", env!("CARGO_PKG_VERSION"));

/// `s` and the protocol's line end.
pub fn line(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// memcached's error line for an engine result that is a failure (or, for a result a
/// command cannot produce, a server error rather than silence).
pub fn error_line(r: &Response) -> &'static str {
    crate::errors::for_response(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_ends_in_crlf_and_errors_are_memcacheds() {
        let mut out = Vec::new();
        line(&mut out, "STORED");
        assert_eq!(out, b"STORED\r\n");
        assert_eq!(
            error_line(&Response::TooLarge),
            "SERVER_ERROR object too large for cache"
        );
        assert!(VERSION.starts_with("1.6."));
    }
}
