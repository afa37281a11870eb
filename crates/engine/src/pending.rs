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

use hashbrown::HashMap;
use hkv_index::{KeyHash, Location};

/// What is waiting for one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Waiting {
    pub hash: KeyHash,
    /// The version reads must see; `None`: the key has no live item.
    pub newest: Option<Location>,
    /// The retired version the index holds for this key, if any.
    pub indexed: Option<Location>,
}

/// Entries in arrival order (so the index sees them applied in the order they were written:
/// where two keys compete for one index slot, the later write wins, as without the delay).
#[derive(Default)]
pub(crate) struct SameKeyTable {
    slots: HashMap<Box<[u8]>, u32>,
    entries: Vec<Waiting>,
}

impl SameKeyTable {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The waiting entry for `key`, if it has one.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<&Waiting> {
        if self.entries.is_empty() {
            return None;
        }
        self.slots.get(key).map(|&i| &self.entries[i as usize])
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Waiting> {
        if self.entries.is_empty() {
            return None;
        }
        self.slots.get(key).map(|&i| &mut self.entries[i as usize])
    }

    /// Adds an entry for a key that has none.
    pub fn insert(&mut self, key: &[u8], w: Waiting) {
        debug_assert!(self.get(key).is_none());
        self.slots.insert(key.into(), self.entries.len() as u32);
        self.entries.push(w);
    }

    /// Empties the table into `out`, oldest first (for applying it to the index).
    pub fn drain_into(&mut self, out: &mut Vec<Waiting>) {
        self.slots.clear();
        out.append(&mut self.entries);
    }

    pub fn clear(&mut self) {
        self.slots.clear();
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
        assert!(t.get(b"a").is_none());
        let w = Waiting {
            hash: hash_key(b"a"),
            newest: Some(7),
            indexed: None,
        };
        t.insert(b"a", w);
        assert_eq!(t.get(b"a"), Some(&w));
        assert!(t.get(b"ab").is_none() && t.get(b"").is_none());
        t.get_mut(b"a").unwrap().newest = None;
        t.insert(
            b"b",
            Waiting {
                newest: Some(9),
                ..w
            },
        );
        let mut out = Vec::new();
        t.drain_into(&mut out);
        assert!(t.is_empty() && t.get(b"a").is_none());
        let newest: Vec<_> = out.iter().map(|w| w.newest).collect();
        assert_eq!(newest, [None, Some(9)], "drained oldest first");
    }
}
