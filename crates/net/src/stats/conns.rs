//! `stats conns` (memcached's): every listening socket and client connection, its address
//! and how long since it last sent a command. Connections register when a worker takes them
//! and leave when it closes them; a pass that reads a connection stores the time in the
//! connection's own atomic, so the read path takes no lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) struct ConnEntry {
    fd: i32,
    addr: String,
    listen: String,
    last: Arc<AtomicU64>,
}

#[derive(Default)]
pub(crate) struct ConnRegistry {
    conns: Mutex<slab::Slab<ConnEntry>>,
}

impl ConnRegistry {
    /// Registers a connection; returns its key and the clock its worker updates.
    pub fn add(&self, fd: i32, addr: String, listen: String, now: u64) -> (usize, Arc<AtomicU64>) {
        let last = Arc::new(AtomicU64::new(now));
        let key = self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ConnEntry {
                fd,
                addr,
                listen,
                last: Arc::clone(&last),
            });
        (key, last)
    }

    pub fn remove(&self, key: usize) {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if conns.contains(key) {
            conns.remove(key);
        }
    }

    /// memcached's lines: listeners first (`conn_listening`), then clients by descriptor.
    pub fn pairs(
        &self,
        listeners: &[(i32, String)],
        started: u64,
        now: u64,
    ) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (fd, addr) in listeners {
            out.push((format!("{fd}:addr"), addr.clone()));
            out.push((format!("{fd}:state"), "conn_listening".into()));
            out.push((
                format!("{fd}:secs_since_last_cmd"),
                now.saturating_sub(started).to_string(),
            ));
        }
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<&ConnEntry> = conns.iter().map(|(_, c)| c).collect();
        list.sort_by_key(|c| c.fd);
        for c in list {
            let fd = c.fd;
            out.push((format!("{fd}:addr"), c.addr.clone()));
            out.push((format!("{fd}:listen_addr"), c.listen.clone()));
            // Between requests every connection waits for its next command.
            out.push((format!("{fd}:state"), "conn_parse_cmd".into()));
            out.push((
                format!("{fd}:secs_since_last_cmd"),
                now.saturating_sub(c.last.load(Ordering::Relaxed))
                    .to_string(),
            ));
        }
        out
    }
}
