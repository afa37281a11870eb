//! The backing mapping of an arena.

use std::ptr::NonNull;

/// Size of an x86-64 transparent huge page. Carvings that want huge pages are aligned to it.
pub const HUGE_PAGE: usize = 2 << 20;

/// A zeroed, private, anonymous mapping, or a shared mapping of a memory file (memcached's
/// `-e`, for warm restarts). Physical memory is only committed as it is touched, so
/// reserving the whole budget up front costs nothing until items arrive.
pub(crate) struct Region {
    #[cfg(not(miri))]
    map: memmap2::MmapMut,
    #[cfg(miri)]
    heap: (NonNull<u8>, std::alloc::Layout),
}

impl Region {
    pub(crate) fn new(len: usize) -> std::io::Result<Region> {
        #[cfg(not(miri))]
        {
            // MAP_NORESERVE: the kernel's heuristic overcommit refuses one mapping larger
            // than RAM and swap, and memcached (which allocates page by page) starts with
            // any -m; what is actually touched is what counts, as it does for memcached.
            let map = memmap2::MmapOptions::new()
                .len(len.max(1))
                .no_reserve_swap()
                .map_anon()?;
            #[cfg(target_os = "linux")]
            if let Err(e) = map.advise(memmap2::Advice::HugePage) {
                // Not fatal: the kernel may have THP disabled; we only lose speed.
                tracing::warn!(error = %e, "madvise(MADV_HUGEPAGE) failed; running on 4 KiB pages");
            }
            Ok(Region { map })
        }
        #[cfg(miri)]
        {
            let layout = std::alloc::Layout::from_size_align(len.max(1), HUGE_PAGE)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            // SAFETY: the layout has a non-zero size.
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            let ptr = NonNull::new(ptr).ok_or_else(|| std::io::Error::other("out of memory"))?;
            Ok(Region {
                heap: (ptr, layout),
            })
        }
    }

    /// Maps all of `file` (already `len` bytes long), shared: what is written lands in the
    /// file and outlives the process.
    #[cfg(not(miri))]
    pub(crate) fn file(file: &std::fs::File, len: usize) -> std::io::Result<Region> {
        // SAFETY: memmap2 requires that no one else truncates or writes the file while it
        // is mapped. The memory file is hkv's own (memcached's `-e` contract: one server
        // per file, on tmpfs or DAX); hkv only resizes it before mapping it.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(file)? };
        Ok(Region { map })
    }

    #[cfg(miri)]
    pub(crate) fn file(_file: &std::fs::File, _len: usize) -> std::io::Result<Region> {
        Err(std::io::Error::other(
            "memory files are not supported under Miri",
        ))
    }

    /// Writes the mapping's dirty pages to its file (a no-op for anonymous memory).
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        #[cfg(not(miri))]
        {
            self.map.flush()
        }
        #[cfg(miri)]
        {
            Ok(())
        }
    }

    pub(crate) fn base(&self) -> NonNull<u8> {
        #[cfg(not(miri))]
        {
            NonNull::new(self.map.as_ptr() as *mut u8).expect("mmap never returns null")
        }
        #[cfg(miri)]
        {
            self.heap.0
        }
    }
}

#[cfg(miri)]
impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout and freed only here.
        unsafe { std::alloc::dealloc(self.heap.0.as_ptr(), self.heap.1) }
    }
}

// SAFETY: the region is plain memory; all mutable access goes through `Carved`, whose
// ranges are disjoint (see `Arena::carve`).
unsafe impl Send for Region {}
// SAFETY: as above; `Region` itself exposes no way to read or write through `&self`.
unsafe impl Sync for Region {}
