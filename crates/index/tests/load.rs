//! How full the 2x8 bucketed cuckoo table gets before the first insert fails (a
//! displacement walk reaches its bound and evicts): the engine grows its table at 0.85 and
//! counts on the headroom measured here. docs/index.md quotes these figures.

use hkv_index::{hash_key, CpuIndex, IndexBackend, InsertOutcome, SLOTS};
use hkv_mem::Arena;

fn load_at_first_eviction(buckets: u32, salt: u64) -> f64 {
    let arena = Arena::new(buckets as usize * 64 + (4 << 20)).unwrap();
    let mut ix = CpuIndex::new(&arena, buckets).unwrap();
    let slots = buckets as u64 * SLOTS as u64;
    for i in 0..slots {
        let key = format!("{salt}:{i}");
        match ix.insert_one(&hash_key(key.as_bytes()), i as u32) {
            InsertOutcome::Inserted => {}
            // A same-signature key (32-bit signatures, two candidate buckets) is not a
            // failure of the table.
            InsertOutcome::Replaced(_) => {}
            InsertOutcome::Evicted(_) => return ix.stats().entries as f64 / slots as f64,
        }
    }
    1.0
}

#[test]
fn the_table_fills_past_95_percent_before_its_first_eviction() {
    for (buckets, salt) in [(1u32 << 10, 1u64), (1 << 14, 2), (1 << 16, 3), (1 << 16, 4)] {
        let load = load_at_first_eviction(buckets, salt);
        println!("buckets {buckets}: first eviction at load {load:.4}");
        assert!(
            load >= 0.95,
            "{buckets} buckets: first eviction at load {load:.4}"
        );
    }
}
