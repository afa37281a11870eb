//! memcached's expiration-time rules (protocol.txt, "Expiration times").

/// Exptimes up to 30 days are relative to now; larger ones are absolute Unix times.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    Never,
    /// Unix time (seconds) at which the item stops being visible.
    At(u32),
    /// Negative exptime or an absolute time already past: the item is born expired.
    AlreadyExpired,
}

impl Expiry {
    /// The header encoding: 0 is "never".
    pub fn to_raw(self) -> u32 {
        match self {
            Expiry::Never => 0,
            Expiry::At(t) => t,
            Expiry::AlreadyExpired => 1,
        }
    }
}

/// Converts a client's exptime at Unix time `now`.
pub fn expiry_from_exptime(exptime: i64, now: u32) -> Expiry {
    if exptime == 0 {
        return Expiry::Never;
    }
    if exptime < 0 {
        return Expiry::AlreadyExpired;
    }
    let at = if exptime > REALTIME_MAXDELTA {
        exptime
    } else {
        now as i64 + exptime
    };
    if at <= now as i64 {
        Expiry::AlreadyExpired
    } else {
        Expiry::At(at.min(u32::MAX as i64) as u32)
    }
}

/// Whether an item with raw expiry `raw` is expired at `now` (memcached: `exptime <= now`).
#[inline(always)]
pub fn is_expired(raw: u32, now: u32) -> bool {
    raw != 0 && raw <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_rules() {
        let now = 1_700_000_000;
        assert_eq!(expiry_from_exptime(0, now), Expiry::Never);
        assert_eq!(expiry_from_exptime(-1, now), Expiry::AlreadyExpired);
        assert_eq!(expiry_from_exptime(10, now), Expiry::At(now + 10));
        assert_eq!(
            expiry_from_exptime(REALTIME_MAXDELTA, now),
            Expiry::At(now + REALTIME_MAXDELTA as u32)
        );
        // One second past 30 days is an absolute time, long ago.
        assert_eq!(
            expiry_from_exptime(REALTIME_MAXDELTA + 1, now),
            Expiry::AlreadyExpired
        );
        assert_eq!(
            expiry_from_exptime(now as i64 + 100, now),
            Expiry::At(now + 100)
        );
        assert_eq!(expiry_from_exptime(now as i64, now), Expiry::AlreadyExpired);
        assert!(!is_expired(0, now));
        assert!(is_expired(now, now));
        assert!(!is_expired(now + 1, now));
    }
}
