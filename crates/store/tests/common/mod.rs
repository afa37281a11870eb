//! What the store's integration tests share: a store over its own arena, and a clock.

use std::sync::Arc;

use hkv_mem::Arena;
use hkv_store::{SlabStore, StoreConfig};

pub const NOW: u32 = 1_700_000_000;

/// A store of `budget` bytes in pages of `page` bytes, values up to 64 MiB (chained past
/// the largest chunk). The arena is returned too: it must outlive the store.
pub fn store(budget: usize, page: usize) -> (Arc<Arena>, SlabStore) {
    let arena = Arc::new(Arena::new(budget).unwrap());
    let cfg = StoreConfig {
        page_size: page,
        max_value: 64 << 20,
        ..StoreConfig::default()
    };
    (arena.clone(), SlabStore::new(arena, &cfg))
}
