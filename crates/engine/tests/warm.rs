//! Warm restart (memcached's `-e`): a save and a new engine over the same memory file keep
//! every item (value, flags, expiry, CAS) with delayed index writes in flight at the save,
//! on the CPU and (where PoCL is installed) the OpenCL backend; anything that does not match
//! starts empty.

mod common;

use common::backends;
use hkv_engine::Scratch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hkv_engine::warm::{meta_path, take_image, MemoryFile};
use hkv_engine::{Backend, Engine, EngineConfig, Op, Request, Response, Responses, ScheduleConfig};

const NOW: u32 = 1_700_000_000;

fn file(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("hkv-warm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    let _ = std::fs::remove_file(meta_path(&p));
    p
}

fn config(backend: Backend, path: &Path, memory_bytes: usize) -> EngineConfig {
    EngineConfig {
        memory_bytes,
        partitions: 2,
        page_size: 64 << 10,
        // Small: the table grows while the test fills it, so a grown table (and the
        // pieces the outgrown ones left) is what gets saved.
        buckets_per_partition: Some(1 << 7),
        backend,
        // Periodic batches: index writes are delayed, so some wait at the save.
        schedule: ScheduleConfig {
            min_us: 100.0,
            max_us: 1000.0,
            ..ScheduleConfig::default()
        },
        memory_file: Some(MemoryFile {
            path: path.to_path_buf(),
            image: take_image(path).expect("readable metadata"),
        }),
        ..EngineConfig::default()
    }
}

/// key -> (value, flags, cas, expiry) as `gets` answers, or None for a miss.
type Snapshot = BTreeMap<String, Option<(Vec<u8>, u32, u64, u32)>>;

fn snapshot(e: &Engine, keys: &[String]) -> Snapshot {
    let reqs: Vec<Request> = keys.iter().map(|k| Request::gets(k.as_bytes())).collect();
    let mut out = Responses::default();
    e.execute(&reqs, NOW, &mut out, &mut Scratch::default());
    keys.iter()
        .zip(&out.results)
        .map(|(k, r)| {
            let v = match *r {
                Response::Value {
                    flags, cas, expiry, ..
                } => Some((out.value(r).to_vec(), flags, cas, expiry)),
                _ => None,
            };
            (k.clone(), v)
        })
        .collect()
}

/// Sets, overwrites, deletes and increments over `n` keys of many sizes.
fn fill(e: &Engine, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n).map(|i| format!("key:{i}")).collect();
    // Every 97th value is past the 64 KiB pages: chained (and overwritten, so some retired
    // chains wait at the save too).
    let values: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let len = if i % 97 == 3 {
                70_000 + (i * 131) % 130_000
            } else {
                1 + (i * 37) % 3000
            };
            (0..len)
                .map(|j| b'a' + ((i + j / 1000) % 26) as u8)
                .collect()
        })
        .collect();
    for round in 0..3 {
        let mut out = Responses::default();
        let reqs: Vec<Request> = keys
            .iter()
            .zip(&values)
            .enumerate()
            .filter(|(i, _)| (i + round) % 3 != 0)
            .map(|(i, (k, v))| {
                Request::store(
                    Op::Set,
                    k.as_bytes(),
                    v,
                    i as u32,
                    if i % 5 == 0 { 3600 } else { 0 },
                )
            })
            .collect();
        e.execute(&reqs, NOW, &mut out, &mut Scratch::default());
    }
    let mut out = Responses::default();
    let dels: Vec<Request> = keys
        .iter()
        .step_by(7)
        .map(|k| Request::delete(k.as_bytes()))
        .collect();
    e.execute(&dels, NOW, &mut out, &mut Scratch::default());
    let counters: Vec<Request> = (0..20)
        .map(|i| Request::set(keys[i * 11 + 1].as_bytes(), b"41"))
        .collect();
    e.execute(&counters, NOW, &mut out, &mut Scratch::default());
    let incrs: Vec<Request> = (0..20)
        .map(|i| Request::incr(keys[i * 11 + 1].as_bytes(), 1))
        .collect();
    e.execute(&incrs, NOW, &mut out, &mut Scratch::default());
    keys
}

#[test]
fn a_saved_engine_comes_back_with_every_item_as_it_was() {
    for b in backends() {
        let path = file(&format!("roundtrip-{b:?}"));
        let e = Engine::new(&config(b, &path, 32 << 20)).unwrap();
        let keys = fill(&e, 4000);
        assert!(
            e.pending_writes() > 0,
            "no delayed index write was in flight"
        );
        let before = snapshot(&e, &keys);
        assert!(before.values().filter(|v| v.is_some()).count() > 2000);
        let chained = before
            .values()
            .flatten()
            .filter(|v| v.0.len() > 64 << 10)
            .count();
        assert!(chained > 10, "only {chained} chained values");
        let classes = e.class_reports().len();
        let dump =
            |e: &Engine| -> Vec<_> { (0..classes).map(|c| e.newest_items(c, 10, NOW)).collect() };
        let dumped = dump(&e);
        assert!(dumped.iter().any(|d| d.len() == 10));
        let saved = e.save_memory_file().unwrap();
        drop(e);
        assert!(meta_path(&path).exists());

        let e = Engine::new(&config(b, &path, 32 << 20)).unwrap();
        assert!(!meta_path(&path).exists(), "the metadata is used once");
        assert_eq!(e.store_stats().curr_items, saved.items);
        assert_eq!(
            dumped,
            dump(&e),
            "{b:?}: a cachedump lists the newest items as before"
        );
        let after = snapshot(&e, &keys);
        assert_eq!(before, after, "{b:?}: items differ after the warm restart");

        // Writes go on: a new version gets a CAS above the old one, and free chunks are
        // reused without touching live items.
        let k = keys.iter().find(|k| before[*k].is_some()).unwrap();
        let old_cas = before[k].as_ref().unwrap().2;
        let mut out = Responses::default();
        e.execute(
            &[Request::set(k.as_bytes(), b"new")],
            NOW,
            &mut out,
            &mut Scratch::default(),
        );
        let now = snapshot(&e, std::slice::from_ref(k));
        assert!(now[k].as_ref().unwrap().2 > old_cas);
        let fresh: Vec<String> = (0..2000).map(|i| format!("fresh:{i}")).collect();
        let reqs: Vec<Request> = fresh
            .iter()
            .map(|k| Request::set(k.as_bytes(), b"x"))
            .collect();
        e.execute(&reqs, NOW, &mut out, &mut Scratch::default());
        let again = snapshot(&e, &keys);
        for key in &keys {
            if key != k {
                assert_eq!(again[key], before[key], "{key} changed by later writes");
            }
        }
        drop(e);

        // Not saved this time (a crash, SIGTERM): the next start is empty.
        let e = Engine::new(&config(b, &path, 32 << 20)).unwrap();
        assert_eq!(e.store_stats().curr_items, 0);
        let _ = std::fs::remove_file(&path);
    }
}

fn saved_engine(tag: &str) -> (PathBuf, Snapshot, Vec<String>) {
    let path = file(tag);
    let e = Engine::new(&config(Backend::Cpu, &path, 32 << 20)).unwrap();
    let keys = fill(&e, 1000);
    let snap = snapshot(&e, &keys);
    e.save_memory_file().unwrap();
    (path, snap, keys)
}

fn is_empty(e: &Engine, keys: &[String]) -> bool {
    e.store_stats().curr_items == 0 && snapshot(e, keys).values().all(|v| v.is_none())
}

#[test]
fn other_settings_start_empty() {
    let (path, _, keys) = saved_engine("settings");
    // Another -m.
    let e = Engine::new(&config(Backend::Cpu, &path, 40 << 20)).unwrap();
    assert!(is_empty(&e, &keys));
    drop(e);

    let (path, _, keys) = saved_engine("partitions");
    let mut c = config(Backend::Cpu, &path, 32 << 20);
    c.partitions = 3;
    let e = Engine::new(&c).unwrap();
    assert!(is_empty(&e, &keys));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_page_changed_after_the_save_starts_empty() {
    let (path, before, keys) = saved_engine("tamper");
    let meta = std::fs::read_to_string(meta_path(&path)).unwrap();
    let json: serde_json::Value = serde_json::from_str(meta.lines().next().unwrap()).unwrap();
    let page = json["stores"][0]["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|c| {
            c["pages"]
                .as_array()
                .and_then(|p| p.first())
                .and_then(|p| p.as_u64())
        })
        .unwrap();
    // One byte in the middle of a value.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[page as usize + 200] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let e = Engine::new(&config(Backend::Cpu, &path, 32 << 20)).unwrap();
    assert!(is_empty(&e, &keys));
    assert!(before.values().any(|v| v.is_some()));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn torn_or_foreign_metadata_is_refused() {
    let (path, _, keys) = saved_engine("torn");
    let meta = meta_path(&path);
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, &text[..text.len() / 2]).unwrap();
    assert!(take_image(&path).is_err());
    assert!(!meta.exists(), "refused metadata is removed too");
    let e = Engine::new(&config(Backend::Cpu, &path, 32 << 20)).unwrap();
    assert!(is_empty(&e, &keys));
    drop(e);

    // A well-formed file from another version.
    let (path, _, _) = saved_engine("version");
    let meta = meta_path(&path);
    let text = std::fs::read_to_string(&meta).unwrap();
    let body = text
        .lines()
        .next()
        .unwrap()
        .replace("\"version\":\"", "\"version\":\"9");
    let sum = xxhash_rust::xxh3::xxh3_64(body.as_bytes());
    std::fs::write(&meta, format!("{body}\nxxh3 {sum:016x}\n")).unwrap();
    let err = take_image(&path).unwrap_err();
    assert!(err.contains("saved by hkv 9"), "{err}");
    let _ = std::fs::remove_file(&path);
}
