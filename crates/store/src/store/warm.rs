//! A store's state for a warm restart (memcached's `-e`): which arena pages each class
//! holds and where its bump, CLOCK hand and CAS counter stood. The items themselves stay in
//! the memory file; [`SlabStore::restore`] takes the pages back and checks every chunk
//! before anything is served from it.

use std::sync::Arc;

use hkv_mem::{Arena, Carved};

use super::{Class, SlabStore, StoreConfig};
use crate::class::chunk_sizes;
use crate::item::*;
use crate::location::{decode, encode, NO_LOCATION};
use crate::store::ClassCounts;

/// One class's pages (arena offsets, in the class's own order: slot numbers follow it) and
/// positions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassImage {
    pub pages: Vec<usize>,
    pub bump: u32,
    pub hand: u32,
}

/// What a store needs, beside the memory file, to come back as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreImage {
    pub classes: Vec<ClassImage>,
    pub next_cas: u64,
}

/// Why saved pages cannot be served: the restart starts empty instead.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RestoreError {
    #[error("saved state has {saved} slab classes, these settings make {now}")]
    Classes { saved: usize, now: usize },
    #[error("class {class}: {why}")]
    Class { class: usize, why: String },
    #[error("class {class} slot {slot}: {why}")]
    Chunk {
        class: usize,
        slot: u32,
        why: String,
    },
}

impl SlabStore {
    /// This store's part of a warm-restart save. Delayed index writes must have been
    /// applied (no chunk retired), which the engine does first.
    pub fn image(&self) -> StoreImage {
        StoreImage {
            classes: self
                .classes
                .iter()
                .map(|c| ClassImage {
                    pages: c.pages.iter().map(|p| self.arena.offset_of(p)).collect(),
                    bump: c.bump,
                    hand: c.hand,
                })
                .collect(),
            next_cas: self.next_cas,
        }
    }

    /// Every page's bytes, classes in order, pages in class order (the order [`SlabStore::image`]
    /// lists them).
    pub fn page_bytes(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.classes
            .iter()
            .flat_map(|c| c.pages.iter().map(|p| &p[..]))
    }

    /// A store over pages a previous process filled: `pages[c]` are class `c`'s, in
    /// `image` order. Every chunk below the bump is checked (status, key and value lengths
    /// within the chunk); a retired chunk (a dead version) becomes free; free lists, item
    /// counts and bytes are rebuilt. Any inconsistency refuses the whole store.
    pub fn restore(
        arena: Arc<Arena>,
        config: &StoreConfig,
        image: &StoreImage,
        mut pages: Vec<Vec<Carved>>,
    ) -> Result<SlabStore, RestoreError> {
        let mut store = SlabStore::new(arena, config);
        let now = store.classes.len();
        if image.classes.len() != now || pages.len() != now {
            return Err(RestoreError::Classes {
                saved: image.classes.len(),
                now,
            });
        }
        debug_assert_eq!(
            now,
            chunk_sizes(config.growth_factor, config.page_size).len()
        );
        if store.cas_enabled() {
            store.next_cas = image.next_cas.max(1);
        }
        let part_cap = store.part_cap();
        for (c, (class, saved)) in store.classes.iter_mut().zip(&image.classes).enumerate() {
            let class_err = |why: String| RestoreError::Class { class: c, why };
            let mine = std::mem::take(&mut pages[c]);
            if mine.len() != saved.pages.len() || mine.len() > class.info.max_pages() {
                return Err(class_err(format!("{} pages", mine.len())));
            }
            if mine.iter().any(|p| p.len() != config.page_size) {
                return Err(class_err("a page of the wrong size".into()));
            }
            class.pages = mine;
            if saved.bump > class.slots() || (saved.hand > 0 && saved.hand >= class.slots()) {
                return Err(class_err(format!(
                    "bump {} / hand {} beyond {} slots",
                    saved.bump,
                    saved.hand,
                    class.slots()
                )));
            }
            class.bump = saved.bump;
            class.hand = saved.hand;
            restore_class(c, class, part_cap, &mut store.stats)?;
            if !class.pages.is_empty() {
                store.stats.pages += class.pages.len() as u64;
                store.stats.largest_chunk = store.stats.largest_chunk.max(class.info.chunk as u64);
            }
        }
        store.restore_chains()?;
        Ok(store)
    }

    /// After every class is back: each live chained item must own all its parts; parts
    /// no live item owns (of a retired version, or of one the previous process was still
    /// building) go back to their free lists.
    fn restore_chains(&mut self) -> Result<(), RestoreError> {
        let mut owned = std::collections::HashSet::new();
        for c in 0..self.classes.len() {
            for slot in 0..self.classes[c].bump {
                let item = Item::new(self.classes[c].chunk(slot));
                if self.classes[c].chunk(slot)[OFF_STATUS] != IN_USE || !item.is_chained() {
                    continue;
                }
                let owner = encode(c, slot);
                let cap = self.part_cap();
                let (full, tail) = (item.value_len() / cap, item.value_len() % cap);
                let largest = self.classes.len() - 1;
                for (i, part) in self.parts_of(&item).into_iter().enumerate() {
                    let (pc, ps) = decode(part);
                    // Full parts in the largest class, the tail in one that holds it.
                    let fits = if i < full {
                        pc == largest
                    } else {
                        self.classes
                            .get(pc)
                            .is_some_and(|k| k.info.chunk >= HEADER_BYTES + tail)
                    };
                    let ok = fits
                        && self
                            .classes
                            .get(pc)
                            .filter(|k| ps < k.bump)
                            .map(|k| k.chunk(ps))
                            .is_some_and(|p| p[OFF_STATUS] == CHAIN && rd32(p, OFF_OWNER) == owner);
                    if !ok || !owned.insert(part) {
                        return Err(RestoreError::Chunk {
                            class: c,
                            slot,
                            why: format!("part {part:#x} of a chained item is not its own"),
                        });
                    }
                }
                let total = (HEADER_BYTES + item.key_len() + item.value_len()) as u64;
                let parts = self.parts_of(&item);
                for part in parts {
                    self.classes[decode(part).0].parts += 1;
                }
                self.stats.largest_chunk = self.stats.largest_chunk.max(total);
            }
        }
        for c in 0..self.classes.len() {
            for slot in 0..self.classes[c].bump {
                let loc = encode(c, slot);
                if self.classes[c].chunk(slot)[OFF_STATUS] == CHAIN && !owned.contains(&loc) {
                    self.push_free(loc);
                }
            }
        }
        Ok(())
    }
}

/// Checks one class's chunks and rebuilds its free list and counts.
fn restore_class(
    c: usize,
    class: &mut Class,
    part_cap: usize,
    stats: &mut super::StoreStats,
) -> Result<(), RestoreError> {
    class.free_head = NO_LOCATION;
    class.items = 0;
    class.parts = 0;
    class.counts = ClassCounts::default();
    class.recent.clear();
    let mut newest = super::recent::Newest::default();
    let chunk_len = class.info.chunk;
    // Highest slot first, so the free list hands out low slots first, as after a start.
    for slot in (0..class.bump).rev() {
        let head = class.free_head;
        let chunk = class.chunk_mut(slot);
        match chunk[OFF_STATUS] {
            IN_USE => {
                let klen = chunk[OFF_KEY_LEN] as usize;
                let vlen = rd32(chunk, OFF_VALUE_LEN) as usize;
                let stored = match chunk[OFF_LAYOUT] {
                    LAYOUT_FLAT => vlen,
                    LAYOUT_CHAINED => 4 * vlen.div_ceil(part_cap.max(1)),
                    _ => usize::MAX - HEADER_BYTES - MAX_KEY_LEN,
                };
                if klen == 0 || klen > MAX_KEY_LEN || HEADER_BYTES + klen + stored > chunk_len {
                    return Err(RestoreError::Chunk {
                        class: c,
                        slot,
                        why: format!("key {klen} and value {vlen} bytes do not fit {chunk_len}"),
                    });
                }
                let cas =
                    u64::from_le_bytes(chunk[OFF_CAS..OFF_CAS + 8].try_into().unwrap_or([0; 8]));
                newest.offer(cas, slot);
                class.items += 1;
                class.counts.bytes += stored_bytes(klen, vlen);
                stats.curr_items += 1;
                stats.bytes += stored_bytes(klen, vlen);
            }
            // Checked once every class is back (`restore_chains`).
            CHAIN => {}
            FREE | RETIRED => {
                chunk[OFF_STATUS] = FREE;
                wr32(chunk, OFF_NEXT_FREE, head);
                class.free_head = slot;
                class.set_referenced(slot, false);
            }
            other => {
                return Err(RestoreError::Chunk {
                    class: c,
                    slot,
                    why: format!("status byte {other:#x}"),
                })
            }
        }
    }
    // A cachedump after a warm restart starts from the class's highest CAS values: its
    // newest items (without the repeats and deleted slots the old ring may have held).
    newest.into_ring(&mut class.recent);
    Ok(())
}
