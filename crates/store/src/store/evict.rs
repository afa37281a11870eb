//! CLOCK eviction within a class: the reference bit is memcached's LRU bump, the hand its
//! tail. A new item starts referenced (see `SlabStore::store`), so it gets a full turn.

use super::SlabStore;
use crate::expiry::is_expired;
use crate::item::*;
use crate::location::{encode, Location};
use crate::store::Reclaim;

impl SlabStore {
    /// CLOCK over the class: clear set reference bits, take the first live chunk without one.
    /// Expired items are taken whatever their bit. Two full turns always find a victim.
    pub(super) fn clock_evict(
        &mut self,
        c: usize,
        now: u32,
        on_reclaim: &mut impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Option<u32> {
        let class = &mut self.classes[c];
        let slots = class.slots();
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
            let slot = class.hand;
            class.hand = if slot + 1 >= slots { 0 } else { slot + 1 };
            let chunk = class.chunk(slot);
            if chunk[OFF_STATUS] != IN_USE {
                continue;
            }
            let expired = is_expired(rd32(chunk, OFF_EXPIRY), now);
            if !expired && !self.evict {
                continue;
            }
            if !expired && class.referenced(slot) {
                class.set_referenced(slot, false);
                continue;
            }
            let item = Item::new(chunk);
            let kind = if expired {
                Reclaim::Expired
            } else {
                Reclaim::Evicted
            };
            on_reclaim(&item, encode(c, slot), kind);
            let payload = (item.key_len() + item.value_len()) as u64;
            let unfetched = item.bits() & FETCHED == 0;
            let has_expiry = item.expiry() != 0;
            let idle = u64::from(now.saturating_sub(item.atime()));
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
                    class.counts.evicted_unfetched += u64::from(unfetched);
                    self.stats.evicted_unfetched += u64::from(unfetched);
                }
                Reclaim::Expired => {
                    self.stats.reclaimed += 1;
                    class.counts.reclaimed += 1;
                    class.counts.expired_unfetched += u64::from(unfetched);
                    self.stats.expired_unfetched += u64::from(unfetched);
                }
            }
            return Some(slot);
        }
        None
    }
}
