//! `--busy-poll-us`: a bounded, adaptive spin before a worker sleeps. A request-response
//! client's next request often comes within microseconds of its reply; catching it without
//! going to sleep saves the wake-up. Spinning costs CPU whether or not anything comes, so
//! the window shrinks while spins find nothing and grows back while they pay.

use std::time::Duration;

pub(super) struct Spin {
    max: Duration,
    window: Duration,
    /// Sleeps since the window collapsed to nothing; every so often the full window is
    /// tried again, in case the load changed.
    idle_sleeps: u32,
}

/// After this many sleeps with no window, one full spin is tried.
const RETRY_EVERY: u32 = 64;
const MIN_WINDOW: Duration = Duration::from_micros(2);

impl Spin {
    pub fn new(max: Duration) -> Spin {
        Spin {
            max,
            window: max,
            idle_sleeps: 0,
        }
    }

    /// How long to spin before this sleep (zero: do not).
    pub fn window(&mut self) -> Duration {
        if self.max.is_zero() {
            return Duration::ZERO;
        }
        if self.window.is_zero() {
            self.idle_sleeps += 1;
            if self.idle_sleeps < RETRY_EVERY {
                return Duration::ZERO;
            }
            self.idle_sleeps = 0;
            return self.max;
        }
        self.window
    }

    /// Work arrived while spinning.
    pub fn hit(&mut self) {
        self.window = (self.window.max(MIN_WINDOW) * 2).min(self.max);
    }

    /// The spin ended with nothing.
    pub fn miss(&mut self) {
        self.window /= 2;
        if self.window < MIN_WINDOW {
            self.window = Duration::ZERO;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_while_idle_and_grows_while_it_pays() {
        let max = Duration::from_micros(64);
        let mut s = Spin::new(max);
        assert_eq!(s.window(), max);
        for _ in 0..10 {
            s.miss();
        }
        // Collapsed: no spinning until the periodic retry.
        let spins = (0..RETRY_EVERY).filter(|_| !s.window().is_zero()).count();
        assert_eq!(spins, 1);
        s.hit();
        assert!(!s.window().is_zero());
        for _ in 0..10 {
            s.hit();
        }
        assert_eq!(s.window(), max);
    }

    #[test]
    fn zero_means_never() {
        let mut s = Spin::new(Duration::ZERO);
        s.hit();
        assert!(s.window().is_zero());
    }
}
