//! IN for a batch's writes, as one search before they run: their buckets loaded with many
//! misses in flight, as a read group's are, and their items known ahead so they can be
//! prefetched (`Partition::run`), instead of one dependent search per write.

use super::*;

impl Partition {
    /// Searches the index once for every write of the batch (one device launch instead of
    /// one per write, on a device). What it found for a key stays usable as long as the
    /// index entry of that key does not change:
    /// - with delayed writes, only applying the same-key table or a rebuild changes the
    ///   index (both clear `write_locs_valid`), and a key written earlier in the batch is
    ///   found in the table before this is consulted;
    /// - with index writes made at once (the CPU engine at C = 0), each one marks its key's
    ///   signature ([`Partition::note_index_write`]), and a later write of that signature
    ///   searches again ([`Partition::pre_searched`]).
    ///
    /// A location whose item was evicted or freed meanwhile fails the key and liveness
    /// checks, as an evicted item should: only the key's own index writes (marked) could
    /// have put a newer version elsewhere.
    pub(super) fn in_search_writes(
        &mut self,
        reqs: &[Request<'_>],
        hashes: &[KeyHash],
        order: &[u32],
    ) {
        self.write_locs_valid = false;
        self.written_sigs = [0; 4];
        let mut hs = std::mem::take(&mut self.write_hashes);
        let mut owner = std::mem::take(&mut self.write_owner);
        let mut found = std::mem::take(&mut self.write_found);
        hs.clear();
        owner.clear();
        let waiting = !self.pending.is_empty();
        self.writes_left = 0;
        for &i in order {
            let req = &reqs[i as usize];
            if req.is_read() {
                continue;
            }
            self.writes_left += 1;
            if !(waiting && self.pending.get(req.key, &hashes[i as usize]).is_some()) {
                hs.push(hashes[i as usize]);
                owner.push(i);
            }
        }
        if hs.len() >= 2 {
            let t = (self.read_weight > 0).then(std::time::Instant::now);
            found.clear();
            found.resize(hs.len(), NO_LOCATION);
            let rebuilds = self.index.rebuilds;
            self.index
                .search(&self.store, &hs, &mut found, &mut self.dropped);
            self.free_dropped();
            if let Some(t) = t {
                let ns = t.elapsed().as_nanos() as u64;
                self.timing.write_ns += ns;
                self.stats.task_in_ns += ns * self.read_weight;
            }
            if self.index.rebuilds == rebuilds {
                self.write_locs.clear();
                self.write_locs.resize(reqs.len(), None);
                for (k, &i) in owner.iter().enumerate() {
                    self.write_locs[i as usize] = Some(found[k]);
                }
                self.write_locs_valid = true;
            }
        }
        self.write_hashes = hs;
        self.write_owner = owner;
        self.write_found = found;
    }

    /// What the batch's write search found for request `i` (key hash `h`), while it still
    /// holds: None when there was no search, or when the key's index entry changed since.
    #[inline]
    pub(super) fn pre_searched(&self, i: usize, h: &KeyHash) -> Option<Location> {
        if !self.write_locs_valid {
            return None;
        }
        let (w, bit) = read::sig_bit(h);
        if self.written_sigs[w] & bit != 0 {
            return None;
        }
        self.write_locs.get(i).copied().flatten()
    }

    /// The index entry of `h`'s key was just written (an insert, replace or delete made at
    /// once): what the batch's search found for it no longer holds.
    #[inline]
    pub(super) fn note_index_write(&mut self, h: &KeyHash) {
        let (w, bit) = read::sig_bit(h);
        self.written_sigs[w] |= bit;
    }

    /// Writes run one at a time, so they are software-pipelined from `run`, at the request
    /// in `order` position `pos`. With the batch's writes searched up front their buckets are
    /// loaded and their items known: the item of the write 2 x WRITE_AHEAD places on is
    /// fetched (measured: 10% faster YCSB-A than WRITE_AHEAD places, 4 x slower). Otherwise
    /// the bucket of the write 2 x WRITE_AHEAD places on is fetched, and WRITE_AHEAD places
    /// on the item it will replace (found in that bucket by then) or, for a new key, its
    /// alternate bucket, which its search and insert read too. Reads prefetch in their groups.
    #[inline(always)]
    pub(super) fn prefetch_writes_ahead(
        &self,
        reqs: &[Request<'_>],
        hashes: &[KeyHash],
        order: &[u32],
        pos: usize,
    ) {
        if self.write_locs_valid {
            if let Some(&near) = order.get(pos + 2 * WRITE_AHEAD) {
                if let Some(Some(loc)) = self.write_locs.get(near as usize) {
                    self.store.prefetch(*loc);
                }
            }
            return;
        }
        if let Some(&far) = order.get(pos + 2 * WRITE_AHEAD) {
            if !reqs[far as usize].is_read() {
                self.index.cpu().prefetch(&hashes[far as usize]);
            }
        }
        if let Some(&near) = order.get(pos + WRITE_AHEAD) {
            if !reqs[near as usize].is_read() {
                let h = &hashes[near as usize];
                match self.index.cpu().peek_primary(h) {
                    Some(loc) => self.store.prefetch(loc),
                    None => self.index.cpu().prefetch_alternate(h),
                }
            }
        }
    }
}
