//! The periodic batch scheduler of Mega-KV §5: how long to collect requests before launching
//! a batch.
//!
//! The engine fits the processing time of its batches as `T = k * x + b` for searches and for
//! writes (x: operations in the batch) from its own measurements, and watches the arrival rate
//! `V` and the GET share `p_S`. With inserts and deletes launched every `n` intervals, a batch
//! collected over `C` must be processed within the next interval (Mega-KV Eq. 1:
//! `T_S + T_max <= 2C`), which gives the smallest usable `C` (Eq. 2):
//!
//! ```text
//!     C >= (2 b_S + b_I) / (2 - 2 k_S p_S V - n k_I (1 - p_S) V)
//! ```
//!
//! A GET then waits at most `C` to be launched and is answered within about `3C`. `C` is kept
//! within the configured bounds (`--batch-interval-us MIN..MAX`); where the device cannot keep
//! up at all (the denominator is not positive) `C` goes to the upper bound. On the CPU backend
//! `b` is well under a microsecond, so with a lower bound of 0 a batch is launched on every
//! event-loop pass; on a device the fixed launch and copy cost makes `C` periodic.
//!
//! Everything here runs in model time (microseconds passed in by the caller), so it is tested
//! by simulation without sleeping.

/// `T = k * x + b` by least squares over recent batches, older ones fading out.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinearFit {
    n: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
}

/// Weight kept by the fit's old samples per new one: about the last 1000 batches count.
const FADE: f64 = 0.999;

impl LinearFit {
    /// One batch of `x` operations that took `t` microseconds.
    pub fn record(&mut self, x: f64, t: f64) {
        self.record_weighted(x, t, 1.0);
    }

    /// A sample that counts `w` times as much as [`LinearFit::record`]'s.
    pub fn record_weighted(&mut self, x: f64, t: f64, w: f64) {
        self.n = self.n * FADE + w;
        self.sx = self.sx * FADE + w * x;
        self.sy = self.sy * FADE + w * t;
        self.sxx = self.sxx * FADE + w * x * x;
        self.sxy = self.sxy * FADE + w * x * t;
    }

    pub fn samples(&self) -> f64 {
        self.n
    }

    /// (k, b): microseconds per operation and per batch. With too little spread in x to
    /// separate them, all the time is charged per operation (b = 0); neither goes negative.
    pub fn coefficients(&self) -> (f64, f64) {
        if self.n < 1e-9 {
            return (0.0, 0.0);
        }
        let mean_x = self.sx / self.n;
        let mean_t = self.sy / self.n;
        let var = self.sxx / self.n - mean_x * mean_x;
        if var <= 1e-9 * (1.0 + mean_x * mean_x) {
            return (if mean_x > 0.0 { mean_t / mean_x } else { 0.0 }, 0.0).max_zero();
        }
        let k = (self.sxy / self.n - mean_x * mean_t) / var;
        let b = mean_t - k * mean_x;
        if k < 0.0 {
            return (0.0, mean_t.max(0.0));
        }
        if b < 0.0 {
            return ((self.sxy / self.sxx).max(0.0), 0.0);
        }
        (k, b)
    }
}

trait MaxZero {
    fn max_zero(self) -> Self;
}

impl MaxZero for (f64, f64) {
    fn max_zero(self) -> Self {
        (self.0.max(0.0), self.1.max(0.0))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScheduleConfig {
    /// Bounds on the interval C, microseconds (`--batch-interval-us MIN..MAX`).
    pub min_us: f64,
    pub max_us: f64,
    /// Inserts and deletes are launched every `n` intervals in Mega-KV's model (n >= 2).
    pub write_every: u32,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            min_us: 0.0,
            max_us: 1000.0,
            write_every: 2,
        }
    }
}

/// What the scheduler knows and decides; `stats hkv` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScheduleStats {
    pub interval_us: f64,
    pub k_search: f64,
    pub b_search: f64,
    pub k_write: f64,
    pub b_write: f64,
    /// Requests per microsecond, over the recent window.
    pub arrival_per_us: f64,
    pub get_share: f64,
    pub batches: u64,
    pub searches: u64,
    pub writes: u64,
}

#[derive(Clone, Debug)]
pub struct Scheduler {
    config: ScheduleConfig,
    search: LinearFit,
    write: LinearFit,
    /// Arrivals in the current rate window.
    window_start_us: f64,
    window_reads: u64,
    window_writes: u64,
    arrival_per_us: f64,
    get_share: f64,
    interval_us: f64,
    batches: u64,
    searches: u64,
    writes: u64,
}

/// Batches and their requests, counted between two calls to [`Scheduler::observe_since`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrived {
    pub batches: u64,
    pub reads: u64,
    pub writes: u64,
}

/// One timed batch, a point of the cost fit: `reads` searches took `search_us`, `writes`
/// inserts and deletes `write_us`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub reads: u64,
    pub search_us: f64,
    pub writes: u64,
    pub write_us: f64,
}

/// How long arrivals are counted before the rate is updated.
const RATE_WINDOW_US: f64 = 100_000.0;

impl Scheduler {
    pub fn new(config: ScheduleConfig) -> Scheduler {
        let config = ScheduleConfig {
            min_us: config.min_us.max(0.0),
            max_us: config.max_us.max(config.min_us.max(0.0)),
            write_every: config.write_every.max(2),
        };
        Scheduler {
            config,
            search: LinearFit::default(),
            write: LinearFit::default(),
            window_start_us: 0.0,
            window_reads: 0,
            window_writes: 0,
            arrival_per_us: 0.0,
            get_share: 1.0,
            interval_us: config.min_us,
            batches: 0,
            searches: 0,
            writes: 0,
        }
    }

    pub fn config(&self) -> ScheduleConfig {
        self.config
    }

    /// One batch launched at `now_us`: `reads` searches that took `search_us` of index work,
    /// `writes` inserts/deletes that took `write_us`.
    pub fn observe(&mut self, now_us: f64, reads: u64, search_us: f64, writes: u64, write_us: f64) {
        let sample = Sample {
            reads,
            search_us,
            writes,
            write_us,
        };
        self.observe_since(
            now_us,
            Arrived {
                batches: 1,
                reads,
                writes,
            },
            Some(sample),
        );
    }

    /// The batches `arrived` since the last call, as of `now_us`; `sample`, if any, is the
    /// last of them, timed, for the cost fit (workers time one batch in a few: a clock read
    /// costs more than a small batch's index work on a VM).
    pub fn observe_since(&mut self, now_us: f64, arrived: Arrived, sample: Option<Sample>) {
        let Arrived {
            batches,
            reads,
            writes,
        } = arrived;
        self.batches += batches;
        self.searches += reads;
        self.writes += writes;
        if let Some(t) = sample {
            if t.reads > 0 {
                self.search.record(t.reads as f64, t.search_us);
            }
            if t.writes > 0 {
                self.write.record(t.writes as f64, t.write_us);
            }
        }
        self.window_reads += reads;
        self.window_writes += writes;
        let span = now_us - self.window_start_us;
        if span >= RATE_WINDOW_US {
            let total = self.window_reads + self.window_writes;
            self.arrival_per_us = total as f64 / span;
            self.get_share = if total == 0 {
                1.0
            } else {
                self.window_reads as f64 / total as f64
            };
            self.window_start_us = now_us;
            self.window_reads = 0;
            self.window_writes = 0;
        }
        self.interval_us = self.choose();
    }

    /// The smallest C satisfying Eq. 2 for the fitted costs and observed load, within bounds.
    fn choose(&self) -> f64 {
        let (ks, bs) = self.search.coefficients();
        let (ki, bi) = self.write.coefficients();
        let v = self.arrival_per_us;
        let ps = self.get_share;
        let n = self.config.write_every as f64;
        let denom = 2.0 - 2.0 * ks * ps * v - n * ki * (1.0 - ps) * v;
        let c = if denom <= 0.0 {
            f64::INFINITY
        } else {
            (2.0 * bs + bi) / denom
        };
        c.clamp(self.config.min_us, self.config.max_us)
    }

    /// The interval C now, microseconds.
    pub fn interval_us(&self) -> f64 {
        self.interval_us
    }

    /// Microseconds to wait before launching a batch whose previous one was launched at
    /// `last_launch_us` (0: launch now).
    pub fn wait_us(&self, last_launch_us: f64, now_us: f64) -> f64 {
        (last_launch_us + self.interval_us - now_us).max(0.0)
    }

    /// Eq. 1's processing times for a batch collected over C at the observed load:
    /// (T_S, T_max) in microseconds.
    pub fn processing_us(&self) -> (f64, f64) {
        let (ks, bs) = self.search.coefficients();
        let (ki, bi) = self.write.coefficients();
        let c = self.interval_us;
        let v = self.arrival_per_us;
        let ps = self.get_share;
        let n = self.config.write_every as f64;
        let ts = ks * ps * v * c + bs;
        let ti = ki * (1.0 - ps) * v * c * n + bi;
        (ts, ts + ti)
    }

    pub fn stats(&self) -> ScheduleStats {
        let (k_search, b_search) = self.search.coefficients();
        let (k_write, b_write) = self.write.coefficients();
        ScheduleStats {
            interval_us: self.interval_us,
            k_search,
            b_search,
            k_write,
            b_write,
            arrival_per_us: self.arrival_per_us,
            get_share: self.get_share,
            batches: self.batches,
            searches: self.searches,
            writes: self.writes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_a_line() {
        let mut f = LinearFit::default();
        for x in 1..200 {
            f.record(x as f64, 0.003 * x as f64 + 37.4);
        }
        let (k, b) = f.coefficients();
        assert!((k - 0.003).abs() < 1e-9, "{k}");
        assert!((b - 37.4).abs() < 1e-6, "{b}");
    }

    #[test]
    fn one_batch_size_charges_everything_per_operation() {
        let mut f = LinearFit::default();
        for _ in 0..10 {
            f.record(64.0, 32.0);
        }
        assert_eq!(f.coefficients(), (0.5, 0.0));
    }

    /// Mega-KV's own fitted GTX 780 figures (§5.2) and its 95% GET workload: the paper finds
    /// C > 105.8 us as the rate goes to zero with n = 2.
    fn megakv(v_per_us: f64) -> Scheduler {
        let mut s = Scheduler::new(ScheduleConfig {
            min_us: 0.0,
            max_us: 10_000.0,
            write_every: 2,
        });
        let feed = |s: &mut Scheduler, now: f64, total: u64| {
            let reads = total * 95 / 100;
            let writes = total - reads;
            let ts = 3.0e-3 * reads as f64 + 37.4;
            let ti = 5.6e-3 * writes as f64 + 136.9;
            s.observe(now, reads, ts, writes, ti);
        };
        // Model time, a batch every 100 us. First batch sizes spread over 1..700 so both
        // lines are fitted, then two rate windows at the rate asked for.
        let mut now = 0.0;
        for i in 0..2000u64 {
            now += 100.0;
            feed(&mut s, now, 1 + (i * 37) % 700);
        }
        for i in 0..2000u64 {
            now += 100.0;
            let total = (v_per_us * 100.0 * (0.5 + (i % 7) as f64 / 6.0)).round() as u64;
            feed(&mut s, now, total);
        }
        s
    }

    #[test]
    fn the_interval_matches_the_papers_bound() {
        let s = megakv(0.0001);
        let c = s.interval_us();
        assert!((c - 105.85).abs() < 0.5, "C = {c}");
    }

    #[test]
    fn a_higher_rate_needs_a_longer_interval() {
        let slow = megakv(1.0).interval_us();
        let fast = megakv(100.0).interval_us();
        assert!(fast > slow, "{slow} -> {fast}");
        // Eq. 1 holds at the chosen C: what one interval collects is processed in time.
        let s = megakv(100.0);
        let (ts, tmax) = s.processing_us();
        assert!(ts + tmax <= 2.0 * s.interval_us() + 1e-6);
    }

    #[test]
    fn overload_goes_to_the_upper_bound_and_bounds_hold() {
        let s = megakv(10_000.0);
        assert_eq!(s.interval_us(), 10_000.0);
        let mut cpu = Scheduler::new(ScheduleConfig::default());
        // A CPU backend: sub-microsecond fixed cost, so C stays at the lower bound (every pass).
        for i in 1..100u64 {
            cpu.observe(i as f64 * 10.0, 64, 64.0 * 0.02 + 0.1, 3, 0.6);
        }
        assert!(cpu.interval_us() < 1.0);
        let fixed = Scheduler::new(ScheduleConfig {
            min_us: 200.0,
            max_us: 200.0,
            write_every: 2,
        });
        assert_eq!(fixed.interval_us(), 200.0);
        assert_eq!(fixed.wait_us(1000.0, 1050.0), 150.0);
        assert_eq!(fixed.wait_us(1000.0, 1300.0), 0.0);
    }

    /// A GET arriving at any moment is launched within C and answered within about 3C:
    /// simulated in model time for the paper's costs at several rates.
    #[test]
    fn simulated_get_latency_stays_under_three_intervals() {
        for v in [0.5, 5.0, 50.0, 200.0] {
            let s = megakv(v);
            let c = s.interval_us();
            let (ts, tmax) = s.processing_us();
            // Launch points every C; a batch launched at L finishes its searches by L + T_S
            // after the device has finished the previous interval's work (at most
            // T_max - T_S of it left over, by Eq. 1).
            let mut worst: f64 = 0.0;
            for a in 0..1000 {
                let arrival = a as f64 * c / 1000.0;
                let launch = c; // the batch collecting [0, C) launches at C
                let done = launch + (tmax - ts).max(0.0) + ts;
                worst = worst.max(done - arrival);
            }
            assert!(worst <= 3.0 * c + 1e-6, "v {v}: worst {worst} vs C {c}");
        }
    }
}
