//! KC and RD of a read group as OpenCL kernels (`hkv_index::opencl::OclItems`), where the
//! device shares host memory and so reads the items in place: placed per group by the cost
//! model like IN's tasks (`--placement KC=device,RD=device`, or `auto`). A device failure
//! leaves the group to the CPU and the kernels unused from then on.

use std::sync::Arc;
use std::time::Instant;

use hkv_index::opencl::{KcVerdict, OclItems, NO_CHUNK, VALUE_CHAINED};
use hkv_mem::Arena;
use hkv_store::{device_layout, SlabStore, StoreConfig};
use hkv_types::Request;

use super::read::Kc;
use super::Partition;
use crate::policy::{Choice, Proc, Task};

/// RD on the device copies values up to this size, and at most this many bytes per group:
/// its output buffer is bounded whatever the items (larger values take the CPU's RD).
const RD_DEVICE_MAX_VALUE: u32 = 64 << 10;
const RD_DEVICE_MAX_BYTES: u32 = 4 << 20;
/// `value_at` of a read whose value the device did not copy.
const NOT_COPIED: (u32, u32) = (u32::MAX, u32::MAX);

/// The kernels, the arena they read (kept mapped while they exist: declared after them, so
/// dropped after), and their scratch.
pub(crate) struct ItemsDevice {
    kernels: OclItems,
    _arena: Arc<Arena>,
    at: Vec<u64>,
    keys: Vec<u8>,
    key_at: Vec<u32>,
    found: Vec<KcVerdict>,
    /// Per read of the group, from the last device KC: its value's length.
    lens: Vec<u32>,
    rd_at: Vec<u64>,
    out_at: Vec<u32>,
    /// The values RD copied, and per read of the group where its value lies in them (or
    /// [`NOT_COPIED`]).
    pub(super) values: Vec<u8>,
    pub(super) value_at: Vec<(u32, u32)>,
}

impl ItemsDevice {
    /// The value RD copied for read `j` of the group, if it did.
    pub(super) fn value<'v>(
        values: &'v [u8],
        value_at: &[(u32, u32)],
        j: usize,
    ) -> Option<&'v [u8]> {
        let (start, end) = *value_at.get(j)?;
        if (start, end) == NOT_COPIED {
            return None;
        }
        values.get(start as usize..end as usize)
    }
}

/// KC and RD kernels over `arena` on the index's device.
fn build(index: &hkv_index::opencl::OclIndex, arena: &Arc<Arena>) -> Option<ItemsDevice> {
    let (base, len) = arena.mapping();
    // SAFETY: `ItemsDevice` keeps the arena (and so its mapping) alive for as long as the
    // kernels exist; the kernels read only chunks of the partition that owns them, from its
    // own thread, and each call waits for its kernels, so nothing writes those chunks while
    // a kernel reads them.
    match unsafe { index.item_unit(base.as_ptr(), len, &device_layout()) } {
        Ok(kernels) => Some(ItemsDevice {
            kernels,
            _arena: arena.clone(),
            at: Vec::new(),
            keys: Vec::new(),
            key_at: Vec::new(),
            found: Vec::new(),
            lens: Vec::new(),
            rd_at: Vec::new(),
            out_at: Vec::new(),
            values: Vec::new(),
            value_at: Vec::new(),
        }),
        Err(e) => {
            tracing::info!(error = %e, "no KC/RD kernels on the device");
            None
        }
    }
}

impl Partition {
    /// Builds the KC and RD kernels where the device works on the CPU's own table: that
    /// table's start-up probe showed that the device reads what this process writes, which
    /// the kernels rely on for items too.
    pub(super) fn build_items_device(&mut self) {
        self.items_device = None;
        if !self.index.shared() {
            return;
        }
        if let Some(d) = self.index.device() {
            self.items_device = build(d, self.store.arena());
        }
    }

    /// Whether KC/RD kernels are there to place.
    pub fn items_on_device(&self) -> bool {
        self.items_device.is_some()
    }

    /// Where KC and RD of a group of `n` reads run (chosen together: task affinity).
    pub(super) fn items_procs(&mut self, n: usize) -> (Proc, Proc) {
        if self.items_device.is_none() || !self.index.shared() {
            return (Proc::Cpu, Proc::Cpu);
        }
        let policy = self.index.policy();
        self.index.model.choose_reads(&policy, n)
    }

    /// Whether KC or RD would put a group of `n` on the device (so reads are grouped per
    /// batch, not 64 at a time: a launch per 64 would cost more than it does).
    pub(super) fn items_want_device(&self, n: usize) -> bool {
        let forced = |t| self.index.policy().of(t) == Choice::Forced(Proc::Device);
        let auto = |t| self.index.policy().of(t) == Choice::Auto;
        self.items_device.is_some()
            && (forced(Task::Kc) || forced(Task::Rd) || {
                let (kc, rd) = self.index.model.best_reads(n);
                (auto(Task::Kc) && kc == Proc::Device) || (auto(Task::Rd) && rd == Proc::Device)
            })
    }

    /// A placed KC of `n` reads took `t`: for the model.
    pub(super) fn kc_timed(&mut self, proc: Proc, n: usize, t: Instant) {
        if self.items_device.is_some() {
            self.index.timed(Task::Kc, proc, n, Some(t));
        }
    }

    /// A placed RD of `n` reads, after their KC on `kc`, took `t`: for the model.
    pub(super) fn rd_timed(&mut self, kc: Proc, proc: Proc, n: usize, t: Instant) {
        if self.items_device.is_some() {
            let ns = t.elapsed().as_nanos() as f64;
            self.index.model.observe_rd(kc, proc, n, ns);
        }
    }

    fn items_failed(&mut self, e: hkv_index::IndexError) {
        tracing::warn!(error = %e, "KC/RD kernel failed; the CPU runs them from now on");
        self.stats.items_device_errors += 1;
        self.items_device = None;
    }

    /// KC of the read group on the device (`group_kc`, and the value lengths for RD);
    /// false if it did not run (the CPU then does it).
    pub(super) fn kc_on_device(&mut self, reqs: &[Request<'_>], now: u32) -> bool {
        let Some(d) = self.items_device.as_mut() else {
            return false;
        };
        d.at.clear();
        d.keys.clear();
        d.key_at.clear();
        d.key_at.push(0);
        for (j, &i) in self.group.iter().enumerate() {
            let loc = self.group_locs[j];
            d.at.push(if loc == hkv_index::NO_LOCATION {
                NO_CHUNK
            } else {
                self.store.chunk_offset(loc).unwrap_or(NO_CHUNK)
            });
            d.keys.extend_from_slice(reqs[i as usize].key);
            d.key_at.push(d.keys.len() as u32);
        }
        if let Err(e) = d
            .kernels
            .kc(&d.at, &d.keys, &d.key_at, now, &mut d.found, &mut d.lens)
        {
            self.items_failed(e);
            return false;
        }
        self.group_kc.clear();
        for &v in &d.found {
            self.group_kc.push(match v {
                KcVerdict::Live => Kc::Live,
                KcVerdict::Expired => Kc::Expired,
                KcVerdict::Miss => Kc::Miss,
                KcVerdict::OtherKey => {
                    self.stats.key_mismatches += 1;
                    Kc::Miss
                }
            });
        }
        true
    }

    /// RD of the group's live items on the device, into the device's `values`; false if it
    /// did not run. `lens_from_kc`: the device's KC ran for this group and left the value
    /// lengths (otherwise they are read from the items).
    pub(super) fn rd_on_device(&mut self, lens_from_kc: bool) -> bool {
        let Some(d) = self.items_device.as_mut() else {
            return false;
        };
        d.rd_at.clear();
        d.out_at.clear();
        d.out_at.push(0);
        d.value_at.clear();
        let mut total = 0u32;
        for j in 0..self.group.len() {
            let mut at = NOT_COPIED;
            if self.group_kc[j].is_live() {
                let loc = self.group_locs[j];
                let len = if lens_from_kc {
                    d.lens[j]
                } else {
                    self.store.get(loc).map_or(VALUE_CHAINED, |item| {
                        if item.is_chained() {
                            VALUE_CHAINED
                        } else {
                            item.value_len() as u32
                        }
                    })
                };
                if len <= RD_DEVICE_MAX_VALUE && total + len <= RD_DEVICE_MAX_BYTES {
                    if let Some(off) = self.store.chunk_offset(loc) {
                        at = (total, total + len);
                        total += len;
                        d.rd_at.push(off);
                        d.out_at.push(total);
                    }
                }
            }
            d.value_at.push(at);
        }
        if let Err(e) = d.kernels.rd(&d.rd_at, &d.out_at, &mut d.values) {
            self.items_failed(e);
            return false;
        }
        true
    }

    /// Times KC and RD on both processors at start-up for `auto`, on a scratch store of
    /// their own (the partition's store is still empty, and must stay untouched).
    pub(super) fn calibrate_items(&mut self) {
        let auto = |t| self.index.policy().of(t) == Choice::Auto;
        if self.items_device.is_none() || !(auto(Task::Kc) || auto(Task::Rd)) {
            return;
        }
        let Some(index) = self.index.device() else {
            return;
        };
        let Ok(arena) = Arena::new(8 << 20).map(Arc::new) else {
            return;
        };
        let Some(mut scratch) = build(index, &arena) else {
            return;
        };
        let mut store = SlabStore::new(arena.clone(), &StoreConfig::default());
        let now = 1;
        let keys: Vec<Vec<u8>> = (0..1024u32)
            .map(|i| format!("calibrate:{i:06}").into_bytes())
            .collect();
        let mut locs = Vec::new();
        for k in &keys {
            match store.store(k, &[&[7u8; 32]], 0, 0, now, |_, _, _| {}) {
                Ok((loc, _)) => locs.push(loc),
                Err(_) => return,
            }
        }
        let mut x = 0x9E37_79B9u32;
        let (mut found, mut out) = (Vec::new(), Vec::new());
        for rep in 0..=crate::cost::CALIBRATION_REPS {
            for &n in &crate::cost::CALIBRATION_SIZES {
                let pick: Vec<usize> = (0..n)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        x as usize % locs.len()
                    })
                    .collect();
                let s = &mut scratch;
                s.at.clear();
                s.keys.clear();
                s.key_at.clear();
                s.key_at.push(0);
                for &p in &pick {
                    s.at.push(store.chunk_offset(locs[p]).unwrap_or(NO_CHUNK));
                    s.keys.extend_from_slice(&keys[p]);
                    s.key_at.push(s.keys.len() as u32);
                }
                s.out_at.clear();
                s.out_at.extend((0..=n as u32).map(|i| i * 32));
                // Each KC then RD, on every pair of processors (RD's lines depend on where
                // KC ran: task affinity). The first round only warms up (PoCL compiles a
                // kernel on its first launch).
                for (kc, rd) in [
                    (Proc::Cpu, Proc::Cpu),
                    (Proc::Device, Proc::Device),
                    (Proc::Device, Proc::Cpu),
                    (Proc::Cpu, Proc::Device),
                ] {
                    crate::index::placement::settle_gap();
                    let t = Instant::now();
                    let ok = match kc {
                        Proc::Cpu => {
                            found.clear();
                            for &p in &pick {
                                found.push(
                                    store
                                        .get(locs[p])
                                        .is_some_and(|i| i.key_is(&keys[p]) && !i.is_expired(now)),
                                );
                            }
                            std::hint::black_box(&found);
                            true
                        }
                        Proc::Device => s
                            .kernels
                            .kc(&s.at, &s.keys, &s.key_at, now, &mut s.found, &mut s.lens)
                            .is_ok(),
                    };
                    let kc_ns = t.elapsed().as_nanos() as f64;
                    let t = Instant::now();
                    let ok = ok
                        && match rd {
                            Proc::Cpu => {
                                out.clear();
                                for &p in &pick {
                                    if let Some(item) = store.get(locs[p]) {
                                        store.copy_value(&item, &mut out);
                                    }
                                }
                                std::hint::black_box(&out);
                                true
                            }
                            Proc::Device => s.kernels.rd(&s.at, &s.out_at, &mut s.values).is_ok(),
                        };
                    let rd_ns = t.elapsed().as_nanos() as f64;
                    if !ok {
                        return;
                    }
                    if rep > 0 {
                        if kc == rd {
                            self.index.model.calibrate(Task::Kc, kc, n, kc_ns);
                        }
                        self.index.model.calibrate_rd(kc, rd, n, rd_ns);
                    }
                }
            }
        }
    }
}
