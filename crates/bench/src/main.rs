//! `hkv-bench`: the papers' workloads against hkv, memcached and Redis.

mod atomics;
mod compare;
mod engine_mode;
mod hotcold;
mod interval;
mod net;
mod placement;
mod plot;
mod randaccess;
mod timeline;
mod workload;
mod zipf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "hkv-bench", version, about = "Benchmarks for hkv")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// The engine in-process, no network: index alone, whole GET path, YCSB mixes, and a
    /// hashbrown map and this machine's random-access limit as yardsticks.
    Engine(engine_mode::Args),
    /// Load over TCP against any memcached-protocol server (text, meta, binary) or Redis
    /// (RESP): closed or open loop, latency percentiles, server CPU per operation.
    Net(net::Args),
    /// Starts hkv, memcached and Redis on 127.0.0.1 with the same server threads, runs the
    /// same workloads against each in turn, and writes a table and plots.
    Compare(compare::Args),
    /// hkv alone at several fixed batch intervals C: throughput against C and latency CDFs.
    Interval(interval::Args),
    /// KV-Direct's operations: single-key atomics against the number of keys (merging on
    /// and off, memcached `incr` as the peer) and vector updates against per-element keys
    /// and the client's fetch-modify-write.
    Atomics(atomics::Args),
    /// KVCG's hot/cold split: hot and cold GET latency at a fixed C with the split on and
    /// off, and throughput under Zipf and uniform loads.
    Hotcold(hotcold::Args),
    /// DIDO's placement: the 24 workloads on the OpenCL engine (a device sharing host
    /// memory, e.g. PoCL), every placement of search, insert, delete, KC and RD predicted
    /// by the cost model and measured, and where `auto` lands.
    Placement(placement::Args),
    /// DIDO Fig. 20: the OpenCL engine under a load that alternates between mixes, once per
    /// placement; throughput over time and where `auto` ran the index tasks.
    Timeline(timeline::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().mode {
        Mode::Engine(args) => engine_mode::run(&args),
        Mode::Net(args) => net::run(&args),
        Mode::Compare(args) => compare::run(&args),
        Mode::Interval(args) => interval::run(&args),
        Mode::Atomics(args) => atomics::run(&args),
        Mode::Hotcold(args) => hotcold::run(&args),
        Mode::Placement(args) => placement::run(&args),
        Mode::Timeline(args) => timeline::run(&args),
    }
}
