//! The small pieces every composer uses: a line, memcached's error line for an engine
//! result, and the version string.

use hkv_types::Response;

/// What `version` answers: the memcached release whose protocol hkv follows, digits and dots
/// only as memcached's releases answer, since clients parse it strictly (Perl's `version`
/// refused `1.6.21-hkv0.1.0`, and with it 14 of Cache::Memcached::Fast's 21 test files
/// never ran). hkv's own version is [`HKV_VERSION`].
pub const VERSION: &str = "1.6.21";

/// hkv's own version (`stats hkv` `hkv_version`, `hkv --version`, the start-up log).
pub const HKV_VERSION: &str = env!("CARGO_PKG_VERSION");

/// `s` and the protocol's line end.
pub fn line(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal.
#[inline]
pub fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends a space, `letter` (none if 0) and `n` in decimal: a meta return flag or a field
/// of a VALUE line.
#[inline]
pub fn field(out: &mut Vec<u8>, letter: u8, n: impl itoa::Integer) {
    out.push(b' ');
    if letter != 0 {
        out.push(letter);
    }
    number(out, n);
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
    fn numbers_and_fields_are_decimal() {
        let mut out = Vec::new();
        number(&mut out, 0u32);
        field(&mut out, 0, u64::MAX);
        field(&mut out, b't', -1i64);
        assert_eq!(out, b"0 18446744073709551615 t-1");
    }

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
