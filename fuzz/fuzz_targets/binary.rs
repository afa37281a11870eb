#![no_main]
//! Any bytes as a stream of binary-protocol requests.

use hkv_proto::binary::{parse_with, BinParsed, HEADER_LEN};
use hkv_proto::text::Limits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let max_value = 4096;
    let limits = Limits {
        max_item_size: max_value,
        stage_min: 64,
        // Both ways: with -S the SASL opcodes parse as requests, without it as unknown.
        sasl: data.len() % 2 == 1,
        ..Limits::default()
    };
    let mut pos = 0;
    while pos < data.len() {
        let buf = &data[pos..];
        match parse_with(buf, &limits) {
            BinParsed::Incomplete => {
                // Only a short header or a body still arriving may wait for more bytes.
                assert!(buf.len() < HEADER_LEN || buf[0] == 0x80);
                break;
            }
            BinParsed::Body { header, vlen } => {
                assert!(vlen >= 64 && vlen <= max_value && header <= buf.len());
                let staged = Limits {
                    body_staged: true,
                    ..limits
                };
                match parse_with(&buf[..header], &staged) {
                    BinParsed::Request { len, req } => {
                        assert_eq!(len, header);
                        assert!(req.value.is_empty());
                    }
                    other => panic!("a staged request parsed as {other:?}"),
                }
                break;
            }
            BinParsed::Close => {
                assert_ne!(buf[0], 0x80, "a request magic was refused");
                break;
            }
            BinParsed::Error {
                len,
                swallow,
                close,
                unlink,
                ..
            } => {
                // A refused SET's key is read (its old value goes): the header's lengths say
                // how far, and the key lies within what was read.
                match unlink {
                    Some(key) => {
                        assert!(len > HEADER_LEN && len <= buf.len());
                        assert!(!key.is_empty() && key.len() <= 250);
                        assert!(matches!(buf[1], 0x01 | 0x11), "only SET and SETQ drop the old value");
                    }
                    None => assert_eq!(len, HEADER_LEN),
                }
                if close {
                    break;
                }
                pos = pos
                    .saturating_add(len)
                    .saturating_add(swallow)
                    .min(data.len());
            }
            BinParsed::Request { req, len } => {
                assert!(len >= HEADER_LEN && len <= buf.len());
                assert!(req.key.len() <= 250);
                assert!(req.value.len() <= max_value);
                assert_eq!(
                    HEADER_LEN + req.extras.len() + req.key.len() + req.value.len(),
                    len
                );
                pos += len;
            }
        }
    }
});
