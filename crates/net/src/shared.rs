//! What every worker thread shares.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use hkv_engine::Engine;
use mio::Waker;

use crate::config::NetConfig;
use crate::counters::{Baseline, ServerStats};

/// Where each new connection goes: a worker's queue and the waker that tells it.
pub(crate) type Workers = Vec<(std::sync::mpsc::Sender<crate::stream::Stream>, Arc<Waker>)>;

/// What workers share.
pub(crate) struct Shared {
    pub engine: Engine,
    pub config: NetConfig,
    pub stats: ServerStats,
    /// Counter values at the last `stats reset`.
    pub stats_base: std::sync::Mutex<Baseline>,
    pub stop: AtomicBool,
    /// The stop is memcached's graceful one (SIGUSR1, `shutdown graceful`): the caller of
    /// [`crate::Server::wait`] saves the warm-restart memory file.
    pub graceful: AtomicBool,
    /// Every thread's waker, so any thread can stop the server.
    pub wakers: std::sync::OnceLock<Vec<Arc<Waker>>>,
    pub started: std::time::Instant,
    /// `stats conns`: the client connections, and the listening sockets (fd, address).
    pub conns: crate::stats::conns::ConnRegistry,
    pub listeners: Vec<(i32, String)>,
    /// Workers accept TCP connections on their own sockets (`--accept`, as it turned out).
    pub accept_workers: bool,
    /// Connections each worker holds (for the balance of `--accept workers`).
    pub worker_conns: Vec<std::sync::atomic::AtomicUsize>,
    /// Each worker's queue of handed-over connections and its waker.
    pub handoff: std::sync::OnceLock<Workers>,
    /// `stats detail`.
    pub detail: crate::stats::detail::PrefixStats,
    /// Workers whose event loop is set up (the server is ready when all are).
    pub loops_ready: std::sync::atomic::AtomicUsize,
    /// The logging level: `-v` at start, then what `verbosity` set.
    pub verbosity: AtomicU8,
    /// What the embedding program does when `verbosity` changes the level (the binary
    /// reloads its log filter).
    pub on_verbosity: std::sync::OnceLock<VerbosityHook>,
}

pub type VerbosityHook = Box<dyn Fn(u8) + Send + Sync>;

impl Shared {
    pub(crate) fn set_verbosity(&self, level: u8) {
        self.verbosity.store(level, Ordering::Relaxed);
        if let Some(hook) = self.on_verbosity.get() {
            hook(level);
        }
    }

    /// Stops every thread: sets the flag, then wakes each event loop to see it.
    pub(crate) fn stop_all(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.wakers.get().into_iter().flatten() {
            let _ = w.wake();
        }
    }
}
