//! Values received into item memory before their command runs (the network's staging):
//! the engine's side, a lock of the key's partition around each step.

use hkv_index::hash_key;
use hkv_types::Staged;

use super::Engine;

impl Engine {
    /// MM ahead of a command: takes item memory for a value of `value_len` bytes for `key`
    /// so that its bytes can be received into it (`fill_staged`) and the command then store
    /// it (`Request::staged`). Without `evict`, only memory that is free now is taken (see
    /// `SlabStore::stage`). None if memory cannot be had now.
    pub fn stage_value(
        &self,
        key: &[u8],
        value_len: usize,
        now: u32,
        evict: bool,
    ) -> Option<Staged> {
        let p = hash_key(key).partition(self.partitions.len() as u32);
        let st = {
            let mut part = self.lock(p as usize);
            let st = part.stage_value(key, value_len, now, evict);
            // Taking the memory may have applied the waiting index writes.
            self.note_pending(p as usize, &part);
            st?
        };
        Some(Staged {
            partition: p,
            loc: st.loc,
            token: st.token,
            key_len: st.key_len as u32,
            value_len: st.value_len as u64,
        })
    }

    /// Writes `bytes` at `offset` of a staged value. False if the stage is gone.
    pub fn fill_staged(&self, st: &Staged, offset: usize, bytes: &[u8]) -> bool {
        match self.partitions.get(st.partition as usize) {
            Some(_) => self
                .lock(st.partition as usize)
                .fill_stage(st, offset, bytes),
            None => false,
        }
    }

    /// Gives back the memory of a staged value whose command will not run (its connection
    /// closed, its data block was malformed). Nothing happens if it was stored already.
    pub fn release_staged(&self, st: &Staged) {
        if (st.partition as usize) < self.partitions.len() {
            self.lock(st.partition as usize).release_stage(st);
        }
    }
}
