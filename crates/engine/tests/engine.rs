//! Engine semantics, request by request, as a memcached user relies on them.

use hkv_engine::Scratch;
use hkv_engine::{Engine, EngineConfig, Op, Request, Response, Responses};

const NOW: u32 = 1_700_000_000;

fn engine(partitions: u32) -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes: 8 << 20,
        partitions,
        page_size: 64 << 10,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// Runs one batch and renders each response as text, values inline.
fn run(e: &Engine, now: u32, reqs: &[Request<'_>]) -> Vec<String> {
    let mut out = Responses::default();
    e.execute(reqs, now, &mut out, &mut Scratch::default());
    assert_eq!(out.results.len(), reqs.len());
    out.results
        .iter()
        .map(|r| match r {
            Response::Value { flags, .. } => {
                format!("VALUE {} {}", String::from_utf8_lossy(&out.value(r)), flags)
            }
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn set_get_delete() {
    for parts in [1, 3] {
        let e = engine(parts);
        let r = run(
            &e,
            NOW,
            &[
                Request::store(Op::Set, b"a", b"1", 5, 0),
                Request::get(b"a"),
                Request::get(b"b"),
                Request::delete(b"a"),
                Request::get(b"a"),
                Request::delete(b"a"),
            ],
        );
        assert_eq!(
            r,
            ["Stored", "VALUE 1 5", "Miss", "Deleted", "Miss", "NotFound"]
        );
    }
}

#[test]
fn operations_on_one_key_in_one_batch_take_effect_in_arrival_order() {
    for parts in [1, 2] {
        let e = engine(parts);
        let mut reqs = Vec::new();
        let vals: Vec<String> = (0..200).map(|i| format!("v{i}")).collect();
        for (i, v) in vals.iter().enumerate() {
            let key: &[u8] = if i % 2 == 0 { b"x" } else { b"y" };
            reqs.push(Request::get(key));
            reqs.push(Request::set(key, v.as_bytes()));
            reqs.push(Request::get(key));
        }
        let r = run(&e, NOW, &reqs);
        for (i, v) in vals.iter().enumerate() {
            let before = &r[3 * i];
            if i < 2 {
                assert_eq!(before, "Miss");
            } else {
                assert_eq!(before, &format!("VALUE {} 0", vals[i - 2]));
            }
            assert_eq!(r[3 * i + 1], "Stored");
            assert_eq!(r[3 * i + 2], format!("VALUE {v} 0"));
        }
    }
}

#[test]
fn add_replace_append_prepend() {
    let e = engine(1);
    let r = run(
        &e,
        NOW,
        &[
            Request::store(Op::Replace, b"k", b"x", 0, 0),
            Request::store(Op::Append, b"k", b"x", 0, 0),
            Request::store(Op::Add, b"k", b"mid", 9, 0),
            Request::store(Op::Add, b"k", b"other", 0, 0),
            Request::store(Op::Append, b"k", b">>", 1, 0),
            Request::store(Op::Prepend, b"k", b"<<", 2, 0),
            Request::get(b"k"),
            Request::store(Op::Replace, b"k", b"new", 3, 0),
            Request::get(b"k"),
        ],
    );
    assert_eq!(
        r,
        [
            "NotStored",
            "NotStored",
            "Stored",
            "NotStored",
            "Stored",
            "Stored",
            "VALUE <<mid>> 9", // append/prepend keep the item's flags
            "Stored",
            "VALUE new 3",
        ]
    );
}

#[test]
fn cas_conflicts() {
    let e = engine(2);
    let mut out = Responses::default();
    e.execute(
        &[Request::set(b"c", b"1"), Request::gets(b"c")],
        NOW,
        &mut out,
        &mut Scratch::default(),
    );
    let Response::Value { cas, .. } = out.results[1] else {
        panic!("no value")
    };
    let r = run(
        &e,
        NOW,
        &[
            Request::cas(b"c", b"2", 0, 0, cas + 1),
            Request::cas(b"c", b"3", 0, 0, cas),
            Request::cas(b"c", b"4", 0, 0, cas),
            Request::cas(b"nope", b"4", 0, 0, cas),
            Request::get(b"c"),
        ],
    );
    assert_eq!(r, ["Exists", "Stored", "Exists", "NotFound", "VALUE 3 0"]);
    assert_eq!(e.stats().cas_badval, 2);
}

#[test]
fn incr_decr_follow_memcached() {
    let e = engine(1);
    let r = run(
        &e,
        NOW,
        &[
            Request::incr(b"n", 1),
            Request::set(b"n", b"18446744073709551614"),
            Request::incr(b"n", 1),
            Request::incr(b"n", 3), // wraps at 2^64
            Request::decr(b"n", 5), // stops at 0
            Request::set(b"n", b"99"),
            Request::incr(b"n", 1), // grows a digit: a new item
            Request::get(b"n"),
            Request::decr(b"n", 95),
            Request::get(b"n"),
            Request::set(b"t", b"text"),
            Request::incr(b"t", 1),
        ],
    );
    assert_eq!(
        r,
        [
            "NotFound",
            "Stored",
            "Number(18446744073709551615)",
            "Number(2)",
            "Number(0)",
            "Stored",
            "Number(100)",
            "VALUE 100 0",
            "Number(5)",
            // Shortened in place and padded with spaces, as memcached 1.6 does.
            "VALUE 5   0",
            "Stored",
            "NonNumeric",
        ]
    );
}

/// Found by a binary differential probe (stop 56): an INCR/DECR that creates its counter
/// already expired answered CAS 0, where memcached stores the counter (gone at once) and
/// answers the CAS it took. The counter is still not there afterwards.
#[test]
fn regression_a_counter_created_already_expired_answers_a_cas() {
    for parts in [1, 3] {
        let e = engine(parts);
        let create = Request {
            initial: Some(7),
            exptime: -1,
            ..Request::incr(b"gone", 1)
        };
        let mut out = Responses::default();
        e.execute(
            &[create, Request::get(b"gone")],
            NOW,
            &mut out,
            &mut Scratch::default(),
        );
        assert_eq!(out.results[0], Response::Number(7));
        assert_ne!(
            out.after[0].cas, 0,
            "the reply carries the CAS the item took"
        );
        // meta `t` shows 0 left, as for an mg N that creates an item already past its TTL
        // (it showed -1, never expiring: a differential probe, stop 57).
        let shown = out.after[0].expiry;
        assert!(shown != 0 && shown <= NOW, "raw expiry {shown}");
        assert_eq!(out.results[1], Response::Miss);
        // The next item gets a later CAS: the dead one used its number up.
        let mut next = Responses::default();
        e.execute(
            &[Request::set(b"gone", b"1"), Request::gets(b"gone")],
            NOW,
            &mut next,
            &mut Scratch::default(),
        );
        assert!(next.after[0].cas > out.after[0].cas);
    }
}

#[test]
fn expiry_relative_absolute_negative_and_touch() {
    let e = engine(1);
    let r = run(
        &e,
        NOW,
        &[
            Request::store(Op::Set, b"rel", b"r", 0, 10),
            Request::store(Op::Set, b"abs", b"a", 0, NOW as i64 + 20),
            Request::store(Op::Set, b"neg", b"n", 0, -1),
            Request::store(Op::Set, b"old", b"o", 0, NOW as i64 - 5),
            Request::get(b"rel"),
            Request::get(b"abs"),
            Request::get(b"neg"),
            Request::get(b"old"),
        ],
    );
    assert_eq!(r[4..], ["VALUE r 0", "VALUE a 0", "Miss", "Miss"]);
    let r = run(
        &e,
        NOW + 9,
        &[Request::get(b"rel"), Request::touch(b"rel", 100)],
    );
    assert_eq!(r, ["VALUE r 0", "Touched"]);
    let r = run(&e, NOW + 20, &[Request::get(b"rel"), Request::get(b"abs")]);
    assert_eq!(r, ["VALUE r 0", "Miss"]);
    let r = run(
        &e,
        NOW + 109,
        &[Request::get(b"rel"), Request::touch(b"abs", 5)],
    );
    assert_eq!(r, ["Miss", "NotFound"]);
    // A negative exptime on SET removes what was there.
    let r = run(
        &e,
        NOW + 200,
        &[
            Request::set(b"gone", b"v"),
            Request::store(Op::Set, b"gone", b"w", 0, -1),
            Request::get(b"gone"),
        ],
    );
    assert_eq!(r, ["Stored", "Stored", "Miss"]);
}

#[test]
fn background_sweep_frees_expired_items_without_access() {
    let e = engine(1);
    let keys: Vec<String> = (0..500).map(|i| format!("s{i}")).collect();
    let reqs: Vec<_> = keys
        .iter()
        .map(|k| Request::store(Op::Set, k.as_bytes(), b"v", 0, 2))
        .collect();
    run(&e, NOW, &reqs);
    assert_eq!(e.store_stats().curr_items, 500);
    run(&e, NOW + 3, &[Request::get(b"unrelated")]);
    assert_eq!(e.store_stats().curr_items, 0);
    assert_eq!(e.stats().expired_swept, 500);
}

#[test]
fn too_large_values_are_refused_and_remove_the_old_value() {
    let e = Engine::new(&EngineConfig {
        memory_bytes: 8 << 20,
        page_size: 64 << 10,
        max_value: 64 << 10,
        ..EngineConfig::default()
    })
    .unwrap();
    let big = vec![b'x'; 70 << 10];
    let r = run(
        &e,
        NOW,
        &[
            Request::set(b"k", b"small"),
            Request::set(b"k", &big),
            Request::get(b"k"),
        ],
    );
    assert_eq!(r, ["Stored", "TooLarge", "Miss"]);
}

#[test]
fn memory_limit_holds_under_a_flood_of_sets() {
    let e = engine(2);
    let value = vec![b'v'; 300];
    let keys: Vec<String> = (0..100_000).map(|i| format!("flood:{i}")).collect();
    for chunk in keys.chunks(1000) {
        let reqs: Vec<_> = chunk
            .iter()
            .map(|k| Request::set(k.as_bytes(), &value))
            .collect();
        let r = run(&e, NOW, &reqs);
        assert!(r.iter().all(|x| x == "Stored"));
        assert!(e.arena().used() <= e.arena().limit());
    }
    let s = e.store_stats();
    assert!(s.evictions > 0);
    // Everything stored is either still there or counted as evicted.
    assert_eq!(s.curr_items + e.evictions(), 100_000);
    // The most recent keys are readable and correct.
    let reqs: Vec<_> = keys[99_900..]
        .iter()
        .map(|k| Request::get(k.as_bytes()))
        .collect();
    let r = run(&e, NOW, &reqs);
    assert!(r
        .iter()
        .all(|x| x == &format!("VALUE {} 0", "v".repeat(300))));
}

/// Two keys whose 32-bit signatures collide, found by brute force (a birthday search).
fn colliding_keys() -> (Vec<u8>, Vec<u8>) {
    let mut seen = std::collections::HashMap::new();
    for i in 0u32.. {
        let k = format!("c{i}").into_bytes();
        let sig = hkv_index::hash_key(&k).sig;
        if let Some(other) = seen.insert(sig, k.clone()) {
            return (other, k);
        }
    }
    unreachable!()
}

#[test]
fn a_signature_collision_is_a_counted_eviction_never_a_wrong_value() {
    let (a, b) = colliding_keys();
    // One bucket: both keys share the bucket pair, so the index can hold only one of them.
    let e = Engine::new(&EngineConfig {
        memory_bytes: 4 << 20,
        page_size: 64 << 10,
        buckets_per_partition: Some(1),
        ..EngineConfig::default()
    })
    .unwrap();
    let r = run(
        &e,
        NOW,
        &[
            Request::set(&a, b"value-of-a"),
            Request::get(&a),
            Request::set(&b, b"value-of-b"),
            Request::get(&a),
            Request::get(&b),
            Request::delete(&a),
            Request::get(&b),
        ],
    );
    assert_eq!(
        r,
        [
            "Stored",
            "VALUE value-of-a 0",
            "Stored",
            "Miss",
            "VALUE value-of-b 0",
            "NotFound",
            "VALUE value-of-b 0",
        ]
    );
    assert_eq!(e.stats().collision_evictions, 1);
    assert_eq!(e.evictions(), 1);
    assert_eq!(
        e.store_stats().curr_items,
        1,
        "the evicted item's memory was freed"
    );
    // And the other way round: the index points at b; a GET for a must compare keys (KC).
    let r = run(&e, NOW, &[Request::get(&a), Request::gets(&a)]);
    assert_eq!(r, ["Miss", "Miss"]);
    assert!(e.stats().key_mismatches >= 2);
}

#[test]
fn gat_returns_the_value_and_moves_the_expiry() {
    let e = engine(2);
    let r = run(
        &e,
        NOW,
        &[
            Request::store(Op::Set, b"g", b"v", 4, 10),
            Request::gat(b"g", 100),
            Request::gat(b"missing", 100),
        ],
    );
    assert_eq!(r, ["Stored", "VALUE v 4", "Miss"]);
    let r = run(&e, NOW + 50, &[Request::get(b"g")]);
    assert_eq!(r, ["VALUE v 4"]);
    assert_eq!(e.stats().touch_hits, 1);
}

#[test]
fn delete_with_a_cas_removes_only_that_version() {
    let e = engine(1);
    let mut out = Responses::default();
    e.execute(
        &[Request::set(b"d", b"1"), Request::gets(b"d")],
        NOW,
        &mut out,
        &mut Scratch::default(),
    );
    let Response::Value { cas, .. } = out.results[1] else {
        panic!()
    };
    let stale = Request {
        cas: cas + 1,
        ..Request::delete(b"d")
    };
    let exact = Request {
        cas,
        ..Request::delete(b"d")
    };
    assert_eq!(
        run(&e, NOW, &[stale, exact, Request::get(b"d")]),
        ["Exists", "Deleted", "Miss"]
    );
}

#[test]
fn flush_all_now_and_at_a_later_time() {
    let e = Engine::new(&EngineConfig {
        memory_bytes: 8 << 20,
        partitions: 2,
        page_size: 64 << 10,
        ..EngineConfig::default()
    })
    .unwrap();
    let mut s = Scratch::default();
    let exec = |reqs: &[Request<'_>], now: u32, s: &mut Scratch| {
        let mut out = Responses::default();
        e.execute(reqs, now, &mut out, s);
        out.results
            .iter()
            .map(|r| matches!(r, Response::Value { .. }))
            .collect::<Vec<_>>()
    };
    let keys: Vec<String> = (0..100).map(|i| format!("f{i}")).collect();
    let sets: Vec<_> = keys
        .iter()
        .map(|k| Request::set(k.as_bytes(), b"v"))
        .collect();
    let gets: Vec<_> = keys.iter().map(|k| Request::get(k.as_bytes())).collect();
    exec(&sets, NOW, &mut s);
    e.flush_all(0, NOW);
    assert!(exec(&gets, NOW, &mut s).iter().all(|hit| !hit));
    assert_eq!(e.store_stats().curr_items, 0);
    // Delayed: still there before the time, gone a second early as in memcached (its
    // oldest_live is the time less one); what is stored in that second goes at the time.
    exec(&sets, NOW, &mut s);
    e.flush_all(5, NOW);
    assert!(exec(&gets, NOW + 3, &mut s).iter().all(|&hit| hit));
    assert!(exec(&gets, NOW + 4, &mut s).iter().all(|hit| !hit));
    exec(&sets, NOW + 4, &mut s);
    assert!(exec(&gets, NOW + 4, &mut s).iter().all(|&hit| hit));
    assert!(exec(&gets, NOW + 5, &mut s).iter().all(|hit| !hit));
    assert_eq!(
        e.stats().flushes,
        2 * 2,
        "one flush_all counted once per partition"
    );
    // After the flush the store is usable again.
    exec(&sets, NOW + 6, &mut s);
    assert!(exec(&gets, NOW + 6, &mut s).iter().all(|&hit| hit));
    assert!(e.arena().used() <= e.arena().limit());
}

/// Values past the largest chunk (here 64 KiB pages) are chained: read back whole, appended
/// to, prepended to, overwritten, refused by incr, and updated by vector operations.
#[test]
fn values_larger_than_a_page_are_chained_and_behave_like_any_other() {
    let e = engine(1);
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut out = Responses::default();
    e.execute(
        &[
            Request::set(b"big", &big),
            Request::get(b"big"),
            Request::store(Op::Append, b"big", b"tail", 0, 0),
            Request::store(Op::Prepend, b"big", b"head", 0, 0),
            Request::get(b"big"),
            Request::incr(b"big", 1),
        ],
        NOW,
        &mut out,
        &mut Scratch::default(),
    );
    assert_eq!(out.results[0], Response::Stored);
    assert_eq!(out.value(&out.results[1]), &big[..]);
    assert_eq!(out.results[2], Response::Stored);
    assert_eq!(out.results[3], Response::Stored);
    let mut want = b"head".to_vec();
    want.extend_from_slice(&big);
    want.extend_from_slice(b"tail");
    assert_eq!(out.value(&out.results[4]), &want[..]);
    assert_eq!(out.results[5], Response::NonNumeric);
    // A smaller value replaces the chain; the chain's chunks are free again.
    let items_bytes = e.store_stats().bytes;
    assert_eq!(items_bytes, (32 + 3 + want.len()) as u64);
    let r = run(
        &e,
        NOW,
        &[Request::set(b"big", b"small"), Request::get(b"big")],
    );
    assert_eq!(r, ["Stored", "VALUE small 0"]);
    assert_eq!(e.store_stats().bytes, 32 + 3 + 5);
}

#[test]
fn regression_overwriting_a_value_near_the_limit_reuses_the_old_versions_chunks() {
    // Review finding: the version being replaced is retired first and a retired chain pins
    // its parts, so with no delayed index writes to apply, a second SET of a value larger
    // than the free memory failed out of memory (and dropped the key) where memcached evicts
    // the old version.
    let e = Engine::new(&EngineConfig {
        memory_bytes: 24 << 20,
        max_value: 14 << 20,
        ..EngineConfig::default()
    })
    .unwrap();
    let v1 = vec![b'1'; 13 << 20];
    let v2 = vec![b'2'; 13 << 20];
    for v in [&v1, &v2, &v1] {
        let mut out = Responses::default();
        e.execute(
            &[Request::set(b"k", v), Request::get(b"k")],
            NOW,
            &mut out,
            &mut Scratch::default(),
        );
        assert_eq!(out.results[0], Response::Stored);
        assert_eq!(out.value(&out.results[1]), &v[..]);
    }
    assert_eq!(e.store_stats().curr_items, 1);
}

/// Found by the model property test with more cases: a counter that grew past its length
/// (a new value of the new length, stored in its own chunk when the class allows) and then
/// shrank is padded with spaces to that length, as memcached writes a shorter number over
/// the value.
#[test]
fn regression_a_counter_that_grew_then_shrank_is_padded() {
    for parts in [1, 2] {
        let e = engine(parts);
        let r = run(
            &e,
            NOW,
            &[
                Request::set(b"n", b"0"),
                Request::incr(b"n", 10),
                Request::get(b"n"),
                Request::decr(b"n", 1),
                Request::get(b"n"),
                Request::incr(b"n", 1),
            ],
        );
        assert_eq!(
            r,
            [
                "Stored",
                "Number(10)",
                "VALUE 10 0",
                "Number(9)",
                "VALUE 9  0",
                "Number(10)"
            ]
        );
    }
}
