//! CLOCK eviction within a class: the reference bit is memcached's LRU bump, the hand its
//! tail. A new item starts referenced (see `SlabStore::store`), so it gets a full turn.

use super::SlabStore;
use crate::expiry::is_expired;
use crate::item::*;
use crate::location::{decode, encode, Location};
use crate::store::Reclaim;

impl SlabStore {
    /// CLOCK over the class: clear set reference bits, take the first live chunk without one.
    /// Expired items are taken whatever their bit. Two full turns always find a victim.
    /// A part of a chained item stands for its owner: at its first part and its tail the
    /// owner's bit is the one tested and cleared, and taking the part takes the whole item
    /// (the other chunks go to their free lists); its other parts, and parts of items being
    /// built or retired, are passed over.
    pub(super) fn clock_evict(
        &mut self,
        c: usize,
        now: u32,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Option<u32> {
        self.clock_take(c, now, true, on_reclaim)
    }

    /// One CLOCK victim of class `donor` goes, all its chunks to their free lists: an item
    /// of another class needs its index slot, not its memory. False if none could go.
    pub(super) fn clock_evict_elsewhere(
        &mut self,
        donor: usize,
        now: u32,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> bool {
        self.clock_take(donor, now, false, on_reclaim).is_some()
    }

    /// The class other than `c` with the most items, if it has more than `c`.
    pub(super) fn fullest_class_but(&self, c: usize) -> Option<usize> {
        let own = self.classes[c].items;
        (0..self.classes.len())
            .filter(|&i| i != c)
            .max_by_key(|&i| self.classes[i].items)
            .filter(|&i| self.classes[i].items > own)
    }

    /// CLOCK as above; with `keep`, the victim's chunk at the hand is kept for the caller.
    fn clock_take(
        &mut self,
        c: usize,
        now: u32,
        keep: bool,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Option<u32> {
        let slots = self.classes[c].slots();
        if slots == 0 {
            return None;
        }
        // Without evictions only expired items may go; look at a bounded stretch for one
        // (the expiry sweep reclaims the rest), so a full store fails fast rather than scan
        // every chunk for each write.
        let turns = if self.evict {
            2 * slots as u64 + 1
        } else {
            u64::from(slots.min(256))
        };
        for _ in 0..turns {
            let class = &mut self.classes[c];
            let slot = class.hand;
            class.hand = if slot + 1 >= slots { 0 } else { slot + 1 };
            let chunk = class.chunk(slot);
            let victim = match chunk[OFF_STATUS] {
                IN_USE => encode(c, slot),
                CHAIN => {
                    let owner = rd32(chunk, OFF_OWNER);
                    if !self.owner_is_live(owner) || !self.weighs_owner(owner, encode(c, slot)) {
                        continue;
                    }
                    owner
                }
                _ => continue,
            };
            if self.is_pinned(victim) {
                // A send reads it: its chunk cannot go to another item yet.
                self.stats.pinned_skips += 1;
                continue;
            }
            let (vc, vslot) = decode(victim);
            let vclass = &mut self.classes[vc];
            let expired = is_expired(rd32(vclass.chunk(vslot), OFF_EXPIRY), now);
            if !expired && !self.evict {
                continue;
            }
            if !expired && vclass.referenced(vslot) {
                vclass.set_referenced(vslot, false);
                continue;
            }
            let kind = if expired {
                Reclaim::Expired
            } else {
                Reclaim::Evicted
            };
            if keep && !expired {
                let atime = Item::new(self.classes[vc].chunk(vslot)).atime();
                self.classes[c].window.took(now.saturating_sub(atime));
            }
            let kept = keep.then(|| encode(c, slot));
            self.reclaim_victim(victim, kind, now, kept, on_reclaim);
            return Some(slot);
        }
        None
    }
}
