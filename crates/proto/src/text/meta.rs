//! Meta command lines (protocol.txt, "Meta Commands").

use super::command::{MetaCmd, MetaFlag};
use super::parse::{bad_format, Limits, Parsed, BAD_DATA_CHUNK, TOO_LARGE};
use super::tokens::parse_u64;

/// Flags each meta command accepts; anything else is "CLIENT_ERROR invalid flag".
pub const META_FLAG_LETTERS: [(&str, &[u8]); 4] = [
    ("mg", b"bcfhklOqstuvENRT"),
    ("ms", b"bcCFIkOqsSTMN"),
    ("md", b"bCIkOqTx"),
    ("ma", b"bCEiJNqODtTMvck"),
];

/// `ms` modes (`M<mode>`), as in the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

pub const INVALID_FLAG: &str = "CLIENT_ERROR invalid flag";

fn flags<'a>(
    cmd: &str,
    tokens: impl Iterator<Item = &'a [u8]>,
) -> Result<Vec<MetaFlag<'a>>, &'static str> {
    let allowed = META_FLAG_LETTERS
        .iter()
        .find(|(c, _)| *c == cmd)
        .map_or(&b""[..], |(_, a)| a);
    let mut out = Vec::new();
    for t in tokens {
        let letter = t[0];
        if !allowed.contains(&letter) {
            return Err(INVALID_FLAG);
        }
        if out.iter().any(|f: &MetaFlag<'_>| f.letter == letter) {
            return Err("CLIENT_ERROR duplicate flag");
        }
        out.push(MetaFlag {
            letter,
            value: &t[1..],
        });
    }
    Ok(out)
}

/// Parses a meta command whose line is `line` (without the line ending) and whose line
/// occupies `line_len` bytes of `buf` (ending included).
pub(crate) fn parse<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Parsed<'a> {
    let mut t = super::tokens::split(line);
    let name = t.next().unwrap_or_default();
    let err = |e: &'static str| Parsed::error(e, line_len);
    match name {
        b"mn" => Parsed::Command {
            cmd: super::Command::Meta(MetaCmd::Noop),
            len: line_len,
        },
        b"me" => match (t.next(), t.next()) {
            (Some(key), None) if key.len() <= crate::MAX_KEY_LEN => Parsed::Command {
                cmd: super::Command::Meta(MetaCmd::Debug { key }),
                len: line_len,
            },
            _ => bad_format(line_len),
        },
        b"mg" | b"md" | b"ma" => {
            let Some(key) = t.next() else {
                return bad_format(line_len);
            };
            if key.len() > crate::MAX_KEY_LEN {
                return bad_format(line_len);
            }
            let cmd = std::str::from_utf8(name).unwrap_or_default();
            let flags = match flags(cmd, t) {
                Ok(f) => f,
                Err(e) => return err(e),
            };
            let meta = match name {
                b"mg" => MetaCmd::Get { key, flags },
                b"md" => MetaCmd::Delete { key, flags },
                _ => MetaCmd::Arith { key, flags },
            };
            Parsed::Command {
                cmd: super::Command::Meta(meta),
                len: line_len,
            }
        }
        b"ms" => {
            let (Some(key), Some(len_tok)) = (t.next(), t.next()) else {
                return bad_format(line_len);
            };
            let Some(vlen) = parse_u64(len_tok).and_then(|v| usize::try_from(v).ok()) else {
                return bad_format(line_len);
            };
            if key.len() > crate::MAX_KEY_LEN {
                return bad_format(line_len);
            }
            let flags = match flags("ms", t) {
                Ok(f) => f,
                Err(e) => return err(e),
            };
            let quiet = flags.iter().any(|f| f.letter == b'q');
            if vlen > limits.max_item_size {
                return Parsed::Error {
                    error: TOO_LARGE,
                    len: line_len,
                    swallow: vlen.saturating_add(2),
                    noreply: false,
                    close: false,
                    unlink: Some(key),
                };
            }
            let total = line_len + vlen + 2;
            if buf.len() < total {
                return Parsed::Incomplete;
            }
            if &buf[line_len + vlen..total] != b"\r\n" {
                return Parsed::Error {
                    error: BAD_DATA_CHUNK,
                    len: total,
                    swallow: 0,
                    noreply: false,
                    close: false,
                    unlink: None,
                };
            }
            let _ = quiet;
            Parsed::Command {
                cmd: super::Command::Meta(MetaCmd::Set {
                    key,
                    data: &buf[line_len..line_len + vlen],
                    flags,
                }),
                len: total,
            }
        }
        _ => err("ERROR"),
    }
}
