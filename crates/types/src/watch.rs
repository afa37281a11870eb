//! The streams of memcached's `watch` command, as bits (one per argument).

pub const FETCHERS: u8 = 1;
pub const MUTATIONS: u8 = 2;
pub const EVICTIONS: u8 = 4;
pub const CONNEVENTS: u8 = 8;

/// The bit of one `watch` argument; `None` for one memcached 1.6.18 does not know (it has
/// no `deletions`; the proxy streams have no meaning here).
pub fn parse(arg: &[u8]) -> Option<u8> {
    Some(match arg {
        b"fetchers" => FETCHERS,
        b"mutations" => MUTATIONS,
        b"evictions" => EVICTIONS,
        b"connevents" => CONNEVENTS,
        _ => return None,
    })
}
