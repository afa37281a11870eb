//! The command line: memcached's flags and hkv's own.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};

use crate::values::{parse_listen, parse_octal, parse_size, ListenAddr};

/// hkv: a memcached-compatible key-value store that batches requests.
#[derive(Parser, Debug)]
#[command(name = "hkv", long_about = None, args_override_self = true)]
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
    /// Largest item accepted, e.g. 1m, 512k, 2097152: the value with its key and memcached's item
    /// overhead (56 bytes and more; docs/protocol.md), so a value of exactly 1m is refused.
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
    /// Turn CAS off (memcached's -C): gets and mg report 0 and no CAS compare matches (items
    /// keep their header's 8-byte CAS field; hkv saves no memory by it).
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
    /// Who accepts TCP connections: workers (each worker on its own listening socket of
    /// every address, SO_REUSEPORT, no hand-off between threads), acceptor (one thread
    /// accepts and hands connections to the workers in turn, as memcached does) or auto
    /// (workers where the kernel allows it). HKV_ACCEPT sets it when the flag is absent.
    #[arg(long = "accept", env = "HKV_ACCEPT", value_parser = ["workers", "acceptor", "auto"])]
    pub accept: Option<String>,
    /// Microseconds a worker keeps polling, without sleeping, after it runs out of work
    /// (shortened while it finds nothing); 0 turns it off. docs/network.md says what it
    /// costs and gains.
    #[arg(long = "busy-poll-us")]
    pub busy_poll_us: Option<u64>,
    /// Milliseconds a UDP request may wait in its socket's receive queue: one that waited
    /// longer is dropped unanswered (its client has given up; a flood would otherwise leave
    /// UDP answering seconds-old requests), counted in `udp_stale_drops`. 0 never drops.
    #[arg(long = "udp-max-wait-ms", value_name = "MS")]
    pub udp_max_wait_ms: Option<u64>,
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

impl Cli {
    /// The command line, with `-h`'s first line and `-V` naming the memcached release hkv
    /// answers as (`memcached 1.6.21`, as `version` does) and hkv's own beside it: test
    /// harnesses find a server by that line (Dalli's runs `memcached -h` and wants
    /// `memcached X.Y.Z` first).
    pub fn from_env() -> Cli {
        // clap keeps &'static strs (its `string` feature aside): two short lines, once.
        let release: &'static str = Box::leak(
            format!(
                "{} (hkv {})",
                hkv_proto::reply::VERSION,
                hkv_proto::reply::HKV_VERSION
            )
            .into_boxed_str(),
        );
        let about: &'static str = Box::leak(
            format!("memcached {release}: hkv, a memcached-compatible key-value server")
                .into_boxed_str(),
        );
        let command = Cli::command()
            .display_name("memcached")
            .version(release)
            .about(about);
        let matches = command.get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}
