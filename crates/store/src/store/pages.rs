//! Slab pages moving between classes: memcached's `slabs reassign` and `slabs automove`.
//! A page leaves the class with the most (its items evicted) for one that has none.

use hkv_mem::{ArenaError, Carved};

use super::SlabStore;
use crate::item::*;
use crate::location::{decode, encode, Location, NO_LOCATION};
use crate::store::Reclaim;

/// Why `slabs reassign` moved nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReassignError {
    #[error("BADCLASS invalid src or dst class id")]
    BadClass,
    #[error("SAME src and dst class are identical")]
    Same,
    #[error("NOSPARE source class has no spare pages")]
    NoSpare,
    #[error("BUSY try again later")]
    Busy,
}

/// Pages handed out past a lowered `cache_memlimit` at most, all partitions together.
pub(crate) const FIRST_PAGES_PAST_LIMIT: usize = 64;

impl SlabStore {
    /// A page from the arena for class `c`, its first chunk handed out. `past_limit`: past
    /// a limit `cache_memlimit` lowered, within what `-m` reserved, as memcached gives a
    /// class its first page whatever its limit (after `cache_memlimit 8` on a nearly empty
    /// `-m 64` server every store was out of memory: an outside probe); at most
    /// [`FIRST_PAGES_PAST_LIMIT`] pages past it, all partitions together (memcached's
    /// bound is a page per class, 63 at most).
    pub(super) fn fresh_page(&mut self, c: usize, past_limit: bool) -> Result<u32, ArenaError> {
        let page = match past_limit {
            false => self.arena.carve(self.page_size, 4096)?,
            true => {
                let slack = FIRST_PAGES_PAST_LIMIT * self.page_size;
                self.arena.carve_past_limit(self.page_size, 4096, slack)?
            }
        };
        self.stats.pages += 1;
        Ok(self.give_page(c, page, false))
    }

    /// Adds a page to class `c` and hands out its first chunk.
    pub(super) fn give_page(&mut self, c: usize, mut page: Carved, moved: bool) -> u32 {
        // A page moved from another class holds that class's bytes; chunks are told apart
        // by their status byte and reference bits by a header byte, so all of it starts zeroed
        // (a page fresh from the arena already is).
        if moved {
            page.fill(0);
        }
        let class = &mut self.classes[c];
        class.pages.push(page);
        self.stats.largest_chunk = self.stats.largest_chunk.max(class.info.chunk as u64);
        class.bump = class.slots() - class.info.per_page + 1;
        class.bump - 1
    }

    /// A page for class `c` from another class, the one with the most pages first (ties to
    /// the larger chunk size: fewer items lost per page), passing over classes whose last
    /// page is pinned (see [`SlabStore::take_page`]); its items are evicted and reported.
    pub(super) fn page_from_others(
        &mut self,
        c: usize,
        now: u32,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Option<Carved> {
        let mut order: Vec<usize> = (0..self.classes.len())
            .filter(|&i| i != c && !self.classes[i].pages.is_empty())
            .collect();
        order.sort_unstable_by_key(|&i| std::cmp::Reverse((self.classes[i].pages.len(), i)));
        order
            .into_iter()
            .find_map(|from| self.take_page(from, now, on_reclaim))
    }

    /// Takes the last page of class `from`: evicts its live items (reported through
    /// `on_reclaim`, counted as evictions) and the owners of chained parts on it, drops its
    /// free chunks from the free list, and returns it. None if a chunk on it is retired or a
    /// part of a retired item or of one being built: an index entry (or the store call in
    /// progress) may still point there, so the page cannot be reused yet.
    pub(super) fn take_page(
        &mut self,
        from: usize,
        now: u32,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Option<Carved> {
        let class = &self.classes[from];
        let per = class.info.per_page;
        let first = class.slots().checked_sub(per)?;
        let end = class.bump.min(class.slots());
        let pinned = |s: u32| {
            let chunk = self.classes[from].chunk(s);
            match chunk[OFF_STATUS] {
                RETIRED => true,
                IN_USE => self.is_pinned(encode(from, s)),
                CHAIN => {
                    let owner = rd32(chunk, OFF_OWNER);
                    !self.owner_is_live(owner) || self.is_pinned(owner)
                }
                _ => false,
            }
        };
        if (first..end).any(pinned) {
            return None;
        }
        for slot in first..end {
            let chunk = self.classes[from].chunk(slot);
            let victim = match chunk[OFF_STATUS] {
                IN_USE => encode(from, slot),
                // Its owner may have gone with an earlier chunk of this page.
                CHAIN if self.owner_is_live(rd32(chunk, OFF_OWNER)) => rd32(chunk, OFF_OWNER),
                _ => continue,
            };
            let (vc, vslot) = decode(victim);
            let expired = Item::new(self.classes[vc].chunk(vslot)).is_expired(now);
            let why = if expired {
                Reclaim::Expired
            } else {
                self.stats.page_move_evictions += 1;
                Reclaim::Evicted
            };
            // Chunks on this page go on the free list for a moment; the list is rebuilt
            // without them below.
            self.reclaim_victim(victim, why, now, None, on_reclaim);
        }
        let class = &mut self.classes[from];
        // Unlink the page's free chunks: rebuild the list from the chunks that stay.
        let mut kept = Vec::new();
        let mut at = class.free_head;
        while at != NO_LOCATION {
            if at < first {
                kept.push(at);
            }
            at = rd32(class.chunk(at), OFF_NEXT_FREE);
        }
        class.free_head = NO_LOCATION;
        for &s in kept.iter().rev() {
            let head = class.free_head;
            wr32(class.chunk_mut(s), OFF_NEXT_FREE, head);
            class.free_head = s;
        }
        class.bump = class.bump.min(first);
        if class.hand >= first {
            class.hand = 0;
        }
        let page = class.pages.pop()?;
        self.stats.pages_moved += 1;
        Some(page)
    }

    /// `slabs reassign <from> <to>` (classes 0-based): moves one page. Errors in
    /// memcached's words.
    pub fn reassign(
        &mut self,
        from: usize,
        to: usize,
        now: u32,
        mut on_reclaim: impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Result<(), ReassignError> {
        if from >= self.classes.len() || to >= self.classes.len() {
            return Err(ReassignError::BadClass);
        }
        if from == to {
            return Err(ReassignError::Same);
        }
        // As memcached: a class keeps its last page against a manual move.
        if self.classes[from].pages.len() < 2 {
            return Err(ReassignError::NoSpare);
        }
        if self.classes[to].pages.len() >= self.classes[to].info.max_pages() {
            return Err(ReassignError::NoSpare);
        }
        let page = self
            .take_page(from, now, &mut on_reclaim)
            .ok_or(ReassignError::Busy)?;
        self.give_page_uncarved(to, page);
        Ok(())
    }

    /// Adds a moved page to class `c` without handing out a chunk of it (`give_page` hands
    /// out its first): its chunks are carved as the class needs them.
    pub(super) fn give_page_uncarved(&mut self, c: usize, page: Carved) {
        let bump = self.classes[c].bump;
        self.give_page(c, page, true);
        self.classes[c].bump = bump;
    }

    /// The source memcached's `slabs reassign -1 <to>` picks for itself: a class other than
    /// `to` with a page to spare (here the one with the most; memcached takes the next in
    /// turn). None if no class has one.
    pub fn spare_source(&self, to: usize) -> Option<usize> {
        (0..self.classes.len())
            .filter(|&c| c != to && self.classes[c].pages.len() >= 2)
            .max_by_key(|&c| (self.classes[c].pages.len(), std::cmp::Reverse(c)))
    }

    /// Turns inline page moves on or off (`slabs automove 0|1`).
    pub fn set_automove(&mut self, on: bool) {
        self.automove.on = on;
    }

    pub fn automove(&self) -> bool {
        self.automove.on
    }
}
