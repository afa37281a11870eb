//! The wall clock in memcached's unit: seconds since the epoch.

/// Seconds since the epoch on CLOCK_REALTIME_COARSE: the time of the last timer tick (a few
/// ms behind at most, which a count of whole seconds does not see), read without the
/// time-stamp counter. Every pass reads it; the precise clock cost ~30 ns a read on a VM.
/// memcached, too, reads the time once a second into a variable every request uses.
pub(crate) fn unix_now() -> u32 {
    rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse).tv_sec as u32
}
