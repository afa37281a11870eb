//! `lru_crawler` (memcached's LRU crawler commands), served by the partitions' expiry sweep
//! and by crawls run inline on request, a slice of chunks per hold of a partition's lock.

use std::sync::atomic::{AtomicBool, Ordering};

use super::Engine;

/// `lru_crawler` state: hkv's crawler is the partitions' expiry sweep plus crawls run on
/// request, inline.
#[derive(Debug)]
pub(super) struct Crawler {
    enabled: AtomicBool,
    sleep_us: std::sync::atomic::AtomicU32,
    tocrawl: std::sync::atomic::AtomicU32,
    starts: std::sync::atomic::AtomicU64,
}

/// `stats settings` and `stats` figures of the crawler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrawlerReport {
    pub enabled: bool,
    pub sleep_us: u32,
    pub tocrawl: u32,
    /// Crawls run on request (`lru_crawler_starts`).
    pub starts: u64,
}

/// Chunks a crawl or an item listing examines per hold of a partition's lock.
pub(super) const CRAWL_SLICE: u32 = 16 * 1024;

/// `lru_crawler crawl` while the crawler is disabled.
#[derive(Debug, thiserror::Error)]
#[error("CLIENT_ERROR lru crawler disabled")]
pub struct CrawlerDisabled;

impl Default for Crawler {
    fn default() -> Crawler {
        Crawler {
            enabled: AtomicBool::new(true),
            // memcached's defaults.
            sleep_us: 100.into(),
            tocrawl: 0.into(),
            starts: 0.into(),
        }
    }
}

impl Engine {
    /// `lru_crawler crawl`: frees every expired item of `classes` (0-based; all when `None`)
    /// in every partition now. `Err` when the crawler is disabled. Returns how many it freed.
    pub fn crawl(&self, classes: Option<&[usize]>, now: u32) -> Result<u64, CrawlerDisabled> {
        if !self.crawler.enabled.load(Ordering::Relaxed) {
            return Err(CrawlerDisabled);
        }
        self.crawler.starts.fetch_add(1, Ordering::Relaxed);
        let per_class = self.crawler.tocrawl.load(Ordering::Relaxed);
        let mut freed = 0;
        for p in 0..self.partitions.len() {
            // In slices, the lock let go between them: a crawl of a large cache must not
            // hold every other worker's batches on this partition for its whole length.
            let mut cursor = hkv_store::CrawlCursor::default();
            while !cursor.done {
                let mut part = self.lock(p);
                freed += u64::from(part.crawl(classes, per_class, &mut cursor, CRAWL_SLICE, now));
                self.pending[p].store(part.pending_writes(), Ordering::Relaxed);
            }
        }
        Ok(freed)
    }

    /// `lru_crawler enable|disable`; false when it already was so (memcached answers that
    /// with an error).
    pub fn set_crawler(&self, on: bool) -> bool {
        if self.crawler.enabled.swap(on, Ordering::Relaxed) == on {
            return false;
        }
        for p in 0..self.partitions.len() {
            self.lock(p).set_sweep(on);
        }
        true
    }

    /// `lru_crawler sleep` (recorded and reported; crawls run inline without pausing) and
    /// `lru_crawler tocrawl` (chunks examined per class per crawl, 0: all).
    pub fn set_crawler_sleep(&self, us: u32) {
        self.crawler.sleep_us.store(us, Ordering::Relaxed);
    }

    pub fn set_crawler_tocrawl(&self, n: u32) {
        self.crawler.tocrawl.store(n, Ordering::Relaxed);
    }

    pub fn crawler(&self) -> CrawlerReport {
        CrawlerReport {
            enabled: self.crawler.enabled.load(Ordering::Relaxed),
            sleep_us: self.crawler.sleep_us.load(Ordering::Relaxed),
            tocrawl: self.crawler.tocrawl.load(Ordering::Relaxed),
            starts: self.crawler.starts.load(Ordering::Relaxed),
        }
    }
}
