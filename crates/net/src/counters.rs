//! The server's own counters (the engine keeps its own), updated with relaxed atomics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};

/// Counter values at the last `stats reset`, by stat name, subtracted from what is reported.
#[derive(Default)]
pub(crate) struct Baseline {
    pub at: HashMap<String, u64>,
}

#[derive(Default)]
pub struct ServerStats {
    pub curr_connections: AtomicUsize,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub cmd_flush: AtomicU64,
    /// Meta commands parsed (memcached's `cmd_meta`).
    pub cmd_meta: AtomicU64,
    pub batches: AtomicU64,
    pub batched_requests: AtomicU64,
    /// Workers that panicked and were retired (their connections closed).
    pub worker_panics: AtomicU64,
    /// Bytes all connections' input and output buffers hold, and reads skipped because that
    /// total was over `conn_buffer_limit`.
    pub conn_buffer_bytes: AtomicUsize,
    pub conn_buffer_throttled: AtomicU64,
    /// Connections closed for idling longer than `idle_timeout` (memcached's name).
    pub idle_kicks: AtomicU64,
    /// SASL commands and failed authentications (memcached's `auth_cmds`, `auth_errors`).
    pub auth_cmds: AtomicU64,
    pub auth_errors: AtomicU64,
    /// Times accepting paused for want of file descriptors (memcached's name).
    pub listen_disabled_num: AtomicU64,
    /// Wall time of each worker event-loop phase, by DIDO task, summed over passes.
    pub tasks: TaskTimes,
}

/// Nanoseconds spent in RV, PP, the engine (MM, IN, KC, RD), WR and SD.
#[derive(Default)]
pub struct TaskTimes {
    pub rv: AtomicU64,
    pub pp: AtomicU64,
    pub engine: AtomicU64,
    pub wr: AtomicU64,
    pub sd: AtomicU64,
}

impl TaskTimes {
    pub(crate) fn add(counter: &AtomicU64, since: std::time::Instant) -> std::time::Instant {
        let now = std::time::Instant::now();
        counter.fetch_add(
            (now - since).as_nanos() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        now
    }
}
