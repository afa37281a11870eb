//! What the engine reports: its partitions' figures summed, or the first partition's
//! settings (the same in every partition), for `stats` and the dump commands.

use hkv_store::{ClassInfo, ClassReport, CrawlCursor, ReassignError, StoreStats};

use super::crawler::CRAWL_SLICE;

/// Chunks of a class a `stats cachedump` may walk per partition when the class's ring of
/// newest writes holds fewer items than asked for: ~1 ms of walking.
const DUMP_WALK: u32 = 64 * 1024;
use super::Engine;
use crate::stats::EngineStats;

/// Per-class figures for `stats slabs` / `stats items`, summed over partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassStats {
    pub info: ClassInfo,
    pub pages: usize,
    pub items: u64,
}

/// Where a listing of items ([`Engine::items_from`]) goes on from; starts at `default()`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ItemsCursor {
    partition: usize,
    store: CrawlCursor,
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

impl Engine {
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

    /// Up to `limit` live items (of the slab classes `classes` when given, 0-based; only
    /// those are walked, in the order given: a class named twice is walked twice).
    pub fn items(&self, classes: Option<&[usize]>, limit: usize, now: u32) -> Vec<ItemSummary> {
        let mut out = Vec::new();
        let mut at = ItemsCursor::default();
        while out.len() < limit && !self.items_through(&at) {
            let mut chunks = u32::MAX;
            self.items_from(
                &mut at,
                classes,
                now,
                limit - out.len(),
                &mut chunks,
                &mut out,
            );
        }
        out.truncate(limit);
        out
    }

    /// The next live items of `classes` (all when `None`) from `at`, for `lru_crawler
    /// metadump`, which streams them as its client reads: partition by partition in storage
    /// order, until about `want` are added to `out` (never more than `want`), `chunks`
    /// chunks are examined (taken off it: a stretch of free or expired chunks is walked in
    /// bounded steps too) or the walk is through ([`Engine::items_through`]). Each
    /// partition's lock is held for at most `want` chunks at a time. Not a snapshot, as
    /// memcached's crawler is not: an item written or moved between calls may be listed
    /// twice or not at all.
    pub fn items_from(
        &self,
        at: &mut ItemsCursor,
        classes: Option<&[usize]>,
        now: u32,
        want: usize,
        chunks: &mut u32,
        out: &mut Vec<ItemSummary>,
    ) {
        let goal = out.len() + want;
        while at.partition < self.partitions.len() && out.len() < goal && *chunks > 0 {
            let slice = u32::try_from(goal - out.len())
                .map_or(CRAWL_SLICE, |n| n.min(CRAWL_SLICE))
                .min(*chunks);
            let examined = self.lock(at.partition).store().scan_items(
                now,
                classes,
                &mut at.store,
                slice,
                |c, item| {
                    out.push(ItemSummary::of(c, &item));
                    true
                },
            );
            *chunks = chunks.saturating_sub(examined);
            if at.store.done {
                at.partition += 1;
                at.store = CrawlCursor::default();
            }
        }
    }

    /// Whether a walk of [`Engine::items_from`] has listed every partition.
    pub fn items_through(&self, at: &ItemsCursor) -> bool {
        at.partition >= self.partitions.len()
    }

    /// Up to `limit` live items of slab class `class` (0-based), newest first, for `stats
    /// cachedump`: of each partition, its items among the class's last
    /// [`hkv_store::RECENT_WRITES`] writes, then others from its first [`DUMP_WALK`] chunks.
    /// memcached lists the head of the class's COLD LRU, where items arrive from HOT soon
    /// after they are written, walking no more items than it prints; here too the work is
    /// bounded, not a walk of the whole class. CAS values grow with every write: the order is
    /// exact within a partition; partitions' counters interleave, so across partitions it is
    /// close, not exact. At most twice `limit` items are held at a time.
    pub fn newest_items(&self, class: usize, limit: usize, now: u32) -> Vec<ItemSummary> {
        let mut out = Vec::new();
        for p in 0..self.partitions.len() {
            let mut taken = 0;
            self.lock(p)
                .store()
                .newest_items(class, now, DUMP_WALK, |item| {
                    out.push(ItemSummary::of(class, &item));
                    taken += 1;
                    taken < limit
                });
            // Stable: with CAS off (`-C`) every CAS is 0, and the partitions' own order stays.
            out.sort_by_key(|i| std::cmp::Reverse(i.cas));
            out.truncate(limit);
        }
        out
    }

    /// `slabs reassign <from> <to>` (0-based classes; `from` None for memcached's `-1`, each
    /// partition picking its own source): one page moves in every partition that has one to
    /// spare; the first partition's refusal otherwise.
    pub fn reassign(&self, from: Option<usize>, to: usize, now: u32) -> Result<(), ReassignError> {
        let mut first_err = None;
        let mut moved = false;
        for p in 0..self.partitions.len() {
            let mut part = self.lock(p);
            // A reassign applies the waiting index writes first.
            let r = part.reassign(from, to, now);
            self.note_pending(p, &part);
            match r {
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
                    Some(c) => c.add(&r),
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

    /// Starts (or stops) logging the key of every evicted item.
    pub fn log_evictions(&self, on: bool) {
        for p in 0..self.partitions.len() {
            self.lock(p).log_evictions(on);
        }
    }

    /// The keys evicted since the last call (one entry per eviction), when logging.
    pub fn take_evicted_keys(&self) -> Vec<Vec<u8>> {
        (0..self.partitions.len())
            .flat_map(|p| self.lock(p).take_evicted_keys())
            .collect()
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
