//! What a server is started with.

use std::net::SocketAddr;
use std::sync::Arc;

use hkv_proto::text::Limits;

use crate::sasl::SaslUsers;
use crate::tls::Tls;

#[derive(Clone, Debug)]
pub struct NetConfig {
    pub listen: SocketAddr,
    /// `-s`: a Unix domain socket to listen on instead of TCP (memcached's: network off),
    /// created with permissions `unix_mask` (`-a`, octal, default 0700).
    pub unix_socket: Option<std::path::PathBuf>,
    pub unix_mask: u32,
    /// More addresses to accept connections on (memcached's `-l a,b` or several `-l`).
    pub extra_listen: Vec<SocketAddr>,
    /// `-U`: a UDP listener for text-protocol requests, off unless asked for (UDP
    /// reflection attacks are why memcached turned it off by default).
    pub udp_listen: Option<SocketAddr>,
    pub threads: usize,
    /// `-c`: connections beyond this are told so and closed.
    pub max_connections: usize,
    pub limits: Limits,
    /// memcached's `-A`: allow the `shutdown` command.
    pub enable_shutdown: bool,
    /// Bytes of pending output after which a connection's input is left unread until the
    /// client reads its responses.
    pub output_high_water: usize,
    pub verbose: u8,
    /// Settings echoed by `stats settings`.
    pub memory_limit: usize,
    pub growth_factor: f64,
    pub page_size: usize,
    /// memcached's `-o hashpower` as given (0: not given), for `stats settings`.
    pub hashpower_init: u8,
    /// memcached's `-o idle_timeout`: a connection that neither sends nor takes bytes for
    /// this long is closed. None: never.
    pub idle_timeout: Option<std::time::Duration>,
    /// Bytes all connections' buffers may hold together; above it, connections holding more
    /// than a small floor stop being read until the total falls (docs/reliability.md).
    pub conn_buffer_limit: usize,
    /// `-S`: SASL over the binary protocol, with these users; every other protocol and
    /// transport is refused (docs/protocol.md).
    pub sasl: Option<Arc<SaslUsers>>,
    /// `-Y`: text protocol authentication from this `user:password` file.
    pub authfile: Option<Arc<crate::sasl::AuthFile>>,
    /// `--admin-listen`: the HTTP endpoint for `/metrics` (Prometheus); off when `None`.
    pub admin_listen: Option<SocketAddr>,
    /// `-X`: `stats cachedump` and `lru_crawler metadump` refused.
    pub disable_dumping: bool,
    /// `-F`: `flush_all` (text and binary) refused.
    pub disable_flush_all: bool,
    /// `-R`: requests taken from one connection per pass before the others get theirs.
    pub reqs_per_event: usize,
    /// `-b`: the listen backlog of the TCP and Unix listeners.
    pub backlog: i32,
    /// `-B`: the protocol every connection speaks; `None` tells them apart by the first
    /// byte (memcached's `auto`).
    pub binding: Option<Binding>,
    /// `-Z`: TCP connections speak TLS with this configuration.
    pub tls: Option<Arc<Tls>>,
    /// One per listen address (`listen`, then `extra_listen`): true where `-l notls:ADDR`
    /// keeps it plain TCP with `-Z` (memcached's prefix).
    pub notls: Vec<bool>,
    /// The hot/cold router (`--hot-cache-mb`, docs/hotcold.md); None turns the split off.
    pub hot: Option<Arc<crate::hot::Router>>,
    /// How often the router is retrained (`--hot-epoch-ms`).
    pub hot_epoch: std::time::Duration,
    /// `--io`: which event loop the workers run (docs/network.md).
    pub io: IoMode,
    /// `--accept`: who takes new TCP connections (docs/network.md).
    pub accept: AcceptMode,
    /// `--busy-poll-us`: the longest a worker polls without sleeping once it runs out of
    /// work (adaptive below that; zero: never).
    pub busy_poll: std::time::Duration,
    /// `--udp-max-wait-ms`: a UDP request that waited longer in its socket's receive
    /// queue is dropped unanswered (zero: never).
    pub udp_max_wait: std::time::Duration,
}

/// `-B ascii|binary`: the one protocol connections speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    Ascii,
    Binary,
}

/// The workers' event loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IoMode {
    /// io_uring where the kernel offers what hkv needs, epoll otherwise.
    #[default]
    Auto,
    /// io_uring or refuse to start.
    Uring,
    /// epoll (mio): readiness, then one recv and one send system call per connection.
    Epoll,
}

impl std::str::FromStr for IoMode {
    type Err = String;
    fn from_str(s: &str) -> Result<IoMode, String> {
        match s {
            "auto" => Ok(IoMode::Auto),
            "uring" | "io_uring" => Ok(IoMode::Uring),
            "epoll" => Ok(IoMode::Epoll),
            other => Err(format!(
                "unknown event loop {other:?}: uring, epoll or auto"
            )),
        }
    }
}

/// Who accepts new TCP connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AcceptMode {
    /// Every worker on its own listening socket where the kernel allows it, else the
    /// acceptor thread.
    #[default]
    Auto,
    /// Every worker accepts for itself on its own socket of the address (SO_REUSEPORT):
    /// no thread hands connections over; or refuse to start.
    Workers,
    /// One acceptor thread takes every connection and hands it to a worker in turn
    /// (memcached's dispatcher).
    Acceptor,
}

impl std::str::FromStr for AcceptMode {
    type Err = String;
    fn from_str(s: &str) -> Result<AcceptMode, String> {
        match s {
            "auto" => Ok(AcceptMode::Auto),
            "workers" => Ok(AcceptMode::Workers),
            "acceptor" => Ok(AcceptMode::Acceptor),
            other => Err(format!(
                "unknown accept mode {other:?}: workers, acceptor or auto"
            )),
        }
    }
}

impl NetConfig {
    /// The TLS configuration connections accepted on the `k`th listen address use.
    pub(crate) fn tls_for(&self, k: usize) -> Option<Arc<Tls>> {
        self.tls
            .clone()
            .filter(|_| !self.notls.get(k).copied().unwrap_or(false))
    }
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 11211)),
            extra_listen: Vec::new(),
            hashpower_init: 0,
            unix_socket: None,
            unix_mask: 0o700,
            udp_listen: None,
            threads: 4,
            max_connections: 1024,
            limits: Limits::default(),
            enable_shutdown: false,
            output_high_water: 1 << 20,
            verbose: 0,
            memory_limit: 64 << 20,
            growth_factor: 1.25,
            page_size: 1 << 20,
            idle_timeout: None,
            conn_buffer_limit: 64 << 20,
            sasl: None,
            authfile: None,
            disable_dumping: false,
            disable_flush_all: false,
            backlog: 1024,
            reqs_per_event: crate::plan::MAX_REQUESTS_PER_CONN_PASS,
            binding: None,
            admin_listen: None,
            tls: None,
            notls: Vec::new(),
            hot: None,
            hot_epoch: std::time::Duration::from_secs(1),
            io: IoMode::Auto,
            accept: AcceptMode::Auto,
            busy_poll: std::time::Duration::ZERO,
            udp_max_wait: std::time::Duration::from_secs(1),
        }
    }
}
