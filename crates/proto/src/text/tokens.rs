//! memcached splits a command line on single spaces; runs of spaces are one separator.

pub(crate) fn split(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = line;
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
        let token = &rest[..end];
        rest = &rest[(end + 1).min(rest.len())..];
        if !token.is_empty() {
            return Some(token);
        }
    })
}

/// What `strtol` reads of a token, as memcached's `safe_strto*` take it: white space before
/// the number is skipped, and the number ends at white space, whatever follows it (a token
/// holds no spaces, but may hold `\t`, `\r`, `\v`, `\f`): `set k 0 0 1\r\r\n` stores one
/// byte in memcached, and was a bad command line here (a hostile probe).
pub(crate) fn strtol_view(t: &[u8]) -> &[u8] {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let start = t.iter().take_while(|b| is_space(b)).count();
    let t = &t[start..];
    &t[..t.iter().position(is_space).unwrap_or(t.len())]
}

/// memcached's `safe_strtoul`/`safe_strtoull`: decimal digits, no overflow; a leading '+'
/// is allowed, as `strtoul` allows it, and leading zeros as many as the line holds (a bound
/// on the digits refused `incr k 000000000000000000001`). A leading '-' negates, as
/// `strtoull` does, and memcached then refuses only a result that is negative as a signed
/// number: `-0` is 0 and `-18446744073709551615` is 1, `-1` is refused (a differential probe).
pub(crate) fn parse_u64(t: &[u8]) -> Option<u64> {
    let t = strtol_view(t);
    match t.split_first() {
        Some((b'-', rest)) => {
            let v = parse_digits(rest)?.wrapping_neg();
            (v as i64 >= 0).then_some(v)
        }
        Some((b'+', rest)) => parse_digits(rest),
        _ => parse_digits(t),
    }
}

/// Decimal digits only, at least one, within u64.
fn parse_digits(t: &[u8]) -> Option<u64> {
    if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

pub(crate) fn parse_u32(t: &[u8]) -> Option<u32> {
    parse_u64(t).and_then(|v| u32::try_from(v).ok())
}

/// memcached's `safe_strtol` for exptimes and lengths: an optional sign and digits, within
/// i32.
pub(crate) fn parse_i32(t: &[u8]) -> Option<i64> {
    let t = strtol_view(t);
    let (neg, digits) = match t.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, t),
    };
    if digits.first() == Some(&b'+') {
        return None;
    }
    // Range-checked before the sign is applied: a u64 of 2^63 or more must not wrap.
    let v = i64::try_from(parse_digits(digits)?).ok()?;
    let v = if neg { -v } else { v };
    (i32::MIN as i64..=i32::MAX as i64)
        .contains(&v)
        .then_some(v)
}

/// memcached's `safe_strtol` into an `int32_t` on a 64-bit build, for exptimes, flush
/// delays and meta `N`/`T`/`R`: any number `strtol` reads (within i64) is taken and its low
/// 32 bits kept, so `99999999999` is 1215752191, an absolute time long past, and
/// `4294967396` is 100.
pub(crate) fn parse_i32_low_bits(t: &[u8]) -> Option<i64> {
    let t = strtol_view(t);
    let (neg, digits) = match t.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, t),
    };
    if digits.first() == Some(&b'+') {
        return None;
    }
    let v = parse_digits(digits)?;
    let v = if neg {
        // -2^63 is the most negative strtol reads.
        if v > 1 << 63 {
            return None;
        }
        (v as i64).wrapping_neg()
    } else {
        i64::try_from(v).ok()?
    };
    Some(i64::from(v as i32))
}

/// memcached's `safe_strtoul` into a `uint32_t` (client flags): the low 32 bits of any
/// unsigned 64-bit number.
pub(crate) fn parse_u32_low_bits(t: &[u8]) -> Option<u32> {
    parse_u64(t).map(|v| v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `incr k 000000000000000000001` was refused (more than 20 digits); memcached's
    /// `strtoull` reads it as 1, and so does `ma k D...`.
    #[test]
    fn regression_numbers_with_many_leading_zeros_are_read_as_memcached_reads_them() {
        assert_eq!(parse_u64(b"000000000000000000000000001"), Some(1));
        assert_eq!(
            parse_u64(b"0000000000000000000018446744073709551615"),
            Some(u64::MAX)
        );
        assert_eq!(
            parse_u64(b"00000000000000000000018446744073709551616"),
            None
        );
    }

    #[test]
    fn numbers_like_memcached() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(&[b'0'; 300]), Some(0));

        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"-18446744073709551615"), Some(1));
        assert_eq!(parse_u64(b"-9223372036854775808"), None);
        assert_eq!(parse_u64(b"-9223372036854775809"), Some((1 << 63) - 1));
        assert_eq!(parse_u64(b"-18446744073709551616"), None);
        assert_eq!(parse_u64(b"--0"), None);
        assert_eq!(parse_u64(b"-+0"), None);
        assert_eq!(parse_u64(b"+-0"), None);
        assert_eq!(parse_u64(b"-"), None);
        assert_eq!(parse_u32_low_bits(b"-18446744073709551615"), Some(1));
        assert_eq!(parse_i32(b"--1"), None);
        assert_eq!(parse_i32_low_bits(b"--1"), None);
        assert_eq!(parse_u64(b"1x"), None);
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483648"), None);
        assert_eq!(parse_i32(b"-"), None);
    }

    /// Found by a hostile probe (stop 57): memcached stores `set k 0 0 1\r\r\n` (its
    /// `strtol` stops at the `\r`, and white space after a number is accepted).
    #[test]
    fn regression_white_space_around_a_number_is_read_as_strtol_reads_it() {
        assert_eq!(parse_i32(b"1\r"), Some(1));
        assert_eq!(parse_i32(b"\t-5\x0b"), Some(-5));
        assert_eq!(parse_u64(b"7\rjunk"), Some(7));
        assert_eq!(parse_u32(b"\x0c9"), Some(9));
        assert_eq!(parse_i32_low_bits(b"4294967396\t"), Some(100));
        for bad in [&b"\r"[..], b"-\t5", b"+\r", b"1x\r", b"x1\r"] {
            assert_eq!(parse_i32(bad), None, "{bad:?}");
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn regression_a_leading_plus_is_a_number_as_in_strtol() {
        // Found by scripts/differential-fuzz.py: memcached stores `set k 0 0 +3`.
        assert_eq!(parse_i32(b"+3"), Some(3));
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u32(b"+4294967295"), Some(u32::MAX));
        for bad in [&b"+"[..], b"++3", b"+-3", b"-+3", b"--3", b"+ 3"] {
            assert_eq!(parse_i32(bad), None, "{bad:?}");
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn regression_exptimes_and_flags_past_32_bits_keep_their_low_bits_as_in_memcached() {
        // A differential probe: memcached stores `set a 4294967296 99999999999 1` (flags 0,
        // expired at once); hkv refused it and read its data block as a command.
        assert_eq!(parse_i32_low_bits(b"99999999999"), Some(1_215_752_191));
        assert_eq!(parse_i32_low_bits(b"4294967396"), Some(100));
        assert_eq!(parse_i32_low_bits(b"2147483648"), Some(-2_147_483_648));
        assert_eq!(parse_i32_low_bits(b"-1"), Some(-1));
        assert_eq!(parse_i32_low_bits(b"+100"), Some(100));
        assert_eq!(parse_i32_low_bits(b"-9223372036854775808"), Some(0));
        assert_eq!(parse_i32_low_bits(b"-9223372036854775809"), None);
        assert_eq!(parse_i32_low_bits(b"9223372036854775808"), None);
        assert_eq!(parse_i32_low_bits(b"1x"), None);
        assert_eq!(parse_u32_low_bits(b"4294967296"), Some(0));
        assert_eq!(parse_u32_low_bits(b"4294967297"), Some(1));
        assert_eq!(parse_u32_low_bits(b"18446744073709551616"), None);
        assert_eq!(parse_u32_low_bits(b"-1"), None);
    }

    #[test]
    fn regression_numbers_of_2_pow_63_and_above_are_refused() {
        assert_eq!(parse_i32(b"-18446744073709551615"), None);
        assert_eq!(parse_i32(b"18446744073709551615"), None);
        assert_eq!(parse_i32(b"-9223372036854775808"), None);
        assert_eq!(parse_i32(b"9223372036854775808"), None);
        assert_eq!(parse_i32(b"-2147483648"), Some(-2147483648));
        let t: Vec<&[u8]> = split(b"  get  a b ").collect();
        assert_eq!(t, [&b"get"[..], b"a", b"b"]);
    }

    proptest::proptest! {
        /// The word-at-a-time split agrees with memcached's rule (single spaces split, runs
        /// are one separator) on any line.
        #[test]
        fn split_matches_the_plain_definition(line in proptest::collection::vec(
            proptest::prop_oneof![proptest::strategy::Just(b' '), proptest::num::u8::ANY],
            0..80,
        )) {
            let fast: Vec<&[u8]> = split(&line).collect();
            let plain: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|t| !t.is_empty()).collect();
            proptest::prop_assert_eq!(fast, plain);
        }
    }
}
