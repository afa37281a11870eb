//! Routing a batch to the partitions that own its keys: the split of a batch by owner, apart
//! from how [`crate::Engine`] reaches a partition (under its lock).

use hkv_index::{hash_key, KeyHash};
use hkv_types::{After, Request, Response, Responses};

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
        group_bytes,
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
                group_bytes,
            );
            part.pin_sink.close(pinned);
        });
    }
}
