//! A placement's measured runs in one workload: their median, their spread, and how far
//! that median may lie from the true throughput on a noisy machine (the error a perfect
//! model would still show against it, printed beside the model's own).

use hkv_engine::{Choice, Placement, Proc, Task};

use crate::workload::median;

/// A placement's figures in one workload.
pub(super) struct Row {
    pub placement: Placement,
    /// Predicted from the start-up calibration and the reference alone, then after the
    /// device's lines were refitted from service.
    pub startup_mops: f64,
    pub predicted_mops: f64,
    /// Each run's prediction, made just before it from the model's state then.
    pub online: Vec<f64>,
    pub runs: Vec<f64>,
    /// Index time the partition measured, per request, over all runs (ns).
    pub index_ns: f64,
}

impl Row {
    pub fn median(&self) -> f64 {
        median(&mut self.runs.clone())
    }

    pub fn online_median(&self) -> f64 {
        median(&mut self.online.clone())
    }

    /// How far the median of these runs may lie from the placement's true throughput, as a
    /// share of it: the mean distance of the median of a resample of the runs (all of them,
    /// with replacement) from the runs' own median. A model that knew the true throughput
    /// would show about this error against the median, so below it the model's error says
    /// nothing. With 3 runs it is 7/27 of the spread (resample medians: the lowest run 7
    /// times in 27, the highest 7, the middle one 13).
    pub fn median_error(&self) -> f64 {
        noise_floor(&self.runs)
    }

    /// Tasks this placement puts on the device, of those not in `idle` (the workload has
    /// no batches of them).
    pub fn device_tasks(&self, idle: &[Task]) -> usize {
        Task::ALL
            .iter()
            .filter(|&&t| !idle.contains(&t))
            .filter(|&&t| self.placement.of(t) == Choice::Forced(Proc::Device))
            .count()
    }

    /// (max - min) / median of the runs.
    pub fn spread(&self) -> f64 {
        let lo = self.runs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.runs.iter().copied().fold(0.0, f64::max);
        (hi - lo) / self.median().max(1e-12)
    }
}

/// The mean distance, as a share, of the median of a resample of `runs` (as many, with
/// replacement) from their own median: every resample when there are few runs (3 runs: 27),
/// else 4096 drawn by a fixed generator.
fn noise_floor(runs: &[f64]) -> f64 {
    let k = runs.len();
    let m = median(&mut runs.to_vec());
    if k < 2 || m <= 0.0 {
        return 0.0;
    }
    let all = k.checked_pow(k as u32).filter(|&n| n <= 4096);
    let draws = all.unwrap_or(4096);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut pick = vec![0.0; k];
    let mut sum = 0.0;
    for d in 0..draws {
        for (j, slot) in pick.iter_mut().enumerate() {
            let i = match all {
                // The d-th resample: d's digits in base k.
                Some(_) => d / k.pow(j as u32) % k,
                None => {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % k as u64) as usize
                }
            };
            *slot = runs[i];
        }
        sum += (median(&mut pick) - m).abs() / m;
    }
    sum / draws as f64
}

#[cfg(test)]
mod tests {
    use super::noise_floor;

    #[test]
    fn the_noise_floor_grows_with_the_runs_scatter_and_is_nil_without_any() {
        assert_eq!(noise_floor(&[5.0, 5.0, 5.0]), 0.0);
        assert_eq!(noise_floor(&[5.0]), 0.0);
        // Runs 9, 10, 11: of the 27 resamples, 7 have median 9, 13 median 10, 7 median 11.
        let f = noise_floor(&[9.0, 10.0, 11.0]);
        assert!((f - 14.0 / 27.0 / 10.0).abs() < 1e-12, "{f}");
        let wide = noise_floor(&[5.0, 10.0, 15.0]);
        assert!(wide > 4.0 * f, "{wide} against {f}");
        // Many runs: drawn resamples, the same figure every time.
        let many: Vec<f64> = (0..12).map(|i| 10.0 + f64::from(i % 5)).collect();
        let g = noise_floor(&many);
        assert!(g > 0.0 && g < 0.2 && g == noise_floor(&many), "{g}");
    }
}
