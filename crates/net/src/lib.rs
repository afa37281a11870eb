//! The network layer: RV, PP, WR and SD of DIDO's eight tasks.
//!
//! Each of `threads` workers accepts connections on its own listening sockets (or one
//! acceptor thread hands them round-robin to the workers: `--accept`). Each worker runs an
//! event loop (io_uring or epoll); in each pass it reads every ready connection, parses
//! every complete request, runs them all through the engine as **one batch**, and writes
//! each connection's responses back in its request order (memcached's io_queue, Pelikan's
//! storage hand-off).

mod accept;
mod admin;
mod bind;
mod clock;
mod config;
mod conn;
mod control;
mod counters;
mod hot;
mod plan;
mod respond;
mod ring;
mod sasl;
mod shared;
mod stage;
pub use plan::MAX_REQUESTS_PER_CONN_PASS;
pub use stage::STAGE_MIN;
mod stats;
mod stream;
mod tls;
mod udp;
mod worker;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use hkv_engine::Engine;
use mio::{Poll, Token, Waker};

pub use config::{AcceptMode, Binding, IoMode, NetConfig};
pub use counters::ServerStats;
pub use hot::Router;
pub use sasl::{AuthFile, SaslUsers};
pub use tls::{Tls, TlsError, TlsSettings, VerifyMode};

use shared::Shared;

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("cannot listen on {path}: {error}")]
    BindUnix { path: String, error: std::io::Error },
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "-c {conns} needs {need} open files but the limit is {limit}: \
         raise it (ulimit -n) or ask for fewer connections"
    )]
    FileLimit { conns: usize, need: u64, limit: u64 },
    #[error("--io uring: this kernel gives no usable io_uring ({0}); use --io epoll or auto")]
    Uring(std::io::Error),
}

/// A running server. Dropping it does not stop it; call [`Server::shutdown`].
pub struct Server {
    addr: Option<SocketAddr>,
    /// The other `-l` addresses, in the order given.
    extra_addrs: Vec<SocketAddr>,
    udp_addr: Option<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    wakers: Vec<Arc<Waker>>,
    threads: Vec<JoinHandle<()>>,
}

const ACCEPT_WAKE: Token = Token(1);

impl Server {
    /// Binds and starts the acceptor and workers.
    pub fn start(engine: Engine, config: NetConfig) -> Result<Server, NetError> {
        Self::start_after_bind(engine, config, || Ok(()))
    }

    /// [`Server::start`], running `bound` once every socket is bound and before any thread
    /// serves: `-u` drops root there, so no client is ever served with root's rights.
    pub fn start_after_bind(
        engine: Engine,
        config: NetConfig,
        bound: impl FnOnce() -> std::io::Result<()>,
    ) -> Result<Server, NetError> {
        // Per worker: an epoll, a waker, an io_uring, a UDP socket and a listening socket per
        // address (`--accept workers`).
        let per_thread = 4 + 1 + config.extra_listen.len();
        ensure_file_limit(config.max_connections, config.threads, per_thread)?;
        let sockets = bind::listeners(&config)?;
        let described = sockets.describe();
        let bind::Bound {
            acceptor: listeners,
            per_worker,
            addrs,
        } = sockets;
        let addr = addrs.first().copied();
        let extra_addrs = addrs.get(1..).unwrap_or_default().to_vec();
        let mut udp = bind::udp_sockets(&config)?;
        let udp_addr = udp.first().map(|u| u.local_addr()).transpose()?;
        udp.reverse();
        let admin = config
            .admin_listen
            .map(|a| std::net::TcpListener::bind(a).map_err(|e| NetError::Bind(a, e)))
            .transpose()?;
        let admin_addr = admin.as_ref().and_then(|l| l.local_addr().ok());
        bound()?;
        let threads = config.threads.max(1);
        let io = choose_loop(config.io)?;
        let verbose = config.verbose;
        let shared = Arc::new(Shared {
            engine,
            config,
            stats: ServerStats::default(),
            stats_base: Default::default(),
            stop: AtomicBool::new(false),
            graceful: AtomicBool::new(false),
            wakers: std::sync::OnceLock::new(),
            started: std::time::Instant::now(),
            conns: Default::default(),
            listeners: described,
            accept_workers: per_worker.iter().any(|l| !l.is_empty()),
            worker_conns: (0..threads).map(|_| AtomicUsize::new(0)).collect(),
            handoff: std::sync::OnceLock::new(),
            detail: Default::default(),
            loops_ready: AtomicUsize::new(0),
            verbosity: std::sync::atomic::AtomicU8::new(verbose),
            on_verbosity: std::sync::OnceLock::new(),
        });
        let mut handles = Vec::new();
        let mut wakers = Vec::new();
        let mut senders = Vec::new();
        let mut per_worker = per_worker.into_iter();
        for id in 0..threads {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), worker::WAKE)?);
            let (tx, rx) = mpsc::channel();
            // Each worker takes its own share of UDP requests into its batches.
            let w = worker::Worker::new(
                id,
                poll,
                rx,
                Arc::clone(&shared),
                Arc::clone(&waker),
                worker::OwnSockets {
                    udp: udp.pop(),
                    listeners: per_worker.next().unwrap_or_default(),
                },
                io,
            )?;
            let wshared = Arc::clone(&shared);
            handles.push(
                std::thread::Builder::new()
                    .name(format!("hkv-worker-{id}"))
                    .spawn(move || run_isolated(id, w, &wshared))?,
            );
            senders.push((tx, Arc::clone(&waker)));
            wakers.push(waker);
        }
        let _ = shared.handoff.set(senders.clone());
        // Workers on their own listening sockets need no acceptor thread.
        if !listeners.is_empty() {
            let poll = Poll::new()?;
            let accept_waker = Arc::new(Waker::new(poll.registry(), ACCEPT_WAKE)?);
            wakers.push(Arc::clone(&accept_waker));
            let acc_shared = Arc::clone(&shared);
            handles.push(
                std::thread::Builder::new()
                    .name("hkv-accept".into())
                    .spawn(move || accept::run(poll, listeners, senders, acc_shared))?,
            );
        }
        let _ = shared.wakers.set(wakers.clone());
        if let Some(a) = admin {
            let ashared = Arc::clone(&shared);
            handles.push(
                std::thread::Builder::new()
                    .name("hkv-admin".into())
                    .spawn(move || admin::serve(a, &ashared))?,
            );
        }
        // memcached's LRU crawler thread: runs `lru_crawler crawl` requests.
        let cshared = Arc::clone(&shared);
        handles.push(
            std::thread::Builder::new()
                .name("hkv-crawler".into())
                .spawn(move || cshared.engine.run_crawler(&cshared.stop))?,
        );
        if let Some(router) = shared.config.hot.clone() {
            let rshared = Arc::clone(&shared);
            handles.push(
                std::thread::Builder::new()
                    .name("hkv-router".into())
                    .spawn(move || train_router(&router, &rshared))?,
            );
        }
        // Each worker sets its loop up on its own thread (an io_uring belongs to the thread
        // that made it): wait for that, so the first client sees every worker as it will be.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while shared.loops_ready.load(Ordering::Acquire) < threads
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        tracing::info!(?addr, threads, "listening");
        Ok(Server {
            addr,
            extra_addrs,
            udp_addr,
            admin_addr,
            shared,
            wakers,
            threads: handles,
        })
    }

    /// The (first) TCP address clients connect to; `None` with a Unix socket (`-s`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The addresses beyond the first that clients may connect to.
    pub fn extra_addrs(&self) -> &[SocketAddr] {
        &self.extra_addrs
    }

    /// Where the admin endpoint (`/metrics`) listens, if it is on.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.udp_addr
    }

    /// Reloads the TLS certificate and key (SIGHUP; the `refresh_certs` command does the
    /// same). None without `-Z`.
    pub fn refresher(&self) -> Option<Arc<Tls>> {
        self.shared.config.tls.clone()
    }

    /// The `-Y` file, to read again on SIGHUP. None without `-Y`.
    pub fn auth_file(&self) -> Option<Arc<AuthFile>> {
        self.shared.config.authfile.clone()
    }

    /// Runs `hook` with the new level whenever a client's `verbosity` changes it (the binary
    /// reloads its log filter there). Only the first hook set is kept.
    pub fn on_verbosity(&self, hook: impl Fn(u8) + Send + Sync + 'static) {
        let _ = self.shared.on_verbosity.set(Box::new(hook));
    }

    /// A handle that stops the server from another thread (a signal handler's thread).
    pub fn stopper(&self) -> Stopper {
        Stopper {
            shared: Arc::clone(&self.shared),
            wakers: self.wakers.clone(),
        }
    }

    /// Waits until the server stops (a `shutdown` command or a [`Stopper`]).
    pub fn wait(self) {
        self.wait_then(|_, _| ());
    }

    /// Waits until every thread has stopped, then hands `f` the engine, quiet, and whether
    /// the stop was a graceful one (SIGUSR1 through [`Stopper::stop_graceful`], or
    /// `shutdown graceful`): the moment to save a warm-restart memory file.
    pub fn wait_then<R>(self, f: impl FnOnce(&Engine, bool) -> R) -> R {
        for t in self.threads {
            let _ = t.join();
        }
        f(
            &self.shared.engine,
            self.shared.graceful.load(Ordering::SeqCst),
        )
    }

    pub fn shutdown(self) {
        self.stopper().stop();
        self.wait();
    }
}

#[derive(Clone)]
pub struct Stopper {
    shared: Arc<Shared>,
    wakers: Vec<Arc<Waker>>,
}

impl Stopper {
    /// memcached's SIGUSR1: stop, and say so to [`Server::wait_then`].
    pub fn stop_graceful(&self) {
        self.shared.graceful.store(true, Ordering::SeqCst);
        self.stop();
    }

    pub fn stop(&self) {
        self.shared.stop_all();
        for w in &self.wakers {
            let _ = w.wake();
        }
    }
}

/// The loop the workers run: io_uring when asked for or when `auto` finds that a ring with
/// everything hkv uses can be set up here (kernel 5.19+, not refused by seccomp or
/// `kernel.io_uring_disabled`), epoll otherwise. Says which in the log.
fn choose_loop(asked: IoMode) -> Result<IoMode, NetError> {
    let chosen = match asked {
        IoMode::Epoll => IoMode::Epoll,
        IoMode::Uring => {
            ring::Ring::new().map_err(NetError::Uring)?;
            IoMode::Uring
        }
        IoMode::Auto => match ring::Ring::new() {
            Ok(_) => IoMode::Uring,
            Err(e) => {
                tracing::info!(error = %e, "io_uring unavailable; using epoll");
                IoMode::Epoll
            }
        },
    };
    tracing::info!(
        event_loop = if chosen == IoMode::Uring {
            "io_uring"
        } else {
            "epoll"
        },
        "event loop"
    );
    Ok(chosen)
}

/// Raises the open-file limit to what `-c` connections need, as memcached does, or refuses
/// to start: past it, accept fails with EMFILE while the server believes it has room.
fn ensure_file_limit(conns: usize, threads: usize, per_thread: usize) -> Result<(), NetError> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    // Listeners, stdio, `per_thread` for each worker, the acceptor's, and room for a device
    // runtime's files.
    let need = conns as u64 + (per_thread * threads) as u64 + 32;
    let lim = getrlimit(Resource::Nofile);
    let cur = lim.current.unwrap_or(u64::MAX);
    if cur >= need {
        return Ok(());
    }
    let max = lim.maximum.unwrap_or(u64::MAX);
    if max >= need {
        let raised = Rlimit {
            current: Some(need),
            maximum: lim.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            tracing::info!(need, "raised the open-file limit for -c");
            return Ok(());
        }
    }
    Err(NetError::FileLimit {
        conns,
        need,
        limit: max,
    })
}

/// Runs a worker; a panic in it (a bug reached by some input) closes that worker's
/// connections and uncounts them (its `Drop`), and the others keep serving. A panic inside the
/// engine poisons a partition, and the next batch to touch it stops the process instead.
/// When the last worker is gone nothing serves (its listening sockets went with it), so
/// the process stops too, for its supervisor to restart it.
fn run_isolated(id: usize, w: worker::Worker, shared: &Shared) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || w.run())).is_err() {
        let lost = shared.stats.worker_panics.fetch_add(1, Ordering::Relaxed) + 1;
        if lost >= shared.config.threads.max(1) as u64 {
            tracing::error!(
                worker = id,
                "the last worker panicked; exiting so the supervisor restarts hkv"
            );
            eprintln!("hkv: every worker was lost to a panic; exiting");
            std::process::exit(70);
        }
        tracing::error!(
            worker = id,
            "worker panicked; its connections were closed, the others keep serving"
        );
    }
}

/// The router's background training (docs/hotcold.md): one epoch every `hot_epoch`.
fn train_router(router: &Router, shared: &Shared) {
    // How often a stop is looked for between retrainings: every 5 ms, an idle server spent
    // 0.8% of a core waking this thread (a hostile probe's idle baseline; memcached's: 0).
    let step = std::time::Duration::from_millis(50);
    let mut next = std::time::Instant::now() + shared.config.hot_epoch;
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(step.min(shared.config.hot_epoch));
        if std::time::Instant::now() < next {
            continue;
        }
        next = std::time::Instant::now() + shared.config.hot_epoch;
        let st = shared.engine.store_stats();
        router.retrain(st.curr_items, st.bytes);
    }
}
