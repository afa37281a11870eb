//! How far a placement's measured median may lie from its true throughput on a noisy
//! machine: the error a perfect model would still show against it (`hkv-bench placement`
//! prints it beside the model's own).

use crate::workload::median;

/// The mean distance, as a share, of the median of a resample of `runs` (as many, with
/// replacement) from their own median: every resample when there are few runs (3 runs: 27),
/// else 4096 drawn by a fixed generator.
pub(super) fn noise_floor(runs: &[f64]) -> f64 {
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
