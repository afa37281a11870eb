//! The item listings: `lru_crawler metadump`'s walk in slices and `stats cachedump`'s newest
//! writes.

mod common;

use common::{store, NOW};
use hkv_store::SlabStore;

#[test]
fn an_item_listing_in_slices_sees_what_one_walk_sees_and_stops_when_told() {
    let (_a, mut s) = store(1 << 20, 64 << 10);
    for i in 0..40 {
        // Every fourth expires before the listing; the long values land in another class.
        let exp = if i % 4 == 0 { NOW + 5 } else { 0 };
        let value = if i % 2 == 0 {
            vec![b'v'; 1]
        } else {
            vec![b'w'; 300]
        };
        s.store(
            format!("k{i:02}").as_bytes(),
            &[&value],
            0,
            exp,
            NOW,
            |_, _, _| {},
        )
        .unwrap();
    }
    let whole = |class: Option<usize>| {
        let mut keys = Vec::new();
        s.for_each_item(NOW + 9, |c, it| {
            if class.is_none_or(|want| want == c) {
                keys.push(it.key().to_vec());
            }
            true
        });
        keys
    };
    let sliced = |classes: Option<&[usize]>| {
        let mut keys = Vec::new();
        let mut cursor = hkv_store::CrawlCursor::default();
        while !cursor.done {
            let examined = s.scan_items(NOW + 9, classes, &mut cursor, 3, |_, it| {
                keys.push(it.key().to_vec());
                true
            });
            assert!(examined <= 3, "a slice examines at most its budget");
        }
        keys
    };
    assert_eq!(sliced(None), whole(None));
    assert_eq!(whole(None).len(), 30, "the expired ten are not listed");
    let long = s.class_for(3, 300).expect("a class");
    assert_eq!(sliced(Some(&[long])), whole(Some(long)));
    assert_eq!(whole(Some(long)).len(), 20);
    // Told to stop, the listing is done, whatever is left.
    let mut cursor = hkv_store::CrawlCursor::default();
    let mut seen = 0;
    s.scan_items(NOW + 9, None, &mut cursor, 100, |_, _| {
        seen += 1;
        seen < 5
    });
    assert_eq!(seen, 5);
    assert!(cursor.done);
}

#[test]
fn regression_cachedump_lists_the_last_writes_not_every_chunk_of_the_class() {
    let (_a, mut s) = store(4 << 20, 64 << 10);
    let n = hkv_store::RECENT_WRITES + 500;
    let mut locs = Vec::new();
    for i in 0..n {
        let (loc, _) = s
            .store(
                format!("k{i:05}").as_bytes(),
                &[b"v"],
                0,
                0,
                NOW,
                |_, _, _| {},
            )
            .unwrap();
        locs.push(loc);
    }
    let class = s.class_for(6, 1).expect("a class");
    let listed = |s: &SlabStore, walk: u32| {
        let mut keys = Vec::new();
        s.newest_items(class, NOW, walk, |it| {
            keys.push(String::from_utf8(it.key().to_vec()).unwrap());
            true
        });
        keys
    };
    let newest = |s: &SlabStore| listed(s, 0);
    let keys = newest(&s);
    assert_eq!(
        keys.len(),
        hkv_store::RECENT_WRITES,
        "the ring's reach, no more, without a walk"
    );
    assert_eq!(keys[0], format!("k{:05}", n - 1), "newest first");
    assert_eq!(
        keys.last().unwrap(),
        &format!("k{:05}", n - hkv_store::RECENT_WRITES)
    );
    // Rewritten in place: listed once, at the front. Deleted: not listed.
    let key = format!("k{:05}", n - 10);
    assert!(s
        .overwrite(locs[n - 10], key.as_bytes(), &[b"w"], 0, 0, NOW)
        .is_some());
    assert!(s.free(locs[n - 1]));
    let keys = newest(&s);
    assert_eq!(keys[0], format!("k{:05}", n - 10));
    assert_eq!(
        keys.iter()
            .filter(|k| **k == format!("k{:05}", n - 10))
            .count(),
        1
    );
    assert!(!keys.contains(&format!("k{:05}", n - 1)));
    // One key rewritten until it fills the ring alone: the walk lists the others after it,
    // each once, and no further than it was told to walk.
    for _ in 0..hkv_store::RECENT_WRITES {
        s.overwrite(locs[0], b"k00000", &[b"x"], 0, 0, NOW).unwrap();
    }
    assert_eq!(newest(&s), ["k00000"]);
    let keys = listed(&s, 100);
    assert_eq!(
        keys.len(),
        100,
        "k00000, then 99 more of the first 100 chunks"
    );
    assert_eq!(keys[0], "k00000");
    assert_eq!(keys.iter().filter(|k| *k == "k00000").count(), 1);
    assert_eq!(listed(&s, u32::MAX).len(), n - 1, "all but the deleted one");
    s.clear();
    assert!(
        listed(&s, u32::MAX).is_empty(),
        "flush_all empties the listing"
    );
}
