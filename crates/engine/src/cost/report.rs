//! What `stats hkv` and the benchmarks see of a partition's cost model, summed over
//! partitions.

use crate::policy::{Choice, Placement, Proc, TASKS};

/// What `stats hkv` shows of the model (summed over partitions by the caller).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PlacementReport {
    /// Batches per task ([`crate::Task::ALL`] order) on the CPU and on the device, and the
    /// queries in them.
    pub batches: [[u64; 2]; TASKS],
    pub queries: [[u64; 2]; TASKS],
    /// Predicted and measured nanoseconds of placed batches, and the sum of the
    /// differences (the model's error is abs_error / measured).
    pub predicted_ns: f64,
    pub measured_ns: f64,
    pub abs_error_ns: f64,
    /// The model's per-query cost at a batch of 64, CPU and device, per task (ns).
    pub per_query_ns_at_64: [[f64; 2]; TASKS],
    /// 64-query chunks of device-placed searches that the partition's own thread took
    /// (work stealing), and that the device did.
    pub chunks_host: u64,
    pub chunks_device: u64,
    /// Device-placed searches split with the partition's thread (load dispatch, where they
    /// cannot be stolen from), their queries, and the device's share of those.
    pub splits: u64,
    pub split_queries: u64,
    pub split_device_queries: u64,
    /// Where `auto` puts each task now, at the task's mean batch size so far.
    pub current: [Proc; TASKS],
    /// Bytes of the CPU's table copied to a device that searches a mirror of it.
    pub mirror_bytes: u64,
    /// The CPU time a device call takes from the rest of its batch, as a share of its own
    /// (the mean over partitions once scaled).
    pub device_aftermath: f64,
}

impl PlacementReport {
    pub fn add(&mut self, o: &PlacementReport) {
        for t in 0..TASKS {
            for p in 0..2 {
                self.batches[t][p] += o.batches[t][p];
                self.queries[t][p] += o.queries[t][p];
                // Partitions share the hardware: the figure is the mean over them.
                self.per_query_ns_at_64[t][p] += o.per_query_ns_at_64[t][p];
            }
        }
        self.predicted_ns += o.predicted_ns;
        self.measured_ns += o.measured_ns;
        self.mirror_bytes += o.mirror_bytes;
        self.abs_error_ns += o.abs_error_ns;
        self.chunks_host += o.chunks_host;
        self.chunks_device += o.chunks_device;
        self.splits += o.splits;
        self.split_queries += o.split_queries;
        self.split_device_queries += o.split_device_queries;
        self.device_aftermath += o.device_aftermath;
    }

    /// `current` as a placement (`search=cpu,insert=device,delete=cpu`, or one word).
    pub fn current_placement(&self) -> Placement {
        Placement(self.current.map(Choice::Forced))
    }

    /// After adding `parts` reports: the per-query lines become their mean.
    pub fn scale_lines(&mut self, parts: usize) {
        let k = parts.max(1) as f64;
        self.per_query_ns_at_64
            .iter_mut()
            .flatten()
            .for_each(|v| *v /= k);
        self.device_aftermath /= k;
    }

    /// The model's error over placed batches: |predicted - measured| / measured.
    pub fn model_error(&self) -> f64 {
        if self.measured_ns > 0.0 {
            self.abs_error_ns / self.measured_ns
        } else {
            0.0
        }
    }
}
