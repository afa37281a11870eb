//! Several listen addresses, as memcached takes them (`-l 127.0.0.1,::1` or `-l` given
//! twice): every address serves the same cache, on the same port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};

fn call(addr: SocketAddr, req: &[u8], end: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed");
        out.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn every_listen_address_serves_the_same_cache() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-p", "0", "-l", "127.0.0.1,::1", "-l", "127.0.0.2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let addrs: Vec<SocketAddr> = (0..3)
        .map(|_| {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            line.trim().rsplit(' ').next().unwrap().parse().unwrap()
        })
        .collect();
    assert!(
        addrs.iter().all(|a| a.port() == addrs[0].port()),
        "{addrs:?}"
    );
    assert!(addrs[1].is_ipv6());
    assert_eq!(
        call(addrs[1], b"set k 0 0 2\r\nv6\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        call(addrs[0], b"get k\r\n", b"END\r\n"),
        b"VALUE k 0 2\r\nv6\r\nEND\r\n"
    );
    assert_eq!(
        call(addrs[2], b"get k\r\n", b"END\r\n"),
        b"VALUE k 0 2\r\nv6\r\nEND\r\n"
    );
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    assert!(child.wait().unwrap().success());
}
