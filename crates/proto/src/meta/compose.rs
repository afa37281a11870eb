//! WR of the meta commands: engine results as memcached's meta replies. Return flags are
//! echoed in request order, then `Z`, `X` and `W`, as memcached writes them.

use std::io::Write;

use crate::output::Output;
use hkv_types::{hit, Response, Responses};

use crate::reply::{error_line, field, line};
use crate::step::{Echo, MetaKind, MetaStep};
use crate::text::decode_key;

fn encode_base64(raw: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(raw)
}

fn ttl_left(expiry: u32, now: u32) -> i64 {
    if expiry == 0 {
        -1
    } else {
        i64::from(expiry.saturating_sub(now))
    }
}

fn token(rbuf: &[u8], (off, len): (u32, u32)) -> &[u8] {
    &rbuf[off as usize..(off + len) as usize]
}

/// What the return flags report about the item the command found or left.
struct Found {
    flags: u32,
    cas: u64,
    len: u32,
    expiry: u32,
    atime: u32,
    bits: u8,
}

/// Writes " <flag><value>" for each returned flag in request order, then Z, X and W.
fn ret_flags(out: &mut Vec<u8>, e: &Echo, rbuf: &[u8], found: Option<&Found>, now: u32) {
    for &l in &e.ret[..e.ret_len as usize] {
        match (l, found) {
            (b'O', _) => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(token(rbuf, e.opaque));
            }
            (b'k', _) => {
                out.extend_from_slice(b" k");
                // The item decides, as memcached's mg does: a key stored with `b` comes back
                // encoded, one stored raw (text set, or created by `mg N`/`ma N`) raw,
                // however it was asked for. Without an item, the request decides.
                // A raw key that would break the reply line (spaces, CR LF, controls: a
                // binary-protocol key) stays encoded, where memcached writes it raw.
                let mut binary = found.map_or(e.base64, |i| i.bits & hit::BINARY_KEY != 0);
                let sent = token(rbuf, e.key);
                let mut raw = [0u8; crate::MAX_KEY_LEN];
                let decoded = (!binary && e.base64)
                    .then(|| decode_key(sent, &mut raw))
                    .flatten()
                    .map(|n| &raw[..n]);
                match decoded {
                    Some(k) if k.iter().all(|&b| b > b' ' && b != 0x7f) => out.extend_from_slice(k),
                    Some(_) => {
                        binary = true;
                        out.extend_from_slice(sent);
                    }
                    None if binary && !e.base64 => {
                        out.extend_from_slice(encode_base64(sent).as_bytes())
                    }
                    None => out.extend_from_slice(sent),
                }
                if binary {
                    out.extend_from_slice(b" b");
                }
            }
            (b'c', Some(i)) => {
                field(out, b'c', i.cas);
            }
            (b'f', Some(i)) => {
                field(out, b'f', i.flags);
            }
            (b's', Some(i)) => {
                field(out, b's', i.len);
            }
            (b't', Some(i)) => {
                field(out, b't', ttl_left(i.expiry, now));
            }
            (b'h', Some(i)) => {
                field(out, b'h', u8::from(i.bits & hit::FETCHED != 0));
            }
            (b'l', Some(i)) => {
                field(out, b'l', now.saturating_sub(i.atime));
            }
            _ => {}
        }
    }
    if let Some(i) = found {
        if i.bits & hit::WON_ELSEWHERE != 0 {
            out.extend_from_slice(b" Z");
        }
        if i.bits & hit::STALE != 0 {
            out.extend_from_slice(b" X");
        }
        if i.bits & hit::WIN != 0 {
            out.extend_from_slice(b" W");
        }
    }
}

/// The reply of one meta step. `me` reports an item's size as the store holds it: its
/// `item_header` bytes, key and value, in the slab class `class_of(key_len, value_len)`.
pub fn compose(
    m: &MetaStep,
    rbuf: &[u8],
    res: &Responses,
    now: u32,
    item_header: usize,
    class_of: impl Fn(usize, usize) -> usize,
    out: &mut Output,
) {
    match m {
        MetaStep::Noop => line(out, "MN"),
        MetaStep::Debug { idx, key, base64 } => match res.results[*idx as usize] {
            Response::Value {
                cas,
                len,
                expiry,
                atime,
                bits,
                ..
            } => {
                // The key as stored: its raw bytes, or base64 if it was stored with `b`.
                let mut raw = [0u8; crate::MAX_KEY_LEN];
                let sent = token(rbuf, *key);
                let key: &[u8] = match base64.then(|| decode_key(sent, &mut raw)).flatten() {
                    Some(n) => &raw[..n],
                    None => sent,
                };
                let size = item_header + key.len() + len as usize;
                out.extend_from_slice(b"ME ");
                if bits & hit::BINARY_KEY != 0 {
                    out.extend_from_slice(encode_base64(key).as_bytes());
                } else {
                    out.extend_from_slice(key);
                }
                // memcached prints exptime minus now: minus the TTL left.
                let exp = if expiry == 0 {
                    -1
                } else {
                    -ttl_left(expiry, now)
                };
                let _ = write!(
                    out,
                    " exp={exp} la={} cas={cas} fetch={} cls={} size={size}\r\n",
                    now.saturating_sub(atime),
                    if bits & hit::FETCHED != 0 {
                        "yes"
                    } else {
                        "no"
                    },
                    class_of(key.len(), len as usize),
                );
            }
            _ => line(out, "EN"),
        },
        MetaStep::Reply {
            kind,
            idx,
            echo,
            unless_cas,
        } => write_reply(
            *kind,
            &res.results[*idx as usize],
            res,
            *idx,
            echo,
            *unless_cas,
            rbuf,
            now,
            out,
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn write_reply(
    kind: MetaKind,
    r: &Response,
    res: &Responses,
    idx: u32,
    echo: &Echo,
    unless_cas: Option<u64>,
    rbuf: &[u8],
    now: u32,
    out: &mut Output,
) {
    if echo.opaque_too_long {
        // memcached's order: ma's own failure (a non-numeric value, no memory), else the
        // opaque's error, whatever the command found or did (a CAS that did not match too).
        let own = matches!(kind, MetaKind::Arith)
            && !matches!(
                r,
                Response::Number(_) | Response::NotFound | Response::Miss | Response::Exists
            );
        if !own {
            line(out, crate::errors::meta::OPAQUE_TOO_LONG);
            return;
        }
    }
    let after = res.after.get(idx as usize).copied().unwrap_or_default();
    // ms, md and ma echo a key as the request sent it (memcached), so what they leave
    // is reported as keyed the request's way.
    let written = Found {
        flags: 0,
        cas: after.cas,
        len: after.len,
        expiry: after.expiry,
        atime: now,
        bits: if echo.base64 { hit::BINARY_KEY } else { 0 },
    };
    let code: &str = match (kind, r) {
        (
            MetaKind::Get,
            Response::Value {
                flags,
                cas,
                len,
                expiry,
                atime,
                bits,
                ..
            },
        ) => {
            let found = Found {
                flags: *flags,
                cas: *cas,
                len: *len,
                expiry: *expiry,
                atime: *atime,
                bits: *bits,
            };
            if echo.value && unless_cas != Some(*cas) {
                out.extend_from_slice(b"VA");
                field(out, 0, *len);
                ret_flags(out, echo, rbuf, Some(&found), now);
                out.extend_from_slice(b"\r\n");
                out.value(res, r);
                out.extend_from_slice(b"\r\n");
                return;
            }
            // mg's q hides only the EN of a miss.
            out.extend_from_slice(b"HD");
            ret_flags(out, echo, rbuf, Some(&found), now);
            out.extend_from_slice(b"\r\n");
            return;
        }
        (MetaKind::Get, _) => {
            if !echo.quiet {
                // memcached echoes k and O on a miss too.
                out.extend_from_slice(b"EN");
                ret_flags(out, echo, rbuf, None, now);
                out.extend_from_slice(b"\r\n");
            }
            return;
        }
        (MetaKind::Arith, Response::Number(n)) => {
            // memcached answers a counter that `N` created even under q.
            if echo.quiet && !after.created {
                return;
            }
            if echo.value {
                let text = n.to_string();
                let _ = write!(out, "VA {}", text.len());
                ret_flags(out, echo, rbuf, Some(&written), now);
                out.extend_from_slice(b"\r\n");
                line(out, &text);
                return;
            }
            "HD"
        }
        (MetaKind::Arith, Response::OutOfMemory) => {
            line(out, crate::errors::ARITH_OUT_OF_MEMORY);
            return;
        }
        (_, Response::Stored | Response::Deleted) => "HD",
        (_, Response::NotStored) => "NS",
        (_, Response::Exists) => "EX",
        (_, Response::NotFound | Response::Miss) => "NF",
        (_, other) => {
            line(out, error_line(other));
            return;
        }
    };
    if let (Some(p), "HD", MetaKind::Set | MetaKind::Delete) = (after.previous, code, kind) {
        // `G`: the value replaced or deleted, as `mg v` answers a value (f and s describe
        // it; c and t the item left behind). A value is never suppressed by q.
        let prev = Found {
            flags: p.flags,
            len: p.len,
            ..written
        };
        let _ = write!(out, "VA {}", p.len);
        ret_flags(out, echo, rbuf, Some(&prev), now);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(res.previous(&p));
        out.extend_from_slice(b"\r\n");
        return;
    }
    // q: the nominal reply (HD) is suppressed; failures are always sent.
    if echo.quiet && code == "HD" && !after.created {
        return;
    }
    out.extend_from_slice(code.as_bytes());
    // ms reports `c0` when it stored nothing; the others echo only k and O then.
    let found = (code == "HD" || kind == MetaKind::Set).then_some(&written);
    ret_flags(out, echo, rbuf, found, now);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use crate::testkit::{serve_text, Model};

    fn serve(model: &mut Model, input: &str) -> String {
        String::from_utf8(serve_text(model, input.as_bytes())).unwrap()
    }

    #[test]
    fn return_flags_in_request_order_and_quiet_mode_as_memcached() {
        let mut m = Model::default();
        assert_eq!(serve(&mut m, "ms k 2 T0 F7 c\r\nhi\r\n"), "HD c1\r\n");
        assert_eq!(
            serve(&mut m, "mg k v f t s c k O9\r\n"),
            "VA 2 f7 t-1 s2 c1 kk O9\r\nhi\r\n"
        );
        assert_eq!(serve(&mut m, "mg k s v\r\n"), "VA 2 s2\r\nhi\r\n");
        assert_eq!(serve(&mut m, "mg k\r\n"), "HD\r\n");
        // Misses: EN, or nothing with q; mn always answers, ending a quiet pipeline.
        assert_eq!(
            serve(&mut m, "mg nope v\r\nmg nope v q\r\nmn\r\n"),
            "EN\r\nMN\r\n"
        );
        assert_eq!(
            serve(&mut m, "md nope q\r\nmd k q\r\nmd k\r\n"),
            "NF\r\nNF\r\n"
        );
    }

    #[test]
    fn base64_keys_are_echoed_as_sent_and_bad_ones_refused() {
        let mut m = Model::default();
        // "a b" is not a valid text key; base64 carries it.
        assert_eq!(serve(&mut m, "ms YSBi 1 b\r\nx\r\n"), "HD\r\n");
        assert_eq!(serve(&mut m, "mg YSBi b k v\r\n"), "VA 1 kYSBi b\r\nx\r\n");
        assert!(serve(&mut m, "mg !!!! b v\r\n").starts_with("CLIENT_ERROR"));
    }

    #[test]
    fn mg_echoes_a_key_as_its_item_holds_it_and_the_others_as_sent() {
        let mut m = Model::default();
        // Stored raw, asked for in base64: raw (memcached's mg reads the item's flag).
        assert_eq!(serve(&mut m, "set ab 0 0 1\r\nx\r\n"), "STORED\r\n");
        assert_eq!(serve(&mut m, "mg YWI= b k v\r\n"), "VA 1 kab\r\nx\r\n");
        // Stored in base64, asked for raw: encoded.
        assert_eq!(serve(&mut m, "ms YWI= 1 b k\r\ny\r\n"), "HD kYWI= b\r\n");
        assert_eq!(serve(&mut m, "mg ab k v\r\n"), "VA 1 kYWI= b\r\ny\r\n");
        // md, ma and a miss echo the request.
        assert_eq!(serve(&mut m, "md ab k\r\n"), "HD kab\r\n");
        assert_eq!(serve(&mut m, "mg YWI= b k\r\n"), "EN kYWI= b\r\n");
        // Keyed raw (an append's join) but holding a space, as a binary-protocol key may:
        // kept encoded, or the reply line would break.
        assert_eq!(serve(&mut m, "ms YSBi 1 b\r\nx\r\n"), "HD\r\n");
        assert_eq!(serve(&mut m, "ms YSBi 1 b MA\r\ny\r\n"), "HD\r\n");
        assert_eq!(serve(&mut m, "mg YSBi b k v\r\n"), "VA 2 kYSBi b\r\nxy\r\n");
    }

    #[test]
    fn me_reports_the_item_as_the_store_holds_it() {
        let mut m = Model::default();
        serve(&mut m, "ms k 2\r\nhi\r\n");
        // The test server's clock is 1000 and its header 48 bytes: 48 + 1 + 2.
        assert_eq!(
            serve(&mut m, "me k\r\nme nope\r\n"),
            "ME k exp=-1 la=1000 cas=1 fetch=no cls=1 size=51\r\nEN\r\n"
        );
    }

    #[test]
    fn out_of_memory_is_worded_as_memcached_words_it_for_ms_and_ma() {
        use crate::step::{Echo, MetaKind, MetaStep};
        let res = hkv_types::Responses {
            results: vec![hkv_types::Response::OutOfMemory],
            ..hkv_types::Responses::default()
        };
        let echo = Echo {
            ret: [0; 17],
            ret_len: 0,
            key: (0, 1),
            opaque: (0, 0),
            base64: false,
            quiet: false,
            value: false,
            opaque_too_long: false,
        };
        for (kind, words) in [
            (
                MetaKind::Set,
                "SERVER_ERROR out of memory storing object\r\n",
            ),
            (MetaKind::Arith, "SERVER_ERROR out of memory\r\n"),
        ] {
            let step = MetaStep::Reply {
                kind,
                idx: 0,
                echo,
                unless_cas: None,
            };
            let mut out = crate::output::Output::default();
            super::compose(&step, b"k", &res, 1000, 48, |_, _| 1, &mut out);
            assert_eq!(String::from_utf8_lossy(&out), words);
        }
    }
}
