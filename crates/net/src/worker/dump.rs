//! `lru_crawler metadump` streamed: a dumping connection is sent its next lines (up to its
//! output allowance) whenever the kernel has taken the last ones, so a dump of any size
//! holds no more than one reply does, and a client that stops reading stops it.

use crate::clock::unix_now;

use super::Worker;

/// Most bytes of dump lines one pass writes for one connection. The lines are made on the
/// worker, between its other connections' batches: 1 MiB of them (~16K items, ~1.5 ms)
/// at a time put 1.3-1.8 ms on other clients' p99 while a dump looped.
const DUMP_BYTES_PER_PASS: usize = 64 << 10;

impl Worker {
    /// The next lines of every dump among `ready` whose last ones are sent (the pass's SD
    /// sends them). A dump that ends here ends before the pass plans the connection's
    /// next requests, so their replies follow its END. A connection that is closing
    /// (its peer gone) drops its dump.
    pub(super) fn feed_dumps(&mut self, ready: &[usize]) {
        let allowance = self.output_allowance().0;
        let now = unix_now();
        for &t in ready {
            let Some(c) = self.conns.get_mut(t) else {
                continue;
            };
            if c.close_after_write {
                c.dump = None;
            }
            if !c.dump_wants_lines() {
                continue;
            }
            // Emptied, not appended to: a buffer whose sent head is kept grew by a dump's
            // every line while a slow reader never let it drain to the end.
            c.wbuf.compact();
            let Some(d) = c.dump.as_mut() else { continue };
            let room = allowance.min(DUMP_BYTES_PER_PASS);
            if crate::stats::metadump_more(d, &self.shared, now, room, &mut c.wbuf) {
                c.dump = None;
            }
            c.account(&self.shared.stats.conn_buffer_bytes);
        }
    }
}
