//! IN, KC and RD for reads: grouped, their bucket searches run as one batch, and their
//! items prefetched a few reads ahead.

use super::*;

impl Partition {
    pub(super) fn flush_reads(
        &mut self,
        reqs: &[Request<'_>],
        hashes: &[KeyHash],
        now: u32,
        results: &mut [Response],
        data: &mut Vec<u8>,
        group_bytes: &mut Vec<usize>,
    ) {
        self.in_search_group(hashes);
        // Data forwarding: a key with a waiting write is answered from the same-key table.
        if !self.pending.is_empty() && !fault::skip_forwarding() {
            for (j, &i) in self.group.iter().enumerate() {
                if let Some(w) = self
                    .pending
                    .get(reqs[i as usize].key, &self.group_hashes[j])
                {
                    self.group_locs[j] = w.newest.unwrap_or(NO_LOCATION);
                    self.stats.forwarded_reads += 1;
                }
            }
        }
        // KC + RD, in arrival order, with the items of later queries already loading.
        let t = std::time::Instant::now();
        for &loc in self.group_locs.iter().take(ITEM_PREFETCH_DISTANCE) {
            self.store.prefetch(loc);
        }
        for j in 0..self.group.len() {
            if let Some(&ahead) = self.group_locs.get(j + ITEM_PREFETCH_DISTANCE) {
                self.store.prefetch(ahead);
            }
            let i = self.group[j] as usize;
            let loc = self.group_locs[j];
            let h = self.group_hashes[j];
            results[i] = self.read_one(&reqs[i], &h, loc, now, data, group_bytes);
        }
        self.stats.task_kc_rd_ns += t.elapsed().as_nanos() as u64;
        self.group.clear();
    }

    /// IN: one batched index search for the whole read group.
    pub(super) fn in_search_group(&mut self, hashes: &[KeyHash]) {
        self.group_hashes.clear();
        self.group_hashes
            .extend(self.group.iter().map(|&i| hashes[i as usize]));
        self.group_locs.clear();
        self.group_locs.resize(self.group.len(), NO_LOCATION);
        let t = std::time::Instant::now();
        self.index.search(
            &self.store,
            &self.group_hashes,
            &mut self.group_locs,
            &mut self.dropped,
        );
        let ns = t.elapsed().as_nanos() as u64;
        self.timing.reads += self.group.len() as u64;
        self.timing.search_ns += ns;
        self.stats.task_in_ns += ns;
        self.free_dropped();
    }

    pub(super) fn read_one(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        loc: Location,
        now: u32,
        data: &mut Vec<u8>,
        group_bytes: &mut Vec<usize>,
    ) -> Response {
        let mut expired = false;
        if let Some(item) = self.store.get(loc) {
            if kc_key_matches(&item, req.key) {
                if !item.is_expired(now) {
                    if req.deferrable {
                        let g = req.group as usize;
                        if group_bytes.len() <= g {
                            group_bytes.resize(g + 1, 0);
                        }
                        if self
                            .budget
                            .defers(data.len(), group_bytes[g], item.value_len())
                        {
                            self.stats.deferred_reads += 1;
                            return Response::Deferred;
                        }
                        group_bytes[g] += item.value_len();
                    }
                    self.stats.get_hits += 1;
                    return self.rd_answer_hit(req, loc, now, data);
                }
                expired = true;
            } else {
                self.stats.key_mismatches += 1;
            }
        }
        if expired {
            self.unlink(req.key, h, loc);
            self.stats.expired_on_access += 1;
        }
        self.stats.get_misses += 1;
        Response::Miss
    }

    /// The live item for `key`: found in the same-key table or the index, key verified, not
    /// expired (an expired one is removed on the spot).
    pub(super) fn find_live(&mut self, key: &[u8], h: &KeyHash, now: u32) -> Option<Location> {
        let pre = self.pre.take().filter(|_| self.write_locs_valid);
        let loc = match (self.pending.get(key, h), pre) {
            (Some(w), _) => w.newest.unwrap_or(NO_LOCATION),
            (None, Some(loc)) => loc,
            (None, None) => {
                let t = self.sample_write.then(std::time::Instant::now);
                let loc = self.index.search_one(&self.store, h, &mut self.dropped);
                self.free_dropped();
                if let Some(t) = t {
                    self.stats.task_in_ns += t.elapsed().as_nanos() as u64 * WRITE_SAMPLE;
                }
                loc
            }
        };
        let item = self.store.get(loc)?;
        if !kc_key_matches(&item, key) {
            self.stats.key_mismatches += 1;
            return None;
        }
        if item.is_expired(now) {
            self.unlink(key, h, loc);
            self.stats.expired_on_access += 1;
            return None;
        }
        Some(loc)
    }
}
