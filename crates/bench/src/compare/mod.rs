//! `hkv-bench compare`: hkv, memcached and Redis side by side on 127.0.0.1.
//!
//! Every server gets the same number of server threads and memory, the same keys are
//! preloaded into each, and the same workloads run against each in turn, so the table holds
//! ratios from one sitting on one machine.

use std::path::PathBuf;
use std::time::Instant;

use crate::net::{self, Protocol, RunResult};

mod args;
mod marked;
mod report;
mod servers;

pub use args::Args;
use args::{FRACTIONS, PIPE, UNPIPE};
use marked::write_section;
pub(crate) use marked::{relative, write_marked};
use report::{task_breakdown, Curve, Report, Row};
pub(crate) use servers::{hkv_stats, start};

pub fn run(args: &Args) -> anyhow::Result<()> {
    let q = args.quick;
    let keys = args.keys.unwrap_or(if q { 20_000 } else { 1_000_000 });
    let runs = args.runs.unwrap_or(if q { 1 } else { 3 }).max(1);
    let duration = args.duration.unwrap_or(if q { 1.0 } else { 5.0 });
    let mem = args.memory_mb.unwrap_or(if q { 64 } else { 1024 });
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(if q {
            "target/compare-quick"
        } else {
            "docs/bench"
        })
    });
    let markdown = args.markdown.clone().unwrap_or_else(|| {
        if q {
            out.join("compare.md")
        } else {
            PathBuf::from("docs/BENCHMARKS.md")
        }
    });
    std::fs::create_dir_all(&out)?;
    let base = net::Args {
        target: String::new(),
        protocol: Protocol::Text,
        workload: args.workload,
        dataset: args.dataset,
        dist: args.dist,
        theta: 0.99,
        keys: Some(keys),
        conns: PIPE.0,
        pipeline: PIPE.1,
        multiget: 1,
        rate: None,
        threads: args.client_threads,
        duration,
        warmup: if q { 0.3 } else { 1.0 },
        no_preload: true,
        server_pid: None,
        runs,
        seed: 42,
        json: false,
        hot_keys: 0,
        value_bytes: None,
        udp: false,
        udp_port: None,
        udp_batch: 1,
        udp_lost_ms: 1000,
    };
    let measure = |a: &net::Args| -> anyhow::Result<RunResult> {
        let all: anyhow::Result<Vec<RunResult>> =
            (0..runs).map(|r| net::measure(a, r as u64)).collect();
        let all = all?;
        // Every key was preloaded into ample memory: a miss or an error means a server (or
        // this tool) answered wrongly, and its speed would mean nothing.
        for r in &all {
            anyhow::ensure!(
                r.errors == 0 && (r.gets == 0 || r.hit_ratio >= 0.999),
                "{} on {}: {} errors, GET hit ratio {:.4} after preloading every key",
                a.protocol.name(),
                a.target,
                r.errors,
                r.hit_ratio
            );
        }
        net::median_run(all).ok_or_else(|| anyhow::anyhow!("no run"))
    };

    let mut servers = Vec::new();
    for name in &args.servers {
        let s = start(name, args.hkv.as_deref(), &[], args.server_threads, mem)?;
        eprintln!("{} on {} (pid {})", s.name, s.addr, s.child.id());
        let mut a = base.clone();
        a.target = s.addr.to_string();
        a.protocol = s.protocols[0];
        let t = Instant::now();
        net::preload(&a)?;
        eprintln!(
            "  preloaded {keys} keys in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        servers.push(s);
    }

    // Closed loop, pipelined and not, every server in every protocol it speaks.
    let mut rows = Vec::new();
    let mut tasks: Option<Vec<(String, f64)>> = None;
    for s in &servers {
        for &p in s.protocols {
            let mut a = base.clone();
            a.target = s.addr.to_string();
            a.protocol = p;
            a.server_pid = Some(s.child.id());
            let before = (s.name == "hkv" && p == Protocol::Text)
                .then(|| hkv_stats(s.addr))
                .transpose()?;
            let pipelined = measure(&a)?;
            if let Some(before) = before {
                let after = hkv_stats(s.addr)?;
                tasks = Some(task_breakdown(&before, &after));
            }
            eprintln!("{:9} {}", s.name, pipelined.line());
            (a.conns, a.pipeline) = UNPIPE;
            let unpipelined = measure(&a)?;
            eprintln!("{:9} {}", s.name, unpipelined.line());
            rows.push(Row {
                server: s.name,
                protocol: p,
                pipelined,
                unpipelined,
            });
        }
    }

    // Open loop at fractions of the best peer's pipelined peak, each server in its best
    // protocol: latency against throughput.
    let best_of = |server: &str| {
        rows.iter()
            .filter(|r| r.server == server)
            .max_by(|a, b| a.pipelined.ops_per_sec.total_cmp(&b.pipelined.ops_per_sec))
    };
    let best_peer = rows
        .iter()
        .filter(|r| r.server != "hkv")
        .max_by(|a, b| a.pipelined.ops_per_sec.total_cmp(&b.pipelined.ops_per_sec));
    let peak = best_peer
        .or_else(|| best_of("hkv"))
        .map(|r| r.pipelined.ops_per_sec)
        .unwrap_or(0.0);
    let fractions: &[f64] = if q { &[0.5] } else { &FRACTIONS };
    let mut curves = Vec::new();
    for s in &servers {
        let Some(best) = best_of(s.name) else {
            continue;
        };
        let mut points = Vec::new();
        for &f in fractions {
            let mut a = base.clone();
            a.target = s.addr.to_string();
            a.protocol = best.protocol;
            a.server_pid = Some(s.child.id());
            a.rate = Some((peak * f).max(100.0));
            let r = measure(&a)?;
            eprintln!("{:9} {}", s.name, r.line());
            points.push(r);
        }
        curves.push(Curve {
            server: s.name,
            protocol: best.protocol,
            points,
        });
    }
    drop(servers);

    let report = Report {
        args,
        keys,
        runs,
        duration,
        mem,
        rows: &rows,
        curves: &curves,
        tasks: tasks.as_deref(),
        peak,
        out: &out,
    };
    report.plots()?;
    std::fs::write(
        out.join("compare.json"),
        serde_json::to_string_pretty(&serde_json::json!({ "rows": rows, "curves": curves }))?,
    )?;
    let section = report.markdown(&markdown);
    write_section(&markdown, &section)?;
    println!("{section}");
    eprintln!(
        "wrote {} and plots in {}",
        markdown.display(),
        out.display()
    );
    Ok(())
}
