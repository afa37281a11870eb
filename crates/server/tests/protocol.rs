//! The text and meta protocols, byte for byte, against a real hkv process.

mod common;

use std::io::Read;

use common::{assert_healthy, bin_request, Client, Hkv};

#[test]
fn storage_retrieval_and_errors_in_memcacheds_words() {
    let h = Hkv::start(&["-t", "2"]);
    let mut c = h.connect();
    let conv: &[(&str, &str)] = &[
        ("set a 5 0 3\r\nabc\r\n", "STORED\r\n"),
        ("get a missing\r\n", "VALUE a 5 3\r\nabc\r\nEND\r\n"),
        ("add a 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
        ("replace nope 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
        ("append a 9 0 2\r\nde\r\n", "STORED\r\n"),
        ("prepend a 9 0 2\r\nzz\r\n", "STORED\r\n"),
        ("get a\r\n", "VALUE a 5 7\r\nzzabcde\r\nEND\r\n"),
        (
            "incr a 1\r\n",
            "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        ),
        ("set n 0 0 20\r\n18446744073709551615\r\n", "STORED\r\n"),
        ("incr n 2\r\n", "1\r\n"),
        ("decr n 5\r\n", "0\r\n"),
        (
            "incr n abc\r\n",
            "CLIENT_ERROR invalid numeric delta argument\r\n",
        ),
        ("incr nope 1\r\n", "NOT_FOUND\r\n"),
        ("touch a 100\r\n", "TOUCHED\r\n"),
        ("touch nope 100\r\n", "NOT_FOUND\r\n"),
        ("delete a\r\n", "DELETED\r\n"),
        ("delete a\r\n", "NOT_FOUND\r\n"),
        ("delete a 0\r\n", "NOT_FOUND\r\n"),
        (
            "delete a 5\r\n",
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
        ),
        // More than three words after it: memcached never reaches its usage line.
        ("delete a 0 noreply x\r\n", "ERROR\r\n"),
        ("delete a 1 2 3\r\n", "ERROR\r\n"),
        ("bogus\r\n", "ERROR\r\n"),
        ("\r\n", "ERROR\r\n"),
        ("get\r\n", "ERROR\r\n"),
        ("set a 0 0\r\n", "ERROR\r\n"),
        (
            "set a x 0 1\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "set a 0 0 -1\r\n",
            "CLIENT_ERROR bad command line format\r\n",
        ),
        (
            "set a 0 0 3\r\nabcd\r\n",
            "CLIENT_ERROR bad data chunk\r\nERROR\r\n",
        ),
        ("verbosity 1\r\n", "OK\r\n"),
        // decr shortened "1" of 20 bytes in place, padded with spaces (memcached 1.6).
        (
            "gat 100 n\r\n",
            "VALUE n 0 20\r\n0                   \r\nEND\r\n",
        ),
        ("gat abc n\r\n", "CLIENT_ERROR invalid exptime argument\r\n"),
        ("shutdown\r\n", "ERROR: shutdown not enabled\r\n"),
    ];
    for (req, want) in conv {
        c.expect(req, want);
    }
    regression_version_is_digits_and_dots_as_strict_parsers_need(&mut c);
}

/// Perl's `version` module (Cache::Memcached::Fast's tests parse every server's version with
/// it) refused `1.6.21-hkv0.1.0`; memcached's releases answer digits and dots.
fn regression_version_is_digits_and_dots_as_strict_parsers_need(c: &mut Client) {
    let r = c.call("version\r\n", "\r\n");
    let v = r
        .strip_prefix("VERSION ")
        .and_then(|v| v.strip_suffix("\r\n"));
    let v = v.unwrap_or_else(|| panic!("{r:?}"));
    assert!(v.starts_with("1.6."), "{r:?}");
    assert_eq!(v.split('.').count(), 3, "{r:?}");
    assert!(
        v.split('.')
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        "{r:?}"
    );
}

#[test]
fn cas_flow() {
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    c.call("set k 0 0 1\r\n1\r\n", "\r\n");
    let r = c.call("gets k\r\n", "END\r\n");
    let cas: u64 = r.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert_eq!(
        c.call(&format!("cas k 0 0 1 {}\r\n2\r\n", cas + 1), "\r\n"),
        "EXISTS\r\n"
    );
    assert_eq!(
        c.call(&format!("cas k 0 0 1 {cas}\r\n3\r\n"), "\r\n"),
        "STORED\r\n"
    );
    assert_eq!(
        c.call(&format!("cas k 0 0 1 {cas}\r\n4\r\n"), "\r\n"),
        "EXISTS\r\n"
    );
    assert_eq!(c.call("cas gone 0 0 1 1\r\n4\r\n", "\r\n"), "NOT_FOUND\r\n");
}

#[test]
fn disable_cas_reports_zero_and_never_matches_as_memcached_does() {
    // memcached -C (checked side by side with 1.6.18); hkv ignored -C with a warning.
    let h = Hkv::start(&["-C"]);
    let mut c = h.connect();
    let conv: &[(&str, &str)] = &[
        ("set a 0 0 1\r\n1\r\n", "STORED\r\n"),
        ("gets a\r\n", "VALUE a 0 1 0\r\n1\r\nEND\r\n"),
        ("cas a 0 0 1 0\r\n2\r\n", "EXISTS\r\n"),
        ("cas a 0 0 1 5\r\n2\r\n", "EXISTS\r\n"),
        ("cas zz 0 0 1 5\r\n2\r\n", "NOT_FOUND\r\n"),
        ("mg a c v\r\n", "VA 1 c0\r\n1\r\n"),
        ("ms a 1 C0\r\n3\r\n", "EX\r\n"),
        ("ms a 1 C5\r\n3\r\n", "EX\r\n"),
        ("incr a 1\r\n", "2\r\n"),
        ("gets a\r\n", "VALUE a 0 1 0\r\n2\r\nEND\r\n"),
        ("append a 0 0 1\r\nx\r\n", "STORED\r\n"),
        ("gats 0 a\r\n", "VALUE a 0 2 0\r\n2x\r\nEND\r\n"),
        ("md a C0 q\r\nmn\r\n", "MN\r\n"),
        ("get a\r\n", "END\r\n"),
    ];
    for (send, want) in conv {
        c.expect(send, want);
    }
    assert_eq!(c.stat("settings", "cas_enabled").unwrap(), "no");
    let with_cas = Hkv::start(&[]);
    let mut on = with_cas.connect();
    assert_eq!(on.stat("settings", "cas_enabled").unwrap(), "yes");
    assert_healthy(&h);
}

/// memcached's `-C` drops the CAS a storage command carries (its items have none to set or
/// compare) except where the command is a compare-and-swap: text `cas`, `ms` in modes S and
/// R. hkv answered "exists" to binary SET/REPLACE/APPEND/PREPEND with a header CAS and to
/// `ms MA C<cas>`, where memcached 1.6.18 stores (replies below measured on it, `-C`).
#[test]
fn regression_with_cas_off_a_storage_command_ignores_its_cas_as_memcached_does() {
    let h = Hkv::start(&["-C"]);
    let mut c = h.connect();
    for (send, want) in [
        ("set k 0 0 2\r\n10\r\n", "STORED\r\n"),
        ("ms k 1 MA C123\r\nx\r\n", "HD\r\n"),
        ("ms k 1 MP C5\r\ny\r\n", "HD\r\n"),
        ("mg k C0 v\r\n", "VA 4\r\ny10x\r\n"),
        ("ms k 1 MR C5\r\nz\r\n", "EX\r\n"),
        ("ms k 1 MS C5\r\nz\r\n", "EX\r\n"),
        ("ms k 1 ME C5\r\nz\r\n", "NS\r\n"),
    ] {
        c.expect(send, want);
    }
    let with_cas = |mut p: Vec<u8>, cas: u64| {
        p[16..24].copy_from_slice(&cas.to_be_bytes());
        p
    };
    let ex = [0u8; 8];
    // The first byte of a connection picks its protocol.
    let mut b = h.connect();
    for (what, req, status) in [
        ("SET", with_cas(bin_request(0x01, b"b", &ex, b"v1"), 123), 0),
        (
            "REPLACE",
            with_cas(bin_request(0x03, b"b", &ex, b"v2"), 9),
            0,
        ),
        ("APPEND", with_cas(bin_request(0x0e, b"b", &[], b"+"), 9), 0),
        (
            "PREPEND",
            with_cas(bin_request(0x0f, b"b", &[], b"-"), 9),
            0,
        ),
        (
            "ADD of a missing key",
            with_cas(bin_request(0x02, b"nb", &ex, b"n"), 9),
            0,
        ),
        (
            "ADD of a present key",
            with_cas(bin_request(0x02, b"b", &ex, b"n"), 9),
            2,
        ),
        ("DELETE", with_cas(bin_request(0x04, b"b", &[], &[]), 9), 2),
    ] {
        b.send(&req);
        let mut head = [0u8; 24];
        b.stream.read_exact(&mut head).unwrap();
        let body = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
        let mut rest = vec![0; body];
        b.stream.read_exact(&mut rest).unwrap();
        assert_eq!(u16::from_be_bytes([head[6], head[7]]), status, "{what}");
    }
    c.expect(
        "get b nb\r\n",
        "VALUE b 0 4\r\n-v2+\r\nVALUE nb 0 1\r\nn\r\nEND\r\n",
    );
}

#[test]
fn noreply_suppresses_replies_and_pipelines_stay_in_order() {
    let h = Hkv::start(&["-t", "2"]);
    let mut c = h.connect();
    // Many commands in one write: replies come back in order, noreply ones silent.
    let mut req = String::new();
    let mut want = String::new();
    for i in 0..300 {
        req += &format!("set k{i} 0 0 {} noreply\r\nv{i}\r\n", format!("v{i}").len());
        req += &format!("get k{i}\r\n");
        want += &format!("VALUE k{i} 0 {}\r\nv{i}\r\nEND\r\n", format!("v{i}").len());
        req += &format!("delete k{i} noreply\r\nget k{i}\r\n");
        want += "END\r\n";
    }
    req += "incr nope 1 noreply\r\nflush_all noreply\r\nset z 0 0 1\r\nz\r\n";
    want += "STORED\r\n";
    c.send(req.as_bytes());
    let got = c.read_until(want.as_bytes());
    assert_eq!(got, want);
}

#[test]
fn requests_split_at_every_byte_are_reassembled() {
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    c.stream.set_nodelay(true).unwrap();
    let req = b"set split 1 0 5\r\nhello\r\nget split\r\n";
    for b in req.iter() {
        c.send(&[*b]);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        c.read_until(b"END\r\n"),
        "STORED\r\nVALUE split 1 5\r\nhello\r\nEND\r\n"
    );
}

#[test]
fn values_up_to_the_item_size_limit_and_no_further() {
    let h = Hkv::start(&["-I", "2m", "-m", "64"]);
    let mut c = h.connect();
    // memcached counts its 48-byte header, the key and NUL, the CRLF and 8 bytes of CAS
    // against -I: 62 bytes under `big`.
    let largest = (2 << 20) - 62;
    let big = "x".repeat(largest);
    assert_eq!(
        c.call(&format!("set big 0 0 {}\r\n{big}\r\n", big.len()), "\r\n"),
        "STORED\r\n"
    );
    let r = c.call("get big\r\n", "END\r\n");
    assert_eq!(
        r.len(),
        big.len() + format!("VALUE big 0 {largest}\r\n\r\nEND\r\n").len()
    );
    // One byte over: refused, the data swallowed (not parsed as commands), old value gone.
    let over = "y".repeat(largest + 1);
    assert_eq!(
        c.call(&format!("set big 0 0 {}\r\n{over}\r\n", over.len()), "\r\n"),
        "SERVER_ERROR object too large for cache\r\n"
    );
    assert_eq!(c.call("get big\r\n", "END\r\n"), "END\r\n");
    assert_healthy(&h);
}

#[test]
fn flush_all_now_and_delayed() {
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    c.call(
        "set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\n",
        "STORED\r\nSTORED\r\n",
    );
    assert_eq!(
        c.call("flush_all\r\nget a b\r\n", "END\r\n"),
        "OK\r\nEND\r\n"
    );
    c.call("set a 0 0 1\r\n1\r\n", "\r\n");
    assert_eq!(c.call("flush_all 3\r\n", "\r\n"), "OK\r\n");
    assert_eq!(
        c.call("get a\r\n", "END\r\n"),
        "VALUE a 0 1\r\n1\r\nEND\r\n"
    );
    // Gone from the second before the time on, as in memcached (a flush two seconds away
    // was answered for another second).
    std::thread::sleep(std::time::Duration::from_millis(2050));
    assert_eq!(c.call("get a\r\n", "END\r\n"), "END\r\n");
    assert_eq!(
        c.call("flush_all x\r\n", "\r\n"),
        "CLIENT_ERROR invalid exptime argument\r\n"
    );
    // memcached counts every flush_all it reads, a bad delay too.
    assert_eq!(c.stat_u64("", "cmd_flush"), Some(3));
}

#[test]
fn regression_a_delayed_flush_all_hides_items_a_second_early_as_in_memcached() {
    // memcached's oldest_live is the flush time less one second: `flush_all 2` hides what
    // was stored within a second, and `flush_all 1` at once. hkv flushed at the time itself,
    // so a client flushing with a delay read old values a second longer (a differential).
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    c.call("set a 0 0 1\r\n1\r\n", "\r\n");
    assert_eq!(
        c.call("flush_all 1\r\nget a\r\n", "END\r\n"),
        "OK\r\nEND\r\n"
    );
    c.call("set a 0 0 1\r\n1\r\n", "\r\n");
    assert_eq!(c.call("flush_all 2\r\n", "\r\n"), "OK\r\n");
    std::thread::sleep(std::time::Duration::from_millis(1050));
    assert_eq!(c.call("get a\r\n", "END\r\n"), "END\r\n");
    assert_healthy(&h);
}

#[test]
fn regression_flush_all_at_a_time_before_the_start_flushes_nothing_as_in_memcached() {
    // hkv took any past absolute time as "now" and flushed everything; memcached 1.6.18
    // flushes nothing for a time before it started, and calls off a delayed flush.
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    c.call("set a 0 0 1\r\n1\r\n", "\r\n");
    assert_eq!(
        c.call("flush_all 1000000000\r\nget a\r\n", "END\r\n"),
        "OK\r\nVALUE a 0 1\r\n1\r\nEND\r\n"
    );
    c.call("flush_all 2\r\nflush_all 2592001\r\n", "OK\r\nOK\r\n");
    std::thread::sleep(std::time::Duration::from_millis(3100));
    assert_eq!(
        c.call("get a\r\n", "END\r\n"),
        "VALUE a 0 1\r\n1\r\nEND\r\n"
    );
    // A time since the start is a flush, at once when it has passed.
    let since_start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 1;
    assert_eq!(
        c.call(&format!("flush_all {since_start}\r\nget a\r\n"), "END\r\n"),
        "OK\r\nEND\r\n"
    );
}

#[test]
fn expiry_is_honoured() {
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    c.call(
        "set e 0 1 1\r\n1\r\nset n 0 -1 1\r\n1\r\n",
        "STORED\r\nSTORED\r\n",
    );
    assert_eq!(c.call("get n\r\n", "END\r\n"), "END\r\n");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert_eq!(c.call("get e\r\n", "END\r\n"), "END\r\n");
}

#[test]
fn meta_commands() {
    let h = Hkv::start(&["-t", "2"]);
    let mut c = h.connect();
    let conv: &[(&str, &str)] = &[
        ("mn\r\n", "MN\r\n"),
        ("ms mk 2 F5 T0\r\nhi\r\n", "HD\r\n"),
        (
            "mg mk v f t s k Oab\r\n",
            "VA 2 f5 t-1 s2 kmk Oab\r\nhi\r\n",
        ),
        ("mg mk\r\n", "HD\r\n"),
        ("mg nope v\r\n", "EN\r\n"),
        ("mg nope v q\r\nmn\r\n", "MN\r\n"),
        ("ms mk 2 q\r\nho\r\nmn\r\n", "MN\r\n"),
        ("ms mk 1 ME\r\nx\r\n", "NS\r\n"),
        ("ms mk 1 MA\r\n!\r\n", "HD\r\n"),
        ("mg mk v\r\n", "VA 3\r\nho!\r\n"),
        ("ms cnt 1\r\n5\r\n", "HD\r\n"),
        ("ma cnt D10 v\r\n", "VA 2\r\n15\r\n"),
        ("ma cnt MD D20 v\r\n", "VA 1\r\n0\r\n"),
        ("ma gone\r\n", "NF\r\n"),
        ("md mk q\r\nmn\r\n", "MN\r\n"),
        ("md mk\r\n", "NF\r\n"),
        ("mg mk v h\r\n", "EN\r\n"),
        ("mg mk v Z\r\n", "CLIENT_ERROR invalid flag\r\n"),
        ("ms mk abc\r\n", "CLIENT_ERROR bad command line format\r\n"),
    ];
    for (req, want) in conv {
        c.expect(req, want);
    }
    let got = c.call("me cnt\r\n", "\r\n");
    assert!(got.starts_with("ME cnt exp=-1 la="), "{got:?}");
    assert!(got.contains(" fetch=no cls=1 size="), "{got:?}");
    // CAS through meta: a stale CAS is refused, the current one accepted.
    let r = c.call("mg cnt c\r\n", "\r\n");
    let cas: u64 = r.trim().strip_prefix("HD c").unwrap().parse().unwrap();
    assert_eq!(
        c.call(&format!("ms cnt 1 C{}\r\n7\r\n", cas + 1), "\r\n"),
        "EX\r\n"
    );
    assert_eq!(
        c.call(&format!("ms cnt 1 C{cas}\r\n7\r\n"), "\r\n"),
        "HD\r\n"
    );
    assert_eq!(c.call(&format!("md cnt C{cas}\r\n"), "\r\n"), "EX\r\n");
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let mut h = Hkv::start(&[]);
    assert_healthy(&h);
    assert!(h.terminate(), "hkv did not exit cleanly on SIGTERM");
}

#[test]
fn shutdown_command_when_enabled() {
    let mut h = Hkv::start(&["-A"]);
    let mut c = h.connect();
    c.send(b"shutdown\r\n");
    let status = h.child.wait().unwrap();
    assert!(status.success());
}

/// A hostile probe: commands sent after `shutdown` on its connection still ran (a `set`
/// behind it was stored and, with `-e`, kept across the restart). memcached runs none.
#[test]
fn regression_nothing_sent_after_shutdown_runs() {
    let mut h = Hkv::start(&["-A", "-t", "1"]);
    let mut c = h.connect();
    c.send(b"version\r\nshutdown\r\nset after 0 0 1\r\nz\r\nget after\r\n");
    let mut got = Vec::new();
    let _ = c.stream.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("VERSION "), "{got:?}");
    assert_eq!(got.lines().count(), 1, "{got:?}");
    assert!(h.child.wait().unwrap().success());
}

#[test]
fn stats_fields_monitoring_scrapes() {
    let h = Hkv::start(&["-t", "2", "-m", "32"]);
    let mut c = h.connect();
    c.call("set a 0 0 1\r\n1\r\nget a\r\nget b\r\n", "END\r\nEND\r\n");
    let s = c.call("stats\r\n", "END\r\n");
    let field = |name: &str| -> String {
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
            .unwrap_or_else(|| panic!("no {name} in {s}"))
            .to_string()
    };
    assert_eq!(field("get_hits"), "1");
    assert_eq!(field("get_misses"), "1");
    assert_eq!(field("cmd_get"), "2");
    assert_eq!(field("curr_items"), "1");
    assert_eq!(field("limit_maxbytes"), (32u64 << 20).to_string());
    assert_eq!(field("threads"), "2");
    assert_eq!(field("pid"), h.pid().to_string());
    for f in [
        "uptime",
        "time",
        "version",
        "curr_connections",
        "total_connections",
        "bytes",
        "evictions",
        "bytes_read",
        "bytes_written",
        "cmd_set",
    ] {
        field(f);
    }
    for group in ["settings", "items", "slabs", "hkv"] {
        let r = c.call(&format!("stats {group}\r\n"), "END\r\n");
        assert!(r.starts_with("STAT "), "stats {group}: {r}");
    }
    assert_eq!(c.call("stats nonsense\r\n", "\r\n"), "ERROR\r\n");
}

#[test]
fn stats_hkv_times_every_dido_task() {
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    let task = |s: &str, n: &str| -> u64 {
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("STAT task_{n}_ns ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no task_{n}_ns in {s}"))
    };
    let before = c.call("stats hkv\r\n", "END\r\n");
    for i in 0..200 {
        c.call(&format!("set k{i} 0 0 1\r\nx\r\nget k{i}\r\n"), "END\r\n");
    }
    let after = c.call("stats hkv\r\n", "END\r\n");
    for n in ["rv", "pp", "engine", "in", "kc", "rd", "mm", "wr", "sd"] {
        assert!(
            task(&after, n) > task(&before, n),
            "task_{n}_ns did not grow over 400 requests"
        );
    }
}

#[test]
fn an_item_limit_above_half_the_memory_is_refused_as_memcached_does() {
    for (args, ok) in [
        (["-m", "1", "-I", "1m"], false),
        (["-m", "64", "-I", "33m"], false),
        (["-m", "64", "-I", "32m"], true),
        (["-m", "4096", "-I", "1025m"], false),
        (["-m", "4096", "-I", "1024m"], true),
    ] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hkv"))
            .args(["-p", "0", "-l", "127.0.0.1"])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run hkv");
        let started = {
            use std::io::BufRead;
            let mut line = String::new();
            let _ = std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
            line.contains("listening")
        };
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        assert_eq!(started, ok, "{args:?}");
        if !ok {
            let why = if args[1] == "4096" {
                "Cannot set item size limit higher than a gigabyte."
            } else {
                "Cannot set item size limit higher than 1/2 of memory max."
            };
            assert!(
                String::from_utf8_lossy(&out.stderr).contains(why),
                "{args:?}"
            );
        }
    }
}

#[test]
fn lru_commands_are_refused_as_memcached_refuses_them_without_an_lru_maintainer() {
    // hkv has one CLOCK per class: no segmented queues to switch or tune (docs/protocol.md).
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    for cmd in [
        "lru mode flat",
        "lru mode segmented",
        "lru temp_ttl 60",
        "lru tune 10 25 0.1 2.0",
        "lru",
    ] {
        c.expect(&format!("{cmd}\r\n"), "ERROR\r\n");
    }
    c.expect("mn\r\n", "MN\r\n");
    assert_healthy(&h);
}

/// An admin probe: `version\r\nwatch\r\n` in one write started a watch behind the unsent
/// `VERSION`; memcached refuses it, as it refuses such a metadump. Sent alone, it starts.
#[test]
fn regression_a_watch_behind_unsent_replies_is_refused() {
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    let got = c.call("version\r\nwatch\r\n", "watch\r\n");
    assert!(
        got.starts_with("VERSION ")
            && got.ends_with("\r\nERROR cannot pipeline other commands before watch\r\n"),
        "{got:?}"
    );
    c.expect("watch\r\n", "OK\r\n");
}
