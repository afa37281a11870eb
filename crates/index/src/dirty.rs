//! Which parts of a table changed since a copy of it was last brought up to date.
//!
//! A device that cannot read host memory (a discrete GPU) searches a copy of the CPU's
//! table; the CPU marks the pages it writes, and before the next device search only those
//! pages cross the bus (docs/placement.md, "Discrete GPUs"). A page is [`PAGE_BUCKETS`]
//! buckets (4 KiB): a write marks one bit and, the first time, pushes the page on a list,
//! so taking the changes costs what changed, not the table's size.

use std::ops::Range;

/// Buckets per tracked page (64 x 64 bytes: 4 KiB, a device copy's useful minimum).
pub const PAGE_BUCKETS: u32 = 64;

/// Bytes of a tracked page.
const PAGE_BYTES: u64 = PAGE_BUCKETS as u64 * 64;

/// What one copy call costs beyond its bytes, in bytes of copying (a driver call of a few
/// microseconds against a bus of about 10 GB/s): runs closer than this are sent as one, and
/// the whole table goes in one copy when the runs would cost more.
const CALL_BYTES: u64 = 48 << 10;

/// What a copy of the table must take to match it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changes {
    Nothing,
    /// Everything (cleared, replaced, or too scattered to send piece by piece).
    All,
    /// Bucket ranges, ascending and disjoint.
    Runs(Vec<Range<u32>>),
}

#[derive(Debug)]
pub struct Dirty {
    bits: Vec<u64>,
    pages: Vec<u32>,
    all: bool,
    buckets: u32,
}

impl Dirty {
    /// A tracker for a table of `buckets`, starting with everything to send.
    pub fn new(buckets: u32) -> Dirty {
        let pages = buckets.div_ceil(PAGE_BUCKETS) as usize;
        Dirty {
            bits: vec![0; pages.div_ceil(64)],
            pages: Vec::new(),
            all: true,
            buckets,
        }
    }

    #[inline]
    pub fn mark(&mut self, bucket: u32) {
        if self.all {
            return;
        }
        let page = bucket / PAGE_BUCKETS;
        let (word, bit) = ((page / 64) as usize, 1u64 << (page % 64));
        if let Some(w) = self.bits.get_mut(word) {
            if *w & bit == 0 {
                *w |= bit;
                self.pages.push(page);
            }
        }
    }

    pub fn mark_all(&mut self) {
        self.all = true;
    }

    /// What changed since the last call, then nothing.
    pub fn take(&mut self) -> Changes {
        let out = if self.all {
            Changes::All
        } else if self.pages.is_empty() {
            Changes::Nothing
        } else {
            self.pages.sort_unstable();
            let gap = (CALL_BYTES / PAGE_BYTES) as u32 * PAGE_BUCKETS;
            let mut runs: Vec<Range<u32>> = Vec::new();
            for &p in &self.pages {
                let start = p * PAGE_BUCKETS;
                let end = (start + PAGE_BUCKETS).min(self.buckets);
                match runs.last_mut() {
                    Some(r) if start - r.end <= gap => r.end = end,
                    _ => runs.push(start..end),
                }
            }
            let bytes: u64 = runs.iter().map(|r| u64::from(r.end - r.start) * 64).sum();
            if runs.len() as u64 * CALL_BYTES + bytes >= u64::from(self.buckets) * 64 {
                Changes::All
            } else {
                Changes::Runs(runs)
            }
        };
        self.all = false;
        for &p in &self.pages {
            self.bits[(p / 64) as usize] = 0;
        }
        self.pages.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `pages` tracked pages, its first full sync taken.
    fn tracked(pages: u32) -> Dirty {
        let mut d = Dirty::new(pages * PAGE_BUCKETS);
        assert_eq!(d.take(), Changes::All);
        d
    }

    #[test]
    fn starts_with_everything_then_sends_what_changed() {
        let mut d = tracked(1024);
        assert_eq!(d.take(), Changes::Nothing);
        d.mark(70);
        d.mark(64);
        d.mark(130);
        let far = 900 * PAGE_BUCKETS + 5;
        d.mark(far);
        let page = |p: u32| p * PAGE_BUCKETS..(p + 1) * PAGE_BUCKETS;
        assert_eq!(
            d.take(),
            Changes::Runs(vec![64..3 * PAGE_BUCKETS, page(900)])
        );
        assert_eq!(d.take(), Changes::Nothing);
        d.mark_all();
        d.mark(3);
        assert_eq!(d.take(), Changes::All);
    }

    #[test]
    fn pages_a_few_apart_go_as_one_run() {
        let mut d = tracked(1024);
        let near = (CALL_BYTES / PAGE_BYTES) as u32;
        d.mark(0);
        d.mark((1 + near) * PAGE_BUCKETS);
        d.mark((2 + 2 * near) * PAGE_BUCKETS);
        assert_eq!(
            d.take(),
            Changes::Runs(std::iter::once(0..(3 + 2 * near) * PAGE_BUCKETS).collect())
        );
        // One page further is a run of its own.
        d.mark(0);
        d.mark((2 + near) * PAGE_BUCKETS);
        assert!(matches!(d.take(), Changes::Runs(r) if r.len() == 2));
    }

    #[test]
    fn a_small_table_ends_its_last_run_at_its_size() {
        let mut d = Dirty::new(8);
        d.take();
        d.mark(7);
        assert_eq!(d.take(), Changes::All);
        let mut d = Dirty::new(8 * PAGE_BUCKETS * 64);
        d.take();
        d.mark(8 * PAGE_BUCKETS * 64 - 1);
        let last = (8 * 64 - 1) * PAGE_BUCKETS..8 * 64 * PAGE_BUCKETS;
        assert_eq!(d.take(), Changes::Runs(std::iter::once(last).collect()));
    }

    #[test]
    fn runs_costing_more_than_the_table_become_the_whole_table() {
        // 64 pages (256 KiB): every 16th page marked is four runs (cheaper than the table),
        // every 8th page merges into one run of 57 pages, which with its call costs more.
        let mut d = tracked(64);
        for p in (0..64).step_by(16) {
            d.mark(p * PAGE_BUCKETS);
        }
        assert!(matches!(d.take(), Changes::Runs(r) if r.len() == 4));
        for p in (0..64).step_by(8) {
            d.mark(p * PAGE_BUCKETS);
        }
        assert_eq!(d.take(), Changes::All);
    }
}
