//! memcached's binary protocol (protocol-binary.txt): request framing and response headers
//! here, planning in `plan.rs`, replies in `compose.rs`.
//!
//! ```text
//!  byte 0      1       2..4     4       5        6..8            8..12      12..16  16..24
//!     magic  opcode  key len  extras  datatype  vbucket/status  body len   opaque  cas
//! ```

mod compose;
mod plan;

pub use compose::{compose, flushed, stats};
pub use plan::{plan, Flow};

pub const REQUEST_MAGIC: u8 = 0x80;
pub const RESPONSE_MAGIC: u8 = 0x81;
pub const HEADER_LEN: usize = 24;

/// Opcodes memcached 1.6 answers.
pub mod op {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Response status codes and memcached's message for each.
pub mod status {
    pub const SUCCESS: u16 = 0x0000;
    pub const KEY_ENOENT: u16 = 0x0001;
    pub const KEY_EEXISTS: u16 = 0x0002;
    pub const E2BIG: u16 = 0x0003;
    pub const EINVAL: u16 = 0x0004;
    pub const NOT_STORED: u16 = 0x0005;
    pub const DELTA_BADVAL: u16 = 0x0006;
    pub const AUTH_ERROR: u16 = 0x0020;
    pub const UNKNOWN_COMMAND: u16 = 0x0081;
    pub const ENOMEM: u16 = 0x0082;

    /// ENOMEM's words for an incr or decr.
    pub const ARITH_ENOMEM: &str = "Out of memory incrementing value";

    pub fn message(status: u16) -> &'static str {
        match status {
            KEY_ENOENT => "Not found",
            KEY_EEXISTS => "Data exists for key.",
            E2BIG => "Too large.",
            EINVAL => "Invalid arguments",
            NOT_STORED => "Not stored.",
            DELTA_BADVAL => "Non-numeric server-side value for incr or decr",
            UNKNOWN_COMMAND => "Unknown command",
            // A storage command's words; incr and decr have their own (`ARITH_ENOMEM`).
            ENOMEM => "Out of memory allocating item",
            AUTH_ERROR => "Auth failure.",
            _ => "",
        }
    }
}

/// One binary request; slices borrow from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinRequest<'a> {
    pub opcode: u8,
    pub key: &'a [u8],
    pub extras: &'a [u8],
    pub value: &'a [u8],
    pub opaque: u32,
    pub cas: u64,
}

impl BinRequest<'_> {
    pub fn extra_u32(&self, at: usize) -> Option<u32> {
        self.extras
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn extra_u64(&self, at: usize) -> Option<u64> {
        self.extras
            .get(at..at + 8)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinParsed<'a> {
    Incomplete,
    Request {
        req: BinRequest<'a>,
        len: usize,
    },
    /// Answer `status` with `opaque` (and the opcode), consume `len` bytes, then drop
    /// `swallow` more; close the connection if `close`. `unlink`: the key whose old value
    /// goes too (a SET refused as too large, as memcached).
    Error {
        opcode: u8,
        status: u16,
        opaque: u32,
        len: usize,
        swallow: usize,
        close: bool,
        unlink: Option<&'a [u8]>,
    },
    /// Not a request at all (bad magic): memcached closes without a reply.
    Close,
    /// A SET, ADD or REPLACE whose header, extras and key are the first `header` bytes and
    /// whose value of `vlen` bytes has not all arrived (see `text::Limits::stage_min`).
    Body {
        header: usize,
        vlen: usize,
    },
}

/// Whether an opcode takes a key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyRule {
    Required,
    Forbidden,
    /// STAT (a group).
    Optional,
}

/// (extras, key, value) each opcode requires: `Some(n)` exactly n, `None` any.
fn shape(opcode: u8) -> Option<(Option<usize>, KeyRule, bool)> {
    use op::*;
    use KeyRule::*;
    // (extras length, key, value allowed)
    Some(match opcode {
        GET | GETQ | GETK | GETKQ => (Some(0), Required, false),
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => (Some(8), Required, true),
        APPEND | APPENDQ | PREPEND | PREPENDQ => (Some(0), Required, true),
        DELETE | DELETEQ => (Some(0), Required, false),
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => (Some(20), Required, false),
        QUIT | QUITQ | NOOP | VERSION => (Some(0), Forbidden, false),
        FLUSH | FLUSHQ => (None, Forbidden, false),
        STAT => (Some(0), Optional, false),
        TOUCH | GAT | GATQ | GATK | GATKQ => (Some(4), Required, false),
        SASL_LIST_MECHS => (Some(0), Forbidden, false),
        // A mechanism is required whether or not -S is on: memcached answers an empty one
        // with "Invalid arguments" and closes before it looks at -S.
        SASL_AUTH | SASL_STEP => (Some(0), Required, true),
        _ => return None,
    })
}

/// Parses the binary request at the front of `buf`. `max_value` is `-I`.
pub fn parse(buf: &[u8], max_value: usize) -> BinParsed<'_> {
    parse_with(
        buf,
        &crate::text::Limits {
            max_item_size: max_value,
            ..crate::text::Limits::default()
        },
    )
}

/// [`parse`] with the server's limits, including whether values are staged
/// (`text::Limits::stage_min`, `text::Limits::body_staged`).
pub fn parse_with<'a>(buf: &'a [u8], limits: &crate::text::Limits) -> BinParsed<'a> {
    if buf.is_empty() {
        return BinParsed::Incomplete;
    }
    if buf[0] != REQUEST_MAGIC {
        return BinParsed::Close;
    }
    if buf.len() < HEADER_LEN {
        return BinParsed::Incomplete;
    }
    let opcode = buf[1];
    let keylen = u16::from_be_bytes([buf[2], buf[3]]) as usize;
    let extlen = buf[4] as usize;
    let bodylen = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    let opaque = u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]);
    let cas = u64::from_be_bytes(buf[16..24].try_into().expect("8 bytes"));
    let error = |status: u16, len: usize, swallow: usize, close: bool| BinParsed::Error {
        opcode,
        status,
        opaque,
        len,
        swallow,
        close,
        unlink: None,
    };
    // Lengths that do not add up: memcached 1.6 answers "Unknown command" and closes the
    // connection (checked against a live 1.6.18 by tests/clients).
    if keylen + extlen > bodylen {
        return error(status::UNKNOWN_COMMAND, HEADER_LEN, 0, true);
    }
    // memcached judges the key's length before the opcode: an unknown opcode with a key
    // over 250 bytes is a protocol error too.
    if keylen > crate::MAX_KEY_LEN {
        return error(status::EINVAL, HEADER_LEN, 0, true);
    }
    let Some((want_ext, key_rule, value_ok)) = shape(opcode) else {
        return error(status::UNKNOWN_COMMAND, HEADER_LEN, bodylen, false);
    };
    let vlen = bodylen - keylen - extlen;
    let shape_ok = want_ext.is_none_or(|n| n == extlen)
        && (key_rule != KeyRule::Required || keylen > 0)
        && (key_rule != KeyRule::Forbidden || keylen == 0)
        && (value_ok || vlen == 0)
        && keylen <= crate::MAX_KEY_LEN
        && (opcode != op::FLUSH && opcode != op::FLUSHQ || extlen == 0 || extlen == 4);
    // A known opcode of the wrong shape (extras, key or value where none belong, or
    // missing): "Invalid arguments", then close, as memcached's protocol error.
    if !shape_ok {
        return error(status::EINVAL, HEADER_LEN, 0, true);
    }
    let sasl_op = matches!(opcode, op::SASL_LIST_MECHS | op::SASL_AUTH | op::SASL_STEP);
    if sasl_op && !limits.sasl {
        return error(status::UNKNOWN_COMMAND, HEADER_LEN, bodylen, false);
    }
    // With `-C` memcached drops the header CAS of a storage command (its items have no CAS
    // to set or compare): SET, ADD, REPLACE, APPEND and PREPEND store as if none was given.
    // DELETE and INCR/DECR still compare it, and never match.
    let cas = if value_ok && !limits.cas { 0 } else { cas };
    // memcached counts a storage command's flags (the first four bytes of its extras) in
    // the item's size, so they are read before the size is judged.
    let flags = match extlen >= 4 && value_ok {
        true if buf.len() < HEADER_LEN + 4 => return BinParsed::Incomplete,
        true => u32::from_be_bytes([buf[24], buf[25], buf[26], buf[27]]),
        false => 0,
    };
    if value_ok && !limits.fits(keylen, flags, vlen) {
        // Refuse before buffering it; the body is read and dropped. A refused SET also
        // drops the key's old value (memcached: no stale data after a failed SET), so
        // its key is read first.
        if sasl_op {
            // memcached reads SASL data into an item: one it cannot allocate is "Out of
            // memory".
            return error(status::ENOMEM, HEADER_LEN, bodylen, false);
        }
        if !matches!(opcode, op::SET | op::SETQ) {
            return error(status::E2BIG, HEADER_LEN, bodylen, false);
        }
        let header = HEADER_LEN + extlen + keylen;
        if buf.len() < header {
            return BinParsed::Incomplete;
        }
        return BinParsed::Error {
            opcode,
            status: status::E2BIG,
            opaque,
            len: header,
            swallow: vlen,
            close: false,
            unlink: Some(&buf[HEADER_LEN + extlen..header]),
        };
    }
    // A staged value is not in the buffer: the key is followed by the next request.
    let total = match limits.body_staged {
        true => HEADER_LEN + extlen + keylen,
        false => HEADER_LEN + bodylen,
    };
    if buf.len() < total {
        let stageable = matches!(opcode, op::SET | op::SETQ | op::ADD | op::ADDQ)
            || matches!(opcode, op::REPLACE | op::REPLACEQ);
        let header = HEADER_LEN + extlen + keylen;
        // Only once the extras and key are in: the staged parse reads them from the buffer.
        if stageable && !limits.body_staged && vlen >= limits.stage_min && buf.len() >= header {
            if limits.refuse_unstaged {
                // memcached's failed allocation: ENOMEM, the body dropped, and a SET's old
                // value unlinked.
                let set = matches!(opcode, op::SET | op::SETQ);
                return BinParsed::Error {
                    opcode,
                    status: status::ENOMEM,
                    opaque,
                    len: header,
                    swallow: vlen,
                    close: false,
                    unlink: set.then(|| &buf[HEADER_LEN + extlen..header]),
                };
            }
            return BinParsed::Body { header, vlen };
        }
        return BinParsed::Incomplete;
    }
    let body = &buf[HEADER_LEN..total];
    BinParsed::Request {
        req: BinRequest {
            opcode,
            extras: &body[..extlen],
            key: &body[extlen..extlen + keylen],
            value: &body[extlen + keylen..],
            opaque,
            cas,
        },
        len: total,
    }
}

/// Appends a response header (one argument per header field, in wire order).
#[allow(clippy::too_many_arguments)]
pub fn write_header(
    out: &mut Vec<u8>,
    opcode: u8,
    key_len: usize,
    extras_len: usize,
    status: u16,
    body_len: usize,
    opaque: u32,
    cas: u64,
) {
    out.extend_from_slice(&header(
        opcode, key_len, extras_len, status, body_len, opaque, cas,
    ));
}

/// A response header's bytes, built whole so it is appended at once (nine pushes each
/// checked the buffer's capacity).
#[allow(clippy::too_many_arguments)]
pub(crate) fn header(
    opcode: u8,
    key_len: usize,
    extras_len: usize,
    status: u16,
    body_len: usize,
    opaque: u32,
    cas: u64,
) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = RESPONSE_MAGIC;
    h[1] = opcode;
    h[2..4].copy_from_slice(&(key_len as u16).to_be_bytes());
    h[4] = extras_len as u8;
    h[6..8].copy_from_slice(&status.to_be_bytes());
    h[8..12].copy_from_slice(&(body_len as u32).to_be_bytes());
    h[12..16].copy_from_slice(&opaque.to_be_bytes());
    h[16..24].copy_from_slice(&cas.to_be_bytes());
    h
}

/// Appends a response with no extras and no key: a status with memcached's message as body
/// (for errors) or `value`.
pub fn write_simple(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    value: &[u8],
) {
    let msg = if status == status::SUCCESS {
        value
    } else {
        status::message(status).as_bytes()
    };
    write_header(out, opcode, 0, 0, status, msg.len(), opaque, cas);
    out.extend_from_slice(msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testkit::bin_request as req;

    #[test]
    fn frames_and_lengths() {
        let set = req(op::SET, &[0, 0, 0, 1, 0, 0, 0, 0], b"k", b"vv");
        assert_eq!(parse(&set[..10], 100), BinParsed::Incomplete);
        assert_eq!(parse(&set[..set.len() - 1], 100), BinParsed::Incomplete);
        let BinParsed::Request { req: r, len } = parse(&set, 100) else {
            panic!()
        };
        assert_eq!(
            (r.key, r.value, r.opaque, len),
            (&b"k"[..], &b"vv"[..], 7, set.len())
        );
        assert_eq!(r.extra_u32(0), Some(1));
        // Bad magic: close without a word.
        assert_eq!(parse(b"\x81xxxxxxxxxxxxxxxxxxxxxxx", 100), BinParsed::Close);
        // Key longer than the body: "Unknown command", close (as memcached).
        let mut bad = req(op::GET, &[], b"key", b"");
        bad[11] = 1;
        assert!(matches!(
            parse(&bad, 100),
            BinParsed::Error {
                status: status::UNKNOWN_COMMAND,
                close: true,
                ..
            }
        ));
        // Unknown opcode: answered, body skipped, connection kept.
        let unk = req(0x55, &[], b"", b"abc");
        assert!(matches!(
            parse(&unk, 100),
            BinParsed::Error {
                status: status::UNKNOWN_COMMAND,
                swallow: 3,
                close: false,
                ..
            }
        ));
        // A value over the limit is refused before it arrives; a SET's key is read first,
        // as its old value goes too.
        let mut big = req(op::SET, &[0; 8], b"k", b"");
        big[8..12].copy_from_slice(&(9 + 1000u32).to_be_bytes());
        assert!(matches!(
            parse(&big, 100),
            BinParsed::Error {
                status: status::E2BIG,
                len: 33,
                swallow: 1000,
                unlink: Some(b"k"),
                ..
            }
        ));
        assert_eq!(parse(&big[..30], 100), BinParsed::Incomplete);
        // Any other write keeps the old value.
        big[1] = op::ADD;
        assert!(matches!(
            parse(&big, 100),
            BinParsed::Error {
                status: status::E2BIG,
                swallow: 1009,
                unlink: None,
                ..
            }
        ));
    }
}

#[cfg(test)]
mod shape_tests {
    use super::*;
    use crate::binary::plan::{plan, Flow};
    use crate::testkit::bin_request as req;

    #[test]
    fn regression_a_known_opcode_of_the_wrong_shape_is_invalid_arguments() {
        // Found by scripts/differential-fuzz.py --binary: memcached 1.6.18 answers a SET
        // without a key or with 4 bytes of extras "Invalid arguments" (then closes); hkv
        // said "Unknown command", which memcached keeps for lengths that do not add up.
        for bad in [
            req(op::SET, &[0; 8], b"", b"v"),
            req(op::SETQ, &[0; 4], b"k", b"v"),
            req(op::GET, &[], b"k", b"value"),
            req(op::NOOP, &[], b"k", b""),
        ] {
            assert!(
                matches!(
                    parse(&bad, 100),
                    BinParsed::Error {
                        status: status::EINVAL,
                        close: true,
                        ..
                    }
                ),
                "{bad:?}"
            );
        }
    }

    fn planned(packet: &[u8], cas: u64) -> hkv_types::Request<'static> {
        let mut p = packet.to_vec();
        p[16..24].copy_from_slice(&cas.to_be_bytes());
        let p: &'static [u8] = Box::leak(p.into_boxed_slice());
        let BinParsed::Request { req: r, .. } = parse(p, 100) else {
            panic!("{p:?}")
        };
        let (mut batch, mut steps) = (Vec::new(), Vec::new());
        assert!(matches!(plan(r, p, &mut batch, &mut steps), Flow::Continue));
        batch.pop().expect("one engine request")
    }

    #[test]
    fn regression_a_cas_in_the_header_binds_add_and_incr_too() {
        // Found by scripts/differential-fuzz.py --binary: memcached turns any store with a
        // CAS into compare-and-swap (an ADD with a CAS on a missing key is "Not found") and
        // checks the CAS of INCR/DECR and APPEND/PREPEND ("Data exists" on a mismatch); hkv
        // stored the ADD and ignored the others' CAS.
        let add = req(op::ADD, &[0; 8], b"k", b"v");
        assert_eq!(planned(&add, 5).op, hkv_types::Op::Cas);
        assert_eq!(planned(&add, 5).cas, 5);
        assert_eq!(planned(&add, 0).op, hkv_types::Op::Add);
        let incr = req(op::INCREMENT, &[0; 20], b"k", b"");
        assert_eq!(planned(&incr, 9).cas, 9);
        let append = req(op::APPENDQ, &[], b"k", b"x");
        assert_eq!(planned(&append, 3).cas, 3);
    }
}

/// SASL PLAIN's message (RFC 4616): `[authzid] NUL authcid NUL passwd`. Returns the user
/// and the password, or None if it is not of that form. An authorization identity other
/// than the user's own (acting for another user) is refused, as memcached's Cyrus SASL
/// refuses it (a hostile probe: hkv logged `bob\0alice\0secret` in).
pub fn sasl_plain(msg: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = msg.splitn(3, |&b| b == 0);
    let authzid = parts.next()?;
    let user = parts.next()?;
    let pass = parts.next()?;
    (!user.is_empty() && (authzid.is_empty() || authzid == user)).then_some((user, pass))
}

#[cfg(test)]
mod sasl_tests;
