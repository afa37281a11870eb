//! Network mode: the papers' workloads against any memcached-protocol server or Redis.

mod load;
pub mod procstat;
mod udp;
pub mod wire;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::workload::{Dataset, Dist, Workload};
use load::{Phase, Shape, Tally};
pub use wire::Protocol;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:11211")]
    pub target: String,
    #[arg(long, value_enum, default_value = "text")]
    pub protocol: Protocol,
    /// YCSB mix: a 50% GET, b 95% GET, c 100% GET.
    #[arg(long, value_enum, default_value = "b")]
    pub workload: Workload,
    #[arg(long, value_enum, default_value = "k16")]
    pub dataset: Dataset,
    #[arg(long, value_enum, default_value = "zipf")]
    pub dist: Dist,
    /// Zipf skew.
    #[arg(long, default_value_t = 0.99)]
    pub theta: f64,
    /// Keys in the data set (default: a tenth of the engine mode's: 1M for K8 and K16, 400k
    /// for K32, 100k for K128).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Connections, spread over the client threads.
    #[arg(long, default_value_t = 4)]
    pub conns: usize,
    /// Requests in flight per connection (closed loop).
    #[arg(long, default_value_t = 16)]
    pub pipeline: usize,
    /// Keys per GET. The text protocol sends one multi-key `get`; the others send that many
    /// single GETs back to back.
    #[arg(long, default_value_t = 1)]
    pub multiget: usize,
    /// Open loop: requests per second over all connections, sent on schedule whatever the
    /// replies do; latency counts from each request's scheduled time. Unset: closed loop.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seconds measured, after the warm-up.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Seconds run before measuring.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Do not SET every key before measuring (the server already holds them).
    #[arg(long)]
    pub no_preload: bool,
    /// The server's PID: its CPU time per operation is recorded (from /proc/PID/stat).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Repetitions; each is printed, then the median.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Print JSON objects instead of text.
    #[arg(long)]
    pub json: bool,
    /// GETs of the first N key ids (the most popular under Zipf) are also timed apart, as
    /// hot, and the others as cold (the hot/cold split's latency classes). 0: not split.
    #[arg(long, default_value_t = 0)]
    pub hot_keys: u64,
    /// Value length in bytes instead of the data set's (large-value loads: where sending
    /// values without a copy pays, docs/network.md).
    #[arg(long)]
    pub value_bytes: Option<usize>,
    /// Measure GETs over UDP (memcached's frame), `--pipeline` datagrams in flight per
    /// socket, `--conns` sockets; the preload still goes over TCP. Needs `--workload c`.
    #[arg(long)]
    pub udp: bool,
    /// The server's UDP port with `--udp` (default: the TCP port of `--target`).
    #[arg(long)]
    pub udp_port: Option<u16>,
    /// With `--udp`: datagrams sent and received per system call (`sendmmsg`, `recvmmsg`),
    /// as a client that batches its GETs does; 1 gives each datagram a call of its own.
    #[arg(long, default_value_t = 1)]
    pub udp_batch: usize,
    /// With `--udp`: a reply later than this many ms is counted lost and its request
    /// replaced.
    #[arg(long, default_value_t = 1000)]
    pub udp_lost_ms: u64,
}

impl Args {
    pub fn key_count(&self) -> u64 {
        self.keys.unwrap_or(self.dataset.shape().2 / 10)
    }

    fn addr(&self) -> anyhow::Result<SocketAddr> {
        self.target
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| anyhow::anyhow!("{} names no address", self.target))
    }

    fn shape(&self) -> anyhow::Result<Shape> {
        let (key_len, value_len, _) = self.dataset.shape();
        let value_len = self.value_bytes.unwrap_or(value_len);
        anyhow::ensure!(value_len <= 1 << 30, "--value-bytes must be at most 1 GiB");
        let keys = self.key_count();
        anyhow::ensure!(
            keys > 0 && keys < 10u64.pow(key_len.min(19) as u32),
            "--keys must be 1..10^{key_len} for {key_len}-byte keys"
        );
        anyhow::ensure!(self.conns > 0, "--conns must be at least 1");
        anyhow::ensure!(self.pipeline > 0, "--pipeline must be at least 1");
        anyhow::ensure!(
            (1..=100).contains(&self.multiget),
            "--multiget must be 1..=100"
        );
        anyhow::ensure!(self.duration > 0.0, "--duration must be positive");
        Ok(Shape {
            target: self.addr()?,
            protocol: self.protocol,
            key_len,
            value_len,
            keys,
            pipeline: self.pipeline,
            multiget: self.multiget,
            hot_keys: self.hot_keys,
        })
    }

    /// Connections of client thread `t`.
    fn conns_of(&self, t: usize) -> usize {
        let threads = self.threads.clamp(1, self.conns);
        self.conns / threads + usize::from(t < self.conns % threads)
    }
}

/// One measured run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunResult {
    pub protocol: Protocol,
    pub workload: Workload,
    pub dataset: Dataset,
    pub dist: Dist,
    pub keys: u64,
    pub conns: usize,
    pub pipeline: usize,
    pub multiget: usize,
    /// Requests per second asked for (open loop); None: closed loop.
    pub target_rate: Option<f64>,
    pub seconds: f64,
    /// Keys answered per second.
    pub ops_per_sec: f64,
    pub gets: u64,
    pub hit_ratio: f64,
    pub sets: u64,
    pub errors: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// Server CPU seconds (user + system) over the measured window.
    pub server_cpu_s: Option<f64>,
    pub server_cpu_ns_per_op: Option<f64>,
    /// Latency CDF: (microseconds, fraction at or below), for plots.
    #[serde(skip)]
    pub cdf: Vec<(f64, f64)>,
    /// With `--hot-keys`: GET latency of the hot and the cold keys (p50, p99) and CDFs.
    pub hot_p50_us: f64,
    pub hot_p99_us: f64,
    pub cold_p50_us: f64,
    pub cold_p99_us: f64,
    #[serde(skip)]
    pub hot_cdf: Vec<(f64, f64)>,
    #[serde(skip)]
    pub cold_cdf: Vec<(f64, f64)>,
}

impl RunResult {
    pub fn line(&self) -> String {
        let mode = match self.target_rate {
            Some(r) => format!("open {r:.0} req/s"),
            None => format!("closed {}x{}", self.conns, self.pipeline),
        };
        let cpu = self
            .server_cpu_ns_per_op
            .map(|c| format!("  server {c:.0} ns CPU/op"))
            .unwrap_or_default();
        format!(
            "{:6} {:?} {:?} {:?} {mode}: {:.0} ops/s  p50 {:.0} p90 {:.0} p99 {:.0} p99.9 {:.0} us  hits {:.3}  errors {}{cpu}",
            self.protocol.name(),
            self.workload,
            self.dataset,
            self.dist,
            self.ops_per_sec,
            self.p50_us,
            self.p90_us,
            self.p99_us,
            self.p999_us,
            self.hit_ratio,
            self.errors,
        )
    }
}

/// SETs every key of the data set once.
pub fn preload(args: &Args) -> anyhow::Result<()> {
    let shape = args.shape()?;
    let threads = args.threads.clamp(1, args.conns);
    let per = shape.keys.div_ceil(threads as u64);
    let progress = AtomicU64::new(0);
    let bar = bar(shape.keys, "preload");
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let phase = Phase::Preload {
                    first: (t as u64 * per).min(shape.keys),
                    end: ((t as u64 + 1) * per).min(shape.keys),
                };
                let (shape, progress, conns) = (&shape, &progress, args.conns_of(t));
                scope.spawn(move || load::drive(shape, conns, &phase, progress))
            })
            .collect();
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(100));
            bar.set_position(progress.load(Ordering::Relaxed));
        }
        for h in handles {
            let t = h
                .join()
                .map_err(|_| anyhow::anyhow!("client thread panicked"))??;
            anyhow::ensure!(t.errors == 0, "{} preload SETs failed", t.errors);
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    Ok(())
}

/// One measured run of the mix.
pub fn measure(args: &Args, run: u64) -> anyhow::Result<RunResult> {
    let mut shape = args.shape()?;
    if args.udp {
        shape
            .target
            .set_port(args.udp_port.unwrap_or(shape.target.port()));
    }
    let threads = args.threads.clamp(1, args.conns);
    let start = Instant::now();
    let from = start + Duration::from_secs_f64(args.warmup.max(0.0));
    let end = from + Duration::from_secs_f64(args.duration);
    let progress = AtomicU64::new(0);
    let bar = bar((args.warmup + args.duration) as u64 * 10, "run");
    let (tally, cpu) = std::thread::scope(|scope| -> anyhow::Result<(Tally, Option<f64>)> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let phase = Phase::Measure {
                    workload: args.workload,
                    dist: args.dist,
                    theta: args.theta,
                    seed: args.seed ^ (run << 32) ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9),
                    rate_per_conn: args.rate.map(|r| r / args.conns as f64),
                    from,
                    end,
                };
                let (shape, progress, conns) = (&shape, &progress, args.conns_of(t));
                let (udp, batch) = (args.udp, args.udp_batch.clamp(1, 1024));
                let lost_after = Duration::from_millis(args.udp_lost_ms.max(1));
                scope.spawn(move || {
                    if udp {
                        udp::drive(shape, conns, &phase, progress, batch, lost_after)
                    } else {
                        load::drive(shape, conns, &phase, progress)
                    }
                })
            })
            .collect();
        let cpu_at = |pid: Option<u32>| pid.and_then(procstat::cpu_seconds);
        sleep_until(from, &bar, start);
        let cpu0 = cpu_at(args.server_pid);
        sleep_until(end, &bar, start);
        let cpu1 = cpu_at(args.server_pid);
        let mut total = Tally::new();
        for h in handles {
            let t = h
                .join()
                .map_err(|_| anyhow::anyhow!("client thread panicked"))??;
            total.add(&t);
        }
        Ok((total, cpu0.zip(cpu1).map(|(a, b)| b - a)))
    })?;
    bar.finish_and_clear();
    let us = |q: f64| tally.hist.value_at_quantile(q) as f64 / 1000.0;
    let ops_per_sec = tally.ops as f64 / args.duration;
    let cdf_of = |h: &hdrhistogram::Histogram<u64>| -> Vec<(f64, f64)> {
        if h.is_empty() {
            return Vec::new();
        }
        h.iter_quantiles(1)
            .map(|v| {
                (
                    v.value_iterated_to() as f64 / 1000.0,
                    v.quantile_iterated_to(),
                )
            })
            .collect()
    };
    let q = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let cdf = cdf_of(&tally.hist);
    Ok(RunResult {
        protocol: args.protocol,
        workload: args.workload,
        dataset: args.dataset,
        dist: args.dist,
        keys: shape.keys,
        conns: args.conns,
        pipeline: args.pipeline,
        multiget: args.multiget,
        target_rate: args.rate,
        seconds: args.duration,
        ops_per_sec,
        gets: tally.gets,
        hit_ratio: tally.hits as f64 / tally.gets.max(1) as f64,
        sets: tally.sets,
        errors: tally.errors,
        p50_us: us(0.5),
        p90_us: us(0.9),
        p99_us: us(0.99),
        p999_us: us(0.999),
        max_us: tally.hist.max() as f64 / 1000.0,
        server_cpu_s: cpu,
        server_cpu_ns_per_op: cpu.map(|c| c * 1e9 / tally.ops.max(1) as f64),
        cdf,
        hot_p50_us: q(&tally.hot_hist, 0.5),
        hot_p99_us: q(&tally.hot_hist, 0.99),
        cold_p50_us: q(&tally.cold_hist, 0.5),
        cold_p99_us: q(&tally.cold_hist, 0.99),
        hot_cdf: cdf_of(&tally.hot_hist),
        cold_cdf: cdf_of(&tally.cold_hist),
    })
}

fn sleep_until(t: Instant, bar: &ProgressBar, start: Instant) {
    loop {
        let now = Instant::now();
        bar.set_position((now - start).as_millis() as u64 / 100);
        if now >= t {
            return;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(100)));
    }
}

/// A progress bar on stderr; indicatif draws nothing when stderr is not a terminal.
fn bar(len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{msg:8} [{bar:40}] {percent:>3}% {eta}") {
        b.set_style(style.progress_chars("=> "));
    }
    b.set_message(what.to_string());
    b
}

/// The median run by throughput.
pub fn median_run(mut runs: Vec<RunResult>) -> Option<RunResult> {
    runs.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
    let n = runs.len();
    (n > 0).then(|| runs.swap_remove(n / 2))
}

/// `hkv-bench net`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    if !args.no_preload {
        let t = Instant::now();
        preload(args)?;
        if !args.json {
            println!(
                "preloaded {} keys in {:.1} s",
                args.key_count(),
                t.elapsed().as_secs_f64()
            );
        }
    }
    let mut runs = Vec::new();
    for r in 0..args.runs.max(1) {
        let res = measure(args, r as u64)?;
        if args.json {
            println!("{}", serde_json::to_string(&res)?);
        } else {
            println!("run {}: {}", r + 1, res.line());
        }
        runs.push(res);
    }
    if runs.len() > 1 {
        let m = median_run(runs).expect("at least one run");
        if args.json {
            println!(
                "{}",
                serde_json::json!({ "median": serde_json::to_value(&m)? })
            );
        } else {
            println!("median: {}", m.line());
        }
    }
    Ok(())
}
