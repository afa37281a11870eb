//! `--placement` on a device that shares host memory (PoCL in CI): the device works on the
//! CPU's own table, each index task runs where it is placed, and `auto` starts from timed
//! lines for both processors. Skipped without a device unless HKV_REQUIRE_OPENCL=1.

mod common;

use hkv_engine::Scratch;
use hkv_engine::{
    Backend, Choice, Engine, EngineConfig, Placement, Proc, Request, Response, Responses, Task,
};

const NOW: u32 = 1_700_000_000;

fn device() -> bool {
    common::backends().contains(&Backend::OpenCl(None))
}

/// Whether the device reads host memory (PoCL, integrated GPUs), where the CPU's table is
/// shared and every task placed; a discrete GPU searches a mirror instead (tests/mirror.rs).
fn shares_host_memory() -> bool {
    let all = hkv_index::opencl::devices();
    let pick = all.iter().position(|(i, _)| i.is_gpu).unwrap_or(0);
    let shares = all.get(pick).is_some_and(|(i, _)| i.host_unified_memory)
        && std::env::var("HKV_OPENCL_SHARE").as_deref() != Ok("0");
    if !shares {
        eprintln!("the device does not share host memory: the shared-table test did not run");
    }
    shares
}

fn engine(placement: Placement) -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes: 16 << 20,
        page_size: 64 << 10,
        buckets_per_partition: Some(1 << 12),
        backend: Backend::OpenCl(None),
        placement,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn keys(round: usize) -> Vec<Vec<u8>> {
    (0..200)
        .map(|i| format!("k{round}-{i}").into_bytes())
        .collect()
}

fn run(e: &Engine, reqs: &[Request<'_>]) -> Responses {
    let mut out = Responses::default();
    e.execute(reqs, NOW, &mut out, &mut Scratch::default());
    out
}

/// Sets, reads back, deletes and reads again 200 keys per round, applying the delayed index
/// writes in between so inserts and deletes run as batches; checks every answer.
fn exercise(e: &Engine, rounds: usize) {
    for round in 0..rounds {
        let ks = keys(round);
        let sets: Vec<Request<'_>> = ks.iter().map(|k| Request::set(k, k)).collect();
        let out = run(e, &sets);
        assert!(out.results.iter().all(|r| matches!(r, Response::Stored)));
        e.apply_pending();
        let gets: Vec<Request<'_>> = ks.iter().map(|k| Request::get(k)).collect();
        let out = run(e, &gets);
        for (k, r) in ks.iter().zip(&out.results) {
            assert!(matches!(r, Response::Value { .. }), "{r:?}");
            assert_eq!(out.value(r), &k[..]);
        }
        let dels: Vec<Request<'_>> = ks.iter().map(|k| Request::delete(k)).collect();
        let out = run(e, &dels);
        assert!(out.results.iter().all(|r| matches!(r, Response::Deleted)));
        e.apply_pending();
        let out = run(e, &gets);
        assert!(out.results.iter().all(|r| matches!(r, Response::Miss)));
    }
}

#[test]
fn pocl_shares_the_cpu_table_and_each_task_runs_where_it_is_placed() {
    if !device() || !shares_host_memory() {
        return;
    }
    for placement in Placement::enumerate() {
        let e = engine(placement);
        let p = e.partition(0);
        assert_eq!(p.placement(), (placement, true), "the table is not shared");
        let before = p.placement_report().batches;
        drop(p);
        exercise(&e, 3);
        let after = e.partition(0).placement_report().batches;
        for t in Task::ALL {
            let Choice::Forced(proc) = placement.of(t) else {
                unreachable!()
            };
            let ran = |p: Proc| after[t as usize][p as usize] - before[t as usize][p as usize];
            assert!(
                ran(proc) > 0,
                "{placement}: no {} batch on {proc:?}",
                t.name()
            );
            let other = if proc == Proc::Cpu {
                Proc::Device
            } else {
                Proc::Cpu
            };
            assert_eq!(ran(other), 0, "{placement}: {} ran on {other:?}", t.name());
        }
        // Entries are counted whoever wrote them: all deleted again.
        assert_eq!(e.partition(0).index_report().entries, 0, "{placement}");
    }
}

#[test]
fn auto_starts_from_timed_lines_and_scores_its_predictions() {
    if !device() || !shares_host_memory() {
        return;
    }
    let e = engine(Placement::AUTO);
    let r = e.partition(0).placement_report();
    for t in Task::ALL {
        for p in [Proc::Cpu, Proc::Device] {
            assert!(
                r.per_query_ns_at_64[t as usize][p as usize] > 0.0,
                "{} on {p:?} was not timed at start-up",
                t.name()
            );
        }
    }
    assert_eq!(
        e.partition(0).index_report().entries,
        0,
        "calibration left entries"
    );
    exercise(&e, 3);
    let r = e.partition(0).placement_report();
    assert!(r.measured_ns > 0.0 && r.predicted_ns > 0.0);
    let batches: u64 = r.batches.iter().flatten().sum();
    assert!(batches >= 9, "{batches} placed batches");
}

#[test]
fn a_device_with_a_table_of_its_own_runs_every_index_task_whatever_the_placement() {
    if !device() {
        return;
    }
    let e = Engine::new(&EngineConfig {
        memory_bytes: 16 << 20,
        page_size: 64 << 10,
        buckets_per_partition: Some(1 << 12),
        backend: Backend::OpenCl(None),
        placement: Placement::all(Proc::Cpu),
        share_device_table: false,
        ..EngineConfig::default()
    })
    .unwrap();
    assert!(!e.partition(0).placement().1);
    assert!(!e.partition(0).steals());
    exercise(&e, 2);
    let r = e.partition(0).placement_report();
    for t in Task::ALL {
        assert_eq!(r.batches[t as usize][Proc::Cpu as usize], 0, "{}", t.name());
    }
    assert!(r.batches[Task::Search as usize][Proc::Device as usize] > 0);
}
