//! The text parser: "need more bytes" versus "bad request", and memcached's strings.

use hkv_proto::text::{parse, Command, Limits, MetaCmd, Op, Parsed};
use proptest::prelude::*;

fn p(buf: &[u8]) -> Parsed<'_> {
    parse(buf, &Limits::default())
}

fn err(buf: &[u8]) -> &'static str {
    match p(buf) {
        Parsed::Error { error, .. } => error,
        other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(buf)),
    }
}

#[test]
fn incomplete_is_not_an_error() {
    for partial in [
        &b""[..],
        b"get a",
        b"set a 0 0 5\r\n",
        b"set a 0 0 5\r\nabc",
        b"set a 0 0 5\r\nabcde\r",
        b"ms k 3\r\nab",
    ] {
        assert_eq!(p(partial), Parsed::Incomplete, "{partial:?}");
    }
}

#[test]
fn complete_requests() {
    assert_eq!(
        p(b"get a bb\r\nrest"),
        Parsed::Command {
            cmd: Command::Get {
                keys: vec![&b"a"[..], b"bb"].into(),
                cas: false
            },
            len: 10
        }
    );
    // A bare \n ends a line too.
    assert!(matches!(
        p(b"version\n"),
        Parsed::Command {
            cmd: Command::Version,
            len: 8
        }
    ));
    let Parsed::Command { cmd, len } = p(b"cas k 1 2 3 99 noreply\r\nabc\r\n") else {
        panic!()
    };
    assert_eq!(len, 29);
    assert_eq!(
        cmd,
        Command::Store {
            op: Op::Cas,
            key: b"k",
            flags: 1,
            exptime: 2,
            cas: 99,
            data: b"abc",
            noreply: true,
            previous: false,
        }
    );
    assert!(matches!(
        p(b"incr k +5\r\n"),
        Parsed::Command {
            cmd: Command::Arith {
                op: Op::Incr,
                delta: 5,
                ..
            },
            ..
        }
    ));
    assert!(matches!(
        p(b"mg k v t Oabc\r\n"),
        Parsed::Command {
            cmd: Command::Meta(MetaCmd::Get { .. }),
            ..
        }
    ));
}

#[test]
fn errors_in_memcacheds_words() {
    assert_eq!(err(b"bogus\r\n"), "ERROR");
    assert_eq!(err(b"\r\n"), "ERROR");
    assert_eq!(err(b"set a 0 0\r\n"), "ERROR");
    assert_eq!(
        err(b"set a b 0 1\r\n"),
        "CLIENT_ERROR bad command line format"
    );
    assert_eq!(
        err(b"set a 0 0 3\r\nabcd\r\n"),
        "CLIENT_ERROR bad data chunk"
    );
    assert_eq!(
        err(b"incr a x\r\n"),
        "CLIENT_ERROR invalid numeric delta argument"
    );
    assert_eq!(
        err(b"touch a x\r\n"),
        "CLIENT_ERROR invalid exptime argument"
    );
    assert_eq!(
        err(b"delete a b\r\n"),
        "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
    );
    assert_eq!(err(b"mg k v v\r\n"), "CLIENT_ERROR duplicate flag");
    assert_eq!(err(b"mg k !\r\n"), "CLIENT_ERROR invalid flag");
    assert_eq!(err(b"md k !\r\n"), "CLIENT_ERROR invalid or duplicate flag");
    assert_eq!(
        err(b"mg k Tx\r\n"),
        "CLIENT_ERROR bad token in command line format"
    );
    assert_eq!(
        err(b"mg k MSS\r\n"),
        "CLIENT_ERROR incorrect length for M token"
    );
    assert_eq!(
        err(&[b"md k O".as_slice(), &[b'o'; 32], b"\r\n"].concat()),
        "CLIENT_ERROR opaque token too long"
    );
    assert_eq!(err(b"mg\r\n"), "ERROR");
}

#[test]
fn too_large_values_are_refused_before_they_arrive_and_swallowed() {
    let limits = Limits {
        max_item_size: 10,
        max_get_line: 100,
        ..Limits::default()
    };
    match parse(b"set k 0 0 11\r\n", &limits) {
        Parsed::Error {
            error,
            swallow,
            unlink,
            ..
        } => {
            assert_eq!(error, "SERVER_ERROR object too large for cache");
            assert_eq!(swallow, 13);
            assert_eq!(unlink.map(|u| u.key), Some(&b"k"[..]));
        }
        other => panic!("{other:?}"),
    }
}

/// python-memcached's own suite stores a value of exactly `-I` bytes and expects it refused:
/// memcached counts its 48-byte item header, the key, four bytes of nonzero flags, the
/// value's CRLF and eight bytes of CAS against `-I`.
#[test]
fn regression_a_value_of_exactly_dash_i_bytes_is_too_large_as_in_memcached() {
    let too_large = |line: &[u8], cas: bool| {
        let limits = Limits {
            cas,
            ..Limits::default()
        };
        match parse(line, &limits) {
            Parsed::Incomplete => false,
            Parsed::Error {
                error: "SERVER_ERROR object too large for cache",
                ..
            } => true,
            other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(line)),
        }
    };
    // The largest values memcached 1.6.18 stores at -I 1m, then one byte more.
    for (line, cas) in [
        (&b"set k 0 0 1048516\r\n"[..], true),
        (b"set k 1 0 1048512\r\n", true),
        (b"set keyhere 0 0 1048510\r\n", true),
        (b"append keyhere 0 0 1048510\r\n", true),
        (b"set k 0 0 1048524\r\n", false),
        (b"ms k 1048516\r\n", true),
        (b"ms k 1048512 F1\r\n", true),
        // The key's decoded length counts: `aw==` is `k`.
        (b"ms aw== 1048516 b\r\n", true),
    ] {
        assert!(!too_large(line, cas), "{:?}", String::from_utf8_lossy(line));
        let text = String::from_utf8_lossy(line);
        let (head, tail) = text.split_once("10485").expect("a length");
        let n: u32 = tail[..2].parse().expect("digits");
        let one_more = format!("{head}10485{}{}", n + 1, &tail[2..]);
        assert!(too_large(one_more.as_bytes(), cas), "{one_more:?}");
    }
    assert!(too_large(b"set k 0 0 1048576\r\n", true));
}

proptest! {
    /// Parsing a stream fed in arbitrary pieces gives the same requests as parsing it whole.
    #[test]
    fn split_points_do_not_change_the_result(cut in 0usize..60) {
        let stream = b"set a 0 0 3\r\nabc\r\nget a\r\nms b 2 T1\r\nhi\r\ndelete a\r\n";
        let cut = cut.min(stream.len());
        let whole = requests(stream);
        // First piece alone: whatever parses completely must be a prefix of the whole.
        let part = requests(&stream[..cut]);
        prop_assert!(part.len() <= whole.len());
        prop_assert_eq!(&whole[..part.len()], &part[..]);
    }
}

fn requests(mut buf: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        match p(buf) {
            Parsed::Command { cmd, len } => {
                out.push(format!("{cmd:?}"));
                buf = &buf[len..];
            }
            Parsed::Incomplete | Parsed::Body { .. } => return out,
            Parsed::Error { error, len, .. } => {
                out.push(error.to_string());
                buf = &buf[len..];
            }
        }
    }
}

#[test]
fn regression_huge_numbers_get_memcached_errors() {
    // u64 values of 2^63 and above once wrapped into small i64s (a 1-byte value stored for a
    // length of -18446744073709551615) or overflowed (a panic with overflow checks on).
    for line in [
        &b"set k 0 0 -18446744073709551615\r\nx\r\n"[..],
        b"set k 0 18446744073709551615 1\r\nx\r\n",
        b"set k 0 -9223372036854775809 1\r\nx\r\n",
        b"set k 0 0 9223372036854775808\r\nx\r\n",
        b"set k 0 0 6442450945\r\nx\r\n",
    ] {
        assert_eq!(
            err(line),
            "CLIENT_ERROR bad command line format",
            "{line:?}"
        );
    }
    // strtol reads -2^63 exactly; memcached keeps its low 32 bits, 0 (checked with 1.6.18).
    assert_eq!(
        err(b"touch k -9223372036854775809\r\n"),
        "CLIENT_ERROR invalid exptime argument"
    );
    assert_eq!(
        err(b"gat 18446744073709551615 k\r\n"),
        "CLIENT_ERROR invalid exptime argument"
    );
}

#[test]
fn regression_gat_without_a_key_checks_its_exptime_and_ends() {
    // Found side by side with memcached 1.6.18 while running its t/ suite: `gat 10` is an
    // empty `END`, `gat abc` an invalid exptime; `gat` alone stays `ERROR`. (An earlier
    // test here said `gat 0` was ERROR: it was not checked against a live memcached.)
    for line in [&b"gat 10\r\n"[..], b"gats 10 \r\n"] {
        match p(line) {
            Parsed::Command {
                cmd: Command::Gat { keys, exptime, .. },
                ..
            } => assert!(keys.is_empty() && exptime == 10),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(err(b"gat abc\r\n"), "CLIENT_ERROR invalid exptime argument");
    assert_eq!(err(b"gat\r\n"), "ERROR");
}

#[test]
fn regression_noreply_as_the_last_token_quiets_a_line_one_token_short() {
    // Found by scripts/differential-fuzz.py: memcached takes `noreply` from the last token
    // wherever it stands, so these fail to parse and say nothing (hkv answered them).
    for line in [
        &b"add k 0 0 noreply\r\n"[..],
        b"cas k 0 0 1 noreply\r\n",
        b"decr k noreply\r\n",
        b"incr k noreply\r\n",
        b"touch k noreply\r\n",
    ] {
        match p(line) {
            Parsed::Error { noreply, .. } => assert!(noreply, "{line:?}"),
            other => panic!("{line:?} parsed as {other:?}"),
        }
    }
    // A trailing token that is not `noreply` still gets its answer.
    match p(b"decr k x\r\n") {
        Parsed::Error { noreply, error, .. } => {
            assert!(!noreply);
            assert_eq!(error, "CLIENT_ERROR invalid numeric delta argument");
        }
        other => panic!("{other:?}"),
    }
}

fn staging() -> Limits {
    Limits {
        stage_min: 1000,
        ..Limits::default()
    }
}

/// When the server can neither stage a block nor buffer it, the command is refused in
/// memcached's words for a failed allocation, its block dropped as it arrives, and a SET's
/// old value unlinked (a hostile probe's clients stopping part way through values).
#[test]
fn a_block_that_can_be_neither_staged_nor_buffered_is_refused_as_out_of_memory() {
    let l = Limits {
        refuse_unstaged: true,
        ..staging()
    };
    for (buf, header, unlink) in [
        (&b"set k 1 2 5000\r\nabc"[..], 16, Some(&b"k"[..])),
        (b"add k 0 0 5000\r\n", 16, None),
        (b"ms k 5000 T0\r\nab", 14, Some(&b"k"[..])),
    ] {
        match parse(buf, &l) {
            Parsed::Error {
                error: "SERVER_ERROR out of memory storing object",
                len,
                swallow: 5002,
                unlink: u,
                close: false,
                ..
            } => {
                assert_eq!(len, header);
                assert_eq!(u.map(|u| u.key), unlink);
            }
            other => panic!("{other:?}"),
        }
    }
    // Whole in the buffer, or small: parsed as ever.
    assert!(matches!(
        parse(b"set k 0 0 5\r\nhello\r\n", &l),
        Parsed::Command { .. }
    ));
}

#[test]
fn a_large_data_block_still_arriving_is_reported_for_staging() {
    let l = staging();
    for (buf, header) in [
        (&b"set k 1 2 5000\r\nabc"[..], 16),
        (b"add k 0 0 5000\r\n", 16),
        (b"replace k 0 0 5000 noreply\r\n", 28),
        (b"cas k 0 0 5000 7\r\nab", 18),
        (b"ms k 5000 T0\r\nab", 14),
    ] {
        assert_eq!(
            parse(buf, &l),
            Parsed::Body { header, vlen: 5000 },
            "{}",
            String::from_utf8_lossy(buf)
        );
    }
    // Small blocks, append and prepend (they need the old value), and servers that do not
    // stage wait for the whole block.
    for buf in [
        &b"set k 0 0 999\r\nabc"[..],
        b"append k 0 0 5000\r\nabc",
        b"prepend k 0 0 5000\r\n",
    ] {
        assert_eq!(parse(buf, &l), Parsed::Incomplete);
    }
    assert_eq!(p(b"set k 0 0 5000\r\nabc"), Parsed::Incomplete);
}

#[test]
fn a_staged_command_is_its_line_then_the_blocks_terminator() {
    let l = Limits {
        body_staged: true,
        ..staging()
    };
    match parse(b"set k 3 0 5000\r\n\r\nget k\r\n", &l) {
        Parsed::Command {
            cmd: Command::Store { data, flags, .. },
            len,
        } => {
            assert_eq!((data, flags, len), (&b""[..], 3, 18));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(parse(b"set k 3 0 5000\r\n\r", &l), Parsed::Incomplete);
    match parse(b"set k 3 0 5000\r\nXYget k\r\n", &l) {
        Parsed::Error { error, len, .. } => {
            assert_eq!((error, len), ("CLIENT_ERROR bad data chunk", 18));
        }
        other => panic!("{other:?}"),
    }
    match parse(b"ms k 5000 F4\r\n\r\n", &l) {
        Parsed::Command {
            cmd: Command::Meta(MetaCmd::Set { data, .. }),
            len,
        } => assert_eq!((data, len), (&b""[..], 16)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn regression_a_bad_meta_value_does_not_stop_the_flag_scan() {
    // Found by scripts/differential-fuzz.py: memcached's preparse notes a bad value and
    // goes on, so a later duplicate or unknown flag answers its own error, and otherwise
    // the last bad value's message stands (F, which has none, keeps the one before it).
    assert_eq!(err(b"mg k Nx Nx\r\n"), "CLIENT_ERROR duplicate flag");
    assert_eq!(err(b"mg k Nx u N0\r\n"), "CLIENT_ERROR duplicate flag");
    assert_eq!(err(b"mg k Nx Z\r\n"), "CLIENT_ERROR invalid flag");
    assert_eq!(
        err(b"mg k Nx Mxx\r\n"),
        "CLIENT_ERROR incorrect length for M token"
    );
    assert_eq!(
        err(b"ms k 1 Fx Nx\r\nx\r\n"),
        "CLIENT_ERROR bad token in command line format"
    );
    assert_eq!(
        err(b"ms k 1 Nx Fx\r\nx\r\n"),
        "CLIENT_ERROR bad token in command line format"
    );
    assert_eq!(
        err(b"ms k 1 Fx\r\nx\r\n"),
        "CLIENT_ERROR bad command line format"
    );
}

fn flags(n: usize) -> String {
    // Distinct flags that are valid on every meta command.
    let all = [
        "k", "s", "t", "c", "f", "v", "h", "l", "u", "P", "L", "R1", "q", "O1", "I", "x", "T1",
    ];
    all[..n].join(" ")
}

#[test]
fn regression_ms_takes_one_flag_fewer_than_the_other_meta_commands() {
    // memcached 1.6 counts a meta line's tokens against 20 (with the empty one its
    // tokenizer ends on): mg, md and ma take 17 flags, ms, with its length, 16. Found
    // side by side with memcached 1.6.18.
    let n = 16;
    for cmd in ["mg k", "md k", "ma k"] {
        let line = format!("{cmd} {}\r\n", flags(n + 1));
        assert!(
            matches!(p(line.as_bytes()), Parsed::Command { .. }),
            "{line}"
        );
        let too_many = format!("{cmd} {} D1\r\n", flags(n + 1));
        let want = if cmd == "mg k" {
            "CLIENT_ERROR options flags are too long"
        } else {
            "CLIENT_ERROR options flags too long"
        };
        assert_eq!(err(too_many.as_bytes()), want);
    }
    let ok = format!("ms k 2 {}\r\nhi\r\n", flags(n));
    assert!(matches!(p(ok.as_bytes()), Parsed::Command { .. }), "{ok}");
    // Refused before the data block, which memcached then reads as a command line.
    let refused = format!("ms k 2 {}\r\nhi\r\n", flags(n + 1));
    match p(refused.as_bytes()) {
        Parsed::Error {
            error,
            len,
            swallow,
            ..
        } => {
            assert_eq!(error, "CLIENT_ERROR options flags too long");
            assert_eq!(
                (len + swallow, &refused.as_bytes()[len..]),
                (len, &b"hi\r\n"[..])
            );
        }
        other => panic!("{other:?}"),
    };
}

#[test]
fn regression_ms_counts_its_flags_before_it_reads_its_length() {
    // Found by scripts/differential-fuzz.py against memcached 1.6.18: a bad length on a
    // line with too many flags is refused for the flags; a key too long, for the key.
    let many = flags(17);
    for len in ["x", "-1", "99999999999"] {
        let line = format!("ms k {len} {many}\r\nx\r\n");
        assert_eq!(err(line.as_bytes()), "CLIENT_ERROR options flags too long");
    }
    let long_key = format!("ms {} 1 {many}\r\nx\r\n", "k".repeat(251));
    assert_eq!(
        err(long_key.as_bytes()),
        "CLIENT_ERROR bad command line format"
    );
    assert_eq!(err(b"ms k\r\n"), "CLIENT_ERROR bad command line format");
}

#[test]
fn regression_a_bad_mode_is_refused_before_a_long_opaque() {
    // Found by scripts/differential-fuzz.py's long opaques, against memcached 1.6.18: ms and
    // ma check their mode first; a value too large for -I comes after the opaque.
    let opaque = format!("O{}", "o".repeat(32));
    let ms = format!("ms k 1 {opaque} MX\r\nx\r\n");
    assert_eq!(
        err(ms.as_bytes()),
        "CLIENT_ERROR invalid mode for ms M token"
    );
    let ma = format!("ma k MX {opaque}\r\n");
    assert_eq!(
        err(ma.as_bytes()),
        "CLIENT_ERROR invalid mode for ma M token"
    );
    assert_eq!(
        err(format!("ms k 1 {opaque}\r\nx\r\n").as_bytes()),
        "CLIENT_ERROR opaque token too long"
    );
    // mg and ma run, and their reply is the error (crates/server/tests/meta.rs).
    for line in [
        format!("ma k MI {opaque}\r\n"),
        format!("mg k v {opaque}\r\n"),
    ] {
        match p(line.as_bytes()) {
            Parsed::Command {
                cmd: Command::Meta(m),
                ..
            } => {
                let flags = m.flags().expect("mg and ma have flags");
                assert!(flags.opaque_too_long && flags.opaque.is_none(), "{line}");
            }
            other => panic!("{line:?} parsed as {other:?}"),
        }
    }
    let big = format!("ms k 2000000 {opaque}\r\n");
    assert_eq!(err(big.as_bytes()), "CLIENT_ERROR opaque token too long");
}

#[test]
fn regression_a_base64_key_is_decoded_where_its_flag_stands() {
    // Found side by side with memcached 1.6.18: the key is decoded as preparse meets `b`,
    // so a key that does not decode is an error of the flag scan (md and ma word every one
    // of those alike), a later bad value replaces it, and it comes before a bad mode.
    assert_eq!(err(b"mg !!! Nx b\r\n"), "CLIENT_ERROR error decoding key");
    assert_eq!(
        err(b"mg !!! b Nx\r\n"),
        "CLIENT_ERROR bad token in command line format"
    );
    assert_eq!(
        err(b"ms !!! 1 Cx b\r\nx\r\n"),
        "CLIENT_ERROR error decoding key"
    );
    assert_eq!(
        err(b"ms !!! 1 b MX\r\nx\r\n"),
        "CLIENT_ERROR error decoding key"
    );
    for line in [&b"md !!! b\r\n"[..], b"ma !!! b MX\r\n"] {
        assert_eq!(err(line), "CLIENT_ERROR invalid or duplicate flag");
    }
    assert!(matches!(p(b"mg Zm9v b v\r\n"), Parsed::Command { .. }));
}

#[test]
fn a_meta_line_of_many_tokens_is_refused_for_its_flag_count() {
    // More tokens than a valid line can have: the count alone decides.
    let many = (0..40)
        .map(|i| format!("O{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        err(format!("mg k {many}\r\n").as_bytes()),
        "CLIENT_ERROR options flags are too long"
    );
    assert_eq!(
        err(format!("md k {many}\r\n").as_bytes()),
        "CLIENT_ERROR options flags too long"
    );
    assert_eq!(
        err(format!("ms k 1 {many}\r\nx\r\n").as_bytes()),
        "CLIENT_ERROR options flags too long"
    );
}
