#![no_main]
//! Any bytes as a stream of binary-protocol requests.

use hkv_proto::binary::{parse, BinParsed, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let max_value = 4096;
    let mut pos = 0;
    while pos < data.len() {
        let buf = &data[pos..];
        match parse(buf, max_value) {
            BinParsed::Incomplete => {
                // Only a short header or a body still arriving may wait for more bytes.
                assert!(buf.len() < HEADER_LEN || buf[0] == 0x80);
                break;
            }
            BinParsed::Close => {
                assert_ne!(buf[0], 0x80, "a request magic was refused");
                break;
            }
            BinParsed::Error { len, swallow, close, .. } => {
                assert_eq!(len, HEADER_LEN);
                if close {
                    break;
                }
                pos = pos.saturating_add(len).saturating_add(swallow).min(data.len());
            }
            BinParsed::Request { req, len } => {
                assert!(len >= HEADER_LEN && len <= buf.len());
                assert!(req.key.len() <= 250);
                assert!(req.value.len() <= max_value);
                assert_eq!(HEADER_LEN + req.extras.len() + req.key.len() + req.value.len(), len);
                pos += len;
            }
        }
    }
});
