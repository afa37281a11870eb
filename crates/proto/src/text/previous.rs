//! KVCG's previous value as text commands (hkv's extension, docs/protocol-extensions.md):
//! `getset <key> <flags> <exptime> <bytes> [noreply]` stores like `set` and answers the
//! value the key held before; `getdel <key> [noreply]` deletes and answers the value it
//! deleted. Either answers as `get` would: `VALUE <key> <flags> <bytes>` + data + `END`, or
//! `END` alone when there was nothing. Parsed with `set` and `delete` (parse.rs).

use hkv_types::{Previous, Response};

/// Writes the reply to `getset` / `getdel`: `r` is the write's result, `previous` what it
/// replaced and `value` that value's bytes.
pub fn compose(
    out: &mut Vec<u8>,
    key: &[u8],
    r: &Response,
    previous: Option<&Previous>,
    value: &[u8],
) {
    match (r, previous) {
        (Response::Stored | Response::Deleted, Some(p)) => {
            out.extend_from_slice(b"VALUE ");
            out.extend_from_slice(key);
            out.extend_from_slice(format!(" {} {}\r\n", p.flags, p.len).as_bytes());
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\nEND\r\n");
        }
        (Response::Stored | Response::Deleted | Response::NotFound | Response::Miss, None) => {
            out.extend_from_slice(b"END\r\n")
        }
        (other, _) => {
            out.extend_from_slice(crate::errors::for_response(other).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{parse, Command, Limits, Parsed};

    #[test]
    fn parsed_with_set_and_delete() {
        let Parsed::Command { cmd, len } = parse(b"getset k 3 0 2\r\nab\r\n", &Limits::default())
        else {
            panic!()
        };
        assert_eq!(len, 20);
        assert!(matches!(
            cmd,
            Command::Store {
                previous: true,
                data: b"ab",
                flags: 3,
                ..
            }
        ));
        assert!(matches!(
            parse(b"getdel k noreply\r\n", &Limits::default()),
            Parsed::Command {
                cmd: Command::Delete {
                    previous: true,
                    noreply: true,
                    ..
                },
                ..
            }
        ));
        for bad in [
            &b"getdel\r\n"[..],
            b"getdel k 0\r\n",
            b"getdel k x y\r\n",
            b"getset k 0 0\r\n",
        ] {
            assert!(
                matches!(
                    parse(bad, &Limits::default()),
                    Parsed::Error { error: "ERROR", .. }
                ),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn replies_as_get_would() {
        let mut out = Vec::new();
        let p = Previous {
            offset: 0,
            len: 2,
            flags: 7,
        };
        compose(&mut out, b"k", &Response::Stored, Some(&p), b"ab");
        compose(&mut out, b"k", &Response::Stored, None, b"");
        compose(&mut out, b"k", &Response::NotFound, None, b"");
        compose(&mut out, b"k", &Response::TooLarge, None, b"");
        assert_eq!(
            out,
            b"VALUE k 7 2\r\nab\r\nEND\r\nEND\r\nEND\r\nSERVER_ERROR object too large for cache\r\n"
        );
    }
}
