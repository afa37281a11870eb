//! KVCG's previous value (issue 18): `getset`, `getdel` and meta `G`, end to end, and
//! atomicity: concurrent `getset`s on one key form one chain in which every written value
//! is handed back exactly once.

mod common;

use std::collections::HashSet;
use std::thread;

use common::{assert_healthy, engines, Client, Hkv};

#[test]
fn getset_and_getdel_answer_as_get_would() {
    let h = Hkv::start(&["-t", "2", "-I", "1m"]);
    let mut c = h.connect();
    c.expect("getset k 3 0 2\r\nab\r\n", "END\r\n");
    c.expect("getset k 5 0 3\r\ncde\r\n", "VALUE k 3 2\r\nab\r\nEND\r\n");
    c.expect("get k\r\n", "VALUE k 5 3\r\ncde\r\nEND\r\n");
    c.expect("getset k 6 0 1 noreply\r\nf\r\nmn\r\n", "MN\r\n");
    c.expect("getdel k\r\n", "VALUE k 6 1\r\nf\r\nEND\r\n");
    c.expect("getdel k\r\nget k\r\n", "END\r\nEND\r\n");
    c.expect(
        "set k 0 0 1\r\nx\r\ngetdel k noreply\r\nget k\r\n",
        "STORED\r\nEND\r\n",
    );
    // A value over -I: refused as set refuses it, and the old value goes too.
    c.expect("set k 0 0 1\r\nx\r\n", "STORED\r\n");
    c.send(b"getset k 0 0 2000000\r\n");
    c.send(&vec![b'y'; 2_000_002]);
    c.expect("", "SERVER_ERROR object too large for cache\r\n");
    c.expect("get k\r\n", "END\r\n");
    c.expect(
        "getdel\r\ngetdel a b\r\ngetset k 0 0\r\n",
        "ERROR\r\nERROR\r\nERROR\r\n",
    );
    c.expect(
        &format!("getdel {}\r\n", "k".repeat(251)),
        "CLIENT_ERROR bad command line format\r\n",
    );
    assert_healthy(&h);
}

#[test]
fn meta_g_returns_the_previous_value_like_mg_v() {
    let h = Hkv::start(&["-t", "2"]);
    let mut c = h.connect();
    c.expect("ms m 2 G\r\nab\r\n", "HD\r\n");
    c.expect("ms m 3 G F9 f s k\r\nxyz\r\n", "VA 2 f0 s2 km\r\nab\r\n");
    c.expect("mg m v f\r\n", "VA 3 f9\r\nxyz\r\n");
    c.expect("ms m 1 G q\r\nz\r\nmn\r\n", "VA 3\r\nxyz\r\nMN\r\n");
    c.expect("md m G O7\r\n", "VA 1 O7\r\nz\r\n");
    c.expect("md m G\r\n", "NF\r\n");
    // Not stored (ADD of a present key): the usual status, no value.
    c.expect("ms m 1\r\na\r\nms m 1 ME G\r\nb\r\n", "HD\r\nNS\r\n");
}

#[test]
fn concurrent_getsets_hand_back_every_value_once() {
    for engine in engines() {
        let h = Hkv::start(&["-t", "2", "--engine", engine]);
        let mut c = h.connect();
        c.expect("set chain 0 0 4\r\nseed\r\n", "STORED\r\n");
        let addr = h.addr;
        let workers: Vec<_> = (0..8)
            .map(|w| {
                thread::spawn(move || {
                    let mut c = Client::connect(addr);
                    let mut got = Vec::new();
                    for i in 0..200 {
                        let v = format!("w{w}-{i:03}");
                        let r = c.call(
                            &format!("getset chain 0 0 {}\r\n{v}\r\n", v.len()),
                            "END\r\n",
                        );
                        let prev = r.lines().nth(1).expect("a previous value").to_string();
                        got.push(prev);
                    }
                    got
                })
            })
            .collect();
        let mut handed_back: Vec<String> = Vec::new();
        for w in workers {
            handed_back.extend(w.join().unwrap());
        }
        let last = c.call("get chain\r\n", "END\r\n");
        let last = last.lines().nth(1).unwrap().to_string();
        let mut all: HashSet<String> = handed_back.iter().cloned().collect();
        assert_eq!(
            all.len(),
            handed_back.len(),
            "{engine}: a value was handed back twice"
        );
        assert!(
            all.insert(last),
            "{engine}: the final value was also handed back"
        );
        let mut written: HashSet<String> = (0..8)
            .flat_map(|w| (0..200).map(move |i| format!("w{w}-{i:03}")))
            .collect();
        written.insert("seed".into());
        assert_eq!(
            all, written,
            "{engine}: every write is in the chain exactly once"
        );
    }
}
