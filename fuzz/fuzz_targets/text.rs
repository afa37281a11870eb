#![no_main]
//! Any bytes, as a stream of classic text requests.

use hkv_proto::text::Limits;
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_item_size: 4096,
        max_get_line: 8192,
    };
    common::check_stream(data, &limits);
});
