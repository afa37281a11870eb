//! Values received straight into item memory, as memcached reads a body into the item it
//! allocated at the command line: a large value's chunks are taken when its command arrives,
//! filled as its bytes do, and made an item when the last byte is in, so a connection never
//! buffers a whole large body.
//!
//! Until then every chunk of a stage (the header and, for a chained value, its parts) has
//! status `CHAIN` with no owner: the state of a chained item being built, which CLOCK, page
//! moves and the expiry sweep already pass over, and which a warm restart frees. Each chunk
//! also carries the stage's token where a part never holds data (the CAS field), so a stale
//! handle can never write into chunks that have since gone to someone else.

use super::SlabStore;
use crate::item::*;
use crate::location::{decode, encode, Location, NO_LOCATION};
use crate::store::{Reclaim, StoreError};

/// A value being received into its chunks (see the module docs). Plain data: every use is
/// checked against the chunks, so a handle that outlived its stage does nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    pub loc: Location,
    pub token: u64,
    pub key_len: usize,
    pub value_len: usize,
}

impl SlabStore {
    /// Takes the chunks for `key` with a value of `value_len` bytes. Without `evict`, only
    /// from memory that is free now (free chunks, new pages, expired items): the caller asks
    /// so while little of the value has come, so that clients sending the line of a large
    /// value and then nothing cannot make live items go (a hostile probe: 100 clients each
    /// sent the line of a 1 MB SET and 70 KB of it, then stopped, and 48% of a full `-m 64`
    /// of honest items were evicted for memory that never got its data). With `evict`, as a
    /// store would take them. The key is written now; the value by
    /// [`SlabStore::fill_stage`]; nothing is visible before [`SlabStore::commit_stage`]. A
    /// refusal is not counted as out of memory: the store that follows is.
    pub fn stage(
        &mut self,
        key: &[u8],
        value_len: usize,
        now: u32,
        evict: bool,
        mut on_reclaim: impl FnMut(&Item<'_>, Location, Reclaim),
    ) -> Result<Stage, StoreError> {
        if key.len() > MAX_KEY_LEN {
            return Err(StoreError::KeyTooLong);
        }
        if value_len > self.max_value {
            return Err(StoreError::TooLarge);
        }
        if !evict
            && self
                .item_cap
                .is_some_and(|cap| self.stats.curr_items >= cap)
        {
            // The index takes no more items: this one's store must evict one.
            return Err(StoreError::OutOfMemory);
        }
        let counted = self.out_of_memory_counts();
        let allowed = self.evict && evict;
        let evict = std::mem::replace(&mut self.evict, allowed);
        let taken = match self.class_for(key.len(), value_len) {
            Some(c) => self
                .allocate(c, now, &mut on_reclaim)
                .map(|slot| (encode(c, slot), Vec::new()))
                .ok_or(StoreError::OutOfMemory),
            None => self.take_chained(key.len(), value_len, now, &mut on_reclaim),
        };
        self.evict = evict;
        let (loc, parts) = match taken {
            Ok(t) => t,
            Err(e) => {
                self.restore_out_of_memory_counts(counted);
                return Err(e);
            }
        };
        self.next_stage += 1;
        let token = self.next_stage;
        for &p in parts.iter().chain(std::iter::once(&loc)) {
            let (c, slot) = decode(p);
            let class = &mut self.classes[c];
            class.parts += 1;
            let chunk = class.chunk_mut(slot);
            chunk[OFF_STATUS] = CHAIN;
            wr32(chunk, OFF_OWNER, NO_LOCATION);
            chunk[OFF_CAS..OFF_CAS + 8].copy_from_slice(&token.to_le_bytes());
        }
        let (c, slot) = decode(loc);
        let chunk = self.classes[c].chunk_mut(slot);
        chunk[OFF_KEY_LEN] = key.len() as u8;
        chunk[HEADER_BYTES..HEADER_BYTES + key.len()].copy_from_slice(key);
        let mut at = HEADER_BYTES + key.len();
        for p in &parts {
            wr32(chunk, at, *p);
            at += 4;
        }
        Ok(Stage {
            loc,
            token,
            key_len: key.len(),
            value_len,
        })
    }

    fn out_of_memory_counts(&self) -> (u64, Vec<u64>) {
        let per_class = self.classes.iter().map(|k| k.counts.out_of_memory);
        (self.stats.out_of_memory, per_class.collect())
    }

    fn restore_out_of_memory_counts(&mut self, (total, per_class): (u64, Vec<u64>)) {
        self.stats.out_of_memory = total;
        for (k, n) in self.classes.iter_mut().zip(per_class) {
            k.counts.out_of_memory = n;
        }
    }

    /// Whether `loc` is a chunk of the stage with `token`.
    fn staged_chunk(&self, loc: Location, token: u64) -> bool {
        let (c, slot) = decode(loc);
        self.classes
            .get(c)
            .filter(|k| slot < k.slots())
            .is_some_and(|k| {
                let h = k.chunk(slot);
                h[OFF_STATUS] == CHAIN
                    && rd32(h, OFF_OWNER) == NO_LOCATION
                    && h[OFF_CAS..OFF_CAS + 8] == token.to_le_bytes()
            })
    }

    /// The parts of a live stage (empty for a flat value), or None if `st` is not one.
    fn stage_parts(&self, st: &Stage) -> Option<Vec<Location>> {
        if !self.staged_chunk(st.loc, st.token) {
            return None;
        }
        let (c, slot) = decode(st.loc);
        let header = self.classes[c].chunk(slot);
        if header[OFF_KEY_LEN] as usize != st.key_len {
            return None;
        }
        if self.class_for(st.key_len, st.value_len).is_some() {
            return (self.classes[c].info.chunk >= HEADER_BYTES + st.key_len + st.value_len)
                .then(Vec::new);
        }
        let n = st.value_len.div_ceil(self.part_cap().max(1));
        let table = header.get(HEADER_BYTES + st.key_len..HEADER_BYTES + st.key_len + 4 * n)?;
        let parts: Vec<Location> = table.chunks_exact(4).map(|b| rd32(b, 0)).collect();
        parts
            .iter()
            .all(|&p| self.staged_chunk(p, st.token))
            .then_some(parts)
    }

    /// Writes `bytes` at `offset` of a stage's value. False (nothing written) if the stage
    /// is not live or the bytes would pass the value's end.
    pub fn fill_stage(&mut self, st: &Stage, offset: usize, bytes: &[u8]) -> bool {
        if offset
            .checked_add(bytes.len())
            .is_none_or(|e| e > st.value_len)
        {
            return false;
        }
        let Some(parts) = self.stage_parts(st) else {
            return false;
        };
        if parts.is_empty() {
            let (c, slot) = decode(st.loc);
            let at = HEADER_BYTES + st.key_len + offset;
            self.classes[c].chunk_mut(slot)[at..at + bytes.len()].copy_from_slice(bytes);
            return true;
        }
        let cap = self.part_cap();
        let (mut i, mut off) = (offset / cap, offset % cap);
        let mut rest = bytes;
        while !rest.is_empty() {
            let (c, slot) = decode(parts[i]);
            let n = (cap - off).min(rest.len());
            let at = HEADER_BYTES + off;
            self.classes[c].chunk_mut(slot)[at..at + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            i += 1;
            off = 0;
        }
        true
    }

    /// Makes a stage (its value filled) the live item for `key`, as [`SlabStore::store`]
    /// would have stored it. `OutOfMemory` if the stage is gone (its chunks were taken back:
    /// the caller's memory was lost, as when a store fails).
    pub fn commit_stage(
        &mut self,
        st: &Stage,
        key: &[u8],
        flags: u32,
        raw_expiry: u32,
        now: u32,
    ) -> Result<(Location, u64), StoreError> {
        let (c, slot) = decode(st.loc);
        let parts = self
            .stage_parts(st)
            .filter(|_| {
                key.len() == st.key_len
                    && self.classes[c].chunk(slot)[HEADER_BYTES..HEADER_BYTES + key.len()] == *key
            })
            .ok_or(StoreError::OutOfMemory)?;
        let cas = self.take_cas();
        // The header stops being a part; the parts stay counted as parts.
        self.classes[c].parts -= 1;
        if parts.is_empty() {
            let chunk = self.classes[c].chunk_mut(slot);
            super::write_header(chunk, key, st.value_len, flags, raw_expiry, cas, now);
            self.count_new_item(c, slot, key.len(), st.value_len);
        } else {
            self.link_chained(
                st.loc,
                &parts,
                key,
                st.value_len,
                flags,
                raw_expiry,
                cas,
                now,
            );
        }
        Ok((st.loc, cas))
    }

    /// Gives a stage's chunks back (its command failed, or its connection closed before the
    /// value was in). False if it was not live (already committed or given back).
    pub fn release_stage(&mut self, st: &Stage) -> bool {
        let Some(parts) = self.stage_parts(st) else {
            return false;
        };
        for p in parts.into_iter().chain(std::iter::once(st.loc)) {
            self.release_part(p);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreConfig;
    use std::sync::Arc;

    fn store(mb: usize) -> SlabStore {
        let arena = Arc::new(hkv_mem::Arena::new(mb << 20).unwrap());
        SlabStore::new(
            arena,
            &StoreConfig {
                max_value: 8 << 20,
                ..StoreConfig::default()
            },
        )
    }

    fn value(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    fn read(s: &SlabStore, loc: Location) -> Vec<u8> {
        let item = s.get(loc).unwrap();
        let mut out = Vec::new();
        s.copy_value(&item, &mut out);
        out
    }

    #[test]
    fn a_stage_filled_in_pieces_commits_to_the_value_sent() {
        for n in [0, 1, 5000, 1 << 20, (2 << 20) + 12345] {
            let mut s = store(16);
            let v = value(n);
            let st = s.stage(b"key", n, 0, false, |_, _, _| {}).unwrap();
            for (i, piece) in v.chunks(7919).enumerate() {
                assert!(s.fill_stage(&st, i * 7919, piece));
            }
            assert!(!s.fill_stage(&st, n, b"x"), "past the end");
            assert_eq!(s.stats().curr_items, 0, "nothing visible before commit");
            let (loc, _) = s.commit_stage(&st, b"key", 5, 0, 0).unwrap();
            assert_eq!(read(&s, loc), v, "{n} bytes");
            assert_eq!(s.get(loc).unwrap().flags(), 5);
            assert_eq!(s.stats().curr_items, 1);
            assert!(
                !s.release_stage(&st),
                "a committed stage is an item, not a stage"
            );
            assert!(!s.fill_stage(&st, 0, b""), "nor can it be written as one");
            assert!(s.free(loc));
            let parts: u64 = s.class_reports().map(|c| c.parts).sum();
            assert_eq!(parts, 0, "{n} bytes: every part freed with its item");
        }
    }

    #[test]
    fn a_released_stage_gives_every_chunk_back() {
        let mut s = store(16);
        let st = s.stage(b"k", 3 << 20, 0, false, |_, _, _| {}).unwrap();
        let used = |s: &SlabStore| s.class_reports().map(|c| c.parts + c.items).sum::<u64>();
        assert_eq!(used(&s), 5, "a header, three full parts and a tail");
        assert!(s.release_stage(&st));
        assert_eq!(used(&s), 0);
        assert!(!s.release_stage(&st));
        assert_eq!(
            s.commit_stage(&st, b"k", 0, 0, 0),
            Err(StoreError::OutOfMemory)
        );
    }

    #[test]
    fn staged_chunks_are_never_evicted_for_other_items() {
        // A 6 MiB store: a 2.5 MiB stage, then enough small items to fill memory twice.
        let mut s = store(6);
        let v = value((5 << 20) / 2);
        let st = s.stage(b"big", v.len(), 0, false, |_, _, _| {}).unwrap();
        assert!(s.fill_stage(&st, 0, &v));
        let mut stored = 0;
        for i in 0..20_000u32 {
            let key = format!("small{i}");
            if s.store(key.as_bytes(), &[&[1u8; 300]], 0, 0, 0, |_, _, _| {})
                .is_ok()
            {
                stored += 1;
            }
        }
        assert!(stored > 0);
        let (loc, _) = s.commit_stage(&st, b"big", 0, 0, 0).unwrap();
        assert_eq!(read(&s, loc), v);
    }

    /// A hostile probe: clients sending a large value's line and part of it, then stopping,
    /// had a full store evict live items for memory their values never came to fill.
    #[test]
    fn regression_a_stage_in_a_full_store_evicts_only_when_asked_and_counts_no_refusal() {
        let mut s = store(4);
        // Items that expire at 5, until the store evicts.
        let mut stored = 0u32;
        while stored < 100_000
            && s.store(
                format!("k{stored}").as_bytes(),
                &[&[1u8; 300]],
                0,
                5,
                0,
                |_, _, _| {},
            )
            .is_ok()
        {
            stored += 1;
            if s.stats().evictions > 0 {
                break;
            }
        }
        let before = s.stats();
        assert!(before.evictions > 0, "the store is full");
        for n in [300, 70_000, 2 << 20] {
            let mut reclaimed = 0;
            let st = s.stage(b"big", n, 0, false, |_, _, _| reclaimed += 1);
            assert_eq!(st, Err(StoreError::OutOfMemory), "{n} bytes");
            assert_eq!(reclaimed, 0, "{n} bytes: nothing taken for the stage");
        }
        let after = s.stats();
        assert_eq!(after.evictions, before.evictions);
        assert_eq!(after.curr_items, before.curr_items);
        assert_eq!(after.out_of_memory, before.out_of_memory);
        let refused: u64 = s.class_reports().map(|c| c.counts.out_of_memory).sum();
        assert_eq!(refused, 0, "a refused stage is no refused store");
        // Once they expire (at 5), the items' memory is free memory: a stage takes it.
        let mut expired = 0;
        let st = s.stage(b"new", 300, 10, false, |_, _, k| {
            expired += u32::from(k == Reclaim::Expired)
        });
        assert!(st.is_ok());
        assert!(expired >= 1);
        // Asked to evict (once enough of the value has come), a stage takes memory as a
        // store would.
        let items = s.stats().curr_items;
        assert!(s.stage(b"big", 70_000, 0, true, |_, _, _| {}).is_ok());
        assert!(s.stats().curr_items < items, "live items went for it");
    }

    #[test]
    fn a_stage_is_committed_only_under_its_own_key() {
        let mut s = store(4);
        let st = s.stage(b"abc", 10, 0, false, |_, _, _| {}).unwrap();
        assert!(s.commit_stage(&st, b"abd", 0, 0, 0).is_err());
        assert!(s.commit_stage(&st, b"abc", 0, 0, 0).is_ok());
    }

    #[test]
    fn a_stale_handle_does_not_write_into_a_later_stage() {
        let mut s = store(4);
        let first = s.stage(b"a", 100, 0, false, |_, _, _| {}).unwrap();
        assert!(s.release_stage(&first));
        let second = s.stage(b"a", 100, 0, false, |_, _, _| {}).unwrap();
        assert_eq!(first.loc, second.loc, "the chunk is reused");
        assert!(!s.fill_stage(&first, 0, b"stale"));
        assert!(s.fill_stage(&second, 0, &[b'x'; 100]));
        let (loc, _) = s.commit_stage(&second, b"a", 0, 0, 0).unwrap();
        assert_eq!(read(&s, loc), vec![b'x'; 100]);
    }

    #[test]
    fn flush_all_keeps_the_stages_in_progress() {
        let mut s = store(16);
        let v = value(3 << 20);
        let st = s.stage(b"big", v.len(), 0, false, |_, _, _| {}).unwrap();
        let small = s.stage(b"small", 10, 0, false, |_, _, _| {}).unwrap();
        s.store(b"other", &[b"x"], 0, 0, 0, |_, _, _| {}).unwrap();
        s.clear();
        assert_eq!(s.stats().curr_items, 0);
        // Memory handed out after the flush must not be the stages' chunks.
        for i in 0..2000u32 {
            let key = format!("after{i}");
            s.store(key.as_bytes(), &[&[2u8; 5000]], 0, 0, 0, |_, _, _| {})
                .unwrap();
        }
        assert!(s.fill_stage(&st, 0, &v));
        assert!(s.fill_stage(&small, 0, b"0123456789"));
        let (loc, _) = s.commit_stage(&st, b"big", 0, 0, 0).unwrap();
        assert_eq!(read(&s, loc), v);
        let (loc, _) = s.commit_stage(&small, b"small", 0, 0, 0).unwrap();
        assert_eq!(read(&s, loc), b"0123456789");
    }
}
