//! How much of `-m` holds items: memory split into partitions too small to hold their slab
//! classes' pages strands most of it (issue 14: memory like memcached's).

mod common;

use common::Hkv;

#[test]
fn regression_small_memory_is_not_stranded_across_partitions() {
    // -m 16 -t 2 made two partitions of 8 pages each; 3000 sets of 1-64 KiB left 117 items
    // (2883 evicted) where one partition keeps 527.
    let h = Hkv::start(&["-m", "16", "-t", "2"]);
    let mut c = h.connect();
    assert_eq!(c.stat_u64("hkv", "partitions").unwrap(), 1);
    let mut x: u64 = 12345;
    for i in 0..3000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = 1024 + (x >> 33) as usize % (64 << 10);
        c.send(format!("set k{i} 0 0 {len} noreply\r\n").as_bytes());
        c.send(&vec![b'v'; len]);
        c.send(b"\r\n");
    }
    c.call("mn\r\n", "MN\r\n");
    let items = c.stat_u64("", "curr_items").unwrap();
    assert!(items >= 400, "{items} items held in 16 MiB");
    // With memory enough for 16 pages each, every worker has its own partition.
    let big = Hkv::start(&["-m", "64", "-t", "2"]);
    assert_eq!(big.connect().stat_u64("hkv", "partitions").unwrap(), 2);
}
