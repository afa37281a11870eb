//! A coarse monotonic clock, for figures counted over windows far longer than its tick.

/// Microseconds on CLOCK_MONOTONIC_COARSE: the time of the last timer tick (a few ms), read
/// without touching the time-stamp counter (a precise read costs ~30 ns on a VM).
pub(crate) fn coarse_us() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration; the clock id is
    // one Linux has had since 2.6.32. (glibc's vDSO call: valgrind and sanitizers know it.)
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    if rc != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1000
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_coarse_clock_moves_with_the_precise_one() {
        let (c0, p0) = (super::coarse_us(), std::time::Instant::now());
        assert!(c0 > 0);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (c1, p1) = (super::coarse_us(), p0.elapsed().as_micros() as u64);
        // Within a few ticks (at most 10 ms each) of the precise clock.
        assert!(
            c1 - c0 + 20_000 >= p1 && c1 - c0 <= p1 + 20_000,
            "{} vs {p1}",
            c1 - c0
        );
    }
}
