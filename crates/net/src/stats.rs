//! Server-side counters; engine counters come from the engine.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;

#[derive(Default)]
pub struct ServerStats {
    pub curr_connections: AtomicUsize,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub cmd_get: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub cmd_touch: AtomicU64,
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

use std::io::Write;
use std::sync::atomic::Ordering;

use crate::respond::line;
use crate::Shared;

fn stat(out: &mut Vec<u8>, name: &str, v: impl std::fmt::Display) {
    let _ = write!(out, "STAT {name} {v}\r\n");
}

/// CPU seconds of this process (user, system), from /proc; zeros where unavailable.
fn rusage() -> (f64, f64) {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
    (tick(11), tick(12))
}

/// `stats [group]`, with memcached's names; `stats hkv` adds the engine's own figures.
pub(crate) fn write_stats(args: &[Vec<u8>], shared: &Shared, now: u32, out: &mut Vec<u8>) {
    let s = &shared.stats;
    let cfg = &shared.config;
    let group = args.first().map(|a| a.as_slice());
    match group {
        None => {
            let e = shared.engine.stats();
            let st = shared.engine.store_stats();
            let (user, sys) = rusage();
            stat(out, "pid", std::process::id());
            stat(out, "uptime", shared.started.elapsed().as_secs());
            stat(out, "time", now);
            stat(out, "version", crate::respond::VERSION);
            stat(out, "pointer_size", usize::BITS);
            stat(out, "rusage_user", format!("{user:.6}"));
            stat(out, "rusage_system", format!("{sys:.6}"));
            stat(out, "max_connections", cfg.max_connections);
            stat(
                out,
                "curr_connections",
                s.curr_connections.load(Ordering::Relaxed),
            );
            stat(
                out,
                "total_connections",
                s.total_connections.load(Ordering::Relaxed),
            );
            stat(
                out,
                "rejected_connections",
                s.rejected_connections.load(Ordering::Relaxed),
            );
            stat(out, "idle_kicks", s.idle_kicks.load(Ordering::Relaxed));
            stat(out, "cmd_get", e.get_hits + e.get_misses);
            stat(out, "cmd_set", e.cmd_set);
            stat(out, "cmd_flush", s.cmd_flush.load(Ordering::Relaxed));
            stat(out, "cmd_touch", e.cmd_touch);
            stat(out, "get_hits", e.get_hits);
            stat(out, "get_misses", e.get_misses);
            stat(out, "get_expired", e.expired_on_access);
            stat(out, "delete_misses", e.delete_misses);
            stat(out, "delete_hits", e.delete_hits);
            stat(out, "incr_misses", e.incr_misses);
            stat(out, "incr_hits", e.incr_hits);
            stat(out, "decr_misses", e.decr_misses);
            stat(out, "decr_hits", e.decr_hits);
            stat(out, "cas_misses", e.cas_misses);
            stat(out, "cas_hits", e.cas_hits);
            stat(out, "cas_badval", e.cas_badval);
            stat(out, "touch_hits", e.touch_hits);
            stat(out, "touch_misses", e.touch_misses);
            stat(out, "store_no_memory", st.out_of_memory);
            stat(out, "bytes_read", s.bytes_read.load(Ordering::Relaxed));
            stat(
                out,
                "bytes_written",
                s.bytes_written.load(Ordering::Relaxed),
            );
            stat(out, "limit_maxbytes", cfg.memory_limit);
            stat(out, "threads", cfg.threads);
            stat(out, "hash_bytes", shared.engine.index_bytes());
            stat(out, "bytes", st.bytes);
            stat(out, "curr_items", st.curr_items);
            stat(out, "total_items", st.total_items);
            stat(out, "evictions", shared.engine.evictions());
            stat(out, "reclaimed", st.reclaimed + e.expired_swept);
        }
        Some(b"settings") => {
            stat(out, "maxbytes", cfg.memory_limit);
            stat(out, "maxconns", cfg.max_connections);
            stat(out, "tcpport", cfg.listen.port());
            stat(out, "udpport", 0);
            stat(out, "interface", cfg.listen.ip());
            stat(out, "verbosity", cfg.verbose);
            stat(out, "num_threads", cfg.threads);
            stat(out, "growth_factor", format!("{:.2}", cfg.growth_factor));
            stat(out, "item_size_max", cfg.limits.max_item_size);
            stat(out, "evictions", "on");
            stat(out, "cas_enabled", "yes");
            stat(
                out,
                "shutdown_command",
                if cfg.enable_shutdown { "yes" } else { "no" },
            );
        }
        Some(b"items") => {
            for (i, c) in shared.engine.class_stats().iter().enumerate() {
                if c.items > 0 {
                    stat(out, &format!("items:{}:number", i + 1), c.items);
                    stat(out, &format!("items:{}:chunk_size", i + 1), c.info.chunk);
                }
            }
        }
        Some(b"slabs") => {
            let classes = shared.engine.class_stats();
            let mut active = 0;
            let mut malloced = 0;
            for (i, c) in classes.iter().enumerate() {
                if c.pages == 0 {
                    continue;
                }
                active += 1;
                let total = c.pages as u64 * c.info.per_page as u64;
                malloced += c.pages * shared.engine_page_size();
                let id = i + 1;
                stat(out, &format!("{id}:chunk_size"), c.info.chunk);
                stat(out, &format!("{id}:chunks_per_page"), c.info.per_page);
                stat(out, &format!("{id}:total_pages"), c.pages);
                stat(out, &format!("{id}:total_chunks"), total);
                stat(out, &format!("{id}:used_chunks"), c.items);
                stat(out, &format!("{id}:free_chunks"), total - c.items);
            }
            stat(out, "active_slabs", active);
            stat(out, "total_malloced", malloced);
        }
        Some(b"hkv") => {
            let e = shared.engine.stats();
            let batches = s.batches.load(Ordering::Relaxed);
            let reqs = s.batched_requests.load(Ordering::Relaxed);
            let backends = shared.engine.backends();
            stat(out, "engine", &backends[0]);
            stat(out, "engine_fallbacks", shared.engine.fallbacks());
            if let Some((batches, copy_ns, kernel_ns)) = shared.engine.device_timing() {
                stat(out, "device_batches", batches);
                stat(out, "device_copy_us", copy_ns / 1000);
                stat(out, "device_kernel_us", kernel_ns / 1000);
                let zc = shared.engine.device_zero_copy().unwrap_or(false);
                stat(out, "device_zero_copy", u8::from(zc));
            }
            stat(out, "partitions", shared.engine.partitions());
            stat(out, "batches", batches);
            stat(out, "batched_requests", reqs);
            stat(
                out,
                "avg_batch",
                format!("{:.2}", reqs as f64 / batches.max(1) as f64),
            );
            stat(out, "index_bytes", shared.engine.index_bytes());
            stat(out, "arena_used", shared.engine.arena().used());
            stat(out, "arena_limit", shared.engine.arena().limit());
            stat(out, "key_mismatches", e.key_mismatches);
            stat(out, "index_evictions", e.index_evictions);
            stat(out, "collision_evictions", e.collision_evictions);
            stat(out, "expired_on_access", e.expired_on_access);
            stat(out, "expired_swept", e.expired_swept);
            stat(out, "flushes", e.flushes);
            let sc = shared.engine.schedule_stats();
            let (lo, hi) = shared.engine.schedule_bounds();
            stat(out, "batch_interval_us", format!("{:.1}", sc.interval_us));
            stat(out, "batch_interval_min_us", format!("{lo:.1}"));
            stat(out, "batch_interval_max_us", format!("{hi:.1}"));
            let per = |n: u64| format!("{:.2}", n as f64 / sc.batches.max(1) as f64);
            stat(out, "avg_search_batch", per(sc.searches));
            stat(out, "avg_write_batch", per(sc.writes));
            stat(
                out,
                "fit_search_k_ns",
                format!("{:.2}", sc.k_search * 1000.0),
            );
            stat(
                out,
                "fit_search_b_ns",
                format!("{:.1}", sc.b_search * 1000.0),
            );
            stat(out, "fit_write_k_ns", format!("{:.2}", sc.k_write * 1000.0));
            stat(out, "fit_write_b_ns", format!("{:.1}", sc.b_write * 1000.0));
            stat(
                out,
                "arrival_per_s",
                format!("{:.0}", sc.arrival_per_us * 1e6),
            );
            stat(out, "get_share", format!("{:.3}", sc.get_share));
            stat(out, "pending_writes", shared.engine.pending_writes());
            stat(out, "forwarded_reads", e.forwarded_reads);
            stat(out, "deferred_reads", e.deferred_reads);
            stat(
                out,
                "worker_panics",
                s.worker_panics.load(Ordering::Relaxed),
            );
            stat(
                out,
                "conn_buffer_bytes",
                s.conn_buffer_bytes.load(Ordering::Relaxed),
            );
            stat(out, "conn_buffer_limit", shared.config.conn_buffer_limit);
            stat(
                out,
                "conn_buffer_throttled",
                s.conn_buffer_throttled.load(Ordering::Relaxed),
            );
            stat(out, "merged_writes", e.merged_writes);
            stat(out, "applied_writes", e.applied_writes);
            stat(out, "write_applies", e.write_applies);
            let t = &s.tasks;
            stat(out, "task_rv_ns", t.rv.load(Ordering::Relaxed));
            stat(out, "task_pp_ns", t.pp.load(Ordering::Relaxed));
            stat(out, "task_engine_ns", t.engine.load(Ordering::Relaxed));
            stat(out, "task_wr_ns", t.wr.load(Ordering::Relaxed));
            stat(out, "task_sd_ns", t.sd.load(Ordering::Relaxed));
        }
        Some(_) => {
            line(out, "ERROR");
            return;
        }
    }
    line(out, "END");
}
