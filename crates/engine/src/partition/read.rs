//! IN, KC and RD for reads: grouped, their bucket searches run as one batch, their items
//! prefetched a few reads ahead for the key compares, then their replies.

use super::*;
use crate::policy::Proc;
use hkv_store::{ChunkAt, HitHeader, Lookup};
use hkv_types::ReadStats;

impl Partition {
    pub(super) fn flush_reads(
        &mut self,
        reqs: &[Request<'_>],
        hashes: &[KeyHash],
        now: u32,
        results: &mut [Response],
        data: &mut Vec<u8>,
        groups: &mut Vec<GroupSpend>,
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
        // KC for the whole group, with the items of later queries already loading; then RD,
        // in arrival order, on lines now in cache. Two passes so each is timed on its own
        // (and placed on its own, where the device shares host memory: items.rs).
        let n = self.group.len();
        let weight = self.read_weight;
        let clock = || (weight > 0).then(std::time::Instant::now);
        let t = clock();
        let (mut kc_proc, mut rd_proc) = self.items_procs(n);
        if t.is_none() && kc_proc == Proc::Cpu && rd_proc == Proc::Cpu {
            self.kc_rd_group(reqs, now, results, data, groups);
            self.group.clear();
            self.group_sigs = [0; 4];
            return;
        }
        if kc_proc == Proc::Device && !self.kc_on_device(reqs, now) {
            kc_proc = Proc::Cpu;
        }
        if kc_proc == Proc::Cpu {
            self.kc_group(reqs, now);
        }
        let kc = clock();
        if let Some(t) = t {
            self.kc_timed(kc_proc, n, t);
        }
        if rd_proc == Proc::Device && !self.rd_on_device(kc_proc == Proc::Device) {
            rd_proc = Proc::Cpu;
        }
        // The device's copies, taken out for the loop (put back after: the buffers are kept).
        let (values, value_at) = match (&mut self.items_device, rd_proc) {
            (Some(d), Proc::Device) => (
                std::mem::take(&mut d.values),
                std::mem::take(&mut d.value_at),
            ),
            _ => (Vec::new(), Vec::new()),
        };
        // The group's lists, taken out for the loop (RD needs the rest of the partition).
        let group = std::mem::take(&mut self.group);
        let group_hashes = std::mem::take(&mut self.group_hashes);
        let locs = std::mem::take(&mut self.group_locs);
        let kcs = std::mem::take(&mut self.group_kc);
        let each = group.iter().zip(&group_hashes).zip(&locs).zip(&kcs);
        for (j, (((&i, h), &loc), &kc)) in each.enumerate() {
            let copied = items::ItemsDevice::value(&values, &value_at, j);
            let i = i as usize;
            let header = None;
            let at = i as u32;
            results[i] = self.rd_one(&reqs[i], at, h, loc, kc, header, now, data, groups, copied);
        }
        self.group = group;
        self.group_hashes = group_hashes;
        self.group_locs = locs;
        self.group_kc = kcs;
        if let Some(d) = &mut self.items_device {
            if rd_proc == Proc::Device {
                d.values = values;
                d.value_at = value_at;
            }
        }
        if let (Some(t), Some(kc)) = (t, kc) {
            self.rd_timed(kc_proc, rd_proc, n, kc);
            self.stats.task_kc_ns += (kc - t).as_nanos() as u64 * weight;
            self.stats.task_rd_ns += kc.elapsed().as_nanos() as u64 * weight;
        }
        self.group.clear();
        self.group_sigs = [0; 4];
    }

    /// IN: one batched index search for the whole read group.
    pub(super) fn in_search_group(&mut self, hashes: &[KeyHash]) {
        self.group_hashes.clear();
        self.group_hashes
            .extend(self.group.iter().map(|&i| hashes[i as usize]));
        self.group_locs.clear();
        self.group_locs.resize(self.group.len(), NO_LOCATION);
        let t = (self.read_weight > 0).then(std::time::Instant::now);
        self.index.search(
            &self.store,
            &self.group_hashes,
            &mut self.group_locs,
            &mut self.dropped,
        );
        self.timing.reads += self.group.len() as u64;
        if let Some(t) = t {
            let ns = t.elapsed().as_nanos() as u64;
            self.timing.timed_reads += self.group.len() as u64;
            self.timing.search_ns += ns;
            self.stats.task_in_ns += ns * self.read_weight;
        }
        self.free_dropped();
    }

    /// KC: what each read of the group found at its location (`group_kc`), with where the
    /// live ones lie, so RD needs no second slot lookup.
    fn kc_group(&mut self, reqs: &[Request<'_>], now: u32) {
        let Partition {
            group,
            group_locs,
            group_kc,
            store,
            stats,
            ..
        } = self;
        group_kc.clear();
        for &loc in group_locs.iter().take(ITEM_PREFETCH_DISTANCE) {
            store.prefetch(loc);
        }
        let ahead = group_locs.iter().skip(ITEM_PREFETCH_DISTANCE);
        let mut ahead = ahead.copied();
        for (&i, &loc) in group.iter().zip(group_locs.iter()) {
            if let Some(next) = ahead.next() {
                store.prefetch(next);
            }
            let found = store.lookup(loc, reqs[i as usize].key, now);
            group_kc.push(kc_of(found, &mut stats.key_mismatches));
        }
    }

    /// KC and RD of each read in one pass, where both run on the CPU and the group is not
    /// timed (timed groups take two passes, so each task has its own time): the header KC
    /// loads is the one RD answers from, and nothing is kept per read in between. Items are
    /// prefetched as in [`Partition::kc_group`].
    fn kc_rd_group(
        &mut self,
        reqs: &[Request<'_>],
        now: u32,
        results: &mut [Response],
        data: &mut Vec<u8>,
        groups: &mut Vec<GroupSpend>,
    ) {
        let group = std::mem::take(&mut self.group);
        let group_hashes = std::mem::take(&mut self.group_hashes);
        let locs = std::mem::take(&mut self.group_locs);
        for &loc in locs.iter().take(ITEM_PREFETCH_DISTANCE) {
            self.store.prefetch(loc);
        }
        let mut ahead = locs.iter().skip(ITEM_PREFETCH_DISTANCE).copied();
        for ((&i, h), &loc) in group.iter().zip(&group_hashes).zip(&locs) {
            if let Some(next) = ahead.next() {
                self.store.prefetch(next);
            }
            let req = &reqs[i as usize];
            let (found, header) = self.store.lookup_header(loc, req.key, now);
            let kc = kc_of(found, &mut self.stats.key_mismatches);
            let header = Some(header).filter(|_| kc.is_live());
            results[i as usize] = self.rd_one(req, i, h, loc, kc, header, now, data, groups, None);
        }
        self.group = group;
        self.group_hashes = group_hashes;
        self.group_locs = locs;
    }

    /// RD of the `j`th read of the group, from what KC found. `header`: the live item's
    /// header as KC read it right before this RD (one pass), or None to read it here (two
    /// passes: earlier reads of the group may have bumped the item since its KC).
    /// `copied`: the value the device's RD copied for it, if it did. `index`: the read's
    /// place in the batch.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn rd_one(
        &mut self,
        req: &Request<'_>,
        index: u32,
        h: &KeyHash,
        loc: Location,
        kc: Kc,
        header: Option<HitHeader>,
        now: u32,
        data: &mut Vec<u8>,
        groups: &mut Vec<GroupSpend>,
        copied: Option<&[u8]>,
    ) -> Response {
        let cut = |g: &GroupSpend| g.is_cut_at(index);
        if req.deferrable && groups.get(req.group as usize).is_some_and(cut) {
            // Its client resumes at an earlier deferred read: answering this one would copy
            // a value to be thrown away and count a get that will be asked again.
            self.stats.deferred_reads += 1;
            return Response::Deferred;
        }
        match kc {
            Kc::Live | Kc::LiveAt(_) => {
                // KC ran on the CPU and left where the item is (the device's KC does not).
                let at = match kc {
                    Kc::LiveAt(at) if copied.is_none() => Some(at),
                    _ => None,
                };
                let header = match header {
                    Some(h) => at.map(|_| h),
                    None => at.and_then(|at| self.store.header_at(at)),
                };
                if req.deferrable {
                    let value_len = match &header {
                        Some(h) => h.value_len as usize,
                        None => self.store.get(loc).map_or(0, |i| i.value_len()),
                    };
                    let batch_bytes = data.len() + self.pin_sink.batch_bytes();
                    let spend = group_of(groups, req);
                    if self.budget.defers(batch_bytes, spend.bytes, value_len) {
                        spend.defer_at(index);
                        self.stats.deferred_reads += 1;
                        return Response::Deferred;
                    }
                    spend.bytes += value_len;
                }
                self.count_get(req, true);
                let r = match (at, header) {
                    (Some(at), Some(header)) => {
                        self.rd_answer_hit_at(req, loc, at, &header, now, data)
                    }
                    _ => None,
                };
                let r = r.unwrap_or_else(|| self.rd_answer_hit_from(req, loc, now, data, copied));
                if req.meta.read_stats == ReadStats::Debug {
                    // `me` counts in no statistic, its class's `get_hits` included (memcached).
                    self.store.uncount_hit(loc);
                }
                return r;
            }
            Kc::Expired => {
                // Two reads of one expired key in a group: the first removes it.
                if self
                    .store
                    .get(loc)
                    .is_some_and(|item| kc_key_matches(&item, req.key))
                {
                    self.unlink(req.key, h, loc);
                    self.stats.expired_on_access += 1;
                }
            }
            Kc::Miss => {}
        }
        self.count_get(req, false);
        Response::Miss
    }

    /// A get's hit or miss in memcached's counters (`me` counts none).
    #[inline(always)]
    pub(super) fn count_get(&mut self, req: &Request<'_>, hit: bool) {
        if req.meta.read_stats == ReadStats::Debug {
            return;
        }
        if hit {
            self.stats.get_hits += 1;
        } else {
            self.stats.get_misses += 1;
        }
    }

    /// Takes back what this partition counted for reads the caller then deferred (rare:
    /// only a client whose reads passed its value budget in a batch).
    pub(crate) fn undo_reads(
        &mut self,
        u: &crate::route::ReadsUndone,
        reqs: &[Request<'_>],
        hashes: &[KeyHash],
    ) {
        let s = &mut self.stats;
        s.get_hits = s.get_hits.saturating_sub(u.hits);
        s.get_misses = s.get_misses.saturating_sub(u.misses);
        s.zero_copy_values = s.zero_copy_values.saturating_sub(u.pinned);
        s.deferred_reads += u.reads;
        for hit in &u.found {
            let i = hit.index as usize;
            let (key, h) = (reqs[i].key, &hashes[i]);
            let loc = match self.pending.get(key, h) {
                Some(w) => w.newest.unwrap_or(NO_LOCATION),
                None => self.index.search_one(&self.store, h, &mut self.dropped),
            };
            self.free_dropped();
            if self
                .store
                .get(loc)
                .is_some_and(|item| kc_key_matches(&item, key))
            {
                let fetched = hit.bits & hkv_types::hit::FETCHED != 0;
                let won = hit.bits & hkv_types::hit::WIN != 0;
                self.store.undo_hit(loc, fetched, hit.atime, won);
            }
        }
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

/// The share of the value budget of `req`'s client, grown to hold it.
#[inline(always)]
fn group_of<'g>(groups: &'g mut Vec<GroupSpend>, req: &Request<'_>) -> &'g mut GroupSpend {
    let g = req.group as usize;
    if groups.len() <= g {
        groups.resize(g + 1, GroupSpend::default());
    }
    &mut groups[g]
}

/// KC's verdict on what [`SlabStore::lookup`](hkv_store::SlabStore::lookup) found; a
/// signature collision is counted in `mismatches`.
#[inline(always)]
fn kc_of(found: Lookup, mismatches: &mut u64) -> Kc {
    match found {
        Lookup::Live(at) => Kc::LiveAt(at),
        Lookup::Expired => Kc::Expired,
        Lookup::Empty => Kc::Miss,
        Lookup::OtherKey => {
            *mismatches += 1;
            Kc::Miss
        }
    }
}

/// What KC found for one read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kc {
    /// No item there, or another key's (a signature collision).
    Miss,
    /// The key's item, expired: RD removes it and answers a miss.
    Expired,
    /// The key's live item (as the device's KC reports it).
    Live,
    /// The key's live item, and where its chunk lies (the CPU's KC).
    LiveAt(ChunkAt),
}

impl Kc {
    pub(super) fn is_live(&self) -> bool {
        matches!(self, Kc::Live | Kc::LiveAt(_))
    }
}

/// Where `h`'s signature falls in a read group's signature filter.
#[inline]
pub(super) fn sig_bit(h: &KeyHash) -> (usize, u64) {
    let b = h.sig as usize & 255;
    (b >> 6, 1u64 << (b & 63))
}
