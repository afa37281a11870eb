//! The admin endpoint (`--admin-listen`): `GET /metrics` in Prometheus' text format, from the
//! stats registry ([`crate::stats::prometheus`]), and `GET /`, a live dashboard (one HTML
//! page with its script, no external assets) that reads `/metrics` once a second. Off by
//! default; it serves no data, only figures, and has no authentication of its own, so it
//! belongs on loopback or a private network.
//!
//! Whatever its clients send, it stays small: a fixed pool of [`WORKERS`] threads, at most
//! [`QUEUED`] connections waiting for one (more are answered 503 at once), a request head of
//! at most [`MAX_HEAD`] bytes (431 past it) that must arrive within [`HEAD_DEADLINE`] of the
//! accept, and one request per connection (`Connection: close`). The protocol work is in
//! [`http`]. It can be kept busy (a flood of idle connections gets 503s until one deadline
//! after it stops), never grown: bind it to loopback or a management address.

mod http;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::unix_now;
use crate::shared::Shared;
use http::{Head, Reply};

const DASHBOARD: &str = include_str!("dashboard.html");

/// Threads answering requests: a scrape and a dashboard or two at a time is the load.
pub(crate) const WORKERS: usize = 4;
/// Accepted connections waiting for a worker; past this they are refused with a 503.
pub(crate) const QUEUED: usize = 32;
/// The longest request line and headers taken (a browser's are 1-2 KiB).
pub(crate) const MAX_HEAD: usize = 8 << 10;
/// How long a client may take to send its request head, however it trickles it in.
pub(crate) const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// How long a reply may wait for a client that does not read it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts until the server stops (checked every `POLL`), handing connections to the pool.
pub(crate) fn serve(listener: TcpListener, shared: &Arc<Shared>) {
    const POLL: Duration = Duration::from_millis(50);
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::warn!(error = %e, "admin endpoint failed");
        return;
    }
    let (tx, rx) = sync_channel::<(TcpStream, Instant)>(QUEUED);
    let rx = Arc::new(Mutex::new(rx));
    let mut workers = Vec::with_capacity(WORKERS);
    for i in 0..WORKERS {
        let (rx, shared) = (Arc::clone(&rx), Arc::clone(shared));
        match std::thread::Builder::new()
            .name(format!("hkv-admin-{i}"))
            .spawn(move || work(&rx, &shared))
        {
            Ok(h) => workers.push(h),
            Err(e) => tracing::warn!(error = %e, "admin endpoint: no worker thread"),
        }
    }
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            // The head's deadline runs from here: time spent queued counts, so a flood of
            // idle connections is gone one deadline after it stops.
            Ok((stream, _)) => match tx.try_send((stream, Instant::now() + HEAD_DEADLINE)) {
                Ok(()) => {}
                Err(TrySendError::Full((stream, _)))
                | Err(TrySendError::Disconnected((stream, _))) => refuse(stream),
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of descriptors and the like: the memcached side matters more.
                tracing::warn!(error = %e, "admin endpoint: accept failed");
                std::thread::sleep(POLL);
            }
        }
    }
    drop(tx);
    for w in workers {
        let _ = w.join();
    }
}

/// A connection the pool has no room for: 503, without waiting on the client.
fn refuse(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&Reply::text(503, "busy\n").to_bytes());
}

fn work(rx: &Mutex<Receiver<(TcpStream, Instant)>>, shared: &Shared) {
    loop {
        // The lock is held only while waiting; a timeout lets the thread see the stop flag.
        let next = match rx.lock() {
            Ok(rx) => rx.recv_timeout(Duration::from_millis(200)),
            Err(_) => return,
        };
        match next {
            Ok((stream, deadline)) => answer(stream, deadline, shared),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn answer(mut stream: TcpStream, deadline: Instant, shared: &Shared) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let reply = match http::read_head(&mut stream, MAX_HEAD, deadline) {
        Ok(head) => route(&head, shared),
        Err(http::HeadError::TooLarge) => Reply::text(431, "request header too large\n"),
        Err(http::HeadError::Malformed) => Reply::text(400, "bad request\n"),
        // Timed out or gone: nobody to answer.
        Err(http::HeadError::Io) => return,
    };
    let _ = stream.write_all(&reply.to_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

fn route(head: &Head, shared: &Shared) -> Reply {
    let path = head.path.split('?').next().unwrap_or("");
    match (head.method.as_str(), path) {
        ("GET", "/metrics") => Reply::new(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            crate::stats::prometheus::render(shared, unix_now()).into_bytes(),
        ),
        ("GET", "/") => Reply::new(
            200,
            "text/html; charset=utf-8",
            DASHBOARD.as_bytes().to_vec(),
        ),
        ("GET", _) => Reply::text(404, "not found\n"),
        _ => Reply::text(405, "method not allowed\n"),
    }
}
