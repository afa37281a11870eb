//! WR: turns engine results and server state into memcached's response bytes.

use std::io::Write;
use std::sync::atomic::Ordering;

use hkv_engine::{Response, Responses};

use crate::control;
use crate::reply::{error_line, line, VERSION};
use crate::shared::Shared;
use crate::step::Step;

/// Appends the bytes of `step` to `out`. Returns true if the server must stop.
pub(crate) fn wr_compose(
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
            control::flush_all(shared, delay, now);
            if !noreply {
                line(out, "OK");
            }
        }
        Step::Version => {
            out.extend_from_slice(b"VERSION ");
            line(out, VERSION);
        }
        Step::Shutdown { graceful, invalid } => {
            if !shared.config.enable_shutdown {
                line(out, hkv_proto::errors::admin::SHUTDOWN_DISABLED);
            } else if invalid {
                line(out, hkv_proto::errors::admin::SHUTDOWN_BAD_MODE);
            } else {
                shared
                    .graceful
                    .fetch_or(graceful, std::sync::atomic::Ordering::SeqCst);
                return true;
            }
        }
        Step::RefreshCerts => match control::refresh_certs(shared) {
            Ok(()) => line(out, "OK"),
            Err(e) => line(out, &e),
        },
        Step::Stats(ref args) => crate::stats::write_stats(args, shared, now, out),
        Step::MemLimit { megabytes, noreply } => match control::set_memory_limit(shared, megabytes)
        {
            Ok(()) if noreply => {}
            Ok(()) => line(out, "OK"),
            Err(e) => line(out, e),
        },
        Step::Reassign { from, to } => match control::reassign(shared, from, to, now) {
            Ok(()) => line(out, "OK"),
            Err(e) => line(out, &e),
        },
        Step::Automove(mode) => {
            shared.engine.set_automove(mode != 0);
            line(out, "OK");
        }
        Step::MetaDump(ref classes) => crate::stats::metadump(classes.as_deref(), shared, now, out),
        Step::Previous {
            idx,
            key_off,
            key_len,
            noreply,
        }
        | Step::Vector {
            idx,
            key_off,
            key_len,
            noreply,
        } => {
            if !noreply {
                let r = &res.results[idx as usize];
                let key = &rbuf[key_off as usize..(key_off + key_len) as usize];
                if matches!(step, Step::Previous { .. }) {
                    let prev = res.after.get(idx as usize).and_then(|a| a.previous);
                    let value = prev.as_ref().map_or(&[][..], |p| res.previous(p));
                    hkv_proto::text::previous::compose(out, key, r, prev.as_ref(), value);
                } else {
                    hkv_proto::text::vector::compose(out, key, r, res.value(r));
                }
            }
        }
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
