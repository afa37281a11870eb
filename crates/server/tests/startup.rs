//! What an operator and a test harness see when hkv starts: how it names itself, how it
//! refuses a setting, what a memory limit past the machine's memory and `-o hashpower` do.

mod common;

use std::process::Command;

use common::Hkv;

fn hkv(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run hkv")
}

/// Dalli's test harness runs `memcached -h` and starts the server only if the first line is
/// `memcached X.Y.Z`; hkv's said `hkv: a memcached-compatible ...`, so Dalli's whole suite
/// refused to run. `-V` answers as `version` does, with hkv's own release beside it.
#[test]
fn regression_help_and_version_name_the_memcached_release_as_harnesses_look_for_it() {
    let help = hkv(&["-h"], &[]);
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout);
    let first = help.lines().next().unwrap_or_default();
    let release = first
        .strip_prefix("memcached ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("first line of -h: {first:?}"));
    assert_eq!(release, "1.6.21", "{first:?}");
    let version = hkv(&["-V"], &[]);
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        format!("memcached 1.6.21 (hkv {})\n", env!("CARGO_PKG_VERSION"))
    );
}

/// A refused setting is one line in memcached's words, never anyhow's backtrace (which
/// RUST_BACKTRACE=1 in the operator's environment used to add).
#[test]
fn regression_start_errors_are_one_line_without_a_backtrace() {
    let env = [("RUST_BACKTRACE", "1")];
    for (args, words) in [
        (
            &["-m", "1"][..],
            "hkv: Cannot set item size limit higher than 1/2 of memory max.\n",
        ),
        (
            &["-o", "hashpower=11"][..],
            "hkv: Initial hashtable multiplier of 11 is too low\n",
        ),
        (
            &["-o", "hashpower=x"][..],
            "hkv: Missing numeric argument for hashpower\n",
        ),
        // A mistyped option was only warned about, so the typo went unnoticed.
        (
            &["-o", "modern,idel_timeout=5"][..],
            "hkv: -o modern: no meaning in hkv, ignored\nhkv: Illegal suboption \"idel_timeout=5\"\n",
        ),
    ] {
        let out = hkv(args, &env);
        assert!(!out.status.success(), "{args:?} started");
        assert_eq!(String::from_utf8_lossy(&out.stderr), words, "{args:?}");
    }
}

fn meminfo_kib(field: &str) -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// memcached takes memory page by page and starts with any `-m`; hkv reserved its budget in
/// one mapping, which the kernel's heuristic overcommit refuses past RAM and swap: an
/// operator's `-m` sized for a larger machine failed with "Cannot allocate memory".
#[test]
fn regression_a_memory_limit_past_ram_and_swap_starts_as_memcached_does() {
    let kib = meminfo_kib("MemTotal:") + meminfo_kib("SwapTotal:");
    let mb = (kib / 1024 * 3 / 2).to_string();
    let h = Hkv::start(&["-m", &mb, "-o", "hashpower=16"]);
    let mut c = h.connect();
    c.expect("set k 0 0 2\r\nok\r\n", "STORED\r\n");
    c.expect("get k\r\n", "VALUE k 0 2\r\nok\r\nEND\r\n");
    assert_eq!(
        c.stat_n("settings", "maxbytes"),
        mb.parse::<u64>().unwrap() << 20
    );
    // Only what is touched is resident: the small first index, not the budget.
    assert!(h.rss() < 256 << 20, "RSS {} with -m {mb}", h.rss());
}

/// `-o hashpower=N` starts the index at 2^N slots, reported as memcached reports it; the
/// table then grows with the items, and none is lost to it.
#[test]
fn hashpower_sets_the_first_index_and_it_grows_with_the_items() {
    let h = Hkv::start(&["-m", "64", "-t", "1", "-o", "hashpower=12"]);
    let mut c = h.connect();
    assert_eq!(c.stat_n("settings", "hashpower_init"), 12);
    assert_eq!(c.stat_n("", "hash_power_level"), 12);
    assert_eq!(c.stat_n("", "hash_bytes"), 8 << 12);
    c.store_many("hp", 20_000);
    assert!(c.stat_n("", "hash_power_level") >= 15);
    assert!(c.stat_n("hkv", "index_grows") >= 3);
    assert_eq!(c.stat_n("", "curr_items"), 20_000);
    assert_eq!(c.stat_n("", "evictions"), 0);
    c.expect(
        "get hp0000000 hp0019999\r\n",
        "VALUE hp0000000 0 1\r\nv\r\nVALUE hp0019999 0 1\r\nv\r\nEND\r\n",
    );
}

/// Without `-o hashpower`, memcached reports 0 and the index is sized from `-m`.
#[test]
fn without_hashpower_the_index_is_sized_from_the_memory_limit() {
    let h = Hkv::start(&["-m", "64", "-t", "1"]);
    let mut c = h.connect();
    assert_eq!(c.stat_n("settings", "hashpower_init"), 0);
    let bytes = c.stat_n("", "hash_bytes");
    assert_eq!(
        c.stat_n("", "hash_power_level"),
        u64::from((bytes / 8).ilog2())
    );
    assert!(bytes > 8 << 16, "{bytes}");
}

/// memcached's `-l` takes host names and `ADDR:PORT` (the port instead of `-p`'s); hkv
/// refused both, so a memcached config with `-l localhost` did not start.
#[test]
fn regression_a_listen_name_with_its_own_port_starts_and_serves() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-p", "1", "-U", "0", "-l", "localhost:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start hkv");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read address line");
    let addr: std::net::SocketAddr = line
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    assert!(addr.ip().is_loopback(), "{line:?}");
    // Not -p's port 1 (which root could bind): the entry's own, any free one.
    assert_ne!(addr.port(), 1, "{line:?}");
    let version = common::Client::connect(addr).call("version\r\n", "\r\n");
    let _ = child.kill();
    let _ = child.wait();
    assert!(version.starts_with("VERSION "), "{version:?}");
    let bad = hkv(&["-l", "127.0.0.1:x"], &[]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("Invalid port number: \"x\""),
        "{bad:?}"
    );
}

/// With `-d`, a pid file hkv could not write made the daemon exit while the parent had
/// already returned 0: an init script saw success and nothing listened. memcached reports
/// the file and runs on. `-d -v` also closed stderr, losing `-d -vv 2>>log`'s logs, and the
/// logs carried colour codes into files.
#[test]
fn regression_a_daemon_keeps_its_logs_and_runs_without_its_pid_file() {
    let dir = std::env::temp_dir().join(format!("hkv-startup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let log = dir.join("log");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let status = Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-d", "-v", "-U", "0", "-l", "127.0.0.1"])
        .args(["-p", &port.to_string(), "-P", "/nonexistent-dir/hkv.pid"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .status()
        .expect("run hkv -d");
    assert!(status.success());
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut client = loop {
        match std::net::TcpStream::connect(addr) {
            Ok(_) => break common::Client::connect(addr),
            Err(e) if std::time::Instant::now() > deadline => panic!("nothing listens: {e}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    };
    let pid = client.stat_n("", "pid");
    client.expect("shutdown\r\n", "ERROR: shutdown not enabled\r\n");
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let text = std::fs::read_to_string(&log).expect("read log");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(text.contains("Could not open the pid file"), "{text:?}");
    assert!(text.contains("INFO"), "-v's logs kept: {text:?}");
    assert!(
        !text.contains('\x1b'),
        "no colour codes in a file: {text:?}"
    );
}

/// memcached's getopt lets a later flag replace an earlier one (a config file's line and a
/// wrapper's, say); hkv refused the second `-t` ("cannot be used multiple times"). `-l`
/// still adds listeners.
#[test]
fn regression_a_repeated_flag_takes_its_last_value_as_memcached_does() {
    let out = hkv(
        &[
            "-t",
            "2",
            "-t",
            "1",
            "-l",
            "127.0.0.1",
            "-l",
            "::1",
            "--print-config",
        ],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let config = String::from_utf8_lossy(&out.stdout);
    assert!(config.lines().any(|l| l == "threads = 1"), "{config}");
    assert!(
        config.lines().any(|l| l == "listen_more = [\"::1\"]"),
        "{config}"
    );
}

/// memcached's `-o slab_automove=0` (and `no_slab_automove`) turns automove off, as an
/// operator's existing command line expects; it was taken and ignored.
#[test]
fn slab_automove_suboptions_set_automove_as_in_memcached() {
    for (opt, want) in [
        (None, 1),
        (Some("slab_automove=0"), 0),
        (Some("no_slab_automove"), 0),
        (Some("slab_automove=2"), 1),
    ] {
        let mut args = vec!["-t", "1"];
        if let Some(o) = opt {
            args.extend(["-o", o]);
        }
        let h = Hkv::start(&args);
        let mut c = h.connect();
        assert_eq!(c.stat_n("settings", "slab_automove"), want, "{opt:?}");
        assert_eq!(
            c.stat("settings", "slab_automove_ratio").as_deref(),
            Some("0.80")
        );
        assert_eq!(c.stat_n("settings", "slab_automove_window"), 30);
        // `slabs automove` still switches it at run time.
        c.expect("slabs automove 1\r\n", "OK\r\n");
        assert_eq!(c.stat_n("settings", "slab_automove"), 1);
    }
    let out = hkv(&["-o", "slab_automove=3"], &[]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "hkv: slab_automove must be between 0 and 2\n"
    );
}

/// memcached's `MEMCACHED_PORT_FILENAME`: test harnesses (async-memcached's among them) find
/// an ephemeral port there. One that cannot be written is a warning in memcached and the
/// server serves; hkv exited with `Permission denied`, failing that whole suite.
#[test]
fn regression_the_port_file_is_written_and_one_that_cannot_be_is_no_reason_to_stop() {
    let dir = std::env::temp_dir().join(format!("hkv-portfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ports");
    let h = Hkv::start_with_env(
        &["--udp-listen", "127.0.0.1:0"],
        &[("MEMCACHED_PORT_FILENAME", file.to_str().unwrap())],
    );
    let mut c = h.connect();
    assert!(c.call("version\r\n", "\r\n").starts_with("VERSION "));
    let udp = h.udp.unwrap().port();
    // Written once the sockets are bound, after the address lines: it may come a moment
    // after them (the renaming makes it whole when it comes).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !file.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("TCP INET: {}\nUDP INET: {udp}\n", h.addr.port())
    );
    assert!(!dir.join("ports.lck").exists());
    drop(h);
    // A directory that does not exist cannot take the file.
    let missing = dir.join("no-such-dir").join("ports");
    let h = Hkv::start_with_env(
        &[],
        &[("MEMCACHED_PORT_FILENAME", missing.to_str().unwrap())],
    );
    let mut c = h.connect();
    assert_eq!(
        c.call("set k 0 0 1\r\nv\r\nget k\r\n", "END\r\n"),
        "STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n"
    );
    assert!(!missing.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
