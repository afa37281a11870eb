//! The streams of memcached's `watch` command, as bits (one per argument).

pub const FETCHERS: u8 = 1;
pub const MUTATIONS: u8 = 2;
pub const EVICTIONS: u8 = 4;
pub const CONNEVENTS: u8 = 8;
/// Streams memcached 1.6.18 accepts that carry no line here: `rawcmds`, `sysevents` and the
/// proxy's (`proxyreqs`, `proxyevents`, `proxyuser`; hkv has no proxy). memcached without
/// its proxy answers `OK` to them and sends nothing either.
pub const SILENT: u8 = 16;

/// The bit of one `watch` argument; `None` for one memcached 1.6.18 does not know (it has
/// no `deletions`).
pub fn parse(arg: &[u8]) -> Option<u8> {
    Some(match arg {
        b"fetchers" => FETCHERS,
        b"mutations" => MUTATIONS,
        b"evictions" => EVICTIONS,
        b"connevents" => CONNEVENTS,
        b"rawcmds" | b"sysevents" | b"proxyreqs" | b"proxyevents" | b"proxyuser" => SILENT,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by a differential probe (stop 57): memcached 1.6.18 answers `OK` to these (with
    /// no line to send without its proxy); hkv answered `ERROR`.
    #[test]
    fn regression_memcached_s_other_streams_are_accepted_and_silent() {
        for arg in [
            "rawcmds",
            "sysevents",
            "proxyreqs",
            "proxyevents",
            "proxyuser",
        ] {
            assert_eq!(parse(arg.as_bytes()), Some(SILENT), "{arg}");
        }
        assert_eq!(parse(b"deletions"), None);
        assert_eq!(parse(b"fetchers"), Some(FETCHERS));
    }
}
