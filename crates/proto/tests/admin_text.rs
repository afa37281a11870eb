//! The text parser on administrative commands (`watch`, `slabs`): memcached's answers to
//! the edge cases an admin probe compared.

use hkv_proto::text::{parse, Command, Limits, Parsed};

fn p(buf: &[u8]) -> Parsed<'_> {
    parse(buf, &Limits::default())
}

fn err(buf: &[u8]) -> &'static str {
    match p(buf) {
        Parsed::Error { error, .. } => error,
        other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(buf)),
    }
}

/// An admin probe: `watch noreply` answered `ERROR`; memcached, which takes a last
/// `noreply` before finding it no stream, answers nothing and starts no watch.
#[test]
fn regression_watch_with_noreply_is_a_silent_error() {
    for line in [&b"watch noreply\r\n"[..], b"watch fetchers noreply\r\n"] {
        match p(line) {
            Parsed::Error { noreply, .. } => assert!(noreply, "{line:?}"),
            other => panic!("{line:?} parsed as {other:?}"),
        }
    }
    match p(b"watch bogus\r\n") {
        Parsed::Error { noreply, error, .. } => assert!(!noreply && error == "ERROR"),
        other => panic!("{other:?}"),
    }
}

/// An admin probe: `slabs automove ratio 0.8\t` was `ERROR`; memcached reads the ratio
/// with strtod, which stops at white space.
#[test]
fn regression_a_ratio_may_end_in_white_space() {
    assert!(matches!(
        p(b"slabs automove ratio 0.8\t\r\n"),
        Parsed::Command {
            cmd: Command::SlabsAutomove { mode: None, .. },
            ..
        }
    ));
    assert_eq!(err(b"slabs automove ratio x0.8\r\n"), "ERROR");
}
