//! What `hkv-bench compare` is asked for, and the shape of its measurements.

use std::path::PathBuf;

use crate::workload::{Dataset, Dist, Workload};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds instead of minutes: tiny data set, one run each, no file in docs/ touched
    /// (output goes to --out, default target/compare-quick).
    #[arg(long)]
    pub(crate) quick: bool,
    /// Servers to run: hkv, memcached, redis.
    #[arg(long, value_delimiter = ',', default_value = "hkv,memcached,redis")]
    pub(crate) servers: Vec<String>,
    /// Worker threads of every server (memcached -t, hkv -t, Redis io-threads).
    #[arg(long, default_value_t = 1)]
    pub(crate) server_threads: usize,
    /// Memory of every server in MiB.
    #[arg(long)]
    pub(crate) memory_mb: Option<usize>,
    /// The hkv binary (default: `hkv` beside this program).
    #[arg(long)]
    pub(crate) hkv: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "k16")]
    pub(crate) dataset: Dataset,
    #[arg(long, value_enum, default_value = "b")]
    pub(crate) workload: Workload,
    #[arg(long, value_enum, default_value = "zipf")]
    pub(crate) dist: Dist,
    /// Keys preloaded (default 1M; 20k with --quick).
    #[arg(long)]
    pub(crate) keys: Option<u64>,
    /// Repetitions of each measurement; medians are reported (default 3; 1 with --quick).
    #[arg(long)]
    pub(crate) runs: Option<usize>,
    /// Seconds per measurement (default 5; 1 with --quick).
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    /// Client threads of the load generator.
    #[arg(long, default_value_t = 1)]
    pub(crate) client_threads: usize,
    /// Where plots and compare.json go (default docs/bench; target/compare-quick with --quick).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// The Markdown file whose compare section is rewritten (default docs/BENCHMARKS.md;
    /// OUT/compare.md with --quick).
    #[arg(long)]
    pub(crate) markdown: Option<PathBuf>,
}

/// Pipelined closed loop: connections x depth.
pub(crate) const PIPE: (usize, usize) = (4, 16);
/// Unpipelined closed loop.
pub(crate) const UNPIPE: (usize, usize) = (16, 1);
/// Open-loop rates as fractions of the best peer's pipelined peak.
pub(crate) const FRACTIONS: [f64; 4] = [0.25, 0.5, 0.75, 0.9];
