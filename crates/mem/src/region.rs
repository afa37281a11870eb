//! The backing mapping of an arena.

use std::ptr::NonNull;

/// Size of an x86-64 transparent huge page. Carvings that want huge pages are aligned to it.
pub const HUGE_PAGE: usize = 2 << 20;

/// A zeroed, private, anonymous mapping. Physical memory is only committed as it is touched,
/// so reserving the whole budget up front costs nothing until items arrive.
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
            let map = memmap2::MmapMut::map_anon(len.max(1))?;
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
