//! `lru_crawler` (memcached's LRU crawler commands), served by the partitions' expiry sweep
//! and by crawls on request. As memcached's, a crawl runs on a thread of its own
//! ([`Engine::run_crawler`]), a slice of chunks per hold of a partition's lock with
//! `lru_crawler sleep` between slices, and `lru_crawler crawl` only starts it: `OK`, or
//! `BUSY` while one runs. Run inline by the worker that received it, a crawl of a 1M-item
//! cache held every worker for ~16 ms, and a client looping crawls took everyone else from
//! ~100k to ~950 requests per second (docs/BENCHMARKS.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::Engine;

/// `lru_crawler` state: hkv's crawler is the partitions' expiry sweep plus crawls on
/// request.
#[derive(Debug)]
pub(super) struct Crawler {
    enabled: AtomicBool,
    sleep_us: std::sync::atomic::AtomicU32,
    tocrawl: std::sync::atomic::AtomicU32,
    starts: std::sync::atomic::AtomicU64,
    /// The crawl asked for and not finished yet, if any.
    job: Mutex<Option<CrawlJob>>,
    asked: Condvar,
}

/// A crawl on request: its classes (0-based; all when `None`) and the time it was asked at.
#[derive(Clone, Debug)]
struct CrawlJob {
    classes: Option<Vec<usize>>,
    now: u32,
}

/// Why `lru_crawler crawl` did not start a crawl.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CrawlError {
    #[error("CLIENT_ERROR lru crawler disabled")]
    Disabled,
    #[error("BUSY currently processing crawler request")]
    Busy,
    /// The client named a class that cannot exist, refused after the checks above, in
    /// memcached's order ([`Engine::crawl_refusal`] makes those).
    #[error("BADCLASS invalid class id")]
    BadClass,
    /// The list named no class at all (`lru_crawler crawl ,`): memcached's crawler starts
    /// nothing.
    #[error("NOTSTARTED no items to crawl")]
    NotStarted,
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

impl Default for Crawler {
    fn default() -> Crawler {
        Crawler {
            enabled: AtomicBool::new(true),
            // memcached's defaults.
            sleep_us: 100.into(),
            tocrawl: 0.into(),
            starts: 0.into(),
            job: Mutex::new(None),
            asked: Condvar::new(),
        }
    }
}

impl Engine {
    /// `lru_crawler crawl`: starts a crawl that frees every expired item of `classes`
    /// (0-based; all when `None`) in every partition, on the thread running
    /// [`Engine::run_crawler`]. `Busy` while one runs, as memcached answers.
    pub fn crawl(&self, classes: Option<&[usize]>, now: u32) -> Result<(), CrawlError> {
        if let Some(refused) = self.crawl_refusal() {
            return Err(refused);
        }
        let mut job = self.crawler.job.lock().unwrap_or_else(|e| e.into_inner());
        if job.is_some() {
            return Err(CrawlError::Busy);
        }
        if classes.is_some_and(<[usize]>::is_empty) {
            return Err(CrawlError::NotStarted);
        }
        *job = Some(CrawlJob {
            classes: classes.map(<[usize]>::to_vec),
            now,
        });
        self.crawler.starts.fetch_add(1, Ordering::Relaxed);
        self.crawler.asked.notify_one();
        Ok(())
    }

    /// Why no crawl could start now, whatever it named: the checks memcached makes before
    /// it reads the class list.
    pub fn crawl_refusal(&self) -> Option<CrawlError> {
        if !self.crawler.enabled.load(Ordering::Relaxed) {
            Some(CrawlError::Disabled)
        } else if self.crawling() {
            Some(CrawlError::Busy)
        } else {
            None
        }
    }

    /// `lru_crawler enable|disable`'s state.
    pub fn crawler_enabled(&self) -> bool {
        self.crawler.enabled.load(Ordering::Relaxed)
    }

    /// Whether a crawl asked for has not finished yet.
    pub fn crawling(&self) -> bool {
        self.crawler
            .job
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The crawler's thread: runs each crawl asked for until `stop` says the server stops.
    /// A crawl goes through each partition in slices of [`CRAWL_SLICE`] chunks, letting go of
    /// the partition after each and sleeping `lru_crawler sleep` microseconds per 1,000
    /// chunks it examined (memcached's pace), so workers' batches get the partition between.
    pub fn run_crawler(&self, stop: &AtomicBool) {
        loop {
            let job = {
                let mut job = self.crawler.job.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if let Some(j) = job.as_ref() {
                        break j.clone();
                    }
                    job = self
                        .crawler
                        .asked
                        .wait_timeout(job, Duration::from_millis(100))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            };
            self.crawl_now(job.classes.as_deref(), job.now, stop);
            *self.crawler.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// One crawl, run by the caller. Returns how many items it freed. Each slice judges
    /// expiry by the time asked at plus the time the crawl has run, as memcached's crawler
    /// reads its clock per item.
    fn crawl_now(&self, classes: Option<&[usize]>, asked_at: u32, stop: &AtomicBool) -> u64 {
        let per_class = self.crawler.tocrawl.load(Ordering::Relaxed);
        let started = std::time::Instant::now();
        let mut freed = 0;
        for p in 0..self.partitions.len() {
            let mut cursor = hkv_store::CrawlCursor::default();
            while !cursor.done && !stop.load(Ordering::Relaxed) {
                let now = asked_at.saturating_add(started.elapsed().as_secs() as u32);
                let examined = {
                    let mut part = self.lock(p);
                    let before = part.store().stats().crawler_checked;
                    freed +=
                        u64::from(part.crawl(classes, per_class, &mut cursor, CRAWL_SLICE, now));
                    self.note_pending(p, &part);
                    part.store().stats().crawler_checked - before
                };
                // memcached's pace: `lru_crawler sleep` per 1,000 items examined.
                let sleep_us = u64::from(self.crawler.sleep_us.load(Ordering::Relaxed));
                let pause = Duration::from_micros(sleep_us * examined / 1000);
                if !cursor.done || p + 1 < self.partitions.len() {
                    sleep_unless_stopped(pause, stop);
                }
            }
        }
        freed
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

    /// `lru_crawler sleep` (microseconds paused per 1,000 chunks a crawl examines) and
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

/// Sleeps for `pause`, in steps short enough that a stopping server does not wait for it.
fn sleep_unless_stopped(pause: Duration, stop: &AtomicBool) {
    let step = Duration::from_millis(50);
    let mut left = pause;
    while !left.is_zero() && !stop.load(Ordering::Relaxed) {
        let now = left.min(step);
        std::thread::sleep(now);
        left -= now;
    }
}
