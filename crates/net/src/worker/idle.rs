//! memcached's idle kick (`-o idle_timeout`): TCP connections waiting for a command that
//! have sent none for a while are closed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::clock::unix_now;
use crate::conn::Conn;
use crate::stream::Stream;

use super::Worker;

impl Worker {
    /// memcached's idle kick: a connection is closed when its last command came more than
    /// `limit` ago (bytes of a line that never ends do not count: a client trickling one
    /// kept its connection while memcached closed it) and it is waiting for a command, as
    /// memcached kicks only those reading one (`conn_read`): not while its replies are
    /// being sent, a data block is arriving or being dropped, or it is a watcher. Unix
    /// socket connections are never kicked, as in memcached.
    pub(super) fn close_idle(&mut self, limit: Duration) {
        let now = unix_now();
        let idle: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                u64::from(now.saturating_sub(c.last_cmd)) > limit.as_secs() && awaiting_command(c)
            })
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

/// Whether `c` is a TCP connection waiting for (or reading) a command line: memcached's
/// `conn_new_cmd` and `conn_read`.
fn awaiting_command(c: &Conn) -> bool {
    if matches!(c.stream, Stream::Unix(_)) {
        return false;
    }
    if c.pending_output() > 0
        || c.body.is_some()
        || c.swallow > 0
        || c.watch.is_some()
        || c.dump.is_some()
        || c.close_after_write
    {
        return false;
    }
    let input = &c.rbuf[c.rstart..c.rend];
    if input.is_empty() {
        return true;
    }
    if c.binary.unwrap_or(input[0] == 0x80) {
        // The header read, memcached reads the rest as a body (`conn_nread`).
        return input.len() < hkv_proto::binary::HEADER_LEN;
    }
    // A line with no newline yet; one that has come is a command (a data block after it
    // is `conn_nread`).
    !input.contains(&b'\n')
}
