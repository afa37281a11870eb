//! RD without a copy: a large value is answered as a pin on its chunk (hkv_store's
//! pins.rs), which the network sends from item memory; the batch's `Responses::pinned`
//! holds the handles.

use hkv_index::Location;
use hkv_types::{Pinned, PINNED_VALUE};

use super::{Partition, Parts};
use hkv_index::KeyHash;
use hkv_types::Response;

/// The pins a partition made in the batch being run, before the batch takes them.
#[derive(Default)]
pub(crate) struct PinSink {
    /// Pins already in the batch's `Responses::pinned` (other partitions' or earlier runs').
    pub base: usize,
    /// Their value bytes, for the batch's value budget.
    pub base_bytes: usize,
    pub pins: Vec<Pinned>,
    pub bytes: usize,
}

impl PinSink {
    /// Opens the sink for a run whose batch already holds `held`.
    pub fn open(&mut self, held: &[Pinned]) {
        self.base = held.len();
        self.base_bytes = if held.is_empty() {
            0
        } else {
            held.iter().map(Pinned::len).sum()
        };
        self.pins.clear();
        self.bytes = 0;
    }

    /// Hands the run's pins to the batch.
    pub fn close(&mut self, held: &mut Vec<Pinned>) {
        held.append(&mut self.pins);
        self.bytes = 0;
    }

    /// Value bytes the batch holds as pins.
    pub fn batch_bytes(&self) -> usize {
        self.base_bytes + self.bytes
    }
}

impl Partition {
    /// Values at least this long are answered as pins (`usize::MAX`: never).
    pub fn set_zero_copy_min(&mut self, bytes: usize) {
        self.zero_copy_min = bytes;
    }

    /// Takes back the pins whose sends have ended (every caller that locks the partition
    /// does this first, so freed chunks are reusable before anything allocates).
    pub fn drain_unpins(&mut self) {
        self.store.drain_unpins();
    }

    /// The shortest value answered as a pin now that the batch has copied `copied` bytes of
    /// values (`usize::MAX`: none).
    pub(super) fn pin_min(&self, copied: usize) -> usize {
        let min = self.zero_copy_min.min(self.budget.pin_from);
        if copied >= self.budget.total {
            min.min(self.budget.pin_past_budget)
        } else {
            min
        }
    }

    /// RD of the live item at `loc` as a pin, if its value is large and flat: the
    /// `Response::Value` offset that names the pin. The hit itself is recorded by the caller.
    pub(super) fn rd_pin(&mut self, loc: Location, copied: usize) -> Option<usize> {
        let len = self.store.get(loc)?.value_len();
        if len < self.pin_min(copied) {
            return None;
        }
        let pin = self.store.pin_value(loc)?;
        let offset = PINNED_VALUE + self.pin_sink.base + self.pin_sink.pins.len();
        self.pin_sink.bytes += pin.len();
        self.pin_sink.pins.push(pin);
        self.stats.zero_copy_values += 1;
        Some(offset)
    }

    /// Before an in-place change of the item at `cur` (a vector update): if a send still
    /// reads its value, the key gets a copy as its new version, which is changed instead,
    /// so the bytes on the wire stay those of the version that was read. Returns the
    /// location to change (None: the copy could not be stored, and the key is gone, as a
    /// failed replacement leaves it in memcached).
    pub(super) fn unshare(
        &mut self,
        key: &[u8],
        h: &KeyHash,
        now: u32,
        cur: Option<Location>,
    ) -> Option<Location> {
        let loc = cur?;
        if !self.store.is_pinned(loc) {
            return Some(loc);
        }
        let (flags, expiry) = {
            let item = self.store.get(loc)?;
            self.value_buf.clear();
            let mut buf = std::mem::take(&mut self.value_buf);
            self.store.copy_value(&item, &mut buf);
            self.value_buf = buf;
            (item.flags(), item.expiry())
        };
        let last = self.last;
        let stored = self.store_raw(key, h, Parts::Buf, flags, expiry, now, Some(loc), true);
        self.last = last;
        matches!(stored, Response::Stored).then_some(self.last_loc)
    }
}
