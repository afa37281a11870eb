//! Which batches and passes are timed: one in n, drawn at random. A fixed position (every
//! n-th) lines up with any load that repeats with a period dividing n: a client alternating
//! a get batch and a set batch would never have its reads timed.

/// A xorshift32 generator drawing "one in n" (statistics only: not for anything a client
/// could exploit).
#[derive(Clone, Copy, Debug)]
pub struct Sampler(u32);

impl Default for Sampler {
    fn default() -> Self {
        Sampler(0x9E37_79B9)
    }
}

impl Sampler {
    /// A sampler whose sequence differs from others seeded otherwise (0 acts as default).
    pub fn seeded(seed: u32) -> Sampler {
        Sampler(if seed == 0 { 0x9E37_79B9 } else { seed })
    }

    /// True with probability 1/`n` (`n` a power of two).
    #[inline]
    pub fn one_in(&mut self, n: u64) -> bool {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        u64::from(x) & (n - 1) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_one_in_n_without_a_period_of_n() {
        let mut s = Sampler::default();
        let draws: Vec<bool> = (0..80_000).map(|_| s.one_in(8)).collect();
        let hits = draws.iter().filter(|&&d| d).count();
        assert!((9_000..11_000).contains(&hits), "{hits}");
        // A load alternating two kinds of batch gets both kinds timed.
        let odd = draws.iter().skip(1).step_by(2).filter(|&&d| d).count();
        assert!((4_000..6_000).contains(&odd), "{odd}");
    }
}
