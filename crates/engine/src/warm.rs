//! Warm restart (memcached's `-e <file>`, `memory_file`). The whole memory budget (index
//! tables and slab pages) is a shared mapping of one file, on tmpfs (or DAX). A clean stop
//! (SIGUSR1) applies every delayed index write and writes `<file>.meta`: the settings that
//! decide where things lie, the hash seed, each store's pages and positions, and a checksum
//! of every page. The next start with the same settings takes the pages back, checks them,
//! and rebuilds the index from the items. Anything that does not match (other `-m`, `-t`,
//! `-I`, `-f`, another hkv version, a torn or missing `.meta`, pages changed since the save)
//! starts empty with one log line saying why, never from pages it cannot vouch for. The
//! `.meta` is removed as soon as it is read, so a crash later can never restore them again.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use hkv_mem::{Arena, Carved};
use hkv_store::{ClassImage, SlabStore, StoreImage};
use serde::{Deserialize, Serialize};

use crate::partition::Partition;

const MAGIC: &str = "hkv memory file";
/// Bumped whenever the item, page or index layout changes (2: pages lost their reference
/// bitmap, CLOCK's bit moved into each item's header).
const FORMAT: u32 = 2;
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `-e`: where the memory lives and, on a warm restart, what the last clean stop saved.
#[derive(Clone, Debug)]
pub struct MemoryFile {
    pub path: PathBuf,
    pub image: Option<WarmImage>,
}

/// The settings that decide where everything lies in the file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Geometry {
    pub memory_bytes: usize,
    pub partitions: u32,
    pub page_size: usize,
    pub growth_factor: f64,
    pub buckets_per_partition: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct SavedClass {
    pages: Vec<usize>,
    bump: u32,
    hand: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct SavedStore {
    classes: Vec<SavedClass>,
    next_cas: u64,
}

/// What a clean stop saved (the `.meta` file).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WarmImage {
    magic: String,
    format: u32,
    version: String,
    geometry: Geometry,
    /// Keys were placed by their hash under this seed: the restart must use it too.
    pub hash_seed: u64,
    /// Each partition's index table: arena offset and buckets (tables grow, and a grown
    /// table lies wherever the arena had room).
    tables: Vec<(usize, u32)>,
    /// Pieces an outgrown table left for slab pages, not used yet (offsets).
    spare: Vec<usize>,
    /// The arena's bump at the save.
    arena_next: usize,
    stores: Vec<SavedStore>,
    /// XXH3 of every page, in `stores` order.
    pages_hash: u64,
    saved_at: u64,
}

/// What a save wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaveSummary {
    pub items: u64,
    pub pages: usize,
}

/// `<file>.meta`, memcached's name for it.
pub fn meta_path(path: &Path) -> PathBuf {
    let mut s = OsString::from(path.as_os_str());
    s.push(".meta");
    PathBuf::from(s)
}

/// Reads the metadata a clean stop left beside `path`, and removes it. Ok(None): there is
/// none (a first start, or the last stop was not a clean one). Err: it cannot be used, and
/// why.
pub fn take_image(path: &Path) -> Result<Option<WarmImage>, String> {
    let meta = meta_path(path);
    let text = match std::fs::read_to_string(&meta) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", meta.display())),
    };
    std::fs::remove_file(&meta).map_err(|e| format!("cannot remove {}: {e}", meta.display()))?;
    let (body, sum) = text
        .trim_end()
        .rsplit_once('\n')
        .ok_or("torn metadata: no checksum line")?;
    let want = sum
        .strip_prefix("xxh3 ")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or("torn metadata: bad checksum line")?;
    if xxhash_rust::xxh3::xxh3_64(body.as_bytes()) != want {
        return Err("torn metadata: checksum mismatch".into());
    }
    let image: WarmImage =
        serde_json::from_str(body).map_err(|e| format!("unreadable metadata: {e}"))?;
    if image.magic != MAGIC || image.format != FORMAT {
        return Err(format!(
            "metadata format {} of {:?}, this hkv reads format {FORMAT}",
            image.format, image.magic
        ));
    }
    if image.version != VERSION {
        return Err(format!(
            "saved by hkv {}, this is hkv {VERSION}",
            image.version
        ));
    }
    Ok(Some(image))
}

impl WarmImage {
    /// Whether the pages can be read with these settings.
    pub fn check(&self, now: &Geometry) -> Result<(), String> {
        if self.geometry != *now {
            return Err(format!(
                "saved with {:?}, started with {:?}",
                self.geometry, now
            ));
        }
        if self.stores.len() != now.partitions as usize {
            return Err("metadata lists the wrong number of partitions".into());
        }
        Ok(())
    }

    /// Each partition's table as (offset, buckets).
    pub(crate) fn tables(&self) -> &[(usize, u32)] {
        &self.tables
    }

    pub(crate) fn arena_next(&self) -> usize {
        self.arena_next
    }

    pub(crate) fn pages_hash(&self) -> u64 {
        self.pages_hash
    }

    /// Every saved page as (offset, length), stores then classes in order.
    pub(crate) fn page_ranges(&self) -> Vec<(usize, usize)> {
        let len = self.geometry.page_size;
        self.stores
            .iter()
            .flat_map(|s| s.classes.iter())
            .flat_map(|c| c.pages.iter().map(move |&o| (o, len)))
            .collect()
    }

    /// Everything to take back: the tables, then the pages, then the spare pieces.
    pub(crate) fn all_ranges(&self) -> Vec<(usize, usize)> {
        let page = self.geometry.page_size;
        self.tables
            .iter()
            .map(|&(o, b)| (o, b as usize * 64))
            .chain(self.page_ranges())
            .chain(self.spare.iter().map(|&o| (o, page)))
            .collect()
    }

    /// Partition `p`'s store image.
    pub(crate) fn store_image(&self, p: usize) -> StoreImage {
        let s = &self.stores[p];
        StoreImage {
            classes: s
                .classes
                .iter()
                .map(|c| ClassImage {
                    pages: c.pages.clone(),
                    bump: c.bump,
                    hand: c.hand,
                })
                .collect(),
            next_cas: s.next_cas,
        }
    }

    /// Deals the pages [`WarmImage::page_ranges`] listed back out: per store, per class.
    pub(crate) fn deal(&self, carved: Vec<Carved>) -> Vec<Vec<Vec<Carved>>> {
        let mut it = carved.into_iter();
        self.stores
            .iter()
            .map(|s| {
                s.classes
                    .iter()
                    .map(|c| it.by_ref().take(c.pages.len()).collect())
                    .collect()
            })
            .collect()
    }
}

/// XXH3 over the pages, in order.
pub(crate) fn hash_pages<'a>(pages: impl Iterator<Item = &'a [u8]>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for p in pages {
        h.update(p);
    }
    h.digest()
}

/// The image of partitions that are quiet (every one locked, delayed writes applied).
pub(crate) fn image_of(geometry: Geometry, arena: &Arena, parts: &[&Partition]) -> WarmImage {
    let stores: Vec<&SlabStore> = parts.iter().map(|p| p.store()).collect();
    let pages_hash = hash_pages(stores.iter().flat_map(|s| s.page_bytes()));
    WarmImage {
        magic: MAGIC.into(),
        format: FORMAT,
        version: VERSION.into(),
        geometry,
        hash_seed: hkv_index::hash_seed(),
        tables: parts
            .iter()
            .map(|p| {
                (
                    arena.offset_of(p.index().memory()),
                    p.index().bucket_count(),
                )
            })
            .collect(),
        spare: arena.spare_pieces().into_iter().map(|(o, _)| o).collect(),
        arena_next: arena.next_offset(),
        stores: stores
            .iter()
            .map(|s| {
                let img = s.image();
                SavedStore {
                    classes: img
                        .classes
                        .into_iter()
                        .map(|c| SavedClass {
                            pages: c.pages,
                            bump: c.bump,
                            hand: c.hand,
                        })
                        .collect(),
                    next_cas: img.next_cas,
                }
            })
            .collect(),
        pages_hash,
        saved_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    }
}

/// Saves quiet partitions: the mapping synced to the file, then `<file>.meta`.
pub(crate) fn save(
    path: &Path,
    arena: &Arena,
    geometry: Geometry,
    parts: &[&Partition],
) -> Result<SaveSummary, crate::EngineError> {
    let image = image_of(geometry, arena, parts);
    arena.sync()?;
    write_image(path, &image)?;
    Ok(SaveSummary {
        items: parts.iter().map(|p| p.store().stats().curr_items).sum(),
        pages: image.page_ranges().len(),
    })
}

/// Writes `<file>.meta` whole or not at all: a temporary file, synced, renamed.
pub(crate) fn write_image(path: &Path, image: &WarmImage) -> std::io::Result<()> {
    let body = serde_json::to_string(image).map_err(std::io::Error::other)?;
    let text = format!(
        "{body}\nxxh3 {:016x}\n",
        xxhash_rust::xxh3::xxh3_64(body.as_bytes())
    );
    let meta = meta_path(path);
    let mut tmp = OsString::from(meta.as_os_str());
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &meta)?;
    if let Some(dir) = meta.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
