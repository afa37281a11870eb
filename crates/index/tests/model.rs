//! Property test: the index against a plain map from (signature pair) to location.

use std::collections::HashMap;

use hkv_index::{hash_key, CpuIndex, IndexBackend, InsertOutcome, KeyHash, NO_LOCATION};
use hkv_mem::Arena;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Insert(u16),
    Delete(u16),
    DeleteStale(u16),
    Search(Vec<u16>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u16>().prop_map(Op::Insert),
        1 => any::<u16>().prop_map(Op::Delete),
        1 => any::<u16>().prop_map(Op::DeleteStale),
        2 => proptest::collection::vec(any::<u16>(), 1..80).prop_map(Op::Search),
    ]
}

fn key(k: u16, space: u16) -> KeyHash {
    hash_key(&(k % space).to_le_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn index_agrees_with_a_map(
        buckets_log in 0u32..6,
        space in 8u16..600,
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let arena = Arena::new(4 << 20).unwrap();
        let ix = CpuIndex::new(&arena, 1 << buckets_log).unwrap();
        check(ix, space, ops)?;
    }
}

/// The same property on the OpenCL backend (PoCL in CI, where HKV_REQUIRE_OPENCL=1 makes a
/// missing device a failure).
#[test]
fn opencl_index_agrees_with_a_map() {
    if std::env::var_os("POCL_CACHE_DIR").is_none() {
        let dir = std::env::temp_dir().join("hkv-pocl-cache");
        let _ = std::fs::create_dir_all(&dir);
        std::env::set_var("POCL_CACHE_DIR", dir);
    }
    if hkv_index::opencl::OclIndex::new(1, None).is_err() {
        assert_ne!(
            std::env::var("HKV_REQUIRE_OPENCL").as_deref(),
            Ok("1"),
            "HKV_REQUIRE_OPENCL=1 but no OpenCL device"
        );
        eprintln!("no OpenCL device: the OpenCL index property test did not run");
        return;
    }
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(24));
    runner
        .run(
            &(0u32..6, 8u16..600, proptest::collection::vec(op(), 1..200)),
            |(buckets_log, space, ops)| {
                let ix = hkv_index::opencl::OclIndex::new(1 << buckets_log, None).unwrap();
                check(ix, space, ops)
            },
        )
        .unwrap();
}

fn insert_one(ix: &mut impl IndexBackend, h: &KeyHash, loc: u32) -> InsertOutcome {
    let mut out = [InsertOutcome::Inserted];
    ix.insert(&[(*h, loc)], &mut out);
    out[0]
}

fn delete_one(ix: &mut impl IndexBackend, h: &KeyHash, loc: u32) -> bool {
    let mut out = [false];
    ix.delete(&[(*h, loc)], &mut out);
    out[0]
}

fn check(mut ix: impl IndexBackend, space: u16, ops: Vec<Op>) -> Result<(), TestCaseError> {
    {
        // The model: key -> location. The index may drop entries only through a reported
        // eviction (Evicted) or a signature collision (Replaced with another key's location).
        let mut model: HashMap<u16, u32> = HashMap::new();
        let loc_owner = |model: &HashMap<u16, u32>, l: u32| {
            model.iter().find(|(_, &v)| v == l).map(|(&k, _)| k)
        };
        let mut next_loc = 0u32;
        for op in ops {
            match op {
                Op::Insert(k) => {
                    let k = k % space;
                    next_loc += 1; // locations unique, as the store guarantees
                    match insert_one(&mut ix, &key(k, space), next_loc) {
                        InsertOutcome::Inserted => {
                            prop_assert!(!model.contains_key(&k));
                        }
                        InsertOutcome::Replaced(old) => {
                            match model.get(&k) {
                                Some(&l) => prop_assert_eq!(l, old),
                                None => {
                                    // A different key with the same signature in the pair.
                                    let other = loc_owner(&model, old);
                                    prop_assert!(other.is_some());
                                    model.remove(&other.unwrap());
                                }
                            }
                        }
                        InsertOutcome::Evicted(l) => {
                            if l != next_loc {
                                let other = loc_owner(&model, l);
                                prop_assert!(other.is_some(), "evicted a location nobody had");
                                model.remove(&other.unwrap());
                            } else {
                                model.remove(&k);
                                continue;
                            }
                        }
                    }
                    model.insert(k, next_loc);
                }
                Op::Delete(k) => {
                    let k = k % space;
                    let l = model.get(&k).copied().unwrap_or(NO_LOCATION - 1);
                    let done = delete_one(&mut ix, &key(k, space), l);
                    prop_assert_eq!(done, model.remove(&k).is_some());
                }
                Op::DeleteStale(k) => {
                    let k = k % space;
                    prop_assert!(!delete_one(&mut ix, &key(k, space), 999_999_999));
                }
                Op::Search(ks) => {
                    let hs: Vec<KeyHash> = ks.iter().map(|&k| key(k, space)).collect();
                    let mut out = vec![0; hs.len()];
                    ix.search(&hs, &mut out);
                    for (k, l) in ks.iter().zip(out) {
                        let want = model.get(&(k % space)).copied().unwrap_or(NO_LOCATION);
                        prop_assert_eq!(l, want);
                    }
                }
            }
            prop_assert_eq!(ix.stats().entries as usize, model.len());
        }
    }
    Ok(())
}
