//! The OpenCL backend against the CPU backend, on whatever OpenCL device is here (PoCL in
//! CI). Without a device these tests say so and pass, unless HKV_REQUIRE_OPENCL=1 (CI sets
//! it), in which case a missing or broken OpenCL runtime fails them.

use std::collections::HashMap;

use hkv_index::opencl::{devices, OclIndex};
use hkv_index::{hash_key, CpuIndex, IndexBackend, InsertOutcome, KeyHash, NO_LOCATION};
use hkv_mem::Arena;

fn setup_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("POCL_CACHE_DIR").is_none() {
            // PoCL shows no device without a writable kernel cache.
            let dir = std::env::temp_dir().join("hkv-pocl-cache");
            let _ = std::fs::create_dir_all(&dir);
            std::env::set_var("POCL_CACHE_DIR", dir);
        }
    });
}

fn ocl(buckets: u32) -> Option<OclIndex> {
    setup_env();
    match OclIndex::new(buckets, None) {
        Ok(ix) => Some(ix),
        Err(e) if std::env::var("HKV_REQUIRE_OPENCL").as_deref() == Ok("1") => {
            panic!("HKV_REQUIRE_OPENCL=1 but no usable OpenCL device: {e}")
        }
        Err(e) => {
            eprintln!("no OpenCL device ({e}); the OpenCL comparison did not run");
            None
        }
    }
}

fn keys(n: u32, salt: u32) -> Vec<KeyHash> {
    (0..n)
        .map(|i| hash_key(format!("{salt}:{i}").as_bytes()))
        .collect()
}

#[test]
fn search_insert_delete_match_the_cpu_backend() {
    // Both ways of feeding the device: copies, and (where memory is shared) zero-copy.
    for zero_copy in [false, true] {
        differential(zero_copy);
    }
}

fn differential(zero_copy: bool) {
    let Some(mut dev) = ocl(1 << 12) else { return };
    dev.set_zero_copy(zero_copy);
    let arena = Arena::new(4 << 20).unwrap();
    let mut cpu = CpuIndex::new(&arena, 1 << 12).unwrap();
    let ks = keys(6000, 1);
    // A table big enough (4096 x 8 slots) that no insert needs a displacement, so both
    // backends must agree on every result.
    for round in 0..6 {
        let batch: Vec<(KeyHash, u32)> = ks
            .iter()
            .enumerate()
            .skip(round * 500)
            .take(1000)
            .map(|(i, k)| (*k, (i + round * 7) as u32))
            .collect();
        let mut a = vec![InsertOutcome::Inserted; batch.len()];
        let mut b = a.clone();
        cpu.insert(&batch, &mut a);
        dev.insert(&batch, &mut b);
        assert_eq!(a, b, "insert outcomes, round {round}");
        let dels: Vec<(KeyHash, u32)> = batch.iter().step_by(3).copied().collect();
        let (mut da, mut db) = (vec![false; dels.len()], vec![false; dels.len()]);
        cpu.delete(&dels, &mut da);
        dev.delete(&dels, &mut db);
        assert_eq!(da, db, "delete results, round {round}");
        let (mut sa, mut sb) = (vec![0; ks.len()], vec![0; ks.len()]);
        cpu.search(&ks, &mut sa);
        dev.search(&ks, &mut sb);
        assert_eq!(sa, sb, "search results, round {round}");
    }
    assert_eq!(cpu.stats().entries, dev.stats().entries);
    assert_eq!(dev.stats().displacements, 0);
}

#[test]
fn tiny_tables_displace_and_never_lose_an_entry_silently() {
    for buckets in [16u32, 32, 64, 128] {
        let Some(mut dev) = ocl(buckets) else { return };
        let ks = keys(buckets * 8 * 2, buckets);
        let mut model: HashMap<u32, usize> = HashMap::new(); // location -> key index
        for (chunk_no, chunk) in ks.chunks(37).enumerate() {
            let base = chunk_no * 37;
            let batch: Vec<(KeyHash, u32)> = chunk
                .iter()
                .enumerate()
                .map(|(j, k)| (*k, (base + j) as u32))
                .collect();
            let mut out = vec![InsertOutcome::Inserted; batch.len()];
            dev.insert(&batch, &mut out);
            // A batch is applied as a whole: an entry's displacement may drop another entry
            // of the same batch, so all of them are in the model first.
            for j in 0..batch.len() {
                model.insert((base + j) as u32, base + j);
            }
            for (j, o) in out.iter().enumerate() {
                match *o {
                    InsertOutcome::Inserted => {}
                    InsertOutcome::Replaced(old) | InsertOutcome::Evicted(old) => {
                        assert!(model.remove(&old).is_some(), "dropped a location nobody had: {o:?} for entry {} in chunk {chunk_no}, buckets {buckets}", base + j);
                    }
                }
            }
        }
        assert!(
            dev.stats().displacements > 0,
            "{buckets} buckets: no displacement happened"
        );
        assert!(dev.stats().evictions > 0);
        let mut found = vec![0; ks.len()];
        dev.search(&ks, &mut found);
        for (loc, &i) in &model {
            assert_eq!(
                found[i], *loc,
                "{buckets} buckets: key {i} lost without an eviction"
            );
        }
        let present = found.iter().filter(|&&l| l != NO_LOCATION).count();
        assert_eq!(present, model.len());
        assert_eq!(dev.stats().entries as usize, model.len());
    }
}

#[test]
fn kernels_are_built_from_the_hosts_constants() {
    let opts = hkv_index::opencl::build_options();
    assert!(opts.contains("-D SLOTS=8"));
    assert!(opts.contains(&format!("-D FMIX_C1={:#x}u", hkv_index::hash::FMIX_C1)));
}

/// With OCL_ICD_VENDORS pointing at an empty directory there is no platform: the backend
/// reports that cleanly (the engine then uses the CPU backend). Runs in a child process so
/// the ICD loader reads the variable fresh.
#[test]
fn no_platform_is_reported_not_crashed() {
    if std::env::var_os("HKV_OPENCL_CHILD").is_some() {
        assert!(
            devices().is_empty(),
            "devices found with an empty vendor directory"
        );
        assert!(OclIndex::new(16, None).is_err());
        return;
    }
    let empty = std::env::temp_dir().join(format!("hkv-no-icd-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "no_platform_is_reported_not_crashed",
            "--nocapture",
        ])
        .env("HKV_OPENCL_CHILD", "1")
        .env("OCL_ICD_VENDORS", &empty)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A table larger than the largest allocation is split into sub-tables (a key's two buckets
/// stay in one): same answers as the CPU backend on a table too big for one buffer.
#[test]
fn tables_beyond_the_allocation_limit_are_split() {
    setup_env();
    if ocl(16).is_none() {
        return;
    }
    // 4096 buckets = 256 KiB; a 64 KiB limit makes 4 sub-tables.
    let mut dev = OclIndex::with_alloc_limit(1 << 12, None, Some(64 << 10)).unwrap();
    assert_eq!(dev.sub_tables(), 4);
    let arena = Arena::new(4 << 20).unwrap();
    let mut cpu = CpuIndex::new(&arena, 1 << 12).unwrap();
    let ks = keys(8000, 9);
    let batch: Vec<(KeyHash, u32)> = ks.iter().enumerate().map(|(i, k)| (*k, i as u32)).collect();
    let mut a = vec![InsertOutcome::Inserted; batch.len()];
    let mut b = a.clone();
    cpu.insert(&batch, &mut a);
    dev.insert(&batch, &mut b);
    let lost = |o: &[InsertOutcome]| {
        o.iter()
            .filter(|x| !matches!(x, InsertOutcome::Inserted))
            .count()
    };
    let (mut sa, mut sb) = (vec![0; ks.len()], vec![0; ks.len()]);
    cpu.search(&ks, &mut sa);
    dev.search(&ks, &mut sb);
    // Load 0.24: nothing is dropped either way, so every key is found, at its location.
    assert_eq!((lost(&a), lost(&b)), (0, 0));
    assert_eq!(sa, sb);
    assert!(sb.iter().enumerate().all(|(i, &l)| l == i as u32));
    let dels: Vec<(KeyHash, u32)> = batch.iter().step_by(2).copied().collect();
    let mut d = vec![false; dels.len()];
    dev.delete(&dels, &mut d);
    assert!(d.iter().all(|&x| x));
    dev.search(&ks, &mut sb);
    assert!(sb
        .iter()
        .enumerate()
        .all(|(i, &l)| (l == NO_LOCATION) == (i % 2 == 0)));
    assert_eq!(dev.stats().entries, 4000);
    dev.clear().unwrap();
    dev.search(&ks, &mut sb);
    assert!(sb.iter().all(|&l| l == NO_LOCATION));
}

/// The differential test of the shared table and of `search_steal`: the device works on the
/// CPU table in place, and a search shared between the device and this thread (either one
/// taking any number of chunks) answers exactly what the CPU backend answers.
#[test]
fn a_shared_table_and_stolen_search_chunks_match_the_cpu_backend() {
    let Some(mut dev) = ocl(1 << 10) else { return };
    if !dev.device().host_unified_memory {
        eprintln!("the device does not share host memory: nothing to test");
        return;
    }
    let arena = Arena::new(8 << 20).unwrap();
    let mut cpu = CpuIndex::new(&arena, 1 << 10).unwrap();
    // SAFETY: `cpu` outlives `dev` here (dropped in reverse order of declaration is not
    // enough: `dev` is dropped explicitly first) and is not touched during device calls.
    unsafe { dev.share_host_table(cpu.table_ptr(), 1 << 10) }.unwrap();
    let present = keys(3000, 7);
    for (i, h) in present.iter().enumerate() {
        cpu.insert_one(h, i as u32);
    }
    let mut queries = present.clone();
    queries.extend(keys(1000, 8));
    let mut want = vec![0; queries.len()];
    cpu.search(&queries, &mut want);
    // The device reads what the CPU wrote.
    let mut got = vec![0; queries.len()];
    dev.try_search(&queries, &mut got).unwrap();
    assert_eq!(got, want);
    if !dev.device().is_cpu {
        drop(dev);
        return;
    }
    assert!(dev.probe_stealing(), "stealing refused on a CPU device");
    let (mut host, mut device) = (0, 0);
    for round in 0..20 {
        let mut got = vec![0; queries.len()];
        let s = dev
            .try_search_stealing(&queries, &mut got, round % 4 != 0, |h, o| cpu.search(h, o))
            .unwrap();
        assert_eq!(got, want, "round {round}");
        assert_eq!(s.host + s.device, queries.len().div_ceil(64) as u64);
        host += s.host;
        device += s.device;
    }
    assert!(device > 0, "the device never took a chunk");
    // A batch of 3,000+ chunks: the device cannot take them all before this thread starts.
    let big: Vec<KeyHash> = queries.iter().cycle().take(200_000).copied().collect();
    let mut want = vec![0; big.len()];
    cpu.search(&big, &mut want);
    let mut got = vec![0; big.len()];
    let s = dev
        .try_search_stealing(&big, &mut got, true, |h, o| cpu.search(h, o))
        .unwrap();
    assert_eq!(got, want);
    host += s.host;
    assert!(host > 0, "this thread never took a chunk");
    drop(dev);
}

/// A search split between the device and the caller (load dispatch) answers every query as
/// the device alone does, whatever the device's share, and the caller's part runs while
/// the device's is in flight.
#[test]
fn a_split_search_matches_a_whole_one_at_every_share() {
    let Some(mut dev) = ocl(1 << 12) else { return };
    let arena = Arena::new(4 << 20).unwrap();
    let mut cpu = CpuIndex::new(&arena, 1 << 12).unwrap();
    let ks = keys(3000, 7);
    let batch: Vec<(KeyHash, u32)> = ks
        .iter()
        .take(2000)
        .zip(0..)
        .map(|(k, i)| (*k, i))
        .collect();
    let mut a = vec![InsertOutcome::Inserted; batch.len()];
    let mut b = a.clone();
    cpu.insert(&batch, &mut a);
    dev.insert(&batch, &mut b);
    let mut whole = vec![0; ks.len()];
    dev.search(&ks, &mut whole);
    for share in [0, 1, 64, 1000, 2999, 3000, 5000] {
        let mut out = vec![0; ks.len()];
        let mut host_queries = 0;
        let split = dev
            .try_search_split(&ks, &mut out, share, |h, o| {
                host_queries = h.len();
                cpu.search(h, o);
            })
            .unwrap();
        assert_eq!(out, whole, "device share {share}");
        assert_eq!(host_queries, ks.len() - share.min(ks.len()));
        assert!(split.host_ns > 0 || host_queries == 0);
    }
}

/// A discrete GPU's copy of the CPU's table: after each sync of the pages the CPU wrote
/// (inserts, overwrites, deletes, displacement walks, a clear), every device search answers
/// as the CPU's does; the device refuses writes of its own to the copy.
#[test]
fn a_mirror_matches_the_cpu_table_after_each_sync() {
    const BUCKETS: u32 = 1 << 12;
    let Some(mut dev) = ocl(BUCKETS) else { return };
    let arena = Arena::new(8 << 20).unwrap();
    let mut cpu = CpuIndex::new(&arena, BUCKETS).unwrap();
    dev.mirror_table(BUCKETS).unwrap();
    assert!(dev.is_mirror());
    cpu.track_changes(true);
    // Loaded to ~0.92 of 32768 slots in the end, so walks happen.
    let ks = keys(30_000, 9);
    let partial = std::cell::Cell::new(0);
    let check = |dev: &mut OclIndex, cpu: &mut CpuIndex, what: &str| {
        let changes = cpu.take_changes();
        // Small edits must go as runs, not always from the table's start.
        if matches!(&changes, hkv_index::dirty::Changes::Runs(r) if r[0].start > 0) {
            partial.set(partial.get() + 1);
        }
        dev.sync_mirror(cpu.words(), &changes).unwrap();
        let mut want = vec![NO_LOCATION; ks.len()];
        let mut got = vec![0; ks.len()];
        cpu.search(&ks, &mut want);
        dev.try_search(&ks, &mut got).unwrap();
        assert_eq!(got, want, "{what}");
    };
    for (round, part) in ks.chunks(5000).enumerate() {
        for (i, h) in part.iter().enumerate() {
            cpu.insert_one(h, (round * 5000 + i) as u32);
        }
        check(&mut dev, &mut cpu, "inserts");
        // A few overwrites and deletes: only their pages change.
        for (i, h) in part.iter().enumerate().skip(100).step_by(2477) {
            cpu.insert_one(h, 1 << 30 | i as u32);
        }
        check(&mut dev, &mut cpu, "overwrites");
        for (i, h) in part.iter().enumerate().skip(3).step_by(2999) {
            cpu.delete_one(h, (round * 5000 + i) as u32);
        }
        check(&mut dev, &mut cpu, "deletes");
    }
    assert!(partial.get() >= 6, "only {} partial syncs", partial.get());
    assert!(cpu.stats().walks > 0, "no displacement walk was exercised");
    cpu.clear();
    check(&mut dev, &mut cpu, "clear");
    let mut out = [InsertOutcome::Inserted];
    assert!(dev.try_insert(&[(ks[0], 1)], &mut out).is_err());
    assert!(dev.mirror_bytes() > 0);
}
