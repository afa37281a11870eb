//! `hkv-bench hotcold`: KVCG's hot/cold split measured (KVCG Fig. 4's analogue). hkv runs
//! at a fixed batch interval C with the split on and off. An open-loop Zipf load times GETs
//! of the most popular keys (hot) apart from the rest (cold), and closed-loop runs give
//! throughput under Zipf and uniform loads. Writes a table and a CDF plot.

use std::path::PathBuf;
use std::time::Instant;

use crate::compare::{relative, start, write_marked};
use crate::net::{self, Protocol, RunResult};
use crate::plot;
use crate::workload::{Dataset, Dist, Workload};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The fixed batch interval C, microseconds.
    #[arg(long, default_value_t = 2000.0)]
    interval: f64,
    /// hkv's index backend.
    #[arg(long, value_parser = ["cpu", "opencl"], default_value = "cpu")]
    engine: String,
    /// Connections of the latency runs, each with one request in flight (as unpipelined
    /// clients are): a connection's later requests never queue behind its earlier ones.
    #[arg(long, default_value_t = 32)]
    conns: usize,
    /// The most popular key ids timed as hot.
    #[arg(long, default_value_t = 100)]
    hot_keys: u64,
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// The hkv binary (default: `hkv` beside this program).
    #[arg(long)]
    hkv: Option<PathBuf>,
    #[arg(long, default_value = "docs/bench")]
    out: PathBuf,
    /// The Markdown file whose hot/cold section is rewritten.
    #[arg(long, default_value = "docs/BENCHMARKS.md")]
    markdown: PathBuf,
}

struct Split {
    on: bool,
    open: RunResult,
    zipf: RunResult,
    uniform: RunResult,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let mut rows = Vec::new();
    for on in [true, false] {
        let mut extra = vec![
            "--engine".to_string(),
            args.engine.clone(),
            "--batch-interval-us".to_string(),
            format!("{}", args.interval),
            "--hot-epoch-ms".to_string(),
            "200".to_string(),
        ];
        if !on {
            extra.extend(["--hot-cache-mb".to_string(), "0".to_string()]);
        }
        let s = start("hkv", args.hkv.as_deref(), &extra, args.server_threads, 256)?;
        let mut a = net::Args {
            target: s.addr.to_string(),
            protocol: Protocol::Binary,
            workload: Workload::B,
            dataset: Dataset::K16,
            dist: Dist::Zipf,
            theta: 0.99,
            keys: Some(args.keys),
            conns: 4,
            pipeline: 16,
            multiget: 1,
            rate: None,
            threads: 1,
            duration: args.duration,
            // Long enough for the router to learn the hot keys (a few 200 ms epochs).
            warmup: 1.5,
            no_preload: true,
            server_pid: Some(s.child.id()),
            runs: args.runs,
            seed: 42,
            json: false,
            hot_keys: args.hot_keys,
            value_bytes: None,
            udp: false,
            udp_port: None,
            udp_batch: 1,
            udp_lost_ms: 1000,
        };
        let t = Instant::now();
        net::preload(&a)?;
        a.conns = args.conns;
        a.pipeline = 1;
        eprintln!(
            "split {}: preloaded in {:.1} s",
            if on { "on" } else { "off" },
            t.elapsed().as_secs_f64()
        );
        let median = |a: &net::Args| -> anyhow::Result<RunResult> {
            let all: anyhow::Result<Vec<RunResult>> = (0..args.runs.max(1))
                .map(|r| net::measure(a, r as u64))
                .collect();
            net::median_run(all?).ok_or_else(|| anyhow::anyhow!("no run"))
        };
        let open = median(&a)?;
        eprintln!(
            "  {} x 1: hot p50 {:.0} p99 {:.0} us, cold p50 {:.0} p99 {:.0} us",
            args.conns, open.hot_p50_us, open.hot_p99_us, open.cold_p50_us, open.cold_p99_us
        );
        a.pipeline = 16;
        a.conns = 4;
        a.hot_keys = 0;
        let zipf = median(&a)?;
        eprintln!("  {}", zipf.line());
        a.dist = Dist::Uniform;
        let uniform = median(&a)?;
        eprintln!("  {}", uniform.line());
        rows.push(Split {
            on,
            open,
            zipf,
            uniform,
        });
    }
    let name = |on: bool| if on { "split on" } else { "split off" };
    let mut curves = Vec::new();
    for r in &rows {
        curves.push((format!("hot keys, {}", name(r.on)), r.open.hot_cdf.clone()));
        curves.push((
            format!("cold keys, {}", name(r.on)),
            r.open.cold_cdf.clone(),
        ));
    }
    let cdf_path = args.out.join(format!("hotcold-cdf-{}.svg", args.engine));
    plot::lines(
        &cdf_path,
        &format!(
            "hkv ({}), C = {} us: GET latency of hot and cold keys",
            args.engine, args.interval
        ),
        "latency (us)",
        "fraction of GETs",
        &curves,
        true,
    )?;
    let dir = args.markdown.parent().unwrap_or(std::path::Path::new("."));
    let mut md = format!(
        "hkv `--engine {}`, {} server thread(s), fixed C = {} us (`--batch-interval-us`), \
         binary protocol, K16, {} keys. Latency: {} connections with one request each in \
         flight, YCSB-B Zipf 0.99; GETs of the {} most popular keys are \"hot\", the rest \
         \"cold\". Throughput: closed loop 4 x 16, YCSB-B. Median of {} run(s) of {} s after \
         1.5 s of warm-up.\n\n",
        args.engine,
        args.server_threads,
        args.interval,
        args.keys,
        args.conns,
        args.hot_keys,
        args.runs,
        args.duration
    );
    md.push_str(
        "| split | hot p50 us | hot p99 us | cold p50 us | cold p99 us | hot p50 / C | cold p50 / C | Zipf ops/s | uniform ops/s |\n",
    );
    md.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for r in &rows {
        md.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} |\n",
            if r.on {
                "on"
            } else {
                "off (`--hot-cache-mb 0`)"
            },
            r.open.hot_p50_us,
            r.open.hot_p99_us,
            r.open.cold_p50_us,
            r.open.cold_p99_us,
            r.open.hot_p50_us / args.interval,
            r.open.cold_p50_us / args.interval,
            r.zipf.ops_per_sec,
            r.uniform.ops_per_sec,
        ));
    }
    md.push_str(&format!(
        "\n![hot and cold GET latency CDFs]({})\n",
        relative(&cdf_path, dir)
    ));
    // One section per engine, each rewritten in place by its own run.
    write_marked(
        &args.markdown,
        &format!(
            "<!-- hotcold-{}:begin (written by hkv-bench hotcold) -->",
            args.engine
        ),
        &format!("<!-- hotcold-{}:end -->", args.engine),
        &md,
    )?;
    println!("{md}");
    Ok(())
}
