//! Delayed index writes and the same-key table (Mega-KV §5.1, KV-Direct §3.3.3): a write's
//! index insert or delete waits for a batch every n batches, and until then the same-key table
//! answers for its key. On the CPU backend and, where an OpenCL device exists (PoCL in CI), on
//! the device backend.

mod common;

use common::backends;
use hkv_engine::Scratch;

use hkv_engine::{
    Backend, DeviceTable, Engine, EngineConfig, Request, Response, Responses, ScheduleConfig,
};
use hkv_index::{hash_key, NO_LOCATION};

const NOW: u32 = 1_700_000_000;

/// An engine whose batches are periodic (C >= 100 us), so index writes wait n batches.
fn engine(backend: Backend, memory_bytes: usize) -> Engine {
    engine_with(backend, memory_bytes, 100.0)
}

fn engine_with(backend: Backend, memory_bytes: usize, min_us: f64) -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes,
        page_size: 64 << 10,
        buckets_per_partition: Some(1 << 10),
        backend,
        schedule: ScheduleConfig {
            min_us,
            max_us: 1000.0,
            ..ScheduleConfig::default()
        },
        ..EngineConfig::default()
    })
    .unwrap()
}

fn run(e: &Engine, reqs: &[Request<'_>]) -> Vec<String> {
    let mut out = Responses::default();
    e.execute(reqs, NOW, &mut out, &mut Scratch::default());
    out.results
        .iter()
        .map(|r| match r {
            Response::Value { .. } => format!("VALUE {}", String::from_utf8_lossy(&out.value(r))),
            other => format!("{other:?}"),
        })
        .collect()
}

/// What the index itself (not the same-key table) holds for `key`.
fn indexed(e: &Engine, key: &[u8]) -> bool {
    e.partition(0).index().search_one(&hash_key(key)) != NO_LOCATION
}

#[test]
fn a_get_sees_a_pending_insert_and_the_index_gets_it_n_batches_later() {
    for b in backends() {
        let e = engine(b, 8 << 20);
        assert_eq!(run(&e, &[Request::set(b"k", b"v1")]), ["Stored"]);
        assert_eq!(e.pending_writes(), 1);
        if b == Backend::Cpu {
            assert!(!indexed(&e, b"k"), "the insert was not delayed");
        }
        // The next batch is inside the write period: the GET is forwarded from the table.
        assert_eq!(run(&e, &[Request::get(b"k")]), ["VALUE v1"]);
        assert_eq!(e.stats().forwarded_reads, 1);
        assert_eq!(e.pending_writes(), 1);
        // n = 2 batches later the table goes to the index as one batch.
        assert_eq!(run(&e, &[Request::get(b"k")]), ["VALUE v1"]);
        assert_eq!(e.pending_writes(), 0);
        assert_eq!(e.stats().applied_writes, 1);
        if b == Backend::Cpu {
            assert!(indexed(&e, b"k"));
        }
        assert_eq!(e.store_stats().curr_items, 1);
    }
}

#[test]
fn delete_then_get_misses_while_the_index_still_holds_the_old_version() {
    for b in backends() {
        let e = engine(b, 8 << 20);
        run(&e, &[Request::set(b"k", b"old")]);
        e.apply_pending();
        assert_eq!(
            run(&e, &[Request::delete(b"k"), Request::get(b"k")]),
            ["Deleted", "Miss"]
        );
        if b == Backend::Cpu {
            assert!(indexed(&e, b"k"), "the index delete was not delayed");
        }
        assert_eq!(
            e.store_stats().curr_items,
            0,
            "a deleted item is not counted"
        );
        assert_eq!(run(&e, &[Request::get(b"k")]), ["Miss"]);
        // SET after DELETE, both waiting: the newest wins.
        assert_eq!(
            run(&e, &[Request::set(b"k", b"new"), Request::get(b"k")]),
            ["Stored", "VALUE new"]
        );
        e.apply_pending();
        assert_eq!(run(&e, &[Request::get(b"k")]), ["VALUE new"]);
        assert_eq!(e.store_stats().curr_items, 1);
        run(&e, &[Request::delete(b"k")]);
        e.apply_pending();
        if b == Backend::Cpu {
            assert!(!indexed(&e, b"k"));
        }
        assert_eq!(run(&e, &[Request::get(b"k")]), ["Miss"]);
    }
}

#[test]
fn a_hot_counter_merges_in_the_table_and_keeps_one_version() {
    for b in backends() {
        let e = engine(b, 8 << 20);
        run(&e, &[Request::set(b"ctr", b"0")]);
        e.apply_pending();
        let before = e.stats();
        // 1000 increments in one batch: lengths grow 1 -> 4 digits, so some need new versions.
        let reqs: Vec<_> = (0..1000).map(|_| Request::incr(b"ctr", 1)).collect();
        let r = run(&e, &reqs);
        assert_eq!(r.last().map(String::as_str), Some("Number(1000)"));
        assert_eq!(e.pending_writes(), 1, "one key, one waiting index write");
        let s = e.stats();
        assert!(s.merged_writes - before.merged_writes >= 2);
        assert_eq!(
            e.store_stats().curr_items,
            1,
            "intermediate versions are freed"
        );
        e.apply_pending();
        assert_eq!(e.stats().applied_writes - before.applied_writes, 1);
        assert_eq!(run(&e, &[Request::get(b"ctr")]), ["VALUE 1000"]);
        assert_eq!(e.store_stats().curr_items, 1);
    }
}

#[test]
fn retired_versions_never_cost_a_live_item_its_memory() {
    for b in backends() {
        // Three 64 KiB pages for items of ~750 bytes: about 240 chunks for 150 keys that are
        // rewritten every round, so the versions the table holds back must be released (the
        // table applied) before CLOCK would evict a live item for want of them.
        let e = engine(b, 256 << 10);
        let keys: Vec<String> = (0..150).map(|i| format!("k{i:03}")).collect();
        for round in 0..30u32 {
            let vals: Vec<Vec<u8>> = keys
                .iter()
                .map(|k| {
                    let mut v = vec![b'x'; 700];
                    v.extend_from_slice(format!("{k}-{round:02}").as_bytes());
                    v
                })
                .collect();
            let reqs: Vec<_> = keys
                .iter()
                .zip(&vals)
                .map(|(k, v)| Request::set(k.as_bytes(), v))
                .collect();
            let r = run(&e, &reqs);
            assert!(r.iter().all(|x| x == "Stored"), "round {round}: {r:?}");
            assert!(e.arena().used() <= e.arena().limit());
            // Every key reads back its own newest value, applied to the index or not.
            let gets: Vec<_> = keys.iter().map(|k| Request::get(k.as_bytes())).collect();
            let mut out = Responses::default();
            e.execute(&gets, NOW, &mut out, &mut Scratch::default());
            for (i, r) in out.results.iter().enumerate() {
                assert!(
                    matches!(r, Response::Value { .. }),
                    "round {round}: {i} {r:?}"
                );
                assert_eq!(out.value(r), &vals[i][..]);
            }
            assert_eq!(e.store_stats().curr_items, 150);
        }
        assert_eq!(e.evictions(), 0);
        assert!(e.stats().write_applies > 0);
        e.apply_pending();
        assert_eq!(e.store_stats().curr_items, 150);
    }
}

#[test]
fn with_c_zero_on_the_cpu_writes_reach_the_index_at_once() {
    // A batch every loop pass: no period to wait for, so nothing waits.
    let e = engine_with(Backend::Cpu, 8 << 20, 0.0);
    assert_eq!(
        run(&e, &[Request::set(b"k", b"v"), Request::get(b"k")]),
        ["Stored", "VALUE v"]
    );
    assert_eq!(e.pending_writes(), 0);
    assert!(indexed(&e, b"k"));
    assert_eq!(e.stats().forwarded_reads, 0);
    run(&e, &[Request::delete(b"k")]);
    assert!(!indexed(&e, b"k"));
    // A device that writes the table batches its writes, whatever C. A mirror (a discrete
    // GPU, or HKV_OPENCL_SHARE=0) leaves every write to the CPU, which makes it at once.
    if backends().len() > 1 {
        let e = engine_with(Backend::OpenCl(None), 8 << 20, 0.0);
        run(&e, &[Request::set(b"k", b"v")]);
        let delayed = usize::from(e.device_table() != DeviceTable::Mirror);
        assert_eq!(e.pending_writes(), delayed, "{:?}", e.device_table());
        assert_eq!(indexed(&e, b"k"), delayed == 0);
    }
}

/// Two keys whose 32-bit signatures collide, found by brute force (a birthday search).
fn colliding_keys() -> (Vec<u8>, Vec<u8>) {
    let mut seen = std::collections::HashMap::new();
    for i in 0u32.. {
        let k = format!("c{i}").into_bytes();
        if let Some(other) = seen.insert(hash_key(&k).sig, k.clone()) {
            return (other, k);
        }
    }
    unreachable!()
}

#[test]
fn colliding_keys_both_read_while_waiting_and_the_later_write_wins_the_slot() {
    let (a, b) = colliding_keys();
    // One bucket: both keys share the bucket pair, so the index can hold only one of them.
    let e = Engine::new(&EngineConfig {
        memory_bytes: 4 << 20,
        page_size: 64 << 10,
        buckets_per_partition: Some(1),
        schedule: ScheduleConfig {
            min_us: 100.0,
            ..ScheduleConfig::default()
        },
        ..EngineConfig::default()
    })
    .unwrap();
    let r = run(
        &e,
        &[
            Request::set(&a, b"value-of-a"),
            Request::set(&b, b"value-of-b"),
            Request::get(&a),
        ],
    );
    // Both index writes still wait in the same-key table, which answers for both keys.
    assert_eq!(r, ["Stored", "Stored", "VALUE value-of-a"]);
    assert_eq!(e.pending_writes(), 2);
    // Applied in the order written: b takes the slot, a is a counted collision eviction.
    e.apply_pending();
    let r = run(&e, &[Request::get(&a), Request::get(&b)]);
    assert_eq!(r, ["Miss", "VALUE value-of-b"]);
    assert_eq!(e.stats().collision_evictions, 1);
    assert_eq!(e.store_stats().curr_items, 1);
}

#[test]
fn turning_the_delay_off_applies_what_waits() {
    // The scheduler's C can fall to zero under light load: nothing may stay behind.
    let (_arena, mut parts) = engine(Backend::Cpu, 8 << 20).into_partitions();
    let p = &mut parts[0];
    let mut out = Responses::default();
    p.execute(
        &[Request::set(b"k", b"v"), Request::delete(b"gone")],
        NOW,
        &mut out,
    );
    assert_eq!(p.pending_writes(), 1);
    assert_eq!(p.index().search_one(&hash_key(b"k")), NO_LOCATION);
    p.set_write_delay(false);
    assert_eq!(p.pending_writes(), 0);
    assert_ne!(p.index().search_one(&hash_key(b"k")), NO_LOCATION);
    out.clear();
    p.execute(
        &[Request::set(b"k", b"w"), Request::get(b"k")],
        NOW,
        &mut out,
    );
    assert_eq!(p.pending_writes(), 0);
    assert_eq!(&out.value(&out.results[1])[..], b"w");
}

/// Overwrites under memory and index pressure with delayed writes: every SET answered STORED
/// is read back by the GET right behind it, and no GET ever returns another key's value.
#[test]
fn regression_delayed_writes_never_lose_an_acknowledged_set() {
    // apply_pending inside a write once freed the live version being replaced (an index
    // eviction or collision) and link/unlink recorded it as indexed anyway: when the new item
    // reused that chunk the SET said STORED and reads missed; otherwise a later apply freed
    // whatever key reused the chunk.
    for backend in backends() {
        let e = Engine::new(&EngineConfig {
            memory_bytes: 1 << 20,
            page_size: 64 << 10,
            buckets_per_partition: Some(1 << 6),
            backend,
            schedule: ScheduleConfig {
                min_us: 100.0,
                max_us: 1000.0,
                ..ScheduleConfig::default()
            },
            ..EngineConfig::default()
        })
        .unwrap();
        let mut lost = 0;
        for round in 0..20000u32 {
            let k = format!("key{}", (round * 7919) % 3000).into_bytes();
            let v = format!("{round:0>300}");
            let reqs = [Request::set(&k, v.as_bytes()), Request::get(&k)];
            let got = run(&e, &reqs);
            if got[0] == "Stored" && got[1] != format!("VALUE {v}") {
                assert_eq!(got[1], "Miss", "a GET returned a wrong value");
                lost += 1;
            }
        }
        assert_eq!(
            lost, 0,
            "{backend:?}: acknowledged SETs missing right after"
        );
    }
}

/// Merging (KV-Direct §3.3.3): in-place atomics on a hot key forward its location through
/// the same-key table, so only the first of them in an apply period searches the index (a
/// kernel launch on a device). The writes of one batch are searched together anyway (one
/// launch); across batches, merging is what saves the searches. Results are the same
/// either way.
#[test]
fn atomics_on_a_hot_key_search_the_index_once_per_apply_period() {
    use hkv_engine::{Elem, UpdateOp, Vector, VectorCall};
    let add1 = Vector {
        elem: Elem::U32,
        call: VectorCall::Update {
            op: UpdateOp::Add,
            scalar: Some(1),
            old: false,
        },
    };
    for b in backends() {
        let mut searches = Vec::new();
        for merge in [true, false] {
            let e = Engine::new(&EngineConfig {
                memory_bytes: 8 << 20,
                page_size: 64 << 10,
                buckets_per_partition: Some(1 << 10),
                backend: b,
                schedule: ScheduleConfig {
                    min_us: 100.0,
                    max_us: 1000.0,
                    write_every: 8,
                },
                merge_atomics: merge,
                // Searches counted on the device: all of them go there.
                placement: hkv_engine::Placement::all(hkv_engine::Proc::Device),
                ..EngineConfig::default()
            })
            .unwrap();
            run(
                &e,
                &[Request::set(b"vec", &[0; 64]), Request::set(b"n", b"5")],
            );
            e.apply_pending();
            let before = e.stats().merged_writes;
            let device_before = e.partition(0).device_timing().map(|t| t.0);
            // One batch of 1000, then 96 batches of 2.
            let mut reqs: Vec<_> = (0..500)
                .map(|_| Request::vector(b"vec", add1, &[]))
                .collect();
            reqs.extend((0..500).map(|_| Request::incr(b"n", 1)));
            let r = run(&e, &reqs);
            assert!(r[..500].iter().all(|x| x == "Updated"));
            assert_eq!(r[999], "Number(505)");
            if let Some(d0) = device_before {
                let d1 = e.partition(0).device_timing().map_or(0, |t| t.0);
                assert!(
                    d1 - d0 <= 4,
                    "{b:?}: one batch's writes searched {} times",
                    d1 - d0
                );
            }
            for _ in 0..96 {
                run(
                    &e,
                    &[Request::vector(b"vec", add1, &[]), Request::incr(b"n", 1)],
                );
            }
            let merged = e.stats().merged_writes - before;
            if merge {
                assert!(merged >= 998 + 150, "{b:?}: {merged} forwarded");
            } else {
                // Only the counter's new versions (9 -> 10, 99 -> 100 digits) merge.
                assert!(merged <= 2, "{merged}");
            }
            if let Some(d0) = device_before {
                searches.push(e.partition(0).device_timing().map_or(0, |t| t.0) - d0);
            }
            let want: Vec<u8> = (0..16).flat_map(|_| 596u32.to_le_bytes()).collect();
            assert_eq!(
                run(&e, &[Request::get(b"vec")]),
                [format!("VALUE {}", String::from_utf8_lossy(&want))]
            );
            e.apply_pending();
            assert_eq!(e.pending_writes(), 0);
            if b == Backend::Cpu {
                // (The CPU table is stale while a device holds the index.)
                assert!(indexed(&e, b"vec") && indexed(&e, b"n"));
            }
            assert_eq!(run(&e, &[Request::get(b"n")]), ["VALUE 601"]);
            assert_eq!(e.store_stats().curr_items, 2);
        }
        if let [on, off] = searches[..] {
            assert!(
                on * 3 < off,
                "{b:?}: {on} device searches merged, {off} not"
            );
        }
    }
}

#[test]
fn regression_flush_all_reassign_and_staging_leave_no_stale_count_of_waiting_writes() {
    // The count of waiting index writes (the `pending_writes` stat) was refreshed only by
    // batches: after a flush_all had dropped the writes, or a reassign or a value's staging
    // applied them, it still said they waited until the partition's next batch.
    for b in backends() {
        let e = engine(b, 8 << 20);
        assert_eq!(run(&e, &[Request::set(b"k", b"v1")]), ["Stored"]);
        assert_eq!(e.pending_writes(), 1);
        e.flush_all(0, NOW);
        assert_eq!(e.pending_writes(), 0, "{b:?}: flush_all");
        assert!(!e.has_pending_writes());
        assert_eq!(run(&e, &[Request::get(b"k")]), ["Miss"]);

        assert_eq!(run(&e, &[Request::set(b"j", b"v2")]), ["Stored"]);
        assert_eq!(e.pending_writes(), 1);
        // Whether or not a page can move, the waiting writes are applied first.
        let _ = e.reassign(Some(0), 1, NOW);
        assert_eq!(e.pending_writes(), 0, "{b:?}: reassign");
        assert_eq!(run(&e, &[Request::get(b"j")]), ["VALUE v2"]);

        // A value staged ahead of its command that finds no memory applies them too.
        assert_eq!(run(&e, &[Request::set(b"i", b"v3")]), ["Stored"]);
        assert_eq!(e.pending_writes(), 1);
        assert!(e.stage_value(b"i", 64 << 20, NOW, true).is_none());
        assert_eq!(e.pending_writes(), 0, "{b:?}: stage_value");
    }
}
