//! Requests and replies on the wire: memcached text, meta and binary, and Redis RESP.
//!
//! The load generator only needs to write a GET or a SET and to know where one reply ends and
//! whether it was a hit, so each protocol has an encoder and a reply splitter, nothing more.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// memcached text: `get k [k ...]`, `set k 0 0 n`.
    Text,
    /// memcached meta: `mg k v`, `ms k n`.
    Meta,
    /// memcached binary: GET and SET opcodes.
    Binary,
    /// Redis: `GET k`, `SET k v`.
    Resp,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Text => "text",
            Protocol::Meta => "meta",
            Protocol::Binary => "binary",
            Protocol::Resp => "resp",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Get,
    Set,
}

/// What one complete reply said.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Outcome {
    pub hits: u32,
    /// The server answered with an error (counted; the run goes on).
    pub error: bool,
}

/// Appends a GET of `keys`. Only the text protocol has a multi-key GET; the others get one
/// request per key, back to back (the caller expects one reply per key for them).
pub fn encode_get(p: Protocol, keys: &[&[u8]], out: &mut Vec<u8>) {
    match p {
        Protocol::Text => {
            out.extend_from_slice(b"get");
            for k in keys {
                out.push(b' ');
                out.extend_from_slice(k);
            }
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Meta => {
            for k in keys {
                out.extend_from_slice(b"mg ");
                out.extend_from_slice(k);
                out.extend_from_slice(b" v\r\n");
            }
        }
        Protocol::Binary => {
            for k in keys {
                binary_header(out, 0x00, k.len(), 0, 0);
                out.extend_from_slice(k);
            }
        }
        Protocol::Resp => {
            for k in keys {
                out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
                bulk(out, k);
            }
        }
    }
}

pub fn encode_set(p: Protocol, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match p {
        Protocol::Text => {
            out.extend_from_slice(b"set ");
            out.extend_from_slice(key);
            out.extend_from_slice(format!(" 0 0 {}\r\n", value.len()).as_bytes());
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Meta => {
            out.extend_from_slice(b"ms ");
            out.extend_from_slice(key);
            out.extend_from_slice(format!(" {}\r\n", value.len()).as_bytes());
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Binary => {
            binary_header(out, 0x01, key.len(), 8, value.len());
            out.extend_from_slice(&[0; 8]); // flags, exptime
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        Protocol::Resp => {
            out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
            bulk(out, key);
            bulk(out, value);
        }
    }
}

fn binary_header(out: &mut Vec<u8>, opcode: u8, key_len: usize, extras: usize, value: usize) {
    out.push(0x80);
    out.push(opcode);
    out.extend_from_slice(&(key_len as u16).to_be_bytes());
    out.push(extras as u8);
    out.extend_from_slice(&[0, 0, 0]); // data type, vbucket
    out.extend_from_slice(&((extras + key_len + value) as u32).to_be_bytes());
    out.extend_from_slice(&[0; 12]); // opaque, cas
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// Why a reply could not be read: the stream is not in the protocol (the run stops).
#[derive(Debug, thiserror::Error)]
#[error("unexpected reply from the server: {0:?}")]
pub struct BadReply(pub String);

/// If `buf` starts with one whole reply to a `kind` request, its length and outcome.
pub fn split_reply(
    p: Protocol,
    kind: Kind,
    buf: &[u8],
) -> Result<Option<(usize, Outcome)>, BadReply> {
    match p {
        Protocol::Text => text_reply(kind, buf),
        Protocol::Meta => meta_reply(kind, buf),
        Protocol::Binary => Ok(binary_reply(kind, buf)),
        Protocol::Resp => resp_reply(kind, buf),
    }
}

fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[..end], end + 2))
}

fn is_error_line(l: &[u8]) -> bool {
    l.starts_with(b"SERVER_ERROR") || l.starts_with(b"CLIENT_ERROR") || l == b"ERROR"
}

fn bad(l: &[u8]) -> BadReply {
    BadReply(String::from_utf8_lossy(&l[..l.len().min(80)]).into_owned())
}

fn text_reply(kind: Kind, buf: &[u8]) -> Result<Option<(usize, Outcome)>, BadReply> {
    let mut pos = 0;
    let mut out = Outcome::default();
    loop {
        let Some((l, n)) = line(&buf[pos..]) else {
            return Ok(None);
        };
        match kind {
            Kind::Set => {
                out.error = l != b"STORED";
                if out.error && !is_error_line(l) {
                    return Err(bad(l));
                }
                return Ok(Some((n, out)));
            }
            Kind::Get if l == b"END" => return Ok(Some((pos + n, out))),
            Kind::Get if l.starts_with(b"VALUE ") => {
                let bytes: usize = l
                    .split(|&b| b == b' ')
                    .nth(3)
                    .and_then(|t| std::str::from_utf8(t).ok()?.parse().ok())
                    .ok_or_else(|| bad(l))?;
                if buf.len() < pos + n + bytes + 2 {
                    return Ok(None);
                }
                pos += n + bytes + 2;
                out.hits += 1;
            }
            Kind::Get if is_error_line(l) => {
                out.error = true;
                return Ok(Some((pos + n, out)));
            }
            Kind::Get => return Err(bad(l)),
        }
    }
}

fn meta_reply(kind: Kind, buf: &[u8]) -> Result<Option<(usize, Outcome)>, BadReply> {
    let Some((l, n)) = line(buf) else {
        return Ok(None);
    };
    let mut out = Outcome::default();
    match kind {
        Kind::Get if l.starts_with(b"VA ") => {
            let bytes: usize = l
                .split(|&b| b == b' ')
                .nth(1)
                .and_then(|t| std::str::from_utf8(t).ok()?.parse().ok())
                .ok_or_else(|| bad(l))?;
            if buf.len() < n + bytes + 2 {
                return Ok(None);
            }
            out.hits = 1;
            Ok(Some((n + bytes + 2, out)))
        }
        Kind::Get if l == b"EN" => Ok(Some((n, out))),
        Kind::Set if l.starts_with(b"HD") => Ok(Some((n, out))),
        _ if is_error_line(l) || l.starts_with(b"NS") => {
            out.error = true;
            Ok(Some((n, out)))
        }
        _ => Err(bad(l)),
    }
}

fn binary_reply(kind: Kind, buf: &[u8]) -> Option<(usize, Outcome)> {
    if buf.len() < 24 {
        return None;
    }
    let body = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    if buf.len() < 24 + body {
        return None;
    }
    let status = u16::from_be_bytes([buf[6], buf[7]]);
    let out = match (kind, status) {
        (Kind::Get, 0) => Outcome {
            hits: 1,
            error: false,
        },
        (Kind::Get, 1) | (Kind::Set, 0) => Outcome::default(),
        _ => Outcome {
            hits: 0,
            error: true,
        },
    };
    Some((24 + body, out))
}

fn resp_reply(kind: Kind, buf: &[u8]) -> Result<Option<(usize, Outcome)>, BadReply> {
    let Some((l, n)) = line(buf) else {
        return Ok(None);
    };
    let mut out = Outcome::default();
    match (kind, l.first()) {
        (_, Some(b'-')) => {
            out.error = true;
            Ok(Some((n, out)))
        }
        (Kind::Set, Some(b'+')) => Ok(Some((n, out))),
        (Kind::Get, Some(b'$')) if l == b"$-1" => Ok(Some((n, out))),
        (Kind::Get, Some(b'$')) => {
            let bytes: usize = std::str::from_utf8(&l[1..])
                .ok()
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| bad(l))?;
            if buf.len() < n + bytes + 2 {
                return Ok(None);
            }
            out.hits = 1;
            Ok(Some((n + bytes + 2, out)))
        }
        _ => Err(bad(l)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(p: Protocol, kind: Kind, reply: &[u8]) -> Outcome {
        // Every proper prefix is incomplete, the whole reply is one reply.
        for cut in 0..reply.len() {
            assert_eq!(split_reply(p, kind, &reply[..cut]).unwrap(), None, "{cut}");
        }
        let (n, o) = split_reply(p, kind, reply).unwrap().unwrap();
        assert_eq!(n, reply.len());
        o
    }

    #[test]
    fn text_replies() {
        let r = b"VALUE a 0 2\r\nhi\r\nVALUE b 0 3\r\nEND\r\nEND\r\n";
        assert_eq!(whole(Protocol::Text, Kind::Get, r).hits, 2);
        assert_eq!(whole(Protocol::Text, Kind::Get, b"END\r\n").hits, 0);
        assert!(!whole(Protocol::Text, Kind::Set, b"STORED\r\n").error);
        assert!(
            whole(
                Protocol::Text,
                Kind::Set,
                b"SERVER_ERROR out of memory storing object\r\n"
            )
            .error
        );
        assert!(split_reply(Protocol::Text, Kind::Get, b"HELLO\r\n").is_err());
    }

    #[test]
    fn meta_replies() {
        assert_eq!(whole(Protocol::Meta, Kind::Get, b"VA 2\r\nhi\r\n").hits, 1);
        assert_eq!(whole(Protocol::Meta, Kind::Get, b"EN\r\n").hits, 0);
        assert!(!whole(Protocol::Meta, Kind::Set, b"HD\r\n").error);
    }

    #[test]
    fn binary_replies() {
        let mut hit = vec![0x81, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 6];
        hit.extend_from_slice(&[0; 12]);
        hit.extend_from_slice(&[0, 0, 0, 0, b'h', b'i']);
        assert_eq!(whole(Protocol::Binary, Kind::Get, &hit).hits, 1);
        let mut miss = vec![0x81, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9];
        miss.extend_from_slice(&[0; 12]);
        miss.extend_from_slice(b"Not found");
        let o = whole(Protocol::Binary, Kind::Get, &miss);
        assert_eq!((o.hits, o.error), (0, false));
    }

    #[test]
    fn resp_replies() {
        assert_eq!(whole(Protocol::Resp, Kind::Get, b"$2\r\nhi\r\n").hits, 1);
        assert_eq!(whole(Protocol::Resp, Kind::Get, b"$-1\r\n").hits, 0);
        assert!(!whole(Protocol::Resp, Kind::Set, b"+OK\r\n").error);
        assert!(whole(Protocol::Resp, Kind::Set, b"-OOM no\r\n").error);
    }

    #[test]
    fn encoders_write_what_memcached_parses() {
        let mut b = Vec::new();
        encode_get(Protocol::Text, &[b"a", b"bc"], &mut b);
        assert_eq!(b, b"get a bc\r\n");
        b.clear();
        encode_set(Protocol::Meta, b"k", b"vv", &mut b);
        assert_eq!(b, b"ms k 2\r\nvv\r\n");
        b.clear();
        encode_set(Protocol::Binary, b"k", b"vv", &mut b);
        assert_eq!(b.len(), 24 + 8 + 1 + 2);
        assert_eq!(&b[8..12], &11u32.to_be_bytes());
        b.clear();
        encode_get(Protocol::Resp, &[b"k"], &mut b);
        assert_eq!(b, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }
}
