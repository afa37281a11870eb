//! The partition's device: which table it works on after growth, index tasks run on one
//! processor or the other, and what a failed device call leaves behind (the device dropped
//! for good, the CPU table rebuilt from the store where it was not whole already).

use hkv_index::opencl::OclIndex;
use hkv_index::{hash_key, IndexBackend, IndexError, InsertOutcome, KeyHash, Location};
use hkv_store::SlabStore;

use super::Index;
use crate::policy::Proc;

impl Index {
    /// "cpu", or "opencl:<device>".
    pub fn backend_name(&self) -> String {
        match &self.device {
            Some(d) => format!("opencl:{}", d.device().name),
            None => "cpu".into(),
        }
    }

    /// (batches, copy ns, kernel ns) of the device, if one is in use.
    pub fn device_timing(&self) -> Option<(u64, u64, u64)> {
        self.device.as_ref().map(|d| d.timing())
    }

    /// The device holding the index, if any.
    pub fn device(&self) -> Option<&OclIndex> {
        self.device.as_ref()
    }

    /// Whether the device reads search inputs in place (None: no device).
    pub fn zero_copy(&self) -> Option<bool> {
        self.device.as_ref().map(|d| d.zero_copy())
    }

    pub(super) fn fail(&mut self, e: IndexError) {
        tracing::error!(error = %e, "index device failed; falling back to the CPU backend");
        self.device = None;
        self.cpu.track_changes(false);
        self.fallbacks += 1;
        self.last_error = Some(e.to_string());
    }

    /// Drops the device and rebuilds the CPU table from every item in `store`. Items whose
    /// index slot is taken by a signature collision are returned to the caller to free.
    pub(super) fn rebuild(&mut self, store: &SlabStore) -> Vec<Location> {
        self.pending_rebuild = false;
        self.rebuilds += 1;
        self.cpu.clear();
        let mut dropped = Vec::new();
        store.for_each_live(|key, loc| match self.cpu.insert_one(&hash_key(key), loc) {
            InsertOutcome::Inserted => {}
            InsertOutcome::Replaced(old) | InsertOutcome::Evicted(old) => dropped.push(old),
        });
        dropped
    }

    /// Rebuilds if a failure is pending; returns locations the rebuild had to drop.
    pub fn settle(&mut self, store: &SlabStore) -> Vec<Location> {
        if self.pending_rebuild {
            self.rebuild(store)
        } else {
            Vec::new()
        }
    }

    pub(super) fn on_error(&mut self, e: IndexError, store: &SlabStore) -> Vec<Location> {
        self.fail(e);
        self.rebuild(store)
    }

    /// A search on `proc`; false if the device failed (the CPU table is then rebuilt,
    /// when `store` is given, and `out` is not filled).
    pub(super) fn search_on(
        &mut self,
        proc: Proc,
        store: Option<&SlabStore>,
        hashes: &[KeyHash],
        out: &mut [Location],
        dropped: &mut Vec<Location>,
    ) -> bool {
        let synced = match proc {
            Proc::Device => self.sync_mirror(),
            Proc::Cpu => Ok(()),
        };
        if let Err(e) = synced {
            self.failed(e, store, dropped);
            return false;
        }
        let cpu = &self.cpu;
        let done = match (&mut self.device, proc) {
            (Some(d), Proc::Device) if d.steals() => d
                .try_search_stealing(hashes, out, true, |h, o| cpu.search(h, o))
                .map(|s| {
                    self.stolen.host += s.host;
                    self.stolen.device += s.device;
                }),
            (Some(d), Proc::Device) => d.try_search(hashes, out),
            _ => {
                self.cpu.search(hashes, out);
                return true;
            }
        };
        match done {
            Ok(()) => true,
            Err(e) => {
                self.failed(e, store, dropped);
                false
            }
        }
    }

    pub(super) fn insert_on(
        &mut self,
        proc: Proc,
        store: Option<&SlabStore>,
        entries: &[(KeyHash, Location)],
        out: &mut Vec<InsertOutcome>,
        dropped: &mut Vec<Location>,
    ) -> bool {
        out.clear();
        out.resize(entries.len(), InsertOutcome::Inserted);
        match (&mut self.device, proc) {
            (Some(d), Proc::Device) => match d.try_insert(entries, out) {
                Ok(()) => {
                    if d.is_shared() {
                        let added = out.iter().filter(|o| **o == InsertOutcome::Inserted);
                        self.cpu.note_entries(added.count() as u64, 0);
                    }
                    true
                }
                Err(e) => {
                    self.failed(e, store, dropped);
                    false
                }
            },
            _ => {
                for (o, (h, loc)) in out.iter_mut().zip(entries) {
                    *o = self.cpu.insert_one(h, *loc);
                }
                true
            }
        }
    }

    pub(super) fn delete_on(
        &mut self,
        proc: Proc,
        store: Option<&SlabStore>,
        entries: &[(KeyHash, Location)],
        dropped: &mut Vec<Location>,
    ) -> bool {
        match (&mut self.device, proc) {
            (Some(d), Proc::Device) => {
                let mut out = vec![false; entries.len()];
                match d.try_delete(entries, &mut out) {
                    Ok(()) => {
                        if d.is_shared() {
                            let removed = out.iter().filter(|&&o| o).count() as u64;
                            self.cpu.note_entries(0, removed);
                        }
                        true
                    }
                    Err(e) => {
                        self.failed(e, store, dropped);
                        false
                    }
                }
            }
            _ => {
                for (h, loc) in entries {
                    self.cpu.delete_one(h, *loc);
                }
                true
            }
        }
    }

    /// A device call failed: drop the device and rebuild from `store` (calibration has no
    /// store and nothing to rebuild; a mirror's CPU table is whole already).
    pub(super) fn failed(
        &mut self,
        e: IndexError,
        store: Option<&SlabStore>,
        dropped: &mut Vec<Location>,
    ) {
        match store {
            Some(store) if !self.mirrored() => dropped.extend(self.on_error(e, store)),
            _ => self.fail(e),
        }
    }

    /// Points the device at a grown table: a shared one at the CPU's new memory, a mirror at
    /// a copy of it (a table of its own past one device allocation, which the caller's
    /// inserts fill), and a table of its own resized.
    pub(super) fn move_device_table(&mut self, buckets: u32, new_table: *mut u32) {
        if let Some(d) = &mut self.device {
            let ds = d.stats();
            self.carried.displacements += ds.displacements;
            self.carried.walks += ds.walks;
            let mut mirror = d.is_mirror();
            let moved = if d.is_shared() {
                // SAFETY: as in `share`: the new table is `self.cpu`'s; the old one is
                // recycled by `grow` only after this returns, the device pointing at the new one.
                unsafe { d.share_host_table(new_table, buckets) }
            } else if mirror {
                match d.mirror_table(buckets) {
                    // Past one device allocation: the device keeps a table of its own, which
                    // `grow`'s inserts fill.
                    Err(IndexError::Size(_)) => {
                        mirror = false;
                        d.resize(buckets)
                    }
                    r => r,
                }
            } else {
                d.resize(buckets)
            };
            match moved {
                Ok(()) => self.cpu.track_changes(mirror),
                Err(e) => self.fail(e),
            }
        }
    }
}
