//! Regression tests for the connection-buffer bounds of the reliability review (issue 13):
//! clients that send large requests slowly, pipeline without reading, or burst and go quiet
//! keep the server within `-m` plus its documented overhead, and everyone else is served.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{
    assert_healthy, assert_peak_within, read_exact, set_big, version, wait_for_stat, Client, Hkv,
};

#[test]
fn regression_connection_buffers_have_a_total_bound() {
    // Input buffers of half-sent large values were outside -m and unbounded in total.
    // (Values staged into item memory hold no buffer: at most half of -m is staged, and
    // the rest, 6-7 of these, buffered, must still pass the limit.)
    let h = Hkv::start(&["-t", "1", "-m", "32", "-I", "2m", "--conn-buffer-mb", "4"]);
    let part = vec![b'q'; 1_000_000];
    let mut senders: Vec<Client> = (0..16).map(|_| h.connect()).collect();
    for (i, c) in senders.iter_mut().enumerate() {
        c.stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        c.send(format!("set big{i} 0 0 1500000\r\n").as_bytes());
        let _ = c.stream.write_all(&part);
    }
    let mut admin = h.connect();
    wait_for_stat(&mut admin, "hkv", "conn_buffer_throttled", |n| n > 0);
    let held = admin.stat_n("hkv", "conn_buffer_bytes");
    // The limit, plus one request in progress per worker (its value, doubled by growth), plus
    // the floor each throttled connection may keep.
    assert!(
        held < (4 << 20) + 2 * (2 << 20) + 16 * (64 << 10) + (1 << 20),
        "connection buffers hold {} MiB",
        held >> 20
    );
    assert_healthy(&h);
    // Every large request is answered: stored, or, if its client stalled part way while it
    // was the one let past the limit, refused as memcached refuses a value it cannot
    // allocate (kept, every stalled client came to buffer its whole value in turn). Either
    // way the connection goes on.
    let rest = vec![b'q'; 500_000];
    for c in &mut senders {
        let _ = c.stream.write_all(&rest);
        c.send(b"\r\n");
    }
    for (i, c) in senders.iter_mut().enumerate() {
        let reply = c.read_until(b"\r\n");
        let stored = match reply.as_str() {
            "STORED\r\n" => true,
            "SERVER_ERROR out of memory storing object\r\n" => false,
            other => panic!("set big{i}: {other:?}"),
        };
        let got = c.call(&format!("mg big{i} s\r\n"), "\r\n");
        let want = if stored { "HD s1500000\r\n" } else { "EN\r\n" };
        assert_eq!(got, want, "big{i}");
    }
    assert_peak_within(&h, 32);
}

#[test]
fn regression_pipelined_dumps_nobody_reads_stay_within_the_buffer_limit() {
    // A hostile probe: each 26-byte `lru_crawler metadump all` built a reply of up to 16 MiB,
    // and each `stats cachedump 2 0` one of 2 MiB, whatever the client had left unread: 100
    // pipelined metadumps held 1.6 GB and stalled the worker's other clients for seconds.
    let h = Hkv::start(&["-t", "1", "-m", "64", "--conn-buffer-mb", "8"]);
    let mut c = h.connect();
    let mut fill = String::new();
    for i in 0..100_000 {
        fill.push_str(&format!("set key{i:08} 0 0 1 noreply\r\nx\r\n"));
    }
    c.send(fill.as_bytes());
    c.expect("mn\r\n", "MN\r\n");
    // As memcached: a metadump waits for the replies before it.
    c.expect(
        "version\r\nlru_crawler metadump all\r\n",
        &format!(
            "VERSION {}\r\nERROR cannot pipeline other commands before metadump\r\n",
            version(&h)
        ),
    );
    let mut attackers: Vec<std::net::TcpStream> = Vec::new();
    for _ in 0..4 {
        let s = std::net::TcpStream::connect(h.addr).unwrap();
        let mut w = s.try_clone().unwrap();
        w.write_all(&b"lru_crawler metadump all\r\n".repeat(50))
            .unwrap();
        w.write_all(&b"stats cachedump 1 0\r\n".repeat(50)).unwrap();
        attackers.push(s);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let mut admin = h.connect();
    // Others are served within a second: the best of a few round trips, since one may fall
    // on a moment when a loaded machine runs something else.
    let fastest = (0..5)
        .map(|_| {
            let t = Instant::now();
            admin.expect("mn\r\n", "MN\r\n");
            t.elapsed()
        })
        .min()
        .unwrap_or_default();
    assert!(fastest < Duration::from_secs(1), "others wait {fastest:?}");
    // Each attacker holds at most one dump (memcached's metadump is ~8 MB of lines here).
    let held = admin.stat_n("hkv", "conn_buffer_bytes");
    assert!(
        held < 4 * (20 << 20),
        "connection buffers hold {} MiB",
        held >> 20
    );
    assert_healthy(&h);
    assert_peak_within(&h, 64);
    drop(attackers);
}

#[test]
fn regression_stalled_large_requests_do_not_keep_others_from_finishing() {
    // Above --conn-buffer-mb one connection per worker part way through a request still
    // reads. An attacker's connections that stop part way through their values took that slot
    // for good, so a client's complete large SET was never read to its end.
    let h = Hkv::start(&["-t", "1", "-m", "32", "-I", "2m", "--conn-buffer-mb", "4"]);
    let part = vec![b'q'; 1_000_000];
    let mut stalled: Vec<Client> = (0..16).map(|_| h.connect()).collect();
    for (i, c) in stalled.iter_mut().enumerate() {
        c.stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        c.send(format!("set stalled{i} 0 0 1500000\r\n").as_bytes());
        let _ = c.stream.write_all(&part);
    }
    let mut admin = h.connect();
    wait_for_stat(&mut admin, "hkv", "conn_buffer_throttled", |n| n > 0);
    let value = vec![b'v'; 1_500_000];
    let mut legit = h.connect();
    legit
        .stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let writer = {
        let mut s = legit.stream.try_clone().unwrap();
        let mut req = b"set legit 0 0 1500000\r\n".to_vec();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        std::thread::spawn(move || s.write_all(&req))
    };
    assert_eq!(legit.read_until(b"\r\n"), "STORED\r\n");
    writer.join().unwrap().unwrap();
    legit.send(b"get legit\r\n");
    let mut want = b"VALUE legit 0 1500000\r\n".to_vec();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert!(read_exact(&mut legit, want.len()) == want, "legit's value");
    assert_healthy(&h);
    drop(stalled);
}

#[test]
fn regression_connections_that_kept_large_buffers_after_a_burst_are_served_again() {
    // After a burst of 60 KB SETs (bodies below the staging size, so buffered) every
    // connection kept its grown input buffer, idle. Together they stayed over
    // --conn-buffer-mb, so each was throttled for good: its next request was never read
    // and its close never seen (found by a hostile probe: 200 x 1 MB SETs, 172 sockets
    // left in CLOSE_WAIT and a worker spinning). Idle buffers are now given back.
    let h = Hkv::start(&["-t", "1", "-m", "64", "--conn-buffer-mb", "1"]);
    let value = vec![b'v'; 60_000];
    let mut clients: Vec<Client> = (0..40).map(|_| h.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.send(format!("set burst{i} 0 0 {}\r\n", value.len()).as_bytes());
        c.send(&value);
        c.send(b"\r\n");
    }
    for c in &mut clients {
        assert_eq!(c.read_until(b"\r\n"), "STORED\r\n");
    }
    for (i, c) in clients.iter_mut().enumerate() {
        c.stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(
            c.call(&format!("get burst{i}\r\n"), "END\r\n").len(),
            format!("VALUE burst{i} 0 60000\r\n\r\nEND\r\n").len() + value.len(),
            "burst{i}"
        );
    }
    // Each idle connection is back well under the 64 KiB floor (measured: 16-36 KiB, the
    // read buffer as reads left it), so none of them is throttled; before, each kept the
    // ~76 KiB its body had grown.
    let mut admin = h.connect();
    let held = admin.stat_n("hkv", "conn_buffer_bytes");
    assert!(
        held < 41 * (40 << 10),
        "41 idle connections hold {held} bytes"
    );
    drop(clients);
    let deadline = Instant::now() + Duration::from_secs(5);
    while admin.stat_n("", "curr_connections") != 1 {
        assert!(Instant::now() < deadline, "closed connections not released");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn regression_multikey_gat_without_reading_stays_within_the_buffer_limit() {
    // gat is answered in the pass that plans it (it changes the item), so it was charged to
    // a per-client budget of 1 MiB whatever the total: 1000 clients each sending one
    // 1000-key gat of a 10 KB value and never reading held 1.3 GB (a hostile probe).
    let h = Hkv::start(&["-t", "1", "-m", "64", "--conn-buffer-mb", "4"]);
    let mut admin = h.connect();
    set_big(&mut admin, "touched", 10_000, b't');
    let mut line = b"gat 0".to_vec();
    for _ in 0..1000 {
        line.extend_from_slice(b" touched");
    }
    line.extend_from_slice(b"\r\n");
    let mut hogs: Vec<std::net::TcpStream> = Vec::new();
    for _ in 0..60 {
        let mut s = std::net::TcpStream::connect(h.addr).unwrap();
        s.write_all(&line).unwrap();
        hogs.push(s);
    }
    std::thread::sleep(Duration::from_secs(2));
    let held = admin.stat_n("hkv", "conn_buffer_bytes");
    // The limit, one pass's answered-at-once reads (16 MiB, all clients together: the pass
    // that began under the limit), and per connection the floor of output and of input and
    // a value; before: 60 x ~1.4 MB (74 MiB measured).
    assert!(
        held < (4 << 20) + (16 << 20) + 60 * (3 * (64 << 10) + 10_000),
        "connection buffers hold {} MiB",
        held >> 20
    );
    assert_healthy(&h);
    drop(hogs);
}

#[test]
fn regression_clients_pipelining_gets_without_reading_stay_within_the_buffer_limit() {
    // Each connection's output stopped at its own high-water mark (1 MiB, plus a pass's
    // reads), but nothing bounded them together: clients pipelining GETs of a 10 KB value
    // and never reading held ~2.6 MB each, 2 GB with 1000 of them (a hostile probe).
    // Above --conn-buffer-mb a connection with a floor's worth of output gets no more.
    let h = Hkv::start(&["-t", "1", "-m", "64", "--conn-buffer-mb", "4"]);
    let mut admin = h.connect();
    set_big(&mut admin, "pipelined", 10_000, b'p');
    let gets = b"get pipelined\r\n".repeat(2000);
    let mut hogs: Vec<std::net::TcpStream> = (0..40)
        .map(|_| {
            let s = std::net::TcpStream::connect(h.addr).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        for s in &mut hogs {
            let _ = s.write(&gets);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Waiting for them to read costs nothing: handed back at once, backed-up connections
    // made the workers pass again and again (two cores at 100% for as long as they wait).
    let ticks = least_cpu_ticks_per_second(&h);
    assert!(
        ticks < 50,
        "{ticks} clock ticks of CPU in a second of waiting"
    );
    let held = admin.stat_n("hkv", "conn_buffer_bytes");
    // The limit, plus per connection the floor of output and of input and one pass's
    // values (docs/reliability.md); before: 40 x ~2.6 MB.
    assert!(
        held < (4 << 20) + 40 * (3 * (64 << 10) + 10_000),
        "connection buffers hold {} MiB",
        held >> 20
    );
    assert_healthy(&h);
}

#[test]
fn regression_a_slow_reader_that_pipelines_without_pause_keeps_one_replys_worth() {
    // On the epoll loop a connection's output was emptied only once all of it was sent: a
    // client that pipelines GETs without pause and reads slowly never let it drain, and
    // its buffer grew by every byte it read (34 MiB within a second, against 6 MiB on
    // io_uring), pushing every connection towards the --conn-buffer-mb throttle.
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    let value = "x".repeat(4000);
    c.expect(&format!("set v 0 0 4000\r\n{value}\r\n"), "STORED\r\n");
    let sock = socket2::SockRef::from(&c.stream);
    sock.set_recv_buffer_size(64 << 10).unwrap();
    let mut w = c.stream.try_clone().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let writer = std::thread::spawn(move || {
        let req = b"get v\r\n".repeat(1000);
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            if w.write_all(&req).is_err() {
                return;
            }
        }
    });
    let mut admin = h.connect();
    let mut most = 0;
    let mut chunk = vec![0u8; 64 << 10];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(250) {
            let _ = std::io::Read::read(&mut c.stream, &mut chunk);
            std::thread::sleep(Duration::from_millis(2));
        }
        most = most.max(admin.stat_n("hkv", "conn_buffer_bytes"));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    // Input up to the read cap and one high-water mark of output: about 6 MiB.
    assert!(most < 12 << 20, "the connection held {} MiB", most >> 20);
    // The writer may be blocked in a write: shutting the socket down ends it.
    let _ = c.stream.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    assert_healthy(&h);
}

#[test]
fn regression_a_dump_its_client_does_not_read_costs_no_cpu() {
    // A metadump leaves its connection wanting to parse what follows it, and each pass
    // handed such a connection straight back while its client did not read: the worker
    // spun at 100% for as long as the dump waited (found in review).
    let h = Hkv::start(&["-t", "1", "-m", "128"]);
    let mut c = h.connect();
    let n = 300_000;
    c.store_many("k", n);
    // About 20 MB of lines, more than the sockets hold: the dump waits for the client.
    c.send(b"lru_crawler metadump all\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let ticks = least_cpu_ticks_per_second(&h);
    assert!(
        ticks < 50,
        "{ticks} clock ticks of CPU in a second of waiting"
    );
    let dump = c.read_until(b"END\r\n");
    assert_eq!(dump.matches("key=").count(), n, "the whole dump once read");
    assert_healthy(&h);
}

/// The server's CPU time (user and system clock ticks) in the least busy of three seconds:
/// the first may still be the server finishing what the test just queued.
fn least_cpu_ticks_per_second(h: &Hkv) -> u64 {
    let cpu = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", h.pid())).unwrap();
        let f: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    };
    (0..3)
        .map(|_| {
            let before = cpu();
            std::thread::sleep(Duration::from_secs(1));
            cpu() - before
        })
        .min()
        .unwrap_or_default()
}

/// A hostile probe: clients each sending most of a 900 KB multiget line and stopping. The
/// one connection per worker let past the limit gave its place up after 50 ms of silence
/// and kept its line, so every client came to buffer its line in turn (500 MB in 10 s with
/// 1,000 of them). The one that gives the place up now gets memcached's answer for a read
/// buffer it cannot grow, and is closed.
#[test]
fn regression_clients_stopping_part_way_through_long_get_lines_stay_within_the_limit() {
    let h = Hkv::start(&["-m", "64", "-t", "2", "--conn-buffer-mb", "8"]);
    let line = b" k".repeat(300_000);
    let mut clients: Vec<Client> = (0..60).map(|_| h.connect()).collect();
    for c in clients.iter_mut() {
        c.stream.set_nonblocking(true).unwrap();
        let mut req = b"get".to_vec();
        req.extend_from_slice(&line);
        let _ = c.stream.write(&req);
    }
    std::thread::sleep(Duration::from_secs(3));
    let mut admin = h.connect();
    let buffered = admin.stat_n("hkv", "conn_buffer_bytes");
    assert!(buffered < 24 << 20, "{buffered} bytes buffered");
    assert!(admin.stat_n("hkv", "conn_buffer_refused") > 0);
    let mut refused = 0;
    for c in clients.iter_mut() {
        c.stream.set_nonblocking(false).unwrap();
        c.stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut reply = Vec::new();
        if std::io::Read::read_to_end(&mut c.stream, &mut reply).is_ok() {
            assert_eq!(reply, b"SERVER_ERROR out of memory reading request\r\n");
            refused += 1;
        }
    }
    assert!(refused > 0, "no connection refused");
    assert_healthy(&h);
    assert_peak_within(&h, 64);
}

#[test]
fn regression_clients_pipelining_tiny_requests_without_reading_stay_within_the_limit() {
    // The slot past the limit went to any connection that looked part way through a
    // request (its last pass ended in an unfinished one), also when complete requests had
    // come since: 1,000 clients pipelining `mn` (4-byte replies) and never reading took it
    // in turn, each then receiving a megabyte past the limit: 400 MB over a 64 MB
    // --conn-buffer-mb on io_uring (a hostile probe). Now it goes only to a connection
    // whose first request is unfinished.
    let h = Hkv::start(&["-t", "1", "-m", "64", "--conn-buffer-mb", "4"]);
    let (held, hogs) = buffers_after_pipelining_unread(&h, 100, b"mn\r\n");
    // The limit, a quarter megabyte a connection (measured up to ~220 KiB here once each
    // client's commands past the first wait while over the limit: docs/reliability.md),
    // plus one request let past the limit; before: ~100 MB.
    let bound = (4 << 20) + 100 * (256 << 10) + (2 << 20);
    assert!(held < bound, "connection buffers hold {} MiB", held >> 20);
    assert_healthy(&h);
    drop(hogs);
}

#[test]
fn regression_copied_large_values_nobody_reads_stay_within_the_limit() {
    // With --zero-copy-min 0 every value was copied into its connection's output, and the
    // first value of each client is answered whole whatever the limits: 1,000 clients each
    // asking twice for 80 values of 500 KB and reading nothing held 1.3 GB against a 64 MiB
    // limit (a hostile probe). Over the limit, or once a pass's copies reach its budget,
    // such values now go from item memory (pinned, inside -m) as they do by default.
    let h = Hkv::start(&[
        "-t",
        "1",
        "-m",
        "64",
        "--conn-buffer-mb",
        "4",
        "--zero-copy-min",
        "0",
    ]);
    let mut admin = h.connect();
    let mut line = b"get".to_vec();
    for i in 0..20 {
        set_big(&mut admin, &format!("copied{i}"), 300_000, b'c');
        line.extend_from_slice(format!(" copied{i}").as_bytes());
    }
    line.extend_from_slice(b"\r\n");
    let line = line.repeat(2);
    let before = h.rss();
    let mut hogs: Vec<std::net::TcpStream> = Vec::new();
    for _ in 0..150 {
        let mut s = std::net::TcpStream::connect(h.addr).unwrap();
        s.write_all(&line).unwrap();
        hogs.push(s);
    }
    std::thread::sleep(Duration::from_secs(2));
    let grown = h.peak_rss().saturating_sub(before);
    // The limit, one pass's copies (16 MiB) and per connection its floor of input and output
    // (docs/reliability.md), with room for the allocator; before: ~1.3 MB per connection
    // (about 200 MiB here).
    assert!(
        grown < (4 << 20) + (16 << 20) + 150 * (3 * (64 << 10)) + (16 << 20),
        "grew by {} MiB",
        grown >> 20
    );
    assert!(admin.stat_n("hkv", "zero_copy_values") > 0);
    assert_healthy(&h);
    drop(hogs);
}

#[test]
fn regression_pipelined_stats_nobody_reads_stay_within_the_limit() {
    // A pass answered up to -R (1,024) commands of a connection before its output mark was
    // looked at again, and a `stats` reply is kilobytes: 100 clients pipelining
    // `stats slabs` without reading held 1.4 GB and stalled every other client for 17 s
    // (a hostile probe). Replies besides values are now reckoned as they are planned.
    let h = Hkv::start(&["-t", "1", "-m", "64", "--conn-buffer-mb", "4"]);
    let (held, hogs) = buffers_after_pipelining_unread(&h, 50, b"stats\r\n");
    // The limit and half a megabyte a connection: under this load, beside the other tests
    // of this file, a connection's buffers measured up to ~460 KiB, above the 100-180 KiB
    // docs/reliability.md gives (left open); before: 108 MiB, growing.
    let bound = (4 << 20) + 50 * (512 << 10) + (16 << 20);
    assert!(held < bound, "connection buffers hold {} MiB", held >> 20);
    assert_healthy(&h);
    drop(hogs);
}

#[test]
fn regression_pipelined_stats_conns_nobody_reads_stay_within_the_limit() {
    // `stats conns` answers ~120 bytes per open connection but was reckoned as a 16 KiB
    // `stats` reply: 140 clients pipelining 100 of it unread beside 880 idle connections
    // held 926 MB of connection buffers against a 64 MiB limit (a hostile probe).
    let h = Hkv::start(&[
        "-t",
        "2",
        "-m",
        "64",
        "-c",
        "2000",
        "--conn-buffer-mb",
        "16",
    ]);
    let idle: Vec<_> = (0..700)
        .map(|_| std::net::TcpStream::connect(h.addr).unwrap())
        .collect();
    let hogs: Vec<_> = (0..100)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(h.addr).unwrap();
            s.write_all(&b"stats conns\r\n".repeat(100)).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let held = h.connect().stat_n("hkv", "conn_buffer_bytes");
    // The limit, one ~100 KB reply a client past its mark, and slack.
    let bound = (16 << 20) + 100 * (128 << 10) + (16 << 20);
    assert!(held < bound, "connection buffers hold {} MiB", held >> 20);
    assert_healthy(&h);
    drop((hogs, idle));
}

#[test]
fn regression_complete_requests_are_read_ahead_to_the_floor_not_to_the_item_size() {
    // Input was read up to `-I` and 64 KiB whatever it held: 20 clients pipelining `mn`
    // without reading held ~1 MiB of requests each waiting to be planned; memcached reads
    // 16 KiB at a time. Now only a request that has not all come is read past the 64 KiB
    // floor. Each connection: the input floor and a read past it, in buffers that double (512 KiB
    // at most), and the output high-water in a buffer that doubles (2 MiB); io_uring also
    // holds the buffer being sent and a spare (2 MiB more at most, 1.5 measured). Measured
    // once the socket buffers are full: 44.7 MiB on epoll, 50-65 on io_uring; read ahead to
    // `-I`, 114 and 99.
    for (io, per_conn) in [("epoll", (512 << 10) + (2 << 20)), ("uring", 4 << 20)] {
        let h = Hkv::start(&["-t", "1", "-m", "64", "--conn-buffer-mb", "512", "--io", io]);
        let (held, hogs) = buffers_after_pipelining_unread(&h, 20, b"mn\r\n");
        let bound = 20 * per_conn;
        assert!(
            held < bound,
            "{io}: connection buffers hold {} MiB",
            held >> 20
        );
        assert_healthy(&h);
        drop(hogs);
    }
}

/// `n` clients pipeline `request` by the thousand for 3 s and read nothing: hkv's
/// `conn_buffer_bytes` then, and the clients' sockets (open until dropped).
fn buffers_after_pipelining_unread(
    h: &Hkv,
    n: usize,
    request: &'static [u8],
) -> (u64, Vec<std::net::TcpStream>) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hogs: Vec<_> = (0..n)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(h.addr).unwrap();
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                s.set_write_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                let unit = request.repeat(1000);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Err(e) = s.write_all(&unit) {
                        if e.kind() != std::io::ErrorKind::WouldBlock
                            && e.kind() != std::io::ErrorKind::TimedOut
                        {
                            break;
                        }
                    }
                }
                s
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let held = steady_buffer_bytes(h);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    (held, hogs.into_iter().map(|t| t.join().unwrap()).collect())
}

/// The most `conn_buffer_bytes` seen until it holds still for a second (12 s at most):
/// unread replies first fill the kernel's socket buffers, and only then the server's, so a
/// reading taken early (3 s, on a fast host) is below what the load comes to.
fn steady_buffer_bytes(h: &Hkv) -> u64 {
    let mut admin = h.connect();
    let until = std::time::Instant::now() + Duration::from_secs(12);
    let (mut most, mut last, mut same) = (0, u64::MAX, 0);
    while same < 4 && std::time::Instant::now() < until {
        let now = admin.stat_n("hkv", "conn_buffer_bytes");
        same = if now == last { same + 1 } else { 0 };
        (most, last) = (most.max(now), now);
        std::thread::sleep(Duration::from_millis(250));
    }
    most
}
