//! Regression tests for the reliability review (issue 13): each reproduces a request that
//! once grew the server without bound, killed it or mixed up data, against the real binary.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{
    assert_healthy, assert_peak_within, read_exact, set_big, value_block, version, Client, Hkv,
};

#[test]
fn regression_multiget_of_200_large_values_is_answered_in_parts() {
    // 805 bytes asking for 200 x 500 KB once took a -m 16 server to a 199 MB peak.
    let h = Hkv::start(&["-m", "16", "-t", "1"]);
    let mut c = h.connect();
    let v = set_big(&mut c, "big", 500_000, b'b');
    let line = format!("get{}\r\n", " big".repeat(200));
    assert_eq!(line.len(), 805);
    c.send(line.as_bytes());
    let block = value_block("big", &v);
    for i in 0..200 {
        assert_eq!(read_exact(&mut c, block.len()), block, "value {i}");
    }
    assert_eq!(read_exact(&mut c, 5), b"END\r\n");
    assert_peak_within(&h, 16);
    assert_healthy(&h);
}

#[test]
fn regression_a_1mb_line_of_one_key_does_not_kill_the_server() {
    // `get a a a ...` over a 1 MB value asks for ~500 GB of replies: the server once tried to
    // build them all and was killed. Now it answers as the client reads.
    let h = Hkv::start(&["-m", "32", "-t", "1", "-I", "2m"]);
    let mut c = h.connect();
    let v = set_big(&mut c, "a", 1 << 20, b'x');
    let mut line = b"get".to_vec();
    while line.len() < (1 << 20) - 4 {
        line.extend_from_slice(b" a");
    }
    line.extend_from_slice(b"\r\n");
    c.send(&line);
    // Read 64 replies (64 MB), then walk away.
    let block = value_block("a", &v);
    for i in 0..64 {
        assert_eq!(read_exact(&mut c, block.len()), block, "value {i}");
    }
    drop(c);
    assert_healthy(&h);
    assert_peak_within(&h, 32);
}

#[test]
fn regression_pipelined_gets_trickled_without_reading() {
    // 5000 pipelined `get big`, then two bytes at a time, never reading: the server kept
    // parsing and once grew from 23 MB to 603 MB.
    let h = Hkv::start(&["-m", "16", "-t", "1"]);
    let mut c = h.connect();
    set_big(&mut c, "big", 500_000, b'z');
    let mut greedy = h.connect();
    greedy
        .stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let req = "get big\r\n".repeat(5000);
    let _ = greedy.stream.write_all(req.as_bytes());
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if greedy.stream.write_all(b"ge").is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_healthy(&h);
    assert_peak_within(&h, 16);
}

#[test]
fn regression_deferred_reads_keep_the_clients_order() {
    // A multi-get larger than the per-connection budget, then a write to one of its keys and
    // a read of it, pipelined: the get's replies are the old values, then STORED, then the new.
    let h = Hkv::start(&["-m", "64", "-t", "2"]);
    let mut c = h.connect();
    let mut want = Vec::new();
    let mut line = String::from("get");
    let mut values = Vec::new();
    for i in 0..12 {
        let key = format!("k{i}");
        let v = set_big(&mut c, &key, 300_000 + i, b'a' + i as u8);
        line.push(' ');
        line.push_str(&key);
        want.extend(value_block(&key, &v));
        values.push(v);
    }
    want.extend_from_slice(b"END\r\nSTORED\r\n");
    want.extend(value_block("k0", b"new"));
    want.extend_from_slice(b"END\r\n");
    line.push_str("\r\nset k0 0 0 3\r\nnew\r\nget k0\r\n");
    for _ in 0..3 {
        c.send(line.as_bytes());
        assert_eq!(read_exact(&mut c, want.len()), want);
        // Put k0 back for the next round.
        c.send(format!("set k0 0 0 {}\r\n", values[0].len()).as_bytes());
        c.send(&values[0]);
        c.send(b"\r\n");
        assert_eq!(c.read_until(b"\r\n"), "STORED\r\n");
    }
    let stats = c.call("stats hkv\r\n", "END\r\n");
    let deferred: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("STAT deferred_reads "))
        .and_then(|v| v.parse().ok())
        .expect("deferred_reads stat");
    assert!(deferred > 0, "the budget never deferred a read:\n{stats}");
}

#[test]
fn regression_huge_numbers_are_refused_and_do_not_panic() {
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    for (req, want) in [
        (
            "set k 0 0 -18446744073709551615\r\nx\r\n",
            "CLIENT_ERROR bad command line format\r\nERROR\r\n",
        ),
        (
            "set k 0 18446744073709551615 1\r\nx\r\n",
            "CLIENT_ERROR bad command line format\r\nERROR\r\n",
        ),
        // A length keeps its low 32 bits, as memcached's safe_strtol into an int32: 0 here.
        (
            "set k 0 0 -9223372036854775808\r\nx\r\n",
            "CLIENT_ERROR bad data chunk\r\nERROR\r\n",
        ),
        // strtol reads -2^63 and memcached keeps its low 32 bits (0); one less is out of
        // its range.
        ("touch k -9223372036854775808\r\n", "NOT_FOUND\r\n"),
        (
            "touch k -9223372036854775809\r\n",
            "CLIENT_ERROR invalid exptime argument\r\n",
        ),
        // memcached 1.6.18: a keyless gat checks its exptime, then ends.
        ("gat 0\r\n", "END\r\n"),
        ("gat\r\n", "ERROR\r\n"),
    ] {
        c.expect(req, want);
    }
    c.expect("get k\r\n", "END\r\n");
    assert_healthy(&h);
}

/// Receives every datagram of one UDP reply and returns its payload.
fn udp_reply(sock: &std::net::UdpSocket) -> Vec<u8> {
    let mut reply = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut total = None;
    let mut got = 0;
    while total != Some(got) {
        let Ok(n) = sock.recv(&mut buf) else { break };
        total = Some(u16::from_be_bytes([buf[4], buf[5]]));
        got += 1;
        reply.extend_from_slice(&buf[8..n]);
    }
    reply
}

#[test]
fn regression_udp_multiget_reply_is_bounded() {
    let h = Hkv::start(&["-m", "64", "-t", "1", "--udp-listen", "127.0.0.1:0"]);
    let mut c = h.connect();
    set_big(&mut c, "u", 200, b'u');
    set_big(&mut c, "big", 512 << 10, b'b');
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    socket2::SockRef::from(&sock)
        .set_recv_buffer_size(4 << 20)
        .unwrap();
    // 1,000 keys in one datagram are all answered, as memcached answers them (a UDP line
    // once stopped at a pass's 256 keys with an out-of-memory error).
    let mut dg = vec![0, 7, 0, 0, 0, 1, 0, 0];
    dg.extend_from_slice(format!("get{}\r\n", " u".repeat(1000)).as_bytes());
    sock.send_to(&dg, h.udp.unwrap()).unwrap();
    let reply = udp_reply(&sock);
    let text = String::from_utf8_lossy(&reply);
    assert_eq!(text.matches("VALUE u 0 200\r\n").count(), 1000);
    assert!(
        text.ends_with("END\r\n"),
        "tail {:?}",
        &text[text.len() - 40..]
    );
    // What bounds a reply is a client's share of a pass (the output high-water mark, 1 MiB,
    // and the value that passes it): 64 half-megabyte values end after three with
    // memcached's error for a reply it cannot make room for.
    let mut dg = vec![0, 8, 0, 0, 0, 1, 0, 0];
    dg.extend_from_slice(format!("get{}\r\n", " big".repeat(64)).as_bytes());
    sock.send_to(&dg, h.udp.unwrap()).unwrap();
    let reply = udp_reply(&sock);
    let text = String::from_utf8_lossy(&reply);
    assert!(
        text.ends_with("SERVER_ERROR out of memory writing get response\r\n"),
        "{} bytes, tail {:?}",
        reply.len(),
        &text[text.len().saturating_sub(80)..]
    );
    assert!(reply.len() < (2 << 20), "{} bytes", reply.len());
    assert_healthy(&h);
    assert_peak_within(&h, 64);
}

#[test]
fn regression_a_panicking_worker_is_isolated() {
    // A worker that panicked once kept its connections counted and went on receiving 1/N of
    // new connections into a closed channel, until every client was refused.
    let h = Hkv::start_with_env(&["-t", "2", "-c", "20"], &[("HKV_FAULT_PANIC_KEY", "boom")]);
    let mut clients: Vec<Client> = (0..6).map(|_| h.connect()).collect();
    for c in &mut clients {
        c.expect("version\r\n", &format!("VERSION {}\r\n", version(&h)));
    }
    clients[0].send(b"get boom\r\n");
    assert!(clients[0].is_closed(), "the panicking connection is closed");
    // Every connection of the dead worker is closed; the others still work.
    let mut alive = 0;
    for c in &mut clients[1..] {
        c.send(b"version\r\n");
        let mut b = [0u8; 64];
        match c.stream.read(&mut b) {
            Ok(n) if n > 0 => alive += 1,
            _ => {}
        }
    }
    assert!(alive >= 1, "the other worker serves its connections");
    drop(clients);
    std::thread::sleep(Duration::from_millis(200));
    // New connections, well past -c if the dead worker's ones still counted, all served.
    for i in 0..40 {
        let mut c = h.connect();
        c.expect(
            &format!("set n{i} 0 0 1\r\nx\r\nget n{i}\r\n"),
            &format!("STORED\r\nVALUE n{i} 0 1\r\nx\r\nEND\r\n"),
        );
    }
    let mut c = h.connect();
    // Closed connections are uncounted when their worker sees the hang-up: allow it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.stat_n("", "curr_connections") != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.stat_n("", "curr_connections"), 1);
    assert_eq!(c.stat_n("hkv", "worker_panics"), 1);
    // The dead worker is never chosen to take a connection over (`-`), and the one left
    // holds the one connection open.
    let per = c.stat("hkv", "worker_conns").unwrap_or_default();
    let mut per: Vec<&str> = per.trim().split(',').collect();
    per.sort_unstable();
    assert_eq!(per, ["-", "1"]);
}

/// With every worker lost to panics nothing served (their listening sockets went with them)
/// while the process lived on, so no supervisor restarted it (a hostile probe's finding).
#[test]
fn regression_the_process_stops_when_its_last_worker_is_lost() {
    let mut h = Hkv::start_with_env(&["-t", "1"], &[("HKV_FAULT_PANIC_KEY", "boom")]);
    let mut c = h.connect();
    c.send(b"get boom\r\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Ok(Some(status)) = h.child.try_wait() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "hkv serves nobody and still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(70));
}

#[test]
fn regression_idle_connections_are_closed_with_idle_timeout() {
    // Without an idle timeout, -c idle connections (or slowloris lines) locked everyone out.
    let h = Hkv::start(&["-t", "1", "-c", "8", "-o", "idle_timeout=1"]);
    let mut idle: Vec<Client> = (0..7).map(|_| h.connect()).collect();
    idle[0].send(b"get never_finished");
    // memcached's clock: more than one whole second since the last command, checked once
    // a second.
    std::thread::sleep(Duration::from_millis(3200));
    for c in &mut idle {
        assert!(c.is_closed(), "an idle connection was not closed");
    }
    let mut c = h.connect();
    assert!(c.stat_n("", "idle_kicks") >= 7);
    assert_healthy(&h);
}

/// An outsider's probe: a client sending a line that never ends, a byte at a time, kept
/// its connection, as bytes moving counted as activity; memcached counts commands
/// (`last_cmd_time`) and closed it. A data block arriving slowly is not cut, in either.
#[test]
fn regression_idle_timeout_counts_commands_not_bytes() {
    let h = Hkv::start(&["-t", "1", "-o", "idle_timeout=1"]);
    let mut trickler = h.connect();
    let mut writer = h.connect();
    let value = vec![b'v'; 100_000];
    writer.send(format!("set slow 0 0 {}\r\n", value.len()).as_bytes());
    let start = Instant::now();
    let mut sent = 0;
    while start.elapsed() < Duration::from_millis(4500) {
        // Once closed, the writes fail: the check is below.
        let _ = std::io::Write::write(&mut trickler.stream, b"g");
        let next = (sent + value.len() / 15).min(value.len());
        writer.send(&value[sent..next]);
        sent = next;
        std::thread::sleep(Duration::from_millis(300));
    }
    let short = Some(Duration::from_millis(500));
    trickler.stream.set_read_timeout(short).unwrap();
    assert!(
        trickler.is_closed(),
        "a line trickled for 4.5 s kept its connection"
    );
    writer.send(&value[sent..]);
    writer.expect("\r\n", "STORED\r\n");
    let reply = writer.call("get slow\r\n", "END\r\n");
    assert!(reply.starts_with("VALUE slow 0 100000\r\n"), "{reply:.40}");
    assert_healthy(&h);
}

#[test]
fn regression_a_long_get_line_in_small_pieces_is_answered() {
    // The line is searched for its newline once, not once per piece (a quadratic rescan up
    // to 1 MB before); what the client sees is the same reply.
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    c.expect("set p 0 0 1\r\nv\r\n", "STORED\r\n");
    let mut line = b"get".to_vec();
    for _ in 0..20_000 {
        line.extend_from_slice(b" p");
    }
    line.extend_from_slice(b"\r\n");
    for piece in line.chunks(1000) {
        c.send(piece);
        std::thread::sleep(Duration::from_micros(200));
    }
    let block = b"VALUE p 0 1\r\nv\r\n";
    let got = read_exact(&mut c, block.len() * 20_000 + 5);
    assert!(got.chunks(block.len()).take(20_000).all(|b| b == block));
    assert!(got.ends_with(b"END\r\n"));
}

#[test]
fn regression_conn_limit_is_checked_against_the_open_file_limit() {
    // -c above what the process may open made accept fail with EMFILE while hkv believed it
    // had room; now hkv raises the limit if it can, or refuses to start with a clear error.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 64 && exec {} -p 0 -l 127.0.0.1 -t 1 -c 1000",
            env!("CARGO_BIN_EXE_hkv")
        ))
        .output()
        .expect("run hkv");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("open files"), "stderr: {err}");
}
