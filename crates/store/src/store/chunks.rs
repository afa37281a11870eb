//! One class's chunks: pages of `[reference bitmap][chunk][chunk]...`, slots numbered
//! across its pages, and the CLOCK reference bit of each.

use hkv_mem::Carved;

use super::ClassCounts;
use crate::class::ClassInfo;

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
}

impl Class {
    pub(super) fn slots(&self) -> u32 {
        self.pages.len() as u32 * self.info.per_page
    }

    #[inline(always)]
    pub(super) fn split(&self, slot: u32) -> (usize, usize) {
        let per = self.info.per_page;
        ((slot / per) as usize, (slot % per) as usize)
    }

    #[inline(always)]
    pub(super) fn chunk_range(&self, off: usize) -> std::ops::Range<usize> {
        let start = self.info.bitmap_bytes + off * self.info.chunk;
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

    #[inline(always)]
    pub(super) fn ref_word(&self, slot: u32) -> (usize, usize, u64) {
        let (p, off) = self.split(slot);
        let w = off / 64 * 8;
        (p, w, 1u64 << (off % 64))
    }

    pub(super) fn referenced(&self, slot: u32) -> bool {
        let (p, w, bit) = self.ref_word(slot);
        u64::from_le_bytes(self.pages[p][w..w + 8].try_into().expect("8 bytes")) & bit != 0
    }

    pub(super) fn set_referenced(&mut self, slot: u32, on: bool) {
        let (p, w, bit) = self.ref_word(slot);
        let word = &mut self.pages[p][w..w + 8];
        let v = u64::from_le_bytes((&*word).try_into().expect("8 bytes"));
        let nv = if on { v | bit } else { v & !bit };
        if nv != v {
            word.copy_from_slice(&nv.to_le_bytes());
        }
    }
}
