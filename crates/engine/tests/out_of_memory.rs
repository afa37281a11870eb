//! Evictions off (memcached's `-M`), memory full: a write that cannot get memory for its new
//! value answers out of memory. SET and `ms` unlink the key's old value, as memcached does, so
//! no stale value outlives a failed overwrite; append, prepend, replace, cas and incr keep
//! it, as memcached does. Such a write is not counted in `cmd_set` (memcached counts a
//! storage command once its value is allocated). With index writes now and delayed.

use hkv_engine::ScheduleConfig;
use hkv_engine::{Engine, EngineConfig, Meta, Op, Request, Response, Responses, Scratch};

const NOW: u32 = 1_700_000_000;

fn engine(delayed: bool) -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes: 8 << 20,
        partitions: 1,
        page_size: 256 << 10,
        evictions: false,
        schedule: ScheduleConfig {
            // C >= 100 us: index writes wait in the same-key table.
            min_us: if delayed { 100.0 } else { 0.0 },
            max_us: 1000.0,
            ..ScheduleConfig::default()
        },
        ..EngineConfig::default()
    })
    .unwrap()
}

fn run(e: &Engine, req: Request<'_>) -> (Response, Vec<u8>) {
    let mut out = Responses::default();
    e.execute(&[req], NOW, &mut out, &mut Scratch::default());
    let r = out.results[0];
    (r, out.value(&r).to_vec())
}

fn get(e: &Engine, key: &[u8]) -> Option<Vec<u8>> {
    match run(e, Request::get(key)) {
        (Response::Value { .. }, v) => Some(v),
        _ => None,
    }
}

/// `old` holds `value`, and no value of any size fits any more.
fn full_engine(delayed: bool, value: &[u8]) -> Engine {
    let e = engine(delayed);
    assert_eq!(run(&e, Request::set(b"old", value)).0, Response::Stored);
    let mut n = 0;
    for size in [200_000, 99_000, 20_000, 2_000, 200, 20, 1] {
        while run(
            &e,
            Request::set(format!("f{n}").as_bytes(), &vec![b'z'; size]),
        )
        .0 == Response::Stored
        {
            n += 1;
        }
    }
    e
}

#[test]
fn regression_a_write_refused_for_memory_keeps_the_old_value_unless_it_is_a_set() {
    let big = vec![b'R'; 200_000];
    let piece = vec![b'P'; 100_000];
    let old = vec![b'O'; 99_000];
    for delayed in [false, true] {
        for (name, keeps) in [
            ("append", true),
            ("prepend", true),
            ("replace", true),
            ("cas", true),
            ("set", false),
            ("ms append", false),
            ("ms replace", false),
        ] {
            let e = full_engine(delayed, &old);
            let cas = match run(&e, Request::gets(b"old")).0 {
                Response::Value { cas, .. } => cas,
                other => panic!("{other:?}"),
            };
            let ms = Meta {
                unlink_on_failure: true,
                ..Meta::default()
            };
            let req = match name {
                "append" => Request::store(Op::Append, b"old", &piece, 0, 0),
                "prepend" => Request::store(Op::Prepend, b"old", &piece, 0, 0),
                "replace" => Request::store(Op::Replace, b"old", &big, 0, 0),
                "cas" => Request {
                    cas,
                    ..Request::store(Op::Cas, b"old", &big, 0, 0)
                },
                "set" => Request::set(b"old", &big),
                "ms append" => Request {
                    meta: ms,
                    ..Request::store(Op::Append, b"old", &piece, 0, 0)
                },
                _ => Request {
                    meta: ms,
                    ..Request::store(Op::Replace, b"old", &big, 0, 0)
                },
            };
            let sets = e.stats().cmd_set;
            let items = e.store_stats().curr_items;
            assert_eq!(
                run(&e, req).0,
                Response::OutOfMemory,
                "{name}, delayed {delayed}"
            );
            assert_eq!(e.stats().cmd_set, sets, "{name}: not counted in cmd_set");
            assert_eq!(e.store_stats().evictions, 0);
            if keeps {
                assert_eq!(get(&e, b"old").as_deref(), Some(&old[..]), "{name} kept it");
                assert_eq!(e.store_stats().curr_items, items);
                // Still an ordinary item: it can be deleted, and its memory stored again.
                assert_eq!(run(&e, Request::delete(b"old")).0, Response::Deleted);
                assert_eq!(run(&e, Request::set(b"again", &old)).0, Response::Stored);
            } else {
                assert_eq!(get(&e, b"old"), None, "{name} unlinked it");
                assert_eq!(e.store_stats().curr_items, items - 1);
            }
        }
    }
}
