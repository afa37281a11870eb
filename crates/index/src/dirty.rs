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

/// Runs above this count are sent as the whole table: one large copy costs less than
/// hundreds of small ones (each a driver call).
const MAX_RUNS: usize = 256;

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
            let mut runs: Vec<Range<u32>> = Vec::new();
            for &p in &self.pages {
                let start = p * PAGE_BUCKETS;
                let end = (start + PAGE_BUCKETS).min(self.buckets);
                match runs.last_mut() {
                    Some(r) if r.end == start => r.end = end,
                    _ => runs.push(start..end),
                }
            }
            if runs.len() > MAX_RUNS {
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

    #[test]
    fn starts_with_everything_then_tracks_pages() {
        let mut d = Dirty::new(1024);
        d.mark(5);
        assert_eq!(d.take(), Changes::All);
        assert_eq!(d.take(), Changes::Nothing);
        d.mark(70);
        d.mark(64);
        d.mark(1000);
        d.mark(130);
        assert_eq!(d.take(), Changes::Runs(vec![64..192, 960..1024]));
        assert_eq!(d.take(), Changes::Nothing);
        d.mark_all();
        d.mark(3);
        assert_eq!(d.take(), Changes::All);
    }

    #[test]
    fn a_small_table_ends_its_last_page_at_its_size() {
        let mut d = Dirty::new(8);
        d.take();
        d.mark(7);
        assert_eq!(d.take(), Changes::Runs(std::iter::once(0..8).collect()));
    }

    #[test]
    fn too_many_runs_become_the_whole_table() {
        let buckets = PAGE_BUCKETS * 2 * (MAX_RUNS as u32 + 1);
        let mut d = Dirty::new(buckets);
        d.take();
        for p in (0..buckets / PAGE_BUCKETS).step_by(2) {
            d.mark(p * PAGE_BUCKETS);
        }
        assert_eq!(d.take(), Changes::All);
        d.mark(0);
        assert_eq!(
            d.take(),
            Changes::Runs(std::iter::once(0..PAGE_BUCKETS).collect())
        );
    }
}
