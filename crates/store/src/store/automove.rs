//! memcached's slab automove by age (its `slab_automove=1`): once memory is spent, a class
//! whose writes keep evicting young items takes a page from the class whose items have gone
//! longest unread, so a store that filled with one value size makes room for another
//! instead of evicting the new size's items while the old size's sit idle ("slab
//! calcification"). One page a second at most, per partition, with memcached's window and
//! ratio.

use super::SlabStore;
use crate::item::Item;
use crate::location::Location;
use crate::store::Reclaim;

/// Ticks (seconds) a class's eviction history covers: memcached's `slab_automove_window`.
pub const WINDOW: usize = 30;
/// A page moves when the evicting class's victims are younger than this share of the
/// donor's oldest items: memcached's `slab_automove_ratio`.
pub const MAX_AGE_RATIO: f64 = 0.8;
/// ... and younger by this many seconds at least: ages are whole seconds, and in a cache
/// that turns over in a second or two a tick's difference is the clock's, not the items'
/// (without it, two classes both evicting items a second old pass pages back and forth).
pub const MIN_AGE_GAP: f64 = 2.0;

/// Whether automove is on, and the last tick it ran.
#[derive(Clone, Copy, Debug)]
pub(super) struct Automove {
    pub(super) on: bool,
    last_tick: u32,
}

impl Automove {
    pub(super) fn new() -> Automove {
        Automove {
            on: true,
            last_tick: 0,
        }
    }
}

/// One class's eviction history: the victims CLOCK took for this class's own allocations
/// (a chained item's parts count in the class they are carved from, not their owner's).
#[derive(Clone, Debug, Default)]
pub(super) struct Window {
    /// Victims taken since the last tick, and the idle seconds of the last one.
    taken: u32,
    taken_age: u32,
    /// Bit i: victims were taken in the tick i ticks ago.
    pressed: u32,
    /// The victim age of each tick of the window (ring, indexed by tick count).
    ages: [u32; WINDOW],
    at: usize,
}

impl Window {
    /// CLOCK took a victim idle for `age` seconds to make room in this class.
    pub(super) fn took(&mut self, age: u32) {
        self.taken += 1;
        self.taken_age = age;
    }

    fn roll(&mut self) {
        let mask = (1u32 << WINDOW) - 1;
        self.pressed = ((self.pressed << 1) | u32::from(self.taken > 0)) & mask;
        self.at = (self.at + 1) % WINDOW;
        self.ages[self.at] = if self.taken > 0 { self.taken_age } else { 0 };
        self.taken = 0;
    }

    /// The mean age of its victims over the window, if it evicted in more than half its
    /// ticks (memcached's test for a class that needs memory).
    fn young_age(&self) -> Option<f64> {
        let n = self.pressed.count_ones();
        if (n as usize) <= WINDOW / 2 {
            return None;
        }
        let sum: u64 = self.ages.iter().map(|&a| u64::from(a)).sum();
        Some(sum as f64 / f64::from(n))
    }
}

impl SlabStore {
    /// Whether [`SlabStore::automove_tick`] has anything to do at `now` (a cheap test, for
    /// every batch).
    #[inline]
    pub fn automove_due(&self, now: u32) -> bool {
        self.automove.on && self.evict && now > self.automove.last_tick
    }

    /// Once a second: rolls every class's eviction window and, when the arena has no page
    /// left to carve, moves the last page of the class with the oldest items (its items
    /// evicted, counted in `slab_reassign_evictions`) to the class that has evicted in more
    /// than half the window with the youngest victims, if those are younger than
    /// [`MAX_AGE_RATIO`] of the donor's. True if a page moved.
    pub fn automove_tick(
        &mut self,
        now: u32,
        mut on_reclaim: impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> bool {
        if !self.automove_due(now) {
            return false;
        }
        self.automove.last_tick = now;
        for class in &mut self.classes {
            class.window.roll();
        }
        if self.arena.available() >= self.page_size + 4096 {
            return false;
        }
        let Some((young, young_age)) = self
            .classes
            .iter()
            .enumerate()
            .filter(|(_, c)| c.pages.len() < c.info.max_pages())
            .filter_map(|(i, c)| Some((i, c.window.young_age()?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
        else {
            return false;
        };
        // The donor's age is its CLOCK tail's (what `stats items` reports as `age`). A class
        // with items keeps its last page, as memcached's sources keep theirs; one with pages
        // and no items at all gives them up first. One holding only parts of chained items
        // has no age of its own here, so it is left alone.
        let Some((donor, donor_age)) = self
            .classes
            .iter()
            .enumerate()
            .filter(|&(i, c)| i != young && !c.pages.is_empty())
            .filter_map(|(i, c)| match (c.items, c.parts, c.tail_atime()) {
                (0, 0, _) => Some((i, f64::INFINITY)),
                (_, _, Some(t)) if c.pages.len() >= 2 => {
                    Some((i, f64::from(now.saturating_sub(t))))
                }
                _ => None,
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
        else {
            return false;
        };
        if young_age >= donor_age * MAX_AGE_RATIO || donor_age - young_age < MIN_AGE_GAP {
            return false;
        }
        let Some(page) = self.take_page(donor, now, &mut on_reclaim) else {
            return false;
        };
        self.give_page_uncarved(young, page);
        true
    }
}
