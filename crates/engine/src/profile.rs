//! The workload profile of one partition over a sliding window (DIDO §III-A's inputs to the
//! cost model): shares of GET, SET and DELETE, average key and value sizes, batch size, and
//! skew. Every figure decays by half every [`HALF_LIFE`] requests, so it follows the
//! workload when it moves (whatever the batch size). Reported summed over partitions in `stats hkv` (`profile_*`).

use hkv_index::KeyHash;
use hkv_types::{Op, Request};

/// One batch in this many has its requests counted (and the counts weighted by this): the
/// shares and sizes are ratios, unbiased by counting whole batches, and a pass over every
/// batch's 232-byte requests cost ~5% of a YCSB-A run. Every batch decays the figures and
/// feeds the skew sketch, which reads only the hashes.
pub const OBSERVE_EVERY: u64 = 4;
/// Requests after which an old request's weight has halved.
const HALF_LIFE: f64 = 8192.0;
/// The figures decay once this many requests have come since they last did (a `powf` and
/// a pass over the sketch per batch was a tenth of a small batch's engine time); a
/// request counted between two decays is at most this many requests early, 1/16 of a
/// half-life.
const DECAY_EVERY: u64 = 512;
/// One request in this many (chosen by its key's hash, so a key is always or never
/// sampled) feeds the skew estimate: 512 samples per half-life (every 8th request into
/// 64 counters cost 8% of the GET path).
const SAMPLE_EVERY: u32 = 16;
/// Counters of the heavy-hitter sketch (space-saving): the keys it can tell apart.
const SLOTS: usize = 32;
/// The skew figure: the share of sampled requests that go to the top this many keys.
const TOP: usize = 8;

#[derive(Clone, Debug, Default)]
pub struct Profile {
    gets: f64,
    sets: f64,
    deletes: f64,
    others: f64,
    key_bytes: f64,
    value_bytes: f64,
    batches: f64,
    /// Space-saving heavy hitters: (key hash, count, over-estimate), decayed with the rest.
    hitters: Vec<(u64, f64, f64)>,
    sampled: f64,
    /// Requests since the figures last decayed.
    undecayed: u64,
}

/// What `stats hkv` shows, for the whole server.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProfileReport {
    pub get_share: f64,
    pub set_share: f64,
    pub delete_share: f64,
    pub avg_key_bytes: f64,
    pub avg_value_bytes: f64,
    pub avg_batch: f64,
    /// Share of requests going to the [`TOP`] most requested keys of each partition (a
    /// lower bound): near 0 for a uniform load over many keys, near 1 for a few hot keys.
    pub top_key_share: f64,
}

impl Profile {
    /// Adds one batch (the requests `which` of `reqs`); its requests are counted `weight`
    /// times (0: only the skew sketch sees it; see [`OBSERVE_EVERY`]).
    pub fn observe(
        &mut self,
        reqs: &[Request<'_>],
        hashes: &[KeyHash],
        which: &[u32],
        weight: u64,
    ) {
        if which.is_empty() {
            return;
        }
        self.batches += 1.0;
        self.undecayed += which.len() as u64;
        if self.undecayed >= DECAY_EVERY {
            self.decay();
        }
        for &i in which {
            let h = &hashes[i as usize];
            if sampled(h) {
                self.sample((u64::from(h.sig) << 32) | u64::from(h.lo));
            }
        }
        if weight == 0 {
            return;
        }
        self.count(reqs, which, weight);
    }

    /// Ages every figure by the requests seen since the last time.
    fn decay(&mut self) {
        let keep = 0.5f64.powf(self.undecayed as f64 / HALF_LIFE);
        self.undecayed = 0;
        self.gets *= keep;
        self.sets *= keep;
        self.deletes *= keep;
        self.others *= keep;
        self.key_bytes *= keep;
        self.value_bytes *= keep;
        self.batches *= keep;
        self.sampled *= keep;
        for h in &mut self.hitters {
            h.1 *= keep;
            h.2 *= keep;
        }
    }

    /// Adds the batch's operations and sizes, `weight` times each.
    fn count(&mut self, reqs: &[Request<'_>], which: &[u32], weight: u64) {
        // Counted in integers and added once: a floating-point add per request and field
        // is a dependency chain the whole batch waits on.
        let (mut gets, mut sets, mut deletes, mut others) = (0u64, 0u64, 0u64, 0u64);
        let (mut key_bytes, mut value_bytes) = (0u64, 0u64);
        for &i in which {
            let r = &reqs[i as usize];
            match r.op {
                Op::Get | Op::Gets => gets += 1,
                Op::Set | Op::Add | Op::Replace | Op::Append | Op::Prepend | Op::Cas => {
                    sets += 1;
                    value_bytes += r.value.len() as u64;
                }
                Op::Delete => deletes += 1,
                _ => others += 1,
            }
            key_bytes += r.key.len() as u64;
        }
        let w = weight as f64;
        self.gets += gets as f64 * w;
        self.sets += sets as f64 * w;
        self.deletes += deletes as f64 * w;
        self.others += others as f64 * w;
        self.key_bytes += key_bytes as f64 * w;
        self.value_bytes += value_bytes as f64 * w;
    }

    /// Space-saving: a known key's counter grows; a new one replaces the smallest counter
    /// and inherits its count, which is remembered as that counter's possible over-count.
    fn sample(&mut self, tag: u64) {
        self.sampled += 1.0;
        // One pass finds the key or, failing that, the first smallest counter (counts are
        // finite and never NaN, so `<` orders them): most samples of a spread-out load are
        // new keys, and two scans of the sketch were most of the profile's cost.
        let mut min = 0;
        let mut min_count = f64::INFINITY;
        for (i, h) in self.hitters.iter_mut().enumerate() {
            if h.0 == tag {
                h.1 += 1.0;
                return;
            }
            if h.1 < min_count {
                min_count = h.1;
                min = i;
            }
        }
        if self.hitters.len() < SLOTS {
            self.hitters.push((tag, 1.0, 0.0));
            return;
        }
        if let Some(h) = self.hitters.get_mut(min) {
            *h = (tag, min_count + 1.0, min_count);
        }
    }

    pub fn requests(&self) -> f64 {
        self.gets + self.sets + self.deletes + self.others
    }

    /// The report of several partitions together (weighted by their requests).
    pub fn report<'a>(parts: impl IntoIterator<Item = &'a Profile>) -> ProfileReport {
        let mut sum = Profile::default();
        let mut top = 0.0;
        for p in parts {
            sum.gets += p.gets;
            sum.sets += p.sets;
            sum.deletes += p.deletes;
            sum.others += p.others;
            sum.key_bytes += p.key_bytes;
            sum.value_bytes += p.value_bytes;
            sum.batches += p.batches;
            sum.sampled += p.sampled;
            // Guaranteed counts (count less possible over-count): a lower bound, so a
            // uniform load does not look skewed.
            let mut counts: Vec<f64> = p.hitters.iter().map(|h| h.1 - h.2).collect();
            counts.sort_unstable_by(|a, b| b.total_cmp(a));
            // Keys live in one partition each: the overall top keys are among the
            // partitions' tops; summing each one's top is an upper bound, tight when one
            // partition holds the hot keys.
            top += counts.iter().take(TOP).sum::<f64>();
        }
        let n = sum.requests();
        if n == 0.0 {
            return ProfileReport::default();
        }
        ProfileReport {
            get_share: sum.gets / n,
            set_share: sum.sets / n,
            delete_share: sum.deletes / n,
            avg_key_bytes: sum.key_bytes / n,
            avg_value_bytes: if sum.sets > 0.0 {
                sum.value_bytes / sum.sets
            } else {
                0.0
            },
            avg_batch: n / sum.batches.max(1.0),
            top_key_share: if sum.sampled > 0.0 {
                (top / sum.sampled).min(1.0)
            } else {
                0.0
            },
        }
    }
}

/// The signature's low bits are as good as random and fixed per key.
fn sampled(h: &KeyHash) -> bool {
    h.sig & (SAMPLE_EVERY - 1) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use hkv_index::hash_key;

    fn batch(keys: &[Vec<u8>], set_every: Option<usize>) -> Vec<Request<'_>> {
        keys.iter()
            .enumerate()
            .map(|(i, k)| match set_every {
                Some(n) if i % n == 0 => Request::set(k, b"0123456789"),
                _ => Request::get(k),
            })
            .collect()
    }

    fn run(p: &mut Profile, keys: &[Vec<u8>], set_every: Option<usize>, per_batch: usize) {
        for chunk in keys.chunks(per_batch) {
            let reqs = batch(chunk, set_every);
            let hashes: Vec<KeyHash> = reqs.iter().map(|r| hash_key(r.key)).collect();
            let which: Vec<u32> = (0..reqs.len() as u32).collect();
            p.observe(&reqs, &hashes, &which, 1);
        }
    }

    #[test]
    fn shares_sizes_and_batches_follow_the_load() {
        let keys: Vec<Vec<u8>> = (0..20_000)
            .map(|i| format!("key{i:05}").into_bytes())
            .collect();
        let mut p = Profile::default();
        run(&mut p, &keys, Some(4), 100);
        let r = Profile::report([&p]);
        assert!((r.set_share - 0.25).abs() < 0.02, "{r:?}");
        assert!((r.get_share - 0.75).abs() < 0.02, "{r:?}");
        assert!((r.avg_key_bytes - 8.0).abs() < 0.01, "{r:?}");
        assert!((r.avg_value_bytes - 10.0).abs() < 0.01, "{r:?}");
        assert!((r.avg_batch - 100.0).abs() < 1.0, "{r:?}");
        // Uniform over 20k keys: the top keys take almost nothing.
        assert!(r.top_key_share < 0.1, "{r:?}");
        // The load moves to four hot keys (ones the sketch samples), all reads: the
        // profile follows within a few half-lives.
        let hot: Vec<Vec<u8>> = (0..)
            .map(|i| format!("hot{i}").into_bytes())
            .filter(|k| sampled(&hash_key(k)))
            .take(4)
            .collect();
        let load: Vec<Vec<u8>> = hot.iter().cycle().take(40_000).cloned().collect();
        run(&mut p, &load, None, 100);
        let r = Profile::report([&p]);
        assert!(r.get_share > 0.95, "{r:?}");
        assert!(r.top_key_share > 0.9, "{r:?}");
    }

    /// The space-saving sketch as it is defined: find the key, else take a free counter,
    /// else replace the first smallest counter (two scans; the sketch does one).
    fn model_sample(hitters: &mut Vec<(u64, f64, f64)>, tag: u64) {
        if let Some(h) = hitters.iter_mut().find(|h| h.0 == tag) {
            h.1 += 1.0;
            return;
        }
        if hitters.len() < SLOTS {
            hitters.push((tag, 1.0, 0.0));
            return;
        }
        if let Some(min) = hitters.iter_mut().min_by(|a, b| a.1.total_cmp(&b.1)) {
            *min = (tag, min.1 + 1.0, min.1);
        }
    }

    proptest::proptest! {
        #[test]
        fn the_sketch_counts_as_space_saving_does(
            tags in proptest::collection::vec(0u64..80, 0..600),
            decay_at in proptest::collection::vec(0usize..600, 0..4),
        ) {
            let mut p = Profile::default();
            let mut model: Vec<(u64, f64, f64)> = Vec::new();
            for (i, &tag) in tags.iter().enumerate() {
                if decay_at.contains(&i) {
                    p.undecayed = 3000;
                    p.decay();
                    let keep = 0.5f64.powf(3000.0 / HALF_LIFE);
                    for h in &mut model {
                        h.1 *= keep;
                        h.2 *= keep;
                    }
                }
                p.sample(tag);
                model_sample(&mut model, tag);
                proptest::prop_assert_eq!(&p.hitters, &model);
            }
        }
    }
}
