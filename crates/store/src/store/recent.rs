//! The newest writes of each class, for `stats cachedump`: memcached 1.6 lists the head of
//! a class's COLD LRU there (where items arrive from HOT soon after they are written),
//! walking no more items than it prints under the LRU's lock. CLOCK keeps no order, so
//! without this a dump would walk every chunk of the class to find the newest, and a client
//! repeating it would hold a partition for that long each time (a 1M-item cache served
//! ~700 GETs/s to everyone else while one client looped cachedumps; docs/BENCHMARKS.md).

use super::SlabStore;
use crate::expiry::is_expired;
use crate::item::*;

/// Writes each class remembers: 4 KiB per class in use per partition.
pub const RECENT_WRITES: usize = 1024;

/// A ring of the slots most recently written in one class, newest last.
#[derive(Debug, Default)]
pub(super) struct Recent {
    slots: Vec<u32>,
    /// Writes recorded so far (the next one goes at `written % RECENT_WRITES`).
    written: u64,
}

impl Recent {
    #[inline]
    pub(super) fn push(&mut self, slot: u32) {
        if self.slots.is_empty() {
            self.slots = vec![0; RECENT_WRITES];
        }
        self.slots[(self.written % RECENT_WRITES as u64) as usize] = slot;
        self.written += 1;
    }

    pub(super) fn clear(&mut self) {
        self.written = 0;
    }

    /// Recorded slots, newest first (a slot written twice appears twice).
    fn newest_first(&self) -> impl Iterator<Item = u32> + '_ {
        let held = self.written.min(RECENT_WRITES as u64);
        (1..=held).map(move |k| self.slots[((self.written - k) % RECENT_WRITES as u64) as usize])
    }
}

/// The [`RECENT_WRITES`] highest-CAS items of a class, gathered from its chunks where no
/// ring was kept (a warm restart).
#[derive(Debug, Default)]
pub(super) struct Newest {
    top: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32)>>,
}

impl Newest {
    pub(super) fn offer(&mut self, cas: u64, slot: u32) {
        self.top.push(std::cmp::Reverse((cas, slot)));
        if self.top.len() > RECENT_WRITES {
            self.top.pop();
        }
    }

    /// Oldest first into the ring, so the newest ends up newest.
    pub(super) fn into_ring(self, ring: &mut Recent) {
        for std::cmp::Reverse((_, slot)) in self.top.into_sorted_vec().into_iter().rev() {
            ring.push(slot);
        }
    }
}

impl SlabStore {
    /// Live, unexpired items of class `c` for `stats cachedump`, each once, until `f` says
    /// stop: first those among the class's last [`RECENT_WRITES`] writes, newest first; then,
    /// where those run out (a key rewritten many times fills the ring alone), the others
    /// found in the class's first `walk` chunks, in storage order. The work is bounded by
    /// the ring and `walk`, whatever the size of the cache.
    pub fn newest_items(&self, c: usize, now: u32, walk: u32, mut f: impl FnMut(Item<'_>) -> bool) {
        let Some(class) = self.classes.get(c) else {
            return;
        };
        let live = |slot: u32| {
            let chunk = class.chunk(slot);
            (chunk[OFF_STATUS] == IN_USE && !is_expired(rd32(chunk, OFF_EXPIRY), now))
                .then(|| Item::new(chunk))
        };
        let mut seen = std::collections::HashSet::new();
        for slot in class.recent.newest_first() {
            // A slot rewritten since is listed where its newest write is.
            if slot >= class.bump || !seen.insert(slot) {
                continue;
            }
            if let Some(item) = live(slot) {
                if !f(item) {
                    return;
                }
            }
        }
        for slot in 0..class.bump.min(walk) {
            if seen.contains(&slot) {
                continue;
            }
            if let Some(item) = live(slot) {
                if !f(item) {
                    return;
                }
            }
        }
    }
}
