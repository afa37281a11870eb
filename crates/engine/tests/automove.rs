//! Slab automove by age through the engine (a hostile probe's finding): a cache filled with
//! one value size, then written with another, kept the old size's unread items and evicted
//! the new size's at once, so of the newest 2,000 10 KB values at `-m 64` 94 were readable
//! (memcached: all). The engine ticks automove once a second as batches run.

use hkv_engine::{Engine, EngineConfig, Request, Response, Responses, Scratch};

const NOW: u32 = 1_700_000_000;

fn engine() -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes: 8 << 20,
        partitions: 1,
        page_size: 256 << 10,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn run(e: &Engine, reqs: &[Request<'_>], now: u32) -> Responses {
    let mut out = Responses::default();
    e.execute(reqs, now, &mut out, &mut Scratch::default());
    out
}

/// Fills the engine with 100-byte values at `NOW` (until they evict each other), then
/// writes 40 fresh 10 KB values a second for 60 s, from 100 s later; returns how many of
/// the newest 200 (2 MB, a quarter of the memory) read back whole.
fn newest_large_values_readable(automove: bool) -> usize {
    let e = engine();
    let small = vec![b's'; 100];
    let keys: Vec<String> = (0..120_000).map(|i| format!("small{i}")).collect();
    for chunk in keys.chunks(256) {
        let reqs: Vec<Request<'_>> = chunk
            .iter()
            .map(|k| Request::set(k.as_bytes(), &small))
            .collect();
        run(&e, &reqs, NOW);
    }
    assert!(
        e.store_stats().evictions > 0,
        "the small values fill the memory"
    );
    // The large values' class gets its first page whatever the setting (a class with
    // none takes one when automove is on); by age, only with automove.
    run(&e, &[Request::set(b"first", &[b'l'; 10_000])], NOW + 99);
    e.set_automove(automove);
    let large: Vec<Vec<u8>> = (0..2400)
        .map(|i| format!("{i:010}").repeat(1000).into_bytes())
        .collect();
    let keys: Vec<String> = (0..2400).map(|i| format!("large{i}")).collect();
    for t in 0..60 {
        let range = t * 40..(t + 1) * 40;
        let reqs: Vec<Request<'_>> = range
            .map(|i| Request::set(keys[i].as_bytes(), &large[i]))
            .collect();
        run(&e, &reqs, NOW + 100 + t as u32);
    }
    let newest = 2200..2400;
    let reqs: Vec<Request<'_>> = newest
        .clone()
        .map(|i| Request::get(keys[i].as_bytes()))
        .collect();
    let out = run(&e, &reqs, NOW + 160);
    newest
        .zip(&out.results)
        .filter(|(i, r)| matches!(r, Response::Value { .. }) && out.value(r) == large[*i])
        .count()
}

#[test]
fn regression_a_cache_filled_with_one_size_makes_room_for_another() {
    assert_eq!(newest_large_values_readable(true), 200);
}

/// The control: without automove the same load keeps one page's worth of them.
#[test]
fn without_automove_the_new_size_keeps_one_page() {
    let n = newest_large_values_readable(false);
    assert!(n > 0 && n < 50, "{n} readable");
}
