//! Routing a batch to the partitions that own its keys: the split of a batch by owner, apart
//! from how [`crate::Engine`] reaches a partition (under its lock).

use hkv_index::{hash_key, KeyHash};
use hkv_types::{After, GroupSpend, ReadStats, Request, Response, Responses, PINNED_VALUE};

use crate::partition::{Partition, ValueBudget};

/// Runs `reqs` on `n` partitions: each key's requests on its owner, in arrival order, each
/// partition's share as one run. `with` gives access to partition `p` for the call it is
/// handed (the engine locks it around that call). Appends one response per request.
pub(crate) fn run_batch(
    n: u32,
    reqs: &[Request<'_>],
    now: u32,
    out: &mut Responses,
    (hashes, owners, sampler): (&mut Vec<KeyHash>, &mut Vec<u32>, &mut crate::Sampler),
    mut with: impl FnMut(u32, &mut dyn FnMut(&mut Partition)),
) {
    out.begin_batch();
    hashes.clear();
    hashes.extend(reqs.iter().map(|r| hash_key(r.key)));
    // One draw for the whole batch: a cost fit sees each batch timed in every partition or
    // in none.
    let timed = sampler.one_in(crate::stats::READ_SAMPLE);
    if n == 1 {
        with(0, &mut |p| p.execute_hashed(reqs, hashes, timed, now, out));
        return;
    }
    owners.clear();
    owners.extend(hashes.iter().map(|h| h.partition(n)));
    let base = out.results.len();
    out.results.resize(base + reqs.len(), Response::Miss);
    out.after.resize(base + reqs.len(), After::default());
    let budget = ValueBudget::of(out);
    let Responses {
        results,
        after,
        data,
        pinned,
        groups,
        ..
    } = out;
    for p in 0..n {
        if !owners.contains(&p) {
            continue;
        }
        with(p, &mut |part| {
            let mine = (0..reqs.len() as u32).filter(|&i| owners[i as usize] == p);
            part.budget = budget;
            part.pin_sink.open(pinned);
            part.run(
                reqs,
                hashes,
                mine,
                timed,
                now,
                &mut results[base..],
                &mut after[base..],
                data,
                groups,
            );
            part.pin_sink.close(pinned);
        });
    }
    if groups.iter().all(|g| g.cut_from == GroupSpend::UNCUT) {
        return;
    }
    // A partition that ran before the one that deferred a client's read may have answered
    // that client's later reads: the client asks for them again from the deferred one on,
    // so they are deferred too and their gets uncounted (a 1,000-key get of 20 KB values
    // on two partitions counted 1,477 hits a time).
    let mut undo = vec![ReadsUndone::default(); n as usize];
    for (i, req) in reqs.iter().enumerate() {
        let r = &mut results[base + i];
        let cut = groups
            .get(req.group as usize)
            .is_some_and(|g| g.is_cut_at(i as u32));
        if *r == Response::Deferred || !req.deferrable || !cut {
            continue;
        }
        undo[owners[i] as usize].add(i as u32, req, r);
        *r = Response::Deferred;
    }
    for (p, u) in undo.iter().enumerate() {
        if u.reads > 0 {
            with(p as u32, &mut |part| part.undo_reads(u, reqs, hashes));
        }
    }
}

/// What a partition counted for reads that turned out to come after their client's
/// deferred one.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReadsUndone {
    pub reads: u64,
    /// In `get_hits` and `get_misses` (`me` counts in neither).
    pub hits: u64,
    pub misses: u64,
    pub pinned: u64,
    /// The requests that found their item (each counted in its slab class, and changed its
    /// meta state) and what they found: see [`UndoneHit`].
    pub found: Vec<UndoneHit>,
}

/// A read hit taken back: its request, and the item's state as it found it (
/// [`Response::Value`]'s `atime` and `bits`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct UndoneHit {
    pub index: u32,
    pub atime: u32,
    pub bits: u8,
}

impl ReadsUndone {
    fn add(&mut self, index: u32, req: &Request<'_>, r: &Response) {
        self.reads += 1;
        let hit = match *r {
            Response::Value {
                offset,
                atime,
                bits,
                ..
            } => {
                self.pinned += u64::from(offset >= PINNED_VALUE);
                self.found.push(UndoneHit { index, atime, bits });
                true
            }
            _ => false,
        };
        if req.meta.read_stats != ReadStats::Debug {
            self.hits += u64::from(hit);
            self.misses += u64::from(!hit);
        }
    }
}
