#![no_main]
//! Meta command lines: the input is prefixed with a meta command name so the fuzzer spends
//! its time inside the flag parser.

use hkv_proto::text::Limits;
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let name: &[u8] = match which % 6 {
        0 => b"mg ",
        1 => b"ms ",
        2 => b"md ",
        3 => b"ma ",
        4 => b"mn ",
        _ => b"me ",
    };
    let mut buf = name.to_vec();
    buf.extend_from_slice(rest);
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
    common::check_stream(&buf, &limits);
});
