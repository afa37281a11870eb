//! `-M` (memcached's "return error on memory exhausted instead of evicting"): once memory is
//! spent, a write answers `SERVER_ERROR out of memory storing object` and every item stored
//! before it is still there.

mod common;

use common::Hkv;

#[test]
fn with_m_a_full_server_refuses_writes_and_keeps_every_item() {
    let h = Hkv::start(&["-M", "-m", "4", "-t", "1"]);
    let mut c = h.connect();
    let value = "x".repeat(1000);
    let mut stored = 0;
    let mut refused = false;
    for i in 0..20_000 {
        let r = c.call(&format!("set k{i} 0 0 1000\r\n{value}\r\n"), "\r\n");
        match r.as_str() {
            "STORED\r\n" => stored += 1,
            "SERVER_ERROR out of memory storing object\r\n" => {
                refused = true;
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(refused, "4 MB never filled up");
    assert!(stored > 100, "{stored}");
    for i in 0..stored {
        let r = c.call(&format!("get k{i}\r\n"), "END\r\n");
        assert!(
            r.starts_with(&format!("VALUE k{i} 0 1000\r\n")),
            "k{i} is gone: {r:?}"
        );
    }
    let s = c.call("stats\r\n", "END\r\n");
    assert!(s.contains("STAT evictions 0\r\n"), "{s}");
    let s = c.call("stats settings\r\n", "END\r\n");
    assert!(s.contains("STAT evictions off\r\n"), "{s}");
    // A delete makes room again.
    c.expect("delete k0\r\n", "DELETED\r\n");
    c.expect(&format!("set again 0 0 1000\r\n{value}\r\n"), "STORED\r\n");
}

/// From a helper's audit: with `-M` and memory spent, a refused append (text or binary),
/// prepend or replace unlinked the key's old value, where memcached keeps it (it unlinks only
/// for SET), and `cmd_set` counted the refused stores, which memcached does not.
#[test]
fn regression_with_m_a_refused_append_keeps_the_old_value_as_in_memcached() {
    let h = Hkv::start(&["-M", "-m", "8", "-t", "1"]);
    let mut c = h.connect();
    let old = common::set_big(&mut c, "old", 99_000, b'O');
    let mut n = 0;
    for size in [200_000, 99_000, 20_000, 2_000, 200] {
        loop {
            let v = "z".repeat(size);
            let r = c.call(&format!("set f{n} 0 0 {size}\r\n{v}\r\n"), "\r\n");
            n += 1;
            if r != "STORED\r\n" {
                assert_eq!(r, "SERVER_ERROR out of memory storing object\r\n");
                break;
            }
        }
    }
    let sets = c.stat_n("", "cmd_set");
    let piece = "P".repeat(100_000);
    // A replace of a value that fits the old one's chunk is stored in place, so a larger one.
    let big = "R".repeat(200_000);
    for (verb, v) in [("append", &piece), ("prepend", &piece), ("replace", &big)] {
        c.expect(
            &format!("{verb} old 0 0 {}\r\n{v}\r\n", v.len()),
            "SERVER_ERROR out of memory storing object\r\n",
        );
        c.send(b"get old\r\n");
        let mut want = common::value_block("old", &old);
        want.extend_from_slice(b"END\r\n");
        assert_eq!(common::read_exact(&mut c, want.len()), want, "{verb}");
    }
    // Binary APPEND (a connection's protocol is its first byte's): ENOMEM in memcached's
    // words, the value kept.
    let mut b = h.connect();
    b.send(&common::bin_request(0x0e, b"old", &[], piece.as_bytes()));
    let reply = common::read_exact(&mut b, 24 + 29);
    assert_eq!(&reply[6..8], &[0, 0x82]);
    assert_eq!(&reply[24..], b"Out of memory allocating item");
    c.send(b"get old\r\n");
    let mut want = common::value_block("old", &old);
    want.extend_from_slice(b"END\r\n");
    assert_eq!(
        common::read_exact(&mut c, want.len()),
        want,
        "binary append"
    );
    assert_eq!(
        c.stat_n("", "cmd_set"),
        sets,
        "refused stores are not counted"
    );
    // A SET that cannot be stored unlinks the old value, as memcached does.
    c.expect(
        &format!("set old 0 0 200000\r\n{big}\r\n"),
        "SERVER_ERROR out of memory storing object\r\n",
    );
    c.expect("get old\r\n", "END\r\n");
    assert_eq!(c.stat_n("", "evictions"), 0);
}
