//! The item header, at the start of every chunk:
//!
//! ```text
//! byte  0      1       2      3      4..8       8..12   12..16   16..24  24..28  28..32  32..
//!     status key_len  bits  layout value_len   flags   expiry    cas    atime   ref    key, value
//! ```
//! `bits` holds the meta protocol's per-item state ([`FETCHED`], [`STALE`], [`WIN_SENT`]);
//! `atime` is the Unix time of the last access that bumped the item (meta `l`, `me la=`);
//! `ref` (byte 28; 29..32 unused) is CLOCK's reference bit, beside what a lookup loads.
//! A free chunk has status [`FREE`] and keeps the next free slot of its class in bytes 4..8.
//! Fields are little-endian and unaligned-safe (read through byte slices).
//!
//! A value too large for the largest chunk is *chained* (memcached's chunked items): the
//! header's `layout` is [`LAYOUT_CHAINED`], and after the key, instead of the value, comes
//! the table of its parts' locations (4 bytes each). Each part is a chunk with status
//! [`CHAIN`], its owner's location in bytes 4..8, and its share of the value from byte 32:
//! full parts in the largest class, the tail in the class that fits it.

pub const HEADER_BYTES: usize = 32;

/// An item's size in the `bytes` and `mem_requested` stats: header, key and value, as
/// memcached counts `ITEM_ntotal` (so `bytes / limit_maxbytes` tells how full memory is; key
/// and value alone read a fifth of that for small items).
pub const fn stored_bytes(key_len: usize, value_len: usize) -> u64 {
    (HEADER_BYTES + key_len + value_len) as u64
}
/// memcached's limit; the header stores the key length in one byte.
pub const MAX_KEY_LEN: usize = 250;

pub(crate) const FREE: u8 = 0;
pub(crate) const IN_USE: u8 = 0xA5;
/// Replaced or deleted, but an index entry may still point here until the engine applies its
/// delayed index writes: not readable, not counted, not evictable, and not reused until freed.
pub(crate) const RETIRED: u8 = 0x5A;

pub(crate) const OFF_STATUS: usize = 0;
pub(crate) const OFF_KEY_LEN: usize = 1;
pub(crate) const OFF_VALUE_LEN: usize = 4;
pub(crate) const OFF_NEXT_FREE: usize = 4;
pub(crate) const OFF_FLAGS: usize = 8;
pub(crate) const OFF_EXPIRY: usize = 12;
pub(crate) const OFF_CAS: usize = 16;
pub(crate) const OFF_BITS: usize = 2;
pub(crate) const OFF_ATIME: usize = 24;
pub(crate) const OFF_LAYOUT: usize = 3;
/// CLOCK's reference bit (0 or 1).
pub(crate) const OFF_REFERENCED: usize = 28;
/// `layout`: the value follows the key in this chunk.
pub(crate) const LAYOUT_FLAT: u8 = 0;
/// `layout`: the key is followed by the table of the value's parts.
pub(crate) const LAYOUT_CHAINED: u8 = 1;
/// Status of a chunk holding part of a chained value.
pub(crate) const CHAIN: u8 = 0x3C;
/// In a part: the location of the header that owns it (`NO_LOCATION` while it is built).
pub(crate) const OFF_OWNER: usize = 4;

/// Read at least once since it was stored (memcached's ITEM_FETCHED, meta `h`).
pub const FETCHED: u8 = 1;
/// Invalidated by `md I` or a stale `ms I` (meta `X`): served, but marked for recaching.
pub const STALE: u8 = 2;
/// A client has been handed the recache token (meta `W`); later ones see `Z`.
pub const WIN_SENT: u8 = 4;
/// Stored with a base64 key (meta `ms b`): meta `k` returns the key encoded.
pub const BINARY_KEY: u8 = 8;

/// The header layout as `-D NAME=value` pairs, for device kernels that read items in place
/// (the index's KC and RD kernels): the store owns the layout, the kernels take it from here.
pub fn device_layout() -> Vec<(&'static str, u32)> {
    vec![
        ("HEADER_BYTES", HEADER_BYTES as u32),
        ("OFF_STATUS", OFF_STATUS as u32),
        ("OFF_KEY_LEN", OFF_KEY_LEN as u32),
        ("OFF_VALUE_LEN", OFF_VALUE_LEN as u32),
        ("OFF_EXPIRY", OFF_EXPIRY as u32),
        ("OFF_LAYOUT", OFF_LAYOUT as u32),
        ("IN_USE", u32::from(IN_USE)),
        ("LAYOUT_FLAT", u32::from(LAYOUT_FLAT)),
    ]
}

#[inline(always)]
pub(crate) fn rd32(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(w)
}

#[inline(always)]
pub(crate) fn wr32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// A live item, borrowed from its chunk.
#[derive(Clone, Copy, Debug)]
pub struct Item<'a> {
    chunk: &'a [u8],
}

impl<'a> Item<'a> {
    /// `chunk` must start with an in-use header whose lengths fit the chunk (the store only
    /// builds `Item`s after checking both).
    pub(crate) fn new(chunk: &'a [u8]) -> Item<'a> {
        Item { chunk }
    }

    /// The header's bytes: one bounds check for all of its fields.
    #[inline(always)]
    fn head(&self) -> &'a [u8; HEADER_BYTES] {
        let head: Option<&[u8; HEADER_BYTES]> = self.chunk.first_chunk();
        head.expect("a chunk starts with its header")
    }

    #[inline]
    pub fn key_len(&self) -> usize {
        self.head()[OFF_KEY_LEN] as usize
    }

    #[inline]
    pub fn value_len(&self) -> usize {
        rd32(self.head(), OFF_VALUE_LEN) as usize
    }

    #[inline]
    pub fn key(&self) -> &'a [u8] {
        &self.chunk[HEADER_BYTES..HEADER_BYTES + self.key_len()]
    }

    /// Whether this item's key is `key`. Every lookup ends here; keys up to 16 bytes (the
    /// common memcached key) are compared as two overlapping words instead of through a
    /// `memcmp` call, which cost a tenth of the GET path.
    #[inline(always)]
    pub fn key_is(&self, key: &[u8]) -> bool {
        let n = key.len();
        if self.key_len() != n {
            return false;
        }
        let mine = &self.chunk[HEADER_BYTES..HEADER_BYTES + n];
        match n {
            8..=16 => word8(mine, 0) == word8(key, 0) && word8(mine, n - 8) == word8(key, n - 8),
            4..=7 => word4(mine, 0) == word4(key, 0) && word4(mine, n - 4) == word4(key, n - 4),
            _ => mine == key,
        }
    }

    /// Whether the value is stored in parts (read it with `SlabStore::value_parts`).
    #[inline]
    pub fn is_chained(&self) -> bool {
        self.head()[OFF_LAYOUT] == LAYOUT_CHAINED
    }

    /// The value, when it lies in this chunk (None for a chained item: see
    /// `SlabStore::value_parts` and `SlabStore::copy_value`, which read both kinds).
    #[inline]
    pub fn flat_value(&self) -> Option<&'a [u8]> {
        if self.is_chained() {
            return None;
        }
        let start = HEADER_BYTES + self.key_len();
        self.chunk.get(start..start + self.value_len())
    }

    /// A chained item's table of part locations.
    pub(crate) fn part_table(&self) -> &'a [u8] {
        let start = HEADER_BYTES + self.key_len();
        let n = (self.chunk.len() - start) / 4;
        &self.chunk[start..start + n * 4]
    }

    #[inline]
    pub fn flags(&self) -> u32 {
        rd32(self.head(), OFF_FLAGS)
    }

    /// Raw expiry: 0 never, else a Unix time.
    #[inline]
    pub fn expiry(&self) -> u32 {
        rd32(self.head(), OFF_EXPIRY)
    }

    #[inline]
    pub fn cas(&self) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.head()[OFF_CAS..OFF_CAS + 8]);
        u64::from_le_bytes(w)
    }

    /// Meta state bits: [`FETCHED`], [`STALE`], [`WIN_SENT`].
    #[inline]
    pub fn bits(&self) -> u8 {
        self.head()[OFF_BITS]
    }

    /// Unix time of the last bumping access (or of the store).
    #[inline]
    pub fn atime(&self) -> u32 {
        rd32(self.head(), OFF_ATIME)
    }

    #[inline]
    pub fn is_expired(&self, now: u32) -> bool {
        crate::expiry::is_expired(self.expiry(), now)
    }
}

#[inline(always)]
fn word8(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(w)
}

#[inline(always)]
fn word4(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chunk_with_key(key: &[u8]) -> Vec<u8> {
        let mut chunk = vec![0u8; HEADER_BYTES + key.len()];
        chunk[OFF_KEY_LEN] = key.len() as u8;
        chunk[HEADER_BYTES..].copy_from_slice(key);
        chunk
    }

    proptest! {
        /// The word compare agrees with byte equality for every length, including keys
        /// that differ only in their last or first byte (the words overlap in the middle).
        #[test]
        fn key_is_matches_slice_equality(
            mine in proptest::collection::vec(any::<u8>(), 0..40),
            other in proptest::collection::vec(any::<u8>(), 0..40),
            flip in any::<prop::sample::Index>(),
        ) {
            let chunk = chunk_with_key(&mine);
            let item = Item::new(&chunk);
            prop_assert!(item.key_is(&mine));
            prop_assert_eq!(item.key_is(&other), mine == other);
            if !mine.is_empty() {
                let mut near = mine.clone();
                near[flip.index(mine.len())] ^= 1;
                prop_assert!(!item.key_is(&near));
            }
        }
    }
}
