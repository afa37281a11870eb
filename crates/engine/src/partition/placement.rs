//! Where a vector update runs: on the partition's CPU thread or as an OpenCL kernel on the
//! index's device. `auto` places it with the cost model of `--placement` (one more task,
//! DIDO's model applied to KV-Direct's operations): a line `t(bytes) = fixed + per_byte x
//! bytes` per processor, timed at start-up on values of growing size and refitted from
//! every update that runs, each update going where its line is cheaper at its value's size
//! (on PoCL and for values up to 1 MiB that is the CPU: every device call copies the value
//! in and out around a launch).

use std::time::Instant;

use hkv_index::opencl::OclVector;
use hkv_types::{Elem, UpdateOp};

use crate::cost::ProcPair;
use crate::policy::Proc;
use crate::vector::{self, Operand};

/// `--vector-placement`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VectorPlacement {
    /// Always on the CPU.
    Cpu,
    /// On the device whenever there is one (for experiments and the differential test).
    Device,
    /// Where the cost model predicts the update is cheaper, at its value's size.
    #[default]
    Auto,
}

impl VectorPlacement {
    pub fn name(self) -> &'static str {
        match self {
            VectorPlacement::Cpu => "cpu",
            VectorPlacement::Device => "device",
            VectorPlacement::Auto => "auto",
        }
    }
}

/// The kernels' numbering of element types and operations (their order in hkv-types).
pub(crate) fn kernel_codes(elem: Elem, op: UpdateOp) -> (usize, u32) {
    let e = Elem::ALL.iter().position(|&x| x == elem).unwrap_or(0);
    let o = UpdateOp::ALL.iter().position(|&x| x == op).unwrap_or(0);
    (e, o as u32)
}

/// Sizes `auto` times at start-up, smallest first.
const CALIBRATION_SIZES: [usize; 5] = [256, 4 << 10, 64 << 10, 256 << 10, 1 << 20];
const CALIBRATION_REPS: usize = 5;

fn median_ns(mut f: impl FnMut()) -> u128 {
    let mut t: Vec<u128> = (0..CALIBRATION_REPS)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_nanos()
        })
        .collect();
    t.sort_unstable();
    t[t.len() / 2]
}

/// Times a `u32 add` on both processors at each calibration size into a fresh model; None
/// if the device failed (its kernels are then not used).
pub(crate) fn calibrate(dev: &mut OclVector) -> Option<ProcPair> {
    let (e, o) = kernel_codes(Elem::U32, UpdateOp::Add);
    let mut model = ProcPair::default();
    for size in CALIBRATION_SIZES {
        let mut buf = vec![1u8; size];
        let cpu =
            median_ns(|| vector::update(Elem::U32, UpdateOp::Add, &mut buf, Operand::Scalar(1)));
        let mut failed = false;
        let device = median_ns(|| failed |= dev.update(e, o, &mut buf, None, 1).is_err());
        tracing::info!(
            size,
            cpu_ns = cpu as u64,
            device_ns = device as u64,
            "vector placement calibration"
        );
        if failed {
            return None;
        }
        model.record(Proc::Cpu, size, cpu as f64);
        model.record(Proc::Device, size, device as f64);
    }
    Some(model)
}
