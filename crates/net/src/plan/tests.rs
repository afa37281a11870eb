//! PP on one input, as the worker calls it: here the hot path's prefix of reads (`only`).

use bumpalo::Bump;
use hkv_engine::{Op, Request};
use hkv_proto::text::Limits;

use super::{pp_plan_input, PassBudget};
use crate::sasl::Gate;

fn budget() -> PassBudget {
    PassBudget {
        nd_left: 16 << 20,
        per_client: 16 << 20,
        value_bound: 1 << 20,
        written: 0,
        max_item: 1 << 20,
        reqs_per_conn: 1024,
        keys_per_conn: 4096,
        out_left: usize::MAX,
        conn_out_left: usize::MAX,
        conns_reply: super::conns_reply_estimate(10),
        over_limit: false,
    }
}

/// Plans `input` once with `pass` (with `only`, as the hot path): engine requests, steps,
/// where it left the input and whether more is left for a later pass.
fn plan_with(
    input: &[u8],
    pass: &mut PassBudget,
    only: Option<&dyn Fn(&Request<'_>) -> bool>,
) -> (usize, usize, usize, bool) {
    let keys = Bump::new();
    let mut gate = Gate {
        users: None,
        authfile: None,
        authed: true,
        cmds: 0,
        errors: 0,
    };
    let (mut batch, mut steps, mut marks) = (Vec::new(), Vec::new(), Vec::new());
    let end = pp_plan_input(
        input,
        &keys,
        0,
        0,
        None,
        None,
        0,
        &Limits::default(),
        &mut gate,
        0,
        pass,
        &mut batch,
        &mut steps,
        &mut marks,
        only,
        None,
    );
    (batch.len(), steps.len(), end.pos, end.more)
}

fn plan(input: &[u8], pass: &mut PassBudget) -> (usize, usize, usize, bool) {
    plan_with(input, pass, None)
}

/// A pass took up to -R commands of a connection whatever their replies came to, and a
/// `stats` reply is kilobytes: pipelined `stats slabs` nobody read held 14 MB a connection
/// (a hostile probe). The first command always goes; the rest while their reckoned replies
/// fit what the connection and the pass have left.
#[test]
fn regression_replies_besides_values_are_reckoned_as_they_are_planned() {
    let input = b"stats\r\nstats\r\nstats\r\n";
    let mut pass = PassBudget {
        conn_out_left: 1,
        ..budget()
    };
    assert_eq!(plan(input, &mut pass), (0, 1, 7, true));
    let mut pass = PassBudget {
        conn_out_left: 40 << 10,
        ..budget()
    };
    assert_eq!(plan(input, &mut pass), (0, 2, 14, true));
    let mut pass = PassBudget {
        out_left: 0,
        ..budget()
    };
    assert_eq!(plan(input, &mut pass), (0, 1, 7, true));
    // Small replies: -R still bounds them, and an ample allowance takes them all.
    let gets = b"get a\r\n".repeat(100);
    assert_eq!(plan(&gets, &mut budget()), (100, 200, gets.len(), false));
    let mut pass = PassBudget {
        conn_out_left: 1000,
        ..budget()
    };
    let (reqs, _, _, more) = plan(&gets, &mut pass);
    assert!(more && (5..=40).contains(&reqs), "{reqs} planned");
}

/// `stats conns` answers ~120 bytes per open connection: reckoned as a 16 KiB `stats`
/// reply, 140 clients pipelining it unread with 1,000 connections open held 810 MB of
/// connection buffers against a 64 MiB limit (a hostile probe). It is reckoned by the
/// connections open, in text and binary; `stats detail dump` by its size at its cap.
#[test]
fn regression_stats_conns_is_reckoned_by_the_connections_open() {
    let conns = b"stats conns\r\n".repeat(100);
    let with = |open: usize| PassBudget {
        conn_out_left: 1 << 20,
        conns_reply: super::conns_reply_estimate(open),
        ..budget()
    };
    let (_, steps_few, ..) = plan(&conns, &mut with(10));
    let (_, steps_many, ..) = plan(&conns, &mut with(1000));
    // 1 MiB takes sixty-odd replies reckoned at 16 KiB, but only a few of 1,016 x 192 bytes.
    assert!(steps_few >= 60, "{steps_few}");
    assert!((5..=6).contains(&steps_many), "{steps_many}");
    let mut bin = Vec::new();
    for _ in 0..100 {
        bin.extend_from_slice(&[0x81 - 1, 0x10, 0, 5, 0, 0, 0, 0, 0, 0, 0, 5]);
        bin.extend_from_slice(&[0; 12]);
        bin.extend_from_slice(b"conns");
    }
    let (_, steps_bin, ..) = plan(&bin, &mut with(1000));
    assert!((5..=6).contains(&steps_bin), "{steps_bin}");
    let dumps = b"stats detail dump\r\n".repeat(10);
    assert_eq!(plan(&dumps, &mut with(10)).1, 1, "one dump a pass");
}

/// Plans `input` as the hot path does (plain GETs only), then as the ordinary pass does:
/// how many engine requests each took, and where each left the input.
fn hot_then_ordinary(input: &[u8]) -> [(usize, usize); 2] {
    let only_gets = |r: &Request<'_>| matches!(r.op, Op::Get | Op::Gets);
    let hot = plan_with(input, &mut budget(), Some(&only_gets));
    let ordinary = plan(input, &mut budget());
    [(hot.0, hot.2), (ordinary.0, ordinary.2)]
}

/// A `gat` key planned on the hot path moved the client's open reads past the batch; the
/// line was then refused (gat is not a plain read) and taken back, but the open reads were
/// not, and slicing the batch from there panicked: every worker that read such a line while
/// some keys were hot was lost (a hostile probe's finding).
#[test]
fn regression_a_gat_line_refused_by_the_hot_path_does_not_panic() {
    assert_eq!(hot_then_ordinary(b"gat 0 hot0 hot1\r\n"), [(0, 0), (2, 17)]);
    assert_eq!(hot_then_ordinary(b"gats 10 a\r\n"), [(0, 0), (1, 11)]);
    // Plain reads before it are kept for the hot path; the gat waits for the ordinary pass.
    assert_eq!(
        hot_then_ordinary(b"get a b\r\ngat 0 c\r\n"),
        [(2, 9), (3, 18)]
    );
}

/// Over the buffer limit a write answering a copied value waits even as the connection's
/// first command (a hostile probe held 1 GB with unread `vupdate ... old`); a GET, whose
/// value can go from item memory, and a plain write still go.
#[test]
fn regression_a_first_write_answering_a_copied_value_waits_over_the_buffer_limit() {
    // Over the limit a client's share of the pass is half the 64 KiB floor (worker.rs).
    let over = || PassBudget {
        over_limit: true,
        per_client: 32 << 10,
        ..budget()
    };
    for input in [
        &b"getset k 0 0 1\r\nx\r\n"[..],
        b"getdel k\r\n",
        b"ms k 1 G\r\nx\r\n",
        b"md k G\r\n",
        b"vupdate k u8 add 1 old\r\n",
        b"vfilter k u8 ne 0\r\n",
    ] {
        let what = String::from_utf8_lossy(input);
        assert_eq!(plan(input, &mut over()), (0, 0, 0, true), "{what}");
        assert_eq!(plan(input, &mut budget()).0, 1, "{what} under the limit");
    }
    assert_eq!(plan(b"get k\r\n", &mut over()).0, 1);
    // With no value stored larger than a few bytes the copy fits the client's share.
    let small = PassBudget {
        value_bound: 100,
        ..over()
    };
    assert_eq!(plan(b"getdel k\r\n", &mut { small }).0, 1);
    assert_eq!(plan(b"set k 0 0 1\r\nx\r\n", &mut over()).0, 1);
    // Once the pass's copies are spent, too.
    let mut spent = PassBudget {
        nd_left: 1,
        ..budget()
    };
    assert_eq!(plan(b"getdel k\r\n", &mut spent), (0, 0, 0, true));
}
