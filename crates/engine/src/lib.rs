//! The engine executes batches of requests through the DIDO tasks MM (allocate, evict),
//! IN (index search / insert / delete), KC (key compare) and RD (read value), and returns
//! one response per request, in request order.
//!
//! Work is split into hash partitions (MICA style): each [`Partition`] owns one index table
//! and one slab store and runs one batch at a time. [`Engine`] holds all partitions, each
//! behind a lock taken once per batch (so a batch's hot path takes no other), for the
//! threads that share them; [`Engine::into_partitions`] hands them out to threads that own
//! one each and take no lock at all.

mod clock;
mod cost;
mod dispatch;
mod engine;
mod index;
mod partition;
mod pending;
mod policy;
mod profile;
mod route;
mod sample;
mod schedule;
mod stats;
pub mod vector;
pub mod warm;
pub mod watch;

pub use clock::unix_seconds;
pub use hkv_index::set_hash_seed;
pub use sample::Sampler;

/// A key's 64-bit hash under the process seed (the hot/cold router bins keys by it).
pub fn key_hash(key: &[u8]) -> u64 {
    wide_hash(&hkv_index::hash_key(key))
}

/// [`key_hash`] from the index's split of the same hash.
pub(crate) fn wide_hash(h: &hkv_index::KeyHash) -> u64 {
    (u64::from(h.sig) << 32) | u64::from(h.lo)
}
pub use cost::PlacementReport;
pub use engine::{
    Backend, ClassStats, CrawlError, CrawlerReport, Engine, EngineConfig, EngineError, ItemSummary,
    ItemsCursor, Scratch,
};
/// Bytes of item header beside key and value (what `me` counts in an item's size).
pub use hkv_store::HEADER_BYTES as ITEM_HEADER_BYTES;
pub use hkv_store::{chunk_sizes, ClassReport, ReassignError, StoreStats, REALTIME_MAXDELTA};
pub use hkv_store::{MAX_AGE_RATIO as SLAB_AUTOMOVE_RATIO, WINDOW as SLAB_AUTOMOVE_WINDOW};
pub use hkv_types::{
    hit, After, Cmp, Elem, Meta, Op, PinRelease, Pinned, Previous, ReadStats, ReduceOp, Reduced,
    Request, Response, Responses, Staged, UpdateOp, Vector, VectorCall, VectorError,
};
pub use index::placement::DeviceTable;
pub use index::IndexReport;
pub use partition::placement::VectorPlacement;
pub use partition::{Partition, READ_GROUP};
pub use policy::{Choice, Placement, PlacementError, Proc, Task, TASKS};
pub use profile::ProfileReport;
pub use schedule::{Arrived, LinearFit, Sample, ScheduleConfig, ScheduleStats, Scheduler};
pub use stats::EngineStats;
