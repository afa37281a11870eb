//! Reads of one key in one batch run in one read group. Each must answer from the item as the
//! reads before it left it: meta `h` (fetched before) and `l` (last access) report the state
//! before this request, and a `u` read leaves the item as it found it. Untimed groups run KC
//! and RD in one pass; timed ones (every batch while writes are delayed) in two. Both are
//! checked.

use hkv_engine::{hit, Engine, EngineConfig, Request, Response, Responses, ScheduleConfig};
use hkv_engine::{Op, Scratch};

const NOW: u32 = 1_700_000_000;

/// `min_us` above zero delays index writes, and every read group of such an engine is timed.
fn engine(min_us: f64) -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes: 8 << 20,
        partitions: 1,
        page_size: 64 << 10,
        schedule: ScheduleConfig {
            min_us,
            ..ScheduleConfig::default()
        },
        ..EngineConfig::default()
    })
    .unwrap()
}

/// (fetched before, last access, value) of each read of the batch.
fn reads(e: &Engine, now: u32, reqs: &[Request<'_>]) -> Vec<(bool, u32, Vec<u8>)> {
    let mut out = Responses::default();
    e.execute(reqs, now, &mut out, &mut Scratch::default());
    out.results
        .iter()
        .map(|r| match r {
            Response::Value { bits, atime, .. } => {
                (bits & hit::FETCHED != 0, *atime, out.value(r).to_vec())
            }
            other => panic!("expected a hit, got {other:?}"),
        })
        .collect()
}

fn no_bump(key: &[u8]) -> Request<'_> {
    let mut r = Request::get(key);
    r.meta.no_bump = true;
    r
}

#[test]
fn reads_of_one_key_in_one_group_see_the_reads_before_them() {
    for min_us in [0.0, 100.0] {
        let e = engine(min_us);
        let mut out = Responses::default();
        let set = [Request::store(Op::Set, b"k", b"v1", 0, 0)];
        e.execute(&set, NOW, &mut out, &mut Scratch::default());
        let later = NOW + 5;
        let r = reads(
            &e,
            later,
            &[no_bump(b"k"), Request::get(b"k"), Request::get(b"k")],
        );
        // KC is timed only in timed groups, which are the ones that take two passes.
        let timed = e.stats().task_kc_ns > 0;
        assert_eq!(
            timed,
            min_us > 0.0,
            "min_us {min_us}: the pass under test did not run"
        );
        let v = b"v1".to_vec();
        assert_eq!(
            r,
            [
                (false, NOW, v.clone()),
                (false, NOW, v.clone()),
                (true, later, v)
            ],
            "min_us {min_us}"
        );
    }
}

#[test]
fn a_read_after_a_write_of_its_key_in_one_batch_sees_the_write() {
    for min_us in [0.0, 100.0] {
        let e = engine(min_us);
        let mut out = Responses::default();
        let reqs = [
            Request::store(Op::Set, b"k", b"old", 0, 0),
            Request::get(b"k"),
            Request::store(Op::Set, b"k", b"new value", 0, 0),
            Request::get(b"k"),
            Request::get(b"k"),
        ];
        e.execute(&reqs, NOW, &mut out, &mut Scratch::default());
        let values: Vec<Vec<u8>> = [1, 3, 4]
            .iter()
            .map(|&i| out.value(&out.results[i]).to_vec())
            .collect();
        assert_eq!(
            values,
            [
                b"old".to_vec(),
                b"new value".to_vec(),
                b"new value".to_vec()
            ],
            "min_us {min_us}"
        );
        let Response::Value { bits, .. } = out.results[4] else {
            panic!("expected a hit");
        };
        assert_ne!(bits & hit::FETCHED, 0, "min_us {min_us}");
    }
}

#[test]
fn an_expired_key_read_twice_in_one_group_is_removed_once_and_missed_twice() {
    for min_us in [0.0, 100.0] {
        let e = engine(min_us);
        // No expiry sweep (`lru_crawler disable`): the reads find the expired item.
        e.set_crawler(false);
        let mut out = Responses::default();
        let set = [
            Request::store(Op::Set, b"gone", b"v", 0, 0).with_exptime(10),
            Request::store(Op::Set, b"kept", b"w", 0, 0),
        ];
        e.execute(&set, NOW, &mut out, &mut Scratch::default());
        let before = e.stats();
        let mut out = Responses::default();
        let reqs = [
            Request::get(b"gone"),
            Request::get(b"kept"),
            Request::get(b"gone"),
        ];
        e.execute(&reqs, NOW + 20, &mut out, &mut Scratch::default());
        let r: Vec<String> = out
            .results
            .iter()
            .map(|r| match r {
                Response::Value { .. } => format!("VALUE {:?}", out.value(r)),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(r, ["Miss", "VALUE [119]", "Miss"], "min_us {min_us}");
        let after = e.stats();
        assert_eq!(after.get_misses - before.get_misses, 2, "min_us {min_us}");
        assert_eq!(after.get_hits - before.get_hits, 1, "min_us {min_us}");
        assert_eq!(
            after.expired_on_access - before.expired_on_access,
            1,
            "min_us {min_us}"
        );
    }
}
