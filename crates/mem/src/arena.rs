//! Carving the budget into disjoint, owned pieces.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::region::Region;

#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    #[error("memory budget exhausted: {requested} bytes requested, {available} of {limit} left")]
    Exhausted {
        requested: usize,
        available: usize,
        limit: usize,
    },
    #[error("cannot map {0} bytes: {1}")]
    Map(usize, std::io::Error),
}

/// The whole memory budget. Pieces are handed out by an atomic bump, so any thread may carve
/// (engine partitions take slab pages from one shared pool) and none takes a lock. Pieces are
/// never returned: like memcached's slab pages, memory once assigned stays assigned.
pub struct Arena {
    region: Arc<Region>,
    /// The budget; never above `mapped`, the region's length (`cache_memlimit` moves it).
    limit: AtomicUsize,
    mapped: usize,
    next: AtomicUsize,
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("limit", &self.limit())
            .field("used", &self.used())
            .finish()
    }
}

impl Arena {
    pub fn new(limit: usize) -> Result<Arena, ArenaError> {
        let region = Region::new(limit).map_err(|e| ArenaError::Map(limit, e))?;
        Ok(Arena {
            region: Arc::new(region),
            limit: AtomicUsize::new(limit),
            mapped: limit,
            next: AtomicUsize::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Moves the budget (memcached's `cache_memlimit`), up to the size reserved at start.
    /// Memory already handed out stays; a lower limit only stops new pages. Returns the
    /// limit now in force.
    pub fn set_limit(&self, limit: usize) -> usize {
        let l = limit.min(self.mapped);
        self.limit.store(l, Ordering::Relaxed);
        l
    }

    /// Bytes handed out so far, alignment padding included.
    pub fn used(&self) -> usize {
        self.next.load(Ordering::Relaxed).min(self.limit())
    }

    pub fn available(&self) -> usize {
        self.limit().saturating_sub(self.used())
    }

    /// Takes `len` zeroed bytes aligned to `align` (a power of two).
    pub fn carve(&self, len: usize, align: usize) -> Result<Carved, ArenaError> {
        debug_assert!(align.is_power_of_two());
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            let start = cur.checked_add(align - 1).map(|v| v & !(align - 1));
            let end = start.and_then(|s| s.checked_add(len));
            let (start, end) = match (start, end) {
                (Some(s), Some(e)) if e <= self.limit() => (s, e),
                _ => {
                    return Err(ArenaError::Exhausted {
                        requested: len,
                        available: self.limit().saturating_sub(cur),
                        limit: self.limit(),
                    })
                }
            };
            match self
                .next
                .compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    // SAFETY: `start + len <= limit <= mapped`, the region's length
                    // (`set_limit` clamps), so the pointer stays inside the mapping.
                    let ptr = unsafe { self.region.base().add(start) };
                    return Ok(Carved {
                        ptr,
                        len,
                        _region: Arc::clone(&self.region),
                    });
                }
                Err(seen) => cur = seen,
            }
        }
    }
}

/// An owned, zero-initialised piece of the arena. It keeps the mapping alive.
pub struct Carved {
    ptr: NonNull<u8>,
    len: usize,
    _region: Arc<Region>,
}

// SAFETY: a `Carved` is the unique owner of its byte range (the arena's bump never hands out
// an overlapping range), so moving it to another thread moves exclusive access with it.
unsafe impl Send for Carved {}
// SAFETY: shared access is read-only through `Deref`.
unsafe impl Sync for Carved {}

impl Deref for Carved {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is inside the live region (held by `_region`), initialised
        // (the mapping is zero-filled) and owned exclusively by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Carved {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` guarantees no other borrow of this range.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for Carved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Carved({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carvings_are_zeroed_disjoint_and_aligned() {
        let arena = Arena::new(1 << 16).unwrap();
        let mut a = arena.carve(100, 64).unwrap();
        let mut b = arena.carve(4000, 4096).unwrap();
        assert!(a.iter().all(|&x| x == 0));
        assert!(b.iter().all(|&x| x == 0));
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        a.fill(0xAA);
        b.fill(0x55);
        assert!(a.iter().all(|&x| x == 0xAA));
        assert!(b.iter().all(|&x| x == 0x55));
        let (pa, pb) = (a.as_ptr() as usize, b.as_ptr() as usize);
        assert!(pa + a.len() <= pb || pb + b.len() <= pa);
    }

    #[test]
    fn a_lowered_limit_stops_new_pages_and_cannot_pass_the_mapping() {
        let arena = Arena::new(64 << 10).unwrap();
        let _a = arena.carve(16 << 10, 4096).unwrap();
        assert_eq!(arena.set_limit(24 << 10), 24 << 10);
        assert!(arena.carve(16 << 10, 4096).is_err());
        assert_eq!(
            arena.set_limit(1 << 30),
            64 << 10,
            "clamped to what was reserved"
        );
        let b = arena.carve(16 << 10, 4096).unwrap();
        assert_eq!(b.len(), 16 << 10);
        assert!(arena.used() <= arena.limit());
    }

    #[test]
    fn the_limit_is_never_exceeded() {
        let arena = Arena::new(10_000).unwrap();
        let mut held = Vec::new();
        while let Ok(c) = arena.carve(1000, 8) {
            held.push(c);
        }
        assert_eq!(held.len(), 10);
        assert!(arena.used() <= arena.limit());
        assert!(matches!(
            arena.carve(1, 1),
            Err(ArenaError::Exhausted { .. })
        ));
    }

    #[test]
    fn concurrent_carving_hands_out_each_byte_once() {
        // Smaller under Miri, which interprets every byte written.
        let (total, piece) = if cfg!(miri) {
            (1 << 14, 256)
        } else {
            (1 << 20, 4096)
        };
        let arena = Arc::new(Arena::new(total).unwrap());
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let arena = Arc::clone(&arena);
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    while let Ok(mut c) = arena.carve(piece, 64) {
                        c.fill(t + 1);
                        mine.push(c);
                    }
                    mine
                })
            })
            .collect();
        let all: Vec<(u8, Carved)> = threads
            .into_iter()
            .enumerate()
            .flat_map(|(t, h)| h.join().unwrap().into_iter().map(move |c| (t as u8, c)))
            .collect();
        assert_eq!(all.len(), total / piece);
        for (t, c) in &all {
            assert!(c.iter().all(|&x| x == t + 1), "a carving was overwritten");
        }
    }
}
