//! One hash partition: an index table and a slab store, driven by one thread.

use hkv_index::opencl::OclIndex;
use hkv_index::{hash_key, CpuIndex, InsertOutcome, KeyHash, Location, NO_LOCATION};
use hkv_store::{
    expiry_from_exptime, ClassOp, Expiry, ReassignError, Reclaim, SlabStore, StoreError, StoreStats,
};

use crate::index::Index;
use crate::pending::{SameKeyTable, Waiting};
use crate::profile::OBSERVE_EVERY;
use crate::stats::{EngineStats, READ_SAMPLE, WRITE_SAMPLE};
use hkv_types::{After, GroupSpend, Op, Request, Response, Responses};

mod counter;
mod delayed;
mod fault;
mod growth;
mod items;
mod meta;
mod model;
mod pin;
mod timing;
pub use timing::BatchTiming;
mod budget;
pub(crate) use budget::ValueBudget;
pub(crate) mod placement;
mod read;
mod reclaim;
use reclaim::forget_reclaimed;
pub(crate) use reclaim::note_eviction;
mod stage;
mod sweep;
mod vector;
mod write;
mod write_search;

/// Reads deferred into one group before their searches run as one batch. Large enough to keep
/// many misses in flight and pay a group's pipeline fill and drain (a bucket's and an item's
/// miss, ~185 ns each here) once per 128 reads, small enough that a group's buckets and items
/// stay in L1/L2 (64 measured a 12% slower GET path on K8, 10M keys).
pub const READ_GROUP: usize = 128;
/// How far ahead, in a partition's requests, a write's index bucket is prefetched.
const WRITE_AHEAD: usize = 4;
/// How many reads ahead KC/RD starts loading an item (its header line, and the line its key
/// ends in when the chunk straddles two); 16 measured 6% slower with 128-read groups.
const ITEM_PREFETCH_DISTANCE: usize = 32;
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
    /// That flush's first part, a second early, is done (sweep.rs).
    flushed_early: bool,
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
    /// The signatures in `group`, as a 256-bit filter: a write scans the group for its
    /// signature only when its bit is set.
    group_sigs: [u64; 4],
    group_hashes: Vec<KeyHash>,
    group_locs: Vec<Location>,
    /// What KC found for each read of the group.
    group_kc: Vec<read::Kc>,
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
    /// KC and RD kernels over this partition's items, where the device shares host memory.
    items_device: Option<items::ItemsDevice>,
    /// Vector kernels on the index's device, if there is one.
    vector_device: Option<hkv_index::opencl::OclVector>,
    /// Under `auto`: the cost of a vector update on each processor by value size (None:
    /// no usable device, or another placement).
    vector_model: Option<crate::cost::ProcPair>,
    vector_placement: placement::VectorPlacement,
    /// IN for the writes of a batch, searched together before they run (see
    /// [`Partition::in_search_writes`]): per request index, what the index held for its key.
    write_locs: Vec<Option<Location>>,
    /// Whether `write_locs` still describes the index (nothing applied or rebuilt since).
    write_locs_valid: bool,
    /// Signatures whose index entries this batch wrote at once, as a 256-bit filter: their
    /// `write_locs` no longer hold.
    written_sigs: [u64; 4],
    /// The pre-searched location of the write being run, for [`Partition::find_live`].
    pre: Option<Location>,
    // Scratch for the write search.
    order: Vec<u32>,
    write_hashes: Vec<KeyHash>,
    write_owner: Vec<u32>,
    write_found: Vec<Location>,
    /// Writes of the batch not run yet: none left, nothing to prefetch for them.
    writes_left: usize,
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
    /// The background expiry sweep runs (`lru_crawler enable`, the default).
    sweep_on: bool,
    /// The server's `watch` hub, for `watch evictions`.
    watch: Option<std::sync::Arc<crate::watch::Watch>>,
    /// The workload over a sliding window (`profile_*` in `stats hkv`).
    pub(crate) profile: crate::profile::Profile,
    /// This write's MM and IN parts are timed (one in [`WRITE_SAMPLE`]).
    sample_write: bool,
    /// What each timed read of this batch stands for in the task timers: 0 when the batch's
    /// reads are not timed, else [`READ_SAMPLE`] (CPU engine, C = 0) or 1 (with a device or
    /// delayed writes).
    read_weight: u64,
    /// Draws the timed batches of [`Partition::execute`] (callers through the router draw
    /// their own).
    sampler: crate::Sampler,
    writes_seen: u64,
    /// See [`Partition::set_zero_copy_min`].
    zero_copy_min: usize,
    /// The pins of the run in progress (partition/pin.rs).
    pub(crate) pin_sink: pin::PinSink,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("index", &self.index.backend_name())
            .field("store", &self.store)
            .finish()
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
            flushed_early: false,
            last: After::default(),
            cas_override: None,
            last_loc: NO_LOCATION,
            binary_key: false,
            previous: None,
            hashes: Vec::new(),
            group: Vec::with_capacity(READ_GROUP),
            group_sigs: [0; 4],
            group_hashes: Vec::with_capacity(READ_GROUP),
            group_locs: Vec::with_capacity(READ_GROUP),
            group_kc: Vec::with_capacity(READ_GROUP),
            value_buf: Vec::new(),
            timing: BatchTiming::default(),
            pending: SameKeyTable::default(),
            write_every: write_every.max(2),
            delay_writes: true,
            merge_atomics: true,
            items_device: None,
            vector_device: None,
            vector_model: None,
            vector_placement: placement::VectorPlacement::Cpu,
            write_locs: Vec::new(),
            write_locs_valid: false,
            written_sigs: [0; 4],
            pre: None,
            order: Vec::new(),
            write_hashes: Vec::new(),
            write_owner: Vec::new(),
            write_found: Vec::new(),
            writes_left: 0,
            batches_since_apply: 0,
            seen_rebuilds: 0,
            applying: Vec::new(),
            apply_entries: Vec::new(),
            apply_owner: Vec::new(),
            apply_outcomes: Vec::new(),
            budget: ValueBudget::default(),
            evicted: None,
            watch: None,
            sweep_on: true,
            sample_write: false,
            read_weight: 1,
            sampler: crate::Sampler::default(),
            writes_seen: 0,
            profile: Default::default(),
            zero_copy_min: usize::MAX,
            pin_sink: pin::PinSink::default(),
        }
    }

    /// The index work of the batches run since the last call.
    pub fn take_timing(&mut self) -> BatchTiming {
        std::mem::take(&mut self.timing)
    }

    pub fn stats(&self) -> EngineStats {
        self.stats
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

    /// Frees `loc` as an eviction; true if it was a live item (one to count), whose key then
    /// goes into the eviction log when one is kept.
    fn evict(&mut self, loc: Location) -> bool {
        let watched = self
            .watch
            .as_ref()
            .is_some_and(|w| w.wants(crate::watch::stream::EVICTIONS));
        if self.evicted.is_some() || watched {
            if let Some(item) = self.store.get(loc) {
                note_eviction(&mut self.evicted, &self.watch, &item, loc, None);
            }
        }
        self.store.free(loc)
    }

    /// Where `watch evictions` lines go.
    pub fn set_watch(&mut self, watch: std::sync::Arc<crate::watch::Watch>) {
        self.watch = Some(watch);
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

    /// Puts the device on the CPU's own table where it shares host memory (see
    /// `Index::share`); before anything is stored.
    pub fn share_device_table(&mut self) {
        self.index.share();
        self.build_items_device();
    }

    /// Whether a device holds this partition's index.
    pub fn has_device(&self) -> bool {
        self.index.zero_copy().is_some()
    }

    /// Whether index writes may run on the device (a shared table or one of its own), so
    /// that delaying them into batches pays and every batch is timed for the cost model.
    /// A mirror's writes all run on the CPU: it is timed and delayed as the CPU engine is.
    pub fn device_writes(&self) -> bool {
        matches!(
            self.index.device_table(),
            crate::DeviceTable::Shared | crate::DeviceTable::Own
        )
    }

    pub fn store(&self) -> &SlabStore {
        &self.store
    }

    /// Runs a whole batch that belongs to this partition; appends one response per request.
    pub fn execute(&mut self, reqs: &[Request<'_>], now: u32, out: &mut Responses) {
        let mut hashes = std::mem::take(&mut self.hashes);
        hashes.clear();
        hashes.extend(reqs.iter().map(|r| hash_key(r.key)));
        let timed = self.sampler.one_in(READ_SAMPLE);
        self.execute_hashed(reqs, &hashes, timed, now, out);
        self.hashes = hashes;
    }

    /// [`Partition::execute`] with the keys' hashes already made (`hashes[i]` is
    /// `hash_key(reqs[i].key)`); `timed`: the batch is one the CPU engine times.
    pub(crate) fn execute_hashed(
        &mut self,
        reqs: &[Request<'_>],
        hashes: &[KeyHash],
        timed: bool,
        now: u32,
        out: &mut Responses,
    ) {
        out.begin_batch();
        let base = out.results.len();
        out.results.resize(base + reqs.len(), Response::Miss);
        out.after.resize(base + reqs.len(), After::default());
        let budget = ValueBudget::of(out);
        let Responses {
            results,
            after,
            data,
            pinned,
            groups,
            ..
        } = out;
        self.budget = budget;
        self.pin_sink.open(pinned);
        self.run(
            reqs,
            hashes,
            0..reqs.len() as u32,
            timed,
            now,
            &mut results[base..],
            &mut after[base..],
            data,
            groups,
        );
        self.pin_sink.close(pinned);
    }

    /// Runs the requests `which` (indices into `reqs` and `hashes`, in arrival order) and
    /// writes their responses at the same indices of `results`.
    ///
    /// Reads are deferred into a group and run as one pipelined batch (IN for all, then KC
    /// and RD for all, with prefetching between); a write runs at once unless a deferred read
    /// is for the same key, in which case the group runs first. So every key sees its
    /// operations in arrival order. `timed`: the CPU engine times this batch's reads (the
    /// caller draws one batch in [`READ_SAMPLE`], the same for all its partitions).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &mut self,
        reqs: &[Request<'_>],
        hashes: &[KeyHash],
        which: impl Iterator<Item = u32>,
        timed: bool,
        now: u32,
        results: &mut [Response],
        after: &mut [After],
        data: &mut Vec<u8>,
        groups: &mut Vec<GroupSpend>,
    ) {
        self.stats.batches += 1;
        // With a device that writes the cost model, and with delayed writes (C above
        // zero) the scheduler's fit, learn from every batch; those batches are few and
        // large. (A mirror's device searches are timed by the index itself.)
        self.read_weight = if self.device_writes() || self.delay_writes {
            1
        } else if timed {
            READ_SAMPLE
        } else {
            0
        };
        self.timing.sampled |= self.read_weight > 0;
        let batch_clock = self.index.batch_begin();
        self.store.drain_unpins();
        if let Some(at) = self.flush_at {
            self.flush_due(at, now);
        }
        // Delayed scheduling (Mega-KV §5.1): index writes go as one batch every n batches.
        if self.batches_since_apply >= self.write_every {
            self.apply_pending();
        }
        self.batches_since_apply += 1;
        self.maybe_sweep(now);
        self.group.clear();
        self.group_sigs = [0; 4];
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(which);
        let weight = OBSERVE_EVERY * u64::from(self.stats.batches.is_multiple_of(OBSERVE_EVERY));
        self.profile.observe(reqs, hashes, &order, weight);
        self.in_search_writes(reqs, hashes, &order);
        // Reads are searched 64 at a time on the CPU (enough to hide misses); a device
        // search pays a launch per call, so it gets every read up to the next write at once.
        // (Counted only with a device: the CPU engine's hot path does not pay for it.)
        let group_limit = if self.has_device() && {
            let reads = order
                .iter()
                .filter(|&&i| reqs[i as usize].is_read())
                .count();
            self.index.search_wants_device(reads) || self.items_want_device(reads)
        } {
            usize::MAX
        } else {
            READ_GROUP
        };
        for (pos, &i) in order.iter().enumerate() {
            let iu = i as usize;
            let req = &reqs[iu];
            let h = hashes[iu];
            if self.writes_left > 0 {
                self.prefetch_writes_ahead(reqs, hashes, &order, pos);
            }
            if req.is_read() {
                self.group.push(i);
                let (w, bit) = read::sig_bit(&h);
                self.group_sigs[w] |= bit;
                if self.group.len() >= group_limit {
                    self.flush_reads(reqs, hashes, now, results, data, groups);
                }
                continue;
            }
            // Same signature, not just same key: a write to a colliding key replaces the
            // other key's index entry, so the deferred read must run first to stay in order.
            let (w, bit) = read::sig_bit(&h);
            if self.group_sigs[w] & bit != 0
                && self.group.iter().any(|&g| hashes[g as usize].sig == h.sig)
            {
                self.flush_reads(reqs, hashes, now, results, data, groups);
            }
            self.writes_left = self.writes_left.saturating_sub(1);
            self.last = After::default();
            self.cas_override = req.meta.new_cas;
            self.binary_key = req.meta.binary_key;
            self.writes_seen += 1;
            self.sample_write = self.writes_seen & (WRITE_SAMPLE - 1) == 0;
            // Sampled like the MM and IN parts: two clock reads per write cost more than
            // a cached write itself on a VM's clock.
            let t = self.sample_write.then(std::time::Instant::now);
            self.pre = self.pre_searched(iu, &h);
            self.previous = None;
            results[iu] = self.write(req, &h, now, data);
            if let Some(st) = &req.staged {
                // A command that did not store its staged value (ADD of a present key, a
                // CAS mismatch, ...) gives the memory back; a stored one is an item now.
                self.store.release_stage(&stage_of(st));
            }
            self.sample_write = false;
            self.pre = None;
            self.timing.writes += 1;
            if let Some(t) = t {
                self.timing.write_ns += t.elapsed().as_nanos() as u64 * WRITE_SAMPLE;
            }
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
            self.flush_reads(reqs, hashes, now, results, data, groups);
        }
        self.write_locs_valid = false;
        self.index.batch_end(order.len(), batch_clock);
        self.order = order;
    }

    /// All evictions: CLOCK in the store, the index's displacement bound, and signature
    /// collisions. Every item that disappears other than by delete or expiry is in here.
    pub fn evictions(&self) -> u64 {
        self.store.stats().evictions + self.stats.index_evictions + self.stats.collision_evictions
    }
}

/// KC: the index matched a 32-bit signature; the full key decides. Every lookup passes here.
#[inline(always)]
fn kc_key_matches(item: &hkv_store::Item<'_>, key: &[u8]) -> bool {
    item.key_is(key)
}

/// Where a new value's bytes come from (`Two(0, v)`: scratch buffer then `v`, i.e. append;
/// `Two(1, v)`: `v` then the buffer, i.e. prepend).
pub(crate) enum Parts<'a> {
    One(&'a [u8]),
    Buf,
    Two(u8, &'a [u8]),
    /// Already in item memory (see [`hkv_types::Staged`]).
    Staged(hkv_store::Stage),
}

/// The store's handle for a value staged in this partition.
pub(crate) fn stage_of(s: &hkv_types::Staged) -> hkv_store::Stage {
    hkv_store::Stage {
        loc: s.loc,
        token: s.token,
        key_len: s.key_len as usize,
        value_len: s.value_len as usize,
    }
}
