//! A new version of a key written over the live one, in its own chunk, when it fits the same
//! class: no allocation, no free, and no index write (the location does not change). The
//! write path's common case, an overwrite of a value of the same size, costs what a read does
//! plus the value's bytes, where a new chunk costs an allocation, a retired version and two
//! index writes (MICA and KV-Direct update in place the same way; hkv's incr/decr already did).

use super::SlabStore;
use crate::item::*;
use crate::location::{decode, Location};

impl SlabStore {
    /// Stores `key`'s new value (the concatenation of `value_parts`) over the live item at
    /// `loc`, as a new item would be written: new CAS, flags and expiry, access time `now`,
    /// meta state cleared, referenced for CLOCK, counted as a stored item. Returns the new
    /// CAS, or None (nothing changed) when the item is not live, is chained, holds another
    /// key, is pinned by a send still reading it, or the new value needs another class.
    pub fn overwrite(
        &mut self,
        loc: Location,
        key: &[u8],
        value_parts: &[&[u8]],
        flags: u32,
        raw_expiry: u32,
        now: u32,
    ) -> Option<u64> {
        let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
        if value_len > self.max_value || self.is_pinned(loc) {
            return None;
        }
        let (c, slot) = decode(loc);
        if self.class_for(key.len(), value_len) != Some(c) {
            return None;
        }
        let old_payload = {
            let item = self.get(loc)?;
            if item.flat_value().is_none() || !item.key_is(key) {
                return None;
            }
            key.len() + item.value_len()
        };
        let cas = self.take_cas();
        let class = &mut self.classes[c];
        let chunk = class.chunk_mut(slot);
        chunk[OFF_BITS] = 0;
        wr32(chunk, OFF_ATIME, now);
        wr32(chunk, OFF_VALUE_LEN, value_len as u32);
        wr32(chunk, OFF_FLAGS, flags);
        wr32(chunk, OFF_EXPIRY, raw_expiry);
        chunk[OFF_CAS..OFF_CAS + 8].copy_from_slice(&cas.to_le_bytes());
        let mut at = HEADER_BYTES + key.len();
        for part in value_parts {
            chunk[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        // As a new item enters CLOCK: referenced, so a just-acknowledged write is never the
        // next victim.
        class.set_referenced(slot, true);
        class.recent.push(slot);
        let payload = (key.len() + value_len) as u64;
        class.counts.sets += 1;
        class.counts.bytes = class.counts.bytes - old_payload as u64 + payload;
        self.stats.total_items += 1;
        self.stats.bytes = self.stats.bytes - old_payload as u64 + payload;
        Some(cas)
    }
}
