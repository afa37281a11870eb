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
    #[error("memory file {0}: {1}")]
    File(String, std::io::Error),
    #[error("cannot take back saved pages: {0}")]
    Adopt(String),
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
    /// Opened on a memory file whose contents were kept, and [`Arena::adopt`] not yet called.
    adoptable: std::sync::atomic::AtomicBool,
    /// Pieces given back by [`Arena::recycle`] (an index table outgrown), zeroed, handed
    /// out again by `carve` before the bump moves.
    spare: std::sync::Mutex<Vec<Carved>>,
    spare_bytes: AtomicUsize,
    /// A memory file, held open with an exclusive lock for the arena's life.
    _file: Option<std::fs::File>,
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
            adoptable: std::sync::atomic::AtomicBool::new(false),
            spare: std::sync::Mutex::new(Vec::new()),
            spare_bytes: AtomicUsize::new(0),
            _file: None,
        })
    }

    /// An arena in a memory file (memcached's `-e`). `keep`: the file's contents are kept
    /// (a warm restart; it must already be `limit` bytes long) for [`Arena::adopt`] to take
    /// back; otherwise the file is emptied and sized to `limit`, so every byte reads zero as
    /// in an anonymous arena.
    pub fn open_file(
        path: &std::path::Path,
        limit: usize,
        keep: bool,
    ) -> Result<Arena, ArenaError> {
        let err = |e| ArenaError::File(path.display().to_string(), e);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(err)?;
        // Two servers on one file would hand out the same bytes twice.
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
            |e| {
                err(std::io::Error::other(format!(
                    "in use by another process ({e})"
                )))
            },
        )?;
        if keep {
            let len = file.metadata().map_err(err)?.len();
            if len != limit as u64 {
                return Err(err(std::io::Error::other(format!(
                    "{len} bytes long, {limit} expected"
                ))));
            }
        } else {
            // Truncating first drops every old byte: the new length reads as zeroes.
            file.set_len(0).map_err(err)?;
            file.set_len(limit as u64).map_err(err)?;
        }
        let region = Region::file(&file, limit.max(1)).map_err(err)?;
        Ok(Arena {
            region: Arc::new(region),
            limit: AtomicUsize::new(limit),
            mapped: limit,
            next: AtomicUsize::new(0),
            adoptable: std::sync::atomic::AtomicBool::new(keep),
            spare: std::sync::Mutex::new(Vec::new()),
            spare_bytes: AtomicUsize::new(0),
            _file: Some(file),
        })
    }

    /// Takes back pieces a previous process carved from the same memory file: `ranges`
    /// (offset, length), every one at or above what this arena has carved so far and below
    /// `next`, the previous process's bump, which this arena continues from. Once per
    /// arena, and only on one opened with `keep`; ranges that overlap or stray are refused,
    /// so no byte gets two owners.
    pub fn adopt(&self, ranges: &[(usize, usize)], next: usize) -> Result<Vec<Carved>, ArenaError> {
        if !self.adoptable.swap(false, Ordering::AcqRel) {
            return Err(ArenaError::Adopt(
                "not a kept memory file, or already adopted".into(),
            ));
        }
        let floor = self.next.load(Ordering::Relaxed);
        if next < floor || next > self.mapped {
            return Err(ArenaError::Adopt(format!(
                "saved bump {next} outside {floor}..={}",
                self.mapped
            )));
        }
        let mut sorted = ranges.to_vec();
        sorted.sort_unstable();
        let mut at = floor;
        for &(start, len) in &sorted {
            let end = start.checked_add(len);
            match end {
                Some(end) if start >= at && end <= next => at = end,
                _ => {
                    return Err(ArenaError::Adopt(format!(
                        "piece {start}+{len} overlaps another or lies outside {floor}..{next}"
                    )))
                }
            }
        }
        self.next.store(next, Ordering::Relaxed);
        Ok(ranges
            .iter()
            .map(|&(start, len)| Carved {
                // SAFETY: `start + len <= next <= mapped`, inside the mapping; the ranges
                // were checked disjoint from each other and from everything carved before
                // (below `floor`), and later carvings start at `next`.
                ptr: unsafe { NonNull::new_unchecked(self.region.base().as_ptr().add(start)) },
                len,
                _region: Arc::clone(&self.region),
            })
            .collect())
    }

    /// Writes a memory file's dirty pages back to it (before a warm-restart save).
    pub fn sync(&self) -> Result<(), ArenaError> {
        self.region
            .sync()
            .map_err(|e| ArenaError::Map(self.mapped, e))
    }

    /// Where `piece` starts, counted from the arena's first byte.
    pub fn offset_of(&self, piece: &Carved) -> usize {
        piece.ptr.as_ptr() as usize - self.region.base().as_ptr() as usize
    }

    /// The bump: bytes carved so far, padding included (unclamped by the limit).
    /// Where the whole mapping starts and how long it is: for a device that reads the
    /// arena in place (KC and RD kernels over `CL_MEM_USE_HOST_PTR`). Carved pieces lie at
    /// [`Arena::offset_of`] from here.
    pub fn mapping(&self) -> (NonNull<u8>, usize) {
        (self.region.base(), self.mapped)
    }

    /// The most the budget can be moved to: what was reserved at start (`-m`).
    pub fn reserved(&self) -> usize {
        self.mapped
    }

    pub fn next_offset(&self) -> usize {
        self.next.load(Ordering::Relaxed)
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

    /// Bytes handed out so far, alignment padding included: past a lowered limit too (the
    /// pages handed out before it, and classes' first pages after it).
    pub fn used(&self) -> usize {
        self.next.load(Ordering::Relaxed)
    }

    pub fn available(&self) -> usize {
        self.bump_available() + self.spare_bytes.load(Ordering::Relaxed)
    }

    /// What the bump can still hand out in one piece (recycled pieces not counted).
    pub fn bump_available(&self) -> usize {
        self.limit().saturating_sub(self.used())
    }

    /// Gives a piece back for reuse, cut into `unit`-byte pieces aligned to 4096 (what the
    /// store's pages are); the remainder is lost. Bytes never leave the arena, so the limit
    /// holds; an index table that was replaced by a larger one becomes slab pages this way.
    pub fn recycle(&self, mut piece: Carved, unit: usize) {
        piece.fill(0);
        let skip = piece.ptr.as_ptr().align_offset(4096);
        if unit == 0 || skip >= piece.len {
            return;
        }
        let mut rest = piece.split_off(skip);
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        while rest.len >= unit {
            let tail = rest.split_off(unit);
            self.spare_bytes.fetch_add(unit, Ordering::Relaxed);
            spare.push(rest);
            rest = tail;
        }
    }

    /// The recycled pieces not handed out again, as (offset, length) (a warm restart saves
    /// them).
    pub fn spare_pieces(&self) -> Vec<(usize, usize)> {
        let spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        spare.iter().map(|c| (self.offset_of(c), c.len)).collect()
    }

    fn take_spare(&self, len: usize, align: usize) -> Option<Carved> {
        if self.spare_bytes.load(Ordering::Relaxed) < len {
            return None;
        }
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        let i = spare
            .iter()
            .position(|c| c.len == len && (c.ptr.as_ptr() as usize) & (align - 1) == 0)?;
        self.spare_bytes.fetch_sub(len, Ordering::Relaxed);
        Some(spare.swap_remove(i))
    }

    /// Takes `len` zeroed bytes aligned to `align` (a power of two).
    pub fn carve(&self, len: usize, align: usize) -> Result<Carved, ArenaError> {
        self.carve_below(len, align, self.limit())
    }

    /// The same past a limit lowered below the reservation (`cache_memlimit`), up to the
    /// reservation itself: memcached gives a slab class its first page whatever its limit,
    /// and a class without one can store nothing (after `cache_memlimit 8` on a nearly
    /// empty `-m 64` server, every store was out of memory: an outside probe).
    /// At most `slack` bytes past the limit are handed out so, all callers together.
    pub fn carve_past_limit(
        &self,
        len: usize,
        align: usize,
        slack: usize,
    ) -> Result<Carved, ArenaError> {
        self.carve_below(len, align, self.limit().saturating_add(slack))
    }

    fn carve_below(&self, len: usize, align: usize, bound: usize) -> Result<Carved, ArenaError> {
        debug_assert!(align.is_power_of_two());
        if let Some(piece) = self.take_spare(len, align) {
            return Ok(piece);
        }
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            let start = cur.checked_add(align - 1).map(|v| v & !(align - 1));
            let end = start.and_then(|s| s.checked_add(len));
            let (start, end) = match (start, end) {
                (Some(s), Some(e)) if e <= bound.min(self.mapped) => (s, e),
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
                    // SAFETY: `start + len <= bound.min(mapped)`, and `mapped` is the
                    // region's length, so the pointer stays inside the mapping.
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

impl Carved {
    /// Splits off `[at, len)` into a piece of its own; `self` keeps `[0, at)`.
    fn split_off(&mut self, at: usize) -> Carved {
        assert!(at <= self.len);
        let tail = Carved {
            // SAFETY: `at <= len`, so the pointer stays inside (or one past) this piece.
            ptr: unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(at)) },
            len: self.len - at,
            _region: Arc::clone(&self._region),
        };
        self.len = at;
        tail
    }
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
    fn past_a_lowered_limit_a_first_page_comes_from_the_reservation() {
        let arena = Arena::new(64 << 10).unwrap();
        let _a = arena.carve(16 << 10, 4096).unwrap();
        arena.set_limit(16 << 10);
        assert!(arena.carve(16 << 10, 4096).is_err());
        let b = arena.carve_past_limit(16 << 10, 4096, 20 << 10).unwrap();
        assert_eq!(b.len(), 16 << 10);
        assert!(
            arena.carve_past_limit(16 << 10, 4096, 20 << 10).is_err(),
            "never more than the slack past the limit"
        );
        assert_eq!(
            arena.used(),
            32 << 10,
            "what is handed out, past the limit too"
        );
        let _c = arena.carve_past_limit(32 << 10, 4096, 1 << 30).unwrap();
        assert!(
            arena.carve_past_limit(4096, 4096, 1 << 30).is_err(),
            "never past the reservation"
        );
    }

    fn memory_file(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("hkv-arena-{tag}-{}", std::process::id()))
    }

    #[test]
    #[cfg_attr(miri, ignore = "memory files are not mapped under Miri")]
    fn a_kept_memory_file_gives_back_the_saved_pieces_and_nothing_else() {
        let path = memory_file("keep");
        let (offsets, next) = {
            let arena = Arena::open_file(&path, 1 << 20, false).unwrap();
            let _head = arena.carve(8192, 4096).unwrap();
            let mut a = arena.carve(4096, 4096).unwrap();
            let mut b = arena.carve(4096, 4096).unwrap();
            a.fill(7);
            b.fill(9);
            arena.sync().unwrap();
            (
                vec![(arena.offset_of(&b), 4096), (arena.offset_of(&a), 4096)],
                arena.next_offset(),
            )
        };
        let arena = Arena::open_file(&path, 1 << 20, true).unwrap();
        assert!(
            Arena::open_file(&path, 1 << 20, false).is_err(),
            "a second arena opened a locked memory file"
        );
        let head = arena.carve(8192, 4096).unwrap();
        assert_eq!(arena.offset_of(&head), 0);
        let pieces = arena.adopt(&offsets, next).unwrap();
        assert!(pieces[0].iter().all(|&x| x == 9) && pieces[1].iter().all(|&x| x == 7));
        assert!(arena.adopt(&offsets, next).is_err(), "adopted twice");
        // New carvings continue after the saved bump.
        let c = arena.carve(4096, 4096).unwrap();
        assert!(arena.offset_of(&c) >= next && c.iter().all(|&x| x == 0));

        drop((arena, head, pieces, c));

        // Overlapping or stray ranges are refused; a file of another size is not kept.
        let arena = Arena::open_file(&path, 1 << 20, true).unwrap();
        let _head = arena.carve(8192, 4096).unwrap();
        assert!(arena.adopt(&[(8192, 4096), (10240, 4096)], next).is_err());
        drop((arena, _head));
        let arena = Arena::open_file(&path, 1 << 20, true).unwrap();
        let _head = arena.carve(8192, 4096).unwrap();
        assert!(arena.adopt(&[(0, 4096)], next).is_err(), "under the index");
        drop((arena, _head));
        assert!(Arena::open_file(&path, 2 << 20, true).is_err());
        // Not kept: emptied.
        let arena = Arena::open_file(&path, 1 << 20, false).unwrap();
        let _head = arena.carve(8192, 4096).unwrap();
        let a = arena.carve(4096, 4096).unwrap();
        assert!(a.iter().all(|&x| x == 0));
        assert!(arena.adopt(&[], 0).is_err(), "not a kept file");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_recycled_piece_comes_back_zeroed_as_pages_before_the_bump_moves() {
        let arena = Arena::new(64 << 10).unwrap();
        let mut table = arena.carve(20 << 10, 4096).unwrap();
        table.fill(0xEE);
        let avail = arena.available();
        arena.recycle(table, 8 << 10);
        // Two whole 8 KiB pieces; the last 4 KiB is lost.
        assert_eq!(arena.available(), avail + (16 << 10));
        assert_eq!(arena.spare_pieces().len(), 2);
        let next = arena.next_offset();
        let a = arena.carve(8 << 10, 4096).unwrap();
        let b = arena.carve(8 << 10, 4096).unwrap();
        assert_eq!(arena.next_offset(), next, "spare pieces are used first");
        assert!(a.iter().chain(b.iter()).all(|&x| x == 0));
        assert!(arena.offset_of(&a) < 20 << 10 && arena.offset_of(&b) < 20 << 10);
        let c = arena.carve(8 << 10, 4096).unwrap();
        assert!(arena.offset_of(&c) >= next);
        assert!(arena.spare_pieces().is_empty());
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
