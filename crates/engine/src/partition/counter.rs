//! The value of a counter (INCR, DECR, meta `ma`) read as memcached reads it.

/// memcached's `safe_strtoull` on an item value (`strtoull` then a check of what stops
/// it): leading whitespace, an optional sign, decimal digits, then the end or whitespace
/// (memcached pads shortened counters with spaces, and clients copy such values). A '-' is
/// refused only where the wrapped result reads as negative, as memcached refuses it.
pub(super) fn parse_counter(v: &[u8]) -> Option<u64> {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let start = v.iter().take_while(|b| is_space(b)).count();
    let (neg, rest) = match v.get(start) {
        Some(b'-') => (true, &v[start + 1..]),
        Some(b'+') => (false, &v[start + 1..]),
        _ => (false, &v[start..]),
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    // A NUL stops strtoull like the end of the string, which memcached accepts too.
    if digits == 0 || rest.get(digits).is_some_and(|b| !is_space(b) && *b != 0) {
        return None;
    }
    let n: u64 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let n = if neg { n.wrapping_neg() } else { n };
    (!neg || (n as i64) >= 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_parse_like_memcached() {
        assert_eq!(parse_counter(b"0"), Some(0));
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b"12  "), Some(12));
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"-1"), None);
        assert_eq!(parse_counter(b"1a"), None);
        assert_eq!(parse_counter(b" "), None);
        assert_eq!(parse_counter(b"+"), None);
    }

    #[test]
    fn regression_counters_with_leading_space_or_plus_count_as_in_memcached() {
        // Found by scripts/differential-fuzz.py: memcached increments " 12", "+5" and
        // "12 abc" (strtoull skips leading whitespace, takes a sign and stops at a space);
        // hkv answered CLIENT_ERROR non-numeric.
        assert_eq!(parse_counter(b" 12"), Some(12));
        assert_eq!(parse_counter(b"\t12\r\n"), Some(12));
        assert_eq!(parse_counter(b"+5"), Some(5));
        assert_eq!(parse_counter(b"12 abc"), Some(12));
        assert_eq!(parse_counter(b"00000000000000000000000001"), Some(1));
        assert_eq!(parse_counter(b"-0"), Some(0));
        assert_eq!(parse_counter(b"-18446744073709551615"), Some(1));
        assert_eq!(parse_counter(b"- 1"), None);
        assert_eq!(parse_counter(b"+-1"), None);
    }

    #[test]
    fn regression_a_counter_ended_by_a_nul_counts_as_in_memcached() {
        // memcached's strtoull stops at the NUL and its check takes that as the end: "5\0"
        // increments to 6 (a hostile probe); hkv answered non-numeric.
        assert_eq!(parse_counter(b"5\0"), Some(5));
        assert_eq!(parse_counter(b"\0"), None);
    }
}
