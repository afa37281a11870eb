//! What a device call costs beyond its own time where the device is the host's own cores
//! (PoCL) or shares their caches (an integrated GPU): the runtime's threads wake and spin
//! on the cores the partition's thread needs and leave its caches cold, so the batch's CPU
//! work around the call (hashing, MM, WR, composing replies) runs slower. `hkv-bench
//! placement` measured that work 10-40% slower under device placements, a cost no task's
//! own timing shows, and the largest part of the model's error before this term.
//!
//! The model: a batch's time outside its timed index tasks, per request, is `base + k * d`,
//! `d` being the device's time per request in that batch. `base` is the faded mean over
//! batches without a device call; `k` is fitted by least squares through the origin of the
//! excess over `base` against `d`. A device call predicted at `t` then costs `t * (1 + k)`
//! wherever the model chooses a processor.

use crate::policy::Proc;

/// Weight kept by old samples per new one (as the task lines: about the last 1000 count).
const FADE: f64 = 0.999;
/// Batches with less device time than this say too little about `k` (timer resolution,
/// a single tiny call).
const MIN_DEVICE_NS: f64 = 2_000.0;
/// `k` is bounded: a batch disturbed by something else (a page fault storm, a descheduled
/// thread) must not make the device look unusable for the next thousand batches.
const MAX_K: f64 = 4.0;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Aftermath {
    /// The current batch: its timed index tasks and, of those, the device's.
    index_ns: f64,
    device_ns: f64,
    /// Faded count and sum of the rest per request of batches without a device call.
    base_n: f64,
    base_sum: f64,
    /// Faded sums of d * d and d * excess over batches with device calls.
    sxx: f64,
    sxy: f64,
}

impl Aftermath {
    /// A batch starts: nothing of it is timed yet.
    pub fn begin(&mut self) {
        self.index_ns = 0.0;
        self.device_ns = 0.0;
    }

    /// A timed index task of the current batch.
    pub fn task(&mut self, proc: Proc, ns: f64) {
        self.index_ns += ns;
        if proc == Proc::Device {
            self.device_ns += ns;
        }
    }

    /// The current batch of `requests` ended after `batch_ns` in all.
    pub fn end(&mut self, requests: usize, batch_ns: f64) {
        if requests == 0 {
            return;
        }
        let n = requests as f64;
        let rest = (batch_ns - self.index_ns).max(0.0) / n;
        if self.device_ns == 0.0 {
            self.base_n = self.base_n * FADE + 1.0;
            self.base_sum = self.base_sum * FADE + rest;
        } else if self.device_ns >= MIN_DEVICE_NS && self.base_n > 0.0 {
            let d = self.device_ns / n;
            let excess = rest - self.base();
            self.sxx = self.sxx * FADE + d * d;
            self.sxy = self.sxy * FADE + d * excess;
        }
    }

    /// Time outside the index tasks per request, without device calls (ns).
    pub fn base(&self) -> f64 {
        if self.base_n > 0.0 {
            self.base_sum / self.base_n
        } else {
            0.0
        }
    }

    /// The CPU time a device call takes from the rest of its batch, as a share of its own.
    pub fn k(&self) -> f64 {
        if self.sxx > 0.0 {
            (self.sxy / self.sxx).clamp(0.0, MAX_K)
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of `n` requests with `cpu` and `device` ns of index tasks and `rest` ns of
    /// everything else.
    fn batch(a: &mut Aftermath, n: usize, cpu: f64, device: f64, rest: f64) {
        a.begin();
        a.task(Proc::Cpu, cpu);
        if device > 0.0 {
            a.task(Proc::Device, device);
        }
        a.end(n, cpu + device + rest);
    }

    #[test]
    fn device_calls_that_slow_the_rest_of_their_batch_are_charged_for_it() {
        let mut a = Aftermath::default();
        for _ in 0..200 {
            batch(&mut a, 256, 5_000.0, 0.0, 256.0 * 200.0);
        }
        assert!((a.base() - 200.0).abs() < 1e-6);
        assert_eq!(a.k(), 0.0, "no device call yet: nothing known");
        // The rest grows by a tenth of the device's time, whatever that time is.
        for i in 0..50 {
            let device = 100_000.0 + 10_000.0 * (i % 5) as f64;
            batch(&mut a, 256, 1_000.0, device, 256.0 * 200.0 + device / 10.0);
        }
        assert!((a.k() - 0.1).abs() < 0.01, "k {}", a.k());
        // Device-free batches keep base current and leave k alone.
        for _ in 0..100 {
            batch(&mut a, 256, 5_000.0, 0.0, 256.0 * 200.0);
        }
        assert!((a.k() - 0.1).abs() < 0.01, "k {}", a.k());
    }

    #[test]
    fn a_device_that_costs_nothing_else_has_no_aftermath_and_outliers_are_bounded() {
        let mut a = Aftermath::default();
        for _ in 0..100 {
            batch(&mut a, 64, 1_000.0, 0.0, 64.0 * 150.0);
        }
        for _ in 0..100 {
            batch(&mut a, 64, 0.0, 50_000.0, 64.0 * 140.0);
        }
        assert_eq!(a.k(), 0.0, "a faster rest is not a negative cost");
        let mut b = Aftermath::default();
        batch(&mut b, 64, 1_000.0, 0.0, 64.0 * 150.0);
        batch(&mut b, 64, 0.0, 5_000.0, 1e9);
        assert_eq!(b.k(), MAX_K);
        // Tiny device calls say nothing: below the floor they are not fitted.
        let mut c = Aftermath::default();
        batch(&mut c, 64, 1_000.0, 0.0, 64.0 * 150.0);
        batch(&mut c, 64, 0.0, 500.0, 1e6);
        assert_eq!(c.k(), 0.0);
    }
}
