//! This machine's random-access limit: independent random 64-byte reads per second per core,
//! many in flight, over a buffer as large as the index, on huge pages. The index can do no
//! better than one such read per lookup, so every rate is reported as a ratio of it.

use std::time::Instant;

use hkv_mem::{prefetch_read, Arena};

use crate::zipf::Rng;

/// Reads kept in flight: prefetch a line, read it this many reads later.
const IN_FLIGHT: usize = 32;

/// A buffer of at least `bytes`, touched so it is backed by real (huge) pages.
pub fn buffer(bytes: usize) -> anyhow::Result<(Arena, hkv_mem::Carved)> {
    let bytes = bytes.next_power_of_two().max(1 << 21);
    let arena = Arena::new(bytes + hkv_mem::HUGE_PAGE)?;
    let mut buf = arena.carve(bytes, hkv_mem::HUGE_PAGE)?;
    for (i, line) in buf.chunks_mut(64).enumerate() {
        line[0] = i as u8;
    }
    Ok((arena, buf))
}

/// Random line reads per second on the calling thread.
pub fn reads_per_second(buf: &[u8], reads: u64, seed: u64) -> f64 {
    let lines = (buf.len() / 64) as u64;
    debug_assert!(lines.is_power_of_two());
    let mask = lines - 1;
    let mut rng = Rng::new(seed);
    let mut ring = [0usize; IN_FLIGHT];
    for slot in ring.iter_mut() {
        *slot = (rng.next_u64() & mask) as usize * 64;
        prefetch_read(&buf[*slot]);
    }
    let mut sum = 0u64;
    let t = Instant::now();
    for i in 0..reads as usize {
        let next = (rng.next_u64() & mask) as usize * 64;
        prefetch_read(&buf[next]);
        let slot = &mut ring[i % IN_FLIGHT];
        sum = sum.wrapping_add(buf[*slot] as u64);
        *slot = next;
    }
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(sum);
    reads as f64 / secs
}
