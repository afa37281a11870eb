//! The OpenCL backend: the index table lives in a device buffer and batches run as kernels
//! (`index.cl`), one work-item per query. The same kernels run on GPUs, coupled CPU-GPU
//! chips, FPGAs and PoCL; the OpenCL library is loaded at run time, so hkv builds and runs
//! without one and [`OclIndex::new`] simply reports that no device is there.

use std::ptr;

use opencl3::command_queue::{CommandQueue, CL_QUEUE_PROFILING_ENABLE};
use opencl3::context::Context;
use opencl3::device::{Device, CL_DEVICE_TYPE_ALL};
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, CL_MEM_USE_HOST_PTR};
use opencl3::program::Program;
use opencl3::types::{cl_uint, CL_BLOCKING};

use crate::hash::{
    KeyHash, FMIX_C1, FMIX_C2, MAX_DISPLACEMENTS, PREFERRED_SLOT_BITS, SLOTS_PER_BUCKET,
};
use crate::{IndexBackend, IndexError, IndexStats, InsertOutcome, Location, NO_LOCATION};

mod items;
mod search;
mod shared;
mod steal;
mod update;
mod vector;

pub use items::{KcVerdict, OclItems, NO_CHUNK, VALUE_CHAINED};
pub use search::Split;
pub use steal::Stolen;
pub use vector::{OclVector, ELEMENTS};

const SOURCE: &str = include_str!("index.cl");
/// Fixed work-group size: PoCL recompiles a kernel for every new size.
const GROUP: usize = 64;
/// Queries per chunk when a search batch is split over the queues.
const PIPELINE_CHUNK: usize = 1024;
/// The same on a GPU (search.rs).
const GPU_PIPELINE_CHUNK: usize = 16384;

const OUT_INSERTED: u32 = 0;
const OUT_REPLACED: u32 = 1;
const OUT_FULL: u32 = 2;
const OUT_EVICTED: u32 = 3;

/// Build options that give the kernels the host's constants.
pub fn build_options() -> String {
    format!(
        "-D GROUP={GROUP} -D SLOTS={SLOTS_PER_BUCKET} -D PREF_BITS={PREFERRED_SLOT_BITS}u -D MAX_DISPLACEMENTS={MAX_DISPLACEMENTS}u -D FMIX_C1={FMIX_C1:#x}u -D FMIX_C2={FMIX_C2:#x}u"
    )
}

fn err(what: &str, e: impl std::fmt::Display) -> IndexError {
    IndexError::Device(format!("{what}: {e}"))
}

/// An OpenCL device this process can use.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub index: usize,
    pub name: String,
    pub platform: String,
    pub is_gpu: bool,
    /// A CPU device (PoCL): its memory is the host's, its atomics the host's atomics.
    pub is_cpu: bool,
    /// The device shares host memory (PoCL, integrated GPUs): zero-copy buffers are possible.
    pub host_unified_memory: bool,
    pub max_alloc: u64,
}

/// ICD loaders and runtimes (PoCL among them) are not safe to initialise from several threads
/// at once; discovery and setup go through this lock.
static SETUP: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Every device of every platform, in a stable order; empty if there is no OpenCL runtime.
pub fn devices() -> Vec<(DeviceInfo, Device)> {
    let _guard = SETUP.lock().unwrap_or_else(|p| p.into_inner());
    let Ok(platforms) = opencl3::platform::get_platforms() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in platforms {
        let pname = p.name().unwrap_or_default();
        for id in p.get_devices(CL_DEVICE_TYPE_ALL).unwrap_or_default() {
            let d = Device::new(id);
            let info = DeviceInfo {
                index: out.len(),
                name: d.name().unwrap_or_default(),
                platform: pname.clone(),
                is_gpu: d
                    .dev_type()
                    .map(|t| t & opencl3::device::CL_DEVICE_TYPE_GPU != 0)
                    .unwrap_or(false),
                is_cpu: d
                    .dev_type()
                    .map(|t| t & opencl3::device::CL_DEVICE_TYPE_CPU != 0)
                    .unwrap_or(false),
                host_unified_memory: d.host_unified_memory().unwrap_or(false),
                max_alloc: d.max_mem_alloc_size().unwrap_or(0),
            };
            out.push((info, d));
        }
    }
    out
}

/// Empty sub-tables for `buckets` in all, each within `max_alloc` bytes; returns them and the
/// buckets of each.
fn make_tables(
    context: &Context,
    queue: &CommandQueue,
    buckets: u32,
    max_alloc: u64,
) -> Result<(Vec<Buffer<cl_uint>>, u32), IndexError> {
    let total = buckets as u64 * 64;
    let subs = total
        .div_ceil(max_alloc)
        .next_power_of_two()
        .min(buckets as u64) as u32;
    let per_sub = buckets / subs;
    let words = per_sub as usize * 2 * SLOTS_PER_BUCKET;
    // Empty table: signatures 0, locations all ones.
    let mut init = vec![0u32; words];
    for b in init.chunks_mut(2 * SLOTS_PER_BUCKET) {
        b[SLOTS_PER_BUCKET..].fill(NO_LOCATION);
    }
    let mut tables = Vec::with_capacity(subs as usize);
    for _ in 0..subs {
        // SAFETY: a fresh buffer of `words` u32s, no host pointer.
        let mut table = unsafe {
            Buffer::<cl_uint>::create(context, CL_MEM_READ_WRITE, words, ptr::null_mut())
        }
        .map_err(|e| err("table", e))?;
        // SAFETY: blocking write of exactly the buffer's length from a live slice.
        unsafe { queue.enqueue_write_buffer(&mut table, CL_BLOCKING, 0, &init, &[]) }
            .map_err(|e| err("table init", e))?;
        tables.push(table);
    }
    Ok((tables, per_sub))
}

pub struct OclIndex {
    info: DeviceInfo,
    /// Two in-order queues: searches alternate chunks between them; inserts and deletes use
    /// the first only, so they stay ordered with each other.
    queues: [CommandQueue; 2],
    context: Context,
    search: Kernel,
    search_steal: Kernel,
    insert: Kernel,
    displace: Kernel,
    remove: Kernel,
    /// The table, split into sub-tables when it is larger than the device's largest
    /// allocation. A key's two buckets are always in the same sub-table (Mega-KV §4.3.2's
    /// mask): the sub-table comes from the hash bits just above the bucket bits.
    tables: Vec<Buffer<cl_uint>>,
    rng: Buffer<cl_uint>,
    /// Bucket mask within a sub-table, and log2 of its bucket count.
    mask: u32,
    sub_shift: u32,
    /// The largest single allocation used (the device's, or a lower test limit).
    max_alloc: u64,
    stats: IndexStats,
    /// Kernel launches so far, and the launch after which every call fails
    /// (`HKV_OPENCL_FAIL_AFTER`, for proving the engine's fallback).
    launches: std::sync::atomic::AtomicU64,
    fail_after: Option<u64>,
    timing: Timing,
    /// Searches read their inputs in place (device shares host memory).
    zero_copy: bool,
    /// The table is host memory the CPU backend also uses ([`OclIndex::share_host_table`]).
    shared: bool,
    /// The table is a copy of the CPU backend's, written only by the host (shared.rs).
    mirror: bool,
    mirror_bytes: u64,
    /// Searches are shared with the calling thread (steal.rs).
    steal: bool,
    /// Stealing searches whose kernels may still run.
    inflight: Vec<steal::Inflight>,
    /// Search buffers of finished calls, for the next (search.rs).
    search_pool: std::sync::Mutex<Vec<search::SearchBuffers>>,
}

impl Drop for OclIndex {
    fn drop(&mut self) {
        // Kernels still running read buffers that `inflight` frees.
        self.drain();
    }
}

/// Where device time goes, from the device's profiling events (nanoseconds).
#[derive(Debug, Default)]
pub struct Timing {
    pub batches: std::sync::atomic::AtomicU64,
    pub copy_ns: std::sync::atomic::AtomicU64,
    pub kernel_ns: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for OclIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OclIndex")
            .field("device", &self.info.name)
            .field(
                "buckets",
                &((self.mask as u64 + 1) * self.tables.len() as u64),
            )
            .finish()
    }
}

// SAFETY: OpenCL objects are thread-safe handles (the spec makes every API call except
// clSetKernelArg thread-safe, and kernels are only used through `&mut self` or `&self` of one
// owner at a time: the index is owned by one engine partition).
unsafe impl Send for OclIndex {}

impl OclIndex {
    /// A table of `buckets` (a power of two) on device `which` (an index into [`devices`]);
    /// `None` picks the first GPU, else the first device.
    pub fn new(buckets: u32, which: Option<usize>) -> Result<OclIndex, IndexError> {
        // HKV_OPENCL_MAX_ALLOC (bytes) lowers the device's limit, to try the split.
        let limit = std::env::var("HKV_OPENCL_MAX_ALLOC")
            .ok()
            .and_then(|v| v.parse::<u64>().ok());
        Self::with_alloc_limit(buckets, which, limit)
    }

    /// As [`OclIndex::new`], with the largest single allocation capped at `limit` bytes: a
    /// table larger than the device's (or this) limit is split into sub-tables.
    pub fn with_alloc_limit(
        buckets: u32,
        which: Option<usize>,
        limit: Option<u64>,
    ) -> Result<OclIndex, IndexError> {
        if !buckets.is_power_of_two() {
            return Err(IndexError::Size(format!("{buckets} is not a power of two")));
        }
        let mut all = devices();
        if all.is_empty() {
            return Err(IndexError::Device("no OpenCL platform or device".into()));
        }
        let pick = match which {
            Some(i) if i < all.len() => i,
            Some(i) => return Err(IndexError::Device(format!("no OpenCL device {i}"))),
            None => all.iter().position(|(i, _)| i.is_gpu).unwrap_or(0),
        };
        let (info, device) = all.swap_remove(pick);
        let _guard = SETUP.lock().unwrap_or_else(|p| p.into_inner());
        let max_alloc = limit
            .map_or(info.max_alloc, |v| v.min(info.max_alloc))
            .max(64);
        let context = Context::from_device(&device).map_err(|e| err("context", e))?;
        // SAFETY: in-order queues with profiling on a valid context and device.
        let make_queue = || {
            unsafe {
                CommandQueue::create_with_properties(
                    &context,
                    device.id(),
                    CL_QUEUE_PROFILING_ENABLE,
                    0,
                )
            }
            .map_err(|e| err("queue", e))
        };
        let queues = [make_queue()?, make_queue()?];
        let queue = &queues[0];
        let program = Program::create_and_build_from_source(&context, SOURCE, &build_options())
            .map_err(|e| err("build", e))?;
        let kernel = |name: &str| Kernel::create(&program, name).map_err(|e| err(name, e));
        let (search, search_steal, insert, displace, remove) = (
            kernel("search")?,
            kernel("search_steal")?,
            kernel("insert")?,
            kernel("displace")?,
            kernel("remove")?,
        );
        let (tables, per_sub) = make_tables(&context, queue, buckets, max_alloc)?;
        // SAFETY: as above, one word.
        let mut rng =
            unsafe { Buffer::<cl_uint>::create(&context, CL_MEM_READ_WRITE, 1, ptr::null_mut()) }
                .map_err(|e| err("rng", e))?;
        // The CPU backend's xorshift seed, so both walk the same way from the same state.
        // SAFETY: blocking write of one word.
        unsafe { queue.enqueue_write_buffer(&mut rng, CL_BLOCKING, 0, &[0x9e37_79b9u32], &[]) }
            .map_err(|e| err("rng init", e))?;
        Ok(OclIndex {
            info,
            queues,
            context,
            search,
            search_steal,
            insert,
            displace,
            remove,
            tables,
            rng,
            mask: per_sub - 1,
            sub_shift: per_sub.trailing_zeros(),
            max_alloc,
            stats: IndexStats::default(),
            launches: std::sync::atomic::AtomicU64::new(0),
            fail_after: std::env::var("HKV_OPENCL_FAIL_AFTER")
                .ok()
                .and_then(|v| v.parse().ok()),
            timing: Timing::default(),
            zero_copy: false,
            shared: false,
            mirror: false,
            mirror_bytes: 0,
            steal: false,
            inflight: Vec::new(),
            search_pool: Default::default(),
        })
        .map(|mut ix: OclIndex| {
            // HKV_OPENCL_ZERO_COPY=0 turns it off, to compare both ways on one device.
            let wanted = std::env::var("HKV_OPENCL_ZERO_COPY").as_deref() != Ok("0");
            ix.set_zero_copy(wanted);
            ix
        })
    }

    /// Replaces the table with an empty one of `buckets` (a power of two) on the same
    /// context, kernels and queues (nothing is recompiled): the engine grows its index this
    /// way and inserts every item again.
    pub fn resize(&mut self, buckets: u32) -> Result<(), IndexError> {
        if !buckets.is_power_of_two() {
            return Err(IndexError::Size(format!("{buckets} is not a power of two")));
        }
        self.launch()?;
        self.drain();
        let (tables, per_sub) =
            make_tables(&self.context, &self.queues[0], buckets, self.max_alloc)?;
        self.tables = tables;
        self.mask = per_sub - 1;
        self.sub_shift = per_sub.trailing_zeros();
        self.stats.entries = 0;
        self.shared = false;
        self.mirror = false;
        self.steal = false;
        Ok(())
    }

    /// Buckets over all sub-tables.
    pub fn bucket_count(&self) -> u64 {
        (self.mask as u64 + 1) * self.tables.len() as u64
    }

    /// Counts a launch; fails once the injected failure point is passed.
    fn launch(&self) -> Result<(), IndexError> {
        let n = self
            .launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self.fail_after {
            Some(limit) if n >= limit => Err(IndexError::Device(format!(
                "injected failure after {limit} kernel launches"
            ))),
            _ => Ok(()),
        }
    }

    /// Empties the table (`flush_all`).
    pub fn clear(&mut self) -> Result<(), IndexError> {
        self.launch()?;
        self.drain();
        let words = (self.mask as usize + 1) * 2 * SLOTS_PER_BUCKET;
        self.stats.entries = 0;
        let mut init = vec![0u32; words];
        for b in init.chunks_mut(2 * SLOTS_PER_BUCKET) {
            b[SLOTS_PER_BUCKET..].fill(NO_LOCATION);
        }
        // SAFETY: blocking write of exactly the table's length from a live slice.
        for table in &mut self.tables {
            // SAFETY: blocking write of exactly the table's length from a live slice.
            unsafe { self.queues[0].enqueue_write_buffer(table, CL_BLOCKING, 0, &init, &[]) }
                .map_err(|e| err("clear", e))?;
        }
        self.stats.entries = 0;
        Ok(())
    }

    pub fn device(&self) -> &DeviceInfo {
        &self.info
    }

    /// (batches, copy ns, kernel ns) so far.
    pub fn timing(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.timing.batches.load(Relaxed),
            self.timing.copy_ns.load(Relaxed),
            self.timing.kernel_ns.load(Relaxed),
        )
    }

    fn upload(&self, data: &[u32]) -> Result<Buffer<cl_uint>, IndexError> {
        let n = data.len().max(1);
        // SAFETY: a fresh buffer of n words; the blocking write copies from a live slice of at
        // most n words.
        unsafe {
            let mut b =
                Buffer::<cl_uint>::create(&self.context, CL_MEM_READ_ONLY, n, ptr::null_mut())
                    .map_err(|e| err("buffer", e))?;
            if !data.is_empty() {
                self.queues[0]
                    .enqueue_write_buffer(&mut b, CL_BLOCKING, 0, data, &[])
                    .map_err(|e| err("copy in", e))?;
            }
            Ok(b)
        }
    }

    /// A read-only buffer over host memory (`CL_MEM_USE_HOST_PTR`): on a device that shares
    /// host memory the kernel reads `data` in place. `data` must outlive every use.
    fn host_input(&self, data: &[u32]) -> Result<Buffer<cl_uint>, IndexError> {
        // SAFETY: the device only reads the buffer (CL_MEM_READ_ONLY), so handing it a pointer
        // derived from a shared slice is sound; callers keep `data` alive until the queues
        // using the buffer have finished.
        unsafe {
            Buffer::<cl_uint>::create(
                &self.context,
                CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR,
                data.len(),
                data.as_ptr() as *mut std::ffi::c_void,
            )
        }
        .map_err(|e| err("host buffer", e))
    }

    /// Whether searches read their inputs from host memory without copying.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Turns zero-copy inputs off (or back on, where the device shares host memory).
    pub fn set_zero_copy(&mut self, on: bool) {
        self.zero_copy = on && self.info.host_unified_memory;
    }

    /// An uninitialised buffer the kernels only read.
    fn input(&self, n: usize) -> Result<Buffer<cl_uint>, IndexError> {
        // SAFETY: a fresh buffer, no host pointer.
        unsafe {
            Buffer::<cl_uint>::create(&self.context, CL_MEM_READ_ONLY, n.max(1), ptr::null_mut())
        }
        .map_err(|e| err("buffer", e))
    }

    fn scratch(&self, n: usize) -> Result<Buffer<cl_uint>, IndexError> {
        // SAFETY: a fresh device-only buffer.
        unsafe {
            Buffer::<cl_uint>::create(&self.context, CL_MEM_READ_WRITE, n.max(1), ptr::null_mut())
        }
        .map_err(|e| err("buffer", e))
    }

    fn download(&self, b: &Buffer<cl_uint>, out: &mut [u32]) -> Result<(), IndexError> {
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: blocking read into a live slice no longer than the buffer.
        unsafe { self.queues[0].enqueue_read_buffer(b, CL_BLOCKING, 0, out, &[]) }
            .map_err(|e| err("copy out", e))?;
        Ok(())
    }

    fn global(n: usize) -> usize {
        n.div_ceil(GROUP).max(1) * GROUP
    }
}

impl IndexBackend for OclIndex {
    fn search(&self, hashes: &[KeyHash], out: &mut [Location]) {
        if let Err(e) = self.try_search(hashes, out) {
            // The trait has no error path yet; the engine's fallback (issue 5) will use the
            // try_ methods. Until then a failed search is a miss, never a wrong location.
            out.fill(NO_LOCATION);
            let _ = e;
        }
    }

    fn insert(&mut self, entries: &[(KeyHash, Location)], out: &mut [InsertOutcome]) {
        if self.try_insert(entries, out).is_err() {
            for (o, (_, l)) in out.iter_mut().zip(entries) {
                *o = InsertOutcome::Evicted(*l);
            }
        }
    }

    fn delete(&mut self, entries: &[(KeyHash, Location)], out: &mut [bool]) {
        if self.try_delete(entries, out).is_err() {
            out.fill(false);
        }
    }

    fn stats(&self) -> IndexStats {
        self.stats
    }

    fn table_bytes(&self) -> usize {
        (self.mask as usize + 1) * 64 * self.tables.len()
    }
}
