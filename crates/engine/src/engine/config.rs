//! What an engine is built from (`EngineConfig`), and why building it can fail.

use hkv_index::IndexError;
use hkv_mem::ArenaError;
use hkv_store::RestoreError;

use crate::warm::MemoryFile;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The hard limit on memory for items, their metadata and the index (`--memory-mb`).
    pub memory_bytes: usize,
    /// Hash partitions (the server makes one per worker thread, fewer when memory is small).
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
