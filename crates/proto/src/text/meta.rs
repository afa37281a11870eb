//! Meta command lines (protocol.txt, "Meta Commands"), checked the way memcached 1.6
//! checks them before running anything.

use super::command::MetaCmd;
use super::parsed::{bad_format, Limits, Parsed, Unlink};
use super::tokens::{parse_i32_low_bits, parse_u32_low_bits, parse_u64};
use crate::errors::{BAD_DATA_CHUNK, ERROR, TOO_LARGE};

/// Every flag letter memcached's meta parser accepts, for every meta command, and hkv's `G`
/// (docs/protocol-extensions.md). Flags that do not apply to a command are accepted and
/// ignored, as memcached does.
pub const META_FLAG_LETTERS: &[u8] = b"bNTRlOPLkstcfvhuqFCMJDIExG";
/// More flags than this on one line is an error.
const MAX_FLAGS: usize = 17;
/// memcached counts a line's tokens, not its flags (20 with the empty one it ends on), so
/// `ms`, with its length before its flags, takes one flag fewer than the others.
const MS_MAX_FLAGS: usize = MAX_FLAGS - 1;
/// The most tokens a meta line that is not refused for its flag count has: `ms`, its key,
/// its length and 16 flags, or `mg`, its key and 17.
const MAX_TOKENS: usize = 3 + MS_MAX_FLAGS;

/// A meta command's flags, parsed once (memcached's `struct _meta_flags`). Which of them a
/// command acts on is the planner's business; memcached accepts every letter on every
/// command and ignores the ones that do not apply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    /// `b`: the key is base64; `k` returns it as sent, followed by `b`.
    pub base64: bool,
    /// `C<cas>`: compare CAS.
    pub compare_cas: Option<u64>,
    /// `E<cas>`: CAS for the item this command creates or changes.
    pub new_cas: Option<u64>,
    /// `F<flags>`: client flags for ms.
    pub client_flags: Option<u32>,
    /// `I`: invalidate.
    pub invalidate: bool,
    /// `J<n>`: ma's initial value.
    pub initial: Option<u64>,
    /// `D<n>`: ma's delta.
    pub delta: Option<u64>,
    /// `M<c>`: mode.
    pub mode: Option<u8>,
    /// `N<ttl>`: vivify / autovivify.
    pub vivify: Option<i64>,
    /// `O<opaque>`: copied back.
    pub opaque: Option<&'a [u8]>,
    /// mg's or ma's opaque is past memcached's limit: memcached runs those commands and
    /// refuses the opaque only as it writes the reply, so their effects stand (a touch, a
    /// vivified item, an increment) and an error of the command's own comes first.
    pub opaque_too_long: bool,
    /// `q`: quiet (noreply semantics).
    pub quiet: bool,
    /// `R<secs>`: recache threshold.
    pub recache: Option<i64>,
    /// `T<ttl>`: new TTL.
    pub ttl: Option<i64>,
    /// `u`: no LRU bump.
    pub no_bump: bool,
    /// One of `h l T N R`, for which memcached's mg reads the item without bumping it and
    /// bumps it (fetched, access time) only as it writes the reply: a too-long opaque,
    /// refused there, leaves it as it was.
    pub bumps_late: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `x`: md removes the value, keeps the item.
    pub strip_value: bool,
    /// `G` (hkv's extension): ms and md answer the value the key held before, as `mg v`
    /// would (`VA`).
    pub previous: bool,
    /// Where `t`, `T`, `N` and `R` stand ([`hkv_types::flag_order`] bits).
    pub order: u8,
    /// The letters that ask for something back (`b c f h k l O s t`), in request order, as
    /// memcached echoes them.
    ret: [u8; MAX_FLAGS],
    ret_len: u8,
}

impl<'a> MetaFlags<'a> {
    /// Return-flag letters in the order the request gave them.
    pub fn returned(&self) -> &[u8] {
        &self.ret[..self.ret_len as usize]
    }

    /// Whether the request asked for return flag `letter`.
    pub fn wants(&self, letter: u8) -> bool {
        self.returned().contains(&letter)
    }
}

/// Decodes a base64 key (meta `b`) into `out`; `None` if it is not valid base64 or decodes
/// to more than a key may hold.
pub fn decode_key(token: &[u8], out: &mut [u8; crate::MAX_KEY_LEN]) -> Option<usize> {
    use base64::Engine as _;
    let mut buf = [0u8; crate::MAX_KEY_LEN * 4 / 3 + 4];
    let n = base64::engine::general_purpose::STANDARD
        .decode_slice(token, &mut buf)
        .ok()?;
    if n == 0 || n > crate::MAX_KEY_LEN {
        return None;
    }
    out[..n].copy_from_slice(&buf[..n]);
    Some(n)
}

/// The letters of `letters` as bits of a `u128` (ASCII only).
const fn letter_bits(letters: &[u8]) -> u128 {
    let mut bits = 0u128;
    let mut i = 0;
    while i < letters.len() {
        bits |= 1 << letters[i];
        i += 1;
    }
    bits
}

const META_FLAG_BITS: u128 = letter_bits(META_FLAG_LETTERS);
/// The letters that ask for something back, echoed in request order.
const RETURN_FLAG_BITS: u128 = letter_bits(b"cfhklOst");

/// The [`flag_order`](hkv_types::flag_order) bits `letter` adds, given the letters `seen`
/// before it. Duplicates are refused, so each letter comes once: whichever of a pair comes
/// second finds the other seen.
fn order_bits(letter: u8, seen: u128) -> u8 {
    use hkv_types::flag_order::*;
    let before = |l: u8, bit: u8| if seen & (1u128 << l) != 0 { bit } else { 0 };
    match letter {
        b'T' => {
            before(b'N', T_AFTER_N) | before(b't', SHOWN_BEFORE_T) | before(b'R', RECACHE_BEFORE_T)
        }
        b'N' => before(b't', SHOWN_BEFORE_N),
        _ => 0,
    }
}

/// Reads `tokens`, the flags of a line whose key is `key`, into `f` (filled in place:
/// moving the ~170-byte flags out and back was a memcpy per request).
fn preparse<'a>(
    key: &[u8],
    tokens: &[&'a [u8]],
    f: &mut MetaFlags<'a>,
) -> Result<(), &'static str> {
    let mut seen = 0u128;
    let mut pending: Option<&'static str> = None;
    // mg and ma refuse a long opaque as they write their reply, which is where memcached
    // applies a TTL (`T`, and `N`'s on mg): one after the opaque is never applied.
    let mut past_long_opaque = false;
    for t in tokens {
        let letter = t[0];
        let value = &t[1..];
        let bit = 1u128 << (letter & 127);
        if letter >= 127 || seen & bit != 0 {
            return Err(crate::errors::meta::DUPLICATE_FLAG);
        }
        f.order |= order_bits(letter, seen);
        f.bumps_late |= matches!(letter, b'h' | b'l' | b'T' | b'N' | b'R');
        seen |= bit;
        if META_FLAG_BITS & bit == 0 {
            return Err(crate::errors::meta::INVALID_FLAG);
        }
        const BAD_TOKEN: &str = crate::errors::meta::BAD_TOKEN;
        // A bad value does not stop the scan (memcached's preparse): a duplicate or unknown
        // flag after it still answers its own error; otherwise the last bad value's does.
        match letter {
            b'N' => match parse_i32_low_bits(value) {
                Some(v) => f.vivify = Some(if past_long_opaque { 0 } else { v }),
                None => pending = Some(BAD_TOKEN),
            },
            b'T' => match parse_i32_low_bits(value) {
                Some(v) => f.ttl = (!past_long_opaque).then_some(v),
                None => pending = Some(BAD_TOKEN),
            },
            b'R' => match parse_i32_low_bits(value) {
                Some(v) => f.recache = Some(v),
                None => pending = Some(BAD_TOKEN),
            },
            b'C' => match parse_u64(value) {
                Some(v) => f.compare_cas = Some(v),
                None => pending = Some(BAD_TOKEN),
            },
            b'E' => match parse_u64(value) {
                Some(v) => f.new_cas = Some(v),
                None => pending = Some(BAD_TOKEN),
            },
            // memcached's F sets no message of its own: the one before it stands.
            b'F' => match parse_u32_low_bits(value) {
                Some(v) => f.client_flags = Some(v),
                None => pending = pending.or(Some(crate::errors::BAD_FORMAT)),
            },
            b'M' => match value {
                [m] => f.mode = Some(*m),
                _ => pending = Some(crate::errors::meta::M_LENGTH),
            },
            b'J' => match parse_u64(value) {
                Some(v) => f.initial = Some(v),
                None => pending = Some(crate::errors::meta::BAD_INITIAL),
            },
            b'D' => match parse_u64(value) {
                Some(v) => f.delta = Some(v),
                None => pending = Some(crate::errors::meta::BAD_DELTA),
            },
            b'O' => {
                f.opaque = Some(value);
                past_long_opaque = value.len() + 1 > MAX_OPAQUE;
            }
            // memcached decodes the key where it meets `b`, as a value of the flag.
            b'b' => {
                f.base64 = true;
                if decode_key(key, &mut [0; crate::MAX_KEY_LEN]).is_none() {
                    pending = Some(crate::errors::meta::BAD_KEY);
                }
            }
            b'I' => f.invalidate = true,
            b'q' => f.quiet = true,
            b'u' => f.no_bump = true,
            b'v' => f.value = true,
            b'x' => f.strip_value = true,
            b'G' => f.previous = true,
            _ => {}
        }
        if RETURN_FLAG_BITS & bit != 0 {
            f.ret[f.ret_len as usize] = letter;
            f.ret_len += 1;
        }
    }
    match pending {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// memcached's MFLAG_MAX_OPAQUE_LENGTH, counting the `O`.
const MAX_OPAQUE: usize = 32;

/// Checks shared by mg, md, ma and the flags of ms: count, preparse, opaque length.
/// `tokens` are the line's flags as kept, `count` how many the line has.
fn flags_of<'a>(
    cmd: &[u8],
    key: &[u8],
    tokens: &[&'a [u8]],
    count: usize,
    flags: &mut MetaFlags<'a>,
) -> Result<(), &'static str> {
    if count > MAX_FLAGS {
        return Err(if cmd == b"mg" {
            crate::errors::meta::MG_TOO_MANY_FLAGS
        } else {
            crate::errors::meta::TOO_MANY_FLAGS
        });
    }
    preparse(key, tokens, flags).map_err(|e| {
        if cmd == b"md" || cmd == b"ma" {
            crate::errors::meta::INVALID_OR_DUPLICATE
        } else {
            e
        }
    })?;
    // memcached checks ms's and ma's mode before the opaque's length (and before the size
    // or the data block).
    match (cmd, flags.mode) {
        (b"ms", Some(m)) if !b"SERAP".contains(&m) => return Err(crate::errors::meta::MS_MODE),
        (b"ma", Some(m)) if !b"I+D-".contains(&m) => return Err(crate::errors::meta::MA_MODE),
        _ => {}
    }
    if flags.opaque.is_some_and(|o| o.len() + 1 > MAX_OPAQUE) {
        if cmd == b"mg" || cmd == b"ma" {
            flags.opaque = None;
            flags.opaque_too_long = true;
        } else {
            return Err(crate::errors::meta::OPAQUE_TOO_LONG);
        }
    }
    Ok(())
}

/// Parses a meta command whose line is `line` (without the line ending) and whose line
/// occupies `line_len` bytes of `buf` (ending included).
pub(crate) fn parse<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Parsed<'a> {
    // The tokens a valid line can have are kept on the stack (a heap Vec per line was ~3% of
    // the server's CPU under a pipelined meta load); past them only the count matters, as
    // the line is refused for its number of flags.
    let mut fixed: [&'a [u8]; MAX_TOKENS] = [&[]; MAX_TOKENS];
    let mut n = 0;
    for t in super::tokens::split(line) {
        if n < MAX_TOKENS {
            fixed[n] = t;
        }
        n += 1;
    }
    let tokens = &fixed[..n.min(MAX_TOKENS)];
    let name = tokens[0];
    let cmd = |m: MetaCmd<'a>, len: usize| Parsed::Command {
        cmd: super::Command::Meta(m),
        len,
    };
    match name {
        b"mn" => cmd(MetaCmd::Noop, line_len),
        b"me" => match tokens.get(1) {
            Some(key) if key.len() <= crate::MAX_KEY_LEN => cmd(
                MetaCmd::Debug {
                    key,
                    // Only a token that is exactly `b` (memcached): `me foo bar` looks up foo.
                    base64: tokens.get(2).is_some_and(|t| *t == b"b"),
                },
                line_len,
            ),
            _ => bad_format(line_len),
        },
        b"mg" | b"md" | b"ma" => {
            let Some(&key) = tokens.get(1) else {
                return Parsed::error(ERROR, line_len);
            };
            if key.len() > crate::MAX_KEY_LEN {
                return bad_format(line_len);
            }
            // Built where it is returned and its flags read into place: moving the 168-byte
            // flags into the command, and that into the result, was two memcpys a line.
            let flags = MetaFlags::default();
            let mut parsed = cmd(
                match name {
                    b"mg" => MetaCmd::Get { key, flags },
                    b"md" => MetaCmd::Delete { key, flags },
                    _ => MetaCmd::Arith { key, flags },
                },
                line_len,
            );
            if let Parsed::Command {
                cmd:
                    super::Command::Meta(
                        MetaCmd::Get { flags, .. }
                        | MetaCmd::Delete { flags, .. }
                        | MetaCmd::Arith { flags, .. },
                    ),
                ..
            } = &mut parsed
            {
                if let Err(e) = flags_of(name, key, &tokens[2..], n - 2, flags) {
                    return Parsed::error(e, line_len);
                }
            }
            parsed
        }
        b"ms" => {
            let Some(&key) = tokens.get(1) else {
                return Parsed::error(ERROR, line_len);
            };
            // memcached's order: the key, then the number of tokens, then the length.
            if key.len() > crate::MAX_KEY_LEN || n < 3 {
                return bad_format(line_len);
            }
            if n - 3 > MS_MAX_FLAGS {
                return Parsed::error(crate::errors::meta::TOO_MANY_FLAGS, line_len);
            }
            // memcached's safe_strtol into an int32: the low 32 bits, as for `set`.
            let Some(vlen) = parse_i32_low_bits(tokens[2])
                .filter(|v| (0..=i64::from(i32::MAX) - 2).contains(v))
                .map(|v| v as usize)
            else {
                return bad_format(line_len);
            };
            // From here on memcached has committed to the data block: errors swallow it.
            let refuse = |error: &'static str, unlink: Option<Unlink<'a>>| Parsed::Error {
                error,
                len: line_len,
                swallow: vlen.saturating_add(2),
                noreply: false,
                close: false,
                unlink,
            };
            let mut flags = MetaFlags::default();
            if let Err(e) = flags_of(name, key, &tokens[3..], n - 3, &mut flags) {
                return refuse(e, None);
            }
            let key_len = if flags.base64 {
                decode_key(key, &mut [0; crate::MAX_KEY_LEN]).unwrap_or(key.len())
            } else {
                key.len()
            };
            let unlink = Unlink {
                key,
                base64: flags.base64,
            };
            if !limits.fits(key_len, flags.client_flags.unwrap_or(0), vlen) {
                return refuse(TOO_LARGE, Some(unlink));
            }
            let data_end = limits.data_end(line_len, vlen);
            let total = data_end + 2;
            if buf.len() < total {
                if !limits.body_staged && vlen >= limits.stage_min {
                    if limits.refuse_unstaged {
                        return refuse(crate::errors::OUT_OF_MEMORY, Some(unlink));
                    }
                    return Parsed::Body {
                        header: line_len,
                        vlen,
                    };
                }
                return Parsed::Incomplete;
            }
            if &buf[data_end..total] != b"\r\n" {
                return Parsed::error(BAD_DATA_CHUNK, total);
            }
            cmd(
                MetaCmd::Set {
                    key,
                    data: &buf[line_len..data_end],
                    flags,
                },
                total,
            )
        }
        _ => Parsed::error(ERROR, line_len),
    }
}
