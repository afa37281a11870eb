//! `stats detail on|off|dump` (memcached's per-prefix statistics): with it on, every GET,
//! storage command and delete of a key with a `:` in it counts against the key's prefix.
//! Bounded whatever clients send: at most [`MAX_PREFIXES`] prefixes are tracked (later new
//! ones are not counted), each at most a key long.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Prefixes tracked at most (about 300 bytes each at worst: under 3 MB).
pub(crate) const MAX_PREFIXES: usize = 10_000;
const DELIMITER: u8 = b':';

/// What one request does to its prefix's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Get { hit: bool },
    Set,
    Delete,
}

/// A prefix's creation order and its get, hit, set and del counts.
type Counts = (u64, [u64; 4]);

#[derive(Default)]
pub(crate) struct PrefixStats {
    on: AtomicBool,
    table: Mutex<HashMap<Vec<u8>, Counts>>,
}

impl PrefixStats {
    pub fn enabled(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub fn set_enabled(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// Counts `events` (key, event) under their prefixes; keys without the delimiter are not
    /// counted, as in memcached.
    pub fn record<'k>(&self, events: impl Iterator<Item = (&'k [u8], Event)>) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        for (key, ev) in events {
            let Some(end) = key.iter().position(|&b| b == DELIMITER) else {
                continue;
            };
            let prefix = &key[..end];
            let next = table.len() as u64;
            if !table.contains_key(prefix) {
                if table.len() >= MAX_PREFIXES {
                    continue;
                }
                table.insert(prefix.to_vec(), (next, [0; 4]));
            }
            let Some(entry) = table.get_mut(prefix) else {
                continue;
            };
            let c = &mut entry.1;
            match ev {
                Event::Get { hit } => {
                    c[0] += 1;
                    c[1] += u64::from(hit);
                }
                Event::Set => c[2] += 1,
                Event::Delete => c[3] += 1,
            }
        }
    }

    /// `stats reset` forgets every prefix, as memcached's does.
    pub fn clear(&self) {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// memcached's dump: one `PREFIX` line per prefix, newest first, then `END`.
    pub fn dump(&self) -> Vec<u8> {
        // A copy taken under the lock and written out after it: every worker counting a
        // request waits on this lock, and writing 10,000 escaped prefixes held it for 300 ms
        // (a hostile probe).
        let mut rows: Vec<(Vec<u8>, Counts)> = {
            let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            table.iter().map(|(p, c)| (p.clone(), *c)).collect()
        };
        rows.sort_unstable_by_key(|(_, (order, _))| std::cmp::Reverse(*order));
        let bytes: usize = rows.iter().map(|(p, _)| p.len() + 64).sum();
        let mut out = Vec::with_capacity(bytes + 5);
        for (prefix, (_, c)) in &rows {
            out.extend_from_slice(b"PREFIX ");
            push_visible(&mut out, prefix);
            let _ = write!(
                out,
                " get {} hit {} set {} del {}\r\n",
                c[0], c[1], c[2], c[3]
            );
        }
        out.extend_from_slice(b"END\r\n");
        out
    }
}

/// A prefix as the dump shows it. Binary and base64 (`b`) keys may hold any byte, and a
/// prefix with CR LF or spaces in it would forge lines or fields in the operator's reply:
/// bytes a text key cannot hold (controls, space, DEL) are written `%XX`. Text keys'
/// prefixes read as in memcached.
fn push_visible(out: &mut Vec<u8>, prefix: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in prefix {
        if b <= b' ' || b == 0x7f {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_prefix_newest_first_and_stays_bounded() {
        let s = PrefixStats::default();
        s.record(
            [
                (&b"a:1"[..], Event::Set),
                (b"a:1", Event::Get { hit: true }),
                (b"a:2", Event::Get { hit: false }),
                (b"nodelim", Event::Get { hit: true }),
                (b"a:1", Event::Delete),
                (b"b:x", Event::Set),
            ]
            .into_iter(),
        );
        assert_eq!(
            s.dump(),
            b"PREFIX b get 0 hit 0 set 1 del 0\r\nPREFIX a get 2 hit 1 set 1 del 1\r\nEND\r\n"
        );
        let keys: Vec<Vec<u8>> = (0..MAX_PREFIXES + 50)
            .map(|i| format!("p{i}:k").into_bytes())
            .collect();
        s.record(keys.iter().map(|k| (&k[..], Event::Set)));
        assert_eq!(s.table.lock().unwrap().len(), MAX_PREFIXES);
    }

    #[test]
    fn regression_stats_reset_clears_the_prefix_stats() {
        // Found by memcached's t/stats-detail.t: after `stats reset` the dump is empty.
        let s = PrefixStats::default();
        s.record([(&b"foo:1"[..], Event::Set)].into_iter());
        s.clear();
        assert_eq!(s.dump(), b"END\r\n");
        s.record([(&b"foo:1"[..], Event::Get { hit: true })].into_iter());
        assert_eq!(s.dump(), b"PREFIX foo get 1 hit 1 set 0 del 0\r\nEND\r\n");
    }

    #[test]
    fn regression_a_prefix_with_cr_lf_cannot_forge_lines_in_the_dump() {
        // A hostile helper stored `ev\r\nEND\r\nVALUE injected 0 1\r\nX:z` with a base64
        // key: the dump printed its prefix raw, an END and a VALUE line of the client's.
        let s = PrefixStats::default();
        s.record([(&b"ev\r\nEND\r\nVALUE injected 0 1\r\nX:z"[..], Event::Set)].into_iter());
        s.record([(&b"a b\x7f%:1"[..], Event::Set)].into_iter());
        assert_eq!(
            s.dump(),
            &b"PREFIX a%20b%7F% get 0 hit 0 set 1 del 0\r\n\
               PREFIX ev%0D%0AEND%0D%0AVALUE%20injected%200%201%0D%0AX get 0 hit 0 set 1 del 0\r\n\
               END\r\n"[..]
        );
    }
}
