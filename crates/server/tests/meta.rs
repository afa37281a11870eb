//! Meta flags newer than Debian's memcached 1.6.18 (`E`, mg `C`, ms `N`, md `x`), checked
//! against the protocol spec; tests/clients/test_differential.py compares the rest with a
//! running memcached byte for byte. Each runs on every engine.

mod common;

use common::{bin_request, engines, read_exact, Client, Hkv};

fn each_engine(test: impl Fn(&Hkv)) {
    for engine in engines() {
        let h = Hkv::start(&["--engine", engine]);
        test(&h);
    }
}

#[test]
fn e_sets_the_cas_of_what_a_command_writes() {
    each_engine(|h| {
        let mut c = h.connect();
        c.expect("ms ce 1 E500\r\na\r\n", "HD\r\n");
        c.expect("mg ce c v\r\n", "VA 1 c500\r\na\r\n");
        c.expect("ms ce 1 C500 E600 c\r\nb\r\n", "HD c600\r\n");
        c.expect("ms ce 1 C500\r\nc\r\n", "EX\r\n");
        c.expect("md ce I E900\r\n", "HD\r\n");
        c.expect("mg ce c v\r\n", "VA 1 c900 X W\r\nb\r\n");
        c.expect("ma n N0 J1 E42 c v\r\n", "VA 1 c42\r\n1\r\n");
        c.expect("ma n E43 c v\r\n", "VA 1 c43\r\n2\r\n");
        c.expect("mg viv N30 E77 c\r\n", "HD c77 W\r\n");
    });
}

#[test]
fn mg_c_drops_the_value_when_the_cas_matches() {
    each_engine(|h| {
        let mut c = h.connect();
        c.expect("ms cc 1 E77\r\nv\r\n", "HD\r\n");
        c.expect("mg cc C77 v c\r\n", "HD c77\r\n");
        c.expect("mg cc C78 v c\r\n", "VA 1 c77\r\nv\r\n");
        // Other flags act whatever the comparison says.
        c.expect_ttl("mg cc C77 v T30 t\r\n", "HD t30\r\n");
    });
}

#[test]
fn ms_n_autovivifies_an_append_on_a_miss() {
    each_engine(|h| {
        let mut c = h.connect();
        c.expect("ms nn 1 MA N30\r\nq\r\n", "HD\r\n");
        c.expect_ttl("mg nn v t\r\n", "VA 1 t30\r\nq\r\n");
        c.expect("ms nn 1 MA N30\r\nr\r\n", "HD\r\n");
        c.expect("mg nn v\r\n", "VA 2\r\nqr\r\n");
        // Without N a miss is still not stored.
        c.expect("ms np 1 MP\r\nq\r\n", "NS\r\n");
        // Append and prepend respect a CAS.
        c.expect("ms nn 1 MA C1\r\ns\r\n", "EX\r\n");
    });
}

#[test]
fn md_x_empties_the_value_and_keeps_the_item() {
    // memcached (proto_text.c, process_mdelete_command): the empty item is made with the
    // request's F and T (default 0: no flags, no expiry) and keeps the old item's CAS.
    each_engine(|h| {
        let mut c = h.connect();
        c.expect("ms xx 3 F7 T100\r\nabc\r\n", "HD\r\n");
        let cas = c.call("mg xx c\r\n", "\r\n");
        c.expect("md xx x\r\n", "HD\r\n");
        c.expect("mg xx v f t\r\n", "VA 0 f0 t-1\r\n\r\n");
        assert_eq!(c.call("mg xx c\r\n", "\r\n"), cas, "md x keeps the CAS");
        c.expect("md xx x F9 T40\r\n", "HD\r\n");
        c.expect_ttl("mg xx v f t\r\n", "VA 0 f9 t40\r\n\r\n");
        c.expect("ms xx 3\r\nabc\r\n", "HD\r\n");
        c.expect("md xx x I T30\r\n", "HD\r\n");
        c.expect_ttl("mg xx v t\r\n", "VA 0 t30 X W\r\n\r\n");
        c.expect("md nope x\r\n", "NF\r\n");
    });
}

#[test]
fn regression_ms_invalidate_keeps_the_ttl_and_the_won_recache() {
    // `ms I` with an older CAS replaces the value but, as in memcached 1.6 (checked side by
    // side with 1.6.18), keeps the item's TTL and whether its recache was already won (Z).
    each_engine(|h| {
        let mut c = h.connect();
        c.expect("ms ik 2 T100 E5\r\nhi\r\n", "HD\r\n");
        c.expect("ms ik 2 I T50 C1\r\nzz\r\n", "HD\r\n");
        let r = c.call("mg ik t v\r\n", "zz\r\n");
        assert!(
            r == "VA 2 t100 X W\r\nzz\r\n" || r == "VA 2 t99 X W\r\nzz\r\n",
            "{r}"
        );
        c.expect("md ik I T30\r\n", "HD\r\n");
        c.expect("mg ik v\r\n", "VA 2 X W\r\nzz\r\n");
        c.expect("ms ik 2 I T50 C1\r\nyy\r\n", "HD\r\n");
        let r = c.call("mg ik t v\r\n", "yy\r\n");
        assert!(
            r == "VA 2 t30 Z X\r\nyy\r\n" || r == "VA 2 t29 Z X\r\nyy\r\n",
            "{r}"
        );
    });
}

#[test]
fn a_base64_key_may_hold_any_bytes() {
    each_engine(|h| {
        let mut c = h.connect();
        // "a b\r\n\0" is no valid text key; in base64 it is.
        c.expect("ms YSBiDQoA 2 b\r\nhi\r\n", "HD\r\n");
        c.expect("mg YSBiDQoA b v k\r\n", "VA 2 kYSBiDQoA b\r\nhi\r\n");
        c.expect("mg YSBi b v\r\n", "EN\r\n");
        let me = c.call("me YSBiDQoA b\r\n", "\r\n");
        assert!(me.starts_with("ME YSBiDQoA exp=-1 la="), "{me:?}");
        c.expect("md YSBiDQoA b\r\n", "HD\r\n");
        c.expect("mg YSBiDQoA b v\r\n", "EN\r\n");
        c.expect("mg !!!! b v\r\n", "CLIENT_ERROR error decoding key\r\n");
    });
}

/// memcached's mg echoes `k` as the item was stored, whatever the request sent: raw for an
/// item stored without `b` (text set, `ms` append, created by `mg N` or `ma N`), encoded
/// for one stored with it; ms, md and ma echo the key as sent (a differential probe: hkv
/// echoed every `b` request's key as sent).
#[test]
fn regression_mg_echoes_a_key_as_its_item_was_stored() {
    each_engine(|h| {
        let mut c = h.connect();
        // "rawkey" and friends, in base64.
        c.expect("set rawkey 0 0 1\r\nx\r\n", "STORED\r\n");
        c.expect("mg cmF3a2V5 b k v\r\n", "VA 1 krawkey\r\nx\r\n");
        c.expect("ms cmF3a2V5 1 b k\r\ny\r\n", "HD kcmF3a2V5 b\r\n");
        c.expect("mg rawkey k v\r\n", "VA 1 kcmF3a2V5 b\r\ny\r\n");
        c.expect("mg cmF3a2V5 b k v\r\n", "VA 1 kcmF3a2V5 b\r\ny\r\n");
        // An append through `b` leaves an item keyed raw.
        c.expect("ms cmF3a2V5 1 b MA k\r\nz\r\n", "HD kcmF3a2V5 b\r\n");
        c.expect("mg cmF3a2V5 b k v\r\n", "VA 2 krawkey\r\nyz\r\n");
        // One an append creates (`N`) is the request's own item: encoded.
        c.expect("ms dml2 1 b MA N0\r\nv\r\n", "HD\r\n");
        c.expect("mg viv k\r\n", "HD kdml2 b\r\n");
        // Created by mg N or ma N: raw, though ma echoes its own request as sent.
        c.expect("mg bms= b N30 k s\r\n", "HD knk s0 W\r\n");
        c.expect("ma Y3Ry b N0 J5 k v\r\n", "VA 1 kY3Ry b\r\n5\r\n");
        c.expect("mg Y3Ry b k v\r\n", "VA 1 kctr\r\n5\r\n");
        // md and a miss echo the request.
        c.expect("md Y3Ry b k\r\n", "HD kY3Ry b\r\n");
        c.expect("mg Y3Ry b k v\r\n", "EN kY3Ry b\r\n");
    });
}

/// An admin probe: `me` took any third token starting with `b` for the base64 flag, so
/// `me foo bar` was refused and `me Zm9v bar` looked up `foo`; memcached takes only `b`.
#[test]
fn regression_me_takes_only_b_for_base64() {
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    c.expect("set foo 0 0 1\r\nx\r\n", "STORED\r\n");
    let me = c.call("me foo bar\r\n", "\r\n");
    assert!(me.starts_with("ME foo exp=-1 "), "{me:?}");
    c.expect("me Zm9v bar\r\n", "EN\r\n");
    let me = c.call("me Zm9v b\r\n", "\r\n");
    assert!(me.starts_with("ME foo exp=-1 "), "{me:?}");
}

/// N hands the recache token to exactly one of many clients racing on a miss, and R to one
/// of many racing on an item near expiry.
#[test]
fn the_recache_token_is_won_exactly_once() {
    each_engine(|h| {
        for (setup, ask) in [
            ("", "mg race N30 t\r\n"),
            ("ms race 1 T5\r\nx\r\n", "mg race R30 t\r\n"),
        ] {
            let mut c = h.connect();
            c.send(b"md race\r\n");
            c.read_until(b"\r\n");
            if !setup.is_empty() {
                c.expect(setup, "HD\r\n");
            }
            let clients: Vec<Client> = (0..8).map(|_| h.connect()).collect();
            let replies: Vec<String> = std::thread::scope(|s| {
                let hs: Vec<_> = clients
                    .into_iter()
                    .map(|mut c| s.spawn(move || c.call(ask, "\r\n")))
                    .collect();
                hs.into_iter().map(|t| t.join().expect("client")).collect()
            });
            let wins = replies.iter().filter(|r| r.ends_with(" W\r\n")).count();
            let others = replies.iter().filter(|r| r.ends_with(" Z\r\n")).count();
            assert_eq!((wins, others), (1, 7), "{ask:?}: {replies:?}");
        }
    });
}

#[test]
fn regression_a_text_or_binary_get_of_a_stale_item_leaves_its_recache_token() {
    // Found by a differential probe: hkv handed the token of a stale item to whatever read
    // it first, so after a `get` the next mg saw `Z X`; memcached gives tokens to mg only
    // (`X W`), whatever classic or binary reads came before.
    each_engine(|h| {
        let mut c = h.connect();
        for (i, read) in ["get", "gets", "gat 0", "gats 0"].iter().enumerate() {
            let key = format!("stale{i}");
            c.expect(&format!("set {key} 0 0 1\r\nx\r\n"), "STORED\r\n");
            c.expect(&format!("md {key} I\r\n"), "HD\r\n");
            let got = c.call(&format!("{read} {key}\r\n"), "END\r\n");
            assert!(got.ends_with("x\r\nEND\r\n"), "{read}: {got:?}");
            c.expect(&format!("mg {key} v\r\n"), "VA 1 X W\r\nx\r\n");
            c.expect(&format!("mg {key} v\r\n"), "VA 1 Z X\r\nx\r\n");
        }
        // Binary GET (opcode 0x00) of a stale item, then mg.
        c.expect("set bstale 0 0 1\r\nx\r\n", "STORED\r\n");
        c.expect("md bstale I\r\n", "HD\r\n");
        let mut b = h.connect();
        b.send(&bin_request(0x00, b"bstale", &[], &[]));
        let reply = read_exact(&mut b, 24 + 4 + 1);
        assert_eq!((reply[0], reply[7], &reply[28..]), (0x81, 0, &b"x"[..]));
        c.expect("mg bstale v\r\n", "VA 1 X W\r\nx\r\n");
    });
}

#[test]
fn regression_mg_ttl_flags_act_in_the_order_sent() {
    // Found by scripts/differential-fuzz.py: memcached applies mg's T, N and R left to
    // right, and t reports the TTL as of its place; hkv applied them all, then reported.
    each_engine(|h| {
        let mut c = h.connect();
        // N then T: the created item ends with T's TTL (none); t before both saw none.
        c.expect("mg o1 t N30 T0\r\n", "HD t-1 W\r\n");
        c.expect("mg o1 t\r\n", "HD t-1 Z\r\n");
        c.expect_ttl("mg o2 N30 t T0\r\n", "HD t30 W\r\n");
        c.expect_ttl("mg o3 T0 N30 t\r\n", "HD t30 W\r\n");
        c.expect_ttl("mg o3 t\r\n", "HD t30 Z\r\n");
        c.expect("set o5 0 100 1\r\nx\r\n", "STORED\r\n");
        c.expect_ttl("mg o5 t T30\r\n", "HD t100\r\n");
        c.expect_ttl("mg o5 t\r\n", "HD t30\r\n");
        // R before T compares the old TTL (30 < 60: a win), after T the new one.
        c.expect("set o6 0 100 1\r\nx\r\n", "STORED\r\n");
        c.expect_ttl("mg o6 R60 T10 t\r\n", "HD t10\r\n");
        c.expect_ttl("mg o6 T20 R60 t\r\n", "HD t20 W\r\n");
        // A TTL already past still answers the created item once, then it is gone.
        c.expect("mg n1 N-1 v\r\n", "VA 0 W\r\n\r\n");
        c.expect("mg n1 v\r\n", "EN\r\n");
        c.expect("mg n2 h N0 T-1\r\n", "HD h0 W\r\n");
        c.expect("mg n2 v\r\n", "EN\r\n");
        // ma, the same: t before N saw no TTL; T after N wins on a created counter.
        c.expect("ma a1 t N30\r\n", "HD t-1\r\n");
        c.expect_ttl("mg a1 t\r\n", "HD t30\r\n");
        c.expect_ttl("ma a2 N30 t T0\r\n", "HD t30\r\n");
        c.expect("mg a2 t\r\n", "HD t-1\r\n");
        c.expect("set a3 0 100 1\r\n1\r\n", "STORED\r\n");
        c.expect_ttl("ma a3 t T30\r\n", "HD t100\r\n");
        c.expect_ttl("mg a3 t\r\n", "HD t30\r\n");
    });
}

#[test]
fn regression_md_with_c0_compares_the_cas() {
    // Found by scripts/differential-fuzz.py: memcached's md C0 compares (an item's CAS is
    // never 0, so EX); hkv took a CAS of 0 for none and deleted.
    each_engine(|h| {
        let mut c = h.connect();
        c.expect("set d0 0 0 1\r\n5\r\n", "STORED\r\n");
        c.expect("md d0 C0\r\n", "EX\r\n");
        c.expect("md d0 C0 I\r\n", "EX\r\n");
        c.expect("mg d0 v\r\n", "VA 1\r\n5\r\n");
        c.expect("md d1 C0\r\n", "NF\r\n");
        // ms I with C0: not an older CAS to store stale, EX (found by the fuzzer over UDP).
        c.expect("ms d0 1 I C0\r\nz\r\n", "EX\r\n");
        c.expect("mg d0 v\r\n", "VA 1\r\n5\r\n");
        c.expect("delete d0\r\n", "DELETED\r\n");
    });
}

#[test]
fn regression_touch_marks_the_item_fetched() {
    // Found by scripts/differential-fuzz.py: memcached's touch bumps the item like a read
    // (meta `h1`, last access now); hkv's left it unfetched.
    each_engine(|h| {
        let mut c = h.connect();
        c.expect("set tf 0 0 1\r\n1\r\n", "STORED\r\n");
        c.expect("mg tf h\r\n", "HD h0\r\n");
        c.expect("set tf 0 0 1\r\n1\r\n", "STORED\r\n");
        c.expect("touch tf 100\r\n", "TOUCHED\r\n");
        c.expect_ttl("mg tf h l t\r\n", "HD h1 l0 t100\r\n");
    });
}

#[test]
fn regression_meta_commands_take_keys_with_control_characters_as_set_does() {
    // memcached takes any byte but a space in a key, in meta commands too; hkv's meta
    // commands refused control characters and DEL, so a key stored with `set` could not
    // be read with `mg` (a hostile probe, against memcached 1.6.18).
    let h = Hkv::start(&[]);
    let mut c = h.connect();
    c.expect("set a\x01b 0 0 1\r\nx\r\n", "STORED\r\n");
    c.expect("mg a\x01b v\r\n", "VA 1\r\nx\r\n");
    c.expect("ms a\x7fc 1\r\ny\r\n", "HD\r\n");
    c.expect("get a\x7fc\r\n", "VALUE a\x7fc 0 1\r\ny\r\nEND\r\n");
    c.expect("md a\x01b\r\n", "HD\r\n");
    c.expect("ma a\td N0\r\n", "HD\r\n");
    c.expect("mg a\td v\r\n", "VA 1\r\n0\r\n");
    let long = "k".repeat(251);
    c.expect(
        &format!("mg {long} v\r\n"),
        "CLIENT_ERROR bad command line format\r\n",
    );
}

#[test]
fn regression_a_ttl_after_a_long_opaque_is_not_applied_as_in_memcached() {
    // mg and ma run before their too-long opaque is refused, but memcached applies `T` (and
    // mg's `N` TTL) as it writes the reply, where the opaque stops it: one given after the
    // opaque never takes effect. hkv applied it (a differential).
    let o = format!("O{}", "a".repeat(32));
    let refused = "CLIENT_ERROR opaque token too long\r\n";
    each_engine(|h| {
        let mut c = h.connect();
        c.expect("set k 0 0 1\r\n5\r\n", "STORED\r\n");
        c.expect(&format!("mg k {o} T50\r\n"), refused);
        c.expect("mg k t\r\n", "HD t-1\r\n");
        c.expect(&format!("ma k {o} T50 t\r\n"), refused);
        c.expect("mg k t v\r\n", "VA 1 t-1\r\n6\r\n");
        // Before the opaque, the touch stands.
        c.expect(&format!("mg k T50 {o}\r\n"), refused);
        c.expect_ttl("mg k t\r\n", "HD t50\r\n");
        // Vivified, with no TTL.
        c.expect(&format!("mg viv {o} N50\r\n"), refused);
        c.expect("mg viv t v\r\n", "VA 0 t-1\r\n\r\n");
    });
}

/// Three differences a meta-protocol differential probe found against memcached 1.6.18.
#[test]
fn regression_meta_edge_cases_answer_as_memcached() {
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    // ma's CAS mismatch is not its own failure: the too-long opaque's error wins (hkv
    // answered `EX O`).
    c.expect("ms n 2\r\n41\r\n", "HD\r\n");
    let o = format!("O{}", "x".repeat(32));
    c.expect(
        &format!("ma n C987654321 {o}\r\n"),
        "CLIENT_ERROR opaque token too long\r\n",
    );
    // R over 30 days is a Unix time, as memcached's realtime() reads it (hkv handed out the
    // recache token for R2592001 and for a time 50 s ahead on an item with 100 s left).
    c.expect("ms k 3 T100\r\nabc\r\n", "HD\r\n");
    c.expect("mg k R2592001\r\n", "HD\r\n");
    let soon = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 50;
    c.expect(&format!("mg k R{soon}\r\n"), "HD\r\n");
    c.expect(&format!("mg k R{}\r\n", soon + 100), "HD W\r\n");
    // Unsigned numbers read as strtoull reads them: `-0` is 0, and a negative that wraps to
    // a small positive is that number (hkv refused both as a bad command line).
    c.expect("set z -0 0 1\r\nx\r\n", "STORED\r\n");
    c.expect("ms z 1 F-18446744073709551615\r\ny\r\n", "HD\r\n");
    c.expect("mg z f v\r\n", "VA 1 f1\r\ny\r\n");
    c.expect("set n 0 0 1\r\n5\r\n", "STORED\r\n");
    c.expect("incr n -18446744073709551615\r\n", "6\r\n");
    c.expect("ma n D-0 v\r\n", "VA 1\r\n6\r\n");
    c.expect(
        "incr n -1\r\n",
        "CLIENT_ERROR invalid numeric delta argument\r\n",
    );
}

#[test]
fn regression_a_long_opaque_leaves_an_item_unfetched_where_memcached_bumps_late() {
    // A differential probe: with `h`, `l`, `T`, `N` or `R`, memcached's mg bumps the item
    // (fetched, access time) only as it writes the reply, which the too-long opaque stops;
    // hkv marked it fetched (`mg k h` then said h1). Without them it bumps on the read.
    let h = Hkv::start(&["-t", "1"]);
    let mut c = h.connect();
    let o = format!("O{}", "x".repeat(32));
    let refused = "CLIENT_ERROR opaque token too long\r\n";
    for (flags, fetched) in [
        ("", true),
        ("v", true),
        ("h", false),
        ("l", false),
        ("T30", false),
    ] {
        c.expect("ms k 3\r\nabc\r\n", "HD\r\n");
        c.expect(&format!("mg k {flags} {o}\r\n"), refused);
        let me = c.call("me k\r\n", "\r\n");
        let want = if fetched { "fetch=yes" } else { "fetch=no" };
        assert!(me.contains(want), "mg k {flags} O...: {me}");
    }
}
