//! Hostile binary-protocol input: answered or closed as memcached does, and the server keeps
//! serving everyone else.

mod common;

use std::io::{Read, Write};
use std::net::Shutdown;

use common::{assert_healthy, Client, Hkv};

fn header(opcode: u8, keylen: u16, extlen: u8, bodylen: u32, opaque: u32) -> Vec<u8> {
    let mut b = vec![0x80, opcode];
    b.extend_from_slice(&keylen.to_be_bytes());
    b.push(extlen);
    b.push(0);
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&bodylen.to_be_bytes());
    b.extend_from_slice(&opaque.to_be_bytes());
    b.extend_from_slice(&[0; 8]);
    b
}

/// Reads one response packet: (opcode, status, opaque, body).
fn packet(c: &mut Client) -> (u8, u16, u32, Vec<u8>) {
    let mut h = [0u8; 24];
    c.stream.read_exact(&mut h).expect("response header");
    assert_eq!(h[0], 0x81, "response magic");
    let bodylen = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let mut body = vec![0; bodylen];
    c.stream.read_exact(&mut body).unwrap();
    (
        h[1],
        u16::from_be_bytes([h[6], h[7]]),
        u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        body,
    )
}

#[test]
fn bad_magic_closes_the_connection() {
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    // A binary connection (first byte 0x80) whose next request has a response magic.
    let mut noop = header(0x0a, 0, 0, 0, 1);
    c.send(&noop);
    assert_eq!(packet(&mut c).1, 0);
    noop[0] = 0x81;
    c.send(&noop);
    assert!(c.is_closed());
    assert_healthy(&h);
}

#[test]
fn lengths_that_disagree_get_an_error_and_a_close() {
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    let mut req = header(0x00, 10, 0, 3, 42);
    req.extend_from_slice(b"abc");
    c.send(&req);
    let (_, status, opaque, body) = packet(&mut c);
    assert_eq!(
        (status, opaque, body.as_slice()),
        (0x81, 42, &b"Unknown command"[..])
    );
    assert!(c.is_closed());
    assert_healthy(&h);
}

#[test]
fn huge_body_lengths_are_refused_without_buffering() {
    let h = Hkv::start(&["-m", "16"]);
    let mut c = h.connect();
    // SET with a 4 GB body: "Too large." at once; the body would be skipped as it arrived.
    let mut req = header(0x01, 1, 8, u32::MAX, 7);
    req.extend_from_slice(&[0; 8]);
    req.push(b'k');
    c.send(&req);
    let (op, status, opaque, body) = packet(&mut c);
    assert_eq!(
        (op, status, opaque, body.as_slice()),
        (0x01, 0x03, 7, &b"Too large."[..])
    );
    // GET with a value is malformed: "Invalid arguments" (memcached's protocol error), closed.
    let mut c2 = h.connect();
    let mut get = header(0x00, 1, 0, 100_000, 1);
    get.push(b'k');
    c2.send(&get);
    assert_eq!(packet(&mut c2).1, 0x04);
    assert!(c2.is_closed());
    assert_healthy(&h);
}

#[test]
fn truncated_headers_and_unknown_opcodes() {
    let h = Hkv::start(&[]);
    for cut in [1, 5, 12, 23] {
        let mut c = h.connect();
        c.send(&header(0x00, 1, 0, 1, 1)[..cut]);
        c.stream.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let _ = c.stream.read_to_end(&mut rest);
        assert!(rest.is_empty(), "a partial header got a reply");
    }
    let mut c = h.connect();
    let mut unk = header(0x7e, 0, 0, 4, 9);
    unk.extend_from_slice(b"junk");
    c.send(&unk);
    let noop = header(0x0a, 0, 0, 0, 10);
    c.send(&noop);
    assert_eq!(packet(&mut c).1, 0x81);
    let (op, status, opaque, _) = packet(&mut c);
    assert_eq!(
        (op, status, opaque),
        (0x0a, 0, 10),
        "the connection survives an unknown opcode"
    );
    c.stream.flush().unwrap();
    assert_healthy(&h);
}

#[test]
fn quiet_gets_answer_only_hits_and_noop_ends_the_batch() {
    let h = Hkv::start(&["-t", "2"]);
    let mut c = h.connect();
    let mut set = header(0x11, 2, 8, 8 + 2 + 1, 0); // SETQ
    set.extend_from_slice(&[0; 8]);
    set.extend_from_slice(b"k1v");
    c.send(&set);
    let mut batch = Vec::new();
    for (i, key) in [b"k1", b"k2", b"k3"].iter().enumerate() {
        let mut g = header(0x0d, 2, 0, 2, i as u32); // GETKQ
        g.extend_from_slice(*key);
        batch.extend_from_slice(&g);
    }
    batch.extend_from_slice(&header(0x0a, 0, 0, 0, 99));
    c.send(&batch);
    let (op, status, opaque, body) = packet(&mut c);
    assert_eq!((op, status, opaque), (0x0d, 0, 0));
    assert_eq!(&body[4..], b"k1v", "flags, key, value");
    let (op, _, opaque, _) = packet(&mut c);
    assert_eq!((op, opaque), (0x0a, 99), "misses of quiet gets are silent");
}

#[test]
fn regression_binary_expiration_is_unsigned() {
    // Found with spymemcached: a binary SET with expiration 0xffffffff (an application's -1)
    // is a Unix time in 2106 to memcached, which keeps the item; hkv read it as -1 and
    // dropped it at once.
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    let mut set = header(0x01, 1, 8, 8 + 1 + 1, 1); // SET
    set.extend_from_slice(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    set.extend_from_slice(b"kv");
    c.send(&set);
    let (op, status, _, _) = packet(&mut c);
    assert_eq!((op, status), (0x01, 0));
    let mut get = header(0x00, 1, 0, 1, 2);
    get.extend_from_slice(b"k");
    c.send(&get);
    let (op, status, _, body) = packet(&mut c);
    assert_eq!((op, status), (0x00, 0), "the item is kept");
    assert_eq!(&body[4..], b"v");
}

#[test]
fn regression_a_large_sasl_body_without_dash_s_is_an_unknown_command_and_dropped() {
    // Found by a differential probe: 2 MiB of SASL_AUTH data without -S got "Too large."
    // (memcached: "Unknown command"; both drop the body and read on).
    let h = Hkv::start(&["-m", "16"]);
    let mut c = h.connect();
    let data = vec![b'x'; 2 << 20];
    let mut auth = header(0x21, 5, 0, (5 + data.len()) as u32, 5);
    auth.extend_from_slice(b"PLAIN");
    auth.extend_from_slice(&data);
    auth.extend(header(0x0a, 0, 0, 0, 6));
    c.send(&auth);
    let (op, status, opaque, body) = packet(&mut c);
    assert_eq!(
        (op, status, opaque, body.as_slice()),
        (0x21, 0x81, 5, &b"Unknown command"[..])
    );
    let (op, status, opaque, _) = packet(&mut c);
    assert_eq!((op, status, opaque), (0x0a, 0, 6), "the NOOP after it");
    assert_healthy(&h);
}

#[test]
fn regression_an_unknown_opcode_with_a_251_byte_key_closes_as_in_memcached() {
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    let mut req = header(0x40, 251, 0, 251, 9);
    req.extend_from_slice(&[b'k'; 251]);
    req.extend(header(0x0a, 0, 0, 0, 10));
    c.send(&req);
    let (op, status, opaque, _) = packet(&mut c);
    assert_eq!((op, status, opaque), (0x40, 0x04, 9), "Invalid arguments");
    assert!(c.is_closed());
    assert_healthy(&h);
}
