//! A device that cannot read host memory (a discrete GPU; PoCL here with
//! `HKV_OPENCL_SHARE=0`) searches a copy of the CPU's table that the CPU keeps up to date:
//! searches are placed, every write stays on the CPU, and no answer differs from the CPU
//! engine's, through overwrites, deletes and growth. Skipped without a device unless
//! HKV_REQUIRE_OPENCL=1.

mod common;

use hkv_engine::Scratch;
use hkv_engine::{
    Backend, DeviceTable, Engine, EngineConfig, Placement, Proc, Request, Response, Responses, Task,
};

const NOW: u32 = 1_700_000_000;

fn device() -> bool {
    // Every test of this file wants the mirror, whatever the device.
    std::env::set_var("HKV_OPENCL_SHARE", "0");
    common::backends().contains(&Backend::OpenCl(None))
}

fn engine(placement: &str) -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes: 32 << 20,
        page_size: 64 << 10,
        // Small, so that the table grows under the test's keys.
        buckets_per_partition: Some(1 << 6),
        backend: Backend::OpenCl(None),
        placement: placement.parse::<Placement>().unwrap(),
        ..EngineConfig::default()
    })
    .unwrap()
}

fn run(e: &Engine, reqs: &[Request<'_>]) -> Responses {
    let mut out = Responses::default();
    e.execute(reqs, NOW, &mut out, &mut Scratch::default());
    out
}

/// Rounds of sets (new values each round), reads, deletes of a third and reads again, with
/// the delayed index writes applied in between; every answer checked.
fn exercise(e: &Engine, rounds: usize) {
    let keys: Vec<Vec<u8>> = (0..3000).map(|i| format!("m{i}").into_bytes()).collect();
    for round in 0..rounds {
        let values: Vec<Vec<u8>> = keys
            .iter()
            .map(|k| [k.as_slice(), format!("/{round}").as_bytes()].concat())
            .collect();
        let sets: Vec<Request<'_>> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| Request::set(k, v))
            .collect();
        for chunk in sets.chunks(256) {
            let out = run(e, chunk);
            assert!(out.results.iter().all(|r| matches!(r, Response::Stored)));
        }
        e.apply_pending();
        let gets: Vec<Request<'_>> = keys.iter().map(|k| Request::get(k)).collect();
        for (i, chunk) in gets.chunks(256).enumerate() {
            let out = run(e, chunk);
            for (j, r) in out.results.iter().enumerate() {
                assert!(matches!(r, Response::Value { .. }), "round {round}: {r:?}");
                assert_eq!(out.value(r), &values[i * 256 + j][..], "round {round}");
            }
        }
        let dels: Vec<Request<'_>> = keys.iter().step_by(3).map(|k| Request::delete(k)).collect();
        let out = run(e, &dels);
        assert!(out.results.iter().all(|r| matches!(r, Response::Deleted)));
        e.apply_pending();
        for (i, chunk) in gets.chunks(256).enumerate() {
            let out = run(e, chunk);
            for (j, r) in out.results.iter().enumerate() {
                let n = i * 256 + j;
                if n % 3 == 0 {
                    assert!(matches!(r, Response::Miss), "round {round} key {n}: {r:?}");
                } else {
                    assert_eq!(out.value(r), &values[n][..], "round {round} key {n}");
                }
            }
        }
    }
}

#[test]
fn a_mirrored_table_answers_as_the_cpu_does_with_every_write_on_the_cpu() {
    if !device() {
        return;
    }
    for placement in ["search=device", "search=device,insert=device,delete=device"] {
        let e = engine(placement);
        assert_eq!(e.partition(0).device_table(), DeviceTable::Mirror);
        exercise(&e, 3);
        let p = e.partition(0);
        let r = p.placement_report();
        let ran = |t: Task, proc: Proc| r.batches[t as usize][proc as usize];
        assert!(ran(Task::Search, Proc::Device) > 0, "{placement}");
        // The device's table is a copy: it writes nothing, whatever was asked.
        for t in [Task::Insert, Task::Delete, Task::Kc, Task::Rd] {
            assert_eq!(ran(t, Proc::Device), 0, "{placement}: {}", t.name());
        }
        assert!(r.mirror_bytes > 0);
        assert!(p.index_report().grows > 0, "the table never grew");
        assert_eq!(p.index_report().entries, 2000, "{placement}");
    }
}

#[test]
fn auto_times_the_search_on_both_and_places_only_the_search() {
    if !device() {
        return;
    }
    let e = engine("auto");
    let r = e.partition(0).placement_report();
    for p in [Proc::Cpu, Proc::Device] {
        assert!(r.per_query_ns_at_64[Task::Search as usize][p as usize] > 0.0);
    }
    assert_eq!(
        r.per_query_ns_at_64[Task::Insert as usize][Proc::Device as usize],
        0.0
    );
    assert_eq!(e.partition(0).index_report().entries, 0);
    exercise(&e, 2);
    let r = e.partition(0).placement_report();
    assert_eq!(r.batches[Task::Insert as usize][Proc::Device as usize], 0);
}

#[test]
fn device_searches_of_a_mirror_are_split_with_the_thread() {
    if !device() || std::env::var("HKV_OPENCL_DISPATCH").as_deref() == Ok("0") {
        return;
    }
    let e = engine("search=device");
    exercise(&e, 1);
    let r = e.partition(0).placement_report();
    assert!(r.splits > 0, "no split search");
    assert!(r.split_device_queries > 0 && r.split_device_queries <= r.split_queries);
}
