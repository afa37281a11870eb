//! The engine's side of the batch scheduler (Mega-KV §5): what each worker's batches
//! tell it, and how long a worker waits before its next batch.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use super::{Engine, Scratch};
use crate::partition::BatchTiming;
use crate::schedule::{Arrived, Sample, ScheduleStats, Scheduler};

/// A caller tells the scheduler of its batches at least every this many (sooner when one
/// was timed): each telling takes the scheduler's lock, which every worker shares.
const OBSERVE_AT_MOST_EVERY: u64 = 16;

impl Engine {
    fn scheduler(&self) -> MutexGuard<'_, Scheduler> {
        self.scheduler
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn observe(&self, t: &BatchTiming, arrived: &mut Arrived) {
        arrived.batches += 1;
        arrived.reads += t.reads;
        arrived.writes += t.writes;
        if !t.sampled && arrived.batches < OBSERVE_AT_MOST_EVERY {
            return;
        }
        let sample = t.sampled.then_some(Sample {
            reads: t.timed_reads,
            search_us: t.search_ns as f64 / 1000.0,
            writes: t.writes,
            write_us: t.write_ns as f64 / 1000.0,
        });
        self.tell_scheduler(arrived, sample);
    }

    /// A caller about to wait for work reports the batches it has not told the scheduler
    /// of yet, so its figures (`stats hkv`) do not lag behind an idle server.
    pub fn idle(&self, s: &mut Scratch) {
        if s.arrived.batches > 0 {
            self.tell_scheduler(&mut s.arrived, None);
        }
    }

    fn tell_scheduler(&self, arrived: &mut Arrived, sample: Option<Sample>) {
        // The arrival rate is counted over 100 ms windows: a coarse clock (a few ms, and a
        // fifth of the cost of a precise one) does.
        let now_us = crate::clock::coarse_us().saturating_sub(self.coarse_epoch_us) as f64;
        let mut s = self.scheduler();
        s.observe_since(now_us, std::mem::take(arrived), sample);
        // C below a microsecond: a batch every loop pass, no period for writes to wait for.
        self.periodic
            .store(s.interval_us() >= 1.0, Ordering::Relaxed);
    }

    /// How long a worker whose last batch started at `last_launch` should keep collecting
    /// requests before launching the next (zero: launch now, as whenever C is below a
    /// microsecond).
    pub fn batch_wait(&self, last_launch: Instant) -> Duration {
        if !self.periodic.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        let now_us = self.epoch.elapsed().as_secs_f64() * 1e6;
        let last_us = last_launch
            .saturating_duration_since(self.epoch)
            .as_secs_f64()
            * 1e6;
        Duration::from_secs_f64(self.scheduler().wait_us(last_us, now_us) / 1e6)
    }

    /// The scheduler's interval, fitted costs and observed load.
    pub fn schedule_stats(&self) -> ScheduleStats {
        self.scheduler().stats()
    }

    /// The configured bounds of C (microseconds).
    pub fn schedule_bounds(&self) -> (f64, f64) {
        let c = self.scheduler().config();
        (c.min_us, c.max_us)
    }
}
