//! `hkv-bench timeline`: DIDO Fig. 20's analogue. hkv on the OpenCL engine under a load that
//! alternates between two mixes (read-only and 50% SET by default), once per placement
//! (`auto` and the forced ones), sampled every fraction of a second: throughput over time for
//! each, and where `auto` ran the index tasks in each sample (the share of search, insert and
//! delete batches it sent to the device, from `stats hkv` deltas). A table of each phase's
//! median throughput, with `auto`'s ratio to the best forced placement, goes to the Markdown
//! file; the full samples to a TSV beside the plots.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use crate::compare::{hkv_stats, relative, start, write_marked};
use crate::net::{self, Protocol};
use crate::plot;
use crate::workload::{median, Dataset, Dist, Workload};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Placements to run, each in its own server (semicolon-separated).
    #[arg(
        long,
        default_value = "auto;cpu;search=device,insert=cpu,delete=cpu;device"
    )]
    placements: String,
    /// The mixes the load alternates between (a = 50% GET, b = 95%, c = 100%).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "c,a")]
    phases: Vec<Workload>,
    /// How many times the whole sequence of phases runs.
    #[arg(long, default_value_t = 3)]
    cycles: usize,
    /// Seconds per phase.
    #[arg(long, default_value_t = 4.0)]
    phase_seconds: f64,
    /// Seconds per sample.
    #[arg(long, default_value_t = 0.5)]
    sample_seconds: f64,
    /// Times every placement runs the whole load, in alternating order (so drift of this
    /// shared machine hits all alike); each sample is the median over rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[arg(long, value_enum, default_value = "k16")]
    dataset: Dataset,
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// The hkv binary (default: `hkv` beside this program).
    #[arg(long)]
    hkv: Option<PathBuf>,
    /// Where the plots and the TSV go.
    #[arg(long, default_value = "docs/bench")]
    out: PathBuf,
    /// What the OpenCL device is, for the titles (`stats hkv engine` names it).
    #[arg(long, default_value = "PoCL")]
    device_label: String,
    /// The Markdown file whose timeline section is rewritten.
    #[arg(long, default_value = "docs/BENCHMARKS.md")]
    markdown: PathBuf,
}

const BEGIN: &str = "<!-- timeline:begin (written by hkv-bench timeline) -->";
const END: &str = "<!-- timeline:end -->";
const TASKS: [&str; 5] = ["search", "insert", "delete", "kc", "rd"];

struct Sample {
    /// Seconds since the load started (the sample's midpoint).
    t: f64,
    phase: usize,
    ops: f64,
    /// Share of each task's batches run on the device during the sample (None: no batches).
    device_share: [Option<f64>; 5],
    current: String,
}

/// Batches of each task on (cpu, device) so far.
fn batches(stats: &BTreeMap<String, String>) -> [(u64, u64); 5] {
    let get = |k: String| stats.get(&k).and_then(|v| v.parse().ok()).unwrap_or(0u64);
    TASKS.map(|t| {
        (
            get(format!("placement_{t}_cpu_batches")),
            get(format!("placement_{t}_device_batches")),
        )
    })
}

fn run_placement(args: &Args, placement: &str) -> anyhow::Result<Vec<Sample>> {
    let extra = [
        "--engine".to_string(),
        "opencl".to_string(),
        "--placement".to_string(),
        placement.to_string(),
    ];
    let s = start(
        "hkv",
        args.hkv.as_deref(),
        &extra,
        args.server_threads,
        1024,
    )?;
    let shared = hkv_stats(s.addr)?;
    let table = shared.get("placement_table").map(String::as_str);
    anyhow::ensure!(
        table == Some("shared") || table == Some("mirror"),
        "the OpenCL device works on a table of its own here, so nothing can be placed"
    );
    let mut a = net::Args {
        target: s.addr.to_string(),
        protocol: Protocol::Binary,
        workload: args.phases[0],
        dataset: args.dataset,
        dist: Dist::Zipf,
        theta: 0.99,
        keys: Some(args.keys),
        conns: 8,
        pipeline: 16,
        multiget: 1,
        rate: None,
        threads: 1,
        duration: args.sample_seconds,
        warmup: 0.0,
        no_preload: true,
        server_pid: None,
        runs: 1,
        seed: 42,
        json: true,
        hot_keys: 0,
        value_bytes: None,
        udp: false,
        udp_port: None,
        udp_batch: 1,
        udp_lost_ms: 1000,
    };
    net::preload(&a)?;
    let per_phase = (args.phase_seconds / args.sample_seconds).round().max(1.0) as usize;
    let mut out = Vec::new();
    let mut before = batches(&hkv_stats(s.addr)?);
    let mut n = 0u64;
    for _ in 0..args.cycles {
        for (phase, &w) in args.phases.iter().enumerate() {
            a.workload = w;
            for _ in 0..per_phase {
                let r = net::measure(&a, n)?;
                let stats = hkv_stats(s.addr)?;
                let after = batches(&stats);
                let device_share = std::array::from_fn(|i| {
                    let cpu = after[i].0.saturating_sub(before[i].0);
                    let dev = after[i].1.saturating_sub(before[i].1);
                    (cpu + dev > 0).then(|| dev as f64 / (cpu + dev) as f64)
                });
                before = after;
                out.push(Sample {
                    t: (n as f64 + 0.5) * args.sample_seconds,
                    phase,
                    ops: r.ops_per_sec,
                    device_share,
                    current: stats.get("placement_current").cloned().unwrap_or_default(),
                });
                n += 1;
            }
        }
        eprintln!("{placement}: {} samples", out.len());
    }
    Ok(out)
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(!args.phases.is_empty(), "--phases names no mix");
    anyhow::ensure!(
        args.sample_seconds > 0.0,
        "--sample-seconds must be positive"
    );
    std::fs::create_dir_all(&args.out)?;
    let placements: Vec<&str> = args
        .placements
        .split(';')
        .filter(|p| !p.is_empty())
        .collect();
    let mut rounds: Vec<Vec<Vec<Sample>>> = placements.iter().map(|_| Vec::new()).collect();
    for r in 0..args.rounds.max(1) {
        let mut order: Vec<usize> = (0..placements.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            rounds[i].push(run_placement(args, placements[i])?);
        }
    }
    let runs: Vec<(String, Vec<Sample>)> = placements
        .iter()
        .zip(rounds)
        .map(|(p, r)| (p.to_string(), merge(r)))
        .collect();
    let tsv = args.out.join("placement-timeline.tsv");
    let mut f = std::fs::File::create(&tsv)?;
    writeln!(f, "placement\tt_s\tmix\tops_per_s\tsearch_device\tinsert_device\tdelete_device\tkc_device\trd_device\tplacement_current")?;
    for (p, samples) in &runs {
        for s in samples {
            let share = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
            writeln!(
                f,
                "{p}\t{:.2}\t{:?}\t{:.0}\t{}\t{}\t{}\t{}\t{}\t{}",
                s.t,
                args.phases[s.phase],
                s.ops,
                share(s.device_share[0]),
                share(s.device_share[1]),
                share(s.device_share[2]),
                share(s.device_share[3]),
                share(s.device_share[4]),
                s.current
            )?;
        }
    }
    let mix_names: Vec<String> = args.phases.iter().map(|w| mix_name(*w)).collect();
    let title = format!(
        "hkv --engine opencl ({}): load alternating {} every {} s",
        args.device_label,
        mix_names.join(" / "),
        args.phase_seconds
    );
    let series: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|(p, s)| (p.clone(), s.iter().map(|s| (s.t, s.ops)).collect()))
        .collect();
    let thr_svg = args.out.join("placement-timeline.svg");
    plot::lines(
        &thr_svg,
        &title,
        "seconds",
        "ops/s (binary, 8x16)",
        &series,
        false,
    )?;
    let auto = runs.iter().find(|(p, _)| p == "auto");
    let share_svg = args.out.join("placement-timeline-auto.svg");
    if let Some((_, samples)) = auto {
        let series: Vec<(String, Vec<(f64, f64)>)> = TASKS
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let pts = samples
                    .iter()
                    .filter_map(|s| s.device_share[i].map(|v| (s.t, v * 1000.0)))
                    .collect();
                (t.to_string(), pts)
            })
            .collect();
        plot::lines(
            &share_svg,
            "--placement auto: index batches it ran on the device, per sample",
            "seconds",
            "device batches per 1000 of the task's batches",
            &series,
            false,
        )?;
    }
    let dir = args.markdown.parent().unwrap_or(std::path::Path::new("."));
    let mut md = format!(
        "hkv `--engine opencl -t {}` on {}, one server per placement; hkv-bench net binary \
         8 connections x 16 deep, {:?} Zipf 0.99 over {} keys, the mix alternating {} every {} s, \
         {} cycles, sampled every {} s, {} rounds with the placements in alternating order. Each \
         sample is the median over rounds; the table gives the median of each placement's \
         samples in each mix (the first sample after a switch included), ops/s:\n\n",
        args.server_threads,
        args.device_label,
        args.dataset,
        args.keys,
        mix_names.join(" / "),
        args.phase_seconds,
        args.cycles,
        args.sample_seconds,
        args.rounds.max(1)
    );
    md.push_str(&format!(
        "| mix | {} | auto / best forced |\n",
        placements.join(" | ")
    ));
    md.push_str(&format!(
        "| --- |{} ---: |\n",
        " ---: |".repeat(placements.len())
    ));
    for (phase, name) in mix_names.iter().enumerate() {
        let medians: Vec<(String, f64)> = runs
            .iter()
            .map(|(p, s)| {
                let mut v: Vec<f64> = s
                    .iter()
                    .filter(|s| s.phase == phase)
                    .map(|s| s.ops)
                    .collect();
                (p.clone(), median(&mut v))
            })
            .collect();
        let best_forced = medians
            .iter()
            .filter(|(p, _)| p != "auto")
            .map(|m| m.1)
            .fold(0.0, f64::max);
        let ratio = medians
            .iter()
            .find(|(p, _)| p == "auto")
            .filter(|_| best_forced > 0.0)
            .map_or("-".to_string(), |(_, a)| format!("{:.2}x", a / best_forced));
        let cells: Vec<String> = medians.iter().map(|m| format!("{:.0}", m.1)).collect();
        md.push_str(&format!("| {name} | {} | {ratio} |\n", cells.join(" | ")));
    }
    if let Some((_, samples)) = auto {
        let on_device = samples
            .iter()
            .filter(|s| s.device_share.iter().flatten().any(|&v| v > 0.5))
            .count();
        md.push_str(&format!(
            "\n`auto` put most of some task's batches on the device in {on_device} of {} samples.\n",
            samples.len()
        ));
    }
    md.push_str(&format!(
        "\n![throughput over time per placement]({})\n![where auto ran the index tasks]({})\n\nSamples: {}\n",
        relative(&thr_svg, dir),
        relative(&share_svg, dir),
        relative(&tsv, dir)
    ));
    write_marked(&args.markdown, BEGIN, END, &md)?;
    println!("{md}");
    Ok(())
}

/// Sample by sample over rounds: the median throughput and the mean device shares.
fn merge(rounds: Vec<Vec<Sample>>) -> Vec<Sample> {
    let n = rounds.iter().map(Vec::len).min().unwrap_or(0);
    (0..n)
        .map(|i| {
            let mut ops: Vec<f64> = rounds.iter().map(|r| r[i].ops).collect();
            let device_share = std::array::from_fn(|t| {
                let v: Vec<f64> = rounds.iter().filter_map(|r| r[i].device_share[t]).collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            });
            Sample {
                t: rounds[0][i].t,
                phase: rounds[0][i].phase,
                ops: median(&mut ops),
                device_share,
                current: rounds[0][i].current.clone(),
            }
        })
        .collect()
}

fn mix_name(w: Workload) -> String {
    match w {
        Workload::A => "50% SET".into(),
        Workload::B => "5% SET".into(),
        Workload::C => "read-only".into(),
    }
}
