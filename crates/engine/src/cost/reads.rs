//! KC and RD placed together (task affinity, DIDO §III-B): KC loads each item, so RD on the
//! same processor finds it in cache, and RD's lines are kept per processor of the KC
//! before it.

use super::{explore_now, CostModel, ProcPair};
use crate::policy::{Choice, Placement, Proc, Task};

impl CostModel {
    /// RD's lines after a KC on `kc`.
    fn rd_pair(&mut self, kc: Proc) -> &mut ProcPair {
        match kc {
            Proc::Cpu => &mut self.tasks[Task::Rd.slot()],
            Proc::Device => &mut self.rd_after_device_kc,
        }
    }

    /// Predicted nanoseconds of RD of `n` reads on `proc` after their KC on `kc`.
    pub fn predict_rd(&self, kc: Proc, proc: Proc, n: usize) -> f64 {
        match kc {
            Proc::Cpu => self.tasks[Task::Rd.slot()].predict(proc, n),
            Proc::Device => self.rd_after_device_kc.predict(proc, n),
        }
    }

    /// Where KC and RD of a group of `n` reads run: forced, or the pair with the least
    /// predicted KC + RD time (task affinity), now and then another so every line stays
    /// current (within the exploration budget, like every task).
    pub fn choose_reads(&mut self, placement: &Placement, n: usize) -> (Proc, Proc) {
        let procs = [Proc::Cpu, Proc::Device];
        let kc_options: &[Proc] = match placement.of(Task::Kc) {
            Choice::Forced(p) => &[p][..],
            Choice::Auto => &procs[..],
        };
        let rd_best = |m: &CostModel, kc: Proc| -> (Proc, f64) {
            let pair = match kc {
                Proc::Cpu => &m.tasks[Task::Rd.slot()],
                Proc::Device => &m.rd_after_device_kc,
            };
            match placement.of(Task::Rd) {
                Choice::Forced(p) => (p, pair.cost(p, n)),
                Choice::Auto if pair.knows() => {
                    let p = pair.best(n);
                    (p, pair.cost(p, n))
                }
                Choice::Auto => (Proc::Cpu, pair.cost(Proc::Cpu, n)),
            }
        };
        let kc = if kc_options.len() == 1 || !self.knows(Task::Kc) {
            kc_options[0]
        } else {
            let cost = |m: &CostModel, kc: Proc| m.cost(Task::Kc, kc, n) + rd_best(m, kc).1;
            let (c, d) = (cost(self, Proc::Cpu), cost(self, Proc::Device));
            let (best, b, o) = if d < c {
                (Proc::Device, d, c)
            } else {
                (Proc::Cpu, c, d)
            };
            let gate = &mut self.explore_after;
            self.tasks[Task::Kc.slot()].explore(best, b, o, || explore_now(gate))
        };
        let rd = match placement.of(Task::Rd) {
            Choice::Forced(p) => p,
            Choice::Auto => {
                let gate = &mut self.explore_after;
                let pair = match kc {
                    Proc::Cpu => &mut self.tasks[Task::Rd.slot()],
                    Proc::Device => &mut self.rd_after_device_kc,
                };
                pair.choose_auto_when(n, || explore_now(gate))
            }
        };
        (kc, rd)
    }

    /// Where KC and RD of `n` reads would go under `auto` for both (no exploring).
    pub fn best_reads(&self, n: usize) -> (Proc, Proc) {
        let mut best = ((Proc::Cpu, Proc::Cpu), f64::INFINITY);
        for kc in [Proc::Cpu, Proc::Device] {
            for rd in [Proc::Cpu, Proc::Device] {
                let rd_pair = match kc {
                    Proc::Cpu => &self.tasks[Task::Rd.slot()],
                    Proc::Device => &self.rd_after_device_kc,
                };
                let t = self.cost(Task::Kc, kc, n) + rd_pair.cost(rd, n);
                let known = (kc == Proc::Cpu || self.knows(Task::Kc))
                    && (rd == Proc::Cpu || rd_pair.knows());
                if known && t < best.1 {
                    best = ((kc, rd), t);
                }
            }
        }
        best.0
    }

    /// A timed RD after a KC on `kc`: like [`CostModel::observe`], on RD's lines for that.
    pub fn observe_rd(&mut self, kc: Proc, proc: Proc, n: usize, ns: f64) {
        if self.rd_pair(kc).knows() {
            let predicted = self.predict_rd(kc, proc, n);
            self.predicted_ns += predicted;
            self.measured_ns += ns;
            self.abs_error_ns += (predicted - ns).abs();
        }
        self.batches[Task::Rd.slot()][proc.slot()] += 1;
        self.queries[Task::Rd.slot()][proc.slot()] += n as u64;
        self.aftermath.task(proc, ns);
        self.rd_pair(kc).record(proc, n, ns);
    }

    /// A timed RD outside the service (start-up calibration): a prior.
    pub fn calibrate_rd(&mut self, kc: Proc, proc: Proc, n: usize, ns: f64) {
        self.rd_pair(kc).record_prior(proc, n, ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// KC alone is cheaper on the device, but RD after it on the CPU must load every item
    /// again and RD on the device is slower still: KC and RD stay together on the CPU.
    #[test]
    fn task_affinity_keeps_kc_with_rd() {
        let mut m = CostModel::default();
        for n in [1usize, 64, 1024] {
            let n_ = n as f64;
            m.calibrate(Task::Kc, Proc::Cpu, n, 10.0 * n_);
            m.calibrate(Task::Kc, Proc::Device, n, 5.0 * n_);
            m.calibrate_rd(Proc::Cpu, Proc::Cpu, n, 2.0 * n_);
            m.calibrate_rd(Proc::Cpu, Proc::Device, n, 50.0 * n_);
            m.calibrate_rd(Proc::Device, Proc::Cpu, n, 20.0 * n_);
            m.calibrate_rd(Proc::Device, Proc::Device, n, 50.0 * n_);
        }
        assert_eq!(
            m.best(Task::Kc, 64),
            Proc::Device,
            "KC alone prefers the device"
        );
        assert_eq!(m.best_reads(64), (Proc::Cpu, Proc::Cpu));
        let picks: Vec<(Proc, Proc)> = (0..10_000)
            .map(|_| m.choose_reads(&Placement::AUTO, 64))
            .collect();
        let together = picks
            .iter()
            .filter(|&&p| p == (Proc::Cpu, Proc::Cpu))
            .count();
        // KC's and RD's explorations each stay within the budget (a KC try here costs about
        // the best pair's time again: one in ~50).
        assert!(together >= 9_700, "{together} of 10000 on the CPU together");
        assert!(together < 10_000, "the other lines are never re-measured");
        // Forced KC on the device: RD follows the lines after a device KC (CPU: 20 < 50).
        let kc_dev: Placement = "KC=device".parse().unwrap();
        assert_eq!(m.best_reads(64), (Proc::Cpu, Proc::Cpu));
        let rd = (0..1000)
            .filter(|_| m.choose_reads(&kc_dev, 64) == (Proc::Device, Proc::Cpu))
            .count();
        assert!(rd >= 950, "{rd}");
        // When RD after a device KC turns cheap, the pair moves to the device.
        for _ in 0..5000 {
            m.observe_rd(Proc::Device, Proc::Device, 64, 64.0);
        }
        assert_eq!(m.best_reads(64), (Proc::Device, Proc::Device));
        assert_eq!(
            m.report().current_placement().of(Task::Kc),
            Choice::Forced(Proc::Device)
        );
    }
}
