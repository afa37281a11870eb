//! The admin endpoint (`--admin-listen`): what it serves, and that nothing its clients send
//! grows the server (a hostile probe found 200 MB of headers buffered whole and a thread per
//! idle connection in the HTTP server it used before).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::Hkv;

fn start() -> (Hkv, SocketAddr) {
    let h = Hkv::start(&["--admin-listen", "127.0.0.1:0"]);
    let admin = h.admin.expect("admin address line");
    (h, admin)
}

/// Sends `request` and returns the whole reply (the endpoint closes after each).
fn exchange(admin: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(admin).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).expect("send");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn get(admin: SocketAddr, path: &str) -> String {
    exchange(
        admin,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
}

fn threads(h: &Hkv) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{}/status", h.pid())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Threads: line")
}

#[test]
fn metrics_and_the_dashboard_are_served_and_anything_else_refused() {
    let (_h, admin) = start();
    let metrics = get(admin, "/metrics?x=1");
    assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics:.200}");
    assert!(metrics.contains("Content-Type: text/plain; version=0.0.4"));
    assert!(metrics.contains("\nmemcached_up 1\n"), "{metrics:.2000}");
    let page = get(admin, "/");
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n") && page.contains("<html"));
    assert!(get(admin, "/nope").starts_with("HTTP/1.1 404 "));
    let post = exchange(
        admin,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 1\r\n\r\nx",
    );
    assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
    let garbage = exchange(admin, b"\x16\x03\x01\x02\x00 not http\r\n\r\n");
    assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
}

#[test]
fn regression_endless_admin_headers_are_cut_off_at_the_limit() {
    let (h, admin) = start();
    let before = h.rss();
    let mut s = TcpStream::connect(admin).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let line = format!("X-Pad: {}\r\n", "p".repeat(1000));
    let mut sent = 0usize;
    while sent < 64 << 20 {
        match s.write(line.as_bytes()) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    assert!(
        sent < 64 << 20,
        "the endpoint took 64 MB of headers without closing"
    );
    let grown = h.rss().saturating_sub(before);
    assert!(grown < 8 << 20, "the server grew by {grown} bytes");
    assert!(get(admin, "/metrics").starts_with("HTTP/1.1 200 "));
    common::assert_healthy(&h);
}

#[test]
fn regression_idle_admin_connections_make_no_threads_and_time_out() {
    let (h, admin) = start();
    // The endpoint's pool starts after its address is printed: a request it answered
    // proves the pool is up (CI once counted 6 threads here, before it, and 10 after).
    assert!(get(admin, "/metrics").starts_with("HTTP/1.1 200 "));
    std::thread::sleep(Duration::from_millis(200));
    let before = threads(&h);
    let idle: Vec<TcpStream> = (0..500)
        .map(|_| TcpStream::connect(admin).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        threads(&h) <= before,
        "{} threads with 500 idle admin connections, {before} before",
        threads(&h)
    );
    // One head deadline (5 s) after the flood, the endpoint answers again.
    let t = Instant::now();
    loop {
        let reply = get(admin, "/metrics");
        if reply.starts_with("HTTP/1.1 200 ") {
            break;
        }
        assert!(
            reply.is_empty() || reply.starts_with("HTTP/1.1 503 "),
            "{reply:.200}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "still busy after 20 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(idle);
    common::assert_healthy(&h);
}
