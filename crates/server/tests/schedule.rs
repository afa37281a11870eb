//! The periodic batch scheduler in the server's path: batches held for the interval C keep
//! every connection's order, on the CPU and the OpenCL engines.

mod common;

use std::process::{Command, Stdio};

use common::Hkv;

fn stat(h: &Hkv, name: &str) -> String {
    let mut c = h.connect();
    let s = c.call("stats hkv\r\n", "END\r\n");
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {s}"))
        .to_string()
}

fn opencl_available() -> bool {
    let Ok(mut child) = Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-p", "0", "--engine", "opencl", "-t", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let mut line = String::new();
    use std::io::BufRead;
    let _ = std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    let _ = child.kill();
    let _ = child.wait();
    let up = line.contains("listening");
    if !up && std::env::var("HKV_REQUIRE_OPENCL").as_deref() == Ok("1") {
        panic!("HKV_REQUIRE_OPENCL=1 but hkv cannot start on the OpenCL engine");
    }
    up
}

/// SET, GET, DELETE, GET, INCR chains pipelined on four connections at once, all writing the
/// same keys: every connection sees its own writes in its own order, and a key written by all
/// of them always holds one of their whole values.
fn ordered_chains(engine: &str, interval: &str) {
    let h = Hkv::start(&[
        "-t",
        "2",
        "--engine",
        engine,
        "--batch-interval-us",
        interval,
    ]);
    assert_eq!(stat(&h, "batch_interval_us"), format!("{interval}.0"));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let addr = h.addr;
            std::thread::spawn(move || {
                let mut c = common::Client::connect(addr);
                let mut req = String::new();
                let mut want = String::new();
                for i in 0..50 {
                    let k = format!("key{}-{t}", i % 5);
                    let v = format!("{t}-{i}");
                    req += &format!("set {k} 0 0 {}\r\n{v}\r\nget {k}\r\n", v.len());
                    want += &format!("STORED\r\nVALUE {k} 0 {}\r\n{v}\r\nEND\r\n", v.len());
                    req += &format!("delete {k}\r\nget {k}\r\n");
                    want += "DELETED\r\nEND\r\n";
                    req += &format!("set n{t} 0 0 1\r\n7\r\nincr n{t} 5\r\nincr n{t} 1\r\n");
                    want += "STORED\r\n12\r\n13\r\n";
                    // The key every connection writes, then reads.
                    req += &format!("set shared 0 0 5\r\nv{t}-{:02}\r\nget shared\r\n", i);
                    want += "STORED\r\nVALUE shared 0 5\r\nv?-??\r\nEND\r\n";
                }
                c.send(req.as_bytes());
                let mut got = String::new();
                while got.len() < want.len() {
                    got += &c.read_until(b"\r\n");
                }
                assert_eq!(got.len(), want.len(), "connection {t}");
                for (g, w) in got.bytes().zip(want.bytes()) {
                    assert!(
                        w == b'?' || g == w,
                        "connection {t}: got\n{got}\nwant\n{want}"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    common::assert_healthy(&h);
}

/// One connection pipelines the whole chain; the replies must match byte for byte.
fn one_connection_chain(engine: &str, interval: &str) {
    let h = Hkv::start(&[
        "-t",
        "1",
        "--engine",
        engine,
        "--batch-interval-us",
        interval,
    ]);
    let mut c = h.connect();
    let mut req = String::new();
    let mut want = String::new();
    for i in 0..100 {
        let v = format!("value{i}");
        req += &format!("set k 0 0 {}\r\n{v}\r\nget k\r\n", v.len());
        want += &format!("STORED\r\nVALUE k 0 {}\r\n{v}\r\nEND\r\n", v.len());
        req += "delete k\r\nget k\r\n";
        want += "DELETED\r\nEND\r\n";
        req += "set c 0 0 1\r\n1\r\nincr c 9\r\nincr c 90\r\nget c\r\n";
        want += "STORED\r\n10\r\n100\r\nVALUE c 0 3\r\n100\r\nEND\r\n";
    }
    c.send(req.as_bytes());
    let mut got = String::new();
    while got.len() < want.len() {
        got += &c.read_until(b"\r\n");
    }
    assert_eq!(got, want);
    let batches: f64 = stat(&h, "avg_search_batch").parse().unwrap();
    assert!(batches > 0.0);
    // The chain went through the same-key table: GETs answered from waiting writes, writes
    // merged into waiting ones, and the table applied to the index in batches.
    let n = |name: &str| -> u64 { stat(&h, name).parse().unwrap() };
    assert!(n("forwarded_reads") > 0, "no GET was forwarded");
    assert!(n("merged_writes") > 0, "no write merged");
    // An idle server applies what is left instead of waiting for more traffic.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while n("pending_writes") > 0 {
        assert!(std::time::Instant::now() < deadline, "writes left waiting");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(n("applied_writes") > 0 && n("write_applies") > 0);
    let mut c = h.connect();
    assert_eq!(c.call("get k\r\n", "END\r\n"), "END\r\n");
    assert_eq!(
        c.call("get c\r\n", "END\r\n"),
        "VALUE c 0 3\r\n100\r\nEND\r\n"
    );
}

#[test]
fn a_held_batch_keeps_one_connections_order_on_the_cpu() {
    one_connection_chain("cpu", "2000");
    ordered_chains("cpu", "500");
}

#[test]
fn a_held_batch_keeps_one_connections_order_on_opencl() {
    if !opencl_available() {
        eprintln!("no OpenCL device here; skipped");
        return;
    }
    one_connection_chain("opencl", "2000");
    ordered_chains("opencl", "500");
}

#[test]
fn the_interval_adapts_within_its_bounds_and_bad_bounds_are_refused() {
    let h = Hkv::start(&["-t", "1", "--batch-interval-us", "100..300"]);
    let mut c = h.connect();
    for i in 0..300 {
        c.call(&format!("set k{i} 0 0 1\r\nx\r\nget k{i}\r\n"), "END\r\n");
    }
    let ci: f64 = stat(&h, "batch_interval_us").parse().unwrap();
    assert!((100.0..=300.0).contains(&ci), "C = {ci}");
    assert_eq!(stat(&h, "batch_interval_min_us"), "100.0");
    assert_eq!(stat(&h, "batch_interval_max_us"), "300.0");
    assert!(stat(&h, "fit_search_k_ns").parse::<f64>().unwrap() >= 0.0);
    for bad in ["300..100", "abc", "5..2000000"] {
        let out = Command::new(env!("CARGO_BIN_EXE_hkv"))
            .args(["-p", "0", "--batch-interval-us", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("batch interval") || err.contains("invalid value"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn regression_writes_left_waiting_while_a_timer_is_set() {
    // Delayed index writes are applied when a worker is about to sleep. "About to sleep"
    // used to mean "with no timer", so a worker with one (idle kicks, or the io_uring
    // loop's probe of quiet connections) kept writes waiting while it idled: seen as
    // `pending_writes` stuck above 0 once the probe came in.
    for (io, extra) in [("epoll", "idle_timeout=600"), ("auto", "")] {
        let mut args = vec!["-t", "1", "--io", io, "--batch-interval-us", "2000"];
        if !extra.is_empty() {
            args.extend(["-o", extra]);
        }
        let h = Hkv::start(&args);
        let mut c = h.connect();
        let mut req = String::new();
        for i in 0..50 {
            req += &format!("set k{i} 0 0 1\r\nx\r\n");
        }
        c.send(req.as_bytes());
        let want = "STORED\r\n".repeat(50);
        let mut got = String::new();
        while got.len() < want.len() {
            got += &c.read_until(b"\r\n");
        }
        assert_eq!(got, want);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let left = || stat(&h, "pending_writes").parse::<u64>().unwrap();
        while left() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "--io {io} -o {extra:?}: writes left waiting"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
