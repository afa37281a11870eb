//! All partitions together: construction from the memory budget and single-threaded batches.

use std::sync::Arc;

use hkv_index::opencl::OclIndex;
use hkv_index::{hash_key, CpuIndex, IndexError, IndexSizing, KeyHash};
use hkv_mem::{Arena, ArenaError};
use hkv_store::{RestoreError, SlabStore, StoreConfig, StoreStats};

use crate::partition::Partition;
use crate::stats::EngineStats;
use crate::warm::{Geometry, MemoryFile, WarmImage};
use hkv_types::{Request, Responses};

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The hard limit on memory for items, their metadata and the index (`--memory-mb`).
    pub memory_bytes: usize,
    /// Hash partitions; one per engine thread.
    pub partitions: u32,
    pub page_size: usize,
    /// The longest value stored (`-I`); values past the largest chunk (a page) are chained.
    pub max_value: usize,
    pub growth_factor: f64,
    /// Item size (chunk, header included) the index is sized for.
    pub expected_item_bytes: usize,
    /// Overrides the sizing from the budget (tests use tiny tables).
    pub buckets_per_partition: Option<u32>,
    /// Where index work runs.
    pub backend: Backend,
    /// Bounds of the batch interval C and the write period (Mega-KV §5).
    pub schedule: crate::ScheduleConfig,
    /// In-place atomics (incr/decr, vector updates) leave their key's location in the
    /// same-key table while index writes are delayed, so later operations on a hot key skip
    /// the index (`--merge-atomics`; off only for experiments).
    pub merge_atomics: bool,
    /// Hits with values at least this long are answered as pins on their chunks
    /// (`Responses::pinned`) rather than copies; `usize::MAX` (the default) never.
    pub zero_copy_min: usize,
    /// Where vector updates run (`--vector-placement`).
    pub vector_placement: crate::VectorPlacement,
    /// Where index tasks run when a device shares the CPU's table (`--placement`).
    pub placement: crate::Placement,
    /// Let a device that shares host memory work on the CPU's table (false: it keeps its
    /// own, as a discrete GPU does; for tests and comparisons, like `HKV_OPENCL_SHARE=0`).
    pub share_device_table: bool,
    /// Evict live items when memory is spent (memcached's default; `-M`: false, and a
    /// write that needs memory answers out of memory instead).
    pub evictions: bool,
    /// `-C` turns CAS off: every CAS reads 0 and no compare matches.
    pub cas: bool,
    /// `-e`: the memory budget is this file (a warm restart when it carries a saved image).
    pub memory_file: Option<MemoryFile>,
}

/// `--engine`: where the index lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backend {
    #[default]
    Cpu,
    /// An OpenCL device (`Some(i)`: the i-th of `hkv_index::opencl::devices()`, else the
    /// first GPU, else the first device). Starting fails if there is none.
    OpenCl(Option<usize>),
    /// A GPU if one is found, else the CPU.
    Auto,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            memory_bytes: 64 << 20,
            partitions: 1,
            page_size: 1 << 20,
            max_value: 1 << 20,
            growth_factor: 1.25,
            expected_item_bytes: 96,
            buckets_per_partition: None,
            backend: Backend::Cpu,
            schedule: crate::ScheduleConfig::default(),
            merge_atomics: true,
            zero_copy_min: usize::MAX,
            vector_placement: crate::VectorPlacement::Auto,
            placement: crate::Placement::AUTO,
            share_device_table: true,
            evictions: true,
            cas: true,
            memory_file: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Memory(#[from] ArenaError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("warm restart: {0}")]
    Restore(String),
    #[error("saving the memory file: {0}")]
    Save(#[from] std::io::Error),
}

impl From<RestoreError> for EngineError {
    fn from(e: RestoreError) -> Self {
        EngineError::Restore(e.to_string())
    }
}

pub struct Engine {
    arena: Arc<Arena>,
    partitions: Vec<Partition>,
    hashes: Vec<KeyHash>,
    owners: Vec<u32>,
    sampler: crate::Sampler,
    /// Where things lie in the arena, for a warm-restart save.
    geometry: Geometry,
    memory_file: Option<std::path::PathBuf>,
}

impl Engine {
    pub fn new(config: &EngineConfig) -> Result<Engine, EngineError> {
        if config.partitions == 0 || config.partitions > 256 {
            return Err(EngineError::Config("partitions must be 1..=256".into()));
        }
        if config.growth_factor.is_nan() || config.growth_factor <= 1.0 {
            return Err(EngineError::Config("growth factor must be > 1".into()));
        }
        if config.page_size < 4096 || config.page_size > (1 << 30) {
            return Err(EngineError::Config("page size must be 4 KiB..1 GiB".into()));
        }
        let sizing = match config.buckets_per_partition {
            Some(b) => IndexSizing::with_buckets(config.partitions, b)?,
            None => IndexSizing::for_budget(
                config.memory_bytes,
                config.expected_item_bytes,
                config.partitions,
            )?,
        };
        if sizing.total_bytes() > config.memory_bytes / 2 {
            return Err(EngineError::Config(format!(
                "the index ({} bytes) would take more than half of the {} byte budget",
                sizing.total_bytes(),
                config.memory_bytes
            )));
        }
        let geometry = Geometry {
            memory_bytes: config.memory_bytes,
            partitions: config.partitions,
            page_size: config.page_size,
            growth_factor: config.growth_factor,
            buckets_per_partition: sizing.buckets_per_partition,
        };
        if let Some(image) = config.memory_file.as_ref().and_then(|m| m.image.as_ref()) {
            let warm = image
                .check(&geometry)
                .map_err(EngineError::Restore)
                .and_then(|()| Self::build(config, &geometry, Some(image)));
            match warm {
                Ok(engine) => {
                    let items: u64 = engine
                        .partitions
                        .iter()
                        .map(|p| p.store().stats().curr_items)
                        .sum();
                    tracing::warn!(items, "warm restart: the memory file's items are back");
                    return Ok(engine);
                }
                Err(e) => {
                    tracing::error!(error = %e, "warm restart refused; starting empty");
                }
            }
        }
        Self::build(config, &geometry, None)
    }

    /// The engine over a fresh arena, or over a memory file's saved pages when `image` is
    /// given (an error then means they cannot be used).
    fn build(
        config: &EngineConfig,
        geometry: &Geometry,
        image: Option<&WarmImage>,
    ) -> Result<Engine, EngineError> {
        let arena = Arc::new(match &config.memory_file {
            Some(m) => Arena::open_file(&m.path, config.memory_bytes, image.is_some())?,
            None => Arena::new(config.memory_bytes)?,
        });
        let store_config = |p: u32| StoreConfig {
            page_size: config.page_size,
            max_value: config.max_value,
            growth_factor: config.growth_factor,
            cas_start: p as u64 + 1,
            cas_step: config.partitions as u64,
            cas: config.cas,
        };
        let mut indexes = Vec::with_capacity(config.partitions as usize);
        let mut restored = Vec::new();
        match image {
            None => {
                for _ in 0..config.partitions {
                    indexes.push(CpuIndex::new(&arena, geometry.buckets_per_partition)?);
                }
            }
            Some(image) => {
                // Tables, pages and spare pieces back in one go: the arena checks they are
                // disjoint and continues after the saved bump.
                let mut pieces = arena
                    .adopt(&image.all_ranges(), image.arena_next())?
                    .into_iter();
                for &(_, buckets) in image.tables() {
                    let mem = pieces.next().expect("one piece per table");
                    indexes.push(CpuIndex::from_memory(mem, buckets)?);
                }
                let pages: Vec<_> = pieces.by_ref().take(image.page_ranges().len()).collect();
                if crate::warm::hash_pages(pages.iter().map(|p| &p[..])) != image.pages_hash() {
                    return Err(EngineError::Restore(
                        "the memory file changed since it was saved (page checksum)".into(),
                    ));
                }
                for piece in pieces {
                    arena.recycle(piece, config.page_size);
                }
                for (p, classes) in image.deal(pages).into_iter().enumerate() {
                    restored.push(SlabStore::restore(
                        Arc::clone(&arena),
                        &store_config(p as u32),
                        &image.store_image(p),
                        classes,
                    )?);
                }
            }
        }
        let mut indexes = indexes.into_iter();
        let mut restored = restored.into_iter();
        let warm = image.is_some();
        let mut partitions = Vec::with_capacity(config.partitions as usize);
        // `auto` vector placement is timed once, on the first partition's device.
        let mut calibrated = None;
        for p in 0..config.partitions {
            let index = indexes.next().expect("one index per partition");
            // The device table as large as the host one (a warm restart may bring a grown one).
            let buckets = index.bucket_count();
            let store = restored
                .next()
                .unwrap_or_else(|| SlabStore::new(Arc::clone(&arena), &store_config(p)));
            let device = match config.backend {
                Backend::Cpu => None,
                Backend::OpenCl(which) => Some(OclIndex::new(buckets, which)?),
                Backend::Auto => {
                    let gpu = hkv_index::opencl::devices()
                        .iter()
                        .position(|(info, _)| info.is_gpu);
                    match gpu {
                        Some(i) => match OclIndex::new(buckets, Some(i)) {
                            Ok(d) => Some(d),
                            Err(e) => {
                                tracing::warn!(error = %e, "GPU found but unusable; using the CPU backend");
                                None
                            }
                        },
                        None => None,
                    }
                }
            };
            let mut part = Partition::new(index, device, store, config.schedule.write_every);
            part.set_merge_atomics(config.merge_atomics);
            part.set_zero_copy_min(config.zero_copy_min);
            part.set_evictions(config.evictions);
            part.set_vector_placement(config.vector_placement, calibrated);
            if config.share_device_table {
                part.share_device_table();
            }
            part.set_placement(config.placement);
            part.calibrate_placement();
            // Without a scheduler here, the bounds say whether batches are periodic (C > 0).
            part.set_write_delay(part.device_writes() || config.schedule.min_us > 0.0);
            calibrated = Some(part.vector_calibration());
            if warm {
                part.restore_index();
            }
            partitions.push(part);
        }
        Ok(Engine {
            arena,
            partitions,
            hashes: Vec::new(),
            owners: Vec::new(),
            sampler: crate::Sampler::default(),
            geometry: geometry.clone(),
            memory_file: config.memory_file.as_ref().map(|m| m.path.clone()),
        })
    }

    /// Where things lie in the arena, and the memory file (for
    /// [`crate::SharedEngine::save_memory_file`]).
    pub(crate) fn layout(&self) -> (Geometry, Option<std::path::PathBuf>) {
        (self.geometry.clone(), self.memory_file.clone())
    }

    /// A clean stop's save for a warm restart (see [`crate::warm`]); the engine must not
    /// run batches afterwards.
    pub fn save_memory_file(&mut self) -> Result<crate::warm::SaveSummary, EngineError> {
        let (geometry, path) = self.layout();
        let path = path.ok_or_else(|| EngineError::Config("no memory file (-e)".into()))?;
        for p in &mut self.partitions {
            p.apply_pending();
        }
        let parts: Vec<&Partition> = self.partitions.iter().collect();
        crate::warm::save(&path, &self.arena, geometry, &parts)
    }

    pub fn partitions(&self) -> &[Partition] {
        &self.partitions
    }

    /// Hands each partition to its own thread; `partition_of` says which keys go where.
    pub fn into_partitions(self) -> (Arc<Arena>, Vec<Partition>) {
        (self.arena, self.partitions)
    }

    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// Which partition owns `key`, out of `partitions`.
    pub fn partition_of(key: &[u8], partitions: u32) -> u32 {
        hash_key(key).partition(partitions)
    }

    /// Executes a batch on the calling thread; appends one response per request, in order.
    pub fn execute(&mut self, reqs: &[Request<'_>], now: u32, out: &mut Responses) {
        let n = self.partitions.len() as u32;
        let parts = &mut self.partitions;
        let scratch = (&mut self.hashes, &mut self.owners, &mut self.sampler);
        crate::route::run_batch(n, reqs, now, out, scratch, |p, run| {
            run(&mut parts[p as usize])
        });
    }

    /// Applies every partition's waiting index writes now.
    pub fn apply_pending(&mut self) {
        for p in &mut self.partitions {
            p.apply_pending();
        }
    }

    /// Index writes waiting in the same-key tables.
    pub fn pending_writes(&self) -> usize {
        self.partitions.iter().map(|p| p.pending_writes()).sum()
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = EngineStats::default();
        for p in &self.partitions {
            s.add(&p.stats());
        }
        s
    }

    pub fn store_stats(&self) -> StoreStats {
        let mut s = StoreStats::default();
        for p in &self.partitions {
            s.add(&p.store_stats());
        }
        s
    }

    /// Items gone for any reason other than delete or expiry.
    pub fn evictions(&self) -> u64 {
        self.partitions.iter().map(|p| p.evictions()).sum()
    }

    /// Starts (or stops) logging the key of every evicted item.
    pub fn log_evictions(&mut self, on: bool) {
        for p in &mut self.partitions {
            p.log_evictions(on);
        }
    }

    /// The keys evicted since the last call (one entry per eviction), when logging.
    pub fn take_evicted_keys(&mut self) -> Vec<Vec<u8>> {
        self.partitions
            .iter_mut()
            .flat_map(|p| p.take_evicted_keys())
            .collect()
    }
}
