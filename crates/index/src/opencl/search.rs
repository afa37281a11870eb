//! Batched search on the device: chunks alternating over two queues, and the sub-tables of
//! a table larger than one device allocation.

use opencl3::kernel::ExecuteKernel;
use opencl3::memory::Buffer;
use opencl3::types::{cl_uint, CL_NON_BLOCKING};

use super::{err, OclIndex, GPU_PIPELINE_CHUNK, GROUP, PIPELINE_CHUNK};
use crate::hash::KeyHash;
use crate::{IndexError, Location, NO_LOCATION};

/// Where the time of a split search went (see [`OclIndex::try_search_split`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// From the launch until the thread finished its own share.
    pub host_ns: u64,
    /// Then, until the device's share was done.
    pub wait_ns: u64,
}

impl OclIndex {
    /// Batched search. A large batch is cut into chunks that alternate between two in-order
    /// queues, so one chunk's copies overlap another's kernel (Mega-KV's streams). Device
    /// time is read from profiling events: copy and kernel time as the device saw them.
    pub fn try_search(&self, hashes: &[KeyHash], out: &mut [Location]) -> Result<(), IndexError> {
        if self.tables.len() == 1 {
            return self.search_in(0, hashes, out, || {});
        }
        for t in 0..self.tables.len() {
            let idx: Vec<usize> = (0..hashes.len())
                .filter(|&i| self.table_of(&hashes[i]) == t)
                .collect();
            if idx.is_empty() {
                continue;
            }
            let hs: Vec<KeyHash> = idx.iter().map(|&i| hashes[i]).collect();
            let mut o = vec![NO_LOCATION; hs.len()];
            self.search_in(t, &hs, &mut o, || {})?;
            for (j, &i) in idx.iter().enumerate() {
                out[i] = o[j];
            }
        }
        Ok(())
    }

    /// Which sub-table holds a key's buckets.
    pub(super) fn table_of(&self, h: &KeyHash) -> usize {
        ((h.lo >> self.sub_shift) as usize) & (self.tables.len() - 1)
    }

    /// Number of sub-tables the index is split into.
    pub fn sub_tables(&self) -> usize {
        self.tables.len()
    }

    /// A search split between the device and the calling thread (KV-Direct's load
    /// dispatch, applied to processors): the device gets the first `device_share` queries,
    /// enqueued without waiting, and the thread runs `cpu` on the rest meanwhile, then
    /// waits for the device. For a table of one buffer (a shared table); returns how long
    /// the thread's own part took and how long it then waited for the device.
    pub fn try_search_split(
        &self,
        hashes: &[KeyHash],
        out: &mut [Location],
        device_share: usize,
        cpu: impl FnOnce(&[KeyHash], &mut [Location]),
    ) -> Result<Split, IndexError> {
        if self.tables.len() != 1 {
            return Err(IndexError::Size(
                "a split search needs a table of one buffer".into(),
            ));
        }
        let k = device_share.min(hashes.len());
        let (device_out, host_out) = out.split_at_mut(k);
        let mut split = Split::default();
        let mut host = Some(cpu);
        let start = std::time::Instant::now();
        self.search_in(0, &hashes[..k], device_out, || {
            if let Some(cpu) = host.take() {
                cpu(&hashes[k..], host_out);
            }
            split.host_ns = start.elapsed().as_nanos() as u64;
        })?;
        if let Some(cpu) = host.take() {
            // The device had nothing to do: the thread did all of it.
            cpu(&hashes[k..], host_out);
            split.host_ns = start.elapsed().as_nanos() as u64;
        }
        split.wait_ns = (start.elapsed().as_nanos() as u64).saturating_sub(split.host_ns);
        Ok(split)
    }

    /// Searches `hashes` in sub-table `t`; `between` runs once the device's work is
    /// enqueued, before waiting for it.
    fn search_in(
        &self,
        t: usize,
        hashes: &[KeyHash],
        out: &mut [Location],
        between: impl FnOnce(),
    ) -> Result<(), IndexError> {
        let n = hashes.len();
        if n == 0 {
            return Ok(());
        }
        self.launch()?;
        self.timing
            .batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sigs: Vec<u32> = hashes.iter().map(|h| h.sig).collect();
        let los: Vec<u32> = hashes.iter().map(|h| h.lo).collect();
        // A GPU runs a 1024-query chunk in a few microseconds, less than the calls that
        // set it up: it gets larger chunks (measured on an H100: 14 M searches/s in chunks
        // of 1024 at batches of 32768, docs/bench/gpu-h100-2026-11-26-run1.txt).
        let pipeline = if self.info.is_gpu {
            GPU_PIPELINE_CHUNK
        } else {
            PIPELINE_CHUNK
        };
        let chunk = if n >= 2 * pipeline { pipeline } else { n };
        let mask = self.mask;
        let mut buffers = Vec::new();
        let mut copies = Vec::new();
        let mut kernels = Vec::new();
        // Every enqueue is inside this closure, so that a failed one waits for those
        // before it (they read `sigs` and `los` and write `out`) before the call returns.
        let mut enqueue = || -> Result<(), IndexError> {
            for (ci, start) in (0..n).step_by(chunk).enumerate() {
                let end = (start + chunk).min(n);
                let m = end - start;
                let q = &self.queues[ci % self.queues.len()];
                let zero_copy = self.zero_copy;
                let SearchBuffers {
                    sigs: mut bs,
                    los: mut bl,
                    out: bo,
                    cap,
                } = if zero_copy {
                    // The device reads host memory directly: no copy in.
                    SearchBuffers {
                        sigs: self.host_input(&sigs[start..end])?,
                        los: self.host_input(&los[start..end])?,
                        out: self.scratch(m)?,
                        cap: 0,
                    }
                } else {
                    self.search_buffers(m)?
                };
                let mm = m as cl_uint;
                // SAFETY: non-blocking copies from `sigs` and `los` and into `out`, all of which
                // outlive the `finish` of every queue below; each buffer holds m words; the kernel's
                // arguments match `search` in index.cl and it guards i < m.
                unsafe {
                    if !zero_copy {
                        copies.push(
                            q.enqueue_write_buffer(
                                &mut bs,
                                CL_NON_BLOCKING,
                                0,
                                &sigs[start..end],
                                &[],
                            )
                            .map_err(|e| err("copy in", e))?,
                        );
                        copies.push(
                            q.enqueue_write_buffer(
                                &mut bl,
                                CL_NON_BLOCKING,
                                0,
                                &los[start..end],
                                &[],
                            )
                            .map_err(|e| err("copy in", e))?,
                        );
                    }
                    kernels.push(
                        ExecuteKernel::new(&self.search)
                            .set_arg(&self.tables[t])
                            .set_arg(&bs)
                            .set_arg(&bl)
                            .set_arg(&bo)
                            .set_arg(&mm)
                            .set_arg(&mask)
                            .set_global_work_size(Self::global(m))
                            .set_local_work_size(GROUP)
                            .enqueue_nd_range(q)
                            .map_err(|e| err("search", e))?,
                    );
                    copies.push(
                        q.enqueue_read_buffer(&bo, CL_NON_BLOCKING, 0, &mut out[start..end], &[])
                            .map_err(|e| err("copy out", e))?,
                    );
                }
                buffers.push(SearchBuffers {
                    sigs: bs,
                    los: bl,
                    out: bo,
                    cap,
                });
            }
            Ok(())
        };
        if let Err(e) = enqueue() {
            for q in &self.queues {
                let _ = q.finish();
            }
            return Err(e);
        }
        between();
        for q in &self.queues {
            q.finish().map_err(|e| err("finish", e))?;
        }
        let span = |e: &opencl3::event::Event| -> u64 {
            match (e.profiling_command_start(), e.profiling_command_end()) {
                (Ok(a), Ok(b)) => b.saturating_sub(a),
                _ => 0,
            }
        };
        use std::sync::atomic::Ordering::Relaxed;
        self.timing
            .copy_ns
            .fetch_add(copies.iter().map(span).sum(), Relaxed);
        self.timing
            .kernel_ns
            .fetch_add(kernels.iter().map(span).sum(), Relaxed);
        // Every queue has finished: no kernel or copy uses them any more.
        let mut pool = self.search_pool.lock().unwrap_or_else(|p| p.into_inner());
        for b in buffers.into_iter().filter(|b| b.cap > 0) {
            if pool.len() < SEARCH_POOL {
                pool.push(b);
            } else if let Some(small) = pool.iter_mut().min_by_key(|p| p.cap) {
                // Larger sets replace smaller ones: a pool of small sets would make every
                // larger call allocate afresh.
                if small.cap < b.cap {
                    *small = b;
                }
            }
        }
        Ok(())
    }

    /// Copy-in buffers for a search chunk of `m` queries: from the pool when one is large
    /// enough (creating three buffers cost an H100 more than its kernel), else new ones of
    /// at least [`PIPELINE_CHUNK`] queries.
    fn search_buffers(&self, m: usize) -> Result<SearchBuffers, IndexError> {
        let mut pool = self.search_pool.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = pool.iter().position(|b| b.cap >= m) {
            return Ok(pool.swap_remove(i));
        }
        drop(pool);
        // At least a whole chunk of this device's, so that a few sizes cover every call.
        let chunk = if self.info.is_gpu {
            GPU_PIPELINE_CHUNK
        } else {
            PIPELINE_CHUNK
        };
        let cap = m.next_power_of_two().max(chunk);
        Ok(SearchBuffers {
            sigs: self.input(cap)?,
            los: self.input(cap)?,
            out: self.scratch(cap)?,
            cap,
        })
    }
}

/// Buffer sets kept for later searches: one per chunk in flight at once.
const SEARCH_POOL: usize = 4;

/// One search chunk's device buffers; `cap` queries (0: over host memory, not kept).
pub(super) struct SearchBuffers {
    sigs: Buffer<cl_uint>,
    los: Buffer<cl_uint>,
    out: Buffer<cl_uint>,
    cap: usize,
}
