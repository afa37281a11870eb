//! The same-key table (KV-Direct's reservation station, Mega-KV's delayed writes).
//!
//! A write does its memory work (MM) at once but its index insert or delete waits here until
//! the partition applies the table as one batch, every n batches (n x C). Until then this
//! table, not the index, is the truth for its keys: reads and writes look here first, so a
//! client that pipelines SET then GET sees its SET, and DELETE then GET misses. Later writes
//! to a waiting key merge into its entry; only the newest version is ever indexed.
//!
//! Per key the table holds the newest version (or nothing: deleted or evicted) and the version
//! the index still points to. That indexed version has been retired in the store (unreadable,
//! uncounted, but its chunk not reused), so the index never points at a chunk holding another
//! item; it is freed once the index has let go of it.
//!
//! An entry may also be *resident*: its newest version is the one the index already holds,
//! put here by an in-place atomic (incr/decr, a vector update) so that the next operations on
//! the same hot key, in this batch and in later ones until the table is applied, find it
//! here instead of searching the index (a device round trip on OpenCL): KV-Direct's data
//! forwarding in its reservation station. A resident entry needs no index work when applied.

use hashbrown::HashTable;
use hkv_index::{KeyHash, Location};

/// What is waiting for one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Waiting {
    pub hash: KeyHash,
    /// The version reads must see; `None`: the key has no live item.
    pub newest: Option<Location>,
    /// The retired version the index holds for this key, if any.
    pub indexed: Option<Location>,
    /// `newest` is what the index holds already (see the module notes); `indexed` is `None`.
    pub resident: bool,
    /// Where the key's bytes are in the table's key buffer.
    key_at: u32,
    key_len: u8,
}

impl Waiting {
    pub fn new(hash: KeyHash, newest: Option<Location>, indexed: Option<Location>) -> Waiting {
        Waiting {
            hash,
            newest,
            indexed,
            resident: false,
            key_at: 0,
            key_len: 0,
        }
    }

    /// An entry for a live version the index already holds.
    pub fn resident(hash: KeyHash, loc: Location) -> Waiting {
        Waiting {
            resident: true,
            ..Waiting::new(hash, Some(loc), None)
        }
    }
}

/// The key's 64-bit hash, rebuilt from the index's split of it (no second pass over the key).
#[inline(always)]
fn full(h: &KeyHash) -> u64 {
    ((h.sig as u64) << 32) | h.lo as u64
}

/// Entries in arrival order (so the index sees them applied in the order they were written:
/// where two keys compete for one index slot, the later write wins, as without the delay).
/// Keys are copied back to back into one buffer, so an entry costs no allocation of its own.
#[derive(Default)]
pub(crate) struct SameKeyTable {
    slots: HashTable<u32>,
    entries: Vec<Waiting>,
    keys: Vec<u8>,
}

impl SameKeyTable {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[inline]
    fn find(&self, key: &[u8], h: &KeyHash) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let (entries, keys) = (&self.entries, &self.keys);
        self.slots
            .find(full(h), |&i| {
                let w = &entries[i as usize];
                w.hash == *h
                    && &keys[w.key_at as usize..w.key_at as usize + w.key_len as usize] == key
            })
            .map(|&i| i as usize)
    }

    /// The waiting entry for `key` (whose hash is `h`), if it has one.
    #[inline]
    pub fn get(&self, key: &[u8], h: &KeyHash) -> Option<&Waiting> {
        self.find(key, h).map(|i| &self.entries[i])
    }

    #[inline]
    pub fn get_mut(&mut self, key: &[u8], h: &KeyHash) -> Option<&mut Waiting> {
        self.find(key, h).map(|i| &mut self.entries[i])
    }

    /// Adds an entry for a key that has none (keys are at most 250 bytes).
    pub fn insert(&mut self, key: &[u8], mut w: Waiting) {
        debug_assert!(self.find(key, &w.hash).is_none());
        w.key_at = self.keys.len() as u32;
        w.key_len = key.len() as u8;
        self.keys.extend_from_slice(key);
        let i = self.entries.len() as u32;
        let entries = &self.entries;
        self.slots
            .insert_unique(full(&w.hash), i, |&j| full(&entries[j as usize].hash));
        self.entries.push(w);
    }

    /// Empties the table into `out`, oldest first (for applying it to the index).
    pub fn drain_into(&mut self, out: &mut Vec<Waiting>) {
        self.slots.clear();
        self.keys.clear();
        out.append(&mut self.entries);
    }

    pub fn clear(&mut self) {
        self.slots.clear();
        self.keys.clear();
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hkv_index::hash_key;

    #[test]
    fn entries_are_found_by_the_whole_key() {
        let mut t = SameKeyTable::default();
        let (ha, hb) = (hash_key(b"a"), hash_key(b"b"));
        assert!(t.get(b"a", &ha).is_none());
        t.insert(b"a", Waiting::new(ha, Some(7), None));
        assert_eq!(t.get(b"a", &ha).map(|w| w.newest), Some(Some(7)));
        // Same hash, other key (as after a hash collision): not found.
        assert!(t.get(b"x", &ha).is_none());
        assert!(t.get(b"b", &hb).is_none());
        t.get_mut(b"a", &ha).unwrap().newest = None;
        t.insert(b"b", Waiting::new(hb, Some(9), Some(3)));
        // Many keys: the table grows and finds each by its own bytes.
        let keys: Vec<Vec<u8>> = (0..1000).map(|i| format!("key-{i}").into_bytes()).collect();
        for (i, k) in keys.iter().enumerate() {
            t.insert(k, Waiting::new(hash_key(k), Some(100 + i as u32), None));
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(t.get(k, &hash_key(k)).unwrap().newest, Some(100 + i as u32));
        }
        assert_eq!(t.len(), 1002);
        let mut out = Vec::new();
        t.drain_into(&mut out);
        assert!(t.is_empty() && t.get(b"a", &ha).is_none());
        let newest: Vec<_> = out.iter().take(2).map(|w| w.newest).collect();
        assert_eq!(newest, [None, Some(9)], "drained oldest first");
        assert_eq!(out.len(), 1002);
    }
}
