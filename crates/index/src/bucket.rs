//! One bucket is one 64-byte cache line:
//!
//! ```text
//!  byte 0                              32                              64
//!  +---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+
//!  |sig|sig|sig|sig|sig|sig|sig|sig|loc|loc|loc|loc|loc|loc|loc|loc|
//!  +---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+
//!    slot 0 ............... slot 7   slot 0 ............... slot 7
//! ```
//!
//! Signatures and locations are kept per bucket rather than in two table-wide arrays: a probe
//! then touches one line instead of two (a spike measured the split layout 2x slower on CPU).
//! A signature of 0 marks the slot empty; its location is then [`crate::NO_LOCATION`].

use crate::hash::{EMPTY_SIGNATURE, SLOTS_PER_BUCKET};
use crate::Location;

pub const SLOTS: usize = SLOTS_PER_BUCKET;

#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable, PartialEq, Eq)]
pub struct Bucket {
    pub sigs: [u32; SLOTS],
    pub locs: [Location; SLOTS],
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);

impl Bucket {
    /// Bit i set when slot i holds `sig`. On x86-64 two SSE2 compares and two mask moves:
    /// LLVM left the slot-by-slot loop scalar (8 compares, sets, shifts and ors, ~27
    /// instructions per probe in a callgrind profile of the GET path).
    #[inline(always)]
    pub fn match_mask(&self, sig: u32) -> u32 {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        {
            match_mask_sse2(&self.sigs, sig)
        }
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        {
            match_mask_scalar(&self.sigs, sig)
        }
    }

    #[inline(always)]
    pub fn find(&self, sig: u32) -> Option<usize> {
        let m = self.match_mask(sig);
        (m != 0).then(|| m.trailing_zeros() as usize)
    }

    /// The empty slot nearest to `preferred`, searching forward and wrapping (Mega-KV §4.2:
    /// spreading writers over the bucket instead of all racing for the first free slot).
    #[inline(always)]
    pub fn empty_near(&self, preferred: usize) -> Option<usize> {
        let m = self.match_mask(EMPTY_SIGNATURE);
        if m == 0 {
            return None;
        }
        let rotated = (m >> preferred) | (m << (SLOTS - preferred));
        let step = (rotated & 0xff).trailing_zeros() as usize;
        Some((preferred + step) % SLOTS)
    }

    pub fn occupied(&self) -> usize {
        SLOTS - self.match_mask(EMPTY_SIGNATURE).count_ones() as usize
    }
}

/// [`Bucket::match_mask`] with SSE2: the 8 signatures compared 4 at a time, each compare's
/// lanes (lane i = slot i) moved into 4 bits.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn match_mask_sse2(sigs: &[u32; SLOTS], sig: u32) -> u32 {
    use std::arch::x86_64::{
        _mm_castsi128_ps, _mm_cmpeq_epi32, _mm_movemask_ps, _mm_set1_epi32, _mm_set_epi32,
    };
    const _: () = assert!(SLOTS == 8);
    let s = sigs.map(|x| x as i32);
    // SAFETY: these intrinsics need SSE2, which this build enables (the cfg above; it is
    // part of the x86-64 baseline rustc compiles for), and they read no memory: their
    // operands are the values built here from `sigs`.
    unsafe {
        let want = _mm_set1_epi32(sig as i32);
        let lo = _mm_cmpeq_epi32(_mm_set_epi32(s[3], s[2], s[1], s[0]), want);
        let hi = _mm_cmpeq_epi32(_mm_set_epi32(s[7], s[6], s[5], s[4]), want);
        let lo = _mm_movemask_ps(_mm_castsi128_ps(lo)) as u32;
        let hi = _mm_movemask_ps(_mm_castsi128_ps(hi)) as u32;
        lo | hi << 4
    }
}

/// [`Bucket::match_mask`] one slot at a time: where there is no SSE2, and its tests' model.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
fn match_mask_scalar(sigs: &[u32; SLOTS], sig: u32) -> u32 {
    let mut m = 0u32;
    for (i, &s) in sigs.iter().enumerate() {
        m |= ((s == sig) as u32) << i;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Signatures drawn from a few values so slots often match, the high bit included
        /// (the SSE2 path moves them through `i32` lanes).
        #[test]
        fn the_match_mask_is_the_slot_by_slot_one(
            sigs in proptest::array::uniform8(prop_oneof![Just(0u32), Just(7), Just(u32::MAX), Just(0x8000_0000), any::<u32>()]),
            pick in 0usize..9,
            other in any::<u32>(),
        ) {
            let b = Bucket { sigs, locs: [0; SLOTS] };
            let sig = sigs.get(pick).copied().unwrap_or(other);
            prop_assert_eq!(b.match_mask(sig), match_mask_scalar(&sigs, sig));
            prop_assert_eq!(b.match_mask(EMPTY_SIGNATURE), match_mask_scalar(&sigs, EMPTY_SIGNATURE));
        }
    }

    #[test]
    fn empty_near_prefers_then_wraps() {
        let mut b = Bucket::default();
        assert_eq!(b.empty_near(5), Some(5));
        b.sigs[5] = 9;
        b.sigs[6] = 9;
        assert_eq!(b.empty_near(5), Some(7));
        b.sigs[7] = 9;
        assert_eq!(b.empty_near(5), Some(0));
        b.sigs = [1; 8];
        assert_eq!(b.empty_near(3), None);
        b.sigs[2] = 0;
        assert_eq!(b.empty_near(3), Some(2));
        assert_eq!(b.empty_near(0), Some(2));
    }

    #[test]
    fn find_reports_the_matching_slot() {
        let mut b = Bucket::default();
        b.sigs[3] = 42;
        assert_eq!(b.find(42), Some(3));
        assert_eq!(b.find(43), None);
        assert_eq!(b.occupied(), 1);
    }
}
