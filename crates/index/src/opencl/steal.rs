//! Work stealing for device searches (DIDO §IV-C): the kernel's work-groups and the calling
//! thread take 64-query chunks of one batch from a shared counter, so a slow or busy
//! device never holds the batch back: the call returns as soon as every chunk is done,
//! by whoever took it, even if the kernel has not started yet. That kernel then finds no
//! chunk left and ends; its buffers are kept until it has ([`Inflight`]).
//!
//! The counter, the inputs and the results must be the very bytes the host uses, so this
//! runs only on a CPU device (PoCL), whose memory and atomics are the host's, and only
//! after `OclIndex::probe_stealing` has shown it works.

use std::sync::atomic::{AtomicU32, Ordering};

// (`Words` keeps its allocation where it is when moved: a Vec's buffer does not move.)
use std::time::{Duration, Instant};

use opencl3::event::Event;
use opencl3::kernel::ExecuteKernel;
use opencl3::memory::{Buffer, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, CL_MEM_USE_HOST_PTR};
use opencl3::types::cl_uint;

use super::{err, OclIndex, GROUP};
use crate::{IndexError, KeyHash, Location};

/// Searches whose kernels may still be running, at most.
const MAX_INFLIGHT: usize = 16;
/// How long the host waits on the device's last chunks before asking the runtime whether
/// the kernel failed.
const CHECK_EVERY: Duration = Duration::from_millis(1);

/// 128-byte aligned words: PoCL uses a `CL_MEM_USE_HOST_PTR` buffer in place only when it
/// is aligned to the device's base address alignment (1024 bits).
#[repr(C, align(128))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Line([u32; 32]);

struct Words(Vec<Line>);

impl Words {
    fn zeroed(n: usize) -> Words {
        Words(vec![Line([0; 32]); n.div_ceil(32).max(1)])
    }

    fn words(&mut self) -> &mut [u32] {
        bytemuck::cast_slice_mut(&mut self.0)
    }
}

/// A stealing search whose kernel may still be running. Dropped once it has completed
/// (or when the queue has been drained): the buffers first, then the host memory.
pub(super) struct Inflight {
    event: Event,
    _buffers: Vec<Buffer<cl_uint>>,
    _words: Vec<Words>,
}

impl Inflight {
    fn complete(&self) -> bool {
        // CL_COMPLETE is 0; a negative status is an error, also the end of the kernel.
        self.event
            .command_execution_status()
            .map_or(true, |s| s.0 <= 0)
    }
}

/// Waits for a queue when dropped armed: a search that fails or unwinds half-way must not
/// free buffers a kernel may still be using.
struct FinishOnDrop<'a>(Option<&'a opencl3::command_queue::CommandQueue>);

impl FinishOnDrop<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for FinishOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(q) = self.0 {
            let _ = q.finish();
        }
    }
}

/// Chunks of one stealing search, by who did them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stolen {
    pub host: u64,
    pub device: u64,
}

impl OclIndex {
    /// Whether searches can be shared with the calling thread (see the module).
    pub fn steals(&self) -> bool {
        self.steal
    }

    /// Drops the searches whose kernels have finished; past [`MAX_INFLIGHT`] waits for all,
    /// so the memory held for late kernels stays bounded (a few batches' inputs and results).
    pub(super) fn reap(&mut self) {
        self.inflight.retain(|f| !f.complete());
        if self.inflight.len() >= MAX_INFLIGHT {
            self.drain();
        }
    }

    /// Waits for every kernel, so nothing still reads memory the host is about to reuse.
    pub(super) fn drain(&mut self) {
        for q in &self.queues {
            let _ = q.finish();
        }
        self.inflight.clear();
    }

    /// Turns stealing on if this is a CPU device on a shared table and a trial shows both
    /// sides' results arrive whole (`HKV_OPENCL_STEAL=0` keeps it off, for comparisons).
    pub fn probe_stealing(&mut self) -> bool {
        self.steal = false;
        if !self.info.is_cpu
            || !self.shared
            || std::env::var("HKV_OPENCL_STEAL").as_deref() == Ok("0")
        {
            return false;
        }
        let n = 20 * GROUP + 5;
        let mut x = 0x1234_5679u32;
        let hashes: Vec<KeyHash> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                KeyHash {
                    sig: x | 1,
                    lo: x.rotate_left(11),
                }
            })
            .collect();
        let mut want = vec![0; n];
        if self.try_search(&hashes, &mut want).is_err() {
            return false;
        }
        let mark = |h: &KeyHash| h.sig ^ 0xA5A5_A5A5;
        let mut all_device = vec![0; n];
        let mut shared = vec![0; n];
        let ok = matches!(
            self.try_search_stealing(&hashes, &mut all_device, false, |_, _| {}),
            Ok(s) if s.host == 0
        ) && all_device == want
            && self
                .try_search_stealing(&hashes, &mut shared, true, |h, o| {
                    for (o, h) in o.iter_mut().zip(h) {
                        *o = mark(h);
                    }
                })
                .is_ok()
            && (0..n).all(|i| shared[i] == want[i] || shared[i] == mark(&hashes[i]));
        self.drain();
        self.steal = ok;
        ok
    }

    /// A batched search shared with the calling thread, which runs `cpu` on the chunks it
    /// takes (`host_takes` false: it only waits, as the start-up probe needs).
    pub fn try_search_stealing(
        &mut self,
        hashes: &[KeyHash],
        out: &mut [Location],
        host_takes: bool,
        cpu: impl Fn(&[KeyHash], &mut [Location]),
    ) -> Result<Stolen, IndexError> {
        let n = hashes.len();
        if n == 0 {
            return Ok(Stolen::default());
        }
        self.reap();
        self.launch()?;
        self.timing
            .batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let chunks = n.div_ceil(GROUP);
        let mut sigs = Words::zeroed(n);
        let mut los = Words::zeroed(n);
        for (i, h) in hashes.iter().enumerate() {
            sigs.words()[i] = h.sig;
            los.words()[i] = h.lo;
        }
        let mut res = Words::zeroed(n);
        // The next chunk to take, and the chunks finished: a line each.
        let mut next_line = Words::zeroed(1);
        let mut done_line = Words::zeroed(1);
        let host = |w: &mut Words, flags| {
            let len = w.0.len() * 32;
            // SAFETY: the buffer covers exactly the allocation of `w`, which is kept (in
            // `Inflight`) until the kernel using it has completed.
            unsafe {
                Buffer::<cl_uint>::create(
                    &self.context,
                    flags | CL_MEM_USE_HOST_PTR,
                    len,
                    w.words().as_mut_ptr().cast(),
                )
            }
            .map_err(|e| err("steal buffer", e))
        };
        let bs = host(&mut sigs, CL_MEM_READ_ONLY)?;
        let bl = host(&mut los, CL_MEM_READ_ONLY)?;
        let bo = host(&mut res, CL_MEM_READ_WRITE)?;
        let bc = host(&mut next_line, CL_MEM_READ_WRITE)?;
        let bd = host(&mut done_line, CL_MEM_READ_WRITE)?;
        let (nn, mask) = (n as cl_uint, self.mask);
        // SAFETY: arguments match `search_steal` in index.cl; every buffer outlives the
        // kernel (kept in `Inflight`); the kernel guards i < n and start < n.
        let event = unsafe {
            ExecuteKernel::new(&self.search_steal)
                .set_arg(&self.tables[0])
                .set_arg(&bs)
                .set_arg(&bl)
                .set_arg(&bo)
                .set_arg(&nn)
                .set_arg(&mask)
                .set_arg(&bc)
                .set_arg(&bd)
                .set_global_work_size(chunks * GROUP)
                .set_local_work_size(GROUP)
                .enqueue_nd_range(&self.queues[0])
        }
        .map_err(|e| err("search_steal", e))?;
        // If anything below unwinds, the kernel must be done before the buffers are freed.
        let guard = FinishOnDrop(Some(&self.queues[0]));
        self.queues[0].flush().map_err(|e| err("flush", e))?;
        // Raw pointers from here on: the device writes these words too.
        let res_ptr = res.words().as_mut_ptr();
        // SAFETY: the first word of each line, aligned, in live allocations that the host
        // and the device touch only through atomics (atomic_inc in the kernel).
        let (next, done) = unsafe {
            (
                AtomicU32::from_ptr(next_line.words().as_mut_ptr()),
                AtomicU32::from_ptr(done_line.words().as_mut_ptr()),
            )
        };
        let mut host_chunks = 0u64;
        if host_takes {
            loop {
                let c = next.fetch_add(1, Ordering::AcqRel) as usize;
                if c >= chunks {
                    break;
                }
                let (s, e) = (c * GROUP, ((c + 1) * GROUP).min(n));
                // SAFETY: words s..e of `res`, a chunk this thread took: the device writes only
                // the chunks it took, so no one else touches these words.
                let slice = unsafe { std::slice::from_raw_parts_mut(res_ptr.add(s), e - s) };
                cpu(&hashes[s..e], slice);
                done.fetch_add(1, Ordering::Release);
                host_chunks += 1;
            }
        }
        let mut checked = Instant::now();
        while (done.load(Ordering::Acquire) as usize) < chunks {
            std::hint::spin_loop();
            if checked.elapsed() >= CHECK_EVERY {
                checked = Instant::now();
                let status = event
                    .command_execution_status()
                    .map_err(|e| err("search_steal", e))?;
                if status.0 <= 0 && (done.load(Ordering::Acquire) as usize) < chunks {
                    // Ended (or failed) with chunks unfinished: the results are not whole.
                    let _ = self.queues[0].finish();
                    return Err(IndexError::Device(format!(
                        "search_steal ended with {} of {chunks} chunks done (status {})",
                        done.load(Ordering::Acquire),
                        status.0
                    )));
                }
            }
        }
        // SAFETY: every chunk is done (Acquire above): no one writes these n words any more.
        out.copy_from_slice(unsafe { std::slice::from_raw_parts(res_ptr, n) });
        guard.disarm();
        self.inflight.push(Inflight {
            event,
            _buffers: vec![bs, bl, bo, bc, bd],
            _words: vec![sigs, los, res, next_line, done_line],
        });
        Ok(Stolen {
            host: host_chunks,
            device: chunks as u64 - host_chunks,
        })
    }
}
