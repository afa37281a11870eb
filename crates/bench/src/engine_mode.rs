//! Engine mode: no network. Every figure is per thread, a median over `--runs`, and also a
//! ratio of this machine's random-access limit measured in the same run.

use std::sync::Barrier;
use std::time::Instant;

use hkv_engine::{Engine, EngineConfig, Op, Partition, Request, Response, Responses};
use hkv_index::{hash_key, IndexSizing, KeyHash};
use hkv_store::{chunk_sizes, ClassInfo, HEADER_BYTES};

use crate::randaccess;
use crate::workload::{median, write_key, Dataset, Dist, Workload};
use crate::zipf::{KeyChooser, Rng};

const NOW: u32 = 1_700_000_000;
pub(crate) const PAGE: usize = 1 << 20;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long, value_enum, default_value = "k8")]
    dataset: Dataset,
    /// Keys preloaded (default: 10M for K8 and K16, 4M for K32, 1M for K128).
    #[arg(long)]
    keys: Option<u64>,
    /// YCSB mixes to run besides the index-alone and GET-path measurements.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "a,b,c")]
    workload: Vec<Workload>,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "uniform,zipf"
    )]
    dist: Vec<Dist>,
    /// Zipf skew.
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    /// Engine threads (one hash partition each); a list runs each count in turn.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    threads: Vec<u32>,
    /// Queries per thread per measurement.
    #[arg(long, default_value_t = 4_000_000)]
    queries: u64,
    /// Requests per engine batch.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Repetitions; medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Skip the hashbrown::HashMap comparison (it needs ~100 bytes per key of extra memory).
    #[arg(long)]
    no_hashbrown: bool,
    /// Memory budget in MiB for index and items (default: sized to hold every key with room
    /// to spare). A smaller budget makes the run measure an engine that evicts.
    #[arg(long)]
    memory_mb: Option<usize>,
    /// Where index work runs: the CPU backend, or an OpenCL device (the first GPU, else the
    /// first device, e.g. PoCL).
    #[arg(long, value_parser = ["cpu", "opencl"], default_value = "cpu")]
    engine: String,
    /// With `--engine opencl`: where index tasks run (the server's `--placement`, e.g.
    /// `search=device` for the device's own search rate).
    #[arg(long, default_value = "auto")]
    placement: hkv_engine::Placement,
    /// Print one JSON object per result line instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct Line<'a> {
    dataset: Dataset,
    keys: u64,
    threads: u32,
    dist: Option<Dist>,
    what: &'a str,
    /// Millions of operations (or reads) per second per thread, median of runs.
    mops_per_thread: f64,
    /// `mops_per_thread` over the random-access limit measured in the same run.
    ratio_to_limit: f64,
    runs: Vec<f64>,
}

/// Keys of one thread's query stream, laid out flat so the timed loop does no formatting.
pub(crate) struct Stream {
    keys: Vec<u8>,
    key_len: usize,
    /// true: GET; false: SET. Only used by the YCSB mixes.
    pub(crate) is_get: Vec<bool>,
}

impl Stream {
    pub(crate) fn key(&self, i: usize) -> &[u8] {
        &self.keys[i * self.key_len..(i + 1) * self.key_len]
    }
    pub(crate) fn len(&self) -> usize {
        self.is_get.len()
    }

    /// The first `n` requests.
    pub(crate) fn head(&self, n: usize) -> Stream {
        let n = n.min(self.len());
        Stream {
            keys: self.keys[..n * self.key_len].to_vec(),
            key_len: self.key_len,
            is_get: self.is_get[..n].to_vec(),
        }
    }
}

/// Budget big enough for all keys plus slack, index included.
pub(crate) fn memory_for(keys: u64, chunk: usize, threads: u32) -> usize {
    let per_page = ClassInfo::new(chunk, PAGE).per_page as u64;
    let pages = (keys / threads as u64 / per_page + 3) * threads as u64;
    let mut budget = (keys as f64 * 1.1 * (chunk as f64 + 10.0)) as usize;
    loop {
        let index = IndexSizing::for_budget(budget, chunk, threads)
            .map(|s| s.total_bytes())
            .unwrap_or(0);
        let need = index + pages as usize * PAGE + threads as usize * PAGE;
        if budget >= need {
            return budget;
        }
        budget = need;
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let (key_len, value_len, default_keys) = args.dataset.shape();
    let keys = args.keys.unwrap_or(default_keys);
    anyhow::ensure!(
        keys > 0 && keys < 10u64.pow(key_len.min(19) as u32),
        "too many keys for {key_len}-byte keys"
    );
    let chunk = chunk_sizes(1.25, PAGE)
        .into_iter()
        .find(|&c| c >= HEADER_BYTES + key_len + value_len)
        .ok_or_else(|| anyhow::anyhow!("item does not fit a page"))?;
    let value = vec![b'v'; value_len];

    // The peer: the same keys in a hashbrown map, probed single-threaded.
    let map = (!args.no_hashbrown).then(|| {
        let mut m: hashbrown::HashMap<Box<[u8]>, Box<[u8]>> =
            hashbrown::HashMap::with_capacity(keys as usize);
        let mut k = vec![0u8; key_len];
        for id in 0..keys {
            write_key(id, &mut k);
            m.insert(
                k.clone().into_boxed_slice(),
                value.clone().into_boxed_slice(),
            );
        }
        m
    });

    for &threads in &args.threads {
        let memory = args
            .memory_mb
            .map(|mb| mb << 20)
            .unwrap_or_else(|| memory_for(keys, chunk, threads));
        let engine = Engine::new(&EngineConfig {
            memory_bytes: memory,
            partitions: threads,
            page_size: PAGE,
            expected_item_bytes: chunk,
            backend: if args.engine == "opencl" {
                hkv_engine::Backend::OpenCl(None)
            } else {
                hkv_engine::Backend::Cpu
            },
            placement: args.placement,
            ..EngineConfig::default()
        })?;
        let index_bytes = engine.index_bytes();
        let (_arena, mut parts) = engine.into_partitions();
        let owners: Vec<u8> = {
            let mut k = vec![0u8; key_len];
            (0..keys)
                .map(|id| {
                    write_key(id, &mut k);
                    hash_key(&k).partition(threads) as u8
                })
                .collect()
        };
        let t = Instant::now();
        // The preload's writes search one key at a time where a batch's keys repeat: on
        // the CPU, whatever the measured placement (a forced device search made a preload
        // of 1M keys take a minute).
        for p in &mut parts {
            p.set_placement(hkv_engine::Placement::all(hkv_engine::Proc::Cpu));
        }
        preload(&mut parts, &owners, key_len, &value, args.batch);
        for p in &mut parts {
            p.set_placement(args.placement);
        }
        eprintln!(
            "# {:?}: {keys} keys preloaded on {threads} thread(s) in {:.1}s; budget {} MiB, index {} MiB ({} buckets/partition), load {:.2}",
            args.dataset,
            t.elapsed().as_secs_f64(),
            memory >> 20,
            index_bytes >> 20,
            parts[0].index().bucket_count(),
            keys as f64 / (index_bytes / 64 * 8) as f64,
        );
        let missing: u64 = parts.iter().map(|p| p.evictions()).sum();
        anyhow::ensure!(
            missing == 0,
            "{missing} keys evicted during preload: --memory-mb too small for --keys"
        );

        let emit = |what: &str, dist: Option<Dist>, runs: Vec<f64>, limit: f64| {
            let mut r = runs.clone();
            let m = median(&mut r);
            let line = Line {
                dataset: args.dataset,
                keys,
                threads,
                dist,
                what,
                mops_per_thread: m,
                ratio_to_limit: if limit > 0.0 { m / limit } else { 0.0 },
                runs,
            };
            if args.json {
                println!("{}", serde_json::to_string(&line).expect("serialisable"));
            } else {
                println!(
                    "{:<5} {:>2} thr {:<8} {:<26} {:>8.2} Mops/thread  {:>5.2} x limit",
                    format!("{:?}", args.dataset),
                    threads,
                    dist.map_or("-".into(), |d| format!("{d:?}")),
                    what,
                    m,
                    line.ratio_to_limit
                );
            }
            m
        };

        // The yardstick, measured per run beside the engine so noise hits both alike.
        let (_ra_arena, buf) = randaccess::buffer(index_bytes)?;
        let mut limits = Vec::new();
        for run in 0..args.runs {
            let per_thread = on_threads(threads, |t| {
                randaccess::reads_per_second(&buf, 20_000_000, (run * 64 + t) as u64 + 1)
            });
            limits.push(per_thread.iter().sum::<f64>() / threads as f64 / 1e6);
        }
        let limit = emit("random 64B reads (limit)", None, limits, 0.0);
        drop(buf);

        for &dist in &args.dist {
            let chooser = match dist {
                Dist::Uniform => KeyChooser::uniform(keys),
                Dist::Zipf => KeyChooser::zipf(keys, args.theta),
            };
            let streams: Vec<Stream> = (0..threads)
                .map(|t| make_stream(&chooser, &owners, t, args.queries, key_len, 7 + t as u64))
                .collect();

            let runs = measure(args.runs, &mut parts, &streams, |p, s| {
                index_only(p, s, args.batch)
            });
            emit("index (hash+search)", Some(dist), runs, limit);

            let before: Vec<_> = parts.iter().map(|p| p.stats()).collect();
            let runs = measure(args.runs, &mut parts, &streams, |p, s| {
                engine_mix(p, s, args.batch, &value, true)
            });
            let get_path = emit("GET path (MM IN KC RD)", Some(dist), runs, limit);
            if !args.json {
                // Where a GET's time goes, from the engine's own task timers.
                let (mut gets, mut t_in, mut t_kc, mut t_rd) = (0u64, 0u64, 0u64, 0u64);
                for (p, b) in parts.iter().zip(&before) {
                    let a = p.stats();
                    gets += (a.get_hits + a.get_misses) - (b.get_hits + b.get_misses);
                    t_in += a.task_in_ns - b.task_in_ns;
                    t_kc += a.task_kc_ns - b.task_kc_ns;
                    t_rd += a.task_rd_ns - b.task_rd_ns;
                }
                let per = |t: u64| t as f64 / gets.max(1) as f64;
                println!(
                    "      per GET: IN {:.0} ns, KC {:.0} ns, RD {:.0} ns (the rest: hashing, batching, profiling)",
                    per(t_in),
                    per(t_kc),
                    per(t_rd)
                );
            }

            if let Some(map) = &map {
                let runs: Vec<f64> = (0..args.runs)
                    .map(|_| hashbrown_gets(map, &streams[0]))
                    .collect();
                let peer = emit("hashbrown GET, 1 thread", Some(dist), runs, limit);
                if !args.json {
                    println!("      GET path / hashbrown = {:.2}x", get_path / peer);
                }
            }

            if let Some((b, copy, kernel)) = parts
                .iter()
                .filter_map(|p| p.device_timing())
                .reduce(|a, x| (a.0 + x.0, a.1 + x.1, a.2 + x.2))
            {
                if !args.json {
                    println!(
                        "      device ({}): {b} search batches, copy {:.1} ms, kernel {:.1} ms ({:.0}% kernel)",
                        parts[0].backend_name(),
                        copy as f64 / 1e6,
                        kernel as f64 / 1e6,
                        100.0 * kernel as f64 / (copy + kernel).max(1) as f64
                    );
                }
            }
            for &w in &args.workload {
                let streams: Vec<Stream> = streams
                    .iter()
                    .enumerate()
                    .map(|(t, s)| with_mix(s, w, 99 + t as u64))
                    .collect();
                let runs = measure(args.runs, &mut parts, &streams, |p, s| {
                    engine_mix(p, s, args.batch, &value, false)
                });
                emit(&format!("YCSB-{w:?}"), Some(dist), runs, limit);
            }
        }
    }
    Ok(())
}

fn on_threads<R: Send>(threads: u32, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as usize)
            .map(|t| {
                let f = &f;
                s.spawn(move || f(t))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    })
}

/// Runs `f` on every partition at once (one thread each), `runs` times; returns, per run, the
/// mean Mops per thread.
fn measure(
    runs: usize,
    parts: &mut [Partition],
    streams: &[Stream],
    f: impl Fn(&mut Partition, &Stream) -> f64 + Sync,
) -> Vec<f64> {
    (0..runs)
        .map(|_| {
            let barrier = Barrier::new(parts.len());
            let rates: Vec<f64> = std::thread::scope(|s| {
                let handles: Vec<_> = parts
                    .iter_mut()
                    .zip(streams)
                    .map(|(p, st)| {
                        let (f, barrier) = (&f, &barrier);
                        s.spawn(move || {
                            barrier.wait();
                            f(p, st)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("bench thread"))
                    .collect()
            });
            rates.iter().sum::<f64>() / rates.len() as f64
        })
        .collect()
}

pub(crate) fn preload(
    parts: &mut [Partition],
    owners: &[u8],
    key_len: usize,
    value: &[u8],
    batch: usize,
) {
    std::thread::scope(|s| {
        for (p, part) in parts.iter_mut().enumerate() {
            s.spawn(move || {
                let ids: Vec<u64> = (0..owners.len() as u64)
                    .filter(|&i| owners[i as usize] as usize == p)
                    .collect();
                let mut keys = vec![0u8; batch * key_len];
                let mut out = Responses::default();
                for chunk in ids.chunks(batch) {
                    for (j, &id) in chunk.iter().enumerate() {
                        write_key(id, &mut keys[j * key_len..(j + 1) * key_len]);
                    }
                    let reqs: Vec<Request<'_>> = (0..chunk.len())
                        .map(|j| Request::set(&keys[j * key_len..(j + 1) * key_len], value))
                        .collect();
                    out.clear();
                    part.execute(&reqs, NOW, &mut out);
                }
                // The index-alone figures read the index directly: no write may still wait.
                part.apply_pending();
            });
        }
    });
}

pub(crate) fn make_stream(
    chooser: &KeyChooser,
    owners: &[u8],
    thread: u32,
    n: u64,
    key_len: usize,
    seed: u64,
) -> Stream {
    let mut rng = Rng::new(seed);
    let mut keys = Vec::with_capacity(n as usize * key_len);
    let mut count = 0;
    while count < n {
        let id = chooser.next(&mut rng);
        if owners[id as usize] as u32 != thread {
            continue;
        }
        let at = keys.len();
        keys.resize(at + key_len, 0);
        write_key(id, &mut keys[at..]);
        count += 1;
    }
    Stream {
        keys,
        key_len,
        is_get: vec![true; n as usize],
    }
}

pub(crate) fn with_mix(s: &Stream, w: Workload, seed: u64) -> Stream {
    let mut rng = Rng::new(seed);
    Stream {
        keys: s.keys.clone(),
        key_len: s.key_len,
        is_get: (0..s.len())
            .map(|_| rng.below(100) < w.get_percent())
            .collect(),
    }
}

/// IN alone (plus hashing, which the engine does first): batched search over the stream.
fn index_only(p: &mut Partition, s: &Stream, batch: usize) -> f64 {
    let mut hashes: Vec<KeyHash> = Vec::with_capacity(batch);
    let mut locs = vec![0u32; batch];
    let mut found = 0u64;
    let t = Instant::now();
    for start in (0..s.len()).step_by(batch) {
        let end = (start + batch).min(s.len());
        hashes.clear();
        hashes.extend((start..end).map(|i| hash_key(s.key(i))));
        p.index_search(&hashes, &mut locs[..end - start]);
        found += locs[..end - start]
            .iter()
            .filter(|&&l| l != hkv_index::NO_LOCATION)
            .count() as u64;
    }
    let rate = s.len() as f64 / t.elapsed().as_secs_f64() / 1e6;
    assert_eq!(found, s.len() as u64, "index lost preloaded keys");
    rate
}

/// The engine's real path on the stream: GETs only (`gets_only`), or the stream's YCSB mix.
pub(crate) fn engine_mix(
    p: &mut Partition,
    s: &Stream,
    batch: usize,
    value: &[u8],
    gets_only: bool,
) -> f64 {
    let mut out = Responses::default();
    let mut reqs: Vec<Request<'_>> = Vec::with_capacity(batch);
    let mut hits = 0u64;
    let mut gets = 0u64;
    let t = Instant::now();
    for start in (0..s.len()).step_by(batch) {
        let end = (start + batch).min(s.len());
        reqs.clear();
        reqs.extend((start..end).map(|i| {
            if gets_only || s.is_get[i] {
                Request::get(s.key(i))
            } else {
                Request::store(Op::Set, s.key(i), value, 0, 0)
            }
        }));
        out.clear();
        p.execute(&reqs, NOW, &mut out);
        for r in &out.results {
            match r {
                Response::Value { .. } => {
                    hits += 1;
                    gets += 1;
                }
                Response::Miss => gets += 1,
                _ => {}
            }
        }
    }
    let rate = s.len() as f64 / t.elapsed().as_secs_f64() / 1e6;
    assert_eq!(hits, gets, "preloaded keys missed");
    rate
}

fn hashbrown_gets(map: &hashbrown::HashMap<Box<[u8]>, Box<[u8]>>, s: &Stream) -> f64 {
    let mut out: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut hits = 0u64;
    let t = Instant::now();
    for i in 0..s.len() {
        if let Some(v) = map.get(s.key(i)) {
            out.extend_from_slice(v);
            hits += 1;
        }
        if out.len() > (1 << 20) - 2048 {
            out.clear();
        }
    }
    let rate = s.len() as f64 / t.elapsed().as_secs_f64() / 1e6;
    assert_eq!(hits, s.len() as u64);
    std::hint::black_box(&out);
    rate
}
