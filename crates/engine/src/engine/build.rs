//! Building the partitions from the memory budget: the index sized to it, one slab store
//! and (with a device) one device index per partition, or everything back from a memory
//! file's saved pages on a warm restart.

use std::sync::Arc;

use hkv_index::opencl::OclIndex;
use hkv_index::{CpuIndex, IndexSizing};
use hkv_mem::Arena;
use hkv_store::{SlabStore, StoreConfig};

use super::config::{Backend, EngineConfig, EngineError};
use crate::partition::Partition;
use crate::warm::{Geometry, WarmImage};

/// What [`build`] makes: the arena, the partitions over it, and where things lie in it.
pub(super) struct Built {
    pub arena: Arc<Arena>,
    pub partitions: Vec<Partition>,
    /// Where things lie in the arena, for a warm-restart save.
    pub geometry: Geometry,
    pub memory_file: Option<std::path::PathBuf>,
}

pub(super) fn build(config: &EngineConfig) -> Result<Built, EngineError> {
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
            .and_then(|()| build_on(config, &geometry, Some(image)));
        match warm {
            Ok(built) => {
                let items: u64 = built
                    .partitions
                    .iter()
                    .map(|p| p.store().stats().curr_items)
                    .sum();
                tracing::warn!(items, "warm restart: the memory file's items are back");
                return Ok(built);
            }
            Err(e) => {
                tracing::error!(error = %e, "warm restart refused; starting empty");
            }
        }
    }
    build_on(config, &geometry, None)
}

/// The partitions over a fresh arena, or over a memory file's saved pages when `image` is
/// given (an error then means they cannot be used).
fn build_on(
    config: &EngineConfig,
    geometry: &Geometry,
    image: Option<&WarmImage>,
) -> Result<Built, EngineError> {
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
        // Until the scheduler has seen batches, the bounds say whether they are periodic
        // (C > 0); `Engine` then sets it before each batch from the scheduler's C.
        part.set_write_delay(part.device_writes() || config.schedule.min_us > 0.0);
        calibrated = Some(part.vector_calibration());
        if warm {
            part.restore_index();
        }
        partitions.push(part);
    }
    Ok(Built {
        arena,
        partitions,
        geometry: geometry.clone(),
        memory_file: config.memory_file.as_ref().map(|m| m.path.clone()),
    })
}
