//! Slab classes: chunk sizes growing by a factor, like memcached's `-f`.

use crate::item::HEADER_BYTES;
use crate::location::{MAX_CLASSES, MAX_SLOTS_PER_CLASS};

/// Smallest chunk: a header and 8 bytes of key and value (the papers' K8 set needs 16).
pub const MIN_CHUNK: usize = HEADER_BYTES + 8;

/// Chunk sizes from [`MIN_CHUNK`] up to one chunk per page, each `factor` times the last,
/// rounded up to 8 bytes. The last class always holds the largest item a page can take.
pub fn chunk_sizes(factor: f64, page_size: usize) -> Vec<usize> {
    let largest = page_size;
    let mut sizes = Vec::new();
    let mut size = MIN_CHUNK;
    while size < largest / 2 && sizes.len() < MAX_CLASSES - 1 {
        sizes.push(size);
        let next = ((size as f64 * factor) as usize + 7) & !7;
        size = next.max(size + 8);
    }
    sizes.push(largest);
    sizes
}

/// The class (0-based index into `chunks`) an item of this key and value lives in: the one
/// that holds it whole, or for a value past the largest chunk (chained: store/chain.rs) the
/// one that holds its header, the key and the table of its parts. None if neither fits.
pub fn item_class(chunks: &[usize], key_len: usize, value_len: usize) -> Option<usize> {
    let fits = |size: usize| chunks.iter().position(|&c| c >= size);
    fits(HEADER_BYTES + key_len + value_len).or_else(|| {
        let cap = chunks
            .last()?
            .checked_sub(HEADER_BYTES)
            .filter(|&c| c > 0)?;
        fits(HEADER_BYTES + key_len + 4 * value_len.div_ceil(cap))
    })
}

/// The geometry of one class inside a page: `[chunk][chunk]...` (what is left past the last
/// chunk is unused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassInfo {
    pub chunk: usize,
    pub per_page: u32,
    /// ceil(2^64 / per_page): every item access splits a slot number into page and chunk,
    /// and a multiply is several times cheaper than the division it replaces.
    per_page_reciprocal: u64,
}

impl ClassInfo {
    pub fn new(chunk: usize, page_size: usize) -> ClassInfo {
        let n = page_size / chunk;
        assert!(
            n >= 1,
            "a {chunk}-byte chunk does not fit a {page_size}-byte page"
        );
        ClassInfo {
            chunk,
            per_page: n as u32,
            // 2^64 itself (per_page 1) does not fit: `split` handles that class.
            per_page_reciprocal: (u64::MAX / n as u64).wrapping_add(1),
        }
    }

    /// `(slot / per_page, slot % per_page)`, exact for every 32-bit slot (Lemire, Kaser and
    /// Kurz, "Faster remainder by direct computation", 2019: a 64-bit reciprocal divides any
    /// 32-bit numerator exactly).
    #[inline(always)]
    pub fn split(&self, slot: u32) -> (u32, u32) {
        if self.per_page == 1 {
            return (slot, 0);
        }
        let page = ((u128::from(self.per_page_reciprocal) * u128::from(slot)) >> 64) as u32;
        (page, slot - page * self.per_page)
    }

    /// Pages a class may have before its slot numbers run out of location bits.
    pub fn max_pages(&self) -> usize {
        (MAX_SLOTS_PER_CLASS / self.per_page) as usize
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn split_matches_division() {
        use proptest::prelude::*;
        // Every class of every page size the store uses, at the edges and at random.
        for page in [1usize << 16, 1 << 20, 1 << 22] {
            for chunk in [
                48usize,
                64,
                96,
                120,
                1000,
                4096,
                page / 4,
                page / 2 + 8,
                page,
            ] {
                let c = super::ClassInfo::new(chunk, page);
                let per = c.per_page;
                for slot in [0, 1, per - 1, per, per + 1, u32::MAX - 1, u32::MAX] {
                    assert_eq!(c.split(slot), (slot / per, slot % per), "{chunk} {slot}");
                }
                proptest!(|(slot: u32)| {
                    prop_assert_eq!(c.split(slot), (slot / per, slot % per));
                });
            }
        }
    }

    use super::*;

    #[test]
    fn sizes_grow_by_the_factor_and_end_at_the_page() {
        let s = chunk_sizes(1.25, 1 << 20);
        assert_eq!(s[0], 40);
        assert_eq!(s[1], 56); // 50 rounded up to 8
        assert_eq!(s[2], 72); // 70 rounded up to 8
        assert!(s.windows(2).all(|w| w[1] > w[0]));
        assert_eq!(*s.last().unwrap(), 1 << 20);
        assert!(s.len() < MAX_CLASSES);
        // A tiny factor still terminates below the class limit.
        assert!(chunk_sizes(1.01, 1 << 20).len() <= MAX_CLASSES);
    }

    #[test]
    fn a_chained_item_lives_in_its_headers_class() {
        let s = chunk_sizes(1.25, 1 << 20);
        assert_eq!(item_class(&s, 3, 5), Some(0));
        assert_eq!(item_class(&s, 3, 2000).map(|c| s[c] >= 2035), Some(true));
        // 3 MiB: four parts, a 16-byte table after a 3-byte key: the 56-byte class.
        assert_eq!(item_class(&s, 3, 3 << 20), Some(1));
        assert_eq!(item_class(&[], 3, 5), None);
    }

    #[test]
    fn geometry_fits_the_page() {
        for chunk in chunk_sizes(1.25, 1 << 20) {
            let c = ClassInfo::new(chunk, 1 << 20);
            assert!(c.per_page >= 1);
            assert!(c.per_page as usize * chunk <= 1 << 20);
        }
        let k8 = ClassInfo::new(40, 1 << 20);
        assert_eq!(k8.per_page, 26_214);
    }
}
