//! WR of the binary protocol: engine results and server answers as response packets.

use hkv_types::{Response, Responses};

use super::{header, op, status, write_header, write_simple, HEADER_LEN};
use crate::output::Output;
use crate::step::{BinKind, BinStep};

/// WR of one binary reply built from the batch's results (`rbuf` holds the request's key).
pub fn compose(step: &BinStep, rbuf: &[u8], res: &Responses, out: &mut Output) {
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
                (
                    BinKind::Get { with_key },
                    Response::Value {
                        flags, cas, len, ..
                    },
                ) => {
                    let value_len = len as usize;
                    let k: &[u8] = if with_key { key } else { b"" };
                    // Header and flags (the extras) go out as one piece.
                    let mut h = [0u8; HEADER_LEN + 4];
                    h[..HEADER_LEN].copy_from_slice(&header(
                        opcode,
                        k.len(),
                        4,
                        status::SUCCESS,
                        4 + k.len() + value_len,
                        opaque,
                        cas,
                    ));
                    h[HEADER_LEN..].copy_from_slice(&flags.to_be_bytes());
                    out.extend_from_slice(&h);
                    out.extend_from_slice(k);
                    out.value(res, r);
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
                (BinKind::Arith, Response::OutOfMemory) => {
                    let msg = status::ARITH_ENOMEM.as_bytes();
                    write_header(out, opcode, 0, 0, status::ENOMEM, msg.len(), opaque, 0);
                    out.extend_from_slice(msg);
                }
                (_, Response::OutOfMemory) => fail(out, status::ENOMEM),
                (_, _) => fail(out, status::EINVAL),
            }
        }
    }
}

/// `flush_all`'s reply, once the flush has run (quiet: none).
pub fn flushed(out: &mut Vec<u8>, opaque: u32, quiet: bool) {
    if !quiet {
        write_simple(out, op::FLUSH, status::SUCCESS, opaque, 0, b"");
    }
}

/// A `stat` reply: one packet per pair, then the empty terminating one; `None` (a group the
/// server does not know) is memcached's KEY_ENOENT.
pub fn stats(out: &mut Vec<u8>, opaque: u32, pairs: Option<&[(String, String)]>) {
    let Some(pairs) = pairs else {
        write_simple(out, op::STAT, status::KEY_ENOENT, opaque, 0, b"");
        return;
    };
    for (k, v) in pairs {
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

#[cfg(test)]
mod tests {
    use crate::binary::{op, status, Flow};
    use crate::testkit::{bin_request as req, serve_binary, Model};

    #[test]
    fn quiet_commands_answer_only_failures_and_getk_misses_carry_the_key() {
        let mut m = Model::default();
        let mut input = req(op::SETQ, &[0, 0, 0, 9, 0, 0, 0, 0], b"k", b"vv");
        input.extend(req(op::ADDQ, &[0; 8], b"k", b"x"));
        input.extend(req(op::GETKQ, &[], b"nope", b""));
        input.extend(req(op::GETK, &[], b"nope", b""));
        input.extend(req(op::GET, &[], b"k", b""));
        input.extend(req(op::NOOP, &[], b"", b""));
        let (packets, flow) = serve_binary(&mut m, &input);
        assert!(matches!(flow, Flow::Continue));
        assert_eq!(
            packets,
            vec![
                (
                    op::ADDQ,
                    status::KEY_EEXISTS,
                    vec![],
                    b"Data exists for key.".to_vec()
                ),
                (op::GETK, status::KEY_ENOENT, b"nope".to_vec(), vec![]),
                (op::GET, status::SUCCESS, vec![], b"vv".to_vec()),
                (op::NOOP, status::SUCCESS, vec![], vec![]),
            ]
        );
    }

    #[test]
    fn counters_store_errors_and_unknown_opcodes() {
        let mut m = Model::default();
        // incr of a missing key with expiry 0xffffffff: not created.
        let mut extras = [0u8; 20];
        extras[7] = 5;
        extras[16..].copy_from_slice(&[0xff; 4]);
        let mut input = req(op::INCREMENT, &extras, b"n", b"");
        input.extend(req(op::REPLACE, &[0; 8], b"n", b"1"));
        input.extend(req(op::APPEND, &[], b"n", b"1"));
        input.extend(req(0x7e, &[], b"", b""));
        input.extend(req(op::QUIT, &[], b"", b""));
        let (packets, flow) = serve_binary(&mut m, &input);
        assert!(matches!(flow, Flow::Close));
        let got: Vec<(u8, u16)> = packets.iter().map(|p| (p.0, p.1)).collect();
        assert_eq!(
            got,
            vec![
                (op::INCREMENT, status::KEY_ENOENT),
                (op::REPLACE, status::KEY_ENOENT),
                (op::APPEND, status::NOT_STORED),
                (0x7e, status::UNKNOWN_COMMAND),
                (op::QUIT, status::SUCCESS),
            ]
        );
    }

    #[test]
    fn a_flush_is_a_barrier_left_to_the_server() {
        let mut steps = Vec::new();
        let input = req(op::FLUSHQ, &[], b"", b"");
        let crate::binary::BinParsed::Request { req: r, .. } = crate::binary::parse(&input, 100)
        else {
            panic!("not parsed");
        };
        let flow = crate::binary::plan(r, &input, &mut Vec::new(), &mut steps);
        assert!(matches!(flow, Flow::Barrier));
        assert!(matches!(
            steps[0],
            crate::step::Step::BinFlush {
                quiet: true,
                opaque: 7,
                ..
            }
        ));
        let mut out = Vec::new();
        super::flushed(&mut out, 7, true);
        assert!(out.is_empty());
        super::stats(&mut out, 7, None);
        assert_eq!(u16::from_be_bytes([out[6], out[7]]), status::KEY_ENOENT);
    }

    #[test]
    fn out_of_memory_is_worded_as_memcached_words_it_for_stores_and_counters() {
        use crate::step::{BinKind, BinStep};
        let res = hkv_types::Responses {
            results: vec![hkv_types::Response::OutOfMemory],
            ..hkv_types::Responses::default()
        };
        for (kind, opcode, words) in [
            (
                BinKind::Store,
                op::APPEND,
                &b"Out of memory allocating item"[..],
            ),
            (
                BinKind::Arith,
                op::INCREMENT,
                b"Out of memory incrementing value",
            ),
        ] {
            let step = BinStep::Engine {
                kind,
                idx: 0,
                opcode,
                opaque: 3,
                quiet: false,
                key_off: 0,
                key_len: 1,
            };
            let mut out = crate::output::Output::default();
            super::compose(&step, b"k", &res, &mut out);
            assert_eq!(u16::from_be_bytes([out[6], out[7]]), status::ENOMEM);
            assert_eq!(&out[24..], words);
        }
    }
}
