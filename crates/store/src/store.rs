//! One partition's slab store.

mod automove;
mod chain;
mod chunks;
mod evict;
mod hit;
mod lookup;
mod overwrite;
mod pages;
mod pins;
mod recent;
mod release;
mod report;
mod scan;
mod stage;
mod warm;
pub use automove::{MAX_AGE_RATIO, WINDOW};
pub use chain::ValueParts;
use chunks::Class;
pub use hit::HitHeader;
pub use lookup::{ChunkAt, Lookup};
pub use pages::ReassignError;
pub use recent::RECENT_WRITES;
pub use report::{ClassCounts, ClassOp, ClassReport, CrawlCursor, StoreStats};
pub use stage::Stage;
pub use warm::{ClassImage, RestoreError, StoreImage};

use std::sync::Arc;

use hkv_mem::{Arena, ArenaError};

use crate::class::{chunk_sizes, ClassInfo};
use crate::item::*;
use crate::location::{decode, encode, Location, NO_LOCATION};

#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Page size; also the largest chunk. memcached's default: 1 MiB.
    pub page_size: usize,
    /// The longest value stored (memcached's `-I`, less the key and header); values past
    /// the largest chunk are chained (store/chain.rs).
    pub max_value: usize,
    /// Chunk size growth factor between classes (memcached `-f`).
    pub growth_factor: f64,
    /// CAS values are `cas_start + k * cas_step`, so partitions never hand out the same one.
    pub cas_start: u64,
    pub cas_step: u64,
    /// memcached's `-C` turns CAS off: every item's CAS is 0, so `gets` reports 0 and a
    /// compare never matches.
    pub cas: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            page_size: 1 << 20,
            max_value: 1 << 20,
            growth_factor: 1.25,
            cas_start: 1,
            cas_step: 1,
            cas: true,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("object too large for cache")]
    TooLarge,
    #[error("out of memory storing object")]
    OutOfMemory,
    #[error("key longer than {MAX_KEY_LEN} bytes")]
    KeyTooLong,
}

/// Why a live chunk was taken back; the owner of the index must drop its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// Not referenced since the CLOCK hand last passed it.
    Evicted,
    /// Its expiry time had passed.
    Expired,
}

/// How much of an item a lookup prefetches: the header, a key of up to 32 bytes and a short
/// value (longer ones are copied in order, which the hardware prefetcher follows).
const PREFETCH_ITEM_BYTES: usize = 128;

/// Item sizes (header, key and value) whose class is looked up in a table.
const SMALL_ITEM: usize = 4096;

/// One partition's items. See the crate docs for the memory layout.
pub struct SlabStore {
    arena: Arc<Arena>,
    classes: Vec<Class>,
    /// The class of every item size up to [`SMALL_ITEM`] bytes, by `size / 8`: every write
    /// picks a class, and a search over the classes touches a cache line per probe.
    small_class: Box<[u8]>,
    page_size: usize,
    stats: StoreStats,
    next_cas: u64,
    /// 0 with CAS off (`-C`): the counter never moves and hands out 0.
    cas_step: u64,
    /// Background sweep position: (class, slot).
    sweep_at: (usize, u32),
    /// Move pages between classes: to one that has none, and by age (`slabs automove`).
    automove: automove::Automove,
    /// Reclaim live items when memory is spent (memcached's default; `-M` turns it off and
    /// a store that needs memory fails instead). Expired items are reclaimed either way.
    evict: bool,
    /// Live items beyond which a new item takes a CLOCK victim's chunk instead of more
    /// memory: set by the engine when its index is nearly full and cannot grow, so CLOCK,
    /// not the index's displacement bound, decides what goes.
    item_cap: Option<u64>,
    /// See [`StoreConfig::max_value`].
    max_value: usize,
    /// The last stage token handed out (store/stage.rs).
    next_stage: u64,
    /// Values lent to sends (store/pins.rs).
    pins: pins::Pins,
}

impl std::fmt::Debug for SlabStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlabStore")
            .field("classes", &self.classes.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl SlabStore {
    pub fn new(arena: Arc<Arena>, config: &StoreConfig) -> SlabStore {
        let sizes = chunk_sizes(config.growth_factor, config.page_size);
        let small_class = (0..=SMALL_ITEM / 8)
            .map(|i| sizes.partition_point(|&c| c < i * 8).min(u8::MAX as usize) as u8)
            .collect();
        let classes = sizes
            .into_iter()
            .map(|chunk| Class {
                info: ClassInfo::new(chunk, config.page_size),
                pages: Vec::new(),
                free_head: NO_LOCATION,
                bump: 0,
                hand: 0,
                items: 0,
                parts: 0,
                counts: ClassCounts::default(),
                recent: Default::default(),
                window: Default::default(),
            })
            .collect();
        SlabStore {
            arena,
            classes,
            small_class,
            page_size: config.page_size,
            stats: StoreStats::default(),
            next_cas: if config.cas {
                config.cas_start.max(1)
            } else {
                0
            },
            cas_step: if config.cas {
                config.cas_step.max(1)
            } else {
                0
            },
            sweep_at: (0, 0),
            automove: automove::Automove::new(),
            evict: true,
            item_cap: None,
            max_value: config.max_value,
            next_stage: 0,
            pins: pins::Pins::default(),
        }
    }

    pub fn stats(&self) -> StoreStats {
        let (chunks, bytes) = self.pinned();
        StoreStats {
            pinned_chunks: chunks as u64,
            pinned_bytes: bytes,
            ..self.stats
        }
    }

    pub fn classes(&self) -> impl Iterator<Item = (ClassInfo, usize, u64)> + '_ {
        self.classes
            .iter()
            .map(|c| (c.info, c.pages.len(), c.items))
    }

    /// Every class with its counters.
    pub fn class_reports(&self) -> impl Iterator<Item = ClassReport> + '_ {
        self.classes.iter().map(|c| ClassReport {
            info: c.info,
            pages: c.pages.len(),
            items: c.items,
            parts: c.parts,
            untouched: u64::from(c.slots() - c.bump),
            counts: c.counts,
            tail_atime: c.tail_atime(),
        })
    }

    /// Counts a read of the item at `loc` for its class.
    #[inline]
    pub fn note_hit(&mut self, loc: Location) {
        self.note(loc, ClassOp::Hit);
    }

    /// Counts a command that found the item at `loc`, for its class (`stats slabs`).
    #[inline]
    pub fn note(&mut self, loc: Location, op: ClassOp) {
        let (c, _) = decode(loc);
        if let Some(class) = self.classes.get_mut(c) {
            let n = &mut class.counts;
            *match op {
                ClassOp::Hit => &mut n.hits,
                ClassOp::Delete => &mut n.delete_hits,
                ClassOp::Incr => &mut n.incr_hits,
                ClassOp::Decr => &mut n.decr_hits,
                ClassOp::CasHit => &mut n.cas_hits,
                ClassOp::CasBadval => &mut n.cas_badval,
                ClassOp::Touch => &mut n.touch_hits,
            } += 1;
        }
    }

    /// The largest value an item may have (`-I`).
    pub fn max_value(&self) -> usize {
        self.max_value
    }

    /// The largest key + value an item may have.
    pub fn max_item_payload(&self) -> usize {
        self.classes.last().map_or(0, |c| c.info.chunk) - HEADER_BYTES
    }

    pub fn class_for(&self, key_len: usize, value_len: usize) -> Option<usize> {
        let total = HEADER_BYTES + key_len + value_len;
        let i = match self.small_class.get(total.div_ceil(8)) {
            Some(&c) if usize::from(c) < u8::MAX as usize => usize::from(c),
            _ => self.classes.partition_point(|c| c.info.chunk < total),
        };
        (i < self.classes.len()).then_some(i)
    }

    /// Uses up the next CAS (0 with `-C`), also for a counter created already expired.
    pub fn take_cas(&mut self) -> u64 {
        let c = self.next_cas;
        self.next_cas = self.next_cas.wrapping_add(self.cas_step);
        c
    }

    /// The live item at `loc`, or `None` if the location is out of range or its chunk is free.
    /// The caller still has to compare keys (the location may have been reused) and check
    /// expiry.
    #[inline]
    pub fn get(&self, loc: Location) -> Option<Item<'_>> {
        let (c, slot) = decode(loc);
        let class = self.classes.get(c)?;
        if slot >= class.slots() {
            return None;
        }
        let chunk = class.chunk(slot);
        if chunk[OFF_STATUS] != IN_USE {
            return None;
        }
        Some(Item::new(chunk))
    }

    /// Starts loading the item at `loc`: its header (the reference bit included), and the
    /// line its key and a small value end in. Chunks are not line-aligned (a K8 item's
    /// 56-byte chunk straddles two lines seven times in eight), so the first line alone
    /// left the key compare a miss of its own.
    #[inline(always)]
    pub fn prefetch(&self, loc: Location) {
        let (c, slot) = decode(loc);
        if let Some(class) = self.classes.get(c) {
            if slot < class.slots() {
                let (p, off) = class.split(slot);
                let page = &class.pages[p];
                let r = class.chunk_range(off);
                hkv_mem::prefetch_read(page[r.start..].as_ptr());
                let last = r.start + class.info.chunk.min(PREFETCH_ITEM_BYTES) - 1;
                if last / 64 != r.start / 64 {
                    hkv_mem::prefetch_read(page[last..].as_ptr());
                }
            }
        }
    }

    /// Marks an item recently used, for CLOCK.
    #[inline]
    pub fn touch_ref(&mut self, loc: Location) {
        let (c, slot) = decode(loc);
        if let Some(class) = self.classes.get_mut(c) {
            if slot < class.slots() {
                class.set_referenced(slot, true);
            }
        }
    }

    fn live_chunk_mut(&mut self, loc: Location) -> Option<&mut [u8]> {
        let (c, slot) = decode(loc);
        let class = self.classes.get_mut(c)?;
        if slot >= class.slots() {
            return None;
        }
        let chunk = class.chunk_mut(slot);
        (chunk[OFF_STATUS] == IN_USE).then_some(chunk)
    }

    pub fn set_expiry(&mut self, loc: Location, raw_expiry: u32) -> bool {
        match self.live_chunk_mut(loc) {
            Some(chunk) => {
                wr32(chunk, OFF_EXPIRY, raw_expiry);
                true
            }
            None => false,
        }
    }

    /// Records an access for the meta protocol: the item is marked fetched and its access
    /// time set to `now` (memcached does this on every bumping read).
    pub fn mark_fetched(&mut self, loc: Location, now: u32) {
        if let Some(chunk) = self.live_chunk_mut(loc) {
            chunk[OFF_BITS] |= FETCHED;
            wr32(chunk, OFF_ATIME, now);
        }
    }

    /// Sets and clears meta state bits of a live item.
    pub fn update_bits(&mut self, loc: Location, set: u8, clear: u8) {
        if let Some(chunk) = self.live_chunk_mut(loc) {
            chunk[OFF_BITS] = (chunk[OFF_BITS] & !clear) | set;
        }
    }

    /// Gives a live item a CAS of the caller's choosing (meta `E`) or, with `None`, the next
    /// one from the store's counter (meta `md I` bumps the CAS). Returns the new CAS.
    pub fn set_cas(&mut self, loc: Location, cas: Option<u64>) -> Option<u64> {
        let next = self.next_cas;
        let chunk = self.live_chunk_mut(loc)?;
        // With CAS off (`-C`) meta `E` sets nothing either, as in memcached.
        let v = if next == 0 { 0 } else { cas.unwrap_or(next) };
        chunk[OFF_CAS..OFF_CAS + 8].copy_from_slice(&v.to_le_bytes());
        if cas.is_none() {
            self.take_cas();
        }
        Some(v)
    }

    /// Overwrites a live item's value with one as long (incr/decr); returns its new CAS.
    pub fn overwrite_value(&mut self, loc: Location, value: &[u8]) -> Option<u64> {
        if self.is_pinned(loc) {
            return None;
        }
        let cas = self.next_cas;
        let chunk = self.live_chunk_mut(loc)?;
        let klen = chunk[OFF_KEY_LEN] as usize;
        if rd32(chunk, OFF_VALUE_LEN) as usize != value.len() || chunk[OFF_LAYOUT] != LAYOUT_FLAT {
            return None;
        }
        chunk[HEADER_BYTES + klen..HEADER_BYTES + klen + value.len()].copy_from_slice(value);
        chunk[OFF_CAS..OFF_CAS + 8].copy_from_slice(&cas.to_le_bytes());
        self.take_cas();
        Some(cas)
    }

    /// The value of a live flat item, to change in place without changing its length
    /// (vector updates); the caller gives the item a new CAS. None for a chained one.
    pub fn value_mut(&mut self, loc: Location) -> Option<&mut [u8]> {
        if self.is_pinned(loc) {
            return None;
        }
        let chunk = self.live_chunk_mut(loc)?;
        if chunk[OFF_LAYOUT] != LAYOUT_FLAT {
            return None;
        }
        let klen = chunk[OFF_KEY_LEN] as usize;
        let vlen = rd32(chunk, OFF_VALUE_LEN) as usize;
        chunk.get_mut(HEADER_BYTES + klen..HEADER_BYTES + klen + vlen)
    }

    /// Writes a new item (its value is the concatenation of `value_parts`, which lets append
    /// and prepend build in place) and returns its location and CAS.
    ///
    /// Memory comes from the class's free list, then from a new page, then from CLOCK
    /// eviction within the class. `on_reclaim` is called with the item and location of every
    /// live item taken back *before* its chunk is overwritten, so the caller can drop it
    /// from the index.
    pub fn store(
        &mut self,
        key: &[u8],
        value_parts: &[&[u8]],
        flags: u32,
        raw_expiry: u32,
        now: u32,
        mut on_reclaim: impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Result<(Location, u64), StoreError> {
        if key.len() > MAX_KEY_LEN {
            return Err(StoreError::KeyTooLong);
        }
        let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
        // -I bounds what append and prepend build too, as in memcached.
        if value_len > self.max_value {
            return Err(StoreError::TooLarge);
        }
        let Some(c) = self.class_for(key.len(), value_len) else {
            return self.store_chained(
                key,
                value_parts,
                value_len,
                flags,
                raw_expiry,
                now,
                &mut on_reclaim,
            );
        };
        let slot = match self.allocate(c, now, &mut on_reclaim) {
            Some(s) => s,
            None => {
                self.stats.out_of_memory += 1;
                self.classes[c].counts.out_of_memory += 1;
                return Err(StoreError::OutOfMemory);
            }
        };
        let cas = self.take_cas();
        let chunk = self.classes[c].chunk_mut(slot);
        write_header(chunk, key, value_len, flags, raw_expiry, cas, now);
        let mut at = HEADER_BYTES + key.len();
        for part in value_parts {
            chunk[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        self.count_new_item(c, slot, key.len(), value_len);
        Ok((encode(c, slot), cas))
    }

    /// Counts a just-written item in.
    fn count_new_item(&mut self, c: usize, slot: u32, key_len: usize, value_len: usize) {
        let bytes = stored_bytes(key_len, value_len);
        let class = &mut self.classes[c];
        // Every new item starts referenced, as memcached puts new items at the head of its
        // LRU: a chunk from the free list, or a fresh one in a page just added where the hand
        // wrapped, may sit right ahead of the CLOCK hand, and without its bit a
        // just-acknowledged write would be the very next victim (the write probe in
        // crates/server/tests/probes.rs lost one in about six runs that way).
        class.set_referenced(slot, true);
        class.recent.push(slot);
        class.items += 1;
        class.counts.sets += 1;
        class.counts.bytes += bytes;
        self.stats.curr_items += 1;
        self.stats.total_items += 1;
        self.stats.bytes += bytes;
    }

    /// Whether an item of this size can be stored without CLOCK taking a live item back
    /// (a free chunk, an uncarved slot, or room in the arena for a new page).
    pub fn has_room(&self, key_len: usize, value_len: usize) -> bool {
        let Some(c) = self.class_for(key_len, value_len) else {
            // Chained: its parts may well need CLOCK.
            return false;
        };
        let class = &self.classes[c];
        class.free_head != NO_LOCATION
            || class.bump < class.slots()
            || (class.pages.len() < class.info.max_pages()
                && self.arena.available() >= self.page_size + 4096)
    }

    fn allocate(
        &mut self,
        c: usize,
        now: u32,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Option<u32> {
        if self.evict
            && self
                .item_cap
                .is_some_and(|cap| self.stats.curr_items >= cap)
        {
            // The index takes no more items: one must go for this one. Where this class has
            // a free chunk and another class more items, the victim is that class's, and
            // this item takes the free chunk: a victim of its own class made a size new to
            // a full store keep one item per partition (a hostile probe, regression test
            // `a_new_value_size_grows_in_a_store_whose_index_is_full`).
            let class = &self.classes[c];
            let has_free = class.free_head != NO_LOCATION || class.bump < class.slots();
            let elsewhere = has_free
                && self
                    .fullest_class_but(c)
                    .is_some_and(|donor| self.clock_evict_elsewhere(donor, now, on_reclaim));
            if !elsewhere {
                if let Some(slot) = self.clock_evict(c, now, on_reclaim) {
                    return Some(slot);
                }
            }
        }
        let class = &mut self.classes[c];
        if class.free_head != NO_LOCATION {
            let slot = class.free_head;
            class.free_head = rd32(class.chunk(slot), OFF_NEXT_FREE);
            return Some(slot);
        }
        if class.bump < class.slots() {
            class.bump += 1;
            return Some(class.bump - 1);
        }
        if class.pages.len() < class.info.max_pages() {
            match self.fresh_page(c, false) {
                Ok(slot) => return Some(slot),
                Err(ArenaError::Exhausted { .. }) => {}
                Err(_) => return None,
            }
            // A class without a page takes its first past a lowered limit (`fresh_page`), else
            // from the class holding the most (memcached's slab automove, done inline).
            let first = self.classes[c].pages.is_empty();
            if let Some(slot) = first.then(|| self.fresh_page(c, true).ok()).flatten() {
                return Some(slot);
            }
            if self.automove.on && self.evict && first {
                if let Some(page) = self.page_from_others(c, now, on_reclaim) {
                    return Some(self.give_page(c, page, true));
                }
            }
        }
        if let Some(slot) = self.clock_evict(c, now, on_reclaim) {
            return Some(slot);
        }
        // Nothing in the class can go (every chunk pinned: retired, or parts of the chained
        // item being stored, which may need more chunks of the largest class than it has):
        // a page from the class holding the most, as memcached's automove would move.
        if self.automove.on && self.evict {
            if let Some(page) = self.page_from_others(c, now, on_reclaim) {
                return Some(self.give_page(c, page, true));
            }
        }
        None
    }

    /// See `item_cap`; None lifts it.
    pub fn set_item_cap(&mut self, cap: Option<u64>) {
        self.item_cap = cap;
    }

    pub fn item_cap(&self) -> Option<u64> {
        self.item_cap
    }

    /// Whether live items may be evicted for room (`-M` turns it off).
    pub fn set_evictions(&mut self, on: bool) {
        self.evict = on;
    }

    pub fn evictions_enabled(&self) -> bool {
        self.evict
    }

    /// False with `-C`.
    pub fn cas_enabled(&self) -> bool {
        self.cas_step != 0
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    pub fn arena(&self) -> &Arc<Arena> {
        &self.arena
    }
}

/// An in-use header for `key` (flat layout; the caller writes the value or the part table).
fn write_header(
    chunk: &mut [u8],
    key: &[u8],
    value_len: usize,
    flags: u32,
    raw_expiry: u32,
    cas: u64,
    now: u32,
) {
    chunk[OFF_STATUS] = IN_USE;
    chunk[OFF_KEY_LEN] = key.len() as u8;
    chunk[OFF_BITS] = 0;
    chunk[OFF_LAYOUT] = LAYOUT_FLAT;
    wr32(chunk, OFF_ATIME, now);
    wr32(chunk, OFF_ATIME + 4, 0);
    wr32(chunk, OFF_VALUE_LEN, value_len as u32);
    wr32(chunk, OFF_FLAGS, flags);
    wr32(chunk, OFF_EXPIRY, raw_expiry);
    chunk[OFF_CAS..OFF_CAS + 8].copy_from_slice(&cas.to_le_bytes());
    chunk[HEADER_BYTES..HEADER_BYTES + key.len()].copy_from_slice(key);
}
