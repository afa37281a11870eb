//! The CPU backend: one partition's table, owned by one engine thread.
//!
//! Concurrency is by ownership, not locks (MICA's partitioning, see docs/index.md): each
//! engine thread owns the tables of its hash partitions outright, so a probe is plain loads
//! and an insert plain stores. The batched calls hide memory latency by prefetching the
//! buckets of queries [`SEARCH_PREFETCH_DISTANCE`] (searches) or [`PREFETCH_DISTANCE`]
//! (inserts and deletes) ahead of the one being probed.

use hkv_mem::{Arena, Carved};

use crate::bucket::{Bucket, SLOTS};
use crate::dirty::{Changes, Dirty};
use crate::hash::{alt_bucket, KeyHash, EMPTY_SIGNATURE, MAX_DISPLACEMENTS};
use crate::{IndexBackend, IndexError, IndexStats, InsertOutcome, Location, NO_LOCATION};
use hkv_mem::prefetch_read;

/// How many queries ahead batched inserts and deletes prefetch. Enough to cover DRAM latency
/// (~100 ns) at a few ns per probe, few enough that lines are not evicted before use.
pub const PREFETCH_DISTANCE: usize = 16;
/// How many queries ahead a batched search prefetches. A probe of a loaded bucket costs a
/// few ns and a bucket miss on the machines measured ~185 ns (the random-read yardstick
/// sustains 32 misses in flight at 5.8 ns each), so a search needs far more misses in flight
/// than an insert: 64 ahead measured 105 Mops for K8's index alone against 67 at 16 (85 at
/// 32, 98 at 48; docs/BENCHMARKS.md). Inserts and deletes fetch two buckets each and do more
/// per query, so they stay at [`PREFETCH_DISTANCE`].
pub const SEARCH_PREFETCH_DISTANCE: usize = 64;
/// Queries probed per round of the two-pass search (primary buckets, then the alternates of
/// the misses). Bounded so the miss list lives on the stack.
const SEARCH_CHUNK: usize = 64;

pub struct CpuIndex {
    mem: Carved,
    mask: u32,
    stats: IndexStats,
    rng: u32,
    /// Pages written since a device's copy was last updated (only while one mirrors it).
    dirty: Option<Dirty>,
}

impl std::fmt::Debug for CpuIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuIndex")
            .field("buckets", &(self.mask as u64 + 1))
            .field("stats", &self.stats)
            .finish()
    }
}

impl CpuIndex {
    /// A table of `buckets` (a power of two) carved out of the budget, huge-page aligned.
    pub fn new(arena: &Arena, buckets: u32) -> Result<CpuIndex, IndexError> {
        if !buckets.is_power_of_two() {
            return Err(IndexError::Size(format!("{buckets} is not a power of two")));
        }
        let bytes = buckets as usize * std::mem::size_of::<Bucket>();
        let mut mem = arena.carve(bytes, hkv_mem::HUGE_PAGE.min(bytes.next_power_of_two()))?;
        for b in bytemuck::cast_slice_mut::<u8, Bucket>(&mut mem) {
            b.locs = [NO_LOCATION; SLOTS];
        }
        Ok(CpuIndex {
            mem,
            mask: buckets - 1,
            stats: IndexStats::default(),
            rng: 0x9e37_79b9,
            dirty: None,
        })
    }

    #[inline(always)]
    fn buckets(&self) -> &[Bucket] {
        bytemuck::cast_slice(&self.mem)
    }

    #[inline(always)]
    fn buckets_mut(&mut self) -> &mut [Bucket] {
        bytemuck::cast_slice_mut(&mut self.mem)
    }

    /// Empties the table (`flush_all`).
    pub fn clear(&mut self) {
        for b in self.buckets_mut() {
            b.sigs = [EMPTY_SIGNATURE; SLOTS];
            b.locs = [NO_LOCATION; SLOTS];
        }
        self.stats.entries = 0;
        if let Some(d) = &mut self.dirty {
            d.mark_all();
        }
    }

    /// Starts (or stops) recording which pages change, for a device that searches a copy
    /// of this table; the first [`CpuIndex::take_changes`] then asks for all of it.
    pub fn track_changes(&mut self, on: bool) {
        self.dirty = on.then(|| Dirty::new(self.bucket_count()));
    }

    /// What changed since the last call (everything when changes are not tracked).
    pub fn take_changes(&mut self) -> Changes {
        self.dirty.as_mut().map_or(Changes::All, Dirty::take)
    }

    /// The table's words (bucket `i` is words `16 i .. 16 i + 16`, index.cl's layout).
    pub fn words(&self) -> &[u32] {
        bytemuck::cast_slice(&self.mem)
    }

    #[inline(always)]
    fn touched(&mut self, bucket: u32) {
        if let Some(d) = &mut self.dirty {
            d.mark(bucket);
        }
    }

    pub fn bucket_count(&self) -> u32 {
        self.mask + 1
    }

    /// Entries over slots.
    pub fn load(&self) -> f64 {
        self.stats.entries as f64 / (self.bucket_count() as f64 * SLOTS as f64)
    }

    /// The table's memory (a warm restart saves where it is; a grown index recycles it).
    pub fn memory(&self) -> &Carved {
        &self.mem
    }

    pub fn into_memory(self) -> Carved {
        self.mem
    }

    /// The first word of the table, for a device that works on it in place (an OpenCL
    /// buffer over host memory, see `OclIndex::share_host_table`). Bucket `i` is words
    /// `16 i .. 16 i + 16`, the layout index.cl expects.
    pub fn table_ptr(&mut self) -> *mut u32 {
        self.mem.as_mut_ptr().cast()
    }

    /// Counts entries another processor added to or removed from this table in place.
    pub fn note_entries(&mut self, added: u64, removed: u64) {
        self.stats.entries = (self.stats.entries + added).saturating_sub(removed);
    }

    /// A table over memory a previous process used for one of `buckets` (a warm restart):
    /// emptied, since what it held is rebuilt from the store.
    pub fn from_memory(mem: Carved, buckets: u32) -> Result<CpuIndex, IndexError> {
        if !buckets.is_power_of_two()
            || mem.len() != buckets as usize * std::mem::size_of::<Bucket>()
        {
            return Err(IndexError::Size(format!(
                "{} bytes is no table of {buckets} buckets",
                mem.len()
            )));
        }
        let mut ix = CpuIndex {
            mem,
            mask: buckets - 1,
            stats: IndexStats::default(),
            rng: 0x9e37_79b9,
            dirty: None,
        };
        ix.clear();
        Ok(ix)
    }

    /// The two candidate buckets of a key.
    #[inline(always)]
    pub fn candidates(&self, h: &KeyHash) -> (u32, u32) {
        let b1 = h.primary_bucket(self.mask);
        (b1, alt_bucket(b1, h.sig, self.mask))
    }

    /// Starts loading the primary bucket of `h`.
    #[inline(always)]
    pub fn prefetch(&self, h: &KeyHash) {
        let b = self.buckets();
        prefetch_read(&b[h.primary_bucket(self.mask) as usize]);
    }

    /// The location in `h`'s primary bucket whose signature matches, if any: a hint for
    /// prefetching the item a write will replace (the alternate bucket is not touched, so a
    /// new key costs one bucket load, the one already prefetched).
    #[inline(always)]
    pub fn peek_primary(&self, h: &KeyHash) -> Option<Location> {
        let bucket = &self.buckets()[h.primary_bucket(self.mask) as usize];
        bucket.find(h.sig).map(|s| bucket.locs[s])
    }

    /// Starts loading the alternate bucket of `h`: for a write whose key its primary bucket
    /// does not hold (a new key: both buckets are searched, then filled).
    #[inline(always)]
    pub fn prefetch_alternate(&self, h: &KeyHash) {
        let (_, b2) = self.candidates(h);
        prefetch_read(&self.buckets()[b2 as usize]);
    }

    pub fn search_one(&self, h: &KeyHash) -> Location {
        let (b1, b2) = self.candidates(h);
        let t = self.buckets();
        for b in [b1, b2] {
            let bucket = &t[b as usize];
            if let Some(s) = bucket.find(h.sig) {
                return bucket.locs[s];
            }
        }
        NO_LOCATION
    }

    pub fn insert_one(&mut self, h: &KeyHash, loc: Location) -> InsertOutcome {
        debug_assert_ne!(loc, NO_LOCATION);
        let (b1, b2) = self.candidates(h);
        let pref = h.preferred_slot();
        let t = self.buckets_mut();
        for b in [b1, b2] {
            let bucket = &mut t[b as usize];
            if let Some(s) = bucket.find(h.sig) {
                let old = bucket.locs[s];
                bucket.locs[s] = loc;
                self.touched(b);
                return InsertOutcome::Replaced(old);
            }
        }
        // Fill the primary bucket first: searches probe it first, and a key found there costs
        // one cache miss instead of two.
        for b in [b1, b2] {
            let bucket = &mut t[b as usize];
            if let Some(s) = bucket.empty_near(pref) {
                bucket.sigs[s] = h.sig;
                bucket.locs[s] = loc;
                self.stats.entries += 1;
                self.touched(b);
                return InsertOutcome::Inserted;
            }
        }
        self.displace(b1, h.sig, loc)
    }

    /// Random-walk cuckoo displacement (Mega-KV §4.2), bounded by [`MAX_DISPLACEMENTS`].
    fn displace(&mut self, start: u32, sig: u32, loc: Location) -> InsertOutcome {
        let mask = self.mask;
        let mut cur = (sig, loc);
        let mut bucket = start;
        self.stats.walks += 1;
        for step in 0..MAX_DISPLACEMENTS {
            self.stats.longest_walk = self.stats.longest_walk.max(step as u64 + 1);
            // Each step lands in a different bucket from the one the last entry moved into,
            // so any victim is fine.
            let victim = self.next_random() as usize % SLOTS;
            let t = self.buckets_mut();
            let slot = &mut t[bucket as usize];
            let evicted = (slot.sigs[victim], slot.locs[victim]);
            slot.sigs[victim] = cur.0;
            slot.locs[victim] = cur.1;
            self.touched(bucket);
            cur = evicted;
            self.stats.displacements += 1;
            bucket = alt_bucket(bucket, cur.0, mask);
            let t = self.buckets_mut();
            let next = &mut t[bucket as usize];
            let pref = (cur.0 >> 29) as usize;
            if let Some(s) = next.empty_near(pref) {
                next.sigs[s] = cur.0;
                next.locs[s] = cur.1;
                self.stats.entries += 1;
                self.touched(bucket);
                return InsertOutcome::Inserted;
            }
        }
        self.stats.evictions += 1;
        InsertOutcome::Evicted(cur.1)
    }

    pub fn delete_one(&mut self, h: &KeyHash, loc: Location) -> bool {
        let (b1, b2) = self.candidates(h);
        let t = self.buckets_mut();
        for b in [b1, b2] {
            let bucket = &mut t[b as usize];
            if let Some(s) = bucket.find(h.sig) {
                if bucket.locs[s] == loc {
                    bucket.sigs[s] = EMPTY_SIGNATURE;
                    bucket.locs[s] = NO_LOCATION;
                    self.stats.entries -= 1;
                    self.touched(b);
                    return true;
                }
                // The signature is unique within the pair, so it cannot be elsewhere.
                return false;
            }
        }
        false
    }

    fn next_random(&mut self) -> u32 {
        // xorshift32: the walk only needs to avoid cycles, not cryptographic quality.
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        x
    }

    /// Every occupied slot, for rebuilding and for checks.
    pub fn for_each_entry(&self, mut f: impl FnMut(u32, u32, Location)) {
        for (i, b) in self.buckets().iter().enumerate() {
            for s in 0..SLOTS {
                if b.sigs[s] != EMPTY_SIGNATURE {
                    f(i as u32, b.sigs[s], b.locs[s]);
                }
            }
        }
    }
}

impl IndexBackend for CpuIndex {
    fn search(&self, hashes: &[KeyHash], out: &mut [Location]) {
        assert_eq!(hashes.len(), out.len());
        let t = self.buckets();
        let mask = self.mask;
        let n = hashes.len();
        for h in hashes.iter().take(SEARCH_PREFETCH_DISTANCE) {
            prefetch_read(&t[h.primary_bucket(mask) as usize]);
        }
        let mut misses = [0u8; SEARCH_CHUNK];
        for start in (0..n).step_by(SEARCH_CHUNK) {
            let end = (start + SEARCH_CHUNK).min(n);
            let mut nmiss = 0;
            for i in start..end {
                if let Some(h) = hashes.get(i + SEARCH_PREFETCH_DISTANCE) {
                    prefetch_read(&t[h.primary_bucket(mask) as usize]);
                }
                let h = &hashes[i];
                let b = &t[h.primary_bucket(mask) as usize];
                match b.find(h.sig) {
                    Some(s) => out[i] = b.locs[s],
                    None => {
                        misses[nmiss] = (i - start) as u8;
                        nmiss += 1;
                    }
                }
            }
            // Second pass: the alternates of this chunk's misses, all loads in flight at once.
            for &m in &misses[..nmiss] {
                let h = &hashes[start + m as usize];
                prefetch_read(&t[alt_bucket(h.primary_bucket(mask), h.sig, mask) as usize]);
            }
            for &m in &misses[..nmiss] {
                let i = start + m as usize;
                let h = &hashes[i];
                let b = &t[alt_bucket(h.primary_bucket(mask), h.sig, mask) as usize];
                out[i] = match b.find(h.sig) {
                    Some(s) => b.locs[s],
                    None => NO_LOCATION,
                };
            }
        }
    }

    fn insert(&mut self, entries: &[(KeyHash, Location)], out: &mut [InsertOutcome]) {
        assert_eq!(entries.len(), out.len());
        for (i, (h, loc)) in entries.iter().enumerate() {
            if let Some((ahead, _)) = entries.get(i + PREFETCH_DISTANCE) {
                let (b1, b2) = self.candidates(ahead);
                let t = self.buckets();
                prefetch_read(&t[b1 as usize]);
                prefetch_read(&t[b2 as usize]);
            }
            out[i] = self.insert_one(h, *loc);
        }
    }

    fn delete(&mut self, entries: &[(KeyHash, Location)], out: &mut [bool]) {
        assert_eq!(entries.len(), out.len());
        for (i, (h, loc)) in entries.iter().enumerate() {
            if let Some((ahead, _)) = entries.get(i + PREFETCH_DISTANCE) {
                self.prefetch(ahead);
            }
            out[i] = self.delete_one(h, *loc);
        }
    }

    fn stats(&self) -> IndexStats {
        self.stats
    }

    fn table_bytes(&self) -> usize {
        self.mem.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{hash_key, SLOTS_PER_BUCKET};

    fn index(buckets: u32) -> CpuIndex {
        let arena = Arena::new(buckets as usize * 64 * 2 + (4 << 20)).unwrap();
        CpuIndex::new(&arena, buckets).unwrap()
    }

    /// A hash whose primary bucket and signature are chosen by the test.
    fn h(sig: u32, lo: u32) -> KeyHash {
        KeyHash { sig, lo }
    }

    #[test]
    fn insert_search_delete_round_trip() {
        let mut ix = index(64);
        let keys: Vec<KeyHash> = (0..200u32).map(|i| hash_key(&i.to_be_bytes())).collect();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(ix.insert_one(k, i as u32), InsertOutcome::Inserted);
        }
        let mut out = vec![0; keys.len()];
        ix.search(&keys, &mut out);
        assert_eq!(out, (0..200).collect::<Vec<_>>());
        let dels: Vec<_> = keys.iter().copied().zip(0..).collect();
        let mut ok = vec![false; dels.len()];
        ix.delete(&dels, &mut ok);
        assert!(ok.iter().all(|&x| x));
        ix.search(&keys, &mut out);
        assert!(out.iter().all(|&l| l == NO_LOCATION));
        assert_eq!(ix.stats().entries, 0);
    }

    #[test]
    fn same_signature_replaces_and_reports_the_old_location() {
        // Two different keys with the same signature and primary bucket: the index cannot
        // tell them apart, so the second replaces the first and says which location it lost.
        let mut ix = index(16);
        let a = h(0x1234_5678, 3);
        assert_eq!(ix.insert_one(&a, 10), InsertOutcome::Inserted);
        assert_eq!(ix.insert_one(&a, 11), InsertOutcome::Replaced(10));
        assert_eq!(ix.search_one(&a), 11);
        // Same signature arriving through its alternate bucket is the same pair: still a replace.
        let b1 = a.primary_bucket(15);
        let alt = alt_bucket(b1, a.sig, 15);
        let via_alt = h(a.sig, alt);
        assert_eq!(ix.insert_one(&via_alt, 12), InsertOutcome::Replaced(11));
        assert_eq!(ix.stats().entries, 1);
    }

    /// Signatures whose alternate of `bucket` is `alt` in a 16-bucket table.
    fn sigs_pairing(bucket: u32, alt: u32, n: usize) -> Vec<u32> {
        (1u32..)
            .filter(|&s| alt_bucket(bucket, s, 15) == alt)
            .take(n)
            .collect()
    }

    #[test]
    fn full_bucket_pair_displaces_into_other_buckets() {
        let mut ix = index(16);
        // Bucket 5 full of keys whose pair is {5, 6}; bucket 6 full of keys whose pair is
        // {6, 9}. A ninth {5, 6} key finds both full and must push a key from 6 on to 9.
        let a: Vec<KeyHash> = sigs_pairing(5, 6, 9).into_iter().map(|s| h(s, 5)).collect();
        let b: Vec<KeyHash> = sigs_pairing(6, 9, 8).into_iter().map(|s| h(s, 6)).collect();
        for (i, k) in a[..8].iter().chain(&b).enumerate() {
            assert_eq!(ix.insert_one(k, i as u32), InsertOutcome::Inserted);
        }
        assert_eq!(ix.stats().displacements, 0);
        assert_eq!(ix.insert_one(&a[8], 100), InsertOutcome::Inserted);
        assert!(ix.stats().displacements > 0);
        assert_eq!(ix.stats().evictions, 0);
        for (i, k) in a[..8].iter().chain(&b).enumerate() {
            assert_eq!(ix.search_one(k), i as u32, "key {i} lost by displacement");
        }
        assert_eq!(ix.search_one(&a[8]), 100);
        assert_eq!(ix.stats().entries, 17);
    }

    #[test]
    fn displacement_bound_drops_a_victim_and_counts_it() {
        // Two buckets in all: at most 16 entries fit, so the 17th insert must walk the whole
        // bound and drop someone.
        let mut ix = index(2);
        let mut evicted = Vec::new();
        for i in 0..17u32 {
            let k = h(0x1000_0000 + i * 7919, i);
            if let InsertOutcome::Evicted(l) = ix.insert_one(&k, i) {
                evicted.push(l);
            }
        }
        assert_eq!(evicted.len(), 1);
        assert_eq!(ix.stats().evictions, 1);
        assert_eq!(ix.stats().entries, 16);
        assert!(ix.stats().displacements >= MAX_DISPLACEMENTS as u64);
        let mut present = 0;
        ix.for_each_entry(|_, _, l| {
            assert_ne!(l, evicted[0]);
            present += 1;
        });
        assert_eq!(present, 16);
    }

    #[test]
    fn delete_of_a_stale_location_leaves_the_entry() {
        let mut ix = index(16);
        let k = h(77, 9);
        ix.insert_one(&k, 100);
        assert!(
            !ix.delete_one(&k, 99),
            "stale location must not delete the live entry"
        );
        assert_eq!(ix.search_one(&k), 100);
        assert!(ix.delete_one(&k, 100));
        assert!(!ix.delete_one(&k, 100));
        assert_eq!(ix.search_one(&k), NO_LOCATION);
    }

    #[test]
    fn one_bucket_table_works() {
        let mut ix = index(1);
        for i in 0..SLOTS_PER_BUCKET as u32 {
            assert_eq!(ix.insert_one(&h(i + 1, 0), i), InsertOutcome::Inserted);
        }
        assert!(matches!(
            ix.insert_one(&h(99, 0), 99),
            InsertOutcome::Evicted(_)
        ));
    }

    #[test]
    fn batched_search_matches_single_search_across_chunk_boundaries() {
        let mut ix = index(256);
        let keys: Vec<KeyHash> = (0..1500u32).map(|i| hash_key(&i.to_le_bytes())).collect();
        for (i, k) in keys.iter().enumerate().step_by(2) {
            ix.insert_one(k, i as u32);
        }
        let mut out = vec![0; keys.len()];
        ix.search(&keys, &mut out);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(out[i], ix.search_one(k));
        }
    }
}
