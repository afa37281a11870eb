//! RV for large values: a storage command's data block received straight into item memory,
//! as memcached reads a body into the item it allocated at the command line, instead of
//! being buffered whole in the connection.
//!
//! When PP meets a storage command whose data block (at least `Limits::stage_min` bytes)
//! has not all arrived, it stops there (`Parsed::Body`). After the pass has run everything
//! the client sent before it, the command line is planned once more as if its value were
//! already stored elsewhere, to learn the key and the operation; a SET, ADD, REPLACE or CAS
//! then gets its memory from the engine (`stage_value`). From then on the data block's bytes
//! are moved from the input buffer into that memory as they arrive, and are taken out of
//! the buffer: the command line stays, followed by what came after the data. When all of
//! it is in, PP plans the command with `Limits::body_staged` and the request carries the
//! stage, which the engine links as the new item in the client's order. A command that does
//! not store it, a malformed data block and a connection that closes first give the memory
//! back.
//!
//! Memory is taken from what is free; when nothing is (a full cache), the block is buffered
//! until half of it has come and staged then by eviction, so that a client sending the line
//! of a large value and little of it makes no live item go. A command the engine cannot
//! stage (append, prepend, no memory to take even so, an unauthenticated client) is
//! buffered as before.

use std::sync::atomic::Ordering;

use hkv_engine::Engine;

/// Data blocks of at least this many bytes are received into item memory once their
/// command line is in (`Limits::stage_min`); smaller ones are buffered, which costs less
/// than taking memory for them ahead of their batch. 64 KiB: four of the reads RV makes.
pub const STAGE_MIN: usize = 64 << 10;

use crate::conn::Conn;
use crate::shared::Shared;

/// RV: moves the bytes of `c`'s data block that have arrived into its item memory, and
/// takes them out of the input buffer.
pub(crate) fn rv_drain_body(c: &mut Conn, engine: &Engine) {
    let Some(b) = c.body.as_mut() else {
        return;
    };
    let at = c.rstart + b.header;
    let want = (b.staged.value_len as usize).saturating_sub(b.filled);
    let n = want.min(c.rend.saturating_sub(at));
    if n == 0 {
        return;
    }
    if !engine.fill_staged(&b.staged, b.filled, &c.rbuf[at..at + n]) {
        // The stage is gone (it cannot be, short of a bug): the bytes are dropped all the
        // same, and the command answers out of memory when it tries to store them.
        tracing::debug!("a staged value lost its memory");
    }
    b.filled += n;
    c.rbuf.copy_within(at + n..c.rend, at);
    c.rend -= n;
}

/// Gives back the memory of `c`'s data block, if one is being received (the connection
/// closes, or its command has run: the engine ignores a stage it has stored).
pub(crate) fn release_body(c: &mut Conn, shared: &Shared) {
    if let Some(b) = c.body.take() {
        shared.engine.release_staged(&b.staged);
        shared
            .stats
            .staged_bytes
            .fetch_sub(b.staged.value_len as usize, Ordering::Relaxed);
    }
}

/// Whether a data block of `vlen` bytes may be staged now: blocks being received may take
/// at most half of `-m` together, so clients that send command lines and then little or
/// nothing cannot take all of memory ahead of their data (past that, their blocks are
/// buffered and bounded by `--conn-buffer-mb`, docs/reliability.md). Counts it if so.
pub(crate) fn admit(shared: &Shared, vlen: usize) -> bool {
    let cap = shared.config.memory_limit / 2;
    let held = &shared.stats.staged_bytes;
    let mut now = held.load(Ordering::Relaxed);
    loop {
        if now.saturating_add(vlen) > cap {
            return false;
        }
        match held.compare_exchange_weak(now, now + vlen, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(seen) => now = seen,
        }
    }
}
