//! Property test: the engine (store + index + batching) against a plain HashMap model.
//!
//! Random batches of every operation, over a small key space, with time moving in steps (the
//! clock is a parameter, nothing sleeps) and memory and index sizes small enough to force
//! CLOCK evictions, displacement-bound drops and signature-pair collisions. The engine may
//! lose an item only through a counted eviction; it may never return a value the model does
//! not hold for that key, and never bring back a deleted or expired one.

use hkv_engine::Scratch;
use std::collections::HashMap;

use hkv_engine::{
    Backend, Elem, Engine, EngineConfig, Op, Placement, Request, Response, Responses,
    ScheduleConfig, UpdateOp, Vector, VectorCall,
};
use proptest::prelude::*;

mod model_rules;
use model_rules::{counter_of, expiry_at, MAXDELTA, PAGE};

const START: u32 = 1_700_000_000;

#[derive(Clone, Debug)]
enum M {
    Get(u8),
    Gets(u8),
    Set(u8, u16, i8),
    SetNum(u8, u32),
    Add(u8, u16, i8),
    Replace(u8, u16, i8),
    Append(u8, u16),
    Prepend(u8, u16),
    /// `true`: the CAS the model last saw from GETS (if it is still current).
    Cas(u8, u16, bool),
    Delete(u8),
    Incr(u8, u64),
    Decr(u8, u64),
    Touch(u8, i8),
    /// `vupdate <k> u8 add <d>`: every byte of the value, in place.
    VAdd(u8, u8),
}

fn op(keys: u8) -> impl Strategy<Value = M> {
    let k = 0..keys;
    prop_oneof![
        6 => k.clone().prop_map(M::Get),
        2 => k.clone().prop_map(M::Gets),
        6 => (k.clone(), prop_oneof![4 => 0u16..100, 4 => 0u16..1500, 1 => 4000u16..12000], any::<i8>()).prop_map(|(k, l, e)| M::Set(k, l, e)),
        1 => (k.clone(), prop_oneof![0u32..5, any::<u32>()]).prop_map(|(k, n)| M::SetNum(k, n)),
        1 => (k.clone(), 0u16..300, any::<i8>()).prop_map(|(k, l, e)| M::Add(k, l, e)),
        1 => (k.clone(), 0u16..300, any::<i8>()).prop_map(|(k, l, e)| M::Replace(k, l, e)),
        1 => (k.clone(), 0u16..100).prop_map(|(k, l)| M::Append(k, l)),
        1 => (k.clone(), 0u16..100).prop_map(|(k, l)| M::Prepend(k, l)),
        1 => (k.clone(), 0u16..100, any::<bool>()).prop_map(|(k, l, b)| M::Cas(k, l, b)),
        2 => k.clone().prop_map(M::Delete),
        1 => (k.clone(), prop_oneof![Just(u64::MAX), 0u64..1000]).prop_map(|(k, d)| M::Incr(k, d)),
        1 => (k.clone(), 0u64..1000).prop_map(|(k, d)| M::Decr(k, d)),
        1 => (k.clone(), any::<i8>()).prop_map(|(k, e)| M::Touch(k, e)),
        2 => (k, any::<u8>()).prop_map(|(k, d)| M::VAdd(k, d)),
    ]
}

/// Exptimes a test picks: never, a few seconds, negative, absolute future and past.
fn exptime(e: i8, now: u32) -> i64 {
    match e.rem_euclid(6) {
        0 | 1 => 0,
        2 => (e.rem_euclid(5) + 1) as i64,
        3 => -1,
        4 => now as i64 + 3,
        _ => MAXDELTA + 1, // absolute, long past
    }
}

#[derive(Clone, Debug)]
struct Item {
    value: Vec<u8>,
    flags: u32,
    expiry: u32,
    cas: Option<u64>,
}

struct Model {
    items: HashMap<Vec<u8>, Item>,
    lost: u64,
    /// Evictions the engine reported, per key, not yet matched to a loss.
    evicted: HashMap<Vec<u8>, u64>,
    /// Losses of a key the engine never reported evicted: lost writes.
    unexplained: Vec<Vec<u8>>,
}

impl Model {
    fn live(&mut self, key: &[u8], now: u32) -> Option<&mut Item> {
        let expired = self
            .items
            .get(key)
            .is_some_and(|i| i.expiry != 0 && i.expiry <= now);
        if expired {
            self.items.remove(key);
        }
        self.items.get_mut(key)
    }

    /// The engine says `key` is absent where the model has it: allowed only as an eviction.
    fn lose(&mut self, key: &[u8], now: u32) {
        if self.live(key, now).is_some() {
            self.items.remove(key);
            self.lost += 1;
            // Each key's loss must match an eviction of that very key, not just any.
            match self.evicted.get_mut(key) {
                Some(n) if *n > 0 => *n -= 1,
                _ => self.unexplained.push(key.to_vec()),
            }
        }
    }
}

fn key_bytes(k: u8) -> Vec<u8> {
    // Keys of different lengths so they land in different slab classes.
    format!("key:{k}:{}", "k".repeat(k as usize % 7 * 20)).into_bytes()
}

fn value_bytes(seq: u64, len: u16) -> Vec<u8> {
    let mut v = format!("<{seq}>").into_bytes();
    v.resize(v.len().max(len as usize), b'.');
    v
}

type Batches = Vec<(Vec<M>, u32)>;

fn batches() -> impl Strategy<Value = Batches> {
    proptest::collection::vec((proptest::collection::vec(op(120), 1..40), 0u32..3), 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn engine_agrees_with_a_map(
        partitions in 1u32..=3,
        buckets_log in 0u32..5,
        memory_kib in 48usize..200,
        keys in 4u8..120,
        batches in batches(),
        delayed in any::<bool>(),
    ) {
        // Index writes delayed through the same-key table (periodic batches), or not (C = 0).
        let min_us = if delayed { 100.0 } else { 0.0 };
        run_model(Backend::Cpu, (Placement::AUTO, true), partitions, buckets_log, memory_kib, keys, batches, min_us)?;
    }
}

/// The OpenCL backend must satisfy the same model (PoCL in CI; skipped without a device
/// unless HKV_REQUIRE_OPENCL=1), under every placement of search, insert and delete and
/// under `auto`: PoCL shares host memory, so the CPU and the device work on one table and
/// any mix of the two must keep it whole (the placement differential test).
#[test]
fn engine_on_opencl_agrees_with_a_map() {
    if std::env::var_os("POCL_CACHE_DIR").is_none() {
        let dir = std::env::temp_dir().join("hkv-pocl-cache");
        let _ = std::fs::create_dir_all(&dir);
        std::env::set_var("POCL_CACHE_DIR", dir);
    }
    if hkv_index::opencl::devices().is_empty() {
        assert_ne!(
            std::env::var("HKV_REQUIRE_OPENCL").as_deref(),
            Ok("1"),
            "HKV_REQUIRE_OPENCL=1 but no OpenCL device"
        );
        eprintln!("no OpenCL device: the OpenCL model test did not run");
        return;
    }
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 20,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &(
                1u32..=2,
                0u32..5,
                48usize..200,
                4u8..120,
                batches(),
                0usize..34,
            ),
            |(p, b, m, k, batches, which)| {
                // 0-31: every forced placement, 32: auto, 33: the device on a table of its own
                // (a discrete GPU's way).
                let placement = Placement::enumerate()
                    .get(which)
                    .copied()
                    .unwrap_or(Placement::AUTO);
                let shared = which != 33;
                run_model(
                    Backend::OpenCl(None),
                    (placement, shared),
                    p,
                    b,
                    m,
                    k,
                    batches,
                    0.0,
                )
            },
        )
        .unwrap();
}

#[allow(clippy::too_many_arguments)]
fn run_model(
    backend: Backend,
    (placement, share_device_table): (Placement, bool),
    partitions: u32,
    buckets_log: u32,
    memory_kib: usize,
    keys: u8,
    batches: Batches,
    min_us: f64,
) -> Result<(), TestCaseError> {
    {
        let engine = Engine::new(&EngineConfig {
            memory_bytes: memory_kib << 10,
            partitions,
            page_size: PAGE,
            buckets_per_partition: Some(1 << buckets_log),
            backend,
            placement,
            share_device_table,
            schedule: ScheduleConfig {
                min_us,
                max_us: min_us.max(1000.0),
                ..ScheduleConfig::default()
            },
            ..EngineConfig::default()
        })
        .unwrap();
        engine.log_evictions(true);
        // One caller's scratch for the whole run, as a worker keeps its own.
        let mut scratch = Scratch::default();
        let mut model = Model {
            items: HashMap::new(),
            lost: 0,
            evicted: HashMap::new(),
            unexplained: Vec::new(),
        };
        let mut now = START;
        let mut seq = 0u64;
        let mut out = Responses::default();
        for (ops, advance) in batches {
            now += advance;
            // Own every key and value of the batch before borrowing them into requests.
            let ops: Vec<M> = ops.into_iter().map(|o| remap(o, keys)).collect();
            let mut owned: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            for o in &ops {
                seq += 1;
                let (k, v) = match *o {
                    M::Get(k)
                    | M::Gets(k)
                    | M::Delete(k)
                    | M::Incr(k, _)
                    | M::Decr(k, _)
                    | M::Touch(k, _)
                    | M::VAdd(k, _) => (k, Vec::new()),
                    M::SetNum(k, n) => (k, n.to_string().into_bytes()),
                    M::Set(k, l, _)
                    | M::Add(k, l, _)
                    | M::Replace(k, l, _)
                    | M::Append(k, l)
                    | M::Prepend(k, l)
                    | M::Cas(k, l, _) => (k, value_bytes(seq, l)),
                };
                owned.push((key_bytes(k), v));
            }
            let reqs: Vec<Request<'_>> = ops
                .iter()
                .zip(&owned)
                .map(|(o, (k, v))| {
                    let cas_for = |b: bool| {
                        let known = model.items.get(k).and_then(|i| i.cas);
                        if b {
                            known.unwrap_or(0)
                        } else {
                            0
                        }
                    };
                    match *o {
                        M::Get(_) => Request::get(k),
                        M::Gets(_) => Request::gets(k),
                        M::Set(_, _, e) => {
                            Request::store(Op::Set, k, v, seq as u32, exptime(e, now))
                        }
                        M::SetNum(..) => Request::set(k, v),
                        M::Add(_, _, e) => Request::store(Op::Add, k, v, 1, exptime(e, now)),
                        M::Replace(_, _, e) => {
                            Request::store(Op::Replace, k, v, 2, exptime(e, now))
                        }
                        M::Append(..) => Request::store(Op::Append, k, v, 3, 0),
                        M::Prepend(..) => Request::store(Op::Prepend, k, v, 4, 0),
                        M::Cas(_, _, b) => Request::cas(k, v, 5, 0, cas_for(b)),
                        M::Delete(_) => Request::delete(k),
                        M::Incr(_, d) => Request::incr(k, d),
                        M::Decr(_, d) => Request::decr(k, d),
                        M::Touch(_, e) => Request::touch(k, exptime(e, now)),
                        M::VAdd(_, d) => Request::vector(
                            k,
                            Vector {
                                elem: Elem::U8,
                                call: VectorCall::Update {
                                    op: UpdateOp::Add,
                                    scalar: Some(u64::from(d)),
                                    old: false,
                                },
                            },
                            &[],
                        ),
                    }
                })
                .collect();
            out.clear();
            engine.execute(&reqs, now, &mut out, &mut scratch);
            for k in engine.take_evicted_keys() {
                *model.evicted.entry(k).or_default() += 1;
            }
            prop_assert_eq!(out.results.len(), reqs.len());
            for (req, resp) in reqs.iter().zip(&out.results) {
                check(&mut model, req, resp, &out, now)?;
            }
            prop_assert!(
                model.unexplained.is_empty(),
                "keys lost without an eviction of their own: {:?}",
                model.unexplained
            );
            prop_assert!(
                model.lost <= engine.evictions(),
                "{} items lost but only {} evictions counted",
                model.lost,
                engine.evictions()
            );
            prop_assert!(engine.arena().used() <= engine.arena().limit());
            // Replaced versions the same-key table holds back are not counted twice.
            prop_assert!(engine.store_stats().curr_items <= keys as u64);
            if advance == 1 {
                // Apply the delayed index writes at an arbitrary point too, not only every
                // n batches.
                engine.apply_pending();
            }
        }
        // Once every delayed write is in the index, the index alone must agree with the model.
        engine.apply_pending();
        prop_assert_eq!(engine.pending_writes(), 0);
        let owned: Vec<Vec<u8>> = (0..keys).map(key_bytes).collect();
        let reqs: Vec<Request<'_>> = owned.iter().map(|k| Request::get(k)).collect();
        let mut out = Responses::default();
        engine.execute(&reqs, now, &mut out, &mut scratch);
        for k in engine.take_evicted_keys() {
            *model.evicted.entry(k).or_default() += 1;
        }
        for (req, resp) in reqs.iter().zip(&out.results) {
            check(&mut model, req, resp, &out, now)?;
        }
        prop_assert!(model.unexplained.is_empty(), "{:?}", model.unexplained);
        prop_assert!(model.lost <= engine.evictions());
    }
    Ok(())
}

fn remap(o: M, keys: u8) -> M {
    let f = |k: u8| k % keys;
    match o {
        M::Get(k) => M::Get(f(k)),
        M::Gets(k) => M::Gets(f(k)),
        M::Set(k, l, e) => M::Set(f(k), l, e),
        M::SetNum(k, n) => M::SetNum(f(k), n),
        M::Add(k, l, e) => M::Add(f(k), l, e),
        M::Replace(k, l, e) => M::Replace(f(k), l, e),
        M::Append(k, l) => M::Append(f(k), l),
        M::Prepend(k, l) => M::Prepend(f(k), l),
        M::Cas(k, l, b) => M::Cas(f(k), l, b),
        M::Delete(k) => M::Delete(f(k)),
        M::Incr(k, d) => M::Incr(f(k), d),
        M::Decr(k, d) => M::Decr(f(k), d),
        M::Touch(k, e) => M::Touch(f(k), e),
        M::VAdd(k, d) => M::VAdd(f(k), d),
    }
}

fn check(
    model: &mut Model,
    req: &Request<'_>,
    resp: &Response,
    out: &Responses,
    now: u32,
) -> Result<(), TestCaseError> {
    let key = req.key;
    let present = model.live(key, now).is_some();
    let put =
        |model: &mut Model, value: Vec<u8>, flags: u32, exptime: i64| match expiry_at(exptime, now)
        {
            Some(expiry) => {
                model.items.insert(
                    key.to_vec(),
                    Item {
                        value,
                        flags,
                        expiry,
                        cas: None,
                    },
                );
            }
            None => {
                model.items.remove(key);
            }
        };
    match (req.op, *resp) {
        (Op::Get | Op::Gets, Response::Value { flags, cas, .. }) => {
            let m = model.live(key, now);
            prop_assert!(m.is_some(), "GET returned a value the model does not have");
            let m = m.unwrap();
            prop_assert_eq!(out.value(resp), &m.value[..], "wrong value");
            prop_assert_eq!(flags, m.flags);
            if req.op == Op::Gets {
                m.cas = Some(cas);
            }
        }
        (Op::Get | Op::Gets, Response::Miss) => model.lose(key, now),
        (Op::Set, Response::Stored) => put(model, req.value.to_vec(), req.flags, req.exptime),
        (Op::Add, Response::Stored) => {
            model.lose(key, now);
            put(model, req.value.to_vec(), req.flags, req.exptime);
        }
        (Op::Add, Response::NotStored) => prop_assert!(present, "ADD refused for an absent key"),
        (Op::Replace, Response::Stored) => {
            prop_assert!(present, "REPLACE stored over an absent key");
            put(model, req.value.to_vec(), req.flags, req.exptime);
        }
        (Op::Replace | Op::Append | Op::Prepend, Response::NotStored) => model.lose(key, now),
        (Op::Append | Op::Prepend, Response::Stored) => {
            prop_assert!(present, "APPEND/PREPEND on an absent key");
            let m = model.live(key, now).unwrap();
            if req.op == Op::Append {
                m.value.extend_from_slice(req.value);
            } else {
                m.value.splice(0..0, req.value.iter().copied());
            }
            m.cas = None;
        }
        (Op::Cas, Response::Stored) => {
            prop_assert!(present, "CAS stored over an absent key");
            let known = model.live(key, now).unwrap().cas;
            prop_assert_eq!(
                known,
                Some(req.cas),
                "CAS accepted a value it was never given"
            );
            put(model, req.value.to_vec(), req.flags, req.exptime);
        }
        (Op::Cas, Response::Exists) => {
            prop_assert!(present);
            let known = model.live(key, now).unwrap().cas;
            prop_assert!(known != Some(req.cas), "CAS refused the current value");
        }
        (Op::Vector, Response::Updated) => {
            prop_assert!(present, "a vector update found an absent key");
            let d = match req.vector {
                Some(Vector {
                    call:
                        VectorCall::Update {
                            scalar: Some(d), ..
                        },
                    ..
                }) => d as u8,
                _ => unreachable!(),
            };
            let m = model.live(key, now).unwrap();
            for b in &mut m.value {
                *b = b.wrapping_add(d);
            }
            m.cas = None;
        }
        (
            Op::Cas | Op::Delete | Op::Incr | Op::Decr | Op::Touch | Op::Vector,
            Response::NotFound,
        ) => model.lose(key, now),
        (Op::Delete, Response::Deleted) => {
            prop_assert!(present, "DELETE found an absent key");
            model.items.remove(key);
        }
        (Op::Incr | Op::Decr, Response::Number(n)) => {
            prop_assert!(present);
            let m = model.live(key, now).unwrap();
            let old = counter_of(key, &m.value)
                .ok_or_else(|| TestCaseError::fail("arith on a non-number"))?;
            let want = if req.op == Op::Incr {
                old.wrapping_add(req.delta)
            } else {
                old.saturating_sub(req.delta)
            };
            prop_assert_eq!(n, want);
            // memcached writes a number no longer than the value over it, padded with
            // spaces; a longer one is a new value of its own length.
            let mut text = n.to_string().into_bytes();
            if text.len() <= m.value.len() {
                text.resize(m.value.len(), b' ');
            }
            m.value = text;
            m.cas = None;
        }
        (Op::Incr | Op::Decr, Response::NonNumeric) => {
            prop_assert!(present);
            let m = model.live(key, now).unwrap();
            prop_assert!(counter_of(key, &m.value).is_none());
        }
        (Op::Touch, Response::Touched) => {
            prop_assert!(present, "TOUCH found an absent key");
            match expiry_at(req.exptime, now) {
                Some(e) => model.live(key, now).unwrap().expiry = e,
                None => {
                    model.items.remove(key);
                }
            }
        }
        (op, Response::OutOfMemory | Response::TooLarge) => {
            // memcached drops the old value when a SET cannot store the new one, and keeps it
            // for the other writes.
            if op == Op::Set || req.meta.unlink_on_failure {
                model.items.remove(key);
            }
        }
        (op, r) => prop_assert!(false, "unexpected {:?} for {:?}", r, op),
    }
    Ok(())
}

#[test]
fn regression_a_chained_value_that_reads_as_a_number_is_no_counter() {
    // A 5000-byte value (stored in parts) whose first bytes vector adds and a prepend turn
    // into "709 ": memcached and the engine answer INCR on a chunked item as non-numeric.
    let batch = vec![
        M::Set(0, 5000, 0),
        M::VAdd(0, 233),
        M::Get(1),
        M::Get(1),
        M::Prepend(0, 0),
        M::VAdd(0, 251),
        M::Incr(0, 1),
    ];
    for delayed in [0.0, 100.0] {
        let r = run_model(
            Backend::Cpu,
            (Placement::AUTO, true),
            1,
            0,
            100,
            4,
            vec![(batch.clone(), 0)],
            delayed,
        );
        assert!(r.is_ok(), "{r:?}");
    }
}
