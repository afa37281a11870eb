//! Invariants every parse result must satisfy, shared by the targets.

use hkv_proto::text::{parse, Command, Limits, Parsed};

/// Parses `data` as a stream of requests, checking each result; returns how many parsed.
pub fn check_stream(data: &[u8], limits: &Limits) -> usize {
    let mut pos = 0;
    let mut n = 0;
    while pos < data.len() {
        let buf = &data[pos..];
        match parse(buf, limits) {
            Parsed::Incomplete => break,
            Parsed::Body { header, vlen } => {
                assert!(vlen >= limits.stage_min && vlen <= limits.max_item_size);
                assert!(header <= buf.len() && header + vlen + 2 > buf.len());
                // Once staged, the line followed by the block's terminator is the command.
                let mut line = buf[..header].to_vec();
                line.extend_from_slice(b"\r\n");
                let staged = Limits {
                    body_staged: true,
                    ..*limits
                };
                match parse(&line, &staged) {
                    Parsed::Command { len, .. } => assert_eq!(len, line.len()),
                    Parsed::Error { len, .. } => assert!(len <= line.len()),
                    other => panic!("a staged command parsed as {other:?}"),
                }
                break;
            }
            Parsed::Command { cmd, len } => {
                assert!(len > 0 && len <= buf.len(), "command length out of range");
                check_command(&cmd, limits);
                pos += len;
                n += 1;
            }
            Parsed::Error {
                error,
                len,
                swallow,
                close,
                ..
            } => {
                assert!(len > 0 && len <= buf.len(), "error length out of range");
                assert!(
                    close || !error.is_empty(),
                    "an error without words must close"
                );
                assert!(
                    error.is_empty()
                        || error == "ERROR"
                        || error.starts_with("CLIENT_ERROR ")
                        || error.starts_with("SERVER_ERROR "),
                    "not memcached's vocabulary: {error}"
                );
                if close {
                    break;
                }
                pos += len;
                pos = pos.saturating_add(swallow).min(data.len());
            }
        }
    }
    n
}

fn check_command(cmd: &Command<'_>, limits: &Limits) {
    match cmd {
        Command::Get { keys, .. } | Command::Gat { keys, .. } => {
            assert!(keys
                .iter()
                .all(|k| !k.is_empty() && k.len() <= 250 && !k.contains(&b' ')));
        }
        Command::Store { key, data, .. } => {
            assert!(key.len() <= 250 && !key.is_empty());
            assert!(data.len() <= limits.max_item_size);
        }
        Command::Delete { key, .. } | Command::Arith { key, .. } | Command::Touch { key, .. } => {
            assert!(key.len() <= 250 && !key.is_empty());
        }
        Command::Meta(m) => {
            if let Some(flags) = m.flags() {
                let ret = flags.returned();
                for (i, l) in ret.iter().enumerate() {
                    assert!(hkv_proto::text::META_FLAG_LETTERS.contains(l));
                    assert!(!ret[..i].contains(l), "duplicate flag accepted");
                }
                assert!(flags.opaque.map_or(0, |o| o.len()) < 32, "opaque too long");
            }
        }
        _ => {}
    }
}
