//! A partition's index: the CPU table, or a device table with the CPU one held in reserve.
//!
//! If any device call fails (kernel, copy, context), the device is dropped for good and the
//! CPU table is rebuilt from the items in host memory (`SlabStore::for_each_live`), then the
//! operation is done on the CPU. No stored item is lost because the device went away.

use hkv_index::opencl::OclIndex;
use hkv_index::{
    hash_key, CpuIndex, IndexBackend, IndexError, IndexStats, InsertOutcome, KeyHash, Location,
};
use hkv_mem::Arena;
use hkv_store::SlabStore;

/// Load above which a table doubles when the budget has room for the larger one. A 2x8
/// bucketed cuckoo table first fails an insert near 0.97 (crates/index/tests/load.rs);
/// growing earlier keeps displacement walks short.
pub(crate) const GROW_LOAD: f64 = 0.85;
/// Buckets per partition a table may grow to (the sizing's own bound).
const MAX_BUCKETS: u32 = 1 << 27;

/// Load past [`GROW_LOAD`] at which the store stops adding items when the table cannot grow:
/// new items then replace CLOCK victims (under the ~0.97 at which displacement first fails).
pub(crate) const CAP_LOAD: f64 = 0.93;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    NotNeeded,
    Grow,
    /// Memory is too full for a larger table.
    NoRoom,
}

/// What a partition's index reports in `stats hkv`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IndexReport {
    pub entries: u64,
    pub slots: u64,
    pub grows: u64,
    pub displacements: u64,
    pub walks: u64,
    pub longest_walk: u64,
    /// Partitions whose store stopped adding items because the index could not grow.
    pub capped: u64,
}

impl IndexReport {
    pub fn add(&mut self, o: &IndexReport) {
        self.entries += o.entries;
        self.slots += o.slots;
        self.grows += o.grows;
        self.displacements += o.displacements;
        self.walks += o.walks;
        self.longest_walk = self.longest_walk.max(o.longest_walk);
        self.capped += o.capped;
    }
}

pub(crate) struct Index {
    cpu: CpuIndex,
    device: Option<OclIndex>,
    /// A device call failed where the store could not be reached (inside a reclaim
    /// callback); rebuild before anything else touches the index.
    pending_rebuild: bool,
    pub fallbacks: u64,
    /// Times the CPU table was rebuilt from the store (whoever caches index state checks it).
    pub rebuilds: u64,
    pub last_error: Option<String>,
    /// Times the table doubled.
    pub grows: u64,
    /// Counters of the tables that were replaced by larger ones.
    carried: IndexStats,
}

impl Index {
    pub fn new(cpu: CpuIndex, device: Option<OclIndex>) -> Index {
        Index {
            cpu,
            device,
            pending_rebuild: false,
            fallbacks: 0,
            rebuilds: 0,
            last_error: None,
            grows: 0,
            carried: IndexStats::default(),
        }
    }

    fn live_stats(&self) -> IndexStats {
        match &self.device {
            Some(d) => d.stats(),
            None => self.cpu.stats(),
        }
    }

    pub fn report(&self) -> IndexReport {
        let s = self.live_stats();
        IndexReport {
            entries: s.entries,
            slots: self.cpu.bucket_count() as u64 * hkv_index::SLOTS as u64,
            grows: self.grows,
            displacements: s.displacements + self.carried.displacements,
            walks: s.walks + self.carried.walks,
            longest_walk: s.longest_walk.max(self.carried.longest_walk),
            capped: 0,
        }
    }

    /// Whether `incoming` more entries would load it past [`GROW_LOAD`], and if so whether
    /// `arena` has room for a table twice the size.
    pub fn growth(&self, arena: &Arena, page_size: usize, incoming: usize) -> Growth {
        let buckets = self.cpu.bucket_count();
        let slots = buckets as u64 * hkv_index::SLOTS as u64;
        let entries = self.live_stats().entries + incoming as u64;
        if entries as f64 <= GROW_LOAD * slots as f64 {
            Growth::NotNeeded
        } else if buckets < MAX_BUCKETS && {
            // The new table comes from the bump, aligned as CpuIndex::new aligns it.
            let bytes = buckets as usize * 2 * 64;
            let align = hkv_mem::HUGE_PAGE.min(bytes.next_power_of_two());
            arena.bump_available() >= bytes + align + page_size
        } {
            Growth::Grow
        } else {
            Growth::NoRoom
        }
    }

    /// Slots in the table.
    pub fn slots(&self) -> u64 {
        self.cpu.bucket_count() as u64 * hkv_index::SLOTS as u64
    }

    /// Doubles the table if `arena` has room for the new one (else memory is truly full and
    /// displacement may evict), recycles the old table's memory as slab pages, and indexes
    /// every live item of `store` again (on the device too, resized in place). Delayed
    /// index writes must have been applied. Returns the items that found no slot, to free;
    /// None when the table stays as it is.
    pub fn grow(
        &mut self,
        store: &SlabStore,
        arena: &Arena,
        page_size: usize,
    ) -> Option<Vec<Location>> {
        let buckets = self.cpu.bucket_count().checked_mul(2)?;
        let table = CpuIndex::new(arena, buckets).ok()?;
        let old = std::mem::replace(&mut self.cpu, table);
        let s = old.stats();
        self.carried.displacements += s.displacements;
        self.carried.walks += s.walks;
        self.carried.longest_walk = self.carried.longest_walk.max(s.longest_walk);
        arena.recycle(old.into_memory(), page_size);
        if let Some(d) = &mut self.device {
            let ds = d.stats();
            self.carried.displacements += ds.displacements;
            self.carried.walks += ds.walks;
            if let Err(e) = d.resize(buckets) {
                self.fail(e);
            }
        }
        self.grows += 1;
        let mut entries = Vec::new();
        store.for_each_live(|key, loc| entries.push((hash_key(key), loc)));
        let mut out = Vec::new();
        let mut dropped = Vec::new();
        self.insert_many(store, &entries, &mut out, &mut dropped);
        dropped.extend(out.iter().filter_map(|o| match o {
            InsertOutcome::Inserted => None,
            InsertOutcome::Replaced(old) | InsertOutcome::Evicted(old) => Some(*old),
        }));
        Some(dropped)
    }

    pub fn cpu(&self) -> &CpuIndex {
        &self.cpu
    }

    /// "cpu", or "opencl:<device>".
    pub fn backend_name(&self) -> String {
        match &self.device {
            Some(d) => format!("opencl:{}", d.device().name),
            None => "cpu".into(),
        }
    }

    /// (batches, copy ns, kernel ns) of the device, if one is in use.
    pub fn device_timing(&self) -> Option<(u64, u64, u64)> {
        self.device.as_ref().map(|d| d.timing())
    }

    /// The device holding the index, if any.
    pub fn device(&self) -> Option<&OclIndex> {
        self.device.as_ref()
    }

    /// Whether the device reads search inputs in place (None: no device).
    pub fn zero_copy(&self) -> Option<bool> {
        self.device.as_ref().map(|d| d.zero_copy())
    }

    fn fail(&mut self, e: IndexError) {
        tracing::error!(error = %e, "index device failed; falling back to the CPU backend");
        self.device = None;
        self.fallbacks += 1;
        self.last_error = Some(e.to_string());
    }

    /// Drops the device and rebuilds the CPU table from every item in `store`. Items whose
    /// index slot is taken by a signature collision are returned to the caller to free.
    fn rebuild(&mut self, store: &SlabStore) -> Vec<Location> {
        self.pending_rebuild = false;
        self.rebuilds += 1;
        self.cpu.clear();
        let mut dropped = Vec::new();
        store.for_each_live(|key, loc| match self.cpu.insert_one(&hash_key(key), loc) {
            InsertOutcome::Inserted => {}
            InsertOutcome::Replaced(old) | InsertOutcome::Evicted(old) => dropped.push(old),
        });
        dropped
    }

    /// Rebuilds if a failure is pending; returns locations the rebuild had to drop.
    pub fn settle(&mut self, store: &SlabStore) -> Vec<Location> {
        if self.pending_rebuild {
            self.rebuild(store)
        } else {
            Vec::new()
        }
    }

    fn on_error(&mut self, e: IndexError, store: &SlabStore) -> Vec<Location> {
        self.fail(e);
        self.rebuild(store)
    }

    pub fn search(
        &mut self,
        store: &SlabStore,
        hashes: &[KeyHash],
        out: &mut [Location],
        dropped: &mut Vec<Location>,
    ) {
        if let Some(d) = &self.device {
            match d.try_search(hashes, out) {
                Ok(()) => return,
                Err(e) => dropped.extend(self.on_error(e, store)),
            }
        }
        self.cpu.search(hashes, out);
    }

    pub fn search_one(
        &mut self,
        store: &SlabStore,
        h: &KeyHash,
        dropped: &mut Vec<Location>,
    ) -> Location {
        let mut out = [hkv_index::NO_LOCATION];
        if let Some(d) = &self.device {
            match d.try_search(std::slice::from_ref(h), &mut out) {
                Ok(()) => return out[0],
                Err(e) => dropped.extend(self.on_error(e, store)),
            }
        }
        self.cpu.search_one(h)
    }

    pub fn insert_one(
        &mut self,
        store: &SlabStore,
        h: &KeyHash,
        loc: Location,
        dropped: &mut Vec<Location>,
    ) -> InsertOutcome {
        if let Some(d) = &mut self.device {
            let mut out = [InsertOutcome::Inserted];
            match d.try_insert(&[(*h, loc)], &mut out) {
                Ok(()) => return out[0],
                Err(e) => dropped.extend(self.on_error(e, store)),
            }
        }
        self.cpu.insert_one(h, loc)
    }

    pub fn delete_one(
        &mut self,
        store: &SlabStore,
        h: &KeyHash,
        loc: Location,
        dropped: &mut Vec<Location>,
    ) -> bool {
        if let Some(d) = &mut self.device {
            let mut out = [false];
            match d.try_delete(&[(*h, loc)], &mut out) {
                Ok(()) => return out[0],
                Err(e) => dropped.extend(self.on_error(e, store)),
            }
        }
        self.cpu.delete_one(h, loc)
    }

    /// Inserts a batch (the delayed writes of a partition) in one device call; `out` gets one
    /// outcome per entry. After a device failure the rebuilt table already holds every live
    /// item, so the batch is not redone (the caller sees `rebuilds` move).
    pub fn insert_many(
        &mut self,
        store: &SlabStore,
        entries: &[(KeyHash, Location)],
        out: &mut Vec<InsertOutcome>,
        dropped: &mut Vec<Location>,
    ) {
        out.clear();
        out.resize(entries.len(), InsertOutcome::Inserted);
        if entries.is_empty() {
            return;
        }
        if let Some(d) = &mut self.device {
            if let Err(e) = d.try_insert(entries, out) {
                dropped.extend(self.on_error(e, store));
            }
            return;
        }
        for (o, (h, loc)) in out.iter_mut().zip(entries) {
            *o = self.cpu.insert_one(h, *loc);
        }
    }

    /// Deletes a batch of (hash, location) entries in one device call.
    pub fn delete_many(
        &mut self,
        store: &SlabStore,
        entries: &[(KeyHash, Location)],
        dropped: &mut Vec<Location>,
    ) {
        if entries.is_empty() {
            return;
        }
        if let Some(d) = &mut self.device {
            let mut out = vec![false; entries.len()];
            if let Err(e) = d.try_delete(entries, &mut out) {
                dropped.extend(self.on_error(e, store));
            }
            return;
        }
        for (h, loc) in entries {
            self.cpu.delete_one(h, *loc);
        }
    }

    /// A delete from inside the store's reclaim callback, where the store cannot be read: a
    /// device failure only marks the rebuild, done by [`Index::settle`] right after.
    pub fn delete_in_reclaim(&mut self, h: &KeyHash, loc: Location) {
        if self.pending_rebuild {
            return;
        }
        if let Some(d) = &mut self.device {
            let mut out = [false];
            match d.try_delete(&[(*h, loc)], &mut out) {
                Ok(()) => return,
                Err(e) => {
                    self.fail(e);
                    self.pending_rebuild = true;
                    return;
                }
            }
        }
        self.cpu.delete_one(h, loc);
    }

    /// Indexes every live item of a store taken back from a memory file (a warm restart):
    /// the table's old contents are cleared first (they may describe anything), then all
    /// items go in as one insert batch, on the device if there is one. Returns the items
    /// that found no slot (signature collisions, a full table), for the caller to free.
    pub fn restore(&mut self, store: &SlabStore) -> Vec<Location> {
        self.clear(store);
        let mut entries = Vec::new();
        store.for_each_live(|key, loc| entries.push((hash_key(key), loc)));
        let mut out = Vec::new();
        let mut dropped = Vec::new();
        self.insert_many(store, &entries, &mut out, &mut dropped);
        dropped.extend(out.iter().filter_map(|o| match o {
            InsertOutcome::Inserted => None,
            InsertOutcome::Replaced(old) | InsertOutcome::Evicted(old) => Some(*old),
        }));
        dropped
    }

    pub fn clear(&mut self, store: &SlabStore) {
        if let Some(d) = &mut self.device {
            if let Err(e) = d.clear() {
                self.fail(e);
            }
        }
        self.cpu.clear();
        let _ = store;
    }
}
