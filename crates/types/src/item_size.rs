//! The size memcached 1.6 counts against `-I` for an item, so that hkv refuses exactly the
//! values memcached refuses (clients' own suites test the boundary: python-memcached's
//! `test_ignore_too_large_value` stores a value of exactly `-I` bytes and expects
//! `SERVER_ERROR object too large for cache`).

/// memcached's `sizeof(item)` on 64-bit builds.
const MEMCACHED_ITEM_HEADER: usize = 48;

/// What memcached's `item_size_ok` adds up: its item header, the key and its NUL, four
/// bytes of flags when they are not zero, the value with its `\r\n`, and eight bytes of CAS
/// unless `-C` turned CAS off. An item fits when this is at most `-I`.
pub fn memcached_item_size(key_len: usize, flags: u32, value_len: usize, cas: bool) -> usize {
    let flags_len = if flags == 0 { 0 } else { 4 };
    let cas_len = if cas { 8 } else { 0 };
    (MEMCACHED_ITEM_HEADER + key_len + 1 + flags_len + 2 + cas_len).saturating_add(value_len)
}

#[cfg(test)]
mod tests {
    use super::memcached_item_size;

    /// The largest values memcached 1.6.18 stores at `-I 1m`, found by bisection against it.
    #[test]
    fn the_largest_values_memcached_stores_fit_and_one_byte_more_does_not() {
        let limit = 1 << 20;
        for (key, flags, cas, largest) in [
            (1, 0, true, 1_048_516),
            (1, 1, true, 1_048_512),
            (7, 0, true, 1_048_510),
            (250, 1, true, 1_048_263),
            (7, 0, false, 1_048_518),
            (250, 1, false, 1_048_271),
        ] {
            assert!(memcached_item_size(key, flags, largest, cas) <= limit);
            assert!(memcached_item_size(key, flags, largest + 1, cas) > limit);
        }
    }

    #[test]
    fn a_value_length_near_usize_max_does_not_wrap() {
        assert!(memcached_item_size(1, 0, usize::MAX, true) > 1 << 30);
    }
}
