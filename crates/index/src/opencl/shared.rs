//! The device on the CPU backend's own table (`CL_MEM_USE_HOST_PTR`), where it shares host
//! memory: either processor can then run any index operation; or, where it does not (a
//! discrete GPU), on a copy of that table kept up to date by the host, so that searches can
//! run on either (docs/placement.md).

use std::ptr;

use opencl3::memory::{Buffer, CL_MEM_READ_WRITE, CL_MEM_USE_HOST_PTR};
use opencl3::types::{cl_uint, CL_NON_BLOCKING};

use super::{err, OclIndex, SLOTS_PER_BUCKET};
use crate::dirty::Changes;
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
        let words = self.one_table(buckets)?;
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
        self.mirror = false;
        Ok(())
    }

    /// Checks that a table of `buckets` fits one allocation, and makes way for it (no call
    /// in flight on the old one); returns its words.
    fn one_table(&mut self, buckets: u32) -> Result<usize, IndexError> {
        if !buckets.is_power_of_two() || buckets as u64 * 64 > self.max_alloc {
            return Err(IndexError::Size(format!(
                "{buckets} buckets do not fit one device allocation"
            )));
        }
        self.launch()?;
        self.drain();
        Ok(buckets as usize * 2 * SLOTS_PER_BUCKET)
    }

    /// Whether the table is the host's (see [`OclIndex::share_host_table`]).
    pub fn is_shared(&self) -> bool {
        self.shared
    }
}

impl OclIndex {
    /// Makes the table a copy of the CPU backend's, for a device that cannot read host
    /// memory (a discrete GPU): the CPU alone writes the table, and [`OclIndex::sync_mirror`]
    /// brings the copy up to date before each device search, so searches can run on either
    /// processor. Needs one allocation for the whole table; the copy starts empty and is
    /// filled by the first sync.
    pub fn mirror_table(&mut self, buckets: u32) -> Result<(), IndexError> {
        let words = self.one_table(buckets)?;
        // SAFETY: a fresh device buffer of `words` u32s, no host pointer.
        let buffer = unsafe {
            Buffer::<cl_uint>::create(&self.context, CL_MEM_READ_WRITE, words, ptr::null_mut())
        }
        .map_err(|e| err("mirror table", e))?;
        self.tables = vec![buffer];
        self.mask = buckets - 1;
        self.sub_shift = buckets.trailing_zeros();
        self.shared = false;
        self.steal = false;
        self.mirror = true;
        Ok(())
    }

    /// Whether the table is a copy of the host's ([`OclIndex::mirror_table`]).
    pub fn is_mirror(&self) -> bool {
        self.mirror
    }

    /// Copies what changed in the host's table (`words`, index.cl's layout) to the mirror,
    /// and waits for the copies; returns the bytes sent.
    pub fn sync_mirror(&mut self, words: &[u32], changes: &Changes) -> Result<u64, IndexError> {
        let per_bucket = 2 * SLOTS_PER_BUCKET;
        let ranges: Vec<std::ops::Range<usize>> = match changes {
            Changes::Nothing => return Ok(0),
            Changes::All => std::iter::once(0..words.len()).collect(),
            Changes::Runs(runs) => runs
                .iter()
                .map(|r| r.start as usize * per_bucket..r.end as usize * per_bucket)
                .collect(),
        };
        if !self.mirror || words.len() != self.bucket_count() as usize * per_bucket {
            return Err(IndexError::Size(
                "the host table does not match the device's mirror".into(),
            ));
        }
        self.launch()?;
        let t = std::time::Instant::now();
        let q = &self.queues[0];
        let mut sent = 0u64;
        for r in ranges.into_iter().filter(|r| r.end <= words.len()) {
            // SAFETY: a non-blocking copy of a live slice within the buffer's length (the
            // lengths were checked above; the offset is in bytes); `words` is borrowed until
            // the `finish` below.
            unsafe {
                q.enqueue_write_buffer(
                    &mut self.tables[0],
                    CL_NON_BLOCKING,
                    r.start * std::mem::size_of::<u32>(),
                    &words[r.clone()],
                    &[],
                )
            }
            .map_err(|e| {
                // The copies already queued read `words`: wait for them before returning.
                let _ = q.finish();
                err("mirror copy", e)
            })?;
            sent += (r.len() * 4) as u64;
        }
        // Searches alternate over both queues: the copies must be done before any starts.
        q.finish().map_err(|e| err("finish", e))?;
        self.timing.copy_ns.fetch_add(
            t.elapsed().as_nanos() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.mirror_bytes += sent;
        Ok(sent)
    }

    /// Bytes sent to the mirror so far.
    pub fn mirror_bytes(&self) -> u64 {
        self.mirror_bytes
    }
}
