//! The device on the CPU backend's own table (`CL_MEM_USE_HOST_PTR`), where it shares host
//! memory: either processor can then run any index operation (docs/placement.md).

use opencl3::memory::{Buffer, CL_MEM_READ_WRITE, CL_MEM_USE_HOST_PTR};
use opencl3::types::cl_uint;

use super::{err, OclIndex, SLOTS_PER_BUCKET};
use crate::IndexError;

impl OclIndex {
    /// Makes the kernels work on the CPU backend's table in place (`CL_MEM_USE_HOST_PTR`),
    /// so either processor can run any index operation on one table with nothing to copy
    /// or keep in step (DIDO's shared index on coupled CPU-GPU chips). Only where the device
    /// shares host memory and the table fits one allocation; the caller checks with a probe
    /// that the device really reads and writes those bytes (`Index::share` in the engine).
    ///
    /// # Safety
    /// `table` must point to `buckets` buckets (16 words each, index.cl's layout) that stay
    /// allocated until this table is replaced (`resize`, another share) or the index is
    /// dropped, and the host must not touch them while a call of this index runs (every
    /// call waits for its kernels before it returns).
    pub unsafe fn share_host_table(
        &mut self,
        table: *mut u32,
        buckets: u32,
    ) -> Result<(), IndexError> {
        if !self.info.host_unified_memory {
            return Err(IndexError::Device(
                "the device does not share host memory".into(),
            ));
        }
        if !buckets.is_power_of_two() || buckets as u64 * 64 > self.max_alloc {
            return Err(IndexError::Size(format!(
                "{buckets} buckets do not fit one device allocation"
            )));
        }
        self.launch()?;
        self.drain();
        let words = buckets as usize * 2 * SLOTS_PER_BUCKET;
        // SAFETY: the caller guarantees `words` live words at `table` for the buffer's life.
        let buffer = unsafe {
            Buffer::<cl_uint>::create(
                &self.context,
                CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                words,
                table.cast(),
            )
        }
        .map_err(|e| err("shared table", e))?;
        self.tables = vec![buffer];
        self.mask = buckets - 1;
        self.sub_shift = buckets.trailing_zeros();
        self.shared = true;
        Ok(())
    }

    /// Whether the table is the host's (see [`OclIndex::share_host_table`]).
    pub fn is_shared(&self) -> bool {
        self.shared
    }
}
