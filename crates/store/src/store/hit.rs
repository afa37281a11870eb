//! RD of a read hit in one slot lookup: the item's header as the reader found it, its value
//! copied out, and the hit recorded (class count, CLOCK bit, fetched flag, access time).

use super::SlabStore;
use crate::item::*;
use crate::location::{decode, Location};

/// An item's header as a read found it, before the read bumped it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HitHeader {
    /// Meta state bits ([`FETCHED`], [`STALE`], [`WIN_SENT`], [`BINARY_KEY`]).
    pub bits: u8,
    /// Raw expiry (see `Item::expiry`).
    pub expiry: u32,
    pub atime: u32,
    pub flags: u32,
    pub cas: u64,
    pub value_len: u32,
}

impl HitHeader {
    #[inline(always)]
    pub(super) fn of(item: &Item<'_>) -> HitHeader {
        HitHeader {
            bits: item.bits(),
            expiry: item.expiry(),
            atime: item.atime(),
            flags: item.flags(),
            cas: item.cas(),
            value_len: item.value_len() as u32,
        }
    }
}

impl SlabStore {
    /// Copies the value of the live item at `loc` to `out` and returns its header, then
    /// records the hit: the class's hit count and, when the read bumps, the reference bit
    /// and the fetched flag and access time (the header is written only when one of those
    /// changes: most hits repeat both). None if no live item is there.
    #[inline]
    pub fn read_hit(
        &mut self,
        loc: Location,
        now: u32,
        bump: bool,
        out: &mut Vec<u8>,
    ) -> Option<HitHeader> {
        let item = self.get(loc)?;
        let header = HitHeader::of(&item);
        self.copy_value(&item, out);
        self.count_hit(loc, &header, now, bump);
        Some(header)
    }

    /// [`SlabStore::read_hit`] for a value someone else copied out (the device's RD): the
    /// header, and the hit recorded the same way.
    pub fn record_hit(&mut self, loc: Location, now: u32, bump: bool) -> Option<HitHeader> {
        let item = self.get(loc)?;
        let header = HitHeader::of(&item);
        self.count_hit(loc, &header, now, bump);
        Some(header)
    }

    /// Takes back the hit a read of the item at `loc` counted in its class.
    pub fn uncount_hit(&mut self, loc: Location) {
        let (c, _) = decode(loc);
        if let Some(class) = self.classes.get_mut(c) {
            class.counts.hits = class.counts.hits.saturating_sub(1);
        }
    }

    /// Takes back a read of the item at `loc` that was answered, then thrown away to be
    /// asked again (the engine's order-aware value budget): its hit in the class counts,
    /// and the meta state it changed, back to what the read found (`fetched`, `atime`; a
    /// recache token it won is handed out again), so the read asked again sees the same.
    pub fn undo_hit(&mut self, loc: Location, fetched: bool, atime: u32, won: bool) {
        self.uncount_hit(loc);
        if let Some(chunk) = self.live_chunk_mut(loc) {
            if !fetched {
                chunk[OFF_BITS] &= !FETCHED;
            }
            if won {
                chunk[OFF_BITS] &= !WIN_SENT;
            }
            wr32(chunk, OFF_ATIME, atime);
        }
    }

    /// Byte offset of the chunk at `loc` in the arena's mapping (None: no such slot), for
    /// a device that reads items in place.
    pub fn chunk_offset(&self, loc: Location) -> Option<u64> {
        let (c, slot) = decode(loc);
        let class = self.classes.get(c)?;
        if slot >= class.slots() {
            return None;
        }
        let (page, off) = class.split(slot);
        let start = self.arena.offset_of(&class.pages[page]) + off * class.info.chunk;
        Some(start as u64)
    }

    #[inline(always)]
    fn count_hit(&mut self, loc: Location, header: &HitHeader, now: u32, bump: bool) {
        let (c, slot) = decode(loc);
        let class = &mut self.classes[c];
        class.counts.hits += 1;
        if bump {
            class.set_referenced(slot, true);
            if header.bits & FETCHED == 0 || header.atime != now {
                let chunk = class.chunk_mut(slot);
                chunk[OFF_BITS] |= FETCHED;
                wr32(chunk, OFF_ATIME, now);
            }
        }
    }
}
