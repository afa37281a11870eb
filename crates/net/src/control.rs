//! Control commands that act on the whole server, run here whichever protocol asked:
//! flush_all, the memory limit, slab page moves. (Stats live in [`crate::stats`].)

use std::sync::atomic::Ordering;

use crate::shared::Shared;

/// `flush_all [delay]` (text), FLUSH (binary).
pub(crate) fn flush_all(shared: &Shared, delay: i64, now: u32) {
    shared.engine.flush_all(delay, now);
    shared.stats.cmd_flush.fetch_add(1, Ordering::Relaxed);
}

/// `cache_memlimit <MB>`: the new limit, or memcached's refusal below 8 MB.
pub(crate) fn set_memory_limit(shared: &Shared, megabytes: u64) -> Result<(), &'static str> {
    if megabytes < 8 {
        return Err(hkv_proto::errors::admin::MEMLIMIT_TOO_SMALL);
    }
    let bytes = usize::try_from(megabytes.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    shared.engine.arena().set_limit(bytes);
    Ok(())
}

/// `refresh_certs`: the TLS certificate and key read again; memcached's replies.
pub(crate) fn refresh_certs(shared: &Shared) -> Result<(), String> {
    match &shared.config.tls {
        None => Err(hkv_proto::errors::admin::TLS_NOT_ENABLED.to_string()),
        Some(tls) => tls.refresh().map_err(|e| {
            tracing::warn!(error = %e, "refresh_certs failed; the old certificate stays");
            e.to_string()
        }),
    }
}

/// `slabs reassign <src> <dst>` with memcached's 1-based class ids.
pub(crate) fn reassign(shared: &Shared, from: i64, to: i64, now: u32) -> Result<(), String> {
    let class = |c: i64| usize::try_from(c - 1).unwrap_or(usize::MAX);
    shared
        .engine
        .reassign(class(from), class(to), now)
        .map_err(|e| e.to_string())
}
