//! memcached's `watch`: log streams (fetches, mutations, evictions, connection events) that
//! connections subscribe to. Lines are written where the event happens (the engine for
//! evictions, the server for the rest) into each subscribed watcher's bounded buffer, and the
//! server moves them to the watcher's socket. Nothing is formatted while nobody watches (one
//! relaxed load), and a watcher that does not keep up loses lines, counted, never memory:
//! at most [`WATCHER_LIMIT`] watchers of [`WATCHER_BUFFER`] bytes each.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

pub use hkv_types::watch as stream;

/// memcached's limit on watchers at once (WATCHER_LIMIT in its logger.h).
pub const WATCHER_LIMIT: usize = 20;
/// Bytes of lines kept for one watcher (memcached's `watcher_logbuf_size` default).
pub const WATCHER_BUFFER: usize = 256 << 10;

/// One subscribed connection's unsent lines.
struct Watcher {
    id: u64,
    streams: u8,
    buf: Vec<u8>,
    /// Lines dropped since the last `skipped=` notice.
    skipped: u64,
}

/// The log hub; one per server.
#[derive(Default)]
pub struct Watch {
    /// Union of every watcher's streams: what is worth formatting.
    streams: AtomicU8,
    gid: AtomicU64,
    next_id: AtomicU64,
    watchers: Mutex<Vec<Watcher>>,
    sent: AtomicU64,
    skipped: AtomicU64,
}

/// Too many watchers: memcached's `WATCHER_TOO_MANY log watcher limit reached`.
#[derive(Debug, thiserror::Error)]
#[error("WATCHER_TOO_MANY log watcher limit reached")]
pub struct TooManyWatchers;

impl Watch {
    /// Whether anyone watches `stream` (cheap: callers test this before gathering a line).
    pub fn wants(&self, stream: u8) -> bool {
        self.streams.load(Ordering::Relaxed) & stream != 0
    }

    /// Subscribes a new watcher to `streams`; its id is for [`Watch::take`] and
    /// [`Watch::remove`].
    pub fn add(&self, streams: u8) -> Result<u64, TooManyWatchers> {
        let mut w = self.lock();
        if w.len() >= WATCHER_LIMIT {
            return Err(TooManyWatchers);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        w.push(Watcher {
            id,
            streams,
            buf: Vec::new(),
            skipped: 0,
        });
        self.streams.fetch_or(streams, Ordering::Relaxed);
        Ok(id)
    }

    pub fn remove(&self, id: u64) {
        let mut w = self.lock();
        w.retain(|x| x.id != id);
        let union = w.iter().fold(0, |a, x| a | x.streams);
        self.streams.store(union, Ordering::Relaxed);
    }

    /// Watchers now (`log_watchers`).
    pub fn watchers(&self) -> usize {
        self.lock().len()
    }

    /// Lines written to watchers (`log_watcher_sent`) and dropped for slow ones
    /// (`log_watcher_skipped`).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Moves up to `max` bytes of whole lines for watcher `id` into `out`, after a
    /// `skipped=N` line when some were dropped (as memcached tells a slow watcher). Returns
    /// false if the watcher is gone.
    pub fn take(&self, id: u64, out: &mut Vec<u8>, max: usize) -> bool {
        let mut w = self.lock();
        let Some(x) = w.iter_mut().find(|x| x.id == id) else {
            return false;
        };
        if x.skipped > 0 {
            out.extend_from_slice(format!("skipped={}\n", x.skipped).as_bytes());
            x.skipped = 0;
        }
        let n = if x.buf.len() <= max {
            x.buf.len()
        } else {
            // Whole lines only: up to the last newline that fits.
            x.buf[..max]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1)
        };
        out.extend_from_slice(&x.buf[..n]);
        x.buf.drain(..n);
        true
    }

    /// Whether watcher `id` has lines waiting.
    pub fn has_lines(&self, id: u64) -> bool {
        self.lock()
            .iter()
            .any(|x| x.id == id && (!x.buf.is_empty() || x.skipped > 0))
    }

    /// Writes one line to every watcher of `stream`: `ts=<unix.micros> gid=<n> ` then what
    /// `body` writes, then a newline. `body` runs once, and only if someone watches.
    pub fn emit(&self, stream: u8, body: impl FnOnce(&mut String)) {
        if !self.wants(stream) {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let gid = self.gid.fetch_add(1, Ordering::Relaxed) + 1;
        let mut line = String::with_capacity(128);
        let _ = write!(
            line,
            "ts={}.{:06} gid={gid} ",
            now.as_secs(),
            now.subsec_micros()
        );
        body(&mut line);
        line.push('\n');
        let mut w = self.lock();
        for x in w.iter_mut().filter(|x| x.streams & stream != 0) {
            if x.buf.len() + line.len() > WATCHER_BUFFER {
                x.skipped += 1;
                self.skipped.fetch_add(1, Ordering::Relaxed);
            } else {
                x.buf.extend_from_slice(line.as_bytes());
                self.sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// An evicted item, as memcached's `type=eviction` line.
    #[allow(clippy::too_many_arguments)]
    pub fn eviction(
        &self,
        key: &[u8],
        fetched: bool,
        expiry: u32,
        atime: u32,
        class: usize,
        size: usize,
        now: u32,
    ) {
        self.emit(stream::EVICTIONS, |l| {
            l.push_str("type=eviction key=");
            uri_encode(l, key);
            let ttl = if expiry == 0 {
                -1
            } else {
                i64::from(expiry.saturating_sub(now))
            };
            let _ = write!(
                l,
                " fetch={} ttl={ttl} la={} clsid={} size={size}",
                if fetched { "yes" } else { "no" },
                now.saturating_sub(atime),
                class + 1
            );
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Watcher>> {
        // A panic while holding it leaves buffers that are still whole lines or empty.
        self.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Appends `key` as memcached writes keys in log lines: bytes other than letters, digits and
/// `-._~` as `%XX`.
pub fn uri_encode(out: &mut String, key: &[u8]) {
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_go_to_subscribers_only_and_nothing_is_formatted_unwatched() {
        let w = Watch::default();
        let mut formatted = false;
        w.emit(stream::FETCHERS, |_| formatted = true);
        assert!(!formatted);
        let a = w.add(stream::FETCHERS).unwrap();
        let b = w.add(stream::EVICTIONS).unwrap();
        w.emit(stream::FETCHERS, |l| l.push_str("type=item_get key=k"));
        w.eviction(b"a b", true, 0, 90, 0, 10, 100);
        let (mut oa, mut ob) = (Vec::new(), Vec::new());
        assert!(w.take(a, &mut oa, usize::MAX) && w.take(b, &mut ob, usize::MAX));
        let (oa, ob) = (
            String::from_utf8(oa).unwrap(),
            String::from_utf8(ob).unwrap(),
        );
        assert!(oa.starts_with("ts="));
        assert!(oa.contains(" gid=1 type=item_get key=k\n"), "{oa}");
        assert!(
            ob.contains(" gid=2 type=eviction key=a%20b fetch=yes ttl=-1 la=10 clsid=1 size=10\n"),
            "{ob}"
        );
        w.remove(a);
        assert!(!w.wants(stream::FETCHERS) && w.wants(stream::EVICTIONS));
        assert!(!w.take(a, &mut Vec::new(), 100));
    }

    #[test]
    fn a_slow_watcher_loses_lines_counted_never_memory() {
        let w = Watch::default();
        let id = w.add(stream::MUTATIONS).unwrap();
        let body = "x".repeat(1000);
        for _ in 0..1000 {
            w.emit(stream::MUTATIONS, |l| l.push_str(&body));
        }
        assert!(w.skipped() > 700 && w.sent() + w.skipped() == 1000);
        let mut out = Vec::new();
        w.take(id, &mut out, 5000);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(&format!("skipped={}\n", w.skipped())));
        // Whole lines only.
        assert!(text.ends_with('\n') && text.len() <= 5000 + 20);
    }

    #[test]
    fn at_most_twenty_watchers_as_memcached() {
        let w = Watch::default();
        for _ in 0..WATCHER_LIMIT {
            w.add(stream::FETCHERS).unwrap();
        }
        assert_eq!(
            w.add(stream::FETCHERS).unwrap_err().to_string(),
            "WATCHER_TOO_MANY log watcher limit reached"
        );
        assert_eq!(w.watchers(), WATCHER_LIMIT);
    }
}
