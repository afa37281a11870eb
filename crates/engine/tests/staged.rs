//! Values received into item memory before their command runs (`Engine::stage_value`):
//! the command stores them as it would store its own bytes, or gives the memory back.

use hkv_engine::{Engine, EngineConfig, Op, Request, Response, Responses, Scratch, Staged};

const NOW: u32 = 1_700_000_000;

fn engine() -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes: 32 << 20,
        partitions: 2,
        max_value: 4 << 20,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn value(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

fn exec(e: &Engine, reqs: &[Request<'_>]) -> (Vec<Response>, Responses) {
    let mut out = Responses::default();
    e.execute(reqs, NOW, &mut out, &mut Scratch::default());
    (out.results.clone(), out)
}

fn get(e: &Engine, key: &[u8]) -> Option<Vec<u8>> {
    let (r, out) = exec(e, &[Request::get(key)]);
    match &r[0] {
        Response::Value { .. } => Some(out.value(&r[0]).to_vec()),
        _ => None,
    }
}

fn staged<'a>(op: Op, key: &'a [u8], st: Staged) -> Request<'a> {
    Request {
        staged: Some(st),
        ..Request::store(op, key, &[], 7, 0)
    }
}

fn stage(e: &Engine, key: &[u8], v: &[u8]) -> Staged {
    let st = e
        .stage_value(key, v.len(), NOW, true)
        .expect("memory for the stage");
    for (i, piece) in v.chunks(16 << 10).enumerate() {
        assert!(e.fill_staged(&st, i * (16 << 10), piece));
    }
    st
}

fn used_chunks(e: &Engine) -> u64 {
    e.class_reports().iter().map(|c| c.items + c.parts).sum()
}

#[test]
fn a_staged_set_stores_the_value_received() {
    let e = engine();
    for n in [100, 200_000, 3 << 20] {
        let v = value(n, n as u8);
        let st = stage(&e, b"k", &v);
        let (r, _) = exec(&e, &[staged(Op::Set, b"k", st)]);
        assert_eq!(r[0], Response::Stored);
        assert_eq!(get(&e, b"k"), Some(v), "{n} bytes");
    }
}

#[test]
fn a_staged_value_is_invisible_until_its_command_runs() {
    let e = engine();
    exec(&e, &[Request::set(b"k", b"old")]);
    let st = stage(&e, b"k", &value(2 << 20, 1));
    assert_eq!(get(&e, b"k"), Some(b"old".to_vec()));
    exec(&e, &[staged(Op::Set, b"k", st)]);
    assert_eq!(get(&e, b"k").map(|v| v.len()), Some(2 << 20));
}

#[test]
fn commands_that_do_not_store_give_the_memory_back() {
    let e = engine();
    exec(&e, &[Request::set(b"present", b"x")]);
    let before = used_chunks(&e);
    let cases: Vec<(Op, &[u8], Response)> = vec![
        (Op::Add, b"present", Response::NotStored),
        (Op::Replace, b"absent", Response::NotStored),
        (Op::Cas, b"absent", Response::NotFound),
    ];
    for (op, key, want) in cases {
        let st = stage(&e, key, &value(1 << 20, 2));
        let req = Request {
            cas: 12345,
            ..staged(op, key, st)
        };
        assert_eq!(exec(&e, &[req]).0[0], want, "{op:?}");
        assert_eq!(
            used_chunks(&e),
            before,
            "{op:?}: the stage's chunks are free again"
        );
    }
    assert_eq!(get(&e, b"present"), Some(b"x".to_vec()));
    assert_eq!(get(&e, b"absent"), None);
}

#[test]
fn a_released_stage_frees_its_memory_and_cannot_be_stored() {
    let e = engine();
    let before = used_chunks(&e);
    let st = stage(&e, b"k", &value(3 << 20, 3));
    assert!(used_chunks(&e) > before);
    e.release_staged(&st);
    assert_eq!(used_chunks(&e), before);
    assert!(!e.fill_staged(&st, 0, b"late"));
    assert_eq!(
        exec(&e, &[staged(Op::Set, b"k", st)]).0[0],
        Response::OutOfMemory
    );
    assert_eq!(get(&e, b"k"), None);
}

#[test]
fn flush_all_during_a_stage_keeps_the_value_being_received() {
    let e = engine();
    let v = value(3 << 20, 4);
    let st = e.stage_value(b"k", v.len(), NOW, true).unwrap();
    assert!(e.fill_staged(&st, 0, &v[..1000]));
    e.flush_all(0, NOW);
    for i in 0..3000 {
        let k = format!("filler{i}");
        exec(&e, &[Request::set(k.as_bytes(), &[9u8; 4000])]);
    }
    assert!(e.fill_staged(&st, 1000, &v[1000..]));
    assert_eq!(
        exec(&e, &[staged(Op::Set, b"k", st)]).0[0],
        Response::Stored
    );
    assert_eq!(get(&e, b"k"), Some(v));
}

#[test]
fn stages_count_in_the_memory_limit() {
    // 32 MiB: stages of 3 MiB each until memory is spent; none ever takes memory past -m.
    let e = engine();
    let mut held = Vec::new();
    while let Some(st) = e.stage_value(format!("k{}", held.len()).as_bytes(), 3 << 20, NOW, true) {
        held.push(st);
        assert!(held.len() < 20, "stages beyond the memory limit");
    }
    assert!(held.len() >= 6, "{} stages", held.len());
    assert!(e.arena().used() <= e.arena().limit());
    for st in &held {
        e.release_staged(st);
    }
    assert!(e.stage_value(b"again", 3 << 20, NOW, true).is_some());
}

fn pages(e: &Engine) -> usize {
    e.class_reports().iter().map(|c| c.pages).sum()
}

/// Sets `keys` at `now`, each value staged as a value arriving in pieces is, expiring in 2 s.
fn set_staged_expiring(e: &Engine, keys: std::ops::Range<u32>, v: &[u8], now: u32) {
    for k in keys {
        let key = format!("key{k}");
        let st = e
            .stage_value(key.as_bytes(), v.len(), now, true)
            .expect("memory for the stage");
        assert!(e.fill_staged(&st, 0, v));
        let req = Request {
            staged: Some(st),
            ..Request::store(Op::Set, key.as_bytes(), &[], 0, 2)
        };
        let mut out = Responses::default();
        e.execute(&[req], now, &mut out, &mut Scratch::default());
        assert_eq!(out.results[0], Response::Stored);
    }
}

/// memcached's issue_14.t: values set once the last ones expired fit in the memory those
/// took. A value arriving in pieces is staged before its batch runs, and the expiry sweep
/// ran only before batches, so the test's memory grew when its 66 KB values came split.
#[test]
fn regression_staged_values_reuse_the_memory_of_expired_items() {
    let e = Engine::new(&EngineConfig {
        memory_bytes: 32 << 20,
        partitions: 1,
        max_value: 4 << 20,
        ..EngineConfig::default()
    })
    .unwrap();
    let v = value(66_560, 3);
    // Fill the pages taken, so a stage finds no chunk but an expired item's.
    let mut n = 0;
    loop {
        set_staged_expiring(&e, n..n + 1, &v, NOW);
        n += 1;
        let untouched: u64 = e.class_reports().iter().map(|c| c.untouched).sum();
        if untouched == 0 {
            break;
        }
    }
    let first = pages(&e);
    for round in 1..4 {
        set_staged_expiring(&e, round * n..(round + 1) * n, &v, NOW + 4 * round);
        assert_eq!(
            pages(&e),
            first,
            "round {round}: memory grew past expired items"
        );
    }
}
