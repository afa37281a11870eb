//! Chained items: values past the largest chunk, stored as a header and parts (store/chain.rs),
//! through store, read, rewrite, CLOCK, page moves, expiry and retirement.

mod common;

use common::{store, NOW};
use hkv_store::{Reclaim, SlabStore, StoreError, HEADER_BYTES};

/// The value of the item at `loc`, however it is stored.
fn value_of(s: &SlabStore, loc: u32) -> Option<Vec<u8>> {
    let it = s.get(loc)?;
    let mut v = Vec::new();
    s.copy_value(&it, &mut v);
    Some(v)
}

/// Chunks holding parts of chained items, as `stats slabs` counts them.
fn parts_in_use(s: &SlabStore) -> u64 {
    s.class_reports().map(|r| r.parts).sum()
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

#[test]
fn a_value_past_the_largest_chunk_is_chained_and_read_back_whole() {
    let (_a, mut s) = store(4 << 20, 64 << 10);
    let cap = s.max_item_payload();
    // A value of exactly two full parts, one with a tail, and one built from pieces.
    for (i, len) in [2 * cap, 2 * cap + 1, 3 * cap + 12345]
        .into_iter()
        .enumerate()
    {
        let v = pattern(i as u32, len);
        let (a, b) = v.split_at(len / 3);
        let (loc, _) = s
            .store(b"big", &[a, b], 9, 0, NOW, |_, _, _| panic!("no reclaim"))
            .unwrap();
        let it = s.get(loc).unwrap();
        assert!(it.is_chained() && it.flat_value().is_none());
        assert_eq!(
            (it.key(), it.value_len(), it.flags()),
            (&b"big"[..], len, 9)
        );
        assert_eq!(value_of(&s, loc).unwrap(), v);
        assert_eq!(s.stats().bytes, 32 + 3 + len as u64);
        assert_eq!(s.stats().curr_items, 1);
        // In-place rewrites reach every part.
        let w = pattern(99, len);
        assert!(s.write_value(loc, &w));
        assert_eq!(value_of(&s, loc).unwrap(), w);
        assert!(
            s.value_mut(loc).is_none(),
            "no flat view of a chained value"
        );
        assert_eq!(parts_in_use(&s), len.div_ceil(cap) as u64);
        assert!(s.free(loc));
        assert_eq!((s.stats().bytes, s.stats().curr_items), (0, 0));
        assert_eq!(parts_in_use(&s), 0);
    }
    // Everything freed: the same memory holds the largest value again, without evicting.
    let v = pattern(7, 3 * cap + 12345);
    let (loc, _) = s
        .store(b"again", &[&v], 0, 0, NOW, |_, _, _| panic!("no reclaim"))
        .unwrap();
    assert_eq!(value_of(&s, loc).unwrap(), v);
    assert!(s.stats().largest_chunk >= (HEADER_BYTES + 5 + v.len()) as u64);
}

#[test]
fn a_chained_value_that_does_not_fit_gives_its_parts_back() {
    // 4 pages in all: a value needing 5 full parts cannot be stored, and must leave
    // nothing taken behind (the small item stays, and a 3-part value still fits).
    let (_a, mut s) = store(4 * (64 << 10) + 4096, 64 << 10);
    let cap = s.max_item_payload();
    let (small, _) = s.store(b"small", &[b"v"], 0, 0, NOW, |_, _, _| {}).unwrap();
    let huge = vec![3u8; 5 * cap];
    let mut reclaimed = 0;
    assert_eq!(
        s.store(b"huge", &[&huge], 0, 0, NOW, |_, _, _| reclaimed += 1),
        Err(StoreError::OutOfMemory)
    );
    assert_eq!(s.stats().out_of_memory, 1);
    assert_eq!(value_of(&s, small).unwrap(), b"v");
    let fits = vec![4u8; 2 * cap + 10];
    let (loc, _) = s.store(b"fits", &[&fits], 0, 0, NOW, |_, _, _| {}).unwrap();
    assert_eq!(value_of(&s, loc).unwrap(), fits);
}

/// Under memory pressure from chained and flat items alike, CLOCK takes whole items: every
/// read finds the last value written for its key or nothing, memory stays in budget, and
/// every reclaimed item is reported once with the location it was found at.
#[test]
fn chained_items_are_evicted_whole_and_never_read_torn() {
    let budget = 24 * (64 << 10);
    let (arena, mut s) = store(budget, 64 << 10);
    let cap = s.max_item_payload();
    let mut live: std::collections::HashMap<Vec<u8>, (u32, u32, usize)> = Default::default();
    let mut rng = 0x9E37_79B9u32;
    for round in 0..3000u32 {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        let key = format!("k{}", rng % 40).into_bytes();
        let len = match rng % 4 {
            0 => (rng as usize >> 8) % (4 * cap) + cap,
            1 => (rng as usize >> 8) % 2000 + 1,
            2 => (rng as usize >> 8) % cap,
            _ => 2 * cap,
        };
        let value = pattern(round, len);
        if let Some((loc, _, _)) = live.remove(&key) {
            assert!(s.free(loc));
        }
        let mut gone = Vec::new();
        let r = s.store(&key, &[&value], 0, 0, NOW, |it, loc, why| {
            assert_eq!(why, Reclaim::Evicted);
            gone.push((it.key().to_vec(), loc));
        });
        for (k, loc) in gone {
            let (l, _, _) = live.remove(&k).expect("a reclaimed item was live");
            assert_eq!(l, loc, "reported where it was stored");
        }
        if let Ok((loc, _)) = r {
            live.insert(key, (loc, round, len));
        }
        assert!(arena.used() <= arena.limit());
        for (k, &(loc, seed, len)) in &live {
            let it = s.get(loc).expect("a live item is readable");
            assert_eq!(it.key(), &k[..]);
            if round % 97 == 0 {
                assert_eq!(value_of(&s, loc).unwrap(), pattern(seed, len));
            }
        }
        assert_eq!(s.stats().curr_items, live.len() as u64);
    }
    assert!(
        s.stats().evictions > 100,
        "the run evicted: {:?}",
        s.stats()
    );
    let parts: u64 = live
        .iter()
        .filter(|(k, &(_, _, len))| k.len() + len > cap)
        .map(|(_, &(_, _, len))| len.div_ceil(cap) as u64)
        .sum();
    assert_eq!(
        parts_in_use(&s),
        parts,
        "parts counted as stats slabs shows them"
    );
}

#[test]
fn a_retired_chained_item_holds_its_parts_until_freed() {
    let (_a, mut s) = store(8 * (64 << 10), 64 << 10);
    let cap = s.max_item_payload();
    let v = pattern(1, 3 * cap);
    let (loc, _) = s.store(b"big", &[&v], 0, 0, NOW, |_, _, _| {}).unwrap();
    assert!(s.retire(loc));
    assert!(s.get(loc).is_none());
    // Fill the rest: the retired item's parts are neither evicted nor reused meanwhile.
    let mut others = Vec::new();
    while let Ok((l, _)) = s.store(b"x", &[&pattern(2, cap)], 0, 0, NOW, |_, _, _| {}) {
        others.push(l);
        if others.len() > 64 {
            break;
        }
    }
    assert!(s.is_retired(loc));
    assert!(!s.free(loc), "a retired item was already uncounted");
    // Its three parts are free again: the same value fits without evicting anything.
    let n = others.len();
    let mut evicted = 0;
    s.store(b"big2", &[&v], 0, 0, NOW, |_, _, _| evicted += 1)
        .unwrap();
    assert!(evicted <= n);
}

#[test]
fn a_page_move_takes_chained_items_whole() {
    let (_a, mut s) = store(6 * (64 << 10) + 4096, 64 << 10);
    let cap = s.max_item_payload();
    let v = pattern(5, 2 * cap + 100);
    let (big, _) = s.store(b"big", &[&v], 0, 0, NOW, |_, _, _| {}).unwrap();
    let largest = s.classes().count() - 1;
    let mut gone = Vec::new();
    // The largest class holds the two full parts: a page of it moves to class 3.
    s.reassign(largest, 3, NOW, |it, loc, _| {
        gone.push((it.key().to_vec(), loc))
    })
    .unwrap();
    assert_eq!(gone, vec![(b"big".to_vec(), big)]);
    assert!(s.get(big).is_none());
    assert_eq!((s.stats().curr_items, s.stats().bytes), (0, 0));
    // Its other chunks were freed: a new chained value fits in what is left.
    let (again, _) = s.store(b"again", &[&v], 0, 0, NOW, |_, _, _| {}).unwrap();
    assert_eq!(value_of(&s, again).unwrap(), v);
}

#[test]
fn expired_chained_items_are_swept_with_their_parts() {
    let (_a, mut s) = store(8 * (64 << 10), 64 << 10);
    let cap = s.max_item_payload();
    let v = pattern(3, 2 * cap + 1);
    s.store(b"big", &[&v], 0, NOW + 1, NOW, |_, _, _| {})
        .unwrap();
    let mut seen = 0;
    let freed = s.sweep_expired(NOW + 2, 1 << 20, |it, _, why| {
        assert_eq!((it.key(), why), (&b"big"[..], Reclaim::Expired));
        seen += 1;
    });
    assert_eq!((freed, seen), (1, 1));
    assert_eq!((s.stats().curr_items, s.stats().bytes), (0, 0));
    let (loc, _) = s
        .store(b"next", &[&v], 0, 0, NOW, |_, _, _| {
            panic!("memory was freed")
        })
        .unwrap();
    assert_eq!(value_of(&s, loc).unwrap(), v);
}

#[test]
fn a_chained_item_larger_than_its_class_takes_pages_from_other_classes() {
    // Small items take every page but two; an 8 MiB value then needs eight pages of the
    // largest class, which has none: they come from the other classes (their items
    // evicted and reported), as memcached's automove would move them.
    let (arena, mut s) = store(16 << 20, 1 << 20);
    let mut i = 0;
    while arena.available() >= 2 << 20 {
        let v = pattern(i, 100 + (i as usize * 37) % 3000);
        s.store(format!("s{i}").as_bytes(), &[&v], 0, 0, NOW, |_, _, _| {
            panic!("room left")
        })
        .unwrap();
        i += 1;
    }
    let before = s.stats().curr_items;
    let v = pattern(1, 8 << 20);
    let mut evicted = 0;
    let (loc, _) = s
        .store(b"m", &[&v], 0, 0, NOW, |_, _, why| {
            assert_eq!(why, Reclaim::Evicted);
            evicted += 1;
        })
        .unwrap();
    assert_eq!(value_of(&s, loc).unwrap(), v);
    assert!(evicted > 0);
    assert_eq!(s.stats().curr_items, before - evicted + 1);
    assert!(arena.used() <= arena.limit());
}

#[test]
fn regression_a_pinned_last_page_does_not_block_a_chained_store() {
    // Review finding: the header of a chained value, taken first and pinned while its parts
    // are found, may sit on the last page of the class with the most pages; only that class
    // was asked for a page, so the store failed, and failed again on every retry.
    let (arena, mut s) = store(12 << 20, 1 << 20);
    let cap = s.max_item_payload();
    let big = pattern(4, 6 * cap);
    let key = b"big";
    let table = 4 * big.len().div_ceil(cap);
    // Fill memory with items of the header's class only (same key length, a value as long
    // as the header's table).
    let mut locs = Vec::new();
    while arena.available() >= (1 << 20) + 4096 || locs.len() < 10 {
        let (l, _) = s
            .store(b"h00", &[&pattern(9, table)], 0, 0, NOW, |_, _, _| {})
            .unwrap();
        locs.push(l);
    }
    let last = *locs.iter().max().unwrap();
    assert!(
        s.free(last),
        "a chunk on the class's last page is free first"
    );
    let (loc, _) = s
        .store(key, &[&big], 0, 0, NOW, |_, _, _| {})
        .expect("pages come from a class whose last page is not pinned");
    assert_eq!(value_of(&s, loc).unwrap(), big);
}

#[test]
fn regression_a_read_chained_item_keeps_its_second_chance() {
    // Review finding: every part tested and cleared its owner's one reference bit, so the
    // hand cleared it at one part and evicted at the next: a chained value read before
    // every store went the first time the hand reached it. Now only its first part (and
    // tail) weigh it, once per turn, as a flat item's bit is.
    let (_a, mut s) = store(40 * (64 << 10) + 4096, 64 << 10);
    let cap = s.max_item_payload();
    let mut n = 0u32;
    let mut cold = |s: &mut SlabStore, hot: Option<u32>| {
        n += 1;
        s.store(
            format!("cold{n}").as_bytes(),
            &[&pattern(n, 3 * cap)],
            0,
            0,
            NOW,
            |it, _, _| {
                assert!(
                    hot.is_none() || it.key() != b"hot",
                    "the item read before every store went"
                );
            },
        )
        .unwrap();
    };
    // Past the first turn: CLOCK has cleared the first items' bits and evicts in order.
    while s.stats().evictions < 15 {
        cold(&mut s, None);
    }
    let (hot, _) = s
        .store(b"hot", &[&pattern(1, 3 * cap)], 0, 0, NOW, |_, _, _| {})
        .unwrap();
    let before = s.stats().evictions;
    for _ in 0..60 {
        s.touch_ref(hot);
        cold(&mut s, Some(hot));
    }
    assert!(s.stats().evictions >= before + 50, "the hand went round");
    assert_eq!(value_of(&s, hot).unwrap(), pattern(1, 3 * cap));
}
