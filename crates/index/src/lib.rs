//! The compact signature index of Mega-KV §4.
//!
//! The index maps a key's 32-bit *signature* to the 32-bit *location* of its item in the
//! store. It is a hint: signatures collide, so a hit must always be confirmed by comparing the
//! full key in the store (the engine's KC step). The API is batched over slices so that a
//! backend can overlap many cache misses (CPU) or launch one kernel per batch (OpenCL).

pub mod bucket;
pub mod cpu;
pub mod dirty;
pub mod hash;
pub mod opencl;
pub mod sizing;

pub use bucket::{Bucket, SLOTS};
pub use cpu::CpuIndex;
pub use hash::{hash_key, hash_seed, set_hash_seed, KeyHash};
pub use hkv_mem::prefetch_read;
pub use sizing::IndexSizing;

/// A 32-bit item location; its meaning belongs to the store. [`NO_LOCATION`] is reserved.
pub type Location = u32;
/// Reserved: "no location" in search results, and never a valid item.
pub const NO_LOCATION: Location = u32::MAX;

/// What an insert did to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Took an empty slot, possibly after displacing others along a cuckoo path.
    Inserted,
    /// A slot already held the same signature; its old location is returned so the caller
    /// can tell an overwrite of the same key from a signature collision with another key.
    Replaced(Location),
    /// The displacement bound was reached and this entry was dropped from the table. It may
    /// be any entry on the path (usually not the one inserted); the caller must count it as
    /// an eviction and reclaim its item.
    Evicted(Location),
}

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("index does not fit the memory budget: {0}")]
    Memory(#[from] hkv_mem::ArenaError),
    #[error("invalid index size: {0}")]
    Size(String),
    #[error("OpenCL device: {0}")]
    Device(String),
}

/// Counters every backend keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    pub entries: u64,
    /// Entries moved by displacement walks, in all.
    pub displacements: u64,
    /// Inserts that needed a walk, and the longest walk (entries moved by one insert).
    pub walks: u64,
    pub longest_walk: u64,
    pub evictions: u64,
}

/// The batched index API every backend implements (CPU now, OpenCL later).
///
/// `out` slices have the same length as the inputs; result `i` belongs to input `i`, and
/// entries of one batch take effect in slice order.
pub trait IndexBackend: Send {
    fn search(&self, hashes: &[KeyHash], out: &mut [Location]);
    fn insert(&mut self, entries: &[(KeyHash, Location)], out: &mut [InsertOutcome]);
    fn delete(&mut self, entries: &[(KeyHash, Location)], out: &mut [bool]);
    fn stats(&self) -> IndexStats;
    /// Bytes of budget the table occupies.
    fn table_bytes(&self) -> usize;
}
