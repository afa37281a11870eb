//! The admin endpoint (`--admin-listen`): `GET /metrics` in Prometheus' text format, from the
//! stats registry ([`crate::stats::prometheus`]), and `GET /`, a live dashboard (one HTML
//! page with its script, no external assets) that reads `/metrics` once a second. Off by default; it serves no data, only
//! figures, and has no authentication of its own, so it belongs on loopback or a private
//! network.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::clock::unix_now;
use crate::shared::Shared;

const DASHBOARD: &str = include_str!("dashboard.html");

/// Serves until the server stops (checked at least every `POLL`).
pub(crate) fn serve(server: tiny_http::Server, shared: &Shared) {
    const POLL: Duration = Duration::from_millis(200);
    while !shared.stop.load(Ordering::SeqCst) {
        let req = match server.recv_timeout(POLL) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "admin endpoint failed");
                return;
            }
        };
        let path = req.url().split('?').next().unwrap_or("").to_string();
        let response = match (req.method(), path.as_str()) {
            (tiny_http::Method::Get, "/metrics") => {
                let body = crate::stats::prometheus::render(shared, unix_now());
                tiny_http::Response::from_string(body).with_header(header(
                    "Content-Type",
                    "text/plain; version=0.0.4; charset=utf-8",
                ))
            }
            (tiny_http::Method::Get, "/") => tiny_http::Response::from_string(DASHBOARD)
                .with_header(header("Content-Type", "text/html; charset=utf-8")),
            (tiny_http::Method::Get, _) => {
                tiny_http::Response::from_string("not found\n").with_status_code(404)
            }
            _ => tiny_http::Response::from_string("method not allowed\n").with_status_code(405),
        };
        let _ = req.respond(response);
    }
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).unwrap_or_else(|()| {
        tiny_http::Header::from_bytes(&b"X-Hkv"[..], &b"1"[..]).expect("a valid header")
    })
}
