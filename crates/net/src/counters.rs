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
    /// Writes refused as larger than -I before their data arrived (counted in
    /// `store_too_large` with the engine's).
    pub too_large_refused: AtomicU64,
    /// Passes that left a connection's requests for the next one after `-R` of them.
    pub conn_yields: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    /// UDP GSO sends (a run of reply datagrams to one peer in one send).
    pub udp_gso_sends: AtomicU64,
    /// UDP receives that carried several datagrams of one client coalesced (GRO).
    pub udp_gro_receives: AtomicU64,
    pub udp_stale_drops: AtomicU64,
    /// Connections whose end (or input) a peek found after their receive missed it.
    pub uring_missed_ends: AtomicU64,
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
    pub conn_buffer_refused: AtomicU64,
    /// Data blocks received straight into item memory rather than buffered (net/src/stage.rs).
    pub staged_values: AtomicU64,
    /// Bytes of the data blocks being received into item memory now (at most half of -m).
    pub staged_bytes: AtomicUsize,
    /// Provided receive buffers of the workers' io_uring rings: fixed per worker, outside
    /// `-m` and `conn_buffer_limit` (docs/network.md).
    pub ring_buffer_bytes: AtomicUsize,
    /// Workers running the io_uring loop (the rest run epoll).
    pub uring_workers: AtomicUsize,
    /// Connections a worker accepted on its own socket and passed to a worker with fewer
    /// (the kernel's split is a hash, not a turn: docs/network.md).
    pub accept_handoffs: AtomicU64,
    /// Connections closed for idling longer than `idle_timeout` (memcached's name).
    pub idle_kicks: AtomicU64,
    /// SASL commands and failed authentications (memcached's `auth_cmds`, `auth_errors`).
    pub auth_cmds: AtomicU64,
    pub auth_errors: AtomicU64,
    /// Times accepting paused for want of file descriptors (memcached's name).
    pub listen_disabled_num: AtomicU64,
    pub time_in_listen_disabled_us: AtomicU64,
    /// Wall time of each worker event-loop phase, by DIDO task, summed over passes.
    pub tasks: TaskTimes,
    /// How long requests took inside the server (see [`Latency`]).
    pub latency: Latency,
}

/// Upper bounds of the latency buckets, in microseconds (the last bucket is unbounded).
pub const LATENCY_BOUNDS_US: [u64; 16] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000,
];

/// Server-side request latency: for each pass of a worker, the time from the wake-up that
/// found the requests (before any batch-interval wait) until their replies were handed to
/// the kernel, counted once per request of the pass. It leaves out time in the client's and
/// the kernel's queues; it includes the batch interval C a request waited for.
#[derive(Default)]
pub struct Latency {
    pub buckets: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    pub count: AtomicU64,
    pub sum_ns: AtomicU64,
}

impl Latency {
    pub(crate) fn observe(&self, took: std::time::Duration, requests: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if requests == 0 {
            return;
        }
        let us = took.as_micros() as u64;
        let i = LATENCY_BOUNDS_US.partition_point(|&b| b < us);
        self.buckets[i].fetch_add(requests, Relaxed);
        self.count.fetch_add(requests, Relaxed);
        self.sum_ns
            .fetch_add(took.as_nanos() as u64 * requests, Relaxed);
    }

    /// The latency below which `q` of the requests so far fell (a bucket's upper bound, in
    /// microseconds); 0 before any request.
    pub(crate) fn quantile_us(&self, q: f64) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let total = self.count.load(Relaxed);
        if total == 0 {
            return 0;
        }
        let want = (total as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Relaxed);
            if seen >= want {
                return LATENCY_BOUNDS_US.get(i).copied().unwrap_or(u64::MAX);
            }
        }
        u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn latency_buckets_and_quantiles() {
        let l = Latency::default();
        l.observe(Duration::from_micros(5), 90);
        l.observe(Duration::from_micros(300), 9);
        l.observe(Duration::from_secs(3), 1);
        assert_eq!(l.quantile_us(0.5), 10);
        assert_eq!(l.quantile_us(0.95), 500);
        assert_eq!(l.quantile_us(1.0), u64::MAX);
        assert_eq!(l.count.load(std::sync::atomic::Ordering::Relaxed), 100);
    }
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

/// One worker pass in this many is timed: its DIDO task times (counted this many times)
/// and its latency. Timing a pass reads the clock six times, ~30 ns each on this VM, a
/// twentieth of a small pass's CPU; an untimed pass reads it once, when the worker wakes.
pub(crate) const TIME_EVERY: u64 = 8;

impl TaskTimes {
    /// Adds the time since `since` (a timed pass's clock; None: the pass is not timed) to
    /// `counter`, scaled to stand for the untimed passes; returns the clock read.
    pub(crate) fn add(
        counter: &AtomicU64,
        since: Option<std::time::Instant>,
    ) -> Option<std::time::Instant> {
        let since = since?;
        let now = std::time::Instant::now();
        counter.fetch_add(
            (now - since).as_nanos() as u64 * TIME_EVERY,
            std::sync::atomic::Ordering::Relaxed,
        );
        Some(now)
    }
}
