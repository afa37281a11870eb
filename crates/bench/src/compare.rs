//! `hkv-bench compare`: hkv, memcached and Redis side by side on 127.0.0.1.
//!
//! Every server gets the same number of server threads and memory, the same keys are
//! preloaded into each, and the same workloads run against each in turn, so the table holds
//! ratios from one sitting on one machine.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::{self, Protocol, RunResult};
use crate::plot;
use crate::workload::{Dataset, Dist, Workload};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds instead of minutes: tiny data set, one run each, no file in docs/ touched
    /// (output goes to --out, default target/compare-quick).
    #[arg(long)]
    quick: bool,
    /// Servers to run: hkv, memcached, redis.
    #[arg(long, value_delimiter = ',', default_value = "hkv,memcached,redis")]
    servers: Vec<String>,
    /// Worker threads of every server (memcached -t, hkv -t, Redis io-threads).
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// Memory of every server in MiB.
    #[arg(long)]
    memory_mb: Option<usize>,
    /// The hkv binary (default: `hkv` beside this program).
    #[arg(long)]
    hkv: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "k16")]
    dataset: Dataset,
    #[arg(long, value_enum, default_value = "b")]
    workload: Workload,
    #[arg(long, value_enum, default_value = "zipf")]
    dist: Dist,
    /// Keys preloaded (default 1M; 20k with --quick).
    #[arg(long)]
    keys: Option<u64>,
    /// Repetitions of each measurement; medians are reported (default 3; 1 with --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// Seconds per measurement (default 5; 1 with --quick).
    #[arg(long)]
    duration: Option<f64>,
    /// Client threads of the load generator.
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// Where plots and compare.json go (default docs/bench; target/compare-quick with --quick).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The Markdown file whose compare section is rewritten (default docs/BENCHMARKS.md;
    /// OUT/compare.md with --quick).
    #[arg(long)]
    markdown: Option<PathBuf>,
}

const BEGIN: &str = "<!-- compare:begin (written by hkv-bench compare) -->";
const END: &str = "<!-- compare:end -->";
/// Pipelined closed loop: connections x depth.
const PIPE: (usize, usize) = (4, 16);
/// Unpipelined closed loop.
const UNPIPE: (usize, usize) = (16, 1);
/// Open-loop rates as fractions of the best peer's pipelined peak.
const FRACTIONS: [f64; 4] = [0.25, 0.5, 0.75, 0.9];

/// A server started for the comparison, stopped (by PID) when dropped.
pub(crate) struct Server {
    pub name: &'static str,
    pub child: Child,
    pub addr: SocketAddr,
    pub protocols: &'static [Protocol],
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_listening(child: &mut Child, addr: SocketAddr, name: &str) -> anyhow::Result<()> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(15) {
        if let Some(status) = child.try_wait()? {
            let mut err = String::new();
            if let Some(e) = child.stderr.as_mut() {
                let _ = e.read_to_string(&mut err);
            }
            anyhow::bail!("{name} exited ({status}): {}", err.trim());
        }
        if TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    anyhow::bail!("{name} did not listen on {addr} within 15 s")
}

fn hkv_binary(hkv: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = hkv {
        return Ok(p.to_path_buf());
    }
    let me = std::env::current_exe()?;
    Ok(me.with_file_name("hkv"))
}

pub(crate) fn start(
    name: &str,
    hkv: Option<&Path>,
    extra: &[String],
    threads: usize,
    mem: usize,
) -> anyhow::Result<Server> {
    let t = threads.to_string();
    let m = mem.to_string();
    match name {
        "hkv" => {
            let bin = hkv_binary(hkv)?;
            let mut child = Command::new(&bin)
                .args([
                    "-p",
                    "0",
                    "-l",
                    "127.0.0.1",
                    "-t",
                    &t,
                    "-m",
                    &m,
                    "-c",
                    "4096",
                ])
                .args(extra)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    anyhow::anyhow!("cannot run {}: {e} (cargo build --release)", bin.display())
                })?;
            // hkv binds port 0 and says which port it got.
            let out = child.stdout.take().expect("piped");
            let mut line = String::new();
            BufReader::new(out).read_line(&mut line)?;
            let addr = line
                .trim()
                .rsplit(' ')
                .next()
                .and_then(|a| a.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("hkv printed {line:?}, not its address"))?;
            wait_listening(&mut child, addr, "hkv")?;
            Ok(Server {
                name: "hkv",
                child,
                addr,
                protocols: &[Protocol::Text, Protocol::Meta, Protocol::Binary],
            })
        }
        "memcached" => {
            let port = free_port()?;
            let mut cmd = Command::new("memcached");
            cmd.args(["-p", &port.to_string(), "-l", "127.0.0.1", "-U", "0"])
                .args(["-t", &t, "-m", &m, "-c", "4096"]);
            // memcached refuses to run as root unless told which user to be.
            if std::fs::metadata("/proc/self").map(|md| md.uid()).ok() == Some(0) {
                cmd.args(["-u", "root"]);
            }
            let mut child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| {
                    anyhow::anyhow!("cannot run memcached: {e} (apt-get install memcached)")
                })?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            wait_listening(&mut child, addr, "memcached")?;
            Ok(Server {
                name: "memcached",
                child,
                addr,
                protocols: &[Protocol::Text, Protocol::Meta, Protocol::Binary],
            })
        }
        "redis" => {
            let port = free_port()?;
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .args(["--io-threads", &t, "--io-threads-do-reads", "yes"])
                .args(["--maxmemory", &format!("{mem}mb")])
                .args(["--maxmemory-policy", "allkeys-lru", "--loglevel", "warning"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| {
                    anyhow::anyhow!("cannot run redis-server: {e} (apt-get install redis-server)")
                })?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            wait_listening(&mut child, addr, "redis-server")?;
            Ok(Server {
                name: "redis",
                child,
                addr,
                protocols: &[Protocol::Resp],
            })
        }
        other => anyhow::bail!("unknown server {other:?} (hkv, memcached, redis)"),
    }
}

/// `stats hkv` as name -> value.
pub(crate) fn hkv_stats(addr: SocketAddr) -> anyhow::Result<BTreeMap<String, String>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"stats hkv\r\n")?;
    let mut out = BTreeMap::new();
    for line in BufReader::new(s).lines() {
        let line = line?;
        if line == "END" {
            break;
        }
        let mut f = line.splitn(3, ' ');
        if let (Some("STAT"), Some(k), Some(v)) = (f.next(), f.next(), f.next()) {
            out.insert(k.to_string(), v.to_string());
        }
    }
    Ok(out)
}

/// The DIDO tasks hkv times per event-loop pass, as they appear in `stats hkv`.
const TASKS: [(&str, &str); 5] = [
    ("task_rv_ns", "RV (receive)"),
    ("task_pp_ns", "PP (parse)"),
    ("task_engine_ns", "MM+IN+KC+RD (engine)"),
    ("task_wr_ns", "WR (write replies)"),
    ("task_sd_ns", "SD (send)"),
];

/// One row of the table: a server spoken to in one protocol.
#[derive(serde::Serialize)]
struct Row {
    server: &'static str,
    protocol: Protocol,
    pipelined: RunResult,
    unpipelined: RunResult,
}

#[derive(serde::Serialize)]
struct Curve {
    server: &'static str,
    protocol: Protocol,
    points: Vec<RunResult>,
}

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

/// ns per answered key spent in each DIDO task over one run (from `stats hkv` deltas).
fn task_breakdown(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<(String, f64)> {
    let num = |m: &BTreeMap<String, String>, k: &str| {
        m.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
    };
    let ops = num(after, "batched_requests") - num(before, "batched_requests");
    TASKS
        .iter()
        .map(|(k, label)| {
            let d = num(after, k) - num(before, k);
            (label.to_string(), d / ops.max(1.0))
        })
        .collect()
}

struct Report<'a> {
    args: &'a Args,
    keys: u64,
    runs: usize,
    duration: f64,
    mem: usize,
    rows: &'a [Row],
    curves: &'a [Curve],
    tasks: Option<&'a [(String, f64)]>,
    peak: f64,
    out: &'a Path,
}

impl Report<'_> {
    fn label(r: &Row) -> String {
        format!("{} {}", r.server, r.protocol.name())
    }

    fn plots(&self) -> anyhow::Result<()> {
        let bars: Vec<(String, f64)> = self
            .rows
            .iter()
            .map(|r| (Self::label(r), r.pipelined.ops_per_sec))
            .collect();
        plot::bars(
            &self.out.join("compare-throughput.svg"),
            &format!(
                "YCSB-{:?} {:?} {:?}, closed loop {}x{}: throughput",
                self.args.workload, self.args.dataset, self.args.dist, PIPE.0, PIPE.1
            ),
            "ops/s",
            &bars,
        )?;
        let cpu: Vec<(String, f64)> = self
            .rows
            .iter()
            .map(|r| {
                (
                    Self::label(r),
                    r.pipelined.server_cpu_ns_per_op.unwrap_or(0.0),
                )
            })
            .collect();
        plot::bars(
            &self.out.join("compare-cpu.svg"),
            "server CPU time per operation (pipelined)",
            "ns/op",
            &cpu,
        )?;
        let cdfs: Vec<(String, Vec<(f64, f64)>)> = self
            .rows
            .iter()
            .map(|r| (Self::label(r), r.pipelined.cdf.clone()))
            .collect();
        plot::lines(
            &self.out.join("compare-cdf.svg"),
            &format!("latency CDF, closed loop {}x{}", PIPE.0, PIPE.1),
            "latency (us)",
            "fraction of requests",
            &cdfs,
            true,
        )?;
        let series: Vec<(String, Vec<(f64, f64)>)> = self
            .curves
            .iter()
            .map(|c| {
                (
                    format!("{} {}", c.server, c.protocol.name()),
                    c.points.iter().map(|p| (p.ops_per_sec, p.p99_us)).collect(),
                )
            })
            .collect();
        plot::lines(
            &self.out.join("compare-latency.svg"),
            "open loop: p99 latency against throughput",
            "ops/s achieved",
            "p99 latency (us)",
            &series,
            false,
        )?;
        Ok(())
    }

    fn markdown(&self, md_path: &Path) -> String {
        let a = self.args;
        let mut s = String::new();
        let rel = |f: &str| {
            let plot = self.out.join(f);
            relative(&plot, md_path.parent().unwrap_or(Path::new(".")))
        };
        s.push_str(&format!(
            "YCSB-{:?}, {:?}, {:?}{}, {} keys preloaded, {} server thread(s) each, {} MiB each, \
             load generator with {} client thread(s) on the same 2-core machine; median of {} \
             run(s) of {} s.\n\n",
            a.workload,
            a.dataset,
            a.dist,
            if a.dist == Dist::Zipf { " 0.99" } else { "" },
            self.keys,
            a.server_threads,
            self.mem,
            a.client_threads,
            self.runs,
            self.duration
        ));
        s.push_str(&format!(
            "| server | protocol | pipelined ({}x{}) ops/s | server CPU ns/op | p99 us | unpipelined ({}x{}) ops/s | server CPU ns/op | p99 us |\n",
            PIPE.0, PIPE.1, UNPIPE.0, UNPIPE.1
        ));
        s.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        let cpu = |r: &RunResult| {
            r.server_cpu_ns_per_op
                .map(|c| format!("{c:.0}"))
                .unwrap_or_else(|| "-".into())
        };
        for r in self.rows {
            s.push_str(&format!(
                "| {} | {} | {:.0} | {} | {:.0} | {:.0} | {} | {:.0} |\n",
                r.server,
                r.protocol.name(),
                r.pipelined.ops_per_sec,
                cpu(&r.pipelined),
                r.pipelined.p99_us,
                r.unpipelined.ops_per_sec,
                cpu(&r.unpipelined),
                r.unpipelined.p99_us,
            ));
        }
        s.push('\n');
        s.push_str(&self.targets());
        s.push_str(&format!(
            "\nOpen loop (latency from each request's scheduled send time), each server in its \
             fastest protocol, at fractions of the best peer's pipelined peak ({:.0} ops/s):\n\n",
            self.peak
        ));
        s.push_str(
            "| server | protocol | asked req/s | achieved ops/s | p50 us | p99 us | p99.9 us |\n",
        );
        s.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
        for c in self.curves {
            for p in &c.points {
                s.push_str(&format!(
                    "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
                    c.server,
                    c.protocol.name(),
                    p.target_rate.unwrap_or(0.0),
                    p.ops_per_sec,
                    p.p50_us,
                    p.p99_us,
                    p.p999_us
                ));
            }
        }
        if let Some(t) = self.tasks {
            s.push_str(
                "\nhkv's time per DIDO task in the pipelined text run (from `stats hkv`, \
                 ns per request, wall time of the worker's event-loop phases):\n\n",
            );
            s.push_str("| task | ns/request |\n| --- | ---: |\n");
            for (k, v) in t {
                s.push_str(&format!("| {k} | {v:.0} |\n"));
            }
        }
        s.push_str(&format!(
            "\n![throughput]({})\n![server CPU per op]({})\n![latency CDF]({})\n![latency against throughput]({})\n",
            rel("compare-throughput.svg"),
            rel("compare-cpu.svg"),
            rel("compare-cdf.svg"),
            rel("compare-latency.svg")
        ));
        s
    }

    /// The targets as ratios against the best peer, met or not.
    fn targets(&self) -> String {
        let hkv: Vec<&Row> = self.rows.iter().filter(|r| r.server == "hkv").collect();
        let peers: Vec<&Row> = self.rows.iter().filter(|r| r.server != "hkv").collect();
        if hkv.is_empty() || peers.is_empty() {
            return String::new();
        }
        let best = |rows: &[&Row], f: &dyn Fn(&Row) -> f64| -> f64 {
            rows.iter().map(|r| f(r)).fold(0.0, f64::max)
        };
        let least = |rows: &[&Row], f: &dyn Fn(&Row) -> Option<f64>| -> Option<f64> {
            rows.iter()
                .filter_map(|r| f(r))
                .min_by(|a, b| a.total_cmp(b))
        };
        let verdict = |ok: bool| if ok { "met" } else { "missed" };
        let mut s = String::from(
            "| target | hkv | best peer | ratio | |\n| --- | ---: | ---: | ---: | --- |\n",
        );
        let (h, p) = (
            best(&hkv, &|r| r.pipelined.ops_per_sec),
            best(&peers, &|r| r.pipelined.ops_per_sec),
        );
        s.push_str(&format!(
            "| pipelined throughput >= 1.5x | {h:.0} | {p:.0} | {:.2} | {} |\n",
            h / p,
            verdict(h >= 1.5 * p)
        ));
        if let (Some(h), Some(p)) = (
            least(&hkv, &|r| r.pipelined.server_cpu_ns_per_op),
            least(&peers, &|r| r.pipelined.server_cpu_ns_per_op),
        ) {
            s.push_str(&format!(
                "| server CPU per op <= 0.5x | {h:.0} ns | {p:.0} ns | {:.2} | {} |\n",
                h / p,
                verdict(h <= 0.5 * p)
            ));
        }
        let (h, p) = (
            best(&hkv, &|r| r.unpipelined.ops_per_sec),
            best(&peers, &|r| r.unpipelined.ops_per_sec),
        );
        s.push_str(&format!(
            "| unpipelined throughput >= 1.2x | {h:.0} | {p:.0} | {:.2} | {} |\n",
            h / p,
            verdict(h >= 1.2 * p)
        ));
        // p99 at half of the best peer's peak: hkv against that peer.
        let peer = peers
            .iter()
            .max_by(|a, b| a.pipelined.ops_per_sec.total_cmp(&b.pipelined.ops_per_sec))
            .map(|r| r.server);
        let at_half = |server: &str| {
            self.curves
                .iter()
                .find(|c| c.server == server)
                .and_then(|c| {
                    c.points
                        .iter()
                        .min_by(|a, b| {
                            let d = |r: &RunResult| {
                                (r.target_rate.unwrap_or(0.0) - self.peak * 0.5).abs()
                            };
                            d(a).total_cmp(&d(b))
                        })
                        .map(|r| r.p99_us)
                })
        };
        if let (Some(h), Some(p)) = (at_half("hkv"), peer.and_then(at_half)) {
            s.push_str(&format!(
                "| p99 at half the best peer's peak <= peer's | {h:.0} us | {p:.0} us | {:.2} | {} |\n",
                h / p,
                verdict(h <= p)
            ));
        }
        s
    }
}

pub(crate) fn relative(path: &Path, from: &Path) -> String {
    let (p, f) = (abs(path), abs(from));
    let common = p
        .components()
        .zip(f.components())
        .take_while(|(a, b)| a == b)
        .count();
    let ups = f.components().count() - common;
    let mut r = PathBuf::new();
    for _ in 0..ups {
        r.push("..");
    }
    for c in p.components().skip(common) {
        r.push(c);
    }
    r.display().to_string()
}

fn abs(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    }
}

/// Replaces the text between the compare markers of `path` (appends it if there are none).
fn write_section(path: &Path, section: &str) -> anyhow::Result<()> {
    write_marked(path, BEGIN, END, section)
}

/// Replaces the text between `begin` and `end` in `path` (appends the block if absent).
pub(crate) fn write_marked(
    path: &Path,
    begin: &str,
    end: &str,
    section: &str,
) -> anyhow::Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let block = format!("{begin}\n{section}{end}\n");
    let new = match (old.find(begin), old.find(end)) {
        (Some(b), Some(e)) if e > b => format!(
            "{}{block}{}",
            &old[..b],
            &old[e + end.len()..].trim_start_matches('\n')
        ),
        _ => format!("{old}\n{block}"),
    };
    std::fs::write(path, new)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_is_replaced_in_place() {
        let dir = std::env::temp_dir().join(format!("hkv-cmp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("B.md");
        std::fs::write(&f, "# B\n\nbefore\n").unwrap();
        write_section(&f, "one\n").unwrap();
        write_section(&f, "two\n").unwrap();
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.starts_with("# B\n\nbefore\n"));
        assert!(text.contains("two") && !text.contains("one"));
        assert_eq!(text.matches(BEGIN).count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative(Path::new("/a/docs/bench/x.svg"), Path::new("/a/docs")),
            "bench/x.svg"
        );
        assert_eq!(
            relative(Path::new("/a/t/x.svg"), Path::new("/a/docs")),
            "../t/x.svg"
        );
    }
}
