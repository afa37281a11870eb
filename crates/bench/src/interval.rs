//! `hkv-bench interval`: hkv's throughput and latency for several fixed batch intervals C
//! (Mega-KV Fig. 13 and Fig. 16), as a table and plots.

use std::path::PathBuf;
use std::time::Instant;

use crate::compare::{relative, start, write_marked};
use crate::net::{self, Protocol, RunResult};
use crate::plot;
use crate::workload::{Dataset, Dist, Workload};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Intervals C to run, microseconds (each fixes `--batch-interval-us C`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,50,100,200,500,1000,2000"
    )]
    intervals: Vec<f64>,
    /// hkv's index backend.
    #[arg(long, value_parser = ["cpu", "opencl"], default_value = "cpu")]
    engine: String,
    /// Open-loop rate for the latency CDFs, requests/s.
    #[arg(long, default_value_t = 50_000.0)]
    rate: f64,
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    #[arg(long, value_enum, default_value = "k16")]
    dataset: Dataset,
    #[arg(long, value_enum, default_value = "b")]
    workload: Workload,
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// The hkv binary (default: `hkv` beside this program).
    #[arg(long)]
    hkv: Option<PathBuf>,
    /// Where the plots go.
    #[arg(long, default_value = "docs/bench")]
    out: PathBuf,
    /// The Markdown file whose interval section is rewritten.
    #[arg(long, default_value = "docs/BENCHMARKS.md")]
    markdown: PathBuf,
}

const BEGIN: &str = "<!-- interval:begin (written by hkv-bench interval) -->";
const END: &str = "<!-- interval:end -->";

struct Point {
    c: f64,
    closed: RunResult,
    open: RunResult,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let mut points = Vec::new();
    for &c in &args.intervals {
        let extra = vec![
            "--engine".to_string(),
            args.engine.clone(),
            "--batch-interval-us".to_string(),
            format!("{c}"),
        ];
        let s = start("hkv", args.hkv.as_deref(), &extra, args.server_threads, 256)?;
        let mut a = net::Args {
            target: s.addr.to_string(),
            protocol: Protocol::Binary,
            workload: args.workload,
            dataset: args.dataset,
            dist: Dist::Zipf,
            theta: 0.99,
            keys: Some(args.keys),
            conns: 4,
            pipeline: 16,
            multiget: 1,
            rate: None,
            threads: 1,
            duration: args.duration,
            warmup: 0.5,
            no_preload: true,
            server_pid: Some(s.child.id()),
            runs: args.runs,
            seed: 42,
            json: false,
            hot_keys: 0,
            value_bytes: None,
            udp: false,
            udp_port: None,
            udp_batch: 1,
            udp_lost_ms: 1000,
        };
        let t = Instant::now();
        net::preload(&a)?;
        eprintln!(
            "C = {c} us: preloaded in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let median = |a: &net::Args| -> anyhow::Result<RunResult> {
            let all: anyhow::Result<Vec<RunResult>> = (0..args.runs.max(1))
                .map(|r| net::measure(a, r as u64))
                .collect();
            net::median_run(all?).ok_or_else(|| anyhow::anyhow!("no run"))
        };
        let closed = median(&a)?;
        eprintln!("  {}", closed.line());
        a.rate = Some(args.rate);
        let open = median(&a)?;
        eprintln!("  {}", open.line());
        points.push(Point { c, closed, open });
    }
    plot::lines(
        &args.out.join("interval-throughput.svg"),
        &format!(
            "hkv ({}): throughput against the batch interval C",
            args.engine
        ),
        "C (us)",
        "ops/s, closed loop 4x16",
        &[(
            "hkv binary".to_string(),
            points.iter().map(|p| (p.c, p.closed.ops_per_sec)).collect(),
        )],
        false,
    )?;
    let cdfs: Vec<(String, Vec<(f64, f64)>)> = points
        .iter()
        .map(|p| (format!("C = {} us", p.c), p.open.cdf.clone()))
        .collect();
    plot::lines(
        &args.out.join("interval-latency-cdf.svg"),
        &format!(
            "hkv ({}): latency CDF at {:.0} req/s, open loop",
            args.engine, args.rate
        ),
        "latency (us)",
        "fraction of requests",
        &cdfs,
        true,
    )?;
    let dir = args.markdown.parent().unwrap_or(std::path::Path::new("."));
    let mut md = format!(
        "hkv `--engine {}`, {} server thread(s), YCSB-{:?} {:?} Zipf 0.99, {} keys, binary \
         protocol; closed loop 4 connections x 16 deep, and open loop at {:.0} requests/s; \
         median of {} run(s) of {} s for each fixed C.\n\n",
        args.engine,
        args.server_threads,
        args.workload,
        args.dataset,
        args.keys,
        args.rate,
        args.runs,
        args.duration
    );
    md.push_str("| C (us) | closed-loop ops/s | server CPU ns/op | open-loop p50 us | p99 us | p99.9 us | p99 / C |\n");
    md.push_str("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for p in &points {
        md.push_str(&format!(
            "| {} | {:.0} | {} | {:.0} | {:.0} | {:.0} | {} |\n",
            p.c,
            p.closed.ops_per_sec,
            p.closed
                .server_cpu_ns_per_op
                .map(|c| format!("{c:.0}"))
                .unwrap_or_else(|| "-".into()),
            p.open.p50_us,
            p.open.p99_us,
            p.open.p999_us,
            if p.c > 0.0 {
                format!("{:.2}", p.open.p99_us / p.c)
            } else {
                "-".into()
            }
        ));
    }
    md.push_str(&format!(
        "\n![throughput against C]({})\n![latency CDF per C]({})\n",
        relative(&args.out.join("interval-throughput.svg"), dir),
        relative(&args.out.join("interval-latency-cdf.svg"), dir)
    ));
    write_marked(&args.markdown, BEGIN, END, &md)?;
    println!("{md}");
    Ok(())
}
