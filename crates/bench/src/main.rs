//! `hkv-bench`: the papers' workloads against hkv.

mod engine_mode;
mod randaccess;
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
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().mode {
        Mode::Engine(args) => engine_mode::run(&args),
    }
}
