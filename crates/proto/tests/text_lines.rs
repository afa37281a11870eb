//! Request lines: where one ends, and the lengths memcached reads or hangs up on.

use hkv_proto::text::{parse, Command, Limits, Parsed};

fn p(buf: &[u8]) -> Parsed<'_> {
    parse(buf, &Limits::default())
}

#[test]
fn over_long_lines_close_unless_they_are_gets() {
    let junk = vec![b'x'; 3000];
    assert!(matches!(p(&junk), Parsed::Error { close: true, .. }));
    let mut get = b"get ".to_vec();
    get.extend(std::iter::repeat_n(b'k', 3000));
    assert_eq!(p(&get), Parsed::Incomplete);
}

#[test]
fn regression_a_long_line_in_pieces_is_searched_once() {
    use hkv_proto::text::parse_after;
    // The caller says the first 6 bytes hold no newline: the search starts after them and
    // still finds the line's end; a hint past the buffer is clamped.
    let buf = b"get aa bb\r\n";
    assert_eq!(parse_after(buf, &Limits::default(), 6), p(buf));
    assert_eq!(
        parse_after(b"get aa", &Limits::default(), 100),
        Parsed::Incomplete
    );
}

/// memcached reads a line only whole in its 16 KiB read buffer: a longer one closes the
/// connection however it arrives, but a get's. hkv read any line that came whole, up to a
/// 1 MiB `mg` line (a fragmentation probe); over UDP a datagram is read whole, as memcached
/// reads it.
#[test]
fn regression_a_whole_line_longer_than_memcacheds_read_buffer_closes_unless_a_get() {
    let spaces = |n: usize| vec![b' '; n];
    let line = |head: &[u8], pad: usize, tail: &[u8]| [head, &spaces(pad), tail].concat();
    let closes = |buf: &[u8], limits: &Limits| {
        matches!(
            parse(buf, limits),
            Parsed::Error {
                close: true,
                noreply: true,
                ..
            }
        )
    };
    let tcp = Limits::default();
    let udp = Limits {
        max_line: usize::MAX,
        ..Limits::default()
    };
    for head in [&b"set a 0 0 1"[..], b"mg a v", b"touch a 0", b"bogus"] {
        let long = line(head, 20_000, b"\r\nx\r\n");
        assert!(closes(&long, &tcp), "{:?}", String::from_utf8_lossy(head));
        assert!(!closes(&long, &udp), "{:?}", String::from_utf8_lossy(head));
        // Up to the read buffer, a line that arrives whole is read, as memcached reads it.
        let short = line(head, 10_000, b"\r\nx\r\n");
        assert!(!closes(&short, &tcp), "{:?}", String::from_utf8_lossy(head));
    }
    let mut get = b"get".to_vec();
    for i in 0..3000 {
        get.extend_from_slice(format!(" key{i}").as_bytes());
    }
    get.extend_from_slice(b"\r\n");
    assert!(get.len() > 16 * 1024);
    match parse(&get, &tcp) {
        Parsed::Command {
            cmd: Command::Get { keys, .. },
            ..
        } => assert_eq!(keys.len(), 3000),
        other => panic!("{other:?}"),
    };
}
