//! Values sent from item memory (`--zero-copy-min`, docs/network.md): every protocol's
//! replies are byte for byte those of a server that copies.

mod common;

use common::Hkv;

const BIG: usize = 50_000;

fn big(seed: u8) -> String {
    (0..BIG)
        .map(|i| (b'a' + ((i as u8).wrapping_mul(7) ^ seed) % 26) as char)
        .collect()
}

/// The NOOP response that ends a binary exchange.
fn noop_reply() -> Vec<u8> {
    let mut p = vec![0x81, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    p.extend_from_slice(&0xdead_beefu32.to_be_bytes());
    p.extend_from_slice(&[0; 8]);
    p
}

/// Every read protocol's replies for the same requests, from a server started with `args`;
/// and its `zero_copy_values`.
fn replies(args: &[&str]) -> (Vec<String>, u64) {
    let h = Hkv::start(args);
    let mut c = h.connect();
    let (a, b) = (big(1), big(2));
    let mut out = Vec::new();
    out.push(c.call(
        &format!("set a 5 0 {BIG}\r\n{a}\r\nset b 6 0 {BIG}\r\n{b}\r\nset s 7 0 5\r\nsmall\r\n"),
        "STORED\r\nSTORED\r\nSTORED\r\n",
    ));
    out.push(c.call("get a s b nope a\r\n", "END\r\n"));
    out.push(c.call("gets b a\r\n", "END\r\n"));
    out.push(c.call("gat 100 a\r\n", "END\r\n"));
    out.push(c.call("mg a v f k c\r\nmg s v\r\nmg b s v q\r\nmn\r\n", "MN\r\n"));
    // Binary: GETK, GETKQ of a hit and of a miss, then NOOP.
    let mut req = common::bin_request(0x0c, b"a", &[], &[]);
    req.extend(common::bin_request(0x0d, b"b", &[], &[]));
    req.extend(common::bin_request(0x0d, b"nope", &[], &[]));
    req.extend(common::bin_request(0x0a, b"", &[], &[]));
    let mut cb = h.connect();
    cb.send(&req);
    out.push(cb.read_until(&noop_reply()));
    let zero_copy = c.stat_u64("hkv", "zero_copy_values").unwrap_or(0);
    (out, zero_copy)
}

#[test]
fn replies_sent_from_item_memory_are_those_of_copies_in_every_protocol() {
    // One worker, one partition: the CAS values of both servers agree.
    for io in ["epoll", "auto"] {
        let (copied, none) = replies(&["-t", "1", "--io", io, "--zero-copy-min", "0"]);
        assert_eq!(none, 0, "{io}: --zero-copy-min 0 copies every value");
        let (sent, pinned) = replies(&["-t", "1", "--io", io, "--zero-copy-min", "1024"]);
        // get: a a b; gets: b a; gat: a; mg: a b; binary: a b.
        assert_eq!(pinned, 10, "{io}: every large hit went without a copy");
        for (i, (s, c)) in sent.iter().zip(&copied).enumerate() {
            assert!(s == c, "{io}: exchange {i} differs");
        }
        assert!(sent[1].contains(&big(1)) && sent[1].contains("VALUE s 7 5\r\nsmall\r\n"));
    }
}
