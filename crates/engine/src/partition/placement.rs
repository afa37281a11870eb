//! Where a vector update runs: on the partition's CPU thread or as an OpenCL kernel on the
//! index's device. `auto` times both at start-up on values of growing size and sends to the
//! device only the sizes from which it was faster (on PoCL and for values up to 1 MiB it
//! never is: every call copies the value in and out around a launch). This is a fixed
//! threshold for now; a placement model that revises it online is the DIDO issue's.

use std::time::Instant;

use hkv_index::opencl::OclVector;
use hkv_types::{Elem, UpdateOp};

use crate::vector::{self, Operand};

/// `--vector-placement`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VectorPlacement {
    /// Always on the CPU.
    Cpu,
    /// On the device whenever there is one (for experiments and the differential test).
    Device,
    /// On the device from the value size at which start-up timing found it faster.
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

/// Sizes `auto` tries, smallest first.
const CALIBRATION_SIZES: [usize; 4] = [4 << 10, 64 << 10, 256 << 10, 1 << 20];
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

/// The smallest value size at which the device ran a `u32 add` faster than the CPU, or
/// `None` if it never did (or failed).
pub(crate) fn calibrate(dev: &mut OclVector) -> Option<usize> {
    let (e, o) = kernel_codes(Elem::U32, UpdateOp::Add);
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
        if device < cpu {
            return Some(size);
        }
    }
    None
}
