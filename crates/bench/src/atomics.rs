//! `hkv-bench atomics`: KV-Direct's operations over the network (issue 19).
//!
//! - Fig. 13a's analogue: single-key atomics (`vupdate <k> u64 add 1` on 8-byte values) per
//!   second against the number of distinct keys, on hkv with merging on and off, and
//!   memcached's `incr` on the same keys as the peer.
//! - Table 2's analogue: adding 1 to every u32 of a 1-64 KiB vector, as one `vupdate`, as one
//!   `incr` per element (one key each), and as the client's fetch-modify-write (`gets`, add,
//!   `cas`), in elements updated per second; the last two also against memcached.
//!
//! Closed loop: each connection keeps `depth` requests in flight (fetch-modify-write cannot
//! pipeline: one round at a time). Medians of `runs`.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::compare::{relative, start, write_marked};
use crate::plot;
use crate::workload::median;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Distinct keys for the single-key atomics.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,10,100,1000,10000,100000,1000000"
    )]
    keys: Vec<u64>,
    /// Vector sizes in bytes for the vector comparison.
    #[arg(long, value_delimiter = ',', default_value = "1024,4096,16384,65536")]
    sizes: Vec<usize>,
    #[arg(long, default_value_t = 2)]
    server_threads: usize,
    #[arg(long, default_value_t = 8)]
    conns: usize,
    #[arg(long, default_value_t = 32)]
    depth: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// hkv's batch interval for the merging runs (merging needs delayed index writes).
    #[arg(long, default_value = "100")]
    interval_us: String,
    /// Also run on `--engine opencl`.
    #[arg(long)]
    opencl: bool,
    /// The hkv binary (default: `hkv` beside this program).
    #[arg(long)]
    hkv: Option<PathBuf>,
    #[arg(long, default_value = "docs/bench")]
    out: PathBuf,
    #[arg(long, default_value = "docs/BENCHMARKS.md")]
    markdown: PathBuf,
}

const BEGIN: &str = "<!-- atomics:begin (written by hkv-bench atomics) -->";
const END: &str = "<!-- atomics:end -->";

/// A blocking connection that sends a burst and reads its replies.
struct Conn {
    w: TcpStream,
    r: BufReader<TcpStream>,
    line: String,
}

impl Conn {
    fn open(addr: SocketAddr) -> anyhow::Result<Conn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Conn {
            w: s.try_clone()?,
            r: BufReader::with_capacity(1 << 20, s),
            line: String::new(),
        })
    }

    /// One reply: a line, or a `VALUE` block (whose data and `END` are read too). Returns
    /// the first line and the value bytes.
    fn reply(&mut self, value: &mut Vec<u8>) -> anyhow::Result<&str> {
        self.line.clear();
        self.r.read_line(&mut self.line)?;
        if self.line.is_empty() {
            anyhow::bail!("server closed the connection");
        }
        if self.line.starts_with("VALUE ") {
            let n: usize = self
                .line
                .split_whitespace()
                .nth(3)
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("bad VALUE line {:?}", self.line))?;
            value.resize(n + 2, 0);
            self.r.read_exact(value)?;
            value.truncate(n);
            let mut end = String::new();
            self.r.read_line(&mut end)?;
        }
        let l = self.line.trim_end();
        if l.starts_with("ERROR") || l.contains("_ERROR") {
            anyhow::bail!("server answered {l:?}");
        }
        Ok(l)
    }
}

/// Runs `conns` connections for `secs`, each running `round(conn_no, round_no, conn)` until
/// the time is up; a round returns the operations it completed. Returns operations per
/// second over all connections.
fn for_conns(
    addr: SocketAddr,
    conns: usize,
    secs: f64,
    round: impl Fn(usize, u64, &mut Conn) -> anyhow::Result<u64> + Sync,
) -> anyhow::Result<f64> {
    let deadline = Duration::from_secs_f64(secs);
    let t0 = Instant::now();
    let total: anyhow::Result<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..conns)
            .map(|c| {
                let round = &round;
                s.spawn(move || -> anyhow::Result<u64> {
                    let mut conn = Conn::open(addr)?;
                    let (mut done, mut n) = (0u64, 0u64);
                    while t0.elapsed() < deadline {
                        done += round(c, n, &mut conn)?;
                        n += 1;
                    }
                    Ok(done)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("load thread panicked"))?
            })
            .sum()
    });
    Ok(total? as f64 / t0.elapsed().as_secs_f64())
}

/// Closed loop: each connection keeps `depth` requests in flight; `burst(conn_no, round,
/// out)` writes them. Returns operations per second.
fn closed_loop(
    addr: SocketAddr,
    conns: usize,
    depth: usize,
    secs: f64,
    burst: impl Fn(usize, u64, &mut Vec<u8>) + Sync,
) -> anyhow::Result<f64> {
    for_conns(addr, conns, secs, |c, round, conn| {
        let mut out = Vec::new();
        burst(c, round, &mut out);
        conn.w.write_all(&out)?;
        let mut value = Vec::new();
        for _ in 0..depth {
            conn.reply(&mut value)?;
        }
        Ok(depth as u64)
    })
}

/// Cheap per-connection random numbers (xorshift), so keys differ between connections.
fn rand(seed: u64) -> u64 {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

fn preload(
    addr: SocketAddr,
    keys: impl Iterator<Item = String>,
    value: &[u8],
) -> anyhow::Result<()> {
    let mut c = Conn::open(addr)?;
    let mut out = Vec::new();
    let mut pending = 0;
    let mut v = Vec::new();
    for k in keys {
        let _ = write!(out, "set {k} 0 0 {}\r\n", value.len());
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
        pending += 1;
        if pending == 256 {
            c.w.write_all(&out)?;
            out.clear();
            for _ in 0..pending {
                c.reply(&mut v)?;
            }
            pending = 0;
        }
    }
    c.w.write_all(&out)?;
    for _ in 0..pending {
        c.reply(&mut v)?;
    }
    Ok(())
}

struct Target {
    label: String,
    server: &'static str,
    extra: Vec<String>,
}

fn targets(args: &Args) -> Vec<Target> {
    let mut t = Vec::new();
    let mut engines = vec!["cpu"];
    if args.opencl {
        engines.push("opencl");
    }
    for e in engines {
        if e == "cpu" {
            t.push(Target {
                label: "hkv cpu C=0".into(),
                server: "hkv",
                extra: vec!["--engine".into(), "cpu".into()],
            });
        }
        for merge in [true, false] {
            t.push(Target {
                label: format!(
                    "hkv {e} C={} merge {}",
                    args.interval_us,
                    if merge { "on" } else { "off" }
                ),
                server: "hkv",
                extra: vec![
                    "--engine".into(),
                    e.into(),
                    "--batch-interval-us".into(),
                    args.interval_us.clone(),
                    "--merge-atomics".into(),
                    merge.to_string(),
                ],
            });
        }
    }
    t.push(Target {
        label: "memcached incr".into(),
        server: "memcached",
        extra: vec![],
    });
    t
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let mem = 1024;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Command: `hkv-bench atomics --keys {} --sizes {} --server-threads {} --conns {} --depth {} --duration {} --runs {}{}` (medians of {} runs; client and server on this machine).\n",
        args.keys.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
        args.sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        args.server_threads,
        args.conns,
        args.depth,
        args.duration,
        args.runs,
        if args.opencl { " --opencl" } else { "" },
        args.runs,
    );

    // Single-key atomics against the number of distinct keys.
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let _ = writeln!(md, "Single-key atomics (8-byte values; hkv `vupdate <k> u64 add 1`, memcached `incr <k> 1`), operations/s:\n");
    let mut header = "| distinct keys |".to_string();
    let mut rule = "| ---: |".to_string();
    let mut rows: Vec<String> = args.keys.iter().map(|k| format!("| {k} |")).collect();
    let mut peer = vec![0f64; args.keys.len()];
    let mut results: Vec<Vec<f64>> = Vec::new();
    for t in targets(args) {
        let server = start(
            t.server,
            args.hkv.as_deref(),
            &t.extra,
            args.server_threads,
            mem,
        )?;
        let addr = server.addr;
        let mut loaded = 0u64;
        let mut pts = Vec::new();
        for (i, &k) in args.keys.iter().enumerate() {
            preload(addr, (loaded..k).map(|j| format!("a:{j}")), b"00000000")?;
            loaded = loaded.max(k);
            let hkv = t.server == "hkv";
            let mut runs: Vec<f64> = (0..args.runs)
                .map(|_| {
                    closed_loop(
                        addr,
                        args.conns,
                        args.depth,
                        args.duration,
                        |c, round, out| {
                            let mut x = rand((c as u64) << 40 | round);
                            for _ in 0..args.depth {
                                x = rand(x);
                                let key = x % k;
                                if hkv {
                                    let _ = write!(out, "vupdate a:{key} u64 add 1\r\n");
                                } else {
                                    let _ = write!(out, "incr a:{key} 1\r\n");
                                }
                            }
                        },
                    )
                })
                .collect::<anyhow::Result<_>>()?;
            let m = median(&mut runs);
            if !hkv {
                peer[i] = m;
            }
            pts.push((k as f64, m));
            eprintln!("{}: {k} keys: {m:.0} ops/s", t.label);
        }
        header += &format!(" {} |", t.label);
        rule += " ---: |";
        results.push(pts.iter().map(|p| p.1).collect());
        series.push((t.label.clone(), pts));
        drop(server);
    }
    for (i, row) in rows.iter_mut().enumerate() {
        for r in &results {
            let ratio = if peer[i] > 0.0 { r[i] / peer[i] } else { 0.0 };
            *row += &format!(" {} ({ratio:.2}x) |", plot::si(r[i]));
        }
    }
    let _ = writeln!(md, "{header}\n{rule}");
    for r in rows {
        let _ = writeln!(md, "{r}");
    }
    let p1 = args.out.join("atomics-keys.svg");
    plot::lines(
        &p1,
        "Single-key atomics vs distinct keys",
        "distinct keys",
        "operations/s",
        &series,
        true,
    )?;
    let dir = args.markdown.parent().unwrap_or(std::path::Path::new("."));
    let _ = writeln!(
        md,
        "\n(ratios against memcached `incr` on the same keys)\n\n![atomics vs keys]({})\n",
        relative(&p1, dir)
    );

    // Vector update: one command, one key per element, fetch-modify-write.
    let _ = writeln!(
        md,
        "Adding 1 to every u32 element of a vector, elements updated/s:\n"
    );
    let _ = writeln!(md, "| vector | hkv `vupdate` | hkv `incr` per element | hkv fetch-modify-write | memcached `incr` per element | memcached fetch-modify-write | `vupdate` / best memcached |");
    let _ = writeln!(md, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut bars = Vec::new();
    let hkv = start("hkv", args.hkv.as_deref(), &[], args.server_threads, mem)?;
    let mc = start("memcached", None, &[], args.server_threads, mem)?;
    for &size in &args.sizes {
        let elems = size / 4;
        let mut row = vec![];
        for (name, addr) in [("hkv", hkv.addr), ("memcached", mc.addr)] {
            // One vector per connection (no CAS contention), and one counter per element.
            preload(
                addr,
                (0..args.conns).map(|c| format!("v{size}:{c}")),
                &vec![0u8; size],
            )?;
            preload(addr, (0..elems).map(|e| format!("e{size}:{e}")), b"0")?;
            let vupdate = if name == "hkv" {
                let mut r: Vec<f64> = (0..args.runs)
                    .map(|_| {
                        closed_loop(addr, args.conns, args.depth, args.duration, |c, _, out| {
                            for _ in 0..args.depth {
                                let _ = write!(out, "vupdate v{size}:{c} u32 add 1\r\n");
                            }
                        })
                    })
                    .collect::<anyhow::Result<_>>()?;
                Some(median(&mut r) * elems as f64)
            } else {
                None
            };
            let mut r: Vec<f64> = (0..args.runs)
                .map(|_| {
                    closed_loop(
                        addr,
                        args.conns,
                        args.depth,
                        args.duration,
                        |c, round, out| {
                            let base =
                                (c * args.depth) as u64 + round * (args.conns * args.depth) as u64;
                            for d in 0..args.depth as u64 {
                                let _ =
                                    write!(out, "incr e{size}:{} 1\r\n", (base + d) % elems as u64);
                            }
                        },
                    )
                })
                .collect::<anyhow::Result<_>>()?;
            let per_element = median(&mut r);
            let mut r: Vec<f64> = (0..args.runs)
                .map(|_| fetch_modify_write(addr, args.conns, args.duration, size))
                .collect::<anyhow::Result<_>>()?;
            let fmw = median(&mut r) * elems as f64;
            row.push((vupdate, per_element, fmw));
            eprintln!("{name} {size} B: vupdate {vupdate:?} per-element {per_element:.0} fmw {fmw:.0} elements/s");
        }
        let (hv, hp, hf) = row[0];
        let (_, mp, mf) = row[1];
        let hv = hv.unwrap_or(0.0);
        let _ = writeln!(
            md,
            "| {} KiB | {} | {} | {} | {} | {} | {:.1}x |",
            size / 1024,
            plot::si(hv),
            plot::si(hp),
            plot::si(hf),
            plot::si(mp),
            plot::si(mf),
            hv / mp.max(mf).max(1.0)
        );
        bars.push((format!("{} KiB vupdate", size / 1024), hv));
        bars.push((format!("{} KiB best memcached", size / 1024), mp.max(mf)));
    }
    drop(hkv);
    drop(mc);
    let p2 = args.out.join("atomics-vector.svg");
    plot::bars(
        &p2,
        "Vector add: elements updated per second",
        "elements/s",
        &bars,
    )?;
    let _ = writeln!(md, "\n![vector update]({})\n", relative(&p2, dir));
    write_marked(&args.markdown, BEGIN, END, &md)?;
    print!("{md}");
    Ok(())
}

/// `gets`, add 1 to every u32 in the client, `cas` back; each connection its own vector.
/// Returns successful rounds per second.
fn fetch_modify_write(
    addr: SocketAddr,
    conns: usize,
    secs: f64,
    size: usize,
) -> anyhow::Result<f64> {
    for_conns(addr, conns, secs, |c, _, conn| {
        let mut value = Vec::new();
        let _ = write!(conn.w, "gets v{size}:{c}\r\n");
        let line = conn.reply(&mut value)?.to_string();
        let cas: u64 = line
            .split_whitespace()
            .nth(4)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no CAS in {line:?}"))?;
        for e in value.chunks_exact_mut(4) {
            let mut a = [0u8; 4];
            a.copy_from_slice(e);
            e.copy_from_slice(&u32::from_le_bytes(a).wrapping_add(1).to_le_bytes());
        }
        let mut out = Vec::new();
        let _ = write!(out, "cas v{size}:{c} 0 0 {} {cas}\r\n", value.len());
        out.extend_from_slice(&value);
        out.extend_from_slice(b"\r\n");
        conn.w.write_all(&out)?;
        Ok(u64::from(conn.reply(&mut value)? == "STORED"))
    })
}
