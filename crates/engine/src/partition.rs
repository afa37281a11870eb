//! One hash partition: an index table and a slab store, driven by one thread.

use hkv_index::opencl::OclIndex;
use hkv_index::{hash_key, CpuIndex, InsertOutcome, KeyHash, Location, NO_LOCATION};
use hkv_store::{
    expiry_from_exptime, ClassOp, Expiry, ReassignError, Reclaim, SlabStore, StoreError, StoreStats,
};

use crate::index::Index;
use crate::pending::{SameKeyTable, Waiting};
use crate::stats::EngineStats;
use hkv_types::{After, Op, Request, Response, Responses};

mod growth;
mod meta;
pub(crate) mod placement;
mod vector;

/// Reads deferred into one group before their searches run as one batch. Large enough to keep
/// many misses in flight, small enough that a group's buckets and items stay in L1/L2.
const READ_GROUP: usize = 64;
/// How many reads ahead KC/RD starts loading an item (two lines each: header, ref bit).
const ITEM_PREFETCH_DISTANCE: usize = 16;
/// Chunks the background sweep examines per elapsed second, and the most seconds it catches
/// up on at once (bounds the pause one batch can see).
const SWEEP_SLOTS_PER_SECOND: u32 = 8192;
const SWEEP_MAX_SECONDS: u32 = 8;
/// Keys whose index writes may wait at once; a full table is applied early. It bounds the
/// retired versions held back from reuse and the table's own memory.
const PENDING_LIMIT: usize = 4096;

pub struct Partition {
    index: Index,
    /// Locations an index rebuild could not place (signature collisions), to free.
    dropped: Vec<Location>,
    store: SlabStore,
    stats: EngineStats,
    last_sweep: u32,
    /// A delayed `flush_all` waiting for its time.
    flush_at: Option<u32>,
    /// The item the last write left behind (zeros: none), reported beside its response.
    last: After,
    /// The meta `E` CAS of the write being run: the CAS its new item gets.
    cas_override: Option<u64>,
    /// Where the last stored item went.
    last_loc: Location,
    /// The write being run came with a base64 key (meta `ms b`).
    binary_key: bool,
    /// The value the write being run replaced or deleted, when it asked for it.
    previous: Option<hkv_types::Previous>,
    // Scratch, kept to avoid allocating per batch.
    hashes: Vec<KeyHash>,
    group: Vec<u32>,
    group_hashes: Vec<KeyHash>,
    group_locs: Vec<Location>,
    value_buf: Vec<u8>,
    /// The current batch's index work, for the scheduler's cost fit.
    timing: BatchTiming,
    /// Index writes waiting for their delayed batch, by key.
    pending: SameKeyTable,
    /// Apply the waiting index writes every this many batches (the scheduler's n).
    write_every: u32,
    /// Whether index writes wait for their batch at all (see [`Partition::set_write_delay`]).
    delay_writes: bool,
    /// See [`Partition::set_merge_atomics`].
    merge_atomics: bool,
    /// Vector kernels on the index's device, if there is one.
    vector_device: Option<hkv_index::opencl::OclVector>,
    /// Values of at least this many bytes are updated on `vector_device`; `None`: never.
    vector_device_from: Option<usize>,
    vector_placement: placement::VectorPlacement,
    /// IN for the writes of a batch, searched together before they run (see
    /// [`Partition::in_search_writes`]): per request index, what the index held for its key.
    write_locs: Vec<Option<Location>>,
    /// Whether `write_locs` still describes the index (nothing applied or rebuilt since).
    write_locs_valid: bool,
    /// The pre-searched location of the write being run, for [`Partition::find_live`].
    pre: Option<Location>,
    // Scratch for the write search.
    order: Vec<u32>,
    write_hashes: Vec<KeyHash>,
    write_owner: Vec<u32>,
    write_found: Vec<Location>,
    batches_since_apply: u32,
    /// `index.rebuilds` when the table was last known to agree with the index.
    seen_rebuilds: u64,
    // Scratch for applying the table.
    applying: Vec<Waiting>,
    apply_entries: Vec<(KeyHash, Location)>,
    apply_owner: Vec<u32>,
    apply_outcomes: Vec<InsertOutcome>,
    /// The caller's value budget for the batch being run.
    pub(crate) budget: ValueBudget,
    /// Keys of evicted items, when asked for ([`Partition::log_evictions`]).
    evicted: Option<Vec<Vec<u8>>>,
}

/// Operations in one batch and the time spent on them (searches: IN; writes: MM + IN).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchTiming {
    pub reads: u64,
    pub search_ns: u64,
    pub writes: u64,
    pub write_ns: u64,
}

impl BatchTiming {
    pub fn add(&mut self, o: &BatchTiming) {
        self.reads += o.reads;
        self.search_ns += o.search_ns;
        self.writes += o.writes;
        self.write_ns += o.write_ns;
    }
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("index", &self.index.backend_name())
            .field("store", &self.store)
            .finish()
    }
}

/// How many value bytes a batch may copy for deferrable reads, in all and per client.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ValueBudget {
    pub total: usize,
    pub group: usize,
}

impl Default for ValueBudget {
    fn default() -> Self {
        ValueBudget {
            total: usize::MAX,
            group: usize::MAX,
        }
    }
}

impl ValueBudget {
    /// Whether a value of `len` bytes must wait: it would pass a budget that already holds
    /// something (the first value of the batch and of each client always goes, so every
    /// batch and client makes progress).
    fn defers(&self, batch_bytes: usize, group_bytes: usize, len: usize) -> bool {
        (batch_bytes > 0 && batch_bytes.saturating_add(len) > self.total)
            || (group_bytes > 0 && group_bytes.saturating_add(len) > self.group)
    }
}

impl Partition {
    pub(crate) fn new(
        index: CpuIndex,
        device: Option<OclIndex>,
        store: SlabStore,
        write_every: u32,
    ) -> Partition {
        Partition {
            index: Index::new(index, device),
            dropped: Vec::new(),
            store,
            stats: EngineStats::default(),
            last_sweep: 0,
            flush_at: None,
            last: After::default(),
            cas_override: None,
            last_loc: NO_LOCATION,
            binary_key: false,
            previous: None,
            hashes: Vec::new(),
            group: Vec::with_capacity(READ_GROUP),
            group_hashes: Vec::with_capacity(READ_GROUP),
            group_locs: Vec::with_capacity(READ_GROUP),
            value_buf: Vec::new(),
            timing: BatchTiming::default(),
            pending: SameKeyTable::default(),
            write_every: write_every.max(2),
            delay_writes: true,
            merge_atomics: true,
            vector_device: None,
            vector_device_from: None,
            vector_placement: placement::VectorPlacement::Cpu,
            write_locs: Vec::new(),
            write_locs_valid: false,
            pre: None,
            order: Vec::new(),
            write_hashes: Vec::new(),
            write_owner: Vec::new(),
            write_found: Vec::new(),
            batches_since_apply: 0,
            seen_rebuilds: 0,
            applying: Vec::new(),
            apply_entries: Vec::new(),
            apply_owner: Vec::new(),
            apply_outcomes: Vec::new(),
            budget: ValueBudget::default(),
            evicted: None,
        }
    }

    /// The index work of the batches run since the last call.
    pub fn take_timing(&mut self) -> BatchTiming {
        std::mem::take(&mut self.timing)
    }

    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// memcached's `flush_all`: every item stored before `at` (Unix time) is gone once the
    /// clock reaches `at`; `at <= now` means at once.
    pub fn flush_all(&mut self, at: u32, now: u32) {
        if at <= now {
            self.flush_now();
        } else {
            self.flush_at = Some(at);
        }
    }

    fn flush_now(&mut self) {
        // Retired versions are freed with everything else.
        self.pending.clear();
        self.index.clear(&self.store);
        self.store.clear();
        self.flush_at = None;
        self.stats.flushes += 1;
    }

    pub fn store_stats(&self) -> StoreStats {
        self.store.stats()
    }

    /// The CPU table (used directly by the benchmark; stale while a device holds the index).
    pub fn index(&self) -> &CpuIndex {
        self.index.cpu()
    }

    /// "cpu" or "opencl:<device>".
    pub fn backend_name(&self) -> String {
        self.index.backend_name()
    }

    /// Device batches and the host-measured time spent copying and in kernels (ns).
    pub fn device_timing(&self) -> Option<(u64, u64, u64)> {
        self.index.device_timing()
    }

    /// Whether the device reads search inputs in place (None: no device).
    pub fn device_zero_copy(&self) -> Option<bool> {
        self.index.zero_copy()
    }

    /// A batched search through whichever backend holds the index (the benchmark's "index
    /// alone" figure).
    pub fn index_search(&mut self, hashes: &[KeyHash], out: &mut [Location]) {
        self.index
            .search(&self.store, hashes, out, &mut self.dropped);
        self.free_dropped();
    }

    /// Times the device failed and the CPU backend took over.
    pub fn fallbacks(&self) -> u64 {
        self.index.fallbacks
    }

    /// Removes the live version `loc` of `key`: at once from reads, from the index with the
    /// next batch of delayed writes. A version that is no longer live has already left the
    /// index (whatever freed it took it out), so there is nothing to do for it.
    fn unlink(&mut self, key: &[u8], h: &KeyHash, loc: Location) {
        if self.store.retire(loc) {
            self.unlink_retired(key, h, loc);
        }
    }

    /// [`Partition::unlink`] for a version the caller has already retired.
    fn unlink_retired(&mut self, key: &[u8], h: &KeyHash, loc: Location) {
        if !self.delay_writes && self.pending.is_empty() {
            self.index
                .delete_one(&self.store, h, loc, &mut self.dropped);
            self.store.free(loc);
            self.free_dropped();
            return;
        }
        match self.pending.get_mut(key, h) {
            Some(w) => {
                if w.newest == Some(loc) {
                    w.newest = None;
                    if w.resident {
                        // The index holds it: it goes when the table is applied.
                        w.resident = false;
                        w.indexed = Some(loc);
                    } else {
                        // Never indexed: nothing points here but the table.
                        self.store.free(loc);
                    }
                }
                self.stats.merged_writes += 1;
            }
            None => {
                self.pending.insert(key, Waiting::new(*h, None, Some(loc)));
            }
        }
    }

    /// Makes `loc` the newest version of `key`; `old` is the version it replaces, already
    /// retired by the caller (still where the index may point, its chunk not reused).
    fn link(&mut self, key: &[u8], h: &KeyHash, loc: Location, old: Option<Location>) {
        if !self.delay_writes && self.pending.is_empty() {
            self.insert_now(h, loc, old);
            return;
        }
        match self.pending.get_mut(key, h) {
            Some(w) => {
                if let Some(c) = old.filter(|&c| w.newest == Some(c)) {
                    if w.resident {
                        // The version the index holds: retired until the table is applied.
                        w.resident = false;
                        w.indexed = Some(c);
                    } else {
                        // An intermediate version, never indexed: free it now.
                        self.store.free(c);
                    }
                }
                w.newest = Some(loc);
                self.stats.merged_writes += 1;
            }
            None => {
                self.pending.insert(key, Waiting::new(*h, Some(loc), old));
            }
        }
    }

    /// Frees `loc` as an eviction; true if it was a live item (one to count), whose key then
    /// goes into the eviction log when one is kept.
    fn evict(&mut self, loc: Location) -> bool {
        if let Some(log) = self.evicted.as_mut() {
            if let Some(item) = self.store.get(loc) {
                log.push(item.key().to_vec());
            }
        }
        self.store.free(loc)
    }

    /// Keeps the key of every evicted item (CLOCK, the index's displacement bound, signature
    /// collisions) until [`Partition::take_evicted_keys`]: what memcached's `watch evictions`
    /// shows, and what lets a checker tell an eviction from a lost write.
    pub fn log_evictions(&mut self, on: bool) {
        self.evicted = on.then(Vec::new);
    }

    pub fn take_evicted_keys(&mut self) -> Vec<Vec<u8>> {
        self.evicted
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// `old` if it is still a retired version: an apply of the same-key table may have freed
    /// it meanwhile (the index let go of it), and then nothing may record it again.
    fn still_retired(&self, old: Option<Location>) -> Option<Location> {
        old.filter(|&c| self.store.is_retired(c))
    }

    /// Where vector updates run (`--vector-placement`): builds the device's vector kernels
    /// and, for `auto`, times them against the CPU.
    /// `calibrated`: another partition's `auto` result on the same device, reused.
    pub fn set_vector_placement(
        &mut self,
        p: placement::VectorPlacement,
        calibrated: Option<Option<usize>>,
    ) {
        use placement::VectorPlacement as P;
        self.vector_placement = p;
        if p != P::Cpu && self.vector_device.is_none() {
            if let Some(d) = self.index.device() {
                match d.vector_unit() {
                    Ok(v) => self.vector_device = Some(v),
                    Err(e) => tracing::warn!(error = %e, "no vector kernels on the device"),
                }
            }
        }
        self.vector_device_from = match (p, self.vector_device.as_mut()) {
            (P::Device, Some(_)) => Some(0),
            (P::Auto, Some(dev)) => calibrated.unwrap_or_else(|| placement::calibrate(dev)),
            _ => None,
        };
    }

    /// Where vector updates run, and from which value size they go to the device.
    pub fn vector_placement(&self) -> (placement::VectorPlacement, Option<usize>) {
        (self.vector_placement, self.vector_device_from)
    }

    /// Whether in-place atomics forward their key's location through the same-key table
    /// (see [`crate::EngineConfig::merge_atomics`]).
    pub fn set_merge_atomics(&mut self, on: bool) {
        self.merge_atomics = on;
    }

    /// Whether index writes wait in the same-key table for a batch every n batches (n x C).
    /// With C = 0 (the CPU backend's usual interval: a batch every loop pass) there is no
    /// period to wait for and nothing to amortise, since an in-place CPU index write costs no
    /// launch; each write then reaches the index before the next request runs. Turning the
    /// delay off applies whatever waits.
    pub fn set_write_delay(&mut self, on: bool) {
        if self.delay_writes && !on {
            self.apply_pending();
        }
        self.delay_writes = on;
    }

    /// Whether a device holds this partition's index.
    pub fn has_device(&self) -> bool {
        self.index.zero_copy().is_some()
    }

    /// IN for a write that does not wait (C = 0 on the CPU backend); `old` is the retired
    /// version it replaces.
    fn insert_now(&mut self, h: &KeyHash, loc: Location, old: Option<Location>) {
        self.grow_for(1);
        let outcome = self
            .index
            .insert_one(&self.store, h, loc, &mut self.dropped);
        self.free_dropped();
        match outcome {
            InsertOutcome::Inserted => {}
            // A rebuild already indexed the new item.
            InsertOutcome::Replaced(prev) if prev == loc => {}
            InsertOutcome::Replaced(prev) => {
                // `old` (not live: free returns false), or another key with the same
                // signature in the same bucket pair: the index holds one of them, so the
                // older one is evicted (and counted).
                if self.evict(prev) {
                    self.stats.collision_evictions += 1;
                }
            }
            InsertOutcome::Evicted(victim) => {
                if self.evict(victim) {
                    self.stats.index_evictions += 1;
                }
            }
        }
        if let Some(c) = self.still_retired(old) {
            // The index kept the old version under another slot: take it out, then free it.
            self.index.delete_one(&self.store, h, c, &mut self.dropped);
            self.store.free(c);
            self.free_dropped();
        }
    }

    /// Waiting index writes (keys in the same-key table).
    pub fn pending_writes(&self) -> usize {
        self.pending.len()
    }

    /// Applies every waiting index write as one batch: inserts of newest versions, deletes of
    /// what the index still holds for deleted keys, then frees the retired versions the index
    /// has let go of.
    pub fn apply_pending(&mut self) {
        self.batches_since_apply = 0;
        // The index is about to change: what the writes' search found may no longer hold.
        self.write_locs_valid = false;
        if self.pending.is_empty() {
            return;
        }
        let t = std::time::Instant::now();
        let mut work = std::mem::take(&mut self.applying);
        let mut entries = std::mem::take(&mut self.apply_entries);
        let mut owner = std::mem::take(&mut self.apply_owner);
        let mut outcomes = std::mem::take(&mut self.apply_outcomes);
        work.clear();
        self.pending.drain_into(&mut work);
        let applied = work.len() as u64;
        entries.clear();
        owner.clear();
        for (i, w) in work.iter().enumerate() {
            if let Some(n) = w.newest.filter(|_| !w.resident) {
                entries.push((w.hash, n));
                owner.push(i as u32);
            }
        }
        self.grow_for(entries.len());
        let rebuilds = self.index.rebuilds;
        self.index
            .insert_many(&self.store, &entries, &mut outcomes, &mut self.dropped);
        if self.index.rebuilds == rebuilds {
            for (k, outcome) in outcomes.iter().enumerate() {
                let i = owner[k] as usize;
                let n = entries[k].1;
                match *outcome {
                    InsertOutcome::Inserted => {}
                    InsertOutcome::Replaced(prev) if prev == n => {}
                    InsertOutcome::Replaced(prev) if Some(prev) == work[i].indexed => {
                        work[i].indexed = None;
                        self.store.free(prev);
                    }
                    InsertOutcome::Replaced(prev) => {
                        // Another key with the same signature in the same bucket pair: the
                        // index holds one of them, so the older one goes (and is counted).
                        if self.drop_version(prev, &mut work) {
                            self.stats.collision_evictions += 1;
                        }
                    }
                    InsertOutcome::Evicted(victim) => {
                        if self.drop_version(victim, &mut work) {
                            self.stats.index_evictions += 1;
                        }
                    }
                }
            }
            entries.clear();
            entries.extend(work.iter().filter_map(|w| w.indexed.map(|l| (w.hash, l))));
            self.index
                .delete_many(&self.store, &entries, &mut self.dropped);
        }
        // Whatever the outcome (a device failure rebuilds the index from the live items,
        // which holds none of these), the index no longer points at any retired version.
        for w in &work {
            if let Some(l) = w.indexed {
                self.store.free(l);
            }
        }
        self.free_dropped();
        self.stats.applied_writes += applied;
        self.stats.write_applies += 1;
        self.timing.write_ns += t.elapsed().as_nanos() as u64;
        self.applying = work;
        self.apply_entries = entries;
        self.apply_owner = owner;
        self.apply_outcomes = outcomes;
    }

    /// Frees a version the index let go of while applying the table; true if it was a live
    /// item (an eviction to count), false if it was a retired version waiting in `work`.
    fn drop_version(&mut self, loc: Location, work: &mut [Waiting]) -> bool {
        if self.evict(loc) {
            return true;
        }
        for w in work.iter_mut().filter(|w| w.indexed == Some(loc)) {
            w.indexed = None;
        }
        false
    }

    /// Frees items an index rebuild had to drop, counting them as evictions. A rebuild also
    /// makes the same-key table moot: the new index holds every live item (newest versions
    /// included) and no retired one.
    fn free_dropped(&mut self) {
        if self.index.rebuilds != self.seen_rebuilds {
            self.seen_rebuilds = self.index.rebuilds;
            self.write_locs_valid = false;
            let mut work = std::mem::take(&mut self.applying);
            work.clear();
            self.pending.drain_into(&mut work);
            for w in &work {
                if let Some(l) = w.indexed {
                    self.store.free(l);
                }
            }
            self.applying = work;
        }
        for loc in std::mem::take(&mut self.dropped) {
            if self.evict(loc) {
                self.stats.collision_evictions += 1;
            }
        }
    }

    pub fn store(&self) -> &SlabStore {
        &self.store
    }

    /// Runs a whole batch that belongs to this partition; appends one response per request.
    pub fn execute(&mut self, reqs: &[Request<'_>], now: u32, out: &mut Responses) {
        let mut hashes = std::mem::take(&mut self.hashes);
        hashes.clear();
        hashes.extend(reqs.iter().map(|r| hash_key(r.key)));
        let base = out.results.len();
        out.results.resize(base + reqs.len(), Response::Miss);
        out.after.resize(base + reqs.len(), After::default());
        let Responses {
            results,
            after,
            data,
            value_budget,
            group_budget,
            group_bytes,
        } = out;
        self.budget = ValueBudget {
            total: *value_budget,
            group: *group_budget,
        };
        self.run(
            reqs,
            &hashes,
            0..reqs.len() as u32,
            now,
            &mut results[base..],
            &mut after[base..],
            data,
            group_bytes,
        );
        self.hashes = hashes;
    }

    /// Runs the requests `which` (indices into `reqs` and `hashes`, in arrival order) and
    /// writes their responses at the same indices of `results`.
    ///
    /// Reads are deferred into a group and run as one pipelined batch (IN for all, then KC
    /// and RD for all, with prefetching between); a write runs at once unless a deferred read
    /// is for the same key, in which case the group runs first. So every key sees its
    /// operations in arrival order.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &mut self,
        reqs: &[Request<'_>],
        hashes: &[KeyHash],
        which: impl Iterator<Item = u32>,
        now: u32,
        results: &mut [Response],
        after: &mut [After],
        data: &mut Vec<u8>,
        group_bytes: &mut Vec<usize>,
    ) {
        self.stats.batches += 1;
        if self.flush_at.is_some_and(|at| at <= now) {
            self.flush_now();
        }
        // Delayed scheduling (Mega-KV §5.1): index writes go as one batch every n batches.
        if self.batches_since_apply >= self.write_every {
            self.apply_pending();
        }
        self.batches_since_apply += 1;
        self.maybe_sweep(now);
        self.group.clear();
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(which);
        self.in_search_writes(reqs, hashes, &order);
        for &i in &order {
            let iu = i as usize;
            let req = &reqs[iu];
            let h = hashes[iu];
            if req.is_read() {
                self.group.push(i);
                if self.group.len() == READ_GROUP {
                    self.flush_reads(reqs, hashes, now, results, data, group_bytes);
                }
                continue;
            }
            // Same signature, not just same key: a write to a colliding key replaces the
            // other key's index entry, so the deferred read must run first to stay in order.
            if self.group.iter().any(|&g| hashes[g as usize].sig == h.sig) {
                self.flush_reads(reqs, hashes, now, results, data, group_bytes);
            }
            self.last = After::default();
            self.cas_override = req.meta.new_cas;
            self.binary_key = req.meta.binary_key;
            let t = std::time::Instant::now();
            self.pre = if self.write_locs_valid {
                self.write_locs.get(iu).copied().flatten()
            } else {
                None
            };
            self.previous = None;
            results[iu] = self.write(req, &h, now, data);
            self.pre = None;
            self.timing.writes += 1;
            self.timing.write_ns += t.elapsed().as_nanos() as u64;
            after[iu] = After {
                previous: self.previous,
                ..self.last
            };
            if self.pending.len() >= PENDING_LIMIT
                || (!self.delay_writes && !self.pending.is_empty())
            {
                self.apply_pending();
            }
        }
        if !self.group.is_empty() {
            self.flush_reads(reqs, hashes, now, results, data, group_bytes);
        }
        self.write_locs_valid = false;
        self.order = order;
    }

    /// IN for the writes of a batch, as one search (one device launch instead of one per
    /// write), while index writes are delayed. What it found stays usable as long as the
    /// index does not change: with delayed writes only applying the same-key table or a
    /// rebuild changes it (both clear `write_locs_valid`), and a key written earlier in the
    /// batch is found in the table before this is consulted. A location whose item was
    /// reclaimed meanwhile fails the key and liveness checks, as a reclaimed item should.
    fn in_search_writes(&mut self, reqs: &[Request<'_>], hashes: &[KeyHash], order: &[u32]) {
        self.write_locs_valid = false;
        if !self.delay_writes {
            return;
        }
        let mut hs = std::mem::take(&mut self.write_hashes);
        let mut owner = std::mem::take(&mut self.write_owner);
        let mut found = std::mem::take(&mut self.write_found);
        hs.clear();
        owner.clear();
        for &i in order {
            let req = &reqs[i as usize];
            if !req.is_read() && self.pending.get(req.key, &hashes[i as usize]).is_none() {
                hs.push(hashes[i as usize]);
                owner.push(i);
            }
        }
        if hs.len() >= 2 {
            let t = std::time::Instant::now();
            found.clear();
            found.resize(hs.len(), NO_LOCATION);
            let rebuilds = self.index.rebuilds;
            self.index
                .search(&self.store, &hs, &mut found, &mut self.dropped);
            self.free_dropped();
            self.timing.write_ns += t.elapsed().as_nanos() as u64;
            if self.index.rebuilds == rebuilds {
                self.write_locs.clear();
                self.write_locs.resize(reqs.len(), None);
                for (k, &i) in owner.iter().enumerate() {
                    self.write_locs[i as usize] = Some(found[k]);
                }
                self.write_locs_valid = true;
            }
        }
        self.write_hashes = hs;
        self.write_owner = owner;
        self.write_found = found;
    }

    fn flush_reads(
        &mut self,
        reqs: &[Request<'_>],
        hashes: &[KeyHash],
        now: u32,
        results: &mut [Response],
        data: &mut Vec<u8>,
        group_bytes: &mut Vec<usize>,
    ) {
        self.in_search_group(hashes);
        // Data forwarding: a key with a waiting write is answered from the same-key table.
        if !self.pending.is_empty() && !fault::skip_forwarding() {
            for (j, &i) in self.group.iter().enumerate() {
                if let Some(w) = self
                    .pending
                    .get(reqs[i as usize].key, &self.group_hashes[j])
                {
                    self.group_locs[j] = w.newest.unwrap_or(NO_LOCATION);
                    self.stats.forwarded_reads += 1;
                }
            }
        }
        // KC + RD, in arrival order, with the items of later queries already loading.
        for &loc in self.group_locs.iter().take(ITEM_PREFETCH_DISTANCE) {
            self.store.prefetch(loc);
        }
        for j in 0..self.group.len() {
            if let Some(&ahead) = self.group_locs.get(j + ITEM_PREFETCH_DISTANCE) {
                self.store.prefetch(ahead);
            }
            let i = self.group[j] as usize;
            let loc = self.group_locs[j];
            let h = self.group_hashes[j];
            results[i] = self.read_one(&reqs[i], &h, loc, now, data, group_bytes);
        }
        self.group.clear();
    }

    /// IN: one batched index search for the whole read group.
    fn in_search_group(&mut self, hashes: &[KeyHash]) {
        self.group_hashes.clear();
        self.group_hashes
            .extend(self.group.iter().map(|&i| hashes[i as usize]));
        self.group_locs.clear();
        self.group_locs.resize(self.group.len(), NO_LOCATION);
        let t = std::time::Instant::now();
        self.index.search(
            &self.store,
            &self.group_hashes,
            &mut self.group_locs,
            &mut self.dropped,
        );
        self.timing.reads += self.group.len() as u64;
        self.timing.search_ns += t.elapsed().as_nanos() as u64;
        self.free_dropped();
    }

    fn read_one(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        loc: Location,
        now: u32,
        data: &mut Vec<u8>,
        group_bytes: &mut Vec<usize>,
    ) -> Response {
        let mut expired = false;
        if let Some(item) = self.store.get(loc) {
            if kc_key_matches(&item, req.key) {
                if !item.is_expired(now) {
                    if req.deferrable {
                        let g = req.group as usize;
                        if group_bytes.len() <= g {
                            group_bytes.resize(g + 1, 0);
                        }
                        if self
                            .budget
                            .defers(data.len(), group_bytes[g], item.value_len())
                        {
                            self.stats.deferred_reads += 1;
                            return Response::Deferred;
                        }
                        group_bytes[g] += item.value_len();
                    }
                    self.stats.get_hits += 1;
                    return self.rd_answer_hit(req, loc, now, data);
                }
                expired = true;
            } else {
                self.stats.key_mismatches += 1;
            }
        }
        if expired {
            self.unlink(req.key, h, loc);
            self.stats.expired_on_access += 1;
        }
        self.stats.get_misses += 1;
        Response::Miss
    }

    /// The live item for `key`: found in the same-key table or the index, key verified, not
    /// expired (an expired one is removed on the spot).
    fn find_live(&mut self, key: &[u8], h: &KeyHash, now: u32) -> Option<Location> {
        let pre = self.pre.take().filter(|_| self.write_locs_valid);
        let loc = match (self.pending.get(key, h), pre) {
            (Some(w), _) => w.newest.unwrap_or(NO_LOCATION),
            (None, Some(loc)) => loc,
            (None, None) => {
                let loc = self.index.search_one(&self.store, h, &mut self.dropped);
                self.free_dropped();
                loc
            }
        };
        let item = self.store.get(loc)?;
        if !kc_key_matches(&item, key) {
            self.stats.key_mismatches += 1;
            return None;
        }
        if item.is_expired(now) {
            self.unlink(key, h, loc);
            self.stats.expired_on_access += 1;
            return None;
        }
        Some(loc)
    }

    fn write(&mut self, req: &Request<'_>, h: &KeyHash, now: u32, data: &mut Vec<u8>) -> Response {
        let cur = self.find_live(req.key, h, now);
        if matches!(req.op, Op::Incr | Op::Decr | Op::Vector) {
            self.forward_atomic(req.key, h, cur);
        }
        if req.meta.previous {
            self.copy_previous(req, cur, data);
        }
        if matches!(
            req.op,
            Op::Set | Op::Add | Op::Replace | Op::Append | Op::Prepend | Op::Cas
        ) {
            // memcached counts every storage command, stored or not.
            self.stats.cmd_set += 1;
        }
        match req.op {
            // A meta get that may create or change its item (`N`, `E`).
            Op::Get | Op::Gets => self.meta_get(req, h, now, cur, data),
            Op::Gat | Op::Gats => {
                self.stats.cmd_touch += 1;
                let Some(loc) = cur else {
                    self.stats.get_misses += 1;
                    self.stats.touch_misses += 1;
                    return match self.vivify(req, h, now) {
                        Some(loc) => self.answer_created(req, loc, now, data),
                        None => Response::Miss,
                    };
                };
                let raw = expiry_from_exptime(req.exptime, now).to_raw();
                self.store.set_expiry(loc, raw);
                self.stats.get_hits += 1;
                self.stats.touch_hits += 1;
                self.store.note(loc, ClassOp::Touch);
                self.rd_answer_hit(req, loc, now, data)
            }
            Op::Set => self.store_request(req, h, now, cur),
            Op::Add => match cur {
                Some(loc) => {
                    // memcached bumps an item that an ADD found.
                    self.store.touch_ref(loc);
                    Response::NotStored
                }
                None => self.store_request(req, h, now, None),
            },
            Op::Replace => match cur {
                Some(_) => self.store_request(req, h, now, cur),
                None => Response::NotStored,
            },
            Op::Append | Op::Prepend => {
                let Some(loc) = cur else {
                    return match req.meta.vivify {
                        // meta `ms MA N<ttl>`: a miss creates the item from the data.
                        Some(ttl) => self.store_new(
                            req.key,
                            h,
                            Parts::One(req.value),
                            req.flags,
                            ttl,
                            now,
                            None,
                        ),
                        None => Response::NotStored,
                    };
                };
                if req.cas != 0 && self.store.get(loc).map(|i| i.cas()) != Some(req.cas) {
                    return Response::Exists;
                }
                let item = self.store.get(loc).expect("found live above");
                let (flags, expiry) = (item.flags(), item.expiry());
                self.value_buf.clear();
                self.value_buf.extend_from_slice(item.value());
                let parts = if req.op == Op::Append {
                    Parts::Two(0, req.value)
                } else {
                    Parts::Two(1, req.value)
                };
                self.store_raw(req.key, h, parts, flags, expiry, now, cur)
            }
            Op::Cas => {
                let Some(loc) = cur else {
                    self.stats.cas_misses += 1;
                    return Response::NotFound;
                };
                let item = self.store.get(loc).expect("found live above");
                if item.cas() != req.cas {
                    // meta `ms I`: an older CAS still stores, as a stale item.
                    if req.meta.invalidate && req.cas < item.cas() {
                        self.stats.cas_hits += 1;
                        self.store.note(loc, ClassOp::CasHit);
                        let r = self.store_request(req, h, now, cur);
                        self.mark_stale_new(&r);
                        return r;
                    }
                    self.stats.cas_badval += 1;
                    self.store.note(loc, ClassOp::CasBadval);
                    return Response::Exists;
                }
                self.stats.cas_hits += 1;
                self.store.note(loc, ClassOp::CasHit);
                self.store_request(req, h, now, cur)
            }
            Op::Delete => match cur {
                Some(loc)
                    if req.cas != 0 && self.store.get(loc).map(|i| i.cas()) != Some(req.cas) =>
                {
                    // A delete that names a CAS (meta `md C`) only removes that version.
                    Response::Exists
                }
                Some(loc) if req.meta.invalidate || req.meta.strip_value => {
                    self.delete_in_place(req, h, now, loc)
                }
                Some(loc) => {
                    self.store.note(loc, ClassOp::Delete);
                    self.unlink(req.key, h, loc);
                    self.stats.delete_hits += 1;
                    Response::Deleted
                }
                None => {
                    self.stats.delete_misses += 1;
                    Response::NotFound
                }
            },
            Op::Incr | Op::Decr => self.arith(req, h, now, cur),
            Op::Vector => self.vector_op(req, cur, data),
            Op::Touch => {
                self.stats.cmd_touch += 1;
                match cur {
                    Some(loc) => {
                        let raw = expiry_from_exptime(req.exptime, now).to_raw();
                        self.store.set_expiry(loc, raw);
                        self.store.touch_ref(loc);
                        self.stats.touch_hits += 1;
                        self.store.note(loc, ClassOp::Touch);
                        Response::Touched
                    }
                    None => {
                        self.stats.touch_misses += 1;
                        Response::NotFound
                    }
                }
            }
        }
    }

    /// Merging for hot keys: an in-place atomic leaves its key's location in the same-key
    /// table (a resident entry), so the operations after it on that key, in this batch and
    /// the next ones until the table is applied, are forwarded from there without searching
    /// the index. Only while index writes are delayed: otherwise the table stays empty and
    /// the CPU index is the one place to look.
    fn forward_atomic(&mut self, key: &[u8], h: &KeyHash, cur: Option<Location>) {
        let Some(loc) = cur else { return };
        if !self.merge_atomics || !self.delay_writes {
            return;
        }
        if self.pending.get(key, h).is_some() {
            self.stats.merged_writes += 1;
        } else {
            self.pending.insert(key, Waiting::resident(*h, loc));
        }
    }

    /// KVCG's previous value: a storage command or DELETE that asked for it copies the value
    /// its key holds now, before it runs (answered whatever the command then does).
    fn copy_previous(&mut self, req: &Request<'_>, cur: Option<Location>, data: &mut Vec<u8>) {
        let writes = matches!(
            req.op,
            Op::Set | Op::Add | Op::Replace | Op::Append | Op::Prepend | Op::Cas | Op::Delete
        );
        if let (true, Some(item)) = (writes, cur.and_then(|l| self.store.get(l))) {
            let offset = data.len();
            data.extend_from_slice(item.value());
            self.previous = Some(hkv_types::Previous {
                offset,
                len: item.value_len() as u32,
                flags: item.flags(),
            });
        }
    }

    fn arith(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        now: u32,
        cur: Option<Location>,
    ) -> Response {
        let incr = req.op == Op::Incr;
        if let Some(loc) = cur {
            if req.cas != 0 && self.store.get(loc).map(|i| i.cas()) != Some(req.cas) {
                return Response::Exists;
            }
        }
        if let (None, Some(initial)) = (cur, req.initial) {
            // Binary incr/decr (and meta `ma N`): a miss creates the counter at `initial`.
            let text = initial.to_string();
            self.value_buf.clear();
            self.value_buf.extend_from_slice(text.as_bytes());
            let raw = match expiry_from_exptime(req.exptime, now) {
                Expiry::AlreadyExpired => return Response::Number(initial),
                e => e.to_raw(),
            };
            return match self.store_raw(req.key, h, Parts::Buf, 0, raw, now, None) {
                Response::Stored => {
                    self.last.created = true;
                    Response::Number(initial)
                }
                other => other,
            };
        }
        let Some(loc) = cur else {
            if incr {
                self.stats.incr_misses += 1;
            } else {
                self.stats.decr_misses += 1;
            }
            return Response::NotFound;
        };
        let item = self.store.get(loc).expect("found live above");
        let Some(old) = parse_counter(item.value()) else {
            return Response::NonNumeric;
        };
        // memcached: incr wraps at 2^64, decr stops at 0.
        let new = if incr {
            old.wrapping_add(req.delta)
        } else {
            old.saturating_sub(req.delta)
        };
        let text = new.to_string();
        let (flags, old_len) = (item.flags(), item.value_len());
        let expiry = match req.meta.ttl {
            // meta `ma T`: a success also sets the TTL.
            Some(t) => expiry_from_exptime(t, now).to_raw(),
            None => item.expiry(),
        };
        if incr {
            self.stats.incr_hits += 1;
            self.store.note(loc, ClassOp::Incr);
        } else {
            self.stats.decr_hits += 1;
            self.store.note(loc, ClassOp::Decr);
        }
        if text.len() == old_len {
            self.store.overwrite_value(loc, text.as_bytes());
            self.store.set_expiry(loc, expiry);
            let cas = self.store.set_cas(loc, self.cas_override);
            self.store.touch_ref(loc);
            self.last = After {
                cas: cas.unwrap_or(0),
                len: old_len as u32,
                expiry,
                created: false,
                previous: None,
            };
            return Response::Number(new);
        }
        self.value_buf.clear();
        self.value_buf.extend_from_slice(text.as_bytes());
        match self.store_raw(req.key, h, Parts::Buf, flags, expiry, now, cur) {
            Response::Stored => Response::Number(new),
            other => other,
        }
    }

    /// Stores the request's own value, flags and exptime as the new version of its key.
    fn store_request(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        now: u32,
        cur: Option<Location>,
    ) -> Response {
        self.store_new(
            req.key,
            h,
            Parts::One(req.value),
            req.flags,
            req.exptime,
            now,
            cur,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn store_new(
        &mut self,
        key: &[u8],
        h: &KeyHash,
        value: Parts<'_>,
        flags: u32,
        exptime: i64,
        now: u32,
        cur: Option<Location>,
    ) -> Response {
        match expiry_from_exptime(exptime, now) {
            Expiry::AlreadyExpired => {
                // memcached stores it and it is never seen again: the old value is gone too.
                if let Some(old) = cur {
                    self.unlink(key, h, old);
                }
                Response::Stored
            }
            e => self.store_raw(key, h, value, flags, e.to_raw(), now, cur),
        }
    }

    /// MM for a new version of `key` (its IN waits in the same-key table); `cur` is the live
    /// version it replaces, if any.
    #[allow(clippy::too_many_arguments)]
    fn store_raw(
        &mut self,
        key: &[u8],
        h: &KeyHash,
        value: Parts<'_>,
        flags: u32,
        raw_expiry: u32,
        now: u32,
        cur: Option<Location>,
    ) -> Response {
        // Retire the version being replaced before anything else: from here on CLOCK cannot
        // reclaim it, an index rebuild (a device failing inside the reclaim callback) cannot
        // index it beside the new one, and its chunk is not reused until the index has let go
        // of it. memcached drops the old value when the new one cannot be stored, so retiring
        // it first changes nothing a client sees.
        let mut old = cur.filter(|&c| self.store.retire(c));
        if !self.pending.is_empty() {
            let len = match value {
                Parts::One(v) => v.len(),
                Parts::Buf => self.value_buf.len(),
                Parts::Two(_, v) => v.len() + self.value_buf.len(),
            };
            if !self.store.has_room(key.len(), len) {
                // Free the retired versions the table holds back before CLOCK would take a
                // live item for want of their chunks.
                self.apply_pending();
                old = self.still_retired(old);
            }
        }
        let mut stored = self.mm_store_item(key, &value, flags, raw_expiry, now);
        if matches!(stored, Err(StoreError::OutOfMemory)) && !self.pending.is_empty() {
            // Retired versions hold chunks back from reuse until the index lets go of them.
            self.apply_pending();
            old = self.still_retired(old);
            stored = self.mm_store_item(key, &value, flags, raw_expiry, now);
        }
        let (loc, cas) = match stored {
            Ok(v) => v,
            Err(e) => {
                // memcached unlinks the old item when it cannot store the new one, so a
                // failed SET never leaves stale data behind.
                if let Some(o) = old {
                    self.unlink_retired(key, h, o);
                }
                return match e {
                    StoreError::TooLarge => {
                        self.stats.too_large += 1;
                        Response::TooLarge
                    }
                    StoreError::OutOfMemory => Response::OutOfMemory,
                    StoreError::KeyTooLong => Response::KeyTooLong,
                };
            }
        };
        self.link(key, h, loc, old);
        self.last_loc = loc;
        if self.binary_key {
            self.store.update_bits(loc, hkv_store::BINARY_KEY, 0);
        }
        let cas = match self.cas_override {
            Some(c) => self.store.set_cas(loc, Some(c)).unwrap_or(cas),
            None => cas,
        };
        let len = self.store.get(loc).map_or(0, |i| i.value_len() as u32);
        self.last = After {
            cas,
            len,
            expiry: raw_expiry,
            created: false,
            previous: None,
        };
        Response::Stored
    }

    /// MM: the store call of [`Partition::store_raw`] (allocate, evicting by CLOCK or moving
    /// a page when memory is spent, and write the item).
    fn mm_store_item(
        &mut self,
        key: &[u8],
        value: &Parts<'_>,
        flags: u32,
        raw_expiry: u32,
        now: u32,
    ) -> Result<(Location, u64), StoreError> {
        let Partition {
            index,
            store,
            value_buf,
            pending,
            evicted,
            ..
        } = self;
        let buf: &[u8] = value_buf;
        let (a, b): (&[u8], &[u8]) = match *value {
            Parts::One(v) => (v, &[]),
            Parts::Buf => (buf, &[]),
            Parts::Two(0, v) => (buf, v),
            Parts::Two(_, v) => (v, buf),
        };
        let stored = store.store(key, &[a, b], flags, raw_expiry, now, |k, l, why| {
            if let (Some(log), Reclaim::Evicted) = (evicted.as_mut(), why) {
                log.push(k.to_vec());
            }
            forget_reclaimed(index, pending, k, l);
        });
        // A device that failed inside that callback is replaced by a CPU table rebuilt from
        // the store now (the new item included, the reclaimed and retired ones not).
        let settled = self.index.settle(&self.store);
        self.dropped.extend(settled);
        self.free_dropped();
        stored
    }

    /// `slabs reassign`: moves one page of this partition's store from class `from` to `to`
    /// (0-based), dropping the index entries of the items it evicts.
    pub fn reassign(&mut self, from: usize, to: usize, now: u32) -> Result<(), ReassignError> {
        // Retired versions pin their pages until the index lets go of them.
        self.apply_pending();
        let Partition {
            index,
            store,
            pending,
            evicted,
            ..
        } = self;
        let r = store.reassign(from, to, now, |k, l, why| {
            if let (Some(log), Reclaim::Evicted) = (evicted.as_mut(), why) {
                log.push(k.to_vec());
            }
            forget_reclaimed(index, pending, k, l);
        });
        let settled = self.index.settle(&self.store);
        self.dropped.extend(settled);
        self.free_dropped();
        r
    }

    pub fn set_automove(&mut self, on: bool) {
        self.store.set_automove(on);
    }

    /// `-M`: no live item is evicted for room (see [`crate::EngineConfig::evictions`]).
    pub fn set_evictions(&mut self, on: bool) {
        self.store.set_evictions(on);
    }

    /// Background expiry, bounded per call; runs when the clock has moved on.
    fn maybe_sweep(&mut self, now: u32) {
        if now <= self.last_sweep {
            return;
        }
        let seconds = if self.last_sweep == 0 {
            1
        } else {
            (now - self.last_sweep).min(SWEEP_MAX_SECONDS)
        };
        self.last_sweep = now;
        let Partition {
            index,
            store,
            stats,
            pending,
            ..
        } = self;
        let freed = store.sweep_expired(now, seconds * SWEEP_SLOTS_PER_SECOND, |k, l, _| {
            forget_reclaimed(index, pending, k, l);
        });
        stats.expired_swept += freed as u64;
        let settled = self.index.settle(&self.store);
        self.dropped.extend(settled);
        self.free_dropped();
    }

    /// All evictions: CLOCK in the store, the index's displacement bound, and signature
    /// collisions. Every item that disappears other than by delete or expiry is in here.
    pub fn evictions(&self) -> u64 {
        self.store.stats().evictions + self.stats.index_evictions + self.stats.collision_evictions
    }
}

/// The store took back the live item `l` of key `k` (CLOCK or expiry): drop it from the index,
/// or, if it is a newest version still waiting in the same-key table, from there (the key then
/// reads as missing, and the index entry of its older version goes with the next apply).
/// KC: the index matched a 32-bit signature; the full key decides. Every lookup passes here.
#[inline(always)]
fn kc_key_matches(item: &hkv_store::Item<'_>, key: &[u8]) -> bool {
    item.key() == key
}

fn forget_reclaimed(index: &mut Index, pending: &mut SameKeyTable, k: &[u8], l: Location) {
    let h = hash_key(k);
    if let Some(w) = pending.get_mut(k, &h) {
        if w.newest == Some(l) {
            w.newest = None;
            if !std::mem::take(&mut w.resident) {
                // Never indexed.
                return;
            }
        }
    }
    index.delete_in_reclaim(&h, l);
}

/// Where a new value's bytes come from (`Two(0, v)`: scratch buffer then `v`, i.e. append;
/// `Two(1, v)`: `v` then the buffer, i.e. prepend).
enum Parts<'a> {
    One(&'a [u8]),
    Buf,
    Two(u8, &'a [u8]),
}

/// memcached's `safe_strtoull` on an item value: decimal digits, optionally followed by
/// spaces (memcached pads decremented values) — anything else is not a number.
fn parse_counter(v: &[u8]) -> Option<u64> {
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0
        || v[digits..]
            .iter()
            .any(|&b| b != b' ' && b != b'\r' && b != b'\n')
    {
        return None;
    }
    std::str::from_utf8(&v[..digits]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_parse_like_memcached() {
        assert_eq!(parse_counter(b"0"), Some(0));
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b"12  "), Some(12));
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"-1"), None);
        assert_eq!(parse_counter(b"1a"), None);
        assert_eq!(parse_counter(b" 1"), None);
    }
}

/// Test knob for the linearizability checker's self-test: `HKV_FAULT_SKIP_FORWARDING=1`
/// breaks the same-key table's data forwarding on purpose (reads skip waiting writes and see
/// the index's older version), so scripts can show the checker catches a broken build.
mod fault {
    use std::sync::OnceLock;

    pub(super) fn skip_forwarding() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        *ON.get_or_init(|| std::env::var_os("HKV_FAULT_SKIP_FORWARDING").is_some_and(|v| v == "1"))
    }
}
