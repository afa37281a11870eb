//! The wall clock in memcached's unit: seconds since the epoch.

/// Read once per pass, from the engine's coarse realtime clock (a precise read per pass
/// cost ~30 ns on a VM).
pub(crate) fn unix_now() -> u32 {
    hkv_engine::unix_seconds()
}
