//! The wall clock in memcached's unit: seconds since the epoch.

/// Seconds since the epoch on CLOCK_REALTIME_COARSE: the time of the last timer tick (a few
/// ms behind at most, which a count of whole seconds barely sees), read without the
/// time-stamp counter. Every pass reads it; the precise clock cost ~30 ns a read on a VM.
/// memcached, too, reads the time once a second into a variable every request uses.
pub(crate) fn unix_now() -> u32 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration; the clock id is
    // one Linux has had since 2.6.32. (glibc's vDSO call: valgrind and sanitizers know it.)
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) } != 0 {
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
    }
    t.tv_sec as u32
}

#[cfg(test)]
mod tests {
    #[test]
    fn coarse_seconds_agree_with_the_system_clock() {
        let fine = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as u32;
        let coarse = super::unix_now();
        assert!(
            coarse + 1 >= fine && coarse <= fine + 1,
            "{coarse} vs {fine}"
        );
    }
}
