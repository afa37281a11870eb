//! Vector updates as OpenCL kernels (`vector.cl`), on the index's device and context: the
//! value is copied in, one work-item per element applies the operation, and the value is
//! copied back. The engine decides when this pays (see `hkv_engine`'s vector placement).

use std::ptr;

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::kernel::{ExecuteKernel, Kernel};
use opencl3::memory::{Buffer, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE};
use opencl3::program::Program;
use opencl3::types::{cl_uchar, cl_uint, cl_ulong, CL_BLOCKING};

use super::{err, OclIndex};
use crate::IndexError;

const SOURCE: &str = include_str!("vector.cl");
const GROUP: usize = 64;

/// Element types in the kernels' order: `u8 u16 u32 u64 i8 i16 i32 i64 f32 f64`, as
/// `(kernel suffix, bytes)`.
pub const ELEMENTS: [(&str, usize); 10] = [
    ("u8", 1),
    ("u16", 2),
    ("u32", 4),
    ("u64", 8),
    ("i8", 1),
    ("i16", 2),
    ("i32", 4),
    ("i64", 8),
    ("f32", 4),
    ("f64", 8),
];

/// The vector kernels of one device; `None` for a type the device cannot do (f64 without
/// `cl_khr_fp64`).
pub struct OclVector {
    queue: CommandQueue,
    kernels: Vec<Option<Kernel>>,
    context: Context,
    _program: Program,
}

// SAFETY: as for `OclIndex`: OpenCL handles are thread-safe, and the kernels' arguments are
// only set through `&mut self` by the one partition that owns this.
unsafe impl Send for OclVector {}

impl std::fmt::Debug for OclVector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OclVector").finish()
    }
}

impl OclIndex {
    /// Builds the vector kernels for this index's device.
    pub fn vector_unit(&self) -> Result<OclVector, IndexError> {
        let device = super::devices()
            .into_iter()
            .nth(self.info.index)
            .map(|(_, d)| d)
            .ok_or_else(|| IndexError::Device("the index's device is gone".into()))?;
        let _guard = super::SETUP.lock().unwrap_or_else(|p| p.into_inner());
        // A context of its own: buffers and kernels here never touch the index's.
        let context = Context::from_device(&device).map_err(|e| err("vector context", e))?;
        let program = Program::create_and_build_from_source(&context, SOURCE, "")
            .map_err(|e| err("vector build", e))?;
        let kernels = ELEMENTS
            .iter()
            .map(|(name, _)| Kernel::create(&program, &format!("vupdate_{name}")).ok())
            .collect();
        // SAFETY: an in-order queue on a valid context and device.
        let queue = unsafe { CommandQueue::create_with_properties(&context, device.id(), 0, 0) }
            .map_err(|e| err("vector queue", e))?;
        Ok(OclVector {
            queue,
            kernels,
            context,
            _program: program,
        })
    }
}

impl OclVector {
    /// Whether the device can run element type `elem` (an index into [`ELEMENTS`]).
    pub fn supports(&self, elem: usize) -> bool {
        self.kernels.get(elem).is_some_and(Option::is_some)
    }

    /// Applies `op` (0 add, 1 sub, 2 min, 3 max, 4 and, 5 or, 6 xor, 7 set) to every element
    /// of `value`, with `operand` element by element or, without one, with `scalar`'s bits.
    /// `value.len()` must be a multiple of the element size and `operand`, if given, as long.
    pub fn update(
        &mut self,
        elem: usize,
        op: u32,
        value: &mut [u8],
        operand: Option<&[u8]>,
        scalar: u64,
    ) -> Result<(), IndexError> {
        let Some(Some(kernel)) = self.kernels.get(elem) else {
            return Err(IndexError::Device(format!(
                "no vector kernel for type {elem}"
            )));
        };
        let size = ELEMENTS[elem].1;
        if value.is_empty() {
            return Ok(());
        }
        if !value.len().is_multiple_of(size) || operand.is_some_and(|o| o.len() != value.len()) {
            return Err(IndexError::Size("vector lengths".into()));
        }
        let n = value.len() / size;
        let n32 = cl_uint::try_from(n).map_err(|_| IndexError::Size("vector too long".into()))?;
        // SAFETY: fresh buffers of exactly the value's length; the blocking writes copy from
        // live slices of that length; the kernel reads `n` elements of each and writes `n`
        // of `v`; the blocking read copies back into the live `value`.
        unsafe {
            let mut v = Buffer::<cl_uchar>::create(
                &self.context,
                CL_MEM_READ_WRITE,
                value.len(),
                ptr::null_mut(),
            )
            .map_err(|e| err("vector buffer", e))?;
            self.queue
                .enqueue_write_buffer(&mut v, CL_BLOCKING, 0, value, &[])
                .map_err(|e| err("vector in", e))?;
            let w_len = operand.map_or(1, <[u8]>::len);
            let mut w =
                Buffer::<cl_uchar>::create(&self.context, CL_MEM_READ_ONLY, w_len, ptr::null_mut())
                    .map_err(|e| err("vector buffer", e))?;
            if let Some(o) = operand {
                self.queue
                    .enqueue_write_buffer(&mut w, CL_BLOCKING, 0, o, &[])
                    .map_err(|e| err("vector in", e))?;
            }
            let scalar: cl_ulong = scalar;
            let vec: cl_uint = u32::from(operand.is_some());
            ExecuteKernel::new(kernel)
                .set_arg(&v)
                .set_arg(&w)
                .set_arg(&scalar)
                .set_arg(&op)
                .set_arg(&vec)
                .set_arg(&n32)
                .set_global_work_size(n.div_ceil(GROUP) * GROUP)
                .set_local_work_size(GROUP)
                .enqueue_nd_range(&self.queue)
                .map_err(|e| err("vector kernel", e))?;
            self.queue
                .enqueue_read_buffer(&v, CL_BLOCKING, 0, value, &[])
                .map_err(|e| err("vector out", e))?;
        }
        Ok(())
    }
}
