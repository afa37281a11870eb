//! KVCG's hot/cold split through the real binary, with a long fixed batch interval: the
//! router learns the hot key, its reads are answered on the hot path (counted in `stats
//! hkv`, not timed), a connection's replies keep its request order, and a write acknowledged
//! on one connection is what another reads next, hot or cold.

mod common;

use std::time::{Duration, Instant};

use common::Hkv;

/// Reads `key` (pipelined) until the router holds it hot.
fn make_hot(h: &Hkv, key: &str) {
    let mut c = h.connect();
    let mut admin = h.connect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while admin.stat_u64("hkv", "hot_bins").unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "the router never made {key} hot");
        c.send(format!("get {key}\r\n").repeat(400).as_bytes());
        let want = "END\r\n".repeat(400);
        let mut got = String::new();
        while got.matches("END\r\n").count() < 400 {
            got.push_str(&c.read_until(b"END\r\n"));
        }
        assert!(got.len() >= want.len());
        std::thread::sleep(Duration::from_millis(30));
    }
}

fn start() -> Hkv {
    // 20 ms windows: a read that waits for the batch is plain to see in the counters. A key
    // stays hot for a few epochs after its last read: 200 ms epochs outlast every step here.
    Hkv::start(&[
        "-t",
        "2",
        "--batch-interval-us",
        "20000",
        "--hot-epoch-ms",
        "200",
    ])
}

#[test]
fn hot_reads_are_answered_on_the_hot_path_and_cold_ones_are_not() {
    let h = start();
    let mut c = h.connect();
    c.expect(
        "set hot 0 0 1\r\nh\r\nset cold 0 0 1\r\nc\r\n",
        "STORED\r\nSTORED\r\n",
    );
    make_hot(&h, "hot");
    let mut admin = h.connect();
    let before = admin.stat_u64("hkv", "hot_gets").unwrap();
    for _ in 0..20 {
        c.expect("get hot\r\n", "VALUE hot 0 1\r\nh\r\nEND\r\n");
    }
    let hot = admin.stat_u64("hkv", "hot_gets").unwrap() - before;
    // A read counts only when it comes within C (20 ms) of the worker's last batch: on a
    // loaded machine a few gaps between these sequential reads run longer. A broken hot
    // path takes none.
    assert!(hot >= 15, "only {hot} of 20 hot reads took the hot path");
    let before = admin.stat_u64("hkv", "hot_gets").unwrap();
    for _ in 0..5 {
        c.expect("get cold\r\n", "VALUE cold 0 1\r\nc\r\nEND\r\n");
    }
    assert_eq!(
        admin.stat_u64("hkv", "hot_gets").unwrap(),
        before,
        "a cold read took the hot path"
    );
    // Meta reads of the hot key take it too. (The first read after an idle spell longer
    // than C has no window to wait for, and is answered at once by an ordinary pass.)
    let before = admin.stat_u64("hkv", "hot_gets").unwrap();
    for _ in 0..10 {
        c.expect("mg hot v\r\n", "VA 1\r\nh\r\n");
    }
    let meta = admin.stat_u64("hkv", "hot_gets").unwrap() - before;
    assert!(meta >= 7, "{meta} of 10 meta reads took the hot path");
}

#[test]
fn order_per_connection_and_visibility_across_connections_hold() {
    let h = start();
    let mut a = h.connect();
    let mut b = h.connect();
    a.expect("set hot 0 0 2\r\nv0\r\n", "STORED\r\n");
    make_hot(&h, "hot");
    for i in 1..30 {
        // A read behind a write of the same connection sees the write (the hot path stops
        // at the write and leaves the read to the batch).
        a.expect(
            &format!(
                "get hot\r\nset hot 0 0 {}\r\nv{i}\r\nget hot\r\n",
                format!("v{i}").len()
            ),
            &format!(
                "VALUE hot 0 {}\r\nv{}\r\nEND\r\nSTORED\r\nVALUE hot 0 {}\r\nv{i}\r\nEND\r\n",
                format!("v{}", i - 1).len(),
                i - 1,
                format!("v{i}").len()
            ),
        );
        // Acknowledged on `a`: what `b` reads at once, on the hot path.
        b.expect(
            "get hot\r\n",
            &format!("VALUE hot 0 {}\r\nv{i}\r\nEND\r\n", format!("v{i}").len()),
        );
    }
    // A multi-key line with a cold key in it is answered whole, in order.
    a.expect("set c 0 0 1\r\nc\r\n", "STORED\r\n");
    a.expect(
        "get hot c hot\r\n",
        "VALUE hot 0 3\r\nv29\r\nVALUE c 0 1\r\nc\r\nVALUE hot 0 3\r\nv29\r\nEND\r\n",
    );
}

#[test]
fn hot_cache_mb_0_turns_the_split_off() {
    let h = Hkv::start(&["--hot-cache-mb", "0", "--batch-interval-us", "1000"]);
    let mut c = h.connect();
    let s = c.call("stats hkv\r\n", "END\r\n");
    assert!(s.contains("STAT hot_cache_bytes 0\r\n"), "{s}");
    assert!(!s.contains("STAT hot_gets"), "{s}");
    let s = Hkv::start(&["-m", "64"])
        .connect()
        .call("stats hkv\r\n", "END\r\n");
    assert!(
        s.contains("STAT hot_cache_bytes 2097152\r\n"),
        "default -m / 32: {s}"
    );
}

/// A `gat`/`gats` line on a hot key reached the hot path, which refused it (it writes) and
/// took it back without its open reads: the worker panicked on every such line, and two of
/// them left a `-t 2` server refusing everyone (a hostile probe's finding; the planner's unit
/// test is in net/src/plan/tests.rs).
#[test]
fn regression_gat_lines_on_hot_keys_are_answered_and_no_worker_is_lost() {
    let h = start();
    let mut c = h.connect();
    c.expect("set hot 0 0 1\r\nh\r\n", "STORED\r\n");
    make_hot(&h, "hot");
    for _ in 0..8 {
        let mut g = h.connect();
        g.expect(
            "gat 0 hot hot\r\n",
            "VALUE hot 0 1\r\nh\r\nVALUE hot 0 1\r\nh\r\nEND\r\n",
        );
        g.send(b"gats 0 hot\r\n");
        let gats = g.read_until(b"END\r\n");
        assert!(
            gats.starts_with("VALUE hot 0 1 ") && gats.ends_with("\r\nh\r\nEND\r\n"),
            "{gats:?}"
        );
    }
    let mut admin = h.connect();
    assert_eq!(admin.stat_n("hkv", "worker_panics"), 0);
    c.expect("get hot\r\n", "VALUE hot 0 1\r\nh\r\nEND\r\n");
}

/// The router's thread woke every 5 ms to look for a stop: 200 wake-ups a second and 0.6%
/// of a core on an idle server (memcached's idle server: none; a hostile probe's baseline).
#[test]
fn regression_the_router_thread_of_an_idle_server_seldom_wakes() {
    let h = Hkv::start(&["-t", "1"]);
    let tasks = format!("/proc/{}/task", h.pid());
    let router = std::fs::read_dir(&tasks)
        .unwrap()
        .flatten()
        .find(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "hkv-router")
        })
        .expect("a router thread")
        .path();
    let wakeups = || -> u64 {
        let status = std::fs::read_to_string(router.join("status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    };
    let before = wakeups();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let woke = wakeups() - before;
    assert!(woke <= 40, "the router woke {woke} times in a second");
}
