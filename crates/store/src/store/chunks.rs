//! One class's chunks: pages of `[chunk][chunk]...`, slots numbered across its pages, and
//! the CLOCK reference bit of each (in its header).

use hkv_mem::Carved;

use super::ClassCounts;
use crate::class::ClassInfo;
use crate::item::OFF_REFERENCED;

pub(super) struct Class {
    pub(super) info: ClassInfo,
    pub(super) pages: Vec<Carved>,
    /// Head of the intrusive free list, or NO_LOCATION.
    pub(super) free_head: u32,
    /// Slots below this have been handed out at least once.
    pub(super) bump: u32,
    /// CLOCK hand.
    pub(super) hand: u32,
    pub(super) items: u64,
    /// Chunks holding parts of chained items (not items themselves).
    pub(super) parts: u64,
    pub(super) counts: ClassCounts,
    /// Its newest writes, for `stats cachedump`.
    pub(super) recent: super::recent::Recent,
    /// Its evictions, for automove.
    pub(super) window: super::automove::Window,
}

impl Class {
    /// The oldest last access of the items in the [`super::report::TAIL_SAMPLE`] chunks
    /// from the CLOCK hand on (a bounded look, so `stats items` costs the same at any size).
    pub(super) fn tail_atime(&self) -> Option<u32> {
        let slots = self.bump.min(self.slots());
        if self.items == 0 || slots == 0 {
            return None;
        }
        let mut slot = self.hand % slots;
        let mut oldest: Option<u32> = None;
        for _ in 0..super::report::TAIL_SAMPLE.min(slots) {
            let chunk = self.chunk(slot);
            if chunk[crate::item::OFF_STATUS] == crate::item::IN_USE {
                let atime = crate::item::rd32(chunk, crate::item::OFF_ATIME);
                oldest = Some(oldest.map_or(atime, |o| o.min(atime)));
            }
            slot = if slot + 1 == slots { 0 } else { slot + 1 };
        }
        oldest
    }

    pub(super) fn slots(&self) -> u32 {
        self.pages.len() as u32 * self.info.per_page
    }

    #[inline(always)]
    pub(super) fn split(&self, slot: u32) -> (usize, usize) {
        let (page, off) = self.info.split(slot);
        (page as usize, off as usize)
    }

    #[inline(always)]
    pub(super) fn chunk_range(&self, off: usize) -> std::ops::Range<usize> {
        let start = off * self.info.chunk;
        start..start + self.info.chunk
    }

    #[inline(always)]
    pub(super) fn chunk(&self, slot: u32) -> &[u8] {
        let (p, off) = self.split(slot);
        &self.pages[p][self.chunk_range(off)]
    }

    #[inline(always)]
    pub(super) fn chunk_mut(&mut self, slot: u32) -> &mut [u8] {
        let (p, off) = self.split(slot);
        let r = self.chunk_range(off);
        &mut self.pages[p][r]
    }

    /// CLOCK's reference bit lives in the item header, on the line a lookup's key compare
    /// has just loaded: a separate bitmap cost every GET a third cache miss.
    #[inline(always)]
    pub(super) fn referenced(&self, slot: u32) -> bool {
        self.chunk(slot)[OFF_REFERENCED] != 0
    }

    #[inline(always)]
    pub(super) fn set_referenced(&mut self, slot: u32, on: bool) {
        let chunk = self.chunk_mut(slot);
        if (chunk[OFF_REFERENCED] != 0) != on {
            chunk[OFF_REFERENCED] = u8::from(on);
        }
    }
}
