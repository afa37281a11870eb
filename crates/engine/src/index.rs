//! A partition's index: the CPU table, or a device table with the CPU one held in reserve.
//!
//! If any device call fails (kernel, copy, context), the device is dropped for good and the
//! CPU table is rebuilt from the items in host memory (`SlabStore::for_each_live`), then the
//! operation is done on the CPU. No stored item is lost because the device went away.

use hkv_index::opencl::OclIndex;
use hkv_index::{hash_key, CpuIndex, IndexBackend, IndexStats, InsertOutcome, KeyHash, Location};
use hkv_mem::Arena;
use hkv_store::SlabStore;

use crate::cost::CostModel;
use crate::policy::{Placement, Proc, Task};
use std::time::Instant;

mod device;
mod dispatch;
pub(crate) mod placement;

fn ns(t: Instant) -> f64 {
    t.elapsed().as_nanos() as f64
}

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
    /// Declared before `cpu`: a shared device table is a buffer over `cpu`'s memory, and is
    /// released first.
    device: Option<OclIndex>,
    cpu: CpuIndex,
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
    /// `--placement`: honoured where both processors work on one table.
    policy: Placement,
    /// Chunks of device-placed searches done by this thread and by the device.
    pub stolen: hkv_index::opencl::Stolen,
    /// Device-placed searches split with this thread where they cannot be stolen from.
    pub dispatch: crate::dispatch::Dispatch,
    /// Splitting is allowed (`HKV_OPENCL_DISPATCH=0` turns it off, to compare).
    split_on: bool,
    /// Engine batches begun, and the last one with a device search (a mirror searched
    /// batch after batch only sends what one batch wrote).
    batch_seq: u64,
    device_batch: Option<u64>,
    /// Draws which batches a mirror's model times, and whether this one is (see
    /// [`Index::clock_placed`]).
    sampler: crate::Sampler,
    batch_timed: bool,
    /// Bytes of the CPU's table copied to a mirror.
    pub mirror_bytes: u64,
    pub model: CostModel,
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
            policy: Placement::AUTO,
            model: CostModel::default(),
            stolen: Default::default(),
            dispatch: Default::default(),
            split_on: std::env::var("HKV_OPENCL_DISPATCH").as_deref() != Ok("0"),
            batch_seq: 0,
            device_batch: None,
            sampler: crate::Sampler::default(),
            batch_timed: false,
            mirror_bytes: 0,
        }
    }

    /// The live table's counters: entries from the CPU's side wherever it is whole.
    fn live_stats(&self) -> IndexStats {
        match &self.device {
            Some(d) if d.is_shared() || d.is_mirror() => {
                // Entries are counted on the CPU's side (device calls report theirs to it;
                // a mirror's device writes none); walks happen on both.
                let (c, g) = (self.cpu.stats(), d.stats());
                IndexStats {
                    entries: c.entries,
                    displacements: c.displacements + g.displacements,
                    walks: c.walks + g.walks,
                    longest_walk: c.longest_walk.max(g.longest_walk),
                    evictions: c.evictions + g.evictions,
                }
            }
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
        let new_table = self.cpu.table_ptr();
        self.move_device_table(buckets, new_table);
        arena.recycle(old.into_memory(), page_size);
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

    pub fn search(
        &mut self,
        store: &SlabStore,
        hashes: &[KeyHash],
        out: &mut [Location],
        dropped: &mut Vec<Location>,
    ) {
        let proc = self.place(Task::Search, hashes.len());
        if proc == Proc::Device && self.mirrored() {
            // A mirror catching up on everything written since its last search, batches
            // ago (auto trying the device now and then), is not what a search costs while
            // the device keeps searching: that sync stays out of the model's timing.
            if self.device_batch.is_none_or(|b| b + 1 < self.batch_seq) {
                if let Err(e) = self.sync_mirror() {
                    self.failed(e, Some(store), dropped);
                }
            }
            self.device_batch = Some(self.batch_seq);
        }
        let t = self.clock_placed(Task::Search, proc);
        let done = if proc == Proc::Device && self.splits() {
            self.search_split(store, hashes, out, dropped)
        } else {
            self.search_on(proc, Some(store), hashes, out, dropped)
        };
        if done {
            self.timed(Task::Search, proc, hashes.len(), t);
        } else {
            self.cpu.search(hashes, out);
        }
    }

    pub fn search_one(
        &mut self,
        store: &SlabStore,
        h: &KeyHash,
        dropped: &mut Vec<Location>,
    ) -> Location {
        let mut out = [hkv_index::NO_LOCATION];
        let proc = self.place_one(Task::Search);
        if proc == Proc::Cpu
            || !self.search_on(
                proc,
                Some(store),
                std::slice::from_ref(h),
                &mut out,
                dropped,
            )
        {
            return self.cpu.search_one(h);
        }
        out[0]
    }

    pub fn insert_one(
        &mut self,
        store: &SlabStore,
        h: &KeyHash,
        loc: Location,
        dropped: &mut Vec<Location>,
    ) -> InsertOutcome {
        let proc = self.place_one(Task::Insert);
        let mut out = Vec::new();
        if proc == Proc::Cpu || !self.insert_on(proc, Some(store), &[(*h, loc)], &mut out, dropped)
        {
            return self.cpu.insert_one(h, loc);
        }
        out[0]
    }

    pub fn delete_one(
        &mut self,
        store: &SlabStore,
        h: &KeyHash,
        loc: Location,
        dropped: &mut Vec<Location>,
    ) -> bool {
        let proc = self.place_one(Task::Delete);
        if proc == Proc::Device && self.device.is_some() {
            let mut out = [false];
            let shared = self.shared();
            if let Some(d) = &mut self.device {
                match d.try_delete(&[(*h, loc)], &mut out) {
                    Ok(()) => {
                        if shared && out[0] {
                            self.cpu.note_entries(0, 1);
                        }
                        return out[0];
                    }
                    Err(e) => dropped.extend(self.on_error(e, store)),
                }
            }
        }
        self.cpu.delete_one(h, loc)
    }

    /// Inserts a batch (the delayed writes of a partition) in one call; `out` gets one
    /// outcome per entry. After a device failure the rebuilt table already holds every live
    /// item, so the batch is not redone (the caller sees `rebuilds` move).
    pub fn insert_many(
        &mut self,
        store: &SlabStore,
        entries: &[(KeyHash, Location)],
        out: &mut Vec<InsertOutcome>,
        dropped: &mut Vec<Location>,
    ) {
        if entries.is_empty() {
            out.clear();
            return;
        }
        let proc = self.place(Task::Insert, entries.len());
        let t = self.clock_for(Task::Insert);
        if self.insert_on(proc, Some(store), entries, out, dropped) {
            self.timed(Task::Insert, proc, entries.len(), t);
        }
    }

    /// Deletes a batch of (hash, location) entries in one call.
    pub fn delete_many(
        &mut self,
        store: &SlabStore,
        entries: &[(KeyHash, Location)],
        dropped: &mut Vec<Location>,
    ) {
        if entries.is_empty() {
            return;
        }
        let proc = self.place(Task::Delete, entries.len());
        let t = self.clock_for(Task::Delete);
        if self.delete_on(proc, Some(store), entries, dropped) {
            self.timed(Task::Delete, proc, entries.len(), t);
        }
    }

    /// A delete from inside the store's reclaim callback, where the store cannot be read: a
    /// device failure only marks the rebuild, done by [`Index::settle`] right after.
    pub fn delete_in_reclaim(&mut self, h: &KeyHash, loc: Location) {
        if self.pending_rebuild {
            return;
        }
        if self.place_one(Task::Delete) == Proc::Device {
            let shared = self.shared();
            if let Some(d) = &mut self.device {
                let mut out = [false];
                match d.try_delete(&[(*h, loc)], &mut out) {
                    Ok(()) => {
                        if shared && out[0] {
                            self.cpu.note_entries(0, 1);
                        }
                        return;
                    }
                    Err(e) => {
                        self.fail(e);
                        self.pending_rebuild = true;
                        return;
                    }
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
        if let Some(d) = self
            .device
            .as_mut()
            .filter(|d| !d.is_shared() && !d.is_mirror())
        {
            if let Err(e) = d.clear() {
                self.fail(e);
            }
        }
        self.cpu.clear();
        let _ = store;
    }
}
