//! The cost model behind `--placement auto` (DIDO §III-B, Eq. 1-4, reduced to what hkv's
//! partitions do): a partition runs a batch's tasks one after another on its own thread,
//! and a device call blocks until its kernels are done, so a batch's index time is the sum
//! of its tasks' times and each task can be placed on its own. Each (task, processor) pair
//! has a line `t(n) = fixed + per_query * n`: fixed is a kernel launch and its copies on
//! the device, a few cache misses on the CPU. Lines are fitted from timed calls at
//! start-up (calibration) and refitted from every batch that runs (older ones fading), so
//! the model follows the hardware, the table's load and the other work sharing the cores.
//!
//! The processor not chosen is still tried now and then, so its line stays current: often
//! enough to notice a change, rarely enough that the expected cost of trying stays under
//! [`EXPLORE_BUDGET`] of the batch time it could add.
//!
//! One pair of tasks is not independent: **task affinity** (DIDO §III-B). KC loads each
//! item, so RD on the same processor finds it in cache; RD on the other one loads it again.
//! RD's lines are therefore kept per processor of the KC before it, and KC and RD are
//! chosen together (`choose_reads`), for the least KC + RD time.

mod aftermath;
mod reads;
mod report;

use crate::policy::{Choice, Placement, Proc, Task, TASKS};
use crate::schedule::LinearFit;
use aftermath::Aftermath;
pub use report::PlacementReport;

/// The share of index time that trying the slower processor may cost on average.
const EXPLORE_BUDGET: f64 = 0.02;
/// Tried at least once in this many batches of a task, however slow it looked. Large: over
/// the network a read group can be a few reads, a device call then costs ~1000x the CPU's,
/// and a tighter bound (it was 2^14) broke the budget several times over (measured: auto
/// at 0.85x of the all-CPU placement on a 50%-SET load once KC and RD explored too).
const EXPLORE_MAX_GAP: u64 = 1 << 20;
/// Tried at most once in this many batches, however close the two are.
const EXPLORE_MIN_GAP: u64 = 32;
/// A partition tries a slower processor at most once in this long, whatever the task. A
/// device call costs more than its own time where the device is the host's cores (PoCL's
/// workers wake and spin, taking CPU from everything else), which no line measures:
/// measured over the network, auto ran at 0.93x of the all-CPU placement with ~130 tries
/// a second, most of them cheap by their own timing.
const EXPLORE_EVERY: std::time::Duration = std::time::Duration::from_millis(50);
/// What a start-up calibration sample weighs against one from service. Calibration runs
/// on an idle machine, a scratch store and sizes service may never see: measured with
/// `hkv-bench placement`, a device line still two thirds calibration after a fifth of a
/// pass in service predicted 23.8 us for a group of 76 reads that took 16.9 us. At 1/20,
/// all of a line's calibration weighs less than one service call, so the line at the
/// sizes service uses is service's, and calibration still gives the slope beyond them.
const PRIOR_WEIGHT: f64 = 0.05;
/// Calibration batch sizes and repetitions.
pub(crate) const CALIBRATION_SIZES: [usize; 3] = [1, 64, 1024];
pub(crate) const CALIBRATION_REPS: usize = 5;

/// One task's two lines (CPU, device) and the choice between them: the cheaper line at the
/// call's size, with the other processor tried within [`EXPLORE_BUDGET`]. `n` is whatever
/// the task's time grows with: queries in a batch, or bytes of a vector update.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ProcPair {
    fits: [LinearFit; 2],
    /// Calls since the other processor was last tried.
    since_explore: u64,
    /// What a device call costs the rest of its batch, as a share of its own time
    /// ([`Aftermath`]; 0 where nobody measures it, as for vector updates).
    aftermath: f64,
}

impl ProcPair {
    /// Predicted nanoseconds of a call of size `n` on `proc`.
    pub fn predict(&self, proc: Proc, n: usize) -> f64 {
        let (per, fixed) = self.fits[proc.slot()].coefficients();
        fixed + per * n as f64
    }

    /// What a call of size `n` on `proc` costs the batch: its own time and, on the device,
    /// what it takes from the CPU work around it.
    pub fn cost(&self, proc: Proc, n: usize) -> f64 {
        match proc {
            Proc::Cpu => self.predict(proc, n),
            Proc::Device => self.predict(proc, n) * (1.0 + self.aftermath),
        }
    }

    /// Whether both processors have been timed.
    pub fn knows(&self) -> bool {
        self.fits.iter().all(|f| f.samples() > 0.0)
    }

    /// The cheaper processor at `n` (the CPU until both are timed).
    pub fn best(&self, n: usize) -> Proc {
        if self.knows() && self.cost(Proc::Device, n) < self.cost(Proc::Cpu, n) {
            Proc::Device
        } else {
            Proc::Cpu
        }
    }

    /// The smallest size from which the device is predicted cheaper (None: never, or not
    /// timed), assuming it does not win at small sizes only.
    pub fn device_from(&self) -> Option<usize> {
        if !self.knows() {
            return None;
        }
        let (cpu, dev) = (self.fits[0].coefficients(), self.fits[1].coefficients());
        let dev = (
            dev.0 * (1.0 + self.aftermath),
            dev.1 * (1.0 + self.aftermath),
        );
        if dev.1 <= cpu.1 && dev.0 <= cpu.0 {
            return Some(0);
        }
        if dev.0 >= cpu.0 {
            return None;
        }
        let n = ((dev.1 - cpu.1) / (cpu.0 - dev.0)).ceil();
        (n < usize::MAX as f64).then_some(n as usize)
    }

    /// The model's choice at `n`, now and then the other processor so its line stays
    /// current: trying it costs (other - best) once per gap calls, kept under the budget.
    pub fn choose_auto(&mut self, n: usize) -> Proc {
        self.choose_auto_when(n, || true)
    }

    /// [`ProcPair::choose_auto`], trying the other processor only when `allowed` says so
    /// when its turn comes (else at the next call it does).
    pub fn choose_auto_when(&mut self, n: usize, allowed: impl FnOnce() -> bool) -> Proc {
        let best = self.best(n);
        if !self.knows() {
            return best;
        }
        let other = best.other();
        let (b, o) = (self.cost(best, n), self.cost(other, n));
        self.explore(best, b, o, allowed)
    }

    /// `best` (predicted `b` ns), or now and then the other processor (predicted `o`), as
    /// often as the exploration budget and `allowed` allow.
    fn explore(&mut self, best: Proc, b: f64, o: f64, allowed: impl FnOnce() -> bool) -> Proc {
        let other = best.other();
        let b = b.max(1.0);
        let gap =
            (((o - b) / b / EXPLORE_BUDGET).ceil() as u64).clamp(EXPLORE_MIN_GAP, EXPLORE_MAX_GAP);
        self.since_explore = self.since_explore.saturating_add(1);
        if self.since_explore >= gap && allowed() {
            self.since_explore = 0;
            other
        } else {
            best
        }
    }

    /// A timed call: refits `proc`'s line (older calls fading).
    pub fn record(&mut self, proc: Proc, n: usize, ns: f64) {
        self.fits[proc.slot()].record(n as f64, ns);
    }

    /// A call timed outside the service (start-up calibration): a prior that service calls
    /// outweigh at once ([`PRIOR_WEIGHT`]), keeping only the slope where they have none.
    pub fn record_prior(&mut self, proc: Proc, n: usize, ns: f64) {
        self.fits[proc.slot()].record_weighted(n as f64, ns, PRIOR_WEIGHT);
    }
}

/// Whether a slower processor may be tried now (and if so, not again for [`EXPLORE_EVERY`]).
fn explore_now(gate: &mut Option<std::time::Instant>) -> bool {
    let now = std::time::Instant::now();
    if gate.is_some_and(|t| now < t) {
        return false;
    }
    *gate = Some(now + EXPLORE_EVERY);
    true
}

#[derive(Clone, Debug, Default)]
pub(crate) struct CostModel {
    /// Each task's lines; RD's are those after a KC on the CPU.
    tasks: [ProcPair; TASKS],
    /// RD's lines after a KC on the device (task affinity: see the module).
    rd_after_device_kc: ProcPair,
    /// No other processor is tried before this ([`EXPLORE_EVERY`]).
    explore_after: Option<std::time::Instant>,
    /// Batches run on each (task, processor), and the queries in them.
    batches: [[u64; 2]; TASKS],
    queries: [[u64; 2]; TASKS],
    /// Each task's prediction for a single query (the `_one` calls), refreshed per batch.
    single: [Proc; TASKS],
    /// Predicted and measured time of every placed batch (ns), for the model's error.
    pub predicted_ns: f64,
    pub measured_ns: f64,
    pub abs_error_ns: f64,
    /// What device calls cost the rest of their engine batch.
    aftermath: Aftermath,
}

impl CostModel {
    /// Predicted nanoseconds of a batch of `n` queries of `task` on `proc`.
    pub fn predict(&self, task: Task, proc: Proc, n: usize) -> f64 {
        self.tasks[task.slot()].predict(proc, n)
    }

    /// What a batch of `n` of `task` on `proc` costs its engine batch: the prediction and,
    /// on the device, its aftermath.
    pub fn cost(&self, task: Task, proc: Proc, n: usize) -> f64 {
        self.tasks[task.slot()].cost(proc, n)
    }

    /// An engine batch starts; [`CostModel::end_batch`] when it is done.
    pub fn begin_batch(&mut self) {
        self.aftermath.begin();
    }

    /// An engine batch of `requests` took `ns`: refits what device calls cost around them.
    pub fn end_batch(&mut self, requests: usize, ns: f64) {
        self.aftermath.end(requests, ns);
        let k = self.aftermath.k();
        for pair in self.tasks.iter_mut() {
            pair.aftermath = k;
        }
        self.rd_after_device_kc.aftermath = k;
    }

    /// The CPU time a device call takes from the rest of its batch, as a share of its own.
    pub fn aftermath(&self) -> f64 {
        self.aftermath.k()
    }

    /// Whether both processors of `task` have been timed.
    pub fn knows(&self, task: Task) -> bool {
        self.tasks[task.slot()].knows()
    }

    /// The cheaper processor for a batch of `n`.
    pub fn best(&self, task: Task, n: usize) -> Proc {
        self.tasks[task.slot()].best(n)
    }

    /// Where a batch of `n` runs under `placement`: forced, or the model's choice with an
    /// occasional try of the other processor.
    pub fn choose(&mut self, placement: &Placement, task: Task, n: usize) -> Proc {
        match placement.of(task) {
            Choice::Forced(p) => p,
            Choice::Auto => {
                let gate = &mut self.explore_after;
                self.tasks[task.slot()].choose_auto_when(n, || explore_now(gate))
            }
        }
    }

    /// The processor for a single query (`search_one` and the like): forced, or the model's
    /// choice for n = 1 as of the last batch (not refitted per query: these calls are on
    /// every write's path).
    pub fn choose_single(&self, placement: &Placement, task: Task) -> Proc {
        match placement.of(task) {
            Choice::Forced(p) => p,
            Choice::Auto => self.single[task.slot()],
        }
    }

    /// A timed batch: refits the line and keeps score of the prediction.
    pub fn observe(&mut self, task: Task, proc: Proc, n: usize, ns: f64) {
        if self.knows(task) {
            let predicted = self.predict(task, proc, n);
            self.predicted_ns += predicted;
            self.measured_ns += ns;
            self.abs_error_ns += (predicted - ns).abs();
        }
        self.batches[task.slot()][proc.slot()] += 1;
        self.queries[task.slot()][proc.slot()] += n as u64;
        self.aftermath.task(proc, ns);
        self.tasks[task.slot()].record(proc, n, ns);
        self.single[task.slot()] = self.best(task, 1);
    }

    /// A timed call outside the service (start-up calibration): a prior, not scored.
    pub fn calibrate(&mut self, task: Task, proc: Proc, n: usize, ns: f64) {
        self.tasks[task.slot()].record_prior(proc, n, ns);
        self.single[task.slot()] = self.best(task, 1);
    }

    pub fn report(&self) -> PlacementReport {
        let mut per = [[0.0; 2]; TASKS];
        for t in Task::ALL {
            for p in [Proc::Cpu, Proc::Device] {
                // RD's line on each processor is the one after a KC on the same one.
                let pair = match (t, p) {
                    (Task::Rd, Proc::Device) => &self.rd_after_device_kc,
                    _ => &self.tasks[t.slot()],
                };
                if pair.fits[p.slot()].samples() > 0.0 {
                    per[t.slot()][p.slot()] = pair.predict(p, 64) / 64.0;
                }
            }
        }
        let mean = |i: usize| {
            let (b, q) = (
                self.batches[i][0] + self.batches[i][1],
                self.queries[i][0] + self.queries[i][1],
            );
            q.checked_div(b).map_or(64, |m| m as usize)
        };
        let (kc, rd) = self.best_reads(mean(Task::Kc.slot()));
        PlacementReport {
            batches: self.batches,
            queries: self.queries,
            predicted_ns: self.predicted_ns,
            measured_ns: self.measured_ns,
            abs_error_ns: self.abs_error_ns,
            per_query_ns_at_64: per,
            chunks_host: 0,
            chunks_device: 0,
            splits: 0,
            split_queries: 0,
            split_device_queries: 0,
            current: Task::ALL.map(|t| match t {
                Task::Kc => kc,
                Task::Rd => rd,
                _ => self.best(t, mean(t.slot())),
            }),
            device_aftermath: self.aftermath(),
            mirror_bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU at 10 ns per query and a device at 20 us per launch + 1 ns per query.
    fn fitted() -> CostModel {
        let mut m = CostModel::default();
        for n in [1usize, 64, 1024, 4096, 16384] {
            m.calibrate(Task::Search, Proc::Cpu, n, 10.0 * n as f64);
            m.calibrate(Task::Search, Proc::Device, n, 20_000.0 + n as f64);
        }
        m
    }

    #[test]
    fn small_batches_go_to_the_cpu_and_large_ones_to_the_device() {
        let m = fitted();
        // Break-even: 10 n = 20000 + n, n ~ 2222.
        assert_eq!(m.best(Task::Search, 64), Proc::Cpu);
        assert_eq!(m.best(Task::Search, 2000), Proc::Cpu);
        assert_eq!(m.best(Task::Search, 2500), Proc::Device);
        assert_eq!(m.best(Task::Search, 100_000), Proc::Device);
        assert!((m.predict(Task::Search, Proc::Device, 1000) - 21_000.0).abs() < 1.0);
    }

    #[test]
    fn forced_placements_are_obeyed_and_auto_explores_within_budget() {
        let mut m = fitted();
        let forced: Placement = "search=device".parse().unwrap();
        assert!((0..100).all(|_| m.choose(&forced, Task::Search, 8) == Proc::Device));
        // n = 64: CPU 640 ns, device 20064 ns; trying the device must stay under 2% of the
        // CPU's time on average, so at most one batch in ~1500.
        let tries = (0..100_000)
            .filter(|_| m.choose(&Placement::AUTO, Task::Search, 64) == Proc::Device)
            .count();
        assert!(tries >= 1, "the slower processor is never re-measured");
        let cost = tries as f64 * (20_064.0 - 640.0) / (100_000.0 * 640.0);
        assert!(cost <= EXPLORE_BUDGET * 1.05, "exploring costs {cost}");
    }

    #[test]
    fn a_partition_tries_a_slower_processor_at_most_once_per_interval() {
        let mut m = fitted();
        // At 2000 queries the two are close (20.0 us, 22.0 us): the gap is its least, 32
        // calls; a fast loop takes well under the interval, so one try in all.
        let t = std::time::Instant::now();
        let tries = (0..20_000)
            .filter(|_| m.choose(&Placement::AUTO, Task::Search, 2000) == Proc::Device)
            .count();
        if t.elapsed() < EXPLORE_EVERY {
            assert_eq!(tries, 1);
        }
        std::thread::sleep(EXPLORE_EVERY);
        let again = (0..64)
            .filter(|_| m.choose(&Placement::AUTO, Task::Search, 2000) == Proc::Device)
            .count();
        assert_eq!(again, 1, "a try is due once the interval has passed");
    }

    #[test]
    fn service_calls_outweigh_the_start_up_calibration_at_their_size() {
        let mut m = fitted();
        // In service a device search of ~76 reads takes 17 us, where calibration (an idle
        // device, other sizes) said 20 us: a few calls move the line there at once.
        for i in 0..8 {
            m.observe(Task::Search, Proc::Device, 72 + i, 17_000.0);
        }
        let at = m.predict(Task::Search, Proc::Device, 76);
        assert!((at - 17_000.0).abs() < 400.0, "{at}");
        // ... and calibration still gives the slope beyond the sizes service ran.
        assert!(m.predict(Task::Search, Proc::Device, 16_384) > at);
    }

    #[test]
    fn the_model_follows_a_processor_that_slows_down() {
        let mut m = fitted();
        assert_eq!(m.best(Task::Search, 4096), Proc::Device);
        // The device becomes busy: every launch now takes 200 us.
        for _ in 0..20_000 {
            m.observe(Task::Search, Proc::Device, 4096, 200_000.0);
        }
        assert_eq!(m.best(Task::Search, 4096), Proc::Cpu);
        let r = m.report();
        assert_eq!(r.batches[0][1], 20_000);
        assert!(r.abs_error_ns > 0.0 && r.measured_ns > 0.0);
    }

    #[test]
    fn the_break_even_size_is_where_the_lines_cross() {
        let m = fitted();
        let pair = m.tasks[Task::Search.slot()];
        let from = pair.device_from().expect("the device's line is flatter");
        assert!((2220..=2224).contains(&from), "{from}");
        assert_eq!(pair.best(from - 2), Proc::Cpu);
        assert_eq!(pair.best(from + 1), Proc::Device);
        let mut slower = ProcPair::default();
        slower.record(Proc::Cpu, 10, 10.0);
        slower.record(Proc::Cpu, 1000, 1000.0);
        slower.record(Proc::Device, 10, 5000.0);
        slower.record(Proc::Device, 1000, 7000.0);
        assert_eq!(slower.device_from(), None, "steeper and dearer: never");
        assert_eq!(ProcPair::default().device_from(), None, "untimed: never");
    }

    #[test]
    fn single_queries_follow_the_model_at_one() {
        let m = fitted();
        assert_eq!(m.choose_single(&Placement::AUTO, Task::Search), Proc::Cpu);
        let forced = Placement::all(Proc::Device);
        assert_eq!(m.choose_single(&forced, Task::Search), Proc::Device);
        // Untimed tasks stay on the CPU.
        assert_eq!(m.best(Task::Delete, 1_000_000), Proc::Cpu);
    }
}
