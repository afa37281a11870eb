//! The servers a comparison starts (hkv, memcached, Redis), stopped by PID when dropped.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::Protocol;

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
