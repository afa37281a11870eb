//! What removes items other than a client: the background expiry sweep, `flush_all`, and
//! slab page moves (`slabs reassign`, automove by age).

use super::*;

impl Partition {
    /// memcached's `flush_all`: every item stored before `at` (Unix time) is gone; `at <=
    /// now` means at once. A delayed flush starts a second early, as memcached's does (its
    /// `oldest_live` is `at - 1`: from that second on it hides what was stored up to the end
    /// of it), and what is stored in that last second goes at `at`.
    pub fn flush_all(&mut self, at: u32, now: u32) {
        if at <= now {
            self.flush_now();
        } else {
            self.flush_at = Some(at);
            self.flushed_early = false;
            self.flush_due(at, now);
        }
    }

    /// The delayed flush of `at`, if its time has come.
    pub(super) fn flush_due(&mut self, at: u32, now: u32) {
        if at <= now {
            self.flush_now();
        } else if !self.flushed_early && at - 1 <= now {
            self.flush_items();
            self.flushed_early = true;
            // One flush_all, counted once.
            self.stats.flushes += 1;
        }
    }

    /// A delayed `flush_all` called off (see [`crate::Engine::cancel_flush`]).
    pub fn cancel_flush(&mut self) {
        self.flush_at = None;
        self.flushed_early = false;
    }

    pub(super) fn flush_now(&mut self) {
        self.flush_items();
        if !std::mem::take(&mut self.flushed_early) {
            self.stats.flushes += 1;
        }
        self.flush_at = None;
    }

    fn flush_items(&mut self) {
        // Retired versions are freed with everything else.
        self.pending.clear();
        self.index.clear(&self.store);
        self.store.clear();
    }

    /// `slabs reassign`: moves one page of this partition's store from class `from` to `to`
    /// (0-based), dropping the index entries of the items it evicts.
    /// `from` None: memcached's `-1`, a source this partition picks (see
    /// `SlabStore::spare_source`); with none to spare, memcached's BADCLASS.
    pub fn reassign(
        &mut self,
        from: Option<usize>,
        to: usize,
        now: u32,
    ) -> Result<(), ReassignError> {
        let from = match from {
            Some(c) => c,
            None => self.store.spare_source(to).ok_or(ReassignError::BadClass)?,
        };
        // Retired versions pin their pages until the index lets go of them.
        self.apply_pending();
        self.with_reclaim(now, |store, reclaim| store.reassign(from, to, now, reclaim))
    }

    pub fn set_automove(&mut self, on: bool) {
        self.store.set_automove(on);
    }

    /// `-M`: no live item is evicted for room (see [`crate::EngineConfig::evictions`]).
    pub fn set_evictions(&mut self, on: bool) {
        self.store.set_evictions(on);
    }

    /// Background expiry, bounded per call; runs when the clock has moved on (and the
    /// crawler is enabled: `lru_crawler disable` stops it, as it stops memcached's).
    pub(super) fn maybe_sweep(&mut self, now: u32) {
        // Slab automove by age has its own once-a-second tick (store/automove.rs).
        if self.store.automove_due(now) {
            self.with_reclaim(now, |store, reclaim| store.automove_tick(now, reclaim));
        }
        if now <= self.last_sweep || !self.sweep_on {
            return;
        }
        let seconds = if self.last_sweep == 0 {
            1
        } else {
            (now - self.last_sweep).min(SWEEP_MAX_SECONDS)
        };
        self.last_sweep = now;
        let Partition {
            index,
            store,
            stats,
            pending,
            ..
        } = self;
        let freed = store.sweep_expired(now, seconds * SWEEP_SLOTS_PER_SECOND, |item, l, _| {
            forget_reclaimed(index, pending, item.key(), l);
        });
        stats.expired_swept += freed as u64;
        let settled = self.index.settle(&self.store);
        self.dropped.extend(settled);
        self.free_dropped();
    }

    /// `lru_crawler crawl`, one slice of at most `budget` chunks from `cursor`: frees the
    /// expired items of `classes` (0-based; all when `None`), at most `per_class` chunks of
    /// each examined (0: all). Returns how many it freed.
    pub fn crawl(
        &mut self,
        classes: Option<&[usize]>,
        per_class: u32,
        cursor: &mut hkv_store::CrawlCursor,
        budget: u32,
        now: u32,
    ) -> u32 {
        let Partition {
            index,
            store,
            stats,
            pending,
            ..
        } = self;
        let freed = store.crawl(now, classes, per_class, cursor, budget, |item, l, _| {
            forget_reclaimed(index, pending, item.key(), l);
        });
        stats.expired_swept += u64::from(freed);
        let settled = self.index.settle(&self.store);
        self.dropped.extend(settled);
        self.free_dropped();
        freed
    }

    /// Turns the background expiry sweep on or off (`lru_crawler enable|disable`).
    pub fn set_sweep(&mut self, on: bool) {
        self.sweep_on = on;
    }
}
