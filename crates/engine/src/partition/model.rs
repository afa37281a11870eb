//! A partition's cost model as its owner sees it: the placement asked for, the start-up
//! calibration, and the predictions and counters `stats hkv` and `hkv-bench placement`
//! read.

use super::Partition;

impl Partition {
    /// `--placement` (`hkv-bench placement` changes it between runs).
    pub fn set_placement(&mut self, placement: crate::Placement) {
        self.index.set_policy(placement);
    }

    /// Times each index task on each processor, where both work on one table and some task
    /// is placed by the model (the table must still be empty for inserts to be timed).
    pub fn calibrate_placement(&mut self) {
        self.index.calibrate();
        self.calibrate_items();
    }

    /// The cost model's prediction for a batch of `n` queries of `task` on `proc` (ns).
    pub fn placement_predict(&self, task: crate::Task, proc: crate::Proc, n: usize) -> f64 {
        self.index.model.predict(task, proc, n)
    }

    /// The CPU time a device call takes from the rest of its batch, as a share of its own
    /// (the cost model's aftermath term).
    pub fn placement_aftermath(&self) -> f64 {
        self.index.model.aftermath()
    }

    /// The cost model's prediction for RD of `n` reads on `proc` after their KC on `kc` (ns):
    /// RD's lines depend on where KC ran (task affinity).
    pub fn placement_predict_rd(&self, kc: crate::Proc, proc: crate::Proc, n: usize) -> f64 {
        self.index.model.predict_rd(kc, proc, n)
    }

    /// The placement asked for, and whether the device shares the CPU's table (without
    /// which every index task runs on the device).
    pub fn placement(&self) -> (crate::Placement, bool) {
        (self.index.policy(), self.index.shared())
    }

    /// Which table the device works on (shared, a mirror, its own), which sets what can be
    /// placed.
    pub fn device_table(&self) -> crate::DeviceTable {
        self.index.device_table()
    }

    /// The cost model's counters and lines.
    pub fn placement_report(&self) -> crate::PlacementReport {
        crate::PlacementReport {
            mirror_bytes: self.index.mirror_bytes,
            chunks_host: self.index.stolen.host,
            chunks_device: self.index.stolen.device,
            splits: self.index.dispatch.splits,
            split_queries: self.index.dispatch.queries,
            split_device_queries: self.index.dispatch.device_queries,
            ..self.index.model.report()
        }
    }

    /// Whether device-placed searches are shared with this thread (work stealing).
    pub fn steals(&self) -> bool {
        self.index.device().is_some_and(|d| d.steals())
    }
}
