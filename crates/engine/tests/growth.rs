//! An index that fits the store: with items far smaller than the budget's first guess, the
//! table doubles as it fills (CPU and, where PoCL is installed, the device), so no item is
//! lost to the index while memory is left; the first loss is a CLOCK eviction of a full
//! store.

mod common;

use common::backends;
use hkv_engine::Scratch;

use hkv_engine::{Engine, EngineConfig, Request, Response, Responses, ScheduleConfig};

const NOW: u32 = 1_700_000_000;

fn keys(from: usize, n: usize) -> Vec<Vec<u8>> {
    (from..from + n)
        .map(|i| format!("{i:08}").into_bytes())
        .collect()
}

fn set_all(e: &Engine, keys: &[Vec<u8>]) {
    for chunk in keys.chunks(512) {
        let reqs: Vec<Request> = chunk.iter().map(|k| Request::set(k, &k[..8])).collect();
        let mut out = Responses::default();
        e.execute(&reqs, NOW, &mut out, &mut Scratch::default());
        assert!(out.results.iter().all(|r| matches!(r, Response::Stored)));
    }
}

fn hits(e: &Engine, keys: &[Vec<u8>]) -> usize {
    let mut n = 0;
    for chunk in keys.chunks(512) {
        let reqs: Vec<Request> = chunk.iter().map(|k| Request::get(k)).collect();
        let mut out = Responses::default();
        e.execute(&reqs, NOW, &mut out, &mut Scratch::default());
        for (r, k) in out.results.iter().zip(chunk) {
            if matches!(r, Response::Value { .. }) {
                assert_eq!(out.value(r), &k[..8], "a GET returned another key's value");
                n += 1;
            }
        }
    }
    n
}

fn losses(e: &Engine) -> (u64, u64) {
    let s = e.stats();
    (
        e.store_stats().evictions,
        s.index_evictions + s.collision_evictions,
    )
}

#[test]
fn a_small_table_doubles_and_keeps_every_small_item() {
    for b in backends() {
        for delayed in [false, true] {
            let e = Engine::new(&EngineConfig {
                memory_bytes: 32 << 20,
                partitions: 2,
                page_size: 64 << 10,
                // 2 x 2048 slots for what will be 60,000 items.
                buckets_per_partition: Some(1 << 8),
                backend: b,
                schedule: ScheduleConfig {
                    min_us: if delayed { 100.0 } else { 0.0 },
                    max_us: 1000.0,
                    ..ScheduleConfig::default()
                },
                ..EngineConfig::default()
            })
            .unwrap();
            let ks = keys(0, 60_000);
            set_all(&e, &ks);
            e.apply_pending();
            assert_eq!(losses(&e), (0, 0), "{b:?} delayed={delayed}: items lost");
            assert_eq!(hits(&e, &ks), ks.len(), "{b:?} delayed={delayed}");
            let report = e.partition(0).index_report();
            assert!(
                report.grows >= 3,
                "{b:?}: the table did not grow: {report:?}"
            );
            assert!(report.entries as f64 / report.slots as f64 <= 0.86);
        }
    }
}

#[test]
fn with_8_byte_items_the_first_loss_is_a_clock_eviction_of_a_full_store() {
    // The default sizing (for ~96-byte items) gives 48 MB a table of 512 Ki slots; 8-byte
    // keys and values (56-byte chunks) fill it past its growth point with two thirds of the
    // memory left.
    let e = Engine::new(&EngineConfig {
        memory_bytes: 48 << 20,
        partitions: 1,
        page_size: 64 << 10,
        ..EngineConfig::default()
    })
    .unwrap();
    let initial_slots = e.partition(0).index_report().slots;
    let mut stored = 0;
    loop {
        let ks = keys(stored, 4096);
        set_all(&e, &ks);
        stored += ks.len();
        let (clock, index) = losses(&e);
        assert_eq!(
            index, 0,
            "the index dropped items with the store not yet full"
        );
        if clock > 0 {
            break;
        }
        assert!(stored < 2_000_000, "never full");
    }
    let report = e.partition(0).index_report();
    assert!(
        stored as u64 > initial_slots,
        "{stored} items, {initial_slots} slots at start"
    );
    assert!(report.grows >= 1, "{report:?}");
    assert!(
        e.arena().available() < 2 * (64 << 10),
        "CLOCK evicted with memory left"
    );
    // Far past full, CLOCK keeps choosing what goes; the index never does.
    let ks = keys(stored, 200_000);
    set_all(&e, &ks);
    assert_eq!(losses(&e).1, 0);
    assert_eq!(
        hits(&e, &ks[ks.len() - 20_000..]),
        20_000,
        "recent writes lost"
    );
}
