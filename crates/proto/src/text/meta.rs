//! Meta command lines (protocol.txt, "Meta Commands"), checked the way memcached 1.6
//! checks them before running anything.

use super::command::{MetaCmd, MetaFlag};
use super::parse::{bad_format, Limits, Parsed, BAD_DATA_CHUNK, TOO_LARGE};
use super::tokens::{parse_i32, parse_u32, parse_u64};

/// Every flag letter memcached's meta parser accepts, for every meta command. Flags that do
/// not apply to a command are accepted and ignored, as memcached does.
pub const META_FLAG_LETTERS: &[u8] = b"bNTRlOPLkstcfvhuqFCMJDI";
/// More flags than this on one line is an error.
const MAX_FLAGS: usize = 17;

fn preparse<'a>(tokens: &[&'a [u8]]) -> Result<Vec<MetaFlag<'a>>, &'static str> {
    let mut out: Vec<MetaFlag<'a>> = Vec::with_capacity(tokens.len());
    for t in tokens {
        let letter = t[0];
        let value = &t[1..];
        if letter >= 127 || out.iter().any(|f| f.letter == letter) {
            return Err("CLIENT_ERROR duplicate flag");
        }
        if !META_FLAG_LETTERS.contains(&letter) {
            return Err("CLIENT_ERROR invalid flag");
        }
        let ok = match letter {
            b'N' | b'T' | b'R' => parse_i32(value).is_some(),
            b'C' => parse_u64(value).is_some(),
            b'F' => parse_u32(value).is_some(),
            b'M' if value.len() != 1 => return Err("CLIENT_ERROR incorrect length for M token"),
            b'J' if parse_u64(value).is_none() => {
                return Err("CLIENT_ERROR invalid numeric initial value")
            }
            b'D' if parse_u64(value).is_none() => {
                return Err("CLIENT_ERROR invalid numeric delta value")
            }
            _ => true,
        };
        if !ok {
            return Err(if letter == b'F' {
                "CLIENT_ERROR bad command line format"
            } else {
                "CLIENT_ERROR bad token in command line format"
            });
        }
        out.push(MetaFlag { letter, value });
    }
    Ok(out)
}

/// Checks shared by mg, md, ma and the flags of ms: count, preparse, opaque length.
fn flags_of<'a>(cmd: &[u8], tokens: &[&'a [u8]]) -> Result<Vec<MetaFlag<'a>>, &'static str> {
    if tokens.len() > MAX_FLAGS {
        return Err(if cmd == b"mg" {
            "CLIENT_ERROR options flags are too long"
        } else {
            "CLIENT_ERROR options flags too long"
        });
    }
    let flags = preparse(tokens).map_err(|e| {
        if cmd == b"md" || cmd == b"ma" {
            "CLIENT_ERROR invalid or duplicate flag"
        } else {
            e
        }
    })?;
    if flags
        .iter()
        .any(|f| f.letter == b'O' && f.value.len() + 1 > 32)
    {
        return Err("CLIENT_ERROR opaque token too long");
    }
    Ok(flags)
}

/// Parses a meta command whose line is `line` (without the line ending) and whose line
/// occupies `line_len` bytes of `buf` (ending included).
pub(crate) fn parse<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Parsed<'a> {
    let tokens: Vec<&'a [u8]> = super::tokens::split(line).collect();
    let name = tokens[0];
    let cmd = |m: MetaCmd<'a>, len: usize| Parsed::Command {
        cmd: super::Command::Meta(m),
        len,
    };
    match name {
        b"mn" => cmd(MetaCmd::Noop, line_len),
        b"me" => match tokens.get(1) {
            Some(key) if key.len() <= crate::MAX_KEY_LEN => cmd(MetaCmd::Debug { key }, line_len),
            _ => bad_format(line_len),
        },
        b"mg" | b"md" | b"ma" => {
            let Some(&key) = tokens.get(1) else {
                return Parsed::error("ERROR", line_len);
            };
            if key.len() > crate::MAX_KEY_LEN {
                return bad_format(line_len);
            }
            let flags = match flags_of(name, &tokens[2..]) {
                Ok(f) => f,
                Err(e) => return Parsed::error(e, line_len),
            };
            let m = match name {
                b"mg" => MetaCmd::Get { key, flags },
                b"md" => MetaCmd::Delete { key, flags },
                _ => MetaCmd::Arith { key, flags },
            };
            cmd(m, line_len)
        }
        b"ms" => {
            let Some(&key) = tokens.get(1) else {
                return Parsed::error("ERROR", line_len);
            };
            let vlen = tokens
                .get(2)
                .and_then(|t| parse_i32(t))
                .filter(|&v| v >= 0)
                .map(|v| v as usize);
            let (Some(vlen), true) = (vlen, key.len() <= crate::MAX_KEY_LEN) else {
                return bad_format(line_len);
            };
            if tokens.len() - 3 > MAX_FLAGS {
                return Parsed::error("CLIENT_ERROR options flags too long", line_len);
            }
            // From here on memcached has committed to the data block: errors swallow it.
            let refuse = |error: &'static str, unlink: Option<&'a [u8]>| Parsed::Error {
                error,
                len: line_len,
                swallow: vlen.saturating_add(2),
                noreply: false,
                close: false,
                unlink,
            };
            let flags = match flags_of(name, &tokens[3..]) {
                Ok(f) => f,
                Err(e) => return refuse(e, None),
            };
            if vlen > limits.max_item_size {
                return refuse(TOO_LARGE, Some(key));
            }
            let total = line_len + vlen + 2;
            if buf.len() < total {
                return Parsed::Incomplete;
            }
            if &buf[line_len + vlen..total] != b"\r\n" {
                return Parsed::error(BAD_DATA_CHUNK, total);
            }
            cmd(
                MetaCmd::Set {
                    key,
                    data: &buf[line_len..line_len + vlen],
                    flags,
                },
                total,
            )
        }
        _ => Parsed::error("ERROR", line_len),
    }
}
