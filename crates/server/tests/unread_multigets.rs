//! Clients that send long multi-key gets and never read the replies: the server fills their
//! sockets and then costs nothing, and it plans no more keys than it can answer.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::Hkv;

/// A hostile probe: 500 clients each sending one `get` of 5,000 keys of 1 KB and never
/// reading kept a worker busy for minutes. Over the buffer limit each pass answered about
/// one value per client and planned, looked up and threw away the other 255 keys of its
/// slice (~120 deferred reads per value sent); everyone else's GETs took 50 ms. A
/// connection whose reads were deferred now plans about twice what the last pass answered.
#[test]
fn regression_unread_multi_key_gets_plan_few_more_keys_than_they_can_answer() {
    let h = Hkv::start(&["-t", "2", "--conn-buffer-mb", "8"]);
    let mut admin = h.connect();
    let keys = 5000;
    let value = "v".repeat(1000);
    let mut load = String::new();
    for i in 0..keys {
        load += &format!("set key{i} 0 0 1000 noreply\r\n{value}\r\n");
    }
    admin.call(&(load + "mn\r\n"), "MN\r\n");
    let names: Vec<String> = (0..keys).map(|i| format!("key{i}")).collect();
    let line = format!("get {}\r\n", names.join(" "));
    let mut clients = Vec::new();
    for _ in 0..150 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        // A small window before connecting: the replies back up in the server at once.
        s.set_recv_buffer_size(4096).unwrap();
        s.connect(&h.addr.into()).unwrap();
        let mut s: TcpStream = s.into();
        s.write_all(line.as_bytes()).unwrap();
        clients.push(s);
    }
    // Until the replies stop moving: every socket full.
    let mut last = 0;
    for _ in 0..60 {
        std::thread::sleep(Duration::from_millis(500));
        let written = admin.stat_n("", "bytes_written");
        if written - last < 64 << 10 {
            break;
        }
        last = written;
    }
    let hits = admin.stat_n("", "get_hits");
    let deferred = admin.stat_n("hkv", "deferred_reads");
    // Before: 43.9M deferred (and 6.5M hits counted) for these 750,000 values; now about
    // 250,000.
    let values = (clients.len() * keys) as u64;
    assert!(hits > 0);
    assert!(
        deferred < values,
        "{deferred} reads deferred, {hits} answered, for {values} values in all"
    );
    drop(clients);
    common::assert_healthy(&h);
}
