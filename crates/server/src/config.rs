//! Settings: memcached-compatible flags, optionally a TOML file underneath them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::Parser;

use crate::values::{parse_interval, parse_listen, parse_octal, parse_size, ListenAddr};

/// hkv: a memcached-compatible key-value store that batches requests.
#[derive(Parser, Debug)]
#[command(name = "hkv", version, about, long_about = None)]
pub struct Cli {
    /// TCP port to listen on (0 or -1: any free port, printed at start-up; memcached's -1).
    /// Without -p, a -U port is the TCP port too, as in memcached.
    #[arg(short = 'p', long = "port", allow_negative_numbers = true)]
    pub port: Option<i32>,
    /// UDP port for text-protocol requests (0: off, the default, as in memcached; -1: any
    /// free port).
    #[arg(short = 'U', long = "udp-port", allow_negative_numbers = true)]
    pub udp_port: Option<i32>,
    /// UDP address to listen on, port 0 allowed (any free port, printed at start-up).
    #[arg(long = "udp-listen")]
    pub udp_listen: Option<SocketAddr>,
    /// Interfaces to listen on: one address, a comma-separated list (`127.0.0.1,::1`, as
    /// memcached takes it), or the flag given several times. The first is the main one.
    /// With -Z, `notls:ADDR` keeps that one plain TCP.
    #[arg(short = 'l', long = "listen", value_delimiter = ',', value_parser = parse_listen)]
    pub listen: Vec<ListenAddr>,
    /// Memory for items, their metadata and the index, in megabytes.
    #[arg(short = 'm', long = "memory-limit", alias = "memory-mb")]
    pub memory_mb: Option<usize>,
    /// Maximum simultaneous connections.
    #[arg(short = 'c', long = "conn-limit")]
    pub max_connections: Option<usize>,
    /// Worker threads (and engine partitions, while each gets 16 pages of -m); default: the
    /// number of cores.
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Largest value accepted, e.g. 1m, 512k, 2097152.
    #[arg(short = 'I', long = "max-item-size", value_parser = parse_size)]
    pub max_item_size: Option<usize>,
    /// Slab chunk size growth factor.
    #[arg(short = 'f', long = "slab-growth-factor")]
    pub growth_factor: Option<f64>,
    /// Allow the `shutdown` command.
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,
    /// SASL (PLAIN) over the binary protocol; users from --sasl-pwdb or the
    /// MEMCACHED_SASL_PWDB file. Text, meta and UDP requests are then refused.
    #[arg(short = 'S', long = "enable-sasl")]
    pub enable_sasl: bool,
    /// The password file for -S: `user:password` lines (memcached's MEMCACHED_SASL_PWDB).
    #[arg(long = "sasl-pwdb", value_name = "FILE")]
    pub sasl_pwdb: Option<PathBuf>,
    /// memcached's text protocol authentication: `user:password` lines; until a `set` whose
    /// data is `<user> <password>`, every command gets `CLIENT_ERROR unauthenticated`.
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// Answer out of memory instead of evicting items (memcached's -M).
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,
    /// Run in the background (memcached's -d): detach from the terminal; nothing is printed.
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,
    /// Write the process id to this file (memcached's -P); removed on a clean exit.
    #[arg(short = 'P', long = "pidfile", value_name = "FILE")]
    pub pidfile: Option<PathBuf>,
    /// When started as root, run as this user once the ports are bound (memcached's -u).
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,
    /// Listen on this Unix domain socket instead of the network (memcached's -s: no TCP,
    /// no UDP).
    #[arg(short = 's', long = "unix-socket", value_name = "PATH")]
    pub unix_socket: Option<PathBuf>,
    /// Permissions of the -s socket, in octal (memcached's -a; default 0700).
    #[arg(short = 'a', long = "unix-mask", value_name = "MASK", value_parser = parse_octal)]
    pub unix_mask: Option<u32>,
    /// Serve Prometheus metrics (`/metrics`, memcached_exporter's names plus `hkv_*`) over
    /// HTTP on this address; port 0 picks one (`hkv admin on ADDR` says which). Off by
    /// default; no authentication, so keep it on loopback or a private network.
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,
    /// TLS on every TCP listener (memcached's -Z), with `-o ssl_chain_cert=FILE,ssl_key=FILE`
    /// and optionally `ssl_ca_cert=FILE,ssl_verify_mode=0-3,ssl_min_version=2|3`.
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,
    /// Keep item memory in this file (memcached's -e, on tmpfs): SIGUSR1 or `shutdown
    /// graceful` saves it, and the next start with the same settings keeps every item.
    #[arg(short = 'e', long = "memory-file", value_name = "FILE")]
    pub memory_file: Option<PathBuf>,
    /// Refuse `stats cachedump` and `lru_crawler metadump` (memcached's -X).
    #[arg(short = 'X', long = "disable-dumping")]
    pub disable_dumping: bool,
    /// Refuse `flush_all` (memcached's -F): text clients get `CLIENT_ERROR flush_all not
    /// allowed`, binary ones "Auth failure.".
    #[arg(short = 'F', long = "disable-flush-all")]
    pub disable_flush_all: bool,
    /// The listen backlog of the TCP and Unix listeners (memcached's -b).
    #[arg(
        short = 'b',
        long = "listen-backlog",
        default_value_t = 1024,
        allow_negative_numbers = true
    )]
    pub listen_backlog: i32,
    /// The protocol clients speak (memcached's -B): auto (told apart by each connection's
    /// first byte), ascii or binary.
    #[arg(short = 'B', long = "protocol", value_parser = ["auto", "ascii", "binary"])]
    pub protocol: Option<String>,
    /// Lock all memory in RAM (memcached's -k); a warning if the system refuses.
    #[arg(short = 'k', long = "lock-memory")]
    pub lock_memory: bool,
    /// Raise the core file size limit to the hard limit (memcached's -r).
    #[arg(short = 'r', long = "enable-coredumps")]
    pub enable_coredumps: bool,
    /// memcached's -C. Accepted so memcached's command lines start hkv, but CAS stays on
    /// (a warning says so): gets reports CAS values and cas compares them.
    #[arg(short = 'C', long = "disable-cas")]
    pub disable_cas: bool,
    /// memcached's -R. Accepted (more than 0) with a warning: hkv bounds the requests taken
    /// from one connection per pass itself (docs/reliability.md).
    #[arg(short = 'R', long = "max-reqs-per-event", value_name = "NUM")]
    pub max_reqs_per_event: Option<u32>,
    /// memcached's -L. Accepted with a warning: hkv does not ask for large pages.
    #[arg(short = 'L', long = "enable-largepages")]
    pub enable_largepages: bool,
    /// memcached's -n. Accepted with a warning: hkv's slab classes start from its own
    /// smallest chunk.
    #[arg(short = 'n', long = "slab-min-size", value_name = "BYTES")]
    pub slab_min_size: Option<u32>,
    /// memcached's -N. Accepted with a warning: hkv does not group connections by NAPI id.
    #[arg(short = 'N', long = "napi-ids", value_name = "NUM")]
    pub napi_ids: Option<u32>,
    /// More logging (-v, -vv, -vvv).
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Where index work runs: cpu, opencl (fails if no OpenCL device), or auto (a GPU if
    /// one is found, else cpu).
    #[arg(long, value_parser = ["cpu", "opencl", "auto"])]
    pub engine: Option<String>,
    /// The workers' event loop: uring (io_uring, or refuse to start), epoll, or auto
    /// (io_uring where the kernel allows it, else epoll; the log says which). The HKV_IO
    /// environment variable sets it when the flag is absent (the test suite runs both).
    #[arg(long = "io", env = "HKV_IO", value_parser = ["uring", "epoll", "auto"])]
    pub io: Option<String>,
    /// Microseconds a worker keeps polling, without sleeping, after it runs out of work
    /// (shortened while it finds nothing); 0 turns it off. docs/network.md says what it
    /// costs and gains.
    #[arg(long = "busy-poll-us")]
    pub busy_poll_us: Option<u64>,
    /// Values at least this many bytes long are sent from item memory without being copied
    /// (the chunk is kept from reuse until the send ends); 0 always copies. The default is
    /// where copying stopped paying on the development machine (docs/network.md).
    #[arg(long = "zero-copy-min", value_name = "BYTES")]
    pub zero_copy_min: Option<usize>,
    /// OpenCL device number (in the order the platforms list them) for --engine opencl.
    #[arg(long)]
    pub opencl_device: Option<usize>,
    /// Bounds of the batch interval C in microseconds, `MIN..MAX` (or one value to fix it):
    /// each worker collects requests for C before launching a batch, and C is chosen within
    /// the bounds from the batches' measured costs and the load (Mega-KV §5). Default 0..1000:
    /// on the CPU backend that is a batch every event-loop pass.
    #[arg(long, value_name = "MIN..MAX")]
    pub batch_interval_us: Option<String>,
    /// Merge in-place atomics (incr/decr, vector updates) on a hot key through the same-key
    /// table while index writes are delayed, so they skip the index (on by default; `false`
    /// only to measure what merging gives).
    #[arg(long, value_name = "BOOL")]
    pub merge_atomics: Option<bool>,
    /// Where vector updates run: cpu, device (the OpenCL engine's device, for experiments),
    /// or auto (the device for the value sizes where start-up timing found it faster).
    #[arg(long, value_parser = ["cpu", "device", "auto"])]
    pub vector_placement: Option<String>,
    /// Where index tasks run when the OpenCL device shares host memory (PoCL, integrated
    /// GPUs): auto (a cost model chooses per batch), cpu, device, or per task, e.g.
    /// `search=device,insert=cpu`, `IN=device` or `KC=device,RD=cpu` (docs/placement.md).
    #[arg(long, value_name = "PLACEMENT")]
    pub placement: Option<String>,
    /// KVCG's hot/cold split: megabytes of items the hot set may cover; reads of hot keys
    /// are answered without waiting for the batch interval (default: -m / 32; 0: off).
    #[arg(long, value_name = "MB")]
    pub hot_cache_mb: Option<usize>,
    /// How often the hot/cold router is retrained, in milliseconds.
    #[arg(long, value_name = "MS")]
    pub hot_epoch_ms: Option<u64>,
    /// A TOML file with the same settings (flags given on the command line win).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Megabytes all connections' buffers may hold together before the largest stop being
    /// read (outside `-m`; docs/reliability.md).
    #[arg(long = "conn-buffer-mb")]
    pub conn_buffer_mb: Option<usize>,
    /// memcached's extended options, comma separated: `idle_timeout=SECONDS` (close
    /// connections idle that long; 0 = never). Others are accepted with a warning.
    #[arg(short = 'o', value_name = "OPT[=VALUE],...")]
    pub extended: Vec<String>,
    /// Print the effective settings as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
}

/// The config file, and the effective settings.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub listen: IpAddr,
    /// More interfaces, on the same port.
    pub listen_more: Vec<IpAddr>,
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
    /// `--busy-poll-us`.
    pub busy_poll_us: u64,
    /// `--zero-copy-min` (0: never).
    pub zero_copy_min: usize,
    pub opencl_device: Option<usize>,
    /// `MIN..MAX` microseconds (or one number).
    pub batch_interval_us: String,
    /// Seconds a connection may stay idle before it is closed (memcached's `-o
    /// idle_timeout`); 0 = never.
    pub idle_timeout: u32,
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
            busy_poll_us: 0,
            zero_copy_min: DEFAULT_ZERO_COPY_MIN,
            opencl_device: None,
            batch_interval_us: "0..1000".into(),
            idle_timeout: 0,
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
        if let Some((first, more)) = cli.listen.split_first() {
            s.listen = first.ip;
            s.listen_more = more.iter().map(|l| l.ip).collect();
            s.notls = cli
                .listen
                .iter()
                .filter(|l| l.notls)
                .map(|l| l.ip)
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
                other => eprintln!("hkv: -o {other}: no meaning in hkv, ignored"),
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
        SocketAddr::new(self.listen, self.port)
    }

    /// The listen addresses after the first, on the same port.
    pub fn extra_addrs(&self) -> Vec<SocketAddr> {
        self.listen_more
            .iter()
            .map(|ip| SocketAddr::new(*ip, self.port))
            .collect()
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
    pub fn partitions(&self) -> usize {
        let page = self.page_size().max(1);
        let pages = (self.memory_mb << 20) / page;
        let chained = if self.max_item_size > page {
            2 * self.max_item_size.div_ceil(page)
        } else {
            0
        };
        let per_partition = PAGES_PER_PARTITION + chained;
        (pages / per_partition).clamp(1, self.threads.max(1))
    }

    /// Slab page size: 1 MiB whatever `-I` is, as memcached's default `slab_page_size`.
    /// Larger values are chained over several chunks (crates/store/src/store/chain.rs), so
    /// a large `-I` does not make every class take pages of that size.
    pub fn page_size(&self) -> usize {
        1 << 20
    }
}

/// The fewest pages a partition is given when memory allows (see [`Settings::partitions`]).
const PAGES_PER_PARTITION: usize = 16;
