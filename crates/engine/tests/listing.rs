//! `stats cachedump` and `lru_crawler metadump` over a cache larger than one slice of the
//! walk: the engine lets go of a partition between slices, and the listing still sees
//! every item once, the newest first where asked.

use std::collections::HashSet;

use hkv_engine::Scratch;
use hkv_engine::{Engine, EngineConfig, Op, Request, Responses};

const NOW: u32 = 1_700_000_000;
/// More than one slice (16K chunks) in each of two partitions.
const KEYS: usize = 80_000;

fn engine(partitions: u32) -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes: 64 << 20,
        partitions,
        page_size: 64 << 10,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn set_all(e: &Engine, keys: &[String], value: &[u8]) {
    let mut scratch = Scratch::default();
    for chunk in keys.chunks(1000) {
        let reqs: Vec<Request<'_>> = chunk
            .iter()
            .map(|k| Request::store(Op::Set, k.as_bytes(), value, 0, 0))
            .collect();
        let mut out = Responses::default();
        e.execute(&reqs, NOW, &mut out, &mut scratch);
    }
}

#[test]
fn item_listings_walked_in_slices_see_every_item_once() {
    for partitions in [1, 2] {
        let e = engine(partitions);
        let keys: Vec<String> = (0..KEYS).map(|i| format!("key:{i:06}")).collect();
        set_all(&e, &keys, b"value-of-sixteen");
        let all = e.items(None, usize::MAX, NOW);
        let seen: HashSet<&[u8]> = all.iter().map(|i| &i.key[..]).collect();
        assert_eq!(all.len(), KEYS, "every item listed");
        assert_eq!(seen.len(), KEYS, "and each once");
        let class = all[0].class;
        assert!(all.iter().all(|i| i.class == class), "one size, one class");
        assert_eq!(
            e.items(Some(&[class]), 100, NOW).len(),
            100,
            "the limit holds"
        );
        assert!(e.items(Some(&[class + 1]), 100, NOW).is_empty());
    }
}

/// Within a partition CAS values order the writes exactly (across partitions their
/// counters interleave: docs/protocol.md).
#[test]
fn a_cachedump_walked_in_slices_lists_the_newest_items_first() {
    let e = engine(1);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("key:{i:06}")).collect();
    set_all(&e, &keys, b"value-of-sixteen");
    // Rewritten last, so the newest of their class, wherever their chunks lie.
    let newest: Vec<String> = (0..5).map(|i| keys[i * 7919].clone()).collect();
    set_all(&e, &newest, b"value-of-sixteen");
    let class = e.items(None, 1, NOW)[0].class;
    let dump = e.newest_items(class, 5, NOW);
    let mut got: Vec<String> = dump
        .iter()
        .map(|i| String::from_utf8(i.key.clone()).unwrap())
        .collect();
    let mut want = newest.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "the five rewritten last");
    assert!(dump.windows(2).all(|w| w[0].cas > w[1].cas), "newest first");
}

#[test]
fn regression_a_listing_of_some_classes_is_not_cut_short_by_the_others_items() {
    // `lru_crawler metadump 1,2` listed items of every class up to its limit and then kept
    // those of the classes asked for: a large class walked first used up the limit, and
    // the classes asked for came out short or empty.
    let e = engine(2);
    let small: Vec<String> = (0..KEYS).map(|i| format!("small:{i:06}")).collect();
    set_all(&e, &small, b"v");
    let large: Vec<String> = (0..50).map(|i| format!("large:{i:06}")).collect();
    set_all(&e, &large, &[b'x'; 3000]);
    let small_class = e.items(None, 1, NOW)[0].class;
    let all = e.items(None, usize::MAX, NOW);
    let large_class = all.iter().map(|i| i.class).max().unwrap();
    assert!(
        large_class > small_class,
        "walked after the small items' class"
    );
    let got = e.items(Some(&[large_class, large_class + 1]), 1000, NOW);
    assert_eq!(got.len(), 50, "every item of the classes asked for");
    assert!(got.iter().all(|i| i.class == large_class));
    // Ids past the last class name nothing, and are no error.
    assert!(e.items(Some(&[200]), 10, NOW).is_empty());
}
