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
//!
//! Nor is a call independent of the device calls before it in the same engine batch: where
//! the device is the host's cores (PoCL), its workers are still awake after a call, and a
//! device KC right after a device search cost less than one that starts a batch, while a
//! line fitted to both mixed them (measured with `hkv-bench placement`, 2026-11-27: every
//! placement with KC or RD on the device predicted 2-3% fast where the search ran on the
//! CPU and 1-2% slow where it ran on the device, in four passes of 24 workloads). So each
//! task also has lines for calls that follow a device call in the same batch
//! (`after_device`), seeded from its first-call lines and then fitted apart.

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

    /// [`ProcPair::record`] on a line that, if nothing has been recorded on it yet, starts
    /// as `seed`'s, weighing at most one call: its slope holds until calls of other sizes
    /// come.
    fn record_seeded(&mut self, seed: &ProcPair, proc: Proc, n: usize, ns: f64) {
        let fit = &mut self.fits[proc.slot()];
        if fit.samples() == 0.0 {
            // A seed of calibration alone keeps its own (smaller) weight.
            let seed = seed.fits[proc.slot()];
            *fit = seed.scaled_to(seed.samples().min(1.0));
        }
        fit.record(n as f64, ns);
    }

    /// Takes `other`'s line of each processor that has been fitted.
    fn take_fitted(&mut self, other: &ProcPair) {
        for (mine, theirs) in self.fits.iter_mut().zip(&other.fits) {
            if theirs.samples() > 0.0 {
                *mine = *theirs;
            }
        }
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
    /// Each task's lines for calls with no device call before them in their engine batch;
    /// RD's are those after a KC on the CPU.
    tasks: [ProcPair; TASKS],
    /// The same for calls after a device call in their engine batch (see the module); a
    /// line no such call has refitted yet is its task's first-call line.
    after_device: [ProcPair; TASKS],
    /// A device call has run in the engine batch under way.
    device_ran: bool,
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
    /// `task`'s lines for a call after a device call in its batch (`after_device`) or not.
    fn lines(&self, task: Task, after_device: bool) -> ProcPair {
        let mut pair = self.tasks[task.slot()];
        if after_device {
            pair.take_fitted(&self.after_device[task.slot()]);
        }
        pair
    }

    /// Refits `task`'s line on `proc` for a call after a device call or not; a line after
    /// a device call starts as a copy of the first-call line, weighing one call.
    fn record(&mut self, task: Task, proc: Proc, after_device: bool, n: usize, ns: f64) {
        let slot = task.slot();
        if after_device {
            let first = self.tasks[slot];
            self.after_device[slot].record_seeded(&first, proc, n, ns);
        } else {
            self.tasks[slot].record(proc, n, ns);
        }
    }

    /// Predicted nanoseconds of a batch of `n` queries of `task` on `proc`, after a device
    /// call in the same engine batch or not.
    pub fn predict(&self, task: Task, proc: Proc, after_device: bool, n: usize) -> f64 {
        self.lines(task, after_device).predict(proc, n)
    }

    /// What a batch of `n` of `task` on `proc` would cost its engine batch now: the
    /// prediction and, on the device, its aftermath.
    pub fn cost(&self, task: Task, proc: Proc, n: usize) -> f64 {
        self.lines(task, self.device_ran).cost(proc, n)
    }

    /// An engine batch starts (timed: its time will be given to
    /// [`CostModel::end_batch`]).
    pub fn begin_batch(&mut self, timed: bool) {
        self.device_ran = false;
        if timed {
            self.aftermath.begin();
        }
    }

    /// An engine batch of `requests` is done; timed, it took `ns`, and refits what device
    /// calls cost around them. Device calls from now until the next batch (delayed writes
    /// applied by an idle worker, a slab move) are first calls again.
    pub fn end_batch(&mut self, requests: usize, ns: Option<f64>) {
        self.device_ran = false;
        let Some(ns) = ns else {
            return;
        };
        self.aftermath.end(requests, ns);
        let k = self.aftermath.k();
        for pair in self.tasks.iter_mut().chain(self.after_device.iter_mut()) {
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

    /// The cheaper processor for a batch of `n` now.
    pub fn best(&self, task: Task, n: usize) -> Proc {
        self.lines(task, self.device_ran).best(n)
    }

    /// Where a batch of `n` runs under `placement`: forced, or the model's choice with an
    /// occasional try of the other processor.
    pub fn choose(&mut self, placement: &Placement, task: Task, n: usize) -> Proc {
        match placement.of(task) {
            Choice::Forced(p) => p,
            Choice::Auto => {
                let mut pair = self.lines(task, self.device_ran);
                let gate = &mut self.explore_after;
                let proc = pair.choose_auto_when(n, || explore_now(gate));
                self.tasks[task.slot()].since_explore = pair.since_explore;
                proc
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
        let after_device = self.device_ran;
        if self.knows(task) {
            self.score(self.predict(task, proc, after_device, n), ns);
        }
        self.batches[task.slot()][proc.slot()] += 1;
        self.queries[task.slot()][proc.slot()] += n as u64;
        self.aftermath.task(proc, ns);
        self.record(task, proc, after_device, n, ns);
        self.single[task.slot()] = self.lines(task, false).best(1);
        self.device_ran |= proc == Proc::Device;
    }

    /// Keeps score of a prediction against the time measured.
    fn score(&mut self, predicted: f64, ns: f64) {
        self.predicted_ns += predicted;
        self.measured_ns += ns;
        self.abs_error_ns += (predicted - ns).abs();
    }

    /// A timed call outside the service (start-up calibration): a prior, not scored.
    pub fn calibrate(&mut self, task: Task, proc: Proc, n: usize, ns: f64) {
        self.tasks[task.slot()].record_prior(proc, n, ns);
        self.single[task.slot()] = self.lines(task, false).best(1);
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
        assert!((m.predict(Task::Search, Proc::Device, false, 1000) - 21_000.0).abs() < 1.0);
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
            m.begin_batch(false);
            m.observe(Task::Search, Proc::Device, 72 + i, 17_000.0);
        }
        let at = m.predict(Task::Search, Proc::Device, false, 76);
        assert!((at - 17_000.0).abs() < 400.0, "{at}");
        // ... and calibration still gives the slope beyond the sizes service ran.
        assert!(m.predict(Task::Search, Proc::Device, false, 16_384) > at);
    }

    #[test]
    fn the_model_follows_a_processor_that_slows_down() {
        let mut m = fitted();
        assert_eq!(m.best(Task::Search, 4096), Proc::Device);
        // The device becomes busy: every launch now takes 200 us.
        for _ in 0..20_000 {
            m.begin_batch(false);
            m.observe(Task::Search, Proc::Device, 4096, 200_000.0);
        }
        assert_eq!(m.best(Task::Search, 4096), Proc::Cpu);
        let r = m.report();
        assert_eq!(r.batches[0][1], 20_000);
        assert!(r.abs_error_ns > 0.0 && r.measured_ns > 0.0);
    }

    /// PoCL's workers are still awake after a device call: a device KC right after a
    /// device search takes 8 us where one that starts its batch takes 21 us. Each is
    /// predicted from its own line, and the choice follows where the KC stands.
    #[test]
    fn calls_after_a_device_call_in_their_batch_have_lines_of_their_own() {
        let mut m = fitted();
        for n in [1usize, 64, 1024, 4096] {
            m.calibrate(Task::Kc, Proc::Cpu, n, 10.0 * n as f64);
            m.calibrate(Task::Kc, Proc::Device, n, 20_000.0 + n as f64);
        }
        for i in 0..200 {
            m.begin_batch(true);
            let after_search = i % 2 == 0;
            if after_search {
                m.observe(Task::Search, Proc::Device, 1024, 21_024.0);
            }
            let ns = if after_search { 8_000.0 } else { 21_024.0 };
            m.observe(Task::Kc, Proc::Device, 1024, ns);
            m.end_batch(1024, Some(30_000.0));
        }
        let warm = m.predict(Task::Kc, Proc::Device, true, 1024);
        let cold = m.predict(Task::Kc, Proc::Device, false, 1024);
        assert!((warm - 8_000.0).abs() < 500.0, "{warm}");
        assert!((cold - 21_024.0).abs() < 500.0, "{cold}");
        // The CPU's KC of 1024 takes 10.2 us: cheaper than a first device call, dearer
        // than one after the device's search.
        m.begin_batch(true);
        assert_eq!(m.best(Task::Kc, 1024), Proc::Cpu);
        m.observe(Task::Search, Proc::Device, 1024, 21_024.0);
        assert_eq!(m.best(Task::Kc, 1024), Proc::Device);
        // A line no call after a device call has refitted is the first-call line.
        assert_eq!(
            m.predict(Task::Search, Proc::Device, true, 1024),
            m.predict(Task::Search, Proc::Device, false, 1024)
        );
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
