//! hkv's vector commands (KV-Direct §2.1; docs/protocol-extensions.md): parse and compose.
//!
//! ```text
//! vupdate  <key> <type> <op> <scalar> [old] [noreply]
//! vupdatev <key> <type> <op> <bytes> [old] [noreply]\r\n<data>\r\n
//! vreduce  <key> <type> <op>
//! vfilter  <key> <type> <cmp> <scalar>
//! ```

use std::io::Write;

use hkv_types::{Cmp, Elem, ReduceOp, Response, UpdateOp, Vector, VectorCall};

use super::command::Command;
use super::parsed::{Limits, Parsed};
use super::tokens::parse_i32;
use crate::errors::vector as err;
use crate::errors::{BAD_DATA_CHUNK, BAD_FORMAT, ERROR, TOO_LARGE};
use crate::MAX_KEY_LEN;

/// The command names, for the dispatcher.
pub(crate) const NAMES: [&[u8]; 4] = [b"vupdate", b"vupdatev", b"vreduce", b"vfilter"];

fn refuse<'a>(error: &'static str, len: usize, swallow: usize, noreply: bool) -> Parsed<'a> {
    Parsed::Error {
        error,
        len,
        swallow,
        noreply,
        close: false,
        unlink: None,
    }
}

/// Parses one vector command whose line (without its newline) is `tokens`; the line takes
/// `line_len` bytes of `buf` with its newline.
pub(crate) fn parse<'a>(
    buf: &'a [u8],
    tokens: &[&'a [u8]],
    line_len: usize,
    limits: &Limits,
) -> Parsed<'a> {
    let name = tokens[0];
    let n = tokens.len();
    let update = name == b"vupdate" || name == b"vupdatev";
    let fixed = if update { 5 } else { n };
    let ok_count = if update {
        (5..=7).contains(&n)
    } else {
        n == if name == b"vreduce" { 4 } else { 5 }
    };
    if !ok_count {
        return Parsed::error(ERROR, line_len);
    }
    // `[old] [noreply]`, in that order.
    let (mut old, mut noreply) = (false, false);
    for (i, t) in tokens[fixed..].iter().enumerate() {
        match *t {
            b"old" if i == 0 => old = true,
            b"noreply" if !noreply => noreply = true,
            _ => return refuse(BAD_FORMAT, line_len, 0, false),
        }
    }
    // vupdatev's data block is consumed whatever else is wrong with the line, so the bytes
    // of the vector are never read as commands.
    let mut total = line_len;
    let mut operand: &'a [u8] = &[];
    if name == b"vupdatev" {
        // A 32-bit length, as `set`'s (memcached's): a u64 near its maximum once overflowed
        // the swallow count below (found by fuzzing).
        let Some(vlen) = parse_i32(tokens[4]).and_then(|v| usize::try_from(v).ok()) else {
            return refuse(BAD_FORMAT, line_len, 0, noreply);
        };
        if vlen > limits.max_item_size {
            return refuse(TOO_LARGE, line_len, vlen + 2, noreply);
        }
        total = line_len + vlen + 2;
        if buf.len() < total {
            return Parsed::Incomplete;
        }
        if &buf[line_len + vlen..total] != b"\r\n" {
            return refuse(BAD_DATA_CHUNK, total, 0, noreply);
        }
        operand = &buf[line_len..line_len + vlen];
    }
    let key = tokens[1];
    if key.len() > MAX_KEY_LEN {
        return refuse(BAD_FORMAT, total, 0, noreply);
    }
    let Some(elem) = Elem::from_name(tokens[2]) else {
        return refuse(err::UNKNOWN_TYPE, total, 0, noreply);
    };
    let call = match name {
        b"vreduce" => {
            let Some(op) = ReduceOp::from_name(tokens[3]) else {
                return refuse(err::UNKNOWN_OP, total, 0, noreply);
            };
            if op.is_bitwise() && elem.is_float() {
                return refuse(err::FLOAT_BITWISE, total, 0, noreply);
            }
            VectorCall::Reduce(op)
        }
        b"vfilter" => {
            let Some(cmp) = Cmp::from_name(tokens[3]) else {
                return refuse(err::UNKNOWN_OP, total, 0, noreply);
            };
            let Some(scalar) = parse_scalar(elem, tokens[4]) else {
                return refuse(err::BAD_SCALAR, total, 0, noreply);
            };
            VectorCall::Filter { cmp, scalar }
        }
        _ => {
            let Some(op) = UpdateOp::from_name(tokens[3]) else {
                return refuse(err::UNKNOWN_OP, total, 0, noreply);
            };
            if op.is_bitwise() && elem.is_float() {
                return refuse(err::FLOAT_BITWISE, total, 0, noreply);
            }
            let scalar = if name == b"vupdate" {
                let Some(s) = parse_scalar(elem, tokens[4]) else {
                    return refuse(err::BAD_SCALAR, total, 0, noreply);
                };
                Some(s)
            } else {
                if !operand.len().is_multiple_of(elem.size()) {
                    return refuse(err::VECTOR_NOT_MULTIPLE, total, 0, noreply);
                }
                None
            };
            VectorCall::Update { op, scalar, old }
        }
    };
    Parsed::Command {
        cmd: Command::Vector {
            key,
            vector: Vector { elem, call },
            operand,
            noreply,
        },
        len: total,
    }
}

/// An element of type `elem` written in decimal (floats also as Rust reads them: `1e-3`,
/// `inf`, `NaN`), as its little-endian bits; `None` if it does not fit the type.
pub fn parse_scalar(elem: Elem, t: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(t).ok()?;
    if elem.is_float() {
        let v: f64 = s.parse().ok()?;
        // A finite number too large for the type is refused, not rounded to infinity.
        let named_infinity = s.to_ascii_lowercase().contains("inf");
        return match elem {
            Elem::F32 => {
                let f = v as f32;
                (!f.is_infinite() || named_infinity).then_some(u64::from(f.to_bits()))
            }
            _ => (!v.is_infinite() || named_infinity).then_some(v.to_bits()),
        };
    }
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: i128 = s.parse().ok()?;
    let bits = 8 * elem.size() as u32;
    let (lo, hi) = if elem.is_signed() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    if !(lo..=hi).contains(&v) {
        return None;
    }
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    Some(v as u64 & mask)
}

/// Writes the reply to a vector command: `UPDATED`, `RESULT <n>`, a value as `get` answers
/// it (`vfilter`, `vupdate ... old`), `NOT_FOUND` or a `CLIENT_ERROR`.
pub fn compose(out: &mut Vec<u8>, key: &[u8], r: &Response, value: &[u8]) {
    let line = |out: &mut Vec<u8>, s: &str| {
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(b"\r\n");
    };
    match *r {
        Response::Updated => line(out, "UPDATED"),
        Response::Reduced(v) => {
            let _ = write!(out, "RESULT {v}\r\n");
        }
        Response::Value { flags, len, .. } => {
            out.extend_from_slice(b"VALUE ");
            out.extend_from_slice(key);
            let _ = write!(out, " {flags} {len}\r\n");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\nEND\r\n");
        }
        Response::NotFound | Response::Miss => line(out, "NOT_FOUND"),
        ref other => line(out, crate::errors::for_response(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse as parse_text;

    fn parsed(b: &[u8]) -> Parsed<'_> {
        parse_text(b, &Limits::default())
    }

    fn error_of(b: &[u8]) -> &'static str {
        match parsed(b) {
            Parsed::Error { error, .. } => error,
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn regression_vupdatev_length_near_u64_max_is_refused_not_an_overflow() {
        // Found by the text fuzz target: the swallow count `vlen + 2` overflowed.
        for len in [
            "18446744073709551615",
            "18446744073709551614",
            "2147483648",
            "-1",
        ] {
            let line = format!("vupdatev k u8 add {len}\r\n");
            assert_eq!(error_of(line.as_bytes()), BAD_FORMAT, "{len}");
        }
        // Within 32 bits but above -I: too large, and the block is swallowed.
        match parsed(b"vupdatev k u8 add 2147483647\r\n") {
            Parsed::Error { error, swallow, .. } => {
                assert_eq!((error, swallow), (TOO_LARGE, 2147483649));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn scalars_fit_their_type_or_are_refused() {
        assert_eq!(parse_scalar(Elem::U8, b"255"), Some(255));
        assert_eq!(parse_scalar(Elem::U8, b"256"), None);
        assert_eq!(parse_scalar(Elem::U8, b"-1"), None);
        assert_eq!(parse_scalar(Elem::I8, b"-1"), Some(0xff));
        assert_eq!(parse_scalar(Elem::I8, b"-129"), None);
        assert_eq!(
            parse_scalar(Elem::U64, b"18446744073709551615"),
            Some(u64::MAX)
        );
        assert_eq!(parse_scalar(Elem::U64, b"18446744073709551616"), None);
        assert_eq!(
            parse_scalar(Elem::I64, b"-9223372036854775808"),
            Some(1 << 63)
        );
        assert_eq!(parse_scalar(Elem::I32, b"1.5"), None);
        assert_eq!(parse_scalar(Elem::I32, b"+1"), None);
        assert_eq!(parse_scalar(Elem::F32, b"1e39"), None);
        assert_eq!(
            parse_scalar(Elem::F32, b"-inf"),
            Some(u64::from(f32::NEG_INFINITY.to_bits()))
        );
        assert_eq!(parse_scalar(Elem::F64, b"1e400"), None);
        assert_eq!(parse_scalar(Elem::F64, b"0.5"), Some(0.5f64.to_bits()));
        assert!(parse_scalar(Elem::F64, b"NaN").is_some());
    }

    #[test]
    fn vupdate_with_its_options() {
        let Parsed::Command { cmd, len } = parsed(b"vupdate k u32 add 7 old noreply\r\n") else {
            panic!()
        };
        assert_eq!(len, 33);
        assert_eq!(
            cmd,
            Command::Vector {
                key: b"k",
                vector: Vector {
                    elem: Elem::U32,
                    call: VectorCall::Update {
                        op: UpdateOp::Add,
                        scalar: Some(7),
                        old: true
                    }
                },
                operand: b"",
                noreply: true,
            }
        );
        assert_eq!(error_of(b"vupdate k u32 add 7 noreply old\r\n"), BAD_FORMAT);
        assert_eq!(error_of(b"vupdate k u32 add\r\n"), ERROR);
        assert_eq!(error_of(b"vupdate k u33 add 1\r\n"), err::UNKNOWN_TYPE);
        assert_eq!(error_of(b"vupdate k u32 mul 1\r\n"), err::UNKNOWN_OP);
        assert_eq!(error_of(b"vupdate k f32 xor 1\r\n"), err::FLOAT_BITWISE);
        assert_eq!(error_of(b"vupdate k u8 add 300\r\n"), err::BAD_SCALAR);
    }

    #[test]
    fn vupdatev_consumes_its_data_block_even_when_refused() {
        let b = b"vupdatev k u16 add 4\r\n\x01\x00\x02\x00\r\nrest";
        let Parsed::Command { cmd, len } = parsed(b) else {
            panic!()
        };
        assert_eq!(len, b.len() - 4);
        assert!(matches!(cmd, Command::Vector { operand, .. } if operand == b"\x01\x00\x02\x00"));
        let b = b"vupdatev k u16 pow 4\r\nabcd\r\n";
        assert!(matches!(
            parsed(b),
            Parsed::Error { error, len, .. } if error == err::UNKNOWN_OP && len == b.len()
        ));
        assert_eq!(
            error_of(b"vupdatev k u16 add 3\r\nabc\r\n"),
            err::VECTOR_NOT_MULTIPLE
        );
        assert_eq!(
            error_of(b"vupdatev k u16 add 2\r\nabcd\r\n"),
            BAD_DATA_CHUNK
        );
        assert_eq!(parsed(b"vupdatev k u16 add 4\r\nab"), Parsed::Incomplete);
        assert!(matches!(
            parsed(b"vupdatev k u8 add 1999999999\r\n"),
            Parsed::Error { error, swallow, .. } if error == TOO_LARGE && swallow == 1999999999 + 2
        ));
    }

    #[test]
    fn reduce_and_filter() {
        assert!(matches!(
            parsed(b"vreduce k i64 sum\r\n"),
            Parsed::Command { cmd: Command::Vector { vector, .. }, .. }
                if vector.call == VectorCall::Reduce(ReduceOp::Sum)
        ));
        assert_eq!(error_of(b"vreduce k f64 xor\r\n"), err::FLOAT_BITWISE);
        assert_eq!(error_of(b"vreduce k i64 sum extra\r\n"), ERROR);
        assert!(matches!(
            parsed(b"vfilter k i8 lt -3\r\n"),
            Parsed::Command { cmd: Command::Vector { vector, .. }, .. }
                if vector.call == VectorCall::Filter { cmp: Cmp::Lt, scalar: 0xfd }
        ));
        assert_eq!(error_of(b"vfilter k i8 lt -300\r\n"), err::BAD_SCALAR);
        assert_eq!(error_of(b"vfilter k i8 in 3\r\n"), err::UNKNOWN_OP);
    }

    #[test]
    fn replies() {
        let mut out = Vec::new();
        compose(&mut out, b"k", &Response::Updated, b"");
        compose(
            &mut out,
            b"k",
            &Response::Reduced(hkv_types::Reduced::Signed(-5)),
            b"",
        );
        let v = Response::Value {
            flags: 3,
            cas: 9,
            offset: 0,
            len: 2,
            expiry: 0,
            atime: 0,
            bits: 0,
        };
        compose(&mut out, b"k", &v, b"ab");
        compose(&mut out, b"k", &Response::NotFound, b"");
        compose(
            &mut out,
            b"k",
            &Response::Vector(hkv_types::VectorError::Empty),
            b"",
        );
        assert_eq!(
            out,
            b"UPDATED\r\nRESULT -5\r\nVALUE k 3 2\r\nab\r\nEND\r\nNOT_FOUND\r\nCLIENT_ERROR empty value\r\n"
        );
    }
}
