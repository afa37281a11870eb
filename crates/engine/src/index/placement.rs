//! Placement on the index (issue 17, docs/placement.md): putting a device that shares host
//! memory on the CPU's own table, calibrating the cost model, and choosing where each
//! batch runs.

use std::time::Instant;

use hkv_index::opencl::OclIndex;
use hkv_index::{IndexBackend, InsertOutcome, KeyHash, Location};

use super::{ns, Index};
use crate::cost::CostModel;
use crate::policy::{Placement, Proc, Task};

/// The location of the start-up probes' entry.
const PROBE: Location = 0xFFFF_FFF0;

/// One CPU batch in this many is timed for the model where the device searches a mirror.
const MIRROR_SAMPLE: u64 = 8;

/// The table a partition's device works on (`stats hkv placement_table`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceTable {
    /// No device.
    None,
    /// The CPU's own table, in host memory both read and write: every task is placed.
    Shared,
    /// A copy of the CPU's table the host keeps up to date: searches are placed.
    Mirror,
    /// A table of its own: the device runs every index task.
    Own,
}

impl DeviceTable {
    pub fn name(self) -> &'static str {
        match self {
            DeviceTable::None => "none",
            DeviceTable::Shared => "shared",
            DeviceTable::Mirror => "mirror",
            DeviceTable::Own => "own",
        }
    }

    /// Whether some index task can be placed on either processor.
    pub fn placeable(self) -> bool {
        matches!(self, DeviceTable::Shared | DeviceTable::Mirror)
    }
}

/// Calibration calls are spaced out by this much CPU work, as a partition's calls are by
/// the rest of a batch: back to back, a runtime whose threads spin between kernels (PoCL)
/// launches faster than it does in service (measured: 40-50% faster).
const CALIBRATION_GAP: std::time::Duration = std::time::Duration::from_micros(200);

pub(crate) fn settle_gap() {
    let t = Instant::now();
    while t.elapsed() < CALIBRATION_GAP {
        std::hint::spin_loop();
    }
}

impl Index {
    /// either: `--placement`).
    pub fn shared(&self) -> bool {
        self.device.as_ref().is_some_and(|d| d.is_shared())
    }

    pub fn set_policy(&mut self, policy: Placement) {
        self.policy = policy;
    }

    pub fn policy(&self) -> Placement {
        self.policy
    }

    /// Where the device shares host memory, puts it to work on the CPU's table and proves
    /// with a probe entry that each processor sees the other's writes; otherwise (a
    /// discrete GPU, `HKV_OPENCL_SHARE=0`) gives it a copy of the CPU's table to search
    /// ([`Index::mirror`]). Where neither works (a table larger than one allocation,
    /// `HKV_OPENCL_MIRROR=0` too) the device keeps a table of its own and runs every index
    /// operation.
    pub fn share(&mut self) {
        let buckets = self.cpu.bucket_count();
        let table = self.cpu.table_ptr();
        let Some(d) = &mut self.device else { return };
        if !d.device().host_unified_memory
            || std::env::var("HKV_OPENCL_SHARE").as_deref() == Ok("0")
        {
            self.mirror();
            return;
        }
        // SAFETY: the table belongs to `self.cpu`, which outlives the device's buffer (field
        // order; `grow` shares the new table before the old memory is recycled), and the host
        // touches it only between device calls, each of which waits for its kernels.
        let shared = unsafe { d.share_host_table(table, buckets) };
        let ok = match shared {
            Ok(()) => {
                self.probe_sharing() && {
                    if let Some(d) = &mut self.device {
                        let steals = d.probe_stealing();
                        tracing::info!(steals, "index table shared with the device");
                    }
                    true
                }
            }
            Err(e) => {
                tracing::info!(error = %e, "index table not shared with the device");
                false
            }
        };
        if !ok {
            let Some(d) = &mut self.device else { return };
            if d.is_shared() {
                tracing::warn!("the device did not see the host's table writes");
                if let Err(e) = d.resize(buckets) {
                    self.fail(e);
                    return;
                }
                self.cpu.clear();
            }
            self.mirror();
        }
    }

    /// Gives the device a copy of the CPU's table that the host keeps up to date before each
    /// device search (only the pages written since the last one cross the bus), so that
    /// searches can be placed on either processor; inserts and deletes stay on the CPU.
    /// Proven at start with a probe entry written and removed on the CPU and searched on
    /// the device after each.
    pub(super) fn mirror(&mut self) {
        if std::env::var("HKV_OPENCL_MIRROR").as_deref() == Ok("0") {
            return;
        }
        let buckets = self.cpu.bucket_count();
        let Some(d) = &mut self.device else { return };
        if let Err(e) = d.mirror_table(buckets) {
            tracing::info!(error = %e, "index table not mirrored on the device; it keeps its own");
            return;
        }
        self.cpu.track_changes(true);
        if self.probe_mirror() {
            tracing::info!("index table mirrored on the device: searches are placed");
            return;
        }
        tracing::warn!("the device's copy of the table did not match the host's; it keeps its own");
        self.cpu.track_changes(false);
        if let Some(d) = &mut self.device {
            if let Err(e) = d.resize(buckets) {
                self.fail(e);
            }
        }
        self.cpu.clear();
    }

    /// Whether the device searches a copy of the CPU's table ([`Index::mirror`]).
    pub fn mirrored(&self) -> bool {
        self.device.as_ref().is_some_and(|d| d.is_mirror())
    }

    /// Which table the device works on.
    pub fn device_table(&self) -> DeviceTable {
        match &self.device {
            None => DeviceTable::None,
            Some(d) if d.is_shared() => DeviceTable::Shared,
            Some(d) if d.is_mirror() => DeviceTable::Mirror,
            Some(_) => DeviceTable::Own,
        }
    }

    /// Brings a mirrored device table up to date with the CPU's (see [`Index::mirror`]).
    pub(super) fn sync_mirror(&mut self) -> Result<(), hkv_index::IndexError> {
        match &mut self.device {
            Some(d) if d.is_mirror() => {
                let changes = self.cpu.take_changes();
                let sent = d.sync_mirror(self.cpu.words(), &changes)?;
                self.mirror_bytes += sent;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A key hash no entry of the CPU's table has, for the start-up probes.
    fn probe_hash(&self) -> Option<KeyHash> {
        (1..64u32)
            .map(|i| KeyHash {
                sig: 0x5EED_0000 | i,
                lo: i.wrapping_mul(0x9E37_79B9),
            })
            .find(|h| self.cpu.search_one(h) == hkv_index::NO_LOCATION)
    }

    /// Syncs a mirror and searches `h` on the device (None: the device failed).
    fn mirror_search(&mut self, h: &KeyHash) -> Option<Location> {
        self.sync_mirror().ok()?;
        let mut out = [hkv_index::NO_LOCATION];
        self.device.as_ref()?.try_search(&[*h], &mut out).ok()?;
        Some(out[0])
    }

    /// Writes an entry on the CPU, searches it on the device, removes it, searches again.
    fn probe_mirror(&mut self) -> bool {
        let Some(h) = self.probe_hash() else {
            return false;
        };
        let inserted = self.cpu.insert_one(&h, PROBE) == InsertOutcome::Inserted;
        let seen = inserted && self.mirror_search(&h) == Some(PROBE);
        let removed = self.cpu.delete_one(&h, PROBE);
        removed && seen && self.mirror_search(&h) == Some(hkv_index::NO_LOCATION)
    }

    /// Writes an entry on each processor and reads it on the other, then removes it.
    pub(super) fn probe_sharing(&mut self) -> bool {
        let Some(h) = self.probe_hash() else {
            return false;
        };
        let Some(d) = &mut self.device else {
            return false;
        };
        let search = |d: &OclIndex| {
            let mut out = [hkv_index::NO_LOCATION];
            d.try_search(&[h], &mut out).map(|()| out[0])
        };
        let mut inserted = [InsertOutcome::Inserted];
        let mut deleted = [false];
        d.try_insert(&[(h, PROBE)], &mut inserted).is_ok()
            && inserted[0] == InsertOutcome::Inserted
            && self.cpu.search_one(&h) == PROBE
            && {
                self.cpu.note_entries(1, 0);
                self.cpu.delete_one(&h, PROBE)
            }
            && search(d).ok() == Some(hkv_index::NO_LOCATION)
            && self.cpu.insert_one(&h, PROBE) == InsertOutcome::Inserted
            && search(d).ok() == Some(PROBE)
            && d.try_delete(&[(h, PROBE)], &mut deleted).is_ok()
            && deleted[0]
            && {
                self.cpu.note_entries(0, 1);
                self.cpu.search_one(&h) == hkv_index::NO_LOCATION
            }
    }

    /// Times each task on both processors over a shared table, so `auto` starts from
    /// measured lines: searches of random keys, and inserts of entries removed again right
    /// after (only while the table is empty, as at start-up, so no real entry is touched).
    pub fn calibrate(&mut self) {
        if !(self.shared() || self.mirrored())
            || !self.policy.0.contains(&crate::policy::Choice::Auto)
        {
            return;
        }
        let mut x = 0x2545_F491u32;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        // A mirror is written by the CPU alone: only its searches are placed.
        let empty = self.shared() && self.cpu.stats().entries == 0;
        let mut dropped = Vec::new();
        let store = None;
        // The first round only warms up (PoCL compiles a kernel on its first launch).
        for rep in 0..=crate::cost::CALIBRATION_REPS {
            for &n in &crate::cost::CALIBRATION_SIZES {
                let hashes: Vec<KeyHash> = (0..n)
                    .map(|_| KeyHash {
                        sig: next() | 1,
                        lo: next(),
                    })
                    .collect();
                let mut out = vec![hkv_index::NO_LOCATION; n];
                for proc in [Proc::Cpu, Proc::Device] {
                    settle_gap();
                    let t = Instant::now();
                    if !self.search_on(proc, store, &hashes, &mut out, &mut dropped) {
                        return;
                    }
                    let record = |m: &mut CostModel, task, t| {
                        if rep > 0 {
                            m.calibrate(task, proc, n, ns(t));
                        }
                    };
                    record(&mut self.model, Task::Search, t);
                    if !empty {
                        continue;
                    }
                    let entries: Vec<(KeyHash, Location)> =
                        hashes.iter().zip(0..).map(|(h, l)| (*h, l)).collect();
                    let mut outcomes = Vec::new();
                    settle_gap();
                    let t = Instant::now();
                    if !self.insert_on(proc, store, &entries, &mut outcomes, &mut dropped) {
                        return;
                    }
                    record(&mut self.model, Task::Insert, t);
                    settle_gap();
                    let t = Instant::now();
                    if !self.delete_on(proc, store, &entries, &mut dropped) {
                        return;
                    }
                    record(&mut self.model, Task::Delete, t);
                }
            }
        }
        if empty && self.cpu.stats().entries != 0 {
            // A walk moved a calibration entry where its delete did not look: start clean.
            self.cpu.clear();
        }
    }

    /// Where a batch of `n` runs: the CPU without a device, the device when it holds a
    /// table of its own, else as placed.
    pub(super) fn place(&mut self, task: Task, n: usize) -> Proc {
        match &self.device {
            None => Proc::Cpu,
            Some(d) if d.is_shared() => self.model.choose(&self.policy, task, n),
            Some(d) if d.is_mirror() && task == Task::Search => {
                self.model.choose(&self.policy, task, n)
            }
            Some(d) if d.is_mirror() => Proc::Cpu,
            Some(_) => Proc::Device,
        }
    }

    /// Whether a search of `n` reads would go to the device (so the partition hands it all
    /// of them in one call).
    pub fn search_wants_device(&self, n: usize) -> bool {
        match &self.device {
            None => false,
            Some(d) if !d.is_shared() && !d.is_mirror() => true,
            Some(_) => match self.policy.of(Task::Search) {
                crate::policy::Choice::Forced(p) => p == Proc::Device,
                crate::policy::Choice::Auto => self.model.best(Task::Search, n) == Proc::Device,
            },
        }
    }

    pub(super) fn place_one(&self, task: Task) -> Proc {
        match &self.device {
            None => Proc::Cpu,
            Some(d) if d.is_shared() => self.model.choose_single(&self.policy, task),
            Some(d) if d.is_mirror() && task == Task::Search => {
                self.model.choose_single(&self.policy, task)
            }
            Some(d) if d.is_mirror() => Proc::Cpu,
            Some(_) => Proc::Device,
        }
    }

    /// A placed batch's time, for the model.
    pub(crate) fn timed(&mut self, task: Task, proc: Proc, n: usize, t: Option<Instant>) {
        if let Some(t) = t {
            self.model.observe(task, proc, n, ns(t));
        }
    }

    /// An engine batch starts: with a device, its clock, for [`Self::batch_end`].
    pub(crate) fn batch_begin(&mut self) -> Option<Instant> {
        self.batch_seq += 1;
        let t = if self.mirrored() && !self.sampler.one_in(MIRROR_SAMPLE) {
            None
        } else {
            self.clock()
        };
        self.batch_timed = t.is_some();
        if t.is_some() {
            self.model.begin_batch();
        }
        t
    }

    /// An engine batch of `requests` that started at `t` is done: the model learns what
    /// its device calls cost the rest of it.
    pub(crate) fn batch_end(&mut self, requests: usize, t: Option<Instant>) {
        if let Some(t) = t {
            self.model.end_batch(requests, ns(t));
        }
    }

    /// Batches are timed wherever there is a device (counted in `stats hkv` even where the
    /// table is not shared and there is nothing to choose).
    pub(super) fn clock(&self) -> Option<Instant> {
        self.device.is_some().then(Instant::now)
    }

    /// [`Index::clock`] for a batch of `task`: a mirror's writes always run on the CPU, so
    /// nothing learns from their times.
    pub(super) fn clock_for(&self, task: Task) -> Option<Instant> {
        if task != Task::Search && self.mirrored() {
            return None;
        }
        self.clock()
    }

    /// [`Index::clock_for`] for a batch placed on `proc`. With a mirror, where the CPU
    /// usually wins and runs the same small batches as the CPU engine, the CPU's searches
    /// are timed in the engine batches [`Index::batch_begin`] drew (one in
    /// [`MIRROR_SAMPLE`]), all of them there, so that a timed batch's rest holds no untimed
    /// search; device searches are all timed.
    pub(super) fn clock_placed(&mut self, task: Task, proc: Proc) -> Option<Instant> {
        if self.mirrored() && proc == Proc::Cpu && !self.batch_timed {
            return None;
        }
        self.clock_for(task)
    }
}
