//! Binary protocol connections: requests into engine batches, results into binary responses.

use hkv_engine::{Op, Request, Response, Responses};
use hkv_proto::binary::{op, status, write_header, write_simple, BinRequest};

use crate::shared::Shared;
use crate::step::{BinKind, BinStep, Step};

fn quiet(opcode: u8) -> bool {
    matches!(
        opcode,
        op::GETQ
            | op::GETKQ
            | op::SETQ
            | op::ADDQ
            | op::REPLACEQ
            | op::DELETEQ
            | op::INCREMENTQ
            | op::DECREMENTQ
            | op::QUITQ
            | op::FLUSHQ
            | op::APPENDQ
            | op::PREPENDQ
            | op::GATQ
            | op::GATKQ
    )
}

/// What planning one request asks of the connection.
pub(crate) enum Flow {
    Continue,
    /// Stop parsing until the batch has run (flush).
    Barrier,
    /// Close once replies are sent (quit).
    Close,
}

/// Turns one binary request into engine requests and steps.
pub(crate) fn plan<'a>(
    r: BinRequest<'a>,
    buf: &'a [u8],
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
) -> Flow {
    let q = quiet(r.opcode);
    let key_off = if r.key.is_empty() {
        0
    } else {
        (r.key.as_ptr() as usize - buf.as_ptr() as usize) as u32
    };
    let mut engine = |req: Request<'a>, kind: BinKind, steps: &mut Vec<Step>| {
        batch.push(req);
        steps.push(Step::Bin(BinStep::Engine {
            kind,
            idx: (batch.len() - 1) as u32,
            opcode: r.opcode,
            opaque: r.opaque,
            quiet: q,
            key_off,
            key_len: r.key.len() as u32,
        }));
    };
    // Unsigned on the wire, as memcached reads it: 0xffffffff is a Unix time in 2106, not -1
    // (found with spymemcached, whose binary set of exp -1 memcached keeps).
    let exptime = |at: usize| r.extra_u32(at).map_or(0, i64::from);
    match r.opcode {
        op::GET | op::GETQ | op::GETK | op::GETKQ => {
            let with_key = matches!(r.opcode, op::GETK | op::GETKQ);
            engine(Request::gets(r.key), BinKind::Get { with_key }, steps);
        }
        op::GAT | op::GATQ | op::GATK | op::GATKQ => {
            let with_key = matches!(r.opcode, op::GATK | op::GATKQ);
            let req = Request {
                exptime: exptime(0),
                ..Request::new(Op::Gats, r.key)
            };
            engine(req, BinKind::Get { with_key }, steps);
        }
        op::SET | op::SETQ | op::ADD | op::ADDQ | op::REPLACE | op::REPLACEQ => {
            let flags = r.extra_u32(0).unwrap_or(0);
            let base = match r.opcode {
                op::SET | op::SETQ => Op::Set,
                op::ADD | op::ADDQ => Op::Add,
                _ => Op::Replace,
            };
            // A CAS in the header turns set and replace into compare-and-swap.
            let op = if r.cas != 0 && base != Op::Add {
                Op::Cas
            } else {
                base
            };
            let req = Request {
                cas: r.cas,
                ..Request::store(op, r.key, r.value, flags, exptime(4))
            };
            engine(req, BinKind::Store, steps);
        }
        op::APPEND | op::APPENDQ | op::PREPEND | op::PREPENDQ => {
            let op = if matches!(r.opcode, op::APPEND | op::APPENDQ) {
                Op::Append
            } else {
                Op::Prepend
            };
            engine(
                Request::store(op, r.key, r.value, 0, 0),
                BinKind::Store,
                steps,
            );
        }
        op::DELETE | op::DELETEQ => {
            let req = Request {
                cas: r.cas,
                ..Request::delete(r.key)
            };
            engine(req, BinKind::Delete, steps);
        }
        op::INCREMENT | op::INCREMENTQ | op::DECREMENT | op::DECREMENTQ => {
            let delta = r.extra_u64(0).unwrap_or(0);
            let initial = r.extra_u64(8).unwrap_or(0);
            let exp = r.extra_u32(16).unwrap_or(u32::MAX);
            let base = if matches!(r.opcode, op::INCREMENT | op::INCREMENTQ) {
                Request::incr(r.key, delta)
            } else {
                Request::decr(r.key, delta)
            };
            // Expiration 0xffffffff means "do not create on a miss".
            let req = Request {
                initial: (exp != u32::MAX).then_some(initial),
                exptime: if exp == u32::MAX { 0 } else { i64::from(exp) },
                ..base
            };
            engine(req, BinKind::Arith, steps);
        }
        op::TOUCH => {
            // memcached answers TOUCH like a GAT without the value (flags and CAS).
            let req = Request {
                exptime: exptime(0),
                ..Request::new(Op::Gats, r.key)
            };
            engine(req, BinKind::Touch, steps);
        }
        op::NOOP => steps.push(Step::Bin(BinStep::Status {
            opcode: op::NOOP,
            status: status::SUCCESS,
            opaque: r.opaque,
        })),
        op::VERSION => steps.push(Step::Bin(BinStep::Version { opaque: r.opaque })),
        op::QUIT | op::QUITQ => {
            if r.opcode == op::QUIT {
                steps.push(Step::Bin(BinStep::Status {
                    opcode: op::QUIT,
                    status: status::SUCCESS,
                    opaque: r.opaque,
                }));
            }
            return Flow::Close;
        }
        op::FLUSH | op::FLUSHQ => {
            steps.push(Step::Bin(BinStep::Flush {
                delay: exptime(0),
                opaque: r.opaque,
                quiet: q,
            }));
            return Flow::Barrier;
        }
        op::STAT => steps.push(Step::Bin(BinStep::Stat {
            opaque: r.opaque,
            group: r.key.to_vec(),
        })),
        _ => steps.push(Step::Bin(BinStep::Status {
            opcode: r.opcode,
            status: status::UNKNOWN_COMMAND,
            opaque: r.opaque,
        })),
    }
    Flow::Continue
}

pub(crate) fn write(
    step: &BinStep,
    rbuf: &[u8],
    res: &Responses,
    shared: &Shared,
    now: u32,
    out: &mut Vec<u8>,
) {
    match *step {
        BinStep::Status {
            opcode,
            status,
            opaque,
        } => write_simple(out, opcode, status, opaque, 0, b""),
        BinStep::Version { opaque } => write_simple(
            out,
            op::VERSION,
            status::SUCCESS,
            opaque,
            0,
            crate::reply::VERSION.as_bytes(),
        ),
        BinStep::Text {
            opcode,
            status,
            opaque,
            body,
        } => write_simple(out, opcode, status, opaque, 0, body),
        BinStep::Flush {
            delay,
            opaque,
            quiet,
        } => {
            crate::control::flush_all(shared, delay, now);
            if !quiet {
                write_simple(out, op::FLUSH, status::SUCCESS, opaque, 0, b"");
            }
        }
        BinStep::Stat { opaque, ref group } => {
            let args: Vec<Vec<u8>> = group
                .split(|&b| b == b' ')
                .filter(|a| !a.is_empty())
                .map(<[u8]>::to_vec)
                .collect();
            let pairs = match crate::stats::stats_reply(&args, shared, now) {
                Ok(crate::stats::StatsReply::Pairs(p)) => p,
                // memcached answers a binary reset with the terminating packet alone.
                Ok(crate::stats::StatsReply::Reset) => Vec::new(),
                Ok(crate::stats::StatsReply::Raw(_)) | Err(_) => {
                    write_simple(out, op::STAT, status::KEY_ENOENT, opaque, 0, b"");
                    return;
                }
            };
            for (k, v) in &pairs {
                let (k, v) = (k.as_bytes(), v.as_bytes());
                write_header(
                    out,
                    op::STAT,
                    k.len(),
                    0,
                    status::SUCCESS,
                    k.len() + v.len(),
                    opaque,
                    0,
                );
                out.extend_from_slice(k);
                out.extend_from_slice(v);
            }
            write_header(out, op::STAT, 0, 0, status::SUCCESS, 0, opaque, 0);
        }
        BinStep::Engine {
            kind,
            idx,
            opcode,
            opaque,
            quiet,
            key_off,
            key_len,
        } => {
            let r = &res.results[idx as usize];
            let cas = res.after.get(idx as usize).map_or(0, |a| a.cas);
            let key = &rbuf[key_off as usize..(key_off + key_len) as usize];
            let fail = |out: &mut Vec<u8>, st: u16| write_simple(out, opcode, st, opaque, 0, b"");
            match (kind, *r) {
                (BinKind::Get { with_key }, Response::Value { flags, cas, .. }) => {
                    let value = res.value(r);
                    let k: &[u8] = if with_key { key } else { b"" };
                    write_header(
                        out,
                        opcode,
                        k.len(),
                        4,
                        status::SUCCESS,
                        4 + k.len() + value.len(),
                        opaque,
                        cas,
                    );
                    out.extend_from_slice(&flags.to_be_bytes());
                    out.extend_from_slice(k);
                    out.extend_from_slice(value);
                }
                (BinKind::Touch, Response::Value { flags, cas, .. }) => {
                    write_header(out, opcode, 0, 4, status::SUCCESS, 4, opaque, cas);
                    out.extend_from_slice(&flags.to_be_bytes());
                }
                (BinKind::Get { with_key }, _) => {
                    if quiet {
                        return;
                    }
                    if with_key {
                        // memcached returns the key, not a message, on a GETK miss.
                        write_header(
                            out,
                            opcode,
                            key.len(),
                            0,
                            status::KEY_ENOENT,
                            key.len(),
                            opaque,
                            0,
                        );
                        out.extend_from_slice(key);
                    } else {
                        fail(out, status::KEY_ENOENT);
                    }
                }
                (BinKind::Arith, Response::Number(n)) => {
                    if !quiet {
                        write_header(out, opcode, 0, 0, status::SUCCESS, 8, opaque, cas);
                        out.extend_from_slice(&n.to_be_bytes());
                    }
                }
                (_, Response::Stored | Response::Deleted | Response::Touched) => {
                    if !quiet {
                        write_simple(out, opcode, status::SUCCESS, opaque, cas, b"");
                    }
                }
                (BinKind::Store, Response::NotStored) => {
                    // add on an existing key: exists; replace on a missing one: not found;
                    // append/prepend on a missing one: not stored.
                    let st = match opcode {
                        op::ADD | op::ADDQ => status::KEY_EEXISTS,
                        op::REPLACE | op::REPLACEQ => status::KEY_ENOENT,
                        _ => status::NOT_STORED,
                    };
                    fail(out, st);
                }
                (_, Response::Exists) => fail(out, status::KEY_EEXISTS),
                (_, Response::NotFound | Response::Miss) => fail(out, status::KEY_ENOENT),
                (_, Response::NonNumeric) => fail(out, status::DELTA_BADVAL),
                (_, Response::TooLarge) => fail(out, status::E2BIG),
                (_, Response::OutOfMemory) => fail(out, status::ENOMEM),
                (_, _) => fail(out, status::EINVAL),
            }
        }
    }
}
