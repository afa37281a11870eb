//! Starts a real `hkv` process on an ephemeral port and talks to it over TCP.
#![allow(dead_code)]

pub mod udp;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Hkv {
    pub child: Child,
    pub addr: SocketAddr,
    /// Set when started with `--udp-listen`.
    pub udp: Option<SocketAddr>,
    /// Set when started with `--admin-listen`.
    pub admin: Option<SocketAddr>,
}

impl Hkv {
    /// Starts `hkv -p 0 <args>` and reads the bound address from its first output line:
    /// no fixed port, no sleeping until it is ready.
    pub fn start(args: &[&str]) -> Hkv {
        Self::start_with_env(args, &[])
    }

    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Hkv {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hkv"))
            .args(["-p", "0", "-l", "127.0.0.1"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start hkv");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut read_addr = || {
            let mut line = String::new();
            out.read_line(&mut line).expect("read address line");
            line.trim()
                .rsplit(' ')
                .next()
                .and_then(|a| a.parse::<SocketAddr>().ok())
                .unwrap_or_else(|| panic!("no address in {line:?}"))
        };
        let addr = read_addr();
        let udp = args.contains(&"--udp-listen").then(&mut read_addr);
        let admin = args.contains(&"--admin-listen").then(&mut read_addr);
        Hkv {
            child,
            addr,
            udp,
            admin,
        }
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGSTOP and waits until every thread has stopped: `kill` returns when the
    /// signal is queued, and a worker still running takes what is sent meanwhile.
    pub fn stop(&self) {
        self.signal_only("STOP");
        let tasks = format!("/proc/{}/task", self.pid());
        let deadline = Instant::now() + Duration::from_secs(10);
        let stopped = |state: &str| {
            // The state follows the command name, which is in parentheses.
            state
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .is_some_and(|c| c == 'T' || c == 't')
        };
        while Instant::now() < deadline {
            let all = std::fs::read_dir(&tasks)
                .map(|dir| {
                    dir.flatten().all(|t| {
                        std::fs::read_to_string(t.path().join("stat"))
                            .map(|s| stopped(&s))
                            .unwrap_or(true)
                    })
                })
                .unwrap_or(false);
            if all {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("hkv did not stop within 10 s");
    }

    /// Sends SIGTERM and waits; returns whether it exited cleanly.
    pub fn terminate(&mut self) -> bool {
        self.signal("TERM")
    }

    /// Sends `SIG<name>` (`STOP` and `CONT` to hold the server still).
    pub fn signal_only(&self, name: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status();
    }

    /// Sends `SIG<name>` and waits up to 10 s; returns whether it exited cleanly.
    pub fn signal(&mut self, name: &str) -> bool {
        self.signal_only(name);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Resident memory of the server process, in bytes.
    pub fn rss(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/statm", self.pid())).unwrap_or_default();
        s.split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u64>().ok())
            .unwrap_or(0)
            * 4096
    }
}

impl Hkv {
    /// Peak resident memory of the server process so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    }
}

impl Drop for Hkv {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    /// `STAT <name>` of `stats <group>` (`""`: plain `stats`), if the server reports it.
    pub fn stat(&mut self, group: &str, name: &str) -> Option<String> {
        let cmd = if group.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {group}\r\n")
        };
        let s = self.call(&cmd, "END\r\n");
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
            .map(str::to_string)
    }

    /// The same, as a number.
    pub fn stat_u64(&mut self, group: &str, name: &str) -> Option<u64> {
        self.stat(group, name).and_then(|v| v.trim().parse().ok())
    }

    /// The same, where the server must report it.
    pub fn stat_n(&mut self, group: &str, name: &str) -> u64 {
        self.stat_u64(group, name)
            .unwrap_or_else(|| panic!("no STAT {name} in stats {group}"))
    }

    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// Stores `n` one-byte items `<prefix><i:07>` (pipelined, noreply) and waits for them.
    pub fn store_many(&mut self, prefix: &str, n: usize) {
        let mut sets = String::new();
        for i in 0..n {
            sets.push_str(&format!("set {prefix}{i:07} 0 0 1 noreply\r\nv\r\n"));
        }
        self.send(sets.as_bytes());
        self.expect("mn\r\n", "MN\r\n");
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Reads until the received bytes end with `end` (or the peer closes).
    pub fn read_until(&mut self, end: &[u8]) -> String {
        let mut chunk = [0u8; 65536];
        while !self.buf.ends_with(end) {
            match self.stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                // A signal that lands during the read (seen once under a full test run).
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!(
                    "read: {e}; got so far {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
            }
        }
        String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned()
    }

    /// Sends a request and reads the reply, which ends with `end`.
    pub fn call(&mut self, req: &str, end: &str) -> String {
        self.send(req.as_bytes());
        self.read_until(end.as_bytes())
    }

    /// Sends `req` and checks the reply is exactly `want` (reading until that many bytes).
    pub fn expect(&mut self, req: &str, want: &str) {
        self.send(req.as_bytes());
        let mut chunk = [0u8; 65536];
        while self.buf.len() < want.len() {
            match self.stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                // A signal that lands during the read (seen once under a full test run).
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!(
                    "request {req:?}: read: {e}; got {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
            }
        }
        let got = String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
        assert_eq!(got, want, "request {req:?}");
    }

    /// As [`Client::expect`], for a reply that reports TTLs (`t<secs>`): the server's clock
    /// may turn a second between the write and this read, which takes one from each TTL and
    /// adds one to each `l<secs>`, as in memcached (`ms_n_autovivifies_an_append_on_a_miss` read `t29` for `t30` in a CI run).
    pub fn expect_ttl(&mut self, req: &str, want: &str) {
        self.send(req.as_bytes());
        let lines = want.matches("\r\n").count();
        let mut chunk = [0u8; 65536];
        while self.buf.windows(2).filter(|w| w == b"\r\n").count() < lines {
            match self.stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                // A signal that lands during the read (seen once under a full test run).
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("request {req:?}: read: {e}"),
            }
        }
        let got = String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
        let a_second_later = one_second_less(want);
        assert!(
            got == want || got == a_second_later,
            "request {req:?}: got {got:?}, want {want:?} (or {a_second_later:?})"
        );
    }

    /// Reads until the server closes the connection.
    pub fn read_to_close(&mut self) -> Result<String, std::io::Error> {
        let mut all = std::mem::take(&mut self.buf);
        self.stream.read_to_end(&mut all)?;
        Ok(String::from_utf8_lossy(&all).into_owned())
    }

    /// True if the server closed the connection (EOF or reset).
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1024];
        loop {
            match self.stream.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return false
                }
                Err(_) => return true,
            }
        }
    }
}

/// Checks the server still serves a well-behaved client correctly.
pub fn assert_healthy(h: &Hkv) {
    let mut c = h.connect();
    let key = format!("health{}", std::process::id());
    assert_eq!(
        c.call(&format!("set {key} 3 0 2\r\nok\r\n"), "\r\n"),
        "STORED\r\n"
    );
    assert_eq!(
        c.call(&format!("get {key}\r\n"), "END\r\n"),
        format!("VALUE {key} 3 2\r\nok\r\nEND\r\n")
    );
}

/// The engines to run a test body on: the CPU always, OpenCL where hkv can start on it
/// (with HKV_REQUIRE_OPENCL=1, as in CI, it must).
pub fn engines() -> Vec<&'static str> {
    let mut e = vec!["cpu"];
    let mut child = match Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-p", "0", "--engine", "opencl", "-t", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => return e,
    };
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
    let _ = child.kill();
    let _ = child.wait();
    if line.contains("listening") {
        e.push("opencl");
    } else if std::env::var("HKV_REQUIRE_OPENCL").as_deref() == Ok("1") {
        panic!("HKV_REQUIRE_OPENCL=1 but hkv cannot start on the OpenCL engine");
    }
    e
}

/// What the server may hold beyond `-m`: code, threads, connection buffers and one pass of
/// values per worker (docs/reliability.md).
pub const OVERHEAD: u64 = 96 << 20;

pub fn assert_peak_within(h: &Hkv, limit_mb: u64) {
    let peak = h.peak_rss();
    assert!(peak > 0, "no VmHWM");
    assert!(
        peak < (limit_mb << 20) + OVERHEAD,
        "peak RSS {} MiB with -m {limit_mb}",
        peak >> 20
    );
}

/// Reads exactly `n` bytes.
pub fn read_exact(c: &mut Client, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    c.stream.read_exact(&mut v).expect("read reply");
    v
}

pub fn set_big(c: &mut Client, key: &str, len: usize, fill: u8) -> Vec<u8> {
    let v = vec![fill; len];
    c.send(format!("set {key} 0 0 {len}\r\n").as_bytes());
    c.send(&v);
    c.send(b"\r\n");
    assert_eq!(c.read_until(b"\r\n"), "STORED\r\n");
    v
}

pub fn value_block(key: &str, v: &[u8]) -> Vec<u8> {
    let mut b = format!("VALUE {key} 0 {}\r\n", v.len()).into_bytes();
    b.extend_from_slice(v);
    b.extend_from_slice(b"\r\n");
    b
}

/// The server's `version` reply, without the word.
pub fn version(h: &Hkv) -> String {
    let mut c = h.connect();
    let v = c.call("version\r\n", "\r\n");
    v.trim().trim_start_matches("VERSION ").to_string()
}

/// Waits until the server admits a connection again after clients at `-c` went away: their
/// closes reach the workers a little later than the client drops them.
pub fn wait_for_a_free_slot(h: &Hkv) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = h.connect();
        // A refused connection gets its error line and is closed, so the write or the read
        // may fail: that too is a refusal.
        let _ = c.stream.write_all(b"version\r\n");
        let mut got = Vec::new();
        let mut chunk = [0u8; 256];
        while !got.ends_with(b"\r\n") {
            match c.stream.read(&mut chunk) {
                Ok(n) if n > 0 => got.extend_from_slice(&chunk[..n]),
                _ => break,
            }
        }
        if got.starts_with(b"VERSION ") {
            return;
        }
        assert!(Instant::now() < deadline, "no slot came free: {got:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `stats <group>` until `name` satisfies `ok` (10 s at most), and returns its value:
/// what a test waits for happens on the server's time, not after a fixed sleep.
pub fn wait_for_stat(c: &mut Client, group: &str, name: &str, ok: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = c.stat_n(group, name);
        if ok(v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{name} stayed at {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `want` with each `t<secs>` flag of its meta reply lines one second lower.
fn one_second_less(want: &str) -> String {
    want.split_inclusive("\r\n")
        .map(|line| {
            if !(line.starts_with("HD") || line.starts_with("VA")) {
                return line.to_string();
            }
            let body = line.trim_end_matches("\r\n");
            let flags: Vec<String> = body
                .split(' ')
                .map(|f| {
                    let secs = |p: char| f.strip_prefix(p).and_then(|n| n.parse::<u64>().ok());
                    match (secs('t'), secs('l')) {
                        (Some(ttl), _) if ttl > 0 => format!("t{}", ttl - 1),
                        // Seconds since the last access grow as the TTL shrinks (a CI run
                        // read `l1 t99` for `l0 t100`).
                        (_, Some(idle)) => format!("l{}", idle + 1),
                        _ => f.to_string(),
                    }
                })
                .collect();
            format!("{}\r\n", flags.join(" "))
        })
        .collect()
}

/// A binary protocol request (opaque 0xdeadbeef, no CAS).
pub fn bin_request(opcode: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut p = vec![0x80, opcode];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.push(extras.len() as u8);
    p.extend_from_slice(&[0, 0, 0]);
    p.extend_from_slice(&(body as u32).to_be_bytes());
    p.extend_from_slice(&0xdead_beefu32.to_be_bytes());
    p.extend_from_slice(&[0; 8]);
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}
