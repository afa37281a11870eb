//! Reads the value budget moves to a later pass: a client's keys past its share of a pass
//! are asked again from the first deferred one, so what the engine answered after that one
//! must leave no trace (no count, no meta state), on every engine partition.

mod common;

use common::{Client, Hkv};

/// Keys of `VALUE_LEN` bytes each: 8 MB in all, eight times a client's 1 MiB share of a
/// pass, spread over both partitions of a `-t 2` server.
const KEYS: usize = 400;
const VALUE_LEN: usize = 20_000;

fn server_with(prefix: &str, invalidate: bool) -> (Hkv, Client) {
    let h = Hkv::start(&["-m", "256", "-t", "2"]);
    let mut c = h.connect();
    let value = "v".repeat(VALUE_LEN);
    let mut sets = String::new();
    for i in 0..KEYS {
        sets.push_str(&format!("ms {prefix}{i} {VALUE_LEN} q\r\n{value}\r\n"));
        if invalidate {
            sets.push_str(&format!("md {prefix}{i} I q\r\n"));
        }
    }
    c.send(sets.as_bytes());
    c.expect("mn\r\n", "MN\r\n");
    (h, c)
}

/// The `VA` lines of a pipeline of one `mg <flags>` per key.
fn meta_gets(c: &mut Client, prefix: &str, flags: &str) -> Vec<String> {
    let mut req = String::new();
    for i in 0..KEYS {
        req.push_str(&format!("mg {prefix}{i} {flags}\r\n"));
    }
    req.push_str("mn\r\n");
    let reply = c.call(&req, "MN\r\n");
    let heads: Vec<String> = reply
        .lines()
        .filter(|l| l.starts_with("VA "))
        .map(str::to_string)
        .collect();
    assert_eq!(heads.len(), KEYS, "every key answered");
    heads
}

#[test]
fn regression_a_multi_get_past_the_value_budget_counts_each_key_once() {
    // A 1,000-key get of 20 KB values on two partitions counted ~1,477 get_hits: one
    // partition answered keys after the other's first deferred one, and the client asked
    // for them again.
    let (h, mut c) = server_with("k", false);
    let line: String = (0..KEYS).map(|i| format!(" k{i}")).collect();
    for _ in 0..3 {
        let reply = c.call(&format!("get{line}\r\n"), "END\r\n");
        assert_eq!(reply.matches("VALUE ").count(), KEYS);
    }
    let want = 3 * KEYS as u64;
    assert_eq!(c.stat_n("", "get_hits"), want);
    assert_eq!(c.stat_n("", "cmd_get"), want);
    let slabs = c.call("stats slabs\r\n", "END\r\n");
    let per_class: u64 = slabs
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(":get_hits "))
        .map(|(_, v)| v.trim().parse::<u64>().expect("a count"))
        .sum();
    assert_eq!(per_class, want, "{slabs}");
    assert!(
        c.stat_n("hkv", "deferred_reads") > 0,
        "the budget deferred nothing"
    );
    drop(h);
}

#[test]
fn regression_deferred_meta_gets_report_a_first_fetch_as_first() {
    // Pipelined `mg <key> v h` over fresh items reported `h1` for 183 of 400 keys: the
    // answer thrown away had marked the item fetched.
    let (h, mut c) = server_with("h", false);
    let heads = meta_gets(&mut c, "h", "v h");
    let refetched: Vec<&String> = heads.iter().filter(|l| !l.contains(" h0")).collect();
    assert!(
        refetched.is_empty(),
        "{} of {KEYS}: {:?}",
        refetched.len(),
        &refetched[..1]
    );
    let heads = meta_gets(&mut c, "h", "v h");
    assert!(heads.iter().all(|l| l.contains(" h1")), "second fetch");
    drop(h);
}

#[test]
fn regression_deferred_meta_gets_hand_out_every_recache_token() {
    // Over invalidated (stale) items, 178 of 400 pipelined `mg` got `Z` (someone else is
    // recaching) and none `W`: the token went to an answer thrown away, so nobody would
    // ever refresh those keys.
    let (h, mut c) = server_with("w", true);
    let heads = meta_gets(&mut c, "w", "v");
    let lost = heads.iter().filter(|l| !l.contains(" W")).count();
    assert_eq!(lost, 0, "keys whose recache token nobody got");
    let heads = meta_gets(&mut c, "w", "v");
    assert!(
        heads.iter().all(|l| l.contains(" Z")),
        "the token goes once"
    );
    drop(h);
}
