//! Device-placed searches split with the partition's thread where the device cannot be
//! stolen from (load dispatch; the share's controller is `crate::dispatch`).

use hkv_index::{IndexBackend, KeyHash, Location};
use hkv_store::SlabStore;

use super::Index;

impl Index {
    /// Whether a device-placed search is split with this thread (load dispatch): on a
    /// shared or mirrored table whose device cannot share it by stealing.
    pub fn splits(&self) -> bool {
        self.split_on
            && self.device.as_ref().is_some_and(|d| {
                (d.is_shared() || d.is_mirror()) && !d.steals() && d.sub_tables() == 1
            })
    }

    /// A device-placed search split between the device and this thread, at the share the
    /// measured rates of both set (dispatch.rs).
    pub(super) fn search_split(
        &mut self,
        store: &SlabStore,
        hashes: &[KeyHash],
        out: &mut [Location],
        dropped: &mut Vec<Location>,
    ) -> bool {
        if let Err(e) = self.sync_mirror() {
            self.failed(e, Some(store), dropped);
            return false;
        }
        let Some(d) = &self.device else {
            return false;
        };
        let k = self.dispatch.device_share(hashes.len());
        let cpu = &self.cpu;
        match d.try_search_split(hashes, out, k, |h, o| cpu.search(h, o)) {
            Ok(split) => {
                self.dispatch.observe(k, hashes.len(), split);
                true
            }
            Err(e) => {
                self.failed(e, Some(store), dropped);
                false
            }
        }
    }
}
