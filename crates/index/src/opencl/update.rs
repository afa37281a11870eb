//! Batched insert and delete on the device, in rounds until every entry has its outcome.

use opencl3::kernel::ExecuteKernel;
use opencl3::types::cl_uint;

use super::{err, OclIndex, GROUP, OUT_EVICTED, OUT_FULL, OUT_INSERTED, OUT_REPLACED};
use crate::hash::KeyHash;
use crate::{IndexError, InsertOutcome, Location};

impl OclIndex {
    /// Inserts in rounds: within a round no two entries share a signature (the kernel's
    /// same-signature check must not race a claim of the same signature); entries that found
    /// both buckets full go, in order, to the displacement kernel.
    pub fn try_insert(
        &mut self,
        entries: &[(KeyHash, Location)],
        out: &mut [InsertOutcome],
    ) -> Result<(), IndexError> {
        self.writable()?;
        for t in 0..self.tables.len() {
            let mut todo: Vec<usize> = (0..entries.len())
                .filter(|&i| self.table_of(&entries[i].0) == t)
                .collect();
            while !todo.is_empty() {
                let mut round = Vec::new();
                let mut later = Vec::new();
                let mut seen = std::collections::HashSet::new();
                for i in todo {
                    if seen.insert(entries[i].0.sig) {
                        round.push(i);
                    } else {
                        later.push(i);
                    }
                }
                self.insert_round(t, entries, &round, out)?;
                todo = later;
            }
        }
        Ok(())
    }

    /// A mirror is written by the host alone: a device write would be lost at the next sync.
    fn writable(&self) -> Result<(), IndexError> {
        if self.mirror {
            return Err(IndexError::Device(
                "the device's table mirrors the host's: only the host writes it".into(),
            ));
        }
        Ok(())
    }

    fn insert_round(
        &mut self,
        t: usize,
        entries: &[(KeyHash, Location)],
        round: &[usize],
        out: &mut [InsertOutcome],
    ) -> Result<(), IndexError> {
        let n = round.len();
        self.launch()?;
        let sigs: Vec<u32> = round.iter().map(|&i| entries[i].0.sig).collect();
        let los: Vec<u32> = round.iter().map(|&i| entries[i].0.lo).collect();
        let locs: Vec<u32> = round.iter().map(|&i| entries[i].1).collect();
        let (bs, bl, bc) = (self.upload(&sigs)?, self.upload(&los)?, self.upload(&locs)?);
        let (bk, bo) = (self.scratch(n)?, self.scratch(n)?);
        let (nn, mask) = (n as cl_uint, self.mask);
        // SAFETY: arguments match `insert` in index.cl; buffers hold n words; i < n guarded.
        let ev = unsafe {
            ExecuteKernel::new(&self.insert)
                .set_arg(&self.tables[t])
                .set_arg(&bs)
                .set_arg(&bl)
                .set_arg(&bc)
                .set_arg(&bk)
                .set_arg(&bo)
                .set_arg(&nn)
                .set_arg(&mask)
                .set_global_work_size(Self::global(n))
                .set_local_work_size(GROUP)
                .enqueue_nd_range(&self.queues[0])
        }
        .map_err(|e| err("insert", e))?;
        ev.wait().map_err(|e| err("insert", e))?;
        let mut kind = vec![0u32; n];
        let mut old = vec![0u32; n];
        self.download(&bk, &mut kind)?;
        self.download(&bo, &mut old)?;
        let full: Vec<u32> = (0..n as u32)
            .filter(|&j| kind[j as usize] == OUT_FULL)
            .collect();
        if !full.is_empty() {
            let bp = self.upload(&full)?;
            let m = full.len() as cl_uint;
            // SAFETY: arguments match `displace`; one work-item walks the pending list.
            let ev = unsafe {
                ExecuteKernel::new(&self.displace)
                    .set_arg(&self.tables[t])
                    .set_arg(&bs)
                    .set_arg(&bl)
                    .set_arg(&bc)
                    .set_arg(&bk)
                    .set_arg(&bo)
                    .set_arg(&bp)
                    .set_arg(&m)
                    .set_arg(&mask)
                    .set_arg(&self.rng)
                    .set_global_work_size(GROUP)
                    .set_local_work_size(GROUP)
                    .enqueue_nd_range(&self.queues[0])
            }
            .map_err(|e| err("displace", e))?;
            ev.wait().map_err(|e| err("displace", e))?;
            self.download(&bk, &mut kind)?;
            self.download(&bo, &mut old)?;
            self.stats.displacements += full.len() as u64;
            self.stats.walks += full.len() as u64;
        }
        for (j, &i) in round.iter().enumerate() {
            out[i] = match kind[j] {
                OUT_INSERTED => {
                    self.stats.entries += 1;
                    InsertOutcome::Inserted
                }
                OUT_REPLACED => InsertOutcome::Replaced(old[j]),
                OUT_EVICTED => {
                    self.stats.evictions += 1;
                    InsertOutcome::Evicted(old[j])
                }
                k => return Err(IndexError::Device(format!("insert kernel answered {k}"))),
            };
        }
        Ok(())
    }

    pub fn try_delete(
        &mut self,
        entries: &[(KeyHash, Location)],
        out: &mut [bool],
    ) -> Result<(), IndexError> {
        self.writable()?;
        for t in 0..self.tables.len() {
            let todo: Vec<usize> = (0..entries.len())
                .filter(|&i| self.table_of(&entries[i].0) == t)
                .collect();
            self.delete_in(t, entries, todo, out)?;
        }
        Ok(())
    }

    fn delete_in(
        &mut self,
        t: usize,
        entries: &[(KeyHash, Location)],
        mut todo: Vec<usize>,
        out: &mut [bool],
    ) -> Result<(), IndexError> {
        while !todo.is_empty() {
            let mut round = Vec::new();
            let mut later = Vec::new();
            let mut seen = std::collections::HashSet::new();
            for i in todo {
                if seen.insert(entries[i].0.sig) {
                    round.push(i);
                } else {
                    later.push(i);
                }
            }
            let n = round.len();
            self.launch()?;
            let sigs: Vec<u32> = round.iter().map(|&i| entries[i].0.sig).collect();
            let los: Vec<u32> = round.iter().map(|&i| entries[i].0.lo).collect();
            let locs: Vec<u32> = round.iter().map(|&i| entries[i].1).collect();
            let (bs, bl, bc, bo) = (
                self.upload(&sigs)?,
                self.upload(&los)?,
                self.upload(&locs)?,
                self.scratch(n)?,
            );
            let (nn, mask) = (n as cl_uint, self.mask);
            // SAFETY: arguments match `remove` in index.cl; buffers hold n words.
            let ev = unsafe {
                ExecuteKernel::new(&self.remove)
                    .set_arg(&self.tables[t])
                    .set_arg(&bs)
                    .set_arg(&bl)
                    .set_arg(&bc)
                    .set_arg(&bo)
                    .set_arg(&nn)
                    .set_arg(&mask)
                    .set_global_work_size(Self::global(n))
                    .set_local_work_size(GROUP)
                    .enqueue_nd_range(&self.queues[0])
            }
            .map_err(|e| err("delete", e))?;
            ev.wait().map_err(|e| err("delete", e))?;
            let mut done = vec![0u32; n];
            self.download(&bo, &mut done)?;
            for (j, &i) in round.iter().enumerate() {
                out[i] = done[j] != 0;
                if out[i] {
                    // On a shared table the entry may have been put there by the CPU.
                    self.stats.entries = self.stats.entries.saturating_sub(1);
                }
            }
            todo = later;
        }
        Ok(())
    }
}
