//! stats groups, stats reset, cachedump, metadump, cache_memlimit and the HTTP hang-up, as
//! an operator's tools use them. Names are compared with memcached's in
//! tests/clients/test_stats.py.

mod common;

use common::{Client, Hkv};
use std::io::{Read, Write};

#[test]
fn counters_are_counted_and_reset_gauges_are_not() {
    let h = Hkv::start(&["-t", "2"]);
    let mut c = h.connect();
    c.call(
        "set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\n",
        "STORED\r\nSTORED\r\n",
    );
    c.call("touch a 100\r\n", "\r\n");
    c.call("cas a 0 0 1 999999999\r\n3\r\n", "\r\n");
    c.call("mn\r\nmg a v\r\n", "1\r\n");
    c.call("me a\r\n", "\r\n");
    assert_eq!(c.stat("", "cmd_set").unwrap(), "3");
    assert_eq!(c.stat("", "cmd_touch").unwrap(), "1");
    // memcached's cmd_meta counts `me` alone.
    assert_eq!(c.stat("", "cmd_meta").unwrap(), "1");
    assert_eq!(c.stat("", "cas_badval").unwrap(), "1");
    assert_eq!(c.stat("slabs", "1:cmd_set").unwrap(), "2");
    assert_eq!(c.stat("slabs", "1:touch_hits").unwrap(), "1");
    assert_eq!(c.stat("slabs", "1:cas_badval").unwrap(), "1");
    assert_eq!(c.stat("items", "items:1:number").unwrap(), "2");
    c.expect("stats reset\r\n", "RESET\r\n");
    assert_eq!(c.stat("", "cmd_set").unwrap(), "0");
    assert_eq!(c.stat("", "get_hits").unwrap(), "0");
    assert_eq!(c.stat("slabs", "1:cmd_set").unwrap(), "0");
    assert_eq!(
        c.stat("", "curr_items").unwrap(),
        "2",
        "a gauge is not reset"
    );
    c.call("set a 0 0 1\r\n1\r\n", "STORED\r\n");
    assert_eq!(c.stat("", "cmd_set").unwrap(), "1");
    c.expect("stats sizes\r\n", "STAT sizes_status disabled\r\nEND\r\n");
    // An item stored already expired is stored, as memcached stores it, and its GET counts
    // in get_expired (hkv dropped it on arrival: a plain miss).
    c.call("set gone 0 -1 1\r\n1\r\n", "STORED\r\n");
    c.call("get gone\r\n", "END\r\n");
    assert_eq!(c.stat("", "get_expired").unwrap(), "1");
    c.expect("stats nonsense\r\n", "ERROR\r\n");
}

/// Found by a differential probe: a set refused as too large dropped the key's old value
/// and counted that as a delete (`delete_hits`, or `delete_misses` without one, and `del`
/// in `stats detail`); memcached drops it silently and counts a set in `stats detail`.
#[test]
fn regression_an_oversized_set_is_no_delete() {
    let h = Hkv::start(&["-t", "1", "-I", "1k"]);
    let mut c = h.connect();
    c.expect("stats detail on\r\n", "OK\r\n");
    c.call("set tz:1 0 0 1\r\na\r\n", "STORED\r\n");
    let big = "x".repeat(2000);
    for key in ["tz:1", "tz:2"] {
        c.expect(
            &format!("set {key} 0 0 2000\r\n{big}\r\n"),
            "SERVER_ERROR object too large for cache\r\n",
        );
    }
    // The binary protocol's refusal too (its own connection): SET, flags and exptime 0.
    let mut b = h.connect();
    b.send(&common::bin_request(0x01, b"tz:3", &[0; 8], big.as_bytes()));
    let reply = common::read_exact(&mut b, 24);
    let body = u32::from_be_bytes([reply[8], reply[9], reply[10], reply[11]]) as usize;
    common::read_exact(&mut b, body);
    assert_eq!(&reply[6..8], &[0x00, 0x03], "E2BIG");
    c.expect("get tz:1\r\n", "END\r\n");
    assert_eq!(c.stat_n("", "delete_hits"), 0);
    assert_eq!(c.stat_n("", "delete_misses"), 0);
    // memcached counts the text refusals only.
    assert_eq!(c.stat_n("", "store_too_large"), 2);
    assert_eq!(c.stat_n("slabs", "1:delete_hits"), 0);
    c.expect(
        "stats detail dump\r\n",
        "PREFIX tz get 1 hit 0 set 4 del 0\r\nEND\r\n",
    );
    // An `ms ... b` refused so drops its decoded key's value, not the value of a key
    // spelled like the base64 token (a review found `cmF3` dropped instead of `raw`).
    c.call(
        "set raw 0 0 1\r\nx\r\nset cmF3 0 0 1\r\ny\r\n",
        "STORED\r\nSTORED\r\n",
    );
    c.expect(
        &format!("ms cmF3 2000 b\r\n{big}\r\n"),
        "SERVER_ERROR object too large for cache\r\n",
    );
    c.expect("get raw cmF3\r\n", "VALUE cmF3 0 1\r\ny\r\nEND\r\n");
}

/// Found by a differential probe (stop 57): hkv counted gat as a get and a touch, me as a
/// get, md I as a delete, and every meta command in cmd_meta. memcached 1.6 counts each
/// command its own way; operators' dashboards read these, so they follow memcached's.
#[test]
fn regression_reads_and_deletes_count_as_memcached_counts_them() {
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    let counters = [
        "cmd_get",
        "get_hits",
        "get_misses",
        "cmd_touch",
        "touch_hits",
        "touch_misses",
        "delete_hits",
        "delete_misses",
        "cmd_meta",
    ];
    // (command, reply ends with, counters it moves by one: memcached 1.6.18's)
    let cases: [(&str, &str, &[&str]); 11] = [
        ("gat 100 k\r\n", "END\r\n", &["cmd_touch", "touch_hits"]),
        (
            "gat 100 nope\r\n",
            "END\r\n",
            &["cmd_touch", "touch_misses"],
        ),
        ("mg k T10\r\n", "HD\r\n", &["cmd_touch", "touch_hits"]),
        ("mg nope T10\r\n", "EN\r\n", &["cmd_get", "get_misses"]),
        ("mg new N10\r\n", "HD W\r\n", &["cmd_get", "get_hits"]),
        ("mg k v\r\n", "\r\nv\r\n", &["cmd_get", "get_hits"]),
        ("me k\r\n", "\r\n", &["cmd_meta"]),
        ("md k I\r\n", "HD\r\n", &[]),
        ("md k C1\r\n", "EX\r\n", &["delete_misses"]),
        ("md nope\r\n", "NF\r\n", &["delete_misses"]),
        ("mn\r\n", "MN\r\n", &[]),
    ];
    for (cmd, ends, moved) in cases {
        c.call("flush_all\r\nset k 0 0 1\r\nv\r\n", "OK\r\nSTORED\r\n");
        let before: Vec<u64> = counters.iter().map(|n| c.stat_n("", n)).collect();
        c.call(cmd, ends);
        for (name, b) in counters.iter().zip(before) {
            let want = b + u64::from(moved.contains(name));
            assert_eq!(c.stat_n("", name), want, "{name} after {cmd:?}");
        }
    }
}

/// Found by a differential probe: `me` moved its class's `get_hits` in `stats slabs`
/// (memcached's `me` counts in no statistic).
#[test]
fn regression_me_counts_in_no_slab_class_statistic() {
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    let class_hits = |c: &mut common::Client| -> u64 {
        let slabs = c.call("stats slabs\r\n", "END\r\n");
        slabs
            .lines()
            .filter_map(|l| l.split_once(":get_hits "))
            .map(|(_, v)| v.trim().parse::<u64>().expect("a count"))
            .sum()
    };
    c.call("set k 0 0 1\r\nv\r\n", "STORED\r\n");
    let before = class_hits(&mut c);
    let me = c.call("me k\r\nme k\r\nmn\r\n", "MN\r\n");
    assert_eq!(me.matches("ME k ").count(), 2, "{me}");
    assert_eq!(class_hits(&mut c), before, "after me");
    c.call("mg k v\r\n", "\r\nv\r\n");
    assert_eq!(class_hits(&mut c), before + 1, "after mg");
}

#[test]
fn cachedump_and_metadump_list_the_items() {
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    c.call(
        "set k1 0 0 3\r\nabc\r\nset k%2 0 100 1\r\nx\r\n",
        "STORED\r\nSTORED\r\n",
    );
    let dump = c.call("stats cachedump 1 0\r\n", "END\r\n");
    assert!(dump.contains("ITEM k1 [3 b; 0 s]\r\n"), "{dump}");
    assert!(dump.contains("ITEM k%2 [1 b; "), "{dump}");
    let one = c.call("stats cachedump 1 1\r\n", "END\r\n");
    assert_eq!(one.matches("ITEM ").count(), 1, "{one}");
    // Numbers read as safe_strtoul reads them: white space may end one (an admin probe:
    // a tab after the limit was a bad format).
    assert_eq!(c.call("stats cachedump 1 1\t\r\n", "END\r\n"), one);
    c.expect("stats cachedump 1\r\n", "CLIENT_ERROR bad command line\r\n");
    c.expect(
        "stats cachedump 999 1\r\n",
        "CLIENT_ERROR Illegal slab id\r\n",
    );
    // Ids memcached has (below 64) list nothing where there are no items, 0 included.
    c.expect("stats cachedump 0 1\r\n", "END\r\n");
    c.expect("stats cachedump 63 1\r\n", "END\r\n");
    let meta = c.call("lru_crawler metadump all\r\n", "END\r\n");
    assert!(meta.contains("key=k1 exp=-1 la="), "{meta}");
    assert!(
        meta.contains("key=k%252 exp="),
        "keys are url-encoded: {meta}"
    );
    assert!(meta.contains(" fetch=no cls=1 size="), "{meta}");
    // memcached 1.6's `hash` walks its hash table: the same items.
    assert_eq!(c.call("lru_crawler metadump hash\r\n", "END\r\n"), meta);
    let only2 = c.call("lru_crawler metadump 2\r\n", "END\r\n");
    assert_eq!(only2, "END\r\n");
    c.expect(
        "lru_crawler metadump x\r\n",
        "BADCLASS invalid class id\r\n",
    );
}

#[test]
fn cache_memlimit_moves_the_limit_within_what_was_reserved() {
    let h = Hkv::start(&["-m", "64"]);
    let mut c = h.connect();
    c.expect("cache_memlimit 32\r\n", "OK\r\n");
    assert_eq!(
        c.stat("", "limit_maxbytes").unwrap(),
        (32u64 << 20).to_string()
    );
    c.expect(
        "cache_memlimit 4\r\n",
        "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n",
    );
    c.expect(
        "cache_memlimit 1024 noreply\r\ncache_memlimit\r\n",
        "ERROR\r\n",
    );
    // As memcached 1.6.18 answers (a differential probe): megabytes past 10^9 look like
    // bytes, the number keeps its low 32 bits, a third word that is not noreply is ignored.
    c.expect(
        "cache_memlimit 99999999999\r\n",
        "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n",
    );
    c.expect(
        "cache_memlimit 4294967296\r\n",
        "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n",
    );
    c.expect("cache_memlimit 64 extra\r\n", "OK\r\n");
    c.expect("cache_memlimit abc\r\n", "ERROR\r\n");
    // Past -m: it said OK and stayed at 64 MB (operator-tools probe); memcached refuses so
    // when its memory is preallocated, as hkv's always is.
    c.expect(
        "cache_memlimit 128\r\n",
        "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n",
    );
    assert_eq!(
        c.stat("settings", "maxbytes").unwrap(),
        (64u64 << 20).to_string()
    );
}

/// An outside probe: after `cache_memlimit 8` on a nearly empty `-m 64 -t 2` server every
/// store was out of memory (the index alone held the 8 MB, and a class without a page could
/// get none). As memcached, a class gets its first page whatever the limit.
#[test]
fn regression_stores_work_after_cache_memlimit_lowers_the_limit() {
    for extra in [&[][..], &["-M"][..]] {
        let h = Hkv::start(&[&["-m", "64", "-t", "2"][..], extra].concat());
        let mut c = h.connect();
        c.expect("cache_memlimit 8\r\n", "OK\r\n");
        // The index holds the 8 MB: each class gets its first page, room for 5 of 50 KB.
        let sizes = [(10, 20), (1000, 20), (50_000, 5), (10, 20), (300, 20)];
        for (i, (len, n)) in sizes.into_iter().enumerate() {
            for k in 0..n {
                let v = "v".repeat(len);
                c.expect(&format!("set k{i}-{k} 0 0 {len}\r\n{v}\r\n"), "STORED\r\n");
            }
        }
        assert_eq!(c.stat_n("", "curr_items"), 85);
    }
}

#[test]
fn an_http_request_gets_a_hang_up() {
    let h = Hkv::start(&[]);
    for req in ["GET / HTTP/1.0\r\n", "POST /x HTTP/1.1\r\nHost: a\r\n\r\n"] {
        let mut c = h.connect();
        c.send(req.as_bytes());
        assert_eq!(c.read_to_close().expect("closed"), "");
    }
    // A key named GET is still a key.
    let mut c = h.connect();
    c.expect("get GET\r\n", "END\r\n");
}

/// Values near -I after the memory went to small items: a page moves to the large class
/// instead of the large value failing out of memory (memcached's slab automove).
#[test]
fn a_large_value_finds_memory_held_by_small_items() {
    let h = Hkv::start(&["-m", "8", "-t", "1"]);
    let mut c = h.connect();
    let small = "x".repeat(100);
    let mut req = String::new();
    for i in 0..60_000 {
        req.push_str(&format!("set s{i} 0 0 100 noreply\r\n{small}\r\n"));
    }
    c.send(req.as_bytes());
    c.expect("mn\r\n", "MN\r\n");
    let big = "b".repeat(900 * 1024);
    for k in 0..3 {
        c.expect(
            &format!("set big{k} 0 0 {}\r\n{big}\r\n", big.len()),
            "STORED\r\n",
        );
        let got = c.call(&format!("get big{k}\r\n"), "END\r\n");
        assert!(got.starts_with(&format!("VALUE big{k} 0 {}\r\nbbb", big.len())));
    }
    assert_ne!(c.stat("", "slabs_moved").unwrap(), "0");
    c.expect("slabs automove 0\r\n", "OK\r\n");
    assert_eq!(c.stat("settings", "slab_automove").unwrap(), "0");
    regression_slabs_reassign_minus_one_picks_a_source(&mut c);
}

/// memcached's `slabs reassign -1 <to>` picks a class with a page to spare itself; hkv
/// answered `BADCLASS` (a hostile probe's differential). The small items' class has pages
/// to spare here, so a page moves to an empty class.
fn regression_slabs_reassign_minus_one_picks_a_source(c: &mut common::Client) {
    let moved = |c: &mut common::Client| c.stat("", "slabs_moved").unwrap();
    let before = moved(c);
    c.expect("slabs reassign -1 3\r\n", "OK\r\n");
    assert_ne!(moved(c), before);
    c.expect(
        "slabs reassign -1 -1\r\n",
        "SAME src and dst class are identical\r\n",
    );
}

#[test]
fn regression_cachedump_lists_the_newest_items_first() {
    // memcached walks its LRU from the head: the last written item first (a GET within a
    // minute does not move it). hkv listed items in memory order. Checked side by side with
    // memcached 1.6.18. (With several partitions the order is by each partition's CAS
    // counter, which interleave: exact within a partition, close across them.)
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    for k in ["a", "b", "c"] {
        c.call(&format!("set {k} 0 0 1\r\n1\r\n"), "STORED\r\n");
    }
    c.call("get a\r\n", "END\r\n");
    c.expect(
        "stats cachedump 1 2\r\n",
        "ITEM c [1 b; 0 s]\r\nITEM b [1 b; 0 s]\r\nEND\r\n",
    );
    c.call("set b 0 0 1\r\n4\r\n", "STORED\r\n");
    c.expect(
        "stats cachedump 1 0\r\n",
        "ITEM b [1 b; 0 s]\r\nITEM c [1 b; 0 s]\r\nITEM a [1 b; 0 s]\r\nEND\r\n",
    );
}

#[test]
fn stats_hkv_profiles_the_workload() {
    // DIDO's cost-model inputs: shares, sizes, batch size and skew over a sliding window.
    let profile = |c: &mut Client, name: &str| -> f64 {
        c.stat("hkv", name)
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{name}"))
    };
    // Skewed: every request goes to 128 keys (about 8 of them sampled by the sketch, one
    // key in 16, whose top 8 per partition then hold most sampled requests).
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    let v = "v".repeat(100);
    for i in 0..128 {
        c.call(&format!("set hot{i:03} 0 0 100\r\n{v}\r\n"), "STORED\r\n");
    }
    // The window (a half-life of 8192 requests) holds all of it: 128 + 88 sets, 512 gets.
    for _ in 0..4 {
        for i in 0..128 {
            c.call(&format!("get hot{i:03}\r\n"), "END\r\n");
            if i % 6 == 0 {
                c.call(&format!("set hot{i:03} 0 0 100\r\n{v}\r\n"), "STORED\r\n");
            }
        }
    }
    let get_share = profile(&mut c, "profile_get_share");
    assert!((get_share - 512.0 / 728.0).abs() < 0.03, "{get_share}");
    assert!((profile(&mut c, "profile_set_share") - 216.0 / 728.0).abs() < 0.03);
    assert!((profile(&mut c, "profile_key_bytes") - 6.0).abs() < 0.5);
    assert!((profile(&mut c, "profile_value_bytes") - 100.0).abs() < 1.0);
    assert!(profile(&mut c, "profile_batch") >= 1.0);
    let skewed = profile(&mut c, "profile_top_key_share");
    assert!(skewed > 0.4, "128 keys: top share {skewed}");
    // Uniform: 3000 keys read once each.
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    for i in 0..3000 {
        c.call(&format!("get cold{i}\r\n"), "END\r\n");
    }
    let uniform = profile(&mut c, "profile_top_key_share");
    assert!(uniform < 0.1, "3000 keys: top share {uniform}");
}

#[test]
fn verbosity_changes_the_log_level_and_stats_settings() {
    // memcached: `verbosity N` sets the level `stats settings` shows (capped at 2, the low 32
    // bits of the number) and what it logs; hkv logged at its start-up level for good.
    let log = std::env::temp_dir().join(format!("hkv-verbosity-{}.log", std::process::id()));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-p", "0", "-l", "127.0.0.1"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let addr: std::net::SocketAddr = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    let closed_lines = || {
        std::fs::read_to_string(&log)
            .unwrap()
            .matches("connection closed")
            .count()
    };
    let mut c = Client::connect(addr);
    assert_eq!(c.stat("settings", "verbosity").unwrap(), "0");
    Client::connect(addr).expect("quit\r\n", "");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(closed_lines(), 0, "level 0 logs no connection");
    c.expect("verbosity 2\r\n", "OK\r\n");
    assert_eq!(c.stat("settings", "verbosity").unwrap(), "2");
    Client::connect(addr).expect("quit\r\n", "");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while closed_lines() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(closed_lines() > 0, "verbosity 2 logs connections closing");
    c.expect("verbosity 9\r\n", "OK\r\n");
    assert_eq!(c.stat("settings", "verbosity").unwrap(), "2");
    c.expect("verbosity 4294967297 noreply\r\n", "");
    assert_eq!(c.stat("settings", "verbosity").unwrap(), "1");
    c.expect(
        "verbosity -1\r\n",
        "CLIENT_ERROR bad command line format\r\n",
    );
    c.expect("verbosity 0\r\n", "OK\r\n");
    assert_eq!(c.stat("settings", "verbosity").unwrap(), "0");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&log);
}

#[test]
fn regression_a_metadump_of_a_list_of_classes_is_not_cut_short_by_other_classes() {
    // `lru_crawler metadump <id>,<id>` listed every class up to its limit (262,144 items)
    // and then kept the classes asked for: the items of a class walked first used up the
    // limit, and the classes asked for came out short.
    let h = Hkv::start(&["-m", "128"]);
    let mut c = h.connect();
    let mut small = String::new();
    for i in 0..300_000 {
        small.push_str(&format!("set s{i} 0 0 1 noreply\r\nv\r\n"));
    }
    c.send(small.as_bytes());
    let big = "x".repeat(3000);
    for i in 0..50 {
        c.expect(&format!("set big{i} 0 0 3000\r\n{big}\r\n"), "STORED\r\n");
    }
    let items = c.call("stats items\r\n", "END\r\n");
    let class = items
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("STAT items:")?;
            let (id, stat) = rest.split_once(':')?;
            (stat == "number 50").then(|| id.to_string())
        })
        .expect("the big items' class");
    let dump = c.call(&format!("lru_crawler metadump {class},63\r\n"), "END\r\n");
    let listed = dump.matches("key=big").count();
    assert_eq!(listed, 50, "every item of the classes asked for");
    assert!(!dump.contains("key=s"), "only the classes asked for");
    // A class named twice is listed once, as memcached takes the ids as a set.
    let twice = c.call(
        &format!("lru_crawler metadump {class},{class}\r\n"),
        "END\r\n",
    );
    assert_eq!(twice.matches("key=big").count(), 50, "each item once");
}

#[test]
fn regression_a_metadump_past_16_mib_lists_every_item_then_what_follows() {
    // A metadump was built whole and cut at 16 MiB: an operator's dump of 300,000 items
    // (about 21 MB of lines) ended with END after some 240,000 of them. It streams now,
    // as memcached's does, and what the client sent after it is answered after its END.
    let h = Hkv::start(&["-m", "256"]);
    let mut c = h.connect();
    let n = 300_000;
    c.store_many("dumped", n);
    let dump = c.call(
        "lru_crawler metadump all\r\nget dumped0000007\r\n",
        "END\r\nVALUE dumped0000007 0 1\r\nv\r\nEND\r\n",
    );
    assert!(dump.len() > 16 << 20, "a dump of {} bytes", dump.len());
    let mut keys: Vec<&str> = dump
        .lines()
        .filter_map(|l| l.strip_prefix("key=")?.split(' ').next())
        .collect();
    assert_eq!(keys.len(), n, "one line per item");
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), n, "each item once");
    assert_eq!(
        dump.matches("END\r\n").count(),
        2,
        "the dump's END, then the get's"
    );
    // A client that shuts its side after asking (`nc -q`) still gets the whole dump.
    let mut s = std::net::TcpStream::connect(h.addr).unwrap();
    s.write_all(b"lru_crawler metadump all\r\n").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    assert!(all.ends_with(b"END\r\n"), "the dump reached its END");
    let lines = all.split(|&b| b == b'\n');
    assert_eq!(lines.filter(|l| l.starts_with(b"key=")).count(), n);
}

/// `bytes` counted key and value only, so with small items it read 0.15 of
/// `limit_maxbytes` while the server was already evicting (memcached, which counts its item
/// header too, reads 0.75 there): an alert on `bytes / limit_maxbytes` never fired.
#[test]
fn regression_bytes_counts_item_headers_so_a_full_cache_reads_full() {
    let h = Hkv::start(&["-m", "8", "-t", "1"]);
    let mut c = h.connect();
    let mut round = 0;
    while c.stat_n("", "evictions") == 0 {
        assert!(round < 100, "no eviction after {round} rounds");
        c.store_many(&format!("r{round}:"), 10_000);
        round += 1;
    }
    let full = c.stat_n("", "bytes") as f64 / c.stat_n("", "limit_maxbytes") as f64;
    assert!(
        full > 0.5,
        "bytes / limit_maxbytes {full:.2} while evicting"
    );
    let requested: u64 = c
        .call("stats items\r\n", "END\r\n")
        .lines()
        .filter(|l| l.contains(":mem_requested "))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(requested, c.stat_n("", "bytes"));
}

/// `stats items` had no `age`, so memcached-tool's Max_age read 0 s and memcached_exporter
/// had no `memcached_slab_items_age_seconds` (operator-tools probe).
#[test]
fn regression_stats_items_reports_the_age_of_the_oldest_items() {
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    c.expect("set old 0 0 1\r\nx\r\n", "STORED\r\n");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let age = c.stat_n("items", "items:1:age");
    assert!((1..=5).contains(&age), "age {age}");
}
