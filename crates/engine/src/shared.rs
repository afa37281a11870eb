//! The engine shared by network worker threads.
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
use hkv_store::{expiry_from_exptime, ClassInfo, ClassReport, Expiry, ReassignError, StoreStats};

mod crawler;
mod scheduling;
mod stage;

use crawler::Crawler;
pub use crawler::{CrawlerDisabled, CrawlerReport};

use crate::engine::{Engine, EngineConfig, EngineError};
use crate::partition::{BatchTiming, Partition};
use crate::schedule::{Arrived, Scheduler};
use crate::stats::EngineStats;
use hkv_types::{Request, Responses};

pub struct SharedEngine {
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

/// Per-class figures for `stats slabs` / `stats items`, summed over partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassStats {
    pub info: ClassInfo,
    pub pages: usize,
    pub items: u64,
}

/// One item as the dump commands list it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemSummary {
    pub key: Vec<u8>,
    pub len: u32,
    /// Raw expiry: 0 never, else a Unix time.
    pub expiry: u32,
    pub atime: u32,
    pub cas: u64,
    pub fetched: bool,
    /// Slab class, 0-based.
    pub class: usize,
}

impl SharedEngine {
    pub fn new(config: &EngineConfig) -> Result<SharedEngine, EngineError> {
        let engine = Engine::new(config)?;
        let layout = engine.layout();
        let (arena, mut parts) = engine.into_partitions();
        let watch = Arc::new(crate::watch::Watch::default());
        for p in &mut parts {
            p.set_watch(Arc::clone(&watch));
        }
        let largest = parts
            .iter()
            .map(|p| p.store().stats().largest_chunk as usize)
            .max()
            .unwrap_or(0);
        Ok(SharedEngine {
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
    /// (KVCG's hot path, docs/hotcold.md): as [`SharedEngine::execute`], but the batch's cost
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
            self.pending[p as usize].store(part.pending_writes(), Ordering::Relaxed);
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

    /// Applies waiting index writes now; an idle worker calls this so writes never wait on
    /// traffic that is not coming.
    pub fn apply_pending(&self) {
        for (p, n) in self.pending.iter().enumerate() {
            if n.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut part = self.lock(p);
            part.apply_pending();
            n.store(part.pending_writes(), Ordering::Relaxed);
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
            self.lock(p).flush_all(at, now);
        }
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = EngineStats::default();
        for p in 0..self.partitions.len() {
            s.add(&self.lock(p).stats());
        }
        s
    }

    /// The workload profile of all partitions together (DIDO's cost-model inputs).
    pub fn profile(&self) -> crate::ProfileReport {
        let parts: Vec<crate::profile::Profile> = (0..self.partitions.len())
            .map(|p| self.lock(p).profile.clone())
            .collect();
        crate::profile::Profile::report(&parts)
    }

    pub fn store_stats(&self) -> StoreStats {
        let mut s = StoreStats::default();
        for p in 0..self.partitions.len() {
            s.add(&self.lock(p).store_stats());
        }
        s
    }

    pub fn evictions(&self) -> u64 {
        (0..self.partitions.len())
            .map(|p| self.lock(p).evictions())
            .sum()
    }

    /// The indexes' size, load and displacement figures, over all partitions.
    pub fn index_report(&self) -> crate::IndexReport {
        let mut r = crate::IndexReport::default();
        for p in 0..self.partitions.len() {
            r.add(&self.lock(p).index_report());
        }
        r
    }

    pub fn index_bytes(&self) -> usize {
        use hkv_index::IndexBackend;
        (0..self.partitions.len())
            .map(|p| self.lock(p).index().table_bytes())
            .sum()
    }

    /// Each partition's index backend ("cpu" or "opencl:<device>").
    pub fn backends(&self) -> Vec<String> {
        (0..self.partitions.len())
            .map(|p| self.lock(p).backend_name())
            .collect()
    }

    /// Summed over partitions: device batches, copy ns, kernel ns (None: no device).
    pub fn device_timing(&self) -> Option<(u64, u64, u64)> {
        let mut total: Option<(u64, u64, u64)> = None;
        for p in 0..self.partitions.len() {
            if let Some((b, c, k)) = self.lock(p).device_timing() {
                let t = total.get_or_insert((0, 0, 0));
                *t = (t.0 + b, t.1 + c, t.2 + k);
            }
        }
        total
    }

    /// Where vector updates run, and from which value size on the device (partition 0).
    pub fn vector_placement(&self) -> (crate::VectorPlacement, Option<usize>) {
        self.lock(0).vector_placement()
    }

    /// The cost model of every partition, summed (per-query lines averaged).
    pub fn placement_report(&self) -> crate::PlacementReport {
        let mut r = crate::PlacementReport::default();
        for p in 0..self.partitions.len() {
            let part = self.lock(p).placement_report();
            if p == 0 {
                r.current = part.current;
            }
            r.add(&part);
        }
        r.scale_lines(self.partitions.len());
        r
    }

    /// Whether device-placed searches are shared with the partition threads.
    pub fn steals(&self) -> bool {
        self.lock(0).steals()
    }

    /// `--placement` and whether the device shares the CPU's table.
    pub fn placement(&self) -> (crate::Placement, bool) {
        self.lock(0).placement()
    }

    /// Which table the device works on (first partition).
    pub fn device_table(&self) -> crate::DeviceTable {
        self.lock(0).device_table()
    }

    pub fn device_zero_copy(&self) -> Option<bool> {
        self.lock(0).device_zero_copy()
    }

    /// Device failures survived by falling back to the CPU backend.
    pub fn fallbacks(&self) -> u64 {
        (0..self.partitions.len())
            .map(|p| self.lock(p).fallbacks())
            .sum()
    }

    /// Up to `limit` live items (of slab class `class` when given, 0-based), for
    /// `stats cachedump` and `lru_crawler metadump`. Holds one partition at a time.
    pub fn items(&self, class: Option<usize>, limit: usize, now: u32) -> Vec<ItemSummary> {
        let mut out = Vec::new();
        for p in 0..self.partitions.len() {
            let part = self.lock(p);
            part.store().for_each_item(now, |c, item| {
                if class.is_none_or(|want| want == c) {
                    out.push(ItemSummary::of(c, &item));
                }
                out.len() < limit
            });
            if out.len() >= limit {
                break;
            }
        }
        out
    }

    /// The `limit` most recently written live items of slab class `class` (0-based),
    /// newest first: the order memcached's `stats cachedump` walks its LRU in (CAS values
    /// grow with every write: exact within a partition; partitions' counters interleave, so
    /// across partitions the order is close, not exact). Memory is bounded by `limit`, not by the store: a first pass
    /// keeps only the `limit` highest CAS values, a second collects those items.
    pub fn newest_items(&self, class: usize, limit: usize, now: u32) -> Vec<ItemSummary> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        if limit == 0 {
            return Vec::new();
        }
        let mut top: BinaryHeap<Reverse<u64>> = BinaryHeap::with_capacity(limit.min(1 << 20));
        for p in 0..self.partitions.len() {
            self.lock(p).store().for_each_item(now, |c, item| {
                if c == class {
                    let cas = item.cas();
                    if top.len() < limit {
                        top.push(Reverse(cas));
                    } else if top.peek().is_some_and(|m| cas > m.0) {
                        top.pop();
                        top.push(Reverse(cas));
                    }
                }
                true
            });
        }
        let Some(&Reverse(floor)) = top.peek() else {
            return Vec::new();
        };
        drop(top);
        let mut out = Vec::new();
        for p in 0..self.partitions.len() {
            self.lock(p).store().for_each_item(now, |c, item| {
                if c == class && item.cas() >= floor {
                    out.push(ItemSummary::of(c, &item));
                }
                // Items written between the passes are newer still; the list stays bounded.
                out.len() < 2 * limit
            });
        }
        out.sort_unstable_by_key(|i| std::cmp::Reverse(i.cas));
        out.truncate(limit);
        out
    }

    /// `slabs reassign <from> <to>` (0-based classes): one page moves in every partition
    /// that has one to spare; the first partition's refusal otherwise.
    pub fn reassign(&self, from: usize, to: usize, now: u32) -> Result<(), ReassignError> {
        let mut first_err = None;
        let mut moved = false;
        for p in 0..self.partitions.len() {
            match self.lock(p).reassign(from, to, now) {
                Ok(()) => moved = true,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match (moved, first_err) {
            (true, _) | (false, None) => Ok(()),
            (false, Some(e)) => Err(e),
        }
    }

    /// `slabs automove 0|1|2`: whether a class without a page takes one from another.
    pub fn set_automove(&self, on: bool) {
        for p in 0..self.partitions.len() {
            self.lock(p).set_automove(on);
        }
    }

    /// Whether live items are evicted for room (false with `-M`).
    pub fn evictions_enabled(&self) -> bool {
        self.lock(0).store().evictions_enabled()
    }

    /// False with `-C`.
    pub fn cas_enabled(&self) -> bool {
        self.lock(0).store().cas_enabled()
    }

    pub fn automove(&self) -> bool {
        self.lock(0).store().automove()
    }

    /// Every slab class with its counters, summed over the partitions.
    pub fn class_reports(&self) -> Vec<ClassReport> {
        let mut out: Vec<ClassReport> = Vec::new();
        for p in 0..self.partitions.len() {
            let part = self.lock(p);
            for (i, r) in part.store().class_reports().enumerate() {
                match out.get_mut(i) {
                    Some(c) => {
                        c.pages += r.pages;
                        c.items += r.items;
                        c.parts += r.parts;
                        c.untouched += r.untouched;
                        let (a, b) = (&mut c.counts, r.counts);
                        a.sets += b.sets;
                        a.hits += b.hits;
                        a.delete_hits += b.delete_hits;
                        a.incr_hits += b.incr_hits;
                        a.decr_hits += b.decr_hits;
                        a.cas_hits += b.cas_hits;
                        a.cas_badval += b.cas_badval;
                        a.touch_hits += b.touch_hits;
                        a.evicted_time = a.evicted_time.max(b.evicted_time);
                        a.evicted += b.evicted;
                        a.evicted_nonzero += b.evicted_nonzero;
                        a.evicted_unfetched += b.evicted_unfetched;
                        a.expired_unfetched += b.expired_unfetched;
                        a.reclaimed += b.reclaimed;
                        a.out_of_memory += b.out_of_memory;
                        a.bytes += b.bytes;
                    }
                    None => out.push(r),
                }
            }
        }
        out
    }

    pub fn class_stats(&self) -> Vec<ClassStats> {
        let mut out: Vec<ClassStats> = Vec::new();
        for p in 0..self.partitions.len() {
            let part = self.lock(p);
            for (i, (info, pages, items)) in part.store().classes().enumerate() {
                match out.get_mut(i) {
                    Some(c) => {
                        c.pages += pages;
                        c.items += items;
                    }
                    None => out.push(ClassStats { info, pages, items }),
                }
            }
        }
        out
    }
}

impl ItemSummary {
    fn of(class: usize, item: &hkv_store::Item<'_>) -> ItemSummary {
        ItemSummary {
            key: item.key().to_vec(),
            len: item.value_len() as u32,
            expiry: item.expiry(),
            atime: item.atime(),
            cas: item.cas(),
            fetched: item.bits() & hkv_store::FETCHED != 0,
            class,
        }
    }
}
