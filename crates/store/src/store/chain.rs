//! Chained items: values larger than the largest chunk, stored as a header (key and a table
//! of parts) and parts spread over chunks, as memcached chunks its large items. `-I` can then
//! go far beyond the page size while pages stay small, so a large item never needs a page of
//! its own size and every class can still have pages (see item.rs for the layout).
//!
//! Parts are never items of their own: CLOCK and page moves that meet one act on its owner
//! (the owner's reference bit gives it its second chance), and freeing, retiring, evicting or
//! expiring the header does the same to every part.

use super::{Class, SlabStore};
use crate::item::*;
use crate::location::{decode, encode, Location, NO_LOCATION};
use crate::store::{Reclaim, StoreError};

/// A value's bytes in order: one slice for a flat item, one per part for a chained one.
pub struct ValueParts<'a> {
    flat: Option<&'a [u8]>,
    classes: &'a [Class],
    table: &'a [u8],
    left: usize,
    cap: usize,
}

impl<'a> Iterator for ValueParts<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if let Some(f) = self.flat.take() {
            return Some(f);
        }
        if self.left == 0 || self.table.len() < 4 {
            return None;
        }
        let (c, slot) = decode(rd32(self.table, 0));
        self.table = &self.table[4..];
        let class = self.classes.get(c).filter(|k| slot < k.slots())?;
        let chunk = class.chunk(slot);
        let n = self.cap.min(self.left).min(chunk.len() - HEADER_BYTES);
        self.left -= n;
        Some(&chunk[HEADER_BYTES..HEADER_BYTES + n])
    }
}

impl SlabStore {
    /// Value bytes a full part holds: the largest chunk less a header's room.
    pub(super) fn part_cap(&self) -> usize {
        self.classes.last().map_or(0, |c| c.info.chunk) - HEADER_BYTES
    }

    /// The bytes of `item`'s value, in order, whichever way it is stored.
    pub fn value_parts<'a>(&'a self, item: &Item<'a>) -> ValueParts<'a> {
        match item.flat_value() {
            Some(v) => ValueParts {
                flat: Some(v),
                classes: &[],
                table: &[],
                left: 0,
                cap: 0,
            },
            None => ValueParts {
                flat: None,
                classes: &self.classes,
                table: item.part_table(),
                left: item.value_len(),
                cap: self.part_cap(),
            },
        }
    }

    /// Appends `item`'s value to `out`.
    #[inline]
    pub fn copy_value(&self, item: &Item<'_>, out: &mut Vec<u8>) {
        if let Some(v) = item.flat_value() {
            out.extend_from_slice(v);
            return;
        }
        out.reserve(item.value_len());
        for part in self.value_parts(item) {
            out.extend_from_slice(part);
        }
    }

    /// Overwrites a live item's value in place with bytes of the same length, flat or
    /// chained (the caller gives it a new CAS). False if there is no such item.
    pub fn write_value(&mut self, loc: Location, value: &[u8]) -> bool {
        if self.is_pinned(loc) {
            return false;
        }
        let Some(item) = self.get(loc) else {
            return false;
        };
        if item.value_len() != value.len() {
            return false;
        }
        let parts = self.parts_of(&item);
        if parts.is_empty() {
            return match self.value_mut(loc) {
                Some(v) => {
                    v.copy_from_slice(value);
                    true
                }
                None => false,
            };
        }
        let cap = self.part_cap();
        let mut rest = value;
        for p in parts {
            let (c, slot) = decode(p);
            let chunk = self.classes[c].chunk_mut(slot);
            let n = cap.min(rest.len());
            chunk[HEADER_BYTES..HEADER_BYTES + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
        true
    }

    /// The locations of a chained item's parts (empty for a flat one).
    pub(super) fn parts_of(&self, item: &Item<'_>) -> Vec<Location> {
        if !item.is_chained() {
            return Vec::new();
        }
        let n = item.value_len().div_ceil(self.part_cap().max(1));
        item.part_table()
            .chunks_exact(4)
            .take(n)
            .map(|b| rd32(b, 0))
            .collect()
    }

    /// Whether `owner` is a live chained header (not being built, not retired).
    pub(super) fn owner_is_live(&self, owner: Location) -> bool {
        if owner == NO_LOCATION {
            return false;
        }
        let (c, slot) = decode(owner);
        self.classes
            .get(c)
            .filter(|k| slot < k.slots())
            .is_some_and(|k| {
                let h = k.chunk(slot);
                h[OFF_STATUS] == IN_USE && h[OFF_LAYOUT] == LAYOUT_CHAINED
            })
    }

    /// Whether `part` is where CLOCK weighs its owner: the first part (in the largest
    /// class) or the tail (in a smaller one). The owner's one reference bit is then tested
    /// once per turn of each hand, as a flat item's is, instead of at every part (which
    /// would clear it at one part and evict at the next).
    pub(super) fn weighs_owner(&self, owner: Location, part: Location) -> bool {
        let (c, slot) = decode(owner);
        let item = Item::new(self.classes[c].chunk(slot));
        let cap = self.part_cap().max(1);
        let n = item.value_len().div_ceil(cap);
        let table = item.part_table();
        let at = |i: usize| (4 * i + 4 <= table.len()).then(|| rd32(table, 4 * i));
        n > 0
            && (at(0) == Some(part)
                || (!item.value_len().is_multiple_of(cap) && at(n - 1) == Some(part)))
    }

    /// Puts a chunk on its class's free list, whatever it held (the caller has uncounted it).
    pub(super) fn push_free(&mut self, loc: Location) {
        let (c, slot) = decode(loc);
        let Some(class) = self.classes.get_mut(c).filter(|k| slot < k.slots()) else {
            return;
        };
        let head = class.free_head;
        let chunk = class.chunk_mut(slot);
        chunk[OFF_STATUS] = FREE;
        wr32(chunk, OFF_NEXT_FREE, head);
        class.free_head = slot;
        class.set_referenced(slot, false);
    }

    /// Frees a part of a chained item.
    pub(super) fn release_part(&mut self, loc: Location) {
        let (c, _) = decode(loc);
        if let Some(class) = self.classes.get_mut(c) {
            class.parts = class.parts.saturating_sub(1);
        }
        self.push_free(loc);
    }

    /// Stores a value too large for any chunk as a header and parts. Every chunk is marked
    /// as being built as soon as it is taken, so that neither CLOCK nor a page move touches
    /// it while the rest are found; if memory runs out, they all go back and nothing was
    /// stored.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn store_chained(
        &mut self,
        key: &[u8],
        value_parts: &[&[u8]],
        value_len: usize,
        flags: u32,
        raw_expiry: u32,
        now: u32,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Result<(Location, u64), StoreError> {
        let (owner, parts) = self.take_chained(key.len(), value_len, now, on_reclaim)?;
        let cap = self.part_cap();
        let mut src = value_parts.iter().copied();
        let mut cur: &[u8] = &[];
        for (i, &loc) in parts.iter().enumerate() {
            let (c, slot) = decode(loc);
            let want = cap.min(value_len - i * cap);
            let chunk = self.classes[c].chunk_mut(slot);
            let mut dst = &mut chunk[HEADER_BYTES..HEADER_BYTES + want];
            while !dst.is_empty() {
                if cur.is_empty() {
                    match src.next() {
                        Some(next) => cur = next,
                        None => break,
                    }
                    continue;
                }
                let k = cur.len().min(dst.len());
                dst[..k].copy_from_slice(&cur[..k]);
                dst = &mut dst[k..];
                cur = &cur[k..];
            }
        }
        for &p in &parts {
            self.classes[decode(p).0].parts += 1;
        }
        let cas = self.take_cas();
        self.link_chained(owner, &parts, key, value_len, flags, raw_expiry, cas, now);
        Ok((owner, cas))
    }

    /// The chunks of a chained value: its header's location and its parts in value order
    /// (full parts, then the tail), each marked as being built (status `CHAIN`, no owner),
    /// so nothing reuses or moves them until the item is linked or they are given back.
    pub(super) fn take_chained(
        &mut self,
        key_len: usize,
        value_len: usize,
        now: u32,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Result<(Location, Vec<Location>), StoreError> {
        if value_len > self.max_value || value_len > u32::MAX as usize {
            return Err(StoreError::TooLarge);
        }
        let cap = self.part_cap();
        let (full, tail) = (value_len / cap, value_len % cap);
        let n = full + usize::from(tail > 0);
        let header = self.class_for(key_len, 4 * n).ok_or(StoreError::TooLarge)?;
        let largest = self.classes.len() - 1;
        let tail_class = match tail {
            0 => largest,
            t => self.class_for(0, t).ok_or(StoreError::TooLarge)?,
        };
        // A value needing more pages than this store has or could get fails at once, before
        // anything is evicted for it.
        let owned: usize = self.classes.iter().map(|k| k.pages.len()).sum();
        if full + 1 > owned + self.arena.available() / self.page_size.max(1) {
            return Err(self.chain_out_of_memory(largest, &[]));
        }
        // Every chunk taken is marked as being built at once, so its page cannot move. The
        // header and the tail are taken first (the full parts would pin the largest class's
        // last page, which a class with no page may need); if that fails, once more with the
        // full parts first (the header may sit on the last page of the only class that can
        // give a page).
        let mut order = vec![header];
        if tail > 0 {
            order.push(tail_class);
        }
        order.extend(std::iter::repeat_n(largest, full));
        let mut taken = match self.take_chunks(&order, now, on_reclaim) {
            Ok(t) => t,
            Err(_) => {
                order.rotate_left(1 + usize::from(tail > 0));
                let mut t = self
                    .take_chunks(&order, now, on_reclaim)
                    .map_err(|c| self.chain_out_of_memory(c, &[]))?;
                t.rotate_right(1 + usize::from(tail > 0));
                t
            }
        };
        // Value order: the full parts, then the tail.
        let mut parts = taken.split_off(1);
        if tail > 0 {
            parts.rotate_left(1);
        }
        Ok((taken[0], parts))
    }

    /// Makes the chunks from [`SlabStore::take_chained`], their value written, a live item:
    /// the parts name their owner, the header gets the key and the table of parts.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn link_chained(
        &mut self,
        owner: Location,
        parts: &[Location],
        key: &[u8],
        value_len: usize,
        flags: u32,
        raw_expiry: u32,
        cas: u64,
        now: u32,
    ) {
        for &p in parts {
            let (c, slot) = decode(p);
            wr32(self.classes[c].chunk_mut(slot), OFF_OWNER, owner);
        }
        let (header, hslot) = decode(owner);
        let chunk = self.classes[header].chunk_mut(hslot);
        super::write_header(chunk, key, value_len, flags, raw_expiry, cas, now);
        chunk[OFF_LAYOUT] = LAYOUT_CHAINED;
        let mut at = HEADER_BYTES + key.len();
        for loc in parts {
            wr32(chunk, at, *loc);
            at += 4;
        }
        let total = (HEADER_BYTES + key.len() + value_len) as u64;
        self.stats.largest_chunk = self.stats.largest_chunk.max(total);
        self.count_new_item(header, hslot, key.len(), value_len);
    }

    /// One chunk of each class in `order`, each marked as being built; on failure every
    /// one taken goes back and the class that had none is returned.
    fn take_chunks(
        &mut self,
        order: &[usize],
        now: u32,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Result<Vec<Location>, usize> {
        let mut taken = Vec::with_capacity(order.len());
        for &c in order {
            let Some(slot) = self.allocate(c, now, on_reclaim) else {
                for &t in &taken {
                    self.push_free(t);
                }
                return Err(c);
            };
            let chunk = self.classes[c].chunk_mut(slot);
            chunk[OFF_STATUS] = CHAIN;
            wr32(chunk, OFF_OWNER, NO_LOCATION);
            taken.push(encode(c, slot));
        }
        Ok(taken)
    }

    /// Gives back the chunks taken for an item that could not be stored.
    fn chain_out_of_memory(&mut self, c: usize, parts: &[Location]) -> StoreError {
        for &p in parts {
            self.push_free(p);
        }
        self.stats.out_of_memory += 1;
        self.classes[c].counts.out_of_memory += 1;
        StoreError::OutOfMemory
    }

    /// Takes the live item at `victim` out of the store for CLOCK, a page move or the expiry
    /// sweep: reports it through `on_reclaim`, uncounts it as `kind`, and puts its chunk and
    /// its parts' chunks on their free lists, except `keep`, which the caller reuses.
    pub(super) fn reclaim_victim(
        &mut self,
        victim: Location,
        kind: Reclaim,
        now: u32,
        keep: Option<Location>,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) {
        let (vc, vslot) = decode(victim);
        let item = Item::new(self.classes[vc].chunk(vslot));
        on_reclaim(&item, victim, kind);
        let payload = stored_bytes(item.key_len(), item.value_len());
        let unfetched = u64::from(item.bits() & FETCHED == 0);
        let has_expiry = item.expiry() != 0;
        let idle = u64::from(now.saturating_sub(item.atime()));
        let parts = self.parts_of(&item);
        let class = &mut self.classes[vc];
        class.items -= 1;
        class.counts.bytes -= payload;
        self.stats.curr_items -= 1;
        self.stats.bytes -= payload;
        match kind {
            Reclaim::Evicted => {
                self.stats.evictions += 1;
                class.counts.evicted += 1;
                class.counts.evicted_time = idle;
                class.counts.evicted_nonzero += u64::from(has_expiry);
                class.counts.evicted_unfetched += unfetched;
                self.stats.evicted_unfetched += unfetched;
            }
            Reclaim::Expired => {
                self.stats.reclaimed += 1;
                class.counts.reclaimed += 1;
                class.counts.expired_unfetched += unfetched;
                self.stats.expired_unfetched += unfetched;
            }
        }
        for loc in parts {
            if Some(loc) == keep {
                // Reused by the caller as a chunk of its own.
                self.classes[decode(loc).0].parts -= 1;
            } else {
                self.release_part(loc);
            }
        }
        if Some(victim) != keep {
            self.push_free(victim);
        }
    }
}
