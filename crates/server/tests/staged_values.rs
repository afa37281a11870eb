//! Large data blocks received straight into item memory (issue 14: "bodies streamed into item
//! memory rather than buffered whole per connection"; crates/net/src/stage.rs). Each test
//! sends a body in pieces with pauses between them, so the server sees the command before
//! its data, as it does when a client sends a large value over a real network.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::{engines, Client, Hkv};

fn value(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i / 5 + seed * 11) % 26) as u8)
        .collect()
}

/// Sends `head`, then `body` in pieces with pauses, then `tail`.
fn send_slowly(c: &mut Client, head: &[u8], body: &[u8], tail: &[u8]) {
    c.send(head);
    for piece in body.chunks(body.len().div_ceil(4).max(1)) {
        std::thread::sleep(Duration::from_millis(30));
        c.send(piece);
    }
    c.send(tail);
}

/// Sends `head` and the first piece of `body`, waits until the server has begun staging the
/// value (`staged_values` moved), then sends the rest: whether a slow body is staged must
/// not hang on the worker running within the pauses of [`send_slowly`].
fn send_staged(h: &Hkv, c: &mut Client, head: &[u8], body: &[u8], tail: &[u8]) {
    let mut admin = h.connect();
    let before = staged(&mut admin);
    let first = body.len().div_ceil(4).max(1).min(body.len());
    c.send(head);
    c.send(&body[..first]);
    common::wait_for_stat(&mut admin, "hkv", "staged_values", |n| n > before);
    send_slowly(c, b"", &body[first..], tail);
}

fn get(c: &mut Client, key: &str) -> Option<Vec<u8>> {
    let reply = c.call(&format!("get {key}\r\n"), "END\r\n");
    let rest = reply.strip_prefix(&format!("VALUE {key} "))?;
    let (_, rest) = rest.split_once(' ')?;
    let (len, body) = rest.split_once("\r\n")?;
    let len: usize = len.parse().ok()?;
    Some(body.as_bytes()[..len].to_vec())
}

fn used_chunks(c: &mut Client) -> u64 {
    c.call("stats slabs\r\n", "END\r\n")
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter(|l| l.contains(":used_chunks "))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn staged(c: &mut Client) -> u64 {
    c.stat_u64("hkv", "staged_values").expect("staged_values")
}

/// Waits up to two seconds for `used_chunks` to come back to `want`.
fn used_chunks_become(c: &mut Client, want: u64) -> u64 {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let now = used_chunks(c);
        if now == want || Instant::now() > until {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_body_sent_in_pieces_is_received_into_item_memory_and_read_back_whole() {
    for engine in engines() {
        let h = Hkv::start(&["-m", "128", "-I", "16m", "-t", "2", "--engine", engine]);
        let mut c = h.connect();
        for (i, len) in [100_000, 1 << 20, 12 << 20].into_iter().enumerate() {
            let v = value(i, len);
            let before = staged(&mut c);
            let head = format!("set s{i} 9 0 {len}\r\n");
            send_staged(&h, &mut c, head.as_bytes(), &v, b"\r\n");
            assert_eq!(c.read_until(b"\r\n"), "STORED\r\n", "{engine} {len}");
            assert_eq!(staged(&mut c), before + 1, "{engine} {len}: staged");
            assert_eq!(get(&mut c, &format!("s{i}")), Some(v), "{engine} {len}");
        }
        // The meta protocol's ms, with a base64 key, is staged too.
        let v = value(7, 300_000);
        let before = staged(&mut c);
        // "bWV0YWtleQ==" is "metakey".
        send_staged(
            &h,
            &mut c,
            b"ms bWV0YWtleQ== 300000 b T0 F3\r\n",
            &v,
            b"\r\n",
        );
        assert_eq!(c.read_until(b"\r\n"), "HD\r\n", "{engine}: ms");
        assert_eq!(staged(&mut c), before + 1, "{engine}: ms staged");
        assert_eq!(get(&mut c, "metakey"), Some(v), "{engine}: ms");
    }
}

#[test]
fn a_binary_set_sent_in_pieces_is_staged_and_read_back_whole() {
    let h = Hkv::start(&["-m", "64", "-I", "4m"]);
    let mut c = h.connect();
    let v = value(3, 2 << 20);
    let key = b"binkey";
    let mut head = vec![0x80, 0x01, 0, key.len() as u8, 8, 0, 0, 0];
    head.extend_from_slice(&((8 + key.len() + v.len()) as u32).to_be_bytes());
    head.extend_from_slice(&[0xAB; 4]); // opaque
    head.extend_from_slice(&[0; 8]); // cas
    head.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 0]); // flags 7, exptime 0
    head.extend_from_slice(key);
    send_staged(&h, &mut c, &head, &v, b"");
    let mut reply = [0u8; 24];
    c.stream.read_exact(&mut reply).unwrap();
    assert_eq!(reply[0], 0x81);
    assert_eq!(&reply[6..8], &[0, 0], "status: success");
    assert_eq!(&reply[12..16], &[0xAB; 4], "opaque echoed");
    let mut t = h.connect();
    assert_eq!(staged(&mut t), 1);
    assert_eq!(get(&mut t, "binkey"), Some(v));
}

#[test]
fn regression_a_binary_set_cut_inside_its_key_is_staged_once_the_key_arrives() {
    // The binary parser reported a body to stage before the extras and key were all in
    // (found by the binary fuzz target), with a header longer than what was buffered.
    let h = Hkv::start(&["-m", "64", "-I", "4m"]);
    let mut c = h.connect();
    let v = value(5, 1 << 20);
    let key = b"cutkey";
    let mut head = vec![0x80, 0x01, 0, key.len() as u8, 8, 0, 0, 0];
    head.extend_from_slice(&((8 + key.len() + v.len()) as u32).to_be_bytes());
    head.extend_from_slice(&[0xCD; 4]); // opaque
    head.extend_from_slice(&[0; 8]); // cas
    head.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 0]); // flags 9, exptime 0
    head.extend_from_slice(key);
    // The 24-byte header and half the extras, then the rest of the extras and the key.
    c.send(&head[..28]);
    std::thread::sleep(Duration::from_millis(50));
    send_slowly(&mut c, &head[28..], &v, b"");
    let mut reply = [0u8; 24];
    c.stream.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[6..8], &[0, 0], "status: success");
    assert_eq!(&reply[12..16], &[0xCD; 4], "opaque echoed");
    let mut t = h.connect();
    assert_eq!(get(&mut t, "cutkey"), Some(v));
}

#[test]
fn requests_around_a_staged_value_keep_the_clients_order() {
    let h = Hkv::start(&["-m", "64", "-I", "4m"]);
    let mut c = h.connect();
    assert_eq!(c.call("set k 0 0 3\r\nold\r\n", "\r\n"), "STORED\r\n");
    let v = value(1, 1 << 20);
    // A read before the value in the same packet as its command line sees the old value;
    // a read after its data block sees the new one.
    let head = format!("get k\r\nset k 0 0 {}\r\n", v.len());
    send_slowly(&mut c, head.as_bytes(), &v, b"\r\nget k\r\n");
    let want = format!(
        "VALUE k 0 3\r\nold\r\nEND\r\nSTORED\r\nVALUE k 0 {}\r\n{}\r\nEND\r\n",
        v.len(),
        String::from_utf8(v.clone()).unwrap()
    );
    let mut got = String::new();
    while got.len() < want.len() {
        got.push_str(&c.read_until(b"END\r\n"));
    }
    assert!(
        got == want,
        "replies out of order: {:?}",
        &got[..80.min(got.len())]
    );
    let mut other = h.connect();
    assert_eq!(staged(&mut other), 1);
}

#[test]
fn commands_that_store_nothing_give_the_staged_memory_back() {
    let h = Hkv::start(&["-m", "64", "-I", "4m"]);
    let mut c = h.connect();
    assert_eq!(c.call("set present 0 0 1\r\nx\r\n", "\r\n"), "STORED\r\n");
    let before = used_chunks(&mut c);
    let v = value(2, 3 << 20);
    let cases = [
        ("add present 0 0", "NOT_STORED\r\n"),
        ("replace absent 0 0", "NOT_STORED\r\n"),
        ("cas absent 0 0", "NOT_FOUND\r\n"),
    ];
    for (cmd, want) in cases {
        let cas = if cmd.starts_with("cas") { " 99" } else { "" };
        let head = format!("{cmd} {}{cas}\r\n", v.len());
        send_slowly(&mut c, head.as_bytes(), &v, b"\r\n");
        assert_eq!(c.read_until(b"\r\n"), want, "{cmd}");
        assert_eq!(used_chunks(&mut c), before, "{cmd}: memory back");
    }
    assert_eq!(staged(&mut c), 3);
    assert_eq!(get(&mut c, "present"), Some(b"x".to_vec()));
    assert_eq!(get(&mut c, "absent"), None);
}

#[test]
fn a_malformed_data_block_is_refused_and_its_memory_given_back() {
    let h = Hkv::start(&["-m", "64", "-I", "4m"]);
    let mut c = h.connect();
    let before = used_chunks(&mut c);
    let v = value(4, 1 << 20);
    let head = format!("set bad 0 0 {}\r\n", v.len());
    send_slowly(&mut c, head.as_bytes(), &v, b"XYget bad\r\n");
    assert_eq!(
        c.read_until(b"END\r\n"),
        "CLIENT_ERROR bad data chunk\r\nEND\r\n"
    );
    assert_eq!(used_chunks(&mut c), before);
    assert_eq!(staged(&mut c), 1);
    common::assert_healthy(&h);
}

#[test]
fn a_client_that_leaves_mid_value_gives_its_memory_back() {
    let h = Hkv::start(&["-m", "64", "-I", "8m"]);
    let mut watcher = h.connect();
    let before = used_chunks(&mut watcher);
    for _ in 0..5 {
        let mut c = h.connect();
        let v = value(5, 6 << 20);
        let head = format!("set gone 0 0 {}\r\n", v.len());
        send_slowly(&mut c, head.as_bytes(), &v[..3 << 20], b"");
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            used_chunks(&mut watcher) > before,
            "memory taken for the value"
        );
        drop(c);
        assert_eq!(used_chunks_become(&mut watcher, before), before);
    }
    assert_eq!(staged(&mut watcher), 5);
    assert_eq!(get(&mut watcher, "gone"), None);
}

#[test]
fn flush_all_while_a_value_arrives_does_not_lose_or_corrupt_it() {
    let h = Hkv::start(&["-m", "64", "-I", "8m"]);
    let mut c = h.connect();
    let mut other = h.connect();
    let v = value(6, 5 << 20);
    let head = format!("set f 0 0 {}\r\n", v.len());
    send_slowly(&mut c, head.as_bytes(), &v[..2 << 20], b"");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(other.call("flush_all\r\n", "\r\n"), "OK\r\n");
    // Memory handed out after the flush must not be the staged value's.
    for i in 0..2000 {
        let small = format!("set filler{i} 0 0 4000\r\n{}\r\n", "z".repeat(4000));
        assert_eq!(other.call(&small, "\r\n"), "STORED\r\n");
    }
    send_slowly(&mut c, b"", &v[2 << 20..], b"\r\n");
    assert_eq!(c.read_until(b"\r\n"), "STORED\r\n");
    assert_eq!(get(&mut c, "f"), Some(v));
}

#[test]
fn clients_sending_large_values_slowly_hold_almost_nothing_in_buffers() {
    // Twenty clients each part way through an 8 MiB value: without staging each would
    // buffer its body (160 MiB); staged, the bytes are in item memory, inside -m.
    let h = Hkv::start(&["-m", "512", "-I", "16m", "-t", "2"]);
    let mut watcher = h.connect();
    let v = value(8, 4 << 20);
    let mut clients: Vec<Client> = (0..20).map(|_| h.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        let head = format!("set slow{i} 0 0 {}\r\n", 8 << 20);
        send_slowly(c, head.as_bytes(), &v, b"");
    }
    std::thread::sleep(Duration::from_millis(200));
    let buffered = watcher.stat_u64("hkv", "conn_buffer_bytes").unwrap();
    assert!(buffered < 8 << 20, "{buffered} bytes buffered");
    assert_eq!(staged(&mut watcher), 20);
    for (i, c) in clients.iter_mut().enumerate() {
        send_slowly(c, b"", &v, b"\r\n");
        assert_eq!(c.read_until(b"\r\n"), "STORED\r\n", "client {i}");
    }
    let mut whole = v.clone();
    whole.extend_from_slice(&v);
    assert_eq!(get(&mut watcher, "slow7"), Some(whole));
}

#[test]
fn values_being_received_take_at_most_half_of_memory() {
    // -m 64: one 24 MiB block may be staged, a second would pass 32 MiB and is buffered.
    // (-I 25m: a 24 MiB value and memcached's item overhead fit.)
    let h = Hkv::start(&["-m", "64", "-I", "25m"]);
    let mut watcher = h.connect();
    let v = value(9, 12 << 20);
    let mut clients: Vec<Client> = (0..2).map(|_| h.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        let head = format!("set half{i} 0 0 {}\r\n", 24 << 20);
        send_slowly(c, head.as_bytes(), &v[..1 << 20], b"");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(staged(&mut watcher), 1, "only the first is staged");
    assert_eq!(watcher.stat_u64("hkv", "staged_bytes"), Some(24 << 20));
    for (i, c) in clients.iter_mut().enumerate() {
        send_slowly(c, b"", &v[1 << 20..], b"");
        send_slowly(c, b"", &v, b"\r\n");
        assert_eq!(c.read_until(b"\r\n"), "STORED\r\n", "client {i}");
    }
    assert_eq!(watcher.stat_u64("hkv", "staged_bytes"), Some(0));
    assert_eq!(get(&mut watcher, "half1").map(|x| x.len()), Some(24 << 20));
}

/// A hostile probe: a thousand clients each sent most of a 1 MB value and stopped. Past the
/// half of `-m` that staging may take, their values were buffered, and the one connection
/// per worker let past `--conn-buffer-mb` to finish its request moved on to the next every
/// 50 ms, so every stalled value came to be buffered whole: 1 GB, growing 36 MB/s. Now a
/// value that can neither be staged nor buffered within the limit is refused as memcached
/// refuses one it cannot allocate, and its bytes are dropped as they arrive.
#[test]
fn regression_clients_stopping_part_way_through_values_stay_within_the_buffer_limit() {
    use std::io::Write;
    let h = Hkv::start(&["-m", "64", "-t", "2", "--conn-buffer-mb", "8"]);
    let v = value(3, 999_000);
    let mut clients: Vec<Client> = (0..80).map(|_| h.connect()).collect();
    let mut requests = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        c.stream.set_nonblocking(true).unwrap();
        let mut req = format!("set part{i} 0 0 1000000\r\n").into_bytes();
        req.extend_from_slice(&v);
        // What the kernel takes; the rest waits.
        let sent = c.stream.write(&req).unwrap_or(0);
        requests.push((req, sent));
    }
    std::thread::sleep(Duration::from_secs(3));
    let mut admin = h.connect();
    let buffered = admin.stat_u64("hkv", "conn_buffer_bytes").unwrap();
    assert!(buffered < 24 << 20, "{buffered} bytes buffered");
    common::assert_peak_within(&h, 64);
    let mut refused = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        let mut reply = [0u8; 64];
        if let Ok(n) = c.stream.read(&mut reply) {
            assert_eq!(
                &reply[..n],
                b"SERVER_ERROR out of memory storing object\r\n",
                "client {i}"
            );
            refused.push(i);
        }
    }
    assert!(!refused.is_empty(), "nothing refused");
    // A refused client that sends the rest of its value is served again after it, and the
    // key's old value is gone, as after any SET memcached refuses.
    let i = refused[0];
    let (req, sent) = &requests[i];
    let c = &mut clients[i];
    c.stream.set_nonblocking(false).unwrap();
    c.send(&req[*sent..]);
    c.send(&[b'z'; 1000]);
    c.send(b"\r\n");
    assert_eq!(c.call(&format!("get part{i}\r\n"), "END\r\n"), "END\r\n");
    common::assert_healthy(&h);
}

/// The same probe with values over `-I`: their bytes are dropped as received, not held in
/// the input buffer until the next pass drops them. On io_uring a connection's receives
/// could bring a whole value between two passes: 1,000 such clients took the process to
/// 400 MB (epoll, reading in 16 KiB steps, stayed under 90 MB).
#[test]
fn regression_values_refused_as_too_large_are_dropped_as_they_arrive() {
    use std::io::Write;
    let h = Hkv::start(&["-m", "64", "-t", "2"]);
    let v = value(4, 1_999_000);
    let mut clients: Vec<Client> = (0..300).map(|_| h.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.stream.set_nonblocking(true).unwrap();
        let mut req = format!("set big{i} 0 0 2000000\r\n").into_bytes();
        req.extend_from_slice(&v);
        let _ = c.stream.write(&req);
    }
    std::thread::sleep(Duration::from_secs(2));
    for c in clients.iter_mut() {
        c.stream.set_nonblocking(false).unwrap();
        assert_eq!(
            c.read_until(b"\r\n"),
            "SERVER_ERROR object too large for cache\r\n"
        );
    }
    let peak = h.peak_rss() >> 20;
    assert!(peak < 120, "peak RSS {peak} MB");
    common::assert_healthy(&h);
}

/// A hostile probe: `-m 64` full of 10 KB items, then 100 clients each sent the line of a
/// 1 MB SET and 70 KB of its value, and stopped. Staging took their memory by eviction:
/// 48% of the honest items went for values that never came (memcached evicted none). A
/// value still arriving now takes only free memory until half of it has come; in a full
/// cache it is buffered until then, and staged by eviction after.
#[test]
fn regression_stalled_large_sets_evict_nothing_from_a_full_cache() {
    let h = Hkv::start(&["-m", "16", "-t", "2"]);
    let mut admin = h.connect();
    let (items, evicted) = fill_until_evicting(&h);
    let part = value(5, 70_000);
    let mut stalled: Vec<Client> = (0..20).map(|_| h.connect()).collect();
    for (i, c) in stalled.iter_mut().enumerate() {
        send_slowly(
            c,
            format!("set big{i} 0 0 1000000\r\n").as_bytes(),
            &part,
            b"",
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(staged(&mut admin), 0, "nothing staged in a full cache");
    assert_eq!(admin.stat_u64("", "evictions"), Some(evicted));
    assert_eq!(admin.stat_u64("", "curr_items"), Some(items));
    assert_eq!(admin.stat_u64("hkv", "conn_buffer_refused"), Some(0));
    // A stalled client that goes on is served: past half of its value, the rest is
    // received into memory taken as a store takes it, by eviction in a full cache.
    let rest = value(6, 1_000_000 - part.len());
    send_slowly(&mut stalled[0], b"", &rest, b"\r\n");
    assert_eq!(stalled[0].read_until(b"\r\n"), "STORED\r\n");
    assert_eq!(staged(&mut admin), 1, "staged once half of it had come");
    let mut whole = part.clone();
    whole.extend_from_slice(&rest);
    assert_eq!(get(&mut admin, "big0"), Some(whole));
    common::assert_healthy(&h);
}

/// Stores 10 KB items until the server evicts; returns `curr_items` and `evictions` then.
fn fill_until_evicting(h: &Hkv) -> (u64, u64) {
    let mut admin = h.connect();
    let v = value(4, 10_000);
    let mut loader = h.connect();
    let mut n = 0;
    while admin.stat_u64("", "evictions") == Some(0) {
        let mut batch = Vec::new();
        for _ in 0..100 {
            batch.extend_from_slice(format!("set honest{n} 0 0 {}\r\n", v.len()).as_bytes());
            batch.extend_from_slice(&v);
            batch.extend_from_slice(b"\r\n");
            n += 1;
        }
        loader.send(&batch);
        let mut replies = String::new();
        while replies.matches("\r\n").count() < 100 {
            replies.push_str(&loader.read_until(b"\r\n"));
        }
        assert_eq!(replies, "STORED\r\n".repeat(100));
        assert!(n < 100_000, "the cache never filled");
    }
    let items = admin.stat_u64("", "curr_items").unwrap();
    (items, admin.stat_u64("", "evictions").unwrap())
}

/// Values waiting for half of themselves to come, in a full cache, are buffered: past
/// `--conn-buffer-mb`, those that stall are refused as values that cannot be stored are,
/// and the buffers stay bounded.
#[test]
fn stalled_values_waiting_to_be_staged_are_refused_past_the_buffer_limit() {
    use std::io::Write;
    let h = Hkv::start(&["-m", "16", "-t", "2", "--conn-buffer-mb", "2"]);
    let (items, evicted) = fill_until_evicting(&h);
    let part = value(7, 200_000);
    let mut stalled: Vec<Client> = (0..40).map(|_| h.connect()).collect();
    for (i, c) in stalled.iter_mut().enumerate() {
        c.stream.set_nonblocking(true).unwrap();
        let mut req = format!("set wait{i} 0 0 1000000\r\n").into_bytes();
        req.extend_from_slice(&part);
        let _ = c.stream.write(&req);
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut admin = h.connect();
    assert_eq!(admin.stat_u64("", "evictions"), Some(evicted));
    assert_eq!(admin.stat_u64("", "curr_items"), Some(items));
    let buffered = admin.stat_u64("hkv", "conn_buffer_bytes").unwrap();
    assert!(buffered < 16 << 20, "{buffered} bytes buffered");
    let mut refused = 0;
    for c in &mut stalled {
        let mut reply = [0u8; 64];
        if let Ok(n) = c.stream.read(&mut reply) {
            assert_eq!(
                &reply[..n],
                b"SERVER_ERROR out of memory storing object\r\n"
            );
            refused += 1;
        }
    }
    assert!(refused > 0, "nothing refused");
    assert_eq!(
        admin.stat_u64("hkv", "conn_buffer_refused"),
        Some(refused),
        "each refused once"
    );
    common::assert_healthy(&h);
}
