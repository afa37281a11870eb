//! Server-side counters (engine counters come from the engine), the registry that names
//! every stat once ([`registry`]), and its text and binary emitters.

mod registry;

pub(crate) use registry::{metadump, stats_reply, Baseline, StatsError, StatsReply};

use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;

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

use crate::respond::line;
use crate::Shared;

/// `stats [group]` as text: `STAT <name> <value>` lines and `END`, memcached's words for a
/// group it does not know.
pub(crate) fn write_stats(args: &[Vec<u8>], shared: &Shared, now: u32, out: &mut Vec<u8>) {
    match stats_reply(args, shared, now) {
        Ok(StatsReply::Pairs(pairs)) => {
            for (name, value) in pairs {
                out.extend_from_slice(b"STAT ");
                out.extend_from_slice(name.as_bytes());
                out.push(b' ');
                out.extend_from_slice(value.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            line(out, "END");
        }
        Ok(StatsReply::Reset) => line(out, "RESET"),
        Ok(StatsReply::Raw(text)) => out.extend_from_slice(&text),
        Err(StatsError::Unknown) => line(out, "ERROR"),
        Err(StatsError::BadFormat) => line(out, "CLIENT_ERROR bad command line format"),
        Err(StatsError::Line(l)) => line(out, l),
    }
}
