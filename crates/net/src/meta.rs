//! Meta commands (mg, ms, md, ma, mn, me): planning into engine requests, and replies.
//!
//! Supported flags are listed in docs/protocol.md. A flag this server does not implement is
//! answered with the spec's "CLIENT_ERROR invalid flag", never silently ignored.

use std::io::Write;

use hkv_engine::{Op, Request, Response, Responses};
use hkv_proto::text::{MetaCmd, MetaFlag};

use crate::respond::{line, Step};

const INVALID_FLAG: &str = "CLIENT_ERROR invalid flag";
const INVALID_OR_DUP: &str = "CLIENT_ERROR invalid or duplicate flag";
const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";

/// Flags memcached gives a meaning for this command that hkv does not implement yet. They are
/// refused with the command's invalid-flag error rather than ignored, so a client never
/// believes it got a behaviour it did not (docs/protocol.md lists them).
const MG_UNSUPPORTED: &[u8] = b"bhlNRu";
const MS_UNSUPPORTED: &[u8] = b"bIcNs";
const MD_UNSUPPORTED: &[u8] = b"bI";
const MA_UNSUPPORTED: &[u8] = b"bNJTCtc";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetaKind {
    Get,
    Set,
    Delete,
    Arith,
}

/// A flag to echo back: its letter and, for `O`, the token's place in the read buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ret {
    letter: u8,
    off: u32,
    len: u32,
}

#[derive(Debug)]
pub(crate) enum MetaStep {
    Noop,
    Reply {
        kind: MetaKind,
        idx: u32,
        key_off: u32,
        key_len: u32,
        ret: Vec<Ret>,
        quiet: bool,
        value: bool,
        /// `mg C<cas>`: drop the value if the item's CAS matches.
        unless_cas: Option<u64>,
    },
    Debug {
        idx: u32,
        key_off: u32,
        key_len: u32,
    },
}

fn num(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn signed(v: &[u8]) -> Option<i64> {
    match v.split_first() {
        Some((b'-', rest)) => num(rest).map(|n| -(n as i64)),
        _ => num(v).map(|n| n as i64),
    }
}

/// Plans one meta command. Always returns false (no barrier).
pub(crate) fn plan_meta<'a>(
    m: MetaCmd<'a>,
    buf: &'a [u8],
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
) -> bool {
    let off = |k: &[u8]| (k.as_ptr() as usize - buf.as_ptr() as usize) as u32;
    let (kind, key, flags, unsupported): (MetaKind, &[u8], &[MetaFlag<'_>], &[u8]) = match &m {
        MetaCmd::Noop => {
            steps.push(Step::Meta(MetaStep::Noop));
            return false;
        }
        MetaCmd::Debug { key } => {
            batch.push(Request::gets(key));
            steps.push(Step::Meta(MetaStep::Debug {
                idx: (batch.len() - 1) as u32,
                key_off: off(key),
                key_len: key.len() as u32,
            }));
            return false;
        }
        MetaCmd::Get { key, flags } => (MetaKind::Get, key, flags, MG_UNSUPPORTED),
        MetaCmd::Set { key, flags, .. } => (MetaKind::Set, key, flags, MS_UNSUPPORTED),
        MetaCmd::Delete { key, flags } => (MetaKind::Delete, key, flags, MD_UNSUPPORTED),
        MetaCmd::Arith { key, flags } => (MetaKind::Arith, key, flags, MA_UNSUPPORTED),
    };
    let fail = |steps: &mut Vec<Step>, e: &'static str| steps.push(Step::Text(e));
    if flags.iter().any(|f| unsupported.contains(&f.letter)) {
        let e = match kind {
            MetaKind::Delete | MetaKind::Arith => INVALID_OR_DUP,
            _ => INVALID_FLAG,
        };
        fail(steps, e);
        return false;
    }
    if !hkv_proto::valid_key(key) {
        fail(steps, BAD_FORMAT);
        return false;
    }
    let mut ret = Vec::new();
    for f in flags {
        // Which flags a reply echoes: mg all of these, the others only k and O.
        let echoed: &[u8] = if kind == MetaKind::Get {
            b"cfkOst"
        } else {
            b"kO"
        };
        if echoed.contains(&f.letter) {
            ret.push(Ret {
                letter: f.letter,
                off: if f.value.is_empty() { 0 } else { off(f.value) },
                len: f.value.len() as u32,
            });
        }
    }
    let get = |l: u8| flags.iter().find(|f| f.letter == l).map(|f| f.value);
    let quiet = get(b'q').is_some();
    let mut unless_cas = None;
    let req = match m {
        MetaCmd::Get { key, .. } => {
            if let Some(c) = get(b'C') {
                let Some(c) = num(c) else {
                    fail(steps, BAD_FORMAT);
                    return false;
                };
                unless_cas = Some(c);
            }
            match get(b'T') {
                Some(t) => {
                    let Some(t) = signed(t) else {
                        fail(steps, BAD_FORMAT);
                        return false;
                    };
                    Request {
                        exptime: t,
                        ..Request::new(Op::Gats, key)
                    }
                }
                None => Request::gets(key),
            }
        }
        MetaCmd::Set { key, data, .. } => {
            let flag_val = match get(b'F').map(num) {
                None => 0,
                Some(Some(v)) if v <= u32::MAX as u64 => v as u32,
                Some(_) => {
                    fail(steps, BAD_FORMAT);
                    return false;
                }
            };
            let ttl = match get(b'T').map(signed) {
                None => 0,
                Some(Some(t)) => t,
                Some(None) => {
                    fail(steps, BAD_FORMAT);
                    return false;
                }
            };
            let mode = get(b'M').unwrap_or(b"S");
            let op = match mode {
                b"S" => Op::Set,
                b"E" => Op::Add,
                b"R" => Op::Replace,
                b"A" => Op::Append,
                b"P" => Op::Prepend,
                _ => {
                    fail(steps, "CLIENT_ERROR invalid mode for ms M token");
                    return false;
                }
            };
            match get(b'C') {
                Some(c) => {
                    // CAS in set and replace mode (both mean "replace this version").
                    let (Some(c), Op::Set | Op::Replace) = (num(c), op) else {
                        fail(steps, INVALID_FLAG);
                        return false;
                    };
                    Request::cas(key, data, flag_val, ttl, c)
                }
                None => Request::store(op, key, data, flag_val, ttl),
            }
        }
        MetaCmd::Delete { key, .. } => match get(b'C').map(num) {
            None => Request::delete(key),
            Some(Some(c)) => Request {
                cas: c,
                ..Request::delete(key)
            },
            Some(None) => {
                fail(steps, BAD_FORMAT);
                return false;
            }
        },
        MetaCmd::Arith { key, .. } => {
            let delta = match get(b'D').map(num) {
                None => 1,
                Some(Some(d)) => d,
                Some(None) => {
                    fail(steps, "CLIENT_ERROR invalid numeric delta argument");
                    return false;
                }
            };
            match get(b'M') {
                None | Some(b"I" | b"+") => Request::incr(key, delta),
                Some(b"D" | b"-") => Request::decr(key, delta),
                Some(_) => {
                    fail(steps, "CLIENT_ERROR invalid mode for ma M token");
                    return false;
                }
            }
        }
        MetaCmd::Noop | MetaCmd::Debug { .. } => unreachable!("handled above"),
    };
    batch.push(req);
    steps.push(Step::Meta(MetaStep::Reply {
        kind,
        idx: (batch.len() - 1) as u32,
        key_off: off(key),
        key_len: key.len() as u32,
        ret,
        quiet,
        value: get(b'v').is_some(),
        unless_cas,
    }));
    false
}

fn ttl_left(expiry: u32, now: u32) -> i64 {
    if expiry == 0 {
        -1
    } else {
        expiry.saturating_sub(now) as i64
    }
}

/// Writes " <flag><value>" for each returned flag, in request order.
fn ret_flags(out: &mut Vec<u8>, ret: &[Ret], rbuf: &[u8], key: &[u8], r: &Response, now: u32) {
    for f in ret {
        match f.letter {
            b'O' => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(&rbuf[f.off as usize..(f.off + f.len) as usize]);
            }
            b'k' => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(key);
            }
            b'c' | b'f' | b's' | b't' => {
                if let Response::Value {
                    flags,
                    cas,
                    len,
                    expiry,
                    ..
                } = *r
                {
                    let _ = match f.letter {
                        b'c' => write!(out, " c{cas}"),
                        b'f' => write!(out, " f{flags}"),
                        b's' => write!(out, " s{len}"),
                        _ => write!(out, " t{}", ttl_left(expiry, now)),
                    };
                }
            }
            _ => {}
        }
    }
}

pub(crate) fn write(m: &MetaStep, rbuf: &[u8], res: &Responses, out: &mut Vec<u8>) {
    let now = crate::worker::unix_now();
    match m {
        MetaStep::Noop => line(out, "MN"),
        MetaStep::Debug {
            idx,
            key_off,
            key_len,
        } => {
            let r = &res.results[*idx as usize];
            let key = &rbuf[*key_off as usize..(*key_off + *key_len) as usize];
            match *r {
                Response::Value {
                    cas, len, expiry, ..
                } => {
                    out.extend_from_slice(b"ME ");
                    out.extend_from_slice(key);
                    let _ = write!(
                        out,
                        " exp={} cas={cas} size={}\r\n",
                        ttl_left(expiry, now),
                        len as usize + key.len()
                    );
                }
                _ => line(out, "EN"),
            }
        }
        MetaStep::Reply {
            kind,
            idx,
            key_off,
            key_len,
            ret,
            quiet,
            value,
            unless_cas,
        } => {
            let r = &res.results[*idx as usize];
            let key = &rbuf[*key_off as usize..(*key_off + *key_len) as usize];
            let code: &str = match (kind, r) {
                (MetaKind::Get, Response::Value { cas, .. }) => {
                    let send_value = *value && *unless_cas != Some(*cas);
                    if send_value {
                        let v = res.value(r);
                        let _ = write!(out, "VA {}", v.len());
                        ret_flags(out, ret, rbuf, key, r, now);
                        out.extend_from_slice(b"\r\n");
                        out.extend_from_slice(v);
                        out.extend_from_slice(b"\r\n");
                        return;
                    }
                    "HD"
                }
                (MetaKind::Get, _) => {
                    if !*quiet {
                        // memcached echoes k and O on a miss too.
                        out.extend_from_slice(b"EN");
                        ret_flags(out, ret, rbuf, key, r, now);
                        out.extend_from_slice(b"\r\n");
                    }
                    return;
                }
                (MetaKind::Arith, Response::Number(n)) => {
                    if *quiet {
                        // q hides the reply to an arithmetic that changed an item.
                        return;
                    }
                    if *value {
                        let text = n.to_string();
                        let _ = write!(out, "VA {}", text.len());
                        ret_flags(out, ret, rbuf, key, r, now);
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
                (_, Response::NonNumeric) => {
                    line(
                        out,
                        "CLIENT_ERROR cannot increment or decrement non-numeric value",
                    );
                    return;
                }
                (_, Response::TooLarge) => {
                    line(out, "SERVER_ERROR object too large for cache");
                    return;
                }
                (_, Response::OutOfMemory) => {
                    line(out, "SERVER_ERROR out of memory storing object");
                    return;
                }
                (_, _) => {
                    line(out, "SERVER_ERROR unexpected engine response");
                    return;
                }
            };
            // q: the nominal reply (HD) is suppressed; failures are always sent.
            if *quiet && code == "HD" {
                return;
            }
            out.extend_from_slice(code.as_bytes());
            ret_flags(out, ret, rbuf, key, r, now);
            out.extend_from_slice(b"\r\n");
        }
    }
}
