#![no_main]
//! Any bytes, as a stream of classic text requests.

use hkv_proto::text::Limits;
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_item_size: 4096,
        cas: true,
        max_get_line: 8192,
        max_line: 4096,
        // Small, so that data blocks still arriving are reported for staging.
        stage_min: 64,
        refuse_unstaged: false,
        body_staged: false,
        sasl: false,
    };
    common::check_stream(data, &limits);
});
