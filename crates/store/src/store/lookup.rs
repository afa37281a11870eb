//! KC and RD of a read over one slot lookup: [`SlabStore::lookup`] finds the chunk behind a
//! location and compares the key (KC); [`SlabStore::read_at`] copies the value and records the
//! hit from where KC found it (RD). A location costs a class lookup, a page split and three
//! bounds checks to turn into a chunk; the GET path paid that five times per hit.

use super::SlabStore;
use crate::item::*;
use crate::location::{decode, Location};
use crate::HitHeader;

/// Where a live item's chunk lies, as [`SlabStore::lookup`] found it. It stays valid while
/// the chunk holds that item: nothing between a read group's KC and RD frees or reuses a
/// chunk KC found live (a read frees only an expired item, which KC saw as expired).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkAt {
    class: u32,
    page: u32,
    /// Byte offset of the chunk in its page.
    start: u32,
}

/// What KC found at a location for a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No live item there (free, retired, or out of range).
    Empty,
    /// Another key's item: a signature collision, or the location was reused.
    OtherKey,
    /// The key's item, past its expiry.
    Expired,
    /// The key's live item.
    Live(ChunkAt),
}

impl SlabStore {
    /// KC: whether the item at `loc` is `key`'s, and live at `now`.
    #[inline(always)]
    pub fn lookup(&self, loc: Location, key: &[u8], now: u32) -> Lookup {
        match self.find_live(loc, key, now) {
            Ok((at, _)) => Lookup::Live(at),
            Err(found) => found,
        }
    }

    /// [`SlabStore::lookup`], with the live item's header read while its line is loaded:
    /// for a read whose RD follows at once (nothing can bump or change the item between).
    #[inline(always)]
    pub fn lookup_header(&self, loc: Location, key: &[u8], now: u32) -> (Lookup, HitHeader) {
        match self.find_live(loc, key, now) {
            Ok((at, chunk)) => (Lookup::Live(at), HitHeader::of(&Item::new(chunk))),
            Err(found) => (found, HitHeader::default()),
        }
    }

    /// The chunk of `key`'s live item at `loc`, or what was there instead.
    #[inline(always)]
    fn find_live(&self, loc: Location, key: &[u8], now: u32) -> Result<(ChunkAt, &[u8]), Lookup> {
        let (c, slot) = decode(loc);
        let Some(class) = self.classes.get(c) else {
            return Err(Lookup::Empty);
        };
        let (p, off) = class.split(slot);
        // `off < per_page`, so the page exists exactly when `slot < slots()`.
        let Some(page) = class.pages.get(p) else {
            return Err(Lookup::Empty);
        };
        let r = class.chunk_range(off);
        let start = r.start as u32;
        let chunk = &page[r];
        if chunk[OFF_STATUS] != IN_USE {
            return Err(Lookup::Empty);
        }
        let item = Item::new(chunk);
        if !item.key_is(key) {
            return Err(Lookup::OtherKey);
        }
        if item.is_expired(now) {
            return Err(Lookup::Expired);
        }
        let at = ChunkAt {
            class: c as u32,
            page: p as u32,
            start,
        };
        Ok((at, chunk))
    }

    #[inline(always)]
    fn chunk_at(&self, at: ChunkAt) -> Option<&[u8]> {
        let class = self.classes.get(at.class as usize)?;
        let start = at.start as usize;
        class
            .pages
            .get(at.page as usize)?
            .get(start..start + class.info.chunk)
    }

    /// The header of the live item KC found at `at` (None: the chunk no longer holds a live
    /// item, which a caller answers as a miss).
    #[inline(always)]
    pub fn header_at(&self, at: ChunkAt) -> Option<HitHeader> {
        let chunk = self.chunk_at(at)?;
        (chunk[OFF_STATUS] == IN_USE).then(|| HitHeader::of(&Item::new(chunk)))
    }

    /// RD of the item KC found at `at`, whose header [`SlabStore::header_at`] or
    /// [`SlabStore::lookup_header`] just read:
    /// appends its value to `out` and records the hit, as [`SlabStore::read_hit`] does.
    #[inline(always)]
    pub fn read_at(
        &mut self,
        at: ChunkAt,
        header: &HitHeader,
        now: u32,
        bump: bool,
        out: &mut Vec<u8>,
    ) {
        let Some(class) = self.classes.get_mut(at.class as usize) else {
            return;
        };
        let size = class.info.chunk;
        let start = at.start as usize;
        let Some(chunk) = class
            .pages
            .get_mut(at.page as usize)
            .and_then(|page| page.get_mut(start..start + size))
        else {
            return;
        };
        let flat = Item::new(chunk).flat_value();
        let chained = flat.is_none();
        if let Some(v) = flat {
            out.extend_from_slice(v);
        }
        class.counts.hits += 1;
        if bump {
            if chunk[OFF_REFERENCED] == 0 {
                chunk[OFF_REFERENCED] = 1;
            }
            if header.bits & FETCHED == 0 || header.atime != now {
                chunk[OFF_BITS] |= FETCHED;
                wr32(chunk, OFF_ATIME, now);
            }
        }
        if chained {
            // The parts live in other chunks: copied through the store (rare: large values).
            if let Some(chunk) = self.chunk_at(at) {
                self.copy_value(&Item::new(chunk), out);
            }
        }
    }
}
