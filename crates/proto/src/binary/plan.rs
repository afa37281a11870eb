//! PP of the binary protocol: one parsed request into engine requests and reply steps.

use hkv_types::{Op, Request};

use super::{op, status, BinRequest};
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
pub enum Flow {
    Continue,
    /// Stop parsing until the batch has run (flush).
    Barrier,
    /// Close once replies are sent (quit).
    Close,
}

/// Turns one binary request into engine requests and steps.
pub fn plan<'a>(
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
            // A CAS in the header turns set, add and replace into compare-and-swap (memcached
            // 1.6: an add with a CAS on a missing key is "Not found", not stored).
            let op = if r.cas != 0 { Op::Cas } else { base };
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
            // As memcached, a CAS in the header must match the item's.
            let req = Request {
                cas: r.cas,
                ..Request::store(op, r.key, r.value, 0, 0)
            };
            engine(req, BinKind::Store, steps);
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
            // A CAS in the header must match the counter's (a miss still creates it).
            let req = Request {
                cas: r.cas,
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
            steps.push(Step::BinFlush {
                delay: exptime(0),
                opaque: r.opaque,
                quiet: q,
            });
            return Flow::Barrier;
        }
        op::STAT => steps.push(Step::BinStats {
            opaque: r.opaque,
            group: r.key.to_vec(),
        }),
        _ => steps.push(Step::Bin(BinStep::Status {
            opcode: r.opcode,
            status: status::UNKNOWN_COMMAND,
            opaque: r.opaque,
        })),
    }
    Flow::Continue
}
