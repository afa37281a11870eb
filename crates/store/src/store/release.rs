//! Taking items out of service: freeing a chunk (now, or when the last send reading it
//! ends) and retiring a version an index entry still points to.

use super::SlabStore;
use crate::item::*;
use crate::location::{decode, Location};

impl SlabStore {
    /// Frees an item. Returns true if it was live; a retired chunk goes back to its free list
    /// too but returns false (it was already uncounted), and a free one is left alone.
    pub fn free(&mut self, loc: Location) -> bool {
        let (c, slot) = decode(loc);
        let Some(class) = self.classes.get(c).filter(|k| slot < k.slots()) else {
            return false;
        };
        let chunk = class.chunk(slot);
        let status = chunk[OFF_STATUS];
        if status != IN_USE && status != RETIRED {
            return false;
        }
        if self.is_pinned(loc) {
            return self.free_pinned(loc);
        }
        let payload = stored_bytes(
            chunk[OFF_KEY_LEN].into(),
            rd32(chunk, OFF_VALUE_LEN) as usize,
        );
        self.release_chunk(loc);
        if status == RETIRED {
            return false;
        }
        let class = &mut self.classes[c];
        class.items -= 1;
        class.counts.bytes -= payload;
        self.stats.curr_items -= 1;
        self.stats.bytes -= payload;
        true
    }

    /// Gives a chunk (and a chained item's parts) back to the free lists.
    pub(super) fn release_chunk(&mut self, loc: Location) {
        let (c, slot) = decode(loc);
        let parts = self.parts_of(&Item::new(self.classes[c].chunk(slot)));
        for p in parts {
            self.release_part(p);
        }
        self.push_free(loc);
    }

    /// Whether `loc` holds a retired version (see [`SlabStore::retire`]).
    /// A chunk freed while a send read it is not: it only waits for the send (store/pins.rs),
    /// and nothing may free it again.
    pub fn is_retired(&self, loc: Location) -> bool {
        let (c, slot) = decode(loc);
        self.classes
            .get(c)
            .filter(|class| slot < class.slots())
            .is_some_and(|class| class.chunk(slot)[OFF_STATUS] == RETIRED)
            && !self.freed_while_pinned(loc)
    }

    /// Takes a live item out of service without reusing its chunk: from now on it is not
    /// readable, not counted and not evictable, but its location stays valid for an index
    /// entry that still points here, until [`SlabStore::free`] releases it. Returns false if
    /// the item was not live.
    pub fn retire(&mut self, loc: Location) -> bool {
        let (c, slot) = decode(loc);
        let Some(class) = self.classes.get_mut(c) else {
            return false;
        };
        if slot >= class.slots() {
            return false;
        }
        let chunk = class.chunk_mut(slot);
        if chunk[OFF_STATUS] != IN_USE {
            return false;
        }
        let payload = stored_bytes(
            chunk[OFF_KEY_LEN].into(),
            rd32(chunk, OFF_VALUE_LEN) as usize,
        );
        chunk[OFF_STATUS] = RETIRED;
        class.set_referenced(slot, false);
        class.items -= 1;
        class.counts.bytes -= payload;
        self.stats.curr_items -= 1;
        self.stats.bytes -= payload;
        true
    }

    /// Puts a version retired by [`SlabStore::retire`] back in service, as it was: a
    /// command that would have replaced it could not store its own value and keeps the old
    /// one (memcached keeps it for all but SET). Returns false if `loc` is not retired.
    pub fn unretire(&mut self, loc: Location) -> bool {
        if !self.is_retired(loc) {
            return false;
        }
        let (c, slot) = decode(loc);
        let class = &mut self.classes[c];
        let chunk = class.chunk_mut(slot);
        let payload = stored_bytes(
            chunk[OFF_KEY_LEN].into(),
            rd32(chunk, OFF_VALUE_LEN) as usize,
        );
        chunk[OFF_STATUS] = IN_USE;
        // Its client just asked for it: CLOCK gives it the second chance a read would.
        class.set_referenced(slot, true);
        class.items += 1;
        class.counts.bytes += payload;
        self.stats.curr_items += 1;
        self.stats.bytes += payload;
        true
    }
}
