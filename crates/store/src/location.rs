//! ```text
//!  31        26 25                                   0
//! +-----------+--------------------------------------+
//! |   class   |          slot within the class       |
//! +-----------+--------------------------------------+
//! ```
//! Slot `s` of a class is chunk `s % per_page` of its page `s / per_page`.

pub type Location = u32;

pub const LOCATION_CLASS_BITS: u32 = 6;
pub const SLOT_BITS: u32 = 32 - LOCATION_CLASS_BITS;
pub const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
/// Class 63 is never created, so [`NO_LOCATION`] (all ones) is never a real item.
pub const MAX_CLASSES: usize = (1 << LOCATION_CLASS_BITS) - 1;
pub const MAX_SLOTS_PER_CLASS: u32 = 1 << SLOT_BITS;
pub const NO_LOCATION: Location = u32::MAX;

#[inline(always)]
pub fn encode(class: usize, slot: u32) -> Location {
    debug_assert!(class < MAX_CLASSES && slot <= SLOT_MASK);
    ((class as u32) << SLOT_BITS) | slot
}

#[inline(always)]
pub fn decode(loc: Location) -> (usize, u32) {
    ((loc >> SLOT_BITS) as usize, loc & SLOT_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_reserved_value() {
        for (c, s) in [(0, 0), (5, 12345), (MAX_CLASSES - 1, SLOT_MASK)] {
            assert_eq!(decode(encode(c, s)), (c, s));
            assert_ne!(encode(c, s), NO_LOCATION);
        }
        assert_eq!(decode(NO_LOCATION).0, MAX_CLASSES);
    }
}
