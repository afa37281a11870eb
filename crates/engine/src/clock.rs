//! A coarse monotonic clock, for figures counted over windows far longer than its tick.

/// Microseconds on CLOCK_MONOTONIC_COARSE: the time of the last timer tick (a few ms), read
/// without touching the time-stamp counter.
pub(crate) fn coarse_us() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1000
}
