//! Items in host memory (Mega-KV §6.2, memcached's slabs).
//!
//! Items live in fixed-size chunks grouped into slab classes; a class takes whole pages from
//! the shared memory budget. Every item is addressed by a 32-bit [`Location`] (class bits and
//! slot bits) so the index can store it in four bytes. When the budget is spent, a class
//! reuses its own chunks by CLOCK over a reference bit kept in each item's header.
//!
//! A store belongs to one engine partition and is driven by one thread (`&mut self`); the only
//! shared step is taking a new page from the [`hkv_mem::Arena`], one atomic operation for a
//! whole page of items. That is Mega-KV's "batched lock" taken to its limit: the lock is
//! amortised over every chunk in the page.

mod class;
mod expiry;
mod item;
mod location;
mod store;

pub use class::{chunk_sizes, item_class, ClassInfo};
pub use expiry::{expiry_from_exptime, Expiry, REALTIME_MAXDELTA};
pub use item::{
    device_layout, Item, BINARY_KEY, FETCHED, HEADER_BYTES, MAX_KEY_LEN, STALE, WIN_SENT,
};
pub use location::{Location, LOCATION_CLASS_BITS, MAX_CLASSES, NO_LOCATION};
pub use store::{
    ChunkAt, ClassCounts, ClassImage, ClassOp, ClassReport, CrawlCursor, HitHeader, Lookup,
    ReassignError, Reclaim, RestoreError, SlabStore, Stage, StoreConfig, StoreError, StoreImage,
    StoreStats, ValueParts, MAX_AGE_RATIO, RECENT_WRITES, WINDOW,
};
