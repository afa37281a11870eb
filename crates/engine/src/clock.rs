//! Coarse clocks: the time of the last timer tick (a few ms), read without the time-stamp
//! counter. A precise read costs ~30 ns on a VM (`rdtsc` alone ~18 ns), as much as a small
//! batch's index work; these cost ~6 ns. For figures counted over windows far longer than
//! a tick, and for memcached's whole seconds.

fn coarse(clock: libc::clockid_t) -> Option<libc::timespec> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration; the coarse clock
    // ids are Linux's since 2.6.32 (an error leaves `t` alone and returns -1). glibc's vDSO
    // call, which valgrind, the sanitizers and Miri know.
    (unsafe { libc::clock_gettime(clock, &mut t) } == 0).then_some(t)
}

/// Microseconds on CLOCK_MONOTONIC_COARSE (0 if the kernel refuses it).
pub(crate) fn coarse_us() -> u64 {
    coarse(libc::CLOCK_MONOTONIC_COARSE)
        .map_or(0, |t| t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1000)
}

/// Seconds since the Unix epoch, memcached's unit of time, on CLOCK_REALTIME_COARSE (a few
/// ms behind at most, which a count of whole seconds barely sees; memcached itself reads
/// the time once a second into a variable every request uses).
pub fn unix_seconds() -> u32 {
    match coarse(libc::CLOCK_REALTIME_COARSE) {
        Some(t) => t.tv_sec as u32,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as u32),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_coarse_clocks_follow_the_precise_ones() {
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
        let fine = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as u32;
        let coarse = super::unix_seconds();
        assert!(
            coarse + 1 >= fine && coarse <= fine + 1,
            "{coarse} vs {fine}"
        );
    }
}
