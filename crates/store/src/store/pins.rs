//! Values lent to sends without a copy (memcached's item refcount, for the one reader that
//! outlives the partition lock: the network sending a value straight from its chunk).
//!
//! A pinned chunk is never handed to another item: CLOCK and page moves pass it over, an
//! in-place change (incr, vector updates) is refused, and an item deleted, replaced or
//! flushed while pinned leaves the index and the counts at once but keeps its chunk until
//! the last handle goes. Handles are dropped on network threads, which never take the
//! partition's lock for it: they queue the location, and the partition drains the queue at
//! its next call ([`SlabStore::drain_unpins`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hkv_mem::Arena;
use hkv_types::{PinRelease, Pinned};

use super::SlabStore;
use crate::item::*;
use crate::location::{decode, Location};

#[derive(Default)]
pub(super) struct Pins {
    /// Pinned chunks: handles out, and whether the item was freed meanwhile.
    held: HashMap<Location, Held>,
    released: Option<Arc<Released>>,
    /// Value bytes of the pinned chunks.
    bytes: u64,
}

#[derive(Clone, Copy, Default)]
struct Held {
    handles: u32,
    value_len: u32,
    freed: bool,
}

/// Where handles dropped on other threads say so.
struct Released {
    queue: Mutex<Vec<Location>>,
    waiting: AtomicUsize,
    /// Keeps the memory the handles point into mapped, whatever happens to the store.
    _arena: Arc<Arena>,
}

impl PinRelease for Released {
    fn release(&self, token: u64) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.push(token as Location);
        self.waiting.fetch_add(1, Ordering::Release);
    }
}

impl SlabStore {
    /// Lends the value of the live item at `loc` to a reader on any thread (see the module
    /// docs): one part for a flat value, one per chunk for a chained one. None if no item
    /// lives there.
    pub fn pin_value(&mut self, loc: Location) -> Option<Pinned> {
        let (parts, len) = {
            let item = self.get(loc)?;
            let parts: Vec<(*const u8, usize)> = self
                .value_parts(&item)
                .map(|p| (p.as_ptr(), p.len()))
                .collect();
            (parts, item.value_len())
        };
        let owner = match &self.pins.released {
            Some(r) => r.clone(),
            None => {
                let r = Arc::new(Released {
                    queue: Mutex::new(Vec::new()),
                    waiting: AtomicUsize::new(0),
                    _arena: self.arena.clone(),
                });
                self.pins.released = Some(r.clone());
                r
            }
        };
        let held = self.pins.held.entry(loc).or_default();
        if held.handles == 0 {
            held.value_len = len as u32;
            self.pins.bytes += len as u64;
        }
        held.handles += 1;
        // SAFETY: the chunks lie in `self.arena`'s mapping, which `owner` keeps alive; while
        // `held` counts this handle no store path writes the value bytes or reuses the
        // item's chunks, its parts included (CLOCK, page moves, free, clear and the in-place
        // writers all check `is_pinned` of the item, which a part's owner stands for), and
        // the count drops only after the handle's `release` (via `drain_unpins`). The
        // item's header (CAS, expiry, access bits) is still written meanwhile, through
        // `&mut` slices of its page: no byte a send reads is written, but those slices
        // also span the value, which Rust's aliasing model does not allow beside a reader on
        // another thread; docs/reliability.md records this gap.
        Some(unsafe { Pinned::new_parts(parts, u64::from(loc), owner) })
    }

    /// Whether a send may still be reading the chunk at `loc`.
    #[inline]
    pub fn is_pinned(&self, loc: Location) -> bool {
        !self.pins.held.is_empty() && self.pins.held.contains_key(&loc)
    }

    /// Whether the item at `loc` was freed while pinned (its chunk waits for the send).
    pub(super) fn freed_while_pinned(&self, loc: Location) -> bool {
        !self.pins.held.is_empty() && self.pins.held.get(&loc).is_some_and(|h| h.freed)
    }

    /// Chunks lent to sends now, and their value bytes (`stats hkv` pinned_*).
    pub fn pinned(&self) -> (usize, u64) {
        (self.pins.held.len(), self.pins.bytes)
    }

    /// Every pinned chunk's location.
    pub(super) fn pinned_locations(&self) -> std::collections::HashSet<Location> {
        self.pins.held.keys().copied().collect()
    }

    /// Takes back the pins whose handles are gone; a chunk whose item was freed meanwhile
    /// goes to its free list now. Cheap when nothing was released.
    pub fn drain_unpins(&mut self) {
        let Some(r) = &self.pins.released else {
            return;
        };
        if r.waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        let done = {
            let mut q = r.queue.lock().unwrap_or_else(|p| p.into_inner());
            r.waiting.store(0, Ordering::Relaxed);
            std::mem::take(&mut *q)
        };
        for loc in done {
            let Some(h) = self.pins.held.get_mut(&loc) else {
                continue;
            };
            h.handles -= 1;
            if h.handles > 0 {
                continue;
            }
            let h = *h;
            self.pins.held.remove(&loc);
            self.pins.bytes -= u64::from(h.value_len);
            if h.freed {
                self.release_chunk(loc);
            }
        }
    }

    /// [`SlabStore::free`] of a pinned chunk: the item stops being counted and readable
    /// now (it is retired), its chunk is freed when the last handle goes. Returns whether
    /// it was live.
    pub(super) fn free_pinned(&mut self, loc: Location) -> bool {
        let was_live = self.retire(loc);
        if let Some(h) = self.pins.held.get_mut(&loc) {
            h.freed = true;
        }
        was_live
    }

    /// `flush_all` of a pinned chunk: retired and freed later, as by [`SlabStore::free`],
    /// but uncounted by the flush itself.
    pub(super) fn flush_pinned(&mut self, loc: Location) {
        let (c, slot) = decode(loc);
        let class = &mut self.classes[c];
        let chunk = class.chunk_mut(slot);
        chunk[OFF_STATUS] = RETIRED;
        class.set_referenced(slot, false);
        if let Some(h) = self.pins.held.get_mut(&loc) {
            h.freed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Reclaim, StoreConfig};

    fn store(mb: usize) -> SlabStore {
        let arena = Arc::new(Arena::new(mb << 20).unwrap());
        SlabStore::new(arena, &StoreConfig::default())
    }

    fn set(s: &mut SlabStore, key: &[u8], value: &[u8]) -> Location {
        s.store(
            key,
            &[value],
            0,
            0,
            0,
            &mut |_: &Item<'_>, _, _: Reclaim| {},
        )
        .unwrap()
        .0
    }

    #[test]
    fn a_pinned_value_keeps_its_bytes_through_delete_and_reuse() {
        let mut s = store(4);
        let value = vec![7u8; 20_000];
        let loc = set(&mut s, b"big", &value);
        let pin = s.pin_value(loc).unwrap();
        assert!(s.free(loc), "the item was live");
        assert_eq!(s.stats().curr_items, 0, "gone for the counts at once");
        assert!(s.get(loc).is_none(), "and for readers");
        // Items of the same class must find other chunks while the pin holds.
        for i in 0..50 {
            let l = set(&mut s, format!("other{i}").as_bytes(), &vec![9u8; 20_000]);
            assert_ne!(l, loc);
        }
        assert_eq!(pin.bytes(), &value[..]);
        drop(pin);
        s.drain_unpins();
        assert_eq!(s.pinned(), (0, 0));
        assert_eq!(
            set(&mut s, b"next", &[1u8; 20_000]),
            loc,
            "the chunk is free again"
        );
    }

    #[test]
    fn clock_passes_over_pinned_chunks() {
        // One page of a large class: every store beyond it must evict.
        let mut s = store(2);
        s.set_automove(false);
        let first = set(&mut s, b"k0", &[1u8; 300_000]);
        let pin = s.pin_value(first).unwrap();
        let mut evicted = Vec::new();
        for i in 1..8 {
            let key = format!("k{i}");
            if let Ok((l, _)) = s.store(
                key.as_bytes(),
                &[&[2u8; 300_000]],
                0,
                0,
                0,
                &mut |_: &Item<'_>, l, _: Reclaim| evicted.push(l),
            ) {
                assert_ne!(l, first);
            }
        }
        assert!(!evicted.is_empty(), "the class had to evict");
        assert!(!evicted.contains(&first), "a pinned item is never a victim");
        assert!(
            s.stats().pinned_skips > 0,
            "passing it over is counted (lrutail_reflocked)"
        );
        assert!(s.get(first).is_some(), "and it is still live");
        assert_eq!(pin.bytes(), &[1u8; 300_000][..]);
    }

    #[test]
    fn a_retired_item_freed_while_pinned_is_not_retired_any_more() {
        // Regression (review of the zero-copy change): delayed index writes free a retired
        // version once, and ask `is_retired` whether someone else already did; a chunk that
        // waits for its send must not look retired, or it is freed again after the send,
        // when another item may live in it.
        let mut s = store(4);
        let loc = set(&mut s, b"k", &[3u8; 30_000]);
        let pin = s.pin_value(loc).unwrap();
        assert!(s.retire(loc));
        assert!(s.is_retired(loc));
        assert!(!s.free(loc), "was retired, so not live");
        assert!(!s.is_retired(loc), "freed: waiting for the send only");
        drop(pin);
        s.drain_unpins();
        let other = set(&mut s, b"other", &[4u8; 30_000]);
        assert_eq!(other, loc, "the chunk went back to its class");
        assert!(!s.is_retired(loc));
        assert_eq!(s.stats().curr_items, 1);
    }

    fn chained_store(mb: usize) -> SlabStore {
        let arena = Arc::new(Arena::new(mb << 20).unwrap());
        SlabStore::new(
            arena,
            &StoreConfig {
                max_value: 8 << 20,
                ..StoreConfig::default()
            },
        )
    }

    fn tagged(n: usize, tag: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(13) ^ tag).collect()
    }

    #[test]
    fn a_pinned_value_in_parts_keeps_every_part_through_delete_flush_and_reuse() {
        let mut s = chained_store(12);
        let v = tagged(2_500_000, 1);
        let loc = set(&mut s, b"big", &v);
        let pin = s.pin_value(loc).unwrap();
        assert!(pin.part_count() > 1, "stored in parts");
        assert_eq!(&pin.bytes()[..], &v[..]);
        assert!(s.free(loc));
        // Every other chunk is rewritten by values in parts of their own, again and again.
        for round in 0..6u8 {
            for k in 0..3 {
                let key = format!("other{k}");
                let _ = s.store(
                    key.as_bytes(),
                    &[&tagged(2_500_000, 10 + round)],
                    0,
                    0,
                    0,
                    &mut |_: &Item<'_>, _, _: Reclaim| {},
                );
            }
        }
        s.clear();
        for k in 0..3 {
            let key = format!("after{k}");
            let _ = s.store(
                key.as_bytes(),
                &[&tagged(2_500_000, 99)],
                0,
                0,
                0,
                &mut |_: &Item<'_>, _, _: Reclaim| {},
            );
        }
        assert_eq!(&pin.bytes()[..], &v[..], "no part was reused");
        drop(pin);
        s.drain_unpins();
        assert_eq!(s.pinned(), (0, 0));
        // Everything is reusable again: the memory holds as many such values as before.
        s.clear();
        let stored = (0..4)
            .filter(|k| {
                let key = format!("again{k}");
                s.store(
                    key.as_bytes(),
                    &[&tagged(2_500_000, 7)],
                    0,
                    0,
                    0,
                    &mut |_: &Item<'_>, _, _: Reclaim| {},
                )
                .is_ok()
            })
            .count();
        assert!(stored >= 3, "{stored} stored");
    }

    #[test]
    fn page_moves_leave_the_parts_of_a_pinned_value_alone() {
        let mut s = chained_store(4);
        let v = tagged(2_500_000, 3);
        let loc = set(&mut s, b"big", &v);
        let pin = s.pin_value(loc).unwrap();
        // Small items until memory is spent: then their class would take a page from the
        // value's, and must not while the value is pinned.
        let mut refused = false;
        for i in 0..200_000 {
            let key = format!("small{i}");
            if s.store(
                key.as_bytes(),
                &[&[5u8; 100]],
                0,
                0,
                0,
                &mut |_: &Item<'_>, _, _: Reclaim| {},
            )
            .is_err()
            {
                refused = true;
                break;
            }
        }
        assert!(refused, "memory ran out");
        assert_eq!(&pin.bytes()[..], &v[..], "no part's page was moved");
        assert!(
            s.get(loc).is_some(),
            "a pinned item is not evicted for a page move"
        );
    }

    #[test]
    fn in_place_writes_refuse_a_pinned_value() {
        let mut s = store(4);
        let loc = set(&mut s, b"n", &[b'1'; 2000]);
        let pin = s.pin_value(loc).unwrap();
        assert!(s.value_mut(loc).is_none());
        assert!(s.overwrite_value(loc, &[b'2'; 2000]).is_none());
        assert!(!s.write_value(loc, &[b'3'; 2000]));
        assert_eq!(pin.bytes(), &[b'1'; 2000][..]);
        drop(pin);
        s.drain_unpins();
        assert!(s.value_mut(loc).is_some());
    }

    #[test]
    fn flush_all_keeps_a_pinned_chunk_until_its_send_ends() {
        let mut s = store(4);
        let loc = set(&mut s, b"k", &[5u8; 5000]);
        let pin = s.pin_value(loc).unwrap();
        let pin2 = s.pin_value(loc).unwrap();
        s.clear();
        assert!(s.get(loc).is_none());
        let again = set(&mut s, b"k2", &[6u8; 5000]);
        assert_ne!(again, loc);
        drop(pin);
        s.drain_unpins();
        assert!(s.is_pinned(loc), "one handle is left");
        assert_eq!(pin2.bytes(), &[5u8; 5000][..]);
        drop(pin2);
        s.drain_unpins();
        assert!(!s.is_pinned(loc));
    }
}
