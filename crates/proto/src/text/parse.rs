//! One request at a time from the front of a read buffer.

use super::command::Command;
use super::parsed::{bad_format, Unlink};
pub use super::parsed::{Limits, Parsed};
use super::tokens::{
    parse_i32_low_bits, parse_u32, parse_u32_low_bits, parse_u64, split, strtol_view,
};
use crate::step::{ClassList, CrawlerOp};
use crate::MAX_KEY_LEN;
use hkv_types::Op;

use crate::errors::{
    BAD_DATA_CHUNK, BAD_DELTA, BAD_EXPTIME, BAD_FORMAT, DELETE_USAGE, ERROR, OUT_OF_MEMORY,
    TOO_LARGE,
};

/// An error for a command that asked for `noreply`: memcached suppresses those replies too.
fn quiet_error<'a>(error: &'static str, len: usize, noreply: bool) -> Parsed<'a> {
    Parsed::Error {
        error,
        len,
        swallow: 0,
        noreply,
        close: false,
        unlink: None,
    }
}

/// Tokens of a command line kept on the stack (memcached's `MAX_TOKENS`).
const MAX_TOKENS: usize = 24;

fn key_ok(k: &[u8]) -> bool {
    k.len() <= MAX_KEY_LEN
}

fn is_http_method(m: &[u8]) -> bool {
    matches!(
        m,
        b"GET"
            | b"POST"
            | b"HEAD"
            | b"PUT"
            | b"DELETE"
            | b"OPTIONS"
            | b"PATCH"
            | b"CONNECT"
            | b"TRACE"
    )
}

/// Parses the request at the front of `buf`.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Parsed<'a> {
    parse_after(buf, limits, 0)
}

/// [`parse`], told that the first `newline_free` bytes of `buf` hold no newline (they were
/// searched when the line was incomplete before), so a long line arriving in pieces is
/// searched once in all rather than once per piece.
pub fn parse_after<'a>(buf: &'a [u8], limits: &Limits, newline_free: usize) -> Parsed<'a> {
    let nl = match super::line::find(buf, limits, newline_free) {
        super::line::Line::Ends(nl) => nl,
        super::line::Line::Not(answer) => return answer,
    };
    let line_len = nl + 1;
    let mut line = &buf[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    // memcached tokenizes the line as a C string: a NUL ends it, and what follows on that
    // line is ignored (`get a\0b` is `get a`), so a key never holds a NUL.
    if let Some(nul) = memchr::memchr(0, line) {
        line = &line[..nul];
    }
    let Some(name) = split(line).next() else {
        return Parsed::error(ERROR, line_len);
    };
    if matches!(name, b"mg" | b"ms" | b"md" | b"ma" | b"mn" | b"me") {
        // The meta parser reads the line itself.
        return super::meta::parse(buf, line, line_len, limits);
    }
    // Tokens on the stack (memcached's MAX_TOKENS is 24); a longer line, a multi-key get,
    // spills to the heap. A Vec per line was a tenth of a text GET. Pushed in place: a
    // zeroed array was ~50 instructions a line, a collected SmallVec a memcpy moving it.
    let mut tokens: smallvec::SmallVec<[&'a [u8]; MAX_TOKENS]> = smallvec::SmallVec::new();
    for t in split(line) {
        tokens.push(t);
    }
    let n = tokens.len();
    let tokens: &[&'a [u8]] = &tokens;
    let cmd = |cmd: Command<'a>| Parsed::Command { cmd, len: line_len };
    let noreply_at = |i: usize| tokens.get(i) == Some(&&b"noreply"[..]);
    match name {
        // `bget`: memcached's old name for `get`, still answered as one.
        b"get" | b"gets" | b"bget" => {
            if n < 2 {
                return Parsed::error(ERROR, line_len);
            }
            let keys = super::command::Keys::from_slice(&tokens[1..]);
            if !keys.iter().all(|k| key_ok(k)) {
                return bad_format(line_len);
            }
            cmd(Command::Get {
                keys,
                cas: name == b"gets",
            })
        }
        b"gat" | b"gats" => {
            // memcached 1.6.18: `gat` alone is not a command; `gat <exptime>` without a key
            // checks the exptime and answers an empty `END`.
            if n < 2 {
                return Parsed::error(ERROR, line_len);
            }
            let Some(exptime) = parse_i32_low_bits(tokens[1]) else {
                return Parsed::error(BAD_EXPTIME, line_len);
            };
            let keys = super::command::Keys::from_slice(&tokens[2..]);
            if !keys.iter().all(|k| key_ok(k)) {
                return bad_format(line_len);
            }
            cmd(Command::Gat {
                exptime,
                keys,
                cas: name == b"gats",
            })
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" | b"getset" => {
            let op = match name {
                b"set" | b"getset" => Op::Set,
                b"add" => Op::Add,
                b"replace" => Op::Replace,
                b"append" => Op::Append,
                b"prepend" => Op::Prepend,
                _ => Op::Cas,
            };
            let base = if op == Op::Cas { 6 } else { 5 };
            if n != base && n != base + 1 {
                return Parsed::error(ERROR, line_len);
            }
            // memcached takes `noreply` from the last token, wherever it stands: a line one
            // token short whose last is `noreply` fails to parse, quietly.
            let noreply = noreply_at(n - 1);
            let key = tokens[1];
            let flags = parse_u32_low_bits(tokens[2]);
            let exptime = parse_i32_low_bits(tokens[3]);
            // memcached's safe_strtol into an int32: a length of 2^32 + 1 is 1.
            let vlen = parse_i32_low_bits(tokens[4]);
            let cas = if op == Op::Cas {
                parse_u64(tokens[5])
            } else {
                Some(0)
            };
            let (Some(flags), Some(exptime), Some(vlen), Some(cas)) = (flags, exptime, vlen, cas)
            else {
                return quiet_error(BAD_FORMAT, line_len, noreply);
            };
            // memcached adds 2 for the CRLF to an int: lengths that would overflow it are
            // a bad format, not too large.
            if !key_ok(key) || !(0..=i64::from(i32::MAX) - 2).contains(&vlen) {
                return quiet_error(BAD_FORMAT, line_len, noreply);
            }
            let vlen = vlen as usize;
            if !limits.fits(key.len(), flags, vlen) {
                return Parsed::Error {
                    error: TOO_LARGE,
                    len: line_len,
                    swallow: vlen + 2,
                    noreply,
                    close: false,
                    // Only a SET: memcached keeps the old value when an add, replace,
                    // append, prepend or cas is refused.
                    unlink: (op == Op::Set).then_some(Unlink::raw(key)),
                };
            }
            let data_end = limits.data_end(line_len, vlen);
            let total = data_end + 2;
            if buf.len() < total {
                let stageable = !matches!(op, Op::Append | Op::Prepend);
                if stageable && !limits.body_staged && vlen >= limits.stage_min {
                    if limits.refuse_unstaged {
                        return Parsed::Error {
                            error: OUT_OF_MEMORY,
                            len: line_len,
                            swallow: vlen + 2,
                            noreply,
                            close: false,
                            unlink: (op == Op::Set).then_some(Unlink::raw(key)),
                        };
                    }
                    return Parsed::Body {
                        header: line_len,
                        vlen,
                    };
                }
                return Parsed::Incomplete;
            }
            if &buf[data_end..total] != b"\r\n" {
                return Parsed::Error {
                    error: BAD_DATA_CHUNK,
                    len: total,
                    swallow: 0,
                    noreply,
                    close: false,
                    unlink: None,
                };
            }
            Parsed::Command {
                cmd: Command::Store {
                    op,
                    key,
                    flags,
                    exptime,
                    cas,
                    data: &buf[line_len..data_end],
                    noreply,
                    previous: name == b"getset",
                },
                len: total,
            }
        }
        b"delete" => {
            // memcached still accepts the legacy "delete <key> 0".
            let ok = match n {
                2 => true,
                3 => tokens[2] == b"0" || noreply_at(2),
                4 => tokens[2] == b"0" && noreply_at(3),
                _ => false,
            };
            // memcached takes 1 to 3 words after `delete` and answers ERROR otherwise.
            if !(2..=4).contains(&n) {
                return Parsed::error(ERROR, line_len);
            }
            // A key named "noreply" is a key: memcached looks for noreply only after it.
            let noreply = n > 2 && noreply_at(n - 1);
            if !ok {
                return quiet_error(DELETE_USAGE, line_len, noreply);
            }
            if !key_ok(tokens[1]) {
                return quiet_error(BAD_FORMAT, line_len, noreply);
            }
            cmd(Command::Delete {
                key: tokens[1],
                noreply,
                previous: false,
            })
        }
        b"getdel" => {
            // hkv's extension (KVCG's previous value): `getdel <key> [noreply]`.
            if n != 2 && !(n == 3 && noreply_at(2)) {
                return Parsed::error(ERROR, line_len);
            }
            let noreply = n == 3;
            if !key_ok(tokens[1]) {
                return quiet_error(BAD_FORMAT, line_len, noreply);
            }
            cmd(Command::Delete {
                key: tokens[1],
                noreply,
                previous: true,
            })
        }
        b"incr" | b"decr" => {
            if n != 3 && n != 4 {
                return Parsed::error(ERROR, line_len);
            }
            let noreply = noreply_at(n - 1);
            if !key_ok(tokens[1]) {
                return quiet_error(BAD_FORMAT, line_len, noreply);
            }
            let Some(delta) = parse_u64(tokens[2]) else {
                return quiet_error(BAD_DELTA, line_len, noreply);
            };
            cmd(Command::Arith {
                op: if name == b"incr" { Op::Incr } else { Op::Decr },
                key: tokens[1],
                delta,
                noreply,
            })
        }
        b"touch" => {
            if n != 3 && n != 4 {
                return Parsed::error(ERROR, line_len);
            }
            let noreply = noreply_at(n - 1);
            if !key_ok(tokens[1]) {
                return quiet_error(BAD_FORMAT, line_len, noreply);
            }
            let Some(exptime) = parse_i32_low_bits(tokens[2]) else {
                return quiet_error(BAD_EXPTIME, line_len, noreply);
            };
            cmd(Command::Touch {
                key: tokens[1],
                exptime,
                noreply,
            })
        }
        b"flush_all" => {
            if n > 3 {
                return Parsed::error(ERROR, line_len);
            }
            let noreply = n > 1 && noreply_at(n - 1);
            let delay = if n == 1 || (n == 2 && noreply) {
                Some(0)
            } else {
                // memcached ignores a second argument that is not "noreply".
                parse_i32_low_bits(tokens[1])
            };
            // A bad delay is answered after -F is checked, as memcached checks it.
            cmd(Command::FlushAll { delay, noreply })
        }
        b"version" => cmd(Command::Version),
        b"quit" => cmd(Command::Quit),
        b"shutdown" => cmd(Command::Shutdown {
            graceful: tokens[1..] == [b"graceful"],
            invalid: n > 1 && tokens[1..] != [b"graceful"],
        }),
        b"refresh_certs" => cmd(Command::RefreshCerts),
        b"verbosity" => {
            if n != 2 && n != 3 {
                return Parsed::error(ERROR, line_len);
            }
            let noreply = noreply_at(n - 1);
            let Some(level) = parse_u64(tokens[1]) else {
                return quiet_error(BAD_FORMAT, line_len, noreply);
            };
            // memcached keeps the number's low 32 bits and caps the level at 2.
            cmd(Command::Verbosity {
                level: (level as u32).min(2) as u8,
                noreply,
            })
        }
        b"watch" => {
            // Bare `watch` is `watch fetchers`, as in memcached; an unknown stream is ERROR.
            let streams = tokens[1..]
                .iter()
                .try_fold(0u8, |acc, t| hkv_types::watch::parse(t).map(|s| acc | s));
            match streams {
                Some(0) => cmd(Command::Watch {
                    streams: hkv_types::watch::FETCHERS,
                }),
                Some(streams) => cmd(Command::Watch { streams }),
                // memcached reads a last `noreply` first, then finds it no stream: silence.
                None => Parsed::Error {
                    error: ERROR,
                    len: line_len,
                    swallow: 0,
                    noreply: noreply_at(n - 1),
                    close: false,
                    unlink: None,
                },
            }
        }
        b"stats" => cmd(Command::Stats {
            args: tokens[1..].to_vec(),
        }),
        b"cache_memlimit" => {
            // memcached reads the megabytes into 32 bits and takes a third word that is not
            // noreply as nothing at all.
            let noreply = n == 3 && noreply_at(2);
            match (n, tokens.get(1).and_then(|t| parse_u32_low_bits(t))) {
                (2 | 3, Some(mb)) => cmd(Command::CacheMemlimit {
                    megabytes: u64::from(mb),
                    noreply,
                }),
                _ => Parsed::error(ERROR, line_len),
            }
        }
        b"slabs" => match (tokens.get(1).copied(), n) {
            // memcached reads both with `safe_strtol` into an `int32_t`: the low 32 bits.
            (Some(b"reassign"), 4) => {
                match (parse_i32_low_bits(tokens[2]), parse_i32_low_bits(tokens[3])) {
                    (Some(from), Some(to)) => cmd(Command::SlabsReassign { from, to }),
                    _ => Parsed::error(BAD_FORMAT, line_len),
                }
            }
            // As memcached: a level that is no number is a bad format, one out of range
            // an ERROR; the ratio has no meaning here (hkv's automove has no ratio).
            (Some(b"automove"), 3..) => {
                let noreply = noreply_at(n - 1);
                let mode = match tokens[2] {
                    // strtod's view of the token: white space around the number is fine.
                    b"ratio" => match tokens.get(3).map(|t| std::str::from_utf8(strtol_view(t))) {
                        Some(Ok(r)) if n >= 4 && r.parse::<f64>().is_ok() => None,
                        _ => return Parsed::error(ERROR, line_len),
                    },
                    level => match parse_u32(level) {
                        Some(mode @ 0..=2) => Some(mode as u8),
                        Some(_) => return Parsed::error(ERROR, line_len),
                        None => return Parsed::error(BAD_FORMAT, line_len),
                    },
                };
                cmd(Command::SlabsAutomove { mode, noreply })
            }
            _ => Parsed::error(ERROR, line_len),
        },
        b"lru_crawler" => match (tokens.get(1).copied(), tokens.get(2).copied()) {
            // `hash` walks memcached's hash table instead of its LRUs: every item either way.
            (Some(b"metadump"), Some(b"all" | b"hash")) if n == 3 => cmd(Command::MetaDump {
                classes: ClassList::All,
            }),
            (Some(b"metadump"), Some(list)) if n == 3 => cmd(Command::MetaDump {
                classes: class_ids(list),
            }),
            (Some(b"crawl"), Some(b"all")) if n == 3 => {
                cmd(Command::Crawler(CrawlerOp::Crawl(ClassList::All)))
            }
            (Some(b"crawl"), Some(list)) if n == 3 => {
                cmd(Command::Crawler(CrawlerOp::Crawl(class_ids(list))))
            }
            // memcached reads both with `safe_strtoul` into a `uint32_t`: the low 32 bits.
            (Some(b"sleep"), Some(t)) if n == 3 => match parse_u32_low_bits(t) {
                Some(us) if us <= 1_000_000 => cmd(Command::Crawler(CrawlerOp::Sleep(us))),
                Some(_) => Parsed::error(crate::errors::admin::CRAWLER_SLEEP, line_len),
                None => Parsed::error(BAD_FORMAT, line_len),
            },
            (Some(b"tocrawl"), Some(t)) if n == 3 => match parse_u32_low_bits(t) {
                Some(k) => cmd(Command::Crawler(CrawlerOp::ToCrawl(k))),
                None => Parsed::error(BAD_FORMAT, line_len),
            },
            (Some(b"enable"), None) => cmd(Command::Crawler(CrawlerOp::Enable)),
            (Some(b"disable"), None) => cmd(Command::Crawler(CrawlerOp::Disable)),
            _ => Parsed::error(ERROR, line_len),
        },
        // A web browser or an HTTP client aimed at the cache port: memcached hangs up
        // rather than answer a request from another protocol.
        m if is_http_method(m) && tokens.last().is_some_and(|t| t.starts_with(b"HTTP/")) => {
            Parsed::Error {
                error: "",
                len: line_len,
                swallow: 0,
                noreply: true,
                close: true,
                unlink: None,
            }
        }
        v if super::vector::NAMES.contains(&v) => {
            super::vector::parse(buf, tokens, line_len, limits)
        }
        _ => Parsed::error(ERROR, line_len),
    }
}

/// The class ids of `lru_crawler crawl|metadump <ids>`, as memcached's `strtok_r` reads
/// them: comma-separated, empty ones skipped (`1,2,,3` is 1, 2 and 3), each 1 to 63.
fn class_ids(list: &[u8]) -> ClassList {
    list.split(|&b| b == b',')
        .filter(|t| !t.is_empty())
        .map(|t| parse_u32(t).filter(|&c| (1..64).contains(&c)))
        .collect::<Option<Vec<u32>>>()
        .map_or(ClassList::Bad, ClassList::Ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe stored `a\0b` under its whole name; memcached ends the line at the NUL.
    #[test]
    fn regression_a_nul_ends_the_command_line_as_in_memcached() {
        let limits = Limits::default();
        let Parsed::Command { cmd, len } = parse(b"get a\0b\r\nnext", &limits) else {
            panic!("get with a NUL did not parse");
        };
        assert_eq!(len, 9);
        assert_eq!(
            cmd,
            Command::Get {
                keys: vec![&b"a"[..]].into(),
                cas: false
            }
        );
        // `set a\0b 0 0 1` is `set a`: too few tokens, and its data line is a command.
        assert!(matches!(
            parse(b"set a\0b 0 0 1\r\nx\r\n", &limits),
            Parsed::Error {
                error: ERROR,
                len: 15,
                ..
            }
        ));
        assert!(matches!(
            parse(b"version\0junk\r\n", &limits),
            Parsed::Command {
                cmd: Command::Version,
                len: 14
            }
        ));
        assert!(matches!(
            parse(b"\0\r\n", &limits),
            Parsed::Error { error: ERROR, .. }
        ));
    }

    /// hkv refused `set k 0 0 4294967297`, which memcached's safe_strtol into an int32
    /// reads as a length of 1; -2^63 is 0 (checked with 1.6.18).
    #[test]
    fn regression_a_length_keeps_its_low_32_bits_as_in_memcached() {
        let limits = Limits::default();
        for line in [
            &b"set k 0 0 4294967297\r\nx\r\n"[..],
            b"ms k 4294967297\r\nx\r\n",
        ] {
            assert!(
                matches!(parse(line, &limits), Parsed::Command { len, .. } if len == line.len()),
                "{line:?}"
            );
        }
        assert!(matches!(
            parse(b"set k 0 0 -9223372036854775808\r\nx\r\n", &limits),
            Parsed::Error {
                error: crate::errors::BAD_DATA_CHUNK,
                ..
            }
        ));
    }

    /// A differential: memcached answers `bget` as `get`; hkv said ERROR.
    #[test]
    fn regression_bget_is_get() {
        let limits = Limits::default();
        let Parsed::Command { cmd, .. } = parse(b"bget a b\r\n", &limits) else {
            panic!("bget did not parse");
        };
        assert_eq!(
            cmd,
            Command::Get {
                keys: vec![&b"a"[..], b"b"].into(),
                cas: false
            }
        );
    }

    #[test]
    fn regression_admin_numbers_and_class_lists_are_read_as_memcached_reads_them() {
        let limits = Limits::default();
        let cmd = |line: &[u8]| match parse(line, &limits) {
            Parsed::Command { cmd, .. } => format!("{cmd:?}"),
            other => panic!("{line:?}: {other:?}"),
        };
        // strtok_r skips empty ids; a list of none is a list, where a bad id is refused.
        let crawl = |classes| format!("{:?}", Command::Crawler(CrawlerOp::Crawl(classes)));
        assert_eq!(
            cmd(b"lru_crawler crawl 1,2,,3\r\n"),
            crawl(ClassList::Ids(vec![1, 2, 3]))
        );
        for bad in [
            &b"lru_crawler crawl 1,64\r\n"[..],
            b"lru_crawler crawl 0\r\n",
            b"lru_crawler crawl 1,x\r\n",
        ] {
            assert_eq!(cmd(bad), crawl(ClassList::Bad));
        }
        for none in [&b"lru_crawler crawl ,\r\n"[..], b"lru_crawler crawl ,,\r\n"] {
            assert_eq!(cmd(none), crawl(ClassList::Ids(vec![])));
        }
        assert_eq!(cmd(b"lru_crawler crawl all\r\n"), crawl(ClassList::All));
        assert_eq!(
            cmd(b"lru_crawler metadump ,1,,2\r\n"),
            format!(
                "{:?}",
                Command::MetaDump {
                    classes: ClassList::Ids(vec![1, 2])
                }
            )
        );
        // safe_strtol into an int32_t: the low 32 bits.
        assert_eq!(
            cmd(b"slabs reassign 4294967297 4294967298\r\n"),
            format!("{:?}", Command::SlabsReassign { from: 1, to: 2 })
        );
        assert_eq!(
            cmd(b"slabs reassign 99999999999 1\r\n"),
            format!(
                "{:?}",
                Command::SlabsReassign {
                    from: 1_215_752_191,
                    to: 1
                }
            )
        );
    }
}
