//! Meta commands (mg, ms, md, ma, mn, me): planning into engine requests, and replies.
//!
//! Flags arrive parsed once ([`MetaFlags`]); every flag memcached 1.6 documents is served
//! (docs/protocol.md). Return flags are echoed in request order, then `Z`, `X` and `W`, as
//! memcached writes them.

use std::io::Write;

use bumpalo::Bump;
use hkv_engine::{hit, Meta, Op, Request, Response, Responses};
use hkv_proto::text::{decode_key, MetaCmd, MetaFlags};

use crate::reply::{error_line, line, unix_now};
use crate::step::{Echo, MetaKind, MetaStep, Step};

use hkv_proto::errors::{meta::BAD_KEY, BAD_FORMAT};

/// Plans one meta command. Always returns false (no barrier).
pub(crate) fn plan_meta<'a>(
    m: MetaCmd<'a>,
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
            return if hkv_proto::valid_key(token) {
                Ok(token)
            } else {
                Err(BAD_FORMAT)
            };
        }
        let mut k = [0u8; hkv_proto::MAX_KEY_LEN];
        match decode_key(token, &mut k) {
            Some(n) => Ok(keys.alloc_slice_copy(&k[..n])),
            None => Err(BAD_KEY),
        }
    };
    let (kind, token, f) = match &m {
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
        MetaCmd::Get { key, flags } => (MetaKind::Get, *key, *flags),
        MetaCmd::Set { key, flags, .. } => (MetaKind::Set, *key, *flags),
        MetaCmd::Delete { key, flags } => (MetaKind::Delete, *key, *flags),
        MetaCmd::Arith { key, flags } => (MetaKind::Arith, *key, *flags),
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
    let req = match plan_request(&m, key, &f) {
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
        unless_cas: if kind == MetaKind::Get {
            f.compare_cas
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
            meta.no_bump = f.no_bump;
            meta.recache = f.recache;
            meta.vivify = f.vivify;
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
            meta.binary_key = f.base64;
            let flags = f.client_flags.unwrap_or(0);
            let ttl = f.ttl.unwrap_or(0);
            let op = match f.mode.unwrap_or(b'S') {
                b'S' => Op::Set,
                b'E' => Op::Add,
                b'R' => Op::Replace,
                b'A' => Op::Append,
                b'P' => Op::Prepend,
                _ => return Err(hkv_proto::errors::meta::MS_MODE),
            };
            meta.invalidate = f.invalidate;
            meta.previous = f.previous;
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
                Some(_) => return Err(hkv_proto::errors::meta::MA_MODE),
            };
            if let Some(ttl) = f.vivify {
                req.initial = Some(f.initial.unwrap_or(0));
                req.exptime = ttl;
            }
            meta.ttl = f.ttl;
            Request {
                cas: f.compare_cas.unwrap_or(0),
                meta,
                ..req
            }
        }
        MetaCmd::Noop | MetaCmd::Debug { .. } => unreachable!("planned by plan_meta"),
    })
}

fn encode_base64(raw: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(raw)
}

fn ttl_left(expiry: u32, now: u32) -> i64 {
    if expiry == 0 {
        -1
    } else {
        i64::from(expiry.saturating_sub(now))
    }
}

fn token(rbuf: &[u8], (off, len): (u32, u32)) -> &[u8] {
    &rbuf[off as usize..(off + len) as usize]
}

/// What the return flags report about the item the command found or left.
struct Found {
    flags: u32,
    cas: u64,
    len: u32,
    expiry: u32,
    atime: u32,
    bits: u8,
}

/// Writes " <flag><value>" for each returned flag in request order, then Z, X and W.
fn ret_flags(out: &mut Vec<u8>, e: &Echo, rbuf: &[u8], found: Option<&Found>, now: u32) {
    for &l in &e.ret[..e.ret_len as usize] {
        match (l, found) {
            (b'O', _) => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(token(rbuf, e.opaque));
            }
            (b'k', _) => {
                out.extend_from_slice(b" k");
                let stored_binary = found.is_some_and(|i| i.bits & hit::BINARY_KEY != 0);
                if stored_binary && !e.base64 {
                    // Stored with `b`, asked for by its raw bytes: memcached returns the
                    // key encoded, as it was stored.
                    out.extend_from_slice(encode_base64(token(rbuf, e.key)).as_bytes());
                } else {
                    out.extend_from_slice(token(rbuf, e.key));
                }
                if e.base64 || stored_binary {
                    out.extend_from_slice(b" b");
                }
            }
            (b'c', Some(i)) => {
                let _ = write!(out, " c{}", i.cas);
            }
            (b'f', Some(i)) => {
                let _ = write!(out, " f{}", i.flags);
            }
            (b's', Some(i)) => {
                let _ = write!(out, " s{}", i.len);
            }
            (b't', Some(i)) => {
                let _ = write!(out, " t{}", ttl_left(i.expiry, now));
            }
            (b'h', Some(i)) => {
                let _ = write!(out, " h{}", u8::from(i.bits & hit::FETCHED != 0));
            }
            (b'l', Some(i)) => {
                let _ = write!(out, " l{}", now.saturating_sub(i.atime));
            }
            _ => {}
        }
    }
    if let Some(i) = found {
        if i.bits & hit::WON_ELSEWHERE != 0 {
            out.extend_from_slice(b" Z");
        }
        if i.bits & hit::STALE != 0 {
            out.extend_from_slice(b" X");
        }
        if i.bits & hit::WIN != 0 {
            out.extend_from_slice(b" W");
        }
    }
}

pub(crate) fn write(
    m: &MetaStep,
    rbuf: &[u8],
    res: &Responses,
    class_of: impl Fn(usize) -> usize,
    out: &mut Vec<u8>,
) {
    let now = unix_now();
    match m {
        MetaStep::Noop => line(out, "MN"),
        MetaStep::Debug { idx, key, base64 } => match res.results[*idx as usize] {
            Response::Value {
                cas,
                len,
                expiry,
                atime,
                bits,
                ..
            } => {
                // The key as stored: its raw bytes, or base64 if it was stored with `b`.
                let mut raw = [0u8; hkv_proto::MAX_KEY_LEN];
                let sent = token(rbuf, *key);
                let key: &[u8] = match base64.then(|| decode_key(sent, &mut raw)).flatten() {
                    Some(n) => &raw[..n],
                    None => sent,
                };
                let size = hkv_store_size(key.len(), len as usize);
                out.extend_from_slice(b"ME ");
                if bits & hit::BINARY_KEY != 0 {
                    out.extend_from_slice(encode_base64(key).as_bytes());
                } else {
                    out.extend_from_slice(key);
                }
                // memcached prints exptime minus now: minus the TTL left.
                let exp = if expiry == 0 {
                    -1
                } else {
                    -ttl_left(expiry, now)
                };
                let _ = write!(
                    out,
                    " exp={exp} la={} cas={cas} fetch={} cls={} size={size}\r\n",
                    now.saturating_sub(atime),
                    if bits & hit::FETCHED != 0 {
                        "yes"
                    } else {
                        "no"
                    },
                    class_of(size),
                );
            }
            _ => line(out, "EN"),
        },
        MetaStep::Reply {
            kind,
            idx,
            echo,
            unless_cas,
        } => write_reply(
            *kind,
            &res.results[*idx as usize],
            res,
            *idx,
            echo,
            *unless_cas,
            rbuf,
            now,
            out,
        ),
    }
}

/// An item's size in memory as `me` reports it: header, key and value.
fn hkv_store_size(key_len: usize, value_len: usize) -> usize {
    hkv_engine::ITEM_HEADER_BYTES + key_len + value_len
}

#[allow(clippy::too_many_arguments)]
fn write_reply(
    kind: MetaKind,
    r: &Response,
    res: &Responses,
    idx: u32,
    echo: &Echo,
    unless_cas: Option<u64>,
    rbuf: &[u8],
    now: u32,
    out: &mut Vec<u8>,
) {
    let after = res.after.get(idx as usize).copied().unwrap_or_default();
    let written = Found {
        flags: 0,
        cas: after.cas,
        len: after.len,
        expiry: after.expiry,
        atime: now,
        bits: 0,
    };
    let code: &str = match (kind, r) {
        (
            MetaKind::Get,
            Response::Value {
                flags,
                cas,
                len,
                expiry,
                atime,
                bits,
                ..
            },
        ) => {
            let found = Found {
                flags: *flags,
                cas: *cas,
                len: *len,
                expiry: *expiry,
                atime: *atime,
                bits: *bits,
            };
            if echo.value && unless_cas != Some(*cas) {
                let v = res.value(r);
                let _ = write!(out, "VA {}", v.len());
                ret_flags(out, echo, rbuf, Some(&found), now);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(v);
                out.extend_from_slice(b"\r\n");
                return;
            }
            // mg's q hides only the EN of a miss.
            out.extend_from_slice(b"HD");
            ret_flags(out, echo, rbuf, Some(&found), now);
            out.extend_from_slice(b"\r\n");
            return;
        }
        (MetaKind::Get, _) => {
            if !echo.quiet {
                // memcached echoes k and O on a miss too.
                out.extend_from_slice(b"EN");
                ret_flags(out, echo, rbuf, None, now);
                out.extend_from_slice(b"\r\n");
            }
            return;
        }
        (MetaKind::Arith, Response::Number(n)) => {
            // memcached answers a counter that `N` created even under q.
            if echo.quiet && !after.created {
                return;
            }
            if echo.value {
                let text = n.to_string();
                let _ = write!(out, "VA {}", text.len());
                ret_flags(out, echo, rbuf, Some(&written), now);
                out.extend_from_slice(b"\r\n");
                line(out, &text);
                return;
            }
            "HD"
        }
        (_, Response::Stored | Response::Deleted) => "HD",
        (_, Response::NotStored) => "NS",
        (_, Response::Exists) => "EX",
        (_, Response::NotFound | Response::Miss) => "NF",
        (_, other) => {
            line(out, error_line(other));
            return;
        }
    };
    if let (Some(p), "HD", MetaKind::Set | MetaKind::Delete) = (after.previous, code, kind) {
        // `G`: the value replaced or deleted, as `mg v` answers a value (f and s describe
        // it; c and t the item left behind). A value is never suppressed by q.
        let prev = Found {
            flags: p.flags,
            len: p.len,
            ..written
        };
        let _ = write!(out, "VA {}", p.len);
        ret_flags(out, echo, rbuf, Some(&prev), now);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(res.previous(&p));
        out.extend_from_slice(b"\r\n");
        return;
    }
    // q: the nominal reply (HD) is suppressed; failures are always sent.
    if echo.quiet && code == "HD" && !after.created {
        return;
    }
    out.extend_from_slice(code.as_bytes());
    // ms reports `c0` when it stored nothing; the others echo only k and O then.
    let found = (code == "HD" || kind == MetaKind::Set).then_some(&written);
    ret_flags(out, echo, rbuf, found, now);
    out.extend_from_slice(b"\r\n");
}
