//! `lru_crawler metadump` streamed: a dumping connection is sent its next lines whenever its
//! unsent output is under the high-water mark, so a dump of any size is bounded by the
//! connection's output budget, as any reply is, and a client that stops reading stops it.

use crate::clock::unix_now;

use super::Worker;

impl Worker {
    /// The next lines of every dump among `ready` with room in its output (the pass's SD
    /// sends them). A dump that ends here ends before the pass plans the connection's
    /// next requests, so their replies follow its END.
    pub(super) fn feed_dumps(&mut self, ready: &[usize]) {
        let allowance = self.output_allowance().0;
        let now = unix_now();
        for &t in ready {
            let Some(c) = self.conns.get_mut(t) else {
                continue;
            };
            let room = allowance.saturating_sub(c.pending_output());
            let Some(d) = c.dump.as_mut().filter(|_| room > 0) else {
                continue;
            };
            if crate::stats::metadump_more(d, &self.shared, now, room, &mut c.wbuf) {
                c.dump = None;
            }
            c.account(&self.shared.stats.conn_buffer_bytes);
        }
    }
}
