//! Every hash function and constant the index uses, in one place.
//!
//! Keys are hashed once, on the host, with XXH3-64 (stable across versions and platforms, fast
//! on short keys). Everything after that — bucket choice, the alternate bucket, the preferred
//! slot, the partition — is derived from that one 64-bit value with the functions below, which
//! are deliberately tiny so a device kernel can be built from the same constants (passed as
//! `-D` options) and cannot drift from them.

/// Signature value that marks an empty slot. A key whose signature would be 0 uses 1.
pub const EMPTY_SIGNATURE: u32 = 0;
/// Slots per bucket; a bucket is 8 signatures then 8 locations, one 64-byte cache line.
pub const SLOTS_PER_BUCKET: usize = 8;
/// Signature bits (from the top) that pick the preferred slot: log2(SLOTS_PER_BUCKET).
pub const PREFERRED_SLOT_BITS: u32 = 3;
/// Longest cuckoo path before an entry is dropped (counted as an eviction).
pub const MAX_DISPLACEMENTS: u32 = 128;
/// Murmur3 fmix32 multipliers, used to spread a signature over the bucket bits.
pub const FMIX_C1: u32 = 0x85eb_ca6b;
pub const FMIX_C2: u32 = 0xc2b2_ae35;

/// A key's hash, split the way the index uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct KeyHash {
    /// Never [`EMPTY_SIGNATURE`].
    pub sig: u32,
    /// Low bits choose the primary bucket; high bits choose the partition.
    pub lo: u32,
}

/// The process's hash seed (0, plain XXH3-64, until [`set_hash_seed`]).
static SEED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Seeds every later [`hash_key`] call. The server sets a random seed at start-up, so keys
/// that all land in one bucket pair cannot be worked out offline (a flooding attack); it must
/// be set before any key is stored, since stored keys are placed by their hash.
pub fn set_hash_seed(seed: u64) {
    SEED.store(seed, std::sync::atomic::Ordering::Relaxed);
}

/// The seed [`set_hash_seed`] set (a warm restart saves it: stored keys are placed by it).
pub fn hash_seed() -> u64 {
    SEED.load(std::sync::atomic::Ordering::Relaxed)
}

#[inline]
pub fn hash_key(key: &[u8]) -> KeyHash {
    let h =
        xxhash_rust::xxh3::xxh3_64_with_seed(key, SEED.load(std::sync::atomic::Ordering::Relaxed));
    let sig = (h >> 32) as u32;
    KeyHash {
        sig: if sig == EMPTY_SIGNATURE { 1 } else { sig },
        lo: h as u32,
    }
}

/// Murmur3's 32-bit finaliser.
#[inline]
pub fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(FMIX_C1);
    h ^= h >> 13;
    h = h.wrapping_mul(FMIX_C2);
    h ^ (h >> 16)
}

impl KeyHash {
    /// Which of `partitions` owns this key (multiply-shift over the high bits of `lo`, so it is
    /// independent of the bucket bits for any table under 2^27 buckets per partition).
    #[inline]
    pub fn partition(&self, partitions: u32) -> u32 {
        ((self.lo as u64 * partitions as u64) >> 32) as u32
    }

    #[inline]
    pub fn primary_bucket(&self, mask: u32) -> u32 {
        self.lo & mask
    }

    #[inline]
    pub fn preferred_slot(&self) -> usize {
        (self.sig >> (32 - PREFERRED_SLOT_BITS)) as usize
    }
}

/// The other bucket of a signature that sits in `bucket`. An involution: applying it twice
/// gives `bucket` back, which is what lets a displaced entry move without knowing its key.
/// The `| 1` keeps the two buckets distinct whenever the table has more than one.
#[inline]
pub fn alt_bucket(bucket: u32, sig: u32, mask: u32) -> u32 {
    bucket ^ ((fmix32(sig) | 1) & mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alt_bucket_is_an_involution_and_differs() {
        for mask in [0u32, 1, 7, 1023, (1 << 20) - 1] {
            for sig in [1u32, 2, 0xdead_beef, u32::MAX] {
                for b in [0u32, 1, 5, 1000] {
                    let b = b & mask;
                    let a = alt_bucket(b, sig, mask);
                    assert_eq!(alt_bucket(a, sig, mask), b);
                    assert!(a <= mask);
                    if mask > 0 {
                        assert_ne!(a, b);
                    }
                }
            }
        }
    }

    #[test]
    fn signature_is_never_empty_and_hash_is_stable() {
        assert_ne!(hash_key(b"").sig, EMPTY_SIGNATURE);
        // XXH3-64 of "hello" is a published test vector; if this changes, persisted layouts
        // and device kernels would disagree with the host.
        let h = xxhash_rust::xxh3::xxh3_64(b"hello");
        assert_eq!(h, 0x9555_e855_5c62_dcfd);
        let k = hash_key(b"hello");
        assert_eq!(k.sig, 0x9555_e855);
        assert_eq!(k.lo, 0x5c62_dcfd);
    }

    #[test]
    fn partitions_cover_every_owner() {
        let mut seen = [0u32; 3];
        for i in 0..3000u32 {
            let h = hash_key(&i.to_le_bytes());
            seen[h.partition(3) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
    }
}
