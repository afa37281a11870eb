//! The engine: every partition, shared by the threads that run batches (network workers,
//! or one caller). `Engine::into_partitions` hands the partitions out instead, to threads
//! that each own one and take no lock (the engine benchmark).
//!
//! Each partition sits behind its own mutex, taken once per batch: a worker locks a partition,
//! runs every request of its batch that the partition owns, and lets go. The lock is therefore
//! amortised over the whole batch (one event-loop pass of one worker), and with as many
//! partitions as workers two workers rarely want the same one at the same moment.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use hkv_index::KeyHash;
use hkv_mem::Arena;
use hkv_store::{expiry_from_exptime, Expiry};

mod build;
mod config;
mod crawler;
mod report;
mod scheduling;
mod stage;

use crawler::Crawler;
pub use crawler::{CrawlError, CrawlerReport};
pub use report::{ClassStats, ItemSummary, ItemsCursor};

use crate::partition::{BatchTiming, Partition};
use crate::schedule::{Arrived, Scheduler};
pub use config::{Backend, EngineConfig, EngineError};
use hkv_types::{Request, Responses};

pub struct Engine {
    arena: Arc<Arena>,
    partitions: Vec<Mutex<Partition>>,
    /// Chooses the batch interval C from the batches' measured costs (Mega-KV §5).
    scheduler: Mutex<Scheduler>,
    /// Model time zero for the scheduler.
    epoch: Instant,
    /// The same on the coarse clock (microseconds), for arrival counting.
    coarse_epoch_us: u64,
    /// Each partition's waiting index writes, as of its last batch (read without its lock).
    pending: Vec<AtomicUsize>,
    /// The scheduler's C is above zero: index writes wait for a batch every n x C.
    periodic: AtomicBool,
    /// The largest chunk any partition has put in use (`StoreStats::largest_chunk`), kept
    /// here so callers can bound a read's size without taking a lock.
    largest_chunk: AtomicUsize,
    /// Where things lie in the arena and the memory file, for a warm-restart save.
    layout: (crate::warm::Geometry, Option<std::path::PathBuf>),
    /// `watch` log streams; the partitions write evictions to it, the server the rest.
    watch: Arc<crate::watch::Watch>,
    /// memcached's LRU crawler settings (`lru_crawler ...`), served by the expiry sweep.
    crawler: Crawler,
    /// Chunk size of each slab class (the same in every partition), for `item_class`.
    chunks: Vec<usize>,
}

/// Per-caller scratch, so batches allocate nothing once warm.
#[derive(Default)]
pub struct Scratch {
    hashes: Vec<KeyHash>,
    owners: Vec<u32>,
    /// Which of this caller's batches are timed.
    sampler: crate::Sampler,
    /// This caller's batches not yet shown to the scheduler.
    arrived: Arrived,
}

impl Scratch {
    /// The 64-bit hash of the key of each request of the last batch run with this scratch
    /// (what [`crate::key_hash`] gives), for callers that bin keys by it.
    pub fn key_hashes(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.hashes.iter().map(crate::wide_hash)
    }
}

impl Engine {
    pub fn new(config: &EngineConfig) -> Result<Engine, EngineError> {
        let build::Built {
            arena,
            partitions: mut parts,
            geometry,
            memory_file,
        } = build::build(config)?;
        let layout = (geometry, memory_file);
        let watch = Arc::new(crate::watch::Watch::default());
        for p in &mut parts {
            p.set_watch(Arc::clone(&watch));
        }
        let largest = parts
            .iter()
            .map(|p| p.store().stats().largest_chunk as usize)
            .max()
            .unwrap_or(0);
        Ok(Engine {
            arena,
            pending: parts.iter().map(|_| AtomicUsize::new(0)).collect(),
            partitions: parts.into_iter().map(Mutex::new).collect(),
            periodic: AtomicBool::new(config.schedule.min_us > 0.0),
            scheduler: Mutex::new(Scheduler::new(config.schedule)),
            epoch: Instant::now(),
            coarse_epoch_us: crate::clock::coarse_us(),
            largest_chunk: AtomicUsize::new(largest),
            layout,
            watch,
            crawler: Crawler::default(),
            chunks: hkv_store::chunk_sizes(config.growth_factor, config.page_size),
        })
    }

    /// memcached's 1-based class id of an item with this key and value (the class of a
    /// chained item's header), as `me` and `watch` print it; 0 if none holds it.
    pub fn item_class(&self, key_len: usize, value_len: usize) -> usize {
        hkv_store::item_class(&self.chunks, key_len, value_len).map_or(0, |c| c + 1)
    }

    /// The `watch` log hub.
    pub fn watch(&self) -> &crate::watch::Watch {
        &self.watch
    }

    /// A clean stop's save for a warm restart (memcached's `-e`, on SIGUSR1; see
    /// [`crate::warm`]). Every partition is locked for the whole save, and stays locked: no
    /// batch may run after it (it would change pages the save described).
    pub fn save_memory_file(&self) -> Result<crate::warm::SaveSummary, EngineError> {
        let (geometry, path) = self.layout.clone();
        let path = path.ok_or_else(|| EngineError::Config("no memory file (-e)".into()))?;
        let mut guards: Vec<_> = (0..self.partitions.len()).map(|p| self.lock(p)).collect();
        for g in guards.iter_mut() {
            g.apply_pending();
        }
        let parts: Vec<&Partition> = guards.iter().map(|g| &**g).collect();
        let saved = crate::warm::save(&path, &self.arena, geometry, &parts)?;
        // Held until the process exits: later batches would make the save a lie.
        std::mem::forget(guards);
        Ok(saved)
    }

    /// The `-e` memory file, if any.
    pub fn memory_file(&self) -> Option<&std::path::Path> {
        self.layout.1.as_deref()
    }

    fn lock(&self, p: usize) -> MutexGuard<'_, Partition> {
        // A panic while a partition was locked may have left its index and store half
        // updated (an item linked but not counted, a chunk freed but still indexed). Serving
        // from it could hand out another key's bytes, so the process stops with a clear line
        // for its supervisor instead (docs/reliability.md).
        match self.partitions[p].lock() {
            Ok(mut g) => {
                // Chunks whose sends ended are reusable before this caller allocates.
                g.drain_unpins();
                g
            }
            Err(_) => {
                tracing::error!(
                    partition = p,
                    "a worker panicked inside the engine; the partition may be half updated, \
                     exiting so the supervisor restarts hkv"
                );
                eprintln!("hkv: engine partition {p} poisoned by a panic; exiting");
                std::process::exit(70)
            }
        }
    }

    pub fn partitions(&self) -> usize {
        self.partitions.len()
    }

    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// Executes a batch; appends one response per request, in request order.
    pub fn execute(&self, reqs: &[Request<'_>], now: u32, out: &mut Responses, s: &mut Scratch) {
        self.execute_as(reqs, now, out, s, true);
    }

    /// Executes the hot reads a worker answers without waiting for the batch interval
    /// (KVCG's hot path, docs/hotcold.md): as [`Engine::execute`], but the batch's cost
    /// is not fed to the scheduler, whose model is of the periodic batches.
    pub fn execute_express(
        &self,
        reqs: &[Request<'_>],
        now: u32,
        out: &mut Responses,
        s: &mut Scratch,
    ) {
        self.execute_as(reqs, now, out, s, false);
    }

    fn execute_as(
        &self,
        reqs: &[Request<'_>],
        now: u32,
        out: &mut Responses,
        s: &mut Scratch,
        scheduled: bool,
    ) {
        let n = self.partitions.len() as u32;
        let mut timing = BatchTiming::default();
        let scratch = (&mut s.hashes, &mut s.owners, &mut s.sampler);
        crate::route::run_batch(n, reqs, now, out, scratch, |p, run| {
            let mut part = self.lock(p as usize);
            self.set_delay(&mut part);
            run(&mut part);
            timing.add(&part.take_timing());
            self.note_largest(&part);
            self.note_pending(p as usize, &part);
        });
        if scheduled {
            self.observe(&timing, &mut s.arrived);
        }
    }

    fn note_largest(&self, p: &Partition) {
        let l = p.store().stats().largest_chunk as usize;
        if l > self.largest_chunk.load(Ordering::Relaxed) {
            self.largest_chunk.fetch_max(l, Ordering::Relaxed);
        }
    }

    /// An upper bound on the length of any value a read can return now: the largest chunk
    /// in use (values never outgrow their chunk). 0 before anything is stored.
    pub fn largest_value_bound(&self) -> usize {
        self.largest_chunk.load(Ordering::Relaxed)
    }

    /// Whether any partition has index writes waiting for their delayed batch.
    pub fn has_pending_writes(&self) -> bool {
        self.pending.iter().any(|p| p.load(Ordering::Relaxed) > 0)
    }

    /// Index writes waiting in the same-key tables (the `pending_writes` stat).
    pub fn pending_writes(&self) -> usize {
        self.pending.iter().map(|p| p.load(Ordering::Relaxed)).sum()
    }

    /// Records partition `p`'s waiting index writes, read under its lock, for the callers
    /// that check them without it (the `pending_writes` stat, idle workers). Whatever
    /// applies or drops them calls this, so the count is never stale past that call.
    fn note_pending(&self, p: usize, part: &Partition) {
        self.pending[p].store(part.pending_writes(), Ordering::Relaxed);
    }

    /// Applies waiting index writes now; an idle worker calls this so writes never wait on
    /// traffic that is not coming.
    pub fn apply_pending(&self) {
        for (p, n) in self.pending.iter().enumerate() {
            if n.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut part = self.lock(p);
            part.apply_pending();
            self.note_pending(p, &part);
            // Idle time: not a batch the scheduler should fit its costs to.
            part.take_timing();
        }
    }

    fn set_delay(&self, part: &mut Partition) {
        let on = part.device_writes() || self.periodic.load(Ordering::Relaxed);
        part.set_write_delay(on);
    }

    /// `flush_all [delay]` with memcached's exptime rules for the delay.
    pub fn flush_all(&self, delay: i64, now: u32) {
        let at = match expiry_from_exptime(delay, now) {
            Expiry::At(t) => t,
            Expiry::Never | Expiry::AlreadyExpired => now,
        };
        for p in 0..self.partitions.len() {
            let mut part = self.lock(p);
            part.flush_all(at, now);
            // A flush drops the waiting index writes.
            self.note_pending(p, &part);
        }
    }

    /// `flush_all` at an absolute time from before the server started: memcached flushes
    /// nothing then (its `realtime()` makes the time 1, and `oldest_live` 0, "no flush"),
    /// and a delayed flush still to come is called off.
    pub fn cancel_flush(&self) {
        for p in 0..self.partitions.len() {
            self.lock(p).cancel_flush();
        }
    }

    /// Partition `p`, locked (tests and tools look inside; a batch run while it is held
    /// would wait for it).
    pub fn partition(&self, p: usize) -> MutexGuard<'_, Partition> {
        self.lock(p)
    }

    /// Which partition owns `key`, out of `partitions`.
    pub fn partition_of(key: &[u8], partitions: u32) -> u32 {
        hkv_index::hash_key(key).partition(partitions)
    }

    /// Hands each partition to its own thread; `partition_of` says which keys go where.
    pub fn into_partitions(self) -> (Arc<Arena>, Vec<Partition>) {
        let parts = self.partitions.into_iter();
        let parts = parts.map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()));
        (self.arena, parts.collect())
    }
}
