//! Slab automove by age (store/automove.rs): a class that keeps evicting young items takes
//! pages from a class whose items sit unread, as memcached's `slab_automove=1` does, and
//! only after evicting for more than half its window.

mod common;

use std::collections::HashMap;

use common::{store, NOW};
use hkv_store::{Location, SlabStore, WINDOW};

const PAGE: usize = 4096;

/// Small items (40-byte values) in every page of an 8-page store, stored at `NOW`.
fn filled_with_small_items() -> SlabStore {
    let (_a, mut s) = store(8 * PAGE, PAGE);
    // The arena must outlive the store: keep it alive for the test's length.
    std::mem::forget(_a);
    for i in 0..1000u32 {
        let _ = s.store(
            format!("s{i:04}").as_bytes(),
            &[&[1u8; 40]],
            0,
            0,
            NOW,
            |_, _, _| {},
        );
    }
    assert_eq!(s.stats().pages, 8);
    s
}

/// Writes four fresh 1,000-byte values a second from `start` for `seconds`, ticking
/// automove once a second. Returns the live large items' locations, newest last.
fn write_large_values(
    s: &mut SlabStore,
    start: u32,
    seconds: u32,
    small_read_each_second: bool,
) -> Vec<(String, Location)> {
    let mut live: HashMap<String, Location> = HashMap::new();
    let mut order = Vec::new();
    let mut n = 0u32;
    for t in 0..seconds {
        let now = start + t;
        let mut gone = Vec::new();
        for _ in 0..4 {
            let key = format!("L{n:05}");
            n += 1;
            let (loc, _) = s
                .store(key.as_bytes(), &[&[2u8; 1000]], 0, 0, now, |it, _, _| {
                    gone.push(String::from_utf8_lossy(it.key()).into_owned())
                })
                .expect("a large value is stored");
            live.insert(key.clone(), loc);
            order.push(key);
        }
        if small_read_each_second {
            // The small items are rewritten every second: as young as the large ones.
            for i in 0..1000u32 {
                let _ = s.store(
                    format!("s{i:04}").as_bytes(),
                    &[&[1u8; 40]],
                    0,
                    0,
                    now,
                    |it, _, _| gone.push(String::from_utf8_lossy(it.key()).into_owned()),
                );
            }
        }
        s.automove_tick(now, |it, _, _| {
            gone.push(String::from_utf8_lossy(it.key()).into_owned())
        });
        for k in gone {
            live.remove(&k);
        }
    }
    order
        .into_iter()
        .filter_map(|k| live.get(&k).map(|&l| (k, l)))
        .collect()
}

#[test]
fn a_class_that_keeps_evicting_young_items_takes_pages_from_one_left_unread() {
    let mut s = filled_with_small_items();
    // The small items have gone unread for 100 s when the large values start.
    let live = write_large_values(&mut s, NOW + 100, 60, false);
    let moved = s.stats().pages_moved;
    // The first page comes at once (the class had none); the others by age, one a tick
    // once the class has evicted for more than half the window.
    assert!(moved >= 5, "pages moved: {moved}");
    // Three 1,000-byte values fit a 4 KiB page: the newest hold more than one page now,
    // each readable with its own bytes.
    assert!(live.len() >= 3 * 5, "large values live: {}", live.len());
    for (key, loc) in &live {
        let item = s.get(*loc).expect("live");
        assert_eq!(item.key(), key.as_bytes());
        assert_eq!(item.flat_value().unwrap(), &[2u8; 1000][..]);
    }
    // What stays of the small class is intact.
    let mut small = 0;
    s.for_each_item(NOW + 200, |_, it| {
        if it.key().starts_with(b"s") {
            assert_eq!(it.flat_value().unwrap(), &[1u8; 40][..]);
            small += 1;
        }
        true
    });
    assert!(small > 0);
}

#[test]
fn no_page_moves_by_age_before_half_the_window_has_evictions() {
    let mut s = filled_with_small_items();
    let seconds = (WINDOW / 2) as u32;
    write_large_values(&mut s, NOW + 100, seconds, false);
    // Only the page the large class had to get to store anything at all.
    assert_eq!(s.stats().pages_moved, 1);
}

#[test]
fn no_page_moves_while_the_other_class_is_as_young() {
    let mut s = filled_with_small_items();
    write_large_values(&mut s, NOW + 100, 60, true);
    assert_eq!(s.stats().pages_moved, 1);
}

#[test]
fn automove_off_moves_nothing_by_age() {
    let mut s = filled_with_small_items();
    // One page for the large class first, as the store gives an empty class with automove on.
    s.store(b"first", &[&[2u8; 1000]], 0, 0, NOW, |_, _, _| {})
        .unwrap();
    s.set_automove(false);
    write_large_values(&mut s, NOW + 100, 60, false);
    assert_eq!(s.stats().pages_moved, 1);
}
