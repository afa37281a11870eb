//! IN for writes: the same-key table of delayed index writes (Mega-KV's delayed
//! updates), applied in batches, and the retired versions they hold back from reuse.

use super::*;

impl Partition {
    /// Removes the live version `loc` of `key`: at once from reads, from the index with the
    /// next batch of delayed writes. A version that is no longer live has already left the
    /// index (whatever freed it took it out), so there is nothing to do for it.
    pub(super) fn unlink(&mut self, key: &[u8], h: &KeyHash, loc: Location) {
        if self.store.retire(loc) {
            self.unlink_retired(key, h, loc);
        }
    }

    /// [`Partition::unlink`] for a version the caller has already retired.
    pub(super) fn unlink_retired(&mut self, key: &[u8], h: &KeyHash, loc: Location) {
        if !self.delay_writes && self.pending.is_empty() {
            self.note_index_write(h);
            self.index
                .delete_one(&self.store, h, loc, &mut self.dropped);
            self.store.free(loc);
            self.free_dropped();
            return;
        }
        match self.pending.get_mut(key, h) {
            Some(w) => {
                if w.newest == Some(loc) {
                    w.newest = None;
                    if w.resident {
                        // The index holds it: it goes when the table is applied.
                        w.resident = false;
                        w.indexed = Some(loc);
                    } else {
                        // Never indexed: nothing points here but the table.
                        self.store.free(loc);
                    }
                }
                self.stats.merged_writes += 1;
            }
            None => {
                self.pending.insert(key, Waiting::new(*h, None, Some(loc)));
            }
        }
    }

    /// Makes `loc` the newest version of `key`; `old` is the version it replaces, already
    /// retired by the caller (still where the index may point, its chunk not reused).
    pub(super) fn link(&mut self, key: &[u8], h: &KeyHash, loc: Location, old: Option<Location>) {
        let t = self.sample_write.then(std::time::Instant::now);
        self.link_untimed(key, h, loc, old);
        if let Some(t) = t {
            self.stats.task_in_ns += t.elapsed().as_nanos() as u64 * WRITE_SAMPLE;
        }
    }

    fn link_untimed(&mut self, key: &[u8], h: &KeyHash, loc: Location, old: Option<Location>) {
        if !self.delay_writes && self.pending.is_empty() {
            self.insert_now(h, loc, old);
            return;
        }
        match self.pending.get_mut(key, h) {
            Some(w) => {
                if let Some(c) = old.filter(|&c| w.newest == Some(c)) {
                    if w.resident {
                        // The version the index holds: retired until the table is applied.
                        w.resident = false;
                        w.indexed = Some(c);
                    } else {
                        // An intermediate version, never indexed: free it now.
                        self.store.free(c);
                    }
                }
                w.newest = Some(loc);
                self.stats.merged_writes += 1;
            }
            None => {
                self.pending.insert(key, Waiting::new(*h, Some(loc), old));
            }
        }
    }

    /// `old` if it is still a retired version: an apply of the same-key table may have freed
    /// it meanwhile (the index let go of it), and then nothing may record it again.
    pub(super) fn still_retired(&self, old: Option<Location>) -> Option<Location> {
        old.filter(|&c| self.store.is_retired(c))
    }

    /// Whether in-place atomics forward their key's location through the same-key table
    /// (see [`crate::EngineConfig::merge_atomics`]).
    pub fn set_merge_atomics(&mut self, on: bool) {
        self.merge_atomics = on;
    }

    /// Whether index writes wait in the same-key table for a batch every n batches (n x C).
    /// With C = 0 (the CPU backend's usual interval: a batch every loop pass) there is no
    /// period to wait for and nothing to amortise, since an in-place CPU index write costs no
    /// launch; each write then reaches the index before the next request runs. Turning the
    /// delay off applies whatever waits.
    pub fn set_write_delay(&mut self, on: bool) {
        if self.delay_writes && !on {
            self.apply_pending();
        }
        self.delay_writes = on;
    }

    /// IN for a write that does not wait (C = 0 on the CPU backend); `old` is the retired
    /// version it replaces.
    pub(super) fn insert_now(&mut self, h: &KeyHash, loc: Location, old: Option<Location>) {
        self.note_index_write(h);
        self.grow_for(1);
        let outcome = self
            .index
            .insert_one(&self.store, h, loc, &mut self.dropped);
        self.free_dropped();
        match outcome {
            InsertOutcome::Inserted => {}
            // A rebuild already indexed the new item.
            InsertOutcome::Replaced(prev) if prev == loc => {}
            InsertOutcome::Replaced(prev) => {
                // `old` (not live: free returns false), or another key with the same
                // signature in the same bucket pair: the index holds one of them, so the
                // older one is evicted (and counted).
                if self.evict(prev) {
                    self.stats.collision_evictions += 1;
                }
            }
            InsertOutcome::Evicted(victim) => {
                if self.evict(victim) {
                    self.stats.index_evictions += 1;
                }
            }
        }
        if let Some(c) = self.still_retired(old) {
            // The index kept the old version under another slot: take it out, then free it.
            self.index.delete_one(&self.store, h, c, &mut self.dropped);
            self.store.free(c);
            self.free_dropped();
        }
    }

    /// Waiting index writes (keys in the same-key table).
    pub fn pending_writes(&self) -> usize {
        self.pending.len()
    }

    /// Applies every waiting index write as one batch: inserts of newest versions, deletes of
    /// what the index still holds for deleted keys, then frees the retired versions the index
    /// has let go of.
    pub fn apply_pending(&mut self) {
        self.batches_since_apply = 0;
        // The index is about to change: what the writes' search found may no longer hold.
        self.write_locs_valid = false;
        if self.pending.is_empty() {
            return;
        }
        let t = std::time::Instant::now();
        let mut work = std::mem::take(&mut self.applying);
        let mut entries = std::mem::take(&mut self.apply_entries);
        let mut owner = std::mem::take(&mut self.apply_owner);
        let mut outcomes = std::mem::take(&mut self.apply_outcomes);
        work.clear();
        self.pending.drain_into(&mut work);
        let applied = work.len() as u64;
        entries.clear();
        owner.clear();
        for (i, w) in work.iter().enumerate() {
            if let Some(n) = w.newest.filter(|_| !w.resident) {
                entries.push((w.hash, n));
                owner.push(i as u32);
            }
        }
        self.grow_for(entries.len());
        let rebuilds = self.index.rebuilds;
        self.index
            .insert_many(&self.store, &entries, &mut outcomes, &mut self.dropped);
        if self.index.rebuilds == rebuilds {
            for (k, outcome) in outcomes.iter().enumerate() {
                let i = owner[k] as usize;
                let n = entries[k].1;
                match *outcome {
                    InsertOutcome::Inserted => {}
                    InsertOutcome::Replaced(prev) if prev == n => {}
                    InsertOutcome::Replaced(prev) if Some(prev) == work[i].indexed => {
                        work[i].indexed = None;
                        self.store.free(prev);
                    }
                    InsertOutcome::Replaced(prev) => {
                        // Another key with the same signature in the same bucket pair: the
                        // index holds one of them, so the older one goes (and is counted).
                        if self.drop_version(prev, &mut work) {
                            self.stats.collision_evictions += 1;
                        }
                    }
                    InsertOutcome::Evicted(victim) => {
                        if self.drop_version(victim, &mut work) {
                            self.stats.index_evictions += 1;
                        }
                    }
                }
            }
            entries.clear();
            entries.extend(work.iter().filter_map(|w| w.indexed.map(|l| (w.hash, l))));
            self.index
                .delete_many(&self.store, &entries, &mut self.dropped);
        }
        // Whatever the outcome (a device failure rebuilds the index from the live items,
        // which holds none of these), the index no longer points at any retired version.
        for w in &work {
            if let Some(l) = w.indexed {
                self.store.free(l);
            }
        }
        self.free_dropped();
        self.stats.applied_writes += applied;
        self.stats.write_applies += 1;
        let ns = t.elapsed().as_nanos() as u64;
        self.timing.write_ns += ns;
        self.stats.task_in_ns += ns;
        self.applying = work;
        self.apply_entries = entries;
        self.apply_owner = owner;
        self.apply_outcomes = outcomes;
    }

    /// Frees a version the index let go of while applying the table; true if it was a live
    /// item (an eviction to count), false if it was a retired version waiting in `work`.
    pub(super) fn drop_version(&mut self, loc: Location, work: &mut [Waiting]) -> bool {
        if self.evict(loc) {
            return true;
        }
        for w in work.iter_mut().filter(|w| w.indexed == Some(loc)) {
            w.indexed = None;
        }
        false
    }

    /// Frees items an index rebuild had to drop, counting them as evictions. A rebuild also
    /// makes the same-key table moot: the new index holds every live item (newest versions
    /// included) and no retired one.
    pub(super) fn free_dropped(&mut self) {
        if self.index.rebuilds != self.seen_rebuilds {
            self.seen_rebuilds = self.index.rebuilds;
            self.write_locs_valid = false;
            let mut work = std::mem::take(&mut self.applying);
            work.clear();
            self.pending.drain_into(&mut work);
            for w in &work {
                if let Some(l) = w.indexed {
                    self.store.free(l);
                }
            }
            self.applying = work;
        }
        for loc in std::mem::take(&mut self.dropped) {
            if self.evict(loc) {
                self.stats.collision_evictions += 1;
            }
        }
    }
}
