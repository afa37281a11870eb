//! The closing lines of `hkv-bench placement`: each workload's outcome, summed up over all
//! of them.

use hkv_engine::Task;

/// What a workload contributes to the closing lines.
pub(super) struct Outcome {
    pub errors: Vec<f64>,
    /// The same placements' errors with each run predicted just before it ran.
    pub online_errors: Vec<f64>,
    /// Of the placements in `errors`, those whose error is no larger than the run-to-run
    /// spread of their own measurement: there the model is as close as the machine can tell.
    pub errors_in_spread: usize,
    pub startup_errors: Vec<f64>,
    /// Per placement in `errors`: its runs' noise floor, and its device tasks with the
    /// model's signed error (predicted - measured, over measured).
    pub floors: Vec<f64>,
    pub signed: Vec<(usize, f64)>,
    pub auto_gap: f64,
    pub within_spread: bool,
}

/// Prints the closing lines over every workload's outcome.
pub(super) fn print(outcomes: &[Outcome]) {
    let all = |f: fn(&Outcome) -> &Vec<f64>| -> Vec<f64> {
        outcomes.iter().flat_map(|o| f(o).iter().copied()).collect()
    };
    let errors = all(|o| &o.errors);
    let worst = outcomes.iter().map(|o| o.auto_gap).fold(0.0, f64::max);
    let in_spread = outcomes.iter().filter(|o| o.within_spread).count();
    println!(
        "auto within the run-to-run spread of the best on {in_spread} of {} workloads",
        outcomes.len()
    );
    let (avg, max) = avg_max(&all(|o| &o.startup_errors));
    println!("model error from start-up calibration alone avg {avg:.1}% max {max:.1}%");
    let (avg, max) = avg_max(&errors);
    println!(
        "model error avg {avg:.1}% max {max:.1}% (placements other than the all-CPU reference)"
    );
    let (avg, max) = avg_max(&all(|o| &o.online_errors));
    println!("model error, each run predicted just before it: avg {avg:.1}% max {max:.1}%");
    let (avg, max) = avg_max(&all(|o| &o.floors));
    println!(
        "noise floor (a model that knew each placement's true throughput) avg {avg:.1}% max {max:.1}%"
    );
    // A model off in one direction for some kind of placement shows here; noise does not.
    // Tasks with no batches in a workload (placed with the search) are not counted.
    let signed: Vec<(usize, f64)> = outcomes.iter().flat_map(|o| o.signed.clone()).collect();
    let by_tasks: Vec<String> = (1..=Task::ALL.len())
        .filter_map(|d| {
            let e: Vec<f64> = signed.iter().filter(|s| s.0 == d).map(|s| s.1).collect();
            (!e.is_empty()).then(|| {
                let mean = e.iter().sum::<f64>() / e.len() as f64;
                format!("{d}: {:+.1}% ({})", mean * 100.0, e.len())
            })
        })
        .collect();
    println!(
        "model bias (mean signed error) by tasks with batches on the device: {}",
        by_tasks.join(", ")
    );
    let in_spread_errors: usize = outcomes.iter().map(|o| o.errors_in_spread).sum();
    println!(
        "model error within the run-to-run spread of the measurement on {in_spread_errors} of {} placements",
        errors.len()
    );
    println!("chosen within {:.1}% of the best", worst * 100.0);
}

/// The mean and the largest of `v`, as percentages.
fn avg_max(v: &[f64]) -> (f64, f64) {
    (
        v.iter().sum::<f64>() / v.len().max(1) as f64 * 100.0,
        v.iter().copied().fold(0.0, f64::max) * 100.0,
    )
}
