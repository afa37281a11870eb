//! What a store reports: its totals (summed over partitions) and each class's counters, as
//! memcached's `stats`, `stats slabs` and `stats items` show them.

use crate::class::ClassInfo;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub curr_items: u64,
    pub total_items: u64,
    pub evictions: u64,
    pub reclaimed: u64,
    pub pages: u64,
    /// Header, key and value bytes of live items (memcached's `bytes`).
    pub bytes: u64,
    pub out_of_memory: u64,
    /// Pages moved from one slab class to another, and the items evicted to free them.
    pub pages_moved: u64,
    pub page_move_evictions: u64,
    /// Evicted or expired before anyone read them (memcached's names).
    pub evicted_unfetched: u64,
    pub expired_unfetched: u64,
    /// Chunks the expiry sweep and crawls have examined (memcached's `crawler_items_checked`).
    pub crawler_checked: u64,
    /// Chunk size of the largest class that has ever had a page: no value stored, now or
    /// before, is longer (pages never leave a class), so it bounds what a read can return.
    pub largest_chunk: u64,
    /// Chunks lent to sends without a copy, and their value bytes (store/pins.rs).
    pub pinned_chunks: u64,
    pub pinned_bytes: u64,
    /// CLOCK victims passed over because a send still read them (memcached's
    /// `lrutail_reflocked`: tail items it could not evict for their references).
    pub pinned_skips: u64,
}

/// Where a crawl ([`SlabStore::crawl`]) or an item listing ([`SlabStore::scan_items`]) goes
/// on from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrawlCursor {
    /// Index into the crawl's class list.
    pub class: usize,
    pub slot: u32,
    pub done: bool,
}

impl StoreStats {
    /// Adds another store's figures (partitions summed into one report).
    pub fn add(&mut self, o: &StoreStats) {
        self.curr_items += o.curr_items;
        self.total_items += o.total_items;
        self.evictions += o.evictions;
        self.reclaimed += o.reclaimed;
        self.pages += o.pages;
        self.bytes += o.bytes;
        self.out_of_memory += o.out_of_memory;
        self.pages_moved += o.pages_moved;
        self.page_move_evictions += o.page_move_evictions;
        self.evicted_unfetched += o.evicted_unfetched;
        self.expired_unfetched += o.expired_unfetched;
        self.crawler_checked += o.crawler_checked;
        self.largest_chunk = self.largest_chunk.max(o.largest_chunk);
        self.pinned_chunks += o.pinned_chunks;
        self.pinned_bytes += o.pinned_bytes;
        self.pinned_skips += o.pinned_skips;
    }
}

/// Per-class counters, for memcached's `stats slabs` and `stats items`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCounts {
    /// Items stored into this class.
    pub sets: u64,
    /// Reads that found an item of this class.
    pub hits: u64,
    pub delete_hits: u64,
    pub incr_hits: u64,
    pub decr_hits: u64,
    pub cas_hits: u64,
    pub cas_badval: u64,
    pub touch_hits: u64,
    /// Seconds since the last access of the item evicted last (memcached's `evicted_time`).
    pub evicted_time: u64,
    pub evicted: u64,
    /// Evicted items that had an expiry time.
    pub evicted_nonzero: u64,
    pub evicted_unfetched: u64,
    pub expired_unfetched: u64,
    /// Expired items taken back for reuse.
    pub reclaimed: u64,
    pub out_of_memory: u64,
    /// Header, key and value bytes of the live items.
    pub bytes: u64,
}

impl ClassCounts {
    /// Adds another partition's counters of the same class (`evicted_time`: the later).
    pub fn add(&mut self, o: &ClassCounts) {
        self.sets += o.sets;
        self.hits += o.hits;
        self.delete_hits += o.delete_hits;
        self.incr_hits += o.incr_hits;
        self.decr_hits += o.decr_hits;
        self.cas_hits += o.cas_hits;
        self.cas_badval += o.cas_badval;
        self.touch_hits += o.touch_hits;
        self.evicted_time = self.evicted_time.max(o.evicted_time);
        self.evicted += o.evicted;
        self.evicted_nonzero += o.evicted_nonzero;
        self.evicted_unfetched += o.evicted_unfetched;
        self.expired_unfetched += o.expired_unfetched;
        self.reclaimed += o.reclaimed;
        self.out_of_memory += o.out_of_memory;
        self.bytes += o.bytes;
    }
}

/// A command that found an item, counted per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassOp {
    Hit,
    Delete,
    Incr,
    Decr,
    CasHit,
    CasBadval,
    Touch,
}

/// One class as `stats slabs`/`stats items` report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassReport {
    pub info: ClassInfo,
    pub pages: usize,
    pub items: u64,
    /// Chunks holding parts of chained items (values larger than the largest chunk).
    pub parts: u64,
    /// Chunks never handed out yet (memcached's `free_chunks_end`).
    pub untouched: u64,
    pub counts: ClassCounts,
    /// The oldest last access among the items CLOCK will consider next (the
    /// [`TAIL_SAMPLE`] chunks from its hand): what memcached's `age` reports of its LRU tail.
    pub tail_atime: Option<u32>,
}

/// Chunks from the CLOCK hand looked at for [`ClassReport::tail_atime`].
pub const TAIL_SAMPLE: u32 = 256;

impl ClassReport {
    /// Adds another partition's report of the same class.
    pub fn add(&mut self, o: &ClassReport) {
        self.pages += o.pages;
        self.items += o.items;
        self.parts += o.parts;
        self.untouched += o.untouched;
        self.counts.add(&o.counts);
        self.tail_atime = match (self.tail_atime, o.tail_atime) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_counts_of_two_partitions_add_up_and_keep_the_later_eviction_time() {
        let a = ClassCounts {
            sets: 3,
            hits: 5,
            evicted: 1,
            evicted_time: 40,
            bytes: 100,
            ..ClassCounts::default()
        };
        let b = ClassCounts {
            sets: 2,
            hits: 1,
            cas_badval: 4,
            evicted_time: 7,
            bytes: 50,
            ..ClassCounts::default()
        };
        let mut sum = a;
        sum.add(&b);
        assert_eq!(
            sum,
            ClassCounts {
                sets: 5,
                hits: 6,
                cas_badval: 4,
                evicted: 1,
                evicted_time: 40,
                bytes: 150,
                ..ClassCounts::default()
            }
        );
    }
}
