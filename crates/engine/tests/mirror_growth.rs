//! A mirrored table that grows past one device allocation: the device keeps a table of its
//! own from then on (filled by the growth's inserts), and no item is lost. Its own test
//! binary, since the allocation limit is the process's (`HKV_OPENCL_MAX_ALLOC`).

mod common;

use hkv_engine::Scratch;
use hkv_engine::{Backend, DeviceTable, Engine, EngineConfig, Request, Response, Responses};

#[test]
fn a_mirror_grown_past_one_allocation_becomes_a_table_of_its_own_and_loses_nothing() {
    // 128 buckets (8 KiB) fit, 256 do not.
    std::env::set_var("HKV_OPENCL_SHARE", "0");
    std::env::set_var("HKV_OPENCL_MAX_ALLOC", "8192");
    if !common::backends().contains(&Backend::OpenCl(None)) {
        return;
    }
    let e = Engine::new(&EngineConfig {
        memory_bytes: 32 << 20,
        page_size: 64 << 10,
        buckets_per_partition: Some(1 << 6),
        backend: Backend::OpenCl(None),
        placement: "search=device".parse().unwrap(),
        ..EngineConfig::default()
    })
    .unwrap();
    assert_eq!(e.partition(0).device_table(), DeviceTable::Mirror);
    let keys: Vec<Vec<u8>> = (0..1500).map(|i| format!("g{i}").into_bytes()).collect();
    for chunk in keys.chunks(100) {
        let sets: Vec<Request<'_>> = chunk.iter().map(|k| Request::set(k, k)).collect();
        let mut out = Responses::default();
        e.execute(&sets, 1_700_000_000, &mut out, &mut Scratch::default());
        assert!(out.results.iter().all(|r| matches!(r, Response::Stored)));
    }
    e.apply_pending();
    let p = e.partition(0);
    assert!(
        p.index_report().grows >= 2,
        "the table did not grow past 8 KiB"
    );
    assert_eq!(p.device_table(), DeviceTable::Own);
    assert!(
        p.backend_name().starts_with("opencl:"),
        "the device was dropped"
    );
    drop(p);
    for chunk in keys.chunks(100) {
        let gets: Vec<Request<'_>> = chunk.iter().map(|k| Request::get(k)).collect();
        let mut out = Responses::default();
        e.execute(&gets, 1_700_000_000, &mut out, &mut Scratch::default());
        for (k, r) in chunk.iter().zip(&out.results) {
            assert_eq!(out.value(r), &k[..]);
        }
    }
}
