//! The whole server in-process: arbitrary byte streams (text, meta, binary, split at
//! arbitrary points, over up to four connections at once) through the real workers and
//! engine, on loopback. Invariants after every input:
//! - no worker panicked (`stats hkv` worker_panics stays 0) and the server still answers a
//!   well-behaved client exactly;
//! - a GET never returns another key's bytes: every seeded key holds a value with a secret
//!   marker of its own (two of them past the page, so chained, the marker in every part),
//!   and a marker may only ever come back under the key it was given to;
//! - memory stays bounded: the arena within its limit, connection buffers within theirs.
//! Values of 64 bytes and more are sent from item memory (pinned), as large ones are in
//! production, so the marker check covers chunks reused while a send may read them.
#![no_main]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use hkv_engine::{Engine, EngineConfig};
use hkv_net::{NetConfig, Server};
use libfuzzer_sys::fuzz_target;

const SEEDS: usize = 8;
const MEMORY: usize = 8 << 20;
const CONN_BUFFERS: usize = 16 << 20;

struct Fixture {
    addr: SocketAddr,
    nonce: String,
    /// Runs for the life of the fuzzing process (held here so nothing leaks).
    _server: Server,
}

fn marker(nonce: &str, i: usize) -> String {
    format!("SEEDVALUE-{nonce}-{i}-")
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let engine = Engine::new(&EngineConfig {
            memory_bytes: MEMORY,
            partitions: 2,
            page_size: 64 << 10,
            // Values from 64 bytes are sent from item memory (the server's default is 16 KiB):
            // fuzz inputs then exercise pinned chunks against deletes, overwrites and
            // eviction in this small memory.
            zero_copy_min: 64,
            ..EngineConfig::default()
        })
        .expect("engine");
        let server = Server::start(
            engine,
            NetConfig {
                listen: "127.0.0.1:0".parse().expect("addr"),
                threads: 2,
                max_connections: 64,
                conn_buffer_limit: CONN_BUFFERS,
                memory_limit: MEMORY,
                page_size: 64 << 10,
                ..NetConfig::default()
            },
        )
        .expect("server");
        let addr = server.local_addr().expect("a TCP listener");
        let nonce = format!("{:x}", std::process::id() as u64 * 0x9e37_79b9 + 12345);
        Fixture {
            addr,
            nonce,
            _server: server,
        }
    })
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// A read that a signal interrupted is tried again: libFuzzer's timers deliver SIGALRM to
/// whichever thread they land on (a run once failed on EINTR here, the server was fine).
fn read_retrying(s: &mut TcpStream, buf: &mut [u8]) -> usize {
    loop {
        match s.read(buf) {
            Ok(n) => return n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("the server stopped answering: {e}"),
        }
    }
}

/// Sends `req` and reads until the reply ends with `end`.
fn call(addr: SocketAddr, req: &[u8], end: &[u8]) -> Vec<u8> {
    let mut s = connect(addr);
    s.write_all(req).expect("send");
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        let n = read_retrying(&mut s, &mut buf);
        assert!(
            n > 0,
            "closed before the reply ended: {:?}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// Sends `req` and reads `n` reply lines.
fn call_lines(addr: SocketAddr, req: &[u8], n: usize) -> Vec<String> {
    let mut s = connect(addr);
    s.write_all(req).expect("send");
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while out.windows(2).filter(|w| w == b"\r\n").count() < n {
        let k = read_retrying(&mut s, &mut buf);
        assert!(k > 0, "closed early");
        out.extend_from_slice(&buf[..k]);
    }
    String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn stat(addr: SocketAddr, name: &str) -> u64 {
    let s = call(addr, b"stats hkv\r\n", b"END\r\n");
    String::from_utf8_lossy(&s)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(str::to_owned))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name}"))
}

/// Every marker in `data` must belong to seed key `key`.
fn check_markers(key: &[u8], data: &[u8], nonce: &str) {
    let prefix = format!("SEEDVALUE-{nonce}-");
    let text = String::from_utf8_lossy(data);
    for (at, _) in text.match_indices(&prefix) {
        let rest = &text[at + prefix.len()..];
        let owner: String = rest.chars().take_while(char::is_ascii_digit).collect();
        assert_eq!(
            key,
            format!("seed{owner}").as_bytes(),
            "key {:?} returned seed{owner}'s bytes",
            String::from_utf8_lossy(key)
        );
    }
}

/// Walks text replies for VALUE blocks and checks each one's markers.
fn check_reply(reply: &[u8], nonce: &str) {
    let mut pos = 0;
    while let Some(i) = find(&reply[pos..], b"VALUE ") {
        let start = pos + i + 6;
        let Some(eol) = find(&reply[start..], b"\r\n") else {
            break;
        };
        let head = String::from_utf8_lossy(&reply[start..start + eol]).into_owned();
        let mut t = head.split(' ');
        let (Some(key), _, Some(len)) = (t.next(), t.next(), t.next()) else {
            break;
        };
        let Ok(len) = len.parse::<usize>() else { break };
        let data_at = start + eol + 2;
        let end = (data_at + len).min(reply.len());
        check_markers(key.as_bytes(), &reply[data_at..end], nonce);
        pos = end;
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    // Seed keys with values carrying their own marker (again each time: inputs overwrite).
    let mut seed = Vec::new();
    for i in 0..SEEDS {
        let mut v = format!("{}{}", marker(&f.nonce, i), "x".repeat(i * 37));
        if i >= SEEDS - 2 {
            // Past the 64 KiB page: chained, with the marker in every part, so a part of
            // another item read back under this key would show.
            let block = format!("{}{}", marker(&f.nonce, i), "y".repeat(1000));
            v = block.repeat(70 + (i - (SEEDS - 2)) * 60);
        }
        seed.extend(format!("set seed{i} 0 0 {}\r\n{v}\r\n", v.len()).bytes());
    }
    let stored = call_lines(f.addr, &seed, SEEDS);
    assert!(stored.iter().all(|l| l == "STORED"), "seeding: {stored:?}");
    let Some((&head, body)) = data.split_first() else {
        return;
    };
    // The first byte picks how many connections share the input and how it is cut.
    let conns = 1 + (head & 3) as usize;
    let cut = 1 + (head >> 2) as usize * 7;
    let mut streams: Vec<TcpStream> = (0..conns).map(|_| connect(f.addr)).collect();
    for s in &streams {
        s.set_write_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
    }
    for (k, piece) in body.chunks(cut).enumerate() {
        let s = &mut streams[k % conns];
        if s.write_all(piece).is_err() {
            break; // the server closed this one: its right for some inputs
        }
    }
    for s in &mut streams {
        let _ = s.shutdown(Shutdown::Write);
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        check_reply(&reply, &f.nonce);
    }
    // Seeds read back through a fresh client: only their own bytes.
    let keys: Vec<String> = (0..SEEDS).map(|i| format!("seed{i}")).collect();
    let r = call(
        f.addr,
        format!("get {}\r\n", keys.join(" ")).as_bytes(),
        b"END\r\n",
    );
    check_reply(&r, &f.nonce);
    assert_eq!(stat(f.addr, "worker_panics"), 0, "a worker panicked");
    assert!(stat(f.addr, "arena_used") <= MEMORY as u64);
    assert!(stat(f.addr, "conn_buffer_bytes") <= (CONN_BUFFERS + (8 << 20)) as u64);
    let ok = call(
        f.addr,
        b"set fuzz_ok 0 0 2\r\nok\r\nget fuzz_ok\r\n",
        b"END\r\n",
    );
    assert_eq!(ok, b"STORED\r\nVALUE fuzz_ok 0 2\r\nok\r\nEND\r\n");
});
