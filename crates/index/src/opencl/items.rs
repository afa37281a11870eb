//! KC and RD as OpenCL kernels (`items.cl`), on a device that shares host memory: the slab
//! arena is one `CL_MEM_USE_HOST_PTR` buffer, so the kernels read items where the CPU wrote
//! them (DIDO's shared-memory KC and RD on coupled CPU-GPU chips). The item layout is the
//! store's, given as build options by the caller (this crate does not know items).

use std::ptr;

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::kernel::{ExecuteKernel, Kernel};
use opencl3::memory::{
    Buffer, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_ONLY, CL_MEM_USE_HOST_PTR, CL_MEM_WRITE_ONLY,
};
use opencl3::program::Program;
use opencl3::types::{cl_uchar, cl_uint, cl_ulong, CL_BLOCKING};

use super::{err, OclIndex, GROUP};
use crate::IndexError;

const SOURCE: &str = include_str!("items.cl");

/// `kc`'s `at` for a query whose search found nothing.
pub const NO_CHUNK: u64 = u64::MAX;

/// KC's verdict on one query (items.cl's `KC_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KcVerdict {
    /// No item at the location (free, retired, or no location).
    Miss,
    /// The key's item, expired.
    Expired,
    /// The key's live item.
    Live,
    /// A live item of another key: the signature collided.
    OtherKey,
}

/// `kc`'s value length for a value stored in parts: RD of it stays on the host.
pub const VALUE_CHAINED: u32 = u32::MAX;

/// The KC and RD kernels of one device, over one arena.
pub struct OclItems {
    queue: CommandQueue,
    kc: Kernel,
    rd: Kernel,
    arena: Buffer<cl_uchar>,
    context: Context,
    _program: Program,
}

// SAFETY: as for `OclIndex`: OpenCL handles are thread-safe, and the kernels' arguments are
// only set through `&mut self` by the one partition that owns this.
unsafe impl Send for OclItems {}

impl std::fmt::Debug for OclItems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OclItems").finish()
    }
}

impl OclIndex {
    /// Builds the KC and RD kernels for this index's device over the arena at `base`
    /// (`len` bytes), with the item layout `layout` (`-D NAME=value` pairs).
    ///
    /// # Safety
    /// `base` must point to `len` bytes that stay mapped for the life of the returned
    /// kernels, and while a call of them runs no one may write the chunks it was given
    /// (each call waits for its kernels before it returns, so a caller that owns those
    /// chunks and makes the call from its own thread meets this).
    pub unsafe fn item_unit(
        &self,
        base: *mut u8,
        len: usize,
        layout: &[(&str, u32)],
    ) -> Result<OclItems, IndexError> {
        if !self.info.host_unified_memory {
            return Err(IndexError::Device(
                "the device does not share host memory".into(),
            ));
        }
        if len as u64 > self.max_alloc || len == 0 {
            return Err(IndexError::Size(format!(
                "an arena of {len} bytes is not one device allocation"
            )));
        }
        let device = super::devices()
            .into_iter()
            .nth(self.info.index)
            .map(|(_, d)| d)
            .ok_or_else(|| IndexError::Device("the index's device is gone".into()))?;
        let _guard = super::SETUP.lock().unwrap_or_else(|p| p.into_inner());
        let context = Context::from_device(&device).map_err(|e| err("items context", e))?;
        let options: String = layout
            .iter()
            .map(|(k, v)| format!("-D {k}={v}u "))
            .collect();
        let program = Program::create_and_build_from_source(&context, SOURCE, &options)
            .map_err(|e| err("items build", e))?;
        let kc = Kernel::create(&program, "kc").map_err(|e| err("kc kernel", e))?;
        let rd = Kernel::create(&program, "rd").map_err(|e| err("rd kernel", e))?;
        // SAFETY: an in-order queue on a valid context and device.
        let queue = unsafe { CommandQueue::create_with_properties(&context, device.id(), 0, 0) }
            .map_err(|e| err("items queue", e))?;
        // SAFETY: the caller guarantees `len` mapped bytes at `base` for the buffer's life.
        let arena = unsafe {
            Buffer::<cl_uchar>::create(
                &context,
                CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR,
                len,
                base.cast(),
            )
        }
        .map_err(|e| err("arena buffer", e))?;
        Ok(OclItems {
            queue,
            kc,
            rd,
            arena,
            context,
            _program: program,
        })
    }
}

/// A read-only device copy of `data` (at least one element: OpenCL has no empty buffers).
fn input<T: Copy + Default>(context: &Context, data: &[T]) -> Result<Buffer<T>, IndexError> {
    let one = [T::default()];
    let data = if data.is_empty() { &one[..] } else { data };
    // SAFETY: COPY_HOST_PTR copies `data.len()` elements from a live slice at creation.
    unsafe {
        Buffer::<T>::create(
            context,
            CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
            data.len(),
            data.as_ptr() as *mut std::ffi::c_void,
        )
    }
    .map_err(|e| err("items input", e))
}

fn output<T>(context: &Context, len: usize) -> Result<Buffer<T>, IndexError> {
    // SAFETY: a fresh buffer with no host pointer.
    unsafe { Buffer::<T>::create(context, CL_MEM_WRITE_ONLY, len.max(1), ptr::null_mut()) }
        .map_err(|e| err("items output", e))
}

impl OclItems {
    /// KC of `at.len()` queries: for query `i`, the chunk at byte `at[i]` of the arena
    /// ([`NO_CHUNK`]: none) against the key `keys[key_at[i]..key_at[i + 1]]` at Unix time
    /// `now`. Returns each verdict and, for a live item, its value's length
    /// ([`VALUE_CHAINED`] for a value in parts), into `found` and `value_len`.
    pub fn kc(
        &mut self,
        at: &[u64],
        keys: &[u8],
        key_at: &[u32],
        now: u32,
        found: &mut Vec<KcVerdict>,
        value_len: &mut Vec<u32>,
    ) -> Result<(), IndexError> {
        let n = at.len();
        if key_at.len() != n + 1 || key_at.last().is_some_and(|&e| e as usize > keys.len()) {
            return Err(IndexError::Size("kc: key offsets".into()));
        }
        found.clear();
        value_len.clear();
        if n == 0 {
            return Ok(());
        }
        let n32 = cl_uint::try_from(n).map_err(|_| IndexError::Size("kc batch".into()))?;
        let at_buf = input::<cl_ulong>(&self.context, at)?;
        let keys_buf = input::<cl_uchar>(&self.context, keys)?;
        let key_at_buf = input::<cl_uint>(&self.context, key_at)?;
        let verdicts = output::<cl_uchar>(&self.context, n)?;
        let lens = output::<cl_uint>(&self.context, n)?;
        let mut raw = vec![0u8; n];
        value_len.resize(n, 0);
        // SAFETY: every buffer holds at least `n` (key_at: n + 1) elements, as the kernel
        // reads and writes; the blocking reads copy `n` elements into slices of length `n`.
        unsafe {
            ExecuteKernel::new(&self.kc)
                .set_arg(&self.arena)
                .set_arg(&at_buf)
                .set_arg(&keys_buf)
                .set_arg(&key_at_buf)
                .set_arg(&now)
                .set_arg(&n32)
                .set_arg(&verdicts)
                .set_arg(&lens)
                .set_global_work_size(n.div_ceil(GROUP) * GROUP)
                .set_local_work_size(GROUP)
                .enqueue_nd_range(&self.queue)
                .map_err(|e| err("kc kernel", e))?;
            self.queue
                .enqueue_read_buffer(&verdicts, CL_BLOCKING, 0, &mut raw, &[])
                .map_err(|e| err("kc out", e))?;
            self.queue
                .enqueue_read_buffer(&lens, CL_BLOCKING, 0, value_len, &[])
                .map_err(|e| err("kc out", e))?;
        }
        found.extend(raw.iter().map(|&v| match v {
            1 => KcVerdict::Expired,
            2 => KcVerdict::Live,
            3 => KcVerdict::OtherKey,
            _ => KcVerdict::Miss,
        }));
        Ok(())
    }

    /// RD of `at.len()` live flat items: the value of the item whose chunk is at byte
    /// `at[i]` of the arena goes to `out[out_at[i]..out_at[i + 1]]` (the lengths KC gave),
    /// `out` resized to `out_at`'s last offset.
    pub fn rd(&mut self, at: &[u64], out_at: &[u32], out: &mut Vec<u8>) -> Result<(), IndexError> {
        let n = at.len();
        if out_at.len() != n + 1 || out_at.windows(2).any(|w| w[0] > w[1]) {
            return Err(IndexError::Size("rd: value offsets".into()));
        }
        let total = out_at[n] as usize;
        out.clear();
        out.resize(total, 0);
        if n == 0 {
            return Ok(());
        }
        let n32 = cl_uint::try_from(n).map_err(|_| IndexError::Size("rd batch".into()))?;
        let at_buf = input::<cl_ulong>(&self.context, at)?;
        let out_at_buf = input::<cl_uint>(&self.context, out_at)?;
        let values = output::<cl_uchar>(&self.context, total)?;
        // SAFETY: `at` and `out_at` hold n and n + 1 elements; the kernel writes
        // out_at[n] = `total` bytes of `values`, which the blocking read copies into `out`,
        // `total` bytes long.
        unsafe {
            ExecuteKernel::new(&self.rd)
                .set_arg(&self.arena)
                .set_arg(&at_buf)
                .set_arg(&out_at_buf)
                .set_arg(&n32)
                .set_arg(&values)
                .set_global_work_size(n * GROUP)
                .set_local_work_size(GROUP)
                .enqueue_nd_range(&self.queue)
                .map_err(|e| err("rd kernel", e))?;
            if total > 0 {
                self.queue
                    .enqueue_read_buffer(&values, CL_BLOCKING, 0, out, &[])
                    .map_err(|e| err("rd out", e))?;
            } else {
                self.queue.finish().map_err(|e| err("rd", e))?;
            }
        }
        Ok(())
    }
}
