//! memcached's idle kick (`-o idle_timeout`): connections that moved no bytes for a while
//! are closed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Worker;

impl Worker {
    /// memcached's idle kick: connections that moved no bytes for `limit`.
    pub(super) fn close_idle(&mut self, limit: Duration) {
        let idle: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.last_active.elapsed() > limit)
            .map(|(t, _)| t)
            .collect();
        for t in idle {
            self.shared.stats.idle_kicks.fetch_add(1, Ordering::Relaxed);
            if let Some(c) = self.conns.get_mut(t) {
                c.close_reason = Some("idle_timeout");
            }
            self.close(t);
        }
    }
}
