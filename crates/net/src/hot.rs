//! KVCG's hot/cold split (docs/hotcold.md): a router that learns which keys take most of
//! the reads, so workers answer GETs of those at once instead of holding them for the batch
//! interval C.
//!
//! The model is a histogram of GET keys over [`BINS`] bins of the hash space, as in KVCG.
//! Each worker counts the keys it reads in a histogram of its own (no shared cache line is
//! written on the read path); every epoch a background thread decays
//! the counts, picks the bins far busier than the mean, keeps as many of the busiest as the
//! hot budget allows (estimated from the store's bytes per bin), and swaps the new hot set
//! in whole. Reads of a hot key are answered by the same engine and store as every other
//! request (hkv's values always live in host memory; only the index may be on a device), so
//! there is no second copy to keep coherent: an epoch change has no update to replay, and a
//! write acknowledged on one connection is what every later read sees, hot or cold.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Bins over the hash space (KVCG's figure).
pub(crate) const BINS: usize = 10_000;
/// A bin is hot only if its count is this many times the mean: a uniform load has none.
const HOT_FACTOR: u64 = 4;
/// A bin becomes hot with at least this many samples in its decayed count, and stays hot
/// while it keeps [`STAY_SAMPLES`] (hysteresis: a key read steadily but slowly does not
/// flap in and out).
const MIN_SAMPLES: u32 = 8;
const STAY_SAMPLES: u32 = 2;

/// The bins whose keys are hot, as one immutable set per epoch.
#[derive(Debug, Default)]
pub(crate) struct HotSet {
    bits: Vec<u64>,
    pub bins: usize,
}

impl HotSet {
    fn new(hot: &[usize]) -> HotSet {
        let mut bits = vec![0u64; BINS.div_ceil(64)];
        for &b in hot {
            bits[b / 64] |= 1 << (b % 64);
        }
        HotSet {
            bits,
            bins: hot.len(),
        }
    }

    fn has(&self, bin: usize) -> bool {
        self.bins > 0 && self.bits[bin / 64] & (1 << (bin % 64)) != 0
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        if self.bins == 0 {
            return false;
        }
        let b = bin_of(hkv_engine::key_hash(key));
        self.bits[b / 64] & (1 << (b % 64)) != 0
    }
}

fn bin_of(hash: u64) -> usize {
    ((u128::from(hash) * BINS as u128) >> 64) as usize
}

/// The router: sampled counts and the current hot set.
#[derive(Debug)]
pub struct Router {
    /// One histogram per worker, written only by it.
    counts: Vec<Vec<AtomicU32>>,
    hot: RwLock<Arc<HotSet>>,
    /// Bytes of items the hot set may cover (`--hot-cache-mb`).
    budget: u64,
    pub(crate) epochs: AtomicU64,
    /// Reads answered on the hot path, and the passes that answered them.
    pub(crate) hot_gets: AtomicU64,
    pub(crate) express_passes: AtomicU64,
    /// `HKV_ROUTER_CHURN=1` (tests): every other epoch publishes an empty hot set, so the
    /// model changes every epoch and a checker sees reads cross many changes.
    churn: bool,
    retrains: AtomicU64,
    /// The set the model last chose (what churn alternates with nothing).
    learned: std::sync::Mutex<Arc<HotSet>>,
}

impl Router {
    pub fn new(budget_bytes: u64, workers: usize) -> Router {
        Router {
            counts: (0..workers.max(1))
                .map(|_| (0..BINS).map(|_| AtomicU32::new(0)).collect())
                .collect(),
            hot: RwLock::new(Arc::new(HotSet::default())),
            budget: budget_bytes,
            epochs: AtomicU64::new(0),
            hot_gets: AtomicU64::new(0),
            express_passes: AtomicU64::new(0),
            churn: std::env::var("HKV_ROUTER_CHURN").as_deref() == Ok("1"),
            retrains: AtomicU64::new(0),
            learned: std::sync::Mutex::new(Arc::new(HotSet::default())),
        }
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Counts one read of `key` by `worker`.
    #[cfg(test)]
    pub(crate) fn sample(&self, worker: usize, key: &[u8]) {
        self.sample_hash(worker, hkv_engine::key_hash(key));
    }

    /// [`Router::sample`] of a key whose [`hkv_engine::key_hash`] is `hash`.
    pub(crate) fn sample_hash(&self, worker: usize, hash: u64) {
        let b = bin_of(hash);
        let h = &self.counts[worker % self.counts.len()];
        h[b].fetch_add(1, Ordering::Relaxed);
    }

    /// The hot set now in force.
    pub(crate) fn current(&self) -> Arc<HotSet> {
        Arc::clone(&self.hot.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// One epoch: decays every count by a quarter (so the model follows the load), chooses
    /// the new hot set and swaps it in if it changed. `items` and `bytes` are the
    /// store's, for the budget's bytes-per-bin estimate. Returns the hot bins.
    pub fn retrain(&self, items: u64, bytes: u64) -> usize {
        let mut counts = vec![0u32; BINS];
        for h in &self.counts {
            for (sum, c) in counts.iter_mut().zip(h) {
                let v = c.load(Ordering::Relaxed);
                c.fetch_sub(v - v / 4 * 3, Ordering::Relaxed);
                *sum = sum.saturating_add(v);
            }
        }
        let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        let mean = total / BINS as u64;
        let was = Arc::clone(&self.learned.lock().unwrap_or_else(|e| e.into_inner()));
        let mut hot: Vec<usize> = (0..BINS)
            .filter(|&b| {
                let floor = if was.has(b) {
                    STAY_SAMPLES
                } else {
                    MIN_SAMPLES
                };
                u64::from(counts[b]) >= (HOT_FACTOR * mean).max(u64::from(floor))
            })
            .collect();
        hot.sort_unstable_by_key(|&b| std::cmp::Reverse(counts[b]));
        // Each bin holds about 1/BINS of the items: keep the busiest that fit the budget.
        let per_bin = if items == 0 {
            0
        } else {
            bytes / BINS as u64 + 1
        };
        let fit = self
            .budget
            .checked_div(per_bin)
            .map_or(hot.len(), |f| f as usize);
        hot.truncate(fit);
        hot.sort_unstable();
        let learned = Arc::new(HotSet::new(&hot));
        *self.learned.lock().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&learned);
        let publish = if self.churn && self.retrains.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
            Arc::new(HotSet::default())
        } else {
            learned
        };
        let mut cur = self.hot.write().unwrap_or_else(|e| e.into_inner());
        let same = cur.bins == publish.bins && hot.iter().all(|&b| cur.has(b) == publish.has(b));
        if !same {
            *cur = publish;
            self.epochs.fetch_add(1, Ordering::Relaxed);
        }
        hot.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_load_makes_its_keys_hot_and_a_uniform_one_none() {
        let r = Router::new(1 << 20, 2);
        for i in 0..50_000u32 {
            r.sample(0, format!("cold:{i}").as_bytes());
        }
        for _ in 0..2_000 {
            r.sample(1, b"hot:a");
            r.sample(0, b"hot:b");
        }
        assert_eq!(r.retrain(1000, 100_000), 2);
        let set = r.current();
        assert!(set.contains(b"hot:a") && set.contains(b"hot:b"));
        assert!(!set.contains(b"cold:1"));
        assert_eq!(r.epochs.load(Ordering::Relaxed), 1);

        // The load moves to uniform: the counts decay and the hot set empties.
        let r2 = Router::new(1 << 20, 2);
        for i in 0..100_000u32 {
            r2.sample(1, format!("k{i}").as_bytes());
        }
        assert_eq!(r2.retrain(100_000, 10 << 20), 0);
        assert!(!r2.current().contains(b"k1"));
    }

    #[test]
    fn the_budget_bounds_the_hot_set() {
        // 100 MB of items: 10 KB per bin; a 25 KB budget keeps the two busiest bins.
        let r = Router::new(25_000, 2);
        for (i, n) in [(0u32, 5000), (1, 4000), (2, 3000), (3, 2000)] {
            for _ in 0..n {
                r.sample(0, format!("hot:{i}").as_bytes());
            }
        }
        assert_eq!(r.retrain(1_000_000, 100_000_000), 2);
        let set = r.current();
        assert!(set.contains(b"hot:0") && set.contains(b"hot:1"));
        assert!(!set.contains(b"hot:3"));
    }
}
