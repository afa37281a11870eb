//! Every stat hkv reports, defined once: its memcached name, whether it is a counter (reset
//! by `stats reset`), a gauge or a setting, its meaning, and how to read it. The text and
//! binary `stats` replies are both rendered from these tables (and a Prometheus endpoint
//! can be); docs/protocol.md lists what memcached reports that hkv does not, and why.

use std::sync::atomic::Ordering;

use hkv_engine::StoreStats;
use hkv_engine::{ClassReport, EngineStats, ScheduleStats};

use crate::counters::ServerStats;
use crate::shared::Shared;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Only goes up; `stats reset` starts it again from zero.
    Counter,
    /// A current level.
    Gauge,
    /// Configuration.
    Setting,
}

/// A stat's value as it is printed.
pub(crate) enum Val {
    U(u64),
    /// Seconds with memcached's six decimals (rusage).
    Secs(f64),
    /// A figure with two decimals.
    F2(f64),
    /// A figure with the given decimals.
    Fixed(f64, usize),
    S(String),
    Str(&'static str),
    /// Not reported here (a device figure without a device).
    Absent,
}

impl Val {
    pub(crate) fn render(&self) -> String {
        match self {
            Val::U(v) => v.to_string(),
            Val::Secs(v) => format!("{v:.6}"),
            Val::F2(v) => format!("{v:.2}"),
            Val::Fixed(v, d) => format!("{v:.d$}"),
            Val::Absent => String::new(),
            Val::S(s) => s.clone(),
            Val::Str(s) => (*s).to_string(),
        }
    }
}

/// What one `stats` call reads, taken once.
pub(crate) struct Snap<'a> {
    pub shared: &'a Shared,
    pub e: EngineStats,
    pub st: StoreStats,
    pub sc: ScheduleStats,
    pub pf: hkv_engine::ProfileReport,
    pub pl: hkv_engine::PlacementReport,
    /// The index figures of every partition, summed once: the `index_*` stats of one call
    /// come from one reading.
    pub ix: hkv_engine::IndexReport,
    pub now: u32,
    /// `rusage()`, read once for both figures.
    pub cpu: (f64, f64),
}

impl Snap<'_> {
    /// A figure that exists only with an OpenCL device.
    fn device(&self, f: impl FnOnce() -> Val) -> Val {
        if self.shared.engine.device_zero_copy().is_some() {
            f()
        } else {
            Val::Absent
        }
    }

    fn server(&self, f: impl Fn(&ServerStats) -> u64) -> Val {
        Val::U(f(&self.shared.stats))
    }
}

pub(crate) struct Def {
    pub name: &'static str,
    pub kind: Kind,
    /// The meaning, for people and for the metrics endpoint's HELP lines.
    pub help: &'static str,
    pub get: fn(&Snap) -> Val,
}

macro_rules! defs {
    ($( $name:literal, $kind:ident, $help:literal, $get:expr; )*) => {
        &[ $( Def { name: $name, kind: Kind::$kind, help: $help, get: $get }, )* ]
    };
}

fn load(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// CPU seconds of this process (user, system), as memcached reads them: one `getrusage`.
/// Reading /proc/self/stat instead cost a `stats` call half its CPU (an open, a read that
/// walks every thread, and parsing), which let clients looping `stats` on fresh
/// connections outrun the workers (scripts/hostile-stats-churn.py).
pub(crate) fn rusage() -> (f64, f64) {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) else {
        return (0.0, 0.0);
    };
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    (secs(u.user_time()), secs(u.system_time()))
}

/// `stats`, in memcached 1.6's order.
pub(crate) static GENERAL: &[Def] = defs![
    "pid", Gauge, "process id", |_| Val::U(u64::from(std::process::id()));
    "uptime", Gauge, "seconds since the server started", |s| Val::U(s.shared.started.elapsed().as_secs());
    "time", Gauge, "current Unix time", |s| Val::U(u64::from(s.now));
    "version", Setting, "server version", |_| Val::Str(hkv_proto::reply::VERSION);
    "pointer_size", Setting, "bits in a pointer", |_| Val::U(u64::from(usize::BITS));
    "rusage_user", Counter, "user CPU seconds", |s| Val::Secs(s.cpu.0);
    "rusage_system", Counter, "system CPU seconds", |s| Val::Secs(s.cpu.1);
    "max_connections", Setting, "-c", |s| Val::U(s.shared.config.max_connections as u64);
    "curr_connections", Gauge, "open client connections", |s| Val::U(s.shared.stats.curr_connections.load(Ordering::Relaxed) as u64);
    "total_connections", Counter, "connections accepted", |s| s.server(|v| load(&v.total_connections));
    "rejected_connections", Counter, "connections refused at -c", |s| s.server(|v| load(&v.rejected_connections));
    "conn_yields", Counter, "passes that left a connection's requests for the next after -R of them", |s| s.server(|v| load(&v.conn_yields));
    "idle_kicks", Counter, "connections closed by -o idle_timeout", |s| s.server(|v| load(&v.idle_kicks));
    "connection_structures", Gauge, "connection states allocated", |s| Val::U(s.shared.stats.curr_connections.load(Ordering::Relaxed) as u64);
    "cmd_get", Counter, "keys asked for by get, gets, mg (a hit with T is a touch) and binary gets", |s| Val::U(s.e.get_hits + s.e.get_misses);
    "cmd_set", Counter, "storage commands run", |s| Val::U(s.e.cmd_set);
    "cmd_flush", Counter, "flush_all commands", |s| s.server(|v| load(&v.cmd_flush));
    "cmd_touch", Counter, "keys touched by touch, gat, gats, binary TOUCH and GAT, and mg hits with T", |s| Val::U(s.e.cmd_touch);
    "cmd_meta", Counter, "me commands (memcached counts no other meta command here)", |s| s.server(|v| load(&v.cmd_meta));
    "get_hits", Counter, "keys found", |s| Val::U(s.e.get_hits);
    "get_misses", Counter, "keys not found", |s| Val::U(s.e.get_misses);
    "get_expired", Counter, "keys found expired", |s| Val::U(s.e.expired_on_access);
    "get_flushed", Counter, "keys found flushed (flush_all empties at once: always 0)", |_| Val::U(0);
    "delete_misses", Counter, "deletes of missing keys", |s| Val::U(s.e.delete_misses);
    "delete_hits", Counter, "deletes that removed an item", |s| Val::U(s.e.delete_hits);
    "incr_misses", Counter, "incr of missing keys", |s| Val::U(s.e.incr_misses);
    "incr_hits", Counter, "incr that changed an item", |s| Val::U(s.e.incr_hits);
    "decr_misses", Counter, "decr of missing keys", |s| Val::U(s.e.decr_misses);
    "decr_hits", Counter, "decr that changed an item", |s| Val::U(s.e.decr_hits);
    "cas_misses", Counter, "cas of missing keys", |s| Val::U(s.e.cas_misses);
    "cas_hits", Counter, "cas that stored", |s| Val::U(s.e.cas_hits);
    "cas_badval", Counter, "cas refused for a changed CAS", |s| Val::U(s.e.cas_badval);
    "touch_hits", Counter, "touches that found the item", |s| Val::U(s.e.touch_hits);
    "touch_misses", Counter, "touches of missing keys", |s| Val::U(s.e.touch_misses);
    "store_too_large", Counter, "writes refused as larger than -I", |s| Val::U(s.e.too_large + load(&s.shared.stats.too_large_refused));
    "store_no_memory", Counter, "writes refused for want of memory", |s| Val::U(s.st.out_of_memory);
    "auth_cmds", Counter, "SASL commands", |s| s.server(|v| load(&v.auth_cmds));
    "auth_errors", Counter, "failed SASL commands", |s| s.server(|v| load(&v.auth_errors));
    "bytes_read", Counter, "bytes received from clients", |s| s.server(|v| load(&v.bytes_read));
    "bytes_written", Counter, "bytes sent to clients", |s| s.server(|v| load(&v.bytes_written));
    "limit_maxbytes", Setting, "-m in bytes (cache_memlimit moves it)", |s| Val::U(s.shared.engine.arena().limit() as u64);
    "accepting_conns", Gauge, "1 while the listener accepts", |_| Val::U(1);
    "listen_disabled_num", Counter, "times accepting paused (out of file descriptors)", |s| s.server(|v| load(&v.listen_disabled_num));
    "time_in_listen_disabled_us", Counter, "microseconds accepting was paused", |s| s.server(|v| load(&v.time_in_listen_disabled_us));
    "ssl_handshake_errors", Counter, "TLS handshakes that failed (-Z)", |s| s.shared.config.tls.as_ref().map_or(Val::Absent, |t| Val::U(load(&t.handshake_errors)));
    "ssl_proto_errors", Counter, "fatal TLS errors after the handshake (-Z)", |s| s.shared.config.tls.as_ref().map_or(Val::Absent, |t| Val::U(load(&t.proto_errors)));
    "time_since_server_cert_refresh", Gauge, "seconds since the certificate was loaded (-Z)", |s| s.shared.config.tls.as_ref().map_or(Val::Absent, |t| Val::U(t.since_refresh()));
    "threads", Setting, "-t", |s| Val::U(s.shared.config.threads as u64);
    "hash_power_level", Gauge, "log2 of the index slots (8 bytes each)", |s| Val::U(u64::from((s.shared.engine.index_bytes() / 8).max(1).ilog2()));
    "hash_bytes", Gauge, "bytes of the index", |s| Val::U(s.shared.engine.index_bytes() as u64);
    "hash_is_expanding", Gauge, "always 0: a partition's table doubles in one step, between batches (index_grows)", |_| Val::U(0);
    "slab_reassign_busy_items", Counter, "items a page move found in use (moves wait for none)", |_| Val::U(0);
    "slab_reassign_running", Gauge, "a page move in progress (they run inline)", |_| Val::U(0);
    "slabs_moved", Counter, "pages moved between slab classes", |s| Val::U(s.st.pages_moved);
    "lru_crawler_running", Gauge, "a crawl asked for with lru_crawler crawl is still running (1) or not (0)", |s| Val::U(u64::from(s.shared.engine.crawling()));
    "lru_crawler_starts", Counter, "lru_crawler crawl requests run", |s| Val::U(s.shared.engine.crawler().starts);
    "slab_reassign_evictions", Counter, "items evicted to move their page", |s| Val::U(s.st.page_move_evictions);
    "bytes", Gauge, "bytes of the items stored: 32-byte header, key and value (memcached counts its item header too)", |s| Val::U(s.st.bytes);
    "curr_items", Gauge, "items stored", |s| Val::U(s.st.curr_items);
    "total_items", Counter, "items ever stored", |s| Val::U(s.st.total_items);
    "slab_global_page_pool", Gauge, "pages not yet given to a class", |s| Val::U((s.shared.engine.arena().available() / s.shared.config.page_size.max(1)) as u64);
    "expired_unfetched", Counter, "expired items never read", |s| Val::U(s.st.expired_unfetched);
    "evicted_unfetched", Counter, "evicted items never read", |s| Val::U(s.st.evicted_unfetched);
    "lrutail_reflocked", Counter, "eviction candidates passed over because a send still read them", |s| Val::U(s.st.pinned_skips);
    "evictions", Counter, "live items evicted for memory", |s| Val::U(s.shared.engine.evictions());
    "reclaimed", Counter, "expired items whose memory was reused (the sweep's are crawler_reclaimed)", |s| Val::U(s.st.reclaimed.saturating_sub(s.e.expired_swept));
    "crawler_reclaimed", Counter, "expired items freed by the expiry sweep and crawls", |s| Val::U(s.e.expired_swept);
    "crawler_items_checked", Counter, "chunks the expiry sweep and crawls examined", |s| Val::U(s.st.crawler_checked);
    "log_watcher_skipped", Counter, "watch lines not sent to watchers too slow to take them", |s| Val::U(s.shared.engine.watch().skipped());
    "log_watcher_sent", Counter, "watch lines written to watchers", |s| Val::U(s.shared.engine.watch().sent());
    "log_watchers", Gauge, "connections in watch mode", |s| Val::U(s.shared.engine.watch().watchers() as u64);
];

/// `stats settings`.
pub(crate) static SETTINGS: &[Def] = defs![
    "maxbytes", Setting, "-m in bytes", |s| Val::U(s.shared.engine.arena().limit() as u64);
    "maxconns", Setting, "-c", |s| Val::U(s.shared.config.max_connections as u64);
    "tcpport", Setting, "-p", |s| Val::U(u64::from(s.shared.config.listen.port()));
    "udpport", Setting, "-U", |s| Val::U(u64::from(s.shared.config.udp_listen.map_or(0, |a| a.port())));
    "inter", Setting, "-l", |s| Val::S(s.shared.config.listen.ip().to_string());
    "verbosity", Setting, "-v", |s| Val::U(u64::from(s.shared.verbosity.load(Ordering::Relaxed)));
    "evictions", Setting, "evict when full (-M: off)", |s| Val::Str(if s.shared.engine.evictions_enabled() { "on" } else { "off" });
    "domain_socket", Setting, "-s", |s| Val::S(s.shared.config.unix_socket.as_ref().map_or("NULL".into(), |p| p.display().to_string()));
    "shutdown_command", Setting, "-A", |s| Val::Str(if s.shared.config.enable_shutdown { "yes" } else { "no" });
    "growth_factor", Setting, "-f", |s| Val::F2(s.shared.config.growth_factor);
    "chunk_size", Setting, "key and value bytes of the smallest chunk", |_| Val::U((hkv_engine::chunk_sizes(1.25, 1 << 20)[0] - hkv_engine::ITEM_HEADER_BYTES) as u64);
    "num_threads", Setting, "-t", |s| Val::U(s.shared.config.threads as u64);
    "num_threads_per_udp", Setting, "workers reading the UDP socket", |s| Val::U(s.shared.config.threads as u64);
    "stat_key_prefix", Setting, "the prefix delimiter of stats detail (fixed)", |_| Val::Str(":");
    "detail_enabled", Setting, "stats detail on|off", |s| Val::Str(if s.shared.detail.enabled() { "yes" } else { "no" });
    "reqs_per_event", Setting, "requests taken from one connection per pass", |s| Val::U(s.shared.config.reqs_per_event as u64);
    "cas_enabled", Setting, "-C: off", |s| Val::Str(if s.shared.engine.cas_enabled() { "yes" } else { "no" });
    "binding_protocol", Setting, "-B: the protocol connections speak, or auto-negotiate (by the first byte)", |s| Val::Str(match s.shared.config.binding {
        None => "auto-negotiate",
        Some(crate::config::Binding::Ascii) => "ascii",
        Some(crate::config::Binding::Binary) => "binary",
    });
    "auth_enabled_sasl", Setting, "-S", |s| Val::Str(if s.shared.config.sasl.is_some() { "yes" } else { "no" });
    "auth_enabled_ascii", Setting, "-Y", |s| Val::Str(if s.shared.config.authfile.is_some() { "yes" } else { "no" });
    "item_size_max", Setting, "-I", |s| Val::U(s.shared.config.limits.max_item_size as u64);
    "accept_mode", Setting, "--accept: workers (each worker accepts on its own SO_REUSEPORT socket) or acceptor (one thread hands connections over)", |s| Val::Str(if s.shared.accept_workers { "workers" } else { "acceptor" });
    "tcp_backlog", Setting, "-b: listen backlog", |s| Val::U(u64::try_from(s.shared.config.backlog).unwrap_or(0));
    "maxconns_fast", Setting, "connections over -c are refused at once", |_| Val::Str("yes");
    "hashpower_init", Setting, "-o hashpower as given (0: sized from -m), as memcached reports it", |s| Val::U(u64::from(s.shared.config.hashpower_init));
    "slab_reassign", Setting, "pages move between classes", |_| Val::Str("yes");
    "lru_crawler", Setting, "the expiry sweep runs (lru_crawler enable|disable)", |s| Val::Str(if s.shared.engine.crawler().enabled { "yes" } else { "no" });
    "lru_crawler_sleep", Setting, "lru_crawler sleep (recorded; crawls do not pause)", |s| Val::U(u64::from(s.shared.engine.crawler().sleep_us));
    "lru_crawler_tocrawl", Setting, "chunks examined per class per crawl (0: all)", |s| Val::U(u64::from(s.shared.engine.crawler().tocrawl));
    "watcher_logbuf_size", Setting, "bytes of watch lines kept per watcher", |_| Val::U(hkv_engine::watch::WATCHER_BUFFER as u64);
    "slab_automove", Setting, "pages move between classes by need and by age (slabs automove)", |s| Val::U(u64::from(s.shared.engine.automove()));
    "slab_automove_ratio", Setting, "a page moves when the evicting class's victims are younger than this share of the donor's oldest items", |_| Val::F2(hkv_engine::SLAB_AUTOMOVE_RATIO);
    "slab_automove_window", Setting, "seconds of eviction history automove weighs", |_| Val::U(hkv_engine::SLAB_AUTOMOVE_WINDOW as u64);
    "slab_chunk_max", Setting, "largest chunk (one per page)", |s| Val::U(s.shared.config.page_size as u64);
    "hash_algorithm", Setting, "key hash", |_| Val::Str("xxh3");
    "flush_enabled", Setting, "flush_all is allowed (-F refuses it)", |s| Val::Str(if s.shared.config.disable_flush_all { "no" } else { "yes" });
    "dump_enabled", Setting, "cachedump and metadump are allowed (-X turns them off)", |s| Val::Str(if s.shared.config.disable_dumping { "no" } else { "yes" });
    "idle_timeout", Setting, "-o idle_timeout", |s| Val::U(s.shared.config.idle_timeout.map_or(0, |d| d.as_secs()));
    "read_buf_mem_limit", Setting, "--conn-buffer-mb in bytes: all connections' buffers together", |s| Val::U(s.shared.config.conn_buffer_limit as u64);
    "track_sizes", Setting, "stats sizes (not tracked)", |_| Val::Str("no");
    "inline_ascii_response", Setting, "memcached 1.6 default", |_| Val::Str("no");
    "memory_file", Setting, "-e: the warm-restart memory file", |s| Val::S(s.shared.engine.memory_file().map_or("(null)".into(), |p| p.display().to_string()));
    "ssl_enabled", Setting, "-Z", |s| Val::Str(if s.shared.config.tls.is_some() { "yes" } else { "no" });
    "ssl_chain_cert", Setting, "-o ssl_chain_cert", |s| Val::S(s.shared.config.tls.as_ref().map_or("(null)".into(), |t| t.settings().chain_cert.display().to_string()));
    "ssl_key", Setting, "-o ssl_key (null: in the chain file, or no TLS)", |s| Val::S(s.shared.config.tls.as_ref().and_then(|t| t.settings().key.as_ref()).map_or("(null)".into(), |k| k.display().to_string()));
    "ssl_verify_mode", Setting, "-o ssl_verify_mode", |s| Val::U(s.shared.config.tls.as_ref().map_or(0, |t| u64::from(t.settings().verify_mode.number())));
    "ssl_keyformat", Setting, "key format: 1, PEM (the only one read)", |_| Val::U(1);
    "ssl_ciphers", Setting, "-o ssl_ciphers (not used: rustls offers its safe suites)", |_| Val::Str("NULL");
    "ssl_ca_cert", Setting, "-o ssl_ca_cert", |s| Val::S(s.shared.config.tls.as_ref().and_then(|t| t.settings().ca_cert.as_ref()).map_or("NULL".into(), |k| k.display().to_string()));
    "ssl_wbuf_size", Setting, "-o ssl_wbuf_size in bytes", |s| Val::U(s.shared.config.tls.as_ref().map_or(16 << 10, |t| t.settings().wbuf_bytes as u64));
    "ssl_session_cache", Setting, "TLS sessions resumed from rustls's own cache", |s| Val::Str(if s.shared.config.tls.is_some() { "yes" } else { "no" });
    "ssl_kernel_tls", Setting, "kernel TLS offload (not used)", |_| Val::Str("no");
    "ssl_min_version", Setting, "-o ssl_min_version", |s| Val::Str(if s.shared.config.tls.as_ref().is_some_and(|t| t.settings().tls13_only) { "tlsv1.3" } else { "tlsv1.2" });
];

/// `stats hkv`: the engine's own figures.
/// `stats hkv` (also the `hkv_*` metrics of the admin endpoint).
pub(crate) static HKV_DEFS: &[Def] = defs![
    "hkv_version", Setting, "hkv's own version (`version` answers memcached's)", |_| Val::Str(hkv_proto::reply::HKV_VERSION);
    "engine", Setting, "index backend of partition 0", |s| Val::S(s.shared.engine.backends().swap_remove(0));
    "engine_fallbacks", Counter, "device failures survived on the CPU", |s| Val::U(s.shared.engine.fallbacks());
    "device_batches", Counter, "search batches run on the device", |s| s.shared.engine.device_timing().map_or(Val::Absent, |t| Val::U(t.0));
    "device_copy_us", Counter, "device time copying (profiling events)", |s| s.shared.engine.device_timing().map_or(Val::Absent, |t| Val::U(t.1 / 1000));
    "device_kernel_us", Counter, "device time in kernels (profiling events)", |s| s.shared.engine.device_timing().map_or(Val::Absent, |t| Val::U(t.2 / 1000));
    "device_zero_copy", Setting, "1 if the device reads search inputs in place", |s| s.shared.engine.device_zero_copy().map_or(Val::Absent, |z| Val::U(u64::from(z)));
    "partitions", Setting, "engine partitions", |s| Val::U(s.shared.engine.partitions() as u64);
    "batches", Counter, "engine batches", |s| s.server(|v| load(&v.batches));
    "batched_requests", Counter, "requests in those batches", |s| s.server(|v| load(&v.batched_requests));
    "avg_batch", Gauge, "requests per batch", |s| Val::F2(load(&s.shared.stats.batched_requests) as f64 / load(&s.shared.stats.batches).max(1) as f64);
    "index_bytes", Gauge, "bytes of the index", |s| Val::U(s.shared.engine.index_bytes() as u64);
    "arena_used", Gauge, "bytes of item memory handed out", |s| Val::U(s.shared.engine.arena().used() as u64);
    "arena_limit", Gauge, "item memory budget", |s| Val::U(s.shared.engine.arena().limit() as u64);
    "udp_gso_sends", Counter, "UDP sends that carried a run of reply datagrams to one client (GSO)", |s| s.server(|v| load(&v.udp_gso_sends));
    "udp_gro_receives", Counter, "UDP receives that carried a run of one client's datagrams coalesced (GRO)", |s| s.server(|v| load(&v.udp_gro_receives));
    "udp_stale_drops", Counter, "UDP requests dropped unanswered: they waited past --udp-max-wait-ms in the receive queue", |s| s.server(|v| load(&v.udp_stale_drops));
    "udp_max_wait_ms", Setting, "--udp-max-wait-ms (0: UDP requests are answered however long they waited)", |s| Val::U(s.shared.config.udp_max_wait.as_millis() as u64);
    "uring_missed_ends", Counter, "io_uring connections whose end or input a receive missed and a peek found", |s| s.server(|v| load(&v.uring_missed_ends));
    "zero_copy_values", Counter, "hits sent from item memory without a copy (--zero-copy-min)", |s| Val::U(s.e.zero_copy_values);
    "pinned_items", Gauge, "items whose chunk a send is reading now", |s| Val::U(s.st.pinned_chunks);
    "pinned_bytes", Gauge, "value bytes of those items", |s| Val::U(s.st.pinned_bytes);
    "key_mismatches", Counter, "signature matches with another key", |s| Val::U(s.e.key_mismatches);
    "hot_cache_bytes", Setting, "--hot-cache-mb in bytes: item bytes the hot set may cover (0: no hot/cold split)", |s| Val::U(s.shared.config.hot.as_ref().map_or(0, |r| r.budget()));
    "hot_bins", Gauge, "hash bins (of 10000) the router holds hot now", |s| s.shared.config.hot.as_ref().map_or(Val::Absent, |r| Val::U(r.current().bins as u64));
    "hot_gets", Counter, "reads of hot keys answered without waiting for the batch interval", |s| s.shared.config.hot.as_ref().map_or(Val::Absent, |r| Val::U(load(&r.hot_gets)));
    "hot_passes", Counter, "hot-path runs that answered at least one read", |s| s.shared.config.hot.as_ref().map_or(Val::Absent, |r| Val::U(load(&r.express_passes)));
    "router_epochs", Counter, "times the router swapped in a changed hot set", |s| s.shared.config.hot.as_ref().map_or(Val::Absent, |r| Val::U(load(&r.epochs)));
    "index_load", Gauge, "index entries over slots", |s| Val::Fixed(s.ix.entries as f64 / s.ix.slots.max(1) as f64, 3);
    "index_slots", Gauge, "index slots over all partitions (tables double past 0.85 load while memory allows)", |s| Val::U(s.ix.slots);
    "index_grows", Counter, "times an index table doubled", |s| Val::U(s.ix.grows);
    "index_displacements", Counter, "entries moved by cuckoo displacement walks", |s| Val::U(s.ix.displacements);
    "index_walks", Counter, "inserts that needed a displacement walk", |s| Val::U(s.ix.walks);
    "index_longest_walk", Gauge, "entries moved by the longest walk (CPU tables)", |s| Val::U(s.ix.longest_walk);
    "index_capped_partitions", Gauge, "partitions where memory is too full to grow the index: new items replace CLOCK victims", |s| Val::U(s.ix.capped);
    "index_evictions", Counter, "items dropped at the displacement bound", |s| Val::U(s.e.index_evictions);
    "collision_evictions", Counter, "items whose slot a same-signature key took", |s| Val::U(s.e.collision_evictions);
    "expired_on_access", Counter, "items found expired and removed", |s| Val::U(s.e.expired_on_access);
    "expired_swept", Counter, "items removed by the expiry sweep", |s| Val::U(s.e.expired_swept);
    "flushes", Counter, "flush_all runs", |s| Val::U(s.e.flushes);
    "latency_p50_us", Gauge, "server-side request latency, median since start (bucket bound, us)", |s| Val::U(s.shared.stats.latency.quantile_us(0.5));
    "latency_p99_us", Gauge, "server-side request latency, 99th percentile since start (bucket bound, us)", |s| Val::U(s.shared.stats.latency.quantile_us(0.99));
    "vector_hits", Counter, "vector operations that found their key (vupdate, vupdatev, vreduce, vfilter)", |s| Val::U(s.e.vector_hits);
    "vector_misses", Counter, "vector operations on missing keys", |s| Val::U(s.e.vector_misses);
    "vector_placement", Setting, "where vector updates run (--vector-placement)", |s| Val::Str(s.shared.engine.vector_placement().0.name());
    "vector_device_min_bytes", Gauge, "under auto: the value size from which the cost model sends vector updates to the device now (absent: never)", |s| s.shared.engine.vector_placement().1.map_or(Val::Absent, |b| Val::U(b as u64));
    "vector_device_ops", Counter, "vector updates run as OpenCL kernels", |s| Val::U(s.e.vector_device_ops);
    "vector_device_errors", Counter, "vector kernels that failed (the CPU ran them)", |s| Val::U(s.e.vector_device_errors);
    "items_device_errors", Counter, "KC/RD kernels that failed (the CPU runs KC and RD from then on)", |s| Val::U(s.e.items_device_errors);
    "batch_interval_us", Gauge, "the scheduler's batch interval C", |s| Val::Fixed(s.sc.interval_us, 1);
    "batch_interval_min_us", Setting, "lower bound of C (--batch-interval-us)", |s| Val::Fixed(s.shared.engine.schedule_bounds().0, 1);
    "batch_interval_max_us", Setting, "upper bound of C (--batch-interval-us)", |s| Val::Fixed(s.shared.engine.schedule_bounds().1, 1);
    "avg_search_batch", Gauge, "searches per engine batch", |s| Val::F2(s.sc.searches as f64 / s.sc.batches.max(1) as f64);
    "avg_write_batch", Gauge, "writes per engine batch", |s| Val::F2(s.sc.writes as f64 / s.sc.batches.max(1) as f64);
    "fit_search_k_ns", Gauge, "fitted search cost per operation", |s| Val::F2(s.sc.k_search * 1000.0);
    "fit_search_b_ns", Gauge, "fitted search cost per batch", |s| Val::Fixed(s.sc.b_search * 1000.0, 1);
    "fit_write_k_ns", Gauge, "fitted write cost per operation", |s| Val::F2(s.sc.k_write * 1000.0);
    "fit_write_b_ns", Gauge, "fitted write cost per batch", |s| Val::Fixed(s.sc.b_write * 1000.0, 1);
    "arrival_per_s", Gauge, "requests per second reaching the engine", |s| Val::Fixed(s.sc.arrival_per_us * 1e6, 0);
    "get_share", Gauge, "share of those that are reads", |s| Val::Fixed(s.sc.get_share, 3);
    "profile_get_share", Gauge, "workload profile (sliding window): share of GETs", |s| Val::Fixed(s.pf.get_share, 3);
    "profile_set_share", Gauge, "share of storage commands", |s| Val::Fixed(s.pf.set_share, 3);
    "profile_delete_share", Gauge, "share of deletes", |s| Val::Fixed(s.pf.delete_share, 3);
    "profile_key_bytes", Gauge, "average key size", |s| Val::Fixed(s.pf.avg_key_bytes, 1);
    "profile_value_bytes", Gauge, "average value size stored", |s| Val::Fixed(s.pf.avg_value_bytes, 1);
    "profile_batch", Gauge, "average requests per partition batch", |s| Val::Fixed(s.pf.avg_batch, 1);
    "profile_top_key_share", Gauge, "skew: share of requests to the 8 most requested keys per partition (sampled)", |s| Val::Fixed(s.pf.top_key_share, 3);
    "placement", Setting, "where index tasks run (--placement; applies where the device shares the CPU table)", |s| s.device(|| Val::S(s.shared.engine.placement().0.to_string()));
    "placement_current", Gauge, "where auto puts search, insert, delete, KC and RD now (first partition, at each task's mean batch size)", |s| s.device(|| Val::S(s.pl.current_placement().to_string()));
    "placement_shared_table", Gauge, "1: the device works on the CPU's own index table, so every index task can be placed", |s| s.device(|| Val::U(s.shared.engine.placement().1 as u64));
    "placement_table", Setting, "the device's table: shared (the CPU's own, every task placed), mirror (a copy the CPU keeps up to date, searches placed: a discrete GPU), own (the device runs every index task)", |s| s.device(|| Val::S(s.shared.engine.device_table().name().to_string()));
    "placement_mirror_bytes", Counter, "bytes of the CPU's index table copied to a device that searches a mirror of it", |s| s.device(|| Val::U(s.pl.mirror_bytes));
    "placement_search_cpu_batches", Counter, "search batches run on the cpu", |s| s.device(|| Val::U(s.pl.batches[0][0]));
    "placement_search_device_batches", Counter, "search batches run on the device", |s| s.device(|| Val::U(s.pl.batches[0][1]));
    "placement_insert_cpu_batches", Counter, "insert batches run on the cpu", |s| s.device(|| Val::U(s.pl.batches[1][0]));
    "placement_insert_device_batches", Counter, "insert batches run on the device", |s| s.device(|| Val::U(s.pl.batches[1][1]));
    "placement_delete_cpu_batches", Counter, "delete batches run on the cpu", |s| s.device(|| Val::U(s.pl.batches[2][0]));
    "placement_delete_device_batches", Counter, "delete batches run on the device", |s| s.device(|| Val::U(s.pl.batches[2][1]));
    "placement_search_cpu_ns_per_query", Gauge, "cost model: search on the cpu, ns per query in a batch of 64", |s| s.device(|| Val::F2(s.pl.per_query_ns_at_64[0][0]));
    "placement_search_device_ns_per_query", Gauge, "cost model: search on the device, ns per query in a batch of 64", |s| s.device(|| Val::F2(s.pl.per_query_ns_at_64[0][1]));
    "placement_insert_cpu_ns_per_query", Gauge, "cost model: insert on the cpu, ns per query in a batch of 64", |s| s.device(|| Val::F2(s.pl.per_query_ns_at_64[1][0]));
    "placement_insert_device_ns_per_query", Gauge, "cost model: insert on the device, ns per query in a batch of 64", |s| s.device(|| Val::F2(s.pl.per_query_ns_at_64[1][1]));
    "placement_delete_cpu_ns_per_query", Gauge, "cost model: delete on the cpu, ns per query in a batch of 64", |s| s.device(|| Val::F2(s.pl.per_query_ns_at_64[2][0]));
    "placement_delete_device_ns_per_query", Gauge, "cost model: delete on the device, ns per query in a batch of 64", |s| s.device(|| Val::F2(s.pl.per_query_ns_at_64[2][1]));
    "placement_kc_cpu_batches", Counter, "KC groups run on the cpu", |s| s.device(|| Val::U(s.pl.batches[3][0]));
    "placement_kc_device_batches", Counter, "KC groups run on the device (items.cl, where it shares host memory)", |s| s.device(|| Val::U(s.pl.batches[3][1]));
    "placement_rd_cpu_batches", Counter, "RD groups run on the cpu", |s| s.device(|| Val::U(s.pl.batches[4][0]));
    "placement_rd_device_batches", Counter, "RD groups run on the device", |s| s.device(|| Val::U(s.pl.batches[4][1]));
    "placement_kc_cpu_ns_per_query", Gauge, "cost model: KC on the cpu, ns per read in a group of 64", |s| s.device(|| Val::F2(s.pl.per_query_ns_at_64[3][0]));
    "placement_kc_device_ns_per_query", Gauge, "cost model: KC on the device, ns per read in a group of 64", |s| s.device(|| Val::F2(s.pl.per_query_ns_at_64[3][1]));
    "placement_rd_cpu_ns_per_query", Gauge, "cost model: RD on the cpu, ns per read in a group of 64", |s| s.device(|| Val::F2(s.pl.per_query_ns_at_64[4][0]));
    "placement_rd_device_ns_per_query", Gauge, "cost model: RD on the device, ns per read in a group of 64", |s| s.device(|| Val::F2(s.pl.per_query_ns_at_64[4][1]));
    "placement_steals", Gauge, "1: device-placed searches are shared with the partition's thread in 64-query chunks (work stealing)", |s| s.device(|| Val::U(s.shared.engine.steals() as u64));
    "placement_chunks_host", Counter, "chunks of device-placed searches the partition's thread took", |s| s.device(|| Val::U(s.pl.chunks_host));
    "placement_chunks_device", Counter, "chunks of device-placed searches the device did", |s| s.device(|| Val::U(s.pl.chunks_device));
    "placement_splits", Counter, "device-placed searches split with the partition's thread (load dispatch: no work stealing on this device)", |s| s.device(|| Val::U(s.pl.splits));
    "placement_dispatch_ratio", Gauge, "the device's share of the queries of split searches, following both sides' measured rates", |s| s.device(|| Val::Fixed(if s.pl.split_queries > 0 { s.pl.split_device_queries as f64 / s.pl.split_queries as f64 } else { 0.0 }, 3));
    "placement_predicted_us", Counter, "cost model: predicted time of the placed index batches", |s| s.device(|| Val::U((s.pl.predicted_ns / 1000.0) as u64));
    "placement_measured_us", Counter, "measured time of those batches", |s| s.device(|| Val::U((s.pl.measured_ns / 1000.0) as u64));
    "placement_model_error", Gauge, "cost model: mean |predicted - measured| / measured over placed batches", |s| s.device(|| Val::Fixed(s.pl.model_error(), 3));
    "placement_device_aftermath", Gauge, "cost model: cpu time a device call takes from the rest of its batch, as a share of its own", |s| s.device(|| Val::Fixed(s.pl.device_aftermath, 3));
    "pending_writes", Gauge, "index writes waiting in the same-key table", |s| Val::U(s.shared.engine.pending_writes() as u64);
    "forwarded_reads", Counter, "reads answered from the same-key table", |s| Val::U(s.e.forwarded_reads);
    "deferred_reads", Counter, "reads moved to a later pass by the value budget", |s| Val::U(s.e.deferred_reads);
    "merged_writes", Counter, "writes merged into a waiting one", |s| Val::U(s.e.merged_writes);
    "in_place_writes", Counter, "writes stored over their key's live item in its own chunk", |s| Val::U(s.e.in_place_writes);
    "applied_writes", Counter, "index writes applied", |s| Val::U(s.e.applied_writes);
    "write_applies", Counter, "batches of applied index writes", |s| Val::U(s.e.write_applies);
    "worker_panics", Counter, "workers retired after a panic", |s| s.server(|v| load(&v.worker_panics));
    "conn_buffer_bytes", Gauge, "bytes in connection buffers", |s| Val::U(s.shared.stats.conn_buffer_bytes.load(Ordering::Relaxed) as u64);
    "conn_buffer_limit", Setting, "--conn-buffer-mb in bytes", |s| Val::U(s.shared.config.conn_buffer_limit as u64);
    "conn_buffer_throttled", Counter, "reads skipped over that limit", |s| s.server(|v| load(&v.conn_buffer_throttled));
    "conn_buffer_refused", Counter, "requests refused as out of memory (a value, or a long line and its connection): their client stalled part way while buffers were over that limit", |s| s.server(|v| load(&v.conn_buffer_refused));
    "staged_values", Counter, "large values received straight into item memory", |s| s.server(|v| load(&v.staged_values));
    "staged_bytes", Gauge, "bytes of values being received into item memory now", |s| Val::U(s.shared.stats.staged_bytes.load(Ordering::Relaxed) as u64);
    "uring_workers", Gauge, "workers on the io_uring loop (the others on epoll)", |s| Val::U(s.shared.stats.uring_workers.load(Ordering::Relaxed) as u64);
    "accept_handoffs", Counter, "connections a worker accepted and passed to one with fewer (--accept workers keeps workers within one connection of each other)", |s| Val::U(s.shared.stats.accept_handoffs.load(Ordering::Relaxed));
    "worker_conns", Gauge, "connections per worker, in worker order (-: a worker that stopped after a panic)", |s| Val::S(s.shared.worker_conns.iter().map(|n| match n.load(Ordering::Relaxed) { v if v >= crate::worker::GONE => "-".to_string(), v => v.to_string() }).collect::<Vec<_>>().join(","));
    "busy_poll_us", Setting, "--busy-poll-us", |s| Val::U(s.shared.config.busy_poll.as_micros() as u64);
    "ring_buffer_bytes", Gauge, "io_uring provided receive buffers, fixed per worker", |s| Val::U(s.shared.stats.ring_buffer_bytes.load(Ordering::Relaxed) as u64);
    "task_rv_ns", Counter, "RV: receiving", |s| s.server(|v| load(&v.tasks.rv));
    "task_pp_ns", Counter, "PP: parsing and planning", |s| s.server(|v| load(&v.tasks.pp));
    "task_engine_ns", Counter, "MM, IN, KC and RD: the engine", |s| s.server(|v| load(&v.tasks.engine));
    "task_in_ns", Counter, "IN inside the engine: index searches, inserts, deletes, delayed writes applied", |s| Val::U(s.e.task_in_ns);
    "task_kc_ns", Counter, "KC inside the engine: key compare of reads, with the item loads it waits for", |s| Val::U(s.e.task_kc_ns);
    "task_rd_ns", Counter, "RD inside the engine: replies of reads (value copies)", |s| Val::U(s.e.task_rd_ns);
    "task_mm_ns", Counter, "MM inside the engine: slab allocation and value copy of writes (sampled)", |s| Val::U(s.e.task_mm_ns);
    "task_wr_ns", Counter, "WR: composing replies", |s| s.server(|v| load(&v.tasks.wr));
    "task_sd_ns", Counter, "SD: sending", |s| s.server(|v| load(&v.tasks.sd));
];

/// Per-class stats of `stats slabs` (`<class>:<name>`) and `stats items`
/// (`items:<class>:<name>`).
pub(crate) struct ClassDef {
    pub name: &'static str,
    pub kind: Kind,
    /// The meaning, for people (the metrics endpoint uses memcached_exporter's words for
    /// these).
    #[allow(dead_code)]
    pub help: &'static str,
    /// The value from the class's report and the server's clock (seconds since start).
    pub get: fn(&ClassReport, u32) -> u64,
}

macro_rules! class_defs {
    ($( $name:literal, $kind:ident, $help:literal, $get:expr; )*) => {
        &[ $( ClassDef { name: $name, kind: Kind::$kind, help: $help, get: $get }, )* ]
    };
}

pub(crate) static SLAB_FIELDS: &[ClassDef] = class_defs![
    "chunk_size", Setting, "bytes per chunk", |c, _| c.info.chunk as u64;
    "chunks_per_page", Setting, "chunks in a page", |c, _| u64::from(c.info.per_page);
    "total_pages", Gauge, "pages the class holds", |c, _| c.pages as u64;
    "total_chunks", Gauge, "chunks in those pages", |c, _| c.pages as u64 * u64::from(c.info.per_page);
    "used_chunks", Gauge, "chunks holding items or parts of chained ones", |c, _| c.items + c.parts;
    "free_chunks", Gauge, "chunks free", |c, _| (c.pages as u64 * u64::from(c.info.per_page)).saturating_sub(c.items + c.parts);
    "free_chunks_end", Gauge, "chunks never used yet", |c, _| c.untouched;
    "get_hits", Counter, "reads that found an item of the class", |c, _| c.counts.hits;
    "cmd_set", Counter, "items stored in the class", |c, _| c.counts.sets;
    "delete_hits", Counter, "deletes that found an item of the class", |c, _| c.counts.delete_hits;
    "incr_hits", Counter, "incr that found an item of the class", |c, _| c.counts.incr_hits;
    "decr_hits", Counter, "decr that found an item of the class", |c, _| c.counts.decr_hits;
    "cas_hits", Counter, "cas that stored over an item of the class", |c, _| c.counts.cas_hits;
    "cas_badval", Counter, "cas refused on an item of the class", |c, _| c.counts.cas_badval;
    "touch_hits", Counter, "touches of an item of the class", |c, _| c.counts.touch_hits;
];

pub(crate) static ITEM_FIELDS: &[ClassDef] = class_defs![
    "number", Gauge, "items in the class", |c, _| c.items;
    "age", Gauge, "seconds since the last access of the oldest item CLOCK will consider next (memcached's LRU tail)", |c, now| c.tail_atime.map_or(0, |a| u64::from(now.saturating_sub(a)));
    "mem_requested", Gauge, "bytes of those items: header, key and value", |c, _| c.counts.bytes;
    "evicted", Counter, "items evicted", |c, _| c.counts.evicted;
    "evicted_time", Gauge, "seconds since the last evicted item was accessed", |c, _| c.counts.evicted_time;
    "evicted_nonzero", Counter, "evicted items that had an expiry time", |c, _| c.counts.evicted_nonzero;
    "outofmemory", Counter, "writes refused for want of memory", |c, _| c.counts.out_of_memory;
    "reclaimed", Counter, "expired items whose chunk was reused", |c, _| c.counts.reclaimed;
    "expired_unfetched", Counter, "expired items never read", |c, _| c.counts.expired_unfetched;
    "evicted_unfetched", Counter, "evicted items never read", |c, _| c.counts.evicted_unfetched;
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The process's CPU times from /proc, in clock ticks of 10 ms.
    fn proc_cpu() -> (f64, f64) {
        let s = std::fs::read_to_string("/proc/self/stat").unwrap();
        let f: Vec<f64> = s
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0.0))
            .collect();
        (f[11] / 100.0, f[12] / 100.0)
    }

    #[test]
    fn rusage_reports_the_cpu_seconds_proc_reports() {
        // Enough work that the figures are well above the ticks' 10 ms: spun until /proc
        // counts 300 ms of user time (not 300 ms of wall time: on a loaded machine this
        // thread may get a fraction of that, and the test failed so once).
        let start = std::time::Instant::now();
        let first_user = proc_cpu().0;
        let mut x = 0u64;
        while proc_cpu().0 < first_user + 0.3
            && start.elapsed() < std::time::Duration::from_secs(60)
        {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
        }
        let (before_user, before_system) = proc_cpu();
        let (user, system) = rusage();
        let (after_user, after_system) = proc_cpu();
        // Ticks round down, and other tests' threads run meanwhile: a tolerance either way.
        assert!(user >= 0.2, "user {user}");
        assert!(
            user >= before_user - 0.02 && user <= after_user + 0.02,
            "user {user} outside /proc's {before_user}..{after_user}"
        );
        assert!(
            system >= before_system - 0.02 && system <= after_system + 0.02,
            "system {system} outside /proc's {before_system}..{after_system}"
        );
    }

    #[test]
    fn every_stat_is_defined_once() {
        for (group, defs) in [("", GENERAL), ("settings", SETTINGS), ("hkv", HKV_DEFS)] {
            let mut seen = std::collections::HashSet::new();
            for d in defs {
                assert!(seen.insert(d.name), "stats {group}: {} twice", d.name);
                assert!(!d.help.is_empty() && !d.name.contains(' '));
            }
        }
        // A stat hkv adds never shadows one of memcached's general names.
        for d in HKV_DEFS {
            assert!(
                GENERAL.iter().all(|g| g.name != d.name),
                "{} is in stats and stats hkv",
                d.name
            );
        }
        for fields in [SLAB_FIELDS, ITEM_FIELDS] {
            let mut seen = std::collections::HashSet::new();
            for f in fields {
                assert!(seen.insert(f.name), "{} twice", f.name);
            }
        }
    }

    #[test]
    fn values_render_like_memcached() {
        assert_eq!(Val::Secs(1.5).render(), "1.500000");
        assert_eq!(Val::F2(1.25).render(), "1.25");
        assert_eq!(Val::Fixed(2.0, 1).render(), "2.0");
    }
}
