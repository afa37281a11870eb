//! Walks over every chunk: the background expiry sweep, `lru_crawler crawl` in slices, and
//! the item listings (`stats cachedump`, `lru_crawler metadump`, index rebuilds), and
//! `flush_all`.

use super::SlabStore;
use crate::expiry::is_expired;
use crate::item::*;
use crate::location::{encode, Location, NO_LOCATION};
use crate::store::{CrawlCursor, Reclaim};

impl SlabStore {
    /// Frees every item (`flush_all`). Pages stay with their classes; values still being
    /// received (store/stage.rs) stay where they are, for the commands that will store them.
    pub fn clear(&mut self) {
        let pinned = self.pinned_locations();
        for &loc in &pinned {
            self.flush_pinned(loc);
        }
        for (c, class) in self.classes.iter_mut().enumerate() {
            let mut staged = 0u64;
            let mut kept = 0u64;
            let mut free_head = NO_LOCATION;
            for slot in (0..class.bump).rev() {
                if !pinned.is_empty() && pinned.contains(&encode(c, slot)) {
                    // Retired above; freed when its send ends.
                    kept += 1;
                    continue;
                }
                let chunk = class.chunk_mut(slot);
                if chunk[OFF_STATUS] == CHAIN && rd32(chunk, OFF_OWNER) == NO_LOCATION {
                    staged += 1;
                    continue;
                }
                if chunk[OFF_STATUS] == CHAIN
                    && !pinned.is_empty()
                    && pinned.contains(&rd32(chunk, OFF_OWNER))
                {
                    // A part of a value a send reads: freed with its owner, after the send.
                    staged += 1;
                    continue;
                }
                chunk[OFF_STATUS] = FREE;
                wr32(chunk, OFF_NEXT_FREE, free_head);
                free_head = slot;
            }
            if staged == 0 && kept == 0 {
                // Nothing to step around: every chunk counts as never handed out again.
                free_head = NO_LOCATION;
                class.bump = 0;
            }
            class.free_head = free_head;
            class.hand = 0;
            class.items = 0;
            class.recent.clear();
            class.parts = staged;
            class.counts.bytes = 0;
        }
        self.stats.curr_items = 0;
        self.stats.bytes = 0;
        self.sweep_at = (0, 0);
    }

    /// Background expiry: examines up to `max_slots` chunks from where the last call stopped
    /// and frees the expired ones, reporting each through `on_reclaim` first. Returns how many
    /// it freed.
    pub fn sweep_expired(
        &mut self,
        now: u32,
        max_slots: u32,
        mut on_reclaim: impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> u32 {
        let mut freed = 0;
        let mut budget = max_slots;
        let classes = self.classes.len();
        let mut visited_classes = 0;
        while budget > 0 && visited_classes <= classes {
            let (c, mut slot) = self.sweep_at;
            let limit = self.classes[c].bump;
            while budget > 0 && slot < limit {
                freed += u32::from(self.reclaim_if_expired(c, slot, now, &mut on_reclaim));
                slot += 1;
                budget -= 1;
            }
            if slot >= limit {
                self.sweep_at = ((c + 1) % classes, 0);
                visited_classes += 1;
            } else {
                self.sweep_at = (c, slot);
            }
        }
        self.stats.crawler_checked += u64::from(max_slots - budget);
        freed
    }

    /// memcached's `lru_crawler crawl`, one slice: examines up to `budget` chunks of
    /// `classes` (0-based; all when `None`) from `cursor` (start at `CrawlCursor::default()`),
    /// at most `per_class` of each class (0: no limit), freeing the expired ones through
    /// `on_reclaim`. Returns how many it freed; `cursor.done` once every class is through.
    pub fn crawl(
        &mut self,
        now: u32,
        classes: Option<&[usize]>,
        per_class: u32,
        cursor: &mut CrawlCursor,
        budget: u32,
        mut on_reclaim: impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> u32 {
        let mut freed = 0;
        let mut left = budget;
        while left > 0 {
            let Some(c) = self.settle(classes, per_class, cursor) else {
                break;
            };
            let slot = cursor.slot;
            cursor.slot += 1;
            left -= 1;
            freed += u32::from(self.reclaim_if_expired(c, slot, now, &mut on_reclaim));
        }
        self.stats.crawler_checked += u64::from(budget - left);
        cursor.done = self.settle(classes, per_class, cursor).is_none();
        freed
    }

    /// Moves `cursor` past the classes of a walk over `classes` (0-based; all when `None`)
    /// that have no chunk left to examine, at most `per_class` of each (0: no limit), and
    /// returns the class its next chunk is in; None once every class is through. Crawls and
    /// listings step their cursors with it, so both walk the same chunks in the same order.
    fn settle(
        &self,
        classes: Option<&[usize]>,
        per_class: u32,
        cursor: &mut CrawlCursor,
    ) -> Option<usize> {
        let count = classes.map_or(self.classes.len(), <[usize]>::len);
        while cursor.class < count {
            let c = classes.map_or(cursor.class, |l| l[cursor.class]);
            let end = self.classes.get(c).map_or(0, |class| match per_class {
                0 => class.bump,
                n => class.bump.min(n),
            });
            if cursor.slot < end {
                return Some(c);
            }
            cursor.class += 1;
            cursor.slot = 0;
        }
        None
    }

    /// Frees chunk `slot` of class `c` if it holds an expired item; true if it did.
    fn reclaim_if_expired(
        &mut self,
        c: usize,
        slot: u32,
        now: u32,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> bool {
        let chunk = self.classes[c].chunk(slot);
        if chunk[OFF_STATUS] != IN_USE || !is_expired(rd32(chunk, OFF_EXPIRY), now) {
            return false;
        }
        let loc = encode(c, slot);
        let unfetched = u64::from(chunk[OFF_BITS] & FETCHED == 0);
        on_reclaim(&Item::new(chunk), loc, Reclaim::Expired);
        self.free(loc);
        self.stats.reclaimed += 1;
        self.stats.expired_unfetched += unfetched;
        self.classes[c].counts.reclaimed += 1;
        self.classes[c].counts.expired_unfetched += unfetched;
        true
    }

    /// Every live, unexpired item with its class index, in storage order, until `f` says
    /// stop.
    pub fn for_each_item(&self, now: u32, mut f: impl FnMut(usize, Item<'_>) -> bool) {
        let mut cursor = CrawlCursor::default();
        while !cursor.done {
            self.scan_items(now, None, &mut cursor, u32::MAX, &mut f);
        }
    }

    /// One slice of a walk over the live, unexpired items of `classes` (0-based; all when
    /// `None`), for `stats cachedump` and `lru_crawler metadump`: examines up to `budget`
    /// chunks from `cursor` (start at `CrawlCursor::default()`), in storage order, calling
    /// `f` with each item and its class until `f` says stop. `cursor.done` once every class
    /// is through or `f` stopped. Returns the chunks examined. In slices, a caller can let
    /// go of the partition between them: that bounds each hold of its lock, though not
    /// what a waiting request waits (the lock is not fair, and the walker may take it
    /// straight back).
    pub fn scan_items(
        &self,
        now: u32,
        classes: Option<&[usize]>,
        cursor: &mut CrawlCursor,
        budget: u32,
        mut f: impl FnMut(usize, Item<'_>) -> bool,
    ) -> u32 {
        let mut left = budget;
        while left > 0 {
            let Some(c) = self.settle(classes, 0, cursor) else {
                break;
            };
            let chunk = self.classes[c].chunk(cursor.slot);
            cursor.slot += 1;
            left -= 1;
            if chunk[OFF_STATUS] == IN_USE
                && !is_expired(rd32(chunk, OFF_EXPIRY), now)
                && !f(c, Item::new(chunk))
            {
                cursor.done = true;
                return budget - left;
            }
        }
        cursor.done = self.settle(classes, 0, cursor).is_none();
        budget - left
    }

    /// Every live item's key and location (expired ones included), for rebuilding an index.
    pub fn for_each_live(&self, mut f: impl FnMut(&[u8], Location)) {
        for (c, class) in self.classes.iter().enumerate() {
            for slot in 0..class.bump {
                let chunk = class.chunk(slot);
                if chunk[OFF_STATUS] == IN_USE {
                    f(Item::new(chunk).key(), encode(c, slot));
                }
            }
        }
    }
}
