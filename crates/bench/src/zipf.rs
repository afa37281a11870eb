//! Key choosers: uniform, and the Zipf generator of Gray et al. ("Quickly generating
//! billion-record synthetic databases", SIGMOD 1994) that Mega-KV and YCSB use. Ranks are
//! scrambled by a hash so the hottest keys are spread over the key space (and partitions),
//! as YCSB's "scrambled zipfian" does.

/// xorshift64*: fast, and good enough to pick keys.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[derive(Clone, Debug)]
pub enum KeyChooser {
    Uniform {
        n: u64,
    },
    Zipf {
        n: u64,
        theta: f64,
        alpha: f64,
        zetan: f64,
        eta: f64,
    },
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl KeyChooser {
    pub fn uniform(n: u64) -> KeyChooser {
        KeyChooser::Uniform { n }
    }

    /// `theta` in (0, 1): 0.99 is the papers' skew.
    pub fn zipf(n: u64, theta: f64) -> KeyChooser {
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2, theta);
        KeyChooser::Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    /// A key id in [0, n).
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        match *self {
            KeyChooser::Uniform { n } => rng.below(n),
            KeyChooser::Zipf {
                n,
                theta,
                alpha,
                zetan,
                eta,
            } => {
                let u = rng.next_f64();
                let uz = u * zetan;
                let rank = if uz < 1.0 {
                    0
                } else if uz < 1.0 + 0.5f64.powf(theta) {
                    1
                } else {
                    ((n as f64) * (eta * u - eta + 1.0).powf(alpha)) as u64
                };
                scramble(rank.min(n - 1), n)
            }
        }
    }
}

/// FNV-1a over the rank's bytes, reduced to [0, n).
fn scramble(rank: u64, n: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in rank.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_skewed_and_uniform_is_not() {
        let n = 100_000;
        let mut rng = Rng::new(1);
        let z = KeyChooser::zipf(n, 0.99);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..200_000 {
            *counts.entry(z.next(&mut rng)).or_insert(0u32) += 1;
        }
        let mut c: Vec<u32> = counts.values().copied().collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        // With theta 0.99 over 1e5 keys the hottest key takes ~8% of requests.
        assert!(c[0] > 200_000 / 20, "hottest key only {}", c[0]);
        let top100: u32 = c.iter().take(100).sum();
        assert!(top100 > 200_000 / 3);
        let u = KeyChooser::uniform(n);
        let mut hot = 0;
        for _ in 0..200_000 {
            if u.next(&mut rng) == 0 {
                hot += 1;
            }
        }
        assert!(hot < 20);
    }
}
