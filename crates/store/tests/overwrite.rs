//! A new version written over the live item in its own chunk (`SlabStore::overwrite`).

use std::sync::Arc;

use hkv_mem::Arena;
use hkv_store::{SlabStore, StoreConfig, FETCHED, STALE};

const NOW: u32 = 1_700_000_000;

fn store() -> (Arc<Arena>, SlabStore) {
    let arena = Arc::new(Arena::new(4 << 20).unwrap());
    let cfg = StoreConfig {
        page_size: 64 << 10,
        max_value: 1 << 20,
        ..StoreConfig::default()
    };
    (arena.clone(), SlabStore::new(arena, &cfg))
}

#[test]
fn an_overwrite_of_the_same_class_is_a_new_item_in_the_old_chunk() {
    let (_a, mut s) = store();
    let (loc, cas) = s
        .store(b"key", &[b"abcd"], 7, 0, NOW, |_, _, _| {})
        .unwrap();
    s.update_bits(loc, FETCHED | STALE, 0);
    let before = s.stats();
    let new_cas = s
        .overwrite(loc, b"key", &[b"wx", b"yz!"], 9, NOW + 60, NOW + 5)
        .expect("same class, nothing pinned");
    assert!(new_cas > cas, "a new version gets a new CAS");
    let it = s.get(loc).unwrap();
    assert_eq!(
        (it.key(), it.flat_value().unwrap(), it.flags(), it.cas()),
        (&b"key"[..], &b"wxyz!"[..], 9, new_cas)
    );
    assert_eq!((it.expiry(), it.atime()), (NOW + 60, NOW + 5));
    assert_eq!(it.bits(), 0, "fetched and stale belong to the old version");
    let after = s.stats();
    assert_eq!(after.curr_items, before.curr_items);
    assert_eq!(after.total_items, before.total_items + 1);
    assert_eq!(after.bytes, before.bytes + 1);
}

#[test]
fn an_overwrite_needing_another_class_or_of_another_key_changes_nothing() {
    let (_a, mut s) = store();
    let (loc, cas) = s
        .store(b"key", &[b"abcd"], 7, 0, NOW, |_, _, _| {})
        .unwrap();
    let big = vec![b'x'; 4000];
    assert_eq!(s.overwrite(loc, b"key", &[&big], 0, 0, NOW), None);
    assert_eq!(s.overwrite(loc, b"kez", &[b"abce"], 0, 0, NOW), None);
    let it = s.get(loc).unwrap();
    assert_eq!((it.flat_value().unwrap(), it.cas()), (&b"abcd"[..], cas));
    assert!(s.free(loc));
    assert_eq!(
        s.overwrite(loc, b"key", &[b"abcd"], 0, 0, NOW),
        None,
        "a free chunk is no item to overwrite"
    );
}

#[test]
fn a_value_a_send_still_reads_is_never_overwritten() {
    let (_a, mut s) = store();
    let value = vec![b'a'; 20_000];
    let (loc, _) = s.store(b"big", &[&value], 0, 0, NOW, |_, _, _| {}).unwrap();
    let pin = s.pin_value(loc).expect("a flat live value pins");
    let other = vec![b'b'; 20_000];
    assert_eq!(s.overwrite(loc, b"big", &[&other], 0, 0, NOW), None);
    assert!(
        pin.bytes().iter().all(|&b| b == b'a'),
        "the send reads the old bytes"
    );
    drop(pin);
    s.drain_unpins();
    assert!(s.overwrite(loc, b"big", &[&other], 0, 0, NOW).is_some());
}
