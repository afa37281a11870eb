//! Writes stored over their key's live item, in its own chunk, when the new value needs the
//! same class: what a client sees is a new version as if a new chunk had been taken.

mod common;

use hkv_engine::Scratch;
use hkv_engine::{Backend, Engine, EngineConfig, Op, Request, Response, Responses};

const NOW: u32 = 1_700_000_000;

/// On either backend: a device that keeps its own index or shares the CPU's must not
/// notice an item that changed in place.
fn engine(backend: Backend, partitions: u32) -> Engine {
    Engine::new(&EngineConfig {
        backend,
        partitions,
        memory_bytes: 8 << 20,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// Each response as text (values inline, with their CAS), and the batch's `after` CASes.
fn run(e: &Engine, reqs: &[Request<'_>]) -> (Vec<String>, Vec<u64>) {
    let mut out = Responses::default();
    e.execute(reqs, NOW, &mut out, &mut Scratch::default());
    let shown = out
        .results
        .iter()
        .map(|r| match r {
            Response::Value { flags, cas, .. } => {
                format!("{} {flags} {cas}", String::from_utf8_lossy(&out.value(r)))
            }
            other => format!("{other:?}"),
        })
        .collect();
    (shown, out.after.iter().map(|a| a.cas).collect())
}

#[test]
fn overwrites_in_one_batch_keep_arrival_order_and_give_new_cases() {
    for (b, parts) in common::backends()
        .into_iter()
        .flat_map(|b| [(b, 1), (b, 2)])
    {
        let e = engine(b, parts);
        let (_, after) = run(&e, &[Request::store(Op::Set, b"k", b"one", 1, 0)]);
        let c1 = after[0];
        let before = e.stats().in_place_writes;
        let (r, after) = run(
            &e,
            &[
                Request::gets(b"k"),
                Request::store(Op::Set, b"k", b"two", 2, 0),
                Request::gets(b"k"),
                Request::store(Op::Replace, b"k", b"three", 3, 0),
                Request::gets(b"k"),
                Request::cas(b"k", b"four", 4, 0, c1),
                Request::gets(b"k"),
            ],
        );
        let (c2, c3) = (after[1], after[3]);
        assert!(c1 < c2 && c2 < c3, "every version gets a new CAS");
        assert_eq!(
            r,
            [
                format!("one 1 {c1}"),
                "Stored".into(),
                format!("two 2 {c2}"),
                "Stored".into(),
                format!("three 3 {c3}"),
                "Exists".into(),
                format!("three 3 {c3}"),
            ]
        );
        assert_eq!(e.stats().in_place_writes - before, 2);
        assert_eq!(e.store_stats().curr_items, 1);
    }
}

#[test]
fn an_overwrite_needing_another_class_takes_a_new_chunk() {
    for b in common::backends() {
        another_class_takes_a_new_chunk(b);
    }
}

fn another_class_takes_a_new_chunk(b: Backend) {
    let e = engine(b, 1);
    run(&e, &[Request::set(b"k", b"small")]);
    let big = vec![b'b'; 3000];
    let before = e.stats().in_place_writes;
    let (r, _) = run(&e, &[Request::set(b"k", &big), Request::get(b"k")]);
    assert_eq!(r[0], "Stored");
    assert!(r[1].starts_with(&String::from_utf8_lossy(&big[..100]).into_owned()));
    assert_eq!(e.stats().in_place_writes, before);
    let (r, _) = run(&e, &[Request::set(b"k", b"small again")]);
    assert_eq!(r[0], "Stored");
    assert!(run(&e, &[Request::get(b"k")]).0[0].starts_with("small again 0 "));
    assert_eq!(e.store_stats().curr_items, 1);
}
