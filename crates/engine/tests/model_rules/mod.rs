//! memcached's rules as the model test reads them, on their own: when an exptime expires an
//! item, and when a value is a counter for INCR and DECR.

/// memcached's largest relative exptime: larger ones are absolute Unix times.
pub const MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// The model's own reading of memcached's rules.
pub fn expiry_at(exptime: i64, now: u32) -> Option<u32> {
    match exptime {
        0 => Some(0),
        e if e < 0 => None,
        e => {
            let at = if e > MAXDELTA { e } else { now as i64 + e };
            (at > now as i64).then_some(at as u32)
        }
    }
}

/// The model's reading of a counter, memcached's `safe_strtoull` on the item's value:
/// `strtoull` skips leading white space, takes a sign and decimal digits, and the value is a
/// number when what stops it is white space, a NUL or the end ("9 <5>", a padded counter with
/// text appended, is 9); a '-' is refused where the result reads as negative. The values
/// this test writes reach all of these: vector adds shift every byte, so digits, signs, NULs
/// and tabs come out of "<seq>..." runs.
pub fn counter(value: &[u8]) -> Option<u64> {
    let space = |b: u8| b == b' ' || (b'\t'..=b'\r').contains(&b);
    let mut rest = value;
    while let [b, tail @ ..] = rest {
        if !space(*b) {
            break;
        }
        rest = tail;
    }
    let negative = rest.first() == Some(&b'-');
    if let [b'-' | b'+', tail @ ..] = rest {
        rest = tail;
    }
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    match rest.get(digits) {
        _ if digits == 0 => return None,
        Some(&b) if !space(b) && b != 0 => return None,
        _ => {}
    }
    let n: u64 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let n = if negative { n.wrapping_neg() } else { n };
    if negative && (n as i64) < 0 {
        return None;
    }
    Some(n)
}

/// Slab page size of the engines this test builds: the largest chunk.
pub const PAGE: usize = 4 << 10;

/// A counter as INCR and DECR see it: an item too large for one chunk (a 32-byte header, the
/// key and the value past [`PAGE`]) is stored in parts, and memcached answers such a chunked
/// item as no number whatever its text ("Too large to be a number").
pub fn counter_of(key: &[u8], value: &[u8]) -> Option<u64> {
    if 32 + key.len() + value.len() > PAGE {
        return None;
    }
    counter(value)
}

#[test]
fn the_models_counter_reads_values_as_memcached_does() {
    assert_eq!(counter(b"9 <5>"), Some(9));
    assert_eq!(counter(b"3\0<7>"), Some(3));
    assert_eq!(counter(b"+729"), Some(729));
    assert_eq!(counter(b" \t12\n"), Some(12));
    assert_eq!(counter(b"-0"), Some(0));
    assert_eq!(counter(b"-5"), None);
    assert_eq!(counter(b"<5>9"), None);
    assert_eq!(counter(b"12a"), None);
    assert_eq!(counter(b""), None);
    assert_eq!(counter(b"18446744073709551616"), None);
}
