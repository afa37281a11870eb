//! WR: turns engine results and server state into memcached's response bytes.

use std::io::Write;
use std::sync::atomic::Ordering;

use hkv_engine::{Response, Responses};

use crate::Shared;

/// One piece of a connection's reply, in request order.
#[derive(Debug)]
pub(crate) enum Step {
    /// A fixed line; `\r\n` is appended.
    Text(&'static str),
    /// One key of a get: a VALUE block on a hit, nothing on a miss.
    Value {
        idx: u32,
        key_off: u32,
        key_len: u32,
        cas: bool,
    },
    /// The reply of a storage, delete, incr/decr or touch command.
    Reply {
        idx: u32,
        noreply: bool,
    },
    Flush {
        delay: i64,
        noreply: bool,
    },
    Version,
    Shutdown,
    Stats(Vec<Vec<u8>>),
    MemLimit {
        megabytes: u64,
        noreply: bool,
    },
    MetaDump(Option<Vec<u32>>),
    Reassign {
        from: i64,
        to: i64,
    },
    Automove(u8),
    Meta(crate::meta::MetaStep),
    Bin(crate::binary::BinStep),
}

pub(crate) const VERSION: &str = concat!("1.6.21-hkv", env!("CARGO_PKG_VERSION"));

/// Appends the bytes of `step` to `out`. Returns true if the server must stop.
pub(crate) fn write(
    step: &Step,
    rbuf: &[u8],
    res: &Responses,
    shared: &Shared,
    now: u32,
    out: &mut Vec<u8>,
) -> bool {
    match *step {
        Step::Text(t) => line(out, t),
        Step::Value {
            idx,
            key_off,
            key_len,
            cas,
        } => {
            let r = &res.results[idx as usize];
            if let Response::Value {
                flags, cas: c, len, ..
            } = *r
            {
                let key = &rbuf[key_off as usize..(key_off + key_len) as usize];
                out.extend_from_slice(b"VALUE ");
                out.extend_from_slice(key);
                let _ = if cas {
                    write!(out, " {flags} {len} {c}\r\n")
                } else {
                    write!(out, " {flags} {len}\r\n")
                };
                out.extend_from_slice(res.value(r));
                out.extend_from_slice(b"\r\n");
            }
        }
        Step::Reply { idx, noreply } => {
            if !noreply {
                reply(out, &res.results[idx as usize]);
            }
        }
        Step::Flush { delay, noreply } => {
            shared.engine.flush_all(delay, now);
            shared.stats.cmd_flush.fetch_add(1, Ordering::Relaxed);
            if !noreply {
                line(out, "OK");
            }
        }
        Step::Version => {
            out.extend_from_slice(b"VERSION ");
            line(out, VERSION);
        }
        Step::Shutdown => {
            if shared.config.enable_shutdown {
                return true;
            }
            line(out, "ERROR: shutdown not enabled");
        }
        Step::Stats(ref args) => crate::stats::write_stats(args, shared, now, out),
        Step::MemLimit { megabytes, noreply } => {
            if megabytes < 8 {
                line(
                    out,
                    "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m",
                );
            } else {
                let bytes =
                    usize::try_from(megabytes.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
                shared.engine.arena().set_limit(bytes);
                if !noreply {
                    line(out, "OK");
                }
            }
        }
        Step::Reassign { from, to } => {
            let class = |c: i64| usize::try_from(c - 1).unwrap_or(usize::MAX);
            match shared.engine.reassign(class(from), class(to), now) {
                Ok(()) => line(out, "OK"),
                Err(e) => line(out, &e.to_string()),
            }
        }
        Step::Automove(mode) => {
            shared.engine.set_automove(mode != 0);
            line(out, "OK");
        }
        Step::MetaDump(ref classes) => crate::stats::metadump(classes.as_deref(), shared, now, out),
        Step::Meta(ref m) => {
            let class_of = |size: usize| {
                let classes = shared.engine.class_stats();
                classes
                    .iter()
                    .position(|c| c.info.chunk >= size)
                    .map_or(0, |i| i + 1)
            };
            shared.stats.cmd_meta.fetch_add(1, Ordering::Relaxed);
            crate::meta::write(m, rbuf, res, class_of, out)
        }
        Step::Bin(ref b) => crate::binary::write(b, rbuf, res, shared, now, out),
    }
    false
}

pub(crate) fn line(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// memcached's words for each engine result.
fn reply(out: &mut Vec<u8>, r: &Response) {
    match *r {
        Response::Stored => line(out, "STORED"),
        Response::NotStored => line(out, "NOT_STORED"),
        Response::Exists => line(out, "EXISTS"),
        Response::NotFound | Response::Miss => line(out, "NOT_FOUND"),
        Response::Deleted => line(out, "DELETED"),
        Response::Touched => line(out, "TOUCHED"),
        Response::Number(n) => {
            let _ = write!(out, "{n}\r\n");
        }
        ref other => line(out, error_line(other)),
    }
}

/// memcached's error line for an engine result that is a failure (or, for a result a
/// command cannot produce, a server error rather than silence).
pub(crate) fn error_line(r: &Response) -> &'static str {
    match r {
        Response::NonNumeric => "CLIENT_ERROR cannot increment or decrement non-numeric value",
        Response::TooLarge => "SERVER_ERROR object too large for cache",
        Response::OutOfMemory => "SERVER_ERROR out of memory storing object",
        Response::KeyTooLong => "CLIENT_ERROR bad command line format",
        // Only reads are deferred, and a pass stops its client before the first of them.
        Response::Deferred => "SERVER_ERROR out of memory writing get response",
        _ => "SERVER_ERROR unexpected engine response",
    }
}
