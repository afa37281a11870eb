//! PP of the meta commands (mg, ms, md, ma, mn, me): one parsed command into engine
//! requests and a reply step.
//!
//! Flags arrive parsed once ([`MetaFlags`]); every flag memcached 1.6 documents is served
//! (docs/protocol.md).

use bumpalo::Bump;
use hkv_types::{Meta, Op, ReadStats, Request};

use crate::errors::{meta::BAD_KEY, BAD_FORMAT};
use crate::step::{Echo, MetaKind, MetaStep, Step};
use crate::text::{decode_key, MetaCmd, MetaFlags};

/// Plans one meta command. Always returns false (no barrier).
pub fn plan_meta<'a>(
    m: &MetaCmd<'a>,
    buf: &'a [u8],
    keys: &'a Bump,
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
) -> bool {
    let off = |k: &[u8]| (k.as_ptr() as usize - buf.as_ptr() as usize) as u32;
    let span = |k: &[u8]| (off(k), k.len() as u32);
    // The engine's key: the token itself, or its base64 decoding kept for the pass.
    let engine_key = |token: &'a [u8], base64: bool| -> Result<&'a [u8], &'static str> {
        if !base64 {
            return if crate::valid_key(token) {
                Ok(token)
            } else {
                Err(BAD_FORMAT)
            };
        }
        let mut k = [0u8; crate::MAX_KEY_LEN];
        match decode_key(token, &mut k) {
            Some(n) => Ok(keys.alloc_slice_copy(&k[..n])),
            None => Err(BAD_KEY),
        }
    };
    let (kind, token, f) = match m {
        MetaCmd::Noop => {
            steps.push(Step::Meta(MetaStep::Noop));
            return false;
        }
        MetaCmd::Debug { key, base64 } => {
            match engine_key(key, *base64) {
                Ok(k) => {
                    batch.push(Request {
                        meta: Meta {
                            no_bump: true,
                            read_stats: ReadStats::Debug,
                            ..Meta::default()
                        },
                        ..Request::gets(k)
                    });
                    steps.push(Step::Meta(MetaStep::Debug {
                        idx: (batch.len() - 1) as u32,
                        key: span(key),
                        base64: *base64,
                    }));
                }
                // me words every bad key alike.
                Err(_) => steps.push(Step::Text(BAD_FORMAT)),
            }
            return false;
        }
        MetaCmd::Get { key, flags } => (MetaKind::Get, *key, flags),
        MetaCmd::Set { key, flags, .. } => (MetaKind::Set, *key, flags),
        MetaCmd::Delete { key, flags } => (MetaKind::Delete, *key, flags),
        MetaCmd::Arith { key, flags } => (MetaKind::Arith, *key, flags),
    };
    let key = match engine_key(token, f.base64) {
        Ok(k) => k,
        Err(e) => {
            steps.push(Step::Text(e));
            return false;
        }
    };
    let mut echo = Echo {
        ret: [0; 17],
        ret_len: 0,
        key: span(token),
        opaque: f.opaque.map_or((0, 0), span),
        base64: f.base64,
        quiet: f.quiet,
        value: f.value,
        opaque_too_long: f.opaque_too_long,
    };
    for &l in f.returned() {
        // mg answers every return flag; the others only these.
        let echoed = kind == MetaKind::Get
            || l == b'k'
            || l == b'O'
            || (kind == MetaKind::Set && matches!(l, b'c' | b's'))
            // `G`: f and s describe the previous value (0 when there was none).
            || (f.previous && matches!(kind, MetaKind::Set | MetaKind::Delete) && matches!(l, b'f' | b's'))
            || (kind == MetaKind::Arith && matches!(l, b'c' | b't'));
        if echoed {
            echo.ret[echo.ret_len as usize] = l;
            echo.ret_len += 1;
        }
    }
    let req = match plan_request(m, key, f) {
        Ok(r) => r,
        Err(e) => {
            steps.push(Step::Text(e));
            return false;
        }
    };
    batch.push(req);
    steps.push(Step::Meta(MetaStep::Reply {
        kind,
        idx: (batch.len() - 1) as u32,
        echo,
        // C0 never matches, as a CAS of 0 never does elsewhere (with `-C` every item's is 0).
        unless_cas: if kind == MetaKind::Get {
            f.compare_cas.filter(|&c| c != 0)
        } else {
            None
        },
    }));
    false
}

/// The engine request of mg, ms, md or ma, from its typed flags.
fn plan_request<'a>(
    m: &MetaCmd<'a>,
    key: &'a [u8],
    f: &MetaFlags<'a>,
) -> Result<Request<'a>, &'static str> {
    let mut meta = Meta {
        new_cas: f.new_cas,
        ..Meta::default()
    };
    Ok(match *m {
        MetaCmd::Get { .. } => {
            meta.no_bump = f.no_bump || (f.opaque_too_long && f.bumps_late);
            meta.recache = f.recache;
            meta.flag_order = f.order;
            meta.vivify = f.vivify;
            meta.recache_token = !f.opaque_too_long;
            meta.read_stats = ReadStats::MetaGet;
            if f.vivify.is_none() {
                // E only matters when mg creates the item.
                meta.new_cas = None;
            }
            let base = match f.ttl {
                Some(t) => Request::new(Op::Gats, key).with_exptime(t),
                None => Request::gets(key),
            };
            Request { meta, ..base }
        }
        MetaCmd::Set { data, .. } => {
            // The item keeps `b` where it is the request's own (not an append's join: the
            // engine drops it there, as memcached's append does).
            meta.binary_key = f.base64;
            let flags = f.client_flags.unwrap_or(0);
            let ttl = f.ttl.unwrap_or(0);
            let op = match f.mode.unwrap_or(b'S') {
                b'S' => Op::Set,
                b'E' => Op::Add,
                b'R' => Op::Replace,
                b'A' => Op::Append,
                b'P' => Op::Prepend,
                _ => return Err(crate::errors::meta::MS_MODE),
            };
            meta.invalidate = f.invalidate;
            meta.previous = f.previous;
            meta.unlink_on_failure = true;
            if matches!(op, Op::Append | Op::Prepend) {
                meta.vivify = f.vivify;
            }
            let op = match (op, f.compare_cas) {
                (Op::Set | Op::Replace, Some(_)) => Op::Cas,
                (op, _) => op,
            };
            Request {
                cas: f.compare_cas.unwrap_or(0),
                meta,
                ..Request::store(op, key, data, flags, ttl)
            }
        }
        MetaCmd::Delete { .. } => {
            meta.invalidate = f.invalidate;
            meta.strip_value = f.strip_value;
            meta.previous = f.previous;
            meta.cas_given = f.compare_cas.is_some();
            if f.invalidate || f.strip_value {
                meta.ttl = f.ttl;
            }
            Request {
                cas: f.compare_cas.unwrap_or(0),
                // `md x` makes its empty item with these flags (memcached's `F`, default 0).
                flags: f.client_flags.unwrap_or(0),
                meta,
                ..Request::delete(key)
            }
        }
        MetaCmd::Arith { .. } => {
            let delta = f.delta.unwrap_or(1);
            let mut req = match f.mode {
                None | Some(b'I' | b'+') => Request::incr(key, delta),
                Some(b'D' | b'-') => Request::decr(key, delta),
                Some(_) => return Err(crate::errors::meta::MA_MODE),
            };
            if let Some(ttl) = f.vivify {
                req.initial = Some(f.initial.unwrap_or(0));
                req.exptime = ttl;
            }
            meta.ttl = f.ttl;
            meta.flag_order = f.order;
            Request {
                cas: f.compare_cas.unwrap_or(0),
                meta,
                ..req
            }
        }
        MetaCmd::Noop | MetaCmd::Debug { .. } => unreachable!("planned by plan_meta"),
    })
}
