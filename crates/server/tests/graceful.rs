//! Graceful stop: on SIGTERM hkv takes no new connections but answers what clients already
//! sent before it closes their connections, and an idle connection does not hold it up.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::Hkv;

#[test]
fn sigterm_answers_what_was_already_sent() {
    // A long fixed batch interval keeps the requests waiting in the server when the
    // signal arrives.
    let mut h = Hkv::start(&["-t", "1", "--batch-interval-us", "300000"]);
    let mut c = h.connect();
    let mut req = String::new();
    let mut want = String::new();
    for i in 0..200 {
        req.push_str(&format!("set k{i} 0 0 1\r\n{}\r\nget k{i}\r\n", i % 10));
        want.push_str(&format!(
            "STORED\r\nVALUE k{i} 0 1\r\n{}\r\nEND\r\n",
            i % 10
        ));
    }
    let idle = h.connect();
    c.send(req.as_bytes());
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    assert!(h.terminate(), "clean exit");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "the idle connection held the exit up"
    );
    let mut got = Vec::new();
    let _ = c.stream.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(
        got == want,
        "{} of {} reply bytes before the close",
        got.len(),
        want.len()
    );
    drop(idle);
}
