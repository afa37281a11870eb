//! Values received straight into item memory (store/stage.rs): MM for a large value when its
//! command line arrives, its bytes written as they come, the item linked by its command.

use super::*;

impl Partition {
    /// MM for a value of `value_len` bytes for `key`, before its command runs: takes its
    /// chunks (the items taken leave the index now), from free memory only unless `evict`
    /// (store/stage.rs). None if memory cannot be had; the caller then buffers the value,
    /// or asks again with `evict` once more of it has come.
    pub fn stage_value(
        &mut self,
        key: &[u8],
        value_len: usize,
        now: u32,
        evict: bool,
    ) -> Option<hkv_store::Stage> {
        // The expiry sweep runs before a batch's stores; a value that arrives in pieces is
        // staged before its batch, so it runs here too, or the chunks of expired items wait
        // for the next batch while this one takes a new page (found looking into memcached's
        // issue_14.t, whose memory grew: regression test in tests/staged.rs).
        self.maybe_sweep(now);
        let mut staged = self.mm_stage(key, value_len, now, evict);
        if staged.is_err() && !self.pending.is_empty() {
            // Retired versions hold chunks back until the index lets go of them.
            self.apply_pending();
            staged = self.mm_stage(key, value_len, now, evict);
        }
        staged.ok()
    }

    fn mm_stage(
        &mut self,
        key: &[u8],
        value_len: usize,
        now: u32,
        evict: bool,
    ) -> Result<hkv_store::Stage, StoreError> {
        self.with_reclaim(now, |store, reclaim| {
            store.stage(key, value_len, now, evict, reclaim)
        })
    }

    /// Writes bytes of a staged value; false if the stage is gone or they do not fit.
    pub fn fill_stage(&mut self, st: &hkv_types::Staged, offset: usize, bytes: &[u8]) -> bool {
        self.store.fill_stage(&stage_of(st), offset, bytes)
    }

    /// Gives back a stage its command will not store (true if it was still live).
    pub fn release_stage(&mut self, st: &hkv_types::Staged) -> bool {
        self.store.release_stage(&stage_of(st))
    }
}
