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
