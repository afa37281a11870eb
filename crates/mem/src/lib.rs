//! The memory budget (`--memory-mb`) as one region of address space.
//!
//! Everything that grows with the data set — index tables, slab pages and the per-item
//! metadata inside them — is carved out of a single [`Arena`] whose size *is* the budget.
//! The limit therefore cannot be exceeded by construction: when the arena is exhausted,
//! the store must evict. The region asks the kernel for transparent huge pages because
//! random access over a table far larger than the TLB's reach is the index's hot path.

mod arena;
mod prefetch;
mod region;

pub use arena::{Arena, ArenaError, Carved};
pub use prefetch::prefetch_read;
pub use region::HUGE_PAGE;
