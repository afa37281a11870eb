/// One write in this many has its MM and IN parts timed (two clock reads per part; at one
/// in 8 the clock was 5% of a YCSB-A run on this VM).
pub const WRITE_SAMPLE: u64 = 32;
/// On the CPU engine, one batch in this many has its reads' IN, KC and RD timed (five clock
/// reads per read group, ~30 ns each on this VM: a tenth of a small batch's engine time).
/// With a device or delayed writes (C above zero) every batch is timed: the cost model and
/// the scheduler's fit learn from each.
pub const READ_SAMPLE: u64 = 8;

/// Engine counters for one partition (or summed over all).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub batches: u64,
    /// DIDO's engine tasks, in nanoseconds: IN (index searches, inserts and deletes, delayed
    /// writes applied), KC (key compare of reads, with the item loads it waits for), RD
    /// (replies of reads: value copies) and MM (slab allocation and value copy of writes).
    /// Reads are timed per read group, in one batch in [`READ_SAMPLE`] on the CPU engine;
    /// a write's MM and IN parts on one write in [`WRITE_SAMPLE`]; both scaled up.
    pub task_in_ns: u64,
    pub task_kc_ns: u64,
    pub task_rd_ns: u64,
    pub task_mm_ns: u64,
    pub get_hits: u64,
    pub get_misses: u64,
    /// The index found the signature but the stored key differed (a signature collision).
    pub key_mismatches: u64,
    /// Items dropped by the index at the displacement bound.
    pub index_evictions: u64,
    /// Items whose index slot was taken by another key with the same signature.
    pub collision_evictions: u64,
    /// Items found expired on access and removed.
    pub expired_on_access: u64,
    /// Items removed by the background sweep.
    pub expired_swept: u64,
    pub cmd_set: u64,
    pub cmd_touch: u64,
    pub delete_hits: u64,
    pub delete_misses: u64,
    pub incr_hits: u64,
    pub incr_misses: u64,
    pub decr_hits: u64,
    pub decr_misses: u64,
    pub cas_hits: u64,
    pub cas_misses: u64,
    pub cas_badval: u64,
    pub touch_hits: u64,
    pub touch_misses: u64,
    pub flushes: u64,
    /// Reads answered from the same-key table (a write to the key was still waiting).
    pub forwarded_reads: u64,
    /// Writes that merged into a waiting write of the same key (no extra index work).
    pub merged_writes: u64,
    /// Writes stored over their key's live item, in its chunk (same class, nothing pinned):
    /// no allocation and no index write.
    pub in_place_writes: u64,
    /// Index writes applied from the same-key table, and how many batches they went in.
    pub applied_writes: u64,
    pub write_applies: u64,
    /// Reads answered `Deferred` because the batch's value budget was spent.
    pub deferred_reads: u64,
    /// Writes refused as larger than the largest slab chunk (memcached's `store_too_large`).
    pub too_large: u64,
    /// Vector operations (`vupdate`, `vupdatev`, `vreduce`, `vfilter`) that found / missed
    /// their key.
    pub vector_hits: u64,
    pub vector_misses: u64,
    /// Vector updates run as OpenCL kernels, and kernels that failed (the CPU ran those).
    pub vector_device_ops: u64,
    pub vector_device_errors: u64,
    /// KC/RD kernels that failed (the CPU ran that group, and every group after).
    pub items_device_errors: u64,
    /// Hits answered as a pin on the item's chunk rather than a copy (partition/pin.rs).
    pub zero_copy_values: u64,
}

impl EngineStats {
    pub fn add(&mut self, o: &EngineStats) {
        macro_rules! sum {
            ($($f:ident),*) => { $( self.$f += o.$f; )* };
        }
        sum!(
            batches,
            task_in_ns,
            task_kc_ns,
            task_rd_ns,
            task_mm_ns,
            get_hits,
            get_misses,
            key_mismatches,
            index_evictions,
            collision_evictions,
            expired_on_access,
            expired_swept,
            cmd_set,
            cmd_touch,
            delete_hits,
            delete_misses,
            incr_hits,
            incr_misses,
            decr_hits,
            decr_misses,
            cas_hits,
            cas_misses,
            cas_badval,
            touch_hits,
            touch_misses,
            flushes,
            forwarded_reads,
            merged_writes,
            in_place_writes,
            applied_writes,
            write_applies,
            deferred_reads,
            too_large,
            vector_hits,
            vector_misses,
            vector_device_ops,
            vector_device_errors,
            items_device_errors,
            zero_copy_values
        );
    }
}
