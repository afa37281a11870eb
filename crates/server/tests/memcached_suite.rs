//! Differences from memcached found by running memcached 1.6.18's own test suite (its `t/`
//! directory, tests/clients/test_memcached_suite.py) against hkv, each pinned here.

mod common;

use std::io::Read;

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

/// Reads one response packet: (opcode, status, key, value).
fn packet(c: &mut Client) -> (u8, u16, Vec<u8>, Vec<u8>) {
    let mut h = [0u8; 24];
    c.stream.read_exact(&mut h).expect("response header");
    assert_eq!(h[0], 0x81, "response magic");
    let keylen = u16::from_be_bytes([h[2], h[3]]) as usize;
    let extlen = h[4] as usize;
    let bodylen = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let mut body = vec![0; bodylen];
    c.stream.read_exact(&mut body).unwrap();
    let key = body[extlen..extlen + keylen].to_vec();
    let value = body[extlen + keylen..].to_vec();
    (h[1], u16::from_be_bytes([h[6], h[7]]), key, value)
}

fn bin_stat(c: &mut Client, group: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut req = header(0x10, group.len() as u16, 0, group.len() as u32, 7);
    req.extend_from_slice(group.as_bytes());
    c.send(&req);
    let mut pairs = Vec::new();
    loop {
        let (op, status, key, value) = packet(c);
        assert_eq!((op, status), (0x10, 0), "stats {group:?}");
        if key.is_empty() {
            return pairs;
        }
        pairs.push((key, value));
    }
}

fn bin_set(key: &[u8], value_len: u32, opcode: u8) -> Vec<u8> {
    let mut req = header(
        opcode,
        key.len() as u16,
        8,
        8 + key.len() as u32 + value_len,
        1,
    );
    req.extend_from_slice(&[0; 8]);
    req.extend_from_slice(key);
    req
}

#[test]
fn regression_binary_stats_detail_is_answered_as_memcached() {
    // t/binary.t starts with a binary `stats detail on`: hkv answered "Not found", and the
    // suite's client died on it.
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    assert!(
        bin_stat(&mut c, "detail on").is_empty(),
        "only the terminator"
    );
    // A connection speaks the protocol of its first byte: text goes on another.
    h.connect().expect("set p:k 0 0 1\r\nv\r\n", "STORED\r\n");
    let dump = bin_stat(&mut c, "detail dump");
    assert_eq!(dump.len(), 1);
    assert_eq!(dump[0].0, b"detailed");
    assert_eq!(
        dump[0].1,
        b"PREFIX p get 0 hit 0 set 1 del 0\r\nEND\r\n".to_vec()
    );
    assert!(bin_stat(&mut c, "detail off").is_empty());
    let mut req = header(0x10, 8, 0, 8, 9);
    req.extend_from_slice(b"detail x");
    c.send(&req);
    assert_eq!(
        packet(&mut c).1,
        0x0001,
        "an unknown detail word is Not found"
    );
    assert_healthy(&h);
}

#[test]
fn regression_a_too_large_binary_set_drops_the_old_value() {
    // t/binary.t: memcached unlinks the old item when a SET (or SETQ) is refused as too
    // large, so a GET no longer sees stale data; an ADD or APPEND refused so keeps it.
    let h = Hkv::start(&["-t", "1", "-I", "1m"]);
    let (mut c, mut t) = (h.connect(), h.connect());
    let big = (1 << 20) + 1;
    for (opcode, kept) in [(0x01u8, false), (0x11, false), (0x03, true), (0x0e, true)] {
        t.expect("set k 0 0 3\r\nold\r\n", "STORED\r\n");
        let mut req = if opcode == 0x0e {
            let mut r = header(opcode, 1, 0, 1 + big, 1);
            r.extend_from_slice(b"k");
            r
        } else {
            bin_set(b"k", big, opcode)
        };
        req.resize(req.len() + big as usize, b'x');
        c.send(&req);
        let (_, status, _, _) = packet(&mut c);
        assert_eq!(status, 0x0003, "too large (opcode {opcode:#x})");
        let want = if kept {
            "VALUE k 0 3\r\nold\r\nEND\r\n"
        } else {
            "END\r\n"
        };
        t.expect("get k\r\n", want);
    }
    // memcached 1.6.18 counts no binary refusal in store_too_large (its text ones only).
    assert_eq!(t.stat_u64("", "store_too_large"), Some(0));
    assert_healthy(&h);
}

#[test]
fn regression_a_refused_add_keeps_the_old_value() {
    // Found side by side with memcached 1.6.18: only a SET (text or ms) refused as too large
    // drops the key's old value; add, replace, append, prepend and cas keep it.
    let h = Hkv::start(&["-t", "1", "-I", "1k"]);
    let mut c = h.connect();
    let big = "x".repeat(2048);
    for (cmd, kept) in [
        ("set", false),
        ("add", true),
        ("replace", true),
        ("append", true),
        ("prepend", true),
        ("cas", true),
    ] {
        c.expect("set k 0 0 3\r\nold\r\n", "STORED\r\n");
        let cas = if cmd == "cas" { " 1" } else { "" };
        c.expect(
            &format!("{cmd} k 0 0 2048{cas}\r\n{big}\r\n"),
            "SERVER_ERROR object too large for cache\r\n",
        );
        let want = if kept {
            "VALUE k 0 3\r\nold\r\nEND\r\n"
        } else {
            "END\r\n"
        };
        c.expect("get k\r\n", want);
    }
    c.expect("set k 0 0 3\r\nold\r\n", "STORED\r\n");
    c.expect(
        &format!("ms k 2048 MA\r\n{big}\r\n"),
        "SERVER_ERROR object too large for cache\r\n",
    );
    c.expect("get k\r\n", "END\r\n");
    // t/stats.t: refusals before the data arrives count in store_too_large.
    assert_eq!(c.stat_u64("", "store_too_large"), Some(7));
    assert_healthy(&h);
}

#[test]
fn regression_lengths_past_int_max_are_a_bad_format() {
    // t/issue_70.t: memcached adds 2 to the length as an int, so lengths above
    // INT_MAX - 2 are a bad command line, not too large (and no data block is swallowed).
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    for line in [
        "set k 0 0 2147483647\r\n",
        "set k 0 0 2147483646\r\n",
        "cas k 0 0 2147483647 1\r\n",
        "ms k 2147483646 T0\r\n",
    ] {
        c.expect(line, "CLIENT_ERROR bad command line format\r\n");
    }
    c.expect("scoobydoo\r\n", "ERROR\r\n");
    c.expect(
        "set k 0 0 2147483645\r\n",
        "SERVER_ERROR object too large for cache\r\n",
    );
    assert_healthy(&h);
}

#[test]
fn regression_slabs_automove_is_parsed_as_memcached() {
    // t/strtol-testing.t: a level that is no number is a bad format; memcached also takes
    // a ratio, extra words and noreply.
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    c.expect(
        "slabs automove invalid\r\n",
        "CLIENT_ERROR bad command line format\r\n",
    );
    c.expect(
        "slabs automove -1\r\n",
        "CLIENT_ERROR bad command line format\r\n",
    );
    c.expect("slabs automove 3\r\n", "ERROR\r\n");
    c.expect("slabs automove ratio\r\n", "ERROR\r\n");
    c.expect("slabs automove ratio 0.8\r\n", "OK\r\n");
    c.expect("slabs automove 1 2\r\n", "OK\r\n");
    c.expect("slabs automove 0 noreply\r\nmn\r\n", "MN\r\n");
    assert_healthy(&h);
}

#[test]
fn regression_stats_reset_clears_stats_detail() {
    // t/stats-detail.t: the prefix statistics start again after `stats reset`.
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    c.expect("stats detail on\r\n", "OK\r\n");
    c.expect("set foo:1 0 0 1\r\nv\r\n", "STORED\r\n");
    c.expect("stats reset\r\n", "RESET\r\n");
    c.expect("stats detail dump\r\n", "END\r\n");
    c.expect("get foo:1\r\n", "VALUE foo:1 0 1\r\nv\r\nEND\r\n");
    c.expect(
        "stats detail dump\r\n",
        "PREFIX foo get 1 hit 1 set 0 del 0\r\nEND\r\n",
    );
}

#[test]
fn disable_flush_all_refuses_text_and_binary_flushes() {
    // memcached's -F (t/flush-all.t).
    let h = Hkv::start(&["-t", "1", "-F"]);
    let (mut c, mut t) = (h.connect(), h.connect());
    t.expect("set k 0 0 1\r\nv\r\n", "STORED\r\n");
    t.expect("flush_all\r\n", "CLIENT_ERROR flush_all not allowed\r\n");
    t.expect("flush_all 0 noreply\r\nmn\r\n", "MN\r\n");
    // -F is said before a bad delay is found, as memcached checks (hkv said the delay).
    t.expect("flush_all x\r\n", "CLIENT_ERROR flush_all not allowed\r\n");
    c.send(&header(0x08, 0, 0, 0, 5));
    let (op, status, _, value) = packet(&mut c);
    assert_eq!(
        (op, status, &value[..]),
        (0x08, 0x0020, &b"Auth failure."[..])
    );
    c.send(&header(0x18, 0, 0, 0, 6));
    assert_eq!(packet(&mut c).1, 0x0020, "FLUSHQ is refused aloud too");
    t.expect("get k\r\n", "VALUE k 0 1\r\nv\r\nEND\r\n");
    assert_eq!(t.stat("settings", "flush_enabled").as_deref(), Some("no"));
    // memcached counts the refused text flushes, not the binary ones.
    assert_eq!(t.stat_u64("", "cmd_flush"), Some(3));
}

#[test]
fn protocol_flag_fixes_what_connections_speak() {
    // memcached's -B (t/00-startup.t): with `binary`, text is not understood (a bad magic
    // byte: the connection closes); with `ascii`, binary bytes are read as text.
    let h = Hkv::start(&["-t", "1", "-B", "binary"]);
    let mut c = h.connect();
    assert_eq!(
        bin_stat(&mut c, "settings")
            .iter()
            .find(|(k, _)| k == b"binding_protocol")
            .map(|(_, v)| v.clone()),
        Some(b"binary".to_vec())
    );
    let mut t = h.connect();
    t.send(b"version\r\n");
    assert!(t.is_closed(), "text on a binary-only server");
    let h = Hkv::start(&["-t", "1", "-B", "ascii"]);
    let mut c = h.connect();
    c.send(&header(0x0b, 0, 0, 0, 1)); // VERSION
    c.send(b"\r\nmn\r\n");
    assert_eq!(c.read_until(b"MN\r\n"), "ERROR\r\nMN\r\n");
    assert_eq!(
        c.stat("settings", "binding_protocol").as_deref(),
        Some("ascii")
    );
}

#[test]
fn backlog_and_requests_per_event_flags_take_effect() {
    // memcached's -b and -R (t/00-startup.t, t/issue_61.t): the settings say what the
    // server runs with, and a connection's pipeline yields after -R requests.
    let h = Hkv::start(&["-t", "1", "-b", "8675", "-R", "1"]);
    let mut c = h.connect();
    assert_eq!(c.stat_u64("settings", "tcp_backlog"), Some(8675));
    assert_eq!(c.stat_u64("settings", "reqs_per_event"), Some(1));
    c.send(&b"set foobar 0 0 5\r\nBubba\r\n".repeat(6));
    c.read_until(&b"STORED\r\n".repeat(6));
    assert!(c.stat_u64("", "conn_yields").unwrap() >= 5);
    assert_healthy(&h);
}
