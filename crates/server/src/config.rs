//! Settings: memcached-compatible flags, optionally a TOML file underneath them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use crate::cli::Cli;
use crate::values::parse_interval;

/// The config file, and the effective settings.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub listen: IpAddr,
    /// More interfaces, on the same port.
    pub listen_more: Vec<IpAddr>,
    /// `-l ADDR:PORT`: each listen address's own TCP port (`listen` first, then
    /// `listen_more`), where one was given instead of `port`.
    #[serde(skip)]
    pub listen_ports: Vec<Option<u16>>,
    /// `-l notls:ADDR`: whether each listen address (`listen` first, then `listen_more`)
    /// was given with the prefix; an address from a config file alone goes by `notls`.
    #[serde(skip)]
    pub listen_notls: Vec<bool>,
    pub port: u16,
    /// 0: no UDP.
    pub udp_port: u16,
    /// `-U -1`: UDP on any free port.
    pub udp_any_port: bool,
    pub memory_mb: usize,
    pub max_connections: usize,
    pub threads: usize,
    pub max_item_size: usize,
    pub growth_factor: f64,
    pub enable_shutdown: bool,
    pub verbose: u8,
    /// cpu, opencl or auto.
    pub engine: String,
    /// The event loop: uring, epoll or auto (`--io`).
    pub io: String,
    /// Who accepts TCP connections: workers, acceptor or auto (`--accept`).
    pub accept: String,
    /// `--busy-poll-us`.
    pub busy_poll_us: u64,
    /// `--udp-max-wait-ms` (0: never drop).
    pub udp_max_wait_ms: u64,
    /// `--zero-copy-min` (0: never).
    pub zero_copy_min: usize,
    pub opencl_device: Option<usize>,
    /// `MIN..MAX` microseconds (or one number).
    pub batch_interval_us: String,
    /// Seconds a connection may stay idle before it is closed (memcached's `-o
    /// idle_timeout`); 0 = never.
    pub idle_timeout: u32,
    /// memcached's `-o hashpower=N`: the index starts with about 2^N slots (12..=32) and
    /// grows from there; unset, it is sized from `memory_mb` (docs/operations.md).
    pub hashpower: Option<u8>,
    /// memcached's `-o slab_automove=0|1|2` and `no_slab_automove` (`slabs automove` later).
    pub slab_automove: bool,
    /// Megabytes for all connection buffers together (outside `memory_mb`).
    pub conn_buffer_mb: usize,
    /// See `--merge-atomics`.
    pub merge_atomics: bool,
    /// cpu, device or auto (`--vector-placement`).
    pub vector_placement: String,
    /// Where index tasks run (`--placement`).
    pub placement: String,
    /// `-l notls:ADDR`: listeners left plain with TLS on.
    pub notls: Vec<IpAddr>,
    /// `-Z`: TLS on the TCP listeners.
    pub tls: bool,
    /// `-o ssl_chain_cert`: the certificate chain (PEM).
    pub ssl_chain_cert: Option<PathBuf>,
    /// `-o ssl_key`: the private key (PEM); unset: taken from the chain file.
    pub ssl_key: Option<PathBuf>,
    /// `-o ssl_ca_cert`: CAs that client certificates are checked against.
    pub ssl_ca_cert: Option<PathBuf>,
    /// `-o ssl_verify_mode`: 0 none, 1 request, 2 require, 3 once (memcached's numbers).
    pub ssl_verify_mode: u8,
    /// `-o ssl_min_version`: 2 (TLS 1.2, the default) or 3 (TLS 1.3); 0 and 1 mean 2.
    pub ssl_min_version: u8,
    /// `-o ssl_wbuf_size`: kilobytes of plaintext a TLS connection holds for sending.
    pub ssl_wbuf_size: usize,
    /// `--hot-cache-mb`; unset: `memory_mb / 32` (at least 1).
    pub hot_cache_mb: Option<usize>,
    /// `--hot-epoch-ms`.
    pub hot_epoch_ms: u64,
}

/// `--zero-copy-min`'s default, measured (docs/BENCHMARKS.md, "Replies without copying
/// values").
pub const DEFAULT_ZERO_COPY_MIN: usize = 16 << 10;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: IpAddr::from([127, 0, 0, 1]),
            listen_more: Vec::new(),
            listen_ports: Vec::new(),
            listen_notls: Vec::new(),
            port: 11211,
            udp_port: 0,
            udp_any_port: false,
            memory_mb: 64,
            max_connections: 1024,
            threads: std::thread::available_parallelism().map_or(4, |n| n.get()),
            max_item_size: 1 << 20,
            growth_factor: 1.25,
            enable_shutdown: false,
            verbose: 0,
            engine: "cpu".into(),
            io: "auto".into(),
            accept: "auto".into(),
            busy_poll_us: 0,
            udp_max_wait_ms: 1000,
            zero_copy_min: DEFAULT_ZERO_COPY_MIN,
            opencl_device: None,
            batch_interval_us: "0..1000".into(),
            idle_timeout: 0,
            hashpower: None,
            slab_automove: true,
            conn_buffer_mb: 64,
            merge_atomics: true,
            vector_placement: "auto".into(),
            placement: "auto".into(),
            notls: Vec::new(),
            tls: false,
            ssl_chain_cert: None,
            ssl_key: None,
            ssl_ca_cert: None,
            ssl_verify_mode: 0,
            ssl_min_version: 2,
            ssl_wbuf_size: 16,
            hot_cache_mb: None,
            hot_epoch_ms: 1000,
        }
    }
}

impl Settings {
    pub fn from_cli(cli: &Cli) -> anyhow::Result<Settings> {
        let mut s = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
                toml::from_str(&text)
                    .map_err(|e| anyhow::anyhow!("bad config {}: {e}", path.display()))?
            }
            None => Settings::default(),
        };
        let port = |v: i32, flag: &str| match v {
            -1 => Ok(0),
            _ => u16::try_from(v).map_err(|_| anyhow::anyhow!("{flag}: {v} is no port")),
        };
        // memcached: -U without -p listens on that port for TCP as well.
        if let Some(v) = cli.port.or(cli.udp_port.filter(|&u| u != 0)) {
            s.port = port(v, "-p")?;
        }
        if let Some(v) = cli.udp_port {
            s.udp_port = port(v, "-U")?;
            s.udp_any_port = v == -1;
        }
        let mut listen = Vec::new();
        for l in &cli.listen {
            for &ip in &l.ips {
                if !listen.iter().any(|&(i, p, _)| (i, p) == (ip, l.port)) {
                    listen.push((ip, l.port, l.notls));
                }
            }
        }
        if let Some((&(first, _, _), more)) = listen.split_first() {
            s.listen = first;
            s.listen_more = more.iter().map(|&(ip, _, _)| ip).collect();
            s.listen_ports = listen.iter().map(|&(_, port, _)| port).collect();
            s.listen_notls = listen.iter().map(|&(_, _, notls)| notls).collect();
            s.notls = cli
                .listen
                .iter()
                .filter(|l| l.notls)
                .flat_map(|l| l.ips.iter().copied())
                .collect();
        }
        s.tls |= cli.enable_ssl;
        if let Some(v) = cli.memory_mb {
            s.memory_mb = v;
        }
        if let Some(v) = cli.max_connections {
            s.max_connections = v;
        }
        if let Some(v) = cli.threads {
            s.threads = v;
        }
        if let Some(v) = cli.max_item_size {
            s.max_item_size = v;
        }
        if let Some(v) = cli.growth_factor {
            s.growth_factor = v;
        }
        s.enable_shutdown |= cli.enable_shutdown;
        if let Some(e) = &cli.engine {
            s.engine = e.clone();
        }
        if let Some(v) = cli.busy_poll_us {
            s.busy_poll_us = v;
        }
        if let Some(v) = cli.udp_max_wait_ms {
            s.udp_max_wait_ms = v;
        }
        if let Some(v) = cli.zero_copy_min {
            s.zero_copy_min = v;
        }
        anyhow::ensure!(
            s.busy_poll_us <= 10_000,
            "busy-poll-us must be at most 10000"
        );
        if let Some(v) = &cli.io {
            s.io = v.clone();
        }
        anyhow::ensure!(
            ["uring", "epoll", "auto"].contains(&s.io.as_str()),
            "io must be uring, epoll or auto"
        );
        if let Some(v) = &cli.accept {
            s.accept = v.clone();
        }
        anyhow::ensure!(
            ["workers", "acceptor", "auto"].contains(&s.accept.as_str()),
            "accept must be workers, acceptor or auto"
        );
        if cli.opencl_device.is_some() {
            s.opencl_device = cli.opencl_device;
        }
        anyhow::ensure!(
            ["cpu", "opencl", "auto"].contains(&s.engine.as_str()),
            "engine must be cpu, opencl or auto"
        );
        if let Some(v) = &cli.batch_interval_us {
            s.batch_interval_us = v.clone();
        }
        parse_interval(&s.batch_interval_us).map_err(|e| anyhow::anyhow!(e))?;
        if let Some(v) = cli.merge_atomics {
            s.merge_atomics = v;
        }
        if let Some(v) = &cli.vector_placement {
            s.vector_placement = v.clone();
        }
        anyhow::ensure!(
            ["cpu", "device", "auto"].contains(&s.vector_placement.as_str()),
            "vector_placement must be cpu, device or auto"
        );
        if let Some(v) = &cli.placement {
            s.placement = v.clone();
        }
        s.placement
            .parse::<hkv_engine::Placement>()
            .map_err(|e| anyhow::anyhow!("placement: {e}"))?;
        if cli.hot_cache_mb.is_some() {
            s.hot_cache_mb = cli.hot_cache_mb;
        }
        if let Some(v) = cli.hot_epoch_ms {
            s.hot_epoch_ms = v;
        }
        anyhow::ensure!(
            (1..=3_600_000).contains(&s.hot_epoch_ms),
            "hot-epoch-ms must be 1..3600000"
        );
        s.verbose = s.verbose.max(cli.verbose);
        if let Some(v) = cli.conn_buffer_mb {
            s.conn_buffer_mb = v;
        }
        anyhow::ensure!(s.conn_buffer_mb >= 1, "conn-buffer-mb must be at least 1");
        for opt in cli.extended.iter().flat_map(|o| o.split(',')) {
            let (name, value) = opt.split_once('=').unwrap_or((opt, ""));
            match name {
                "idle_timeout" => {
                    s.idle_timeout = value
                        .parse()
                        .map_err(|_| anyhow::anyhow!("idle_timeout must be a number of seconds"))?
                }
                // memcached's bounds and words.
                "hashpower" => {
                    let n: i64 = value
                        .parse()
                        .map_err(|_| anyhow::anyhow!("Missing numeric argument for hashpower"))?;
                    anyhow::ensure!(n >= 12, "Initial hashtable multiplier of {n} is too low");
                    anyhow::ensure!(
                        n <= 32,
                        "Initial hashtable multiplier of {n} is too high\nChoose a value based on \"STAT hash_power_level\" from a running instance"
                    );
                    s.hashpower = Some(n as u8);
                }
                // memcached's levels: 0 off; 1, 2 (and the bare name) on.
                "slab_automove" => {
                    s.slab_automove = match value {
                        "" => true,
                        v => {
                            v.parse::<u8>().ok().filter(|&m| m <= 2).ok_or_else(|| {
                                anyhow::anyhow!("slab_automove must be between 0 and 2")
                            })? != 0
                        }
                    }
                }
                "no_slab_automove" => s.slab_automove = false,
                "ssl_chain_cert" => s.ssl_chain_cert = Some(value.into()),
                "ssl_key" => s.ssl_key = Some(value.into()),
                "ssl_ca_cert" => s.ssl_ca_cert = Some(value.into()),
                "ssl_verify_mode" => {
                    s.ssl_verify_mode =
                        value.parse().ok().filter(|m| *m <= 3).ok_or_else(|| {
                            anyhow::anyhow!("ssl_verify_mode must be 0, 1, 2 or 3")
                        })?
                }
                "ssl_min_version" => {
                    s.ssl_min_version = match value {
                        "0" | "1" | "tlsv1.0" | "tlsv1.1" => {
                            eprintln!(
                                "hkv: -o ssl_min_version={value}: TLS 1.2 is the oldest hkv speaks"
                            );
                            2
                        }
                        "2" | "tlsv1.2" => 2,
                        "3" | "tlsv1.3" => 3,
                        _ => anyhow::bail!("ssl_min_version must be 0, 1, 2 or 3"),
                    }
                }
                "ssl_keyformat" => anyhow::ensure!(
                    matches!(value, "" | "1" | "PEM" | "pem"),
                    "ssl_keyformat: hkv reads PEM keys only"
                ),
                "ssl_wbuf_size" => {
                    s.ssl_wbuf_size = value
                        .parse()
                        .ok()
                        .filter(|k| (1..=1024).contains(k))
                        .ok_or_else(|| anyhow::anyhow!("ssl_wbuf_size must be 1..1024 kilobytes"))?
                }
                "ssl_ciphers" | "ssl_session_cache" | "ssl_kernel_tls" => {
                    eprintln!(
                        "hkv: -o {name}: rustls chooses this itself (docs/operations.md), ignored"
                    )
                }
                "" => {}
                known if MEMCACHED_SUBOPTIONS.contains(&known) => {
                    eprintln!("hkv: -o {known}: no meaning in hkv, ignored")
                }
                // memcached's words: a mistyped option is refused, not silently dropped.
                _ => anyhow::bail!("Illegal suboption \"{opt}\""),
            }
        }
        anyhow::ensure!(
            s.threads >= 1 && s.threads <= 256,
            "threads must be 1..=256"
        );
        anyhow::ensure!(s.memory_mb >= 1, "memory limit must be at least 1 MB");
        // memcached's limits and words (values past a page are chained, as its are).
        anyhow::ensure!(
            s.max_item_size >= 1024,
            "Item max size cannot be less than 1024 bytes."
        );
        // memcached's check and words: an item must fit twice in the memory limit.
        anyhow::ensure!(
            s.max_item_size <= (s.memory_mb << 20) / 2,
            "Cannot set item size limit higher than 1/2 of memory max."
        );
        anyhow::ensure!(
            s.max_item_size <= 1 << 30,
            "Cannot set item size limit higher than a gigabyte."
        );
        anyhow::ensure!(
            s.max_connections >= 1,
            "connection limit must be at least 1"
        );
        Ok(s)
    }

    pub fn schedule(&self) -> hkv_engine::ScheduleConfig {
        // Validated when the settings were made.
        let (min_us, max_us) = parse_interval(&self.batch_interval_us).unwrap_or((0.0, 1000.0));
        hkv_engine::ScheduleConfig {
            min_us,
            max_us,
            ..hkv_engine::ScheduleConfig::default()
        }
    }

    /// `--placement`, checked when the settings were read.
    pub fn placement(&self) -> hkv_engine::Placement {
        self.placement.parse().unwrap_or_default()
    }

    pub fn vector_placement(&self) -> hkv_engine::VectorPlacement {
        match self.vector_placement.as_str() {
            "cpu" => hkv_engine::VectorPlacement::Cpu,
            "device" => hkv_engine::VectorPlacement::Device,
            _ => hkv_engine::VectorPlacement::Auto,
        }
    }

    pub fn backend(&self) -> hkv_engine::Backend {
        match self.engine.as_str() {
            "opencl" => hkv_engine::Backend::OpenCl(self.opencl_device),
            "auto" => hkv_engine::Backend::Auto,
            _ => hkv_engine::Backend::Cpu,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.tcp_addr(0, self.listen)
    }

    /// The listen addresses after the first.
    pub fn extra_addrs(&self) -> Vec<SocketAddr> {
        let more = self.listen_more.iter().enumerate();
        more.map(|(i, &ip)| self.tcp_addr(i + 1, ip)).collect()
    }

    /// Whether each listen address (`addr()`, then `extra_addrs()`) stays plain TCP with
    /// `-Z`: by its own `-l notls:` entry, not by its IP, which another entry may share on
    /// another port (`-l 127.0.0.1 -l notls:127.0.0.1:11212` left both plain).
    pub fn notls_flags(&self) -> Vec<bool> {
        std::iter::once(&self.listen)
            .chain(&self.listen_more)
            .enumerate()
            .map(|(i, ip)| {
                self.listen_notls
                    .get(i)
                    .copied()
                    .unwrap_or_else(|| self.notls.contains(ip))
            })
            .collect()
    }

    /// The `i`th listen address on its own `-l ADDR:PORT` port, or on `-p`'s.
    fn tcp_addr(&self, i: usize, ip: IpAddr) -> SocketAddr {
        let own = self.listen_ports.get(i).copied().flatten();
        SocketAddr::new(ip, own.unwrap_or(self.port))
    }

    /// `-Z`'s configuration, files not read yet; None without -Z.
    pub fn tls(&self) -> anyhow::Result<Option<hkv_net::TlsSettings>> {
        if !self.tls {
            anyhow::ensure!(
                self.ssl_chain_cert.is_none() && self.notls.is_empty(),
                "ssl_chain_cert and notls: need -Z"
            );
            return Ok(None);
        }
        let chain_cert = self
            .ssl_chain_cert
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("-Z needs -o ssl_chain_cert=FILE (and ssl_key=FILE)"))?;
        let verify_mode = hkv_net::VerifyMode::from_number(self.ssl_verify_mode)
            .ok_or_else(|| anyhow::anyhow!("ssl_verify_mode must be 0, 1, 2 or 3"))?;
        anyhow::ensure!(
            verify_mode == hkv_net::VerifyMode::None || self.ssl_ca_cert.is_some(),
            "ssl_verify_mode {} checks client certificates: it needs -o ssl_ca_cert=FILE",
            self.ssl_verify_mode
        );
        // Absolute, so -d's change of directory and refresh_certs still find them.
        let abs = |p: &PathBuf| std::path::absolute(p);
        Ok(Some(hkv_net::TlsSettings {
            chain_cert: abs(chain_cert)?,
            key: self.ssl_key.as_ref().map(abs).transpose()?,
            ca_cert: self.ssl_ca_cert.as_ref().map(abs).transpose()?,
            verify_mode,
            tls13_only: self.ssl_min_version >= 3,
            wbuf_bytes: self.ssl_wbuf_size << 10,
        }))
    }

    /// Bytes of items the hot set may cover; 0 turns the hot/cold split off.
    pub fn hot_cache_bytes(&self) -> u64 {
        let mb = self.hot_cache_mb.unwrap_or((self.memory_mb / 32).max(1));
        (mb as u64) << 20
    }

    pub fn udp_addr(&self, cli: &Cli) -> Option<SocketAddr> {
        cli.udp_listen.or((self.udp_port != 0 || self.udp_any_port)
            .then(|| SocketAddr::new(self.listen, self.udp_port)))
    }

    /// Engine partitions: one per worker thread, fewer when memory is small. Each partition
    /// takes pages for its slab classes on its own, so memory split into partitions of under
    /// 16 pages strands most of it in half-used classes (measured: `-m 16 -t 2`, 1-64 KiB
    /// values, 117 items held with 2 partitions and 527 with 1; docs/BENCHMARKS.md).
    /// With `-I` past a page, a partition also gets room for two of the largest items
    /// (memcached's own rule: `-I` at most half of `-m`): an item lives in one partition, its
    /// chained parts in that partition's pages, and pages never move between partitions.
    /// `-o hashpower=N` as each partition's first table: 2^N slots in all, 8 to a bucket,
    /// shared out among the partitions (at least 2 buckets each). None: sized from `-m`.
    pub fn index_buckets_per_partition(&self) -> Option<u32> {
        let slots = 1u64 << self.hashpower?;
        let per = (slots / 8 / self.partitions() as u64).max(2);
        Some(per.next_power_of_two().min(1 << 27) as u32)
    }

    pub fn partitions(&self) -> usize {
        // Counted in memcached's 1 MiB pages whatever page size the partitions then get.
        let page = 1 << 20;
        let pages = (self.memory_mb << 20) / page;
        let chained = if self.max_item_size > page {
            2 * self.max_item_size.div_ceil(page)
        } else {
            0
        };
        let per_partition = PAGES_PER_PARTITION + chained;
        (pages / per_partition).clamp(1, self.threads.max(1))
    }

    /// Slab page size: 1 MiB whatever `-I` is, as memcached's default `slab_page_size`,
    /// unless a partition's share of `-m` is under 64 pages of it: then the largest power of
    /// two (64 KiB at least) that cuts each partition into 64. Every slab class in use holds
    /// at least one page in each partition, so with `-m 64 -t 4` 1 MiB pages gave each
    /// partition 16 for the ~18 classes of memcslap's values: classes took pages from one
    /// another over and over, and 64% of the keys memcslap had just stored were gone when it
    /// read them back
    /// (`regression_memcslap_at_memcacheds_default_memory_and_threads_reads_every_key_back`).
    /// Smaller pages waste more at the tail of each page of large chunks: 32 pages a
    /// partition still lost keys under memcslap, 128 held fewer 1-64 KiB values in `-m 16`
    /// than 1 MiB pages did (`regression_small_memory_is_not_stranded_across_partitions`:
    /// 460 items against 527), 64 held 558 and lost none (docs/BENCHMARKS.md).
    /// Larger values are chained over several chunks (crates/store/src/store/chain.rs), so
    /// a large `-I` does not make every class take pages of that size.
    pub fn page_size(&self) -> usize {
        let per_partition = (self.memory_mb << 20) / self.partitions();
        let fits = (per_partition / PAGES_PER_PARTITION_AT_LEAST).max(MIN_PAGE);
        (1usize << fits.ilog2()).clamp(MIN_PAGE, 1 << 20)
    }
}

/// Pages a partition's share of `-m` is cut into, at least (see [`Settings::page_size`]).
const PAGES_PER_PARTITION_AT_LEAST: usize = 64;
/// The smallest slab page (see [`Settings::page_size`]).
const MIN_PAGE: usize = 64 << 10;

/// The fewest pages a partition is given when memory allows (see [`Settings::partitions`]).
const PAGES_PER_PARTITION: usize = 16;

/// memcached 1.6's `-o` suboptions (those its Debian build accepts) that hkv takes and
/// ignores, since they tune machinery hkv does not have (its LRU segments, slab mover,
/// extstore, log buffers); any other name is refused as memcached refuses it.
const MEMCACHED_SUBOPTIONS: &[&str] = &[
    "maxconns_fast",
    "no_maxconns_fast",
    "no_hashexpand",
    "slab_reassign",
    "no_slab_reassign",
    "slab_automove_ratio",
    "slab_automove_window",
    "tail_repair_time",
    "hash_algorithm",
    "lru_crawler",
    "no_lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "lru_maintainer",
    "no_lru_maintainer",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "slab_sizes",
    "slab_chunk_max",
    "track_sizes",
    "inline_ascii_resp",
    "no_inline_ascii_resp",
    "modern",
    "no_modern",
    "no_chunked_items",
    "drop_privileges",
    "no_drop_privileges",
    "resp_obj_mem_limit",
    "read_buf_mem_limit",
    "sock_cookie_id",
    "ext_page_size",
    "ext_wbuf_size",
    "ext_threads",
    "ext_io_depth",
    "ext_path",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_sleep",
    "ext_max_frag",
    "ext_drop_unread",
    // memcached-debug's, which memcached's own test harness always passes.
    "relaxed_privileges",
];
