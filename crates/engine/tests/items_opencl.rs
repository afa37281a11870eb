//! Differential test of the KC and RD kernels (`items.cl`) against the CPU's KC and RD on the
//! same slab store, on PoCL in CI: for every query the same verdict (live, expired, another
//! key's item, nothing there) and value length, and for every live flat item the same bytes.

use std::sync::Arc;

use hkv_index::opencl::{KcVerdict, OclIndex, OclItems, NO_CHUNK, VALUE_CHAINED};
use hkv_mem::Arena;
use hkv_store::{device_layout, SlabStore, StoreConfig};
use proptest::prelude::*;

const NOW: u32 = 1_700_000_000;

fn have_device() -> bool {
    if std::env::var_os("POCL_CACHE_DIR").is_none() {
        let dir = std::env::temp_dir().join("hkv-pocl-cache");
        let _ = std::fs::create_dir_all(&dir);
        std::env::set_var("POCL_CACHE_DIR", dir);
    }
    let up = OclIndex::new(1, None).is_ok();
    if !up {
        assert_ne!(
            std::env::var("HKV_REQUIRE_OPENCL").as_deref(),
            Ok("1"),
            "HKV_REQUIRE_OPENCL=1 but no OpenCL device"
        );
        eprintln!("no OpenCL device: the KC/RD kernel test did not run");
    }
    up
}

fn kernels(arena: &Arena) -> Option<OclItems> {
    let ix = OclIndex::new(1, None).ok()?;
    let (base, len) = arena.mapping();
    // SAFETY: the arena outlives the kernels (both live for one test case), and nothing
    // writes it while a kernel call runs (calls block, and the test is single-threaded).
    match unsafe { ix.item_unit(base.as_ptr(), len, &device_layout()) } {
        Ok(k) => Some(k),
        Err(e) => {
            // A device that does not share host memory has no KC/RD kernels (by design).
            assert!(
                !ix.device().host_unified_memory,
                "a shared-memory device failed to build KC/RD: {e}"
            );
            None
        }
    }
}

/// One stored item: its key, value length, and whether it expired or was freed since.
#[derive(Clone, Debug)]
struct Spec {
    key: Vec<u8>,
    value_len: usize,
    expired: bool,
    freed: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        proptest::collection::vec(any::<u8>(), 1..40),
        prop_oneof![0usize..64, 64usize..4096, 60_000usize..140_000],
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(key, value_len, expired, freed)| Spec {
            key,
            value_len,
            expired,
            freed,
        })
}

fn value_of(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|b| (b * 31 + i * 7) as u8).collect()
}

/// The CPU's KC of one query.
fn cpu_kc(store: &SlabStore, loc: u32, key: &[u8]) -> (KcVerdict, u32) {
    match store.get(loc) {
        None => (KcVerdict::Miss, 0),
        Some(item) if !item.key_is(key) => (KcVerdict::OtherKey, 0),
        Some(item) if item.is_expired(NOW) => (KcVerdict::Expired, 0),
        Some(item) if item.is_chained() => (KcVerdict::Live, VALUE_CHAINED),
        Some(item) => (KcVerdict::Live, item.value_len() as u32),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn kc_and_rd_kernels_agree_with_the_cpu(specs in proptest::collection::vec(spec(), 1..120)) {
        if !have_device() {
            return Ok(());
        }
        let arena = Arc::new(Arena::new(32 << 20).unwrap());
        let Some(mut dev) = kernels(&arena) else { return Ok(()) };
        let mut store = SlabStore::new(
            arena.clone(),
            &StoreConfig { page_size: 64 << 10, max_value: 1 << 20, ..StoreConfig::default() },
        );
        let mut stored = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            let expiry = if s.expired { NOW - 5 } else { NOW + 3600 };
            let value = value_of(i, s.value_len);
            let Ok((loc, _)) = store.store(&s.key, &[&value], 7, expiry, NOW, |_, _, _| {}) else {
                continue;
            };
            if s.freed {
                store.free(loc);
            }
            stored.push((loc, s.key.clone()));
        }
        // Queries: each item's own key, another item's key at its location, nothing, and a near
        // miss.
        let mut queries: Vec<(Option<u32>, Vec<u8>)> = Vec::new();
        for (j, (loc, key)) in stored.iter().enumerate() {
            queries.push((Some(*loc), key.clone()));
            let other = &stored[(j + 1) % stored.len()].1;
            queries.push((Some(*loc), other.clone()));
            queries.push((None, key.clone()));
            // A key of the same length differing only in its last byte: KC must compare
            // every byte.
            let mut near = key.clone();
            *near.last_mut().unwrap() ^= 1;
            queries.push((Some(*loc), near));
        }
        let at: Vec<u64> = queries
            .iter()
            .map(|(loc, _)| loc.and_then(|l| store.chunk_offset(l)).unwrap_or(NO_CHUNK))
            .collect();
        let mut keys = Vec::new();
        let mut key_at = vec![0u32];
        for (_, k) in &queries {
            keys.extend_from_slice(k);
            key_at.push(keys.len() as u32);
        }
        let (mut found, mut lens) = (Vec::new(), Vec::new());
        dev.kc(&at, &keys, &key_at, NOW, &mut found, &mut lens).unwrap();
        let mut hits = Vec::new();
        let mut out_at = vec![0u32];
        for (q, (loc, key)) in queries.iter().enumerate() {
            let want = loc.map_or((KcVerdict::Miss, 0), |l| cpu_kc(&store, l, key));
            prop_assert_eq!((found[q], lens[q]), want, "query {} key {:?}", q, key);
            if found[q] == KcVerdict::Live && lens[q] != VALUE_CHAINED {
                hits.push((loc.unwrap(), at[q]));
                out_at.push(out_at.last().unwrap() + lens[q]);
            }
        }
        let hit_at: Vec<u64> = hits.iter().map(|h| h.1).collect();
        let mut out = Vec::new();
        dev.rd(&hit_at, &out_at, &mut out).unwrap();
        for (h, (loc, _)) in hits.iter().enumerate() {
            let item = store.get(*loc).unwrap();
            let mut want = Vec::new();
            store.copy_value(&item, &mut want);
            prop_assert_eq!(&out[out_at[h] as usize..out_at[h + 1] as usize], &want[..]);
        }
    }
}

/// Bad offsets are refused before any kernel runs.
#[test]
fn kc_and_rd_refuse_inconsistent_offsets() {
    if !have_device() {
        return;
    }
    let arena = Arena::new(1 << 20).unwrap();
    let Some(mut dev) = kernels(&arena) else {
        return;
    };
    let (mut f, mut l) = (Vec::new(), Vec::new());
    assert!(dev.kc(&[0], b"k", &[0], NOW, &mut f, &mut l).is_err());
    assert!(dev.kc(&[0], b"k", &[0, 2], NOW, &mut f, &mut l).is_err());
    let mut out = Vec::new();
    assert!(dev.rd(&[0, 0], &[0, 4, 2], &mut out).is_err());
    assert!(dev.rd(&[], &[0], &mut out).is_ok() && out.is_empty());
}
